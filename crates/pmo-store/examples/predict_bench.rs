//! Predictive decryption benchmark: read a protected PMO in sequential, backward, strided and
//! random page order with prediction off, at fixed depths and adaptive, and print the median
//! time per page, the speed-up against depth 0, the fault hit rate and the predictor's counters.
//!
//! ```text
//! cargo run --release -p pmo-store --example predict_bench -- \
//!     [--size-mib 64] [--repeats 5] [--scheme secure] [--depths 0,1,2,4,8,16,adaptive]
//!     [--workloads seq,back,stride,runs,random] [--variants byte,page] [--stride 3] [--dir DIR]
//! ```
//!
//! Workloads: `seq` (forward), `back` (backward), `stride` (every `--stride`-th page, then the
//! next offset), `runs` (runs of 16 pages forward, the runs in random order: short streams),
//! `random` (a fixed random permutation). Each measurement attaches the PMO read-only, touches every page once in the workload's
//! order (`byte`: one byte per page; `page`: the whole page), then detaches; only the touch
//! loop is timed. With `--threads N` the order is cut into N contiguous parts read by N threads
//! at once (N concurrent streams); CPU time is then summed over the readers. Within a repeat the depths run in a rotated order so that drift on this shared
//! machine spreads over all of them. Every pass checks the bytes it read against the data
//! written at setup. The pool lives in `--dir` (default `/dev/shm`, else the temp dir).

use std::path::PathBuf;
use std::time::Instant;

use pmo_store::predict::PredictConfig;
use pmo_store::{AttachOptions, Attachment, KdfParams, Perm, Pool, PoolOptions, Scheme};

const KEY: &[u8] = b"predict-bench-key";
const NAME: &str = "bench";
const PAGE: usize = 4096;

struct Args {
    size_mib: u64,
    repeats: usize,
    scheme: String,
    depths: Vec<PredictConfig>,
    workloads: Vec<String>,
    variants: Vec<String>,
    stride: u64,
    dir: PathBuf,
    spin_us: u32,
    workers: usize,
    streams: Option<usize>,
    threads: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        size_mib: 64,
        repeats: 5,
        scheme: "secure".into(),
        depths: ["0", "1", "2", "4", "8", "16", "adaptive"]
            .iter()
            .map(|d| PredictConfig::parse(d).map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()?,
        workloads: ["seq", "back", "stride", "runs", "random"]
            .map(String::from)
            .to_vec(),
        variants: ["byte", "page"].map(String::from).to_vec(),
        stride: 3,
        spin_us: 0,
        workers: 1,
        streams: None,
        threads: 1,
        dir: if std::path::Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        },
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().ok_or(format!("{flag} needs a value"));
        let list = |v: String| {
            v.split(',')
                .map(|s| s.trim().to_string())
                .collect::<Vec<_>>()
        };
        match flag.as_str() {
            "--size-mib" => a.size_mib = val()?.parse().map_err(|e| format!("{e}"))?,
            "--repeats" => a.repeats = val()?.parse().map_err(|e| format!("{e}"))?,
            "--scheme" => a.scheme = val()?,
            "--stride" => a.stride = val()?.parse().map_err(|e| format!("{e}"))?,
            "--dir" => a.dir = PathBuf::from(val()?),
            "--spin-us" => a.spin_us = val()?.parse().map_err(|e| format!("{e}"))?,
            "--workers" => a.workers = val()?.parse().map_err(|e| format!("{e}"))?,
            "--threads" => a.threads = val()?.parse().map_err(|e| format!("{e}"))?,
            "--streams" => a.streams = Some(val()?.parse().map_err(|e| format!("{e}"))?),
            "--workloads" => a.workloads = list(val()?),
            "--variants" => a.variants = list(val()?),
            "--depths" => {
                a.depths = list(val()?)
                    .iter()
                    .map(|d| PredictConfig::parse(d).map_err(|e| e.to_string()))
                    .collect::<Result<_, _>>()?
            }
            "--help" | "-h" => {
                return Err(
                    "usage: predict_bench [--size-mib N] [--repeats N] [--scheme NAME] \
                     [--depths 0,1,2,4,8,16,adaptive] [--workloads seq,back,stride,runs,random] \
                     [--variants byte,page] [--stride PAGES] [--dir DIR] [--spin-us US] [--workers N] [--streams N] [--threads N]"
                        .into(),
                )
            }
            other => return Err(format!("unknown flag {other} (try --help)")),
        }
    }
    for d in &mut a.depths {
        d.idle_spin_us = a.spin_us;
        d.workers = a.workers;
        if let Some(n) = a.streams {
            d.streams = n;
        }
        d.validate().map_err(|e| e.to_string())?;
    }
    if a.size_mib == 0 || a.repeats == 0 || a.stride == 0 || a.depths.is_empty() || a.threads == 0 {
        return Err("sizes, repeats, stride, threads and the depth list must be non-zero".into());
    }
    Ok(a)
}

/// Pages per run of the `runs` workload.
const RUN_PAGES: u64 = 16;

/// 0..n in a fixed pseudo-random order.
fn shuffled(n: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (0..n).collect();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for i in (1..v.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
    v
}

/// Page order of a workload over `pages` pages; every page exactly once.
fn order(workload: &str, pages: u64, stride: u64) -> Result<Vec<u64>, String> {
    Ok(match workload {
        "seq" => (0..pages).collect(),
        "back" => (0..pages).rev().collect(),
        "stride" => (0..stride)
            .flat_map(|start| (start..pages).step_by(stride as usize))
            .collect(),
        "random" => shuffled(pages),
        // Runs of RUN_PAGES pages read forward, the runs in random order: streams that stop
        // soon, where a deep window mostly predicts pages nobody reads next.
        "runs" => shuffled(pages.div_ceil(RUN_PAGES))
            .into_iter()
            .flat_map(|r| r * RUN_PAGES..((r + 1) * RUN_PAGES).min(pages))
            .collect(),
        other => return Err(format!("unknown workload {other}")),
    })
}

/// Byte `i` of page `p` as written at setup.
fn pattern(p: u64, i: usize) -> u8 {
    (p as u8) ^ (i as u8).wrapping_mul(31) ^ ((p >> 8) as u8)
}

/// CPU time (user + system) the calling thread has used, nanoseconds.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant the kernel knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

struct Sample {
    ns_per_page: f64,
    /// CPU time of the reading thread per page (fault service included, time spent preempted
    /// by other processes excluded).
    cpu_ns_per_page: f64,
    faults: u64,
    stats: Option<pmo_store::PredictStats>,
}

/// Read `order` (one byte or the whole of each page); returns (pages read wrong, CPU ns).
fn read_pages(a: &Attachment, order: &[u64], whole_page: bool) -> Result<(u64, u64), String> {
    let mut buf = vec![0u8; PAGE];
    let mut byte = [0u8; 1];
    let mut mismatches = 0u64;
    let c0 = thread_cpu_ns();
    for &p in order {
        let off = p as usize * PAGE;
        if whole_page {
            a.read_at(off, &mut buf).map_err(|e| e.to_string())?;
            mismatches +=
                u64::from(buf[PAGE - 1] != pattern(p, PAGE - 1) || buf[0] != pattern(p, 0));
        } else {
            a.read_at(off + 7, &mut byte).map_err(|e| e.to_string())?;
            mismatches += u64::from(byte[0] != pattern(p, 7));
        }
    }
    Ok((mismatches, thread_cpu_ns().saturating_sub(c0)))
}

/// One measurement: attach, read `order` split into `threads` contiguous parts (one reader
/// thread each, so one stream per thread), detach.
fn pass(
    pool: &Pool,
    cfg: PredictConfig,
    order: &[u64],
    whole_page: bool,
    threads: usize,
) -> Result<Sample, String> {
    let opts = AttachOptions {
        predict: Some(cfg),
        ..Default::default()
    };
    let a = pool
        .attach_with(NAME, Perm::Read, KEY, opts)
        .map_err(|e| e.to_string())?;
    let part = order.len().div_ceil(threads.max(1));
    let t0 = Instant::now();
    let results: Vec<Result<(u64, u64), String>> = if threads <= 1 {
        vec![read_pages(&a, order, whole_page)]
    } else {
        std::thread::scope(|s| {
            let handles: Vec<_> = order
                .chunks(part)
                .map(|chunk| s.spawn(|| read_pages(&a, chunk, whole_page)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err("reader panicked".into())))
                .collect()
        })
    };
    let dt = t0.elapsed();
    let mut mismatches = 0;
    let mut cpu_ns = 0;
    for r in results {
        let (m, c) = r?;
        mismatches += m;
        cpu_ns += c;
    }
    let faults = a.view_stats().faults;
    let stats = a.predict_stats();
    a.detach().map_err(|e| e.to_string())?;
    if mismatches > 0 {
        return Err(format!(
            "{mismatches} pages read wrong with prediction {}",
            cfg.label()
        ));
    }
    Ok(Sample {
        ns_per_page: dt.as_nanos() as f64 / order.len() as f64,
        cpu_ns_per_page: cpu_ns as f64 / order.len() as f64,
        faults,
        stats,
    })
}

/// Cost of the fault-path hook alone: `notify` over the random order (no stream forms, so no
/// request is made), with no worker; ns per call, median of `repeats`.
fn notify_cost(order: &[u64], pages: u64, repeats: usize) -> Result<f64, String> {
    let mut v = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        let hook = pmo_store::predict::PredictHook::new(PredictConfig::fixed(8), pages)
            .map_err(|e| e.to_string())?
            .ok_or("no hook")?;
        let t0 = Instant::now();
        for &p in order {
            hook.notify(p);
        }
        v.push(t0.elapsed().as_nanos() as f64 / order.len() as f64);
    }
    Ok(median(&mut v))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn run() -> Result<(), String> {
    let args = parse_args()?;
    // Experiment: PREDICT_BENCH_IDLE_THREAD=1 keeps one more (parked) thread in the process for
    // the whole run, to tell the cost of a multi-threaded process from the predictor's own.
    let _idle = std::env::var_os("PREDICT_BENCH_IDLE_THREAD").map(|_| {
        std::thread::spawn(|| loop {
            std::thread::park();
        })
    });
    let size = args.size_mib << 20;
    let pages = size / PAGE as u64;
    let path = args
        .dir
        .join(format!("pmo-predict-bench-{}.pool", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let scheme = Scheme::from_name(&args.scheme).map_err(|e| e.to_string())?;
    let popts = PoolOptions {
        kdf: KdfParams::INSECURE_FAST,
        scheme,
        preallocate: true,
        ..Default::default()
    };
    struct Cleanup(PathBuf);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    let pool = Pool::create(&path, size * 3 + (32 << 20), &popts).map_err(|e| e.to_string())?;
    let _cleanup = Cleanup(path.clone());
    pool.pcreate(NAME, size, KEY).map_err(|e| e.to_string())?;
    {
        let a = pool
            .attach(NAME, Perm::Write, KEY)
            .map_err(|e| e.to_string())?;
        let mut buf = vec![0u8; PAGE];
        for p in 0..pages {
            for (i, b) in buf.iter_mut().enumerate() {
                *b = pattern(p, i);
            }
            a.write_at(p as usize * PAGE, &buf)
                .map_err(|e| e.to_string())?;
        }
        a.psync().map_err(|e| e.to_string())?;
        a.detach().map_err(|e| e.to_string())?;
    }
    println!(
        "predict_bench: {} MiB {} PMO ({} pages), fault mechanism {}, {} reader thread(s), {} \
         repeats, medians; pool in {}",
        args.size_mib,
        args.scheme,
        pages,
        pmo_store::attach::fault_mechanism_name(),
        args.threads,
        args.repeats,
        args.dir.display()
    );
    println!(
        "fault-path hook (PredictHook::notify) alone, random order: {:.1} ns per fault",
        notify_cost(&order("random", pages, 1)?, pages, args.repeats.max(5))?
    );
    {
        // The floor of a worker's page: attach with populate fills every page through the same
        // source in batches of 64 pages per UFFDIO_COPY, on one thread, with no fault at all.
        let mut v = Vec::new();
        for _ in 0..3 {
            let opts = AttachOptions {
                populate: true,
                ..Default::default()
            };
            let a = pool
                .attach_with(NAME, Perm::Read, KEY, opts)
                .map_err(|e| e.to_string())?;
            v.push(a.attach_ns() as f64 / pages as f64);
            a.detach().map_err(|e| e.to_string())?;
        }
        println!(
            "populate at attach (batched fill, no faults): {:.0} ns per page",
            median(&mut v)
        );
    }
    for workload in &args.workloads {
        let ord = order(workload, pages, args.stride)?;
        for variant in &args.variants {
            let whole = match variant.as_str() {
                "byte" => false,
                "page" => true,
                other => return Err(format!("unknown variant {other}")),
            };
            let n = args.depths.len();
            let mut times: Vec<Vec<f64>> = vec![Vec::new(); n];
            let mut faults: Vec<Vec<f64>> = vec![Vec::new(); n];
            let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); n];
            let mut last: Vec<Option<pmo_store::PredictStats>> = vec![None; n];
            for r in 0..args.repeats {
                for j in 0..n {
                    let i = (j + r) % n;
                    let s = pass(&pool, args.depths[i], &ord, whole, args.threads)?;
                    times[i].push(s.ns_per_page);
                    faults[i].push(s.faults as f64);
                    cpu[i].push(s.cpu_ns_per_page);
                    last[i] = s.stats;
                    if std::env::var_os("PREDICT_BENCH_VERBOSE").is_some() {
                        eprintln!(
                            "  pass {r} depth {} {:.0} ns/page faults {} {:?}",
                            args.depths[i].label(),
                            s.ns_per_page,
                            s.faults,
                            s.stats
                        );
                    }
                }
            }
            println!();
            println!(
                "workload {workload}{}, read {}:",
                match workload.as_str() {
                    "stride" => format!(" ({} pages)", args.stride),
                    "runs" => format!(" ({RUN_PAGES} pages forward, runs in random order)"),
                    _ => String::new(),
                },
                if whole {
                    "whole page"
                } else {
                    "one byte per page"
                }
            );
            println!(
                "  {:>10} {:>10} {:>8} {:>10} {:>8} {:>9} {:>9} {:>9} {:>7} {:>7} {:>9}",
                "depth",
                "ns/page",
                "speedup",
                "cpu ns/pg",
                "cpu gain",
                "hit rate",
                "installed",
                "present",
                "lost",
                "late",
                "accuracy"
            );
            let base = median(&mut times[0].clone());
            let cpu_base = median(&mut cpu[0].clone());
            for i in 0..n {
                let t = median(&mut times[i]);
                let f = median(&mut faults[i]);
                let u = median(&mut cpu[i]);
                let (installed, present, lost, late, acc) = match last[i] {
                    Some(s) => (
                        s.installed.to_string(),
                        s.skipped_present.to_string(),
                        s.lost_race.to_string(),
                        s.late.to_string(),
                        s.accuracy()
                            .map(|a| format!("{:.1}%", a * 100.0))
                            .unwrap_or_else(|| "-".into()),
                    ),
                    None => ("-".into(), "-".into(), "-".into(), "-".into(), "-".into()),
                };
                println!(
                    "  {:>10} {:>10.0} {:>7.2}x {:>10.0} {:>7.2}x {:>8.1}% {:>9} {:>9} {:>7} {:>7} {:>9}",
                    args.depths[i].label(),
                    t,
                    base / t,
                    u,
                    cpu_base / u,
                    (1.0 - f / pages as f64) * 100.0,
                    installed,
                    present,
                    lost,
                    late,
                    acc
                );
            }
        }
    }
    println!();
    println!(
        "speedup = median time at depth {} / median time; cpu ns/pg = CPU time of the reading \
         thread(s) per page (excludes time other processes took from it), cpu gain likewise; hit rate = 1 - faults / pages touched \
         (exact); installed, lost (decrypted but the application faulted first), late and \
         accuracy (stream-level, inferred) from the last repeat",
        args.depths[0].label()
    );
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("predict_bench: {e}");
        std::process::exit(1);
    }
}

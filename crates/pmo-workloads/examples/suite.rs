//! The benchmark suite: every workload under schemes `none`, `wedi`, `sp-ip` and `secure` in a
//! pool on `/dev/shm`, a table of wall times normalised to `wedi`, and tidy CSV.
//!
//! ```text
//! cargo run --release -p pmo-workloads --example suite -- [--size tiny|default|paper]
//!     [--threads N,..] [--k K,..] [--repeats R] [--schemes a,b,..] [--workloads a,b,..]
//!     [--iters-per-psync N | --interval-ms MS] [--csv FILE] [--dir DIR]
//! ```
//! `--threads` and `--k` take lists (thread scaling, attach-session sensitivity as in LOaPP
//! Fig. 7); one table is printed per (threads, K). The psync tempo is calibrated per workload
//! and thread count from the DRAM run to `default_psync_interval` unless `--iters-per-psync`
//! or `--interval-ms` says otherwise. Each figure is the median over `--repeats` runs (default 3). The DRAM reference is computed
//! once per workload and shared by every scheme; every run is verified against it.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use pmo_store::{KdfParams, Pool, PoolOptions, Scheme};
use pmo_workloads::{
    default_psync_interval, run_with_reference, Calibration, Reference, RunConfig, RunResult, Size,
    Workload,
};

struct Args {
    size: Size,
    threads: Vec<usize>,
    k: Vec<usize>,
    interval_ms: Option<f64>,
    repeats: usize,
    schemes: Vec<String>,
    workloads: Vec<Workload>,
    iters_per_psync: Option<usize>,
    csv: PathBuf,
    dir: PathBuf,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut a = Args {
        size: Size::Default,
        threads: vec![1],
        k: vec![2],
        interval_ms: None,
        repeats: 3,
        schemes: ["none", "wedi", "sp-ip", "secure"]
            .map(String::from)
            .to_vec(),
        workloads: Workload::ALL.to_vec(),
        iters_per_psync: None,
        csv: PathBuf::from("workloads.csv"),
        dir: PathBuf::from(if std::path::Path::new("/dev/shm").is_dir() {
            "/dev/shm"
        } else {
            "/tmp"
        }),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--size" => a.size = Size::from_name(&val()?)?,
            "--threads" => a.threads = list(&val()?)?,
            "--k" => a.k = list(&val()?)?,
            "--interval-ms" => a.interval_ms = Some(val()?.parse()?),
            "--repeats" => a.repeats = val()?.parse::<usize>()?.clamp(1, 100),
            "--schemes" => a.schemes = val()?.split(',').map(String::from).collect(),
            "--workloads" => {
                a.workloads = val()?
                    .split(',')
                    .map(Workload::from_name)
                    .collect::<Result<_, _>>()?
            }
            "--iters-per-psync" => a.iters_per_psync = Some(val()?.parse()?),
            "--csv" => a.csv = val()?.into(),
            "--dir" => a.dir = val()?.into(),
            "--help" | "-h" => {
                println!("see the header of examples/suite.rs");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other}"),
        }
    }
    Ok(a)
}

fn list(s: &str) -> anyhow::Result<Vec<usize>> {
    s.split(',')
        .map(|x| {
            x.trim()
                .parse::<usize>()
                .with_context(|| format!("'{x}' in '{s}'"))
        })
        .collect()
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    let n = v.len();
    if n == 0 {
        0
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2
    }
}

/// Median of each timed field over the repeats (counters are the same in every repeat).
fn summarise(runs: &[RunResult]) -> RunResult {
    let m = |f: fn(&RunResult) -> u64| median(runs.iter().map(f).collect());
    RunResult {
        wall_ns: m(|r| r.wall_ns),
        attach_ns: m(|r| r.attach_ns),
        psync_ns: m(|r| r.psync_ns),
        detach_ns: m(|r| r.detach_ns),
        compute_ns: m(|r| r.compute_ns),
        fill_ns: m(|r| r.fill_ns),
        setup_ns: m(|r| r.setup_ns),
        verified: runs.iter().all(|r| r.verified),
        ..runs[0].clone()
    }
}

fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let schemes: Vec<Scheme> = args
        .schemes
        .iter()
        .map(|s| Scheme::from_name(s))
        .collect::<Result<_, _>>()?;
    let max_bytes = args
        .workloads
        .iter()
        .map(|w| w.len_bytes(w.dims(args.size)) as u64)
        .max()
        .unwrap_or(0);
    let pool_path = args
        .dir
        .join(format!("pmo-workloads-suite-{}.pool", std::process::id()));
    let _ = std::fs::remove_file(&pool_path);
    let pool = Pool::create(
        &pool_path,
        3 * max_bytes + (64 << 20),
        &PoolOptions {
            kdf: KdfParams::INSECURE_FAST,
            ..Default::default()
        },
    )
    .with_context(|| format!("create pool {}", pool_path.display()))?;
    let result = suite(&args, &schemes, &pool);
    drop(pool);
    let _ = std::fs::remove_file(&pool_path);
    result
}

fn suite(args: &Args, schemes: &[Scheme], pool: &Pool) -> anyhow::Result<()> {
    println!(
        "pmo-workloads suite: size {}, threads {:?}, K {:?}, {} repeat(s), fault mechanism {}",
        args.size.name(),
        args.threads,
        args.k,
        args.repeats,
        pmo_store::attach::fault_mechanism_name()
    );
    // (workload index, threads, K, scheme) -> medians
    let mut rows: BTreeMap<(usize, usize, usize, String), RunResult> = BTreeMap::new();
    let mut csv = Vec::new();
    writeln!(
        csv,
        "bench,workload,dims,scheme,threads,session_psyncs,iters_per_psync,metric,value,unit,samples"
    )?;
    for (wi, &w) in args.workloads.iter().enumerate() {
        let dims = w.dims(args.size);
        for &threads in &args.threads {
            let reference = Reference::compute(w, dims, threads)?;
            let interval = match args.interval_ms {
                Some(ms) => Duration::from_secs_f64(ms.max(0.0) / 1e3),
                None => default_psync_interval(w, dims),
            };
            let cal = Calibration::from_reference(&reference, interval);
            let iters = args.iters_per_psync.unwrap_or(cal.iters_per_psync);
            println!(
                "{w} ({dims}, {:.1} MiB), {threads} thread(s): DRAM run {:.3} s, {} steps, psync interval target {:.1} ms -> {} iterations per psync ({} psyncs)",
                w.len_bytes(dims) as f64 / (1 << 20) as f64,
                reference.compute_ns as f64 / 1e9,
                cal.steps,
                interval.as_secs_f64() * 1e3,
                iters,
                cal.steps.div_ceil(iters.max(1)),
            );
            for &k in &args.k {
                for &scheme in schemes {
                    let cfg = RunConfig {
                        threads,
                        scheme,
                        session_psyncs: k,
                        iters_per_psync: Some(iters),
                        dims,
                        ..RunConfig::new(w, args.size)
                    };
                    let runs = (0..args.repeats)
                        .map(|_| run_with_reference(pool, &cfg, &reference))
                        .collect::<Result<Vec<_>, _>>()?;
                    let r = summarise(&runs);
                    if !r.verified {
                        bail!(
                            "{w} under {scheme}: verification failed: {:?}",
                            runs.iter().find_map(|r| r.verify_error.clone())
                        );
                    }
                    let p = format!("workloads,{w},{dims},{scheme},{threads},{k},{iters}");
                    let samples = args.repeats;
                    for (metric, value, unit) in r.metrics() {
                        writeln!(csv, "{p},{metric},{value},{unit},{samples}")?;
                    }
                    println!(
                        "  K={k:<2} {:<7} wall {:>8.1} ms = attach {:>7.1} + psync {:>7.1} + detach {:>5.1} + compute {:>8.1} (fill {:>6.1}); {} psyncs, {} sessions, {} pages, {} faults, verified",
                        scheme.name(),
                        r.wall_ns as f64 / 1e6,
                        r.attach_ns as f64 / 1e6,
                        r.psync_ns as f64 / 1e6,
                        r.detach_ns as f64 / 1e6,
                        r.compute_ns as f64 / 1e6,
                        r.fill_ns as f64 / 1e6,
                        r.psyncs,
                        r.sessions,
                        r.pages_committed,
                        r.faults,
                    );
                    rows.insert((wi, threads, k, scheme.name()), r);
                }
            }
        }
    }
    std::fs::write(&args.csv, csv).with_context(|| format!("write {}", args.csv.display()))?;
    for &threads in &args.threads {
        for &k in &args.k {
            print_table(args, schemes, &rows, threads, k);
        }
    }
    println!("\nCSV: {}", args.csv.display());
    Ok(())
}

/// Wall time normalised to wedi, per workload, and the geometric mean.
fn print_table(
    args: &Args,
    schemes: &[Scheme],
    rows: &BTreeMap<(usize, usize, usize, String), RunResult>,
    threads: usize,
    k: usize,
) {
    println!(
        "\nwall time normalised to wedi, {threads} thread(s), K={k} (lower is faster; wedi = 1.00)"
    );
    print!("{:<10}", "workload");
    for s in schemes {
        print!("{:>9}", s.name());
    }
    println!();
    let mut logs: BTreeMap<String, (f64, usize)> = BTreeMap::new();
    for (wi, w) in args.workloads.iter().enumerate() {
        let base = rows
            .get(&(wi, threads, k, "wedi".to_string()))
            .map(|r| r.wall_ns as f64);
        print!("{:<10}", w.name());
        for s in schemes {
            match (base, rows.get(&(wi, threads, k, s.name()))) {
                (Some(b), Some(r)) if b > 0.0 => {
                    let x = r.wall_ns as f64 / b;
                    print!("{x:>9.2}");
                    let e = logs.entry(s.name()).or_insert((0.0, 0));
                    e.0 += x.ln();
                    e.1 += 1;
                }
                _ => print!("{:>9}", "-"),
            }
        }
        println!();
    }
    print!("{:<10}", "geomean");
    for s in schemes {
        match logs.get(&s.name()) {
            Some(&(sum, n)) if n > 0 => print!("{:>9.2}", (sum / n as f64).exp()),
            _ => print!("{:>9}", "-"),
        }
    }
    println!();
}

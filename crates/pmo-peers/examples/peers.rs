//! Runs every peer benchmark quickly (well under a minute with the defaults), prints a table and
//! writes the same rows as CSV.
//!
//! ```text
//! crates/pmo-peers/install-deps.sh
//! PMEM_IS_PMEM_FORCE=1 cargo run --release -p pmo-peers --example peers -- target/peers.csv
//! ```
//! Peers: `pmdk` (libpmemobj on emulated PM), `libpmem` (`pmem_memcpy_persist`: the floor under
//! any durable write on that medium), `lmdb`, `glibc` (malloc/free in a C loop, the
//! volatile bound) and `glibc-rs` (the same malloc/free through the Rust `BenchAllocator`
//! harness that pmo's allocator uses: the gap to `glibc` is the harness's own cost).
//! Every figure is the median of `--repeats` timed samples of `--sample-ms` each (per thread),
//! after one untimed warm-up. The machine is shared and noisy: compare figures from one run.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use pmo_peers::{
    alloc_free_with, ensure_pmem_force, glibc_alloc_free, glibc_larson, larson_with,
    lmdb_put_commit, pmdk_alloc_free, pmdk_larson, pmdk_tx_alloc_link, pmdk_tx_update,
    pmem_memcpy_persist, GlibcMalloc, LarsonParams, Measurement, Options, Work,
};

/// Block sizes of the POSEIDON microbenchmark.
const ALLOC_SIZES_BYTES: [u64; 6] = [64, 256, 1024, 4096, 64 << 10, 1 << 20];
/// Thread counts (this machine has 2 cores: 4 threads time-share them).
const THREAD_COUNTS: [usize; 3] = [1, 2, 4];

#[derive(Parser, Debug)]
#[command(about = "Benchmarks pmo's peers: PMDK libpmemobj, LMDB, glibc malloc")]
struct Args {
    /// Where to write the CSV.
    csv: PathBuf,
    /// Also write the rows, with every sample, as JSON to this path.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Directory of the emulated persistent memory (pools and LMDB environments).
    #[arg(long, default_value = "/dev/shm")]
    dir: PathBuf,
    /// Directory on a real disk for the LMDB fsync figure (default: the temporary directory).
    #[arg(long)]
    disk_dir: Option<PathBuf>,
    /// Skip the LMDB-on-disk figure.
    #[arg(long)]
    no_disk: bool,
    /// Timed samples per figure; the figure is their median.
    #[arg(long, default_value_t = 5)]
    repeats: usize,
    /// Length of one sample, per thread, in milliseconds.
    #[arg(long, default_value_t = 40)]
    sample_ms: u64,
    /// Seed of every random choice.
    #[arg(long, default_value_t = Options::default().seed)]
    seed: u64,
    /// Run only the benchmarks whose name contains this (alloc_free, larson, memcpy_persist,
    /// tx_update, tx_alloc_link, put_commit).
    #[arg(long)]
    only: Option<String>,
    /// Contention filter: retake a sample (up to 2 attempts per repeat) whose threads got less
    /// than this share of the CPU they could get; 0 keeps every sample. The table's "aside"
    /// column counts the samples set aside.
    #[arg(long, default_value_t = 0.9)]
    min_cpu_share: f64,
    /// Run the whole suite this many times and keep, for each row, the run whose threads got
    /// the most CPU (for a machine shared with other work; each run takes under a minute).
    #[arg(long, default_value_t = 1)]
    best_of: usize,
    /// Let PMDK run even if libpmem does not treat the pool as persistent memory.
    #[arg(long)]
    allow_non_pmem: bool,
}

struct Row {
    benchmark: &'static str,
    peer: &'static str,
    medium: String,
    size_bytes: u64,
    threads: usize,
    measurement: Measurement,
}

fn main() -> Result<()> {
    // Before any thread starts and before any PMDK call (libpmem reads it once).
    ensure_pmem_force();
    let args = Args::parse();
    if args.sample_ms == 0 || args.sample_ms > 10_000 {
        bail!("--sample-ms must be in 1..=10000");
    }
    let opts = Options {
        dir: args.dir.clone(),
        repeats: args.repeats,
        seed: args.seed,
        require_pmem: !args.allow_non_pmem,
        min_cpu_share: args.min_cpu_share,
    };
    if args.best_of == 0 || args.best_of > 20 {
        bail!("--best-of must be in 1..=20");
    }
    let load_before = load_average();
    let started = Instant::now();
    let mut rows: Vec<Row> = Vec::new();
    for _ in 0..args.best_of {
        let run = run_suite(&args, &opts)?;
        if rows.is_empty() {
            rows = run;
            continue;
        }
        // Keep, row by row, the run whose threads got the larger CPU share.
        for (kept, new) in rows.iter_mut().zip(run) {
            if new.measurement.cpu_share > kept.measurement.cpu_share {
                *kept = new;
            }
        }
    }

    print_table(&rows, &opts, args.sample_ms, started.elapsed());
    println!(
        "load average (1 min) before {load_before}, after {}: figures taken while other \
         processes compete for the cores are low",
        load_average()
    );
    write_csv(&args.csv, &rows, &opts)
        .with_context(|| format!("writing {}", args.csv.display()))?;
    println!("CSV written to {}", args.csv.display());
    if let Some(json) = &args.json {
        write_json(json, &rows, &opts, args.sample_ms)
            .with_context(|| format!("writing {}", json.display()))?;
        println!("JSON written to {}", json.display());
    }
    Ok(())
}

/// Runs every selected benchmark once; the rows come in a fixed order for given arguments.
fn run_suite(args: &Args, opts: &Options) -> Result<Vec<Row>> {
    let opts = opts.clone();
    let sample = Duration::from_millis(args.sample_ms);
    let work = Work::Duration(sample);
    let shm = args.dir.display().to_string();
    let mut rows = Vec::new();
    let wanted = |name: &str| match args.only.as_deref() {
        Some(only) => name.contains(only),
        None => true,
    };

    for &size in ALLOC_SIZES_BYTES.iter().filter(|_| wanted("alloc_free")) {
        for &threads in &THREAD_COUNTS {
            let m = pmdk_alloc_free(&opts, size, threads, work)
                .with_context(|| format!("PMDK alloc/free {size} B x{threads}"))?;
            rows.push(row("alloc_free", "pmdk", &shm, size, threads, m));
            let m = glibc_alloc_free(&opts, size, threads, work)
                .with_context(|| format!("glibc alloc/free {size} B x{threads}"))?;
            rows.push(row("alloc_free", "glibc", "dram", size, threads, m));
            let m = alloc_free_with(&opts, &GlibcMalloc, size, threads, work)
                .with_context(|| format!("glibc (Rust harness) alloc/free {size} B x{threads}"))?;
            rows.push(row("alloc_free", "glibc-rs", "dram", size, threads, m));
        }
    }

    for &threads in THREAD_COUNTS.iter().filter(|_| wanted("larson_64_1024")) {
        let params = LarsonParams {
            work_per_epoch: Work::Duration(sample / 2),
            ..LarsonParams::standard(threads)
        };
        let m = pmdk_larson(&opts, &params).with_context(|| format!("PMDK Larson x{threads}"))?;
        rows.push(row(
            "larson_64_1024",
            "pmdk",
            &shm,
            params.max_bytes,
            threads,
            m,
        ));
        let m = glibc_larson(&opts, &params).with_context(|| format!("glibc Larson x{threads}"))?;
        rows.push(row(
            "larson_64_1024",
            "glibc",
            "dram",
            params.max_bytes,
            threads,
            m,
        ));
        let m = larson_with(&opts, &GlibcMalloc, &params)
            .with_context(|| format!("glibc (Rust harness) Larson x{threads}"))?;
        rows.push(row(
            "larson_64_1024",
            "glibc-rs",
            "dram",
            params.max_bytes,
            threads,
            m,
        ));
    }

    for len in [64, 4096].into_iter().filter(|_| wanted("memcpy_persist")) {
        let m = pmem_memcpy_persist(&opts, len, work)
            .with_context(|| format!("libpmem memcpy_persist {len} B"))?;
        rows.push(row("memcpy_persist", "libpmem", &shm, len, 1, m));
    }
    for len in [64, 4096].into_iter().filter(|_| wanted("tx_update")) {
        let m = pmdk_tx_update(&opts, len, work).with_context(|| format!("PMDK tx {len} B"))?;
        rows.push(row("tx_update", "pmdk", &shm, len, 1, m));
    }
    for size in [64, 256, 4096]
        .into_iter()
        .filter(|_| wanted("tx_alloc_link"))
    {
        let m = pmdk_tx_alloc_link(&opts, size, work)
            .with_context(|| format!("PMDK tx alloc+link {size} B"))?;
        rows.push(row("tx_alloc_link", "pmdk", &shm, size, 1, m));
    }

    for value in [64, 4096].into_iter().filter(|_| wanted("put_commit_sync")) {
        let m = lmdb_put_commit(&opts, value, work)
            .with_context(|| format!("LMDB put+commit {value} B"))?;
        rows.push(row("put_commit_sync", "lmdb", &shm, value, 1, m));
    }
    if !args.no_disk && wanted("put_commit_sync") {
        let disk_dir = args.disk_dir.clone().unwrap_or_else(std::env::temp_dir);
        // I/O-bound: the threads wait on fsync, so their CPU share says nothing of contention.
        let disk_opts = Options {
            dir: disk_dir.clone(),
            min_cpu_share: 0.0,
            ..opts.clone()
        };
        let medium = disk_dir.display().to_string();
        for value in [64, 4096] {
            let m = lmdb_put_commit(&disk_opts, value, work)
                .with_context(|| format!("LMDB put+commit {value} B on {medium}"))?;
            rows.push(row("put_commit_sync", "lmdb", &medium, value, 1, m));
        }
    }
    Ok(rows)
}

/// The 1-minute load average, or "?" where /proc/loadavg is missing.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".to_string())
}

fn row(
    benchmark: &'static str,
    peer: &'static str,
    medium: &str,
    size_bytes: u64,
    threads: usize,
    measurement: Measurement,
) -> Row {
    Row {
        benchmark,
        peer,
        medium: medium.to_string(),
        size_bytes,
        threads,
        measurement,
    }
}

fn human_size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

fn human_figure(m: &Measurement) -> String {
    match m.unit {
        pmo_peers::Unit::OpsPerSec if m.median >= 1e6 => format!("{:.2} M ops/s", m.median / 1e6),
        pmo_peers::Unit::OpsPerSec => format!("{:.1} k ops/s", m.median / 1e3),
        pmo_peers::Unit::MicrosPerOp => format!("{:.2} us/op", m.median),
    }
}

fn print_table(rows: &[Row], opts: &Options, sample_ms: u64, took: Duration) {
    println!(
        "pmo-peers: medians of {} samples of {sample_ms} ms per thread, seed {:#x}, {} cores",
        opts.repeats,
        opts.seed,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "{:<16} {:<8} {:<10} {:>9} {:>3} {:>16}  {:>21} {:>5} {:>5}",
        "benchmark", "peer", "medium", "size", "thr", "median", "min .. max", "cpu", "aside"
    );
    for r in rows {
        let m = &r.measurement;
        let spread = match m.unit {
            pmo_peers::Unit::OpsPerSec => format!("{:.2}..{:.2} M", m.min / 1e6, m.max / 1e6),
            pmo_peers::Unit::MicrosPerOp => format!("{:.2}..{:.2} us", m.min, m.max),
        };
        println!(
            "{:<16} {:<8} {:<10} {:>9} {:>3} {:>16}  {:>21} {:>5.2} {:>5}",
            r.benchmark,
            r.peer,
            r.medium,
            human_size(r.size_bytes),
            r.threads,
            human_figure(m),
            spread,
            m.cpu_share,
            m.samples_set_aside
        );
    }
    println!(
        "({} figures in {:.1} s; cpu = CPU time the benchmark threads got / (threads x wall): \
         near 1 when uncontended, at most cores/threads)",
        rows.len(),
        took.as_secs_f64()
    );
}

/// A CSV field, quoted (RFC 4180) when it holds a comma, a quote or a line break.
fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

/// The same rows as the CSV, plus every sample, as one JSON document.
fn write_json(path: &PathBuf, rows: &[Row], opts: &Options, sample_ms: u64) -> Result<()> {
    let rows: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            let m = &r.measurement;
            serde_json::json!({
                "benchmark": r.benchmark,
                "peer": r.peer,
                "medium": r.medium,
                "size_bytes": r.size_bytes,
                "threads": r.threads,
                "unit": m.unit.label(),
                "median": m.median,
                "min": m.min,
                "max": m.max,
                "samples": m.samples,
                "ops_total": m.ops_total,
                "cpu_share": m.cpu_share,
                "samples_set_aside": m.samples_set_aside,
            })
        })
        .collect();
    let doc = serde_json::json!({
        "seed": opts.seed,
        "repeats": opts.repeats,
        "sample_ms": sample_ms,
        "min_cpu_share": opts.min_cpu_share,
        "cores": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "rows": rows,
    });
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    serde_json::to_writer_pretty(&mut out, &doc)?;
    writeln!(out)?;
    out.flush()?;
    Ok(())
}

fn write_csv(path: &PathBuf, rows: &[Row], opts: &Options) -> Result<()> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    writeln!(
        out,
        "benchmark,peer,medium,size_bytes,threads,unit,median,min,max,repeats,ops_total,cpu_share,samples_set_aside,seed"
    )?;
    for r in rows {
        let m = &r.measurement;
        writeln!(
            out,
            "{},{},{},{},{},{},{:.6},{:.6},{:.6},{},{},{:.3},{},{}",
            r.benchmark,
            r.peer,
            csv_field(&r.medium),
            r.size_bytes,
            r.threads,
            m.unit.label(),
            m.median,
            m.min,
            m.max,
            m.samples.len(),
            m.ops_total,
            m.cpu_share,
            m.samples_set_aside,
            opts.seed
        )?;
    }
    out.flush()?;
    Ok(())
}

//! The heap benchmark, side by side in one run: ours in a PMO (without and with guard mode),
//! glibc, and PMDK (build with `--features peers`). Prints a table with ours/PMDK and
//! ours/glibc ratios, writes CSV. See `pmo_heap::bench` for what each figure means.
//!
//! Run: `cargo run --release -p pmo-heap --features peers --example heap_bench -- \
//!       [--quick] [--csv heap.csv] [--dir /dev/shm] [--repeats N] [--sample-ms MS]`

use anyhow::Context;
use clap::Parser;
use pmo_heap::bench::{self, Params};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser)]
struct Args {
    /// Fewer repeats, shorter samples.
    #[arg(long)]
    quick: bool,
    /// Write the rows as CSV here.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Directory of the scratch pools (emulated persistent memory).
    #[arg(long, default_value = "/dev/shm")]
    dir: PathBuf,
    /// Timed samples per figure (default: 3 quick, 5 full).
    #[arg(long)]
    repeats: Option<usize>,
    /// Milliseconds per sample and thread (default: 25 quick, 60 full).
    #[arg(long)]
    sample_ms: Option<u64>,
    /// Skip guard mode.
    #[arg(long)]
    no_guard: bool,
    /// Run the suite N times and keep each row's least contended figure (this machine is
    /// shared: see the cpu column).
    #[arg(long, default_value_t = 1)]
    best_of: usize,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut p = Params::standard(args.quick);
    p.dir = args.dir;
    if let Some(r) = args.repeats {
        p.repeats = r;
    }
    if let Some(ms) = args.sample_ms {
        p.sample = Duration::from_millis(ms);
    }
    p.guard = !args.no_guard;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "# pmo-heap benchmark: {} repeats of {:?} per figure; {cores} cores on this machine, \
         so 4 threads time-share them; fault mechanism {}; peers (PMDK) {}",
        p.repeats,
        p.sample,
        pmo_store::attach::fault_mechanism_name(),
        if cfg!(feature = "peers") {
            "on"
        } else {
            "off (build with --features peers)"
        }
    );
    if args.best_of == 0 || args.best_of > 10 {
        anyhow::bail!("--best-of must be in 1..=10");
    }
    let started = std::time::Instant::now();
    let mut runs = Vec::with_capacity(args.best_of);
    for run in 0..args.best_of {
        runs.push(
            bench::run_with(&p, &mut |r| {
                eprintln!(
                    "  run {run}: {} {} {} B x{}: {:.3} {} (cpu {:.2})",
                    r.benchmark,
                    r.allocator,
                    r.size_bytes,
                    r.threads,
                    r.median,
                    r.unit,
                    r.cpu_share
                )
            })
            .context("benchmark")?,
        );
    }
    let rows = bench::best_of(&runs);
    if args.best_of > 1 {
        println!(
            "# best of {} runs per row (largest CPU share)",
            args.best_of
        );
    }
    print!("{}", bench::table(&rows));
    for who in ["pmo-heap", "pmo-heap+guard"] {
        if let Some(x) = bench::min_ratio_vs_pmdk(&rows, who) {
            println!("# {who}: smallest alloc_free ratio to PMDK over sizes and threads: {x:.2}x (target >= 10x)");
        }
    }
    println!("# took {:.1} s", started.elapsed().as_secs_f64());
    if let Some(path) = args.csv {
        std::fs::write(&path, bench::csv(&rows))
            .with_context(|| format!("writing {}", path.display()))?;
        println!("# CSV: {}", path.display());
    }
    Ok(())
}

//! Allocator benchmarks: POSEIDON's microbenchmark and a Larson-style server simulation, for
//! glibc malloc (volatile bound), this heap over an anonymous mapping and over a /dev/shm file
//! mapping, this heap in guard mode, and this heap plus a hash table of live blocks.
//!
//! Run: `cargo run --release -p pmo-alloc --example alloc_bench -- [--quick] [--repeats N]
//!       [--rounds N] [--csv PATH] [--sizes 64,4096] [--threads 1,2] [--backends glibc,pmo-anon]
//!       [--no-larson]`. Prints a table (M alloc+free pairs per second, median of
//! repeats) and writes CSV. PMDK figures come from the pmo-peers crate.

use pmo_alloc::bench::{larson, microbench, BenchAlloc, GlibcMalloc, HashTracked, LarsonParams};
use pmo_alloc::{HeapOptions, MappedHeap, MappedRegion, Protection, Result};
use std::fmt::Write as _;
use std::path::PathBuf;

const REGION_BYTES: usize = 1 << 30;
const SIZES: [usize; 6] = [64, 256, 1024, 4096, 64 << 10, 1 << 20];
const THREADS: [usize; 3] = [1, 2, 4];

#[derive(Clone, Copy, PartialEq)]
enum Backend {
    Glibc,
    Anon,
    Shm,
    AnonGuard,
    AnonHashTable,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Glibc => "glibc",
            Backend::Anon => "pmo-anon",
            Backend::Shm => "pmo-shm",
            Backend::AnonGuard => "pmo-guard",
            Backend::AnonHashTable => "pmo+hash",
        }
    }
    /// Guard mode makes two system calls per operation: fewer rounds keep the run short.
    fn round_divisor(self) -> usize {
        if self == Backend::AnonGuard {
            20
        } else {
            1
        }
    }
}

fn heap(backend: Backend) -> MappedHeap {
    let protection = if backend == Backend::AnonGuard {
        Protection::Guard
    } else {
        Protection::Off
    };
    let opts = HeapOptions {
        subheaps: 0,
        protection,
    };
    let region = if backend == Backend::Shm {
        let path = PathBuf::from(format!("/dev/shm/pmo-alloc-bench-{}", std::process::id()));
        MappedRegion::shared_file(&path, REGION_BYTES).expect("map /dev/shm file")
    } else {
        MappedRegion::anonymous(REGION_BYTES).expect("map anonymous region")
    };
    MappedHeap::format(region, &opts).expect("format heap")
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn run_micro(
    backend: Backend,
    size: usize,
    threads: usize,
    rounds: usize,
    repeats: usize,
) -> Result<f64> {
    let rounds = (rounds / backend.round_divisor()).max(10);
    let mut v = Vec::new();
    for _ in 0..repeats {
        v.push(match backend {
            Backend::Glibc => microbench(|| GlibcMalloc, size, threads, rounds)?,
            Backend::AnonHashTable => microbench(
                || HashTracked::new(heap(Backend::Anon)),
                size,
                threads,
                rounds,
            )?,
            b => microbench(|| heap(b), size, threads, rounds)?,
        });
    }
    Ok(median(v))
}

fn run_larson(backend: Backend, p: LarsonParams, repeats: usize) -> Result<f64> {
    let p = LarsonParams {
        ops_per_round: (p.ops_per_round / backend.round_divisor()).max(100),
        ..p
    };
    let mut v = Vec::new();
    for _ in 0..repeats {
        v.push(match backend {
            Backend::Glibc => larson(|| GlibcMalloc, p)?,
            Backend::AnonHashTable => larson(|| HashTracked::new(heap(Backend::Anon)), p)?,
            b => larson(|| heap(b), p)?,
        });
    }
    Ok(median(v))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let quick = args.iter().any(|a| a == "--quick");
    let repeats: usize = flag("--repeats")
        .and_then(|s| s.parse().ok())
        .unwrap_or(if quick { 1 } else { 3 });
    let rounds: usize = flag("--rounds")
        .and_then(|s| s.parse().ok())
        .unwrap_or(if quick { 200 } else { 2000 });
    let csv_path = flag("--csv").unwrap_or_else(|| "alloc_bench.csv".to_string());
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let list = |name: &str| -> Option<Vec<String>> {
        flag(name).map(|s| s.split(',').map(str::to_string).collect())
    };
    let all_backends = [
        Backend::Glibc,
        Backend::Anon,
        Backend::Shm,
        Backend::AnonGuard,
        Backend::AnonHashTable,
    ];
    let backends: Vec<Backend> = match list("--backends") {
        Some(names) => all_backends
            .into_iter()
            .filter(|b| names.iter().any(|n| n == b.name()))
            .collect(),
        None => all_backends.to_vec(),
    };
    let sizes: Vec<usize> = list("--sizes").map_or(SIZES.to_vec(), |v| {
        v.iter().filter_map(|s| s.parse().ok()).collect()
    });
    let thread_counts: Vec<usize> = list("--threads").map_or(THREADS.to_vec(), |v| {
        v.iter().filter_map(|s| s.parse().ok()).collect()
    });
    let larson_too = !args.iter().any(|a| a == "--no-larson");
    let _ = <GlibcMalloc as BenchAlloc>::alloc; // the trait is what the workloads drive

    println!("# pmo-alloc benchmarks: {cpus} CPUs available (threads above {cpus} share cores), region {} MiB, sub-heaps = CPUs", REGION_BYTES >> 20);
    println!("# microbench: {rounds} rounds x 100 blocks per thread, free in random order; median of {repeats}; M alloc+free pairs/s (guard mode: rounds/20)");
    let mut csv = String::from("workload,allocator,size_bytes,threads,pairs_per_s\n");
    print!("{:>9} {:>3}", "size", "thr");
    for &b in &backends {
        print!(" {:>10}", b.name());
    }
    println!(" {:>11} {:>11}", "anon/glibc", "guard cost");
    for &size in &sizes {
        for &threads in &thread_counts {
            print!("{:>9} {:>3}", size, threads);
            let mut row = Vec::new();
            for &b in &backends {
                let r = run_micro(b, size, threads, rounds, repeats);
                match r {
                    Ok(x) => {
                        print!(" {:>10.2}", x / 1e6);
                        let _ = writeln!(csv, "micro,{},{size},{threads},{x:.0}", b.name());
                        row.push(x);
                    }
                    Err(e) => {
                        print!(" {:>10}", "err");
                        eprintln!("{} size {size} threads {threads}: {e}", b.name());
                        row.push(f64::NAN);
                    }
                }
            }
            let of = |b: Backend| backends.iter().position(|x| *x == b).map(|i| row[i]);
            match (of(Backend::Glibc), of(Backend::Anon)) {
                (Some(g), Some(a)) => print!(" {:>11.2}", a / g),
                _ => print!(" {:>11}", "-"),
            }
            // Guard cost per alloc+free pair: 1/guard - 1/anon.
            match (of(Backend::Anon), of(Backend::AnonGuard)) {
                (Some(a), Some(g)) => println!(" {:>9.0}ns", (1e9 / g - 1e9 / a).max(0.0)),
                _ => println!(" {:>11}", "-"),
            }
        }
    }

    if !larson_too {
        let _ = std::fs::write(&csv_path, csv);
        return;
    }
    println!("\n# larson: 1000 live blocks per thread, 16..1024 B, {} replacements per thread per round, 5 rounds, slots handed to the next thread between rounds; M free+alloc/s", rounds * 10);
    print!("{:>13}", "threads");
    for &b in &backends {
        print!(" {:>10}", b.name());
    }
    println!();
    for &threads in &thread_counts {
        print!("{:>13}", threads);
        for &b in &backends {
            let p = LarsonParams {
                threads,
                slots_per_thread: 1000,
                min_size: 16,
                max_size: 1024,
                ops_per_round: rounds * 10,
                rounds: 5,
            };
            match run_larson(b, p, repeats) {
                Ok(x) => {
                    print!(" {:>10.2}", x / 1e6);
                    let _ = writeln!(csv, "larson,{},16-1024,{threads},{x:.0}", b.name());
                }
                Err(e) => {
                    print!(" {:>10}", "err");
                    eprintln!("larson {}: {e}", b.name());
                }
            }
        }
        println!();
    }
    match std::fs::write(&csv_path, csv) {
        Ok(()) => println!("\nCSV written to {csv_path}"),
        Err(e) => eprintln!("cannot write {csv_path}: {e}"),
    }
}

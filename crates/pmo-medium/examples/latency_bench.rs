//! Measures the latency emulation: its own overhead (profile `dram` against no wrapper) and its
//! accuracy (time asked of the model against time measured, per profile and access size).
//!
//! `cargo run --release -p pmo-medium --example latency_bench [-- --quick] [--dir DIR]`
//!
//! The medium is emulated persistent memory: a 256 MiB file in `/dev/shm` (or `--dir`) mapped
//! shared, the backend pmo uses on this machine. Accesses go to scattered offsets so that none
//! counts as sequential (except in the `seq` rows). Every operation is timed on its own; the
//! tables give the median (p50) and the 90th percentile. The machine is shared and its vCPUs are
//! preempted now and then for tens of microseconds, which wrecks means: compare medians of one run.
//! "bare" is the same operation on the unwrapped medium, at other (equally cold) offsets.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use pmo_medium::latency::{numa_node_count, Clock, CostMode, SpinClock};
use pmo_medium::{open::open_medium, LatencyMedium, LatencyProfile, Medium, MediumKind};

/// Larger than this machine's 32 MiB last-level cache.
const MEDIUM_BYTES: u64 = 256 << 20;
const SIZES: [u64; 3] = [64, 4096, 65536];

struct Options {
    repeats: usize,
    dir: PathBuf,
}

fn main() {
    if let Err(e) = run() {
        eprintln!("latency_bench: {e}");
        std::process::exit(1);
    }
}

fn parse_args() -> Result<Options, String> {
    let mut opts = Options {
        repeats: 11,
        dir: PathBuf::from("/dev/shm"),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--quick" => opts.repeats = 5,
            "--dir" => opts.dir = args.next().ok_or("--dir needs a directory")?.into(),
            "--help" | "-h" => {
                println!("latency_bench [--quick] [--dir DIR]");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(opts)
}

fn run() -> Result<(), String> {
    let opts = parse_args()?;
    if std::env::var_os("PMO_LATENCY").is_some() {
        return Err("unset PMO_LATENCY: this benchmark chooses the profiles itself".into());
    }
    let path = opts
        .dir
        .join(format!("pmo-latency-bench-{}.pool", std::process::id()));
    let file = std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    file.set_len(MEDIUM_BYTES).map_err(|e| e.to_string())?;
    drop(file);
    let result = bench(&path, &opts);
    let _ = std::fs::remove_file(&path);
    result
}

fn bench(path: &std::path::Path, opts: &Options) -> Result<(), String> {
    let bare = open_medium(path, Some(MediumKind::EmulatedPmem)).map_err(|e| e.to_string())?;
    bare.zero(0, MEDIUM_BYTES).map_err(|e| e.to_string())?;

    let clock = SpinClock::new();
    println!("# latency emulation on this machine");
    println!(
        "NUMA nodes: {}",
        numa_node_count().map_err(|e| e.to_string())?
    );
    match clock.ns_per_tick() {
        Some(r) => println!("clock: TSC, {:.4} ns per tick ({:.3} GHz)", r, 1.0 / r),
        None => println!("clock: Instant (no invariant TSC)"),
    }
    let read_cost = |ordered: bool| {
        median_of(opts.repeats, || {
            let t = Instant::now();
            let mut x = 0u64;
            for _ in 0..100_000 {
                x = x.wrapping_add(if ordered {
                    clock.now_ns_ordered()
                } else {
                    clock.now_ns()
                });
            }
            std::hint::black_box(x);
            t.elapsed().as_nanos() as f64 / 100_000.0
        })
    };
    println!(
        "clock read: {:.1} ns, ordered (rdtscp) {:.1} ns (medians of {} batches of 100000)",
        read_cost(false),
        read_cost(true),
        opts.repeats
    );

    let mut floor: Vec<u64> = (0..100_000)
        .map(|_| {
            let t0 = clock.now_ns_ordered();
            std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
            clock.now_ns_ordered() - t0
        })
        .collect();
    floor.sort_unstable();
    println!(
        "measurement floor (an empty operation: two ordered clock reads and mfence): p50 {} ns",
        floor[floor.len() / 2]
    );

    // Overhead of the wrapper with profile dram.
    println!("\n## overhead: profile dram against no wrapper (ns per operation)");
    println!("| operation | bare p50 | dram p50 | added p50 | added % | bare p90 | dram p90 |");
    println!("|---|---|---|---|---|---|---|");
    let dram: Arc<dyn Medium> = Arc::new(LatencyMedium::new(
        Arc::clone(&bare),
        LatencyProfile::dram(),
    ));
    for op in ops() {
        let b = op.time(bare.as_ref(), opts.repeats, &clock)?;
        let d = op.time(dram.as_ref(), opts.repeats, &clock)?;
        println!(
            "| {} | {:.0} | {:.0} | {:+.0} | {:+.1}% | {:.0} | {:.0} |",
            op.name,
            b.p50,
            d.p50,
            d.p50 - b.p50,
            100.0 * (d.p50 - b.p50) / b.p50,
            b.p90,
            d.p90
        );
    }

    // Accuracy per profile.
    println!("\n## accuracy: modelled against measured time (ns per operation)");
    println!(
        "expected: floor mode (optane) max(bare, modelled), added mode (cxl-*) bare + modelled"
    );
    println!("| profile | operation | bare p50 | modelled | expected | measured p50 | p50 - expected | p50 / expected | measured p90 |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for profile in [
        LatencyProfile::optane(),
        LatencyProfile::cxl_near(),
        LatencyProfile::cxl_far(),
    ] {
        let wrapped: Arc<dyn Medium> =
            Arc::new(LatencyMedium::new(Arc::clone(&bare), profile.clone()));
        for op in ops() {
            let modelled = op.modelled_ns(&profile);
            let b = op.time(bare.as_ref(), opts.repeats, &clock)?;
            let m = op.time(wrapped.as_ref(), opts.repeats, &clock)?;
            let expected = match profile.mode {
                CostMode::Floor => b.p50.max(modelled),
                CostMode::Added => b.p50 + modelled,
            };
            println!(
                "| {} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:+.0} | {:.3} | {:.0} |",
                profile.name,
                op.name,
                b.p50,
                modelled,
                expected,
                m.p50,
                m.p50 - expected,
                m.p50 / expected,
                m.p90
            );
        }
    }
    Ok(())
}

#[derive(Clone, Copy)]
enum Kind {
    /// Reads of `bytes` at scattered offsets.
    Read,
    /// Reads of `bytes` one after the other.
    SeqRead,
    /// Reads of `bytes` at one offset, cached: the wrapper's own cost stands out.
    HotRead,
    /// Write `bytes` (not timed), then flush them and fence (timed).
    Persist,
    /// Write `bytes`, flush them and fence, all timed.
    WritePersist,
}

struct Op {
    name: String,
    kind: Kind,
    bytes: u64,
    batch: u64,
    /// Index of the next operation: every measurement continues where the last one stopped,
    /// so no two measurements see the same (cached) lines until the medium wraps around.
    cursor: std::cell::Cell<u64>,
}

fn ops() -> Vec<Op> {
    let mut v = vec![Op {
        name: "hot read 64 B".into(),
        kind: Kind::HotRead,
        bytes: 64,
        batch: batch_for(64),
        cursor: Default::default(),
    }];
    for bytes in SIZES {
        v.push(Op {
            name: format!("read {}", human(bytes)),
            kind: Kind::Read,
            bytes,
            batch: batch_for(bytes),
            cursor: Default::default(),
        });
    }
    v.push(Op {
        name: "seq read 4 KiB".into(),
        kind: Kind::SeqRead,
        bytes: 4096,
        batch: batch_for(4096),
        cursor: Default::default(),
    });
    for bytes in [64, 4096] {
        v.push(Op {
            name: format!("flush+fence {}", human(bytes)),
            kind: Kind::Persist,
            bytes,
            batch: batch_for(bytes),
            cursor: Default::default(),
        });
    }
    v.push(Op {
        name: "write+flush+fence 4 KiB".into(),
        kind: Kind::WritePersist,
        bytes: 4096,
        batch: batch_for(4096),
        cursor: Default::default(),
    });
    v
}

fn batch_for(bytes: u64) -> u64 {
    // About 8 MiB or 2000 operations per batch, whichever is fewer operations.
    ((8 << 20) / bytes).clamp(100, 2000)
}

fn human(bytes: u64) -> String {
    if bytes >= 1024 {
        format!("{} KiB", bytes / 1024)
    } else {
        format!("{bytes} B")
    }
}

impl Op {
    /// Offset of operation `i`: scattered over the medium (a stride that is no multiple of the
    /// size, so no read continues the previous one), or consecutive for sequential reads.
    fn offset(&self, i: u64) -> u64 {
        let slots = MEDIUM_BYTES / 65536;
        match self.kind {
            Kind::SeqRead => (i * self.bytes) % (MEDIUM_BYTES - self.bytes),
            Kind::HotRead => 0,
            // Slot (i * 389) mod slots visits every 64 KiB slot once per `slots` operations (389
            // is odd, `slots` a power of two); the page within the slot varies too.
            _ => ((i * 389) % slots) * 65536 + ((i % 7) * 4096) % (65536 - self.bytes + 1),
        }
    }

    fn modelled_ns(&self, p: &LatencyProfile) -> f64 {
        let mut total = 0u64;
        for i in 0..self.batch {
            let off = self.offset(i);
            total += match self.kind {
                Kind::Read | Kind::HotRead => p.read_cost_ns(off, self.bytes, false),
                Kind::SeqRead => p.read_cost_ns(off, self.bytes, i > 0),
                // Flush and fence back to back: the fence waits for the drain and the latency.
                Kind::Persist | Kind::WritePersist => p.flush_cost_ns(off, self.bytes) + p.write_ns,
            };
        }
        total as f64 / self.batch as f64
    }

    /// Time `repeats` batches, every operation on its own between two ordered clock reads (their
    /// cost is part of every sample). Offsets continue from batch to batch, so the batches together
    /// sweep the medium (larger than the last-level cache) instead of re-reading a cached part.
    fn time(&self, m: &dyn Medium, repeats: usize, clock: &SpinClock) -> Result<Summary, String> {
        let mut buf = vec![0xA5u8; self.bytes as usize];
        let mut samples = Vec::with_capacity(repeats * self.batch as usize);
        // One warm-up batch, then the measured ones.
        for i in 0..(repeats as u64 + 1) * self.batch {
            let off = self.offset(self.cursor.get() + i);
            if let Kind::Persist = self.kind {
                m.write(off, &buf).map_err(|e| e.to_string())?;
                // Let the stores of the write complete (their cache misses included) before the
                // clock starts, so the sample is the flush and the fence alone.
                std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
            }
            let t0 = clock.now_ns_ordered();
            let r = match self.kind {
                Kind::Read | Kind::SeqRead | Kind::HotRead => m.read(off, &mut buf),
                Kind::Persist => m.flush(off, self.bytes).and_then(|_| m.fence()),
                Kind::WritePersist => m.write_flush(off, &buf).and_then(|_| m.fence()),
            };
            // Wait for every store and write-back the operation started: `sfence` does not wait
            // for `clwb` write-backs to finish here, a locked instruction or `mfence` does, so
            // without this a bare flush+fence looks free and the first atomic after it (the
            // wrapper's counter) pays for it.
            std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
            let t1 = clock.now_ns_ordered();
            r.map_err(|e| e.to_string())?;
            if i >= self.batch {
                samples.push(t1 - t0);
            }
        }
        std::hint::black_box(&buf);
        self.cursor
            .set(self.cursor.get() + (repeats as u64 + 1) * self.batch);
        Ok(Summary::of(samples))
    }
}

/// Per-operation times in ns.
struct Summary {
    p50: f64,
    p90: f64,
}

impl Summary {
    fn of(mut v: Vec<u64>) -> Summary {
        v.sort_unstable();
        let at = |q: f64| v[((v.len() - 1) as f64 * q) as usize] as f64;
        Summary {
            p50: at(0.5),
            p90: at(0.9),
        }
    }
}

fn median_of(repeats: usize, mut f: impl FnMut() -> f64) -> f64 {
    let mut v: Vec<f64> = (0..repeats).map(|_| f()).collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

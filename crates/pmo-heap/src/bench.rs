//! The side-by-side heap benchmark: ours in a PMO (without and with guard mode), glibc, and
//! PMDK (feature `peers`), in one run. Used by `examples/heap_bench.rs`; figures in
//! `docs/heap.md`. Not a timed test: it runs as long as its parameters say (about a minute
//! quick, two minutes full).
//!
//! Benchmarks (one [`Row`] per allocator, size and thread count):
//! - `alloc_free`: POSEIDON's microbenchmark. Each thread allocates 100 blocks of one size, frees
//!   them in a random order, repeats. One op = one alloc + free pair; ops/s over all threads.
//!   Sizes 64 B, 256 B, 1 KiB, 4 KiB, 64 KiB, 1 MiB; threads 1, 2, 4.
//! - `larson`: server simulation, 1000 slots per thread of 64..=1024 B, one op = free a random
//!   slot + allocate into it, the slot arrays passed to the next thread after each epoch.
//! - `alloc_link_persist`: the cost of durability, one thread. Ours: allocate a node, write its
//!   link and value, make it the list head (the heap's root), psync. PMDK: the same in one
//!   transaction (`pmemobj_tx_alloc`, snapshot + update the head, commit). µs per op. Ours in
//!   three set-ups: `pmo-heap` (the store's default fault dirty tracking: a write-protect fault
//!   on the first write to each page after a psync), `pmo-heap+declared` (declared tracking: the
//!   heap declares its metadata pages, the benchmark its node, as PMDK's `tx_add_range`), both
//!   with at-rest scheme `none` as PMDK, and `pmo-heap+declared+secure` (the store's default
//!   at-rest protection, AES-GCM per page).
//!
//! Harness: with feature `peers` every allocation figure (ours included) comes from
//! `pmo-peers`' harness (`alloc_free_with`, `larson_with`: the same threads, barrier, warm-up,
//! random orders, sizes and contention filter as the PMDK and glibc figures). Without it, ours and
//! glibc are measured with `pmo_alloc::bench` (same pattern, its own loop) and there is no PMDK
//! row. The `harness` column names which. Ours runs in a PMO of a pool in `/dev/shm` (emulated
//! persistent memory, as PMDK's pool), attached with the default fault mechanism; a fresh PMO is
//! created for every measurement and destroyed after it.
//!
//! Owns: the workload parameters, the pool and PMO lifecycle of a run, the table and CSV.
//! Invariants: every PMO and pool file a run creates is removed when it returns (also on error);
//! each measurement is bounded in time (`Work::Duration`) or operations.

use crate::error::{PmoHeapError, Result};
use crate::pmo_heap::PmoHeap;
use pmo_alloc::{HeapOptions, Protection};
use pmo_store::{AttachOptions, DirtyTracking, KdfParams, Perm, Pool, PoolOptions, Scheme};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Block sizes of the microbenchmark.
pub const SIZES_BYTES: [u64; 6] = [64, 256, 1 << 10, 4 << 10, 64 << 10, 1 << 20];
/// Thread counts (this machine has 2 cores: 4 threads time-share them).
pub const THREADS: [usize; 3] = [1, 2, 4];
/// Node sizes of the durability comparison.
pub const DURABLE_SIZES_BYTES: [u64; 3] = [64, 256, 4096];
/// Blocks one thread holds in a microbenchmark round.
pub const ROUND_BLOCKS: u64 = 100;
/// Nodes linked before the durability list is freed (untimed): bounds the PMO.
const DURABLE_BATCH_OPS: u64 = 5_000;
/// Key of the benchmark's PMOs (a scratch pool).
const KEY: &[u8] = b"pmo-heap-bench";

/// One figure.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// `alloc_free`, `larson` or `alloc_link_persist`.
    pub benchmark: &'static str,
    /// `pmo-heap`, `pmo-heap+guard`, `glibc` or `pmdk`.
    pub allocator: &'static str,
    /// Whose loop measured it: `pmo-peers` or `pmo-alloc` (see the module doc).
    pub harness: &'static str,
    /// Block size (Larson: the largest block).
    pub size_bytes: u64,
    /// Threads.
    pub threads: usize,
    /// `ops/s` (higher is better) or `us/op` (lower is better).
    pub unit: &'static str,
    /// Median of the samples.
    pub median: f64,
    /// Smallest sample.
    pub min: f64,
    /// Largest sample.
    pub max: f64,
    /// Samples the median was taken over.
    pub repeats: usize,
    /// CPU the benchmark threads got / (threads x wall), as in pmo-peers (0: not measured).
    pub cpu_share: f64,
}

/// Parameters of a run.
#[derive(Debug, Clone)]
pub struct Params {
    /// Directory of the scratch pool (emulated persistent memory: `/dev/shm`).
    pub dir: PathBuf,
    /// Timed samples per figure (after one untimed warm-up).
    pub repeats: usize,
    /// Length of one sample per thread.
    pub sample: Duration,
    /// Sizes of the microbenchmark.
    pub sizes_bytes: Vec<u64>,
    /// Thread counts.
    pub threads: Vec<usize>,
    /// Also measure guard mode (it needs the userfaultfd mechanism; skipped without it).
    pub guard: bool,
}

impl Params {
    /// The full run (`quick`: fewer repeats, shorter samples).
    pub fn standard(quick: bool) -> Params {
        Params {
            dir: PathBuf::from("/dev/shm"),
            repeats: if quick { 3 } else { 5 },
            sample: Duration::from_millis(if quick { 25 } else { 60 }),
            sizes_bytes: SIZES_BYTES.to_vec(),
            threads: THREADS.to_vec(),
            guard: true,
        }
    }
}

/// Run every benchmark with [`Params::standard`]`(quick)`.
pub fn run(quick: bool) -> Result<Vec<Row>> {
    run_with(&Params::standard(quick), &mut |_| {})
}

/// Run every benchmark; `progress` sees each row as it is measured.
pub fn run_with(p: &Params, progress: &mut dyn FnMut(&Row)) -> Result<Vec<Row>> {
    if p.repeats == 0 || p.repeats > 100 || p.sample.is_zero() || p.sample > Duration::from_secs(10)
    {
        return Err(PmoHeapError::Bench(format!(
            "repeats {} (1..=100) and sample {:?} (0..=10 s)",
            p.repeats, p.sample
        )));
    }
    let scratch = ScratchPool::create(p)?;
    let mut rows = Vec::new();
    let mut push = |r: Row, rows: &mut Vec<Row>| {
        progress(&r);
        rows.push(r);
    };
    // Guard mode needs the userfaultfd mechanism (see `effective_protection`).
    let guard_ok = p.guard && pmo_store::attach::fault_mechanism_name() == "userfaultfd";
    let protections: &[Protection] = if guard_ok {
        &[Protection::Off, Protection::Guard]
    } else {
        &[Protection::Off]
    };
    for &size in &p.sizes_bytes {
        for &threads in &p.threads {
            for &prot in protections {
                let live = threads as u64 * ROUND_BLOCKS * size;
                let r = scratch.with_heap(heap_bytes(live), Setup::plain(prot), |h| {
                    harness::ours_alloc_free(p, h, size, threads)
                })?;
                push(
                    r.row("alloc_free", ours_name(prot), size, threads),
                    &mut rows,
                );
            }
            push(
                harness::glibc_alloc_free(p, size, threads)?.row(
                    "alloc_free",
                    "glibc",
                    size,
                    threads,
                ),
                &mut rows,
            );
            #[cfg(feature = "peers")]
            push(
                harness::pmdk_alloc_free(p, size, threads)?.row(
                    "alloc_free",
                    "pmdk",
                    size,
                    threads,
                ),
                &mut rows,
            );
        }
    }
    for &threads in &p.threads {
        for &prot in protections {
            let live = threads as u64 * harness::LARSON_SLOTS * harness::LARSON_MAX_BYTES;
            let r = scratch.with_heap(heap_bytes(live), Setup::plain(prot), |h| {
                harness::ours_larson(p, h, threads)
            })?;
            push(
                r.row(
                    "larson",
                    ours_name(prot),
                    harness::LARSON_MAX_BYTES,
                    threads,
                ),
                &mut rows,
            );
        }
        push(
            harness::glibc_larson(p, threads)?.row(
                "larson",
                "glibc",
                harness::LARSON_MAX_BYTES,
                threads,
            ),
            &mut rows,
        );
        #[cfg(feature = "peers")]
        push(
            harness::pmdk_larson(p, threads)?.row(
                "larson",
                "pmdk",
                harness::LARSON_MAX_BYTES,
                threads,
            ),
            &mut rows,
        );
    }
    let durable_setups = [
        ("pmo-heap", Setup::plain(Protection::Off)),
        (
            "pmo-heap+declared",
            Setup {
                tracking: Some(DirtyTracking::Declared),
                ..Setup::plain(Protection::Off)
            },
        ),
        (
            "pmo-heap+declared+secure",
            Setup {
                tracking: Some(DirtyTracking::Declared),
                scheme: None,
                ..Setup::plain(Protection::Off)
            },
        ),
    ];
    for &size in &DURABLE_SIZES_BYTES {
        for (name, setup) in durable_setups {
            let m = scratch.with_heap(heap_bytes(DURABLE_BATCH_OPS * size), setup, |h| {
                alloc_link_persist(p, h, size)
            })?;
            push(m.row("alloc_link_persist", name, size, 1), &mut rows);
        }
        #[cfg(feature = "peers")]
        push(
            harness::pmdk_tx_alloc_link(p, size)?.row("alloc_link_persist", "pmdk", size, 1),
            &mut rows,
        );
    }
    Ok(rows)
}

fn ours_name(p: Protection) -> &'static str {
    if p == Protection::Guard {
        "pmo-heap+guard"
    } else {
        "pmo-heap"
    }
}

/// PMO bytes for `live` bytes of blocks: twice that (two sub-heaps, each may have to hold
/// most of it, and slab or extent rounding), plus room for metadata.
fn heap_bytes(live: u64) -> u64 {
    (2 * live + (32 << 20)).next_multiple_of(1 << 20)
}

/// A figure before it gets its row labels.
pub(crate) struct Figure {
    pub(crate) harness: &'static str,
    pub(crate) unit: &'static str,
    pub(crate) samples: Vec<f64>,
    pub(crate) cpu_share: f64,
}

impl Figure {
    fn row(
        self,
        benchmark: &'static str,
        allocator: &'static str,
        size: u64,
        threads: usize,
    ) -> Row {
        let mut s = self.samples;
        s.sort_by(f64::total_cmp);
        let n = s.len();
        let median = if n == 0 {
            0.0
        } else if n % 2 == 1 {
            s[n / 2]
        } else {
            (s[n / 2 - 1] + s[n / 2]) / 2.0
        };
        Row {
            benchmark,
            allocator,
            harness: self.harness,
            size_bytes: size,
            threads,
            unit: self.unit,
            median,
            min: s.first().copied().unwrap_or(0.0),
            max: s.last().copied().unwrap_or(0.0),
            repeats: n,
            cpu_share: self.cpu_share,
        }
    }
}

/// The scratch pool of a run: a file in `Params::dir`, removed on drop.
struct ScratchPool {
    pool: Pool,
    path: PathBuf,
    next: std::cell::Cell<u32>,
}

/// Bytes of the scratch pool: the largest PMO of a standard run (1 MiB x 100 x 4 threads,
/// doubled) plus slack. Sparse: only what psync writes takes memory.
const SCRATCH_POOL_BYTES: u64 = 3 << 30;

impl ScratchPool {
    fn create(p: &Params) -> Result<ScratchPool> {
        let path = p
            .dir
            .join(format!("pmo-heap-bench-{}.pool", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let opts = PoolOptions {
            kdf: KdfParams::INSECURE_FAST,
            ..PoolOptions::default()
        };
        let pool = Pool::create(&path, SCRATCH_POOL_BYTES, &opts)?;
        Ok(ScratchPool {
            pool,
            path,
            next: std::cell::Cell::new(0),
        })
    }

    /// Run `f` on a fresh heap PMO of `bytes`, destroyed afterwards.
    fn with_heap<T>(
        &self,
        bytes: u64,
        setup: Setup,
        f: impl FnOnce(&PmoHeap) -> Result<T>,
    ) -> Result<T> {
        if bytes > SCRATCH_POOL_BYTES / 2 {
            return Err(PmoHeapError::Bench(format!(
                "a {bytes}-byte PMO does not fit the scratch pool"
            )));
        }
        let n = self.next.get();
        self.next.set(n + 1);
        let name = format!("bench-{n}");
        let opts = HeapOptions {
            subheaps: 0,
            protection: setup.protection,
        };
        self.pool.pcreate_with(&name, bytes, KEY, setup.scheme)?;
        let attach = AttachOptions {
            tracking: setup.tracking,
            ..AttachOptions::default()
        };
        let r = self
            .pool
            .attach_with(&name, Perm::Write, KEY, attach)
            .map_err(PmoHeapError::from)
            .and_then(|a| PmoHeap::format_attached(a, &opts))
            .and_then(|h| {
                h.psync()?;
                let r = f(&h);
                h.detach().and(r)
            });
        let destroyed = self.pool.pdestroy(&name, KEY);
        let r = r?;
        destroyed?;
        Ok(r)
    }
}

impl Drop for ScratchPool {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// How a benchmark's heap PMO is made.
#[derive(Debug, Clone, Copy)]
struct Setup {
    protection: Protection,
    /// Dirty tracking (`None`: the store's default).
    tracking: Option<DirtyTracking>,
    /// At-rest scheme (`None`: the pool's default).
    scheme: Option<Scheme>,
}

impl Setup {
    /// Scheme `none` (as PMDK: no encryption), the store's default tracking.
    fn plain(protection: Protection) -> Setup {
        Setup {
            protection,
            tracking: None,
            scheme: Some(Scheme::NONE),
        }
    }
}

/// A list node of the durability benchmark: link and value, as PMDK's node (payload after).
#[repr(C)]
struct Node {
    next: u64,
    value: u64,
}

/// Ours: allocate + write + link + psync per op, one thread; µs per op.
fn alloc_link_persist(p: &Params, h: &PmoHeap, size: u64) -> Result<Figure> {
    let size = usize::try_from(size).map_err(|_| PmoHeapError::Bench("size".into()))?;
    if size < std::mem::size_of::<Node>() {
        return Err(PmoHeapError::Bench(format!(
            "node of {size} bytes is too small"
        )));
    }
    let mut samples = Vec::with_capacity(p.repeats);
    let mut in_list = 0u64;
    // Sample 0 is the warm-up.
    for sample in 0..=p.repeats {
        let budget = if sample == 0 {
            Duration::from_millis(5)
        } else {
            p.sample
        };
        let (mut ops, mut busy) = (0u64, Duration::ZERO);
        while busy < budget {
            if in_list == DURABLE_BATCH_OPS {
                free_list(h)?; // untimed, as PMDK's list free
                in_list = 0;
            }
            let t0 = Instant::now();
            let head = h.root()?.map_or(0, |r| r.as_ptr() as u64);
            let node = h.alloc(size, 16)?;
            write_node(node, head, ops);
            h.declare(node.as_ptr(), std::mem::size_of::<Node>())?;
            h.set_root(Some(node))?;
            h.psync()?;
            busy += t0.elapsed();
            ops += 1;
            in_list += 1;
        }
        if sample > 0 {
            samples.push(busy.as_secs_f64() * 1e6 / ops as f64);
        }
    }
    free_list(h)?;
    Ok(Figure {
        harness: "pmo-heap",
        unit: "us/op",
        samples,
        cpu_share: 0.0,
    })
}

#[allow(unsafe_code)]
fn write_node(node: std::ptr::NonNull<u8>, next: u64, value: u64) {
    // SAFETY: `node` is a fresh block of at least size_of::<Node>() bytes, 16-aligned, that only
    // this thread knows of.
    unsafe { node.cast::<Node>().as_ptr().write(Node { next, value }) };
}

#[allow(unsafe_code)]
fn free_list(h: &PmoHeap) -> Result<()> {
    let mut cur = h.root()?;
    h.set_root(None)?;
    let mut freed = 0u64;
    while let Some(p) = cur {
        // SAFETY: every node of the list is a live block holding a Node (written by
        // `write_node`), and only this thread uses the list.
        let next = unsafe { p.cast::<Node>().as_ptr().read() }.next;
        h.free(p)?;
        freed += 1;
        if freed > DURABLE_BATCH_OPS {
            return Err(PmoHeapError::Bench(
                "durability list longer than a batch".into(),
            ));
        }
        cur = std::ptr::NonNull::new(next as *mut u8);
    }
    h.psync()?;
    Ok(())
}

/// The rows as a table: each allocation figure with its ratio to PMDK's and glibc's figure of
/// the same benchmark, size and threads (ours / PMDK > 1: ours is faster; for `us/op` the
/// ratio is PMDK's time over ours, so > 1 still means ours is faster).
pub fn table(rows: &[Row]) -> String {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# this machine has {cores} cores: {} threads time-share them",
        THREADS.iter().max().copied().unwrap_or(1)
    );
    let _ = writeln!(
        out,
        "{:<19} {:<15} {:>8} {:>3} {:>14} {:>25} {:>5} {:>9} {:>9}",
        "benchmark", "allocator", "size", "thr", "median", "min..max", "cpu", "vs pmdk", "vs glibc"
    );
    let find = |r: &Row, who: &str| {
        rows.iter().find(|o| {
            o.allocator == who
                && o.benchmark == r.benchmark
                && o.size_bytes == r.size_bytes
                && o.threads == r.threads
        })
    };
    let ratio = |r: &Row, o: Option<&Row>| match o {
        Some(o) if o.median > 0.0 && r.median > 0.0 && !std::ptr::eq(o, r) => {
            let x = if r.unit == "us/op" {
                o.median / r.median
            } else {
                r.median / o.median
            };
            format!("{x:.2}x")
        }
        _ => "-".into(),
    };
    for r in rows {
        let _ = writeln!(
            out,
            "{:<19} {:<15} {:>8} {:>3} {:>14} {:>25} {:>5.2} {:>9} {:>9}",
            r.benchmark,
            r.allocator,
            human_bytes(r.size_bytes),
            r.threads,
            format!("{} {}", fmt_figure(r.median), r.unit),
            format!("{}..{}", fmt_figure(r.min), fmt_figure(r.max)),
            r.cpu_share,
            ratio(r, find(r, "pmdk")),
            ratio(r, find(r, "glibc")),
        );
    }
    out
}

/// Merge several runs of the same benchmark: for each row (benchmark, allocator, size, threads)
/// keep the one whose threads got the largest CPU share (the least contended), as pmo-peers'
/// `--best-of`; rows without a share (0.0: the durability rows) keep the lowest `us/op` median.
/// Order follows the first run.
pub fn best_of(runs: &[Vec<Row>]) -> Vec<Row> {
    let Some(first) = runs.first() else {
        return Vec::new();
    };
    first
        .iter()
        .map(|r| {
            let same = |o: &&Row| {
                o.benchmark == r.benchmark
                    && o.allocator == r.allocator
                    && o.size_bytes == r.size_bytes
                    && o.threads == r.threads
            };
            runs.iter()
                .filter_map(|run| run.iter().find(same))
                .max_by(|a, b| {
                    a.cpu_share
                        .total_cmp(&b.cpu_share)
                        .then_with(|| match a.unit {
                            "us/op" => b.median.total_cmp(&a.median),
                            _ => a.median.total_cmp(&b.median),
                        })
                })
                .unwrap_or(r)
                .clone()
        })
        .collect()
}

/// The smallest ours/PMDK ratio over the `alloc_free` rows of `allocator` (None without PMDK).
pub fn min_ratio_vs_pmdk(rows: &[Row], allocator: &str) -> Option<f64> {
    rows.iter()
        .filter(|r| r.benchmark == "alloc_free" && r.allocator == allocator)
        .filter_map(|r| {
            let pmdk = rows.iter().find(|o| {
                o.allocator == "pmdk"
                    && o.benchmark == r.benchmark
                    && o.size_bytes == r.size_bytes
                    && o.threads == r.threads
            })?;
            Some(r.median / pmdk.median)
        })
        .min_by(f64::total_cmp)
}

/// The rows as CSV, with a header line.
pub fn csv(rows: &[Row]) -> String {
    let mut out = String::from(
        "benchmark,allocator,harness,size_bytes,threads,unit,median,min,max,repeats,cpu_share\n",
    );
    for r in rows {
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{:.3},{:.3},{:.3},{},{:.3}",
            r.benchmark,
            r.allocator,
            r.harness,
            r.size_bytes,
            r.threads,
            r.unit,
            r.median,
            r.min,
            r.max,
            r.repeats,
            r.cpu_share
        );
    }
    out
}

fn human_bytes(b: u64) -> String {
    match b {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}KiB", b >> 10),
        b => format!("{b}B"),
    }
}

fn fmt_figure(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if x >= 1e4 {
        format!("{:.1}k", x / 1e3)
    } else {
        format!("{x:.2}")
    }
}

#[cfg(feature = "peers")]
mod harness {
    //! Every allocation figure through pmo-peers' harness.
    use super::{Figure, Params};
    use crate::error::{PmoHeapError, Result};
    use crate::pmo_heap::PmoHeap;
    use pmo_peers::{BenchAllocator, BoxError, LarsonParams, Measurement, Options, Work};

    pub(super) const LARSON_SLOTS: u64 = 1000;
    pub(super) const LARSON_MAX_BYTES: u64 = 1024;
    /// Seed of every random choice of the peers' harness (orders, sizes, slots).
    const SEED: u64 = 0x4845_4150_4245_4e43; // "HEAPBENC"

    /// Ours as a pmo-peers allocator. Blocks travel as addresses (the heap checks every free).
    struct Ours<'a>(&'a PmoHeap);

    impl BenchAllocator for Ours<'_> {
        type Block = usize;
        fn alloc(&self, size_bytes: u64) -> std::result::Result<usize, BoxError> {
            let size = usize::try_from(size_bytes)?;
            Ok(self.0.alloc(size, 16)?.as_ptr() as usize)
        }
        fn free(&self, block: usize) -> std::result::Result<(), BoxError> {
            let p = std::ptr::NonNull::new(block as *mut u8).ok_or("null block")?;
            Ok(self.0.free(p)?)
        }
    }

    fn options(p: &Params) -> Options {
        Options {
            dir: p.dir.clone(),
            repeats: p.repeats,
            seed: SEED,
            require_pmem: true,
            min_cpu_share: 0.9,
        }
    }

    fn work(p: &Params) -> Work {
        Work::Duration(p.sample)
    }

    fn larson(p: &Params, threads: usize) -> LarsonParams {
        let mut l = LarsonParams::standard(threads);
        l.slots_per_thread = LARSON_SLOTS as u32;
        l.max_bytes = LARSON_MAX_BYTES;
        l.work_per_epoch = Work::Duration(p.sample / 2);
        l
    }

    fn figure(m: pmo_peers::Result<Measurement>) -> Result<Figure> {
        let m = m.map_err(|e| PmoHeapError::Bench(e.to_string()))?;
        Ok(Figure {
            harness: "pmo-peers",
            unit: m.unit.label(),
            samples: m.samples,
            cpu_share: m.cpu_share,
        })
    }

    pub(super) fn ours_alloc_free(
        p: &Params,
        h: &PmoHeap,
        size: u64,
        threads: usize,
    ) -> Result<Figure> {
        figure(pmo_peers::alloc_free_with(
            &options(p),
            &Ours(h),
            size,
            threads,
            work(p),
        ))
    }

    pub(super) fn glibc_alloc_free(p: &Params, size: u64, threads: usize) -> Result<Figure> {
        figure(pmo_peers::glibc_alloc_free(
            &options(p),
            size,
            threads,
            work(p),
        ))
    }

    pub(super) fn pmdk_alloc_free(p: &Params, size: u64, threads: usize) -> Result<Figure> {
        figure(pmo_peers::pmdk_alloc_free(
            &options(p),
            size,
            threads,
            work(p),
        ))
    }

    pub(super) fn ours_larson(p: &Params, h: &PmoHeap, threads: usize) -> Result<Figure> {
        figure(pmo_peers::larson_with(
            &options(p),
            &Ours(h),
            &larson(p, threads),
        ))
    }

    pub(super) fn glibc_larson(p: &Params, threads: usize) -> Result<Figure> {
        figure(pmo_peers::glibc_larson(&options(p), &larson(p, threads)))
    }

    pub(super) fn pmdk_larson(p: &Params, threads: usize) -> Result<Figure> {
        figure(pmo_peers::pmdk_larson(&options(p), &larson(p, threads)))
    }

    pub(super) fn pmdk_tx_alloc_link(p: &Params, size: u64) -> Result<Figure> {
        figure(pmo_peers::pmdk_tx_alloc_link(&options(p), size, work(p)))
    }
}

#[cfg(not(feature = "peers"))]
mod harness {
    //! Without PMDK: ours and glibc through `pmo_alloc::bench` (its own loop).
    use super::{Figure, Params};
    use crate::error::{PmoHeapError, Result};
    use crate::pmo_heap::PmoHeap;
    use pmo_alloc::bench::{self as ab, BenchAlloc, GlibcMalloc};
    use std::time::Instant;

    pub(super) const LARSON_SLOTS: u64 = 1000;
    pub(super) const LARSON_MAX_BYTES: u64 = 1024;
    /// Most microbenchmark rounds per sample, whatever the calibration says.
    const MAX_ROUNDS: usize = 1_000_000;

    fn size_of(size: u64) -> Result<usize> {
        usize::try_from(size).map_err(|_| PmoHeapError::Bench(format!("size {size}")))
    }

    /// Rounds that take about `p.sample` per thread, from a short calibration run.
    fn rounds_for<A: BenchAlloc>(p: &Params, a: &A, size: usize, threads: usize) -> Result<usize> {
        let probe = 10;
        let t0 = Instant::now();
        ab::microbench(|| a, size, threads, probe)?;
        let per_round_s = t0.elapsed().as_secs_f64() / probe as f64 / threads as f64;
        let rounds = (p.sample.as_secs_f64() / per_round_s.max(1e-9)) as usize;
        Ok(rounds.clamp(probe, MAX_ROUNDS))
    }

    fn micro<A: BenchAlloc>(p: &Params, a: &A, size: u64, threads: usize) -> Result<Figure> {
        let size = size_of(size)?;
        let rounds = rounds_for(p, a, size, threads)?;
        let (mut samples, mut shares) = (Vec::new(), Vec::new());
        for _ in 0..p.repeats {
            let s = ab::microbench_sample(|| a, size, threads, rounds)?;
            samples.push(s.pairs_per_s);
            shares.push(s.cpu_share);
        }
        shares.sort_by(f64::total_cmp);
        Ok(Figure {
            harness: "pmo-alloc",
            unit: "ops/s",
            samples,
            cpu_share: shares[shares.len() / 2],
        })
    }

    pub(super) fn ours_alloc_free(
        p: &Params,
        h: &PmoHeap,
        size: u64,
        threads: usize,
    ) -> Result<Figure> {
        micro(p, h.heap(), size, threads)
    }

    pub(super) fn glibc_alloc_free(p: &Params, size: u64, threads: usize) -> Result<Figure> {
        micro(p, &GlibcMalloc, size, threads)
    }

    fn larson<A: BenchAlloc>(p: &Params, a: &A, threads: usize) -> Result<Figure> {
        let mut params = ab::LarsonParams {
            threads,
            slots_per_thread: LARSON_SLOTS as usize,
            min_size: 64,
            max_size: LARSON_MAX_BYTES as usize,
            ops_per_round: 1000,
            rounds: 4,
        };
        let probe_s = {
            let t0 = Instant::now();
            ab::larson(|| a, params)?;
            t0.elapsed().as_secs_f64()
        };
        let per_op_s = probe_s / (threads * 4 * 1000) as f64;
        params.ops_per_round =
            ((p.sample.as_secs_f64() / 2.0 / per_op_s.max(1e-9)) as usize).clamp(1000, 10_000_000);
        let mut samples = Vec::new();
        for _ in 0..p.repeats {
            samples.push(ab::larson(|| a, params)?);
        }
        Ok(Figure {
            harness: "pmo-alloc",
            unit: "ops/s",
            samples,
            cpu_share: 0.0,
        })
    }

    pub(super) fn ours_larson(p: &Params, h: &PmoHeap, threads: usize) -> Result<Figure> {
        larson(p, h.heap(), threads)
    }

    pub(super) fn glibc_larson(p: &Params, threads: usize) -> Result<Figure> {
        larson(p, &GlibcMalloc, threads)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiny_run_measures_every_row_and_leaves_no_file() {
        let shm = PathBuf::from("/dev/shm");
        let dir = if shm.is_dir() {
            shm
        } else {
            std::env::temp_dir()
        };
        let p = Params {
            dir: dir.clone(),
            repeats: 1,
            sample: Duration::from_millis(2),
            sizes_bytes: vec![64, 64 << 10],
            threads: vec![1, 2],
            guard: true,
        };
        let rows = run_with(&p, &mut |_| {}).unwrap();
        let alloc_free = rows.iter().filter(|r| r.benchmark == "alloc_free").count();
        let per_config = if cfg!(feature = "peers") { 4 } else { 3 };
        assert!(alloc_free >= 4 * (per_config - 1), "{rows:?}");
        assert!(rows
            .iter()
            .all(|r| r.median > 0.0 && r.min <= r.median && r.median <= r.max));
        assert!(rows.iter().any(|r| r.benchmark == "larson"));
        assert_eq!(
            rows.iter()
                .filter(|r| r.benchmark == "alloc_link_persist" && r.allocator == "pmo-heap")
                .count(),
            DURABLE_SIZES_BYTES.len()
        );
        let t = table(&rows);
        assert!(t.contains("cores"), "{t}");
        assert_eq!(csv(&rows).lines().count(), rows.len() + 1);
        let leftover = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .any(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(&format!("pmo-heap-bench-{}.", std::process::id()))
            });
        assert!(!leftover, "the scratch pool was not removed");
    }

    #[test]
    fn parameters_out_of_range_are_errors() {
        let mut p = Params::standard(true);
        p.repeats = 0;
        assert!(matches!(
            run_with(&p, &mut |_| {}),
            Err(PmoHeapError::Bench(_))
        ));
    }

    #[test]
    fn ratios_compare_like_with_like() {
        let row = |allocator, median| Row {
            benchmark: "alloc_free",
            allocator,
            harness: "x",
            size_bytes: 64,
            threads: 1,
            unit: "ops/s",
            median,
            min: median,
            max: median,
            repeats: 1,
            cpu_share: 1.0,
        };
        let rows = vec![
            row("pmo-heap", 30e6),
            row("pmdk", 1.5e6),
            row("glibc", 60e6),
        ];
        assert_eq!(min_ratio_vs_pmdk(&rows, "pmo-heap"), Some(20.0));
        let t = table(&rows);
        assert!(t.contains("20.00x") && t.contains("0.50x"), "{t}");
    }
}

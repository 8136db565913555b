//! The peer benchmarks: parameters, scratch files, threads, timing and repeats.
//!
//! Owns the definition of each benchmark (what one op is, what is timed, how the pool is sized).
//! Every public function creates its own scratch pool or directory under [`Options::dir`], runs
//! one untimed warm-up, then [`Options::repeats`] timed samples (retaking, a bounded number of
//! times, samples that the contention filter [`Options::min_cpu_share`] rejects), and removes
//! the scratch before it returns. Threads start together on a barrier; a multi-threaded sample's figure is the ops of
//! all threads divided by the longest thread's time.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::SeedableRng;

use crate::allocator::BenchAllocator;
use crate::error::{Error, Result};
use crate::stats::{Measurement, Unit};
use crate::sys::{
    thread_cpu_time, LmdbEnv, MallocSlots, OidSlots, Permutation, PmdkPool, PmemRegion,
    PMDK_MIN_POOL_BYTES,
};

/// Blocks allocated then freed in one round of the POSEIDON microbenchmark.
pub const ROUND_BLOCKS: u32 = 100;
/// Distinct random free orders a thread cycles through (shuffled before timing, so the timed
/// loop does no shuffling).
const ORDERS_PER_THREAD: usize = 16;
/// Size of the large object the transaction benchmark updates (the pool's root object).
pub const TX_OBJECT_BYTES: u64 = 64 << 20;
/// Transactions between two clock reads in a time-bounded transaction sample.
const TX_CHUNK_OPS: u64 = 256;
/// Nodes linked before the list is freed (untimed) in the alloc + link benchmark: bounds the pool.
pub const TX_ALLOC_LINK_MAX_OPS_PER_BATCH: u64 = 20_000;
/// Puts in one LMDB sample at most, whatever the time budget: bounds the database file.
pub const LMDB_MAX_OPS_PER_SAMPLE: u64 = 50_000;
/// Values put (in one untimed transaction) into each fresh LMDB environment before a sample, so
/// every sample starts from the same tree depth.
pub const LMDB_PREFILL_KEYS: u64 = 10_000;
/// LMDB put + commits between two clock reads.
const LMDB_CHUNK_OPS: u64 = 64;
/// Larson operations between two clock reads.
const LARSON_CHUNK_OPS: u64 = 1_000;
/// Largest block the allocation benchmarks accept.
const MAX_BLOCK_BYTES: u64 = 64 << 20;
/// Most threads a benchmark accepts.
const MAX_THREADS: usize = 64;
/// Most slots per Larson thread.
const MAX_LARSON_SLOTS: u32 = 1 << 20;
/// Most repeats.
const MAX_REPEATS: usize = 1_000;
/// Largest scratch pool a benchmark creates. PMDK fallocates its pool, and on /dev/shm that is
/// memory, shared with everyone on the machine: a larger need is a parameter error.
pub const MAX_SCRATCH_POOL_BYTES: u64 = 4 << 30;
/// Most value bytes one LMDB sample writes (prefill a quarter of it): /dev/shm is memory too.
pub const LMDB_MAX_BYTES_PER_SAMPLE: u64 = 1 << 30;

/// Where and how the benchmarks run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Directory for scratch pools and databases: `/dev/shm` for emulated persistent memory.
    pub dir: PathBuf,
    /// Timed samples per measurement (after one untimed warm-up); the figure is their median.
    pub repeats: usize,
    /// Seed of every random choice (orders, offsets, sizes, keys); print it with the figures.
    pub seed: u64,
    /// Fail a PMDK benchmark if libpmem does not treat the pool as persistent memory.
    pub require_pmem: bool,
    /// Contention filter: a sample whose threads got less than this fraction of the CPU time
    /// they could get is taken again (see [`Measurement::samples_set_aside`]). 0.0 keeps every
    /// sample; 0.9 suits a machine shared with other work. Not meaningful for I/O-bound runs
    /// (LMDB on a disk), which wait rather than compute.
    pub min_cpu_share: f64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            dir: PathBuf::from("/dev/shm"),
            repeats: 5,
            seed: 0x5045_4552_5321, // "PEERS!"
            require_pmem: true,
            min_cpu_share: 0.0,
        }
    }
}

impl Options {
    fn check(&self) -> Result<()> {
        if self.repeats == 0 || self.repeats > MAX_REPEATS {
            return Err(Error::InvalidParameter(format!(
                "repeats {} (need 1..={MAX_REPEATS})",
                self.repeats
            )));
        }
        if !(0.0..=1.0).contains(&self.min_cpu_share) {
            return Err(Error::InvalidParameter(format!(
                "min_cpu_share {} (need 0..=1)",
                self.min_cpu_share
            )));
        }
        if !self.dir.is_dir() {
            return Err(Error::InvalidParameter(format!(
                "{} is not a directory",
                self.dir.display()
            )));
        }
        Ok(())
    }
}

/// How much work one sample does, per thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// At least this many ops per thread (rounded up to the benchmark's unit of work, e.g. whole
    /// rounds of [`ROUND_BLOCKS`]).
    Ops(u64),
    /// Run for about this long per thread (checked between units of work).
    Duration(Duration),
}

impl Work {
    fn check(self) -> Result<()> {
        match self {
            Work::Ops(0) => Err(Error::InvalidParameter("Work::Ops(0)".into())),
            Work::Duration(d) if d.is_zero() || d > Duration::from_secs(600) => Err(
                Error::InvalidParameter(format!("Work::Duration({d:?}) (need 0 < d <= 600 s)")),
            ),
            _ => Ok(()),
        }
    }

    fn done(self, ops: u64, elapsed: Duration) -> bool {
        match self {
            Work::Ops(n) => ops >= n,
            Work::Duration(d) => elapsed >= d,
        }
    }

    /// Ops for the next chunk, at most `chunk`, never past an op budget.
    fn next_chunk(self, ops_done: u64, chunk: u64) -> u64 {
        match self {
            Work::Ops(n) => chunk.min(n.saturating_sub(ops_done)).max(1),
            Work::Duration(_) => chunk,
        }
    }
}

/// A scratch file or directory name under the options' directory, removed on drop.
struct Scratch {
    path: PathBuf,
    is_dir: bool,
}

static SCRATCH_COUNTER: AtomicU64 = AtomicU64::new(0);

impl Scratch {
    fn name(dir: &Path, what: &str) -> PathBuf {
        let n = SCRATCH_COUNTER.fetch_add(1, Ordering::Relaxed);
        dir.join(format!("pmo-peers-{}-{what}-{n}", std::process::id()))
    }

    /// A file path that does not exist yet (PMDK creates it).
    fn file(dir: &Path, what: &str) -> Result<Self> {
        let path = Self::name(dir, what);
        if path.exists() {
            std::fs::remove_file(&path).map_err(|source| Error::Io {
                path: path.clone(),
                source,
            })?;
        }
        Ok(Scratch {
            path,
            is_dir: false,
        })
    }

    /// A fresh empty directory.
    fn dir(dir: &Path, what: &str) -> Result<Self> {
        let path = Self::name(dir, what);
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir(&path).map_err(|source| Error::Io {
            path: path.clone(),
            source,
        })?;
        Ok(Scratch { path, is_dir: true })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // Scratch only: a leftover is harmless, and there is no caller to tell.
        if self.is_dir {
            let _ = std::fs::remove_dir_all(&self.path);
        } else {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// A non-zero xorshift64* state for the C side, derived from the seed and a stream number
/// (splitmix64, so nearby streams are unrelated).
fn c_rng_state(seed: u64, stream: u64) -> u64 {
    let mut z = seed ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    if z == 0 {
        0x2545_F491_4F6C_DD1D
    } else {
        z
    }
}

fn check_threads(threads: usize) -> Result<()> {
    if threads == 0 || threads > MAX_THREADS {
        return Err(Error::InvalidParameter(format!(
            "threads {threads} (need 1..={MAX_THREADS})"
        )));
    }
    Ok(())
}

/// Creates the scratch pool of a benchmark, refusing sizes above [`MAX_SCRATCH_POOL_BYTES`].
fn scratch_pool(scratch: &Scratch, pool_bytes: u64, opts: &Options) -> Result<PmdkPool> {
    if pool_bytes > MAX_SCRATCH_POOL_BYTES {
        return Err(Error::InvalidParameter(format!(
            "these parameters need a {pool_bytes}-byte pool, above the {MAX_SCRATCH_POOL_BYTES} \
             bytes a scratch pool may take"
        )));
    }
    PmdkPool::create(&scratch.path, pool_bytes, opts.require_pmem)
}

fn check_block(size_bytes: u64) -> Result<()> {
    if size_bytes == 0 || size_bytes > MAX_BLOCK_BYTES {
        return Err(Error::InvalidParameter(format!(
            "block size {size_bytes} (need 1..={MAX_BLOCK_BYTES})"
        )));
    }
    Ok(())
}

/// What one timed stretch did: ops of all threads, the longest thread's wall time, and the CPU
/// time all threads got.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Timed {
    ops: u64,
    wall: Duration,
    cpu: Duration,
    threads: usize,
}

impl Timed {
    /// Adds another stretch run after this one by the same threads.
    fn then(self, next: Timed) -> Timed {
        Timed {
            ops: self.ops + next.ops,
            wall: self.wall + next.wall,
            cpu: self.cpu + next.cpu,
            threads: self.threads.max(next.threads),
        }
    }

    fn cpu_share(&self) -> f64 {
        self.cpu.as_secs_f64() / (self.threads.max(1) as f64 * self.wall.as_secs_f64())
    }
}

/// Times `f` on this thread (wall and CPU time); `f` returns the ops it did.
fn time_here(f: impl FnOnce() -> Result<u64>) -> Result<Timed> {
    let cpu_start = thread_cpu_time();
    let start = Instant::now();
    let ops = f()?;
    Ok(Timed {
        ops,
        wall: start.elapsed(),
        cpu: thread_cpu_time().saturating_sub(cpu_start),
        threads: 1,
    })
}

/// The timed samples of one measurement (the warm-up is not pushed), with the contention
/// filter of [`Options::min_cpu_share`]: a sample whose threads got less than that share of the
/// CPU they could get (`min(1, cores / threads)`) is set aside and the sample is taken again, up
/// to [`MAX_ATTEMPTS_PER_REPEAT`] attempts per repeat. If no sample passes, the set-aside ones
/// are used, so a figure is always produced, and the count of set-aside samples says how much
/// to trust it.
struct Samples {
    unit: Unit,
    repeats: usize,
    min_share: f64,
    kept: Vec<Timed>,
    set_aside: Vec<Timed>,
}

/// Bound on the samples taken per requested repeat when the contention filter rejects some.
pub const MAX_ATTEMPTS_PER_REPEAT: usize = 2;

impl Samples {
    fn new(unit: Unit, opts: &Options, threads: usize) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let ceiling = (cores as f64 / threads.max(1) as f64).min(1.0);
        Samples {
            unit,
            repeats: opts.repeats,
            min_share: opts.min_cpu_share * ceiling,
            kept: Vec::with_capacity(opts.repeats),
            set_aside: Vec::new(),
        }
    }

    /// Whether another timed sample should be taken.
    fn wants_more(&self) -> bool {
        self.kept.len() < self.repeats
            && self.kept.len() + self.set_aside.len() < self.repeats * MAX_ATTEMPTS_PER_REPEAT
    }

    fn push(&mut self, timed: Timed) {
        if timed.cpu_share() >= self.min_share {
            self.kept.push(timed);
        } else {
            self.set_aside.push(timed);
        }
    }

    fn finish(self) -> Result<Measurement> {
        let (used, set_aside) = if self.kept.is_empty() {
            (self.set_aside, 0)
        } else {
            let n = self.set_aside.len();
            (self.kept, n)
        };
        let figures = used
            .iter()
            .map(|t| match self.unit {
                Unit::OpsPerSec => t.ops as f64 / t.wall.as_secs_f64(),
                Unit::MicrosPerOp => t.wall.as_secs_f64() * 1e6 / t.ops as f64,
            })
            .collect();
        let shares: Vec<f64> = used.iter().map(Timed::cpu_share).collect();
        let ops_total = used.iter().map(|t| t.ops).sum();
        let mut m =
            Measurement::from_samples(self.unit, figures, ops_total)?.with_cpu_shares(&shares);
        m.samples_set_aside = set_aside;
        Ok(m)
    }
}

/// Runs `step` on every state, one thread per state, all released together by a barrier, each
/// until `work` is done; `step` does one unit of work and returns the ops it did. Returns the ops
/// of all threads, the longest thread's time and the CPU time of all threads.
fn run_threads<S, F>(states: &mut [S], work: Work, step: F) -> Result<Timed>
where
    S: Send,
    F: Fn(&mut S, u64) -> Result<u64> + Sync,
{
    let barrier = Barrier::new(states.len());
    let results: Vec<Result<Timed>> = std::thread::scope(|scope| {
        let handles: Vec<_> = states
            .iter_mut()
            .map(|state| {
                let barrier = &barrier;
                let step = &step;
                scope.spawn(move || {
                    barrier.wait();
                    time_here(|| {
                        let start = Instant::now();
                        let mut ops = 0u64;
                        while !work.done(ops, start.elapsed()) {
                            ops += step(state, ops)?;
                        }
                        Ok(ops)
                    })
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or(Err(Error::ThreadPanicked)))
            .collect()
    });
    let mut total = Timed {
        threads: results.len(),
        ..Timed::default()
    };
    for result in results {
        let timed = result?;
        total.ops += timed.ops;
        total.wall = total.wall.max(timed.wall);
        total.cpu += timed.cpu;
    }
    Ok(total)
}

/// Pool for `threads` x [`ROUND_BLOCKS`] live blocks of `size_bytes`: PMDK rounds a huge block
/// (above 256 KiB) up to whole 256 KiB chunks and adds headers; 1.5x slack and 64 MiB of
/// metadata on top.
fn alloc_pool_bytes(size_bytes: u64, live_blocks: u64) -> u64 {
    let live_blocks = live_blocks.max(1);
    const CHUNK: u64 = 256 << 10;
    let per_block = if size_bytes + 64 > CHUNK {
        (size_bytes + 64).div_ceil(CHUNK) * CHUNK
    } else {
        size_bytes + 64
    };
    (live_blocks * per_block * 3 / 2 + (64 << 20)).max(PMDK_MIN_POOL_BYTES)
}

struct RoundState<Slots> {
    slots: Slots,
    orders: Vec<Permutation>,
    next: usize,
}

fn round_states<Slots>(
    threads: usize,
    opts: &Options,
    sample: u64,
    mut make: impl FnMut() -> Slots,
) -> Vec<RoundState<Slots>> {
    (0..threads)
        .map(|t| {
            let mut rng = StdRng::seed_from_u64(c_rng_state(opts.seed, sample * 1000 + t as u64));
            RoundState {
                slots: make(),
                orders: (0..ORDERS_PER_THREAD)
                    .map(|_| Permutation::shuffled(ROUND_BLOCKS, &mut rng))
                    .collect(),
                next: 0,
            }
        })
        .collect()
}

/// PMDK `pmemobj_alloc` + `pmemobj_free`, the POSEIDON pattern: each thread allocates
/// [`ROUND_BLOCKS`] blocks of `size_bytes`, frees them in a random order, and repeats. One op is
/// one alloc + free pair. Returns ops/s over all threads (median of the repeats), on a fresh
/// pool in [`Options::dir`].
pub fn pmdk_alloc_free(
    opts: &Options,
    size_bytes: u64,
    threads: usize,
    work: Work,
) -> Result<Measurement> {
    opts.check()?;
    check_threads(threads)?;
    check_block(size_bytes)?;
    work.check()?;
    let scratch = Scratch::file(&opts.dir, "alloc")?;
    let pool_bytes = alloc_pool_bytes(size_bytes, threads as u64 * u64::from(ROUND_BLOCKS));
    let pool = scratch_pool(&scratch, pool_bytes, opts)?;
    alloc_free_samples(
        opts,
        threads,
        work,
        || OidSlots::new(&pool, ROUND_BLOCKS),
        |s, o| s.alloc_free_round(o, size_bytes),
    )
}

/// glibc `malloc` + `free` in the same pattern as [`pmdk_alloc_free`]: the volatile bound.
pub fn glibc_alloc_free(
    opts: &Options,
    size_bytes: u64,
    threads: usize,
    work: Work,
) -> Result<Measurement> {
    opts.check()?;
    check_threads(threads)?;
    check_block(size_bytes)?;
    work.check()?;
    alloc_free_samples(
        opts,
        threads,
        work,
        || MallocSlots::new(ROUND_BLOCKS),
        |s, o| s.alloc_free_round(o, size_bytes),
    )
}

fn alloc_free_samples<Slots: Send>(
    opts: &Options,
    threads: usize,
    work: Work,
    mut make: impl FnMut() -> Slots,
    round: impl Fn(&mut Slots, &Permutation) -> Result<()> + Sync,
) -> Result<Measurement> {
    let step = |state: &mut RoundState<Slots>, _ops: u64| -> Result<u64> {
        let order = &state.orders[state.next % ORDERS_PER_THREAD];
        state.next += 1;
        round(&mut state.slots, order)?;
        Ok(u64::from(ROUND_BLOCKS))
    };
    let mut samples = Samples::new(Unit::OpsPerSec, opts, threads);
    // Sample 0 is the warm-up: one round per thread, untimed (faults in the pool's pages).
    let mut sample = 0u64;
    while sample == 0 || samples.wants_more() {
        let mut states = round_states(threads, opts, sample, &mut make);
        let this_work = if sample == 0 { Work::Ops(1) } else { work };
        let timed = run_threads(&mut states, this_work, step)?;
        if sample > 0 {
            samples.push(timed);
        }
        sample += 1;
    }
    samples.finish()
}

/// Parameters of the Larson server simulation.
///
/// Each of `threads` threads owns `slots_per_thread` slots, first filled with blocks of a size
/// uniform in `[min_bytes, max_bytes]`. One op frees a random slot of the thread's array and
/// allocates a new block of a random size into it. A sample is `epochs` epochs; after each epoch
/// every thread's array goes to the next thread (thread t gets t+1's), so most frees hit blocks
/// another thread allocated, as in a server whose requests are served by other threads. The
/// figure is the ops of all epochs over the sum of the epochs' times (the initial fill and the
/// hand-over are not timed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LarsonParams {
    /// Threads (and slot arrays).
    pub threads: usize,
    /// Slots per thread.
    pub slots_per_thread: u32,
    /// Smallest block.
    pub min_bytes: u64,
    /// Largest block.
    pub max_bytes: u64,
    /// Epochs per sample.
    pub epochs: u32,
    /// Work of one epoch, per thread.
    pub work_per_epoch: Work,
}

impl LarsonParams {
    /// The parameters pmo's allocator benchmark matches: 64..=1024 B, 1000 slots per thread,
    /// 4 epochs of 100 ms.
    pub fn standard(threads: usize) -> Self {
        LarsonParams {
            threads,
            slots_per_thread: 1000,
            min_bytes: 64,
            max_bytes: 1024,
            epochs: 4,
            work_per_epoch: Work::Duration(Duration::from_millis(100)),
        }
    }

    fn check(&self) -> Result<()> {
        check_threads(self.threads)?;
        check_block(self.max_bytes)?;
        if self.min_bytes == 0 || self.min_bytes > self.max_bytes {
            return Err(Error::InvalidParameter(format!(
                "Larson sizes [{}, {}] (need 0 < min <= max)",
                self.min_bytes, self.max_bytes
            )));
        }
        if self.slots_per_thread == 0 || self.slots_per_thread > MAX_LARSON_SLOTS {
            return Err(Error::InvalidParameter(format!(
                "Larson slots per thread {} (need 1..={MAX_LARSON_SLOTS})",
                self.slots_per_thread
            )));
        }
        if self.epochs == 0 || self.epochs > 10_000 {
            return Err(Error::InvalidParameter(format!(
                "Larson epochs {} (need 1..=10000)",
                self.epochs
            )));
        }
        self.work_per_epoch.check()
    }
}

/// Larson server simulation (see [`LarsonParams`]) over PMDK `pmemobj_alloc`/`pmemobj_free` on a
/// fresh pool in [`Options::dir`]. Returns ops/s (one op = one free + one alloc).
pub fn pmdk_larson(opts: &Options, params: &LarsonParams) -> Result<Measurement> {
    opts.check()?;
    params.check()?;
    let scratch = Scratch::file(&opts.dir, "larson")?;
    let live = params.threads as u64 * u64::from(params.slots_per_thread);
    let pool = scratch_pool(&scratch, alloc_pool_bytes(params.max_bytes, live), opts)?;
    larson_samples(
        opts,
        params,
        || OidSlots::new(&pool, params.slots_per_thread),
        |s, rng| s.larson_fill(params.min_bytes, params.max_bytes, rng),
        |s, ops, rng| s.larson_run(params.min_bytes, params.max_bytes, ops, rng),
    )
}

/// A bounded array of blocks of an allocator under test; empty slots are `None`. Frees what it
/// still holds on drop.
struct GenericSlots<'a, A: BenchAllocator> {
    allocator: &'a A,
    blocks: Vec<Option<A::Block>>,
}

impl<'a, A: BenchAllocator> GenericSlots<'a, A> {
    fn new(allocator: &'a A, n: u32) -> Self {
        GenericSlots {
            allocator,
            blocks: (0..n).map(|_| None).collect(),
        }
    }

    fn free_slot(&mut self, i: usize) -> Result<()> {
        if let Some(block) = self.blocks[i].take() {
            self.allocator.free(block).map_err(Error::Allocator)?;
        }
        Ok(())
    }

    fn alloc_free_round(&mut self, order: &Permutation, size_bytes: u64) -> Result<()> {
        if order.as_slice().len() != self.blocks.len() {
            return Err(Error::InvalidParameter(format!(
                "order of {} for {} slots",
                order.as_slice().len(),
                self.blocks.len()
            )));
        }
        for slot in self.blocks.iter_mut() {
            *slot = Some(self.allocator.alloc(size_bytes).map_err(Error::Allocator)?);
        }
        for &i in order.as_slice() {
            self.free_slot(i as usize)?;
        }
        Ok(())
    }

    fn larson_fill(&mut self, min_bytes: u64, max_bytes: u64, rng: &mut u64) -> Result<()> {
        for slot in self.blocks.iter_mut().filter(|s| s.is_none()) {
            let size = xorshift_range(rng, min_bytes, max_bytes);
            *slot = Some(self.allocator.alloc(size).map_err(Error::Allocator)?);
        }
        Ok(())
    }

    fn larson_run(
        &mut self,
        min_bytes: u64,
        max_bytes: u64,
        ops: u64,
        rng: &mut u64,
    ) -> Result<()> {
        let n = self.blocks.len() as u64;
        if n == 0 {
            return Err(Error::InvalidParameter(
                "Larson needs at least one slot".into(),
            ));
        }
        for _ in 0..ops {
            // Same draws in the same order as peers_pmdk_larson_run in csrc/peers.c.
            let i = (xorshift_next(rng) % n) as usize;
            let size = xorshift_range(rng, min_bytes, max_bytes);
            self.free_slot(i)?;
            self.blocks[i] = Some(self.allocator.alloc(size).map_err(Error::Allocator)?);
        }
        Ok(())
    }
}

impl<A: BenchAllocator> Drop for GenericSlots<'_, A> {
    fn drop(&mut self) {
        for block in self.blocks.iter_mut().filter_map(Option::take) {
            // Nothing to report to: the sample already failed or finished.
            let _ = self.allocator.free(block);
        }
    }
}

/// xorshift64*, the generator of csrc/peers.c (`peers_rand`), so the Larson sizes and slots of an
/// allocator under test are the very ones PMDK and glibc got for the same seed.
fn xorshift_next(state: &mut u64) -> u64 {
    let mut x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    x.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

/// Uniform in `[lo, hi]` as `peers_rand_range` draws it.
fn xorshift_range(state: &mut u64, lo: u64, hi: u64) -> u64 {
    lo + xorshift_next(state) % (hi - lo + 1)
}

/// The POSEIDON pattern of [`pmdk_alloc_free`] over an allocator under test.
pub fn alloc_free_with<A: BenchAllocator>(
    opts: &Options,
    allocator: &A,
    size_bytes: u64,
    threads: usize,
    work: Work,
) -> Result<Measurement> {
    opts.check()?;
    check_threads(threads)?;
    check_block(size_bytes)?;
    work.check()?;
    alloc_free_samples(
        opts,
        threads,
        work,
        || GenericSlots::new(allocator, ROUND_BLOCKS),
        |s, o| s.alloc_free_round(o, size_bytes),
    )
}

/// The Larson server simulation of [`pmdk_larson`] over an allocator under test (same seeds, so
/// the same slots and sizes).
pub fn larson_with<A: BenchAllocator>(
    opts: &Options,
    allocator: &A,
    params: &LarsonParams,
) -> Result<Measurement> {
    opts.check()?;
    params.check()?;
    larson_samples(
        opts,
        params,
        || GenericSlots::new(allocator, params.slots_per_thread),
        |s, rng| s.larson_fill(params.min_bytes, params.max_bytes, rng),
        |s, ops, rng| s.larson_run(params.min_bytes, params.max_bytes, ops, rng),
    )
}

/// Larson server simulation over glibc `malloc`/`free`: the volatile bound.
pub fn glibc_larson(opts: &Options, params: &LarsonParams) -> Result<Measurement> {
    opts.check()?;
    params.check()?;
    larson_samples(
        opts,
        params,
        || MallocSlots::new(params.slots_per_thread),
        |s, rng| s.larson_fill(params.min_bytes, params.max_bytes, rng),
        |s, ops, rng| s.larson_run(params.min_bytes, params.max_bytes, ops, rng),
    )
}

struct LarsonState<Slots> {
    slots: Slots,
    rng: u64,
}

fn larson_samples<Slots: Send>(
    opts: &Options,
    params: &LarsonParams,
    mut make: impl FnMut() -> Slots,
    fill: impl Fn(&mut Slots, &mut u64) -> Result<()>,
    run: impl Fn(&mut Slots, u64, &mut u64) -> Result<()> + Sync,
) -> Result<Measurement> {
    let work = params.work_per_epoch;
    let step = |state: &mut LarsonState<Slots>, ops_done: u64| -> Result<u64> {
        let chunk = work.next_chunk(ops_done, LARSON_CHUNK_OPS);
        run(&mut state.slots, chunk, &mut state.rng)?;
        Ok(chunk)
    };
    let mut samples = Samples::new(Unit::OpsPerSec, opts, params.threads);
    let mut sample = 0u64;
    while sample == 0 || samples.wants_more() {
        let mut states: Vec<LarsonState<Slots>> = (0..params.threads)
            .map(|t| LarsonState {
                slots: make(),
                rng: c_rng_state(opts.seed, sample * 1000 + t as u64),
            })
            .collect();
        for state in &mut states {
            fill(&mut state.slots, &mut state.rng)?;
        }
        // Sample 0 is the warm-up: one short epoch, untimed.
        let (epochs, epoch_work) = if sample == 0 {
            (1, Work::Ops(LARSON_CHUNK_OPS))
        } else {
            (params.epochs, work)
        };
        let mut timed = Timed::default();
        for _ in 0..epochs {
            timed = timed.then(run_threads(&mut states, epoch_work, step)?);
            // Hand every thread's slots (not its random stream) to the next thread.
            let mut rngs: Vec<u64> = states.iter().map(|s| s.rng).collect();
            states.rotate_left(1);
            for (state, rng) in states.iter_mut().zip(rngs.drain(..)) {
                state.rng = rng;
            }
        }
        if sample > 0 {
            samples.push(timed);
        }
        sample += 1;
    }
    samples.finish()
}

/// A PMDK transaction updating `len_bytes` at a random 64-byte-aligned place in a large object
/// ([`TX_OBJECT_BYTES`], the pool's root): `TX_BEGIN`, `pmemobj_tx_add_range`, `memcpy`,
/// `TX_END`. One op is one committed transaction; returns µs per transaction, one thread.
pub fn pmdk_tx_update(opts: &Options, len_bytes: u64, work: Work) -> Result<Measurement> {
    opts.check()?;
    work.check()?;
    if len_bytes == 0 || len_bytes > TX_OBJECT_BYTES {
        return Err(Error::InvalidParameter(format!(
            "update length {len_bytes} (need 1..={TX_OBJECT_BYTES})"
        )));
    }
    let scratch = Scratch::file(&opts.dir, "tx")?;
    let pool = scratch_pool(&scratch, TX_OBJECT_BYTES + (64 << 20), opts)?;
    pool.tx_root(TX_OBJECT_BYTES)?;
    let src: Vec<u8> = (0..len_bytes).map(|i| (i % 251) as u8).collect();
    let mut states = [c_rng_state(opts.seed, 0x7478)];
    let step = |rng: &mut u64, ops_done: u64| -> Result<u64> {
        let chunk = work.next_chunk(ops_done, TX_CHUNK_OPS);
        pool.tx_update_run(TX_OBJECT_BYTES, &src, chunk, rng)?;
        Ok(chunk)
    };
    let mut samples = Samples::new(Unit::MicrosPerOp, opts, 1);
    let mut sample = 0u64;
    while sample == 0 || samples.wants_more() {
        let this_work = if sample == 0 {
            Work::Ops(TX_CHUNK_OPS)
        } else {
            work
        };
        let timed = run_threads(&mut states, this_work, step)?;
        if sample > 0 {
            samples.push(timed);
        }
        sample += 1;
    }
    samples.finish()
}

/// PMDK transactional allocation, the durability peer of pmo's "alloc + link + psync": one op is
/// `TX_BEGIN`, `pmemobj_tx_alloc(size_bytes)`, write the new node's link and value, snapshot and
/// update the list head in the root object, `TX_END`. The list is freed (untimed) every
/// [`TX_ALLOC_LINK_MAX_OPS_PER_BATCH`] ops. Returns µs per op, one thread.
pub fn pmdk_tx_alloc_link(opts: &Options, size_bytes: u64, work: Work) -> Result<Measurement> {
    opts.check()?;
    work.check()?;
    if !(24..=MAX_BLOCK_BYTES).contains(&size_bytes) {
        return Err(Error::InvalidParameter(format!(
            "node size {size_bytes} (need 24..={MAX_BLOCK_BYTES}: a node holds a 16-byte link \
             and an 8-byte value)"
        )));
    }
    let scratch = Scratch::file(&opts.dir, "txalloc")?;
    let batch = TX_ALLOC_LINK_MAX_OPS_PER_BATCH;
    let pool = scratch_pool(&scratch, alloc_pool_bytes(size_bytes, batch), opts)?;
    let mut samples = Samples::new(Unit::MicrosPerOp, opts, 1);
    let mut sample = 0u64;
    while sample == 0 || samples.wants_more() {
        let this_work = if sample == 0 {
            Work::Ops(TX_CHUNK_OPS)
        } else {
            work
        };
        let mut timed = Timed::default();
        while !this_work.done(timed.ops, timed.wall) {
            // One batch: timed in chunks, then the list is freed untimed.
            let mut in_batch = 0u64;
            while in_batch < batch && !this_work.done(timed.ops, timed.wall) {
                let chunk = this_work
                    .next_chunk(timed.ops, TX_CHUNK_OPS)
                    .min(batch - in_batch);
                timed = timed.then(time_here(|| {
                    pool.tx_alloc_link_run(size_bytes, chunk)?;
                    Ok(chunk)
                })?);
                in_batch += chunk;
            }
            let freed = pool.tx_list_free()?;
            debug_assert_eq!(freed, in_batch);
        }
        if sample > 0 {
            samples.push(timed);
        }
        sample += 1;
    }
    samples.finish()
}

/// The floor under every durable write on emulated persistent memory: one op is
/// `pmem_memcpy_persist` of `len_bytes` to a random 64-byte-aligned offset of a 64 MiB file
/// mapped with libpmem (copy, flush each cache line, one fence), with no log and no allocator.
/// PMDK's transactions and pmo's psync both pay at least this. Returns µs per op, one thread.
pub fn pmem_memcpy_persist(opts: &Options, len_bytes: u64, work: Work) -> Result<Measurement> {
    opts.check()?;
    work.check()?;
    if len_bytes == 0 || len_bytes > TX_OBJECT_BYTES {
        return Err(Error::InvalidParameter(format!(
            "copy length {len_bytes} (need 1..={TX_OBJECT_BYTES})"
        )));
    }
    let scratch = Scratch::file(&opts.dir, "pmem")?;
    let mut region = PmemRegion::create(&scratch.path, TX_OBJECT_BYTES, opts.require_pmem)?;
    let src: Vec<u8> = (0..len_bytes).map(|i| (i % 249) as u8).collect();
    let mut rng = c_rng_state(opts.seed, 0x706d_656d);
    let mut samples = Samples::new(Unit::MicrosPerOp, opts, 1);
    let mut sample = 0u64;
    while sample == 0 || samples.wants_more() {
        let this_work = if sample == 0 {
            Work::Ops(TX_CHUNK_OPS)
        } else {
            work
        };
        let timed = time_here(|| {
            let mut ops = 0u64;
            let start = Instant::now();
            while !this_work.done(ops, start.elapsed()) {
                let chunk = this_work.next_chunk(ops, TX_CHUNK_OPS);
                region.memcpy_persist_run(&src, chunk, &mut rng)?;
                ops += chunk;
            }
            Ok(ops)
        })?;
        if sample > 0 {
            samples.push(timed);
        }
        sample += 1;
    }
    samples.finish()
}

/// LMDB put + synchronous commit: one op is `mdb_txn_begin`, `mdb_put` of a `value_bytes` value
/// under a random 8-byte key, `mdb_txn_commit` (which fdatasyncs: the environment is opened
/// without `MDB_NOSYNC`). Each sample uses a fresh environment in [`Options::dir`] (`/dev/shm`
/// for the emulated-PM figure, a disk directory for the fsync figure), prefilled untimed with
/// [`LMDB_PREFILL_KEYS`] values of the same size, and does at most [`LMDB_MAX_OPS_PER_SAMPLE`]
/// ops (for values above 25 KiB both are lowered to keep a sample within
/// [`LMDB_MAX_BYTES_PER_SAMPLE`]). Returns µs per op, one thread.
pub fn lmdb_put_commit(opts: &Options, value_bytes: u64, work: Work) -> Result<Measurement> {
    opts.check()?;
    work.check()?;
    if value_bytes == 0 || value_bytes > (1 << 20) {
        return Err(Error::InvalidParameter(format!(
            "LMDB value size {value_bytes} (need 1..=1 MiB)"
        )));
    }
    // Bounded in count and, for large values, in bytes (/dev/shm is memory).
    let cap = LMDB_MAX_OPS_PER_SAMPLE.min(LMDB_MAX_BYTES_PER_SAMPLE / (value_bytes + 64));
    let prefill = LMDB_PREFILL_KEYS.min(LMDB_MAX_BYTES_PER_SAMPLE / 4 / (value_bytes + 64));
    // Leaf or overflow pages per value, twice for copy-on-write garbage, plus room for the tree.
    let map_bytes = (cap + prefill) * (value_bytes + 4096 + 64) * 2 + (64 << 20);
    let value: Vec<u8> = (0..value_bytes).map(|i| (i % 253) as u8).collect();
    let mut samples = Samples::new(Unit::MicrosPerOp, opts, 1);
    let mut sample = 0u64;
    while sample == 0 || samples.wants_more() {
        let scratch = Scratch::dir(&opts.dir, "lmdb")?;
        let mut env = LmdbEnv::open(&scratch.path, map_bytes, 0)?;
        let mut rng = c_rng_state(opts.seed, 0x6c6d_6462 + sample);
        env.prefill(&value, prefill, &mut rng)?;
        let this_work = if sample == 0 {
            Work::Ops(LMDB_CHUNK_OPS)
        } else {
            work
        };
        let timed = time_here(|| {
            let mut ops = 0u64;
            let start = Instant::now();
            while !this_work.done(ops, start.elapsed()) && ops < cap {
                let chunk = this_work.next_chunk(ops, LMDB_CHUNK_OPS).min(cap - ops);
                env.put_commit_run(&value, chunk, &mut rng)?;
                ops += chunk;
            }
            Ok(ops)
        })?;
        drop(env);
        if sample > 0 {
            samples.push(timed);
        }
        sample += 1;
    }
    samples.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::BoxError;

    #[test]
    fn work_budgets() {
        assert!(Work::Ops(10).done(10, Duration::ZERO));
        assert!(!Work::Ops(10).done(9, Duration::from_secs(100)));
        assert_eq!(Work::Ops(10).next_chunk(4, 100), 6);
        assert_eq!(Work::Ops(10).next_chunk(10, 100), 1);
        assert_eq!(
            Work::Duration(Duration::from_millis(5)).next_chunk(0, 64),
            64
        );
        assert!(Work::Ops(0).check().is_err());
        assert!(Work::Duration(Duration::ZERO).check().is_err());
    }

    #[test]
    fn rust_generator_is_the_c_one() {
        let mut rust = c_rng_state(9, 9);
        let mut c = rust;
        for _ in 0..1000 {
            assert_eq!(xorshift_next(&mut rust), crate::sys::c_rand_next(&mut c));
        }
    }

    /// Counts live blocks, so a test can see the harness frees each block exactly once.
    struct Counting {
        live: std::sync::atomic::AtomicI64,
        calls: AtomicU64,
    }

    impl BenchAllocator for Counting {
        type Block = Box<[u8]>;
        fn alloc(&self, size_bytes: u64) -> std::result::Result<Box<[u8]>, BoxError> {
            self.live.fetch_add(1, Ordering::Relaxed);
            self.calls.fetch_add(1, Ordering::Relaxed);
            Ok(vec![0u8; usize::try_from(size_bytes)?].into_boxed_slice())
        }
        fn free(&self, block: Box<[u8]>) -> std::result::Result<(), BoxError> {
            self.live.fetch_sub(1, Ordering::Relaxed);
            drop(block);
            Ok(())
        }
    }

    #[test]
    fn generic_harness_frees_every_block_once() {
        let opts = Options {
            dir: std::env::temp_dir(),
            repeats: 2,
            ..Options::default()
        };
        let counting = Counting {
            live: 0.into(),
            calls: AtomicU64::new(0),
        };
        let m = alloc_free_with(&opts, &counting, 64, 2, Work::Ops(300)).unwrap();
        assert_eq!(m.ops_total, 2 * 2 * 300);
        assert_eq!(counting.live.load(Ordering::Relaxed), 0);
        let params = LarsonParams {
            threads: 3,
            slots_per_thread: 20,
            min_bytes: 8,
            max_bytes: 100,
            epochs: 3,
            work_per_epoch: Work::Ops(200),
        };
        let m = larson_with(&opts, &counting, &params).unwrap();
        assert_eq!(m.ops_total, 2 * 3 * 3 * 200);
        assert_eq!(counting.live.load(Ordering::Relaxed), 0);
        assert!(counting.calls.load(Ordering::Relaxed) > m.ops_total);
    }

    #[test]
    fn generic_harness_reports_allocator_failure() {
        struct Failing;
        impl BenchAllocator for Failing {
            type Block = ();
            fn alloc(&self, _: u64) -> std::result::Result<(), BoxError> {
                Err("pool full".into())
            }
            fn free(&self, _: ()) -> std::result::Result<(), BoxError> {
                Ok(())
            }
        }
        let opts = Options {
            dir: std::env::temp_dir(),
            ..Options::default()
        };
        let err = alloc_free_with(&opts, &Failing, 64, 1, Work::Ops(1)).unwrap_err();
        assert!(matches!(err, Error::Allocator(_)), "{err}");
        assert!(err.to_string().contains("pool full"));
    }

    #[test]
    fn glibc_through_the_generic_harness() {
        let opts = Options {
            dir: std::env::temp_dir(),
            repeats: 1,
            ..Options::default()
        };
        let m = alloc_free_with(&opts, &crate::GlibcMalloc, 256, 1, Work::Ops(1000)).unwrap();
        assert!(m.median > 0.0);
    }

    fn timed(ops: u64, wall_ms: u64, cpu_ms: u64) -> Timed {
        Timed {
            ops,
            wall: Duration::from_millis(wall_ms),
            cpu: Duration::from_millis(cpu_ms),
            threads: 1,
        }
    }

    #[test]
    fn contention_filter_retakes_and_falls_back() {
        let opts = Options {
            repeats: 2,
            min_cpu_share: 0.9,
            ..Options::default()
        };
        let mut samples = Samples::new(Unit::OpsPerSec, &opts, 1);
        samples.push(timed(1000, 10, 5)); // half the CPU: set aside
        assert!(samples.wants_more());
        samples.push(timed(2000, 10, 10));
        samples.push(timed(3000, 10, 10));
        assert!(!samples.wants_more());
        let m = samples.finish().unwrap();
        assert_eq!(m.samples_set_aside, 1);
        assert_eq!(m.samples.len(), 2);
        assert_eq!(m.median, 250_000.0);
        assert_eq!(m.ops_total, 5000);

        // Nothing passes: bounded attempts, then the set-aside samples are the figure.
        let mut samples = Samples::new(Unit::MicrosPerOp, &opts, 1);
        let mut attempts = 0;
        while samples.wants_more() {
            samples.push(timed(10, 10, 1));
            attempts += 1;
        }
        assert_eq!(attempts, 2 * MAX_ATTEMPTS_PER_REPEAT);
        let m = samples.finish().unwrap();
        assert_eq!(m.samples.len(), 2 * MAX_ATTEMPTS_PER_REPEAT);
        assert_eq!(m.samples_set_aside, 0);
        assert!((m.cpu_share - 0.1).abs() < 1e-9);

        let bad = Options {
            min_cpu_share: 1.5,
            ..Options::default()
        };
        assert!(glibc_alloc_free(&bad, 64, 1, Work::Ops(1)).is_err());
    }

    proptest::proptest! {
        #[test]
        fn contention_filter_is_bounded(
            repeats in 1usize..8,
            min_share in 0.0f64..=1.0,
            shares in proptest::collection::vec(0.0f64..=1.0, 0..64),
        ) {
            let opts = Options { repeats, min_cpu_share: min_share, ..Options::default() };
            let mut samples = Samples::new(Unit::MicrosPerOp, &opts, 1);
            let mut taken = 0;
            for share in shares.iter().cycle().take(1000) {
                if !samples.wants_more() {
                    break;
                }
                let cpu_ms = (share * 1000.0) as u64;
                samples.push(timed(10, 1000, cpu_ms));
                taken += 1;
            }
            proptest::prop_assert!(taken <= repeats * MAX_ATTEMPTS_PER_REPEAT);
            if taken > 0 {
                let m = samples.finish().unwrap();
                proptest::prop_assert!(m.samples.len() <= repeats * MAX_ATTEMPTS_PER_REPEAT);
                proptest::prop_assert!(m.samples.len() + m.samples_set_aside <= taken);
            }
        }
    }

    #[test]
    fn rng_states_are_nonzero_and_distinct() {
        let a = c_rng_state(1, 0);
        let b = c_rng_state(1, 1);
        assert_ne!(a, 0);
        assert_ne!(a, b);
        assert_eq!(a, c_rng_state(1, 0));
    }

    #[test]
    fn oversized_pools_are_refused_before_any_allocation() {
        let opts = Options::default();
        let err = pmdk_alloc_free(&opts, MAX_BLOCK_BYTES, 64, Work::Ops(1)).unwrap_err();
        assert!(matches!(err, Error::InvalidParameter(_)), "{err}");
        let left: Vec<_> = std::fs::read_dir(&opts.dir)
            .map(|d| d.filter_map(|e| e.ok()).collect())
            .unwrap_or_default();
        let prefix = format!("pmo-peers-{}-alloc", std::process::id());
        assert!(!left
            .iter()
            .any(|e| e.file_name().to_string_lossy().starts_with(&prefix)));
    }

    #[test]
    fn pool_sizing_covers_huge_blocks() {
        // 400 blocks of 1 MiB take 5 chunks of 256 KiB each.
        let bytes = alloc_pool_bytes(1 << 20, 400);
        assert!(bytes >= 400 * 5 * (256 << 10));
        assert!(alloc_pool_bytes(64, 1) >= PMDK_MIN_POOL_BYTES);
    }

    #[test]
    fn run_threads_sums_ops_of_all_threads() {
        let mut states = vec![0u64; 3];
        let timed = run_threads(&mut states, Work::Ops(10), |s, _| {
            *s += 1;
            Ok(5)
        })
        .unwrap();
        assert_eq!(timed.ops, 30);
        assert_eq!(timed.threads, 3);
        assert_eq!(states, vec![2, 2, 2]);
        assert!(timed.wall > Duration::ZERO);
        let both = timed.then(timed);
        assert_eq!(
            (both.ops, both.wall, both.cpu),
            (60, timed.wall * 2, timed.cpu * 2)
        );
    }

    #[test]
    fn run_threads_reports_a_failing_step() {
        let mut states = vec![(); 2];
        let err = run_threads(&mut states, Work::Ops(10), |_, _| Err(Error::OutOfMemory));
        assert!(matches!(err, Err(Error::OutOfMemory)));
    }

    #[test]
    fn glibc_alloc_free_gives_a_positive_figure() {
        let opts = Options {
            dir: std::env::temp_dir(),
            repeats: 3,
            ..Options::default()
        };
        let m = glibc_alloc_free(&opts, 64, 2, Work::Ops(1000)).unwrap();
        assert_eq!(m.samples.len(), 3);
        assert!(m.median > 0.0);
        assert_eq!(m.ops_total, 3 * 2 * 1000);
    }

    #[test]
    fn bad_parameters_are_errors() {
        let opts = Options::default();
        assert!(glibc_alloc_free(&opts, 0, 1, Work::Ops(1)).is_err());
        assert!(glibc_alloc_free(&opts, 64, 0, Work::Ops(1)).is_err());
        let no_repeats = Options {
            repeats: 0,
            ..Options::default()
        };
        assert!(glibc_alloc_free(&no_repeats, 64, 1, Work::Ops(1)).is_err());
        let mut larson = LarsonParams::standard(1);
        larson.min_bytes = 2000;
        assert!(glibc_larson(&opts, &larson).is_err());
    }
}

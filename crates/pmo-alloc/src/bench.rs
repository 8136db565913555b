//! Allocator workloads shared by the `alloc_bench` example and `pmo bench`.
//!
//! Owns: the POSEIDON microbenchmark ([`microbench`]), a Larson-style server simulation
//! ([`larson`]), and the [`BenchAlloc`] adapter trait with implementations for this heap, glibc
//! `malloc` and a heap that also tracks live blocks in a hash table ([`HashTracked`], to price
//! the hash-table design the free-time lookup replaces).
//!
//! Figures are alloc+free *pairs* per second over all threads (PMDK's "1.7 M alloc+free/s").
//! The workloads are not timed tests: they run as long as their arguments say.
//!
//! Why unsafe is allowed here: `BenchAlloc::free` is an unsafe trait method (glibc `free`).
#![allow(unsafe_code)]

use crate::error::{HeapError, Result};
use crate::heap::Heap;
use crate::region::MappedHeap;
use crate::sys;
use rand::rngs::StdRng as SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::collections::HashSet;
use std::ptr::NonNull;
use std::sync::{Barrier, Mutex};
use std::time::Instant;

/// Blocks each thread allocates before freeing them (POSEIDON's microbenchmark).
pub const MICRO_BATCH_BLOCKS: usize = 100;
/// Distinct random free orders cycled through by each thread.
const MICRO_ORDERS: usize = 16;

/// An allocator the workloads can drive.
pub trait BenchAlloc: Sync {
    /// Allocate `size` bytes (16-byte aligned); `None` when out of memory.
    fn alloc(&self, size: usize) -> Option<NonNull<u8>>;
    /// Free a block.
    ///
    /// # Safety
    /// `ptr` came from `self.alloc` and has not been freed.
    unsafe fn free(&self, ptr: NonNull<u8>);
}

impl BenchAlloc for Heap {
    fn alloc(&self, size: usize) -> Option<NonNull<u8>> {
        Heap::alloc(self, size, 16).ok()
    }
    unsafe fn free(&self, ptr: NonNull<u8>) {
        // A failing free here is a benchmark bug; the heap itself stays consistent.
        let r = Heap::free(self, ptr);
        debug_assert!(r.is_ok(), "benchmark freed a bad pointer: {r:?}");
    }
}

impl BenchAlloc for MappedHeap {
    fn alloc(&self, size: usize) -> Option<NonNull<u8>> {
        Heap::alloc(self, size, 16).ok()
    }
    unsafe fn free(&self, ptr: NonNull<u8>) {
        let r = Heap::free(self, ptr);
        debug_assert!(r.is_ok(), "benchmark freed a bad pointer: {r:?}");
    }
}

impl<A: BenchAlloc + ?Sized> BenchAlloc for &A {
    fn alloc(&self, size: usize) -> Option<NonNull<u8>> {
        (**self).alloc(size)
    }
    unsafe fn free(&self, ptr: NonNull<u8>) {
        // SAFETY: forwarded from the caller.
        unsafe { (**self).free(ptr) }
    }
}

/// glibc `malloc`/`free`: the volatile upper bound.
#[derive(Debug, Default, Clone, Copy)]
pub struct GlibcMalloc;

impl BenchAlloc for GlibcMalloc {
    fn alloc(&self, size: usize) -> Option<NonNull<u8>> {
        sys::libc_malloc(size)
    }
    unsafe fn free(&self, ptr: NonNull<u8>) {
        // SAFETY: forwarded from the caller: `ptr` came from `libc_malloc`.
        unsafe { sys::libc_free(ptr) }
    }
}

/// Shards of [`HashTracked`]'s table (a power of two).
const HASH_SHARDS: usize = 64;

/// Wraps an allocator and also records every live block in a sharded hash set, checking each
/// free against it: the extra work of a "hash table of live allocations" design, in DRAM.
pub struct HashTracked<A> {
    inner: A,
    shards: Vec<Mutex<HashSet<usize>>>,
}

impl<A> HashTracked<A> {
    /// Wrap `inner`.
    pub fn new(inner: A) -> Self {
        HashTracked {
            inner,
            shards: (0..HASH_SHARDS)
                .map(|_| Mutex::new(HashSet::new()))
                .collect(),
        }
    }
    fn shard(&self, p: usize) -> &Mutex<HashSet<usize>> {
        &self.shards[(p >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58 & (HASH_SHARDS - 1)]
    }
}

impl<A: BenchAlloc> BenchAlloc for HashTracked<A> {
    fn alloc(&self, size: usize) -> Option<NonNull<u8>> {
        let p = self.inner.alloc(size)?;
        self.shard(p.as_ptr() as usize)
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(p.as_ptr() as usize);
        Some(p)
    }
    unsafe fn free(&self, ptr: NonNull<u8>) {
        let known = self
            .shard(ptr.as_ptr() as usize)
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(ptr.as_ptr() as usize));
        if known {
            // SAFETY: forwarded from the caller.
            unsafe { self.inner.free(ptr) }
        }
    }
}

/// Write the first bytes of a block, as a user initialising it would.
#[inline]
fn touch(p: NonNull<u8>, size: usize, value: u8) {
    // SAFETY: `p` is a fresh block of at least `size` bytes owned by the calling thread.
    unsafe { std::ptr::write_bytes(p.as_ptr(), value, size.min(8)) };
}

/// POSEIDON's microbenchmark: each of `threads` threads allocates [`MICRO_BATCH_BLOCKS`] blocks
/// of `size` bytes, frees them in a random order, and repeats `rounds` times. Returns
/// alloc+free pairs per second over all threads. `heap_factory` is called once per run.
pub fn microbench<A: BenchAlloc, F: FnMut() -> A>(
    heap_factory: F,
    size: usize,
    threads: usize,
    rounds: usize,
) -> Result<f64> {
    microbench_sample(heap_factory, size, threads, rounds).map(|s| s.pairs_per_s)
}

/// One timed run of a workload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Alloc+free pairs per second of wall time, all threads.
    pub pairs_per_s: f64,
    /// CPU time the workers got over the CPU time they could have had
    /// (`wall * min(threads, CPUs)`): below 1 the machine was busy with other work.
    pub cpu_share: f64,
}

/// [`microbench`], also reporting how much of the machine the run got.
pub fn microbench_sample<A: BenchAlloc, F: FnMut() -> A>(
    mut heap_factory: F,
    size: usize,
    threads: usize,
    rounds: usize,
) -> Result<Sample> {
    let heap = heap_factory();
    let threads = threads.max(1);
    let barrier = Barrier::new(threads + 1);
    let failed = std::sync::atomic::AtomicBool::new(false);
    // Each thread times itself from the common start: the main thread may not even be
    // scheduled while the workers run (threads >= CPUs).
    let spans: Mutex<Vec<(Instant, Instant, u64)>> = Mutex::new(Vec::with_capacity(threads));
    std::thread::scope(|s| {
        for t in 0..threads {
            let (heap, barrier, failed, spans) = (&heap, &barrier, &failed, &spans);
            s.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(0x5EED + t as u64);
                let orders: Vec<Vec<usize>> = (0..MICRO_ORDERS)
                    .map(|_| {
                        let mut o: Vec<usize> = (0..MICRO_BATCH_BLOCKS).collect();
                        o.shuffle(&mut rng);
                        o
                    })
                    .collect();
                let mut blocks = [None::<NonNull<u8>>; MICRO_BATCH_BLOCKS];
                barrier.wait();
                let started = Instant::now();
                let cpu_started_ns = sys::thread_cpu_ns();
                'rounds: for r in 0..rounds {
                    for (i, b) in blocks.iter_mut().enumerate() {
                        match heap.alloc(size) {
                            Some(p) => {
                                touch(p, size, i as u8);
                                *b = Some(p);
                            }
                            None => {
                                failed.store(true, std::sync::atomic::Ordering::Relaxed);
                                break 'rounds;
                            }
                        }
                    }
                    for &i in &orders[r % MICRO_ORDERS] {
                        if let Some(p) = blocks[i].take() {
                            // SAFETY: `p` came from `heap.alloc` in this round, freed once.
                            unsafe { heap.free(p) };
                        }
                    }
                }
                let ended = Instant::now();
                let cpu_ns = sys::thread_cpu_ns().saturating_sub(cpu_started_ns);
                spans
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((started, ended, cpu_ns));
                for p in blocks.iter_mut().filter_map(Option::take) {
                    // SAFETY: as above (left over after a failed allocation).
                    unsafe { heap.free(p) };
                }
            });
        }
        barrier.wait();
    });
    let spans = spans.into_inner().unwrap_or_else(|e| e.into_inner());
    let (Some(first), Some(last)) = (
        spans.iter().map(|s| s.0).min(),
        spans.iter().map(|s| s.1).max(),
    ) else {
        return Err(HeapError::OutOfSpace { size });
    };
    let elapsed = last - first;
    let cpu_ns: u64 = spans.iter().map(|s| s.2).sum();
    let cpus = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(threads);
    let cpu_share = cpu_ns as f64 / (elapsed.as_nanos() as f64 * cpus as f64).max(1.0);
    if failed.load(std::sync::atomic::Ordering::Relaxed) {
        return Err(HeapError::OutOfSpace { size });
    }
    let pairs = (threads * rounds * MICRO_BATCH_BLOCKS) as f64;
    Ok(Sample {
        pairs_per_s: pairs / elapsed.as_secs_f64(),
        cpu_share,
    })
}

/// Parameters of [`larson`].
#[derive(Debug, Clone, Copy)]
pub struct LarsonParams {
    /// Worker threads.
    pub threads: usize,
    /// Live blocks each thread keeps.
    pub slots_per_thread: usize,
    /// Smallest block.
    pub min_size: usize,
    /// Largest block.
    pub max_size: usize,
    /// Replacements (free one random slot, allocate a new block in it) per thread per round.
    pub ops_per_round: usize,
    /// Rounds; between rounds each thread's slots pass to the next thread, so blocks are freed
    /// by a thread other than the one that allocated them (as in Larson's server simulation).
    pub rounds: usize,
}

/// Larson-style server simulation. Returns replacements (one free + one alloc) per second.
pub fn larson<A: BenchAlloc, F: FnMut() -> A>(mut heap_factory: F, p: LarsonParams) -> Result<f64> {
    let heap = heap_factory();
    let threads = p.threads.max(1);
    let mut rng = SmallRng::seed_from_u64(0x1A450);
    let mut slots: Vec<Vec<usize>> = Vec::with_capacity(threads);
    for _ in 0..threads {
        let mut v = Vec::with_capacity(p.slots_per_thread);
        for _ in 0..p.slots_per_thread {
            let size = rng.gen_range(p.min_size..=p.max_size);
            let b = heap.alloc(size).ok_or(HeapError::OutOfSpace { size })?;
            v.push(b.as_ptr() as usize);
        }
        slots.push(v);
    }
    let failed = std::sync::atomic::AtomicBool::new(false);
    let start = Instant::now();
    for round in 0..p.rounds {
        let (heap, failed) = (&heap, &failed);
        slots = std::thread::scope(|s| {
            let handles: Vec<_> = slots
                .drain(..)
                .enumerate()
                .map(|(t, mut mine)| {
                    s.spawn(move || {
                        let mut rng = SmallRng::seed_from_u64((round * 1000 + t) as u64);
                        for _ in 0..p.ops_per_round {
                            let i = rng.gen_range(0..mine.len());
                            if let Some(old) = NonNull::new(mine[i] as *mut u8) {
                                // SAFETY: every slot holds a live block from `heap.alloc`.
                                unsafe { heap.free(old) };
                            }
                            let size = rng.gen_range(p.min_size..=p.max_size);
                            match heap.alloc(size) {
                                Some(b) => {
                                    touch(b, size, 0xA5);
                                    mine[i] = b.as_ptr() as usize;
                                }
                                None => {
                                    mine[i] = 0;
                                    failed.store(true, std::sync::atomic::Ordering::Relaxed);
                                }
                            }
                        }
                        mine
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_default())
                .collect()
        });
        slots.rotate_left(1);
    }
    let secs = start.elapsed().as_secs_f64();
    for v in slots {
        for b in v.into_iter().filter_map(|a| NonNull::new(a as *mut u8)) {
            // SAFETY: every non-zero slot holds a live block.
            unsafe { heap.free(b) };
        }
    }
    if failed.load(std::sync::atomic::Ordering::Relaxed) {
        return Err(HeapError::OutOfSpace { size: p.max_size });
    }
    Ok((threads * p.ops_per_round * p.rounds) as f64 / secs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::HeapOptions;

    #[test]
    fn microbench_runs_on_every_allocator() {
        let opts = HeapOptions {
            subheaps: 2,
            ..Default::default()
        };
        let ours = microbench(
            || MappedHeap::anonymous(64 << 20, &opts).unwrap(),
            64,
            2,
            20,
        )
        .unwrap();
        let glibc = microbench(|| GlibcMalloc, 64, 2, 20).unwrap();
        let hashed = microbench(
            || HashTracked::new(MappedHeap::anonymous(64 << 20, &opts).unwrap()),
            256,
            1,
            20,
        )
        .unwrap();
        assert!(ours > 0.0 && glibc > 0.0 && hashed > 0.0);
    }

    #[test]
    fn microbench_reports_out_of_space() {
        let opts = HeapOptions {
            subheaps: 1,
            ..Default::default()
        };
        let r = microbench(
            || MappedHeap::anonymous(4 << 20, &opts).unwrap(),
            64 << 10,
            1,
            2,
        );
        assert!(matches!(r, Err(HeapError::OutOfSpace { .. })));
    }

    #[test]
    fn larson_runs_and_leaves_the_heap_empty() {
        let opts = HeapOptions {
            subheaps: 2,
            ..Default::default()
        };
        let heap = MappedHeap::anonymous(64 << 20, &opts).unwrap();
        let p = LarsonParams {
            threads: 2,
            slots_per_thread: 200,
            min_size: 8,
            max_size: 1000,
            ops_per_round: 2000,
            rounds: 3,
        };
        assert!(larson(|| &*heap, p).unwrap() > 0.0);
        let report = heap.check().unwrap();
        assert_eq!(report.live_allocations, 0);
    }
}

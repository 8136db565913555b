//! The interface an allocator under test implements to be measured by the peers' harness
//! ([`BenchAllocator`]). It sits below both users: `bench` drives any implementation through
//! the same threads, timing and repeats as PMDK, and `sys` implements it for glibc `malloc`
//! (`GlibcMalloc`), so the two need not import each other.

use crate::error::BoxError;

/// An allocator measured with the same harness as the peers: pmo's own allocator implements it
/// in a benchmark crate that depends on both, so its figures come from the same threads,
/// barrier, timing, warm-up, repeats, random orders and sizes as PMDK's.
///
/// Contract: `alloc` returns a block of at least `size_bytes` usable bytes that stays valid until
/// it is passed to `free`; `free` receives each block exactly once, possibly on another thread
/// than the one that allocated it (Larson hands slots between threads). Both may be called from
/// many threads at once.
pub trait BenchAllocator: Sync {
    /// What `alloc` returns and `free` takes back.
    type Block: Send;
    /// Allocates a block of `size_bytes`.
    fn alloc(&self, size_bytes: u64) -> std::result::Result<Self::Block, BoxError>;
    /// Frees a block this allocator returned.
    fn free(&self, block: Self::Block) -> std::result::Result<(), BoxError>;
}

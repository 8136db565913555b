//! The crate's error type. Every fallible public call returns [`HeapError`]; free-time misuse
//! (double, interior, invalid frees) has its own variant and leaves the heap unchanged.

use std::io;

/// Errors of the persistent heap.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HeapError {
    /// The region base is not aligned to an OS page.
    #[error("region base {0:#x} is not aligned to 4096 bytes")]
    Misaligned(usize),
    /// The region cannot hold the requested layout.
    #[error("region of {len} bytes is too small (need at least {min})")]
    RegionTooSmall {
        /// Bytes given.
        len: u64,
        /// Bytes needed.
        min: u64,
    },
    /// Options given to `format` are out of range.
    #[error("invalid options: {0}")]
    InvalidOptions(&'static str),
    /// The region does not start with a heap header.
    #[error("no heap header (bad magic)")]
    BadMagic,
    /// The header is of a format version this build does not read.
    #[error("unsupported heap format version {0}")]
    BadVersion(u32),
    /// The header's checksum does not match its bytes.
    #[error("heap header checksum mismatch")]
    BadChecksum,
    /// The header decodes but describes a layout that does not fit.
    #[error("heap header geometry is invalid: {0}")]
    BadGeometry(&'static str),
    /// Metadata inside a sub-heap is inconsistent (found by `open`, an operation or `check`).
    #[error("heap metadata corrupt in sub-heap {subheap}: {reason}")]
    Corrupt {
        /// Sub-heap index (`u32::MAX`: the header or root page, or across sub-heaps).
        subheap: u32,
        /// What is wrong.
        reason: &'static str,
    },
    /// No sub-heap has a free block of this size.
    #[error("out of space for {size} bytes")]
    OutOfSpace {
        /// Bytes requested.
        size: usize,
    },
    /// The request is larger than one sub-heap's data area.
    #[error("request of {size} bytes exceeds the largest block ({max} bytes)")]
    TooLarge {
        /// Bytes requested.
        size: usize,
        /// Largest possible block.
        max: usize,
    },
    /// Alignment is not a power of two or exceeds 4096.
    #[error("unsupported alignment {0}")]
    BadAlignment(usize),
    /// The pointer is outside the heap's data area.
    #[error("pointer is not inside this heap")]
    NotInHeap,
    /// The pointer is the start of a block that is already free.
    #[error("double free")]
    DoubleFree,
    /// The pointer lies inside a live block but not at its start.
    #[error("pointer is interior to a live block")]
    InteriorPointer,
    /// The pointer is inside the heap but is not (and does not lie in) a live block.
    #[error("pointer is not an allocated block")]
    NotAllocated,
    /// A typed pointer is misaligned for its type or does not fit the heap.
    #[error("heap pointer offset {0:#x} is invalid for this heap")]
    BadHeapPtr(u64),
    /// Mapping a region (tests and benchmarks) failed.
    #[error("mapping the region failed: {0}")]
    Map(#[source] io::Error),
    /// Changing page protection failed.
    #[error("metadata protection failed: {0}")]
    Protect(#[source] io::Error),
    /// The requested protection mode is not available on this machine.
    #[error("protection mode unavailable: {0}")]
    ProtectionUnavailable(&'static str),
    /// An earlier failure to re-protect metadata left the heap in an unknown state.
    #[error("heap is poisoned by an earlier protection failure")]
    Poisoned,
}

/// Result alias of the crate.
pub type Result<T, E = HeapError> = std::result::Result<T, E>;

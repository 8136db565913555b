//! The crate's error type.

use pmo_alloc::HeapError;
use pmo_heap::PmoHeapError;
use pmo_store::StoreError;

/// Errors of typed persistent data.
#[derive(Debug, thiserror::Error)]
pub enum TypedError {
    /// The heap or the store under it failed.
    #[error(transparent)]
    Heap(#[from] PmoHeapError),
    /// The allocator refused (out of space, too large) or found its metadata corrupt.
    #[error(transparent)]
    Alloc(#[from] HeapError),
    /// A mutation through a read-only attach.
    #[error("the PMO is attached read-only")]
    ReadOnly,
    /// A container used outside the PMO it belongs to (a handle moved into DRAM).
    #[error(
        "this container does not live in the attached PMO (was it moved out with mem::replace?)"
    )]
    NotInPmo,
    /// A container header found elsewhere than where it was bound: moved by other means than
    /// its container's methods (`mem::swap`, `mem::take`, an assignment), e.g. a copy kept in
    /// DRAM across a detach without psync and stored back next to the original.
    #[error("this container was moved from where it lives in the PMO (by mem::swap, mem::take or an assignment): only its containers' own methods may move it")]
    Moved,
    /// A container that points into another heap (moved between two attached PMOs).
    #[error(
        "this container belongs to another heap (heap id {found:#x}, this heap is {expected:#x})"
    )]
    ForeignHeap {
        /// The attached heap's id.
        expected: u64,
        /// The id the container recorded.
        found: u64,
    },
    /// A read-only attach of a heap whose root was never created.
    #[error("the heap has no typed root yet (create it with a read-write attach)")]
    NoRoot,
    /// The root holds another type.
    #[error("the root holds another type (layout {found:#x}, {found_size} bytes), not {wanted} (layout {expected:#x}, {expected_size} bytes)")]
    RootMismatch {
        /// The requested type's name.
        wanted: &'static str,
        /// Its layout hash.
        expected: u64,
        /// Its size.
        expected_size: u64,
        /// The stored layout hash.
        found: u64,
        /// The stored size.
        found_size: u64,
    },
    /// An index past the end.
    #[error("index {index} out of bounds (length {len})")]
    OutOfBounds {
        /// The index.
        index: u64,
        /// The length.
        len: u64,
    },
    /// A key a `PKv` cannot store.
    #[error("invalid key of {len} bytes (need 1..=32 bytes, no NUL byte)")]
    InvalidKey {
        /// Its length.
        len: usize,
    },
    /// A size that does not fit in memory.
    #[error("capacity overflow")]
    CapacityOverflow,
    /// A container's persistent state is inconsistent (the PMO was altered outside pmo).
    #[error("corrupt persistent data: {0}")]
    Corrupt(&'static str),
    /// A PString holds bytes that are not UTF-8 (altered outside pmo).
    #[error("corrupt persistent string: {0}")]
    Utf8(#[from] std::str::Utf8Error),
    /// The attachment uses a dirty tracking typed data does not support.
    #[error("{0}")]
    Unsupported(&'static str),
}

impl From<StoreError> for TypedError {
    fn from(e: StoreError) -> Self {
        TypedError::Heap(PmoHeapError::Store(e))
    }
}

/// Result alias.
pub type Result<T, E = TypedError> = std::result::Result<T, E>;

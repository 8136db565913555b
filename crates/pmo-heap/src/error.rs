//! The crate's error type: the store's and the allocator's errors, plus the combinations this
//! crate refuses.

use pmo_alloc::HeapError;
use pmo_store::StoreError;

/// Errors of a heap in a PMO.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PmoHeapError {
    /// The store failed (pool, namespace, key, attach, psync).
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// The allocator failed (format, open, alloc, free, check).
    #[error("heap: {0}")]
    Heap(#[from] HeapError),
    /// Guard mode `mprotect`s metadata pages inside the mapping; the named fault mechanism
    /// manages the mapping's page protections itself, so the two would undo each other and
    /// writes could escape the store's dirty tracking.
    #[error(
        "guard-mode metadata protection cannot be used with the {mechanism} fault mechanism \
         (it manages page protections itself): attach with userfaultfd, or use Protection::Off"
    )]
    GuardIncompatible {
        /// Name of the mechanism serving the attachment.
        mechanism: &'static str,
    },
    /// A benchmark could not run (parameters, a peer's failure).
    #[error("benchmark: {0}")]
    Bench(String),
}

/// Result alias of the crate.
pub type Result<T, E = PmoHeapError> = std::result::Result<T, E>;

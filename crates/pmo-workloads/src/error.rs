//! The crate's error type.

use pmo_store::StoreError;

/// Errors of the workload suite.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkloadError {
    /// A store call failed (pool, PMO, attach, psync, detach).
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// A parameter is out of its documented range.
    #[error("invalid parameter {what}: {detail}")]
    Invalid {
        /// The parameter.
        what: &'static str,
        /// Why it was refused.
        detail: String,
    },
    /// An attached PMO cannot hold the workload's matrices as `f64`s.
    #[error("PMO '{name}' ({len_bytes} bytes at {addr:#x}) cannot hold {need_bytes} bytes of f64 matrices")]
    Mapping {
        /// The PMO.
        name: String,
        /// Its mapped size.
        len_bytes: usize,
        /// Its mapped address.
        addr: usize,
        /// What the workload needs.
        need_bytes: usize,
    },
}

/// Result with [`WorkloadError`].
pub type Result<T> = std::result::Result<T, WorkloadError>;

pub(crate) fn invalid(what: &'static str, detail: impl Into<String>) -> WorkloadError {
    WorkloadError::Invalid {
        what,
        detail: detail.into(),
    }
}

//! The store's error type.

use pmo_format::FormatError;
use pmo_medium::MediumError;

/// Everything that can go wrong in the store. Integrity errors ([`StoreError::is_integrity`])
/// mean the medium does not hold what pmo wrote; all others are usage or environment errors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    #[error("wrong key for PMO '{0}'")]
    WrongKey(String),
    #[error("no PMO named '{0}'")]
    NotFound(String),
    #[error("a PMO named '{0}' already exists")]
    Exists(String),
    #[error("pool is full: {0}")]
    NoSpace(String),
    /// Readers beside the writer pin more old page versions than the pin table holds
    /// (`PMO_PIN_PAGES`): a psync refused before it wrote anything (`docs/readers.md`).
    #[error("PMO '{name}' cannot be psynced now: readers keep {kept} old page versions of it, the most it may keep (PMO_PIN_PAGES); the oldest reader pins psync {oldest}: refresh or detach it, then psync again")]
    PinLimit {
        name: String,
        kept: u64,
        oldest: u64,
    },
    #[error("PMO '{name}' is attached {how}")]
    Busy { name: String, how: &'static str },
    #[error("address range {addr:#x}+{len:#x} for PMO '{name}' is already mapped in this process (attach with relocation allowed to map it elsewhere)")]
    AddressInUse { name: String, addr: u64, len: u64 },
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("PMO '{0}' is attached read-only")]
    ReadOnly(String),
    #[error("not a pmo pool: {0}")]
    NotAPool(String),
    /// No pool file (or device) at the path: the one answer of every interface (CLI, Rust, C,
    /// Python) to a missing pool; errno `ENOENT`.
    #[error("no pool at {}: create one with `pmo init --size 1GiB`, or name another with --pool or PMO_POOL", path.display())]
    NoPool { path: std::path::PathBuf },
    #[error("pool file already exists: {0}")]
    PoolExists(String),
    #[error("corrupted pool: {0}")]
    Corrupt(String),
    #[error("integrity check failed for PMO '{name}' page {page}: {reason}")]
    Integrity {
        name: String,
        page: u64,
        reason: String,
    },
    #[error("integrity check failed for PMO '{name}': {reason}")]
    IntegrityPmo { name: String, reason: String },
    #[error("the pool is unusable after an earlier persistence failure; reopen it")]
    Poisoned,
    #[error("medium error: {0}")]
    Medium(#[from] MediumError),
    #[error("{op}: {source}")]
    Io { op: String, source: std::io::Error },
    #[error("{0}")]
    Os(String),
    #[error("not supported: {0}")]
    Unsupported(String),
}

impl StoreError {
    /// True for corruption and integrity failures (CLI exit code 2).
    pub fn is_integrity(&self) -> bool {
        matches!(
            self,
            StoreError::Corrupt(_) | StoreError::Integrity { .. } | StoreError::IntegrityPmo { .. }
        )
    }
    /// The errno the C API reports for this error.
    pub fn errno(&self) -> i32 {
        match self {
            StoreError::WrongKey(_) | StoreError::ReadOnly(_) => libc_errno::EACCES,
            StoreError::NotFound(_) | StoreError::NoPool { .. } => libc_errno::ENOENT,
            StoreError::Exists(_) | StoreError::PoolExists(_) => libc_errno::EEXIST,
            StoreError::NoSpace(_) | StoreError::PinLimit { .. } => libc_errno::ENOSPC,
            StoreError::Busy { .. } | StoreError::AddressInUse { .. } => libc_errno::EBUSY,
            StoreError::Invalid(_) | StoreError::NotAPool(_) => libc_errno::EINVAL,
            StoreError::Corrupt(_)
            | StoreError::Integrity { .. }
            | StoreError::IntegrityPmo { .. }
            | StoreError::Poisoned => libc_errno::EIO,
            StoreError::Io { source, .. } => source.raw_os_error().unwrap_or(libc_errno::EIO),
            StoreError::Medium(_) | StoreError::Os(_) => libc_errno::EIO,
            StoreError::Unsupported(_) => libc_errno::ENOTSUP,
        }
    }
}

impl From<FormatError> for StoreError {
    fn from(e: FormatError) -> StoreError {
        match e {
            FormatError::Foreign => {
                StoreError::NotAPool("no pmo superblock (a foreign or empty file)".into())
            }
            FormatError::TooNew { .. } => {
                StoreError::Unsupported(format!("{e}: a newer pmo wrote it; open it with that one"))
            }
            other => StoreError::Corrupt(other.to_string()),
        }
    }
}

/// The errno values the store maps to (Linux numbering), without a libc dependency.
mod libc_errno {
    pub const ENOENT: i32 = 2;
    pub const EIO: i32 = 5;
    pub const EACCES: i32 = 13;
    pub const EBUSY: i32 = 16;
    pub const EEXIST: i32 = 17;
    pub const EINVAL: i32 = 22;
    pub const ENOSPC: i32 = 28;
    pub const ENOTSUP: i32 = 95;
}

/// Result with [`StoreError`].
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    /// An OS error keeps its errno (as the C API's `PMO_E_IO` does): a missing pool file is
    /// ENOENT to an LMDB program on a PMO, not EIO.
    #[test]
    fn an_os_error_keeps_its_errno() {
        let e = |errno| StoreError::Io {
            op: "open pool".into(),
            source: std::io::Error::from_raw_os_error(errno),
        };
        assert_eq!(e(libc_errno::ENOENT).errno(), libc_errno::ENOENT);
        assert_eq!(e(libc_errno::EACCES).errno(), libc_errno::EACCES);
        let other = StoreError::Io {
            op: "x".into(),
            source: std::io::Error::other("no errno"),
        };
        assert_eq!(other.errno(), libc_errno::EIO);
    }
}

//! The file store's error type.

use pmo_store::StoreError;

/// Everything a file-store call can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FsError {
    #[error("no such file or directory: {0}")]
    NotFound(String),
    #[error("already exists: {0}")]
    Exists(String),
    #[error("not a directory: {0}")]
    NotADirectory(String),
    #[error("is a directory: {0}")]
    IsADirectory(String),
    #[error("directory not empty: {0}")]
    NotEmpty(String),
    #[error("bad path {path:?}: {reason}")]
    BadPath { path: String, reason: String },
    #[error("file store is full: {0}")]
    NoSpace(String),
    #[error("file too large: {0}")]
    TooLarge(String),
    #[error("busy: {0}")]
    Busy(String),
    #[error("bad file handle: {0}")]
    BadHandle(String),
    #[error("corrupted file store: {0}")]
    Corrupt(String),
    #[error(transparent)]
    Store(StoreError),
}

impl FsError {
    /// Corruption or an integrity failure (CLI exit code 2).
    pub fn is_integrity(&self) -> bool {
        match self {
            FsError::Corrupt(_) => true,
            FsError::Store(e) => e.is_integrity(),
            _ => false,
        }
    }
}

impl From<StoreError> for FsError {
    fn from(e: StoreError) -> FsError {
        match e {
            StoreError::NoSpace(m) => FsError::NoSpace(m),
            e => FsError::Store(e),
        }
    }
}

pub type Result<T> = std::result::Result<T, FsError>;

//! The crate's error type. Every failure of a peer library, of the file system or of a parameter
//! check is one of these; nothing in this crate panics on bad input.

use std::path::PathBuf;

/// What can go wrong while setting up or running a peer benchmark.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A libpmemobj call failed; `message` is `pmemobj_errormsg()` at the time.
    #[error("PMDK {operation} failed: {message} (errno {errno})")]
    Pmdk {
        /// The PMDK operation, e.g. "pmemobj_create".
        operation: &'static str,
        /// The errno the call left.
        errno: i32,
        /// PMDK's own message.
        message: String,
    },
    /// An LMDB call failed; `message` is `mdb_strerror(code)`.
    #[error("LMDB {operation} failed: {message} (code {code})")]
    Lmdb {
        /// The LMDB operation, e.g. "mdb_env_open".
        operation: &'static str,
        /// LMDB's code: an errno value or one of LMDB's own negative codes.
        code: i32,
        /// `mdb_strerror(code)`.
        message: String,
    },
    /// glibc malloc returned NULL.
    #[error("glibc malloc failed: out of memory")]
    OutOfMemory,
    /// libpmem does not treat the pool as persistent memory, so PMDK would persist with msync and
    /// the figure would not be the emulated-PM one.
    #[error(
        "libpmem does not treat {path} as persistent memory: start the process with \
         PMEM_IS_PMEM_FORCE=1 (or call ensure_pmem_force before any PMDK call)"
    )]
    NotPersistentMemory {
        /// The pool file.
        path: PathBuf,
    },
    /// A parameter is out of the range the benchmark supports.
    #[error("invalid parameter: {0}")]
    InvalidParameter(String),
    /// Creating or removing a scratch file or directory failed.
    #[error("I/O on {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// A benchmark thread panicked (a bug in this crate or in the allocator under test).
    #[error("a benchmark thread panicked")]
    ThreadPanicked,
    /// An allocator measured through [`crate::BenchAllocator`] failed.
    #[error("allocator under test failed: {0}")]
    Allocator(#[source] BoxError),
}

/// The error an allocator under test reports through [`crate::BenchAllocator`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// `Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

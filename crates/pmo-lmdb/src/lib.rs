//! LMDB on Persistent Memory Objects.
//!
//! The real LMDB (the source the `lmdb-master-sys` crate ships), built with one patch
//! (`patches/mdb-pmo.patch`): an environment whose path names a PMO keeps its data in that PMO.
//! Its map is the PMO's attachment at its stable address, a writer runs with `MDB_WRITEMAP`,
//! and a commit ends with one `psync` where LMDB would msync or fdatasync. Design, lock file and
//! multi-process rules: `docs/lmdb.md`.
//!
//! - [`glue`]: the hooks the patch calls, and the [`Backend`] (pool, key, attach options).
//! - [`Env`], [`Txn`]: a small safe Rust API over the same C library.
//! - [`programs`]: LMDB's own programs (`mdb_stat`, `mdb_dump`, `mdb_load`, `mdb_copy`,
//!   `mdb_drop`, `mtest` .. `mtest6`), unchanged, run in-process.
//! - [`paths`]: which environment paths are PMOs, and the PMO name a path maps to.
//! - [`ffi`]: LMDB's C API; [`ffi::abi`] exports it under LMDB's names (`libpmo_lmdb.a`, the
//!   drop-in `liblmdb.so.0` of crate `pmo-lmdb-dropin`).
//! - [`lockdir`]: the lock directories outside the pool: their owner files, orphans, removal.
//! - [`kv`]: the YCSB store (`pmo_ycsb::KvStore`) over an environment.
#![deny(unsafe_code)]

pub mod bench;
pub mod crashcheck;
pub mod env;
pub mod ffi;
pub mod glue;
pub mod kv;
pub mod paths;
pub mod programs;

pub use env::{Env, EnvOptions, Txn};
pub use glue::{install, uninstall, Backend};
/// LMDB's lock directories (crate `pmo-lmdb-lockdir`).
pub use pmo_lmdb_lockdir as lockdir;

use pmo_store::StoreError;

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
pub enum LmdbError {
    /// The pool or PMO underneath (wrong key, no such PMO, busy, integrity...).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// An LMDB call failed; `what` names it.
    #[error("{what}: {msg}")]
    Mdb {
        what: &'static str,
        code: i32,
        msg: String,
    },
    /// The lock file's directory could not be made.
    #[error("LMDB lock file: {0}")]
    Lock(String),
    /// Bad arguments or configuration.
    #[error("{0}")]
    Usage(String),
    /// An environment path whose PMO name would be too long (`ENAMETOOLONG`).
    #[error("{0}")]
    Name(String),
}

impl LmdbError {
    /// The errno the hooks return to LMDB for this error.
    pub fn errno(&self) -> i32 {
        match self {
            LmdbError::Store(e) => e.errno(),
            LmdbError::Mdb { code, .. } => *code,
            LmdbError::Lock(_) => libc::EIO,
            LmdbError::Usage(_) => libc::EINVAL,
            LmdbError::Name(_) => libc::ENAMETOOLONG,
        }
    }

    /// Corruption or a failed integrity check (the CLI's exit code 2).
    pub fn is_integrity(&self) -> bool {
        match self {
            LmdbError::Store(e) => e.is_integrity(),
            LmdbError::Mdb { code, .. } => {
                matches!(
                    *code,
                    ffi::MDB_CORRUPTED | ffi::MDB_PANIC | ffi::MDB_INVALID
                )
            }
            _ => false,
        }
    }

    /// LMDB's `MDB_MAP_FULL`: the PMO is full.
    pub fn is_map_full(&self) -> bool {
        matches!(
            self,
            LmdbError::Mdb {
                code: ffi::MDB_MAP_FULL,
                ..
            }
        )
    }
}

impl From<lockdir::LockDirError> for LmdbError {
    fn from(e: lockdir::LockDirError) -> LmdbError {
        match e {
            lockdir::LockDirError::Store(e) => LmdbError::Store(e),
            lockdir::LockDirError::Lock(m) => LmdbError::Lock(m),
        }
    }
}

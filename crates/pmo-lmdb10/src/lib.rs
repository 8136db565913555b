//! LMDB 1.0.2 with its own page encryption, as an LMDB user would run it: the encrypted peer
//! `pmo bench lmdb|ycsb` weighs `pmo-secure` against (issue 28, `docs/lmdb.md`).
//!
//! - `build.rs`: LMDB 1.0.2 compiled from the natdb-sys package's vendored source, every global
//!   C symbol renamed `lmdb10_*` (pmo-lmdb's LMDB 0.9 is linked into the same binaries).
//! - [`cipher`]: the `MDB_enc_func` LMDB calls for every page it writes or reads from the file
//!   (AES-256-GCM, AWS-LC, 16-byte tags, nonce = page number and transaction id), and the key,
//!   Argon2id over a passphrase with a salt kept beside the data file.
//! - [`Env`], [`Txn`]: open with a key, a map size and flags; get/put/del in transactions; a
//!   cursor walk.
#![deny(unsafe_code)]

pub mod cipher;
mod env;
pub mod ffi;

pub use cipher::{KdfParams, KDF_FILE};
pub use env::{strerror, version, Env, EnvOptions, Txn};

use std::path::PathBuf;

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
pub enum Lmdb10Error {
    /// An LMDB call failed: its code and LMDB's message.
    #[error("{what}: {msg} (LMDB 1.0 code {code})")]
    Mdb {
        what: &'static str,
        code: i32,
        msg: String,
    },
    /// The passphrase does not match the environment's key verifier.
    #[error("wrong key for the encrypted LMDB 1.0 environment {0}")]
    WrongKey(PathBuf),
    #[error("key derivation: {0}")]
    Kdf(String),
    #[error("AWS-LC: {0} failed")]
    Crypto(&'static str),
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Usage(String),
}

impl Lmdb10Error {
    /// LMDB's code, for an LMDB error.
    pub fn code(&self) -> Option<i32> {
        match self {
            Lmdb10Error::Mdb { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// True when LMDB found a page that fails to decrypt or verify, or a damaged structure: the
    /// data is not what was committed (never returned as data).
    pub fn is_integrity(&self) -> bool {
        matches!(
            self.code(),
            Some(
                ffi::MDB_CRYPTO_FAIL
                    | ffi::MDB_BAD_CHECKSUM
                    | ffi::MDB_CORRUPTED
                    | ffi::MDB_PANIC
                    | ffi::MDB_INVALID
            )
        )
    }
}

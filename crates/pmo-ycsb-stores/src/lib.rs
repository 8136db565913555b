//! YCSB stores beside LMDB, each a [`pmo_ycsb::KvStore`]:
//!
//! - [`pmdk::PmdkKv`]: a hash map over PMDK libpmemobj transactions (`csrc/pmdk_kv.c`, written
//!   here: Debian ships libpmemobj but not PMDK's example maps), in a pool file on `/dev/shm`
//!   treated as persistent memory. Built only where libpmemobj is installed (`cfg(pmdk)`);
//!   elsewhere [`pmdk::PmdkKv::create`] returns [`StoresError::Unavailable`].
//! - [`typed::TypedBTreeKv`] (`pmo_typed::kv::PKv`, a `PBTreeMap`) and [`typed::TypedHashKv`]
//!   (a `PHashMap`): the typed persistent maps of pmo-typed in a PMO, through its public API.
//! - [`lmdb10::Lmdb10Kv`]: LMDB 1.0.2 with its own page encryption (`pmo-lmdb10`: AES-256-GCM
//!   per page through `mdb_env_set_encrypt`), the peer an LMDB user weighs pmo against
//!   (issue 28); its files in a directory under `/dev/shm`, synchronous commits.
//!
//! [`bench::stores`] hands them to `pmo bench lmdb|ycsb` (`pmo_lmdb::bench::OtherStore`).
//!
//! Every write is durable when it returns (one PMDK transaction; one psync). The hash maps are
//! unordered: their `scan` is [`StoresError::NoScan`] and [`pmo_ycsb::KvStore::scans`] is false,
//! so a driver skips YCSB E for them.

pub mod bench;
pub mod lmdb10;
pub mod pmdk;
pub mod typed;

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
pub enum StoresError {
    #[error("the PMDK store is not built: libpmemobj was not found at build time (Debian libpmemobj-dev)")]
    Unavailable,
    #[error("PMDK {op}: {msg} (errno {errno})")]
    Pmdk {
        op: &'static str,
        errno: i32,
        msg: String,
    },
    #[error("{path}: libpmem does not treat the pool as persistent memory (PMEM_IS_PMEM_FORCE=1 was set too late)")]
    NotPmem { path: String },
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("{store}: a hash map has no key order, so no scans")]
    NoScan { store: String },
    #[error(transparent)]
    Typed(#[from] pmo_typed::TypedError),
    #[error(transparent)]
    Lmdb10(#[from] pmo_lmdb10::Lmdb10Error),
}

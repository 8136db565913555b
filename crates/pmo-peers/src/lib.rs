//! pmo-peers: the figures pmo is compared against, measured on this machine.
//!
//! The peers are PMDK `libpmemobj` 1.12 (Debian `libpmemobj-dev`) on emulated persistent memory
//! (a pool file in `/dev/shm` with `PMEM_IS_PMEM_FORCE=1`), LMDB 0.9 (Debian `liblmdb-dev`) and
//! glibc `malloc` as the volatile bound. Each benchmark's inner loop is C (`csrc/peers.c`) calling
//! the peer's own API; Rust owns threads, timing, repeats and statistics. This crate is a
//! workspace member but not a default member: a plain `cargo build`/`cargo test` never needs PMDK.
//! Install the libraries with `crates/pmo-peers/install-deps.sh`; `docs/peers.md` has the figures.
//!
//! Glossary:
//! - **op**: the unit a benchmark counts; each benchmark's doc says what one op is.
//! - **sample**: one timed run of a benchmark; a [`Measurement`] is the samples of the repeats and
//!   their median.
//! - **round** (POSEIDON pattern): allocate [`ROUND_BLOCKS`] blocks, free them in random order.
//! - **epoch** (Larson): a timed stretch after which every thread's slots go to the next thread.
//! - **pool**: a PMDK pool file, created fresh for each benchmark call and removed afterwards.
//!
//! ```
//! use std::time::Duration;
//! use pmo_peers::{pmdk_alloc_free, pmdk_tx_update, Options, Work};
//!
//! # fn main() -> pmo_peers::Result<()> {
//! let opts = Options { repeats: 3, ..Options::default() }; // pools in /dev/shm
//! let tx = pmdk_tx_update(&opts, 4096, Work::Ops(200))?;
//! assert!(tx.median > 0.0); // µs per 4 KiB transaction, median of 3 samples
//! let alloc = pmdk_alloc_free(&opts, 64, 2, Work::Duration(Duration::from_millis(5)))?;
//! println!("{:.0} alloc+free pairs/s, cpu share {:.2}", alloc.median, alloc.cpu_share);
//! # Ok(())
//! # }
//! ```
//!
//! Invariants: every file or directory a benchmark creates lives under [`Options::dir`], carries
//! this process's id in its name and is removed when the call returns (also on error); every
//! buffer, pool and map is sized from the parameters before the timed loop, and the work of one
//! sample is bounded in operations or in time.

#![deny(unsafe_code)]
#![warn(missing_docs)]

mod allocator;
mod bench;
mod error;
mod stats;
mod sys;

pub use allocator::BenchAllocator;
pub use bench::{
    alloc_free_with, glibc_alloc_free, glibc_larson, larson_with, lmdb_put_commit, pmdk_alloc_free,
    pmdk_larson, pmdk_tx_alloc_link, pmdk_tx_update, pmem_memcpy_persist, LarsonParams, Options,
    Work, LMDB_MAX_BYTES_PER_SAMPLE, LMDB_MAX_OPS_PER_SAMPLE, LMDB_PREFILL_KEYS,
    MAX_ATTEMPTS_PER_REPEAT, MAX_SCRATCH_POOL_BYTES, ROUND_BLOCKS, TX_ALLOC_LINK_MAX_OPS_PER_BATCH,
    TX_OBJECT_BYTES,
};
pub use error::{BoxError, Error, Result};
pub use stats::{Measurement, Unit};
pub use sys::{ensure_pmem_force, GlibcMalloc, MallocBlock, PmdkPool};

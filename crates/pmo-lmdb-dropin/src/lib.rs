//! The drop-in `liblmdb.so.0` (issue 28, `docs/lmdb.md`): LMDB 0.9's ABI and soname, built
//! from the same patched LMDB as `libpmo_lmdb.a` (crate `pmo-lmdb`). A program dynamically
//! linked against LMDB runs with its environments in PMOs, unchanged:
//!
//! ```sh
//! LD_LIBRARY_PATH=$(pmo-lmdb-run --lib-dir) PMO_LMDB_PATHS=/srv/db PMO_POOL=... PMO_KEY=... prog
//! ```
//!
//! Which environments live in PMOs: `pmo_lmdb::paths`. Every other path is an ordinary LMDB
//! environment on files, as the system's library would open it.
//!
//! This crate holds no code: the exported functions are `pmo_lmdb::ffi::abi` (every function
//! of lmdb.h and midl.h under its own name, forwarding to the patched library) and the hooks
//! of `pmo_lmdb::glue` (`pmo_lmdb_last_error` among them). A cdylib exports the
//! `#[no_mangle]` functions of the crates it links; linking `pmo_lmdb` is all it does.
#![deny(unsafe_code)]

pub use pmo_lmdb::ffi::abi;

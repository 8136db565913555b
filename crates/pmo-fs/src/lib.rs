//! A file store whose directories, files, data and metadata live in PMOs.
//!
//! | module | owns |
//! |---|---|
//! | [`path`] | checked paths and the PMO names they map to |
//! | [`header`] | a file's header (size, first segment's size) in its first PMO |
//! | [`store`] | [`FileStore`]: create, open, close, pread, pwrite, append, fsync (= psync), stat, unlink, mkdir, readdir, check, check_data (`pmo fs check`); `store/handle.rs` an open file's calls, `store/kept.rs` the write-back of kept files |
//! | [`writeback`] | closed files kept attached until their write-back ([`WriteBack`]) |
//!
//! Design (measured and argued in `docs/filebench.md`): one chain of PMOs per file, as the
//! seeds' PMO port of Filebench does, so that opening a file is an attach, closing it a
//! detach and fsync a psync, each under the PMO's own protection scheme. The pool's namespace
//! is the directory tree: a directory is a marker PMO, a file's first PMO carries its header,
//! and a file grows by further PMOs of doubling size. No directory block exists that could
//! disagree with the namespace, and free space is derived from the namespace, so a crash can
//! neither orphan a directory entry nor leak space (`FileStore::check` proves the latter).
//!
//! Invariants:
//! - a file reads, after any crash, as of its last fsync or write-back (a psync of its first
//!   PMO, which holds its size, after its other PMOs); a write-back follows a last close within
//!   [`WriteBack::after`] (`writeback.rs`);
//! - a file or directory exists only if its parent directory does;
//! - a segment PMO exists only while its file does and its size needs it (open repairs the
//!   leftovers of a crash in the middle of an unlink or a growth, and reports each);
//! - segments are created lowest first and destroyed highest first, so whatever a crash
//!   leaves of a path's segments is a run 1..k.
#![deny(unsafe_code)]

pub mod error;
pub mod header;
pub mod path;
pub mod store;
pub mod writeback;

pub use error::{FsError, Result};
pub use path::FsPath;
pub use store::{DirEntry, FileHandle, FileStore, FsCheck, FsOptions, Stat, StatKind};
pub use writeback::WriteBack;

//! The pmo store: pools of named Persistent Memory Objects on any medium. This crate is the
//! store's façade, the one every other crate uses; the work is done by five layer crates, each
//! knowing only those below it (`ARCHITECTURE.md`, "The store's layers"):
//!
//! | layer | owns | its modules here |
//! |---|---|---|
//! | `pmo-attach` | a PMO mapped at its stable address: [`Attachment`], dirty tracking, prediction, the detach worker, [`PPtr`] | [`attach`], [`tracking`], [`predict`], [`predict_history`], [`detach`], [`pptr`] |
//! | `pmo-life` | life-cycle operations: rename, rekey, resize, rotate, snapshot, export/import/copy, check | [`lifecycle`], [`resize`], [`rotate`], [`snapshot`], [`export`] |
//! | `pmo-pool` | a pool opened: pcreate, pdestroy, list, info; [`PmoHandle`] | (through [`Pool`]) |
//! | `pmo-engine` | one PMO on the medium: shadow-paging commit and recovery, protection, the sub-page log | [`engine`], [`protect`], [`stats`] |
//! | `pmo-meta` | pool metadata: [`StoreError`], schemes, keys, locks, the namespace | [`error`], [`scheme`], [`keys`], [`locks`], [`namespace`] |
//!
//! [`Pool`] (`facade.rs`) lists the constructors and every life-cycle and attach operation; the
//! pool layer's own operations are reached through `Deref`.
//!
//! Invariants:
//! - The store writes the medium only through [`pmo_medium::Medium`] (its writes, or a store
//!   window it hands out: see [`engine`]).
//! - Free space is derived from the namespace: a crash can never leak space.
//! - After any crash, each PMO reads as of its newest committed psync (see [`engine`]).
//! - A persistence failure poisons the pool: every later call fails with `Poisoned`.
#![deny(unsafe_code)]

pub use pmo_attach::{attach, detach, pptr, predict, predict_history, tracking};
pub use pmo_engine::{engine, protect, stats};
use pmo_life::check;

// The life-cycle modules as they were public before the split: their operations are `Pool`'s
// methods (facade.rs), not these modules' functions over the pool layer's `Pool`.
/// Rename and rekey (`Pool::rename`, `Pool::rekey`).
pub mod lifecycle {
    pub use pmo_life::lifecycle::header_copy;
}
/// Grow and shrink a PMO (`Pool::resize`, `Attachment::grow`, `Attachment::resize`).
pub mod resize {
    pub use pmo_attach::resize_attached::ResizeAttachedError;
    pub use pmo_life::resize::{ResizeOptions, ResizeReport, ADDRESS_HEADROOM};
}
/// Re-encryption under a new data key (`Pool::rotate`).
pub mod rotate {
    pub use pmo_pool::rotation::{BATCH, RECORD_OFF};
}
/// The live snapshot (`Pool::snapshot`, `Pool::snapshot_to_file`).
pub mod snapshot {
    pub use pmo_engine::gate::GATE_OFF;
    pub use pmo_life::snapshot::{SnapshotReport, FREE_PASSES, MAX_PASSES};
}
/// The export file (`Pool::export`, `Pool::import`, `Pool::copy`).
pub mod export {
    pub use pmo_life::export::{
        partial_path, Progress, EXPORT_MAGIC, EXPORT_VERSION, HEADER_LEN, MAC_LEN, RECORD_LEN,
    };
}
pub use pmo_meta::{error, keys, locks, namespace, scheme};
use pmo_pool::{handle, pool};
mod facade;
#[doc(hidden)]
pub mod fuzzing;

pub use attach::{AttachOptions, Attachment, DEFAULT_TRACKING};
pub use check::CheckReport;
pub use detach::wait_for_background_detaches;
pub use engine::{CommitStats, Page};
pub use error::{Result, StoreError};
pub use facade::Pool;
pub use handle::{PmoHandle, BUSY_ATTACHING, BUSY_READERS, BUSY_WRITER, BUSY_WRITER_HERE};
pub use pmo_format::KdfParams;
pub use pmo_os::view::{DirtyTracking, Mechanism};
pub use pmo_pool::reader::{beside_writer as reader_beside_writer, Refreshed};
pub use pool::{AttachState, Perm, PmoInfo, PoolInfo, PoolOptions};
pub use pptr::PPtr;
pub use predict::{PredictConfig, PredictStats};
pub use resize::{ResizeAttachedError, ResizeOptions, ResizeReport};
pub use scheme::{Scheme, Shadow};
pub use stats::SessionStats;

/// The pool used when none is named: `PMO_POOL`, else `$XDG_DATA_HOME/pmo/default.pool`,
/// else `$HOME/.local/share/pmo/default.pool`.
pub fn default_pool_path() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("PMO_POOL").filter(|p| !p.is_empty()) {
        return p.into();
    }
    let data = std::env::var_os("XDG_DATA_HOME")
        .filter(|p| !p.is_empty())
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".local/share")))
        .unwrap_or_else(std::env::temp_dir);
    data.join("pmo").join("default.pool")
}

/// Size of a default pool created on first use.
pub const DEFAULT_POOL_SIZE: u64 = 1 << 30;

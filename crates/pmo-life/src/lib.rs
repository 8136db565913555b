//! pmo's life-cycle operations (`ARCHITECTURE.md`, "The store's layers"): whatever changes or
//! copies a PMO as a whole, each a function over the pool layer's `Pool` and `PmoHandle`
//! (`pmo_store::Pool` lists them as methods). Maps nothing; never reaches into a layer below
//! other than through its public API.
//!
//! | module | owns |
//! |---|---|
//! | [`lifecycle`] | rename and rekey: an entry replaced crash-consistently through a free slot |
//! | [`resize`] | grow and shrink a PMO (in place within its capacity, or moved); grow a pool file |
//! | [`rotate`] | re-encryption under a new data key (`pmo_pool::rotation` is its mechanism) |
//! | [`snapshot`] | the live copy of a PMO's last psynced state beside its writer, into a sink |
//! | [`export`] | the export file format, its sinks, import |
//! | [`copy`] | snapshot to a new PMO or a file, export, copy: live copies into a sink |
//! | [`check`] | `Pool::check`: every checksum, the namespace, the space accounting |
#![deny(unsafe_code)]

pub mod check;
pub mod copy;
pub mod export;
pub mod lifecycle;
pub mod resize;
pub mod rotate;
pub mod snapshot;

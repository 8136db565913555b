//! pmo's pool metadata: the lowest layer of the store (`ARCHITECTURE.md`, "The store's layers").
//!
//! | module | owns |
//! |---|---|
//! | [`error`] | [`StoreError`], the error of every layer of the store |
//! | [`scheme`] | protection schemes: the four orthogonal policies and their names |
//! | [`keys`] | Argon2id master keys, key verifiers, key families, key wrapping |
//! | [`kept_keys`] | derived PMO keys kept per process for the next attach |
//! | `lru` | the least-recently-used map both key caches keep their entries in |
//! | [`locks`] | attach, metadata, gate and rotation lock words, across threads and processes |
//! | [`namespace`] | the in-memory namespace copy and the free-space map derived from it |
//! | [`redundancy`] | the copies of every slot, of the configuration and of the superblock; repairs |
//! | [`entries`] | names, the crash-consistent switch of an entry, shredding freed slots |
//! | [`address`] | where a PMO's stable address goes |
//! | [`meta`] | [`PoolMeta`]: an open pool's metadata in memory, and its poison flag |
//!
//! Never imports: pages, page maps, mappings, PMO contents (`pmo_format::layout` is the engine's).
//! Everything `pub` here is for the layers above (`pmo-engine`, `pmo-pool`, ...); the store's
//! public API is `pmo-store`'s.
#![deny(unsafe_code)]

pub mod address;
pub mod entries;
pub mod error;
pub mod kept_keys;
pub mod keys;
pub mod locks;
mod lru;
pub mod meta;
pub mod namespace;
pub mod redundancy;
pub mod scheme;

pub use error::{Result, StoreError};
pub use meta::{Health, PoolMeta};

//! pmo's pool layer (`ARCHITECTURE.md`, "The store's layers"): above `pmo-meta` (the pool's
//! metadata) and `pmo-engine` (one PMO on the medium), it puts them together.
//!
//! | module | owns |
//! |---|---|
//! | [`pool`] | [`Pool`](pool::Pool): create, open (= recover and upgrade) a pool; pcreate, pdestroy, list, info, configuration |
//! | [`attach_lock`] | a PMO's attach lock: taking it, the holder word, who `Busy` names |
//! | [`handle`] | [`PmoHandle`](handle::PmoHandle): one PMO opened by name and key (its attach lock, keys, protection, recovery), read and committed page by page |
//! | [`open`] | create and open (recover, upgrade, repair) a pool |
//! | [`upgrade`] | the upgrade of older pools at open |
//! | [`rotation`] | the rotation record and the re-encryption a keyed open resumes |
//! | [`inflight`] | background detaches in flight, which an open waits for |
//! | [`reader`] | readers beside a writer: a pinned snapshot of one psync, refresh |
//!
//! Knows no mappings: attach (`pmo-attach`) and the life-cycle operations (`pmo-life`) are
//! built on this layer's public API. Everything `pub` here is for those layers; the store's
//! public API is `pmo-store`'s.
#![deny(unsafe_code)]

pub mod attach_lock;
pub mod handle;
pub mod inflight;
pub mod open;
pub mod pool;
pub mod reader;
pub mod rotation;
pub mod upgrade;

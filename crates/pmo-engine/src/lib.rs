//! pmo's PMO engine: one PMO on the medium, given its extent, the medium and its keys
//! (`ARCHITECTURE.md`, "The store's layers"). Above `pmo-meta`; knows no namespace, no names
//! beyond the PMO's own (for its messages), no mappings and no pool.
//!
//! | module | owns |
//! |---|---|
//! | [`engine`] | [`PmoCore`](engine::PmoCore): one PMO's extent and layout, page reads |
//! | [`commit`] | the shadow-paging psync: pages, journal, commit record, page map |
//! | [`recover`] | recovery after a crash, commit records and journals, the structural check |
//! | [`plain`] | the plaintext area of `Shadow::Medium` schemes and its scrubbing |
//! | [`wide_check`] | the 16-bit check of page-map entries (version-4 upgrade, `pmo check`) |
//! | [`protect`] | at-rest protection: sealing, the verified page map, the version counter |
//! | [`protect_open`] | opening a PMO's protection: keys, the verified page map, the version counter |
//! | [`protect_live`] | a reader's verified page map moving on in place (a refresh) |
//! | [`log_state`] | the in-memory state of the sub-page commit log |
//! | [`sublog`] | the sub-page commit log: record, fold, recover |
//! | [`gate`] | the snapshot gate every psync passes |
//! | [`pins`] | the writer's side of readers beside it: keeping pinned versions |
//! | [`stats`] | per-session counters and the session record |
//!
//! Everything `pub` here is for the layers above; the store's public API is `pmo-store`'s.
#![deny(unsafe_code)]

pub mod commit;
pub mod engine;
pub mod gate;
pub mod log_state;
pub mod pins;
pub mod plain;
pub mod protect;
pub mod protect_live;
pub mod protect_open;
pub mod recover;
pub mod stats;
pub mod sublog;
pub mod wide_check;

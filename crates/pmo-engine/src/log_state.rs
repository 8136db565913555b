//! The in-memory state of a PMO's sub-page commit log ([`LogCell`], kept in its
//! [`PmoCore`](crate::engine::PmoCore)): the records appended since the last page commit and the
//! changes they hold that are not yet folded into their pages. `crate::sublog` works on it.

use std::sync::Mutex;

use pmo_format::sublog::{FIRST_RECORD_OFF, TAG_LEN};

/// One psynced change not yet folded into its page.
#[derive(Clone, Debug)]
pub(crate) struct LiveChange {
    pub(crate) page: u64,
    pub(crate) offset: usize,
    pub(crate) bytes: Vec<u8>,
}

/// The in-memory state of a PMO's log (one per [`PmoCore`]).
#[derive(Debug, Default)]
pub(crate) struct LogState {
    /// The core's sequence number when `base` was found (a commit since makes it stale; every
    /// commit takes the live changes first, and a fold that fails puts them back, so `live`
    /// holds exactly the valid records not yet in their pages).
    pub(crate) seq_seen: u64,
    /// The page-commit sequence the records apply over (`crate::sublog::log_base`).
    pub(crate) base: u64,
    /// Area offset of the next record.
    pub(crate) at: u64,
    /// Records appended over `base`.
    pub(crate) records: u64,
    pub(crate) prev_tag: [u8; TAG_LEN],
    pub(crate) live: Vec<LiveChange>,
}

impl LogState {
    pub(crate) fn reset(&mut self, seq_seen: u64, base: u64) {
        *self = LogState {
            seq_seen,
            base,
            at: FIRST_RECORD_OFF,
            ..Default::default()
        };
    }
}

/// A PMO's log state, kept in its `PmoCore`.
#[derive(Debug, Default)]
pub struct LogCell(Mutex<LogState>);

impl LogCell {
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, LogState> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

//! Attach and metadata locks, across threads and processes.
//!
//! On a medium with a path, locks are OFD byte-range locks on the pool file (see
//! `pmo_os::lock`): released by the kernel when the holder dies. The crash-simulation medium has
//! no file, so it uses an in-process table with the same semantics.
//!
//! Lock words (byte offsets far beyond any medium's end, so they never touch data):
//! - `META`: exclusive for namespace changes, pool recovery and configuration changes.
//! - `ATTACH_BASE + extent_off / 4096`: one per PMO, shared by readers, exclusive for a writer.
//! - `GATE_BASE + extent_off / 4096`: one per PMO, the snapshot gate (`crate::snapshot`).
//! - `ROTATE_BASE + extent_off / 4096`: one per PMO, held while a rotation re-encrypts.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use pmo_os::lock::{LockKind, RangeLock};

use crate::error::{Result, StoreError};

/// Lock word of the pool metadata.
pub const META: u64 = 1 << 62;
/// First lock word of the per-PMO attach locks.
pub const ATTACH_BASE: u64 = (1 << 62) + (1 << 40);

/// First lock word of the per-PMO snapshot gates (`crate::snapshot`): a psync passes it
/// shared while a snapshot that could not finish beside the writer holds it exclusively.
pub const GATE_BASE: u64 = (1 << 62) + (2 << 40);

/// The snapshot gate of the PMO whose extent starts at `extent_off`.
pub fn gate_word(extent_off: u64) -> u64 {
    GATE_BASE + extent_off / pmo_format::PAGE_SIZE
}

/// First lock word of the per-PMO rotation locks (`crate::rotate`): exclusive while pages are
/// re-encrypted, shared by a live snapshot.
pub const ROTATE_BASE: u64 = (1 << 62) + (3 << 40);

/// The rotation lock of the PMO whose extent starts at `extent_off`.
pub fn rotate_word(extent_off: u64) -> u64 {
    ROTATE_BASE + extent_off / pmo_format::PAGE_SIZE
}

/// First lock word of the per-PMO pin-table locks (`pmo-pins`): shared by every process that
/// has the PMO's pin table mapped (readers beside a writer, and a writer while readers exist),
/// exclusive for the last one leaving (which removes the table) and for destroy, rename,
/// resize and rotate (which refuse while readers exist).
pub const PINS_BASE: u64 = (1 << 62) + (4 << 40);

/// The pin-table lock of the PMO whose extent starts at `extent_off`.
pub fn pins_word(extent_off: u64) -> u64 {
    PINS_BASE + extent_off / pmo_format::PAGE_SIZE
}

/// The lock word of the PMO whose extent starts at `extent_off`.
pub fn attach_word(extent_off: u64) -> u64 {
    ATTACH_BASE + extent_off / pmo_format::PAGE_SIZE
}

#[derive(Default)]
struct LocalState {
    /// word -> (readers, writer)
    held: HashMap<u64, (u32, bool)>,
}

/// In-process lock table for media without a file.
#[derive(Default)]
pub struct LocalLocks {
    state: Mutex<LocalState>,
    cv: Condvar,
}

/// Where locks live.
#[derive(Clone)]
pub enum Locker {
    Ofd(PathBuf),
    Local(Arc<LocalLocks>),
}

/// A held lock; released on drop.
pub enum LockGuard {
    Ofd(RangeLock),
    Local {
        locks: Arc<LocalLocks>,
        word: u64,
        kind: LockKind,
    },
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LockGuard")
    }
}

fn io(e: pmo_os::lock::LockError) -> StoreError {
    StoreError::Os(e.to_string())
}

impl Locker {
    /// Take `word` as `kind`, waiting up to `wait` (`None`: fail at once if held).
    pub fn lock(
        &self,
        word: u64,
        kind: LockKind,
        wait: Option<Duration>,
    ) -> Result<Option<LockGuard>> {
        match self {
            Locker::Ofd(path) => Ok(RangeLock::acquire(path, word, 1, kind, wait)
                .map_err(io)?
                .map(LockGuard::Ofd)),
            Locker::Local(locks) => {
                let deadline = wait.map(|w| Instant::now() + w);
                let mut st = locks.state.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    let (readers, writer) = st.held.get(&word).copied().unwrap_or((0, false));
                    let free = match kind {
                        LockKind::Shared => !writer,
                        LockKind::Exclusive => !writer && readers == 0,
                    };
                    if free {
                        let e = st.held.entry(word).or_insert((0, false));
                        match kind {
                            LockKind::Shared => e.0 += 1,
                            LockKind::Exclusive => e.1 = true,
                        }
                        return Ok(Some(LockGuard::Local {
                            locks: locks.clone(),
                            word,
                            kind,
                        }));
                    }
                    let Some(deadline) = deadline else {
                        return Ok(None);
                    };
                    let now = Instant::now();
                    if now >= deadline {
                        return Ok(None);
                    }
                    st = locks
                        .cv
                        .wait_timeout(st, deadline - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            }
        }
    }

    /// Take `word` as `kind`, waiting as long as it takes.
    pub fn lock_blocking(&self, word: u64, kind: LockKind) -> Result<LockGuard> {
        match self {
            Locker::Ofd(path) => Ok(LockGuard::Ofd(
                RangeLock::acquire_blocking(path, word, 1, kind).map_err(io)?,
            )),
            Locker::Local(_) => loop {
                if let Some(g) = self.lock(word, kind, Some(Duration::from_secs(3600)))? {
                    return Ok(g);
                }
            },
        }
    }

    /// Who holds `word` (None if free), as seen by a new lock attempt.
    pub fn holder(&self, word: u64) -> Result<Option<LockKind>> {
        match self {
            Locker::Ofd(path) => {
                let f = std::fs::File::open(path).map_err(|source| StoreError::Io {
                    op: "open pool".into(),
                    source,
                })?;
                pmo_os::lock::query(&f, word, 1).map_err(io)
            }
            Locker::Local(locks) => {
                let st = locks.state.lock().unwrap_or_else(|e| e.into_inner());
                Ok(match st.held.get(&word) {
                    Some((_, true)) => Some(LockKind::Exclusive),
                    Some((r, false)) if *r > 0 => Some(LockKind::Shared),
                    _ => None,
                })
            }
        }
    }
}

impl LockGuard {
    /// Exchange an exclusive hold for a shared one without letting a writer in between.
    pub fn downgrade(&mut self) -> Result<()> {
        match self {
            LockGuard::Ofd(l) => l.downgrade().map_err(io),
            LockGuard::Local { locks, word, kind } => {
                if *kind == LockKind::Exclusive {
                    let mut st = locks.state.lock().unwrap_or_else(|e| e.into_inner());
                    let e = st.held.entry(*word).or_insert((0, false));
                    e.1 = false;
                    e.0 += 1;
                    *kind = LockKind::Shared;
                    locks.cv.notify_all();
                }
                Ok(())
            }
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if let LockGuard::Local { locks, word, kind } = self {
            let mut st = locks.state.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(e) = st.held.get_mut(word) {
                match kind {
                    LockKind::Shared => e.0 = e.0.saturating_sub(1),
                    LockKind::Exclusive => e.1 = false,
                }
                if *e == (0, false) {
                    st.held.remove(word);
                }
            }
            locks.cv.notify_all();
        }
    }
}

//! Attach and metadata locks, across threads and processes.
//!
//! On a medium with a path, locks are OFD byte-range locks on the pool file (see
//! `pmo_os::lock`): released by the kernel when the holder dies. The crash-simulation medium has
//! no file, so it uses an in-process table with the same semantics.
//!
//! [`Locker::lock`] on a pool file takes its locks through **one** open file description per
//! opened pool and process ([`OfdTable`]), opened at the first lock, not one per lock (an
//! `open` and a `close` per attach session were a quarter of a small PMO's session: issue 29):
//! the holders inside the process are arbitrated by the table (the same rules as
//! [`LocalLocks`]: shared beside shared, exclusive alone), and the description holds the OFD
//! lock while any of them holds the word, so other processes and other opens of the pool see
//! exactly what they saw before. [`Locker::lock_blocking`] goes through the table too, trying
//! again at most 20 ms apart while another process holds the word (a release inside the
//! process wakes it at once).
//!
//! Lock words (byte offsets far beyond any medium's end, so they never touch data):
//! - `META`: exclusive for namespace changes, pool recovery and configuration changes.
//! - `ATTACH_BASE + extent_off / 4096`: one per PMO, shared by readers, exclusive for a writer.
//!   An attach holds it over as many bytes as the PMO's extent has pages ([`attach_span`]), so
//!   the kernel merges the locks of PMOs adjacent in the pool that one description holds into
//!   one: the kernel walks all of a file's locks at every lock operation (a lock and unlock
//!   cost 0.5 µs with none held, 5.7 µs beside a thousand held one-byte locks, 1.3 beside a
//!   thousand adjacent spans), and the file store keeps many files attached (issue 29). The
//!   span covers only the PMO's own extent, so it meets no other PMO's word; another process's
//!   (or an older build's) lock of the word's first byte conflicts with it exactly as before.
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

/// The bytes an attach holds its word over: the pages of the PMO's extent of `extent_len`
/// bytes (module docs).
pub fn attach_span(extent_len: u64) -> u64 {
    (extent_len / pmo_format::PAGE_SIZE).max(1)
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

/// The pool file's one open file description in this process (opened at the first lock; a
/// fork child opens its own) and the holders of each word inside the process.
pub struct OfdTable {
    path: PathBuf,
    state: Mutex<OfdState>,
    cv: Condvar,
}

#[derive(Default)]
struct OfdState {
    /// The process that opened `file` (a fork child's inherited copy is not used).
    pid: u32,
    file: Option<Arc<std::fs::File>>,
    /// word -> (readers, writer) inside this process.
    held: HashMap<u64, (u32, bool)>,
    /// word -> the bytes the description's kernel lock of it spans, while held (1 unless
    /// taken with [`Locker::lock_span`]).
    spans: HashMap<u64, u64>,
    /// Threads of this process waiting in [`Locker::lock`] for a release: a release wakes
    /// them only when there are some (a `notify_all` is a system call even with no waiter).
    waiters: u32,
}

impl OfdTable {
    /// The table of the pool file at `path` (nothing opened yet).
    pub fn new(path: PathBuf) -> OfdTable {
        OfdTable {
            path,
            state: Mutex::new(OfdState::default()),
            cv: Condvar::new(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, OfdState> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let pid = pmo_os::lock::pid();
        if st.pid != pid {
            // First use, or a fork child: the parent's description and holders are not ours
            // (their guards, inherited, release nothing here: `LockGuard::drop`).
            st.pid = pid;
            st.file = None;
            st.held.clear();
            st.spans.clear();
            st.waiters = 0;
        }
        st
    }

    /// One attempt: `Ok(Some)` taken, `Ok(None)` held elsewhere (in or outside the process).
    fn try_lock(
        self: &Arc<Self>,
        word: u64,
        span: u64,
        kind: LockKind,
    ) -> Result<Option<LockGuard>> {
        let mut st = self.state();
        let (readers, writer) = st.held.get(&word).copied().unwrap_or((0, false));
        let free_here = match kind {
            LockKind::Shared => !writer,
            LockKind::Exclusive => !writer && readers == 0,
        };
        if !free_here {
            return Ok(None);
        }
        if readers == 0 && !writer {
            // Nobody in the process holds it: the description takes it from the kernel.
            let file = match &st.file {
                Some(f) => f.clone(),
                None => {
                    let f = Arc::new(pmo_os::lock::open_lock_file(&self.path).map_err(io)?);
                    st.file = Some(f.clone());
                    f
                }
            };
            if !pmo_os::lock::lock_file(&file, word, span.max(1), kind).map_err(io)? {
                return Ok(None);
            }
            st.spans.insert(word, span.max(1));
        }
        let e = st.held.entry(word).or_insert((0, false));
        match kind {
            LockKind::Shared => e.0 += 1,
            LockKind::Exclusive => e.1 = true,
        }
        Ok(Some(LockGuard::Table {
            table: self.clone(),
            word,
            kind,
            pid: st.pid,
        }))
    }

    fn release(&self, word: u64, kind: LockKind, pid: u32) {
        if pid != pmo_os::lock::pid() {
            // A guard a fork child inherited: the lock is its parent's description's.
            return;
        }
        let mut st = self.state();
        if let Some(e) = st.held.get_mut(&word) {
            match kind {
                LockKind::Shared => e.0 = e.0.saturating_sub(1),
                LockKind::Exclusive => e.1 = false,
            }
            if *e == (0, false) {
                st.held.remove(&word);
                let span = st.spans.remove(&word).unwrap_or(1);
                if let Some(f) = &st.file {
                    pmo_os::lock::unlock_file(f, word, span);
                }
            }
        }
        if st.waiters > 0 {
            self.cv.notify_all();
        }
    }

    fn downgrade(&self, word: u64) -> Result<()> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let span = st.spans.get(&word).copied().unwrap_or(1);
        if let Some(f) = &st.file {
            // The description's exclusive lock becomes shared atomically (never blocks).
            if !pmo_os::lock::lock_file(f, word, span, LockKind::Shared).map_err(io)? {
                return Err(StoreError::Os("downgrading an OFD lock was refused".into()));
            }
        }
        let e = st.held.entry(word).or_insert((0, false));
        e.1 = false;
        e.0 += 1;
        if st.waiters > 0 {
            self.cv.notify_all();
        }
        Ok(())
    }
}

/// Where locks live.
#[derive(Clone)]
pub enum Locker {
    Ofd(PathBuf, Arc<OfdTable>),
    Local(Arc<LocalLocks>),
}

impl Locker {
    /// Locks on the pool file at `path`.
    pub fn ofd(path: PathBuf) -> Locker {
        Locker::Ofd(path.clone(), Arc::new(OfdTable::new(path)))
    }
}

/// A held lock; released on drop.
pub enum LockGuard {
    Ofd(RangeLock),
    /// Held through the pool's one description in this process ([`OfdTable`]).
    Table {
        table: Arc<OfdTable>,
        word: u64,
        kind: LockKind,
        pid: u32,
    },
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
        self.lock_span(word, 1, kind, wait)
    }

    /// [`Locker::lock`], the kernel lock spanning `span` bytes from `word` when this process
    /// takes it from the kernel (an attach word: [`attach_span`]); the word's first byte is
    /// what conflicts, as for any lock of the word.
    pub fn lock_span(
        &self,
        word: u64,
        span: u64,
        kind: LockKind,
        wait: Option<Duration>,
    ) -> Result<Option<LockGuard>> {
        match self {
            Locker::Ofd(_, table) => {
                let deadline = wait.map(|w| Instant::now() + w);
                let mut backoff = Duration::from_micros(50);
                loop {
                    if let Some(g) = table.try_lock(word, span, kind)? {
                        return Ok(Some(g));
                    }
                    let Some(deadline) = deadline else {
                        return Ok(None);
                    };
                    let now = Instant::now();
                    if now >= deadline {
                        return Ok(None);
                    }
                    // Woken by a release inside the process, or polling for one outside.
                    let pause = backoff.min(deadline - now);
                    let mut st = table.state.lock().unwrap_or_else(|e| e.into_inner());
                    st.waiters += 1;
                    let (mut st, _) = table
                        .cv
                        .wait_timeout(st, pause)
                        .unwrap_or_else(|e| e.into_inner());
                    st.waiters -= 1;
                    backoff = (backoff * 2).min(Duration::from_millis(20));
                }
            }
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
        // On a pool file through the pool's description (no `open` + `close` per lock: the
        // metadata lock of every pcreate and pdestroy), polling while another process holds it.
        loop {
            if let Some(g) = self.lock(word, kind, Some(Duration::from_secs(3600)))? {
                return Ok(g);
            }
        }
    }

    /// Who holds `word` (None if free), as seen by a new lock attempt.
    pub fn holder(&self, word: u64) -> Result<Option<LockKind>> {
        match self {
            Locker::Ofd(path, _) => {
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
            LockGuard::Table {
                table, word, kind, ..
            } => {
                if *kind == LockKind::Exclusive {
                    table.downgrade(*word)?;
                    *kind = LockKind::Shared;
                }
                Ok(())
            }
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
        if let LockGuard::Table {
            table,
            word,
            kind,
            pid,
        } = self
        {
            table.release(*word, *kind, *pid);
            return;
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Two lockers of one pool file stand for two processes (each opens its own description).
    #[test]
    fn an_attach_span_conflicts_at_its_word_and_reaches_no_other_pmo() {
        let path = std::env::temp_dir().join(format!("pmo-locks-span-{}", std::process::id()));
        std::fs::write(&path, b"pool").unwrap();
        let (a, b) = (Locker::ofd(path.clone()), Locker::ofd(path.clone()));
        let w = attach_word(1 << 20);
        // A holds two PMOs adjacent in the pool, 4 pages each, over their spans (the kernel
        // may merge them into one lock).
        let g1 = a
            .lock_span(w, 4, LockKind::Exclusive, None)
            .unwrap()
            .unwrap();
        let mut g2 = a
            .lock_span(w + 4, 4, LockKind::Exclusive, None)
            .unwrap()
            .unwrap();
        for word in [w, w + 4] {
            assert!(
                b.lock(word, LockKind::Shared, None).unwrap().is_none(),
                "held by A"
            );
            assert_eq!(b.holder(word).unwrap(), Some(LockKind::Exclusive));
        }
        // The next PMO's word is nobody's.
        assert!(b.lock(w + 8, LockKind::Exclusive, None).unwrap().is_some());
        // A releases its first PMO: all of it, and nothing of the second.
        drop(g1);
        let first = b.lock_span(w, 4, LockKind::Exclusive, None).unwrap();
        assert!(first.is_some(), "released whole");
        assert!(
            b.lock(w + 4, LockKind::Exclusive, None).unwrap().is_none(),
            "still A's"
        );
        // A downgrade keeps the span: B may share it, not take it.
        g2.downgrade().unwrap();
        let shared = b.lock_span(w + 4, 4, LockKind::Shared, None).unwrap();
        assert!(shared.is_some());
        drop(shared);
        assert!(
            b.lock(w + 4, LockKind::Exclusive, None).unwrap().is_none(),
            "A shares it"
        );
        drop(g2);
        assert!(b.lock(w + 4, LockKind::Exclusive, None).unwrap().is_some());
        drop(first);
        std::fs::remove_file(&path).unwrap();
    }
}

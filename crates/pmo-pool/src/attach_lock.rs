//! A PMO's attach lock: taking it exclusively (waiting for a background detach that still
//! holds it), the holder word a writer records its pid in, and the `Busy` error that names who
//! holds the PMO.

use std::time::Duration;

use pmo_format::{Entry, PmoLayout};
use pmo_medium::Medium;
use pmo_os::lock::LockKind;

use crate::pool::Pool;
use pmo_engine::engine::PmoCore;
use pmo_meta::error::{Result, StoreError};
use pmo_meta::locks::{self, LockGuard};

impl Pool {
    /// Take `e`'s attach lock exclusively, waiting up to `wait`; a holder finishing a detach
    /// in the background is waited for regardless (the attach stall). `None`: still taken.
    pub fn lock_attach_exclusive(
        &self,
        e: &Entry,
        wait: Option<Duration>,
    ) -> Result<Option<LockGuard>> {
        let inner = &*self.inner;
        let word = locks::attach_word(e.extent_off);
        let detaching = || self.holder_word(e) & DETACHING != 0;
        // Whether a background detach holds the lock is asked both before and after the try:
        // asked only after, a detach that releases the lock and finishes between the failed
        // try and the question looks like a live user, and an attach that follows a detach
        // fails with `Busy` at random (seen under load). A detach that returned before this
        // call is in flight or marked detaching here, or its lock is already free.
        let before = detaching() || crate::inflight::in_flight(e.uuid);
        let span = locks::attach_span(e.extent_len);
        let first = inner
            .locker
            .lock_span(word, span, LockKind::Exclusive, wait)?;
        #[cfg(test)]
        tests::after_first_try();
        match first {
            None if before || detaching() || crate::inflight::in_flight(e.uuid) => {
                let stall = wait
                    .unwrap_or_default()
                    .max(crate::inflight::DETACH_STALL_MAX);
                let t = std::time::Instant::now();
                // This process's own background detach: wake when it is done, not by polling.
                crate::inflight::wait_for_pmo(e.uuid, stall);
                let left = stall.saturating_sub(t.elapsed());
                inner
                    .locker
                    .lock_span(word, span, LockKind::Exclusive, Some(left))
            }
            other => Ok(other),
        }
    }

    /// `e`'s holder word: the pid of the read-write holder (a writer records it), with
    /// [`DETACHING`] while it finishes a detach; 0 when none is recorded, or unreadable.
    pub fn holder_word(&self, e: &Entry) -> u32 {
        let mut b = [0u8; 4];
        match self
            .inner
            .medium
            .read(e.extent_off + PmoLayout::HOLDER_OFF, &mut b)
        {
            Ok(()) => u32::from_le_bytes(b),
            Err(_) => 0,
        }
    }

    /// The pid of the writer the holder word names (0: none).
    pub(crate) fn writer_pid(&self, e: &Entry) -> u32 {
        self.holder_word(e) & !DETACHING
    }

    pub fn busy(&self, e: &Entry) -> StoreError {
        let how = match self.inner.locker.holder(locks::attach_word(e.extent_off)) {
            // Readers record no pid: the lock alone cannot say whose.
            Ok(Some(LockKind::Shared)) => BUSY_READERS,
            // A writer records its pid in the holder word (informational, but its own pid is
            // only ever written by this process).
            _ => match self.writer_pid(e) {
                pid if pid == pmo_os::lock::pid() => BUSY_WRITER_HERE,
                // Held alone by an attach that names no writer: one still attaching.
                0 => BUSY_ATTACHING,
                _ => BUSY_WRITER,
            },
        };
        StoreError::Busy {
            name: e.name.clone(),
            how,
        }
    }
}

/// Record (or clear, with 0) the pid holding a PMO read-write. Flushed, not fenced: informational.
pub(crate) fn write_holder(m: &dyn Medium, core: &PmoCore, pid: u32) -> Result<()> {
    let off = core.extent_off + PmoLayout::HOLDER_OFF;
    m.write(off, &pid.to_le_bytes())?;
    m.flush(off, 4)?;
    Ok(())
}

/// [`StoreError::Busy`]'s `how` when readers hold a PMO.
pub const BUSY_READERS: &str = "read-only (by this process or another)";
/// [`StoreError::Busy`]'s `how` when a writer in another process holds a PMO.
pub const BUSY_WRITER: &str = "read-write by another process";
/// [`StoreError::Busy`]'s `how` when this process holds the PMO read-write.
pub const BUSY_WRITER_HERE: &str = "read-write by this process (detach it first)";
/// [`StoreError::Busy`]'s `how` when an attach that has not named a writer yet holds the PMO
/// alone (a reader recovering it, or a writer starting).
pub const BUSY_ATTACHING: &str = "alone by an attach in progress (try again, or wait)";

/// How long a reader waits, at least, for another attach that holds the PMO alone without
/// naming a writer: a reader's attach holds it so only while it recovers the PMO.
pub(crate) const READER_ATTACH_STALL: Duration = Duration::from_secs(2);

/// Holder-word flag: the holder is finishing a detach in the background (attach waits).
pub const DETACHING: u32 = 1 << 31;

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use std::sync::Arc;

    use super::*;
    use crate::pool::{Perm, PoolOptions};
    use pmo_format::PAGE_SIZE;
    use pmo_medium::crash::CrashMedium;

    thread_local! {
        /// Run once between `lock_attach_exclusive`'s first try and its check for a
        /// background detach (to replay an interleaving deterministically).
        static AFTER_FIRST_TRY: RefCell<Option<Box<dyn FnOnce()>>> = RefCell::new(None);
    }

    pub(super) fn after_first_try() {
        if let Some(f) = AFTER_FIRST_TRY.with(|h| h.borrow_mut().take()) {
            f();
        }
    }

    /// A background detach that releases the lock and finishes right after an attach's
    /// first try failed: the attach takes the lock, never `Busy` (the flaky `schemes` test).
    #[test]
    fn a_detach_finishing_between_the_try_and_the_check_is_waited_for() {
        let pool = Pool::create_on(
            Arc::new(CrashMedium::new(1 << 20)),
            &PoolOptions {
                kdf: pmo_format::KdfParams::INSECURE_FAST,
                ns_capacity: Some(4),
                ..Default::default()
            },
        )
        .unwrap();
        pool.pcreate("p", 4 * PAGE_SIZE, b"k").unwrap();
        let h = pool.open_pmo("p", Perm::Write, b"k", None).unwrap();
        let uuid = h.core.uuid;
        // As `detach::finish` does before its detach returns: queued, lock still held.
        crate::inflight::track_for_test(uuid);
        AFTER_FIRST_TRY.with(|f| {
            *f.borrow_mut() = Some(Box::new(move || {
                drop(h); // the worker's drop: releases the lock ...
                crate::inflight::done_for_test(uuid); // ... then it is no longer in flight
            }))
        });
        let again = pool.open_pmo("p", Perm::Write, b"k", None);
        assert!(AFTER_FIRST_TRY.with(|f| f.borrow().is_none()), "hook ran");
        assert!(again.is_ok(), "{:?}", again.err());
    }
}

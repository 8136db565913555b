//! The snapshot gate of one PMO (`docs/lifecycle.md`, "Live snapshot"): a word in the PMO's
//! header page and a lock word. Every psync passes the gate; a snapshot that cannot finish
//! beside the writer closes it, and psyncs wait until it opens again.

use pmo_medium::Medium;
use pmo_meta::locks::{self, Locker};
use pmo_os::lock::LockKind;

use crate::engine::PmoCore;
use pmo_meta::error::Result;

/// Offset in the PMO's header page of the snapshot gate word (u64, non-zero while a snapshot
/// wants psyncs to pass the gate lock; written without a fence: coordination, not state).
pub const GATE_OFF: u64 = 2056;

pub fn write_gate(core: &PmoCore, m: &dyn Medium, v: u64) -> Result<()> {
    m.write(core.abs(GATE_OFF), &v.to_le_bytes())?;
    Ok(())
}

/// Called by every psync before it commits: if a snapshot has closed the gate, wait for it
/// (the returned guard is held until the commit is done).
pub fn pass_gate(core: &PmoCore, m: &dyn Medium) -> Result<Option<locks::LockGuard>> {
    let Some(locker) = &core.gate else {
        return Ok(None);
    };
    let mut b = [0u8; 8];
    m.read(core.abs(GATE_OFF), &mut b)?;
    if u64::from_le_bytes(b) == 0 {
        return Ok(None);
    }
    locker
        .lock_blocking(locks::gate_word(core.extent_off), LockKind::Shared)
        .map(Some)
}

/// A closed gate; opened on drop.
pub struct Gate<'a> {
    core: &'a PmoCore,
    m: &'a dyn Medium,
    _lock: locks::LockGuard,
}

impl<'a> Gate<'a> {
    pub fn close(locker: &Locker, core: &'a PmoCore, m: &'a dyn Medium) -> Result<Gate<'a>> {
        write_gate(core, m, 1)?;
        let lock = locker.lock_blocking(locks::gate_word(core.extent_off), LockKind::Exclusive);
        match lock {
            Ok(l) => Ok(Gate { core, m, _lock: l }),
            Err(e) => {
                let _ = write_gate(core, m, 0);
                Err(e)
            }
        }
    }
}

impl Drop for Gate<'_> {
    fn drop(&mut self) {
        let _ = write_gate(self.core, self.m, 0);
    }
}

//! An open pool's metadata in memory ([`PoolMeta`]): the medium, the superblock in force, the
//! lock table, the namespace copy, and the poison flag a persistence failure sets.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use pmo_format::Superblock;
use pmo_medium::Medium;

use crate::error::{Result, StoreError};
use crate::locks::Locker;
use crate::namespace::Namespace;

/// An open pool's metadata in memory, shared by every handle of the pool.
pub struct PoolMeta {
    pub medium: Arc<dyn Medium>,
    pub sb: Superblock,
    pub locker: Locker,
    pub ns: Mutex<Namespace>,
    /// Set by the first persistence failure: every later call fails with `Poisoned`.
    pub health: Health,
    /// What opening the pool repaired (damaged copies rewritten from the good ones), reported once.
    pub repairs: Mutex<Vec<String>>,
}

/// A pool's health: poisoned by the first persistence failure (a medium error while writing),
/// after which every call fails with [`StoreError::Poisoned`] instead of trusting a half-written
/// state. The engine gets this, not the whole [`PoolMeta`].
#[derive(Debug, Default)]
pub struct Health {
    poisoned: AtomicBool,
}

impl Health {
    /// `Err(Poisoned)` once a persistence failure happened.
    pub fn alive(&self) -> Result<()> {
        if self.is_poisoned() {
            Err(StoreError::Poisoned)
        } else {
            Ok(())
        }
    }
    /// Record a persistence failure (a medium error in `r`): every later call fails.
    pub fn poison<T>(&self, r: Result<T>) -> Result<T> {
        if let Err(e) = &r {
            if matches!(e, StoreError::Medium(_)) {
                self.set_poisoned();
            }
        }
        r
    }
    /// Whether a persistence failure happened.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Acquire)
    }
    /// Poison unconditionally (a failure the caller knows to be one of persistence).
    pub fn set_poisoned(&self) {
        self.poisoned.store(true, Ordering::Release);
    }
}

impl PoolMeta {
    /// [`Health::alive`] of this pool.
    pub fn alive(&self) -> Result<()> {
        self.health.alive()
    }
    /// [`Health::poison`] of this pool.
    pub fn poison<T>(&self, r: Result<T>) -> Result<T> {
        self.health.poison(r)
    }
    /// Record what a repair did, for `Pool::repairs` to report once.
    pub fn note_repair(&self, note: String) {
        self.repairs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(note);
    }
    pub fn ns(&self) -> std::sync::MutexGuard<'_, Namespace> {
        self.ns.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub fn now_unix_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

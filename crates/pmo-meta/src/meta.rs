//! An open pool's metadata in memory ([`PoolMeta`]): the medium, the superblock in force, the
//! lock table, the namespace copy, and the poison flag a persistence failure sets.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use pmo_format::Superblock;
use pmo_medium::Medium;

use crate::error::{Result, StoreError};
use crate::locks::Locker;
use crate::namespace::Namespace;

pub struct PoolMeta {
    pub medium: Arc<dyn Medium>,
    pub sb: Superblock,
    pub locker: Locker,
    pub ns: Mutex<Namespace>,
    pub poisoned: AtomicBool,
    /// What opening the pool repaired (damaged copies rewritten from the good ones), reported once.
    pub repairs: Mutex<Vec<String>>,
}

impl PoolMeta {
    pub fn alive(&self) -> Result<()> {
        if self.poisoned.load(Ordering::Acquire) {
            Err(StoreError::Poisoned)
        } else {
            Ok(())
        }
    }
    /// Record a persistence failure: every later call fails.
    pub fn poison<T>(&self, r: Result<T>) -> Result<T> {
        if let Err(e) = &r {
            if matches!(e, StoreError::Medium(_)) {
                self.poisoned.store(true, Ordering::Release);
            }
        }
        r
    }
    /// Record what a repair did, for [`Pool::repairs`] to report once.
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

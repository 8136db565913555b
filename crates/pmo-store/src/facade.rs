//! [`Pool`]: the store's face to the crates above. One type, everything a pool does: the
//! constructors and the life-cycle and attach operations are listed here, each handing its
//! work to the layer that owns it (`ARCHITECTURE.md`, "The store's layers"); the namespace
//! operations (pcreate, pdestroy, list, info, open_pmo, configuration, ...) are the pool
//! layer's [`CorePool`], reached through `Deref`.
//!
//! `Deref` is used here as a façade's delegation, not as inheritance: a `&Pool` is accepted
//! wherever the layers below take a `&CorePool`, and the core's methods need no copy here.

use std::ops::Deref;
use std::path::Path;
use std::sync::Arc;

use pmo_medium::{Medium, MediumKind};

use crate::attach::{AttachOptions, Attachment};
use crate::check::CheckReport;
use crate::error::Result;
use crate::export::Progress;
use crate::pool::{Perm, PmoInfo, Pool as CorePool, PoolOptions};
use crate::resize::{ResizeOptions, ResizeReport};
use crate::snapshot::SnapshotReport;

/// An open pool. Cheap to clone; shareable between threads.
#[derive(Clone)]
pub struct Pool {
    core: CorePool,
}

impl From<CorePool> for Pool {
    fn from(core: CorePool) -> Pool {
        Pool { core }
    }
}

impl Deref for Pool {
    type Target = CorePool;
    fn deref(&self) -> &CorePool {
        &self.core
    }
}

impl AsRef<CorePool> for Pool {
    fn as_ref(&self) -> &CorePool {
        &self.core
    }
}

impl Pool {
    /// `attach(name, perm, key)`: map a PMO at its stable address.
    pub fn attach(&self, name: &str, perm: Perm, key: &[u8]) -> Result<Attachment> {
        crate::attach::attach(&self.core, name, perm, key)
    }

    /// Attach with options.
    pub fn attach_with(
        &self,
        name: &str,
        perm: Perm,
        key: &[u8],
        opts: AttachOptions,
    ) -> Result<Attachment> {
        crate::attach::attach_with(&self.core, name, perm, key, opts)
    }

    /// Check every checksum, the namespace and the space accounting. PMOs attached for writing
    /// by someone else are skipped (listed in the report).
    pub fn check(&self) -> Result<CheckReport> {
        pmo_life::check::check(&self.core)
    }

    /// Rename PMO `name` to `new` (needs its key; fails with `Busy` while it is attached and
    /// with `Exists` if `new` is taken).
    pub fn rename(&self, name: &str, new: &str, key: &[u8]) -> Result<PmoInfo> {
        pmo_life::lifecycle::rename(&self.core, name, new, key)
    }

    /// Change PMO `name`'s key from `key` to `new_key` without re-encrypting a page: the data
    /// master key is re-wrapped under the new key and the verifier replaced, so the old key is
    /// refused and the new one opens the same pages. Fails with `Busy` while attached.
    pub fn rekey(&self, name: &str, key: &[u8], new_key: &[u8]) -> Result<PmoInfo> {
        pmo_life::lifecycle::rekey(&self.core, name, key, new_key)
    }

    /// Grow or shrink PMO `name` to `new_size` bytes (rounded up to whole pages). New pages
    /// read as zeros. A shrink that would drop a page holding anything but zeros fails unless
    /// `opts.force`. Needs the key; fails with `Busy` while the PMO is attached (detach,
    /// resize, attach again: the stable address is kept when it can be, see the module docs)
    /// and with `NoSpace` when no free extent holds the new size (the old extent is given back
    /// only once the new one is live, so a resize needs room for both).
    pub fn resize(
        &self,
        name: &str,
        new_size: u64,
        key: &[u8],
        opts: ResizeOptions<'_>,
    ) -> Result<ResizeReport> {
        pmo_life::resize::resize(&self.core, name, new_size, key, opts)
    }

    /// Grow the pool file at `path` to `new_size` bytes (rounded down to whole pages) and
    /// reopen it. The file is extended first, then the superblock is rewritten with the new
    /// size (copy A, fence, copy B, fence): a crash before copy A is durable leaves the old
    /// pool in a longer file (growing again finishes it), after it the grown pool. A pool on a
    /// device DAX character device grows only up to the device's size (a pool formatted smaller
    /// than its device; the device's own size is fixed), and a pool never shrinks. Other
    /// processes that have the pool open keep its old size until they reopen it (their
    /// namespace changes are refused until then).
    pub fn grow_pool(path: &Path, new_size: u64) -> Result<Pool> {
        pmo_life::resize::grow_pool(path, new_size).map(Pool::from)
    }

    /// Grow this pool to `new_size` bytes on a medium that already has them (the crash tests'
    /// entry point: [`Pool::grow_pool`] extends the file, then does this).
    #[doc(hidden)]
    pub fn grow_on(&self, new_size: u64) -> Result<()> {
        pmo_life::resize::grow_on(&self.core, new_size)
    }

    /// Whether PMO `name` has a rotation record: a rotation a crash cut off (its next keyed
    /// open, or `rotate`, finishes it).
    pub fn rotation_unfinished(&self, name: &str) -> Result<bool> {
        pmo_life::rotate::rotation_unfinished(&self.core, name)
    }

    /// Re-encrypt every page of PMO `name` under a new random data master key (module docs);
    /// the key stays `key`. Resumes a rotation a crash cut off. Fails with `Busy` while the
    /// PMO is attached; `Invalid` for an unencrypted PMO. `progress`: (pages done, pages).
    pub fn rotate(&self, name: &str, key: &[u8], progress: Progress) -> Result<PmoInfo> {
        pmo_life::rotate::rotate(&self.core, name, key, progress)
    }

    /// Snapshot PMO `name` into a new PMO `new` of the same scheme, size and layout capacity (its own uuid,
    /// salt and nonces; the key `new_key`, or the same key) while a writer may keep working:
    /// the copy is exactly `name` as of one psync. A crash leaves no `new`, or the whole one
    /// (and possibly `new.partial` to destroy).
    pub fn snapshot(
        &self,
        name: &str,
        new: &str,
        key: &[u8],
        new_key: Option<&[u8]>,
        progress: Progress,
    ) -> Result<(PmoInfo, SnapshotReport)> {
        pmo_life::copy::snapshot(&self.core, name, new, key, new_key, progress)
    }

    /// Snapshot PMO `name` into an export file (`docs/format.md` §7; `file` must not exist)
    /// while a writer may keep working. On error the file is removed.
    pub fn snapshot_to_file(
        &self,
        name: &str,
        key: &[u8],
        file: &Path,
        progress: Progress,
    ) -> Result<SnapshotReport> {
        pmo_life::copy::snapshot_to_file(&self.core, name, key, file, progress)
    }

    /// Export PMO `name` to `file` (which must not exist): its last psynced state, also while
    /// a writer keeps working (a live snapshot, [`Pool::snapshot_to_file`]). Returns the pages.
    pub fn export(&self, name: &str, key: &[u8], file: &Path, progress: Progress) -> Result<u64> {
        pmo_life::copy::export(&self.core, name, key, file, progress)
    }

    /// Import an export file as PMO `name` (`None`: the name it was exported under), checked
    /// with `key` and verified whole before anything is created. Integrity failures of the file
    /// are `IntegrityPmo` (exit 2); a wrong key is `WrongKey`.
    pub fn import(
        &self,
        file: &Path,
        name: Option<&str>,
        key: &[u8],
        progress: Progress,
    ) -> Result<PmoInfo> {
        pmo_life::export::import(&self.core, file, name, key, progress)
    }

    /// Copy PMO `name` to a new PMO `new` (new uuid, salt and nonces; the key `new_key`, or
    /// the same key): its last psynced state, also while a writer keeps working (a live
    /// snapshot, [`Pool::snapshot`]).
    pub fn copy(
        &self,
        name: &str,
        new: &str,
        key: &[u8],
        new_key: Option<&[u8]>,
        progress: Progress,
    ) -> Result<PmoInfo> {
        pmo_life::copy::copy(&self.core, name, new, key, new_key, progress)
    }

    /// Create a pool file of `size` bytes at `path` (which must not exist), or format an existing
    /// device DAX character device (`size` 0 = the whole device).
    pub fn create(path: &Path, size: u64, opts: &PoolOptions) -> Result<Pool> {
        CorePool::create(path, size, opts).map(Pool::from)
    }

    /// Format `medium` as a new pool of `size` bytes (the crash tests' entry point).
    pub fn create_on(medium: Arc<dyn Medium>, opts: &PoolOptions) -> Result<Pool> {
        CorePool::create_on(medium, opts).map(Pool::from)
    }

    /// Format `medium` as a pool of an older format `version` (no namespace mirror) and open it
    /// without upgrading: for the upgrade's tests only.
    #[doc(hidden)]
    pub fn create_legacy_on(
        medium: Arc<dyn Medium>,
        opts: &PoolOptions,
        version: u32,
    ) -> Result<Pool> {
        CorePool::create_legacy_on(medium, opts, version).map(Pool::from)
    }

    /// Open the pool at `path` and recover it.
    pub fn open(path: &Path) -> Result<Pool> {
        CorePool::open(path).map(Pool::from)
    }

    /// Open with a forced backend.
    pub fn open_with(path: &Path, kind: Option<MediumKind>) -> Result<Pool> {
        CorePool::open_with(path, kind).map(Pool::from)
    }

    /// Open a pool on `medium` and recover it: choose a valid superblock (repairing the other
    /// copy), drop stale namespace entries left by an interrupted update, and bring every PMO
    /// nobody has attached up to its newest committed psync. Safe to run concurrently with other
    /// processes opening the same pool (recovery holds the metadata lock) and to crash in.
    pub fn open_on(medium: Arc<dyn Medium>) -> Result<Pool> {
        CorePool::open_on(medium).map(Pool::from)
    }

    /// Open a pool of an older format without upgrading it: for the upgrade's tests only.
    #[doc(hidden)]
    pub fn open_legacy_on(medium: Arc<dyn Medium>) -> Result<Pool> {
        CorePool::open_legacy_on(medium).map(Pool::from)
    }
}

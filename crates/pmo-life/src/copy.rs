//! The operations that copy a PMO's last psynced state while its writer keeps working
//! (`docs/lifecycle.md`): a live snapshot to a new PMO or to an export file, export, and copy.
//! Each is `snapshot::live_copy` into a sink of `export`.

use std::path::Path;

use pmo_format::{Entry, PAGE_SIZE};

use crate::export::{create_filled, FileSink, PmoSink};
use crate::snapshot::{live_copy, SnapshotReport};
use pmo_meta::error::{Result, StoreError};
use pmo_meta::keys;
use pmo_meta::scheme::Scheme;
use pmo_pool::pool::{PmoInfo, Pool, Progress};

/// Snapshot PMO `name` into a new PMO `new` of the same scheme, size and layout capacity (its own uuid,
/// salt and nonces; the key `new_key`, or the same key) while a writer may keep working:
/// the copy is exactly `name` as of one psync. A crash leaves no `new`, or the whole one
/// (and possibly `new.partial` to destroy).
pub fn snapshot(
    pool: &Pool,
    name: &str,
    new: &str,
    key: &[u8],
    new_key: Option<&[u8]>,
    progress: Progress,
) -> Result<(PmoInfo, SnapshotReport)> {
    pmo_meta::entries::validate_new_name(new)?;
    if pool.exists(new)? {
        return Err(StoreError::Exists(new.into()));
    }
    let entry: Entry = pool.entry(name)?;
    keys::check_key(&entry, key)?;
    let scheme = Scheme::from_code(entry.scheme)?;
    let mut report = SnapshotReport::default();
    let capacity = entry.capacity;
    let info = create_filled(
        pool,
        new,
        entry.size,
        capacity,
        new_key.unwrap_or(key),
        scheme,
        |h| {
            let mut sink = PmoSink::new(h, entry.size / PAGE_SIZE);
            report = live_copy(pool, name, key, &mut sink, progress)?;
            Ok(())
        },
    )?;
    Ok((info, report))
}

/// Snapshot PMO `name` into an export file (`docs/format.md` §7; `file` must not exist)
/// while a writer may keep working. On error the file is removed.
pub fn snapshot_to_file(
    pool: &Pool,
    name: &str,
    key: &[u8],
    file: &Path,
    progress: Progress,
) -> Result<SnapshotReport> {
    let entry = pool.entry(name)?;
    let data = keys::check_key(&entry, key)?;
    let mut sink = FileSink::create(file, &entry, &data)?;
    let r =
        live_copy(pool, name, key, &mut sink, progress).and_then(|rep| sink.finish().map(|_| rep));
    if r.is_err() {
        sink.discard();
    }
    r
}

/// Export PMO `name` to `file` (which must not exist): its last psynced state, also while
/// a writer keeps working (a live snapshot, `Pool::snapshot_to_file`). Returns the pages.
pub fn export(pool: &Pool, name: &str, key: &[u8], file: &Path, progress: Progress) -> Result<u64> {
    Ok(snapshot_to_file(pool, name, key, file, progress)?.pages)
}

/// Copy PMO `name` to a new PMO `new` (new uuid, salt and nonces; the key `new_key`, or
/// the same key): its last psynced state, also while a writer keeps working (a live
/// snapshot, `Pool::snapshot`).
pub fn copy(
    pool: &Pool,
    name: &str,
    new: &str,
    key: &[u8],
    new_key: Option<&[u8]>,
    progress: Progress,
) -> Result<PmoInfo> {
    Ok(snapshot(pool, name, new, key, new_key, progress)?.0)
}

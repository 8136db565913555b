//! Where a PMO's pin table is: its file's path, the readers word on the medium that announces
//! it, what the last user leaving does (remove the file, then clear the word), and the tables
//! a pool handle keeps for its next reader.
//!
//! The order of that last step is an invariant the rest of the crate relies on: **the readers
//! word is cleared only once the path no longer names the table file** (or never did). So a
//! file that the path names while the word is set was never re-initialised since the word was
//! set: a joiner initialises a file only when it finds the word clear (`table.rs`), and a file
//! whose path was removed is never named again. A kept table (below) is checked against it
//! before it is used again.
//!
//! **Kept tables**: a process keeps a reader's pin table after its last reader of the PMO
//! detached, for its next reader. Making a table file (`open`, locks, `ftruncate`, `mmap`,
//! the header's first touches) and removing it (`munmap`, `unlink`, `close`) were four fifths
//! of a read-only attach session of a small PMO: about 80 of 100 µs (issue 29). Kept, its
//! mapping, descriptor and `USE_BYTE` stay, the file stays at its path and the PMO's readers
//! word stays set.
//!
//! The pin-table lock is **not** held while a table is kept, so it never refuses anything:
//! destroy, rename, resize and rotate take the lock and remove the file as before; so does a
//! last user leaving in another process (or through another pool handle), and a writer's
//! leaving through this handle (else the handle's writers would join it and track into it
//! session after session: only the first writer session after a reader pays for the join).
//! A look at the readers (`pmo info`) leaves it kept.
//!
//! The next reader attach of the PMO through the same pool handle takes the lock shared and
//! uses the kept table again if the readers word is set and the path still names the kept
//! file at its length: by the invariant above, such a file is the PMO's live table and was
//! not re-initialised since it was kept. Otherwise the kept table is dropped and the reader
//! joins as before.
//!
//! The cost of keeping: while a table is kept and announced, a writer of the PMO tracks page
//! versions into it as if a reader were attached (`docs/readers.md`, "What it costs"), until
//! that writer's leaving removes it. At most [`KeptTables::max`] tables are kept per pool
//! handle (`PMO_PINS_KEEP`, default 8; 0 keeps none), the oldest dropped first; all go when
//! the pool handle's last clone is dropped, each leaving as a last user would.

use std::collections::VecDeque;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};

use pmo_format::PmoLayout;
use pmo_medium::Medium;
use pmo_meta::error::{Result, StoreError};
use pmo_meta::locks::{self, Locker};
use pmo_os::lock::{LockKind, RangeLock};
use pmo_os::map::FileMapping;

use crate::layout::*;

/// Where a PMO's pin table is and what it is for.
#[derive(Clone)]
pub struct PinsAt {
    /// The PMO's name (for messages).
    pub name: String,
    pub locker: Locker,
    pub medium: Arc<dyn Medium>,
    pub pool_uuid: [u8; 16],
    pub pmo_uuid: [u8; 16],
    pub extent_off: u64,
    /// Pages of the PMO's layout (its capacity).
    pub npages: u64,
    /// Where a reader's table goes when its last reader in this process leaves: the
    /// pool handle's [`KeptTables`] (`None`: removed as before, by the last user).
    pub keep: Option<Weak<KeptTables>>,
}

impl PinsAt {
    fn readers_word(&self) -> u64 {
        self.extent_off + PmoLayout::READERS_OFF
    }

    /// Whether the medium says a table may exist (a writer checks this before each psync).
    pub fn announced(&self) -> Result<bool> {
        let mut b = [0u8; 8];
        self.medium.read(self.readers_word(), &mut b)?;
        Ok(u64::from_le_bytes(b) != 0)
    }

    pub(crate) fn announce(&self, on: bool) -> Result<()> {
        self.medium
            .write(self.readers_word(), &u64::from(on).to_le_bytes())?;
        Ok(())
    }

    /// The table file of this PMO (`PMO_PINS_DIR`, else `/dev/shm`).
    pub fn path(&self) -> PathBuf {
        dir().join(format!(
            "pmo-pins-{}-{}",
            hex(&self.pool_uuid[..8]),
            hex(&self.pmo_uuid)
        ))
    }
}

/// Where pin tables live: `PMO_PINS_DIR`, else `/dev/shm`.
pub fn dir() -> PathBuf {
    match std::env::var_os("PMO_PINS_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from("/dev/shm"),
    }
}

fn hex(b: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(2 * b.len());
    for x in b {
        s.push(char::from(DIGITS[usize::from(x >> 4)]));
        s.push(char::from(DIGITS[usize::from(x & 0xf)]));
    }
    s
}

pub(crate) fn io(op: &str) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        op: op.to_string(),
        source,
    }
}

/// The length of the open `file` if `path` names it (the same inode), else `None`.
pub(crate) fn named_len(path: &Path, file: &File) -> Result<Option<u64>> {
    use std::os::unix::fs::MetadataExt;
    let open = file.metadata().map_err(io("stat pin table"))?;
    match std::fs::metadata(path) {
        Ok(m) if m.dev() == open.dev() && m.ino() == open.ino() => Ok(Some(open.len())),
        Ok(_) => Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io("stat pin table")(e)),
    }
}

/// Whether `path` names the open `file` (the same inode).
pub(crate) fn names_file(path: &Path, file: &File) -> Result<bool> {
    Ok(named_len(path, file)?.is_some())
}

/// What a user leaving a table file does once it no longer holds the pin-table lock shared:
/// try the lock exclusively without waiting; whoever gets it is the last user, and removes the
/// file and then clears the readers word while holding it (the module's invariant: the word
/// stays set if the file could not be removed). Only if the path still names `file`: else
/// the table was removed meanwhile (a destroy, rename, resize or rotate, or another last
/// user), and the PMO may be gone, its extent reused: its readers word is not ours to clear.
pub(crate) fn leave(at: &PinsAt, path: &Path, file: &File) {
    let word = locks::pins_word(at.extent_off);
    if let Ok(Some(_last)) = at.locker.lock(word, LockKind::Exclusive, None) {
        if !matches!(names_file(path, file), Ok(true)) {
            return;
        }
        if std::fs::remove_file(path).is_ok() {
            let _ = at.announce(false);
        }
    }
}

/// A table kept with nobody using it (module docs).
pub(crate) struct Kept {
    map: Option<FileMapping>,
    using: Option<RangeLock>,
    layout: Layout,
    path: PathBuf,
    at: PinsAt,
    /// Leave as a last user would when dropped (false once found stale: the path is another's).
    leave: bool,
}

impl Kept {
    pub(crate) fn new(
        map: FileMapping,
        using: RangeLock,
        layout: Layout,
        path: PathBuf,
        at: PinsAt,
    ) -> Kept {
        Kept {
            map: Some(map),
            using: Some(using),
            layout,
            path,
            at,
            leave: true,
        }
    }

    /// Whether the kept table is still the PMO's live table, as `at` describes the PMO now.
    /// The caller holds the pin-table lock shared, so nobody removes or re-initialises it
    /// meanwhile.
    pub(crate) fn still_live(&self, at: &PinsAt) -> Result<bool> {
        let Some(map) = &self.map else {
            return Ok(false);
        };
        if self.at.pmo_uuid != at.pmo_uuid
            || self.at.pool_uuid != at.pool_uuid
            || self.layout.npages != at.npages
            || !at.announced()?
        {
            return Ok(false);
        }
        // The path names our file at no less than our mapping's length: only then is every
        // word of the mapping backed (a shorter file would fault with SIGBUS).
        match named_len(&at.path(), map.file())? {
            Some(len) if len >= self.layout.bytes() => {}
            _ => return Ok(false),
        }
        let w = map.as_atomic_words();
        let get = |i: usize| w[i].load(Ordering::Acquire);
        Ok(get(H_MAGIC) == MAGIC
            && get(H_NPAGES) == self.layout.npages
            && get(H_NFRAMES) == self.layout.nframes
            && get(H_RING_LEN) == self.layout.ring)
    }

    /// Its mapping, `USE_BYTE` lock and layout, for a user taking it again (it does not
    /// leave: the taker is a user now).
    pub(crate) fn into_parts(mut self) -> Option<(FileMapping, RangeLock, Layout)> {
        self.leave = false;
        Some((self.map.take()?, self.using.take()?, self.layout))
    }

    /// Drop without leaving: the path names another table (or none).
    pub(crate) fn discard(mut self) {
        self.leave = false;
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        if let (true, Some(map)) = (self.leave, &self.map) {
            leave(&self.at, &self.path, map.file());
        }
        drop(self.map.take());
        // `using` (the file's USE_BYTE) goes last, after any removal (as for a user).
        drop(self.using.take());
    }
}

/// The tables one pool handle keeps (module docs).
pub struct KeptTables {
    tables: Mutex<VecDeque<Kept>>,
    max: usize,
}

impl std::fmt::Debug for KeptTables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeptTables({} of {})", self.len(), self.max)
    }
}

impl Default for KeptTables {
    fn default() -> Self {
        Self::new(max_from_env())
    }
}

/// `PMO_PINS_KEEP`: tables kept per pool handle (default 8).
fn max_from_env() -> usize {
    std::env::var("PMO_PINS_KEEP")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(8)
}

impl KeptTables {
    /// Keep at most `max` tables.
    pub fn new(max: usize) -> KeptTables {
        KeptTables {
            tables: Mutex::new(VecDeque::new()),
            max,
        }
    }

    /// The most tables kept.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Tables kept now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Kept>> {
        self.tables.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keep `k`; returns what must go instead: `k` itself when none may be kept, or (without
    /// leaving) when a table of the same PMO is kept already; else the oldest when full. The
    /// caller drops it after releasing the pin-table lock.
    pub(crate) fn put(&self, k: Kept) -> Option<Kept> {
        if self.max == 0 {
            return Some(k);
        }
        let mut t = self.lock();
        if t.iter()
            .any(|o| o.at.pmo_uuid == k.at.pmo_uuid && o.at.pool_uuid == k.at.pool_uuid)
        {
            // The one kept already stands for the PMO's table (another reader in this process
            // joined on its own): this one goes without leaving, or it would remove the file
            // the kept one maps.
            let mut k = k;
            k.leave = false;
            return Some(k);
        }
        t.push_back(k);
        if t.len() > self.max {
            t.pop_front()
        } else {
            None
        }
    }

    /// Whether a table of `at`'s PMO is kept.
    pub(crate) fn holds(&self, at: &PinsAt) -> bool {
        self.lock()
            .iter()
            .any(|o| o.at.pmo_uuid == at.pmo_uuid && o.at.pool_uuid == at.pool_uuid)
    }

    /// Take the table kept for `at`'s PMO, if any.
    pub(crate) fn take(&self, at: &PinsAt) -> Option<Kept> {
        let mut t = self.lock();
        let i = t
            .iter()
            .position(|o| o.at.pmo_uuid == at.pmo_uuid && o.at.pool_uuid == at.pool_uuid)?;
        t.remove(i)
    }

    /// Drop every table kept, each leaving as a last user would (a process's exit, when the
    /// handle itself is never dropped: the C API's registry).
    pub fn clear(&self) {
        let gone: Vec<Kept> = self.lock().drain(..).collect();
        drop(gone);
    }

    /// Drop the table kept for the PMO `pmo_uuid` (it is being destroyed, renamed, resized or
    /// rotated), leaving as a last user would. Call without holding its pin-table lock.
    pub fn forget(&self, pmo_uuid: &[u8; 16]) {
        let gone: Vec<Kept> = {
            let mut t = self.lock();
            let (gone, stay): (Vec<Kept>, Vec<Kept>) =
                t.drain(..).partition(|o| &o.at.pmo_uuid == pmo_uuid);
            t.extend(stay);
            gone
        };
        drop(gone);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_are_lowercase_hex() {
        assert_eq!(hex(&[0x00, 0xab, 0x7f, 0xf0]), "00ab7ff0");
        assert_eq!(hex(&[]), "");
    }

    /// The check a joiner makes after taking its byte: a path removed (or replaced) since its
    /// open no longer names its file.
    #[test]
    fn a_removed_or_replaced_file_is_not_the_one_the_path_names() {
        let dir = std::env::temp_dir().join(format!("pmo-pins-names-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("t");
        std::fs::write(&p, b"x").unwrap();
        let f = File::open(&p).unwrap();
        assert!(names_file(&p, &f).unwrap());
        assert_eq!(named_len(&p, &f).unwrap(), Some(1));
        std::fs::remove_file(&p).unwrap();
        assert!(!names_file(&p, &f).unwrap());
        std::fs::write(&p, b"y").unwrap();
        assert!(!names_file(&p, &f).unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! One PMO's pin table: found or made by the first process that needs it, removed by the last
//! one leaving.
//!
//! Every process with the table mapped holds the PMO's pin-table lock word on the pool file
//! shared (`pmo_meta::locks::pins_word`). Joining: take it shared, open (or create) the table
//! file, initialise it under the file's `INIT_BYTE` lock if it is new, stale or not announced
//! yet, then set the PMO's readers word on the medium (`PmoLayout::READERS_OFF`), which tells
//! the writer to track versions. Leaving: unmap, release the shared lock, and try the lock
//! exclusively without waiting: whoever gets it is the last user, and removes the file and
//! clears the readers word while holding it (a process joining meanwhile waits, then makes a
//! fresh table). Destroy, rename, resize and rotate take the lock exclusively to refuse while
//! readers exist (`Pool::lock_no_readers`).
//!
//! Every user also holds the table file's `USE_BYTE` shared, on the file it opened, once it
//! has checked that the path still names that file (else it opens again). A table file whose
//! byte nobody holds has no user: its users died with no one left to remove it (processes
//! SIGKILLed, their pool file deleted), and [`sweep_orphans`] (run by every pool open)
//! removes it.
//!
//! A medium without a file (the crash simulation) keeps its tables in this process's memory,
//! one per PMO, for as long as a user holds it.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use pmo_meta::error::{Result, StoreError};
use pmo_meta::locks::{self, LockGuard, Locker};
use pmo_os::lock::{LockKind, RangeLock};
use pmo_os::map::{FileMapping, MapMode};

pub use crate::at::{dir, PinsAt};
use crate::at::{io, names_file, Kept};
use crate::layout::*;

fn lock_err(e: pmo_os::lock::LockError) -> StoreError {
    StoreError::Os(e.to_string())
}

enum Backing {
    File {
        map: FileMapping,
        path: PathBuf,
    },
    /// Process memory (a medium without a file), shared by the users in this process.
    Local(Arc<LocalTable>),
}

/// A table in process memory.
pub(crate) struct LocalTable {
    words: Box<[AtomicU64]>,
}

type LocalKey = ([u8; 16], [u8; 16]);

fn local_tables() -> &'static Mutex<HashMap<LocalKey, Weak<LocalTable>>> {
    static T: OnceLock<Mutex<HashMap<LocalKey, Weak<LocalTable>>>> = OnceLock::new();
    T.get_or_init(Default::default)
}

/// The writer's own state (one writer per PMO at a time: the attach lock).
#[derive(Default)]
pub struct WriterState {
    pub(crate) free: Vec<u64>,
    /// Frames this writer knows to be in use (after the first scan).
    pub(crate) used: Vec<u64>,
    /// Whether `free` was built by a scan (else every frame not listed may be free).
    pub(crate) scanned: bool,
    /// `H_PINS_GEN` at the last reclaim.
    pub(crate) reclaimed_gen: u64,
    pub(crate) checked: Option<std::time::Instant>,
    /// Slots whose reader was dead when last asked (with their claim words).
    pub(crate) dead: Vec<(usize, u64)>,
    /// The buffer a slot is copied into before it is published as a frame.
    pub(crate) buf: Option<Box<[u8; FRAME_BYTES]>>,
}

/// One process's hold on a PMO's pin table. Dropping it leaves the table (module docs).
pub struct PinTable {
    backing: Option<Backing>,
    pub(crate) layout: Layout,
    at: PinsAt,
    /// The pin-table lock word held shared (taken until drop).
    shared: Option<LockGuard>,
    /// The table file's `USE_BYTE` held shared (released after the drop's removal).
    using: Option<RangeLock>,
    /// Who joined it (what its leaving does to a table the pool handle keeps).
    role: Role,
    /// Kept for the next reader when this user leaves (`at.rs`, kept tables): a reader's, or
    /// a kept one a look took.
    keeps: bool,
    /// Writer-only state: free frames found, when dead readers were last looked for.
    pub(crate) writer: Mutex<WriterState>,
}

impl std::fmt::Debug for PinTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PinTable({:?})", self.layout)
    }
}

/// Who joins a table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// A reader: makes the table if there is none; its table is kept after it.
    Reader,
    /// A writer tracking versions: its leaving removes a table the pool handle keeps (so that
    /// the handle's later writers do not join and track into it, session after session).
    Writer,
    /// A look at the readers (`pmo info`): leaves a kept table as it is.
    Look,
}

impl PinTable {
    /// Join the PMO's table. `create`: make one if there is none (a reader); otherwise
    /// (a look at its readers) `None` when no table is announced.
    pub fn join(at: &PinsAt, create: bool) -> Result<Option<Arc<PinTable>>> {
        Self::join_as(at, if create { Role::Reader } else { Role::Look })
    }

    /// Join the PMO's table as its writer, which tracks versions into it: `None` when no
    /// table is announced.
    pub fn join_writer(at: &PinsAt) -> Result<Option<Arc<PinTable>>> {
        Self::join_as(at, Role::Writer)
    }

    fn join_as(at: &PinsAt, role: Role) -> Result<Option<Arc<PinTable>>> {
        let create = role == Role::Reader;
        if !create && !at.announced()? {
            return Ok(None);
        }
        let nframes = frames_from_env().map_err(StoreError::Invalid)?;
        match &at.locker {
            Locker::Local(_) => Self::join_local(at, role, nframes),
            Locker::Ofd(..) => Self::join_file(at, role, nframes),
        }
    }

    fn join_local(at: &PinsAt, role: Role, nframes: u64) -> Result<Option<Arc<PinTable>>> {
        let create = role == Role::Reader;
        let shared = at
            .locker
            .lock_blocking(locks::pins_word(at.extent_off), LockKind::Shared)?;
        let mut tables = local_tables().lock().unwrap_or_else(|e| e.into_inner());
        let key = (at.pool_uuid, at.pmo_uuid);
        let existing = tables.get(&key).and_then(Weak::upgrade);
        let table = match existing {
            Some(t) if t.words.len() >= HEADER_WORDS => {
                let npages = t.words[H_NPAGES].load(Ordering::Acquire);
                let nframes = t.words[H_NFRAMES].load(Ordering::Acquire);
                if npages != at.npages {
                    return Err(StoreError::Busy {
                        name: at.name.clone(),
                        how: "by readers of its earlier size",
                    });
                }
                let layout = Layout::new(npages, nframes);
                (t, layout)
            }
            _ => {
                if !create {
                    return Ok(None);
                }
                let layout = Layout::new(at.npages, nframes);
                let words: Box<[AtomicU64]> =
                    (0..layout.words()).map(|_| AtomicU64::new(0)).collect();
                let t = Arc::new(LocalTable { words });
                init_header(&t.words, at, layout);
                tables.insert(key, Arc::downgrade(&t));
                (t, layout)
            }
        };
        if create {
            at.announce(true)?;
        }
        Ok(Some(Arc::new(PinTable {
            backing: Some(Backing::Local(table.0)),
            layout: table.1,
            at: at.clone(),
            shared: Some(shared),
            using: None,
            role,
            keeps: false,
            writer: Default::default(),
        })))
    }

    fn join_file(at: &PinsAt, role: Role, nframes: u64) -> Result<Option<Arc<PinTable>>> {
        let create = role == Role::Reader;
        let shared = at
            .locker
            .lock_blocking(locks::pins_word(at.extent_off), LockKind::Shared)?;
        // A last user may have removed the table while we waited.
        if !create && !at.announced()? {
            return Ok(None);
        }
        let path = at.path();
        // A table this pool handle kept after its last reader (`at.rs`, kept tables): used
        // again if it is still the PMO's live table (checked under the lock just taken).
        if let Some(k) = at
            .keep
            .as_ref()
            .and_then(Weak::upgrade)
            .and_then(|keeper| keeper.take(at))
        {
            if !k.still_live(at)? {
                k.discard();
            } else if let Some((map, using, layout)) = k.into_parts() {
                let file = Backing::File { map, path };
                let keeps = role != Role::Writer;
                return Ok(Some(Self::held(
                    file, layout, at, shared, using, role, keeps,
                )));
            }
        }
        let mut tries = 0;
        let (file, using) = loop {
            let file = match OpenOptions::new()
                .read(true)
                .write(true)
                .create(create)
                .truncate(false)
                .mode(0o600)
                .open(&path)
            {
                Ok(f) => f,
                Err(e) if !create && e.kind() == std::io::ErrorKind::NotFound => {
                    return Self::clear_stale(at, shared);
                }
                Err(e) => return Err(io("open pin table")(e)),
            };
            let using = RangeLock::acquire_blocking_file(
                file.try_clone().map_err(io("pin table"))?,
                USE_BYTE,
                1,
                LockKind::Shared,
            )
            .map_err(lock_err)?;
            // A sweep may have removed the file between the open and the lock.
            if names_file(&path, &file)? {
                break (file, using);
            }
            tries += 1;
            if tries > 1000 {
                return Err(StoreError::Os(format!(
                    "pin table {} keeps being replaced",
                    path.display()
                )));
            }
        };
        // On this join's own description (a duplicate of its descriptor, no second `open`):
        // it excludes every other joiner, in this process or another, as each opens its own.
        let init = RangeLock::acquire_blocking_file(
            file.try_clone().map_err(io("pin table"))?,
            INIT_BYTE,
            1,
            LockKind::Exclusive,
        )
        .map_err(lock_err)?;
        let want = Layout::new(at.npages, nframes);
        let map_err = |e| StoreError::Os(format!("map pin table: {e}"));
        let (layout, made) = match current_layout(&file, at)? {
            // In use (announced) and made for this PMO: join it.
            Some(Ok(l)) if at.announced()? => (l, None),
            // An older build's table in use: its processes would not see ours, nor we theirs.
            Some(Err(v1)) if at.announced()? && v1 => {
                return Err(StoreError::Busy {
                    name: at.name.clone(),
                    how: "by a process of an older pmo build, whose pin table this build does not share (detach it first)",
                });
            }
            // New, stale (nobody announced it: no writer tracks into it), or another PMO's.
            _ => {
                if !create {
                    drop(init);
                    return Self::clear_stale(at, shared);
                }
                file.set_len(0).map_err(io("clear pin table"))?;
                file.set_len(want.bytes()).map_err(io("size pin table"))?;
                // The mapping the header is written through is the one this user keeps.
                let map =
                    FileMapping::new(file.try_clone().map_err(io("pin table"))?, MapMode::Shared)
                        .map_err(map_err)?;
                init_header(map.as_atomic_words(), at, want);
                (want, Some(map))
            }
        };
        if create {
            at.announce(true)?;
        }
        drop(init);
        let map = match made {
            Some(map) => map,
            None => FileMapping::new(file, MapMode::Shared).map_err(map_err)?,
        };
        if map.as_atomic_words().len() < layout.words() {
            return Err(StoreError::Corrupt(format!(
                "pin table {} is shorter than its header says",
                path.display()
            )));
        }
        let file = Backing::File { map, path };
        Ok(Some(Self::held(
            file, layout, at, shared, using, role, create,
        )))
    }

    /// A user's hold on a table file it joined: the pin-table lock `shared` and the file's
    /// `USE_BYTE` (`using`) held until it leaves.
    fn held(
        backing: Backing,
        layout: Layout,
        at: &PinsAt,
        shared: LockGuard,
        using: RangeLock,
        role: Role,
        keeps: bool,
    ) -> Arc<PinTable> {
        Arc::new(PinTable {
            backing: Some(backing),
            layout,
            at: at.clone(),
            shared: Some(shared),
            using: Some(using),
            role,
            keeps,
            writer: Default::default(),
        })
    }

    /// A writer found the readers word set without a table for it (a reader died while
    /// making or removing one): clear it if nobody else uses the table lock, so that later
    /// psyncs do not look again.
    fn clear_stale(at: &PinsAt, shared: LockGuard) -> Result<Option<Arc<PinTable>>> {
        drop(shared);
        let word = locks::pins_word(at.extent_off);
        if let Some(g) = at.locker.lock(word, LockKind::Exclusive, None)? {
            remove_unused(at, &g)?;
        }
        Ok(None)
    }

    /// The table's words.
    pub(crate) fn words(&self) -> &[AtomicU64] {
        match self.backing.as_ref().expect("backing lives until drop") {
            Backing::File { map, .. } => map.as_atomic_words(),
            Backing::Local(t) => &t.words,
        }
    }

    pub(crate) fn w(&self, i: usize) -> &AtomicU64 {
        &self.words()[i]
    }

    /// The table file (`None`: in process memory).
    pub fn path(&self) -> Option<&Path> {
        match self.backing.as_ref()? {
            Backing::File { path, .. } => Some(path),
            Backing::Local(_) => None,
        }
    }

    pub(crate) fn file(&self) -> Option<&File> {
        match self.backing.as_ref()? {
            Backing::File { map, .. } => Some(map.file()),
            Backing::Local(_) => None,
        }
    }

    /// Pages the table was made for.
    pub fn npages(&self) -> u64 {
        self.layout.npages
    }

    /// Frames (the most page versions kept at once).
    pub fn nframes(&self) -> u64 {
        self.layout.nframes
    }

    /// Frames holding a version some reader may need.
    pub fn frames_used(&self) -> u64 {
        self.w(H_FRAMES_USED).load(Ordering::Relaxed)
    }
}

/// Remove the pin tables in `dir` that no process uses (their `USE_BYTE` free): tables whose
/// users all died with nobody left to remove them. Returns the files removed. A table a
/// process is joining is safe: it holds the byte before it checks the path, and a file
/// removed under it is opened again (module docs).
pub fn sweep_orphans(dir: &Path) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return removed;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        if !name.to_string_lossy().starts_with("pmo-pins-") {
            continue;
        }
        let path = e.path();
        let Ok(file) = OpenOptions::new().read(true).write(true).open(&path) else {
            continue;
        };
        let Ok(Some(lock)) = RangeLock::try_acquire_file(file, USE_BYTE, 1, LockKind::Exclusive)
        else {
            continue;
        };
        if matches!(names_file(&path, lock.file()), Ok(true)) && std::fs::remove_file(&path).is_ok()
        {
            removed.push(path);
        }
    }
    removed
}

/// The layout of an existing table file made for this PMO, if it is one (`Ok`); `Err(true)`
/// for a table of layout 1 (an older build's) made for this PMO, `Err(false)` for anything
/// else; `None` for a file too short to say.
fn current_layout(file: &File, at: &PinsAt) -> Result<Option<std::result::Result<Layout, bool>>> {
    let len = file.metadata().map_err(io("stat pin table"))?.len();
    if len < (HEADER_WORDS * 8) as u64 {
        return Ok(None);
    }
    let map = FileMapping::new(file.try_clone().map_err(io("pin table"))?, MapMode::Shared)
        .map_err(|e| StoreError::Os(format!("map pin table: {e}")))?;
    let w = map.as_atomic_words();
    let get = |i: usize| w[i].load(Ordering::Acquire);
    let uuid = |i: usize| {
        let mut u = [0u8; 16];
        u[..8].copy_from_slice(&get(i).to_le_bytes());
        u[8..].copy_from_slice(&get(i + 1).to_le_bytes());
        u
    };
    let l = Layout::new(get(H_NPAGES), get(H_NFRAMES));
    let ours = uuid(H_POOL_UUID) == at.pool_uuid && uuid(H_PMO_UUID) == at.pmo_uuid;
    let ok = get(H_MAGIC) == MAGIC
        && ours
        && l.npages == at.npages
        && l.nframes > 0
        && get(H_RING_LEN) == l.ring
        && l.bytes() <= len;
    Ok(Some(if ok {
        Ok(l)
    } else {
        Err(get(H_MAGIC) == MAGIC_V1 && ours)
    }))
}

fn init_header(w: &[AtomicU64], at: &PinsAt, l: Layout) {
    let put = |i: usize, v: u64| w[i].store(v, Ordering::Relaxed);
    put(H_NPAGES, l.npages);
    put(H_NFRAMES, l.nframes);
    put(H_KNOWN_FROM, NOT_TRACKED);
    put(H_INFLIGHT, 0);
    put(H_PINS_GEN, 0);
    put(H_FRAMES_USED, 0);
    put(H_RING_RESERVED, 0);
    put(H_RING_HEAD, 0);
    put(H_RING_LEN, l.ring);
    for (i, half) in [(H_POOL_UUID, &at.pool_uuid), (H_PMO_UUID, &at.pmo_uuid)] {
        put(
            i,
            u64::from_le_bytes(half[..8].try_into().expect("8 bytes")),
        );
        put(
            i + 1,
            u64::from_le_bytes(half[8..].try_into().expect("8 bytes")),
        );
    }
    w[H_MAGIC].store(MAGIC, Ordering::Release);
}

impl Drop for PinTable {
    fn drop(&mut self) {
        let backing = self.backing.take();
        match backing {
            Some(Backing::Local(t)) => {
                drop(t);
                drop(self.shared.take());
                let word = locks::pins_word(self.at.extent_off);
                if let Ok(Some(_last)) = self.at.locker.lock(word, LockKind::Exclusive, None) {
                    let _ = self.at.announce(false);
                }
            }
            Some(Backing::File { map, path }) => {
                let keeper = self.at.keep.as_ref().and_then(Weak::upgrade);
                // A reader's table goes to the pool handle's kept tables (`at.rs`), which hand
                // back what may not stay (a full list's oldest, or this one), to drop after the
                // pin-table lock.
                if let Some(k) = keeper.as_ref().filter(|_| self.keeps) {
                    if let Some(using) = self.using.take() {
                        let at = self.at.clone();
                        let leaving = k.put(Kept::new(map, using, self.layout, path, at));
                        drop(self.shared.take());
                        drop(leaving);
                        #[cfg(test)]
                        tests::after_keep();
                        return;
                    }
                }
                drop(self.shared.take());
                // While this pool handle keeps a table of the PMO, it counts as a user: a look's
                // leaving does not remove it. A writer's does: the handle's next writer would
                // join it and track into it again, session after session.
                match (self.role, keeper) {
                    (Role::Writer, Some(keeper)) => {
                        if let Some(k) = keeper.take(&self.at) {
                            k.discard();
                        }
                        crate::at::leave(&self.at, &path, map.file());
                    }
                    (_, Some(keeper)) if keeper.holds(&self.at) => {}
                    _ => crate::at::leave(&self.at, &path, map.file()),
                }
                drop(map);
            }
            None => {}
        }
    }
}

/// Remove the pin table of a PMO nobody uses (destroy, or a table a crash left), holding the
/// pin-table lock exclusively (the caller's `guard`).
pub fn remove_unused(at: &PinsAt, _guard: &LockGuard) -> Result<()> {
    if let Locker::Ofd(..) = at.locker {
        match std::fs::remove_file(at.path()) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("remove pin table")(e)),
        }
    }
    at.announce(false)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    thread_local! {
        /// What a test runs the moment a table has been kept (`readers.rs`'s tests: another
        /// reader taking it at once).
        pub(crate) static AFTER_KEEP: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
            const { std::cell::RefCell::new(None) };
    }

    pub(crate) fn after_keep() {
        if let Some(f) = AFTER_KEEP.with(|h| h.borrow_mut().take()) {
            f();
        }
    }

    /// A table file some process holds (its `USE_BYTE` taken shared on its own open file
    /// description) is kept; once nobody holds it, the sweep removes it; other files stay.
    #[test]
    fn the_sweep_removes_only_tables_nobody_uses() {
        let dir = std::env::temp_dir().join(format!("pmo-pins-sweep-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let used = dir.join("pmo-pins-0011223344556677-aa");
        let orphan = dir.join("pmo-pins-0011223344556677-bb");
        let other = dir.join("not-a-pin-table");
        for p in [&used, &orphan, &other] {
            std::fs::write(p, [0u8; 64]).unwrap();
        }
        let user = RangeLock::acquire_blocking_file(
            File::open(&used).unwrap(),
            USE_BYTE,
            1,
            LockKind::Shared,
        )
        .unwrap();
        assert_eq!(sweep_orphans(&dir), vec![orphan.clone()]);
        assert!(used.exists() && !orphan.exists() && other.exists());
        drop(user);
        assert_eq!(sweep_orphans(&dir), vec![used.clone()]);
        assert!(other.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

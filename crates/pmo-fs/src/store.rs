//! [`FileStore`]: files and directories as PMOs of one pool.
//!
//! (About 880 lines: the calls that change the tree share the tree lock's discipline and are
//! read together; an open file's calls are in `store/handle.rs`, the write-back of kept files
//! in `store/kept.rs`.)
//!
//! Open files are shared: the store keeps one table entry per open path (its attached PMOs,
//! its size) and counts the handles on it, as a kernel keeps one inode for many descriptors.
//! Data calls lock only their file; calls that change the tree (create, unlink, mkdir, rmdir,
//! open, close) take the tree lock, so "the parent exists" and "the file is not open" hold
//! while the namespace changes.
//!
//! Write path: bytes go into the attached views; the header (size) into the first PMO's view;
//! nothing is durable until [`FileHandle::fsync`] (or the file's write-back after its last
//! close: `writeback.rs`), which psyncs the written segments and then the first PMO. Growth creates the next segment (a
//! pcreate) before any byte of the write lands, so a full pool fails the write and changes
//! nothing.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use pmo_store::{AttachOptions, Attachment, Perm, Pool, Scheme, SessionStats, StoreError};

use crate::error::{FsError, Result};
use crate::header::{self, Header, HEADER_BYTES, MAX_SEGMENTS};
use crate::path::{FsPath, Kind};
use crate::writeback::{Closed, Flusher, WriteBack};

mod handle;
mod kept;

/// The largest file PMO (pages) attached resident unless the options say otherwise.
pub const FILE_RESIDENT_PAGES: u64 = 64;

/// How long an open waits for another user of the file to let go (then `Busy`).
pub const ATTACH_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// How the store creates and attaches its PMOs.
#[derive(Clone, Debug)]
pub struct FsOptions {
    /// Key of every PMO of the store.
    pub key: Vec<u8>,
    /// Scheme of the PMOs it creates (`None`: the pool's default).
    pub scheme: Option<Scheme>,
    /// Options of every attach (relocation is always allowed; `wait` defaults to
    /// [`ATTACH_WAIT`]).
    pub attach: AttachOptions,
    /// When a closed file is written back and detached (`writeback.rs`; default: within 1 s).
    pub write_back: WriteBack,
}

impl Default for FsOptions {
    fn default() -> Self {
        FsOptions {
            key: b"pmo-fs".to_vec(),
            scheme: None,
            attach: AttachOptions::default(),
            write_back: WriteBack::default(),
        }
    }
}

/// What `stat` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatKind {
    File,
    Dir,
}

/// `stat` of a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    pub kind: StatKind,
    /// File size in bytes (0 for a directory).
    pub size: u64,
}

/// One entry of a directory listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    pub name: String,
    pub kind: StatKind,
}

/// What [`FileStore::check`] found.
#[derive(Clone, Debug, Default)]
pub struct FsCheck {
    pub files: usize,
    pub dirs: usize,
    /// Segment PMOs beyond files' first ones.
    pub segments: usize,
    /// Sum of file sizes.
    pub file_bytes: u64,
    /// Pool space in use and free, and the heap they must add up to.
    pub used_bytes: u64,
    pub free_bytes: u64,
    pub heap_bytes: u64,
    /// Files skipped because another process has them open.
    pub busy: Vec<String>,
    /// Everything wrong (empty: healthy, no leak).
    pub problems: Vec<String>,
}

/// The PMOs one path has: (a directory marker, a file's first PMO, its segment numbers).
type PathPmos = (bool, bool, Vec<u32>);

struct Segment {
    att: Attachment,
    dirty: bool,
}

struct FileState {
    segs: Vec<Segment>,
    header: Header,
    /// Any write since the last psync.
    dirty: bool,
}

struct OpenFile {
    path: FsPath,
    state: Mutex<FileState>,
}

/// A file in the table: open (`handles` > 0) or kept after its last close (`kept`: its number
/// in the write-back list).
struct Entry {
    file: Arc<OpenFile>,
    handles: usize,
    kept: Option<u64>,
}

/// The files attached now, by path, and which of them are closed and kept (`writeback.rs`).
#[derive(Default)]
struct Tree {
    files: HashMap<FsPath, Entry>,
    closed: Closed,
}

impl Tree {
    /// `file` at `path`, opened by its first handle.
    fn opened(&mut self, path: FsPath, file: &Arc<OpenFile>) {
        let e = Entry {
            file: file.clone(),
            handles: 1,
            kept: None,
        };
        self.files.insert(path, e);
    }
}

struct Inner {
    pool: Pool,
    opts: FsOptions,
    /// Files attached by path, with the number of handles on each. Also the tree lock.
    open: Mutex<Tree>,
    /// Errors of write-backs no caller waited for, for the next [`FileStore::sync_all`].
    write_back_errors: Mutex<Vec<FsError>>,
    /// The store's share of the Fig. 6 time categories, summed over closed attach sessions.
    stats: Mutex<SessionStats>,
    /// What `open` repaired (leftovers of a crash), one line each.
    repairs: Mutex<Vec<String>>,
    /// The key family of the store's PMOs (the pool's family salt for "pmo-fs"): every file,
    /// segment and directory marker created under one key shares one Argon2id per process.
    family: [u8; 32],
}

/// The label of the file store's key family in its pool ([`Pool::family_salt`]).
const FAMILY_LABEL: &[u8] = b"pmo-fs";

/// The file store over one pool. Cheap to clone; shareable between threads. Dropping the
/// last clone (and the last [`FileHandle`]) writes back every kept file.
#[derive(Clone)]
pub struct FileStore {
    // Dropped before `inner`: the write-back thread is joined, so the last write-back runs
    // in the thread that drops the store.
    _flusher: Option<Arc<Flusher>>,
    inner: Arc<Inner>,
}

/// An open file. Close it with [`FileHandle::close`] (dropping it closes it too, and a
/// failure there is lost).
pub struct FileHandle {
    store: FileStore,
    file: Option<Arc<OpenFile>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// First-PMO size for a file expected to hold `hint` bytes: the hint plus a quarter for
/// appends, whole pages, at least one page.
fn first_pmo_bytes(hint: u64) -> u64 {
    let want = hint.saturating_add(hint / 4).saturating_add(HEADER_BYTES);
    want.div_ceil(4096).max(1).saturating_mul(4096)
}

impl FileStore {
    /// Open the file store over `pool`, repairing what a crash in the middle of an unlink or
    /// a growth left: segment PMOs whose file is gone or whose size does not need them.
    pub fn open(pool: Pool, opts: FsOptions) -> Result<FileStore> {
        let family = pool.family_salt(FAMILY_LABEL);
        let write_back = opts.write_back;
        let inner = Arc::new(Inner {
            family,
            pool,
            opts,
            open: Mutex::new(Tree::default()),
            write_back_errors: Mutex::new(Vec::new()),
            stats: Mutex::new(SessionStats::default()),
            repairs: Mutex::new(Vec::new()),
        });
        let flusher = if write_back.keeps() {
            let every = (write_back.after / 4).max(std::time::Duration::from_millis(5));
            let f = Flusher::start(Arc::downgrade(&inner), every, Inner::write_back_pass)
                .map_err(|e| FsError::Store(StoreError::Os(format!("write-back thread: {e}"))))?;
            Some(Arc::new(f))
        } else {
            None
        };
        let fs = FileStore {
            _flusher: flusher,
            inner,
        };
        fs.check_store_key()?;
        fs.repair()?;
        Ok(fs)
    }

    /// One key opens a whole store: refuse another before it adds files and directories the
    /// store's own key then cannot open (nor list, nor check). An empty store takes any key.
    fn check_store_key(&self) -> Result<()> {
        let any = self
            .scan()?
            .into_iter()
            .find_map(|(p, (is_dir, is_file, _))| {
                (is_dir || is_file)
                    .then(|| p.pmo_name(if is_file { Kind::File } else { Kind::Dir }))
            });
        match any {
            Some(name) => Ok(self.inner.pool.check_key(&name, self.key())?),
            None => Ok(()),
        }
    }

    /// What [`FileStore::open`] repaired: the leftovers of a crash in the middle of an unlink
    /// or a growth, one line each (empty after a clean shutdown).
    pub fn repairs(&self) -> Vec<String> {
        lock(&self.inner.repairs).clone()
    }

    /// The pool underneath.
    pub fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    fn key(&self) -> &[u8] {
        &self.inner.opts.key
    }

    /// Every file-store PMO: path -> (is a dir, is a file, segment numbers).
    fn scan(&self) -> Result<BTreeMap<FsPath, PathPmos>> {
        let mut m: BTreeMap<FsPath, PathPmos> = BTreeMap::new();
        for info in self.inner.pool.list()? {
            if let Some((p, kind)) = FsPath::from_pmo_name(&info.name) {
                let e = m.entry(p).or_default();
                match kind {
                    Kind::Dir => e.0 = true,
                    Kind::File => e.1 = true,
                    Kind::Segment(i) => e.2.push(i),
                }
            }
        }
        Ok(m)
    }

    fn read_header(&self, path: &FsPath) -> Result<Header> {
        let name = path.pmo_name(Kind::File);
        let pool = &self.inner.pool;
        // A reader that excludes writers for the instant of the read (a shared attach lock):
        // a `stat` must not pay for a snapshot reader's pin table (issue 29). Beside a writer
        // of another process, the snapshot reader reads the header as of its last psync.
        let h = match pool.open_pmo_with(&name, Perm::Read, self.key(), None, None, true) {
            Err(StoreError::Busy { .. }) => pool.open_pmo(&name, Perm::Read, self.key(), None)?,
            r => r?,
        };
        let mut b = [0u8; HEADER_BYTES as usize];
        h.read_at(0, &mut b)?;
        Header::decode(&b, path.as_str(), h.size())
    }

    fn repair(&self) -> Result<()> {
        let _tree = lock(&self.inner.open);
        for (path, (_, is_file, segs)) in self.scan()? {
            if segs.is_empty() {
                continue;
            }
            let needed = if is_file {
                match self.read_header(&path) {
                    Ok(h) => header::segments_for(h.first_pmo_bytes, h.size),
                    // Open elsewhere: leave its segments alone.
                    Err(FsError::Store(StoreError::Busy { .. })) => continue,
                    Err(e) => return Err(e),
                }
            } else {
                0
            };
            let mut extra: Vec<u32> = segs.into_iter().filter(|&i| i >= needed).collect();
            // Highest first, as everywhere (what a crash leaves stays a run 1..k).
            extra.sort_unstable_by(|a, b| b.cmp(a));
            for i in extra {
                self.inner
                    .pool
                    .pdestroy(&path.pmo_name(Kind::Segment(i)), self.key())?;
                lock(&self.inner.repairs).push(if is_file {
                    format!("{path}: removed segment {i}, which its size does not need (a growth or shrink cut short)")
                } else {
                    format!("{path}: removed segment {i} of a file that is gone (an unlink cut short)")
                });
            }
        }
        Ok(())
    }

    fn exists(&self, path: &FsPath, kind: Kind) -> Result<bool> {
        Ok(self.inner.pool.exists(&path.pmo_name(kind))?)
    }

    /// Is `path` a directory (the root, which has no marker, or one with its marker)?
    fn is_dir(&self, path: &FsPath) -> Result<bool> {
        Ok(path.is_root() || self.exists(path, Kind::Dir)?)
    }

    fn check_parent(&self, path: &FsPath) -> Result<()> {
        if path.is_root() {
            return Err(FsError::Exists("/".into()));
        }
        let parent = path.parent();
        if parent.is_root() || self.exists(&parent, Kind::Dir)? {
            Ok(())
        } else if self.exists(&parent, Kind::File)? {
            Err(FsError::NotADirectory(parent.to_string()))
        } else {
            Err(FsError::NotFound(parent.to_string()))
        }
    }

    fn check_free(&self, path: &FsPath) -> Result<()> {
        if path.is_root() || self.exists(path, Kind::Dir)? || self.exists(path, Kind::File)? {
            return Err(FsError::Exists(path.to_string()));
        }
        Ok(())
    }

    fn pcreate(&self, name: &str, bytes: u64) -> Result<()> {
        self.inner.pool.pcreate_in_family(
            name,
            bytes,
            self.key(),
            self.inner.opts.scheme,
            &self.inner.family,
        )?;
        Ok(())
    }

    fn attach(&self, name: &str) -> Result<Attachment> {
        // Wait a little for the attach lock: a background detach of this very file (integrity
        // at detach) may still hold it for an instant after it reports done.
        let opts = AttachOptions {
            relocate: true,
            wait: self.inner.opts.attach.wait.or(Some(ATTACH_WAIT)),
            // A file's session reads or writes it whole more often than not: up to 256 KiB
            // (Filebench's files, but OLTP's) filled at open beats faulting it in.
            resident_pages: self
                .inner
                .opts
                .attach
                .resident_pages
                .or(Some(FILE_RESIDENT_PAGES)),
            // Every write of the file store goes through `Attachment::write_at`, which declares
            // its bytes: the psync needs no comparison with a twin, and a small file's resident
            // view maps none (half its mappings' memory and population: issue 29). The
            // caller's or `PMO_DIRTY`'s choice still wins.
            tracking: self
                .inner
                .opts
                .attach
                .tracking
                .or_else(pmo_store::DirtyTracking::from_env)
                .or(Some(pmo_store::DirtyTracking::Declared)),
            ..self.inner.opts.attach
        };
        self.inner
            .pool
            .attach_with(name, Perm::Write, self.key(), opts)
            .map_err(|e| match e {
                StoreError::Busy { .. } => {
                    FsError::Busy(format!("{name:?} is open in another process"))
                }
                e => e.into(),
            })
    }

    /// `mkdir`: create directory `path` (its parent must exist).
    pub fn mkdir(&self, path: &str) -> Result<()> {
        let path = FsPath::parse(path)?;
        let _tree = lock(&self.inner.open);
        self.check_parent(&path)?;
        self.check_free(&path)?;
        self.pcreate(&path.pmo_name(Kind::Dir), 4096)
    }

    /// `mkdir -p`: create `path` and any missing parents.
    pub fn mkdir_all(&self, path: &str) -> Result<()> {
        let path = FsPath::parse(path)?;
        let mut chain = vec![];
        let mut p = path.clone();
        while !p.is_root() {
            chain.push(p.clone());
            p = p.parent();
        }
        for p in chain.into_iter().rev() {
            if self.exists(&p, Kind::Dir)? {
                continue;
            }
            match self.mkdir(p.as_str()) {
                Ok(()) => {}
                Err(FsError::Exists(_)) if self.exists(&p, Kind::Dir)? => {}
                // A file on the way (not the path itself) is no directory to go through.
                Err(FsError::Exists(_)) if p != path && self.exists(&p, Kind::File)? => {
                    return Err(FsError::NotADirectory(p.to_string()))
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// `rmdir`: remove an empty directory.
    pub fn rmdir(&self, path: &str) -> Result<()> {
        let path = FsPath::parse(path)?;
        if path.is_root() {
            return Err(FsError::BadPath {
                path: path.to_string(),
                reason: "the root directory cannot be removed".into(),
            });
        }
        let _tree = lock(&self.inner.open);
        if !self.exists(&path, Kind::Dir)? {
            return Err(FsError::NotFound(path.to_string()));
        }
        if !self.list(&path)?.is_empty() {
            return Err(FsError::NotEmpty(path.to_string()));
        }
        Ok(self
            .inner
            .pool
            .pdestroy(&path.pmo_name(Kind::Dir), self.key())?)
    }

    fn list(&self, dir: &FsPath) -> Result<Vec<DirEntry>> {
        let mut out = Vec::new();
        for (p, (is_dir, is_file, _)) in self.scan()? {
            if p.is_root() || p.parent() != *dir {
                continue;
            }
            let kind = match (is_dir, is_file) {
                (true, _) => StatKind::Dir,
                (false, true) => StatKind::File,
                _ => continue,
            };
            out.push(DirEntry {
                name: p.file_name().into(),
                kind,
            });
        }
        Ok(out)
    }

    /// `readdir`: the entries of directory `path`, sorted by name.
    pub fn readdir(&self, path: &str) -> Result<Vec<DirEntry>> {
        let path = FsPath::parse(path)?;
        if !path.is_root() && !self.exists(&path, Kind::Dir)? {
            return Err(if self.exists(&path, Kind::File)? {
                FsError::NotADirectory(path.to_string())
            } else {
                FsError::NotFound(path.to_string())
            });
        }
        self.list(&path)
    }

    /// `create`: a new empty file at `path` (exclusive), open. `size_hint` sizes its first PMO.
    pub fn create(&self, path: &str, size_hint: u64) -> Result<FileHandle> {
        let path = FsPath::parse(path)?;
        let mut tree = lock(&self.inner.open);
        self.check_parent(&path)?;
        self.check_free(&path)?;
        let first = first_pmo_bytes(size_hint);
        let name = path.pmo_name(Kind::File);
        // Leftover segments of an earlier file of this name (a failed unlink) go first, so the
        // new file never sees them. Segments are created in ascending and destroyed in
        // descending order, so leftovers always include segment 1: one lookup when none.
        self.destroy_segments(&path, 1)?;
        self.pcreate(&name, first)?;
        let hdr = Header {
            size: 0,
            first_pmo_bytes: first,
        };
        // No header is written or psynced: a new PMO reads as zeros, and an all-zero header
        // is an empty file of this first PMO's size (`Header::decode`), which is what `hdr`
        // says. The first write that changes the size writes the header (issue 29: a psync
        // per create saved).
        let att = match self.attach(&name) {
            Ok(a) => a,
            Err(e) => {
                let _ = self.inner.pool.pdestroy(&name, self.key());
                return Err(e);
            }
        };
        let file = Arc::new(OpenFile {
            path: path.clone(),
            state: Mutex::new(FileState {
                segs: vec![Segment { att, dirty: false }],
                header: hdr,
                dirty: false,
            }),
        });
        tree.opened(path, &file);
        Ok(self.handle(file))
    }

    fn handle(&self, file: Arc<OpenFile>) -> FileHandle {
        FileHandle {
            store: self.clone(),
            file: Some(file),
        }
    }

    /// `open`: an existing file (shared with other handles on it in this process).
    pub fn open_file(&self, path: &str) -> Result<FileHandle> {
        let path = FsPath::parse(path)?;
        let mut tree = lock(&self.inner.open);
        if let Some(e) = tree.files.get_mut(&path) {
            e.handles += 1;
            let f = e.file.clone();
            if let Some(n) = e.kept.take() {
                tree.closed.remove(n);
            }
            return Ok(self.handle(f));
        }
        let name = path.pmo_name(Kind::File);
        let att = match self.attach(&name) {
            Err(FsError::Store(StoreError::NotFound(_))) => {
                return Err(if self.is_dir(&path)? {
                    FsError::IsADirectory(path.to_string())
                } else {
                    FsError::NotFound(path.to_string())
                })
            }
            r => r?,
        };
        let mut b = [0u8; HEADER_BYTES as usize];
        att.read_at(0, &mut b)?;
        let header = Header::decode(&b, path.as_str(), att.len() as u64)?;
        let mut segs = vec![Segment { att, dirty: false }];
        for i in 1..header::segments_for(header.first_pmo_bytes, header.size) {
            let att = self
                .attach(&path.pmo_name(Kind::Segment(i)))
                .map_err(|e| match e {
                    FsError::Store(StoreError::NotFound(n)) => {
                        FsError::Corrupt(format!("file {path}: segment {n:?} is missing"))
                    }
                    e => e,
                })?;
            segs.push(Segment { att, dirty: false });
        }
        let file = Arc::new(OpenFile {
            path: path.clone(),
            state: Mutex::new(FileState {
                segs,
                header,
                dirty: false,
            }),
        });
        tree.opened(path, &file);
        Ok(self.handle(file))
    }

    fn close_file(&self, file: Arc<OpenFile>) -> Result<()> {
        let mut guard = lock(&self.inner.open);
        let tree = &mut *guard;
        let e = match tree.files.get_mut(&file.path) {
            Some(e) if e.handles > 0 => e,
            _ => return Err(FsError::BadHandle(file.path.to_string())),
        };
        e.handles -= 1;
        if e.handles > 0 {
            return Ok(());
        }
        let policy = self.inner.opts.write_back;
        // Kept attached until its write-back, unless written back at once by the policy or
        // because it shrank (the segments past its size go once the size is durable).
        let (shrank, dirty, bytes) = {
            let st = lock(&file.state);
            let needed = header::segments_for(st.header.first_pmo_bytes, st.header.size) as usize;
            let bytes: u64 = st.segs.iter().map(|g| g.att.len() as u64).sum();
            (st.segs.len() > needed.max(1), st.dirty, bytes)
        };
        // A clean file is kept only if the policy says so (`writeback.rs`).
        if !policy.keeps() || shrank || !(dirty || policy.clean) {
            tree.files.remove(&file.path);
            drop(guard);
            return self.inner.write_back(file);
        }
        e.kept = Some(tree.closed.push(file.path.clone(), bytes));
        let due = self.inner.take_due(tree, false);
        drop(guard);
        self.inner.write_back_all(due)
    }

    /// Write back every kept file now (psync if written, detach): after it returns, every
    /// file not open is durable and holds no plaintext in DRAM. Returns the oldest error not
    /// reported yet, of a background write-back or of this call's; each is reported once.
    pub fn sync_all(&self) -> Result<()> {
        let due = self.inner.take_due(&mut lock(&self.inner.open), true);
        let r = self.inner.write_back_all(due);
        let earlier = std::mem::take(&mut *lock(&self.inner.write_back_errors));
        match earlier.into_iter().next() {
            Some(e) => Err(e),
            None => r,
        }
    }

    /// Files closed and kept attached until their write-back, and their PMOs' bytes.
    pub fn kept(&self) -> (usize, u64) {
        let t = lock(&self.inner.open);
        (t.closed.len(), t.closed.bytes())
    }

    /// `stat`.
    pub fn stat(&self, path: &str) -> Result<Stat> {
        let path = FsPath::parse(path)?;
        if path.is_root() || self.exists(&path, Kind::Dir)? {
            return Ok(Stat {
                kind: StatKind::Dir,
                size: 0,
            });
        }
        let tree = lock(&self.inner.open);
        if let Some(e) = tree.files.get(&path) {
            let f = e.file.clone();
            drop(tree);
            let size = lock(&f.state).header.size;
            return Ok(Stat {
                kind: StatKind::File,
                size,
            });
        }
        match self.read_header(&path) {
            Ok(h) => Ok(Stat {
                kind: StatKind::File,
                size: h.size,
            }),
            Err(FsError::Store(StoreError::NotFound(_))) => {
                Err(FsError::NotFound(path.to_string()))
            }
            Err(FsError::Store(StoreError::Busy { .. })) => {
                Err(FsError::Busy(format!("{path} is open in another process")))
            }
            Err(e) => Err(e),
        }
    }

    /// `unlink`: remove a file that no handle has open.
    pub fn unlink(&self, path: &str) -> Result<()> {
        let path = FsPath::parse(path)?;
        let mut tree = lock(&self.inner.open);
        match tree.files.get(&path) {
            Some(e) if e.handles > 0 => return Err(FsError::Busy(format!("{path} is open"))),
            Some(e) => {
                // Kept after its last close: its unsynced writes go with it (detached unsynced).
                let n = e.kept;
                let file = tree.files.remove(&path).map(|e| e.file);
                if let Some(n) = n {
                    tree.closed.remove(n);
                }
                if let Some(file) = file {
                    for seg in lock(&file.state).segs.drain(..) {
                        seg.att.detach()?;
                    }
                }
            }
            None => {}
        }
        let name = path.pmo_name(Kind::File);
        match self.pdestroy_waiting(&name) {
            Ok(()) => {}
            Err(StoreError::NotFound(_)) => {
                return Err(if self.is_dir(&path)? {
                    FsError::IsADirectory(path.to_string())
                } else {
                    FsError::NotFound(path.to_string())
                })
            }
            Err(StoreError::Busy { .. }) => {
                return Err(FsError::Busy(format!("{path} is open in another process")))
            }
            Err(e) => return Err(e.into()),
        }
        // The file is gone (atomically) with its first PMO; its segments follow. A crash
        // here leaves segments without a file, which `open` removes.
        self.destroy_segments(&path, 1)
    }

    /// Destroy segments `from..` of `path`, highest first (so that what a crash leaves is
    /// still a run 1..k, found by looking up segment 1 alone).
    fn destroy_segments(&self, path: &FsPath, from: u32) -> Result<()> {
        let mut top = from;
        while top <= MAX_SEGMENTS && self.exists(path, Kind::Segment(top))? {
            top += 1;
        }
        for i in (from..top).rev() {
            match self
                .inner
                .pool
                .pdestroy(&path.pmo_name(Kind::Segment(i)), self.key())
            {
                Ok(()) | Err(StoreError::NotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// pdestroy, retrying for up to [`ATTACH_WAIT`] while the PMO is busy (a background
    /// detach of a file just closed may still hold its lock for an instant).
    fn pdestroy_waiting(&self, name: &str) -> std::result::Result<(), StoreError> {
        let t = Instant::now();
        loop {
            match self.inner.pool.pdestroy(name, self.key()) {
                Err(StoreError::Busy { .. }) if t.elapsed() < ATTACH_WAIT => {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                r => return r,
            }
        }
    }

    /// Read a whole file.
    pub fn read_file(&self, path: &str) -> Result<Vec<u8>> {
        let f = self.open_file(path)?;
        let mut buf = vec![0u8; f.size() as usize];
        let n = f.pread(0, &mut buf)?;
        buf.truncate(n);
        f.close()?;
        Ok(buf)
    }

    /// Write a whole file (created if missing, else replaced) and fsync it.
    pub fn write_file(&self, path: &str, data: &[u8]) -> Result<()> {
        let f = match self.create(path, data.len() as u64) {
            Ok(f) => f,
            Err(FsError::Exists(_)) => self.open_file(path)?,
            Err(e) => return Err(e),
        };
        // Write over the old bytes, then cut what is left of them: a store too full for the
        // new bytes fails the write (it grows first) with the file unchanged.
        f.pwrite(0, data)?;
        f.truncate(data.len() as u64)?;
        f.fsync()?;
        f.close()
    }

    /// The store's time categories (LOaPP Fig. 6) summed over the attach sessions closed so
    /// far.
    pub fn session_stats(&self) -> SessionStats {
        *lock(&self.inner.stats)
    }

    /// Check every file and directory against the namespace, every file header, and the
    /// pool's own checksums and space accounting (used + free = heap: nothing leaked).
    pub fn check(&self) -> Result<FsCheck> {
        let pool_report = self.inner.pool.check()?;
        let mut r = FsCheck {
            used_bytes: pool_report.used_bytes,
            free_bytes: pool_report.free_bytes,
            heap_bytes: pool_report.heap_len,
            problems: pool_report.problems,
            ..Default::default()
        };
        if r.used_bytes + r.free_bytes != r.heap_bytes {
            r.problems.push(format!(
                "space leaked: used {} + free {} != heap {}",
                r.used_bytes, r.free_bytes, r.heap_bytes
            ));
        }
        let all = self.scan()?;
        let dir_ok = |p: &FsPath| p.is_root() || all.get(p).is_some_and(|e| e.0);
        for (path, (is_dir, is_file, segs)) in &all {
            if *is_dir && *is_file {
                r.problems
                    .push(format!("{path} is both a file and a directory"));
            }
            if (*is_dir || *is_file) && !dir_ok(&path.parent()) {
                r.problems
                    .push(format!("{path}: its parent directory does not exist"));
            }
            r.dirs += usize::from(*is_dir);
            r.segments += segs.len();
            if !*is_file {
                if !segs.is_empty() {
                    r.problems.push(format!(
                        "{path}: {} segment PMO(s) without a file",
                        segs.len()
                    ));
                }
                continue;
            }
            r.files += 1;
            let open = lock(&self.inner.open)
                .files
                .get(path)
                .map(|e| e.file.clone());
            let h = match open {
                Some(f) => lock(&f.state).header,
                None => match self.read_header(path) {
                    Ok(h) => h,
                    Err(FsError::Store(StoreError::Busy { .. })) => {
                        r.busy.push(path.to_string());
                        continue;
                    }
                    Err(e) if e.is_integrity() => {
                        r.problems.push(e.to_string());
                        continue;
                    }
                    Err(e) => return Err(e),
                },
            };
            r.file_bytes += h.size;
            let needed = header::segments_for(h.first_pmo_bytes, h.size);
            let mut have: Vec<u32> = segs.clone();
            have.sort_unstable();
            let want: Vec<u32> = (1..needed).collect();
            if have != want {
                r.problems.push(format!(
                    "{path}: size {} needs segments {want:?}, found {have:?}",
                    h.size
                ));
            }
        }
        Ok(r)
    }
}

impl FileStore {
    /// [`FileStore::check`], and then read every file whole: a file whose PMOs fail to decrypt
    /// or verify (under a scheme that verifies), or whose segments are missing, is a problem.
    /// Files open in another process are listed in `busy`.
    pub fn check_data(&self) -> Result<FsCheck> {
        // Read from the medium, not from a kept file's views.
        self.sync_all()?;
        let mut r = self.check()?;
        for (path, (_, is_file, _)) in self.scan()? {
            if !is_file || r.busy.iter().any(|b| *b == path.as_str()) {
                continue;
            }
            match self.read_file(path.as_str()) {
                Ok(_) => {}
                Err(FsError::Busy(_)) => r.busy.push(path.to_string()),
                // A corruption error names its file already.
                Err(e @ FsError::Corrupt(_)) => r.problems.push(e.to_string()),
                Err(e) if e.is_integrity() => r.problems.push(format!("file {path}: {e}")),
                Err(e) => return Err(e),
            }
        }
        Ok(r)
    }
}

//! The hooks `patches/mdb-pmo.patch` calls from LMDB's `mdb.c` (declared in `csrc/pmo_lmdb.h`):
//! attach a PMO as an environment's map, psync it where LMDB would msync or fdatasync, detach
//! it at close. A [`Backend`] names the pool, key and attach options; without one installed,
//! the first hook opens the pool of `PMO_POOL` with the key of `PMO_KEY` (as the CLI does).
#![allow(unsafe_code)] // Reason: `extern "C"` hooks called from C with raw pointers.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use pmo_store::{AttachOptions, Attachment, DirtyTracking, Perm, Pool, Scheme, StoreError};

use crate::{lockdir, LmdbError};

/// LMDB's `MDB_RDONLY` (lmdb.h).
pub const MDB_RDONLY: c_uint = 0x20000;
/// Size of a PMO a writer creates when the program set no map size and `PMO_LMDB_SIZE` is
/// unset (LMDB's own default map size, 1 MiB, is too small to be useful).
pub const DEFAULT_PMO_SIZE: u64 = 64 << 20;

/// The pool, key and attach options environments on PMOs use in this process.
pub struct Backend {
    pub pool: Pool,
    pub key: Vec<u8>,
    /// Options of every attach (dirty tracking, prediction, scheme override...).
    pub attach: AttachOptions,
    /// Scheme of PMOs a writer creates (`None`: `PMO_SCHEME`, else the pool's default).
    pub scheme: Option<Scheme>,
    /// Directory of the lock files (`None`: `PMO_LMDB_LOCKDIR`, else `/dev/shm`, else the
    /// temporary directory).
    pub lock_dir: Option<PathBuf>,
    /// Whether a writer runs with `MDB_WRITEMAP` (`None`: `PMO_LMDB_WRITEMAP`, `0` for no, else
    /// yes). Without it LMDB copies each dirty page into the attachment (`pmo_lmdb_pwrite`):
    /// one more copy per page, measured in `pmo bench lmdb` (`pmo-secure-nowritemap`).
    pub writemap: Option<bool>,
}

impl Backend {
    /// A backend over `pool` with `key` and default options.
    pub fn new(pool: Pool, key: &[u8]) -> Backend {
        Backend {
            pool,
            key: key.to_vec(),
            attach: AttachOptions::default(),
            scheme: None,
            lock_dir: None,
            writemap: None,
        }
    }

    /// The pool of `PMO_POOL` (else pmo's default pool) with the key of `PMO_KEY`.
    pub fn from_env() -> Result<Backend, LmdbError> {
        let path = match std::env::var_os("PMO_POOL") {
            Some(p) if !p.is_empty() => PathBuf::from(p),
            _ => default_pool_path().ok_or_else(|| {
                LmdbError::Usage("no pool: set PMO_POOL (or HOME for the default pool)".into())
            })?,
        };
        let pool = Pool::open(&path)?;
        let key = std::env::var("PMO_KEY").unwrap_or_default();
        Ok(Backend::new(pool, key.as_bytes()))
    }
}

fn default_pool_path() -> Option<PathBuf> {
    let data = std::env::var_os("XDG_DATA_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))?;
    Some(data.join("pmo/default.pool"))
}

static BACKEND: Mutex<Option<Arc<Backend>>> = Mutex::new(None);

/// The attachments of the environments open in this process, by PMO name.
static OPEN: Mutex<Vec<(String, Weak<Attachment>)>> = Mutex::new(Vec::new());

/// The attach session figures (time in the LOaPP Fig. 6 categories, faults, pages) of the open
/// environment on PMO `name`, for the benchmarks' time breakdown.
pub fn session_stats(name: &str) -> Option<pmo_store::SessionStats> {
    let att = OPEN
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|(n, _)| n == name)
        .and_then(|(_, w)| w.upgrade())?;
    Some(att.session_stats())
}

/// Use `backend` for every environment this process opens on a PMO from now on (environments
/// open already keep theirs).
pub fn install(backend: Backend) {
    *BACKEND.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(backend));
}

/// Forget the installed backend (the next open reads the environment again).
pub fn uninstall() {
    *BACKEND.lock().unwrap_or_else(|e| e.into_inner()) = None;
}

fn backend() -> Result<Arc<Backend>, LmdbError> {
    let mut slot = BACKEND.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(b) = &*slot {
        return Ok(b.clone());
    }
    let b = Arc::new(Backend::from_env()?);
    *slot = Some(b.clone());
    Ok(b)
}

static PATHS_ARE_NAMES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Make every environment path a PMO name in this process (`pmo lmdb TOOL NAME`): `pmo:NAME`
/// or `NAME`, its leading `./` and trailing `/` dropped. Otherwise paths map to PMOs by
/// [`crate::paths`].
pub fn set_paths_are_names(on: bool) {
    PATHS_ARE_NAMES.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// The PMO an environment path names, if any (see [`set_paths_are_names`] and
/// [`crate::paths`]).
pub fn pmo_name(path: &str, flags: c_uint) -> Result<Option<String>, LmdbError> {
    if PATHS_ARE_NAMES.load(std::sync::atomic::Ordering::Relaxed) {
        let mut p = path.strip_prefix("pmo:").unwrap_or(path);
        while let Some(rest) = p.strip_prefix("./") {
            p = rest;
        }
        return Ok(Some(p.trim_end_matches('/').to_string()));
    }
    crate::paths::pmo_name(path, flags & crate::ffi::MDB_NOSUBDIR != 0, false)
}

thread_local! {
    static LAST_ERROR: RefCell<Option<(CString, bool)>> = const { RefCell::new(None) };
}

fn set_error(e: &LmdbError) -> c_int {
    let msg = CString::new(e.to_string().replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|l| *l.borrow_mut() = Some((msg, e.is_integrity())));
    e.errno()
}

fn clear_error() {
    LAST_ERROR.with(|l| *l.borrow_mut() = None);
}

/// The message of this thread's latest failed hook, and whether it was an integrity failure.
pub fn last_error() -> Option<(String, bool)> {
    LAST_ERROR.with(|l| {
        l.borrow()
            .as_ref()
            .map(|(m, i)| (m.to_string_lossy().into_owned(), *i))
    })
}

/// Forget this thread's latest hook failure.
pub fn clear_last_error() {
    clear_error();
}

/// `pmo_lmdb_map` of `csrc/pmo_lmdb.h`.
#[repr(C)]
pub struct PmoLmdbMap {
    base: *mut c_char,
    size: usize,
    lock_path: *const c_char,
    handle: *mut c_void,
    writemap: c_int,
    snapshot: c_int,
    /// Read and written by mdb.c only, under `txn_mutex`.
    lagging: c_uint,
    txn_mutex: libc::pthread_mutex_t,
}

struct MapState {
    att: Option<Arc<Attachment>>,
    name: String,
    _lock_path: CString,
    /// The lock directory, released in this process's count at close.
    lock_dir: PathBuf,
    /// The pool's file (canonical): when it is gone at close, so is the lock directory.
    pool_file: Option<PathBuf>,
    /// Never psynced when attached: reads as an empty data file.
    fresh: AtomicBool,
    /// The pool and key, and the options of the attach, for a grow that attaches again.
    backend: Arc<Backend>,
    opts: AttachOptions,
}

/// PMO `name`'s lock directory, its owner recorded (`crate::lockdir`), counted open in this
/// process until `pmo_lmdb_close`; and the pool file's path.
fn lock_dir(backend: &Backend, name: &str) -> Result<(PathBuf, Option<PathBuf>), LmdbError> {
    let root = match &backend.lock_dir {
        Some(d) => d.clone(),
        None => lockdir::lock_root(),
    };
    // One lock file per (pool, PMO), whatever path the pool was opened by: the pool's uuid.
    let owner = lockdir::Owner::of(&backend.pool, name)?;
    Ok((lockdir::prepare(&root, &owner)?, owner.pool))
}

fn open(path: &str, flags: c_uint, want_size: usize) -> Result<Option<Box<PmoLmdbMap>>, LmdbError> {
    let Some(name) = pmo_name(path, flags)? else {
        return Ok(None);
    };
    let backend = backend()?;
    let rdonly = flags & MDB_RDONLY != 0;
    if !rdonly && !backend.pool.exists(&name)? {
        let size = if want_size > 0 {
            want_size as u64
        } else {
            match std::env::var("PMO_LMDB_SIZE") {
                Ok(v) if !v.is_empty() => parse_size(&v).filter(|s| *s > 0).ok_or_else(|| {
                    LmdbError::Usage(format!("PMO_LMDB_SIZE={v:?} is not a size"))
                })?,
                _ => DEFAULT_PMO_SIZE,
            }
        }
        .next_multiple_of(4096);
        let scheme = match backend.scheme {
            Some(s) => Some(s),
            None => match std::env::var("PMO_SCHEME") {
                Ok(s) if !s.is_empty() => Some(Scheme::from_name(&s)?),
                _ => None,
            },
        };
        match backend.pool.pcreate_with(&name, size, &backend.key, scheme) {
            Ok(_) | Err(StoreError::Exists(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let perm = if rdonly { Perm::Read } else { Perm::Write };
    let mut opts = backend.attach;
    // A read-only environment attaches beside the writer (unless the backend asks for the
    // exclusive rule): each read transaction moves its view to the newest psync
    // (pmo_lmdb_refresh from mdb_txn_renew0; docs/lmdb.md).
    // Another environment of this process may have the PMO attached (several environments
    // on one PMO, LMDB allows it): this one then maps it elsewhere. LMDB's pointers are
    // offsets in the map, so only MDB_FIXEDMAP needs the stable address.
    if flags & crate::ffi::MDB_FIXEDMAP == 0 {
        opts.relocate = true;
    }
    // A reader with predictive decryption cannot move its view (a prediction worker may be
    // installing a page of the old snapshot): such a read-only environment attaches
    // exclusively instead (no writer meanwhile, nothing to refresh; docs/lmdb.md).
    if rdonly {
        let predict = match opts.predict {
            Some(p) => p,
            None => pmo_store::predict::PredictConfig::from_env()?,
        };
        if predict.is_on() {
            opts.exclusive_read = true;
        }
    }
    // A reader process starting with no writer makes a brief exclusive open (recovery) before
    // it reads beside writers: a writer arriving then waits for it, as LMDB's writer waits
    // for its mutex, instead of failing with EBUSY. A second writer still gets EBUSY, after
    // this wait.
    if !rdonly && opts.wait.is_none() {
        opts.wait = Some(std::time::Duration::from_millis(500));
    }
    // A writer's pages are named by LMDB itself at commit (pmo_lmdb_declare): no write faults.
    // PMO_DIRTY or the backend's options choose another tracking (docs/lmdb.md).
    if !rdonly
        && opts.tracking.is_none()
        && std::env::var_os("PMO_DIRTY").is_none_or(|v| v.is_empty())
    {
        opts.tracking = Some(DirtyTracking::Declared);
    }
    let att = backend.pool.attach_with(&name, perm, &backend.key, opts)?;
    let fresh = AtomicBool::new(att.handle().seq() == 0);
    let snapshot = c_int::from(att.handle().reader().is_some());
    let (dir, pool_file) = lock_dir(&backend, &name)?;
    // With MDB_NOSUBDIR LMDB appends "-lock" to the path it is given: keep it in the directory.
    let lock = if flags & crate::ffi::MDB_NOSUBDIR != 0 {
        dir.join(lockdir::NOSUBDIR_BASE)
    } else {
        dir.clone()
    };
    let lock = match CString::new(lock.into_os_string().into_encoded_bytes()) {
        Ok(l) => l,
        Err(_) => {
            lockdir::release(&dir);
            return Err(LmdbError::Lock("lock path holds a NUL".into()));
        }
    };
    let att = Arc::new(att);
    OPEN.lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((name.clone(), Arc::downgrade(&att)));
    let state = Box::new(MapState {
        att: Some(att),
        name,
        _lock_path: lock,
        lock_dir: dir,
        pool_file,
        fresh,
        backend: backend.clone(),
        opts,
    });
    let att = state.att.as_ref().expect("just set");
    let writemap = match backend.writemap {
        Some(w) => w,
        None => std::env::var("PMO_LMDB_WRITEMAP").map_or(true, |v| v.trim() != "0"),
    };
    Ok(Some(Box::new(PmoLmdbMap {
        base: att.addr().cast(),
        size: att.len(),
        lock_path: state._lock_path.as_ptr(),
        handle: Box::into_raw(state).cast(),
        writemap: c_int::from(writemap),
        snapshot,
        lagging: 0,
        txn_mutex: libc::PTHREAD_MUTEX_INITIALIZER,
    })))
}

/// `12345`, or with a `K`/`M`/`G` suffix (binary).
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mul) = match s.char_indices().last()? {
        (i, 'k' | 'K') => (&s[..i], 1u64 << 10),
        (i, 'm' | 'M') => (&s[..i], 1 << 20),
        (i, 'g' | 'G') => (&s[..i], 1 << 30),
        _ => (s, 1),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(mul)
}

/// # Safety
/// `map` comes from [`pmo_lmdb_open`] and is not closed.
unsafe fn state<'a>(map: *mut PmoLmdbMap) -> &'a MapState {
    // SAFETY: the caller's contract: `map` and its handle are live until pmo_lmdb_close, which
    // LMDB calls once no transaction runs; shared, as read transactions call from any thread
    // (what changes is atomic or behind the attachment's own locks).
    unsafe { &*(*map).handle.cast::<MapState>() }
}

/// # Safety
/// Called by the patched `mdb.c` only, with the pointers `csrc/pmo_lmdb.h` describes: a map
/// from `pmo_lmdb_open`, not yet closed, and buffers of the lengths given.
#[no_mangle]
pub unsafe extern "C" fn pmo_lmdb_open(
    path: *const c_char,
    flags: c_uint,
    want_size: usize,
    out: *mut *mut PmoLmdbMap,
) -> c_int {
    clear_error();
    if path.is_null() || out.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: LMDB passes the NUL-terminated path its caller gave mdb_env_open.
    let path = unsafe { CStr::from_ptr(path) }.to_string_lossy();
    match std::panic::catch_unwind(|| open(&path, flags, want_size)) {
        Ok(Ok(map)) => {
            let raw = map.map_or(std::ptr::null_mut(), Box::into_raw);
            // SAFETY: `out` is LMDB's `&env->me_pmo`, checked non-null above.
            unsafe { *out = raw };
            0
        }
        Ok(Err(e)) => set_error(&e),
        Err(_) => set_error(&LmdbError::Usage("internal error in pmo_lmdb_open".into())),
    }
}

/// # Safety
/// Called by the patched `mdb.c` only, with the pointers `csrc/pmo_lmdb.h` describes: a map
/// from `pmo_lmdb_open`, not yet closed, and buffers of the lengths given.
#[no_mangle]
pub unsafe extern "C" fn pmo_lmdb_psync(map: *mut PmoLmdbMap) -> c_int {
    // SAFETY: LMDB passes its live `env->me_pmo`.
    let st = unsafe { state(map) };
    let Some(att) = st.att.as_ref() else {
        return libc::EINVAL;
    };
    match att.psync() {
        Ok(_) => {
            st.fresh.store(false, Ordering::Release);
            0
        }
        Err(e) => set_error(&e.into()),
    }
}

/// # Safety
/// Called by the patched `mdb.c` only, with the pointers `csrc/pmo_lmdb.h` describes: a map
/// from `pmo_lmdb_open`, not yet closed, and buffers of the lengths given.
#[no_mangle]
pub unsafe extern "C" fn pmo_lmdb_pread(
    map: *mut PmoLmdbMap,
    buf: *mut c_void,
    len: usize,
    off: usize,
) -> isize {
    // SAFETY: LMDB passes its live `env->me_pmo`.
    let st = unsafe { state(map) };
    let Some(att) = st.att.as_ref() else {
        return -1;
    };
    if st.fresh.load(Ordering::Acquire) || off >= att.len() {
        return 0;
    }
    let n = len.min(att.len() - off);
    // SAFETY: [off, off+n) lies inside the attachment (checked above); `buf` is LMDB's buffer of
    // at least `len` bytes; they do not overlap (LMDB's buffer is on its stack).
    unsafe { std::ptr::copy_nonoverlapping(att.addr().add(off), buf.cast::<u8>(), n) };
    n as isize
}

/// # Safety
/// Called by the patched `mdb.c` only, with the pointers `csrc/pmo_lmdb.h` describes: a map
/// from `pmo_lmdb_open`, not yet closed, and buffers of the lengths given.
#[no_mangle]
pub unsafe extern "C" fn pmo_lmdb_pwrite(
    map: *mut PmoLmdbMap,
    buf: *const c_void,
    len: usize,
    off: usize,
) -> c_int {
    // SAFETY: LMDB passes its live `env->me_pmo`.
    let st = unsafe { state(map) };
    let Some(att) = st.att.as_ref() else { return 0 };
    if att.perm() != Perm::Write || off.checked_add(len).is_none_or(|end| end > att.len()) {
        errno::set_errno(errno::Errno(libc::ENOSPC));
        return 0;
    }
    // SAFETY: [off, off+len) lies inside the writable attachment (checked above); `buf` is
    // LMDB's calloc'ed meta pages, its meta record, or (without MDB_WRITEMAP) a dirty page it
    // malloc'ed, of `len` bytes, not inside the map.
    unsafe { std::ptr::copy_nonoverlapping(buf.cast::<u8>(), att.addr().add(off), len) };
    if att.declare(off, len).is_err() {
        errno::set_errno(errno::Errno(libc::EIO));
        return 0;
    }
    1
}

/// # Safety
/// Called by the patched `mdb.c` only, with the pointers `csrc/pmo_lmdb.h` describes: a map
/// from `pmo_lmdb_open`, not yet closed.
#[no_mangle]
pub unsafe extern "C" fn pmo_lmdb_declare(map: *mut PmoLmdbMap, addr: *const c_void, len: usize) {
    // SAFETY: LMDB passes its live `env->me_pmo`.
    let st = unsafe { state(map) };
    let Some(att) = st.att.as_ref() else { return };
    let off = (addr as usize).wrapping_sub(att.addr() as usize);
    if off < att.len() {
        // Out of range cannot happen (LMDB names pages of its map); declare clamps anyway.
        if let Err(e) = att.declare(off, len.min(att.len() - off)) {
            set_error(&e.into());
        }
    }
}

/// # Safety
/// Called by the patched `mdb.c` only, with the pointers `csrc/pmo_lmdb.h` describes: a map
/// from `pmo_lmdb_open`, not yet closed, and buffers of the lengths given.
#[no_mangle]
pub unsafe extern "C" fn pmo_lmdb_prefault(map: *mut PmoLmdbMap, addr: *const c_void, len: usize) {
    // SAFETY: LMDB passes its live `env->me_pmo`.
    let st = unsafe { state(map) };
    let Some(att) = st.att.as_ref() else { return };
    let base = att.addr() as usize;
    let start = (addr as usize).max(base);
    let end = (addr as usize).saturating_add(len).min(base + att.len());
    let mut p = start & !4095;
    while p < end {
        // SAFETY: p lies inside the live attachment (clamped above; page-aligned down from
        // `start` >= base, which is page-aligned); a volatile read makes the fault handler fill it.
        unsafe { std::ptr::read_volatile(p.max(base) as *const u8) };
        p += 4096;
    }
}

/// # Safety
/// Called by the patched `mdb.c` only, with a map from `pmo_lmdb_open`, not yet closed, its
/// `txn_mutex` held.
#[no_mangle]
pub unsafe extern "C" fn pmo_lmdb_refresh(map: *mut PmoLmdbMap) -> c_int {
    // SAFETY: LMDB passes its live `env->me_pmo`.
    let st = unsafe { state(map) };
    let Some(att) = st.att.as_ref() else {
        return libc::EINVAL;
    };
    match att.refresh() {
        Ok(_) => 0,
        Err(e) => set_error(&e.into()),
    }
}

/// # Safety
/// Called by the patched `mdb.c` only (`mdb_env_set_mapsize` of an open writer), with a map
/// from `pmo_lmdb_open`, not yet closed, while no transaction of the environment runs
/// (LMDB's own condition for a new map size): nothing else uses the map meanwhile.
#[no_mangle]
pub unsafe extern "C" fn pmo_lmdb_grow(map: *mut PmoLmdbMap, size: usize) -> c_int {
    // SAFETY: LMDB passes its live `env->me_pmo`, and no other thread uses it during the call
    // (the contract above), so this exclusive borrow is the only one.
    let st = unsafe { &mut *(*map).handle.cast::<MapState>() };
    let Some(arc) = st.att.take() else {
        return libc::EINVAL;
    };
    let att = match Arc::try_unwrap(arc) {
        Ok(a) => a,
        Err(arc) => {
            // session_stats holds it for a moment: try again later.
            st.att = Some(arc);
            return set_error(&LmdbError::Usage(format!(
                "PMO '{}' is in use by a statistics reader: set the map size again",
                st.name
            )));
        }
    };
    let (rc, att) = match att.resize(size as u64, &st.backend.key, st.opts, false) {
        Ok((a, _report)) => (0, Some(a)),
        Err(e) => {
            let e = *e;
            (set_error(&e.error.into()), e.attachment)
        }
    };
    let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    open.retain(|(n, w)| !(n == &st.name && w.strong_count() == 0));
    match att {
        Some(a) => {
            let a = Arc::new(a);
            open.push((st.name.clone(), Arc::downgrade(&a)));
            // SAFETY: `map` is live (the contract above); LMDB reads these fields next.
            unsafe {
                (*map).base = a.addr().cast();
                (*map).size = a.len();
            }
            st.att = Some(a);
        }
        // SAFETY: as above.
        None => unsafe {
            (*map).base = std::ptr::null_mut();
            (*map).size = 0;
        },
    }
    rc
}

/// # Safety
/// Called by the patched `mdb.c` only, with the pointers `csrc/pmo_lmdb.h` describes: a map
/// from `pmo_lmdb_open`, not yet closed, and buffers of the lengths given.
#[no_mangle]
pub unsafe extern "C" fn pmo_lmdb_close(map: *mut PmoLmdbMap, sync: c_int) {
    if map.is_null() {
        return;
    }
    // SAFETY: LMDB hands back the pointer pmo_lmdb_open made with Box::into_raw, once.
    let map = unsafe { Box::from_raw(map) };
    // SAFETY: the handle was made with Box::into_raw in `open`, and is freed only here.
    let mut st = unsafe { Box::from_raw(map.handle.cast::<MapState>()) };
    lockdir::release(&st.lock_dir);
    if let Some(att) = st.att.take() {
        OPEN.lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(n, w)| !(n == &st.name && std::ptr::eq(w.as_ptr(), Arc::as_ptr(&att))));
        if sync != 0 && att.perm() == Perm::Write {
            if let Err(e) = att.psync() {
                set_error(&e.into());
            }
        }
        // Only session_stats borrows the Arc, for a moment; if it does, its drop detaches.
        if let Ok(att) = Arc::try_unwrap(att) {
            if let Err(e) = att.detach() {
                set_error(&e.into());
            }
        }
    }
    // A pool file deleted while the environment was open: nothing will use its lock directory
    // again. (A PMO cannot be destroyed while attached: `pmo destroy` removes its directory.)
    if st
        .pool_file
        .as_deref()
        .is_some_and(|p| matches!(p.try_exists(), Ok(false)))
    {
        if let Err(e) = lockdir::remove_at_close(&st.lock_dir) {
            set_error(&e.into());
        }
    }
}

#[no_mangle]
pub extern "C" fn pmo_lmdb_last_error() -> *const c_char {
    LAST_ERROR.with(|l| {
        l.borrow()
            .as_ref()
            .map_or(std::ptr::null(), |(m, _)| m.as_ptr())
    })
}

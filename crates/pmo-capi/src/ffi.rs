//! The C entry points declared in `include/pmo.h`.
//!
//! Owns the boundary between C and the safe [`crate::registry`]: converting C strings and
//! pointers, catching panics, and reporting failures through `errno`, the calling thread's
//! last-error code and message. Everything else lives in safe modules.
//!
//! Invariants:
//! - No panic crosses the boundary: every entry point runs its body under `catch_unwind` and
//!   turns a panic into an error return (`PMO_E_INTERNAL`, errno `EIO`); the calls that only
//!   read the last error or describe a code return a fixed fallback instead.
//! - Every entry point records its outcome for `pmo_last_error` (0 on success); on failure it
//!   sets `errno` last, after all clean-up, so nothing clobbers it.
//! - Memory handed to C is either the caller's own pointer (`pmo_create` returns `key`), static
//!   (`pmo_strerror`), thread-local and valid until the thread's next call
//!   (`pmo_last_error_message`), or `malloc`ed for the caller to `free` (`pmo_get_name`).
//!   Addresses handed out (attachments, heap blocks, `pmo_heap` handles) are only ever taken
//!   back as integers and looked up in the registry: a stale or foreign pointer is an error,
//!   never dereferenced here.
//! - The first call installs a `pthread_atfork` child handler (one atomic add), so the
//!   registry notices a fork without a `getpid` per call.
#![allow(unsafe_code)] // C ABI: raw pointers and C strings from callers, malloc, strerror,
                       // pthread_atfork, the foreach callback.

mod readers;

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use pmo_store::AttachOptions;

use crate::error::{self, CapiError};
use crate::heap;
use crate::registry::{self, perm_from_char, Result};

/// `pmo_attach_opts.flags`: map elsewhere if the PMO's stable address range is taken.
pub const PMO_ATTACH_RELOCATE: u32 = 1;
/// `pmo_attach_opts.flags`: fill every page at attach instead of on first touch.
pub const PMO_ATTACH_POPULATE: u32 = 2;
const PMO_ATTACH_KNOWN: u32 = PMO_ATTACH_RELOCATE | PMO_ATTACH_POPULATE;

/// `pmo_attach_opts` of `pmo.h`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PmoAttachOpts {
    /// `PMO_ATTACH_*` bits.
    pub flags: u32,
    /// Wait up to this many milliseconds for a conflicting user to detach (0: fail at once).
    pub wait_ms: u32,
    /// Protection design to run this attach under (NULL: the PMO's own scheme).
    pub scheme: *const c_char,
}

impl Default for PmoAttachOpts {
    fn default() -> Self {
        PmoAttachOpts {
            flags: 0,
            wait_ms: 0,
            scheme: std::ptr::null(),
        }
    }
}

/// `pmo_psync_stats` of `pmo.h`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PmoPsyncStats {
    /// Pages committed.
    pub pages: u64,
    /// Bytes written to the medium (data, journal, commit record).
    pub bytes_persisted: u64,
    /// Wall time of the commit in nanoseconds.
    pub elapsed_ns: u64,
    /// Commit sequence number (0 when there was nothing to commit).
    pub seq: u64,
}

// The C header declares these layouts; keep them fixed.
const _: () = assert!(std::mem::size_of::<PmoAttachOpts>() == 16);
const _: () = assert!(std::mem::size_of::<PmoPsyncStats>() == 32);

struct LastError {
    code: c_int,
    /// `None` after a success (read as ""), so a successful call allocates nothing.
    message: Option<CString>,
}

thread_local! {
    static LAST_ERROR: RefCell<LastError> = const { RefCell::new(LastError { code: 0, message: None }) };
}

fn record_success() {
    // `try_with`: during thread teardown the slot may be gone; the return value still stands.
    let _ = LAST_ERROR.try_with(|l| {
        let mut l = l.borrow_mut();
        if l.code != 0 || l.message.is_some() {
            *l = LastError {
                code: 0,
                message: None,
            };
        }
    });
}

fn record(code: c_int, message: &str) {
    let message = CString::new(message.replace('\0', "?")).ok();
    let _ = LAST_ERROR.try_with(|l| *l.borrow_mut() = LastError { code, message });
}

fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".to_owned()
    }
}

/// Run an entry point that reports nothing (the last-error and strerror calls, which must not
/// overwrite the last error): only catch panics, returning `on_panic`.
fn guard<T>(on_panic: T, body: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(on_panic)
}

/// Run one entry point's body: catch panics, record the outcome, set errno on failure and
/// return `on_error`.
fn entry<T>(on_error: T, body: impl FnOnce() -> Result<T>) -> T {
    entry_map(|_| on_error, body)
}

/// As [`entry`], for the `pmo_*_ex` calls that return the error's `PMO_E_*` code.
fn entry_code<T: From<c_int>>(body: impl FnOnce() -> Result<T>) -> T {
    entry_map(|e| T::from(e.code()), body)
}

fn entry_map<T>(on_error: impl FnOnce(&CapiError) -> T, body: impl FnOnce() -> Result<T>) -> T {
    let outcome = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(r) => r,
        Err(payload) => Err(CapiError::Internal(panic_text(&*payload))),
    };
    match outcome {
        Ok(v) => {
            record_success();
            v
        }
        Err(e) => {
            record(e.code(), &e.to_string());
            let errno = e.errno();
            let ret = on_error(&e);
            drop(e);
            errno::set_errno(errno::Errno(errno));
            ret
        }
    }
}

/// # Safety
/// `p` is null or points to a NUL-terminated string that stays valid and unchanged for `'a`.
unsafe fn c_bytes<'a>(p: *const c_char, what: &str) -> Result<&'a [u8]> {
    if p.is_null() {
        return Err(CapiError::Invalid(format!("{what} is NULL")));
    }
    // SAFETY: non-null, and the caller guarantees a valid NUL-terminated string for 'a.
    Ok(unsafe { CStr::from_ptr(p) }.to_bytes())
}

/// # Safety
/// As [`c_bytes`].
unsafe fn c_str<'a>(p: *const c_char, what: &str) -> Result<&'a str> {
    // SAFETY: forwarded caller obligation.
    let b = unsafe { c_bytes(p, what) }?;
    std::str::from_utf8(b).map_err(|_| CapiError::Invalid(format!("{what} is not UTF-8")))
}

/// The key the reference's header means: NULL is `"DEFAULT"` (its pmo_create(2) manual page).
const DEFAULT_KEY: &CStr = c"DEFAULT";

/// # Safety
/// As [`c_bytes`].
unsafe fn c_key<'a>(p: *const c_char) -> &'a [u8] {
    if p.is_null() {
        return DEFAULT_KEY.to_bytes();
    }
    // SAFETY: non-null; the caller guarantees a valid NUL-terminated string for 'a.
    unsafe { CStr::from_ptr(p) }.to_bytes()
}

/// Whether the debug trace is on (`pmo_enable_debug`, or `PMO_DEBUG=1` at the first call).
static DEBUG: AtomicBool = AtomicBool::new(false);

/// Print one trace line for a call of the reference's API when the debug trace is on: the
/// call, what it returned and, on failure, the last error's message.
fn trace<T: std::fmt::Debug>(call: impl FnOnce() -> String, ret: T) -> T {
    if DEBUG.load(Ordering::Relaxed) {
        let err = LAST_ERROR
            .try_with(|l| {
                let l = l.borrow();
                (l.code != 0).then(|| {
                    l.message
                        .as_ref()
                        .map_or_else(String::new, |m| m.to_string_lossy().into_owned())
                })
            })
            .ok()
            .flatten();
        match err {
            Some(m) => eprintln!("pmo: {} = {ret:?} ({m})", call()),
            None => eprintln!("pmo: {} = {ret:?}", call()),
        }
    }
    ret
}

/// A C string argument for a trace line.
///
/// # Safety
/// `p` is NULL or a valid NUL-terminated string.
unsafe fn show(p: *const c_char) -> String {
    if p.is_null() {
        "NULL".into()
    } else {
        // SAFETY: non-null, a valid C string by the caller's contract.
        format!("{:?}", unsafe { CStr::from_ptr(p) }.to_string_lossy())
    }
}

/// Installs the fork hook once, on the first call into the library.
static FORK_HOOK: std::sync::Once = std::sync::Once::new();

extern "C" fn child_after_fork() {
    registry::note_fork_in_child();
}

fn reg() -> &'static registry::Registry {
    FORK_HOOK.call_once(|| {
        // SAFETY: registers a child handler that does one atomic add (async-signal-safe, as a
        // handler run after fork in a multi-threaded process must be). glibc removes handlers
        // of a shared object when it is unloaded.
        if unsafe { libc::pthread_atfork(None, None, Some(child_after_fork)) } == 0 {
            registry::set_fork_hook_installed();
        }
        // SAFETY: registers a plain `extern "C" fn()` to run at normal exit; it waits on a
        // condition variable for the store's background detaches and removes kept pin tables
        // (without blocking on the registry: `try_read`).
        let _ = unsafe { libc::atexit(finish_detaches_at_exit) };
        if std::env::var_os("PMO_DEBUG").is_some_and(|v| v == "1") {
            DEBUG.store(true, Ordering::Relaxed);
        }
    });
    registry::global()
}

/// At normal process exit: let background detaches (integrity-at-detach checksums) finish,
/// so the next attach need not run the crash handler; then remove the pin tables the pool
/// handle kept for its next reader (`pmo_pins::at`), which would otherwise stay in `/dev/shm`
/// until the next pool open's sweep.
extern "C" fn finish_detaches_at_exit() {
    let _ = catch_unwind(pmo_store::wait_for_background_detaches);
    let _ = catch_unwind(|| registry::global().drop_kept_tables_at_exit());
}

fn attach_common(name: &str, perm: c_char, key: &[u8], opts: AttachOptions) -> Result<usize> {
    let perm = perm_from_char(perm as u8)?;
    reg().attach(name, perm, key, opts)
}

/// The reference's attach and its aliases: NULL key is "DEFAULT"; a PMO this process has
/// attached already gives the same mapping; `offset` bytes into the PMO (`subset_attach`).
///
/// # Safety
/// `name` and `key` are NULL or valid NUL-terminated strings.
unsafe fn attach_reference(
    call: &str,
    name: *const c_char,
    perm: c_char,
    key: *const c_char,
    subset: Option<(usize, usize)>,
) -> *mut c_void {
    let r = entry(std::ptr::null_mut(), || {
        // SAFETY: the caller passes valid C strings (or NULL: rejected name, default key).
        let (n, k) = unsafe { (c_str(name, "name")?, c_key(key)) };
        let perm = perm_from_char(perm as u8)?;
        if let Some((size, offset)) = subset {
            check_subset(reg().pool()?.info(n)?.size, size, offset)?;
        }
        let start = reg().attach_or_reuse(n, perm, k, AttachOptions::default())?;
        Ok((start + subset.map_or(0, |(_, offset)| offset)) as *mut c_void)
    });
    trace(
        // SAFETY: `name` is NULL or a valid C string (this function's contract).
        || {
            format!(
                "{call}({}, {:?})",
                unsafe { show(name) },
                perm as u8 as char
            )
        },
        r,
    )
}

/// The subset `[offset, offset + size)` (size 0: to the end) of a PMO of `pmo_size` bytes:
/// `offset` a multiple of 4096 and the subset inside the PMO.
fn check_subset(pmo_size: u64, size: usize, offset: usize) -> Result<()> {
    let (size, offset) = (size as u64, offset as u64);
    if offset % 4096 != 0 {
        return Err(CapiError::Invalid(format!(
            "subset offset {offset} is not a multiple of 4096"
        )));
    }
    let inside = offset < pmo_size && offset.checked_add(size).is_some_and(|end| end <= pmo_size);
    if !inside {
        return Err(CapiError::Invalid(format!(
            "subset {offset}+{size} is outside the {pmo_size}-byte PMO"
        )));
    }
    Ok(())
}

/// `void *attach(const char *name, char perm, const char *key)`: see `pmo.h`.
///
/// # Safety
/// `name` and `key` are NULL or valid NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn attach(
    name: *const c_char,
    perm: c_char,
    key: *const c_char,
) -> *mut c_void {
    // SAFETY: forwarded caller contract.
    unsafe { attach_reference("attach", name, perm, key, None) }
}

/// Same as [`attach`].
///
/// # Safety
/// As [`attach`].
#[no_mangle]
pub unsafe extern "C" fn pmo_attach(
    name: *const c_char,
    perm: c_char,
    key: *const c_char,
) -> *mut c_void {
    // SAFETY: forwarded caller contract.
    unsafe { attach_reference("pmo_attach", name, perm, key, None) }
}

/// Same as [`attach`] (the reference's secure configuration).
///
/// # Safety
/// As [`attach`].
#[no_mangle]
pub unsafe extern "C" fn secure_attach(
    name: *const c_char,
    perm: c_char,
    key: *const c_char,
) -> *mut c_void {
    // SAFETY: forwarded caller contract.
    unsafe { attach_reference("secure_attach", name, perm, key, None) }
}

/// Same as [`attach`] (the reference's dynamic configuration).
///
/// # Safety
/// As [`attach`].
#[no_mangle]
pub unsafe extern "C" fn dynamic_attach(
    name: *const c_char,
    perm: c_char,
    key: *const c_char,
) -> *mut c_void {
    // SAFETY: forwarded caller contract.
    unsafe { attach_reference("dynamic_attach", name, perm, key, None) }
}

/// `void *subset_attach(name, perm, key, size, offset)`: see `pmo.h`.
///
/// # Safety
/// As [`attach`].
#[no_mangle]
pub unsafe extern "C" fn subset_attach(
    name: *const c_char,
    perm: c_char,
    key: *const c_char,
    size: usize,
    offset: usize,
) -> *mut c_void {
    // SAFETY: forwarded caller contract.
    unsafe { attach_reference("subset_attach", name, perm, key, Some((size, offset))) }
}

/// `int pmo_attach_ex(name, perm, key, opts, addr_out)`: see `pmo.h`.
///
/// # Safety
/// `name`, `key` as for [`attach`]; `opts` is NULL or points to a `pmo_attach_opts`;
/// `addr_out` is NULL or points to writable storage for one pointer.
#[no_mangle]
pub unsafe extern "C" fn pmo_attach_ex(
    name: *const c_char,
    perm: c_char,
    key: *const c_char,
    opts: *const PmoAttachOpts,
    addr_out: *mut *mut c_void,
) -> c_int {
    entry_code(|| {
        if addr_out.is_null() {
            return Err(CapiError::Invalid("addr_out is NULL".into()));
        }
        let o = if opts.is_null() {
            PmoAttachOpts::default()
        } else {
            // SAFETY: non-null, points to a pmo_attach_opts by the caller's contract.
            unsafe { *opts }
        };
        if o.flags & !PMO_ATTACH_KNOWN != 0 {
            return Err(CapiError::Invalid(format!(
                "unknown attach flags {:#x}",
                o.flags & !PMO_ATTACH_KNOWN
            )));
        }
        let scheme = if o.scheme.is_null() {
            None
        } else {
            // SAFETY: non-null: a C string by the caller's contract.
            let s = unsafe { c_str(o.scheme, "scheme") }?;
            Some(pmo_store::Scheme::from_name(s)?)
        };
        let ao = AttachOptions {
            wait: (o.wait_ms > 0).then(|| Duration::from_millis(u64::from(o.wait_ms))),
            relocate: o.flags & PMO_ATTACH_RELOCATE != 0,
            populate: o.flags & PMO_ATTACH_POPULATE != 0,
            scheme,
            ..AttachOptions::default()
        };
        // SAFETY: the caller passes valid C strings (or NULL, rejected).
        let (n, k) = unsafe { (c_str(name, "name")?, c_key(key)) };
        let addr = attach_common(n, perm, k, ao)?;
        // SAFETY: non-null (checked) and writable by the caller's contract.
        unsafe { *addr_out = addr as *mut c_void };
        Ok(0)
    })
}

fn detach_reference(call: &str, addr: *mut c_void) -> c_int {
    let r = entry(-1, || reg().detach(addr as usize).map(|()| 0));
    trace(|| format!("{call}({addr:p})"), r)
}

/// `int detach(void *addr)`: see `pmo.h`.
///
/// # Safety
/// No thread may touch the PMO's memory once this returns (the range is unmapped).
#[no_mangle]
pub unsafe extern "C" fn detach(addr: *mut c_void) -> c_int {
    detach_reference("detach", addr)
}

/// Same as [`detach`].
///
/// # Safety
/// As [`detach`].
#[no_mangle]
pub unsafe extern "C" fn pmo_detach(addr: *mut c_void) -> c_int {
    detach_reference("pmo_detach", addr)
}

/// Same as [`detach`].
///
/// # Safety
/// As [`detach`].
#[no_mangle]
pub unsafe extern "C" fn secure_write_detach(addr: *mut c_void) -> c_int {
    detach_reference("secure_write_detach", addr)
}

/// Same as [`detach`]; the second argument is ignored, as by the reference.
///
/// # Safety
/// As [`detach`].
#[no_mangle]
pub unsafe extern "C" fn dynamic_detach(addr: *mut c_void, _unused: c_char) -> c_int {
    detach_reference("dynamic_detach", addr)
}

/// `int psync(void *addr)`: see `pmo.h`. Only reads the registry: safe for any address.
#[no_mangle]
pub extern "C" fn psync(addr: *mut c_void) -> c_int {
    let r = entry(-1, || reg().psync(addr as usize).map(|_| 0));
    trace(|| format!("psync({addr:p})"), r)
}

/// `int psync_nochecksum(void *addr)`: see `pmo.h`.
#[no_mangle]
pub extern "C" fn psync_nochecksum(addr: *mut c_void) -> c_int {
    let r = entry(-1, || reg().psync_nochecksum(addr as usize).map(|_| 0));
    trace(|| format!("psync_nochecksum({addr:p})"), r)
}

/// `size_t pmo_enable_debug(void)`: see `pmo.h`.
#[no_mangle]
pub extern "C" fn pmo_enable_debug() -> usize {
    let _ = reg();
    DEBUG.store(true, Ordering::Relaxed);
    record_success();
    0
}

/// `size_t pmo_disable_debug(void)`: see `pmo.h`.
#[no_mangle]
pub extern "C" fn pmo_disable_debug() -> usize {
    let _ = reg();
    DEBUG.store(false, Ordering::Relaxed);
    record_success();
    0
}

/// `int64_t pmo_psync_ex(void *addr, pmo_psync_stats *stats)`: see `pmo.h`.
///
/// # Safety
/// `stats` is NULL or points to writable storage for a `pmo_psync_stats`.
#[no_mangle]
pub unsafe extern "C" fn pmo_psync_ex(addr: *mut c_void, stats: *mut PmoPsyncStats) -> i64 {
    entry_code(|| {
        let s = reg().psync(addr as usize)?;
        if !stats.is_null() {
            // SAFETY: non-null and writable by the caller's contract.
            unsafe { *stats = psync_stats(&s) };
        }
        i64::try_from(s.pages).map_err(|_| CapiError::Internal("page count overflow".into()))
    })
}

fn last_code() -> c_int {
    LAST_ERROR
        .try_with(|l| l.borrow().code)
        .unwrap_or(error::PMO_E_INTERNAL)
}

/// `int pmo_create_ex(const char *name, uint64_t size, const char *key, const char *scheme)`:
/// see `pmo.h`.
///
/// # Safety
/// `name`, `key` and `scheme` are NULL (`scheme` only: the default) or valid NUL-terminated
/// strings.
#[no_mangle]
pub unsafe extern "C" fn pmo_create_ex(
    name: *const c_char,
    size: u64,
    key: *const c_char,
    scheme: *const c_char,
) -> c_int {
    // SAFETY: the same contract as `pmo_create_max`'s, which a capacity of 0 (the size) makes
    // this call.
    unsafe { pmo_create_max(name, size, 0, key, scheme) }
}

/// `int pmo_create_max(const char *name, uint64_t size, uint64_t max_size, const char *key,
/// const char *scheme)`: see `pmo.h`.
///
/// # Safety
/// As [`pmo_create_ex`].
#[no_mangle]
pub unsafe extern "C" fn pmo_create_max(
    name: *const c_char,
    size: u64,
    max_size: u64,
    key: *const c_char,
    scheme: *const c_char,
) -> c_int {
    entry_code(|| {
        // SAFETY: the caller passes valid C strings (or NULL: rejected, or the default scheme).
        let (n, k) = unsafe { (c_str(name, "name")?, c_key(key)) };
        let s = if scheme.is_null() {
            None
        } else {
            // SAFETY: non-null, a valid C string by the caller's contract.
            Some(unsafe { c_str(scheme, "scheme")? })
        };
        reg().create_max(n, size, max_size, k, s)?;
        Ok(0)
    })
}

/// `pmo_session_stats` in `pmo.h` is `pmo_store::SessionStats` (`repr(C)`, 14 u64 fields).
pub type PmoSessionStats = pmo_store::SessionStats;

const _: () = assert!(std::mem::size_of::<PmoSessionStats>() == 14 * 8);

/// `int pmo_get_session_stats(void *addr, pmo_session_stats *stats)`: see `pmo.h`.
///
/// # Safety
/// `stats` is NULL (rejected) or points to writable storage for a `pmo_session_stats`.
#[no_mangle]
pub unsafe extern "C" fn pmo_get_session_stats(
    addr: *mut c_void,
    stats: *mut PmoSessionStats,
) -> c_int {
    entry_code(|| {
        if stats.is_null() {
            return Err(CapiError::Invalid("stats is NULL".into()));
        }
        let out = reg().session_stats(addr as usize)?;
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { *stats = out };
        Ok(0)
    })
}

/// `char *pmo_create(const char *name, uint64_t size, const char *key)`: see `pmo.h`.
///
/// # Safety
/// `name` and `key` are NULL or valid NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn pmo_create(
    name: *const c_char,
    size: u64,
    key: *const c_char,
) -> *mut c_char {
    let r = entry(std::ptr::null_mut(), || {
        // SAFETY: the caller passes valid C strings (or NULL: rejected name, default key).
        let (n, k) = unsafe { (c_str(name, "name")?, c_key(key)) };
        reg().create(n, size, k)?;
        // The reference returns the key as `char *`; C never writes through it (a static
        // "DEFAULT" for a NULL key), as with strchr's result.
        Ok(if key.is_null() {
            DEFAULT_KEY.as_ptr()
        } else {
            key
        }
        .cast_mut())
    });
    // SAFETY: `name` is NULL or a valid C string (the caller's contract).
    trace(
        || format!("pmo_create({}, {size})", unsafe { show(name) }),
        r,
    )
}

/// `int pmo_destroy(const char *name, const char *key)`: see `pmo.h`.
///
/// # Safety
/// As [`pmo_create`].
#[no_mangle]
pub unsafe extern "C" fn pmo_destroy(name: *const c_char, key: *const c_char) -> c_int {
    let r = entry(-1, || {
        // SAFETY: the caller passes valid C strings (or NULL: rejected name, default key).
        let (n, k) = unsafe { (c_str(name, "name")?, c_key(key)) };
        reg().destroy(n, k).map(|()| 0)
    });
    // SAFETY: `name` is NULL or a valid C string (the caller's contract).
    trace(|| format!("pmo_destroy({})", unsafe { show(name) }), r)
}

/// `int pmo_rename(const char *name, const char *new_name, const char *key)`: see `pmo.h`.
///
/// # Safety
/// As [`pmo_create`]; `new_name` as `name`.
#[no_mangle]
pub unsafe extern "C" fn pmo_rename(
    name: *const c_char,
    new_name: *const c_char,
    key: *const c_char,
) -> c_int {
    let r = entry(-1, || {
        // SAFETY: the caller passes valid C strings (or NULL: rejected names, default key).
        let (n, new, k) = unsafe {
            (
                c_str(name, "name")?,
                c_str(new_name, "new name")?,
                c_key(key),
            )
        };
        reg().pool()?.rename(n, new, k)?;
        Ok(0)
    });
    // SAFETY: `name` and `new_name` are NULL or valid C strings (the caller's contract).
    trace(
        || {
            format!("pmo_rename({}, {})", unsafe { show(name) }, unsafe {
                show(new_name)
            })
        },
        r,
    )
}

/// `int pmo_rekey(const char *name, const char *key, const char *new_key)`: see `pmo.h`.
///
/// # Safety
/// As [`pmo_create`]; `new_key` a valid NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pmo_rekey(
    name: *const c_char,
    key: *const c_char,
    new_key: *const c_char,
) -> c_int {
    let r = entry(-1, || {
        // SAFETY: the caller passes valid C strings (NULL name or new key rejected).
        let (n, k, nk) = unsafe { (c_str(name, "name")?, c_key(key), c_str(new_key, "new key")?) };
        reg().pool()?.rekey(n, k, nk.as_bytes())?;
        Ok(0)
    });
    // SAFETY: `name` is NULL or a valid C string (the caller's contract).
    trace(|| format!("pmo_rekey({})", unsafe { show(name) }), r)
}

/// `int pmo_rotate(const char *name, const char *key)`: see `pmo.h`.
///
/// # Safety
/// As [`pmo_create`].
#[no_mangle]
pub unsafe extern "C" fn pmo_rotate(name: *const c_char, key: *const c_char) -> c_int {
    let r = entry(-1, || {
        // SAFETY: the caller passes a valid C string (NULL name rejected, NULL key: default).
        let (n, k) = unsafe { (c_str(name, "name")?, c_key(key)) };
        reg().pool()?.rotate(n, k, &mut |_, _| {})?;
        Ok(0)
    });
    // SAFETY: `name` is NULL or a valid C string (the caller's contract).
    trace(|| format!("pmo_rotate({})", unsafe { show(name) }), r)
}

/// `int pmo_resize(const char *name, uint64_t size, int force, const char *key)`: see `pmo.h`.
///
/// # Safety
/// As [`pmo_create`].
#[no_mangle]
pub unsafe extern "C" fn pmo_resize(
    name: *const c_char,
    size: u64,
    force: c_int,
    key: *const c_char,
) -> c_int {
    let r = entry(-1, || {
        // SAFETY: the caller passes valid C strings (or NULL: rejected name, default key).
        let (n, k) = unsafe { (c_str(name, "name")?, c_key(key)) };
        reg().resize(n, size, force != 0, k)?;
        Ok(0)
    });
    // SAFETY: `name` is NULL or a valid C string (the caller's contract).
    trace(
        || format!("pmo_resize({}, {size})", unsafe { show(name) }),
        r,
    )
}

/// `int pmo_export(const char *name, const char *key, const char *path)`: see `pmo.h`.
///
/// # Safety
/// As [`pmo_create`]; `path` a valid NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pmo_export(
    name: *const c_char,
    key: *const c_char,
    path: *const c_char,
) -> c_int {
    let r = entry(-1, || {
        // SAFETY: the caller passes valid C strings (NULL name or path rejected).
        let (n, k, f) = unsafe { (c_str(name, "name")?, c_key(key), c_str(path, "path")?) };
        reg()
            .pool()?
            .export(n, k, std::path::Path::new(f), &mut |_, _| {})?;
        Ok(0)
    });
    // SAFETY: `name` is NULL or a valid C string (the caller's contract).
    trace(|| format!("pmo_export({})", unsafe { show(name) }), r)
}

/// `int pmo_copy(const char *name, const char *new_name, const char *key, const char
/// *new_key)`: see `pmo.h`.
///
/// # Safety
/// As [`pmo_create`]; `new_name` a valid NUL-terminated string, `new_key` NULL or one.
#[no_mangle]
pub unsafe extern "C" fn pmo_copy(
    name: *const c_char,
    new_name: *const c_char,
    key: *const c_char,
    new_key: *const c_char,
) -> c_int {
    let r = entry(-1, || {
        // SAFETY: the caller passes valid C strings (NULL names rejected, NULL key: default).
        let (n, new, k) = unsafe {
            (
                c_str(name, "name")?,
                c_str(new_name, "new name")?,
                c_key(key),
            )
        };
        let nk = if new_key.is_null() {
            None
        } else {
            // SAFETY: non-NULL, a valid C string (the caller's contract).
            Some(unsafe { c_str(new_key, "new key") }?.as_bytes())
        };
        reg().pool()?.copy(n, new, k, nk, &mut |_, _| {})?;
        Ok(0)
    });
    // SAFETY: `name` is NULL or a valid C string (the caller's contract).
    trace(|| format!("pmo_copy({})", unsafe { show(name) }), r)
}

/// `int pmo_snapshot(const char *name, const char *new_name, const char *key)`: see `pmo.h`.
///
/// # Safety
/// As [`pmo_create`]; `new_name` a valid NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pmo_snapshot(
    name: *const c_char,
    new_name: *const c_char,
    key: *const c_char,
) -> c_int {
    // SAFETY: the caller's contract is pmo_copy's; a NULL new key means the same key.
    unsafe { pmo_copy(name, new_name, key, std::ptr::null()) }
}

/// `int pmo_import(const char *path, const char *name, const char *key)`: see `pmo.h`.
///
/// # Safety
/// `path` a valid NUL-terminated string; `name` NULL or one; `key` as in [`pmo_create`].
#[no_mangle]
pub unsafe extern "C" fn pmo_import(
    path: *const c_char,
    name: *const c_char,
    key: *const c_char,
) -> c_int {
    let r = entry(-1, || {
        // SAFETY: the caller passes valid C strings (NULL path rejected, NULL name: the file's).
        let (f, k) = unsafe { (c_str(path, "path")?, c_key(key)) };
        let n = if name.is_null() {
            None
        } else {
            // SAFETY: non-NULL, a valid C string (the caller's contract).
            Some(unsafe { c_str(name, "name") }?)
        };
        reg()
            .pool()?
            .import(std::path::Path::new(f), n, k, &mut |_, _| {})?;
        Ok(0)
    });
    // SAFETY: `path` is NULL or a valid C string (the caller's contract).
    trace(|| format!("pmo_import({})", unsafe { show(path) }), r)
}

/// `char pmo_exists(const char *name)`: see `pmo.h`.
///
/// # Safety
/// `name` is NULL or a valid NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pmo_exists(name: *const c_char) -> c_char {
    let r = entry(0, || {
        // SAFETY: the caller passes a valid C string (or NULL, rejected).
        let n = unsafe { c_str(name, "name") }?;
        reg().exists(n).map(c_char::from)
    });
    // SAFETY: `name` is NULL or a valid C string (the caller's contract).
    trace(|| format!("pmo_exists({})", unsafe { show(name) }), r)
}

/// `size_t pmo_get_size(const char *name)`: see `pmo.h`.
///
/// # Safety
/// `name` is NULL or a valid NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pmo_get_size(name: *const c_char) -> usize {
    let r = entry(0, || {
        // SAFETY: the caller passes a valid C string (or NULL, rejected).
        let n = unsafe { c_str(name, "name") }?;
        let size = reg().size_of(n)?;
        usize::try_from(size).map_err(|_| CapiError::Invalid("PMO size exceeds size_t".into()))
    });
    // SAFETY: `name` is NULL or a valid C string (the caller's contract).
    trace(|| format!("pmo_get_size({})", unsafe { show(name) }), r)
}

/// `char *pmo_get_name(void *addr)`: see `pmo.h`. The caller frees the result with `free`.
#[no_mangle]
pub extern "C" fn pmo_get_name(addr: *mut c_void) -> *mut c_char {
    let r = entry(std::ptr::null_mut(), || {
        let name = reg().name_of(addr as usize)?;
        let bytes = name.as_bytes();
        // SAFETY: malloc has no preconditions; the result is checked for NULL.
        let out = unsafe { libc::malloc(bytes.len() + 1) } as *mut u8;
        if out.is_null() {
            return Err(CapiError::Io {
                op: "malloc".into(),
                source: std::io::Error::from_raw_os_error(libc::ENOMEM),
            });
        }
        // SAFETY: `out` has room for len + 1 bytes and does not overlap `bytes`.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), out, bytes.len());
            *out.add(bytes.len()) = 0;
        }
        Ok(out as *mut c_char)
    });
    trace(|| format!("pmo_get_name({addr:p})"), r)
}

/// `int pmo_pool_open(const char *path, uint64_t create_size)`: see `pmo.h`.
///
/// # Safety
/// `path` is NULL or a valid NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pmo_pool_open(path: *const c_char, create_size: u64) -> c_int {
    entry_code(|| {
        use std::os::unix::ffi::OsStrExt;
        let p = if path.is_null() {
            None
        } else {
            // SAFETY: non-null, a valid C string by the caller's contract.
            let bytes = unsafe { c_bytes(path, "path") }?;
            Some(Path::new(std::ffi::OsStr::from_bytes(bytes)))
        };
        reg().pool_open(p, create_size).map(|()| 0)
    })
}

/// `int pmo_pool_close(void)`: see `pmo.h`.
#[no_mangle]
pub extern "C" fn pmo_pool_close() -> c_int {
    entry_code(|| reg().pool_close().map(|()| 0))
}

/// `int pmo_last_error(void)`: the `PMO_E_*` code of this thread's latest call (0: it succeeded).
#[no_mangle]
pub extern "C" fn pmo_last_error() -> c_int {
    guard(error::PMO_E_INTERNAL, last_code)
}

/// `const char *pmo_last_error_message(void)`: see `pmo.h`.
#[no_mangle]
pub extern "C" fn pmo_last_error_message() -> *const c_char {
    // The CString lives in this thread's slot until the thread's next libpmo call replaces it.
    guard(c"".as_ptr(), || {
        LAST_ERROR
            .try_with(|l| match &l.borrow().message {
                Some(m) => m.as_ptr(),
                None => c"".as_ptr(),
            })
            .unwrap_or(c"".as_ptr())
    })
}

/// `const char *pmo_strerror(int err)`: see `pmo.h`.
#[no_mangle]
pub extern "C" fn pmo_strerror(err: c_int) -> *const c_char {
    guard(c"unknown pmo error".as_ptr(), || {
        if let Some(s) = error::describe(err) {
            return s.as_ptr();
        }
        if err > 0 {
            // SAFETY: strerror accepts any int and returns a NUL-terminated string.
            return unsafe { libc::strerror(err) };
        }
        c"unknown pmo error".as_ptr()
    })
}

// ---------------------------------------------------------------------------------------------
// Persistent heap: the pmo_p_malloc family (default heap) and pmo_heap_* (named heaps).
// ---------------------------------------------------------------------------------------------

/// `pmo_heap` of `pmo.h`: opaque. A handle's value is the heap's start address, looked up in
/// the registry on every call, so a stale handle is an error (`PMO_E_NOT_ATTACHED`), never a
/// dangling pointer.
#[repr(C)]
pub struct PmoHeapHandle {
    _opaque: [u8; 0],
}

/// `int (*)(void *block, size_t usable_size, void *ctx)` of `pmo_heap_foreach`.
pub type PmoHeapVisit = unsafe extern "C" fn(*mut c_void, usize, *mut c_void) -> c_int;

fn heap_handle(h: *mut PmoHeapHandle) -> Result<std::sync::Arc<pmo_heap::PmoHeap>> {
    reg().heap_at(h as usize)
}

/// `void *pmo_p_malloc(size_t size)`: see `pmo.h`.
#[no_mangle]
pub extern "C" fn pmo_p_malloc(size: usize) -> *mut c_void {
    entry(std::ptr::null_mut(), || {
        heap::malloc(reg(), size).map(|a| a as *mut c_void)
    })
}

/// `void *pmo_p_calloc(size_t nmemb, size_t size)`: see `pmo.h`.
#[no_mangle]
pub extern "C" fn pmo_p_calloc(nmemb: usize, size: usize) -> *mut c_void {
    entry(std::ptr::null_mut(), || {
        heap::calloc(reg(), nmemb, size).map(|a| a as *mut c_void)
    })
}

/// `void *pmo_p_realloc(void *ptr, size_t size)`: see `pmo.h`.
#[no_mangle]
pub extern "C" fn pmo_p_realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
    entry(std::ptr::null_mut(), || {
        heap::realloc(reg(), ptr as usize, size).map(|a| a as *mut c_void)
    })
}

/// `int pmo_p_free(void *ptr)`: see `pmo.h`.
#[no_mangle]
pub extern "C" fn pmo_p_free(ptr: *mut c_void) -> c_int {
    entry(-1, || heap::free(reg(), ptr as usize).map(|()| 0))
}

/// `size_t pmo_p_sizeof(void *ptr)`: see `pmo.h`.
#[no_mangle]
pub extern "C" fn pmo_p_sizeof(ptr: *mut c_void) -> usize {
    entry(0, || heap::usable_size(reg(), ptr as usize))
}

/// `int pmo_p_persist(void)`: see `pmo.h`.
#[no_mangle]
pub extern "C" fn pmo_p_persist() -> c_int {
    entry(-1, || heap::persist(reg()).map(|_| 0))
}

/// `void *pmo_p_get_root(void)`: see `pmo.h`.
#[no_mangle]
pub extern "C" fn pmo_p_get_root() -> *mut c_void {
    entry(std::ptr::null_mut(), || {
        heap::root(&*heap::default_heap(reg())?).map(|a| a as *mut c_void)
    })
}

/// `int pmo_p_set_root(void *ptr)`: see `pmo.h`.
#[no_mangle]
pub extern "C" fn pmo_p_set_root(ptr: *mut c_void) -> c_int {
    entry(-1, || {
        heap::set_root(&*heap::default_heap(reg())?, ptr as usize).map(|()| 0)
    })
}

/// `int pmo_heap_open(const char *name, const char *key, uint64_t create_size,
/// pmo_heap **heap_out)`: see `pmo.h`.
///
/// # Safety
/// `name` and `key` are NULL or valid NUL-terminated strings; `heap_out` is NULL or points to
/// writable storage for one pointer.
#[no_mangle]
pub unsafe extern "C" fn pmo_heap_open(
    name: *const c_char,
    key: *const c_char,
    create_size: u64,
    heap_out: *mut *mut PmoHeapHandle,
) -> c_int {
    entry_code(|| {
        if heap_out.is_null() {
            return Err(CapiError::Invalid("heap_out is NULL".into()));
        }
        // SAFETY: the caller passes valid C strings (or NULL, rejected).
        let (n, k) = unsafe { (c_str(name, "name")?, c_key(key)) };
        let start = reg().heap_open(n, k, create_size)?;
        // SAFETY: non-null (checked) and writable by the caller's contract.
        unsafe { *heap_out = start as *mut PmoHeapHandle };
        Ok(0)
    })
}

/// `pmo_heap *pmo_heap_default(void)`: see `pmo.h`.
#[no_mangle]
pub extern "C" fn pmo_heap_default() -> *mut PmoHeapHandle {
    entry(std::ptr::null_mut(), || {
        heap::default_heap(reg()).map(|h| h.addr() as *mut PmoHeapHandle)
    })
}

/// `int pmo_heap_close(pmo_heap *heap)`: see `pmo.h`.
#[no_mangle]
pub extern "C" fn pmo_heap_close(h: *mut PmoHeapHandle) -> c_int {
    entry_code(|| {
        heap_handle(h)?;
        reg().detach(h as usize).map(|()| 0)
    })
}

/// `void *pmo_heap_alloc(pmo_heap *heap, size_t size, size_t align)`: see `pmo.h`.
#[no_mangle]
pub extern "C" fn pmo_heap_alloc(h: *mut PmoHeapHandle, size: usize, align: usize) -> *mut c_void {
    entry(std::ptr::null_mut(), || {
        heap::alloc(&*heap_handle(h)?, size, align).map(|a| a as *mut c_void)
    })
}

/// `void *pmo_heap_realloc(pmo_heap *heap, void *ptr, size_t size)`: see `pmo.h`.
#[no_mangle]
pub extern "C" fn pmo_heap_realloc(
    h: *mut PmoHeapHandle,
    ptr: *mut c_void,
    size: usize,
) -> *mut c_void {
    entry(std::ptr::null_mut(), || {
        heap::realloc_in(&*heap_handle(h)?, ptr as usize, size).map(|a| a as *mut c_void)
    })
}

/// `int pmo_heap_free(pmo_heap *heap, void *ptr)`: see `pmo.h`.
#[no_mangle]
pub extern "C" fn pmo_heap_free(h: *mut PmoHeapHandle, ptr: *mut c_void) -> c_int {
    entry_code(|| heap::free_in(&*heap_handle(h)?, ptr as usize).map(|()| 0))
}

/// `size_t pmo_heap_usable_size(pmo_heap *heap, void *ptr)`: see `pmo.h`.
#[no_mangle]
pub extern "C" fn pmo_heap_usable_size(h: *mut PmoHeapHandle, ptr: *mut c_void) -> usize {
    entry(0, || heap::usable_size_in(&*heap_handle(h)?, ptr as usize))
}

/// `int64_t pmo_heap_psync(pmo_heap *heap, pmo_psync_stats *stats)`: see `pmo.h`.
///
/// # Safety
/// `stats` is NULL or points to writable storage for a `pmo_psync_stats`.
#[no_mangle]
pub unsafe extern "C" fn pmo_heap_psync(h: *mut PmoHeapHandle, stats: *mut PmoPsyncStats) -> i64 {
    entry_code(|| {
        let s = heap_handle(h)?.psync()?;
        if !stats.is_null() {
            // SAFETY: non-null and writable by the caller's contract.
            unsafe { *stats = psync_stats(&s) };
        }
        i64::try_from(s.pages).map_err(|_| CapiError::Internal("page count overflow".into()))
    })
}

fn psync_stats(s: &pmo_store::CommitStats) -> PmoPsyncStats {
    PmoPsyncStats {
        pages: s.pages,
        bytes_persisted: s.bytes_persisted,
        elapsed_ns: s.elapsed_ns,
        seq: s.seq,
    }
}

/// `void *pmo_heap_root(pmo_heap *heap)`: see `pmo.h`.
#[no_mangle]
pub extern "C" fn pmo_heap_root(h: *mut PmoHeapHandle) -> *mut c_void {
    entry(std::ptr::null_mut(), || {
        heap::root(&*heap_handle(h)?).map(|a| a as *mut c_void)
    })
}

/// `int pmo_heap_set_root(pmo_heap *heap, void *ptr)`: see `pmo.h`.
#[no_mangle]
pub extern "C" fn pmo_heap_set_root(h: *mut PmoHeapHandle, ptr: *mut c_void) -> c_int {
    entry_code(|| heap::set_root(&*heap_handle(h)?, ptr as usize).map(|()| 0))
}

/// `int64_t pmo_heap_foreach(pmo_heap *heap, visit, void *ctx)`: see `pmo.h`.
///
/// # Safety
/// `visit` is NULL or a function that is safe to call with each live block, its usable size
/// and `ctx`.
#[no_mangle]
pub unsafe extern "C" fn pmo_heap_foreach(
    h: *mut PmoHeapHandle,
    visit: Option<PmoHeapVisit>,
    ctx: *mut c_void,
) -> i64 {
    entry_code(|| {
        let Some(visit) = visit else {
            return Err(CapiError::Invalid("visit is NULL".into()));
        };
        // The snapshot is taken under the heap's locks and visited without any lock held, so
        // the callback may call libpmo (free a block, allocate, psync).
        let blocks = heap::allocations(&*heap_handle(h)?)?;
        let mut visited: i64 = 0;
        for (addr, usable) in blocks {
            visited += 1;
            // SAFETY: `visit` is callable with these arguments by the caller's contract.
            if unsafe { visit(addr as *mut c_void, usable, ctx) } != 0 {
                break;
            }
        }
        Ok(visited)
    })
}

/// `int pmo_heap_check(pmo_heap *heap)`: see `pmo.h`.
#[no_mangle]
pub extern "C" fn pmo_heap_check(h: *mut PmoHeapHandle) -> c_int {
    entry_code(|| heap::check(&*heap_handle(h)?).map(|()| 0))
}

//! The userfaultfd mechanism: demand fill with `UFFD_FEATURE_SIGBUS` + `UFFDIO_COPY`; dirty
//! tracking with `UFFD_FEATURE_WP_ASYNC` + `PAGEMAP_SCAN` ([`DirtyTracking::Scan`]) or with
//! synchronous write-protect faults + a bitmap ([`DirtyTracking::Fault`]).
//!
//! Owns: a share of the process's userfaultfd for its feature set ([`process_uffd`]), with the
//! view's range registered for missing pages (and for write-protect on writable views), a share of the process's one descriptor of `/proc/self/pagemap` (scan
//! tracking; opened once per process, see [`self_pagemap`]), the dirty bitmap
//! (fault tracking) and an advisory "present" bitmap.
//!
//! How a fault is served: the view is anonymous private memory (`MAP_PRIVATE | MAP_ANONYMOUS`).
//! A first touch of a missing page makes the kernel send `SIGBUS` (`BUS_ADRERR`) to the faulting
//! thread; the handler fills a page buffer on a fill stack and installs it with `UFFDIO_COPY`.
//! On a writable view the page is installed write-protected (`UFFDIO_COPY_MODE_WP`) unless the
//! first touch was itself a write (x86 page-fault error code), in which case it is installed
//! writable and is already "written".
//!
//! Scan tracking: later writes to a protected page are resolved by the kernel alone (`WP_ASYNC`),
//! which clears the protection; `PAGEMAP_SCAN` with `PM_SCAN_WP_MATCHING` then reports exactly
//! those pages and protects them again, atomically per page-table entry, in one system call.
//! Fault tracking: a write to a protected page raises `SIGBUS` on a present page (error code
//! bit 0); the handler un-protects the page, then sets its dirty bit; `collect_dirty` clears bits,
//! then protects the reported pages (see `collect_bitmap` for why this order loses nothing).
//!
//! Races: two threads faulting on the same page both fill; the second `UFFDIO_COPY` fails with
//! `EEXIST`, which means another thread won, and is success. No state is kept per page on the
//! fault path except the advisory present bit and the dirty bit, so nothing can be left
//! half-done.
//!
//! Caveat: with `UFFD_FEATURE_SIGBUS` (and with `UFFD_USER_MODE_ONLY`), a kernel access to a
//! missing page (a `read(2)` into the view) fails with `EFAULT` instead of filling, and so does
//! a kernel write to a protected page with fault tracking: callers prefault such ranges
//! ([`super::View::prefault`], [`super::View::prefault_for_write`]).
#![allow(unsafe_code)] // UFFDIO_COPY from raw addresses and madvise on the view.

mod twin;

use std::ops::Range;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::bits::PageBits;
use super::fault::{self, FaultKind, Outcome};
use super::shared::{map_view, Shared, StatCounters};
use super::sys::{
    self, PageRegion, PmScanArg, UffdioApi, UffdioCopy, UffdioRange, UffdioRegister,
    UffdioWriteprotect,
};
use super::types::{DirtyTracking, Mechanism, PageSource, ViewError, ViewOptions, PAGE_SIZE};

/// Features every userfaultfd of a view asks for.
const FEATURES: u64 = sys::UFFD_FEATURE_SIGBUS;
/// Further features of views with [`DirtyTracking::Scan`].
const FEATURES_SCAN: u64 = sys::UFFD_FEATURE_WP_ASYNC | sys::UFFD_FEATURE_WP_UNPOPULATED;
/// Pages filled and copied per `UFFDIO_COPY` by `fill_range`.
const BATCH_PAGES: usize = 64;
/// Retries of `UFFDIO_COPY` on `EAGAIN` (the address space was changing) before giving up.
const COPY_RETRIES_MAX: u32 = 10_000;
/// Clean pages a single `UFFDIO_WRITEPROTECT` of `collect_dirty` may span between two dirty
/// pages. Measured here: about 1.5 µs per call plus about 0.1 µs per page covered, so a gap of
/// up to 8 pages is cheaper to cover than to split.
const PROTECT_GAP_PAGES: u64 = 8;
/// Regions per `PAGEMAP_SCAN` call; the scan resumes where a full vector stopped.
const SCAN_REGIONS: usize = 128;
/// Runs of at least this many present pages are scanned on the kernel's fast path (see
/// [`scan_ranges`]).
const SCAN_FAST_MIN_PAGES: u64 = 512;

/// Per-view state of the userfaultfd mechanism.
pub(crate) struct UffdState {
    uffd: Arc<OwnedFd>,
    tracking: DirtyTracking,
    /// `/proc/self/pagemap` (writable views with [`DirtyTracking::Scan`]), shared by the views.
    pagemap: Option<Arc<OwnedFd>>,
    present: PageBits,
    /// Pages written since the last collect ([`DirtyTracking::Fault`] and
    /// [`DirtyTracking::Twin`]; empty otherwise).
    dirty: PageBits,
    /// Hot pages and their twins (writable views with [`DirtyTracking::Twin`]).
    twins: Option<twin::Twins>,
    /// Largest fault-around window, pages ([`set_fault_around`]; 1 = off, the default).
    around_limit: AtomicUsize,
    /// Current fault-around window (see [`around_window`]).
    around: AtomicUsize,
}

impl UffdState {
    pub(crate) fn is_present(&self, page: u64) -> bool {
        self.present.get(page)
    }

    pub(crate) fn tracking(&self) -> DirtyTracking {
        self.tracking
    }

    pub(crate) fn twins(&self) -> Option<&twin::Twins> {
        self.twins.as_ref()
    }

    /// Whether writes to protected pages are tracked by faults to the handler (writable view,
    /// `Fault` or `Twin` tracking).
    fn fault_tracked(&self, shared: &Shared) -> bool {
        shared.writable && matches!(self.tracking, DirtyTracking::Fault | DirtyTracking::Twin)
    }

    /// Whether the dirty bitmap is in use (writable view, `Fault` or `Declared` tracking).
    fn bitmap_tracked(&self, shared: &Shared) -> bool {
        shared.writable && self.tracking != DirtyTracking::Scan
    }

    /// Whether pages are write-protected until written (writable view, `Scan` or `Fault`;
    /// `Declared` views are registered for missing pages only and install pages writable).
    fn write_protects(&self, shared: &Shared) -> bool {
        shared.writable && self.tracking != DirtyTracking::Declared
    }
}

#[repr(C, align(64))]
struct PageBuf([u8; PAGE_SIZE]);

fn unsupported(why: String) -> ViewError {
    ViewError::Unsupported {
        mechanism: Mechanism::Userfaultfd,
        why,
    }
}

/// Open a userfaultfd: plain (privileged or `vm.unprivileged_userfaultfd=1`), then user-mode only
/// (any user), then through `/dev/userfaultfd`.
fn open_uffd() -> Result<OwnedFd, ViewError> {
    let first = match sys::userfaultfd(0) {
        Ok(fd) => return Ok(fd),
        Err(e) => e,
    };
    if let Ok(fd) = sys::userfaultfd(sys::UFFD_USER_MODE_ONLY) {
        return Ok(fd);
    }
    sys::userfaultfd_from_device().map_err(|dev| {
        unsupported(format!(
            "userfaultfd(2): {}; /dev/userfaultfd: {}",
            std::io::Error::from_raw_os_error(first),
            std::io::Error::from_raw_os_error(dev)
        ))
    })
}

/// This process's userfaultfd for `features`, opened and set up (`UFFDIO_API`) at the first
/// view that asks for them and shared by every later one. A userfaultfd per view cost a small
/// PMO's session an anonymous inode at attach and, at detach, a `close` whose release walks
/// every mapping of the process (`userfaultfd_release_all`; ~12% of a 16 KiB session's profile,
/// docs/faults.md, "Small views"). Nothing is read from it (faults arrive as `SIGBUS`), so one
/// descriptor serves any number of views: each view's range is registered with it, and its
/// `munmap` ends that registration. The descriptor is bound to the address space that opened it,
/// so the cache is keyed by pid: a fork child opens its own.
fn process_uffd(features: u64) -> Result<Arc<OwnedFd>, ViewError> {
    type Cache = Vec<(u32, u64, Arc<OwnedFd>)>;
    static CACHE: std::sync::Mutex<Cache> = std::sync::Mutex::new(Vec::new());
    let pid = crate::lock::pid();
    let mut c = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    // A fork child drops its parent's entries (its own copies of the descriptors only).
    c.retain(|(p, _, _)| *p == pid);
    if let Some((_, _, fd)) = c.iter().find(|(_, f, _)| *f == features) {
        return Ok(fd.clone());
    }
    let uffd = open_uffd()?;
    let mut api = UffdioApi {
        api: sys::UFFD_API,
        features,
        ioctls: 0,
    };
    // SAFETY: UFFDIO_API takes a uffdio_api, which `api` is.
    unsafe { sys::ioctl(uffd.as_raw_fd(), sys::UFFDIO_API, &mut api) }.map_err(|e| {
        unsupported(format!(
            "UFFDIO_API: {}",
            std::io::Error::from_raw_os_error(e)
        ))
    })?;
    if api.features & features != features {
        return Err(unsupported(format!(
            "kernel lacks features {:#x}",
            features & !api.features
        )));
    }
    let uffd = Arc::new(uffd);
    c.push((pid, features, uffd.clone()));
    Ok(uffd)
}

/// Create the state and mapping of a userfaultfd view (not yet registered with the handler).
/// The caller puts the two halves together in a `ViewState`, whose drop unmaps the view.
pub(crate) fn create(
    opts: &ViewOptions,
    source: Arc<dyn PageSource>,
    tracking: DirtyTracking,
) -> Result<(Shared, UffdState), ViewError> {
    let scan = opts.writable && tracking == DirtyTracking::Scan;
    let features = FEATURES | if scan { FEATURES_SCAN } else { 0 };
    let uffd = process_uffd(features)?;

    let prot = if opts.writable {
        libc::PROT_READ | libc::PROT_WRITE
    } else {
        libc::PROT_READ
    };
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
    let base = map_view(opts, prot, flags, -1, 0)?;
    let guard = UnmapOnError {
        addr: base,
        len: opts.len_bytes,
    };

    // SAFETY: the range is the mapping we just created; advice only changes kernel policy.
    unsafe {
        // No transparent huge pages: dirty tracking and fills are per 4 KiB page.
        let _ = sys::madvise(base, opts.len_bytes, libc::MADV_NOHUGEPAGE);
        // A fork child must not inherit a view whose faults nobody would serve.
        sys::madvise(base, opts.len_bytes, libc::MADV_DONTFORK).map_err(|errno| ViewError::Os {
            op: "madvise(MADV_DONTFORK)",
            errno,
        })?;
        // Under mlockall(MCL_FUTURE) the kernel populated the new mapping with zero pages
        // already: they would never fault, and the application would read zeros instead of
        // the PMO. Unlock and drop them so that every page starts missing.
        let _ = sys::munlock(base, opts.len_bytes);
        sys::madvise(base, opts.len_bytes, libc::MADV_DONTNEED).map_err(|errno| ViewError::Os {
            op: "madvise(MADV_DONTNEED)",
            errno,
        })?;
    }

    let mode = sys::UFFDIO_REGISTER_MODE_MISSING
        | if opts.writable && tracking != DirtyTracking::Declared {
            sys::UFFDIO_REGISTER_MODE_WP
        } else {
            0
        };
    let mut reg = UffdioRegister {
        range: UffdioRange {
            start: base as u64,
            len: opts.len_bytes as u64,
        },
        mode,
        ioctls: 0,
    };
    // SAFETY: UFFDIO_REGISTER takes a uffdio_register describing our own mapping.
    unsafe { sys::ioctl(uffd.as_raw_fd(), sys::UFFDIO_REGISTER, &mut reg) }.map_err(|errno| {
        ViewError::Os {
            op: "UFFDIO_REGISTER",
            errno,
        }
    })?;

    let pagemap = if scan { Some(self_pagemap()?) } else { None };

    let pages = (opts.len_bytes / PAGE_SIZE) as u64;
    // Without room for the twin area (strict overcommit), twin tracking is fault tracking.
    let twins = if opts.writable && twin::uses_twins(tracking) {
        twin::Twins::new(opts.len_bytes, pages).ok()
    } else {
        None
    };
    std::mem::forget(guard);
    let shared = Shared {
        owner_pid: crate::lock::pid(),
        base,
        len_bytes: opts.len_bytes,
        pages,
        writable: opts.writable,
        mechanism: Mechanism::Userfaultfd,
        source,
        stats: StatCounters::default(),
    };
    let st = UffdState {
        uffd,
        tracking,
        pagemap,
        present: PageBits::new(pages),
        dirty: PageBits::new(if scan || !opts.writable { 0 } else { pages }),
        twins,
        around_limit: AtomicUsize::new(1),
        around: AtomicUsize::new(1),
    };
    Ok((shared, st))
}

/// This process's descriptor of `/proc/self/pagemap`, opened at the first scan-tracked view
/// and shared by every later one: opening it per attach (a procfs path walk and a close at
/// detach) was a measurable share of a small PMO's session. The descriptor is bound to the
/// address space of the process that opened it, so a fork child (whose views are new: the
/// parent's are `MADV_DONTFORK`) opens its own: the cache is keyed by pid. `PAGEMAP_SCAN` keeps
/// no state in the open file, so concurrent scans of distinct views through it are fine.
fn self_pagemap() -> Result<Arc<OwnedFd>, ViewError> {
    static CACHE: std::sync::Mutex<Option<(u32, Arc<OwnedFd>)>> = std::sync::Mutex::new(None);
    let pid = crate::lock::pid();
    let mut c = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((p, fd)) = &*c {
        if *p == pid {
            return Ok(fd.clone());
        }
    }
    let f = std::fs::File::open("/proc/self/pagemap").map_err(|e| ViewError::Os {
        op: "open /proc/self/pagemap",
        errno: e.raw_os_error().unwrap_or(libc::EIO),
    })?;
    let fd = Arc::new(OwnedFd::from(f));
    *c = Some((pid, fd.clone()));
    Ok(fd)
}

struct UnmapOnError {
    addr: usize,
    len: usize,
}

impl Drop for UnmapOnError {
    fn drop(&mut self) {
        // SAFETY: only alive on the error path of `create`, when nothing else knows the mapping.
        unsafe { sys::unmap(self.addr, self.len) };
    }
}

/// Outcome of one `UFFDIO_COPY` attempt loop.
enum Copied {
    /// All `len` bytes installed.
    All,
    /// The first page was already present; `done` bytes before it were installed.
    Exists { done: usize },
    /// Failure with errno; `done` bytes at the start were installed.
    Failed { errno: i32, done: usize },
}

/// `UFFDIO_COPY` of `len` bytes from `src` to `dst` (async-signal-safe). `EAGAIN` and `ENOENT`
/// (the address space was changing) are retried, up to [`COPY_RETRIES_MAX`] times.
///
/// # Safety
/// `src..src+len` must be readable; `dst..dst+len` must lie in the view registered on `fd`.
unsafe fn copy(fd: RawFd, dst: usize, src: *const u8, len: usize, mode: u64) -> Copied {
    // SAFETY: forwarded.
    unsafe { copy_with(fd, dst, src, len, mode, COPY_RETRIES_MAX) }
}

/// [`copy`] with at most `retries_max` retries: fault-around gives up at once on pages the
/// kernel will not fill (a neighbour in another mapping, e.g. after an `mprotect` split).
///
/// # Safety
/// As [`copy`].
unsafe fn copy_with(
    fd: RawFd,
    dst: usize,
    src: *const u8,
    len: usize,
    mode: u64,
    retries_max: u32,
) -> Copied {
    let mut done = 0usize;
    let mut retries = 0u32;
    while done < len {
        let mut arg = UffdioCopy {
            dst: (dst + done) as u64,
            src: src as u64 + done as u64,
            len: (len - done) as u64,
            mode,
            copy: 0,
        };
        // SAFETY: forwarded to the caller: a uffdio_copy with a readable source and a
        // destination inside our registered range.
        let r = unsafe { sys::ioctl(fd, sys::UFFDIO_COPY, &mut arg) };
        match r {
            Ok(()) => return Copied::All,
            Err(errno) => {
                if arg.copy > 0 {
                    done += arg.copy as usize;
                    continue;
                }
                match errno {
                    libc::EEXIST => return Copied::Exists { done },
                    libc::EAGAIN | libc::ENOENT if retries < retries_max => {
                        retries += 1;
                        sys::yield_cpu();
                    }
                    _ => return Copied::Failed { errno, done },
                }
            }
        }
    }
    Copied::All
}

/// `UFFDIO_WRITEPROTECT` of `len` bytes at `addr` (async-signal-safe); `protect` false
/// un-protects. Returns errno on failure.
fn writeprotect(fd: RawFd, addr: usize, len: usize, protect: bool) -> Result<(), i32> {
    // The kernel refuses WP together with DONTWAKE (protecting wakes nobody anyway).
    let mode = if protect {
        sys::UFFDIO_WRITEPROTECT_MODE_WP
    } else {
        sys::UFFDIO_WRITEPROTECT_MODE_DONTWAKE
    };
    let mut retries = 0u32;
    loop {
        let mut arg = UffdioWriteprotect {
            range: UffdioRange {
                start: addr as u64,
                len: len as u64,
            },
            mode,
        };
        // SAFETY: a uffdio_writeprotect describing a range of our registered view; it changes
        // page protection only.
        match unsafe { sys::ioctl(fd, sys::UFFDIO_WRITEPROTECT, &mut arg) } {
            Ok(()) => return Ok(()),
            Err(libc::EAGAIN) if retries < COPY_RETRIES_MAX => {
                retries += 1;
                sys::yield_cpu();
            }
            Err(errno) => return Err(errno),
        }
    }
}

/// Serve a fault on `page` (signal handler context): a missing page, or with
/// [`DirtyTracking::Fault`] a write to a write-protected page.
pub(crate) fn service(shared: &Shared, st: &UffdState, page: u64, kind: FaultKind) -> Outcome {
    if st.fault_tracked(shared) && kind.present == Some(true) {
        shared.count_fault(true);
        return unprotect_written(shared, st, page);
    }
    let write_first = shared.writable && kind.write == Some(true);
    shared.count_fault(write_first);
    super::stack::on_fill_stack(|| fill_and_copy(shared, st, page, write_first, kind))
}

/// A write to a protected page ([`DirtyTracking::Fault`]): un-protect it, then mark it dirty.
/// In this order a concurrent `collect_dirty` (which clears bits, then protects) either sees
/// the bit and protects the page after this write, or misses it and reports it next time.
fn unprotect_written(shared: &Shared, st: &UffdState, page: u64) -> Outcome {
    if writeprotect(
        st.uffd.as_raw_fd(),
        shared.page_addr(page),
        PAGE_SIZE,
        false,
    )
    .is_err()
    {
        fault::fatal(
            "fault service failed",
            shared.source.label(),
            page,
            "UFFDIO_WRITEPROTECT failed",
        );
    }
    st.dirty.set(page);
    Outcome::Handled
}

/// The most pages one fault may fill (page buffers on the 256 KiB fill stack).
pub(crate) const AROUND_MAX: usize = 16;

/// Set the largest fault-around window of a view (pages, faulting page included; 1 = off).
pub(crate) fn set_fault_around(st: &UffdState, pages: usize) -> usize {
    let w = pages.clamp(1, AROUND_MAX);
    st.around_limit.store(w, Ordering::Relaxed);
    w
}

/// How many pages to fill for a missing-page fault on `page` (itself included), from the
/// observed pattern: a fault right after its predecessor was filled doubles the window (up to
/// the view's limit), any other fault resets it to one page. As the kernel's own fault-around,
/// but only on sequential runs, because each page filled here costs a decryption.
///
/// A view of at most one window (`pages <= limit`: a small PMO, such as Filebench's 16 KiB
/// files) is filled whole at its first fault whatever the pattern: the few decryptions it may
/// waste cost less than the further trips (a SIGBUS, a fill and a copy each, ~4 µs) that a
/// session touching all of it would otherwise take (`docs/faults.md`, "Small views").
fn around_window(st: &UffdState, page: u64, pages: u64) -> usize {
    let limit = st.around_limit.load(Ordering::Relaxed);
    if limit <= 1 {
        return 1;
    }
    if pages <= limit as u64 {
        return limit;
    }
    let sequential = page > 0 && st.present.get(page - 1);
    let w = if sequential {
        (st.around.load(Ordering::Relaxed).max(1) * 2).min(limit)
    } else {
        1
    };
    st.around.store(w, Ordering::Relaxed);
    w
}

/// Page buffers on the fill stack, left uninitialised until used (zeroing 64 KiB for every
/// fault would cost more than the fill of one page).
struct Bufs(std::mem::MaybeUninit<[PageBuf; AROUND_MAX]>);

impl Bufs {
    /// Buffer `i`, zeroed.
    fn page(&mut self, i: usize) -> &mut [u8; PAGE_SIZE] {
        assert!(i < AROUND_MAX);
        // SAFETY: buffer `i` lies inside the array; it is zeroed before a reference to it is
        // made, so the reference points to initialised bytes.
        unsafe {
            let p = self.0.as_mut_ptr().cast::<PageBuf>().add(i);
            std::ptr::write_bytes(p, 0, 1);
            &mut (*p).0
        }
    }
    /// Buffer `i` as filled.
    ///
    /// # Safety
    /// [`Bufs::page`] was called for `i` (the buffer is initialised).
    unsafe fn filled(&self, i: usize) -> &[u8; PAGE_SIZE] {
        // SAFETY: in bounds (checked by `page` before) and initialised (the contract).
        unsafe { &(*self.0.as_ptr().cast::<PageBuf>().add(i)).0 }
    }
    fn ptr(&self, i: usize) -> *const u8 {
        self.0.as_ptr().cast::<PageBuf>().wrapping_add(i).cast()
    }
}

/// Fill `page` (and, on a sequential run, up to `around_window - 1` absent pages after it)
/// into buffers on the (fill) stack and install them. Never returns on failure of `page`
/// itself; a neighbour that fails to fill or install is simply left absent (its own fault
/// reports it).
fn fill_and_copy(
    shared: &Shared,
    st: &UffdState,
    page: u64,
    write_first: bool,
    kind: FaultKind,
) -> Outcome {
    let mut bufs = Bufs(std::mem::MaybeUninit::uninit());
    if let Err(e) = shared.fill_page(page, bufs.page(0)) {
        fault::fatal("integrity error", shared.source.label(), page, e.reason);
    }
    // Twin tracking: the fill is the page's committed contents, so keep it as the twin and
    // install the page writable (hot); collect compares it. Claimed before the install, so the
    // twin is in place before any write can land.
    let claim = |p: u64, i: usize, bufs: &Bufs| match &st.twins {
        Some(t) if t.claim(p) => {
            // SAFETY: buffer `i` was filled (through `Bufs::page`) before every call.
            t.store(p, unsafe { bufs.filled(i) });
            true
        }
        _ => false,
    };
    let hot = claim(page, 0, &bufs);
    // Install write-protected so the first write is tracked, unless this fault is that write
    // or the page is hot.
    let wp = if st.write_protects(shared) && !write_first && !hot {
        sys::UFFDIO_COPY_MODE_WP
    } else {
        0
    };
    // Fault-around: the absent pages after `page`, as long as they fill and (twin tracking)
    // can be hot, each installed clean: write-protected, or hot.
    let window = around_window(st, page, shared.pages);
    let mut more = 0usize;
    let mut more_hot = false;
    while more + 1 < window {
        let q = page + 1 + more as u64;
        if q >= shared.pages || st.present.get(q) {
            break;
        }
        if shared.fill_page(q, bufs.page(more + 1)).is_err() {
            break;
        }
        let h = claim(q, more + 1, &bufs);
        if more == 0 {
            more_hot = h;
        } else if h != more_hot {
            if h {
                release(st, q);
            }
            break;
        }
        more += 1;
    }
    let wp_more = if st.write_protects(shared) && !more_hot {
        sys::UFFDIO_COPY_MODE_WP
    } else {
        0
    };
    let fd = st.uffd.as_raw_fd();
    // One UFFDIO_COPY for all when the modes agree, else the faulting page first.
    let together = more > 0 && wp == wp_more;
    let first_len = if together { 1 + more } else { 1 };
    // SAFETY: the buffers are readable pages on our stack; the destination pages lie inside the
    // view (q < shared.pages checked above).
    let copy_main = || unsafe {
        copy(
            fd,
            shared.page_addr(page),
            bufs.ptr(0),
            PAGE_SIZE,
            wp | sys::UFFDIO_COPY_MODE_DONTWAKE,
        )
    };
    // (result for `page`, neighbours installed with it)
    let (r, with_main) = if together {
        // SAFETY: as above, for `1 + more` pages.
        let r = unsafe {
            copy_with(
                fd,
                shared.page_addr(page),
                bufs.ptr(0),
                first_len * PAGE_SIZE,
                wp | sys::UFFDIO_COPY_MODE_DONTWAKE,
                0,
            )
        };
        match r {
            Copied::All => (Copied::All, more),
            Copied::Exists { done } => (r, (done / PAGE_SIZE).saturating_sub(1)),
            // Some pages went in before the failure: `page` is the first of them.
            Copied::Failed { done, .. } if done >= PAGE_SIZE => (Copied::All, done / PAGE_SIZE - 1),
            // Nothing went in: `page` alone, with the usual retries.
            Copied::Failed { .. } => (copy_main(), 0),
        }
    } else {
        (copy_main(), 0)
    };
    let outcome = match r {
        Copied::All => {
            st.present.set(page);
            if write_first && st.fault_tracked(shared) && !hot {
                st.dirty.set(page);
            }
            Outcome::Handled
        }
        Copied::Exists { done } if done > 0 => {
            // `page` is in, a neighbour was not absent after all: keep what went in.
            st.present.set(page);
            if write_first && st.fault_tracked(shared) && !hot {
                st.dirty.set(page);
            }
            Outcome::Handled
        }
        Copied::Exists { .. } => {
            st.present.set(page);
            // Without an error code, a fault on a present page of a fault-tracked view may have
            // been a write to a protected page (or a race with another filler: then this only
            // reports one page too many).
            if kind.present.is_none() && st.fault_tracked(shared) {
                around_settle(st, page, more, 0);
                return unprotect_written(shared, st, page);
            }
            Outcome::Handled
        }
        Copied::Failed { .. } => fault::fatal(
            "fault service failed",
            shared.source.label(),
            page,
            "UFFDIO_COPY failed",
        ),
    };
    // Neighbours: how many went in with the faulting page, or in a copy of their own (every
    // page installed must be counted: a hot one keeps its claim, else its writes would go
    // untracked).
    let installed = if together || more == 0 {
        with_main
    } else {
        // SAFETY: as above, for the neighbour buffers and pages.
        match unsafe {
            copy_with(
                fd,
                shared.page_addr(page + 1),
                bufs.ptr(1),
                more * PAGE_SIZE,
                wp_more | sys::UFFDIO_COPY_MODE_DONTWAKE,
                0,
            )
        } {
            Copied::All => more,
            Copied::Exists { done } | Copied::Failed { done, .. } => done / PAGE_SIZE,
        }
    };
    around_settle(st, page, more, installed);
    outcome
}

/// After fault-around on `page`: the first `installed` of the `more` neighbours are present;
/// the others were not installed by this fault, so they give their hot claims back.
fn around_settle(st: &UffdState, page: u64, more: usize, installed: usize) {
    for i in 0..more {
        let q = page + 1 + i as u64;
        if i < installed {
            st.present.set(q);
        } else {
            release(st, q);
        }
    }
}

/// Give back the hot claim of `page` (twin tracking; a no-op otherwise).
fn release(st: &UffdState, page: u64) {
    if let Some(t) = &st.twins {
        t.release(page);
    }
}

/// Install `data` as `page` if absent; `dirty` installs it writable (reported by the next
/// collect), otherwise clean.
pub(crate) fn install(
    shared: &Shared,
    st: &UffdState,
    page: u64,
    data: &[u8; PAGE_SIZE],
    dirty: bool,
) -> Result<bool, ViewError> {
    let wp = if st.write_protects(shared) && !dirty {
        sys::UFFDIO_COPY_MODE_WP
    } else {
        0
    };
    // SAFETY: `data` is a readable page; the destination page is inside the view.
    match unsafe {
        copy(
            st.uffd.as_raw_fd(),
            shared.page_addr(page),
            data.as_ptr(),
            PAGE_SIZE,
            wp | sys::UFFDIO_COPY_MODE_DONTWAKE,
        )
    } {
        Copied::All => {
            st.present.set(page);
            if dirty && st.bitmap_tracked(shared) {
                st.dirty.set(page);
            }
            Ok(true)
        }
        Copied::Exists { .. } => {
            st.present.set(page);
            Ok(false)
        }
        Copied::Failed { errno, .. } => Err(ViewError::Os {
            op: "UFFDIO_COPY",
            errno,
        }),
    }
}

/// Fill the absent pages of `pages` through the source, in batches of [`BATCH_PAGES`].
pub(crate) fn fill_range(
    shared: &Shared,
    st: &UffdState,
    pages: Range<u64>,
    for_write: bool,
) -> Result<(), ViewError> {
    if pages.end > shared.pages {
        return Err(ViewError::PageOutOfRange {
            page: pages.end - 1,
            pages: shared.pages,
        });
    }
    let wp = if st.write_protects(shared) && !for_write {
        sys::UFFDIO_COPY_MODE_WP
    } else {
        0
    };
    let mark_dirty = for_write && st.bitmap_tracked(shared);
    let mut buf = vec![0u8; BATCH_PAGES * PAGE_SIZE];
    let mut page = pages.start;
    while page < pages.end {
        if st.present.get(page) {
            if mark_dirty {
                // Present and maybe protected: open it for the kernel's write and report it.
                unprotect(shared, st, page)?;
                st.dirty.set(page);
            }
            page += 1;
            continue;
        }
        // A run of absent pages, at most BATCH_PAGES long.
        let run_start = page;
        let mut run_len = 0usize;
        let mut failed = None;
        while page < pages.end && run_len < BATCH_PAGES && !st.present.get(page) {
            let dst: &mut [u8; PAGE_SIZE] = (&mut buf
                [run_len * PAGE_SIZE..(run_len + 1) * PAGE_SIZE])
                .try_into()
                .expect("page-sized slice");
            if let Err(e) = shared.fill_page(page, dst) {
                // Install what was filled before the failure, then report it.
                failed = Some(ViewError::Fill {
                    page,
                    reason: e.reason,
                });
                break;
            }
            run_len += 1;
            page += 1;
        }
        let mut done_pages = 0usize;
        while done_pages < run_len {
            let off = done_pages * PAGE_SIZE;
            // SAFETY: `buf[off..run_len*PAGE_SIZE]` is readable; the destination pages are inside
            // the view (checked against shared.pages above).
            let r = unsafe {
                copy(
                    st.uffd.as_raw_fd(),
                    shared.page_addr(run_start) + off,
                    buf.as_ptr().add(off),
                    (run_len - done_pages) * PAGE_SIZE,
                    wp | sys::UFFDIO_COPY_MODE_DONTWAKE,
                )
            };
            match r {
                Copied::All => {
                    for p in done_pages..run_len {
                        st.present.set(run_start + p as u64);
                        if mark_dirty {
                            st.dirty.set(run_start + p as u64);
                        }
                    }
                    done_pages = run_len;
                }
                Copied::Exists { done } => {
                    // Pages before `done` were installed; the next one was already there (a
                    // racing fault installed it, maybe protected: open it too when filling for
                    // a write).
                    let installed = done / PAGE_SIZE;
                    for p in done_pages..done_pages + installed + 1 {
                        st.present.set(run_start + p as u64);
                    }
                    if mark_dirty {
                        let existing = run_start + (done_pages + installed) as u64;
                        unprotect(shared, st, existing)?;
                        for p in done_pages..done_pages + installed + 1 {
                            st.dirty.set(run_start + p as u64);
                        }
                    }
                    done_pages += installed + 1;
                }
                Copied::Failed { errno, .. } => {
                    return Err(ViewError::Os {
                        op: "UFFDIO_COPY",
                        errno,
                    })
                }
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
    }
    Ok(())
}

/// Make a present `page` reported by the next collect: un-protect it (scan tracking then sees
/// it as written) and, with fault or declared tracking, set its bit. With declared tracking
/// this is the whole cost of declaring a write: one atomic OR.
pub(crate) fn mark_dirty(shared: &Shared, st: &UffdState, page: u64) -> Result<(), ViewError> {
    if !st.present.get(page) {
        return Ok(());
    }
    unprotect(shared, st, page)?;
    if st.bitmap_tracked(shared) {
        st.dirty.set(page);
    }
    Ok(())
}

/// Clear the write protection of a present `page` (nothing to do on a view that does not
/// write-protect: declared tracking).
fn unprotect(shared: &Shared, st: &UffdState, page: u64) -> Result<(), ViewError> {
    if !st.write_protects(shared) {
        return Ok(());
    }
    writeprotect(
        st.uffd.as_raw_fd(),
        shared.page_addr(page),
        PAGE_SIZE,
        false,
    )
    .map_err(|errno| ViewError::Os {
        op: "UFFDIO_WRITEPROTECT",
        errno,
    })
}

/// Drop `page`: the next touch faults and fills again.
pub(crate) fn discard(shared: &Shared, st: &UffdState, page: u64) -> Result<(), ViewError> {
    // SAFETY: the page lies inside our private anonymous mapping; discarding its contents is the
    // purpose of the call (callers access views only through raw pointers).
    unsafe { sys::madvise(shared.page_addr(page), PAGE_SIZE, libc::MADV_DONTNEED) }.map_err(
        |errno| ViewError::Os {
            op: "madvise(MADV_DONTNEED)",
            errno,
        },
    )?;
    st.present.clear(page);
    if st.bitmap_tracked(shared) {
        st.dirty.clear(page);
    }
    if let Some(t) = &st.twins {
        // Under the collect lock: a collect never compares a page discarded under its feet.
        // The twin's memory stays (it is reused if the page becomes hot again).
        let _g = t.lock.lock().unwrap_or_else(|p| p.into_inner());
        t.release(page);
    }
    Ok(())
}

/// Report and re-protect the written pages; with twin tracking, `from_twin` gets the reported
/// pages that stay writable (read them from their twins).
pub(crate) fn collect_dirty(
    shared: &Shared,
    st: &UffdState,
    out: &mut Vec<u64>,
    from_twin: &mut Vec<u64>,
) -> Result<(), ViewError> {
    match &st.twins {
        Some(t) => collect_twin(shared, st, t, out, from_twin),
        None if st.bitmap_tracked(shared) => collect_bitmap(shared, st, out),
        None => collect_scan(shared, st, out),
    }
}

/// [`DirtyTracking::Twin`]: report the hot pages that differ from their twins (refreshing the
/// twins: the commit reads them, a snapshot that racing writers cannot change), re-protect the
/// hot pages that did not change, and report the pages the dirty bitmap holds (faulted or
/// declared), keeping them writable with a twin while the cap allows.
///
/// Why no write is lost: a write to a hot page lands either before the compare (reported now,
/// and in the snapshot if before it), or after the snapshot (the page then differs from its
/// twin, or was written back to the very bytes the twin holds, which the commit persisted), or
/// after a cold page's protection (it faults and sets the dirty bit). A write between the
/// compare of an unchanged page and its protection is caught by the compare after protecting.
fn collect_twin(
    shared: &Shared,
    st: &UffdState,
    t: &twin::Twins,
    out: &mut Vec<u64>,
    from_twin: &mut Vec<u64>,
) -> Result<(), ViewError> {
    let mut locked = t.lock.lock().unwrap_or_else(|p| p.into_inner());
    let locked = &mut *locked;
    let first_out = out.len();
    let first_twin = from_twin.len();
    let fd = st.uffd.as_raw_fd();
    let mut marked = Vec::new();
    let _ = st.dirty.drain(|w, mut bits| -> Result<(), ()> {
        while bits != 0 {
            marked.push(w * 64 + bits.trailing_zeros() as u64);
            bits &= bits - 1;
        }
        Ok(())
    });
    // On failure: everything taken is reported again next time (hot pages stay hot and are
    // compared again; marked pages get their bits back).
    let undo = |out: &mut Vec<u64>, from_twin: &mut Vec<u64>, marked: &[u64]| {
        for &p in marked.iter().chain(&out[first_out..]) {
            st.dirty.set(p);
        }
        out.truncate(first_out);
        from_twin.truncate(first_twin);
    };
    // 1. Hot pages.
    let mut cold = Vec::new();
    t.hot.for_each_set(|p| {
        if !st.present.get(p) {
            return; // claimed by a fill that has not installed it yet: not written yet
        }
        let addr = shared.page_addr(p);
        // SAFETY: `p` is present in the live view; racing stores are allowed (see `same`).
        let changed = marked.binary_search(&p).is_ok() || !unsafe { t.same(p, addr) };
        if changed {
            // SAFETY: as above; the twin is ours under the lock.
            unsafe { t.snapshot(p, addr) };
            out.push(p);
            from_twin.push(p);
        } else {
            cold.push(p);
        }
    });
    let compared = first_twin..from_twin.len();
    // 2. Unchanged hot pages go cold: protect each run, compare once more, forget the twins.
    for (first, n) in twin::runs(&cold) {
        let len = n as usize * PAGE_SIZE;
        if let Err(errno) = writeprotect(fd, shared.page_addr(first), len, true) {
            undo(out, from_twin, &marked);
            return Err(ViewError::Os {
                op: "UFFDIO_WRITEPROTECT",
                errno,
            });
        }
    }
    for &p in &cold {
        // SAFETY: present page of the live view (protected now: stable unless a write faults).
        if !unsafe { t.same(p, shared.page_addr(p)) } {
            out.push(p); // written before the protection: read it from the view
        }
        t.release(p);
    }
    t.retire(&mut locked.stale, &cold, |p| {
        st.present.get(p) && !t.hot.get(p)
    });
    // 3. Pages of the bitmap that are not hot: writable now (they faulted or were declared).
    let mut protect: Vec<u64> = Vec::new();
    for &p in &marked {
        if t.hot.get(p) {
            if from_twin[compared.clone()].binary_search(&p).is_err() {
                out.push(p); // hot but not yet compared (installing): read it from the view
            }
            continue;
        }
        out.push(p);
        let again = locked.recent.binary_search(&p).is_ok();
        if again && st.present.get(p) && t.claim(p) {
            // SAFETY: present page of the live view; the twin is ours (claimed, under lock).
            unsafe { t.snapshot(p, shared.page_addr(p)) };
            from_twin.push(p);
        } else {
            protect.push(p);
        }
    }
    let mut group: Option<(u64, u64)> = None;
    for &p in protect.iter().chain(std::iter::once(&u64::MAX)) {
        group = match group {
            Some((start, end)) if p != u64::MAX && p <= end + PROTECT_GAP_PAGES => {
                Some((start, p + 1))
            }
            Some((start, end)) => {
                let len = (end - start) as usize * PAGE_SIZE;
                if let Err(errno) = writeprotect(fd, shared.page_addr(start), len, true) {
                    undo(out, from_twin, &marked);
                    return Err(ViewError::Os {
                        op: "UFFDIO_WRITEPROTECT",
                        errno,
                    });
                }
                (p != u64::MAX).then(|| (p, p + 1))
            }
            None => (p != u64::MAX).then(|| (p, p + 1)),
        };
    }
    out[first_out..].sort_unstable();
    from_twin[first_twin..].sort_unstable();
    locked.recent = protect; // ascending: `marked` is
    Ok(())
}

/// [`DirtyTracking::Fault`]: swap the bitmap words to zero, report the pages, and protect
/// them with one `UFFDIO_WRITEPROTECT` per group of nearby pages. A group spans gaps of up to
/// [`PROTECT_GAP_PAGES`] clean pages: protecting a clean page again is harmless (a page that a
/// handler is un-protecting right now faults once more and is reported next time, because the
/// handler sets its bit before returning), and one call over a gap is far cheaper than a system
/// call per page. On error every page this call took is marked dirty again (a re-marked page
/// that is already protected is simply reported next time).
fn collect_bitmap(shared: &Shared, st: &UffdState, out: &mut Vec<u64>) -> Result<(), ViewError> {
    let first_out = out.len();
    let fd = st.uffd.as_raw_fd();
    // Pages [start, end) to protect with one call; every dirty page in it is already in `out`.
    let mut group: Option<(u64, u64)> = None;
    let protects = st.write_protects(shared);
    let protect = |(start, end): (u64, u64), out: &mut Vec<u64>| -> Result<(), ViewError> {
        if !protects {
            return Ok(());
        }
        let len = (end - start) as usize * PAGE_SIZE;
        writeprotect(fd, shared.page_addr(start), len, true).map_err(|errno| {
            for &p in &out[first_out..] {
                st.dirty.set(p);
            }
            out.truncate(first_out);
            ViewError::Os {
                op: "UFFDIO_WRITEPROTECT",
                errno,
            }
        })
    };
    st.dirty.drain(|w, mut bits| {
        while bits != 0 {
            let page = w * 64 + bits.trailing_zeros() as u64;
            bits &= bits - 1;
            out.push(page);
            group = match group {
                Some((start, end)) if page <= end + PROTECT_GAP_PAGES => Some((start, page + 1)),
                Some(g) => {
                    if let Err(e) = protect(g, out) {
                        // `protect` re-marked what `out` held; the rest of this word too.
                        while bits != 0 {
                            st.dirty.set(w * 64 + bits.trailing_zeros() as u64);
                            bits &= bits - 1;
                        }
                        st.dirty.set(page);
                        return Err(e);
                    }
                    Some((page, page + 1))
                }
                None => Some((page, page + 1)),
            };
        }
        Ok(())
    })?;
    if let Some(g) = group {
        protect(g, out)?;
    }
    Ok(())
}

/// The ranges `collect_scan` walks, ascending: `(first page, end page, fast)`. A run of at
/// least [`SCAN_FAST_MIN_PAGES`] pages that are all present (whole 64-page words of the present
/// bitmap), or a fully present view, is `fast`: the kernel's fast path for `PAGE_IS_WRITTEN` alone tests one bit per
/// entry (about 1 ns instead of 3 ns), but it would report an empty entry as written and put a
/// write-protect marker in it, so it is used only where every entry holds a page. Everything
/// else is walked with the any-of mask (present or swapped), which skips never-touched regions.
/// A page discarded meanwhile (an empty entry in a fast range) is at worst reported written
/// without being so: its commit reads it back through a fill, the same bytes.
fn scan_ranges(present: &PageBits, pages: u64) -> Vec<(u64, u64, bool)> {
    let words = pages.div_ceil(64) as usize;
    let full = |w: usize| {
        let n = (pages - w as u64 * 64).min(64);
        let mask = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
        present.word(w) & mask == mask
    };
    let mut out: Vec<(u64, u64, bool)> = Vec::new();
    let mut push = |first: u64, end: u64, fast: bool| match out.last_mut() {
        Some(last) if last.1 == first && last.2 == fast => last.1 = end,
        _ => out.push((first, end, fast)),
    };
    let mut w = 0;
    while w < words {
        let start = w;
        while w < words && full(w) {
            w += 1;
        }
        if w > start {
            let (first, end) = (start as u64 * 64, (w as u64 * 64).min(pages));
            // A run covering the whole view needs no split: fast whatever its length.
            let whole = start == 0 && w == words;
            push(first, end, whole || end - first >= SCAN_FAST_MIN_PAGES);
        }
        let start = w;
        while w < words && !full(w) {
            w += 1;
        }
        if w > start {
            push(start as u64 * 64, (w as u64 * 64).min(pages), false);
        }
    }
    out
}

/// Whether `PAGEMAP_SCAN`'s fast path reads swap entries right: before Linux 6.10 it tested
/// the present-entry write-protect bit on swap entries too, which could hide a written page
/// that was swapped out (fixed by "fs/proc/task_mmu: fix uffd-wp confusion in
/// pagemap_scan_pmd_entry()"). Older kernels always take the any-of walk.
fn scan_fast_path_sound() -> bool {
    static SOUND: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SOUND.get_or_init(|| sys::kernel_version().is_some_and(|v| v >= (6, 10)))
}

/// [`DirtyTracking::Scan`]: report and re-protect the written pages with `PAGEMAP_SCAN`.
fn collect_scan(shared: &Shared, st: &UffdState, out: &mut Vec<u64>) -> Result<(), ViewError> {
    let Some(pagemap) = &st.pagemap else {
        return Ok(());
    };
    let mut regions = [PageRegion::default(); SCAN_REGIONS];
    let ranges = if scan_fast_path_sound() {
        scan_ranges(&st.present, shared.pages)
    } else {
        vec![(0, shared.pages, false)]
    };
    for (first, last, fast) in ranges {
        let end = (shared.base as u64) + last * PAGE_SIZE as u64;
        let mut start = shared.base as u64 + first * PAGE_SIZE as u64;
        // Each call either finishes the walk or fills the region vector; bound the loop by the
        // number of pages (at worst one region per page).
        let mut calls_left = (last - first) / SCAN_REGIONS as u64 + 2;
        while start < end && calls_left > 0 {
            calls_left -= 1;
            let mut arg = PmScanArg {
                flags: sys::PM_SCAN_WP_MATCHING | sys::PM_SCAN_CHECK_WPASYNC,
                start,
                end,
                // Only pages that exist, in memory or in swap, can have been written. Without
                // the any-of mask the kernel takes a fast path (about 1 ns instead of 3 ns per
                // entry) that also reports empty entries and holes as "written" and
                // write-protects them with markers, allocating page tables: only for fully
                // present ranges (`scan_ranges`). With the mask, the walk skips never-touched
                // 2 MiB regions, so a collect costs O(touched regions), not O(view size).
                category_mask: sys::PAGE_IS_WRITTEN,
                category_anyof_mask: if fast {
                    0
                } else {
                    sys::PAGE_IS_PRESENT | sys::PAGE_IS_SWAPPED
                },
                return_mask: sys::PAGE_IS_WRITTEN,
                ..PmScanArg::default()
            };
            let n = sys::pagemap_scan(pagemap.as_raw_fd(), &mut arg, &mut regions).map_err(
                |errno| ViewError::Os {
                    op: "ioctl(PAGEMAP_SCAN)",
                    errno,
                },
            )?;
            for r in &regions[..n.min(SCAN_REGIONS)] {
                let mut a = r.start;
                while a < r.end {
                    out.push((a - shared.base as u64) / PAGE_SIZE as u64);
                    a += PAGE_SIZE as u64;
                }
            }
            if arg.walk_end <= start {
                break;
            }
            start = arg.walk_end;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn present(pages: u64, set: impl IntoIterator<Item = u64>) -> PageBits {
        let b = PageBits::new(pages);
        for p in set {
            b.set(p);
        }
        b
    }

    #[test]
    fn kernel_version_parses() {
        let v = sys::kernel_version().expect("uname release");
        assert!(v.0 >= 3, "{v:?}");
    }

    #[test]
    fn scan_ranges_use_the_fast_path_only_over_long_fully_present_runs() {
        // Nothing present: one slow range over the view.
        assert_eq!(
            scan_ranges(&present(1000, []), 1000),
            vec![(0, 1000, false)]
        );
        // Everything present, the last word partial: one fast range.
        assert_eq!(
            scan_ranges(&present(1000, 0..1000), 1000),
            vec![(0, 1000, true)]
        );
        // A hole in the middle splits it; the short full run after it stays slow.
        let b = present(1024, (0..1024).filter(|&p| p != 600));
        assert_eq!(
            scan_ranges(&b, 1024),
            vec![(0, 576, true), (576, 1024, false)]
        );
        // A small view, fully present: fast.
        assert_eq!(
            scan_ranges(&present(100, 0..100), 100),
            vec![(0, 100, true)]
        );
        // Short full runs never take the fast path.
        let b = present(4096, (0..4096).filter(|p| p % 256 != 0));
        assert_eq!(scan_ranges(&b, 4096), vec![(0, 4096, false)]);
        // Every page is covered exactly once, in order.
        let b = present(5000, (0..5000).filter(|p| (p / 700) % 2 == 0));
        let r = scan_ranges(&b, 5000);
        assert_eq!(r.first().map(|x| x.0), Some(0));
        assert_eq!(r.last().map(|x| x.1), Some(5000));
        assert!(r.windows(2).all(|w| w[0].1 == w[1].0 && w[0].2 != w[1].2));
        for &(first, end, fast) in &r {
            if fast {
                assert!(end - first >= SCAN_FAST_MIN_PAGES);
                assert!(
                    (first..end).all(|p| b.get(p)),
                    "a fast range with an empty entry"
                );
            }
        }
    }
}

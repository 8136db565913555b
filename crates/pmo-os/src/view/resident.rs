//! Resident views: a small PMO filled whole when its view is made, so that no access ever
//! faults, with its mapping kept for the next view of the same range (module `spare`).
//!
//! A session on a PMO of a few pages touches them all (a file read whole, a record updated):
//! serving that through faults costs a signal, a handler and an ioctl per window, and mapping
//! the range costs `mmap`, three `madvise`s, `munlock`, `UFFDIO_REGISTER` and `munmap`, several
//! times the decryption itself on this machine. A resident view instead:
//! - takes its mappings from the spare list (else maps them: a writable view private anonymous
//!   memory and a twin beside it; a read-only view a memfd mapped `PROT_READ` at the view's
//!   address and again writable as an alias, so that the application cannot write it);
//! - fills every page from the source straight into place (through the alias when read-only)
//!   and, writable with tracking by comparison, copies them to the twin;
//! - finds written pages at collect by comparing each page with its twin (a page reported has
//!   its twin refreshed: the commit reads the twin, a stable snapshot), or with
//!   [`DirtyTracking::Declared`] reports only the pages declared;
//! - at drop zeroes the plaintext and the twin, then hands the mappings to the spare list.
//!
//! After its drop the range stays mapped but holds zeros: a stale read of a detached PMO reads
//! zeros (not its plaintext) instead of faulting, a stale write to a writable range is lost
//! (the next view of the range fills every page over it). `PMO_VIEW_SPARE_BYTES=0` unmaps every
//! resident view at its drop.
//!
//! Invariants: every page is present from creation to drop (the kernel never faults to a
//! handler here: no registration); a page written since the previous collect differs from its
//! twin or is declared, and is reported; the twin and the plaintext are zero before the
//! mappings leave the view.
#![allow(unsafe_code)] // filling, comparing and zeroing the view's own mappings.

use std::sync::Mutex;

use super::bits::PageBits;
use super::shared::{map_view, Shared, StatCounters};
use super::spare::{self, Mem};
use super::sys;
use super::types::{
    DirtyTracking, Mechanism, PageSource, Placement, ViewError, ViewOptions, PAGE_SIZE,
};

/// The largest resident view, pages: one fault-around window, which the fault path would fill
/// whole at its first fault anyway (`docs/faults.md`). `PMO_RESIDENT_PAGES` sets the bar; 0
/// turns resident views off.
pub const DEFAULT_RESIDENT_PAGES: u64 = 16;

/// The bar on a resident view's pages: `PMO_RESIDENT_PAGES` if set to a number, else
/// [`DEFAULT_RESIDENT_PAGES`].
pub fn resident_pages_max() -> u64 {
    static CACHED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *CACHED.get_or_init(|| {
        std::env::var("PMO_RESIDENT_PAGES")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(DEFAULT_RESIDENT_PAGES)
    })
}

/// Per-view state of a resident view.
pub(crate) struct ResidentState {
    /// `None` only during the view's drop, after the mappings went back to the spare list.
    pub(crate) mem: Option<Mem>,
    /// [`DirtyTracking::Twin`] (compare with the twin) or [`DirtyTracking::Declared`].
    tracking: DirtyTracking,
    /// Pages declared ([`mark_dirty`]) since the previous collect.
    declared: PageBits,
    /// Serialises collect and discard (both write the twin).
    lock: Mutex<()>,
}

impl ResidentState {
    pub(crate) fn tracking(&self) -> DirtyTracking {
        self.tracking
    }

    fn mem(&self) -> &Mem {
        self.mem
            .as_ref()
            .expect("a resident view holds its mappings until its drop")
    }

    /// Where the view's page `p` is written: the view itself, or a read-only view's alias.
    fn fill_addr(&self, p: u64) -> usize {
        let m = self.mem();
        (if m.writable { m.base } else { m.aux }) + p as usize * PAGE_SIZE
    }

    /// The twin of page `p` (writable views compared with their twins).
    pub(crate) fn twin_addr(&self, p: u64) -> Option<usize> {
        let m = self.mem();
        (m.writable && self.tracking == DirtyTracking::Twin).then(|| m.aux + p as usize * PAGE_SIZE)
    }
}

fn os(op: &'static str) -> impl Fn(i32) -> ViewError {
    move |errno| ViewError::Os { op, errno }
}

/// Map `len` bytes anywhere beside the view at `base` (its twin or alias), or unmap the view
/// and fail.
fn map_beside(
    base: usize,
    len: usize,
    flags: i32,
    fd: i32,
    what: &'static str,
) -> Result<usize, ViewError> {
    let rw = libc::PROT_READ | libc::PROT_WRITE;
    sys::map_at(0, len, rw, flags, fd, 0, false).map_err(|e| {
        // SAFETY: the view's mapping, just made and known to nobody else.
        unsafe { sys::unmap(base, len) };
        let errno = match e {
            sys::MapError::Os(errno) => errno,
            sys::MapError::AddressInUse => libc::EEXIST,
        };
        ViewError::Os { op: what, errno }
    })
}

/// Map the view's range and its twin (`twin`: a writable view compared with one) or alias (a
/// read-only view), not taken from the spare list.
fn map_new(opts: &ViewOptions, twin: bool) -> Result<Mem, ViewError> {
    let len = opts.len_bytes;
    // Populated at once: every page is written right away (the fill, the twin), and one call
    // allocates them cheaper than a first-touch fault each.
    let (base, aux) = if opts.writable {
        let anon =
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_POPULATE;
        let base = map_view(opts, libc::PROT_READ | libc::PROT_WRITE, anon, -1, 0)?;
        // Declared tracking knows its writes: no twin (half the memory and its population).
        let aux = if twin {
            map_beside(base, len, anon, -1, "mmap (twin)")?
        } else {
            0
        };
        (base, aux)
    } else {
        // The mappings keep the memfd's pages; the descriptor closes at the end of this block.
        let fd = sys::memfd(c"pmo-resident").map_err(os("memfd_create"))?;
        use std::os::fd::AsRawFd;
        sys::ftruncate(fd.as_raw_fd(), len).map_err(os("ftruncate"))?;
        let shared = libc::MAP_SHARED | libc::MAP_POPULATE;
        let base = map_view(opts, libc::PROT_READ, shared, fd.as_raw_fd(), 0)?;
        (
            base,
            map_beside(base, len, shared, fd.as_raw_fd(), "mmap (alias)")?,
        )
    };
    let mem = Mem {
        base,
        len,
        writable: opts.writable,
        aux,
        pid: crate::lock::pid(),
    };
    // SAFETY: the mappings just made; advice changes no contents. A fork child must not
    // inherit a PMO's plaintext.
    unsafe {
        sys::madvise(mem.base, len, libc::MADV_DONTFORK).map_err(os("madvise(MADV_DONTFORK)"))?;
        if mem.aux != 0 {
            sys::madvise(mem.aux, len, libc::MADV_DONTFORK)
                .map_err(os("madvise(MADV_DONTFORK)"))?;
        }
    }
    Ok(mem)
}

/// Make a resident view and fill every page from `source`. `tracking`: how a writable view
/// finds its writes, [`DirtyTracking::Declared`] or anything else (compared with the twin).
pub(crate) fn create(
    opts: &ViewOptions,
    source: std::sync::Arc<dyn PageSource>,
    tracking: DirtyTracking,
    mechanism: Mechanism,
) -> Result<(Shared, ResidentState), ViewError> {
    let len = opts.len_bytes;
    let tracking = if tracking == DirtyTracking::Declared {
        DirtyTracking::Declared
    } else {
        DirtyTracking::Twin
    };
    // A twin for a writable view that compares with one, an alias for a read-only view.
    let aux = !opts.writable || tracking == DirtyTracking::Twin;
    let taken = match opts.placement {
        // The spare of this range, else another of its shape moved here; another spare over
        // the range is unmapped by `map_view` if it is in the way.
        Placement::Fixed(addr) => spare::take_at(addr, len, opts.writable, aux)
            .or_else(|| spare::take_moved(addr, len, opts.writable, aux)),
        // Never a spare: its range is some PMO's stable address, which a view placed anywhere
        // (a relocated attach) must not take from it.
        Placement::Anywhere => None,
    };
    let mem = match taken {
        Some(m) => m,
        None => map_new(opts, aux && opts.writable)?,
    };
    let pages = (len / PAGE_SIZE) as u64;
    let st = ResidentState {
        mem: Some(mem),
        tracking,
        declared: PageBits::new(if opts.writable { pages } else { 0 }),
        lock: Mutex::new(()),
    };
    let shared = Shared {
        owner_pid: st.mem().pid,
        base: st.mem().base,
        len_bytes: len,
        pages,
        writable: opts.writable,
        mechanism,
        source,
        stats: StatCounters::default(),
    };
    // On a failed fill, what was filled is zeroed and the mappings kept (`release`).
    let mut st = st;
    for p in 0..pages {
        if let Err(e) = fill(&shared, &st, p) {
            release(&mut st);
            return Err(e);
        }
    }
    if let Some(twin) = st.twin_addr(0) {
        // SAFETY: view and twin are this view's own `len`-byte mappings, not overlapping.
        unsafe { std::ptr::copy_nonoverlapping(shared.base as *const u8, twin as *mut u8, len) };
    }
    Ok((shared, st))
}

/// Fill page `p` from the source, in place.
fn fill(shared: &Shared, st: &ResidentState, p: u64) -> Result<(), ViewError> {
    // SAFETY: `fill_addr(p)` is page `p` of this view's writable mapping (the view or its
    // alias), `PAGE_SIZE`-aligned and present for the view's life; no one else writes it
    // during the fill but the application, whose writes the fill replaces by contract.
    let dst = unsafe { &mut *(st.fill_addr(p) as *mut [u8; PAGE_SIZE]) };
    shared.fill_page(p, dst).map_err(|e| ViewError::Fill {
        page: p,
        reason: e.reason,
    })
}

/// Pages written since the previous collect (see the module's doc); pages reported from their
/// twins also go to `from_twin`.
pub(crate) fn collect_dirty(
    shared: &Shared,
    st: &ResidentState,
    out: &mut Vec<u64>,
    from_twin: &mut Vec<u64>,
) -> Result<(), ViewError> {
    let _serial = st.lock.lock().unwrap_or_else(|e| e.into_inner());
    for p in 0..shared.pages {
        let declared = st.declared.get(p);
        if declared {
            st.declared.clear(p);
        }
        let Some(twin) = st.twin_addr(p) else {
            if declared {
                out.push(p);
            }
            continue;
        };
        let page = shared.base + p as usize * PAGE_SIZE;
        // SAFETY: page `p` of the view and of its twin, both present and `PAGE_SIZE` long;
        // the application may write the view meanwhile (a torn compare or copy is caught by
        // the next collect: the page then differs from its twin again).
        let changed = declared
            || unsafe {
                let a = std::slice::from_raw_parts(page as *const u8, PAGE_SIZE);
                let b = std::slice::from_raw_parts(twin as *const u8, PAGE_SIZE);
                a != b
            };
        if changed {
            // SAFETY: as above; the twin is written only here and in `discard`, under `lock`.
            unsafe { std::ptr::copy_nonoverlapping(page as *const u8, twin as *mut u8, PAGE_SIZE) };
            out.push(p);
            from_twin.push(p);
        }
    }
    Ok(())
}

/// Declare page `p` written.
pub(crate) fn mark_dirty(st: &ResidentState, p: u64) {
    st.declared.set(p);
}

/// Fill page `p` again from the source (its writes are dropped, it is no longer reported).
pub(crate) fn discard(shared: &Shared, st: &ResidentState, p: u64) -> Result<(), ViewError> {
    let _serial = st.lock.lock().unwrap_or_else(|e| e.into_inner());
    if shared.writable {
        st.declared.clear(p);
    }
    fill(shared, st, p)?;
    if let Some(twin) = st.twin_addr(p) {
        // SAFETY: page `p` of the view and its twin, under `lock`.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (shared.base + p as usize * PAGE_SIZE) as *const u8,
                twin as *mut u8,
                PAGE_SIZE,
            )
        };
    }
    Ok(())
}

/// Zero the plaintext and the twin, and hand the mappings to the spare list (the view is
/// unregistered or was never registered: nobody reads them any more).
pub(crate) fn release(st: &mut ResidentState) {
    let Some(mem) = st.mem.take() else { return };
    if mem.pid != crate::lock::pid() {
        return; // a fork child's copy maps nothing.
    }
    let plain = if mem.writable { mem.base } else { mem.aux };
    // SAFETY: the view's own writable mappings (the view or its alias, and the twin), `len`
    // bytes each, no longer used by anyone. A declared view never wrote its twin.
    unsafe {
        std::ptr::write_bytes(plain as *mut u8, 0, mem.len);
        if mem.writable && st.tracking == DirtyTracking::Twin {
            std::ptr::write_bytes(mem.aux as *mut u8, 0, mem.len);
        }
    }
    // The zeroes must be in memory before the mapping can be handed to another view.
    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
    spare::put(mem);
}

//! The sigsegv mechanism: a memfd mapped twice, `SIGSEGV` + `mprotect` per page. Works for any
//! user, needs no userfaultfd.
//!
//! Owns: the memfd of a view (or, for a view over a file range, a duplicate of the caller's
//! descriptor and the range's offset), its private writable alias mapping, a per-page state byte
//! and the dirty bitmap. A file-backed view's pages live in the file: filling a page writes the
//! file, and discarding a page zeroes it there (the file's blocks are never punched out).
//!
//! Page states (one `AtomicU8` per page) and the protection of the application's view they imply:
//!
//! | state    | application view | meaning |
//! |----------|------------------|---------|
//! | `ABSENT` | `PROT_NONE`      | never filled, or discarded (memfd range punched out) |
//! | `BUSY`   | any              | one thread owns the page: filling, opening for write, re-protecting, discarding |
//! | `CLEAN`  | `PROT_READ`      | filled, not written since the last collect |
//! | `DIRTY`  | `PROT_READ\|PROT_WRITE` | written since the last collect; its dirty bit is set |
//!
//! Invariants: a state other than `BUSY` is stored only *after* the protection it implies is in
//! place, so a fault on a `CLEAN` page is a write and a fault on a `DIRTY` page is a race with the
//! thread that just opened it. Only the thread that moved a page to `BUSY` (by compare-exchange)
//! touches its alias bytes or its protection. The dirty bit of a page is set while it is `BUSY`
//! on the way to `DIRTY`; `collect_dirty` swaps bitmap words to zero, then moves each reported
//! page `DIRTY -> BUSY`, re-protects it `PROT_READ` and stores `CLEAN`, so a racing write is
//! either in the reported page (it landed before the re-protection) or faults again and sets the
//! bit for the next collect.
//!
//! Write faults: the x86 page-fault error code in the signal context says whether an access was a
//! write; a first touch that is a write is filled and opened read-write in one fault. Elsewhere
//! (no error code) the first write costs a second fault.
//!
//! Limit: each isolated run of pages with one protection is a separate VMA; `vm.max_map_count`
//! (65530 by default) caps a view at about 32k scattered resident runs. Adjacent runs with the
//! same protection are merged by the kernel. A failing `mprotect` on the fault path is fatal
//! (message + `SIGBUS`); elsewhere it is an error.
#![allow(unsafe_code)] // writes through the alias mapping and mprotect on the view.

use std::ffi::CStr;
use std::ops::Range;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use super::bits::PageBits;
use super::fault::{self, Outcome};
use super::shared::{map_view, Shared, StatCounters};
use super::sys;
use super::types::{Mechanism, PageSource, ViewError, ViewOptions, PAGE_SIZE};

const ABSENT: u8 = 0;
const BUSY: u8 = 1;
const CLEAN: u8 = 2;
const DIRTY: u8 = 3;

/// Per-view state of the sigsegv mechanism.
pub(crate) struct SegvState {
    /// The backing: our own memfd, or a duplicate of the caller's file descriptor.
    fd: OwnedFd,
    /// `Some(offset)` when the view maps the caller's file from `offset`; `None` for a memfd.
    file_offset: Option<u64>,
    /// Start of the private read-write alias of the backing (same length as the view).
    pub(crate) alias: usize,
    state: Box<[AtomicU8]>,
    dirty: PageBits,
}

impl SegvState {
    /// Whether the view maps a caller's file (not a memfd of its own).
    pub(crate) fn file_backed(&self) -> bool {
        self.file_offset.is_some()
    }

    pub(crate) fn is_present(&self, page: u64) -> bool {
        matches!(
            self.state[page as usize].load(Ordering::Acquire),
            CLEAN | DIRTY
        )
    }

    /// Wait while another thread owns `page`, then return its state (bounded by that thread's
    /// progress: one fill, one mprotect or one punch).
    fn settled(&self, page: u64) -> u8 {
        let mut spins = 0u32;
        loop {
            let s = self.state[page as usize].load(Ordering::Acquire);
            if s != BUSY {
                return s;
            }
            spins += 1;
            if spins & 63 == 0 {
                sys::yield_cpu();
            } else {
                std::hint::spin_loop();
            }
        }
    }

    fn claim(&self, page: u64, from: u8) -> bool {
        self.state[page as usize]
            .compare_exchange(from, BUSY, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    fn release(&self, page: u64, to: u8) {
        self.state[page as usize].store(to, Ordering::Release);
    }

    /// The alias bytes of `page`.
    ///
    /// # Safety
    /// The caller owns `page` (moved it to `BUSY`) and the application's view of it is not
    /// writable, so nobody else reads or writes these bytes while the reference lives.
    #[allow(clippy::mut_from_ref)]
    unsafe fn alias_page(&self, page: u64) -> &mut [u8; PAGE_SIZE] {
        // SAFETY: forwarded to the caller; the alias mapping is read-write and covers the view.
        unsafe { &mut *((self.alias + page as usize * PAGE_SIZE) as *mut [u8; PAGE_SIZE]) }
    }
}

fn os(op: &'static str) -> impl Fn(i32) -> ViewError {
    move |errno| ViewError::Os { op, errno }
}

/// Where a sigsegv view's pages live.
pub(crate) enum Backing<'a> {
    /// A new memfd of the view's length (DRAM).
    Memfd,
    /// The range of `file` starting at `offset` (page aligned): the caller's medium.
    File {
        file: &'a std::fs::File,
        offset: u64,
    },
}

/// Create the backing, the alias and the application's `PROT_NONE` view.
/// The caller puts the two halves together in a `ViewState`, whose drop unmaps both mappings.
pub(crate) fn create(
    opts: &ViewOptions,
    source: Arc<dyn PageSource>,
    backing: Backing<'_>,
) -> Result<(Shared, SegvState), ViewError> {
    const NAME: &CStr = c"pmo-view";
    let (fd, file_offset) = match backing {
        Backing::Memfd => {
            let memfd = sys::memfd(NAME).map_err(|e| ViewError::Unsupported {
                mechanism: Mechanism::Sigsegv,
                why: format!("memfd_create: {}", std::io::Error::from_raw_os_error(e)),
            })?;
            sys::ftruncate(memfd.as_raw_fd(), opts.len_bytes).map_err(os("ftruncate"))?;
            (memfd, None)
        }
        Backing::File { file, offset } => {
            let end = offset.checked_add(opts.len_bytes as u64);
            let len = file.metadata().map(|m| m.len()).unwrap_or(0);
            if offset % PAGE_SIZE as u64 != 0 || end.is_none_or(|e| e > len) {
                return Err(ViewError::InvalidAddress {
                    addr: offset as usize,
                });
            }
            let dup: OwnedFd = file
                .try_clone()
                .map_err(|e| ViewError::Os {
                    op: "dup",
                    errno: e.raw_os_error().unwrap_or(libc::EIO),
                })?
                .into();
            (dup, Some(offset))
        }
    };
    let offset = file_offset.unwrap_or(0);
    let alias = sys::map_at(
        0,
        opts.len_bytes,
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_SHARED,
        fd.as_raw_fd(),
        offset,
        false,
    )
    .map_err(|e| match e {
        sys::MapError::Os(errno) => ViewError::Os {
            op: "mmap(alias)",
            errno,
        },
        sys::MapError::AddressInUse => ViewError::Os {
            op: "mmap(alias)",
            errno: libc::EEXIST,
        },
    })?;
    let alias_guard = UnmapOnError {
        addr: alias,
        len: opts.len_bytes,
    };
    let base = map_view(
        opts,
        libc::PROT_NONE,
        libc::MAP_SHARED,
        fd.as_raw_fd(),
        offset,
    )?;
    let base_guard = UnmapOnError {
        addr: base,
        len: opts.len_bytes,
    };
    // SAFETY: both ranges are mappings we just created; advice only changes kernel policy.
    unsafe {
        sys::madvise(base, opts.len_bytes, libc::MADV_DONTFORK)
            .map_err(os("madvise(MADV_DONTFORK)"))?;
        sys::madvise(alias, opts.len_bytes, libc::MADV_DONTFORK)
            .map_err(os("madvise(MADV_DONTFORK)"))?;
    }
    let pages = (opts.len_bytes / PAGE_SIZE) as u64;
    std::mem::forget(alias_guard);
    std::mem::forget(base_guard);
    let shared = Shared {
        owner_pid: crate::lock::pid(),
        base,
        len_bytes: opts.len_bytes,
        pages,
        writable: opts.writable,
        mechanism: Mechanism::Sigsegv,
        source,
        stats: StatCounters::default(),
    };
    let st = SegvState {
        fd,
        file_offset,
        alias,
        state: (0..pages).map(|_| AtomicU8::new(ABSENT)).collect(),
        dirty: PageBits::new(pages),
    };
    Ok((shared, st))
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

fn prot_for(dirty: bool) -> libc::c_int {
    if dirty {
        libc::PROT_READ | libc::PROT_WRITE
    } else {
        libc::PROT_READ
    }
}

/// Serve an access fault on `page` (signal handler context).
pub(crate) fn service(shared: &Shared, st: &SegvState, page: u64, write: Option<bool>) -> Outcome {
    let addr = shared.page_addr(page);
    let label = shared.source.label();
    // At most a few rounds: each failed compare-exchange means another thread moved the page on.
    for _ in 0..1000 {
        match st.settled(page) {
            ABSENT => {
                if !st.claim(page, ABSENT) {
                    continue;
                }
                let open_for_write = shared.writable && write == Some(true);
                shared.count_fault(open_for_write);
                // SAFETY: we own the page (BUSY) and the application's view of it is PROT_NONE.
                let dst = unsafe { st.alias_page(page) };
                if let Err(e) = super::stack::on_fill_stack(|| shared.fill_page(page, dst)) {
                    fault::fatal("integrity error", label, page, e.reason);
                }
                if open_for_write {
                    st.dirty.set(page);
                }
                // SAFETY: the page is inside our view; we own it (BUSY).
                if unsafe { sys::mprotect(addr, PAGE_SIZE, prot_for(open_for_write)) }.is_err() {
                    fault::fatal(
                        "fault service failed",
                        label,
                        page,
                        "mprotect failed (vm.max_map_count reached?)",
                    );
                }
                st.release(page, if open_for_write { DIRTY } else { CLEAN });
                return Outcome::Handled;
            }
            CLEAN => {
                // The page is readable, so this fault is a write, unless it was a read that raced
                // with the thread that filled the page.
                if write == Some(false) {
                    return Outcome::Handled;
                }
                if !shared.writable {
                    return Outcome::NotOurs;
                }
                if !st.claim(page, CLEAN) {
                    continue;
                }
                shared.count_fault(true);
                st.dirty.set(page);
                // SAFETY: the page is inside our view; we own it (BUSY).
                if unsafe { sys::mprotect(addr, PAGE_SIZE, prot_for(true)) }.is_err() {
                    fault::fatal(
                        "fault service failed",
                        label,
                        page,
                        "mprotect failed (vm.max_map_count reached?)",
                    );
                }
                st.release(page, DIRTY);
                return Outcome::Handled;
            }
            // DIRTY: another thread opened it between our fault and now; retry the access.
            _ => return Outcome::Handled,
        }
    }
    Outcome::Handled
}

/// Install `data` as `page` if absent (`dirty`: open it read-write and report it).
pub(crate) fn install(
    shared: &Shared,
    st: &SegvState,
    page: u64,
    data: &[u8; PAGE_SIZE],
    dirty: bool,
) -> Result<bool, ViewError> {
    if !st.claim(page, ABSENT) {
        return Ok(false);
    }
    // SAFETY: we own the page (BUSY) and the application's view of it is PROT_NONE.
    unsafe { st.alias_page(page) }.copy_from_slice(data);
    let dirty = dirty && shared.writable;
    if dirty {
        st.dirty.set(page);
    }
    // SAFETY: the page is inside our view; we own it.
    if let Err(errno) = unsafe { sys::mprotect(shared.page_addr(page), PAGE_SIZE, prot_for(dirty)) }
    {
        st.dirty.clear(page);
        st.release(page, ABSENT);
        return Err(ViewError::Os {
            op: "mprotect",
            errno,
        });
    }
    st.release(page, if dirty { DIRTY } else { CLEAN });
    Ok(true)
}

/// Fill the absent pages of `pages` through the source, one `mprotect` per run of pages.
/// `for_write` also opens present clean pages read-write and marks every page dirty.
pub(crate) fn fill_range(
    shared: &Shared,
    st: &SegvState,
    pages: Range<u64>,
    for_write: bool,
) -> Result<(), ViewError> {
    if pages.end > shared.pages {
        return Err(ViewError::PageOutOfRange {
            page: pages.end - 1,
            pages: shared.pages,
        });
    }
    let dirty = for_write && shared.writable;
    let mut page = pages.start;
    while page < pages.end {
        // Claim a run of absent pages and fill them.
        let run_start = page;
        let mut failed = None;
        while page < pages.end && st.claim(page, ABSENT) {
            // SAFETY: we own the page (BUSY) and the application's view of it is PROT_NONE.
            let dst = unsafe { st.alias_page(page) };
            if let Err(e) = shared.fill_page(page, dst) {
                // Open what was filled before the failure, then report it.
                st.release(page, ABSENT);
                failed = Some(ViewError::Fill {
                    page,
                    reason: e.reason,
                });
                break;
            }
            page += 1;
        }
        if page > run_start {
            let len = (page - run_start) as usize * PAGE_SIZE;
            if dirty {
                for p in run_start..page {
                    st.dirty.set(p);
                }
            }
            // SAFETY: the run is inside our view and we own every page of it.
            if let Err(errno) =
                unsafe { sys::mprotect(shared.page_addr(run_start), len, prot_for(dirty)) }
            {
                for p in run_start..page {
                    st.dirty.clear(p);
                    st.release(p, ABSENT);
                }
                return Err(ViewError::Os {
                    op: "mprotect",
                    errno,
                });
            }
            for p in run_start..page {
                st.release(p, if dirty { DIRTY } else { CLEAN });
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        if page > run_start {
            continue;
        }
        // `page` is not absent: present, or another thread owns it.
        if dirty && st.settled(page) == CLEAN && st.claim(page, CLEAN) {
            st.dirty.set(page);
            // SAFETY: the page is inside our view; we own it.
            if let Err(errno) =
                unsafe { sys::mprotect(shared.page_addr(page), PAGE_SIZE, prot_for(true)) }
            {
                st.dirty.clear(page);
                st.release(page, CLEAN);
                return Err(ViewError::Os {
                    op: "mprotect",
                    errno,
                });
            }
            st.release(page, DIRTY);
        } else if st.settled(page) == ABSENT {
            // Discarded meanwhile: go round again for this page.
            continue;
        }
        page += 1;
    }
    Ok(())
}

/// Make a present `page` reported by the next collect (open it read-write, set its bit).
pub(crate) fn mark_dirty(shared: &Shared, st: &SegvState, page: u64) -> Result<(), ViewError> {
    loop {
        match st.settled(page) {
            CLEAN => {
                if !st.claim(page, CLEAN) {
                    continue;
                }
                st.dirty.set(page);
                // SAFETY: the page is inside our view; we own it.
                let r = unsafe { sys::mprotect(shared.page_addr(page), PAGE_SIZE, prot_for(true)) };
                if let Err(errno) = r {
                    st.dirty.clear(page);
                    st.release(page, CLEAN);
                    return Err(ViewError::Os {
                        op: "mprotect",
                        errno,
                    });
                }
                st.release(page, DIRTY);
                return Ok(());
            }
            // DIRTY: already reported next time; ABSENT: equals its source.
            _ => return Ok(()),
        }
    }
}

/// Drop `page`: protect it, forget its dirty bit, free its memory, mark it absent.
pub(crate) fn discard(shared: &Shared, st: &SegvState, page: u64) -> Result<(), ViewError> {
    loop {
        match st.settled(page) {
            ABSENT => return Ok(()),
            s => {
                if st.claim(page, s) {
                    break;
                }
            }
        }
    }
    // SAFETY: the page is inside our view; we own it.
    if let Err(errno) = unsafe { sys::mprotect(shared.page_addr(page), PAGE_SIZE, libc::PROT_NONE) }
    {
        // Still readable (and maybe writable): leave it as it was.
        let back = if st.dirty.get(page) { DIRTY } else { CLEAN };
        st.release(page, back);
        return Err(ViewError::Os {
            op: "mprotect",
            errno,
        });
    }
    st.dirty.clear(page);
    let r = match st.file_offset {
        None => sys::punch_hole(st.fd.as_raw_fd(), page as usize * PAGE_SIZE, PAGE_SIZE),
        Some(_) => {
            // SAFETY: we own the page (BUSY) and the application's view of it is `PROT_NONE`.
            unsafe { st.alias_page(page) }.fill(0);
            Ok(())
        }
    };
    st.release(page, ABSENT);
    r.map_err(os("fallocate(PUNCH_HOLE)"))
}

/// Report and re-protect the dirty pages. On error, every page this call took is marked dirty
/// again, so nothing is lost.
pub(crate) fn collect_dirty(
    shared: &Shared,
    st: &SegvState,
    out: &mut Vec<u64>,
) -> Result<(), ViewError> {
    let first_out = out.len();
    let mut run: Option<(u64, u64)> = None; // (first page, count) of claimed DIRTY pages
    st.dirty.drain(|w, mut bits| {
        while bits != 0 {
            let page = w * 64 + bits.trailing_zeros() as u64;
            bits &= bits - 1;
            let taken = loop {
                match st.settled(page) {
                    DIRTY => {
                        if st.claim(page, DIRTY) {
                            break true;
                        }
                    }
                    // Re-marked after an earlier failed collect: readable, report it as is.
                    CLEAN => {
                        out.push(page);
                        break false;
                    }
                    // Discarded meanwhile: nothing to report.
                    _ => break false,
                }
            };
            if !taken {
                continue;
            }
            run = match run {
                Some((start, n)) if start + n == page => Some((start, n + 1)),
                Some((start, n)) => {
                    if let Err(e) = reprotect(shared, st, start, n, out, first_out) {
                        // This word's pages not reached yet keep their bits (`page` itself
                        // was claimed: give it back too).
                        st.release(page, DIRTY);
                        st.dirty.set(page);
                        while bits != 0 {
                            st.dirty.set(w * 64 + bits.trailing_zeros() as u64);
                            bits &= bits - 1;
                        }
                        return Err(e);
                    }
                    Some((page, 1))
                }
                None => Some((page, 1)),
            };
        }
        Ok(())
    })?;
    if let Some((start, n)) = run {
        reprotect(shared, st, start, n, out, first_out)?;
    }
    Ok(())
}

/// Make the claimed run `start..start+n` read-only and clean, and report it.
fn reprotect(
    shared: &Shared,
    st: &SegvState,
    start: u64,
    n: u64,
    out: &mut Vec<u64>,
    first_out: usize,
) -> Result<(), ViewError> {
    // SAFETY: the run is inside our view and we own every page of it (BUSY).
    let r = unsafe {
        sys::mprotect(
            shared.page_addr(start),
            n as usize * PAGE_SIZE,
            libc::PROT_READ,
        )
    };
    match r {
        Ok(()) => {
            for p in start..start + n {
                st.release(p, CLEAN);
                out.push(p);
            }
            Ok(())
        }
        Err(errno) => {
            for p in start..start + n {
                st.dirty.set(p);
                st.release(p, DIRTY);
            }
            // Pages reported earlier in this call are CLEAN now; re-mark them so the next
            // collect reports them (see the CLEAN arm in collect_dirty).
            for &p in &out[first_out..] {
                st.dirty.set(p);
            }
            out.truncate(first_out);
            Err(ViewError::Os {
                op: "mprotect",
                errno,
            })
        }
    }
}

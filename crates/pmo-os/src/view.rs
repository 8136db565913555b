//! Fault-driven application views of a PMO: pages filled on first touch, writes tracked per page.
//!
//! A [`View`] is a range of virtual memory at a stable address that presents a PMO's pages to the
//! application. A page is filled by a [`PageSource`] callback the first time it is touched (plain
//! copy today; decrypt + verify later), and writes are tracked per 4 KiB page so that `psync`
//! copies only the pages written since the previous [`View::collect_dirty`].
//!
//! Two mechanisms serve the faults (see `docs/faults.md` for the measurements and the choice):
//!
//! - [`Mechanism::Userfaultfd`] (default): anonymous private memory registered with a
//!   userfaultfd for missing pages with `UFFD_FEATURE_SIGBUS`: the *faulting thread* gets
//!   `SIGBUS`, fills a page buffer and installs it with `UFFDIO_COPY` (no cross-CPU wake-up).
//!   Writable views track writes by [`DirtyTracking::Scan`] (asynchronous write-protect: the
//!   kernel un-protects a page on its first write without any signal, and `PAGEMAP_SCAN` reports
//!   and re-protects the written pages in one call) or [`DirtyTracking::Fault`] (a `SIGBUS` on
//!   the first write after a collect, a dirty bitmap, collect costs O(dirty pages)). Works
//!   unprivileged through `UFFD_USER_MODE_ONLY`. Module `uffd`.
//! - [`Mechanism::Sigsegv`]: a memfd mapped twice: the application's view starts `PROT_NONE`; the
//!   `SIGSEGV` handler fills the page through a private writable alias and opens it `PROT_READ`;
//!   on a writable view, the first write marks the page dirty in an atomic bitmap and opens it
//!   `PROT_READ | PROT_WRITE`. Needs no userfaultfd at all. Module `segv`.
//!
//! Owns: the view mappings, their per-page state, the process-wide fault handler and the registry
//! of live views (module `registry`), the fill stacks the handler runs fills on (module `stack`).
//! Callers: the store's attach / psync (lead), prediction (install), the cache (discard).
//!
//! Invariants:
//! - The fault path allocates nothing, takes no lock and never panics; a failed fill prints one
//!   line with `write(2)` and kills the process with `SIGBUS` (see [`PageSource`]).
//! - Every page written since it was last reported (or installed or filled clean) is reported by
//!   the next `collect_dirty`, and re-protected before that call returns: a write is never lost.
//!   With [`DirtyTracking::Twin`], "written" means "differs from its twin" for a page kept
//!   writable; such a page is reported with a twin snapshot that stays unchanged until the next
//!   collect ([`View::collect_dirty_with_twins`]).
//!   A page that was not written is not reported, except in rare races where it was opened for
//!   a write that had not landed yet (one page too many, never one too few).
//! - Every view is registered in a fixed table of [`MAX_VIEWS`] slots; `View::drop` unregisters,
//!   waits for handlers still inside the view, then unmaps.
//! - Views are not inherited by `fork` children (`MADV_DONTFORK`): a child touching the old range
//!   gets an ordinary `SIGSEGV`, never silently zeroed or shared pages; the child's copies of
//!   `View` values are inert.
//!
//! Modules, bottom up (none imports this one): `sys` (raw system calls), `types` (the public
//! types, re-exported here), `bits` (atomic page bitmaps), `fault` (what the fault path shares,
//! and its fatal exit), `stack`, `shared` (a view's mechanism-independent state), the mechanisms
//! `uffd` and `segv`, `state` (a whole view's state, its unmapping and its fault routing),
//! `registry` (the signal handler) and `probe` (whether a mechanism works here).
#![allow(unsafe_code)] // `View::bind_to_node` (mbind); all other raw code lives in the submodules.

mod bits;
mod fault;
mod probe;
mod registry;
mod resident;
mod segv;
mod shared;
mod spare;
mod stack;
mod state;
mod sys;
mod types;
mod uffd;

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

pub use registry::MAX_VIEWS;
pub use types::{
    DirtyTracking, FillError, Mechanism, PageSource, Placement, ViewError, ViewOptions, ViewStats,
    PAGE_SIZE,
};

use state::{Backend, ViewState};

impl Mechanism {
    /// The mechanisms that work in this process (probed once and cached).
    pub fn available() -> Vec<Mechanism> {
        let mut v = Vec::with_capacity(2);
        if probe::uffd().is_ok() {
            v.push(Mechanism::Userfaultfd);
        }
        if probe::segv().is_ok() {
            v.push(Mechanism::Sigsegv);
        }
        v
    }

    /// Whether this mechanism works in this process.
    pub fn is_available(self) -> bool {
        match self {
            Mechanism::Userfaultfd => probe::uffd().is_ok(),
            Mechanism::Sigsegv => probe::segv().is_ok(),
        }
    }

    /// The faster mechanism on this machine, measured by `examples/fault_bench.rs` (see
    /// `docs/faults.md`), if available; otherwise the other one.
    pub fn best() -> Mechanism {
        // Measured: userfaultfd serves a read fault and tracks a write faster than sigsegv here,
        // and its dirty tracking costs no user-space fault per page (docs/faults.md).
        const PREFERENCE: [Mechanism; 2] = [Mechanism::Userfaultfd, Mechanism::Sigsegv];
        PREFERENCE
            .into_iter()
            .find(|m| m.is_available())
            .unwrap_or(Mechanism::Sigsegv)
    }

    /// The fault-around window a view of this mechanism takes when asked for `pages` (what
    /// [`View::set_fault_around`] returns): 1..=16 with userfaultfd, 1 (none) with sigsegv.
    pub fn fault_around_window(self, pages: usize) -> usize {
        match self {
            Mechanism::Userfaultfd => pages.clamp(1, uffd::AROUND_MAX),
            Mechanism::Sigsegv => 1,
        }
    }
}

impl DirtyTracking {
    /// Whether userfaultfd views with this tracking work here (probed once and cached).
    pub fn is_available(self) -> bool {
        probe::uffd_tracking(self).is_ok()
    }

    /// The default for userfaultfd views when neither the caller nor `PMO_DIRTY` chooses:
    /// [`DirtyTracking::Scan`] (cheaper writes, see `docs/faults.md`) where the kernel supports
    /// it (Linux 6.7+), else [`DirtyTracking::Fault`].
    pub fn default_for_userfaultfd() -> DirtyTracking {
        if probe::uffd_tracking(DirtyTracking::Scan).is_ok() {
            DirtyTracking::Scan
        } else {
            DirtyTracking::Fault
        }
    }
}

/// An application view of a PMO. `Send + Sync`; the memory at [`View::addr`] stays valid until
/// the `View` is dropped.
pub struct View {
    state: Arc<ViewState>,
    /// The registry slot (`None`: a resident view, which serves no faults).
    slot: Option<usize>,
}

impl fmt::Debug for View {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("View")
            .field("addr", &format_args!("{:#x}", self.state.shared.base))
            .field("len_bytes", &self.state.shared.len_bytes)
            .field("writable", &self.state.shared.writable)
            .field("mechanism", &self.state.shared.mechanism)
            .finish()
    }
}

impl View {
    /// Map a new view whose pages are filled from `source` on first touch.
    pub fn new(opts: ViewOptions, source: Arc<dyn PageSource>) -> Result<View, ViewError> {
        View::with_tracking(opts, source, None)
    }

    /// Like [`View::new`], choosing how a writable userfaultfd view tracks writes (`None`:
    /// [`DirtyTracking::from_env`], else [`DirtyTracking::default_for_userfaultfd`]). Ignored
    /// by the sigsegv mechanism, which always tracks by faults.
    pub fn with_tracking(
        opts: ViewOptions,
        source: Arc<dyn PageSource>,
        tracking: Option<DirtyTracking>,
    ) -> Result<View, ViewError> {
        let mechanism = checked_mechanism(&opts)?;
        let state = match mechanism {
            Mechanism::Userfaultfd => {
                let tracking = tracking
                    .or_else(DirtyTracking::from_env)
                    .unwrap_or_else(DirtyTracking::default_for_userfaultfd);
                let (shared, st) = uffd::create(&opts, source, tracking)?;
                ViewState {
                    shared,
                    backend: Backend::Uffd(st),
                }
            }
            Mechanism::Sigsegv => {
                let (shared, st) = segv::create(&opts, source, segv::Backing::Memfd)?;
                ViewState {
                    shared,
                    backend: Backend::Segv(st),
                }
            }
        };
        View::register(state)
    }

    /// A view whose pages live in `file` from byte `offset` (page aligned) instead of DRAM: the
    /// sigsegv mechanism over the file mapped twice (userfaultfd cannot serve missing pages of
    /// most file mappings). Filling a page writes it into the file; [`View::discard`] zeroes it
    /// there. `opts.mechanism` must be `None` or [`Mechanism::Sigsegv`]. Writes are tracked by
    /// faults.
    pub fn over_file(
        opts: ViewOptions,
        source: Arc<dyn PageSource>,
        file: &std::fs::File,
        offset: u64,
    ) -> Result<View, ViewError> {
        opts.check()?;
        if opts.mechanism == Some(Mechanism::Userfaultfd) {
            return Err(ViewError::Unsupported {
                mechanism: Mechanism::Userfaultfd,
                why: "a view over a file is served by the sigsegv mechanism".into(),
            });
        }
        probe::segv().map_err(|why| ViewError::Unsupported {
            mechanism: Mechanism::Sigsegv,
            why,
        })?;
        let (shared, st) = segv::create(&opts, source, segv::Backing::File { file, offset })?;
        View::register(ViewState {
            shared,
            backend: Backend::Segv(st),
        })
    }

    /// A resident view (issue 29's small sessions): every page filled from `source` now, so
    /// that no access faults, in mappings reused from an earlier resident view of the same
    /// range where the process kept one (zeroed at that view's drop). Writes are found by
    /// comparing each page with a twin ([`DirtyTracking::Twin`]), or with
    /// [`DirtyTracking::Declared`] only declared pages are reported. For views of at most
    /// [`resident_pages_max`] pages; a failed fill is an error. `mechanism` is what
    /// [`View::mechanism`] reports (the process's choice for views that fault; this one never
    /// does).
    pub fn resident(
        opts: ViewOptions,
        source: Arc<dyn PageSource>,
        tracking: DirtyTracking,
    ) -> Result<View, ViewError> {
        let mechanism = checked_mechanism(&opts)?;
        let (shared, st) = resident::create(&opts, source, tracking, mechanism)?;
        Ok(View {
            state: Arc::new(ViewState {
                shared,
                backend: Backend::Resident(st),
            }),
            slot: None,
        })
    }

    /// Whether this view is resident ([`View::resident`]).
    pub fn is_resident(&self) -> bool {
        matches!(self.state.backend, Backend::Resident(_))
    }

    fn register(state: ViewState) -> Result<View, ViewError> {
        let state = Arc::new(state);
        let slot = registry::register(&state)?;
        Ok(View {
            state,
            slot: Some(slot),
        })
    }

    /// First byte of the view.
    pub fn addr(&self) -> *mut u8 {
        self.state.shared.base as *mut u8
    }

    /// Length in bytes.
    pub fn len_bytes(&self) -> usize {
        self.state.shared.len_bytes
    }

    /// Number of pages.
    pub fn pages(&self) -> u64 {
        self.state.shared.pages
    }

    /// Whether the view is writable.
    pub fn writable(&self) -> bool {
        self.state.shared.writable
    }

    /// The mechanism serving this view's faults.
    pub fn mechanism(&self) -> Mechanism {
        self.state.shared.mechanism
    }

    /// How this view tracks writes (sigsegv: always [`DirtyTracking::Fault`]).
    pub fn dirty_tracking(&self) -> DirtyTracking {
        match &self.state.backend {
            Backend::Uffd(st) => st.tracking(),
            Backend::Segv(_) => DirtyTracking::Fault,
            Backend::Resident(st) => st.tracking(),
        }
    }

    /// Pages written since the previous call, ascending, appended to `out`. Write tracking is
    /// re-armed for each reported page before this returns, so a write racing with the call is
    /// reported now or next time, never lost. A read-only view reports nothing.
    ///
    /// With [`DirtyTracking::Twin`], pages that stay writable are reported too, but a writer
    /// racing with the caller's copy of them is not caught: use
    /// [`View::collect_dirty_with_twins`] and copy those pages from their twins.
    pub fn collect_dirty(&self, out: &mut Vec<u64>) -> Result<(), ViewError> {
        let mut twins = Vec::new();
        self.collect_dirty_with_twins(out, &mut twins)
    }

    /// [`View::collect_dirty`], also appending to `from_twin` (ascending) the reported pages
    /// that stay writable ([`DirtyTracking::Twin`]): the caller must read their contents from
    /// [`View::twin_addr`], a snapshot taken by this call, which stays unchanged until the next
    /// `collect_dirty*` or `discard` of the page. Callers that may collect from several threads
    /// serialise collect + copy. The other pages are read from the view as usual.
    pub fn collect_dirty_with_twins(
        &self,
        out: &mut Vec<u64>,
        from_twin: &mut Vec<u64>,
    ) -> Result<(), ViewError> {
        if !self.state.shared.writable {
            return Ok(());
        }
        match &self.state.backend {
            Backend::Uffd(st) => uffd::collect_dirty(&self.state.shared, st, out, from_twin),
            Backend::Segv(st) => segv::collect_dirty(&self.state.shared, st, out),
            Backend::Resident(st) => {
                resident::collect_dirty(&self.state.shared, st, out, from_twin)
            }
        }
    }

    /// The address of page `page_index`'s twin ([`DirtyTracking::Twin`]; `None` otherwise).
    /// Twins of consecutive pages are consecutive.
    pub fn twin_addr(&self, page_index: u64) -> Option<*const u8> {
        match &self.state.backend {
            Backend::Uffd(st) if page_index < self.state.shared.pages => st
                .twins()
                .map(|t| t.base().wrapping_add(page_index as usize * PAGE_SIZE)),
            Backend::Resident(st) if page_index < self.state.shared.pages => {
                st.twin_addr(page_index).map(|a| a as *const u8)
            }
            _ => None,
        }
    }

    /// Fault-around: on a missing-page fault that continues a sequential run (the page before
    /// it is present), fill up to `pages - 1` absent pages after it in the same trip and install
    /// them with one `UFFDIO_COPY`, the window doubling along the run (2, 4, ... `pages`) and
    /// falling back to one page on any other fault. `pages` is clamped to 1..=16; 1 (the
    /// default) turns it off. Returns the window set; the sigsegv mechanism has none (1).
    pub fn set_fault_around(&self, pages: usize) -> usize {
        match &self.state.backend {
            Backend::Uffd(st) => uffd::set_fault_around(st, pages),
            Backend::Segv(_) | Backend::Resident(_) => 1,
        }
    }

    /// Pages kept writable with a twin right now ([`DirtyTracking::Twin`]; 0 otherwise).
    pub fn hot_pages(&self) -> u64 {
        match &self.state.backend {
            Backend::Uffd(st) => st.twins().map_or(0, |t| t.hot_pages()),
            Backend::Segv(_) => 0,
            Backend::Resident(st) => {
                if st.twin_addr(0).is_some() {
                    self.state.shared.pages
                } else {
                    0
                }
            }
        }
    }

    /// Allocate the view's DRAM pages from now on from NUMA node `node` (`mbind`, `MPOL_BIND`):
    /// the plaintext cache near or far from the CPUs that use it. Call before the pages are
    /// filled. A view over a file keeps its pages in the file: an error.
    pub fn bind_to_node(&self, node: u32) -> Result<(), ViewError> {
        if let Backend::Resident(_) = &self.state.backend {
            return Err(ViewError::Unsupported {
                mechanism: self.state.shared.mechanism,
                why: "a resident view is filled when it is made: too late to place its pages"
                    .into(),
            });
        }
        if let Backend::Segv(st) = &self.state.backend {
            if st.file_backed() {
                return Err(ViewError::Unsupported {
                    mechanism: Mechanism::Sigsegv,
                    why: "a view over a file has no DRAM pages to place".into(),
                });
            }
        }
        // SAFETY: the view's own mapping; a memory policy changes no contents.
        unsafe { sys::mbind_node(self.state.shared.base, self.state.shared.len_bytes, node) }
            .map_err(|errno| ViewError::Os { op: "mbind", errno })
    }

    /// Append the pages filled so far (advisory while other threads fault or discard pages).
    pub fn resident_pages(&self, out: &mut Vec<u64>) {
        out.extend((0..self.state.shared.pages).filter(|&p| self.is_present(p)));
    }

    /// Whether the page has been filled (advisory while other threads fault or discard it).
    pub fn is_present(&self, page_index: u64) -> bool {
        if page_index >= self.state.shared.pages {
            return false;
        }
        match &self.state.backend {
            Backend::Uffd(st) => st.is_present(page_index),
            Backend::Segv(st) => st.is_present(page_index),
            Backend::Resident(_) => true,
        }
    }

    /// Install a page if not yet present (used by prediction); `Ok(false)` if it already was.
    /// Installed pages are clean (not reported dirty until written).
    pub fn install(&self, page_index: u64, data: &[u8; PAGE_SIZE]) -> Result<bool, ViewError> {
        self.state.shared.check_page(page_index)?;
        match &self.state.backend {
            Backend::Uffd(st) => uffd::install(&self.state.shared, st, page_index, data, false),
            Backend::Segv(st) => segv::install(&self.state.shared, st, page_index, data, false),
            Backend::Resident(_) => Ok(false),
        }
    }

    /// Fill every absent page now through the source (whole-PMO schemes). Pages filled here are
    /// clean; pages already present keep their state (a written page stays dirty).
    pub fn populate_all(&self) -> Result<(), ViewError> {
        self.fill_range(0..self.state.shared.pages, false)
    }

    /// Fill the absent pages overlapping the byte range `bytes` (offsets in the view) from normal
    /// context, clean. Use before handing view memory to a system call that *reads* it
    /// (`write(2)` from the view): the kernel's own accesses to a missing page get `EFAULT`
    /// instead of a fill.
    pub fn prefault(&self, bytes: Range<usize>) -> Result<(), ViewError> {
        let pages = self.byte_range_to_pages(bytes)?;
        self.fill_range(pages, false)
    }

    /// Like [`View::prefault`], for a system call that will *write* the range (`read(2)` into
    /// the view): the pages are filled (if absent) and made writable for the kernel. With
    /// [`DirtyTracking::Fault`] and the sigsegv mechanism every page of the range is reported by
    /// the next `collect_dirty`; with [`DirtyTracking::Scan`] the pages filled here are, and
    /// pages already present are reported if the kernel (or anyone) writes them.
    pub fn prefault_for_write(&self, bytes: Range<usize>) -> Result<(), ViewError> {
        if !self.state.shared.writable {
            return Err(ViewError::Os {
                op: "prefault_for_write on a read-only view",
                errno: libc::EACCES,
            });
        }
        let pages = self.byte_range_to_pages(bytes)?;
        self.fill_range(pages, true)
    }

    fn byte_range_to_pages(&self, bytes: Range<usize>) -> Result<Range<u64>, ViewError> {
        if bytes.start > bytes.end || bytes.end > self.state.shared.len_bytes {
            let page = (bytes.end.max(bytes.start) / PAGE_SIZE) as u64;
            return Err(ViewError::PageOutOfRange {
                page,
                pages: self.state.shared.pages,
            });
        }
        let first = (bytes.start / PAGE_SIZE) as u64;
        let end = bytes.end.div_ceil(PAGE_SIZE) as u64;
        Ok(first..end)
    }

    fn fill_range(&self, pages: Range<u64>, for_write: bool) -> Result<(), ViewError> {
        match &self.state.backend {
            Backend::Uffd(st) => uffd::fill_range(&self.state.shared, st, pages, for_write),
            Backend::Segv(st) => segv::fill_range(&self.state.shared, st, pages, for_write),
            Backend::Resident(_) => Ok(()),
        }
    }

    /// Report `page_index` again at the next `collect_dirty` if it is present (no-op if absent:
    /// an absent page equals its source). For a psync that failed after `collect_dirty` and
    /// keeps the application's changes: mark the collected pages dirty again, or they would be
    /// missing from the next psync.
    pub fn mark_dirty(&self, page_index: u64) -> Result<(), ViewError> {
        self.state.shared.check_page(page_index)?;
        if !self.state.shared.writable {
            return Ok(());
        }
        match &self.state.backend {
            Backend::Uffd(st) => uffd::mark_dirty(&self.state.shared, st, page_index),
            Backend::Segv(st) => segv::mark_dirty(&self.state.shared, st, page_index),
            Backend::Resident(st) => {
                resident::mark_dirty(st, page_index);
                Ok(())
            }
        }
    }

    /// Drop a page so that the next touch faults and fills again (cache eviction; rollback of a
    /// failed psync). Its unsaved writes are lost and it is no longer reported dirty. Ok even if
    /// absent.
    pub fn discard(&self, page_index: u64) -> Result<(), ViewError> {
        self.state.shared.check_page(page_index)?;
        match &self.state.backend {
            Backend::Uffd(st) => uffd::discard(&self.state.shared, st, page_index),
            Backend::Segv(st) => segv::discard(&self.state.shared, st, page_index),
            Backend::Resident(st) => resident::discard(&self.state.shared, st, page_index),
        }
    }

    /// Counters since creation.
    pub fn stats(&self) -> ViewStats {
        self.state.shared.stats.snapshot()
    }
}

impl Drop for View {
    fn drop(&mut self) {
        // Unregister and wait for handlers inside this view; `shared` (and with it the mappings
        // and descriptors) is dropped right after, when no handler can reach it any more.
        if let Some(slot) = self.slot {
            registry::unregister(slot);
        }
    }
}

/// Check `opts` and the views' environment variables (a set but unparsable one is an error,
/// whichever kind of view is made), and resolve the mechanism: `opts`', else `PMO_FAULT`'s,
/// else the best available.
fn checked_mechanism(opts: &ViewOptions) -> Result<Mechanism, ViewError> {
    opts.check()?;
    check_env("PMO_FAULT", "one of userfaultfd, sigsegv", |v| {
        Mechanism::from_name(v).is_some()
    })?;
    check_env("PMO_DIRTY", "one of scan, fault, declared, twin", |v| {
        DirtyTracking::from_name(v).is_some()
    })?;
    let number = |v: &str| v.trim().parse::<u64>().is_ok();
    check_env("PMO_RESIDENT_PAGES", "a number of pages", number)?;
    check_env("PMO_VIEW_SPARE_BYTES", "a number of bytes", number)?;
    Ok(opts
        .mechanism
        .or_else(Mechanism::from_env)
        .unwrap_or_else(Mechanism::best))
}

/// A set but unparsable `var` is an error rather than a silent fallback to the default.
fn check_env(
    var: &'static str,
    expected: &'static str,
    valid: impl Fn(&str) -> bool,
) -> Result<(), ViewError> {
    match std::env::var(var) {
        Ok(value) if !value.trim().is_empty() && !valid(&value) => Err(ViewError::InvalidEnv {
            var,
            value,
            expected,
        }),
        _ => Ok(()),
    }
}

pub use resident::{resident_pages_max, DEFAULT_RESIDENT_PAGES};
pub use spare::{
    kept_at as spare_kept_at, kept_bytes as spare_bytes_kept, release_all as release_spares,
};

/// Number of live views in the process (diagnostics).
pub fn live_views() -> usize {
    registry::live_views()
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn view_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<View>();
    }
}

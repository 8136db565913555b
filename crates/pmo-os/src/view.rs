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
#![allow(unsafe_code)] // `Shared::drop` unmaps the view; all other raw code lives in the submodules.

mod registry;
mod segv;
mod stack;
mod sys;
mod uffd;

use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

pub use registry::MAX_VIEWS;

/// Size of a PMO page (and of an OS page on the platforms pmo supports).
pub const PAGE_SIZE: usize = 4096;

/// How faults on a view are served.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mechanism {
    /// userfaultfd with SIGBUS delivery and `UFFDIO_COPY`; write-protect dirty tracking
    /// ([`DirtyTracking`]).
    Userfaultfd,
    /// `SIGSEGV` + `mprotect` over a memfd mapped twice.
    Sigsegv,
}

impl Mechanism {
    /// The mechanisms that work in this process (probed once and cached).
    pub fn available() -> Vec<Mechanism> {
        let mut v = Vec::with_capacity(2);
        if uffd::probe().is_ok() {
            v.push(Mechanism::Userfaultfd);
        }
        if segv::probe().is_ok() {
            v.push(Mechanism::Sigsegv);
        }
        v
    }

    /// Whether this mechanism works in this process.
    pub fn is_available(self) -> bool {
        match self {
            Mechanism::Userfaultfd => uffd::probe().is_ok(),
            Mechanism::Sigsegv => segv::probe().is_ok(),
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

    /// Stable lower-case name: `"userfaultfd"` / `"sigsegv"`.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Userfaultfd => "userfaultfd",
            Mechanism::Sigsegv => "sigsegv",
        }
    }

    /// Parse a name as printed by [`Mechanism::name`].
    pub fn from_name(name: &str) -> Option<Mechanism> {
        match name.trim() {
            "userfaultfd" | "uffd" => Some(Mechanism::Userfaultfd),
            "sigsegv" | "segv" => Some(Mechanism::Sigsegv),
            _ => None,
        }
    }

    /// The fault-around window a view of this mechanism takes when asked for `pages` (what
    /// [`View::set_fault_around`] returns): 1..=16 with userfaultfd, 1 (none) with sigsegv.
    pub fn fault_around_window(self, pages: usize) -> usize {
        match self {
            Mechanism::Userfaultfd => pages.clamp(1, uffd::AROUND_MAX),
            Mechanism::Sigsegv => 1,
        }
    }

    /// The mechanism named by the environment variable `PMO_FAULT` (`userfaultfd` | `sigsegv`).
    pub fn from_env() -> Option<Mechanism> {
        std::env::var("PMO_FAULT")
            .ok()
            .and_then(|v| Mechanism::from_name(&v))
    }
}

impl fmt::Display for Mechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a writable userfaultfd view finds its written pages (the sigsegv mechanism always uses
/// faults). Choose by workload; figures in `docs/faults.md`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DirtyTracking {
    /// Asynchronous write-protect: the kernel un-protects a page on its first write without
    /// telling anyone (about 1 µs); `collect_dirty` scans the page tables of the touched 2 MiB
    /// regions with `PAGEMAP_SCAN` (about 2 ns per resident page). Best when many pages are
    /// written between collects, or few pages are resident.
    Scan,
    /// Synchronous write-protect: the first write to a page after a collect faults to the
    /// handler (`SIGBUS`), which un-protects it and sets its dirty bit (about 4-5 µs);
    /// `collect_dirty` costs O(dirty pages) plus a bitmap scan. Best for large resident views
    /// with few writes per collect.
    Fault,
    /// No write protection at all: the view is registered for missing pages only and pages are
    /// installed writable. Only pages declared with [`View::mark_dirty`] (one atomic OR each)
    /// are reported; writes that are not declared are not reported. The contract of PMDK's
    /// `pmemobj_tx_add_range`, for callers that know what they write: writes cost nothing
    /// extra and `collect_dirty` makes no system call. The sigsegv mechanism tracks by faults
    /// regardless, and also reports declared pages.
    Declared,
    /// [`DirtyTracking::Fault`] for cold pages, and hot pages stay writable: a page filled on a
    /// fault, or reported written in two consecutive collects, keeps a twin (a copy of its committed contents, at most
    /// `PMO_HOT_PAGES` pages per view, 16384 by default) and is not write-protected;
    /// `collect_dirty` compares each hot page with its twin (about 0.1-0.3 µs a page instead
    /// of a 4-5 µs fault per page written), reports the changed ones and re-protects the
    /// unchanged ones. Use [`View::collect_dirty_with_twins`]: a changed hot page stays
    /// writable, so a commit must read its twin, a stable snapshot, not the view.
    Twin,
}

impl DirtyTracking {
    /// Stable lower-case name: `"scan"` / `"fault"` / `"declared"` / `"twin"`.
    pub fn name(self) -> &'static str {
        match self {
            DirtyTracking::Scan => "scan",
            DirtyTracking::Fault => "fault",
            DirtyTracking::Declared => "declared",
            DirtyTracking::Twin => "twin",
        }
    }

    /// Parse a name as printed by [`DirtyTracking::name`].
    pub fn from_name(name: &str) -> Option<DirtyTracking> {
        match name.trim() {
            "scan" => Some(DirtyTracking::Scan),
            "fault" => Some(DirtyTracking::Fault),
            "declared" => Some(DirtyTracking::Declared),
            "twin" => Some(DirtyTracking::Twin),
            _ => None,
        }
    }

    /// The tracking named by the environment variable `PMO_DIRTY` (`scan` | `fault` |
    /// `declared` | `twin`).
    pub fn from_env() -> Option<DirtyTracking> {
        std::env::var("PMO_DIRTY")
            .ok()
            .and_then(|v| DirtyTracking::from_name(&v))
    }

    /// Whether userfaultfd views with this tracking work here (probed once and cached).
    pub fn is_available(self) -> bool {
        uffd::probe_tracking(self).is_ok()
    }

    /// The default for userfaultfd views when neither the caller nor `PMO_DIRTY` chooses:
    /// [`DirtyTracking::Scan`] (cheaper writes, see `docs/faults.md`) where the kernel supports
    /// it (Linux 6.7+), else [`DirtyTracking::Fault`].
    pub fn default_for_userfaultfd() -> DirtyTracking {
        if uffd::probe_tracking(DirtyTracking::Scan).is_ok() {
            DirtyTracking::Scan
        } else {
            DirtyTracking::Fault
        }
    }
}

impl fmt::Display for DirtyTracking {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where the view is mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Wherever the kernel chooses.
    Anywhere,
    /// Exactly at this (page-aligned) address, with `MAP_FIXED_NOREPLACE`; a taken range is
    /// [`ViewError::AddressInUse`], never replaced.
    Fixed(usize),
}

/// Parameters of [`View::new`].
#[derive(Clone, Copy, Debug)]
pub struct ViewOptions {
    /// Length in bytes: a multiple of [`PAGE_SIZE`], greater than zero.
    pub len_bytes: usize,
    /// Where to map.
    pub placement: Placement,
    /// Read-write (with dirty tracking) or read-only (`PROT_READ`, no tracking).
    pub writable: bool,
    /// `None`: [`Mechanism::from_env`], else [`Mechanism::best`].
    pub mechanism: Option<Mechanism>,
}

impl ViewOptions {
    fn check(&self) -> Result<(), ViewError> {
        if self.len_bytes == 0
            || self.len_bytes & (PAGE_SIZE - 1) != 0
            || self.len_bytes > isize::MAX as usize / 2
        {
            return Err(ViewError::InvalidLength);
        }
        if let Placement::Fixed(addr) = self.placement {
            if addr == 0
                || addr & (PAGE_SIZE - 1) != 0
                || addr.checked_add(self.len_bytes).is_none()
            {
                return Err(ViewError::InvalidAddress { addr });
            }
        }
        Ok(())
    }

    /// A writable view of `len_bytes` anywhere, with the default mechanism.
    pub fn new(len_bytes: usize) -> ViewOptions {
        ViewOptions {
            len_bytes,
            placement: Placement::Anywhere,
            writable: true,
            mechanism: None,
        }
    }
}

/// Why a page could not be filled. `reason` is static so that building it allocates nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FillError {
    /// Short human-readable reason, e.g. `"authentication tag mismatch"`.
    pub reason: &'static str,
}

/// Fills a page on its first touch.
///
/// Runs on the faulting thread inside a signal handler: implementations must not allocate, must
/// not take locks the application may hold, must not panic, must not touch any view, and must
/// keep their stack use modest (with the sigsegv mechanism they may run on the thread's
/// alternate signal stack, 8 KiB or more on threads made by Rust's std). If `fill` fails on the
/// fault path, the process prints `pmo: integrity error in PMO '<label>' page <n>: <reason>` to
/// stderr and dies with `SIGBUS`; from [`View::populate_all`], [`View::prefault`] it is an error.
pub trait PageSource: Send + Sync + 'static {
    /// Write the contents of page `page_index` into `dst`.
    fn fill(&self, page_index: u64, dst: &mut [u8; PAGE_SIZE]) -> Result<(), FillError>;
    /// A name for messages, e.g. the PMO name. Called from the fault path: must not allocate.
    fn label(&self) -> &str;
}

/// Errors of view operations.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ViewError {
    /// A fixed placement overlaps an existing mapping.
    #[error("address range {addr:#x}..+{len:#x} is already in use")]
    AddressInUse { addr: usize, len: usize },
    /// The requested mechanism does not work here.
    #[error("fault mechanism {mechanism} is not available: {why}")]
    Unsupported { mechanism: Mechanism, why: String },
    /// A system call failed.
    #[error("{op} failed: {}", std::io::Error::from_raw_os_error(*errno))]
    Os { op: &'static str, errno: i32 },
    /// The page source could not fill a page (outside the fault path).
    #[error("fill of page {page} failed: {reason}")]
    Fill { page: u64, reason: &'static str },
    /// Length zero or not a multiple of the page size.
    #[error("view length must be a non-zero multiple of {PAGE_SIZE} bytes")]
    InvalidLength,
    /// A fixed address that is not page-aligned (or a range that overflows).
    #[error("address {addr:#x} is not page-aligned or the range overflows")]
    InvalidAddress { addr: usize },
    /// The registry of live views is full.
    #[error("too many live views (at most {max})")]
    TooManyViews { max: usize },
    /// An environment variable that chooses a mechanism or tracking has an unknown value.
    #[error("{var}={value:?} is not one of {expected}")]
    InvalidEnv {
        var: &'static str,
        value: String,
        expected: &'static str,
    },
    /// A page index or byte range outside the view.
    #[error("page {page} is outside the view ({pages} pages)")]
    PageOutOfRange { page: u64, pages: u64 },
}

/// Counters of a view since it was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ViewStats {
    /// Faults served by the handler (first touches, and with sigsegv also write faults).
    pub faults: u64,
    /// Pages filled through the source (fault path, populate, prefault).
    pub fills: u64,
    /// Write faults the mechanism saw (sigsegv: each first write after a collect; userfaultfd:
    /// only first touches that were writes, later writes are resolved by the kernel unseen).
    pub write_faults: u64,
    /// Total time spent inside `PageSource::fill`, nanoseconds.
    pub fill_ns: u64,
    /// Total time the fault handler spent serving faults of this view (fill, install, write
    /// tracking), nanoseconds. The kernel's delivery of the fault signal is not included.
    pub service_ns: u64,
}

/// What the hardware said about a faulting access, where it says anything (x86-64).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct FaultKind {
    /// The access was a write.
    pub(crate) write: Option<bool>,
    /// The page was present (a protection fault, not a missing page).
    pub(crate) present: Option<bool>,
}

#[derive(Default)]
pub(crate) struct StatCounters {
    faults: AtomicU64,
    fills: AtomicU64,
    write_faults: AtomicU64,
    fill_ns: AtomicU64,
    service_ns: AtomicU64,
}

pub(crate) enum Backend {
    Uffd(uffd::UffdState),
    Segv(segv::SegvState),
}

/// The state shared between a [`View`] handle and the fault handler.
pub(crate) struct Shared {
    pub(crate) base: usize,
    pub(crate) len_bytes: usize,
    pub(crate) pages: u64,
    pub(crate) writable: bool,
    pub(crate) mechanism: Mechanism,
    pub(crate) source: Arc<dyn PageSource>,
    pub(crate) stats: StatCounters,
    pub(crate) backend: Backend,
    /// The process that created the view. A fork child inherits the `View` value and the
    /// registry entry but not the mapping (`MADV_DONTFORK`): there the view is inert.
    pub(crate) owner_pid: u32,
}

impl Shared {
    /// Fill `page` into `dst` through the source, counting time. Async-signal-safe.
    pub(crate) fn fill_page(&self, page: u64, dst: &mut [u8; PAGE_SIZE]) -> Result<(), FillError> {
        let t0 = sys::now_ns();
        let r = self.source.fill(page, dst);
        let dt = sys::now_ns().saturating_sub(t0);
        self.stats.fill_ns.fetch_add(dt, Ordering::Relaxed);
        self.stats.fills.fetch_add(1, Ordering::Relaxed);
        r
    }

    pub(crate) fn count_fault(&self, write: bool) {
        self.stats.faults.fetch_add(1, Ordering::Relaxed);
        if write {
            self.stats.write_faults.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn page_addr(&self, page: u64) -> usize {
        self.base + page as usize * PAGE_SIZE
    }

    /// Called by the registry's signal handler for a fault at `addr` inside this view.
    pub(crate) fn service_fault(
        &self,
        sig: libc::c_int,
        addr: usize,
        kind: FaultKind,
    ) -> registry::Outcome {
        let page = ((addr - self.base) / PAGE_SIZE) as u64;
        let t0 = sys::now_ns();
        let outcome = match &self.backend {
            Backend::Uffd(st) if sig == libc::SIGBUS => uffd::service(self, st, page, kind),
            Backend::Segv(st) if sig == libc::SIGSEGV => segv::service(self, st, page, kind.write),
            _ => return registry::Outcome::NotOurs,
        };
        let dt = sys::now_ns().saturating_sub(t0);
        self.stats.service_ns.fetch_add(dt, Ordering::Relaxed);
        outcome
    }

    fn check_page(&self, page: u64) -> Result<(), ViewError> {
        if page < self.pages {
            Ok(())
        } else {
            Err(ViewError::PageOutOfRange {
                page,
                pages: self.pages,
            })
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        if sys::getpid() != self.owner_pid {
            // A fork child's copy: the mapping was never inherited, and the range may hold
            // something else of the child's by now. Only the descriptors (closed by their own
            // drops) are the child's.
            return;
        }
        // SAFETY: the view is unregistered (View::drop) and no handler is inside it; the mapping
        // is ours and no reference into it outlives the View (the API only hands out raw
        // addresses, documented as invalid after drop).
        unsafe { sys::unmap(self.base, self.len_bytes) };
        if let Backend::Segv(st) = &self.backend {
            // SAFETY: the alias mapping is private to this view and no longer used.
            unsafe { sys::unmap(st.alias, self.len_bytes) };
        }
    }
}

/// An application view of a PMO. `Send + Sync`; the memory at [`View::addr`] stays valid until
/// the `View` is dropped.
pub struct View {
    shared: Arc<Shared>,
    slot: usize,
}

impl fmt::Debug for View {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("View")
            .field("addr", &format_args!("{:#x}", self.shared.base))
            .field("len_bytes", &self.shared.len_bytes)
            .field("writable", &self.shared.writable)
            .field("mechanism", &self.shared.mechanism)
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
        opts.check()?;
        check_env("PMO_FAULT", "userfaultfd, sigsegv", |v| {
            Mechanism::from_name(v).is_some()
        })?;
        check_env("PMO_DIRTY", "scan, fault, declared, twin", |v| {
            DirtyTracking::from_name(v).is_some()
        })?;
        let mechanism = opts
            .mechanism
            .or_else(Mechanism::from_env)
            .unwrap_or_else(Mechanism::best);
        let shared = match mechanism {
            Mechanism::Userfaultfd => {
                let tracking = tracking
                    .or_else(DirtyTracking::from_env)
                    .unwrap_or_else(DirtyTracking::default_for_userfaultfd);
                uffd::create(&opts, source, tracking)?
            }
            Mechanism::Sigsegv => segv::create(&opts, source, segv::Backing::Memfd)?,
        };
        View::register(shared)
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
        segv::probe().map_err(|why| ViewError::Unsupported {
            mechanism: Mechanism::Sigsegv,
            why,
        })?;
        let shared = segv::create(&opts, source, segv::Backing::File { file, offset })?;
        View::register(shared)
    }

    fn register(shared: Shared) -> Result<View, ViewError> {
        let shared = Arc::new(shared);
        let slot = registry::register(&shared)?;
        Ok(View { shared, slot })
    }

    /// First byte of the view.
    pub fn addr(&self) -> *mut u8 {
        self.shared.base as *mut u8
    }

    /// Length in bytes.
    pub fn len_bytes(&self) -> usize {
        self.shared.len_bytes
    }

    /// Number of pages.
    pub fn pages(&self) -> u64 {
        self.shared.pages
    }

    /// Whether the view is writable.
    pub fn writable(&self) -> bool {
        self.shared.writable
    }

    /// The mechanism serving this view's faults.
    pub fn mechanism(&self) -> Mechanism {
        self.shared.mechanism
    }

    /// How this view tracks writes (sigsegv: always [`DirtyTracking::Fault`]).
    pub fn dirty_tracking(&self) -> DirtyTracking {
        match &self.shared.backend {
            Backend::Uffd(st) => st.tracking(),
            Backend::Segv(_) => DirtyTracking::Fault,
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
        if !self.shared.writable {
            return Ok(());
        }
        match &self.shared.backend {
            Backend::Uffd(st) => uffd::collect_dirty(&self.shared, st, out, from_twin),
            Backend::Segv(st) => segv::collect_dirty(&self.shared, st, out),
        }
    }

    /// The address of page `page_index`'s twin ([`DirtyTracking::Twin`]; `None` otherwise).
    /// Twins of consecutive pages are consecutive.
    pub fn twin_addr(&self, page_index: u64) -> Option<*const u8> {
        match &self.shared.backend {
            Backend::Uffd(st) if page_index < self.shared.pages => st
                .twins()
                .map(|t| t.base().wrapping_add(page_index as usize * PAGE_SIZE)),
            _ => None,
        }
    }

    /// Fault-around: on a missing-page fault that continues a sequential run (the page before
    /// it is present), fill up to `pages - 1` absent pages after it in the same trip and install
    /// them with one `UFFDIO_COPY`, the window doubling along the run (2, 4, ... `pages`) and
    /// falling back to one page on any other fault. `pages` is clamped to 1..=16; 1 (the
    /// default) turns it off. Returns the window set; the sigsegv mechanism has none (1).
    pub fn set_fault_around(&self, pages: usize) -> usize {
        match &self.shared.backend {
            Backend::Uffd(st) => uffd::set_fault_around(st, pages),
            Backend::Segv(_) => 1,
        }
    }

    /// Pages kept writable with a twin right now ([`DirtyTracking::Twin`]; 0 otherwise).
    pub fn hot_pages(&self) -> u64 {
        match &self.shared.backend {
            Backend::Uffd(st) => st.twins().map_or(0, |t| t.hot_pages()),
            Backend::Segv(_) => 0,
        }
    }

    /// Allocate the view's DRAM pages from now on from NUMA node `node` (`mbind`, `MPOL_BIND`):
    /// the plaintext cache near or far from the CPUs that use it. Call before the pages are
    /// filled. A view over a file keeps its pages in the file: an error.
    pub fn bind_to_node(&self, node: u32) -> Result<(), ViewError> {
        if let Backend::Segv(st) = &self.shared.backend {
            if st.file_backed() {
                return Err(ViewError::Unsupported {
                    mechanism: Mechanism::Sigsegv,
                    why: "a view over a file has no DRAM pages to place".into(),
                });
            }
        }
        // SAFETY: the view's own mapping; a memory policy changes no contents.
        unsafe { sys::mbind_node(self.shared.base, self.shared.len_bytes, node) }
            .map_err(|errno| ViewError::Os { op: "mbind", errno })
    }

    /// Append the pages filled so far (advisory while other threads fault or discard pages).
    pub fn resident_pages(&self, out: &mut Vec<u64>) {
        out.extend((0..self.shared.pages).filter(|&p| self.is_present(p)));
    }

    /// Whether the page has been filled (advisory while other threads fault or discard it).
    pub fn is_present(&self, page_index: u64) -> bool {
        if page_index >= self.shared.pages {
            return false;
        }
        match &self.shared.backend {
            Backend::Uffd(st) => st.is_present(page_index),
            Backend::Segv(st) => st.is_present(page_index),
        }
    }

    /// Install a page if not yet present (used by prediction); `Ok(false)` if it already was.
    /// Installed pages are clean (not reported dirty until written).
    pub fn install(&self, page_index: u64, data: &[u8; PAGE_SIZE]) -> Result<bool, ViewError> {
        self.shared.check_page(page_index)?;
        match &self.shared.backend {
            Backend::Uffd(st) => uffd::install(&self.shared, st, page_index, data, false),
            Backend::Segv(st) => segv::install(&self.shared, st, page_index, data, false),
        }
    }

    /// Fill every absent page now through the source (whole-PMO schemes). Pages filled here are
    /// clean; pages already present keep their state (a written page stays dirty).
    pub fn populate_all(&self) -> Result<(), ViewError> {
        self.fill_range(0..self.shared.pages, false)
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
        if !self.shared.writable {
            return Err(ViewError::Os {
                op: "prefault_for_write on a read-only view",
                errno: libc::EACCES,
            });
        }
        let pages = self.byte_range_to_pages(bytes)?;
        self.fill_range(pages, true)
    }

    fn byte_range_to_pages(&self, bytes: Range<usize>) -> Result<Range<u64>, ViewError> {
        if bytes.start > bytes.end || bytes.end > self.shared.len_bytes {
            let page = (bytes.end.max(bytes.start) / PAGE_SIZE) as u64;
            return Err(ViewError::PageOutOfRange {
                page,
                pages: self.shared.pages,
            });
        }
        let first = (bytes.start / PAGE_SIZE) as u64;
        let end = bytes.end.div_ceil(PAGE_SIZE) as u64;
        Ok(first..end)
    }

    fn fill_range(&self, pages: Range<u64>, for_write: bool) -> Result<(), ViewError> {
        match &self.shared.backend {
            Backend::Uffd(st) => uffd::fill_range(&self.shared, st, pages, for_write),
            Backend::Segv(st) => segv::fill_range(&self.shared, st, pages, for_write),
        }
    }

    /// Report `page_index` again at the next `collect_dirty` if it is present (no-op if absent:
    /// an absent page equals its source). For a psync that failed after `collect_dirty` and
    /// keeps the application's changes: mark the collected pages dirty again, or they would be
    /// missing from the next psync.
    pub fn mark_dirty(&self, page_index: u64) -> Result<(), ViewError> {
        self.shared.check_page(page_index)?;
        if !self.shared.writable {
            return Ok(());
        }
        match &self.shared.backend {
            Backend::Uffd(st) => uffd::mark_dirty(&self.shared, st, page_index),
            Backend::Segv(st) => segv::mark_dirty(&self.shared, st, page_index),
        }
    }

    /// Drop a page so that the next touch faults and fills again (cache eviction; rollback of a
    /// failed psync). Its unsaved writes are lost and it is no longer reported dirty. Ok even if
    /// absent.
    pub fn discard(&self, page_index: u64) -> Result<(), ViewError> {
        self.shared.check_page(page_index)?;
        match &self.shared.backend {
            Backend::Uffd(st) => uffd::discard(&self.shared, st, page_index),
            Backend::Segv(st) => segv::discard(&self.shared, st, page_index),
        }
    }

    /// Counters since creation.
    pub fn stats(&self) -> ViewStats {
        let s = &self.shared.stats;
        ViewStats {
            faults: s.faults.load(Ordering::Relaxed),
            fills: s.fills.load(Ordering::Relaxed),
            write_faults: s.write_faults.load(Ordering::Relaxed),
            fill_ns: s.fill_ns.load(Ordering::Relaxed),
            service_ns: s.service_ns.load(Ordering::Relaxed),
        }
    }
}

impl Drop for View {
    fn drop(&mut self) {
        // Unregister and wait for handlers inside this view; `shared` (and with it the mappings
        // and descriptors) is dropped right after, when no handler can reach it any more.
        registry::unregister(self.slot);
    }
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

/// Number of live views in the process (diagnostics).
pub fn live_views() -> usize {
    registry::live_views()
}

/// Cached probe result shared by the mechanism modules.
pub(crate) type Probe = OnceLock<Result<(), String>>;

/// Map the application's range for a new view.
pub(crate) fn map_view(
    opts: &ViewOptions,
    prot: libc::c_int,
    flags: libc::c_int,
    fd: i32,
    offset: u64,
) -> Result<usize, ViewError> {
    let (hint, fixed) = match opts.placement {
        Placement::Anywhere => (0, false),
        Placement::Fixed(addr) => (addr, true),
    };
    match sys::map_at(hint, opts.len_bytes, prot, flags, fd, offset, fixed) {
        Ok(addr) => Ok(addr),
        Err(sys::MapError::AddressInUse) => Err(ViewError::AddressInUse {
            addr: hint,
            len: opts.len_bytes,
        }),
        Err(sys::MapError::Os(errno)) => Err(ViewError::Os { op: "mmap", errno }),
    }
}

/// Atomic bitmap with one bit per page.
pub(crate) struct PageBits {
    words: Box<[AtomicU64]>,
    /// Bit `w % 64` of word `w / 64` is set when word `w` may be non-zero, so that draining a
    /// large, mostly clean bitmap costs O(set words), not O(pages / 64). A setter sets the
    /// summary bit after the word bit (only when the word was zero before); a drainer swaps
    /// the summary word, then the words it flags: a bit set concurrently is either taken now
    /// or flagged for the next drain, never lost.
    summary: Box<[AtomicU64]>,
}

impl PageBits {
    pub(crate) fn new(pages: u64) -> PageBits {
        let words = pages.div_ceil(64) as usize;
        PageBits {
            words: (0..words).map(|_| AtomicU64::new(0)).collect(),
            summary: (0..words.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
        }
    }
    pub(crate) fn set(&self, page: u64) -> bool {
        let bit = 1u64 << (page % 64);
        let w = (page / 64) as usize;
        let old = self.words[w].fetch_or(bit, Ordering::AcqRel);
        if old == 0 {
            self.summary[w / 64].fetch_or(1u64 << (w % 64), Ordering::AcqRel);
        }
        old & bit != 0
    }
    pub(crate) fn clear(&self, page: u64) {
        self.words[(page / 64) as usize].fetch_and(!(1u64 << (page % 64)), Ordering::AcqRel);
    }
    pub(crate) fn get(&self, page: u64) -> bool {
        self.words[(page / 64) as usize].load(Ordering::Acquire) & (1u64 << (page % 64)) != 0
    }
    /// Visit every set bit in ascending order without clearing (bits set or cleared meanwhile
    /// may or may not be seen).
    pub(crate) fn for_each_set(&self, mut visit: impl FnMut(u64)) {
        for (s, flags) in self.summary.iter().enumerate() {
            let mut groups = flags.load(Ordering::Acquire);
            while groups != 0 {
                let w = s * 64 + groups.trailing_zeros() as usize;
                groups &= groups - 1;
                let mut bits = self.words[w].load(Ordering::Acquire);
                while bits != 0 {
                    visit(w as u64 * 64 + bits.trailing_zeros() as u64);
                    bits &= bits - 1;
                }
            }
        }
    }
    /// Word `w` (pages `64 * w ..`): one bit per page.
    pub(crate) fn word(&self, w: usize) -> u64 {
        self.words[w].load(Ordering::Acquire)
    }
    #[cfg(test)]
    pub(crate) fn words(&self) -> &[AtomicU64] {
        &self.words
    }
    /// Take every set bit, word by word in ascending order: `visit(word_index, bits)` gets each
    /// non-zero word after it was swapped to zero. If `visit` fails, the drain stops there; the
    /// words not visited yet keep their bits (and their summary flags), and the caller owns the
    /// bits it was handed.
    pub(crate) fn drain<E>(
        &self,
        mut visit: impl FnMut(u64, u64) -> Result<(), E>,
    ) -> Result<(), E> {
        for (s, flags) in self.summary.iter().enumerate() {
            if flags.load(Ordering::Acquire) == 0 {
                continue;
            }
            let mut groups = flags.swap(0, Ordering::AcqRel);
            while groups != 0 {
                let w = s * 64 + groups.trailing_zeros() as usize;
                groups &= groups - 1;
                let bits = self.words[w].swap(0, Ordering::AcqRel);
                if bits == 0 {
                    continue;
                }
                if let Err(e) = visit(w as u64, bits) {
                    flags.fetch_or(groups, Ordering::AcqRel);
                    return Err(e);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_bits_set_get_clear() {
        let bits = PageBits::new(130);
        assert_eq!(bits.words().len(), 3);
        assert!(!bits.set(0));
        assert!(bits.set(0), "second set reports the bit was set");
        bits.set(64);
        bits.set(129);
        assert!(bits.get(0) && bits.get(64) && bits.get(129) && !bits.get(1));
        bits.clear(64);
        assert!(!bits.get(64));
        assert_eq!(bits.words()[2].load(Ordering::Relaxed), 1 << 1);
    }

    #[test]
    fn page_bits_drain_takes_every_set_bit_once() {
        let pages = 64 * 64 * 3 + 5;
        let bits = PageBits::new(pages);
        let set = [0u64, 63, 64, 4095, 4096, 8191, 9000, pages - 1];
        for &p in &set {
            bits.set(p);
        }
        bits.clear(9000);
        let mut seen = Vec::new();
        bits.drain(|w, mut b| -> Result<(), ()> {
            while b != 0 {
                seen.push(w * 64 + b.trailing_zeros() as u64);
                b &= b - 1;
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, vec![0, 63, 64, 4095, 4096, 8191, pages - 1]);
        let mut again = 0;
        bits.drain(|_, _| -> Result<(), ()> {
            again += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(again, 0, "a drain leaves nothing behind");
        // A failing visit keeps the words it did not reach.
        for &p in &[1u64, 200, 300] {
            bits.set(p);
        }
        let mut first = Vec::new();
        assert!(bits
            .drain(|w, _| {
                first.push(w);
                Err(())
            })
            .is_err());
        assert_eq!(first, vec![0]);
        let mut rest = Vec::new();
        bits.drain(|w, _| -> Result<(), ()> {
            rest.push(w);
            Ok(())
        })
        .unwrap();
        assert_eq!(
            rest,
            vec![3, 4],
            "words 3 (page 200) and 4 (page 300) survive the failure"
        );
    }

    #[test]
    fn names_round_trip() {
        for m in [Mechanism::Userfaultfd, Mechanism::Sigsegv] {
            assert_eq!(Mechanism::from_name(m.name()), Some(m));
            assert_eq!(m.to_string(), m.name());
        }
        for t in [
            DirtyTracking::Scan,
            DirtyTracking::Fault,
            DirtyTracking::Declared,
            DirtyTracking::Twin,
        ] {
            assert_eq!(DirtyTracking::from_name(t.name()), Some(t));
        }
        assert_eq!(Mechanism::from_name("mprotect"), None);
        assert_eq!(DirtyTracking::from_name(""), None);
    }

    #[test]
    fn view_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<View>();
    }

    #[test]
    fn errors_read_well() {
        let e = ViewError::Os {
            op: "mmap",
            errno: libc::ENOMEM,
        };
        assert!(e.to_string().starts_with("mmap failed: "), "{e}");
        let e = ViewError::AddressInUse {
            addr: 0x7000_0000,
            len: 0x1000,
        };
        assert_eq!(
            e.to_string(),
            "address range 0x70000000..+0x1000 is already in use"
        );
    }
}

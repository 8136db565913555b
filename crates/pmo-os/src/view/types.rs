//! The public vocabulary of views: the page size, the mechanisms and dirty trackings by name,
//! the options of a new view, the page-source contract and the errors. Plain types: nothing
//! here maps memory, probes the kernel or touches a fault handler (the probing methods of
//! [`Mechanism`] and [`DirtyTracking`] are in the parent module, beside [`super::View`]).
//! Re-exported by `view` at the same paths (`pmo_os::view::ViewError`, ...).

use std::fmt;

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
    ///
    /// [`View::mark_dirty`]: super::View::mark_dirty
    Declared,
    /// [`DirtyTracking::Fault`] for cold pages, and hot pages stay writable: a page filled on a
    /// fault, or reported written in two consecutive collects, keeps a twin (a copy of its committed contents, at most
    /// `PMO_HOT_PAGES` pages per view, 16384 by default) and is not write-protected;
    /// `collect_dirty` compares each hot page with its twin (about 0.1-0.3 µs a page instead
    /// of a 4-5 µs fault per page written), reports the changed ones and re-protects the
    /// unchanged ones. Use [`View::collect_dirty_with_twins`]: a changed hot page stays
    /// writable, so a commit must read its twin, a stable snapshot, not the view.
    ///
    /// [`View::collect_dirty_with_twins`]: super::View::collect_dirty_with_twins
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
///
/// [`View::new`]: super::View::new
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
    /// Whether the options describe a view that can be made (length, alignment).
    pub(crate) fn check(&self) -> Result<(), ViewError> {
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
///
/// [`View::populate_all`]: super::View::populate_all
/// [`View::prefault`]: super::View::prefault
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
    #[error("{var}={value:?} is not {expected}")]
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

#[cfg(test)]
mod tests {
    use super::*;

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

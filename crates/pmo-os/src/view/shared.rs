//! What every view has whatever its mechanism: its range, its page source, its counters
//! ([`Shared`]), and the mapping of its application range ([`map_view`]).
//!
//! The mechanisms (`uffd`, `segv`, `resident`) take a [`Shared`] beside their own state; module `state`
//! puts the two together, and unmaps the range when the view is dropped.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::sys;
use super::types::{
    FillError, Mechanism, PageSource, Placement, ViewError, ViewOptions, ViewStats, PAGE_SIZE,
};

/// Counters of a view, updated from the fault path ([`ViewStats`] is their snapshot).
#[derive(Default)]
pub(crate) struct StatCounters {
    faults: AtomicU64,
    fills: AtomicU64,
    write_faults: AtomicU64,
    fill_ns: AtomicU64,
    service_ns: AtomicU64,
}

impl StatCounters {
    /// Add `ns` to the time the handler spent serving faults of the view.
    pub(crate) fn count_service(&self, ns: u64) {
        self.service_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// The counters now (each read on its own, `Relaxed`).
    pub(crate) fn snapshot(&self) -> ViewStats {
        ViewStats {
            faults: self.faults.load(Ordering::Relaxed),
            fills: self.fills.load(Ordering::Relaxed),
            write_faults: self.write_faults.load(Ordering::Relaxed),
            fill_ns: self.fill_ns.load(Ordering::Relaxed),
            service_ns: self.service_ns.load(Ordering::Relaxed),
        }
    }
}

/// The state of a view that does not depend on its mechanism, shared between the [`View`]
/// handle, the fault handler and the mechanism serving it (which keeps its own state beside it,
/// see `super::state::ViewState`).
///
/// [`View`]: super::View
pub(crate) struct Shared {
    pub(crate) base: usize,
    pub(crate) len_bytes: usize,
    pub(crate) pages: u64,
    pub(crate) writable: bool,
    pub(crate) mechanism: Mechanism,
    pub(crate) source: Arc<dyn PageSource>,
    pub(crate) stats: StatCounters,
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

    /// `Ok` if `page` lies inside the view, else [`ViewError::PageOutOfRange`].
    pub(crate) fn check_page(&self, page: u64) -> Result<(), ViewError> {
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
    let mut r = sys::map_at(hint, opts.len_bytes, prot, flags, fd, offset, fixed);
    if fixed && matches!(r, Err(sys::MapError::AddressInUse)) {
        // The zeroed mapping of an earlier resident view of this process may hold the range
        // (`super::spare`): never let it make a stable address look taken.
        if super::spare::evict_overlapping(hint, opts.len_bytes) {
            r = sys::map_at(hint, opts.len_bytes, prot, flags, fd, offset, fixed);
        }
    }
    match r {
        Ok(addr) => Ok(addr),
        Err(sys::MapError::AddressInUse) => Err(ViewError::AddressInUse {
            addr: hint,
            len: opts.len_bytes,
        }),
        Err(sys::MapError::Os(errno)) => Err(ViewError::Os { op: "mmap", errno }),
    }
}

//! Twin tracking ([`DirtyTracking::Twin`]): hot pages stay writable, and `collect_dirty` finds
//! whether they changed by comparing each with a twin (its last committed contents).
//!
//! Owns: a private anonymous mapping as large as the view (`MAP_NORESERVE`; the twin of page `p`
//! lies at `base + p * PAGE_SIZE`, so no slot table is needed and the fault path allocates
//! nothing), the bitmap of hot pages and their count, bounded by a cap (the twin memory a view may
//! hold, [`hot_cap`]).
//!
//! A page is hot when it is present, writable, and its twin holds the contents the medium has
//! (or will have once the psync that reported it commits). It becomes hot when it is filled on
//! a fault (the fill is the twin: no write-protect fault on the first write after a read) or
//! when it was reported written by two consecutive collects (a page written once, a random
//! update, is not worth a twin) and the cap allows. At each collect a hot page is compared with
//! its twin: changed, it is reported and its twin is refreshed (the commit must then read the
//! twin, a stable snapshot, not the view: see [`super::collect_twin`]); unchanged, it goes cold:
//! write-protected, compared once more (a write that landed before the protection is reported
//! now), and its twin memory is returned to the kernel. A write after the protection faults and
//! is reported by the dirty bitmap, as with [`DirtyTracking::Fault`].
//!
//! Invariants: `count` = the number of set bits of `hot` (each claim sets a bit it found clear
//! and counts it; each release clears a bit it found set); `count <= cap`; the twin of a hot
//! page is written only by the thread that claimed the page (the fault path, before the page is
//! installed) or by `collect_dirty` under `lock`, which `discard` also takes.
#![allow(unsafe_code)] // copies between the view and the twin mapping.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use super::super::bits::PageBits;
use super::super::sys;
use super::super::types::{DirtyTracking, ViewError, PAGE_SIZE};

/// Twins of pages that went cold are returned to the kernel in batches of this many pages (one
/// `madvise` per run of them), so twin memory stays below `cap + FORGET_BATCH` pages while a
/// page that goes cold costs no system call of its own.
const FORGET_BATCH: usize = 512;

/// Default bound of hot pages per view: 16384 pages = 64 MiB of twins (the working set of the
/// suite's kernels at default sizes fits). `PMO_HOT_PAGES` overrides it.
pub(crate) const DEFAULT_HOT_PAGES: u64 = 16384;

/// The cap on hot pages for a view of `pages` pages: `PMO_HOT_PAGES` if set to a number, else
/// [`DEFAULT_HOT_PAGES`]; never more than the view.
pub(crate) fn hot_cap(pages: u64) -> u64 {
    let cap = std::env::var("PMO_HOT_PAGES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(DEFAULT_HOT_PAGES);
    cap.min(pages)
}

/// What `collect_dirty` keeps between calls, under [`Twins::lock`].
#[derive(Default)]
pub(crate) struct Locked {
    /// Pages whose twins still hold memory though they went cold ([`Twins::retire`]).
    pub(crate) stale: Vec<u64>,
    /// Pages the previous collect reported written and write-protected (ascending): written
    /// again in the next interval, a page is kept writable (hot). A page written once
    /// (a random update) is not worth a twin.
    pub(crate) recent: Vec<u64>,
}

/// Per-view state of twin tracking.
pub(crate) struct Twins {
    base: usize,
    len: usize,
    pub(super) hot: PageBits,
    count: AtomicU64,
    cap: u64,
    /// Serialises `collect_dirty` and `discard` (normal context only; never the fault path).
    pub(super) lock: Mutex<Locked>,
    /// The process that mapped the twins: a fork child's copy maps nothing (`MADV_DONTFORK`),
    /// and the range may hold the child's own mappings.
    owner_pid: u32,
}

impl Twins {
    /// Map the twin area of a view of `len` bytes (`pages` pages).
    pub(crate) fn new(len: usize, pages: u64) -> Result<Twins, ViewError> {
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
        let base = sys::map(0, len, libc::PROT_READ | libc::PROT_WRITE, flags, -1, false).map_err(
            |e| match e {
                sys::MapError::Os(errno) => ViewError::Os {
                    op: "mmap (twins)",
                    errno,
                },
                sys::MapError::AddressInUse => ViewError::Os {
                    op: "mmap (twins)",
                    errno: libc::EEXIST,
                },
            },
        )?;
        // SAFETY: our own fresh mapping; advice only. Twins are not inherited by fork children
        // (neither are the views).
        let _ = unsafe { sys::madvise(base, len, libc::MADV_DONTFORK) };
        Ok(Twins {
            base,
            len,
            hot: PageBits::new(pages),
            count: AtomicU64::new(0),
            cap: hot_cap(pages),
            lock: Mutex::new(Locked::default()),
            owner_pid: crate::lock::pid(),
        })
    }

    /// Address of the twin of `page`.
    pub(crate) fn addr(&self, page: u64) -> usize {
        self.base + page as usize * PAGE_SIZE
    }

    /// First byte of the twin area (the twin of page `p` at `+ p * PAGE_SIZE`).
    pub(crate) fn base(&self) -> *const u8 {
        self.base as *const u8
    }

    /// Make `page` hot if the cap allows and nobody else has (async-signal-safe: atomics only).
    /// The caller then owns the twin of `page` until it publishes the page (installs it or
    /// reports it).
    pub(crate) fn claim(&self, page: u64) -> bool {
        let mut c = self.count.load(Ordering::Relaxed);
        loop {
            if c >= self.cap {
                return false;
            }
            match self
                .count
                .compare_exchange_weak(c, c + 1, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(now) => c = now,
            }
        }
        if self.hot.set(page) {
            // Already hot (another thread claimed it): give the unit back.
            self.count.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// `page` is no longer hot.
    pub(crate) fn release(&self, page: u64) {
        if self.hot.get(page) {
            self.hot.clear(page);
            self.count.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Number of hot pages.
    pub(crate) fn hot_pages(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Copy a page buffer into the twin of `page` (the fault path, before the page is
    /// installed; async-signal-safe).
    pub(crate) fn store(&self, page: u64, data: &[u8; PAGE_SIZE]) {
        // SAFETY: the twin of `page` lies inside our mapping (page < pages, checked by the
        // callers' page arithmetic); only the claimant of the page writes it now.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.addr(page) as *mut u8, PAGE_SIZE)
        };
    }

    /// Whether the view page at `view_page` equals the twin of `page`.
    ///
    /// # Safety
    /// `view_page` must be the address of a present page of the live view. Other threads may
    /// store into it meanwhile (the result is then either answer; the caller handles both).
    pub(crate) unsafe fn same(&self, page: u64, view_page: usize) -> bool {
        // SAFETY: both ranges are mapped and readable (caller; our own mapping); racing stores
        // may make the answer stale, never unsound for a byte compare of plain memory.
        unsafe {
            let a = std::slice::from_raw_parts(view_page as *const u8, PAGE_SIZE);
            let b = std::slice::from_raw_parts(self.addr(page) as *const u8, PAGE_SIZE);
            a == b
        }
    }

    /// Refresh the twin of `page` from the view page at `view_page`.
    ///
    /// # Safety
    /// As [`Twins::same`]; the caller holds `lock` (no commit reads this twin meanwhile).
    pub(crate) unsafe fn snapshot(&self, page: u64, view_page: usize) {
        // SAFETY: see the contract; the twin is ours under `lock`.
        unsafe {
            std::ptr::copy_nonoverlapping(
                view_page as *const u8,
                self.addr(page) as *mut u8,
                PAGE_SIZE,
            )
        };
    }

    /// `cold` went cold: once enough twins are unused, return their memory to the kernel.
    /// `stale` is the list `lock` guards (the caller holds it); `reusable(p)` says whether page
    /// `p` is still present and not hot. Under the lock no page can be discarded and filled
    /// again, and a present page cannot be claimed by a fill, so a twin forgotten here is
    /// unused.
    pub(crate) fn retire(
        &self,
        stale: &mut Vec<u64>,
        cold: &[u64],
        reusable: impl Fn(u64) -> bool,
    ) {
        stale.extend_from_slice(cold);
        if stale.len() < FORGET_BATCH {
            return;
        }
        stale.sort_unstable();
        stale.dedup();
        stale.retain(|&p| reusable(p));
        for (first, n) in runs(stale) {
            // SAFETY: a range of our own twin mapping that no hot page uses (see above).
            let _ = unsafe {
                sys::madvise(
                    self.addr(first),
                    n as usize * PAGE_SIZE,
                    libc::MADV_DONTNEED,
                )
            };
        }
        stale.clear();
    }
}

impl Drop for Twins {
    fn drop(&mut self) {
        if crate::lock::pid() != self.owner_pid {
            return; // a fork child's copy: the mapping was not inherited
        }
        // SAFETY: the twin mapping is ours and, the view being dropped, unused.
        unsafe { sys::unmap(self.base, self.len) };
    }
}

/// Whether views with `tracking` keep twins.
pub(crate) fn uses_twins(tracking: DirtyTracking) -> bool {
    tracking == DirtyTracking::Twin
}

/// Runs of consecutive pages in an ascending list: `(first, count)`.
pub(crate) fn runs(pages: &[u64]) -> impl Iterator<Item = (u64, u64)> + '_ {
    let mut i = 0;
    std::iter::from_fn(move || {
        let first = *pages.get(i)?;
        let mut n = 1;
        while pages.get(i + n as usize) == Some(&(first + n)) {
            n += 1;
        }
        i += n as usize;
        Some((first, n))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_split_at_gaps() {
        let v: Vec<_> = runs(&[1, 2, 3, 7, 9, 10]).collect();
        assert_eq!(v, vec![(1, 3), (7, 1), (9, 2)]);
        assert_eq!(runs(&[]).count(), 0);
    }

    #[test]
    fn claim_respects_the_cap_and_counts_once() {
        let t = Twins {
            base: 0,
            len: 0,
            hot: PageBits::new(8),
            count: AtomicU64::new(0),
            cap: 2,
            lock: Mutex::new(Locked::default()),
            owner_pid: 0,
        };
        assert!(t.claim(3));
        assert!(!t.claim(3), "a hot page cannot be claimed twice");
        assert!(t.claim(4));
        assert!(!t.claim(5), "cap reached");
        assert_eq!(t.hot_pages(), 2);
        t.release(3);
        t.release(3);
        assert_eq!(t.hot_pages(), 1, "a release counts once");
        assert!(t.claim(5));
        drop(t); // owner_pid 0 is not this process: nothing is unmapped
    }
}

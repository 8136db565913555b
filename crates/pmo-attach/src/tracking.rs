//! The store's choice of dirty tracking for an attach when neither the caller nor `PMO_DIRTY`
//! chooses (issue 16, figures in `docs/results.md` and `docs/faults.md`).
//!
//! The choice is made per attach from the PMO's size, because the asynchronous write-protect
//! mode of a userfaultfd is fixed when it is opened (it cannot change per psync), and because
//! the two candidates' costs scale differently:
//! - [`DirtyTracking::Scan`] takes no user-space fault on a write (the kernel clears the
//!   protection itself, about 1 µs) and its collect is one `PAGEMAP_SCAN` whose walk costs about
//!   1.5 ns per resident page (3 ns where the view is partly resident): cheap when the PMO is
//!   small, whatever is written;
//! - [`DirtyTracking::Twin`] takes a user-space fault (about 4-5 µs) per cold page written, keeps
//!   written and freshly filled pages writable with a twin, and its collect costs O(hot + dirty
//!   pages), independent of the PMO's size: the choice for large PMOs.
//!
//! Owns: [`SCAN_MAX_BYTES`] and [`default_tracking`]. Callers: `attach.rs` (every attach),
//! the CLI and the benchmarks (to print or label the default).

use pmo_os::view::DirtyTracking;

/// The store's dirty tracking for PMOs larger than [`crate::tracking::SCAN_MAX_BYTES`] when
/// neither the caller nor `PMO_DIRTY` chooses (smaller ones get `Scan`, see [`crate::tracking`]):
/// [`DirtyTracking::Twin`]: fault tracking (psync O(dirty pages) whatever the PMO's size, where a
/// `PAGEMAP_SCAN` walks every resident page), with pages filled or written in consecutive
/// intervals kept writable and compared with a twin at psync instead of taking a write-protect
/// fault per page per interval. Chosen by measurement (`pmo bench suite --study tracking`,
/// `pmo bench schemes`, `pmo bench store`; figures in `docs/results.md`, issue 16). The sigsegv
/// mechanism always tracks by faults.
pub const DEFAULT_TRACKING: DirtyTracking = DirtyTracking::Twin;

/// PMOs of at most this many bytes are tracked with [`DirtyTracking::Scan`] by default (where
/// the kernel has it): a collect then walks at most 16384 page-table entries, about 25 µs when
/// every page is resident (1.5 ns each on the kernel's fast path), the price of about five
/// user-space write-protect faults; a psync that writes more cold pages than that is cheaper
/// with scan whatever the size, one that writes a single page of a large resident PMO is not.
/// The suite's kernels (12-38 MiB at default sizes) and Filebench's files fall below it.
/// Larger PMOs get [`DEFAULT_TRACKING`], whose psync does not grow with the PMO.
pub const SCAN_MAX_BYTES: u64 = 64 << 20;

/// The default dirty tracking for a PMO of `bytes` bytes: [`DirtyTracking::Scan`] up to
/// [`SCAN_MAX_BYTES`] where available, else [`DEFAULT_TRACKING`].
pub fn default_tracking(bytes: u64) -> DirtyTracking {
    if bytes <= SCAN_MAX_BYTES && DirtyTracking::Scan.is_available() {
        DirtyTracking::Scan
    } else {
        DEFAULT_TRACKING
    }
}

/// The tracking an attach of a PMO of `bytes` bytes uses: the caller's, else `PMO_DIRTY`'s,
/// else [`default_tracking`].
pub fn resolve(requested: Option<DirtyTracking>, bytes: u64) -> DirtyTracking {
    requested
        .or_else(DirtyTracking::from_env)
        .unwrap_or_else(|| default_tracking(bytes))
}

/// Whether an attach of a view of `pages` pages gets a resident view (filled at attach, no
/// faults, its mapping reused from this process's previous attach of the same range:
/// `pmo_os::view::View::resident`): at most `max_pages` (the attach's `resident_pages`; else
/// `PMO_RESIDENT_PAGES`, else 16) pages, and the caller chose neither the fault mechanism
/// (`mechanism`, `PMO_FAULT`) nor a tracking (`tracking`, `PMO_DIRTY`) other than `twin` or
/// `declared`. The caller also rules out prediction, a NUMA node and a plaintext area on the
/// medium.
pub fn resident(
    pages: u64,
    max_pages: Option<u64>,
    mechanism: Option<pmo_os::view::Mechanism>,
    tracking: Option<DirtyTracking>,
) -> bool {
    pages <= max_pages.unwrap_or_else(pmo_os::view::resident_pages_max)
        && mechanism
            .or_else(pmo_os::view::Mechanism::from_env)
            .is_none()
        && matches!(
            tracking.or_else(DirtyTracking::from_env),
            None | Some(DirtyTracking::Declared | DirtyTracking::Twin)
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_pmos_get_the_default_and_requests_win() {
        assert_eq!(default_tracking(SCAN_MAX_BYTES + 4096), DEFAULT_TRACKING);
        assert_eq!(default_tracking(1 << 30), DEFAULT_TRACKING);
        let small = default_tracking(64 << 10);
        if DirtyTracking::Scan.is_available() {
            assert_eq!(small, DirtyTracking::Scan);
        } else {
            assert_eq!(small, DEFAULT_TRACKING);
        }
        if std::env::var_os("PMO_DIRTY").is_none() {
            assert_eq!(
                resolve(Some(DirtyTracking::Fault), 4096),
                DirtyTracking::Fault
            );
            assert_eq!(resolve(None, 1 << 30), DEFAULT_TRACKING);
        }
    }
}

//! Whether each mechanism works in this process: a one-page view of it is made, exercised and
//! dropped, once per process (the results are cached). The mechanisms' availability methods
//! ([`Mechanism::available`], [`DirtyTracking::is_available`], ...) and `View::over_file` ask
//! here.
//!
//! [`Mechanism::available`]: super::Mechanism::available
//! [`DirtyTracking::is_available`]: super::DirtyTracking::is_available

use std::sync::{Arc, OnceLock};

use super::segv;
use super::state::{Backend, ViewState};
use super::types::{DirtyTracking, FillError, PageSource, Placement, ViewOptions, PAGE_SIZE};
use super::uffd;

/// Cached probe result.
type Probe = OnceLock<Result<(), String>>;

static PROBE_SCAN: Probe = Probe::new();
static PROBE_FAULT: Probe = Probe::new();
static PROBE_DECLARED: Probe = Probe::new();
static PROBE_TWIN: Probe = Probe::new();

/// Whether userfaultfd works here with at least one kind of dirty tracking (cached).
pub(crate) fn uffd() -> Result<(), String> {
    match uffd_tracking(DirtyTracking::Scan) {
        Ok(()) => Ok(()),
        Err(scan) => uffd_tracking(DirtyTracking::Fault)
            .map_err(|fault| format!("with scan tracking: {scan}; with fault tracking: {fault}")),
    }
}

/// Whether userfaultfd views with `tracking` work here (cached): a one-page writable view is
/// filled, installed, written and collected, which exercises every system call involved.
pub(crate) fn uffd_tracking(tracking: DirtyTracking) -> Result<(), String> {
    let cell = match tracking {
        DirtyTracking::Scan => &PROBE_SCAN,
        DirtyTracking::Fault => &PROBE_FAULT,
        DirtyTracking::Declared => &PROBE_DECLARED,
        DirtyTracking::Twin => &PROBE_TWIN,
    };
    cell.get_or_init(|| run_uffd(tracking)).clone()
}

fn run_uffd(tracking: DirtyTracking) -> Result<(), String> {
    struct Zero;
    impl PageSource for Zero {
        fn fill(&self, _: u64, dst: &mut [u8; PAGE_SIZE]) -> Result<(), FillError> {
            dst.fill(0);
            Ok(())
        }
        fn label(&self) -> &str {
            "probe"
        }
    }
    let opts = ViewOptions {
        len_bytes: PAGE_SIZE,
        placement: Placement::Anywhere,
        writable: true,
        mechanism: None,
    };
    let (shared, st) = uffd::create(&opts, Arc::new(Zero), tracking).map_err(|e| e.to_string())?;
    let state = ViewState {
        shared,
        backend: Backend::Uffd(st),
    };
    let Backend::Uffd(st) = &state.backend else {
        return Err("internal: wrong backend".into());
    };
    uffd::install(&state.shared, st, 0, &[0u8; PAGE_SIZE], false).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    uffd::collect_dirty(&state.shared, st, &mut out, &mut Vec::new()).map_err(|e| e.to_string())?;
    Ok(())
}

static PROBE_SEGV: Probe = Probe::new();

/// Whether memfd + double mapping work here (cached).
pub(crate) fn segv() -> Result<(), String> {
    PROBE_SEGV
        .get_or_init(|| {
            struct Zero;
            impl PageSource for Zero {
                fn fill(&self, _: u64, dst: &mut [u8; PAGE_SIZE]) -> Result<(), FillError> {
                    dst.fill(0);
                    Ok(())
                }
                fn label(&self) -> &str {
                    "probe"
                }
            }
            let opts = ViewOptions {
                len_bytes: PAGE_SIZE,
                placement: Placement::Anywhere,
                writable: true,
                mechanism: None,
            };
            segv::create(&opts, Arc::new(Zero), segv::Backing::Memfd)
                .map(|(shared, st)| {
                    drop(ViewState {
                        shared,
                        backend: Backend::Segv(st),
                    })
                })
                .map_err(|e| e.to_string())
        })
        .clone()
}

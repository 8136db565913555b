//! A whole view's state: the mechanism-independent part ([`Shared`]) and the mechanism's own
//! ([`Backend`]), as the [`View`] handle holds it and the fault handler (module `registry`) finds
//! it.
//!
//! Owns: the view's mappings once it is made (the application's range, and with the sigsegv
//! mechanism the alias): [`ViewState`]'s drop unmaps them. Routes a fault to its mechanism
//! ([`ViewState::service_fault`]).
//!
//! [`View`]: super::View
#![allow(unsafe_code)] // `ViewState::drop` unmaps the view.

use super::fault::{FaultKind, Outcome};
use super::resident::{self, ResidentState};
use super::segv::{self, SegvState};
use super::shared::Shared;
use super::sys;
use super::types::PAGE_SIZE;
use super::uffd::{self, UffdState};

/// The mechanism's own state of a view.
pub(crate) enum Backend {
    Uffd(UffdState),
    Segv(SegvState),
    Resident(ResidentState),
}

/// The state shared between a [`View`](super::View) handle and the fault handler.
pub(crate) struct ViewState {
    pub(crate) shared: Shared,
    pub(crate) backend: Backend,
}

impl ViewState {
    /// Called by the registry's signal handler for a fault at `addr` inside this view.
    pub(crate) fn service_fault(&self, sig: libc::c_int, addr: usize, kind: FaultKind) -> Outcome {
        let page = ((addr - self.shared.base) / PAGE_SIZE) as u64;
        let t0 = sys::now_ns();
        let outcome = match &self.backend {
            Backend::Uffd(st) if sig == libc::SIGBUS => uffd::service(&self.shared, st, page, kind),
            Backend::Segv(st) if sig == libc::SIGSEGV => {
                segv::service(&self.shared, st, page, kind.write)
            }
            _ => return Outcome::NotOurs,
        };
        let dt = sys::now_ns().saturating_sub(t0);
        self.shared.stats.count_service(dt);
        outcome
    }
}

impl Drop for ViewState {
    fn drop(&mut self) {
        if let Backend::Resident(st) = &mut self.backend {
            // Zeroed and kept for reuse, or unmapped (module `spare`).
            resident::release(st);
            return;
        }
        if crate::lock::pid() != self.shared.owner_pid {
            // A fork child's copy: the mapping was never inherited, and the range may hold
            // something else of the child's by now. Only the descriptors (closed by their own
            // drops) are the child's.
            return;
        }
        // SAFETY: the view is unregistered (View::drop) and no handler is inside it; the mapping
        // is ours and no reference into it outlives the View (the API only hands out raw
        // addresses, documented as invalid after drop).
        unsafe { sys::unmap(self.shared.base, self.shared.len_bytes) };
        if let Backend::Segv(st) = &self.backend {
            // SAFETY: the alias mapping is private to this view and no longer used.
            unsafe { sys::unmap(st.alias, self.shared.len_bytes) };
        }
    }
}

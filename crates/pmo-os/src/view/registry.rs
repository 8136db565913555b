//! The process-wide fault handler and the registry of live views.
//!
//! Owns: the one `SIGBUS` + `SIGSEGV` handler of the process (installed once, on the first
//! [`super::View::new`]), the actions it replaced (to chain to them), and a fixed table of
//! [`MAX_VIEWS`] slots mapping an address range to the view that serves its faults.
//!
//! Invariants:
//! - The handler allocates nothing and takes no lock: it reads atomics, calls the view's
//!   `PageSource::fill` and makes async-signal-safe system calls.
//! - A slot's `inner` pointer is valid while the slot's `active` count is non-zero or the pointer
//!   is published: [`unregister`] clears the pointer, then waits for `active` to drop to zero,
//!   and only then may the view's memory and `ViewState` be freed. The handler increments
//!   `active` *before* re-reading the pointer (both sequentially consistent), so it either sees
//!   null or holds the count while it uses the view.
//! - Faults that are not ours (address outside every view, a write to a read-only view, a
//!   non-fault signal) go to the previous action: Rust's stack-overflow reporter, another
//!   library's handler, or the default action (terminate with the same signal).
//!
//! Signal flags: `SA_SIGINFO | SA_ONSTACK` for both signals, so that a stack overflow (which
//! faults on the guard page) can still be delivered on the thread's alternate stack and reach
//! Rust's reporter, and so that the handler needs no room on the faulting thread's stack. The
//! fill itself, and the userfaultfd page buffer, run on a separate, larger fill stack
//! ([`super::stack`]), because alternate signal stacks are small (8 KiB on Rust's threads).
//! All signals are blocked while the handler runs (`sa_mask` full): a nested signal delivered
//! to the alternate stack while the fill runs elsewhere would overwrite the handler's frame.
#![allow(unsafe_code)] // sigaction, siginfo/ucontext access and the raw registry pointers.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicUsize, Ordering};
use std::sync::Once;

use libc::{c_int, c_void, siginfo_t};

use super::fault::{FaultKind, Outcome};
use super::state::ViewState;
use super::sys;
use super::types::ViewError;

/// `si_code` of a SIGBUS for a nonexistent physical address (userfaultfd with SIGBUS uses it).
const BUS_ADRERR: c_int = 2;
/// `si_code` of a SIGSEGV for a mapped page without the needed permission.
const SEGV_ACCERR: c_int = 2;

/// Most views alive at once in one process.
pub const MAX_VIEWS: usize = 256;

struct Slot {
    claimed: AtomicBool,
    start: AtomicUsize,
    end: AtomicUsize,
    inner: AtomicPtr<ViewState>,
    active: AtomicUsize,
}

impl Slot {
    const fn new() -> Slot {
        Slot {
            claimed: AtomicBool::new(false),
            start: AtomicUsize::new(0),
            end: AtomicUsize::new(0),
            inner: AtomicPtr::new(std::ptr::null_mut()),
            active: AtomicUsize::new(0),
        }
    }
}

static SLOTS: [Slot; MAX_VIEWS] = [const { Slot::new() }; MAX_VIEWS];
/// One past the highest slot ever claimed: the handler scans only `SLOTS[..HIGH]`.
static HIGH: AtomicUsize = AtomicUsize::new(0);

/// A saved previous `sigaction`, written once before `ready` is set.
struct PrevAction {
    ready: AtomicBool,
    action: UnsafeCell<libc::sigaction>,
}

// SAFETY: `action` is written exactly once, by the thread running `INSTALL`, before `ready` is
// set with Release; it is only read after `ready` is observed with Acquire.
unsafe impl Sync for PrevAction {}

impl PrevAction {
    const fn new() -> PrevAction {
        PrevAction {
            ready: AtomicBool::new(false),
            // SAFETY: sigaction is a plain C struct for which all-zero bytes is valid (SIG_DFL).
            action: UnsafeCell::new(unsafe { std::mem::zeroed() }),
        }
    }
}

static PREV_SEGV: PrevAction = PrevAction::new();
static PREV_BUS: PrevAction = PrevAction::new();
static INSTALL: Once = Once::new();
/// This process's id, refreshed in fork children (`pthread_atfork`), so the handler can skip
/// registrations inherited from the parent without a system call.
static PID: AtomicU32 = AtomicU32::new(0);

extern "C" fn after_fork_in_child() {
    PID.store(sys::getpid(), Ordering::SeqCst);
}
static INSTALL_ERRNO: AtomicUsize = AtomicUsize::new(0);

fn prev_for(sig: c_int) -> &'static PrevAction {
    if sig == libc::SIGBUS {
        &PREV_BUS
    } else {
        &PREV_SEGV
    }
}

fn install_one(sig: c_int, extra_flags: c_int) -> Result<(), i32> {
    // SAFETY: zeroed sigaction is valid; we fill the fields we need.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = on_fault as extern "C" fn(c_int, *mut siginfo_t, *mut c_void) as usize;
    act.sa_flags = libc::SA_SIGINFO | extra_flags;
    // Block every signal while the handler runs. The fill runs on a fill stack, outside the
    // alternate signal stack, so the kernel would deliver a nested SA_ONSTACK signal (a
    // profiler's SIGPROF, say) at the top of the alternate stack, over this handler's live
    // frame. Faults inside the handler are still delivered (forced, with the default action).
    // SAFETY: `act.sa_mask` is a valid sigset to initialise.
    unsafe { libc::sigfillset(&mut act.sa_mask) };
    let prev = prev_for(sig);
    // SAFETY: `INSTALL` runs this once; nobody reads `prev.action` before `ready` is set, so we
    // may write it; `act` is a fully initialised sigaction.
    let r = unsafe { libc::sigaction(sig, &act, prev.action.get()) };
    if r < 0 {
        return Err(sys::errno());
    }
    prev.ready.store(true, Ordering::Release);
    Ok(())
}

/// Install the process-wide handler (once).
pub fn install_handlers() -> Result<(), ViewError> {
    INSTALL.call_once(|| {
        super::stack::reserve();
        PID.store(sys::getpid(), Ordering::SeqCst);
        // SAFETY: registers a child hook that only stores an atomic.
        if unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) } != 0 {
            // No hook (ENOMEM): the handler asks the kernel for the pid instead.
            PID.store(0, Ordering::SeqCst);
        }
        let r = install_one(libc::SIGBUS, libc::SA_ONSTACK)
            .and_then(|()| install_one(libc::SIGSEGV, libc::SA_ONSTACK));
        if let Err(e) = r {
            INSTALL_ERRNO.store(e.max(1) as usize, Ordering::Release);
        }
    });
    match INSTALL_ERRNO.load(Ordering::Acquire) {
        0 => Ok(()),
        e => Err(ViewError::Os {
            op: "sigaction",
            errno: e as i32,
        }),
    }
}

/// Publish `state` (which must outlive the registration) for faults in its range.
/// Returns the slot index to pass to [`unregister`].
pub fn register(state: &ViewState) -> Result<usize, ViewError> {
    install_handlers()?;
    for (index, slot) in SLOTS.iter().enumerate() {
        if slot
            .claimed
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            slot.start.store(state.shared.base, Ordering::SeqCst);
            slot.end
                .store(state.shared.base + state.shared.len_bytes, Ordering::SeqCst);
            slot.inner.store(
                state as *const ViewState as *mut ViewState,
                Ordering::SeqCst,
            );
            HIGH.fetch_max(index + 1, Ordering::SeqCst);
            return Ok(index);
        }
    }
    Err(ViewError::TooManyViews { max: MAX_VIEWS })
}

/// Withdraw a registration and wait until no handler is using it. Afterwards faults in the old
/// range are not ours (they chain to the previous action).
pub fn unregister(index: usize) {
    let slot = &SLOTS[index];
    slot.inner.store(std::ptr::null_mut(), Ordering::SeqCst);
    // Bounded by the duration of the handlers already inside: each finishes one fill.
    while slot.active.load(Ordering::SeqCst) != 0 {
        std::thread::yield_now();
    }
    slot.start.store(0, Ordering::SeqCst);
    slot.end.store(0, Ordering::SeqCst);
    slot.claimed.store(false, Ordering::Release);
}

/// Number of slots claimed now (for tests and diagnostics).
pub fn live_views() -> usize {
    SLOTS
        .iter()
        .filter(|s| s.claimed.load(Ordering::Acquire))
        .count()
}

/// What the x86 page-fault error code in the signal context says about the access: bit 1 =
/// write, bit 0 = protection violation on a present page. `None` where there is no error code.
fn fault_kind(ctx: *mut c_void) -> FaultKind {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        if ctx.is_null() {
            return FaultKind::default();
        }
        // SAFETY: the kernel passes a valid ucontext_t as the third handler argument.
        let uc = unsafe { &*(ctx as *const libc::ucontext_t) };
        let err = uc.uc_mcontext.gregs[libc::REG_ERR as usize];
        FaultKind {
            write: Some(err & 2 != 0),
            present: Some(err & 1 != 0),
        }
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    {
        let _ = ctx;
        FaultKind::default()
    }
}

extern "C" fn on_fault(sig: c_int, info: *mut siginfo_t, ctx: *mut c_void) {
    let saved_errno = sys::errno();
    let outcome = dispatch(sig, info, ctx);
    sys::set_errno(saved_errno);
    if outcome == Outcome::NotOurs {
        chain(sig, info, ctx);
    }
}

fn dispatch(sig: c_int, info: *mut siginfo_t, ctx: *mut c_void) -> Outcome {
    if info.is_null() {
        return Outcome::NotOurs;
    }
    // SAFETY: with SA_SIGINFO the kernel passes a valid siginfo_t.
    let info = unsafe { &*info };
    let ours = (sig == libc::SIGBUS && info.si_code == BUS_ADRERR)
        || (sig == libc::SIGSEGV && info.si_code == SEGV_ACCERR);
    if !ours {
        return Outcome::NotOurs;
    }
    // SAFETY: for SIGBUS/SIGSEGV raised by a fault, si_addr is set.
    let addr = unsafe { info.si_addr() } as usize;
    let high = HIGH.load(Ordering::Acquire).min(MAX_VIEWS);
    for slot in &SLOTS[..high] {
        let start = slot.start.load(Ordering::Acquire);
        let end = slot.end.load(Ordering::Acquire);
        if addr < start || addr >= end {
            continue;
        }
        slot.active.fetch_add(1, Ordering::SeqCst);
        let p = slot.inner.load(Ordering::SeqCst);
        // SAFETY: a non-null `p` was published by `register` and cannot be freed while
        // `active` > 0 (see the module invariant).
        let state = (!p.is_null()).then(|| unsafe { &*p });
        // Registrations inherited from a parent process serve nothing here (their mapping was
        // not inherited); a live view of ours may cover the same range in another slot.
        let pid = match PID.load(Ordering::Relaxed) {
            0 => sys::getpid(),
            cached => cached,
        };
        let outcome = match state {
            Some(state)
                if state.shared.owner_pid == pid
                    && addr >= state.shared.base
                    && addr < state.shared.base + state.shared.len_bytes =>
            {
                Some(state.service_fault(sig, addr, fault_kind(ctx)))
            }
            _ => None,
        };
        slot.active.fetch_sub(1, Ordering::SeqCst);
        if let Some(outcome) = outcome {
            return outcome;
        }
    }
    Outcome::NotOurs
}

/// Pass a signal that is not ours to the action we replaced.
fn chain(sig: c_int, info: *mut siginfo_t, ctx: *mut c_void) {
    let prev = prev_for(sig);
    let handler = if prev.ready.load(Ordering::Acquire) {
        // SAFETY: written once before `ready` was set (see PrevAction).
        let act = unsafe { &*prev.action.get() };
        Some((act.sa_sigaction, act.sa_flags))
    } else {
        None
    };
    match handler {
        Some((h, flags)) if h != libc::SIG_DFL && h != libc::SIG_IGN => {
            if flags & libc::SA_SIGINFO != 0 {
                // SAFETY: the previous action declared SA_SIGINFO, so `h` is a three-argument
                // handler; we pass it the arguments the kernel gave us.
                let f: extern "C" fn(c_int, *mut siginfo_t, *mut c_void) =
                    unsafe { std::mem::transmute(h) };
                f(sig, info, ctx);
            } else {
                // SAFETY: without SA_SIGINFO, `h` is a one-argument handler.
                let f: extern "C" fn(c_int) = unsafe { std::mem::transmute(h) };
                f(sig);
            }
        }
        _ => {
            // Default action (an ignored synchronous fault would loop forever, so treat SIG_IGN
            // as default too). Returning re-executes the faulting access, which now terminates
            // the process with `sig`; a signal sent by kill() is raised again instead.
            sys::reset_to_default(sig);
            // SAFETY: `info` is the kernel's siginfo (checked non-null) or we re-raise anyway.
            let from_fault = !info.is_null() && unsafe { (*info).si_code } > 0;
            if !from_fault {
                sys::raise_unblocked(sig);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_code_bits_are_read_from_the_context() {
        // A null context (no ucontext) gives no information rather than a guess.
        let kind = fault_kind(std::ptr::null_mut());
        assert!(kind.write.is_none() && kind.present.is_none());
    }
}

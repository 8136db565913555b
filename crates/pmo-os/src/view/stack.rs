//! Fill stacks: the fault handler runs `PageSource::fill` on a stack of its own.
//!
//! Why: the handler is installed with `SA_ONSTACK`, so that a stack overflow (a fault on a
//! thread's guard page) can still be delivered on the thread's alternate signal stack and reach
//! Rust's reporter through the chain. That alternate stack is small (Rust's std gives each
//! thread `max(SIGSTKSZ, AT_MINSIGSTKSZ)` = 8 KiB here, of which the kernel's signal frame with
//! AVX-512 state takes about 3.4 KiB), too small for a decrypting fill and a 4 KiB page buffer.
//! So the handler switches to one of [`FILL_STACKS`] pre-mapped stacks of [`FILL_STACK_BYTES`]
//! (each with a guard page below it) for the fill and the install, then switches back.
//!
//! Owns: the fill-stack region (mapped once, on the first `View::new`, never unmapped) and the
//! bitmask of stacks in use.
//!
//! Invariants: a stack is used by at most one handler at a time (claimed by compare-exchange on
//! `BUSY`, released after the call returns). Claiming allocates nothing and takes no lock; if all
//! stacks are in use the handler yields until one is released (each holder finishes one fill).
//! On targets other than x86-64, or if the region could not be mapped, the fill runs on the
//! current stack.
#![allow(unsafe_code)] // maps the stacks and switches the stack pointer with inline assembly.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use super::sys;
use super::types::PAGE_SIZE;

/// Number of fill stacks (how many fills can run at once in the process).
pub const FILL_STACKS: usize = 64;
/// Usable bytes of each fill stack.
pub const FILL_STACK_BYTES: usize = 256 * 1024;
const SLOT_BYTES: usize = FILL_STACK_BYTES + PAGE_SIZE;

static REGION: AtomicUsize = AtomicUsize::new(0);
static BUSY: AtomicU64 = AtomicU64::new(0);
const _: () = assert!(FILL_STACKS <= 64);

/// Map the fill stacks (normal context, once, from `registry::install_handlers`).
pub fn reserve() {
    if !cfg!(target_arch = "x86_64") || REGION.load(Ordering::Acquire) != 0 {
        return;
    }
    let len = FILL_STACKS * SLOT_BYTES;
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_STACK;
    let Ok(base) = sys::map(0, len, libc::PROT_READ | libc::PROT_WRITE, flags, -1, false) else {
        return; // fills run on the current stack
    };
    for i in 0..FILL_STACKS {
        // SAFETY: the guard page (lowest page of slot i) lies in the region we just mapped,
        // which nobody uses yet.
        let _ = unsafe { sys::mprotect(base + i * SLOT_BYTES, PAGE_SIZE, libc::PROT_NONE) };
    }
    // Not MADV_DONTFORK: a fork child that creates views of its own needs the fill stacks too.
    REGION.store(base, Ordering::Release);
}

/// Run `f` on a fill stack if there is one (async-signal-safe).
pub fn on_fill_stack<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        let region = REGION.load(Ordering::Acquire);
        if region != 0 {
            let slot = claim();
            let top = region + (slot + 1) * SLOT_BYTES; // 16-byte aligned: SLOT_BYTES is
            let r = switch::run(top, f);
            BUSY.fetch_and(!(1u64 << slot), Ordering::Release);
            return r;
        }
    }
    f()
}

fn claim() -> usize {
    let mut spins = 0u32;
    loop {
        let busy = BUSY.load(Ordering::Acquire);
        let free = !busy & mask();
        if free != 0 {
            let slot = free.trailing_zeros() as usize;
            if BUSY
                .compare_exchange_weak(
                    busy,
                    busy | (1u64 << slot),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
            {
                return slot;
            }
            continue;
        }
        spins += 1;
        if spins & 15 == 0 {
            sys::yield_cpu();
        } else {
            std::hint::spin_loop();
        }
    }
}

const fn mask() -> u64 {
    if FILL_STACKS == 64 {
        u64::MAX
    } else {
        (1u64 << FILL_STACKS) - 1
    }
}

#[cfg(target_arch = "x86_64")]
mod switch {
    use libc::c_void;

    struct Call<F, R> {
        f: Option<F>,
        result: Option<R>,
    }

    extern "C" fn trampoline<F: FnOnce() -> R, R>(arg: *mut c_void) {
        // SAFETY: `arg` is the `Call<F, R>` that `run` passed, alive and exclusively ours for the
        // duration of the call.
        let call = unsafe { &mut *(arg as *mut Call<F, R>) };
        if let Some(f) = call.f.take() {
            call.result = Some(f());
        }
    }

    /// Call `f` with the stack pointer at `top`.
    pub fn run<F: FnOnce() -> R, R>(top: usize, f: F) -> R {
        let mut call = Call {
            f: Some(f),
            result: None,
        };
        let arg = &mut call as *mut Call<F, R> as *mut c_void;
        let entry: extern "C" fn(*mut c_void) = trampoline::<F, R>;
        // SAFETY: `top` is the 16-byte-aligned top of a fill stack that we own exclusively
        // (claimed in `BUSY`), mapped read-write with a guard page below. The assembly saves the
        // stack pointer in r12 (callee-saved, so `entry` preserves it), switches to `top`, calls
        // `entry(arg)` per the C ABI (`call` pushes the return address, leaving the callee's
        // stack 16-byte aligned + 8 as the ABI requires) and restores the stack pointer. All
        // caller-saved registers are declared clobbered; `entry` cannot unwind (extern "C").
        unsafe {
            std::arch::asm!(
                "mov r12, rsp",
                "mov rsp, {top}",
                "call {entry}",
                "mov rsp, r12",
                top = in(reg) top,
                entry = in(reg) entry,
                in("rdi") arg,
                out("r12") _,
                clobber_abi("C"),
            );
        }
        match call.result {
            Some(r) => r,
            // `trampoline` always stores a result; reaching this is a broken invariant.
            None => std::process::abort(),
        }
    }
}

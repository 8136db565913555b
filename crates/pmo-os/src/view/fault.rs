//! What the fault path shares between the handler (module `registry`) and the mechanisms
//! (`uffd`, `segv`): what the hardware said about a fault ([`FaultKind`]), what serving it came
//! to ([`Outcome`]), and the way out when it cannot be served ([`fatal`]: one line on stderr
//! with `write(2)`, then death by `SIGBUS`).
//!
//! Invariant: everything here is async-signal-safe: no allocation, no lock, no panic.

use super::sys;

/// What the hardware said about a faulting access, where it says anything (x86-64).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct FaultKind {
    /// The access was a write.
    pub(crate) write: Option<bool>,
    /// The page was present (a protection fault, not a missing page).
    pub(crate) present: Option<bool>,
}

/// What serving a fault came to (the mechanisms' `service`, then the registry's dispatcher).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The fault was served; return and let the access retry.
    Handled,
    /// Not ours: pass to the previous action.
    NotOurs,
}

/// Print `pmo: integrity error in PMO '<label>' page <n>: <reason>` (or another `what`) to stderr
/// with write(2), then die with SIGBUS. Never returns.
pub fn fatal(what: &str, label: &str, page: u64, reason: &str) -> ! {
    let mut digits = [0u8; 20];
    sys::write_stderr(b"pmo: ");
    sys::write_stderr(what.as_bytes());
    sys::write_stderr(b" in PMO '");
    sys::write_stderr(label.as_bytes());
    sys::write_stderr(b"' page ");
    sys::write_stderr(decimal(page, &mut digits));
    sys::write_stderr(b": ");
    sys::write_stderr(reason.as_bytes());
    sys::write_stderr(b"\n");
    sys::reset_to_default(libc::SIGBUS);
    sys::raise_unblocked(libc::SIGBUS);
    // SIGBUS with the default action terminates; if something still ignored it, abort.
    std::process::abort()
}

/// `n` in decimal, written into `buf` without allocating.
fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[i..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_formats_without_allocating() {
        let mut buf = [0u8; 20];
        assert_eq!(decimal(0, &mut buf), b"0");
        assert_eq!(decimal(7, &mut buf), b"7");
        assert_eq!(decimal(1234567890, &mut buf), b"1234567890");
        assert_eq!(decimal(u64::MAX, &mut buf), b"18446744073709551615");
    }
}

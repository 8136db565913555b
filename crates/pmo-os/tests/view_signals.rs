//! Fatal paths, each in a child process (this test binary re-executed with `PMO_VIEW_CHILD`):
//! a failed fill kills with SIGBUS and a one-line message; a write to a read-only view is an
//! ordinary SIGSEGV; faults outside views still reach the previous handlers (plain crash, Rust's
//! stack-overflow report); a fork child does not inherit views.

#[path = "view_common.rs"]
mod view_common;

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Output};

use pmo_os::view::{DirtyTracking, Mechanism};
use view_common::*;

/// Run test `test` of this binary in a child with `PMO_VIEW_CHILD=mode` and `PMO_FAULT=m`.
fn child(test: &str, mode: &str, m: Config) -> Output {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env("PMO_VIEW_CHILD", mode)
        .env("PMO_FAULT", m.mechanism.name())
        .env("PMO_DIRTY", m.tracking.name())
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("spawn child")
}

fn child_mode() -> Option<(String, Config)> {
    let mode = std::env::var("PMO_VIEW_CHILD").ok()?;
    let m = Config {
        mechanism: Mechanism::from_env().expect("PMO_FAULT set by the parent"),
        tracking: DirtyTracking::from_env().expect("PMO_DIRTY set by the parent"),
    };
    Some((mode, m))
}

fn signal_of(out: &Output) -> Option<i32> {
    out.status.signal()
}

#[test]
fn failed_fill_dies_with_sigbus_and_a_message() {
    if let Some((_, m)) = child_mode() {
        let v = view(m, 8, true, Pattern::failing("secret-pmo", 3));
        assert_eq!(read(&v, 2, 0), word(2, 0));
        let _ = read(&v, 3, 0); // dies here
        std::process::exit(3);
    }
    for m in mechanisms() {
        let out = child("failed_fill_dies_with_sigbus_and_a_message", "fill", m);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            signal_of(&out),
            Some(libc::SIGBUS),
            "{m}: {:?} {stderr}",
            out.status
        );
        assert!(
            stderr
                .contains("pmo: integrity error in PMO 'secret-pmo' page 3: tag mismatch (test)\n"),
            "{m}: stderr was {stderr}"
        );
    }
}

#[test]
fn write_to_read_only_view_is_sigsegv() {
    if let Some((mode, m)) = child_mode() {
        let v = view(m, 8, false, Pattern::new("ro"));
        if mode == "after-read" {
            assert_eq!(read(&v, 1, 0), word(1, 0));
        }
        write(&v, 1, 0, 7); // dies here
        std::process::exit(3);
    }
    for m in mechanisms() {
        for mode in ["after-read", "first-touch"] {
            let out = child("write_to_read_only_view_is_sigsegv", mode, m);
            assert_eq!(
                signal_of(&out),
                Some(libc::SIGSEGV),
                "{m} {mode}: {:?} {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

#[test]
fn faults_outside_views_reach_the_previous_handler() {
    if let Some((mode, m)) = child_mode() {
        let v = view(m, 8, true, Pattern::new("bystander"));
        assert_eq!(read(&v, 0, 0), word(0, 0)); // the view's handler is installed and works
        match mode.as_str() {
            "wild-write" => {
                // SAFETY: deliberately invalid: this child is meant to die with SIGSEGV.
                unsafe { (16 as *mut u64).write_volatile(1) };
            }
            "stack-overflow" => {
                fn recurse(n: u64) -> u64 {
                    let pad = std::hint::black_box([n; 64]);
                    if n == u64::MAX {
                        return 0;
                    }
                    pad[(n % 64) as usize].wrapping_add(recurse(n + 1))
                }
                std::thread::Builder::new()
                    .stack_size(256 * 1024)
                    .spawn(|| recurse(0))
                    .unwrap()
                    .join()
                    .ok();
            }
            _ => {}
        }
        std::process::exit(3);
    }
    for m in mechanisms() {
        let out = child(
            "faults_outside_views_reach_the_previous_handler",
            "wild-write",
            m,
        );
        assert_eq!(
            signal_of(&out),
            Some(libc::SIGSEGV),
            "{m}: {:?}",
            out.status
        );
        let out = child(
            "faults_outside_views_reach_the_previous_handler",
            "stack-overflow",
            m,
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("has overflowed its stack"),
            "{m}: Rust's report is chained to: {stderr}"
        );
        assert_eq!(
            signal_of(&out),
            Some(libc::SIGABRT),
            "{m}: {:?}",
            out.status
        );
    }
}

/// A fork child does not inherit views (MADV_DONTFORK): touching one is an ordinary SIGSEGV,
/// never silently zero-filled (userfaultfd) or shared (memfd) memory.
#[test]
fn fork_child_does_not_inherit_views() {
    for m in mechanisms() {
        let v = view(m, 4, true, Pattern::new("parent"));
        write(&v, 0, 0, 42);
        let addr = v.addr() as usize;
        // SAFETY: the child only touches memory and exits (async-signal-safe operations).
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork");
        if pid == 0 {
            // SAFETY: deliberately touching the parent's view address in the child.
            let x = unsafe { (addr as *const u64).read_volatile() };
            // SAFETY: _exit is async-signal-safe.
            unsafe { libc::_exit(if x == 42 { 3 } else { 4 }) };
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        let st = std::process::ExitStatus::from_raw(status);
        assert_eq!(st.signal(), Some(libc::SIGSEGV), "{m}: child status {st:?}");
        assert_eq!(read(&v, 0, 0), 42, "{m}: the parent's view is intact");
    }
}

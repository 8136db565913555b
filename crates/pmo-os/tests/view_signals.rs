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

static USR1_SEEN: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

extern "C" fn on_usr1(_: libc::c_int) {
    USR1_SEEN.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

/// A signal raised while a fill runs (on a fill stack) is held until the fault handler returns,
/// then delivered: it must not be delivered on the alternate stack over the handler's frame.
#[test]
fn signals_during_a_fill_wait_for_the_handler() {
    struct Raising;
    impl pmo_os::view::PageSource for Raising {
        fn fill(
            &self,
            page_index: u64,
            dst: &mut [u8; pmo_os::view::PAGE_SIZE],
        ) -> Result<(), pmo_os::view::FillError> {
            let before = USR1_SEEN.load(std::sync::atomic::Ordering::SeqCst);
            // SAFETY: raise is async-signal-safe; SIGUSR1 has a handler (installed below).
            unsafe { libc::raise(libc::SIGUSR1) };
            // Still inside the fault handler: the signal must not have run yet.
            let during = USR1_SEEN.load(std::sync::atomic::Ordering::SeqCst);
            dst.fill(if during == before {
                page_index as u8 + 1
            } else {
                0xEE
            });
            Ok(())
        }
        fn label(&self) -> &str {
            "raising"
        }
    }
    // SAFETY: installing a plain handler for SIGUSR1 with SA_ONSTACK (like a profiler would).
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = on_usr1 as extern "C" fn(libc::c_int) as usize;
        act.sa_flags = libc::SA_ONSTACK;
        libc::sigemptyset(&mut act.sa_mask);
        assert_eq!(
            libc::sigaction(libc::SIGUSR1, &act, std::ptr::null_mut()),
            0
        );
    }
    for m in mechanisms() {
        let v = m
            .create(m.options(4, true), std::sync::Arc::new(Raising))
            .unwrap();
        for page in 0..4u64 {
            let before = USR1_SEEN.load(std::sync::atomic::Ordering::SeqCst);
            // SAFETY: inside the view.
            let b = unsafe { v.addr().add(page as usize * 4096).read_volatile() };
            assert_eq!(
                b,
                page as u8 + 1,
                "{m}: the signal ran inside the fault handler"
            );
            assert_eq!(
                USR1_SEEN.load(std::sync::atomic::Ordering::SeqCst),
                before + 1,
                "{m}: delivered after"
            );
        }
    }
}

/// A fork child inherits the parent's `View` values and registry entries but not the mappings:
/// it can drop them harmlessly and create and use views of its own, even at the same address.
#[test]
fn fork_child_can_make_views_of_its_own() {
    if let Some((_, m)) = child_mode() {
        // Single test thread in this child process: fork, then use the views in the grandchild.
        let parent_view = view(m, 8, true, Pattern::new("parent"));
        assert_eq!(read(&parent_view, 1, 1), word(1, 1));
        let old_addr = parent_view.addr() as usize;
        // SAFETY: the harness's other thread is idle; the grandchild allocates (View::new).
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // The inherited view stays registered while we map our own at its address.
            let opts = pmo_os::view::ViewOptions {
                placement: pmo_os::view::Placement::Fixed(old_addr),
                ..m.options(8, true)
            };
            let mine = m
                .create(opts, Pattern::new("child"))
                .expect("child view at the old address");
            let mut ok = read(&mine, 3, 2) == word(3, 2) && {
                write(&mine, 5, 0, 9);
                dirty(&mine) == vec![5]
            };
            drop(parent_view); // must not unmap `mine`, which now occupies its range
            ok &= read(&mine, 5, 0) == 9 && read(&mine, 6, 6) == word(6, 6);
            // SAFETY: _exit ends the grandchild without running the parent's destructors.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(read(&parent_view, 2, 2), word(2, 2));
        std::process::exit(
            if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
                0
            } else {
                5
            },
        );
    }
    for m in mechanisms() {
        let out = child("fork_child_can_make_views_of_its_own", "fork", m);
        assert!(
            out.status.success(),
            "{m}: {:?} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Under mlockall(MCL_FUTURE) new mappings are populated at once; a view must still fill every
/// page from its source instead of showing the kernel's zero pages.
#[test]
fn views_fill_under_mlockall() {
    if let Some((_, m)) = child_mode() {
        // SAFETY: locks this child's memory; it exits right after.
        if unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) } != 0 {
            std::process::exit(7); // not permitted here: reported as skipped by the parent
        }
        let v = view(m, 16, true, Pattern::new("locked"));
        let ok = (0..16).all(|p| read(&v, p, 3) == word(p, 3));
        write(&v, 4, 0, 1);
        let ok = ok && dirty(&v) == vec![4];
        std::process::exit(if ok { 0 } else { 1 });
    }
    for m in mechanisms() {
        let out = child("views_fill_under_mlockall", "mlock", m);
        if out.status.code() == Some(7) {
            eprintln!("{m}: mlockall not permitted, not checked");
            continue;
        }
        assert!(
            out.status.success(),
            "{m}: {:?} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A misspelt `PMO_FAULT` / `PMO_DIRTY` is an error, not a silent fallback (checked in a child,
/// since the environment is process-wide).
#[test]
fn invalid_environment_is_an_error() {
    if let Ok(var) = std::env::var("PMO_VIEW_ENV_CHILD") {
        std::env::set_var(&var, "mprotect");
        let opts = pmo_os::view::ViewOptions::new(4096);
        let r = pmo_os::view::View::new(opts, Pattern::new("env"));
        let ok = matches!(r, Err(pmo_os::view::ViewError::InvalidEnv { .. }));
        // A resident view (a small PMO's) checks the same variables.
        let tracking = pmo_os::view::DirtyTracking::Twin;
        let r = pmo_os::view::View::resident(opts, Pattern::new("env"), tracking);
        let resident_ok = matches!(r, Err(pmo_os::view::ViewError::InvalidEnv { .. }));
        std::process::exit(if ok && resident_ok { 0 } else { 1 });
    }
    for var in [
        "PMO_FAULT",
        "PMO_DIRTY",
        "PMO_RESIDENT_PAGES",
        "PMO_VIEW_SPARE_BYTES",
    ] {
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "invalid_environment_is_an_error",
                "--test-threads=1",
            ])
            .env("PMO_VIEW_ENV_CHILD", var)
            .env_remove("PMO_FAULT")
            .env_remove("PMO_DIRTY")
            .env_remove("PMO_RESIDENT_PAGES")
            .env_remove("PMO_VIEW_SPARE_BYTES")
            .output()
            .expect("spawn child");
        assert!(out.status.success(), "{var}: {:?}", out.status);
    }
}

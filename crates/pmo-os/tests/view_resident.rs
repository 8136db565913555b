//! Resident views (`View::resident`, issue 29): filled whole when made, no faults, writes found
//! by comparing with a twin (or declared), plaintext zeroed at drop, mappings reused.
//!
//! The spare list is process-wide: the tests of this binary run one at a time (`serial`), so
//! that none takes or unmaps a spare another is looking at.
#![allow(unsafe_code)]

mod view_common;

use std::os::unix::process::ExitStatusExt;
use std::sync::Arc;

use pmo_os::view::{DirtyTracking, Placement, View, ViewOptions, PAGE_SIZE};
use view_common::{dirty, read, word, write, Pattern};

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A fixed address far from everything else of the process, distinct per test.
fn addr(n: usize) -> usize {
    0x3e00_0000_0000 + n * 0x10_0000
}

fn opts(at: usize, pages: usize, writable: bool) -> ViewOptions {
    ViewOptions {
        len_bytes: pages * PAGE_SIZE,
        placement: Placement::Fixed(at),
        writable,
        mechanism: None,
    }
}

fn resident(at: usize, pages: usize, writable: bool, src: Arc<Pattern>) -> View {
    View::resident(opts(at, pages, writable), src, DirtyTracking::Twin).expect("resident view")
}

/// Every page is there when the view is made: reads match the source and fault nothing.
#[test]
fn a_resident_view_is_filled_whole_and_never_faults() {
    let _serial = serial();
    let src = Pattern::new("whole");
    let v = resident(addr(1), 4, false, src.clone());
    assert!(v.is_resident());
    assert_eq!(src.fills.load(std::sync::atomic::Ordering::Relaxed), 4);
    for p in 0..4 {
        assert!(v.is_present(p));
        for i in [0, 17, 511] {
            assert_eq!(read(&v, p, i), word(p, i));
        }
    }
    assert_eq!(v.stats().faults, 0);
    assert!(dirty(&v).is_empty(), "a read-only view reports nothing");
}

/// Writes are found by comparing with the twin, each once; the twin holds the reported contents.
#[test]
fn writes_are_reported_once_from_their_twins() {
    let _serial = serial();
    let v = resident(addr(2), 4, true, Pattern::new("twin"));
    assert_eq!(v.dirty_tracking(), DirtyTracking::Twin);
    assert!(dirty(&v).is_empty(), "nothing written yet");
    write(&v, 1, 3, 7);
    write(&v, 3, 0, 9);
    let (mut out, mut twins) = (Vec::new(), Vec::new());
    v.collect_dirty_with_twins(&mut out, &mut twins).unwrap();
    assert_eq!(out, vec![1, 3]);
    assert_eq!(twins, vec![1, 3]);
    let t = v.twin_addr(1).expect("a twin");
    // SAFETY: the twin of page 1, a snapshot the collect took; word 3 is inside it.
    assert_eq!(unsafe { (t as *const u64).add(3).read() }, 7);
    assert!(dirty(&v).is_empty(), "reported once");
    // A declared page is reported even if its bytes did not change.
    v.mark_dirty(2).unwrap();
    assert_eq!(dirty(&v), vec![2]);
    // A discarded page is filled again and no longer reported.
    write(&v, 0, 0, 1);
    v.discard(0).unwrap();
    assert_eq!(read(&v, 0, 0), word(0, 0));
    assert!(dirty(&v).is_empty());
}

/// With declared tracking only declared pages are reported.
#[test]
fn declared_tracking_reports_only_declared_pages() {
    let _serial = serial();
    let v = View::resident(
        opts(addr(3), 2, true),
        Pattern::new("declared"),
        DirtyTracking::Declared,
    )
    .unwrap();
    assert_eq!(v.dirty_tracking(), DirtyTracking::Declared);
    write(&v, 0, 0, 5);
    assert!(dirty(&v).is_empty(), "not declared");
    v.mark_dirty(1).unwrap();
    assert_eq!(dirty(&v), vec![1]);
}

/// A declared view maps no twin: its spare is half the bytes of a twin-tracking view's, and a
/// view that compares with a twin never takes it (nor the reverse): it maps anew, and its
/// writes are found from its own twin.
#[test]
fn a_declared_view_has_no_twin_and_its_spare_serves_only_its_kind() {
    let _serial = serial();
    pmo_os::view::release_spares();
    let at = addr(9);
    let d = View::resident(
        opts(at, 4, true),
        Pattern::new("no-twin"),
        DirtyTracking::Declared,
    )
    .unwrap();
    assert!(d.twin_addr(0).is_none(), "declared tracking has no twin");
    write(&d, 1, 3, 0x77);
    d.mark_dirty(1).unwrap();
    assert_eq!(dirty(&d), vec![1]);
    drop(d);
    assert!(pmo_os::view::spare_kept_at(at));
    assert_eq!(
        pmo_os::view::spare_bytes_kept(),
        4 * PAGE_SIZE,
        "the view alone"
    );
    // A twin-tracking view of the range: not the twin-less spare.
    let t = resident(at, 4, true, Pattern::new("no-twin"));
    assert!(
        !pmo_os::view::spare_kept_at(at),
        "the twin-less spare was unmapped"
    );
    assert!(t.twin_addr(0).is_some());
    assert_eq!(read(&t, 1, 3), word(1, 3), "filled, not the stale write");
    write(&t, 2, 0, 9);
    assert_eq!(dirty(&t), vec![2], "found by comparing with its twin");
    drop(t);
    assert_eq!(
        pmo_os::view::spare_bytes_kept(),
        8 * PAGE_SIZE,
        "view and twin"
    );
    // And back: a declared view does not take the spare with a twin either.
    let d = View::resident(
        opts(at, 4, true),
        Pattern::new("no-twin"),
        DirtyTracking::Declared,
    )
    .unwrap();
    assert!(!pmo_os::view::spare_kept_at(at));
    assert!(d.twin_addr(0).is_none());
    assert_eq!(read(&d, 2, 0), word(2, 0));
    drop(d);
    pmo_os::view::release_spares();
}

/// A failed fill is an error, and the view's range is free or zeroed afterwards.
#[test]
fn a_failed_fill_is_an_error() {
    let _serial = serial();
    let e = View::resident(
        opts(addr(4), 4, false),
        Pattern::failing("bad", 2),
        DirtyTracking::Twin,
    )
    .unwrap_err();
    assert!(e.to_string().contains("tag mismatch"), "{e}");
}

/// The permissions of the mapping that starts at `addr`, as `/proc/self/maps` prints them.
fn perms_at(addr: usize) -> String {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let start = format!("{addr:x}-");
    maps.lines()
        .find(|l| l.starts_with(&start))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or_else(|| panic!("no mapping at {addr:#x}"))
        .to_string()
}

/// A read-only resident view is mapped without write permission (a write is an ordinary
/// SIGSEGV), and a fork child does not inherit it (`MADV_DONTFORK`): reading the range there
/// is a SIGSEGV, never the parent's plaintext.
#[test]
fn read_only_is_enforced_and_children_inherit_nothing() {
    let _serial = serial();
    let v = resident(addr(5), 2, false, Pattern::new("ro"));
    let a = v.addr() as usize;
    assert!(perms_at(a).starts_with("r-"), "{}", perms_at(a));
    let w = resident(addr(7), 2, true, Pattern::new("rw"));
    assert!(perms_at(w.addr() as usize).starts_with("rw"));
    // SAFETY: the child only touches memory and exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: deliberately reading the parent's view in the child (not inherited).
        let _ = unsafe { (a as *const u64).read_volatile() };
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    let st = std::process::ExitStatus::from_raw(status);
    assert_eq!(st.signal(), Some(libc::SIGSEGV), "child status {st:?}");
    assert_eq!(read(&v, 1, 1), word(1, 1), "the parent's view is intact");
}

/// The drop zeroes the plaintext (and the twin) and keeps the mappings; the next view of the
/// range takes them (same address, filled again) without mapping anything new.
#[test]
fn dropped_views_leave_zeros_and_their_mappings_are_reused() {
    let _serial = serial();
    let at = addr(6);
    let v = resident(at, 4, true, Pattern::new("reuse"));
    write(&v, 2, 5, 0xABCD);
    let (mut out, mut twins) = (Vec::new(), Vec::new());
    v.collect_dirty_with_twins(&mut out, &mut twins).unwrap();
    let twin = v.twin_addr(0).unwrap() as usize;
    assert_eq!(v.addr() as usize, at);
    drop(v);
    assert!(pmo_os::view::spare_kept_at(at));
    // The range and the twin stay mapped, and hold nothing of the view: every byte is zero.
    for base in [at, twin] {
        // SAFETY: the spare mappings, kept by the spare list (not unmapped: the list holds them).
        let bytes = unsafe { std::slice::from_raw_parts(base as *const u8, 4 * PAGE_SIZE) };
        assert!(bytes.iter().all(|&b| b == 0), "plaintext left at {base:#x}");
    }
    // A stale write after the drop is overwritten by the next view's fill.
    // SAFETY: the spare mapping at `at`, writable and kept mapped.
    unsafe { (at as *mut u64).write_volatile(0xDEAD) };
    let v = resident(at, 4, true, Pattern::new("reuse"));
    assert!(!pmo_os::view::spare_kept_at(at), "the spare was taken");
    assert_eq!(
        v.twin_addr(0).unwrap() as usize,
        twin,
        "the same twin mapping"
    );
    assert_eq!(
        read(&v, 0, 0),
        word(0, 0),
        "the stale write was filled over"
    );
    assert_eq!(read(&v, 2, 5), word(2, 5));
    assert!(dirty(&v).is_empty(), "the twin was filled too");
    drop(v);
    // A read-only view of the same range does not take a writable spare (nor the reverse):
    // it maps anew once the overlapping spare is unmapped.
    let r = resident(at, 4, false, Pattern::new("reuse-ro"));
    assert_eq!(r.addr() as usize, at);
    assert!(
        !pmo_os::view::spare_kept_at(at),
        "the writable spare was unmapped"
    );
    assert_eq!(read(&r, 3, 3), word(3, 3));
    drop(r);
    assert!(pmo_os::view::spare_kept_at(at));
    // SAFETY: the spare read-only mapping at `at`, kept mapped.
    let bytes = unsafe { std::slice::from_raw_parts(at as *const u8, 4 * PAGE_SIZE) };
    assert!(
        bytes.iter().all(|&b| b == 0),
        "plaintext left in the read-only spare"
    );
    pmo_os::view::release_spares();
    assert!(!pmo_os::view::spare_kept_at(at));
}

/// Whether any byte of `addr..addr + len` is mapped (`mincore` fails with `ENOMEM` on a range
/// with unmapped pages).
fn mapped(addr: usize, len: usize) -> bool {
    let mut vec = vec![0u8; len / PAGE_SIZE];
    // SAFETY: mincore only reports residency into `vec`, which holds one byte per page.
    unsafe { libc::mincore(addr as *mut libc::c_void, len, vec.as_mut_ptr()) == 0 }
}

/// A view of another range of the same shape takes a spare by moving it there: the old range
/// is no longer mapped, the new view is filled from its own source and nothing of the old view
/// shows; a range something else holds is never taken by a move.
#[test]
fn a_spare_of_the_same_shape_moves_to_another_range() {
    let _serial = serial();
    pmo_os::view::release_spares();
    let (a, b, c) = (addr(20), addr(21), addr(22));
    let v = resident(a, 16, true, Pattern::new("move-a"));
    write(&v, 1, 1, 0x5151);
    let twin = v.twin_addr(0).unwrap() as usize;
    drop(v);
    assert!(pmo_os::view::spare_kept_at(a));
    let src = Pattern::new("move-b");
    let w = resident(b, 16, true, src.clone());
    assert_eq!(w.addr() as usize, b);
    assert_eq!(
        src.fills.load(std::sync::atomic::Ordering::Relaxed),
        16,
        "filled from its source"
    );
    assert!(!pmo_os::view::spare_kept_at(a), "the spare was taken");
    assert!(
        !mapped(a, 16 * PAGE_SIZE),
        "the spare's old range was left mapped"
    );
    assert_eq!(
        w.twin_addr(0).unwrap() as usize,
        twin,
        "its twin came with it"
    );
    for p in 0..16 {
        for i in [0, 1, 511] {
            assert_eq!(read(&w, p, i), word(p, i), "page {p} word {i}");
        }
    }
    assert!(dirty(&w).is_empty(), "the twin was filled too");
    drop(w);
    // Another shape (32 pages) does not take it, nor does a small view (4 pages: it maps
    // anew, cheaper than a move); a range held by a mapping of someone else's is refused by
    // the move and reported as in use by the fresh map.
    let x = resident(c, 32, true, Pattern::new("move-c"));
    assert!(
        pmo_os::view::spare_kept_at(b),
        "a 16-page spare serves no 32-page view"
    );
    drop(x);
    drop(resident(addr(24), 4, true, Pattern::new("move-small")));
    let small = resident(addr(25), 4, true, Pattern::new("move-small"));
    assert!(
        pmo_os::view::spare_kept_at(addr(24)),
        "a 4-page view moved a spare"
    );
    drop(small);
    let d = addr(23);
    // SAFETY: a fresh anonymous mapping of our own at a free address of the test's area.
    let held = unsafe {
        libc::mmap(
            d as *mut libc::c_void,
            16 * PAGE_SIZE,
            libc::PROT_READ,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    assert_eq!(held as usize, d);
    let err = View::resident(
        opts(d, 16, true),
        Pattern::new("move-d"),
        DirtyTracking::Twin,
    );
    assert!(
        matches!(err, Err(pmo_os::view::ViewError::AddressInUse { .. })),
        "the held range was taken"
    );
    assert!(
        pmo_os::view::spare_kept_at(b),
        "the spare stays where it was"
    );
    // SAFETY: the mapping made above, ours alone.
    unsafe { libc::munmap(held, 16 * PAGE_SIZE) };
    pmo_os::view::release_spares();
}

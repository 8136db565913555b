//! View behaviour on one thread: fill on read and write, exact dirty tracking, install, discard,
//! populate_all, prefault, placement, several live views. Every test runs for every mechanism
//! available here.

#[path = "view_common.rs"]
mod view_common;

use std::io::Read;

use pmo_os::view::{DirtyTracking, Mechanism, Placement, View, ViewError, ViewOptions, PAGE_SIZE};
use view_common::*;

#[test]
fn fill_on_read() {
    for m in mechanisms() {
        let src = Pattern::new("fill-read");
        let v = view(m, 64, true, src.clone());
        assert_eq!(v.mechanism(), m.mechanism);
        assert!(!v.is_present(5));
        assert_eq!(read(&v, 5, 3), word(5, 3), "{m}");
        assert_eq!(read(&v, 5, 511), word(5, 511), "{m}");
        assert!(v.is_present(5));
        assert!(!v.is_present(6));
        assert_eq!(
            src.fills.load(std::sync::atomic::Ordering::Relaxed),
            1,
            "{m}"
        );
        let s = v.stats();
        assert_eq!(s.fills, 1, "{m}");
        assert!(s.faults >= 1, "{m}");
        assert_eq!(dirty(&v), Vec::<u64>::new(), "{m}: a read must not dirty");
    }
}

#[test]
fn fill_on_write() {
    for m in mechanisms() {
        let v = view(m, 32, true, Pattern::new("fill-write"));
        write(&v, 9, 7, 0xDEAD_BEEF);
        assert_eq!(read(&v, 9, 7), 0xDEAD_BEEF, "{m}");
        assert_eq!(
            read(&v, 9, 6),
            word(9, 6),
            "{m}: rest of the page is filled"
        );
        assert_eq!(read(&v, 9, 8), word(9, 8), "{m}");
        assert_eq!(dirty(&v), vec![9], "{m}");
        assert!(v.stats().write_faults >= 1, "{m}");
        assert_eq!(v.stats().fills, 1, "{m}");
    }
}

#[test]
fn dirty_tracking_is_exact() {
    for m in mechanisms() {
        let v = view(m, 128, true, Pattern::new("dirty"));
        // Page 3 is read before it is written (write-protect path); 7 and 100 are first touched
        // by a write; 50 is only read.
        assert_eq!(read(&v, 3, 0), word(3, 0));
        assert_eq!(read(&v, 50, 0), word(50, 0));
        write(&v, 100, 1, 1);
        write(&v, 3, 2, 2);
        write(&v, 7, 3, 3);
        assert_eq!(dirty(&v), vec![3, 7, 100], "{m}");
        assert_eq!(dirty(&v), Vec::<u64>::new(), "{m}: second collect");
        write(&v, 7, 4, 4);
        write(&v, 3, 5, 5);
        assert_eq!(dirty(&v), vec![3, 7], "{m}: written again");
        // Several writes to one page are one dirty page; the data stays.
        for i in 0..512 {
            write(&v, 100, i, i as u64);
        }
        assert_eq!(dirty(&v), vec![100], "{m}");
        assert_eq!(read(&v, 100, 511), 511);
        assert_eq!(read(&v, 3, 2), 2);
        assert_eq!(dirty(&v), Vec::<u64>::new(), "{m}");
    }
}

#[test]
fn dirty_runs_and_many_pages() {
    for m in mechanisms() {
        let pages = 1024u64;
        let v = view(m, pages as usize, true, Pattern::new("runs"));
        // Contiguous runs, isolated pages, and word boundaries of the bitmap.
        let mut expect: Vec<u64> = (60..70)
            .chain([127, 128, 129])
            .chain((500..700).step_by(3))
            .chain([1023])
            .collect();
        expect.sort();
        for &p in &expect {
            write(&v, p, 0, p);
        }
        assert_eq!(dirty(&v), expect, "{m}");
        // Everything written.
        for p in 0..pages {
            write(&v, p, 1, p);
        }
        assert_eq!(dirty(&v), (0..pages).collect::<Vec<_>>(), "{m}");
        assert_eq!(dirty(&v), Vec::<u64>::new(), "{m}");
    }
}

#[test]
fn install_discard_populate() {
    for m in mechanisms() {
        let src = Pattern::new("install");
        let v = view(m, 16, true, src.clone());
        let data = [0xA5u8; PAGE_SIZE];
        assert!(v.install(2, &data).unwrap(), "{m}");
        assert!(!v.install(2, &data).unwrap(), "{m}: already present");
        assert!(v.is_present(2));
        assert_eq!(read(&v, 2, 10), 0xA5A5_A5A5_A5A5_A5A5, "{m}");
        assert_eq!(
            dirty(&v),
            Vec::<u64>::new(),
            "{m}: installed pages are clean"
        );
        write(&v, 2, 0, 1);
        assert_eq!(dirty(&v), vec![2], "{m}");
        // Discard drops contents and dirtiness; the next touch fills from the source.
        write(&v, 2, 0, 2);
        v.discard(2).unwrap();
        v.discard(2).unwrap();
        v.discard(11).unwrap(); // absent: fine
        assert!(!v.is_present(2));
        assert_eq!(
            dirty(&v),
            Vec::<u64>::new(),
            "{m}: discarded page is not dirty"
        );
        assert_eq!(read(&v, 2, 0), word(2, 0), "{m}: refilled");
        assert_eq!(dirty(&v), Vec::<u64>::new(), "{m}");
        // Out of range.
        assert!(matches!(
            v.install(16, &data),
            Err(ViewError::PageOutOfRange { .. })
        ));
        assert!(matches!(
            v.discard(99),
            Err(ViewError::PageOutOfRange { .. })
        ));
        assert!(!v.is_present(16));

        let src2 = Pattern::new("populate");
        let w = view(m, 200, true, src2.clone());
        write(&w, 5, 0, 77); // present and dirty before populate: stays dirty
        w.populate_all().unwrap();
        assert!((0..200).all(|p| w.is_present(p)), "{m}");
        assert_eq!(w.stats().fills, 200, "{m}");
        assert_eq!(dirty(&w), vec![5], "{m}: populated pages are clean");
        let faults_before = w.stats().faults;
        for p in 0..200 {
            assert_eq!(read(&w, p, 1), word(p, 1), "{m} page {p}");
        }
        assert_eq!(
            w.stats().faults,
            faults_before,
            "{m}: no faults after populate_all"
        );
        write(&w, 150, 0, 1);
        assert_eq!(dirty(&w), vec![150], "{m}");
    }
}

#[test]
fn populate_fill_error_is_an_error() {
    for m in mechanisms() {
        let v = view(m, 8, true, Pattern::failing("bad", 6));
        match v.populate_all() {
            Err(ViewError::Fill { page: 6, reason }) => assert!(reason.contains("tag")),
            other => panic!("{m}: expected a fill error, got {other:?}"),
        }
        assert!(v.is_present(0));
        assert!(!v.is_present(6));
    }
}

#[test]
fn read_only_view_fills_and_reports_nothing() {
    for m in mechanisms() {
        let v = view(m, 8, false, Pattern::new("ro"));
        assert!(!v.writable());
        assert_eq!(read(&v, 4, 4), word(4, 4), "{m}");
        v.populate_all().unwrap();
        assert_eq!(read(&v, 7, 0), word(7, 0), "{m}");
        assert_eq!(dirty(&v), Vec::<u64>::new());
    }
}

#[test]
fn kernel_access_needs_prefault() {
    for m in mechanisms() {
        let v = view(m, 8, true, Pattern::new("kernel"));
        let mut zero = std::fs::File::open("/dev/zero").unwrap();
        // SAFETY: pages 2..4 of the view; the view stays alive while the slice is used.
        let slice =
            unsafe { std::slice::from_raw_parts_mut(v.addr().add(2 * PAGE_SIZE), 2 * PAGE_SIZE) };
        let err = zero
            .read(slice)
            .expect_err("a kernel write to a missing page fails");
        assert_eq!(err.raw_os_error(), Some(libc::EFAULT), "{m}");
        v.prefault_for_write(2 * PAGE_SIZE..4 * PAGE_SIZE).unwrap();
        assert_eq!(zero.read(slice).unwrap(), 2 * PAGE_SIZE, "{m}");
        assert_eq!(read(&v, 3, 100), 0, "{m}");
        assert_eq!(dirty(&v), vec![2, 3], "{m}");
        // Reading prefault: clean, and the kernel can read it.
        v.prefault(5 * PAGE_SIZE..5 * PAGE_SIZE + 1).unwrap();
        assert!(v.is_present(5));
        assert_eq!(dirty(&v), Vec::<u64>::new(), "{m}");
        // SAFETY: page 5 of the view, alive while the slice is used.
        let page5 = unsafe { std::slice::from_raw_parts_mut(v.addr().add(5 * PAGE_SIZE), 64) };
        let mut null = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/null")
            .unwrap();
        assert_eq!(std::io::Write::write(&mut null, page5).unwrap(), 64, "{m}");
        // A kernel write into a present clean page: scan tracking lets the kernel un-protect it
        // (and reports it); fault tracking and sigsegv need prefault_for_write.
        match zero.read(page5) {
            Ok(n) => {
                assert_eq!(m.tracking, DirtyTracking::Scan, "{m}");
                assert_eq!(n, 64);
                assert_eq!(dirty(&v), vec![5], "{m}");
            }
            Err(e) => {
                assert_ne!(m.tracking, DirtyTracking::Scan, "{m}");
                assert_eq!(e.raw_os_error(), Some(libc::EFAULT), "{m}");
                v.prefault_for_write(5 * PAGE_SIZE..6 * PAGE_SIZE).unwrap();
                assert_eq!(zero.read(page5).unwrap(), 64, "{m}");
                assert_eq!(dirty(&v), vec![5], "{m}");
            }
        }
        assert!(v.prefault(0..9 * PAGE_SIZE).is_err());
    }
}

#[test]
fn fixed_placement_and_address_in_use() {
    for m in mechanisms() {
        let len = 16 * PAGE_SIZE;
        // Find a free range (a view's, just dropped); other tests map concurrently, so the
        // range may be taken again before we map it: then try another one.
        let mut placed = None;
        for _ in 0..20 {
            let probe = view(m, 16, true, Pattern::new("probe"));
            let addr = probe.addr() as usize;
            drop(probe);
            let opts = ViewOptions {
                len_bytes: len,
                placement: Placement::Fixed(addr),
                writable: true,
                mechanism: Some(m.mechanism),
            };
            match m.create(opts, Pattern::new("fixed")) {
                Ok(v) => {
                    placed = Some((v, addr));
                    break;
                }
                Err(ViewError::AddressInUse { .. }) => continue,
                Err(e) => panic!("{m}: {e}"),
            }
        }
        let (a, addr) = placed.expect("a free range within 20 tries");
        assert_eq!(a.addr() as usize, addr, "{m}");
        write(&a, 1, 0, 5);
        assert_eq!(read(&a, 1, 0), 5);
        // Same range, and a range overlapping its end: refused, nothing replaced.
        for at in [addr, addr + 8 * PAGE_SIZE] {
            let opts = ViewOptions {
                len_bytes: len,
                placement: Placement::Fixed(at),
                writable: true,
                mechanism: Some(m.mechanism),
            };
            match m.create(opts, Pattern::new("clash")) {
                Err(ViewError::AddressInUse { addr: got, len: l }) => {
                    assert_eq!((got, l), (at, len));
                }
                other => panic!("{m}: expected AddressInUse, got {other:?}"),
            }
        }
        assert_eq!(read(&a, 1, 0), 5, "{m}: the existing view is intact");
        let bad = ViewOptions {
            len_bytes: len,
            placement: Placement::Fixed(addr + 1),
            writable: true,
            mechanism: Some(m.mechanism),
        };
        assert!(matches!(
            m.create(bad, Pattern::new("x")),
            Err(ViewError::InvalidAddress { .. })
        ));
    }
}

#[test]
fn invalid_lengths() {
    for len in [0, 100, PAGE_SIZE + 1] {
        let opts = ViewOptions::new(len);
        assert!(matches!(
            View::new(opts, Pattern::new("len")),
            Err(ViewError::InvalidLength)
        ));
    }
}

#[test]
fn drop_while_other_views_live() {
    for m in mechanisms() {
        let a = view(m, 8, true, Pattern::new("a"));
        let b = view(m, 8, true, Pattern::new("b"));
        let c = view(m, 8, false, Pattern::new("c"));
        assert_eq!(read(&a, 0, 0), word(0, 0));
        assert_eq!(read(&b, 1, 0), word(1, 0));
        write(&b, 2, 0, 9);
        drop(b);
        assert_eq!(read(&a, 3, 3), word(3, 3), "{m}");
        assert_eq!(read(&c, 4, 4), word(4, 4), "{m}");
        write(&a, 5, 0, 1);
        assert_eq!(dirty(&a), vec![5]);
        let d = view(m, 8, true, Pattern::new("d"));
        assert_eq!(read(&d, 7, 1), word(7, 1), "{m}");
    }
}

#[test]
fn env_and_names() {
    assert_eq!(
        Mechanism::from_name("userfaultfd"),
        Some(Mechanism::Userfaultfd)
    );
    assert_eq!(Mechanism::from_name("sigsegv"), Some(Mechanism::Sigsegv));
    assert_eq!(Mechanism::from_name("nope"), None);
    for m in [Mechanism::Userfaultfd, Mechanism::Sigsegv] {
        assert_eq!(Mechanism::from_name(m.name()), Some(m));
    }
    assert!(Mechanism::available().contains(&Mechanism::best()));
}

/// A fill that needs far more stack than an alternate signal stack has (8 KiB on Rust's threads)
/// still works: the handler runs it on a fill stack of its own.
#[test]
fn fill_may_use_a_large_stack() {
    struct StackHungry;
    impl pmo_os::view::PageSource for StackHungry {
        fn fill(
            &self,
            page_index: u64,
            dst: &mut [u8; PAGE_SIZE],
        ) -> Result<(), pmo_os::view::FillError> {
            let mut scratch = [0u8; 128 * 1024];
            for (i, b) in scratch.iter_mut().enumerate() {
                *b = (i as u64 ^ page_index) as u8;
            }
            let scratch = std::hint::black_box(&scratch);
            dst.copy_from_slice(&scratch[scratch.len() - PAGE_SIZE..]);
            Ok(())
        }
        fn label(&self) -> &str {
            "hungry"
        }
    }
    for m in mechanisms() {
        let v = std::sync::Arc::new(
            m.create(m.options(8, true), std::sync::Arc::new(StackHungry))
                .unwrap(),
        );
        let expect = |p: u64| ((128 * 1024 - PAGE_SIZE) as u64 ^ p) as u8;
        // SAFETY: inside the view.
        assert_eq!(unsafe { v.addr().read_volatile() }, expect(0), "{m}");
        let v2 = v.clone();
        let got =
            std::thread::spawn(move || unsafe { v2.addr().add(3 * PAGE_SIZE).read_volatile() })
                .join()
                .unwrap();
        assert_eq!(got, expect(3), "{m}");
    }
}

/// After a failed psync that keeps the application's changes, the collected pages are marked
/// dirty again and reported by the next collect; absent pages stay unreported.
#[test]
fn mark_dirty_reports_pages_again() {
    for m in mechanisms() {
        let v = view(m, 32, true, Pattern::new("mark"));
        write(&v, 4, 0, 40);
        write(&v, 20, 0, 200);
        assert_eq!(read(&v, 9, 0), word(9, 0));
        assert_eq!(dirty(&v), vec![4, 20], "{m}");
        for p in [4, 20, 9, 30] {
            v.mark_dirty(p).unwrap();
        }
        v.mark_dirty(4).unwrap(); // twice is once
        assert_eq!(dirty(&v), vec![4, 9, 20], "{m}: present pages only");
        assert_eq!(dirty(&v), Vec::<u64>::new(), "{m}");
        assert_eq!(
            (read(&v, 4, 0), read(&v, 20, 0)),
            (40, 200),
            "{m}: contents kept"
        );
        write(&v, 4, 1, 1);
        assert_eq!(dirty(&v), vec![4], "{m}: tracking re-armed");
        assert!(v.mark_dirty(32).is_err());
    }
}

/// Fault-around: a sequential run of first touches fills the pages ahead in growing windows
/// (2, 4, 8, 16), with the right contents, clean (not reported), and tracked when written
/// afterwards; a random touch fills one page; a neighbour whose fill fails is left absent
/// instead of killing the process.
#[test]
fn fault_around_fills_sequential_runs_ahead() {
    for m in mechanisms() {
        let pages = 64u64;
        let v = view(m, pages as usize, true, Pattern::failing("around", 40));
        let window = v.set_fault_around(16);
        if m.mechanism == Mechanism::Sigsegv {
            assert_eq!(window, 1, "{m}: no fault-around");
            continue;
        }
        assert_eq!(window, 16, "{m}");
        assert_eq!(v.set_fault_around(99), 16, "{m}: clamped");
        // A random touch: one page.
        assert_eq!(read(&v, 20, 3), word(20, 3));
        assert!(!v.is_present(21), "{m}: an isolated fault fills one page");
        // A run: 0 (one page), 1 (window 2: 1..=2), 3 (window 4: 3..=6), 7 (window 8: 7..=14).
        for p in [0u64, 1, 3, 7] {
            assert_eq!(read(&v, p, 1), word(p, 1), "{m}");
        }
        let present: Vec<u64> = (0..pages).filter(|&p| v.is_present(p)).collect();
        let mut want: Vec<u64> = (0..=14).collect();
        want.push(20);
        assert_eq!(present, want, "{m}");
        assert_eq!(v.stats().faults, 5, "{m}: four faults filled fifteen pages");
        for p in 0..=14 {
            assert_eq!(read(&v, p, 7), word(p, 7), "{m}: page {p}");
        }
        assert_eq!(dirty(&v), Vec::<u64>::new(), "{m}: filled clean");
        write(&v, 9, 0, 99);
        assert_eq!(dirty(&v), vec![9], "{m}: written after fault-around");
        // The run reaches page 40, whose fill fails: the window stops before it.
        for p in 32..40 {
            read(&v, p, 0);
        }
        assert!(
            !v.is_present(40),
            "{m}: the failing neighbour is left absent"
        );
        assert_eq!(read(&v, 41, 0), word(41, 0), "{m}");
        // A window that crosses into another mapping (an `mprotect` split the view) stops
        // there instead of failing the fault.
        // SAFETY: pages 52..54 of our own view; only their protection changes.
        let r = unsafe {
            libc::mprotect(
                v.addr().add(52 * PAGE_SIZE).cast(),
                2 * PAGE_SIZE,
                libc::PROT_READ,
            )
        };
        assert_eq!(r, 0);
        for p in 45..52 {
            assert_eq!(read(&v, p, 2), word(p, 2), "{m}: page {p}");
        }
        for p in 52..54 {
            assert_eq!(read(&v, p, 2), word(p, 2), "{m}: read-only page {p}");
        }
        assert_eq!(read(&v, 54, 2), word(54, 2), "{m}");
    }
}

/// Fault-around on a view of at most one window (a small PMO): the first fault fills every
/// page from the faulting one to the end, whatever the pattern, clean and tracked afterwards;
/// a write as the first touch installs the written page writable and the rest clean.
#[test]
fn a_small_view_fills_whole_at_its_first_fault() {
    for m in mechanisms() {
        for first_write in [false, true] {
            let v = view(m, 4, true, Pattern::new("small"));
            if v.set_fault_around(16) == 1 {
                continue; // sigsegv: no fault-around
            }
            if first_write {
                write(&v, 0, 0, 77);
            } else {
                assert_eq!(read(&v, 0, 2), word(0, 2), "{m}");
            }
            assert!(
                (0..4).all(|p| v.is_present(p)),
                "{m}: one fault filled all four"
            );
            assert_eq!(v.stats().faults, 1, "{m}");
            for p in 1..4 {
                assert_eq!(read(&v, p, 5), word(p, 5), "{m}: page {p}");
            }
            let want: Vec<u64> = if first_write { vec![0] } else { vec![] };
            assert_eq!(dirty(&v), want, "{m}: neighbours filled clean");
            write(&v, 3, 0, 33);
            assert_eq!(
                dirty(&v),
                vec![3],
                "{m}: a neighbour's later write is tracked"
            );
        }
        // A later page first: the pages after it, not the ones before.
        let v = view(m, 4, true, Pattern::new("small2"));
        if v.set_fault_around(16) == 1 {
            continue;
        }
        assert_eq!(read(&v, 2, 0), word(2, 0), "{m}");
        let present: Vec<u64> = (0..4).filter(|&p| v.is_present(p)).collect();
        assert_eq!(present, vec![2, 3], "{m}");
    }
}

/// Twin tracking over many pages: filled pages start hot, an unchanged collect makes them cold
/// (and returns their twins' memory in a batch), later writes fault and are reported; a page
/// written in two consecutive intervals stays hot and is reported only when it changes.
#[test]
fn twin_pages_go_cold_and_hot_again() {
    for m in mechanisms()
        .into_iter()
        .filter(|m| m.tracking == DirtyTracking::Twin)
    {
        let pages = 1024u64;
        let v = view(m, pages as usize, true, Pattern::new("twin"));
        for p in 0..pages {
            assert_eq!(read(&v, p, 5), word(p, 5), "{m}");
        }
        assert_eq!(v.hot_pages(), pages, "{m}: filled pages start hot");
        assert_eq!(dirty(&v), Vec::<u64>::new(), "{m}: nothing changed");
        assert_eq!(v.hot_pages(), 0, "{m}: unchanged pages went cold");
        let faults = v.stats().faults;
        let (mut out, mut from_twin) = (Vec::new(), Vec::new());
        for round in 1..=2u64 {
            for p in [3u64, 500, 1000] {
                write(&v, p, 0, p + round);
            }
            assert_eq!(
                v.stats().faults,
                faults + 3 * round,
                "{m}: cold pages fault"
            );
            out.clear();
            from_twin.clear();
            v.collect_dirty_with_twins(&mut out, &mut from_twin)
                .unwrap();
            assert_eq!(out, vec![3, 500, 1000], "{m} round {round}");
        }
        assert_eq!(
            from_twin, out,
            "{m}: written twice in a row: kept writable, read from twins"
        );
        assert_eq!(v.hot_pages(), 3, "{m}");
        for &p in &from_twin {
            let twin = v.twin_addr(p).unwrap();
            // SAFETY: the twin of a reported page stays unchanged until the next collect.
            let w0 = unsafe { (twin as *const u64).read() };
            assert_eq!(w0, p + 2, "{m}: the twin holds the committed contents");
        }
        // Written again (no fault: hot), and one of them unchanged.
        write(&v, 3, 0, 77);
        write(&v, 500, 0, 502);
        assert_eq!(v.stats().faults, faults + 6, "{m}: hot pages take no fault");
        assert_eq!(dirty(&v), vec![3], "{m}: only the changed page");
        assert_eq!(dirty(&v), Vec::<u64>::new(), "{m}");
        write(&v, 500, 0, 5);
        assert_eq!(
            dirty(&v),
            vec![500],
            "{m}: a cold page faults and is reported"
        );
        for p in 0..pages {
            let want = match p {
                3 => 77,
                500 => 5,
                1000 => 1002,
                _ => word(p, 0),
            };
            assert_eq!(read(&v, p, 0), want, "{m}: page {p}");
        }
    }
}

/// Large, fully present views (the scan's fast path over whole present runs, issue 16) report
/// exactly the written pages, round after round, with partly present regions next to them; a
/// discarded page inside a present run never hides a write elsewhere.
#[test]
fn dirty_tracking_is_exact_on_large_resident_views() {
    for m in mechanisms() {
        let pages = 3000u64;
        let v = view(m, pages as usize, true, Pattern::new("resident"));
        // Pages 0..2000 fully present (fast ranges for scan); 2000.. only every 3rd page.
        for p in 0..2000 {
            assert_eq!(read(&v, p, 0), word(p, 0), "{m}");
        }
        for p in (2000..pages).step_by(3) {
            assert_eq!(read(&v, p, 0), word(p, 0), "{m}");
        }
        assert!(dirty(&v).is_empty(), "{m}: reads reported as writes");
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for round in 0..6u64 {
            let mut want = std::collections::BTreeSet::new();
            for _ in 0..40 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let p = x % pages;
                write(&v, p, 7, round * 1000 + p);
                want.insert(p);
            }
            if round == 3 {
                v.discard(1234).unwrap();
                want.remove(&1234);
            }
            let got: Vec<u64> = dirty(&v);
            // Exact, except that the discarded page may be reported (its contents are the
            // medium's again).
            let got_set: std::collections::BTreeSet<u64> = got
                .iter()
                .copied()
                .filter(|&p| !(round == 3 && p == 1234))
                .collect();
            assert_eq!(got_set, want, "{m} round {round}");
            assert!(got.windows(2).all(|w| w[0] < w[1]), "{m}: not ascending");
            for &p in &want {
                assert_eq!(read(&v, p, 7), round * 1000 + p, "{m}");
            }
        }
        assert!(dirty(&v).is_empty(), "{m}: nothing written since");
    }
}

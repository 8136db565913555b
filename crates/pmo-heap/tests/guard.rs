//! Guard mode (metadata `mprotect`ed read-only outside allocator calls) against the store's
//! two fault mechanisms: it works over a userfaultfd view (metadata writes made while the pages
//! are opened are tracked and reach the medium at psync), and is refused with a clear error over
//! a sigsegv view, which manages the mapping's protections itself.

mod common;

use common::{pop, push, read_list, ScratchPool, KEY};
use pmo_heap::{
    AttachOptions, HeapOptions, Mechanism, OpenOptions, PmoHeap, PmoHeapError, Protection,
};

const HEAP_BYTES: u64 = 8 << 20;

fn attach_on(mechanism: Mechanism) -> AttachOptions {
    AttachOptions {
        mechanism: Some(mechanism),
        ..AttachOptions::default()
    }
}

fn guard_opts() -> HeapOptions {
    HeapOptions {
        subheaps: 2,
        protection: Protection::Guard,
    }
}

#[test]
fn guard_mode_over_userfaultfd_survives_psync_and_reattach() {
    if !Mechanism::Userfaultfd.is_available() {
        eprintln!("userfaultfd unavailable in this process: guard-over-uffd test skipped");
        return;
    }
    let mut sp = ScratchPool::new("guard-uffd", 64 << 20);
    let uffd = attach_on(Mechanism::Userfaultfd);
    let h = PmoHeap::create_with(&sp.pool, "g", HEAP_BYTES, KEY, &guard_opts(), uffd).unwrap();
    assert_eq!(h.protection(), Protection::Guard);
    assert_eq!(h.mechanism(), Mechanism::Userfaultfd);
    let mut expect: Vec<u64> = Vec::new();
    let mut next = 0u64;
    // Several psync cycles, each changing metadata pages that psync re-protected (uffd-wp)
    // while guard mode also flips them read-only and back: every metadata write must still be
    // tracked, or the re-opened heap would fail its checker or lose nodes.
    for round in 0..6u64 {
        for _ in 0..150 {
            push(&h, next, (next as usize * 53) % 3000);
            expect.insert(0, next);
            next += 1;
        }
        for _ in 0..(40 + round * 10) {
            let v = pop(&h).unwrap();
            assert_eq!(v, expect.remove(0));
        }
        h.psync().unwrap();
        h.check().unwrap();
    }
    h.detach().unwrap();
    sp.reopen();
    let open = OpenOptions {
        protection: Protection::Guard,
        attach: uffd,
    };
    let h = PmoHeap::open_with(&sp.pool, "g", KEY, &open).unwrap();
    assert_eq!(read_list(&h), expect);
    assert_eq!(h.check().unwrap().live_allocations, expect.len() as u64);
    // Also readable without guard mode (protection is per attach, not stored).
    h.detach().unwrap();
    let h = PmoHeap::open(&sp.pool, "g", KEY).unwrap();
    assert_eq!(read_list(&h), expect);
}

#[test]
fn guard_mode_over_sigsegv_is_refused_and_leaves_nothing_behind() {
    if !Mechanism::Sigsegv.is_available() {
        eprintln!("sigsegv mechanism unavailable: test skipped");
        return;
    }
    let sp = ScratchPool::new("guard-segv", 64 << 20);
    let segv = attach_on(Mechanism::Sigsegv);
    let e = PmoHeap::create_with(&sp.pool, "g", HEAP_BYTES, KEY, &guard_opts(), segv).unwrap_err();
    assert!(
        matches!(
            e,
            PmoHeapError::GuardIncompatible {
                mechanism: "sigsegv"
            }
        ),
        "{e}"
    );
    assert!(
        e.to_string().contains("userfaultfd"),
        "the error says what works: {e}"
    );
    assert!(
        !sp.pool.exists("g").unwrap(),
        "the refused create is undone"
    );

    // A heap made without protection on sigsegv works, and refuses guard mode at open.
    let off = HeapOptions {
        subheaps: 2,
        protection: Protection::Off,
    };
    let h = PmoHeap::create_with(&sp.pool, "g", HEAP_BYTES, KEY, &off, segv).unwrap();
    assert_eq!(h.mechanism(), Mechanism::Sigsegv);
    for v in 0..100 {
        push(&h, v, 200);
    }
    h.psync().unwrap();
    h.detach().unwrap();
    let e = PmoHeap::open_with(
        &sp.pool,
        "g",
        KEY,
        &OpenOptions {
            protection: Protection::Guard,
            attach: segv,
        },
    )
    .unwrap_err();
    assert!(matches!(e, PmoHeapError::GuardIncompatible { .. }), "{e}");
    // Auto degrades to no protection there instead of failing.
    let h = PmoHeap::open_with(
        &sp.pool,
        "g",
        KEY,
        &OpenOptions {
            protection: Protection::Auto,
            attach: segv,
        },
    )
    .unwrap();
    assert_eq!(h.protection(), Protection::Off);
    assert_eq!(read_list(&h).len(), 100);
    h.check().unwrap();
}

#[test]
fn declared_dirty_tracking_commits_what_heap_and_user_declare() {
    // Declared tracking is a userfaultfd view's (the sigsegv mechanism always tracks by faults).
    if !Mechanism::Userfaultfd.is_available() {
        eprintln!("userfaultfd unavailable in this process: declared-tracking test skipped");
        return;
    }
    let mut sp = ScratchPool::new("declared", 64 << 20);
    let declared = AttachOptions {
        tracking: Some(pmo_heap::DirtyTracking::Declared),
        mechanism: Some(Mechanism::Userfaultfd),
        ..AttachOptions::default()
    };
    let off = HeapOptions {
        subheaps: 2,
        protection: Protection::Off,
    };
    let h = PmoHeap::create_with(&sp.pool, "d", HEAP_BYTES, KEY, &off, declared).unwrap();
    assert_eq!(h.dirty_tracking(), pmo_heap::DirtyTracking::Declared);
    let mut expect = Vec::new();
    for round in 0..4u64 {
        for v in 0..100 {
            let value = round * 1000 + v;
            push(&h, value, (value as usize * 31) % 6000);
            expect.insert(0, value);
        }
        for _ in 0..30 {
            assert_eq!(pop(&h), Some(expect.remove(0)));
        }
        common::remove_at(&h, 5);
        expect.remove(5);
        common::grow_at(&h, 3, 9000);
        h.psync().unwrap();
    }
    h.detach().unwrap();
    sp.reopen();
    // Re-opened with the default tracking: what was declared is exactly what is there.
    let h = PmoHeap::open(&sp.pool, "d", KEY).unwrap();
    assert_eq!(read_list(&h), expect);
    assert_eq!(h.check().unwrap().live_allocations, expect.len() as u64);
    h.detach().unwrap();
    // And open again under declared tracking, in guard mode too.
    {
        let h = PmoHeap::open_with(
            &sp.pool,
            "d",
            KEY,
            &OpenOptions {
                protection: Protection::Guard,
                attach: declared,
            },
        )
        .unwrap();
        pop(&h);
        push(&h, 77, 10);
        h.psync().unwrap();
        h.detach().unwrap();
        let h = PmoHeap::open(&sp.pool, "d", KEY).unwrap();
        assert_eq!(read_list(&h)[0], 77);
        assert_eq!(read_list(&h).len(), expect.len());
        h.check().unwrap();
    }
}

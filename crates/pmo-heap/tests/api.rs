//! The PmoHeap API over a real pool file: create/open/psync/detach, durability of exactly the
//! psynced state, misuse across re-attach, out of space, the read-only checker for tools.

mod common;

use common::{pop, push, read_list, ScratchPool, KEY};
use pmo_heap::{check_pmo, HeapError, HeapOptions, PmoHeap, PmoHeapError, Protection};
use pmo_store::{Perm, StoreError};
use std::ptr::NonNull;

const HEAP_BYTES: u64 = 4 << 20;

fn opts() -> HeapOptions {
    HeapOptions {
        subheaps: 2,
        protection: Protection::Off,
    }
}

#[test]
fn create_psync_detach_open_keeps_exactly_the_psynced_state() {
    let mut sp = ScratchPool::new("api", 32 << 20);
    let h = PmoHeap::create(&sp.pool, "h", HEAP_BYTES, KEY, &opts()).unwrap();
    assert_eq!(h.name(), "h");
    assert_eq!(h.len() as u64, HEAP_BYTES);
    assert!(!h.relocated());
    for v in 0..200 {
        push(&h, v, (v as usize * 37) % 700);
    }
    for _ in 0..30 {
        pop(&h);
    }
    let synced = read_list(&h);
    h.psync().unwrap();
    // Not psynced: lost at detach, as at a crash.
    for v in 1000..1100 {
        push(&h, v, 5000);
    }
    pop(&h);
    h.detach().unwrap();

    sp.reopen();
    let h = PmoHeap::open(&sp.pool, "h", KEY).unwrap();
    assert_eq!(read_list(&h), synced);
    let report = h.check().unwrap();
    assert_eq!(
        report.live_allocations,
        synced.len() as u64,
        "no leak, no loss"
    );
    assert!(report.root_set);
    // Still usable, and a second round trip holds too.
    push(&h, 4242, 10);
    h.psync().unwrap();
    h.detach().unwrap();
    let h = PmoHeap::open(&sp.pool, "h", KEY).unwrap();
    assert_eq!(read_list(&h)[0], 4242);
    assert_eq!(read_list(&h).len(), synced.len() + 1);
}

#[test]
fn raw_pointers_stay_valid_across_attach() {
    let sp = ScratchPool::new("stable", 32 << 20);
    let h = PmoHeap::create(&sp.pool, "h", HEAP_BYTES, KEY, &opts()).unwrap();
    let p = h.alloc(100, 16).unwrap();
    h.set_root(Some(p)).unwrap();
    h.psync().unwrap();
    h.detach().unwrap();
    let h = PmoHeap::open(&sp.pool, "h", KEY).unwrap();
    assert_eq!(
        h.root().unwrap(),
        Some(p),
        "the PMO is mapped at its stable address"
    );
    assert!(h.usable_size(p).unwrap() >= 100);
}

#[test]
fn typed_root_pointer_round_trip() {
    let sp = ScratchPool::new("typed", 32 << 20);
    let h = PmoHeap::create(&sp.pool, "h", HEAP_BYTES, KEY, &opts()).unwrap();
    let t = h.alloc_typed::<[u64; 4]>().unwrap();
    h.set_root_ptr(t).unwrap();
    assert_eq!(h.root_ptr::<[u64; 4]>().unwrap(), t);
    h.set_root_ptr(pmo_heap::HeapPtr::<u8>::NULL).unwrap();
    assert_eq!(h.root().unwrap(), None);
    assert!(matches!(
        h.set_root_ptr(pmo_heap::HeapPtr::<u8>::from_offset(8)),
        Err(PmoHeapError::Heap(HeapError::BadHeapPtr(8)))
    ));
}

#[test]
fn misuse_is_rejected_across_reattach_and_changes_nothing() {
    let sp = ScratchPool::new("misuse", 32 << 20);
    let h = PmoHeap::create(&sp.pool, "h", HEAP_BYTES, KEY, &opts()).unwrap();
    let a = h.alloc(64, 16).unwrap();
    let b = h.alloc(8192, 16).unwrap();
    let keep = h.alloc(300, 16).unwrap();
    h.free(a).unwrap();
    h.psync().unwrap();
    h.detach().unwrap();

    let h = PmoHeap::open(&sp.pool, "h", KEY).unwrap();
    let before = h.check().unwrap();
    assert!(matches!(h.free(a), Err(HeapError::DoubleFree)));
    let interior = NonNull::new(b.as_ptr().wrapping_add(64)).unwrap();
    assert!(matches!(h.free(interior), Err(HeapError::InteriorPointer)));
    let outside = NonNull::new(h.addr().wrapping_add(h.len() + 4096)).unwrap();
    assert!(matches!(h.free(outside), Err(HeapError::NotInHeap)));
    assert!(matches!(
        h.free(NonNull::new(h.addr()).unwrap()),
        Err(HeapError::NotInHeap)
    ));
    assert_eq!(h.check().unwrap(), before, "rejected frees changed nothing");
    h.free(b).unwrap();
    h.free(keep).unwrap();
    assert!(matches!(h.free(keep), Err(HeapError::DoubleFree)));
    h.psync().unwrap();
    h.detach().unwrap();
    let h = PmoHeap::open(&sp.pool, "h", KEY).unwrap();
    assert_eq!(h.check().unwrap().live_allocations, 0);
}

#[test]
fn out_of_space_is_reported_and_the_heap_stays_usable_after_reopen() {
    let sp = ScratchPool::new("oos", 32 << 20);
    let h = PmoHeap::create(&sp.pool, "h", 1 << 20, KEY, &opts()).unwrap();
    let mut blocks = Vec::new();
    let err = loop {
        match h.alloc(3000, 16) {
            Ok(p) => blocks.push(p),
            Err(e) => break e,
        }
        assert!(blocks.len() < 10_000, "a 1 MiB heap cannot hold this many");
    };
    assert!(matches!(err, HeapError::OutOfSpace { size: 3000 }), "{err}");
    assert!(!blocks.is_empty());
    assert!(matches!(
        h.alloc(4 << 20, 16),
        Err(HeapError::TooLarge { .. } | HeapError::OutOfSpace { .. })
    ));
    h.check().unwrap();
    h.psync().unwrap();
    h.detach().unwrap();

    let h = PmoHeap::open(&sp.pool, "h", KEY).unwrap();
    let r = h.check().unwrap();
    assert_eq!(r.live_allocations, blocks.len() as u64);
    assert!(matches!(
        h.alloc(3000, 16),
        Err(HeapError::OutOfSpace { .. })
    ));
    for p in blocks.drain(..blocks.len() / 2) {
        h.free(p).unwrap();
    }
    let again = h.alloc(3000, 16).unwrap();
    h.free(again).unwrap();
    h.psync().unwrap();
    h.check().unwrap();
}

#[test]
fn create_failure_leaves_no_pmo_behind() {
    let sp = ScratchPool::new("fail", 32 << 20);
    // One page cannot hold a heap (header, root page, metadata, data).
    let e = PmoHeap::create(&sp.pool, "tiny", 4096, KEY, &opts()).unwrap_err();
    assert!(
        matches!(e, PmoHeapError::Heap(HeapError::RegionTooSmall { .. })),
        "{e}"
    );
    assert!(!sp.pool.exists("tiny").unwrap());
    // A name in use is the store's error, and the existing PMO is untouched.
    sp.pool.pcreate("taken", 1 << 20, KEY).unwrap();
    let e = PmoHeap::create(&sp.pool, "taken", 1 << 20, KEY, &opts()).unwrap_err();
    assert!(
        matches!(e, PmoHeapError::Store(StoreError::Exists(_))),
        "{e}"
    );
    assert!(sp.pool.exists("taken").unwrap());
}

#[test]
fn open_of_a_pmo_without_a_heap_says_so() {
    let sp = ScratchPool::new("nomagic", 32 << 20);
    sp.pool.pcreate("plain", 1 << 20, KEY).unwrap();
    let e = PmoHeap::open(&sp.pool, "plain", KEY).unwrap_err();
    assert!(matches!(e, PmoHeapError::Heap(HeapError::BadMagic)), "{e}");
    let e = PmoHeap::open(&sp.pool, "plain", b"wrong key").unwrap_err();
    assert!(
        matches!(e, PmoHeapError::Store(StoreError::WrongKey(_))),
        "{e}"
    );
    let e = PmoHeap::open(&sp.pool, "nothing", KEY).unwrap_err();
    assert!(
        matches!(e, PmoHeapError::Store(StoreError::NotFound(_))),
        "{e}"
    );
}

#[test]
fn open_or_create_creates_once_then_opens() {
    let sp = ScratchPool::new("ooc", 32 << 20);
    let h = PmoHeap::open_or_create(&sp.pool, "d", HEAP_BYTES, KEY, &opts()).unwrap();
    let p = h.alloc(10, 8).unwrap();
    h.set_root(Some(p)).unwrap();
    h.psync().unwrap();
    h.detach().unwrap();
    let h = PmoHeap::open_or_create(&sp.pool, "d", HEAP_BYTES, KEY, &opts()).unwrap();
    assert_eq!(h.root().unwrap(), Some(p), "opened, not re-formatted");
}

#[test]
fn a_second_writer_is_refused_while_attached() {
    let sp = ScratchPool::new("busy", 32 << 20);
    let h = PmoHeap::create(&sp.pool, "h", HEAP_BYTES, KEY, &opts()).unwrap();
    let e = PmoHeap::open(&sp.pool, "h", KEY).unwrap_err();
    assert!(
        matches!(e, PmoHeapError::Store(StoreError::Busy { .. })),
        "{e}"
    );
    drop(h);
    PmoHeap::open(&sp.pool, "h", KEY).unwrap();
}

#[test]
fn a_read_only_attachment_cannot_carry_a_heap() {
    let sp = ScratchPool::new("ro", 32 << 20);
    PmoHeap::create(&sp.pool, "h", HEAP_BYTES, KEY, &opts())
        .unwrap()
        .detach()
        .unwrap();
    let a = sp.pool.attach("h", Perm::Read, KEY).unwrap();
    let e = PmoHeap::open_attached(a, Protection::Off).unwrap_err();
    assert!(
        matches!(e, PmoHeapError::Store(StoreError::ReadOnly(_))),
        "{e}"
    );
}

#[test]
fn threads_allocate_concurrently_then_one_psync_commits_all() {
    let sp = ScratchPool::new("mt", 64 << 20);
    let h = PmoHeap::create(&sp.pool, "h", 16 << 20, KEY, &opts()).unwrap();
    let per_thread = 500usize;
    let all: Vec<Vec<usize>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let h = &h;
                s.spawn(move || {
                    let mut mine = Vec::new();
                    for i in 0..per_thread {
                        let size = 16 + (i * 97 + t * 13) % 2000;
                        let p = h.alloc(size, 16).unwrap();
                        // SAFETY: fresh block of `size` bytes.
                        unsafe { std::ptr::write_bytes(p.as_ptr(), t as u8, size) };
                        if i % 3 == 0 {
                            h.free(p).unwrap();
                        } else {
                            mine.push(p.as_ptr() as usize);
                        }
                        if i % 100 == 0 {
                            h.psync().unwrap();
                        }
                    }
                    mine
                })
            })
            .collect();
        handles.into_iter().map(|j| j.join().unwrap()).collect()
    });
    h.psync().unwrap();
    h.detach().unwrap();
    let h = PmoHeap::open(&sp.pool, "h", KEY).unwrap();
    let live: Vec<usize> = h
        .allocations()
        .unwrap()
        .iter()
        .map(|a| a.ptr.as_ptr() as usize)
        .collect();
    let mut expect: Vec<usize> = all.into_iter().flatten().collect();
    expect.sort_unstable();
    let mut live_sorted = live.clone();
    live_sorted.sort_unstable();
    assert_eq!(live_sorted, expect);
    h.check().unwrap();
}

#[test]
fn check_pmo_reports_heaps_and_skips_other_pmos() {
    let sp = ScratchPool::new("check", 32 << 20);
    sp.pool.pcreate("plain", 1 << 20, KEY).unwrap();
    assert_eq!(check_pmo(&sp.pool, "plain", KEY).unwrap(), None);

    let h = PmoHeap::create(&sp.pool, "h", HEAP_BYTES, KEY, &opts()).unwrap();
    for v in 0..50 {
        push(&h, v, 100);
    }
    h.psync().unwrap();
    // Attached read-write: the check reads the heap as of the writer's last psync (a reader
    // beside the writer, docs/readers.md).
    let r = check_pmo(&sp.pool, "h", KEY).unwrap().expect("a heap");
    assert_eq!(r.live_allocations, 50);
    h.detach().unwrap();

    let r = check_pmo(&sp.pool, "h", KEY).unwrap().expect("a heap");
    assert_eq!(r.live_allocations, 50);
    assert!(r.root_set);
    assert_eq!(
        r.allocated_bytes + r.free_bytes + r.slab_waste_bytes,
        r.capacity_bytes
    );
    // The check wrote nothing: the heap opens and holds the same.
    let h = PmoHeap::open(&sp.pool, "h", KEY).unwrap();
    assert_eq!(read_list(&h).len(), 50);
    h.detach().unwrap();

    // A corrupted header (one byte of the region-size field, committed page-level while the
    // PMO is at rest) is reported as an error, not as "no heap".
    // (Whole-page read + commit: `PmoHandle::write_at` is avoided on purpose, see docs/heap.md.)
    let handle = sp.pool.open_pmo("h", Perm::Write, KEY, None).unwrap();
    let mut page = Box::new([0u8; 4096]);
    handle.read_page(0, &mut page).unwrap();
    assert_eq!(&page[..8], b"PMOHEAP\0");
    page[20] ^= 0x40;
    handle.commit_pages(&[(0, &page)]).unwrap();
    drop(handle);
    let e = check_pmo(&sp.pool, "h", KEY).unwrap_err();
    assert!(
        matches!(e, PmoHeapError::Heap(HeapError::BadChecksum)),
        "{e}"
    );
}

#[test]
fn a_heap_for_declared_tracking_gets_a_sub_page_commit_log_by_default() {
    let mut sp = ScratchPool::new("sublog", 32 << 20);
    let scheme = sp.pool.default_scheme().unwrap();
    let logged = std::env::var("PMO_LOG").map_or(true, |v| v.trim() != "0")
        && (scheme == pmo_store::Scheme::NONE
            || scheme == pmo_store::Scheme::SECURE
            || scheme == pmo_store::Scheme::SECURE_GCM);
    let attach = pmo_store::AttachOptions {
        tracking: Some(pmo_store::DirtyTracking::Declared),
        ..Default::default()
    };
    let h = PmoHeap::create_with(&sp.pool, "h", HEAP_BYTES, KEY, &opts(), attach).unwrap();
    let p = h.alloc(64, 16).unwrap();
    h.set_root(Some(p)).unwrap();
    h.psync().unwrap();
    // An 8-byte declared change: one log record and one fence, not a page commit.
    // SAFETY: `p` is a live 64-byte block of the attached heap.
    unsafe { p.as_ptr().cast::<u64>().write(0x1122_3344_5566_7788) };
    h.declare(p.as_ptr(), 8).unwrap();
    let st = h.psync().unwrap();
    if logged {
        assert_eq!((st.fences, st.pages), (1, 1), "{scheme}: one record");
    } else {
        assert!(st.fences > 1, "{scheme}: a page commit without a log");
    }
    h.detach().unwrap();
    sp.reopen();
    let h = PmoHeap::open(&sp.pool, "h", KEY).unwrap();
    let p = h.root().unwrap().unwrap();
    // SAFETY: the root block of the re-attached heap, 64 bytes.
    assert_eq!(
        unsafe { p.as_ptr().cast::<u64>().read() },
        0x1122_3344_5566_7788
    );
}

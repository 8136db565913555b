//! End to end over the real store: a heap formatted inside an attached PMO, a list built in
//! it, psync under `quiesce`, more changes left un-synced, detach (which discards them), then
//! re-attach: the heap opens, passes the checker and holds exactly the psynced list.
#![allow(unsafe_code)]

use pmo_alloc::{Heap, HeapOptions, Protection};
use pmo_store::{KdfParams, Perm, Pool, PoolOptions};
use std::ptr::NonNull;

const KEY: &[u8] = b"alloc-store-key";

/// A list node: next pointer (raw: the PMO is attached at a stable address) and a value.
#[repr(C)]
struct Node {
    next: *mut Node,
    value: u64,
}

fn push(heap: &Heap, value: u64) {
    let head = heap
        .root()
        .unwrap()
        .map_or(std::ptr::null_mut(), |p| p.as_ptr().cast::<Node>());
    let p = heap
        .alloc(std::mem::size_of::<Node>(), 8)
        .unwrap()
        .cast::<Node>();
    // SAFETY: a fresh block for one Node.
    unsafe { p.as_ptr().write(Node { next: head, value }) };
    heap.set_root(Some(p.cast())).unwrap();
}

fn pop(heap: &Heap) {
    let Some(head) = heap.root().unwrap() else {
        return;
    };
    // SAFETY: the root is a live Node.
    let next = unsafe { (*head.as_ptr().cast::<Node>()).next };
    heap.set_root(NonNull::new(next.cast::<u8>())).unwrap();
    heap.free(head).unwrap();
}

fn values(heap: &Heap) -> Vec<u64> {
    let mut out = Vec::new();
    let mut cur = heap
        .root()
        .unwrap()
        .map_or(std::ptr::null_mut(), |p| p.as_ptr().cast::<Node>());
    while !cur.is_null() {
        heap.usable_size(NonNull::new(cur.cast::<u8>()).unwrap())
            .expect("list node is a live block");
        // SAFETY: checked live just above.
        let n = unsafe { cur.read() };
        out.push(n.value);
        cur = n.next;
        assert!(out.len() < 100_000);
    }
    out
}

#[test]
fn heap_in_an_attached_pmo_keeps_exactly_the_psynced_state() {
    let path = std::env::temp_dir().join(format!("pmo-alloc-store-{}.pool", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let opts = PoolOptions {
        kdf: KdfParams::INSECURE_FAST,
        ..Default::default()
    };
    let pool = Pool::create(&path, 64 << 20, &opts).unwrap();
    pool.pcreate("heap", 8 << 20, KEY).unwrap();

    let a = pool.attach("heap", Perm::Write, KEY).unwrap();
    // SAFETY: the attachment maps the PMO at its stable address until it is detached, after
    // the heap is dropped; nothing else touches it.
    let heap = unsafe {
        Heap::format(
            a.addr(),
            a.len(),
            &HeapOptions {
                subheaps: 2,
                protection: Protection::Off,
            },
        )
    }
    .unwrap();
    for v in 0..300 {
        push(&heap, v);
    }
    for _ in 0..50 {
        pop(&heap);
    }
    let synced = values(&heap);
    {
        let _quiet = heap.quiesce();
        a.psync().unwrap();
    }
    // Changes after the psync: lost at detach, as at a crash.
    for v in 1000..1100 {
        push(&heap, v);
    }
    for _ in 0..200 {
        pop(&heap);
    }
    drop(heap);
    a.detach().unwrap();
    drop(pool);

    let pool = Pool::open(&path).unwrap();
    let a = pool.attach("heap", Perm::Write, KEY).unwrap();
    // SAFETY: as above.
    let heap = unsafe { Heap::open(a.addr(), a.len()) }.unwrap();
    let report = heap.check().unwrap();
    assert_eq!(values(&heap), synced);
    assert_eq!(
        report.live_allocations,
        synced.len() as u64,
        "no leak, no lost block"
    );
    // And it keeps working: alloc, link, psync, re-attach.
    push(&heap, 7777);
    {
        let _quiet = heap.quiesce();
        a.psync().unwrap();
    }
    drop(heap);
    a.detach().unwrap();
    let a = pool.attach("heap", Perm::Read, KEY).unwrap();
    // SAFETY: as above; read-only use.
    let heap = unsafe { Heap::open(a.addr(), a.len()) }.unwrap();
    assert_eq!(values(&heap)[0], 7777);
    heap.check().unwrap();
    drop(heap);
    drop(a);
    drop(pool);
    let _ = std::fs::remove_file(&path);
}

//! The typed API over a pool file: round trips, psync/detach semantics, read-only attaches,
//! misuse refused with errors.
#![forbid(unsafe_code)]

mod common;

use common::{Point, Root, ScratchPool, KEY};
use pmo_typed::{
    PBTreeMap, PHashMap, PString, PVec, Persistent, TypedError, TypedHeap, TypedReader,
};

const HEAP: u64 = 8 << 20;

fn fill(heap: &mut TypedHeap) {
    let (r, h) = heap.root::<Root>().unwrap();
    r.counter = 7;
    r.name.set(h, "hello").unwrap();
    r.boxed.set(h, Point { x: 1, y: -2 }).unwrap();
    for i in 0..100 {
        r.list.push(h, i * i).unwrap();
        r.tree.insert(h, i * 3, i).unwrap();
    }
    for i in 0..20u64 {
        r.names.push(h, PString::default()).unwrap();
        r.names
            .get_mut(h, i as usize)
            .unwrap()
            .unwrap()
            .set(h, &format!("n{i}"))
            .unwrap();
        r.hash.insert(h, i, PString::default()).unwrap();
        r.hash
            .get_mut(h, &i)
            .unwrap()
            .unwrap()
            .set(h, &"x".repeat(i as usize))
            .unwrap();
    }
}

fn verify(r: &Root, h: &pmo_typed::Ctx) {
    assert_eq!(r.counter, 7);
    assert_eq!(r.name.as_str(h).unwrap(), "hello");
    let p = r.boxed.get(h).unwrap().unwrap();
    assert_eq!((p.x, p.y), (1, -2));
    assert_eq!(
        r.list.as_slice(h).unwrap(),
        (0..100).map(|i| i * i).collect::<Vec<u64>>()
    );
    for i in 0..20u64 {
        assert_eq!(
            r.names
                .get(h, i as usize)
                .unwrap()
                .unwrap()
                .as_str(h)
                .unwrap(),
            format!("n{i}")
        );
        assert_eq!(
            r.hash.get(h, &i).unwrap().unwrap().as_str(h).unwrap(),
            "x".repeat(i as usize)
        );
    }
    let range: Vec<(u64, u64)> = r
        .tree
        .range(h, 30..=60)
        .unwrap()
        .map(|e| e.map(|(k, v)| (*k, *v)))
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(range, (10..=20).map(|i| (i * 3, i)).collect::<Vec<_>>());
}

#[test]
fn round_trip_across_detach_and_pool_reopen() {
    let mut sp = ScratchPool::new("rt", 32 << 20);
    let mut heap = TypedHeap::create(&sp.pool, "t", HEAP, KEY).unwrap();
    fill(&mut heap);
    heap.psync().unwrap();
    let c = heap.check::<Root>().unwrap();
    assert!(c.unreachable.is_empty(), "leak: {:?}", c.unreachable);
    assert_eq!(c.reachable, c.heap.live_allocations);
    heap.detach().unwrap();
    sp.reopen();
    let reader = TypedReader::open(&sp.pool, "t", KEY).unwrap();
    let (r, h) = reader.root::<Root>().unwrap();
    verify(r, h);
    assert!(reader.check::<Root>().unwrap().unreachable.is_empty());
}

/// Under declared tracking the root is compared at psync, not declared when handed out: a
/// write to a root field is committed (even when the root was handed out again meanwhile, or
/// the psync goes through `heap()`), and a psync that changed only a container's contents does
/// not commit the root's page.
#[test]
fn declared_tracking_commits_root_writes_and_skips_an_unchanged_root() {
    let mut sp = ScratchPool::new("decl", 32 << 20);
    let declared = pmo_typed::AttachOptions {
        tracking: Some(pmo_typed::DirtyTracking::Declared),
        ..Default::default()
    };
    let mut heap = TypedHeap::create_with(&sp.pool, "t", HEAP, KEY, declared).unwrap();
    fill(&mut heap);
    heap.psync().unwrap();
    heap.detach().unwrap();
    sp.reopen();
    let mut heap = TypedHeap::open_with(&sp.pool, "t", KEY, declared).unwrap();
    // Only a tree value changes: one page (the leaf's), not the root's too.
    {
        let (r, h) = heap.root::<Root>().unwrap();
        *r.tree.get_mut(h, &30).unwrap().unwrap() = 1000;
    }
    assert_eq!(heap.psync().unwrap().pages, 1);
    // A root field written in the first hand-out, the root handed out again, then psync.
    heap.root::<Root>().unwrap().0.counter = 41;
    let _ = heap.root::<Root>().unwrap();
    assert_eq!(heap.psync().unwrap().pages, 1);
    // Written, then committed through the underlying heap.
    heap.root::<Root>().unwrap().0.counter = 42;
    heap.heap().psync().unwrap();
    heap.detach().unwrap();
    sp.reopen();
    let reader = TypedReader::open(&sp.pool, "t", KEY).unwrap();
    let (r, h) = reader.root::<Root>().unwrap();
    assert_eq!(r.counter, 42);
    assert_eq!(r.tree.get(h, &30).unwrap(), Some(&1000));
    assert_eq!(r.name.as_str(h).unwrap(), "hello");
}

#[test]
fn detach_without_psync_discards_and_panic_too() {
    let sp = ScratchPool::new("discard", 32 << 20);
    let mut heap = TypedHeap::create(&sp.pool, "t", HEAP, KEY).unwrap();
    fill(&mut heap);
    heap.psync().unwrap();
    {
        let (r, h) = heap.root::<Root>().unwrap();
        r.counter = 99;
        r.name.set(h, "changed").unwrap();
        r.tree.clear(h).unwrap();
        r.hash.remove(h, &3).unwrap();
    }
    heap.detach().unwrap();
    let pool = &sp.pool;
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut heap = TypedHeap::open(pool, "t", KEY).unwrap();
        let (r, h) = heap.root::<Root>().unwrap();
        r.list.clear(h).unwrap();
        panic!("between psyncs");
    }));
    assert!(outcome.is_err());
    let mut heap = TypedHeap::open(&sp.pool, "t", KEY).unwrap();
    let (r, h) = heap.root::<Root>().unwrap();
    verify(r, h);
}

#[test]
fn read_only_attach_refuses_writes_and_wrong_root_type() {
    let sp = ScratchPool::new("ro", 32 << 20);
    let mut heap = TypedHeap::create(&sp.pool, "t", HEAP, KEY).unwrap();
    fill(&mut heap);
    heap.psync().unwrap();
    heap.detach().unwrap();
    let a = TypedReader::open(&sp.pool, "t", KEY).unwrap();
    // The second reader of this process maps the PMO elsewhere: offsets, not addresses, so
    // every container reads the same.
    let relocate = pmo_typed::AttachOptions {
        relocate: true,
        ..Default::default()
    };
    let b = TypedReader::open_with(&sp.pool, "t", KEY, relocate).unwrap();
    let (ra, ha) = a.root::<Root>().unwrap();
    let (rb, hb) = b.root::<Root>().unwrap();
    verify(ra, ha);
    verify(rb, hb);
    assert_ne!(
        ra as *const Root, rb as *const Root,
        "the second reader is relocated"
    );
    assert!(!ha.is_writable());
    // A writer is refused while readers hold it.
    assert!(TypedHeap::open(&sp.pool, "t", KEY).is_err());
    // The wrong root type is an error, not a reinterpretation.
    match a.root::<Point>() {
        Err(TypedError::RootMismatch { .. }) => {}
        other => panic!("expected RootMismatch, got {other:?}"),
    }
    drop((a, b));
    let mut heap = TypedHeap::open(&sp.pool, "t", KEY).unwrap();
    assert!(matches!(
        heap.root::<Point>(),
        Err(TypedError::RootMismatch { .. })
    ));
    // A fresh heap read-only has no root.
    let fresh = TypedHeap::create(&sp.pool, "empty", 1 << 20, KEY).unwrap();
    fresh.detach().unwrap();
    let r = TypedReader::open(&sp.pool, "empty", KEY).unwrap();
    assert!(matches!(r.root::<Root>(), Err(TypedError::NoRoot)));
}

#[test]
fn containers_moved_out_of_the_pmo_are_refused() {
    let sp = ScratchPool::new("moved", 32 << 20);
    let mut heap = TypedHeap::create(&sp.pool, "t", HEAP, KEY).unwrap();
    let (r, h) = heap.root::<Root>().unwrap();
    r.list.push(h, 5).unwrap();
    // Moving the handle into DRAM: it can no longer be used (and is not misread).
    let mut out = std::mem::take(&mut r.list);
    assert!(matches!(out.push(h, 6), Err(TypedError::NotInPmo)));
    assert!(matches!(out.as_slice(h), Err(TypedError::NotInPmo)));
    // Moving it back is a legitimate move.
    r.list = out;
    assert_eq!(r.list.as_slice(h).unwrap(), &[5]);
    // A DRAM container is refused too.
    let mut dram: PVec<u64> = PVec::default();
    assert!(matches!(dram.push(h, 1), Err(TypedError::NotInPmo)));
    // Two heaps attached at once: a container swapped across is refused by heap id.
    let mut other = TypedHeap::create(&sp.pool, "u", 4 << 20, KEY).unwrap();
    let (r2, h2) = other.root::<Root>().unwrap();
    std::mem::swap(&mut r.list, &mut r2.list);
    assert!(matches!(
        r2.list.as_slice(h2),
        Err(TypedError::ForeignHeap { .. })
    ));
    std::mem::swap(&mut r.list, &mut r2.list);
    assert_eq!(r.list.as_slice(h).unwrap(), &[5]);
}

#[derive(Persistent, Default)]
#[repr(C)]
struct Two {
    a: PVec<u64>,
    b: PVec<u64>,
    m: PBTreeMap<u64, PString>,
}

/// A container header copied out of the PMO (`mem::take`), kept across a detach without psync
/// (which restores the original) and stored back elsewhere would make two owners of the same
/// blocks. Every header records where it lives, so the copy is refused (`Moved`), and so is
/// a container moved within the PMO by `mem::swap` until it is moved back.
#[test]
fn a_header_copied_across_a_discarding_detach_is_refused() {
    let sp = ScratchPool::new("dup", 32 << 20);
    let mut heap = TypedHeap::create(&sp.pool, "t", HEAP, KEY).unwrap();
    {
        let (r, h) = heap.root::<Two>().unwrap();
        r.a.extend_from_slice(h, &[1, 2, 3]).unwrap();
        r.m.insert(h, 1, PString::default()).unwrap();
        r.m.get_mut(h, &1).unwrap().unwrap().set(h, "one").unwrap();
    }
    heap.psync().unwrap();
    let stolen_vec;
    let stolen_map;
    {
        let (r, _) = heap.root::<Two>().unwrap();
        stolen_vec = std::mem::take(&mut r.a);
        stolen_map = std::mem::take(&mut r.m);
    }
    heap.detach().unwrap(); // no psync: `a` and `m` are back in the PMO
    let mut heap = TypedHeap::open(&sp.pool, "t", KEY).unwrap();
    let (r, h) = heap.root::<Two>().unwrap();
    assert_eq!(r.a.as_slice(h).unwrap(), &[1, 2, 3]);
    r.b = stolen_vec;
    assert!(matches!(r.b.as_slice(h), Err(TypedError::Moved)));
    assert!(matches!(r.b.push(h, 4), Err(TypedError::Moved)));
    assert!(matches!(r.b.clear(h), Err(TypedError::Moved)));
    // Inside a map's value too (a copied map as a value of the original).
    let mut holder = PBTreeMap::<u64, PString>::default();
    std::mem::swap(&mut holder, &mut r.m);
    assert!(matches!(holder.get(h, &1), Err(TypedError::NotInPmo)));
    std::mem::swap(&mut holder, &mut r.m);
    assert_eq!(stolen_map.len(), 1); // a stale copy in DRAM: never used again
                                     // The original still works, and the walk refuses the duplicate rather than accept it.
    assert_eq!(r.a.as_slice(h).unwrap(), &[1, 2, 3]);
    assert!(heap.check::<Two>().is_err());
    let (r, h) = heap.root::<Two>().unwrap();
    r.b = PVec::default();
    // mem::swap inside the PMO: both refused until swapped back.
    r.b.push(h, 9).unwrap();
    std::mem::swap(&mut r.a, &mut r.b);
    assert!(matches!(r.a.as_slice(h), Err(TypedError::Moved)));
    assert!(matches!(r.b.as_slice(h), Err(TypedError::Moved)));
    std::mem::swap(&mut r.a, &mut r.b);
    assert_eq!(r.a.as_slice(h).unwrap(), &[1, 2, 3]);
    assert_eq!(r.b.as_slice(h).unwrap(), &[9]);
    assert_eq!(r.m.get(h, &1).unwrap().unwrap().as_str(h).unwrap(), "one");
    let c = heap.check::<Two>().unwrap();
    assert!(c.unreachable.is_empty());
}

#[test]
fn pvec_and_pstring_operations() {
    let sp = ScratchPool::new("vec", 32 << 20);
    let mut heap = TypedHeap::create(&sp.pool, "t", HEAP, KEY).unwrap();
    let (r, h) = heap.root::<Root>().unwrap();
    r.list.extend_from_slice(h, &[1, 2, 3, 4]).unwrap();
    r.list.insert(h, 0, 0).unwrap();
    assert_eq!(r.list.remove(h, 2).unwrap(), 2);
    assert_eq!(r.list.pop(h).unwrap(), Some(4));
    assert_eq!(r.list.as_slice(h).unwrap(), &[0, 1, 3]);
    assert!(matches!(
        r.list.insert(h, 9, 0),
        Err(TypedError::OutOfBounds { .. })
    ));
    *r.list.get_mut(h, 1).unwrap().unwrap() = 10;
    assert_eq!(
        r.list.iter(h).unwrap().copied().collect::<Vec<_>>(),
        vec![0, 10, 3]
    );
    r.list.truncate(h, 1).unwrap();
    assert_eq!(r.list.len(), 1);
    r.name.set(h, "héllo").unwrap();
    r.name.push_str(h, " wörld").unwrap();
    assert_eq!(r.name.as_str(h).unwrap(), "héllo wörld");
    for i in 0..5 {
        r.names.push(h, PString::default()).unwrap();
        r.names
            .get_mut(h, i)
            .unwrap()
            .unwrap()
            .set(h, "abc")
            .unwrap();
    }
    r.names.delete(h, 2).unwrap();
    r.names.truncate(h, 2).unwrap();
    assert_eq!(r.boxed.take(h).unwrap(), None);
    r.boxed.set(h, Point { x: 3, y: 4 }).unwrap();
    r.boxed.get_mut(h).unwrap().unwrap().x = 30;
    assert_eq!(r.boxed.take(h).unwrap().map(|p| p.x), Some(30));
    let c = heap.check::<Root>().unwrap();
    assert!(
        c.unreachable.is_empty(),
        "freed elements leak nothing: {:?}",
        c.unreachable
    );
}

#[derive(Persistent, Default)]
#[repr(C)]
struct Trees {
    t: PBTreeMap<u64, PString>,
}

/// Deletes that empty leaves (ascending, descending, random, and ranges in the middle) free
/// them: the tree stays consistent with a std BTreeMap, scans agree, and nothing leaks.
#[test]
fn btree_deletes_merge_nodes_and_return_their_space() {
    use rand::seq::SliceRandom;
    use rand::SeedableRng;
    let sp = ScratchPool::new("bt", 48 << 20);
    let mut heap = TypedHeap::create(&sp.pool, "t", 16 << 20, KEY).unwrap();
    heap.root::<Trees>().unwrap();
    let empty_live = heap.check::<Trees>().unwrap().heap.live_allocations;
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for order in 0..4 {
        let (r, h) = heap.root::<Trees>().unwrap();
        let mut model = std::collections::BTreeMap::new();
        let mut keys: Vec<u64> = (0..4000).collect();
        keys.shuffle(&mut rng);
        for &k in &keys {
            r.t.insert(h, k, PString::default()).unwrap();
            r.t.get_mut(h, &k)
                .unwrap()
                .unwrap()
                .set(h, &k.to_string())
                .unwrap();
            model.insert(k, k.to_string());
        }
        let mut doomed: Vec<u64> = match order {
            0 => (0..3990).collect(),
            1 => (10..4000).rev().collect(),
            2 => keys[..3990].to_vec(),
            _ => (500..3500).collect(),
        };
        if order == 3 {
            doomed.shuffle(&mut rng);
        }
        for k in &doomed {
            assert!(r.t.remove(h, k).unwrap());
            model.remove(k);
        }
        let got: Vec<(u64, String)> =
            r.t.iter(h)
                .unwrap()
                .map(|e| e.map(|(k, v)| (*k, v.as_str(h).unwrap().to_string())))
                .collect::<Result<_, _>>()
                .unwrap();
        assert_eq!(
            got,
            model.clone().into_iter().collect::<Vec<_>>(),
            "order {order}"
        );
        for (k, v) in &model {
            assert_eq!(r.t.get(h, k).unwrap().unwrap().as_str(h).unwrap(), v);
        }
        let c = heap.check::<Trees>().unwrap();
        assert!(c.unreachable.is_empty(), "order {order}: leak");
        // Live blocks = the values' strings + the nodes. Removal merges and refills nodes, so
        // every node but the root keeps at least 15 of its 32 keys: 10 keys left fit in one
        // leaf, 1000 (order 3) in at most 66 leaves and their few inner nodes, not the ~250
        // leaves 4000 keys needed.
        let blocks = c.heap.live_allocations - empty_live - model.len() as u64;
        let bound = if order < 3 { 1 } else { 1000 / 15 + 6 };
        assert!(
            blocks <= bound,
            "order {order}: {blocks} node blocks for {} keys",
            model.len()
        );
        let (r, h) = heap.root::<Trees>().unwrap();
        r.t.clear(h).unwrap();
        assert_eq!(
            heap.check::<Trees>().unwrap().heap.live_allocations,
            empty_live
        );
    }
}

/// The byte-keyed store for YCSB-style drivers: insert, update, read, scan in key order,
/// remove, bad keys refused, durable across re-attach (sync_every 1) and batched psyncs.
#[test]
fn pkv_byte_keys_in_order_and_durable() {
    use pmo_typed::kv::PKv;
    let sp = ScratchPool::new("kv", 48 << 20);
    let heap = TypedHeap::create(&sp.pool, "kv", 16 << 20, KEY).unwrap();
    let mut kv = PKv::new(heap, 1).unwrap();
    let mut model = std::collections::BTreeMap::new();
    for i in [5u32, 50, 500, 1, 10, 100, 9999, 42] {
        let key = format!("user{i}");
        let val = vec![i as u8; (i % 300) as usize];
        kv.insert(key.as_bytes(), &val).unwrap();
        model.insert(key, val);
    }
    kv.update(b"user42", b"changed").unwrap();
    model.insert("user42".into(), b"changed".to_vec());
    assert!(kv.remove(b"user5").unwrap());
    model.remove("user5");
    assert!(!kv.remove(b"user5").unwrap());
    let mut out = Vec::new();
    for (k, v) in &model {
        assert!(kv.read(k.as_bytes(), &mut out).unwrap());
        assert_eq!(&out, v);
    }
    assert!(!kv.read(b"nobody", &mut out).unwrap());
    // Scans count records from the first key >= start, in byte order.
    assert_eq!(kv.scan(b"user1", 100).unwrap(), model.len());
    let from_user5: usize = model.range("user5".to_string()..).count();
    assert_eq!(kv.scan(b"user5", 100).unwrap(), from_user5);
    assert_eq!(kv.scan(b"user", 3).unwrap(), 3);
    for bad in [&b""[..], &[b'a'; 33][..], &b"a\0b"[..]] {
        assert!(matches!(
            kv.insert(bad, b"x"),
            Err(TypedError::InvalidKey { .. })
        ));
    }
    kv.close().unwrap();
    let heap = TypedHeap::open(&sp.pool, "kv", KEY).unwrap();
    let mut kv = PKv::new(heap, 100).unwrap();
    assert_eq!(kv.len().unwrap(), model.len());
    // Batched: 3 writes not synced are lost by a detach without psync.
    kv.insert(b"batch1", b"1").unwrap();
    kv.insert(b"batch2", b"2").unwrap();
    let check = kv.heap().check::<pmo_typed::kv::KvRoot>().unwrap();
    assert!(check.unreachable.is_empty());
    drop(kv);
    let heap = TypedHeap::open(&sp.pool, "kv", KEY).unwrap();
    let mut kv = PKv::new(heap, 1).unwrap();
    assert!(!kv.read(b"batch1", &mut out).unwrap());
    assert_eq!(kv.len().unwrap(), model.len());
}

#[derive(Persistent, Default)]
#[repr(C)]
struct Full {
    tree: PBTreeMap<u64, PString>,
    hash: PHashMap<u64, u64>,
    vec: PVec<u64>,
}

/// Filling a small heap: the call that runs out of space is refused with `OutOfSpace`, leaves
/// its container exactly as it was, leaks nothing, and the heap psyncs and keeps working after
/// some removals.
#[test]
fn out_of_space_leaves_containers_as_they_were() {
    let sp = ScratchPool::new("oos", 16 << 20);
    let mut heap = TypedHeap::create(&sp.pool, "t", 1 << 20, KEY).unwrap();
    let (r, h) = heap.root::<Full>().unwrap();
    let mut tree = std::collections::BTreeMap::new();
    let mut hash = std::collections::HashMap::new();
    let mut vec = Vec::new();
    let oos = |e: &TypedError| {
        matches!(
            e,
            TypedError::Alloc(pmo_typed::HeapError::OutOfSpace { .. })
                | TypedError::Alloc(pmo_typed::HeapError::TooLarge { .. })
        )
    };
    let mut failures = 0;
    for i in 0u64..200_000 {
        let s = "x".repeat((i % 700) as usize);
        let res = r.tree.insert(h, i, PString::default()).and_then(|_| {
            tree.insert(i, String::new());
            r.tree.get_mut(h, &i)?.unwrap().set(h, &s)?;
            tree.insert(i, s.clone());
            Ok(())
        });
        if let Err(e) = res {
            assert!(oos(&e), "{e}");
            failures += 1;
        }
        match r.hash.insert(h, i, i * 3) {
            Ok(_) => {
                hash.insert(i, i * 3);
            }
            Err(e) => {
                assert!(oos(&e), "{e}");
                failures += 1;
            }
        }
        match r.vec.push(h, i) {
            Ok(()) => vec.push(i),
            Err(e) => {
                assert!(oos(&e), "{e}");
                failures += 1;
            }
        }
        if failures > 20 {
            break;
        }
    }
    assert!(failures > 20, "a 1 MiB heap must fill up");
    let check_all = |heap: &TypedHeap,
                     tree: &std::collections::BTreeMap<u64, String>,
                     hash: &std::collections::HashMap<u64, u64>,
                     vec: &Vec<u64>| {
        let (r, h) = heap.root_ref::<Full>().unwrap();
        let got: Vec<(u64, String)> = r
            .tree
            .iter(h)
            .unwrap()
            .map(|e| e.map(|(k, v)| (*k, v.as_str(h).unwrap().to_string())))
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(got, tree.clone().into_iter().collect::<Vec<_>>());
        assert_eq!(r.hash.len(), hash.len());
        for (k, v) in hash {
            assert_eq!(r.hash.get(h, k).unwrap(), Some(v));
        }
        assert_eq!(r.vec.as_slice(h).unwrap(), &vec[..]);
        let c = heap.check::<Full>().unwrap();
        assert!(c.unreachable.is_empty(), "leak: {:?}", c.unreachable);
    };
    check_all(&heap, &tree, &hash, &vec);
    heap.psync().unwrap();
    // Free some space: the heap serves again.
    let (r, h) = heap.root::<Full>().unwrap();
    let doomed: Vec<u64> = tree.keys().copied().take(tree.len() / 2).collect();
    for k in doomed {
        assert!(r.tree.remove(h, &k).unwrap());
        tree.remove(&k);
    }
    r.tree.insert(h, u64::MAX, PString::default()).unwrap();
    tree.insert(u64::MAX, String::new());
    heap.psync().unwrap();
    heap.detach().unwrap();
    let heap = TypedHeap::open(&sp.pool, "t", KEY).unwrap();
    check_all(&heap, &tree, &hash, &vec);
}

//! Public API behaviour: alloc/free/realloc/usable_size, misuse errors, root, typed pointers,
//! iteration, statistics, out-of-space, re-open and header corruption.

use pmo_alloc::{HeapError, HeapOptions, HeapPtr, MappedHeap, MappedRegion, Protection};
use std::ptr::NonNull;

const MIB: usize = 1 << 20;

fn heap(len: usize, subheaps: u32) -> MappedHeap {
    MappedHeap::anonymous(
        len,
        &HeapOptions {
            subheaps,
            protection: Protection::Off,
        },
    )
    .unwrap()
}

fn fill(p: NonNull<u8>, len: usize, v: u8) {
    // SAFETY: `p` is a live block of at least `len` bytes owned by the test.
    unsafe { std::ptr::write_bytes(p.as_ptr(), v, len) }
}

fn bytes(p: NonNull<u8>, len: usize) -> Vec<u8> {
    // SAFETY: as in `fill`.
    unsafe { std::slice::from_raw_parts(p.as_ptr(), len) }.to_vec()
}

#[test]
fn alloc_free_sizes_and_alignment() {
    let h = heap(32 * MIB, 2);
    for size in [
        0usize, 1, 15, 16, 17, 100, 400, 401, 1000, 4096, 4097, 10_000, 65_536, MIB,
    ] {
        for align in [1usize, 8, 16, 64, 256, 4096] {
            let p = h.alloc(size, align).unwrap();
            assert_eq!(p.as_ptr() as usize % align, 0, "size {size} align {align}");
            let usable = h.usable_size(p).unwrap();
            assert!(usable >= size.max(1));
            fill(p, size, 0x5A);
            h.free(p).unwrap();
        }
    }
    let r = h.check().unwrap();
    assert_eq!(r.live_allocations, 0);
    assert_eq!(r.allocated_bytes, 0);
    assert!(matches!(h.alloc(8, 3), Err(HeapError::BadAlignment(3))));
    assert!(matches!(
        h.alloc(8, 8192),
        Err(HeapError::BadAlignment(8192))
    ));
    assert!(matches!(
        h.alloc(usize::MAX / 2, 16),
        Err(HeapError::TooLarge { .. })
    ));
}

#[test]
fn misuse_is_rejected_and_changes_nothing() {
    let h = heap(16 * MIB, 1);
    let small = h.alloc(64, 16).unwrap();
    let other = h.alloc(64, 16).unwrap();
    let large = h.alloc(3 * 4096, 16).unwrap();
    let before = h.check().unwrap();
    let interior_small = NonNull::new(small.as_ptr().wrapping_add(8)).unwrap();
    let interior_large = NonNull::new(large.as_ptr().wrapping_add(4096)).unwrap();
    let interior_large_odd = NonNull::new(large.as_ptr().wrapping_add(100)).unwrap();
    assert!(matches!(
        h.free(interior_small),
        Err(HeapError::InteriorPointer)
    ));
    assert!(matches!(
        h.free(interior_large),
        Err(HeapError::InteriorPointer)
    ));
    assert!(matches!(
        h.free(interior_large_odd),
        Err(HeapError::InteriorPointer)
    ));
    let outside = NonNull::new(h.base().as_ptr().wrapping_add(h.region_len() + 4096)).unwrap();
    assert!(matches!(h.free(outside), Err(HeapError::NotInHeap)));
    assert!(
        matches!(h.free(h.base()), Err(HeapError::NotInHeap)),
        "the header is not a block"
    );
    let mut stack = 0u64;
    assert!(matches!(
        h.free(NonNull::from(&mut stack).cast()),
        Err(HeapError::NotInHeap)
    ));
    assert_eq!(
        h.check().unwrap(),
        before,
        "rejected frees changed the heap"
    );

    h.free(small).unwrap();
    assert!(matches!(h.free(small), Err(HeapError::DoubleFree)));
    h.free(large).unwrap();
    assert!(matches!(h.free(large), Err(HeapError::DoubleFree)));
    // A never-allocated address in free space.
    let free_space = NonNull::new(large.as_ptr().wrapping_add(3 * 4096 + 40)).unwrap();
    assert!(matches!(h.free(free_space), Err(HeapError::NotAllocated)));
    // Inside a free slot, not at its start.
    let in_free_slot = NonNull::new(small.as_ptr().wrapping_add(8)).unwrap();
    assert!(matches!(h.free(in_free_slot), Err(HeapError::NotAllocated)));
    let after = h.check().unwrap();
    assert_eq!(after.live_allocations, 1);
    assert!(matches!(h.usable_size(small), Err(HeapError::DoubleFree)));
    h.free(other).unwrap();
    assert_eq!(h.check().unwrap().live_allocations, 0);
}

#[test]
fn realloc_preserves_contents() {
    let h = heap(32 * MIB, 2);
    let mut p = h.alloc(10, 16).unwrap();
    fill(p, 10, 7);
    let mut len = 10;
    for new in [20usize, 300, 5000, 70_000, 100, 3, 200_000, 16] {
        let q = h.realloc(p, new, 16).unwrap();
        let keep = len.min(new);
        assert!(
            bytes(q, keep).iter().all(|b| *b == 7),
            "realloc {len} -> {new} lost bytes"
        );
        assert!(h.usable_size(q).unwrap() >= new);
        fill(q, new, 7);
        p = q;
        len = new;
    }
    assert!(matches!(
        h.realloc(NonNull::new(p.as_ptr().wrapping_add(1)).unwrap(), 10, 16),
        Err(HeapError::InteriorPointer)
    ));
    h.free(p).unwrap();
    assert!(matches!(h.realloc(p, 10, 16), Err(HeapError::DoubleFree)));
    h.check().unwrap();
}

#[test]
fn root_typed_pointers_and_reopen() {
    let h = heap(8 * MIB, 2);
    assert_eq!(h.root().unwrap(), None);
    let node: HeapPtr<[u64; 4]> = h.alloc_typed().unwrap();
    let p = h.resolve(node).unwrap().unwrap();
    // SAFETY: `p` is a fresh, aligned block for one [u64; 4].
    unsafe { p.as_ptr().write([1, 2, 3, 4]) };
    h.set_root(Some(p.cast())).unwrap();
    assert_eq!(h.root_ptr::<[u64; 4]>().unwrap(), node);
    assert!(matches!(
        h.set_root(Some(
            NonNull::new(p.as_ptr().cast::<u8>().wrapping_add(8)).unwrap()
        )),
        Err(HeapError::InteriorPointer)
    ));
    assert!(
        h.resolve(HeapPtr::<u64>::from_offset(3)).is_err(),
        "offset in the header"
    );
    assert!(
        h.resolve(HeapPtr::<u64>::from_offset(h.geometry().data_offset + 4))
            .is_err(),
        "misaligned"
    );
    assert!(h.resolve(HeapPtr::<u8>::NULL).unwrap().is_none());

    let region = h.into_region();
    let h = MappedHeap::open(region, Protection::Off).unwrap();
    let root = h.root().unwrap().unwrap();
    assert_eq!(root, p.cast());
    // SAFETY: the root block survived the re-attach at the same address.
    assert_eq!(
        unsafe { root.cast::<[u64; 4]>().as_ptr().read() },
        [1, 2, 3, 4]
    );
    assert_eq!(h.check().unwrap().live_allocations, 1);
    // The root must stay a live block: once freed, root() reports it.
    h.free(root).unwrap();
    assert!(matches!(h.root(), Err(HeapError::Corrupt { .. })));
    h.set_root(None).unwrap();
    assert_eq!(h.root().unwrap(), None);
}

#[test]
fn iteration_and_stats_agree() {
    let h = heap(16 * MIB, 2);
    let mut live = Vec::new();
    for i in 0..300usize {
        live.push((h.alloc(1 + i * 37 % 9000, 16).unwrap(), 1 + i * 37 % 9000));
    }
    for (p, _) in live.iter().step_by(3) {
        h.free(*p).unwrap();
    }
    let kept: Vec<_> = live
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 3 != 0)
        .map(|(_, x)| *x)
        .collect();
    let all = h.allocations().unwrap();
    assert_eq!(all.len(), kept.len());
    for (p, size) in &kept {
        let a = all
            .iter()
            .find(|a| a.ptr == *p)
            .expect("live block missing from iteration");
        assert!(a.usable_size >= *size);
    }
    let stats = h.stats().unwrap();
    let report = h.check().unwrap();
    assert_eq!(stats.live_allocations, kept.len() as u64);
    assert_eq!(stats.live_bytes, report.allocated_bytes);
    assert_eq!(
        report.allocated_bytes + report.free_bytes + report.slab_waste_bytes,
        report.capacity_bytes
    );
    assert_eq!(stats.capacity_bytes, report.capacity_bytes);
}

#[test]
fn out_of_space_is_an_error_and_the_heap_stays_usable() {
    let h = heap(4 * MIB, 2);
    let mut blocks = Vec::new();
    let err = loop {
        match h.alloc(1000, 16) {
            Ok(p) => blocks.push(p),
            Err(e) => break e,
        }
    };
    assert!(matches!(err, HeapError::OutOfSpace { size: 1000 }));
    assert!(
        blocks.len() > 3000,
        "only {} blocks of 1000 B in 4 MiB",
        blocks.len()
    );
    assert!(matches!(
        h.alloc(64 * 1024, 16),
        Err(HeapError::OutOfSpace { .. })
    ));
    h.check().unwrap();
    for p in blocks.drain(..).rev().step_by(2) {
        h.free(p).unwrap();
    }
    let p = h.alloc(1000, 16).unwrap();
    h.free(p).unwrap();
    h.check().unwrap();
    // Freeing everything coalesces back to one free extent per sub-heap.
    for a in h.allocations().unwrap() {
        h.free(a.ptr).unwrap();
    }
    let r = h.check().unwrap();
    assert_eq!(r.live_allocations, 0);
    // One empty slab per used class is kept per sub-heap; each may split a free extent.
    assert!(
        r.free_extents <= 2 + r.slabs && r.slabs <= 2,
        "free space not coalesced: {r:?}"
    );
    let big = h.alloc(h.max_alloc_bytes() / 2, 16);
    assert!(big.is_ok(), "large block after coalescing: {big:?}");
}

#[test]
fn open_rejects_garbage_and_corrupted_headers() {
    let len = 4 * MIB;
    let region = MappedRegion::anonymous(len).unwrap();
    let region = match MappedHeap::open(region, Protection::Off) {
        Err(HeapError::BadMagic) => MappedRegion::anonymous(len).unwrap(),
        other => panic!("zeroed region opened: {other:?}"),
    };
    let h = MappedHeap::format(
        region,
        &HeapOptions {
            subheaps: 2,
            ..Default::default()
        },
    )
    .unwrap();
    let p = h.alloc(100, 16).unwrap();
    h.set_root(Some(p)).unwrap();
    let root_offset = h.root_ptr::<u8>().unwrap().offset();
    let mut region = h.into_region();
    let good = region.snapshot();
    for (at, expect) in [
        (0usize, "magic"),
        (8, "version"),
        (20, "checksum"),
        (4096, "root"),
        (8192, "subheap"),
    ] {
        region.restore(&good);
        region.bytes_mut()[at] ^= 0x40;
        let r = MappedHeap::open(region, Protection::Off);
        match (&r, expect) {
            (Err(HeapError::BadMagic), "magic") => {}
            (Err(HeapError::BadVersion(_)), "version") => {}
            (Err(HeapError::BadChecksum), "checksum") => {}
            (Err(HeapError::Corrupt { .. }), "root" | "subheap") => {}
            _ => panic!("flip at {at} ({expect}): {r:?}"),
        }
        region = MappedRegion::anonymous(len).unwrap();
    }
    // A region shorter than the header claims.
    let mut short = MappedRegion::anonymous(len / 2).unwrap();
    short.restore(&good[..len / 2]);
    assert!(matches!(
        MappedHeap::open(short, Protection::Off),
        Err(HeapError::BadGeometry(_))
    ));
    // And the intact copy still opens (at another address: the root is kept as an offset).
    region.restore(&good);
    let h = MappedHeap::open(region, Protection::Off).unwrap();
    assert_eq!(h.root_ptr::<u8>().unwrap().offset(), root_offset);
    assert_eq!(h.check().unwrap().live_allocations, 1);
}

#[test]
fn corrupted_metadata_gives_errors_not_crashes() {
    // Flip random bytes of the metadata and run every operation: errors are fine, panics and
    // memory errors are not.
    use rand::{Rng, SeedableRng};
    let len = 4 * MIB;
    let h = heap(len, 2);
    let mut keep = Vec::new();
    for i in 0..500usize {
        let p = h.alloc(16 + (i * 97) % 6000, 16).unwrap();
        if i % 4 == 0 {
            h.free(p).unwrap();
        } else {
            keep.push(p);
        }
    }
    let mut region = h.into_region();
    let good = region.snapshot();
    let geo_data = {
        let h = MappedHeap::open(region, Protection::Off).unwrap();
        let g = h.geometry();
        region = h.into_region();
        g
    };
    let seed: u64 = std::env::var("PMO_ALLOC_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(42);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for trial in 0..200 {
        region.restore(&good);
        for _ in 0..8 {
            let at = rng.gen_range(8192..geo_data.data_offset as usize);
            region.bytes_mut()[at] = rng.gen();
        }
        let h = match MappedHeap::open(region, Protection::Off) {
            Ok(h) => h,
            Err(_) => {
                region = MappedRegion::anonymous(len).unwrap();
                continue;
            }
        };
        let _ = h.check();
        let _ = h.allocations();
        for p in keep.iter().step_by(7) {
            let _ = h.usable_size(*p);
            let _ = h.free(*p);
        }
        for s in [8usize, 300, 5000, 70_000] {
            let _ = h.alloc(s, 16);
        }
        let _ = h.stats();
        let _ = trial;
        region = h.into_region();
    }
}

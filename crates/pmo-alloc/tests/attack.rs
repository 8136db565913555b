//! The PMDK header-corruption attack from the POSEIDON slides, reproduced: fill the heap with
//! 64-byte objects, overwrite the 16 bytes in front of one object with a larger size, free it,
//! then allocate until full. PMDK hands out 9 objects, 8 of them still in use; here metadata is
//! not in front of blocks, so exactly the freed object comes back and nothing overlaps.

use pmo_alloc::{HeapError, HeapOptions, MappedHeap, Protection};
use std::ptr::NonNull;

fn pattern(i: usize) -> u8 {
    (i % 251) as u8 + 1
}

fn run_attack(protection: Protection) {
    let h = MappedHeap::anonymous(
        4 << 20,
        &HeapOptions {
            subheaps: 1,
            protection,
        },
    )
    .unwrap();
    // 1) Make the heap full of 64-byte objects, each filled with its own pattern.
    let mut objects: Vec<NonNull<u8>> = Vec::new();
    loop {
        match h.alloc(64, 16) {
            Ok(p) => {
                // SAFETY: fresh 64-byte block.
                unsafe { std::ptr::write_bytes(p.as_ptr(), pattern(objects.len()), 64) };
                objects.push(p);
            }
            Err(HeapError::OutOfSpace { .. }) => break,
            Err(e) => panic!("unexpected {e}"),
        }
    }
    assert!(objects.len() > 1000);
    let before = h.check().unwrap();

    // 2) Corrupt "the header": write a larger size just before the victim.
    let victim_index = objects.len() / 2;
    let victim = objects[victim_index];
    let header = victim.as_ptr().wrapping_sub(16).cast::<u64>();
    // SAFETY: the 16 bytes before the victim are the tail of its neighbour, a live 64-byte
    // block of ours (user memory, not metadata): the overwrite is the attack's "bug".
    unsafe { header.write_unaligned(1088) };

    // 3) Free the victim.
    h.free(victim).unwrap();
    let after_free = h.check().unwrap();
    assert_eq!(after_free.live_allocations, before.live_allocations - 1);

    // 4) Allocate again until full: exactly one object, the victim's.
    let mut again = Vec::new();
    while let Ok(p) = h.alloc(64, 16) {
        again.push(p);
        assert!(
            again.len() <= 1,
            "heap handed out more than the one freed object"
        );
    }
    assert_eq!(again, vec![victim]);

    // 5) Nothing overlaps and no other object lost its contents (except the 16 bytes the
    //    attack wrote into the neighbour, which are user data).
    h.check().unwrap();
    for (i, p) in objects.iter().enumerate() {
        if i == victim_index {
            continue;
        }
        // SAFETY: every object is still a live 64-byte block.
        let bytes = unsafe { std::slice::from_raw_parts(p.as_ptr(), 64) };
        let clobbered = p.as_ptr().wrapping_add(64) == victim.as_ptr();
        let intact = if clobbered { &bytes[..48] } else { bytes };
        assert!(
            intact.iter().all(|b| *b == pattern(i)),
            "object {i} corrupted"
        );
    }
}

#[test]
fn pmdk_header_attack_gives_no_overlap() {
    run_attack(Protection::Off);
}

#[test]
fn pmdk_header_attack_gives_no_overlap_in_guard_mode() {
    run_attack(Protection::Guard);
}

#[test]
fn overwriting_the_bytes_before_every_block_changes_no_metadata() {
    let h = MappedHeap::anonymous(
        8 << 20,
        &HeapOptions {
            subheaps: 2,
            ..Default::default()
        },
    )
    .unwrap();
    let mut blocks = Vec::new();
    for i in 0..2000usize {
        blocks.push(h.alloc(16 + i % 700, 16).unwrap());
    }
    let report = h.check().unwrap();
    let data_start = h
        .base()
        .as_ptr()
        .wrapping_add(h.geometry().data_offset as usize);
    for p in &blocks {
        if p.as_ptr() as usize >= data_start as usize + 16 {
            // SAFETY: the 16 bytes before a block are in the data area (a neighbour, slab
            // space or free space), never metadata: scribbling there is a user bug, not UB
            // for the allocator.
            unsafe { std::ptr::write_bytes(p.as_ptr().wrapping_sub(16), 0xFF, 16) };
        }
    }
    assert_eq!(h.check().unwrap(), report);
    for p in blocks {
        h.free(p).unwrap();
    }
    assert_eq!(h.check().unwrap().live_allocations, 0);
}

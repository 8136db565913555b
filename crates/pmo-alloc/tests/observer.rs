//! The write observer reports every page the heap changes: run seeded random allocator calls
//! and compare the region before and after each one; every OS page whose bytes changed must have
//! been reported. This is what makes the heap usable over a store that commits only declared
//! pages (pmo's declared dirty tracking, PMDK's `tx_add_range` contract).
#![allow(unsafe_code)]

use pmo_alloc::region::MappedRegion;
use pmo_alloc::{Heap, HeapOptions, Protection, WriteObserver};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeSet;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

const REGION_BYTES: usize = 4 << 20;
const PAGE: usize = 4096;

fn changed_pages(before: &[u8], after: &[u8]) -> BTreeSet<usize> {
    before
        .chunks(PAGE)
        .zip(after.chunks(PAGE))
        .enumerate()
        .filter(|(_, (a, b))| a != b)
        .map(|(i, _)| i)
        .collect()
}

fn run(protection: Protection, seed: u64) {
    let region = MappedRegion::anonymous(REGION_BYTES).unwrap();
    let opts = HeapOptions {
        subheaps: 2,
        protection,
    };
    // SAFETY: the region is ours, mapped until dropped at the end of this function (after the
    // heap), and only the heap writes it.
    let mut heap = unsafe { Heap::format(region.as_ptr(), region.len(), &opts) }.unwrap();
    let seen: Arc<Mutex<BTreeSet<usize>>> = Arc::default();
    let sink = seen.clone();
    let observer: WriteObserver = Arc::new(move |off, len| {
        let mut s = sink.lock().unwrap();
        for p in off / PAGE..(off + len).div_ceil(PAGE) {
            s.insert(p);
        }
        true
    });
    heap.set_write_observer(Some(observer));
    let snapshot = || {
        // SAFETY: the region is mapped and readable; no other thread writes it.
        unsafe { std::slice::from_raw_parts(region.as_ptr(), region.len()) }.to_vec()
    };
    let mut rng = StdRng::seed_from_u64(seed);
    let mut live: Vec<NonNull<u8>> = Vec::new();
    let sizes = [8usize, 64, 300, 2000, 4096, 5000, 40_000, 200_000];
    for step in 0..400 {
        let before = snapshot();
        seen.lock().unwrap().clear();
        let what = rng.gen_range(0..10);
        match what {
            0..=3 => {
                if let Ok(p) = heap.alloc(sizes[rng.gen_range(0..sizes.len())], 16) {
                    live.push(p);
                }
            }
            4 => {
                if let Ok(p) = heap.alloc_zeroed(sizes[rng.gen_range(0..sizes.len())], 16) {
                    live.push(p);
                }
            }
            5..=6 if !live.is_empty() => {
                let p = live.swap_remove(rng.gen_range(0..live.len()));
                heap.free(p).unwrap();
            }
            7 if !live.is_empty() => {
                let i = rng.gen_range(0..live.len());
                if let Ok(q) = heap.realloc(live[i], sizes[rng.gen_range(0..sizes.len())], 16) {
                    live[i] = q;
                }
            }
            8 if !live.is_empty() => {
                heap.set_root(Some(live[rng.gen_range(0..live.len())]))
                    .unwrap();
            }
            _ => heap.set_root(None).unwrap(),
        }
        let after = snapshot();
        let changed = changed_pages(&before, &after);
        let seen = seen.lock().unwrap();
        let missed: Vec<_> = changed.difference(&seen).collect();
        assert!(
            missed.is_empty(),
            "{protection:?} seed {seed} step {step} op {what}: pages changed but not reported: {missed:?}"
        );
    }
    heap.check().unwrap();
}

#[test]
fn every_changed_page_is_reported() {
    run(Protection::Off, 0x0b5e_0001);
}

#[test]
fn every_changed_page_is_reported_in_guard_mode() {
    run(Protection::Guard, 0x0b5e_0002);
}

#[test]
fn a_failing_observer_poisons_the_heap() {
    let region = MappedRegion::anonymous(REGION_BYTES).unwrap();
    // SAFETY: as in `run`.
    let mut heap =
        unsafe { Heap::format(region.as_ptr(), region.len(), &HeapOptions::default()) }.unwrap();
    heap.set_write_observer(Some(Arc::new(|_, _| false)));
    assert!(matches!(
        heap.alloc(64, 16),
        Err(pmo_alloc::HeapError::Poisoned)
    ));
    assert!(matches!(
        heap.alloc(64, 16),
        Err(pmo_alloc::HeapError::Poisoned)
    ));
}

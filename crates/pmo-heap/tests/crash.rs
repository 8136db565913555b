//! Crash simulation over the REAL store: the claim that shadow paging makes "allocate, link,
//! psync" atomic with no allocator log, checked rather than assumed.
//!
//! A pool lives on `pmo_medium::CrashMedium`. The base image holds a heap PMO with a linked
//! list (nodes of 0 B .. 20 KiB payload, so both slab slots and large extents) rooted at the
//! heap's root. The operation under test opens the pool, attaches the heap and runs two
//! psyncs, each after a seeded batch of pushes (allocate + fill + link), pops and removals in
//! the middle (unlink + free), and grows (realloc, which moves the node, + relink: a write into
//! another block). `pmo_medium::crash::explore` cuts power at every persist point of that
//! operation (and after it), yielding the images a power failure could leave: none, all, random
//! subsets and a torn set of the unfenced cache lines. For each image: reopen the pool (store
//! recovery), check the pool, attach, open the heap, run the heap checker (no overlaps,
//! accounting identity, counters, bins), read the list verifying every reachable node is a live
//! block with its payload intact, and require the list to be exactly the state before the
//! operation, after the first psync or after the second (the latter when the operation
//! completed), and the heap to hold no block the list does not reach (no leak). Then keep using
//! the heap: allocate, link, psync, re-attach, check.
//!
//! Seeded: `PMO_HEAP_SEED` replays a run (the seed is in every failure message);
//! `PMO_HEAP_CRASH_SOAK=N` runs N more seeds.

mod common;

use common::{grow_at, pop, push, read_list_full, remove_at, KEY};
use pmo_heap::{
    AttachOptions, DirtyTracking, HeapError, HeapOptions, OpenOptions, PmoHeap, PmoHeapError,
    Protection,
};
use pmo_medium::crash::{explore, CrashMedium, CrashPoint};
use pmo_store::{KdfParams, Pool, PoolOptions};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;

const POOL_BYTES: u64 = 6 << 20;
const HEAP_BYTES: u64 = 2 << 20;
const NAME: &str = "heap";
/// Random subsets of the unfenced lines tried per persist point (plus none, all and torn).
const RANDOM_IMAGES: usize = 3;
const PAYLOADS: [u64; 7] = [0, 24, 200, 1000, 3000, 9000, 20000];

/// The list as (value, payload bytes), head first.
type Model = Vec<(u64, u64)>;

#[derive(Debug, Clone, Copy)]
enum Step {
    Push { value: u64, len: u64 },
    Pop,
    Remove(usize),
    Grow { index: usize, len: u64 },
}

fn pool_opts(base_addr: u64) -> PoolOptions {
    PoolOptions {
        kdf: KdfParams::INSECURE_FAST,
        ns_capacity: Some(16),
        base_addr: Some(base_addr),
        ..PoolOptions::default()
    }
}

fn heap_opts(subheaps: u32) -> HeapOptions {
    HeapOptions {
        subheaps,
        protection: Protection::Off,
    }
}

fn seed() -> u64 {
    std::env::var("PMO_HEAP_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x4845_4150_0001)
}

/// `count` seeded steps valid for `model`, applied to it.
fn gen_steps(rng: &mut StdRng, model: &mut Model, next_value: &mut u64, count: usize) -> Vec<Step> {
    let mut steps = Vec::with_capacity(count);
    for _ in 0..count {
        let step = match rng.gen_range(0..10) {
            0..=4 => {
                *next_value += 1;
                Step::Push {
                    value: *next_value,
                    len: PAYLOADS[rng.gen_range(0..PAYLOADS.len())],
                }
            }
            5 | 6 if !model.is_empty() => Step::Pop,
            7 | 8 if model.len() > 1 => Step::Remove(rng.gen_range(1..model.len())),
            _ if !model.is_empty() => {
                let index = rng.gen_range(0..model.len());
                Step::Grow {
                    index,
                    len: model[index].1 + PAYLOADS[rng.gen_range(1..PAYLOADS.len())],
                }
            }
            _ => continue,
        };
        match step {
            Step::Push { value, len } => model.insert(0, (value, len)),
            Step::Pop => {
                model.remove(0);
            }
            Step::Remove(i) => {
                model.remove(i);
            }
            Step::Grow { index, len } => model[index].1 = len,
        }
        steps.push(step);
    }
    steps
}

fn apply(h: &PmoHeap, steps: &[Step]) {
    for &s in steps {
        match s {
            Step::Push { value, len } => {
                push(h, value, len as usize);
            }
            Step::Pop => {
                pop(h).expect("model says the list is not empty");
            }
            Step::Remove(i) => remove_at(h, i),
            Step::Grow { index, len } => grow_at(h, index, len as usize),
        }
    }
}

/// The scenario: the base image and the three states a crash may leave.
struct Scenario {
    seed: u64,
    subheaps: u32,
    /// Dirty tracking of the operation's attachment (`None`: the store's default).
    tracking: Option<DirtyTracking>,
    image: Vec<u8>,
    before: Model,
    steps: [Vec<Step>; 2],
    after: [Model; 2],
}

fn scenario(seed: u64, base_addr: u64, subheaps: u32, tracking: Option<DirtyTracking>) -> Scenario {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut model = Model::new();
    let mut next_value = 0;
    let setup = gen_steps(&mut rng, &mut model, &mut next_value, 60);
    let m = Arc::new(CrashMedium::new(POOL_BYTES));
    let pool = Pool::create_on(m.clone(), &pool_opts(base_addr)).expect("create pool");
    let h = PmoHeap::create(&pool, NAME, HEAP_BYTES, KEY, &heap_opts(subheaps)).expect("create");
    apply(&h, &setup);
    h.psync().expect("psync");
    assert_eq!(read_list_full(&h), model, "seed {seed}: setup");
    h.detach().expect("detach");
    drop(pool);
    let before = model.clone();
    let first = gen_steps(&mut rng, &mut model, &mut next_value, 25);
    let after1 = model.clone();
    let second = gen_steps(&mut rng, &mut model, &mut next_value, 25);
    Scenario {
        seed,
        subheaps,
        tracking,
        image: m.durable_image(),
        before,
        steps: [first, second],
        after: [after1, model],
    }
}

/// The operation under test: open, two batches each followed by a psync.
fn operation(m: &Arc<CrashMedium>, sc: &Scenario) -> Result<(), PmoHeapError> {
    let pool = Pool::open_on(m.clone())?;
    let opts = OpenOptions {
        protection: Protection::Off,
        attach: AttachOptions {
            tracking: sc.tracking,
            ..AttachOptions::default()
        },
    };
    let h = PmoHeap::open_with(&pool, NAME, KEY, &opts)?;
    for steps in &sc.steps {
        apply(&h, steps);
        h.psync()?;
    }
    h.detach()
}

fn open_image(image: &[u8]) -> Pool {
    Pool::open_on(Arc::new(CrashMedium::from_image(image.to_vec()))).expect("reopen pool")
}

fn assert_pool_healthy(pool: &Pool, ctx: &str) {
    let r = pool
        .check()
        .unwrap_or_else(|e| panic!("{ctx}: pool check: {e}"));
    assert!(r.problems.is_empty(), "{ctx}: {:?}", r.problems);
    assert_eq!(
        r.used_bytes + r.free_bytes,
        r.heap_len,
        "{ctx}: space leaked"
    );
}

/// Which state (0: before, 1: after the first psync, 2: after the second) the image holds.
fn check_image(sc: &Scenario, cp: &CrashPoint) -> usize {
    let ctx = format!(
        "seed {} subheaps {} tracking {:?} crash point {} variant {}{}",
        sc.seed,
        sc.subheaps,
        sc.tracking,
        cp.point,
        cp.variant,
        if cp.completed { " (completed)" } else { "" }
    );
    let pool = open_image(&cp.image);
    assert_pool_healthy(&pool, &ctx);
    let h = PmoHeap::open(&pool, NAME, KEY).unwrap_or_else(|e| panic!("{ctx}: open heap: {e}"));
    let report = h
        .check()
        .unwrap_or_else(|e| panic!("{ctx}: heap check: {e}"));
    assert_eq!(
        report.allocated_bytes + report.free_bytes + report.slab_waste_bytes,
        report.capacity_bytes,
        "{ctx}: accounting identity"
    );
    let list = read_list_full(&h);
    let state = [&sc.before, &sc.after[0], &sc.after[1]]
        .iter()
        .position(|m| **m == list)
        .unwrap_or_else(|| panic!("{ctx}: the list is none of the psynced states: {list:?}"));
    if cp.completed {
        assert_eq!(state, 2, "{ctx}: a completed psync was lost");
    }
    assert_eq!(
        report.live_allocations,
        list.len() as u64,
        "{ctx}: blocks not reachable from the root (leak) or reachable but not live"
    );
    assert_eq!(report.root_set, !list.is_empty(), "{ctx}: root");
    // The heap keeps working after the crash: allocate + link + psync, re-attach, check.
    if cp.variant == 0 {
        push(&h, 999_999, 100);
        h.psync()
            .unwrap_or_else(|e| panic!("{ctx}: psync after crash: {e}"));
        h.detach().unwrap();
        let h = PmoHeap::open(&pool, NAME, KEY).unwrap();
        let again = read_list_full(&h);
        assert_eq!(again[0], (999_999, 100), "{ctx}");
        assert_eq!(&again[1..], &list[..], "{ctx}");
        h.check()
            .unwrap_or_else(|e| panic!("{ctx}: check after reuse: {e}"));
    }
    state
}

fn run(seed: u64, base_addr: u64, subheaps: u32, tracking: Option<DirtyTracking>) {
    let sc = scenario(seed, base_addr, subheaps, tracking);
    assert_ne!(
        sc.before, sc.after[0],
        "seed {seed}: first batch changes nothing"
    );
    assert_ne!(
        sc.after[0], sc.after[1],
        "seed {seed}: second batch changes nothing"
    );
    let mut seen = [0usize; 3];
    let points = explore(
        &sc.image,
        RANDOM_IMAGES,
        seed,
        |m| operation(m, &sc),
        |cp| seen[check_image(&sc, cp)] += 1,
    );
    assert!(
        points >= 2,
        "seed {seed}: two psyncs have persist points, saw {points}"
    );
    assert!(
        seen.iter().all(|&n| n > 0),
        "seed {seed}: every state (before, after psync 1, after psync 2) must occur: {seen:?}"
    );
    eprintln!(
        "seed {seed} subheaps {subheaps} tracking {tracking:?}: {points} persist points, \
         states seen {seen:?}"
    );
}

#[test]
fn alloc_link_free_psync_is_atomic_at_every_persist_point() {
    run(seed(), 0x2100_0000_0000, 2, None);
}

/// The same with declared dirty tracking: psync commits only the pages the heap (metadata,
/// root, realloc copies) and the test (node contents, links) declared.
#[test]
fn declared_tracking_is_atomic_at_every_persist_point() {
    run(
        seed() ^ 0xdec1,
        0x2500_0000_0000,
        2,
        Some(DirtyTracking::Declared),
    );
}

#[test]
fn single_subheap_with_large_extents_is_atomic_too() {
    run(seed() ^ 0x5a5a, 0x2200_0000_0000, 1, None);
}

#[test]
fn crash_soak() {
    let n: u64 = std::env::var("PMO_HEAP_CRASH_SOAK")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    for i in 0..n {
        let tracking = [
            None,
            Some(DirtyTracking::Declared),
            Some(DirtyTracking::Scan),
        ];
        run(
            seed().wrapping_add(1000 + i),
            0x2300_0000_0000,
            1 + (i % 2) as u32,
            tracking[i as usize % 3],
        );
    }
}

/// A psync that fills the heap to `OutOfSpace` and one that frees part of it: after any crash
/// the heap is one of the psynced states, passes the checker, and serves allocations again.
#[test]
fn out_of_space_across_crashes_stays_usable() {
    let base_addr = 0x2400_0000_0000;
    let m = Arc::new(CrashMedium::new(POOL_BYTES));
    let pool = Pool::create_on(m.clone(), &pool_opts(base_addr)).unwrap();
    let h = PmoHeap::create(&pool, NAME, 1 << 20, KEY, &heap_opts(1)).unwrap();
    for v in 0..20 {
        push(&h, v, 1000);
    }
    h.psync().unwrap();
    h.detach().unwrap();
    drop(pool);
    let base = m.durable_image();
    let fill = |m: &Arc<CrashMedium>| -> Result<usize, PmoHeapError> {
        let pool = Pool::open_on(m.clone())?;
        let h = PmoHeap::open(&pool, NAME, KEY)?;
        let mut pushed = 0usize;
        loop {
            match h.alloc(common::NODE_BYTES + 9000, 8) {
                Ok(p) => {
                    h.free(p)?;
                    push(&h, 1_000 + pushed as u64, 9000);
                    pushed += 1;
                }
                Err(HeapError::OutOfSpace { .. }) => break,
                Err(e) => return Err(e.into()),
            }
            assert!(
                pushed < 1000,
                "a 1 MiB heap cannot hold 1000 nodes of 9 KiB"
            );
        }
        h.psync()?;
        for _ in 0..pushed / 2 {
            pop(&h);
        }
        h.psync()?;
        h.detach()?;
        Ok(pushed)
    };
    let probe = Arc::new(CrashMedium::from_image(base.clone()));
    let pushed = fill(&probe).expect("uninterrupted run");
    assert!(pushed > 10, "the heap held only {pushed} big nodes");
    let mut full_seen = false;
    explore(
        &base,
        2,
        seed(),
        |m| fill(m),
        |cp| {
            let ctx = format!("oos crash point {} variant {}", cp.point, cp.variant);
            let pool = open_image(&cp.image);
            assert_pool_healthy(&pool, &ctx);
            let h = PmoHeap::open(&pool, NAME, KEY).unwrap();
            h.check().unwrap_or_else(|e| panic!("{ctx}: {e}"));
            let list = read_list_full(&h);
            let big = list.iter().filter(|n| n.1 == 9000).count();
            assert!(
                big == 0 || big == pushed || big == pushed - pushed / 2,
                "{ctx}: {big} big nodes"
            );
            assert_eq!(list.len() - big, 20, "{ctx}: the old nodes are all there");
            if big == pushed {
                full_seen = true;
                assert!(
                    matches!(
                        h.alloc(common::NODE_BYTES + 9000, 8),
                        Err(HeapError::OutOfSpace { .. })
                    ),
                    "{ctx}: a full heap stays full"
                );
            }
            // Usable: free the big nodes, allocate one again, psync, check.
            while read_list_full(&h).first().is_some_and(|n| n.1 == 9000) {
                pop(&h);
            }
            push(&h, 7, 9000);
            h.psync().unwrap();
            h.check().unwrap();
        },
    );
    assert!(full_seen, "some crash image holds the full heap");
}

//! Crash simulation over the real store: every persist point of insert, remove, grow (hash
//! rehash, B-tree splits, vector reallocation) and clear.
//!
//! A pool on `pmo_medium::CrashMedium` holds a typed heap whose root has a `PHashMap<u64,
//! PString>`, a `PBTreeMap<u64, u64>` and a `PVec<u64>`. The operation under test opens the
//! pool, attaches the heap and runs two psyncs: batch 1 inserts enough to grow every
//! container and removes some entries; batch 2 clears the hash map, removes from the tree and
//! inserts again. `explore` cuts power at every persist point of that operation (and after
//! it) and hands over the images a power failure could leave. For each image: reopen (store
//! recovery), pool check, attach, `TypedHeap::check` (the allocator's full checker, every live
//! block reached exactly once from the root: no leak, no aliasing), and every container must
//! read exactly as before the operation, after psync 1, or after psync 2 (all three the
//! same one; the last one if the operation completed). Then keep using it: insert, psync,
//! re-attach, check.
//!
//! `PMO_TYPED_SEED` replays a run.
#![forbid(unsafe_code)]

use pmo_medium::crash::{explore, CrashMedium, CrashPoint};
use pmo_store::{KdfParams, Pool, PoolOptions};
use pmo_typed::{PBTreeMap, PHashMap, PString, PVec, Persistent, TypedError, TypedHeap};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::Arc;

const KEY: &[u8] = b"pmo-typed-crash";
const POOL_BYTES: u64 = 6 << 20;
const HEAP_BYTES: u64 = 2 << 20;
const NAME: &str = "typed";
const RANDOM_IMAGES: usize = 2;

#[derive(Persistent, Default)]
#[repr(C)]
struct Root {
    hash: PHashMap<u64, PString>,
    tree: PBTreeMap<u64, u64>,
    vec: PVec<u64>,
}

#[derive(Debug, Clone, PartialEq, Default)]
struct Model {
    hash: BTreeMap<u64, String>,
    tree: BTreeMap<u64, u64>,
    vec: Vec<u64>,
}

#[derive(Debug, Clone)]
enum Step {
    HashInsert(u64, String),
    HashRemove(u64),
    HashClear,
    TreeInsert(u64, u64),
    TreeRemove(u64),
    VecPush(u64),
    VecPop,
}

fn apply_model(m: &mut Model, s: &Step) {
    match s {
        Step::HashInsert(k, v) => {
            m.hash.insert(*k, v.clone());
        }
        Step::HashRemove(k) => {
            m.hash.remove(k);
        }
        Step::HashClear => m.hash.clear(),
        Step::TreeInsert(k, v) => {
            m.tree.insert(*k, *v);
        }
        Step::TreeRemove(k) => {
            m.tree.remove(k);
        }
        Step::VecPush(v) => m.vec.push(*v),
        Step::VecPop => {
            m.vec.pop();
        }
    }
}

fn apply(heap: &mut TypedHeap, steps: &[Step]) -> Result<(), TypedError> {
    let (r, h) = heap.root::<Root>()?;
    for s in steps {
        match s {
            Step::HashInsert(k, v) => {
                r.hash.insert(h, *k, PString::default())?;
                r.hash.get_mut(h, k)?.expect("just inserted").set(h, v)?;
            }
            Step::HashRemove(k) => {
                r.hash.remove(h, k)?;
            }
            Step::HashClear => r.hash.clear(h)?,
            Step::TreeInsert(k, v) => {
                r.tree.insert(h, *k, *v)?;
            }
            Step::TreeRemove(k) => {
                r.tree.remove(h, k)?;
            }
            Step::VecPush(v) => r.vec.push(h, *v)?,
            Step::VecPop => {
                r.vec.pop(h)?;
            }
        }
    }
    Ok(())
}

fn read(heap: &mut TypedHeap) -> Model {
    let (r, h) = heap.root_ref::<Root>().expect("root");
    Model {
        hash: r
            .hash
            .iter(h)
            .unwrap()
            .map(|(k, v)| (*k, v.as_str(h).unwrap().to_string()))
            .collect(),
        tree: r
            .tree
            .iter(h)
            .unwrap()
            .map(|e| e.map(|(k, v)| (*k, *v)))
            .collect::<Result<_, _>>()
            .unwrap(),
        vec: r.vec.as_slice(h).unwrap().to_vec(),
    }
}

fn gen(rng: &mut StdRng, m: &mut Model, batch: usize) -> Vec<Step> {
    let mut steps = Vec::new();
    let inserts = if batch == 0 { 80 } else { 40 };
    for _ in 0..inserts {
        let k = rng.gen_range(0..400u64);
        let len = [0usize, 5, 40, 300][rng.gen_range(0..4)];
        steps.push(Step::HashInsert(k, "v".repeat(len) + &k.to_string()));
        steps.push(Step::TreeInsert(rng.gen_range(0..1000), rng.gen()));
        steps.push(Step::VecPush(rng.gen()));
    }
    if batch == 0 {
        // A run that makes the tree three levels deep (leaves split half full), for batch 2
        // to shrink.
        steps.extend((1000..1700).map(|k| Step::TreeInsert(k, k)));
    }
    for _ in 0..15 {
        if let Some(&k) = m.hash.keys().nth(rng.gen_range(0..m.hash.len().max(1))) {
            steps.push(Step::HashRemove(k));
        }
        if let Some(&k) = m.tree.keys().nth(rng.gen_range(0..m.tree.len().max(1))) {
            steps.push(Step::TreeRemove(k));
        }
        steps.push(Step::VecPop);
    }
    if batch == 1 {
        // Remove long runs of tree keys, so leaves and inner nodes underflow, are refilled
        // from a sibling or merged with it (the merged node freed), and the root gives way;
        // then clear the hash map.
        let run: Vec<u64> = m
            .tree
            .range(100..700)
            .chain(m.tree.range(1000..1600))
            .map(|(k, _)| *k)
            .collect();
        steps.extend(run.into_iter().map(Step::TreeRemove));
        steps.push(Step::HashClear);
        steps.push(Step::HashInsert(7, "after clear".into()));
    }
    // Model effects in order (removals chosen above refer to the model before this batch's
    // inserts, which is fine: removing an absent key is a no-op on both sides).
    for s in &steps {
        apply_model(m, s);
    }
    steps
}

fn pool_opts(base_addr: u64) -> PoolOptions {
    PoolOptions {
        kdf: KdfParams::INSECURE_FAST,
        ns_capacity: Some(16),
        base_addr: Some(base_addr),
        ..PoolOptions::default()
    }
}

struct Scenario {
    seed: u64,
    tracking: Option<pmo_typed::DirtyTracking>,
    image: Vec<u8>,
    steps: [Vec<Step>; 2],
    states: [Model; 3],
}

fn scenario(seed: u64, base_addr: u64, tracking: Option<pmo_typed::DirtyTracking>) -> Scenario {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut m = Model::default();
    let m_ = Arc::new(CrashMedium::new(POOL_BYTES));
    let pool = Pool::create_on(m_.clone(), &pool_opts(base_addr)).expect("pool");
    let mut heap = TypedHeap::create(&pool, NAME, HEAP_BYTES, KEY).expect("heap");
    let setup = gen(&mut rng, &mut m, 0);
    apply(&mut heap, &setup).expect("setup");
    heap.psync().expect("psync");
    assert_eq!(read(&mut heap), m);
    heap.detach().unwrap();
    drop(pool);
    let before = m.clone();
    let s1 = gen(&mut rng, &mut m, 0);
    let after1 = m.clone();
    let s2 = gen(&mut rng, &mut m, 1);
    Scenario {
        seed,
        tracking,
        image: m_.durable_image(),
        steps: [s1, s2],
        states: [before, after1, m],
    }
}

fn operation(m: &Arc<CrashMedium>, sc: &Scenario) -> Result<(), TypedError> {
    let pool = Pool::open_on(m.clone())?;
    let attach = pmo_typed::AttachOptions {
        tracking: sc.tracking,
        ..Default::default()
    };
    let mut heap = TypedHeap::open_with(&pool, NAME, KEY, attach)?;
    for steps in &sc.steps {
        apply(&mut heap, steps)?;
        heap.psync()?;
    }
    heap.detach()
}

fn check_image(sc: &Scenario, cp: &CrashPoint) -> usize {
    let ctx = format!(
        "seed {} tracking {:?} crash point {} variant {}{}",
        sc.seed,
        sc.tracking,
        cp.point,
        cp.variant,
        if cp.completed { " (completed)" } else { "" }
    );
    let pool = Pool::open_on(Arc::new(CrashMedium::from_image(cp.image.clone())))
        .unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
    let r = pool
        .check()
        .unwrap_or_else(|e| panic!("{ctx}: pool check: {e}"));
    assert!(r.problems.is_empty(), "{ctx}: {:?}", r.problems);
    let mut heap = TypedHeap::open(&pool, NAME, KEY).unwrap_or_else(|e| panic!("{ctx}: open: {e}"));
    let c = heap
        .check::<Root>()
        .unwrap_or_else(|e| panic!("{ctx}: typed check: {e}"));
    assert!(
        c.unreachable.is_empty(),
        "{ctx}: leaked blocks {:?}",
        c.unreachable
    );
    let got = read(&mut heap);
    let state = sc
        .states
        .iter()
        .position(|s| *s == got)
        .unwrap_or_else(|| panic!("{ctx}: the containers are in none of the psynced states"));
    if cp.completed {
        assert_eq!(state, 2, "{ctx}: a completed psync was lost");
    }
    if cp.variant == 0 {
        apply(
            &mut heap,
            &[
                Step::TreeInsert(5000, 1),
                Step::HashInsert(5000, "z".into()),
            ],
        )
        .unwrap_or_else(|e| panic!("{ctx}: reuse: {e}"));
        heap.psync().unwrap();
        heap.detach().unwrap();
        let mut heap = TypedHeap::open(&pool, NAME, KEY).unwrap();
        let again = read(&mut heap);
        assert_eq!(again.tree.get(&5000), Some(&1), "{ctx}");
        assert!(
            heap.check::<Root>().unwrap().unreachable.is_empty(),
            "{ctx}"
        );
    }
    state
}

fn seed() -> u64 {
    std::env::var("PMO_TYPED_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x7479_7065_0001u64)
}

/// The store's default tracking (twin: faults, and pages compared with a twin), which finds
/// every write by itself.
#[test]
fn insert_remove_grow_clear_are_atomic_at_every_persist_point() {
    run(
        seed(),
        0x2600_0000_0000,
        Some(pmo_typed::DirtyTracking::Twin),
    );
}

/// Declared dirty tracking (pmo-typed's default): psync commits only what the containers
/// declared (every byte they write and every `&mut` they hand out), so a missed declaration
/// shows up here.
#[test]
fn declared_tracking_is_atomic_at_every_persist_point() {
    run(
        seed() ^ 0xdec1,
        0x2700_0000_0000,
        Some(pmo_typed::DirtyTracking::Declared),
    );
}

fn run(seed: u64, base: u64, tracking: Option<pmo_typed::DirtyTracking>) {
    let sc = scenario(seed, base, tracking);
    assert_ne!(sc.states[0], sc.states[1]);
    assert_ne!(sc.states[1], sc.states[2]);
    let mut seen = [0usize; 3];
    let points = explore(
        &sc.image,
        RANDOM_IMAGES,
        seed,
        |m| operation(m, &sc),
        |cp| seen[check_image(&sc, cp)] += 1,
    );
    assert!(points >= 2, "persist points: {points}");
    assert!(
        seen.iter().all(|&n| n > 0),
        "every state must occur: {seen:?}"
    );
    eprintln!("seed {seed}: {points} persist points, states seen {seen:?}");
}

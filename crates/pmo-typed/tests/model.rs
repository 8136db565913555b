//! Property tests against `std` containers: random operations on PHashMap, PBTreeMap (with
//! range scans), PVec and PString, with psyncs and "crashes" (detach without psync, then
//! re-attach), must match `HashMap`, `BTreeMap`, `Vec` and `String` as of now or, after a
//! crash, as of the last psync; the heap checker and the reachability walk pass throughout.
#![forbid(unsafe_code)]

mod common;

use common::{ScratchPool, KEY};
use pmo_typed::{PBTreeMap, PHashMap, PString, PVec, Persistent, TypedHeap};
use proptest::prelude::*;
use std::collections::{BTreeMap, HashMap};

#[derive(Persistent, Default)]
#[repr(C)]
struct Root {
    hash: PHashMap<u32, u64>,
    tree: PBTreeMap<u16, PString>,
    vec: PVec<u64>,
}

#[derive(Debug, Clone, PartialEq, Default)]
struct Model {
    hash: HashMap<u32, u64>,
    tree: BTreeMap<u16, String>,
    vec: Vec<u64>,
}

#[derive(Debug, Clone)]
enum Op {
    HashInsert(u32, u64),
    HashRemove(u32),
    HashClear,
    TreeInsert(u16, String),
    TreeRemove(u16),
    TreeRange(u16, u16),
    VecPush(u64),
    VecPop,
    VecInsert(usize, u64),
    VecDelete(usize),
    Psync,
    Crash,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..200u32, any::<u64>()).prop_map(|(k, v)| Op::HashInsert(k, v)),
        3 => (0..200u32).prop_map(Op::HashRemove),
        1 => Just(Op::HashClear),
        6 => (0..300u16, "[a-z]{0,12}").prop_map(|(k, v)| Op::TreeInsert(k, v)),
        3 => (0..300u16).prop_map(Op::TreeRemove),
        2 => (0..300u16, 0..300u16).prop_map(|(a, b)| Op::TreeRange(a.min(b), a.max(b))),
        4 => any::<u64>().prop_map(Op::VecPush),
        2 => Just(Op::VecPop),
        1 => (0..50usize, any::<u64>()).prop_map(|(i, v)| Op::VecInsert(i, v)),
        1 => (0..50usize).prop_map(Op::VecDelete),
        1 => Just(Op::Psync),
        1 => Just(Op::Crash),
    ]
}

fn read(heap: &TypedHeap) -> Model {
    let (r, h) = heap.root_ref::<Root>().unwrap();
    Model {
        hash: r.hash.iter(h).unwrap().map(|(k, v)| (*k, *v)).collect(),
        tree: r
            .tree
            .iter(h)
            .unwrap()
            .map(|e| e.map(|(k, v)| (*k, v.as_str(h).unwrap().to_string())))
            .collect::<Result<_, _>>()
            .unwrap(),
        vec: r.vec.as_slice(h).unwrap().to_vec(),
    }
}

proptest! {
    // 16 cases by default; PROPTEST_CASES soaks.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(16),
        ..ProptestConfig::default()
    })]
    #[test]
    fn matches_std_containers_with_psync_and_crash(ops in proptest::collection::vec(op(), 1..300)) {
        let sp = ScratchPool::new("model", 24 << 20);
        let mut heap = TypedHeap::create(&sp.pool, "m", 8 << 20, KEY).unwrap();
        heap.root::<Root>().unwrap();
        heap.psync().unwrap();
        let mut now = Model::default();
        let mut durable = Model::default();
        for o in &ops {
            match o {
                Op::Psync => {
                    heap.psync().unwrap();
                    durable = now.clone();
                }
                Op::Crash => {
                    heap.detach().unwrap();
                    heap = TypedHeap::open(&sp.pool, "m", KEY).unwrap();
                    now = durable.clone();
                    prop_assert_eq!(&read(&heap), &now);
                    let c = heap.check::<Root>().unwrap();
                    prop_assert!(c.unreachable.is_empty(), "leak {:?}", c.unreachable);
                }
                _ => {
                    let (r, h) = heap.root::<Root>().unwrap();
                    match o {
                        Op::HashInsert(k, v) => {
                            prop_assert_eq!(r.hash.insert(h, *k, *v).unwrap(), now.hash.insert(*k, *v).is_some());
                        }
                        Op::HashRemove(k) => {
                            prop_assert_eq!(r.hash.remove(h, k).unwrap(), now.hash.remove(k).is_some());
                            prop_assert_eq!(r.hash.get(h, k).unwrap(), None);
                        }
                        Op::HashClear => {
                            r.hash.clear(h).unwrap();
                            now.hash.clear();
                        }
                        Op::TreeInsert(k, v) => {
                            let replaced = r.tree.insert(h, *k, PString::default()).unwrap();
                            r.tree.get_mut(h, k).unwrap().unwrap().set(h, v).unwrap();
                            prop_assert_eq!(replaced, now.tree.insert(*k, v.clone()).is_some());
                        }
                        Op::TreeRemove(k) => {
                            prop_assert_eq!(r.tree.remove(h, k).unwrap(), now.tree.remove(k).is_some());
                        }
                        Op::TreeRange(a, b) => {
                            let got: Vec<(u16, String)> = r.tree.range(h, *a..*b).unwrap()
                                .map(|e| e.map(|(k, v)| (*k, v.as_str(h).unwrap().to_string())))
                                .collect::<Result<_, _>>().unwrap();
                            let want: Vec<(u16, String)> = now.tree.range(*a..*b).map(|(k, v)| (*k, v.clone())).collect();
                            prop_assert_eq!(got, want);
                        }
                        Op::VecPush(v) => {
                            r.vec.push(h, *v).unwrap();
                            now.vec.push(*v);
                        }
                        Op::VecPop => prop_assert_eq!(r.vec.pop(h).unwrap(), now.vec.pop()),
                        Op::VecInsert(i, v) => {
                            let res = r.vec.insert(h, *i, *v);
                            if *i <= now.vec.len() {
                                res.unwrap();
                                now.vec.insert(*i, *v);
                            } else {
                                prop_assert!(res.is_err());
                            }
                        }
                        Op::VecDelete(i) => {
                            let res = r.vec.delete(h, *i);
                            if *i < now.vec.len() {
                                res.unwrap();
                                now.vec.remove(*i);
                            } else {
                                prop_assert!(res.is_err());
                            }
                        }
                        Op::Psync | Op::Crash => unreachable!(),
                    }
                    for (k, v) in &now.hash {
                        prop_assert_eq!(r.hash.get(h, k).unwrap(), Some(v));
                    }
                    prop_assert_eq!(r.hash.len(), now.hash.len());
                    prop_assert_eq!(r.tree.len(), now.tree.len());
                }
            }
        }
        prop_assert_eq!(&read(&heap), &now);
        let c = heap.check::<Root>().unwrap();
        prop_assert!(c.unreachable.is_empty(), "leak {:?}", c.unreachable);
        heap.detach().unwrap();
    }
}

/// Bulk operations that grow a tree to three levels and shrink it again, so removals merge
/// and refill leaves and inner nodes and the root gives way (B = 32 keys a node).
#[derive(Clone, Debug)]
enum TreeOp {
    InsertRun(u16, u16),
    RemoveRun(u16, u16),
    Insert(u16, u64),
    Remove(u16),
    Psync,
    Crash,
}

fn tree_op() -> impl Strategy<Value = TreeOp> {
    prop_oneof![
        3 => (0..3000u16, 1..600u16).prop_map(|(a, n)| TreeOp::InsertRun(a, n)),
        3 => (0..3000u16, 1..600u16).prop_map(|(a, n)| TreeOp::RemoveRun(a, n)),
        2 => (0..3000u16, any::<u64>()).prop_map(|(k, v)| TreeOp::Insert(k, v)),
        2 => (0..3000u16).prop_map(TreeOp::Remove),
        1 => Just(TreeOp::Psync),
        1 => Just(TreeOp::Crash),
    ]
}

fn tree_entries(heap: &TypedHeap) -> Vec<(u16, u64)> {
    let (t, h) = heap.root_ref::<PBTreeMap<u16, u64>>().unwrap();
    t.iter(h)
        .unwrap()
        .map(|e| e.map(|(k, v)| (*k, *v)))
        .collect::<Result<_, _>>()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(16),
        ..ProptestConfig::default()
    })]
    #[test]
    fn btree_rebalancing_matches_std(ops in proptest::collection::vec(tree_op(), 1..40)) {
        let sp = ScratchPool::new("model-tree", 24 << 20);
        let mut heap = TypedHeap::create(&sp.pool, "t", 8 << 20, KEY).unwrap();
        heap.root::<PBTreeMap<u16, u64>>().unwrap();
        heap.psync().unwrap();
        let mut now = BTreeMap::new();
        let mut durable = now.clone();
        for o in &ops {
            match o {
                TreeOp::Psync => {
                    heap.psync().unwrap();
                    durable = now.clone();
                }
                TreeOp::Crash => {
                    heap.detach().unwrap();
                    heap = TypedHeap::open(&sp.pool, "t", KEY).unwrap();
                    now = durable.clone();
                }
                _ => {
                    let (t, h) = heap.root::<PBTreeMap<u16, u64>>().unwrap();
                    match *o {
                        TreeOp::InsertRun(a, n) => {
                            for k in a..a.saturating_add(n) {
                                let v = u64::from(k) * 3;
                                prop_assert_eq!(t.insert(h, k, v).unwrap(), now.insert(k, v).is_some());
                            }
                        }
                        TreeOp::RemoveRun(a, n) => {
                            for k in a..a.saturating_add(n) {
                                prop_assert_eq!(t.remove(h, &k).unwrap(), now.remove(&k).is_some());
                            }
                        }
                        TreeOp::Insert(k, v) => {
                            prop_assert_eq!(t.insert(h, k, v).unwrap(), now.insert(k, v).is_some());
                        }
                        TreeOp::Remove(k) => {
                            prop_assert_eq!(t.remove(h, &k).unwrap(), now.remove(&k).is_some());
                        }
                        TreeOp::Psync | TreeOp::Crash => unreachable!(),
                    }
                }
            }
            prop_assert_eq!(tree_entries(&heap), now.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>());
            let c = heap.check::<PBTreeMap<u16, u64>>().unwrap();
            prop_assert!(c.unreachable.is_empty(), "leak {:?}", c.unreachable);
            // Nodes at least about half full: live node blocks (all but the root block) stay
            // within what half-full nodes need.
            let nodes = c.reachable - 1;
            prop_assert!(nodes as usize <= now.len() / 15 + now.len() / 225 + 3,
                "{} nodes for {} keys", nodes, now.len());
        }
        heap.detach().unwrap();
    }
}

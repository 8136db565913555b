//! Property test against a model: random sequences of alloc, free, realloc, psync and "crash"
//! (detach without psync, which discards everything since the last psync, as a power failure
//! would) on a heap in a PMO of a real pool file. The model keeps the live blocks (address,
//! size, fill byte) now and as of the last psync. After every crash and at the end: the heap's
//! live blocks are exactly the model's, every block holds its fill, and the checker passes.

mod common;

use common::{ScratchPool, KEY};
use pmo_heap::{HeapError, HeapOptions, PmoHeap, Protection};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::ptr::NonNull;

const SIZES: [usize; 6] = [8, 100, 1000, 4096, 5000, 70_000];
const HEAP_BYTES: u64 = 8 << 20;

#[derive(Debug, Clone)]
enum Op {
    Alloc(usize),
    Free(usize),
    Realloc(usize, usize),
    Psync,
    Crash,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..SIZES.len()).prop_map(Op::Alloc),
        2 => any::<usize>().prop_map(Op::Free),
        1 => (any::<usize>(), 0..SIZES.len()).prop_map(|(i, s)| Op::Realloc(i, s)),
        2 => Just(Op::Psync),
        1 => Just(Op::Crash),
    ]
}

/// Live blocks: address -> (size, fill byte).
type Blocks = BTreeMap<usize, (usize, u8)>;

fn fill(h: &PmoHeap, p: NonNull<u8>, size: usize, byte: u8) {
    // SAFETY: `p` is a live block of at least `size` bytes that only this test writes.
    unsafe { std::ptr::write_bytes(p.as_ptr(), byte, size) };
    // Also right when the run is under declared dirty tracking (PMO_DIRTY=declared).
    h.declare(p.as_ptr(), size).unwrap();
}

fn verify(h: &PmoHeap, model: &Blocks, ctx: &str) {
    let live: Vec<usize> = h
        .allocations()
        .unwrap()
        .iter()
        .map(|a| a.ptr.as_ptr() as usize)
        .collect();
    let expect: Vec<usize> = model.keys().copied().collect();
    assert_eq!(live, expect, "{ctx}: live blocks differ from the model");
    for (&addr, &(size, byte)) in model {
        let p = NonNull::new(addr as *mut u8).unwrap();
        assert!(h.usable_size(p).unwrap() >= size, "{ctx}");
        // SAFETY: a live block of at least `size` bytes (checked above).
        let bytes = unsafe { std::slice::from_raw_parts(p.as_ptr(), size) };
        assert!(
            bytes.iter().all(|&b| b == byte),
            "{ctx}: block {addr:#x} changed"
        );
    }
    let r = h.check().unwrap();
    assert_eq!(r.live_allocations, model.len() as u64, "{ctx}");
}

fn run(ops: &[Op]) {
    let sp = ScratchPool::new("model", 64 << 20);
    let opts = HeapOptions {
        subheaps: 2,
        protection: Protection::Off,
    };
    let mut h = Some(PmoHeap::create(&sp.pool, "m", HEAP_BYTES, KEY, &opts).unwrap());
    let (mut now, mut durable) = (Blocks::new(), Blocks::new());
    let mut next_byte = 1u8;
    for (step, op) in ops.iter().enumerate() {
        let heap = h.as_ref().unwrap();
        let ctx = format!("step {step} {op:?}");
        match *op {
            Op::Alloc(s) => match heap.alloc(SIZES[s], 16) {
                Ok(p) => {
                    next_byte = next_byte.wrapping_add(1).max(1);
                    fill(heap, p, SIZES[s], next_byte);
                    assert!(now
                        .insert(p.as_ptr() as usize, (SIZES[s], next_byte))
                        .is_none());
                }
                Err(HeapError::OutOfSpace { .. }) => {}
                Err(e) => panic!("{ctx}: {e}"),
            },
            Op::Free(i) if !now.is_empty() => {
                let addr = *now.keys().nth(i % now.len()).unwrap();
                heap.free(NonNull::new(addr as *mut u8).unwrap()).unwrap();
                now.remove(&addr);
                // A second free of the same block is rejected and changes nothing.
                assert!(matches!(
                    heap.free(NonNull::new(addr as *mut u8).unwrap()),
                    Err(HeapError::DoubleFree | HeapError::NotAllocated)
                ));
            }
            Op::Realloc(i, s) if !now.is_empty() => {
                let addr = *now.keys().nth(i % now.len()).unwrap();
                let (old, byte) = now[&addr];
                match heap.realloc(NonNull::new(addr as *mut u8).unwrap(), SIZES[s], 16) {
                    Ok(q) => {
                        now.remove(&addr);
                        let kept = old.min(SIZES[s]);
                        // SAFETY: `q` is the live block of at least SIZES[s] >= kept bytes.
                        let head = unsafe { std::slice::from_raw_parts(q.as_ptr(), kept) };
                        assert!(
                            head.iter().all(|&b| b == byte),
                            "{ctx}: realloc lost contents"
                        );
                        fill(heap, q, SIZES[s], byte);
                        now.insert(q.as_ptr() as usize, (SIZES[s], byte));
                    }
                    Err(HeapError::OutOfSpace { .. }) => {}
                    Err(e) => panic!("{ctx}: {e}"),
                }
            }
            Op::Psync => {
                heap.psync().unwrap();
                durable = now.clone();
            }
            Op::Crash => {
                h.take().unwrap().detach().unwrap();
                let reopened = PmoHeap::open(&sp.pool, "m", KEY).unwrap();
                now = durable.clone();
                verify(&reopened, &now, &ctx);
                h = Some(reopened);
            }
            Op::Free(_) | Op::Realloc(..) => {}
        }
    }
    let heap = h.unwrap();
    verify(&heap, &now, "end");
    heap.psync().unwrap();
    heap.detach().unwrap();
    let heap = PmoHeap::open(&sp.pool, "m", KEY).unwrap();
    verify(&heap, &now, "end, re-attached");
}

proptest! {
    #![proptest_config(ProptestConfig {
        // PROPTEST_CASES raises it for soak runs (scripts/test).
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(24),
        ..ProptestConfig::default()
    })]

    #[test]
    fn heap_in_a_pmo_matches_the_model(ops in proptest::collection::vec(op(), 1..80)) {
        run(&ops);
    }
}

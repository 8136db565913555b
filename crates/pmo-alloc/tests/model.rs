//! Property test: random alloc/free/realloc sequences against a model of live blocks.
//! After every step: no two blocks overlap, usable_size >= requested size, contents of every
//! block are preserved; at the end the checker passes and iteration lists exactly the model.

use pmo_alloc::{HeapError, HeapOptions, MappedHeap, Protection};
use proptest::prelude::*;
use std::ptr::NonNull;

#[derive(Debug, Clone)]
enum Op {
    Alloc { size: usize, align_shift: u8 },
    Free { pick: usize },
    Realloc { pick: usize, size: usize },
    BadFree { pick: usize, delta: usize },
}

fn size_strategy() -> impl Strategy<Value = usize> {
    prop_oneof![
        6 => 0usize..512,
        3 => 512usize..4097,
        2 => 4097usize..70_000,
        1 => 70_000usize..600_000,
    ]
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (size_strategy(), 0u8..13).prop_map(|(size, align_shift)| Op::Alloc { size, align_shift }),
        3 => any::<usize>().prop_map(|pick| Op::Free { pick }),
        2 => (any::<usize>(), size_strategy()).prop_map(|(pick, size)| Op::Realloc { pick, size }),
        1 => (any::<usize>(), 1usize..5000).prop_map(|(pick, delta)| Op::BadFree { pick, delta }),
    ]
}

struct Live {
    ptr: NonNull<u8>,
    size: usize,
    fill: u8,
}

fn fill(p: NonNull<u8>, n: usize, v: u8) {
    // SAFETY: `p` is a live block of at least `n` bytes owned by the test.
    unsafe { std::ptr::write_bytes(p.as_ptr(), v, n) }
}

fn intact(l: &Live) -> bool {
    // SAFETY: as in `fill`.
    unsafe { std::slice::from_raw_parts(l.ptr.as_ptr(), l.size) }
        .iter()
        .all(|b| *b == l.fill)
}

fn assert_no_overlap(live: &[Live]) {
    let mut spans: Vec<(usize, usize)> = live
        .iter()
        .map(|l| (l.ptr.as_ptr() as usize, l.size.max(1)))
        .collect();
    spans.sort_unstable();
    for w in spans.windows(2) {
        assert!(
            w[0].0 + w[0].1 <= w[1].0,
            "blocks overlap: {:?} {:?}",
            w[0],
            w[1]
        );
    }
}

fn run(ops: Vec<Op>, protection: Protection) {
    let h = MappedHeap::anonymous(
        8 << 20,
        &HeapOptions {
            subheaps: 2,
            protection,
        },
    )
    .unwrap();
    let mut live: Vec<Live> = Vec::new();
    let mut next_fill = 1u8;
    for op in ops {
        next_fill = next_fill.wrapping_add(1).max(1);
        match op {
            Op::Alloc { size, align_shift } => {
                let align = 1usize << align_shift;
                match h.alloc(size, align) {
                    Ok(p) => {
                        assert_eq!(p.as_ptr() as usize % align, 0);
                        assert!(h.usable_size(p).unwrap() >= size.max(1));
                        fill(p, size, next_fill);
                        live.push(Live {
                            ptr: p,
                            size,
                            fill: next_fill,
                        });
                    }
                    Err(HeapError::OutOfSpace { .. }) => {}
                    Err(e) => panic!("alloc({size}, {align}): {e}"),
                }
            }
            Op::Free { pick } if !live.is_empty() => {
                let l = live.swap_remove(pick % live.len());
                assert!(intact(&l), "block lost its contents before free");
                h.free(l.ptr).unwrap();
                assert!(matches!(
                    h.free(l.ptr),
                    Err(HeapError::DoubleFree
                        | HeapError::NotAllocated
                        | HeapError::InteriorPointer)
                ));
            }
            Op::Realloc { pick, size } if !live.is_empty() => {
                let i = pick % live.len();
                let old = &live[i];
                match h.realloc(old.ptr, size, 16) {
                    Ok(p) => {
                        let kept = Live {
                            ptr: p,
                            size: old.size.min(size),
                            fill: old.fill,
                        };
                        assert!(intact(&kept), "realloc lost contents");
                        assert!(h.usable_size(p).unwrap() >= size.max(1));
                        fill(p, size, next_fill);
                        live[i] = Live {
                            ptr: p,
                            size,
                            fill: next_fill,
                        };
                    }
                    Err(HeapError::OutOfSpace { .. }) => {
                        assert!(intact(old), "failed realloc changed the block")
                    }
                    Err(e) => panic!("realloc: {e}"),
                }
            }
            Op::BadFree { pick, delta } if !live.is_empty() => {
                let l = &live[pick % live.len()];
                let usable = h.usable_size(l.ptr).unwrap();
                let inside = NonNull::new(
                    l.ptr
                        .as_ptr()
                        .wrapping_add(delta % usable.max(2))
                        .wrapping_add(1),
                )
                .unwrap();
                let before = h.stats().unwrap();
                if (inside.as_ptr() as usize) < l.ptr.as_ptr() as usize + usable {
                    assert!(matches!(h.free(inside), Err(HeapError::InteriorPointer)));
                }
                assert_eq!(h.stats().unwrap(), before);
            }
            _ => {}
        }
        assert_no_overlap(&live);
    }
    for l in &live {
        assert!(intact(l));
    }
    let report = h.check().unwrap();
    assert_eq!(report.live_allocations, live.len() as u64);
    let mut listed: Vec<usize> = h
        .allocations()
        .unwrap()
        .iter()
        .map(|a| a.ptr.as_ptr() as usize)
        .collect();
    let mut model: Vec<usize> = live.iter().map(|l| l.ptr.as_ptr() as usize).collect();
    listed.sort_unstable();
    model.sort_unstable();
    assert_eq!(listed, model);
    for l in live {
        h.free(l.ptr).unwrap();
    }
    let r = h.check().unwrap();
    assert_eq!((r.live_allocations, r.allocated_bytes), (0, 0));
}

proptest! {
    #![proptest_config(ProptestConfig {
        // PROPTEST_CASES raises it for soak runs (scripts/test).
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64),
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_sequences_match_the_model(ops in proptest::collection::vec(op_strategy(), 1..400)) {
        run(ops, Protection::Off);
    }

    #[test]
    fn random_sequences_match_the_model_in_guard_mode(ops in proptest::collection::vec(op_strategy(), 1..150)) {
        run(ops, Protection::Guard);
    }
}

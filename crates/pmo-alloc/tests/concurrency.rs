//! Multi-threaded stress: threads allocate, fill, verify and free blocks of mixed sizes, and
//! pass a share of their blocks to other threads to free (cross-sub-heap frees). Afterwards the
//! checker passes and the live count is what the threads kept. `PMO_ALLOC_SOAK_ITERS` scales it.

use pmo_alloc::{HeapError, HeapOptions, MappedHeap, Protection};
use rand::{Rng, SeedableRng};
use std::ptr::NonNull;
use std::sync::Mutex;

#[derive(Clone, Copy)]
struct Block {
    addr: usize,
    size: usize,
    fill: u8,
}

fn verify(b: &Block) {
    // SAFETY: `b` is a live block of `size` bytes that only the current thread uses now.
    let bytes = unsafe { std::slice::from_raw_parts(b.addr as *const u8, b.size) };
    assert!(
        bytes.iter().all(|x| *x == b.fill),
        "block at {:#x} corrupted",
        b.addr
    );
}

fn stress(protection: Protection, threads: usize, subheaps: u32) {
    let iters: usize = std::env::var("PMO_ALLOC_SOAK_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let h = MappedHeap::anonymous(
        64 << 20,
        &HeapOptions {
            subheaps,
            protection,
        },
    )
    .unwrap();
    let mailbox: Mutex<Vec<Block>> = Mutex::new(Vec::new());
    let kept: Vec<Vec<Block>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (h, mailbox) = (&h, &mailbox);
                s.spawn(move || {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(t as u64 + 1);
                    let mut mine: Vec<Block> = Vec::new();
                    for i in 0..iters {
                        let r = rng.gen_range(0..100);
                        if r < 50 || mine.is_empty() {
                            let size = match rng.gen_range(0..10) {
                                0 => rng.gen_range(4097..80_000),
                                1..=3 => rng.gen_range(401..4097),
                                _ => rng.gen_range(1..401),
                            };
                            match h.alloc(size, 16) {
                                Ok(p) => {
                                    let fill = (t * 31 + i) as u8 | 1;
                                    // SAFETY: fresh block of `size` bytes.
                                    unsafe { std::ptr::write_bytes(p.as_ptr(), fill, size) };
                                    mine.push(Block {
                                        addr: p.as_ptr() as usize,
                                        size,
                                        fill,
                                    });
                                }
                                Err(HeapError::OutOfSpace { .. }) => {}
                                Err(e) => panic!("alloc: {e}"),
                            }
                        } else if r < 85 {
                            let b = mine.swap_remove(rng.gen_range(0..mine.len()));
                            verify(&b);
                            h.free(NonNull::new(b.addr as *mut u8).unwrap()).unwrap();
                        } else if r < 95 {
                            let b = mine.swap_remove(rng.gen_range(0..mine.len()));
                            mailbox.lock().unwrap().push(b);
                        } else {
                            let got: Vec<Block> = std::mem::take(&mut *mailbox.lock().unwrap());
                            for b in got {
                                verify(&b);
                                h.free(NonNull::new(b.addr as *mut u8).unwrap()).unwrap();
                            }
                        }
                        if mine.len() > 400 {
                            let b = mine.swap_remove(0);
                            h.free(NonNull::new(b.addr as *mut u8).unwrap()).unwrap();
                        }
                    }
                    mine
                })
            })
            .collect();
        handles.into_iter().map(|j| j.join().unwrap()).collect()
    });
    let mut live: Vec<Block> = kept.into_iter().flatten().collect();
    live.extend(mailbox.into_inner().unwrap());
    let report = h.check().unwrap();
    assert_eq!(report.live_allocations, live.len() as u64);
    for b in &live {
        verify(b);
        h.free(NonNull::new(b.addr as *mut u8).unwrap()).unwrap();
    }
    let report = h.check().unwrap();
    assert_eq!(report.live_allocations, 0);
    assert_eq!(report.allocated_bytes, 0);
}

#[test]
fn four_threads_two_subheaps() {
    stress(Protection::Off, 4, 2);
}

#[test]
fn four_threads_one_subheap() {
    stress(Protection::Off, 4, 1);
}

#[test]
fn three_threads_guard_mode() {
    stress(Protection::Guard, 3, 2);
}

//! Views under concurrency: many threads faulting on the same and on different pages, writes
//! racing with `collect_dirty` (never lost), views created and dropped while others fault.
//! Every test runs for every mechanism available here.

#[path = "view_common.rs"]
mod view_common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};

use pmo_os::view::{DirtyTracking, View, PAGE_SIZE};
use view_common::*;

const THREADS: usize = 8;
const WORDS: usize = PAGE_SIZE / 8;

fn page_sum(v: &View, p: u64) -> u64 {
    (0..WORDS).fold(0u64, |acc, i| {
        acc.wrapping_add(read(v, p, i).rotate_left(i as u32 % 64))
    })
}

fn expected_sum(p: u64) -> u64 {
    (0..WORDS).fold(0u64, |acc, i| {
        acc.wrapping_add(word(p, i).rotate_left(i as u32 % 64))
    })
}

#[test]
fn same_page_from_eight_threads() {
    for m in mechanisms() {
        for round in 0..20u64 {
            let v = Arc::new(view(m, 64, true, Pattern::new("same")));
            let target = round % 64;
            let barrier = Arc::new(Barrier::new(THREADS));
            let handles: Vec<_> = (0..THREADS)
                .map(|t| {
                    let (v, barrier) = (v.clone(), barrier.clone());
                    std::thread::spawn(move || {
                        barrier.wait();
                        if t % 2 == 0 {
                            page_sum(&v, target)
                        } else {
                            // Odd threads touch it first with a write of the value already there.
                            let i = t * 3;
                            write(&v, target, i, word(target, i));
                            page_sum(&v, target)
                        }
                    })
                })
                .collect();
            for h in handles {
                assert_eq!(h.join().unwrap(), expected_sum(target), "{m} round {round}");
            }
            let got = dirty(&v);
            if m.tracking == DirtyTracking::Twin {
                // Twin tracking reports changed pages (these writes stored the bytes already
                // there), or one page too many when a writer lost the race to install it.
                assert!(
                    got.is_empty() || got == vec![target],
                    "{m} round {round}: {got:?}"
                );
            } else {
                assert_eq!(got, vec![target], "{m} round {round}");
            }
            assert!(v.stats().fills >= 1);
        }
    }
}

#[test]
fn different_pages_from_eight_threads() {
    for m in mechanisms() {
        let pages = 1024u64;
        let v = Arc::new(view(m, pages as usize, true, Pattern::new("different")));
        let barrier = Arc::new(Barrier::new(THREADS));
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (v, barrier) = (v.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    // Each thread walks every page in its own order; pages are shared.
                    let mut total = 0u64;
                    for k in 0..pages {
                        let p = (k * 7 + t as u64 * 131) % pages;
                        total = total.wrapping_add(page_sum(&v, p));
                    }
                    // Then, once every thread has read everything, writes its own pages.
                    barrier.wait();
                    for p in (t as u64..pages).step_by(THREADS * 3) {
                        write(&v, p, 1, p ^ 0xFF);
                    }
                    total
                })
            })
            .collect();
        let expect = (0..pages).fold(0u64, |acc, p| acc.wrapping_add(expected_sum(p)));
        for h in handles {
            assert_eq!(h.join().unwrap(), expect, "{m}");
        }
        let mut written: Vec<u64> = (0..THREADS as u64)
            .flat_map(|t| (t..pages).step_by(THREADS * 3))
            .collect();
        written.sort();
        assert_eq!(dirty(&v), written, "{m}");
        for &p in &written {
            assert_eq!(read(&v, p, 1), p ^ 0xFF);
        }
        if m.mechanism == pmo_os::view::Mechanism::Sigsegv {
            assert_eq!(
                v.stats().fills,
                pages,
                "sigsegv fills each page exactly once"
            );
        }
    }
}

/// Writers keep writing while a collector keeps "psyncing" (copying reported pages to a
/// shadow). After the writers stop and a last collect, the shadow must equal the view: a write
/// that was not reported after it landed would leave a stale shadow page.
#[test]
fn writes_racing_with_collect_are_never_lost() {
    for m in mechanisms() {
        let pages = 256u64;
        let v = Arc::new(view(m, pages as usize, true, Pattern::new("race")));
        let mut shadow: Vec<[u64; WORDS]> = (0..pages)
            .map(|p| std::array::from_fn(|i| word(p, i)))
            .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let soaking = std::env::var_os("PMO_VIEW_SOAK_SECS").is_some();
        let writers: Vec<_> = (0..4u64)
            .map(|t| {
                let (v, stop) = (v.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut x = t.wrapping_mul(0x9E37_79B9) | 1;
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) || n < 2000 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let p = x % pages;
                        let i = (x >> 20) as usize % WORDS;
                        write(&v, p, i, x);
                        n += 1;
                        if n > 200_000 && !soaking {
                            break;
                        }
                    }
                })
            })
            .collect();
        let mut out = Vec::new();
        let copy = |v: &View, out: &mut Vec<u64>, shadow: &mut Vec<[u64; WORDS]>| {
            out.clear();
            v.collect_dirty(out).unwrap();
            assert!(
                out.windows(2).all(|w| w[0] < w[1]),
                "ascending, no duplicates"
            );
            for &p in out.iter() {
                for (i, w) in shadow[p as usize].iter_mut().enumerate() {
                    *w = read(v, p, i);
                }
            }
        };
        // `PMO_VIEW_SOAK_SECS=N` keeps collecting for N seconds per mechanism (writers too).
        let soak = std::env::var("PMO_VIEW_SOAK_SECS")
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .map(std::time::Duration::from_secs);
        let started = std::time::Instant::now();
        let mut rounds = 0u64;
        while rounds < 200 || soak.is_some_and(|d| started.elapsed() < d) {
            copy(&v, &mut out, &mut shadow);
            rounds += 1;
        }
        stop.store(true, Ordering::Relaxed);
        for w in writers {
            w.join().unwrap();
        }
        copy(&v, &mut out, &mut shadow);
        for (p, page) in shadow.iter().enumerate() {
            for (i, &w) in page.iter().enumerate() {
                assert_eq!(
                    w,
                    read(&v, p as u64, i),
                    "{m}: page {p} word {i} lost a write"
                );
            }
        }
        assert_eq!(dirty(&v), Vec::<u64>::new(), "{m}: reading does not dirty");
    }
}

#[test]
fn views_come_and_go_while_others_fault() {
    for m in mechanisms() {
        let pages = 512u64;
        let v = Arc::new(view(m, pages as usize, true, Pattern::new("steady")));
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (v, stop) = (v.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut p = 0;
                let mut rounds = 0;
                while !stop.load(Ordering::Relaxed) && rounds < 100 {
                    assert_eq!(read(&v, p, 5), word(p, 5));
                    if p % 3 == 0 {
                        v.discard(p).unwrap();
                    }
                    p += 1;
                    if p == pages {
                        p = 0;
                        rounds += 1;
                    }
                }
            })
        };
        for k in 0..50u64 {
            let w = view(m, 16, k % 2 == 0, Pattern::new("transient"));
            assert_eq!(read(&w, k % 16, 0), word(k % 16, 0), "{m}");
            drop(w);
        }
        stop.store(true, Ordering::Relaxed);
        reader.join().unwrap();
    }
}

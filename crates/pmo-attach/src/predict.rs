//! Predictive decryption: a stream-buffer predictor that decrypts, verifies and installs the
//! pages an attached PMO is about to touch, off the faulting thread.
//!
//! Glossary:
//! - *fault*: a first touch of an absent page; the view's fault handler calls the page source,
//!   whose `fill` calls [`PredictHook::notify`] before decrypting the page.
//! - *stream*: a run of faults whose page indexes step by a constant *stride* (1: forward,
//!   -1: backward, k: strided), kept in a small table of [`PredictConfig::streams`] entries.
//!   A stream is *confirmed* once the same stride was seen twice in a row.
//! - *window*: the pages a confirmed stream has asked the workers for, ahead of its last fault:
//!   `last + stride .. last + window * stride`. The window's end never moves back.
//! - *request*: (fault page, stride, pages) handed from the fault path to the workers through a
//!   bounded lock-free ring.
//!
//! Owns: the stream table, the request ring, the worker threads and the counters.
//! Callers: `attach.rs` (the page sources call [`PredictHook::notify`] on every fill; attach
//! starts a [`Predictor`], the attachment drops it before its view).
//!
//! Invariants:
//! - [`PredictHook::notify`] runs inside the fault handler: it allocates nothing, takes no lock,
//!   never panics and does a bounded amount of work (one sweep over the stream table with at
//!   most [`TABLE_RETRIES_MAX`] retries, at most two ring pushes and one pop, one `unpark`,
//!   which in std's futex parker on Linux is an atomic swap plus at most one `futex` wake).
//! - Work is bounded: at most [`PredictConfig::queue_requests`] requests wait in the ring (when
//!   it is full the oldest request is dropped, and counted), each for at most [`MAX_DEPTH`]
//!   pages; each worker has at most one page in flight.
//! - A worker installs a page only through `View::install`, which installs only absent pages:
//!   a page the application faulted in (and maybe wrote) first is never overwritten. A page that
//!   fails decryption or verification is never installed (the application's own touch then gets
//!   the documented integrity report).
//! - [`Predictor`]'s drop stops and joins every worker; the attachment drops it before its view,
//!   so no install can reach an unmapped range.
//!
//! What "useful" means (see `docs/predict.md`): userfaultfd tells nobody when a present page is
//! read, so a predicted page that is read later cannot be observed directly. The per-page
//! counters are exact (pages decrypted and installed, pages found present or lost to a racing
//! fault, faults on a page a worker was filling right then = *late*). Usefulness is inferred per
//! stream: when a stream's next fault lands `k` strides past its previous one, the `k - 1`
//! window pages in between were passed over without a fault, i.e. they were present when the
//! stream reached them (*used*); window pages still ahead of a stream when it is evicted from
//! the table or at detach are *unused*; a fault on a window page is a *window fault* (right but
//! not ready). The benchmark also measures the exact hit rate (1 - faults / pages touched),
//! since it knows what it touches.
#![deny(unsafe_code)]

mod config;
mod hook;
mod install;
mod pool;
mod ring;
mod stream;
mod worker;

pub use config::{
    Depth, PredictConfig, PredictStats, DEFAULT_MIN_WINDOWS, ENV_VAR, MAX_DEPTH, MAX_IDLE_SPIN_US,
    MAX_QUEUE_REQUESTS, MAX_STREAMS, MAX_STRIDE_PAGES, MAX_TRACKED_PAGES, MAX_WORKERS,
    TABLE_RETRIES_MAX,
};
pub use hook::PredictHook;
pub use worker::Predictor;

#[cfg(test)]
mod tests {
    use super::config::*;
    use super::hook::*;
    use super::ring::*;
    use super::stream::*;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;

    #[test]
    fn entry_round_trips() {
        for &(last, stride, confidence, level, window) in &[
            (0u64, 1i64, 0u64, 0u32, 0u64),
            (MAX_TRACKED_PAGES - 1, -1, 3, 6, 127),
            (12345, -2047, 2, 3, 64),
            (7, 2047, 1, 1, 2),
        ] {
            let e = Entry {
                last,
                stride,
                confidence,
                level,
                window,
            };
            assert_eq!(Entry::decode(e.encode()), Some(e));
        }
        assert_eq!(Entry::decode(0), None);
    }

    #[test]
    fn ring_is_bounded_fifo() {
        let r = Ring::new(4);
        for i in 0..4 {
            assert!(r.push(Request {
                page: i,
                stride: -3,
                pages: 8
            }));
        }
        assert!(
            !r.push(Request {
                page: 9,
                stride: 1,
                pages: 1
            }),
            "a full ring refuses"
        );
        for i in 0..4 {
            assert_eq!(
                r.pop(),
                Some(Request {
                    page: i,
                    stride: -3,
                    pages: 8
                })
            );
        }
        assert_eq!(r.pop(), None);
        assert!(r.is_empty());
        // Wraps around.
        for round in 0..10 {
            assert!(r.push(Request {
                page: round,
                stride: 1,
                pages: 2
            }));
            assert_eq!(r.pop().map(|q| q.page), Some(round));
        }
    }

    #[test]
    fn ring_many_producers_lose_nothing_that_was_accepted() {
        let r = Arc::new(Ring::new(64));
        let accepted = Arc::new(AtomicU64::new(0));
        let sum = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let consumer = {
            let (r, sum, done) = (r.clone(), sum.clone(), done.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                loop {
                    match r.pop() {
                        Some(q) => {
                            sum.fetch_add(q.page, Ordering::Relaxed);
                            n += 1;
                        }
                        None if done.load(Ordering::SeqCst) && r.is_empty() => return n,
                        None => std::thread::yield_now(),
                    }
                }
            })
        };
        let producers: Vec<_> = (0..4u64)
            .map(|t| {
                let (r, accepted) = (r.clone(), accepted.clone());
                std::thread::spawn(move || {
                    let mut s = 0;
                    for i in 0..5000u64 {
                        let page = t * 100_000 + i;
                        if r.push(Request {
                            page,
                            stride: 1,
                            pages: 1,
                        }) {
                            accepted.fetch_add(1, Ordering::Relaxed);
                            s += page;
                        }
                    }
                    s
                })
            })
            .collect();
        let pushed_sum: u64 = producers.into_iter().map(|p| p.join().unwrap()).sum();
        done.store(true, Ordering::SeqCst);
        let popped = consumer.join().unwrap();
        assert_eq!(popped, accepted.load(Ordering::Relaxed));
        assert_eq!(sum.load(Ordering::Relaxed), pushed_sum);
    }

    fn drain(h: &PredictHook) -> Vec<Request> {
        std::iter::from_fn(|| h.ring.pop()).collect()
    }

    #[test]
    fn forward_stream_is_confirmed_then_requested() {
        let h = PredictHook::new(PredictConfig::fixed(4), 1000)
            .unwrap()
            .unwrap();
        h.notify(10);
        h.notify(11);
        assert!(drain(&h).is_empty(), "one step is not a stream yet");
        h.notify(12);
        assert_eq!(
            drain(&h),
            vec![Request {
                page: 12,
                stride: 1,
                pages: 4
            }]
        );
        // The application passed over 13..=16 (installed) and faults at 17.
        h.notify(17);
        assert_eq!(
            drain(&h),
            vec![Request {
                page: 17,
                stride: 1,
                pages: 4
            }]
        );
        let s = h.stats();
        assert_eq!(s.used, 4);
        assert_eq!(s.streams_confirmed, 1);
        assert_eq!(s.unused, 0);
        h.close_all();
        assert_eq!(h.stats().unused, 4, "the open window is unused at detach");
    }

    #[test]
    fn backward_and_strided_streams() {
        let h = PredictHook::new(PredictConfig::fixed(2), 1000)
            .unwrap()
            .unwrap();
        for p in [500, 499, 498] {
            h.notify(p);
        }
        assert_eq!(
            drain(&h),
            vec![Request {
                page: 498,
                stride: -1,
                pages: 2
            }]
        );
        for p in [100, 103, 106] {
            h.notify(p);
        }
        assert_eq!(
            drain(&h),
            vec![Request {
                page: 106,
                stride: 3,
                pages: 2
            }]
        );
        // A fault inside the window (late) continues the stream and extends it.
        h.notify(109);
        assert_eq!(
            drain(&h),
            vec![Request {
                page: 109,
                stride: 3,
                pages: 2
            }]
        );
        assert_eq!(h.stats().window_faults, 1);
    }

    #[test]
    fn interleaved_streams_are_tracked_apart() {
        let h = PredictHook::new(PredictConfig::fixed(1), 100_000)
            .unwrap()
            .unwrap();
        // Two threads' streams far apart, interleaved fault by fault.
        for i in 0..3 {
            h.notify(1000 + i);
            h.notify(50_000 - i);
        }
        let reqs = drain(&h);
        assert!(reqs.contains(&Request {
            page: 1002,
            stride: 1,
            pages: 1
        }));
        assert!(reqs.contains(&Request {
            page: 49_998,
            stride: -1,
            pages: 1
        }));
    }

    #[test]
    fn random_faults_rarely_request() {
        let pages = 16_384u64;
        let h = PredictHook::new(PredictConfig::fixed(8), pages)
            .unwrap()
            .unwrap();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..pages {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            h.notify(x % pages);
        }
        let s = h.stats();
        assert!(
            s.requests * 100 < pages,
            "random faults made {} requests",
            s.requests
        );
    }

    #[test]
    fn adaptive_depth_grows_with_use_and_shrinks_without() {
        let h = PredictHook::new(PredictConfig::adaptive(), 1 << 20)
            .unwrap()
            .unwrap();
        // A stream that always consumes its window: the window doubles up to the cap.
        let mut p = 0u64;
        let mut last_window = 0;
        for _ in 0..40 {
            h.notify(p);
            if let Some(r) = drain(&h).last() {
                last_window = r.pages;
                p += u64::from(r.pages) + 1;
            } else {
                p += 1;
            }
        }
        assert_eq!(last_window, MAX_DEPTH);
        // Many short streams that stop right after being confirmed: windows unused, cap falls.
        for s in 0..400u64 {
            let base = 100_000 + s * 1000;
            for i in 0..3 {
                h.notify(base + i);
            }
        }
        let st = h.stats();
        assert!(st.unused > 0);
        assert!(st.depth_cap < MAX_DEPTH, "cap stayed at {}", st.depth_cap);
    }

    #[test]
    fn config_parses_and_validates() {
        assert_eq!(PredictConfig::parse("off").unwrap(), PredictConfig::off());
        assert_eq!(
            PredictConfig::parse(" 8 ").unwrap(),
            PredictConfig::fixed(8)
        );
        assert_eq!(
            PredictConfig::parse("adaptive").unwrap(),
            PredictConfig::adaptive()
        );
        assert_eq!(
            PredictConfig::parse("adaptive:16").unwrap().depth,
            Depth::Adaptive { max: 16 }
        );
        assert!(PredictConfig::parse("65").is_err());
        assert!(PredictConfig::parse("fast").is_err());
        assert!(PredictConfig::parse("adaptive:0").is_err());
        let bad = PredictConfig {
            queue_requests: 3,
            ..PredictConfig::fixed(1)
        };
        assert!(bad.validate().is_err());
        assert!(PredictHook::new(PredictConfig::off(), 100)
            .unwrap()
            .is_none());
        assert_eq!(PredictConfig::fixed(0).label(), "off");
        assert_eq!(PredictConfig::adaptive().label(), "adaptive");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Any fault sequence under any valid configuration: no panic, every request inside
        /// the bounds (stride within the configured maximum, window within the depth, fault
        /// page inside the view), and the counters add up.
        #[test]
        fn any_fault_sequence_keeps_requests_in_bounds(
            pages in 2u64..5000,
            depth in 0u32..=MAX_DEPTH,
            adaptive in proptest::bool::ANY,
            streams in 1usize..=16,
            max_stride in 1u32..=MAX_STRIDE_PAGES,
            faults in proptest::collection::vec((0u64..5000, -3i64..=3), 1..400),
        ) {
            let cfg = PredictConfig {
                depth: if adaptive { Depth::Adaptive { max: depth.max(1) } } else { Depth::Fixed(depth) },
                streams,
                max_stride_pages: max_stride,
                queue_requests: 8,
                ..PredictConfig::fixed(1)
            };
            let Some(h) = PredictHook::new(cfg, pages).unwrap() else {
                proptest::prop_assert!(!adaptive && depth == 0);
                return Ok(());
            };
            // Mix random pages with short strided runs so that streams do form.
            let mut last = 0u64;
            for (p, step) in faults {
                let page = if step == 0 { p % pages } else {
                    (last as i64 + step).rem_euclid(pages as i64) as u64
                };
                h.notify(page);
                last = page;
                while let Some(r) = h.ring.pop() {
                    proptest::prop_assert!(r.page < pages);
                    proptest::prop_assert!(r.stride != 0);
                    proptest::prop_assert!(r.stride.unsigned_abs() <= u64::from(max_stride));
                    proptest::prop_assert!(r.pages >= 1 && r.pages <= MAX_DEPTH);
                }
            }
            let s = h.stats();
            proptest::prop_assert!(s.stream_faults <= s.faults_seen);
            proptest::prop_assert!(s.requests <= s.faults_seen, "one request per fault at most");
            // A stream is born, paired and confirmed by three different faults.
            proptest::prop_assert!(s.streams_confirmed * 3 <= s.faults_seen);
            proptest::prop_assert!(s.depth_cap <= MAX_DEPTH);
            h.close_all();
            proptest::prop_assert!(h.entries.iter().all(|e| e.load(Ordering::Relaxed) == 0));
        }
    }

    #[test]
    fn level_of_rounds_up() {
        assert_eq!(level_of(1), 0);
        assert_eq!(level_of(2), 1);
        assert_eq!(level_of(3), 2);
        assert_eq!(level_of(64), 6);
        assert_eq!(level_of(1000), LEVEL_MAX);
    }
}

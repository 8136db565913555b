//! [`PredictHook`]: what the fault path calls on every fill: the stream table, the requests it
//! pushes, the adaptive depth, the counters. Allocates nothing, takes no lock, never panics.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;

use super::config::{
    Depth, PredictConfig, PredictStats, ADAPTIVE_LOWER_BELOW_PERCENT, ADAPTIVE_RAISE_ABOVE_PERCENT,
    ADAPTIVE_REVIEW_PAGES, ADAPTIVE_START_DEPTH, CONFIRMED, MAX_TRACKED_PAGES, MAX_WORKERS,
    RECENT_FAULTS, TABLE_RETRIES_MAX,
};
use super::ring::{Request, Ring};
use super::stream::{Entry, LEVEL_MAX, STRIDE_BITS, WINDOW_MAX};
use pmo_meta::error::Result;

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) faults_seen: AtomicU64,
    pub(crate) stream_faults: AtomicU64,
    pub(crate) streams_confirmed: AtomicU64,
    pub(crate) requests: AtomicU64,
    pub(crate) requests_dropped: AtomicU64,
    pub(crate) table_conflicts: AtomicU64,
    pub(crate) issued: AtomicU64,
    pub(crate) installed: AtomicU64,
    pub(crate) skipped_present: AtomicU64,
    pub(crate) skipped_in_flight: AtomicU64,
    pub(crate) lost_race: AtomicU64,
    pub(crate) late: AtomicU64,
    pub(crate) used: AtomicU64,
    pub(crate) window_faults: AtomicU64,
    pub(crate) unused: AtomicU64,
    pub(crate) fill_errors: AtomicU64,
    pub(crate) install_errors: AtomicU64,
}

pub(crate) fn bump(c: &AtomicU64, n: u64) {
    if n > 0 {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

/// The fault-side half of a predictor: the stream table, the ring and the counters. The page
/// sources hold it and call [`PredictHook::notify`] from the fault handler.
pub struct PredictHook {
    pub(crate) cfg: PredictConfig,
    pub(crate) pages: u64,
    pub(crate) entries: Box<[AtomicU64]>,
    /// LRU stamps of the entries (the count of faults seen at their last use).
    pub(crate) stamps: Box<[AtomicU64]>,
    pub(crate) ring: Ring,
    /// Page + 1 each worker is filling right now (0: none).
    pub(crate) in_flight: Box<[AtomicU64]>,
    /// Pages + 1 the fault path is filling or filled lately, slot `page % RECENT_FAULTS`: a
    /// worker skips them rather than decrypt a page a faulting thread is decrypting already.
    pub(crate) recent_faults: Box<[AtomicU64]>,
    pub(crate) workers: OnceLock<Box<[Thread]>>,
    pub(crate) next_worker: AtomicU64,
    pub(crate) stop: AtomicBool,
    /// Adaptive: current cap on a stream's depth level.
    pub(crate) cap_level: AtomicU32,
    /// Pool workers serving this hook right now (see `pool.rs`).
    pub(crate) busy: AtomicU32,
    /// Adaptive: closed window pages since the last review (right, unused).
    pub(crate) review_right: AtomicU64,
    pub(crate) review_unused: AtomicU64,
    pub(crate) counters: Counters,
    /// With [`PredictConfig::history`]: the PMO whose history this predictor resumed and
    /// records at its stop.
    pub(crate) history_of: OnceLock<[u8; 16]>,
    /// Learnt strides not yet used to start a stream (0: none); see [`PredictHook::resume`].
    pub(crate) seeds: [AtomicU64; crate::predict_history::MAX_STRIDES],
}

impl std::fmt::Debug for PredictHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PredictHook")
            .field("cfg", &self.cfg)
            .field("pages", &self.pages)
            .finish()
    }
}

pub(crate) fn level_of(depth: u32) -> u32 {
    // Smallest level whose depth 2^level covers `depth`, capped.
    (32 - depth.max(1).saturating_sub(1).leading_zeros()).min(LEVEL_MAX)
}

impl PredictHook {
    /// A hook for a view of `pages` pages, or `None` when `cfg` predicts nothing.
    pub fn new(cfg: PredictConfig, pages: u64) -> Result<Option<Arc<PredictHook>>> {
        cfg.validate()?;
        if !cfg.is_on() || pages < 2 {
            return Ok(None);
        }
        let cap = match cfg.depth {
            Depth::Fixed(d) => level_of(d),
            Depth::Adaptive { max } => level_of(max),
        };
        Ok(Some(Arc::new(PredictHook {
            cfg,
            pages,
            entries: (0..cfg.streams).map(|_| AtomicU64::new(0)).collect(),
            stamps: (0..cfg.streams).map(|_| AtomicU64::new(0)).collect(),
            ring: Ring::new(cfg.queue_requests),
            // One slot per pool worker (any of them may serve this hook).
            in_flight: (0..MAX_WORKERS).map(|_| AtomicU64::new(0)).collect(),
            recent_faults: (0..RECENT_FAULTS).map(|_| AtomicU64::new(0)).collect(),
            workers: OnceLock::new(),
            next_worker: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            cap_level: AtomicU32::new(cap),
            busy: AtomicU32::new(0),
            review_right: AtomicU64::new(0),
            review_unused: AtomicU64::new(0),
            counters: Counters::default(),
            history_of: OnceLock::new(),
            seeds: Default::default(),
        })))
    }

    /// The configuration.
    pub fn config(&self) -> PredictConfig {
        self.cfg
    }

    /// A fill of `page` is starting (called by the page sources, from the fault handler).
    /// Updates the stream table and, for a confirmed stream, asks the workers for its window.
    /// Allocation-free, lock-free, bounded; never panics.
    pub fn notify(&self, page: u64) {
        if page >= self.pages || page >= MAX_TRACKED_PAGES || self.stop.load(Ordering::Relaxed) {
            return;
        }
        let c = &self.counters;
        // The count of faults seen doubles as the clock of the table's LRU stamps.
        let now = c.faults_seen.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some(r) = self.recent_faults.get((page % RECENT_FAULTS) as usize) {
            r.store(page + 1, Ordering::Release);
        }
        if self.in_flight_at(page) {
            bump(&c.late, 1);
        }
        for _ in 0..=TABLE_RETRIES_MAX {
            match self.try_update(page, now) {
                Some(Some(req)) => {
                    self.submit(req);
                    return;
                }
                Some(None) => return,
                None => continue, // lost a race on an entry: look again
            }
        }
        bump(&c.table_conflicts, 1);
    }

    /// One pass over the table. `None`: a compare-exchange lost (retry); `Some(req)`: done,
    /// with the request to submit if any. The pass finds, at once: the first stream this fault
    /// continues, the nearest fresh entry it pairs with, and the least recently used entry.
    pub(crate) fn try_update(&self, page: u64, now: u64) -> Option<Option<Request>> {
        let max_stride = i64::from(self.cfg.max_stride_pages);
        // First a branch-light sweep: which entries are near this fault at all (bit i of
        // `near`), and which one is the least recently used (an empty one first). After a
        // fault's trip through the kernel the branch predictors know little, so a sweep with
        // data-dependent branches costs far more here than in a loop; most faults of a
        // workload without streams are near no entry and skip the rest.
        let mut near = 0u64;
        let mut victim = (0usize, u64::MAX);
        for (i, (slot, stamp)) in self.entries.iter().zip(self.stamps.iter()).enumerate() {
            let word = slot.load(Ordering::Acquire);
            let last1 = word & MAX_TRACKED_PAGES;
            let delta = (page + 1) as i64 - last1 as i64;
            let raw = (word >> 40) & ((1 << STRIDE_BITS) - 1);
            let stride = ((raw << (64 - STRIDE_BITS)) as i64) >> (64 - STRIDE_BITS);
            let window = ((word >> 57) & WINDOW_MAX) as i64;
            let reach = (stride.abs() * (window + 1)).max(max_stride);
            let close = (last1 != 0) & (delta.abs() <= reach);
            near |= u64::from(close) << i;
            let t = stamp.load(Ordering::Relaxed) * u64::from(last1 != 0);
            if t < victim.1 {
                victim = (i, t);
            }
        }
        let mut pair: Option<(usize, u64, i64)> = None;
        let mut rest = near;
        while rest != 0 {
            let i = rest.trailing_zeros() as usize;
            rest &= rest - 1;
            // Loaded again: if it changed since the sweep, the compare-exchange below fails and
            // the update is retried.
            let word = self.entries[i].load(Ordering::Acquire);
            let Some(e) = Entry::decode(word) else {
                continue;
            };
            let delta = page as i64 - e.last as i64;
            if e.stride != 0 {
                // Continues the stream if page = last + k * stride, 1 <= k <= window + 1.
                let reach = e.stride.saturating_mul(e.window as i64 + 1);
                let ahead = if e.stride > 0 {
                    delta > 0 && delta <= reach
                } else {
                    delta < 0 && delta >= reach
                };
                if ahead && delta % e.stride == 0 {
                    return self.continue_stream(i, word, e, (delta / e.stride) as u64, page, now);
                }
            } else if delta != 0
                && delta.abs() <= max_stride
                && pair.is_none_or(|(_, _, d)| delta.abs() < d.abs())
            {
                pair = Some((i, word, delta));
            }
        }
        if let Some((i, word, delta)) = pair {
            // A fresh entry this fault pairs with: the stride is now known (confidence 1).
            let next = Entry {
                last: page,
                stride: delta,
                confidence: 1,
                level: 0,
                window: 0,
            };
            self.entries[i]
                .compare_exchange(word, next.encode(), Ordering::AcqRel, Ordering::Acquire)
                .ok()?;
            self.stamps[i].store(now, Ordering::Relaxed);
            return Some(None);
        }
        // A new entry in place of the least recently used one (an empty one first).
        let (i, _) = victim;
        let slot = &self.entries[i];
        let word = slot.load(Ordering::Acquire);
        // A stride this PMO's streams had in an earlier attach starts the stream confirmed.
        let seed = self.take_seed();
        let next = match seed {
            Some(stride) => {
                let (level, depth) = self.start_depth();
                Entry {
                    last: page,
                    stride,
                    confidence: CONFIRMED,
                    level,
                    window: depth.min(WINDOW_MAX),
                }
            }
            None => Entry {
                last: page,
                stride: 0,
                confidence: 0,
                level: 0,
                window: 0,
            },
        };
        if slot
            .compare_exchange(word, next.encode(), Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            if let Some(stride) = seed {
                self.put_seed(stride);
            }
            return None;
        }
        self.stamps[i].store(now, Ordering::Relaxed);
        if let Some(old) = Entry::decode(word) {
            bump(&self.counters.unused, old.window);
            self.review(0, old.window);
        }
        if seed.is_none() || next.window == 0 {
            return Some(None);
        }
        Some(Some(Request {
            page,
            stride: next.stride,
            pages: next.window as u32,
        }))
    }

    /// Depth level and window of a stream that is confirmed now (as `continue_stream` starts
    /// one).
    pub(crate) fn start_depth(&self) -> (u32, u64) {
        match self.cfg.depth {
            Depth::Fixed(d) => (0, u64::from(d)),
            Depth::Adaptive { .. } => {
                let cap = self.cap_level.load(Ordering::Relaxed);
                let level = cap
                    .saturating_sub(1)
                    .max(level_of(ADAPTIVE_START_DEPTH))
                    .min(cap);
                (level, 1u64 << level)
            }
        }
    }

    /// Take one learnt stride (allocation-free, lock-free: a swap per seed slot at most).
    pub(crate) fn take_seed(&self) -> Option<i64> {
        self.seeds.iter().find_map(|s| {
            if s.load(Ordering::Relaxed) == 0 {
                return None;
            }
            match s.swap(0, Ordering::AcqRel) {
                0 => None,
                v => Some(v as i64),
            }
        })
    }

    pub(crate) fn put_seed(&self, stride: i64) {
        for s in &self.seeds {
            if s.compare_exchange(0, stride as u64, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
        }
    }

    /// With [`PredictConfig::history`] on: this predictor serves PMO `uuid`; start it from what
    /// an earlier attach of that PMO learnt (each learnt stride starts the next new stream
    /// confirmed; adaptive: the depth cap is restored) and record what it learns at its stop.
    /// Called by attach before the view takes faults. Does nothing with `history` off.
    pub fn resume(&self, uuid: [u8; 16]) {
        if !self.cfg.history || self.history_of.set(uuid).is_err() {
            return;
        }
        let Some(l) = crate::predict_history::recall(&uuid) else {
            return;
        };
        for (slot, &stride) in self.seeds.iter().zip(l.strides()) {
            slot.store(stride as u64, Ordering::Release);
        }
        if let Depth::Adaptive { max } = self.cfg.depth {
            self.cap_level
                .store(l.cap_level.min(level_of(max)), Ordering::Relaxed);
        }
    }

    /// The strides of the confirmed streams in the table, and the depth cap.
    pub(crate) fn learned(&self) -> crate::predict_history::Learned {
        let mut l = crate::predict_history::Learned {
            cap_level: self.cap_level.load(Ordering::Relaxed),
            ..Default::default()
        };
        for slot in self.entries.iter() {
            if let Some(e) = Entry::decode(slot.load(Ordering::Acquire)) {
                if e.confidence >= CONFIRMED {
                    l.add(e.stride);
                }
            }
        }
        l
    }

    /// The fault at `page` is `k` strides past entry `i`'s last fault: move the stream on,
    /// account its window, and make the request for its new window.
    fn continue_stream(
        &self,
        i: usize,
        word: u64,
        e: Entry,
        k: u64,
        page: u64,
        now: u64,
    ) -> Option<Option<Request>> {
        let c = &self.counters;
        let confidence = (e.confidence + 1).min(3);
        let passed = (k - 1).min(e.window);
        let faulted_in_window = k <= e.window;
        let carried = e.window.saturating_sub(k);
        let mut level = e.level;
        let depth = if confidence < CONFIRMED {
            0
        } else {
            match self.cfg.depth {
                Depth::Fixed(d) => u64::from(d),
                Depth::Adaptive { .. } => {
                    let cap = self.cap_level.load(Ordering::Relaxed);
                    if e.confidence < CONFIRMED {
                        // A new stream starts at half the cap (at least the start depth): the
                        // cap has learnt how far streams of this workload go.
                        level = cap.saturating_sub(1).max(level_of(ADAPTIVE_START_DEPTH));
                    } else if e.window > 0 && k == e.window + 1 {
                        // The stream consumed its whole window: look further ahead.
                        level += 1;
                    }
                    level = level.min(cap);
                    1u64 << level
                }
            }
        };
        let window = carried.max(depth).min(WINDOW_MAX);
        let next = Entry {
            last: page,
            stride: e.stride,
            confidence,
            level,
            window,
        };
        self.entries[i]
            .compare_exchange(word, next.encode(), Ordering::AcqRel, Ordering::Acquire)
            .ok()?;
        self.stamps[i].store(now, Ordering::Relaxed);
        bump(&c.stream_faults, u64::from(e.confidence >= CONFIRMED));
        bump(
            &c.streams_confirmed,
            u64::from(e.confidence + 1 == CONFIRMED),
        );
        bump(&c.used, passed);
        bump(&c.window_faults, u64::from(faulted_in_window));
        self.review(passed + u64::from(faulted_in_window), 0);
        if window == 0 {
            return Some(None);
        }
        Some(Some(Request {
            page,
            stride: e.stride,
            pages: window as u32,
        }))
    }

    /// Adaptive mode: account closed window pages and move the depth cap every
    /// [`ADAPTIVE_REVIEW_PAGES`] of them.
    pub(crate) fn review(&self, right: u64, unused: u64) {
        let Depth::Adaptive { max } = self.cfg.depth else {
            return;
        };
        if right + unused == 0 {
            return;
        }
        let r = self.review_right.fetch_add(right, Ordering::Relaxed) + right;
        let u = self.review_unused.fetch_add(unused, Ordering::Relaxed) + unused;
        if r + u < ADAPTIVE_REVIEW_PAGES {
            return;
        }
        // Whoever takes the counters back to zero first does the review.
        let r = self.review_right.swap(0, Ordering::Relaxed);
        let u = self.review_unused.swap(0, Ordering::Relaxed);
        if r + u == 0 {
            return;
        }
        let percent = r * 100 / (r + u);
        let cap = self.cap_level.load(Ordering::Relaxed);
        let next = if percent < ADAPTIVE_LOWER_BELOW_PERCENT {
            cap.saturating_sub(1)
        } else if percent > ADAPTIVE_RAISE_ABOVE_PERCENT {
            (cap + 1).min(level_of(max))
        } else {
            cap
        };
        self.cap_level.store(next, Ordering::Relaxed);
    }

    pub(crate) fn submit(&self, req: Request) {
        let c = &self.counters;
        if !self.ring.push(req) {
            // Full: the oldest request is the stalest (its stream has moved on since); drop it
            // rather than this one. One try: if other threads refill the slot, drop this one.
            bump(&c.requests_dropped, 1);
            if self.ring.pop().is_none() || !self.ring.push(req) {
                return;
            }
        }
        bump(&c.requests, 1);
        // Pairs with the fence in `Predictor::start`: either this sees the workers, or start
        // sees the request (and wakes them).
        std::sync::atomic::fence(Ordering::SeqCst);
        if let Some(workers) = self.workers.get() {
            let n = workers.len() as u64;
            if n > 0 {
                let i = self.next_worker.fetch_add(1, Ordering::Relaxed) % n;
                // Thread::unpark is an atomic swap and, if the worker sleeps, one futex wake:
                // no allocation, no lock (std's futex parker on Linux).
                workers[i as usize].unpark();
            }
        }
    }

    /// Whether a faulting thread is filling `page` (or filled it lately; advisory).
    pub(crate) fn faulting(&self, page: u64) -> bool {
        self.recent_faults
            .get((page % RECENT_FAULTS) as usize)
            .is_some_and(|r| r.load(Ordering::Acquire) == page + 1)
    }

    /// Whether a worker is filling `page` right now (advisory).
    pub(crate) fn in_flight_at(&self, page: u64) -> bool {
        self.in_flight
            .iter()
            .any(|w| w.load(Ordering::Acquire) == page + 1)
    }

    /// Counters so far.
    pub fn stats(&self) -> PredictStats {
        let c = &self.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        PredictStats {
            faults_seen: l(&c.faults_seen),
            stream_faults: l(&c.stream_faults),
            streams_confirmed: l(&c.streams_confirmed),
            requests: l(&c.requests),
            requests_dropped: l(&c.requests_dropped),
            table_conflicts: l(&c.table_conflicts),
            issued: l(&c.issued),
            installed: l(&c.installed),
            skipped_present: l(&c.skipped_present),
            skipped_in_flight: l(&c.skipped_in_flight),
            lost_race: l(&c.lost_race),
            late: l(&c.late),
            used: l(&c.used),
            window_faults: l(&c.window_faults),
            unused: l(&c.unused),
            fill_errors: l(&c.fill_errors),
            install_errors: l(&c.install_errors),
            depth_cap: match self.cfg.depth {
                Depth::Fixed(d) => d,
                Depth::Adaptive { .. } => 1 << self.cap_level.load(Ordering::Relaxed),
            },
        }
    }

    /// Close every stream's window as unused (at detach).
    pub(crate) fn close_all(&self) {
        for slot in self.entries.iter() {
            if let Some(e) = Entry::decode(slot.swap(0, Ordering::AcqRel)) {
                bump(&self.counters.unused, e.window);
            }
        }
    }
}

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

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::Duration;

use pmo_os::view::{PageSource, View, PAGE_SIZE};

use pmo_meta::error::{Result, StoreError};

mod pool;

/// Deepest window a stream may ask for, pages (fixed or adaptive).
pub const MAX_DEPTH: u32 = 64;
/// Most entries in the stream table.
pub const MAX_STREAMS: usize = 64;
/// Most worker threads.
pub const MAX_WORKERS: usize = 8;
/// Largest ring of requests.
pub const MAX_QUEUE_REQUESTS: usize = 1024;
/// Largest stride a stream may have, pages (the packed entry keeps a 12-bit signed stride).
pub const MAX_STRIDE_PAGES: u32 = 2047;
/// Faults past this page index are not tracked (the packed entry keeps 40 bits of page index).
pub const MAX_TRACKED_PAGES: u64 = (1 << 40) - 1;
/// Retries of a stream-table update lost to another faulting thread, before the fault is
/// ignored by the predictor.
pub const TABLE_RETRIES_MAX: u32 = 2;
/// Name of the environment variable that chooses prediction when the caller does not.
pub const ENV_VAR: &str = "PMO_PREDICT";

/// Adaptive mode: least depth a newly confirmed stream starts with (it starts at half the
/// current cap).
const ADAPTIVE_START_DEPTH: u32 = 2;
/// Adaptive mode: closed window pages per accuracy review.
const ADAPTIVE_REVIEW_PAGES: u64 = 256;
/// Adaptive mode: below this accuracy (percent) the depth cap halves (see [`Depth::Adaptive`]).
const ADAPTIVE_LOWER_BELOW_PERCENT: u64 = 30;
/// Adaptive mode: above this accuracy (percent) the depth cap doubles.
const ADAPTIVE_RAISE_ABOVE_PERCENT: u64 = 60;
/// How long an idle worker sleeps before it looks at the ring again (backstop for a lost
/// wake-up; the fault path normally unparks it).
const IDLE_PARK: Duration = Duration::from_millis(50);
/// Longest [`PredictConfig::idle_spin_us`].
pub const MAX_IDLE_SPIN_US: u32 = 10_000;
/// Slots of the table of pages the fault path is filling (a power of two).
const RECENT_FAULTS: u64 = 64;
/// Confidence at which a stream is confirmed (its stride seen twice in a row).
const CONFIRMED: u64 = 2;

/// How deep the predictor looks ahead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Depth {
    /// A fixed window of this many pages per confirmed stream (0: prediction off).
    Fixed(u32),
    /// Start each confirmed stream at half the current cap (at least 2 pages) and double its
    /// window each time the stream consumes it whole, up to the cap. The cap starts at `max`,
    /// halves when fewer than 30% of the window pages closed since the last review (every 256)
    /// were reached by their stream, and doubles when more than 60% were, between 1 and `max`.
    /// The bar is low on purpose: a wasted prediction costs a worker some CPU time, a missed
    /// one costs the application a fault.
    Adaptive { max: u32 },
}

/// Configuration of the predictor of one attachment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PredictConfig {
    /// Look-ahead depth.
    pub depth: Depth,
    /// Worker threads that decrypt and install predicted pages (1..=[`MAX_WORKERS`]).
    pub workers: usize,
    /// Entries of the stream table (1..=[`MAX_STREAMS`]): concurrent streams tracked.
    pub streams: usize,
    /// Largest stride, in pages, recognised as a stream (1..=[`MAX_STRIDE_PAGES`]).
    pub max_stride_pages: u32,
    /// Capacity of the request ring (a power of two, 2..=[`MAX_QUEUE_REQUESTS`]).
    pub queue_requests: usize,
    /// How long a worker that ran out of requests keeps looking (yielding the CPU between
    /// looks) before it parks, microseconds (0..=[`MAX_IDLE_SPIN_US`]). A parked worker on an
    /// idle vCPU takes tens of microseconds to wake in a VM (`measured.md`); a worker that
    /// spins costs CPU time the scheduler then charges against it when the machine is busy.
    pub idle_spin_us: u32,
    /// Keep what the predictor learnt across attaches of the same PMO (in this process) and
    /// start the next attach's predictor from it (`crate::predict_history`). Parsed as a
    /// `+history` suffix (`8+history`, `adaptive+history`).
    pub history: bool,
    /// A PMO of at most this many fault-around windows attaches without a predictor (no hook,
    /// no job in the pool, no wake-up): fault-around already fills such a PMO in a few faults,
    /// so a predictor could only add its per-attach and per-request costs (issue 16, fourth
    /// pass; docs/predict.md, "Small PMOs"). The window is the attachment's fault-around
    /// window (`PMO_FAULT_AROUND`, default 16 pages; 1 with fault-around off or the sigsegv
    /// mechanism). 0: predict whatever the size.
    pub min_windows: u32,
}

/// Default of [`PredictConfig::min_windows`].
pub const DEFAULT_MIN_WINDOWS: u32 = 4;

impl PredictConfig {
    /// A fixed depth with the default table, ring and one worker.
    pub const fn fixed(depth: u32) -> PredictConfig {
        PredictConfig {
            depth: Depth::Fixed(depth),
            workers: 1,
            streams: 8,
            max_stride_pages: 64,
            queue_requests: 64,
            idle_spin_us: 0,
            history: false,
            min_windows: DEFAULT_MIN_WINDOWS,
        }
    }

    /// Adaptive depth up to [`MAX_DEPTH`] with the default table, ring and one worker.
    pub const fn adaptive() -> PredictConfig {
        PredictConfig {
            depth: Depth::Adaptive { max: MAX_DEPTH },
            ..PredictConfig::fixed(0)
        }
    }

    /// Prediction off.
    pub const fn off() -> PredictConfig {
        PredictConfig::fixed(0)
    }

    /// Whether this configuration predicts anything.
    pub fn is_on(&self) -> bool {
        !matches!(self.depth, Depth::Fixed(0))
    }

    /// Whether a PMO of `pages` pages, attached with a fault-around window of `around` pages,
    /// gets a predictor: not when it is at most [`PredictConfig::min_windows`] windows.
    pub fn engages(&self, pages: u64, around: usize) -> bool {
        let small = u64::from(self.min_windows).saturating_mul(around.max(1) as u64);
        self.is_on() && pages > small
    }

    /// Parse `off` | `0` | `N` (fixed depth) | `adaptive` | `adaptive:MAX`, each but `off`
    /// optionally followed by `+history` ([`PredictConfig::history`]).
    pub fn parse(text: &str) -> Result<PredictConfig> {
        let t = text.trim();
        if let Some(base) = t.strip_suffix("+history") {
            let cfg = PredictConfig::parse(base)?;
            if !cfg.is_on() {
                return Err(StoreError::Invalid(format!(
                    "{ENV_VAR}={t:?}: +history needs a predictor that is on"
                )));
            }
            return Ok(PredictConfig {
                history: true,
                ..cfg
            });
        }
        let bad = || {
            StoreError::Invalid(format!(
                "{ENV_VAR}={t:?}: expected off, a depth 0..={MAX_DEPTH}, adaptive or adaptive:MAX"
            ))
        };
        let cfg = match t {
            "" | "off" | "none" => PredictConfig::off(),
            "adaptive" => PredictConfig::adaptive(),
            _ => {
                if let Some(max) = t.strip_prefix("adaptive:") {
                    let max: u32 = max.trim().parse().map_err(|_| bad())?;
                    PredictConfig {
                        depth: Depth::Adaptive { max },
                        ..PredictConfig::adaptive()
                    }
                } else {
                    PredictConfig::fixed(t.parse().map_err(|_| bad())?)
                }
            }
        };
        cfg.validate().map_err(|_| bad())?;
        Ok(cfg)
    }

    /// The configuration named by `PMO_PREDICT` (unset or empty: off). A set but invalid value
    /// is an error, not a silent default.
    pub fn from_env() -> Result<PredictConfig> {
        match std::env::var(ENV_VAR) {
            Ok(v) => PredictConfig::parse(&v),
            Err(std::env::VarError::NotPresent) => Ok(PredictConfig::off()),
            Err(std::env::VarError::NotUnicode(_)) => {
                Err(StoreError::Invalid(format!("{ENV_VAR} is not valid UTF-8")))
            }
        }
    }

    /// Check every bound.
    pub fn validate(&self) -> Result<()> {
        let depth_ok = match self.depth {
            Depth::Fixed(d) => d <= MAX_DEPTH,
            Depth::Adaptive { max } => (1..=MAX_DEPTH).contains(&max),
        };
        let ok = depth_ok
            && (1..=MAX_WORKERS).contains(&self.workers)
            && (1..=MAX_STREAMS).contains(&self.streams)
            && (1..=MAX_STRIDE_PAGES).contains(&self.max_stride_pages)
            && (2..=MAX_QUEUE_REQUESTS).contains(&self.queue_requests)
            && self.queue_requests.is_power_of_two()
            && self.idle_spin_us <= MAX_IDLE_SPIN_US;
        if ok {
            Ok(())
        } else {
            Err(StoreError::Invalid(format!(
                "invalid prediction configuration {self:?}"
            )))
        }
    }

    /// Short name for tables: `off`, the depth, or `adaptive`.
    pub fn label(&self) -> String {
        let base = match self.depth {
            Depth::Fixed(0) => "off".into(),
            Depth::Fixed(d) => d.to_string(),
            Depth::Adaptive { max } if max == MAX_DEPTH => "adaptive".into(),
            Depth::Adaptive { max } => format!("adaptive:{max}"),
        };
        if self.history && self.is_on() {
            format!("{base}+history")
        } else {
            base
        }
    }
}

impl Default for PredictConfig {
    fn default() -> Self {
        PredictConfig::off()
    }
}

/// Counters of one attachment's predictor (see the module docs for what each one means).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PredictStats {
    /// Fills the predictor was told about (faults, and pages filled by prefault).
    pub faults_seen: u64,
    /// Faults that continued a confirmed stream.
    pub stream_faults: u64,
    /// Streams confirmed (stride seen twice in a row).
    pub streams_confirmed: u64,
    /// Requests handed to the workers.
    pub requests: u64,
    /// Requests dropped because the ring was full (the oldest one is dropped for a new one).
    pub requests_dropped: u64,
    /// Faults whose stream-table update lost to other threads too often and was skipped.
    pub table_conflicts: u64,
    /// Pages a worker decrypted (or copied) to install.
    pub issued: u64,
    /// Pages a worker installed (absent until then).
    pub installed: u64,
    /// Window pages a worker skipped because they were present already.
    pub skipped_present: u64,
    /// Window pages a worker skipped because another worker or a faulting thread was filling
    /// them.
    pub skipped_in_flight: u64,
    /// Pages a worker decrypted but found present at install (the application faulted first).
    pub lost_race: u64,
    /// Faults on a page a worker had in flight at that moment.
    pub late: u64,
    /// Window pages a stream passed over without a fault (inferred used).
    pub used: u64,
    /// Window pages a stream faulted on (the prediction was right but not ready).
    pub window_faults: u64,
    /// Window pages still ahead of a stream when it was evicted or at detach (unused).
    pub unused: u64,
    /// Pages whose decryption or verification failed in a worker (not installed).
    pub fill_errors: u64,
    /// Installs that failed with an error from the view.
    pub install_errors: u64,
    /// Adaptive mode: current depth cap (fixed mode: the depth).
    pub depth_cap: u32,
}

impl PredictStats {
    /// Stream-level accuracy: (used + window faults) / (used + window faults + unused), the
    /// share of closed window pages the stream did reach. `None` before any window closed.
    pub fn accuracy(&self) -> Option<f64> {
        let right = self.used + self.window_faults;
        let closed = right + self.unused;
        (closed > 0).then(|| right as f64 / closed as f64)
    }
}

/// One stream-table entry, packed into a `u64` so that it changes with one compare-exchange.
/// Bits 0..40: last fault page + 1 (0: empty); 40..52: stride (12-bit two's complement, 0:
/// unknown); 52..54: confidence (0..=3); 54..57: depth level (adaptive: depth = 2^level);
/// 57..64: window (pages requested ahead of the last fault, 0..=127).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    last: u64,
    stride: i64,
    confidence: u64,
    level: u32,
    window: u64,
}

const STRIDE_BITS: u32 = 12;
const WINDOW_MAX: u64 = 127;
const LEVEL_MAX: u32 = 6; // 2^6 = MAX_DEPTH

impl Entry {
    fn encode(&self) -> u64 {
        let stride = (self.stride as u64) & ((1 << STRIDE_BITS) - 1);
        ((self.last + 1) & MAX_TRACKED_PAGES)
            | stride << 40
            | (self.confidence & 3) << 52
            | u64::from(self.level & 7) << 54
            | (self.window & WINDOW_MAX) << 57
    }

    /// `None` for an empty slot.
    fn decode(word: u64) -> Option<Entry> {
        let last1 = word & MAX_TRACKED_PAGES;
        if last1 == 0 {
            return None;
        }
        let raw = (word >> 40) & ((1 << STRIDE_BITS) - 1);
        // Sign-extend the 12-bit stride.
        let stride = ((raw << (64 - STRIDE_BITS)) as i64) >> (64 - STRIDE_BITS);
        Some(Entry {
            last: last1 - 1,
            stride,
            confidence: (word >> 52) & 3,
            level: ((word >> 54) & 7) as u32,
            window: (word >> 57) & WINDOW_MAX,
        })
    }
}

/// A request cell of the ring (Vyukov's bounded MPMC queue, all fields atomics).
struct Cell {
    seq: AtomicU64,
    page: AtomicU64,
    /// Stride (low 32 bits, two's complement) and page count (high 32 bits).
    shape: AtomicU64,
}

/// Bounded multi-producer multi-consumer ring of requests. Lock-free; `push` fails when full.
struct Ring {
    cells: Box<[Cell]>,
    mask: u64,
    head: AtomicU64,
    tail: AtomicU64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Request {
    page: u64,
    stride: i64,
    pages: u32,
}

impl Ring {
    fn new(capacity: usize) -> Ring {
        debug_assert!(capacity.is_power_of_two());
        Ring {
            cells: (0..capacity as u64)
                .map(|i| Cell {
                    seq: AtomicU64::new(i),
                    page: AtomicU64::new(0),
                    shape: AtomicU64::new(0),
                })
                .collect(),
            mask: capacity as u64 - 1,
            head: AtomicU64::new(0),
            tail: AtomicU64::new(0),
        }
    }

    /// Allocation-free and lock-free; false when full.
    fn push(&self, r: Request) -> bool {
        let mut pos = self.tail.load(Ordering::Relaxed);
        loop {
            let Some(cell) = self.cells.get((pos & self.mask) as usize) else {
                return false;
            };
            let seq = cell.seq.load(Ordering::Acquire);
            if seq == pos {
                match self.tail.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        cell.page.store(r.page, Ordering::Relaxed);
                        let shape = (r.stride as u32 as u64) | u64::from(r.pages) << 32;
                        cell.shape.store(shape, Ordering::Relaxed);
                        cell.seq.store(pos.wrapping_add(1), Ordering::Release);
                        return true;
                    }
                    Err(now) => pos = now,
                }
            } else if seq < pos {
                return false; // full
            } else {
                pos = self.tail.load(Ordering::Relaxed);
            }
        }
    }

    /// Whether a request may be waiting (exact once pushes and pops have settled; see
    /// [`Predictor::start`]).
    fn may_have_requests(&self) -> bool {
        self.tail.load(Ordering::SeqCst) != self.head.load(Ordering::SeqCst)
    }

    fn pop(&self) -> Option<Request> {
        let mut pos = self.head.load(Ordering::Relaxed);
        loop {
            let cell = self.cells.get((pos & self.mask) as usize)?;
            let seq = cell.seq.load(Ordering::Acquire);
            let ready = pos.wrapping_add(1);
            if seq == ready {
                match self.head.compare_exchange_weak(
                    pos,
                    ready,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        let page = cell.page.load(Ordering::Relaxed);
                        let shape = cell.shape.load(Ordering::Relaxed);
                        cell.seq
                            .store(pos.wrapping_add(self.mask + 1), Ordering::Release);
                        return Some(Request {
                            page,
                            stride: i64::from(shape as u32 as i32),
                            pages: (shape >> 32) as u32,
                        });
                    }
                    Err(now) => pos = now,
                }
            } else if seq < ready {
                return None; // empty
            } else {
                pos = self.head.load(Ordering::Relaxed);
            }
        }
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.head.load(Ordering::SeqCst) == self.tail.load(Ordering::SeqCst)
    }
}

#[derive(Default)]
struct Counters {
    faults_seen: AtomicU64,
    stream_faults: AtomicU64,
    streams_confirmed: AtomicU64,
    requests: AtomicU64,
    requests_dropped: AtomicU64,
    table_conflicts: AtomicU64,
    issued: AtomicU64,
    installed: AtomicU64,
    skipped_present: AtomicU64,
    skipped_in_flight: AtomicU64,
    lost_race: AtomicU64,
    late: AtomicU64,
    used: AtomicU64,
    window_faults: AtomicU64,
    unused: AtomicU64,
    fill_errors: AtomicU64,
    install_errors: AtomicU64,
}

fn bump(c: &AtomicU64, n: u64) {
    if n > 0 {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

/// The fault-side half of a predictor: the stream table, the ring and the counters. The page
/// sources hold it and call [`PredictHook::notify`] from the fault handler.
pub struct PredictHook {
    cfg: PredictConfig,
    pages: u64,
    entries: Box<[AtomicU64]>,
    /// LRU stamps of the entries (the count of faults seen at their last use).
    stamps: Box<[AtomicU64]>,
    ring: Ring,
    /// Page + 1 each worker is filling right now (0: none).
    in_flight: Box<[AtomicU64]>,
    /// Pages + 1 the fault path is filling or filled lately, slot `page % RECENT_FAULTS`: a
    /// worker skips them rather than decrypt a page a faulting thread is decrypting already.
    recent_faults: Box<[AtomicU64]>,
    workers: OnceLock<Box<[Thread]>>,
    next_worker: AtomicU64,
    stop: AtomicBool,
    /// Adaptive: current cap on a stream's depth level.
    cap_level: AtomicU32,
    /// Pool workers serving this hook right now (see `pool.rs`).
    busy: AtomicU32,
    /// Adaptive: closed window pages since the last review (right, unused).
    review_right: AtomicU64,
    review_unused: AtomicU64,
    counters: Counters,
    /// With [`PredictConfig::history`]: the PMO whose history this predictor resumed and
    /// records at its stop.
    history_of: OnceLock<[u8; 16]>,
    /// Learnt strides not yet used to start a stream (0: none); see [`PredictHook::resume`].
    seeds: [AtomicU64; crate::predict_history::MAX_STRIDES],
}

impl std::fmt::Debug for PredictHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PredictHook")
            .field("cfg", &self.cfg)
            .field("pages", &self.pages)
            .finish()
    }
}

fn level_of(depth: u32) -> u32 {
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
    fn try_update(&self, page: u64, now: u64) -> Option<Option<Request>> {
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
    fn start_depth(&self) -> (u32, u64) {
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
    fn take_seed(&self) -> Option<i64> {
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

    fn put_seed(&self, stride: i64) {
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
    fn learned(&self) -> crate::predict_history::Learned {
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
    fn review(&self, right: u64, unused: u64) {
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

    fn submit(&self, req: Request) {
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
    fn faulting(&self, page: u64) -> bool {
        self.recent_faults
            .get((page % RECENT_FAULTS) as usize)
            .is_some_and(|r| r.load(Ordering::Acquire) == page + 1)
    }

    /// Whether a worker is filling `page` right now (advisory).
    fn in_flight_at(&self, page: u64) -> bool {
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
    fn close_all(&self) {
        for slot in self.entries.iter() {
            if let Some(e) = Entry::decode(slot.swap(0, Ordering::AcqRel)) {
                bump(&self.counters.unused, e.window);
            }
        }
    }
}

/// The worker half: this attachment's job in the process-wide pool of workers
/// (`pool`), which decrypt and install its predicted pages. Dropping it (or [`Predictor::finish`])
/// removes the job; when that returns no worker uses the view any more (the attachment drops
/// it before its view).
pub struct Predictor {
    hook: Arc<PredictHook>,
    /// The pool's id of this job (`None` once removed).
    job: Option<u64>,
}

impl std::fmt::Debug for Predictor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Predictor")
            .field("hook", &self.hook)
            .field("job", &self.job)
            .finish()
    }
}

impl Predictor {
    /// Have the pool's workers serve `hook` for `view` (spawning workers the first time, up to
    /// the configured number). `source` fills pages for them: the view's own source *without*
    /// the hook (a worker's fill must not count as a fault).
    pub fn start(
        hook: Arc<PredictHook>,
        view: Arc<View>,
        source: Arc<dyn PageSource>,
    ) -> Result<Predictor> {
        let (job, handles) = pool::register(hook.clone(), view, source, hook.cfg.workers)?;
        // Only `start` sets it, once per hook.
        let _ = hook.workers.set(handles);
        // Requests queued before the handles were published get a worker now. Only then: a
        // wake-up at every attach cost a futex wake and a worker's trip round the job list per
        // short session (issue 16, fourth pass). The fence pairs with the one in `submit`.
        std::sync::atomic::fence(Ordering::SeqCst);
        if hook.ring.may_have_requests() {
            if let Some(workers) = hook.workers.get() {
                for t in workers.iter() {
                    t.unpark();
                }
            }
        }
        Ok(Predictor {
            hook,
            job: Some(job),
        })
    }

    /// Counters so far.
    pub fn stats(&self) -> PredictStats {
        self.hook.stats()
    }

    /// The configuration.
    pub fn config(&self) -> PredictConfig {
        self.hook.cfg
    }
}

impl Predictor {
    /// Stop serving this attachment, close every stream's window (as unused), and return the
    /// final counters: nothing changes them after this (what a detach should record).
    pub fn finish(mut self) -> PredictStats {
        self.stop();
        self.hook.stats()
    }

    fn stop(&mut self) {
        let Some(job) = self.job.take() else {
            return;
        };
        // Faults stop notifying, workers stop within a page; then the job leaves the pool (which
        // waits for a worker inside it to let go).
        self.hook.stop.store(true, Ordering::SeqCst);
        pool::unregister(job);
        // Before `close_all` empties the table (a second call finds it empty: no record).
        if let Some(uuid) = self.hook.history_of.get() {
            crate::predict_history::store(*uuid, self.hook.learned());
        }
        self.hook.close_all();
    }
}

impl Drop for Predictor {
    fn drop(&mut self) {
        // Idempotent: after `finish` the job is gone and no window is open.
        self.stop();
    }
}

/// Page `req.page + k * req.stride` if inside the view.
fn window_page(hook: &PredictHook, req: &Request, k: i64) -> Option<u64> {
    req.stride
        .checked_mul(k)
        .and_then(|off| (req.page as i64).checked_add(off))
        .filter(|&p| p >= 0 && (p as u64) < hook.pages)
        .map(|p| p as u64)
}

/// Decrypt each absent window page through the hook-less source and install it, skipping
/// pages present, in flight in a worker or being faulted in. The window is walked from its far
/// end back towards the fault: the application, faulting its way forward from the near end,
/// and the worker then fill disjoint halves and meet in the middle, instead of racing for the
/// same next page (walking forward, about half the pages were faulted by the application while
/// the worker was decrypting them: 1.42x at depth 8 on a sequential scan, 1.83x now).
fn install_pages(
    hook: &PredictHook,
    view: &View,
    source: &dyn PageSource,
    req: &Request,
    mine: &AtomicU64,
    buf: &mut [u8; PAGE_SIZE],
) {
    let c = &hook.counters;
    // Far end first (see above).
    for k in (1..=i64::from(req.pages.min(MAX_DEPTH * 2))).rev() {
        if hook.stop.load(Ordering::Relaxed) {
            break;
        }
        let Some(page) = window_page(hook, req, k) else {
            break;
        };
        if view.is_present(page) {
            bump(&c.skipped_present, 1);
            continue;
        }
        if hook.in_flight_at(page) || hook.faulting(page) {
            bump(&c.skipped_in_flight, 1);
            continue;
        }
        mine.store(page + 1, Ordering::Release);
        bump(&c.issued, 1);
        match source.fill(page, buf) {
            Ok(()) => match view.install(page, buf) {
                Ok(true) => bump(&c.installed, 1),
                Ok(false) => bump(&c.lost_race, 1),
                Err(_) => bump(&c.install_errors, 1),
            },
            // Never install a page that fails: the application's own touch reports it.
            Err(_) => bump(&c.fill_errors, 1),
        }
        mine.store(0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

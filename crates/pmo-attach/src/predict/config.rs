//! The predictor's limits, its configuration (`PredictConfig`, `PMO_PREDICT`) and its counters (`PredictStats`).

use std::time::Duration;

use pmo_meta::error::{Result, StoreError};

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
pub(crate) const ADAPTIVE_START_DEPTH: u32 = 2;
/// Adaptive mode: closed window pages per accuracy review.
pub(crate) const ADAPTIVE_REVIEW_PAGES: u64 = 256;
/// Adaptive mode: below this accuracy (percent) the depth cap halves (see [`Depth::Adaptive`]).
pub(crate) const ADAPTIVE_LOWER_BELOW_PERCENT: u64 = 30;
/// Adaptive mode: above this accuracy (percent) the depth cap doubles.
pub(crate) const ADAPTIVE_RAISE_ABOVE_PERCENT: u64 = 60;
/// How long an idle worker sleeps before it looks at the ring again (backstop for a lost
/// wake-up; the fault path normally unparks it).
pub(crate) const IDLE_PARK: Duration = Duration::from_millis(50);
/// Longest [`PredictConfig::idle_spin_us`].
pub const MAX_IDLE_SPIN_US: u32 = 10_000;
/// Slots of the table of pages the fault path is filling (a power of two).
pub(crate) const RECENT_FAULTS: u64 = 64;
/// Confidence at which a stream is confirmed (its stride seen twice in a row).
pub(crate) const CONFIRMED: u64 = 2;

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

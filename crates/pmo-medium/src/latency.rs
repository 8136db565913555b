//! Medium latency and bandwidth emulation: [`LatencyMedium`] wraps any [`Medium`] and makes each
//! access cost what it would cost on a slower medium (Optane DC PMM, CXL-attached memory, or
//! numbers given by hand), so the engine can be measured on this machine's DRAM as if its pool
//! lived on that medium. Sources of the built-in profiles and the measured accuracy of the
//! emulation are in `docs/latency.md`.
//!
//! Glossary:
//! - *profile* ([`LatencyProfile`]): the modelled medium: read latency (random and sequential),
//!   persist latency, read and write bandwidth, internal access unit.
//! - *access unit* (`unit_bytes`): the smallest block the medium moves internally (Optane's
//!   256-byte XPLine, CXL.mem's 64-byte line). A transfer is rounded out to whole units.
//! - *drain queue*: the medium's write-back queue. Flushed lines enter it and leave at the write
//!   bandwidth; a fence waits until it is empty, plus the persist latency.
//! - *emulated delay*: busy-waiting added by the wrapper, counted in [`LatencyStats`].
//!
//! The cost model (all in nanoseconds, `units(o, n)` = access units touched by `[o, o + n)`):
//! - `read(o, n)` costs `read_latency + units(o, n) * unit / read_bandwidth`; `read_latency` is
//!   the sequential one when `o` is where the previous read through this wrapper (from any
//!   thread) ended. In [`CostMode::Floor`] (Optane) the read takes at least that long from its
//!   start, and the real copy out of the backing memory runs inside that window, so it is not
//!   counted twice; in [`CostMode::Added`] (CXL) the cost is waited after the copy.
//! - `write` is a store into the CPU cache: no cost; counted only. A store reaches the medium when
//!   its lines are flushed.
//! - `flush(o, n)` puts `units(o, n) * unit / write_bandwidth` into the drain queue, which drains
//!   in the background (computation between a flush and its fence overlaps the drain). The queue
//!   holds at most [`DRAIN_QUEUE_BYTES`] worth of write-back; a flush that would overfill it
//!   busy-waits for room.
//! - `fence` waits until the drain queue is empty plus `write_latency` (the persist round trip of
//!   the last line), if that moment is still ahead. A fence with nothing flushed since the last
//!   one therefore costs nothing. There is one drain queue per wrapper, shared by its threads as
//!   a device's write queue is: a fence waits for every flush before it, from any thread.
//!
//! Invariants: the profile `dram` never reads the clock (its only cost is the counters); waits are
//! busy-waits on the clock, never sleeps; the drain-queue backlog never exceeds
//! [`DRAIN_QUEUE_BYTES`] of write-back time after a flush returns; the registry of live wrappers
//! for [`process_stats`] holds at most [`MAX_REGISTERED`] entries.
//!
//! Callers: [`crate::open_medium`] wraps the medium it opens when `PMO_LATENCY` is set; tests and
//! benchmarks build a [`LatencyMedium`] directly, with a [`ManualClock`] when they want exact,
//! deterministic costs.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Instant;

use crate::{Medium, MediumError, MediumKind, LINE};

/// Most write-back the drain queue holds, in bytes of medium traffic; a flush beyond it stalls.
/// 64 KiB is sixteen 4 KiB pages: enough for a page-sized psync batch to overlap computation,
/// small enough that a long stream of flushes is held to the write bandwidth.
pub const DRAIN_QUEUE_BYTES: u64 = 64 * 1024;

/// Most live wrappers [`process_stats`] tracks one by one; later ones are counted when dropped.
pub const MAX_REGISTERED: usize = 1024;

/// Upper bound on any latency in a profile (one second): a guard against typing errors.
const LATENCY_NS_MAX: u64 = 1_000_000_000;
/// Bounds on a bandwidth in GB/s (10^9 bytes per second).
const GBPS_MIN: f64 = 0.001;
const GBPS_MAX: f64 = 10_000.0;
/// Bounds on the access unit.
const UNIT_BYTES_MIN: u64 = LINE;
const UNIT_BYTES_MAX: u64 = 64 * 1024;

/// Errors of profile parsing and of the NUMA probe.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LatencyError {
    #[error(
        "unknown latency profile {0:?}: expected dram, optane, cxl-near, cxl-far or \
         custom:read_ns=..,write_ns=..,read_gbps=..,write_gbps=..,unit=.."
    )]
    UnknownProfile(String),
    #[error(
        "custom latency profile: unknown key {0:?} (keys: read_ns, read_seq_ns, write_ns, \
         read_gbps, write_gbps, unit, mode)"
    )]
    UnknownKey(String),
    #[error("custom latency profile: key {0:?} given twice")]
    DuplicateKey(String),
    #[error("custom latency profile: {0:?} is not key=value")]
    NotKeyValue(String),
    #[error("custom latency profile: {key}={value:?}: {reason}")]
    BadValue {
        key: String,
        value: String,
        reason: &'static str,
    },
    #[error("PMO_LATENCY is not valid UTF-8")]
    NotUnicode,
    #[error("reading the NUMA topology from {path}: {source}")]
    Numa {
        path: &'static str,
        source: std::io::Error,
    },
    #[error("malformed NUMA node list {0:?}")]
    NodeList(String),
}

impl From<LatencyError> for MediumError {
    fn from(e: LatencyError) -> MediumError {
        MediumError::Unsupported(format!("PMO_LATENCY: {e}"))
    }
}

/// A modelled medium. Bandwidths are in GB/s (10^9 bytes per second); `None` is unlimited.
#[derive(Clone, Debug, PartialEq)]
pub struct LatencyProfile {
    /// `dram`, `optane`, `cxl-near`, `cxl-far` or `custom`.
    pub name: String,
    /// Latency of a read that does not continue the previous one.
    pub read_ns: u64,
    /// Latency of a read that starts where the previous read ended.
    pub read_seq_ns: u64,
    /// Persist latency: from the last flushed line leaving the drain queue to the fence's return.
    pub write_ns: u64,
    pub read_gbps: Option<f64>,
    pub write_gbps: Option<f64>,
    /// Internal access unit in bytes, a power of two in 64..=65536.
    pub unit_bytes: u64,
    /// Whether the modelled cost replaces the backing memory's own time or adds to it.
    pub mode: CostMode,
}

/// How the modelled cost relates to the time the backing memory (this machine's DRAM) takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CostMode {
    /// The modelled cost is the access's whole time: the real copy and write-back run inside it
    /// (a medium slower than DRAM, as Optane is). Spelled `floor`.
    Floor,
    /// The modelled cost comes on top of the backing memory's own time (a link or switch in
    /// front of DRAM-speed memory, as CXL is). Spelled `added`.
    Added,
}

impl CostMode {
    pub fn name(self) -> &'static str {
        match self {
            CostMode::Floor => "floor",
            CostMode::Added => "added",
        }
    }
}

/// The names [`LatencyProfile::parse`] accepts besides `custom:...`, for `--help` texts and
/// benchmark matrices.
pub const NAMED_PROFILES: [&str; 4] = ["dram", "optane", "cxl-near", "cxl-far"];

impl LatencyProfile {
    /// No added cost: the wrapper only counts.
    pub fn dram() -> LatencyProfile {
        LatencyProfile {
            name: "dram".into(),
            read_ns: 0,
            read_seq_ns: 0,
            write_ns: 0,
            read_gbps: None,
            write_gbps: None,
            unit_bytes: LINE,
            mode: CostMode::Floor,
        }
    }

    /// One Intel Optane DC PMM (first generation, App Direct mode), after Izraelevitz et al. 2019
    /// and Yang et al. FAST'20: 305 ns random and 169 ns sequential read latency, 6.6 GB/s read
    /// and 2.3 GB/s write bandwidth per DIMM, 256-byte XPLine; persist latency about 90 ns (the
    /// write completes in the ADR domain of the memory controller). See `docs/latency.md`.
    pub fn optane() -> LatencyProfile {
        LatencyProfile {
            name: "optane".into(),
            read_ns: 305,
            read_seq_ns: 169,
            write_ns: 90,
            read_gbps: Some(6.6),
            write_gbps: Some(2.3),
            unit_bytes: 256,
            mode: CostMode::Floor,
        }
    }

    /// CXL-attached memory at the low end of "170ns to 400ns" (Hadi et al., "The Case for
    /// Persistent CXL Switches", abstract and Sec. I): 170 ns added to every read and persist
    /// ([`CostMode::Added`]), 64-byte CXL.mem lines, a 30 GB/s link (their Table I).
    pub fn cxl_near() -> LatencyProfile {
        Self::cxl("cxl-near", 170)
    }

    /// CXL-attached memory at the high end of the same range: 400 ns.
    pub fn cxl_far() -> LatencyProfile {
        Self::cxl("cxl-far", 400)
    }

    fn cxl(name: &str, latency_ns: u64) -> LatencyProfile {
        LatencyProfile {
            name: name.into(),
            read_ns: latency_ns,
            read_seq_ns: latency_ns,
            write_ns: latency_ns,
            read_gbps: Some(30.0),
            write_gbps: Some(30.0),
            unit_bytes: LINE,
            mode: CostMode::Added,
        }
    }

    /// Parse `dram`, `optane`, `cxl-near`, `cxl-far` or
    /// `custom:read_ns=N,read_seq_ns=N,write_ns=N,read_gbps=X,write_gbps=X,unit=N,mode=floor|added`.
    ///
    /// In `custom`, every key is optional and given at most once: latencies default to 0,
    /// `read_seq_ns` to `read_ns`, bandwidths to unlimited, `unit` to 64, `mode` to `floor`.
    pub fn parse(spec: &str) -> Result<LatencyProfile, LatencyError> {
        let spec = spec.trim();
        match spec {
            "dram" => return Ok(Self::dram()),
            "optane" => return Ok(Self::optane()),
            "cxl-near" => return Ok(Self::cxl_near()),
            "cxl-far" => return Ok(Self::cxl_far()),
            _ => {}
        }
        let Some(fields) = spec.strip_prefix("custom:") else {
            return Err(LatencyError::UnknownProfile(spec.to_string()));
        };
        let mut p = LatencyProfile {
            name: "custom".into(),
            ..Self::dram()
        };
        let mut seen: Vec<&str> = Vec::new();
        let mut read_seq_ns = None;
        for field in fields.split(',').map(str::trim).filter(|f| !f.is_empty()) {
            let (key, value) = field
                .split_once('=')
                .ok_or_else(|| LatencyError::NotKeyValue(field.to_string()))?;
            let (key, value) = (key.trim(), value.trim());
            if seen.contains(&key) {
                return Err(LatencyError::DuplicateKey(key.to_string()));
            }
            match key {
                "read_ns" => p.read_ns = parse_ns(key, value)?,
                "read_seq_ns" => read_seq_ns = Some(parse_ns(key, value)?),
                "write_ns" => p.write_ns = parse_ns(key, value)?,
                "read_gbps" => p.read_gbps = Some(parse_gbps(key, value)?),
                "write_gbps" => p.write_gbps = Some(parse_gbps(key, value)?),
                "unit" => p.unit_bytes = parse_unit(key, value)?,
                "mode" => {
                    p.mode = match value {
                        "floor" => CostMode::Floor,
                        "added" => CostMode::Added,
                        _ => {
                            return Err(LatencyError::BadValue {
                                key: key.to_string(),
                                value: value.to_string(),
                                reason: "not floor or added",
                            })
                        }
                    }
                }
                _ => return Err(LatencyError::UnknownKey(key.to_string())),
            }
            seen.push(key);
        }
        p.read_seq_ns = read_seq_ns.unwrap_or(p.read_ns);
        Ok(p)
    }

    /// The profile named by `PMO_LATENCY`, or `None` when it is unset or blank. A value that does
    /// not parse is an error, never a silent fallback.
    pub fn from_env() -> Result<Option<LatencyProfile>, LatencyError> {
        match std::env::var("PMO_LATENCY") {
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => Err(LatencyError::NotUnicode),
            Ok(s) if s.trim().is_empty() => Ok(None),
            Ok(s) => Self::parse(&s).map(Some),
        }
    }

    /// A spec that [`LatencyProfile::parse`] turns back into this profile (for reports).
    pub fn spec(&self) -> String {
        match Self::parse(&self.name) {
            Ok(named) if named == *self => self.name.clone(),
            _ => {
                let mut s = format!(
                    "custom:read_ns={},read_seq_ns={},write_ns={}",
                    self.read_ns, self.read_seq_ns, self.write_ns
                );
                if let Some(g) = self.read_gbps {
                    s += &format!(",read_gbps={g}");
                }
                if let Some(g) = self.write_gbps {
                    s += &format!(",write_gbps={g}");
                }
                s += &format!(",unit={},mode={}", self.unit_bytes, self.mode.name());
                s
            }
        }
    }

    /// True if the profile adds no cost at all (the wrapper then never reads the clock).
    pub fn is_free(&self) -> bool {
        self.read_ns == 0
            && self.read_seq_ns == 0
            && self.write_ns == 0
            && self.read_gbps.is_none()
            && self.write_gbps.is_none()
    }

    /// Bytes the medium moves for an access to `[offset, offset + len)`: whole access units.
    pub fn unit_span_bytes(&self, offset: u64, len: u64) -> u64 {
        unit_span(offset, len, self.unit_bytes)
    }

    /// Modelled time of `read(offset, len)`; `sequential` when it starts where the last read ended.
    pub fn read_cost_ns(&self, offset: u64, len: u64, sequential: bool) -> u64 {
        if len == 0 {
            return 0;
        }
        let latency = if sequential {
            self.read_seq_ns
        } else {
            self.read_ns
        };
        latency.saturating_add(transfer_ns(
            self.unit_span_bytes(offset, len),
            fs_per_byte(self.read_gbps),
        ))
    }

    /// Drain-queue time of `flush(offset, len)` (the persist latency is paid by the fence).
    pub fn flush_cost_ns(&self, offset: u64, len: u64) -> u64 {
        transfer_ns(
            self.unit_span_bytes(offset, len),
            fs_per_byte(self.write_gbps),
        )
    }
}

fn parse_ns(key: &str, value: &str) -> Result<u64, LatencyError> {
    let bad = |reason| LatencyError::BadValue {
        key: key.to_string(),
        value: value.to_string(),
        reason,
    };
    let ns: u64 = value
        .parse()
        .map_err(|_| bad("not a whole number of nanoseconds"))?;
    if ns > LATENCY_NS_MAX {
        return Err(bad("more than one second"));
    }
    Ok(ns)
}

fn parse_gbps(key: &str, value: &str) -> Result<f64, LatencyError> {
    let bad = |reason| LatencyError::BadValue {
        key: key.to_string(),
        value: value.to_string(),
        reason,
    };
    let gbps: f64 = value.parse().map_err(|_| bad("not a number of GB/s"))?;
    if !gbps.is_finite() || !(GBPS_MIN..=GBPS_MAX).contains(&gbps) {
        return Err(bad("outside 0.001..=10000 GB/s"));
    }
    Ok(gbps)
}

fn parse_unit(key: &str, value: &str) -> Result<u64, LatencyError> {
    let bad = |reason| LatencyError::BadValue {
        key: key.to_string(),
        value: value.to_string(),
        reason,
    };
    let unit: u64 = value
        .parse()
        .map_err(|_| bad("not a whole number of bytes"))?;
    if !unit.is_power_of_two() || !(UNIT_BYTES_MIN..=UNIT_BYTES_MAX).contains(&unit) {
        return Err(bad("not a power of two in 64..=65536"));
    }
    Ok(unit)
}

/// Bytes of the whole units of `unit` bytes that `[offset, offset + len)` touches.
fn unit_span(offset: u64, len: u64, unit: u64) -> u64 {
    if len == 0 {
        return 0;
    }
    let first = offset / unit;
    let last = offset.saturating_add(len - 1) / unit;
    (last - first + 1).saturating_mul(unit)
}

/// Femtoseconds per byte at `gbps` (0 when unlimited): integer arithmetic on the hot path.
fn fs_per_byte(gbps: Option<f64>) -> u64 {
    // 1 GB/s = 1 byte/ns = 10^6 fs per byte.
    gbps.map_or(0, |g| (1e6 / g).round() as u64)
}

fn transfer_ns(bytes: u64, fs_per_byte: u64) -> u64 {
    let fs = bytes as u128 * fs_per_byte as u128;
    u64::try_from(fs.div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

// ---------------------------------------------------------------------------------------------
// Clocks

/// A nanosecond clock the wrapper measures and waits on.
///
/// Contract: `now_ns` never goes backwards; `wait_until_ns(t)` returns only once `now_ns() >= t`
/// and never sleeps (the delays are hundreds of nanoseconds, far below a scheduler tick).
pub trait Clock: Send + Sync {
    fn now_ns(&self) -> u64;
    /// Like `now_ns`, but read only once every earlier instruction has completed, its loads
    /// included (a plain TSC read may run ahead of a load that misses the cache).
    fn now_ns_ordered(&self) -> u64 {
        self.now_ns()
    }
    fn wait_until_ns(&self, deadline_ns: u64);
}

/// The real clock: the CPU's time-stamp counter, calibrated once per process against
/// [`Instant`], where the CPU says the counter is invariant (`constant_tsc` and `nonstop_tsc`);
/// otherwise [`Instant`] itself. Busy-waits with a spin-loop hint.
#[derive(Clone, Copy, Debug)]
pub struct SpinClock {
    calibration: &'static Calibration,
}

#[derive(Debug)]
struct Calibration {
    origin: Instant,
    /// `Some((origin_ticks, ns_per_tick))` when the TSC is used.
    tsc: Option<(u64, f64)>,
    /// The CPU has `rdtscp` (otherwise an ordered read is `lfence; rdtsc`).
    rdtscp: bool,
}

impl SpinClock {
    /// The process's clock; the first call calibrates the TSC (about 10 ms of spinning).
    pub fn new() -> SpinClock {
        static CALIBRATION: OnceLock<Calibration> = OnceLock::new();
        SpinClock {
            calibration: CALIBRATION.get_or_init(calibrate),
        }
    }

    /// Nanoseconds per TSC tick, or `None` when the clock runs on [`Instant`].
    pub fn ns_per_tick(&self) -> Option<f64> {
        self.calibration.tsc.map(|(_, r)| r)
    }
}

impl Default for SpinClock {
    fn default() -> Self {
        Self::new()
    }
}

const CALIBRATION_NS: u128 = 10_000_000;

fn calibrate() -> Calibration {
    let origin = Instant::now();
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let flags: Vec<&str> = cpuinfo
        .lines()
        .find(|l| l.starts_with("flags"))
        .map(|l| l.split_whitespace().collect())
        .unwrap_or_default();
    let invariant = flags.contains(&"constant_tsc") && flags.contains(&"nonstop_tsc");
    let rdtscp = flags.contains(&"rdtscp");
    let tsc = match (invariant, tsc::read()) {
        (true, Some(t0)) => {
            let start = Instant::now();
            while start.elapsed().as_nanos() < CALIBRATION_NS {
                std::hint::spin_loop();
            }
            let elapsed_ns = start.elapsed().as_nanos() as f64;
            let t1 = tsc::read().unwrap_or(t0);
            (t1 > t0).then(|| (t0, elapsed_ns / (t1 - t0) as f64))
        }
        _ => None,
    };
    Calibration {
        origin,
        tsc,
        rdtscp,
    }
}

impl Clock for SpinClock {
    fn now_ns_ordered(&self) -> u64 {
        let ticks = self
            .calibration
            .tsc
            .and_then(|tsc| tsc::read_ordered(self.calibration.rdtscp).map(|t| (tsc, t)));
        match ticks {
            Some(((origin, ns_per_tick), t)) => {
                (t.saturating_sub(origin) as f64 * ns_per_tick) as u64
            }
            None => self.calibration.origin.elapsed().as_nanos() as u64,
        }
    }

    fn now_ns(&self) -> u64 {
        let ticks = self
            .calibration
            .tsc
            .and_then(|tsc| tsc::read().map(|t| (tsc, t)));
        match ticks {
            Some(((origin, ns_per_tick), t)) => {
                (t.saturating_sub(origin) as f64 * ns_per_tick) as u64
            }
            None => self.calibration.origin.elapsed().as_nanos() as u64,
        }
    }

    fn wait_until_ns(&self, deadline_ns: u64) {
        match self.calibration.tsc {
            Some((origin, ns_per_tick)) => {
                let deadline_ticks =
                    origin.saturating_add((deadline_ns as f64 / ns_per_tick).ceil() as u64);
                while tsc::read().is_some_and(|t| t < deadline_ticks) {
                    std::hint::spin_loop();
                }
            }
            None => {
                while (self.calibration.origin.elapsed().as_nanos() as u64) < deadline_ns {
                    std::hint::spin_loop();
                }
            }
        }
    }
}

#[allow(unsafe_code)]
mod tsc {
    //! Reading the time-stamp counter. `_rdtsc` is an `unsafe fn` in `core::arch` although it has
    //! no memory-safety precondition, so this module is the one place that allows `unsafe`.

    /// The TSC, or `None` where there is none (not x86-64).
    #[cfg(target_arch = "x86_64")]
    #[inline]
    pub(super) fn read() -> Option<u64> {
        // SAFETY: RDTSC reads a counter register, touches no memory and exists on every x86-64 CPU.
        Some(unsafe { core::arch::x86_64::_rdtsc() })
    }

    /// The TSC read after every earlier instruction has completed: `rdtscp` where the CPU has
    /// it (`has_rdtscp`, from `/proc/cpuinfo`), otherwise `lfence; rdtsc`.
    #[cfg(target_arch = "x86_64")]
    #[inline]
    pub(super) fn read_ordered(has_rdtscp: bool) -> Option<u64> {
        if has_rdtscp {
            let mut aux = 0u32;
            // SAFETY: the caller checked that the CPU has RDTSCP; it reads the counter and
            // IA32_TSC_AUX into `aux`, a live local, and touches no other memory.
            Some(unsafe { core::arch::x86_64::__rdtscp(&mut aux) })
        } else {
            // SAFETY: LFENCE (SSE2, part of x86-64) and RDTSC only order execution and read a
            // counter register; neither touches memory.
            Some(unsafe {
                core::arch::x86_64::_mm_lfence();
                core::arch::x86_64::_rdtsc()
            })
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    #[inline]
    pub(super) fn read() -> Option<u64> {
        None
    }

    #[cfg(not(target_arch = "x86_64"))]
    #[inline]
    pub(super) fn read_ordered(_has_rdtscp: bool) -> Option<u64> {
        None
    }
}

/// A clock that moves only when told to or waited on, for exact and deterministic tests: a wait
/// jumps the time to its deadline. The total it jumped by waiting is [`ManualClock::waited_ns`].
#[derive(Debug, Default)]
pub struct ManualClock {
    now_ns: AtomicU64,
    waited_ns: AtomicU64,
}

impl ManualClock {
    pub fn new() -> ManualClock {
        ManualClock::default()
    }
    /// Let `ns` pass (computation between accesses).
    pub fn advance(&self, ns: u64) {
        self.now_ns.fetch_add(ns, Ordering::SeqCst);
    }
    /// Total time the wrapper spent waiting on this clock.
    pub fn waited_ns(&self) -> u64 {
        self.waited_ns.load(Ordering::SeqCst)
    }
}

impl Clock for ManualClock {
    fn now_ns(&self) -> u64 {
        self.now_ns.load(Ordering::SeqCst)
    }
    fn wait_until_ns(&self, deadline_ns: u64) {
        let before = self.now_ns.fetch_max(deadline_ns, Ordering::SeqCst);
        self.waited_ns
            .fetch_add(deadline_ns.saturating_sub(before), Ordering::SeqCst);
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now_ns(&self) -> u64 {
        (**self).now_ns()
    }
    fn now_ns_ordered(&self) -> u64 {
        (**self).now_ns_ordered()
    }
    fn wait_until_ns(&self, deadline_ns: u64) {
        (**self).wait_until_ns(deadline_ns)
    }
}

// ---------------------------------------------------------------------------------------------
// Counters

/// Live counters of one wrapper (relaxed atomics; a snapshot is not one instant across fields).
#[derive(Debug, Default)]
pub struct LatencyCounters {
    reads: AtomicU64,
    read_bytes: AtomicU64,
    writes: AtomicU64,
    write_bytes: AtomicU64,
    flushes: AtomicU64,
    flush_bytes: AtomicU64,
    fences: AtomicU64,
    read_delay_ns: AtomicU64,
    flush_delay_ns: AtomicU64,
    fence_delay_ns: AtomicU64,
    /// Set once the wrapper was dropped and its counts moved into the retired totals.
    retired: AtomicBool,
}

/// A copy of the counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LatencyStats {
    pub reads: u64,
    pub read_bytes: u64,
    pub writes: u64,
    pub write_bytes: u64,
    pub flushes: u64,
    /// Bytes of the flushed ranges as asked (not rounded to units).
    pub flush_bytes: u64,
    pub fences: u64,
    /// Time reads waited beyond their own copy out of the backing medium (the copy runs inside
    /// the modelled time, so this is the modelled time less the copy's).
    pub read_delay_ns: u64,
    /// Time flushes waited for room in the drain queue.
    pub flush_delay_ns: u64,
    /// Time fences waited for the drain queue and the persist latency.
    pub fence_delay_ns: u64,
}

impl LatencyStats {
    /// All emulated delay.
    pub fn emulated_ns(&self) -> u64 {
        self.read_delay_ns + self.flush_delay_ns + self.fence_delay_ns
    }

    /// What happened between `earlier` and `self` (field-wise difference, never negative).
    pub fn since(&self, earlier: &LatencyStats) -> LatencyStats {
        LatencyStats {
            reads: self.reads.saturating_sub(earlier.reads),
            read_bytes: self.read_bytes.saturating_sub(earlier.read_bytes),
            writes: self.writes.saturating_sub(earlier.writes),
            write_bytes: self.write_bytes.saturating_sub(earlier.write_bytes),
            flushes: self.flushes.saturating_sub(earlier.flushes),
            flush_bytes: self.flush_bytes.saturating_sub(earlier.flush_bytes),
            fences: self.fences.saturating_sub(earlier.fences),
            read_delay_ns: self.read_delay_ns.saturating_sub(earlier.read_delay_ns),
            flush_delay_ns: self.flush_delay_ns.saturating_sub(earlier.flush_delay_ns),
            fence_delay_ns: self.fence_delay_ns.saturating_sub(earlier.fence_delay_ns),
        }
    }

    fn plus(&self, o: &LatencyStats) -> LatencyStats {
        LatencyStats {
            reads: self.reads + o.reads,
            read_bytes: self.read_bytes + o.read_bytes,
            writes: self.writes + o.writes,
            write_bytes: self.write_bytes + o.write_bytes,
            flushes: self.flushes + o.flushes,
            flush_bytes: self.flush_bytes + o.flush_bytes,
            fences: self.fences + o.fences,
            read_delay_ns: self.read_delay_ns + o.read_delay_ns,
            flush_delay_ns: self.flush_delay_ns + o.flush_delay_ns,
            fence_delay_ns: self.fence_delay_ns + o.fence_delay_ns,
        }
    }
}

impl std::fmt::Display for LatencyStats {
    /// One line for reports: operations, bytes and the emulated delay in microseconds.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "reads {} ({} B), writes {} ({} B), flushes {} ({} B), fences {}, emulated {:.1} us \
             (reads {:.1}, flush stalls {:.1}, fences {:.1})",
            self.reads,
            self.read_bytes,
            self.writes,
            self.write_bytes,
            self.flushes,
            self.flush_bytes,
            self.fences,
            self.emulated_ns() as f64 / 1e3,
            self.read_delay_ns as f64 / 1e3,
            self.flush_delay_ns as f64 / 1e3,
            self.fence_delay_ns as f64 / 1e3,
        )
    }
}

impl LatencyCounters {
    const fn zero() -> LatencyCounters {
        LatencyCounters {
            reads: AtomicU64::new(0),
            read_bytes: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            write_bytes: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
            flush_bytes: AtomicU64::new(0),
            fences: AtomicU64::new(0),
            read_delay_ns: AtomicU64::new(0),
            flush_delay_ns: AtomicU64::new(0),
            fence_delay_ns: AtomicU64::new(0),
            retired: AtomicBool::new(false),
        }
    }

    /// The counts so far.
    pub fn snapshot(&self) -> LatencyStats {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        LatencyStats {
            reads: r(&self.reads),
            read_bytes: r(&self.read_bytes),
            writes: r(&self.writes),
            write_bytes: r(&self.write_bytes),
            flushes: r(&self.flushes),
            flush_bytes: r(&self.flush_bytes),
            fences: r(&self.fences),
            read_delay_ns: r(&self.read_delay_ns),
            flush_delay_ns: r(&self.flush_delay_ns),
            fence_delay_ns: r(&self.fence_delay_ns),
        }
    }

    fn add(&self, s: &LatencyStats) {
        let a = |c: &AtomicU64, v: u64| {
            c.fetch_add(v, Ordering::Relaxed);
        };
        a(&self.reads, s.reads);
        a(&self.read_bytes, s.read_bytes);
        a(&self.writes, s.writes);
        a(&self.write_bytes, s.write_bytes);
        a(&self.flushes, s.flushes);
        a(&self.flush_bytes, s.flush_bytes);
        a(&self.fences, s.fences);
        a(&self.read_delay_ns, s.read_delay_ns);
        a(&self.flush_delay_ns, s.flush_delay_ns);
        a(&self.fence_delay_ns, s.fence_delay_ns);
    }
}

/// Wrappers alive now (bounded by [`MAX_REGISTERED`]) and the totals of those dropped.
static REGISTRY: Mutex<Vec<Weak<LatencyCounters>>> = Mutex::new(Vec::new());
static RETIRED: LatencyCounters = LatencyCounters::zero();

fn registry() -> std::sync::MutexGuard<'static, Vec<Weak<LatencyCounters>>> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// Totals over every [`LatencyMedium`] of this process, alive or dropped: what the
/// instrumentation reports per run (take two snapshots and [`LatencyStats::since`]). A wrapper
/// created while [`MAX_REGISTERED`] others are alive is counted only once it is dropped.
pub fn process_stats() -> LatencyStats {
    let reg = registry();
    let mut total = RETIRED.snapshot();
    for c in reg.iter().filter_map(Weak::upgrade) {
        if !c.retired.load(Ordering::Relaxed) {
            total = total.plus(&c.snapshot());
        }
    }
    total
}

fn register(counters: &Arc<LatencyCounters>) {
    let mut reg = registry();
    reg.retain(|w| {
        w.upgrade()
            .is_some_and(|c| !c.retired.load(Ordering::Relaxed))
    });
    if reg.len() < MAX_REGISTERED {
        reg.push(Arc::downgrade(counters));
    }
}

// ---------------------------------------------------------------------------------------------
// The wrapper

/// A medium with emulated latency and bandwidth (see the module documentation for the model).
pub struct LatencyMedium<M: Medium + ?Sized, C: Clock = SpinClock> {
    inner: Arc<M>,
    profile: LatencyProfile,
    clock: C,
    free: bool,
    /// Drain-queue bound as time at the write bandwidth.
    queue_ns_max: u64,
    /// Clock time at which the drain queue is empty.
    drain_until_ns: AtomicU64,
    /// Offset just past the last read, for sequential detection (`u64::MAX`: none yet).
    last_read_end: AtomicU64,
    counters: Arc<LatencyCounters>,
}

impl<M: Medium + ?Sized> LatencyMedium<M, SpinClock> {
    /// Wrap `inner` with `profile` on the real clock.
    pub fn new(inner: Arc<M>, profile: LatencyProfile) -> Self {
        let clock = if profile.is_free() {
            // Not used by a free profile; skip the calibration's 10 ms when nothing else needs it.
            SpinClock::uncalibrated()
        } else {
            SpinClock::new()
        };
        Self::with_clock(inner, profile, clock)
    }
}

impl SpinClock {
    fn uncalibrated() -> SpinClock {
        static NONE: OnceLock<Calibration> = OnceLock::new();
        SpinClock {
            calibration: NONE.get_or_init(|| Calibration {
                origin: Instant::now(),
                tsc: None,
                rdtscp: false,
            }),
        }
    }
}

impl<M: Medium + ?Sized, C: Clock> LatencyMedium<M, C> {
    /// Wrap `inner` with `profile`, measuring and waiting on `clock`.
    pub fn with_clock(inner: Arc<M>, profile: LatencyProfile, clock: C) -> Self {
        let counters = Arc::new(LatencyCounters::zero());
        register(&counters);
        LatencyMedium {
            inner,
            free: profile.is_free(),
            queue_ns_max: transfer_ns(DRAIN_QUEUE_BYTES, fs_per_byte(profile.write_gbps)),
            profile,
            clock,
            drain_until_ns: AtomicU64::new(0),
            last_read_end: AtomicU64::new(u64::MAX),
            counters,
        }
    }

    /// The modelled medium.
    pub fn profile(&self) -> &LatencyProfile {
        &self.profile
    }

    /// The wrapped medium.
    pub fn inner(&self) -> &Arc<M> {
        &self.inner
    }

    /// The counts so far.
    pub fn stats(&self) -> LatencyStats {
        self.counters.snapshot()
    }

    /// A handle on the live counters that outlives a move of the wrapper into an `Arc<dyn Medium>`.
    pub fn counters(&self) -> Arc<LatencyCounters> {
        Arc::clone(&self.counters)
    }

    fn count_read(&self, len: u64) {
        self.counters.reads.fetch_add(1, Ordering::Relaxed);
        self.counters.read_bytes.fetch_add(len, Ordering::Relaxed);
    }

    fn count_flush(&self, len: u64) {
        self.counters.flushes.fetch_add(1, Ordering::Relaxed);
        self.counters.flush_bytes.fetch_add(len, Ordering::Relaxed);
    }
}

impl<M: Medium + ?Sized, C: Clock> Drop for LatencyMedium<M, C> {
    fn drop(&mut self) {
        // Under the registry lock, so `process_stats` sees the counts exactly once.
        let _reg = registry();
        RETIRED.add(&self.counters.snapshot());
        self.counters.retired.store(true, Ordering::Relaxed);
    }
}

impl<M: Medium + ?Sized, C: Clock> Medium for LatencyMedium<M, C> {
    fn len(&self) -> u64 {
        self.inner.len()
    }

    // Each call updates its counters before it waits, so their cost (locked instructions) hides
    // inside the emulated delay instead of adding to it.

    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), MediumError> {
        let len = buf.len() as u64;
        if self.free || len == 0 {
            self.inner.read(offset, buf)?;
            self.count_read(len);
            return Ok(());
        }
        let start_ns = self.clock.now_ns();
        self.inner.read(offset, buf)?;
        let end = offset.saturating_add(len);
        let sequential = self.last_read_end.swap(end, Ordering::Relaxed) == offset;
        self.count_read(len);
        // In `Added` mode the wait starts once the copy's loads are done, not when the CPU has
        // merely issued them.
        let (from_ns, copied_ns) = match self.profile.mode {
            CostMode::Floor => (start_ns, self.clock.now_ns()),
            CostMode::Added => {
                let t = self.clock.now_ns_ordered();
                (t, t)
            }
        };
        let deadline_ns =
            from_ns.saturating_add(self.profile.read_cost_ns(offset, len, sequential));
        if deadline_ns > copied_ns {
            self.counters
                .read_delay_ns
                .fetch_add(deadline_ns - copied_ns, Ordering::Relaxed);
            self.clock.wait_until_ns(deadline_ns);
        }
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), MediumError> {
        self.inner.write(offset, data)?;
        self.counters.writes.fetch_add(1, Ordering::Relaxed);
        self.counters
            .write_bytes
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    fn flush(&self, offset: u64, len: u64) -> Result<(), MediumError> {
        if self.free || len == 0 {
            self.inner.flush(offset, len)?;
            self.count_flush(len);
            return Ok(());
        }
        // In `Floor` mode the backing medium's own write-back (clwb to DRAM) runs inside the
        // modelled drain; in `Added` mode the drain starts after it.
        let mut now_ns = self.clock.now_ns();
        self.inner.flush(offset, len)?;
        self.count_flush(len);
        if self.profile.mode == CostMode::Added {
            // Wait for the write-back itself to finish (`sfence` would not), then start.
            std::sync::atomic::fence(Ordering::SeqCst);
            now_ns = self.clock.now_ns_ordered();
        }
        let cost_ns = self.profile.flush_cost_ns(offset, len);
        let previous = self
            .drain_until_ns
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |until| {
                Some(until.max(now_ns).saturating_add(cost_ns))
            })
            .unwrap_or_else(|v| v);
        let drain_until = previous.max(now_ns).saturating_add(cost_ns);
        // Bounded queue: wait until what is left fits in it.
        let room_at = drain_until.saturating_sub(self.queue_ns_max);
        if room_at > now_ns {
            let flushed_ns = self.clock.now_ns();
            if room_at > flushed_ns {
                self.counters
                    .flush_delay_ns
                    .fetch_add(room_at - flushed_ns, Ordering::Relaxed);
                self.clock.wait_until_ns(room_at);
            }
        }
        Ok(())
    }

    fn fence(&self) -> Result<(), MediumError> {
        self.inner.fence()?;
        self.counters.fences.fetch_add(1, Ordering::Relaxed);
        if self.free {
            return Ok(());
        }
        let now_ns = self.clock.now_ns();
        // The last flushed line left the queue at `drain_until_ns`; its persist acknowledgement
        // comes `write_ns` later. Both may lie in the past already.
        let done_ns = self
            .drain_until_ns
            .load(Ordering::Acquire)
            .saturating_add(self.profile.write_ns);
        if done_ns > now_ns {
            self.counters
                .fence_delay_ns
                .fetch_add(done_ns - now_ns, Ordering::Relaxed);
            self.clock.wait_until_ns(done_ns);
        }
        Ok(())
    }

    fn kind(&self) -> MediumKind {
        self.inner.kind()
    }

    fn path(&self) -> Option<&Path> {
        self.inner.path()
    }
    fn file(&self) -> Option<&std::fs::File> {
        self.inner.file()
    }
}

/// Wrap `medium` in a [`LatencyMedium`] on the real clock when `profile` is given.
pub fn wrap(medium: Arc<dyn Medium>, profile: Option<LatencyProfile>) -> Arc<dyn Medium> {
    match profile {
        Some(p) => Arc::new(LatencyMedium::new(medium, p)),
        None => medium,
    }
}

// ---------------------------------------------------------------------------------------------
// NUMA

const NODE_ONLINE_PATH: &str = "/sys/devices/system/node/online";

/// Number of online NUMA nodes of this machine (`/sys/devices/system/node/online`). A machine
/// without that file (a kernel built without NUMA) has one node.
pub fn numa_node_count() -> Result<usize, LatencyError> {
    match std::fs::read_to_string(NODE_ONLINE_PATH) {
        Ok(s) => parse_node_list(&s),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(1),
        Err(source) => Err(LatencyError::Numa {
            path: NODE_ONLINE_PATH,
            source,
        }),
    }
}

/// Count the nodes of a kernel node list such as `0`, `0-1` or `0,2-3`.
pub fn parse_node_list(list: &str) -> Result<usize, LatencyError> {
    let bad = || LatencyError::NodeList(list.trim().to_string());
    let mut count = 0usize;
    for part in list.trim().split(',') {
        let (lo, hi) = match part.split_once('-') {
            Some((lo, hi)) => (lo, hi),
            None => (part, part),
        };
        let lo: usize = lo.trim().parse().map_err(|_| bad())?;
        let hi: usize = hi.trim().parse().map_err(|_| bad())?;
        if hi < lo {
            return Err(bad());
        }
        count = count.checked_add(hi - lo + 1).ok_or_else(bad)?;
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_span_rounds_out_to_whole_units() {
        assert_eq!(unit_span(0, 0, 256), 0);
        assert_eq!(unit_span(0, 1, 256), 256);
        assert_eq!(unit_span(0, 256, 256), 256);
        assert_eq!(unit_span(255, 2, 256), 512);
        assert_eq!(unit_span(100, 4096, 256), 17 * 256);
        assert_eq!(unit_span(u64::MAX - 10, 100, 64), 64);
    }

    #[test]
    fn transfer_time_is_bytes_over_bandwidth() {
        assert_eq!(transfer_ns(4096, fs_per_byte(None)), 0);
        // 1 GB/s: one byte per nanosecond.
        assert_eq!(transfer_ns(4096, fs_per_byte(Some(1.0))), 4096);
        // 2.3 GB/s: 256 B in 111.3 ns, rounded up.
        assert_eq!(transfer_ns(256, fs_per_byte(Some(2.3))), 112);
    }

    #[test]
    fn node_lists() {
        assert_eq!(parse_node_list("0\n").unwrap(), 1);
        assert_eq!(parse_node_list("0-1").unwrap(), 2);
        assert_eq!(parse_node_list("0,2-3").unwrap(), 3);
        assert!(parse_node_list("").is_err());
        assert!(parse_node_list("3-1").is_err());
        assert!(parse_node_list("a").is_err());
        assert!(numa_node_count().unwrap() >= 1);
    }

    #[test]
    fn spin_clock_waits_at_least_the_deadline() {
        let clock = SpinClock::new();
        let start = clock.now_ns();
        let wall = Instant::now();
        clock.wait_until_ns(start + 200_000);
        assert!(clock.now_ns() >= start + 200_000);
        // The TSC calibration agrees with the monotonic clock (5% slack for rounding).
        let wall_ns = wall.elapsed().as_nanos() as u64;
        assert!(
            wall_ns >= 190_000,
            "waited {wall_ns} ns of wall time for 200 us"
        );
    }
}

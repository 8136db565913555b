//! Parameters of the simulated system and their defaults.
//!
//! Owns [`Params`] (every number the model uses), [`Scheme`] (`nopb`, `pb`, `pb-rf`) and
//! [`Fault`] (deliberately broken persist-buffer variants used to prove the checker works).
//! Defaults are the paper's Table I where it gives a figure; every other default is ours and is
//! listed with its source in `docs/cxlsim.md`. Invariant: a `Params` that passed
//! [`Params::validate`] never makes the simulator divide by zero or size a table at zero.

use crate::error::{CxlsimError, Result};

/// Cache-line size in bytes. Fixed: the persist buffer's data entry is one line (paper §V-A).
pub const LINE_BYTES: u64 = 64;
/// Bytes of data in one persist-buffer entry (paper §V-A, Fig. 3c).
pub const PB_DATA_BYTES: usize = 64;
/// Bytes of header (CXL generic slot) kept per entry to rebuild the drain packet (paper §IV-B).
pub const PB_HEADER_BYTES: usize = 16;
/// Bits of the per-entry LRU counter (paper §V-A: 2-bit state + 4-bit counter).
pub const PB_LRU_BITS: u32 = 4;

/// Where persists complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scheme {
    /// Volatile switch: every persist travels to PM and back (the paper's NoPB).
    NoPb,
    /// Persist buffer in the first switch; acknowledged there, drained at once (PB).
    Pb,
    /// Persist buffer keeping entries Dirty for read forwarding and write coalescing, drained
    /// from the high watermark down to the low one (PB_RF).
    PbRf,
}

impl Scheme {
    /// All schemes in study order.
    pub const ALL: [Scheme; 3] = [Scheme::NoPb, Scheme::Pb, Scheme::PbRf];

    /// Command-line spelling.
    pub fn name(self) -> &'static str {
        match self {
            Scheme::NoPb => "nopb",
            Scheme::Pb => "pb",
            Scheme::PbRf => "pb-rf",
        }
    }

    /// Parse the command-line spelling.
    pub fn parse(text: &str) -> Result<Scheme> {
        match text {
            "nopb" => Ok(Scheme::NoPb),
            "pb" => Ok(Scheme::Pb),
            "pb-rf" | "pbrf" => Ok(Scheme::PbRf),
            other => Err(CxlsimError::param(
                "scheme",
                format!("{other:?} is not one of nopb, pb, pb-rf"),
            )),
        }
    }
}

impl std::fmt::Display for Scheme {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Deliberately broken persist-buffer variants. Only the checker tests and `check --fault`
/// use them: each breaks one rule of the paper's design so the checker must report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fault {
    /// The correct design.
    #[default]
    None,
    /// An entry becomes Empty when its drain is sent, before PM acknowledges it (breaks §V-D4).
    EmptyBeforeAck,
    /// The selector routes reads around Drain entries straight to PM (breaks §V-D3).
    ReadBypassDrain,
    /// Acknowledgements queue behind requests in the PI buffer (the deadlock of §V-D2).
    AckBehindRequests,
    /// The first switch acknowledges a host write as soon as its selector sees it and forwards
    /// the write to PM without taking a PB entry: a volatile switch that claims persistence
    /// (breaks §IV-A crash consistency: the acknowledgement precedes entry into the PD).
    EarlyAck,
}

impl Fault {
    /// Command-line spelling.
    pub fn name(self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::EmptyBeforeAck => "empty-before-ack",
            Fault::ReadBypassDrain => "read-bypass-drain",
            Fault::AckBehindRequests => "ack-behind-requests",
            Fault::EarlyAck => "early-ack",
        }
    }

    /// Parse the command-line spelling.
    pub fn parse(text: &str) -> Result<Fault> {
        match text {
            "none" => Ok(Fault::None),
            "empty-before-ack" => Ok(Fault::EmptyBeforeAck),
            "read-bypass-drain" => Ok(Fault::ReadBypassDrain),
            "ack-behind-requests" => Ok(Fault::AckBehindRequests),
            "early-ack" => Ok(Fault::EarlyAck),
            other => Err(CxlsimError::param(
                "fault",
                format!("{other:?} is not one of none, empty-before-ack, read-bypass-drain, ack-behind-requests, early-ack"),
            )),
        }
    }
}

/// Tag-access latency of a fully associative persist buffer by entry count.
///
/// Only the 16-entry figure (0.388 ns) is published (paper Table I, CACTI at 22 nm). The other
/// rows are ours: CACTI models a fully associative tag array as a CAM whose match-line and
/// priority-encoder delay grow with the number of rows; for these small arrays we scale the
/// published point by sqrt(entries / 16), the wire-dominated growth CACTI 6 reports for small
/// CAMs (Muralimanohar et al., "CACTI 6.0", HP Labs 2009). See docs/cxlsim.md.
pub const PB_TAG_LATENCY_TABLE_NS: [(usize, f64); 4] =
    [(8, 0.274), (16, 0.388), (32, 0.549), (64, 0.776)];

/// Tag latency for `entries`: the table row if present, else the same sqrt scaling rule.
pub fn pb_tag_latency_ns(entries: usize) -> f64 {
    for (rows, latency_ns) in PB_TAG_LATENCY_TABLE_NS {
        if rows == entries {
            return latency_ns;
        }
    }
    0.388 * (entries.max(1) as f64 / 16.0).sqrt()
}

/// Every number of the model. Field names carry their unit last.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    /// Where persists complete.
    pub scheme: Scheme,
    /// Deliberately broken variant (checker tests only).
    pub fault: Fault,
    /// Host cores (Table I: 8).
    pub cores: usize,
    /// Core clock (Table I: 4 GHz).
    pub core_ghz: f64,
    /// Private L1 size (Table I: 32 KiB).
    pub l1_bytes: usize,
    /// L1 associativity (Table I: 8).
    pub l1_ways: usize,
    /// L1 hit latency (Table I: 1 cycle).
    pub l1_hit_cycles: u64,
    /// Shared L2 size (Table I: 256 KiB).
    pub l2_bytes: usize,
    /// L2 associativity (Table I: 8).
    pub l2_ways: usize,
    /// L2 hit latency (Table I: 10 cycles).
    pub l2_hit_cycles: u64,
    /// L2 read misses a core overlaps before it stalls: 1 is an in-order core that blocks on
    /// every miss; larger values approximate an out-of-order window (later operations on a
    /// line with a miss in flight still wait for it). Ours: 8, approximating the paper's
    /// out-of-order cores (Table I); `1` gives a blocking in-order core.
    pub miss_window: usize,
    /// Outstanding fabric requests per core (reads + writes awaiting completion): MSHRs and
    /// write-back buffer. Ours: 16.
    pub outstanding_per_core: usize,
    /// CXL switches between host and PM (0 = PM is local memory).
    pub hops: usize,
    /// Pipeline stages per switch (paper §IV-B: 4).
    pub switch_stages: u64,
    /// Latency of one pipeline stage. Ours: 8.75 ns, i.e. 35 ns per switch per direction,
    /// 70 ns round trip, Pond's switch figure (see docs).
    pub switch_stage_ns: f64,
    /// One-way latency of each link/port (host-switch, switch-switch, switch-PM). Ours: 12.5 ns.
    pub link_ns: f64,
    /// Link bandwidth per direction (Table I: x16 lanes at 30 GB/s).
    pub link_gbps: f64,
    /// Flit size (Table I: 68 B); requests are 1 flit, packets carrying a line 2.
    pub flit_bytes: u64,
    /// PM read latency (Table I: 100 ns).
    pub pm_read_ns: f64,
    /// PM write latency (Table I: 200 ns).
    pub pm_write_ns: f64,
    /// Independent PM banks, line-interleaved, each serving in FIFO order (gem5's
    /// NVM_2400_1x64: 16 banks per rank, one rank).
    pub pm_banks: usize,
    /// Write-pending queue of the PM controller, in the ADR (persistent) domain: a write is
    /// persistent and acknowledged once accepted into it, then drained to its bank (gem5's
    /// memory controller acknowledges writes on acceptance; its NVM write buffer holds 128).
    /// 0 = no queue: a write is acknowledged only after the media write.
    pub pm_wpq_entries: usize,
    /// PM controller latency added to every response (gem5 MemCtrl: 10 ns frontend + 10 ns
    /// backend).
    pub pm_ctrl_ns: f64,
    /// With a write-pending queue: banks serve waiting reads before queued writes, as gem5's
    /// MemCtrl does (FR-FCFS, reads first); `false` serves each bank in arrival order (FIFO).
    pub pm_reads_first: bool,
    /// Reads first: writes are forced once the write-pending queue holds more than this
    /// fraction (gem5 `write_high_thresh_perc` = 85%).
    pub pm_wpq_high: f64,
    /// Reads first: a bank with no read waiting writes only while the queue holds more than this
    /// fraction (gem5 `write_low_thresh_perc` = 50%); below it writes wait in the persistent
    /// queue, where reads of their lines are served.
    pub pm_wpq_low: f64,
    /// Persist-buffer entries (Table I: 16).
    pub pb_entries: usize,
    /// Tag access latency; `None` takes [`pb_tag_latency_ns`] for `pb_entries` (Table I: 0.388 ns at 16).
    pub pb_tag_ns: Option<f64>,
    /// Data access latency (Table I: 0.785 ns).
    pub pb_data_ns: f64,
    /// pb-rf: start draining when Dirty entries reach this fraction (paper §V-D1: 0.8).
    pub rf_drain_high: f64,
    /// pb-rf: stop draining when Dirty entries fall to this fraction (paper §V-D1: 0.6).
    pub rf_drain_low: f64,
    /// Each core starts after a seeded random delay in `0..=start_jitter_cycles` (0: all start
    /// together). The study repeats runs with different seeds to average out phase effects.
    pub start_jitter_cycles: u64,
    /// Seed of the start delays.
    pub jitter_seed: u64,
    /// Guard: abort a run after this many events.
    pub event_budget: u64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            scheme: Scheme::Pb,
            fault: Fault::None,
            cores: 8,
            core_ghz: 4.0,
            l1_bytes: 32 * 1024,
            l1_ways: 8,
            l1_hit_cycles: 1,
            l2_bytes: 256 * 1024,
            l2_ways: 8,
            l2_hit_cycles: 10,
            miss_window: 8,
            outstanding_per_core: 16,
            hops: 1,
            switch_stages: 4,
            switch_stage_ns: 8.75,
            link_ns: 12.5,
            link_gbps: 16.0 * 30.0,
            flit_bytes: 68,
            pm_read_ns: 100.0,
            pm_write_ns: 200.0,
            pm_banks: 16,
            pm_wpq_entries: 128,
            pm_ctrl_ns: 20.0,
            pm_reads_first: true,
            pm_wpq_high: 0.85,
            pm_wpq_low: 0.5,
            pb_entries: 16,
            pb_tag_ns: None,
            pb_data_ns: 0.785,
            rf_drain_high: 0.8,
            rf_drain_low: 0.6,
            start_jitter_cycles: 0,
            jitter_seed: 0,
            event_budget: 2_000_000_000,
        }
    }
}

/// Round nanoseconds to whole picoseconds (the simulator's time unit).
pub fn ns_to_ps(ns: f64) -> u64 {
    (ns * 1000.0).round() as u64
}

impl Params {
    /// Reject values the model cannot run with.
    pub fn validate(&self) -> Result<()> {
        fn pos(name: &'static str, v: f64) -> Result<()> {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(CxlsimError::param(
                    name,
                    format!("{v} must be a finite number > 0"),
                ))
            }
        }
        fn nonneg(name: &'static str, v: f64) -> Result<()> {
            if v.is_finite() && v >= 0.0 {
                Ok(())
            } else {
                Err(CxlsimError::param(
                    name,
                    format!("{v} must be a finite number >= 0"),
                ))
            }
        }
        if self.cores == 0 || self.cores > 256 {
            return Err(CxlsimError::param("cores", "must be 1..=256"));
        }
        pos("core-ghz", self.core_ghz)?;
        for (name, bytes, ways) in [
            ("l1-bytes", self.l1_bytes, self.l1_ways),
            ("l2-bytes", self.l2_bytes, self.l2_ways),
        ] {
            let lines = bytes / LINE_BYTES as usize;
            if ways == 0 || lines == 0 || lines % ways != 0 || !(lines / ways).is_power_of_two() {
                return Err(CxlsimError::param(
                    name,
                    "size / 64 / ways must be a power of two >= 1",
                ));
            }
        }
        if self.l1_bytes > self.l2_bytes {
            return Err(CxlsimError::param(
                "l1-bytes",
                "the L2 is inclusive: L1 must not exceed L2",
            ));
        }
        if self.outstanding_per_core == 0 || self.outstanding_per_core > 1024 {
            return Err(CxlsimError::param("outstanding", "must be 1..=1024"));
        }
        if self.miss_window == 0 || self.miss_window > self.outstanding_per_core {
            return Err(CxlsimError::param("miss-window", "must be 1..=outstanding"));
        }
        if self.hops > 16 {
            return Err(CxlsimError::param("hops", "must be 0..=16"));
        }
        if self.switch_stages < 2 {
            return Err(CxlsimError::param(
                "switch-stages",
                "must be >= 2 (the selector decides before switch allocation)",
            ));
        }
        nonneg("switch-stage-ns", self.switch_stage_ns)?;
        nonneg("link-ns", self.link_ns)?;
        pos("link-gbps", self.link_gbps)?;
        if self.flit_bytes == 0 {
            return Err(CxlsimError::param("flit-bytes", "must be > 0"));
        }
        pos("pm-read-ns", self.pm_read_ns)?;
        pos("pm-write-ns", self.pm_write_ns)?;
        if self.pm_banks == 0 || self.pm_banks > 1024 {
            return Err(CxlsimError::param("pm-banks", "must be 1..=1024"));
        }
        if self.pm_wpq_entries > 65536 {
            return Err(CxlsimError::param("pm-wpq", "must be 0..=65536"));
        }
        nonneg("pm-ctrl-ns", self.pm_ctrl_ns)?;
        if !(self.pm_wpq_low >= 0.0
            && self.pm_wpq_low < self.pm_wpq_high
            && self.pm_wpq_high <= 1.0)
        {
            return Err(CxlsimError::param(
                "pm-wpq-high / pm-wpq-low",
                "need 0 <= low < high <= 1",
            ));
        }
        if self.pb_entries < 2 || self.pb_entries > 4096 {
            return Err(CxlsimError::param("pb-entries", "must be 2..=4096"));
        }
        if let Some(tag_ns) = self.pb_tag_ns {
            nonneg("pb-tag-ns", tag_ns)?;
        }
        nonneg("pb-data-ns", self.pb_data_ns)?;
        if !(self.rf_drain_low >= 0.0
            && self.rf_drain_low < self.rf_drain_high
            && self.rf_drain_high <= 1.0)
        {
            return Err(CxlsimError::param(
                "rf-high / rf-low",
                "need 0 <= low < high <= 1",
            ));
        }
        if self.event_budget == 0 {
            return Err(CxlsimError::param("event-budget", "must be > 0"));
        }
        Ok(())
    }

    /// Core cycle in picoseconds.
    pub fn cycle_ps(&self) -> u64 {
        ((1000.0 / self.core_ghz).round() as u64).max(1)
    }

    /// Effective tag latency in ns.
    pub fn tag_ns(&self) -> f64 {
        self.pb_tag_ns
            .unwrap_or_else(|| pb_tag_latency_ns(self.pb_entries))
    }

    /// Write-pending-queue occupancy above which writes are forced (reads-first scheduling).
    pub fn wpq_high_entries(&self) -> usize {
        (self.pm_wpq_high * self.pm_wpq_entries as f64).floor() as usize
    }

    /// Write-pending-queue occupancy above which an idle bank with no read writes.
    pub fn wpq_low_entries(&self) -> usize {
        (self.pm_wpq_low * self.pm_wpq_entries as f64).floor() as usize
    }

    /// Dirty-entry count at which pb-rf starts draining (at least 1, at most all entries).
    pub fn rf_high_entries(&self) -> usize {
        ((self.rf_drain_high * self.pb_entries as f64).ceil() as usize).clamp(1, self.pb_entries)
    }

    /// Dirty-entry count at which pb-rf stops draining (below the high mark).
    pub fn rf_low_entries(&self) -> usize {
        ((self.rf_drain_low * self.pb_entries as f64).floor() as usize)
            .min(self.rf_high_entries() - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_table_i() {
        let p = Params::default();
        p.validate().unwrap();
        assert_eq!(p.cycle_ps(), 250);
        assert_eq!(p.tag_ns(), 0.388);
        assert_eq!(p.rf_high_entries(), 13);
        assert_eq!(p.rf_low_entries(), 9);
    }

    #[test]
    fn bad_params_are_errors() {
        assert!(Params {
            cores: 0,
            ..Params::default()
        }
        .validate()
        .is_err());
        assert!(Params {
            rf_drain_low: 0.9,
            ..Params::default()
        }
        .validate()
        .is_err());
        assert!(Params {
            l1_bytes: 3000,
            ..Params::default()
        }
        .validate()
        .is_err());
        assert!(Params {
            miss_window: 17,
            ..Params::default()
        }
        .validate()
        .is_err());
    }

    #[test]
    fn tag_latency_grows_with_entries() {
        let mut last = 0.0;
        for n in [8, 16, 24, 32, 64] {
            let t = pb_tag_latency_ns(n);
            assert!(t > last, "{n}: {t}");
            last = t;
        }
    }

    #[test]
    fn scheme_names_round_trip() {
        for s in Scheme::ALL {
            assert_eq!(Scheme::parse(s.name()).unwrap(), s);
        }
        assert!(Scheme::parse("bogus").is_err());
    }
}

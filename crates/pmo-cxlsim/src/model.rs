//! The sequential model of the persistent domain that the correctness checker runs beside (and
//! inside) the simulator: the part of the checker the simulator itself uses. `checker`
//! re-exports every public item under its public paths (`pmo_cxlsim::checker::Model`, ...).
//!
//! Owns [`Model`], [`Violation`], the line-keyed tables and the seeded crash points. The model knows, for every line, the latest version that
//! entered the persistent domain (PD: the persist buffer when one is active, else PM) and the
//! version PM holds. It checks the paper's three criteria (§IV-A):
//! - **write order**: every PM write carries a PD sequence number larger than the one PM holds;
//! - **write-read order**: every read returns the latest PD version as of the read's
//!   linearisation point (the selector decision or the controller's processing in the first
//!   switch; PM service when no buffer is active);
//! - **crash consistency**: at a crash point, recovery (drain every surviving Dirty/Drain PB
//!   entry, oldest first) must leave PM equal to the latest PD version of every line; and, seen
//!   from the host, every write the host gets an acknowledgement for must have entered the PD
//!   before that acknowledgement arrived. The second half does not trust the simulator's own
//!   account of where the PD is: a switch that acknowledges a write it never made persistent
//!   is caught when the acknowledgement reaches the core, even though no PM line ever lags.
//!
//! Crash checks are cheap: the model keeps the set of lines where PM differs from the PD
//! (`diff`), so a crash point costs O(|diff| x PB entries) and thousands run in one simulation.
//! Invariant: `diff` holds exactly the lines with `pm[line] != persisted[line]`; `unacked` holds
//! the versions that entered the PD and whose acknowledgement has not reached the host yet (at
//! most one per write in flight, so it is bounded by the host's in-flight writes).

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

use crate::pb::{PbState, PersistBuffer};

/// Kept violations (the count goes on past it).
pub const MAX_KEPT_VIOLATIONS: usize = 32;

/// Multiplicative hasher for line numbers (keys are already well spread).
#[derive(Default, Clone, Copy)]
pub struct LineHasher(u64);

impl Hasher for LineHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_left(29);
    }
}

/// Map keyed by line number.
pub type LineMap<V> = HashMap<u64, V, BuildHasherDefault<LineHasher>>;
/// Set of line numbers.
pub type LineSet = HashSet<u64, BuildHasherDefault<LineHasher>>;

/// A broken correctness criterion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// PM received an older version after a newer one.
    WriteOrder {
        /// Line number.
        line: u64,
        /// When.
        time_ps: u64,
        /// PD sequence number of the incoming write.
        incoming_seq: u64,
        /// PD sequence number PM already held.
        held_seq: u64,
    },
    /// A read returned something other than the latest persisted version.
    StaleRead {
        /// Line number.
        line: u64,
        /// When the value was returned.
        time_ps: u64,
        /// Version returned.
        got: u64,
        /// Version the model expected.
        expected: u64,
    },
    /// After a crash and recovery, PM lacks the latest persisted version.
    LostPersist {
        /// Line number.
        line: u64,
        /// Crash time.
        time_ps: u64,
        /// Version recovery leaves in PM.
        recovered: u64,
        /// Latest persisted version.
        expected: u64,
    },
    /// The host received an acknowledgement for a write whose version never entered the PD.
    UnpersistedAck {
        /// Line number.
        line: u64,
        /// When the acknowledgement reached the core.
        time_ps: u64,
        /// The acknowledged version.
        version: u64,
    },
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Violation::WriteOrder { line, time_ps, incoming_seq, held_seq } => write!(
                f,
                "write order: line {:#x} at {time_ps} ps: PM got PD#{incoming_seq} after PD#{held_seq}",
                line << 6
            ),
            Violation::StaleRead { line, time_ps, got, expected } => write!(
                f,
                "write-read order: line {:#x} at {time_ps} ps: read v{got}, latest persisted v{expected}",
                line << 6
            ),
            Violation::LostPersist { line, time_ps, recovered, expected } => write!(
                f,
                "crash consistency: crash at {time_ps} ps, line {:#x}: recovery leaves v{recovered}, acknowledged v{expected}",
                line << 6
            ),
            Violation::UnpersistedAck { line, time_ps, version } => write!(
                f,
                "crash consistency: line {:#x} at {time_ps} ps: host acknowledged v{version}, which never entered the persistent domain",
                line << 6
            ),
        }
    }
}

/// The sequential model of the persistent domain.
#[derive(Debug, Default, Clone)]
pub struct Model {
    persisted: LineMap<(u64, u64)>,
    pm: LineMap<(u64, u64)>,
    diff: LineSet,
    /// Version -> line of every PD entry whose acknowledgement the host has not received.
    unacked: LineMap<u64>,
    /// Version -> line of acknowledgements that reached the host before their version entered
    /// the PD (already reported); its later PD entry is matched here instead of in `unacked`.
    acked_early: LineMap<u64>,
    next_pd_seq: u64,
    violations: Vec<Violation>,
    violation_count: u64,
    reads_checked: u64,
    crash_points_checked: u64,
}

impl Model {
    /// Empty model: every line holds version 0 in PM and in the PD.
    pub fn new() -> Model {
        Model::default()
    }

    fn record(&mut self, v: Violation) {
        self.violation_count += 1;
        if self.violations.len() < MAX_KEPT_VIOLATIONS {
            self.violations.push(v);
        }
    }

    fn sync_diff(&mut self, line: u64) {
        let pm = self.pm.get(&line).map_or(0, |v| v.0);
        let pd = self.persisted.get(&line).map_or(0, |v| v.0);
        if pm == pd {
            self.diff.remove(&line);
        } else {
            self.diff.insert(line);
        }
    }

    /// A version of `line` enters the persistent domain; returns its PD sequence number.
    pub fn persist(&mut self, line: u64, value: u64) -> u64 {
        self.next_pd_seq += 1;
        self.persisted.insert(line, (value, self.next_pd_seq));
        if self.acked_early.remove(&value).is_none() {
            self.unacked.insert(value, line);
        }
        self.sync_diff(line);
        self.next_pd_seq
    }

    /// The host received the acknowledgement of its write of `value` to `line`: the version
    /// must have entered the PD before (crash consistency seen from the host).
    pub fn acknowledged(&mut self, line: u64, value: u64, time_ps: u64) {
        if self.unacked.remove(&value) != Some(line) {
            self.record(Violation::UnpersistedAck {
                line,
                time_ps,
                version: value,
            });
            self.acked_early.insert(value, line);
        }
    }

    /// Writes between PD entry and host acknowledgement (or, after an
    /// [`Violation::UnpersistedAck`], between acknowledgement and PD entry): the model's only
    /// tables that grow with traffic rather than with lines touched.
    pub fn unacked_len(&self) -> usize {
        self.unacked.len() + self.acked_early.len()
    }

    /// Latest persisted version of `line` (0 if never written).
    pub fn latest(&self, line: u64) -> u64 {
        self.persisted.get(&line).map_or(0, |v| v.0)
    }

    /// Version PM holds.
    pub fn pm_value(&self, line: u64) -> u64 {
        self.pm.get(&line).map_or(0, |v| v.0)
    }

    /// PM writes a version; checks write order (an older version must never follow a newer one).
    pub fn pm_write(&mut self, line: u64, value: u64, pd_seq: u64, time_ps: u64) {
        let held_seq = self.pm.get(&line).map_or(0, |v| v.1);
        // Equal sequence numbers are the same version written twice (recovery re-drains an
        // entry whose first drain reached PM before the crash): idempotent, not a violation.
        if pd_seq < held_seq {
            self.record(Violation::WriteOrder {
                line,
                time_ps,
                incoming_seq: pd_seq,
                held_seq,
            });
        }
        self.pm.insert(line, (value, pd_seq));
        self.sync_diff(line);
    }

    /// A read of `line` returned `got`; the model expected `expected`.
    pub fn check_read(&mut self, line: u64, got: u64, expected: u64, time_ps: u64) {
        self.reads_checked += 1;
        if got != expected {
            self.record(Violation::StaleRead {
                line,
                time_ps,
                got,
                expected,
            });
        }
    }

    /// Crash at `time_ps` without disturbing the run: what would recovery leave in PM?
    /// Only lines where PM lags the PD can be wrong; each must be rescued by a surviving entry.
    pub fn crash_check(&mut self, time_ps: u64, pb: Option<&PersistBuffer>) {
        self.crash_points_checked += 1;
        let mut lost = Vec::new();
        for &line in &self.diff {
            let expected = self.latest(line);
            let recovered = pb
                .and_then(|pb| {
                    pb.entries()
                        .iter()
                        .filter(|e| e.state != PbState::Empty && e.tag == line)
                        .max_by_key(|e| e.age)
                        .map(|e| e.value)
                })
                .unwrap_or_else(|| self.pm_value(line));
            if recovered != expected {
                lost.push(Violation::LostPersist {
                    line,
                    time_ps,
                    recovered,
                    expected,
                });
            }
        }
        lost.sort_by_key(|v| match v {
            Violation::LostPersist { line, .. } => *line,
            _ => 0,
        });
        for v in lost {
            self.record(v);
        }
    }

    /// A real crash: drain the survivors to PM oldest first (checking write order), then compare
    /// every line PM against the PD. Leaves the model as recovery leaves the machine.
    pub fn recover(&mut self, time_ps: u64, pb: Option<&mut PersistBuffer>) {
        self.crash_points_checked += 1;
        if let Some(pb) = pb {
            for e in pb.survivors() {
                self.pm_write(e.tag, e.value, e.pd_seq, time_ps);
            }
            pb.clear();
        }
        let mut lines: Vec<u64> = self.persisted.keys().copied().collect();
        lines.sort_unstable();
        for line in lines {
            let expected = self.latest(line);
            let recovered = self.pm_value(line);
            if recovered != expected {
                self.record(Violation::LostPersist {
                    line,
                    time_ps,
                    recovered,
                    expected,
                });
            }
        }
    }

    /// Violations kept (at most [`MAX_KEPT_VIOLATIONS`]).
    pub fn violations(&self) -> &[Violation] {
        &self.violations
    }

    /// All violations seen.
    pub fn violation_count(&self) -> u64 {
        self.violation_count
    }

    /// Reads compared against the model.
    pub fn reads_checked(&self) -> u64 {
        self.reads_checked
    }

    /// Crash points evaluated.
    pub fn crash_points_checked(&self) -> u64 {
        self.crash_points_checked
    }

    /// Lines where PM currently lags the persistent domain.
    pub fn lagging_lines(&self) -> usize {
        self.diff.len()
    }
}

/// Seeded crash points: `count` event indices drawn uniformly from `0..events` (SplitMix64),
/// sorted ascending.
pub fn crash_points(seed: u64, count: usize, events: u64) -> Vec<u64> {
    let mut state = seed;
    let mut points: Vec<u64> = (0..count)
        .map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            (z ^ (z >> 31)) % events.max(1)
        })
        .collect();
    points.sort_unstable();
    points
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::PbHeader;

    #[test]
    fn write_order_violation_is_recorded() {
        let mut m = Model::new();
        let a = m.persist(1, 10);
        let b = m.persist(1, 11);
        m.pm_write(1, 11, b, 5);
        m.pm_write(1, 10, a, 6);
        assert_eq!(m.violation_count(), 1);
        assert!(matches!(m.violations()[0], Violation::WriteOrder { .. }));
    }

    #[test]
    fn crash_check_uses_surviving_entries() {
        let mut m = Model::new();
        let mut pb = PersistBuffer::new(4);
        let seq = m.persist(3, 30);
        let e = pb.lru_empty().unwrap();
        pb.fill(e, 3, 30, seq, PbHeader::default());
        m.crash_check(1, Some(&pb));
        assert_eq!(m.violation_count(), 0, "the Dirty entry rescues the line");
        pb.set_state(e, PbState::Empty);
        m.crash_check(2, Some(&pb));
        assert_eq!(m.violation_count(), 1, "emptied before PM has it: lost");
        m.pm_write(3, 30, seq, 3);
        assert_eq!(m.lagging_lines(), 0);
    }

    #[test]
    fn acknowledgement_must_follow_pd_entry() {
        let mut m = Model::new();
        m.persist(5, 50);
        assert_eq!(m.unacked_len(), 1);
        m.acknowledged(5, 50, 1);
        assert_eq!(m.violation_count(), 0);
        assert_eq!(m.unacked_len(), 0);
        // Acknowledged twice, or never persisted: both are acknowledgements without a PD entry.
        m.acknowledged(5, 50, 2);
        m.acknowledged(6, 60, 3);
        assert_eq!(m.violation_count(), 2);
        assert!(matches!(
            m.violations()[1],
            Violation::UnpersistedAck {
                line: 6,
                version: 60,
                ..
            }
        ));
    }

    #[test]
    fn recovery_drains_oldest_first() {
        let mut m = Model::new();
        let mut pb = PersistBuffer::new(4);
        for v in [1, 2] {
            let seq = m.persist(9, v);
            let e = pb.lru_empty().unwrap();
            pb.fill(e, 9, v, seq, PbHeader::default());
            pb.set_state(e, PbState::Drain);
        }
        m.recover(10, Some(&mut pb));
        assert_eq!(m.violation_count(), 0);
        assert_eq!(m.pm_value(9), 2);
    }
}

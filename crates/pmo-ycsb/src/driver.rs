//! The load and run phases of a core workload over a [`KvStore`], timed per operation.

use std::time::Instant;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::gen::{key_name, Latest, ScrambledZipfian};
use crate::workload::{Distribution, Workload};
use crate::{KvStore, YcsbError};

/// Operation types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    Insert,
    Read,
    Update,
    Scan,
    ReadModifyWrite,
}

impl OpKind {
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Insert => "insert",
            OpKind::Read => "read",
            OpKind::Update => "update",
            OpKind::Scan => "scan",
            OpKind::ReadModifyWrite => "rmw",
        }
    }
}

/// Latencies of one operation type, in nanoseconds, sorted.
#[derive(Clone, Debug, Default)]
pub struct OpStats {
    pub ns: Vec<u64>,
}

impl OpStats {
    /// The `q` quantile (0..=1), nearest rank.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.ns.is_empty() {
            return 0;
        }
        let rank = ((q * self.ns.len() as f64).ceil() as usize).clamp(1, self.ns.len());
        self.ns[rank - 1]
    }
}

/// One phase's result.
#[derive(Clone, Debug)]
pub struct Report {
    pub store: String,
    pub workload: String,
    /// `load` or `run`.
    pub phase: &'static str,
    pub ops: u64,
    pub wall_ns: u64,
    /// Per operation type, in [`OpKind`] order.
    pub per_op: Vec<(OpKind, OpStats)>,
}

impl Report {
    /// Operations per second over the phase.
    pub fn throughput(&self) -> f64 {
        self.ops as f64 / (self.wall_ns.max(1) as f64 / 1e9)
    }

    /// Every latency of the phase, sorted (for a CDF).
    pub fn all_ns(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .per_op
            .iter()
            .flat_map(|(_, s)| s.ns.iter().copied())
            .collect();
        v.sort_unstable();
        v
    }
}

fn record(w: &Workload, n: u64, rng: &mut StdRng) -> Vec<u8> {
    // Printable bytes like YCSB's random field values; the first 8 carry the record number so a
    // read can be checked.
    let mut v: Vec<u8> = (0..w.record_len())
        .map(|_| rng.gen_range(b' '..=b'~'))
        .collect();
    let tag = n.to_le_bytes();
    let k = tag.len().min(v.len());
    v[..k].copy_from_slice(&tag[..k]);
    v
}

struct Timer {
    per_op: Vec<(OpKind, OpStats)>,
}

impl Timer {
    fn new() -> Timer {
        Timer { per_op: Vec::new() }
    }
    fn add(&mut self, kind: OpKind, ns: u64) {
        match self.per_op.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, s)) => s.ns.push(ns),
            None => self.per_op.push((kind, OpStats { ns: vec![ns] })),
        }
    }
    fn finish(
        mut self,
        store: String,
        w: &Workload,
        phase: &'static str,
        ops: u64,
        wall_ns: u64,
    ) -> Report {
        for (_, s) in &mut self.per_op {
            s.ns.sort_unstable();
        }
        self.per_op.sort_by_key(|(k, _)| *k);
        Report {
            store,
            workload: w.name.clone(),
            phase,
            ops,
            wall_ns,
            per_op: self.per_op,
        }
    }
}

fn store_err(store: &dyn KvStore, op: &'static str, source: crate::StoreError) -> YcsbError {
    YcsbError::Store {
        store: store.name(),
        op,
        source,
    }
}

/// The load phase: insert records `0..record_count`.
pub fn load(store: &mut dyn KvStore, w: &Workload, seed: u64) -> Result<Report, YcsbError> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut t = Timer::new();
    let start = Instant::now();
    for n in 0..w.record_count {
        let key = key_name(n, w.hashed_keys);
        let val = record(w, n, &mut rng);
        let t0 = Instant::now();
        store
            .insert(key.as_bytes(), &val)
            .map_err(|e| store_err(store, "insert", e))?;
        t.add(OpKind::Insert, t0.elapsed().as_nanos() as u64);
    }
    let wall = start.elapsed().as_nanos() as u64;
    Ok(t.finish(store.name(), w, "load", w.record_count, wall))
}

enum Chooser {
    Zipf(ScrambledZipfian),
    Uniform,
    Latest(Latest),
}

/// The run phase: `operation_count` operations drawn by the workload's proportions over the
/// records the load phase inserted (and those this phase inserts). Every read is checked: a
/// loaded key that reads as missing is an error.
pub fn run(store: &mut dyn KvStore, w: &Workload, seed: u64) -> Result<Report, YcsbError> {
    let reads = w.read + w.update + w.scan + w.read_modify_write;
    if w.record_count == 0 && reads > 0.0 {
        // No record to read until an insert: the key choosers would loop or draw from nothing.
        return Err(YcsbError::Workload {
            path: w.name.clone(),
            msg: "recordcount=0: the run reads, updates or scans records, but none are loaded \
                  (only an insert-only run starts from no records)"
                .into(),
        });
    }
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
    let mut next_insert = w.record_count;
    let total = w.total_proportion();
    // As CoreWorkload: the zipfian key space covers the records expected by the end of the run
    // (twice the inserts). The insert share is the proportion over their sum, as an operation
    // is drawn: CoreWorkload takes `insertproportion` as written, so proportions written as
    // percentages (or 1e20 against 1e9) made the space far wider than the records, and a read
    // skipped keys not inserted yet for hours.
    let expected_new = (w.operation_count as f64 * (w.insert / total) * 2.0) as u64;
    let mut chooser = match w.distribution {
        Distribution::Zipfian => Chooser::Zipf(ScrambledZipfian::new(
            0,
            w.record_count
                .saturating_add(expected_new)
                .min(u64::MAX - 1),
        )),
        Distribution::Uniform => Chooser::Uniform,
        Distribution::Latest => Chooser::Latest(Latest::new(w.record_count.saturating_sub(1))),
    };
    let mut t = Timer::new();
    let mut buf = Vec::with_capacity(w.record_len());
    let start = Instant::now();
    for _ in 0..w.operation_count {
        let mut x = rng.gen::<f64>() * total;
        let mut pick = |p: f64| {
            let hit = x < p;
            x -= p;
            hit
        };
        let kind = if pick(w.read) {
            OpKind::Read
        } else if pick(w.update) {
            OpKind::Update
        } else if pick(w.insert) {
            OpKind::Insert
        } else if pick(w.scan) {
            OpKind::Scan
        } else {
            OpKind::ReadModifyWrite
        };
        // With no record inserted yet there is none to draw (an insert-only run from no
        // records; `run` refused the others): the insert needs no key.
        let keynum = if next_insert == 0 {
            if kind != OpKind::Insert {
                return Err(YcsbError::Workload {
                    path: w.name.clone(),
                    msg: format!("recordcount=0: a {} before any insert", kind.name()),
                });
            }
            0
        } else {
            loop {
                let n = match &mut chooser {
                    Chooser::Zipf(z) => z.next(&mut rng),
                    Chooser::Uniform => rng.gen_range(0..next_insert),
                    Chooser::Latest(l) => l.next(&mut rng, next_insert - 1),
                };
                if n < next_insert {
                    break n; // as CoreWorkload, skip records not inserted yet
                }
            }
        };
        let t0;
        match kind {
            OpKind::Insert => {
                let key = key_name(next_insert, w.hashed_keys);
                let val = record(w, next_insert, &mut rng);
                t0 = Instant::now();
                store
                    .insert(key.as_bytes(), &val)
                    .map_err(|e| store_err(store, "insert", e))?;
                next_insert += 1;
            }
            OpKind::Read => {
                let key = key_name(keynum, w.hashed_keys);
                t0 = Instant::now();
                let found = store
                    .read(key.as_bytes(), &mut buf)
                    .map_err(|e| store_err(store, "read", e))?;
                // The record's first bytes carry its number (all of them for a record shorter
                // than 8 bytes: `record`).
                let tag = keynum.to_le_bytes();
                let k = tag.len().min(w.record_len());
                if !found || buf.get(..k) != Some(&tag[..k]) {
                    return Err(YcsbError::Missing {
                        store: store.name(),
                        key,
                    });
                }
            }
            OpKind::Update => {
                let key = key_name(keynum, w.hashed_keys);
                let val = record(w, keynum, &mut rng);
                t0 = Instant::now();
                store
                    .update(key.as_bytes(), &val)
                    .map_err(|e| store_err(store, "update", e))?;
            }
            OpKind::Scan => {
                let key = key_name(keynum, w.hashed_keys);
                let len = rng.gen_range(1..=w.max_scan_length);
                t0 = Instant::now();
                store
                    .scan(key.as_bytes(), len)
                    .map_err(|e| store_err(store, "scan", e))?;
            }
            OpKind::ReadModifyWrite => {
                let key = key_name(keynum, w.hashed_keys);
                let val = record(w, keynum, &mut rng);
                t0 = Instant::now();
                let found = store
                    .read(key.as_bytes(), &mut buf)
                    .map_err(|e| store_err(store, "read", e))?;
                if !found {
                    return Err(YcsbError::Missing {
                        store: store.name(),
                        key,
                    });
                }
                store
                    .update(key.as_bytes(), &val)
                    .map_err(|e| store_err(store, "update", e))?;
            }
        }
        t.add(kind, t0.elapsed().as_nanos() as u64);
    }
    let wall = start.elapsed().as_nanos() as u64;
    Ok(t.finish(store.name(), w, "run", w.operation_count, wall))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// An in-memory store: the driver's own check.
    struct MapStore(BTreeMap<Vec<u8>, Vec<u8>>);

    impl KvStore for MapStore {
        fn name(&self) -> String {
            "map".into()
        }
        fn insert(&mut self, k: &[u8], v: &[u8]) -> Result<(), crate::StoreError> {
            if self.0.insert(k.to_vec(), v.to_vec()).is_some() {
                return Err("duplicate insert".into());
            }
            Ok(())
        }
        fn update(&mut self, k: &[u8], v: &[u8]) -> Result<(), crate::StoreError> {
            self.0
                .get_mut(k)
                .ok_or("update of a missing key")?
                .copy_from_slice(v);
            Ok(())
        }
        fn read(&mut self, k: &[u8], out: &mut Vec<u8>) -> Result<bool, crate::StoreError> {
            out.clear();
            Ok(self.0.get(k).map(|v| out.extend_from_slice(v)).is_some())
        }
        fn scan(&mut self, start: &[u8], n: usize) -> Result<usize, crate::StoreError> {
            Ok(self.0.range(start.to_vec()..).take(n).count())
        }
    }

    #[test]
    fn every_core_workload_runs_with_its_mix() {
        for l in ['a', 'b', 'c', 'd', 'e', 'f'] {
            let w = Workload {
                operation_count: 4000,
                ..Workload::core(l).unwrap()
            };
            let mut s = MapStore(BTreeMap::new());
            let lr = load(&mut s, &w, 7).unwrap();
            assert_eq!(lr.ops, 1000);
            assert_eq!(s.0.len(), 1000);
            assert!(s.0.values().all(|v| v.len() == 1000));
            let r = run(&mut s, &w, 7).unwrap();
            let count = |k| {
                r.per_op
                    .iter()
                    .find(|(x, _)| *x == k)
                    .map_or(0, |(_, s)| s.ns.len()) as f64
            };
            let frac = |k| count(k) / 4000.0;
            assert!(
                (frac(OpKind::Read) - w.read).abs() < 0.05,
                "{l}: reads {}",
                frac(OpKind::Read)
            );
            assert!(
                (frac(OpKind::Update) - w.update).abs() < 0.05,
                "{l}: updates"
            );
            assert!(
                (frac(OpKind::Insert) - w.insert).abs() < 0.03,
                "{l}: inserts"
            );
            assert!((frac(OpKind::Scan) - w.scan).abs() < 0.05, "{l}: scans");
            assert_eq!(s.0.len() as f64, 1000.0 + count(OpKind::Insert));
            assert!(r.throughput() > 0.0);
            assert!(r.all_ns().windows(2).all(|p| p[0] <= p[1]));
        }
    }

    #[test]
    fn a_lost_record_is_reported() {
        let w = Workload::core('c').unwrap();
        let mut s = MapStore(BTreeMap::new());
        load(&mut s, &w, 1).unwrap();
        s.0.clear();
        assert!(matches!(run(&mut s, &w, 1), Err(YcsbError::Missing { .. })));
    }

    #[test]
    fn quantiles_by_nearest_rank() {
        let s = OpStats {
            ns: (1..=1000).collect(),
        };
        assert_eq!(s.quantile(0.5), 500);
        assert_eq!(s.quantile(0.99), 990);
        assert_eq!(s.quantile(0.999), 999);
        assert_eq!(OpStats::default().quantile(0.5), 0);
    }
}

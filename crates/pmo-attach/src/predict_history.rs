//! A predictor's history kept across attaches of the same PMO ([`PredictConfig::history`]).
//!
//! Without it every attach starts cold: a stream is confirmed only at its third fault, so a
//! file of a few pages that a workload opens, reads whole and closes (Filebench's open/close
//! cycles) never gets a prediction. With it, a detach records what its predictor learnt (the
//! strides of its confirmed streams and, adaptive, the depth cap), keyed by the PMO's uuid, in
//! a small process-wide table; the next attach of that PMO with `history` on seeds its
//! predictor from it: the first new stream of each learnt stride starts confirmed at its first
//! fault and asks for its window at once.
//!
//! Owns: the table (at most [`MAX_PMOS`] PMOs, least recently stored evicted) and
//! [`Learned`]. Callers: `predict.rs` ([`PredictHook::resume`] at attach, `Predictor`'s stop at
//! detach). Nothing here is persistent: the history is a per-process cache, lost at exit.
//!
//! [`PredictConfig::history`]: crate::predict::PredictConfig::history
//! [`PredictHook::resume`]: crate::predict::PredictHook::resume
#![deny(unsafe_code)]

use std::collections::HashMap;
use std::sync::Mutex;

/// Most PMOs whose history is kept.
pub const MAX_PMOS: usize = 4096;
/// Most strides kept per PMO.
pub const MAX_STRIDES: usize = 4;

/// What one predictor learnt of a PMO's accesses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Learned {
    /// Strides of the confirmed streams (pages), distinct, the first `n` valid.
    pub strides: [i64; MAX_STRIDES],
    pub n: usize,
    /// Adaptive depth: the cap level when the predictor stopped.
    pub cap_level: u32,
}

impl Learned {
    /// Add a stride unless it is there already or the list is full.
    pub fn add(&mut self, stride: i64) {
        if stride != 0 && self.n < MAX_STRIDES && !self.strides[..self.n].contains(&stride) {
            self.strides[self.n] = stride;
            self.n += 1;
        }
    }

    /// The learnt strides.
    pub fn strides(&self) -> &[i64] {
        &self.strides[..self.n.min(MAX_STRIDES)]
    }
}

/// uuid -> (what was learnt, when stored).
type Table = (HashMap<[u8; 16], (Learned, u64)>, u64);

static TABLE: Mutex<Option<Table>> = Mutex::new(None);

/// Record what a predictor of PMO `uuid` learnt (replacing an older record). A predictor that
/// confirmed no stream leaves the old record: a session that only wrote or read a page or two
/// says nothing new about the PMO's streams.
pub fn store(uuid: [u8; 16], learned: Learned) {
    if learned.n == 0 {
        return;
    }
    let mut g = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    let (map, clock) = g.get_or_insert_with(|| (HashMap::new(), 0));
    if map.len() >= MAX_PMOS && !map.contains_key(&uuid) {
        if let Some(old) = map.iter().min_by_key(|(_, (_, t))| *t).map(|(k, _)| *k) {
            map.remove(&old);
        }
    }
    *clock += 1;
    map.insert(uuid, (learned, *clock));
}

/// What was learnt of PMO `uuid`, if anything.
pub fn recall(uuid: &[u8; 16]) -> Option<Learned> {
    let g = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    g.as_ref().and_then(|(m, _)| m.get(uuid)).map(|(l, _)| *l)
}

/// Forget every PMO's history (tests and benchmarks that want cold predictors).
pub fn clear() {
    *TABLE.lock().unwrap_or_else(|e| e.into_inner()) = None;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strides_are_distinct_and_bounded() {
        let mut l = Learned::default();
        for s in [1, 1, 0, -1, 3, 5, 7, 9] {
            l.add(s);
        }
        assert_eq!(l.strides(), &[1, -1, 3, 5]);
    }

    #[test]
    fn a_record_survives_until_replaced_and_empty_ones_are_ignored() {
        let uuid = [0xa5; 16];
        let mut l = Learned::default();
        l.add(2);
        store(uuid, l);
        store(uuid, Learned::default());
        assert_eq!(recall(&uuid).map(|l| l.strides().to_vec()), Some(vec![2]));
        let mut l = Learned::default();
        l.add(-1);
        store(uuid, l);
        assert_eq!(recall(&uuid).map(|l| l.strides().to_vec()), Some(vec![-1]));
    }
}

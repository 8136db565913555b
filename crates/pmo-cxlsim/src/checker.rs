//! The correctness checker: a sequential model of the persistent domain run beside the simulator
//! (`model`: [`Model`], [`Violation`], [`crash_points`], re-exported here), and whole runs checked
//! at seeded crash points ([`run_checked`]).
//!
//! The model checks the paper's three criteria (§IV-A): write order, write-read order and crash
//! consistency (see [`Model`]). It lives in `model`, below the simulator that drives it, so that
//! this module can run the simulator without the two importing each other.

use crate::config::Params;
use crate::error::Result;
use crate::sim::{simulate, Simulator, Stats};
use crate::trace::Trace;

pub use crate::model::{
    crash_points, LineHasher, LineMap, LineSet, Model, Violation, MAX_KEPT_VIOLATIONS,
};

/// Run `trace` checking every read and write, plus `count` seeded crash points spread over the
/// whole run (a first run counts its events). Returns the checked run's statistics.
pub fn run_checked(params: &Params, trace: &Trace, count: usize, seed: u64) -> Result<Stats> {
    let events = simulate(params, trace)?.events;
    let points = crash_points(seed, count, events);
    Simulator::new(params, trace)?.run(&points)
}

//! The DRAM reference run and the psync tempo derived from it.
//!
//! Owns [`Reference`] (the kernel run on a plain `Vec` in DRAM: the verifier's expected result
//! and the unprotected timing) and [`Calibration`] (how many critical-loop iterations make one
//! psync interval).
//!
//! The LOaPP paper psyncs after a fixed number of iterations, chosen so that psyncs come about
//! once per second of the unprotected run (iterations, not timers, so every design does the
//! same work between psyncs). We derive the count the same way: time the unprotected run here,
//! then `iters_per_psync = round(steps x interval / unprotected time)`, at least 1.
//!
//! At the paper's sizes the interval is the paper's 1 s. Smaller sizes scale it by the PMO's
//! size relative to the paper's ([`default_psync_interval`]): the whole-PMO designs' cost per
//! psync grows with the PMO's bytes, so this keeps the ratio of protection work to compute
//! per psync near the paper's, and gives tens of psyncs per default run.

use std::time::{Duration, Instant};

use crate::error::{invalid, Result};
use crate::kernels::{Dims, Size, Workload};

/// The paper's psync tempo at its sizes.
pub const PAPER_PSYNC_INTERVAL: Duration = Duration::from_secs(1);
/// Shortest default interval (tiny sizes would otherwise psync after every step).
pub const MIN_DEFAULT_INTERVAL: Duration = Duration::from_millis(2);

/// The kernel's result computed in DRAM, and how long it took.
#[derive(Clone, Debug)]
pub struct Reference {
    pub workload: Workload,
    pub dims: Dims,
    /// Threads the reference ran with.
    pub threads: usize,
    /// The whole memory after the last step (the verifier compares every element).
    pub memory: Vec<f64>,
    /// Time of the critical loop (all steps), nanoseconds.
    pub compute_ns: u64,
}

impl Reference {
    /// Initialise and run the kernel on a `Vec` in DRAM.
    pub fn compute(workload: Workload, dims: Dims, threads: usize) -> Result<Reference> {
        workload.validate(dims)?;
        check_threads(threads)?;
        let mut memory = vec![0.0f64; workload.len_f64(dims)];
        workload.init(dims, &mut memory);
        let t0 = Instant::now();
        workload.run_all(dims, &mut memory, threads);
        let compute_ns = t0.elapsed().as_nanos() as u64;
        Ok(Reference {
            workload,
            dims,
            threads,
            memory,
            compute_ns,
        })
    }

    /// Index of the first element of `found` that differs (bitwise) from the reference, if any.
    pub fn first_mismatch(&self, found: &[f64]) -> Option<usize> {
        if found.len() != self.memory.len() {
            return Some(found.len().min(self.memory.len()));
        }
        self.memory
            .iter()
            .zip(found)
            .position(|(a, b)| a.to_bits() != b.to_bits())
    }
}

/// A psync tempo derived from an unprotected run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Calibration {
    /// Critical-loop iterations per psync.
    pub iters_per_psync: usize,
    /// The interval aimed at.
    pub target_interval_ns: u64,
    /// The unprotected run's critical-loop time.
    pub unprotected_ns: u64,
    /// Iterations of the critical loop.
    pub steps: usize,
}

impl Calibration {
    /// Derive the tempo from a reference run.
    pub fn from_reference(reference: &Reference, target: Duration) -> Calibration {
        let steps = reference.workload.steps(reference.dims);
        let target_interval_ns = target.as_nanos().min(u64::MAX as u128) as u64;
        let per_step_ns = reference.compute_ns as f64 / steps.max(1) as f64;
        let iters = (target_interval_ns as f64 / per_step_ns.max(1.0)).round();
        let iters_per_psync = (iters as usize).clamp(1, steps.max(1));
        Calibration {
            iters_per_psync,
            target_interval_ns,
            unprotected_ns: reference.compute_ns,
            steps,
        }
    }

    /// Expected psyncs per run at this tempo.
    pub fn psyncs(&self) -> usize {
        self.steps.div_ceil(self.iters_per_psync)
    }
}

/// Run the kernel unprotected in DRAM and derive iterations per psync for `target`.
pub fn calibrate(
    workload: Workload,
    dims: Dims,
    threads: usize,
    target: Duration,
) -> Result<Calibration> {
    let reference = Reference::compute(workload, dims, threads)?;
    Ok(Calibration::from_reference(&reference, target))
}

/// The default psync interval for `dims`: the paper's 1 s scaled by this PMO's bytes over the
/// paper-size PMO's bytes, between [`MIN_DEFAULT_INTERVAL`] and 1 s.
pub fn default_psync_interval(workload: Workload, dims: Dims) -> Duration {
    let paper = workload.len_bytes(workload.dims(Size::Paper)) as f64;
    let ours = workload.len_bytes(dims) as f64;
    let secs = PAPER_PSYNC_INTERVAL.as_secs_f64() * (ours / paper).min(1.0);
    Duration::from_secs_f64(secs).max(MIN_DEFAULT_INTERVAL)
}

pub(crate) fn check_threads(threads: usize) -> Result<()> {
    if threads == 0 || threads > crate::par::MAX_THREADS {
        return Err(invalid(
            "threads",
            format!("{threads} (1..={})", crate::par::MAX_THREADS),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tempo_follows_the_unprotected_time() {
        let w = Workload::Gauss;
        let dims = w.dims(Size::Tiny);
        let mut r = Reference::compute(w, dims, 1).unwrap();
        r.compute_ns = 1_000_000 * dims.n as u64; // 1 ms a step
        let c = Calibration::from_reference(&r, Duration::from_millis(10));
        assert_eq!(c.iters_per_psync, 10);
        assert_eq!(c.psyncs(), dims.n.div_ceil(10));
        let c = Calibration::from_reference(&r, Duration::from_secs(3600));
        assert_eq!(
            c.iters_per_psync, dims.n,
            "at most one psync interval per run"
        );
        let c = Calibration::from_reference(&r, Duration::ZERO);
        assert_eq!(c.iters_per_psync, 1);
    }

    #[test]
    fn default_interval_scales_with_pmo_bytes() {
        for w in Workload::ALL {
            assert_eq!(
                default_psync_interval(w, w.dims(Size::Paper)),
                PAPER_PSYNC_INTERVAL
            );
            let d = default_psync_interval(w, w.dims(Size::Default));
            assert!(
                d < PAPER_PSYNC_INTERVAL && d >= MIN_DEFAULT_INTERVAL,
                "{w}: {d:?}"
            );
        }
    }

    #[test]
    fn mismatch_is_found() {
        let w = Workload::Lu;
        let r = Reference::compute(w, w.dims(Size::Tiny), 2).unwrap();
        let mut m = r.memory.clone();
        assert_eq!(r.first_mismatch(&m), None);
        m[17] = f64::from_bits(m[17].to_bits() ^ 1);
        assert_eq!(r.first_mismatch(&m), Some(17));
        assert_eq!(r.first_mismatch(&m[..3]), Some(3));
    }
}

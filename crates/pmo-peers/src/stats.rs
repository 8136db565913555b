//! Measurements: the samples of the repeats of one benchmark and their median, min and max.
//!
//! Invariant: a [`Measurement`] has at least one sample and every sample is finite and positive
//! (a zero or negative figure is reported as an error by the benchmark that produced it).

use crate::error::{Error, Result};

/// What a figure counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Operations per second (higher is better).
    OpsPerSec,
    /// Microseconds per operation (lower is better).
    MicrosPerOp,
}

impl Unit {
    /// Short label used in tables and CSV.
    pub fn label(self) -> &'static str {
        match self {
            Unit::OpsPerSec => "ops/s",
            Unit::MicrosPerOp => "us/op",
        }
    }
}

/// The samples of the repeats of one benchmark and their summary.
#[derive(Debug, Clone, PartialEq)]
pub struct Measurement {
    /// What the figures count.
    pub unit: Unit,
    /// One figure per repeat, in run order.
    pub samples: Vec<f64>,
    /// Median of the samples (mean of the middle two for an even count).
    pub median: f64,
    /// Smallest sample.
    pub min: f64,
    /// Largest sample.
    pub max: f64,
    /// Operations counted over all samples (all threads).
    pub ops_total: u64,
    /// Median over the samples of the CPU time the benchmark threads got, divided by threads x
    /// wall time: near 1.0 when nothing else competed for the cores (at most cores / threads
    /// when there are more threads than cores). A low share marks a figure taken under load.
    pub cpu_share: f64,
    /// Samples taken but not used because their threads got too little CPU (the contention
    /// filter of `Options::min_cpu_share`); 0 when the filter is off or every sample passed.
    pub samples_set_aside: usize,
}

impl Measurement {
    /// Builds a measurement; fails if there is no sample or a sample is not finite and positive.
    /// `cpu_share` is left at 0.0 (unknown); see [`Measurement::with_cpu_shares`].
    pub fn from_samples(unit: Unit, samples: Vec<f64>, ops_total: u64) -> Result<Self> {
        if samples.is_empty() {
            return Err(Error::InvalidParameter(
                "a measurement needs at least one sample".into(),
            ));
        }
        if let Some(bad) = samples.iter().find(|s| !(s.is_finite() && **s > 0.0)) {
            return Err(Error::InvalidParameter(format!(
                "sample {bad} is not a positive figure (timer too coarse for the work?)"
            )));
        }
        let mut sorted = samples.clone();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        Ok(Measurement {
            unit,
            min: sorted[0],
            max: sorted[n - 1],
            median: median_of_sorted(&sorted),
            samples,
            ops_total,
            cpu_share: 0.0,
            samples_set_aside: 0,
        })
    }

    /// Sets [`Measurement::cpu_share`] to the median of the given per-sample shares (non-finite
    /// shares are ignored; none left means 0.0, unknown).
    pub fn with_cpu_shares(mut self, shares: &[f64]) -> Self {
        let mut sorted: Vec<f64> = shares.iter().copied().filter(|s| s.is_finite()).collect();
        sorted.sort_by(f64::total_cmp);
        self.cpu_share = if sorted.is_empty() {
            0.0
        } else {
            median_of_sorted(&sorted)
        };
        self
    }
}

/// Median of a sorted, non-empty slice (mean of the middle two for an even count).
fn median_of_sorted(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        let m = Measurement::from_samples(Unit::OpsPerSec, vec![3.0, 1.0, 2.0], 30).unwrap();
        assert_eq!((m.median, m.min, m.max), (2.0, 1.0, 3.0));
        let m = Measurement::from_samples(Unit::MicrosPerOp, vec![4.0, 1.0, 2.0, 3.0], 4).unwrap();
        assert_eq!((m.median, m.min, m.max), (2.5, 1.0, 4.0));
        assert_eq!(m.samples, vec![4.0, 1.0, 2.0, 3.0]);
        assert_eq!(m.cpu_share, 0.0);
        let m = m.with_cpu_shares(&[0.5, f64::NAN, 0.9, 1.0]);
        assert_eq!(m.cpu_share, 0.9);
    }

    proptest::proptest! {
        #[test]
        fn median_is_between_min_and_max_and_ignores_order(
            mut samples in proptest::collection::vec(1e-6f64..1e12, 1..40),
            rotate in 0usize..40,
        ) {
            let m = Measurement::from_samples(Unit::OpsPerSec, samples.clone(), 1).unwrap();
            proptest::prop_assert!(m.min <= m.median && m.median <= m.max);
            proptest::prop_assert!(samples.iter().all(|s| m.min <= *s && *s <= m.max));
            let k = rotate % samples.len();
            samples.rotate_left(k);
            let again = Measurement::from_samples(Unit::OpsPerSec, samples, 1).unwrap();
            proptest::prop_assert_eq!(m.median, again.median);
            // At least half the samples lie on each side of the median.
            let below = m.samples.iter().filter(|s| **s <= m.median).count();
            let above = m.samples.iter().filter(|s| **s >= m.median).count();
            proptest::prop_assert!(2 * below >= m.samples.len() && 2 * above >= m.samples.len());
        }
    }

    #[test]
    fn rejects_empty_and_non_positive_samples() {
        assert!(Measurement::from_samples(Unit::OpsPerSec, vec![], 0).is_err());
        assert!(Measurement::from_samples(Unit::OpsPerSec, vec![1.0, 0.0], 1).is_err());
        assert!(Measurement::from_samples(Unit::OpsPerSec, vec![f64::NAN], 1).is_err());
        assert!(Measurement::from_samples(Unit::OpsPerSec, vec![f64::INFINITY], 1).is_err());
    }
}

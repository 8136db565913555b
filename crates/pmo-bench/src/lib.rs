//! pmo's benchmarks. Every figure is measured in the run that prints it (medians over repeats)
//! and recorded as a tidy [`Record`]: one row per measurement with its parameters, the metric,
//! the value and the unit, written as CSV and JSON for scripts and plots.
//!
//! | module    | measures |
//! |-----------|----------|
//! | [`store`] | psync cost by dirty pages and PMO size, attach+detach, dirty-tracking faults, psync vs a PMDK transaction |
//! | [`ranges`] | a small durable update: N declared ranges + psync beside its floor (part of `store`) |
//! | [`readers`] | readers beside a writer: the writer's psync beside readers, a reader's refresh, reads through a reader's view (part of `store`) |
//! | [`suite`] | the papers' benchmark suite (pmo-workloads) as studies: breakdown per design, attach-session size, prediction depth, threads, CXL latency |
//! | [`schemes`] | every protection scheme: the paper's Fig. 1, a step breakdown, per-page costs against their floors, one small session against its floor (module `small`) |

mod floors;
pub mod lifecycle;
pub mod ranges;
pub mod readers;
pub mod record;
pub mod schemes;
mod small;
pub mod store;
pub mod suite;

pub use record::{Record, Records};

/// The figures: the `pmo-plot` crate (SVG and PNG), under the path its users know.
pub use pmo_plot as plot;

/// Errors of the benchmark harness.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("store: {0}")]
    Store(#[from] pmo_store::StoreError),
    #[error("{op}: {source}")]
    Io { op: String, source: std::io::Error },
    #[error(transparent)]
    Plot(#[from] pmo_plot::PlotError),
    #[error("{0}")]
    Other(String),
}

/// A pool file for one benchmark, removed on drop.
pub struct TempPool {
    /// The pool.
    pub pool: pmo_store::Pool,
    path: std::path::PathBuf,
}

impl TempPool {
    /// Create `dir/pmo-bench-TAG-PID.pool` of `size` bytes (preallocated, insecure fast KDF)
    /// whose PMOs get `scheme`. `size` is meant for two copies of the data (shadow paging); a
    /// scheme with the plaintext copy on the medium needs a third, so it gets half as much again.
    pub fn new(
        dir: &std::path::Path,
        tag: &str,
        size: u64,
        scheme: pmo_store::Scheme,
    ) -> Result<TempPool, BenchError> {
        let size = if scheme.shadow == pmo_store::Shadow::Medium {
            size.saturating_add(size / 2)
        } else {
            size
        };
        let path = dir.join(format!("pmo-bench-{tag}-{}.pool", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let pool = pmo_store::Pool::create(
            &path,
            size,
            &pmo_store::PoolOptions {
                kdf: pmo_store::KdfParams::INSECURE_FAST,
                preallocate: true,
                scheme,
                ..Default::default()
            },
        )?;
        Ok(TempPool { pool, path })
    }
}

impl Drop for TempPool {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Median of samples (sorted copy; the mean of the two middle ones for an even count).
pub fn median(samples: &[f64]) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    let mut s = samples.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(super::median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(super::median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(super::median(&[]).is_nan());
    }
}

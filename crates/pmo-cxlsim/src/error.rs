//! The crate's error type. Every fallible public call returns [`CxlsimError`]; nothing in this
//! crate panics on bad input (bad trace text, bad parameters, I/O failures).

use std::path::PathBuf;

/// Errors of the simulator, the trace reader, the checker and the study.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CxlsimError {
    /// A parameter is out of its allowed range; the message names it and the range.
    #[error("invalid parameter {name}: {reason}")]
    InvalidParam {
        /// Parameter name as spelled on the command line.
        name: &'static str,
        /// Why it was rejected.
        reason: String,
    },
    /// A trace line could not be parsed.
    #[error("trace line {line}: {reason}")]
    TraceParse {
        /// 1-based line number.
        line: usize,
        /// What was wrong.
        reason: String,
    },
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The simulated system stopped making progress (no event pending while work remains):
    /// the deadlock the paper describes when acknowledgements wait behind requests.
    #[error("simulated deadlock at {time_ps} ps: {reason}")]
    Deadlock {
        /// Simulated time of the stall.
        time_ps: u64,
        /// Which component was blocked.
        reason: String,
    },
    /// A bounded structure overflowed: a model bug, reported instead of growing without bound.
    #[error("bounded structure {name} overflowed its capacity {capacity}")]
    Overflow {
        /// Structure name.
        name: &'static str,
        /// Its bound.
        capacity: usize,
    },
    /// The run exceeded its event budget (a guard against runaway simulations).
    #[error("event budget of {budget} events exhausted")]
    EventBudget {
        /// The budget.
        budget: u64,
    },
    /// Unknown workload name.
    #[error("unknown workload {0:?} (known: fft, lu-cont, lu-noncont, cholesky, radix, ocean, raytrace)")]
    UnknownWorkload(String),
    /// Drawing a figure (its SVG or its PNG) failed.
    #[error(transparent)]
    Plot(#[from] pmo_plot::PlotError),
}

impl CxlsimError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        CxlsimError::Io {
            path: path.into(),
            source,
        }
    }
    pub(crate) fn param(name: &'static str, reason: impl Into<String>) -> Self {
        CxlsimError::InvalidParam {
            name,
            reason: reason.into(),
        }
    }
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, CxlsimError>;

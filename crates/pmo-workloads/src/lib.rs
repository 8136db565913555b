//! The papers' benchmark suite, ported to PMOs: 2dConv, Gauss, LU, TMM and Cholesky on `f64`
//! matrices that live in PMOs (the kernels compute through the attachment's mapping),
//! multithreaded, psyncing after a fixed number of critical-loop iterations and detaching after
//! every K psyncs, each verified bit for bit against the same kernel run in DRAM.
//!
//! Glossary:
//! - *step*: one iteration of a kernel's critical loop (the unit psyncs are counted in);
//! - *psync interval*: `iters_per_psync` steps, derived from an unprotected run ([`calibrate`](mod@calibrate));
//! - *attach session*: attach, K psyncs, detach (K = `session_psyncs`, the paper's "attach
//!   session size");
//! - *reference*: the kernel run on a `Vec` in DRAM, the verifier's expected result.
//!
//! | module | owns |
//! |---|---|
//! | [`kernels`] | the five kernels, their layouts, inputs, steps and sizes |
//! | [`par`] | splitting one step over scoped threads |
//! | [`mem`] | the only unsafe code: PMO memory lent as `&mut [f64]` |
//! | [`calibrate`](mod@calibrate) | the DRAM reference run and the psync tempo |
//! | [`run`](mod@run) | the attach-session driver, timing and verification |
//!
//! ```no_run
//! use pmo_workloads::{run, RunConfig, Size, Workload};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let pool = pmo_store::Pool::create("/dev/shm/wl.pool".as_ref(), 256 << 20, &Default::default())?;
//! let r = run(&pool, &RunConfig::new(Workload::Gauss, Size::Default))?;
//! assert!(r.verified);
//! # Ok(()) }
//! ```
#![deny(unsafe_code)]

pub mod calibrate;
pub mod error;
pub mod kernels;
pub mod mem;
pub mod par;
pub mod run;

pub use calibrate::{calibrate, default_psync_interval, Calibration, Reference};
pub use error::{Result, WorkloadError};
pub use kernels::{Dims, Size, Workload};
pub use run::{run, run_with_reference, verify_pmo, RunConfig, RunResult, VerifyFailure};

//! pmo-cxlsim: a fast, deterministic simulator of a persistent CXL switch, after Hadi et al.,
//! "The Case for Persistent CXL Switches" (`shared/seeds/001_...`).
//!
//! Glossary:
//! - **line**: 64-byte cache line, named by its number (`address / 64`).
//! - **version / value**: a unique number per store; lines hold versions, not bytes.
//! - **PD**: persistent domain; a persist is complete once it enters the PD.
//! - **PB / PBE**: persist buffer in the first switch / one of its entries.
//! - **PBC / PBCS**: the PB controller / its selector; **PI / PO**: its input / output buffers.
//! - **hop**: one CXL switch between host and PM; `hops = 0` puts PM on the memory bus.
//! - **drain**: the write a PBE sends to PM; the entry stays until PM acknowledges it.
//!
//! Codemap: `config` (parameters), `trace` (format, reader, recorder), `kernels` (workload
//! generators), `cache` (cache arrays), `pb` (the PB table), `model` (the checker's sequential
//! model of the persistent domain, which `sim` runs), `sim` (the event-driven model), `checker`
//! (the model's public face and crash-checked runs), `study` (the paper's figures), `cli`.
//! This crate depends on no other pmo crate but `pmo-plot` (its figures, SVG and PNG).
//!
//! Record a persistence pattern from your own code and see what a persistent switch does to it:
//!
//! ```
//! use pmo_cxlsim::{simulate, Params, Recorder, Scheme};
//!
//! // One thread updates 64 words, persisting each line and fencing after each one.
//! let mut region = Recorder::new("example", 0x1000_0000, 64, 1, 10_000)?;
//! for word in 0..64 {
//!     region.compute(0, 20);
//!     region.write(0, word, word as u64);
//!     if word % 8 == 7 {
//!         region.flush(0, word);
//!         region.fence(0);
//!     }
//! }
//! let trace = region.finish();
//! let nopb = simulate(&Params { scheme: Scheme::NoPb, cores: 1, ..Params::default() }, &trace)?;
//! let pb = simulate(&Params { scheme: Scheme::Pb, cores: 1, ..Params::default() }, &trace)?;
//! assert_eq!(nopb.persists, 8);
//! assert!(pb.persist_latency_ns() < nopb.persist_latency_ns());
//! assert_eq!(pb.violation_count, 0);
//! # Ok::<(), pmo_cxlsim::CxlsimError>(())
//! ```

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod cache;
pub mod checker;
pub mod cli;
pub mod config;
pub mod error;
pub mod kernels;
mod model;
pub mod pb;
pub mod sim;
pub mod study;
pub mod trace;

pub use config::{Fault, Params, Scheme};
pub use error::{CxlsimError, Result};
pub use sim::{simulate, Simulator, Stats};
pub use trace::{Op, OpKind, Recorder, Trace};

//! Filebench on PMOs: Filebench's workload language, interpreted with threads over the pmo
//! file store (`pmo-fs`) or a plain directory (the POSIX peer), and the benchmark that runs
//! the papers' four personalities over the protection design space.
//!
//! | module | owns |
//! |---|---|
//! | [`lang`] | tokens and statements of `.f` files; syntax errors with file, line, column |
//! | [`model`] | evaluation: variables, overrides, `cvar-gamma`, filesets, threads, flowops |
//! | [`personalities`] | the project's own four default personalities (fileserver, varmail, webproxy, webserver) |
//! | [`backend`] | where files live: the pmo file store, or a directory through POSIX calls |
//! | [`bench`](mod@bench) | `pmo bench filebench`: the design-space matrix, records, tables, figures |
//! | [`run`] | the interpreter: fileset setup, threads, flowops, sync modes, per-flowop figures |
//! | [`events`] | `eventgen`, and what `opslimit` and `finishoncount` count (Filebench's semantics) |
//! | [`fuzzing`] | the body shared by the workload-language fuzz target and its smoke test |
//! | [`leftovers`] | the scratch pools and trees a killed run left, removed by the next run |
#![deny(unsafe_code)]

pub mod backend;
pub mod bench;
pub mod events;
pub mod fuzzing;
pub mod lang;
pub mod leftovers;
pub mod model;
pub mod personalities;
pub mod randvar;
pub mod run;
pub mod sync;

pub use lang::LangError;
pub use model::Workload;

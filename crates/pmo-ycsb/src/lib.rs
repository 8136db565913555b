//! YCSB's core workloads over a small key-value interface.
//!
//! - [`Workload`]: a core workload's properties, read from YCSB's own files (`workloada` ..
//!   `workloadf`: `../shared/ycsb/` in this project) or the built-in defaults of the same
//!   values ([`Workload::core`]).
//! - [`gen`]: YCSB's generators: zipfian (constant 0.99) and scrambled zipfian, uniform,
//!   latest (skewed latest), the FNV-1a key hash.
//! - [`KvStore`]: what a store implements to be driven (insert, read, update, scan).
//! - [`fuzzing`]: the body shared by the property-file fuzz target and its smoke test.
//! - [`run`]: the load phase and the run phase, timing each operation ([`Report`]: throughput,
//!   p50/p99/p99.9 per operation type, the latency samples for a CDF).
#![deny(unsafe_code)]

pub mod driver;
pub mod fuzzing;
pub mod gen;
pub mod workload;

pub use driver::{load, run, OpKind, OpStats, Report};
pub use workload::{Distribution, Workload};

/// The error a store returns.
pub type StoreError = Box<dyn std::error::Error + Send + Sync>;

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
pub enum YcsbError {
    #[error("workload file {path}: {msg}")]
    Workload { path: String, msg: String },
    #[error("store {store}: {op}: {source}")]
    Store {
        store: String,
        op: &'static str,
        #[source]
        source: StoreError,
    },
    #[error("store {store}: key {key} was loaded but reads as missing")]
    Missing { store: String, key: String },
}

/// A key-value store YCSB can drive. Records are opaque bytes (`fieldcount` x `fieldlength`);
/// every write is durable when it returns (the store's synchronous commit).
pub trait KvStore {
    /// A label for reports: `lmdb-pmo-secure`, `lmdb-shm`...
    fn name(&self) -> String;
    /// Insert a new record.
    fn insert(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError>;
    /// Replace a record's value.
    fn update(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError>;
    /// Read a record into `out`; false if missing.
    fn read(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, StoreError>;
    /// Read up to `count` records in key order from the first key >= `start`; returns how many.
    fn scan(&mut self, start: &[u8], count: usize) -> Result<usize, StoreError>;
    /// False for a store without key order (a hash map): a driver skips YCSB E for it.
    fn scans(&self) -> bool {
        true
    }
}

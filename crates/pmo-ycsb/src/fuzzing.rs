//! Shared body of the YCSB property-file fuzz target (`fuzz/fuzz_targets/ycsb_workload.rs`)
//! and of its smoke test (`tests/fuzz_smoke.rs`): any bytes, parsed as a workload file; a
//! workload that parses is loaded and run at a small size (at most [`MAX_RECORDS`] records and
//! [`MAX_OPS`] operations, records of at most [`MAX_RECORD_BYTES`]) on an in-memory store. A
//! bad file must be an error message; a panic, a hang or a huge allocation is a defect, and so
//! is a run that fails on a store that loses nothing.

use std::collections::BTreeMap;

use crate::{load, run, KvStore, StoreError, Workload};

/// Records loaded at most (the file's `recordcount` is cut to this).
pub const MAX_RECORDS: u64 = 200;
/// Operations run at most (`operationcount` cut to this).
pub const MAX_OPS: u64 = 200;
/// Bytes of a record at most (`fieldlength` cut so that `fieldcount` x it fits).
pub const MAX_RECORD_BYTES: usize = 256;

/// How far [`parse_and_run`] got.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reached {
    /// The file is refused.
    Refused,
    /// It parses; the run is refused (no record to read: `recordcount=0`).
    RunRefused,
    /// Loaded and run.
    Ran,
}

/// An in-memory store that checks what the driver asks of it.
#[derive(Default)]
pub struct MapStore(pub BTreeMap<Vec<u8>, Vec<u8>>);

impl KvStore for MapStore {
    fn name(&self) -> String {
        "map".into()
    }
    fn insert(&mut self, k: &[u8], v: &[u8]) -> Result<(), StoreError> {
        if self.0.insert(k.to_vec(), v.to_vec()).is_some() {
            return Err("duplicate insert".into());
        }
        Ok(())
    }
    fn update(&mut self, k: &[u8], v: &[u8]) -> Result<(), StoreError> {
        *self.0.get_mut(k).ok_or("update of a missing key")? = v.to_vec();
        Ok(())
    }
    fn read(&mut self, k: &[u8], out: &mut Vec<u8>) -> Result<bool, StoreError> {
        out.clear();
        Ok(self.0.get(k).map(|v| out.extend_from_slice(v)).is_some())
    }
    fn scan(&mut self, start: &[u8], n: usize) -> Result<usize, StoreError> {
        Ok(self.0.range(start.to_vec()..).take(n).count())
    }
}

/// Parse `data` as a YCSB property file; when it parses, load and run it at a small size.
pub fn parse_and_run(data: &[u8]) -> Reached {
    let text = String::from_utf8_lossy(data);
    let w = match Workload::parse("fuzz", &text) {
        Ok(w) => w,
        Err(msg) => {
            assert!(!msg.is_empty(), "an empty error");
            return Reached::Refused;
        }
    };
    let props = [w.read, w.update, w.insert, w.scan, w.read_modify_write];
    assert!(
        props.iter().all(|p| p.is_finite() && *p >= 0.0) && props.iter().sum::<f64>() > 0.0,
        "{props:?}"
    );
    assert!(w.record_len() <= crate::workload::MAX_RECORD_LEN);
    assert!(w.max_scan_length >= 1);
    let small = Workload {
        record_count: w.record_count.min(MAX_RECORDS),
        operation_count: w.operation_count.min(MAX_OPS),
        field_length: w.field_length.min(MAX_RECORD_BYTES / w.field_count.max(1)),
        ..w
    };
    let mut store = MapStore::default();
    let loaded = load(&mut store, &small, 1).expect("the load phase on a map store");
    assert_eq!(loaded.ops, small.record_count);
    assert_eq!(store.0.len() as u64, small.record_count);
    match run(&mut store, &small, 1) {
        Ok(r) => {
            assert_eq!(r.ops, small.operation_count);
            let ops: usize = r.per_op.iter().map(|(_, s)| s.ns.len()).sum();
            assert_eq!(ops as u64, small.operation_count);
            Reached::Ran
        }
        // Only a run with no record to read is refused; a map store loses nothing.
        Err(crate::YcsbError::Workload { msg, .. }) if small.record_count == 0 => {
            assert!(msg.contains("recordcount=0"), "{msg}");
            Reached::RunRefused
        }
        Err(e) => panic!("the run failed on a map store: {e}"),
    }
}

//! pmo-typed's persistent maps as YCSB stores, through pmo-typed's public API only:
//! [`TypedBTreeKv`] is `pmo_typed::kv::PKv` (records in a `PBTreeMap`, scans in key order) and
//! [`TypedHashKv`] a `PHashMap` of the same records (no scans). Both psync after every write,
//! so a write is durable when it returns, as YCSB's other stores' are.

use pmo_typed::kv::{PKv, KEY_BYTES};
use pmo_typed::{PHashMap, PVec, Persistent, TypedError, TypedHeap};
use pmo_ycsb::{KvStore, StoreError};

use crate::StoresError;

/// `PKv` (a `PBTreeMap`) driven by YCSB.
pub struct TypedBTreeKv {
    kv: PKv,
    label: String,
}

impl TypedBTreeKv {
    /// A store in `heap` (a fresh typed heap, or one a `PKv` made), psyncing every write.
    pub fn new(heap: TypedHeap, label: &str) -> Result<TypedBTreeKv, StoresError> {
        Ok(TypedBTreeKv {
            kv: PKv::new(heap, 1)?,
            label: label.into(),
        })
    }

    /// psync what is pending and detach.
    pub fn close(self) -> Result<(), StoresError> {
        Ok(self.kv.close()?)
    }
}

impl KvStore for TypedBTreeKv {
    fn name(&self) -> String {
        self.label.clone()
    }
    fn insert(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        Ok(self.kv.insert(key, value)?)
    }
    fn update(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        Ok(self.kv.update(key, value)?)
    }
    fn read(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, StoreError> {
        Ok(self.kv.read(key, out)?)
    }
    fn scan(&mut self, start: &[u8], count: usize) -> Result<usize, StoreError> {
        Ok(self.kv.scan(start, count)?)
    }
}

/// The root of a [`TypedHashKv`] heap.
#[derive(Persistent, Default)]
#[repr(C)]
pub struct HashRoot {
    /// Records by zero-padded key (as `PKv` pads them).
    pub records: PHashMap<[u8; KEY_BYTES], PVec<u8>>,
}

/// A `PHashMap` of records driven by YCSB.
pub struct TypedHashKv {
    heap: TypedHeap,
    label: String,
}

/// `key` zero-padded to a map key: 1..=KEY_BYTES bytes with no NUL (the rule of `PKv`).
fn pad(key: &[u8]) -> Result<[u8; KEY_BYTES], TypedError> {
    if key.is_empty() || key.len() > KEY_BYTES || key.contains(&0) {
        return Err(TypedError::InvalidKey { len: key.len() });
    }
    let mut k = [0u8; KEY_BYTES];
    k[..key.len()].copy_from_slice(key);
    Ok(k)
}

impl TypedHashKv {
    /// A store in `heap`, psyncing every write.
    pub fn new(mut heap: TypedHeap, label: &str) -> Result<TypedHashKv, StoresError> {
        heap.root::<HashRoot>()?;
        Ok(TypedHashKv {
            heap,
            label: label.into(),
        })
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), TypedError> {
        let k = pad(key)?;
        let (r, h) = self.heap.root::<HashRoot>()?;
        let new = !r.records.contains_key(h, &k)?;
        if new {
            // An empty vector: a PVec fills in place (it must live in the PMO).
            r.records.insert(h, k, PVec::default())?;
        }
        let set = r
            .records
            .get_mut(h, &k)?
            .ok_or(TypedError::Corrupt("record vanished after insert"))?
            .set_from_slice(h, value);
        // A value that does not fit: an old one is kept (`set_from_slice`), a new key removed
        // again, so a failed put leaves the map as it was.
        if let Err(e) = set {
            if new {
                r.records.remove(h, &k)?;
            }
            return Err(e);
        }
        self.heap.psync()?;
        Ok(())
    }

    /// Records in the map.
    pub fn len(&self) -> Result<usize, StoresError> {
        Ok(self.heap.root_ref::<HashRoot>()?.0.records.len())
    }

    /// True when the map holds no record.
    pub fn is_empty(&self) -> Result<bool, StoresError> {
        Ok(self.len()? == 0)
    }

    /// Detach (every write was psynced when it returned).
    pub fn close(self) -> Result<(), StoresError> {
        Ok(self.heap.detach()?)
    }
}

impl KvStore for TypedHashKv {
    fn name(&self) -> String {
        self.label.clone()
    }
    fn insert(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        Ok(self.put(key, value)?)
    }
    fn update(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        Ok(self.put(key, value)?)
    }
    fn read(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, StoreError> {
        let k = pad(key)?;
        let (r, h) = self.heap.root_ref::<HashRoot>()?;
        match r.records.get(h, &k)? {
            Some(v) => {
                out.clear();
                out.extend_from_slice(v.as_slice(h)?);
                Ok(true)
            }
            None => Ok(false),
        }
    }
    fn scan(&mut self, _start: &[u8], _count: usize) -> Result<usize, StoreError> {
        Err(StoresError::NoScan {
            store: self.label.clone(),
        }
        .into())
    }
    fn scans(&self) -> bool {
        false
    }
}

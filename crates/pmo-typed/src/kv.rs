//! [`PKv`]: a byte-keyed, durable key-value store on a `PBTreeMap`, the shape a YCSB driver
//! drives (insert, update, read, scan in key order; every write durable when it returns).
//!
//! Keys are byte strings of 1..=[`KEY_BYTES`] bytes with no NUL byte, stored zero-padded in a
//! `[u8; KEY_BYTES]`: zero-padding keeps the byte strings' lexicographic order (a shorter
//! prefix sorts first), so scans run in key order. Values are `PVec<u8>`. `sync_every = 1`
//! psyncs after every write (the durable-per-operation contract); larger values batch writes
//! into one psync (all of them durable at once, or none after a crash).
//!
//! Plugging into `pmo-ycsb`: its `KvStore` maps one to one (`insert` → [`PKv::insert`],
//! `update` → [`PKv::update`], `read` → [`PKv::read`], `scan` → [`PKv::scan`]).

use crate::{PBTreeMap, PVec, Persistent, Result, TypedError, TypedHeap};

/// Longest key, in bytes.
pub const KEY_BYTES: usize = 32;

/// The root of a [`PKv`] heap.
#[derive(Persistent, Default)]
#[repr(C)]
pub struct KvRoot {
    /// Records by zero-padded key.
    pub records: PBTreeMap<[u8; KEY_BYTES], PVec<u8>>,
}

/// A byte-keyed key-value store in a typed heap.
pub struct PKv {
    heap: TypedHeap,
    sync_every: u64,
    unsynced: u64,
}

/// Pad `key` to a map key: 1..=KEY_BYTES bytes with no NUL, else `InvalidKey`.
fn pad(key: &[u8]) -> Result<[u8; KEY_BYTES]> {
    if key.is_empty() || key.len() > KEY_BYTES || key.contains(&0) {
        return Err(TypedError::InvalidKey { len: key.len() });
    }
    let mut k = [0u8; KEY_BYTES];
    k[..key.len()].copy_from_slice(key);
    Ok(k)
}

impl PKv {
    /// A store over `heap`; psync after every `sync_every` writes (at least 1).
    pub fn new(heap: TypedHeap, sync_every: u64) -> Result<PKv> {
        let mut kv = PKv {
            heap,
            sync_every: sync_every.max(1),
            unsynced: 0,
        };
        kv.heap.root::<KvRoot>()?;
        Ok(kv)
    }

    fn wrote(&mut self) -> Result<()> {
        self.unsynced += 1;
        if self.unsynced >= self.sync_every {
            self.sync()?;
        }
        Ok(())
    }

    /// psync the writes not yet durable.
    pub fn sync(&mut self) -> Result<()> {
        if self.unsynced > 0 {
            self.heap.psync()?;
            self.unsynced = 0;
        }
        Ok(())
    }

    /// Insert or replace `key`'s value.
    pub fn insert(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        let k = pad(key)?;
        let (r, h) = self.heap.root::<KvRoot>()?;
        let new = !r.records.contains_key(h, &k)?;
        if new {
            r.records.insert(h, k, PVec::default())?;
        }
        let v = r
            .records
            .get_mut(h, &k)?
            .ok_or_else(|| TypedError::Corrupt("record vanished after insert"))?;
        // A value that does not fit leaves an old one as it was (`set_from_slice`); a new key
        // is removed again, so the store is as it was, not holding the key with no value.
        if let Err(e) = v.set_from_slice(h, value) {
            if new {
                r.records.remove(h, &k)?;
            }
            return Err(e);
        }
        self.wrote()
    }

    /// Replace `key`'s value (the same as insert: a missing key is created).
    pub fn update(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.insert(key, value)
    }

    /// Read `key`'s value into `out`: false if missing.
    pub fn read(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        let k = pad(key)?;
        let (r, h) = self.heap.root_ref::<KvRoot>()?;
        match r.records.get(h, &k)? {
            Some(v) => {
                out.clear();
                out.extend_from_slice(v.as_slice(h)?);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Remove `key`: false if missing.
    pub fn remove(&mut self, key: &[u8]) -> Result<bool> {
        let k = pad(key)?;
        let (r, h) = self.heap.root::<KvRoot>()?;
        let found = r.records.remove(h, &k)?;
        if found {
            self.wrote()?;
        }
        Ok(found)
    }

    /// Visit up to `count` records in key order from the first key >= `start`: returns how
    /// many were visited (their bytes are read, as a scan does).
    pub fn scan(&mut self, start: &[u8], count: usize) -> Result<usize> {
        let k = pad(start)?;
        let (r, h) = self.heap.root_ref::<KvRoot>()?;
        let mut n = 0;
        let mut bytes = 0usize;
        for e in r.records.range(h, k..)?.take(count) {
            let (_, v) = e?;
            bytes = bytes.wrapping_add(v.as_slice(h)?.len());
            n += 1;
        }
        std::hint::black_box(bytes);
        Ok(n)
    }

    /// Number of records.
    pub fn len(&self) -> Result<usize> {
        Ok(self.heap.root_ref::<KvRoot>()?.0.records.len())
    }

    /// True when there are no records.
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// psync what is pending and detach.
    pub fn close(mut self) -> Result<()> {
        self.sync()?;
        self.heap.detach()
    }

    /// The heap (checks, statistics).
    pub fn heap(&self) -> &TypedHeap {
        &self.heap
    }
}

//! The YCSB store over an LMDB environment: one write transaction per insert or update,
//! committed synchronously (durable when it returns), one read transaction per read or scan.

use pmo_ycsb::{KvStore, StoreError};

use crate::Env;

/// An environment driven by YCSB.
pub struct LmdbKv {
    pub env: Env,
    pub label: String,
}

impl KvStore for LmdbKv {
    fn name(&self) -> String {
        self.label.clone()
    }
    fn insert(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        Ok(self.env.put1(key, value)?)
    }
    fn update(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        Ok(self.env.put1(key, value)?)
    }
    fn read(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, StoreError> {
        let t = self.env.begin(true)?;
        out.clear();
        let found = t.walk_one(key, |v| out.extend_from_slice(v))?;
        Ok(found)
    }
    fn scan(&mut self, start: &[u8], count: usize) -> Result<usize, StoreError> {
        let t = self.env.begin(true)?;
        let mut left = count;
        let mut bytes = 0usize;
        let n = t.walk(Some(start), |_, v| {
            bytes += v.len(); // touch each record as YCSB's readallfields does
            left -= 1;
            left > 0
        })?;
        std::hint::black_box(bytes);
        Ok(n)
    }
}

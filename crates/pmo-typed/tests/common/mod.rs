//! Scratch pools for the integration tests.
#![allow(dead_code)]

use pmo_store::{KdfParams, Pool, PoolOptions};
use pmo_typed::{PBTreeMap, PBox, PHashMap, PString, PVec, Persistent};
use std::path::PathBuf;

pub const KEY: &[u8] = b"pmo-typed-test-key";

/// A pool file in /dev/shm (or the temp dir), removed on drop.
pub struct ScratchPool {
    pub pool: Pool,
    pub path: PathBuf,
}

impl ScratchPool {
    pub fn new(tag: &str, bytes: u64) -> ScratchPool {
        let path = std::env::temp_dir().join(format!(
            "pmo-typed-{tag}-{}-{}.pool",
            std::process::id(),
            rand::random::<u32>()
        ));
        let _ = std::fs::remove_file(&path);
        let opts = PoolOptions {
            kdf: KdfParams::INSECURE_FAST,
            ..Default::default()
        };
        let pool = Pool::create(&path, bytes, &opts).expect("create pool");
        ScratchPool { pool, path }
    }

    /// Close and reopen the pool (as another run of the program would).
    pub fn reopen(&mut self) {
        self.pool = Pool::open(&self.path).expect("reopen pool");
    }
}

impl Drop for ScratchPool {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A point, for `PBox<Point>`.
#[derive(Persistent, Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct Point {
    pub x: i64,
    pub y: i64,
}

/// The root of the API and corruption tests: one of each container.
#[derive(Persistent, Default)]
#[repr(C)]
pub struct Root {
    pub counter: u64,
    pub name: PString,
    pub boxed: PBox<Point>,
    pub list: PVec<u64>,
    pub names: PVec<PString>,
    pub hash: PHashMap<u64, PString>,
    pub tree: PBTreeMap<u64, u64>,
}

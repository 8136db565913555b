//! The stores of this crate as `pmo bench lmdb|ycsb` runs them beside LMDB
//! (`pmo_lmdb::bench::LmdbBenchOptions::others`).

use std::path::Path;

use pmo_bench::{BenchError, TempPool};
use pmo_lmdb::bench::{OtherStore, YcsbStore};
use pmo_store::Scheme;
use pmo_typed::TypedHeap;

use crate::lmdb10;
use crate::pmdk::{self, PmdkKv};
use crate::typed::{TypedBTreeKv, TypedHashKv};
use crate::StoresError;

const KEY: &[u8] = b"bench";

fn err(e: StoresError) -> BenchError {
    BenchError::Other(e.to_string())
}

/// Room for `bytes` of records three times over (shadow pages, allocator slack), 32 MiB at least.
fn room(bytes: u64) -> u64 {
    (bytes * 3).max(32 << 20).next_multiple_of(1 << 20)
}

fn open_pmdk(label: &str, dir: &Path, bytes: u64, records: u64) -> Result<YcsbStore, BenchError> {
    let path = dir.join(format!("pmo-ycsb-{label}-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let kv = PmdkKv::create(&path, room(bytes), records).map_err(err)?;
    Ok(YcsbStore::new(Box::new(kv), None))
}

/// A fresh typed heap in a `secure` PMO of a scratch pool.
fn typed_heap(label: &str, dir: &Path, bytes: u64) -> Result<(TypedHeap, TempPool), BenchError> {
    let size = room(bytes);
    let pool = TempPool::new(
        dir,
        &format!("ycsb-{label}"),
        size * 2 + (64 << 20),
        Scheme::SECURE,
    )?;
    let heap = TypedHeap::create(&pool.pool, "ycsb", size, KEY).map_err(|e| err(e.into()))?;
    Ok((heap, pool))
}

fn open_typed_btree(label: &str, dir: &Path, bytes: u64, _: u64) -> Result<YcsbStore, BenchError> {
    let (heap, pool) = typed_heap(label, dir, bytes)?;
    let kv = TypedBTreeKv::new(heap, label).map_err(err)?;
    Ok(YcsbStore::new(Box::new(kv), Some(pool)))
}

fn open_typed_hash(label: &str, dir: &Path, bytes: u64, _: u64) -> Result<YcsbStore, BenchError> {
    let (heap, pool) = typed_heap(label, dir, bytes)?;
    let kv = TypedHashKv::new(heap, label).map_err(err)?;
    Ok(YcsbStore::new(Box::new(kv), Some(pool)))
}

/// `pmdk-hash` (when this build has PMDK; else a note on stderr says why not), `typed-btree`,
/// `typed-hash`, and `lmdb10-enc` (LMDB 1.0.2 encrypted, also in the commit benchmark and the
/// cold scan).
pub fn stores() -> Vec<OtherStore> {
    let mut v = Vec::new();
    if pmdk::available() {
        v.push(OtherStore {
            label: "pmdk-hash".into(),
            open: open_pmdk,
            commit: false,
        });
    } else {
        eprintln!(
            "[lmdb] ycsb: pmdk-hash left out: {}",
            StoresError::Unavailable
        );
    }
    v.push(OtherStore {
        label: "typed-btree".into(),
        open: open_typed_btree,
        commit: false,
    });
    v.push(OtherStore {
        label: "typed-hash".into(),
        open: open_typed_hash,
        commit: false,
    });
    v.push(OtherStore {
        label: lmdb10::LABEL.into(),
        open: lmdb10::open_bench,
        commit: true,
    });
    v
}

//! Each store of this crate through YCSB's load and run phases (the driver checks every read
//! against the record it wrote), and the typed stores' writes durable across a re-attach.

use std::path::PathBuf;

use pmo_store::{KdfParams, Pool, PoolOptions};
use pmo_typed::TypedHeap;
use pmo_ycsb::{KvStore, Workload};
use pmo_ycsb_stores::typed::{TypedBTreeKv, TypedHashKv};

const KEY: &[u8] = b"ycsb-stores-test";

fn dir() -> PathBuf {
    if std::path::Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    }
}

struct TmpPool {
    pool: Option<Pool>,
    path: PathBuf,
}

impl TmpPool {
    fn new(tag: &str) -> TmpPool {
        let path = dir().join(format!("pmo-ycsb-stores-{tag}-{}.pool", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let opts = PoolOptions {
            kdf: KdfParams::INSECURE_FAST,
            ..Default::default()
        };
        TmpPool {
            pool: Some(Pool::create(&path, 64 << 20, &opts).unwrap()),
            path,
        }
    }
    fn pool(&self) -> &Pool {
        self.pool.as_ref().unwrap()
    }
}

impl Drop for TmpPool {
    fn drop(&mut self) {
        drop(self.pool.take());
        let _ = std::fs::remove_file(&self.path);
    }
}

/// YCSB `letter` scaled down, load then run; returns the run's operation count.
fn drive(store: &mut dyn KvStore, letter: char) -> u64 {
    let mut w = Workload::core(letter).unwrap();
    w.record_count = 300;
    w.operation_count = 600;
    pmo_ycsb::load(store, &w, 1).unwrap();
    let r = pmo_ycsb::run(store, &w, 2).unwrap();
    assert!(!r.per_op.is_empty());
    r.ops
}

#[test]
fn typed_btree_runs_every_workload_and_keeps_writes() {
    let t = TmpPool::new("btree");
    let heap = TypedHeap::create(t.pool(), "kv", 24 << 20, KEY).unwrap();
    let mut s = TypedBTreeKv::new(heap, "typed-btree").unwrap();
    assert!(s.scans());
    for l in ['a', 'e'] {
        assert_eq!(drive(&mut s, l), 600);
    }
    assert_eq!(s.scan(b"user", 10).unwrap(), 10);
    s.insert(b"durable", b"yes").unwrap();
    s.close().unwrap();
    let heap = TypedHeap::open(t.pool(), "kv", KEY).unwrap();
    let mut s = TypedBTreeKv::new(heap, "typed-btree").unwrap();
    let mut out = Vec::new();
    assert!(s.read(b"durable", &mut out).unwrap());
    assert_eq!(out, b"yes");
}

#[test]
fn typed_hash_runs_and_keeps_writes_and_refuses_scans() {
    let t = TmpPool::new("hash");
    let heap = TypedHeap::create(t.pool(), "kv", 24 << 20, KEY).unwrap();
    let mut s = TypedHashKv::new(heap, "typed-hash").unwrap();
    assert!(!s.scans());
    assert_eq!(drive(&mut s, 'a'), 600);
    let n = s.len().unwrap();
    assert!(n >= 300, "{n} records after loading 300");
    assert!(s.scan(b"user", 5).is_err());
    assert!(s.insert(&[b'k'; 40], b"v").is_err(), "a key over 32 bytes");
    s.update(b"durable", b"one").unwrap();
    s.update(b"durable", b"two").unwrap();
    s.close().unwrap();
    let heap = TypedHeap::open(t.pool(), "kv", KEY).unwrap();
    let mut s = TypedHashKv::new(heap, "typed-hash").unwrap();
    let mut out = Vec::new();
    assert!(s.read(b"durable", &mut out).unwrap());
    assert_eq!(out, b"two");
    assert_eq!(
        s.len().unwrap(),
        n + 1,
        "the loaded records and \"durable\""
    );
}

#[test]
fn pmdk_store_runs_or_says_why_not() {
    let p = dir().join(format!("pmo-ycsb-stores-pmdk-{}", std::process::id()));
    match pmo_ycsb_stores::pmdk::PmdkKv::create(&p, 32 << 20, 512) {
        Ok(mut s) => {
            assert!(pmo_ycsb_stores::pmdk::available());
            assert!(!s.scans());
            assert_eq!(drive(&mut s, 'a'), 600);
            assert!(s.len() >= 300);
        }
        Err(e) => {
            assert!(!pmo_ycsb_stores::pmdk::available(), "{e}");
            assert!(e.to_string().contains("libpmemobj"), "{e}");
        }
    }
    assert!(!p.exists());
}

/// A record too large for the heap: the insert fails and the store is as it was (the hash
/// store left the key behind with an empty value).
#[test]
fn a_record_too_large_leaves_the_typed_stores_as_they_were() {
    let tp = TmpPool::new("toolarge");
    let heap = TypedHeap::create(tp.pool(), "h", 1 << 20, KEY).unwrap();
    let mut hash = TypedHashKv::new(heap, "typed-hash").unwrap();
    let big = vec![1u8; 4 << 20];
    let mut out = Vec::new();
    hash.insert(b"old", b"kept").unwrap();
    assert!(hash.insert(b"new", &big).is_err());
    assert!(hash.update(b"old", &big).is_err());
    assert!(!hash.read(b"new", &mut out).unwrap(), "left {out:?}");
    assert!(hash.read(b"old", &mut out).unwrap());
    assert_eq!(out, b"kept");
    assert_eq!(hash.len().unwrap(), 1);
}

//! The durable update YCSB A and F are made of, alone: `PHashMap` (`typed-hash`, in a PMO of
//! `PMO_SCHEME`'s scheme, else `secure`) against PMDK's hash map (`pmdk-hash`, where this
//! build has it), each loaded with RECORDS records of 1 KiB, then UPDATES updates of random
//! keys, each durable when it returns. Prints the median and mean µs per update; for
//! profiling (`perf record` around it) and for a cipher's A/B.
//!
//! ```text
//! cargo run --release -p pmo-ycsb-stores --example hash_update -- [RECORDS] [UPDATES]
//! ```

use std::time::Instant;

use pmo_bench::TempPool;
use pmo_store::Scheme;
use pmo_typed::TypedHeap;
use pmo_ycsb::KvStore;
use pmo_ycsb_stores::pmdk::PmdkKv;
use pmo_ycsb_stores::typed::TypedHashKv;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn run(store: &mut dyn KvStore, records: u64, updates: u64) -> Res<()> {
    let value = vec![0x5au8; 1024];
    for i in 0..records {
        store.insert(format!("user{i:012}").as_bytes(), &value)?;
    }
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut t = Vec::with_capacity(updates as usize);
    for n in 0..updates {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let key = format!("user{:012}", x % records);
        let v = vec![n as u8; 1024];
        let s = Instant::now();
        store.update(key.as_bytes(), &v)?;
        t.push(s.elapsed().as_secs_f64() * 1e6);
    }
    let mean = t.iter().sum::<f64>() / t.len() as f64;
    t.sort_by(f64::total_cmp);
    println!(
        "{:24} update: median {:.2} us, mean {:.2} us ({updates} updates of {records} records)",
        store.name(),
        t[t.len() / 2],
        mean
    );
    Ok(())
}

fn main() -> Res<()> {
    let mut args = std::env::args().skip(1);
    let records: u64 = args.next().map_or(Ok(10_000), |a| a.parse())?;
    let updates: u64 = args.next().map_or(Ok(100_000), |a| a.parse())?;
    let dir = std::path::Path::new("/dev/shm");
    let bytes = records * 1200 * 3 + (64 << 20);
    {
        let scheme = Scheme::from_env()?.unwrap_or(Scheme::SECURE);
        let pool = TempPool::new(dir, "hash-update", bytes * 2 + (64 << 20), scheme)?;
        let heap = TypedHeap::create(&pool.pool, "h", bytes, b"key")?;
        let mut kv = TypedHashKv::new(heap, &format!("typed-hash ({})", scheme.name()))?;
        run(&mut kv, records, updates)?;
        kv.close()?;
    }
    let path = dir.join(format!("pmo-hash-update-pmdk-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    match PmdkKv::create(&path, bytes, records) {
        Ok(mut kv) => {
            run(&mut kv, records, updates)?;
            drop(kv);
            let _ = std::fs::remove_file(&path);
        }
        Err(e) => println!("pmdk-hash: {e}"),
    }
    Ok(())
}

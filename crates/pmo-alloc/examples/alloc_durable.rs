//! The cost of durability: one op = allocate a node, fill it, link it at the head of a list
//! rooted at the heap's root, psync (under `quiesce`), on a PMO attached from a pool. The peer
//! is PMDK's `pmdk_tx_alloc_link` (pmo-peers, docs/peers.md). Also prints the same op without
//! the allocator (write a node into a preallocated array, link, psync) to isolate the
//! allocator's share.
//!
//! Run: `cargo run --release -p pmo-alloc --example alloc_durable -- [--ops N] [--repeats N]
//!       [--pool PATH]` (default pool: /dev/shm, removed afterwards).

use pmo_alloc::{Heap, HeapOptions, Protection};
use pmo_store::{KdfParams, Perm, Pool, PoolOptions};
use std::path::PathBuf;
use std::time::Instant;

const KEY: &[u8] = b"alloc-durable";
const PMO_BYTES: u64 = 64 << 20;
const SIZES: [usize; 3] = [64, 256, 4096];

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// µs per alloc + link + psync.
fn alloc_link_psync(pool: &Pool, name: &str, size: usize, ops: usize) -> f64 {
    let a = pool.attach(name, Perm::Write, KEY).expect("attach");
    // SAFETY: the attachment keeps the PMO mapped at its address until detach, after the heap
    // is dropped; only the heap and the blocks it hands out are touched.
    let heap = unsafe {
        Heap::format(
            a.addr(),
            a.len(),
            &HeapOptions {
                subheaps: 0,
                protection: Protection::Off,
            },
        )
    }
    .expect("format");
    {
        let _q = heap.quiesce();
        a.psync().expect("psync");
    }
    let start = Instant::now();
    for i in 0..ops {
        let head = heap
            .root()
            .expect("root")
            .map_or(0usize, |p| p.as_ptr() as usize);
        let node = heap.alloc(size, 16).expect("alloc");
        // SAFETY: a fresh block of `size` >= 16 bytes: the link then the payload.
        unsafe {
            node.as_ptr().cast::<usize>().write(head);
            std::ptr::write_bytes(node.as_ptr().add(8), i as u8, size - 8);
        }
        heap.set_root(Some(node)).expect("link");
        let _q = heap.quiesce();
        a.psync().expect("psync");
    }
    let us = start.elapsed().as_secs_f64() * 1e6 / ops as f64;
    drop(heap);
    a.detach().expect("detach");
    us
}

/// µs per write-node + link + psync with nodes at fixed places (no allocator).
fn write_link_psync(pool: &Pool, name: &str, size: usize, ops: usize) -> f64 {
    let a = pool.attach(name, Perm::Write, KEY).expect("attach");
    let base = a.addr();
    let slots = (a.len() - 4096) / size;
    let start = Instant::now();
    for i in 0..ops {
        let off = 4096 + (i % slots) * size;
        // SAFETY: `off + size <= len`: inside the attached mapping, which only this loop uses.
        unsafe {
            let node = base.add(off);
            node.cast::<usize>().write(base.cast::<usize>().read());
            std::ptr::write_bytes(node.add(8), i as u8, size - 8);
            base.cast::<usize>().write(node as usize);
        }
        a.psync().expect("psync");
    }
    let us = start.elapsed().as_secs_f64() * 1e6 / ops as f64;
    a.detach().expect("detach");
    us
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let ops: usize = flag("--ops").and_then(|s| s.parse().ok()).unwrap_or(2000);
    let repeats: usize = flag("--repeats").and_then(|s| s.parse().ok()).unwrap_or(3);
    let path = flag("--pool").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(format!(
            "/dev/shm/pmo-alloc-durable-{}.pool",
            std::process::id()
        ))
    });
    let _ = std::fs::remove_file(&path);
    let opts = PoolOptions {
        kdf: KdfParams::INSECURE_FAST,
        ..Default::default()
    };
    let pool = Pool::create(&path, 1 << 30, &opts).expect("create pool");
    println!(
        "# alloc + link + psync per op, one thread, {ops} ops, median of {repeats}; pool {}",
        path.display()
    );
    println!(
        "# fault mechanism: {}",
        pmo_store::attach::fault_mechanism_name()
    );
    println!(
        "{:>6} {:>22} {:>22} {:>14}",
        "size", "alloc+link+psync us", "write+link+psync us", "allocator us"
    );
    for size in SIZES {
        let (mut with, mut without) = (Vec::new(), Vec::new());
        for r in 0..repeats {
            let name = format!("d{size}-{r}");
            pool.pcreate(&name, PMO_BYTES, KEY).expect("pcreate");
            with.push(alloc_link_psync(&pool, &name, size, ops));
            pool.pdestroy(&name, KEY).expect("pdestroy");
            pool.pcreate(&name, PMO_BYTES, KEY).expect("pcreate");
            without.push(write_link_psync(&pool, &name, size, ops));
            pool.pdestroy(&name, KEY).expect("pdestroy");
        }
        let (w, wo) = (median(with), median(without));
        println!("{size:>6} {w:>22.2} {wo:>22.2} {:>14.2}", w - wo);
    }
    drop(pool);
    let _ = std::fs::remove_file(&path);
}

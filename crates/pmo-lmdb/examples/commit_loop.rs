//! A loop of durable 1 KiB LMDB commits and nothing else, for `perf record -g` and for
//! comparing binaries: `cargo run --release -p pmo-lmdb --example commit_loop -- STORE [N]
//! [ROUNDS]`, STORE `secure`, `none` (LMDB on a PMO of that scheme) or `shm` (LMDB on a file in
//! /dev/shm, pwrite + fdatasync). 1 000 records preloaded; prints the median commit (µs) of
//! each round of N commits (default 20 000) and the median of the rounds.
use pmo_lmdb::bench::{open, Target};
use std::path::Path;
use std::time::Instant;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let store = args.first().map_or("secure", String::as_str);
    let n: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let rounds: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(5);
    let dir = Path::new("/dev/shm");
    let target = match store {
        "shm" => Target::File {
            label: "shm".into(),
            dir: dir.join(format!("pmo-commit-loop-{}", std::process::id())),
            writemap: false,
        },
        scheme => Target::pmo(scheme),
    };
    let preload = 1000u64;
    let opened = open(&target, dir, preload * 1100 + (4 << 20)).expect("open the store");
    let env = &opened.kv.env;
    let record = |i: u64| {
        let mut v = vec![b'x'; 1024];
        v[..8].copy_from_slice(&i.to_le_bytes());
        v
    };
    let mut tx = env.begin(false).expect("begin");
    for i in 0..preload {
        tx.put(format!("user{i:010}").as_bytes(), &record(i))
            .expect("put");
    }
    tx.commit().expect("commit");
    let mut x: u64 = 0x9e37_79b9;
    let mut meds = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let mut us = Vec::with_capacity(n as usize);
        for i in 0..n {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let key = format!("user{:010}", (x >> 33) % preload);
            let v = record(i);
            let t0 = Instant::now();
            env.put1(key.as_bytes(), &v).expect("commit");
            us.push(t0.elapsed().as_nanos() as f64 / 1e3);
        }
        let m = median(&mut us);
        print!("{m:.2} ");
        meds.push(m);
    }
    println!("| {store} median {:.2} us", median(&mut meds));
    drop(opened);
    if let Target::File { dir, .. } = &target {
        let _ = std::fs::remove_dir_all(dir);
    }
    // The lock file's directory `bench::open` chose for a PMO store.
    let _ =
        std::fs::remove_dir_all(dir.join(format!("pmo-lmdb-bench-locks-{}", std::process::id())));
}

//! Side-by-side figures for typed persistent maps, in one run:
//!
//! 1. insert, lookup, update, remove per second for `PHashMap` and `PBTreeMap` (in a PMO of a
//!    pool in /dev/shm, attached: the mapping is the DRAM view, so "once resident" is the
//!    steady state) against `std::collections::HashMap` (SipHash, std's default, and Fx, the
//!    hash `PHashMap` uses) and `BTreeMap` in DRAM, the speed of light;
//! 2. the cost of a psync after N updates (N random value updates in a 100k-entry PHashMap,
//!    then psync), per dirty tracking (fault: the default; declared: the containers declare
//!    what they write) and at-rest scheme (`none`, `secure`).
//!
//! Every figure is the median over `--repeats` runs. Keys are a random permutation of 0..n
//! (u64 keys and values), looked up and updated in another random order.
//!
//! ```text
//! cargo run --release -p pmo-typed --example typed_bench -- --csv typed.csv --json typed.json
//! ```
#![forbid(unsafe_code)]

use clap::Parser;
use pmo_store::{KdfParams, Pool, PoolOptions, Scheme};
use pmo_typed::{AttachOptions, DirtyTracking, PBTreeMap, PHashMap, Persistent, TypedHeap};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use std::collections::{BTreeMap, HashMap};
use std::hint::black_box;
use std::time::Instant;

#[derive(Parser)]
struct Args {
    /// Entries per map.
    #[arg(long, default_value_t = 200_000)]
    n: u64,
    /// Repeats per figure (the median is reported).
    #[arg(long, default_value_t = 5)]
    repeats: usize,
    /// psync after N updates, for these N.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16,64,256,1024,4096")]
    updates: Vec<usize>,
    /// Write the figures as CSV here.
    #[arg(long)]
    csv: Option<std::path::PathBuf>,
    /// Write the figures as JSON here.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
}

#[derive(Persistent, Default)]
#[repr(C)]
struct Root {
    hash: PHashMap<u64, u64>,
    tree: PBTreeMap<u64, u64>,
}

struct Row {
    table: &'static str,
    structure: String,
    op: String,
    n: u64,
    value: f64,
    unit: &'static str,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Ops/s of `f` over `n` operations.
fn rate(n: u64, f: impl FnOnce()) -> f64 {
    let t = Instant::now();
    f();
    n as f64 / t.elapsed().as_secs_f64()
}

trait Map {
    fn name(&self) -> String;
    fn insert(&mut self, k: u64, v: u64);
    fn get(&mut self, k: u64) -> Option<u64>;
    fn update(&mut self, k: u64, v: u64);
    fn remove(&mut self, k: u64) -> bool;
}

macro_rules! std_map {
    ($t:ty, $name:expr) => {
        impl Map for $t {
            fn name(&self) -> String {
                $name.into()
            }
            fn insert(&mut self, k: u64, v: u64) {
                <$t>::insert(self, k, v);
            }
            fn get(&mut self, k: u64) -> Option<u64> {
                <$t>::get(self, &k).copied()
            }
            fn update(&mut self, k: u64, v: u64) {
                *<$t>::get_mut(self, &k).unwrap() = v;
            }
            fn remove(&mut self, k: u64) -> bool {
                <$t>::remove(self, &k).is_some()
            }
        }
    };
}
std_map!(HashMap<u64, u64>, "std HashMap (SipHash)");
std_map!(HashMap<u64, u64, rustc_hash::FxBuildHasher>, "std HashMap (Fx)");
std_map!(BTreeMap<u64, u64>, "std BTreeMap");

struct PHash<'a>(&'a mut TypedHeap);
struct PTree<'a>(&'a mut TypedHeap);

impl Map for PHash<'_> {
    fn name(&self) -> String {
        "PHashMap".into()
    }
    fn insert(&mut self, k: u64, v: u64) {
        let (r, h) = self.0.root::<Root>().unwrap();
        r.hash.insert(h, k, v).unwrap();
    }
    fn get(&mut self, k: u64) -> Option<u64> {
        let (r, h) = self.0.root_ref::<Root>().unwrap();
        r.hash.get(h, &k).unwrap().copied()
    }
    fn update(&mut self, k: u64, v: u64) {
        let (r, h) = self.0.root::<Root>().unwrap();
        *r.hash.get_mut(h, &k).unwrap().unwrap() = v;
    }
    fn remove(&mut self, k: u64) -> bool {
        let (r, h) = self.0.root::<Root>().unwrap();
        r.hash.remove(h, &k).unwrap()
    }
}

impl Map for PTree<'_> {
    fn name(&self) -> String {
        "PBTreeMap".into()
    }
    fn insert(&mut self, k: u64, v: u64) {
        let (r, h) = self.0.root::<Root>().unwrap();
        r.tree.insert(h, k, v).unwrap();
    }
    fn get(&mut self, k: u64) -> Option<u64> {
        let (r, h) = self.0.root_ref::<Root>().unwrap();
        r.tree.get(h, &k).unwrap().copied()
    }
    fn update(&mut self, k: u64, v: u64) {
        let (r, h) = self.0.root::<Root>().unwrap();
        *r.tree.get_mut(h, &k).unwrap().unwrap() = v;
    }
    fn remove(&mut self, k: u64) -> bool {
        let (r, h) = self.0.root::<Root>().unwrap();
        r.tree.remove(h, &k).unwrap()
    }
}

/// One pass of the four phases: ops/s for insert, lookup, update, remove.
fn phases(m: &mut dyn Map, keys: &[u64], order: &[u64]) -> [f64; 4] {
    let n = keys.len() as u64;
    let ins = rate(n, || {
        for &k in keys {
            m.insert(k, k);
        }
    });
    let get = rate(n, || {
        let mut s = 0u64;
        for &k in order {
            s = s.wrapping_add(m.get(k).unwrap());
        }
        black_box(s);
    });
    let upd = rate(n, || {
        for &k in order {
            m.update(k, k + 1);
        }
    });
    let rem = rate(n, || {
        for &k in keys {
            assert!(m.remove(k));
        }
    });
    [ins, get, upd, rem]
}

fn pool(path: &std::path::Path, scheme: Scheme) -> Pool {
    let _ = std::fs::remove_file(path);
    let opts = PoolOptions {
        kdf: KdfParams::INSECURE_FAST,
        scheme,
        ..Default::default()
    };
    Pool::create(path, 1 << 30, &opts).expect("pool")
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let mut keys: Vec<u64> = (0..a.n).collect();
    keys.shuffle(&mut rng);
    let mut order = keys.clone();
    order.shuffle(&mut rng);
    let mut rows = Vec::new();
    let path = std::path::PathBuf::from(format!("/dev/shm/pmo-typed-bench-{}.pool", std::process::id()));
    let key = b"bench";

    // 1. Operation rates.
    let p = pool(&path, Scheme::NONE);
    let mut heap = TypedHeap::create(&p, "b", 256 << 20, key)?;
    heap.root::<Root>()?;
    let names = ["std HashMap (SipHash)", "std HashMap (Fx)", "PHashMap", "std BTreeMap", "PBTreeMap"];
    let mut samples: Vec<Vec<[f64; 4]>> = vec![Vec::new(); names.len()];
    for _ in 0..a.repeats {
        // Interleave the structures within a repeat so load changes hit all of them.
        samples[0].push(phases(&mut HashMap::<u64, u64>::new(), &keys, &order));
        samples[1].push(phases(
            &mut HashMap::<u64, u64, rustc_hash::FxBuildHasher>::default(),
            &keys,
            &order,
        ));
        samples[2].push(phases(&mut PHash(&mut heap), &keys, &order));
        samples[3].push(phases(&mut BTreeMap::<u64, u64>::new(), &keys, &order));
        samples[4].push(phases(&mut PTree(&mut heap), &keys, &order));
        heap.psync()?;
    }
    println!("# operations per second (M/s), n = {}, median of {} (machine shared with other builds)", a.n, a.repeats);
    println!("{:<24} {:>9} {:>9} {:>9} {:>9}", "structure", "insert", "lookup", "update", "remove");
    for (i, name) in names.iter().enumerate() {
        let med: Vec<f64> = (0..4).map(|j| median(samples[i].iter().map(|s| s[j]).collect())).collect();
        println!(
            "{:<24} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
            name,
            med[0] / 1e6,
            med[1] / 1e6,
            med[2] / 1e6,
            med[3] / 1e6
        );
        for (j, op) in ["insert", "lookup", "update", "remove"].iter().enumerate() {
            rows.push(Row {
                table: "ops",
                structure: name.to_string(),
                op: op.to_string(),
                n: a.n,
                value: med[j],
                unit: "ops/s",
            });
        }
    }
    let ratio = |s: &str, b: &str, op: &str| {
        let f = |n: &str| rows.iter().find(|r| r.structure == n && r.op == op).unwrap().value;
        f(b) / f(s)
    };
    println!(
        "lookup slowdown vs std: PHashMap {:.2}x (vs SipHash), {:.2}x (vs Fx); PBTreeMap {:.2}x",
        ratio("PHashMap", "std HashMap (SipHash)", "lookup"),
        ratio("PHashMap", "std HashMap (Fx)", "lookup"),
        ratio("PBTreeMap", "std BTreeMap", "lookup"),
    );
    heap.detach()?;
    drop(p);

    // 2. psync after N updates.
    println!("\n# N random updates + psync in a PHashMap of {} entries, µs, median of {}", a.n.min(100_000), a.repeats * 4);
    println!("{:<8} {:<9} {:>6} {:>10} {:>10} {:>10} {:>8} {:>10}", "scheme", "tracking", "N", "updates", "psync", "total", "pages", "total/N");
    let n = a.n.min(100_000);
    for scheme in [Scheme::NONE, Scheme::SECURE] {
        for tracking in [DirtyTracking::Fault, DirtyTracking::Declared] {
            let p = pool(&path, scheme);
            let attach = AttachOptions {
                tracking: Some(tracking),
                ..Default::default()
            };
            let mut heap = TypedHeap::create_with(&p, "u", 64 << 20, key, attach)?;
            {
                let (r, h) = heap.root::<Root>()?;
                for &k in &keys[..n as usize] {
                    r.hash.insert(h, k, k)?;
                }
            }
            heap.psync()?;
            let mut urng = rand::rngs::StdRng::seed_from_u64(7);
            for &u in &a.updates {
                let (mut up, mut ps, mut tot, mut pages) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
                for _ in 0..a.repeats * 4 {
                    let ks: Vec<u64> = (0..u).map(|_| *keys[..n as usize].choose(&mut urng).unwrap()).collect();
                    let t0 = Instant::now();
                    {
                        let (r, h) = heap.root::<Root>()?;
                        for &k in &ks {
                            *r.hash.get_mut(h, &k)?.unwrap() += 1;
                        }
                    }
                    let t1 = Instant::now();
                    let st = heap.psync()?;
                    let t2 = Instant::now();
                    up.push((t1 - t0).as_secs_f64() * 1e6);
                    ps.push((t2 - t1).as_secs_f64() * 1e6);
                    tot.push((t2 - t0).as_secs_f64() * 1e6);
                    pages.push(st.pages as f64);
                }
                let (up, ps, tot, pages) = (median(up), median(ps), median(tot), median(pages));
                let tr = match tracking {
                    DirtyTracking::Declared => "declared",
                    _ => "fault",
                };
                println!(
                    "{:<8} {:<9} {:>6} {:>10.1} {:>10.1} {:>10.1} {:>8} {:>10.2}",
                    scheme.name(),
                    tr,
                    u,
                    up,
                    ps,
                    tot,
                    pages,
                    tot / u as f64
                );
                for (op, v, unit) in [("updates", up, "us"), ("psync", ps, "us"), ("total", tot, "us"), ("pages", pages, "pages")] {
                    rows.push(Row {
                        table: "psync",
                        structure: format!("PHashMap {} {}", scheme.name(), tr),
                        op: op.into(),
                        n: u as u64,
                        value: v,
                        unit,
                    });
                }
            }
            heap.detach()?;
            drop(p);
        }
    }
    let _ = std::fs::remove_file(&path);

    if let Some(csv) = &a.csv {
        let mut s = String::from("table,structure,op,n,value,unit\n");
        for r in &rows {
            s += &format!("{},{},{},{},{},{}\n", r.table, r.structure, r.op, r.n, r.value, r.unit);
        }
        std::fs::write(csv, s)?;
    }
    if let Some(json) = &a.json {
        let v: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| {
                serde_json::json!({"table": r.table, "structure": r.structure, "op": r.op,
                                   "n": r.n, "value": r.value, "unit": r.unit})
            })
            .collect();
        std::fs::write(json, serde_json::to_string_pretty(&v)?)?;
    }
    Ok(())
}

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
//! With `--features peers`, the same table has PMDK's transactional update of the same size
//! (`pmemobj_tx_add_range` + 8-byte store at a random place of a large object, one transaction
//! per update, through `pmo-peers`), as N transactions.
//!
//! Every figure is the median over `--repeats` runs. Keys are a random permutation of 0..n
//! (u64 keys and values), looked up and updated in another random order.
//!
//! ```text
//! cargo run --release -p pmo-typed --features peers --example typed_bench -- --csv typed.csv --json typed.json
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

/// Ops/s of `f` over `n` operations: (by this thread's CPU time, by wall time).
fn rate(n: u64, f: impl FnOnce()) -> (f64, f64) {
    // This thread's CPU time (clock_gettime(CLOCK_THREAD_CPUTIME_ID)): the machine is shared
    // with other builds, so wall time mostly measures the CPU share we got.
    let c = cpu_time::ThreadTime::now();
    let t = Instant::now();
    f();
    let wall = t.elapsed().as_secs_f64();
    let cpu = c.elapsed().as_secs_f64();
    (n as f64 / cpu.max(1e-9), n as f64 / wall)
}

/// The four phases over one map. Persistent maps take the root once per phase, as a program
/// holding `(root, ctx)` across a loop does.
trait Map {
    fn insert_all(&mut self, keys: &[u64]);
    fn get_all(&mut self, keys: &[u64]) -> u64;
    fn update_all(&mut self, keys: &[u64]);
    fn remove_all(&mut self, keys: &[u64]);
}

macro_rules! std_map {
    ($t:ty) => {
        impl Map for $t {
            fn insert_all(&mut self, keys: &[u64]) {
                for &k in keys {
                    self.insert(k, k);
                }
            }
            fn get_all(&mut self, keys: &[u64]) -> u64 {
                keys.iter()
                    .fold(0u64, |s, k| s.wrapping_add(*self.get(k).unwrap()))
            }
            fn update_all(&mut self, keys: &[u64]) {
                for k in keys {
                    *self.get_mut(k).unwrap() += 1;
                }
            }
            fn remove_all(&mut self, keys: &[u64]) {
                for k in keys {
                    assert!(self.remove(k).is_some());
                }
            }
        }
    };
}
std_map!(HashMap<u64, u64>);
std_map!(HashMap<u64, u64, rustc_hash::FxBuildHasher>);
std_map!(BTreeMap<u64, u64>);

struct PHash<'a>(&'a mut TypedHeap);
struct PTree<'a>(&'a mut TypedHeap);

macro_rules! p_map {
    ($t:ident, $field:ident) => {
        impl Map for $t<'_> {
            fn insert_all(&mut self, keys: &[u64]) {
                let (r, h) = self.0.root::<Root>().unwrap();
                for &k in keys {
                    r.$field.insert(h, k, k).unwrap();
                }
            }
            fn get_all(&mut self, keys: &[u64]) -> u64 {
                let (r, h) = self.0.root_ref::<Root>().unwrap();
                keys.iter().fold(0u64, |s, k| {
                    s.wrapping_add(*r.$field.get(h, k).unwrap().unwrap())
                })
            }
            fn update_all(&mut self, keys: &[u64]) {
                let (r, h) = self.0.root::<Root>().unwrap();
                for k in keys {
                    *r.$field.get_mut(h, k).unwrap().unwrap() += 1;
                }
            }
            fn remove_all(&mut self, keys: &[u64]) {
                let (r, h) = self.0.root::<Root>().unwrap();
                for k in keys {
                    assert!(r.$field.remove(h, k).unwrap());
                }
            }
        }
    };
}
p_map!(PHash, hash);
p_map!(PTree, tree);

/// One pass of the four phases: (cpu, wall) ops/s for insert, lookup, update, remove.
fn phases(m: &mut dyn Map, keys: &[u64], order: &[u64]) -> [(f64, f64); 4] {
    let n = keys.len() as u64;
    let ins = rate(n, || m.insert_all(keys));
    let get = rate(n, || {
        black_box(m.get_all(order));
    });
    let upd = rate(n, || m.update_all(order));
    let rem = rate(n, || m.remove_all(keys));
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
    let path = std::path::PathBuf::from(format!(
        "/dev/shm/pmo-typed-bench-{}.pool",
        std::process::id()
    ));
    let key = b"bench";

    // 1. Operation rates.
    let p = pool(&path, Scheme::NONE);
    let mut heap = TypedHeap::create(&p, "b", 256 << 20, key)?;
    heap.root::<Root>()?;
    let names = [
        "std HashMap (SipHash)",
        "std HashMap (Fx)",
        "PHashMap",
        "std BTreeMap",
        "PBTreeMap",
    ];
    let mut samples: Vec<Vec<[(f64, f64); 4]>> = vec![Vec::new(); names.len()];
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
    println!(
        "# operations per second (M/s), n = {}, {} repeats: median by this thread's CPU time \
         [best by wall time]; machine shared with other builds",
        a.n, a.repeats
    );
    println!(
        "{:<24} {:>16} {:>16} {:>16} {:>16}",
        "structure", "insert", "lookup", "update", "remove"
    );
    for (i, name) in names.iter().enumerate() {
        let cpu: Vec<f64> = (0..4)
            .map(|j| median(samples[i].iter().map(|s| s[j].0).collect()))
            .collect();
        let wall: Vec<f64> = (0..4)
            .map(|j| samples[i].iter().map(|s| s[j].1).fold(0.0, f64::max))
            .collect();
        let cell = |j: usize| format!("{:.2} [{:.2}]", cpu[j] / 1e6, wall[j] / 1e6);
        println!(
            "{:<24} {:>16} {:>16} {:>16} {:>16}",
            name,
            cell(0),
            cell(1),
            cell(2),
            cell(3)
        );
        for (j, op) in ["insert", "lookup", "update", "remove"].iter().enumerate() {
            for (clock, v) in [("cpu-median", cpu[j]), ("wall-best", wall[j])] {
                rows.push(Row {
                    table: "ops",
                    structure: name.to_string(),
                    op: format!("{op} {clock}"),
                    n: a.n,
                    value: v,
                    unit: "ops/s",
                });
            }
        }
    }
    let ratio = |s: &str, b: &str, op: &str| {
        let f = |n: &str| {
            rows.iter()
                .find(|r| r.structure == n && r.op == op)
                .unwrap()
                .value
        };
        f(b) / f(s)
    };
    for clock in ["cpu-median", "wall-best"] {
        let op = format!("lookup {clock}");
        println!(
            "lookup time vs std ({clock}): PHashMap {:.2}x SipHash HashMap, {:.2}x Fx HashMap; \
             PBTreeMap {:.2}x BTreeMap",
            ratio("PHashMap", "std HashMap (SipHash)", &op),
            ratio("PHashMap", "std HashMap (Fx)", &op),
            ratio("PBTreeMap", "std BTreeMap", &op),
        );
    }
    heap.detach()?;
    drop(p);

    // 2. psync after N updates.
    println!(
        "\n# N random updates + psync in a PHashMap of {} entries, µs, median of {}",
        a.n.min(100_000),
        a.repeats * 4
    );
    println!(
        "{:<8} {:<9} {:>6} {:>10} {:>10} {:>10} {:>8} {:>10}",
        "scheme", "tracking", "N", "updates", "psync", "total", "pages", "total/N"
    );
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
                let (mut up, mut ps, mut tot, mut pages) =
                    (Vec::new(), Vec::new(), Vec::new(), Vec::new());
                for _ in 0..a.repeats * 4 {
                    let ks: Vec<u64> = (0..u)
                        .map(|_| *keys[..n as usize].choose(&mut urng).unwrap())
                        .collect();
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
                for (op, v, unit) in [
                    ("updates", up, "us"),
                    ("psync", ps, "us"),
                    ("total", tot, "us"),
                    ("pages", pages, "pages"),
                ] {
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

    #[cfg(feature = "peers")]
    {
        pmo_peers::ensure_pmem_force();
        let opts = pmo_peers::Options {
            repeats: a.repeats,
            ..Default::default()
        };
        let tx = pmo_peers::pmdk_tx_update(&opts, 8, pmo_peers::Work::Ops(20_000))?;
        println!(
            "\n# PMDK: one transaction updating 8 bytes = {:.2} µs (median of {}, cpu share {:.2}); \
             N transactions, µs:",
            tx.median, a.repeats, tx.cpu_share
        );
        for &u in &a.updates {
            println!("PMDK tx  N = {:>5}: {:>10.1}", u, tx.median * u as f64);
            rows.push(Row {
                table: "psync",
                structure: "PMDK tx update 8 B".into(),
                op: "total".into(),
                n: u as u64,
                value: tx.median * u as f64,
                unit: "us",
            });
        }
    }

    if let Some(csv) = &a.csv {
        let mut s = String::from("table,structure,op,n,value,unit\n");
        for r in &rows {
            s += &format!(
                "{},{},{},{},{},{}\n",
                r.table, r.structure, r.op, r.n, r.value, r.unit
            );
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

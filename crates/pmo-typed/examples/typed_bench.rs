//! Side-by-side figures for typed persistent maps, in one run:
//!
//! 1. insert, lookup, update, remove per second for `PHashMap` and `PBTreeMap` (in a PMO of a
//!    pool in /dev/shm, attached: the mapping is the DRAM view, so "once resident" is the
//!    steady state) against `std::collections::HashMap` (SipHash, std's default, and Fx, the
//!    hash `PHashMap` uses) and `BTreeMap` in DRAM, the speed of light;
//! 2. the cost of a psync after N updates (N random value updates in a 100k-entry PHashMap,
//!    then psync), per dirty tracking (declared: pmo-typed's default, the containers declare
//!    what they write; twin: the store's default; fault) and at-rest scheme (`none`,
//!    `secure`), after `--warmup` rounds (the steady state of a long-running writer: the
//!    medium's shadow pages have been written once).
//!
//! With `--features peers`, the same table has PMDK's transactional update of the same size
//! (`pmemobj_tx_add_range` + 8-byte store at a random place of a large object, one transaction
//! per update, through `pmo-peers`), as N transactions.
//!
//! Every figure is the median over `--repeats` runs. Keys are a random permutation of 0..n
//! (u64 keys and values), looked up and updated in another random order. `--svg DIR` draws
//! `typed_ops.svg` (operation rates) and `typed_psync.svg` (N updates + psync against N PMDK
//! transactions) with `pmo_bench::plot`.
//!
//! ```text
//! cargo run --release -p pmo-typed --features peers --example typed_bench -- \
//!     --csv typed.csv --json typed.json --svg DIR
//! ```
#![forbid(unsafe_code)]

use clap::Parser;
use pmo_bench::TempPool;
use pmo_store::Scheme;
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
    #[arg(long, default_value_t = 7)]
    repeats: usize,
    /// Unmeasured update + psync rounds per tracking and scheme before the psync figures.
    #[arg(long, default_value_t = 50)]
    warmup: usize,
    /// Dirty trackings of the psync figures.
    #[arg(long, value_delimiter = ',', default_value = "declared,twin,fault")]
    tracking: Vec<String>,
    /// Only this part: `ops` (operation rates) or `psync` (N updates + psync, and PMDK).
    #[arg(long)]
    only: Option<String>,
    /// psync after N updates, for these N.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16,64,256,1024,4096")]
    updates: Vec<usize>,
    /// Write the figures as CSV here.
    #[arg(long)]
    csv: Option<std::path::PathBuf>,
    /// Write the figures as JSON here.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Draw typed_ops.svg and typed_psync.svg into this directory.
    #[arg(long)]
    svg: Option<std::path::PathBuf>,
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

/// A 1 GiB pool in /dev/shm, removed when dropped (an error or a panic too: a bench that dies
/// must not leave a gigabyte of RAM behind in tmpfs). Allocated whole, as `pmo init` does by
/// default and as PMDK's `pmemobj_create` does (posix_fallocate): a sparse pool would charge
/// the first write of each shadow slot with tmpfs allocating and zeroing its page, a cost
/// persistent memory does not have.
fn pool(scheme: Scheme) -> anyhow::Result<TempPool> {
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        std::path::PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    Ok(TempPool::new(&dir, "typed", 1 << 30, scheme)?)
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let mut keys: Vec<u64> = (0..a.n).collect();
    keys.shuffle(&mut rng);
    let mut order = keys.clone();
    order.shuffle(&mut rng);
    let mut rows = Vec::new();

    let part = |name: &str| a.only.as_deref().is_none_or(|o| o == name);
    if let Some(o) = &a.only {
        anyhow::ensure!(
            o == "ops" || o == "psync",
            "--only takes ops or psync, not {o:?}"
        );
    }
    if part("ops") {
        ops(&a, &keys, &order, &mut rows)?;
    }
    if part("psync") {
        psync(&a, &keys, &mut rows)?;
    }
    if let Some(dir) = &a.svg {
        std::fs::create_dir_all(dir)?;
        figures(dir, &rows)?;
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

const KEY: &[u8] = b"bench";
const NAMES: [&str; 5] = [
    "std HashMap (SipHash)",
    "std HashMap (Fx)",
    "PHashMap",
    "std BTreeMap",
    "PBTreeMap",
];
const OPS: [&str; 4] = ["insert", "lookup", "update", "remove"];

/// 1. Operation rates, the structures interleaved within each repeat.
fn ops(a: &Args, keys: &[u64], order: &[u64], rows: &mut Vec<Row>) -> anyhow::Result<()> {
    let tp = pool(Scheme::NONE)?;
    let p = &tp.pool;
    let mut heap = TypedHeap::create(p, "b", 256 << 20, KEY)?;
    heap.root::<Root>()?;
    let mut samples: Vec<Vec<[(f64, f64); 4]>> = vec![Vec::new(); NAMES.len()];
    for _ in 0..a.repeats {
        // Interleave the structures within a repeat so load changes hit all of them.
        samples[0].push(phases(&mut HashMap::<u64, u64>::new(), keys, order));
        samples[1].push(phases(
            &mut HashMap::<u64, u64, rustc_hash::FxBuildHasher>::default(),
            keys,
            order,
        ));
        samples[2].push(phases(&mut PHash(&mut heap), keys, order));
        samples[3].push(phases(&mut BTreeMap::<u64, u64>::new(), keys, order));
        samples[4].push(phases(&mut PTree(&mut heap), keys, order));
        heap.psync()?;
    }
    println!(
        "# operations per second (M/s), n = {}, {} repeats: median by this thread's CPU time \
         [median by wall time]; machine shared with other builds",
        a.n, a.repeats
    );
    println!(
        "{:<24} {:>16} {:>16} {:>16} {:>16}",
        "structure", "insert", "lookup", "update", "remove"
    );
    for (i, name) in NAMES.iter().enumerate() {
        let med = |j: usize, wall: bool| {
            median(
                samples[i]
                    .iter()
                    .map(|s| if wall { s[j].1 } else { s[j].0 })
                    .collect(),
            )
        };
        let cell = |j: usize| format!("{:.2} [{:.2}]", med(j, false) / 1e6, med(j, true) / 1e6);
        println!(
            "{:<24} {:>16} {:>16} {:>16} {:>16}",
            name,
            cell(0),
            cell(1),
            cell(2),
            cell(3)
        );
        for (j, op) in OPS.iter().enumerate() {
            for (clock, v) in [("cpu-median", med(j, false)), ("wall-median", med(j, true))] {
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
    // Lookup time ratios per repeat (the structures of one repeat ran back to back), median.
    let ratio = |s: usize, b: usize, wall: bool| {
        median(
            (0..a.repeats)
                .map(|r| {
                    let (x, y) = (samples[s][r][1], samples[b][r][1]);
                    if wall {
                        y.1 / x.1
                    } else {
                        y.0 / x.0
                    }
                })
                .collect(),
        )
    };
    for (clock, wall) in [("cpu", false), ("wall", true)] {
        let (sip, fx, tree) = (ratio(2, 0, wall), ratio(2, 1, wall), ratio(4, 3, wall));
        println!(
            "lookup time vs std ({clock}, median of per-repeat ratios): PHashMap {sip:.2}x \
             SipHash HashMap, {fx:.2}x Fx HashMap; PBTreeMap {tree:.2}x BTreeMap"
        );
        for (what, v) in [
            ("PHashMap / std HashMap (SipHash)", sip),
            ("PHashMap / std HashMap (Fx)", fx),
            ("PBTreeMap / std BTreeMap", tree),
        ] {
            rows.push(Row {
                table: "lookup-ratio",
                structure: what.into(),
                op: format!("lookup time {clock}"),
                n: a.n,
                value: v,
                unit: "x",
            });
        }
    }
    heap.detach()?;
    Ok(())
}

/// 2. N updates + psync per scheme and tracking, then PMDK's transaction (with `peers`).
fn psync(a: &Args, keys: &[u64], rows: &mut Vec<Row>) -> anyhow::Result<()> {
    let n = a.n.min(100_000) as usize;
    let keys = &keys[..n];
    println!(
        "\n# N random updates + psync in a PHashMap of {n} entries, µs, median of {} after {} \
         unmeasured rounds",
        a.repeats * 4,
        a.warmup
    );
    println!(
        "{:<8} {:<9} {:>6} {:>10} {:>10} {:>10} {:>8} {:>10} {:>10}",
        "scheme", "tracking", "N", "updates", "psync", "total", "pages", "total/N", "mean"
    );
    for scheme in [Scheme::NONE, Scheme::SECURE] {
        for tracking in &a.tracking {
            let tracking = DirtyTracking::from_name(tracking)
                .ok_or_else(|| anyhow::anyhow!("unknown tracking {tracking:?}"))?;
            let tp = pool(scheme)?;
            let p = &tp.pool;
            let attach = AttachOptions {
                tracking: Some(tracking),
                ..Default::default()
            };
            let mut heap = TypedHeap::create_with(p, "u", 64 << 20, KEY, attach)?;
            {
                let (r, h) = heap.root::<Root>()?;
                for &k in keys {
                    r.hash.insert(h, k, k)?;
                }
            }
            heap.psync()?;
            let mut urng = rand::rngs::StdRng::seed_from_u64(7);
            let mut round = |heap: &mut TypedHeap, u: usize| -> anyhow::Result<[f64; 4]> {
                let ks: Vec<u64> = (0..u).map(|_| *keys.choose(&mut urng).unwrap()).collect();
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
                Ok([
                    (t1 - t0).as_secs_f64() * 1e6,
                    (t2 - t1).as_secs_f64() * 1e6,
                    (t2 - t0).as_secs_f64() * 1e6,
                    st.pages as f64,
                ])
            };
            for &u in &a.updates {
                for _ in 0..a.warmup {
                    round(&mut heap, u)?;
                }
                let mut samples = Vec::new();
                for _ in 0..a.repeats * 4 {
                    samples.push(round(&mut heap, u)?);
                }
                let m = |j: usize| median(samples.iter().map(|s| s[j]).collect());
                let (up, ps, tot, pages) = (m(0), m(1), m(2), m(3));
                // The mean total includes the rare psyncs that are much slower than the median
                // (with a sub-page log: the page commit that folds a full log).
                let mean = samples.iter().map(|s| s[2]).sum::<f64>() / samples.len() as f64;
                // The heap's PMO has a sub-page commit log (`docs/commit.md`) unless `PMO_LOG=0`.
                let log = !std::env::var("PMO_LOG").is_ok_and(|v| v.trim() == "0");
                let tr = if log {
                    format!("{}+log", tracking.name())
                } else {
                    tracking.name().to_string()
                };
                println!(
                    "{:<8} {:<9} {:>6} {:>10.1} {:>10.1} {:>10.1} {:>8} {:>10.2} {:>10.1}",
                    scheme.name(),
                    tr,
                    u,
                    up,
                    ps,
                    tot,
                    pages,
                    tot / u as f64,
                    mean
                );
                for (op, v, unit) in [
                    ("updates", up, "us"),
                    ("psync", ps, "us"),
                    ("total", tot, "us"),
                    ("mean total", mean, "us"),
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
            drop(tp);
        }
    }

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
    Ok(())
}

/// The SVG figures, from the rows of this run.
fn figures(dir: &std::path::Path, rows: &[Row]) -> anyhow::Result<()> {
    use pmo_bench::plot;
    let ops: Vec<&Row> = rows
        .iter()
        .filter(|r| r.table == "ops" && r.op.ends_with("cpu-median"))
        .collect();
    if !ops.is_empty() {
        // One bar per (operation, structure), coloured by structure; PMDK's transactional
        // 8-byte update (one transaction per update) next to the updates.
        let short = ["Sip", "Fx", "PHash", "BTree", "PBTree"];
        let pmdk = rows
            .iter()
            .find(|r| r.structure == "PMDK tx update 8 B" && r.n == 1)
            .map(|r| 1.0 / r.value);
        let mut cats: Vec<&str> = NAMES.to_vec();
        if pmdk.is_some() {
            cats.push("PMDK tx update 8 B");
        }
        let mut bars = Vec::new();
        let mut bar = |label: String, cat: &str, v: f64| {
            bars.push(plot::Bar {
                label,
                parts: cats
                    .iter()
                    .map(|c| (*c, if *c == cat { v } else { 0.0 }))
                    .collect(),
                uncertain: false,
            })
        };
        for (op, o) in OPS.iter().zip(["ins", "get", "upd", "rem"]) {
            for (name, sh) in NAMES.iter().zip(short) {
                if let Some(r) = ops
                    .iter()
                    .find(|r| r.structure == *name && r.op == format!("{op} cpu-median"))
                {
                    bar(format!("{o} {sh}"), name, r.value / 1e6);
                }
            }
            if let (Some(v), &"update") = (pmdk, op) {
                bar("upd PMDK".into(), "PMDK tx update 8 B", v);
            }
        }
        let f = dir.join("typed_ops.svg");
        plot::stacked_bars(
            &f,
            "pmo-typed maps in a PMO against std in DRAM (thread CPU time, median)",
            "throughput (M operations/s, median)",
            &bars,
            None,
        )?;
        println!("wrote {}", f.display());
    }
    let mut series: Vec<plot::Series> = Vec::new();
    for r in rows
        .iter()
        .filter(|r| r.table == "psync" && r.op == "total")
    {
        match series.iter_mut().find(|s| s.name == r.structure) {
            Some(s) => s.points.push(plot::Point {
                x: r.n as f64,
                y: r.value,
                uncertain: false,
            }),
            None => series.push(plot::Series::plain(
                r.structure.clone(),
                &[(r.n as f64, r.value)],
            )),
        }
    }
    if !series.is_empty() {
        let f = dir.join("typed_psync.svg");
        plot::lines(
            &f,
            &plot::LineChart {
                title: "N random 8-byte updates + psync (PHashMap) vs N PMDK transactions",
                x_desc: "N updates",
                y_desc: "time (µs, median)",
                log: true,
                integer_x: true,
                ..Default::default()
            },
            &mut series,
        )?;
        println!("wrote {}", f.display());
    }
    Ok(())
}

//! (Over 800 lines on purpose: one benchmark driver whose stores, phases, rounds and report are
//! read together; a child module for the peer's rounds would import its parent and back.)
//!
//! `pmo bench lmdb` and `pmo bench ycsb`: LMDB on PMOs side by side with LMDB on a file in
//! `/dev/shm` (synchronous commits: the peer a user would pick instead) and on the disk
//! (fsync), in one run.
//!
//! - `commit`: a durable write transaction of one 1 KiB record (put + commit), per store;
//!   for PMOs the time split into the LOaPP categories (psync encryption/copy, psync persist,
//!   page faults, the rest: LMDB itself).
//! - `ycsb`: YCSB A-F (load, then each run phase) per store: throughput, p50/p99/p99.9.
//! - the LPMO analogues: every scheme; the plaintext copy in DRAM vs on the medium; dirty
//!   tracking declared by LMDB (the default) vs write faults vs page-table scan; `MDB_WRITEMAP` or not for the file peer (the mode
//!   choice); a cold scan after attach with prediction off vs adaptive; `cxl-far` latency.
//!
//! Records (CSV, JSON) through `pmo_bench::Records`, figures through `pmo_bench::plot`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use pmo_bench::plot::{Bar, BarChart, LineChart, Series};
use pmo_bench::{median, BenchError, Record, Records, TempPool};
use pmo_store::scheme::Granularity;
use pmo_store::{AttachOptions, DirtyTracking, PredictConfig, Scheme};
use pmo_ycsb::{KvStore, Workload};

use crate::kv::LmdbKv;
use crate::{ffi, glue, Env, EnvOptions};

const KEY: &[u8] = b"bench";

/// What to run.
#[derive(Clone, Debug)]
pub struct LmdbBenchOptions {
    pub quick: bool,
    /// Directory of pools and `/dev/shm` environments (default `/dev/shm`).
    pub dir: PathBuf,
    /// Directory on the disk for the fsync peer (default `bench-out/lmdb-disk`).
    pub disk_dir: PathBuf,
    /// YCSB workload files (`workloada`..); `None`: the built-in core workloads.
    pub ycsb_dir: Option<PathBuf>,
    /// Records loaded and operations per run phase (`None`: the workload files' own counts,
    /// scaled up outside `--quick`).
    pub records: Option<u64>,
    pub operations: Option<u64>,
    /// Schemes of the PMO stores (default: secure, none, and outside `--quick` sp-ip, bp-ip,
    /// wed and wedi). The whole-PMO designs wed and wedi re-seal the whole PMO at every psync,
    /// so their runs are smaller ([`whole_pmo`]): a 4 MiB map, 1,000 records preloaded and 200
    /// commits, YCSB at its files' own counts (1,000 records, 1,000 operations).
    pub schemes: Vec<String>,
    /// Which parts: `commit`, `ycsb`, `lpmo` (the analogues).
    pub parts: Vec<String>,
    /// YCSB stores beside LMDB's (`pmo_ycsb_stores::bench::stores()` in `pmo bench`).
    pub others: Vec<OtherStore>,
}

impl LmdbBenchOptions {
    pub fn new(quick: bool) -> LmdbBenchOptions {
        let shm = Path::new("/dev/shm");
        LmdbBenchOptions {
            quick,
            dir: if shm.is_dir() {
                shm.into()
            } else {
                std::env::temp_dir()
            },
            disk_dir: PathBuf::from("bench-out/lmdb-disk"),
            ycsb_dir: default_ycsb_dir(),
            records: None,
            operations: None,
            schemes: if quick {
                vec!["secure".into(), "none".into()]
            } else {
                ["secure", "none", "sp-ip", "bp-ip", "wed", "wedi"]
                    .map(String::from)
                    .to_vec()
            },
            parts: vec!["commit".into(), "ycsb".into(), "lpmo".into()],
            others: Vec::new(),
        }
    }
}

/// `PMO_YCSB_DIR` when set (whatever it holds: the user chose it), else `../shared/ycsb` from the
/// working directory or from this workspace's root, when it holds YCSB's files.
pub fn default_ycsb_dir() -> Option<PathBuf> {
    if let Some(d) =
        std::env::var_os("PMO_YCSB_DIR").filter(|d| !d.to_string_lossy().trim().is_empty())
    {
        return Some(PathBuf::from(d));
    }
    let candidates = [
        Some(PathBuf::from("../shared/ycsb")),
        Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/ycsb")),
    ];
    candidates
        .into_iter()
        .flatten()
        .find(|d| d.join("workloada").is_file())
}

/// One store under test.
#[derive(Clone, Debug)]
pub enum Target {
    /// LMDB on a PMO.
    Pmo {
        label: String,
        scheme: String,
        tracking: Option<DirtyTracking>,
        predict: Option<PredictConfig>,
        latency: Option<&'static str>,
        /// `MDB_WRITEMAP` (the default) or LMDB's pages copied in through the write hook.
        writemap: bool,
    },
    /// LMDB on a file environment in `dir` (synchronous commits).
    File {
        label: String,
        dir: PathBuf,
        writemap: bool,
    },
    /// A store from outside this crate ([`LmdbBenchOptions::others`]; YCSB only).
    Other(OtherStore),
}

/// A YCSB store from outside this crate, run beside LMDB: `pmo-ycsb-stores` hands `pmo bench`
/// its PMDK and pmo-typed stores this way (pmo-lmdb does not link them: `libpmo_lmdb.a`, LMDB
/// for C programs, must not need PMDK).
#[derive(Clone, Debug)]
pub struct OtherStore {
    pub label: String,
    /// Open the store labelled `label` fresh, its files in `dir`, for `records` records of
    /// about `bytes` in all.
    pub open:
        fn(label: &str, dir: &Path, bytes: u64, records: u64) -> Result<YcsbStore, BenchError>,
    /// Also in the durable-commit benchmark (its `update` of one record is one durable write
    /// transaction) and in the cold scan (its [`YcsbStore`] can be reopened): the LMDB 1.0
    /// encrypted peer (`pmo-ycsb-stores`' `lmdb10-enc`).
    pub commit: bool,
}

impl Target {
    pub fn label(&self) -> &str {
        match self {
            Target::Pmo { label, .. }
            | Target::File { label, .. }
            | Target::Other(OtherStore { label, .. }) => label,
        }
    }

    /// LMDB on a `scheme` PMO with the defaults (declared tracking, `MDB_WRITEMAP`).
    pub fn pmo(scheme: &str) -> Target {
        Target::Pmo {
            label: format!("pmo-{scheme}"),
            scheme: scheme.into(),
            tracking: None,
            predict: None,
            latency: None,
            writemap: true,
        }
    }
}

/// An open store: the environment and what keeps it alive.
pub struct Opened {
    pub kv: LmdbKv,
    _pool: Option<TempPool>,
    pmo: Option<String>,
}

impl Opened {
    fn stats(&self) -> Option<pmo_store::SessionStats> {
        self.pmo.as_deref().and_then(glue::session_stats)
    }
}

impl KvStore for Opened {
    fn name(&self) -> String {
        self.kv.name()
    }
    fn insert(&mut self, key: &[u8], value: &[u8]) -> Result<(), pmo_ycsb::StoreError> {
        self.kv.insert(key, value)
    }
    fn update(&mut self, key: &[u8], value: &[u8]) -> Result<(), pmo_ycsb::StoreError> {
        self.kv.update(key, value)
    }
    fn read(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, pmo_ycsb::StoreError> {
        self.kv.read(key, out)
    }
    fn scan(&mut self, start: &[u8], count: usize) -> Result<usize, pmo_ycsb::StoreError> {
        self.kv.scan(start, count)
    }
}

/// Open the same store again, read-only (for the cold scan), once the old handle is dropped.
pub type Reopen = Box<dyn FnOnce() -> Result<Box<dyn KvStore>, BenchError>>;

/// A store YCSB drives, and the pool it lives in (dropped after it: fields drop in order).
pub struct YcsbStore {
    pub kv: Box<dyn KvStore>,
    reopen: Option<Reopen>,
    /// What removes the store's files, dropped after `kv`.
    _keep: Option<Box<dyn std::any::Any>>,
    _pool: Option<TempPool>,
}

impl YcsbStore {
    /// `kv`, living in `pool` (if any), which is removed after `kv` is dropped.
    pub fn new(kv: Box<dyn KvStore>, pool: Option<TempPool>) -> YcsbStore {
        YcsbStore {
            kv,
            reopen: None,
            _keep: None,
            _pool: pool,
        }
    }

    /// `kv`, which `reopen` opens again, its files kept until `keep` is dropped (after `kv`).
    pub fn reopenable(
        kv: Box<dyn KvStore>,
        reopen: Reopen,
        keep: Box<dyn std::any::Any>,
    ) -> YcsbStore {
        YcsbStore {
            kv,
            reopen: Some(reopen),
            _keep: Some(keep),
            _pool: None,
        }
    }

    /// Close the store and open it again through its reopen function.
    pub fn reopen(mut self) -> Result<YcsbStore, BenchError> {
        let f = self
            .reopen
            .take()
            .ok_or_else(|| err("this store cannot be reopened"))?;
        let placeholder: Box<dyn KvStore> = Box::new(Closed);
        drop(std::mem::replace(&mut self.kv, placeholder));
        self.kv = f()?;
        Ok(self)
    }
}

/// The store between its close and its reopening.
struct Closed;

impl KvStore for Closed {
    fn name(&self) -> String {
        "closed".into()
    }
    fn insert(&mut self, _: &[u8], _: &[u8]) -> Result<(), pmo_ycsb::StoreError> {
        Err("closed".into())
    }
    fn update(&mut self, _: &[u8], _: &[u8]) -> Result<(), pmo_ycsb::StoreError> {
        Err("closed".into())
    }
    fn read(&mut self, _: &[u8], _: &mut Vec<u8>) -> Result<bool, pmo_ycsb::StoreError> {
        Err("closed".into())
    }
    fn scan(&mut self, _: &[u8], _: usize) -> Result<usize, pmo_ycsb::StoreError> {
        Err("closed".into())
    }
}

/// Open `target` fresh for YCSB with room for `bytes` of records, `records` of them.
pub fn open_ycsb(
    target: &Target,
    dir: &Path,
    bytes: u64,
    records: u64,
) -> Result<YcsbStore, BenchError> {
    match target {
        Target::Other(o) => (o.open)(&o.label, dir, bytes, records),
        _ => Ok(YcsbStore::new(Box::new(open(target, dir, bytes)?), None)),
    }
}

/// True for a PMO store under a whole-PMO scheme (`wed`, `wedi`): every psync re-seals the
/// whole map, so its runs use the smaller sizes of [`LmdbBenchOptions::schemes`].
pub fn whole_pmo(t: &Target) -> bool {
    matches!(t, Target::Pmo { scheme, .. }
        if Scheme::from_name(scheme).is_ok_and(|s| s.granularity() == Granularity::Whole))
}

fn err(e: impl std::fmt::Display) -> BenchError {
    BenchError::Other(e.to_string())
}

/// Open `target` fresh with room for `bytes` of records.
pub fn open(target: &Target, dir: &Path, bytes: u64) -> Result<Opened, BenchError> {
    let floor = if whole_pmo(target) { 4 << 20 } else { 32 << 20 };
    let map = (bytes * 3).max(floor).next_multiple_of(1 << 20);
    match target {
        Target::Pmo {
            label,
            scheme,
            tracking,
            predict,
            latency,
            writemap,
        } => {
            let scheme = Scheme::from_name(scheme).map_err(err)?;
            if let Some(l) = latency {
                std::env::set_var("PMO_LATENCY", l);
            }
            let pool = TempPool::new(dir, &format!("lmdb-{label}"), map * 2 + (64 << 20), scheme);
            if latency.is_some() {
                std::env::remove_var("PMO_LATENCY");
            }
            let pool = pool?;
            let mut b = glue::Backend::new(pool.pool.clone(), KEY);
            b.attach = AttachOptions {
                tracking: *tracking,
                predict: *predict,
                ..Default::default()
            };
            b.lock_dir = Some(dir.join(format!("pmo-lmdb-bench-locks-{}", std::process::id())));
            b.writemap = Some(*writemap);
            glue::install(b);
            let env = Env::open(
                "pmo:bench",
                EnvOptions {
                    map_size: Some(map as usize),
                    ..Default::default()
                },
            )
            .map_err(err);
            glue::uninstall();
            Ok(Opened {
                kv: LmdbKv {
                    env: env?,
                    label: label.clone(),
                },
                _pool: Some(pool),
                pmo: Some("bench".into()),
            })
        }
        Target::File {
            label,
            dir,
            writemap,
        } => {
            let _ = std::fs::remove_dir_all(dir);
            std::fs::create_dir_all(dir).map_err(|e| BenchError::Io {
                op: format!("create {}", dir.display()),
                source: e,
            })?;
            let flags = if *writemap { ffi::MDB_WRITEMAP } else { 0 };
            let env = Env::open(
                dir.to_str().ok_or_else(|| err("non-UTF-8 path"))?,
                EnvOptions {
                    flags,
                    map_size: Some(map as usize),
                },
            )
            .map_err(err)?;
            Ok(Opened {
                kv: LmdbKv {
                    env,
                    label: label.clone(),
                },
                _pool: None,
                pmo: None,
            })
        }
        Target::Other(o) => Err(err(format!("{} is not an LMDB store", o.label))),
    }
}

fn file_targets(o: &LmdbBenchOptions, with_disk: bool) -> Vec<Target> {
    let pid = std::process::id();
    let mut v = vec![Target::File {
        label: "shm".into(),
        dir: o.dir.join(format!("pmo-lmdb-bench-shm-{pid}")),
        writemap: false,
    }];
    if with_disk {
        v.push(Target::File {
            label: "disk".into(),
            dir: o.disk_dir.join(format!("env-{pid}")),
            writemap: false,
        });
    }
    v
}

fn cleanup(t: &Target) {
    if let Target::File { dir, .. } = t {
        let _ = std::fs::remove_dir_all(dir);
    }
}

fn record_1k(i: u64) -> Vec<u8> {
    let mut v = vec![b'x'; 1024];
    v[..8].copy_from_slice(&i.to_le_bytes());
    v
}

/// Durable commits of one 1 KiB record into an environment holding `preload` records.
fn commit_bench(t: &Target, o: &LmdbBenchOptions, rec: &mut Records) -> Result<f64, BenchError> {
    let (preload, n) = if o.quick {
        (1000u64, 300u64)
    } else {
        (10_000, 3000)
    };
    let n = if matches!(t, Target::File { label, .. } if label == "disk") {
        n.min(200)
    } else {
        n
    };
    let (preload, n) = if whole_pmo(t) {
        (preload.min(1000), n.min(200))
    } else {
        (preload, n)
    };
    if let Target::Other(other) = t {
        return other_commit_bench(other, o, preload, n, rec);
    }
    let s = open(t, &o.dir, preload * 1100)?;
    let mut tx = s.kv.env.begin(false).map_err(err)?;
    for i in 0..preload {
        tx.put(format!("user{i:010}").as_bytes(), &record_1k(i))
            .map_err(err)?;
    }
    tx.commit().map_err(err)?;
    // Per commit: its wall time and, on a PMO, the session counters around it, so each
    // category is a median over commits (a mean would be one stall of this shared machine).
    let mut ns = Vec::with_capacity(n as usize);
    let mut cats: [Vec<f64>; 5] = Default::default(); // crypt, psync rest, faults, lmdb, pages
    let mut faults = 0u64;
    let mut x: u64 = 0x9e37_79b9;
    for i in 0..n {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let key = format!("user{:010}", (x >> 33) % preload);
        let before = s.stats();
        let t0 = Instant::now();
        s.kv.env.put1(key.as_bytes(), &record_1k(i)).map_err(err)?;
        let dt = t0.elapsed().as_nanos() as f64;
        ns.push(dt);
        if let (Some(b), Some(a)) = (before, s.stats()) {
            let d = |x: u64, y: u64| y.saturating_sub(x) as f64;
            let crypt = d(b.psync_crypt_ns, a.psync_crypt_ns);
            let persist = d(b.psync_persist_ns, a.psync_persist_ns);
            let pf = d(b.pf_ns, a.pf_ns);
            cats[0].push(crypt / 1e3);
            cats[1].push(persist / 1e3);
            cats[2].push(pf / 1e3);
            cats[3].push((dt - crypt - persist - pf).max(0.0) / 1e3);
            cats[4].push(d(b.pages_encrypted, a.pages_encrypted));
            faults += a.faults - b.faults;
        }
    }
    let med = push_commits(t.label(), &ns, rec);
    let p = [("store", t.label().to_string())];
    if !cats[0].is_empty() {
        for (metric, v) in [
            "psync_crypt_us",
            "psync_persist_us",
            "fault_us",
            "lmdb_other_us",
            "pages_per_commit",
        ]
        .iter()
        .zip(&cats)
        {
            let unit = if *metric == "pages_per_commit" {
                "pages"
            } else {
                "us"
            };
            rec.push("lmdb-commit", &p, metric, median(v), unit, v.len());
        }
        rec.push(
            "lmdb-commit",
            &p,
            "faults_per_commit",
            faults as f64 / n as f64,
            "faults",
            n as usize,
        );
    }
    drop(s);
    cleanup(t);
    Ok(med)
}

/// The median commit, with the spread of the medians of 5 consecutive batches (so a ratio
/// of two stores is marked uncertain when the batches overlap: pmo_bench::record::ratio); p99
/// and mean. Returns the median (us).
fn push_commits(label: &str, ns: &[f64], rec: &mut Records) -> f64 {
    let p = [("store", label.to_string())];
    let us: Vec<f64> = ns.iter().map(|v| v / 1e3).collect();
    let med = median(&us);
    let batches: Vec<f64> = us.chunks(us.len().div_ceil(5)).map(median).collect();
    rec.push_samples("lmdb-commit", &p, "commit_us_p50", &batches, "us");
    if let Some(r) = rec.records.last_mut() {
        r.value = med;
        r.samples = us.len();
    }
    let mut sorted = us.clone();
    sorted.sort_by(|a, b| a.total_cmp(b));
    rec.push(
        "lmdb-commit",
        &p,
        "commit_us_p99",
        sorted[(sorted.len() * 99 / 100).min(sorted.len() - 1)],
        "us",
        sorted.len(),
    );
    rec.push(
        "lmdb-commit",
        &p,
        "commit_us_mean",
        us.iter().sum::<f64>() / us.len() as f64,
        "us",
        us.len(),
    );
    med
}

/// The commit benchmark on a store from outside this crate ([`OtherStore::commit`]): the same
/// records, keys and durable one-record writes (its `update`), no time categories.
fn other_commit_bench(
    t: &OtherStore,
    o: &LmdbBenchOptions,
    preload: u64,
    n: u64,
    rec: &mut Records,
) -> Result<f64, BenchError> {
    let mut s = (t.open)(&t.label, &o.dir, preload * 1100, preload)?;
    for i in 0..preload {
        s.kv.insert(format!("user{i:010}").as_bytes(), &record_1k(i))
            .map_err(err)?;
    }
    let mut ns = Vec::with_capacity(n as usize);
    let mut x: u64 = 0x9e37_79b9;
    for i in 0..n {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let key = format!("user{:010}", (x >> 33) % preload);
        let t0 = Instant::now();
        s.kv.update(key.as_bytes(), &record_1k(i)).map_err(err)?;
        ns.push(t0.elapsed().as_nanos() as f64);
    }
    Ok(push_commits(&t.label, &ns, rec))
}

/// Name on stderr the properties YCSB's files set that the driver does not act on, so a
/// misspelt key is not lost in silence (YCSB itself ignores them).
fn warn_ignored(ws: &[Workload]) {
    for w in ws.iter().filter(|w| !w.ignored.is_empty()) {
        eprintln!(
            "[lmdb] warning: YCSB {}: ignoring properties this driver does not act on: {}",
            w.name.to_ascii_uppercase(),
            w.ignored.join(", ")
        );
    }
}

/// YCSB A-F at the files' counts (`small`, or `--quick`), else ten times them; `--records` and
/// `--operations` override both.
fn workloads(o: &LmdbBenchOptions, small: bool) -> Result<Vec<Workload>, BenchError> {
    let mut v = Vec::new();
    for l in ['a', 'b', 'c', 'd', 'e', 'f'] {
        let mut w = Workload::find(l, o.ycsb_dir.as_deref()).map_err(err)?;
        let scale = if o.quick || small { 1 } else { 10 };
        let scaled = |n: u64, what: &str| {
            n.checked_mul(scale).ok_or_else(|| {
                BenchError::Other(format!(
                    "YCSB {}: {what}={n} times {scale} is more than this benchmark can count",
                    l.to_ascii_uppercase()
                ))
            })
        };
        w.record_count = match o.records {
            Some(n) => n,
            None => scaled(w.record_count, "recordcount")?,
        };
        w.operation_count = match o.operations {
            Some(n) => n,
            None => scaled(w.operation_count, "operationcount")?,
        };
        v.push(w);
    }
    ycsb_size(&v)?;
    Ok(v)
}

/// The bytes and the records of a store that YCSB A-F (`ws`, run in order after one load)
/// fill; an error if they do not fit in a u64.
fn ycsb_size(ws: &[Workload]) -> Result<(u64, u64), BenchError> {
    let too_big = || BenchError::Other("YCSB A-F: the workloads need more than 2^64 bytes".into());
    let first = &ws[0];
    let mut records = first.record_count;
    for w in ws {
        let inserts = (w.operation_count as f64 * w.insert) as u64 + 1;
        records = records.checked_add(inserts).ok_or_else(too_big)?;
    }
    let bytes = records
        .checked_mul(first.record_len() as u64 + 200)
        .ok_or_else(too_big)?;
    Ok((bytes, records))
}

/// YCSB A-F on one store: load once, then each run phase in order (as YCSB's own sequence).
fn ycsb_bench(
    t: &Target,
    o: &LmdbBenchOptions,
    ws: &[Workload],
    rec: &mut Records,
) -> Result<(), BenchError> {
    let first = &ws[0];
    let (bytes, records) = ycsb_size(ws)?;
    let mut s = open_ycsb(t, &o.dir, bytes, records)?;
    let store: &mut dyn KvStore = s.kv.as_mut();
    let push = |r: &pmo_ycsb::Report, rec: &mut Records| {
        let base = [
            ("store", r.store.clone()),
            ("workload", r.workload.clone()),
            ("phase", r.phase.to_string()),
        ];
        rec.push(
            "ycsb",
            &base,
            "throughput_ops",
            r.throughput(),
            "ops/s",
            r.ops as usize,
        );
        for (k, st) in &r.per_op {
            let mut p = base.to_vec();
            p.push(("op", k.name().to_string()));
            for (m, q) in [("p50_us", 0.5), ("p99_us", 0.99), ("p999_us", 0.999)] {
                rec.push(
                    "ycsb",
                    &p,
                    m,
                    st.quantile(q) as f64 / 1e3,
                    "us",
                    st.ns.len(),
                );
            }
        }
    };
    let mut load_w = first.clone();
    load_w.name = "load".into();
    let r = pmo_ycsb::load(store, &load_w, 1).map_err(err)?;
    push(&r, rec);
    let mut cdf_c = Vec::new();
    // Every run phase inserts beyond the records loaded; D and E insert, so the record count the
    // next phase starts from grows: run each on the count its predecessors left.
    let mut count = first.record_count;
    for w in ws {
        if w.scan > 0.0 && !store.scans() {
            eprintln!(
                "[lmdb] ycsb: {} has no key order: YCSB {} (scans) skipped",
                t.label(),
                w.name.to_uppercase()
            );
            continue;
        }
        let w = Workload {
            record_count: count,
            ..w.clone()
        };
        let r = pmo_ycsb::run(store, &w, 7).map_err(err)?;
        count += r
            .per_op
            .iter()
            .find(|(k, _)| *k == pmo_ycsb::OpKind::Insert)
            .map_or(0, |(_, s)| s.ns.len() as u64);
        push(&r, rec);
        if w.name == "c" {
            cdf_c = r.all_ns();
        }
    }
    // YCSB C again, 5 times (pages resident): the median throughput is what target 1 compares,
    // since one phase's throughput moves with any stall of this shared machine.
    let c = ws.iter().find(|w| w.name == "c").expect("workload c");
    let mut tput = Vec::new();
    for rep in 0..5u64 {
        let w = Workload {
            record_count: count,
            ..c.clone()
        };
        tput.push(
            pmo_ycsb::run(store, &w, 100 + rep)
                .map_err(err)?
                .throughput(),
        );
    }
    rec.push_samples(
        "ycsb",
        &[
            ("store", t.label().to_string()),
            ("workload", "c".into()),
            ("phase", "repeat".into()),
        ],
        "throughput_ops_median",
        &tput,
        "ops/s",
    );
    // The CDF of YCSB C's reads: 50 points.
    for i in 1..=50 {
        let q = i as f64 / 50.0;
        let idx = ((q * cdf_c.len() as f64).ceil() as usize).clamp(1, cdf_c.len().max(1)) - 1;
        if let Some(v) = cdf_c.get(idx) {
            rec.push(
                "ycsb-cdf",
                &[("store", t.label().to_string()), ("q", format!("{q:.2}"))],
                "read_us",
                *v as f64 / 1e3,
                "us",
                1,
            );
        }
    }
    drop(s);
    cleanup(t);
    Ok(())
}

/// A cold pass over every record right after the environment is opened again (pages fault in,
/// decrypted and verified), prediction off vs adaptive, and LMDB on /dev/shm (page cache).
fn cold_scan(t: &Target, o: &LmdbBenchOptions, rec: &mut Records) -> Result<(), BenchError> {
    let n: u64 = if o.quick { 4000 } else { 40_000 };
    if let Target::Other(other) = t {
        return other_cold_scan(other, o, n, rec);
    }
    let s = open(t, &o.dir, n * 1100)?;
    let mut tx = s.kv.env.begin(false).map_err(err)?;
    for i in 0..n {
        tx.put(format!("user{i:010}").as_bytes(), &record_1k(i))
            .map_err(err)?;
    }
    tx.commit().map_err(err)?;
    // Reopen the same environment: a new attach session for a PMO.
    let Opened { kv, _pool, pmo } = s;
    drop(kv);
    let env = match t {
        Target::Pmo {
            tracking, predict, ..
        } => {
            let pool = _pool.as_ref().expect("a PMO target has a pool");
            let mut b = glue::Backend::new(pool.pool.clone(), KEY);
            b.attach = AttachOptions {
                tracking: *tracking,
                predict: *predict,
                ..Default::default()
            };
            b.lock_dir = Some(
                o.dir
                    .join(format!("pmo-lmdb-bench-locks-{}", std::process::id())),
            );
            glue::install(b);
            let e = Env::open(
                "pmo:bench",
                EnvOptions {
                    flags: ffi::MDB_RDONLY,
                    ..Default::default()
                },
            );
            glue::uninstall();
            e.map_err(err)?
        }
        Target::File { dir, .. } => Env::open(
            dir.to_str().unwrap_or_default(),
            EnvOptions {
                flags: ffi::MDB_RDONLY,
                ..Default::default()
            },
        )
        .map_err(err)?,
        Target::Other(o) => {
            return Err(err(format!(
                "{}: no cold scan (not an LMDB store)",
                o.label
            )))
        }
    };
    let t0 = Instant::now();
    let txn = env.begin(true).map_err(err)?;
    let mut sum = 0u64;
    let seen = txn
        .walk(None, |_, v| {
            sum = sum.wrapping_add(u64::from(v[0]) + u64::from(v[v.len() - 1]));
            true
        })
        .map_err(err)?;
    let dt = t0.elapsed().as_secs_f64();
    std::hint::black_box(sum);
    drop(txn);
    if seen as u64 != n {
        return Err(err(format!(
            "{}: cold scan saw {seen} of {n} records",
            t.label()
        )));
    }
    let predicted = pmo
        .as_deref()
        .and_then(glue::session_stats)
        .map_or(0.0, |s| s.predicted as f64);
    push_cold(t.label(), n, dt, predicted, rec);
    drop(env);
    drop(_pool);
    cleanup(t);
    Ok(())
}

/// The cold scan of a store from outside this crate ([`OtherStore::commit`]): the same records
/// (one durable insert each), the store closed and reopened, then one scan over all of them.
fn other_cold_scan(
    t: &OtherStore,
    o: &LmdbBenchOptions,
    n: u64,
    rec: &mut Records,
) -> Result<(), BenchError> {
    let mut s = (t.open)(&t.label, &o.dir, n * 1100, n)?;
    for i in 0..n {
        s.kv.insert(format!("user{i:010}").as_bytes(), &record_1k(i))
            .map_err(err)?;
    }
    let mut s = s.reopen()?;
    let t0 = Instant::now();
    let seen = s.kv.scan(b"", n as usize + 1).map_err(err)?;
    let dt = t0.elapsed().as_secs_f64();
    if seen as u64 != n {
        return Err(err(format!(
            "{}: cold scan saw {seen} of {n} records",
            t.label
        )));
    }
    push_cold(&t.label, n, dt, 0.0, rec);
    Ok(())
}

fn push_cold(label: &str, n: u64, dt: f64, predicted: f64, rec: &mut Records) {
    let p = [("store", label.to_string())];
    rec.push("lmdb-cold-scan", &p, "scan_ms", dt * 1e3, "ms", 1);
    rec.push(
        "lmdb-cold-scan",
        &p,
        "records_per_s",
        n as f64 / dt,
        "records/s",
        1,
    );
    rec.push(
        "lmdb-cold-scan",
        &p,
        "pages_predicted",
        predicted,
        "pages",
        1,
    );
}

/// Run the parts of `o`, appending to `rec`; prints progress on stderr.
pub fn run(o: &LmdbBenchOptions, which: &str, rec: &mut Records) -> Result<(), BenchError> {
    let wants = |p: &str| o.parts.iter().any(|x| x == p);
    let mut pmo: Vec<Target> = o.schemes.iter().map(|s| Target::pmo(s)).collect();
    let files = file_targets(o, true);
    let progress = |what: &str, t: &Target| eprintln!("[lmdb] {what}: {}", t.label());
    if which == "lmdb" && wants("commit") {
        let mut all = pmo.clone();
        all.extend(files.iter().cloned());
        all.push(Target::File {
            label: "shm-writemap".into(),
            dir: o
                .dir
                .join(format!("pmo-lmdb-bench-shmw-{}", std::process::id())),
            writemap: true,
        });
        if wants("lpmo") {
            // Dirty tracking: LMDB names its pages (declared, the default) vs write faults vs a
            // page-table scan.
            for (label, tracking) in [
                ("pmo-secure-fault", DirtyTracking::Fault),
                ("pmo-secure-scan", DirtyTracking::Scan),
            ] {
                all.push(Target::Pmo {
                    label: label.into(),
                    scheme: "secure".into(),
                    tracking: Some(tracking),
                    predict: None,
                    latency: None,
                    writemap: true,
                });
            }
            // The mode choice on a PMO: LMDB's pages copied in through the write hook.
            all.push(Target::Pmo {
                label: "pmo-secure-nowritemap".into(),
                scheme: "secure".into(),
                tracking: None,
                predict: None,
                latency: None,
                writemap: false,
            });
            all.push(Target::Pmo {
                label: "pmo-secure-cxl-far".into(),
                scheme: "secure".into(),
                tracking: None,
                predict: None,
                latency: Some("cxl-far"),
                writemap: true,
            });
            if !o.quick {
                all.push(Target::pmo("bp-ip:medium"));
            }
        }
        all.extend(
            o.others
                .iter()
                .filter(|x| x.commit)
                .cloned()
                .map(Target::Other),
        );
        for t in &all {
            progress("commit", t);
            commit_bench(t, o, rec)?;
        }
    }
    if wants("ycsb") {
        let ws = workloads(o, false)?;
        let ws_small = workloads(o, true)?;
        warn_ignored(&ws);
        if which == "lmdb" && wants("lpmo") {
            pmo.push(Target::Pmo {
                label: "pmo-secure-cxl-far".into(),
                scheme: "secure".into(),
                tracking: None,
                predict: None,
                latency: Some("cxl-far"),
                writemap: true,
            });
        }
        let mut all = pmo.clone();
        all.extend(file_targets(o, !o.quick || which == "ycsb"));
        all.extend(o.others.iter().cloned().map(Target::Other));
        for t in &all {
            progress("ycsb", t);
            ycsb_bench(t, o, if whole_pmo(t) { &ws_small } else { &ws }, rec)?;
        }
    }
    let mut r = lpmo_cold(o, which, rec);
    if r.is_ok() && which == "lmdb" {
        eprintln!("[lmdb] targets: pmo-secure and shm side by side");
        r = targets(o, rec);
        for peer in o.others.iter().filter(|x| x.commit) {
            if r.is_ok() {
                eprintln!("[lmdb] targets: pmo-secure and {} side by side", peer.label);
                r = peer_rounds(o, peer, rec);
            }
        }
    }
    let _ = std::fs::remove_dir_all(
        o.dir
            .join(format!("pmo-lmdb-bench-locks-{}", std::process::id())),
    );
    r
}

fn lpmo_cold(o: &LmdbBenchOptions, which: &str, rec: &mut Records) -> Result<(), BenchError> {
    let wants = |p: &str| o.parts.iter().any(|x| x == p);
    let files = file_targets(o, false);
    let progress = |what: &str, t: &Target| eprintln!("[lmdb] {what}: {}", t.label());
    if which == "lmdb" && wants("lpmo") {
        let cold: Vec<Target> = [
            Target::pmo("secure"),
            Target::Pmo {
                label: "pmo-secure-predict".into(),
                scheme: "secure".into(),
                tracking: None,
                predict: Some(PredictConfig::adaptive()),
                latency: None,
                writemap: true,
            },
            files[0].clone(),
        ]
        .into_iter()
        .chain(
            o.others
                .iter()
                .filter(|x| x.commit)
                .cloned()
                .map(Target::Other),
        )
        .collect();
        for t in &cold {
            progress("cold scan", t);
            cold_scan(t, o, rec)?;
        }
    }
    Ok(())
}

fn find_rec<'a>(
    rec: &'a Records,
    bench: &str,
    metric: &str,
    params: &[(&str, &str)],
) -> Option<&'a Record> {
    rec.records.iter().find(|r| {
        r.bench == bench
            && r.metric == metric
            && params
                .iter()
                .all(|(k, v)| r.params.iter().any(|(a, b)| a == k && b == v))
    })
}

fn find(rec: &Records, bench: &str, metric: &str, params: &[(&str, &str)]) -> Option<f64> {
    find_rec(rec, bench, metric, params).map(|r| r.value)
}

/// `store`'s `metric` over `shm`'s (the peer), and whether the ratio is uncertain (its samples'
/// range includes 1: `pmo_bench::record::ratio`, the suite's rule).
fn vs_shm(
    rec: &Records,
    bench: &str,
    metric: &str,
    store: &str,
    extra: &[(&str, &str)],
) -> Option<(f64, bool)> {
    let with = |s: &str| {
        let mut p = vec![("store", s)];
        p.extend_from_slice(extra);
        find_rec(rec, bench, metric, &p)
    };
    Some(pmo_bench::record::ratio(with(store)?, with("shm")?))
}

/// YCSB C's time on `store` over shm's (the inverse of the repeats' median throughputs).
fn c_time_vs_shm(rec: &Records, store: &str) -> Option<(f64, bool)> {
    let p = |s| {
        find_rec(
            rec,
            "ycsb",
            "throughput_ops_median",
            &[("store", s), ("workload", "c"), ("phase", "repeat")],
        )
    };
    Some(pmo_bench::record::ratio(p("shm")?, p(store)?))
}

/// A ratio cell: `1.10x`, with `?` when uncertain.
fn ratio_cell(r: Option<(f64, bool)>) -> String {
    r.map_or("-".into(), |(v, u)| {
        format!("{v:.2}x{}", if u { "?" } else { "" })
    })
}

/// A ratio record of per-round ratios is uncertain when their range includes 1.
fn spans_one(r: &Record) -> bool {
    matches!((r.min, r.max), (Some(lo), Some(hi)) if lo <= 1.0 && hi >= 1.0)
}

fn stores(rec: &Records, bench: &str) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for r in rec.records.iter().filter(|r| r.bench == bench) {
        if let Some((_, s)) = r.params.iter().find(|(k, _)| k.as_str() == "store") {
            if !v.contains(s) {
                v.push(s.clone());
            }
        }
    }
    v
}

/// Print the tables and the two targets.
pub fn print_tables(rec: &Records) {
    let commit = stores(rec, "lmdb-commit");
    if !commit.is_empty() {
        println!("Durable commit of one 1 KiB record (us, medians over commits; PMO time split by category):");
        println!(
            "{:<22} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7} {:>8}",
            "store", "p50", "p99", "crypt", "psync", "faults", "lmdb", "pages", "vs shm"
        );
        for s in &commit {
            let g = |m: &str| {
                find(rec, "lmdb-commit", m, &[("store", s)])
                    .map_or("-".to_string(), |v| format!("{v:.1}"))
            };
            println!(
                "{:<22} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7} {:>8}",
                s,
                g("commit_us_p50"),
                g("commit_us_p99"),
                g("psync_crypt_us"),
                g("psync_persist_us"),
                g("fault_us"),
                g("lmdb_other_us"),
                g("pages_per_commit"),
                ratio_cell(vs_shm(rec, "lmdb-commit", "commit_us_p50", s, &[]))
            );
        }
    }
    let ycsb = stores(rec, "ycsb");
    if !ycsb.is_empty() {
        println!("YCSB throughput (ops/s) per workload:");
        print!("{:<22} {:>9}", "store", "load");
        for w in ["a", "b", "c", "d", "e", "f"] {
            print!(" {:>9}", w.to_uppercase());
        }
        // YCSB C repeated 5 times: its time over shm's, `?` where the repeats' range includes 1.
        println!(" {:>10}", "C vs shm");
        for s in &ycsb {
            print!(
                "{s:<22} {:>9.0}",
                find(
                    rec,
                    "ycsb",
                    "throughput_ops",
                    &[("store", s), ("phase", "load")]
                )
                .unwrap_or(0.0)
            );
            for w in ["a", "b", "c", "d", "e", "f"] {
                // "-": not run (a hash map has no scans for E).
                let v = find(
                    rec,
                    "ycsb",
                    "throughput_ops",
                    &[("store", s), ("workload", w), ("phase", "run")],
                )
                .map_or("-".to_string(), |v| format!("{v:.0}"));
                print!(" {v:>9}");
            }
            println!(" {:>10}", ratio_cell(c_time_vs_shm(rec, s)));
        }
        println!("YCSB C reads (us): p50 / p99 / p99.9");
        for s in &ycsb {
            let g = |m| {
                find(
                    rec,
                    "ycsb",
                    m,
                    &[("store", s), ("workload", "c"), ("op", "read")],
                )
                .unwrap_or(0.0)
            };
            println!(
                "{s:<22} {:>7.2} {:>7.2} {:>7.2}",
                g("p50_us"),
                g("p99_us"),
                g("p999_us")
            );
        }
    }
    let cold = stores(rec, "lmdb-cold-scan");
    if !cold.is_empty() {
        println!("Cold scan of every record after reopening (ms; pages installed by prediction):");
        for s in &cold {
            println!(
                "{s:<22} {:>9.1} {:>8.0}",
                find(rec, "lmdb-cold-scan", "scan_ms", &[("store", s)]).unwrap_or(0.0),
                find(rec, "lmdb-cold-scan", "pages_predicted", &[("store", s)]).unwrap_or(0.0)
            );
        }
    }
    let g = |m: &str| find(rec, "lmdb-targets", m, &[]);
    // `?`: the rounds' ratios range over 1 (the spread is wider than the effect).
    let range = |m: &str| {
        find_rec(rec, "lmdb-targets", m, &[]).map_or(String::new(), |r| {
            format!(
                ", rounds {:.2}..{:.2}{}",
                r.min.unwrap_or(r.value),
                r.max.unwrap_or(r.value),
                if spans_one(r) { " ?" } else { "" }
            )
        })
    };
    if let (Some(r), Some(a), Some(b)) = (g("read_ratio"), g("read_ops_pmo"), g("read_ops_shm")) {
        println!(
            "target 1: YCSB C, pmo-secure vs shm interleaved: {a:.0} vs {b:.0} ops/s, {r:.2}x the time (median of rounds{}) (target <= 1.2x): {}",
            range("read_ratio"),
            if r <= 1.2 { "met" } else { "MISSED" }
        );
    }
    if let (Some(r), Some(a), Some(b)) = (g("commit_ratio"), g("commit_us_pmo"), g("commit_us_shm"))
    {
        println!(
            "target 2: 1 KiB durable commit, pmo-secure vs shm interleaved: {a:.1} vs {b:.1} us, {r:.2}x (median of rounds{}) (target <= 1x): {}",
            range("commit_ratio"),
            if r <= 1.0 { "met" } else { "MISSED" }
        );
    }
}

/// The two targets measured side by side: `pmo-secure` and `shm` open at once, loaded alike,
/// then rounds that alternate between them (YCSB C, then a batch of 1 KiB durable commits),
/// so a stall of this shared machine hits both. Ratios are per round; the medians are kept.
fn targets(o: &LmdbBenchOptions, rec: &mut Records) -> Result<(), BenchError> {
    let (rounds, batch) = if o.quick { (5, 200u64) } else { (9, 1000) };
    let mut c = Workload::find('c', o.ycsb_dir.as_deref()).map_err(err)?;
    if !o.parts.iter().any(|p| p == "ycsb") {
        warn_ignored(std::slice::from_ref(&c));
    }
    c.record_count = o.records.unwrap_or(if o.quick { 1000 } else { 10_000 });
    c.operation_count = o.operations.unwrap_or(if o.quick { 5000 } else { 20_000 });
    let bytes = c.record_count * (c.record_len() as u64 + 200);
    let pmo_t = Target::pmo("secure");
    let shm_t = file_targets(o, false).remove(0);
    let mut pmo_s = open(&pmo_t, &o.dir, bytes + batch * 2048)?;
    let mut shm_s = open(&shm_t, &o.dir, bytes + batch * 2048)?;
    pmo_ycsb::load(&mut pmo_s.kv, &c, 1).map_err(err)?;
    pmo_ycsb::load(&mut shm_s.kv, &c, 1).map_err(err)?;
    let (mut rr, mut cr) = (Vec::new(), Vec::new());
    let (mut ra, mut rb, mut ca, mut cb) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let seed = 1000 + round as u64;
        // Alternate which store goes first.
        let order: [&mut Opened; 2] = if round % 2 == 0 {
            [&mut pmo_s, &mut shm_s]
        } else {
            [&mut shm_s, &mut pmo_s]
        };
        let mut tput = [0.0; 2];
        let mut commit = [0.0; 2];
        for (k, st) in order.into_iter().enumerate() {
            tput[k] = pmo_ycsb::run(&mut st.kv, &c, seed)
                .map_err(err)?
                .throughput();
            let mut ns = Vec::with_capacity(batch as usize);
            for i in 0..batch {
                // A record's first 8 bytes stay its number: the driver checks them on reads.
                let n = (seed * 7919 + i * 104_729) % c.record_count;
                let key = pmo_ycsb::gen::key_name(n, true);
                let t0 = Instant::now();
                st.kv.env.put1(key.as_bytes(), &record_1k(n)).map_err(err)?;
                ns.push(t0.elapsed().as_nanos() as f64 / 1e3);
            }
            commit[k] = median(&ns);
        }
        let (tp, ts, cp, cs) = if round % 2 == 0 {
            (tput[0], tput[1], commit[0], commit[1])
        } else {
            (tput[1], tput[0], commit[1], commit[0])
        };
        rr.push(ts / tp);
        cr.push(cp / cs);
        ra.push(tp);
        rb.push(ts);
        ca.push(cp);
        cb.push(cs);
    }
    let p: [(&str, String); 0] = [];
    rec.push_samples("lmdb-targets", &p, "read_ratio", &rr, "x");
    rec.push(
        "lmdb-targets",
        &p,
        "read_ops_pmo",
        median(&ra),
        "ops/s",
        rounds,
    );
    rec.push(
        "lmdb-targets",
        &p,
        "read_ops_shm",
        median(&rb),
        "ops/s",
        rounds,
    );
    rec.push_samples("lmdb-targets", &p, "commit_ratio", &cr, "x");
    rec.push(
        "lmdb-targets",
        &p,
        "commit_us_pmo",
        median(&ca),
        "us",
        rounds,
    );
    rec.push(
        "lmdb-targets",
        &p,
        "commit_us_shm",
        median(&cb),
        "us",
        rounds,
    );
    drop(pmo_s);
    drop(shm_s);
    cleanup(&shm_t);
    Ok(())
}

/// Issue 28: `pmo-secure` and an encrypted peer ([`OtherStore::commit`]) open at once, loaded
/// alike, then rounds alternating between them as [`targets`] does (YCSB C, then a batch of
/// durable 1 KiB commits), so a stall of this shared machine hits both. Records, per peer
/// (`lmdb-peer`, `store`): `read_ratio` and `commit_ratio`, pmo-secure's time over the peer's
/// per round (below 1: pmo-secure ahead), and the medians of both.
fn peer_rounds(
    o: &LmdbBenchOptions,
    peer: &OtherStore,
    rec: &mut Records,
) -> Result<(), BenchError> {
    let (rounds, batch) = if o.quick { (5, 200u64) } else { (9, 1000) };
    let mut c = Workload::find('c', o.ycsb_dir.as_deref()).map_err(err)?;
    c.record_count = o.records.unwrap_or(if o.quick { 1000 } else { 10_000 });
    c.operation_count = o.operations.unwrap_or(if o.quick { 5000 } else { 20_000 });
    let bytes = c.record_count * (c.record_len() as u64 + 200);
    let mut pmo_s = open(&Target::pmo("secure"), &o.dir, bytes + batch * 2048)?;
    let mut peer_s = (peer.open)(&peer.label, &o.dir, bytes + batch * 2048, c.record_count)?;
    pmo_ycsb::load(&mut pmo_s, &c, 1).map_err(err)?;
    pmo_ycsb::load(peer_s.kv.as_mut(), &c, 1).map_err(err)?;
    let (mut rr, mut cr) = (Vec::new(), Vec::new());
    let (mut ra, mut rb, mut ca, mut cb) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let seed = 1000 + round as u64;
        let one = |kv: &mut dyn KvStore| -> Result<(f64, f64), BenchError> {
            let tput = pmo_ycsb::run(kv, &c, seed).map_err(err)?.throughput();
            let mut ns = Vec::with_capacity(batch as usize);
            for i in 0..batch {
                // A record's first 8 bytes stay its number: the driver checks them on reads.
                let n = (seed * 7919 + i * 104_729) % c.record_count;
                let key = pmo_ycsb::gen::key_name(n, true);
                let t0 = Instant::now();
                kv.update(key.as_bytes(), &record_1k(n)).map_err(err)?;
                ns.push(t0.elapsed().as_nanos() as f64 / 1e3);
            }
            Ok((tput, median(&ns)))
        };
        // Alternate which store goes first.
        let ((tp, cp), (tq, cq)) = if round % 2 == 0 {
            let a = one(&mut pmo_s)?;
            (a, one(peer_s.kv.as_mut())?)
        } else {
            let b = one(peer_s.kv.as_mut())?;
            (one(&mut pmo_s)?, b)
        };
        rr.push(tq / tp);
        cr.push(cp / cq);
        ra.push(tp);
        rb.push(tq);
        ca.push(cp);
        cb.push(cq);
    }
    let p = [("store", peer.label.clone())];
    rec.push_samples("lmdb-peer", &p, "read_ratio", &rr, "x");
    rec.push_samples("lmdb-peer", &p, "commit_ratio", &cr, "x");
    for (m, v, unit) in [
        ("read_ops_pmo", &ra, "ops/s"),
        ("read_ops_peer", &rb, "ops/s"),
        ("commit_us_pmo", &ca, "us"),
        ("commit_us_peer", &cb, "us"),
    ] {
        rec.push("lmdb-peer", &p, m, median(v), unit, rounds);
    }
    Ok(())
}

/// The figures: YCSB throughput per store and workload, YCSB C's read latency CDF, the commit
/// time breakdown. Returns their paths.
pub fn draw(rec: &Records, out: &Path) -> Result<Vec<PathBuf>, BenchError> {
    let mut files = Vec::new();
    let ycsb = stores(rec, "ycsb");
    if !ycsb.is_empty() {
        let series: Vec<Series> = ycsb
            .iter()
            .map(|s| {
                let pts = ["a", "b", "c", "d", "e", "f"]
                    .iter()
                    .enumerate()
                    .filter_map(|(i, w)| {
                        find(
                            rec,
                            "ycsb",
                            "throughput_ops",
                            &[("store", s), ("workload", w), ("phase", "run")],
                        )
                        .map(|v| (i as f64, v))
                    });
                let mut series = Series::plain(s.clone(), &pts.collect::<Vec<_>>());
                // C's point is hollow when its repeats cannot tell it from shm's.
                let unsure = c_time_vs_shm(rec, s).is_some_and(|r| r.1);
                for pt in series.points.iter_mut().filter(|pt| pt.x == 2.0) {
                    pt.uncertain = unsure;
                }
                series
            })
            .collect();
        let p = out.join("ycsb-throughput.svg");
        // The workloads are categories: grouped bars (as the papers draw them), a log axis
        // because the stores span decades.
        pmo_bench::plot::grouped_bars(
            &p,
            &BarChart {
                title: "YCSB A-F run phase: throughput per store",
                x_desc: "YCSB workload",
                y_desc: "throughput (ops/s, one run each; log scale)",
                categories: ["A", "B", "C", "D", "E", "F"].map(String::from).to_vec(),
                log_y: true,
                ..Default::default()
            },
            &series,
        )?;
        files.push(p);
        let mut cdf: Vec<Series> = ycsb
            .iter()
            .map(|s| {
                let pts = rec
                    .records
                    .iter()
                    .filter(|r| {
                        r.bench == "ycsb-cdf"
                            && r.params.iter().any(|(k, v)| k == "store" && v == s)
                    })
                    .filter_map(|r| {
                        let q = r
                            .params
                            .iter()
                            .find(|(k, _)| k.as_str() == "q")?
                            .1
                            .parse::<f64>()
                            .ok()?;
                        Some((r.value.max(1e-3), q))
                    });
                Series::plain(s.clone(), &pts.collect::<Vec<_>>())
            })
            .collect();
        let p = out.join("ycsb-c-read-cdf.svg");
        pmo_bench::plot::lines(
            &p,
            &LineChart {
                title: "YCSB C read latency CDF (every read of the run)",
                x_desc: "read latency (µs, log scale)",
                y_desc: "fraction of reads (cumulative)",
                log_x: true,
                ..Default::default()
            },
            &mut cdf,
        )?;
        files.push(p);
    }
    // Milliseconds (the disk's fsync, wedi's whole-PMO checksum) would flatten every other
    // bar: those stores are in the table only.
    let commit: Vec<String> = stores(rec, "lmdb-commit")
        .into_iter()
        .filter(|s| {
            find(
                rec,
                "lmdb-commit",
                "commit_us_p50",
                &[("store", s.as_str())],
            )
            .is_some_and(|v| v < 1000.0)
        })
        .collect();
    if !commit.is_empty() {
        let bars: Vec<Bar> = commit
            .iter()
            .map(|s| {
                let g = |m: &str| find(rec, "lmdb-commit", m, &[("store", s.as_str())]);
                // The median commit, split by each category's share of the sum of the
                // categories' medians (per-commit medians do not add up to the median commit).
                let p50 = g("commit_us_p50").unwrap_or(0.0);
                let parts = match g("psync_crypt_us") {
                    Some(c) => {
                        let cats = [
                            ("psync crypt", c),
                            ("psync persist", g("psync_persist_us").unwrap_or(0.0)),
                            ("page faults", g("fault_us").unwrap_or(0.0)),
                            ("LMDB + rest", g("lmdb_other_us").unwrap_or(0.0)),
                        ];
                        let total: f64 = cats.iter().map(|c| c.1).sum::<f64>().max(1e-9);
                        cats.iter().map(|&(n, v)| (n, p50 * v / total)).collect()
                    }
                    None => vec![
                        ("psync crypt", 0.0),
                        ("psync persist", 0.0),
                        ("page faults", 0.0),
                        ("LMDB + rest", p50),
                    ],
                };
                Bar {
                    label: s.clone(),
                    parts,
                    // Hollow: the batches' range of its ratio to shm includes 1.
                    uncertain: vs_shm(rec, "lmdb-commit", "commit_us_p50", s, &[])
                        .is_some_and(|r| r.1),
                }
            })
            .collect();
        let p = out.join("lmdb-commit.svg");
        pmo_bench::plot::stacked_bars(
            &p,
            "1 KiB durable commit (median over commits, split by category)",
            "commit time (µs, median)",
            &bars,
            None,
        )?;
        files.push(p);
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Workload files whose counts overflow the benchmark's sums: an error, not a panic (debug)
    /// or a wrapped size (release).
    #[test]
    fn huge_workload_counts_are_an_error_not_an_overflow() {
        let d = std::env::temp_dir().join(format!("pmo-lmdb-ycsb-huge-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let mut o = LmdbBenchOptions::new(false);
        o.ycsb_dir = Some(d.clone());
        for (text, small, says) in [
            ("recordcount=9223372036854775807\n", false, "recordcount"),
            (
                "operationcount=9223372036854775807\n",
                false,
                "operationcount",
            ),
            ("recordcount=9223372036854775807\n", true, "2^64"),
            (
                "recordcount=100000000000000\nfieldcount=1000\nfieldlength=1000000\n",
                true,
                "2^64",
            ),
        ] {
            std::fs::write(d.join("workloada"), text).unwrap();
            match workloads(&o, small) {
                Ok(_) => panic!("{text:?} accepted"),
                Err(e) => assert!(e.to_string().contains(says), "{text:?}: {e}"),
            }
        }
        std::fs::write(d.join("workloada"), "recordcount=1000\n").unwrap();
        let ws = workloads(&o, false).unwrap();
        assert_eq!(ws[0].record_count, 10_000);
        std::fs::remove_dir_all(&d).unwrap();
    }
}

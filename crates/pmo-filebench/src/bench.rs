//! `pmo bench filebench`: personalities x schemes x placement x prediction x latency x threads
//! x sync mode, each cell on a fresh pool (or a fresh plain directory), medians over repeats.
//!
//! Studies:
//!
//! | study | cells | figure |
//! |---|---|---|
//! | `fig10` | every workload x the designs (none, wedi, wed, bp, bp-ip, bp-id, sp, sp-ip, sp-id, secure) + the POSIX peer | LOaPP Fig. 10: MB/s per design normalised to wedi; the Fig. 6 time categories per op |
//! | `threads` | every workload x {wedi, sp-id, secure} x thread counts | LOaPP Fig. 11b: thread scaling |
//! | `design` | {none, secure, wedi} x {one PMO per file, one PMO for the whole store} | the choice of `docs/filebench.md`: a file's create + 16 KiB write + fsync + close + unlink as PMO operations, against a 16 KiB write + psync in one PMO as large as the fileset |
//! | `lpmo` | every workload x {sp:medium (the LOaPP kernel's plaintext on the medium), sp (DRAM cache), sp + prediction, sp-ip + prediction, sp-ip + prediction on cxl-far, sp and sp-ip + prediction with its history kept across attaches} | the LPMO Filebench bars, normalised to sp:medium |
//!
//! Records (`bench=filebench`): per cell `ops_per_s`, `mb_per_s`, `ops`, `read_bytes`,
//! `write_bytes`, `syncs`, per flowop `flowop_us` (param `flowop`), and for PMO cells the
//! store's Fig. 6 categories as `cat_us_per_op` (param `category`).

use std::path::{Path, PathBuf};

use pmo_bench::suite::EnvGuard;
use pmo_bench::{median, plot, BenchError, Records};
use pmo_fs::{FileStore, FsOptions};
use pmo_store::{AttachOptions, KdfParams, Pool, PoolOptions, PredictConfig, Scheme};

use crate::backend::{PmoBackend, PosixBackend};
use crate::model::Workload;
use crate::personalities;
use crate::run::{run, RunOptions, SyncMode};

/// The studies, in order.
pub const STUDIES: [&str; 4] = ["fig10", "threads", "lpmo", "design"];

/// Where a workload comes from.
#[derive(Clone, Debug)]
pub enum Source {
    BuiltIn(String),
    File(PathBuf),
}

/// Options of the benchmark.
#[derive(Clone, Debug)]
pub struct FbOptions {
    pub workloads: Vec<Source>,
    /// `--set VAR=VALUE`, applied on top of the size preset.
    pub sets: Vec<(String, String)>,
    /// Small sizes that fit a 2-core machine (ignored by `--paper`).
    pub preset: Vec<(String, String)>,
    pub seconds: f64,
    pub repeats: usize,
    pub schemes: Vec<String>,
    pub threads: Vec<usize>,
    pub sync: Vec<SyncMode>,
    pub predict: String,
    pub latency: Vec<String>,
    pub studies: Vec<String>,
    /// Run against this plain directory instead of PMOs.
    pub posix_dir: Option<PathBuf>,
    /// Where pools go.
    pub pool_dir: PathBuf,
    /// Where the `posix-disk` peer of the fig10 study runs: a directory on a disk file system
    /// (`None`: no such cell). The `posix` peer runs in `pool_dir` (tmpfs where that is
    /// `/dev/shm`), persisting nothing; `posix-disk` pays real `fsync`s.
    pub disk_dir: Option<PathBuf>,
}

/// The first directory of `PMO_FB_DISK_DIR`, `/var/tmp`, the temporary directory and the
/// working directory that exists and is not on tmpfs: where the disk peer runs by default.
pub fn default_disk_dir() -> Option<PathBuf> {
    let candidates = std::env::var_os("PMO_FB_DISK_DIR")
        .map(PathBuf::from)
        .into_iter()
        .chain([
            PathBuf::from("/var/tmp"),
            std::env::temp_dir(),
            std::env::current_dir().unwrap_or_default(),
        ]);
    candidates
        .into_iter()
        .find(|d| d.is_dir() && !pmo_os::map::on_tmpfs(d))
}

fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
    p.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

impl FbOptions {
    /// Defaults: `quick` is the short run of `pmo bench --quick`; `paper` the seeds' 5 x 30 s
    /// with 8 threads at Filebench's own sizes.
    pub fn new(quick: bool, paper: bool) -> FbOptions {
        let mut o = FbOptions {
            workloads: personalities::NAMES
                .iter()
                .map(|n| Source::BuiltIn(n.to_string()))
                .collect(),
            sets: vec![],
            preset: pairs(&[("nfiles", "200"), ("meandirwidth", "20")]),
            seconds: 3.0,
            repeats: 3,
            schemes: [
                "none", "wedi", "wed", "bp", "bp-ip", "bp-id", "sp", "sp-ip", "sp-id", "secure",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
            threads: vec![1, 2, 4, 8],
            sync: vec![SyncMode::Paper],
            predict: "8".into(),
            latency: vec!["dram".into()],
            studies: STUDIES.iter().map(|s| s.to_string()).collect(),
            posix_dir: None,
            disk_dir: default_disk_dir(),
            pool_dir: if Path::new("/dev/shm").is_dir() {
                "/dev/shm".into()
            } else {
                std::env::temp_dir()
            },
        };
        if quick {
            o.preset = pairs(&[("nfiles", "40"), ("meandirwidth", "20")]);
            o.seconds = 0.5;
            o.repeats = 1;
            o.schemes = ["none", "wedi", "sp", "sp-id", "secure"]
                .iter()
                .map(|s| s.to_string())
                .collect();
            o.threads = vec![1, 2];
        }
        if paper {
            // The seeds' method: Filebench's own sizes, 5 runs of 30 s, 8 threads, psync at
            // every write between barriers; the designs (fig10) and the LPMO bars. The thread
            // scaling study stays available with `--study threads --threads ...`.
            o.preset = vec![];
            o.seconds = 30.0;
            o.repeats = 5;
            o.threads = vec![8];
            o.sync = vec![SyncMode::Paper];
            o.studies = vec!["fig10".into(), "lpmo".into()];
        }
        o
    }

    fn default_threads(&self) -> usize {
        if self.threads.contains(&8) {
            8
        } else {
            self.threads.iter().copied().max().unwrap_or(1)
        }
    }
}

/// One cell of the matrix.
#[derive(Clone, Debug)]
struct Cell {
    study: &'static str,
    workload: usize,
    /// Scheme name, or `posix`.
    target: String,
    threads: usize,
    sync: SyncMode,
    predict: String,
    latency: String,
}

fn load(src: &Source, sets: &[(String, String)]) -> Result<Workload, BenchError> {
    let w = match src {
        Source::BuiltIn(n) => personalities::personality(n, sets),
        Source::File(p) => {
            let text = read_workload_file(p)?;
            Workload::from_text(&p.display().to_string(), &text, sets)
        }
    };
    w.map_err(|e| BenchError::Other(e.to_string()))
}

/// The largest workload file read (Filebench's are a few KiB).
pub const MAX_WORKLOAD_FILE: u64 = 1 << 20;

/// The text of workload file `p`: a regular file of at most [`MAX_WORKLOAD_FILE`] bytes (a
/// device or a fifo, `/dev/zero`, would be read until memory runs out).
pub fn read_workload_file(p: &std::path::Path) -> Result<String, BenchError> {
    let err = |source| BenchError::Io {
        op: format!("read {}", p.display()),
        source,
    };
    let invalid = |msg: String| err(std::io::Error::new(std::io::ErrorKind::InvalidInput, msg));
    let meta = std::fs::metadata(p).map_err(err)?;
    if !meta.is_file() {
        return Err(invalid("not a regular file, so no workload file".into()));
    }
    let mut text = String::new();
    std::io::Read::read_to_string(
        &mut std::io::Read::take(std::fs::File::open(p).map_err(err)?, MAX_WORKLOAD_FILE + 1),
        &mut text,
    )
    .map_err(err)?;
    if text.len() as u64 > MAX_WORKLOAD_FILE {
        return Err(invalid(format!(
            "larger than {MAX_WORKLOAD_FILE} bytes, so no workload file"
        )));
    }
    Ok(text)
}

/// Load every workload with the preset and `--set` applied (checks them before any run).
pub fn load_all(opts: &FbOptions) -> Result<Vec<Workload>, BenchError> {
    let mut sets = opts.preset.clone();
    sets.retain(|(k, _)| !opts.sets.iter().any(|(k2, _)| k2 == k));
    sets.extend(opts.sets.iter().cloned());
    opts.workloads.iter().map(|s| load(s, &sets)).collect()
}

fn with_threads(w: &Workload, n: usize) -> Workload {
    let mut w = w.clone();
    let proto = w.threads[0].clone();
    w.threads = vec![proto; n];
    w
}

fn cells(opts: &FbOptions, n_workloads: usize) -> Vec<Cell> {
    let mut out = vec![];
    let t = opts.default_threads();
    let base = |study, workload, target: &str, sync| Cell {
        study,
        workload,
        target: target.into(),
        threads: t,
        sync,
        predict: "off".into(),
        latency: "dram".into(),
    };
    let wants = |s: &str| opts.studies.iter().any(|x| x == s);
    if opts.posix_dir.is_some() {
        for w in 0..n_workloads {
            for &sync in &opts.sync {
                for &th in &opts.threads {
                    out.push(Cell {
                        threads: th,
                        ..base("posix", w, "posix", sync)
                    });
                }
            }
        }
        return out;
    }
    for w in 0..n_workloads {
        for &sync in &opts.sync {
            if wants("fig10") {
                for s in &opts.schemes {
                    for l in &opts.latency {
                        out.push(Cell {
                            latency: l.clone(),
                            ..base("fig10", w, s, sync)
                        });
                    }
                }
                out.push(base("fig10", w, "posix", sync));
                if opts.disk_dir.is_some() {
                    out.push(base("fig10", w, "posix-disk", sync));
                }
            }
            if wants("threads") {
                for s in ["wedi", "sp-id", "secure"] {
                    for &th in &opts.threads {
                        out.push(Cell {
                            threads: th,
                            ..base("threads", w, s, sync)
                        });
                    }
                }
            }
            if wants("lpmo") {
                let p = opts.predict.clone();
                out.push(base("lpmo", w, "sp:medium", sync));
                out.push(base("lpmo", w, "sp", sync));
                out.push(Cell {
                    predict: p.clone(),
                    ..base("lpmo", w, "sp", sync)
                });
                out.push(Cell {
                    predict: p.clone(),
                    ..base("lpmo", w, "sp-ip", sync)
                });
                out.push(Cell {
                    predict: p.clone(),
                    latency: "cxl-far".into(),
                    ..base("lpmo", w, "sp-ip", sync)
                });
                // The same predictors keeping their history across a file's open/close
                // cycles (`PredictConfig::history`).
                if p != "off" && !p.ends_with("+history") {
                    for s in ["sp", "sp-ip"] {
                        out.push(Cell {
                            predict: format!("{p}+history"),
                            ..base("lpmo", w, s, sync)
                        });
                    }
                }
            }
        }
    }
    out
}

/// Pool bytes for a workload: its files at their mean size (at least a page each, a quarter
/// more for appends) twice over for shadow paging, plus room to grow; sparse, so only what is
/// used costs memory.
fn pool_bytes(w: &Workload) -> u64 {
    let files: f64 = w
        .filesets
        .iter()
        .map(|f| f.entries as f64 * (f.size.mean() * 1.25 + 8192.0).max(8192.0))
        .sum();
    // At least 4 GiB (the pool file is sparse: only what is written takes memory): a workload
    // that appends to a log (webserver's `appendlog`) grows it for the whole run, by doubling
    // segments, and at 100,000 operations a second a 256 MiB pool ran out within 3 s.
    ((files * 6.0) as u64).clamp(4 << 30, 16 << 30)
}

struct Sample {
    r: crate::run::RunResult,
    cats: Option<pmo_store::SessionStats>,
}

fn run_once(opts: &FbOptions, w: &Workload, c: &Cell, rep: usize) -> Result<Sample, BenchError> {
    let ro = RunOptions {
        seconds_cap: Some(opts.seconds),
        default_seconds: opts.seconds,
        sync: c.sync,
        seed: 0x5eed + rep as u64,
    };
    let fail = |e: crate::run::RunError| BenchError::Other(format!("{} {}: {e}", w.name, c.target));
    if c.target == "posix" || c.target == "posix-disk" {
        let dir = match (c.target.as_str(), &opts.disk_dir) {
            ("posix-disk", Some(d)) => d.clone(),
            _ => opts
                .posix_dir
                .clone()
                .unwrap_or_else(|| opts.pool_dir.clone()),
        };
        let root = dir.join(format!("pmo-filebench-{}-{}", std::process::id(), w.name));
        let _ = std::fs::remove_dir_all(&root);
        let b = PosixBackend::new(root.clone());
        let r = run(w, &b, &ro);
        let _ = std::fs::remove_dir_all(&root);
        return Ok(Sample {
            r: r.map_err(fail)?,
            cats: None,
        });
    }
    let scheme = Scheme::from_name(&c.target)?;
    let _lat = EnvGuard::set("PMO_LATENCY", &c.latency);
    let path = opts
        .pool_dir
        .join(format!("pmo-filebench-{}.pool", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let entries: u64 = w.filesets.iter().map(|f| f.entries).sum();
    let pool = Pool::create(
        &path,
        pool_bytes(w),
        &PoolOptions {
            // The parameters a user's pool has: the file store's PMOs form one key family, so
            // they cost one Argon2id per pool and process, as for a user (docs/filebench.md).
            kdf: KdfParams::DEFAULT,
            ns_capacity: Some((entries * 2 + 256).min(1 << 20)),
            scheme,
            ..Default::default()
        },
    );
    let pool = pool?;
    let result = (|| {
        let attach = AttachOptions {
            predict: Some(PredictConfig::parse(&c.predict)?),
            ..Default::default()
        };
        let fs = FileStore::open(
            pool,
            FsOptions {
                attach,
                ..Default::default()
            },
        )
        .map_err(|e| BenchError::Other(e.to_string()))?;
        let b = PmoBackend { fs: fs.clone() };
        let r = run(w, &b, &ro).map_err(fail)?;
        // The files still kept after their close (`pmo_fs::WriteBack`) are written back after
        // the timed run, as a kernel's dirty pages are (ext4 writes none of them back within a
        // run either); their sessions then count in the categories.
        fs.sync_all()
            .map_err(|e| BenchError::Other(e.to_string()))?;
        let cats = fs.session_stats();
        drop(b);
        drop(fs);
        pmo_store::wait_for_background_detaches();
        Ok(Sample {
            r,
            cats: Some(cats),
        })
    })();
    let _ = std::fs::remove_file(&path);
    result
}

/// The `design` study: what an fsync-heavy file costs under each layout. One PMO per file:
/// create (pcreate + attach), write 16 KiB, fsync (psync), close (detach), unlink (pdestroy),
/// through the file store. One PMO for the whole store: write 16 KiB at a random place of an
/// attached PMO as large as `store_bytes` and psync it (what a file system inside one PMO
/// pays per fsync at least, before its own metadata). Microseconds per operation, medians.
fn design_study(
    opts: &FbOptions,
    store_bytes: u64,
    records: &mut Records,
) -> Result<(), BenchError> {
    let iters = if opts.repeats <= 1 { 40 } else { 200 };
    let data = vec![0x3cu8; 16 << 10];
    for scheme in ["none", "secure", "wedi"] {
        let sch = Scheme::from_name(scheme)?;
        let path = opts
            .pool_dir
            .join(format!("pmo-filebench-design-{}.pool", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let pool = Pool::create(
            &path,
            store_bytes * 3 + (64 << 20),
            &PoolOptions {
                kdf: KdfParams::DEFAULT,
                ns_capacity: Some(1024),
                scheme: sch,
                ..Default::default()
            },
        )?;
        let r = (|| -> Result<(f64, f64), BenchError> {
            let fs = FileStore::open(pool.clone(), FsOptions::default())
                .map_err(|e| BenchError::Other(e.to_string()))?;
            let mut per_file = vec![];
            for i in 0..iters {
                let t = std::time::Instant::now();
                let f = fs.create(&format!("/f{i}"), data.len() as u64);
                let f = f.map_err(|e| BenchError::Other(e.to_string()))?;
                let r = f
                    .pwrite(0, &data)
                    .and_then(|_| f.fsync())
                    .and_then(|_| f.close());
                r.and_then(|_| fs.unlink(&format!("/f{i}")))
                    .map_err(|e| BenchError::Other(e.to_string()))?;
                per_file.push(t.elapsed().as_secs_f64() * 1e6);
            }
            pool.pcreate_with(
                "whole-store",
                store_bytes,
                &FsOptions::default().key,
                Some(sch),
            )?;
            let a = pool.attach_with(
                "whole-store",
                pmo_store::Perm::Write,
                &FsOptions::default().key,
                AttachOptions::default(),
            )?;
            let mut one = vec![];
            let span = (store_bytes as usize).saturating_sub(data.len()).max(1);
            for i in 0..iters {
                let off = (i * 7919 * 4096) % span;
                let t = std::time::Instant::now();
                a.write_at(off, &data)?;
                a.psync()?;
                one.push(t.elapsed().as_secs_f64() * 1e6);
            }
            drop(a);
            pmo_store::wait_for_background_detaches();
            Ok((median(&per_file), median(&one)))
        })();
        let _ = std::fs::remove_file(&path);
        let (per_file, one) = r?;
        for (layout, v) in [("pmo-per-file", per_file), ("one-pmo", one)] {
            records.push(
                "filebench",
                &[
                    ("study", "design".into()),
                    ("scheme", scheme.into()),
                    ("layout", layout.into()),
                    ("store_bytes", store_bytes.to_string()),
                ],
                "fsync_cycle_us",
                v,
                "us",
                iters,
            );
        }
        eprintln!("design {scheme:<7} one PMO per file: {per_file:>9.1} us per create+write+fsync+close+unlink; one {store_bytes}-byte PMO: {one:>9.1} us per write+psync");
    }
    Ok(())
}

/// The file system a cell's files or pool live on.
fn fs_of(opts: &FbOptions, c: &Cell) -> String {
    let dir = match c.target.as_str() {
        "posix-disk" => opts.disk_dir.clone(),
        "posix" => Some(
            opts.posix_dir
                .clone()
                .unwrap_or_else(|| opts.pool_dir.clone()),
        ),
        _ => Some(opts.pool_dir.clone()),
    };
    dir.and_then(|d| pmo_os::map::fs_name(&d))
        .unwrap_or_else(|| "unknown".into())
}

/// Run every cell; progress on stderr; records into `out`. Cells that fail are reported and
/// the rest still run; the error lists them.
pub fn run_bench(opts: &FbOptions, records: &mut Records) -> Result<(), BenchError> {
    // What killed runs left where this one works (`leftovers`).
    let dirs = [
        Some(&opts.pool_dir),
        opts.posix_dir.as_ref(),
        opts.disk_dir.as_ref(),
    ];
    for dir in dirs.into_iter().flatten() {
        for gone in crate::leftovers::sweep(dir) {
            eprintln!(
                "[filebench] removed {}, left by a run that was killed",
                gone.display()
            );
        }
    }
    let workloads = load_all(opts)?;
    if opts.posix_dir.is_none() && opts.studies.iter().any(|s| s == "design") {
        // As large as the first workload's fileset would be (at least 16 MiB).
        let bytes = workloads
            .first()
            .map(|w| {
                w.filesets
                    .iter()
                    .map(|f| (f.entries as f64 * f.size.mean()) as u64)
                    .sum::<u64>()
            })
            .unwrap_or(0)
            .clamp(16 << 20, 1 << 30)
            .div_ceil(4096)
            * 4096;
        design_study(opts, bytes, records)?;
    }
    let cells = cells(opts, workloads.len());
    // Each distinct error once, with the cells that met it (a bad workload file fails every
    // cell alike: one message, not one per cell).
    let mut failed: Vec<(String, Vec<String>)> = vec![];
    let mut n_failed = 0;
    for (k, c) in cells.iter().enumerate() {
        let w = with_threads(&workloads[c.workload], c.threads);
        let mut samples = vec![];
        for rep in 0..opts.repeats.max(1) {
            match run_once(opts, &w, c, rep) {
                Ok(s) => samples.push(s),
                Err(e) => {
                    n_failed += 1;
                    let cell = format!("{} {}", w.name, c.target);
                    let e = e.to_string();
                    let msg = e
                        .strip_prefix(&format!("{cell}: "))
                        .unwrap_or(&e)
                        .to_string();
                    match failed.iter_mut().find(|(m, _)| *m == msg) {
                        Some((_, cs)) => cs.push(cell),
                        None => failed.push((msg, vec![cell])),
                    }
                    break;
                }
            }
        }
        if samples.len() < opts.repeats.max(1) {
            eprintln!("[{}/{}] {} {} FAILED", k + 1, cells.len(), w.name, c.target);
            continue;
        }
        let med = |f: &dyn Fn(&Sample) -> f64| median(&samples.iter().map(f).collect::<Vec<_>>());
        let mut params: Vec<(&str, String)> = vec![
            ("study", c.study.into()),
            ("workload", w.name.clone()),
            (
                "backend",
                if c.target.starts_with("posix") {
                    "posix"
                } else {
                    "pmo"
                }
                .into(),
            ),
            ("fs", fs_of(opts, c)),
            ("scheme", c.target.clone()),
            ("sync", c.sync.name().into()),
            ("threads", c.threads.to_string()),
            ("predict", c.predict.clone()),
            ("latency", c.latency.clone()),
            (
                "sizes",
                w.vars
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(";"),
            ),
            ("seconds", format!("{}", opts.seconds)),
        ];
        // What ran differently from Filebench (directio, aiowrite, cached, ...): in every
        // record of the cell and in the printed notes.
        if !samples[0].r.notes.is_empty() {
            params.push(("notes", samples[0].r.notes.join(" | ")));
        }
        let n = samples.len();
        let push =
            |records: &mut Records, extra: &[(&str, String)], metric: &str, v: f64, unit: &str| {
                let mut p = params.clone();
                p.extend(extra.iter().cloned());
                records.push("filebench", &p, metric, v, unit, n);
            };
        let ops = med(&|s| s.r.ops_per_s());
        let mbs = med(&|s| s.r.mb_per_s());
        // The throughputs keep their samples' min and max: a ratio whose range includes 1 is
        // marked in the tables and figures (as the suite's are).
        let each = |f: &dyn Fn(&Sample) -> f64| samples.iter().map(f).collect::<Vec<_>>();
        records.push_samples(
            "filebench",
            &params,
            "ops_per_s",
            &each(&|s| s.r.ops_per_s()),
            "ops/s",
        );
        records.push_samples(
            "filebench",
            &params,
            "mb_per_s",
            &each(&|s| s.r.mb_per_s()),
            "MB/s",
        );
        push(records, &[], "ops", med(&|s| s.r.ops as f64), "ops");
        push(
            records,
            &[],
            "read_bytes",
            med(&|s| s.r.read_bytes as f64),
            "B",
        );
        push(
            records,
            &[],
            "write_bytes",
            med(&|s| s.r.write_bytes as f64),
            "B",
        );
        push(records, &[], "syncs", med(&|s| s.r.syncs as f64), "syncs");
        push(records, &[], "setup_s", med(&|s| s.r.setup_seconds), "s");
        for (i, f) in samples[0].r.flowops.iter().enumerate() {
            let us = med(&|s| s.r.flowops.get(i).map_or(f64::NAN, |x| x.mean_us()));
            push(
                records,
                &[("flowop", f.name.clone())],
                "flowop_us",
                us,
                "us",
            );
        }
        if samples[0].cats.is_some() {
            let cat_names: Vec<&str> = pmo_store::SessionStats::default()
                .categories()
                .iter()
                .map(|c| c.0)
                .collect();
            for (ci, name) in cat_names.iter().enumerate() {
                let v = med(&|s| {
                    let c = s.cats.unwrap_or_default().categories()[ci].1 as f64;
                    c / 1e3 / (s.r.ops.max(1) as f64)
                });
                push(
                    records,
                    &[("category", name.to_string())],
                    "cat_us_per_op",
                    v,
                    "us/op",
                );
            }
        }
        eprintln!(
            "[{}/{}] {:<10} {:<14} {:<5} {:>2} thr predict={:<4} {:<8} {:>10.0} ops/s {:>8.1} MB/s",
            k + 1,
            cells.len(),
            w.name,
            c.target,
            c.sync.name(),
            c.threads,
            c.predict,
            c.latency,
            ops,
            mbs
        );
    }
    if failed.is_empty() {
        Ok(())
    } else {
        let each: Vec<String> = failed
            .iter()
            .map(|(msg, cs)| format!("{msg} (in {})", cs.join(", ")))
            .collect();
        Err(BenchError::Other(format!(
            "{n_failed} cell(s) failed: {}",
            each.join("; ")
        )))
    }
}

fn param<'a>(r: &'a pmo_bench::Record, k: &str) -> &'a str {
    r.params.get(k).map(|s| s.as_str()).unwrap_or("")
}

/// The fig10 study's MB/s record of one workload, sync mode and design (or peer).
fn fig10_mb<'r>(
    records: &'r Records,
    w: &str,
    sync: &str,
    s: &str,
) -> Option<&'r pmo_bench::Record> {
    record(
        records,
        "fig10",
        "mb_per_s",
        &[("workload", w), ("sync", sync), ("scheme", s)],
    )
}

fn record<'r>(
    records: &'r Records,
    study: &str,
    metric: &str,
    keys: &[(&str, &str)],
) -> Option<&'r pmo_bench::Record> {
    records.records.iter().find(|r| {
        r.bench == "filebench"
            && r.metric == metric
            && param(r, "study") == study
            && keys.iter().all(|(k, v)| param(r, k) == *v)
    })
}

fn value(records: &Records, study: &str, metric: &str, keys: &[(&str, &str)]) -> Option<f64> {
    record(records, study, metric, keys).map(|r| r.value)
}

/// `num / den` of two MB/s records and whether it is uncertain (its samples' range of ratios
/// includes 1: `pmo_bench::record::ratio`, the suite's rule).
fn mb_ratio(
    num: Option<&pmo_bench::Record>,
    den: Option<&pmo_bench::Record>,
) -> Option<(f64, bool)> {
    match (num, den) {
        (Some(n), Some(d)) if d.value > 0.0 => Some(pmo_bench::record::ratio(n, d)),
        _ => None,
    }
}

/// "1.23x" or "1.23x?" for a table.
fn ratio_cell((v, uncertain): (f64, bool)) -> String {
    format!("{v:.2}x{}", if uncertain { "?" } else { "" })
}

const MARK_NOTE: &str =
    "?: the samples' spread is wider than the effect (the ratio's min..max range includes 1)";

/// The MB/s record of a cell of the `threads` study.
fn thread_mbs<'r>(
    records: &'r Records,
    w: &str,
    sync: &str,
    scheme: &str,
    threads: &str,
) -> Option<&'r pmo_bench::Record> {
    let keys = [
        ("workload", w),
        ("sync", sync),
        ("scheme", scheme),
        ("threads", threads),
    ];
    record(records, "threads", "mb_per_s", &keys)
}

fn distinct(records: &Records, study: &str, key: &str) -> Vec<String> {
    let mut out: Vec<String> = vec![];
    for r in &records.records {
        if r.bench == "filebench"
            && param(r, "study") == study
            && !out.iter().any(|x| x == param(r, key))
        {
            out.push(param(r, key).to_string());
        }
    }
    out
}

/// Print [`tables`].
pub fn print_tables(records: &Records) {
    print!("{}", tables(records));
}

/// The tables: MB/s per design normalised to wedi, thread scaling, the LPMO bars; a ratio
/// whose samples' range includes 1 is marked `?`.
pub fn tables(records: &Records) -> String {
    use std::fmt::Write;
    let mut text = String::new();
    let o = &mut text;
    macro_rules! say {
        ($($t:tt)*) => {{ let _ = write!(o, $($t)*); }};
    }
    macro_rules! sayln {
        ($($t:tt)*) => {{ let _ = writeln!(o, $($t)*); }};
    }
    for sync in distinct(records, "fig10", "sync") {
        sayln!("\nFilebench, LOaPP Fig. 10: MB/s per design, normalised to wedi (sync {sync}; median of repeats; machine shared with other builds)");
        let schemes = distinct(records, "fig10", "scheme");
        say!("{:<11}", "workload");
        for s in &schemes {
            say!(" {s:>9}");
        }
        sayln!();
        for w in distinct(records, "fig10", "workload") {
            let get = |s: &str| fig10_mb(records, &w, &sync, s);
            let base = get("wedi");
            say!("{w:<11}");
            for s in &schemes {
                match (mb_ratio(get(s), base), get(s)) {
                    (Some(r), _) => say!(" {:>9}", ratio_cell(r)),
                    (None, Some(v)) => say!(" {:>7.1}MB", v.value),
                    _ => say!(" {:>9}", "-"),
                }
            }
            sayln!();
        }
        sayln!("{MARK_NOTE}");
        let sizes = records
            .records
            .iter()
            .find(|r| param(r, "study") == "fig10")
            .map(|r| {
                format!(
                    "sizes: {}; {} s per run; {} threads",
                    param(r, "sizes"),
                    param(r, "seconds"),
                    param(r, "threads")
                )
            })
            .unwrap_or_default();
        sayln!("{sizes}");
        // Against the POSIX peers (issue 29): the file store's bandwidth over ext4's on the
        // disk (real fsyncs) and over tmpfs's (persisting nothing), each measured in this run.
        let peers: Vec<(String, String)> = ["posix-disk", "posix"]
            .iter()
            .filter_map(|p| {
                records
                    .records
                    .iter()
                    .find(|r| {
                        param(r, "study") == "fig10"
                            && param(r, "scheme") == *p
                            && param(r, "sync") == sync
                    })
                    .map(|r| (p.to_string(), param(r, "fs").to_string()))
            })
            .collect();
        if !peers.is_empty() {
            sayln!("\nThe file store against POSIX file systems (sync {sync}): MB/s of each design / the peer's");
            say!("{:<11} {:<18}", "workload", "peer");
            let designs: Vec<&String> =
                schemes.iter().filter(|s| !s.starts_with("posix")).collect();
            for s in &designs {
                say!(" {s:>9}");
            }
            sayln!();
            for w in distinct(records, "fig10", "workload") {
                let get = |s: &str| fig10_mb(records, &w, &sync, s);
                for (p, fs) in &peers {
                    say!("{w:<11} {:<18}", format!("{p} ({fs})"));
                    for s in &designs {
                        match mb_ratio(get(s), get(p)) {
                            Some(r) => say!(" {:>9}", ratio_cell(r)),
                            None => say!(" {:>9}", "-"),
                        }
                    }
                    sayln!();
                }
            }
        }
    }
    if !distinct(records, "design", "scheme").is_empty() {
        sayln!("\nFile layout (docs/filebench.md): us per fsync-heavy file operation (median; machine shared with other builds)");
        for s in distinct(records, "design", "scheme") {
            let get = |l: &str| {
                value(
                    records,
                    "design",
                    "fsync_cycle_us",
                    &[("scheme", &s), ("layout", l)],
                )
                .unwrap_or(f64::NAN)
            };
            sayln!(
                "{s:<8} one PMO per file (create+write 16K+fsync+close+unlink): {:>9.1} us   one PMO for the store (write 16K+psync): {:>9.1} us",
                get("pmo-per-file"),
                get("one-pmo")
            );
        }
    }
    for sync in distinct(records, "threads", "sync") {
        sayln!("\nFilebench, LOaPP Fig. 11b: MB/s by threads (sync {sync}; ? marks a point its samples cannot tell from the first thread count's)");
        let threads = distinct(records, "threads", "threads");
        for w in distinct(records, "threads", "workload") {
            for s in distinct(records, "threads", "scheme") {
                say!("{w:<11} {s:<8}");
                let first = threads
                    .first()
                    .and_then(|t| thread_mbs(records, &w, &sync, &s, t));
                for t in &threads {
                    let v = thread_mbs(records, &w, &sync, &s, t);
                    let mark = match mb_ratio(v, first) {
                        Some((_, true)) => "?",
                        _ => " ",
                    };
                    say!(" {t}:{:>8.1}{mark}", v.map_or(f64::NAN, |r| r.value));
                }
                sayln!();
            }
        }
    }
    for sync in distinct(records, "lpmo", "sync") {
        sayln!("\nFilebench, LPMO bars: MB/s normalised to sp:medium (plaintext on the medium, the LOaPP kernel design) (sync {sync})");
        for w in distinct(records, "lpmo", "workload") {
            say!("{w:<11}");
            let base = record(
                records,
                "lpmo",
                "mb_per_s",
                &[("workload", &w), ("sync", &sync), ("scheme", "sp:medium")],
            );
            for (label, ..) in lpmo_bars(records, &w, &sync) {
                let cell = label_ratio(records, &w, &sync, &label, base)
                    .map_or_else(|| "-".to_string(), ratio_cell);
                say!("  {label}: {cell}");
            }
            sayln!();
        }
        sayln!("{MARK_NOTE}");
    }
    let mut notes: Vec<(String, String, String)> = vec![];
    for r in records.records.iter().filter(|r| r.bench == "filebench") {
        let n = param(r, "notes");
        let key = (
            param(r, "workload").to_string(),
            param(r, "backend").to_string(),
            n.to_string(),
        );
        if !n.is_empty() && !notes.contains(&key) {
            notes.push(key);
        }
    }
    if !notes.is_empty() {
        sayln!("\nNotes (what ran differently from Filebench on a kernel file system):");
        for (w, b, n) in notes {
            for line in n.split(" | ") {
                sayln!("  {w} on {b}: {line}");
            }
        }
    }
    text
}

/// The LPMO bars of a workload: (label, scheme, predict, latency).
fn lpmo_bars(records: &Records, w: &str, sync: &str) -> Vec<(String, String, String, String)> {
    records
        .records
        .iter()
        .filter(|r| {
            r.bench == "filebench"
                && r.metric == "mb_per_s"
                && param(r, "study") == "lpmo"
                && param(r, "workload") == w
                && param(r, "sync") == sync
        })
        .map(|r| {
            let (s, p, l) = (param(r, "scheme"), param(r, "predict"), param(r, "latency"));
            let hist = if p.ends_with("+history") {
                "+history"
            } else {
                ""
            };
            let label = match (s, p == "off", l) {
                ("sp:medium", _, _) => "medium".to_string(),
                ("sp", true, _) => "dram-cache".into(),
                ("sp", false, _) => format!("predict{hist}"),
                (_, false, "dram") => format!("predict+integrity{hist}"),
                (_, _, l) => format!("predict+integrity{hist}@{l}"),
            };
            (label, s.to_string(), p.to_string(), l.to_string())
        })
        .collect()
}

/// A bar of the LPMO study over `base`, marked when uncertain.
fn label_ratio(
    records: &Records,
    w: &str,
    sync: &str,
    label: &str,
    base: Option<&pmo_bench::Record>,
) -> Option<(f64, bool)> {
    let bars = lpmo_bars(records, w, sync);
    let (_, s, p, l) = bars.iter().find(|b| b.0 == label)?;
    let v = record(
        records,
        "lpmo",
        "mb_per_s",
        &[
            ("workload", w),
            ("sync", sync),
            ("scheme", s),
            ("predict", p),
            ("latency", l),
        ],
    );
    mb_ratio(v, base)
}

/// Add bar `v` of series `name` in category `cat` (a new series when `name` is new).
fn push_bar(series: &mut Vec<plot::Series>, name: &str, cat: usize, v: f64, uncertain: bool) {
    let p = plot::Point {
        x: cat as f64,
        y: v,
        uncertain,
    };
    match series.iter_mut().find(|s| s.name == name) {
        Some(s) => s.points.push(p),
        None => series.push(plot::Series {
            name: name.to_string(),
            points: vec![p],
        }),
    }
}

/// The statistic behind a study's bandwidths, for an axis label: "one run" (`--quick`) or
/// "medians of N runs" (the most samples of a cell).
fn runs(records: &Records, study: &str) -> String {
    let n = records
        .records
        .iter()
        .filter(|r| r.bench == "filebench" && r.metric == "mb_per_s" && param(r, "study") == study)
        .map(|r| r.samples)
        .max()
        .unwrap_or(0);
    if n <= 1 {
        "one run".into()
    } else {
        format!("medians of {n} runs")
    }
}

/// Draw the figures, each as SVG and PNG; their paths.
pub fn draw(records: &Records, dir: &Path) -> Result<Vec<PathBuf>, BenchError> {
    let mut out = vec![];
    let emit = |p: PathBuf, out: &mut Vec<PathBuf>| {
        if let Some(png) = plot::to_png(&p) {
            out.push(png);
        }
        out.push(p);
    };
    for sync in distinct(records, "fig10", "sync") {
        let mut bars = vec![];
        let mut cats = vec![];
        let mut workloads = vec![];
        for w in distinct(records, "fig10", "workload") {
            let get = |s: &str| fig10_mb(records, &w, &sync, s);
            let Some(base) = get("wedi").filter(|b| b.value > 0.0) else {
                continue;
            };
            workloads.push(w.clone());
            // The POSIX peer (10-25x) is in the table; drawn, it would flatten the designs.
            for s in distinct(records, "fig10", "scheme")
                .into_iter()
                .filter(|s| !s.starts_with("posix"))
            {
                if let Some((v, uncertain)) = mb_ratio(get(&s), Some(base)) {
                    push_bar(&mut bars, &s, workloads.len() - 1, v, uncertain);
                }
                let parts: Vec<(&str, f64)> = pmo_store::SessionStats::default()
                    .categories()
                    .iter()
                    .filter_map(|(c, _)| {
                        value(
                            records,
                            "fig10",
                            "cat_us_per_op",
                            &[
                                ("workload", &w),
                                ("sync", &sync),
                                ("scheme", &s),
                                ("category", c),
                            ],
                        )
                        .map(|v| (*c, v))
                    })
                    .collect();
                if !parts.is_empty() {
                    cats.push((format!("{}:{s}", &w[..w.len().min(5)]), parts));
                }
            }
        }
        if !bars.is_empty() {
            let p = dir.join(format!("filebench-fig10-{sync}.svg"));
            let y = format!("bandwidth / wedi's (MB/s, {})", runs(records, "fig10"));
            plot::grouped_bars(
                &p,
                &plot::BarChart {
                    title: &format!(
                        "Filebench (LOaPP Fig. 10): bandwidth per design / wedi, sync {sync}"
                    ),
                    x_desc: "Filebench personality",
                    y_desc: &y,
                    categories: workloads,
                    reference_y: Some(1.0),
                    ..Default::default()
                },
                &bars,
            )?;
            emit(p, &mut out);
        }
        if !cats.is_empty() {
            let p = dir.join(format!("filebench-categories-{sync}.svg"));
            plot::stacked_bars(
                &p,
                &format!("Filebench: store time per op by category, sync {sync}"),
                &format!("store time (µs per op, {})", runs(records, "fig10")),
                &to_bars(cats),
                None,
            )?;
            emit(p, &mut out);
        }
    }
    for sync in distinct(records, "threads", "sync") {
        let mut series = vec![];
        for w in distinct(records, "threads", "workload") {
            for s in distinct(records, "threads", "scheme") {
                // A point is hollow when its samples cannot tell it from the first thread
                // count's (as the suite's threads figure).
                let ts = distinct(records, "threads", "threads");
                let first = ts
                    .first()
                    .and_then(|t| thread_mbs(records, &w, &sync, &s, t));
                let points: Vec<plot::Point> = ts
                    .iter()
                    .filter_map(|t| {
                        let r = thread_mbs(records, &w, &sync, &s, t)?;
                        Some(plot::Point {
                            x: t.parse().unwrap_or(0.0),
                            y: r.value,
                            uncertain: mb_ratio(Some(r), first).is_some_and(|x| x.1),
                        })
                    })
                    .collect();
                series.push(plot::Series {
                    name: format!("{w}:{s}"),
                    points,
                });
            }
        }
        let p = dir.join(format!("filebench-fig11b-{sync}.svg"));
        let title = format!("Filebench (LOaPP Fig. 11b): thread scaling, sync {sync}");
        plot::lines(
            &p,
            &plot::LineChart {
                title: &title,
                x_desc: "threads",
                y_desc: &format!("bandwidth (MB/s, {})", runs(records, "threads")),
                integer_x: true,
                ..Default::default()
            },
            &mut series,
        )?;
        emit(p, &mut out);
    }
    for sync in distinct(records, "lpmo", "sync") {
        let mut bars = vec![];
        let workloads = distinct(records, "lpmo", "workload");
        for (wi, w) in workloads.iter().enumerate() {
            let base = record(
                records,
                "lpmo",
                "mb_per_s",
                &[("workload", w), ("sync", &sync), ("scheme", "sp:medium")],
            );
            for (label, ..) in lpmo_bars(records, w, &sync) {
                if let Some((v, uncertain)) = label_ratio(records, w, &sync, &label, base) {
                    push_bar(&mut bars, &label, wi, v, uncertain);
                }
            }
        }
        if !bars.is_empty() {
            let p = dir.join(format!("filebench-lpmo-{sync}.svg"));
            let y = format!("bandwidth / sp:medium's (MB/s, {})", runs(records, "lpmo"));
            plot::grouped_bars(
                &p,
                &plot::BarChart {
                    title: &format!(
                        "Filebench (LPMO): DRAM cache, prediction, integrity, cxl-far, sync {sync}"
                    ),
                    x_desc: "Filebench personality",
                    y_desc: &y,
                    categories: workloads,
                    reference_y: Some(1.0),
                    ..Default::default()
                },
                &bars,
            )?;
            emit(p, &mut out);
        }
    }
    Ok(out)
}

/// Run the benchmark, print its tables, draw its figures into `out`, write
/// `out/filebench.csv` (and `json` when given). Records are written even when some cell failed.
pub fn run_and_report(opts: &FbOptions, out: &Path, json: Option<&Path>) -> Result<(), BenchError> {
    let io = |op: String| move |e| BenchError::Io { op, source: e };
    // A bad workload file or option fails here, before anything runs.
    let workloads = load_all(opts)?;
    for w in &workloads {
        for e in &w.echoes {
            eprintln!("{}: {e}", w.name);
        }
    }
    std::fs::create_dir_all(out).map_err(io(format!("create {}", out.display())))?;
    let mut records = Records::default();
    let r = run_bench(opts, &mut records);
    print_tables(&records);
    for p in draw(&records, out)? {
        println!("figure: {}", p.display());
    }
    let csv = out.join("filebench.csv");
    records.write_csv(&csv)?;
    println!("records: {}", csv.display());
    if let Some(j) = json {
        records.write_json(j)?;
        println!("records: {}", j.display());
    }
    r
}

impl Source {
    /// A built-in personality's name, or a path to a `.f` file.
    pub fn parse(s: &str) -> Source {
        if personalities::NAMES.contains(&s) {
            Source::BuiltIn(s.into())
        } else {
            Source::File(s.into())
        }
    }
}

/// Bars as the plot module draws them (none marked uncertain).
fn to_bars(v: Vec<(String, Vec<(&str, f64)>)>) -> Vec<plot::Bar<'_>> {
    v.into_iter()
        .map(|(label, parts)| plot::Bar {
            label,
            parts,
            uncertain: false,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(r: &mut Records, study: &str, scheme: &str, threads: &str, mbs: &[f64]) {
        let p = [
            ("study", study.to_string()),
            ("workload", "varmail".into()),
            ("sync", "paper".into()),
            ("scheme", scheme.into()),
            ("threads", threads.into()),
            ("predict", "off".into()),
            ("latency", "dram".into()),
        ];
        r.push_samples("filebench", &p, "mb_per_s", mbs, "MB/s");
    }

    #[test]
    fn ratios_whose_spread_includes_1_are_marked() {
        let mut r = Records::default();
        cell(&mut r, "fig10", "wedi", "2", &[10.0, 11.0, 12.0]);
        cell(&mut r, "fig10", "sp-id", "2", &[30.0, 31.0, 32.0]);
        // 9..14 over 10..12: the ratio's range 0.75..1.4 includes 1.
        cell(&mut r, "fig10", "none", "2", &[9.0, 12.0, 14.0]);
        cell(&mut r, "threads", "wedi", "1", &[10.0, 11.0, 12.0]);
        cell(&mut r, "threads", "wedi", "2", &[11.5, 12.0, 13.0]);
        cell(&mut r, "threads", "wedi", "4", &[20.0, 21.0, 22.0]);
        let t = tables(&r);
        let row = t.lines().find(|l| l.starts_with("varmail ")).unwrap();
        assert!(row.contains("2.82x ") || row.ends_with("2.82x"), "{row}");
        assert!(row.contains("1.09x?"), "{row}");
        assert!(row.contains("1.00x ") || row.ends_with("1.00x"), "{row}");
        let threads = t
            .lines()
            .find(|l| l.starts_with("varmail     wedi"))
            .unwrap();
        assert!(threads.contains("2:    12.0?"), "{threads}");
        assert!(threads.contains("4:    21.0 "), "{threads}");
        assert!(t.contains(MARK_NOTE));

        let dir = std::env::temp_dir().join(format!("pmo-fb-marks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let figs = draw(&r, &dir).unwrap();
        // The uncertain bar (fig10) and point (fig11b) are marked, with the legend's note.
        for name in ["filebench-fig10-paper.svg", "filebench-fig11b-paper.svg"] {
            let svg = std::fs::read_to_string(dir.join(name)).unwrap();
            assert!(svg.contains("hollow / ?"), "{name}");
        }
        // Every figure is there as SVG and PNG; Fig. 10 groups its bars by personality.
        for svg in figs
            .iter()
            .filter(|f| f.extension().is_some_and(|e| e == "svg"))
        {
            let png = svg.with_extension("png");
            assert!(figs.contains(&png), "{} listed", png.display());
            let bytes = std::fs::read(&png).unwrap();
            assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.len() > 8_000);
        }
        let fig10 = std::fs::read_to_string(dir.join("filebench-fig10-paper.svg")).unwrap();
        // An SVG text element's content stands on a line of its own.
        for text in ["varmail", "sp-id", "Filebench personality"] {
            assert!(fig10.lines().any(|l| l.trim() == text), "{text}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

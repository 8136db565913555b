//! `pmo bench suite`: the papers' benchmark suite (crate `pmo-workloads`) over a matrix of
//! workload x scheme x prediction depth x latency profile x threads x attach-session size,
//! arranged as the studies the papers draw:
//!
//! | study | varies | fixed | figure |
//! |---|---|---|---|
//! | `breakdown` | workload x scheme | K = 2, no prediction, `dram`, 1 thread | LOaPP Fig. 6: stacked time per design, normalised to `wedi` |
//! | `session` | K = 1..16 x {wedi, sp-id, secure, bp-id:medium, sp-id:medium} | no prediction, `dram`, 1 thread | LOaPP Figs. 7 and 8: attach-session sensitivity, BP/I_d vs SP/I_d |
//! | `predict` | depth 0..16, adaptive | `secure`, `dram`, 1 thread | prediction-depth sensitivity |
//! | `threads` | threads 1, 2, 4 x {wedi, secure} | K = 2, `dram` | thread scaling |
//! | `cxl` | `wedi` on `dram` vs {secure, sp-id} with prediction on `cxl-far` | 1 thread | LPMO: DRAM cache + prediction under CXL latency |
//! | `placement` | {sp-id, bp-id, secure} x plaintext copy in DRAM or on the medium | K = 2, sigsegv faults for both, `dram`, 1 thread | LPMO: DRAM as the plaintext cache vs the LOaPP kernel's plaintext on the medium |
//!
//! The placement study runs both placements with the sigsegv fault mechanism (the only one a
//! view over the medium can use), so that only the placement differs. On this machine the
//! medium is DRAM (tmpfs): the study measures the software costs of the medium placement
//! (faults that fill a file mapping, zeroing at detach, one user at a time), not the latency of
//! the application's own loads and stores on PM or CXL memory, which no emulation here sees.
//!
//! Every cell runs the kernel on matrices living in PMOs and verifies the result against a
//! plain DRAM run of the same kernel; a cell that does not verify is reported and fails the
//! command. Latency profiles and prediction are chosen through `PMO_LATENCY` and
//! `PMO_PREDICT` for the cell's pool and attaches (the runner is single-threaded; the
//! kernels' threads start after the variables are set).

use std::path::{Path, PathBuf};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use pmo_store::Scheme;
use pmo_workloads::{RunConfig, RunResult, Size, Workload};

use crate::{plot, BenchError, Record, Records, TempPool};

const ALL_WORKLOADS: [Workload; 5] = [
    Workload::Conv2d,
    Workload::Gauss,
    Workload::Lu,
    Workload::Tmm,
    Workload::Cholesky,
];

/// The studies, in run order (`tracking` only when asked for).
pub const STUDIES: [&str; 7] = [
    "breakdown",
    "session",
    "predict",
    "threads",
    "cxl",
    "placement",
    "tracking",
];

/// The tracking study's variants: (`PMO_DIRTY`, `PMO_FAULT_AROUND`), the issue-16 levers alone
/// and together, run next to each other for every workload and scheme.
pub const TRACKING_VARIANTS: [(&str, &str); 5] = [
    ("fault", "1"),
    ("fault", "16"),
    ("twin", "1"),
    ("twin", "16"),
    ("scan", "16"),
];

/// Options of the suite.
#[derive(Clone, Debug)]
pub struct SuiteOptions {
    /// Directory for the pools.
    pub dir: PathBuf,
    /// Matrix sizes.
    pub size: Size,
    /// Repeats per cell (medians reported).
    pub repeats: usize,
    /// Workloads to run.
    pub workloads: Vec<Workload>,
    /// Schemes of the breakdown study.
    pub schemes: Vec<Scheme>,
    /// Studies to run.
    pub studies: Vec<String>,
    /// Prediction depths of the predict study (`PMO_PREDICT` values).
    pub depths: Vec<String>,
    /// Thread counts of the threads study.
    pub threads: Vec<usize>,
    /// Attach-session sizes of the session study.
    pub sessions: Vec<usize>,
    /// Psync tempo in time of the unprotected run (`None`: the size-scaled default,
    /// `pmo_workloads::default_psync_interval`; the papers psync once per second).
    pub psync_interval: Option<std::time::Duration>,
}

impl SuiteOptions {
    /// The default matrix; `quick` is the short one (a few minutes here).
    pub fn new(quick: bool) -> SuiteOptions {
        let dir = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let names = if quick {
            vec!["none", "wedi", "sp-ip", "sp-id", "secure"]
        } else {
            vec![
                "none", "wed", "wedi", "bp", "bp-ip", "bp-id", "sp", "sp-ip", "sp-id", "secure",
            ]
        };
        SuiteOptions {
            dir,
            size: Size::Default,
            // Quick runs take fewer cells, not fewer samples: a median needs at least three.
            repeats: if quick { 3 } else { 5 },
            workloads: ALL_WORKLOADS.to_vec(),
            schemes: names
                .iter()
                .filter_map(|n| Scheme::from_name(n).ok())
                .collect(),
            studies: STUDIES
                .iter()
                .filter(|s| **s != "tracking")
                .map(|s| s.to_string())
                .collect(),
            depths: if quick {
                vec!["off".into(), "4".into(), "adaptive".into()]
            } else {
                ["off", "1", "2", "4", "8", "16", "adaptive"]
                    .iter()
                    .map(|s| s.to_string())
                    .collect()
            },
            threads: vec![1, 2, 4],
            sessions: if quick {
                vec![1, 4, 16]
            } else {
                vec![1, 2, 4, 8, 16]
            },
            psync_interval: None,
        }
    }
}

/// One cell of the matrix.
#[derive(Clone, Debug)]
struct Cell {
    study: &'static str,
    workload: Workload,
    scheme: Scheme,
    threads: usize,
    session: usize,
    depth: String,
    profile: String,
    /// `PMO_FAULT` for the cell ("": the default mechanism).
    fault: &'static str,
    /// `PMO_DIRTY` and `PMO_FAULT_AROUND` for the cell ("": the store's defaults).
    tracking: (&'static str, &'static str),
}

/// Sets an environment variable for the life of the guard, then restores it.
/// Sets an environment variable for a scope (restored on drop).
pub struct EnvGuard {
    key: &'static str,
    old: Option<String>,
}

impl EnvGuard {
    pub fn set(key: &'static str, value: &str) -> EnvGuard {
        let old = std::env::var(key).ok();
        std::env::set_var(key, value);
        EnvGuard { key, old }
    }
}

impl Drop for EnvGuard {
    fn drop(&mut self) {
        match &self.old {
            Some(v) => std::env::set_var(self.key, v),
            None => std::env::remove_var(self.key),
        }
    }
}

fn cells(opts: &SuiteOptions) -> Vec<Cell> {
    let scheme = |n: &str| Scheme::from_name(n).expect("built-in scheme name");
    let base = |study, workload, scheme| Cell {
        study,
        workload,
        scheme,
        threads: 1,
        session: 2,
        depth: "off".into(),
        profile: "dram".into(),
        fault: "",
        tracking: ("", ""),
    };
    let mut v = Vec::new();
    let wants = |s: &str| opts.studies.iter().any(|x| x == s);
    if wants("breakdown") {
        for &w in &opts.workloads {
            for &s in &opts.schemes {
                v.push(base("breakdown", w, s));
            }
        }
    }
    if wants("session") {
        for &w in &opts.workloads {
            // The paper's Fig. 7 designs, and its Fig. 8 pair (BP/I_d vs SP/I_d, which differ
            // only with the plaintext copy on the medium).
            for s in ["wedi", "sp-id", "secure", "bp-id:medium", "sp-id:medium"] {
                for &k in &opts.sessions {
                    v.push(Cell {
                        session: k,
                        ..base("session", w, scheme(s))
                    });
                }
            }
        }
    }
    if wants("predict") {
        for &w in &opts.workloads {
            for d in &opts.depths {
                v.push(Cell {
                    depth: d.clone(),
                    ..base("predict", w, Scheme::SECURE)
                });
            }
        }
    }
    if wants("threads") {
        for &w in &opts.workloads {
            for s in ["wedi", "secure"] {
                for &t in &opts.threads {
                    v.push(Cell {
                        threads: t,
                        ..base("threads", w, scheme(s))
                    });
                }
            }
        }
    }
    if wants("cxl") {
        for &w in &opts.workloads {
            v.push(base("cxl", w, scheme("wedi")));
            for s in ["wedi", "sp-id", "secure"] {
                v.push(Cell {
                    profile: "cxl-far".into(),
                    depth: if s == "wedi" { "off" } else { "adaptive" }.into(),
                    ..base("cxl", w, scheme(s))
                });
            }
        }
    }
    if wants("placement") {
        for &w in &opts.workloads {
            for s in ["sp-id", "bp-id", "secure"] {
                for placed in [s.to_string(), format!("{s}:medium")] {
                    v.push(Cell {
                        fault: "sigsegv",
                        ..base("placement", w, scheme(&placed))
                    });
                }
            }
        }
    }
    if wants("tracking") {
        // Per-page schemes only (a whole-PMO scheme fills everything at attach).
        let mut schemes: Vec<Scheme> = opts
            .schemes
            .iter()
            .copied()
            .filter(|s| s.name() == "none" || s.name() == "secure")
            .collect();
        if schemes.is_empty() {
            schemes = vec![Scheme::NONE, Scheme::SECURE];
        }
        for &w in &opts.workloads {
            for &s in &schemes {
                for t in TRACKING_VARIANTS {
                    v.push(Cell {
                        tracking: t,
                        ..base("tracking", w, s)
                    });
                }
            }
        }
    }
    v
}

/// Run the suite, appending records. Fails if any cell does not verify (after running all).
pub fn run(opts: &SuiteOptions, records: &mut Records) -> Result<(), BenchError> {
    let cells = cells(opts);
    let pb = ProgressBar::new(cells.len() as u64);
    pb.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} {elapsed} {msg}")
            .map_err(|e| BenchError::Other(e.to_string()))?,
    );
    let mut failed = Vec::new();
    let t0 = Instant::now();
    for c in &cells {
        pb.set_message(format!(
            "{} {} {} t{} K{} p{} {}",
            c.study,
            c.workload.name(),
            c.scheme,
            c.threads,
            c.session,
            c.depth,
            c.profile
        ));
        match run_cell(opts, c) {
            Ok(results) => record_cell(c, &results, records, &mut failed),
            Err(e) => failed.push(format!(
                "{} {} {}: {e}",
                c.study,
                c.workload.name(),
                c.scheme
            )),
        }
        pb.inc(1);
    }
    pb.finish_and_clear();
    records.push(
        "suite",
        &[("cells", cells.len().to_string())],
        "suite_wall_s",
        t0.elapsed().as_secs_f64(),
        "s",
        1,
    );
    if failed.is_empty() {
        Ok(())
    } else {
        Err(BenchError::Other(format!(
            "{} cell(s) failed: {}",
            failed.len(),
            failed.join("; ")
        )))
    }
}

fn run_cell(opts: &SuiteOptions, c: &Cell) -> Result<Vec<RunResult>, BenchError> {
    let _latency = EnvGuard::set("PMO_LATENCY", &c.profile);
    let _predict = EnvGuard::set("PMO_PREDICT", &c.depth);
    let _fault = (!c.fault.is_empty()).then(|| EnvGuard::set("PMO_FAULT", c.fault));
    let _dirty = (!c.tracking.0.is_empty()).then(|| EnvGuard::set("PMO_DIRTY", c.tracking.0));
    let _around =
        (!c.tracking.1.is_empty()).then(|| EnvGuard::set("PMO_FAULT_AROUND", c.tracking.1));
    let mut cfg = RunConfig::new(c.workload, opts.size);
    cfg.scheme = c.scheme;
    cfg.threads = c.threads;
    cfg.session_psyncs = c.session;
    cfg.psync_interval = opts.psync_interval;
    // Room for the matrices twice (shadow paging) and metadata (TempPool adds a third copy
    // for a plaintext copy on the medium).
    let data = (c.workload.len_bytes(cfg.dims) * 2 + (64 << 20)) as u64;
    let tp = TempPool::new(&opts.dir, "suite", data, c.scheme)?;
    let mut out = Vec::new();
    for _ in 0..opts.repeats.max(3) {
        out.push(pmo_workloads::run(&tp.pool, &cfg).map_err(|e| BenchError::Other(e.to_string()))?);
    }
    Ok(out)
}

fn record_cell(c: &Cell, runs: &[RunResult], records: &mut Records, failed: &mut Vec<String>) {
    let params = [
        ("study", c.study.to_string()),
        ("workload", c.workload.name().to_string()),
        ("scheme", c.scheme.name()),
        ("threads", c.threads.to_string()),
        ("session_psyncs", c.session.to_string()),
        ("predict", c.depth.clone()),
        ("latency", c.profile.clone()),
        (
            "fault",
            if c.fault.is_empty() {
                "default".to_string()
            } else {
                c.fault.to_string()
            },
        ),
        (
            "tracking",
            match c.tracking {
                ("", _) => "default".to_string(),
                (t, a) => format!("{t}/around{a}"),
            },
        ),
    ];
    let secs = |f: &dyn Fn(&RunResult) -> u64| -> Vec<f64> {
        runs.iter().map(|r| f(r) as f64 / 1e9).collect()
    };
    let timed: [(&str, Vec<f64>); 7] = [
        ("wall_s", secs(&|r| r.wall_ns)),
        ("attach_s", secs(&|r| r.attach_ns)),
        ("psync_s", secs(&|r| r.psync_ns)),
        ("detach_s", secs(&|r| r.detach_ns)),
        ("pf_s", secs(&|r| r.fill_ns)),
        (
            "compute_s",
            secs(&|r| r.compute_ns.saturating_sub(r.fill_ns)),
        ),
        ("dram_compute_s", secs(&|r| r.dram_compute_ns)),
    ];
    for (metric, samples) in &timed {
        records.push_samples("suite", &params, metric, samples, "s");
    }
    // The store's Fig. 6 accounting, summed over the run's sessions.
    for (i, (name, _)) in pmo_store::SessionStats::default()
        .categories()
        .iter()
        .enumerate()
    {
        let v = secs(&|r| r.session.categories()[i].1);
        records.push_samples("suite", &params, &fig6_metric(name), &v, "s");
    }
    let counts =
        |f: fn(&RunResult) -> u64| -> Vec<f64> { runs.iter().map(|r| f(r) as f64).collect() };
    records.push_samples("suite", &params, "faults", &counts(|r| r.faults), "count");
    records.push_samples("suite", &params, "psyncs", &counts(|r| r.psyncs), "count");
    let n = runs.len();
    let ok = runs.iter().all(|r| r.verified);
    records.push("suite", &params, "verified", ok as u8 as f64, "bool", n);
    if !ok {
        let why = runs
            .iter()
            .find_map(|r| r.verify_error.clone())
            .unwrap_or_default();
        failed.push(format!(
            "{} {} {}: result differs from the DRAM run: {why}",
            c.study,
            c.workload.name(),
            c.scheme
        ));
    }
}

/// Record name of a Fig. 6 category: `Psync Per+IV` -> `fig6_psync_per_iv_s`.
fn fig6_metric(category: &str) -> String {
    let mut m = String::from("fig6_");
    for c in category.chars() {
        match c {
            'a'..='z' | '0'..='9' => m.push(c),
            'A'..='Z' => m.push(c.to_ascii_lowercase()),
            _ if !m.ends_with('_') => m.push('_'),
            _ => {}
        }
    }
    m.trim_end_matches('_').to_string() + "_s"
}

/// A geomean of ratios and whether it is uncertain: the geomean of the smallest ratios the
/// samples allow (`num.min / den.max`) to that of the largest includes 1.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Ratio {
    value: f64,
    uncertain: bool,
}

impl Ratio {
    /// Over `(num, den)` pairs; `None` for no pair with a positive denominator.
    fn geomean(pairs: &[(&Record, &Record)]) -> Option<Ratio> {
        let pairs: Vec<_> = pairs.iter().filter(|p| p.1.value > 0.0).collect();
        if pairs.is_empty() {
            return None;
        }
        let n = pairs.len() as f64;
        let geo = |f: &dyn Fn(&Record, &Record) -> Option<f64>| -> Option<f64> {
            let mut acc = 0.0;
            for (a, b) in &pairs {
                acc += f(a, b)?.ln();
            }
            Some((acc / n).exp())
        };
        let value = geo(&|a, b| Some(a.value / b.value))?;
        let lo = geo(&|a, b| Some(a.min? / b.max?).filter(|v| *v > 0.0));
        let hi = geo(&|a, b| Some(a.max? / b.min?).filter(|v| v.is_finite() && *v > 0.0));
        // The reference against itself is exactly 1: nothing to mark.
        let itself = pairs.iter().all(|(a, b)| std::ptr::eq(*a, *b));
        let uncertain =
            !itself && matches!((lo, hi), (Some(lo), Some(hi)) if lo <= 1.0 && hi >= 1.0);
        Some(Ratio { value, uncertain })
    }

    /// `num / den` of one pair.
    fn of(num: &Record, den: &Record) -> Option<Ratio> {
        Ratio::geomean(&[(num, den)])
    }

    /// "1.234" or "1.234?" (width 9 with the mark).
    fn cell(self) -> String {
        format!(
            "{:>8.3}{}",
            self.value,
            if self.uncertain { "?" } else { " " }
        )
    }
}

const MARK_NOTE: &str =
    "?: the samples' spread is wider than the effect (the ratio's range includes 1)";

fn param(r: &Record, k: &str) -> String {
    r.params.get(k).cloned().unwrap_or_default()
}

fn wall<'r>(records: &'r Records, p: &[(&str, &str)]) -> Option<&'r Record> {
    records.get("wall_s", p)
}

/// Session study, attach-session size `k`: the geomean over workloads of `num`'s wall time
/// divided by `den`'s (Fig. 7: `den` = wedi; Fig. 8: BP/I_d over SP/I_d on the medium).
fn session_ratio(records: &Records, num: &str, den: &str, k: &str) -> Option<Ratio> {
    let pairs: Vec<(&Record, &Record)> = records
        .records
        .iter()
        .filter(|r| {
            r.bench == "suite"
                && r.metric == "wall_s"
                && param(r, "study") == "session"
                && param(r, "scheme") == num
                && param(r, "session_psyncs") == k
        })
        .filter_map(|r| {
            let w = param(r, "workload");
            let d = wall(
                records,
                &[
                    ("study", "session"),
                    ("workload", &w),
                    ("scheme", den),
                    ("session_psyncs", k),
                ],
            )?;
            Some((r, d))
        })
        .collect();
    Ratio::geomean(&pairs)
}

/// A workload x scheme table of `value` with a geomean row (cells without a value: `-`).
fn matrix(
    out: &mut String,
    title: &str,
    rows: &[String],
    columns: &[String],
    value: impl Fn(&str, &str) -> Option<f64>,
) {
    use std::fmt::Write as _;
    let rw = rows.iter().map(String::len).max().unwrap_or(0).max(10);
    let cw = columns.iter().map(String::len).max().unwrap_or(0).max(8);
    _ = writeln!(out, "{title}");
    _ = write!(out, "{:<rw$}", "workload");
    for c in columns {
        _ = write!(out, " {c:>cw$}");
    }
    _ = writeln!(out);
    let mut geo: Vec<(f64, usize)> = vec![(0.0, 0); columns.len()];
    for r in rows {
        _ = write!(out, "{r:<rw$}");
        for (i, c) in columns.iter().enumerate() {
            match value(r, c).filter(|v| v.is_finite() && *v > 0.0) {
                Some(v) => {
                    _ = write!(out, " {v:>cw$.3}");
                    geo[i].0 += v.ln();
                    geo[i].1 += 1;
                }
                None => _ = write!(out, " {:>cw$}", "-"),
            }
        }
        _ = writeln!(out);
    }
    _ = write!(out, "{:<rw$}", "geomean");
    for g in &geo {
        if g.1 > 0 {
            _ = write!(out, " {:>cw$.3}", (g.0 / g.1 as f64).exp());
        } else {
            _ = write!(out, " {:>cw$}", "-");
        }
    }
    _ = writeln!(out);
}

/// The distinct values of parameter `key` over `rows`, in first-seen order.
fn distinct(rows: &[&Record], key: &str) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for r in rows {
        let x = param(r, key);
        if !v.contains(&x) {
            v.push(x);
        }
    }
    v
}

/// The wall-time rows of the suite.
fn wall_rows(records: &Records) -> Vec<&Record> {
    records
        .records
        .iter()
        .filter(|r| r.bench == "suite" && r.metric == "wall_s")
        .collect()
}

/// The tables of a run, as text: every figure a median of the cell's samples, every ratio of
/// many workloads a geomean, and `?` after a ratio the samples cannot tell from 1.
pub fn tables(records: &Records) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let rows = wall_rows(records);
    let workloads = distinct(&rows, "workload");
    let in_study = |st: &str| -> Vec<&Record> {
        rows.iter()
            .copied()
            .filter(|r| param(r, "study") == st)
            .collect()
    };
    // Breakdown: time per scheme normalised to wedi, per workload.
    let schemes = distinct(&in_study("breakdown"), "scheme");
    if !schemes.is_empty() {
        _ = writeln!(
            out,
            "Execution time normalised to wedi (breakdown study; medians, geomean over workloads; lower is better):"
        );
        _ = write!(out, "{:<10}", "workload");
        for s in &schemes {
            _ = write!(out, " {s:>9}");
        }
        _ = writeln!(out);
        let mut per_scheme: Vec<Vec<(&Record, &Record)>> = vec![Vec::new(); schemes.len()];
        for w in &workloads {
            let base = wall(
                records,
                &[("study", "breakdown"), ("workload", w), ("scheme", "wedi")],
            );
            let mut line = format!("{w:<10}");
            for (i, s) in schemes.iter().enumerate() {
                let v = wall(
                    records,
                    &[("study", "breakdown"), ("workload", w), ("scheme", s)],
                );
                match (v, base) {
                    (Some(v), Some(b)) if b.value > 0.0 => {
                        per_scheme[i].push((v, b));
                        line +=
                            &format!(" {}", Ratio::of(v, b).map(Ratio::cell).unwrap_or_default());
                    }
                    _ => line += &format!(" {:>9}", "-"),
                }
            }
            if per_scheme
                .iter()
                .any(|p| p.last().is_some_and(|l| param(l.0, "workload") == *w))
            {
                _ = writeln!(out, "{line}");
            }
        }
        _ = write!(out, "{:<10}", "geomean");
        for p in &per_scheme {
            match Ratio::geomean(p) {
                Some(r) => _ = write!(out, " {}", r.cell()),
                None => _ = write!(out, " {:>9}", "-"),
            }
        }
        _ = writeln!(out);
        _ = writeln!(out, "  {MARK_NOTE}");
        // The fault tax (issue 16): the same kernel on a `Vec` in DRAM is the floor (medians).
        let cell = |metric: &str, w: &str, s: &str| {
            records
                .get(
                    metric,
                    &[("study", "breakdown"), ("workload", w), ("scheme", s)],
                )
                .map(|r| r.value)
        };
        matrix(
            &mut out,
            "Wall time over the DRAM reference (wall_s / dram_compute_s; 1.0 = as fast as DRAM):",
            &workloads,
            &schemes,
            |w, s| Some(cell("wall_s", w, s)? / cell("dram_compute_s", w, s).filter(|&d| d > 0.0)?),
        );
        matrix(
            &mut out,
            "Compute inside the PMO over the DRAM reference (compute_s / dram_compute_s):",
            &workloads,
            &schemes,
            |w, s| {
                Some(cell("compute_s", w, s)? / cell("dram_compute_s", w, s).filter(|&d| d > 0.0)?)
            },
        );
        matrix(
            &mut out,
            "Faults served in user space per cell (median run, thousands):",
            &workloads,
            &schemes,
            |w, s| Some(cell("faults", w, s)? / 1e3),
        );
    }
    // Tracking study: wall / DRAM per variant (columns) for each workload and scheme.
    if rows.iter().any(|r| param(r, "study") == "tracking") {
        let variants: Vec<String> = TRACKING_VARIANTS
            .iter()
            .map(|(t, a)| format!("{t}/around{a}"))
            .collect();
        let mut tracked: Vec<String> = Vec::new();
        for r in rows.iter().filter(|r| param(r, "study") == "tracking") {
            let key = format!("{}:{}", param(r, "workload"), param(r, "scheme"));
            if !tracked.contains(&key) {
                tracked.push(key);
            }
        }
        let cell = |metric: &'static str, key: &str, v: &str| {
            let (w, s) = key.split_once(':').unwrap_or((key, ""));
            records
                .get(
                    metric,
                    &[
                        ("study", "tracking"),
                        ("workload", w),
                        ("scheme", s),
                        ("tracking", v),
                    ],
                )
                .map(|r| r.value)
        };
        for (metric, title) in [
            ("wall_s", "Tracking study: wall time over the DRAM reference (workload:scheme x PMO_DIRTY/PMO_FAULT_AROUND):"),
            ("compute_s", "Tracking study: compute inside the PMO over the DRAM reference:"),
        ] {
            matrix(&mut out, title, &tracked, &variants, |k, v| {
                Some(cell(metric, k, v)? / cell("dram_compute_s", k, v).filter(|&d| d > 0.0)?)
            });
        }
        matrix(
            &mut out,
            "Tracking study: faults served in user space (thousands):",
            &tracked,
            &variants,
            |k, v| Some(cell("faults", k, v)? / 1e3),
        );
    }
    for (study, key, title) in [
        ("session", "session_psyncs", "attach-session size K"),
        ("predict", "predict", "prediction depth"),
        ("threads", "threads", "threads"),
    ] {
        let cells = in_study(study);
        if cells.is_empty() {
            continue;
        }
        _ = writeln!(
            out,
            "{title} (study {study}; wall s, medians; in brackets: relative to the first {key} of the row's workload and scheme):"
        );
        for r in &cells {
            let (w, s) = (param(r, "workload"), param(r, "scheme"));
            let first = cells
                .iter()
                .find(|c| param(c, "workload") == w && param(c, "scheme") == s)
                .copied();
            let rel = first
                .filter(|f| !std::ptr::eq(*f, *r))
                .and_then(|f| Ratio::of(r, f))
                .map(|x| format!("({})", x.cell().trim()))
                .unwrap_or_default();
            _ = writeln!(
                out,
                "  {w:<10} {s:<13} {key}={:<9} {:>9.4} {rel}",
                param(r, key),
                r.value
            );
        }
    }
    // Fig. 8: BP/I_d against SP/I_d (both with the plaintext copy on the medium) per K.
    let ks = distinct(
        &in_study("session")
            .into_iter()
            .filter(|r| param(r, "scheme") == "bp-id:medium")
            .collect::<Vec<_>>(),
        "session_psyncs",
    );
    if !ks.is_empty() {
        _ = writeln!(out, "BP/I_d vs SP/I_d, plaintext copy on the medium (study session; geomean over workloads of bp-id:medium / sp-id:medium; < 1: BP faster):");
        for k in &ks {
            if let Some(v) = session_ratio(records, "bp-id:medium", "sp-id:medium", k) {
                _ = writeln!(out, "  K={k:<3} {}", v.cell().trim_start());
            }
        }
    }
    let placed: Vec<&Record> = in_study("placement")
        .into_iter()
        .filter(|r| param(r, "scheme").ends_with(":medium"))
        .collect();
    if !placed.is_empty() {
        _ = writeln!(
            out,
            "Plaintext copy on the medium vs in DRAM (study placement; wall s, medians; sigsegv faults for both):"
        );
        let mut geo: Vec<(String, Vec<(&Record, &Record)>)> = Vec::new();
        for r in placed {
            let (w, s) = (param(r, "workload"), param(r, "scheme"));
            let dram_name = s.trim_end_matches(":medium").to_string();
            let Some(dram) = wall(
                records,
                &[
                    ("study", "placement"),
                    ("workload", &w),
                    ("scheme", &dram_name),
                ],
            ) else {
                continue;
            };
            let ratio = Ratio::of(r, dram).map(Ratio::cell).unwrap_or_default();
            _ = writeln!(
                out,
                "  {w:<10} {dram_name:<8} dram {:>9.4}  medium {:>9.4}  medium/dram {}",
                dram.value,
                r.value,
                ratio.trim_start()
            );
            match geo.iter_mut().find(|g| g.0 == dram_name) {
                Some(g) => g.1.push((r, dram)),
                None => geo.push((dram_name, vec![(r, dram)])),
            }
        }
        for (s, pairs) in geo {
            if let Some(r) = Ratio::geomean(&pairs) {
                _ = writeln!(
                    out,
                    "  geomean    {s:<8} medium/dram {} ({})",
                    r.cell().trim_start(),
                    dram_cache_effect(r.value)
                );
            }
        }
    }
    let cxl = in_study("cxl");
    if !cxl.is_empty() {
        _ = writeln!(
            out,
            "CXL (study cxl; wall s, medians; in brackets: relative to wedi on dram):"
        );
        for r in cxl {
            let w = param(r, "workload");
            let base = wall(
                records,
                &[
                    ("study", "cxl"),
                    ("workload", &w),
                    ("scheme", "wedi"),
                    ("latency", "dram"),
                ],
            );
            let rel = base
                .and_then(|b| Ratio::of(r, b))
                .map(|x| {
                    let mark = if x.uncertain { "?" } else { "" };
                    format!("({:.3}x{mark})", x.value)
                })
                .unwrap_or_default();
            _ = writeln!(
                out,
                "  {w:<10} {:<8} {:<8} predict={:<9} {:>9.4} {rel}",
                param(r, "scheme"),
                param(r, "latency"),
                param(r, "predict"),
                r.value
            );
        }
    }
    out
}

/// What the DRAM placement of the plaintext copy does, from the geomean of medium/dram time:
/// "DRAM cache: 12.3% less time" or "DRAM cache: 1.4% more time".
fn dram_cache_effect(medium_over_dram: f64) -> String {
    let saved = (1.0 - 1.0 / medium_over_dram) * 100.0;
    if saved >= 0.0 {
        format!("DRAM cache: {saved:.1}% less time")
    } else {
        format!("DRAM cache: {:.1}% more time", -saved)
    }
}

/// Draw the suite's figures (SVG) into `dir`; returns the files written. Every figure shows
/// medians, ratios over workloads as geomeans (as the tables do), and marks a value whose
/// samples cannot tell it from the reference.
pub fn draw(records: &Records, dir: &Path) -> Result<Vec<PathBuf>, BenchError> {
    let mut files = Vec::new();
    let rows = wall_rows(records);
    let in_study = |st: &str| -> Vec<&Record> {
        rows.iter()
            .copied()
            .filter(|r| param(r, "study") == st)
            .collect()
    };
    // The most samples behind a study's medians, for the figures' axis labels.
    let samples = |study: &str| in_study(study).iter().map(|r| r.samples).max().unwrap_or(0);
    // Fig. 6 (and placement): per scheme, a bar as high as the geomean over workloads of its
    // wall time over the base's (the tables' figure), split into the store's seven categories
    // by their mean shares of the scheme's time.
    let names = pmo_store::SessionStats::default().categories();
    let metrics: Vec<String> = names.iter().map(|c| fig6_metric(c.0)).collect();
    let fig6_bars = |study: &str, base: &dyn Fn(&str) -> Option<String>| -> Vec<plot::Bar> {
        let mut bars = Vec::new();
        for s in distinct(&in_study(study), "scheme") {
            let Some(b_scheme) = base(&s) else { continue };
            let mut pairs = Vec::new();
            let mut shares = vec![0.0; metrics.len()];
            for r in in_study(study)
                .into_iter()
                .filter(|r| param(r, "scheme") == s)
            {
                let w = param(r, "workload");
                let Some(b) = wall(
                    records,
                    &[("study", study), ("workload", &w), ("scheme", &b_scheme)],
                ) else {
                    continue;
                };
                pairs.push((r, b));
                for (i, m) in metrics.iter().enumerate() {
                    let c = records
                        .find(m, &[("study", study), ("workload", &w), ("scheme", &s)])
                        .unwrap_or(0.0);
                    if r.value > 0.0 {
                        shares[i] += c / r.value;
                    }
                }
            }
            let Some(height) = Ratio::geomean(&pairs) else {
                continue;
            };
            let total: f64 = shares.iter().sum();
            let parts = names
                .iter()
                .zip(&shares)
                .map(|(c, sh)| {
                    (
                        c.0,
                        if total > 0.0 {
                            height.value * sh / total
                        } else {
                            0.0
                        },
                    )
                })
                .collect();
            bars.push(plot::Bar {
                label: s.clone(),
                parts,
                uncertain: height.uncertain,
            });
        }
        bars
    };
    for (study, base, title, y, file) in [
        (
            "breakdown",
            &(|_: &str| Some("wedi".to_string())) as &dyn Fn(&str) -> Option<String>,
            "Execution time by design / wedi (geomean over workloads; split by mean category shares)",
            "wall time / wedi's (geomean of median ratios)",
            "suite-fig6-breakdown.svg",
        ),
        (
            "placement",
            &|s: &str| s.strip_suffix(":medium").map(str::to_string).or(Some(s.to_string())),
            "Plaintext copy in DRAM vs on the medium / DRAM (geomean over workloads)",
            "wall time / copy in DRAM (geomean of median ratios)",
            "suite-placement.svg",
        ),
    ] {
        let bars = fig6_bars(study, base);
        if !bars.is_empty() {
            let p = dir.join(file);
            plot::stacked_bars(&p, title, y, &bars, Some(1.0))?;
            files.push(p);
        }
    }
    // Figs. 7 and 8: per K, the geomean over workloads of a scheme's wall time divided by
    // another's at the same K (wedi for Fig. 7; SP/I_d on the medium for BP/I_d in Fig. 8).
    let session = in_study("session");
    let ks = distinct(&session, "session_psyncs");
    let session_schemes = distinct(&session, "scheme");
    for (file, title, y, pairs) in [
        (
            "suite-fig7-session.svg",
            "Attach-session size K: time / wedi (geomean over workloads)",
            "wall time / wedi's (geomean of median ratios)",
            session_schemes
                .iter()
                .filter(|s| *s != "wedi")
                .map(|s| (s.clone(), s.clone(), "wedi".to_string()))
                .collect::<Vec<_>>(),
        ),
        (
            "suite-fig8-bp-vs-sp.svg",
            "BP/I_d vs SP/I_d, plaintext on the medium (geomean over workloads; < 1: BP faster)",
            "wall time, bp-id:medium / sp-id:medium (geomean of medians)",
            vec![(
                "bp-id:medium / sp-id:medium".to_string(),
                "bp-id:medium".to_string(),
                "sp-id:medium".to_string(),
            )],
        ),
    ] {
        let mut series: Vec<plot::Series> = pairs
            .iter()
            .map(|(name, num, den)| plot::Series {
                name: name.clone(),
                points: ks
                    .iter()
                    .filter_map(|k| {
                        let x: f64 = k.parse().ok()?;
                        session_ratio(records, num, den, k).map(|v| plot::Point {
                            x,
                            y: v.value,
                            uncertain: v.uncertain,
                        })
                    })
                    .collect(),
            })
            .filter(|s| !s.points.is_empty())
            .collect();
        if !series.is_empty() {
            let p = dir.join(file);
            plot::lines(
                &p,
                &plot::LineChart {
                    title,
                    x_desc: "attach-session size K (psyncs per attach)",
                    y_desc: y,
                    integer_x: true,
                    reference_y: Some(1.0),
                    ..Default::default()
                },
                &mut series,
            )?;
            files.push(p);
        }
    }
    // Threads and prediction depth: per workload (and scheme) the median wall time; a point
    // is marked when its samples cannot tell it from the series' first point.
    let by_series = |study: &str, key: &str, x_of: &dyn Fn(&str) -> f64, with_scheme: bool| {
        let mut series: Vec<plot::Series> = Vec::new();
        let cells = in_study(study);
        for r in &cells {
            let name = if with_scheme {
                format!("{} {}", param(r, "workload"), param(r, "scheme"))
            } else {
                param(r, "workload")
            };
            let first = cells
                .iter()
                .find(|c| {
                    param(c, "workload") == param(r, "workload")
                        && param(c, "scheme") == param(r, "scheme")
                })
                .copied();
            let uncertain = first
                .filter(|f| !std::ptr::eq(*f, *r))
                .and_then(|f| Ratio::of(r, f))
                .is_some_and(|x| x.uncertain);
            let pt = plot::Point {
                x: x_of(&param(r, key)),
                y: r.value,
                uncertain,
            };
            match series.iter_mut().find(|s| s.name == name) {
                Some(s) => s.points.push(pt),
                None => series.push(plot::Series {
                    name,
                    points: vec![pt],
                }),
            }
        }
        series
    };
    let mut series = by_series("threads", "threads", &|v| v.parse().unwrap_or(0.0), true);
    if !series.is_empty() {
        let p = dir.join("suite-threads.svg");
        plot::lines(
            &p,
            &plot::LineChart {
                title: "Thread scaling: wall time per workload and scheme (medians)",
                x_desc: "threads",
                y_desc: &format!("wall time (s, median of {})", samples("threads")),
                integer_x: true,
                ..Default::default()
            },
            &mut series,
        )?;
        files.push(p);
    }
    // Prediction depth: its values (off, 1, 2, ..., adaptive) are categories, so grouped bars.
    let mut series = by_series(
        "predict",
        "predict",
        &|d| match d {
            "off" => 0.0,
            "adaptive" => ADAPTIVE_X,
            n => n.parse().unwrap_or(0.0),
        },
        false,
    );
    if !series.is_empty() {
        let mut depths: Vec<f64> = series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.x))
            .collect();
        depths.sort_by(f64::total_cmp);
        depths.dedup();
        for p in series.iter_mut().flat_map(|s| s.points.iter_mut()) {
            p.x = depths.iter().position(|d| *d == p.x).unwrap_or(0) as f64;
        }
        let p = dir.join("suite-predict-depth.svg");
        plot::grouped_bars(
            &p,
            &plot::BarChart {
                title: "Prediction depth, scheme secure: wall time per workload",
                x_desc: "prediction depth (pages decrypted ahead of use)",
                y_desc: &format!("wall time (s, median of {})", samples("predict")),
                categories: depths.iter().map(|d| depth_label(*d)).collect(),
                ..Default::default()
            },
            &series,
        )?;
        files.push(p);
    }
    // CXL: per cell, time relative to wedi on dram.
    let mut bars = Vec::new();
    for r in in_study("cxl") {
        let w = param(r, "workload");
        let Some(base) = wall(
            records,
            &[
                ("study", "cxl"),
                ("workload", &w),
                ("scheme", "wedi"),
                ("latency", "dram"),
            ],
        ) else {
            continue;
        };
        if std::ptr::eq(base, r) {
            continue;
        }
        let Some(v) = Ratio::of(r, base) else {
            continue;
        };
        bars.push(plot::Bar {
            label: format!("{w} {} {}", param(r, "scheme"), param(r, "latency")),
            parts: vec![("time / wedi on dram", v.value)],
            uncertain: v.uncertain,
        });
    }
    if !bars.is_empty() {
        let p = dir.join("suite-cxl.svg");
        plot::stacked_bars(
            &p,
            "cxl-far with DRAM cache and prediction: time / wedi on dram (medians)",
            "wall time / wedi on dram's (ratio of medians)",
            &bars,
            Some(1.0),
        )?;
        files.push(p);
    }
    Ok(files)
}

/// Where the prediction-depth figure draws `adaptive`.
const ADAPTIVE_X: f64 = 32.0;

fn depth_label(x: f64) -> String {
    match x {
        0.0 => "off".into(),
        x if x == ADAPTIVE_X => "adaptive".into(),
        x => format!("{x:.0}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(
        r: &mut Records,
        study: &str,
        w: &str,
        s: &str,
        extra: &[(&str, &str)],
        samples: &[f64],
    ) {
        let mut p = vec![
            ("study", study.to_string()),
            ("workload", w.to_string()),
            ("scheme", s.to_string()),
        ];
        p.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
        r.push_samples("suite", &p, "wall_s", samples, "s");
    }

    #[test]
    fn tables_mark_ratios_the_spread_cannot_tell_from_one() {
        let mut r = Records::default();
        // The quick run's case: wedi on cxl-far "faster" than on dram, within the noise.
        let dram = [("latency", "dram"), ("predict", "off")];
        let far = [("latency", "cxl-far"), ("predict", "off")];
        cell(&mut r, "cxl", "gauss", "wedi", &dram, &[1.0, 1.4, 0.8]);
        cell(&mut r, "cxl", "gauss", "wedi", &far, &[0.81, 0.9, 0.85]);
        cell(&mut r, "cxl", "gauss", "secure", &far, &[3.0, 3.1, 2.9]);
        let t = tables(&r);
        assert!(t.contains("(0.850x?)"), "{t}");
        assert!(t.contains("(3.000x)"), "a clear effect is not marked: {t}");
        cell(
            &mut r,
            "breakdown",
            "gauss",
            "wedi",
            &[],
            &[1.0, 1.01, 0.99],
        );
        cell(
            &mut r,
            "breakdown",
            "gauss",
            "secure",
            &[],
            &[1.5, 1.52, 1.49],
        );
        cell(
            &mut r,
            "breakdown",
            "gauss",
            "none",
            &[],
            &[0.99, 1.05, 0.9],
        );
        let t = tables(&r);
        let geo = t.lines().find(|l| l.starts_with("geomean")).unwrap();
        assert!(geo.contains("1.000 "), "wedi/wedi is the reference: {geo}");
        assert!(geo.contains("1.500 "), "{geo}");
        assert!(geo.contains("0.990?"), "{geo}");
    }

    #[test]
    fn dram_cache_effect_says_more_or_less() {
        assert_eq!(dram_cache_effect(1.25), "DRAM cache: 20.0% less time");
        assert_eq!(dram_cache_effect(1.0 / 1.014), "DRAM cache: 1.4% more time");
    }

    #[test]
    fn figures_use_integer_ticks_and_geomeans() {
        let mut r = Records::default();
        for (k, v) in [("1", 1.2), ("2", 1.1), ("4", 1.05)] {
            let kk = [("session_psyncs", k)];
            cell(&mut r, "session", "gauss", "wedi", &kk, &[1.0, 1.0, 1.0]);
            cell(&mut r, "session", "gauss", "secure", &kk, &[v, v, v]);
            cell(&mut r, "session", "gauss", "bp-id:medium", &kk, &[v, v, v]);
            cell(
                &mut r,
                "session",
                "gauss",
                "sp-id:medium",
                &kk,
                &[1.0, 1.0, 1.0],
            );
        }
        for t in ["1", "2", "4"] {
            cell(
                &mut r,
                "threads",
                "gauss",
                "wedi",
                &[("threads", t)],
                &[1.0, 1.1, 0.9],
            );
        }
        let dir = std::env::temp_dir().join(format!("pmo-suite-figs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let files = draw(&r, &dir).unwrap();
        assert_eq!(files.len(), 3, "{files:?}");
        let texts = |f: &str| plot::svg_texts(&std::fs::read_to_string(dir.join(f)).unwrap());
        let fig7 = texts("suite-fig7-session.svg");
        assert!(fig7.iter().any(|t| t == "4"), "K as integers: {fig7:?}");
        assert!(!fig7.iter().any(|t| t == "4.0" || t == "2.0"), "{fig7:?}");
        assert!(
            !fig7.iter().any(|t| t == "wedi"),
            "no wedi / wedi line: {fig7:?}"
        );
        let threads = texts("suite-threads.svg");
        assert!(threads.iter().any(|t| t == "2") && !threads.iter().any(|t| t == "1.5"));
        assert!(threads.iter().any(|t| t.starts_with("Thread scaling")));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

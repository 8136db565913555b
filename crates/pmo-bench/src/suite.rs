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

use crate::{median, plot, BenchError, Records, TempPool};

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
pub const TRACKING_VARIANTS: [(&str, &str); 4] = [
    ("fault", "1"),
    ("fault", "16"),
    ("twin", "1"),
    ("twin", "16"),
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
            repeats: if quick { 1 } else { 3 },
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
struct EnvGuard {
    key: &'static str,
    old: Option<String>,
}

impl EnvGuard {
    fn set(key: &'static str, value: &str) -> EnvGuard {
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
    // Room for the matrices twice (shadow paging) and metadata (TempPool adds a third copy
    // for a plaintext copy on the medium).
    let data = (c.workload.len_bytes(cfg.dims) * 2 + (64 << 20)) as u64;
    let tp = TempPool::new(&opts.dir, "suite", data, c.scheme)?;
    let mut out = Vec::new();
    for _ in 0..opts.repeats.max(1) {
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
    let s = |f: fn(&RunResult) -> u64| -> f64 {
        median(&runs.iter().map(|r| f(r) as f64 / 1e9).collect::<Vec<_>>())
    };
    let n = runs.len();
    records.push("suite", &params, "wall_s", s(|r| r.wall_ns), "s", n);
    records.push("suite", &params, "attach_s", s(|r| r.attach_ns), "s", n);
    records.push("suite", &params, "psync_s", s(|r| r.psync_ns), "s", n);
    records.push("suite", &params, "detach_s", s(|r| r.detach_ns), "s", n);
    records.push("suite", &params, "pf_s", s(|r| r.fill_ns), "s", n);
    records.push(
        "suite",
        &params,
        "compute_s",
        s(|r| r.compute_ns.saturating_sub(r.fill_ns)),
        "s",
        n,
    );
    records.push(
        "suite",
        &params,
        "dram_compute_s",
        s(|r| r.dram_compute_ns),
        "s",
        n,
    );
    // The store's Fig. 6 accounting, summed over the run's sessions.
    for (i, (name, _)) in pmo_store::SessionStats::default()
        .categories()
        .iter()
        .enumerate()
    {
        let v = median(
            &runs
                .iter()
                .map(|r| r.session.categories()[i].1 as f64 / 1e9)
                .collect::<Vec<_>>(),
        );
        records.push("suite", &params, &fig6_metric(name), v, "s", n);
    }
    records.push(
        "suite",
        &params,
        "faults",
        median(&runs.iter().map(|r| r.faults as f64).collect::<Vec<_>>()),
        "count",
        n,
    );
    records.push(
        "suite",
        &params,
        "psyncs",
        median(&runs.iter().map(|r| r.psyncs as f64).collect::<Vec<_>>()),
        "count",
        n,
    );
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

fn find(records: &Records, metric: &str, p: &[(&str, &str)]) -> Option<f64> {
    records.find(metric, p)
}

/// Session study, attach-session size `k`: the geomean over workloads of `num`'s wall time
/// divided by `den`'s (Fig. 7: `den` = wedi; Fig. 8: BP/I_d over SP/I_d on the medium).
fn session_ratio(records: &Records, num: &str, den: &str, k: &str) -> Option<f64> {
    let param = |r: &crate::Record, key: &str| r.params.get(key).cloned().unwrap_or_default();
    let mut acc = (0.0, 0usize);
    for r in records.records.iter().filter(|r| {
        r.bench == "suite"
            && r.metric == "wall_s"
            && param(r, "study") == "session"
            && param(r, "scheme") == num
            && param(r, "session_psyncs") == k
    }) {
        let w = param(r, "workload");
        let d = find(
            records,
            "wall_s",
            &[
                ("study", "session"),
                ("workload", &w),
                ("scheme", den),
                ("session_psyncs", k),
            ],
        );
        if let Some(d) = d.filter(|&d| d > 0.0) {
            acc.0 += (r.value / d).ln();
            acc.1 += 1;
        }
    }
    (acc.1 > 0).then(|| (acc.0 / acc.1 as f64).exp())
}

/// Print a workload x scheme table of `value` with a geomean row (cells without a value: `-`).
fn print_matrix(
    title: &str,
    rows: &[String],
    columns: &[String],
    value: impl Fn(&str, &str) -> Option<f64>,
) {
    let rw = rows.iter().map(String::len).max().unwrap_or(0).max(10);
    let cw = columns.iter().map(String::len).max().unwrap_or(0).max(8);
    println!("{title}");
    print!("{:<rw$}", "workload");
    for c in columns {
        print!(" {c:>cw$}");
    }
    println!();
    let mut geo: Vec<(f64, usize)> = vec![(0.0, 0); columns.len()];
    for r in rows {
        print!("{r:<rw$}");
        for (i, c) in columns.iter().enumerate() {
            match value(r, c).filter(|v| v.is_finite() && *v > 0.0) {
                Some(v) => {
                    print!(" {v:>cw$.3}");
                    geo[i].0 += v.ln();
                    geo[i].1 += 1;
                }
                None => print!(" {:>cw$}", "-"),
            }
        }
        println!();
    }
    print!("{:<rw$}", "geomean");
    for g in &geo {
        if g.1 > 0 {
            print!(" {:>cw$.3}", (g.0 / g.1 as f64).exp());
        } else {
            print!(" {:>cw$}", "-");
        }
    }
    println!();
}

/// Print the tables of a run.
pub fn print_tables(records: &Records) {
    let rows: Vec<&crate::Record> = records
        .records
        .iter()
        .filter(|r| r.bench == "suite" && r.metric == "wall_s")
        .collect();
    let param = |r: &crate::Record, k: &str| r.params.get(k).cloned().unwrap_or_default();
    let mut workloads: Vec<String> = Vec::new();
    for r in &rows {
        let w = param(r, "workload");
        if !workloads.contains(&w) {
            workloads.push(w);
        }
    }
    // Breakdown: time per scheme normalised to wedi, per workload.
    let mut schemes: Vec<String> = Vec::new();
    for r in rows.iter().filter(|r| param(r, "study") == "breakdown") {
        let s = param(r, "scheme");
        if !schemes.contains(&s) {
            schemes.push(s);
        }
    }
    if !schemes.is_empty() {
        let cell = |metric: &'static str, w: &str, s: &str| {
            find(
                records,
                metric,
                &[("study", "breakdown"), ("workload", w), ("scheme", s)],
            )
        };
        print_matrix(
            "Execution time normalised to wedi (breakdown study; lower is better):",
            &workloads,
            &schemes,
            |w, s| Some(cell("wall_s", w, s)? / cell("wall_s", w, "wedi").filter(|&b| b > 0.0)?),
        );
        // The fault tax (issue 16): the same kernel on a `Vec` in DRAM is the floor.
        print_matrix(
            "Wall time over the DRAM reference (wall_s / dram_compute_s; 1.0 = as fast as DRAM):",
            &workloads,
            &schemes,
            |w, s| Some(cell("wall_s", w, s)? / cell("dram_compute_s", w, s).filter(|&d| d > 0.0)?),
        );
        print_matrix(
            "Compute inside the PMO over the DRAM reference (compute_s / dram_compute_s):",
            &workloads,
            &schemes,
            |w, s| {
                Some(cell("compute_s", w, s)? / cell("dram_compute_s", w, s).filter(|&d| d > 0.0)?)
            },
        );
        print_matrix(
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
            find(
                records,
                metric,
                &[
                    ("study", "tracking"),
                    ("workload", w),
                    ("scheme", s),
                    ("tracking", v),
                ],
            )
        };
        for (metric, title) in [
            ("wall_s", "Tracking study: wall time over the DRAM reference (workload:scheme x PMO_DIRTY/PMO_FAULT_AROUND):"),
            ("compute_s", "Tracking study: compute inside the PMO over the DRAM reference:"),
        ] {
            print_matrix(title, &tracked, &variants, |k, v| {
                Some(cell(metric, k, v)? / cell("dram_compute_s", k, v).filter(|&d| d > 0.0)?)
            });
        }
        print_matrix(
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
        let cells: Vec<&&crate::Record> =
            rows.iter().filter(|r| param(r, "study") == study).collect();
        if cells.is_empty() {
            continue;
        }
        println!("{title} (study {study}; wall s, medians):");
        for r in cells {
            println!(
                "  {:<10} {:<13} {key}={:<9} {:>9.4}",
                param(r, "workload"),
                param(r, "scheme"),
                param(r, key),
                r.value
            );
        }
    }
    // Fig. 8: BP/I_d against SP/I_d (both with the plaintext copy on the medium) per K.
    let mut ks: Vec<String> = Vec::new();
    for r in rows
        .iter()
        .filter(|r| param(r, "study") == "session" && param(r, "scheme") == "bp-id:medium")
    {
        let k = param(r, "session_psyncs");
        if !ks.contains(&k) {
            ks.push(k);
        }
    }
    if !ks.is_empty() {
        println!("BP/I_d vs SP/I_d, plaintext copy on the medium (study session; geomean over workloads of bp-id:medium / sp-id:medium; < 1: BP faster):");
        for k in &ks {
            if let Some(v) = session_ratio(records, "bp-id:medium", "sp-id:medium", k) {
                println!("  K={k:<3} {v:.3}");
            }
        }
    }
    let placed: Vec<&&crate::Record> = rows
        .iter()
        .filter(|r| param(r, "study") == "placement" && param(r, "scheme").ends_with(":medium"))
        .collect();
    if !placed.is_empty() {
        println!(
            "Plaintext copy on the medium vs in DRAM (study placement; wall s, medians; sigsegv faults for both):"
        );
        let mut geo: Vec<(String, f64, usize)> = Vec::new();
        for r in placed {
            let (w, s) = (param(r, "workload"), param(r, "scheme"));
            let dram_name = s.trim_end_matches(":medium").to_string();
            let dram = find(
                records,
                "wall_s",
                &[
                    ("study", "placement"),
                    ("workload", &w),
                    ("scheme", &dram_name),
                ],
            )
            .unwrap_or(f64::NAN);
            println!(
                "  {w:<10} {dram_name:<8} dram {dram:>9.4}  medium {:>9.4}  medium/dram {:.3}",
                r.value,
                r.value / dram
            );
            if dram > 0.0 {
                match geo.iter_mut().find(|g| g.0 == dram_name) {
                    Some(g) => {
                        g.1 += (r.value / dram).ln();
                        g.2 += 1;
                    }
                    None => geo.push((dram_name, (r.value / dram).ln(), 1)),
                }
            }
        }
        for (s, acc, n) in geo {
            println!(
                "  geomean    {s:<8} medium/dram {:.3} (DRAM cache: {:.1}% less time)",
                (acc / n as f64).exp(),
                (1.0 - 1.0 / (acc / n as f64).exp()) * 100.0
            );
        }
    }
    let cxl: Vec<&&crate::Record> = rows.iter().filter(|r| param(r, "study") == "cxl").collect();
    if !cxl.is_empty() {
        println!("CXL (study cxl; wall s, relative to wedi on dram):");
        for r in cxl {
            let w = param(r, "workload");
            let base = find(
                records,
                "wall_s",
                &[
                    ("study", "cxl"),
                    ("workload", &w),
                    ("scheme", "wedi"),
                    ("latency", "dram"),
                ],
            )
            .unwrap_or(f64::NAN);
            println!(
                "  {w:<10} {:<8} {:<8} predict={:<9} {:>9.4} ({:.2}x)",
                param(r, "scheme"),
                param(r, "latency"),
                param(r, "predict"),
                r.value,
                r.value / base
            );
        }
    }
}

/// Draw the suite's figures (SVG) into `dir`; returns the files written.
pub fn draw(records: &Records, dir: &Path) -> Result<Vec<PathBuf>, BenchError> {
    let mut files = Vec::new();
    let rows: Vec<&crate::Record> = records
        .records
        .iter()
        .filter(|r| r.bench == "suite")
        .collect();
    let param = |r: &crate::Record, k: &str| r.params.get(k).cloned().unwrap_or_default();
    // Fig. 6: per scheme, the store's seven categories stacked, each the mean over workloads
    // of (category / wedi's wall time).
    let names = pmo_store::SessionStats::default().categories();
    let metrics: Vec<String> = names.iter().map(|c| fig6_metric(c.0)).collect();
    let cats: Vec<(&str, &str)> = metrics
        .iter()
        .zip(names.iter())
        .map(|(m, c)| (m.as_str(), c.0))
        .collect();
    // Per scheme of `study`, the seven categories stacked, each the mean over workloads of
    // (category / the wall time of `base(scheme)` in the same workload).
    let fig6_bars = |study: &str, base: &dyn Fn(&str) -> String| {
        let mut schemes: Vec<String> = Vec::new();
        for r in rows
            .iter()
            .filter(|r| param(r, "study") == study && r.metric == "wall_s")
        {
            let s = param(r, "scheme");
            if !schemes.contains(&s) {
                schemes.push(s);
            }
        }
        let mut bars = Vec::new();
        for s in &schemes {
            let b_scheme = base(s);
            let mut parts = Vec::new();
            for &(m, label) in &cats {
                let mut acc = (0.0, 0usize);
                for r in rows.iter().filter(|r| {
                    param(r, "study") == study && r.metric == m && param(r, "scheme") == *s
                }) {
                    let w = param(r, "workload");
                    if let Some(b) = find(
                        records,
                        "wall_s",
                        &[("study", study), ("workload", &w), ("scheme", &b_scheme)],
                    ) {
                        if b > 0.0 {
                            acc.0 += r.value / b;
                            acc.1 += 1;
                        }
                    }
                }
                parts.push((label, if acc.1 > 0 { acc.0 / acc.1 as f64 } else { 0.0 }));
            }
            bars.push((s.clone(), parts));
        }
        bars
    };
    for (study, base, title, file) in [
        (
            "breakdown",
            &(|_: &str| "wedi".to_string()) as &dyn Fn(&str) -> String,
            "Execution time by design, normalised to wedi (mean over workloads)",
            "suite-fig6-breakdown.svg",
        ),
        (
            "placement",
            &|s: &str| s.trim_end_matches(":medium").to_string(),
            "Plaintext copy in DRAM vs on the medium, normalised to DRAM (mean over workloads)",
            "suite-placement.svg",
        ),
    ] {
        let bars = fig6_bars(study, base);
        if !bars.is_empty() {
            let p = dir.join(file);
            plot::stacked_bars(&p, title, &bars)?;
            files.push(p);
        }
    }
    // Figs. 7 and 8: per K, the geomean over workloads of a scheme's wall time divided by
    // another's at the same K (wedi for Fig. 7; SP/I_d on the medium for BP/I_d in Fig. 8).
    let mut ks: Vec<String> = Vec::new();
    let mut session_schemes: Vec<String> = Vec::new();
    for r in rows
        .iter()
        .filter(|r| param(r, "study") == "session" && r.metric == "wall_s")
    {
        let (k, s) = (param(r, "session_psyncs"), param(r, "scheme"));
        if !ks.contains(&k) {
            ks.push(k);
        }
        if !session_schemes.contains(&s) {
            session_schemes.push(s);
        }
    }
    for (file, title, y, pairs) in [
        (
            "suite-fig7-session.svg",
            "Attach-session size K: time normalised to wedi (geomean over workloads)",
            "time / wedi",
            session_schemes
                .iter()
                .map(|s| (s.clone(), s.clone(), "wedi".to_string()))
                .collect::<Vec<_>>(),
        ),
        (
            "suite-fig8-bp-vs-sp.svg",
            "BP/I_d vs SP/I_d, plaintext on the medium (geomean over workloads)",
            "bp-id:medium / sp-id:medium",
            vec![(
                "bp-id:medium / sp-id:medium".to_string(),
                "bp-id:medium".to_string(),
                "sp-id:medium".to_string(),
            )],
        ),
    ] {
        let mut series: Vec<(String, Vec<(f64, f64)>)> = pairs
            .iter()
            .map(|(name, num, den)| {
                let pts = ks
                    .iter()
                    .filter_map(|k| {
                        let x: f64 = k.parse().ok()?;
                        session_ratio(records, num, den, k).map(|v| (x, v))
                    })
                    .collect();
                (name.clone(), pts)
            })
            .filter(|s: &(String, Vec<(f64, f64)>)| !s.1.is_empty())
            .collect();
        if !series.is_empty() {
            let p = dir.join(file);
            plot::lines(&p, title, "attach-session size K", y, &mut series, false)?;
            files.push(p);
        }
    }
    for (study, key, title, file) in [("threads", "threads", "Threads", "suite-threads.svg")] {
        let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
        for r in rows
            .iter()
            .filter(|r| param(r, "study") == study && r.metric == "wall_s")
        {
            let name = format!("{} {}", param(r, "workload"), param(r, "scheme"));
            let x: f64 = param(r, key).parse().unwrap_or(0.0);
            match series.iter_mut().find(|s| s.0 == name) {
                Some(s) => s.1.push((x, r.value)),
                None => series.push((name, vec![(x, r.value)])),
            }
        }
        if !series.is_empty() {
            let p = dir.join(file);
            plot::lines(&p, title, title, "wall time (s)", &mut series, false)?;
            files.push(p);
        }
    }
    // Prediction depth: x = depth (adaptive drawn at 32).
    let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for r in rows
        .iter()
        .filter(|r| param(r, "study") == "predict" && r.metric == "wall_s")
    {
        let d = param(r, "predict");
        let x = match d.as_str() {
            "off" => 0.0,
            "adaptive" => 32.0,
            n => n.parse().unwrap_or(0.0),
        };
        let name = param(r, "workload");
        match series.iter_mut().find(|s| s.0 == name) {
            Some(s) => s.1.push((x, r.value)),
            None => series.push((name, vec![(x, r.value)])),
        }
    }
    if !series.is_empty() {
        let p = dir.join("suite-predict-depth.svg");
        plot::lines(
            &p,
            "Prediction depth (0 = off, 32 = adaptive), secure",
            "prediction depth",
            "wall time (s)",
            &mut series,
            false,
        )?;
        files.push(p);
    }
    // CXL: bars per workload: wedi on dram vs each cxl-far cell.
    let mut bars = Vec::new();
    for r in rows
        .iter()
        .filter(|r| param(r, "study") == "cxl" && r.metric == "wall_s")
    {
        bars.push((
            format!(
                "{} {} {}",
                param(r, "workload"),
                param(r, "scheme"),
                param(r, "latency")
            ),
            vec![("wall s", r.value)],
        ));
    }
    if !bars.is_empty() {
        let p = dir.join("suite-cxl.svg");
        plot::stacked_bars(
            &p,
            "cxl-far with DRAM cache and prediction vs wedi on dram",
            &bars,
        )?;
        files.push(p);
    }
    Ok(files)
}

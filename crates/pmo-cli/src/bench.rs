//! `pmo bench [WHICH]`: the benchmarks (the papers' suite, the store, the schemes, Filebench,
//! LMDB and YCSB, the lifecycle), their records, tables and figures.

use std::path::PathBuf;

use anyhow::{bail, Context};

use crate::common::parse_scheme;

#[derive(clap::Args)]
pub(crate) struct BenchArgs {
    /// Which benchmark: suite (the papers' workloads over the scheme, prediction, latency
    /// and thread matrix), store (psync, attach, faults, PMDK peer), schemes (protection costs),
    /// filebench (Filebench's personalities on the file store in PMOs; `--quick` suite runs
    /// include a short one), lmdb (LMDB on PMOs vs /dev/shm and disk), ycsb (YCSB A-F on those stores),
    /// lifecycle (rekey, snapshot, export and import vs cp and mdb_copy)
    #[arg(default_value = "suite")]
    pub(crate) which: String,
    /// suite: only these workloads; filebench: these workload files (FILE.f) instead of
    /// the four default personalities (repeatable)
    #[arg(long = "workload")]
    pub(crate) workloads: Vec<String>,
    /// suite: only these schemes in the breakdown study; schemes, filebench, lmdb, ycsb: only
    /// these schemes (repeatable)
    #[arg(long = "scheme")]
    pub(crate) schemes: Vec<String>,
    /// suite: only these studies (repeatable): breakdown, session, predict, threads, cxl,
    /// placement, tracking (run only when asked for); filebench: fig10, threads, lpmo, design
    #[arg(long = "study")]
    pub(crate) studies: Vec<String>,
    /// suite: prediction depths of the predict study (repeatable; off, N, adaptive);
    /// filebench: the depth of the lpmo study's runs with prediction (the first one given; 8)
    #[arg(long = "predict")]
    pub(crate) depths: Vec<String>,
    /// suite: attach-session sizes K of the session study (repeatable)
    #[arg(long = "k", value_name = "K")]
    pub(crate) sessions: Vec<usize>,
    /// suite: thread counts of the threads study; filebench: thread counts (repeatable)
    #[arg(long = "threads", value_name = "N")]
    pub(crate) threads: Vec<usize>,
    /// suite: matrix sizes: tiny, default, paper (the LOaPP paper's Table IV)
    #[arg(long)]
    pub(crate) size: Option<String>,
    /// suite: psync after this many seconds of the unprotected run (the papers: 1); default
    /// 1 s scaled by the PMO's size over the paper-size PMO's, at least 0.002
    #[arg(long, value_name = "SECONDS")]
    pub(crate) psync_interval: Option<f64>,
    /// suite: run nothing; print the tables and draw the figures of records saved with
    /// --json by an earlier run
    #[arg(long, value_name = "FILE.json")]
    pub(crate) from: Option<PathBuf>,
    /// Short configuration (fewer cells and repeats; still at least 3 samples per cell)
    #[arg(long)]
    pub(crate) quick: bool,
    /// Also write the records as JSON here
    #[arg(long, value_name = "FILE")]
    pub(crate) json: Option<PathBuf>,
    /// Directory for CSV (and figures)
    #[arg(long, default_value = "bench-out", value_name = "DIR")]
    pub(crate) out: PathBuf,
    /// Directory for benchmark pools (default /dev/shm: emulated persistent memory);
    /// filebench: run against this plain directory instead of PMOs
    #[arg(long, value_name = "DIR")]
    pub(crate) dir: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) fb: Box<FilebenchArgs>,
}

/// `pmo bench filebench`'s own options.
#[derive(clap::Args, Debug)]
pub(crate) struct FilebenchArgs {
    /// filebench: set a workload variable before its defines use it (repeatable)
    #[arg(long = "set", value_name = "VAR=VALUE")]
    sets: Vec<String>,
    /// filebench: cap on each run, whatever its `run` line says
    #[arg(long)]
    seconds: Option<f64>,
    /// filebench: sync modes, paper or fsync (repeatable)
    #[arg(long = "sync")]
    syncs: Vec<String>,
    /// filebench: latency profiles (repeatable)
    #[arg(long = "latency")]
    latencies: Vec<String>,
    /// filebench: the papers' 5 runs x 30 s at Filebench's own sizes
    #[arg(long)]
    paper: bool,
    /// filebench: runs per cell (medians), instead of the preset's (3; 1 with --quick, 5 with --paper)
    #[arg(long)]
    repeats: Option<usize>,
}

pub(crate) const BENCH_HELP: &str = "\
Workloads: 2dconv, gauss, lu, tmm, cholesky (crate pmo-workloads; each verified against a DRAM run)
Schemes:   none, wed, wedi, bp, bp-ip, bp-id, sp, sp-ip, sp-id, secure, each also with
           ':medium' (the plaintext copy on the medium instead of DRAM)
Depths:    off, 1, 2, 4, 8, 16, ..., adaptive (PMO_PREDICT)
Latency:   dram, optane, cxl-near, cxl-far, custom:... (PMO_LATENCY; docs/latency.md)
Placement: DRAM (default; PMO_NUMA_NODE picks the node) or ':medium'
Studies:   breakdown (LOaPP Fig. 6), session (Figs. 7 and 8), predict, threads, cxl, placement,
           tracking (dirty tracking and fault-around; only when asked for)
Output:    CSV (and --json) records in --out, SVG (and PNG) figures beside them;
           --from FILE.json redraws them from saved records";

/// `pmo bench [WHICH]`.
pub(crate) fn command(args: &BenchArgs) -> anyhow::Result<()> {
    let BenchArgs {
        which,
        quick,
        json,
        out,
        dir,
        workloads,
        schemes,
        studies,
        depths,
        sessions,
        threads,
        size,
        psync_interval,
        from,
        fb,
    } = args;
    let mut records = pmo_bench::Records::default();
    if from.is_some() && which != "suite" {
        bail!("--from is for the suite");
    }
    if psync_interval.is_some() && which != "suite" {
        bail!("--psync-interval is for the suite");
    }
    match which.as_str() {
        "suite" if from.is_some() => {
            let f = from.as_deref().unwrap_or(std::path::Path::new(""));
            records = pmo_bench::Records::read_json(f)?;
            std::fs::create_dir_all(out).with_context(|| format!("create {}", out.display()))?;
            show_suite(&records, out)?;
            return Ok(());
        }
        "suite" => {
            let mut opts = pmo_bench::suite::SuiteOptions::new(*quick);
            if let Some(d) = dir {
                opts.dir = d.clone();
            }
            if let Some(s) = size {
                opts.size = pmo_workloads::Size::from_name(s)?;
            }
            if let Some(s) = *psync_interval {
                if !(s > 0.0 && s <= 3600.0) {
                    bail!("--psync-interval takes seconds above 0, at most 3600, not {s}");
                }
                opts.psync_interval = Some(std::time::Duration::from_secs_f64(s));
            }
            if !workloads.is_empty() {
                opts.workloads = workloads
                    .iter()
                    .map(|w| pmo_workloads::Workload::from_name(w))
                    .collect::<Result<_, _>>()?;
            }
            if !schemes.is_empty() {
                opts.schemes = schemes
                    .iter()
                    .map(|s| parse_scheme(s))
                    .collect::<anyhow::Result<_>>()?;
            }
            if !studies.is_empty() {
                for s in studies {
                    if !pmo_bench::suite::STUDIES.contains(&s.as_str()) {
                        bail!(
                            "unknown study '{s}' (one of {})",
                            pmo_bench::suite::STUDIES.join(", ")
                        );
                    }
                }
                opts.studies = studies.clone();
            }
            if !depths.is_empty() {
                opts.depths = depths.clone();
            }
            if let Some(bad) = sessions.iter().chain(threads).find(|&&n| n == 0) {
                bail!("--k and --threads take positive numbers, not {bad}");
            }
            if !sessions.is_empty() {
                opts.sessions = sessions.clone();
            }
            if !threads.is_empty() {
                opts.threads = threads.clone();
            }
            std::fs::create_dir_all(out).with_context(|| format!("create {}", out.display()))?;
            let r = pmo_bench::suite::run(&opts, &mut records);
            show_suite(&records, out)?;
            let csv = out.join("suite.csv");
            records.write_csv(&csv)?;
            outln!("records: {}", csv.display())?;
            if let Some(j) = json {
                records.write_json(j)?;
                outln!("records: {}", j.display())?;
            }
            r?;
            if *quick && workloads.is_empty() && studies.is_empty() {
                let o = pmo_filebench::bench::FbOptions::new(true, false);
                pmo_filebench::bench::run_and_report(&o, out, None)?;
            }
            return Ok(());
        }
        "store" => {
            let mut opts = pmo_bench::store::StoreBenchOptions::new(*quick);
            if let Some(d) = dir {
                opts.dir = d.clone();
            }
            pmo_bench::store::run(&opts, &mut records)?;
            out!("{}", pmo_bench::store::table(&records))?;
        }
        "schemes" => {
            let mut opts = pmo_bench::schemes::SchemesBenchOptions::new(*quick);
            if let Some(d) = dir {
                opts.dir = d.clone();
            }
            if !schemes.is_empty() {
                opts.schemes = schemes
                    .iter()
                    .map(|s| parse_scheme(s))
                    .collect::<anyhow::Result<_>>()?;
            }
            pmo_bench::schemes::run(&opts, &mut records)?;
            out!("{}", pmo_bench::schemes::table(&records))?;
            std::fs::create_dir_all(out).with_context(|| format!("create {}", out.display()))?;
            let svg = out.join("schemes-fig1.svg");
            pmo_bench::schemes::draw_fig1(&records, &svg)?;
            outln!("figure: {}", svg.display())?;
            if let Some(png) = pmo_bench::plot::to_png(&svg) {
                outln!("figure: {}", png.display())?;
            }
        }
        "filebench" => {
            let o = filebench_options(
                *quick, workloads, schemes, studies, depths, threads, dir, fb,
            )?;
            pmo_filebench::bench::run_and_report(&o, out, json.as_deref())?;
            return Ok(());
        }
        "lmdb" | "ycsb" => {
            // Flags of the other benchmarks would be ignored here: a full run of
            // something else than what was asked (YCSB's files come from PMO_YCSB_DIR).
            for (flag, given) in [
                ("--workload", !workloads.is_empty()),
                ("--study", !studies.is_empty()),
                ("--predict", !depths.is_empty()),
                ("--k", !sessions.is_empty()),
                ("--threads", !threads.is_empty()),
                ("--size", size.is_some()),
            ] {
                if given {
                    bail!(
                        "{flag} is not an option of `pmo bench {which}` (its workloads \
                         are YCSB A-F, read from PMO_YCSB_DIR or ../shared/ycsb)"
                    );
                }
            }
            let mut opts = pmo_lmdb::bench::LmdbBenchOptions::new(*quick);
            opts.others = pmo_ycsb_stores::bench::stores();
            if let Some(d) = dir {
                opts.dir = d.clone();
            }
            opts.disk_dir = out.join("lmdb-disk");
            if !schemes.is_empty() {
                opts.schemes = schemes.clone();
            }
            std::fs::create_dir_all(out).with_context(|| format!("create {}", out.display()))?;
            let r = pmo_lmdb::bench::run(&opts, which, &mut records);
            let _ = std::fs::remove_dir_all(&opts.disk_dir);
            pmo_lmdb::bench::print_tables(&records);
            for l in pmo_ycsb_stores::lmdb10::versus(&records) {
                outln!("{l}")?;
            }
            for f in pmo_lmdb::bench::draw(&records, out)? {
                outln!("figure: {}", f.display())?;
                if let Some(png) = pmo_bench::plot::to_png(&f) {
                    outln!("figure: {}", png.display())?;
                }
            }
            r?;
        }
        "lifecycle" => {
            let mut opts = pmo_bench::lifecycle::LifecycleBenchOptions::new(*quick);
            if let Some(d) = dir {
                opts.dir = d.clone();
            }
            pmo_bench::lifecycle::run(&opts, &mut records)?;
            out!("{}", pmo_bench::lifecycle::table(&records))?;
            std::fs::create_dir_all(out).with_context(|| format!("create {}", out.display()))?;
            for f in pmo_bench::lifecycle::draw(&records, out)? {
                outln!("figure: {}", f.display())?;
                if let Some(png) = pmo_bench::plot::to_png(&f) {
                    outln!("figure: {}", png.display())?;
                }
            }
        }
        other => {
            bail!("unknown benchmark '{other}' (known: suite, store, schemes, filebench, lmdb, ycsb, lifecycle)")
        }
    }
    std::fs::create_dir_all(out).with_context(|| format!("create {}", out.display()))?;
    let csv = out.join(format!("{which}.csv"));
    records.write_csv(&csv)?;
    outln!("records: {}", csv.display())?;
    if let Some(j) = json {
        records.write_json(j)?;
        outln!("records: {}", j.display())?;
    }
    Ok(())
}

/// `pmo bench filebench`'s options from the command line (the filters `pmo bench` shares with
/// the suite, then filebench's own).
#[allow(clippy::too_many_arguments)]
fn filebench_options(
    quick: bool,
    workloads: &[String],
    schemes: &[String],
    studies: &[String],
    depths: &[String],
    threads: &[usize],
    dir: &Option<PathBuf>,
    fb: &FilebenchArgs,
) -> anyhow::Result<pmo_filebench::bench::FbOptions> {
    use pmo_filebench::{bench, run::SyncMode};
    let FilebenchArgs {
        sets,
        seconds,
        syncs,
        latencies,
        paper,
        repeats,
    } = fb;
    let (seconds, paper) = (*seconds, *paper);
    let mut o = bench::FbOptions::new(quick, paper);
    if !workloads.is_empty() {
        o.workloads = workloads.iter().map(|w| bench::Source::parse(w)).collect();
    }
    for s in schemes {
        parse_scheme(s)?;
    }
    if !schemes.is_empty() {
        o.schemes = schemes.to_vec();
    }
    for s in studies {
        if !bench::STUDIES.contains(&s.as_str()) {
            bail!("unknown study '{s}' (one of {})", bench::STUDIES.join(", "));
        }
    }
    if !studies.is_empty() {
        o.studies = studies.to_vec();
    }
    if let Some(d) = depths.first() {
        pmo_store::PredictConfig::parse(d)?;
        o.predict = d.clone();
    }
    o.posix_dir = dir.clone();
    for s in sets {
        let (k, v) = s
            .split_once('=')
            .with_context(|| format!("--set {s:?}: expected VAR=VALUE"))?;
        o.sets
            .push((k.trim_start_matches('$').to_string(), v.to_string()));
    }
    if let Some(s) = seconds {
        if !(s > 0.0 && s.is_finite()) {
            bail!("--seconds must be positive");
        }
        o.seconds = s;
    }
    match *repeats {
        Some(0) => bail!("--repeats must be at least 1"),
        Some(n) => o.repeats = n,
        None => {}
    }
    if threads.contains(&0) {
        bail!("--threads must be at least 1");
    }
    if !threads.is_empty() {
        o.threads = threads.to_vec();
    }
    if !syncs.is_empty() {
        o.sync = syncs
            .iter()
            .map(|s| {
                SyncMode::from_name(s)
                    .with_context(|| format!("unknown sync mode '{s}' (paper or fsync)"))
            })
            .collect::<anyhow::Result<_>>()?;
    }
    if !latencies.is_empty() {
        o.latency = latencies.to_vec();
    }
    Ok(o)
}

/// Print the suite's tables, draw its figures into `out` (SVG, and PNG where possible), and
/// print where they are.
fn show_suite(records: &pmo_bench::Records, out: &std::path::Path) -> anyhow::Result<()> {
    out!("{}", pmo_bench::suite::tables(records))?;
    for f in pmo_bench::suite::draw(records, out)? {
        outln!("figure: {}", f.display())?;
        if let Some(png) = pmo_bench::plot::to_png(&f) {
            outln!("figure: {}", png.display())?;
        }
    }
    Ok(())
}

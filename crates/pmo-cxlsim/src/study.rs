//! The paper's study, reproduced on our model: runs the experiments behind Figs. 1, 5, 6, 7 and
//! 8 and writes CSV tables, figures (SVG and PNG, drawn by `pmo_plot`) and a Markdown summary.
//!
//! Owns [`StudyConfig`], [`run_study`] and what each figure shows. Every run is one deterministic
//! simulation (`sim::simulate`); a run's checker violations fail the study, so the figures are
//! only ever drawn from runs that kept every correctness criterion.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use pmo_plot::{BarChart, LineChart, Series};

use crate::config::{Params, Scheme};
use crate::error::{CxlsimError, Result};
use crate::kernels::{generate, Size, WORKLOADS};
use crate::sim::{simulate, Stats};
use crate::trace::Trace;

/// What the study runs.
#[derive(Debug, Clone)]
pub struct StudyConfig {
    /// Output directory (created).
    pub out: PathBuf,
    /// Problem size of the kernels.
    pub size: Size,
    /// Base parameters (scheme, hops and PB entries are varied by the study).
    pub base: Params,
    /// Workloads (names from `kernels::WORKLOADS`).
    pub workloads: Vec<String>,
    /// Hop counts of Fig. 1.
    pub hops: Vec<usize>,
    /// PB entry counts of Fig. 8.
    pub pb_entries: Vec<usize>,
    /// Show a progress bar on stderr.
    pub progress: bool,
    /// Runs per configuration, each with its own seeded core start delays; figures use the
    /// totals (mean times, latencies and rates over the repeats).
    pub repeats: usize,
    /// Largest start delay of a core in a repeat, in cycles.
    pub start_jitter_cycles: u64,
    /// Also run Figs. 5-7 with a fence after every flush (strict persists, paper Fig. 2a):
    /// an ablation of the persist pattern, reported beside the loop-checkpoint results.
    pub strict_ablation: bool,
}

impl StudyConfig {
    /// The default study (`quick` = the reduced one).
    pub fn new(out: PathBuf, quick: bool) -> StudyConfig {
        StudyConfig {
            out,
            size: if quick { Size::Quick } else { Size::Full },
            base: Params::default(),
            workloads: WORKLOADS.iter().map(|s| s.to_string()).collect(),
            hops: vec![0, 1, 2, 3, 4],
            pb_entries: vec![8, 16, 32, 64],
            progress: true,
            repeats: if quick { 3 } else { 5 },
            start_jitter_cycles: 4000,
            strict_ablation: true,
        }
    }
}

/// One row of the per-workload comparison (Figs. 5-7).
#[derive(Debug, Clone)]
pub struct WorkloadRow {
    /// Workload.
    pub workload: String,
    /// Runs under nopb, pb, pb-rf.
    pub runs: [Stats; 3],
}

impl WorkloadRow {
    /// Speedup of scheme index `s` over nopb (simulated time ratio).
    pub fn speedup(&self, s: usize) -> f64 {
        ratio(
            self.runs[0].sim_time_ps as f64,
            self.runs[s].sim_time_ps as f64,
        )
    }
    /// Persist latency of scheme `s` normalised to nopb.
    pub fn persist_norm(&self, s: usize) -> f64 {
        ratio(
            self.runs[s].persist_latency_ns(),
            self.runs[0].persist_latency_ns(),
        )
    }
    /// Read latency of scheme `s` normalised to nopb.
    pub fn read_norm(&self, s: usize) -> f64 {
        ratio(
            self.runs[s].read_latency_ns(),
            self.runs[0].read_latency_ns(),
        )
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 {
        0.0
    } else {
        a / b
    }
}

/// Everything the study measured.
#[derive(Debug, Clone)]
pub struct StudyResult {
    /// Fig. 1: (hops, nopb persist ns, pb persist ns) for FFT.
    pub fig1: Vec<(usize, f64, f64)>,
    /// Fig. 1 again with a fence after every flush (empty without `strict_ablation`).
    pub fig1_strict: Vec<(usize, f64, f64)>,
    /// Figs. 5-7.
    pub rows: Vec<WorkloadRow>,
    /// Fig. 8: (workload, entries, pb speedup, pb-rf speedup).
    pub fig8: Vec<(String, usize, f64, f64)>,
    /// Fig. 8 again with a fence after every flush, same order (empty without
    /// `strict_ablation`).
    pub fig8_strict: Vec<(String, usize, f64, f64)>,
    /// Figs. 5-7 again with a fence after every flush (empty without `strict_ablation`).
    pub strict_rows: Vec<WorkloadRow>,
    /// Simulations run.
    pub runs: usize,
    /// Events simulated in total.
    pub events: u64,
    /// Wall time of the whole study in seconds.
    pub wall_s: f64,
    /// The Markdown summary (also written to `summary.md`).
    pub summary: String,
}

/// Run the study and write `fig1_hops.csv/svg/png`, `fig5_speedup`, `fig6a_persist_latency`,
/// `fig6b_read_latency`, `fig7_pb_rates`, `fig8_pb_entries` (each figure as SVG and PNG) and
/// `summary.md` into `config.out`.
pub fn run_study(config: &StudyConfig) -> Result<StudyResult> {
    let started = Instant::now();
    std::fs::create_dir_all(&config.out).map_err(|e| CxlsimError::io(&config.out, e))?;
    let workloads: Vec<&str> = config.workloads.iter().map(String::as_str).collect();
    for w in &workloads {
        if !WORKLOADS.contains(w) {
            return Err(CxlsimError::UnknownWorkload(w.to_string()));
        }
    }
    let fig1_workload = fig1_workload(&workloads);
    let strict_runs = if config.strict_ablation {
        3 * workloads.len() + 2 * config.pb_entries.len() * workloads.len()
    } else {
        0
    };
    let fig1_runs = if config.strict_ablation { 4 } else { 2 } * config.hops.len();
    let total_runs = config.repeats.max(1)
        * (fig1_runs
            + 3 * workloads.len()
            + strict_runs
            + 2 * config.pb_entries.len() * workloads.len());
    let bar = if config.progress {
        let bar = indicatif::ProgressBar::new(total_runs as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{elapsed_precise} [{bar:40}] {pos}/{len} runs {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };
    let mut runs = 0usize;
    let mut events = 0u64;
    let repeats = config.repeats.max(1);
    let jitter = config.start_jitter_cycles;
    let mut run = |trace: &Trace, params: Params, bar: &indicatif::ProgressBar| -> Result<Stats> {
        bar.set_message(format!(
            "{} {} hops={} entries={}",
            trace.name, params.scheme, params.hops, params.pb_entries
        ));
        let mut total: Option<Stats> = None;
        for repeat in 0..repeats {
            let jittered = Params {
                start_jitter_cycles: if repeats > 1 { jitter } else { 0 },
                jitter_seed: repeat as u64 + 1,
                ..params.clone()
            };
            let stats = simulate(&jittered, trace)?;
            if stats.violation_count > 0 {
                return Err(CxlsimError::param(
                    "study",
                    format!(
                        "checker violation in {} {} (repeat {repeat}): {}",
                        trace.name, params.scheme, stats.violations[0]
                    ),
                ));
            }
            runs += 1;
            events += stats.events;
            match &mut total {
                Some(t) => t.accumulate(&stats),
                None => total = Some(stats),
            }
            bar.inc(1);
        }
        total.ok_or_else(|| CxlsimError::param("repeats", "must be >= 1"))
    };

    let traces: Vec<Trace> = workloads
        .iter()
        .map(|w| generate(w, config.base.cores, config.size))
        .collect::<Result<_>>()?;
    let trace_of = |name: &str| traces.iter().find(|t| t.name == name);

    // Fig. 1: persist latency against hop count.
    let mut fig1 = Vec::new();
    let mut fig1_strict = Vec::new();
    if let Some(trace) = trace_of(fig1_workload) {
        let strict = trace.with_fence_after_each_flush();
        let mut variants = vec![(trace, &mut fig1)];
        if config.strict_ablation {
            variants.push((&strict, &mut fig1_strict));
        }
        for (trace, out) in variants {
            for &hops in &config.hops {
                let nopb = run(
                    trace,
                    Params {
                        scheme: Scheme::NoPb,
                        hops,
                        ..config.base.clone()
                    },
                    &bar,
                )?;
                let pb = run(
                    trace,
                    Params {
                        scheme: Scheme::Pb,
                        hops,
                        ..config.base.clone()
                    },
                    &bar,
                )?;
                out.push((hops, nopb.persist_latency_ns(), pb.persist_latency_ns()));
            }
        }
    }

    // Figs. 5-7: every workload under every scheme.
    let mut rows = Vec::new();
    for trace in &traces {
        let mut stats = Vec::new();
        for scheme in Scheme::ALL {
            stats.push(run(
                trace,
                Params {
                    scheme,
                    ..config.base.clone()
                },
                &bar,
            )?);
        }
        let runs: [Stats; 3] = stats
            .try_into()
            .map_err(|_| CxlsimError::param("study", "three schemes"))?;
        rows.push(WorkloadRow {
            workload: trace.name.clone(),
            runs,
        });
    }

    // Ablation: the same workloads with a fence after every flush.
    let mut strict_rows = Vec::new();
    if config.strict_ablation {
        for trace in &traces {
            let strict = trace.with_fence_after_each_flush();
            let mut stats = Vec::new();
            for scheme in Scheme::ALL {
                stats.push(run(
                    &strict,
                    Params {
                        scheme,
                        ..config.base.clone()
                    },
                    &bar,
                )?);
            }
            let runs: [Stats; 3] = stats
                .try_into()
                .map_err(|_| CxlsimError::param("study", "three schemes"))?;
            strict_rows.push(WorkloadRow {
                workload: trace.name.clone(),
                runs,
            });
        }
    }

    // Fig. 8: speedup against PB entries (nopb has no PB: its time is the row's nopb run).
    let mut fig8 = Vec::new();
    let mut fig8_strict = Vec::new();
    for (i, (trace, row)) in traces.iter().zip(&rows).enumerate() {
        let strict = trace.with_fence_after_each_flush();
        let mut variants = vec![(trace, row, &mut fig8)];
        if let Some(strict_row) = strict_rows.get(i) {
            variants.push((&strict, strict_row, &mut fig8_strict));
        }
        for (trace, row, out) in variants {
            for &entries in &config.pb_entries {
                let base = Params {
                    pb_entries: entries,
                    pb_tag_ns: None,
                    ..config.base.clone()
                };
                let pb = run(
                    trace,
                    Params {
                        scheme: Scheme::Pb,
                        ..base.clone()
                    },
                    &bar,
                )?;
                let rf = run(
                    trace,
                    Params {
                        scheme: Scheme::PbRf,
                        ..base
                    },
                    &bar,
                )?;
                let nopb_ps = row.runs[0].sim_time_ps as f64;
                out.push((
                    trace.name.clone(),
                    entries,
                    ratio(nopb_ps, pb.sim_time_ps as f64),
                    ratio(nopb_ps, rf.sim_time_ps as f64),
                ));
            }
        }
    }
    bar.finish_and_clear();

    write_outputs(
        config,
        &fig1,
        &fig1_strict,
        &rows,
        &fig8,
        &fig8_strict,
        &strict_rows,
    )?;
    let wall_s = started.elapsed().as_secs_f64();
    let summary = summary_markdown(
        config,
        fig1_workload,
        &fig1,
        &fig1_strict,
        &rows,
        &fig8,
        &fig8_strict,
        &strict_rows,
        runs,
        events,
        wall_s,
    );
    let path = config.out.join("summary.md");
    std::fs::write(&path, &summary).map_err(|e| CxlsimError::io(&path, e))?;
    Ok(StudyResult {
        fig1,
        fig1_strict,
        rows,
        fig8,
        fig8_strict,
        strict_rows,
        runs,
        events,
        wall_s,
        summary,
    })
}

/// Per-workload table of Figs. 5-7 (one row per workload) as CSV.
fn workloads_csv(config: &StudyConfig, rows: &[WorkloadRow]) -> String {
    let mut csv = String::from(
        "workload,nopb_us,pb_us,pbrf_us,speedup_pb,speedup_pbrf,persist_ns_nopb,persist_ns_pb,persist_ns_pbrf,read_ns_nopb,read_ns_pb,read_ns_pbrf,persist_norm_pb,persist_norm_pbrf,read_norm_pb,read_norm_pbrf,pbrf_read_hit,pbrf_coalesce,persists,fabric_reads_nopb,fence_stall_nopb,fence_stall_pb,fence_stall_pbrf,read_stall_nopb,read_stall_pb,read_stall_pbrf,slot_stall_nopb,slot_stall_pb,slot_stall_pbrf\n",
    );
    let cores = config.base.cores;
    for r in rows {
        let _ = writeln!(
            csv,
            "{},{:.3},{:.3},{:.3},{:.4},{:.4},{:.2},{:.2},{:.2},{:.2},{:.2},{:.2},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{},{},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4}",
            r.workload,
            r.runs[0].sim_time_us(),
            r.runs[1].sim_time_us(),
            r.runs[2].sim_time_us(),
            r.speedup(1),
            r.speedup(2),
            r.runs[0].persist_latency_ns(),
            r.runs[1].persist_latency_ns(),
            r.runs[2].persist_latency_ns(),
            r.runs[0].read_latency_ns(),
            r.runs[1].read_latency_ns(),
            r.runs[2].read_latency_ns(),
            r.persist_norm(1),
            r.persist_norm(2),
            r.read_norm(1),
            r.read_norm(2),
            r.runs[2].read_hit_rate(),
            r.runs[2].coalesce_rate(),
            r.runs[0].persists / config.repeats.max(1) as u64,
            r.runs[0].fabric_reads / config.repeats.max(1) as u64,
            r.runs[0].fence_stall_share(cores),
            r.runs[1].fence_stall_share(cores),
            r.runs[2].fence_stall_share(cores),
            r.runs[0].read_stall_share(cores),
            r.runs[1].read_stall_share(cores),
            r.runs[2].read_stall_share(cores),
            r.runs[0].slot_stall_share(cores),
            r.runs[1].slot_stall_share(cores),
            r.runs[2].slot_stall_share(cores)
        );
    }
    csv
}

fn write_file(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|e| CxlsimError::io(path, e))
}

fn write_outputs(
    config: &StudyConfig,
    fig1: &[(usize, f64, f64)],
    fig1_strict: &[(usize, f64, f64)],
    rows: &[WorkloadRow],
    fig8: &[(String, usize, f64, f64)],
    fig8_strict: &[(String, usize, f64, f64)],
    strict_rows: &[WorkloadRow],
) -> Result<()> {
    let out = &config.out;
    let base1 = fig1.first().map_or(1.0, |r| r.1);
    let base_strict = fig1_strict.first().map_or(1.0, |r| r.1);
    let mut csv = String::from("pattern,hops,nopb_persist_ns,pb_persist_ns,nopb_norm,pb_norm\n");
    for (pattern, rows, base) in [
        ("checkpoint", fig1, base1),
        ("fence-each-flush", fig1_strict, base_strict),
    ] {
        for &(h, n, p) in rows {
            let _ = writeln!(
                csv,
                "{pattern},{h},{n:.3},{p:.3},{:.4},{:.4}",
                ratio(n, base),
                ratio(p, base)
            );
        }
    }
    write_file(&out.join("fig1_hops.csv"), &csv)?;
    // What every figure's statistic is over: each configuration's runs are summed
    // (`Stats::accumulate`), so a time is their total and a latency or rate is pooled over
    // every persist, read or write of them.
    let repeats = config.repeats.max(1);
    let (runs, runs_of) = if repeats == 1 {
        ("1 run".to_string(), "1 run's".to_string())
    } else {
        (format!("{repeats} runs"), format!("{repeats} runs'"))
    };
    let fig1_workload = fig1_workload(&config.workloads);
    for (file, pattern, points, base) in [
        ("fig1_hops.svg", "loop checkpoints", fig1, base1),
        (
            "fig1_hops_strict.svg",
            "fence after every flush",
            fig1_strict,
            base_strict,
        ),
    ] {
        if points.is_empty() {
            continue;
        }
        bars(
            &out.join(file),
            &format!("Fig. 1: {fig1_workload} persist latency vs switch hops ({pattern})"),
            "switches between host and PM (hops)",
            &format!("persist latency / nopb at 0 hops (mean of {runs_of} persists)"),
            points.iter().map(|r| r.0.to_string()).collect(),
            &[
                ("nopb", points.iter().map(|r| ratio(r.1, base)).collect()),
                ("pb", points.iter().map(|r| ratio(r.2, base)).collect()),
            ],
            Some(1.0),
        )?;
    }

    write_file(&out.join("workloads.csv"), &workloads_csv(config, rows))?;
    if !strict_rows.is_empty() {
        write_file(
            &out.join("workloads_strict.csv"),
            &workloads_csv(config, strict_rows),
        )?;
    }
    // Figs. 5-7: one group per workload, then the mean of the workloads' values.
    let workloads_x = "workload (mean: the workloads' mean)";
    let speedup_y = format!("speedup over nopb (x; mean simulated time of {runs})");
    for (file, title, rows) in [
        ("fig5_speedup.svg", "Fig. 5: speedup over nopb", rows),
        (
            "fig5_speedup_strict.svg",
            "Fig. 5 ablation: speedup over nopb, fence after every flush",
            strict_rows,
        ),
    ] {
        if rows.is_empty() {
            continue;
        }
        bars(
            &out.join(file),
            title,
            workloads_x,
            &speedup_y,
            names_and_mean(rows),
            &[
                ("pb", with_mean(rows, &|r| r.speedup(1))),
                ("pb-rf", with_mean(rows, &|r| r.speedup(2))),
            ],
            Some(1.0),
        )?;
    }
    bars(
        &out.join("fig6a_persist_latency.svg"),
        "Fig. 6a: persist latency normalised to nopb",
        workloads_x,
        &format!("persist latency / nopb (mean of {runs_of} persists)"),
        names_and_mean(rows),
        &[
            ("pb", with_mean(rows, &|r| r.persist_norm(1))),
            ("pb-rf", with_mean(rows, &|r| r.persist_norm(2))),
        ],
        Some(1.0),
    )?;
    bars(
        &out.join("fig6b_read_latency.svg"),
        "Fig. 6b: read latency (from LLC) normalised to nopb",
        workloads_x,
        &format!("read latency / nopb (mean of {runs_of} reads)"),
        names_and_mean(rows),
        &[
            ("pb", with_mean(rows, &|r| r.read_norm(1))),
            ("pb-rf", with_mean(rows, &|r| r.read_norm(2))),
        ],
        Some(1.0),
    )?;
    bars(
        &out.join("fig7_pb_rates.svg"),
        "Fig. 7: pb-rf read hits (of reads at the PB) and coalesced writes (of PB writes)",
        workloads_x,
        &format!("share (%, pooled over {runs})"),
        names_and_mean(rows),
        &[
            (
                "read hit",
                with_mean(rows, &|r| 100.0 * r.runs[2].read_hit_rate()),
            ),
            (
                "write coalescing",
                with_mean(rows, &|r| 100.0 * r.runs[2].coalesce_rate()),
            ),
        ],
        None,
    )?;

    let mut csv = String::from("pattern,workload,pb_entries,tag_ns,speedup_pb,speedup_pbrf\n");
    for (pattern, points) in [("checkpoint", fig8), ("fence-each-flush", fig8_strict)] {
        for (w, e, pb, rf) in points {
            let _ = writeln!(
                csv,
                "{pattern},{w},{e},{:.3},{pb:.4},{rf:.4}",
                crate::config::pb_tag_latency_ns(*e)
            );
        }
    }
    write_file(&out.join("fig8_pb_entries.csv"), &csv)?;
    for (file, title, points) in [
        (
            "fig8_pb_entries.svg",
            "Fig. 8: speedup over nopb vs PB entries",
            fig8,
        ),
        (
            "fig8_pb_entries_strict.svg",
            "Fig. 8, fence after every flush: speedup over nopb vs PB entries",
            fig8_strict,
        ),
    ] {
        // Two lines per workload, sharing its colour: pb, then pb-rf.
        let mut series = Vec::new();
        for r in rows {
            let of = |speedup: fn(&(String, usize, f64, f64)) -> f64| -> Vec<(f64, f64)> {
                points
                    .iter()
                    .filter(|f| f.0 == r.workload)
                    .map(|f| (f.1 as f64, speedup(f)))
                    .collect()
            };
            series.push(Series::plain(format!("{} pb", r.workload), &of(|f| f.2)));
            series.push(Series::plain(format!("{} pb-rf", r.workload), &of(|f| f.3)));
        }
        // Nothing is drawn (and no file written) without a point.
        pmo_plot::lines(
            &out.join(file),
            &LineChart {
                title,
                x_desc: "PB entries (log scale)",
                y_desc: &speedup_y,
                log_x: true,
                integer_x: true,
                reference_y: Some(1.0),
                fit_y: true,
                paired: true,
                ..Default::default()
            },
            &mut series,
        )?;
    }
    Ok(())
}

/// The workload of Fig. 1: FFT, as in the paper, else the first one.
fn fig1_workload<S: AsRef<str>>(workloads: &[S]) -> &str {
    workloads
        .iter()
        .map(AsRef::as_ref)
        .find(|w| *w == "fft")
        .or_else(|| workloads.first().map(AsRef::as_ref))
        .unwrap_or("fft")
}

/// The rows' workloads and then "mean", the categories of Figs. 5-7.
fn names_and_mean(rows: &[WorkloadRow]) -> Vec<String> {
    let mut names: Vec<String> = rows.iter().map(|r| r.workload.clone()).collect();
    names.push("mean".into());
    names
}

/// `f` of every row, then their mean (0 without a row).
fn with_mean(rows: &[WorkloadRow], f: &dyn Fn(&WorkloadRow) -> f64) -> Vec<f64> {
    let mut v: Vec<f64> = rows.iter().map(f).collect();
    let mean = if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    };
    v.push(mean);
    v
}

/// Grouped bars (`pmo_plot`, SVG and the PNG beside it): one group per category, one bar per
/// named series of values (one value per category); `reference_y` a dashed line (1 for a
/// ratio to nopb).
fn bars(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    categories: Vec<String>,
    series: &[(&str, Vec<f64>)],
    reference_y: Option<f64>,
) -> Result<()> {
    let series: Vec<Series> = series
        .iter()
        .map(|(name, values)| {
            let points: Vec<(f64, f64)> = values
                .iter()
                .enumerate()
                .map(|(i, &v)| (i as f64, v))
                .collect();
            Series::plain(*name, &points)
        })
        .collect();
    pmo_plot::grouped_bars(
        path,
        &BarChart {
            title,
            x_desc,
            y_desc,
            categories,
            reference_y,
            ..Default::default()
        },
        &series,
    )?;
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn summary_markdown(
    config: &StudyConfig,
    fig1_workload: &str,
    fig1: &[(usize, f64, f64)],
    fig1_strict: &[(usize, f64, f64)],
    rows: &[WorkloadRow],
    fig8: &[(String, usize, f64, f64)],
    fig8_strict: &[(String, usize, f64, f64)],
    strict_rows: &[WorkloadRow],
    runs: usize,
    events: u64,
    wall_s: f64,
) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# pmo-cxlsim study ({:?} size, {} cores, {} PB entries, hops=1 unless varied)\n",
        config.size, config.base.cores, config.base.pb_entries
    );
    let _ = writeln!(
        s,
        "Each configuration: {} repeat(s), cores started up to {} cycles apart (seeded); times, latencies and rates are means over the repeats.\n",
        config.repeats.max(1),
        if config.repeats > 1 { config.start_jitter_cycles } else { 0 }
    );
    let _ = writeln!(s, "## Fig. 1: {fig1_workload} persist latency vs hops\n\nNormalised to nopb at hops = 0 of the same persist pattern.\n\n| hops | nopb ns | pb ns | nopb / n=0 | pb / n=0 | fence/flush: nopb ns | pb ns | nopb / n=0 | pb / n=0 |\n|---|---|---|---|---|---|---|---|---|");
    let base = fig1.first().map_or(1.0, |r| r.1);
    let base_strict = fig1_strict.first().map_or(1.0, |r| r.1);
    for (i, &(h, n, p)) in fig1.iter().enumerate() {
        let strict = fig1_strict
            .get(i)
            .map_or(" | | | |".to_string(), |&(_, sn, sp)| {
                format!(
                    " {sn:.1} | {sp:.1} | {:.2} | {:.2} |",
                    ratio(sn, base_strict),
                    ratio(sp, base_strict)
                )
            });
        let _ = writeln!(
            s,
            "| {h} | {n:.1} | {p:.1} | {:.2} | {:.2} |{strict}",
            ratio(n, base),
            ratio(p, base)
        );
    }
    let _ = writeln!(
        s,
        "\n## Figs. 5-7 per workload\n\n| workload | speedup pb | speedup pb-rf | persist pb/nopb | persist pb-rf/nopb | read pb/nopb | read pb-rf/nopb | pb-rf read hit | pb-rf coalescing | persists | fabric reads |\n|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {:.3} | {:.3} | {:.2} | {:.2} | {:.3} | {:.3} | {:.1}% | {:.1}% | {} | {} |",
            r.workload,
            r.speedup(1),
            r.speedup(2),
            r.persist_norm(1),
            r.persist_norm(2),
            r.read_norm(1),
            r.read_norm(2),
            100.0 * r.runs[2].read_hit_rate(),
            100.0 * r.runs[2].coalesce_rate(),
            r.runs[0].persists / config.repeats.max(1) as u64,
            r.runs[0].fabric_reads / config.repeats.max(1) as u64
        );
    }
    let n = rows.len().max(1) as f64;
    let mean = |f: &dyn Fn(&WorkloadRow) -> f64| rows.iter().map(f).sum::<f64>() / n;
    let _ = writeln!(
        s,
        "| **mean** | {:.3} | {:.3} | {:.2} | {:.2} | {:.3} | {:.3} | | | | |",
        mean(&|r| r.speedup(1)),
        mean(&|r| r.speedup(2)),
        mean(&|r| r.persist_norm(1)),
        mean(&|r| r.persist_norm(2)),
        mean(&|r| r.read_norm(1)),
        mean(&|r| r.read_norm(2))
    );
    let cores = config.base.cores;
    let _ = writeln!(
        s,
        "\n## Where the cores wait\n\nShare of core time (cores x run time) stalled at fences (waiting for flush acknowledgements), for read data, and for a free outstanding-request slot (at checkpoints the slots fill with flushes, so this share also grows with persist latency).\n\n| workload | fence nopb | fence pb | fence pb-rf | read nopb | read pb | read pb-rf | slot nopb | slot pb | slot pb-rf |\n|---|---|---|---|---|---|---|---|---|---|"
    );
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {:.1}% | {:.1}% | {:.1}% | {:.1}% | {:.1}% | {:.1}% | {:.1}% | {:.1}% | {:.1}% |",
            r.workload,
            100.0 * r.runs[0].fence_stall_share(cores),
            100.0 * r.runs[1].fence_stall_share(cores),
            100.0 * r.runs[2].fence_stall_share(cores),
            100.0 * r.runs[0].read_stall_share(cores),
            100.0 * r.runs[1].read_stall_share(cores),
            100.0 * r.runs[2].read_stall_share(cores),
            100.0 * r.runs[0].slot_stall_share(cores),
            100.0 * r.runs[1].slot_stall_share(cores),
            100.0 * r.runs[2].slot_stall_share(cores)
        );
    }
    if !strict_rows.is_empty() {
        let _ = writeln!(
            s,
            "\n## Ablation: a fence after every flush\n\nThe same traces with each flush followed by a fence (strict persists, paper Fig. 2a) instead of one fence per loop checkpoint: every persist's latency is on the thread's path.\n\n| workload | speedup pb | speedup pb-rf | persist pb/nopb | persist pb-rf/nopb | fence stall nopb | fence stall pb | pb-rf read hit |\n|---|---|---|---|---|---|---|---|"
        );
        for r in strict_rows {
            let _ = writeln!(
                s,
                "| {} | {:.3} | {:.3} | {:.2} | {:.2} | {:.1}% | {:.1}% | {:.1}% |",
                r.workload,
                r.speedup(1),
                r.speedup(2),
                r.persist_norm(1),
                r.persist_norm(2),
                100.0 * r.runs[0].fence_stall_share(cores),
                100.0 * r.runs[1].fence_stall_share(cores),
                100.0 * r.runs[2].read_hit_rate()
            );
        }
        let n = strict_rows.len() as f64;
        let mean = |f: &dyn Fn(&WorkloadRow) -> f64| strict_rows.iter().map(f).sum::<f64>() / n;
        let _ = writeln!(
            s,
            "| **mean** | {:.3} | {:.3} | {:.2} | {:.2} | | | |",
            mean(&|r| r.speedup(1)),
            mean(&|r| r.speedup(2)),
            mean(&|r| r.persist_norm(1)),
            mean(&|r| r.persist_norm(2))
        );
    }
    let _ = writeln!(s, "\n## Fig. 8: speedup over nopb vs PB entries\n\n| workload | entries | tag ns | pb | pb-rf | fence/flush: pb | pb-rf |\n|---|---|---|---|---|---|---|");
    for (i, (w, e, pb, rf)) in fig8.iter().enumerate() {
        let strict = fig8_strict.get(i).map_or(" | |".to_string(), |f| {
            format!(" {:.3} | {:.3} |", f.2, f.3)
        });
        let _ = writeln!(
            s,
            "| {w} | {e} | {:.3} | {pb:.3} | {rf:.3} |{strict}",
            crate::config::pb_tag_latency_ns(*e)
        );
    }
    paper_comparison(&mut s, rows, strict_rows);
    let _ = writeln!(
        s,
        "\n{runs} simulations, {events} events, {wall_s:.1} s wall ({:.2} M events/s).",
        events as f64 / wall_s.max(1e-9) / 1e6
    );
    s
}

/// The paper's headline figures next to this run's (docs/cxlsim.md explains the differences).
fn paper_comparison(s: &mut String, rows: &[WorkloadRow], strict_rows: &[WorkloadRow]) {
    if rows.is_empty() {
        return;
    }
    let pct = |x: f64| 100.0 * (x - 1.0);
    // One column per persist pattern we ran: (mean pb, mean pb-rf, persist lo, hi, mean,
    // cholesky pb, cholesky pb-rf).
    let column = |rows: &[WorkloadRow]| -> [String; 4] {
        let n = rows.len().max(1) as f64;
        let mean = |f: &dyn Fn(&WorkloadRow) -> f64| rows.iter().map(f).sum::<f64>() / n;
        let norms: Vec<f64> = rows.iter().map(|r| r.persist_norm(1)).collect();
        let lo = norms.iter().cloned().fold(f64::MAX, f64::min);
        let hi = norms.iter().cloned().fold(f64::MIN, f64::max);
        let cholesky = rows
            .iter()
            .find(|r| r.workload == "cholesky")
            .map_or("(not run)".to_string(), |c| {
                format!("{:+.1}% / {:+.1}%", pct(c.speedup(1)), pct(c.speedup(2)))
            });
        [
            format!("{:+.1}%", pct(mean(&|r| r.speedup(1)))),
            format!("{:+.1}%", pct(mean(&|r| r.speedup(2)))),
            format!("{lo:.2}-{hi:.2} (mean {:.2})", mean(&|r| r.persist_norm(1))),
            cholesky,
        ]
    };
    let ours = column(rows);
    let strict = (!strict_rows.is_empty()).then(|| column(strict_rows));
    let _ = writeln!(
        s,
        "\n## Paper vs this run\n\n| metric | paper | this run (loop checkpoints) |{}\n|---|---|---|{}",
        if strict.is_some() { " this run (fence after every flush) |" } else { "" },
        if strict.is_some() { "---|" } else { "" }
    );
    let paper = [
        ("mean speedup pb", "+12%"),
        ("mean speedup pb-rf", "+15%"),
        ("persist latency pb / nopb", "0.44-0.57"),
        ("cholesky speedup pb / pb-rf", "-3% / -13%"),
    ];
    for (i, (metric, reference)) in paper.iter().enumerate() {
        let extra = strict
            .as_ref()
            .map_or(String::new(), |c| format!(" {} |", c[i]));
        let _ = writeln!(s, "| {metric} | {reference} | {} |{extra}", ours[i]);
    }
}

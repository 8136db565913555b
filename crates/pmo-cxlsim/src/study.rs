//! The paper's study, reproduced on our model: runs the experiments behind Figs. 1, 5, 6, 7 and
//! 8 and writes CSV tables, SVG figures and a Markdown summary.
//!
//! Owns [`StudyConfig`], [`run_study`] and the figure drawing. Every run is one deterministic
//! simulation (`sim::simulate`); a run's checker violations fail the study, so the figures are
//! only ever drawn from runs that kept every correctness criterion.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

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

/// Run the study and write `fig1_hops.csv/svg`, `fig5_speedup`, `fig6_latency`, `fig7_pb_rates`,
/// `fig8_pb_entries` and `summary.md` into `config.out`.
pub fn run_study(config: &StudyConfig) -> Result<StudyResult> {
    let started = Instant::now();
    std::fs::create_dir_all(&config.out).map_err(|e| CxlsimError::io(&config.out, e))?;
    let workloads: Vec<&str> = config.workloads.iter().map(String::as_str).collect();
    for w in &workloads {
        if !WORKLOADS.contains(w) {
            return Err(CxlsimError::UnknownWorkload(w.to_string()));
        }
    }
    let fig1_workload = if workloads.contains(&"fft") {
        "fft"
    } else {
        workloads.first().copied().unwrap_or("fft")
    };
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
    bar_chart(
        &out.join("fig1_hops.svg"),
        "Fig. 1: persist latency vs switch hops (normalised to hops=0)",
        &fig1
            .iter()
            .map(|r| format!("n={}", r.0))
            .collect::<Vec<_>>(),
        &[
            (
                "nopb".into(),
                fig1.iter().map(|r| ratio(r.1, base1)).collect(),
            ),
            (
                "pb".into(),
                fig1.iter().map(|r| ratio(r.2, base1)).collect(),
            ),
        ],
        "normalised persist latency",
    )?;
    if fig1_strict.len() == fig1.len() && !fig1.is_empty() {
        bar_chart(
            &out.join("fig1_hops_strict.svg"),
            "Fig. 1, fence after every flush (normalised to nopb at hops=0)",
            &fig1_strict
                .iter()
                .map(|r| format!("n={}", r.0))
                .collect::<Vec<_>>(),
            &[
                (
                    "nopb".into(),
                    fig1_strict
                        .iter()
                        .map(|r| ratio(r.1, base_strict))
                        .collect(),
                ),
                (
                    "pb".into(),
                    fig1_strict
                        .iter()
                        .map(|r| ratio(r.2, base_strict))
                        .collect(),
                ),
            ],
            "normalised persist latency",
        )?;
    }

    write_file(&out.join("workloads.csv"), &workloads_csv(config, rows))?;
    if !strict_rows.is_empty() {
        write_file(
            &out.join("workloads_strict.csv"),
            &workloads_csv(config, strict_rows),
        )?;
    }
    let mut names: Vec<String> = rows.iter().map(|r| r.workload.clone()).collect();
    names.push("mean".into());
    let with_mean = |f: &dyn Fn(&WorkloadRow) -> f64| -> Vec<f64> {
        let mut v: Vec<f64> = rows.iter().map(f).collect();
        let mean = if v.is_empty() {
            0.0
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        };
        v.push(mean);
        v
    };
    bar_chart(
        &out.join("fig5_speedup.svg"),
        "Fig. 5: speedup over nopb",
        &names,
        &[
            ("pb".into(), with_mean(&|r| r.speedup(1))),
            ("pb-rf".into(), with_mean(&|r| r.speedup(2))),
        ],
        "speedup (nopb = 1)",
    )?;
    if !strict_rows.is_empty() {
        let speedups = |s: usize| {
            let mut v: Vec<f64> = strict_rows.iter().map(|r| r.speedup(s)).collect();
            let mean = v.iter().sum::<f64>() / v.len() as f64;
            v.push(mean);
            v
        };
        let mut strict_names: Vec<String> =
            strict_rows.iter().map(|r| r.workload.clone()).collect();
        strict_names.push("mean".into());
        bar_chart(
            &out.join("fig5_speedup_strict.svg"),
            "Fig. 5 ablation: speedup over nopb, fence after every flush",
            &strict_names,
            &[("pb".into(), speedups(1)), ("pb-rf".into(), speedups(2))],
            "speedup (nopb = 1)",
        )?;
    }
    bar_chart(
        &out.join("fig6a_persist_latency.svg"),
        "Fig. 6a: persist latency normalised to nopb",
        &names,
        &[
            ("pb".into(), with_mean(&|r| r.persist_norm(1))),
            ("pb-rf".into(), with_mean(&|r| r.persist_norm(2))),
        ],
        "persist latency / nopb",
    )?;
    bar_chart(
        &out.join("fig6b_read_latency.svg"),
        "Fig. 6b: read latency (from LLC) normalised to nopb",
        &names,
        &[
            ("pb".into(), with_mean(&|r| r.read_norm(1))),
            ("pb-rf".into(), with_mean(&|r| r.read_norm(2))),
        ],
        "read latency / nopb",
    )?;
    bar_chart(
        &out.join("fig7_pb_rates.svg"),
        "Fig. 7: pb-rf read-hit and write-coalescing rates",
        &names,
        &[
            ("read hit".into(), with_mean(&|r| r.runs[2].read_hit_rate())),
            (
                "write coalescing".into(),
                with_mean(&|r| r.runs[2].coalesce_rate()),
            ),
        ],
        "fraction",
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
        if points.is_empty() {
            continue;
        }
        let mut series = Vec::new();
        for r in rows {
            let pts: Vec<(f64, f64)> = points
                .iter()
                .filter(|f| f.0 == r.workload)
                .map(|f| (f.1 as f64, f.2))
                .collect();
            series.push((format!("{} pb", r.workload), pts));
            let pts: Vec<(f64, f64)> = points
                .iter()
                .filter(|f| f.0 == r.workload)
                .map(|f| (f.1 as f64, f.3))
                .collect();
            series.push((format!("{} pb-rf", r.workload), pts));
        }
        line_chart(&out.join(file), title, &series, "PB entries", "speedup")?;
    }
    Ok(())
}

fn plot_err(path: &Path, e: impl std::fmt::Display) -> CxlsimError {
    CxlsimError::Plot {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

const COLOURS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// Grouped bar chart: one group per category, one bar per series.
fn bar_chart(
    path: &Path,
    title: &str,
    categories: &[String],
    series: &[(String, Vec<f64>)],
    y_label: &str,
) -> Result<()> {
    let y_max = series
        .iter()
        .flat_map(|s| s.1.iter().copied())
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.15;
    crate::fonts::register();
    let root = SVGBackend::new(path, (960, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| plot_err(path, e))?;
    let n = categories.len().max(1);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..n as f64, 0f64..y_max)
        .map_err(|e| plot_err(path, e))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc(y_label)
        .draw()
        .map_err(|e| plot_err(path, e))?;
    let k = series.len().max(1) as f64;
    let width = 0.8 / k;
    for (si, (name, values)) in series.iter().enumerate() {
        let colour = COLOURS[si % COLOURS.len()];
        chart
            .draw_series(values.iter().enumerate().map(|(ci, &v)| {
                let x0 = ci as f64 + 0.1 + si as f64 * width;
                Rectangle::new([(x0, 0.0), (x0 + width * 0.95, v)], colour.filled())
            }))
            .map_err(|e| plot_err(path, e))?
            .label(name.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], colour.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(|e| plot_err(path, e))?;
    // Category names centred under each group (the numeric axis has no labels of its own).
    let label_style =
        TextStyle::from(("sans-serif", 13).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
    for (i, name) in categories.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(i as f64 + 0.5, 0.0));
        root.draw(&Text::new(name.clone(), (x, y + 8), label_style.clone()))
            .map_err(|e| plot_err(path, e))?;
    }
    root.present().map_err(|e| plot_err(path, e))?;
    Ok(())
}

/// Line chart of (x, y) series.
fn line_chart(
    path: &Path,
    title: &str,
    series: &[(String, Vec<(f64, f64)>)],
    x_label: &str,
    y_label: &str,
) -> Result<()> {
    let pts = series.iter().flat_map(|s| s.1.iter().copied());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for (x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if x0 > x1 {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    let pad = ((y1 - y0) * 0.1).max(0.01);
    crate::fonts::register();
    let root = SVGBackend::new(path, (960, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| plot_err(path, e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x0..x1.max(x0 + 1.0), (y0 - pad)..(y1 + pad))
        .map_err(|e| plot_err(path, e))?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .draw()
        .map_err(|e| plot_err(path, e))?;
    // Series come in pairs (pb, pb-rf) sharing a colour: pb solid, pb-rf with round markers.
    for (si, (name, values)) in series.iter().enumerate() {
        let colour = COLOURS[(si / 2) % COLOURS.len()];
        let marked = si % 2 == 1;
        let line = LineSeries::new(values.iter().copied(), colour.stroke_width(2));
        let line = if marked { line.point_size(4) } else { line };
        chart
            .draw_series(line)
            .map_err(|e| plot_err(path, e))?
            .label(name.clone())
            .legend(move |(x, y)| {
                let radius = if marked { 3 } else { 0 };
                EmptyElement::at((x, y))
                    + PathElement::new(vec![(0, 0), (16, 0)], colour.stroke_width(2))
                    + Circle::new((8, 0), radius, colour.filled())
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(|e| plot_err(path, e))?;
    root.present().map_err(|e| plot_err(path, e))?;
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

//! Command-line surface, embeddable as `pmo cxlsim ...` (the lead's `pmo` binary) and wrapped
//! by the standalone `pmo-cxlsim` binary.
//!
//! Owns [`Command`], [`ParamArgs`] and [`run`]. Exit codes: 0 ok, 1 usage or user error
//! (one line on stderr), 2 checker violation.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::checker::{crash_points, run_checked};
use crate::config::{Fault, Params, Scheme};
use crate::error::{CxlsimError, Result};
use crate::kernels::{generate, Size, WORKLOADS};
use crate::sim::{Simulator, Stats};
use crate::study::{run_study, StudyConfig};
use crate::trace::Trace;

const SCHEMES: [&str; 3] = ["nopb", "pb", "pb-rf"];
const FAULTS: [&str; 5] = [
    "none",
    "empty-before-ack",
    "read-bypass-drain",
    "ack-behind-requests",
    "early-ack",
];
const SIZES: [&str; 3] = ["small", "quick", "full"];

/// Every model parameter (defaults: the paper's Table I; see docs/cxlsim.md for sources).
#[derive(Debug, Clone, Args)]
pub struct ParamArgs {
    /// Host cores (Table I: 8)
    #[arg(long, default_value_t = 8)]
    pub cores: usize,
    /// Core clock in GHz (Table I: 4)
    #[arg(long, default_value_t = 4.0)]
    pub core_ghz: f64,
    /// Private L1 bytes (Table I: 32 KiB)
    #[arg(long, default_value_t = 32768)]
    pub l1_bytes: usize,
    /// L1 ways (Table I: 8)
    #[arg(long, default_value_t = 8)]
    pub l1_ways: usize,
    /// L1 hit cycles (Table I: 1)
    #[arg(long, default_value_t = 1)]
    pub l1_hit_cycles: u64,
    /// Shared inclusive L2 bytes (Table I: 256 KiB)
    #[arg(long, default_value_t = 262144)]
    pub l2_bytes: usize,
    /// L2 ways (Table I: 8)
    #[arg(long, default_value_t = 8)]
    pub l2_ways: usize,
    /// L2 hit cycles (Table I: 10)
    #[arg(long, default_value_t = 10)]
    pub l2_hit_cycles: u64,
    /// L2 read misses a core overlaps before stalling (8 approximates Table I's OoO cores; 1 = in-order blocking core)
    #[arg(long, default_value_t = 8)]
    pub miss_window: usize,
    /// Outstanding fabric requests per core (MSHRs + write-back buffer)
    #[arg(long, default_value_t = 16)]
    pub outstanding: usize,
    /// CXL switches between host and PM (0 = local PM)
    #[arg(long, default_value_t = 1)]
    pub hops: usize,
    /// Pipeline stages per switch (paper: 4)
    #[arg(long, default_value_t = 4)]
    pub switch_stages: u64,
    /// Latency of one switch stage in ns (4 x 8.75 = 35 ns per direction, 70 ns round trip: Pond)
    #[arg(long, default_value_t = 8.75)]
    pub switch_stage_ns: f64,
    /// One-way latency of each link/port in ns
    #[arg(long, default_value_t = 12.5)]
    pub link_ns: f64,
    /// Link bandwidth per direction in GB/s (Table I: x16 x 30 GB/s)
    #[arg(long, default_value_t = 480.0)]
    pub link_gbps: f64,
    /// Flit bytes (Table I: 68)
    #[arg(long, default_value_t = 68)]
    pub flit_bytes: u64,
    /// PM read latency ns (Table I: 100)
    #[arg(long, default_value_t = 100.0)]
    pub pm_read_ns: f64,
    /// PM write latency ns (Table I: 200)
    #[arg(long, default_value_t = 200.0)]
    pub pm_write_ns: f64,
    /// PM banks (line-interleaved, FIFO each; gem5 NVM_2400_1x64: 16)
    #[arg(long, default_value_t = 16)]
    pub pm_banks: usize,
    /// PM controller write-pending queue entries, persistent (ADR); writes are acknowledged on
    /// acceptance as in gem5 (0 = acknowledge after the media write)
    #[arg(long, default_value_t = 128)]
    pub pm_wpq: usize,
    /// PM controller latency per response in ns (gem5: 10 frontend + 10 backend)
    #[arg(long, default_value_t = 20.0)]
    pub pm_ctrl_ns: f64,
    /// Serve each PM bank in arrival order instead of reads first (gem5 MemCtrl: reads first)
    #[arg(long)]
    pub pm_fifo: bool,
    /// Reads first: force writes above this write-queue fraction (gem5: 0.85)
    #[arg(long, default_value_t = 0.85)]
    pub pm_wpq_high: f64,
    /// Reads first: an idle bank writes only above this write-queue fraction (gem5: 0.5)
    #[arg(long, default_value_t = 0.5)]
    pub pm_wpq_low: f64,
    /// Persist-buffer entries (Table I: 16)
    #[arg(long, default_value_t = 16)]
    pub pb_entries: usize,
    /// PB tag access ns (default: CACTI-like table by entries; 0.388 at 16)
    #[arg(long)]
    pub pb_tag_ns: Option<f64>,
    /// PB data access ns (Table I: 0.785)
    #[arg(long, default_value_t = 0.785)]
    pub pb_data_ns: f64,
    /// pb-rf: start draining at this Dirty fraction (paper: 0.8)
    #[arg(long, default_value_t = 0.8)]
    pub rf_high: f64,
    /// pb-rf: drain down to this Dirty fraction (paper: 0.6)
    #[arg(long, default_value_t = 0.6)]
    pub rf_low: f64,
    /// Start each core after a seeded random delay of up to this many cycles
    #[arg(long, default_value_t = 0)]
    pub start_jitter_cycles: u64,
    /// Seed of the start delays
    #[arg(long, default_value_t = 0)]
    pub jitter_seed: u64,
    /// Abort a run after this many events
    #[arg(long, default_value_t = 2_000_000_000)]
    pub event_budget: u64,
}

impl ParamArgs {
    /// Build validated parameters for a scheme and fault.
    pub fn params(&self, scheme: Scheme, fault: Fault) -> Result<Params> {
        let p = Params {
            scheme,
            fault,
            cores: self.cores,
            core_ghz: self.core_ghz,
            l1_bytes: self.l1_bytes,
            l1_ways: self.l1_ways,
            l1_hit_cycles: self.l1_hit_cycles,
            l2_bytes: self.l2_bytes,
            l2_ways: self.l2_ways,
            l2_hit_cycles: self.l2_hit_cycles,
            miss_window: self.miss_window,
            outstanding_per_core: self.outstanding,
            hops: self.hops,
            switch_stages: self.switch_stages,
            switch_stage_ns: self.switch_stage_ns,
            link_ns: self.link_ns,
            link_gbps: self.link_gbps,
            flit_bytes: self.flit_bytes,
            pm_read_ns: self.pm_read_ns,
            pm_write_ns: self.pm_write_ns,
            pm_banks: self.pm_banks,
            pm_wpq_entries: self.pm_wpq,
            pm_ctrl_ns: self.pm_ctrl_ns,
            pm_reads_first: !self.pm_fifo,
            pm_wpq_high: self.pm_wpq_high,
            pm_wpq_low: self.pm_wpq_low,
            pb_entries: self.pb_entries,
            pb_tag_ns: self.pb_tag_ns,
            pb_data_ns: self.pb_data_ns,
            rf_drain_high: self.rf_high,
            rf_drain_low: self.rf_low,
            start_jitter_cycles: self.start_jitter_cycles,
            jitter_seed: self.jitter_seed,
            event_budget: self.event_budget,
        };
        p.validate()?;
        Ok(p)
    }
}

/// Where a command's trace comes from.
#[derive(Debug, Clone, Args)]
pub struct TraceArgs {
    /// Read this trace file (format: docs/cxlsim.md) instead of generating a workload
    #[arg(long, conflicts_with = "workload")]
    pub trace: Option<PathBuf>,
    /// Generated workload: fft, lu-cont, lu-noncont, cholesky, radix, ocean, raytrace
    #[arg(long)]
    pub workload: Option<String>,
    /// Workload size
    #[arg(long, default_value = "quick", value_parser = SIZES)]
    pub size: String,
    /// Put a fence after every flush (strict persists, paper Fig. 2a) instead of one fence per
    /// checkpoint
    #[arg(long)]
    pub fence_each_flush: bool,
}

/// `pmo cxlsim` subcommands. Schemes: nopb (volatile switch), pb (persist buffer, drain at
/// once), pb-rf (persist buffer with read forwarding, drain 80% -> 60%).
#[derive(Debug, Clone, Subcommand)]
pub enum Command {
    /// Simulate one trace under one or more schemes and print the statistics
    Run {
        /// Schemes to run: nopb, pb, pb-rf (repeat or comma-separate)
        #[arg(long, value_delimiter = ',', default_value = "nopb,pb,pb-rf", value_parser = SCHEMES)]
        scheme: Vec<String>,
        /// Trace source
        #[command(flatten)]
        source: TraceArgs,
        /// Model parameters
        #[command(flatten)]
        params: ParamArgs,
    },
    /// Reproduce the paper's study (Figs. 1, 5, 6, 7, 8) under the schemes nopb (volatile
    /// switch), pb (persist buffer, drain at once) and pb-rf (read forwarding, drain 80% -> 60%),
    /// as CSV, figures (SVG and PNG) and Markdown
    Study {
        /// Reduced study: smaller inputs, 3 repeats (seconds here; the default takes well under a minute)
        #[arg(long)]
        quick: bool,
        /// Output directory
        #[arg(long, default_value = "cxlsim-study")]
        out: PathBuf,
        /// Workloads (comma-separated; default all seven)
        #[arg(long, value_delimiter = ',')]
        workloads: Vec<String>,
        /// Hide the progress bar
        #[arg(long)]
        no_progress: bool,
        /// Runs per configuration with seeded core start delays (default: 5, --quick 3)
        #[arg(long)]
        repeats: Option<usize>,
        /// Largest seeded core start delay of a repeat, in cycles (used when repeats > 1)
        #[arg(long, default_value_t = 4000)]
        jitter_cycles: u64,
        /// Hop counts of Fig. 1 (comma-separated)
        #[arg(long, value_delimiter = ',', default_value = "0,1,2,3,4")]
        fig1_hops: Vec<usize>,
        /// PB entry counts of Fig. 8 (comma-separated)
        #[arg(long, value_delimiter = ',', default_value = "8,16,32,64")]
        fig8_entries: Vec<usize>,
        /// Skip the ablation that reruns Figs. 5-7 with a fence after every flush
        #[arg(long)]
        no_strict_ablation: bool,
        /// Model parameters (--hops and --pb-entries set the base system of Figs. 5-7)
        #[command(flatten)]
        params: ParamArgs,
    },
    /// Check the correctness criteria (write order, write-read order, crash consistency) at
    /// seeded crash points; exit 2 on any violation
    Check {
        /// Schemes to check: nopb, pb, pb-rf
        #[arg(long, value_delimiter = ',', default_value = "nopb,pb,pb-rf", value_parser = SCHEMES)]
        scheme: Vec<String>,
        /// Crash points per (workload, scheme)
        #[arg(long, default_value_t = 1000)]
        crash_points: usize,
        /// Real crash-and-recover runs per (workload, scheme), on top of the crash points
        #[arg(long, default_value_t = 3)]
        real_crashes: usize,
        /// Seed of the crash points
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Deliberately broken variant: none, empty-before-ack, read-bypass-drain, ack-behind-requests,
        /// early-ack
        #[arg(long, default_value = "none", value_parser = FAULTS)]
        fault: String,
        /// Trace source
        #[command(flatten)]
        source: TraceArgs,
        /// Model parameters
        #[command(flatten)]
        params: ParamArgs,
    },
    /// Write a generated workload trace to a file (or stdout with `-`)
    Trace {
        /// Workload: fft, lu-cont, lu-noncont, cholesky, radix, ocean, raytrace
        #[arg(long)]
        workload: String,
        /// Workload size
        #[arg(long, default_value = "quick", value_parser = SIZES)]
        size: String,
        /// Threads
        #[arg(long, default_value_t = 8)]
        threads: usize,
        /// Output file (`-` for stdout)
        #[arg(long, default_value = "-")]
        out: PathBuf,
    },
}

fn parse_size(text: &str) -> Size {
    match text {
        "small" => Size::Small,
        "full" => Size::Full,
        _ => Size::Quick,
    }
}

fn load_traces(source: &TraceArgs, threads: usize) -> Result<Vec<Trace>> {
    let traces: Vec<Trace> = if let Some(path) = &source.trace {
        vec![Trace::read_file(path)?]
    } else {
        let size = parse_size(&source.size);
        match &source.workload {
            Some(w) => vec![generate(w, threads, size)?],
            None => WORKLOADS
                .iter()
                .map(|w| generate(w, threads, size))
                .collect::<Result<_>>()?,
        }
    };
    Ok(if source.fence_each_flush {
        traces
            .iter()
            .map(Trace::with_fence_after_each_flush)
            .collect()
    } else {
        traces
    })
}

fn schemes(names: &[String]) -> Result<Vec<Scheme>> {
    names.iter().map(|s| Scheme::parse(s)).collect()
}

fn print_stats_header() {
    println!(
        "{:<11} {:>6} {:>4} {:>12} {:>10} {:>10} {:>9} {:>9} {:>8} {:>8} {:>10}",
        "workload",
        "scheme",
        "hops",
        "sim_us",
        "persist_ns",
        "read_ns",
        "persists",
        "reads",
        "pb_hit",
        "coalesce",
        "events"
    );
}

fn print_stats(s: &Stats) {
    println!(
        "{:<11} {:>6} {:>4} {:>12.3} {:>10.1} {:>10.1} {:>9} {:>9} {:>7.1}% {:>7.1}% {:>10}",
        s.workload,
        s.scheme.map_or("-", Scheme::name),
        s.hops,
        s.sim_time_us(),
        s.persist_latency_ns(),
        s.read_latency_ns(),
        s.persists,
        s.fabric_reads,
        100.0 * s.read_hit_rate(),
        100.0 * s.coalesce_rate(),
        s.events
    );
}

fn execute(cmd: Command) -> Result<i32> {
    match cmd {
        Command::Run {
            scheme,
            source,
            params,
        } => {
            let runs: Vec<Params> = schemes(&scheme)?
                .into_iter()
                .map(|s| params.params(s, Fault::None))
                .collect::<Result<_>>()?;
            let traces = load_traces(&source, params.cores)?;
            print_stats_header();
            let mut violations = 0;
            for trace in &traces {
                for p in &runs {
                    let stats = crate::sim::simulate(p, trace)?;
                    violations += stats.violation_count;
                    print_stats(&stats);
                }
            }
            Ok(if violations > 0 { 2 } else { 0 })
        }
        Command::Study {
            quick,
            out,
            workloads,
            no_progress,
            repeats,
            jitter_cycles,
            fig1_hops,
            fig8_entries,
            no_strict_ablation,
            params,
        } => {
            let mut config = StudyConfig::new(out.clone(), quick);
            config.base = params.params(Scheme::Pb, Fault::None)?;
            config.progress = !no_progress;
            if let Some(r) = repeats {
                config.repeats = r.clamp(1, 100);
            }
            config.start_jitter_cycles = jitter_cycles;
            config.hops = fig1_hops;
            config.pb_entries = fig8_entries;
            config.strict_ablation = !no_strict_ablation;
            if !workloads.is_empty() {
                config.workloads = workloads;
            }
            let result = run_study(&config)?;
            println!("{}", result.summary);
            println!(
                "wrote CSV, figures (SVG and PNG) and summary.md to {}",
                out.display()
            );
            Ok(0)
        }
        Command::Check {
            scheme,
            crash_points: count,
            real_crashes,
            seed,
            fault,
            source,
            params,
        } => {
            let fault = Fault::parse(&fault)?;
            let traces = load_traces(&source, params.cores)?;
            let mut total = 0u64;
            println!(
                "{:<11} {:>6} {:>12} {:>13} {:>12} {:>10}",
                "workload", "scheme", "reads_chk", "crash_points", "real_crash", "violations"
            );
            for trace in &traces {
                for s in schemes(&scheme)? {
                    let p = params.params(s, fault)?;
                    let (stats, mut violations) = match run_checked(&p, trace, count, seed) {
                        Ok(stats) => {
                            let v: Vec<String> =
                                stats.violations.iter().map(ToString::to_string).collect();
                            (Some(stats), v)
                        }
                        Err(e @ CxlsimError::Deadlock { .. }) => (None, vec![e.to_string()]),
                        Err(e) => return Err(e),
                    };
                    let mut vcount = stats
                        .as_ref()
                        .map_or(violations.len() as u64, |s| s.violation_count);
                    if let Some(st) = &stats {
                        for point in crash_points(seed ^ 0x5EED, real_crashes, st.events) {
                            let outcome = Simulator::new(&p, trace)?.run_then_crash(point)?;
                            vcount += outcome.violation_count;
                            violations.extend(outcome.violations.iter().map(ToString::to_string));
                        }
                    }
                    total += vcount;
                    println!(
                        "{:<11} {:>6} {:>12} {:>13} {:>12} {:>10}",
                        trace.name,
                        s.name(),
                        stats.as_ref().map_or(0, |s| s.reads_checked),
                        stats.as_ref().map_or(0, |s| s.crash_points_checked),
                        real_crashes,
                        vcount
                    );
                    for v in violations.iter().take(3) {
                        println!("    {v}");
                    }
                }
            }
            println!(
                "{}",
                if total == 0 {
                    "no violations".to_string()
                } else {
                    format!("{total} violations")
                }
            );
            Ok(if total > 0 { 2 } else { 0 })
        }
        Command::Trace {
            workload,
            size,
            threads,
            out,
        } => {
            let trace = generate(&workload, threads, parse_size(&size))?;
            if out.as_os_str() == "-" {
                let stdout = std::io::stdout();
                trace
                    .write_to(stdout.lock())
                    .map_err(|e| CxlsimError::io("-", e))?;
            } else {
                trace.write_file(&out)?;
                eprintln!(
                    "wrote {} ops of {} threads to {}",
                    trace.op_count(),
                    trace.threads.len(),
                    out.display()
                );
            }
            Ok(0)
        }
    }
}

/// Run a subcommand; returns the process exit code (0 ok, 1 error, 2 checker violation).
pub fn run(cmd: Command) -> i32 {
    match execute(cmd) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("pmo cxlsim: {e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[derive(Parser)]
    struct Wrapper {
        #[command(subcommand)]
        command: Command,
    }

    fn parse(args: &[&str]) -> Command {
        let mut argv = vec!["pmo-cxlsim"];
        argv.extend_from_slice(args);
        Wrapper::try_parse_from(argv)
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
            .command
    }

    #[test]
    fn command_definition_is_consistent() {
        Wrapper::command().debug_assert();
        assert!(Wrapper::try_parse_from(["x", "run", "--scheme", "bogus"]).is_err());
        assert!(Wrapper::try_parse_from(["x", "check", "--fault", "bogus"]).is_err());
    }

    #[test]
    fn exit_codes_follow_the_contract() {
        let ok = parse(&["run", "--workload", "fft", "--size", "small", "--pm-fifo"]);
        assert_eq!(run(ok), 0);
        let bad = parse(&[
            "run",
            "--workload",
            "fft",
            "--size",
            "small",
            "--pb-entries",
            "1",
        ]);
        assert_eq!(run(bad), 1);
        let clean = parse(&[
            "check",
            "--workload",
            "ocean",
            "--size",
            "small",
            "--crash-points",
            "50",
            "--real-crashes",
            "1",
            "--fence-each-flush",
        ]);
        assert_eq!(run(clean), 0);
        let broken = parse(&[
            "check",
            "--workload",
            "ocean",
            "--size",
            "small",
            "--scheme",
            "pb",
            "--fault",
            "empty-before-ack",
            "--real-crashes",
            "0",
        ]);
        assert_eq!(run(broken), 2);
    }

    #[test]
    fn study_flags_reach_the_study() {
        let dir = std::env::temp_dir().join(format!("pmo-cxlsim-cli-{}", std::process::id()));
        let dir_text = dir.to_string_lossy().into_owned();
        let cmd = parse(&[
            "study",
            "--quick",
            "--out",
            &dir_text,
            "--workloads",
            "raytrace",
            "--repeats",
            "1",
            "--fig1-hops",
            "0,1",
            "--fig8-entries",
            "16",
            "--no-strict-ablation",
            "--no-progress",
        ]);
        assert_eq!(run(cmd), 0);
        let fig1 = std::fs::read_to_string(dir.join("fig1_hops.csv")).expect("fig1 csv");
        // Header plus one row per hop count, no fence-per-flush rows.
        assert_eq!(fig1.lines().count(), 3, "{fig1}");
        assert!(!dir.join("workloads_strict.csv").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}

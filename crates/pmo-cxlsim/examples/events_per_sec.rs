//! Speed benchmark: simulated events per second on one core, median of 5 repeats per workload
//! and scheme. Prints rates per wall second and per CPU second of this thread (from
//! /proc/thread-self/schedstat): on a shared machine the second is the one-core figure.
//! Run: `cargo run --release -p pmo-cxlsim --example events_per_sec [quick|full]`.

use std::time::Instant;

use pmo_cxlsim::kernels::{generate, Size, WORKLOADS};
use pmo_cxlsim::{simulate, Params, Scheme};

/// Nanoseconds this thread has run on a CPU (Linux schedstat), if available.
fn thread_cpu_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let size = match std::env::args().nth(1).as_deref() {
        Some("full") => Size::Full,
        _ => Size::Quick,
    };
    println!(
        "{:<11} {:>6} {:>10} {:>10} {:>9} {:>9} {:>12} {:>12}",
        "workload", "scheme", "ops", "events", "wall_ms", "cpu_ms", "events/s", "events/cpu-s"
    );
    let mut wall_rates = Vec::new();
    let mut cpu_rates = Vec::new();
    let (mut all_events, mut all_cpu_s) = (0u64, 0f64);
    for name in WORKLOADS {
        let trace = generate(name, 8, size)?;
        for scheme in Scheme::ALL {
            let params = Params {
                scheme,
                ..Params::default()
            };
            let mut walls = Vec::new();
            let mut cpus = Vec::new();
            let mut events = 0;
            let mut ops = 0;
            for _ in 0..5 {
                let cpu0 = thread_cpu_ns();
                let start = Instant::now();
                let stats = simulate(&params, &trace)?;
                let wall = start.elapsed().as_secs_f64();
                walls.push(wall);
                cpus.push(match (cpu0, thread_cpu_ns()) {
                    (Some(a), Some(b)) if b > a => (b - a) as f64 / 1e9,
                    _ => wall,
                });
                events = stats.events;
                ops = stats.ops;
            }
            let (wall, cpu) = (median(walls), median(cpus));
            wall_rates.push(events as f64 / wall);
            cpu_rates.push(events as f64 / cpu);
            all_events += events;
            all_cpu_s += cpu;
            println!(
                "{name:<11} {:>6} {ops:>10} {events:>10} {:>9.1} {:>9.1} {:>12.0} {:>12.0}",
                scheme.name(),
                wall * 1e3,
                cpu * 1e3,
                events as f64 / wall,
                events as f64 / cpu
            );
        }
    }
    println!(
        "median events/s: {:.2} M per wall second, {:.2} M per CPU second; all runs: {:.2} M events per CPU second",
        median(wall_rates) / 1e6,
        median(cpu_rates) / 1e6,
        all_events as f64 / all_cpu_s / 1e6
    );
    Ok(())
}

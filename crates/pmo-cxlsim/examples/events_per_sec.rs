//! Speed benchmark: simulated events per second on one core, median of 5 repeats per workload.
//! Run: `cargo run --release -p pmo-cxlsim --example events_per_sec [quick|full]`.

use std::time::Instant;

use pmo_cxlsim::kernels::{generate, Size, WORKLOADS};
use pmo_cxlsim::{simulate, Params, Scheme};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let size = match std::env::args().nth(1).as_deref() {
        Some("full") => Size::Full,
        _ => Size::Quick,
    };
    println!(
        "{:<11} {:>6} {:>10} {:>10} {:>9} {:>12}",
        "workload", "scheme", "ops", "events", "wall_ms", "events/s"
    );
    let mut rates = Vec::new();
    for name in WORKLOADS {
        let trace = generate(name, 8, size)?;
        for scheme in Scheme::ALL {
            let params = Params {
                scheme,
                ..Params::default()
            };
            let mut walls = Vec::new();
            let mut events = 0;
            let mut ops = 0;
            for _ in 0..5 {
                let start = Instant::now();
                let stats = simulate(&params, &trace)?;
                walls.push(start.elapsed().as_secs_f64());
                events = stats.events;
                ops = stats.ops;
            }
            walls.sort_by(f64::total_cmp);
            let wall = walls[walls.len() / 2];
            let rate = events as f64 / wall;
            rates.push(rate);
            println!(
                "{name:<11} {:>6} {ops:>10} {events:>10} {:>9.1} {:>12.0}",
                scheme.name(),
                wall * 1e3,
                rate
            );
        }
    }
    rates.sort_by(f64::total_cmp);
    println!(
        "median events/s over all runs: {:.2} M",
        rates[rates.len() / 2] / 1e6
    );
    Ok(())
}

//! One small attach session as Filebench pays it, per scheme: attach a 16 KiB (4-page) PMO,
//! read its 4 pages (`read`) or write them and psync (`write`), detach. Each of `THREADS`
//! threads works on its own PMO, `ROUNDS` sessions each. Prints CSV, one row per cell, times in
//! µs per session: medians of attach, touch (the 4 reads or writes, first-touch faults
//! included), psync, detach (the call), and the session total; the mean total; the Fig. 6
//! categories the store counted (attach stall, attach other, PF service) as means; and
//! `settle_us`, the wait at the end of the cell for background detaches still running
//! (the work a nonblocking detach moved off the caller), per session.
//!
//! ```text
//! cargo run --release -p pmo-store --example session_bench -- [ROUNDS] [THREADS...]
//! ```
//! `PMO_SESSION_SCHEMES=none,sp-id` limits the schemes.

use std::sync::Barrier;
use std::time::Instant;

use pmo_store::{AttachOptions, KdfParams, Perm, Pool, PoolOptions, Scheme};

const PAGE: usize = 4096;
const PAGES: usize = 4;

#[derive(Default, Clone, Copy)]
struct One {
    attach: f64,
    touch: f64,
    psync: f64,
    detach: f64,
    stall: f64,
    other: f64,
    pf: f64,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn us(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e6
}

fn session(pool: &Pool, name: &str, write: bool, round: usize) -> pmo_store::Result<One> {
    let opts = AttachOptions {
        relocate: true,
        wait: Some(std::time::Duration::from_secs(5)),
        ..Default::default()
    };
    let t = Instant::now();
    let a = pool.attach_with(name, Perm::Write, b"k", opts)?;
    let attach = us(t);
    let t = Instant::now();
    let mut psync = 0.0;
    if write {
        let buf = [round as u8; PAGE];
        for p in 0..PAGES {
            a.write_at(p * PAGE, &buf)?;
        }
    } else {
        let mut buf = [0u8; PAGE];
        for p in 0..PAGES {
            a.read_at(p * PAGE, &mut buf)?;
            std::hint::black_box(&buf);
        }
    }
    let touch = us(t);
    if write {
        let t = Instant::now();
        a.psync()?;
        psync = us(t);
    }
    let s = a.session_stats();
    let t = Instant::now();
    a.detach()?;
    Ok(One {
        attach,
        touch,
        psync,
        detach: us(t),
        stall: s.attach_stall_ns as f64 / 1e3,
        other: s.attach_other_ns as f64 / 1e3,
        pf: s.pf_ns as f64 / 1e3,
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    let rounds = args.first().copied().unwrap_or(500);
    let mut threads: Vec<usize> = args.iter().skip(1).copied().collect();
    if threads.is_empty() {
        threads = vec![1, 8];
    }
    let schemes: Vec<Scheme> = match std::env::var("PMO_SESSION_SCHEMES") {
        Ok(v) if !v.trim().is_empty() => v
            .split(',')
            .map(Scheme::from_name)
            .collect::<Result<_, _>>()?,
        _ => ["none", "secure", "sp", "sp-id", "wedi"]
            .iter()
            .map(|n| Scheme::from_name(n))
            .collect::<Result<_, _>>()?,
    };
    println!("scheme,mode,threads,sessions,attach_us,touch_us,psync_us,detach_us,total_us,mean_total_us,stall_us,attach_other_us,pf_us,settle_us");
    let path =
        std::path::Path::new("/dev/shm").join(format!("session-{}.pool", std::process::id()));
    for &scheme in &schemes {
        for write in [false, true] {
            for &n in &threads {
                let _ = std::fs::remove_file(&path);
                let pool = Pool::create(
                    &path,
                    64 << 20,
                    &PoolOptions {
                        kdf: KdfParams::INSECURE_FAST,
                        ns_capacity: Some(64),
                        ..Default::default()
                    },
                )?;
                for t in 0..n {
                    pool.pcreate_with(&format!("f{t}"), (PAGES * PAGE) as u64, b"k", Some(scheme))?;
                    // Written once, so reads decrypt real pages.
                    let a = pool.attach(&format!("f{t}"), Perm::Write, b"k")?;
                    a.write_at(0, &[7u8; PAGES * PAGE])?;
                    a.psync()?;
                }
                pmo_store::wait_for_background_detaches();
                let start = Barrier::new(n);
                let t0 = Instant::now();
                let all: Vec<One> = std::thread::scope(|s| {
                    let hs: Vec<_> = (0..n)
                        .map(|t| {
                            let (pool, start) = (&pool, &start);
                            s.spawn(move || {
                                let name = format!("f{t}");
                                start.wait();
                                (0..rounds)
                                    .map(|r| session(pool, &name, write, r))
                                    .collect::<pmo_store::Result<Vec<One>>>()
                            })
                        })
                        .collect();
                    hs.into_iter()
                        .flat_map(|h| h.join().expect("session thread").expect("session"))
                        .collect()
                });
                let t = Instant::now();
                pmo_store::wait_for_background_detaches();
                let settle = us(t) / all.len() as f64;
                let _wall = t0.elapsed();
                let col = |f: fn(&One) -> f64| all.iter().map(f).collect::<Vec<f64>>();
                let mean = |f: fn(&One) -> f64| all.iter().map(f).sum::<f64>() / all.len() as f64;
                let total = |o: &One| o.attach + o.touch + o.psync + o.detach;
                println!(
                    "{},{},{n},{},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{:.2}",
                    scheme.name(),
                    if write { "write" } else { "read" },
                    all.len(),
                    median(&mut col(|o| o.attach)),
                    median(&mut col(|o| o.touch)),
                    median(&mut col(|o| o.psync)),
                    median(&mut col(|o| o.detach)),
                    median(&mut col(total)),
                    mean(total),
                    mean(|o| o.stall),
                    mean(|o| o.other),
                    mean(|o| o.pf),
                    settle,
                );
                drop(pool);
                let _ = std::fs::remove_file(&path);
            }
        }
    }
    Ok(())
}

//! pcreate + pdestroy of a 16 KiB (4-page) member of a key family, in a loop, as `pmo bench
//! schemes`' small sessions time it; or with `PMO_LIFE_READER=1` a read-only attach + read of
//! its 4 pages + detach (a snapshot reader). For profiling (`perf record` around it). Prints
//! the median and the mean µs per pair (session) for each scheme.
//!
//! ```text
//! cargo run --release -p pmo-store --example life_bench -- [ROUNDS] [SCHEME...]
//! ```

use std::time::Instant;

use pmo_store::{KdfParams, Perm, Pool, PoolOptions, Scheme};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().map_or(Ok(20_000), |a| a.parse())?;
    let mut schemes: Vec<Scheme> = args
        .map(|a| Scheme::from_name(&a))
        .collect::<Result<_, _>>()?;
    if schemes.is_empty() {
        schemes = vec![Scheme::NONE, Scheme::SECURE];
    }
    for scheme in schemes {
        let path =
            std::path::Path::new("/dev/shm").join(format!("pmo-life-bench-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let pool = Pool::create(
            &path,
            64 << 20,
            &PoolOptions {
                kdf: KdfParams::INSECURE_FAST,
                scheme,
                ..Default::default()
            },
        )?;
        let family = pool.family_salt(b"life-bench");
        let reader = std::env::var("PMO_LIFE_READER").is_ok_and(|v| v == "1");
        let what = if reader {
            pool.pcreate("r", 16 << 10, b"key")?;
            "read-only session"
        } else {
            "pcreate+pdestroy"
        };
        let mut t = Vec::with_capacity(rounds);
        let mut buf = [0u8; 4096];
        for _ in 0..rounds {
            let s = Instant::now();
            if reader {
                let a = pool.attach("r", Perm::Read, b"key")?;
                for p in 0..4 {
                    a.read_at(p * 4096, &mut buf)?;
                }
                drop(a);
            } else {
                pool.pcreate_in_family("m", 16 << 10, b"key", None, &family)?;
                pool.pdestroy("m", b"key")?;
            }
            t.push(s.elapsed().as_secs_f64() * 1e6);
        }
        let mean = t.iter().sum::<f64>() / t.len() as f64;
        t.sort_by(f64::total_cmp);
        println!(
            "{:8} {what}: median {:.1} us, mean {:.1} us ({rounds} rounds)",
            scheme.name(),
            t[t.len() / 2],
            mean
        );
        drop(pool);
        std::fs::remove_file(&path)?;
    }
    Ok(())
}

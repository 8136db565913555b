//! A reader's refresh after k changed pages of a 16 MiB PMO, in a loop (issue 27): the writer
//! changes k scattered pages and psyncs, then the reader (a relocated mapping in this process)
//! refreshes and reads the changed pages back. For profiling (`perf record` around it). Prints
//! the median µs of the refresh alone and of refresh + refill for each scheme.
//!
//! ```text
//! cargo run --release -p pmo-store --example refresh_prof -- [ROUNDS] [K] [SCHEME...]
//! ```

use std::time::Instant;

use pmo_store::{AttachOptions, KdfParams, Perm, Pool, PoolOptions, Scheme};

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().map_or(Ok(5_000), |a| a.parse())?;
    let k: usize = args.next().map_or(Ok(1), |a| a.parse())?;
    let mut schemes: Vec<Scheme> = args
        .map(|a| Scheme::from_name(&a))
        .collect::<Result<_, _>>()?;
    if schemes.is_empty() {
        schemes = vec![Scheme::NONE, Scheme::SECURE];
    }
    const PAGE: usize = 4096;
    let size = 16usize << 20;
    let npages = size / PAGE;
    for scheme in schemes {
        let path = std::path::Path::new("/dev/shm")
            .join(format!("pmo-refresh-prof-{}", std::process::id()));
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
        pool.pcreate("r", size as u64, b"key")?;
        let w = pool.attach("r", Perm::Write, b"key")?;
        w.write_at(0, &vec![1u8; size])?;
        w.psync()?;
        let reader = pool.attach_with(
            "r",
            Perm::Read,
            b"key",
            AttachOptions {
                relocate: true,
                ..Default::default()
            },
        )?;
        let mut buf = vec![0u8; size];
        reader.read_at(0, &mut buf)?;
        let (mut refresh, mut total) = (Vec::new(), Vec::new());
        let mut b = [0u8; 8];
        for stamp in 1..=rounds as u64 {
            for i in 0..k {
                w.write_at(i * (npages / k.max(1)) * PAGE + 128, &stamp.to_le_bytes())?;
            }
            w.psync()?;
            let t = Instant::now();
            reader.refresh()?;
            let t1 = Instant::now();
            for i in 0..k {
                reader.read_at(i * (npages / k.max(1)) * PAGE + 128, &mut b)?;
                assert_eq!(u64::from_le_bytes(b), stamp, "a refreshed reader's page");
            }
            refresh.push((t1 - t).as_secs_f64() * 1e6);
            total.push(t.elapsed().as_secs_f64() * 1e6);
        }
        println!(
            "{scheme}: refresh after {k} changed pages {:.2} µs, with the refill {:.2} µs (median of {rounds})",
            median(&mut refresh),
            median(&mut total)
        );
        drop(reader);
        drop(w);
        drop(pool);
        let _ = std::fs::remove_file(&path);
    }
    Ok(())
}

//! A reader's refresh after k changed pages of a 16 MiB PMO, in a loop (issue 27): the writer
//! changes k scattered pages and psyncs, then the reader (a relocated mapping in this process)
//! refreshes and reads the changed pages back. For profiling (`perf record` around it). Prints
//! the median µs of the refresh alone and of refresh + refill for each scheme.
//!
//! With `PMO_KEEP_PROF=1` it times instead the writer's psync of 4 scattered pages that keeps
//! 4 versions for a reader refreshing every second psync (the `refreshing` case of `pmo bench
//! store`'s readers part).
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
        if std::env::var("PMO_KEEP_PROF").is_ok_and(|v| v == "1") {
            // Rounds alternate: a psync with no reader, and one keeping 4 versions for a
            // reader that refreshed before the psync before it.
            let h = pool.open_pmo("r", Perm::Read, b"key", None)?;
            let (mut alone, mut keeping) = (Vec::new(), Vec::new());
            let mut stamp = 0u64;
            let mut four = |w: &pmo_store::Attachment| -> Result<f64, Box<dyn std::error::Error>> {
                stamp += 1;
                for i in 0..4 {
                    w.write_at(i * (npages / 4) * PAGE + 64, &stamp.to_le_bytes())?;
                }
                let s = Instant::now();
                w.psync()?;
                Ok(s.elapsed().as_secs_f64() * 1e6)
            };
            for _ in 0..rounds {
                h.refresh()?;
                h.refreshed();
                four(&w)?;
                keeping.push(four(&w)?);
            }
            drop(h);
            for _ in 0..rounds {
                alone.push(four(&w)?);
            }
            println!(
                "{scheme}: psync of 4 pages {:.2} µs with no reader, {:.2} µs keeping 4 versions for one (medians of {rounds})",
                median(&mut alone),
                median(&mut keeping)
            );
            drop(reader);
            drop(w);
            drop(pool);
            let _ = std::fs::remove_file(&path);
            continue;
        }
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

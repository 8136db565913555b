//! The commit path of a small psync, for profiling: K scattered pages of a 64 MiB PMO written
//! and declared (declared tracking: no fault, no scan), then psync, repeated. Prints the psync
//! and its crypt share per commit, for a cold pass (every destination slot written for the
//! first time by this process) and a warm pass (the same pages again, each slot written before).
//!
//! ```text
//! cargo run --release -p pmo-store --example commit_prof -- [SCHEME] [K] [ROUNDS] [BYTES]
//! ```
//! BYTES: bytes written (and declared) per page, 8 by default.

use std::time::Instant;

use pmo_store::{AttachOptions, DirtyTracking, KdfParams, Perm, Pool, PoolOptions, Scheme};

const PAGE: usize = 4096;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let scheme = match args.first() {
        Some(s) => Scheme::from_name(s)?,
        None => Scheme::SECURE,
    };
    let k: usize = args.get(1).map_or(Ok(4), |a| a.parse())?;
    let rounds: usize = args.get(2).map_or(Ok(400), |a| a.parse())?;
    let bytes: usize = args.get(3).map_or(Ok(8), |a| a.parse())?;
    let size = 64u64 << 20;
    let npages = size as usize / PAGE;
    let path =
        std::path::Path::new("/dev/shm").join(format!("commit-prof-{}.pool", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let pool = Pool::create(
        &path,
        3 * size,
        &PoolOptions {
            kdf: KdfParams::INSECURE_FAST,
            preallocate: true,
            scheme,
            ..Default::default()
        },
    )?;
    pool.pcreate("obj", size, b"k")?;
    let a = pool.attach_with(
        "obj",
        Perm::Write,
        b"k",
        AttachOptions {
            populate: true,
            tracking: Some(DirtyTracking::Declared),
            ..Default::default()
        },
    )?;
    // A fixed pseudo-random walk over the pages; each round takes the next K of it.
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut next_page = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % npages as u64) as usize
    };
    let order: Vec<usize> = (0..rounds * k).map(|_| next_page()).collect();
    let run = |label: &str| -> Result<(), Box<dyn std::error::Error>> {
        let (mut total, mut crypt) = (Vec::new(), Vec::new());
        for (r, chunk) in order.chunks(k).enumerate() {
            for &p in chunk {
                let off = p * PAGE + (r * 64) % (PAGE - bytes + 1);
                for b in 0..bytes {
                    // SAFETY: inside the writable mapping (off + bytes <= size).
                    unsafe { a.addr().add(off + b).write_volatile(r as u8 ^ b as u8) };
                }
                a.declare(off, bytes)?;
            }
            let c0 = a.session_stats().psync_crypt_ns;
            let t = Instant::now();
            a.psync()?;
            total.push(t.elapsed().as_secs_f64() * 1e6);
            crypt.push((a.session_stats().psync_crypt_ns - c0) as f64 / 1e3);
        }
        let med = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        println!(
            "{label}: {} K={k} bytes/page={bytes}: psync {:.2} us (crypt {:.2} us), median of {rounds}",
            scheme.name(),
            med(&mut total),
            med(&mut crypt)
        );
        Ok(())
    };
    // Pass 1 writes each page's free slot for the first time (cold), pass 2 its other slot
    // (the one the PMO was attached with: cold too unless filled), pass 3 slots written before.
    run("pass 1 (cold slots)")?;
    run("pass 2")?;
    run("pass 3 (warm slots)")?;
    drop(a);
    drop(pool);
    let _ = std::fs::remove_file(&path);
    Ok(())
}

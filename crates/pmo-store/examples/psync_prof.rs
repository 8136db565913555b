//! psync per dirty page of a `secure` PMO, for profiling: the loop of `pmo bench schemes`'
//! per-page psync (16 MiB PMO, k = 256 contiguous dirty pages), repeated.
//!
//! ```text
//! cargo run --release -p pmo-store --example psync_prof -- [ROUNDS] [K] [STRIDE]
//! ```

use std::time::Instant;

use pmo_store::{AttachOptions, KdfParams, Perm, Pool, PoolOptions, Scheme};

const PAGE: usize = 4096;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    let rounds = args.first().copied().unwrap_or(200);
    let k = args.get(1).copied().unwrap_or(256);
    let stride = args.get(2).copied().unwrap_or(1);
    let size = 16u64 << 20;
    let path =
        std::path::Path::new("/dev/shm").join(format!("psync-prof-{}.pool", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let pool = Pool::create(
        &path,
        3 * size,
        &PoolOptions {
            kdf: KdfParams::INSECURE_FAST,
            preallocate: true,
            scheme: Scheme::SECURE,
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
            ..Default::default()
        },
    )?;
    let (mut total, mut commit) = (Vec::new(), Vec::new());
    for r in 0..rounds + 2 {
        for i in 0..k {
            // SAFETY: inside the writable mapping (k * stride pages <= 4096).
            unsafe { a.addr().add(i * stride * PAGE + 8).write_volatile(r as u8) };
        }
        let t = Instant::now();
        let st = a.psync()?;
        let el = t.elapsed().as_secs_f64() * 1e6 / k as f64;
        assert_eq!(st.pages, k as u64);
        if r >= 2 {
            total.push(el);
            commit.push(st.elapsed_ns as f64 / 1e3 / k as f64);
        }
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "psync per page {:.3} us, commit per page {:.3} us (median of {rounds})",
        med(&mut total),
        med(&mut commit)
    );
    drop(a);
    drop(pool);
    let _ = std::fs::remove_file(&path);
    Ok(())
}

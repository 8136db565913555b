//! Figures for `docs/lifecycle.md`: rekey time against PMO size (it must not grow with the
//! size), and export/import throughput against a plain `cp` of the pool file (which holds the PMO and
//! room for one import: `mib_per_s` of `cp` counts the whole file).
//! Prints CSV (`op,pmo_mib,kdf,median_us,mib_per_s`), medians over `REPEATS` runs, on /dev/shm.
//!
//! `cargo run --release -p pmo-store --example lifecycle_figures [MIB...]`

use std::time::Instant;

use pmo_store::{KdfParams, Perm, Pool, PoolOptions};

const REPEATS: usize = 5;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Sizes in MiB: the arguments, else 1, 16, 256.
    let mut sizes: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    if sizes.is_empty() {
        sizes = vec![1, 16, 256];
    }
    let dir = std::path::Path::new("/dev/shm").join(format!("pmo-life-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    println!("op,pmo_mib,kdf,median_us,mib_per_s");
    for mib in sizes {
        for (kdf_name, kdf) in [
            ("fast", KdfParams::INSECURE_FAST),
            ("default", KdfParams::DEFAULT),
        ] {
            let path = dir.join(format!("p{mib}-{kdf_name}.pool"));
            // One namespace capacity for every size: a namespace change rereads the namespace,
            // whose default capacity grows with the pool (up to 4096 slots, 4 MiB for both
            // copies), and that, not the PMO, is what a rekey's time would follow.
            let opts = PoolOptions {
                kdf,
                ns_capacity: Some(256),
                ..PoolOptions::default()
            };
            // Room for the PMO and one imported copy (each extent holds twice the data: shadow slots).
            let pool = Pool::create(&path, (5 * mib + 16) << 20, &opts)?;
            pool.pcreate("a", mib << 20, b"k0")?;
            {
                // Every page written, so the PMO is as large on the medium as it says.
                let h = pool.open_pmo("a", Perm::Write, b"k0", None)?;
                let chunk = vec![0xA7u8; 1 << 20];
                for i in 0..mib {
                    h.write_at(i << 20, &chunk)?;
                }
            }
            pmo_store::wait_for_background_detaches();
            let mut t = Vec::new();
            for r in 0..REPEATS {
                let (old, new) = (format!("k{r}"), format!("k{}", r + 1));
                let s = Instant::now();
                pool.rekey("a", old.as_bytes(), new.as_bytes())?;
                t.push(s.elapsed().as_secs_f64() * 1e6);
            }
            if std::env::var_os("LIFE_DEBUG").is_some() {
                eprintln!("{mib} {kdf_name} {t:?}");
            }
            println!("rekey,{mib},{kdf_name},{:.0},", median(t));
            if kdf_name == "fast" {
                let key = format!("k{REPEATS}");
                let (mut te, mut ti, mut tc) = (Vec::new(), Vec::new(), Vec::new());
                for r in 0..REPEATS {
                    let f = dir.join(format!("a{r}.pmox"));
                    let s = Instant::now();
                    pool.export("a", key.as_bytes(), &f, &mut |_, _| {})?;
                    te.push(s.elapsed().as_secs_f64());
                    let s = Instant::now();
                    pool.import(&f, Some(&format!("i{r}")), key.as_bytes(), &mut |_, _| {})?;
                    ti.push(s.elapsed().as_secs_f64());
                    pool.pdestroy(&format!("i{r}"), key.as_bytes())?;
                    std::fs::remove_file(&f)?;
                    let c = dir.join("copy.pool");
                    let s = Instant::now();
                    let st = std::process::Command::new("cp")
                        .arg(&path)
                        .arg(&c)
                        .status()?;
                    tc.push(s.elapsed().as_secs_f64());
                    assert!(st.success());
                    std::fs::remove_file(&c)?;
                }
                let pool_mib = (5 * mib + 16) as f64;
                let (e, i, c) = (median(te), median(ti), median(tc));
                println!(
                    "export,{mib},{kdf_name},{:.0},{:.0}",
                    e * 1e6,
                    mib as f64 / e
                );
                println!(
                    "import,{mib},{kdf_name},{:.0},{:.0}",
                    i * 1e6,
                    mib as f64 / i
                );
                println!("cp_pool_file,{mib},-,{:.0},{:.0}", c * 1e6, pool_mib / c);
            }
            drop(pool);
            std::fs::remove_file(&path)?;
        }
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

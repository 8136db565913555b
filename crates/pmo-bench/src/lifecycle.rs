//! `pmo bench lifecycle`: a PMO's life after pcreate (`docs/lifecycle.md`). Rekey time against
//! the PMO's size (it must not grow with it), and the throughput of a snapshot (to a new PMO,
//! idle and under a writer that keeps psyncing), of an export (a snapshot to a file) and of
//! an import, against a plain `cp` of the pool file and against LMDB's `mdb_copy` of an LMDB
//! environment holding as many bytes (Debian's `lmdb-utils`; skipped when `mdb_copy` or
//! `mdb_load` is missing). Everything on one directory (default /dev/shm); each figure is the
//! median of the repeats, with min and max kept.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use pmo_store::{KdfParams, Perm, Pool, PoolOptions, Scheme};

use crate::plot::{self, LineChart, Series};
use crate::{BenchError, Records};

const BENCH: &str = "lifecycle";

/// A file removed on drop.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct LifecycleBenchOptions {
    /// PMO sizes in MiB.
    pub sizes_mib: Vec<u64>,
    /// Samples per cell.
    pub repeats: usize,
    /// Where pools, export files and LMDB environments go.
    pub dir: PathBuf,
    /// The PMOs' scheme.
    pub scheme: Scheme,
}

impl LifecycleBenchOptions {
    /// Defaults: 1, 16, 64 and 256 MiB, 5 repeats (`quick`: 1, 16 and 64 MiB, 3 repeats) under
    /// `secure`, on /dev/shm.
    pub fn new(quick: bool) -> LifecycleBenchOptions {
        LifecycleBenchOptions {
            sizes_mib: if quick {
                vec![1, 16, 64]
            } else {
                vec![1, 16, 64, 256]
            },
            repeats: if quick { 3 } else { 5 },
            dir: PathBuf::from("/dev/shm"),
            scheme: Scheme::SECURE,
        }
    }
}

fn io(op: impl Into<String>) -> impl FnOnce(std::io::Error) -> BenchError {
    let op = op.into();
    move |source| BenchError::Io { op, source }
}

fn secs(f: impl FnOnce() -> Result<(), BenchError>) -> Result<f64, BenchError> {
    let t = Instant::now();
    f()?;
    Ok(t.elapsed().as_secs_f64())
}

fn run_tool(cmd: &mut Command) -> Result<(), BenchError> {
    let out = cmd.output().map_err(io(format!("run {cmd:?}")))?;
    if !out.status.success() {
        return Err(BenchError::Other(format!(
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// An LMDB environment file (`-n`) holding `mib` MiB of 4000-byte values (one overflow page
/// each), loaded by `mdb_load` from a dump in `mdb_dump`'s printable format.
fn lmdb_env(dir: &Path, mib: u64) -> Result<PathBuf, BenchError> {
    let dump = dir.join(format!("lmdb-{mib}.dump"));
    let env = dir.join(format!("lmdb-{mib}.mdb"));
    let _ = std::fs::remove_file(&env);
    let _ = std::fs::remove_file(env.with_extension("mdb-lock"));
    {
        let f = std::fs::File::create(&dump).map_err(io("create the LMDB dump"))?;
        let mut w = std::io::BufWriter::new(f);
        let map = (mib * 2 + 16) << 20;
        write!(
            w,
            "VERSION=3\nformat=print\ntype=btree\nmapsize={map}\nHEADER=END\n"
        )
        .map_err(io("write the LMDB dump"))?;
        let value: String = (0..4000).map(|i| (b'a' + (i % 26) as u8) as char).collect();
        for i in 0..mib * 256 {
            writeln!(w, " key{i:012}\n {value}").map_err(io("write the LMDB dump"))?;
        }
        writeln!(w, "DATA=END").map_err(io("write the LMDB dump"))?;
    }
    run_tool(
        Command::new("mdb_load")
            .arg("-n")
            .arg("-f")
            .arg(&dump)
            .arg(&env),
    )?;
    let _ = std::fs::remove_file(&dump);
    Ok(env)
}

fn mib_of(path: &Path) -> Result<f64, BenchError> {
    Ok(std::fs::metadata(path).map_err(io("stat"))?.len() as f64 / (1 << 20) as f64)
}

/// Run the benchmark, appending records: `rekey_us`, and per op (`snapshot`,
/// `snapshot_live`, `export`, `import`, `cp_pool_file`, `mdb_copy`) `ms` and `mib_per_s`
/// (of the bytes the op copies: the PMO's, the pool file's, the environment file's).
pub fn run(opts: &LifecycleBenchOptions, records: &mut Records) -> Result<(), BenchError> {
    let key = b"bench-key";
    let lmdb = have("mdb_copy") && have("mdb_load");
    if !lmdb {
        eprintln!("note: mdb_copy/mdb_load not found (Debian: lmdb-utils): no mdb_copy figures");
    }
    for &mib in &opts.sizes_mib {
        let tag = format!("life{mib}");
        // The PMO and its snapshot, each two slots per page, and room for the import. One
        // namespace capacity for every size: a namespace change (rekey) rereads the namespace,
        // whose default capacity grows with the pool, and that, not the PMO, would be timed.
        let pool_file = opts
            .dir
            .join(format!("pmo-bench-{tag}-{}.pool", std::process::id()));
        let _ = std::fs::remove_file(&pool_file);
        let _rm = RemoveOnDrop(pool_file.clone());
        let pool = &Pool::create(
            &pool_file,
            (6 * mib + 16) << 20,
            &PoolOptions {
                kdf: KdfParams::INSECURE_FAST,
                ns_capacity: Some(256),
                preallocate: true,
                scheme: opts.scheme,
                ..Default::default()
            },
        )?;
        pool.pcreate("a", mib << 20, key)?;
        {
            let h = pool.open_pmo("a", Perm::Write, key, None)?;
            let chunk = vec![0xA7u8; 1 << 20];
            for i in 0..mib {
                h.write_at(i << 20, &chunk)?;
            }
        }
        pmo_store::wait_for_background_detaches();
        let p = |op: &str| vec![("op", op.to_string()), ("pmo_mib", mib.to_string())];
        let push = |records: &mut Records, op: &str, t: &[f64], bytes_mib: f64| {
            let ms: Vec<f64> = t.iter().map(|s| s * 1e3).collect();
            let rate: Vec<f64> = t.iter().map(|s| bytes_mib / s).collect();
            records.push_samples(BENCH, &p(op), "ms", &ms, "ms");
            records.push_samples(BENCH, &p(op), "mib_per_s", &rate, "MiB/s");
        };
        // Rekey: one fast-KDF derivation and a few entry writes, whatever the size.
        let mut t = Vec::new();
        let mut cur = key.to_vec();
        for r in 0..opts.repeats {
            let next = format!("rekey-{r}").into_bytes();
            t.push(secs(|| Ok(pool.rekey("a", &cur, &next).map(|_| ())?))?);
            cur = next;
        }
        pool.rekey("a", &cur, key)?;
        let us: Vec<f64> = t.iter().map(|s| s * 1e6).collect();
        records.push_samples(BENCH, &p("rekey"), "rekey_us", &us, "us");

        let (mut snap, mut live, mut exp, mut imp, mut cp) =
            (vec![], vec![], vec![], vec![], vec![]);
        let mut live_passes = Vec::new();
        for r in 0..opts.repeats {
            snap.push(secs(|| {
                pool.snapshot("a", "s", key, None, &mut |_, _| {})?;
                Ok(())
            })?);
            pool.pdestroy("s", key)?;
            // A writer psyncs 4 pages in a loop for the whole snapshot.
            let stop = Arc::new(AtomicBool::new(false));
            let psyncs = Arc::new(AtomicU64::new(0));
            let w = {
                let (pool, stop, psyncs) = (pool.clone(), stop.clone(), psyncs.clone());
                std::thread::spawn(move || -> Result<(), BenchError> {
                    let h = pool.open_pmo("a", Perm::Write, key, None)?;
                    let page = [0x5Cu8; 4096];
                    let npages = h.size() / 4096;
                    let mut k = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let first = (k * 7919) % (npages - 4);
                        let list: Vec<(u64, &[u8; 4096])> =
                            (first..first + 4).map(|p| (p, &page)).collect();
                        h.commit_pages(&list)?;
                        psyncs.fetch_add(1, Ordering::Relaxed);
                        k += 1;
                    }
                    Ok(())
                })
            };
            while psyncs.load(Ordering::Relaxed) == 0 {
                std::thread::yield_now();
            }
            let t0 = Instant::now();
            let rep = pool.snapshot("a", "s", key, None, &mut |_, _| {});
            live.push(t0.elapsed().as_secs_f64());
            stop.store(true, Ordering::Relaxed);
            w.join()
                .map_err(|_| BenchError::Other("the writer panicked".into()))??;
            live_passes.push(rep?.1.passes as f64);
            pool.pdestroy("s", key)?;
            let f = opts
                .dir
                .join(format!("pmo-bench-{tag}-{}-{r}.pmox", std::process::id()));
            let _ = std::fs::remove_file(&f);
            exp.push(secs(|| {
                Ok(pool.export("a", key, &f, &mut |_, _| {}).map(|_| ())?)
            })?);
            imp.push(secs(|| {
                Ok(pool
                    .import(&f, Some("i"), key, &mut |_, _| {})
                    .map(|_| ())?)
            })?);
            pool.pdestroy("i", key)?;
            std::fs::remove_file(&f).map_err(io("remove the export"))?;
            let c = opts
                .dir
                .join(format!("pmo-bench-{tag}-{}.cp", std::process::id()));
            cp.push(secs(|| {
                run_tool(Command::new("cp").arg(&pool_file).arg(&c))
            })?);
            std::fs::remove_file(&c).map_err(io("remove the copy"))?;
        }
        let m = mib as f64;
        push(records, "snapshot", &snap, m);
        push(records, "snapshot_live", &live, m);
        push(records, "export", &exp, m);
        push(records, "import", &imp, m);
        push(records, "cp_pool_file", &cp, mib_of(&pool_file)?);
        records.push_samples(BENCH, &p("snapshot_live"), "passes", &live_passes, "passes");
        if lmdb {
            let env = lmdb_env(&opts.dir, mib)?;
            let env_mib = mib_of(&env)?;
            let mut t = Vec::new();
            let c = env.with_extension("copy");
            for _ in 0..opts.repeats {
                let _ = std::fs::remove_file(&c);
                t.push(secs(|| {
                    run_tool(Command::new("mdb_copy").arg("-n").arg(&env).arg(&c))
                })?);
            }
            push(records, "mdb_copy", &t, env_mib);
            records.push(BENCH, &p("mdb_copy"), "env_mib", env_mib, "MiB", 1);
            for f in [&env, &c] {
                let _ = std::fs::remove_file(f);
                let mut lock = f.as_os_str().to_owned();
                lock.push("-lock");
                let _ = std::fs::remove_file(lock);
            }
        }
    }
    Ok(())
}

const OPS: [&str; 6] = [
    "snapshot",
    "snapshot_live",
    "export",
    "import",
    "cp_pool_file",
    "mdb_copy",
];

fn sizes(records: &Records) -> Vec<u64> {
    let mut v: Vec<u64> = records
        .records
        .iter()
        .filter(|r| r.bench == BENCH)
        .filter_map(|r| r.params.get("pmo_mib")?.parse().ok())
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The table: rekey µs and each op's ms and MiB/s per PMO size.
pub fn table(records: &Records) -> String {
    let mut s = String::from("PMO MiB | rekey µs | op: ms (MiB/s)\n");
    for mib in sizes(records) {
        let m = mib.to_string();
        let get = |op: &str, metric: &str| records.find(metric, &[("op", op), ("pmo_mib", &m)]);
        s += &format!(
            "{mib:>7} | {:>8.0} |",
            get("rekey", "rekey_us").unwrap_or(f64::NAN)
        );
        for op in OPS {
            if let (Some(ms), Some(r)) = (get(op, "ms"), get(op, "mib_per_s")) {
                s += &format!(" {op}: {ms:.1} ({r:.0})");
            }
        }
        s += "\n";
    }
    s
}

/// Two figures: rekey µs against the PMO size, and each op's MiB/s against it.
pub fn draw(records: &Records, out: &Path) -> Result<Vec<PathBuf>, BenchError> {
    let xs = sizes(records);
    let series = |op: &str, metric: &str| {
        let pts: Vec<(f64, f64)> = xs
            .iter()
            .filter_map(|&mib| {
                let m = mib.to_string();
                Some((
                    mib as f64,
                    records.find(metric, &[("op", op), ("pmo_mib", &m)])?,
                ))
            })
            .collect();
        Series::plain(op, &pts)
    };
    let n = records.records.iter().map(|r| r.samples).max().unwrap_or(0);
    let mut files = Vec::new();
    let rekey = out.join("lifecycle-rekey.svg");
    plot::lines(
        &rekey,
        &LineChart {
            title: "rekey time against PMO size (fast KDF)",
            x_desc: "PMO size (MiB)",
            y_desc: &format!("rekey time (µs, median of {n})"),
            log: true,
            ..Default::default()
        },
        &mut [series("rekey", "rekey_us")],
    )?;
    files.push(rekey);
    let tput = out.join("lifecycle-throughput.svg");
    let mut s: Vec<Series> = OPS
        .iter()
        .map(|op| series(op, "mib_per_s"))
        .filter(|s| !s.points.is_empty())
        .collect();
    plot::lines(
        &tput,
        &LineChart {
            title: "snapshot and export against cp of the pool file and mdb_copy",
            x_desc: "PMO size (MiB)",
            y_desc: &format!("MiB/s of the bytes copied (median of {n})"),
            log: true,
            ..Default::default()
        },
        &mut s,
    )?;
    files.push(tput);
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_small_run_records_every_figure_and_draws() {
        let dir = std::env::temp_dir().join(format!("pmo-life-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let opts = LifecycleBenchOptions {
            sizes_mib: vec![1],
            repeats: 1,
            dir: dir.clone(),
            scheme: Scheme::SECURE,
        };
        let mut r = Records::default();
        run(&opts, &mut r).unwrap();
        for op in [
            "snapshot",
            "snapshot_live",
            "export",
            "import",
            "cp_pool_file",
        ] {
            let v = r.find("mib_per_s", &[("op", op), ("pmo_mib", "1")]);
            assert!(v.is_some_and(|v| v > 0.0), "{op}: {v:?}");
        }
        assert!(r
            .find("rekey_us", &[("op", "rekey")])
            .is_some_and(|v| v > 0.0));
        assert!(table(&r).contains("snapshot_live"));
        for f in draw(&r, &dir).unwrap() {
            assert!(std::fs::read_to_string(&f).unwrap().contains("<svg"));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

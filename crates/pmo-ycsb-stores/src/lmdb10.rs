//! `lmdb10-enc`: LMDB 1.0.2 with its own page encryption (`pmo_lmdb10`), the encrypted peer an
//! LMDB user weighs pmo against (issue 28). One synchronous write transaction per insert or
//! update (durable when it returns, as the other LMDB stores), one read transaction per read or
//! scan; its environment in a directory under the benchmark's directory (`/dev/shm`).

use std::path::{Path, PathBuf};

use pmo_bench::{BenchError, Records};
use pmo_lmdb::bench::YcsbStore;
use pmo_lmdb10::{ffi, Env, EnvOptions, KdfParams};
use pmo_ycsb::{KvStore, StoreError};

/// The store's label in the benchmarks.
pub const LABEL: &str = "lmdb10-enc";
const KEY: &[u8] = b"bench";

/// An encrypted LMDB 1.0 environment driven by YCSB.
pub struct Lmdb10Kv {
    pub env: Env,
    pub label: String,
}

impl KvStore for Lmdb10Kv {
    fn name(&self) -> String {
        self.label.clone()
    }
    fn insert(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        Ok(self.env.put1(key, value)?)
    }
    fn update(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        Ok(self.env.put1(key, value)?)
    }
    fn read(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, StoreError> {
        let t = self.env.begin(true)?;
        out.clear();
        Ok(t.walk_one(key, |v| out.extend_from_slice(v))?)
    }
    fn scan(&mut self, start: &[u8], count: usize) -> Result<usize, StoreError> {
        let t = self.env.begin(true)?;
        let mut left = count;
        let mut bytes = 0usize;
        let start = (!start.is_empty()).then_some(start);
        let n = t.walk(start, |_, v| {
            bytes += v.len(); // touch each record as YCSB's readallfields does
            left -= 1;
            left > 0
        })?;
        std::hint::black_box(bytes);
        Ok(n)
    }
}

/// Removes the environment's directory when dropped.
struct DirGuard(PathBuf);

impl Drop for DirGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn err(e: impl std::fmt::Display) -> BenchError {
    BenchError::Other(format!("{LABEL}: {e}"))
}

/// Open a fresh encrypted environment in `dir` for `bytes` of records: the map as the LMDB
/// stores size theirs (three times the records, 32 MiB at least), the key from the benchmark's
/// passphrase through Argon2id at the store's default cost.
pub fn open_bench(label: &str, dir: &Path, bytes: u64, _: u64) -> Result<YcsbStore, BenchError> {
    let path = dir.join(format!("pmo-lmdb10-bench-{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&path);
    let guard = DirGuard(path.clone());
    let map = (bytes * 3).max(32 << 20).next_multiple_of(1 << 20);
    let opts = EnvOptions {
        map_size: Some(usize::try_from(map).map_err(err)?),
        kdf: KdfParams::DEFAULT,
        ..Default::default()
    };
    let env = Env::open(&path, KEY, opts).map_err(err)?;
    let kv = Lmdb10Kv {
        env,
        label: label.into(),
    };
    let label = label.to_string();
    let reopen = Box::new(move || {
        let env = Env::open(
            &path,
            KEY,
            EnvOptions {
                flags: ffi::MDB_RDONLY,
                ..opts
            },
        )
        .map_err(err)?;
        Ok(Box::new(Lmdb10Kv { env, label }) as Box<dyn KvStore>)
    });
    Ok(YcsbStore::reopenable(Box::new(kv), reopen, Box::new(guard)))
}

fn find_rec<'a>(
    rec: &'a Records,
    bench: &str,
    metric: &str,
    params: &[(&str, &str)],
) -> Option<&'a pmo_bench::Record> {
    rec.records.iter().find(|r| {
        r.bench == bench
            && r.metric == metric
            && params
                .iter()
                .all(|(k, v)| r.params.get(*k).is_some_and(|x| x == v))
    })
}

fn find(rec: &Records, bench: &str, metric: &str, params: &[(&str, &str)]) -> Option<f64> {
    find_rec(rec, bench, metric, params).map(|r| r.value)
}

/// Issue 28's target, from one run's records: `pmo-secure` ahead of `lmdb10-enc` on the durable
/// commit (a lower median; the interleaved rounds' median ratio when the run has them, as the
/// project's target 2) and on every YCSB phase (a higher throughput): one line per comparison
/// and the verdict; none when the run measured neither store.
pub fn versus(rec: &Records) -> Vec<String> {
    let (a, b) = ("pmo-secure", LABEL);
    let mut lines = Vec::new();
    let mut met = true;
    let mut any = false;
    let rounds = |m: &str| find_rec(rec, "lmdb-peer", m, &[("store", b)]);
    let interleaved = rounds("commit_ratio");
    if let (Some(r), Some(x), Some(y)) = (
        interleaved,
        find(rec, "lmdb-peer", "commit_us_pmo", &[("store", b)]),
        find(rec, "lmdb-peer", "commit_us_peer", &[("store", b)]),
    ) {
        any = true;
        met &= r.value < 1.0;
        lines.push(format!(
            "  1 KiB durable commit, interleaved rounds: {x:.1} vs {y:.1} us, {:.2}x the time \
             (median of rounds, rounds {:.2}..{:.2}) {}",
            r.value,
            r.min.unwrap_or(r.value),
            r.max.unwrap_or(r.value),
            if r.value < 1.0 { "(ahead)" } else { "(BEHIND)" }
        ));
    }
    if let (Some(r), Some(x), Some(y)) = (
        rounds("read_ratio"),
        find(rec, "lmdb-peer", "read_ops_pmo", &[("store", b)]),
        find(rec, "lmdb-peer", "read_ops_peer", &[("store", b)]),
    ) {
        lines.push(format!(
            "  YCSB C, interleaved rounds: {x:.0} vs {y:.0} ops/s, {:.2}x the time (median of \
             rounds, rounds {:.2}..{:.2})",
            r.value,
            r.min.unwrap_or(r.value),
            r.max.unwrap_or(r.value),
        ));
    }
    if let (Some(x), Some(y)) = (
        find(rec, "lmdb-commit", "commit_us_p50", &[("store", a)]),
        find(rec, "lmdb-commit", "commit_us_p50", &[("store", b)]),
    ) {
        any = true;
        // Without interleaved rounds, the commit benchmark's medians decide.
        if interleaved.is_none() {
            met &= x < y;
        }
        lines.push(format!(
            "  1 KiB durable commit, one store after the other: {x:.1} vs {y:.1} us, {:.2}x the \
             time {}",
            x / y,
            if x < y { "(ahead)" } else { "(BEHIND)" }
        ));
    }
    for (w, phase) in [
        ("load", "load"),
        ("a", "run"),
        ("b", "run"),
        ("c", "run"),
        ("d", "run"),
        ("e", "run"),
        ("f", "run"),
    ] {
        let get = |s: &str| {
            let mut p = vec![("store", s), ("phase", phase)];
            if phase == "run" {
                p.push(("workload", w));
            }
            find(rec, "ycsb", "throughput_ops", &p)
        };
        if let (Some(x), Some(y)) = (get(a), get(b)) {
            any = true;
            met &= x > y;
            lines.push(format!(
                "  YCSB {:<4}: {x:.0} vs {y:.0} ops/s: pmo-secure {:.2}x {}",
                w.to_uppercase(),
                x / y,
                if x > y { "(ahead)" } else { "(BEHIND)" }
            ));
        }
    }
    if let (Some(x), Some(y)) = (
        find(rec, "lmdb-cold-scan", "scan_ms", &[("store", a)]),
        find(rec, "lmdb-cold-scan", "scan_ms", &[("store", b)]),
    ) {
        lines.push(format!(
            "  cold scan after reopening (not part of the target): {x:.1} vs {y:.1} ms"
        ));
    }
    if any {
        lines.insert(
            0,
            format!("issue 28: pmo-secure vs {b} (LMDB 1.0.2, AES-256-GCM pages), same run:"),
        );
        lines.push(format!(
            "issue 28 target (pmo-secure ahead on the commit and every YCSB phase measured): {}",
            if met { "met" } else { "MISSED" }
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_round_trips_scans_and_reopens() {
        let dir = std::env::temp_dir();
        let mut s = open_bench("lmdb10-test", &dir, 1 << 20, 100).unwrap();
        for i in 0..100u32 {
            s.kv.insert(format!("user{i:04}").as_bytes(), &[i as u8; 500])
                .unwrap();
        }
        s.kv.update(b"user0007", b"new").unwrap();
        let mut out = Vec::new();
        assert!(s.kv.read(b"user0007", &mut out).unwrap());
        assert_eq!(out, b"new");
        assert!(!s.kv.read(b"nope", &mut out).unwrap());
        assert_eq!(s.kv.scan(b"user0090", 50).unwrap(), 10);
        let mut s = s.reopen().unwrap();
        assert_eq!(s.kv.scan(b"", 1000).unwrap(), 100);
        assert!(s.kv.read(b"user0042", &mut out).unwrap());
        assert_eq!(out, [42u8; 500]);
        // Read-only after reopening.
        assert!(s.kv.insert(b"user9999", b"x").is_err());
    }

    #[test]
    fn the_verdict_follows_the_figures() {
        let mut rec = Records::default();
        let p = |s: &str| [("store", s.to_string())];
        rec.push(
            "lmdb-commit",
            &p("pmo-secure"),
            "commit_us_p50",
            10.0,
            "us",
            1,
        );
        rec.push("lmdb-commit", &p(LABEL), "commit_us_p50", 20.0, "us", 1);
        let ph = |s: &str, w: &str| {
            [
                ("store", s.to_string()),
                ("workload", w.to_string()),
                ("phase", "run".to_string()),
            ]
        };
        rec.push(
            "ycsb",
            &ph("pmo-secure", "a"),
            "throughput_ops",
            100.0,
            "ops/s",
            1,
        );
        rec.push("ycsb", &ph(LABEL, "a"), "throughput_ops", 50.0, "ops/s", 1);
        assert!(versus(&rec).last().unwrap().ends_with(": met"));
        rec.push(
            "ycsb",
            &ph("pmo-secure", "c"),
            "throughput_ops",
            100.0,
            "ops/s",
            1,
        );
        rec.push("ycsb", &ph(LABEL, "c"), "throughput_ops", 150.0, "ops/s", 1);
        let l = versus(&rec);
        assert!(l.last().unwrap().ends_with("MISSED"), "{l:?}");
        assert!(l
            .iter()
            .any(|x| x.contains("YCSB C") && x.contains("BEHIND")));
        assert!(versus(&Records::default()).is_empty());
    }
}

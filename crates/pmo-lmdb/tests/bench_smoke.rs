//! `pmo bench ycsb` in miniature: every store and workload produces its records and figures.

use pmo_lmdb::bench::{draw, run, LmdbBenchOptions};

/// The glue's backend is process-wide and the bench's pools are named by store and process:
/// one bench at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn ycsb_bench_runs_every_store_and_workload() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = std::env::temp_dir().join(format!("pmo-lmdb-bench-smoke-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let mut o = LmdbBenchOptions::new(true);
    o.records = Some(60);
    o.operations = Some(60);
    o.schemes = vec!["secure".into()];
    o.parts = vec!["ycsb".into()];
    o.disk_dir = tmp.join("disk");
    let mut rec = pmo_bench::Records::default();
    run(&o, "ycsb", &mut rec).unwrap();
    for store in ["pmo-secure", "shm", "disk"] {
        for w in ["a", "b", "c", "d", "e", "f"] {
            let v = rec.find(
                "throughput_ops",
                &[("store", store), ("workload", w), ("phase", "run")],
            );
            assert!(v.is_some_and(|v| v > 0.0), "{store} {w}: {v:?}");
        }
        assert!(rec
            .find(
                "p99_us",
                &[("store", store), ("workload", "c"), ("op", "read")]
            )
            .is_some());
    }
    // YCSB C's repeats carry their spread (for the `?` marks).
    let c = rec
        .get(
            "throughput_ops_median",
            &[("store", "pmo-secure"), ("phase", "repeat")],
        )
        .unwrap();
    assert!(c.min.is_some_and(|lo| lo <= c.value) && c.max.is_some_and(|hi| hi >= c.value));
    let figures = draw(&rec, &tmp).unwrap();
    assert_eq!(figures.len(), 2, "{figures:?}");
    assert!(figures.iter().all(|f| std::fs::metadata(f)
        .map(|m| m.len() > 1000)
        .unwrap_or(false)));
    // Each also as PNG, without librsvg; the workloads are grouped bars' categories.
    for f in &figures {
        let png = std::fs::read(f.with_extension("png")).unwrap();
        assert!(
            png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 8_000,
            "{f:?}"
        );
    }
    let svg = std::fs::read_to_string(tmp.join("ycsb-throughput.svg")).unwrap();
    // An SVG text element's content stands on a line of its own.
    for text in ["YCSB workload", "A", "F"] {
        assert!(svg.lines().any(|l| l.trim() == text), "{text}: {svg}");
    }
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn commit_bench_splits_each_commit_and_records_batch_spreads() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = std::env::temp_dir().join(format!("pmo-lmdb-commit-smoke-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let mut o = LmdbBenchOptions::new(true);
    o.schemes = vec!["secure".into(), "wed".into()];
    o.parts = vec!["commit".into()];
    o.disk_dir = tmp.join("disk");
    let mut rec = pmo_bench::Records::default();
    run(&o, "lmdb", &mut rec).unwrap();
    for store in ["pmo-secure", "pmo-wed"] {
        let p50 = rec
            .get("commit_us_p50", &[("store", store)])
            .unwrap_or_else(|| panic!("{store}: no p50"));
        let (lo, hi) = (p50.min.unwrap(), p50.max.unwrap());
        assert!(lo <= hi && lo > 0.0, "{store}: batch medians {lo}..{hi}");
        let g = |m: &str| rec.find(m, &[("store", store)]).unwrap();
        // LMDB declares its pages: a commit seals some pages and takes no write fault (a rare
        // fault fills a page read for the first time), and the categories are measured.
        assert!(g("pages_per_commit") >= 2.0, "{store}");
        assert!(
            g("faults_per_commit") < 0.1,
            "{store}: {}",
            g("faults_per_commit")
        );
        assert!(
            g("psync_crypt_us") > 0.0 && g("lmdb_other_us") > 0.0,
            "{store}"
        );
    }
    assert!(rec.find("commit_us_p50", &[("store", "shm")]).is_some());
    let _ = std::fs::remove_dir_all(&tmp);
}

//! `pmo bench ycsb` in miniature: every store and workload produces its records and figures.

use pmo_lmdb::bench::{draw, run, LmdbBenchOptions};

#[test]
fn ycsb_bench_runs_every_store_and_workload() {
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
    let figures = draw(&rec, &tmp).unwrap();
    assert_eq!(figures.len(), 2, "{figures:?}");
    assert!(figures.iter().all(|f| std::fs::metadata(f)
        .map(|m| m.len() > 1000)
        .unwrap_or(false)));
    let _ = std::fs::remove_dir_all(&tmp);
}

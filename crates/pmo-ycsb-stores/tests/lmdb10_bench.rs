//! `lmdb10-enc` (LMDB 1.0.2 encrypted) in `pmo bench lmdb|ycsb` in miniature: YCSB load and
//! A-F (E included: it has key order), the durable commit, the rounds beside pmo-secure and the
//! issue 28 comparison.

use pmo_lmdb::bench::{run, LmdbBenchOptions};
use pmo_ycsb_stores::lmdb10::{versus, LABEL};

fn options(tmp: &std::path::Path) -> LmdbBenchOptions {
    let mut o = LmdbBenchOptions::new(true);
    o.schemes = vec!["secure".into()];
    o.disk_dir = tmp.join("disk");
    o.others = pmo_ycsb_stores::bench::stores()
        .into_iter()
        .filter(|s| s.label == LABEL)
        .collect();
    assert_eq!(o.others.len(), 1);
    o
}

#[test]
fn lmdb10_runs_in_ycsb_commit_and_beside_pmo_secure() {
    let tmp = std::env::temp_dir().join(format!("pmo-lmdb10-bench-smoke-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let mut o = options(&tmp);
    o.records = Some(60);
    o.operations = Some(60);
    o.parts = vec!["ycsb".into()];
    let mut rec = pmo_bench::Records::default();
    run(&o, "ycsb", &mut rec).unwrap();
    for w in ["a", "b", "c", "d", "e", "f"] {
        let v = rec.find(
            "throughput_ops",
            &[("store", LABEL), ("workload", w), ("phase", "run")],
        );
        assert!(v.is_some_and(|v| v > 0.0), "{w}: {v:?}");
    }
    let lines = versus(&rec);
    assert_eq!(lines.len(), 9, "{lines:?}"); // title, load, A-F, verdict

    let mut o = options(&tmp);
    o.parts = vec!["commit".into()];
    let mut rec = pmo_bench::Records::default();
    run(&o, "lmdb", &mut rec).unwrap();
    let p50 = rec.get("commit_us_p50", &[("store", LABEL)]).unwrap();
    assert!(p50.value > 0.0 && p50.min.is_some_and(|lo| lo > 0.0));
    for m in ["commit_ratio", "read_ratio"] {
        let r = rec
            .records
            .iter()
            .find(|r| r.bench == "lmdb-peer" && r.metric == m)
            .unwrap_or_else(|| panic!("no lmdb-peer {m}"));
        assert!(r.value > 0.0 && r.min.is_some() && r.max.is_some(), "{m}");
    }
    let lines = versus(&rec);
    assert!(
        lines.iter().any(|l| l.contains("interleaved rounds")),
        "{lines:?}"
    );
    assert!(
        lines.last().unwrap().ends_with(": met") || lines.last().unwrap().ends_with(": MISSED")
    );
    // Its environments are gone.
    let left: Vec<_> = std::fs::read_dir(&o.dir)
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("pmo-lmdb10-bench-")
                && e.file_name()
                    .to_string_lossy()
                    .ends_with(&format!("-{}", std::process::id()))
        })
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let _ = std::fs::remove_dir_all(&tmp);
}

//! The stores of this crate in `pmo bench ycsb`'s run beside LMDB: each runs every workload it
//! can (the hash maps have no scans, so no E).

use pmo_lmdb::bench::{run, LmdbBenchOptions};

#[test]
fn the_stores_join_the_ycsb_bench() {
    let tmp = std::env::temp_dir().join(format!("pmo-ycsb-stores-bench-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let mut o = LmdbBenchOptions::new(true);
    o.records = Some(60);
    o.operations = Some(60);
    o.schemes = vec!["secure".into()];
    o.parts = vec!["ycsb".into()];
    o.disk_dir = tmp.join("disk");
    o.others = pmo_ycsb_stores::bench::stores();
    let mut rec = pmo_bench::Records::default();
    run(&o, "ycsb", &mut rec).unwrap();
    let mut others = vec![("typed-btree", true), ("typed-hash", false)];
    if pmo_ycsb_stores::pmdk::available() {
        others.push(("pmdk-hash", false));
    }
    for (store, scans) in others {
        for w in ["a", "b", "c", "d", "e", "f"] {
            let v = rec.find(
                "throughput_ops",
                &[("store", store), ("workload", w), ("phase", "run")],
            );
            assert_eq!(
                v.is_some_and(|v| v > 0.0),
                w != "e" || scans,
                "{store} {w}: {v:?}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
}

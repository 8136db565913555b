//! LMDB's own test programs (mtest .. mtest6) and tools (mdb_stat, mdb_dump, mdb_load,
//! mdb_copy, mdb_drop), built unchanged from LMDB's source, run against environments on PMOs
//! under `secure` and `sp-ip`, as LMDB's `make test` runs them on files.

mod common;

use std::sync::{Mutex, MutexGuard};

use common::{stat_field, TestPool};
use pmo_store::Scheme;

const SCHEMES: [&str; 2] = ["secure", "sp-ip"];

/// The backend is process-wide: `make_env` installs its pool's, and every `TestPool`'s drop
/// uninstalls whatever is installed. One test at a time, so that no other test's pool is
/// dropped between a test's install and its open.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn mtests_pass_on_pmos_and_mdb_stat_reads_their_environments() {
    let _serial = serial();
    for scheme in SCHEMES {
        let tp = TestPool::new("mtest", scheme, 1 << 30);
        // Each program opens "./testdb": under PMO_LMDB=1 a fresh PMO named after the data
        // file's absolute path (pmo_lmdb::paths).
        let testdb = tp.mapped("testdb");
        assert!(testdb.ends_with("%2Ftestdb%2Fdata.mdb"), "{testdb}");
        for prog in ["mtest", "mtest2", "mtest3", "mtest4", "mtest5", "mtest6"] {
            let _ = tp.pool.pdestroy(&testdb, common::KEY.as_bytes());
            tp.ok(prog, &[], true);
            let info = tp
                .pool
                .info(&testdb)
                .expect("the mtest made its environment a PMO");
            assert_eq!(
                info.scheme,
                Scheme::from_name(scheme).unwrap().code(),
                "{prog}"
            );
            // LMDB's make test: mdb_stat of the environment afterwards (all databases: -a).
            let stat = tp.ok("mdb_stat", &["-e", "-a", "testdb"], true);
            assert!(
                stat_field(&stat, "Last transaction ID") >= 1,
                "{prog} committed nothing:\n{stat}"
            );
            assert_eq!(stat_field(&stat, "Page size"), 4096);
            // And by its pmo: path, without PMO_LMDB.
            let stat2 = tp.ok("mdb_stat", &["-e", &format!("pmo:{testdb}")], false);
            assert_eq!(
                stat_field(&stat2, "Last transaction ID"),
                stat_field(&stat, "Last transaction ID")
            );
            // Nothing of LMDB's was written beside the PMO: no data file in the directory.
            assert!(!tp.dir.join("testdb").join("data.mdb").exists());
        }
    }
}

/// Without MDB_WRITEMAP (`PMO_LMDB_WRITEMAP=0`): LMDB copies its dirty pages into the
/// attachment through the patch's write hook; its tests pass and mdb_stat reads the result.
#[test]
fn mtests_pass_on_a_pmo_without_writemap() {
    let _serial = serial();
    let tp = TestPool::new("nowritemap", "secure", 1 << 30);
    let testdb = tp.mapped("testdb");
    for prog in ["mtest", "mtest2", "mtest3", "mtest5"] {
        let _ = tp.pool.pdestroy(&testdb, common::KEY.as_bytes());
        let out = tp.program_env(prog, &[], true, &[("PMO_LMDB_WRITEMAP", "0")]);
        assert!(
            out.status.success(),
            "{prog} without MDB_WRITEMAP: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stat = tp.ok("mdb_stat", &["-e", "-a", "testdb"], true);
        assert!(
            stat_field(&stat, "Last transaction ID") >= 1,
            "{prog}:\n{stat}"
        );
        // No data file appeared beside the PMO (the pages went into the attachment).
        assert!(!tp.dir.join("testdb").join("data.mdb").exists());
    }
}

fn make_env(tp: &TestPool, name: &str, n: u32) {
    tp.install();
    let env = pmo_lmdb::Env::open(&format!("pmo:{name}"), Default::default()).unwrap();
    let mut t = env.begin(false).unwrap();
    for i in 0..n {
        t.put(
            format!("key{i:05}").as_bytes(),
            format!("value {i} {}", "x".repeat((i % 50) as usize)).as_bytes(),
        )
        .unwrap();
    }
    t.commit().unwrap();
    drop(env);
    pmo_lmdb::uninstall();
}

/// mdb_dump's output without its `mapsize=` header line (a PMO's map is the PMO's size).
fn body(dump: &str) -> String {
    dump.lines()
        .filter(|l| !l.starts_with("mapsize="))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn tools_dump_load_copy_drop_and_stat_pmo_environments() {
    let _serial = serial();
    for scheme in SCHEMES {
        let tp = TestPool::new("tools", scheme, 1 << 30);
        make_env(&tp, "src", 500);
        let stat = tp.ok("mdb_stat", &["pmo:src"], false);
        assert_eq!(stat_field(&stat, "Entries"), 500);

        // dump -> load into a new PMO -> dump again: the same records.
        let dump = tp.ok("mdb_dump", &["-p", "pmo:src"], false);
        assert_eq!(dump.lines().filter(|l| l.starts_with(" key")).count(), 500);
        std::fs::write(tp.dir.join("src.dump"), &dump).unwrap();
        tp.ok("mdb_load", &["-f", "src.dump", "pmo:loaded"], false);
        assert_eq!(
            body(&tp.ok("mdb_dump", &["-p", "pmo:loaded"], false)),
            body(&dump)
        );
        assert_eq!(
            tp.pool.info("loaded").unwrap().scheme,
            Scheme::from_name(scheme).unwrap().code()
        );

        // mdb_copy (plain and compacting) from a PMO to a directory: an ordinary LMDB file
        // environment with the same records.
        for (dir, flags) in [("copy", vec![]), ("compact", vec!["-c"])] {
            std::fs::create_dir_all(tp.dir.join(dir)).unwrap();
            let mut args = flags.clone();
            args.extend(["pmo:src", dir]);
            tp.ok("mdb_copy", &args, false);
            assert!(tp.dir.join(dir).join("data.mdb").is_file());
            assert_eq!(
                body(&tp.ok("mdb_dump", &["-p", dir], false)),
                body(&dump),
                "mdb_copy {flags:?}"
            );
        }

        // mdb_drop empties the main database of the loaded copy; the source is untouched.
        tp.ok("mdb_drop", &["pmo:loaded"], false);
        assert_eq!(
            stat_field(&tp.ok("mdb_stat", &["pmo:loaded"], false), "Entries"),
            0
        );
        assert_eq!(
            stat_field(&tp.ok("mdb_stat", &["pmo:src"], false), "Entries"),
            500
        );
    }
}

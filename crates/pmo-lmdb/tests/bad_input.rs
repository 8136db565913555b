//! Bad input gives clear errors and loses nothing committed: a PMO that does not hold an
//! LMDB environment, a wrong key, a full PMO (MDB_MAP_FULL), a missing PMO.

mod common;

use std::sync::Mutex;

use common::{TestPool, KEY};
use pmo_lmdb::{ffi, Env, EnvOptions, LmdbError};
use pmo_store::Perm;

/// The backend is process-wide: one test at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn rdonly() -> EnvOptions {
    EnvOptions {
        flags: ffi::MDB_RDONLY,
        ..Default::default()
    }
}

fn code(e: &LmdbError) -> i32 {
    match e {
        LmdbError::Mdb { code, .. } => *code,
        other => panic!("not an LMDB error: {other}"),
    }
}

#[test]
fn a_pmo_that_is_not_an_environment_is_refused_and_left_alone() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tp = TestPool::new("notlmdb", "secure", 64 << 20);
    // PMO "junk" holds other data on its first page; PMO "sparse" holds data only on page 5,
    // committed (so it is no fresh, never-synced PMO an environment may be made in).
    for (name, page) in [("junk", 0usize), ("sparse", 5)] {
        tp.pool.pcreate(name, 1 << 20, KEY.as_bytes()).unwrap();
        let a = tp.pool.attach(name, Perm::Write, KEY.as_bytes()).unwrap();
        a.write_at(page * 4096, b"this is not an LMDB environment")
            .unwrap();
        a.psync().unwrap();
        a.detach().unwrap();
    }
    tp.install();
    for name in ["junk", "sparse"] {
        for opts in [rdonly(), EnvOptions::default()] {
            let e = Env::open(&format!("pmo:{name}"), opts)
                .err()
                .expect("opened a non-LMDB PMO");
            assert_eq!(code(&e), ffi::MDB_INVALID, "{name}: {e}");
            assert!(e.to_string().contains("not an LMDB file"), "{e}");
        }
    }
    pmo_lmdb::uninstall();
    for (name, page) in [("junk", 0usize), ("sparse", 5)] {
        let a = tp.pool.attach(name, Perm::Read, KEY.as_bytes()).unwrap();
        let mut buf = vec![0u8; 4096 * 8];
        a.read_at(0, &mut buf).unwrap();
        let mut expect = vec![0u8; 4096 * 8];
        expect[page * 4096..page * 4096 + 31].copy_from_slice(b"this is not an LMDB environment");
        assert_eq!(buf, expect, "{name} was changed");
        a.detach().unwrap();
    }
    // The tools say so too, and exit 1.
    let out = tp.program("mdb_stat", &["pmo:junk"], false);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not an LMDB file"));
}

#[test]
fn a_wrong_key_is_refused_and_the_data_survives() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tp = TestPool::new("wrongkey", "secure", 64 << 20);
    tp.install();
    {
        let env = Env::open(
            "pmo:db",
            EnvOptions {
                map_size: Some(1 << 20),
                ..Default::default()
            },
        )
        .unwrap();
        env.put1(b"k", b"committed").unwrap();
    }
    pmo_lmdb::install(pmo_lmdb::Backend::new(tp.pool.clone(), b"not the key"));
    for opts in [rdonly(), EnvOptions::default()] {
        let e = Env::open("pmo:db", opts)
            .err()
            .expect("opened with a wrong key");
        assert_eq!(code(&e), libc::EACCES);
        assert!(e.to_string().contains("wrong key for PMO 'db'"), "{e}");
    }
    tp.install();
    let env = Env::open("pmo:db", rdonly()).unwrap();
    assert_eq!(
        env.begin(true).unwrap().get(b"k").unwrap().as_deref(),
        Some(&b"committed"[..])
    );
    drop(env);
    pmo_lmdb::uninstall();
    // A tool with the wrong key: exit 1 and the reason on stderr.
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_pmo-lmdb-run"));
    let out = c
        .args(["mdb_stat", "pmo:db"])
        .env("PMO_POOL", &tp.path)
        .env("PMO_KEY", "wrong")
        .env("PMO_LMDB_LOCKDIR", tp.dir.join("locks"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("wrong key for PMO 'db'"));
}

#[test]
fn a_full_pmo_says_map_full_and_keeps_every_commit() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tp = TestPool::new("full", "secure", 64 << 20);
    tp.install();
    let env = Env::open(
        "pmo:small",
        EnvOptions {
            map_size: Some(256 << 10),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(tp.pool.info("small").unwrap().size, 256 << 10);
    let value = vec![7u8; 1000];
    let mut committed = 0u32;
    let err = loop {
        match env.put1(format!("key{committed:06}").as_bytes(), &value) {
            Ok(()) => committed += 1,
            Err(e) => break e,
        }
        assert!(committed < 10_000, "a 256 KiB PMO took 10 MB");
    };
    assert!(err.is_map_full(), "{err}");
    assert!(err.to_string().contains("MDB_MAP_FULL"), "{err}");
    assert!(committed > 20, "only {committed} records fit");
    // The environment is still usable: free a record, and a commit fits again.
    let mut t = env.begin(false).unwrap();
    assert!(t.del(b"key000000").unwrap());
    t.commit().unwrap();
    env.put1(b"key000000", b"small").unwrap();
    drop(env);
    // Every commit is there after a reopen, and no more.
    let env = Env::open("pmo:small", rdonly()).unwrap();
    let t = env.begin(true).unwrap();
    let n = t.walk(None, |_, _| true).unwrap();
    assert_eq!(n, committed as usize);
    assert_eq!(t.get(b"key000000").unwrap().as_deref(), Some(&b"small"[..]));
    assert_eq!(
        t.get(format!("key{:06}", committed - 1).as_bytes())
            .unwrap()
            .as_deref(),
        Some(&value[..])
    );
}

#[test]
fn a_missing_pmo_opened_read_only_is_not_created() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tp = TestPool::new("missing", "secure", 64 << 20);
    tp.install();
    let e = Env::open("pmo:nothing", rdonly())
        .err()
        .expect("opened a missing PMO");
    assert_eq!(code(&e), libc::ENOENT);
    assert!(e.to_string().contains("no PMO named 'nothing'"), "{e}");
    assert!(!tp.pool.exists("nothing").unwrap());
    // A path that names no PMO is an ordinary LMDB file environment (and its directory must
    // exist, as LMDB requires).
    let e = Env::open(
        tp.dir.join("no-such-dir").to_str().unwrap(),
        EnvOptions::default(),
    )
    .err()
    .unwrap();
    assert_eq!(code(&e), libc::ENOENT);
}

#[test]
fn the_multi_process_rules_of_docs_lmdb_md_hold() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tp = TestPool::new("procs", "secure", 64 << 20);
    tp.install();
    let writer = Env::open(
        "pmo:db",
        EnvOptions {
            map_size: Some(1 << 20),
            ..Default::default()
        },
    )
    .unwrap();
    writer.put1(b"k", b"v").unwrap();
    // While this process writes, another process reads: it sees the newest commit.
    let stat = |what: &str| {
        let out = tp.program("mdb_stat", &["pmo:db"], false);
        assert!(
            out.status.success(),
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(stat("beside the writer").contains("Entries: 1"));
    writer.put1(b"k2", b"v").unwrap();
    assert!(stat("after another commit").contains("Entries: 2"));
    // A second writer is refused while this one has the environment open.
    let out = tp.program("mdb_load", &["-T", "pmo:db"], false);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("attached"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(writer);
    // A reader here, a writer in another process: the reader's next read transaction sees
    // the other process's commit.
    let reader = Env::open("pmo:db", rdonly()).unwrap();
    assert_eq!(reader.begin(true).unwrap().get(b"k3").unwrap(), None);
    std::fs::write(tp.dir.join("more.txt"), "k3\nv3\n").unwrap();
    let out = tp.program("mdb_load", &["-T", "-f", "more.txt", "pmo:db"], false);
    assert!(
        out.status.success(),
        "a writer beside a reader: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        reader.begin(true).unwrap().get(b"k3").unwrap().as_deref(),
        Some(&b"v3"[..])
    );
    assert_eq!(
        reader.begin(true).unwrap().get(b"k").unwrap().as_deref(),
        Some(&b"v"[..])
    );
    drop(reader);
    pmo_lmdb::uninstall();
}

/// `mdb_env_set_mapsize` of an open writer grows its PMO: a full environment takes more
/// records after it, at the same address, and the PMO keeps the new size after a reopen.
#[test]
fn a_writer_grows_its_pmo_with_mdb_env_set_mapsize() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tp = TestPool::new("grow", "secure", 256 << 20);
    tp.install();
    let mut env = Env::open(
        "pmo:grow",
        EnvOptions {
            map_size: Some(1 << 20),
            ..Default::default()
        },
    )
    .unwrap();
    let value = vec![7u8; 2000];
    let mut n = 0u32;
    let full = loop {
        match env.put1(format!("key{n:06}").as_bytes(), &value) {
            Ok(()) => n += 1,
            Err(e) => break e,
        }
    };
    assert!(full.is_map_full(), "{full}");
    let before = env.info().unwrap();
    assert_eq!(before.me_mapsize, 1 << 20);
    // Twice: once within the PMO's layout capacity or past it, then far past it.
    for size in [4usize << 20, 32 << 20] {
        env.set_map_size(size).unwrap();
        let info = env.info().unwrap();
        assert_eq!(info.me_mapsize, size);
        for _ in 0..200 {
            env.put1(format!("key{n:06}").as_bytes(), &value).unwrap();
            n += 1;
        }
    }
    assert_eq!(tp.pool.info("grow").unwrap().size, 32 << 20);
    drop(env);
    let env = Env::open("pmo:grow", rdonly()).unwrap();
    assert_eq!(env.info().unwrap().me_mapsize, 32 << 20);
    let t = env.begin(true).unwrap();
    for i in 0..n {
        assert_eq!(
            t.get(format!("key{i:06}").as_bytes()).unwrap().as_deref(),
            Some(&value[..]),
            "record {i} of {n}"
        );
    }
    drop(t);
    drop(env);
    // A reader attached beside the writer: the writer cannot grow the PMO (EBUSY), and keeps
    // working at its size.
    let mut writer = Env::open("pmo:grow", EnvOptions::default()).unwrap();
    let reader = Env::open("pmo:grow", rdonly()).unwrap();
    let e = writer.set_map_size(64 << 20).unwrap_err();
    assert_eq!(code(&e), libc::EBUSY, "{e}");
    writer.put1(b"after", b"busy").unwrap();
    // Several environments on one PMO in one process: a second reader too, each read
    // transaction at the writer's newest commit.
    let reader2 = Env::open("pmo:grow", rdonly()).unwrap();
    for r in [&reader, &reader2] {
        assert_eq!(
            r.begin(true).unwrap().get(b"after").unwrap().as_deref(),
            Some(&b"busy"[..])
        );
    }
    writer.put1(b"after", b"again").unwrap();
    for r in [&reader, &reader2] {
        assert_eq!(
            r.begin(true).unwrap().get(b"after").unwrap().as_deref(),
            Some(&b"again"[..])
        );
        assert_eq!(
            r.info().unwrap().me_last_txnid,
            writer.info().unwrap().me_last_txnid
        );
    }
    drop(reader2);
    drop(reader);
    drop(writer);
    pmo_lmdb::uninstall();
}

/// A writer with `MDB_NOSYNC` publishes commits it has not psynced: a reader's transaction then
/// reads the newest psynced commit, whole, and sees the later ones once the writer syncs.
#[test]
fn a_reader_beside_a_nosync_writer_reads_its_newest_psync() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tp = TestPool::new("nosync", "secure", 64 << 20);
    tp.install();
    let writer = Env::open(
        "pmo:ns",
        EnvOptions {
            flags: pmo_lmdb::ffi::MDB_NOSYNC,
            map_size: Some(4 << 20),
        },
    )
    .unwrap();
    writer.put1(b"k", b"v1").unwrap();
    writer.sync().unwrap();
    let reader = Env::open("pmo:ns", rdonly()).unwrap();
    writer.put1(b"k", b"v2").unwrap();
    writer.put1(b"k2", b"only after a sync").unwrap();
    {
        // The lock file says v2's commit is the newest; the newest psync is v1's.
        let t = reader.begin(true).unwrap();
        assert_eq!(t.get(b"k").unwrap().as_deref(), Some(&b"v1"[..]));
        assert_eq!(t.get(b"k2").unwrap(), None);
        // A second transaction meanwhile reads the same psync (the view stays).
        let t2 = reader.begin(true).unwrap();
        assert_eq!(t2.get(b"k").unwrap().as_deref(), Some(&b"v1"[..]));
    }
    writer.sync().unwrap();
    let t = reader.begin(true).unwrap();
    assert_eq!(t.get(b"k").unwrap().as_deref(), Some(&b"v2"[..]));
    assert_eq!(
        t.get(b"k2").unwrap().as_deref(),
        Some(&b"only after a sync"[..])
    );
    drop(t);
    drop(reader);
    drop(writer);
    pmo_lmdb::uninstall();
}

/// A read-only environment with predictive decryption cannot move its view: it attaches
/// exclusively (a writer waits), and its read transactions work, each on the same state.
#[test]
fn a_reader_with_prediction_attaches_exclusively_and_reads() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tp = TestPool::new("predict", "secure", 256 << 20);
    tp.install();
    {
        let w = Env::open("pmo:p", EnvOptions::default()).unwrap();
        w.put1(b"k", b"v").unwrap();
    }
    let mut b = pmo_lmdb::Backend::new(tp.pool.clone(), common::KEY.as_bytes());
    b.lock_dir = Some(tp.dir.join("locks"));
    b.attach.predict = Some(pmo_store::PredictConfig::adaptive());
    pmo_lmdb::install(b);
    let reader = Env::open("pmo:p", rdonly()).unwrap();
    for _ in 0..3 {
        assert_eq!(
            reader.begin(true).unwrap().get(b"k").unwrap().as_deref(),
            Some(&b"v"[..])
        );
    }
    // A writer in another process is refused while it reads (the exclusive rule).
    let out = tp.program("mdb_load", &["-T", "pmo:p"], false);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(reader);
    pmo_lmdb::uninstall();
}

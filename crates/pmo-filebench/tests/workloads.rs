//! Filebench's own four workload files (from `../shared/filebench/` beside the workspace, when
//! it exists), unchanged, run briefly at small sizes set by overrides, on the pmo file store and
//! on a plain directory; the built-in personalities the same way; a full store reported as an
//! error.

use std::path::PathBuf;
use std::sync::Arc;

use pmo_filebench::backend::{Backend, PmoBackend, PosixBackend};
use pmo_filebench::run::{run, RunError, RunOptions, SyncMode};
use pmo_filebench::{personalities, Workload};
use pmo_fs::{FileStore, FsOptions};
use pmo_medium::crash::CrashMedium;
use pmo_store::{KdfParams, Pool, PoolOptions, Scheme};

fn shared_dir() -> Option<PathBuf> {
    let d = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/filebench");
    if d.join("fileserver.f").exists() {
        Some(d)
    } else {
        eprintln!(
            "note: {} not found; skipping Filebench's own files",
            d.display()
        );
        None
    }
}

fn small() -> Vec<(String, String)> {
    [
        ("nfiles", "24"),
        ("nthreads", "3"),
        (
            "filesize",
            "cvar(type=cvar-gamma,parameters=mean:8192;gamma:1.5)",
        ),
        ("meanfilesize", "8k"),
        ("iosize", "64k"),
        ("meanappendsize", "4k"),
        ("meaniosize", "4k"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

fn pmo_store(bytes: u64, scheme: &str) -> FileStore {
    let pool = Pool::create_on(
        Arc::new(CrashMedium::new(bytes)),
        &PoolOptions {
            kdf: KdfParams::INSECURE_FAST,
            ns_capacity: Some(512),
            scheme: Scheme::from_name(scheme).unwrap(),
            ..Default::default()
        },
    )
    .unwrap();
    FileStore::open(pool, FsOptions::default()).unwrap()
}

fn opts(sync: SyncMode) -> RunOptions {
    opts_for(sync, 0.4)
}

fn opts_for(sync: SyncMode, seconds: f64) -> RunOptions {
    RunOptions {
        seconds_cap: Some(seconds),
        sync,
        ..Default::default()
    }
}

/// Time caps of a brief run, shortest first: a loaded machine (CI shares two cores) may get
/// through too few operations in the first to read or write anything, so a run that did not
/// reach `enough` is repeated on a fresh store with the next cap; the last one is asserted.
const CAPS: [f64; 3] = [0.4, 1.6, 6.4];

fn exercise(w: &Workload, label: &str) {
    for sync in [SyncMode::Paper, SyncMode::Fsync] {
        let wants_writes = w.name != "webproxy" || sync == SyncMode::Paper;
        let enough = |r: &pmo_filebench::run::RunResult| {
            r.ops > 0 && r.read_bytes > 0 && (!wants_writes || r.write_bytes > 0)
        };
        let (fs, b, r) = CAPS
            .iter()
            .enumerate()
            .find_map(|(i, &cap)| {
                // Room for webserver's log: with closes not psyncing (write-back), 0.4 s appends more than
                // 16 MiB on a quiet machine, and its growth to 32 MiB needs a 32 MiB free extent.
                let fs = pmo_store(256 << 20, "secure");
                let b = PmoBackend { fs: fs.clone() };
                let r = run(w, &b, &opts_for(sync, cap))
                    .unwrap_or_else(|e| panic!("{label} pmo {sync:?}: {e}"));
                if enough(&r) || i + 1 == CAPS.len() {
                    return Some((fs, b, r));
                }
                drop(b);
                pmo_store::wait_for_background_detaches();
                None
            })
            .expect("the last cap returns");
        assert!(r.ops > 0 && r.read_bytes > 0, "{label} pmo: {r:?}");
        if wants_writes {
            assert!(r.write_bytes > 0, "{label} pmo: {r:?}");
        }
        if sync == SyncMode::Paper {
            assert!(r.syncs > 0, "{label}: paper mode psyncs after writes");
        }
        // Closed files are written back within a second of their close (`pmo_fs::WriteBack`);
        // the categories count a session once it is written back.
        fs.sync_all().unwrap();
        let c = fs.check().unwrap();
        assert!(c.problems.is_empty(), "{label}: {:?}", c.problems);
        assert_eq!(c.used_bytes + c.free_bytes, c.heap_bytes);
        assert!(c.files > 0);
        assert!(
            fs.session_stats().psyncs > 0,
            "{label}: store categories counted"
        );
        drop(b);
        pmo_store::wait_for_background_detaches();
    }
    let dir = std::env::temp_dir().join(format!("pmo-fb-test-{}-{label}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let b = PosixBackend::new(dir.clone());
    let mut r = None;
    for cap in CAPS {
        let _ = std::fs::remove_dir_all(&dir);
        let got = run(w, &b, &opts_for(SyncMode::Fsync, cap))
            .unwrap_or_else(|e| panic!("{label} posix: {e}"));
        let done = got.ops > 0 && got.read_bytes > 0;
        r = Some(got);
        if done {
            break;
        }
    }
    let r = r.expect("at least one run");
    assert!(r.ops > 0 && r.read_bytes > 0, "{label} posix: {r:?}");
    assert!(b.kind() == "posix" && dir.join("tmp").is_dir());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn filebench_own_files_run_unchanged() {
    let Some(d) = shared_dir() else { return };
    for name in personalities::NAMES {
        let path = d.join(format!("{name}.f"));
        let text = std::fs::read_to_string(&path).unwrap();
        let w = Workload::from_text(&path.display().to_string(), &text, &small())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(w.filesets[0].entries, 24);
        assert_eq!(w.threads.len(), 3);
        exercise(&w, name);
    }
}

#[test]
fn built_in_personalities_run() {
    for name in personalities::NAMES {
        let w = personalities::personality(name, &small()).unwrap();
        exercise(&w, &format!("builtin-{name}"));
    }
}

#[test]
fn a_full_store_is_an_error_the_run_reports() {
    let w = personalities::personality(
        "fileserver",
        &[
            ("nfiles".into(), "400".into()),
            ("nthreads".into(), "2".into()),
        ],
    )
    .unwrap();
    let fs = pmo_store(4 << 20, "none");
    let b = PmoBackend { fs: fs.clone() };
    let e = run(&w, &b, &opts(SyncMode::Fsync)).unwrap_err();
    assert!(
        matches!(e, RunError::Setup { .. } | RunError::Flowop { .. }),
        "{e}"
    );
    assert!(e.to_string().contains("full"), "{e}");
    let c = fs.check().unwrap();
    assert!(c.problems.is_empty(), "{:?}", c.problems);
}

//! `pmo lmdb stat|dump|load|copy|drop`: LMDB's tools on environments in PMOs, exit codes 0/1.

mod common;

use std::process::{Command, Stdio};

fn pmo(
    pool: &std::path::Path,
    key: &str,
    args: &[&str],
    stdin: Option<&str>,
) -> std::process::Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_pmo"))
        .args(args)
        .env("PMO_POOL", pool)
        .env("PMO_KEY", key)
        .env("PMO_LMDB_LOCKDIR", pool.with_extension("locks"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::feed(c.stdin.take(), stdin.unwrap_or("").as_bytes());
    c.wait_with_output().unwrap()
}

#[test]
fn lmdb_tools_on_pmos() {
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("p.pool");
    let out = pmo(
        &pool,
        "k",
        &[
            "init",
            "--size",
            "256MiB",
            "--sparse",
            "--kdf-mem-kib",
            "64",
            "--kdf-iters",
            "1",
        ],
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // load from stdin into a new PMO, then stat and dump it
    let dump =
        "VERSION=3\nformat=print\ntype=btree\nHEADER=END\n alpha\n one\n beta\n two\nDATA=END\n";
    let out = pmo(&pool, "k", &["lmdb", "load", "db"], Some(dump));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = pmo(&pool, "k", &["lmdb", "stat", "db"], None);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("Entries: 2"));
    let out = pmo(&pool, "k", &["lmdb", "dump", "-p", "db"], None);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.contains(" alpha\n one\n beta\n two\n"), "{text}");
    // copy to a directory: an ordinary LMDB environment
    let copy = dir.path().join("copy");
    std::fs::create_dir(&copy).unwrap();
    let out = pmo(
        &pool,
        "k",
        &["lmdb", "copy", "db", copy.to_str().unwrap()],
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(copy.join("data.mdb").is_file());
    // errors: one clear line from pmo, exit 1
    for (key, args, msg) in [
        (
            "wrong",
            vec!["lmdb", "stat", "db"],
            "wrong key for PMO 'db'",
        ),
        (
            "k",
            vec!["lmdb", "stat", "missing"],
            "no PMO named 'missing'",
        ),
        ("k", vec!["lmdb", "frob", "db"], "unknown LMDB tool 'frob'"),
    ] {
        let out = pmo(&pool, key, &args, None);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.lines()
                .any(|l| l.starts_with("pmo: ") && l.contains(msg)),
            "{args:?}: {err}"
        );
    }
    // drop empties the database
    assert!(pmo(&pool, "k", &["lmdb", "drop", "db"], None)
        .status
        .success());
    let out = pmo(&pool, "k", &["lmdb", "stat", "db"], None);
    assert!(String::from_utf8_lossy(&out.stdout).contains("Entries: 0"));
}

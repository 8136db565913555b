//! `scripts/run` needs no input and does the same every time (issue 17, item 1): its demo part
//! runs twice in a row without a terminal and without a key, each time from a fresh demo pool,
//! even when the default pool holds a `demo-list` under another key from an earlier run.

use std::path::PathBuf;
use std::process::{Command, Stdio};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Run `scripts/run --demo-only` with the test's `pmo` binary; (exit code, stdout, stderr).
fn run_demo(out: &std::path::Path, default_pool: &std::path::Path) -> (i32, String, String) {
    let o = Command::new(repo().join("scripts/run"))
        .arg("--demo-only")
        .env("PMO_BIN", env!("CARGO_BIN_EXE_pmo"))
        .env("PMO_RUN_OUT", out)
        .env("PMO_POOL", default_pool)
        .env("PMO_KEY", "a key the demo pool must not get")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The output without what legitimately changes between runs (addresses, times).
fn stable(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| {
            l.split_whitespace()
                .filter(|w| {
                    !w.starts_with("0x")
                        && !w.starts_with("[")
                        && !w.chars().next().is_some_and(|c| c.is_ascii_digit())
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

#[test]
fn the_demo_of_scripts_run_needs_no_input_and_repeats_exactly() {
    let d = std::env::temp_dir().join(format!("pmo-run-script-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    // An earlier run (or the user) left a demo-list under another key in the default pool.
    let default_pool = d.join("default.pool");
    let pmo = |args: &[&str], key: &str| {
        let o = Command::new(env!("CARGO_BIN_EXE_pmo"))
            .args(args)
            .env("PMO_POOL", &default_pool)
            .env("PMO_KEY", key)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    pmo(
        &[
            "init",
            "--size",
            "16MiB",
            "--sparse",
            "--kdf-mem-kib",
            "64",
            "--kdf-iters",
            "1",
        ],
        "x",
    );
    pmo(
        &["create", "demo-list", "--size", "1MiB"],
        "typed at an old prompt",
    );

    let out = d.join("out");
    let (c1, o1, e1) = run_demo(&out, &default_pool);
    assert_eq!(c1, 0, "first run: {o1}\n{e1}");
    let (c2, o2, e2) = run_demo(&out, &default_pool);
    assert_eq!(c2, 0, "second run: {o2}\n{e2}");
    assert_eq!(stable(&o1), stable(&o2), "same result every time");
    assert!(o1.contains("==> "), "says what it does: {o1}");
    assert!(o1.contains("demo key \"demo\""), "{o1}");
    assert!(
        o1.contains("2 nodes in all"),
        "the second process found the list: {o1}"
    );
    assert!(!o1.contains("key:"), "no prompt: {o1}");
    let _ = std::fs::remove_dir_all(&d);
}

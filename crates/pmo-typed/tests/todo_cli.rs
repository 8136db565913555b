//! The `todo` example application end to end: add, list (read-only attach), done, rm, range
//! listing, and a user error (exit 1, one line on stderr). `cargo test` builds the examples
//! next to the test binaries; the test is skipped (with a note) if the binary is missing.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::Command;

fn todo_bin() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let bin = exe.parent()?.parent()?.join("examples").join("todo");
    bin.exists().then_some(bin)
}

fn run(bin: &PathBuf, pool: &PathBuf, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin)
        .arg(pool)
        .args(args)
        .env("TODO_KEY", "test-key")
        .output()
        .expect("run todo");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn todo_commands_persist_across_runs() {
    let Some(bin) = todo_bin() else {
        eprintln!("examples/todo not built; skipped");
        return;
    };
    let pool = std::env::temp_dir().join(format!("pmo-typed-todo-{}.pool", std::process::id()));
    let _ = std::fs::remove_file(&pool);
    assert_eq!(
        run(&bin, &pool, &["list"]).1,
        "",
        "a new pool lists nothing"
    );
    for (i, t) in ["buy milk", "write docs", "ship it"].iter().enumerate() {
        let (code, out, _) = run(&bin, &pool, &["add", t]);
        assert_eq!((code, out.trim()), (0, (i + 1).to_string().as_str()));
    }
    assert_eq!(run(&bin, &pool, &["done", "2"]).0, 0);
    assert_eq!(run(&bin, &pool, &["rm", "1"]).0, 0);
    let (code, out, _) = run(&bin, &pool, &["list"]);
    assert_eq!(code, 0);
    assert_eq!(out, "   2 [x] write docs\n   3 [ ] ship it\n");
    let (_, out, _) = run(&bin, &pool, &["list", "--from", "3", "--to", "3"]);
    assert_eq!(out, "   3 [ ] ship it\n");
    let (code, _, err) = run(&bin, &pool, &["rm", "9"]);
    assert_eq!(code, 1);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains("no task 9"), "{err}");
    let _ = std::fs::remove_file(&pool);
}

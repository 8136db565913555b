//! `pmo resize` and `pmo pool grow` as a user meets them: exit 0 with the data kept, 1 with one
//! clear line for a shrink over data, a pool without room, a pool asked to shrink; `pmo create
//! --max-size` and in-place resizes.

mod common;

use std::process::{Command, Output, Stdio};

fn run(pool: &std::path::Path, args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_pmo"))
        .args(args)
        .env("PMO_POOL", pool)
        .env("PMO_KEY", "resize-cli")
        .env_remove("PMO_MEDIUM")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::feed(child.stdin.take(), stdin);
    child.wait_with_output().unwrap()
}

/// Exit code `want`; for a failure, one line on stderr containing `needle`.
fn expect(o: &Output, want: i32, needle: &str) -> String {
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    );
    assert_eq!(o.status.code(), Some(want), "stdout {out:?} stderr {err:?}");
    if want != 0 {
        assert_eq!(err.trim_end().lines().count(), 1, "{err:?}");
    }
    assert!(
        out.contains(needle) || err.contains(needle),
        "{needle:?} not in {out:?} / {err:?}"
    );
    out
}

#[test]
fn resize_and_pool_grow_from_the_command_line() {
    let dir = std::env::temp_dir().join(format!("pmo-cli-resize-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let pool = dir.join("p.pool");
    let fast = ["--kdf-mem-kib", "64", "--kdf-iters", "1"];
    let mut init = vec!["init", "--size", "4MiB"];
    init.extend(fast);
    expect(&run(&pool, &init, b""), 0, "created pool");
    expect(
        &run(&pool, &["create", "a", "--size", "64KiB"], b""),
        0,
        "created",
    );
    let write = ["write", "a", "--offset", "40000"];
    expect(&run(&pool, &write, b"tail data"), 0, "wrote");
    // Grow: the data is still there.
    let out = expect(
        &run(&pool, &["resize", "a", "--size", "1MiB"], b""),
        0,
        "grew",
    );
    assert!(out.contains("from 65536 to 1048576"), "{out}");
    let read = ["read", "a", "--offset", "40000", "--len", "9"];
    expect(&run(&pool, &read, b""), 0, "tail data");
    // Shrinking over the data: refused (exit 1), then forced.
    let shrink = ["resize", "a", "--size", "8KiB"];
    expect(&run(&pool, &shrink, b""), 1, "holds data");
    expect(&run(&pool, &read, b""), 0, "tail data");
    expect(
        &run(&pool, &["resize", "a", "--size", "8KiB", "--force"], b""),
        0,
        "1 dropped",
    );
    // No room: exit 1, naming `pmo pool grow`; after growing the pool it fits.
    let big = ["resize", "a", "--size", "3MiB"];
    expect(&run(&pool, &big, b""), 1, "pmo pool grow");
    expect(
        &run(&pool, &["pool", "grow", "--size", "16MiB"], b""),
        0,
        "grew pool",
    );
    expect(&run(&pool, &big, b""), 0, "grew PMO");
    expect(
        &run(&pool, &["pool", "grow", "--size", "8MiB"], b""),
        1,
        "only grows",
    );
    expect(&run(&pool, &["check"], b""), 0, "");
    // A PMO laid out for a maximum size: resizes up to it are in place, metadata only.
    let create = ["create", "m", "--size", "8KiB", "--max-size", "1MiB"];
    expect(&run(&pool, &create, b""), 0, "created");
    expect(
        &run(&pool, &["info", "m"], b""),
        0,
        "capacity:        1 MiB",
    );
    let out = expect(
        &run(&pool, &["resize", "m", "--size", "1MiB"], b""),
        0,
        "in place, capacity 1048576 bytes",
    );
    assert!(out.contains("from 8192 to 1048576"), "{out}");
    expect(
        &run(&pool, &["resize", "m", "--size", "4KiB"], b""),
        0,
        "shrank PMO 'm' from 1048576 to 4096 bytes",
    );
    let out = expect(
        &run(&pool, &["resize", "m", "--size", "2MiB"], b""),
        0,
        "moved",
    );
    assert!(out.contains("0 committed pages copied"), "{out}");
    let bad = ["create", "n", "--size", "8KiB", "--max-size", "4KiB"];
    expect(&run(&pool, &bad, b""), 1, "below the size");
    let wedi = [
        "create",
        "n",
        "--size",
        "4KiB",
        "--max-size",
        "8KiB",
        "--scheme",
        "wedi",
    ];
    expect(&run(&pool, &wedi, b""), 1, "wedi");
    expect(&run(&pool, &["check"], b""), 0, "");
    let _ = std::fs::remove_dir_all(&dir);
}

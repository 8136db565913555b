//! `pmo fs` as a user meets it: put, ls, cat, rm, mkdir; `pmo fs check` finds an inconsistent
//! store (exit 2, one line per finding); and real SIGKILLs of `pmo fs put` and `pmo fs rm` at
//! random moments, after which `pmo fs check` proves every file whole or empty and no space
//! leaked.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use rand::{Rng, SeedableRng};

struct Tmp(PathBuf);
impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tmpdir(tag: &str) -> Tmp {
    let base = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let d = base.join(format!("pmo-cli-fs-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    Tmp(d)
}

fn cmd(pool: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_pmo"));
    c.args(args)
        .env("PMO_POOL", pool)
        .env_remove("PMO_KEY")
        .env_remove("PMO_MEDIUM")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

fn pmo(pool: &Path, args: &[&str]) -> Output {
    cmd(pool, args).output().unwrap()
}

fn ok(o: &Output) -> String {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn init(dir: &Path, size: &str) -> PathBuf {
    let pool = dir.join("fs.pool");
    ok(&pmo(
        &pool,
        &[
            "init",
            "--size",
            size,
            "--kdf-mem-kib",
            "64",
            "--kdf-iters",
            "1",
        ],
    ));
    pool
}

#[test]
fn put_ls_cat_rm_and_clear_errors() {
    let d = tmpdir("basic");
    let pool = init(&d.0, "32MiB");
    ok(&pmo(&pool, &["fs", "mkdir", "-p", "/a/b"]));
    let src = d.0.join("src");
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&src, &data).unwrap();
    ok(&pmo(&pool, &["fs", "put", "/a/b/f", src.to_str().unwrap()]));
    assert_eq!(pmo(&pool, &["fs", "cat", "/a/b/f"]).stdout, data);
    assert_eq!(ok(&pmo(&pool, &["fs", "ls", "/a"])), "b/\n");
    let all = ok(&pmo(&pool, &["fs", "ls", "-R"]));
    assert_eq!(all, "/:\na/\n/a:\nb/\n/a/b:\nf\t300000\n");
    let c = ok(&pmo(&pool, &["fs", "check"]));
    assert!(c.contains("1 file (300000 bytes)"), "{c}");
    assert!(c.contains("ok:"), "{c}");

    // User errors: exit 1, one line.
    for (args, needle) in [
        (&["fs", "rm", "/a"][..], "not empty"),
        (&["fs", "cat", "/nope"], "no such file"),
        (&["fs", "mkdir", "rel"], "not absolute"),
        (&["fs", "cat", "/a"], "is a directory"),
    ] {
        let o = pmo(&pool, args);
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {e}");
        assert_eq!(e.trim_end().lines().count(), 1, "{args:?}: {e:?}");
        assert!(e.contains(needle), "{args:?}: {e:?}");
    }
    ok(&pmo(&pool, &["fs", "rm", "/a/b/f"]));
    ok(&pmo(&pool, &["fs", "rm", "/a/b"]));
    assert_eq!(ok(&pmo(&pool, &["fs", "ls", "/a"])), "");
}

/// `--pool` and `--key-file` work before and after the action, as a user types them, for `pmo
/// fs` and `pmo scheme`; the option after the action wins over PMO_POOL.
#[test]
fn put_of_endless_input_stops_at_the_pool_size() {
    let d = tmpdir("endless");
    let pool = init(&d.0, "8MiB");
    // Under a 1 GiB address-space limit, so that reading all of it could not take the machine.
    let limited = |args: &[&str], stdin: Stdio| {
        Command::new("sh")
            .arg("-c")
            .arg("ulimit -v 1048576; exec \"$0\" \"$@\"")
            .arg(env!("CARGO_BIN_EXE_pmo"))
            .args(args)
            .env("PMO_POOL", &pool)
            .env_remove("PMO_KEY")
            .env_remove("PMO_MEDIUM")
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .unwrap()
    };
    let zero = || Stdio::from(std::fs::File::open("/dev/zero").unwrap());
    for o in [
        limited(&["fs", "put", "/z", "/dev/zero"], Stdio::null()),
        limited(&["fs", "put", "/z"], zero()),
    ] {
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{e}");
        assert_eq!(e.trim_end().lines().count(), 1, "{e}");
        assert!(e.contains("full"), "{e}");
    }
    assert_eq!(ok(&pmo(&pool, &["fs", "ls"])), "");
    ok(&pmo(&pool, &["fs", "check"]));
}

#[test]
fn pool_and_key_options_go_before_or_after_the_action() {
    let d = tmpdir("order");
    let pool = init(&d.0, "16MiB");
    let p = pool.to_str().unwrap();
    let elsewhere = d.0.join("absent.pool");
    let key = d.0.join("key");
    std::fs::write(&key, "pmo-fs").unwrap();
    let k = key.to_str().unwrap();
    ok(&pmo(&elsewhere, &["fs", "mkdir", "--pool", p, "/x"]));
    for args in [
        &["fs", "--pool", p, "check"][..],
        &["fs", "check", "--pool", p],
        &["fs", "ls", "--pool", p, "--key-file", k, "/"],
        &["fs", "--key-file", k, "ls", "/", "--pool", p],
    ] {
        let out = ok(&pmo(&elsewhere, args));
        assert!(
            out.contains("1 directory") || out == "x/\n",
            "{args:?}: {out:?}"
        );
    }
    for args in [
        &["scheme", "--pool", p, "show"][..],
        &["scheme", "show", "--pool", p],
    ] {
        let out = ok(&pmo(&elsewhere, args));
        assert!(
            out.starts_with("default scheme of new PMOs: secure"),
            "{args:?}: {out}"
        );
    }
    assert!(
        !elsewhere.exists(),
        "PMO_POOL was used although --pool was given"
    );
}

#[test]
fn check_reports_each_inconsistency_and_exits_2() {
    let d = tmpdir("bad");
    let pool = init(&d.0, "16MiB");
    ok(&pmo(&pool, &["fs", "mkdir", "/d"]));
    // Behind the store's back: a file whose directory does not exist, and a name that is both
    // a file and a directory.
    for name in ["F\u{2215}gone\u{2215}x", "F\u{2215}d"] {
        let o = cmd(&pool, &["create", name, "--size", "4096"])
            .env("PMO_KEY", "pmo-fs")
            .output()
            .unwrap();
        ok(&o);
    }
    let o = pmo(&pool, &["fs", "check"]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    let problems: Vec<&str> = e.lines().filter(|l| l.starts_with("problem: ")).collect();
    assert_eq!(problems.len(), 2, "{e}");
    assert!(
        e.contains("/gone/x: its parent directory does not exist"),
        "{e}"
    );
    assert!(e.contains("/d is both a file and a directory"), "{e}");
    assert!(e.trim_end().ends_with("pmo: 2 problem(s) found"), "{e}");
}

fn content(i: u32) -> Vec<u8> {
    let n = 200_000 + (i as usize % 7) * 90_000;
    (0..n).map(|j| ((j as u32 * 7 + i) % 253) as u8).collect()
}

/// Kill `pmo fs put` (files that grow over several segments) and `pmo fs rm` at random
/// moments; after each kill `pmo fs check` exits 0 (nothing leaked, every file reads whole,
/// every directory entry has its directory) and each file is absent, empty or whole.
#[test]
fn sigkill_of_put_and_rm_leaves_a_store_that_checks() {
    let kills: usize = std::env::var("PMO_FS_CLI_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let d = tmpdir("kill");
    let pool = init(&d.0, "64MiB");
    ok(&pmo(&pool, &["fs", "mkdir", "/k"]));
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x005e_edf5);
    let mut interrupted = 0;
    for k in 0..kills as u32 {
        let src = d.0.join(format!("src{k}"));
        std::fs::write(&src, content(k)).unwrap();
        let path = format!("/k/{}", k % 5);
        let mut child = if k % 3 == 2 {
            cmd(&pool, &["fs", "rm", &path]).spawn().unwrap()
        } else {
            let _ = pmo(&pool, &["fs", "rm", &path]);
            cmd(&pool, &["fs", "put", &path, src.to_str().unwrap()])
                .spawn()
                .unwrap()
        };
        std::thread::sleep(Duration::from_micros(rng.gen_range(0..60_000)));
        let _ = child.kill();
        let st = child.wait().unwrap();
        interrupted += usize::from(st.code().is_none());
        let _ = std::fs::remove_file(&src);

        let c = pmo(&pool, &["fs", "check"]);
        let out = String::from_utf8_lossy(&c.stdout);
        let err = String::from_utf8_lossy(&c.stderr);
        assert_eq!(c.status.code(), Some(0), "kill {k}: {out}{err}");
        assert!(out.contains("ok:"), "kill {k}: {out}");
        for i in 0..5u32 {
            let o = pmo(&pool, &["fs", "cat", &format!("/k/{i}")]);
            if o.status.code() == Some(1) {
                continue; // absent
            }
            assert!(
                o.status.success(),
                "kill {k}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            let got = o.stdout;
            let whole = (0..kills as u32)
                .filter(|j| j % 5 == i)
                .any(|j| content(j) == got);
            assert!(
                got.is_empty() || whole,
                "kill {k}: /k/{i} torn ({} bytes)",
                got.len()
            );
        }
    }
    // Some kills must land inside the command, or the test proves nothing.
    assert!(interrupted > 0, "no kill interrupted a command");
}

//! Issue 31: `pmo destroy` removes an LMDB PMO's lock directory; `pmo lmdb locks` lists the lock
//! directories, live or orphan, and `--clean` removes the orphans no process uses; one another
//! process has open is kept, and removed by that process's close (its pool file is gone). Nothing is left under the lock
//! directory at the end. On the way, the busy row of docs/c-api.md's table: `pmo destroy` of a
//! PMO another process holds.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

struct T {
    pool: PathBuf,
    locks: PathBuf,
}

impl T {
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_pmo"));
        c.args(args)
            .env("PMO_POOL", &self.pool)
            .env("PMO_KEY", "k")
            .env("PMO_LMDB_LOCKDIR", &self.locks)
            .env("PMO_LMDB_SIZE", "1M")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    fn run(&self, args: &[&str], stdin: &str) -> Output {
        let mut c = self.cmd(args).stdin(Stdio::piped()).spawn().unwrap();
        let mut input = c.stdin.take().unwrap();
        let _ = input.write_all(stdin.as_bytes());
        drop(input);
        c.wait_with_output().unwrap()
    }

    fn ok(&self, args: &[&str], stdin: &str) -> String {
        let out = self.run(args, stdin);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The lock directories, by the PMO their name starts with.
    fn dirs(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.locks)
            .map(|rd| {
                rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    /// `pmo lmdb locks`'s line about PMO `name`'s directory.
    fn line(out: &str, name: &str) -> Option<String> {
        out.lines()
            .find(|l| l.contains(&format!("/pmo-lmdb-{name}-")))
            .map(str::to_owned)
    }
}

const HEADER: &str = "VERSION=3\nformat=print\ntype=btree\nHEADER=END\n";
const DUMP: &str = "VERSION=3\nformat=print\ntype=btree\nHEADER=END\n alpha\n one\nDATA=END\n";

fn lock_dir_of(t: &T, name: &str) -> Option<PathBuf> {
    t.dirs()
        .into_iter()
        .find(|d| d.starts_with(&format!("pmo-lmdb-{name}-")))
        .map(|d| t.locks.join(d))
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn loader_holding(t: &T, name: &str) -> Child {
    // mdb_load reads the header, opens the environment, then waits for the data on its stdin.
    let mut c = t
        .cmd(&["lmdb", "load", name])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin
        .as_mut()
        .unwrap()
        .write_all(HEADER.as_bytes())
        .unwrap();
    c.stdin.as_mut().unwrap().flush().unwrap();
    c
}

#[test]
fn destroy_and_locks_clean_leave_no_lock_directory() {
    let dir = tempfile::tempdir().unwrap();
    let t = T {
        pool: dir.path().join("p.pool"),
        locks: dir.path().join("locks"),
    };
    std::fs::create_dir(&t.locks).unwrap();
    t.ok(
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
        "",
    );
    for name in ["a", "b", "c"] {
        t.ok(&["lmdb", "load", name], DUMP);
    }
    t.ok(&["create", "plain", "--size", "4KiB"], "");
    assert_eq!(t.dirs().len(), 3, "{:?}", t.dirs());
    let out = t.ok(&["lmdb", "locks"], "");
    for name in ["a", "b", "c"] {
        let l = T::line(&out, name).unwrap_or_else(|| panic!("{out}"));
        let pool = std::fs::canonicalize(&t.pool).unwrap();
        let want = format!(": PMO '{name}' of {}: live", pool.display());
        assert!(l.ends_with(&want), "{l}");
    }
    assert!(out.ends_with(": 3 live, 0 orphans\n"), "{out}");

    // destroy takes the PMO's lock directory with it; a PMO without one is destroyed quietly.
    let a = lock_dir_of(&t, "a").unwrap();
    t.ok(&["destroy", "a"], "");
    assert!(!a.exists());
    let out = t.run(&["destroy", "plain"], "");
    assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");

    // Another process has d's environment open (a new PMO: its directory appears once the
    // loader has attached it) when the pool file goes: d is an orphan in use, kept by --clean;
    // b and c, orphans nobody uses, are removed.
    let mut loader = loader_holding(&t, "d");
    wait_for("the loader's lock file", || {
        lock_dir_of(&t, "d").is_some_and(|d| d.join("lock.mdb").exists())
    });
    let lock = lock_dir_of(&t, "d").unwrap().join("lock.mdb");
    // Busy, the CLI's row of docs/c-api.md's "One situation, one answer", word for word.
    let out = t.run(&["destroy", "d"], "");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "pmo: PMO 'd' is attached read-write by another process\n"
    );
    std::fs::remove_file(&t.pool).unwrap();
    // (LMDB locks its lock file just after creating it: a listing meanwhile removes nothing.)
    wait_for("d listed as an orphan in use", || {
        let out = t.ok(&["lmdb", "locks"], "");
        T::line(&out, "d").is_some_and(|l| {
            l.contains(": PMO 'd' of ") && l.ends_with(": orphan (pool gone), in use")
        })
    });
    let out = t.ok(&["lmdb", "locks", "--clean"], "");
    let line = |name: &str| T::line(&out, name).unwrap_or_else(|| panic!("{name}: {out}"));
    assert!(
        line("d").ends_with(": orphan (pool gone): in use, kept"),
        "{out}"
    );
    assert!(
        line("b").ends_with(": orphan (pool gone): removed"),
        "{out}"
    );
    assert!(
        line("c").ends_with(": orphan (pool gone): removed"),
        "{out}"
    );
    assert!(out.ends_with(": 0 live, 3 orphans, 2 removed\n"), "{out}");
    assert!(lock.is_file());
    assert_eq!(t.dirs().len(), 1, "{:?}", t.dirs());

    // The loader finishes (into the deleted pool file) and closes: its close removes d's
    // directory, the pool file being gone; a --clean after it finds nothing.
    {
        let mut input = loader.stdin.take().unwrap();
        input.write_all(b" k\n v\nDATA=END\n").unwrap();
    }
    let out = loader.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(t.dirs(), Vec::<String>::new());
    let out = t.ok(&["lmdb", "locks", "--clean"], "");
    assert!(out.ends_with(": 0 live, 0 orphans, 0 removed\n"), "{out}");

    // Usage errors: one line, exit 1.
    let out = t.run(&["lmdb", "locks", "--frob"], "");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("pmo: pmo lmdb locks: unknown argument '--frob'"),
        "{err}"
    );
}

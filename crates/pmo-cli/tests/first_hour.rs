//! A new user's first hour (issue 17): each thing that got in the way, as a test that would
//! have caught it.

mod common;

use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

struct Tmp(PathBuf);
impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tmpdir(tag: &str) -> Tmp {
    let d = std::env::temp_dir().join(format!("pmo-first-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    Tmp(d)
}

fn cmd(pool: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_pmo"));
    c.args(args)
        .env("PMO_POOL", pool)
        .env("PMO_KEY", "k")
        .env("HOME", pool.parent().unwrap())
        .stdin(Stdio::null());
    for v in [
        "PMO_MEDIUM",
        "PMO_FAULT",
        "PMO_PREDICT",
        "PMO_LATENCY",
        "PMO_DIRTY",
        "PMO_SCHEME",
        "PMO_NUMA_NODE",
        "PMO_FAULT_AROUND",
        "PMO_DETACH_INLINE_PAGES",
        "PMO_HOT_PAGES",
        "PMO_YCSB_DIR",
    ] {
        c.env_remove(v);
    }
    c
}

fn pmo(pool: &Path, args: &[&str]) -> Output {
    cmd(pool, args).output().unwrap()
}

fn pmo_in(pool: &Path, args: &[&str], input: &[u8]) -> Output {
    let mut c = cmd(pool, args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::feed(c.stdin.take(), input);
    c.wait_with_output().unwrap()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn ok(pool: &Path, args: &[&str]) -> String {
    let o = pmo(pool, args);
    assert_eq!(o.status.code(), Some(0), "{args:?}: {}", err(&o));
    out(&o)
}

/// Exit code `code`, one line on stderr that contains every needle (case-insensitive) and
/// repeats no part of itself.
fn one_line(o: &Output, code: i32, needles: &[&str]) -> String {
    let e = err(o);
    assert_eq!(o.status.code(), Some(code), "stderr: {e}");
    assert_eq!(e.trim_end().lines().count(), 1, "one line: {e:?}");
    for n in needles {
        assert!(
            e.to_lowercase().contains(&n.to_lowercase()),
            "{n:?} not in {e:?}"
        );
    }
    assert!(
        !e.contains("os error") && !e.contains("errno"),
        "words, not numbers: {e}"
    );
    let parts: Vec<&str> = e.trim_end().split(": ").collect();
    for (i, p) in parts.iter().enumerate() {
        assert!(
            !parts[i + 1..].contains(p) || p.len() < 8,
            "{p:?} repeated in {e:?}"
        );
    }
    e
}

fn init(pool: &Path) {
    ok(
        pool,
        &[
            "init",
            "--size",
            "32MiB",
            "--sparse",
            "--kdf-mem-kib",
            "64",
            "--kdf-iters",
            "1",
        ],
    );
}

/// Run `pmo` with a standard output whose reader is already gone.
fn closed_stdout(pool: &Path, args: &[&str]) -> Output {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` has room for the two descriptors pipe(2) returns.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: both descriptors were just returned by pipe(2) and are owned by nobody else.
    let (reader, writer) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(reader);
    cmd(pool, args)
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

#[test]
fn item2_a_closed_stdout_never_panics() {
    let d = tmpdir("pipe");
    let pool = d.0.join("p.pool");
    let o = closed_stdout(
        &pool,
        &[
            "init",
            "--size",
            "32MiB",
            "--sparse",
            "--kdf-mem-kib",
            "64",
            "--kdf-iters",
            "1",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(pool.exists(), "init did its work before it printed");
    ok(&pool, &["create", "a", "--size", "64KiB"]);
    let recs = d.0.join("r.json");
    std::fs::write(&recs, r#"{"records":[{"bench":"suite","params":{"study":"breakdown","workload":"gauss","scheme":"wedi"},"metric":"wall_s","value":1.0,"unit":"s","samples":3}]}"#).unwrap();
    let recs = recs.to_str().unwrap().to_string();
    let out_dir = d.0.join("figs");
    let out_dir = out_dir.to_str().unwrap().to_string();
    for args in [
        vec!["create", "b", "--size", "64KiB"],
        vec!["list"],
        vec!["info"],
        vec!["info", "a"],
        vec!["read", "a", "--len", "64KiB"],
        vec!["check"],
        vec!["check", "a"],
        vec!["scheme", "show"],
        vec!["scheme", "set", "secure"],
        vec!["destroy", "b"],
        vec!["demo"],
        vec!["bench", "suite", "--from", &recs, "--out", &out_dir],
        vec!["--help"],
        vec!["create", "--help"],
        vec!["--version"],
    ] {
        let o = closed_stdout(&pool, &args);
        assert!(!err(&o).contains("panicked"), "{args:?}: {}", err(&o));
        assert_eq!(
            o.status.code(),
            Some(0),
            "{args:?} exits quietly: {}",
            err(&o)
        );
        assert_eq!(err(&o), "", "{args:?}: nothing on stderr");
    }
    // The simulator ends the Unix way: killed by SIGPIPE, no panic.
    let o = closed_stdout(
        &pool,
        &["cxlsim", "trace", "--workload", "fft", "--size", "small"],
    );
    assert!(!err(&o).contains("panicked"), "{}", err(&o));
    // And nothing was lost: the pool checks clean.
    ok(&pool, &["check", "a"]);
}

#[test]
fn item3_a_failed_init_removes_what_it_created() {
    let d = tmpdir("init");
    // A bad environment knob: nothing is created at all.
    let pool = d.0.join("sub/dir/p.pool");
    let o = cmd(&pool, &["init", "--size", "32MiB"])
        .env("PMO_LATENCY", "bogus")
        .output()
        .unwrap();
    one_line(&o, 1, &["PMO_LATENCY", "bogus"]);
    assert!(!d.0.join("sub").exists(), "no directories left behind");
    // A medium that cannot work here (dax on a file of a non-DAX filesystem) fails after the
    // file was made: the file goes again, so the next init works.
    let pool = d.0.join("p.pool");
    let o = pmo(&pool, &["init", "--size", "64MiB", "--medium", "dax"]);
    if o.status.code() != Some(0) {
        one_line(&o, 1, &["dax"]);
        assert!(!pool.exists(), "the failed init's file is gone");
        init(&pool);
    }
    // An existing file is never overwritten or removed.
    let o = pmo(&pool, &["init", "--size", "32MiB"]);
    one_line(&o, 1, &["already exists"]);
    assert!(pool.exists());
    ok(&pool, &["check"]);
}

#[test]
fn item5_errors_are_one_clear_line_with_the_fix() {
    let d = tmpdir("errors");
    let missing = d.0.join("missing.pool");
    let o = pmo(&missing, &["list"]);
    let line = one_line(&o, 1, &["no pool", "pmo init"]);
    // Issue 31: word for word the sentence of Rust's StoreError::NoPool, C's and Python's.
    let sentence = pmo_store::StoreError::NoPool {
        path: missing.clone(),
    }
    .to_string();
    assert_eq!(line.trim_end(), format!("pmo: {sentence}"));
    assert!(!missing.exists(), "the missing pool was created");
    let o = pmo(Path::new("/dev/null"), &["list"]);
    one_line(&o, 1, &["not a pmo pool"]);
    let pool = d.0.join("p.pool");
    init(&pool);
    ok(&pool, &["create", "a", "--size", "64KiB"]);
    for (var, args) in [
        ("PMO_LATENCY", vec!["list"]),
        ("PMO_FAULT", vec!["read", "a", "--len", "1"]),
        ("PMO_PREDICT", vec!["read", "a", "--len", "1"]),
        ("PMO_DIRTY", vec!["list"]),
        ("PMO_SCHEME", vec!["list"]),
        ("PMO_MEDIUM", vec!["list"]),
        ("PMO_NUMA_NODE", vec!["list"]),
        ("PMO_FAULT_AROUND", vec!["list"]),
        ("PMO_DETACH_INLINE_PAGES", vec!["list"]),
        ("PMO_HOT_PAGES", vec!["list"]),
        ("PMO_YCSB_DIR", vec!["bench", "ycsb"]),
    ] {
        let o = cmd(&pool, &args).env(var, "bogus").output().unwrap();
        one_line(&o, 1, &[var, "bogus"]);
    }
    // Another benchmark's flags given to `pmo bench ycsb|lmdb`: refused before anything runs,
    // not ignored (a full run of A-F instead of the file asked for).
    for (which, flag, value) in [
        ("ycsb", "--workload", "workloadx"),
        ("ycsb", "--threads", "4"),
        ("lmdb", "--study", "breakdown"),
        ("ycsb", "--size", "tiny"),
    ] {
        let o = cmd(&pool, &["bench", which, flag, value]).output().unwrap();
        one_line(&o, 1, &[flag, "not an option"]);
    }
    // A fault-around window of 0 pages is no window (1 is "off").
    let o = cmd(&pool, &["list"])
        .env("PMO_FAULT_AROUND", "0")
        .output()
        .unwrap();
    one_line(&o, 1, &["PMO_FAULT_AROUND", "\"0\""]);
    for (var, good) in [("PMO_FAULT_AROUND", "1"), ("PMO_DETACH_INLINE_PAGES", "0")] {
        let o = cmd(&pool, &["read", "a", "--len", "1"])
            .env(var, good)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{var}={good}: {}", err(&o));
    }
    let o = pmo_in(&pool, &["write", "a", "--offset", "0"], b"x");
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
}

#[test]
fn item4_names_with_control_characters_are_refused_and_wide_names_align() {
    let d = tmpdir("names");
    let pool = d.0.join("p.pool");
    init(&pool);
    for bad in ["a\nb", "tab\there", "esc\u{1b}[31m"] {
        let o = pmo(&pool, &["create", bad, "--size", "4KiB"]);
        one_line(&o, 1, &["control character"]);
    }
    ok(&pool, &["create", "日本語の名前", "--size", "4KiB"]);
    ok(&pool, &["create", "plain", "--size", "4KiB"]);
    let list = ok(&pool, &["list"]);
    let col = |line: &str| {
        let at = line.find("4 KiB").expect("size column");
        unicode_width::UnicodeWidthStr::width(&line[..at])
    };
    let rows: Vec<&str> = list.lines().skip(1).collect();
    assert_eq!(rows.len(), 2, "{list}");
    assert_eq!(
        col(rows[0]),
        col(rows[1]),
        "aligned by display width:\n{list}"
    );
}

#[test]
fn item9_help_is_complete_short_and_states_the_exit_codes() {
    let d = tmpdir("help");
    let pool = d.0.join("p.pool");
    let top = ok(&pool, &["--help"]);
    assert!(top.contains("Exit codes: 0 ok; 1 usage"), "{top}");
    let check_line = top
        .lines()
        .find(|l| l.trim_start().starts_with("check"))
        .unwrap();
    assert!(
        check_line.len() < 120,
        "one short line per command: {check_line}"
    );
    for cmd in [
        "init", "create", "scheme", "destroy", "list", "info", "write", "read", "check", "demo",
        "bench",
    ] {
        let h = ok(&pool, &[cmd, "-h"]);
        // Every argument and option has a description.
        for l in h.lines().filter(|l| {
            let t = l.trim_start();
            l.len() - t.len() <= 6 && (t.starts_with('<') || t.starts_with('-'))
        }) {
            let words = l.trim().split_once("  ").map_or("", |x| x.1).trim();
            assert!(!words.is_empty(), "{cmd}: no description for {l:?}");
        }
        // Only the options that mean something for the command.
        let needs_key = matches!(
            cmd,
            "create" | "destroy" | "write" | "read" | "check" | "demo"
        );
        assert_eq!(h.contains("--key-file"), needs_key, "{cmd}: --key-file");
        assert_eq!(h.contains("--pool"), cmd != "bench", "{cmd}: --pool");
    }
    let h = ok(&pool, &["cxlsim", "--help"]);
    assert!(!h.contains("--key-file") && !h.contains("--pool"), "{h}");
    assert!(ok(&pool, &["create", "--help"]).contains("twice its size"));
}

/// What README.md and docs/*.md tell a user to type is what the error and help texts name:
/// a bad knob's error lists every value the knob takes, and `pmo bench --help` lists every
/// study (`--study tracking`, docs/faults.md; filebench's studies, docs/filebench.md) and the
/// options filebench shares with the suite.
#[test]
fn errors_and_help_name_every_value_the_docs_use() {
    let d = tmpdir("docvalues");
    let pool = d.0.join("p.pool");
    let o = cmd(&pool, &["list"])
        .env("PMO_DIRTY", "bogus")
        .output()
        .unwrap();
    let e = one_line(&o, 1, &["PMO_DIRTY"]);
    for v in ["fault", "twin", "scan", "declared"] {
        assert!(e.contains(v), "PMO_DIRTY's error names {v}: {e}");
    }
    let h = ok(&pool, &["bench", "--help"]);
    let line = |opt: &str| -> String {
        // The option's description, wrapped or not, up to the next option.
        let lines: Vec<&str> = h.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.trim_start().starts_with(&format!("{opt} ")))
            .unwrap_or_else(|| panic!("{opt}: {h}"));
        let more = lines[at + 1..]
            .iter()
            .take_while(|l| !l.trim().is_empty() && !l.trim_start().starts_with('-'));
        std::iter::once(&lines[at])
            .chain(more)
            .copied()
            .collect::<Vec<_>>()
            .join(" ")
    };
    let study = line("--study");
    for s in pmo_bench::suite::STUDIES {
        assert!(study.contains(s), "--study names suite study {s}: {study}");
    }
    for s in pmo_filebench::bench::STUDIES {
        assert!(
            study.contains(s),
            "--study names filebench study {s}: {study}"
        );
    }
    for opt in ["--scheme", "--predict"] {
        let l = line(opt);
        assert!(
            l.contains("filebench"),
            "{opt} says what it does for filebench: {l}"
        );
    }
}

#[test]
fn item12_counts_bytes_and_plurals_right() {
    let d = tmpdir("small");
    let pool = d.0.join("p.pool");
    init(&pool);
    ok(&pool, &["create", "a", "--size", "4KiB"]);
    let o = pmo_in(&pool, &["write", "a", "--offset", "4091"], b"0123456789");
    one_line(&o, 1, &["10 bytes", "room for 5"]);
    let o = pmo_in(&pool, &["write", "a"], b"x");
    assert!(
        err(&o).contains("wrote 1 byte at offset 0 of 'a' (1 page committed"),
        "{}",
        err(&o)
    );
    assert!(ok(&pool, &["info", "a"]).contains("(1 page)"));
    let c = ok(&pool, &["check", "a"]);
    assert!(
        c.contains("1 page verified") && c.contains("checked 1 PMO;"),
        "{c}"
    );
}

#[test]
fn item6_truncation_is_corruption_at_every_length() {
    let d = tmpdir("trunc");
    let pool = d.0.join("p.pool");
    init(&pool);
    let full = std::fs::read(&pool).unwrap();
    // From the 8-byte magic number on: fewer bytes cannot tell a pool from any other file.
    for len in [
        8usize,
        100,
        3000,
        4096,
        4097,
        8192,
        65536,
        full.len() - 4096,
    ] {
        std::fs::write(&pool, &full[..len]).unwrap();
        let o = pmo(&pool, &["list"]);
        assert_eq!(o.status.code(), Some(2), "truncated to {len}: {}", err(&o));
        one_line(&o, 2, &["corrupt"]);
    }
}

#[test]
fn item7_info_shows_the_largest_pmo_that_fits_and_it_does() {
    let d = tmpdir("fit");
    let pool = d.0.join("p.pool");
    init(&pool);
    let info = ok(&pool, &["info"]);
    let line = info
        .lines()
        .find(|l| l.starts_with("largest new PMO:"))
        .expect(&info);
    assert!(line.contains("twice its size"), "{line}");
    let bytes: u64 = line.split_whitespace().nth(3).unwrap().parse().expect(line);
    assert!(
        bytes > 0 && bytes < 16 << 20,
        "about half of a 32 MiB pool: {line}"
    );
    let o = pmo(
        &pool,
        &["create", "over", "--size", &(bytes + 4096).to_string()],
    );
    one_line(&o, 1, &["full"]);
    ok(&pool, &["create", "fits", "--size", &bytes.to_string()]);
}

#[test]
fn item8_a_cli_write_records_its_session() {
    let d = tmpdir("session");
    let pool = d.0.join("p.pool");
    init(&pool);
    ok(&pool, &["create", "a", "--size", "64KiB"]);
    assert!(ok(&pool, &["info", "a"]).contains("last session:    none recorded"));
    let o = pmo_in(&pool, &["write", "a", "--offset", "4096"], b"hello");
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let info = ok(&pool, &["info", "a"]);
    assert!(info.contains("1 psync,"), "{info}");
    assert!(info.contains("Psync Per+IV"), "{info}");
}

//! The drop-in `liblmdb.so.0` under a real consumer: Debian's python3-lmdb (it links
//! `liblmdb.so.0`; `.ci/run` installs it), running the Python programs of `tests/py/` with
//! `LD_LIBRARY_PATH` at a folder holding this build's library under that name, and nothing else
//! changed. Environments live in PMOs by `PMO_LMDB_PATHS` (a path rule) or `pmo:NAME`.
//!
//! Covered: put/get, cursors, several named databases, a copy to a directory; a writer process
//! with reader processes at the same time; SIGKILL of the writer mid-commit (the newest
//! committed data whole, the pool's check clean and every page of the PMO verified); a wrong
//! key, a missing PMO, a PMO that holds no environment, two writers: LMDB's error and the
//! store's sentence from `pmo_lmdb_last_error`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use pmo_store::{KdfParams, Perm, Pool, PoolOptions, Scheme};

const KEY: &str = "dropin-test-key";

/// The interpreter with Debian's python3-lmdb (`PMO_LMDB_PYTHON` overrides).
fn python() -> String {
    std::env::var("PMO_LMDB_PYTHON").unwrap_or_else(|_| "/usr/bin/python3".into())
}

/// This build's `libpmo_lmdb_dropin.so`: next to the test binary's `deps/` directory.
fn built_library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    for dir in [deps, deps.parent().unwrap()] {
        let lib = dir.join("libpmo_lmdb_dropin.so");
        if lib.is_file() {
            return lib;
        }
    }
    panic!("libpmo_lmdb_dropin.so not found beside {}", exe.display());
}

struct Setup {
    dir: PathBuf,
    lib_dir: PathBuf,
    pool_path: PathBuf,
    pool: Pool,
}

impl Setup {
    fn new(tag: &str) -> Setup {
        let dir = std::env::temp_dir().join(format!("pmo-dropin-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // The path the programs see as their working directory (symbolic links resolved).
        let dir = dir.canonicalize().unwrap();
        // The parent of the environments PMO_LMDB_PATHS puts in PMOs (python3-lmdb makes an
        // environment's directory, not its parents).
        std::fs::create_dir_all(dir.join("pmo")).unwrap();
        let lib_dir = dir.join("lib");
        std::fs::create_dir_all(&lib_dir).unwrap();
        std::os::unix::fs::symlink(built_library(), lib_dir.join("liblmdb.so.0")).unwrap();
        let pool_path =
            PathBuf::from("/dev/shm").join(format!("pmo-dropin-{tag}-{}.pool", std::process::id()));
        let _ = std::fs::remove_file(&pool_path);
        let pool = Pool::create(
            &pool_path,
            256 << 20,
            &PoolOptions {
                kdf: KdfParams::INSECURE_FAST,
                scheme: Scheme::from_name("secure").unwrap(),
                ..Default::default()
            },
        )
        .unwrap();
        let probe = Command::new(python())
            .args(["-c", "import lmdb"])
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", python()));
        assert!(
            probe.status.success(),
            "the drop-in test needs Debian's python3-lmdb (apt-get install python3-lmdb; .ci/run installs it): {}",
            String::from_utf8_lossy(&probe.stderr)
        );
        Setup {
            dir,
            lib_dir,
            pool_path,
            pool,
        }
    }

    fn cmd(&self, args: &[&str], key: &str) -> Command {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/lmdb_prog.py");
        let mut c = Command::new(python());
        c.arg(script)
            .args(args)
            .current_dir(&self.dir)
            .env("LD_LIBRARY_PATH", &self.lib_dir)
            .env("PMO_POOL", &self.pool_path)
            .env("PMO_KEY", key)
            .env("PMO_LMDB_PATHS", self.dir.join("pmo"))
            .env("PMO_LMDB_LOCKDIR", self.dir.join("locks"))
            .env("COPY_DIR", self.dir.join("copy"))
            .env_remove("PMO_LMDB")
            .env_remove("PMO_SCHEME");
        c
    }

    fn run(&self, args: &[&str], key: &str) -> Output {
        self.cmd(args, key).output().unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args, KEY);
        assert!(
            out.status.success(),
            "{args:?}: {}\nstdout: {}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// The PMO name an environment directory `rel` (under the scratch directory) maps to.
    fn mapped(&self, rel: &str) -> String {
        pmo_lmdb::paths::name_of_path(&self.dir.join(rel).join("data.mdb")).unwrap()
    }

    /// The pool's check finds nothing, and every page of PMO `name` reads back verified.
    fn check_clean(&self, name: &str) {
        let r = self.pool.check().unwrap();
        assert!(r.problems.is_empty(), "{:?}", r.problems);
        let att = self.pool.attach(name, Perm::Read, KEY.as_bytes()).unwrap();
        let mut sum = 0u64;
        for off in (0..att.len()).step_by(4096) {
            // SAFETY: `off` lies inside the live read-only attachment; the read faults the
            // page in, which verifies it.
            sum = sum.wrapping_add(u64::from(unsafe {
                std::ptr::read_volatile(att.addr().add(off))
            }));
        }
        std::hint::black_box(sum);
        att.detach().unwrap();
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.pool_path);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn python_lmdb_puts_gets_walks_named_databases_and_copies_in_a_pmo() {
    let s = Setup::new("basic");
    let out = s.ok(&["basic", "pmo/env"]);
    assert!(out.contains("basic ok"), "{out}");
    // The environment is the PMO its path maps to; LMDB wrote no data file beside it.
    let name = s.mapped("pmo/env");
    assert!(s.pool.exists(&name).unwrap(), "no PMO {name}");
    assert!(!s.dir.join("pmo/env/data.mdb").exists());
    // The copy's path matches no rule: an ordinary environment on files.
    assert!(s.dir.join("copy/data.mdb").is_file());
    assert!(!s.pool.exists(&s.mapped("copy")).unwrap());
    // An environment outside PMO_LMDB_PATHS is on files too, exactly as with the system's LMDB.
    std::fs::create_dir_all(s.dir.join("files")).unwrap();
    let out = s.ok(&["writer", "files", "3", "0"]);
    assert_eq!(out.lines().last(), Some("2"));
    assert!(s.dir.join("files/data.mdb").is_file());
    s.check_clean(&name);
}

#[test]
fn python_readers_see_whole_commits_beside_a_python_writer() {
    let s = Setup::new("readers");
    // The environment exists before the readers start (a reader never creates it).
    s.ok(&["open", "pmo/shared", "write"]);
    let last = "299";
    let mut writer = s
        .cmd(&["writer", "pmo/shared", "300", "0.003"], KEY)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let readers: Vec<Child> = (0..2)
        .map(|_| {
            s.cmd(&["reader", "pmo/shared", last, "60"], KEY)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for r in readers {
        let out = r.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "reader: {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // Each reader's transactions moved with the writer: many commits seen, the last one
        // included (the program asserts every one was whole and none went back).
        let seen: u32 = text
            .split_whitespace()
            .nth(2)
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("reader printed {text:?}"));
        assert!(seen >= 2, "a reader saw {seen} commits: {text}");
    }
    let out = writer.wait().unwrap();
    assert!(out.success());
    s.check_clean(&s.mapped("pmo/shared"));
}

#[test]
fn a_python_writer_killed_mid_commit_leaves_its_last_commit_whole() {
    let s = Setup::new("kill");
    let name = s.mapped("pmo/big");
    let mut last_seen: Option<u64> = None;
    for round in 0..4 {
        let mut child = s
            .cmd(&["big_writer", "pmo/big"], KEY)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        // Let it commit a few times, then kill it at a moment of its own choosing.
        let started = Instant::now();
        let mut committed = None;
        while committed.is_none_or(|c: u64| c < last_seen.map_or(5, |l| l + 5 + round)) {
            match lines.next() {
                Some(Ok(l)) => committed = Some(l.trim().parse().unwrap()),
                _ => panic!("the writer stopped: {:?}", child.wait_with_output()),
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the writer is too slow"
            );
        }
        std::thread::sleep(Duration::from_micros(700 * (round + 1)));
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        let _ = child.wait();
        // The newest commit it printed, including lines still in the pipe.
        let printed = lines
            .map_while(Result::ok)
            .filter_map(|l| l.trim().parse::<u64>().ok())
            .fold(committed.unwrap(), u64::max);
        // Every commit it printed is there; at most the one it was in when killed is more.
        let out = s.ok(&["check_big", "pmo/big"]);
        let last: u64 = out.trim().parse().unwrap();
        assert!(
            last == printed || last == printed + 1,
            "round {round}: printed {printed}, found {last}"
        );
        last_seen = Some(last);
    }
    s.check_clean(&name);
}

#[test]
fn bad_input_gets_lmdbs_error_and_the_stores_sentence() {
    let s = Setup::new("bad");
    s.ok(&["open", "pmo/db", "write"]);
    let fails = |args: &[&str], key: &str| {
        let out = s.run(args, key);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(
            out.status.code(),
            Some(3),
            "{args:?}: {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    };
    // A wrong key: LMDB's "Permission denied" (EACCES) and the store's sentence.
    let text = fails(&["open", "pmo/db", "read"], "not the key");
    assert!(text.contains("Permission denied"), "{text}");
    assert!(text.contains("store: ") && text.contains("key"), "{text}");
    // A reader of a PMO that does not exist: ENOENT, nothing created.
    std::fs::create_dir_all(s.dir.join("pmo/none")).unwrap();
    let text = fails(&["open", "pmo/none", "read"], KEY);
    assert!(text.contains("No such file or directory"), "{text}");
    assert!(!s.pool.exists(&s.mapped("pmo/none")).unwrap());
    // A PMO holding something that is not an LMDB environment: LMDB's MDB_INVALID, untouched.
    let junk = s.mapped("pmo/junk");
    s.pool.pcreate(&junk, 1 << 20, KEY.as_bytes()).unwrap();
    {
        let att = s.pool.attach(&junk, Perm::Write, KEY.as_bytes()).unwrap();
        att.write_at(0, &[0xA5; 8192]).unwrap();
        att.psync().unwrap();
        att.detach().unwrap();
    }
    let text = fails(&["open", "pmo/junk", "write"], KEY);
    assert!(
        text.contains("InvalidError") || text.contains("not an LMDB"),
        "{text}"
    );
    let att = s.pool.attach(&junk, Perm::Read, KEY.as_bytes()).unwrap();
    let mut head = [0u8; 16];
    att.read_at(0, &mut head).unwrap();
    assert_eq!(head, [0xA5; 16], "the foreign PMO was written");
    att.detach().unwrap();
    // A writer creating a PMO larger than the pool: ENOSPC and the store's sentence; nothing
    // is left behind.
    let out = s
        .cmd(&["open", "pmo/huge", "write"], KEY)
        .env("MAP_SIZE", (1u64 << 40).to_string())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(text.contains("No space left on device"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.len() > "store: ".len() && l.starts_with("store: ")),
        "{text}"
    );
    assert!(!s.pool.exists(&s.mapped("pmo/huge")).unwrap());
    // Two writers: the second gets EBUSY and the sentence naming the holder.
    let mut first = s.cmd(&["open", "pmo/db", "write"], KEY);
    let mut first = first
        .env("HOLD", "5")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(first.stdout.take().unwrap()).lines();
    assert!(lines.next().unwrap().unwrap().starts_with("opened"));
    let text = fails(&["open", "pmo/db", "write"], KEY);
    assert!(text.contains("Device or resource busy"), "{text}");
    assert!(
        text.contains("store: ") && text.contains("attached"),
        "{text}"
    );
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(first.id() as i32, libc::SIGKILL) };
    let _ = first.wait();
    s.check_clean(&s.mapped("pmo/db"));
}

//! Shared by the integration tests: a pool on /dev/shm (fast KDF), and LMDB's programs run in
//! child processes (`pmo-lmdb-run`) against it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use pmo_store::{KdfParams, Pool, PoolOptions, Scheme};

pub const KEY: &str = "lmdb-test-key";

/// A pool file removed on drop, and a scratch directory for the programs' working directory.
pub struct TestPool {
    pub path: PathBuf,
    pub dir: PathBuf,
    pub pool: Pool,
}

impl TestPool {
    pub fn new(tag: &str, scheme: &str, size: u64) -> TestPool {
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let stem = format!(
            "pmo-lmdb-test-{tag}-{}-{}",
            scheme.replace(':', "-"),
            std::process::id()
        );
        let path = base.join(format!("{stem}.pool"));
        let dir = std::env::temp_dir().join(stem);
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let pool = Pool::create(
            &path,
            size,
            &PoolOptions {
                kdf: KdfParams::INSECURE_FAST,
                scheme: Scheme::from_name(scheme).unwrap(),
                ..Default::default()
            },
        )
        .unwrap();
        TestPool { path, dir, pool }
    }

    /// `pmo-lmdb-run PROGRAM ARGS` in the scratch directory, on this pool.
    pub fn program(&self, prog: &str, args: &[&str], all_paths_are_pmos: bool) -> Output {
        self.program_env(prog, args, all_paths_are_pmos, &[])
    }

    /// As [`TestPool::program`], with more environment variables.
    #[allow(dead_code)] // not every test file uses it
    pub fn program_env(
        &self,
        prog: &str,
        args: &[&str],
        all_paths_are_pmos: bool,
        vars: &[(&str, &str)],
    ) -> Output {
        let mut c = Command::new(env!("CARGO_BIN_EXE_pmo-lmdb-run"));
        c.envs(vars.iter().copied());
        c.arg(prog)
            .args(args)
            .current_dir(&self.dir)
            .env("PMO_POOL", &self.path)
            .env("PMO_KEY", KEY)
            .env("PMO_LMDB_LOCKDIR", self.dir.join("locks"))
            .env_remove("PMO_SCHEME");
        if all_paths_are_pmos {
            c.env("PMO_LMDB", "1");
        } else {
            c.env_remove("PMO_LMDB");
        }
        c.output().unwrap()
    }

    /// As [`TestPool::program`], asserting exit status 0; returns stdout.
    pub fn ok(&self, prog: &str, args: &[&str], all: bool) -> String {
        let out = self.program(prog, args, all);
        assert!(
            out.status.success(),
            "{prog} {args:?} failed ({}):\nstdout: {}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// The PMO name the environment path `rel`, relative to the programs' working directory,
    /// maps to under `PMO_LMDB=1` (`pmo_lmdb::paths`; not `MDB_NOSUBDIR`).
    pub fn mapped(&self, rel: &str) -> String {
        let dir = self.dir.canonicalize().unwrap();
        let abs = pmo_lmdb::paths::absolute(dir.join(rel).to_str().unwrap()).unwrap();
        pmo_lmdb::paths::name_of_path(&abs.join(pmo_lmdb::paths::DATA_FILE)).unwrap()
    }

    /// Install this pool as the process's backend for in-process environments.
    pub fn install(&self) {
        let mut b = pmo_lmdb::Backend::new(self.pool.clone(), KEY.as_bytes());
        b.lock_dir = Some(self.dir.join("locks"));
        pmo_lmdb::install(b);
    }
}

impl Drop for TestPool {
    fn drop(&mut self) {
        pmo_lmdb::uninstall();
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The number after `label:` in mdb_stat's output (the first occurrence).
pub fn stat_field(stat: &str, label: &str) -> u64 {
    stat.lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix(label)
                .map(|v| v.trim_start_matches(':').trim().to_string())
        })
        .unwrap_or_else(|| panic!("no {label:?} in mdb_stat output:\n{stat}"))
        .parse()
        .unwrap()
}

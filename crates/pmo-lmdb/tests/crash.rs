//! Crash consistency of LMDB on a PMO.
//!
//! - SIGKILL at random moments during a stream of committed write transactions (a child
//!   process, `pmo-lmdb-run writer`): every transaction whose commit returned is there, none is
//!   partly there, and a full cursor walk plus `mdb_stat` pass. 200 kills; `PMO_LMDB_KILLS=N`
//!   for more.
//! - Power cut at every persist point of a commit (the crash-simulation medium).

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{stat_field, TestPool, KEY};
use pmo_lmdb::{crashcheck, Env, EnvOptions};
use pmo_medium::crash::{explore, CrashMedium};
use pmo_store::{KdfParams, Pool, PoolOptions, Scheme};
use rand::{Rng, SeedableRng};

/// The backend is process-wide: one test at a time.
static SERIAL: Mutex<()> = Mutex::new(());

#[test]
fn sigkill_during_a_commit_stream_loses_no_returned_commit() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let kills: usize = std::env::var("PMO_LMDB_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let tp = TestPool::new("sigkill", "secure", 768 << 20);
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x6b11);
    let mut acked: Option<u64> = None; // newest transaction a writer acknowledged
    let mut mid_commit = 0; // kills that found one more transaction than acknowledged
    for kill in 0..kills {
        let mut child = Command::new(env!("CARGO_BIN_EXE_pmo-lmdb-run"))
            .args(["writer", "pmo:crash"])
            .env("PMO_POOL", &tp.path)
            .env("PMO_KEY", KEY)
            .env("PMO_LMDB_SIZE", "256M")
            .env("PMO_LMDB_LOCKDIR", tp.dir.join("locks"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line.parse::<u64>().unwrap()).is_err() {
                    break;
                }
            }
        });
        // Let it commit a random number of transactions, then kill it at a random moment.
        let want = rng.gen_range(0..5);
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut got = 0;
        while got < want && Instant::now() < deadline {
            if let Ok(i) = rx.recv_timeout(Duration::from_millis(50)) {
                acked = Some(i);
                got += 1;
            } else if child.try_wait().unwrap().is_some() {
                break;
            }
        }
        std::thread::sleep(Duration::from_micros(rng.gen_range(0..1000)));
        let _ = child.kill(); // SIGKILL
        let status = child.wait().unwrap();
        reader.join().unwrap();
        while let Ok(i) = rx.try_recv() {
            acked = Some(i);
        }
        if status.success() || status.code().is_some() {
            let mut err = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
            panic!("kill {kill}: the writer exited by itself ({status}): {err}");
        }
        // Every acknowledged transaction is there, whole; at most the one in flight beyond.
        tp.install();
        let env = Env::open(
            "pmo:crash",
            EnvOptions {
                flags: pmo_lmdb::ffi::MDB_RDONLY,
                ..Default::default()
            },
        );
        let n = match env {
            Ok(env) => crashcheck::verify(&env).unwrap_or_else(|e| panic!("kill {kill}: {e}")),
            // Killed before its first commit: the PMO may not even exist yet.
            Err(e) if acked.is_none() => {
                eprintln!("kill {kill}: no environment yet ({e})");
                0
            }
            Err(e) => panic!("kill {kill}: reopen: {e}"),
        };
        pmo_lmdb::uninstall();
        let floor = acked.map_or(0, |a| a + 1);
        assert!(
            n == floor || n == floor + 1,
            "kill {kill}: {n} transactions, {floor} acknowledged"
        );
        if n == floor + 1 {
            mid_commit += 1;
            acked = Some(n - 1);
        }
        if kill % 50 == 49 {
            let stat = tp.ok("mdb_stat", &["-e", "pmo:crash"], false);
            // The window of records and the key 'last'.
            let records = n.min(crashcheck::WINDOW) + u64::from(n > 0);
            assert_eq!(stat_field(&stat, "Entries"), records, "kill {kill}");
        }
    }
    eprintln!("{kills} kills, {} transactions committed, {mid_commit} kills landed after a commit's psync and before its acknowledgement", acked.map_or(0, |a| a + 1));
    assert!(
        acked.unwrap_or(0) > kills as u64,
        "the writers made too little progress to test anything"
    );
}

const POOL_BYTES: u64 = 8 << 20;

/// Lock files of the power-cut test's environments: a directory of this process, removed at
/// the end of the test.
fn crash_lock_dir() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("pmo-lmdb-crash-locks-{}", std::process::id()))
}

fn crash_backend(pool: Pool, writemap: bool) {
    let mut b = pmo_lmdb::Backend::new(pool, KEY.as_bytes());
    b.lock_dir = Some(crash_lock_dir());
    b.writemap = Some(writemap);
    pmo_lmdb::install(b);
}

/// A pool image whose PMO `db` holds transactions 0..3.
fn base_image(scheme: Scheme, writemap: bool) -> Vec<u8> {
    let m = Arc::new(CrashMedium::new(POOL_BYTES));
    let pool = Pool::create_on(
        m.clone(),
        &PoolOptions {
            kdf: KdfParams::INSECURE_FAST,
            ns_capacity: Some(16),
            scheme,
            ..Default::default()
        },
    )
    .unwrap();
    pool.pcreate("db", 256 << 10, KEY.as_bytes()).unwrap();
    crash_backend(pool, writemap);
    let env = Env::open("pmo:db", EnvOptions::default()).unwrap();
    assert_eq!(
        env.flags().unwrap() & pmo_lmdb::ffi::MDB_WRITEMAP != 0,
        writemap,
        "the mode asked for"
    );
    for i in 0..3 {
        crashcheck::commit_one(&env, i).unwrap();
    }
    drop(env);
    pmo_lmdb::uninstall();
    m.durable_image()
}

#[test]
fn power_cut_at_every_persist_point_of_a_commit() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // MDB_WRITEMAP (the default) under two schemes, and without it (pages through
    // pmo_lmdb_pwrite).
    for (scheme, writemap) in [("secure", true), ("none", true), ("secure", false)] {
        let scheme = Scheme::from_name(scheme).unwrap();
        let base = base_image(scheme, writemap);
        let (mut old, mut new) = (0, 0);
        let points = explore(
            &base,
            2,
            0x11db,
            |m| {
                let pool = Pool::open_on(m.clone())?;
                crash_backend(pool, writemap);
                let env = Env::open("pmo:db", EnvOptions::default());
                let r = env.and_then(|env| crashcheck::commit_one(&env, 3));
                pmo_lmdb::uninstall();
                r.map_err(|e| pmo_store::StoreError::Os(e.to_string()))
            },
            |cp| {
                let ctx = format!(
                    "{scheme} writemap {writemap}: persist point {} variant {}",
                    cp.point, cp.variant
                );
                let pool = Pool::open_on(Arc::new(CrashMedium::from_image(cp.image.clone())))
                    .unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
                crash_backend(pool, writemap);
                let env = Env::open("pmo:db", EnvOptions::default())
                    .unwrap_or_else(|e| panic!("{ctx}: open: {e}"));
                let n = crashcheck::verify(&env).unwrap_or_else(|e| panic!("{ctx}: {e}"));
                assert!(n == 3 || n == 4, "{ctx}: {n} transactions");
                if cp.completed {
                    assert_eq!(n, 4, "{ctx}: a returned commit was lost");
                }
                if n == 3 {
                    old += 1
                } else {
                    new += 1
                }
                // The environment still takes commits after the crash.
                crashcheck::commit_one(&env, n)
                    .unwrap_or_else(|e| panic!("{ctx}: commit after: {e}"));
                assert_eq!(crashcheck::verify(&env).unwrap(), n + 1);
                drop(env);
                pmo_lmdb::uninstall();
            },
        );
        eprintln!("{scheme} writemap {writemap}: {points} persist points; {old} images before the commit, {new} after");
        assert!(
            points > 0 && old > 0 && new > 0,
            "{scheme}: both outcomes must be reachable"
        );
    }
    let _ = std::fs::remove_dir_all(crash_lock_dir());
}

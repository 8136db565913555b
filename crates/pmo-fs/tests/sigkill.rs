//! Real SIGKILLs: a child process appends numbered records to `/log` with an fsync after
//! each (reporting each acknowledged fsync on stdout), creates and unlinks small files as it
//! goes, until the parent kills it at a random moment. The parent reopens the store and checks
//! that `/log` holds every acknowledged record (and at most the one in flight), each intact;
//! every small file is whole or empty; and `check` finds no problem and no leaked byte.
//!
//! `PMO_FS_KILLS` sets the number of kills per scheme (default 12).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pmo_fs::{FileStore, FsError, FsOptions};
use pmo_store::{KdfParams, Pool, PoolOptions, Scheme};
use rand::{Rng, SeedableRng};

const CHILD_ENV: &str = "PMO_FS_SIGKILL_POOL";
const RECORD: usize = 1500;

fn record(i: u64) -> Vec<u8> {
    let mut r = vec![(i % 251) as u8; RECORD];
    r[..8].copy_from_slice(&i.to_le_bytes());
    r
}

fn small(i: u64) -> Vec<u8> {
    vec![(i % 199) as u8 + 1; 5000]
}

#[test]
fn fs_sigkill_child_main() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let fs = FileStore::open(Pool::open(path.as_ref()).unwrap(), FsOptions::default()).unwrap();
    let log = match fs.open_file("/log") {
        Ok(f) => f,
        Err(FsError::NotFound(_)) => fs.create("/log", 0).unwrap(),
        Err(e) => panic!("{e}"),
    };
    let mut i = log.size() / RECORD as u64;
    loop {
        log.append(&record(i)).unwrap();
        log.fsync().unwrap();
        println!("{i}");
        if i.is_multiple_of(4) {
            let name = format!("/s/{i}");
            match fs.create(&name, 0) {
                Ok(f) => {
                    f.pwrite(0, &small(i)).unwrap();
                    f.close().unwrap();
                }
                Err(FsError::Exists(_)) => {}
                Err(e) => panic!("{e}"),
            }
            let old = format!("/s/{}", i.wrapping_sub(12));
            match fs.unlink(&old) {
                Ok(()) | Err(FsError::NotFound(_)) => {}
                Err(e) => panic!("{e}"),
            }
        }
        i += 1;
    }
}

fn run_kills(scheme: &str, kills: usize) {
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        std::path::PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let path = dir.join(format!("pmo-fs-sigkill-{}.pool", std::process::id()));
    let _ = std::fs::remove_file(&path);
    // Room for `/log` to grow while the kills go on: a fast child appends a few hundred
    // records before each kill, and the log's PMO growing from 4 to 8 MiB needs 16 MiB of
    // free extent (two slots) beside the old one (in a 32 MiB pool, under load, that ran out:
    // `NoSpace`, and the child stopped before acknowledging). The file is sparse on tmpfs.
    let pool = Pool::create(
        &path,
        128 << 20,
        &PoolOptions {
            kdf: KdfParams::INSECURE_FAST,
            scheme: Scheme::from_name(scheme).unwrap(),
            ..Default::default()
        },
    )
    .unwrap();
    FileStore::open(pool, FsOptions::default())
        .unwrap()
        .mkdir("/s")
        .unwrap();
    pmo_store::wait_for_background_detaches();
    let mut rng = rand::rngs::StdRng::seed_from_u64(0xf5_c0de);
    let exe = std::env::current_exe().unwrap();
    let mut floor = 0u64;
    for k in 0..kills {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "fs_sigkill_child_main",
                "--nocapture",
                "--test-threads=1",
                "--quiet",
            ])
            .env(CHILD_ENV, &path)
            .stdout(Stdio::piped())
            // A child that stops before its first acknowledgement says why here.
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let acked = Arc::new(AtomicU64::new(u64::MAX));
        let reader = {
            let acked = acked.clone();
            let out = child.stdout.take().unwrap();
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(|l| l.ok()) {
                    if let Ok(i) = line.trim().parse::<u64>() {
                        acked.store(i, Ordering::SeqCst);
                    }
                }
            })
        };
        // Let it get going, then kill it at a random moment.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while acked.load(Ordering::SeqCst) == u64::MAX && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        std::thread::sleep(Duration::from_micros(rng.gen_range(0..30_000)));
        child.kill().unwrap();
        child.wait().unwrap();
        reader.join().unwrap();
        let acked = acked.load(Ordering::SeqCst);
        assert_ne!(
            acked,
            u64::MAX,
            "{scheme} kill {k}: the child never acknowledged"
        );

        let fs = FileStore::open(Pool::open(&path).unwrap(), FsOptions::default()).unwrap();
        let c = fs.check().unwrap();
        let ctx = format!("{scheme} kill {k} (acked {acked})");
        assert!(c.problems.is_empty(), "{ctx}: {:?}", c.problems);
        assert_eq!(c.used_bytes + c.free_bytes, c.heap_bytes, "{ctx}: leak");
        let log = fs.read_file("/log").unwrap();
        assert_eq!(log.len() % RECORD, 0, "{ctx}: torn record");
        let n = (log.len() / RECORD) as u64;
        assert!(n > acked && n <= acked + 2, "{ctx}: {n} records");
        assert!(n >= floor, "{ctx}: went back from {floor} to {n}");
        floor = n;
        for (i, r) in log.chunks(RECORD).enumerate() {
            assert_eq!(r, record(i as u64), "{ctx}: record {i}");
        }
        for e in fs.readdir("/s").unwrap() {
            let i: u64 = e.name.parse().unwrap();
            let d = fs.read_file(&format!("/s/{}", e.name)).unwrap();
            assert!(d.is_empty() || d == small(i), "{ctx}: /s/{i} torn");
        }
        drop(fs);
        pmo_store::wait_for_background_detaches();
    }
    let _ = std::fs::remove_file(&path);
}

#[test]
fn sigkill_at_random_moments_loses_no_fsynced_write() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let kills = std::env::var("PMO_FS_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    for scheme in ["none", "secure", "sp-id"] {
        run_kills(scheme, kills);
    }
}

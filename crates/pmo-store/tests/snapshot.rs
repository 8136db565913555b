//! Live snapshot (`docs/lifecycle.md`): snapshots and exports taken while a writer keeps
//! psyncing are each exactly the PMO as of one psync, under every scheme and placement; and
//! real SIGKILLs of a process taking a snapshot, rekeying or rotating, while a writer process
//! keeps working, leave the source as of a psync, the snapshot complete and consistent or
//! absent, and nothing leaked (`check`).
//!
//! The writer's psync `k` writes stamp `k` into pages `0..W` and into the rolling page
//! `W + k % R`: a consistent state as of psync `K` has stamp `K` on pages `0..W` and, on each
//! rolling page, the last `k <= K` that wrote it (zero if none did).
//!
//! `PMO_SNAP_KILLS` sets the number of kills per test (default 12).

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pmo_store::{KdfParams, Perm, PmoHandle, Pool, PoolOptions, Scheme, StoreError};
use rand::{Rng, SeedableRng};

mod common;

const KEY: &[u8] = b"snap-key";
const KEY2: &[u8] = b"snap-key-2";
const W: u64 = 4;
const R: u64 = 252;
const PAGES: u64 = W + R;
const ROLE: &str = "PMO_SNAP_ROLE";

use common::stamps::Stamps;

const STAMPS: Stamps = Stamps { w: W, r: R };

/// Psync `k` of the writer.
fn psync_k(h: &PmoHandle, k: u64) -> pmo_store::Result<()> {
    STAMPS.psync(h, k)
}

/// The psync `name` is exactly as of (panics on a mix).
fn consistent(pool: &Pool, name: &str, key: &[u8], ctx: &str) -> u64 {
    let h = pool
        .open_pmo(name, Perm::Read, key, None)
        .unwrap_or_else(|e| panic!("{ctx}: open {name}: {e}"));
    STAMPS.one_psync(&h, &format!("{ctx}: {name}"))
}

fn opts(scheme: Scheme) -> PoolOptions {
    PoolOptions {
        kdf: KdfParams::INSECURE_FAST,
        ns_capacity: Some(64),
        scheme,
        ..Default::default()
    }
}

fn shm(tag: &str) -> PathBuf {
    let dir = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    dir.join(format!("pmo-snap-{tag}-{}", std::process::id()))
}

fn assert_clean(pool: &Pool, ctx: &str) {
    let report = pool.check().unwrap();
    assert!(report.problems.is_empty(), "{ctx}: {:?}", report.problems);
    assert_eq!(
        report.used_bytes + report.free_bytes,
        report.heap_len,
        "{ctx}: space leaked"
    );
}

#[test]
fn snapshots_under_a_live_writer_are_each_exactly_one_psync() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    for scheme in Scheme::all_placements() {
        let path = shm(&format!("live-{}", scheme.name().replace(':', "-")));
        let _rm_path = common::RemoveOnDrop(path.clone());
        let _ = std::fs::remove_file(&path);
        let pool = Pool::create(&path, 16 << 20, &opts(scheme)).unwrap();
        match pool.pcreate("src", PAGES * 4096, KEY) {
            Err(StoreError::Unsupported(_)) => {
                std::fs::remove_file(&path).unwrap();
                continue;
            }
            r => {
                r.unwrap();
            }
        }
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicU64::new(0));
        let writer = {
            let (pool, stop, done) = (pool.clone(), stop.clone(), done.clone());
            std::thread::spawn(move || {
                let h = pool.open_pmo("src", Perm::Write, KEY, None).unwrap();
                let mut k = 1;
                while !stop.load(Ordering::SeqCst) {
                    psync_k(&h, k).unwrap();
                    done.store(k, Ordering::SeqCst);
                    k += 1;
                }
            })
        };
        while done.load(Ordering::SeqCst) < 3 {
            std::thread::yield_now();
        }
        let ctx = &*scheme.name();
        let (_, rep) = pool
            .snapshot("src", "snap", KEY, None, &mut |_, _| {})
            .unwrap_or_else(|e| panic!("{ctx}: snapshot: {e}"));
        let file = shm(&format!("live-{}.pmox", scheme.name().replace(':', "-")));
        let _rm_file = common::RemoveOnDrop(file.clone());
        let _ = std::fs::remove_file(&file);
        pool.export("src", KEY, &file, &mut |_, _| {})
            .unwrap_or_else(|e| panic!("{ctx}: export: {e}"));
        let during = done.load(Ordering::SeqCst);
        stop.store(true, Ordering::SeqCst);
        writer.join().unwrap();
        let k = consistent(&pool, "snap", KEY, ctx);
        assert!(k >= 3, "{ctx}: snapshot of psync {k}");
        pool.import(&file, Some("imported"), KEY, &mut |_, _| {})
            .unwrap_or_else(|e| panic!("{ctx}: import: {e}"));
        consistent(&pool, "imported", KEY, ctx);
        assert_clean(&pool, ctx);
        eprintln!(
            "{ctx}: snapshot of psync {k} in {} passes; the writer reached {during}",
            rep.passes
        );
        std::fs::remove_file(&file).unwrap();
        drop(pool);
        std::fs::remove_file(&path).unwrap();
    }
}

/// Child roles: `writer` psyncs forever under whichever of the two keys opens the PMO,
/// detaching after each psync when `PMO_SNAP_CYCLE` is set (so a rekey can get in);
/// `snapshot` takes one snapshot and one export; `rekey` flips the key forever. Each prints a
/// line per step done.
#[test]
fn snap_child_main() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let pool = Pool::open(std::env::var("PMO_SNAP_POOL").unwrap().as_ref()).unwrap();
    match role.as_str() {
        "writer" => {
            let cycle = std::env::var("PMO_SNAP_CYCLE").is_ok();
            let open = || loop {
                for key in [KEY, KEY2] {
                    match pool.open_pmo("src", Perm::Write, key, Some(Duration::from_secs(5))) {
                        Ok(h) => return h,
                        Err(StoreError::WrongKey(_)) => continue,
                        Err(e) => panic!("writer: {e}"),
                    }
                }
            };
            let mut h = open();
            let mut b = [0u8; 4096];
            h.read_page(0, &mut b).unwrap();
            let mut k = u64::from_le_bytes(b[..8].try_into().unwrap()) + 1;
            loop {
                psync_k(&h, k).unwrap();
                println!("{k}");
                k += 1;
                if cycle {
                    drop(h);
                    h = open();
                }
            }
        }
        "snapshot" => {
            let n = std::env::var("PMO_SNAP_N").unwrap();
            let file = PathBuf::from(std::env::var("PMO_SNAP_FILE").unwrap());
            pool.snapshot("src", &format!("snap-{n}"), KEY, None, &mut |_, _| {})
                .unwrap();
            println!("snapshot");
            pool.export("src", KEY, &file, &mut |_, _| {}).unwrap();
            println!("export");
        }
        "rotate" => loop {
            match pool.rotate("src", KEY, &mut |_, _| {}) {
                Ok(_) => println!("rotated"),
                Err(StoreError::Busy { .. }) => std::thread::yield_now(),
                Err(e) => panic!("rotate: {e}"),
            }
        },
        "rekey" => {
            let mut keys = [KEY, KEY2];
            if pool.check_key("src", KEY).is_err() {
                keys.swap(0, 1);
            }
            loop {
                match pool.rekey("src", keys[0], keys[1]) {
                    Ok(_) => {
                        keys.swap(0, 1);
                        println!("rekeyed");
                    }
                    Err(StoreError::Busy { .. }) => std::thread::yield_now(),
                    Err(e) => panic!("rekey: {e}"),
                }
            }
        }
        r => panic!("unknown role {r}"),
    }
}

fn spawn(role: &str, pool: &Path, env: &[(&str, String)]) -> (Child, Arc<AtomicU64>) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "snap_child_main",
        "--nocapture",
        "--test-threads=1",
        "--quiet",
    ])
    .env(ROLE, role)
    .env("PMO_SNAP_POOL", pool)
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let lines = Arc::new(AtomicU64::new(0));
    let out = child.stdout.take().unwrap();
    let l = lines.clone();
    std::thread::spawn(move || {
        for _ in BufReader::new(out).lines().map_while(Result::ok) {
            l.fetch_add(1, Ordering::SeqCst);
        }
    });
    (child, lines)
}

fn kill(mut child: Child, what: &str) {
    let _ = child.kill();
    let status = child.wait().unwrap();
    assert!(
        status.signal() == Some(9) || status.success(),
        "{what} ended by {status:?}"
    );
}

fn wait_lines(lines: &AtomicU64, n: u64) {
    let t0 = Instant::now();
    while lines.load(Ordering::SeqCst) < n && t0.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_micros(200));
    }
    assert!(lines.load(Ordering::SeqCst) >= n, "child made no progress");
}

fn kills() -> usize {
    std::env::var("PMO_SNAP_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12)
}

#[test]
fn sigkill_during_a_snapshot_under_a_live_writer_leaves_it_whole_or_absent() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    for name in ["secure", "none", "sp-id", "wedi:medium"] {
        let scheme = Scheme::from_name(name).unwrap();
        let path = shm(&format!("kill-snap-{}", name.replace(':', "-")));
        let _rm_path = common::RemoveOnDrop(path.clone());
        let _ = std::fs::remove_file(&path);
        let pool = Pool::create(&path, 32 << 20, &opts(scheme)).unwrap();
        pool.pcreate("src", PAGES * 4096, KEY).unwrap();
        drop(pool);
        let (writer, acked) = spawn("writer", &path, &[]);
        wait_lines(&acked, 2);
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
        let (mut whole, mut absent) = (0, 0);
        for n in 0..kills() {
            let file = shm(&format!("kill-snap-{n}.pmox"));
            let _rm_file = common::RemoveOnDrop(file.clone());
            let _ = std::fs::remove_file(&file);
            let (snap, steps) = spawn(
                "snapshot",
                &path,
                &[
                    ("PMO_SNAP_N", n.to_string()),
                    ("PMO_SNAP_FILE", file.display().to_string()),
                ],
            );
            // A kill anywhere from the start-up to after the export.
            std::thread::sleep(Duration::from_micros(rng.gen_range(0..40_000)));
            kill(snap, "snapshot");
            let _ = steps;
            let pool = Pool::open(&path).unwrap();
            let ctx = format!("{name} kill {n}");
            let snap_name = format!("snap-{n}");
            if pool.exists(&snap_name).unwrap() {
                consistent(&pool, &snap_name, KEY, &ctx);
                pool.pdestroy(&snap_name, KEY).unwrap();
                whole += 1;
            } else {
                absent += 1;
            }
            let partial = format!("snap-{n}.partial");
            if pool.exists(&partial).unwrap() {
                pool.pdestroy(&partial, KEY).unwrap();
            }
            if file.exists() {
                pool.import(&file, Some("imported"), KEY, &mut |_, _| {})
                    .unwrap_or_else(|e| panic!("{ctx}: a complete export must import: {e}"));
                consistent(&pool, "imported", KEY, &ctx);
                pool.pdestroy("imported", KEY).unwrap();
                std::fs::remove_file(&file).unwrap();
            }
            let _ = std::fs::remove_file(pmo_store::export::partial_path(&file));
            assert_clean(&pool, &ctx);
        }
        // The writer is not stuck behind a gate a killed snapshot left closed.
        let before = acked.load(Ordering::SeqCst);
        wait_lines(&acked, before + 3);
        kill(writer, "writer");
        let pool = Pool::open(&path).unwrap();
        consistent(&pool, "src", KEY, name);
        assert_clean(&pool, name);
        eprintln!("{name}: {whole} snapshots whole, {absent} absent at the kill");
        drop(pool);
        std::fs::remove_file(&path).unwrap();
    }
}

#[test]
fn sigkill_during_rekey_under_a_live_writer_leaves_one_key_and_a_psync() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    for name in ["secure", "sp-ip", "none"] {
        let scheme = Scheme::from_name(name).unwrap();
        let path = shm(&format!("kill-rekey-{name}"));
        let _rm_path = common::RemoveOnDrop(path.clone());
        let _ = std::fs::remove_file(&path);
        let pool = Pool::create(&path, 16 << 20, &opts(scheme)).unwrap();
        pool.pcreate("src", PAGES * 4096, KEY).unwrap();
        drop(pool);
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x4e4e);
        let mut rekeys = 0;
        for n in 0..kills() {
            let (writer, acked) = spawn("writer", &path, &[("PMO_SNAP_CYCLE", "1".into())]);
            wait_lines(&acked, 1);
            let (rekeyer, done) = spawn("rekey", &path, &[]);
            std::thread::sleep(Duration::from_micros(rng.gen_range(2_000..30_000)));
            kill(rekeyer, "rekeyer");
            rekeys += done.load(Ordering::SeqCst);
            kill(writer, "writer");
            let ctx = format!("{name} kill {n}");
            let pool = Pool::open(&path).unwrap();
            let ok: Vec<&[u8]> = [KEY, KEY2]
                .into_iter()
                .filter(|k| pool.check_key("src", k).is_ok())
                .collect();
            assert_eq!(ok.len(), 1, "{ctx}: exactly one key opens the PMO");
            consistent(&pool, "src", ok[0], &ctx);
            assert_clean(&pool, &ctx);
        }
        eprintln!("{name}: {rekeys} rekeys done between the kills");
        std::fs::remove_file(&path).unwrap();
    }
}

#[test]
fn sigkill_during_rotate_under_a_live_writer_leaves_a_psync_and_finishes() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    for name in ["secure", "sp-id", "wedi:medium"] {
        let scheme = Scheme::from_name(name).unwrap();
        let path = shm(&format!("kill-rotate-{}", name.replace(':', "-")));
        let _rm_path = common::RemoveOnDrop(path.clone());
        let _ = std::fs::remove_file(&path);
        let pool = Pool::create(&path, 16 << 20, &opts(scheme)).unwrap();
        pool.pcreate("src", PAGES * 4096, KEY).unwrap();
        drop(pool);
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x7071);
        let (mut rotations, mut unfinished) = (0, 0);
        for n in 0..kills() {
            let (writer, acked) = spawn("writer", &path, &[("PMO_SNAP_CYCLE", "1".into())]);
            wait_lines(&acked, 1);
            let (rotator, done) = spawn("rotate", &path, &[]);
            std::thread::sleep(Duration::from_micros(rng.gen_range(2_000..30_000)));
            kill(rotator, "rotator");
            rotations += done.load(Ordering::SeqCst);
            kill(writer, "writer");
            let ctx = format!("{name} kill {n}");
            let pool = Pool::open(&path).unwrap();
            unfinished += u64::from(pool.rotation_unfinished("src").unwrap());
            // The open finishes a cut-off rotation's pages; the PMO reads as of a psync.
            consistent(&pool, "src", KEY, &ctx);
            assert_clean(&pool, &ctx);
        }
        let pool = Pool::open(&path).unwrap();
        pool.rotate("src", KEY, &mut |_, _| {}).unwrap();
        assert!(!pool.rotation_unfinished("src").unwrap());
        consistent(&pool, "src", KEY, name);
        eprintln!("{name}: {rotations} rotations done between the kills, {unfinished} cut off");
        drop(pool);
        std::fs::remove_file(&path).unwrap();
    }
}

#[test]
fn snapshot_at_every_persist_point_leaves_the_copy_whole_or_absent() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    use pmo_medium::crash::{explore, CrashMedium};
    for name in ["secure", "none", "sp-id", "wedi", "bp-ip:medium"] {
        let scheme = Scheme::from_name(name).unwrap();
        let pool = Pool::create_on(Arc::new(CrashMedium::new(8 << 20)), &opts(scheme)).unwrap();
        pool.pcreate("src", PAGES * 4096, KEY).unwrap();
        {
            let h = pool.open_pmo("src", Perm::Write, KEY, None).unwrap();
            for k in 1..=300 {
                psync_k(&h, k).unwrap();
            }
        }
        let m = pool.medium();
        let mut base = vec![0u8; m.len() as usize];
        m.read(0, &mut base).unwrap();
        drop(pool);
        let (mut whole, mut absent) = (0, 0);
        let points = explore(
            &base,
            2,
            0x5a,
            |m| Pool::open_on(m.clone())?.snapshot("src", "snap", KEY, None, &mut |_, _| {}),
            |cp| {
                let ctx = format!("{name}: snapshot point {} variant {}", cp.point, cp.variant);
                let pool = Pool::open_on(Arc::new(CrashMedium::from_image(cp.image.clone())))
                    .unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
                assert_eq!(consistent(&pool, "src", KEY, &ctx), 300, "{ctx}: source");
                if pool.exists("snap").unwrap() {
                    whole += 1;
                    assert_eq!(consistent(&pool, "snap", KEY, &ctx), 300, "{ctx}: copy");
                } else {
                    absent += 1;
                    assert!(!cp.completed, "{ctx}: a completed snapshot is lost");
                }
                if pool.exists("snap.partial").unwrap() {
                    pool.pdestroy("snap.partial", KEY).unwrap();
                }
                assert_clean(&pool, &ctx);
            },
        );
        assert!(points > 5, "{name}: {points} persist points");
        assert!(
            whole > 0 && absent > 0,
            "{name}: whole {whole} absent {absent}"
        );
    }
}

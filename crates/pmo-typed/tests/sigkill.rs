//! Real SIGKILLs: a child process inserts into a PHashMap and a PBTreeMap, bumps the root's
//! round counter, psyncs and acknowledges each round on stdout, forever, until the parent
//! kills it at a random moment (also mid-psync). The parent re-attaches and requires: the
//! round counter is the last acknowledged round or the one in flight; both maps hold exactly
//! the keys of the rounds up to it (round r inserts keys 10r..10r+10 and removes the keys of
//! round r-3, so removals are exercised too); the heap checker passes and nothing leaks.
//!
//! `PMO_TYPED_KILLS` sets the number of kills (default 20).
#![forbid(unsafe_code)]

use pmo_store::{KdfParams, Pool, PoolOptions};
use pmo_typed::{PBTreeMap, PHashMap, PString, Persistent, TypedHeap};
use rand::Rng;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const KEY: &[u8] = b"typed-kill-key";
const CHILD_ENV: &str = "PMO_TYPED_SIGKILL_POOL";

#[derive(Persistent, Default)]
#[repr(C)]
struct Root {
    /// Rounds completed (the next round is `rounds`).
    rounds: u64,
    hash: PHashMap<u64, PString>,
    tree: PBTreeMap<u64, u64>,
}

fn round(r: &mut Root, h: &pmo_typed::Ctx) -> pmo_typed::Result<()> {
    let n = r.rounds;
    for k in n * 10..n * 10 + 10 {
        r.hash.insert(h, k, PString::default())?;
        r.hash
            .get_mut(h, &k)?
            .expect("inserted")
            .set(h, &format!("value {k}"))?;
        r.tree.insert(h, k, k * 2)?;
    }
    if n >= 3 {
        for k in (n - 3) * 10..(n - 3) * 10 + 10 {
            r.hash.remove(h, &k)?;
            r.tree.remove(h, &k)?;
        }
    }
    r.rounds = n + 1;
    Ok(())
}

/// The keys present after `rounds` rounds.
fn keys_after(rounds: u64) -> Vec<u64> {
    (rounds.saturating_sub(3) * 10..rounds * 10).collect()
}

#[test]
fn sigkill_child_main() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let pool = Pool::open(path.as_ref()).expect("child open");
    let mut heap = TypedHeap::open(&pool, "kv", KEY).expect("child attach");
    loop {
        let (r, h) = heap.root::<Root>().unwrap();
        round(r, h).unwrap();
        let done = r.rounds;
        heap.psync().unwrap();
        println!("{done}");
    }
}

#[test]
fn sigkill_at_random_moments_keeps_maps_consistent() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let kills: usize = std::env::var("PMO_TYPED_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        std::path::PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let path = dir.join(format!("pmo-typed-kill-{}.pool", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let opts = PoolOptions {
        kdf: KdfParams::INSECURE_FAST,
        ..Default::default()
    };
    let pool = Pool::create(&path, 32 << 20, &opts).unwrap();
    let heap = TypedHeap::create(&pool, "kv", 8 << 20, KEY).unwrap();
    heap.detach().unwrap();
    drop(pool);
    let mut rng = rand::thread_rng();
    let mut acked_total = 0u64;
    // Rounds durable before this child started: what it has acknowledged if it is killed
    // before it prints anything (a slow start on a loaded machine).
    let mut durable = 0u64;
    for kill in 0..kills {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "sigkill_child_main",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, &path)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let acked = Arc::new(AtomicU64::new(durable));
        let a2 = acked.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Ok(n) = line.trim().parse::<u64>() {
                    a2.store(n, Ordering::SeqCst);
                }
            }
        });
        if kill + 1 == kills && acked_total == 0 {
            // No child has acknowledged a round yet (each was killed 30-250 ms after its
            // start, which a loaded machine may spend starting it): let the last one begin.
            let t0 = std::time::Instant::now();
            while acked.load(Ordering::SeqCst) == durable
                && t0.elapsed() < Duration::from_secs(60)
                && child.try_wait().unwrap().is_none()
            {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        std::thread::sleep(Duration::from_millis(rng.gen_range(30..250)));
        child.kill().unwrap();
        child.wait().unwrap();
        reader.join().unwrap();
        let acked = acked.load(Ordering::SeqCst);
        let pool = Pool::open(&path).unwrap();
        let r = pool.check().unwrap();
        assert!(r.problems.is_empty(), "kill {kill}: {:?}", r.problems);
        let heap = TypedHeap::open(&pool, "kv", KEY).unwrap();
        let c = heap.check::<Root>().unwrap();
        assert!(
            c.unreachable.is_empty(),
            "kill {kill}: leak {:?}",
            c.unreachable
        );
        let (root, h) = heap.root_ref::<Root>().unwrap();
        let rounds = root.rounds;
        assert!(
            rounds == acked || rounds == acked + 1,
            "kill {kill}: rounds {rounds}, acknowledged {acked}"
        );
        let want = keys_after(rounds);
        let tree: Vec<u64> = root
            .tree
            .iter(h)
            .unwrap()
            .map(|e| {
                e.map(|(k, v)| {
                    assert_eq!(*v, k * 2);
                    *k
                })
            })
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(tree, want, "kill {kill}: tree keys");
        let mut hash: Vec<u64> = root.hash.iter(h).unwrap().map(|(k, _)| *k).collect();
        hash.sort_unstable();
        assert_eq!(hash, want, "kill {kill}: hash keys");
        for k in &want {
            let v = root.hash.get(h, k).unwrap().unwrap();
            assert_eq!(v.as_str(h).unwrap(), format!("value {k}"));
        }
        acked_total += acked - durable;
        durable = rounds;
        heap.detach().unwrap();
    }
    let _ = std::fs::remove_file(&path);
    assert!(acked_total > 0, "the children made progress");
}

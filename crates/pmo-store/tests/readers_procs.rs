//! Readers beside a writer across processes (`docs/readers.md`, issue 27): one writer process
//! psyncs generations through its mapped attachment; reader processes attach read-only
//! (mapped), check that every page is of one generation, stay, check again, refresh, check
//! that the generation never went back, and detach, at random; the parent kills readers with
//! SIGKILL at random and the writer at the end; then the pool checks clean, a new reader sees
//! one generation, and no pin table is left once the last user is gone.
//!
//! Psync `k` writes stamp `k` into pages `0..W` and into the rolling page `W + k % R` (the
//! state of generation `K`: stamp `K` on pages `0..W`, on each rolling page the last `k <= K`
//! that wrote it, zero if none). Seeded: `PMO_READERS_SEED` (default 27), rounds
//! `PMO_READERS_ROUNDS` (default 3 kills per scheme).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pmo_store::{Attachment, KdfParams, Perm, Pool, PoolOptions, Scheme};
use rand::{Rng, SeedableRng};

const KEY: &[u8] = b"readers-procs";
const W: u64 = 4;
const R: u64 = 60;
const PAGES: u64 = W + R;
const ROLE: &str = "PMO_READERS_ROLE";

fn stamp(k: u64, p: u64) -> Vec<u8> {
    let mut b = vec![(k as u8) ^ (p as u8); 4096];
    b[..8].copy_from_slice(&k.to_le_bytes());
    b[8..16].copy_from_slice(&p.to_le_bytes());
    b
}

/// The generation the view shows, every page checked (panics on a mix).
fn generation(a: &Attachment, ctx: &str) -> u64 {
    let mut b = vec![0u8; 4096];
    a.read_at(0, &mut b).unwrap();
    let big_k = u64::from_le_bytes(b[..8].try_into().unwrap());
    for p in 0..PAGES {
        a.read_at((p * 4096) as usize, &mut b).unwrap();
        let want = if p < W {
            Some(big_k)
        } else {
            let r = p - W;
            (r..=big_k).rev().find(|k| k % R == r && *k >= 1)
        };
        match want {
            Some(k) if big_k > 0 => assert!(
                b == stamp(k, p),
                "{ctx}: page {p} is not generation {k}'s (K = {big_k}, it holds {})",
                u64::from_le_bytes(b[..8].try_into().unwrap())
            ),
            _ => assert!(b.iter().all(|&x| x == 0), "{ctx}: page {p} should be zero"),
        }
    }
    big_k
}

fn pool_path(scheme: &str) -> PathBuf {
    PathBuf::from("/dev/shm").join(format!(
        "pmo-rprocs-{}-{}",
        scheme.replace(':', "-"),
        std::process::id()
    ))
}

fn child(role: &str, pool: &Path, seed: u64) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "readers_and_a_writer_in_processes_killed_at_random",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, role)
        .env("PMO_READERS_POOL", pool)
        .env("PMO_READERS_CHILD_SEED", seed.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

fn run_writer(pool: &Path) {
    let pool = Pool::open(pool).unwrap();
    let a = pool.attach("a", Perm::Write, KEY).unwrap();
    let mut k = 1u64;
    loop {
        let mut pages: Vec<u64> = (0..W).collect();
        pages.push(W + k % R);
        for p in pages {
            a.write_at((p * 4096) as usize, &stamp(k, p)).unwrap();
        }
        a.psync().unwrap();
        if k == 3 {
            println!("ready");
        }
        k += 1;
    }
}

fn run_reader(pool: &Path, seed: u64) {
    let pool = Pool::open(pool).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut last = 0;
    for round in 0..8 {
        let a = pool.attach("a", Perm::Read, KEY).unwrap();
        let ctx = format!("reader {seed} round {round}");
        let k = generation(&a, &ctx);
        assert!(k >= last, "{ctx}: went back from {last} to {k}");
        std::thread::sleep(Duration::from_millis(rng.gen_range(0..30)));
        assert_eq!(generation(&a, &ctx), k, "{ctx}: the snapshot moved");
        for _ in 0..rng.gen_range(1..4) {
            let before = a.snapshot_seq();
            let seq = a.refresh().unwrap();
            assert!(seq >= before, "{ctx}: refresh went back");
            let k2 = generation(&a, &format!("{ctx} refreshed"));
            assert!(k2 >= k, "{ctx}: refresh went back from {k} to {k2}");
            last = k2;
            std::thread::sleep(Duration::from_millis(rng.gen_range(0..10)));
        }
        a.detach().unwrap();
    }
    println!("done");
}

fn opts(scheme: Scheme) -> PoolOptions {
    PoolOptions {
        kdf: KdfParams::INSECURE_FAST,
        ns_capacity: Some(8),
        scheme,
        ..Default::default()
    }
}

/// Wait for `word` on a child's stdout (the test harness prints its own lines first).
fn wait_for(c: &mut Child, word: &str) {
    let mut out = BufReader::new(c.stdout.as_mut().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "child ended before '{word}'"
        );
        if line.trim().ends_with(word) {
            return;
        }
    }
}

/// Children killed when the test ends, passed or not (a writer never ends by itself).
struct Reap(Vec<Child>);

impl Drop for Reap {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn readers_and_a_writer_in_processes_killed_at_random() {
    if let Ok(role) = std::env::var(ROLE) {
        let pool = PathBuf::from(std::env::var("PMO_READERS_POOL").unwrap());
        let seed = std::env::var("PMO_READERS_CHILD_SEED")
            .unwrap()
            .parse()
            .unwrap();
        match role.as_str() {
            "writer" => run_writer(&pool),
            _ => run_reader(&pool, seed),
        }
        return;
    }
    let seed: u64 = std::env::var("PMO_READERS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(27);
    let kills: u32 = std::env::var("PMO_READERS_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    // `secure:medium`: the writer's view is the plaintext area on the pool file, the readers'
    // views their own DRAM copies.
    for name in ["secure", "none", "secure:medium"] {
        let scheme = Scheme::from_name(name).unwrap();
        let path = pool_path(name);
        let _ = std::fs::remove_file(&path);
        let pool = Pool::create(&path, 16 << 20, &opts(scheme)).unwrap();
        pool.pcreate("a", PAGES * 4096, KEY).unwrap();
        let pins_dir = PathBuf::from("/dev/shm");
        let mut writer = Reap(vec![child("writer", &path, 0)]);
        wait_for(&mut writer.0[0], "ready");
        let mut readers: Vec<Child> = (0..3).map(|i| child("reader", &path, seed + i)).collect();
        for next in 3..3 + u64::from(kills) {
            std::thread::sleep(Duration::from_millis(rng.gen_range(20..120)));
            let i = rng.gen_range(0..readers.len());
            let _ = readers[i].kill();
            let status = readers[i].wait().unwrap();
            assert!(
                status.success()
                    || std::os::unix::process::ExitStatusExt::signal(&status) == Some(9),
                "{name}: reader failed: {status:?}"
            );
            readers[i] = child("reader", &path, seed + next);
        }
        let t0 = Instant::now();
        for mut r in readers {
            let status = r.wait().unwrap();
            assert!(status.success(), "{name}: a reader failed: {status:?}");
            assert!(t0.elapsed() < Duration::from_secs(120));
        }
        drop(writer);
        drop(pool);
        let pool = Pool::open(&path).unwrap();
        let report = pool.check().unwrap();
        assert!(report.problems.is_empty(), "{name}: {:?}", report.problems);
        assert_eq!(
            report.used_bytes + report.free_bytes,
            report.heap_len,
            "{name}: space leaked"
        );
        // A reader after everyone died sees one generation; its table is kept for the next
        // reader while the pool handle lives (`pmo_pins::at`, kept tables); when the handle
        // goes, no table stays.
        let a = pool.attach("a", Perm::Read, KEY).unwrap();
        assert!(generation(&a, &format!("{name} after")) >= 3);
        a.detach().unwrap();
        let uuid: String = pool
            .info("a")
            .unwrap()
            .uuid
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(pool.kept.len(), 1, "{name}: the reader's table kept");
        drop(pool);
        let left: Vec<_> = std::fs::read_dir(&pins_dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(&uuid))
            .collect();
        assert!(left.is_empty(), "{name}: pin table left: {left:?}");
        std::fs::remove_file(&path).unwrap();
    }
}

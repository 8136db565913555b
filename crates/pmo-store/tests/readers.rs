//! Readers beside a writer (`docs/readers.md`, issue 27), within one process: a reader opened
//! while a writer psyncs sees exactly one psync's state however long it stays and whatever the
//! writer does, a refresh moves it to a newer psync and never back, under every scheme that
//! allows readers beside the writer, on a pool file and on the crash-simulation medium.
//! The multi-process property test is `readers_procs.rs`.
//!
//! The writer's psync `k` writes stamp `k` into pages `0..W` and into the rolling page
//! `W + k % R`: psync `K`'s state has stamp `K` on pages `0..W` and, on each rolling page, the
//! last `k <= K` that wrote it (zero if none did).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pmo_medium::crash::CrashMedium;
use pmo_store::{Perm, PmoHandle, Pool, Scheme, StoreError};

const KEY: &[u8] = b"readers-key";
const W: u64 = 4;
const R: u64 = 28;
const PAGES: u64 = W + R;

mod common;

use common::opts;

use common::stamps::Stamps;

const STAMPS: Stamps = Stamps { w: W, r: R };

fn psync_k(h: &PmoHandle, k: u64) -> pmo_store::Result<()> {
    STAMPS.psync(h, k)
}

/// The psync a reader's pages are all exactly as of (panics on a mix).
fn one_psync(h: &PmoHandle, ctx: &str) -> u64 {
    STAMPS.one_psync(h, ctx)
}

fn shm(tag: &str) -> PathBuf {
    PathBuf::from("/dev/shm").join(format!("pmo-readers-{tag}-{}", std::process::id()))
}

fn pools(scheme: Scheme, tag: &str) -> Vec<(Pool, Option<PathBuf>)> {
    let path = shm(&format!("{tag}-{}", scheme.name().replace(':', "-")));
    let _ = std::fs::remove_file(&path);
    vec![
        (
            Pool::create(&path, 16 << 20, &opts(scheme)).unwrap(),
            Some(path),
        ),
        (
            Pool::create_on(Arc::new(CrashMedium::new(16 << 20)), &opts(scheme)).unwrap(),
            None,
        ),
    ]
}

fn beside(scheme: Scheme) -> bool {
    pmo_store::reader_beside_writer(scheme)
}

#[test]
fn readers_see_one_psync_while_the_writer_goes_on_and_refresh_forward() {
    for scheme in Scheme::all_placements() {
        if !beside(scheme) {
            continue;
        }
        for (pool, path) in pools(scheme, "one") {
            let ctx = format!(
                "{scheme} {}",
                if path.is_some() {
                    "file"
                } else {
                    "crash medium"
                }
            );
            pool.pcreate("a", PAGES * 4096, KEY).unwrap();
            let stop = Arc::new(AtomicBool::new(false));
            let done = Arc::new(AtomicU64::new(0));
            let writer = {
                let (pool, stop, done) = (pool.clone(), stop.clone(), done.clone());
                std::thread::spawn(move || {
                    let h = pool.open_pmo("a", Perm::Write, KEY, None).unwrap();
                    let mut k = 1;
                    while !stop.load(Ordering::SeqCst) {
                        psync_k(&h, k).unwrap();
                        done.store(k, Ordering::SeqCst);
                        k += 1;
                    }
                })
            };
            let t0 = Instant::now();
            while done.load(Ordering::SeqCst) < 5 {
                assert!(
                    t0.elapsed() < Duration::from_secs(30),
                    "{ctx}: writer stuck"
                );
                std::thread::yield_now();
            }
            let readers: Vec<_> = (0..3)
                .map(|i| {
                    let (pool, done, ctx) = (pool.clone(), done.clone(), ctx.clone());
                    std::thread::spawn(move || {
                        let mut last = 0;
                        for round in 0..6 {
                            let h = pool.open_pmo("a", Perm::Read, KEY, None).unwrap();
                            let k = one_psync(&h, &format!("{ctx} reader {i} round {round}"));
                            assert!(k >= last, "{ctx}: a reader went back from {last} to {k}");
                            // Stay while the writer rewrites every page many times over.
                            let until = done.load(Ordering::SeqCst) + 3 * R;
                            let t0 = Instant::now();
                            while done.load(Ordering::SeqCst) < until
                                && t0.elapsed() < Duration::from_secs(20)
                            {
                                std::thread::sleep(Duration::from_millis(1));
                            }
                            assert_eq!(one_psync(&h, &ctx), k, "{ctx}: the snapshot moved");
                            let seq = h.seq();
                            let r = h.refresh().unwrap();
                            h.refreshed();
                            assert!(r.seq >= seq, "{ctx}: refresh went back");
                            assert_eq!(h.seq(), r.seq);
                            let k2 = one_psync(&h, &format!("{ctx} refreshed"));
                            assert!(k2 >= k, "{ctx}: refresh went back from {k} to {k2}");
                            last = k2;
                        }
                    })
                })
                .collect();
            for r in readers {
                r.join().unwrap();
            }
            stop.store(true, Ordering::SeqCst);
            writer.join().unwrap();
            let report = pool.check().unwrap();
            assert!(report.problems.is_empty(), "{ctx}: {:?}", report.problems);
            if let Some(p) = path {
                std::fs::remove_file(p).unwrap();
            }
        }
    }
}

#[test]
fn refresh_of_a_writer_and_life_cycle_changes_under_readers_are_refused() {
    for (pool, path) in pools(Scheme::from_name("secure").unwrap(), "refuse") {
        pool.pcreate("a", 8 * 4096, KEY).unwrap();
        let w = pool.open_pmo("a", Perm::Write, KEY, None).unwrap();
        assert!(matches!(w.refresh(), Err(StoreError::Invalid(_))));
        let r = pool.open_pmo("a", Perm::Read, KEY, None).unwrap();
        drop(w);
        // The writer gone, the reader keeps its snapshot.
        let mut b = [0u8; 4096];
        r.read_page(0, &mut b).unwrap();
        for e in [
            pool.pdestroy("a", KEY).unwrap_err(),
            pool.rename("a", "b", KEY).unwrap_err(),
            pool.resize("a", 64 * 4096, KEY, Default::default())
                .unwrap_err(),
        ] {
            assert!(
                matches!(&e, StoreError::Busy { name, .. } if name == "a"),
                "{e:?}"
            );
            assert!(e.to_string().contains("readers"), "{e}");
        }
        // A second writer still may attach beside the reader.
        let w2 = pool.open_pmo("a", Perm::Write, KEY, None).unwrap();
        drop(w2);
        assert!(matches!(
            pool.open_pmo("a", Perm::Read, b"wrong", None),
            Err(StoreError::WrongKey(_))
        ));
        drop(r);
        pool.pdestroy("a", KEY).unwrap();
        if let Some(p) = path {
            std::fs::remove_file(p).unwrap();
        }
    }
}

#[test]
fn a_reader_over_the_pin_limit_gives_the_writer_a_typed_error_and_loses_nothing() {
    let scheme = Scheme::from_name("secure").unwrap();
    for (pool, path) in pools(scheme, "limit") {
        pool.pcreate("a", PAGES * 4096, KEY).unwrap();
        let w = pool.open_pmo("a", Perm::Write, KEY, None).unwrap();
        psync_k(&w, 1).unwrap();
        let r = pool.open_pmo("a", Perm::Read, KEY, None).unwrap();
        // PMO_PIN_PAGES is not set here: the default of 4096 frames; every psync of pages
        // 0..W keeps W versions for the reader at psync 1 at most twice per page (once per
        // slot), so the limit is not reached by a few psyncs.
        for k in 2..50 {
            psync_k(&w, k).unwrap();
        }
        assert_eq!(one_psync(&r, "pinned"), 1);
        let r2 = r.refresh().unwrap();
        r.refreshed();
        assert!(r2.changed.len() as u64 >= W, "{:?}", r2.changed);
        assert_eq!(one_psync(&r, "refreshed"), 49);
        drop(r);
        drop(w);
        if let Some(p) = path {
            std::fs::remove_file(p).unwrap();
        }
    }
}

/// The schemes a writer of which may change a committed slot other than by a psync (checksums
/// at detach, plaintext slots on the medium, or a class that holds such a scheme) keep the
/// research kernel's rule: a reader excludes the writer and the writer the reader.
#[test]
fn readers_of_schemes_whose_writers_rewrite_slots_exclude_the_writer() {
    let excluded: Vec<Scheme> = Scheme::all_placements().filter(|&s| !beside(s)).collect();
    for name in [
        "bp-ip",
        "sp-ip",
        "bp-id",
        "sp-id",
        "wed:medium",
        "bp:medium",
        "sp:medium",
    ] {
        assert!(
            excluded.contains(&Scheme::from_name(name).unwrap()),
            "{name} lets readers beside a writer"
        );
    }
    for scheme in excluded {
        for (pool, path) in pools(scheme, "excl") {
            let ctx = scheme.to_string();
            pool.pcreate("a", 4 * 4096, KEY).unwrap();
            let w = pool.open_pmo("a", Perm::Write, KEY, None).unwrap();
            match pool.open_pmo("a", Perm::Read, KEY, None) {
                Err(StoreError::Busy { .. }) => {}
                other => panic!("{ctx}: a reader beside the writer: {:?}", other.map(|_| ())),
            }
            drop(w);
            let r = pool.open_pmo("a", Perm::Read, KEY, None).unwrap();
            assert!(r.reader().is_none(), "{ctx}: a snapshot reader");
            match pool.open_pmo("a", Perm::Write, KEY, None) {
                Err(StoreError::Busy { .. }) => {}
                other => panic!("{ctx}: a writer beside a reader: {:?}", other.map(|_| ())),
            }
            drop(r);
            drop(pool);
            if let Some(p) = path {
                std::fs::remove_file(p).unwrap();
            }
        }
    }
}

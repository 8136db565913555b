//! The sub-page commit log (issue 13, `docs/commit.md`): small declared psyncs write one sealed
//! record and one fence; the committed state is the slots plus the valid records, everywhere it
//! is read. Crash simulation at every persist point of log psyncs, of the page commit that
//! obsoletes them (with its fold) and of recovery; detach without psync; rollback; tamper
//! (flipped, dropped, swapped and stale records); SIGKILL during a stream of small psyncs; a
//! model-based random test.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use pmo_medium::crash::{explore, CrashMedium};
use pmo_medium::Medium;
use pmo_store::{
    AttachOptions, DirtyTracking, KdfParams, Perm, Pool, PoolOptions, Scheme, StoreError,
};

mod common;
use common::assert_healthy;

const KEY: &[u8] = b"log-key";
const PAGES: u64 = 6;
const SIZE: usize = (PAGES * 4096) as usize;
const LOG_BYTES: u64 = pmo_format::sublog::LOG_AREA_BYTES;

fn opts(scheme: Scheme) -> PoolOptions {
    PoolOptions {
        kdf: KdfParams::INSECURE_FAST,
        ns_capacity: Some(8),
        base_addr: Some(0x2100_0000_0000),
        medium: None,
        preallocate: false,
        scheme,
    }
}

fn schemes() -> [Scheme; 3] {
    [Scheme::NONE, Scheme::SECURE_GCM, Scheme::SECURE]
}

fn declared() -> AttachOptions {
    AttachOptions {
        tracking: Some(DirtyTracking::Declared),
        // Tests run in parallel threads, each pool at the same base address.
        relocate: true,
        ..Default::default()
    }
}

/// A fresh pool on a crash medium with PMO "a" (and "b") created with a log.
fn setup(scheme: Scheme) -> (Arc<CrashMedium>, Pool) {
    let m = Arc::new(CrashMedium::new(2 << 20));
    let pool = Pool::create_on(m.clone(), &opts(scheme)).unwrap();
    pool.pcreate_logged("a", PAGES * 4096, KEY, Some(scheme))
        .unwrap();
    pool.pcreate_logged("b", PAGES * 4096, KEY, Some(scheme))
        .unwrap();
    (m, pool)
}

fn reopen(image: Vec<u8>) -> Result<Pool, StoreError> {
    Pool::open_on(Arc::new(CrashMedium::from_image(image)))
}

/// The whole contents of PMO `name` (an open that recovers, then reads).
fn contents(pool: &Pool, name: &str) -> Result<Vec<u8>, StoreError> {
    let h = pool.open_pmo(name, Perm::Read, KEY, None)?;
    let mut out = vec![0u8; SIZE];
    let mut buf = [0u8; 4096];
    for p in 0..PAGES {
        h.read_page(p, &mut buf)?;
        out[p as usize * 4096..][..4096].copy_from_slice(&buf);
    }
    Ok(out)
}

/// Small update `i`: 8 bytes in each of three pages (a typed map's N updates).
fn small(i: u8) -> Vec<(usize, Vec<u8>)> {
    (0..3)
        .map(|k| {
            let page = (i as usize + 2 * k) % PAGES as usize;
            (page * 4096 + 64 * (i as usize % 60) + 8 * k, vec![i; 8])
        })
        .collect()
}

fn apply(model: &mut [u8], w: &[(usize, Vec<u8>)]) {
    for (off, bytes) in w {
        model[*off..off + bytes.len()].copy_from_slice(bytes);
    }
}

fn write(a: &pmo_store::Attachment, w: &[(usize, Vec<u8>)]) {
    for (off, bytes) in w {
        a.write_at(*off, bytes).unwrap();
    }
}

/// Where PMO `name`'s log area starts on the medium.
fn log_area(pool: &Pool, name: &str) -> usize {
    let i = pool.info(name).unwrap();
    (i.extent_off + i.extent_len - LOG_BYTES) as usize
}

#[test]
fn small_psyncs_are_one_record_and_one_fence_and_read_back() {
    for scheme in schemes() {
        let (m, pool) = setup(scheme);
        let mut model = vec![0u8; SIZE];
        let a = pool.attach_with("a", Perm::Write, KEY, declared()).unwrap();
        // `secure`: the first psync of an attach commits a version reservation (and pages).
        write(&a, &small(9));
        apply(&mut model, &small(9));
        let seq = a.psync().unwrap().seq;
        for i in 1..=5u8 {
            write(&a, &small(i));
            apply(&mut model, &small(i));
            let f0 = m.fences();
            let st = a.psync().unwrap();
            assert_eq!(m.fences() - f0, 1, "{scheme}: one fence per logged psync");
            assert_eq!((st.fences, st.pages), (1, 3), "{scheme}");
            assert_eq!(st.seq, seq, "{scheme}: no page commit");
        }
        // The records are durable: a crash now recovers them (the fold at open).
        let image = m.durable_image();
        let p2 = reopen(image).unwrap();
        assert!(contents(&p2, "a").unwrap() == model, "{scheme}: recovered");
        assert_healthy(&p2, "recovered");
        // A large psync (a whole page) cannot be logged in few bytes... it still fits one
        // record; past the area's room the psync is page-granular and folds the records.
        let big = vec![(0usize, vec![0x5Au8; 4096 * 5])];
        write(&a, &big);
        apply(&mut model, &big);
        let st = a.psync().unwrap();
        assert!(
            st.seq > seq,
            "{scheme}: 20 KiB do not fit the log: a page commit"
        );
        a.detach().unwrap();
        assert!(contents(&pool, "a").unwrap() == model, "{scheme}");
        assert_healthy(&pool, "after");
    }
}

#[test]
fn detach_without_psync_keeps_only_the_psynced_bytes() {
    for scheme in schemes() {
        let (_m, pool) = setup(scheme);
        let a = pool.attach_with("a", Perm::Write, KEY, declared()).unwrap();
        a.write_at(100, &[1; 8]).unwrap();
        a.psync().unwrap(); // logged
        a.write_at(104, &[2; 8]).unwrap(); // same page, not psynced
        a.write_at(3 * 4096, &[3; 8]).unwrap();
        a.detach().unwrap();
        let c = contents(&pool, "a").unwrap();
        let mut want = vec![0u8; SIZE];
        want[100..108].copy_from_slice(&[1; 8]);
        assert!(c == want, "{scheme}");
        // And rollback restores psynced log bytes, not the slot's older ones.
        let a = pool.attach_with("a", Perm::Write, KEY, declared()).unwrap();
        a.write_at(200, &[4; 8]).unwrap();
        a.psync().unwrap(); // logged
        a.write_at(196, &[5; 16]).unwrap();
        assert_eq!(a.rollback().unwrap(), 1);
        let mut b = [0u8; 16];
        a.read_at(196, &mut b).unwrap();
        assert_eq!(
            b,
            [0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4, 0, 0, 0, 0],
            "{scheme}"
        );
        a.detach().unwrap();
        want[200..208].copy_from_slice(&[4; 8]);
        assert!(contents(&pool, "a").unwrap() == want, "{scheme}");
    }
}

/// A pool image holding three live records in "a" (and one in "b"), the model after each
/// psync, and the pool it came from.
fn with_records(scheme: Scheme) -> (Vec<u8>, Vec<Vec<u8>>, Pool) {
    let (m, pool) = setup(scheme);
    let mut models = vec![vec![0u8; SIZE]];
    let b = pool.attach_with("b", Perm::Write, KEY, declared()).unwrap();
    b.write_at(8, &[9; 8]).unwrap();
    b.psync().unwrap();
    b.write_at(16, &[9; 8]).unwrap();
    b.psync().unwrap();
    let a = pool.attach_with("a", Perm::Write, KEY, declared()).unwrap();
    // `secure`: the first psync of an attach commits a version reservation (and pages).
    write(&a, &small(9));
    apply(&mut models[0], &small(9));
    a.psync().unwrap();
    for i in 1..=3u8 {
        write(&a, &small(i));
        let mut next = models.last().unwrap().clone();
        apply(&mut next, &small(i));
        models.push(next);
        assert_eq!(a.psync().unwrap().fences, 1);
    }
    let image = m.durable_image();
    a.detach().unwrap();
    b.detach().unwrap();
    (image, models, pool)
}

/// Offsets (from the area) of the records of an area: read from the headers.
fn record_offsets(image: &[u8], area: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut at = 64;
    while image[area + at..area + at + 4] == *b"PLOG" {
        out.push(at);
        let len = u32::from_le_bytes(image[area + at + 4..area + at + 8].try_into().unwrap());
        at += pmo_format::sublog::record_len(len as usize) as usize;
    }
    out
}

#[test]
fn tampered_records_are_detected_or_roll_back_only_the_last_psync() {
    for scheme in schemes() {
        let (image, models, pool) = with_records(scheme);
        let area = log_area(&pool, "a");
        let recs = record_offsets(&image, area);
        // `none` logs the first psync too; `secure` commits it with its reservation.
        assert!(recs.len() >= 3, "{scheme}");
        let recs = &recs[recs.len() - 3..];
        assert!(contents(&reopen(image.clone()).unwrap(), "a").unwrap() == models[3]);
        let integrity = |img: Vec<u8>, what: &str| {
            let p = reopen(img).unwrap();
            match contents(&p, "a") {
                Err(e) => assert!(e.is_integrity(), "{scheme} {what}: {e}"),
                Ok(_) => panic!("{scheme} {what}: read without an error"),
            }
        };
        // A flipped byte in the body of a middle record, and in the first one.
        for (r, at) in [(1usize, 60usize), (0, 50)] {
            let mut img = image.clone();
            img[area + recs[r] + at] ^= 0x10;
            integrity(img, &format!("flipped byte in record {}", r + 1));
        }
        // A dropped middle record.
        let mut img = image.clone();
        img[area + recs[1]..area + recs[2]].fill(0);
        integrity(img, "dropped record 2");
        // Record 1 of PMO "b" in place of "a"'s first record.
        let b_area = log_area(&pool, "b");
        let mut img = image.clone();
        let len = recs[1] - recs[0];
        let b_rec = image[b_area + 64..b_area + 64 + len].to_vec();
        img[area + recs[0]..area + recs[0] + len].copy_from_slice(&b_rec);
        integrity(img, "record swapped from another PMO");
        // The last record damaged: the documented rollback of the last psync only.
        let mut img = image.clone();
        img[area + recs[2] + 50] ^= 1;
        let p = reopen(img).unwrap();
        assert!(
            contents(&p, "a").unwrap() == models[2],
            "{scheme}: last record"
        );
        assert_healthy(&p, "last record dropped");
    }
}

#[test]
fn a_record_of_an_earlier_generation_is_refused() {
    for scheme in schemes() {
        let (m, pool) = setup(scheme);
        let area = log_area(&pool, "a");
        let a = pool.attach_with("a", Perm::Write, KEY, declared()).unwrap();
        write(&a, &small(9));
        a.psync().unwrap();
        write(&a, &small(1));
        a.psync().unwrap();
        write(&a, &small(2));
        a.psync().unwrap();
        let old = m.durable_image();
        // A page commit (too many bytes to log) obsoletes both; two new records follow.
        a.write_at(0, &vec![7u8; 4096 * 5]).unwrap();
        a.psync().unwrap();
        write(&a, &small(3));
        a.psync().unwrap();
        write(&a, &small(4));
        a.psync().unwrap();
        let mut img = m.durable_image();
        let recs = record_offsets(&old, area);
        let len = recs[1] - recs[0];
        img[area + recs[0]..area + recs[0] + len]
            .copy_from_slice(&old[area + recs[0]..area + recs[0] + len]);
        let p = reopen(img).unwrap();
        let e = contents(&p, "a").unwrap_err();
        assert!(e.is_integrity(), "{scheme}: {e}");
        a.detach().unwrap();
    }
}

/// Crash at every persist point of: three logged psyncs, a page-granular psync that takes
/// their pages too, two more logged psyncs, a detach (which folds them), then a crash during
/// the recovery of each image. Every PMO reads as the state of the last returned psync or
/// the one in flight, exactly.
#[test]
fn crash_at_every_persist_point_of_log_psyncs_folds_and_recovery() {
    for scheme in schemes() {
        let (m, pool) = setup(scheme);
        let base = m.durable_image();
        drop(pool);
        let mut steps: Vec<Vec<(usize, Vec<u8>)>> = (1..=3u8).map(small).collect();
        steps.push(vec![(4096 + 10, vec![0xEE; 4096 * 5 - 20])]);
        steps.extend((4..=5u8).map(small));
        let mut models = vec![vec![0u8; SIZE]];
        for s in &steps {
            let mut next = models.last().unwrap().clone();
            apply(&mut next, s);
            models.push(next);
        }
        let returned = AtomicUsize::new(0);
        let mut checked = 0;
        let points = explore(
            &base,
            2,
            0x106,
            |m| {
                returned.store(0, Ordering::SeqCst);
                let pool = Pool::open_on(m.clone())?;
                let a = pool.attach_with("a", Perm::Write, KEY, declared())?;
                for s in &steps {
                    write(&a, s);
                    a.psync()?;
                    returned.fetch_add(1, Ordering::SeqCst);
                }
                a.detach()?;
                returned.fetch_add(1, Ordering::SeqCst);
                Ok::<(), StoreError>(())
            },
            |cp| {
                let done = returned.load(Ordering::SeqCst).min(steps.len());
                let ctx = format!("{scheme} point {} variant {}", cp.point, cp.variant);
                let check = |image: Vec<u8>, ctx: &str| {
                    let p = reopen(image).unwrap();
                    let c = contents(&p, "a").unwrap_or_else(|e| panic!("{ctx}: {e}"));
                    let k = models
                        .iter()
                        .position(|s| *s == c)
                        .unwrap_or_else(|| panic!("{ctx}: not the state of any psync"));
                    assert!(
                        k == done || k == done + 1,
                        "{ctx}: state {k}, {done} psyncs returned"
                    );
                    if cp.completed {
                        assert_eq!(k, steps.len(), "{ctx}");
                    }
                    assert_healthy(&p, ctx);
                    k
                };
                let k = check(cp.image.clone(), &ctx);
                // A crash inside the recovery (the fold) of this image, at each of its points.
                if cp.variant == 1 {
                    explore(
                        &cp.image,
                        0,
                        7,
                        |m| {
                            let p = Pool::open_on(m.clone())?;
                            p.open_pmo("a", Perm::Write, KEY, None).map(drop)
                        },
                        |rp| {
                            let c2 = format!("{ctx} recovery point {}", rp.point);
                            let p = reopen(rp.image.clone()).unwrap();
                            let c = contents(&p, "a").unwrap_or_else(|e| panic!("{c2}: {e}"));
                            assert!(c == models[k], "{c2}");
                        },
                    );
                }
                checked += 1;
            },
        );
        assert!(points >= 8, "{scheme}: {points} persist points");
        assert!(checked > points as usize, "{scheme}");
    }
}

/// Random small and large psyncs, detaches with unpsynced writes, rollbacks and crashes,
/// against a model of the committed and the attached contents.
#[test]
fn random_operations_match_a_model() {
    use rand::{Rng, SeedableRng};
    for scheme in schemes() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x5ab1 ^ scheme.code() as u64);
        let (m, pool) = setup(scheme);
        let mut pool = Some(pool);
        let mut m = m;
        let mut committed = vec![0u8; SIZE];
        for round in 0..12 {
            let p = pool.take().unwrap();
            let a = p.attach_with("a", Perm::Write, KEY, declared()).unwrap();
            let mut view = committed.clone();
            for _ in 0..rng.gen_range(1..12) {
                let len = if rng.gen_bool(0.15) {
                    rng.gen_range(1..3 * 4096)
                } else {
                    rng.gen_range(1..64)
                };
                let off = rng.gen_range(0..SIZE - len);
                let v: u8 = rng.gen();
                a.write_at(off, &vec![v; len]).unwrap();
                view[off..off + len].fill(v);
                match rng.gen_range(0..10) {
                    0..=5 => {
                        a.psync().unwrap();
                        committed.clone_from(&view);
                    }
                    6 => {
                        a.rollback().unwrap();
                        view.clone_from(&committed);
                    }
                    _ => {}
                }
            }
            let mut seen = vec![0u8; SIZE];
            a.read_at(0, &mut seen).unwrap();
            assert!(seen == view, "{scheme} round {round}: the view");
            if rng.gen_bool(0.5) {
                // Crash: only what is durable survives.
                let image = m.durable_image();
                drop(a);
                drop(p);
                m = Arc::new(CrashMedium::from_image(image));
                pool = Some(Pool::open_on(m.clone()).unwrap());
            } else {
                a.detach().unwrap();
                pool = Some(p);
            }
            let p = pool.as_ref().unwrap();
            assert!(
                contents(p, "a").unwrap() == committed,
                "{scheme} round {round}"
            );
        }
        assert_healthy(pool.as_ref().unwrap(), "model");
    }
}

/// Without the option a PMO has no log area and every psync is page-granular (two fences).
#[test]
fn pmos_without_a_log_keep_page_granular_psync() {
    if std::env::var_os("PMO_LOG").is_some() {
        return;
    }
    let m = Arc::new(CrashMedium::new(2 << 20));
    let pool = Pool::create_on(m.clone(), &opts(Scheme::SECURE)).unwrap();
    pool.pcreate("plain", 4 * 4096, KEY).unwrap();
    let i = pool.info("plain").unwrap();
    let a = pool
        .attach_with("plain", Perm::Write, KEY, declared())
        .unwrap();
    a.write_at(8, &[1; 8]).unwrap();
    let st = a.psync().unwrap();
    assert!(st.seq >= 1 && st.fences >= 2, "{st:?}");
    a.detach().unwrap();
    let logged = pool.pcreate_logged("logged", 4 * 4096, KEY, None).unwrap();
    assert_eq!(logged.extent_len, i.extent_len + LOG_BYTES);
    assert_eq!(m.len() % 64, 0);
}

const KILL_CHILD_ENV: &str = "PMO_SUBLOG_KILL_CHILD_POOL";
const KILL_PAGES: usize = 4;

/// Child of the SIGKILL test: attach (declared), then forever: write iteration `i` (4 bytes) at
/// offset 64 of each of four pages, psync (logged; a page commit each time the log is full),
/// acknowledge.
#[test]
fn sublog_kill_child_main() {
    let Ok(path) = std::env::var(KILL_CHILD_ENV) else {
        return;
    };
    let pool = Pool::open(path.as_ref()).expect("child open");
    let a = pool
        .attach_with("victim", Perm::Write, KEY, declared())
        .expect("child attach");
    let start: u32 = std::env::var("PMO_SUBLOG_KILL_START")
        .unwrap()
        .parse()
        .unwrap();
    for i in start.. {
        for p in 0..KILL_PAGES {
            a.write_at(p * 4096 + 64, &i.to_le_bytes()).unwrap();
        }
        a.psync().unwrap();
        println!("{i}");
    }
}

/// Real SIGKILLs at random moments during a stream of small psyncs: after each, the reopened
/// PMO holds the last acknowledged iteration or the one in flight on every page, never a mix.
/// `PMO_KILLS` sets the kills per scheme (default 100).
#[test]
fn sigkill_during_small_psyncs_loses_no_acknowledged_psync() {
    use rand::{Rng, SeedableRng};
    use std::io::{BufRead, BufReader};
    use std::os::unix::process::ExitStatusExt;
    use std::process::{Command, Stdio};
    if std::env::var(KILL_CHILD_ENV).is_ok() {
        return;
    }
    let kills: usize = std::env::var("PMO_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        std::path::PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    for scheme in schemes() {
        let path = dir.join(format!(
            "pmo-sublog-kill-{}-{scheme}.pool",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&path);
        let pool = Pool::create(
            &path,
            8 << 20,
            &PoolOptions {
                kdf: KdfParams::INSECURE_FAST,
                scheme,
                ..Default::default()
            },
        )
        .unwrap();
        pool.pcreate_logged("victim", (KILL_PAGES * 4096) as u64, KEY, None)
            .unwrap();
        drop(pool);
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x10c);
        let exe = std::env::current_exe().unwrap();
        let mut floor = 0u32;
        let mut in_flight = 0;
        for k in 0..kills {
            let mut child = Command::new(&exe)
                .args([
                    "--exact",
                    "sublog_kill_child_main",
                    "--nocapture",
                    "--test-threads=1",
                    "--quiet",
                ])
                .env(KILL_CHILD_ENV, &path)
                .env("PMO_SUBLOG_KILL_START", (floor + 1).to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let acked = Arc::new(std::sync::atomic::AtomicU64::new(0));
            let reader = {
                let acked = acked.clone();
                let out = child.stdout.take().unwrap();
                std::thread::spawn(move || {
                    for line in BufReader::new(out).lines().map_while(Result::ok) {
                        if let Ok(i) = line.trim().parse::<u64>() {
                            acked.store(i, Ordering::SeqCst);
                        }
                    }
                })
            };
            let t0 = std::time::Instant::now();
            while acked.load(Ordering::SeqCst) == 0
                && t0.elapsed() < std::time::Duration::from_secs(10)
            {
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            std::thread::sleep(std::time::Duration::from_micros(rng.gen_range(0..3000)));
            child.kill().unwrap();
            let status = child.wait().unwrap();
            assert_eq!(status.signal(), Some(9), "{scheme} kill {k}: {status:?}");
            reader.join().unwrap();
            let last = acked.load(Ordering::SeqCst) as u32;
            assert!(last > floor, "{scheme} kill {k}: nothing acknowledged");
            let pool = Pool::open(&path).unwrap();
            let h = pool.open_pmo("victim", Perm::Write, KEY, None).unwrap();
            let mut page = [0u8; 4096];
            let mut found = Vec::new();
            for p in 0..KILL_PAGES {
                h.read_page(p as u64, &mut page).unwrap();
                found.push(u32::from_le_bytes(page[64..68].try_into().unwrap()));
            }
            assert!(
                found.iter().all(|&f| f == found[0]) && (found[0] == last || found[0] == last + 1),
                "{scheme} kill {k}: pages hold {found:?}, last acknowledged {last}"
            );
            in_flight += usize::from(found[0] == last + 1);
            drop(h);
            let report = pool.check().unwrap();
            assert!(
                report.problems.is_empty(),
                "{scheme} kill {k}: {:?}",
                report.problems
            );
            floor = found[0];
        }
        eprintln!("{scheme}: {kills} kills, {in_flight} with the psync in flight committed");
        std::fs::remove_file(&path).unwrap();
    }
}

/// The whole contents of PMO `name` read through a live snapshot's export file (import).
fn exported(pool: &Pool, name: &str, tag: &str) -> Vec<u8> {
    let file = std::env::temp_dir().join(format!(
        "pmo-sublog-{tag}-{}-{}.pmoexp",
        std::process::id(),
        name
    ));
    let _ = std::fs::remove_file(&file);
    pool.export(name, KEY, &file, &mut |_, _| {}).unwrap();
    pool.import(&file, Some("imp"), KEY, &mut |_, _| {})
        .unwrap();
    std::fs::remove_file(&file).unwrap();
    let out = contents(pool, "imp").unwrap();
    pool.pdestroy("imp", KEY).unwrap();
    out
}

#[test]
fn a_live_snapshot_export_and_copy_overlay_the_writers_live_records() {
    for scheme in schemes() {
        let (_m, pool) = setup(scheme);
        let mut model = vec![0u8; SIZE];
        let a = pool.attach_with("a", Perm::Write, KEY, declared()).unwrap();
        write(&a, &small(9));
        apply(&mut model, &small(9));
        let base = a.psync().unwrap().seq;
        for i in 1..=5u8 {
            write(&a, &small(i));
            apply(&mut model, &small(i));
            assert_eq!(a.psync().unwrap().seq, base, "{scheme}: logged");
        }
        // Stored but not psynced: in no copy.
        write(&a, &small(40));
        // The writer never psyncs during the copies: they do not wait for it.
        let (_, rep) = pool.snapshot("a", "s1", KEY, None, &mut |_, _| {}).unwrap();
        // `none`'s first psync is logged too (over no page commit), `secure`'s commits pages.
        let n = rep.log_records;
        assert!(rep.seq == base && n >= 5, "{scheme}: {rep:?}");
        assert!(
            contents(&pool, "s1").unwrap() == model,
            "{scheme}: snapshot"
        );
        pool.copy("a", "c1", KEY, None, &mut |_, _| {}).unwrap();
        assert!(contents(&pool, "c1").unwrap() == model, "{scheme}: copy");
        assert!(exported(&pool, "a", "live") == model, "{scheme}: export");
        for n in ["s1", "c1"] {
            pool.pdestroy(n, KEY).unwrap();
        }
        // A later logged psync, then a page commit that folds: each copy as of the newest.
        apply(&mut model, &small(40));
        assert_eq!(a.psync().unwrap().seq, base, "{scheme}: logged");
        let (_, rep) = pool.snapshot("a", "s2", KEY, None, &mut |_, _| {}).unwrap();
        assert_eq!(rep.log_records, n + 1, "{scheme}");
        assert!(
            contents(&pool, "s2").unwrap() == model,
            "{scheme}: snapshot 2"
        );
        let big = vec![(4096usize, vec![0x77u8; 4096 * 5])];
        write(&a, &big);
        apply(&mut model, &big);
        assert!(a.psync().unwrap().seq > base, "{scheme}: a page commit");
        let (_, rep) = pool.snapshot("a", "s3", KEY, None, &mut |_, _| {}).unwrap();
        assert_eq!(rep.log_records, 0, "{scheme}: folded");
        assert!(
            contents(&pool, "s3").unwrap() == model,
            "{scheme}: snapshot 3"
        );
        a.detach().unwrap();
        assert!(contents(&pool, "a").unwrap() == model, "{scheme}");
        assert_healthy(&pool, "after the snapshots");
    }
}

#[test]
fn live_snapshots_beside_a_psyncing_writer_are_each_as_of_one_psync() {
    use std::time::{Duration, Instant};
    const PATIENCE: Duration = Duration::from_secs(120);
    for scheme in schemes() {
        let (_m, pool) = setup(scheme);
        // The state each returned psync committed, with the records over its page commit.
        let history = std::sync::Mutex::new(vec![(0u64, vec![0u8; SIZE])]);
        let done = std::sync::atomic::AtomicBool::new(false);
        // Snapshots that met live records, and snapshots taken (the writer goes on until a few
        // met records, or for 2000 psyncs).
        let met = AtomicUsize::new(0);
        let taken = AtomicUsize::new(0);
        std::thread::scope(|s| {
            s.spawn(|| {
                let a = pool.attach_with("a", Perm::Write, KEY, declared()).unwrap();
                let mut model = vec![0u8; SIZE];
                let (mut seq, mut records) = (0, 0);
                let mut i = 0u32;
                while i < 100 || (met.load(Ordering::SeqCst) < 3 && i < 2000) {
                    i += 1;
                    // Mostly small logged psyncs; every 40th a page commit that folds them.
                    let w = if i.is_multiple_of(40) {
                        vec![(0usize, vec![i as u8; 4096 * 5])]
                    } else {
                        small((i % 251) as u8)
                    };
                    write(&a, &w);
                    apply(&mut model, &w);
                    let st = a.psync().unwrap();
                    if st.seq == seq && st.fences == 1 {
                        records += 1;
                    } else {
                        (seq, records) = (st.seq, 0);
                    }
                    history.lock().unwrap().push((records, model.clone()));
                    // A snapshot that a psync overlaps closes the gate, so the psyncs commit
                    // pages and it meets no records: on a loaded machine every snapshot of the
                    // first 100 psyncs may have. Then the writer, records live, leaves one
                    // snapshot whole to itself: it begins after the one in progress ends.
                    if i >= 100 && records > 0 && met.load(Ordering::SeqCst) == 0 {
                        let t0 = Instant::now();
                        let until = taken.load(Ordering::SeqCst) + 2;
                        while taken.load(Ordering::SeqCst) < until {
                            assert!(t0.elapsed() < PATIENCE, "{scheme}: no snapshot for 120 s");
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    }
                }
                // The detach folds the records: the same state, over a page commit.
                a.detach().unwrap();
                history.lock().unwrap().push((0, model));
                done.store(true, Ordering::SeqCst);
            });
            let mut k = 0;
            while !done.load(Ordering::SeqCst) || k < 2 {
                let (_, rep) = pool.snapshot("a", "s", KEY, None, &mut |_, _| {}).unwrap();
                // The psync the snapshot is as of had committed before it returned, but the
                // writer records a state only once its psync returns: it is recorded now, or
                // by the writer's next record, or once the writer is done.
                let recorded = history.lock().unwrap().len();
                if rep.log_records > 0 {
                    met.fetch_add(1, Ordering::SeqCst);
                }
                taken.fetch_add(1, Ordering::SeqCst);
                let got = contents(&pool, "s").unwrap();
                pool.pdestroy("s", KEY).unwrap();
                let t0 = Instant::now();
                let found = loop {
                    let finished = done.load(Ordering::SeqCst);
                    let h = history.lock().unwrap();
                    if h.iter()
                        .any(|(r, state)| *r == rep.log_records && *state == got)
                    {
                        break true;
                    }
                    if finished || h.len() > recorded {
                        break false;
                    }
                    drop(h);
                    assert!(t0.elapsed() < PATIENCE, "{scheme}: no psync for 120 s");
                    std::thread::sleep(Duration::from_millis(1));
                };
                assert!(
                    found,
                    "{scheme}: snapshot {k} is not the state of a psync {} records after a page commit: {rep:?}",
                    rep.log_records
                );
                k += 1;
            }
        });
        assert!(
            met.load(Ordering::SeqCst) > 0,
            "{scheme}: no snapshot met live records"
        );
        assert_healthy(&pool, "after the racing snapshots");
    }
}

/// A resize of a PMO whose records a crash left unfolded sees them: a shrink over a page that
/// only a record holds is refused without `force`, and after a forced shrink and a grow back
/// the regrown page reads as zeros, not as the record's bytes (the entry-only resize, which
/// reads only the page map, would otherwise drop the psynced bytes and let a later recovery
/// fold them into a page past the size).
#[test]
fn a_resize_sees_records_a_crash_left() {
    for scheme in schemes() {
        let (m, _pool) = setup(scheme);
        let a = pool_attach(&_pool);
        a.write_at(8, &[1; 8]).unwrap();
        a.psync().unwrap(); // `secure`: a page commit with the reservation
        a.write_at(5 * 4096 + 16, &[7; 8]).unwrap();
        assert_eq!(a.psync().unwrap().fences, 1, "{scheme}: logged");
        let image = m.durable_image();
        drop(a);
        let pool = reopen(image).unwrap();
        let small = 4 * 4096;
        let e = pool
            .resize("a", small, KEY, Default::default())
            .expect_err("a shrink over psynced bytes without force");
        assert!(e.to_string().contains("holds data"), "{scheme}: {e}");
        let mut want = vec![0u8; SIZE];
        want[8..16].copy_from_slice(&[1; 8]);
        want[5 * 4096 + 16..][..8].copy_from_slice(&[7; 8]);
        assert!(contents(&pool, "a").unwrap() == want, "{scheme}");
        let force = pmo_store::ResizeOptions {
            force: true,
            progress: None,
        };
        pool.resize("a", small, KEY, force).unwrap();
        pool.resize("a", SIZE as u64, KEY, Default::default())
            .unwrap();
        want[5 * 4096 + 16..][..8].fill(0);
        assert!(contents(&pool, "a").unwrap() == want, "{scheme}");
        assert_healthy(&pool, "after");
    }
}

fn pool_attach(pool: &Pool) -> pmo_store::Attachment {
    pool.attach_with("a", Perm::Write, KEY, declared()).unwrap()
}

/// A crash medium whose next fence can be made to fail once (a transient persistence error).
struct FlakyMedium {
    inner: CrashMedium,
    fail_next_fence: std::sync::atomic::AtomicBool,
}

impl Medium for FlakyMedium {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), pmo_medium::MediumError> {
        self.inner.read(offset, buf)
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), pmo_medium::MediumError> {
        self.inner.write(offset, data)
    }
    fn flush(&self, offset: u64, len: u64) -> Result<(), pmo_medium::MediumError> {
        self.inner.flush(offset, len)
    }
    fn fence(&self) -> Result<(), pmo_medium::MediumError> {
        if self.fail_next_fence.swap(false, Ordering::SeqCst) {
            return Err(pmo_medium::MediumError::Io {
                op: "fence",
                source: std::io::Error::other("injected fence failure"),
            });
        }
        self.inner.fence()
    }
    fn kind(&self) -> pmo_medium::MediumKind {
        self.inner.kind()
    }
    fn path(&self) -> Option<&std::path::Path> {
        None
    }
}

/// A persistence failure poisons the pool: a later logged psync fails with `Poisoned` (it
/// appended a record and reported it durable), and the detach writes no fold.
#[test]
fn a_poisoned_pool_takes_no_logged_psync_and_no_fold() {
    for scheme in schemes() {
        let m = Arc::new(FlakyMedium {
            inner: CrashMedium::new(2 << 20),
            fail_next_fence: false.into(),
        });
        let pool = Pool::create_on(m.clone(), &opts(scheme)).unwrap();
        pool.pcreate_logged("a", PAGES * 4096, KEY, Some(scheme))
            .unwrap();
        let a = pool.attach_with("a", Perm::Write, KEY, declared()).unwrap();
        a.write_at(8, &[1; 8]).unwrap();
        a.psync().unwrap();
        a.write_at(16, &[2; 8]).unwrap();
        assert_eq!(a.psync().unwrap().fences, 1, "{scheme}: logged");
        m.fail_next_fence.store(true, Ordering::SeqCst);
        a.write_at(24, &[3; 8]).unwrap();
        assert!(a.psync().is_err(), "{scheme}: the fence failed");
        let fences = m.inner.fences();
        a.write_at(32, &[4; 8]).unwrap();
        let r = a.psync();
        assert!(
            matches!(r, Err(StoreError::Poisoned)),
            "{scheme}: a psync on a poisoned pool: {r:?}"
        );
        drop(a);
        assert_eq!(
            m.inner.fences(),
            fences,
            "{scheme}: nothing persisted after the pool was poisoned"
        );
    }
}

/// A shrink leaves nothing of the pages it drops on the medium (`resize`'s `clear_pages`):
/// not in the slots, and not in the (folded, obsolete) records of the sub-page log either.
#[test]
fn a_shrink_leaves_no_dropped_bytes_in_the_log_area() {
    let (m, pool) = setup(Scheme::NONE);
    let secret: Vec<u8> = (0..32u8).map(|i| i.wrapping_mul(37) ^ 0xa5).collect();
    let a = pool.attach_with("a", Perm::Write, KEY, declared()).unwrap();
    a.write_at(8, &[1; 8]).unwrap();
    a.psync().unwrap();
    a.write_at(5 * 4096 + 64, &secret).unwrap();
    assert_eq!(a.psync().unwrap().fences, 1, "logged");
    a.detach().unwrap(); // folds the record into page 5
    let force = pmo_store::ResizeOptions {
        force: true,
        progress: None,
    };
    pool.resize("a", 4 * 4096, KEY, force).unwrap();
    let img = m.durable_image();
    assert!(
        !img.windows(secret.len()).any(|w| w == secret),
        "bytes of a dropped page are left on the medium"
    );
    let mut want = vec![0u8; 4 * 4096];
    want[8..16].copy_from_slice(&[1; 8]);
    let h = pool.open_pmo("a", Perm::Read, KEY, None).unwrap();
    let mut buf = [0u8; 4096];
    h.read_page(0, &mut buf).unwrap();
    assert_eq!(buf[..], want[..4096]);
    drop(h);
    assert_healthy(&pool, "after");
}

/// A fold that fails (here: another page's slots are damaged, an integrity error) keeps the
/// live records: a later page commit that succeeds still takes their pages, so an
/// acknowledged psync's bytes are not dropped when the base moves on.
#[test]
fn a_failed_fold_keeps_the_live_records() {
    let scheme = Scheme::SECURE;
    let (m, pool) = setup(scheme);
    let a = pool.attach_with("a", Perm::Write, KEY, declared()).unwrap();
    a.write_at(4 * 4096, &[1; 8]).unwrap();
    a.write_at(5 * 4096, &[2; 8]).unwrap();
    a.psync().unwrap(); // `secure`: a page commit with the reservation
    a.write_at(4 * 4096 + 100, &[3; 8]).unwrap();
    assert_eq!(a.psync().unwrap().fences, 1, "logged");
    a.write_at(5 * 4096 + 100, &[4; 8]).unwrap();
    assert_eq!(a.psync().unwrap().fences, 1, "logged");
    // Damage both slots of page 5.
    let info = pool.info("a").unwrap();
    let layout = pmo_format::layout::PmoLayout::new(PAGES, scheme.tag_bytes() as u64)
        .and_then(|l| l.with_log(true))
        .unwrap();
    for slot in 0..2u8 {
        let at = info.extent_off + layout.page(slot, 5);
        let mut b = [0u8; 1];
        m.read(at, &mut b).unwrap();
        m.write(at, &[b[0] ^ 0x40]).unwrap();
        m.flush(at, 1).unwrap();
    }
    m.fence().unwrap();
    // A page commit that folds first: the fold meets page 5 and fails.
    let page = [7u8; 4096];
    assert!(a.handle().commit_pages(&[(3, &page)]).is_err());
    // A page-granular psync (more declared bytes than a record holds) moves the base on.
    a.write_at(0, &vec![9; 4 * 4096]).unwrap();
    a.write_at(0, &[9]).unwrap();
    a.psync().unwrap();
    a.detach().unwrap();
    let h = pool.open_pmo("a", Perm::Read, KEY, None).unwrap();
    let mut buf = [0u8; 4096];
    h.read_page(4, &mut buf).unwrap();
    assert_eq!(buf[..8], [1; 8]);
    assert_eq!(
        buf[100..108],
        [3; 8],
        "the logged psync of page 4 was dropped"
    );
}

/// `declare_ranges` (one hold of the declared ranges for several): every range is committed
/// by the next psync, sub-page (one log record); a batch with one range outside the PMO is
/// refused whole, so its valid range is not declared and the psync commits nothing of it; a
/// read-only attachment refuses.
#[test]
fn declare_ranges_commits_each_range_or_refuses_the_whole_batch() {
    for scheme in schemes() {
        let (_m, pool) = setup(scheme);
        let mut model = vec![0u8; SIZE];
        let a = pool.attach_with("a", Perm::Write, KEY, declared()).unwrap();
        let base = a.addr();
        let writes: [(usize, u8, usize); 3] = [
            (100, 0xa1, 8),
            (4096 + 7, 0xb2, 1),
            (3 * 4096 + 4000, 0xc3, 96),
        ];
        let ranges: Vec<(usize, usize)> = writes.iter().map(|&(o, _, l)| (o, l)).collect();
        // Round 0 commits the pages whole (their first commit); round 1 is logged.
        for round in 0..2u8 {
            for &(off, b, len) in &writes {
                // SAFETY: inside the view of the write attachment (off + len <= SIZE).
                unsafe { std::ptr::write_bytes(base.add(off), b ^ round, len) };
                model[off..off + len].fill(b ^ round);
            }
            a.declare_ranges(&ranges).unwrap();
            let st = a.psync().unwrap();
            assert_eq!(st.pages, 3, "{st:?}");
            if round == 1 {
                assert_eq!(st.fences, 1, "logged: {st:?}");
            }
        }
        a.detach().unwrap();
        assert_eq!(contents(&pool, "a").unwrap(), model, "{scheme:?}");

        let a = pool.attach_with("a", Perm::Write, KEY, declared()).unwrap();
        let base = a.addr();

        // One bad range: the batch is refused before anything is recorded.
        // SAFETY: as above.
        unsafe { std::ptr::write_bytes(base.add(2 * 4096), 0xdd, 16) };
        let err = a
            .declare_ranges(&[(2 * 4096, 16), (SIZE - 4, 8)])
            .unwrap_err();
        assert!(matches!(err, StoreError::Invalid(_)), "{err}");
        let st = a.psync().unwrap();
        assert_eq!(st.pages, 0, "{st:?}");
        a.detach().unwrap();
        assert_eq!(contents(&pool, "a").unwrap(), model, "{scheme:?}");

        // Relocatable like every attach here: the tests' pools share one base address, and
        // another test's attachment may hold "a"'s stable address at this moment.
        let opts = AttachOptions {
            relocate: true,
            ..Default::default()
        };
        let r = pool.attach_with("a", Perm::Read, KEY, opts).unwrap();
        let err = r.declare_ranges(&[(0, 8)]).unwrap_err();
        assert!(matches!(err, StoreError::ReadOnly(_)), "{err}");
    }
}

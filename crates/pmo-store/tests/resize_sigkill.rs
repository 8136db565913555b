//! Real-process crash test of resize under a live writer: a child attaches a PMO, writes a
//! recognisable pattern over every page, psyncs, reports, then grows the attached PMO by a page
//! through `Attachment::resize` (or, past 160 pages, shrinks it back to 64 with force), checks
//! its address did not move and reports again, in a loop, until
//! the parent SIGKILLs it at a random moment. The parent reopens the pool (recovery) and checks
//! that the PMO has the size before or after the resize in flight and holds one iteration on
//! every page (zeros on pages a grow added), never a mix; that the pool passes `check` with no
//! space leaked; and that no plaintext is left on the medium for a protected scheme.
//!
//! The second test gives the PMO a layout capacity, so that every grow is in place: the
//! writer's view and attach stay, only the entry changes.
//!
//! `PMO_RESIZE_KILLS` sets the number of kills per scheme (default 25).

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pmo_store::{AttachOptions, Attachment, KdfParams, Perm, Pool, PoolOptions, Scheme};
use rand::{Rng, SeedableRng};

const KEY: &[u8] = b"resize-kill-key";
const CHILD_ENV: &str = "PMO_RESIZE_KILL_CHILD_POOL";
const START_PAGES: u64 = 64;

/// The size after the resize of a PMO of `s` pages.
fn next(s: u64) -> u64 {
    if s < 160 {
        s + 1
    } else {
        START_PAGES
    }
}

/// The pattern of iteration `i` on page `p`: every u32 is `i`, except a page tag at the start.
fn fill(page: &mut [u8], i: u32, p: u64) {
    for w in page.chunks_exact_mut(4) {
        w.copy_from_slice(&i.to_le_bytes());
    }
    page[..4].copy_from_slice(&(p as u32 | 0xAB00_0000).to_le_bytes());
}

/// Write iteration `i` over every page of attached PMO `a`, psync. Returns its size in pages.
fn write_all(a: &Attachment, i: u32) -> u64 {
    let s = (a.len() / 4096) as u64;
    let mut page = vec![0u8; 4096];
    for p in 0..s {
        fill(&mut page, i, p);
        a.write_at(p as usize * 4096, &page).unwrap();
    }
    a.psync().unwrap();
    s
}

/// [`write_all`] through an attach of its own (detached after).
fn write_detached(pool: &Pool, i: u32) -> u64 {
    write_all(&pool.attach("victim", Perm::Write, KEY).expect("attach"), i)
}

/// Child: the writer keeps the PMO attached: write + psync + report, resize (the attached
/// writer's own `Attachment::resize`) + report, forever.
#[test]
fn resize_kill_child_main() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let pool = Pool::open(path.as_ref()).expect("child open");
    let start: u32 = std::env::var("PMO_RESIZE_KILL_START")
        .unwrap()
        .parse()
        .unwrap();
    let mut a = pool.attach("victim", Perm::Write, KEY).expect("attach");
    for i in start.. {
        let s = write_all(&a, i);
        println!("w {i} {s}");
        let base = a.addr();
        let capacity = pool.info("victim").unwrap().capacity / 4096;
        let r;
        (a, r) = match a.resize(next(s) * 4096, KEY, AttachOptions::default(), true) {
            Ok(x) => x,
            Err(e) => panic!("resize: {e:?}"),
        };
        assert_eq!(a.addr(), base, "the writer's address moved");
        assert_eq!(
            r.in_place,
            next(s) <= capacity,
            "in place within the capacity only"
        );
        println!("r {}", next(s));
    }
}

/// What the child last reported.
#[derive(Clone, Copy, Debug)]
enum Last {
    /// Iteration written at this size; a resize may be in flight.
    Wrote(u64),
    /// Resized to this size; a write of the next iteration may be in flight.
    Resized(u64),
}

/// Scan the pool file for a plaintext page of iteration `i` (256 bytes of its pattern).
fn plaintext_on_medium(path: &std::path::Path, i: u32) -> bool {
    let image = std::fs::read(path).unwrap();
    let needle: Vec<u8> = (0..64).flat_map(|_| i.to_le_bytes()).collect();
    image
        .chunks_exact(4096)
        .any(|page| page[1024..1024 + 256] == needle[..])
}

/// `max_pages`: the PMO's layout capacity in pages (0: its size). With one, every grow of the
/// child's loop is in place (`Attachment::grow`: nothing detached, the view kept) and only the
/// shrink back detaches.
fn run_kills(scheme: Scheme, kills: usize, max_pages: u64) {
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        std::path::PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let path = dir.join(format!(
        "pmo-resize-kill-{}-{max_pages}.pool",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    let pool = Pool::create(
        &path,
        32 << 20,
        &PoolOptions {
            kdf: KdfParams::INSECURE_FAST,
            scheme,
            ..Default::default()
        },
    )
    .unwrap();
    pool.pcreate_max("victim", START_PAGES * 4096, max_pages * 4096, KEY, None)
        .unwrap();
    let mut iteration = 1u32;
    let mut wrote_at = write_detached(&pool, iteration);
    drop(pool);
    pmo_store::wait_for_background_detaches();

    let mut rng = rand::rngs::StdRng::seed_from_u64(0x14a_0001);
    let exe = std::env::current_exe().unwrap();
    let (mut during_resize, mut moved) = (0, 0);
    // Kill `kills` times, and on (up to 3x) until one kill landed in a resize.
    let mut k = 0;
    while k < kills || (during_resize == 0 && k < 3 * kills) {
        k += 1;
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "resize_kill_child_main",
                "--nocapture",
                "--test-threads=1",
                "--quiet",
            ])
            .env(CHILD_ENV, &path)
            .env("PMO_RESIZE_KILL_START", (iteration + 1).to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let lines = Arc::new(Mutex::new(Vec::<String>::new()));
        let reader = {
            let lines = lines.clone();
            let out = child.stdout.take().unwrap();
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    lines.lock().unwrap().push(line);
                }
            })
        };
        // Aim at a resize: wait for the report of a write (the resize starts right after it),
        // then kill a random moment later (or, one time in four, anywhere).
        let writes = |lines: &Mutex<Vec<String>>| {
            let l = lines.lock().unwrap();
            l.iter().filter(|l| l.starts_with("w ")).count()
        };
        let target = rng.gen_range(1..=3);
        let t0 = std::time::Instant::now();
        while writes(&lines) < target && t0.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_micros(100));
        }
        // An in-place grow takes microseconds: aim closer behind the report.
        let late = match (rng.gen_range(0..4), max_pages) {
            (0, _) => 6000,
            (_, 0) => 800,
            _ => 150,
        };
        std::thread::sleep(Duration::from_micros(rng.gen_range(0..late)));
        child.kill().unwrap();
        let status = child.wait().unwrap();
        assert_eq!(
            status.signal(),
            Some(9),
            "kill {k}: child ended by {status:?}"
        );
        reader.join().unwrap();
        // Replay the child's reports.
        let mut last = Last::Resized(wrote_at);
        for line in lines.lock().unwrap().iter() {
            // Only the child's reports ("w I S", "r S"), not the test harness's lines.
            let Ok(f) = line
                .split_whitespace()
                .skip(1)
                .map(|x| x.parse::<u64>())
                .collect::<Result<Vec<u64>, _>>()
            else {
                continue;
            };
            if line.starts_with("w ") && f.len() == 2 {
                iteration = f[0] as u32;
                wrote_at = f[1];
                last = Last::Wrote(f[1]);
            } else if line.starts_with("r ") && f.len() == 1 {
                last = Last::Resized(f[0]);
            }
        }

        let pool = Pool::open(&path).unwrap();
        let size = pool.info("victim").unwrap().size / 4096;
        let ctx = format!("{scheme} kill {k} ({last:?}, iteration {iteration})");
        // The size before or after the resize in flight.
        match last {
            Last::Wrote(s) => {
                assert!(size == s || size == next(s), "{ctx}: size {size}");
                during_resize += 1;
            }
            Last::Resized(s) => assert_eq!(size, s, "{ctx}: size"),
        }
        // Pages past the size of the last write were added by a grow: zeros.
        let written = wrote_at;
        let h = pool.open_pmo("victim", Perm::Write, KEY, None).unwrap();
        let mut page = [0u8; 4096];
        h.read_page(0, &mut page).unwrap();
        let found = u32::from_le_bytes(page[4..8].try_into().unwrap());
        let in_flight = found == iteration + 1 && matches!(last, Last::Resized(_));
        assert!(
            found == iteration || in_flight,
            "{ctx}: page 0 holds {found}"
        );
        let mut expect = [0u8; 4096];
        for p in 0..size {
            h.read_page(p, &mut page).unwrap();
            if in_flight || p < written {
                fill(&mut expect, found, p);
            } else {
                expect = [0u8; 4096];
            }
            assert!(
                page == expect,
                "{ctx}: page {p} is not iteration {found} (a mix)"
            );
        }
        drop(h);
        if let Last::Wrote(s) = last {
            if size != s {
                moved += 1;
            }
        }
        let r = pool.check().unwrap();
        assert!(r.problems.is_empty(), "{ctx}: {:?}", r.problems);
        assert_eq!(
            r.used_bytes + r.free_bytes,
            r.heap_len,
            "{ctx}: space leaked"
        );
        drop(pool);
        pmo_store::wait_for_background_detaches();
        if scheme.is_protected() {
            for i in [found, found + 1] {
                assert!(
                    !plaintext_on_medium(&path, i),
                    "{ctx}: plaintext of {i} left"
                );
            }
        }
        // The next child starts from a known state: this process writes a fresh iteration.
        iteration = found + 1;
        let pool = Pool::open(&path).unwrap();
        wrote_at = write_detached(&pool, iteration);
        drop(pool);
        pmo_store::wait_for_background_detaches();
    }
    eprintln!(
        "{scheme}: {k} kills, {during_resize} during a resize ({moved} of them after its switch)"
    );
    assert!(during_resize > 0, "{scheme}: no kill landed in a resize");
    let _ = std::fs::remove_file(&path);
}

#[test]
fn sigkill_during_resize_under_a_live_writer_loses_nothing() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let kills: usize = std::env::var("PMO_RESIZE_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(25);
    for name in ["secure", "none", "wedi", "sp-ip:medium"] {
        run_kills(Scheme::from_name(name).unwrap(), kills, 0);
    }
}

/// The same with a layout capacity: the grows are in place, under the live writer.
#[test]
fn sigkill_during_an_in_place_grow_under_a_live_writer_loses_nothing() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let kills: usize = std::env::var("PMO_RESIZE_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(25);
    for name in ["secure", "none", "sp-ip:medium"] {
        run_kills(Scheme::from_name(name).unwrap(), kills, 256);
    }
}

//! One small session (issue 29), each beside its floor measured in the same run: a 16 KiB
//! (4-page) PMO's attach + read of every page + detach (attached read-write, as the file store
//! does, and read-only: a snapshot reader), its attach + write of every page + psync +
//! detach, and a pcreate + pdestroy of a 16 KiB member of a key family, under `none` and
//! `secure`.
//!
//! The floors are the same work's system calls, crypto and medium writes, timed alone:
//! - an OFD lock + unlock of a word of the pool file (what any attach session's exclusion
//!   costs: the attach lock);
//! - a 16 KiB copy (the pages read out, or written in), and for `none` a second one (the pages
//!   read from the medium);
//! - `secure`: 4 opens (read) or seals (write) of a 4 KiB page with the store's page context,
//!   with `secure`'s default AEAD (AEGIS-256X4);
//! - a write: 4 pages written to the medium, flushed and fenced;
//! - pcreate + pdestroy: 4 fenced writes of a 4 KiB page (each change writes its entry into
//!   the two namespace copies) and 4 OFD lock + unlock pairs: the metadata lock of each change
//!   (another process may change the namespace), and the destroy's attach lock and pin-table
//!   lock (it is refused while a writer or a reader in any process has the PMO).
//!
//! Medians over `rounds` sessions after warm-up; the PMO is attached and detached by the same
//! thread, as the file store does per file operation.

use std::path::Path;
use std::time::Instant;

use pmo_store::{Perm, Scheme};

use crate::{median, BenchError, Records, TempPool};

const KEY: &[u8] = b"bench-key";
const PAGE: usize = 4096;
const PAGES: usize = 4;

fn us(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e6
}

/// Median µs of an OFD lock + unlock of one word of a file in `dir`, through one open file
/// description (as the store's attach lock is taken).
fn lock_pair_us(dir: &Path, rounds: usize) -> Result<f64, BenchError> {
    let path = dir.join(format!("pmo-bench-lock-{}.bin", std::process::id()));
    std::fs::write(&path, [0u8; 16]).map_err(|source| BenchError::Io {
        op: "create scratch file".into(),
        source,
    })?;
    let file = pmo_os::lock::open_lock_file(&path);
    let _ = std::fs::remove_file(&path);
    let file = file.map_err(|e| BenchError::Other(e.to_string()))?;
    let word = (1u64 << 62) + (1 << 40) + 7;
    let mut samples = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t = Instant::now();
        let got = pmo_os::lock::lock_file(&file, word, 1, pmo_os::lock::LockKind::Exclusive)
            .map_err(|e| BenchError::Other(e.to_string()))?;
        pmo_os::lock::unlock_file(&file, word, 1);
        samples.push(us(t));
        if !got {
            return Err(BenchError::Other("the scratch lock was taken".into()));
        }
    }
    Ok(median(&samples))
}

/// Median µs of a 16 KiB copy between two buffers.
fn copy_us(rounds: usize) -> f64 {
    let src = vec![0x5au8; PAGES * PAGE];
    let mut dst = vec![0u8; PAGES * PAGE];
    let mut samples = Vec::with_capacity(rounds);
    for r in 0..rounds {
        let t = Instant::now();
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst)[r % PAGE] ^= 1;
        samples.push(us(t));
    }
    median(&samples)
}

/// The session figures of one scheme, medians in µs: a read session attached read-write (as
/// the file store attaches), one attached read-only (a snapshot reader: `docs/readers.md`), a
/// write session, and a pcreate + pdestroy. Each kind runs in a loop of its own.
fn sessions(dir: &Path, scheme: Scheme, rounds: usize) -> Result<[f64; 4], BenchError> {
    let tp = TempPool::new(dir, &format!("small-{scheme}"), 64 << 20, scheme)?;
    let pool = &tp.pool;
    pool.pcreate("s", (PAGES * PAGE) as u64, KEY)?;
    {
        let a = pool.attach("s", Perm::Write, KEY)?;
        a.write_at(0, &[0x11u8; PAGES * PAGE])?;
        a.psync()?;
    }
    let warm = rounds / 10;
    let mut buf = [0u8; PAGE];
    let mut read = |perm: Perm| -> Result<f64, BenchError> {
        let mut v = Vec::with_capacity(rounds);
        for r in 0..rounds + warm {
            let t = Instant::now();
            let a = pool.attach("s", perm, KEY)?;
            for p in 0..PAGES {
                a.read_at(p * PAGE, &mut buf)?;
                std::hint::black_box(&buf);
            }
            a.detach()?;
            if r >= warm {
                v.push(us(t));
            }
        }
        Ok(median(&v))
    };
    let read_rw = read(Perm::Write)?;
    let read_r = read(Perm::Read)?;
    let mut write = Vec::with_capacity(rounds);
    for r in 0..rounds + warm {
        let page = [r as u8; PAGE];
        let t = Instant::now();
        let a = pool.attach("s", Perm::Write, KEY)?;
        for p in 0..PAGES {
            a.write_at(p * PAGE, &page)?;
        }
        a.psync()?;
        a.detach()?;
        if r >= warm {
            write.push(us(t));
        }
    }
    // What the last write session made durable is what a new attach reads.
    let a = pool.attach("s", Perm::Read, KEY)?;
    a.read_at(3 * PAGE, &mut buf)?;
    if buf[0] != ((rounds + warm - 1) as u8) {
        return Err(BenchError::Other(format!(
            "{scheme}: the last psynced write is not what a new attach reads"
        )));
    }
    drop(a);
    let family = pool.family_salt(b"pmo-bench small");
    let mut life = Vec::with_capacity(rounds);
    for r in 0..rounds + warm {
        let t = Instant::now();
        pool.pcreate_in_family("m", (PAGES * PAGE) as u64, KEY, None, &family)?;
        pool.pdestroy("m", KEY)?;
        if r >= warm {
            life.push(us(t));
        }
    }
    Ok([read_rw, read_r, median(&write), median(&life)])
}

/// Run the small-session figures into `records` (bench `schemes`).
pub(crate) fn run(dir: &Path, repeats: usize, records: &mut Records) -> Result<(), BenchError> {
    let rounds = (repeats * 100).clamp(200, 3000);
    let lock = lock_pair_us(dir, rounds)?;
    let copy = copy_us(rounds);
    let open = 4.0 * crate::floors::aead_page_us(false);
    let seal = 4.0 * crate::floors::aead_page_us(true);
    let persist4 = PAGES as f64 * crate::floors::persist_page_us(dir, PAGES)?;
    let persist1 = crate::floors::persist_page_us(dir, 1)?;
    for (op, v) in [
        ("ofd lock+unlock", lock),
        ("copy 16KiB", copy),
        (
            &*format!("{} open 4 pages", crate::floors::aead_name()),
            open,
        ),
        (
            &*format!("{} seal 4 pages", crate::floors::aead_name()),
            seal,
        ),
        ("persist 4 pages + fence", persist4),
        ("persist 1 page + fence", persist1),
    ] {
        records.push(
            "schemes",
            &[("op", op.into())],
            "small_floor_us",
            v,
            "us",
            1,
        );
    }
    for scheme in [Scheme::NONE, Scheme::SECURE] {
        let [read_rw, read_r, write, life] = sessions(dir, scheme, rounds)?;
        let secure = scheme.is_protected();
        let read_floor = lock + if secure { open + copy } else { 2.0 * copy };
        let floors = [
            read_floor,
            read_floor,
            lock + copy + if secure { seal } else { 0.0 } + persist4,
            4.0 * lock + 4.0 * persist1,
        ];
        let figures = [
            ("read", read_rw),
            ("read (reader)", read_r),
            ("write", write),
            ("pcreate+pdestroy", life),
        ];
        for ((what, v), floor) in figures.into_iter().zip(floors) {
            let p = [("scheme", scheme.name()), ("session", what.to_string())];
            records.push("schemes", &p, "small_session_us", v, "us", rounds);
            records.push("schemes", &p, "small_session_floor_us", floor, "us", 1);
        }
    }
    Ok(())
}

/// The small-session table (issue 29's targets beside each figure).
pub(crate) fn table(records: &Records) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let f = |m: &str, p: &[(&str, &str)]| records.find(m, p);
    if f(
        "small_session_us",
        &[("scheme", "none"), ("session", "read")],
    )
    .is_none()
    {
        return out;
    }
    _ = writeln!(
        out,
        "One small session, a 16 KiB PMO (medians, µs; floor = the same work's lock, copies, crypto and persists alone):"
    );
    let whats = ["read", "read (reader)", "write", "pcreate+pdestroy"];
    for (scheme, targets) in [
        ("none", [5.0, 5.0, 10.0, 15.0]),
        ("secure", [8.0, 8.0, 14.0, 15.0]),
    ] {
        for (what, target) in whats.into_iter().zip(targets) {
            let p = [("scheme", scheme), ("session", what)];
            let v = f("small_session_us", &p).unwrap_or(f64::NAN);
            let floor = f("small_session_floor_us", &p).unwrap_or(f64::NAN);
            _ = writeln!(
                out,
                "  {scheme:<6} {what:<17} {v:>7.1}  floor {floor:>5.1} ({:.1}x)  target <= {target}",
                v / floor
            );
        }
    }
    let floor = |op: &str| f("small_floor_us", &[("op", op)]).unwrap_or(f64::NAN);
    let aead = crate::floors::aead_name();
    _ = writeln!(
        out,
        "  floors: lock+unlock {:.2}, copy 16 KiB {:.2}, {aead} open 4 pages {:.2}, seal 4 pages {:.2}, persist 4 pages + fence {:.2}, 1 page + fence {:.2}",
        floor("ofd lock+unlock"),
        floor("copy 16KiB"),
        floor(&format!("{aead} open 4 pages")),
        floor(&format!("{aead} seal 4 pages")),
        floor("persist 4 pages + fence"),
        floor("persist 1 page + fence"),
    );
    out
}

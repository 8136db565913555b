//! Protection schemes end to end: every implemented scheme round-trips through attach, psync,
//! detach and a new attach; no plaintext reaches the medium; tampering with the medium while the
//! PMO is at rest is caught (the secure default catches every attack here, the faithful mode is
//! reported for what it misses); a page version (the GCM nonce) is never used twice, across
//! psyncs, crashes and recovery.
#![allow(unsafe_code)]

use std::path::PathBuf;
use std::sync::Arc;

use pmo_format::layout::{PageMapEntry, PmoLayout};
use pmo_medium::crash::{explore, CrashMedium};
use pmo_medium::Medium;
use pmo_store::{KdfParams, Perm, Pool, PoolOptions, Scheme, StoreError};

const KEY: &[u8] = b"scheme-key";
const PAGES: u64 = 8;
const MARKER: &[u8] = b"PLAINTEXT-MARKER-0123456789abcdef";

struct TmpPool {
    path: PathBuf,
}
impl Drop for TmpPool {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn file_pool(tag: &str, scheme: Scheme) -> (Pool, TmpPool) {
    let path = std::env::temp_dir().join(format!(
        "pmo-schemes-{tag}-{}-{}.pool",
        scheme.name().replace(':', "_"),
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    let opts = PoolOptions {
        kdf: KdfParams::INSECURE_FAST,
        scheme,
        ..Default::default()
    };
    (
        Pool::create(&path, 8 << 20, &opts).unwrap(),
        TmpPool { path },
    )
}

fn implemented() -> Vec<Scheme> {
    Scheme::all_placements().collect()
}

/// Write MARKER (and the page index) into every page through the mapping, psync.
fn fill_with_marker(pool: &Pool, name: &str, round: u8) {
    let a = pool.attach(name, Perm::Write, KEY).unwrap();
    for p in 0..PAGES as usize {
        // SAFETY: inside the attached, writable mapping.
        unsafe {
            let at = a.addr().add(p * 4096 + 64);
            std::ptr::copy_nonoverlapping(MARKER.as_ptr(), at, MARKER.len());
            *at.add(MARKER.len()) = p as u8;
            *at.add(MARKER.len() + 1) = round;
        }
    }
    assert_eq!(a.psync().unwrap().pages, PAGES);
    a.detach().unwrap();
}

fn read_page_tail(pool: &Pool, name: &str, p: u64) -> Result<(u8, u8), StoreError> {
    let h = pool.open_pmo(name, Perm::Read, KEY, None)?;
    let mut b = [0u8; 4096];
    h.read_page(p, &mut b)?;
    assert_eq!(&b[64..64 + MARKER.len()], MARKER, "page {p} content");
    Ok((b[64 + MARKER.len()], b[64 + MARKER.len() + 1]))
}

#[test]
fn every_scheme_round_trips_and_keeps_plaintext_off_the_medium() {
    for scheme in implemented() {
        let (pool, tmp) = file_pool("rt", scheme);
        pool.pcreate("p", PAGES * 4096, KEY).unwrap();
        fill_with_marker(&pool, "p", 1);
        fill_with_marker(&pool, "p", 2);
        // Through a new mapping.
        let a = pool.attach("p", Perm::Read, KEY).unwrap();
        for p in 0..PAGES as usize {
            let mut b = [0u8; 2];
            a.read_at(p * 4096 + 64 + MARKER.len(), &mut b).unwrap();
            assert_eq!(b, [p as u8, 2], "{scheme}: page {p}");
        }
        drop(a);
        drop(pool);
        // A plaintext copy on the medium is scrubbed by the background detach.
        pmo_store::wait_for_background_detaches();
        let image = std::fs::read(&tmp.path).unwrap();
        let found = image.windows(MARKER.len()).any(|w| w == MARKER);
        assert_eq!(
            found,
            !scheme.is_protected(),
            "{scheme}: plaintext on the medium"
        );
        // The scheme survives reopening and shows in the listing.
        let pool = Pool::open(&tmp.path).unwrap();
        assert_eq!(pool.list().unwrap()[0].scheme, scheme.code());
    }
}

/// Where page `p`'s bytes live in the pool file.
struct Spot {
    data: u64,
    meta: u64,
    map: u64,
}

fn spot(pool: &Pool, name: &str, p: u64) -> Spot {
    let info = pool.info(name).unwrap();
    let layout = PmoLayout::new(info.size / 4096, 32).unwrap();
    let mut e = [0u8; 8];
    read_at(pool, info.extent_off + layout.map_entry(p), &mut e);
    let entry = PageMapEntry(u64::from_le_bytes(e));
    let slot = match entry.loc() {
        Some(pmo_format::PageLoc::Slot(s)) => s,
        other => panic!("page {p} not written: {other:?}"),
    };
    Spot {
        data: info.extent_off + layout.page(slot, p),
        meta: info.extent_off + layout.tag(slot, p),
        map: info.extent_off + layout.map_entry(p),
    }
}

fn read_at(pool: &Pool, off: u64, buf: &mut [u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(pool.pool_info().unwrap().path.unwrap()).unwrap();
    f.read_exact_at(buf, off).unwrap();
}

fn patch(path: &std::path::Path, off: u64, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(bytes, off).unwrap();
}

fn flip(path: &std::path::Path, off: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, off).unwrap();
    b[0] ^= 0x10;
    f.write_all_at(&b, off).unwrap();
}

/// Outcome of reading page 3 after an attack: caught (an integrity error at attach or read)
/// or not.
fn caught(path: &std::path::Path, name: &str, page: u64) -> bool {
    let pool = Pool::open(path).unwrap();
    match read_page_tail(&pool, name, page) {
        Err(e) => {
            assert!(e.is_integrity(), "{e}");
            true
        }
        Ok(_) => false,
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Attack {
    FlipData,
    FlipMeta,
    FlipMapEntry,
    SwapPages,
    RollbackPage,
    TransplantPage,
    /// Lower the version reservation in the newest commit's trailer (checksums fixed up), to
    /// make the next psync reuse nonces.
    LowerReservation,
}

/// Rewrite the trailer of PMO `name`'s newest commit with `edit`, fixing up the journal CRC in
/// the record and the record's own CRC, as an attacker who knows the format would.
fn edit_newest_trailer(pool: &Pool, name: &str, edit: impl Fn(&mut pmo_format::Trailer)) {
    let info = pool.info(name).unwrap();
    let path = pool.pool_info().unwrap().path.unwrap();
    let layout = PmoLayout::new(info.size / 4096, 32).unwrap();
    let tag = u64::from_le_bytes(info.uuid[..8].try_into().unwrap());
    let mut newest: Option<(u64, pmo_format::CommitRecord)> = None;
    for i in 0..2u64 {
        let mut b = [0u8; 64];
        read_at(pool, info.extent_off + i * 64, &mut b);
        if let Some(r) = pmo_format::CommitRecord::decode(&b, tag, layout.npages) {
            if newest.is_none_or(|(_, n)| r.seq > n.seq) {
                newest = Some((i, r));
            }
        }
    }
    let (slot, mut rec) = newest.expect("a commit");
    let joff = info.extent_off + layout.journal_off[(rec.seq % 2) as usize];
    let jlen = 16 * rec.count as usize + 64;
    let mut journal = vec![0u8; jlen];
    read_at(pool, joff, &mut journal);
    let mut t = pmo_format::Trailer::decode(&journal[jlen - 64..]).unwrap();
    edit(&mut t);
    journal[jlen - 64..].copy_from_slice(&t.encode());
    rec.journal_crc = pmo_format::crc(&journal);
    patch(&path, joff, &journal);
    patch(&path, info.extent_off + slot * 64, &rec.encode());
}

/// One more psync that touches page 0 only, so that the newest journal (which recovery
/// re-applies at every open) does not name the attacked page 3.
fn touch_page0(pool: &Pool, name: &str) {
    let h = pool.open_pmo(name, Perm::Write, KEY, None).unwrap();
    let mut b = [0u8; 4096];
    h.read_page(0, &mut b).unwrap();
    b[4000] ^= 1;
    h.commit_pages(&[(0, &b)]).unwrap();
}

/// Run `attack` against a fresh pool under `scheme`; whether it was caught.
fn run_attack(scheme: Scheme, attack: Attack) -> bool {
    let (pool, tmp) = file_pool(&format!("{attack:?}"), scheme);
    pool.pcreate("p", PAGES * 4096, KEY).unwrap();
    pool.pcreate("q", PAGES * 4096, KEY).unwrap();
    fill_with_marker(&pool, "p", 1);
    fill_with_marker(&pool, "q", 1);
    touch_page0(&pool, "p");
    touch_page0(&pool, "q");
    let path = tmp.path.clone();
    let s3 = spot(&pool, "p", 3);
    match attack {
        Attack::FlipData => {
            drop(pool);
            flip(&path, s3.data + 100);
        }
        Attack::FlipMeta => {
            drop(pool);
            flip(&path, s3.meta + 5);
        }
        Attack::FlipMapEntry => {
            drop(pool);
            // The version field of the entry: still a well-formed entry, another version.
            flip(&path, s3.map + 2);
        }
        Attack::SwapPages => {
            let s4 = spot(&pool, "p", 4);
            let (mut d3, mut d4) = (vec![0u8; 4096], vec![0u8; 4096]);
            let (mut m3, mut m4) = ([0u8; 32], [0u8; 32]);
            read_at(&pool, s3.data, &mut d3);
            read_at(&pool, s4.data, &mut d4);
            read_at(&pool, s3.meta, &mut m3);
            read_at(&pool, s4.meta, &mut m4);
            drop(pool);
            patch(&path, s3.data, &d4);
            patch(&path, s3.meta, &m4);
            patch(&path, s4.data, &d3);
            patch(&path, s4.meta, &m3);
        }
        Attack::RollbackPage => {
            // Save page 3 (data, metadata, map entry) as of round 1, commit round 2, put the
            // old page back.
            let mut d = vec![0u8; 4096];
            let mut m = [0u8; 32];
            let mut e = [0u8; 8];
            read_at(&pool, s3.data, &mut d);
            read_at(&pool, s3.meta, &mut m);
            read_at(&pool, s3.map, &mut e);
            fill_with_marker(&pool, "p", 2);
            touch_page0(&pool, "p");
            drop(pool);
            patch(&path, s3.data, &d);
            patch(&path, s3.meta, &m);
            patch(&path, s3.map, &e);
        }
        Attack::LowerReservation => {
            drop(pool);
            let pool = Pool::open(&path).unwrap();
            edit_newest_trailer(&pool, "p", |t| t.reservation = 1);
        }
        Attack::TransplantPage => {
            let q3 = spot(&pool, "q", 3);
            let mut d = vec![0u8; 4096];
            let mut m = [0u8; 32];
            let mut e = [0u8; 8];
            read_at(&pool, q3.data, &mut d);
            read_at(&pool, q3.meta, &mut m);
            read_at(&pool, q3.map, &mut e);
            drop(pool);
            patch(&path, s3.data, &d);
            patch(&path, s3.meta, &m);
            patch(&path, s3.map, &e);
        }
    }
    let c = caught(&path, "p", 3);
    drop(tmp);
    c
}

#[test]
fn tampering_is_caught_by_the_secure_default_and_reported_for_the_paper_modes() {
    let attacks = [
        Attack::FlipData,
        Attack::FlipMeta,
        Attack::FlipMapEntry,
        Attack::SwapPages,
        Attack::RollbackPage,
        Attack::TransplantPage,
        Attack::LowerReservation,
    ];
    // Under each AEAD (AES-256-GCM, AEGIS-256X4): the same matrix, every attack caught.
    for secure in [Scheme::SECURE_GCM, Scheme::SECURE] {
        for a in attacks {
            assert!(run_attack(secure, a), "{secure} missed {a:?}");
        }
    }
    // The paper's per-page integrity (XTS + unkeyed SHA-256): catches bit flips, swaps and
    // transplants (the XTS tweak and the per-PMO key garble them), but a page rolled back to an
    // older valid version together with its checksum and map entry passes.
    let sp_ip = Scheme::from_name("sp-ip").unwrap();
    let mut report = Vec::new();
    for a in attacks {
        let c = run_attack(sp_ip, a);
        report.push(format!("{a:?}: {}", if c { "caught" } else { "MISSED" }));
        match a {
            Attack::RollbackPage => assert!(!c, "sp-ip cannot catch a rollback"),
            Attack::FlipMapEntry => {} // lands on the same slot with a new version: unchecked
            Attack::LowerReservation => assert!(!c, "sp-ip has no nonces and no trailer MAC"),
            _ => assert!(c, "sp-ip missed {a:?}"),
        }
    }
    eprintln!("sp-ip (faithful) against tampering: {}", report.join(", "));
}

#[test]
fn wedi_catches_a_flip_anywhere_at_attach() {
    let wedi = Scheme::from_name("wedi").unwrap();
    let (pool, tmp) = file_pool("wedi", wedi);
    pool.pcreate("p", PAGES * 4096, KEY).unwrap();
    fill_with_marker(&pool, "p", 1);
    let s = spot(&pool, "p", 6);
    drop(pool);
    flip(&tmp.path, s.data + 7);
    let pool = Pool::open(&tmp.path).unwrap();
    let e = pool
        .attach("p", Perm::Read, KEY)
        .err()
        .expect("attach must fail");
    assert!(e.is_integrity(), "{e}");
}

#[test]
fn editing_the_scheme_in_the_namespace_is_not_a_downgrade() {
    // An attacker who rewrites a protected entry as scheme `none` (CRC fixed up) must not get
    // the next psync to write plaintext: the key check fails instead. The same for an entry
    // whose AEAD is swapped for the other (the scheme code, AEAD bits included, is bound into
    // the key verifier).
    for (from, to) in [
        (Scheme::SECURE, Scheme::NONE),
        (Scheme::SECURE_AEGIS, Scheme::NONE),
        (Scheme::SECURE_AEGIS, Scheme::SECURE_GCM),
        (Scheme::SECURE_GCM, Scheme::SECURE_AEGIS),
    ] {
        rewrite_scheme_fails_the_key_check(from, to);
    }
}

fn rewrite_scheme_fails_the_key_check(from: Scheme, to: Scheme) {
    let (pool, tmp) = file_pool("downgrade", from);
    pool.pcreate("p", PAGES * 4096, KEY).unwrap();
    let info = pool.info("p").unwrap();
    drop(pool);
    let mut image = std::fs::read(&tmp.path).unwrap();
    // Find the entry by its uuid and rewrite its scheme code and CRC.
    let at = image
        .windows(16)
        .position(|w| w == info.uuid)
        .expect("entry uuid on the medium");
    let entry_off = at - 16; // the uuid is at byte 16 of an entry (docs/format.md §3)
    let mut e = pmo_format::Entry::decode(&image[entry_off..entry_off + 512])
        .unwrap()
        .expect("a live entry");
    e.scheme = to.code();
    e.tag_bytes = to.tag_bytes();
    image[entry_off..entry_off + 512].copy_from_slice(&e.encode());
    std::fs::write(&tmp.path, &image).unwrap();
    let pool = Pool::open(&tmp.path).unwrap();
    let r = pool.attach("p", Perm::Write, KEY);
    assert!(
        matches!(r, Err(StoreError::WrongKey(_))),
        "{from} rewritten as {to}: entry accepted"
    );
}

#[test]
fn versions_never_repeat_across_psyncs_crashes_and_recovery() {
    for scheme in [Scheme::SECURE_GCM, Scheme::SECURE] {
        versions_never_repeat_under(scheme);
    }
}

fn versions_never_repeat_under(scheme: Scheme) {
    // Every (page, version) sealed is unique: within a run (strictly increasing), and across a
    // crash at any persist point: versions used after recovery lie at or above the reservation
    // the crash image holds, and every version the crashed run used lies below it.
    let m = Arc::new(CrashMedium::new(2 << 20));
    let opts = PoolOptions {
        kdf: KdfParams::INSECURE_FAST,
        ns_capacity: Some(8),
        base_addr: Some(0x2100_0000_0000),
        scheme,
        ..Default::default()
    };
    let pool = Pool::create_on(m.clone(), &opts).unwrap();
    pool.pcreate("v", 4 * 4096, KEY).unwrap();
    let info = pool.info("v").unwrap();
    let layout = PmoLayout::new(4, 32).unwrap();
    let versions_in = |img: &[u8]| -> Vec<u64> {
        let mut v = Vec::new();
        for p in 0..4 {
            let off = (info.extent_off + layout.map_entry(p)) as usize;
            v.push(
                PageMapEntry(u64::from_le_bytes(img[off..off + 8].try_into().unwrap())).version(),
            );
        }
        // Journals written by the crashing run, committed or not: its psyncs seal pages 1
        // and 2 (entries (1, e), (2, e) then the trailer). Journals of reservation commits
        // (a trailer only) and of the base image's psyncs have another shape and are skipped.
        for j in 0..2 {
            let off = (info.extent_off + layout.journal_off[j]) as usize;
            let entry = |k: usize| {
                let e = &img[off + k * 16..off + k * 16 + 16];
                (
                    u64::from_le_bytes(e[..8].try_into().unwrap()),
                    PageMapEntry(u64::from_le_bytes(e[8..16].try_into().unwrap())),
                )
            };
            let (e0, e1) = (entry(0), entry(1));
            if e0.0 == 1 && e1.0 == 2 && e0.1.loc().is_some() && e1.1.loc().is_some() {
                v.push(e0.1.version());
                v.push(e1.1.version());
            }
        }
        v
    };
    // The reservation carried by the newest valid commit of the image.
    let reservation_in = |img: &[u8]| -> u64 {
        let tag = u64::from_le_bytes(info.uuid[..8].try_into().unwrap());
        let mut newest: Option<pmo_format::CommitRecord> = None;
        for i in 0..2usize {
            let off = info.extent_off as usize + i * 64;
            if let Some(r) = pmo_format::CommitRecord::decode(&img[off..off + 64], tag, 4) {
                if r.seq % 2 == i as u64 && newest.is_none_or(|n| r.seq > n.seq) {
                    newest = Some(r);
                }
            }
        }
        let r = newest.expect("a commit");
        let joff = (info.extent_off + layout.journal_off[(r.seq % 2) as usize]) as usize
            + 16 * r.count as usize;
        pmo_format::Trailer::decode(&img[joff..joff + 64])
            .unwrap()
            .reservation
    };
    let h = pool.open_pmo("v", Perm::Write, KEY, None).unwrap();
    let mut seen = std::collections::HashSet::new();
    for round in 0..20u8 {
        let page = [round; 4096];
        h.commit_pages(
            &[(round as u64 % 4, &page), (3, &page)][..if round % 4 == 3 { 1 } else { 2 }],
        )
        .unwrap();
        for p in 0..4 {
            let mut e = [0u8; 8];
            m.read(info.extent_off + layout.map_entry(p), &mut e)
                .unwrap();
            let ver = PageMapEntry(u64::from_le_bytes(e)).version();
            if ver != 0 {
                seen.insert((p, ver));
            }
        }
    }
    // Strictly more distinct (page, version) pairs than rounds: versions are not reused
    // between pages either (one counter per PMO).
    let all: Vec<u64> = seen.iter().map(|x| x.1).collect();
    let distinct: std::collections::HashSet<u64> = all.iter().copied().collect();
    assert_eq!(all.len(), distinct.len(), "a version served two pages");
    drop(h);
    drop(pool);
    let base = m.durable_image();
    let mut points_checked = 0;
    explore(
        &base,
        3,
        0xface,
        |m| -> Result<(), StoreError> {
            let pool = Pool::open_on(m.clone())?;
            let h = pool.open_pmo("v", Perm::Write, KEY, None)?;
            for r in 0..3u8 {
                h.commit_pages(&[(1, &[r; 4096]), (2, &[r; 4096])])?;
            }
            Ok(())
        },
        |cp| {
            let reserved = reservation_in(&cp.image);
            let before = versions_in(&cp.image);
            assert!(
                before.iter().all(|&v| v < reserved),
                "{scheme} point {}: a version at or above the committed reservation {reserved} was used",
                cp.point
            );
            let m2 = Arc::new(CrashMedium::from_image(cp.image.clone()));
            let pool = Pool::open_on(m2.clone()).unwrap();
            let h = pool.open_pmo("v", Perm::Write, KEY, None).unwrap();
            h.commit_pages(&[(0, &[9; 4096])]).unwrap();
            let mut e = [0u8; 8];
            m2.read(info.extent_off + layout.map_entry(0), &mut e)
                .unwrap();
            let fresh = PageMapEntry(u64::from_le_bytes(e)).version();
            assert!(
                fresh >= reserved,
                "{scheme} point {}: version {fresh} after recovery is below the reservation {reserved}",
                cp.point
            );
            points_checked += 1;
        },
    );
    assert!(points_checked > 5, "explored {points_checked} crash points");
}

const CHILD_ENV: &str = "PMO_SCHEMES_FAULT_CHILD";

/// Child half of the next test: attach the tampered pool and load from page 3 through the
/// mapping. It must not return. Run with `PMO_RESIDENT_PAGES=0`: the view faults its pages in.
#[test]
fn fault_child_main() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return; // only runs as the child
    };
    let pool = Pool::open(std::path::Path::new(&path)).unwrap();
    let a = pool.attach("p", Perm::Read, KEY).unwrap();
    println!("attached");
    // SAFETY: inside the mapping; the fill fails, which must end the process.
    let v = unsafe { std::ptr::read_volatile(a.addr().add(3 * 4096 + 64)) };
    println!("read {v}: tampering went unnoticed");
}

#[test]
fn a_load_from_a_tampered_page_ends_the_process_with_a_clear_report() {
    for scheme in [Scheme::SECURE_GCM, Scheme::SECURE] {
        tampered_page_load_ends_the_process(scheme);
    }
}

fn tampered_page_load_ends_the_process(scheme: Scheme) {
    use std::os::unix::process::ExitStatusExt;
    let (pool, tmp) = file_pool("fault", scheme);
    pool.pcreate("p", PAGES * 4096, KEY).unwrap();
    fill_with_marker(&pool, "p", 1);
    let s3 = spot(&pool, "p", 3);
    drop(pool);
    flip(&tmp.path, s3.data + 9);
    // A PMO this small gets a resident view (issue 29), filled at attach: the attach itself
    // fails with the integrity error, naming the PMO and the page, and nothing is mapped.
    if std::env::var_os("PMO_RESIDENT_PAGES").is_none()
        && std::env::var_os("PMO_FAULT").is_none()
        && std::env::var_os("PMO_DIRTY").is_none()
    {
        let pool = Pool::open(&tmp.path).unwrap();
        match pool.attach("p", Perm::Read, KEY) {
            Err(StoreError::Integrity { name, page, .. }) => {
                assert_eq!((name.as_str(), page), ("p", 3), "{scheme}")
            }
            Err(e) => panic!("{scheme}: {e}"),
            Ok(_) => panic!("{scheme}: a tampered page attached"),
        }
    }
    // With faulting views, the load from the page ends the process with a clear report.
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "fault_child_main",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &tmp.path)
        .env("PMO_RESIDENT_PAGES", "0")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("attached"), "{stdout}\n{stderr}");
    assert!(!stdout.contains("unnoticed"), "{stdout}");
    assert_eq!(out.status.signal(), Some(libc::SIGBUS), "{stderr}");
    assert!(
        stderr.contains("PMO 'p' page 3") && stderr.contains("integrity"),
        "{stderr}"
    );
}

#[test]
fn integrity_at_detach_writes_checksums_at_detach_and_the_crash_handler_repairs() {
    let sp_id = Scheme::from_name("sp-id").unwrap();
    let (pool, tmp) = file_pool("id", sp_id);
    pool.pcreate("p", PAGES * 4096, KEY).unwrap();
    fill_with_marker(&pool, "p", 1); // a whole session: checksums written at its detach
    pmo_store::wait_for_background_detaches(); // (in the background)
    let pending = |pool: &Pool| {
        let info = pool.info("p").unwrap();
        let mut b = [0u8; 8];
        read_at(
            pool,
            info.extent_off + pmo_store::protect::ID_PENDING_OFF,
            &mut b,
        );
        u64::from_le_bytes(b)
    };
    assert_eq!(
        pending(&pool),
        0,
        "a detached session leaves nothing pending"
    );
    // A session that dies (SIGKILL, in a child) without detaching: its commits lack checksums.
    drop(pool);
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "id_child_main",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ID_CHILD_ENV, &tmp.path)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The test harness prints its own lines first; wait for ours.
    let out = std::io::BufReader::new(child.stdout.take().unwrap());
    let synced = std::io::BufRead::lines(out)
        .map_while(Result::ok)
        .take(20)
        .any(|l| l.trim().ends_with("synced"));
    assert!(synced, "the child did not commit");
    let pool = Pool::open(&tmp.path).unwrap();
    assert_eq!(pending(&pool), 1, "pending while the session is open");
    drop(pool);
    child.kill().unwrap();
    child.wait().unwrap();
    // The next attach runs the crash handler: page 2 verifies with its new contents.
    let pool = Pool::open(&tmp.path).unwrap();
    assert_eq!(read_page_tail(&pool, "p", 2).unwrap(), (2, 9));
    assert_eq!(
        pending(&pool),
        0,
        "the crash handler cleared the pending word"
    );
    // Checksums written at detach catch tampering like sp-ip's.
    let s2 = spot(&pool, "p", 2);
    drop(pool);
    flip(&tmp.path, s2.data + 3);
    assert!(caught(&tmp.path, "p", 2));
}

const ID_CHILD_ENV: &str = "PMO_SCHEMES_ID_CHILD";

/// Child half of the integrity-at-detach test: commit a change to page 2, report, then wait to
/// be killed.
#[test]
fn id_child_main() {
    let Ok(path) = std::env::var(ID_CHILD_ENV) else {
        return;
    };
    let pool = Pool::open(std::path::Path::new(&path)).unwrap();
    let a = pool.attach("p", Perm::Write, KEY).unwrap();
    // SAFETY: inside the writable mapping.
    unsafe { a.addr().add(2 * 4096 + 64 + MARKER.len() + 1).write(9) };
    a.psync().unwrap();
    println!("synced");
    std::thread::sleep(std::time::Duration::from_secs(60));
}

#[test]
fn partial_page_writes_through_the_handle_keep_the_rest_of_the_page() {
    for scheme in implemented() {
        let (pool, _tmp) = file_pool("partial", scheme);
        pool.pcreate("p", 2 * 4096, KEY).unwrap();
        let h = pool.open_pmo("p", Perm::Write, KEY, None).unwrap();
        h.write_at(0, &[1u8; 4096]).unwrap();
        h.write_at(100, b"middle").unwrap();
        h.write_at(4090, b"across").unwrap();
        let mut b = vec![0u8; 8192];
        h.read_at(0, &mut b).unwrap();
        let mut want = vec![1u8; 4096];
        want[100..106].copy_from_slice(b"middle");
        want.extend_from_slice(&[0u8; 4096]);
        want[4090..4096].copy_from_slice(b"across");
        assert_eq!(b, want, "{scheme}");
    }
}

#[test]
fn detach_is_nonblocking_and_a_later_attach_waits_for_it() {
    let sp_id = Scheme::from_name("sp-id").unwrap();
    let (pool, _tmp) = file_pool("nbdetach", sp_id);
    let pages = 512usize;
    pool.pcreate("p", (pages * 4096) as u64, KEY).unwrap();
    for round in 1..=3u8 {
        let a = pool.attach("p", Perm::Write, KEY).unwrap();
        a.write_at(0, &vec![round; pages * 4096]).unwrap();
        a.psync().unwrap();
        // Detach returns while the checksums of 512 pages are computed in the background;
        // the next attach (in the same process here) waits for that work: its session
        // records the stall, and every page then verifies.
        a.detach().unwrap();
        let r = pool.attach("p", Perm::Read, KEY).unwrap();
        let mut b = vec![0u8; pages * 4096];
        r.read_at(0, &mut b).unwrap();
        assert!(b.iter().all(|&x| x == round), "round {round}");
        drop(r);
    }
    pmo_store::wait_for_background_detaches();
    let info = pool.info("p").unwrap();
    let mut w = [0u8; 8];
    read_at(
        &pool,
        info.extent_off + pmo_store::protect::ID_PENDING_OFF,
        &mut w,
    );
    assert_eq!(u64::from_le_bytes(w), 0, "all detach work done");
    // A reader of every page through the medium (no view) verifies every checksum.
    let h = pool.open_pmo("p", Perm::Read, KEY, None).unwrap();
    let mut page = [0u8; 4096];
    for p in 0..pages as u64 {
        h.read_page(p, &mut page).unwrap();
    }
}

/// `:medium`: the plaintext copy is the PMO's plaintext area on the medium while attached
/// (the application's writes land there), and is zeroed at detach; `pmo check` is clean after,
/// and reports a plaintext copy that is left behind.
#[test]
fn medium_shadow_keeps_plaintext_on_the_medium_only_while_attached() {
    for name in [
        "sp-ip:medium",
        "secure:medium",
        "wedi:medium",
        "sp-id:medium",
        "bp-ip:medium",
        "bp-id:medium",
        "bp:medium",
    ] {
        let scheme = Scheme::from_name(name).unwrap();
        let (pool, tmp) = file_pool("plain", scheme);
        pool.pcreate("p", PAGES * 4096, KEY).unwrap();
        let on_medium = || {
            std::fs::read(&tmp.path)
                .unwrap()
                .windows(MARKER.len())
                .any(|w| w == MARKER)
        };
        let a = pool.attach("p", Perm::Write, KEY).unwrap();
        assert_eq!(a.mechanism(), pmo_store::Mechanism::Sigsegv, "{name}");
        a.write_at(4096 * 3 + 64, MARKER).unwrap();
        assert!(on_medium(), "{name}: the plaintext copy is on the medium");
        a.psync().unwrap();
        let beside = pmo_store::reader_beside_writer(scheme);
        if beside {
            // A reader beside the writer reads the psynced state into a DRAM copy of its
            // own: never the writer's plaintext area (a write not yet psynced stays unseen).
            a.write_at(4096 * 4, MARKER).unwrap();
            // Another range: the writer's mapping holds the PMO's stable address here.
            let moved = pmo_store::AttachOptions {
                relocate: true,
                ..Default::default()
            };
            let r = pool.attach_with("p", Perm::Read, KEY, moved).unwrap();
            let mut b = vec![0u8; MARKER.len()];
            r.read_at(4096 * 3 + 64, &mut b).unwrap();
            assert_eq!(b, MARKER, "{name}: the reader sees the psync");
            r.read_at(4096 * 4, &mut b).unwrap();
            assert!(
                b.iter().all(|&x| x == 0),
                "{name}: the reader saw an unsynced write"
            );
            drop(r);
            a.write_at(4096 * 4, &vec![0u8; MARKER.len()]).unwrap();
        } else {
            // One user at a time, readers included.
            assert!(
                matches!(
                    pool.attach("p", Perm::Read, KEY),
                    Err(StoreError::Busy { .. })
                ),
                "{name}: a reader joined a medium-placed plaintext copy"
            );
        }
        a.detach().unwrap();
        pmo_store::wait_for_background_detaches();
        assert!(!on_medium(), "{name}: plaintext left after detach");
        assert!(pool.check().unwrap().problems.is_empty(), "{name}");
        // Read back through a read-only attach: on the medium (scrubbed again) where readers
        // exclude the writer, in the reader's own DRAM copy where they go beside it.
        let r = pool.attach("p", Perm::Read, KEY).unwrap();
        let mut b = vec![0u8; MARKER.len()];
        r.read_at(4096 * 3 + 64, &mut b).unwrap();
        assert_eq!(b, MARKER, "{name}");
        assert_eq!(
            on_medium(),
            !beside,
            "{name}: where the reader's plaintext copy is"
        );
        drop(r);
        pmo_store::wait_for_background_detaches();
        assert!(!on_medium(), "{name}: plaintext left after a reader");
        // A copy left behind (as by a crash without recovery) is reported by check.
        let info = pool.info("p").unwrap();
        let layout = PmoLayout::with_plain(PAGES, 32, true).unwrap();
        let off = info.extent_off + layout.plain_page(5).unwrap();
        patch(&tmp.path, off, MARKER);
        let problems = pool.check().unwrap().problems;
        assert!(
            problems.iter().any(|p| p.contains("plaintext found")),
            "{name}: {problems:?}"
        );
    }
}

#[test]
fn medium_shadow_needs_a_mappable_medium() {
    let m = Arc::new(CrashMedium::new(4 << 20));
    let pool = Pool::create_on(
        m,
        &PoolOptions {
            kdf: KdfParams::INSECURE_FAST,
            scheme: Scheme::from_name("sp-ip:medium").unwrap(),
            ..Default::default()
        },
    )
    .unwrap();
    pool.pcreate("p", 4096, KEY).unwrap();
    let Err(e) = pool.attach("p", Perm::Write, KEY) else {
        panic!("attached a medium-placed plaintext copy on an unmappable medium");
    };
    assert!(
        matches!(e, StoreError::Unsupported(ref m) if m.contains("cannot be mapped")),
        "{e}"
    );
}

/// The paper's run-time switch: a PMO is attached under any design that stores pages as its
/// own scheme does; data written under one design reads back under the others; a design with
/// another at-rest format is a clear error.
#[test]
fn a_pmo_is_attached_under_any_design_of_its_at_rest_format() {
    use pmo_store::AttachOptions;
    let as_ = |n: &str| AttachOptions {
        scheme: Some(Scheme::from_name(n).unwrap()),
        ..Default::default()
    };
    for (created, runs) in [
        ("sp-id", &["bp-ip", "sp-ip", "bp-id", "sp-id", "sp-ip"][..]),
        ("wed", &["sp", "bp", "wed", "sp"][..]),
        ("sp:medium", &["wed:medium", "bp:medium", "sp:medium"][..]),
        (
            "bp-id:medium",
            &["bp-ip:medium", "sp-id:medium", "bp-id:medium"][..],
        ),
    ] {
        let (pool, _tmp) = file_pool("switch", Scheme::from_name(created).unwrap());
        pool.pcreate("p", PAGES * 4096, KEY).unwrap();
        for (round, run) in runs.iter().enumerate() {
            let a = pool
                .attach_with("p", Perm::Write, KEY, as_(run))
                .unwrap_or_else(|e| panic!("{created} as {run}: {e}"));
            for p in 0..PAGES as usize {
                let mut b = [0u8; 2];
                a.read_at(p * 4096 + 64 + MARKER.len(), &mut b).unwrap();
                if round > 0 {
                    assert_eq!(b, [p as u8, round as u8], "{created} as {run}: page {p}");
                }
                a.write_at(p * 4096 + 64, MARKER).unwrap();
                a.write_at(p * 4096 + 64 + MARKER.len(), &[p as u8, round as u8 + 1])
                    .unwrap();
            }
            a.psync().unwrap();
            a.detach().unwrap();
            pmo_store::wait_for_background_detaches();
        }
        // Another cipher, or the other plaintext placement (the extent differs): refused.
        let flipped = match created.strip_suffix(":medium") {
            Some(dram) => dram.to_string(),
            None => format!("{created}:medium"),
        };
        for other in ["secure", "wedi", "none", "secure:medium", flipped.as_str()] {
            let Err(e) = pool.attach_with("p", Perm::Read, KEY, as_(other)) else {
                panic!("{created} attached as {other}");
            };
            assert!(
                matches!(e, StoreError::Invalid(_) | StoreError::Unsupported(_)),
                "{created} as {other}: {e}"
            );
        }
    }
}

/// A session under integrity at detach dies with checksums pending; the next attach runs the
/// PMO at psync: the crash handler repairs the checksums first, so every page verifies.
#[test]
fn pending_checksums_are_repaired_when_the_next_attach_switches_design() {
    let m = Arc::new(CrashMedium::new(4 << 20));
    let opts = PoolOptions {
        kdf: KdfParams::INSECURE_FAST,
        scheme: Scheme::from_name("sp-id").unwrap(),
        ..Default::default()
    };
    let pool = Pool::create_on(m.clone(), &opts).unwrap();
    pool.pcreate("p", PAGES * 4096, KEY).unwrap();
    let h = pool.open_pmo("p", Perm::Write, KEY, None).unwrap();
    let page = |p: u64| {
        let mut b = [0xC3u8; 4096];
        b[0] = p as u8;
        b
    };
    let pages: Vec<[u8; 4096]> = (0..PAGES).map(page).collect();
    let list: Vec<(u64, &[u8; 4096])> = (0..PAGES).zip(pages.iter()).collect();
    h.commit_pages(&list).unwrap();
    // Power fails with the session open: checksums pending.
    let image = m.durable_image();
    drop(h);
    let pool = Pool::open_on(Arc::new(CrashMedium::from_image(image))).unwrap();
    let h = pool
        .open_pmo_as(
            "p",
            Perm::Write,
            KEY,
            None,
            Some(Scheme::from_name("sp-ip").unwrap()),
        )
        .unwrap();
    let mut b = [0u8; 4096];
    for p in 0..PAGES {
        h.read_page(p, &mut b)
            .unwrap_or_else(|e| panic!("page {p} under sp-ip after the crash: {e}"));
        assert_eq!(b, page(p));
    }
}

/// The DRAM plaintext copy is placed on a chosen NUMA node (node 0 exists everywhere); a node
/// that does not exist, or a plaintext copy on the medium, is a clear error.
#[test]
fn the_dram_plaintext_copy_goes_to_the_chosen_numa_node() {
    use pmo_store::AttachOptions;
    let on = |n: u32| AttachOptions {
        numa_node: Some(n),
        ..Default::default()
    };
    let (pool, _tmp) = file_pool("numa", Scheme::SECURE);
    pool.pcreate("p", PAGES * 4096, KEY).unwrap();
    let a = pool.attach_with("p", Perm::Write, KEY, on(0)).unwrap();
    a.write_at(4096 + 64, MARKER).unwrap();
    a.psync().unwrap();
    a.detach().unwrap();
    let r = pool.attach_with("p", Perm::Read, KEY, on(0)).unwrap();
    let mut b = vec![0u8; MARKER.len()];
    r.read_at(4096 + 64, &mut b).unwrap();
    assert_eq!(b, MARKER);
    drop(r);
    let Err(e) = pool.attach_with("p", Perm::Read, KEY, on(1000)) else {
        panic!("attached on NUMA node 1000");
    };
    assert!(e.to_string().contains("NUMA node 1000"), "{e}");
    let (pool, _tmp) = file_pool("numa-m", Scheme::from_name("sp-ip:medium").unwrap());
    pool.pcreate("p", PAGES * 4096, KEY).unwrap();
    let Err(e) = pool.attach_with("p", Perm::Read, KEY, on(0)) else {
        panic!("placed a plaintext copy on the medium on a NUMA node");
    };
    assert!(e.to_string().contains("on the medium"), "{e}");
    pmo_store::wait_for_background_detaches();
}

/// An attach that fails after it began filling the plaintext area on the medium (a whole-PMO
/// design whose checksum fails after every page was decrypted) leaves no plaintext behind.
#[test]
fn a_failed_attach_leaves_no_plaintext_on_the_medium() {
    let scheme = Scheme::from_name("wedi:medium").unwrap();
    let (pool, tmp) = file_pool("failplain", scheme);
    pool.pcreate("p", PAGES * 4096, KEY).unwrap();
    fill_with_marker(&pool, "p", 1);
    pmo_store::wait_for_background_detaches();
    let s = spot(&pool, "p", PAGES - 1);
    let mut b = [0u8; 1];
    read_at(&pool, s.data + 100, &mut b);
    patch(&tmp.path, s.data + 100, &[b[0] ^ 1]);
    let Err(e) = pool.attach("p", Perm::Write, KEY) else {
        panic!("attached a tampered wedi PMO");
    };
    assert!(
        matches!(
            e,
            StoreError::Integrity { .. } | StoreError::IntegrityPmo { .. }
        ),
        "{e}"
    );
    pmo_store::wait_for_background_detaches();
    let image = std::fs::read(&tmp.path).unwrap();
    assert!(
        !image.windows(MARKER.len()).any(|w| w == MARKER),
        "plaintext left on the medium by a failed attach"
    );
    assert!(!pool
        .check()
        .unwrap()
        .problems
        .iter()
        .any(|p| p.contains("plaintext")));
}

/// Predictive decryption installs pages into a plaintext copy on the medium as into DRAM, and
/// detach scrubs the predicted pages too.
#[test]
fn prediction_fills_a_plaintext_copy_on_the_medium() {
    use pmo_store::{AttachOptions, PredictConfig};
    const N: usize = 256;
    let (pool, tmp) = file_pool("predict", Scheme::from_name("secure:medium").unwrap());
    pool.pcreate("p", (N * 4096) as u64, KEY).unwrap();
    let a = pool.attach("p", Perm::Write, KEY).unwrap();
    for p in 0..N {
        a.write_at(p * 4096 + 64, MARKER).unwrap();
        a.write_at(p * 4096 + 64 + MARKER.len(), &[p as u8])
            .unwrap();
    }
    a.psync().unwrap();
    a.detach().unwrap();
    let opts = AttachOptions {
        predict: Some(PredictConfig::fixed(8)),
        ..Default::default()
    };
    let r = pool.attach_with("p", Perm::Read, KEY, opts).unwrap();
    for p in 0..N {
        let mut b = [0u8; 1];
        r.read_at(p * 4096 + 64 + MARKER.len(), &mut b).unwrap();
        assert_eq!(b[0], p as u8, "page {p}");
        if p == 3 {
            // Give the worker a chance on this busy machine.
            let t = std::time::Instant::now();
            while r.predict_stats().is_none_or(|s| s.installed == 0)
                && t.elapsed() < std::time::Duration::from_secs(5)
            {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
    }
    let installed = r.predict_stats().map_or(0, |s| s.installed);
    assert!(installed > 0, "prediction installed nothing");
    drop(r);
    pmo_store::wait_for_background_detaches();
    let image = std::fs::read(&tmp.path).unwrap();
    assert!(
        !image.windows(MARKER.len()).any(|w| w == MARKER),
        "plaintext left after a predicting reader ({installed} pages predicted)"
    );
}

/// BP on the medium commits psynced pages as plaintext (flagged in the page map), SP seals
/// them; detach encrypts BP's and leaves no plaintext; a check before that reports it.
#[test]
fn bp_on_the_medium_commits_plaintext_until_detach() {
    for (name, plain) in [("bp-ip:medium", true), ("sp-ip:medium", false)] {
        let (pool, tmp) = file_pool("bpplain", Scheme::from_name(name).unwrap());
        pool.pcreate("p", PAGES * 4096, KEY).unwrap();
        let a = pool.attach("p", Perm::Write, KEY).unwrap();
        a.write_at(2 * 4096 + 64, MARKER).unwrap();
        a.psync().unwrap();
        let s = spot(&pool, "p", 2);
        let mut e = [0u8; 8];
        read_at(&pool, s.map, &mut e);
        assert_eq!(
            PageMapEntry(u64::from_le_bytes(e)).is_plain(),
            plain,
            "{name}: plaintext flag after psync"
        );
        let mut d = vec![0u8; MARKER.len()];
        read_at(&pool, s.data + 64, &mut d);
        assert_eq!(d == MARKER, plain, "{name}: committed copy is plaintext");
        a.detach().unwrap();
        pmo_store::wait_for_background_detaches();
        let image = std::fs::read(&tmp.path).unwrap();
        assert!(
            !image.windows(MARKER.len()).any(|w| w == MARKER),
            "{name}: plaintext left after detach"
        );
        let s = spot(&pool, "p", 2);
        read_at(&pool, s.map, &mut e);
        assert!(!PageMapEntry(u64::from_le_bytes(e)).is_plain(), "{name}");
        let r = pool.attach("p", Perm::Read, KEY).unwrap();
        let mut b = vec![0u8; MARKER.len()];
        r.read_at(2 * 4096 + 64, &mut b).unwrap();
        assert_eq!(b, MARKER, "{name}: reads back after encryption");
    }
}

/// BP/I_p on the medium: a page committed as plaintext and then altered (here after a crash,
/// before the keyed open that encrypts it) fails its psync checksum: the crash handler reports
/// it instead of encrypting and so vouching for it.
#[test]
fn tampered_committed_plaintext_is_not_vouched_for() {
    let m = Arc::new(CrashMedium::new(4 << 20));
    let opts = PoolOptions {
        kdf: KdfParams::INSECURE_FAST,
        scheme: Scheme::from_name("bp-ip:medium").unwrap(),
        ..Default::default()
    };
    let pool = Pool::create_on(m.clone(), &opts).unwrap();
    pool.pcreate("p", PAGES * 4096, KEY).unwrap();
    let h = pool.open_pmo("p", Perm::Write, KEY, None).unwrap();
    let page = [0x5Au8; 4096];
    h.commit_pages(&[(3, &page)]).unwrap();
    // Power fails before the detach: page 3 is committed as plaintext.
    let image = m.durable_image();
    drop(h);
    let info = pool.info("p").unwrap();
    let layout = PmoLayout::with_plain(PAGES, 32, true).unwrap();
    // Open without the key (recovery), then alter the committed plaintext.
    let m = Arc::new(CrashMedium::from_image(image));
    let pool = Pool::open_on(m.clone()).unwrap();
    let mut b = [0u8; 8];
    m.read(info.extent_off + layout.map_entry(3), &mut b)
        .unwrap();
    let e = PageMapEntry(u64::from_le_bytes(b));
    assert!(e.is_plain(), "committed as plaintext");
    let Some(pmo_format::PageLoc::Slot(s)) = e.loc() else {
        panic!("page 3 in no slot")
    };
    let doff = info.extent_off + layout.page(s, 3) + 100;
    let mut d = [0u8; 1];
    m.read(doff, &mut d).unwrap();
    assert_eq!(d[0], 0x5A, "the plaintext is on the medium");
    m.write(doff, &[d[0] ^ 1]).unwrap();
    assert!(
        pool.check()
            .unwrap()
            .problems
            .iter()
            .any(|p| p.contains("committed as plaintext")),
        "check reports the committed plaintext"
    );
    let Err(e) = pool.open_pmo("p", Perm::Read, KEY, None) else {
        panic!("a tampered plaintext page was encrypted and vouched for");
    };
    assert!(matches!(e, StoreError::Integrity { page: 3, .. }), "{e}");
}

/// The pending word of PMO `name` (integrity metadata owed by an open or dead session).
fn id_pending(pool: &Pool, name: &str) -> u64 {
    let info = pool.info(name).unwrap();
    let mut b = [0u8; 8];
    read_at(
        pool,
        info.extent_off + pmo_store::protect::ID_PENDING_OFF,
        &mut b,
    );
    u64::from_le_bytes(b)
}

/// Write `round` into the tail of every page through the mapping of `a`.
fn mark_pages(a: &pmo_store::Attachment, round: u8) {
    for p in 0..PAGES as usize {
        // SAFETY: inside the attached, writable mapping.
        unsafe {
            let at = a.addr().add(p * 4096 + 64);
            std::ptr::copy_nonoverlapping(MARKER.as_ptr(), at, MARKER.len());
            *at.add(MARKER.len()) = p as u8;
            *at.add(MARKER.len() + 1) = round;
        }
    }
}

#[test]
fn psync_nochecksum_leaves_per_page_checksums_to_detach_where_the_scheme_allows() {
    for name in ["sp-ip", "bp-ip"] {
        let scheme = Scheme::from_name(name).unwrap();
        let (pool, tmp) = file_pool("nochecksum", scheme);
        pool.pcreate("p", PAGES * 4096, KEY).unwrap();
        let a = pool.attach("p", Perm::Write, KEY).unwrap();
        mark_pages(&a, 1);
        assert_eq!(a.psync().unwrap().pages, PAGES);
        // A checked psync writes each page's checksum and owes nothing.
        let sum1 = {
            let mut m = [0u8; 32];
            read_at(&pool, spot(&pool, "p", 3).meta, &mut m);
            m
        };
        assert_ne!(sum1, [0u8; 32], "{name}: psync wrote the checksum");
        assert_eq!(id_pending(&pool, "p"), 0, "{name}");
        mark_pages(&a, 2);
        assert_eq!(a.psync_nochecksum().unwrap().pages, PAGES);
        // The commit carries no checksum: the slot's metadata is empty, the debt recorded.
        let s3 = spot(&pool, "p", 3);
        let mut meta = [0xffu8; 32];
        read_at(&pool, s3.meta, &mut meta);
        assert_eq!(
            meta, [0u8; 32],
            "{name}: psync_nochecksum computed no checksum"
        );
        assert_eq!(id_pending(&pool, "p"), 1, "{name}");
        // Later faults of those pages in this session still read them.
        assert_eq!(
            // SAFETY: inside the attached mapping.
            unsafe { *a.addr().add(3 * 4096 + 64 + MARKER.len() + 1) },
            2
        );
        a.detach().unwrap();
        pmo_store::wait_for_background_detaches();
        // Detach wrote the checksums: nothing owed, the pages verify, tampering is caught.
        assert_eq!(id_pending(&pool, "p"), 0, "{name}");
        read_at(&pool, spot(&pool, "p", 3).meta, &mut meta);
        assert_ne!(meta, [0u8; 32], "{name}: detach wrote the checksum");
        for p in 0..PAGES {
            assert_eq!(
                read_page_tail(&pool, "p", p).unwrap(),
                (p as u8, 2),
                "{name}"
            );
        }
        let s3 = spot(&pool, "p", 3);
        drop(pool);
        flip(&tmp.path, s3.data + 7);
        assert!(caught(&tmp.path, "p", 3), "{name}");
    }
}

#[test]
fn psync_nochecksum_is_psync_where_integrity_cannot_wait() {
    // secure: the GCM tag is the encryption's own; wedi: the whole-PMO checksum attach
    // verifies; bp-ip on the medium: plaintext commits carry their checksum; none: no
    // checksum at all. None of them owes anything after psync_nochecksum.
    // (name, whether pages carry per-page metadata)
    for (name, per_page) in [
        ("secure", true),
        ("wedi", false),
        ("bp-ip:medium", true),
        ("none", false),
    ] {
        let scheme = Scheme::from_name(name).unwrap();
        let (pool, _tmp) = file_pool("nochecksum-full", scheme);
        pool.pcreate("p", PAGES * 4096, KEY).unwrap();
        let a = pool.attach("p", Perm::Write, KEY).unwrap();
        mark_pages(&a, 3);
        assert_eq!(a.psync_nochecksum().unwrap().pages, PAGES);
        if per_page {
            let mut meta = [0u8; 32];
            read_at(&pool, spot(&pool, "p", 1).meta, &mut meta);
            assert_ne!(meta, [0u8; 32], "{name}: the commit carries its metadata");
        }
        assert_eq!(id_pending(&pool, "p"), 0, "{name}");
        a.detach().unwrap();
        pmo_store::wait_for_background_detaches();
        for p in 0..PAGES {
            assert_eq!(
                read_page_tail(&pool, "p", p).unwrap(),
                (p as u8, 3),
                "{name}"
            );
        }
    }
}

#[test]
fn a_crash_after_psync_nochecksum_is_repaired_by_the_next_attach() {
    let m = Arc::new(CrashMedium::new(4 << 20));
    let opts = PoolOptions {
        kdf: KdfParams::INSECURE_FAST,
        scheme: Scheme::from_name("sp-ip").unwrap(),
        ..Default::default()
    };
    let pool = Pool::create_on(m.clone(), &opts).unwrap();
    pool.pcreate("p", PAGES * 4096, KEY).unwrap();
    let a = pool.attach("p", Perm::Write, KEY).unwrap();
    mark_pages(&a, 4);
    assert_eq!(a.psync_nochecksum().unwrap().pages, PAGES);
    // Power fails before detach: the commit is durable, its checksums are not written.
    let image = m.durable_image();
    drop(a);
    drop(pool);
    let pool = Pool::open_on(Arc::new(CrashMedium::from_image(image))).unwrap();
    let h = pool.open_pmo("p", Perm::Read, KEY, None).unwrap();
    let mut b = [0u8; 4096];
    for p in 0..PAGES {
        h.read_page(p, &mut b)
            .unwrap_or_else(|e| panic!("page {p} after the crash: {e}"));
        assert_eq!(&b[64..64 + MARKER.len()], MARKER);
        assert_eq!(b[64 + MARKER.len() + 1], 4, "page {p} as of the psync");
    }
}

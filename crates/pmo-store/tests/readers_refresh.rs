//! A reader's refresh that reads only the pages that changed (the pin table's change ring,
//! `docs/readers.md`, issue 27): it names exactly the pages psynced since the snapshot, a page
//! psynced twice included; a mapped reader's view shows the new psync on every page, changed
//! or not; a reader further behind than the ring reaches reads the whole map and is as right;
//! and under `secure` a map entry rolled back on the medium fails the refresh with an
//! integrity error, the reader keeping its snapshot.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use pmo_medium::crash::CrashMedium;
use pmo_medium::Medium;
use pmo_store::scheme::Cipher;
use pmo_store::{AttachOptions, Perm, Pool, Scheme, StoreError};

mod common;

use common::opts;

use common::stamps::{check_stamps, commit_stamps, stamp};
use common::{assert_healthy, RemoveOnDrop};

const KEY: &[u8] = b"refresh-key";
const PAGES: u64 = 32;

/// Whether a refresh under `scheme` moves in place (the others read the whole map).
fn in_place(scheme: Scheme) -> bool {
    !scheme.whole_checksum() && scheme.cipher() != Cipher::XtsSha256
}

fn shm(tag: &str, scheme: Scheme) -> PathBuf {
    PathBuf::from("/dev/shm").join(format!(
        "pmo-refresh-{tag}-{}-{}",
        scheme.name().replace(':', "-"),
        std::process::id()
    ))
}

/// The rounds' page sets, seeded: the same in every run.
struct Rng(rand::rngs::StdRng);
impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(rand::SeedableRng::seed_from_u64(seed))
    }
    fn pages(&mut self, n: u64) -> Vec<u64> {
        let set: BTreeSet<u64> = (0..n)
            .map(|_| rand::Rng::gen_range(&mut self.0, 0..PAGES))
            .collect();
        set.into_iter().collect()
    }
}

#[test]
fn a_refresh_names_exactly_the_pages_psynced_since_its_snapshot() {
    for scheme in Scheme::all_placements() {
        if !pmo_store::reader_beside_writer(scheme) {
            continue;
        }
        let ctx = scheme.name();
        let pool = Pool::create_on(Arc::new(CrashMedium::new(8 << 20)), &opts(scheme)).unwrap();
        pool.pcreate("a", PAGES * 4096, KEY).unwrap();
        let w = pool.open_pmo("a", Perm::Write, KEY, None).unwrap();
        let mut model = vec![0u64; PAGES as usize];
        let all: Vec<u64> = (0..PAGES).collect();
        commit_stamps(&w, 1, &all, &mut model);
        let r = pool.open_pmo("a", Perm::Read, KEY, None).unwrap();
        check_stamps(&r, &model, &ctx);
        let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
        let mut k = 1;
        for round in 0..20 {
            let seen = model.clone();
            // Up to three psyncs between refreshes, which may write a page more than once.
            let mut written = BTreeSet::new();
            for _ in 0..=(round % 3) {
                k += 1;
                let pages = rng.pages(1 + round % 5);
                commit_stamps(&w, k, &pages, &mut model);
                written.extend(pages);
            }
            // Still the old snapshot until the refresh.
            check_stamps(&r, &seen, &format!("{ctx} round {round} before"));
            let got = r.refresh().unwrap();
            r.refreshed();
            assert_eq!(got.seq, w.seq(), "{ctx} round {round}");
            if in_place(scheme) {
                assert!(got.from_ring, "{ctx} round {round}: the ring was not used");
                let want: Vec<u64> = written.iter().copied().collect();
                assert_eq!(got.changed, want, "{ctx} round {round}");
            } else {
                assert!(
                    written.iter().all(|p| got.changed.contains(p)),
                    "{ctx} round {round}"
                );
            }
            check_stamps(&r, &model, &format!("{ctx} round {round} after"));
        }
        // Nothing changed: nothing named.
        let got = r.refresh().unwrap();
        r.refreshed();
        assert!(got.changed.is_empty(), "{ctx}");
        drop(r);
        drop(w);
        assert_healthy(&pool, &ctx);
    }
}

#[test]
fn a_reader_further_behind_than_the_ring_reads_the_whole_map() {
    for scheme in [Scheme::NONE, Scheme::SECURE] {
        let ctx = scheme.name();
        let pool = Pool::create_on(Arc::new(CrashMedium::new(8 << 20)), &opts(scheme)).unwrap();
        pool.pcreate("a", PAGES * 4096, KEY).unwrap();
        let w = pool.open_pmo("a", Perm::Write, KEY, None).unwrap();
        let mut model = vec![0u64; PAGES as usize];
        commit_stamps(&w, 1, &(0..PAGES).collect::<Vec<_>>(), &mut model);
        let r = pool.open_pmo("a", Perm::Read, KEY, None).unwrap();
        // The ring of a 32-page PMO holds 256 entries: 300 pages written.
        for k in 2..=31 {
            let pages: BTreeSet<u64> = (0..10).map(|i| (k * 3 + i) % PAGES).collect();
            commit_stamps(&w, k, &pages.into_iter().collect::<Vec<_>>(), &mut model);
        }
        let got = r.refresh().unwrap();
        r.refreshed();
        assert!(
            !got.from_ring,
            "{ctx}: the ring cannot reach back 300 entries"
        );
        check_stamps(&r, &model, &format!("{ctx} after the whole map"));
        commit_stamps(&w, 32, &[5, 6], &mut model);
        let got = r.refresh().unwrap();
        r.refreshed();
        assert!(got.from_ring, "{ctx}");
        assert_eq!(got.changed, vec![5, 6], "{ctx}");
        check_stamps(&r, &model, &format!("{ctx} after the ring"));
    }
}

/// A mapped reader in this process (relocated beside the writer's mapping) shows the newest
/// psync on every page after each refresh, pages it had decrypted before included.
#[test]
fn a_mapped_reader_shows_the_new_psync_on_every_page_after_a_refresh() {
    for scheme in [Scheme::NONE, Scheme::SECURE] {
        let path = shm("mapped", scheme);
        let _ = std::fs::remove_file(&path);
        // Removed also when an assertion fails.
        let _guard = RemoveOnDrop(path.clone());
        let pool = Pool::create(&path, 16 << 20, &opts(scheme)).unwrap();
        pool.pcreate("a", PAGES * 4096, KEY).unwrap();
        let w = pool.attach("a", Perm::Write, KEY).unwrap();
        let mut model = vec![0u64; PAGES as usize];
        for p in 0..PAGES {
            w.write_at((p * 4096) as usize, &stamp(1, p)[..]).unwrap();
            model[p as usize] = 1;
        }
        w.psync().unwrap();
        let r = pool
            .attach_with(
                "a",
                Perm::Read,
                KEY,
                AttachOptions {
                    relocate: true,
                    ..Default::default()
                },
            )
            .unwrap();
        let mut rng = Rng::new(0xdead_beef_1234_5678);
        let mut buf = vec![0u8; (PAGES * 4096) as usize];
        for k in 2..40u64 {
            // Every page decrypted in the reader's view before the psyncs.
            r.read_at(0, &mut buf).unwrap();
            for _ in 0..2 {
                for p in rng.pages(3) {
                    w.write_at((p * 4096) as usize, &stamp(k, p)[..]).unwrap();
                    model[p as usize] = k;
                }
                w.psync().unwrap();
            }
            assert_eq!(r.refresh().unwrap(), w.snapshot_seq());
            r.read_at(0, &mut buf).unwrap();
            for (p, &want) in model.iter().enumerate() {
                assert!(
                    buf[p * 4096..(p + 1) * 4096] == stamp(want, p as u64)[..],
                    "{} psync {k}: page {p} is not stamp {want}'s",
                    scheme.name()
                );
            }
        }
        drop(r);
        drop(w);
        drop(pool);
    }
}

/// Under `secure` the changed entries and the trailer are checked against the version-table
/// MAC: a page's entry rolled back on the medium (the change left out) fails the refresh, and
/// the reader keeps its snapshot; put back, the refresh goes through.
#[test]
fn a_rolled_back_entry_fails_the_refresh_and_the_reader_keeps_its_snapshot() {
    let medium = Arc::new(CrashMedium::new(8 << 20));
    let pool = Pool::create_on(medium.clone(), &opts(Scheme::SECURE)).unwrap();
    pool.pcreate("a", PAGES * 4096, KEY).unwrap();
    let w = pool.open_pmo("a", Perm::Write, KEY, None).unwrap();
    let mut model = vec![0u64; PAGES as usize];
    commit_stamps(&w, 1, &(0..PAGES).collect::<Vec<_>>(), &mut model);
    let r = pool.open_pmo("a", Perm::Read, KEY, None).unwrap();
    let seen = model.clone();
    // Page 5 in one psync, page 6 in the next: page 5's entry is then read from the map.
    let at = w.core.abs(w.core.layout.map_entry(5));
    let mut before = [0u8; 8];
    medium.read(at, &mut before).unwrap();
    commit_stamps(&w, 2, &[5], &mut model);
    commit_stamps(&w, 3, &[6], &mut model);
    let mut after = [0u8; 8];
    medium.read(at, &mut after).unwrap();
    assert_ne!(before, after);
    medium.write(at, &before).unwrap();
    match r.refresh() {
        Err(StoreError::IntegrityPmo { .. }) => {}
        other => panic!("a rolled-back entry refreshed: {other:?}"),
    }
    r.refreshed();
    check_stamps(&r, &seen, "after the failed refresh");
    medium.write(at, &after).unwrap();
    let got = r.refresh().unwrap();
    r.refreshed();
    assert!(got.from_ring);
    assert_eq!(got.changed, vec![5, 6]);
    check_stamps(&r, &model, "after the refresh");
}

/// A pin table of layout 1 (an older build's) in use for the PMO is refused with `Busy`, the
/// PMO named: the two builds would not see each other's pins.
#[test]
fn an_older_builds_pin_table_in_use_is_refused() {
    let path = shm("v1", Scheme::NONE);
    let _ = std::fs::remove_file(&path);
    let _guard = RemoveOnDrop(path.clone());
    let pool = Pool::create(&path, 16 << 20, &opts(Scheme::NONE)).unwrap();
    pool.pcreate("a", PAGES * 4096, KEY).unwrap();
    let r = pool.open_pmo("a", Perm::Read, KEY, None).unwrap();
    let table = pool.pins_at(&r.core).path();
    // The magic word as layout 1 wrote it, in place (the first reader keeps the file mapped).
    let put_magic = |m: &[u8; 8]| {
        use std::io::{Seek, Write};
        let mut f = std::fs::OpenOptions::new().write(true).open(&table)?;
        f.seek(std::io::SeekFrom::Start(0))?;
        f.write_all(m)
    };
    put_magic(b"PMOPINS1").unwrap();
    match pool.open_pmo("a", Perm::Read, KEY, None) {
        Err(StoreError::Busy { name, how }) => {
            assert_eq!(name, "a");
            assert!(how.contains("older pmo build"), "{how}");
        }
        Err(e) => panic!("an older build's table gave {e}"),
        Ok(_) => panic!("an older build's table was joined"),
    }
    put_magic(b"PMOPINS2").unwrap();
    let again = pool.open_pmo("a", Perm::Read, KEY, None).unwrap();
    drop(again);
    drop(r);
}

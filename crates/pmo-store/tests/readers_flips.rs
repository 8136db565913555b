//! A damaged commit record beside a live writer (issue 27): a reader that attaches, or
//! refreshes, while the newest commit record is damaged never sees a mix of two psyncs.
//!
//! Psync 1 writes pages 0..4, psync 2 pages 2..6. With record 2 damaged the newest intact
//! record is 1, while the page map already names psync 2's slots for pages 2..6. Recovery
//! (an attach with no writer) refuses that map; a reader beside the writer reads the map
//! without recovery, and before the check added with this test it applied psync 1's journal
//! over it: pages 0..4 as of psync 1, pages 4..6 as of psync 2, wrong data that nothing
//! caught under `none`. Now every outcome is one psync's exact state, or an integrity error.

use std::sync::Arc;

use pmo_medium::crash::CrashMedium;
use pmo_store::{Perm, PmoHandle, Pool, Scheme};

mod common;

use common::opts;

use common::stamps::{commit_stamps, stamp};
use common::RemoveOnDrop;

const KEY: &[u8] = b"flips-key";
const PAGES: u64 = 8;
const RECORD: u64 = 64;

/// The offset on the medium of the newest commit record of PMO "a".
fn newest_record(pool: &Pool) -> u64 {
    let x = pool.entry("a").unwrap().extent_off;
    let seq = |i: u64| {
        let mut b = [0u8; RECORD as usize];
        pool.medium().read(x + i * RECORD, &mut b).unwrap();
        u64::from_le_bytes(b[8..16].try_into().unwrap())
    };
    x + if seq(1) > seq(0) { RECORD } else { 0 }
}

/// Whether every page of `pages` holds what `model` names: stamp `k`, or zeros for `k = 0`
/// (never written).
fn shows(pages: &[[u8; 4096]], model: &[u64]) -> bool {
    model.iter().enumerate().all(|(p, &k)| match k {
        0 => pages[p].iter().all(|&b| b == 0),
        k => pages[p] == *stamp(k, p as u64),
    })
}

/// The pages `h` shows (`None` if one fails to read).
fn pages_of(h: &PmoHandle) -> Option<Vec<[u8; 4096]>> {
    let mut pages = vec![[0u8; 4096]; PAGES as usize];
    for (p, b) in pages.iter_mut().enumerate() {
        h.read_page(p as u64, b).ok()?;
    }
    Some(pages)
}

fn flip(pool: &Pool, at: u64, bit: u8) {
    let mut b = [0u8; 1];
    pool.medium().read(at, &mut b).unwrap();
    b[0] ^= bit;
    pool.medium().write(at, &b).unwrap();
}

#[test]
fn a_reader_beside_a_writer_never_mixes_two_psyncs_when_the_newest_record_is_damaged() {
    for scheme in [Scheme::NONE, Scheme::SECURE] {
        assert!(pmo_store::reader_beside_writer(scheme), "{scheme}");
        let path = std::path::PathBuf::from("/dev/shm").join(format!(
            "pmo-readers-flips-{}-{}",
            scheme.name(),
            std::process::id()
        ));
        let _ = std::fs::remove_file(&path);
        let _guard = RemoveOnDrop(path.clone());
        let pools = [
            Pool::create(&path, 16 << 20, &opts(scheme)).unwrap(),
            Pool::create_on(Arc::new(CrashMedium::new(16 << 20)), &opts(scheme)).unwrap(),
        ];
        for (i, pool) in pools.iter().enumerate() {
            let ctx = format!("{scheme}, pool {i}");
            pool.pcreate("a", PAGES * 4096, KEY).unwrap();
            let w = pool.open_pmo("a", Perm::Write, KEY, None).unwrap();
            let mut models = vec![vec![0u64; PAGES as usize]];
            let mut model = models[0].clone();
            // A reader at the state before psync 1, to refresh once record 2 is damaged.
            let early = pool.open_pmo("a", Perm::Read, KEY, None).unwrap();
            commit_stamps(&w, 1, &[0, 1, 2, 3], &mut model);
            models.push(model.clone());
            // A reader at psync 1, to refresh once record 2 is damaged.
            let at_one = pool.open_pmo("a", Perm::Read, KEY, None).unwrap();
            assert!(
                shows(&pages_of(&at_one).unwrap(), &models[1]),
                "{ctx}: psync 1"
            );
            commit_stamps(&w, 2, &[2, 3, 4, 5], &mut model);
            models.push(model.clone());
            let rec = newest_record(pool);
            // Which psync's state a handle shows exactly, if any (pages all read).
            let state = |h: &PmoHandle| -> Option<usize> {
                let pages = pages_of(h)?;
                models.iter().position(|m| shows(&pages, m))
            };
            let (mut caught, mut exact) = (0, 0);
            for bit in (0..RECORD * 8).step_by(5) {
                let (at, mask) = (rec + bit / 8, 1u8 << (bit % 8));
                flip(pool, at, mask);
                let what = format!("{ctx}: bit {bit} of the newest record flipped");
                match pool.open_pmo("a", Perm::Read, KEY, None) {
                    Ok(h) => match state(&h) {
                        Some(_) => exact += 1,
                        None => panic!("{what}: a new reader sees a mix of psyncs"),
                    },
                    Err(e) if e.is_integrity() => caught += 1,
                    Err(e) => panic!("{what}: a new reader: {e}"),
                }
                // Readers already attached refresh: a psync's exact state, or an integrity
                // error that leaves them on their snapshot.
                for (r, before) in [(&early, 0), (&at_one, 1)] {
                    match r.refresh() {
                        Ok(_) => {
                            r.refreshed();
                            let got = state(r).unwrap_or_else(|| {
                                panic!("{what}: a refresh from {before}: a mix")
                            });
                            assert!(got >= before, "{what}: a refresh went back to {got}");
                        }
                        Err(e) if e.is_integrity() => {
                            assert!(state(r).is_some(), "{what}: a failed refresh left a mix")
                        }
                        Err(e) => panic!("{what}: a refresh from {before}: {e}"),
                    }
                }
                flip(pool, at, mask);
            }
            println!("{ctx}: {caught} flips caught, {exact} read as one psync");
            assert!(
                caught > 0,
                "{ctx}: no flip caught ({exact} exact): the damaged record went unnoticed"
            );
            // The writer goes on past the damaged record: its next psync takes the other
            // record slot, and a new reader sees exactly it.
            flip(pool, rec + 8, 1);
            commit_stamps(&w, 3, &[4, 5, 6], &mut model);
            let r = pool.open_pmo("a", Perm::Read, KEY, None).unwrap();
            assert!(
                shows(&pages_of(&r).unwrap(), &model),
                "{ctx}: after psync 3"
            );
            drop((r, early, at_one, w));
            flip(pool, rec + 8, 1);
        }
    }
}

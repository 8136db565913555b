//! Readers beside a writer over the pin limit (`docs/readers.md`, "When the frames run out"):
//! with `PMO_PIN_PAGES` frames, a writer whose psync would need more gets `NoSpace` before it
//! writes anything, keeps its changes, and commits them after the reader refreshes; the reader
//! meanwhile still sees its psync exactly. A dead reader (its slot's lock gone) stops pinning.
//! Its own test binary: the variable is read when a table is made, once per process here.

use std::sync::Arc;

use pmo_medium::crash::CrashMedium;
use pmo_store::{KdfParams, Perm, Pool, PoolOptions, Scheme, StoreError};

const KEY: &[u8] = b"limit-key";
const PAGES: u64 = 8;
const FRAMES: u64 = 4;

fn page(v: u8) -> [u8; 4096] {
    [v; 4096]
}

fn all(h: &pmo_store::PmoHandle, v: u8) -> pmo_store::Result<()> {
    let pages: Vec<[u8; 4096]> = (0..PAGES).map(|_| page(v)).collect();
    let list: Vec<(u64, &[u8; 4096])> = (0..PAGES).zip(pages.iter()).collect();
    h.commit_pages(&list).map(|_| ())
}

fn reads(h: &pmo_store::PmoHandle, v: u8, ctx: &str) {
    let mut b = [0u8; 4096];
    for p in 0..PAGES {
        h.read_page(p, &mut b).unwrap();
        assert_eq!(b, page(v), "{ctx}: page {p}");
    }
}

#[test]
fn over_the_pin_limit_the_writer_gets_no_space_and_the_reader_keeps_its_psync() {
    std::env::set_var("PMO_PIN_PAGES", FRAMES.to_string());
    let path = std::path::PathBuf::from("/dev/shm")
        .join(format!("pmo-readers-limit-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let opts = PoolOptions {
        kdf: KdfParams::INSECURE_FAST,
        ns_capacity: Some(8),
        scheme: Scheme::from_name("secure").unwrap(),
        ..Default::default()
    };
    let pools = [
        Pool::create(&path, 8 << 20, &opts).unwrap(),
        Pool::create_on(Arc::new(CrashMedium::new(8 << 20)), &opts).unwrap(),
    ];
    for pool in pools {
        pool.pcreate("a", PAGES * 4096, KEY).unwrap();
        let w = pool.open_pmo("a", Perm::Write, KEY, None).unwrap();
        all(&w, 1).unwrap();
        let r = pool.open_pmo("a", Perm::Read, KEY, None).unwrap();
        // Psync 2 writes the other slots: nothing the reader reads is overwritten yet.
        all(&w, 2).unwrap();
        // Psync 3 would overwrite all 8 slots the reader reads: 8 versions, 4 frames.
        let e = all(&w, 3).unwrap_err();
        assert!(
            matches!(&e, StoreError::PinLimit { name, kept: FRAMES, .. } if name == "a"),
            "{e:?}"
        );
        assert!(e.to_string().contains("PMO_PIN_PAGES"), "{e}");
        assert_eq!(e.errno(), libc::ENOSPC);
        reads(&r, 1, "the reader after the refused psync");
        // Nothing of psync 3 was committed; the reader moves on, and the psync goes through.
        let moved = r.refresh().unwrap();
        r.refreshed();
        reads(&r, 2, "refreshed");
        assert!(moved.changed.len() as u64 >= PAGES);
        all(&w, 3).unwrap();
        reads(&r, 2, "pinned again");
        drop(r);
        // No reader: every later psync goes through.
        for v in 4..8 {
            all(&w, v).unwrap();
        }
        drop(w);
        let check = pool.open_pmo("a", Perm::Read, KEY, None).unwrap();
        reads(&check, 7, "at rest");
    }
    std::fs::remove_file(&path).unwrap();
}

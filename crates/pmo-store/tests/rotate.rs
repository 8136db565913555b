//! Rotate (`docs/lifecycle.md`): every written page re-encrypted under a new data key, the key
//! unchanged, under every encrypting scheme and placement; a power cut at every persist point
//! of a rotation leaves a PMO that reads exactly, and the next open or rotate finishes it.

use std::sync::Arc;

use pmo_medium::crash::{explore, CrashMedium};
use pmo_store::{KdfParams, Perm, Pool, PoolOptions, Scheme, StoreError};

mod common;
use common::assert_healthy;

const KEY: &[u8] = b"rot-key";

fn opts(scheme: Scheme) -> PoolOptions {
    PoolOptions {
        kdf: KdfParams::INSECURE_FAST,
        ns_capacity: Some(8),
        base_addr: Some(0x2000_0000_0000),
        medium: None,
        preallocate: false,
        scheme,
    }
}

/// Page `p` (every third page stays zero: never written).
fn page(p: u64) -> [u8; 4096] {
    if p % 3 == 2 {
        return [0; 4096];
    }
    let mut b = [0x3Cu8 ^ p as u8; 4096];
    b[..8].copy_from_slice(&p.to_le_bytes());
    b
}

fn pool_with_a(scheme: Scheme, pages: u64, medium: u64) -> Pool {
    let pool = Pool::create_on(Arc::new(CrashMedium::new(medium)), &opts(scheme)).unwrap();
    pool.pcreate("a", pages * 4096, KEY).unwrap();
    let h = pool.open_pmo("a", Perm::Write, KEY, None).unwrap();
    let data: Vec<[u8; 4096]> = (0..pages).map(page).collect();
    let list: Vec<(u64, &[u8; 4096])> = (0..pages)
        .zip(data.iter())
        // Every third page never written, but the last (a rotation's last batch ends on it).
        .filter(|(p, _)| p % 3 != 2 || *p == pages - 1)
        .collect();
    h.commit_pages(&list).unwrap();
    drop(h);
    pool
}

fn assert_pages(pool: &Pool, pages: u64, ctx: &str) {
    let h = pool
        .open_pmo("a", Perm::Read, KEY, None)
        .unwrap_or_else(|e| panic!("{ctx}: open: {e}"));
    let mut b = [0u8; 4096];
    for p in 0..pages {
        h.read_page(p, &mut b)
            .unwrap_or_else(|e| panic!("{ctx}: page {p}: {e}"));
        assert!(b == page(p), "{ctx}: page {p} differs");
    }
}

fn image(pool: &Pool) -> Vec<u8> {
    let m = pool.medium();
    let mut b = vec![0u8; m.len() as usize];
    m.read(0, &mut b).unwrap();
    b
}

/// The 64-byte windows of every 4 KiB-aligned page of `img`.
fn page_heads(img: &[u8]) -> std::collections::HashSet<&[u8]> {
    img.chunks_exact(4096)
        .map(|c| &c[..64])
        .filter(|h| h.iter().any(|&b| b != 0))
        .collect()
}

#[test]
fn rotate_reencrypts_every_page_and_keeps_the_key() {
    const PAGES: u64 = 300;
    for scheme in Scheme::all_placements().filter(|s| s.is_protected()) {
        let ctx = scheme.name();
        let pool = match Pool::create_on(Arc::new(CrashMedium::new(8 << 20)), &opts(scheme)) {
            Ok(p) => p,
            Err(StoreError::Unsupported(_)) => continue,
            Err(e) => panic!("{ctx}: {e}"),
        };
        drop(pool);
        let pool = pool_with_a(scheme, PAGES, 8 << 20);
        let before = image(&pool);
        let mut seen = 0;
        pool.rotate("a", KEY, &mut |done, all| {
            assert!(done <= all);
            seen = done;
        })
        .unwrap_or_else(|e| panic!("{ctx}: rotate: {e}"));
        assert_eq!(seen, PAGES, "{ctx}: progress reached the end");
        assert!(!pool.rotation_unfinished("a").unwrap(), "{ctx}");
        assert_pages(&pool, PAGES, &ctx);
        // No sealed page of before is left in a current slot: every written page is new
        // ciphertext (the old slots hold the old ciphertext until they are reused; what
        // matters is that the current ones changed and still decrypt).
        let after = image(&pool);
        let old = page_heads(&before);
        let fresh = page_heads(&after).difference(&old).count();
        assert!(
            fresh as u64 >= PAGES * 2 / 3,
            "{ctx}: only {fresh} new sealed pages"
        );
        assert!(matches!(
            pool.open_pmo("a", Perm::Read, b"other", None),
            Err(StoreError::WrongKey(_))
        ));
        // Again: a second rotation.
        pool.rotate("a", KEY, &mut |_, _| {}).unwrap();
        assert_pages(&pool, PAGES, &ctx);
        assert_healthy(&pool, &ctx);
    }
    let pool = pool_with_a(Scheme::NONE, 3, 2 << 20);
    assert!(matches!(
        pool.rotate("a", KEY, &mut |_, _| {}),
        Err(StoreError::Invalid(_))
    ));
}

#[test]
fn rotate_at_every_persist_point_reads_exactly_and_the_next_open_finishes_it() {
    // Three batches (256 pages each) and some.
    const PAGES: u64 = 600;
    for name in ["secure", "sp-ip", "wedi", "bp-id:medium"] {
        let scheme = Scheme::from_name(name).unwrap();
        let base = image(&pool_with_a(scheme, PAGES, 16 << 20));
        let (mut done, mut cut) = (0, 0);
        let points = explore(
            &base,
            2,
            0x707,
            |m| Pool::open_on(m.clone())?.rotate("a", KEY, &mut |_, _| {}),
            |cp| {
                let ctx = format!("{name}: rotate point {} variant {}", cp.point, cp.variant);
                let img = cp.image.clone();
                let pool = Pool::open_on(Arc::new(CrashMedium::from_image(img)))
                    .unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
                if pool.rotation_unfinished("a").unwrap() {
                    cut += 1;
                } else {
                    done += 1;
                }
                // The open finishes the pages; reads are exact either way.
                assert_pages(&pool, PAGES, &ctx);
                // A writer commits after that open (page 0, same contents), and the next
                // open still reads every page: a psync after the finishing open is not
                // taken for a rotation batch.
                {
                    let h = pool.open_pmo("a", Perm::Write, KEY, None).unwrap();
                    h.commit_pages(&[(0, &page(0))])
                        .unwrap_or_else(|e| panic!("{ctx}: commit after the open: {e}"));
                }
                assert_pages(&pool, PAGES, &format!("{ctx}, after a commit"));
                pool.rotate("a", KEY, &mut |_, _| {})
                    .unwrap_or_else(|e| panic!("{ctx}: rotate again: {e}"));
                assert!(!pool.rotation_unfinished("a").unwrap(), "{ctx}");
                assert_pages(&pool, PAGES, &ctx);
                assert_healthy(&pool, &ctx);
            },
        );
        assert!(points > 10, "{name}: {points} persist points");
        assert!(cut > 0 && done > 0, "{name}: cut {cut} done {done}");
    }
}

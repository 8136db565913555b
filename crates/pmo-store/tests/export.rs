//! Export, import and copy (`docs/lifecycle.md`): round trips under every scheme into another
//! pool; a tampered or truncated export file refused before anything is created; no plaintext in
//! an export file; a crash at every persist point of an import leaves no PMO of the final name
//! or the whole one.

use std::path::PathBuf;
use std::sync::Arc;

use pmo_medium::crash::{explore, CrashMedium};
use pmo_store::{KdfParams, Perm, Pool, PoolOptions, Scheme, StoreError};

const KEY: &[u8] = b"exp-key";
const PAGES: u64 = 6;

fn opts(scheme: Scheme) -> PoolOptions {
    PoolOptions {
        kdf: KdfParams::INSECURE_FAST,
        ns_capacity: Some(16),
        base_addr: Some(0x2000_0000_0000),
        medium: None,
        preallocate: false,
        scheme,
    }
}

fn schemes() -> Vec<Scheme> {
    ["none", "secure", "sp-ip", "sp-id", "wedi", "bp", "wed"]
        .iter()
        .map(|n| Scheme::from_name(n).unwrap())
        .collect()
}

/// Page `p`: a filler no 64-byte window of ciphertext matches by chance; page 3 stays zero.
fn page(p: u64) -> [u8; 4096] {
    if p == 3 {
        return [0; 4096];
    }
    let mut b = [0x5Au8; 4096];
    b[0] = p as u8;
    b
}

fn pool_with_a(scheme: Scheme) -> Pool {
    let pool = Pool::create_on(Arc::new(CrashMedium::new(2 << 20)), &opts(scheme)).unwrap();
    pool.pcreate("a", PAGES * 4096, KEY).unwrap();
    let h = pool.open_pmo("a", Perm::Write, KEY, None).unwrap();
    let pages: Vec<[u8; 4096]> = (0..PAGES).map(page).collect();
    let list: Vec<(u64, &[u8; 4096])> = (0..PAGES).zip(pages.iter()).collect();
    h.commit_pages(&list).unwrap();
    pool
}

fn assert_pages(pool: &Pool, name: &str, key: &[u8], ctx: &str) {
    let h = pool
        .open_pmo(name, Perm::Read, key, None)
        .unwrap_or_else(|e| panic!("{ctx}: open '{name}': {e}"));
    let mut buf = [0u8; 4096];
    for p in 0..PAGES {
        h.read_page(p, &mut buf).unwrap();
        assert!(buf == page(p), "{ctx}: page {p} differs");
    }
}

struct Tmp(PathBuf);
impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
fn tmp(tag: &str) -> Tmp {
    let d = std::env::temp_dir().join(format!("pmo-export-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    Tmp(d)
}

fn none(_: u64, _: u64) {}

#[test]
fn export_import_round_trip_into_another_pool() {
    let d = tmp("round");
    for scheme in schemes() {
        let src = pool_with_a(scheme);
        let file = d.0.join(format!("{scheme}.pmox").replace(':', "_"));
        let mut calls = 0;
        let n = src.export("a", KEY, &file, &mut |_, _| calls += 1).unwrap();
        assert_eq!(n, PAGES);
        assert_eq!(calls, PAGES);
        let bytes = std::fs::read(&file).unwrap();
        assert!(
            !bytes.windows(64).any(|w| w == [0x5Au8; 64]),
            "{scheme}: plaintext in the export file"
        );
        // Exporting over an existing file is refused.
        assert!(src.export("a", KEY, &file, &mut none).is_err());
        // Another pool (another pool uuid), another name.
        let dst = Pool::create_on(Arc::new(CrashMedium::new(2 << 20)), &opts(scheme)).unwrap();
        assert!(matches!(
            dst.import(&file, None, b"wrong", &mut none),
            Err(StoreError::WrongKey(_))
        ));
        assert!(
            dst.list().unwrap().is_empty(),
            "{scheme}: a wrong key created something"
        );
        let info = dst.import(&file, None, KEY, &mut none).unwrap();
        assert_eq!(info.name, "a");
        assert_eq!(info.scheme, src.info("a").unwrap().scheme);
        assert_ne!(info.uuid, src.info("a").unwrap().uuid);
        assert_pages(&dst, "a", KEY, &format!("{scheme}: imported"));
        assert!(matches!(
            dst.import(&file, None, KEY, &mut none),
            Err(StoreError::Exists(_))
        ));
        dst.import(&file, Some("b"), KEY, &mut none).unwrap();
        assert_pages(&dst, "b", KEY, &format!("{scheme}: imported as b"));
        let r = dst.check().unwrap();
        assert!(r.problems.is_empty() && r.used_bytes + r.free_bytes == r.heap_len);
        assert_eq!(dst.list().unwrap().len(), 2);
    }
}

#[test]
fn a_rekeyed_pmo_exports_and_imports_with_its_new_key() {
    let d = tmp("rekeyed");
    let src = pool_with_a(Scheme::from_name("secure").unwrap());
    src.rekey("a", KEY, b"k2").unwrap();
    let file = d.0.join("a.pmox");
    assert!(matches!(
        src.export("a", KEY, &file, &mut none),
        Err(StoreError::WrongKey(_))
    ));
    src.export("a", b"k2", &file, &mut none).unwrap();
    let dst = Pool::create_on(
        Arc::new(CrashMedium::new(2 << 20)),
        &opts(Scheme::from_name("secure").unwrap()),
    )
    .unwrap();
    dst.import(&file, None, b"k2", &mut none).unwrap();
    assert_pages(&dst, "a", b"k2", "rekeyed then imported");
}

#[test]
fn tampered_or_truncated_exports_are_refused_before_anything_is_created() {
    let d = tmp("tamper");
    let scheme = Scheme::from_name("secure").unwrap();
    let src = pool_with_a(scheme);
    let file = d.0.join("a.pmox");
    src.export("a", KEY, &file, &mut none).unwrap();
    let good = std::fs::read(&file).unwrap();
    let dst = Pool::create_on(Arc::new(CrashMedium::new(2 << 20)), &opts(scheme)).unwrap();
    let bad = d.0.join("bad.pmox");
    let try_import = |bytes: &[u8]| {
        std::fs::write(&bad, bytes).unwrap();
        dst.import(&bad, None, KEY, &mut none)
    };
    let rec = 4096 + 16;
    // One flipped bit in: the sizes, the export id, the page ciphertext of pages 0 and 5,
    // a tag, the MAC.
    let spots = [
        17,
        40,
        560 + 100,
        560 + 5 * rec + 7,
        560 + rec + 4096 + 3,
        good.len() - 1,
    ];
    for at in spots {
        let mut b = good.clone();
        b[at] ^= 0x10;
        let r = try_import(&b);
        assert!(
            r.as_ref().is_err_and(|e| e.is_integrity()),
            "flip at {at}: {:?}",
            r.map(|i| i.name)
        );
    }
    // Two pages swapped (records intact): the page index is authenticated.
    let mut b = good.clone();
    let (p0, p1) = (560, 560 + rec);
    let first = b[p0..p0 + rec].to_vec();
    b.copy_within(p1..p1 + rec, p0);
    b[p1..p1 + rec].copy_from_slice(&first);
    assert!(try_import(&b).is_err_and(|e| e.is_integrity()));
    // Truncated at every record boundary and mid-record; extended by one byte.
    for cut in [10, 100, 560, 560 + rec / 2, 560 + 3 * rec, good.len() - 1] {
        let r = try_import(&good[..cut]);
        assert!(
            r.as_ref().is_err_and(|e| e.is_integrity()),
            "cut {cut}: {:?}",
            r.map(|_| ())
        );
    }
    let mut longer = good.clone();
    longer.push(0);
    assert!(try_import(&longer).is_err_and(|e| e.is_integrity()));
    // Not an export at all: a usage error, not an integrity one.
    let r = try_import(&[7u8; 4096]);
    assert!(
        matches!(r, Err(StoreError::Invalid(_))),
        "{:?}",
        r.map(|_| ())
    );
    assert!(
        dst.list().unwrap().is_empty(),
        "a refused file created a PMO"
    );
    let r = dst.check().unwrap();
    assert!(r.used_bytes == 0 || r.used_bytes + r.free_bytes == r.heap_len);
    // The untouched file still imports.
    try_import(&good).unwrap();
}

#[test]
fn copy_makes_an_independent_pmo_with_new_nonces() {
    for scheme in schemes() {
        let pool = pool_with_a(scheme);
        pool.copy("a", "c", KEY, None, &mut none).unwrap();
        pool.copy("a", "d", KEY, Some(b"other"), &mut none).unwrap();
        assert!(matches!(
            pool.copy("a", "c", KEY, None, &mut none),
            Err(StoreError::Exists(_))
        ));
        assert_pages(&pool, "c", KEY, &format!("{scheme}: copy"));
        assert_pages(&pool, "d", b"other", &format!("{scheme}: copy, new key"));
        assert!(pool.check_key("d", KEY).is_err());
        let (a, c) = (pool.info("a").unwrap(), pool.info("c").unwrap());
        assert_ne!(a.uuid, c.uuid);
        // The copy's pages are sealed anew: its extent's bytes differ from the source's.
        if scheme.is_protected() {
            let m = pool.medium();
            let (mut x, mut y) = (vec![0u8; 4096], vec![0u8; 4096]);
            let mut differ = false;
            for off in (4096..a.extent_len.min(c.extent_len)).step_by(4096) {
                m.read(a.extent_off + off, &mut x).unwrap();
                m.read(c.extent_off + off, &mut y).unwrap();
                differ |= x != y && x.iter().any(|&b| b != 0);
            }
            assert!(differ, "{scheme}: copy holds the source's ciphertext");
        }
        // Writing the copy leaves the source alone.
        let h = pool.open_pmo("c", Perm::Write, KEY, None).unwrap();
        h.write_at(0, b"changed").unwrap();
        drop(h);
        assert_pages(
            &pool,
            "a",
            KEY,
            &format!("{scheme}: source after copy write"),
        );
    }
}

#[test]
fn a_crash_during_import_leaves_no_partial_pmo_under_the_final_name() {
    let d = tmp("crash");
    let scheme = Scheme::from_name("secure").unwrap();
    let src = pool_with_a(scheme);
    let file = d.0.join("a.pmox");
    src.export("a", KEY, &file, &mut none).unwrap();
    let base = {
        let m = Arc::new(CrashMedium::new(2 << 20));
        Pool::create_on(m.clone(), &opts(scheme)).unwrap();
        m.durable_image()
    };
    let mut whole = 0;
    explore(
        &base,
        1,
        0x16,
        |m| Pool::open_on(m.clone())?.import(&file, None, KEY, &mut none),
        |cp| {
            let ctx = format!("import point {} variant {}", cp.point, cp.variant);
            let pool = Pool::open_on(Arc::new(CrashMedium::from_image(cp.image.clone())))
                .unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
            if pool.exists("a").unwrap() {
                assert_pages(&pool, "a", KEY, &ctx);
                whole += 1;
            } else {
                assert!(!cp.completed, "{ctx}: a completed import was lost");
            }
            let r = pool.check().unwrap();
            assert!(r.problems.is_empty(), "{ctx}: {:?}", r.problems);
            assert_eq!(r.used_bytes + r.free_bytes, r.heap_len, "{ctx}: leak");
        },
    );
    assert!(whole > 0);
}

//! AEGIS-256X4 as the page AEAD of `secure` (format version 9, `docs/format.md` §3,
//! `docs/security.md` §5): a version-8 pool opens and reads unchanged (its PMOs keep
//! AES-256-GCM), is upgraded to version 9 (the superblock alone; power cut at every persist
//! point of that step), and only then takes PMOs sealed with AEGIS-256X4, which live beside GCM
//! ones in one pool. The tamper matrix, crash simulation, flips and SIGKILLs run for each cipher
//! in their own files (`schemes.rs`, `crash_sim.rs`, `flips.rs`, `sigkill.rs`).

use std::sync::Arc;

use pmo_medium::crash::{explore, CrashMedium};
use pmo_store::{KdfParams, Perm, Pool, PoolOptions, Scheme, StoreError};

mod common;
use common::assert_healthy;

const KEY: &[u8] = b"aegis-key";
const PAGES: u64 = 4;

fn opts(scheme: Scheme) -> PoolOptions {
    PoolOptions {
        kdf: KdfParams::INSECURE_FAST,
        ns_capacity: Some(16),
        base_addr: Some(0x2300_0000_0000),
        scheme,
        ..Default::default()
    }
}

fn page(v: u8, p: u64) -> [u8; 4096] {
    let mut b = [v; 4096];
    b[0] = p as u8;
    b
}

fn write(pool: &Pool, name: &str, v: u8) {
    let h = pool.open_pmo(name, Perm::Write, KEY, None).unwrap();
    let pages: Vec<[u8; 4096]> = (0..PAGES).map(|p| page(v, p)).collect();
    let list: Vec<(u64, &[u8; 4096])> = (0..PAGES).zip(pages.iter()).collect();
    h.commit_pages(&list).unwrap();
}

fn assert_reads(pool: &Pool, name: &str, v: u8, ctx: &str) {
    let h = pool
        .open_pmo(name, Perm::Read, KEY, None)
        .unwrap_or_else(|e| panic!("{ctx}: open {name}: {e}"));
    let mut b = [0u8; 4096];
    for p in 0..PAGES {
        h.read_page(p, &mut b).unwrap();
        assert!(b == page(v, p), "{ctx}: {name} page {p}");
    }
}

/// A version-8 pool (what the previous build wrote) with a GCM PMO "a" at version 1.
fn version_8_image() -> Vec<u8> {
    let m = Arc::new(CrashMedium::new(2 << 20));
    let pool = Pool::create_legacy_on(m.clone(), &opts(Scheme::SECURE_GCM), 8).unwrap();
    assert_eq!(pool.superblock().version, 8);
    pool.pcreate("a", PAGES * 4096, KEY).unwrap();
    write(&pool, "a", 1);
    // Not upgraded, the pool refuses a code version 8 cannot hold.
    let e = pool
        .pcreate_with("x", 4096, KEY, Some(Scheme::SECURE_AEGIS))
        .unwrap_err();
    assert!(matches!(e, StoreError::Unsupported(_)), "{e}");
    let e = pool.set_default_scheme(Scheme::SECURE_AEGIS).unwrap_err();
    assert!(matches!(e, StoreError::Unsupported(_)), "{e}");
    drop(pool);
    m.durable_image()
}

#[test]
fn a_version_8_pool_reads_unchanged_and_takes_aegis_pmos_after_its_upgrade() {
    let m = Arc::new(CrashMedium::from_image(version_8_image()));
    let pool = Pool::open_on(m.clone()).unwrap();
    assert_eq!(pool.superblock().version, pmo_format::FORMAT_VERSION);
    assert_eq!(pmo_format::FORMAT_VERSION, 9);
    // The old PMO keeps AES-256-GCM (its code has no AEAD bits) and reads as written.
    let info = pool.info("a").unwrap();
    assert_eq!(info.scheme, Scheme::SECURE_GCM.code());
    // Its default for new PMOs stays the GCM it was made with.
    assert_eq!(pool.default_scheme().unwrap(), Scheme::SECURE_GCM);
    assert_reads(&pool, "a", 1, "upgraded");
    write(&pool, "a", 2);
    assert_reads(&pool, "a", 2, "written after the upgrade");
    // An AEGIS PMO beside it.
    pool.pcreate_with("b", PAGES * 4096, KEY, Some(Scheme::SECURE_AEGIS))
        .unwrap();
    assert_eq!(pool.info("b").unwrap().scheme, Scheme::SECURE_AEGIS.code());
    write(&pool, "b", 3);
    assert_reads(&pool, "b", 3, "aegis");
    // It cannot be run as the GCM design: that is another at-rest format.
    let e = pool
        .open_pmo_as("b", Perm::Read, KEY, None, Some(Scheme::SECURE_GCM))
        .err()
        .expect("an AEGIS PMO attached as GCM");
    assert!(matches!(e, StoreError::Invalid(_)), "{e}");
    assert_healthy(&pool, "upgraded");
    drop(pool);
    let pool = Pool::open_on(Arc::new(CrashMedium::from_image(m.durable_image()))).unwrap();
    assert_reads(&pool, "a", 2, "reopened");
    assert_reads(&pool, "b", 3, "reopened");
}

/// The upgrade 8 -> 9 at every persist point: the pool is version 8 or 9, never damaged, "a"
/// reads as written, and the next open finishes a cut-off upgrade.
#[test]
fn the_upgrade_to_9_at_every_persist_point() {
    let base = version_8_image();
    let points = explore(
        &base,
        1,
        0xae915,
        |m| Pool::open_on(m.clone()).map(|_| ()),
        |cp| {
            let ctx = format!("point {} variant {}", cp.point, cp.variant);
            let m = Arc::new(CrashMedium::from_image(cp.image.clone()));
            let pool = Pool::open_on(m).unwrap_or_else(|e| panic!("{ctx}: {e}"));
            assert_eq!(pool.superblock().version, 9, "{ctx}");
            assert_reads(&pool, "a", 1, &ctx);
            assert_eq!(pool.info("a").unwrap().scheme, Scheme::SECURE_GCM.code());
            pool.pcreate_with("b", 4096, KEY, Some(Scheme::SECURE_AEGIS))
                .unwrap_or_else(|e| panic!("{ctx}: {e}"));
            assert_healthy(&pool, &ctx);
        },
    );
    assert!(points >= 2, "only {points} persist points");
}

/// A pool whose default scheme was `secure:gcm` (any pool made before AEGIS-256X4 became the
/// default) may switch to `secure:aegis`: new PMOs then take it, PMOs created before keep
/// theirs.
#[test]
fn aegis_as_a_pools_default_scheme() {
    let m = Arc::new(CrashMedium::new(2 << 20));
    let pool = Pool::create_on(m.clone(), &opts(Scheme::SECURE_GCM)).unwrap();
    pool.pcreate("gcm", PAGES * 4096, KEY).unwrap();
    pool.set_default_scheme(Scheme::SECURE_AEGIS).unwrap();
    pool.pcreate("new", PAGES * 4096, KEY).unwrap();
    assert_eq!(pool.info("gcm").unwrap().scheme, Scheme::SECURE_GCM.code());
    assert_eq!(
        pool.info("new").unwrap().scheme,
        Scheme::SECURE_AEGIS.code()
    );
    write(&pool, "gcm", 4);
    write(&pool, "new", 5);
    drop(pool);
    let pool = Pool::open_on(Arc::new(CrashMedium::from_image(m.durable_image()))).unwrap();
    assert_eq!(pool.default_scheme().unwrap(), Scheme::SECURE_AEGIS);
    assert_reads(&pool, "gcm", 4, "gcm");
    assert_reads(&pool, "new", 5, "aegis");
}

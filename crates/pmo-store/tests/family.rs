//! Key families (`docs/security.md` "Key families", format version 7): PMOs created with
//! `Pool::pcreate_in_family` share one Argon2id per process and key, and otherwise behave as
//! any PMO: their pages round-trip under every scheme, a wrong key is refused, a resize and a
//! rekey keep them openable (a rekey leaves the family), a destroy shreds their own salt, and a
//! power cut at every persist point of their creation leaves no PMO or the whole one.
//!
//! One test function in this file, so that no other test of the process runs Argon2id while it
//! counts derivations.

use std::sync::Arc;

use pmo_medium::crash::{explore, CrashMedium};
use pmo_store::keys::argon2_derivations;
use pmo_store::resize::ResizeOptions;
use pmo_store::{KdfParams, Perm, Pool, PoolOptions, Scheme, StoreError};

const KEY: &[u8] = b"family-key";

fn pool(scheme: Scheme) -> Pool {
    Pool::create_on(
        Arc::new(CrashMedium::new(4 << 20)),
        &PoolOptions {
            kdf: KdfParams::INSECURE_FAST,
            ns_capacity: Some(32),
            base_addr: Some(0x2000_0000_0000),
            medium: None,
            preallocate: false,
            scheme,
        },
    )
    .unwrap()
}

fn page(tag: u8, p: u64) -> [u8; 4096] {
    let mut b = [tag; 4096];
    b[0] = p as u8;
    b
}

fn write(pool: &Pool, name: &str, key: &[u8], tag: u8, pages: u64) {
    let h = pool.open_pmo(name, Perm::Write, key, None).unwrap();
    let data: Vec<[u8; 4096]> = (0..pages).map(|p| page(tag, p)).collect();
    let list: Vec<(u64, &[u8; 4096])> = (0..pages).zip(data.iter()).collect();
    h.commit_pages(&list).unwrap();
}

fn assert_reads(pool: &Pool, name: &str, key: &[u8], tag: u8, pages: u64, ctx: &str) {
    let h = pool
        .open_pmo(name, Perm::Read, key, None)
        .unwrap_or_else(|e| panic!("{ctx}: open '{name}': {e}"));
    let mut buf = [0u8; 4096];
    for p in 0..pages {
        h.read_page(p, &mut buf).unwrap();
        assert!(buf == page(tag, p), "{ctx}: '{name}' page {p} differs");
    }
}

fn image_of(pool: &Pool) -> Vec<u8> {
    let m = pool.medium();
    let mut b = vec![0u8; m.len() as usize];
    m.read(0, &mut b).unwrap();
    b
}

#[test]
fn key_families() {
    for name in ["none", "secure", "sp-ip", "wedi"] {
        let scheme = Scheme::from_name(name).unwrap();
        let pool = pool(scheme);
        let family = pool.family_salt(b"test");
        assert_ne!(family, pool.family_salt(b"other"));

        // The first member runs one Argon2id; twenty more, their writes and reads, none.
        pool.pcreate_in_family("m0", 2 * 4096, KEY, None, &family)
            .unwrap();
        let before = argon2_derivations();
        for i in 1..=20 {
            let n = format!("m{i}");
            pool.pcreate_in_family(&n, 2 * 4096, KEY, None, &family)
                .unwrap();
            write(&pool, &n, KEY, i as u8, 2);
            assert_reads(&pool, &n, KEY, i as u8, 2, name);
        }
        assert_eq!(argon2_derivations(), before, "{name}: members ran Argon2id");
        // An ordinary PMO still runs its own.
        pool.pcreate("plain", 4096, KEY).unwrap();
        assert_eq!(argon2_derivations(), before + 1, "{name}");

        // A wrong key is refused (and runs its own Argon2id of the family stage).
        assert!(
            matches!(
                pool.open_pmo("m1", Perm::Read, b"not-the-key", None),
                Err(StoreError::WrongKey(_))
            ),
            "{name}: wrong key"
        );

        // Reopened from the medium: every member reads back.
        let reopened = Pool::open_on(Arc::new(CrashMedium::from_image(image_of(&pool)))).unwrap();
        for i in 1..=20u8 {
            assert_reads(&reopened, &format!("m{i}"), KEY, i, 2, name);
        }
        drop(reopened);

        // A resize keeps the PMO in its family and openable.
        {
            pool.resize("m2", 4 * 4096, KEY, ResizeOptions::default())
                .unwrap_or_else(|e| panic!("{name}: resize: {e}"));
            assert_reads(&pool, "m2", KEY, 2, 2, &format!("{name} resized"));
        }

        // A rekey leaves the family: the new key opens it, the old one no longer does, and
        // the other members are untouched.
        pool.rekey("m3", KEY, b"new-key").unwrap();
        assert_reads(&pool, "m3", b"new-key", 3, 2, &format!("{name} rekeyed"));
        assert!(pool.open_pmo("m3", Perm::Read, KEY, None).is_err());
        assert_reads(&pool, "m4", KEY, 4, 2, name);

        // A destroy shreds the member's own salt: with the key and the family (public, in the
        // other members' entries) nothing of it derives again.
        let extent = pool.info("m5").unwrap().extent_off;
        let e = pmo_store::lifecycle::header_copy(&**pool.medium(), extent)
            .unwrap()
            .unwrap();
        assert_eq!(e.family, family);
        assert!(image_of(&pool).windows(32).any(|w| w == e.salt));
        pool.pdestroy("m5", KEY).unwrap();
        assert!(
            !image_of(&pool).windows(32).any(|w| w == e.salt),
            "{name}: salt left"
        );
    }

    // A power cut at every persist point of a member's creation: no PMO, or the whole one,
    // which opens with the key and reads as written.
    let pool = pool(Scheme::from_name("secure").unwrap());
    let family = pool.family_salt(b"crash");
    pool.pcreate_in_family("first", 4096, KEY, None, &family)
        .unwrap();
    let base = image_of(&pool);
    drop(pool);
    let (mut absent, mut present) = (0, 0);
    explore(
        &base,
        3,
        0xfa,
        |m| {
            let pool = Pool::open_on(m.clone())?;
            pool.pcreate_in_family("second", 2 * 4096, KEY, None, &family)?;
            let h = pool.open_pmo("second", Perm::Write, KEY, None)?;
            h.commit_pages(&[(0, &page(7, 0)), (1, &page(7, 1))])
        },
        |cp| {
            let ctx = format!("point {} variant {}", cp.point, cp.variant);
            let pool = Pool::open_on(Arc::new(CrashMedium::from_image(cp.image.clone())))
                .unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
            assert_reads(&pool, "first", KEY, 0, 0, &ctx);
            if pool.exists("second").unwrap() {
                present += 1;
                let h = pool
                    .open_pmo("second", Perm::Read, KEY, None)
                    .unwrap_or_else(|e| panic!("{ctx}: open: {e}"));
                let mut buf = [0u8; 4096];
                h.read_page(0, &mut buf).unwrap();
                assert!(
                    buf == [0; 4096] || buf == page(7, 0),
                    "{ctx}: page 0 neither empty nor written"
                );
            } else {
                absent += 1;
            }
        },
    );
    assert!(absent > 0 && present > 0, "{absent} / {present}");
}

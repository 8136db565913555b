//! Rename and rekey (`docs/lifecycle.md`): power is cut at every persist point of each, under
//! every scheme; the reopened pool holds the PMO under exactly one name (or key), its pages as
//! before, the header page's entry copy in step, nothing leaked and no plaintext on the medium.

use std::sync::Arc;

use pmo_medium::crash::{explore, CrashMedium};
use pmo_store::{KdfParams, Perm, Pool, PoolOptions, Scheme, StoreError};

mod common;
/// Plaintext a protected image must not hold: the filler byte of the test pages.
const FILLERS: &[u8] = &[0xC3];
use common::assert_healthy_with_header_copies as assert_healthy;

const KEY: &[u8] = b"life-key";
const NEW_KEY: &[u8] = b"life-key-2";
const PAGES: u64 = 4;

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
    ["none", "secure", "sp-ip", "sp-id", "wedi", "bp"]
        .iter()
        .map(|n| Scheme::from_name(n).unwrap())
        .collect()
}

fn page(p: u64) -> [u8; 4096] {
    let mut b = [0xC3u8; 4096];
    b[0] = p as u8;
    b
}

/// A pool with PMO "a" (every page written and psynced) and PMO "b".
fn base_image(scheme: Scheme) -> Vec<u8> {
    let m = Arc::new(CrashMedium::new(2 << 20));
    let pool = Pool::create_on(m.clone(), &opts(scheme)).unwrap();
    pool.pcreate("a", PAGES * 4096, KEY).unwrap();
    pool.pcreate("b", 2 * 4096, KEY).unwrap();
    let h = pool.open_pmo("a", Perm::Write, KEY, None).unwrap();
    let pages: Vec<[u8; 4096]> = (0..PAGES).map(page).collect();
    let list: Vec<(u64, &[u8; 4096])> = (0..PAGES).zip(pages.iter()).collect();
    h.commit_pages(&list).unwrap();
    drop(h);
    m.durable_image()
}

/// PMO `name` opens with `key` and holds the pages of [`base_image`].
fn assert_pages(pool: &Pool, name: &str, key: &[u8], ctx: &str) {
    let h = pool
        .open_pmo(name, Perm::Read, key, None)
        .unwrap_or_else(|e| panic!("{ctx}: open '{name}': {e}"));
    let mut buf = [0u8; 4096];
    for p in 0..PAGES {
        h.read_page(p, &mut buf).unwrap();
        assert!(buf == page(p), "{ctx}: page {p} changed");
    }
}

/// The whole medium of an open pool.
fn image_of(pool: &Pool) -> Vec<u8> {
    let m = pool.medium();
    let mut b = vec![0u8; m.len() as usize];
    m.read(0, &mut b).unwrap();
    b
}

#[test]
fn destroy_shreds_the_salt_so_no_key_rederives_anything() {
    for scheme in schemes() {
        let pool = Pool::open_on(Arc::new(CrashMedium::from_image(base_image(scheme)))).unwrap();
        let info = pool.info("a").unwrap();
        let e = pmo_store::lifecycle::header_copy(&**pool.medium(), info.extent_off)
            .unwrap()
            .unwrap();
        assert!(image_of(&pool).windows(32).any(|w| w == e.salt));
        pool.pdestroy("a", KEY).unwrap();
        let img = image_of(&pool);
        assert!(!img.windows(32).any(|w| w == e.salt), "{scheme}: salt left");
        assert!(
            !img.windows(32).any(|w| w == e.verifier),
            "{scheme}: verifier left"
        );
    }
}

/// Every copy of a rekeyed PMO's key material (both namespace copies, the header-page copy;
/// the journal and the data hold none): salt, verifier, wrapped data key, and the salt the
/// rekey replaced. After a destroy, at every persist point once the pool is reopened, none of
/// it is anywhere on the medium if the PMO is gone, so no key derives or unwraps anything.
#[test]
fn destroy_at_every_persist_point_leaves_no_key_material_of_a_rekeyed_pmo() {
    for scheme in schemes() {
        let pool = Pool::open_on(Arc::new(CrashMedium::from_image(base_image(scheme)))).unwrap();
        let extent = pool.info("a").unwrap().extent_off;
        let copy = |pool: &Pool| {
            pmo_store::lifecycle::header_copy(&**pool.medium(), extent)
                .unwrap()
                .unwrap()
        };
        let old_salt = copy(&pool).salt;
        pool.rekey("a", KEY, NEW_KEY).unwrap();
        let e = copy(&pool);
        let base = image_of(&pool);
        assert!(
            base.windows(40).any(|w| w == e.wrapped),
            "{scheme}: no wrapped key"
        );
        assert!(
            !base.windows(32).any(|w| w == old_salt),
            "{scheme}: rekey left the old salt"
        );
        drop(pool);
        let (mut gone, mut kept) = (0, 0);
        explore(
            &base,
            3,
            0x5d,
            |m| Pool::open_on(m.clone())?.pdestroy("a", NEW_KEY),
            |cp| {
                let ctx = format!(
                    "{scheme}: destroy point {} variant {}",
                    cp.point, cp.variant
                );
                let pool = Pool::open_on(Arc::new(CrashMedium::from_image(cp.image.clone())))
                    .unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
                if pool.exists("a").unwrap() {
                    kept += 1;
                    assert_pages(&pool, "a", NEW_KEY, &ctx);
                } else {
                    gone += 1;
                    let img = image_of(&pool);
                    for (what, bytes) in [
                        ("salt", &e.salt[..]),
                        ("verifier", &e.verifier[..]),
                        ("wrapped key", &e.wrapped[..]),
                        ("old salt", &old_salt[..]),
                    ] {
                        assert!(
                            !img.windows(bytes.len()).any(|w| w == bytes),
                            "{ctx}: the {what} is left on the medium"
                        );
                    }
                    assert!(matches!(pool.info("a"), Err(StoreError::NotFound(_))));
                }
                assert_healthy(&pool, &ctx);
            },
        );
        assert!(gone > 0 && kept > 0, "{scheme}: gone {gone} kept {kept}");
    }
}

#[test]
fn rename_is_atomic_at_every_persist_point() {
    for scheme in schemes() {
        let base = base_image(scheme);
        let (mut old, mut new) = (0, 0);
        let points = explore(
            &base,
            3,
            0x14,
            |m| Pool::open_on(m.clone())?.rename("a", "renamed", KEY),
            |cp| {
                let ctx = format!("{scheme}: rename point {} variant {}", cp.point, cp.variant);
                common::assert_no_plaintext(&cp.image, scheme, FILLERS, &ctx);
                let pool = Pool::open_on(Arc::new(CrashMedium::from_image(cp.image.clone())))
                    .unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
                let (a, r) = (pool.exists("a").unwrap(), pool.exists("renamed").unwrap());
                assert!(a != r, "{ctx}: a {a} renamed {r}");
                if cp.completed {
                    assert!(r, "{ctx}: a completed rename was lost");
                }
                if r {
                    new += 1;
                } else {
                    old += 1;
                }
                assert_pages(&pool, if r { "renamed" } else { "a" }, KEY, &ctx);
                assert_eq!(pool.list().unwrap().len(), 2, "{ctx}");
                assert_healthy(&pool, &ctx);
            },
        );
        assert!(points >= 3, "{scheme}: {points} persist points");
        assert!(old > 0 && new > 0, "{scheme}: old {old} new {new}");
    }
}

#[test]
fn rename_refuses_what_it_must() {
    let m = Arc::new(CrashMedium::from_image(base_image(
        Scheme::from_name("secure").unwrap(),
    )));
    let pool = Pool::open_on(m).unwrap();
    assert!(matches!(
        pool.rename("a", "b", KEY),
        Err(StoreError::Exists(_))
    ));
    assert!(matches!(
        pool.rename("nope", "c", KEY),
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        pool.rename("a", "c", b"wrong"),
        Err(StoreError::WrongKey(_))
    ));
    assert!(matches!(
        pool.rename("a", "x/y", KEY),
        Err(StoreError::Invalid(_))
    ));
    let h = pool.open_pmo("a", Perm::Read, KEY, None).unwrap();
    assert!(matches!(
        pool.rename("a", "c", KEY),
        Err(StoreError::Busy { .. })
    ));
    drop(h);
    pool.rename("a", "c", KEY).unwrap();
    assert!(!pool.exists("a").unwrap());
    assert_pages(&pool, "c", KEY, "renamed");
    // Renaming back and forth never leaks a slot.
    for i in 0..40 {
        let (from, to) = if i % 2 == 0 { ("c", "d") } else { ("d", "c") };
        pool.rename(from, to, KEY).unwrap();
    }
    assert_healthy(&pool, "after 40 renames");
}

#[test]
fn rekey_is_atomic_at_every_persist_point() {
    for scheme in schemes() {
        let base = base_image(scheme);
        let old_salt = {
            let pool = Pool::open_on(Arc::new(CrashMedium::from_image(base.clone()))).unwrap();
            let info = pool.info("a").unwrap();
            pmo_store::lifecycle::header_copy(&**pool.medium(), info.extent_off)
                .unwrap()
                .unwrap()
                .salt
        };
        let (mut old, mut new) = (0, 0);
        explore(
            &base,
            3,
            0x15,
            |m| Pool::open_on(m.clone())?.rekey("a", KEY, NEW_KEY),
            |cp| {
                let ctx = format!("{scheme}: rekey point {} variant {}", cp.point, cp.variant);
                common::assert_no_plaintext(&cp.image, scheme, FILLERS, &ctx);
                let pool = Pool::open_on(Arc::new(CrashMedium::from_image(cp.image.clone())))
                    .unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
                let o = pool.check_key("a", KEY).is_ok();
                let n = pool.check_key("a", NEW_KEY).is_ok();
                assert!(o != n, "{ctx}: old key {o}, new key {n}");
                if cp.completed {
                    assert!(n, "{ctx}: a completed rekey was lost");
                }
                if n {
                    new += 1;
                } else {
                    old += 1;
                }
                assert_pages(&pool, "a", if n { NEW_KEY } else { KEY }, &ctx);
                assert_healthy(&pool, &ctx);
                if n {
                    // Recovery shredded what a cut-off rekey left: the old salt is gone.
                    let img = image_of(&pool);
                    assert!(
                        !img.windows(32).any(|w| w == old_salt),
                        "{ctx}: old salt left"
                    );
                }
            },
        );
        assert!(old > 0 && new > 0, "{scheme}: old {old} new {new}");
    }
}

#[test]
fn rekey_rewraps_and_refuses_what_it_must() {
    for scheme in schemes() {
        let m = Arc::new(CrashMedium::from_image(base_image(scheme)));
        let pool = Pool::open_on(m.clone()).unwrap();
        let before = m.durable_image();
        assert!(matches!(
            pool.rekey("a", b"wrong", NEW_KEY),
            Err(StoreError::WrongKey(_))
        ));
        assert!(matches!(
            pool.rekey("a", KEY, b""),
            Err(StoreError::Invalid(_))
        ));
        let h = pool.open_pmo("a", Perm::Read, KEY, None).unwrap();
        assert!(matches!(
            pool.rekey("a", KEY, NEW_KEY),
            Err(StoreError::Busy { .. })
        ));
        drop(h);
        pool.rekey("a", KEY, NEW_KEY).unwrap();
        // No page of the PMO was rewritten: only the namespace and the header page changed.
        let after = m.durable_image();
        let info = pool.info("a").unwrap();
        let data = (info.extent_off + 4096) as usize..(info.extent_off + info.extent_len) as usize;
        assert!(
            before[data.clone()] == after[data],
            "{scheme}: pages changed"
        );
        assert!(matches!(
            pool.check_key("a", KEY),
            Err(StoreError::WrongKey(_))
        ));
        assert_pages(&pool, "a", NEW_KEY, &format!("{scheme}: rekeyed"));
        // A second rekey re-wraps the same data key again; a write under it reads back.
        pool.rekey("a", NEW_KEY, b"third").unwrap();
        assert!(pool.check_key("a", NEW_KEY).is_err());
        let h = pool.open_pmo("a", Perm::Write, b"third", None).unwrap();
        h.write_at(0, b"after").unwrap();
        drop(h);
        let pool = Pool::open_on(Arc::new(CrashMedium::from_image(m.durable_image()))).unwrap();
        let h = pool.open_pmo("a", Perm::Read, b"third", None).unwrap();
        let mut b = [0u8; 5];
        h.read_at(0, &mut b).unwrap();
        assert_eq!(&b, b"after");
        drop(h);
        assert_healthy(&pool, "rekeyed twice");
    }
}

#[test]
fn an_altered_wrapped_key_is_corruption_not_a_wrong_key() {
    let scheme = Scheme::from_name("secure").unwrap();
    let m = Arc::new(CrashMedium::from_image(base_image(scheme)));
    let pool = Pool::open_on(m.clone()).unwrap();
    pool.rekey("a", KEY, NEW_KEY).unwrap();
    drop(pool);
    // Flip one byte of the wrapped key (entry offset 428) in both namespace copies; the CRC is
    // recomputed, as an attacker would.
    let mut img = m.durable_image();
    let pool = Pool::open_on(Arc::new(CrashMedium::from_image(img.clone()))).unwrap();
    let sb = pool.superblock().clone();
    drop(pool);
    let mut hit = 0;
    for base in [sb.ns_offset, sb.ns_mirror] {
        for i in 0..sb.ns_capacity as usize {
            let off = base as usize + i * 512;
            let slot = &mut img[off..off + 512];
            if let Ok(Some(mut e)) = pmo_format::Entry::decode(slot) {
                e.wrapped[3] ^= 1;
                slot.copy_from_slice(&e.encode());
                hit += 1;
            }
        }
    }
    assert!(hit >= 2);
    let pool = Pool::open_on(Arc::new(CrashMedium::from_image(img))).unwrap();
    let r = pool.open_pmo("a", Perm::Read, NEW_KEY, None).map(|_| ());
    assert!(matches!(r, Err(StoreError::Corrupt(_))), "{r:?}");
}

/// A snapshot (or import) into `x` works under the temporary name `x.partial`. When a PMO of
/// that name exists (the user's own, or one a crash left), it is refused with a message that
/// names the temporary name and what to do, and neither PMO is touched.
#[test]
fn a_taken_temporary_name_is_refused_clearly_and_loses_nothing() {
    let pool = Pool::open_on(Arc::new(CrashMedium::from_image(base_image(
        Scheme::SECURE,
    ))))
    .unwrap();
    pool.pcreate("x.partial", 4096, KEY).unwrap();
    let before = format!("{:?}", pool.info("x.partial").unwrap());
    let err = pool
        .snapshot("a", "x", KEY, None, &mut |_, _| {})
        .unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, StoreError::Invalid(_)), "{err:?}");
    assert!(
        msg.contains("'x.partial'") && msg.contains("destroy or rename"),
        "{msg}"
    );
    assert!(!pool.exists("x").unwrap());
    assert_eq!(format!("{:?}", pool.info("x.partial").unwrap()), before);
    assert_pages(&pool, "a", KEY, "source after the refused snapshot");
}

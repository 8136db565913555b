//! Grow and shrink a PMO, grow a pool (`docs/lifecycle.md`, "Resize"): every scheme and
//! placement keeps its pages across a resize; power is cut at every persist point of a grow, a
//! forced shrink and a pool grow, and the reopened pool holds the PMO as before or as after,
//! never a mix, with nothing leaked and no plaintext on the medium; bad input loses nothing.

use std::sync::Arc;

use pmo_medium::crash::{explore, CrashMedium};
use pmo_store::{KdfParams, Perm, Pool, PoolOptions, ResizeOptions, Scheme, StoreError};

mod common;
/// Plaintext a protected image must not hold: the filler byte of the test pages.
const FILLERS: &[u8] = &[0xC3];
use common::assert_healthy_with_header_copies as assert_healthy;

const KEY: &[u8] = b"resize-key";
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

fn page(p: u64) -> [u8; 4096] {
    let mut b = [0xC3u8; 4096];
    b[0] = p as u8;
    b
}

/// Every scheme and placement this build can create.
fn every_scheme() -> Vec<Scheme> {
    Scheme::all_placements()
        .filter(|&s| {
            let pool = Pool::create_on(Arc::new(CrashMedium::new(2 << 20)), &opts(s)).unwrap();
            pool.pcreate("probe", 4096, KEY).is_ok()
        })
        .collect()
}

/// The schemes the crash simulation cuts power under (one per cipher, integrity timing and
/// placement).
fn crash_schemes() -> Vec<Scheme> {
    [
        "none",
        "secure",
        "sp-ip",
        "sp-id",
        "wedi",
        "bp",
        "secure:medium",
        "bp-ip:medium",
    ]
    .iter()
    .map(|n| Scheme::from_name(n).unwrap())
    .collect()
}

/// A pool of `len` bytes with PMO "a" (PAGES pages, every one written and psynced) and "b".
fn base_image(scheme: Scheme, len: u64) -> Vec<u8> {
    base_image_max(scheme, len, 0)
}

/// [`base_image`] with "a" laid out for `max` pages (0: its size).
fn base_image_max(scheme: Scheme, len: u64, max: u64) -> Vec<u8> {
    let m = Arc::new(CrashMedium::new(len));
    let pool = Pool::create_on(m.clone(), &opts(scheme)).unwrap();
    pool.pcreate_max("a", PAGES * 4096, max * 4096, KEY, None)
        .unwrap();
    pool.pcreate("b", 2 * 4096, KEY).unwrap();
    let h = pool.open_pmo("a", Perm::Write, KEY, None).unwrap();
    let pages: Vec<[u8; 4096]> = (0..PAGES).map(page).collect();
    let list: Vec<(u64, &[u8; 4096])> = (0..PAGES).zip(pages.iter()).collect();
    h.commit_pages(&list).unwrap();
    drop(h);
    m.durable_image()
}

/// PMO "a" opens with KEY, is `pages` pages long, holds `page(p)` for p < `data` and zeros after.
fn assert_pmo(pool: &Pool, pages: u64, data: u64, ctx: &str) {
    let h = pool
        .open_pmo("a", Perm::Read, KEY, None)
        .unwrap_or_else(|e| panic!("{ctx}: open: {e}"));
    assert_eq!(h.size(), pages * 4096, "{ctx}: size");
    let mut buf = [0u8; 4096];
    for p in 0..pages {
        h.read_page(p, &mut buf)
            .unwrap_or_else(|e| panic!("{ctx}: page {p}: {e}"));
        if p < data {
            assert!(buf == page(p), "{ctx}: page {p} changed");
        } else {
            assert!(buf.iter().all(|&b| b == 0), "{ctx}: page {p} is not zero");
        }
    }
}

fn resize(pool: &Pool, pages: u64, force: bool) -> pmo_store::Result<pmo_store::ResizeReport> {
    pool.resize(
        "a",
        pages * 4096,
        KEY,
        ResizeOptions {
            force,
            progress: None,
        },
    )
}

/// Write page `p` = `page(p)` and check a later reopen sees it: the new extent commits.
fn write_page(pool: &Pool, p: u64) {
    write_page_of(pool, "a", p)
}

#[test]
fn grow_and_shrink_keep_the_pages_under_every_scheme() {
    let schemes = every_scheme();
    assert!(schemes.len() >= 16, "only {} schemes", schemes.len());
    for scheme in schemes {
        let ctx = scheme.to_string();
        let m = Arc::new(CrashMedium::from_image(base_image(scheme, 4 << 20)));
        let pool = Pool::open_on(m.clone()).unwrap();
        let before = pool.info("a").unwrap();
        let r = resize(&pool, 3 * PAGES, false).unwrap();
        assert_eq!(r.pages_copied, PAGES, "{ctx}");
        assert!(r.address_kept, "{ctx}: a grow moved the stable address");
        assert_eq!(r.info.base_addr, before.base_addr, "{ctx}");
        assert_pmo(&pool, 3 * PAGES, PAGES, &ctx);
        // The grown PMO commits (new pages and old), and survives a reopen.
        write_page(&pool, PAGES);
        write_page(&pool, 0);
        let pool = Pool::open_on(Arc::new(CrashMedium::from_image(m.durable_image()))).unwrap();
        assert_pmo(&pool, 3 * PAGES, PAGES + 1, &format!("{ctx} reopened"));
        // Shrinking over data is refused and loses nothing; over zeros it is not.
        let e = resize(&pool, PAGES, false).unwrap_err();
        assert!(
            matches!(&e, StoreError::Invalid(m) if m.contains("holds data") && m.contains("page 4")),
            "{ctx}: {e}"
        );
        assert_pmo(&pool, 3 * PAGES, PAGES + 1, &ctx);
        resize(&pool, PAGES + 1, false).unwrap();
        assert_pmo(&pool, PAGES + 1, PAGES + 1, &ctx);
        // A forced shrink drops the pages past the end, and what they held (in place, or in
        // the extent a move leaves, `wedi`); growing back shows zeros there.
        let at = slot_offsets(&pool, scheme, 3);
        let held = bytes_at(&pool, at);
        let r = resize(&pool, 2, true).unwrap();
        assert_eq!(r.pages_dropped, PAGES - 1, "{ctx}");
        assert_eq!(r.in_place, !scheme.whole_checksum(), "{ctx}");
        assert_overwritten(&held, &bytes_at(&pool, at), &ctx);
        resize(&pool, PAGES, false).unwrap();
        assert_pmo(&pool, PAGES, 2, &ctx);
        // The other PMO is untouched; the key still works, a wrong one does not.
        assert!(matches!(
            pool.open_pmo("a", Perm::Read, b"wrong", None),
            Err(StoreError::WrongKey(_))
        ));
        assert_eq!(pool.info("b").unwrap().size, 2 * 4096);
        assert_healthy(&pool, &ctx);
        common::assert_no_plaintext(&m.durable_image(), scheme, FILLERS, &ctx);
    }
}

#[test]
fn a_rekeyed_pmo_resizes_under_its_new_key() {
    let m = Arc::new(CrashMedium::from_image(base_image(Scheme::SECURE, 4 << 20)));
    let pool = Pool::open_on(m).unwrap();
    pool.rekey("a", KEY, b"second").unwrap();
    pool.resize("a", 8 * 4096, b"second", ResizeOptions::default())
        .unwrap();
    assert!(matches!(
        pool.resize("a", 9 * 4096, KEY, ResizeOptions::default()),
        Err(StoreError::WrongKey(_))
    ));
    let h = pool.open_pmo("a", Perm::Read, b"second", None).unwrap();
    let mut buf = [0u8; 4096];
    h.read_page(1, &mut buf).unwrap();
    assert!(buf == page(1));
}

#[test]
fn bad_input_is_refused_and_loses_nothing() {
    let m = Arc::new(CrashMedium::from_image(base_image(Scheme::SECURE, 2 << 20)));
    let pool = Pool::open_on(m).unwrap();
    let free = pool.pool_info().unwrap().free_bytes;
    // Size 0, unknown PMO, wrong key.
    assert!(matches!(
        resize(&pool, 0, false),
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(
        pool.resize("nope", 4096, KEY, ResizeOptions::default()),
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        pool.resize("a", 8192, b"wrong", ResizeOptions::default()),
        Err(StoreError::WrongKey(_))
    ));
    // Grow past the pool's space: a clear error naming the sizes.
    let e = resize(&pool, 1 << 20, false).unwrap_err();
    assert!(
        matches!(&e, StoreError::NoSpace(m) if m.contains("largest free extent")),
        "{e}"
    );
    // Attached: busy.
    let h = pool.open_pmo("a", Perm::Read, KEY, None).unwrap();
    assert!(matches!(
        resize(&pool, 8, false),
        Err(StoreError::Busy { .. })
    ));
    drop(h);
    // Fill the pool, then grow: refused, nothing lost.
    let mut n = 0;
    while pool.pcreate(&format!("fill{n}"), 64 << 10, KEY).is_ok() {
        n += 1;
    }
    assert!(n > 0);
    assert!(matches!(
        resize(&pool, 64, false),
        Err(StoreError::NoSpace(_))
    ));
    assert_pmo(&pool, PAGES, PAGES, "full pool");
    for i in 0..n {
        pool.pdestroy(&format!("fill{i}"), KEY).unwrap();
    }
    assert_eq!(pool.pool_info().unwrap().free_bytes, free);
    assert_healthy(&pool, "after bad input");
}

/// Power cut at every persist point of `op` (on PMO "a" of [`base_image`]): "a" reads as
/// before (`PAGES` pages) or as after (`after` pages, holding `kept` of the old pages).
fn crash_every_point(scheme: Scheme, what: &str, after: u64, kept: u64, op: fn(&Pool)) {
    crash_every_point_max(scheme, what, after, kept, 0, op)
}

/// [`crash_every_point`] with "a" laid out for `max` pages; after a shrink cut off at any
/// point, growing "a" back to `PAGES` shows zeros past the pages kept.
fn crash_every_point_max(
    scheme: Scheme,
    what: &str,
    after: u64,
    kept: u64,
    max: u64,
    op: fn(&Pool),
) {
    let base = base_image_max(scheme, 2 << 20, max);
    let (mut old, mut new) = (0, 0);
    explore(
        &base,
        2,
        0x14a,
        |m| {
            if let Ok(pool) = Pool::open_on(m.clone()) {
                op(&pool);
            }
        },
        |cp| {
            let ctx = format!("{scheme}: {what} point {} variant {}", cp.point, cp.variant);
            common::assert_no_plaintext(&cp.image, scheme, FILLERS, &ctx);
            let m = Arc::new(CrashMedium::from_image(cp.image.clone()));
            let pool = Pool::open_on(m.clone()).unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
            let size = pool.info("a").unwrap().size / 4096;
            if cp.completed {
                assert_eq!(size, after, "{ctx}: a completed {what} was lost");
            }
            if size == PAGES {
                old += 1;
                assert_pmo(&pool, PAGES, PAGES, &ctx);
            } else {
                assert_eq!(size, after, "{ctx}: size");
                new += 1;
                assert_pmo(&pool, after, kept, &ctx);
            }
            assert_healthy(&pool, &ctx);
            if size < PAGES {
                let m2 = Arc::new(CrashMedium::from_image(m.durable_image()));
                let grown = Pool::open_on(m2).unwrap();
                resize(&grown, PAGES, false).unwrap_or_else(|e| panic!("{ctx}: grow back: {e}"));
                assert_pmo(&grown, PAGES, kept, &format!("{ctx}, grown back"));
                assert_healthy(&grown, &ctx);
            }
            // The PMO commits again after the crash, and no page version repeats: the
            // committed page reads back after another reopen.
            let p = size - 1;
            write_page(&pool, p);
            let pool = Pool::open_on(Arc::new(CrashMedium::from_image(m.durable_image())))
                .unwrap_or_else(|e| panic!("{ctx}: second reopen: {e}"));
            let h = pool.open_pmo("a", Perm::Read, KEY, None).unwrap();
            let mut buf = [0u8; 4096];
            h.read_page(p, &mut buf).unwrap();
            assert!(buf == page(p), "{ctx}: a commit after recovery was lost");
        },
    );
    assert!(old > 0 && new > 0, "{scheme} {what}: old {old} new {new}");
}

#[test]
fn grow_is_atomic_at_every_persist_point() {
    for scheme in crash_schemes() {
        crash_every_point(scheme, "grow", 2 * PAGES + 1, PAGES, |pool| {
            let _ = resize(pool, 2 * PAGES + 1, false);
        });
    }
}

#[test]
fn forced_shrink_is_atomic_at_every_persist_point() {
    for scheme in crash_schemes() {
        crash_every_point(scheme, "shrink", 2, 2, |pool| {
            let _ = resize(pool, 2, true);
        });
    }
}

#[test]
fn pool_grow_is_atomic_at_every_persist_point() {
    for scheme in [Scheme::NONE, Scheme::SECURE] {
        // A 2 MiB pool at the start of a 4 MiB medium (the file already extended).
        let mut base = base_image(scheme, 2 << 20);
        base.resize(4 << 20, 0);
        let (mut old, mut new) = (0, 0);
        explore(
            &base,
            2,
            0x9001,
            |m| {
                if let Ok(pool) = Pool::open_on(m.clone()) {
                    let _ = pool.grow_on(4 << 20);
                }
            },
            |cp| {
                let ctx = format!(
                    "{scheme}: pool grow point {} variant {}",
                    cp.point, cp.variant
                );
                let pool = Pool::open_on(Arc::new(CrashMedium::from_image(cp.image.clone())))
                    .unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
                let size = pool.superblock().pool_size;
                if cp.completed {
                    assert_eq!(size, 4 << 20, "{ctx}: a completed grow was lost");
                }
                assert_pmo(&pool, PAGES, PAGES, &ctx);
                assert_healthy(&pool, &ctx);
                if size == 4 << 20 {
                    new += 1;
                    // The new space is usable: a PMO that only fits there, and a resize into it.
                    pool.pcreate("big", 1 << 20, KEY).unwrap();
                    resize(&pool, 64, false).unwrap();
                    assert_pmo(&pool, 64, PAGES, &ctx);
                } else {
                    assert_eq!(size, 2 << 20, "{ctx}");
                    old += 1;
                }
            },
        );
        assert!(old > 0 && new > 0, "{scheme}: old {old} new {new}");
    }
}

#[test]
fn pool_file_grows_and_refuses_to_shrink() {
    let path = std::env::temp_dir().join(format!("pmo-resize-{}.pool", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let pool = Pool::create(&path, 2 << 20, &opts(Scheme::SECURE)).unwrap();
    pool.pcreate("a", PAGES * 4096, KEY).unwrap();
    write_page(&pool, 1);
    assert!(matches!(
        resize(&pool, 256, false),
        Err(StoreError::NoSpace(_))
    ));
    drop(pool);
    assert!(matches!(
        Pool::grow_pool(&path, 1 << 20),
        Err(StoreError::Invalid(_))
    ));
    let pool = Pool::grow_pool(&path, 8 << 20).unwrap();
    assert_eq!(pool.superblock().pool_size, 8 << 20);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 8 << 20);
    resize(&pool, 256, false).unwrap();
    let h = pool.open_pmo("a", Perm::Read, KEY, None).unwrap();
    let mut buf = [0u8; 4096];
    h.read_page(1, &mut buf).unwrap();
    assert!(buf == page(1));
    drop(h);
    assert_healthy(&pool, "grown pool");
    drop(pool);
    std::fs::remove_file(&path).unwrap();
    // A pool allocated whole at creation is allocated whole after a grow.
    let mut o = opts(Scheme::SECURE);
    o.preallocate = true;
    drop(Pool::create(&path, 2 << 20, &o).unwrap());
    drop(Pool::grow_pool(&path, 4 << 20).unwrap());
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(&path).unwrap();
    assert!(meta.blocks() * 512 >= 4 << 20, "the grown part is sparse");
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_mapped_attach_after_a_grow_keeps_the_stable_address() {
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        std::path::PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    for scheme in ["secure", "sp-ip:medium"] {
        let scheme = Scheme::from_name(scheme).unwrap();
        let path = dir.join(format!("pmo-resize-map-{}.pool", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let mut o = opts(scheme);
        o.base_addr = None;
        let pool = Pool::create(&path, 8 << 20, &o).unwrap();
        pool.pcreate("a", 4096, KEY).unwrap();
        let a = pool.attach("a", Perm::Write, KEY).unwrap();
        let base = a.addr() as usize;
        a.write_at(100, b"before the grow").unwrap();
        a.psync().unwrap();
        drop(a);
        let r = pool
            .resize("a", 64 * 4096, KEY, ResizeOptions::default())
            .unwrap();
        assert!(r.address_kept);
        let a = pool.attach("a", Perm::Write, KEY).unwrap();
        assert_eq!(
            a.addr() as usize,
            base,
            "{scheme}: the stable address moved"
        );
        assert_eq!(a.len(), 64 * 4096);
        // SAFETY: inside the attached mapping of 64 pages.
        let (old, new) = unsafe {
            (
                std::slice::from_raw_parts(a.addr().add(100), 15).to_vec(),
                *a.addr().add(63 * 4096),
            )
        };
        assert_eq!(&old, b"before the grow", "{scheme}");
        assert_eq!(new, 0, "{scheme}");
        a.write_at(63 * 4096, b"after").unwrap();
        a.psync().unwrap();
        drop(a);
        // A PMO created in the space the old extent left has its own address range.
        pool.pcreate("c", 4096, KEY).unwrap();
        let c = pool.info("c").unwrap();
        let a = pool.info("a").unwrap();
        assert!(
            c.base_addr >= a.base_addr + a.size || c.base_addr + c.size <= a.base_addr,
            "{scheme}: address ranges overlap"
        );
        drop(pool);
        pmo_store::wait_for_background_detaches();
        std::fs::remove_file(&path).unwrap();
    }
}

/// The version of page `p` of PMO "a" as its page map on the medium holds it.
fn version_of(pool: &Pool, scheme: Scheme, p: u64) -> u64 {
    let info = pool.info("a").unwrap();
    let layout = pmo_format::PmoLayout::with_plain(
        info.size / 4096,
        scheme.tag_bytes() as u64,
        scheme.shadow == pmo_store::Shadow::Medium,
    )
    .unwrap();
    let mut b = [0u8; 8];
    pool.medium()
        .read(info.extent_off + layout.map_entry(p), &mut b)
        .unwrap();
    pmo_format::layout::PageMapEntry(u64::from_le_bytes(b)).version()
}

#[test]
fn no_page_version_repeats_after_a_resize() {
    // `secure` seals with AES-GCM under (page, version) nonces: the commit after a resize must
    // take versions above every one used before it, which the new reservation guarantees.
    let m = Arc::new(CrashMedium::from_image(base_image(Scheme::SECURE, 4 << 20)));
    let pool = Pool::open_on(m).unwrap();
    for _ in 0..3 {
        write_page(&pool, 0);
    }
    let before = version_of(&pool, Scheme::SECURE, 0);
    resize(&pool, 2 * PAGES, false).unwrap();
    assert_eq!(
        version_of(&pool, Scheme::SECURE, 0),
        before,
        "copied as stored"
    );
    write_page(&pool, 0);
    let after = version_of(&pool, Scheme::SECURE, 0);
    assert!(
        after > before + (1 << 16) - 8,
        "version {after} after the resize, {before} before: not above the old reservation"
    );
}

#[test]
fn growth_keeps_the_address_within_the_headroom_and_moves_it_only_when_taken() {
    let m = Arc::new(CrashMedium::from_image(base_image(Scheme::NONE, 4 << 20)));
    let pool = Pool::open_on(m).unwrap();
    let (a, b) = (pool.info("a").unwrap(), pool.info("b").unwrap());
    let headroom = pmo_store::resize::ADDRESS_HEADROOM;
    assert!(
        b.base_addr >= a.base_addr + headroom * a.size,
        "no headroom left after 'a'"
    );
    // Up to the headroom: the address stays.
    let r = resize(&pool, headroom * PAGES, false).unwrap();
    assert!(r.address_kept && r.info.base_addr == a.base_addr);
    // Past it, into 'b''s range: it moves, to a range that overlaps nobody's.
    let r = resize(&pool, 8 * PAGES, false).unwrap();
    assert!(!r.address_kept);
    let (a, b) = (r.info, pool.info("b").unwrap());
    assert!(a.base_addr >= b.base_addr + b.size || a.base_addr + a.size <= b.base_addr);
    assert_pmo(&pool, 8 * PAGES, PAGES, "moved");
    // Once 'b' is gone, a grow over its old range keeps the (new) address.
    pool.pdestroy("b", KEY).unwrap();
    let r = resize(&pool, 9 * PAGES, false).unwrap();
    assert!(r.address_kept);
}

#[test]
fn a_writer_grows_its_attached_pmo_and_goes_on_at_the_same_address() {
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        std::path::PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    for scheme in ["secure", "none", "bp-ip:medium"] {
        let scheme = Scheme::from_name(scheme).unwrap();
        let path = dir.join(format!("pmo-resize-live-{}.pool", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let pool = Pool::create(&path, 8 << 20, &opts(scheme)).unwrap();
        pool.pcreate("a", 4 * 4096, KEY).unwrap();
        pool.pcreate("b", 4096, KEY).unwrap();
        let a = pool.attach("a", Perm::Write, KEY).unwrap();
        let base = a.addr();
        a.write_at(3 * 4096, b"last page").unwrap();
        // Not yet psynced: the resize psyncs first.
        let opt = pmo_store::AttachOptions::default();
        let (a, r) = match a.resize(16 * 4096, KEY, opt, false) {
            Ok(x) => x,
            Err(e) => panic!("{scheme}: {e:?}"),
        };
        assert!(r.address_kept, "{scheme}");
        assert_eq!(a.addr(), base, "{scheme}: the address moved");
        assert_eq!(a.len(), 16 * 4096);
        // SAFETY: inside the attached mapping of 16 pages.
        let (kept, added) = unsafe {
            (
                std::slice::from_raw_parts(base.add(3 * 4096), 9).to_vec(),
                *base.add(15 * 4096),
            )
        };
        assert_eq!(&kept, b"last page", "{scheme}");
        assert_eq!(added, 0);
        a.write_at(15 * 4096, b"new").unwrap();
        // Refused while still attached: a shrink over data, a size the pool has no room for.
        let Err(e) = a.resize(4096, KEY, opt, false) else {
            panic!("{scheme}: a shrink over data went through")
        };
        assert!(matches!(e.error, StoreError::Invalid(_)), "{e:?}");
        let a = e.attachment.expect("still attached");
        let Err(e) = a.resize(4 << 20, KEY, opt, false) else {
            panic!("{scheme}: a resize past the pool's room went through")
        };
        assert!(matches!(e.error, StoreError::NoSpace(_)), "{e:?}");
        let a = e.attachment.expect("still attached");
        drop(a);
        let h = pool.open_pmo("a", Perm::Read, KEY, None).unwrap();
        let mut buf = [0u8; 4096];
        h.read_page(15, &mut buf).unwrap();
        assert_eq!(
            &buf[..3],
            b"new",
            "{scheme}: the psync of the failed resize"
        );
        drop(h);
        assert_healthy(&pool, &scheme.to_string());
        drop(pool);
        pmo_store::wait_for_background_detaches();
        std::fs::remove_file(&path).unwrap();
    }
}

/// Pages "a" is laid out for in the layout-capacity tests.
const MAX: u64 = 4 * PAGES;

/// Every scheme but `wedi` (whose whole-PMO checksum covers the size: no capacity).
fn capacity_schemes(all: Vec<Scheme>) -> Vec<Scheme> {
    all.into_iter().filter(|s| !s.whole_checksum()).collect()
}

/// Where both data slots of page `p` of "a" are on the medium now.
fn slot_offsets(pool: &Pool, scheme: Scheme, p: u64) -> [u64; 2] {
    let info = pool.info("a").unwrap();
    let layout = pmo_format::PmoLayout::with_plain(
        info.capacity / 4096,
        scheme.tag_bytes() as u64,
        scheme.shadow == pmo_store::Shadow::Medium,
    )
    .unwrap();
    [0, 1].map(|s| info.extent_off + layout.page(s, p))
}

/// The 4096 bytes at each of `offsets`.
fn bytes_at(pool: &Pool, offsets: [u64; 2]) -> Vec<Vec<u8>> {
    offsets
        .iter()
        .map(|&off| {
            let mut b = vec![0u8; 4096];
            pool.medium().read(off, &mut b).unwrap();
            b
        })
        .collect()
}

/// The bytes of both data slots of page `p` of "a" on the medium.
fn slots_of(pool: &Pool, scheme: Scheme, p: u64) -> Vec<Vec<u8>> {
    bytes_at(pool, slot_offsets(pool, scheme, p))
}

/// Neither slot that held bytes before (`was`) still holds them (`now`).
fn assert_overwritten(was: &[Vec<u8>], now: &[Vec<u8>], ctx: &str) {
    for (s, (was, now)) in was.iter().zip(now).enumerate() {
        if was.iter().any(|&b| b != 0) {
            assert!(
                was != now,
                "{ctx}: slot {s} of a dropped page still holds its bytes"
            );
        }
    }
}

#[test]
fn within_the_capacity_a_resize_changes_only_metadata_under_every_scheme() {
    for scheme in capacity_schemes(every_scheme()) {
        let ctx = scheme.to_string();
        let m = Arc::new(CrashMedium::from_image(base_image_max(
            scheme,
            4 << 20,
            MAX,
        )));
        let pool = Pool::open_on(m.clone()).unwrap();
        let before = pool.info("a").unwrap();
        assert_eq!(before.capacity, MAX * 4096, "{ctx}");
        // Grow to the capacity: same extent, same address, no page copied.
        let r = resize(&pool, MAX, false).unwrap();
        assert!(r.in_place && r.address_kept, "{ctx}: {r:?}");
        assert_eq!(r.pages_copied, 0, "{ctx}");
        assert_eq!(
            (r.info.extent_off, r.info.extent_len, r.info.base_addr),
            (before.extent_off, before.extent_len, before.base_addr),
            "{ctx}"
        );
        assert_pmo(&pool, MAX, PAGES, &ctx);
        write_page(&pool, MAX - 1);
        // A shrink over data is refused; forced, it drops the pages and what they held.
        let e = resize(&pool, 2, false).unwrap_err();
        assert!(
            matches!(&e, StoreError::Invalid(m) if m.contains("holds data")),
            "{ctx}: {e}"
        );
        let held = slots_of(&pool, scheme, 3);
        let r = resize(&pool, 2, true).unwrap();
        assert!(r.in_place, "{ctx}");
        assert_eq!(r.pages_dropped, PAGES - 2 + 1, "{ctx}");
        assert_overwritten(&held, &slots_of(&pool, scheme, 3), &ctx);
        assert_pmo(&pool, 2, 2, &ctx);
        // Growing back shows zeros; the PMO commits and survives a reopen.
        let r = resize(&pool, MAX, false).unwrap();
        assert!(r.in_place, "{ctx}");
        assert_pmo(&pool, MAX, 2, &ctx);
        write_page(&pool, 2);
        let pool = Pool::open_on(Arc::new(CrashMedium::from_image(m.durable_image()))).unwrap();
        assert_pmo(&pool, MAX, 3, &format!("{ctx} reopened"));
        // Past the capacity it is the move, which lays the PMO out for its new size.
        let r = resize(&pool, MAX + 1, false).unwrap();
        assert!(!r.in_place, "{ctx}");
        assert_eq!(r.info.capacity, (MAX + 1) * 4096, "{ctx}");
        assert_pmo(&pool, MAX + 1, 3, &ctx);
        assert_healthy(&pool, &ctx);
        common::assert_no_plaintext(&m.durable_image(), scheme, FILLERS, &ctx);
    }
}

/// A copy (a snapshot into a new PMO) is laid out for the source's capacity, so it too grows
/// in place; an export file carries no capacity, so an import is laid out for its size.
#[test]
fn a_copy_keeps_the_layout_capacity() {
    let scheme = Scheme::SECURE;
    let m = Arc::new(CrashMedium::from_image(base_image_max(
        scheme,
        4 << 20,
        MAX,
    )));
    let pool = Pool::open_on(m).unwrap();
    pool.copy("a", "c", KEY, None, &mut |_, _| {}).unwrap();
    assert_eq!(pool.info("c").unwrap().capacity, MAX * 4096);
    let r = pool
        .resize(
            "c",
            MAX * 4096,
            KEY,
            ResizeOptions {
                force: false,
                progress: None,
            },
        )
        .unwrap();
    assert!(r.in_place && r.pages_copied == 0, "{r:?}");
    let before = pool.info("a").unwrap();
    assert_eq!(r.info.size, MAX * 4096);
    assert_eq!(before.size, PAGES * 4096);
    assert_healthy(&pool, "copy");
}

#[test]
fn a_capacity_is_refused_where_it_cannot_work() {
    let m = Arc::new(CrashMedium::new(4 << 20));
    let pool = Pool::create_on(m, &opts(Scheme::SECURE)).unwrap();
    let wedi = Scheme::from_name("wedi").unwrap();
    let e = pool
        .pcreate_max("w", 4096, 8 * 4096, KEY, Some(wedi))
        .unwrap_err();
    assert!(
        matches!(&e, StoreError::Unsupported(m) if m.contains("wedi")),
        "{e}"
    );
    let e = pool
        .pcreate_max("s", 8 * 4096, 4096, KEY, None)
        .unwrap_err();
    assert!(
        matches!(&e, StoreError::Invalid(m) if m.contains("below the size")),
        "{e}"
    );
    // A maximum equal to the size is an ordinary PMO.
    let i = pool.pcreate_max("e", 4096, 4096, KEY, None).unwrap();
    assert_eq!(i.capacity, 4096);
    assert_eq!(pool.list().unwrap().len(), 1);
}

#[test]
fn a_version_4_pool_is_upgraded_to_5_and_takes_a_capacity() {
    let m = Arc::new(CrashMedium::new(4 << 20));
    let pool = Pool::create_legacy_on(m.clone(), &opts(Scheme::SECURE_GCM), 4).unwrap();
    assert_eq!(pool.superblock().version, 4);
    pool.pcreate("a", PAGES * 4096, KEY).unwrap();
    write_page(&pool, 1);
    drop(pool);
    let pool = Pool::open_on(Arc::new(CrashMedium::from_image(m.durable_image()))).unwrap();
    assert_eq!(pool.superblock().version, pmo_format::FORMAT_VERSION);
    assert_eq!(pool.info("a").unwrap().capacity, PAGES * 4096);
    let h = pool.open_pmo("a", Perm::Read, KEY, None).unwrap();
    let mut buf = [0u8; 4096];
    h.read_page(1, &mut buf).unwrap();
    assert!(buf == page(1));
    drop(h);
    pool.pcreate_max("c", 4096, 16 * 4096, KEY, None).unwrap();
    assert_healthy(&pool, "upgraded");
}

#[test]
fn grow_within_the_capacity_is_atomic_at_every_persist_point() {
    for scheme in capacity_schemes(crash_schemes()) {
        crash_every_point_max(scheme, "grow in place", MAX, PAGES, MAX, |pool| {
            let _ = resize(pool, MAX, false);
        });
    }
}

#[test]
fn shrink_within_the_capacity_is_atomic_at_every_persist_point() {
    for scheme in capacity_schemes(crash_schemes()) {
        crash_every_point_max(scheme, "shrink in place", 2, 2, MAX, |pool| {
            let _ = resize(pool, 2, true);
        });
    }
}

#[test]
fn a_writer_grows_in_place_keeping_its_unsynced_changes_under_every_scheme() {
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        std::path::PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    for scheme in capacity_schemes(every_scheme()) {
        let ctx = scheme.to_string();
        let path = dir.join(format!("pmo-grow-live-{}.pool", std::process::id()));
        let _ = std::fs::remove_file(&path);
        // Another address than the other attaching test's (tests run in parallel threads).
        let o = PoolOptions {
            base_addr: Some(0x3000_0000_0000),
            ..opts(scheme)
        };
        let pool = Pool::create(&path, 8 << 20, &o).unwrap();
        pool.pcreate_max("a", 4 * 4096, 64 * 4096, KEY, None)
            .unwrap();
        pool.pcreate("b", 4096, KEY).unwrap();
        let a = pool.attach("a", Perm::Write, KEY).unwrap();
        if scheme.granularity() == pmo_store::scheme::Granularity::Whole {
            // `wed` decrypts the whole PMO at attach: its view maps the size only, and a live
            // grow is refused (`Attachment::resize` detaches for it).
            assert_eq!((a.len(), a.mapped_len()), (4 * 4096, 4 * 4096), "{ctx}");
            assert!(
                matches!(a.grow(8 * 4096, KEY), Err(StoreError::Invalid(_))),
                "{ctx}"
            );
            drop(a);
            drop(pool);
            pmo_store::wait_for_background_detaches();
            std::fs::remove_file(&path).unwrap();
            continue;
        }
        assert_eq!((a.len(), a.mapped_len()), (4 * 4096, 64 * 4096), "{ctx}");
        let base = a.addr();
        a.write_at(0, b"synced").unwrap();
        a.psync().unwrap();
        a.write_at(3 * 4096, b"unsynced").unwrap();
        assert!(
            a.write_at(4 * 4096, b"x").is_err(),
            "{ctx}: a write past the size"
        );
        // SAFETY: inside the mapping (its capacity), past the PMO's size: a store there is
        // not part of the PMO.
        unsafe { *base.add(10 * 4096) = 0x77 };
        let r = a.grow(32 * 4096, KEY).unwrap();
        assert!(
            r.in_place && r.address_kept && r.pages_copied == 0,
            "{ctx}: {r:?}"
        );
        assert_eq!((a.addr(), a.len()), (base, 32 * 4096), "{ctx}");
        assert_eq!(pool.info("a").unwrap().size, 32 * 4096, "{ctx}");
        let mut buf = [0u8; 8];
        a.read_at(3 * 4096, &mut buf).unwrap();
        assert_eq!(&buf, b"unsynced", "{ctx}: the unsynced change was lost");
        for p in [4, 10, 31] {
            a.read_at(p * 4096, &mut buf).unwrap();
            assert_eq!(buf, [0; 8], "{ctx}: grown page {p} is not zero");
        }
        a.write_at(31 * 4096, b"grown").unwrap();
        // Refused, nothing changed: not a grow, past the capacity, a wrong key.
        for (size, key) in [(4096, KEY), (65 * 4096, KEY), (40 * 4096, &b"wrong"[..])] {
            let e = a.grow(size, key).unwrap_err();
            assert!(
                matches!(e, StoreError::Invalid(_) | StoreError::WrongKey(_)),
                "{ctx}: {e}"
            );
        }
        assert_eq!(a.len(), 32 * 4096);
        a.psync().unwrap();
        drop(a);
        pmo_store::wait_for_background_detaches();
        let h = pool.open_pmo("a", Perm::Read, KEY, None).unwrap();
        assert_eq!(h.size(), 32 * 4096);
        let mut page = [0u8; 4096];
        for (p, want) in [
            (0, &b"synced"[..]),
            (3, b"unsynced"),
            (31, b"grown"),
            (10, &[0; 8]),
        ] {
            h.read_page(p, &mut page).unwrap();
            assert_eq!(&page[..want.len()], want, "{ctx}: page {p} after reopen");
        }
        drop(h);
        assert_healthy(&pool, &ctx);
        drop(pool);
        pmo_store::wait_for_background_detaches();
        std::fs::remove_file(&path).unwrap();
    }
}

/// The mapped-memory medium (`PmemMedium`, the DAX code path without `MAP_SYNC`, as on
/// /dev/shm): the pool file grows, a PMO grows in place and by a move in it, and a writer
/// attaches after the grow at the PMO's stable address.
#[test]
fn a_pool_on_mapped_memory_grows() {
    let shm = std::path::Path::new("/dev/shm");
    if !shm.is_dir() {
        eprintln!("note: no /dev/shm: skipping");
        return;
    }
    let path = shm.join(format!("pmo-resize-pmem-{}.pool", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let o = PoolOptions {
        base_addr: Some(0x3800_0000_0000),
        ..opts(Scheme::SECURE)
    };
    let pool = Pool::create(&path, 2 << 20, &o).unwrap();
    assert_eq!(
        pool.pool_info().unwrap().medium,
        pmo_medium::MediumKind::EmulatedPmem
    );
    pool.pcreate_max("a", PAGES * 4096, MAX * 4096, KEY, None)
        .unwrap();
    write_page(&pool, 1);
    drop(pool);
    let pool = Pool::grow_pool(&path, 8 << 20).unwrap();
    assert_eq!(pool.superblock().pool_size, 8 << 20);
    assert!(resize(&pool, MAX, false).unwrap().in_place);
    assert!(!resize(&pool, 4 * MAX, false).unwrap().in_place);
    let base = pool.info("a").unwrap().base_addr;
    let a = pool.attach("a", Perm::Write, KEY).unwrap();
    assert_eq!(a.addr() as u64, base);
    let mut buf = [0u8; 4096];
    a.read_at(4096, &mut buf).unwrap();
    assert!(buf == page(1));
    drop(a);
    assert_healthy(&pool, "pmem");
    drop(pool);
    pmo_store::wait_for_background_detaches();
    std::fs::remove_file(&path).unwrap();
}

/// Unwritten capacity costs no storage in a sparse pool file: a PMO of one page laid out for
/// 24 MiB allocates the file blocks of its header page and page map, not of its data slots.
#[test]
fn unwritten_capacity_takes_no_blocks_of_a_sparse_pool() {
    use std::os::unix::fs::MetadataExt;
    let path = std::env::temp_dir().join(format!("pmo-resize-sparse-{}.pool", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let pool = Pool::create(&path, 64 << 20, &opts(Scheme::SECURE)).unwrap();
    drop(pool);
    let before = std::fs::metadata(&path).unwrap().blocks() * 512;
    let pool = Pool::open(&path).unwrap();
    let info = pool.pcreate_max("big", 4096, 24 << 20, KEY, None).unwrap();
    assert!(info.extent_len > 48 << 20, "{}", info.extent_len);
    write_page_of(&pool, "big", 0);
    drop(pool);
    pmo_store::wait_for_background_detaches();
    let after = std::fs::metadata(&path).unwrap().blocks() * 512;
    // The map of 6144 pages is 48 KiB; allow the header page, a journal page or two, tags.
    assert!(
        after - before < 1 << 20,
        "{} bytes allocated for a 48 MiB extent",
        after - before
    );
    std::fs::remove_file(&path).unwrap();
}

/// Write page `p` of PMO `name` = `page(p)`.
fn write_page_of(pool: &Pool, name: &str, p: u64) {
    let h = pool.open_pmo(name, Perm::Write, KEY, None).unwrap();
    h.commit_pages(&[(p, &page(p))]).unwrap();
}

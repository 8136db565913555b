//! Shared body of the pool-parser fuzz target (`fuzz/fuzz_targets/open_pool.rs`) and of the
//! corruption property tests: open any bytes as a pool and use it. It must never panic or
//! misbehave: every problem is an error value.

use std::sync::Arc;

use pmo_medium::CrashMedium;

use crate::{Perm, Pool, StoreError};

/// Key used by [`sample_image`] for every PMO.
pub const SAMPLE_KEY: &[u8] = b"fuzz";

/// Open `image` as a pool and exercise it: list, info, check, and read every PMO with the
/// sample key. Returns how far it got (for statistics), never panics on bad input.
pub fn open_and_exercise(image: &[u8]) -> usize {
    let medium = Arc::new(CrashMedium::from_image(image.to_vec()));
    let Ok(pool) = Pool::open_on(medium) else {
        return 0;
    };
    let _ = pool.pool_info();
    let _ = pool.check();
    let Ok(list) = pool.list() else { return 1 };
    let mut reached = 2;
    for info in list {
        let Ok(h) = pool.open_pmo(&info.name, Perm::Read, SAMPLE_KEY, None) else {
            continue;
        };
        let mut page = [0u8; 4096];
        for p in 0..(h.size() / 4096).min(8) {
            let _ = h.read_page(p, &mut page);
        }
        drop(h);
        if let Ok(h) = pool.open_pmo(&info.name, Perm::Write, SAMPLE_KEY, None) {
            let _ = h.write_at(0, b"fuzz");
        }
        reached = 3;
    }
    reached
}

/// A small valid pool image with two PMOs and a few psyncs: the seed for corruption.
pub fn sample_image() -> Vec<u8> {
    let m = Arc::new(CrashMedium::new(1 << 20));
    let opts = crate::PoolOptions {
        kdf: pmo_format::KdfParams::INSECURE_FAST,
        ns_capacity: Some(16),
        base_addr: Some(0x2000_0000_0000),
        medium: None,
        preallocate: false,
        scheme: crate::Scheme::SECURE,
    };
    let pool = Pool::create_on(m.clone(), &opts).expect("sample pool");
    pool.pcreate("one", 4 * 4096, SAMPLE_KEY).expect("pcreate");
    pool.pcreate_with("two", 2 * 4096, SAMPLE_KEY, Some(crate::Scheme::NONE))
        .expect("pcreate");
    let h = pool
        .open_pmo("one", Perm::Write, SAMPLE_KEY, None)
        .expect("open");
    h.write_at(100, b"hello").expect("write");
    h.write_at(5000, &[7u8; 9000]).expect("write");
    drop(h);
    m.current_image()
}

/// A valid export of the sample's PMO "one", and the pool image it was exported from (the pool
/// an import goes into): the seed of [`import_tampered`].
pub fn sample_export() -> &'static (Vec<u8>, Vec<u8>) {
    static SAMPLE: std::sync::OnceLock<(Vec<u8>, Vec<u8>)> = std::sync::OnceLock::new();
    SAMPLE.get_or_init(|| {
        let image = sample_image();
        let pool = Pool::open_on(Arc::new(CrashMedium::from_image(image.clone())))
            .expect("the sample opens");
        let file = scratch_path("export");
        pool.export("one", SAMPLE_KEY, &file, &mut |_, _| {})
            .expect("export the sample");
        let bytes = std::fs::read(&file).expect("read the export");
        let _ = std::fs::remove_file(&file);
        (bytes, image)
    })
}

/// A file name of this process in the temporary directory, removed by its user.
fn scratch_path(what: &str) -> std::path::PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    std::env::temp_dir().join(format!(
        "pmo-fuzz-{what}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

/// The entry's bytes in an export file's header (after the 48 bytes of its own fields).
const ENTRY_AT: std::ops::Range<usize> = 48..48 + pmo_format::ENTRY_SIZE;
/// The KDF parameters' 16 bytes in an entry (`docs/format.md`, namespace entry).
const ENTRY_KDF: usize = 72;

/// Apply `data` to the sample export ([`sample_export`]) and import the result into the sample
/// pool. `data`: a flags byte (bit 0: recompute the entry's CRC after the changes, as a
/// deliberate forger would, so the checks behind it are reached), then 4-byte changes: a
/// 24-bit offset (modulo the length + 1) and a byte XORed there, or with byte 0 the file cut
/// at that offset. Returns whether the file was changed.
///
/// Checked: an unchanged file imports with the same contents; a changed one is refused as an
/// integrity failure (CLI exit 2) before anything is created, never imported, and the pool
/// keeps exactly its PMOs. Two refusals of another kind are right: a file that no longer
/// starts with the magic (or is shorter than it) is "not a pmo export file", and a forged
/// entry (its CRC recomputed) whose key fields changed is a wrong key, which nothing without
/// the key can tell from one.
pub fn import_tampered(data: &[u8]) -> bool {
    let (export, image) = sample_export();
    let mut file = export.clone();
    let fix_crc = data.first().is_some_and(|f| f & 1 != 0);
    let mut entry_changed = false;
    for c in data.get(1..).unwrap_or(&[]).chunks_exact(4).take(16) {
        let off = (u32::from_le_bytes([c[0], c[1], c[2], 0]) as usize) % (file.len() + 1);
        if c[3] == 0 {
            file.truncate(off);
        } else if off < file.len() {
            file[off] ^= c[3];
            entry_changed |= ENTRY_AT.contains(&off);
        }
    }
    if fix_crc && file.len() >= ENTRY_AT.end {
        // The KDF cost fields stay as exported: a forged Argon2id cost (up to 4 GiB and 64
        // passes, the range a pool accepts) is run before the MAC can be checked; see
        // docs/results.md.
        let kdf = ENTRY_AT.start + ENTRY_KDF;
        debug_assert_eq!(
            export[kdf..kdf + 4],
            pmo_format::KdfParams::ARGON2ID.to_le_bytes()
        );
        file[kdf..kdf + 16].copy_from_slice(&export[kdf..kdf + 16]);
        let crc_at = ENTRY_AT.end - 4;
        let crc = pmo_format::crc(&file[ENTRY_AT.start..crc_at]);
        file[crc_at..ENTRY_AT.end].copy_from_slice(&crc.to_le_bytes());
    }
    let changed = file != *export;
    let pool =
        Pool::open_on(Arc::new(CrashMedium::from_image(image.clone()))).expect("the sample opens");
    let before: Vec<String> = pool
        .list()
        .expect("list")
        .into_iter()
        .map(|i| i.name)
        .collect();
    let path = scratch_path("import");
    std::fs::write(&path, &file).expect("write the tampered export");
    let r = pool.import(&path, Some("imported"), SAMPLE_KEY, &mut |_, _| {});
    let _ = std::fs::remove_file(&path);
    match (changed, r) {
        (false, Ok(info)) => {
            let a = pool
                .open_pmo("one", Perm::Read, SAMPLE_KEY, None)
                .expect("one");
            let b = pool
                .open_pmo(&info.name, Perm::Read, SAMPLE_KEY, None)
                .expect("imported");
            assert_eq!(a.size(), b.size());
            let (mut x, mut y) = ([0u8; 4096], [0u8; 4096]);
            for p in 0..a.size() / 4096 {
                a.read_page(p, &mut x).expect("read one");
                b.read_page(p, &mut y).expect("read the import");
                assert!(x == y, "page {p} of the import differs");
            }
        }
        (false, Err(e)) => panic!("the unchanged export is refused: {e}"),
        (true, Ok(_)) => panic!("a changed export was imported"),
        (true, Err(e)) => {
            let magic = file.len() < 8 || file[..8] != export[..8];
            let ok = e.is_integrity()
                || (magic && matches!(e, StoreError::Invalid(_)))
                || (fix_crc && entry_changed && matches!(e, StoreError::WrongKey(_)));
            assert!(
                ok,
                "a changed export refused as {e:?}, not an integrity failure"
            );
            let after: Vec<String> = pool
                .list()
                .expect("list")
                .into_iter()
                .map(|i| i.name)
                .collect();
            assert_eq!(before, after, "a refused import changed the pool");
        }
    }
    changed
}

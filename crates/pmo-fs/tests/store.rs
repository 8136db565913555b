//! The file store's operations on a crash medium: round trips, growth over segments, the
//! directory tree, bad input, a full store, and `check` after each.

use std::sync::Arc;

use pmo_fs::{FileStore, FsError, FsOptions, StatKind};
use pmo_medium::crash::CrashMedium;
use pmo_store::{KdfParams, Pool, PoolOptions, Scheme};

fn store(pool_bytes: u64, scheme: &str) -> FileStore {
    let pool = Pool::create_on(
        Arc::new(CrashMedium::new(pool_bytes)),
        &PoolOptions {
            kdf: KdfParams::INSECURE_FAST,
            ns_capacity: Some(256),
            scheme: Scheme::from_name(scheme).unwrap(),
            ..Default::default()
        },
    )
    .unwrap();
    FileStore::open(pool, FsOptions::default()).unwrap()
}

fn healthy(fs: &FileStore) {
    let c = fs.check().unwrap();
    assert!(c.problems.is_empty(), "{:?}", c.problems);
    assert_eq!(c.used_bytes + c.free_bytes, c.heap_bytes);
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn files_round_trip_and_grow_over_segments() {
    for scheme in ["none", "secure", "wedi", "sp-id"] {
        let fs = store(16 << 20, scheme);
        fs.mkdir("/d").unwrap();
        let f = fs.create("/d/a", 1000).unwrap();
        let data = pattern(300_000, 7);
        for chunk in data.chunks(16384) {
            f.append(chunk).unwrap();
        }
        assert_eq!(f.size(), data.len() as u64);
        f.pwrite(5000, b"hello").unwrap();
        f.fsync().unwrap();
        f.close().unwrap();
        let mut want = data.clone();
        want[5000..5005].copy_from_slice(b"hello");
        assert_eq!(fs.read_file("/d/a").unwrap(), want, "{scheme}");
        let c = fs.check().unwrap();
        assert!(
            c.segments >= 3,
            "{scheme}: grew over {} segments",
            c.segments
        );
        assert_eq!(c.file_bytes, want.len() as u64);
        healthy(&fs);
        // pread at the end is short; past the end reads nothing.
        let f = fs.open_file("/d/a").unwrap();
        let mut b = [0u8; 10];
        assert_eq!(f.pread(want.len() as u64 - 4, &mut b).unwrap(), 4);
        assert_eq!(f.pread(want.len() as u64 + 10, &mut b).unwrap(), 0);
        // A gap past the end reads as zeros.
        let end = f.size();
        f.pwrite(end + 100, b"x").unwrap();
        let mut g = [1u8; 100];
        f.pread(end, &mut g).unwrap();
        assert_eq!(g, [0u8; 100]);
        f.close().unwrap();
        // Shrinking gives back the segments at close.
        fs.write_file("/d/a", b"small").unwrap();
        assert_eq!(fs.read_file("/d/a").unwrap(), b"small");
        assert_eq!(fs.check().unwrap().segments, 0, "{scheme}");
        fs.unlink("/d/a").unwrap();
        healthy(&fs);
        assert_eq!(fs.check().unwrap().used_bytes, {
            // Only the directory's PMO is left.
            let c = fs.check().unwrap();
            assert_eq!((c.files, c.dirs), (0, 1));
            c.used_bytes
        });
    }
}

#[test]
fn directory_tree_stat_and_readdir() {
    let fs = store(8 << 20, "secure");
    fs.mkdir_all("/a/b/c").unwrap();
    fs.write_file("/a/f1", b"one").unwrap();
    fs.write_file("/a/b/f2", b"two!").unwrap();
    let names: Vec<_> = fs
        .readdir("/a")
        .unwrap()
        .into_iter()
        .map(|e| (e.name, e.kind))
        .collect();
    assert_eq!(
        names,
        vec![("b".into(), StatKind::Dir), ("f1".into(), StatKind::File)]
    );
    assert_eq!(fs.stat("/a/b/f2").unwrap().size, 4);
    assert_eq!(fs.stat("/a/b").unwrap().kind, StatKind::Dir);
    assert!(matches!(fs.stat("/nope"), Err(FsError::NotFound(_))));
    assert!(matches!(fs.create("/x/y", 0), Err(FsError::NotFound(_))));
    assert!(matches!(
        fs.create("/a/f1/z", 0),
        Err(FsError::NotADirectory(_))
    ));
    assert!(matches!(fs.create("/a/f1", 0), Err(FsError::Exists(_))));
    assert!(matches!(fs.mkdir("/a/b"), Err(FsError::Exists(_))));
    assert!(matches!(fs.rmdir("/a"), Err(FsError::NotEmpty(_))));
    assert!(matches!(
        fs.open_file("/a/b"),
        Err(FsError::IsADirectory(_))
    ));
    assert!(matches!(
        fs.readdir("/a/f1"),
        Err(FsError::NotADirectory(_))
    ));
    // Open files are shared, and cannot be unlinked while open.
    let h1 = fs.open_file("/a/f1").unwrap();
    let h2 = fs.open_file("/a/f1").unwrap();
    h1.append(b"+").unwrap();
    assert_eq!(h2.size(), 4);
    assert!(matches!(fs.unlink("/a/f1"), Err(FsError::Busy(_))));
    h1.close().unwrap();
    h2.close().unwrap();
    assert_eq!(fs.read_file("/a/f1").unwrap(), b"one+");
    fs.unlink("/a/f1").unwrap();
    fs.rmdir("/a/b/c").unwrap();
    healthy(&fs);
}

#[test]
fn bad_names_are_refused_clearly() {
    let fs = store(4 << 20, "none");
    for bad in ["relative", "/a/../b", "/a\u{1f}b", "/tab\there"] {
        let e = fs.create(bad, 0).err().expect(bad);
        assert!(matches!(e, FsError::BadPath { .. }), "{bad}: {e}");
    }
    let long = format!("/{}", "n".repeat(300));
    let e = fs.mkdir(&long).unwrap_err();
    assert!(e.to_string().contains("longer than 255"), "{e}");
    let deep = format!("/{}/{}", "a".repeat(200), "b".repeat(100));
    assert!(fs
        .mkdir_all(&deep)
        .unwrap_err()
        .to_string()
        .contains("longer than"));
    healthy(&fs);
}

#[test]
fn a_full_store_fails_the_write_and_loses_nothing() {
    let fs = store(2 << 20, "secure");
    fs.write_file("/keep", &pattern(50_000, 3)).unwrap();
    let f = fs.create("/big", 0).unwrap();
    let chunk = pattern(64 * 1024, 9);
    let mut written = 0u64;
    let err = loop {
        match f.append(&chunk) {
            Ok(_) => written += chunk.len() as u64,
            Err(e) => break e,
        }
        assert!(written < 64 << 20, "never filled");
    };
    assert!(matches!(err, FsError::NoSpace(_)), "{err}");
    // The failed append changed nothing; what was written before is still there.
    assert_eq!(f.size(), written);
    f.fsync().unwrap();
    f.close().unwrap();
    assert_eq!(fs.stat("/big").unwrap().size, written);
    assert_eq!(fs.read_file("/keep").unwrap(), pattern(50_000, 3));
    healthy(&fs);
    fs.unlink("/big").unwrap();
    healthy(&fs);
}

#[test]
fn replacing_a_file_in_a_full_store_keeps_the_old_bytes() {
    let fs = store(2 << 20, "secure");
    fs.write_file("/keep", &pattern(50_000, 3)).unwrap();
    // More than the store can hold: the replacement fails as a full store...
    let err = fs.write_file("/keep", &pattern(4 << 20, 5)).unwrap_err();
    assert!(matches!(err, FsError::NoSpace(_)), "{err}");
    // ...and the file still holds what it held, durably.
    let kept = fs.read_file("/keep").unwrap();
    assert!(kept == pattern(50_000, 3), "{} bytes kept", kept.len());
    healthy(&fs);
    // A replacement that fits, shorter than the old bytes, leaves exactly the new ones.
    fs.write_file("/keep", b"short").unwrap();
    assert_eq!(fs.read_file("/keep").unwrap(), b"short");
    healthy(&fs);
}

#[test]
fn the_root_is_a_directory_to_every_call() {
    let fs = store(2 << 20, "none");
    for r in [
        fs.open_file("/").err(),
        fs.unlink("/").err(),
        fs.write_file("/", b"x").err(),
    ] {
        let e = r.expect("refused");
        assert!(matches!(e, FsError::IsADirectory(_)), "{e}");
    }
    let e = fs.rmdir("/").unwrap_err();
    assert!(e.to_string().contains("root"), "{e}");
    assert_eq!(fs.stat("/").unwrap().kind, StatKind::Dir);
    healthy(&fs);
}

#[test]
fn a_wrong_key_is_refused_at_open_and_changes_nothing() {
    let fs = store(4 << 20, "secure");
    fs.mkdir("/d").unwrap();
    fs.write_file("/d/keep", b"kept").unwrap();
    let pool = fs.pool().clone();
    drop(fs);
    let other = FsOptions {
        key: b"another key".to_vec(),
        ..FsOptions::default()
    };
    // A store opened with another key would create files and directories under that key,
    // which the store's own key then cannot open (nor list, nor check).
    let e = FileStore::open(pool.clone(), other).err().expect("refused");
    assert!(
        matches!(e, FsError::Store(pmo_store::StoreError::WrongKey(_))),
        "{e}"
    );
    let fs = FileStore::open(pool, FsOptions::default()).unwrap();
    assert_eq!(fs.read_file("/d/keep").unwrap(), b"kept");
    assert_eq!(fs.readdir("/").unwrap().len(), 1);
    healthy(&fs);
}

#[test]
fn mkdir_all_through_a_file_says_not_a_directory() {
    let fs = store(2 << 20, "none");
    fs.write_file("/f", b"x").unwrap();
    let e = fs.mkdir_all("/f/x/y").unwrap_err();
    assert!(
        matches!(e, FsError::NotADirectory(ref p) if p == "/f"),
        "{e}"
    );
    // The path itself a file: it exists (as mkdir -p says).
    let e = fs.mkdir_all("/f").unwrap_err();
    assert!(matches!(e, FsError::Exists(_)), "{e}");
    assert_eq!(fs.read_file("/f").unwrap(), b"x");
    healthy(&fs);
}

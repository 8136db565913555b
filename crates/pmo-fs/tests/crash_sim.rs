//! Power cut at every persist point of a sequence of file-store operations (append that grows
//! a file over a new segment, overwrite, fsync; create + write + fsync; unlink of a file with
//! segments; mkdir): the store reopens, `check` finds no problem and no leaked byte, every
//! file reads exactly as of its last fsync (or the one in flight), and the operations appear
//! in order (no later one without every earlier one). An overwrite spanning several of a
//! file's PMOs is atomic per PMO only (the last test).

use std::sync::Arc;

use pmo_fs::{FileStore, FsError, FsOptions};
use pmo_medium::crash::{explore, CrashMedium};
use pmo_store::{KdfParams, Pool, PoolOptions, Scheme};

const POOL_BYTES: u64 = 3 << 20;

fn opts(scheme: Scheme) -> PoolOptions {
    PoolOptions {
        kdf: KdfParams::INSECURE_FAST,
        ns_capacity: Some(32),
        base_addr: Some(0x2100_0000_0000),
        scheme,
        ..Default::default()
    }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

fn a_v1() -> Vec<u8> {
    pattern(20_000, 1)
}
fn a_v2() -> Vec<u8> {
    let mut v = a_v1();
    v.extend(pattern(30_000, 2));
    v[100..110].copy_from_slice(b"overwrite!");
    v
}
fn b_data() -> Vec<u8> {
    pattern(40_000, 5)
}
fn c_data() -> Vec<u8> {
    pattern(9_000, 9)
}

fn open_fs(m: Arc<CrashMedium>) -> Result<FileStore, FsError> {
    FileStore::open(Pool::open_on(m)?, FsOptions::default())
}

fn base_image(scheme: Scheme) -> Vec<u8> {
    let m = Arc::new(CrashMedium::new(POOL_BYTES));
    let pool = Pool::create_on(m.clone(), &opts(scheme)).unwrap();
    let fs = FileStore::open(pool, FsOptions::default()).unwrap();
    fs.mkdir("/d").unwrap();
    let f = fs.create("/d/a", 4000).unwrap();
    f.append(&a_v1()).unwrap();
    f.fsync().unwrap();
    f.close().unwrap();
    let f = fs.create("/d/b", 1000).unwrap();
    f.append(&b_data()).unwrap();
    f.close().unwrap();
    drop(fs);
    pmo_store::wait_for_background_detaches();
    m.durable_image()
}

fn operations(m: &Arc<CrashMedium>) -> Result<(), FsError> {
    let fs = open_fs(m.clone())?;
    let f = fs.open_file("/d/a")?;
    f.append(&pattern(30_000, 2))?;
    f.pwrite(100, b"overwrite!")?;
    f.fsync()?;
    f.close()?;
    let c = fs.create("/d/c", 100)?;
    c.pwrite(0, &c_data())?;
    c.fsync()?;
    c.close()?;
    fs.unlink("/d/b")?;
    fs.mkdir("/e")?;
    drop(fs);
    pmo_store::wait_for_background_detaches();
    Ok(())
}

/// The stage the operations reached, as seen in the reopened store.
fn stage(fs: &FileStore, ctx: &str) -> u32 {
    let a = fs
        .read_file("/d/a")
        .unwrap_or_else(|e| panic!("{ctx}: read a: {e}"));
    let a_new = if a == a_v2() {
        true
    } else {
        assert!(
            a == a_v1(),
            "{ctx}: /d/a is neither version (len {})",
            a.len()
        );
        false
    };
    let c = match fs.read_file("/d/c") {
        Ok(c) => {
            assert!(
                c.is_empty() || c == c_data(),
                "{ctx}: /d/c torn ({} bytes)",
                c.len()
            );
            Some(!c.is_empty())
        }
        Err(FsError::NotFound(_)) => None,
        Err(e) => panic!("{ctx}: read c: {e}"),
    };
    let b = match fs.read_file("/d/b") {
        Ok(b) => {
            assert_eq!(b, b_data(), "{ctx}: /d/b changed");
            true
        }
        Err(FsError::NotFound(_)) => false,
        Err(e) => panic!("{ctx}: read b: {e}"),
    };
    let e = fs.stat("/e").is_ok();
    // Later stages imply earlier ones.
    let s = match (a_new, c, b, e) {
        (false, None, true, false) => 0,
        (true, None, true, false) => 1,
        (true, Some(false), true, false) => 2,
        (true, Some(true), true, false) => 3,
        (true, Some(true), false, false) => 4,
        (true, Some(true), false, true) => 5,
        other => panic!("{ctx}: state out of order: {other:?}"),
    };
    let names: Vec<String> = fs
        .readdir("/d")
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    let mut want = vec!["a".to_string()];
    if b {
        want.push("b".into());
    }
    if c.is_some() {
        want.push("c".into());
    }
    assert_eq!(names, want, "{ctx}: directory listing disagrees");
    s
}

#[test]
fn every_persist_point_of_file_operations() {
    for name in ["none", "secure", "sp-ip", "wedi"] {
        let scheme = Scheme::from_name(name).unwrap();
        let base = base_image(scheme);
        let mut seen = [0usize; 6];
        let points = explore(&base, 1, 0xf11e, operations, |cp| {
            let ctx = format!("{name}: point {} variant {}", cp.point, cp.variant);
            let m = Arc::new(CrashMedium::from_image(cp.image.clone()));
            let fs = open_fs(m).unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
            let check = fs.check().unwrap();
            assert!(check.problems.is_empty(), "{ctx}: {:?}", check.problems);
            assert_eq!(
                check.used_bytes + check.free_bytes,
                check.heap_bytes,
                "{ctx}: space leaked"
            );
            let s = stage(&fs, &ctx);
            if cp.completed {
                assert_eq!(s, 5, "{ctx}: a completed sequence was lost");
            }
            seen[s as usize] += 1;
            drop(fs);
            pmo_store::wait_for_background_detaches();
        });
        assert!(points > 20, "{name}: only {points} persist points");
        assert!(seen.iter().all(|&n| n > 0), "{name}: stages seen {seen:?}");
        eprintln!("{name}: {points} persist points, stages seen {seen:?}");
    }
}

/// What an fsync of an overwrite that spans PMOs guarantees (`docs/filebench.md`,
/// "Guarantees"): each of the file's PMOs (the first one with the header, each segment) reads
/// as of its own last psync, so after a power cut at any persist point every byte is old or
/// new, the new bytes of one PMO come all together, and a completed fsync leaves all of them new.
/// (A psync is atomic per PMO; nothing makes several PMOs' psyncs one.)
#[test]
fn an_overwrite_across_segments_is_atomic_per_pmo() {
    use pmo_fs::header::{locate, HEADER_BYTES};
    use pmo_fs::path::Kind;
    let old = pattern(60_000, 3);
    // Crosses the first PMO's end and the first segment's into the second.
    let (at, len) = (2_000usize, 40_000usize);
    let mut new = old.clone();
    new[at..at + len].copy_from_slice(&pattern(len, 77));
    for name in ["none", "secure"] {
        let scheme = Scheme::from_name(name).unwrap();
        let m = Arc::new(CrashMedium::new(POOL_BYTES));
        let pool = Pool::create_on(m.clone(), &opts(scheme)).unwrap();
        let fs = FileStore::open(pool.clone(), FsOptions::default()).unwrap();
        let f = fs.create("/a", 4000).unwrap();
        f.append(&old).unwrap();
        f.close().unwrap();
        let first = pool
            .info(&pmo_fs::FsPath::parse("/a").unwrap().pmo_name(Kind::File))
            .unwrap()
            .size;
        drop(fs);
        pmo_store::wait_for_background_detaches();
        let base = m.durable_image();
        // The PMO each byte of the overwrite lives in.
        let owner = |i: usize| locate(first, i as u64).0;
        assert!(
            owner(at) == 0 && owner(at + len - 1) >= 2,
            "the overwrite must span three PMOs (first PMO {first} bytes, header {HEADER_BYTES})"
        );
        let mut mixed = 0;
        explore(
            &base,
            1,
            0x0e4,
            |m| {
                let fs = open_fs(m.clone())?;
                let f = fs.open_file("/a")?;
                f.pwrite(at as u64, &new[at..at + len])?;
                f.fsync()?;
                f.close()?;
                drop(fs);
                pmo_store::wait_for_background_detaches();
                Ok::<(), FsError>(())
            },
            |cp| {
                let ctx = format!("{name}: point {} variant {}", cp.point, cp.variant);
                let fs = open_fs(Arc::new(CrashMedium::from_image(cp.image.clone())))
                    .unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
                let c = fs.read_file("/a").unwrap();
                assert_eq!(c.len(), old.len(), "{ctx}: size changed");
                let mut state: std::collections::BTreeMap<u32, bool> = Default::default();
                for i in at..at + len {
                    let is_new = if c[i] == new[i] && c[i] != old[i] {
                        true
                    } else {
                        assert_eq!(c[i], old[i], "{ctx}: byte {i} is neither old nor new");
                        false
                    };
                    if c[i] != old[i] || new[i] != old[i] {
                        let seen = state.entry(owner(i)).or_insert(is_new);
                        assert_eq!(*seen, is_new, "{ctx}: PMO {} of the file is torn", owner(i));
                    }
                }
                assert_eq!(
                    &c[..at],
                    &old[..at],
                    "{ctx}: bytes before the write changed"
                );
                assert_eq!(
                    &c[at + len..],
                    &old[at + len..],
                    "{ctx}: bytes after it changed"
                );
                if cp.completed {
                    assert!(c == new, "{ctx}: a completed fsync was lost");
                }
                if state.values().any(|&v| v) && state.values().any(|&v| !v) {
                    mixed += 1;
                }
                drop(fs);
                pmo_store::wait_for_background_detaches();
            },
        );
        eprintln!("{name}: {mixed} crash images with some of the file's PMOs new and others old");
    }
}

//! Power cut at every persist point of a sequence of file-store operations (append that grows
//! a file over a new segment, overwrite, fsync; create + write + fsync; unlink of a file with
//! segments; mkdir): the store reopens, `check` finds no problem and no leaked byte, every
//! file reads exactly as of its last fsync (or the one in flight), and the operations appear
//! in order (no later one without every earlier one).

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

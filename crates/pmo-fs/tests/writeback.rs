//! Closed files kept attached until their write-back (`src/writeback.rs`): what is durable
//! when, on the crash medium's durable image (what a power cut would leave), under `none` and
//! `secure`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pmo_fs::{FileStore, FsError, FsOptions, WriteBack};
use pmo_medium::crash::CrashMedium;
use pmo_store::{KdfParams, Pool, PoolOptions, Scheme};

const SCHEMES: [&str; 2] = ["none", "secure"];

fn medium() -> Arc<CrashMedium> {
    Arc::new(CrashMedium::new(8 << 20))
}

fn store(m: &Arc<CrashMedium>, scheme: &str, wb: WriteBack) -> FileStore {
    let pool = Pool::create_on(
        m.clone(),
        &PoolOptions {
            kdf: KdfParams::INSECURE_FAST,
            ns_capacity: Some(64),
            scheme: Scheme::from_name(scheme).unwrap(),
            ..Default::default()
        },
    )
    .unwrap();
    FileStore::open(
        pool,
        FsOptions {
            write_back: wb,
            ..Default::default()
        },
    )
    .unwrap()
}

/// The store a power cut now would leave, reopened (writing back at once, so that its own
/// reads leave nothing behind).
fn after_power_cut(m: &CrashMedium) -> FileStore {
    let m = Arc::new(CrashMedium::from_image(m.durable_image()));
    let fs = FileStore::open(
        Pool::open_on(m).unwrap(),
        FsOptions {
            write_back: WriteBack::AT_CLOSE,
            ..Default::default()
        },
    )
    .unwrap();
    let c = fs.check().unwrap();
    assert!(c.problems.is_empty(), "{:?}", c.problems);
    assert_eq!(c.used_bytes + c.free_bytes, c.heap_bytes, "space leaked");
    fs
}

fn data(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
}

const LONG: WriteBack = WriteBack {
    after: Duration::from_secs(3600),
    max_bytes: 1 << 30,
    max_files: 1000,
    clean: false,
};

#[test]
fn a_close_keeps_the_file_until_its_write_back_and_fsync_is_durable_at_once() {
    for scheme in SCHEMES {
        let m = medium();
        let fs = store(&m, scheme, LONG);
        let f = fs.create("/a", 0).unwrap();
        f.append(&data(30_000, 1)).unwrap();
        f.close().unwrap();
        assert_eq!(fs.kept().0, 1, "{scheme}: the closed file is kept");
        // Not durable yet: a power cut leaves the file as its create psynced it, empty.
        assert_eq!(
            after_power_cut(&m).read_file("/a").unwrap(),
            b"",
            "{scheme}"
        );
        // Open again: the kept file, with its bytes, and no longer kept while open.
        let f = fs.open_file("/a").unwrap();
        assert_eq!(fs.kept().0, 0);
        let mut b = vec![0u8; 30_000];
        assert_eq!(f.pread(0, &mut b).unwrap(), 30_000);
        assert_eq!(b, data(30_000, 1), "{scheme}");
        // fsync is durable when it returns, kept or not.
        f.append(&data(5_000, 2)).unwrap();
        f.fsync().unwrap();
        f.close().unwrap();
        assert_eq!(fs.kept().0, 0, "{scheme}: a clean close detaches");
        let mut want = data(30_000, 1);
        want.extend(data(5_000, 2));
        assert_eq!(after_power_cut(&m).read_file("/a").unwrap(), want);
        // A write after the fsync, closed: durable after `sync_all`, which leaves nothing kept.
        let f = fs.open_file("/a").unwrap();
        f.pwrite(0, b"later").unwrap();
        f.close().unwrap();
        assert_eq!(after_power_cut(&m).read_file("/a").unwrap(), want);
        fs.sync_all().unwrap();
        assert_eq!(fs.kept(), (0, 0));
        want[..5].copy_from_slice(b"later");
        assert_eq!(
            after_power_cut(&m).read_file("/a").unwrap(),
            want,
            "{scheme}"
        );
    }
}

#[test]
fn the_write_back_comes_after_its_delay_and_when_the_store_is_dropped() {
    for scheme in SCHEMES {
        let m = medium();
        let quick = WriteBack {
            after: Duration::from_millis(50),
            max_bytes: 1 << 30,
            max_files: 1000,
            clean: false,
        };
        let fs = store(&m, scheme, quick);
        let f = fs.create("/a", 0).unwrap();
        f.append(&data(9_000, 3)).unwrap();
        f.close().unwrap();
        let t = Instant::now();
        while fs.kept().0 > 0 {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "{scheme}: never written back"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(after_power_cut(&m).read_file("/a").unwrap(), data(9_000, 3));

        // Dropping the store writes back what it keeps, before the drop returns.
        let fs2 = store(&medium(), scheme, LONG);
        drop(fs2);
        let m = medium();
        let fs = store(&m, scheme, LONG);
        let f = fs.create("/b", 0).unwrap();
        f.append(&data(7_000, 4)).unwrap();
        f.close().unwrap();
        assert_eq!(fs.kept().0, 1);
        drop(fs);
        assert_eq!(after_power_cut(&m).read_file("/b").unwrap(), data(7_000, 4));
    }
}

#[test]
fn past_the_byte_bound_the_oldest_kept_file_is_written_back() {
    let m = medium();
    // Room for one small file's PMO (two pages) kept, not two.
    let fs = store(
        &m,
        "secure",
        WriteBack {
            after: Duration::from_secs(3600),
            max_bytes: 3 * 4096,
            max_files: 1000,
            clean: false,
        },
    );
    for (name, seed) in [("/a", 5), ("/b", 6)] {
        let f = fs.create(name, 6_000).unwrap();
        f.append(&data(6_000, seed)).unwrap();
        f.close().unwrap();
    }
    assert_eq!(fs.kept().0, 1, "the older went");
    let cut = after_power_cut(&m);
    assert_eq!(
        cut.read_file("/a").unwrap(),
        data(6_000, 5),
        "/a written back"
    );
    assert_eq!(cut.read_file("/b").unwrap(), b"", "/b still kept");
}

#[test]
fn an_unlinked_kept_file_goes_with_its_unsynced_writes_and_leaks_nothing() {
    let m = medium();
    let fs = store(&m, "secure", LONG);
    let f = fs.create("/a", 0).unwrap();
    f.append(&data(20_000, 7)).unwrap();
    f.close().unwrap();
    fs.unlink("/a").unwrap();
    assert_eq!(fs.kept(), (0, 0));
    assert!(matches!(fs.open_file("/a"), Err(FsError::NotFound(_))));
    let c = fs.check().unwrap();
    assert!(c.problems.is_empty(), "{:?}", c.problems);
    assert_eq!(c.used_bytes + c.free_bytes, c.heap_bytes);
    let cut = after_power_cut(&m);
    assert!(matches!(cut.read_file("/a"), Err(FsError::NotFound(_))));
}

#[test]
fn at_close_writes_back_every_last_close_as_before() {
    let m = medium();
    let fs = store(&m, "none", WriteBack::AT_CLOSE);
    let f = fs.create("/a", 0).unwrap();
    f.append(&data(10_000, 8)).unwrap();
    f.close().unwrap();
    assert_eq!(fs.kept(), (0, 0));
    assert_eq!(
        after_power_cut(&m).read_file("/a").unwrap(),
        data(10_000, 8)
    );
}

/// Another store of the same pool (as another process would) opens a kept file once it is
/// written back: it waits for the write-back, it is not refused.
#[test]
fn a_second_store_waits_for_the_kept_file() {
    let m = medium();
    let fs = store(
        &m,
        "none",
        WriteBack {
            after: Duration::from_millis(100),
            max_bytes: 1 << 30,
            max_files: 1000,
            clean: false,
        },
    );
    let f = fs.create("/a", 0).unwrap();
    f.append(&data(3_000, 9)).unwrap();
    f.close().unwrap();
    let other = FileStore::open(
        fs.pool().clone(),
        FsOptions {
            write_back: WriteBack::AT_CLOSE,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(other.read_file("/a").unwrap(), data(3_000, 9));
    assert_eq!(fs.kept().0, 0);
}

/// The default keeps clean files too: a fsynced file closed stays attached, its next open takes
/// it as it is, and its write-back (the detach alone) changes nothing on the medium.
#[test]
fn a_clean_file_is_kept_by_default_and_its_write_back_writes_nothing() {
    const { assert!(WriteBack::DEFAULT.clean) };
    let m = medium();
    let fs = store(
        &m,
        "secure",
        WriteBack {
            clean: true,
            ..LONG
        },
    );
    let f = fs.create("/a", 0).unwrap();
    f.append(&data(12_000, 10)).unwrap();
    f.fsync().unwrap();
    f.close().unwrap();
    assert_eq!(fs.kept().0, 1, "kept although clean");
    let before = m.durable_image();
    let f = fs.open_file("/a").unwrap();
    assert_eq!(fs.kept().0, 0);
    let mut b = vec![0u8; 12_000];
    assert_eq!(f.pread(0, &mut b).unwrap(), 12_000);
    assert_eq!(b, data(12_000, 10));
    f.close().unwrap();
    fs.sync_all().unwrap();
    assert_eq!(fs.kept(), (0, 0));
    assert!(
        m.durable_image() == before,
        "a clean file's write-back wrote to the medium"
    );
    assert_eq!(
        after_power_cut(&m).read_file("/a").unwrap(),
        data(12_000, 10)
    );
}

//! Issue 31: LMDB's lock directories do not outlive their PMO or pool. Environments opened and
//! closed in PMOs leave a directory with an owner file; destroying the PMOs and the pool, with
//! `lockdir::remove_for` (what `pmo destroy` calls) and `lockdir::clean` (what `pmo lmdb locks
//! --clean` calls), leaves nothing under the lock directory's parent. A directory in use (this
//! process's environment, or another description's lock on `lock.mdb`) is never removed, nor
//! one that is not recognisably pmo's. The close of an environment whose pool file was deleted
//! while it was open removes its directory itself.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use pmo_lmdb::lockdir::{self, Orphan, Removal, Status};
use pmo_lmdb::{ffi, Backend, Env, EnvOptions};
use pmo_store::{KdfParams, Pool, PoolOptions};

/// The glue's backend is process-wide: one test at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const KEY: &[u8] = b"lockdir-test-key";

struct Scratch {
    base: PathBuf,
    pool_path: PathBuf,
    locks: PathBuf,
}

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let base =
            std::env::temp_dir().join(format!("pmo-lmdb-lockdir-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let locks = base.join("locks");
        std::fs::create_dir_all(&locks).unwrap();
        Scratch {
            pool_path: base.join("p.pool"),
            base,
            locks,
        }
    }

    fn pool(&self) -> Pool {
        let pool = Pool::create(
            &self.pool_path,
            64 << 20,
            &PoolOptions {
                kdf: KdfParams::INSECURE_FAST,
                ..Default::default()
            },
        )
        .unwrap();
        let mut b = Backend::new(pool.clone(), KEY);
        b.lock_dir = Some(self.locks.clone());
        pmo_lmdb::install(b);
        pool
    }

    fn entries(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.locks)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    fn dir_of(&self, pool: &Pool, name: &str) -> PathBuf {
        self.locks
            .join(lockdir::dir_name(&pool.superblock().uuid, name))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        pmo_lmdb::uninstall();
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

fn put(name: &str, flags: u32) {
    let env = Env::open(
        &format!("pmo:{name}"),
        EnvOptions {
            flags,
            map_size: Some(1 << 20),
        },
    )
    .unwrap();
    env.put1(b"k", name.as_bytes()).unwrap();
}

/// A writer's options, for a PMO of 1 MiB.
fn small() -> EnvOptions {
    EnvOptions {
        flags: 0,
        map_size: Some(1 << 20),
    }
}

fn status_of(root: &Path, dir: &Path) -> (Status, bool) {
    let f = lockdir::scan(root)
        .unwrap()
        .into_iter()
        .find(|f| f.dir == dir)
        .unwrap_or_else(|| panic!("{} not found", dir.display()));
    (f.status, f.in_use)
}

/// An OFD read lock on byte 0 of `file`, as another process's LMDB holds one: the returned
/// descriptor keeps it.
fn hold_read_lock(file: &Path) -> std::fs::File {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(file)
        .unwrap();
    // SAFETY: all-zero is a valid `struct flock`.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_RDLCK as i16;
    fl.l_whence = libc::SEEK_SET as i16;
    fl.l_len = 1;
    // SAFETY: a valid `struct flock` for the call, on a descriptor `f` owns.
    let rc = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_OFD_SETLK, &fl) };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    f
}

#[test]
fn destroyed_pmos_and_pool_leave_nothing_under_the_lock_directory() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let s = Scratch::new("gone");
    let pool = s.pool();
    put("a", 0);
    put("b", 0);
    put("c", ffi::MDB_NOSUBDIR);
    // Reopened read-only: still one directory per PMO.
    drop(
        Env::open(
            "pmo:a",
            EnvOptions {
                flags: ffi::MDB_RDONLY,
                map_size: None,
            },
        )
        .unwrap(),
    );
    let (da, db, dc) = (
        s.dir_of(&pool, "a"),
        s.dir_of(&pool, "b"),
        s.dir_of(&pool, "c"),
    );
    let mut want: Vec<String> = [&da, &db, &dc]
        .iter()
        .map(|d| d.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    want.sort();
    assert_eq!(s.entries(), want);
    // Each holds LMDB's lock file (with MDB_NOSUBDIR too) and an owner file naming its pool.
    assert!(da.join("lock.mdb").is_file() && dc.join("nosubdir-lock").is_file());
    let owner = lockdir::recognise(&da).unwrap();
    assert_eq!(
        owner.pool.as_deref(),
        Some(&*std::fs::canonicalize(&s.pool_path).unwrap())
    );
    assert_eq!(owner.pool_uuid, pool.superblock().uuid);
    assert_eq!(owner.pmo, "a");
    assert_eq!(owner.pmo_uuid, Some(pool.info("a").unwrap().uuid));
    for d in [&da, &db, &dc] {
        assert_eq!(status_of(&s.locks, d), (Status::Live, false));
    }

    // Open in this process: remove leaves it.
    let env = Env::open("pmo:b", EnvOptions::default()).unwrap();
    assert_eq!(lockdir::remove(&db).unwrap(), Removal::InUse);
    assert!(db.join("lock.mdb").is_file());
    drop(env);

    // `pmo destroy`: the PMO goes, then its directory.
    pool.pdestroy("a", KEY).unwrap();
    assert_eq!(
        lockdir::remove_for(&s.locks, &pool, "a").unwrap(),
        Removal::Removed
    );
    assert!(!da.exists());
    assert_eq!(
        lockdir::remove_for(&s.locks, &pool, "a").unwrap(),
        Removal::Absent
    );

    // A PMO destroyed behind its directory's back, then created again: an orphan by uuid.
    pool.pdestroy("b", KEY).unwrap();
    assert_eq!(
        status_of(&s.locks, &db),
        (Status::Orphan(Orphan::PmoGone), false)
    );
    pool.pcreate("b", 1 << 20, KEY).unwrap();
    assert_eq!(
        status_of(&s.locks, &db),
        (Status::Orphan(Orphan::PmoReplaced), false)
    );
    // Opening it again makes the directory its own.
    put("b", 0);
    assert_eq!(status_of(&s.locks, &db), (Status::Live, false));

    // The pool file deleted with PMOs in it: every directory is an orphan, and clean removes them.
    drop(pool);
    pmo_lmdb::uninstall();
    std::fs::remove_file(&s.pool_path).unwrap();
    assert_eq!(
        status_of(&s.locks, &dc),
        (Status::Orphan(Orphan::PoolGone), false)
    );
    let done = lockdir::clean(&s.locks).unwrap();
    assert_eq!(done.len(), 2);
    assert!(
        done.iter().all(|(_, r)| *r == Some(Removal::Removed)),
        "{done:?}"
    );
    assert_eq!(s.entries(), Vec::<String>::new());
    // Nothing else was left beside the lock directory either.
    let left: Vec<_> = std::fs::read_dir(&s.base)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, vec![std::ffi::OsString::from("locks")]);
}

#[test]
fn a_locked_or_foreign_directory_is_never_removed() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let s = Scratch::new("kept");
    let pool = s.pool();
    put("x", 0);
    let dx = s.dir_of(&pool, "x");
    pool.pdestroy("x", KEY).unwrap();

    // Another holder of lock.mdb (an OFD lock stands for another process's LMDB).
    let held = hold_read_lock(&dx.join("lock.mdb"));
    assert_eq!(
        status_of(&s.locks, &dx),
        (Status::Orphan(Orphan::PmoGone), true)
    );
    let done = lockdir::clean(&s.locks).unwrap();
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].1, Some(Removal::InUse));
    assert!(dx.join("lock.mdb").is_file() && dx.join("owner").is_file());
    drop(held);

    // Named like ours but not ours: an owner file that names another directory; a file of
    // another kind inside; no owner file and a file of another kind; no owner file and a name
    // without our hash. None of them is touched.
    let renamed = s.locks.join("pmo-lmdb-y-0000000000000000");
    std::fs::create_dir(&renamed).unwrap();
    std::fs::copy(dx.join("owner"), renamed.join("owner")).unwrap();
    std::fs::write(dx.join("data.mdb"), b"precious").unwrap();
    let bare_data = s.locks.join("pmo-lmdb-data-0123456789abcdef");
    std::fs::create_dir(&bare_data).unwrap();
    std::fs::write(bare_data.join("lock.mdb"), b"").unwrap();
    std::fs::write(bare_data.join("data.mdb"), b"precious").unwrap();
    let unhashed = s.locks.join("pmo-lmdb-nohash");
    std::fs::create_dir(&unhashed).unwrap();
    std::fs::write(unhashed.join("lock.mdb"), b"").unwrap();
    // Made by an older pmo: named as ours, only a lock file, no owner file.
    let bare = s.locks.join("pmo-lmdb-old-0123456789abcdef");
    std::fs::create_dir(&bare).unwrap();
    std::fs::write(bare.join("lock.mdb"), b"").unwrap();
    for d in [&renamed, &dx, &bare_data, &unhashed] {
        assert!(
            matches!(status_of(&s.locks, d).0, Status::NotOurs(_)),
            "{}",
            d.display()
        );
        assert!(matches!(lockdir::remove(d).unwrap(), Removal::NotOurs(_)));
    }
    // The ownerless one is an orphan of unknown pool: kept while a process has it open...
    let held = hold_read_lock(&bare.join("lock.mdb"));
    assert_eq!(status_of(&s.locks, &bare), (Status::Ownerless, true));
    let done = lockdir::clean(&s.locks).unwrap();
    for (f, r) in &done {
        let want = (f.dir == bare).then_some(Removal::InUse);
        assert_eq!(*r, want, "{}", f.dir.display());
    }
    assert!(bare.join("lock.mdb").exists());
    drop(held);
    // ...and removed by the clean once nobody has.
    assert_eq!(status_of(&s.locks, &bare), (Status::Ownerless, false));
    let done = lockdir::clean(&s.locks).unwrap();
    for (f, r) in &done {
        let want = (f.dir == bare).then_some(Removal::Removed);
        assert_eq!(*r, want, "{}", f.dir.display());
    }
    assert!(!bare.exists(), "an unused ownerless directory is removed");
    assert_eq!(std::fs::read(dx.join("data.mdb")).unwrap(), b"precious");
    assert_eq!(
        std::fs::read(bare_data.join("data.mdb")).unwrap(),
        b"precious"
    );
    assert!(renamed.join("owner").exists() && unhashed.join("lock.mdb").exists());

    // Once the stray file is gone the orphan is recognisable again, and removed.
    std::fs::remove_file(dx.join("data.mdb")).unwrap();
    assert_eq!(lockdir::remove(&dx).unwrap(), Removal::Removed);
    assert!(!dx.exists());
}

#[test]
fn closing_an_environment_whose_pool_file_is_gone_removes_its_directory() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let s = Scratch::new("close");
    let pool = s.pool();
    let (da, db) = (s.dir_of(&pool, "a"), s.dir_of(&pool, "b"));
    let a = Env::open("pmo:a", small()).unwrap();
    a.put1(b"k", b"v").unwrap();
    let b = Env::open("pmo:b", small()).unwrap();
    // b's lock file has another holder too (an OFD lock stands for another process's LMDB).
    let held = hold_read_lock(&db.join("lock.mdb"));
    std::fs::remove_file(&s.pool_path).unwrap();
    drop(a);
    assert!(!da.exists(), "the last close left {}", da.display());
    drop(b);
    assert!(
        db.join("lock.mdb").is_file(),
        "removed while another holder had it"
    );
    drop(held);
    // With the pool file still there, a close leaves the directory for the next open.
    drop(pool);
    let pool = s.pool();
    drop(Env::open("pmo:c", small()).unwrap());
    assert!(s.dir_of(&pool, "c").join("lock.mdb").is_file());
}

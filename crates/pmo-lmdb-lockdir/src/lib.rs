//! LMDB's lock directories: where they live, who owns them, and their removal (crate
//! `pmo-lmdb-lockdir`: no LMDB code, so that `pmo destroy`, C's `pmo_destroy` and Python's
//! `destroy` remove a PMO's directory without linking LMDB).
//!
//! Every environment opened on a PMO keeps LMDB's lock file (`lock.mdb`: reader table, writer
//! mutex) in a directory `pmo-lmdb-NAME-HASH/` of the lock directory ([`lock_root`]); HASH binds
//! the pool's uuid and the PMO's name. At open the glue writes an [`Owner`] file beside the lock
//! file (pool path, pool uuid, PMO name and uuid), so a directory whose pool or PMO is gone can be
//! recognised ([`scan`]) and removed ([`remove`], [`clean`]; `pmo destroy` and `pmo lmdb locks`).
//!
//! Removal is safe only when no process has the environment open: every LMDB process holds a
//! read lock on byte 0 of `lock.mdb` for as long as its environment is open, so a non-blocking
//! OFD write lock on that byte succeeds only when nobody does (this process's own environments
//! are known without probing: closing a descriptor of the file would drop LMDB's POSIX lock).
//! Nothing that is not recognisably ours is touched: the directory must be named as ours, owned
//! by this user, hold a parsable owner file whose pool uuid and PMO name give that very name,
//! and hold nothing but the lock file and owner files; or, made by an older pmo before owner
//! files ([`ownerless`]), be named as ours, owned by this user and hold only lock files.
#![allow(unsafe_code)] // Reason: fcntl(F_OFD_SETLK) with a raw `struct flock`; geteuid.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use pmo_store::{Pool, StoreError};

/// Errors of the lock directories.
#[derive(Debug, thiserror::Error)]
pub enum LockDirError {
    /// The pool underneath (its PMO's uuid for the owner file).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A file or directory of a lock directory.
    #[error("LMDB lock file: {0}")]
    Lock(String),
}

/// The start of every lock directory's name.
pub const PREFIX: &str = "pmo-lmdb-";
/// The owner file inside a lock directory.
pub const OWNER_FILE: &str = "owner";
/// The lock file: LMDB's `lock.mdb`, or with `MDB_NOSUBDIR` the glue's base `nosubdir` plus
/// LMDB's suffix `-lock`.
pub const LOCK_FILES: [&str; 2] = ["lock.mdb", "nosubdir-lock"];
/// The base path the glue gives LMDB with `MDB_NOSUBDIR` (LMDB appends `-lock`).
pub const NOSUBDIR_BASE: &str = "nosubdir";
const OWNER_TMP: &str = "owner.tmp.";
const MAGIC: &str = "pmo-lmdb lock directory 1";

/// The lock directory's parent: `PMO_LMDB_LOCKDIR`, else `/dev/shm`, else the temporary
/// directory (a `pmo_lmdb::Backend`'s `lock_dir` overrides it for its environments).
pub fn lock_root() -> PathBuf {
    match std::env::var_os("PMO_LMDB_LOCKDIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ if Path::new("/dev/shm").is_dir() => PathBuf::from("/dev/shm"),
        _ => std::env::temp_dir(),
    }
}

/// The name of the lock directory of PMO `name` in the pool of uuid `pool_uuid`.
pub fn dir_name(pool_uuid: &[u8; 16], name: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in pool_uuid.iter().chain(name.as_bytes()) {
        h = (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
    }
    let clean: String = name
        .chars()
        .take(48)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{PREFIX}{clean}-{h:016x}")
}

/// Who a lock directory belongs to, as its owner file records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    /// The pool file's canonical path (`None`: a pool with no file, e.g. in memory).
    pub pool: Option<PathBuf>,
    pub pool_uuid: [u8; 16],
    pub pmo: String,
    /// The PMO's uuid when the environment was opened.
    pub pmo_uuid: Option<[u8; 16]>,
}

impl Owner {
    /// The owner of PMO `name`'s environment in `pool`.
    pub fn of(pool: &Pool, name: &str) -> Result<Owner, LockDirError> {
        let info = pool.pool_info()?;
        let pool_path = info.path.map(|p| std::fs::canonicalize(&p).unwrap_or(p));
        let pmo_uuid = match pool.info(name) {
            Ok(i) => Some(i.uuid),
            Err(StoreError::NotFound(_)) => None,
            Err(e) => return Err(e.into()),
        };
        Ok(Owner {
            pool: pool_path,
            pool_uuid: info.uuid,
            pmo: name.to_string(),
            pmo_uuid,
        })
    }

    fn encode(&self) -> String {
        let pool = self
            .pool
            .as_ref()
            .map_or(String::new(), |p| escape(p.as_os_str().as_bytes()));
        let pmo_uuid = self.pmo_uuid.as_ref().map_or(String::new(), hex);
        format!(
            "{MAGIC}\npool={pool}\npool-uuid={}\npmo={}\npmo-uuid={pmo_uuid}\n",
            hex(&self.pool_uuid),
            escape(self.pmo.as_bytes())
        )
    }

    /// The owner file's text, or `None` when it is not one.
    pub fn parse(text: &str) -> Option<Owner> {
        let mut lines = text.lines();
        if lines.next()? != MAGIC {
            return None;
        }
        let mut fields = HashMap::new();
        for l in lines {
            let (k, v) = l.split_once('=')?;
            fields.insert(k, v);
        }
        let pool = unescape(fields.get("pool")?)?;
        let pmo = String::from_utf8(unescape(fields.get("pmo")?)?).ok()?;
        let pmo_uuid = match *fields.get("pmo-uuid")? {
            "" => None,
            h => Some(unhex(h)?),
        };
        Some(Owner {
            pool: (!pool.is_empty()).then(|| PathBuf::from(std::ffi::OsString::from_vec(pool))),
            pool_uuid: unhex(fields.get("pool-uuid")?)?,
            pmo,
            pmo_uuid,
        })
    }
}

fn hex(b: &[u8; 16]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<[u8; 16]> {
    if s.len() != 32 || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// Bytes outside printable ASCII, and `%`, as `%XX`: one line whatever the path or name holds.
fn escape(b: &[u8]) -> String {
    let mut s = String::new();
    for &c in b {
        if (c.is_ascii_graphic() && c != b'%') || c == b' ' {
            s.push(c as char);
        } else {
            s.push_str(&format!("%{c:02X}"));
        }
    }
    s
}

fn unescape(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            out.push(u8::from_str_radix(s.get(i + 1..i + 3)?, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out)
}

/// The lock directories this process's environments have open, with how many each.
static OPEN_HERE: Mutex<Vec<(PathBuf, usize)>> = Mutex::new(Vec::new());

/// Create PMO `owner.pmo`'s lock directory under `root` (if missing), record its owner, and
/// count it open in this process until [`release`]. Returns the directory.
pub fn prepare(root: &Path, owner: &Owner) -> Result<PathBuf, LockDirError> {
    let dir = root.join(dir_name(&owner.pool_uuid, &owner.pmo));
    let err = |e: std::io::Error, p: &Path| LockDirError::Lock(format!("{}: {e}", p.display()));
    std::fs::create_dir_all(&dir).map_err(|e| err(e, &dir))?;
    // Written whole and renamed: a reader never sees half an owner file.
    let tmp = dir.join(format!("{OWNER_TMP}{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut f = File::create(&tmp)?;
        f.write_all(owner.encode().as_bytes())?;
        std::fs::rename(&tmp, dir.join(OWNER_FILE))
    };
    if let Err(e) = write() {
        let _ = std::fs::remove_file(&tmp);
        return Err(err(e, &dir.join(OWNER_FILE)));
    }
    let mut open = OPEN_HERE.lock().unwrap_or_else(|e| e.into_inner());
    match open.iter_mut().find(|(p, _)| *p == dir) {
        Some((_, n)) => *n += 1,
        None => open.push((dir.clone(), 1)),
    }
    Ok(dir)
}

/// This process closed an environment of `dir` (from [`prepare`]).
pub fn release(dir: &Path) {
    let mut open = OPEN_HERE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(i) = open.iter().position(|(p, _)| p == dir) {
        open[i].1 -= 1;
        if open[i].1 == 0 {
            open.swap_remove(i);
        }
    }
}

fn open_here(dir: &Path) -> bool {
    OPEN_HERE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .any(|(p, _)| p == dir)
}

/// A `struct flock` of type `kind` over byte 0.
fn byte0(kind: i32) -> libc::flock {
    // SAFETY: `libc::flock` is a plain C struct for which all-zero bytes are a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as i16;
    fl.l_whence = libc::SEEK_SET as i16;
    fl.l_start = 0;
    fl.l_len = 1;
    fl
}

/// The lock files of `dir` locked for writing (byte 0, OFD, not waiting), held until dropped;
/// `None` when a process has one of them locked: an environment is open.
fn lock_all(dir: &Path) -> std::io::Result<Option<Vec<File>>> {
    if open_here(dir) {
        return Ok(None);
    }
    let mut held = Vec::new();
    for name in LOCK_FILES {
        let f = match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(dir.join(name))
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        let fl = byte0(libc::F_WRLCK);
        // SAFETY: F_OFD_SETLK reads a valid `struct flock` that lives for the call, on a
        // descriptor `f` owns.
        if unsafe { libc::fcntl(f.as_raw_fd(), libc::F_OFD_SETLK, &fl) } != 0 {
            let e = std::io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN | libc::EACCES) => Ok(None),
                _ => Err(e),
            };
        }
        held.push(f);
    }
    Ok(Some(held))
}

/// Whether a process has an environment of lock directory `dir` open.
pub fn in_use(dir: &Path) -> std::io::Result<bool> {
    lock_all(dir).map(|held| held.is_none())
}

/// `dir` is a directory (not a link) owned by this user, else why not.
fn own_directory(dir: &Path) -> Result<(), String> {
    let meta = std::fs::symlink_metadata(dir).map_err(|e| e.to_string())?;
    if !meta.is_dir() {
        return Err("not a directory".into());
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    if meta.uid() != unsafe { libc::geteuid() } {
        return Err("owned by another user".into());
    }
    Ok(())
}

/// `dir`'s owner when it is recognisably a lock directory of ours, else why not.
pub fn recognise(dir: &Path) -> Result<Owner, String> {
    own_directory(dir)?;
    let base = dir.file_name().map(|n| n.to_string_lossy().into_owned());
    let text = std::fs::read_to_string(dir.join(OWNER_FILE)).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => "no owner file: made before pmo wrote them".to_string(),
        _ => format!("owner file unreadable: {e}"),
    })?;
    let owner = Owner::parse(&text).ok_or("owner file not understood")?;
    if base.as_deref() != Some(dir_name(&owner.pool_uuid, &owner.pmo).as_str()) {
        return Err("name does not match its owner file".into());
    }
    for e in std::fs::read_dir(dir).map_err(|e| e.to_string())? {
        let n = e.map_err(|e| e.to_string())?.file_name();
        let n = n.to_string_lossy();
        if n != OWNER_FILE && !LOCK_FILES.contains(&&*n) && !n.starts_with(OWNER_TMP) {
            return Err(format!("holds a file of another kind ({n})"));
        }
    }
    Ok(owner)
}

/// Whether `dir` is a lock directory an older pmo made before owner files existed: named as
/// ours (`pmo-lmdb-NAME-HASH`, HASH 16 hex digits), owned by this user, no owner file, nothing
/// in it but LMDB's lock files. Its pool is unknown, but a lock file no process has open holds
/// nothing an environment needs (the next open makes a new one), so an unused one may go.
pub fn ownerless(dir: &Path) -> bool {
    let shaped = dir
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|b| b.strip_prefix(PREFIX))
        .and_then(|rest| rest.rsplit_once('-'))
        .is_some_and(|(_, h)| {
            h.len() == 16
                && h.bytes()
                    .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
        });
    if !shaped || own_directory(dir).is_err() {
        return false;
    }
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .into_iter()
            .all(|e| e.is_ok_and(|e| LOCK_FILES.contains(&&*e.file_name().to_string_lossy())))
    })
}

/// What [`remove`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Removal {
    Removed,
    /// No such directory.
    Absent,
    /// A process has the environment open: left.
    InUse,
    /// Not recognisably ours (why): left untouched.
    NotOurs(String),
    /// The removal failed midway ([`clean`] only: [`remove`] returns the error).
    Failed(String),
}

/// Remove lock directory `dir` if it is ours (or [`ownerless`]) and no process has its
/// environment open. The lock files stay locked until the directory is gone, so no environment
/// opens on them midway.
pub fn remove(dir: &Path) -> Result<Removal, LockDirError> {
    if std::fs::symlink_metadata(dir).is_err() {
        return Ok(Removal::Absent);
    }
    if let Err(why) = recognise(dir) {
        if !ownerless(dir) {
            return Ok(Removal::NotOurs(why));
        }
    }
    let err = |e: std::io::Error| LockDirError::Lock(format!("{}: {e}", dir.display()));
    let Some(_held) = lock_all(dir).map_err(err)? else {
        return Ok(Removal::InUse);
    };
    remove_files(dir)?;
    Ok(Removal::Removed)
}

/// At the close of an environment whose pool file is gone (deleted while it was open): remove
/// its lock directory unless another process has the environment open. Called while LMDB in
/// this process still holds its own lock on the file, so the probe is `F_GETLK`, which ignores
/// this process's POSIX locks (closing the probe's descriptor drops them: harmless, LMDB is
/// closing that environment). Another environment of this process on it keeps it.
pub fn remove_at_close(dir: &Path) -> Result<Removal, LockDirError> {
    if open_here(dir) {
        return Ok(Removal::InUse);
    }
    if let Err(why) = recognise(dir) {
        return Ok(Removal::NotOurs(why));
    }
    let err = |e: std::io::Error| LockDirError::Lock(format!("{}: {e}", dir.display()));
    for name in LOCK_FILES {
        let f = match File::open(dir.join(name)) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(err(e)),
        };
        let mut fl = byte0(libc::F_WRLCK);
        // SAFETY: F_GETLK reads and writes a valid `struct flock` that lives for the call, on a
        // descriptor `f` owns.
        if unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETLK, &mut fl) } != 0 {
            return Err(err(std::io::Error::last_os_error()));
        }
        if fl.l_type != libc::F_UNLCK as i16 {
            return Ok(Removal::InUse);
        }
    }
    remove_files(dir)?;
    Ok(Removal::Removed)
}

fn remove_files(dir: &Path) -> Result<(), LockDirError> {
    let err = |e: std::io::Error| LockDirError::Lock(format!("{}: {e}", dir.display()));
    for e in std::fs::read_dir(dir).map_err(err)? {
        let p = e.map_err(err)?.path();
        match std::fs::remove_file(&p) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(err(e)),
            _ => {}
        }
    }
    std::fs::remove_dir(dir).map_err(err)
}

/// After PMO `name` of `pool` was destroyed: remove its lock directory under `root`.
pub fn remove_for(root: &Path, pool: &Pool, name: &str) -> Result<Removal, LockDirError> {
    remove(&root.join(dir_name(&pool.superblock().uuid, name)))
}

/// Why a lock directory is no longer needed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Orphan {
    /// No file at the pool's path.
    PoolGone,
    /// Another pool (another uuid) at the pool's path.
    PoolReplaced,
    /// The pool has no PMO of that name.
    PmoGone,
    /// The PMO of that name is another one (destroyed and created again).
    PmoReplaced,
}

impl std::fmt::Display for Orphan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Orphan::PoolGone => "pool gone",
            Orphan::PoolReplaced => "another pool at its path",
            Orphan::PmoGone => "PMO gone",
            Orphan::PmoReplaced => "PMO uuid mismatch",
        })
    }
}

/// A lock directory's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    /// Its PMO exists.
    Live,
    Orphan(Orphan),
    /// Its pool could not be opened, or has no path: kept (why).
    Unknown(String),
    /// Made by an older pmo, before owner files ([`ownerless`]): its pool is unknown; removed
    /// by [`clean`] when no process uses it.
    Ownerless,
    /// Named like ours but not recognisably ours: never touched (why).
    NotOurs(String),
}

/// One directory [`scan`] found.
#[derive(Clone, Debug)]
pub struct Found {
    pub dir: PathBuf,
    pub owner: Option<Owner>,
    pub status: Status,
    /// A process has its environment open (probed for orphans and ownerless ones only;
    /// `false` otherwise).
    pub in_use: bool,
}

type PoolState = Result<([u8; 16], Vec<(String, [u8; 16])>), Orphan>;

fn pool_state(path: &Path) -> Result<PoolState, String> {
    if let Err(e) = std::fs::metadata(path) {
        if e.kind() == std::io::ErrorKind::NotFound {
            return Ok(Err(Orphan::PoolGone));
        }
        return Err(e.to_string());
    }
    let pool = match Pool::open(path) {
        Ok(p) => p,
        Err(StoreError::NoPool { .. }) => return Ok(Err(Orphan::PoolGone)),
        Err(e) => return Err(e.to_string()),
    };
    let pmos = pool.list().map_err(|e| e.to_string())?;
    Ok(Ok((
        pool.superblock().uuid,
        pmos.into_iter().map(|i| (i.name, i.uuid)).collect(),
    )))
}

/// Every directory under `root` named like a lock directory, with its status; each pool is
/// opened once (opening recovers it, as `pmo list` does).
pub fn scan(root: &Path) -> Result<Vec<Found>, LockDirError> {
    let err = |e: std::io::Error| LockDirError::Lock(format!("{}: {e}", root.display()));
    let mut dirs: Vec<PathBuf> = Vec::new();
    let rd = match std::fs::read_dir(root) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        r => r.map_err(err)?,
    };
    for e in rd {
        let e = e.map_err(err)?;
        if e.file_name().as_bytes().starts_with(PREFIX.as_bytes()) {
            dirs.push(e.path());
        }
    }
    dirs.sort();
    let mut pools: HashMap<PathBuf, Result<PoolState, String>> = HashMap::new();
    let mut found = Vec::new();
    for dir in dirs {
        // Only directories: a pool file named pmo-lmdb-* (the tests' own) is no lock directory.
        if !std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) {
            continue;
        }
        let owner = match recognise(&dir) {
            Ok(o) => o,
            Err(_) if ownerless(&dir) => {
                let in_use = in_use(&dir).unwrap_or(true);
                found.push(Found {
                    dir,
                    owner: None,
                    status: Status::Ownerless,
                    in_use,
                });
                continue;
            }
            Err(why) => {
                found.push(Found {
                    dir,
                    owner: None,
                    status: Status::NotOurs(why),
                    in_use: false,
                });
                continue;
            }
        };
        let status = match &owner.pool {
            None => Status::Unknown("its pool has no file".into()),
            Some(p) => match pools.entry(p.clone()).or_insert_with(|| pool_state(p)) {
                Err(e) => Status::Unknown(e.clone()),
                Ok(Err(o)) => Status::Orphan(o.clone()),
                Ok(Ok((uuid, _))) if *uuid != owner.pool_uuid => {
                    Status::Orphan(Orphan::PoolReplaced)
                }
                Ok(Ok((_, pmos))) => match pmos.iter().find(|(n, _)| *n == owner.pmo) {
                    None => Status::Orphan(Orphan::PmoGone),
                    Some((_, u)) if owner.pmo_uuid.is_some_and(|o| o != *u) => {
                        Status::Orphan(Orphan::PmoReplaced)
                    }
                    Some(_) => Status::Live,
                },
            },
        };
        let in_use = matches!(status, Status::Orphan(_)) && in_use(&dir).unwrap_or(true);
        found.push(Found {
            dir,
            owner: Some(owner),
            status,
            in_use,
        });
    }
    Ok(found)
}

/// [`scan`], then remove every orphan and ownerless directory no process uses; returns each
/// directory found with what was done to it (`None`: not an orphan, left). A parent that does not exist holds none.
pub fn clean(root: &Path) -> Result<Vec<(Found, Option<Removal>)>, LockDirError> {
    let mut out = Vec::new();
    for f in scan(root)? {
        let done = match f.status {
            Status::Orphan(_) | Status::Ownerless => {
                Some(remove(&f.dir).unwrap_or_else(|e| Removal::Failed(e.to_string())))
            }
            _ => None,
        };
        out.push((f, done));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_file_round_trips_odd_paths_and_names() {
        let o = Owner {
            pool: Some(PathBuf::from("/tmp/a b%c\nd/p.pool")),
            pool_uuid: [7; 16],
            pmo: "db=1\n%é".into(),
            pmo_uuid: Some([9; 16]),
        };
        let text = o.encode();
        assert_eq!(text.lines().count(), 5, "{text}");
        assert_eq!(Owner::parse(&text), Some(o.clone()));
        let none = Owner {
            pool: None,
            pmo_uuid: None,
            ..o
        };
        assert_eq!(Owner::parse(&none.encode()), Some(none));
        assert_eq!(Owner::parse("something else\npool=/x\n"), None);
        assert_eq!(
            Owner::parse(&text.replace("pool-uuid=07", "pool-uuid=zz")),
            None
        );
    }
}

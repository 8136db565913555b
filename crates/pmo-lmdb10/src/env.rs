//! A small safe API over LMDB 1.0.2 with page encryption: one unnamed database, puts, gets,
//! deletes, cursor walks.
#![allow(unsafe_code)] // Reason: calls into LMDB's C API.

use std::ffi::{c_int, c_uint, CStr, CString};
use std::path::{Path, PathBuf};
use std::ptr;

use crate::cipher::{self, KdfParams, PageCipher};
use crate::ffi::{self, MDB_val};
use crate::Lmdb10Error;

/// How to open an environment.
#[derive(Clone, Copy, Debug)]
pub struct EnvOptions {
    /// LMDB flags (`ffi::MDB_*`): `MDB_RDONLY`, `MDB_NOSYNC`... (`MDB_NOTLS` is always added;
    /// `MDB_WRITEMAP` is ignored by LMDB 1.0 under encryption.)
    pub flags: u32,
    /// The map size (LMDB's default, 1 MiB, when `None`).
    pub map_size: Option<usize>,
    /// Argon2id's parameters for a new environment (an existing one keeps its own).
    pub kdf: KdfParams,
}

impl Default for EnvOptions {
    fn default() -> EnvOptions {
        EnvOptions {
            flags: 0,
            map_size: None,
            kdf: KdfParams::DEFAULT,
        }
    }
}

/// An open encrypted LMDB 1.0 environment (a directory: `data.mdb`, `lock.mdb`, the KDF file).
pub struct Env {
    raw: *mut ffi::MDB_env,
    dbi: ffi::MDB_dbi,
    path: PathBuf,
    // Dropped after `raw` is closed (Drop::drop runs before the fields): LMDB holds its address.
    _cipher: Box<PageCipher>,
}

// SAFETY: an MDB_env may be used from any thread (LMDB's rule; write transactions are serialised
// by its writer mutex, and it is opened MDB_NOTLS so read transactions are not tied to a thread);
// the cipher is Sync.
unsafe impl Send for Env {}
// SAFETY: as above: every method takes LMDB's own locks.
unsafe impl Sync for Env {}

fn check(what: &'static str, rc: c_int) -> Result<(), Lmdb10Error> {
    if rc == 0 {
        return Ok(());
    }
    Err(Lmdb10Error::Mdb {
        what,
        code: rc,
        msg: strerror(rc),
    })
}

/// LMDB 1.0's message for an error code.
pub fn strerror(rc: c_int) -> String {
    // SAFETY: mdb_strerror returns a static or thread-local NUL-terminated string.
    unsafe { CStr::from_ptr(ffi::mdb_strerror(rc)) }
        .to_string_lossy()
        .into_owned()
}

/// The linked LMDB's version string and (major, minor, patch).
pub fn version() -> (String, (i32, i32, i32)) {
    let (mut a, mut b, mut c) = (0, 0, 0);
    // SAFETY: out-pointers to locals; the result is a static NUL-terminated string.
    let s = unsafe { CStr::from_ptr(ffi::mdb_version(&mut a, &mut b, &mut c)) };
    (s.to_string_lossy().into_owned(), (a, b, c))
}

fn val(bytes: &[u8]) -> MDB_val {
    MDB_val {
        mv_size: bytes.len(),
        mv_data: bytes.as_ptr().cast_mut().cast(),
    }
}

const EMPTY: MDB_val = MDB_val {
    mv_size: 0,
    mv_data: ptr::null_mut(),
};

/// # Safety
/// `v` was filled by LMDB inside a transaction that is still live for `'a`.
unsafe fn slice<'a>(v: &MDB_val) -> &'a [u8] {
    if v.mv_size == 0 {
        return &[];
    }
    // SAFETY: the caller's contract: LMDB's value points into its (decrypted) page cache for the
    // transaction's life.
    unsafe { std::slice::from_raw_parts(v.mv_data.cast::<u8>(), v.mv_size) }
}

impl Env {
    /// Open (a writer creates) the encrypted environment in directory `dir` (made if absent and
    /// not read-only), its key derived from `passphrase`. A wrong passphrase is
    /// [`Lmdb10Error::WrongKey`].
    pub fn open(dir: &Path, passphrase: &[u8], opts: EnvOptions) -> Result<Env, Lmdb10Error> {
        let rdonly = opts.flags & ffi::MDB_RDONLY != 0;
        if !rdonly {
            std::fs::create_dir_all(dir).map_err(|source| Lmdb10Error::Io {
                op: "create",
                path: dir.into(),
                source,
            })?;
        }
        let cpath = CString::new(dir.as_os_str().as_encoded_bytes())
            .map_err(|_| Lmdb10Error::Usage("path holds a NUL".into()))?;
        let key = cipher::derive(dir, passphrase, opts.kdf, !rdonly)?;
        let cipher = PageCipher::new(&key)?;
        drop(key); // Zeroizing: wiped; the AWS-LC context holds the schedule.
        let mut raw = ptr::null_mut();
        // SAFETY: out-pointer to a local.
        check("mdb_env_create", unsafe { ffi::mdb_env_create(&mut raw) })?;
        let env = Env {
            raw,
            dbi: 0,
            path: dir.into(),
            _cipher: cipher,
        };
        let handle = cipher::lmdb_key(&env._cipher);
        let k = val(&handle);
        // SAFETY: live unopened env; LMDB copies the 8 key bytes; the callback's contract holds
        // while `env` lives (it owns the cipher and closes LMDB before dropping it).
        check("mdb_env_set_encrypt", unsafe {
            ffi::mdb_env_set_encrypt(raw, cipher::enc_func, &k, cipher::TAG_LEN as c_uint)
        })?;
        if let Some(size) = opts.map_size {
            // SAFETY: live, unopened env.
            check("mdb_env_set_mapsize", unsafe {
                ffi::mdb_env_set_mapsize(raw, size)
            })?;
        }
        // SAFETY: live env, NUL-terminated path. On failure `env`'s Drop closes it.
        let rc =
            unsafe { ffi::mdb_env_open(raw, cpath.as_ptr(), opts.flags | ffi::MDB_NOTLS, 0o664) };
        check("mdb_env_open", rc)?;
        let mut env = env;
        let txn = env.begin(rdonly)?;
        let mut dbi = 0;
        // SAFETY: live txn; NULL name is the main database.
        check("mdb_dbi_open", unsafe {
            ffi::mdb_dbi_open(txn.raw, ptr::null(), 0, &mut dbi)
        })?;
        txn.commit()?;
        env.dbi = dbi;
        Ok(env)
    }

    /// The environment's directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Begin a transaction (read-only or read-write).
    pub fn begin(&self, rdonly: bool) -> Result<Txn<'_>, Lmdb10Error> {
        let mut raw = ptr::null_mut();
        let flags: c_uint = if rdonly { ffi::MDB_RDONLY } else { 0 };
        // SAFETY: live env, out-pointer to a local.
        check("mdb_txn_begin", unsafe {
            ffi::mdb_txn_begin(self.raw, ptr::null_mut(), flags, &mut raw)
        })?;
        Ok(Txn { env: self, raw })
    }

    /// One key per transaction: put `key` = `value` and commit (durable when it returns, unless
    /// the environment was opened `MDB_NOSYNC`).
    pub fn put1(&self, key: &[u8], value: &[u8]) -> Result<(), Lmdb10Error> {
        let mut t = self.begin(false)?;
        t.put(key, value)?;
        t.commit()
    }

    /// The value of `key` in a read transaction of its own.
    pub fn get1(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Lmdb10Error> {
        self.begin(true)?.get(key)
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        // SAFETY: `raw` came from mdb_env_create; every Txn borrows the Env, so none is live.
        unsafe { ffi::mdb_env_close(self.raw) };
    }
}

/// A transaction of an [`Env`]; aborted when dropped without [`Txn::commit`].
pub struct Txn<'e> {
    env: &'e Env,
    raw: *mut ffi::MDB_txn,
}

impl Txn<'_> {
    /// The value of `key`, copied out.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Lmdb10Error> {
        let mut out = None;
        self.walk_one(key, |v| out = Some(v.to_vec()))?;
        Ok(out)
    }

    /// Call `f` with the value of `key` in place (no copy); false if absent.
    pub fn walk_one(&self, key: &[u8], f: impl FnOnce(&[u8])) -> Result<bool, Lmdb10Error> {
        let mut k = val(key);
        let mut v = EMPTY;
        // SAFETY: live txn and dbi; LMDB only reads `k`.
        match unsafe { ffi::mdb_get(self.raw, self.env.dbi, &mut k, &mut v) } {
            ffi::MDB_NOTFOUND => Ok(false),
            rc => {
                check("mdb_get", rc)?;
                // SAFETY: filled by mdb_get in this live txn.
                f(unsafe { slice(&v) });
                Ok(true)
            }
        }
    }

    /// Put `key` = `value` (a write transaction).
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), Lmdb10Error> {
        let (mut k, mut v) = (val(key), val(value));
        // SAFETY: live write txn and dbi; LMDB copies key and value.
        check("mdb_put", unsafe {
            ffi::mdb_put(self.raw, self.env.dbi, &mut k, &mut v, 0)
        })
    }

    /// Delete `key`; false if it was absent.
    pub fn del(&mut self, key: &[u8]) -> Result<bool, Lmdb10Error> {
        let mut k = val(key);
        // SAFETY: live write txn and dbi; NULL data deletes every value of the key.
        match unsafe { ffi::mdb_del(self.raw, self.env.dbi, &mut k, ptr::null_mut()) } {
            ffi::MDB_NOTFOUND => Ok(false),
            rc => check("mdb_del", rc).map(|()| true),
        }
    }

    /// Walk the records in key order from the first key >= `start` (from the first when
    /// `None`), calling `f(key, value)` until it returns false; returns how many it saw.
    pub fn walk(
        &self,
        start: Option<&[u8]>,
        mut f: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize, Lmdb10Error> {
        let mut cur = ptr::null_mut();
        // SAFETY: live txn and dbi, out-pointer to a local.
        check("mdb_cursor_open", unsafe {
            ffi::mdb_cursor_open(self.raw, self.env.dbi, &mut cur)
        })?;
        let (mut k, mut v) = (start.map_or(EMPTY, val), EMPTY);
        let mut op = if start.is_some() {
            ffi::MDB_SET_RANGE
        } else {
            ffi::MDB_FIRST
        };
        let mut n = 0;
        let r = loop {
            // SAFETY: live cursor; `k` points at the caller's start key (only read) or is
            // LMDB's own output from the previous step.
            match unsafe { ffi::mdb_cursor_get(cur, &mut k, &mut v, op) } {
                ffi::MDB_NOTFOUND => break Ok(n),
                0 => {}
                rc => break check("mdb_cursor_get", rc).map(|()| n),
            }
            n += 1;
            // SAFETY: filled by mdb_cursor_get in this live txn.
            if !f(unsafe { slice(&k) }, unsafe { slice(&v) }) {
                break Ok(n);
            }
            op = ffi::MDB_NEXT;
        };
        // SAFETY: opened above in this txn; closed once.
        unsafe { ffi::mdb_cursor_close(cur) };
        r
    }

    /// Commit (a read transaction just ends).
    pub fn commit(self) -> Result<(), Lmdb10Error> {
        let raw = self.raw;
        std::mem::forget(self);
        // SAFETY: live txn, consumed here (not aborted by Drop).
        check("mdb_txn_commit", unsafe { ffi::mdb_txn_commit(raw) })
    }
}

impl Drop for Txn<'_> {
    fn drop(&mut self) {
        // SAFETY: live txn never committed.
        unsafe { ffi::mdb_txn_abort(self.raw) };
    }
}

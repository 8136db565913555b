//! A small safe Rust API over the patched LMDB: enough for the tests, the YCSB store and the
//! benchmarks (one unnamed database, puts, gets, deletes, cursor walks).
#![allow(unsafe_code)] // Reason: calls into LMDB's C API.

use std::ffi::{c_int, c_uint, CStr, CString};
use std::ptr;

use crate::ffi::{self, MDB_val};
use crate::{glue, LmdbError};

/// How to open an environment.
#[derive(Clone, Copy, Debug, Default)]
pub struct EnvOptions {
    /// LMDB flags (`ffi::MDB_*`): `MDB_RDONLY`, `MDB_NOSYNC`, `MDB_WRITEMAP`, `MDB_NOSUBDIR`...
    pub flags: u32,
    /// Map size (for a PMO: the size of a PMO the open creates; an existing PMO's size wins).
    pub map_size: Option<usize>,
}

/// An open LMDB environment (on a PMO when its path names one: `pmo:NAME`).
pub struct Env {
    raw: *mut ffi::MDB_env,
    dbi: ffi::MDB_dbi,
}

// SAFETY: an MDB_env may be used from any thread (LMDB's own rule; write transactions are
// serialised by its writer mutex, and we open with MDB_NOTLS so read transactions are not tied
// to a thread).
unsafe impl Send for Env {}
// SAFETY: as above: every method takes LMDB's own locks.
unsafe impl Sync for Env {}

fn check(what: &'static str, rc: c_int) -> Result<(), LmdbError> {
    if rc == 0 {
        return Ok(());
    }
    // A failed hook said why in its own words (a wrong key, a busy PMO...): prefer them.
    if let Some((msg, _)) = glue::last_error() {
        glue::clear_last_error();
        return Err(LmdbError::Mdb {
            what,
            code: rc,
            msg,
        });
    }
    Err(LmdbError::Mdb {
        what,
        code: rc,
        msg: strerror(rc),
    })
}

/// LMDB's message for an error code.
pub fn strerror(rc: c_int) -> String {
    // SAFETY: mdb_strerror returns a static or thread-local NUL-terminated string.
    unsafe { CStr::from_ptr(ffi::mdb_strerror(rc)) }
        .to_string_lossy()
        .into_owned()
}

fn val(bytes: &[u8]) -> MDB_val {
    MDB_val {
        mv_size: bytes.len(),
        mv_data: bytes.as_ptr().cast_mut().cast(),
    }
}

/// # Safety
/// `v` was filled by LMDB inside a transaction that is still live for `'a`.
unsafe fn slice<'a>(v: &MDB_val) -> &'a [u8] {
    if v.mv_size == 0 {
        return &[];
    }
    // SAFETY: the caller's contract: LMDB's value points into the map for the txn's life.
    unsafe { std::slice::from_raw_parts(v.mv_data.cast::<u8>(), v.mv_size) }
}

impl Env {
    /// Open the environment at `path` (`pmo:NAME` for a PMO; the directory must exist for a file
    /// environment without `MDB_NOSUBDIR`).
    pub fn open(path: &str, opts: EnvOptions) -> Result<Env, LmdbError> {
        let cpath = CString::new(path).map_err(|_| LmdbError::Usage("path holds a NUL".into()))?;
        let mut raw = ptr::null_mut();
        // SAFETY: out-pointer to a local.
        check("mdb_env_create", unsafe { ffi::mdb_env_create(&mut raw) })?;
        let mut env = Env { raw, dbi: 0 };
        if let Some(size) = opts.map_size {
            // SAFETY: `raw` is a live, unopened env.
            check("mdb_env_set_mapsize", unsafe {
                ffi::mdb_env_set_mapsize(raw, size)
            })?;
        }
        glue::clear_last_error();
        // SAFETY: live env, NUL-terminated path. On failure `env`'s Drop closes it.
        let rc =
            unsafe { ffi::mdb_env_open(raw, cpath.as_ptr(), opts.flags | ffi::MDB_NOTLS, 0o664) };
        check("mdb_env_open", rc)?;
        // Open the unnamed database once, in a transaction of its own.
        let txn = env.begin(opts.flags & ffi::MDB_RDONLY != 0)?;
        let mut dbi = 0;
        // SAFETY: live txn; NULL name is the main database.
        check("mdb_dbi_open", unsafe {
            ffi::mdb_dbi_open(txn.raw, ptr::null(), 0, &mut dbi)
        })?;
        txn.commit()?;
        env.dbi = dbi;
        Ok(env)
    }

    /// Begin a transaction (read-only or read-write).
    pub fn begin(&self, rdonly: bool) -> Result<Txn<'_>, LmdbError> {
        let mut raw = ptr::null_mut();
        let flags: c_uint = if rdonly { ffi::MDB_RDONLY } else { 0 };
        // SAFETY: live env, out-pointer to a local.
        check("mdb_txn_begin", unsafe {
            ffi::mdb_txn_begin(self.raw, ptr::null_mut(), flags, &mut raw)
        })?;
        Ok(Txn { env: self, raw })
    }

    /// `mdb_env_sync(force)`: with `MDB_NOSYNC`, make earlier commits durable.
    pub fn sync(&self) -> Result<(), LmdbError> {
        // SAFETY: live env.
        check("mdb_env_sync", unsafe { ffi::mdb_env_sync(self.raw, 1) })
    }

    /// `mdb_env_get_flags`: the flags the environment runs with (`MDB_WRITEMAP`...).
    pub fn flags(&self) -> Result<u32, LmdbError> {
        let mut f: c_uint = 0;
        // SAFETY: live env, out-pointer to a local.
        check("mdb_env_get_flags", unsafe {
            ffi::mdb_env_get_flags(self.raw, &mut f)
        })?;
        Ok(f)
    }

    /// `mdb_env_stat` of the environment.
    pub fn stat(&self) -> Result<ffi::MDB_stat, LmdbError> {
        let mut st = ffi::MDB_stat::default();
        // SAFETY: live env, out-pointer to a local.
        check("mdb_env_stat", unsafe {
            ffi::mdb_env_stat(self.raw, &mut st)
        })?;
        Ok(st)
    }

    /// `mdb_env_set_mapsize` of the open environment: takes `&mut self`, so no transaction
    /// of this `Env` runs (LMDB's condition). On a PMO a writer grows the PMO (in place
    /// within its layout capacity, else moved, at the same address where it is free).
    pub fn set_map_size(&mut self, size: usize) -> Result<(), LmdbError> {
        glue::clear_last_error();
        // SAFETY: live env, no transaction of it runs (exclusive borrow).
        check("mdb_env_set_mapsize", unsafe {
            ffi::mdb_env_set_mapsize(self.raw, size)
        })
    }

    /// `mdb_env_info`: the map's address and size, the last page and txnid, the readers.
    pub fn info(&self) -> Result<ffi::MDB_envinfo, LmdbError> {
        let mut info = ffi::MDB_envinfo {
            me_mapaddr: ptr::null_mut(),
            me_mapsize: 0,
            me_last_pgno: 0,
            me_last_txnid: 0,
            me_maxreaders: 0,
            me_numreaders: 0,
        };
        // SAFETY: live env, out-pointer to a local.
        check("mdb_env_info", unsafe {
            ffi::mdb_env_info(self.raw, &mut info)
        })?;
        Ok(info)
    }

    /// One key per transaction: put `key` = `value` and commit.
    pub fn put1(&self, key: &[u8], value: &[u8]) -> Result<(), LmdbError> {
        let mut t = self.begin(false)?;
        t.put(key, value)?;
        t.commit()
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
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, LmdbError> {
        let mut k = val(key);
        let mut v = MDB_val {
            mv_size: 0,
            mv_data: ptr::null_mut(),
        };
        // SAFETY: live txn and dbi; LMDB only reads `k`.
        match unsafe { ffi::mdb_get(self.raw, self.env.dbi, &mut k, &mut v) } {
            ffi::MDB_NOTFOUND => Ok(None),
            rc => {
                check("mdb_get", rc)?;
                // SAFETY: filled by mdb_get in this live txn.
                Ok(Some(unsafe { slice(&v) }.to_vec()))
            }
        }
    }

    /// Call `f` with the value of `key` in place (no copy); false if absent.
    pub fn walk_one(&self, key: &[u8], f: impl FnOnce(&[u8])) -> Result<bool, LmdbError> {
        let mut k = val(key);
        let mut v = MDB_val {
            mv_size: 0,
            mv_data: ptr::null_mut(),
        };
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

    /// Put `key` = `value`.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), LmdbError> {
        let (mut k, mut v) = (val(key), val(value));
        // SAFETY: live write txn; LMDB copies the bytes.
        check("mdb_put", unsafe {
            ffi::mdb_put(self.raw, self.env.dbi, &mut k, &mut v, 0)
        })
    }

    /// Delete `key`; false if it was absent.
    pub fn del(&mut self, key: &[u8]) -> Result<bool, LmdbError> {
        let mut k = val(key);
        // SAFETY: live write txn.
        match unsafe { ffi::mdb_del(self.raw, self.env.dbi, &mut k, ptr::null_mut()) } {
            ffi::MDB_NOTFOUND => Ok(false),
            rc => check("mdb_del", rc).map(|_| true),
        }
    }

    /// Walk from the first key >= `start` (or the first key), calling `f` for each pair until
    /// it returns false or the keys run out. Returns the pairs visited.
    pub fn walk(
        &self,
        start: Option<&[u8]>,
        mut f: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize, LmdbError> {
        let mut cur = ptr::null_mut();
        // SAFETY: live txn, out-pointer to a local.
        check("mdb_cursor_open", unsafe {
            ffi::mdb_cursor_open(self.raw, self.env.dbi, &mut cur)
        })?;
        let mut k = start.map_or(
            MDB_val {
                mv_size: 0,
                mv_data: ptr::null_mut(),
            },
            val,
        );
        let mut v = MDB_val {
            mv_size: 0,
            mv_data: ptr::null_mut(),
        };
        let mut op = if start.is_some() {
            ffi::MDB_SET_RANGE
        } else {
            ffi::MDB_FIRST
        };
        let mut n = 0;
        let result = loop {
            // SAFETY: live cursor of this txn.
            let rc = unsafe { ffi::mdb_cursor_get(cur, &mut k, &mut v, op) };
            if rc == ffi::MDB_NOTFOUND {
                break Ok(n);
            }
            if let Err(e) = check("mdb_cursor_get", rc) {
                break Err(e);
            }
            n += 1;
            // SAFETY: filled by mdb_cursor_get in this live txn.
            if !f(unsafe { slice(&k) }, unsafe { slice(&v) }) {
                break Ok(n);
            }
            op = ffi::MDB_NEXT;
        };
        // SAFETY: the cursor is ours and closed once.
        unsafe { ffi::mdb_cursor_close(cur) };
        result
    }

    /// Commit.
    pub fn commit(self) -> Result<(), LmdbError> {
        let raw = self.raw;
        std::mem::forget(self);
        // SAFETY: live txn; mdb_txn_commit frees it whatever it returns.
        check("mdb_txn_commit", unsafe { ffi::mdb_txn_commit(raw) })
    }
}

impl Drop for Txn<'_> {
    fn drop(&mut self) {
        // SAFETY: live txn, aborted once (commit forgets self).
        unsafe { ffi::mdb_txn_abort(self.raw) };
    }
}

//! The part of LMDB 1.0.2's C API (`lmdb.h` of the natdb-sys package) this crate calls, under
//! the renamed symbols the build gives them (`lmdb10_mdb_*`, see `build.rs`). Declared by hand:
//! binding natdb-sys would link its own copy of LMDB, unrenamed.
#![allow(non_camel_case_types, missing_docs)]

use std::ffi::{c_char, c_int, c_uint, c_void};

pub type MDB_dbi = c_uint;

#[repr(C)]
pub struct MDB_env {
    _private: [u8; 0],
}
#[repr(C)]
pub struct MDB_txn {
    _private: [u8; 0],
}
#[repr(C)]
pub struct MDB_cursor {
    _private: [u8; 0],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct MDB_val {
    pub mv_size: usize,
    pub mv_data: *mut c_void,
}

/// `MDB_enc_func`: encrypt (`encdec` 1) or decrypt (0) `src` into `dst` (same size); `key[0]` is
/// the key given to `mdb_env_set_encrypt`, `key[1]` the IV (the page's number and transaction
/// id, 16 bytes), `key[2]` the authentication tag's room (`size` bytes, after the page's data).
pub type MDB_enc_func = unsafe extern "C" fn(
    src: *const MDB_val,
    dst: *mut MDB_val,
    key: *const MDB_val,
    encdec: c_int,
) -> c_int;

pub const MDB_NOSUBDIR: c_uint = 0x4000;
pub const MDB_NOSYNC: c_uint = 0x10000;
pub const MDB_RDONLY: c_uint = 0x20000;
pub const MDB_NOMETASYNC: c_uint = 0x40000;
pub const MDB_WRITEMAP: c_uint = 0x80000;
pub const MDB_NOTLS: c_uint = 0x200000;

pub const MDB_FIRST: c_int = 0;
pub const MDB_NEXT: c_int = 8;
pub const MDB_SET_RANGE: c_int = 17;

pub const MDB_NOTFOUND: c_int = -30798;
pub const MDB_CORRUPTED: c_int = -30796;
pub const MDB_PANIC: c_int = -30795;
pub const MDB_INVALID: c_int = -30793;
pub const MDB_MAP_FULL: c_int = -30792;
pub const MDB_BAD_CHECKSUM: c_int = -30778;
pub const MDB_CRYPTO_FAIL: c_int = -30777;
pub const MDB_ENV_ENCRYPTION: c_int = -30776;

extern "C" {
    #[link_name = "lmdb10_mdb_version"]
    pub fn mdb_version(major: *mut c_int, minor: *mut c_int, patch: *mut c_int) -> *mut c_char;
    #[link_name = "lmdb10_mdb_strerror"]
    pub fn mdb_strerror(err: c_int) -> *mut c_char;
    #[link_name = "lmdb10_mdb_env_create"]
    pub fn mdb_env_create(env: *mut *mut MDB_env) -> c_int;
    #[link_name = "lmdb10_mdb_env_set_encrypt"]
    pub fn mdb_env_set_encrypt(
        env: *mut MDB_env,
        func: MDB_enc_func,
        key: *const MDB_val,
        size: c_uint,
    ) -> c_int;
    #[link_name = "lmdb10_mdb_env_set_mapsize"]
    pub fn mdb_env_set_mapsize(env: *mut MDB_env, size: usize) -> c_int;
    #[link_name = "lmdb10_mdb_env_open"]
    pub fn mdb_env_open(
        env: *mut MDB_env,
        path: *const c_char,
        flags: c_uint,
        mode: libc::mode_t,
    ) -> c_int;
    #[link_name = "lmdb10_mdb_env_close"]
    pub fn mdb_env_close(env: *mut MDB_env);
    #[link_name = "lmdb10_mdb_txn_begin"]
    pub fn mdb_txn_begin(
        env: *mut MDB_env,
        parent: *mut MDB_txn,
        flags: c_uint,
        txn: *mut *mut MDB_txn,
    ) -> c_int;
    #[link_name = "lmdb10_mdb_txn_commit"]
    pub fn mdb_txn_commit(txn: *mut MDB_txn) -> c_int;
    #[link_name = "lmdb10_mdb_txn_abort"]
    pub fn mdb_txn_abort(txn: *mut MDB_txn);
    #[link_name = "lmdb10_mdb_dbi_open"]
    pub fn mdb_dbi_open(
        txn: *mut MDB_txn,
        name: *const c_char,
        flags: c_uint,
        dbi: *mut MDB_dbi,
    ) -> c_int;
    #[link_name = "lmdb10_mdb_get"]
    pub fn mdb_get(txn: *mut MDB_txn, dbi: MDB_dbi, key: *mut MDB_val, data: *mut MDB_val)
        -> c_int;
    #[link_name = "lmdb10_mdb_put"]
    pub fn mdb_put(
        txn: *mut MDB_txn,
        dbi: MDB_dbi,
        key: *mut MDB_val,
        data: *mut MDB_val,
        flags: c_uint,
    ) -> c_int;
    #[link_name = "lmdb10_mdb_del"]
    pub fn mdb_del(txn: *mut MDB_txn, dbi: MDB_dbi, key: *mut MDB_val, data: *mut MDB_val)
        -> c_int;
    #[link_name = "lmdb10_mdb_cursor_open"]
    pub fn mdb_cursor_open(txn: *mut MDB_txn, dbi: MDB_dbi, cursor: *mut *mut MDB_cursor) -> c_int;
    #[link_name = "lmdb10_mdb_cursor_close"]
    pub fn mdb_cursor_close(cursor: *mut MDB_cursor);
    #[link_name = "lmdb10_mdb_cursor_get"]
    pub fn mdb_cursor_get(
        cursor: *mut MDB_cursor,
        key: *mut MDB_val,
        data: *mut MDB_val,
        op: c_int,
    ) -> c_int;
}

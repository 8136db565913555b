//! The part of LMDB's C API (`lmdb.h` of lmdb-master-sys 0.2.6) this crate calls. Declared by
//! hand, because binding lmdb-master-sys would link its unpatched copy of LMDB beside ours.
#![allow(non_camel_case_types, missing_docs)]

use std::ffi::{c_char, c_int, c_uint, c_void};

pub type mdb_size_t = usize;
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

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct MDB_stat {
    pub ms_psize: c_uint,
    pub ms_depth: c_uint,
    pub ms_branch_pages: mdb_size_t,
    pub ms_leaf_pages: mdb_size_t,
    pub ms_overflow_pages: mdb_size_t,
    pub ms_entries: mdb_size_t,
}

pub const MDB_FIXEDMAP: c_uint = 0x01;
pub const MDB_NOSUBDIR: c_uint = 0x4000;
pub const MDB_NOSYNC: c_uint = 0x10000;
pub const MDB_RDONLY: c_uint = 0x20000;
pub const MDB_NOMETASYNC: c_uint = 0x40000;
pub const MDB_WRITEMAP: c_uint = 0x80000;
pub const MDB_NOTLS: c_uint = 0x200000;
pub const MDB_NORDAHEAD: c_uint = 0x800000;
pub const MDB_CREATE: c_uint = 0x40000;

pub const MDB_FIRST: c_int = 0;
pub const MDB_NEXT: c_int = 8;
pub const MDB_SET_RANGE: c_int = 17;

pub const MDB_SUCCESS: c_int = 0;
pub const MDB_KEYEXIST: c_int = -30799;
pub const MDB_NOTFOUND: c_int = -30798;
pub const MDB_CORRUPTED: c_int = -30796;
pub const MDB_PANIC: c_int = -30795;
pub const MDB_VERSION_MISMATCH: c_int = -30794;
pub const MDB_INVALID: c_int = -30793;
pub const MDB_MAP_FULL: c_int = -30792;
pub const MDB_BAD_TXN: c_int = -30782;

extern "C" {
    pub fn mdb_strerror(err: c_int) -> *const c_char;
    pub fn mdb_env_create(env: *mut *mut MDB_env) -> c_int;
    pub fn mdb_env_open(env: *mut MDB_env, path: *const c_char, flags: c_uint, mode: u32) -> c_int;
    pub fn mdb_env_close(env: *mut MDB_env);
    pub fn mdb_env_get_flags(env: *mut MDB_env, flags: *mut c_uint) -> c_int;
    pub fn mdb_env_set_mapsize(env: *mut MDB_env, size: mdb_size_t) -> c_int;
    pub fn mdb_env_set_maxdbs(env: *mut MDB_env, dbs: MDB_dbi) -> c_int;
    pub fn mdb_env_sync(env: *mut MDB_env, force: c_int) -> c_int;
    pub fn mdb_env_stat(env: *mut MDB_env, stat: *mut MDB_stat) -> c_int;
    pub fn mdb_txn_begin(
        env: *mut MDB_env,
        parent: *mut MDB_txn,
        flags: c_uint,
        txn: *mut *mut MDB_txn,
    ) -> c_int;
    pub fn mdb_txn_commit(txn: *mut MDB_txn) -> c_int;
    pub fn mdb_txn_abort(txn: *mut MDB_txn);
    pub fn mdb_txn_reset(txn: *mut MDB_txn);
    pub fn mdb_txn_renew(txn: *mut MDB_txn) -> c_int;
    pub fn mdb_dbi_open(
        txn: *mut MDB_txn,
        name: *const c_char,
        flags: c_uint,
        dbi: *mut MDB_dbi,
    ) -> c_int;
    pub fn mdb_get(txn: *mut MDB_txn, dbi: MDB_dbi, key: *mut MDB_val, data: *mut MDB_val)
        -> c_int;
    pub fn mdb_put(
        txn: *mut MDB_txn,
        dbi: MDB_dbi,
        key: *mut MDB_val,
        data: *mut MDB_val,
        flags: c_uint,
    ) -> c_int;
    pub fn mdb_del(txn: *mut MDB_txn, dbi: MDB_dbi, key: *mut MDB_val, data: *mut MDB_val)
        -> c_int;
    pub fn mdb_cursor_open(txn: *mut MDB_txn, dbi: MDB_dbi, cursor: *mut *mut MDB_cursor) -> c_int;
    pub fn mdb_cursor_close(cursor: *mut MDB_cursor);
    pub fn mdb_cursor_get(
        cursor: *mut MDB_cursor,
        key: *mut MDB_val,
        data: *mut MDB_val,
        op: c_int,
    ) -> c_int;
}

/// The `main` of each LMDB program, renamed by build.rs.
pub mod programs {
    use std::ffi::{c_char, c_int};
    extern "C" {
        pub fn mdb_stat_main(argc: c_int, argv: *mut *mut c_char) -> c_int;
        pub fn mdb_dump_main(argc: c_int, argv: *mut *mut c_char) -> c_int;
        pub fn mdb_load_main(argc: c_int, argv: *mut *mut c_char) -> c_int;
        pub fn mdb_copy_main(argc: c_int, argv: *mut *mut c_char) -> c_int;
        pub fn mdb_drop_main(argc: c_int, argv: *mut *mut c_char) -> c_int;
        pub fn mtest_main(argc: c_int, argv: *mut *mut c_char) -> c_int;
        pub fn mtest2_main(argc: c_int, argv: *mut *mut c_char) -> c_int;
        pub fn mtest3_main(argc: c_int, argv: *mut *mut c_char) -> c_int;
        pub fn mtest4_main(argc: c_int, argv: *mut *mut c_char) -> c_int;
        pub fn mtest5_main(argc: c_int, argv: *mut *mut c_char) -> c_int;
        pub fn mtest6_main(argc: c_int, argv: *mut *mut c_char) -> c_int;
    }
}

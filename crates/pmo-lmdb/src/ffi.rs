//! LMDB's C API (`lmdb.h` and `midl.h` of lmdb-master-sys 0.2.6), declared by hand because
//! binding lmdb-master-sys would link its unpatched copy of LMDB beside ours. The compiled
//! library's functions carry the prefix `pmo_` (csrc/pmo_mdb_names.h); [`abi`] exports them
//! under LMDB's own names for C programs and the drop-in `liblmdb.so.0`.
#![allow(non_camel_case_types, missing_docs)]
#![allow(unsafe_code)] // Reason: the C API's declarations and the exported forwarders of `abi`.

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

pub type mdb_mode_t = u32;
pub type mdb_filehandle_t = c_int;
pub type MDB_ID = usize;
pub type MDB_IDL = *mut MDB_ID;
pub type MDB_ID2L = *mut MDB_ID2;
pub type MDB_cmp_func = Option<unsafe extern "C" fn(a: *const MDB_val, b: *const MDB_val) -> c_int>;
pub type MDB_rel_func = Option<
    unsafe extern "C" fn(
        item: *mut MDB_val,
        oldptr: *mut c_void,
        newptr: *mut c_void,
        relctx: *mut c_void,
    ),
>;
pub type MDB_assert_func = Option<unsafe extern "C" fn(env: *mut MDB_env, msg: *const c_char)>;
pub type MDB_msg_func = Option<unsafe extern "C" fn(msg: *const c_char, ctx: *mut c_void) -> c_int>;

/// `MDB_envinfo` of lmdb.h.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MDB_envinfo {
    pub me_mapaddr: *mut c_void,
    pub me_mapsize: mdb_size_t,
    pub me_last_pgno: mdb_size_t,
    pub me_last_txnid: mdb_size_t,
    pub me_maxreaders: c_uint,
    pub me_numreaders: c_uint,
}

/// `MDB_ID2` of midl.h.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MDB_ID2 {
    pub mid: MDB_ID,
    pub mptr: *mut c_void,
}

/// Declares every function of lmdb.h and midl.h twice from one list: `ffi::NAME` is the
/// compiled library's `pmo_NAME` (csrc/pmo_mdb_names.h renames them all), and [`abi`]`::NAME`
/// exports the standard name `NAME` (`#[no_mangle]`), forwarding to it.
macro_rules! lmdb_api {
    ($( fn $name:ident ( $($a:ident : $t:ty),* $(,)? ) $(-> $r:ty)? ; )*) => {
        extern "C" {
            $(
                #[link_name = concat!("pmo_", stringify!($name))]
                pub fn $name($($a: $t),*) $(-> $r)?;
            )*
        }

        /// LMDB 0.9's C API under its own names, exported by `libpmo_lmdb.a` and by the drop-in
        /// `liblmdb.so.0` (crate `pmo-lmdb-dropin`): each forwards to the patched library's
        /// function of the same name (compiled as `pmo_NAME`). Behaviour and contracts are
        /// lmdb.h's.
        #[allow(clippy::missing_safety_doc)]
        pub mod abi {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[doc = concat!("`", stringify!($name), "` of lmdb.h (or midl.h).")]
                #[no_mangle]
                pub unsafe extern "C" fn $name($($a: $t),*) $(-> $r)? {
                    // SAFETY: the caller's arguments under lmdb.h's contract, to the same
                    // function of the patched library.
                    unsafe { super::$name($($a),*) }
                }
            )*
        }
    };
}

lmdb_api! {
    fn mdb_version(major: *mut c_int, minor: *mut c_int, patch: *mut c_int) -> *mut c_char;
    fn mdb_strerror(err: c_int) -> *mut c_char;
    fn mdb_env_create(env: *mut *mut MDB_env) -> c_int;
    fn mdb_env_open(env: *mut MDB_env, path: *const c_char, flags: c_uint, mode: mdb_mode_t) -> c_int;
    fn mdb_env_copy(env: *mut MDB_env, path: *const c_char) -> c_int;
    fn mdb_env_copyfd(env: *mut MDB_env, fd: mdb_filehandle_t) -> c_int;
    fn mdb_env_copy2(env: *mut MDB_env, path: *const c_char, flags: c_uint) -> c_int;
    fn mdb_env_copyfd2(env: *mut MDB_env, fd: mdb_filehandle_t, flags: c_uint) -> c_int;
    fn mdb_env_stat(env: *mut MDB_env, stat: *mut MDB_stat) -> c_int;
    fn mdb_env_info(env: *mut MDB_env, stat: *mut MDB_envinfo) -> c_int;
    fn mdb_env_sync(env: *mut MDB_env, force: c_int) -> c_int;
    fn mdb_env_close(env: *mut MDB_env);
    fn mdb_env_set_flags(env: *mut MDB_env, flags: c_uint, onoff: c_int) -> c_int;
    fn mdb_env_get_flags(env: *mut MDB_env, flags: *mut c_uint) -> c_int;
    fn mdb_env_get_path(env: *mut MDB_env, path: *mut *const c_char) -> c_int;
    fn mdb_env_get_fd(env: *mut MDB_env, fd: *mut mdb_filehandle_t) -> c_int;
    fn mdb_env_set_mapsize(env: *mut MDB_env, size: mdb_size_t) -> c_int;
    fn mdb_env_set_maxreaders(env: *mut MDB_env, readers: c_uint) -> c_int;
    fn mdb_env_get_maxreaders(env: *mut MDB_env, readers: *mut c_uint) -> c_int;
    fn mdb_env_set_maxdbs(env: *mut MDB_env, dbs: MDB_dbi) -> c_int;
    fn mdb_env_get_maxkeysize(env: *mut MDB_env) -> c_int;
    fn mdb_env_set_userctx(env: *mut MDB_env, ctx: *mut c_void) -> c_int;
    fn mdb_env_get_userctx(env: *mut MDB_env) -> *mut c_void;
    fn mdb_env_set_assert(env: *mut MDB_env, func: MDB_assert_func) -> c_int;
    fn mdb_txn_begin(env: *mut MDB_env, parent: *mut MDB_txn, flags: c_uint, txn: *mut *mut MDB_txn) -> c_int;
    fn mdb_txn_env(txn: *mut MDB_txn) -> *mut MDB_env;
    fn mdb_txn_id(txn: *mut MDB_txn) -> mdb_size_t;
    fn mdb_txn_commit(txn: *mut MDB_txn) -> c_int;
    fn mdb_txn_abort(txn: *mut MDB_txn);
    fn mdb_txn_reset(txn: *mut MDB_txn);
    fn mdb_txn_renew(txn: *mut MDB_txn) -> c_int;
    fn mdb_dbi_open(txn: *mut MDB_txn, name: *const c_char, flags: c_uint, dbi: *mut MDB_dbi) -> c_int;
    fn mdb_stat(txn: *mut MDB_txn, dbi: MDB_dbi, stat: *mut MDB_stat) -> c_int;
    fn mdb_dbi_flags(txn: *mut MDB_txn, dbi: MDB_dbi, flags: *mut c_uint) -> c_int;
    fn mdb_dbi_close(env: *mut MDB_env, dbi: MDB_dbi);
    fn mdb_drop(txn: *mut MDB_txn, dbi: MDB_dbi, del: c_int) -> c_int;
    fn mdb_set_compare(txn: *mut MDB_txn, dbi: MDB_dbi, cmp: MDB_cmp_func) -> c_int;
    fn mdb_set_dupsort(txn: *mut MDB_txn, dbi: MDB_dbi, cmp: MDB_cmp_func) -> c_int;
    fn mdb_set_relfunc(txn: *mut MDB_txn, dbi: MDB_dbi, rel: MDB_rel_func) -> c_int;
    fn mdb_set_relctx(txn: *mut MDB_txn, dbi: MDB_dbi, ctx: *mut c_void) -> c_int;
    fn mdb_get(txn: *mut MDB_txn, dbi: MDB_dbi, key: *mut MDB_val, data: *mut MDB_val) -> c_int;
    fn mdb_put(txn: *mut MDB_txn, dbi: MDB_dbi, key: *mut MDB_val, data: *mut MDB_val, flags: c_uint) -> c_int;
    fn mdb_del(txn: *mut MDB_txn, dbi: MDB_dbi, key: *mut MDB_val, data: *mut MDB_val) -> c_int;
    fn mdb_cursor_open(txn: *mut MDB_txn, dbi: MDB_dbi, cursor: *mut *mut MDB_cursor) -> c_int;
    fn mdb_cursor_close(cursor: *mut MDB_cursor);
    fn mdb_cursor_renew(txn: *mut MDB_txn, cursor: *mut MDB_cursor) -> c_int;
    fn mdb_cursor_txn(cursor: *mut MDB_cursor) -> *mut MDB_txn;
    fn mdb_cursor_dbi(cursor: *mut MDB_cursor) -> MDB_dbi;
    fn mdb_cursor_get(cursor: *mut MDB_cursor, key: *mut MDB_val, data: *mut MDB_val, op: c_int) -> c_int;
    fn mdb_cursor_put(cursor: *mut MDB_cursor, key: *mut MDB_val, data: *mut MDB_val, flags: c_uint) -> c_int;
    fn mdb_cursor_del(cursor: *mut MDB_cursor, flags: c_uint) -> c_int;
    fn mdb_cursor_count(cursor: *mut MDB_cursor, countp: *mut mdb_size_t) -> c_int;
    fn mdb_cmp(txn: *mut MDB_txn, dbi: MDB_dbi, a: *const MDB_val, b: *const MDB_val) -> c_int;
    fn mdb_dcmp(txn: *mut MDB_txn, dbi: MDB_dbi, a: *const MDB_val, b: *const MDB_val) -> c_int;
    fn mdb_reader_list(env: *mut MDB_env, func: MDB_msg_func, ctx: *mut c_void) -> c_int;
    fn mdb_reader_check(env: *mut MDB_env, dead: *mut c_int) -> c_int;
    fn mdb_midl_search(ids: MDB_IDL, id: MDB_ID) -> c_uint;
    fn mdb_midl_alloc(num: c_int) -> MDB_IDL;
    fn mdb_midl_free(ids: MDB_IDL);
    fn mdb_midl_shrink(idp: *mut MDB_IDL);
    fn mdb_midl_need(idp: *mut MDB_IDL, num: c_uint) -> c_int;
    fn mdb_midl_append(idp: *mut MDB_IDL, id: MDB_ID) -> c_int;
    fn mdb_midl_append_list(idp: *mut MDB_IDL, app: MDB_IDL) -> c_int;
    fn mdb_midl_append_range(idp: *mut MDB_IDL, id: MDB_ID, n: c_uint) -> c_int;
    fn mdb_midl_xmerge(idl: MDB_IDL, merge: MDB_IDL);
    fn mdb_midl_sort(ids: MDB_IDL);
    fn mdb_mid2l_search(ids: MDB_ID2L, id: MDB_ID) -> c_uint;
    fn mdb_mid2l_insert(ids: MDB_ID2L, id: *mut MDB_ID2) -> c_int;
    fn mdb_mid2l_append(ids: MDB_ID2L, id: *mut MDB_ID2) -> c_int;
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

/*
 * pmo_mdb_names.h - forced into every C file build.rs compiles (-include): LMDB's exported
 * functions get the prefix pmo_ in the compiled library, so that no binary holds two
 * definitions of an mdb_ symbol. Rust forwards the standard names (src/ffi.rs, mod abi):
 * libpmo_lmdb.a and the drop-in liblmdb.so.0 export them, and a binary that also links
 * another LMDB (the system's, LMDB 1.0's peer) keeps both apart.
 * The list: every function lmdb.h and midl.h declare (not their macros mdb_open, mdb_close,
 * mdb_midl_xappend; not the MDB_VL32-only mdb_mid3l_*).
 */
#ifndef PMO_MDB_NAMES_H
#define PMO_MDB_NAMES_H
#define mdb_cmp pmo_mdb_cmp
#define mdb_cursor_close pmo_mdb_cursor_close
#define mdb_cursor_count pmo_mdb_cursor_count
#define mdb_cursor_dbi pmo_mdb_cursor_dbi
#define mdb_cursor_del pmo_mdb_cursor_del
#define mdb_cursor_get pmo_mdb_cursor_get
#define mdb_cursor_open pmo_mdb_cursor_open
#define mdb_cursor_put pmo_mdb_cursor_put
#define mdb_cursor_renew pmo_mdb_cursor_renew
#define mdb_cursor_txn pmo_mdb_cursor_txn
#define mdb_dbi_close pmo_mdb_dbi_close
#define mdb_dbi_flags pmo_mdb_dbi_flags
#define mdb_dbi_open pmo_mdb_dbi_open
#define mdb_dcmp pmo_mdb_dcmp
#define mdb_del pmo_mdb_del
#define mdb_drop pmo_mdb_drop
#define mdb_env_close pmo_mdb_env_close
#define mdb_env_copy pmo_mdb_env_copy
#define mdb_env_copy2 pmo_mdb_env_copy2
#define mdb_env_copyfd pmo_mdb_env_copyfd
#define mdb_env_copyfd2 pmo_mdb_env_copyfd2
#define mdb_env_create pmo_mdb_env_create
#define mdb_env_get_fd pmo_mdb_env_get_fd
#define mdb_env_get_flags pmo_mdb_env_get_flags
#define mdb_env_get_maxkeysize pmo_mdb_env_get_maxkeysize
#define mdb_env_get_maxreaders pmo_mdb_env_get_maxreaders
#define mdb_env_get_path pmo_mdb_env_get_path
#define mdb_env_get_userctx pmo_mdb_env_get_userctx
#define mdb_env_info pmo_mdb_env_info
#define mdb_env_open pmo_mdb_env_open
#define mdb_env_set_assert pmo_mdb_env_set_assert
#define mdb_env_set_flags pmo_mdb_env_set_flags
#define mdb_env_set_mapsize pmo_mdb_env_set_mapsize
#define mdb_env_set_maxdbs pmo_mdb_env_set_maxdbs
#define mdb_env_set_maxreaders pmo_mdb_env_set_maxreaders
#define mdb_env_set_userctx pmo_mdb_env_set_userctx
#define mdb_env_stat pmo_mdb_env_stat
#define mdb_env_sync pmo_mdb_env_sync
#define mdb_get pmo_mdb_get
#define mdb_mid2l_append pmo_mdb_mid2l_append
#define mdb_mid2l_insert pmo_mdb_mid2l_insert
#define mdb_mid2l_search pmo_mdb_mid2l_search
#define mdb_midl_alloc pmo_mdb_midl_alloc
#define mdb_midl_append pmo_mdb_midl_append
#define mdb_midl_append_list pmo_mdb_midl_append_list
#define mdb_midl_append_range pmo_mdb_midl_append_range
#define mdb_midl_free pmo_mdb_midl_free
#define mdb_midl_need pmo_mdb_midl_need
#define mdb_midl_search pmo_mdb_midl_search
#define mdb_midl_shrink pmo_mdb_midl_shrink
#define mdb_midl_sort pmo_mdb_midl_sort
#define mdb_midl_xmerge pmo_mdb_midl_xmerge
#define mdb_put pmo_mdb_put
#define mdb_reader_check pmo_mdb_reader_check
#define mdb_reader_list pmo_mdb_reader_list
#define mdb_set_compare pmo_mdb_set_compare
#define mdb_set_dupsort pmo_mdb_set_dupsort
#define mdb_set_relctx pmo_mdb_set_relctx
#define mdb_set_relfunc pmo_mdb_set_relfunc
#define mdb_stat pmo_mdb_stat
#define mdb_strerror pmo_mdb_strerror
#define mdb_txn_abort pmo_mdb_txn_abort
#define mdb_txn_begin pmo_mdb_txn_begin
#define mdb_txn_commit pmo_mdb_txn_commit
#define mdb_txn_env pmo_mdb_txn_env
#define mdb_txn_id pmo_mdb_txn_id
#define mdb_txn_renew pmo_mdb_txn_renew
#define mdb_txn_reset pmo_mdb_txn_reset
#define mdb_version pmo_mdb_version
#endif

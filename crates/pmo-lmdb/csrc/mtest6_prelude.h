/*
 * Force-included (-include) when compiling LMDB's mtest6.c, unchanged: mtest6 calls
 * mdb_dkey(), which lmdb.h does not declare, so C takes it to return int and a 64-bit
 * pointer is truncated (mtest6 crashes on files as on PMOs). This declares it.
 */
#include "lmdb.h"
char *mdb_dkey(MDB_val *key, char *buf);

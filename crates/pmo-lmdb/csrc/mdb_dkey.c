/*
 * mtest6.c prints keys with mdb_dkey(), which mdb.c defines only in MDB_DEBUG builds (LMDB's
 * Makefile leaves mtest6 out of its programs for that reason). This is pmo-lmdb's own
 * definition with the same contract, linked with mtest6 alone: the key in hexadecimal, in
 * `buf` (mtest6 passes a 1024-byte buffer), truncated to 511 bytes of key.
 */
#include <stdio.h>
#include "lmdb.h"

char *mdb_dkey(MDB_val *key, char *buf)
{
	size_t i, n;
	const unsigned char *c;

	if (!key)
		return "";
	c = key->mv_data;
	n = key->mv_size > 511 ? 511 : key->mv_size;
	for (i = 0; i < n; i++)
		sprintf(buf + 2 * i, "%02x", c[i]);
	buf[2 * n] = '\0';
	return buf;
}

/*
 * An ordinary LMDB program, opening its environment on a PMO: the documented way from C
 * (docs/lmdb.md). Built against libpmo_lmdb.a by tests/c_program.rs and run with PMO_POOL and
 * PMO_KEY set. `write` puts 1000 records in one transaction and 10 more in ten; `check`
 * reopens read-only and checks them all.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lmdb.h"

#define CHECK(expr) do { int rc_ = (expr); if (rc_) { \
	fprintf(stderr, "%s: %s\n", #expr, mdb_strerror(rc_)); exit(1); } } while (0)

static void open_env(MDB_env **env, unsigned flags)
{
	CHECK(mdb_env_create(env));
	CHECK(mdb_env_set_mapsize(*env, 8 << 20));
	CHECK(mdb_env_open(*env, "pmo:c-env", flags, 0664));
}

int main(int argc, char **argv)
{
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi dbi;
	MDB_val k, v;
	char key[32], val[64];
	int i;

	if (argc != 2)
		return 2;
	if (!strcmp(argv[1], "write")) {
		open_env(&env, 0);
		CHECK(mdb_txn_begin(env, NULL, 0, &txn));
		CHECK(mdb_dbi_open(txn, NULL, 0, &dbi));
		for (i = 0; i < 1010; i++) {
			if (i >= 1000) {	/* one transaction each for the last ten */
				CHECK(mdb_txn_commit(txn));
				CHECK(mdb_txn_begin(env, NULL, 0, &txn));
			}
			snprintf(key, sizeof key, "key%06d", i);
			snprintf(val, sizeof val, "value of %d", i);
			k.mv_size = strlen(key); k.mv_data = key;
			v.mv_size = strlen(val); v.mv_data = val;
			CHECK(mdb_put(txn, dbi, &k, &v, 0));
		}
		CHECK(mdb_txn_commit(txn));
		mdb_env_close(env);
		printf("wrote 1010\n");
		return 0;
	}
	open_env(&env, MDB_RDONLY);
	CHECK(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn));
	CHECK(mdb_dbi_open(txn, NULL, 0, &dbi));
	for (i = 0; i < 1010; i++) {
		snprintf(key, sizeof key, "key%06d", i);
		snprintf(val, sizeof val, "value of %d", i);
		k.mv_size = strlen(key); k.mv_data = key;
		CHECK(mdb_get(txn, dbi, &k, &v));
		if (v.mv_size != strlen(val) || memcmp(v.mv_data, val, v.mv_size)) {
			fprintf(stderr, "%s: wrong value\n", key);
			return 1;
		}
	}
	mdb_txn_abort(txn);
	mdb_env_close(env);
	printf("checked 1010\n");
	return 0;
}

/*
 * An ordinary LMDB program, timed (scripts/bench-dropin): the same source is linked three
 * ways (dynamically against liblmdb.so.0, then run with the system's library or with pmo's
 * drop-in; statically against libpmo_lmdb.a) so that the only difference is the library.
 *
 * lmdb_prog_bench PATH ROUNDS: opens PATH (a directory; `pmo:NAME` for a PMO), loads 10,000
 * records of 1 KiB in one transaction, then ROUNDS times: 2,000 durable commits of one 1 KiB
 * record (the mean per commit) and 200,000 random gets in read transactions renewed every 100
 * gets (gets per second). Prints one line per round: `commit_us=.. gets_per_s=..`.
 *
 * lmdb_prog_bench PATH ROUNDS read: a reader process (MDB_RDONLY) of an environment another
 * process made: ROUNDS times 200,000 random gets in read transactions renewed every 100 gets
 * (`gets_per_s=..`), beside whatever the writer does meanwhile.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "lmdb.h"

#define RECORDS 10000
#define VALUE 1024
#define COMMITS 2000
#define GETS 200000
#define RENEW 100

#define CHECK(expr) do { int rc_ = (expr); if (rc_) { \
	fprintf(stderr, "%s: %s\n", #expr, mdb_strerror(rc_)); exit(1); } } while (0)

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static unsigned long long rng = 88172645463325252ULL;
static unsigned long long next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

int main(int argc, char **argv)
{
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi dbi;
	MDB_val k, v;
	char key[32], val[VALUE];
	int i, r, rounds;
	unsigned long long sink = 0;

	if (argc != 3 && argc != 4)
		return 2;
	rounds = atoi(argv[2]);
	memset(val, 'v', sizeof val);
	CHECK(mdb_env_create(&env));
	if (argc == 4) {	/* a reader beside another process's writer */
		CHECK(mdb_env_open(env, argv[1], MDB_RDONLY, 0664));
		CHECK(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn));
		CHECK(mdb_dbi_open(txn, NULL, 0, &dbi));
		for (r = 0; r < rounds; r++) {
			double t1 = now();
			for (i = 0; i < GETS; i++) {
				if (i && i % RENEW == 0) {
					mdb_txn_reset(txn);
					CHECK(mdb_txn_renew(txn));
				}
				k.mv_size = (size_t)snprintf(key, sizeof key, "key%08d",
					(int)(next() % RECORDS));
				k.mv_data = key;
				CHECK(mdb_get(txn, dbi, &k, &v));
				sink += ((unsigned char *)v.mv_data)[VALUE - 1];
			}
			printf("gets_per_s=%.0f\n", GETS / (now() - t1));
			fflush(stdout);
		}
		mdb_txn_abort(txn);
		mdb_env_close(env);
		return sink == 42 ? 3 : 0;
	}
	CHECK(mdb_env_set_mapsize(env, 256UL << 20));
	CHECK(mdb_env_open(env, argv[1], 0, 0664));
	CHECK(mdb_txn_begin(env, NULL, 0, &txn));
	CHECK(mdb_dbi_open(txn, NULL, 0, &dbi));
	for (i = 0; i < RECORDS; i++) {
		k.mv_size = (size_t)snprintf(key, sizeof key, "key%08d", i);
		k.mv_data = key;
		v.mv_size = VALUE;
		v.mv_data = val;
		CHECK(mdb_put(txn, dbi, &k, &v, 0));
	}
	CHECK(mdb_txn_commit(txn));
	for (r = 0; r < rounds; r++) {
		double t0 = now(), t1, t2;
		for (i = 0; i < COMMITS; i++) {
			CHECK(mdb_txn_begin(env, NULL, 0, &txn));
			k.mv_size = (size_t)snprintf(key, sizeof key, "key%08d",
				(int)(next() % RECORDS));
			k.mv_data = key;
			val[0] = (char)i;
			v.mv_size = VALUE;
			v.mv_data = val;
			CHECK(mdb_put(txn, dbi, &k, &v, 0));
			CHECK(mdb_txn_commit(txn));
		}
		t1 = now();
		CHECK(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn));
		for (i = 0; i < GETS; i++) {
			if (i && i % RENEW == 0) {
				mdb_txn_reset(txn);
				CHECK(mdb_txn_renew(txn));
			}
			k.mv_size = (size_t)snprintf(key, sizeof key, "key%08d",
				(int)(next() % RECORDS));
			k.mv_data = key;
			CHECK(mdb_get(txn, dbi, &k, &v));
			sink += ((unsigned char *)v.mv_data)[VALUE - 1];
		}
		mdb_txn_abort(txn);
		t2 = now();
		printf("commit_us=%.3f gets_per_s=%.0f\n", (t1 - t0) * 1e6 / COMMITS,
			GETS / (t2 - t1));
		fflush(stdout);
	}
	mdb_env_close(env);
	return sink == 42 ? 3 : 0;	/* keep the reads */
}

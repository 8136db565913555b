/*
 * peers.c: the C side of pmo-peers, a thin shim over PMDK libpmemobj and LMDB.
 *
 * Owns: the inner loops of every peer benchmark, so that what is timed is the peer's own C API
 * called from C (no FFI call per operation), and the TX_BEGIN/TX_END macros (setjmp based) that
 * Rust cannot express. Timing, threads, repeats and statistics live on the Rust side.
 *
 * Contract with Rust (src/ffi.rs mirrors every declaration here):
 * - every function returns 0 on success or a positive errno value on failure; nothing aborts;
 * - a PMEMoid is 16 bytes (checked below) and Rust holds arrays of them as opaque pairs of u64;
 * - an oid array handed in by Rust holds only OID_NULL or oids allocated by these functions from
 *   the same pool; the functions leave it in that state even on failure;
 * - the pseudo-random generator is xorshift64* with its state owned by the caller, so runs are
 *   reproducible from the seed printed by the benchmark.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <libpmem.h>
#include <libpmemobj.h>
#include <lmdb.h>

_Static_assert(sizeof(PMEMoid) == 16, "PMEMoid layout differs from the Rust mirror");

#define PEERS_LAYOUT "pmo-peers"

/* Type numbers of the objects the benchmarks allocate. */
enum { PEERS_TYPE_BLOCK = 1, PEERS_TYPE_NODE = 2 };

static uint64_t
peers_rand(uint64_t *state)
{
	uint64_t x = *state;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*state = x;
	return x * 0x2545F4914F6CDD1DULL;
}

/* The generator, exported so the Rust mirror (bench.rs, xorshift_next) can be checked. */
uint64_t
peers_rand_next(uint64_t *state)
{
	return peers_rand(state);
}

/* Uniform in [lo, hi], hi >= lo. The modulo bias is below 2^-50 for the ranges used here. */
static uint64_t
peers_rand_range(uint64_t *state, uint64_t lo, uint64_t hi)
{
	return lo + peers_rand(state) % (hi - lo + 1);
}

static int
errno_or(int fallback)
{
	return errno != 0 ? errno : fallback;
}

/* ---------------------------------------------------------------- pool ---------------------- */

const char *
peers_pmdk_errormsg(void)
{
	return pmemobj_errormsg();
}

int
peers_pmdk_create(const char *path, uint64_t pool_size_bytes, PMEMobjpool **out)
{
	errno = 0;
	PMEMobjpool *pop = pmemobj_create(path, PEERS_LAYOUT, (size_t)pool_size_bytes, 0600);
	if (pop == NULL)
		return errno_or(EIO);
	*out = pop;
	return 0;
}

void
peers_pmdk_close(PMEMobjpool *pop)
{
	pmemobj_close(pop);
}

/*
 * 1 when libpmem treats the pool's memory as persistent memory (cache flushes, no msync), which on
 * /dev/shm holds only with PMEM_IS_PMEM_FORCE=1 set before libpmem first decides.
 */
int
peers_pmdk_is_pmem(PMEMobjpool *pop)
{
	PMEMoid root = pmemobj_root(pop, 64);
	if (OID_IS_NULL(root))
		return 0;
	return pmem_is_pmem(pmemobj_direct(root), 64);
}

/* ------------------------------------------------- POSEIDON alloc/free microbenchmark -------- */

/*
 * One round of the POSEIDON pattern: allocate n blocks of size bytes, then free them in the order
 * given by the permutation order[0..n). On failure every block allocated so far is freed.
 */
int
peers_pmdk_alloc_free_round(PMEMobjpool *pop, PMEMoid *oids, const uint32_t *order, uint32_t n,
			    uint64_t size_bytes)
{
	for (uint32_t i = 0; i < n; i++) {
		if (pmemobj_alloc(pop, &oids[i], (size_t)size_bytes, PEERS_TYPE_BLOCK, NULL,
				  NULL) != 0) {
			int err = errno_or(ENOMEM);
			for (uint32_t j = 0; j < i; j++)
				pmemobj_free(&oids[j]);
			return err;
		}
	}
	for (uint32_t i = 0; i < n; i++)
		pmemobj_free(&oids[order[i]]);
	return 0;
}

/* The same round over glibc malloc/free: the volatile upper bound. */
int
peers_glibc_alloc_free_round(void **blocks, const uint32_t *order, uint32_t n, uint64_t size_bytes)
{
	for (uint32_t i = 0; i < n; i++) {
		blocks[i] = malloc((size_t)size_bytes);
		if (blocks[i] == NULL) {
			for (uint32_t j = 0; j < i; j++)
				free(blocks[j]);
			return ENOMEM;
		}
		/* Touch the block so the compiler cannot pair malloc and free away. */
		*(volatile char *)blocks[i] = (char)i;
	}
	for (uint32_t i = 0; i < n; i++) {
		free(blocks[order[i]]);
		blocks[order[i]] = NULL;
	}
	return 0;
}

/* ------------------------------------------------------------------------ Larson ------------ */

/*
 * Larson server simulation. A thread owns an array of slots; one operation frees a random slot and
 * allocates a block of a random size in [min_bytes, max_bytes] into it. Between epochs the Rust
 * side hands each slot array to another thread, so blocks are freed by threads that did not
 * allocate them.
 */
int
peers_pmdk_larson_fill(PMEMobjpool *pop, PMEMoid *slots, uint32_t n, uint64_t min_bytes,
		       uint64_t max_bytes, uint64_t *rng)
{
	for (uint32_t i = 0; i < n; i++) {
		if (!OID_IS_NULL(slots[i]))
			continue;
		size_t size = (size_t)peers_rand_range(rng, min_bytes, max_bytes);
		if (pmemobj_alloc(pop, &slots[i], size, PEERS_TYPE_BLOCK, NULL, NULL) != 0)
			return errno_or(ENOMEM);
	}
	return 0;
}

int
peers_pmdk_larson_run(PMEMobjpool *pop, PMEMoid *slots, uint32_t n, uint64_t min_bytes,
		      uint64_t max_bytes, uint64_t ops, uint64_t *rng)
{
	for (uint64_t k = 0; k < ops; k++) {
		uint32_t i = (uint32_t)(peers_rand(rng) % n);
		size_t size = (size_t)peers_rand_range(rng, min_bytes, max_bytes);
		pmemobj_free(&slots[i]); /* no-op on OID_NULL, sets the oid to OID_NULL */
		if (pmemobj_alloc(pop, &slots[i], size, PEERS_TYPE_BLOCK, NULL, NULL) != 0)
			return errno_or(ENOMEM);
	}
	return 0;
}

void
peers_pmdk_free_all(PMEMoid *slots, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		pmemobj_free(&slots[i]);
}

int
peers_glibc_larson_fill(void **slots, uint32_t n, uint64_t min_bytes, uint64_t max_bytes,
			uint64_t *rng)
{
	for (uint32_t i = 0; i < n; i++) {
		if (slots[i] != NULL)
			continue;
		slots[i] = malloc((size_t)peers_rand_range(rng, min_bytes, max_bytes));
		if (slots[i] == NULL)
			return ENOMEM;
		*(volatile char *)slots[i] = (char)i;
	}
	return 0;
}

int
peers_glibc_larson_run(void **slots, uint32_t n, uint64_t min_bytes, uint64_t max_bytes,
		       uint64_t ops, uint64_t *rng)
{
	for (uint64_t k = 0; k < ops; k++) {
		uint32_t i = (uint32_t)(peers_rand(rng) % n);
		size_t size = (size_t)peers_rand_range(rng, min_bytes, max_bytes);
		free(slots[i]);
		slots[i] = malloc(size);
		if (slots[i] == NULL)
			return ENOMEM;
		*(volatile char *)slots[i] = (char)k;
	}
	return 0;
}

void
peers_glibc_free_all(void **slots, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		free(slots[i]);
		slots[i] = NULL;
	}
}

/* ------------------------------------------------------------------ transactions ------------ */

/*
 * The large object updated by the transaction benchmark is the pool's root object, so that it is
 * found again without a pointer of ours. It is zeroed by PMDK when first allocated.
 */
int
peers_pmdk_tx_root(PMEMobjpool *pop, uint64_t object_size_bytes)
{
	errno = 0;
	PMEMoid root = pmemobj_root(pop, (size_t)object_size_bytes);
	return OID_IS_NULL(root) ? errno_or(ENOMEM) : 0;
}

/*
 * ops transactions, each: TX_BEGIN, pmemobj_tx_add_range over len_bytes at a random offset aligned
 * to 64 bytes, memcpy from src, TX_END (commit: flush the range, drop the undo log).
 */
int
peers_pmdk_tx_update_run(PMEMobjpool *pop, uint64_t object_size_bytes, uint64_t len_bytes,
			 const uint8_t *src, uint64_t ops, uint64_t *rng)
{
	PMEMoid root = pmemobj_root(pop, (size_t)object_size_bytes);
	if (OID_IS_NULL(root) || len_bytes == 0 || len_bytes > object_size_bytes)
		return EINVAL;
	uint8_t *base = pmemobj_direct(root);
	uint64_t slots = (object_size_bytes - len_bytes) / 64 + 1;
	for (uint64_t k = 0; k < ops; k++) {
		uint64_t off = (peers_rand(rng) % slots) * 64;
		volatile int err = 0;
		TX_BEGIN(pop) {
			pmemobj_tx_add_range(root, off, (size_t)len_bytes);
			memcpy(base + off, src, (size_t)len_bytes);
		} TX_ONABORT {
			err = errno_or(EIO);
		} TX_END
		if (err != 0)
			return err;
	}
	return 0;
}

/* ------------------------------------------- transactional alloc + link + commit ------------ */

struct peers_list_root {
	PMEMoid head;
	uint64_t count;
};

struct peers_node {
	PMEMoid next;
	uint64_t value;
};

/*
 * ops transactions, each: TX_BEGIN, pmemobj_tx_alloc(size_bytes), write the node's link and value
 * (a fresh object needs no snapshot), snapshot the list head and count, link the node at the head,
 * TX_END. Compares with pmo's "alloc + link + psync".
 */
int
peers_pmdk_tx_alloc_link_run(PMEMobjpool *pop, uint64_t size_bytes, uint64_t ops)
{
	if (size_bytes < sizeof(struct peers_node))
		return EINVAL;
	PMEMoid root_oid = pmemobj_root(pop, sizeof(struct peers_list_root));
	if (OID_IS_NULL(root_oid))
		return errno_or(ENOMEM);
	struct peers_list_root *root = pmemobj_direct(root_oid);
	for (uint64_t k = 0; k < ops; k++) {
		volatile int err = 0;
		TX_BEGIN(pop) {
			PMEMoid node_oid = pmemobj_tx_alloc((size_t)size_bytes, PEERS_TYPE_NODE);
			struct peers_node *node = pmemobj_direct(node_oid);
			node->next = root->head;
			node->value = root->count;
			pmemobj_tx_add_range_direct(root, sizeof(*root));
			root->head = node_oid;
			root->count += 1;
		} TX_ONABORT {
			err = errno_or(ENOMEM);
		} TX_END
		if (err != 0)
			return err;
	}
	return 0;
}

/* Frees the whole list in one transaction per node (not timed); returns the count it freed. */
int
peers_pmdk_tx_list_free(PMEMobjpool *pop, uint64_t *freed)
{
	PMEMoid root_oid = pmemobj_root(pop, sizeof(struct peers_list_root));
	if (OID_IS_NULL(root_oid))
		return errno_or(ENOMEM);
	struct peers_list_root *root = pmemobj_direct(root_oid);
	uint64_t n = 0;
	while (!OID_IS_NULL(root->head)) {
		volatile int err = 0;
		TX_BEGIN(pop) {
			PMEMoid head = root->head;
			struct peers_node *node = pmemobj_direct(head);
			pmemobj_tx_add_range_direct(root, sizeof(*root));
			root->head = node->next;
			root->count -= 1;
			pmemobj_tx_free(head);
		} TX_ONABORT {
			err = errno_or(EIO);
		} TX_END
		if (err != 0)
			return err;
		n++;
	}
	*freed = n;
	return 0;
}

/* ------------------------------------------------------- libpmem floor ----------------------- */

/*
 * A file mapped with libpmem: the floor under every durable write on this medium (copy, flush
 * each cache line, one fence), with no log and no allocator.
 */
struct peers_pmem_region {
	void *addr;
	size_t len;
	int is_pmem;
};

int
peers_pmem_map(const char *path, uint64_t len_bytes, struct peers_pmem_region *out)
{
	size_t mapped = 0;
	int is_pmem = 0;
	errno = 0;
	void *addr = pmem_map_file(path, (size_t)len_bytes, PMEM_FILE_CREATE | PMEM_FILE_EXCL,
				   0600, &mapped, &is_pmem);
	if (addr == NULL)
		return errno_or(EIO);
	if (mapped < (size_t)len_bytes) {
		pmem_unmap(addr, mapped);
		return ENOSPC;
	}
	out->addr = addr;
	out->len = mapped;
	out->is_pmem = is_pmem;
	return 0;
}

void
peers_pmem_unmap(struct peers_pmem_region *region)
{
	pmem_unmap(region->addr, region->len);
}

const char *
peers_pmem_errormsg(void)
{
	return pmem_errormsg();
}

/* ops copies of len_bytes from src to a random 64-byte-aligned offset, each made durable. */
int
peers_pmem_memcpy_persist_run(const struct peers_pmem_region *region, const uint8_t *src,
			      uint64_t len_bytes, uint64_t ops, uint64_t *rng)
{
	if (len_bytes == 0 || len_bytes > region->len)
		return EINVAL;
	uint8_t *base = region->addr;
	uint64_t slots = (region->len - len_bytes) / 64 + 1;
	for (uint64_t k = 0; k < ops; k++) {
		uint64_t off = (peers_rand(rng) % slots) * 64;
		pmem_memcpy_persist(base + off, src, (size_t)len_bytes);
	}
	return 0;
}

/* ------------------------------------------------------------------------- LMDB ------------- */

/* LMDB returns errno values or its own codes (MDB_KEYEXIST .. MDB_LAST_ERRCODE, all negative). */
const char *
peers_lmdb_strerror(int err)
{
	return mdb_strerror(err);
}

int
peers_lmdb_open(const char *dir, uint64_t map_size_bytes, unsigned int flags, MDB_env **out)
{
	MDB_env *env = NULL;
	int rc = mdb_env_create(&env);
	if (rc != 0)
		return rc;
	rc = mdb_env_set_mapsize(env, (size_t)map_size_bytes);
	if (rc == 0)
		rc = mdb_env_open(env, dir, flags, 0600);
	if (rc != 0) {
		mdb_env_close(env);
		return rc;
	}
	*out = env;
	return 0;
}

void
peers_lmdb_close(MDB_env *env)
{
	mdb_env_close(env);
}

/*
 * Puts count values under random keys in one transaction (the untimed prefill that gives every
 * sample the same starting tree).
 */
int
peers_lmdb_prefill(MDB_env *env, const uint8_t *value, uint64_t value_len, uint64_t count,
		   uint64_t *rng)
{
	MDB_txn *txn = NULL;
	MDB_dbi dbi;
	int rc = mdb_txn_begin(env, NULL, 0, &txn);
	if (rc != 0)
		return rc;
	rc = mdb_dbi_open(txn, NULL, 0, &dbi);
	for (uint64_t k = 0; rc == 0 && k < count; k++) {
		uint64_t key_bytes = peers_rand(rng);
		MDB_val key = { sizeof(key_bytes), &key_bytes };
		MDB_val data = { (size_t)value_len, (void *)value };
		rc = mdb_put(txn, dbi, &key, &data, 0);
	}
	if (rc != 0) {
		mdb_txn_abort(txn);
		return rc;
	}
	return mdb_txn_commit(txn);
}

/*
 * ops operations, each: begin a write transaction, put one value of value_len bytes under a random
 * 8-byte key, commit (synchronous: fdatasync unless the env was opened with MDB_NOSYNC).
 */
int
peers_lmdb_put_commit_run(MDB_env *env, const uint8_t *value, uint64_t value_len, uint64_t ops,
			  uint64_t *rng)
{
	for (uint64_t k = 0; k < ops; k++) {
		MDB_txn *txn = NULL;
		MDB_dbi dbi;
		int rc = mdb_txn_begin(env, NULL, 0, &txn);
		if (rc != 0)
			return rc;
		rc = mdb_dbi_open(txn, NULL, 0, &dbi);
		if (rc != 0) {
			mdb_txn_abort(txn);
			return rc;
		}
		uint64_t key_bytes = peers_rand(rng);
		MDB_val key = { sizeof(key_bytes), &key_bytes };
		MDB_val data = { (size_t)value_len, (void *)value };
		rc = mdb_put(txn, dbi, &key, &data, 0);
		if (rc != 0) {
			mdb_txn_abort(txn);
			return rc;
		}
		rc = mdb_txn_commit(txn);
		if (rc != 0)
			return rc;
	}
	return 0;
}

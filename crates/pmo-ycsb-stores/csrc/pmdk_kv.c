/*
 * A small persistent hash map over PMDK libpmemobj transactions, written in this project as
 * the YCSB store for PMDK (Debian ships libpmemobj but not PMDK's example maps, and no registry
 * package ships a ready map: docs/lmdb.md). It uses only libpmemobj's public API.
 *
 * Layout in the pool (layout name "pmo-ycsb-kv"):
 *   root:    { nbuckets, count, buckets }      buckets: PMEMoid[nbuckets], each a chain head
 *   entry:   { next, klen, vlen, key bytes, value bytes }   one allocation per record
 *
 * Every change is one libpmemobj transaction (undo log), durable when the call returns:
 *   - insert of a new key: allocate the entry, link it at its chain's end, count + 1;
 *   - update of the same length (YCSB writes whole records): snapshot the value bytes, copy;
 *   - update of another length: allocate a new entry, relink, free the old one.
 * The bucket count is fixed at creation (a power of two from the caller's capacity hint): there
 * is no rehash, so chains grow past the hint. Keys are unordered: no scans.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <libpmem.h>
#include <libpmemobj.h>

#define KV_LAYOUT "pmo-ycsb-kv"

struct kv_root {
	uint64_t nbuckets;
	uint64_t count;
	PMEMoid buckets;
};

struct kv_entry {
	PMEMoid next;
	uint32_t klen;
	uint32_t vlen;
	unsigned char data[]; /* key, then value */
};

struct pmdkkv {
	PMEMobjpool *pop;
	PMEMoid root_oid;
	struct kv_root *root;
	PMEMoid *buckets;
};

static int
errno_or(int fallback)
{
	return errno != 0 ? errno : fallback;
}

const char *
pmdkkv_errormsg(void)
{
	return pmemobj_errormsg();
}

static uint64_t
fnv1a(const unsigned char *k, uint32_t n)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	for (uint32_t i = 0; i < n; i++) {
		h ^= k[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

/* Creates the pool at path (which must not exist) with nbuckets chains (a power of two). */
int
pmdkkv_create(const char *path, uint64_t pool_bytes, uint64_t nbuckets, struct pmdkkv **out)
{
	if (nbuckets == 0 || (nbuckets & (nbuckets - 1)) != 0)
		return EINVAL;
	struct pmdkkv *kv = calloc(1, sizeof(*kv));
	if (kv == NULL)
		return ENOMEM;
	errno = 0;
	kv->pop = pmemobj_create(path, KV_LAYOUT, (size_t)pool_bytes, 0600);
	if (kv->pop == NULL) {
		int e = errno_or(EIO);
		free(kv);
		return e;
	}
	kv->root_oid = pmemobj_root(kv->pop, sizeof(struct kv_root));
	if (OID_IS_NULL(kv->root_oid)) {
		int e = errno_or(EIO);
		pmemobj_close(kv->pop);
		free(kv);
		return e;
	}
	kv->root = pmemobj_direct(kv->root_oid);
	volatile int err = 0;
	TX_BEGIN(kv->pop) {
		pmemobj_tx_add_range(kv->root_oid, 0, sizeof(struct kv_root));
		kv->root->buckets = pmemobj_tx_zalloc(nbuckets * sizeof(PMEMoid), 1);
		kv->root->nbuckets = nbuckets;
		kv->root->count = 0;
	} TX_ONABORT {
		err = errno_or(EIO);
	} TX_END
	if (err != 0) {
		pmemobj_close(kv->pop);
		free(kv);
		return err;
	}
	kv->buckets = pmemobj_direct(kv->root->buckets);
	*out = kv;
	return 0;
}

/* 1 when libpmem flushes the pool's memory as persistent memory (no msync). */
int
pmdkkv_is_pmem(struct pmdkkv *kv)
{
	return pmem_is_pmem(kv->root, sizeof(struct kv_root));
}

void
pmdkkv_close(struct pmdkkv *kv)
{
	pmemobj_close(kv->pop);
	free(kv);
}

uint64_t
pmdkkv_count(struct pmdkkv *kv)
{
	return kv->root->count;
}

/* The entry of key, and the PMEMoid that points at it (the bucket slot or a next field). */
static struct kv_entry *
find(struct pmdkkv *kv, const unsigned char *key, uint32_t klen, PMEMoid **link)
{
	PMEMoid *slot = &kv->buckets[fnv1a(key, klen) & (kv->root->nbuckets - 1)];
	while (!OID_IS_NULL(*slot)) {
		struct kv_entry *e = pmemobj_direct(*slot);
		if (e->klen == klen && memcmp(e->data, key, klen) == 0) {
			*link = slot;
			return e;
		}
		slot = &e->next;
	}
	*link = slot;
	return NULL;
}

/* Inserts or replaces key's value in one transaction; 0 or an errno value. */
int
pmdkkv_put(struct pmdkkv *kv, const unsigned char *key, uint32_t klen, const unsigned char *val,
	   uint32_t vlen)
{
	PMEMoid *link;
	struct kv_entry *e = find(kv, key, klen, &link);
	volatile int err = 0;
	errno = 0;
	if (e != NULL && e->vlen == vlen) {
		TX_BEGIN(kv->pop) {
			pmemobj_tx_add_range_direct(e->data + klen, vlen);
			memcpy(e->data + klen, val, vlen);
		} TX_ONABORT {
			err = errno_or(EIO);
		} TX_END
		return err;
	}
	TX_BEGIN(kv->pop) {
		PMEMoid n = pmemobj_tx_alloc(sizeof(struct kv_entry) + klen + vlen, 2);
		struct kv_entry *ne = pmemobj_direct(n);
		ne->klen = klen;
		ne->vlen = vlen;
		memcpy(ne->data, key, klen);
		memcpy(ne->data + klen, val, vlen);
		pmemobj_tx_add_range_direct(link, sizeof(PMEMoid));
		if (e != NULL) {
			/* replace: the new entry takes the old one's place in the chain */
			ne->next = e->next;
			PMEMoid old = *link;
			*link = n;
			pmemobj_tx_free(old);
		} else {
			ne->next = OID_NULL;
			*link = n;
			pmemobj_tx_add_range_direct(&kv->root->count, sizeof(uint64_t));
			kv->root->count += 1;
		}
	} TX_ONABORT {
		err = errno_or(EIO);
	} TX_END
	return err;
}

/* Points *val at key's value in the pool (valid until the next put or close): 1 found, 0 not. */
int
pmdkkv_get(struct pmdkkv *kv, const unsigned char *key, uint32_t klen, const unsigned char **val,
	   uint32_t *vlen)
{
	PMEMoid *link;
	struct kv_entry *e = find(kv, key, klen, &link);
	if (e == NULL)
		return 0;
	*val = e->data + klen;
	*vlen = e->vlen;
	return 1;
}

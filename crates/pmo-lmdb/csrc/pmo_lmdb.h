/*
 * pmo_lmdb.h - the hooks patches/mdb-pmo.patch adds to LMDB's mdb.c (implemented in Rust,
 * crates/pmo-lmdb/src/glue.rs). Design: docs/lmdb.md.
 */
#ifndef PMO_LMDB_H
#define PMO_LMDB_H

#include <pthread.h>
#include <stddef.h>
#include <sys/types.h>

/** One environment's PMO, attached at its stable address. */
typedef struct pmo_lmdb_map {
	char *base;             /**< the attachment: LMDB's map */
	size_t size;            /**< the PMO's size: the map size */
	const char *lock_path;  /**< where LMDB keeps its lock file (a directory, or
	                             with MDB_NOSUBDIR the prefix of "-lock") */
	void *handle;           /**< the glue's state */
	int writemap;           /**< 1: a writer runs with MDB_WRITEMAP (the default); 0: it
	                         * copies its pages in with pmo_lmdb_pwrite (PMO_LMDB_WRITEMAP=0) */
	int snapshot;           /**< 1: a reader beside a writer: its view shows one psync and
	                         * moves with pmo_lmdb_refresh when a read txn begins */
	unsigned int lagging;   /**< live read txns showing an older psync than the lock file's
	                         * txnid (an unpsynced commit): the view stays while any runs */
	pthread_mutex_t txn_mutex; /**< guards lagging and the refresh (mdb.c takes it) */
} pmo_lmdb_map;

/** If `path` names a PMO ("pmo:NAME", or any path while PMO_LMDB=1), attach it (read-only
 * under MDB_RDONLY; a writer creates a missing PMO of `want_size` bytes, the map size the
 * program set, or when that is 0 of PMO_LMDB_SIZE bytes, else 64 MiB) and set *out; otherwise
 * set *out to NULL. Returns 0 or an errno
 * (ENOENT, EACCES wrong key, EBUSY, ENOSPC, EINVAL, EIO integrity); the message is kept for
 * pmo_lmdb_last_error(). */
int pmo_lmdb_open(const char *path, unsigned int flags, size_t want_size, pmo_lmdb_map **out);

/** psync the PMO: every store since the last psync becomes durable, atomically.
 * Returns 0 or an errno. */
int pmo_lmdb_psync(pmo_lmdb_map *map);

/** pread(2) on the PMO: a PMO never psynced reads as an empty file (returns 0). */
ssize_t pmo_lmdb_pread(pmo_lmdb_map *map, void *buf, size_t len, size_t off);

/** Store `len` bytes at `off` into the attachment. Returns 1 on success, 0 (errno set) if the
 * range is outside the PMO or the attachment is read-only (DO_PWRITE's convention). */
int pmo_lmdb_pwrite(pmo_lmdb_map *map, const void *buf, size_t len, size_t off);

/** Name [addr, addr + len) inside the attachment as written since the last psync, so the next
 * psync commits it (the attachment's declared dirty tracking; harmless with the others). */
void pmo_lmdb_declare(pmo_lmdb_map *map, const void *addr, size_t len);

/** Read one byte of every page of [addr, addr + len) inside the attachment, so that a system
 * call (write(2) in mdb_env_copy) finds them filled: the kernel does not fault an attachment's
 * pages in itself. */
void pmo_lmdb_prefault(pmo_lmdb_map *map, const void *addr, size_t len);

/** A reader beside a writer (map->snapshot): move the view to the newest psync (the pages
 * that changed drop from it and fill again). Called with map->txn_mutex held, when no live
 * read txn of this environment is lagging. Returns 0 or an errno. */
int pmo_lmdb_refresh(pmo_lmdb_map *map);

/** A writer's mdb_env_set_mapsize beyond the PMO's size: grow the PMO to `size` bytes (in
 * place within its layout capacity; otherwise psync, detach, resize and attach again, at the
 * same address where it is free) and update map->base and map->size. Returns 0 or an errno
 * (EBUSY: readers are attached; ENOSPC: the pool is full), the map unchanged; map->base is
 * NULL if the PMO could not be attached again (the environment is then unusable). */
int pmo_lmdb_grow(pmo_lmdb_map *map, size_t size);

/** psync (when `sync` is set), then detach and free `map`. */
void pmo_lmdb_close(pmo_lmdb_map *map, int sync);

/** The message of this thread's latest failed hook, or NULL. */
const char *pmo_lmdb_last_error(void);

#endif

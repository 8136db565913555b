/*
 * pmo_heap.h - the persistent heap of libpmo: pmo_p_malloc and friends, and named heaps.
 *
 * Kept apart from pmo.h so that pmo.h declares exactly the research kernel's PMO API plus
 * pmo's own calls: programs written for that kernel define their own allocator (p_malloc,
 * p_free, p_persist, ...), so libpmo's allocator uses the pmo_p_ and pmo_heap_ prefixes and a
 * program includes this header only when it wants libpmo's heap. Porting a program from its
 * own p_* allocator to this one is a rename: p_malloc -> pmo_p_malloc, and so on.
 *
 * Link as for pmo.h (docs/c-api.md).
 */
#ifndef PMO_HEAP_H
#define PMO_HEAP_H

#include "pmo.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * Persistent heap
 *
 * A heap lives inside a PMO (POSEIDON: per-CPU sub-heaps, metadata apart from user data, every
 * free checked against the table of live blocks). All of its state is in the PMO, so
 * "allocate, link, psync" is atomic: after a crash the heap and the data are exactly as of the
 * last psync, with no allocator log. Blocks are raw memory at stable addresses: pointers
 * between them survive detach and restart. A heap's PMO is attached read-write by this
 * process while the heap is open (detach()/psync()/pmo_get_name() accept any address in it).
 *
 * The pmo_p_* calls work with no set-up on the DEFAULT HEAP, opened on first use and created if
 * missing: PMO $PMO_HEAP (default "pmo.default-heap") in this process's pool, of $PMO_HEAP_SIZE
 * bytes (default 256 MiB; suffixes K, M, G), key $PMO_KEY (empty if unset). These variables
 * are read once, when the default heap is opened. pmo_p_free, pmo_p_realloc and pmo_p_sizeof accept a
 * block of any heap open in this process, not only the default one.
 * ------------------------------------------------------------------------------------------- */

/** Allocate `size` bytes (16-byte aligned, not zeroed) from the default heap. Not durable
 * until pmo_p_persist() (or psync of the heap).
 * @return the block, or NULL with errno ENOMEM (heap full, PMO_E_HEAP_FULL), or an error of
 *         opening the default heap (ENOENT, EACCES wrong PMO_KEY, EBUSY, ENOSPC, EINVAL
 *         PMO_E_NOT_A_HEAP when the PMO exists but holds no heap, EIO). */
void *pmo_p_malloc(size_t size);

/** Allocate `nmemb * size` zeroed bytes from the default heap.
 * @return the block, or NULL with errno ENOMEM (also when the product overflows), or as
 *         pmo_p_malloc. */
void *pmo_p_calloc(size_t nmemb, size_t size);

/** Resize the block at `ptr` (in any open heap) to `size` bytes, keeping its contents up to
 * the smaller size; it may move. `ptr` NULL: pmo_p_malloc(size). `size` 0: free `ptr`, return NULL
 * (pmo_last_error() == 0).
 * @return the block, or NULL with errno EINVAL (`ptr` is not a live block, PMO_E_BAD_FREE; it
 *         is left as it was) or ENOMEM (the old block is left as it was). */
void *pmo_p_realloc(void *ptr, size_t size);

/** Free the block at `ptr` (in any open heap). NULL is a no-op (returns 0).
 * @return 0, or -1 with errno EINVAL (PMO_E_BAD_FREE): an invalid pointer, a double free or an
 *         interior pointer; the heap is unchanged. */
int pmo_p_free(void *ptr);

/** @return the usable size of the block at `ptr` (>= the size asked for), or 0 with errno
 *          EINVAL (not a live block). */
size_t pmo_p_sizeof(void *ptr);

/** psync the default heap: every allocation, free and write into its blocks since the last
 * pmo_p_persist becomes durable, atomically. Opens the default heap if it is not open yet.
 * @return 0, or -1 with errno as psync(), or as pmo_p_malloc when opening the heap fails. */
int pmo_p_persist(void);

/** @return the default heap's root block (where a program finds its data after a restart), or
 *          NULL: no root (pmo_last_error() == 0), or an error opening the heap. */
void *pmo_p_get_root(void);

/** Make `ptr` (a live block of the default heap, or NULL to clear) its root. Durable at the
 * next pmo_p_persist.
 * @return 0, or -1 with errno EINVAL (not a live block of the default heap). */
int pmo_p_set_root(void *ptr);

/** A heap open in this process. Opaque; its value is the heap's first address, checked on
 * every call: a handle used after pmo_heap_close() is an error (PMO_E_NOT_ATTACHED), never
 * undefined behaviour. */
typedef struct pmo_heap pmo_heap;

/** Open the heap in PMO `name` (attached read-write). If the PMO is missing and `create_size`
 * is not 0, create it with that many bytes and an empty heap (durable at once). On success
 * stores the handle in *heap_out.
 * @return 0, or PMO_E_NOT_FOUND (missing, create_size 0), PMO_E_WRONG_KEY, PMO_E_BUSY
 *         (attached by another process, or already open in this one), PMO_E_NOT_A_HEAP,
 *         PMO_E_NO_SPACE, PMO_E_INVALID, PMO_E_LIMIT, PMO_E_CORRUPT, PMO_E_IO. */
int pmo_heap_open(const char *name, const char *key, uint64_t create_size, pmo_heap **heap_out);

/** @return the default heap (opened, and created if missing, as for pmo_p_malloc), or NULL with
 *          errno and pmo_last_error() as pmo_p_malloc. */
pmo_heap *pmo_heap_default(void);

/** Close a heap: detach its PMO. Changes since its last psync are discarded. Blocks of the
 * heap are invalid afterwards.
 * @return 0, or PMO_E_NOT_ATTACHED (not an open heap), PMO_E_INVALID (a plain attachment). */
int pmo_heap_close(pmo_heap *heap);

/** Allocate `size` bytes aligned to `align` (a power of two up to 4096; 0: 16).
 * @return the block, or NULL with errno ENOMEM (PMO_E_HEAP_FULL) or EINVAL (bad alignment,
 *         bad handle). */
void *pmo_heap_alloc(pmo_heap *heap, size_t size, size_t align);

/** pmo_p_realloc() within `heap`. */
void *pmo_heap_realloc(pmo_heap *heap, void *ptr, size_t size);

/** Free a block of `heap` (NULL: no-op).
 * @return 0, or PMO_E_BAD_FREE (invalid, double or interior: nothing changes),
 *         PMO_E_NOT_ATTACHED (bad handle). */
int pmo_heap_free(pmo_heap *heap, void *ptr);

/** @return the usable size of a block of `heap`, or 0 (PMO_E_BAD_FREE, bad handle). */
size_t pmo_heap_usable_size(pmo_heap *heap, void *ptr);

/** psync the heap's PMO, allocator calls of other threads held off while it runs.
 * @return pages committed (>= 0), or a PMO_E_* code as pmo_psync_ex. */
int64_t pmo_heap_psync(pmo_heap *heap, pmo_psync_stats *stats);

/** @return the heap's root block, or NULL (none: pmo_last_error() == 0; or a bad handle). */
void *pmo_heap_root(pmo_heap *heap);

/** Make a live block of `heap` (or NULL) its root.
 * @return 0, or PMO_E_BAD_FREE (not a live block), PMO_E_NOT_ATTACHED. */
int pmo_heap_set_root(pmo_heap *heap, void *ptr);

/** Call `visit(block, usable_size, ctx)` for every live block of `heap`, in address order,
 * until it returns non-zero. The blocks are listed first and visited with no lock held, so
 * `visit` may call libpmo (even free the block it is given).
 * @return the number of blocks visited, or PMO_E_INVALID (visit NULL), PMO_E_NOT_ATTACHED,
 *         PMO_E_CORRUPT. */
int64_t pmo_heap_foreach(pmo_heap *heap, int (*visit)(void *block, size_t usable_size, void *ctx),
                         void *ctx);

/** Run the heap checker: no overlapping blocks, allocated + free == capacity, every block in
 * the table of live blocks, the root a live block.
 * @return 0, or PMO_E_CORRUPT (pmo_last_error_message() says what), PMO_E_NOT_ATTACHED. */
int pmo_heap_check(pmo_heap *heap);

#ifdef __cplusplus
}
#endif

#endif /* PMO_HEAP_H */

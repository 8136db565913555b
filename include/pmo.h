/*
 * pmo.h - the C API of pmo, user-space Persistent Memory Objects (libpmo).
 *
 * Link with -lpmo (shared) or libpmo.a plus -lpthread -ldl -lm -lrt -lutil -lgcc_s (static);
 * docs/c-api.md has the full build instructions.
 *
 * OVERVIEW
 *
 * A Persistent Memory Object (PMO) is a named, key-protected region of persistent memory held in
 * a pool (one file or device). attach() maps a PMO into the process at its stable address, the
 * same in every process and every run, so raw pointers stored inside a PMO stay valid across
 * detach/attach and across restarts. Changes become durable only at psync(), atomically: after a
 * crash the PMO reads exactly as of its last completed psync. detach() unmaps and discards
 * changes made since the last psync.
 *
 * Many readers or one writer per PMO, across threads and processes. A conflicting attach fails
 * at once with EBUSY (pmo_attach_ex can wait). A writer that dies releases its lock.
 *
 * The first half of this header is source-compatible with the research kernel's PMO user
 * header: programs written for it build unchanged. Those calls return NULL / -1 / 0 on failure
 * and set errno:
 *   ENOENT  no PMO of that name        EEXIST  the name is taken
 *   ENOSPC  the pool or namespace is full
 *   EACCES  wrong key, or psync on a read-only attachment
 *   EBUSY   attached in a conflicting mode by another user (thread or process), or the PMO's
 *           stable address range is already mapped in this process (e.g. it is attached already)
 *   EINVAL  bad argument (NULL pointer, perm not 'r'/'w', size 0, bad name, address not inside
 *           an attached PMO, not a pmo pool)
 *   EMFILE  too many live attachments in this process (1024)
 *   EIO     the pool is corrupted, failed an integrity check, or an internal error
 * Every call also records a PMO_E_* code, read back by pmo_last_error() (0 after a successful
 * call), with a message from pmo_last_error_message().
 *
 * THE POOL
 *
 * The first call that needs a pool opens the one named by the environment variable PMO_POOL, or
 * if it is unset or empty $XDG_DATA_HOME/pmo/default.pool (else ~/.local/share/pmo/default.pool).
 * A missing pool file is created then: 1 GiB, sparse, Argon2id key derivation with its default
 * parameters (PMO_KDF=fast selects insecure fast parameters: for tests only; it is read only
 * when a pool is created). PMO_POOL is read once: changing it later has no effect until
 * pmo_pool_close(). pmo_pool_open() names a pool explicitly.
 *
 * CAVEATS
 *  - Writing through a read-only attachment raises SIGSEGV, as with any read-only mapping.
 *  - After detach() the PMO's memory is gone: touching it is undefined behaviour.
 *  - Attaching the same PMO twice in one process fails with EBUSY (one mapping per PMO).
 *  - A PMO attached with PMO_ATTACH_RELOCATE somewhere other than its stable address holds
 *    raw pointers that point to the stable address, not into the mapping.
 *  - Keys are NUL-terminated strings; the same string gives the same key as the pmo CLI's
 *    PMO_KEY.
 *  - After fork() the child has none of the parent's attachments: their ranges are not mapped
 *    in the child (touching them raises SIGSEGV), and detach/psync/pmo_get_name on them fail
 *    with EINVAL without disturbing the parent's locks. The child is another user of the pool:
 *    attaching a PMO the parent holds in a conflicting mode fails with EBUSY. Do not fork()
 *    while another thread is inside a libpmo call.
 *
 * THREADS
 *
 * Every call is thread-safe. psync() of one attachment from several threads serialises; writes
 * racing with a psync land in that psync or the next. detach() while another thread still uses
 * the memory is undefined behaviour, as with munmap().
 */
#ifndef PMO_H
#define PMO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PMO_VERSION_MAJOR 0
#define PMO_VERSION_MINOR 1

/* ---------------------------------------------------------------------------------------------
 * Source-compatible API (research kernel's PMO user header)
 * ------------------------------------------------------------------------------------------- */

/** Map PMO `name` at its stable address.
 * @param perm 'r' or 'R' read-only, 'w' or 'W' read-write.
 * @param key  the PMO's key (NUL-terminated).
 * @return the address of the first byte, or NULL with errno: ENOENT (no such PMO), EACCES (wrong
 *         key), EBUSY (attached for writing elsewhere, or for reading when perm is 'w'; or the
 *         address range is taken in this process), EINVAL (NULL name/key, bad perm), EMFILE,
 *         EIO. Pages are read on first touch. */
void *attach(const char *name, char perm, const char *key);

/** Same as attach(). */
void *pmo_attach(const char *name, char perm, const char *key);

/** Unmap the attachment containing `addr` (the address attach returned, or any address inside
 * the PMO) and release its lock. Changes since the last psync are discarded.
 * @return 0, or -1 with errno EINVAL (addr is not inside an attachment of this process). */
int detach(void *addr);

/** Same as detach(). */
int pmo_detach(void *addr);

/** Make every change to the attachment containing `addr` since its last psync durable,
 * atomically: after a crash the PMO is either as of this psync or as before it, never a mix.
 * Costs in proportion to the pages written, not the PMO size.
 * @return 0, or -1 with errno EINVAL (addr not inside an attachment), EACCES (read-only
 *         attachment), EIO (the medium failed: the pool is then unusable until reopened). */
int psync(void *addr);

/** Same as psync(): pmo always checksums its commits; kept for source compatibility. */
int psync_nochecksum(void *addr);

/** Create PMO `name` of `size` bytes (rounded up to 4 KiB pages, zero-filled) protected by
 * `key`. The key itself is never stored: only a salted Argon2id verifier.
 * @return `key` (the pointer passed in), or NULL with errno: EEXIST (name taken), ENOSPC (pool
 *         or namespace full), EINVAL (NULL name/key, size 0, name empty, containing '/',
 *         longer than 255 bytes or not UTF-8), EIO. */
const char *pmo_create(const char *name, uint64_t size, const char *key);

/** Destroy PMO `name`, freeing its space.
 * @return 0, or -1 with errno: ENOENT, EACCES (wrong key), EBUSY (attached by anyone, this
 *         process included), EINVAL, EIO. */
int pmo_destroy(const char *name, const char *key);

/** @return 1 if PMO `name` exists, else 0. On failure also 0, with errno set (EINVAL, EIO) and
 *         pmo_last_error() != 0; pmo_last_error() == 0 means "does not exist". */
char pmo_exists(const char *name);

/** @return the size in bytes of PMO `name` (a multiple of 4096), or 0 with errno ENOENT,
 *          EINVAL, EIO. */
size_t pmo_get_size(const char *name);

/** @return the name of the PMO attached at `addr` (any address inside it), in memory from
 *          malloc() that the caller releases with free(); or NULL with errno EINVAL (not inside
 *          an attachment) or ENOMEM. */
char *pmo_get_name(void *addr);

/* ---------------------------------------------------------------------------------------------
 * pmo API: PMO_E_* codes
 *
 * The calls below return 0 (or a count) on success and a negative PMO_E_* code on failure; they
 * also set errno as above. PMO_E_* codes lie in [PMO_E_LAST, PMO_E_FIRST], a range no errno can
 * take, so pmo_strerror() describes both.
 * ------------------------------------------------------------------------------------------- */

#define PMO_SUCCESS            0
#define PMO_E_FIRST        (-1001)
#define PMO_E_WRONG_KEY    (-1001) /* wrong key                                  (EACCES) */
#define PMO_E_NOT_FOUND    (-1002) /* no PMO of that name / no such pool file    (ENOENT) */
#define PMO_E_EXISTS       (-1003) /* a PMO of that name already exists          (EEXIST) */
#define PMO_E_NO_SPACE     (-1004) /* the pool or its namespace is full          (ENOSPC) */
#define PMO_E_BUSY         (-1005) /* conflicting user, or pool has attachments  (EBUSY)  */
#define PMO_E_ADDRESS_IN_USE (-1006) /* stable address range mapped already      (EBUSY)  */
#define PMO_E_INVALID      (-1007) /* invalid argument                           (EINVAL) */
#define PMO_E_READ_ONLY    (-1008) /* psync on a read-only attachment            (EACCES) */
#define PMO_E_NOT_A_POOL   (-1009) /* the file is not a pmo pool                 (EINVAL) */
#define PMO_E_CORRUPT      (-1010) /* integrity check failed                     (EIO)    */
#define PMO_E_POISONED     (-1011) /* pool unusable after a persistence failure  (EIO)    */
#define PMO_E_IO           (-1012) /* I/O or OS error (errno: the OS's, else EIO)         */
#define PMO_E_NOT_ATTACHED (-1013) /* address not inside an attachment           (EINVAL) */
#define PMO_E_LIMIT        (-1014) /* too many live attachments (1024)           (EMFILE) */
#define PMO_E_INTERNAL     (-1015) /* a bug in libpmo, caught at the boundary    (EIO)    */
#define PMO_E_NOT_A_HEAP   (-1016) /* the PMO holds no heap                      (EINVAL) */
#define PMO_E_BAD_FREE     (-1017) /* not a live block: invalid/double/interior  (EINVAL) */
#define PMO_E_HEAP_FULL    (-1018) /* no free block of that size in the heap     (ENOMEM) */
#define PMO_E_UNSUPPORTED  (-1019) /* scheme/feature not implemented, or pool too old (ENOTSUP) */
#define PMO_E_LAST         (-1019)

/** Default size of a pool the library creates, in bytes (1 GiB). */
#define PMO_POOL_DEFAULT_SIZE ((uint64_t)1 << 30)

/** Open the pool at `path` (NULL: PMO_POOL, else the default path) as this process's pool,
 * replacing the one open (on failure the one open stays open). If the file is missing and
 * `create_size` is not 0, create it with that many bytes (sparse, KDF from PMO_KDF as above);
 * with `create_size` 0 a missing file is an error.
 * @return 0, or PMO_E_BUSY (this process has attachments), PMO_E_NOT_FOUND (no such file and
 *         create_size is 0), PMO_E_NOT_A_POOL, PMO_E_CORRUPT, PMO_E_INVALID, PMO_E_IO. */
int pmo_pool_open(const char *path, uint64_t create_size);

/** Close this process's pool. The next call that needs a pool opens one again, reading
 * PMO_POOL anew. Closing with no pool open succeeds.
 * @return 0, or PMO_E_BUSY (attachments remain, open heaps included: detach them, and close
 *         the default heap with pmo_heap_close(pmo_heap_default()), first). */
int pmo_pool_close(void);

/** pmo_attach_opts.flags: if the stable address range is taken, map the PMO elsewhere. */
#define PMO_ATTACH_RELOCATE 1u
/** pmo_attach_opts.flags: read every page at attach instead of on first touch. */
#define PMO_ATTACH_POPULATE 2u

/** Options of pmo_attach_ex(). Zero-initialise, then set fields. */
typedef struct pmo_attach_opts {
    uint32_t flags;   /* PMO_ATTACH_* bits; others are rejected with PMO_E_INVALID */
    uint32_t wait_ms; /* wait up to this long for a conflicting user to detach; 0: fail at once */
    const char *scheme; /* NULL: the PMO's own scheme; else run this attach under another design
                           that stores pages the same way (a PMO created "sp-id" attaches as
                           "bp-ip", "bp-id", "sp-ip" or "sp-id"; "wed" as "bp" or "sp"):
                           PMO_E_INVALID otherwise */
} pmo_attach_opts;

/** attach() with options. `opts` may be NULL (defaults). On success stores the address in
 * *addr_out (a relocated mapping is not at the stable address).
 * @return 0, or PMO_E_NOT_FOUND, PMO_E_WRONG_KEY, PMO_E_BUSY (still busy after wait_ms),
 *         PMO_E_ADDRESS_IN_USE (without PMO_ATTACH_RELOCATE), PMO_E_INVALID, PMO_E_LIMIT,
 *         PMO_E_CORRUPT, PMO_E_IO. */
int pmo_attach_ex(const char *name, char perm, const char *key, const pmo_attach_opts *opts,
                  void **addr_out);

/** What one psync committed. */
typedef struct pmo_psync_stats {
    uint64_t pages;           /* pages committed */
    uint64_t bytes_persisted; /* bytes written to the medium (data, journal, commit record) */
    uint64_t elapsed_ns;      /* wall time of the commit */
    uint64_t seq;             /* commit sequence number; 0 when nothing was committed */
} pmo_psync_stats;

/** psync() reporting what it did. `stats` may be NULL.
 * @return the number of pages committed (>= 0), or PMO_E_NOT_ATTACHED, PMO_E_READ_ONLY,
 *         PMO_E_POISONED, PMO_E_IO. */
int64_t pmo_psync_ex(void *addr, pmo_psync_stats *stats);

/** Create PMO `name` with protection scheme `scheme`: "secure" (AES-256-GCM per page with a MAC
 * over the page map: the default), "none", or the LOaPP paper's "wed", "wedi", "bp", "bp-ip",
 * "sp", "sp-ip", "bp-id", "sp-id" (`pmo scheme show` lists them); a ":medium" suffix keeps the
 * plaintext copy of an attached PMO on the medium instead of DRAM. NULL: the
 * pool's default (or PMO_SCHEME).
 * @return 0, or PMO_E_EXISTS, PMO_E_NO_SPACE, PMO_E_INVALID (bad name, size 0, unknown
 *         scheme), PMO_E_UNSUPPORTED (a scheme this build does not implement yet, or a pool
 *         too old for protection), PMO_E_IO. */
int pmo_create_ex(const char *name, uint64_t size, const char *key, const char *scheme);

/** Where the time of one attach session went (the LOaPP paper's Fig. 6 categories), in
 * nanoseconds, and what it did. The categories add up to wall_ns. */
typedef struct pmo_session_stats {
    uint64_t wall_ns;          /* since the attach began */
    uint64_t attach_stall_ns;  /* waiting for another user to detach */
    uint64_t attach_other_ns;  /* the rest of attach (key check, recovery, verification) */
    uint64_t pf_ns;            /* serving page faults (read, decrypt, verify, install) */
    uint64_t psync_crypt_ns;   /* psync: snapshot and encrypt (or copy) dirty pages */
    uint64_t psync_persist_ns; /* psync: collect, write, flush, fence, integrity updates */
    uint64_t detach_ns;        /* 0 while attached */
    uint64_t compute_ns;       /* everything else: the application */
    uint64_t faults;
    uint64_t pages_decrypted;
    uint64_t pages_encrypted;
    uint64_t psyncs;
    uint64_t bytes_persisted;
    uint64_t predicted;        /* pages decrypted ahead of use by prediction */
} pmo_session_stats;

/** The session statistics of the attachment containing `addr` (not a heap's).
 * @return 0, or PMO_E_NOT_ATTACHED, PMO_E_INVALID (NULL stats, or a heap's address). */
int pmo_get_session_stats(void *addr, pmo_session_stats *stats);

/** @return the PMO_E_* code of this thread's latest libpmo call (0 if it succeeded). */
int pmo_last_error(void);

/** @return a message describing this thread's latest failure (more detail than
 *          pmo_strerror: names, sizes); "" after a success. Valid until the thread's next
 *          libpmo call. */
const char *pmo_last_error_message(void);

/** @return a static description of `err`: a PMO_E_* code, 0, or a positive errno (then as
 *          strerror(3)). Never NULL. */
const char *pmo_strerror(int err);

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
 * The p_* calls work with no set-up on the DEFAULT HEAP, opened on first use and created if
 * missing: PMO $PMO_HEAP (default "pmo.default-heap") in this process's pool, of $PMO_HEAP_SIZE
 * bytes (default 256 MiB; suffixes K, M, G), key $PMO_KEY (empty if unset). These variables
 * are read once, when the default heap is opened. p_free, p_realloc and p_sizeof accept a
 * block of any heap open in this process, not only the default one.
 * ------------------------------------------------------------------------------------------- */

/** Allocate `size` bytes (16-byte aligned, not zeroed) from the default heap. Not durable
 * until p_persist() (or psync of the heap).
 * @return the block, or NULL with errno ENOMEM (heap full, PMO_E_HEAP_FULL), or an error of
 *         opening the default heap (ENOENT, EACCES wrong PMO_KEY, EBUSY, ENOSPC, EINVAL
 *         PMO_E_NOT_A_HEAP when the PMO exists but holds no heap, EIO). */
void *p_malloc(size_t size);

/** Allocate `nmemb * size` zeroed bytes from the default heap.
 * @return the block, or NULL with errno ENOMEM (also when the product overflows), or as
 *         p_malloc. */
void *p_calloc(size_t nmemb, size_t size);

/** Resize the block at `ptr` (in any open heap) to `size` bytes, keeping its contents up to
 * the smaller size; it may move. `ptr` NULL: p_malloc(size). `size` 0: free `ptr`, return NULL
 * (pmo_last_error() == 0).
 * @return the block, or NULL with errno EINVAL (`ptr` is not a live block, PMO_E_BAD_FREE; it
 *         is left as it was) or ENOMEM (the old block is left as it was). */
void *p_realloc(void *ptr, size_t size);

/** Free the block at `ptr` (in any open heap). NULL is a no-op (returns 0).
 * @return 0, or -1 with errno EINVAL (PMO_E_BAD_FREE): an invalid pointer, a double free or an
 *         interior pointer; the heap is unchanged. Programs written for a `void p_free` build
 *         unchanged. */
int p_free(void *ptr);

/** @return the usable size of the block at `ptr` (>= the size asked for), or 0 with errno
 *          EINVAL (not a live block). */
size_t p_sizeof(void *ptr);

/** psync the default heap: every allocation, free and write into its blocks since the last
 * p_persist becomes durable, atomically. Opens the default heap if it is not open yet.
 * @return 0, or -1 with errno as psync(), or as p_malloc when opening the heap fails. */
int p_persist(void);

/** @return the default heap's root block (where a program finds its data after a restart), or
 *          NULL: no root (pmo_last_error() == 0), or an error opening the heap. */
void *p_get_root(void);

/** Make `ptr` (a live block of the default heap, or NULL to clear) its root. Durable at the
 * next p_persist.
 * @return 0, or -1 with errno EINVAL (not a live block of the default heap). */
int p_set_root(void *ptr);

/** A heap open in this process. Opaque; its value is the heap's first address, checked on
 * every call: a handle used after pmo_heap_close() is an error (PMO_E_NOT_ATTACHED), never
 * undefined behaviour. */
typedef struct pmo_heap pmo_heap;

/** Open the heap in PMO `name` (attached read-write). If the PMO is missing and `create_size`
 * is not 0, create it with that many bytes and an empty heap (durable at once). On success
 * stores the handle in *heap_out.
 * @return 0, or PMO_E_NOT_FOUND (missing, create_size 0), PMO_E_WRONG_KEY, PMO_E_BUSY,
 *         PMO_E_ADDRESS_IN_USE (attached already in this process), PMO_E_NOT_A_HEAP,
 *         PMO_E_NO_SPACE, PMO_E_INVALID, PMO_E_LIMIT, PMO_E_CORRUPT, PMO_E_IO. */
int pmo_heap_open(const char *name, const char *key, uint64_t create_size, pmo_heap **heap_out);

/** @return the default heap (opened, and created if missing, as for p_malloc), or NULL with
 *          errno and pmo_last_error() as p_malloc. */
pmo_heap *pmo_heap_default(void);

/** Close a heap: detach its PMO. Changes since its last psync are discarded. Blocks of the
 * heap are invalid afterwards.
 * @return 0, or PMO_E_NOT_ATTACHED (not an open heap), PMO_E_INVALID (a plain attachment). */
int pmo_heap_close(pmo_heap *heap);

/** Allocate `size` bytes aligned to `align` (a power of two up to 4096; 0: 16).
 * @return the block, or NULL with errno ENOMEM (PMO_E_HEAP_FULL) or EINVAL (bad alignment,
 *         bad handle). */
void *pmo_heap_alloc(pmo_heap *heap, size_t size, size_t align);

/** p_realloc() within `heap`. */
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

#endif /* PMO_H */

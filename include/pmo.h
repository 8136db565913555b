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
 * The first half of this header is the research kernel's PMO user header: its includes, types
 * and calls, so programs written for it build unchanged (docs/c-api.md has the compatibility
 * table). The rest is pmo's own API, all in the pmo_ / PMO_ namespace; libpmo's persistent heap
 * (pmo_p_malloc, pmo_heap_*) is declared in pmo_heap.h, so that the p_malloc family a program
 * of the reference defines for itself never collides with libpmo. The reference's calls
 * return NULL / -1 / 0 on failure and set errno:
 *   ENOENT  no PMO of that name        EEXIST  the name is taken
 *   ENOSPC  the pool or namespace is full
 *   EACCES  wrong key, or psync on a read-only attachment
 *   EBUSY   attached in a conflicting mode by another user (thread or process), or the PMO's
 *           stable address range is already mapped in this process by something else
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
 *  - One mapping per PMO per process: attach() of a PMO this process has attached returns
 *    that mapping (pmo_attach_ex() fails with EBUSY instead).
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

/* The reference header's includes: its programs rely on them (exit, atoi, printf, getpid). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <unistd.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PMO_VERSION_MAJOR 0
#define PMO_VERSION_MINOR 2

/* ---------------------------------------------------------------------------------------------
 * Source-compatible API (the research kernel's PMO user header and manual pages)
 *
 * Every `key` below may be NULL: it then means the key "DEFAULT", as the reference's
 * pmo_create(2) manual page says. Parameters are `const char *` where the reference has
 * `char *` (a caller's `char *` converts; string literals work from C++ too).
 * docs/c-api.md's compatibility table lists every call and where pmo differs on purpose.
 * ------------------------------------------------------------------------------------------- */

/** Map PMO `name` at its stable address.
 * @param perm 'r' or 'R' read-only, 'w' or 'W' read-write.
 * @param key  the PMO's key (NUL-terminated; NULL: "DEFAULT").
 * If this process has `name` attached already (through attach and its aliases), the key is
 * checked and the same mapping is returned: one detach() then detaches it. A read-only
 * attachment is not upgraded: perm 'w' on it fails with EBUSY.
 * @return the address of the first byte, or NULL with errno: ENOENT (no such PMO), EACCES (wrong
 *         key), EBUSY (attached for writing elsewhere, or for reading when perm is 'w'; or the
 *         address range is taken in this process), EINVAL (NULL name, bad perm), EMFILE,
 *         EIO. Pages are read on first touch. */
void *attach(const char *name, char perm, const char *key);

/** Same as attach(). */
void *pmo_attach(const char *name, char perm, const char *key);

/** Same as attach() (the reference's attach of its secure configuration: every pmo PMO is
 * protected by the scheme it was created with). */
void *secure_attach(const char *name, char perm, const char *key);

/** Same as attach() (the reference's attach of its dynamic configuration). */
void *dynamic_attach(const char *name, char perm, const char *key);

/** attach() the whole PMO and return the address `offset` bytes into it: the subset
 * [offset, offset + size) is accessible there (size 0: to the end). `offset` must be a
 * multiple of 4096 and the subset inside the PMO, else NULL with EINVAL. pmo maps whole PMOs:
 * the rest of the PMO is mapped too, and detach() of any address in it detaches all of it.
 * @return as attach(). */
void *subset_attach(const char *name, char perm, const char *key, size_t size, size_t offset);

/** Unmap the attachment containing `addr` (the address attach returned, or any address inside
 * the PMO) and release its lock. Changes since the last psync are discarded.
 * @return 0 (also when the PMO `addr` belonged to was detached already by this process, as
 *         the reference's detach(2) says), or -1 with errno EINVAL (addr was never inside an
 *         attachment of this process). */
int detach(void *addr);

/** Same as detach(). */
int pmo_detach(void *addr);

/** Same as detach(). */
int secure_write_detach(void *addr);

/** Same as detach(); `unused` is ignored, as by the reference. */
int dynamic_detach(void *addr, char unused);

/** Make every change to the attachment containing `addr` since its last psync durable,
 * atomically: after a crash the PMO is either as of this psync or as before it, never a mix.
 * Costs in proportion to the pages written, not the PMO size.
 * @return 0, or -1 with errno EINVAL (addr not inside an attachment), EACCES (read-only
 *         attachment), EIO (the medium failed: the pool is then unusable until reopened). */
int psync(void *addr);

/** psync() without updating integrity checksums where the PMO's scheme allows it: a PMO whose
 * per-page checksums are kept at psync ("bp-ip", "sp-ip") commits these pages the way its
 * integrity-at-detach twin does ("bp-id", "sp-id"): their checksums are written at detach
 * (or rebuilt by the crash handler), as in the LOaPP paper; until then those pages carry that
 * design's window (docs/security.md). Under schemes whose integrity cannot be deferred
 * ("secure": the tag is the encryption's own; "wedi": the whole-PMO checksum verified at
 * attach; "bp-ip:medium": plaintext commits carry their checksum), those with nothing to
 * skip, and for a heap's address, it is psync().
 * @return as psync(). */
int psync_nochecksum(void *addr);

/** Create PMO `name` of `size` bytes (rounded up to 4 KiB pages, zero-filled) protected by
 * `key` (NULL: "DEFAULT"). The key itself is never stored: only a salted Argon2id verifier.
 * @return `key` (the pointer passed in; a static "DEFAULT" when key is NULL), or NULL with
 *         errno: EEXIST (name taken), ENOSPC (pool or namespace full), EINVAL (NULL name,
 *         size 0, name empty, containing '/', longer than 255 bytes or not UTF-8), EIO. */
char *pmo_create(const char *name, uint64_t size, const char *key);

/** Destroy PMO `name`, freeing its space. `key` NULL: "DEFAULT".
 * @return 0, or -1 with errno: ENOENT, EACCES (wrong key), EBUSY (attached by anyone, this
 *         process included), EINVAL, EIO. */
int pmo_destroy(const char *name, const char *key);

/** Rename PMO `name` to `new_name` (crash-consistent; docs/lifecycle.md). `key` NULL: "DEFAULT".
 * @return 0, or -1 with errno: ENOENT, EEXIST, EACCES (wrong key), EBUSY (attached), EINVAL, EIO. */
int pmo_rename(const char *name, const char *new_name, const char *key);

/** Change PMO `name`'s key from `key` to `new_key` without re-encrypting a page (the data key
 * is re-wrapped). @return 0, or -1 with errno as pmo_rename. */
int pmo_rekey(const char *name, const char *key, const char *new_key);

/** Re-encrypt every page of PMO `name` under a new random data key, page by page (the key
 * stays `key`); a crash leaves a PMO that reads exactly, and the next attach or pmo_rotate
 * finishes it (docs/lifecycle.md). @return 0, or -1 with errno: ENOENT, EACCES (wrong key),
 * EBUSY (attached), EINVAL (not encrypted), EIO. */
int pmo_rotate(const char *name, const char *key);

/** Copy PMO `name` to a new PMO `new_name` (its own uuid, salt and nonces): its last psynced
 * state, also while a writer (this process or another) keeps it attached and psyncs. The copy's
 * key is `new_key` (NULL: the same key). A crash leaves no `new_name` or the whole copy.
 * @return 0, or -1 with errno: ENOENT, EEXIST, EACCES (wrong key), ENOSPC, EINVAL, EIO. */
int pmo_copy(const char *name, const char *new_name, const char *key, const char *new_key);

/** Snapshot PMO `name` into a new PMO `new_name` under the same key while its writer keeps
 * working (docs/lifecycle.md): the copy is exactly `name` as of one psync. Same as pmo_copy
 * with a NULL new key. @return 0, or -1 with errno as pmo_copy. */
int pmo_snapshot(const char *name, const char *new_name, const char *key);
/** Grow or shrink PMO `name` to `size` bytes (rounded up to 4 KiB pages; new pages read as
 * zeros), crash-consistently (docs/lifecycle.md): within the PMO's layout capacity
 * (pmo_create_max) only its metadata changes; beyond it the PMO is moved to a new extent in
 * one step. A shrink that would drop a page holding data fails unless `force` is non-zero.
 * The PMO keeps its stable address when the grown range is free (always up to 4 times its
 * size at creation, and up to its capacity). A grow within the capacity of a PMO this process
 * has attached read-write grows that attachment in place: the same pointer, its changes not
 * yet psynced kept, the new bytes zero. `key` NULL: "DEFAULT". @return 0, or -1 with errno:
 * ENOENT, EACCES (wrong key), EBUSY (attached, by another process, or by this one for
 * anything but such a grow), ENOSPC (no free extent of the new size beside the old one),
 * EINVAL (size 0, or a shrink over data without `force`), EIO. */
int pmo_resize(const char *name, uint64_t size, int force, const char *key);

/** Export PMO `name`'s last psynced state to `path` (must not exist): an encrypted,
 * authenticated, self-contained file (docs/format.md section 7), also while a writer keeps it
 * attached (a live snapshot). @return 0, or -1 with errno. */
int pmo_export(const char *name, const char *key, const char *path);

/** Import an export file as PMO `name` (NULL: the name it was exported under), verified whole
 * before anything is created. @return 0, or -1 with errno (EACCES wrong key; an altered or
 * truncated file is an integrity error: pmo_last_error_message() says which). */
int pmo_import(const char *path, const char *name, const char *key);

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

/** Turn on libpmo's debug trace: each call of this section prints one line on stderr
 * ("pmo: attach(\"name\", 'w') = 0x7f..." or the error). Also on when the environment variable
 * PMO_DEBUG is set to 1 at the first call.
 * @return 0. */
size_t pmo_enable_debug(void);

/** Turn the debug trace off.
 * @return 0. */
size_t pmo_disable_debug(void);

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

/** Readers beside a writer (docs/readers.md): move the read-only attachment containing
 * `addr` to the newest psync of its PMO. Pages changed since its snapshot are dropped and
 * fill again from the new one; the others stay decrypted. No other thread may read the
 * attachment meanwhile.
 * @return the psync sequence number the attachment now shows (>= 0), or -1 with errno EINVAL
 *         (a read-write attachment, or addr not inside an attachment), EIO. */
long pmo_refresh(void *addr);

/** The psync sequence number the attachment containing `addr` shows: a read-only attachment's
 * snapshot, a read-write one's newest psync.
 * @return >= 0, or -1 with errno EINVAL (addr not inside an attachment). */
long pmo_snapshot_seq(void *addr);

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
 * plaintext copy of an attached PMO on the medium instead of DRAM; an ":aegis" suffix seals
 * "secure"'s pages with AEGIS-256X4 instead of AES-256-GCM ("secure:aegis", format version 9).
 * NULL: the pool's default (or PMO_SCHEME).
 * @return 0, or PMO_E_EXISTS, PMO_E_NO_SPACE, PMO_E_INVALID (bad name, size 0, unknown
 *         scheme), PMO_E_UNSUPPORTED (a scheme this build does not implement yet, or a pool
 *         too old for protection), PMO_E_IO. */
int pmo_create_ex(const char *name, uint64_t size, const char *key, const char *scheme);

/** pmo_create_ex laid out for `max_size` bytes (the PMO's layout capacity, 0: `size`): a later
 * pmo_resize up to `max_size`, and any shrink, changes only metadata (no page is copied).
 * @return as pmo_create_ex; PMO_E_INVALID when `max_size` is below `size`,
 *         PMO_E_UNSUPPORTED for "wedi" (its whole-PMO checksum covers the size). */
int pmo_create_max(const char *name, uint64_t size, uint64_t max_size, const char *key,
                   const char *scheme);

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

#ifdef __cplusplus
}
#endif

#endif /* PMO_H */

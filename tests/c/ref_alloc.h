/*
 * ref_alloc.h - a small free-list allocator in a PMO, shaped as a program written for the
 * research kernel's PMO header shapes its own: it includes <pmo.h> and defines, with that
 * program's types, every name such a program defines (the p_malloc family, its pool calls and
 * globals, its timing helpers, and the helpers of the reference header itself). Written here
 * for the compatibility suite (tests/c/ref_compat.c); libpmo must not collide with any of
 * these names, in C or C++, linked statically or dynamically.
 */
#ifndef REF_ALLOC_H
#define REF_ALLOC_H

#ifdef __cplusplus
extern "C" {
#endif

#include <stddef.h>
#include <sys/time.h>

#include <pmo.h>

/* One block: a header before the user's bytes. */
typedef struct Block {
    int is_free;
    size_t size;
    struct Block *next; /* next free block (raw pointer: the PMO has a stable address) */
} Block;

/* The allocator's state, at the start of its PMO. */
typedef struct Pool {
    int *nthreads;
    int pool_id;
    Block *free_blocks;
    void *start; /* first byte handed out */
    size_t size; /* bytes managed after the Pool header */
    void *root;  /* where the program finds its data after a restart */
    size_t used; /* bump offset into [start, start + size) */
} Pool;

extern size_t POOL_SIZE;
extern Pool *pcache;
#define PMO_KEY "KEY"

void p_init();
void p_destroy();
void p_persist();
void *p_malloc(size_t size);
void *p_calloc(size_t nmemb, size_t size);
void *p_realloc(void *ptr, size_t size);
void p_free(void *ptr);
Pool *p_pool_create(void *addr, size_t size, int zeroed);
int p_pool_delete(Pool *pool);
void *p_pool_malloc(Pool *pool, size_t size);
void p_pool_free(Pool *pool, void *ptr);
void p_defrag();
unsigned long p_sizeof(void *ptr);
char *make_pmo_name(void);
void pmalloc_init();
void dump_times(struct timeval diff1);
void dump_thread_times(int tid);
void *alloc_memory(size_t size, char *name);
void dealloc_memory(void *ptr, size_t size);

/* Names the reference header defines for itself (as static helpers) and that a program of
 * that kernel may define too: pmo.h must not declare them, libpmo must not export them. */
uint64_t djb2_hash(unsigned char *str);
const char *do_create(const char *object, uint64_t size, const char *key);
unsigned long int get_size(char *object, char *key);

extern unsigned long long int attach_time, detach_time, psync_time, total_cycle_times,
    times_invoked;

#ifdef __cplusplus
}
#endif

#endif /* REF_ALLOC_H */

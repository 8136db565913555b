/*
 * ref_alloc.c - the allocator of ref_alloc.h: first fit over a free list, then a bump pointer,
 * in one PMO attached read-write; p_persist psyncs it. Compiled as C (c99, c11) and as C++
 * (c++11, c++17) by the compatibility suite. Relies on pmo.h for <stdio.h>, <stdlib.h>,
 * <stdint.h> and <unistd.h>, as programs of the reference header do.
 */
#include <string.h>

#include "ref_alloc.h"

size_t POOL_SIZE = 1 << 20;
Pool *pcache = NULL;
unsigned long long int attach_time = 0, detach_time = 0, psync_time = 0, total_cycle_times = 0,
                       times_invoked = 0;

#define ALIGN16(n) (((n) + 15) & ~(size_t)15)

uint64_t djb2_hash(unsigned char *str) {
    uint64_t hash = 5381;
    int c;
    while ((c = *str++) != 0)
        hash = hash * 33 + (uint64_t)c;
    return hash;
}

const char *do_create(const char *object, uint64_t size, const char *key) {
    return pmo_create(object, size, key);
}

unsigned long int get_size(char *object, char *key) {
    (void)key;
    return (unsigned long int)pmo_get_size(object);
}

char *make_pmo_name(void) {
    static char name[32];
    snprintf(name, sizeof name, "ref.pool");
    return name;
}

void *alloc_memory(size_t size, char *name) {
    if (!pmo_exists(name))
        pmo_create(name, size, "DEFAULT\0");
    return attach(name, 'w', "DEFAULT\0");
}

void dealloc_memory(void *ptr, size_t size) {
    (void)size;
    detach(ptr);
}

Pool *p_pool_create(void *addr, size_t size, int zeroed) {
    Pool *pool = (Pool *)addr;
    if (!zeroed)
        memset(pool, 0, sizeof *pool);
    pool->nthreads = NULL;
    pool->pool_id = 1;
    pool->free_blocks = NULL;
    pool->start = (char *)addr + ALIGN16(sizeof(Pool));
    pool->size = size - ALIGN16(sizeof(Pool));
    pool->root = NULL;
    pool->used = 0;
    return pool;
}

int p_pool_delete(Pool *pool) {
    pool->free_blocks = NULL;
    pool->used = 0;
    return 0;
}

void *p_pool_malloc(Pool *pool, size_t size) {
    size = ALIGN16(size);
    Block **link = &pool->free_blocks;
    for (Block *b = pool->free_blocks; b != NULL; link = &b->next, b = b->next) {
        if (b->size >= size) {
            *link = b->next;
            b->is_free = 0;
            b->next = NULL;
            return b + 1;
        }
    }
    size_t need = ALIGN16(sizeof(Block)) + size;
    if (pool->used + need > pool->size)
        return NULL;
    Block *b = (Block *)((char *)pool->start + pool->used);
    pool->used += need;
    b->is_free = 0;
    b->size = size;
    b->next = NULL;
    return b + 1;
}

void p_pool_free(Pool *pool, void *ptr) {
    if (ptr == NULL)
        return;
    Block *b = (Block *)ptr - 1;
    b->is_free = 1;
    b->next = pool->free_blocks;
    pool->free_blocks = b;
}

void pmalloc_init() { p_init(); }

void p_init() {
    char *name = make_pmo_name();
    int fresh = !pmo_exists(name);
    pcache = (Pool *)alloc_memory(sizeof(Pool) + POOL_SIZE, name);
    if (pcache == NULL) {
        perror("p_init: attach");
        exit(1);
    }
    if (fresh) {
        p_pool_create(pcache, sizeof(Pool) + POOL_SIZE, 1);
        psync(pcache);
    }
}

void p_destroy() {
    if (pcache != NULL)
        dealloc_memory(pcache, sizeof(Pool) + POOL_SIZE);
    pcache = NULL;
}

void p_persist() {
    psync(pcache);
    times_invoked++;
}

void *p_malloc(size_t size) { return p_pool_malloc(pcache, size); }

void *p_calloc(size_t nmemb, size_t size) {
    if (size != 0 && nmemb > (size_t)-1 / size)
        return NULL;
    void *p = p_malloc(nmemb * size);
    if (p != NULL)
        memset(p, 0, nmemb * size);
    return p;
}

void *p_realloc(void *ptr, size_t size) {
    if (ptr == NULL)
        return p_malloc(size);
    if (p_sizeof(ptr) >= size)
        return ptr;
    void *q = p_malloc(size);
    if (q != NULL) {
        memcpy(q, ptr, p_sizeof(ptr));
        p_free(ptr);
    }
    return q;
}

void p_free(void *ptr) { p_pool_free(pcache, ptr); }

void p_defrag() {}

unsigned long p_sizeof(void *ptr) { return (unsigned long)((Block *)ptr - 1)->size; }

void dump_times(struct timeval diff1) {
    printf("times: %ld.%06ld s, attach %llu, detach %llu, psync %llu\n", (long)diff1.tv_sec,
           (long)diff1.tv_usec, attach_time, detach_time, psync_time);
}

void dump_thread_times(int tid) { printf("thread %d: psyncs %llu\n", tid, times_invoked); }

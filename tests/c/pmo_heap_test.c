/*
 * pmo_heap_test.c - the persistent heap of include/pmo_heap.h from C: pmo_p_malloc and friends on the
 * default heap (no set-up), pmo_heap_* on a named heap.
 *
 * Usage: pmo_heap_test create | verify | wrongkey | threads | churn | crashcheck ACKED
 *   create    a fresh pool: every call and errno; leaves a linked list of NODES pmo_p_malloc'd
 *             nodes, each with a pmo_p_malloc'd string, reachable from the default heap's root,
 *             persisted with pmo_p_persist.
 *   verify    a new process: walks the list from pmo_p_get_root(), checks the heap, frees it all.
 *   wrongkey  run with another PMO_KEY: the default heap does not open (EACCES).
 *   threads   two threads allocate and free while the main thread p_persists; checker.
 *   churn     forever: push a node (or pop and free one), bump a sequence number, pmo_p_persist,
 *             then print the sequence number (the parent SIGKILLs it at a random moment).
 *   crashcheck ACKED  after the kill: the heap passes the checker, the list is whole, every
 *             live block is reachable, and the durable sequence is ACKED or ACKED + 1.
 * Expects PMO_HEAP=capi.heap, PMO_HEAP_SIZE=16M, PMO_KEY="heap key" (set by
 * crates/pmo-capi/tests/c_programs.rs). Prints "pmo_heap_test <phase>: ok" and exits 0.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pmo_heap.h"

#include "check.h"

#define HEAP_NAME "capi.heap"
#define NODES 1000
#define KEY "named key"

struct node {
    struct node *next;
    uint64_t index;
    char *text; /* its own block, of a size that depends on the index */
};

struct root {
    uint64_t magic;
    struct node *head;
    uint64_t count;
    void *ghost; /* set but never persisted: must read back NULL after re-open */
};

#define ROOT_MAGIC 0x686561706c697374ull /* "heaplist" */

static size_t text_len(uint64_t i) { return 8 + (i * 37) % 3000; } /* slabs and extents */

static void fill_text(char *t, uint64_t i) {
    size_t n = text_len(i);
    for (size_t k = 0; k + 1 < n; k++)
        t[k] = (char)('a' + (i + k) % 26);
    t[n - 1] = '\0';
}

static int text_ok(const char *t, uint64_t i) {
    size_t n = text_len(i);
    for (size_t k = 0; k + 1 < n; k++)
        if (t[k] != (char)('a' + (i + k) % 26))
            return 0;
    return t[n - 1] == '\0';
}

struct tally {
    int64_t blocks;
    uint64_t bytes;
    int free_them;
};

static int count_block(void *block, size_t usable, void *ctx) {
    struct tally *t = ctx;
    t->blocks++;
    t->bytes += usable;
    if (t->free_them && pmo_p_free(block) != 0)
        return 1; /* stop: reported by the caller's count check */
    return 0;
}

static int64_t live_blocks(pmo_heap *h) {
    struct tally t = {0, 0, 0};
    int64_t n = pmo_heap_foreach(h, count_block, &t);
    return n == t.blocks ? n : -1;
}

/* ---- the default heap -------------------------------------------------------------------- */

static void test_p_calls(void) {
    CHECK(pmo_exists(HEAP_NAME) == 0);
    errno = 0;
    CHECK(pmo_p_get_root() == NULL && pmo_last_error() == 0); /* opens and creates the heap */
    CHECK(pmo_exists(HEAP_NAME) == 1);
    CHECK(pmo_get_size(HEAP_NAME) == 16u << 20);
    pmo_heap *dh = pmo_heap_default();
    CHECK(dh != NULL);

    /* Alignment, usable size, zeroing. */
    char *a = pmo_p_malloc(100);
    CHECK(a != NULL && ((uintptr_t)a % 16) == 0 && pmo_p_sizeof(a) >= 100);
    char *name = pmo_get_name(a);
    CHECK(name != NULL && strcmp(name, HEAP_NAME) == 0);
    free(name);
    uint64_t *z = pmo_p_calloc(64, sizeof *z);
    CHECK(z != NULL);
    int zero = 1;
    for (int i = 0; z != NULL && i < 64; i++)
        zero &= z[i] == 0;
    CHECK(zero);

    /* Frees: NULL, double, interior, invalid, a plain attachment's memory. */
    CHECK(pmo_p_free(NULL) == 0);
    CHECK(pmo_p_free(z) == 0);
    CHECK_FAIL(pmo_p_free(z) == 0, EINVAL, PMO_E_BAD_FREE);
    CHECK_FAIL(pmo_p_free(a + 8) == 0, EINVAL, PMO_E_BAD_FREE);
    CHECK(pmo_p_sizeof(a) >= 100); /* the interior free changed nothing */
    int on_stack = 0;
    CHECK_FAIL(pmo_p_free(&on_stack) == 0, EINVAL, PMO_E_BAD_FREE);
    CHECK_FAIL(pmo_p_sizeof(&on_stack) != 0, EINVAL, PMO_E_BAD_FREE);
    CHECK_FAIL(pmo_p_sizeof(z) != 0, EINVAL, PMO_E_BAD_FREE);
    CHECK(pmo_create("plain", 1 << 20, KEY) != NULL);
    char *plain = attach("plain", 'w', KEY);
    CHECK(plain != NULL);
    CHECK_FAIL(pmo_p_free(plain) == 0, EINVAL, PMO_E_BAD_FREE);
    CHECK_FAIL(pmo_p_realloc(plain, 10) != NULL, EINVAL, PMO_E_BAD_FREE);
    CHECK(pmo_heap_close((pmo_heap *)plain) == PMO_E_INVALID); /* not a heap handle */
    CHECK(detach(plain) == 0);
    {
        /* A PMO without a heap is not opened as one. */
        pmo_heap *nh = NULL;
        CHECK(pmo_heap_open("plain", KEY, 0, &nh) == PMO_E_NOT_A_HEAP && errno == EINVAL);
        CHECK(nh == NULL);
    }
    CHECK(pmo_destroy("plain", KEY) == 0);

    /* realloc: grows keeping contents; NULL allocates; size 0 frees. */
    memcpy(a, "keep me", 8);
    char *b = pmo_p_realloc(a, 5000);
    CHECK(b != NULL && strcmp(b, "keep me") == 0 && pmo_p_sizeof(b) >= 5000);
    if (b != a)
        CHECK_FAIL(pmo_p_free(a) == 0, EINVAL, PMO_E_BAD_FREE); /* moved: the old block is gone */
    char *c = pmo_p_realloc(NULL, 10);
    CHECK(c != NULL);
    errno = 0;
    CHECK(pmo_p_realloc(c, 0) == NULL && pmo_last_error() == 0);
    CHECK_FAIL(pmo_p_free(c) == 0, EINVAL, PMO_E_BAD_FREE);
    CHECK(pmo_p_free(b) == 0);

    /* Out of memory: the 16 MiB heap has no 1 GiB block; calloc's product overflows. */
    CHECK_FAIL(pmo_p_malloc((size_t)1 << 30) != NULL, ENOMEM, PMO_E_HEAP_FULL);
    CHECK_FAIL(pmo_p_calloc(SIZE_MAX, 2) != NULL, ENOMEM, PMO_E_HEAP_FULL);
    CHECK_FAIL(pmo_heap_alloc(dh, 64, 3) != NULL, EINVAL, PMO_E_INVALID);
    void *big = pmo_heap_alloc(dh, 64, 4096);
    CHECK(big != NULL && ((uintptr_t)big % 4096) == 0);
    CHECK(pmo_heap_free(dh, big) == 0);
    CHECK(pmo_heap_check(dh) == 0);
}

/* ---- the list: build, persist, discard what was not persisted ----------------------------- */

static void build_list(void) {
    struct root *r = pmo_p_calloc(1, sizeof *r);
    CHECK(r != NULL);
    if (r == NULL)
        return;
    r->magic = ROOT_MAGIC;
    for (uint64_t i = 0; i < NODES; i++) {
        struct node *n = pmo_p_malloc(sizeof *n);
        char *t = pmo_p_malloc(text_len(i));
        CHECK(n != NULL && t != NULL);
        if (n == NULL || t == NULL)
            return;
        fill_text(t, i);
        n->index = i;
        n->text = t;
        n->next = r->head;
        r->head = n;
        r->count++;
    }
    CHECK(pmo_p_set_root(r) == 0);
    CHECK(pmo_p_get_root() == r);
    int on_stack = 0;
    CHECK_FAIL(pmo_p_set_root(&on_stack) == 0, EINVAL, PMO_E_BAD_FREE);
    CHECK(pmo_p_persist() == 0);

    pmo_heap *dh = pmo_heap_default();
    CHECK(live_blocks(dh) == 1 + 2 * NODES);
    /* Not persisted: a new block linked from the root. psync(any address) also works on a
     * heap, so persist nothing more; close (detach) and re-open. */
    r->ghost = pmo_p_malloc(64);
    CHECK(r->ghost != NULL && live_blocks(dh) == 2 + 2 * NODES);
    CHECK(pmo_heap_close(dh) == 0);
    CHECK(pmo_heap_close(dh) == PMO_E_NOT_ATTACHED);
    CHECK_FAIL(pmo_heap_alloc(dh, 8, 0) != NULL, EINVAL, PMO_E_NOT_ATTACHED);
    r = pmo_p_get_root(); /* re-opens the default heap, at the same address */
    CHECK(r != NULL && r->magic == ROOT_MAGIC && r->ghost == NULL && r->count == NODES);
    dh = pmo_heap_default();
    CHECK(live_blocks(dh) == 1 + 2 * NODES);
    CHECK(pmo_heap_check(dh) == 0);
    /* psync through the plain call, by any address inside the heap's PMO. */
    CHECK(psync(r) == 0);
}

/* ---- a named heap ------------------------------------------------------------------------- */

static void test_named_heap(void) {
    pmo_heap *h = NULL;
    CHECK(pmo_heap_open("named", KEY, 0, &h) == PMO_E_NOT_FOUND && errno == ENOENT);
    CHECK(pmo_heap_open("named", KEY, 0, NULL) == PMO_E_INVALID);
    CHECK(pmo_heap_open("bad/name", KEY, 1 << 20, &h) == PMO_E_INVALID);
    CHECK(pmo_heap_open("named", KEY, 8u << 20, &h) == 0 && h != NULL);
    if (h == NULL)
        return;
    pmo_heap *again = NULL;
    CHECK(pmo_heap_open("named", KEY, 0, &again) == PMO_E_BUSY && errno == EBUSY);
    CHECK(pmo_heap_open("named", "wrong", 0, &again) == PMO_E_WRONG_KEY && errno == EACCES);
    CHECK(pmo_heap_root(h) == NULL && pmo_last_error() == 0);
    char *x = pmo_heap_alloc(h, 200, 64);
    CHECK(x != NULL && ((uintptr_t)x % 64) == 0 && pmo_heap_usable_size(h, x) >= 200);
    strcpy(x, "named root");
    CHECK(pmo_heap_set_root(h, x) == 0);
    /* Blocks belong to their heap: the default heap's block is not this heap's. */
    char *d = pmo_p_malloc(32);
    CHECK(d != NULL);
    CHECK(pmo_heap_free(h, d) == PMO_E_BAD_FREE && errno == EINVAL);
    CHECK(pmo_heap_set_root(h, d) == PMO_E_BAD_FREE);
    CHECK(pmo_p_free(d) == 0);
    /* p_* calls take blocks of any open heap. */
    char *y = pmo_heap_alloc(h, 50, 0);
    CHECK(y != NULL && pmo_p_sizeof(y) >= 50);
    char *y2 = pmo_p_realloc(y, 3000);
    CHECK(y2 != NULL && pmo_heap_usable_size(h, y2) >= 3000);
    CHECK(pmo_p_free(y2) == 0);
    char *z = pmo_heap_realloc(h, NULL, 10);
    CHECK(z != NULL && pmo_heap_realloc(h, z, 0) == NULL && pmo_last_error() == 0);
    CHECK(pmo_heap_free(h, NULL) == 0);
    pmo_psync_stats st;
    memset(&st, 0, sizeof st);
    CHECK(pmo_heap_psync(h, &st) > 0 && st.pages > 0 && st.seq > 0);
    CHECK(pmo_heap_foreach(h, NULL, NULL) == PMO_E_INVALID);
    CHECK(live_blocks(h) == 1);
    CHECK(pmo_heap_close(h) == 0);

    CHECK(pmo_heap_open("named", KEY, 0, &h) == 0);
    char *r = pmo_heap_root(h);
    CHECK(r == x && r != NULL && strcmp(r, "named root") == 0);
    /* foreach may free what it visits. */
    struct tally t = {0, 0, 1};
    CHECK(pmo_heap_set_root(h, NULL) == 0);
    CHECK(pmo_heap_foreach(h, count_block, &t) == 1 && t.blocks == 1);
    CHECK(live_blocks(h) == 0 && pmo_heap_check(h) == 0);
    CHECK(pmo_heap_psync(h, NULL) >= 0);
    /* detach() by an address inside the heap closes it too. */
    CHECK(detach(h) == 0);
    CHECK(pmo_heap_check(h) == PMO_E_NOT_ATTACHED);
    CHECK(pmo_destroy("named", KEY) == 0);
}

/* ---- restart ------------------------------------------------------------------------------ */

static void verify_list(void) {
    struct root *r = pmo_p_get_root();
    CHECK(r != NULL && r->magic == ROOT_MAGIC && r->count == NODES && r->ghost == NULL);
    if (r == NULL || r->magic != ROOT_MAGIC)
        return;
    uint64_t seen = 0;
    int ok = 1;
    for (struct node *n = r->head; n != NULL && seen <= NODES; n = n->next, seen++) {
        uint64_t want = NODES - 1 - seen;
        if (n->index != want || !text_ok(n->text, want) || pmo_p_sizeof(n->text) < text_len(want)) {
            fprintf(stderr, "verify: node %llu is wrong\n", (unsigned long long)want);
            ok = 0;
            break;
        }
    }
    CHECK(ok && seen == NODES);
    pmo_heap *dh = pmo_heap_default();
    CHECK(pmo_heap_check(dh) == 0);
    CHECK(live_blocks(dh) == 1 + 2 * NODES);
    /* Free it all, durably. */
    while (r->head != NULL) {
        struct node *n = r->head;
        r->head = n->next;
        CHECK(pmo_p_free(n->text) == 0);
        CHECK(pmo_p_free(n) == 0);
    }
    CHECK(pmo_p_set_root(NULL) == 0);
    CHECK(pmo_p_free(r) == 0);
    CHECK(pmo_p_persist() == 0);
    CHECK(live_blocks(dh) == 0 && pmo_heap_check(dh) == 0);
    printf("verified %d nodes from the root\n", NODES);
}

/* ---- threads ------------------------------------------------------------------------------ */

#include <pthread.h>

struct churner {
    unsigned seed;
    int failed;
};

static void *churn_thread(void *arg) {
    struct churner *c = arg;
    void *kept[64] = {0};
    for (int i = 0; i < 20000; i++) {
        int slot = (int)(rand_r(&c->seed) % 64);
        if (kept[slot] != NULL) {
            if (pmo_p_free(kept[slot]) != 0)
                c->failed = 1;
            kept[slot] = NULL;
        } else {
            size_t size = 1 + rand_r(&c->seed) % ((rand_r(&c->seed) % 8 == 0) ? 70000 : 500);
            kept[slot] = pmo_p_malloc(size);
            if (kept[slot] == NULL)
                c->failed = 1;
            else
                memset(kept[slot], slot, size);
        }
    }
    for (int i = 0; i < 64; i++)
        if (kept[i] != NULL && pmo_p_free(kept[i]) != 0)
            c->failed = 1;
    return NULL;
}

static void test_threads(void) {
    pmo_heap *dh = pmo_heap_default();
    CHECK(dh != NULL);
    int64_t before = live_blocks(dh);
    pthread_t t[2];
    struct churner c[2] = {{1, 0}, {2, 0}};
    for (int i = 0; i < 2; i++)
        CHECK(pthread_create(&t[i], NULL, churn_thread, &c[i]) == 0);
    for (int i = 0; i < 20; i++)
        CHECK(pmo_p_persist() == 0); /* allocator calls pause while it runs */
    for (int i = 0; i < 2; i++) {
        CHECK(pthread_join(t[i], NULL) == 0);
        CHECK(!c[i].failed);
    }
    CHECK(live_blocks(dh) == before);
    CHECK(pmo_heap_check(dh) == 0);
    CHECK(pmo_p_persist() == 0);
}

/* ---- crashes ------------------------------------------------------------------------------ */

struct croot {
    uint64_t magic;
    uint64_t seq; /* pmo_p_persist calls made, counting the one this state belongs to */
    uint64_t count;
    struct node *head;
};

#define CROOT_MAGIC 0x636875726e726f6full /* "churnroo" */

static void churn(void) {
    struct croot *r = pmo_p_get_root();
    if (r == NULL) {
        r = pmo_p_calloc(1, sizeof *r);
        CHECK(r != NULL && pmo_p_set_root(r) == 0);
        if (r == NULL)
            return;
        r->magic = CROOT_MAGIC;
        CHECK(pmo_p_persist() == 0);
    }
    unsigned seed = (unsigned)r->seq + 1;
    for (;;) {
        if (r->head != NULL && rand_r(&seed) % 4 == 0) {
            struct node *n = r->head;
            r->head = n->next;
            r->count--;
            if (pmo_p_free(n->text) != 0 || pmo_p_free(n) != 0)
                return;
        } else {
            struct node *n = pmo_p_malloc(sizeof *n);
            uint64_t i = r->count;
            char *t = pmo_p_malloc(text_len(i));
            if (n == NULL || t == NULL)
                return; /* full: the parent sees the exit */
            fill_text(t, i);
            n->index = i;
            n->text = t;
            n->next = r->head;
            r->head = n;
            r->count++;
        }
        r->seq++;
        if (pmo_p_persist() != 0)
            return;
        printf("%llu\n", (unsigned long long)r->seq);
        fflush(stdout);
    }
}

static void crashcheck(uint64_t acked) {
    struct croot *r = pmo_p_get_root();
    CHECK(r != NULL && r->magic == CROOT_MAGIC);
    if (r == NULL || r->magic != CROOT_MAGIC)
        return;
    CHECK(r->seq == acked || r->seq == acked + 1);
    uint64_t seen = 0;
    int ok = 1;
    for (struct node *n = r->head; n != NULL && seen <= r->count; n = n->next, seen++) {
        uint64_t want = r->count - 1 - seen;
        if (n->index != want || !text_ok(n->text, want)) {
            ok = 0;
            break;
        }
    }
    CHECK(ok && seen == r->count);
    pmo_heap *dh = pmo_heap_default();
    CHECK(pmo_heap_check(dh) == 0);
    /* No leak: every live block is the root or reachable from it. */
    CHECK(live_blocks(dh) == (int64_t)(1 + 2 * r->count));
    printf("durable seq %llu (acked %llu), %llu nodes\n", (unsigned long long)r->seq,
           (unsigned long long)acked, (unsigned long long)r->count);
}

int main(int argc, char **argv) {
    const char *phase = argc >= 2 ? argv[1] : "";
    if (strcmp(phase, "create") == 0) {
        test_p_calls();
        build_list();
        test_named_heap();
    } else if (strcmp(phase, "verify") == 0) {
        verify_list();
    } else if (strcmp(phase, "threads") == 0) {
        test_threads();
    } else if (strcmp(phase, "churn") == 0) {
        churn();
        return 1; /* only a failure ends the loop */
    } else if (strcmp(phase, "crashcheck") == 0 && argc == 3) {
        crashcheck(strtoull(argv[2], NULL, 10));
    } else if (strcmp(phase, "wrongkey") == 0) {
        CHECK_FAIL(pmo_p_malloc(8) != NULL, EACCES, PMO_E_WRONG_KEY);
        CHECK_FAIL(pmo_p_persist() == 0, EACCES, PMO_E_WRONG_KEY);
        CHECK(pmo_heap_default() == NULL && errno == EACCES);
    } else {
        fprintf(stderr, "usage: %s create|verify|wrongkey|threads|churn|crashcheck ACKED\n",
                argv[0]);
        return 2;
    }
    if (failures) {
        fprintf(stderr, "pmo_heap_test %s: %d check(s) failed\n", phase, failures);
        return 1;
    }
    printf("pmo_heap_test %s: ok\n", phase);
    return 0;
}

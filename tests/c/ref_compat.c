/*
 * ref_compat.c - the compatibility suite: a program written for the research kernel's PMO user
 * header, from that header's declarations and its manual pages (attach(2), detach(2), psync(2),
 * pmo_create(2), pmo(3)), built unchanged against include/pmo.h. It includes only <pmo.h>,
 * <string.h>, <errno.h> and its own allocator (ref_alloc.h, which defines the whole p_malloc
 * family with the reference program's types), and relies on pmo.h for exit, atoi, printf,
 * getpid and uint64_t. It calls no pmo-only function.
 *
 * Compiled by gcc and g++ as C99, C11, C++11 and C++17 with -Wall -Wextra -Werror, linked
 * against libpmo.a and libpmo.so (crates/pmo-capi/tests/c_programs.rs).
 *
 * Usage: ref_compat create | verify
 *   create  on a fresh pool: every call of the reference header and every return its manual
 *           pages document, where pmo keeps it (docs/c-api.md lists where pmo differs and why);
 *           then a list built with the program's own allocator, p_persist'ed.
 *   verify  in a new process: the list is there, whole, at the same addresses; cleans up.
 * Prints "ref_compat <phase>: ok" and exits 0 when every check passed, else exits 1.
 */
#include <errno.h>
#include <string.h>

#include "ref_alloc.h"

static int failures = 0;

#define CHECK(cond)                                                                            \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "%s:%d: check failed: %s (errno %d)\n", __FILE__, __LINE__, #cond, \
                    errno);                                                                    \
            failures++;                                                                        \
        }                                                                                      \
    } while (0)

/* A documented failure: the call's result is its failure value and errno is `e`. */
#define CHECK_ERRNO(failed, e)                                                                 \
    do {                                                                                       \
        errno = 0;                                                                             \
        int failed_ = (failed);                                                                \
        int errno_ = errno;                                                                    \
        if (!failed_ || errno_ != (e)) {                                                       \
            fprintf(stderr, "%s:%d: expected %s with errno %d, got errno %d\n", __FILE__,      \
                    __LINE__, #failed, (e), errno_);                                           \
            failures++;                                                                        \
        }                                                                                      \
    } while (0)

#define NAME "ref.obj"
#define SIZE 5000 /* rounded up to two pages */

struct node {
    long value;
    char *text; /* from p_malloc: a raw pointer into the allocator's PMO */
    struct node *next;
};

/* pmo_create(2): returns the key as `char *`; NULL key means "DEFAULT"; EEXIST; EINVAL for a
 * name longer than the maximum; ENOSPC when the space is not there. pmo_exists, pmo_get_size. */
static void test_create(char *key) {
    char e = pmo_exists(NAME);
    CHECK(e == 0);
    char *k = pmo_create(NAME, SIZE, key);
    CHECK(k == key);
    CHECK(pmo_exists(NAME) == 1);
    size_t size = pmo_get_size(NAME);
    CHECK(size == 8192);
    CHECK_ERRNO(pmo_create(NAME, SIZE, key) == NULL, EEXIST);

    char *dk = pmo_create("ref.nokey", 4096, NULL);
    CHECK(dk != NULL && strcmp(dk, "DEFAULT") == 0);
    void *d = attach("ref.nokey", 'r', "DEFAULT");
    CHECK(d != NULL);
    CHECK(d == NULL || detach(d) == 0);
    CHECK(pmo_destroy("ref.nokey", NULL) == 0);

    char long_name[300];
    memset(long_name, 'n', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    CHECK_ERRNO(pmo_create(long_name, 4096, key) == NULL, EINVAL);
    CHECK_ERRNO(pmo_create("ref.huge", (uint64_t)1 << 40, key) == NULL, ENOSPC);
    CHECK(pmo_exists("ref.huge") == 0);
}

/* attach(2) and its aliases: a pointer to the first byte; the same mapping for a PMO this
 * process has attached; 'r' or 'w'; errors. detach(2): 0, 0 again for a detached PMO, EINVAL
 * for an address no PMO of this process had. psync(2). pmo_get_name. */
static void test_attach(char *key) {
    CHECK_ERRNO(attach("ref.missing", 'r', key) == NULL, ENOENT);
    CHECK_ERRNO(attach(NAME, 'w', "not the key") == NULL, EACCES);
    CHECK_ERRNO(attach(NAME, 'x', key) == NULL, EINVAL);

    char *p = (char *)attach(NAME, 'w', key);
    CHECK(p != NULL);
    if (p == NULL)
        return;
    /* Attached twice (and through every alias): one mapping. */
    CHECK(attach(NAME, 'w', key) == p);
    CHECK(attach(NAME, 'r', key) == p);
    CHECK(pmo_attach(NAME, 'w', key) == p);
    CHECK(secure_attach(NAME, 'w', key) == p);
    CHECK(dynamic_attach(NAME, 'w', key) == p);
    CHECK_ERRNO(attach(NAME, 'w', "not the key") == NULL, EACCES);

    char *name = pmo_get_name(p + 8191);
    CHECK(name != NULL && strcmp(name, NAME) == 0);
    free(name);

    /* subset_attach: the subset starts `offset` bytes in. */
    char *sub = (char *)subset_attach(NAME, 'r', key, 4096, 4096);
    CHECK(sub == p + 4096);
    CHECK_ERRNO(subset_attach(NAME, 'r', key, 4096, 100) == NULL, EINVAL);
    CHECK_ERRNO(subset_attach(NAME, 'r', key, 8192, 4096) == NULL, EINVAL);

    strcpy(p, "first page");
    strcpy(p + 4096, "second page");
    int r = psync(p);
    CHECK(r == 0);
    strcpy(p + 4096, "second page, again");
    CHECK(psync_nochecksum(p + 4096) == 0);
    strcpy(p, "not psynced");

    int dr = detach(p);
    CHECK(dr == 0);
    CHECK_ERRNO(pmo_get_name(p) == NULL, EINVAL);
    CHECK(detach(p) == 0); /* already detached: nothing to do */
    int local = 0;
    CHECK_ERRNO(detach(&local) == -1, EINVAL);

    /* Every detach alias; changes after the last psync are gone. */
    p = (char *)pmo_attach(NAME, 'r', key);
    CHECK(p != NULL && strcmp(p, "first page") == 0 && strcmp(p + 4096, "second page, again") == 0);
    CHECK(p == NULL || pmo_detach(p) == 0);
    p = (char *)secure_attach(NAME, 'w', key);
    CHECK(p != NULL && secure_write_detach(p) == 0);
    p = (char *)dynamic_attach(NAME, 'w', key);
    CHECK(p != NULL && dynamic_detach(p, (char)0xef) == 0);
    CHECK(pmo_get_name(p) == NULL);
}

/* The debug switches return 0; the trace goes to stderr (checked by the driver). */
static void test_debug(void) {
    size_t on = pmo_enable_debug();
    CHECK(on == 0);
    CHECK(attach("ref.traced", 'r', "KEY") == NULL);
    size_t off = pmo_disable_debug();
    CHECK(off == 0);
}

/* The program's own allocator: a list of nodes with p_malloc'd strings, p_persist'ed. */
static void build_list(int n) {
    p_init();
    struct node *head = NULL;
    for (int i = 0; i < n; i++) {
        struct node *nd = (struct node *)p_calloc(1, sizeof *nd);
        CHECK(nd != NULL && nd->value == 0 && p_sizeof(nd) >= sizeof *nd);
        if (nd == NULL)
            break;
        nd->value = i;
        nd->text = (char *)p_malloc(12);
        snprintf(nd->text, 12, "n%d", i);
        nd->text = (char *)p_realloc(nd->text, 48); /* moves: keeps the contents */
        size_t len = strlen(nd->text);
        snprintf(nd->text + len, 48 - len, "-%lu", (unsigned long)djb2_hash((unsigned char *)"x"));
        nd->next = head;
        head = nd;
    }
    void *scratch = p_malloc(100);
    p_free(scratch);
    CHECK(p_malloc(100) == scratch); /* first fit reuses it */
    pcache->root = head;
    p_persist();
    p_defrag();
    p_destroy();
}

static int walk_list(int n) {
    p_init();
    int seen = 0;
    char want[48];
    for (struct node *nd = (struct node *)pcache->root; nd != NULL; nd = nd->next) {
        snprintf(want, sizeof want, "n%ld-%lu", nd->value, (unsigned long)djb2_hash((unsigned char *)"x"));
        CHECK(nd->value == n - 1 - seen && strcmp(nd->text, want) == 0);
        seen++;
    }
    CHECK(seen == n);
    p_destroy();
    return seen;
}

int main(int argc, char *argv[]) {
    char key[16];
    strcpy(key, "ref key");
    if (argc != 3) {
        printf("usage: %s create|verify NODES\n", argv[0]);
        exit(1);
    }
    int n = atoi(argv[2]);
    if (strcmp(argv[1], "create") == 0) {
        test_create(key);
        test_attach(key);
        test_debug();
        build_list(n);
        printf("pid %d: built %d nodes\n", (int)getpid(), n);
    } else if (strcmp(argv[1], "verify") == 0) {
        printf("pid %d: walked %d nodes\n", (int)getpid(), walk_list(n));
        CHECK(get_size(make_pmo_name(), key) == (unsigned long)pmo_get_size(make_pmo_name()));
        CHECK(pmo_destroy(make_pmo_name(), "DEFAULT") == 0);
        CHECK(pmo_destroy(NAME, key) == 0);
        CHECK(pmo_exists(NAME) == 0);
    } else {
        printf("unknown phase %s\n", argv[1]);
        exit(1);
    }
    if (failures != 0) {
        fprintf(stderr, "ref_compat %s: %d check(s) failed\n", argv[1], failures);
        exit(1);
    }
    printf("ref_compat %s: ok\n", argv[1]);
    return 0;
}

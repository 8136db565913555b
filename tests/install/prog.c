/* Built against an installed pmo with `cc prog.c $(pkg-config --cflags --libs pmo)` by
 * tests/install/run: create a PMO, write it, psync, detach, attach again and read it back; then
 * allocate, persist and free a block of the default persistent heap (pmo_heap.h). */
#include <pmo.h>
#include <pmo_heap.h>
#include <stdio.h>
#include <string.h>

int main(void) {
    const char *key = "install-test";
    if (!pmo_create("hello", 4096, key)) {
        fprintf(stderr, "pmo_create: %s\n", pmo_last_error_message());
        return 1;
    }
    char *p = attach("hello", 'w', key);
    if (!p) {
        fprintf(stderr, "attach: %s\n", pmo_last_error_message());
        return 1;
    }
    strcpy(p, "hello from an installed libpmo");
    if (psync(p) != 0 || detach(p) != 0) {
        fprintf(stderr, "psync/detach: %s\n", pmo_last_error_message());
        return 1;
    }
    const char *q = attach("hello", 'r', key);
    if (!q) {
        fprintf(stderr, "attach: %s\n", pmo_last_error_message());
        return 1;
    }
    printf("%s\n", q);
    detach((void *)q);
    if (pmo_destroy("hello", key) != 0) {
        fprintf(stderr, "pmo_destroy: %s\n", pmo_last_error_message());
        return 1;
    }
    char *b = pmo_p_malloc(64);
    if (!b) {
        fprintf(stderr, "pmo_p_malloc: %s\n", pmo_last_error_message());
        return 1;
    }
    strcpy(b, "a block of the default heap");
    if (pmo_p_set_root(b) != 0 || pmo_p_persist() != 0 || pmo_p_get_root() != b
        || strcmp(pmo_p_get_root(), "a block of the default heap") != 0 || pmo_p_free(b) != 0) {
        fprintf(stderr, "pmo_p_*: %s\n", pmo_last_error_message());
        return 1;
    }
    return 0;
}

/* Built against an installed pmo with `cc prog.c $(pkg-config --cflags --libs pmo)` by
 * tests/install/run: create a PMO, write it, psync, detach, attach again and read it back. */
#include <pmo.h>
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
    return pmo_destroy("hello", key) == 0 ? 0 : 1;
}

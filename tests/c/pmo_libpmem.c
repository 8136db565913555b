/*
 * pmo_libpmem.c - include/pmo.h and <libpmem.h> in one translation unit, linked against both
 * libraries: no declaration or symbol clashes (libpmem exports only pmem_* names).
 * Built only where libpmem-dev is installed (crates/pmo-capi/tests/c_programs.rs skips it with
 * a note otherwise). Prints "pmo_libpmem: ok" and exits 0 on success.
 */
#include <libpmem.h>

#include "pmo.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int main(void) {
    const char *v = pmem_check_version(PMEM_MAJOR_VERSION, PMEM_MINOR_VERSION);
    if (v != NULL) {
        fprintf(stderr, "pmo_libpmem: libpmem version mismatch: %s\n", v);
        return 1;
    }
    const char *key = "pmem key";
    if (pmo_create("pmem", 4096, key) != key) {
        fprintf(stderr, "pmo_libpmem: pmo_create: %s\n", pmo_last_error_message());
        return 1;
    }
    char *p = attach("pmem", 'w', key);
    if (p == NULL) {
        fprintf(stderr, "pmo_libpmem: attach: %s\n", pmo_last_error_message());
        return 1;
    }
    /* libpmem's volatile-memory helpers on PMO memory; psync makes it durable. */
    pmem_memcpy_nodrain(p, "via libpmem", 12);
    int is_pmem = pmem_is_pmem(p, 4096); /* 0: a PMO is not a DAX mapping libpmem knows */
    int ok = psync(p) == 0 && strcmp(p, "via libpmem") == 0 && detach(p) == 0 &&
             pmo_destroy("pmem", key) == 0;
    if (!ok) {
        fprintf(stderr, "pmo_libpmem: %s\n", pmo_last_error_message());
        return 1;
    }
    printf("pmo_libpmem: ok (pmem_is_pmem on a PMO: %d)\n", is_pmem);
    return 0;
}

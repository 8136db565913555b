/* A pool that does not exist: pmo_pool_open(path, 0) answers PMO_E_NOT_FOUND, errno ENOENT and
 * the sentence of the `pmo` command, word for word. Prints the message; exit 0 when all hold. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "pmo.h"

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s MISSING_POOL_PATH\n", argv[0]);
        return 2;
    }
    char want[4096];
    snprintf(want, sizeof want,
             "no pool at %s: create one with `pmo init --size 1GiB`, or name another with "
             "--pool or PMO_POOL",
             argv[1]);
    errno = 0;
    int rc = pmo_pool_open(argv[1], 0);
    int err = errno;
    const char *msg = pmo_last_error_message();
    printf("rc=%d errno=%d last_error=%d message=%s\n", rc, err, pmo_last_error(), msg);
    if (rc != PMO_E_NOT_FOUND || err != ENOENT || pmo_last_error() != PMO_E_NOT_FOUND) {
        fprintf(stderr, "FAIL: want rc=%d errno=%d\n", PMO_E_NOT_FOUND, ENOENT);
        return 1;
    }
    if (strcmp(msg, want) != 0) {
        fprintf(stderr, "FAIL: message\n  got:  %s\n  want: %s\n", msg, want);
        return 1;
    }
    return 0;
}

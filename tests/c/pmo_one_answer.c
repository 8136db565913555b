/* The wrong-key, busy and full-pool rows of docs/c-api.md's "One situation, one answer": each
 * gives its PMO_E_* code, its errno and the sentence the `pmo` command prints after "pmo: ".
 * Creates the pool it is given (64 MiB). Prints each message; exit 0 when all hold. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pmo.h"

static int failures = 0;

/* The call's result `ok` (nonzero: it failed as it should), then errno, code and message. */
static void expect(const char *what, int failed, int err, int want_err, int want_code,
                   const char *want_msg, int prefix_only) {
    int code = pmo_last_error();
    const char *msg = pmo_last_error_message();
    printf("%s: errno=%d code=%d message=%s\n", what, err, code, msg);
    int msg_ok = prefix_only ? strncmp(msg, want_msg, strlen(want_msg)) == 0
                             : strcmp(msg, want_msg) == 0;
    if (!failed || err != want_err || code != want_code || !msg_ok) {
        fprintf(stderr, "FAIL %s: want errno=%d code=%d message%s %s\n", what, want_err,
                want_code, prefix_only ? " starting" : "", want_msg);
        failures++;
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s NEW_POOL_PATH\n", argv[0]);
        return 2;
    }
    if (pmo_pool_open(argv[1], 64u << 20) != 0) {
        fprintf(stderr, "pmo_pool_open: %s\n", pmo_last_error_message());
        return 2;
    }
    if (pmo_create("a", 4096, "right") == NULL) {
        fprintf(stderr, "pmo_create: %s\n", pmo_last_error_message());
        return 2;
    }

    /* the key does not open the PMO */
    errno = 0;
    void *p = attach("a", 'r', "wrong");
    expect("wrong key", p == NULL, errno, EACCES, PMO_E_WRONG_KEY, "wrong key for PMO 'a'", 0);

    /* attached in a conflicting mode: by this process, then by another one */
    char *w = attach("a", 'w', "right");
    if (w == NULL) {
        fprintf(stderr, "attach 'w': %s\n", pmo_last_error_message());
        return 2;
    }
    errno = 0;
    int rc = pmo_destroy("a", "right");
    expect("busy here", rc == -1, errno, EBUSY, PMO_E_BUSY,
           "PMO 'a' is attached read-write by this process (detach it first)", 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        errno = 0;
        void *c = attach("a", 'w', "right");
        expect("busy elsewhere", c == NULL, errno, EBUSY, PMO_E_BUSY,
               "PMO 'a' is attached read-write by another process", 0);
        fflush(NULL);
        _exit(failures == 0 ? 0 : 1);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0) {
        fprintf(stderr, "FAIL: the child (status %d)\n", status);
        failures++;
    }
    if (detach(w) != 0) {
        fprintf(stderr, "detach: %s\n", pmo_last_error_message());
        return 2;
    }

    /* no room in the pool */
    errno = 0;
    char *k = pmo_create("huge", (uint64_t)1 << 40, "k");
    expect("full pool", k == NULL, errno, ENOSPC, PMO_E_NO_SPACE, "pool is full: ", 1);

    /* Nothing was lost: the PMO made before opens with its key. */
    void *r = attach("a", 'r', "right");
    if (r == NULL || detach(r) != 0) {
        fprintf(stderr, "FAIL: 'a' after the errors: %s\n", pmo_last_error_message());
        failures++;
    }
    return failures == 0 ? 0 : 1;
}

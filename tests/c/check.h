/*
 * check.h - the check macros shared by the C test programs in tests/c: CHECK(cond) and
 * CHECK_FAIL(call_ok_expr, errno, PMO_E_code) count failures in `failures` and print each one.
 */
#ifndef PMO_TEST_CHECK_H
#define PMO_TEST_CHECK_H

#include <errno.h>
#include <stdio.h>

#include "pmo.h"

static int failures;

#define CHECK(cond)                                                                    \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "%s:%d: check failed: %s (errno %d, last %d: %s)\n",       \
                    __FILE__, __LINE__, #cond, errno, pmo_last_error(),                \
                    pmo_last_error_message());                                         \
            failures++;                                                                \
        }                                                                              \
    } while (0)

/* A failed call: its return, errno and PMO_E_* code all as documented. */
#define CHECK_FAIL(call_ok_expr, want_errno, want_code)                                \
    do {                                                                               \
        errno = 0;                                                                     \
        int ok_ = (call_ok_expr);                                                      \
        int errno_ = errno;                                                            \
        int code_ = pmo_last_error();                                                  \
        if (ok_ || errno_ != (want_errno) || code_ != (want_code)) {                   \
            fprintf(stderr,                                                            \
                    "%s:%d: expected failure %s: errno %d (want %d), code %d (want %d), " \
                    "returned ok=%d: %s\n",                                            \
                    __FILE__, __LINE__, #call_ok_expr, errno_, (want_errno), code_,    \
                    (want_code), ok_, pmo_last_error_message());                       \
            failures++;                                                                \
        }                                                                              \
    } while (0)

#endif /* PMO_TEST_CHECK_H */

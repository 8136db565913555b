/*
 * pmo_psync_bench.c - psync against psync_nochecksum, per protection scheme: the cost of a psync
 * of N dirty pages, median of R rounds each, printed as CSV:
 *
 *   scheme,pages,psync_us,nochecksum_us,ratio
 *
 * ratio = psync_us / nochecksum_us (above 1: psync_nochecksum is faster). A benchmark, not a
 * test: run it by hand on a release build (docs/c-api.md), e.g.
 *
 *   PMO_POOL=/dev/shm/bench.pool PMO_KDF=fast ./pmo_psync_bench 256 15
 *
 * Each round dirties the same N pages (one store per page) and psyncs; the two calls alternate
 * round by round so that drift in the machine's load hits both alike. Every PMO it creates is
 * destroyed at the end.
 */
#define _POSIX_C_SOURCE 200809L
#include <string.h>
#include <time.h>

#include "pmo.h"

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void dirty(char *p, int pages, int round) {
    for (int i = 0; i < pages; i++)
        p[(size_t)i * 4096 + (size_t)(round % 4000)] = (char)(round + i);
}

static int bench(const char *scheme, int pages, int rounds) {
    char name[64];
    snprintf(name, sizeof name, "bench.psync.%s", scheme);
    const char *key = "bench";
    if (pmo_exists(name))
        pmo_destroy(name, key);
    if (pmo_create_ex(name, (uint64_t)pages * 4096, key, scheme) != 0) {
        fprintf(stderr, "create %s: %s\n", name, pmo_last_error_message());
        return 1;
    }
    char *p = (char *)attach(name, 'w', key);
    if (p == NULL) {
        fprintf(stderr, "attach %s: %s\n", name, pmo_last_error_message());
        return 1;
    }
    double *full = (double *)calloc((size_t)rounds, sizeof(double));
    double *fast = (double *)calloc((size_t)rounds, sizeof(double));
    /* One warm-up round of each: pages faulted in, buffers allocated. */
    dirty(p, pages, 0);
    psync(p);
    dirty(p, pages, 1);
    psync_nochecksum(p);
    for (int r = 0; r < rounds; r++) {
        dirty(p, pages, 2 * r + 2);
        double t0 = now_us();
        int a = psync(p);
        full[r] = now_us() - t0;
        dirty(p, pages, 2 * r + 3);
        t0 = now_us();
        int b = psync_nochecksum(p);
        fast[r] = now_us() - t0;
        if (a != 0 || b != 0) {
            fprintf(stderr, "psync %s: %s\n", name, pmo_last_error_message());
            return 1;
        }
    }
    double mf = median(full, rounds), mn = median(fast, rounds);
    printf("%s,%d,%.1f,%.1f,%.2f\n", scheme, pages, mf, mn, mf / mn);
    free(full);
    free(fast);
    detach(p);
    pmo_destroy(name, key);
    return 0;
}

int main(int argc, char *argv[]) {
    int pages = argc > 1 ? atoi(argv[1]) : 256;
    int rounds = argc > 2 ? atoi(argv[2]) : 15;
    if (pages <= 0 || rounds <= 0) {
        fprintf(stderr, "usage: %s [PAGES] [ROUNDS]\n", argv[0]);
        return 1;
    }
    const char *schemes[] = {"sp-ip", "bp-ip", "sp-id", "secure", "wedi", "none"};
    printf("scheme,pages,psync_us,nochecksum_us,ratio\n");
    for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++)
        if (bench(schemes[i], pages, rounds) != 0)
            return 1;
    return 0;
}

/*
 * pmo_heap_bench.c - POSEIDON's microbenchmark through the C API: each thread allocates 100
 * blocks with pmo_p_malloc, frees them in a random order with pmo_p_free, and repeats. Prints the
 * median of REPEATS runs in million alloc+free pairs per second, per size and thread count.
 * Not a test: run by hand (docs/c-api.md shows the command).
 *
 * Usage: pmo_heap_bench [seconds-per-sample (default 0.3)]
 * Needs PMO_POOL (and PMO_KDF=fast for a quick first run); uses the default heap (PMO_HEAP,
 * PMO_HEAP_SIZE: give it at least 512M for the 1 MiB size on 2 threads).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pmo_heap.h"

#define BLOCKS 100
#define REPEATS 5
#define THREADS_MAX 4

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

struct job {
    size_t size;
    double seconds;
    uint64_t pairs;
    int failed;
    unsigned seed;
};

static void *worker(void *arg) {
    struct job *j = arg;
    void *blocks[BLOCKS];
    int order[BLOCKS];
    for (int i = 0; i < BLOCKS; i++)
        order[i] = i;
    double end = now_s() + j->seconds;
    while (now_s() < end) {
        for (int i = 0; i < BLOCKS; i++) {
            blocks[i] = pmo_p_malloc(j->size);
            if (blocks[i] == NULL) {
                j->failed = 1;
                return NULL;
            }
        }
        for (int i = BLOCKS - 1; i > 0; i--) { /* Fisher-Yates */
            int k = (int)(rand_r(&j->seed) % (unsigned)(i + 1));
            int t = order[i];
            order[i] = order[k];
            order[k] = t;
        }
        for (int i = 0; i < BLOCKS; i++)
            if (pmo_p_free(blocks[order[i]]) != 0)
                j->failed = 1;
        j->pairs += BLOCKS;
    }
    return NULL;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 0.3;
    if (!(seconds > 0)) {
        fprintf(stderr, "usage: %s [seconds-per-sample]\n", argv[0]);
        return 2;
    }
    if (pmo_heap_default() == NULL) {
        fprintf(stderr, "default heap: %s\n", pmo_last_error_message());
        return 1;
    }
    const size_t sizes[] = {64, 256, 1024, 4096, 65536, 1 << 20};
    const int threads[] = {1, 2, 4};
    printf("size_bytes,threads,mops_per_s_median,repeats\n");
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
            int n = threads[t];
            double mops[REPEATS];
            for (int r = 0; r < REPEATS; r++) {
                pthread_t tid[THREADS_MAX];
                struct job jobs[THREADS_MAX];
                memset(jobs, 0, sizeof jobs);
                double t0 = now_s();
                for (int i = 0; i < n; i++) {
                    jobs[i].size = sizes[s];
                    jobs[i].seconds = seconds;
                    jobs[i].seed = (unsigned)(i * 7919 + r);
                    pthread_create(&tid[i], NULL, worker, &jobs[i]);
                }
                uint64_t pairs = 0;
                for (int i = 0; i < n; i++) {
                    pthread_join(tid[i], NULL);
                    pairs += jobs[i].pairs;
                    if (jobs[i].failed) {
                        fprintf(stderr, "size %zu threads %d: %s\n", sizes[s], n,
                                pmo_last_error_message());
                        return 1;
                    }
                }
                mops[r] = (double)pairs / (now_s() - t0) / 1e6;
            }
            qsort(mops, REPEATS, sizeof mops[0], cmp_double);
            printf("%zu,%d,%.2f,%d\n", sizes[s], n, mops[REPEATS / 2], REPEATS);
            fflush(stdout);
        }
    }
    return 0;
}

/* Helper of bench_hash.sh (links libdetcheck.a):
 *   bench_digest rate [MIB]   in-memory digest rate on one core vs XXH3 over
 *                             the whole buffer (MIB MiB, default 256) */
#define _POSIX_C_SOURCE 200809L
#include <detcheck_static.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "rate")) {
        size_t n = (size_t)(argc >= 3 && atol(argv[2]) > 0 ? atol(argv[2]) : 256) << 20;
        uint8_t *b = malloc(n);
        if (!b) {
            fprintf(stderr, "bench_digest: out of memory\n");
            return 2;
        }
        for (size_t i = 0; i < n; i++) b[i] = (uint8_t)(i * 31);
        volatile uint64_t sink = 0;
        double best_d = 1e9, best_x = 1e9;
        for (int r = 0; r < 5; r++) {
            double t0 = now();
            dck_lanes l = dck_segments_sum(b, n, 0);
            double t1 = now();
            dck_digest x = dck_xxh128(b, n);
            double t2 = now();
            sink += l.lo + x.low64;
            if (t1 - t0 < best_d) best_d = t1 - t0;
            if (t2 - t1 < best_x) best_x = t2 - t1;
        }
        printf("in-memory, one core: digest v1 segments %.1f GB/s, XXH3-128 whole buffer %.1f GB/s "
               "(digest goal >= 10 GB/s; ratio %.2f)\n",
               (double)n / best_d / 1e9, (double)n / best_x / 1e9, best_x / best_d);
        (void)sink;
        free(b);
        return 0;
    }
    fprintf(stderr, "usage: bench_digest rate [MIB]\n");
    return 2;
}

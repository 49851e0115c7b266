/* Helpers for bench_hash.sh:
 *   bench_digest write FILE MB   a safetensors file of MB MiB (BF16 tensors)
 *   bench_digest rate            in-memory digest rate on one core vs XXH3
 *                                over the whole buffer */
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
    if (argc >= 4 && !strcmp(argv[1], "write")) {
        long mb = atol(argv[3]);
        /* 64 tensors of mb/64 MiB each, plus odd-sized ones */
        int nt = 64;
        size_t per = (size_t)mb * 1048576 / (size_t)nt;
        uint8_t *buf = malloc(per);
        for (size_t i = 0; i < per; i++) buf[i] = (uint8_t)(i * 2654435761u >> 13);
        dck_st_tensor *t = calloc((size_t)nt, sizeof *t);
        for (int i = 0; i < nt; i++) {
            char *name = malloc(64);
            snprintf(name, 64, "model.layers.%d.weight", i);
            t[i] = (dck_st_tensor){.name = name, .dtype = DCK_BF16, .ndim = 2, .shape = {per / 2 / 1024, 1024}, .data = buf};
            t[i].shape[0] = per / 2 / 1024;
        }
        dck_status s = dck_safetensors_write(argv[2], t, (size_t)nt, NULL, 0, 0);
        if (s) {
            fprintf(stderr, "%s\n", dck_last_error());
            return 2;
        }
        return 0;
    }
    if (argc >= 2 && !strcmp(argv[1], "rate")) {
        size_t n = (size_t)256 << 20;
        uint8_t *b = malloc(n);
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
    fprintf(stderr, "usage: bench_digest write FILE MB | rate\n");
    return 2;
}

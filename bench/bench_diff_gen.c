/* Helper of bench_diff.sh (plain C, no libdetcheck, so it measures nothing
 * of detcheck by accident).
 *   bench_diff_gen write FILE MIB [edit]   a safetensors checkpoint of about
 *       MIB MiB: F32 and BF16 [2048, 2048] tensors of pseudo-random weights;
 *       with "edit" the last element of every tensor is one ULP higher.
 *   bench_diff_gen rss CMD ARGS...         runs CMD, prints "SECONDS KIB" to
 *       stderr: its wall time and peak resident set (getrusage of the child),
 *       and exits with its status. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { ROWS = 2048, COLS = 2048 };

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t next_u64(void) {
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

/* A weight-like float: small, finite, both signs. */
static float weight(void) {
    uint64_t r = next_u64();
    float u = (float)(r >> 40) * (1.0f / 16777216.0f); /* [0, 1) */
    float v = (u - 0.5f) * 0.08f;
    return v;
}

static int write_ckpt(const char *path, long mib, int edit) {
    long f32_bytes = (long)ROWS * COLS * 4, bf16_bytes = (long)ROWS * COLS * 2;
    /* three F32 per BF16: 56 MiB per group of four */
    long ntensors = 0, total = 0;
    while (total < mib * 1048576L) {
        total += (ntensors % 4 == 3) ? bf16_bytes : f32_bytes;
        ntensors++;
    }
    size_t cap = (size_t)ntensors * 160 + 64;
    char *hdr = malloc(cap);
    size_t k = 0;
    long pos = 0;
    k += (size_t)snprintf(hdr + k, cap - k, "{");
    for (long i = 0; i < ntensors; i++) {
        int bf = i % 4 == 3;
        long nb = bf ? bf16_bytes : f32_bytes;
        k += (size_t)snprintf(hdr + k, cap - k,
                              "%s\"model.layers.%ld.%s%ld.weight\":{\"dtype\":\"%s\",\"shape\":[%d,%d],"
                              "\"data_offsets\":[%ld,%ld]}",
                              i ? "," : "", i / 4, bf ? "norm" : "mlp", i % 4, bf ? "BF16" : "F32", ROWS,
                              COLS, pos, pos + nb);
        pos += nb;
    }
    k += (size_t)snprintf(hdr + k, cap - k, "}");
    while (k % 8) hdr[k++] = ' ';
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        return 2;
    }
    uint8_t len[8];
    for (int i = 0; i < 8; i++) len[i] = (uint8_t)((uint64_t)k >> (8 * i));
    fwrite(len, 1, 8, f);
    fwrite(hdr, 1, k, f);
    float *buf = malloc((size_t)f32_bytes);
    for (long i = 0; i < ntensors; i++) {
        int bf = i % 4 == 3;
        size_t n = (size_t)ROWS * COLS;
        for (size_t e = 0; e < n; e++) buf[e] = weight();
        if (edit) {
            /* one ULP up in the stored dtype, last element */
            uint32_t u;
            memcpy(&u, &buf[n - 1], 4);
            u += bf ? 0x10000u : 1u;
            memcpy(&buf[n - 1], &u, 4);
        }
        if (bf) {
            uint16_t *h = (uint16_t *)buf;
            for (size_t e = 0; e < n; e++) {
                uint32_t u;
                memcpy(&u, &buf[e], 4);
                h[e] = (uint16_t)(u >> 16);
            }
            fwrite(h, 2, n, f);
        } else {
            fwrite(buf, 4, n, f);
        }
    }
    free(buf);
    free(hdr);
    if (fclose(f) != 0) {
        perror(path);
        return 2;
    }
    return 0;
}

static int run_rss(char **argv) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pid_t pid = fork();
    if (pid < 0) return 2;
    if (pid == 0) {
        execvp(argv[0], argv);
        _exit(127);
    }
    int st;
    struct rusage ru;
    if (wait4(pid, &st, 0, &ru) < 0) return 2;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    fprintf(stderr, "%.3f %ld\n", s, ru.ru_maxrss);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 2;
}

int main(int argc, char **argv) {
    if (argc >= 4 && !strcmp(argv[1], "write"))
        return write_ckpt(argv[2], atol(argv[3]), argc > 4 && !strcmp(argv[4], "edit"));
    if (argc >= 3 && !strcmp(argv[1], "rss")) return run_rss(argv + 2);
    fprintf(stderr, "usage: bench_diff_gen write FILE MIB [edit] | rss CMD ARGS...\n");
    return 2;
}

/* Input generator of the benchmarks (plain C, no libdetcheck, so that it
 * measures nothing of detcheck by accident). Every file is safetensors;
 * values are pseudo-random weights from a fixed seed, so each run writes the
 * same bytes.
 *
 *   bench_gen tensors FILE N ELEMS
 *       one file of N F32 tensors of ELEMS elements each
 *   bench_gen one FILE ELEMS
 *       one file of one F32 tensor of ELEMS elements
 *   bench_gen shards DIR N NSHARDS ELEMS
 *       N F32 tensors of ELEMS elements over NSHARDS files
 *       DIR/model-0000I-of-0000K.safetensors, and the Hugging Face index
 *       DIR/model.safetensors.index.json naming every tensor (weight_map keys
 *       sorted, as transformers writes them)
 *   bench_gen dir DIR NFILES BYTES
 *       NFILES files DIR/fNNNNN.safetensors of about BYTES bytes each, four
 *       F32 tensors per file (names unique across files)
 *   bench_gen big FILE MIB [edit|f32|f32-other]
 *       about MIB MiB of [2048, 2048] tensors: three F32 to one BF16 (default);
 *       "edit": the same, with the last element of every tensor one ULP up;
 *       "f32": F32 only; "f32-other": the "f32" file with every element
 *       changed (a small perturbation, never the same bits)
 *
 * Exit 0 done, 2 trouble (message on stderr). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static uint64_t rng_state;
static void seed(uint64_t s) { rng_state = s * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull; }
static uint64_t next_u64(void) {
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

/* A weight-like float: small, finite, both signs. */
static float weight(void) {
    float u = (float)(next_u64() >> 40) * (1.0f / 16777216.0f); /* [0, 1) */
    return (u - 0.5f) * 0.08f;
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "bench_gen: out of memory (%zu bytes)\n", n);
        exit(2);
    }
    return p;
}

static FILE *xopen(const char *path) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "bench_gen: %s: %s\n", path, strerror(errno));
        exit(2);
    }
    return f;
}

static void xclose(FILE *f, const char *path) {
    if (ferror(f) | fclose(f)) {
        fprintf(stderr, "bench_gen: %s: write failed: %s\n", path, strerror(errno));
        exit(2);
    }
}

static void xwrite(const void *p, size_t n, FILE *f) {
    if (n && fwrite(p, 1, n, f) != n) {
        fprintf(stderr, "bench_gen: write failed: %s\n", strerror(errno));
        exit(2);
    }
}

/* A growing string for JSON headers. */
typedef struct {
    char *p;
    size_t n, cap;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) exit(2);
        if (b->p && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        b->cap = (b->cap + (size_t)k + 1) * 2;
        char *q = realloc(b->p, b->cap);
        if (!q) {
            fprintf(stderr, "bench_gen: out of memory\n");
            exit(2);
        }
        b->p = q;
    }
}

/* The 8-byte length, the header padded with spaces to 8 bytes. */
static void write_header(FILE *f, sbuf *h) {
    while (h->n % 8) sb_printf(h, " ");
    uint8_t len[8];
    for (int i = 0; i < 8; i++) len[i] = (uint8_t)((uint64_t)h->n >> (8 * i));
    xwrite(len, 8, f);
    xwrite(h->p, h->n, f);
}

static void fill_f32(float *buf, size_t n) {
    for (size_t i = 0; i < n; i++) buf[i] = weight();
}

/* One file of n F32 tensors of elems elements, named by fmt (with %ld). */
static void write_f32_file(const char *path, long first, long n, long elems, const char *fmt) {
    sbuf h = {0};
    char name[256];
    sb_printf(&h, "{\"__metadata__\":{\"format\":\"pt\"}");
    long nb = elems * 4;
    for (long i = 0; i < n; i++) {
        snprintf(name, sizeof name, fmt, first + i);
        sb_printf(&h, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%ld],\"data_offsets\":[%ld,%ld]}", name, elems,
                  i * nb, (i + 1) * nb);
    }
    sb_printf(&h, "}");
    FILE *f = xopen(path);
    write_header(f, &h);
    /* data: chunks of up to 1 MiB of fresh values */
    size_t total = (size_t)n * (size_t)nb, chunk = 1 << 18;
    float *buf = xmalloc(chunk * 4);
    for (size_t done = 0; done < total;) {
        size_t k = (total - done) / 4 < chunk ? (total - done) / 4 : chunk;
        fill_f32(buf, k);
        xwrite(buf, k * 4, f);
        done += k * 4;
    }
    free(buf);
    free(h.p);
    xclose(f, path);
}

/* Tensor names as a model has them (not zero-padded, so that sorted order
 * is not creation order). */
static const char *const tensor_fmt = "model.layers.%ld.mlp.experts.w.weight";

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int gen_shards(const char *dir, long n, long nshards, long elems) {
    if (nshards < 1 || n < nshards) {
        fprintf(stderr, "bench_gen: need 1 <= NSHARDS <= N\n");
        return 2;
    }
    mkdir(dir, 0777);
    char path[4096], shard[64];
    char **names = xmalloc((size_t)n * sizeof *names);
    int *owner = xmalloc((size_t)n * sizeof *owner); /* tensor i's shard */
    long first = 0;
    for (long s = 0; s < nshards; s++) {
        long cnt = n / nshards + (s < n % nshards);
        snprintf(shard, sizeof shard, "model-%05ld-of-%05ld.safetensors", s + 1, nshards);
        snprintf(path, sizeof path, "%s/%s", dir, shard);
        write_f32_file(path, first, cnt, elems, tensor_fmt);
        for (long i = first; i < first + cnt; i++) {
            char nm[256];
            snprintf(nm, sizeof nm, tensor_fmt, i);
            names[i] = xmalloc(strlen(nm) + 1);
            strcpy(names[i], nm);
            owner[i] = (int)s;
        }
        first += cnt;
    }
    /* weight_map in sorted key order; a key's tensor number (hence its
     * shard) is read back from the name */
    char **sorted = xmalloc((size_t)n * sizeof *sorted);
    memcpy(sorted, names, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_str);
    sbuf h = {0};
    sb_printf(&h, "{\n  \"metadata\": {\n    \"total_size\": %ld\n  },\n  \"weight_map\": {", n * elems * 4);
    for (long i = 0; i < n; i++) {
        long idx = strtol(sorted[i] + strlen("model.layers."), NULL, 10);
        sb_printf(&h, "%s\n    \"%s\": \"model-%05d-of-%05ld.safetensors\"", i ? "," : "", sorted[i], owner[idx] + 1,
                  nshards);
    }
    sb_printf(&h, "\n  }\n}\n");
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE *f = xopen(path);
    xwrite(h.p, h.n, f);
    xclose(f, path);
    for (long i = 0; i < n; i++) free(names[i]);
    free(names);
    free(sorted);
    free(owner);
    free(h.p);
    return 0;
}

static int gen_dir(const char *dir, long nfiles, long bytes) {
    mkdir(dir, 0777);
    /* four tensors; the header takes about 320 bytes of the file */
    long elems = (bytes - 320) / 16;
    if (elems < 1) elems = 1;
    char path[4096], fmt[64];
    for (long i = 0; i < nfiles; i++) {
        snprintf(path, sizeof path, "%s/f%05ld.safetensors", dir, i);
        snprintf(fmt, sizeof fmt, "file%05ld.layers.%%ld.weight", i);
        write_f32_file(path, 0, 4, elems, fmt);
    }
    return 0;
}

enum { ROWS = 2048, COLS = 2048 };

static int gen_big(const char *path, long mib, const char *variant) {
    int edit = !strcmp(variant, "edit"), f32only = !strncmp(variant, "f32", 3),
        other = !strcmp(variant, "f32-other");
    long f32_bytes = (long)ROWS * COLS * 4, bf16_bytes = (long)ROWS * COLS * 2;
    long ntensors = 0, total = 0;
    while (total < mib * 1048576L || ntensors == 0) {
        total += (!f32only && ntensors % 4 == 3) ? bf16_bytes : f32_bytes;
        ntensors++;
    }
    sbuf h = {0};
    long pos = 0;
    sb_printf(&h, "{");
    for (long i = 0; i < ntensors; i++) {
        int bf = !f32only && i % 4 == 3;
        long nb = bf ? bf16_bytes : f32_bytes;
        sb_printf(&h, "%s\"model.layers.%ld.%s%ld.weight\":{\"dtype\":\"%s\",\"shape\":[%d,%d],\"data_offsets\":[%ld,%ld]}",
                  i ? "," : "", i / 4, bf ? "norm" : "mlp", i % 4, bf ? "BF16" : "F32", ROWS, COLS, pos, pos + nb);
        pos += nb;
    }
    sb_printf(&h, "}");
    FILE *f = xopen(path);
    write_header(f, &h);
    size_t n = (size_t)ROWS * COLS;
    float *buf = xmalloc(n * 4);
    seed(1);
    uint64_t pert = 0x243f6a8885a308d3ull;
    for (long i = 0; i < ntensors; i++) {
        int bf = !f32only && i % 4 == 3;
        fill_f32(buf, n);
        if (edit) { /* one ULP up in the stored dtype, last element */
            uint32_t u;
            memcpy(&u, &buf[n - 1], 4);
            u += bf ? 0x10000u : 1u;
            memcpy(&buf[n - 1], &u, 4);
        }
        if (other) { /* every element: a small change, never the same bits */
            for (size_t e = 0; e < n; e++) {
                pert ^= pert << 13;
                pert ^= pert >> 7;
                pert ^= pert << 17;
                float d = ((float)(pert >> 40) * (1.0f / 16777216.0f) - 0.5f) * 1e-3f;
                float v = buf[e] + d;
                if (!memcmp(&v, &buf[e], 4)) {
                    uint32_t u;
                    memcpy(&u, &v, 4);
                    u ^= 1;
                    memcpy(&v, &u, 4);
                }
                buf[e] = v;
            }
        }
        if (bf) {
            uint16_t *hb = (uint16_t *)buf;
            for (size_t e = 0; e < n; e++) {
                uint32_t u;
                memcpy(&u, &buf[e], 4);
                hb[e] = (uint16_t)(u >> 16);
            }
            xwrite(hb, 2 * n, f);
        } else {
            xwrite(buf, 4 * n, f);
        }
    }
    free(buf);
    free(h.p);
    xclose(f, path);
    return 0;
}

int main(int argc, char **argv) {
    seed(1);
    if (argc == 5 && !strcmp(argv[1], "tensors")) {
        write_f32_file(argv[2], 0, atol(argv[3]), atol(argv[4]), tensor_fmt);
        return 0;
    }
    if (argc == 4 && !strcmp(argv[1], "one")) {
        write_f32_file(argv[2], 0, 1, atol(argv[3]), "model.embed.%ld.weight");
        return 0;
    }
    if (argc == 6 && !strcmp(argv[1], "shards")) return gen_shards(argv[2], atol(argv[3]), atol(argv[4]), atol(argv[5]));
    if (argc == 5 && !strcmp(argv[1], "dir")) return gen_dir(argv[2], atol(argv[3]), atol(argv[4]));
    if ((argc == 4 || argc == 5) && !strcmp(argv[1], "big")) return gen_big(argv[2], atol(argv[3]), argc == 5 ? argv[4] : "");
    fprintf(stderr, "usage: bench_gen tensors FILE N ELEMS | one FILE ELEMS | shards DIR N NSHARDS ELEMS |\n"
                    "       dir DIR NFILES BYTES | big FILE MIB [edit|f32|f32-other]\n");
    return 2;
}

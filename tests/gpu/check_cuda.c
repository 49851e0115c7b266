/* The CUDA suite: GPU digests against the CPU digest, bit for bit. Needs a
 * GPU, so it is not part of `make check`; ci/gpu-check.sh builds it
 * (`make gpu-tests`) and runs it. Plain C (no Check) so that it runs on a
 * machine without the test framework. Exit 0 all passed, 1 a failure,
 * 77 no GPU (skipped).
 *   check_cuda [--quick]   --quick: skip the 8 GiB tensors */
#include "detcheck.h"
#include "gpu/cuda_loader.h" /* dck_gpu_pools_memo_set */
#include "gpu/gpu.h"

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int failures, checks, parts_skipped;
static char skip_why[256];
/* A part that could not run on this device: the suite then exits 77 (ran in
 * part), never 0, as tests/run.sh counts it. */
static void skip_part(const char *why) {
    parts_skipped++;
    printf("  SKIP %s\n", why);
    size_t n = strlen(skip_why);
    snprintf(skip_why + n, sizeof skip_why - n, "%s%s", n ? "; " : "", why);
}
#define CHECK(cond, ...)                                                                        \
    do {                                                                                        \
        checks++;                                                                               \
        if (!(cond)) {                                                                          \
            failures++;                                                                         \
            if (failures <= 20) {                                                               \
                fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                            \
                fprintf(stderr, __VA_ARGS__);                                                   \
                fprintf(stderr, " [%s]\n", dck_last_error());                                   \
            }                                                                                   \
        }                                                                                       \
    } while (0)
#define CUDA_OK(call)                                                                           \
    do {                                                                                        \
        cudaError_t e_ = (call);                                                                \
        if (e_ != cudaSuccess) {                                                                \
            fprintf(stderr, "FATAL %s:%d: %s: %s\n", __FILE__, __LINE__, #call,                 \
                    cudaGetErrorString(e_));                                                    \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)

static uint64_t rng_state = 0x2545f4914f6cdd1dULL;
static uint64_t rnd(void) {
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Fills n bytes with a seeded stream, 16 threads (the 8 GiB cases). */
typedef struct {
    uint8_t *p;
    size_t n;
    uint64_t seed;
    int part, parts;
} fill_arg;
static void *fill_part(void *a) {
    fill_arg *f = a;
    size_t words = f->n / 8, lo = words * (size_t)f->part / (size_t)f->parts,
           hi = words * (size_t)(f->part + 1) / (size_t)f->parts;
    uint64_t *w = (uint64_t *)f->p;
    for (size_t i = lo; i < hi; i++) {
        uint64_t z = f->seed + i * 0x9e3779b97f4a7c15ULL;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        w[i] = z ^ (z >> 31);
    }
    return NULL;
}
static void fill(uint8_t *p, size_t n, uint64_t seed) {
    pthread_t th[16];
    fill_arg a[16];
    for (int i = 0; i < 16; i++) {
        a[i] = (fill_arg){p, n, seed, i, 16};
        pthread_create(&th[i], NULL, fill_part, &a[i]);
    }
    for (int i = 0; i < 16; i++) pthread_join(th[i], NULL);
    for (size_t i = n / 8 * 8; i < n; i++) p[i] = (uint8_t)(seed + i);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ------------------------------------------------------------------ every dtype */
static void test_every_dtype(void) {
    for (int dt = 0; dt < DCK_DTYPE_COUNT; dt++)
        for (int round = 0; round < 20; round++) {
            size_t es = dck_dtype_size((dck_dtype)dt);
            uint64_t shape[3] = {1 + rnd() % 17, 1 + rnd() % 33, 1 + rnd() % (round < 10 ? 9 : 999)};
            size_t n = (size_t)(shape[0] * shape[1] * shape[2] * es);
            uint8_t *h = malloc(n);
            fill(h, n, rnd());
            void *d;
            CUDA_OK(cudaMalloc(&d, n + 16));
            size_t mis = (size_t)(rnd() % 16);
            CUDA_OK(cudaMemcpy((uint8_t *)d + mis, h, n, cudaMemcpyHostToDevice));
            dck_digest want, got;
            CHECK(dck_digest_buffer((dck_dtype)dt, shape, 3, h, n, 4, &want) == DCK_OK, "cpu");
            CHECK(dck_gpu_digest((dck_dtype)dt, shape, 3, (uint8_t *)d + mis, n, NULL, &got) ==
                      DCK_OK,
                  "gpu digest");
            CHECK(dck_digest_equal(want, got), "dtype %s, %zu bytes at +%zu",
                  dck_dtype_name((dck_dtype)dt), n, mis);
            CUDA_OK(cudaFree(d));
            free(h);
        }
    /* scalar and empty */
    int64_t v = -7;
    void *d;
    CUDA_OK(cudaMalloc(&d, 8));
    CUDA_OK(cudaMemcpy(d, &v, 8, cudaMemcpyHostToDevice));
    dck_digest got;
    CHECK(dck_gpu_digest(DCK_I64, NULL, 0, d, 8, NULL, &got) == DCK_OK, "scalar");
    char hex[33];
    dck_digest_to_hex(got, hex);
    CHECK(!strcmp(hex, "ec1fcc503dc2b69305ba1f340c2b4bc7"), "scalar vector: %s", hex);
    uint64_t zero = 0;
    CHECK(dck_gpu_digest(DCK_F32, &zero, 1, d, 0, NULL, &got) == DCK_OK, "empty");
    dck_digest_to_hex(got, hex);
    CHECK(!strcmp(hex, "a98304e484eb6608b750574f39d22c17"), "empty vector: %s", hex);
    CUDA_OK(cudaFree(d));
}

/* ------------------------------------------------------------------ every length
 * Every length 0..64 KiB, then the three lengths around every segment edge
 * up to 1 MiB, each at a rotating device misalignment. The GPU sums go into
 * one device array with the async API (one launch per case, one sync); the
 * CPU reference comes from prefix sums of per-segment hashes. */
#define MAXLEN ((size_t)1 << 20)
static void test_every_length(void) {
    static const size_t mis_of[] = {0, 1, 3, 5, 8, 13, 16, 7};
    const int nmis = 8;
    uint8_t *h = malloc(MAXLEN + 32);
    fill(h, MAXLEN + 32, 99);
    uint8_t *d;
    CUDA_OK(cudaMalloc((void **)&d, MAXLEN + 32));
    CUDA_OK(cudaMemcpy(d, h, MAXLEN + 32, cudaMemcpyHostToDevice));
    /* prefix[m][k] = lane sums of the first k whole segments of h + mis_of[m] */
    size_t nseg = MAXLEN / 128;
    dck_lanes *prefix = malloc(sizeof *prefix * (size_t)nmis * (nseg + 1));
    for (int m = 0; m < nmis; m++) {
        dck_lanes acc = {0, 0};
        prefix[(size_t)m * (nseg + 1)] = acc;
        for (size_t k = 0; k < nseg; k++) {
            dck_lanes_add(&acc, dck_segments_sum(h + mis_of[m] + 128 * k, 128, k));
            prefix[(size_t)m * (nseg + 1) + k + 1] = acc;
        }
    }
    size_t ncases = 0, cap = 65537 + 3 * nseg;
    size_t *lens = malloc(sizeof *lens * cap);
    for (size_t l = 0; l <= 65536; l++) lens[ncases++] = l;
    for (size_t e = 65536 + 128; e <= MAXLEN; e += 128) {
        lens[ncases++] = e - 1;
        lens[ncases++] = e;
        if (e + 1 <= MAXLEN) lens[ncases++] = e + 1;
    }
    uint64_t *dl;
    CUDA_OK(cudaMalloc((void **)&dl, 16 * ncases));
    CUDA_OK(cudaMemset(dl, 0, 16 * ncases));
    double t0 = now();
    for (size_t i = 0; i < ncases; i++) {
        size_t m = i % (size_t)nmis;
        dck_status s = dck_gpu_segments_sum_async(d + mis_of[m], lens[i], 0, dl + 2 * i, NULL);
        if (s) {
            CHECK(0, "launch %zu", i);
            break;
        }
    }
    CUDA_OK(cudaDeviceSynchronize());
    uint64_t *got = malloc(16 * ncases);
    CUDA_OK(cudaMemcpy(got, dl, 16 * ncases, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (size_t i = 0; i < ncases; i++) {
        size_t m = i % (size_t)nmis, l = lens[i];
        dck_lanes want = prefix[m * (nseg + 1) + l / 128];
        if (l % 128) dck_lanes_add(&want, dck_segments_sum(h + mis_of[m] + l / 128 * 128, l % 128, l / 128));
        if (got[2 * i] != want.lo || got[2 * i + 1] != want.hi) {
            if (bad++ < 10) CHECK(0, "length %zu at misalignment %zu", l, mis_of[m]);
        } else checks++;
    }
    printf("  %zu lengths (0..1 MiB) in %.2f s, %d wrong\n", ncases, now() - t0, bad);
    free(got);
    free(lens);
    free(prefix);
    CUDA_OK(cudaFree(dl));
    CUDA_OK(cudaFree(d));
    free(h);
}

/* ------------------------------------------------------------------ fragments */
static void test_fragments(void) {
    for (int round = 0; round < 400; round++) {
        uint64_t nbytes = 1 + rnd() % (round < 300 ? 5000 : 3000000);
        uint8_t *h = malloc(nbytes);
        fill(h, nbytes, rnd());
        uint8_t *d;
        CUDA_OK(cudaMalloc((void **)&d, nbytes));
        CUDA_OK(cudaMemcpy(d, h, nbytes, cudaMemcpyHostToDevice));
        /* cut into 1..6 fragments at random offsets, each computed on the
         * GPU or the CPU at random, added in reverse order */
        int nf = 1 + (int)(rnd() % 6);
        uint64_t cuts[8] = {0};
        for (int i = 1; i < nf; i++) cuts[i] = rnd() % (nbytes + 1);
        cuts[nf] = nbytes;
        for (int i = 1; i <= nf; i++)
            for (int j = i; j > 0 && cuts[j] < cuts[j - 1]; j--) {
                uint64_t t = cuts[j];
                cuts[j] = cuts[j - 1];
                cuts[j - 1] = t;
            }
        dck_tensor_hasher *th;
        uint64_t shape = nbytes;
        CHECK(dck_tensor_hasher_create(DCK_U8, &shape, 1, &th) == DCK_OK, "hasher");
        for (int i = nf - 1; i >= 0; i--) {
            dck_fragment_partial pg, pc;
            uint64_t off = cuts[i], len = cuts[i + 1] - cuts[i];
            CHECK(dck_gpu_fragment_partial(nbytes, off, d + off, len, NULL, &pg) == DCK_OK,
                  "gpu fragment");
            CHECK(dck_fragment_partial_compute(nbytes, off, h + off, len, &pc) == DCK_OK,
                  "cpu fragment");
            CHECK(pg.offset == pc.offset && pg.length == pc.length &&
                      pg.head_len == pc.head_len && pg.tail_len == pc.tail_len &&
                      pg.lanes.lo == pc.lanes.lo && pg.lanes.hi == pc.lanes.hi &&
                      !memcmp(pg.head, pc.head, pc.head_len) &&
                      !memcmp(pg.tail, pc.tail, pc.tail_len),
                  "fragment [%llu, +%llu) of %llu", (unsigned long long)off,
                  (unsigned long long)len, (unsigned long long)nbytes);
            CHECK(dck_tensor_hasher_add(th, (rnd() & 1) ? &pg : &pc) == DCK_OK, "add");
        }
        dck_digest a, b;
        CHECK(dck_tensor_hasher_final(th, &a) == DCK_OK, "final");
        CHECK(dck_digest_buffer(DCK_U8, &shape, 1, h, nbytes, 4, &b) == DCK_OK, "cpu");
        CHECK(dck_digest_equal(a, b), "stitched digest of %llu bytes", (unsigned long long)nbytes);
        dck_tensor_hasher_free(th);
        CUDA_OK(cudaFree(d));
        free(h);
    }
}

/* ------------------------------------------------------------------ API misuse */
static void test_misuse(void) {
    uint8_t host[300] = {0};
    dck_lanes l;
    CHECK(dck_gpu_segments_sum(host, sizeof host, 0, NULL, &l) == DCK_ERR_INVALID,
          "host pointer accepted");
    void *d;
    CUDA_OK(cudaMalloc(&d, 256));
    dck_fragment_partial p;
    CHECK(dck_gpu_fragment_partial(100, 50, d, 60, NULL, &p) == DCK_ERR_LAYOUT, "outside tensor");
    uint64_t shape = 10;
    dck_digest dg;
    CHECK(dck_gpu_digest(DCK_F32, &shape, 1, d, 39, NULL, &dg) == DCK_ERR_INVALID, "size");
    /* managed memory works too, where the device has it: some virtualised
     * GPUs have none, and its absence must not end the suite before the
     * tests after this one (the 8 GiB tensors use cudaMalloc) */
    dck_digest a, b;
    int managed = 0;
    if (cudaDeviceGetAttribute(&managed, cudaDevAttrManagedMemory, 0) != cudaSuccess) managed = 0;
    void *m = NULL;
    if (managed && cudaMallocManaged(&m, 1000, cudaMemAttachGlobal) == cudaSuccess) {
        memset(m, 7, 1000);
        uint64_t s1000 = 1000;
        CHECK(dck_gpu_digest(DCK_U8, &s1000, 1, m, 1000, NULL, &a) == DCK_OK, "managed");
        CHECK(dck_digest_buffer(DCK_U8, &s1000, 1, m, 1000, 1, &b) == DCK_OK, "cpu");
        CHECK(dck_digest_equal(a, b), "managed digest");
        CUDA_OK(cudaFree(m));
    } else {
        (void)cudaGetLastError();
        skip_part("managed memory: not supported on device 0");
    }
    /* a user stream */
    cudaStream_t st;
    CUDA_OK(cudaStreamCreate(&st));
    CUDA_OK(cudaMemsetAsync(d, 3, 256, st));
    uint64_t s256 = 256;
    uint8_t h256[256];
    memset(h256, 3, 256);
    CHECK(dck_gpu_digest(DCK_U8, &s256, 1, d, 256, st, &a) == DCK_OK, "stream");
    CHECK(dck_digest_buffer(DCK_U8, &s256, 1, h256, 256, 1, &b) == DCK_OK, "cpu");
    CHECK(dck_digest_equal(a, b), "digest on a user stream");
    CUDA_OK(cudaStreamDestroy(st));
    CUDA_OK(cudaFree(d));
}

/* ------------------------------------------------------------------ no memory pools
 * The digest's scratch memory as on a GPU without memory pools (error 801 on
 * some virtualised GPUs): device 0 forced onto the cudaMalloc fallback gives
 * the same digest as with pools. */
static void test_no_pools(void) {
    const size_t n = 3u << 20;
    uint8_t *h = malloc(n), *d;
    fill(h, n, 77);
    CUDA_OK(cudaMalloc((void **)&d, n));
    CUDA_OK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    uint64_t shape = n;
    dck_digest pooled, plain, cpu;
    CHECK(dck_gpu_digest(DCK_U8, &shape, 1, d, n, NULL, &pooled) == DCK_OK, "gpu, pools");
    dck_gpu_pools_memo_set(0, DCK_GPU_POOLS_NO);
    CHECK(dck_gpu_digest(DCK_U8, &shape, 1, d, n, NULL, &plain) == DCK_OK, "gpu, cudaMalloc");
    dck_gpu_pools_memo_set(0, DCK_GPU_POOLS_UNKNOWN);
    CHECK(dck_digest_buffer(DCK_U8, &shape, 1, h, n, 0, &cpu) == DCK_OK, "cpu");
    CHECK(dck_digest_equal(pooled, cpu) && dck_digest_equal(plain, cpu), "digest without pools");
    CUDA_OK(cudaFree(d));
    free(h);
}

/* cuBLAS (the fast baseline of `train --bench`): tests/gpu/check_cublas.c,
 * its own row in ci/gpu-check.sh, so that a machine without cuBLAS cannot
 * make this digest suite a SKIP. */

/* ------------------------------------------------------------------ replica check
 * dck_replica_check on device memory: the root of tensors digested on the
 * GPU is the root of the same bytes on the host, alone and over an NCCL
 * communicator of one rank (the gathers through device buffers, the wait of
 * dck_nccl_wait; one rank: nothing compared, the root still computed).
 * Several ranks: tests/cli/test_replica.sh over MPI. */
static void test_replica(void) {
    enum { NT = 3 };
    static const char *const names[NT] = {"w", "b", "optimizer.state.w.exp_avg"};
    static const uint64_t sizes[NT] = {1000003, 37, 4099};
    dck_replica_tensor host[NT], dev[NT];
    void *h[NT], *d[NT];
    for (int i = 0; i < NT; i++) {
        h[i] = malloc(sizes[i]);
        CUDA_OK(cudaMalloc(&d[i], sizes[i]));
        fill(h[i], sizes[i], 77 + (uint64_t)i);
        CUDA_OK(cudaMemcpy(d[i], h[i], sizes[i], cudaMemcpyHostToDevice));
        host[i] = (dck_replica_tensor){.name = names[i], .dtype = DCK_U8, .ndim = 1, .shape = {sizes[i]},
                                       .data = h[i], .nbytes = sizes[i], .memory = DCK_MEMORY_HOST};
        dev[i] = host[i];
        dev[i].data = d[i];
        dev[i].memory = DCK_MEMORY_CUDA;
    }
    dck_replica_result a, b, c;
    CHECK(dck_replica_check(host, NT, NULL, &a) == DCK_OK && !a.compared, "replica check, host memory");
    CHECK(dck_replica_check(dev, NT, NULL, &b) == DCK_OK && !b.compared, "replica check, device memory");
    CHECK(dck_digest_equal(a.root, b.root), "replica root: device memory against host memory");
    const dck_nccl_api *nc = NULL;
    ncclUniqueId id;
    ncclComm_t comm = NULL;
    if (dck_nccl_load(&nc) != DCK_OK) {
        skip_part("replica check over NCCL: no NCCL library");
    } else if (nc->ncclGetUniqueId(&id) != ncclSuccess || dck_nccl_init(NULL, nc, &comm, 1, &id, 0) != DCK_OK) {
        /* detcheck's own start-up (non-blocking, waited): the gathers below
         * then run on a non-blocking communicator (ncclInProgress waited) */
        CHECK(0, "an NCCL communicator of one rank (dck_nccl_init)");
    } else {
        dck_replica_options o;
        dck_replica_options_init(&o);
        o.nccl_comm = comm;
        CHECK(dck_replica_check(dev, NT, &o, &c) == DCK_OK && !c.compared && c.nranks == 1,
              "replica check over NCCL");
        CHECK(dck_digest_equal(a.root, c.root), "replica root over NCCL against host memory");
        dck_replica_result_release(&c);
        nc->ncclCommDestroy(comm);
    }
    dck_replica_result_release(&a);
    dck_replica_result_release(&b);
    for (int i = 0; i < NT; i++) {
        free(h[i]);
        CUDA_OK(cudaFree(d[i]));
    }
}

/* ------------------------------------------------------------------ 8 GiB */
static void test_big(void) {
    const size_t n = (size_t)8 << 30;
    uint8_t *h = malloc(n);
    uint8_t *d;
    if (!h || cudaMalloc((void **)&d, n) != cudaSuccess) {
        CHECK(0, "cannot allocate 8 GiB");
        free(h);
        return;
    }
    double t0 = now();
    fill(h, n, 12345);
    CUDA_OK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    const size_t lens[] = {n, n - 77, ((size_t)4 << 30) + 3};
    for (size_t i = 0; i < 3; i++) {
        uint64_t shape = lens[i];
        dck_digest a, b;
        CHECK(dck_gpu_digest(DCK_U8, &shape, 1, d, lens[i], NULL, &a) == DCK_OK, "gpu");
        CHECK(dck_digest_buffer(DCK_U8, &shape, 1, h, lens[i], 0, &b) == DCK_OK, "cpu");
        CHECK(dck_digest_equal(a, b), "%zu bytes", lens[i]);
    }
    /* a fragment that starts just past 4 GiB, inside a segment */
    dck_fragment_partial pg, pc;
    uint64_t off = ((uint64_t)4 << 30) + 3, len = ((uint64_t)1 << 30) + 1000;
    CHECK(dck_gpu_fragment_partial(n, off, d + off, len, NULL, &pg) == DCK_OK, "gpu fragment");
    CHECK(dck_fragment_partial_compute(n, off, h + off, len, &pc) == DCK_OK, "cpu fragment");
    CHECK(pg.lanes.lo == pc.lanes.lo && pg.lanes.hi == pc.lanes.hi &&
              pg.head_len == pc.head_len && pg.tail_len == pc.tail_len,
          "fragment beyond 4 GiB");
    printf("  8 GiB cases in %.1f s\n", now() - t0);
    CUDA_OK(cudaFree(d));
    free(h);
}

int main(int argc, char **argv) {
    int quick = argc > 1 && !strcmp(argv[1], "--quick");
    int n = 0;
    if (dck_gpu_device_count(&n) != DCK_OK) {
        printf("check_cuda: skipped: %s\n", dck_last_error());
        return 77;
    }
    struct cudaDeviceProp prop;
    CUDA_OK(cudaGetDeviceProperties(&prop, 0));
    printf("check_cuda: %d device(s), device 0: %s, %d SMs\n", n, prop.name,
           prop.multiProcessorCount);
    struct {
        const char *name;
        void (*fn)(void);
    } tests[] = {{"every dtype", test_every_dtype},
                 {"every length 0..1 MiB", test_every_length},
                 {"random fragment offsets", test_fragments},
                 {"API misuse, managed memory, streams", test_misuse},
                 {"scratch memory without memory pools", test_no_pools},
                 {"replica check on device memory, over NCCL", test_replica},
                 {"8 GiB tensors", test_big}};
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        if (quick && tests[i].fn == test_big) continue;
        int before = failures, skips_before = parts_skipped;
        double t0 = now();
        tests[i].fn();
        printf("%s %s (%.2f s)\n",
               failures != before ? "FAIL" : parts_skipped != skips_before ? "SKIP" : "ok  ",
               tests[i].name, now() - t0);
    }
    if (parts_skipped && !failures) {
        printf("check_cuda: %d checks, 0 failures, %d part(s) skipped: %s\n", checks,
               parts_skipped, skip_why);
        return 77;
    }
    printf("check_cuda: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}

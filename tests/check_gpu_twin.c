/* The CPU twin of the GPU digest (src/gpu/digest_twin.c, src/gpu/gpu_xxh3.h): the
 * kernels' XXH3 code against libxxhash, the kernel's tiles/staging/funnel
 * shifts against dck_segments_sum, the GPU fragment logic against
 * dck_fragment_partial_compute, and random splits against the CPU digest.
 * Needs no GPU. */
#include "testutil.h"
#include "gpu/cuda_loader.h"
#include "gpu/gpu.h"
#include "hash/hash.h"

#include <xxhash.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint64_t rnd(void) { /* splitmix64: fixed, so failures reproduce */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static void fill(uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)rnd();
}

static const uint64_t seeds[] = {0, 1, 2, 127, 128, 255, 0xffffffffULL, 0x100000000ULL,
                                 0x123456789abcdefULL, 0x8000000000000000ULL, ~0ULL, 8388607};

START_TEST(xxh3_every_length_and_seed) {
    uint8_t buf[128 + 8];
    int checked = 0;
    for (int round = 0; round < 40; round++) {
        fill(buf, sizeof buf);
        for (size_t si = 0; si < sizeof seeds / sizeof seeds[0] + 4; si++) {
            uint64_t seed = si < sizeof seeds / sizeof seeds[0] ? seeds[si] : rnd();
            for (uint32_t len = 0; len <= 128; len++) {
                const uint8_t *p = buf + (round & 7); /* any alignment */
                XXH128_hash_t want = XXH3_128bits_withSeed(p, len, seed);
                uint64_t lo, hi;
                dck_twin_xxh3_128(p, len, seed, &lo, &hi);
                ck_assert_msg(lo == want.low64 && hi == want.high64,
                              "len %u seed %llx: %016llx%016llx, libxxhash %016llx%016llx", len,
                              (unsigned long long)seed, (unsigned long long)hi,
                              (unsigned long long)lo, (unsigned long long)want.high64,
                              (unsigned long long)want.low64);
                checked++;
            }
            XXH128_hash_t want = XXH3_128bits_withSeed(buf, 128, seed);
            uint64_t lo, hi;
            dck_twin_xxh3_128_seg128(buf, seed, &lo, &hi);
            ck_assert(lo == want.low64 && hi == want.high64);
        }
    }
    ck_assert_int_gt(checked, 40 * 129 * 12);
}
END_TEST

/* Constant and structured inputs catch byte-order slips random data might
 * hide less clearly. */
START_TEST(xxh3_structured_inputs) {
    uint8_t buf[128];
    for (int pattern = 0; pattern < 4; pattern++) {
        for (int i = 0; i < 128; i++)
            buf[i] = pattern == 0 ? 0 : pattern == 1 ? 0xff : pattern == 2 ? (uint8_t)i
                                                                            : (uint8_t)(255 - i);
        for (uint32_t len = 0; len <= 128; len++)
            for (uint64_t seed = 0; seed < 300; seed += 37) {
                XXH128_hash_t want = XXH3_128bits_withSeed(buf, len, seed);
                uint64_t lo, hi;
                dck_twin_xxh3_128(buf, len, seed, &lo, &hi);
                ck_assert(lo == want.low64 && hi == want.high64);
            }
    }
}
END_TEST

static void check_segments(size_t len, unsigned mis, uint64_t first, uint32_t nblocks) {
    uint8_t *buf = malloc(len + 16);
    ck_assert_ptr_nonnull(buf);
    fill(buf, len + 16);
    uint8_t *p = buf + mis;
    dck_lanes want = dck_segments_sum(p, len, first);
    dck_lanes got = dck_twin_segments_sum(p, len, first, (uintptr_t)p, nblocks);
    ck_assert_msg(got.lo == want.lo && got.hi == want.hi,
                  "len %zu misalignment %u first %llu blocks %u", len, mis,
                  (unsigned long long)first, nblocks);
    /* a device address with another misalignment than the host copy */
    got = dck_twin_segments_sum(p, len, first, (uintptr_t)0x7f0000000000ULL + 8 - mis, nblocks);
    ck_assert(got.lo == want.lo && got.hi == want.hi);
    free(buf);
}

START_TEST(segments_small_lengths_every_alignment) {
    for (size_t len = 0; len <= 1100; len++)
        check_segments(len, (unsigned)(len % 8), len * 3, 1 + (uint32_t)(len % 5));
}
END_TEST

/* Around tile edges (256 segments = 32 KiB) and segment edges. */
START_TEST(segments_tile_edges) {
    const size_t tile = 256 * 128;
    const size_t bases[] = {tile, 2 * tile, 3 * tile, 7 * tile};
    const long deltas[] = {-129, -128, -127, -1, 0, 1, 127, 128, 129};
    for (size_t b = 0; b < sizeof bases / sizeof bases[0]; b++)
        for (size_t d = 0; d < sizeof deltas / sizeof deltas[0]; d++)
            for (unsigned mis = 0; mis < 8; mis += 3)
                check_segments(bases[b] + (size_t)deltas[d], mis, rnd() >> 20,
                               1 + (uint32_t)(rnd() % 6));
}
END_TEST

/* The twin's grid size never changes the bits. */
START_TEST(segments_any_grid) {
    size_t len = 5 * 256 * 128 + 77;
    uint8_t *p = malloc(len);
    fill(p, len);
    dck_lanes want = dck_segments_sum(p, len, 11);
    for (uint32_t nb = 1; nb <= 9; nb++) {
        dck_lanes got = dck_twin_segments_sum(p, len, 11, (uintptr_t)p, nb);
        ck_assert(got.lo == want.lo && got.hi == want.hi);
    }
    free(p);
}
END_TEST

static void assert_same_partial(const dck_fragment_partial *a, const dck_fragment_partial *b) {
    ck_assert_uint_eq(a->offset, b->offset);
    ck_assert_uint_eq(a->length, b->length);
    ck_assert_uint_eq(a->head_len, b->head_len);
    ck_assert_uint_eq(a->tail_len, b->tail_len);
    ck_assert(a->lanes.lo == b->lanes.lo && a->lanes.hi == b->lanes.hi);
    ck_assert(!memcmp(a->head, b->head, a->head_len));
    ck_assert(!memcmp(a->tail, b->tail, a->tail_len));
}

START_TEST(fragment_partial_random_offsets) {
    for (int round = 0; round < 3000; round++) {
        uint64_t nbytes = 1 + rnd() % (round < 2000 ? 1500 : 80000);
        uint64_t off = rnd() % (nbytes + 1);
        uint64_t len = rnd() % (nbytes - off + 1);
        if (round % 7 == 0) len = nbytes - off; /* fragments that end the tensor */
        uint8_t *p = malloc(len + 8);
        fill(p, len + 8);
        unsigned mis = (unsigned)(rnd() % 8);
        memmove(p + mis, p, len);
        dck_fragment_partial want, got;
        ck_assert_int_eq(dck_fragment_partial_compute(nbytes, off, p + mis, len, &want), DCK_OK);
        ck_assert_int_eq(dck_twin_fragment_partial(nbytes, off, p + mis, len,
                                                   1 + (uint32_t)(rnd() % 4), &got),
                         DCK_OK);
        assert_same_partial(&want, &got);
        free(p);
    }
}
END_TEST

START_TEST(fragment_outside_tensor_is_layout_error) {
    dck_fragment_partial p;
    uint8_t b[4] = {0};
    ck_assert_int_eq(dck_twin_fragment_partial(10, 8, b, 4, 1, &p), DCK_ERR_LAYOUT);
    ck_assert_int_eq(dck_twin_fragment_partial(10, 11, b, 0, 1, &p), DCK_ERR_LAYOUT);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "outside tensor"));
}
END_TEST

/* A tensor cut at random offsets into fragments, each reduced by the twin
 * with its own grid, added in random order: the CPU digest, every dtype. */
START_TEST(random_splits_every_dtype) {
    for (int dt = 0; dt < DCK_DTYPE_COUNT; dt++) {
        for (int round = 0; round < 12; round++) {
            size_t es = dck_dtype_size((dck_dtype)dt);
            uint64_t shape[2] = {1 + rnd() % 97, 1 + rnd() % (round < 6 ? 50 : 700)};
            size_t nbytes = (size_t)(shape[0] * shape[1] * es);
            uint8_t *data = malloc(nbytes);
            fill(data, nbytes);
            dck_digest want, got;
            ck_assert_int_eq(dck_digest_buffer((dck_dtype)dt, shape, 2, data, nbytes, 2, &want),
                             DCK_OK);
            int nfrag = 1 + (int)(rnd() % 7);
            uint64_t cuts[9];
            cuts[0] = 0;
            for (int i = 1; i < nfrag; i++) cuts[i] = rnd() % (nbytes + 1);
            cuts[nfrag] = nbytes;
            /* sort the cuts */
            for (int i = 1; i <= nfrag; i++)
                for (int j = i; j > 0 && cuts[j] < cuts[j - 1]; j--) {
                    uint64_t t = cuts[j];
                    cuts[j] = cuts[j - 1];
                    cuts[j - 1] = t;
                }
            dck_fragment_partial parts[8];
            for (int i = 0; i < nfrag; i++)
                ck_assert_int_eq(dck_twin_fragment_partial(nbytes, cuts[i], data + cuts[i],
                                                           cuts[i + 1] - cuts[i],
                                                           1 + (uint32_t)(rnd() % 3), &parts[i]),
                                 DCK_OK);
            dck_tensor_hasher *h;
            ck_assert_int_eq(dck_tensor_hasher_create((dck_dtype)dt, shape, 2, &h), DCK_OK);
            int order[8];
            for (int i = 0; i < nfrag; i++) order[i] = i;
            for (int i = nfrag - 1; i > 0; i--) {
                int j = (int)(rnd() % (uint64_t)(i + 1)), t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
            for (int i = 0; i < nfrag; i++)
                ck_assert_int_eq(dck_tensor_hasher_add(h, &parts[order[i]]), DCK_OK);
            ck_assert_int_eq(dck_tensor_hasher_final(h, &got), DCK_OK);
            dck_tensor_hasher_free(h);
            ck_assert_msg(dck_digest_equal(got, want), "dtype %s: %s, CPU %s",
                          dck_dtype_name((dck_dtype)dt), tu_hex(got), tu_hex(want));
            free(data);
        }
    }
}
END_TEST

/* The spec's test vectors through the twin kernel. */
START_TEST(spec_vectors_through_twin) {
    uint8_t ramp[1000], b600[600];
    for (int i = 0; i < 1000; i++) ramp[i] = (uint8_t)(i % 251);
    for (int i = 0; i < 600; i++) b600[i] = (uint8_t)(7 * i);
    uint64_t s1000 = 1000, s3x100[2] = {3, 100}, s100x3[2] = {100, 3};
    dck_lanes l = dck_twin_segments_sum(ramp, 1000, 0, 5, 2);
    ck_assert_str_eq(tu_hex(dck_digest_finish(DCK_U8, &s1000, 1, l)),
                     "642d9596ef596a27ca9cfad7d3f6b1b4");
    l = dck_twin_segments_sum(b600, 600, 0, 0, 1);
    ck_assert_str_eq(tu_hex(dck_digest_finish(DCK_BF16, s3x100, 2, l)),
                     "9893219b2312d60802ba1d42976214f1");
    ck_assert_str_eq(tu_hex(dck_digest_finish(DCK_BF16, s100x3, 2, l)),
                     "ab642bd5470f1334c8f136f95dcb72ba");
    float f[4] = {1, 2, 3, 4};
    uint64_t s4 = 4;
    l = dck_twin_segments_sum(f, 16, 0, 3, 1);
    ck_assert_str_eq(tu_hex(dck_digest_finish(DCK_F32, &s4, 1, l)),
                     "2ef28aceb3e398dd66f6ba2696aa9c68");
    uint64_t s0 = 0;
    l = dck_twin_segments_sum(NULL, 0, 0, 0, 1);
    ck_assert_str_eq(tu_hex(dck_digest_finish(DCK_F32, &s0, 1, l)),
                     "a98304e484eb6608b750574f39d22c17");
}
END_TEST

/* Here (CI) there is no GPU, or no CUDA at all: the device API says so and
 * never crashes. On a GPU machine the CUDA suite (tests/gpu) covers it. */
START_TEST(device_api_without_gpu) {
    int n = -1;
    dck_status s = dck_gpu_device_count(&n);
    if (s == DCK_OK) {
        ck_assert_int_gt(n, 0);
        return; /* a GPU is present: tests/gpu/check_cuda covers the rest */
    }
    ck_assert_int_eq(s, DCK_ERR_NODEVICE);
    ck_assert_int_eq(n, 0);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "no CUDA device"));
    uint8_t host[256] = {0};
    uint64_t shape = 256;
    dck_digest d;
    ck_assert_int_ne(dck_gpu_digest(DCK_U8, &shape, 1, host, 256, NULL, &d), DCK_OK);
    dck_lanes l;
    ck_assert_int_ne(dck_gpu_segments_sum(host, 256, 0, NULL, &l), DCK_OK);
    dck_fragment_partial p;
    ck_assert_int_ne(dck_gpu_fragment_partial(256, 3, host, 100, NULL, &p), DCK_OK);
}
END_TEST

/* The CUDA runtime and NCCL are loaded on the first GPU call: a runtime that
 * cannot be loaded is DCK_ERR_NODEVICE with a message naming it, from every
 * entry point, the launchers included (an error, never a crash). Check runs
 * each test in a forked process, so the loader starts fresh here. */
START_TEST(device_api_names_missing_runtime) {
    const char *missing = "libcudart-dck-missing.so.0";
    if (getenv("CK_FORK") && !strcmp(getenv("CK_FORK"), "no"))
        TU_SKIP("CK_FORK=no: the loader's once-per-process state is shared between tests");
    setenv("DETCHECK_CUDART_LIB", missing, 1);
    int n = -1;
    ck_assert_int_eq(dck_gpu_device_count(&n), DCK_ERR_NODEVICE);
    ck_assert_int_eq(n, 0);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "no CUDA device"));
#ifdef DCK_HAVE_CUDA
    ck_assert_msg(strstr(dck_last_error(), missing), "message does not name %s: %s", missing,
                  dck_last_error());
    /* the same answer from a second call and from another entry point */
    ck_assert_int_eq(dck_gpu_device_count(&n), DCK_ERR_NODEVICE);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), missing));
    uint8_t host[256] = {0};
    dck_lanes l;
    ck_assert_int_eq(dck_gpu_segments_sum(host, 256, 0, NULL, &l), DCK_ERR_NODEVICE);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), missing));
    dck_gpu_job *job = NULL;
    ck_assert_int_eq(dck_gpu_job_create(0, 1, 0, &job), DCK_ERR_NODEVICE);
    ck_assert_ptr_null(job);
    uint64_t lanes[2] = {0, 0};
    ck_assert_int_ne(dck_cuda_segments_sum_launch(host, 256, 0, lanes, 0, NULL), 0);
    ck_assert_int_ne(dck_cuda_word_sum_launch(lanes, 2, lanes, 0, NULL), 0);
    /* NCCL: the same, naming its library */
    setenv("DETCHECK_NCCL_LIB", "libnccl-dck-missing.so.2", 1);
    const dck_nccl_api *nccl = NULL;
    ck_assert_int_eq(dck_nccl_load(&nccl), DCK_ERR_NODEVICE);
    ck_assert_ptr_null(nccl);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "libnccl-dck-missing.so.2"));
#else
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "built without CUDA"));
#endif
}
END_TEST

#ifdef DCK_HAVE_CUDA
/* The lanes of dck_gpu_segments_sum_async take 64-bit atomicAdds: a lane
 * pointer that is not 8-byte aligned is refused before the runtime is
 * needed (no GPU here: the answer would otherwise be DCK_ERR_NODEVICE), as
 * on a GPU the misaligned atomic would end the caller's CUDA context. */
START_TEST(misaligned_lanes_refused_before_launch) {
    setenv("DETCHECK_CUDART_LIB", "libcudart-dck-missing.so.0", 1);
    static uint64_t lanes[3];
    static uint8_t data[256];
    for (int off = 1; off < 8; off++) {
        uint64_t *bad = (uint64_t *)((char *)lanes + off);
        ck_assert_int_eq(dck_gpu_segments_sum_async(data, sizeof data, 0, bad, NULL), DCK_ERR_INVALID);
        ck_assert_msg(strstr(dck_last_error(), "not 8-byte aligned"), "%s", dck_last_error());
    }
    /* aligned: past the check, to the missing runtime */
    ck_assert_int_eq(dck_gpu_segments_sum_async(data, sizeof data, 0, lanes, NULL), DCK_ERR_NODEVICE);
}
END_TEST

extern const unsigned char dck_cuda_digest_fatbin[];
/* The kernels travel as a fatbin embedded in the library (the Makefile
 * turns cuda/digest.cu into it), loaded by name: it is there, it is a
 * fatbin, and it holds both kernels under the names the loader asks for. */
START_TEST(embedded_fatbin_holds_the_kernels) {
    const unsigned char *fb = dck_cuda_digest_fatbin;
    uint32_t magic;
    uint16_t header;
    uint64_t body;
    memcpy(&magic, fb, 4);
    memcpy(&header, fb + 6, 2);
    memcpy(&body, fb + 8, 8);
    ck_assert_uint_eq(magic, 0xba55ed50u);
    ck_assert_uint_ge(header, 16);
    ck_assert_uint_gt(body, 1024);
    ck_assert_uint_lt(body, (uint64_t)64 << 20);
    size_t n = (size_t)header + (size_t)body;
    ck_assert_ptr_nonnull(memmem(fb, n, "dck_segments_sum_kernel", 23));
    ck_assert_ptr_nonnull(memmem(fb, n, "dck_word_sum_kernel", 19));
}
END_TEST
#endif

START_TEST(device_names) {
    dck_device d;
    ck_assert_int_eq(dck_device_from_name("cuda", &d), DCK_OK);
    ck_assert_int_eq(d, DCK_DEVICE_CUDA);
    ck_assert_int_eq(dck_device_from_name("auto", &d), DCK_OK);
    ck_assert_int_eq(d, DCK_DEVICE_AUTO);
    ck_assert_int_eq(dck_device_from_name("cpu", &d), DCK_OK);
    ck_assert_str_eq(dck_device_name(d), "cpu");
    ck_assert_int_eq(dck_device_from_name("gpu", &d), DCK_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "'gpu'"));
}
END_TEST

/* The --device cuda pipeline (packing into staging buffers, buffer
 * rotation, parallel fills) run with the twin backend on a real checkpoint:
 * small buffers so that tensors split across buffers and many small tensors
 * share one; the same digests as dck_checkpoint_hash. */
START_TEST(staged_pipeline_twin_matches_cpu_engine) {
    char *dir = tu_tmpdir();
    ck_assert_ptr_nonnull(dir);
    enum { NT = 7 };
    static const uint64_t sizes[NT] = {0, 1, 127, 129, 5000, 20011, 77};
    uint8_t *bufs[NT];
    dck_st_tensor ts[NT + 1];
    memset(ts, 0, sizeof ts);
    char names[NT][32];
    for (int i = 0; i < NT; i++) {
        bufs[i] = malloc(sizes[i] + 1);
        fill(bufs[i], sizes[i]);
        snprintf(names[i], sizeof names[i], "model.layers.%d.w", i);
        ts[i].name = names[i];
        ts[i].dtype = DCK_U8;
        ts[i].ndim = 1;
        ts[i].shape[0] = sizes[i];
        ts[i].data = bufs[i];
    }
    char *p1 = tu_path(dir, "a.safetensors");
    ck_assert_int_eq(dck_safetensors_write(p1, ts, NT, NULL, 0, 0), DCK_OK);
    /* a [10, 333] F32 tensor sharded by columns over two files */
    float *g = malloc(10 * 333 * sizeof *g), *left = malloc(10 * 100 * sizeof *g),
          *right = malloc(10 * 233 * sizeof *g);
    fill((uint8_t *)g, 10 * 333 * sizeof *g);
    for (int r = 0; r < 10; r++) {
        memcpy(left + r * 100, g + r * 333, 100 * sizeof *g);
        memcpy(right + r * 233, g + r * 333 + 100, 233 * sizeof *g);
    }
    dck_st_tensor sh = {.name = "model.sharded", .dtype = DCK_F32, .ndim = 2, .shape = {10, 100},
                        .data = left, .global_ndim = 2, .global_shape = {10, 333},
                        .offset = {0, 0}};
    char *p2 = tu_path(dir, "s0.safetensors"), *p3 = tu_path(dir, "s1.safetensors");
    ck_assert_int_eq(dck_safetensors_write(p2, &sh, 1, NULL, 0, 0), DCK_OK);
    sh.shape[1] = 233;
    sh.data = right;
    sh.offset[1] = 100;
    ck_assert_int_eq(dck_safetensors_write(p3, &sh, 1, NULL, 0, 0), DCK_OK);

    const char *paths[] = {dir};
    dck_checkpoint *ck;
    ck_assert_int_eq(dck_checkpoint_open(paths, 1, NULL, &ck), DCK_OK);
    dck_manifest *m;
    ck_assert_int_eq(dck_checkpoint_hash(ck, NULL, &m), DCK_OK);
    size_t n = dck_checkpoint_tensor_count(ck);
    ck_assert_uint_eq(n, NT + 1);
    /* each tensor as two ranges cut at a segment boundary */
    dck_lane_range r[2 * (NT + 1)];
    size_t nr = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t nb = dck_checkpoint_tensor(ck, i)->nbytes;
        uint64_t cut = nb > 256 ? (nb / 2) / 128 * 128 : nb;
        if (cut) r[nr++] = (dck_lane_range){i, 0, cut};
        if (nb > cut) r[nr++] = (dck_lane_range){i, cut, nb};
    }
    const size_t bufsz[] = {4096, 1024, 65536};
    const uint64_t tasksz[] = {1024, 128, 4096};
    for (int c = 0; c < 3; c++) {
        uint64_t *tw = calloc(2 * n, sizeof *tw), *cpu = calloc(2 * n, sizeof *cpu);
        ck_assert_int_eq(dck_twin_staged_lanes(ck, r, nr, 2, bufsz[c], tasksz[c], tw), DCK_OK);
        ck_assert_int_eq(dck_cpu_lanes_run(ck, r, nr, 3, cpu), DCK_OK);
        for (size_t i = 0; i < n; i++) {
            const dck_tensor_info *ti = dck_checkpoint_tensor(ck, i);
            ck_assert(tw[2 * i] == cpu[2 * i] && tw[2 * i + 1] == cpu[2 * i + 1]);
            dck_digest d = dck_digest_finish(ti->dtype, ti->shape, ti->ndim,
                                             (dck_lanes){tw[2 * i], tw[2 * i + 1]});
            const dck_manifest_tensor *mt = dck_manifest_find_tensor(m, ti->name);
            ck_assert_ptr_nonnull(mt);
            ck_assert_msg(dck_digest_equal(d, mt->digest), "%s: staged %s, engine %s", ti->name,
                          tu_hex(d), tu_hex(mt->digest));
        }
        free(tw);
        free(cpu);
    }
    ck_assert_int_eq(dck_twin_staged_lanes(ck, r, nr, 1, 1000, 100, NULL), DCK_ERR_INVALID);
    dck_manifest_free(m);
    dck_checkpoint_free(ck);
    for (int i = 0; i < NT; i++) free(bufs[i]);
    free(g);
    free(left);
    free(right);
    free(p1);
    free(p2);
    free(p3);
    tu_tmpdir_free(dir);
}
END_TEST

/* The distributed assignment: K ranges that tile [0, T) in order, sizes
 * within one byte of each other, no overflow for huge T. */
START_TEST(distributed_ranges_tile_the_stream) {
    const uint64_t totals[] = {0, 1, 127, 128, 1000, 38913, 1ULL << 40, ~0ULL - 5};
    for (size_t i = 0; i < sizeof totals / sizeof totals[0]; i++)
        for (int k = 1; k <= 9; k++) {
            uint64_t prev_end = 0, lo = ~0ULL, hi = 0;
            for (int r = 0; r < k; r++) {
                uint64_t b, e;
                dck_distributed_range(totals[i], r, k, &b, &e);
                ck_assert_uint_eq(b, prev_end);
                ck_assert(e >= b);
                if (e - b < lo) lo = e - b;
                if (e - b > hi) hi = e - b;
                prev_end = e;
            }
            ck_assert_uint_eq(prev_end, totals[i]);
            ck_assert(hi - lo <= 1);
        }
}
END_TEST

int main(void) {
    Suite *s = suite_create("gpu_twin");
    TCase *tc = tcase_create("twin");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, xxh3_every_length_and_seed);
    tcase_add_test(tc, xxh3_structured_inputs);
    tcase_add_test(tc, segments_small_lengths_every_alignment);
    tcase_add_test(tc, segments_tile_edges);
    tcase_add_test(tc, segments_any_grid);
    tcase_add_test(tc, fragment_partial_random_offsets);
    tcase_add_test(tc, fragment_outside_tensor_is_layout_error);
    tcase_add_test(tc, random_splits_every_dtype);
    tcase_add_test(tc, spec_vectors_through_twin);
    tcase_add_test(tc, device_api_without_gpu);
    tcase_add_test(tc, device_api_names_missing_runtime);
#ifdef DCK_HAVE_CUDA
    tcase_add_test(tc, embedded_fatbin_holds_the_kernels);
    tcase_add_test(tc, misaligned_lanes_refused_before_launch);
#endif
    tcase_add_test(tc, device_names);
    tcase_add_test(tc, distributed_ranges_tile_the_stream);
    tcase_add_test(tc, staged_pipeline_twin_matches_cpu_engine);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

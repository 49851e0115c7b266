/* Digest v1: the frozen test vectors of the spec, fragments and stitching,
 * and thread-count invariance. */
#include "testutil.h"
#include "formats/formats.h"
#include "hash/hash.h"
#include <stdint.h>
#include <xxhash.h>

static uint8_t *ramp(size_t n, unsigned mul, unsigned mod) {
    uint8_t *b = malloc(n ? n : 1);
    for (size_t i = 0; i < n; i++) b[i] = (uint8_t)((i * mul) % mod);
    return b;
}

static char *digest_of(dck_dtype t, const uint64_t *shape, int nd, const void *d, size_t n) {
    dck_digest out;
    ck_assert_int_eq(dck_digest_buffer(t, shape, nd, d, n, 1, &out), DCK_OK);
    return tu_hex(out);
}

START_TEST(test_vectors) {
    uint64_t s0[] = {0};
    ck_assert_str_eq(digest_of(DCK_F32, s0, 1, NULL, 0), "a98304e484eb6608b750574f39d22c17");
    int64_t m7 = -7;
    ck_assert_str_eq(digest_of(DCK_I64, NULL, 0, &m7, 8), "ec1fcc503dc2b69305ba1f340c2b4bc7");
    float f[] = {1, 2, 3, 4};
    uint64_t s4[] = {4};
    ck_assert_str_eq(digest_of(DCK_F32, s4, 1, f, 16), "2ef28aceb3e398dd66f6ba2696aa9c68");
    uint8_t *u = ramp(1000, 1, 251);
    uint64_t s1000[] = {1000};
    ck_assert_str_eq(digest_of(DCK_U8, s1000, 1, u, 1000), "642d9596ef596a27ca9cfad7d3f6b1b4");
    uint8_t *b = ramp(600, 7, 256);
    uint64_t s3x100[] = {3, 100}, s100x3[] = {100, 3};
    ck_assert_str_eq(digest_of(DCK_BF16, s3x100, 2, b, 600), "9893219b2312d60802ba1d42976214f1");
    ck_assert_str_eq(digest_of(DCK_BF16, s100x3, 2, b, 600), "ab642bd5470f1334c8f136f95dcb72ba");

    /* root over the six, by case name */
    const char *names[] = {"empty", "scalar", "f32_1234", "u8_ramp", "bf16_3x100", "bf16_100x3"};
    dck_digest d[6];
    dck_digest_buffer(DCK_F32, s0, 1, NULL, 0, 1, &d[0]);
    dck_digest_buffer(DCK_I64, NULL, 0, &m7, 8, 1, &d[1]);
    dck_digest_buffer(DCK_F32, s4, 1, f, 16, 1, &d[2]);
    dck_digest_buffer(DCK_U8, s1000, 1, u, 1000, 1, &d[3]);
    dck_digest_buffer(DCK_BF16, s3x100, 2, b, 600, 1, &d[4]);
    dck_digest_buffer(DCK_BF16, s100x3, 2, b, 600, 1, &d[5]);
    ck_assert_str_eq(tu_hex(dck_root_digest(names, d, 6)), "6d2d37c8b26d717de0ce909967e0ef05");
    free(u);
    free(b);
}
END_TEST

START_TEST(test_hex_roundtrip) {
    dck_digest d = {0x0123456789abcdefULL, 0xfedcba9876543210ULL}, e;
    char hex[33];
    dck_digest_to_hex(d, hex);
    ck_assert_str_eq(hex, "0123456789abcdeffedcba9876543210");
    ck_assert_int_eq(dck_digest_from_hex(hex, &e), DCK_OK);
    ck_assert(dck_digest_equal(d, e));
    ck_assert_int_ne(dck_digest_from_hex("0123", &e), DCK_OK);
    ck_assert_int_ne(dck_digest_from_hex("0123456789ABCDEFfedcba9876543210", &e), DCK_OK);
    ck_assert_int_ne(dck_digest_from_hex("0123456789abcdeffedcba987654321g", &e), DCK_OK);
}
END_TEST

/* Any split into fragments, fed in any order, gives the whole-buffer digest. */
START_TEST(test_fragments_any_split) {
    for (size_t n = 0; n < 1200; n += (n < 300 ? 1 : 37)) {
        uint8_t *b = ramp(n, 13, 256);
        uint64_t shape[] = {n};
        dck_digest want, got;
        ck_assert_int_eq(dck_digest_buffer(DCK_U8, shape, 1, b, n, 1, &want), DCK_OK);
        unsigned seed = (unsigned)n * 2654435761u + 1;
        for (int trial = 0; trial < 4; trial++) {
            /* random cut points */
            size_t cuts[10];
            int nc = 0;
            cuts[nc++] = 0;
            for (int k = 0; k < 6 && n; k++) {
                seed = seed * 1103515245u + 12345u;
                cuts[nc++] = (seed >> 8) % (n + 1);
            }
            cuts[nc++] = n;
            for (int x = 0; x < nc; x++)
                for (int y = x + 1; y < nc; y++)
                    if (cuts[y] < cuts[x]) { size_t t = cuts[x]; cuts[x] = cuts[y]; cuts[y] = t; }
            dck_tensor_hasher *h;
            ck_assert_int_eq(dck_tensor_hasher_create(DCK_U8, shape, 1, &h), DCK_OK);
            /* feed in reverse order */
            for (int k = nc - 2; k >= 0; k--)
                ck_assert_int_eq(dck_tensor_hasher_update(h, cuts[k], b + cuts[k], cuts[k + 1] - cuts[k]), DCK_OK);
            ck_assert_int_eq(dck_tensor_hasher_final(h, &got), DCK_OK);
            ck_assert_msg(dck_digest_equal(want, got), "n=%zu trial %d", n, trial);
            dck_tensor_hasher_free(h);
        }
        free(b);
    }
}
END_TEST

START_TEST(test_fragments_overlap_gap) {
    uint8_t *b = ramp(1000, 3, 256);
    uint64_t shape[] = {1000};
    dck_tensor_hasher *h;
    dck_digest d;
    /* gap */
    dck_tensor_hasher_create(DCK_U8, shape, 1, &h);
    dck_tensor_hasher_update(h, 0, b, 500);
    dck_tensor_hasher_update(h, 501, b + 501, 499);
    ck_assert_int_eq(dck_tensor_hasher_final(h, &d), DCK_ERR_LAYOUT);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "missing"));
    dck_tensor_hasher_free(h);
    /* overlap */
    dck_tensor_hasher_create(DCK_U8, shape, 1, &h);
    dck_tensor_hasher_update(h, 0, b, 600);
    dck_tensor_hasher_update(h, 500, b + 500, 500);
    ck_assert_int_eq(dck_tensor_hasher_final(h, &d), DCK_ERR_LAYOUT);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "twice"));
    dck_tensor_hasher_free(h);
    /* out of bounds */
    dck_tensor_hasher_create(DCK_U8, shape, 1, &h);
    ck_assert_int_eq(dck_tensor_hasher_update(h, 900, b, 200), DCK_ERR_LAYOUT);
    dck_tensor_hasher_free(h);
    /* incomplete */
    dck_tensor_hasher_create(DCK_U8, shape, 1, &h);
    dck_tensor_hasher_update(h, 0, b, 999);
    ck_assert_int_eq(dck_tensor_hasher_final(h, &d), DCK_ERR_LAYOUT);
    dck_tensor_hasher_free(h);
    dck_tensor_hasher_free(NULL);
    free(b);
}
END_TEST

START_TEST(test_threads_invariant) {
    size_t n = (size_t)5 * 1024 * 1024 + 77;
    uint8_t *b = ramp(n, 31, 253);
    uint64_t shape[] = {n};
    dck_digest d1, dk;
    ck_assert_int_eq(dck_digest_buffer(DCK_U8, shape, 1, b, n, 1, &d1), DCK_OK);
    for (int t = 2; t <= 8; t++) {
        ck_assert_int_eq(dck_digest_buffer(DCK_U8, shape, 1, b, n, t, &dk), DCK_OK);
        ck_assert(dck_digest_equal(d1, dk));
    }
    /* a flipped bit changes it */
    b[n / 2] ^= 1;
    ck_assert_int_eq(dck_digest_buffer(DCK_U8, shape, 1, b, n, 3, &dk), DCK_OK);
    ck_assert(!dck_digest_equal(d1, dk));
    free(b);
}
END_TEST

START_TEST(test_partial_fields) {
    uint8_t *b = ramp(1000, 5, 256);
    dck_fragment_partial p;
    ck_assert_int_eq(dck_fragment_partial_compute(1000, 100, b + 100, 800, &p), DCK_OK);
    ck_assert_uint_eq(p.head_len, 28);
    ck_assert_uint_eq(p.tail_len, 900 - 896);
    /* fragment reaching the short last segment from its start: whole */
    ck_assert_int_eq(dck_fragment_partial_compute(1000, 896, b + 896, 104, &p), DCK_OK);
    ck_assert_uint_eq(p.head_len, 0);
    ck_assert_uint_eq(p.tail_len, 0);
    dck_lanes l = dck_segments_sum(b + 896, 104, 7);
    ck_assert(p.lanes.lo == l.lo && p.lanes.hi == l.hi);
    ck_assert_int_eq(dck_fragment_partial_compute(1000, 900, b, 200, &p), DCK_ERR_LAYOUT);
    free(b);
}
END_TEST

START_TEST(test_shape_bytes) {
    uint64_t big[] = {UINT64_MAX / 2, 4};
    uint64_t n;
    ck_assert_int_eq(dck_shape_bytes(DCK_F32, big, 2, &n), DCK_ERR_LIMIT);
    uint64_t ok[] = {3, 0, 5};
    ck_assert_int_eq(dck_shape_bytes(DCK_F32, ok, 3, &n), DCK_OK);
    ck_assert_uint_eq(n, 0);
    ck_assert_int_eq(dck_shape_bytes(DCK_F64, NULL, 0, &n), DCK_OK);
    ck_assert_uint_eq(n, 8);
}
END_TEST

START_TEST(test_names_and_groups) {
    ck_assert_int_lt(dck_name_compare("layers.2.w", "layers.10.w"), 0);
    ck_assert_int_gt(dck_name_compare("layers.10.w", "layers.9.w"), 0);
    ck_assert_int_eq(dck_name_compare("a.1", "a.1"), 0);
    ck_assert_int_lt(dck_name_compare("a.1", "a.01"), 0);
    ck_assert_int_lt(dck_name_compare("a", "a.0"), 0);
    ck_assert_int_eq(dck_group_of_name("model.layers.0.mlp.weight"), DCK_GROUP_WEIGHTS);
    ck_assert_int_eq(dck_group_of_name("optimizer.state.3.exp_avg"), DCK_GROUP_OPTIMIZER);
    ck_assert_int_eq(dck_group_of_name("state.3.exp_avg_sq"), DCK_GROUP_OPTIMIZER);
    ck_assert_int_eq(dck_group_of_name("opt.momentum_buffer.1"), DCK_GROUP_OPTIMIZER);
    ck_assert_int_eq(dck_group_of_name("rng_state.0.torch_rng_state"), DCK_GROUP_RNG);
    ck_assert_int_eq(dck_group_of_name("rng.philox_key"), DCK_GROUP_RNG);
    ck_assert_int_eq(dck_group_of_name("cuda_random_state"), DCK_GROUP_RNG);
    ck_assert_int_eq(dck_group_of_name("train.step"), DCK_GROUP_OTHER);
    ck_assert_int_eq(dck_group_of_name("lr_scheduler.last_epoch"), DCK_GROUP_OTHER);
    ck_assert_int_eq(dck_group_of_name("encoder.stepper.weight"), DCK_GROUP_WEIGHTS);
    dck_group g;
    ck_assert_int_eq(dck_group_from_name("rng", &g), DCK_OK);
    ck_assert_int_eq(g, DCK_GROUP_RNG);
    ck_assert_int_ne(dck_group_from_name("bogus", &g), DCK_OK);
}
END_TEST

START_TEST(test_dtypes) {
    dck_dtype t;
    for (int i = 0; i < DCK_DTYPE_COUNT; i++) {
        ck_assert_int_eq(dck_dtype_from_name(dck_dtype_name((dck_dtype)i), &t), DCK_OK);
        ck_assert_int_eq(t, i);
        ck_assert_uint_gt(dck_dtype_size(t), 0);
    }
    ck_assert_int_ne(dck_dtype_from_name("F128", &t), DCK_OK);
    ck_assert_uint_eq(dck_dtype_size(DCK_BF16), 2);
}
END_TEST

/* ------------------------------------------------------------------ the CPU engine
 * dck_checkpoint_hash streams files in 128 MiB windows of cache-sized
 * blocks and batches small files: every digest and whole-file hash must be
 * the definition's, whatever the window edges, batches and threads. */

/* The xxh128 of a file's bytes, read back in pieces. */
static dck_digest file_xxh128(const char *path) {
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    XXH3_state_t *st = XXH3_createState();
    XXH3_128bits_reset(st);
    uint8_t *buf = malloc(1 << 20);
    size_t n;
    while ((n = fread(buf, 1, 1 << 20, f)) > 0) XXH3_128bits_update(st, buf, n);
    fclose(f);
    free(buf);
    XXH128_hash_t h = XXH3_128bits_digest(st);
    XXH3_freeState(st);
    return (dck_digest){h.high64, h.low64};
}

static dck_checkpoint *open_one(const char *path) {
    dck_checkpoint *ck;
    const char *ps[] = {path};
    dck_status s = dck_checkpoint_open(ps, 1, NULL, &ck);
    ck_assert_msg(s == DCK_OK, "%s", dck_last_error());
    return ck;
}

static dck_manifest *hash_with(const char *path, int threads) {
    dck_options o;
    dck_options_init(&o);
    o.threads = threads;
    dck_manifest *m = NULL;
    const char *ps[] = {path};
    dck_status s = dck_hash_paths(ps, 1, &o, &m);
    ck_assert_msg(s == DCK_OK, "%s", dck_last_error());
    return m;
}

/* Tensors that a window edge (128 MiB into the file) cuts inside a segment,
 * a short last segment, an empty tensor. */
START_TEST(engine_window_edges) {
    char *dir = tu_tmpdir();
    char *path = tu_path(dir, "big.safetensors");
    const size_t na = ((size_t)100 << 20) + 5, nb = ((size_t)40 << 20) + 77, nc = 250;
    uint8_t *data = malloc(na + nb + nc * 4);
    ck_assert_ptr_nonnull(data);
    uint64_t x = 88172645463325252ULL;
    for (size_t i = 0; i < na + nb + nc * 4; i += 8) { /* xorshift: cheap, not constant */
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        memcpy(data + i, &x, na + nb + nc * 4 - i < 8 ? na + nb + nc * 4 - i : 8);
    }
    dck_st_tensor t[4] = {
        {.name = "a", .dtype = DCK_U8, .ndim = 1, .shape = {na}, .data = data},
        {.name = "b", .dtype = DCK_U8, .ndim = 1, .shape = {nb}, .data = data + na},
        {.name = "c", .dtype = DCK_F32, .ndim = 1, .shape = {nc}, .data = data + na + nb},
        {.name = "d", .dtype = DCK_U8, .ndim = 1, .shape = {0}, .data = data}};
    ck_assert_int_eq(dck_safetensors_write(path, t, 4, NULL, 0, 0), DCK_OK);
    dck_digest want[4];
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(dck_digest_buffer(t[i].dtype, t[i].shape, 1, t[i].data,
                                           t[i].shape[0] * dck_dtype_size(t[i].dtype), 2, &want[i]),
                         DCK_OK);
    dck_digest fwant = file_xxh128(path);
    for (int threads = 1; threads <= 3; threads += 2) {
        dck_manifest *m = hash_with(path, threads);
        for (int i = 0; i < 4; i++) {
            const dck_manifest_tensor *mt = dck_manifest_find_tensor(m, t[i].name);
            ck_assert_ptr_nonnull(mt);
            ck_assert_msg(dck_digest_equal(mt->digest, want[i]), "tensor %s, %d threads",
                          t[i].name, threads);
        }
        ck_assert(dck_digest_equal(dck_manifest_file_at(m, 0)->xxh128, fwant));
        dck_manifest_free(m);
    }
    /* a rank's share (--distributed): ranges of whole segments of b, one
     * across the window edge, lane sums as the definition's */
    dck_checkpoint *ck = open_one(path);
    size_t bi = 0;
    while (strcmp(ck->tensors[bi].info.name, "b")) bi++;
    const uint64_t cuts[] = {0, 128, (uint64_t)7 << 20, ((uint64_t)31 << 20) + 640, nb};
    for (size_t k = 0; k + 1 < sizeof cuts / sizeof cuts[0]; k++) {
        dck_lane_range r = {bi, cuts[k], cuts[k + 1]};
        uint64_t *lanes = calloc(2 * ck->ntensors, sizeof *lanes);
        unsigned char want_file = (unsigned char)(k == 1);
        dck_digest fh = {0, 0};
        ck_assert_int_eq(dck_cpu_hash_ranges(ck, &r, 1, &want_file, 2, lanes, &fh), DCK_OK);
        dck_lanes l = dck_segments_sum(data + na + cuts[k], cuts[k + 1] - cuts[k], cuts[k] / 128);
        ck_assert_msg(lanes[2 * bi] == l.lo && lanes[2 * bi + 1] == l.hi, "range %zu", k);
        if (want_file) ck_assert(dck_digest_equal(fh, fwant));
        free(lanes);
    }
    dck_checkpoint_free(ck);
    free(data);
    free(path);
    tu_tmpdir_free(dir);
}
END_TEST

/* A directory of many small files (hashed in batches on the pool) with a
 * compressed one among them: each digest and file hash as the definition's,
 * the same manifest for every thread count. */
START_TEST(engine_small_files) {
    char *dir = tu_tmpdir();
    enum { NFILES = 300 };
    uint8_t *buf = malloc(8192);
    for (int i = 0; i < 8192; i++) buf[i] = (uint8_t)(i * 131 + 7);
    dck_digest want[NFILES][2];
    char *paths[NFILES];
    for (int i = 0; i < NFILES; i++) {
        char name[64];
        snprintf(name, sizeof name, "shard-%04d.safetensors", i);
        paths[i] = tu_path(dir, name);
        char n0[32], n1[32];
        snprintf(n0, sizeof n0, "layer.%d.w", i);
        snprintf(n1, sizeof n1, "layer.%d.b", i);
        uint64_t len0 = (uint64_t)(i * 37) % 5000, len1 = (uint64_t)(i % 7) * 129;
        dck_st_tensor t[2] = {
            {.name = n0, .dtype = DCK_U8, .ndim = 1, .shape = {len0}, .data = buf + i % 100},
            {.name = n1, .dtype = DCK_I8, .ndim = 1, .shape = {len1}, .data = buf + 3000}};
        ck_assert_int_eq(dck_safetensors_write(paths[i], t, 2, NULL, 0, i == 150 ? 3 : 0), DCK_OK);
        for (int k = 0; k < 2; k++)
            dck_digest_buffer(t[k].dtype, t[k].shape, 1, t[k].data, t[k].shape[0], 1, &want[i][k]);
    }
    dck_manifest *first = NULL;
    for (int threads = 1; threads <= 4; threads++) {
        dck_manifest *m = hash_with(dir, threads);
        ck_assert_uint_eq(dck_manifest_tensor_count(m), 2 * NFILES);
        ck_assert_uint_eq(dck_manifest_file_count(m), NFILES);
        for (int i = 0; i < NFILES; i++) {
            char n0[32];
            snprintf(n0, sizeof n0, "layer.%d.w", i);
            ck_assert(dck_digest_equal(dck_manifest_find_tensor(m, n0)->digest, want[i][0]));
            snprintf(n0, sizeof n0, "layer.%d.b", i);
            ck_assert(dck_digest_equal(dck_manifest_find_tensor(m, n0)->digest, want[i][1]));
        }
        for (size_t f = 0; f < NFILES; f++) {
            const dck_manifest_file *mf = dck_manifest_file_at(m, f);
            char *p = tu_path(dir, mf->path);
            ck_assert_msg(dck_digest_equal(mf->xxh128, file_xxh128(p)), "file %s", mf->path);
            free(p);
        }
        if (!first) first = m;
        else {
            ck_assert(dck_digest_equal(dck_manifest_root(m), dck_manifest_root(first)));
            dck_manifest_free(m);
        }
    }
    dck_manifest_free(first);
    for (int i = 0; i < NFILES; i++) free(paths[i]);
    free(buf);
    tu_tmpdir_free(dir);
}
END_TEST

/* Files cut short after the checkpoint was opened: the first of them in
 * file order is reported, whatever the threads (files hashed in one batch
 * fail as one after another would), and nothing maps past a file's end. */
START_TEST(engine_truncated_in_batch) {
    char *dir = tu_tmpdir();
    char *paths[6];
    float v[1000];
    for (int i = 0; i < 1000; i++) v[i] = (float)i;
    for (int i = 0; i < 6; i++) {
        char name[32];
        snprintf(name, sizeof name, "p%d.safetensors", i);
        paths[i] = tu_path(dir, name);
        dck_st_tensor t = {.name = name, .dtype = DCK_F32, .ndim = 1, .shape = {1000}, .data = v};
        ck_assert_int_eq(dck_safetensors_write(paths[i], &t, 1, NULL, 0, 0), DCK_OK);
    }
    for (int threads = 1; threads <= 4; threads++) {
        for (int i = 0; i < 6; i++) {
            char name[32];
            snprintf(name, sizeof name, "p%d.safetensors", i);
            dck_st_tensor t = {.name = name, .dtype = DCK_F32, .ndim = 1, .shape = {1000}, .data = v};
            ck_assert_int_eq(dck_safetensors_write(paths[i], &t, 1, NULL, 0, 0), DCK_OK);
        }
        dck_checkpoint *ck = open_one(dir);
        ck_assert_int_eq(truncate(paths[4], 100), 0);
        ck_assert_int_eq(truncate(paths[2], 1000), 0);
        dck_options o;
        dck_options_init(&o);
        o.threads = threads;
        dck_manifest *m = NULL;
        ck_assert_int_eq(dck_checkpoint_hash(ck, &o, &m), DCK_ERR_TRUNCATED);
        ck_assert_ptr_null(m);
        ck_assert_msg(strstr(dck_last_error(), "p2.safetensors: truncated"), "%s", dck_last_error());
        dck_checkpoint_free(ck);
    }
    for (int i = 0; i < 6; i++) free(paths[i]);
    tu_tmpdir_free(dir);
}
END_TEST

int main(void) {
    Suite *s = suite_create("digest");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_vectors);
    tcase_add_test(tc, test_hex_roundtrip);
    tcase_add_test(tc, test_fragments_any_split);
    tcase_add_test(tc, test_fragments_overlap_gap);
    tcase_add_test(tc, test_threads_invariant);
    tcase_add_test(tc, test_partial_fields);
    tcase_add_test(tc, test_shape_bytes);
    tcase_add_test(tc, test_names_and_groups);
    tcase_add_test(tc, test_dtypes);
    suite_add_tcase(s, tc);
    TCase *te = tcase_create("engine");
    tcase_set_timeout(te, 240);
    tcase_add_test(te, engine_window_edges);
    tcase_add_test(te, engine_small_files);
    tcase_add_test(te, engine_truncated_in_batch);
    suite_add_tcase(s, te);
    return tu_run(s);
}

/* Digest v1: the frozen test vectors of the spec, fragments and stitching,
 * and thread-count invariance. */
#include "testutil.h"
#include "formats/formats.h"
#include <stdint.h>

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
    return tu_run(s);
}

/* detcheck diff: element statistics on every dtype's own grid (ULP across
 * zero, subnormals, infinities, NaN payloads, -0 vs +0), tolerances, layer
 * names, and the checkpoint comparison (counts, first index, sharded vs
 * unsharded, missing, mismatches, manifests, thread-count invariance). */
#include "testutil.h"
#include "diff/diff_kernels.h"
#include "formats/formats.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <sys/stat.h>

/* ------------------------------------------------------------------ helpers */

static dck_diff_stats stats_of(dck_dtype t, const void *a, const void *b, size_t n,
                               const dck_diff_tolerance *tol) {
    dck_diff_stats s;
    dck_diff_stats_init(&s);
    dck_diff_elements(t, a, b, n, 0, tol, &s);
    return s;
}

/* One pair of elements given as raw bits. */
static dck_diff_stats pair_bits(dck_dtype t, uint64_t a, uint64_t b) {
    uint8_t x[8], y[8];
    for (int i = 0; i < 8; i++) {
        x[i] = (uint8_t)(a >> (8 * i));
        y[i] = (uint8_t)(b >> (8 * i));
    }
    return stats_of(t, x, y, 1, NULL);
}

static uint64_t ulp_bits(dck_dtype t, uint64_t a, uint64_t b, int *ok) {
    uint8_t x[8], y[8];
    for (int i = 0; i < 8; i++) {
        x[i] = (uint8_t)(a >> (8 * i));
        y[i] = (uint8_t)(b >> (8 * i));
    }
    uint64_t d;
    *ok = dck_ulp_distance(t, x, y, &d);
    return d;
}

static uint64_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static uint64_t f64_bits(double f) {
    uint64_t u;
    memcpy(&u, &f, 8);
    return u;
}

/* ------------------------------------------------------------------ decoding */

START_TEST(test_decode_every_float_dtype) {
    uint8_t b[8];
    /* F16: 1.0, smallest subnormal, largest finite, -2 */
    uint16_t h[] = {0x3c00, 0x0001, 0x7bff, 0xc000, 0x7c00, 0xfc00};
    double hv[] = {1.0, 0x1p-24, 65504.0, -2.0, INFINITY, -INFINITY};
    for (int i = 0; i < 6; i++) {
        memcpy(b, &h[i], 2);
        ck_assert_double_eq(dck_element_to_double(DCK_F16, b), hv[i]);
    }
    memcpy(b, &(uint16_t){0x7e00}, 2);
    ck_assert(isnan(dck_element_to_double(DCK_F16, b)));
    /* BF16 */
    uint16_t bf[] = {0x3f80, 0x3f81, 0x0001, 0x7f7f};
    double bv[] = {1.0, 1.0 + 0x1p-7, 0x1p-133, 0x1.fep127};
    for (int i = 0; i < 4; i++) {
        memcpy(b, &bf[i], 2);
        ck_assert_double_eq(dck_element_to_double(DCK_BF16, b), bv[i]);
    }
    /* F8 E4M3 (fn): 1.0, 1.125, largest 448, smallest subnormal 2^-9, NaN */
    uint8_t e4[] = {0x38, 0x39, 0x7e, 0x01, 0xb8, 0x08};
    double e4v[] = {1.0, 1.125, 448.0, 0x1p-9, -1.0, 0x1p-6};
    for (int i = 0; i < 6; i++) ck_assert_double_eq(dck_element_to_double(DCK_F8_E4M3, &e4[i]), e4v[i]);
    ck_assert(isnan(dck_element_to_double(DCK_F8_E4M3, &(uint8_t){0x7f})));
    ck_assert(isnan(dck_element_to_double(DCK_F8_E4M3, &(uint8_t){0xff})));
    /* F8 E5M2: 1.0, 1.25, largest 57344, subnormal 2^-16, inf, NaN */
    uint8_t e5[] = {0x3c, 0x3d, 0x7b, 0x01, 0x7c};
    double e5v[] = {1.0, 1.25, 57344.0, 0x1p-16, INFINITY};
    for (int i = 0; i < 5; i++) ck_assert_double_eq(dck_element_to_double(DCK_F8_E5M2, &e5[i]), e5v[i]);
    ck_assert(isnan(dck_element_to_double(DCK_F8_E5M2, &(uint8_t){0x7d})));
    /* F32 / F64 / integers */
    float f = -3.5f;
    ck_assert_double_eq(dck_element_to_double(DCK_F32, &f), -3.5);
    double d = 0x1.123456789abcdp-1000;
    ck_assert_double_eq(dck_element_to_double(DCK_F64, &d), d);
    int16_t i16 = -300;
    ck_assert_double_eq(dck_element_to_double(DCK_I16, &i16), -300.0);
    uint32_t u32 = 4000000000u;
    ck_assert_double_eq(dck_element_to_double(DCK_U32, &u32), 4000000000.0);
}
END_TEST

/* ------------------------------------------------------------------ ULP */

START_TEST(test_ulp_f32) {
    int ok;
    ck_assert_uint_eq(ulp_bits(DCK_F32, f32_bits(1.0f), f32_bits(nextafterf(1.0f, 2.0f)), &ok), 1);
    ck_assert(ok);
    /* -0 vs +0: zero distance although the bits differ */
    ck_assert_uint_eq(ulp_bits(DCK_F32, 0x00000000u, 0x80000000u, &ok), 0);
    /* across zero: -smallest subnormal to +smallest subnormal is 2 steps */
    ck_assert_uint_eq(ulp_bits(DCK_F32, 0x80000001u, 0x00000001u, &ok), 2);
    /* subnormal to the smallest normal */
    ck_assert_uint_eq(ulp_bits(DCK_F32, 0x007fffffu, 0x00800000u, &ok), 1);
    /* largest finite to infinity: one step on the grid */
    ck_assert_uint_eq(ulp_bits(DCK_F32, f32_bits(FLT_MAX), f32_bits(INFINITY), &ok), 1);
    /* -inf to +inf: the whole grid */
    ck_assert_uint_eq(ulp_bits(DCK_F32, 0xff800000u, 0x7f800000u, &ok), 2ull * 0x7f800000u);
    /* NaN: no distance */
    ck_assert_uint_eq(ulp_bits(DCK_F32, 0x7fc00000u, f32_bits(1.0f), &ok), 0);
    ck_assert(!ok);
    /* symmetric */
    ck_assert_uint_eq(ulp_bits(DCK_F32, f32_bits(-1.0f), f32_bits(2.0f), &ok),
                      ulp_bits(DCK_F32, f32_bits(2.0f), f32_bits(-1.0f), &ok));
}
END_TEST

START_TEST(test_ulp_f64) {
    int ok;
    ck_assert_uint_eq(ulp_bits(DCK_F64, f64_bits(1.0), f64_bits(nextafter(1.0, 0.0)), &ok), 1);
    ck_assert_uint_eq(ulp_bits(DCK_F64, f64_bits(-DBL_MAX), f64_bits(DBL_MAX), &ok),
                      2ull * 0x7fefffffffffffffull);
    ck_assert_uint_eq(ulp_bits(DCK_F64, 0x8000000000000001ull, 1, &ok), 2);
    ck_assert_uint_eq(ulp_bits(DCK_F64, f64_bits(0.0), f64_bits(-0.0), &ok), 0);
}
END_TEST

START_TEST(test_ulp_small_floats) {
    int ok;
    /* F16 */
    ck_assert_uint_eq(ulp_bits(DCK_F16, 0x3c00, 0x3c03, &ok), 3);
    ck_assert_uint_eq(ulp_bits(DCK_F16, 0x8001, 0x0001, &ok), 2);
    ck_assert_uint_eq(ulp_bits(DCK_F16, 0x7bff, 0x7c00, &ok), 1);
    ck_assert_uint_eq(ulp_bits(DCK_F16, 0x7e00, 0x7e01, &ok), 0);
    ck_assert(!ok);
    /* BF16: 1.0 vs 1.0+2^-7 is one step (not 2^16 F32 steps) */
    ck_assert_uint_eq(ulp_bits(DCK_BF16, 0x3f80, 0x3f81, &ok), 1);
    ck_assert_uint_eq(ulp_bits(DCK_BF16, 0xbf80, 0x3f80, &ok), 2ull * 0x3f80);
    /* E4M3: 448 vs -448, 1 vs 1.125, NaN */
    ck_assert_uint_eq(ulp_bits(DCK_F8_E4M3, 0x7e, 0xfe, &ok), 252);
    ck_assert_uint_eq(ulp_bits(DCK_F8_E4M3, 0x38, 0x39, &ok), 1);
    ck_assert_uint_eq(ulp_bits(DCK_F8_E4M3, 0x7f, 0x7e, &ok), 0);
    ck_assert(!ok);
    /* E5M2: largest finite to inf, across zero */
    ck_assert_uint_eq(ulp_bits(DCK_F8_E5M2, 0x7b, 0x7c, &ok), 1);
    ck_assert(ok);
    ck_assert_uint_eq(ulp_bits(DCK_F8_E5M2, 0x81, 0x01, &ok), 2);
    ck_assert_uint_eq(ulp_bits(DCK_F8_E5M2, 0x7d, 0x7c, &ok), 0);
    ck_assert(!ok);
}
END_TEST

START_TEST(test_ulp_integers) {
    int ok;
    ck_assert_uint_eq(ulp_bits(DCK_I8, 0x80, 0x7f, &ok), 255);
    ck_assert_uint_eq(ulp_bits(DCK_I16, 0xffff, 0x0001, &ok), 2);
    ck_assert_uint_eq(ulp_bits(DCK_I32, 0x80000000u, 0x7fffffffu, &ok), 0xffffffffu);
    ck_assert_uint_eq(ulp_bits(DCK_I64, 0x8000000000000000ull, 0x7fffffffffffffffull, &ok),
                      UINT64_MAX);
    ck_assert_uint_eq(ulp_bits(DCK_U64, 0, UINT64_MAX, &ok), UINT64_MAX);
    ck_assert_uint_eq(ulp_bits(DCK_U8, 200, 3, &ok), 197);
    ck_assert_uint_eq(ulp_bits(DCK_BOOL, 0, 1, &ok), 1);
    ck_assert(ok);
}
END_TEST

/* ------------------------------------------------------------------ statistics */

START_TEST(test_pair_statistics) {
    dck_diff_stats s = pair_bits(DCK_F32, f32_bits(1.0f), f32_bits(1.5f));
    ck_assert_uint_eq(s.diff_count, 1);
    ck_assert_uint_eq(s.beyond_count, 1);
    ck_assert_uint_eq(s.first_flat, 0);
    ck_assert_double_eq(s.max_abs, 0.5);
    ck_assert_double_eq(s.max_rel, 0.5 / 1.5);
    ck_assert_uint_eq(s.max_ulp, 0x400000);
    /* -0 vs +0: differs in bits, zero numeric distance */
    s = pair_bits(DCK_F32, 0, 0x80000000u);
    ck_assert_uint_eq(s.diff_count, 1);
    ck_assert_double_eq(s.max_abs, 0);
    ck_assert_double_eq(s.max_rel, 0);
    ck_assert_uint_eq(s.max_ulp, 0);
    /* identical NaN bits are equal */
    s = pair_bits(DCK_F32, 0x7fc00001u, 0x7fc00001u);
    ck_assert_uint_eq(s.diff_count, 0);
    ck_assert_uint_eq(s.nan_a, 1);
    ck_assert_uint_eq(s.nan_b, 1);
    /* NaN payloads differ: counted, and said so */
    s = pair_bits(DCK_F32, 0x7fc00001u, 0x7fc00002u);
    ck_assert_uint_eq(s.diff_count, 1);
    ck_assert_uint_eq(s.nan_payload, 1);
    ck_assert_uint_eq(s.nan_vs_number, 0);
    ck_assert_uint_eq(s.max_ulp, 0);
    /* sign of a NaN is part of its bits */
    s = pair_bits(DCK_F8_E4M3, 0x7f, 0xff);
    ck_assert_uint_eq(s.nan_payload, 1);
    /* NaN vs number */
    s = pair_bits(DCK_BF16, 0x7fc0, 0x3f80);
    ck_assert_uint_eq(s.nan_vs_number, 1);
    ck_assert_uint_eq(s.nan_a, 1);
    ck_assert_uint_eq(s.nan_b, 0);
    /* infinity vs finite */
    s = pair_bits(DCK_F16, 0x7c00, 0x7bff);
    ck_assert_uint_eq(s.inf_a, 1);
    ck_assert_uint_eq(s.inf_b, 0);
    ck_assert(isinf(s.max_abs));
    ck_assert(isinf(s.max_rel));
    ck_assert_uint_eq(s.max_ulp, 1);
    /* E5M2 across zero: -2^-16 vs 2^-16 */
    s = pair_bits(DCK_F8_E5M2, 0x81, 0x01);
    ck_assert_double_eq(s.max_abs, 0x1p-15);
    ck_assert_double_eq(s.max_rel, 2.0);
    ck_assert_uint_eq(s.max_ulp, 2);
    /* F64 subnormals */
    s = pair_bits(DCK_F64, 1, 3);
    ck_assert_double_eq(s.max_abs, 2 * 0x1p-1074);
    ck_assert_uint_eq(s.max_ulp, 2);
    /* I64 extremes: exact ULP, abs as a double */
    s = pair_bits(DCK_I64, 0x8000000000000000ull, 0x7fffffffffffffffull);
    ck_assert_uint_eq(s.max_ulp, UINT64_MAX);
    ck_assert_double_eq(s.max_abs, 0x1p64);
}
END_TEST


/* Known edits at known indices, for every dtype. */
START_TEST(test_known_edits_every_dtype) {
    const size_t n = 1000;
    const size_t at[] = {17, 18, 500, 999};
    for (int t = 0; t < DCK_DTYPE_COUNT; t++) {
        size_t sz = dck_dtype_size((dck_dtype)t);
        uint8_t *a = calloc(n, sz), *b = calloc(n, sz);
        /* A small positive value everywhere (bits 1 above zero in the low byte
         * for floats and ints alike: the smallest subnormal for floats). */
        for (size_t i = 0; i < n; i++) a[i * sz] = 1;
        memcpy(b, a, n * sz);
        for (size_t k = 0; k < 4; k++) b[at[k] * sz] = 3; /* two steps up */
        dck_diff_stats s = stats_of((dck_dtype)t, a, b, n, NULL);
        ck_assert_msg(s.diff_count == 4, "%s: diff_count %llu", dck_dtype_name((dck_dtype)t),
                      (unsigned long long)s.diff_count);
        ck_assert_uint_eq(s.first_flat, 17);
        /* complex: each element is two parts, counted as such (first_flat is an element's) */
        ck_assert_uint_eq(s.count, t == DCK_C64 || t == DCK_C128 ? 2 * n : n);
        ck_assert_msg(s.max_ulp == 2, "%s: max_ulp %llu", dck_dtype_name((dck_dtype)t),
                      (unsigned long long)s.max_ulp);
        double one = dck_element_to_double((dck_dtype)t, a);
        ck_assert_double_eq(s.max_abs, 2 * one);
        ck_assert_double_eq(s.max_rel, 2.0 / 3.0);
        ck_assert_uint_eq(s.nan_a + s.nan_b + s.inf_a + s.inf_b, 0);
        /* within --ulp 2, not within --ulp 1 */
        dck_diff_tolerance tol;
        dck_diff_tolerance_init(&tol);
        tol.ulp = 2;
        ck_assert_uint_eq(stats_of((dck_dtype)t, a, b, n, &tol).beyond_count, 0);
        tol.ulp = 1;
        ck_assert_uint_eq(stats_of((dck_dtype)t, a, b, n, &tol).beyond_count, 4);
        /* with the start offset, first_flat is global */
        dck_diff_stats g;
        dck_diff_stats_init(&g);
        dck_diff_elements((dck_dtype)t, a + 100 * sz, b + 100 * sz, n - 100, 100, NULL, &g);
        ck_assert_uint_eq(g.first_flat, 500);
        ck_assert_uint_eq(g.diff_count, 2);
        free(a);
        free(b);
    }
}
END_TEST

START_TEST(test_tolerances) {
    float a[] = {1.0f, 100.0f, 0.0f, INFINITY, NAN, 1e-30f};
    float b[] = {1.001f, 100.01f, -0.0f, FLT_MAX, NAN, -1e-30f};
    uint32_t nan2 = 0x7fc00002u;
    memcpy(&b[4], &nan2, 4);
    dck_diff_tolerance tol;
    dck_diff_tolerance_init(&tol);
    ck_assert(!dck_diff_tolerance_given(&tol));
    dck_diff_stats s = stats_of(DCK_F32, a, b, 6, &tol);
    ck_assert_uint_eq(s.diff_count, 6);
    ck_assert_uint_eq(s.beyond_count, 6);
    /* atol 0.002: elements 0, 2, 5 within; 1 not (0.01); inf and NaN never */
    tol.atol = 0.002;
    ck_assert(dck_diff_tolerance_given(&tol));
    s = stats_of(DCK_F32, a, b, 6, &tol);
    ck_assert_uint_eq(s.beyond_count, 3);
    /* rtol 2e-4 alone: 0.01 <= 2e-4 * 100.01 and 0.001 > 2e-4*1.001 */
    tol.atol = -1;
    tol.rtol = 2e-4;
    s = stats_of(DCK_F32, a, b, 6, &tol);
    ck_assert_uint_eq(s.beyond_count, 4); /* 0 (0.001 > 2e-4), 3, 4, 5 (rel 2) */
    /* atol + rtol together (numpy style sum) */
    tol.atol = 0.002;
    s = stats_of(DCK_F32, a, b, 6, &tol);
    ck_assert_uint_eq(s.beyond_count, 2); /* only inf and NaN */
    /* ulp alone: -0 vs 0 is 0 ULP; 1e-30 vs -1e-30 is a huge ULP distance */
    dck_diff_tolerance_init(&tol);
    tol.ulp = 10;
    s = stats_of(DCK_F32, a, b, 6, &tol);
    ck_assert_uint_eq(s.beyond_count, 5); /* only -0 vs 0 within */
    /* ulp OR atol: near zero atol saves 1e-30 */
    tol.atol = 1e-20;
    s = stats_of(DCK_F32, a, b, 6, &tol);
    ck_assert_uint_eq(s.beyond_count, 4);
    /* inf vs FLT_MAX is 1 ULP but never within a tolerance */
    dck_diff_tolerance_init(&tol);
    tol.ulp = 1000000;
    s = stats_of(DCK_F32, &a[3], &b[3], 1, &tol);
    ck_assert_uint_eq(s.max_ulp, 1);
    ck_assert_uint_eq(s.beyond_count, 1);
}
END_TEST

START_TEST(test_rel_l2_and_merge) {
    float a[] = {3, 4, 0, 0};
    float b[] = {0, 0, 0, 0};
    dck_diff_stats s = stats_of(DCK_F32, a, b, 4, NULL);
    ck_assert_double_eq(dck_diff_rel_l2(&s), 1.0);
    s = stats_of(DCK_F32, a, a, 4, NULL);
    ck_assert_double_eq(dck_diff_rel_l2(&s), 0.0);
    float c[] = {3, 4, 0, 0}, d[] = {3, 4, 0, 1};
    s = stats_of(DCK_F32, c, d, 4, NULL);
    ck_assert_double_eq(dck_diff_rel_l2(&s), sqrt(1.0 / 26.0));
    /* merging parts in order gives the whole's counts, maxima and first index */
    enum { N = 257 };
    double x[N], y[N];
    for (int i = 0; i < N; i++) {
        x[i] = sin(i);
        y[i] = (i % 37 == 5) ? x[i] * (1 + 1e-9 * i) : x[i];
    }
    dck_diff_stats whole = stats_of(DCK_F64, x, y, N, NULL);
    for (int cut = 1; cut < N; cut += 31) {
        dck_diff_stats p1, p2;
        dck_diff_stats_init(&p1);
        dck_diff_stats_init(&p2);
        dck_diff_elements(DCK_F64, x, y, (size_t)cut, 0, NULL, &p1);
        dck_diff_elements(DCK_F64, x + cut, y + cut, (size_t)(N - cut), (uint64_t)cut, NULL, &p2);
        dck_diff_stats_merge(&p1, &p2);
        ck_assert_uint_eq(p1.diff_count, whole.diff_count);
        ck_assert_uint_eq(p1.first_flat, whole.first_flat);
        ck_assert_uint_eq(p1.max_ulp, whole.max_ulp);
        ck_assert_double_eq(p1.max_abs, whole.max_abs);
        ck_assert_double_eq(p1.max_rel, whole.max_rel);
        ck_assert_uint_eq(p1.count, N);
    }
    ck_assert_uint_eq(whole.first_flat, 5);
    ck_assert_uint_eq(whole.diff_count, 7);
}
END_TEST

/* ------------------------------------------------------------------ vector kernels */

static uint64_t kt_rng = 0x243f6a8885a308d3ull;
static uint64_t kt_next(void) {
    uint64_t x = kt_rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return kt_rng = x;
}

/* The exponent mask of a float dtype (E4M3: exponent 1111; 0x7f is NaN). */
static uint64_t kt_exp_mask(dck_dtype t) {
    return t == DCK_F64 ? 0x7ff0000000000000ull : t == DCK_F32 ? 0x7f800000u : t == DCK_F16 ? 0x7c00u
           : t == DCK_BF16 ? 0x7f80u : t == DCK_F8_E5M2 ? 0x7cu : 0x78u;
}

/* Bits of a special value of a float dtype: +-0, +-inf, NaNs of several
 * payloads and signs, the largest finite, the smallest subnormal. */
static uint64_t kt_special(dck_dtype t) {
    size_t sz = dck_dtype_size(t);
    uint64_t sign = 1ull << (8 * sz - 1), all = sz == 8 ? ~0ull : (1ull << (8 * sz)) - 1;
    uint64_t e = kt_exp_mask(t);
    uint64_t r = kt_next();
    uint64_t s = (r >> 8) & 1 ? sign : 0;
    switch (r % 7) {
    case 0: return s;                                         /* +-0 */
    case 1: return t == DCK_F8_E4M3 ? (s | 0x7f) : (s | e);  /* inf (E4M3: NaN) */
    case 2: return s | (t == DCK_F8_E4M3 ? 0x7f : e | 1);    /* NaN */
    case 3: return s | (t == DCK_F8_E4M3 ? 0x7f : (e | ((r >> 16) & (sign - 1) & ~e)) | 1);
    case 4: return s | (e - 1 - (t == DCK_F8_E4M3 ? 1 : 0)) | (t == DCK_F8_E4M3 ? 0 : 0); /* near max */
    case 5: return s | 1;                                    /* smallest subnormal */
    default: return kt_next() & all;                         /* any bits */
    }
}

/* A weight-like element: small, finite, either sign (random mantissa). */
static uint64_t kt_weight(dck_dtype t) {
    uint64_t r = kt_next();
    switch (t) {
    case DCK_F64: return (r & 0x800fffffffffffffull) | (uint64_t)(1000 + (r >> 52) % 30) << 52;
    case DCK_F32: return (r & 0x807fffffu) | (uint32_t)(110 + (r >> 40) % 20) << 23;
    case DCK_BF16: return (r & 0x807fu) | (uint32_t)(110 + (r >> 40) % 20) << 7;
    case DCK_F16: return (r & 0x83ffu) | (uint32_t)(1 + (r >> 40) % 29) << 10;
    case DCK_F8_E5M2: return (r & 0x83u) | (uint32_t)(1 + (r >> 40) % 29) << 2;
    case DCK_F8_E4M3: return (r & 0x87u) | (uint32_t)(1 + (r >> 40) % 14) << 3;
    default: return r;
    }
}

static void kt_store(uint8_t *p, size_t sz, uint64_t v) {
    for (size_t k = 0; k < sz; k++) p[k] = (uint8_t)(v >> (8 * k));
}

/* Sign changes (dck_diff_stats.sign_changes) and the ULP distance of the
 * other pairs (max_ulp_same_sign), in every kernel: a value and its negation
 * (8.4e-06 against -8.4e-06: ~2^31 float32 ULPs) and +inf against -inf are
 * sign changes; +0 against -0, a zero against a number and a NaN are not.
 * Pairs sit in a block of finite numbers (the kernels' fast path) and in a
 * block with NaN and infinity (the general one). */
START_TEST(test_sign_changes) {
    const dck_dtype types[] = {DCK_F32, DCK_BF16, DCK_F16, DCK_F64, DCK_F8_E5M2, DCK_F8_E4M3};
    enum { N = 1000 };
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        dck_dtype t = types[ti];
        size_t sz = dck_dtype_size(t);
        uint64_t S = 1ull << (8 * sz - 1), E = kt_exp_mask(t), m = (E >> 1) & E; /* about 1.0 */
        uint64_t nan = t == DCK_F8_E4M3 ? 0x7f : E | 1, inf = t == DCK_F8_E4M3 ? 0 : E;
        uint8_t a[N * 8], b[N * 8];
        for (int zero_vs_number = 0; zero_vs_number < 2; zero_vs_number++) {
            for (size_t i = 0; i < N; i++) {
                kt_store(a + i * sz, sz, m + i % 7);
                kt_store(b + i * sz, sz, m + i % 7);
            }
            kt_store(a + 10 * sz, sz, m);                /* sign change: 2m ULPs */
            kt_store(b + 10 * sz, sz, S | m);
            kt_store(a + 11 * sz, sz, S | (m + 5));      /* same sign: 3 ULPs */
            kt_store(b + 11 * sz, sz, S | (m + 2));
            kt_store(a + 12 * sz, sz, 0);                /* +0 against -0 */
            kt_store(b + 12 * sz, sz, S);
            kt_store(a + 601 * sz, sz, nan);             /* NaN against a number */
            kt_store(b + 601 * sz, sz, S | m);
            if (inf) {
                kt_store(a + 600 * sz, sz, inf);         /* +inf against -inf */
                kt_store(b + 600 * sz, sz, S | inf);
            }
            if (zero_vs_number) {
                kt_store(a + 13 * sz, sz, 0);            /* a zero against a number: m ULPs */
                kt_store(b + 13 * sz, sz, S | m);
            }
            for (int isa = 0; isa < DCK_DIFF_ISA_COUNT; isa++) {
                if (!dck_diff_isa_available((dck_diff_isa)isa)) continue;
                dck_diff_stats st;
                dck_diff_stats_init(&st);
                dck_diff_elements_isa((dck_diff_isa)isa, t, a, b, N, 0, NULL, &st);
                const char *what = dck_diff_isa_name((dck_diff_isa)isa);
                ck_assert_msg(st.sign_changes == 1 + (inf != 0), "%s %s: sign_changes %llu", what,
                              dck_dtype_name(t), (unsigned long long)st.sign_changes);
                uint64_t same = zero_vs_number ? m : 3;
                ck_assert_msg(st.max_ulp_same_sign == same, "%s %s: max_ulp_same_sign %llu, want %llu", what,
                              dck_dtype_name(t), (unsigned long long)st.max_ulp_same_sign,
                              (unsigned long long)same);
                ck_assert_uint_eq(st.max_ulp, inf ? 2 * inf : 2 * m);
            }
        }
    }
    /* signed integers: -3 against 2 is a sign change, 0 against -5 is not;
     * unsigned: never */
    int32_t ia[4] = {-3, 0, 7, 1}, ib[4] = {2, -5, 7, 4};
    dck_diff_stats st = stats_of(DCK_I32, ia, ib, 4, NULL);
    ck_assert_uint_eq(st.sign_changes, 1);
    ck_assert_uint_eq(st.max_ulp, 5);
    ck_assert_uint_eq(st.max_ulp_same_sign, 5);
    uint32_t ua[2] = {0x80000000u, 1}, ub[2] = {1, 3};
    st = stats_of(DCK_U32, ua, ub, 2, NULL);
    ck_assert_uint_eq(st.sign_changes, 0);
    ck_assert_uint_eq(st.max_ulp_same_sign, st.max_ulp);
    /* merged in chunk order: counts add, maxima stay maxima */
    dck_diff_stats p1 = pair_bits(DCK_F32, f32_bits(8.4e-06f), f32_bits(-8.4e-06f));
    dck_diff_stats p2 = pair_bits(DCK_F32, f32_bits(1.0f), f32_bits(1.5f));
    ck_assert_uint_eq(p1.sign_changes, 1);
    ck_assert_uint_eq(p1.max_ulp_same_sign, 0);
    ck_assert_uint_eq(p1.max_ulp, 2 * (uint64_t)f32_bits(8.4e-06f));
    dck_diff_stats_merge(&p1, &p2);
    ck_assert_uint_eq(p1.sign_changes, 1);
    ck_assert_uint_eq(p1.max_ulp_same_sign, 0x400000);
}
END_TEST

/* Pairs of several kinds: every element differs by a few ULP or at random;
 * a few differ; special values in some blocks only; all random bits (most
 * NaN and infinity); -0 against +0. */
static void kt_fill(dck_dtype t, int kind, uint8_t *a, uint8_t *b, size_t n) {
    size_t sz = dck_dtype_size(t);
    for (size_t i = 0; i < n; i++) {
        uint64_t x = kt_weight(t), y = x;
        int block_special = ((i / 256) % 3) == 1;
        switch (kind) {
        case 0: y = kt_next() % 3 ? x + 1 + kt_next() % 3 : kt_weight(t); break;
        case 1: y = kt_next() % 97 == 0 ? x ^ 1 : x; break;
        case 2:
            if (block_special && kt_next() % 5 == 0) x = kt_special(t);
            y = kt_next() % 4 == 0 ? (block_special ? kt_special(t) : x) : x + 1;
            break;
        case 3:
            x = kt_next();
            y = kt_next() % 3 ? kt_next() : x;
            break;
        default:
            x = kt_next() & 1 ? (1ull << (8 * sz - 1)) : 0;
            y = kt_next() % 2 ? x ^ (1ull << (8 * sz - 1)) : x;
            break;
        }
        kt_store(a + i * sz, sz, x);
        kt_store(b + i * sz, sz, y);
    }
}

static void kt_assert_same(const dck_diff_stats *want, const dck_diff_stats *got, const char *what) {
    ck_assert_msg(memcmp(want, got, sizeof *want) == 0,
                  "%s: count %llu/%llu diff %llu/%llu beyond %llu/%llu first %llu/%llu "
                  "max_abs %a/%a max_rel %a/%a max_ulp %llu/%llu nan %llu/%llu %llu/%llu "
                  "inf %llu/%llu %llu/%llu vs %llu/%llu payload %llu/%llu "
                  "sums %a/%a %a/%a %a/%a sign changes %llu/%llu same-sign ulp %llu/%llu",
                  what, (unsigned long long)want->count, (unsigned long long)got->count,
                  (unsigned long long)want->diff_count, (unsigned long long)got->diff_count,
                  (unsigned long long)want->beyond_count, (unsigned long long)got->beyond_count,
                  (unsigned long long)want->first_flat, (unsigned long long)got->first_flat,
                  want->max_abs, got->max_abs, want->max_rel, got->max_rel,
                  (unsigned long long)want->max_ulp, (unsigned long long)got->max_ulp,
                  (unsigned long long)want->nan_a, (unsigned long long)got->nan_a,
                  (unsigned long long)want->nan_b, (unsigned long long)got->nan_b,
                  (unsigned long long)want->inf_a, (unsigned long long)got->inf_a,
                  (unsigned long long)want->inf_b, (unsigned long long)got->inf_b,
                  (unsigned long long)want->nan_vs_number, (unsigned long long)got->nan_vs_number,
                  (unsigned long long)want->nan_payload, (unsigned long long)got->nan_payload,
                  want->sum_sq_diff, got->sum_sq_diff, want->sum_sq_a, got->sum_sq_a,
                  want->sum_sq_b, got->sum_sq_b, (unsigned long long)want->sign_changes,
                  (unsigned long long)got->sign_changes, (unsigned long long)want->max_ulp_same_sign,
                  (unsigned long long)got->max_ulp_same_sign);
}

/* Every vector kernel this machine runs gives the reference's bits: every
 * float dtype, lengths around the vector and block sizes, every kind of
 * pair, with and without tolerances, from a fresh and from a carried
 * accumulator. */
START_TEST(test_kernels_match_reference) {
    const dck_dtype types[] = {DCK_F32, DCK_BF16, DCK_F16, DCK_F64, DCK_F8_E5M2, DCK_F8_E4M3, DCK_I32};
    const size_t lens[] = {0, 1, 3, 4, 7, 8, 9, 31, 255, 256, 257, 1000, 4099};
    int isas = 0;
    for (int isa = DCK_DIFF_ISA_SCALAR + 1; isa < DCK_DIFF_ISA_COUNT; isa++) {
        if (!dck_diff_isa_available((dck_diff_isa)isa)) continue;
        isas++;
        for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
            dck_dtype t = types[ti];
            size_t sz = dck_dtype_size(t);
            for (int kind = 0; kind < 5; kind++) {
                for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
                    size_t n = lens[li];
                    uint8_t *a = malloc(n * sz + 1), *b = malloc(n * sz + 1);
                    ck_assert(a && b);
                    kt_fill(t, kind, a, b, n);
                    for (int tk = 0; tk < 5; tk++) {
                        dck_diff_tolerance tol;
                        dck_diff_tolerance_init(&tol);
                        if (tk == 1) tol.atol = 1e-3;
                        if (tk == 2) tol.rtol = 0.25;
                        if (tk == 3) tol.ulp = 2;
                        if (tk == 4) {
                            tol.atol = 0;
                            tol.rtol = 1e-2;
                            tol.ulp = 4000000000.0;
                        }
                        const dck_diff_tolerance *tp = tk ? &tol : NULL;
                        for (int carried = 0; carried < 2; carried++) {
                            dck_diff_stats want, got;
                            dck_diff_stats_init(&want);
                            if (carried) {
                                /* an accumulator that already holds earlier elements */
                                want.sum_sq_diff = 0.1;
                                want.sum_sq_a = 3.5;
                                want.sum_sq_b = 1e-300;
                                want.first_flat = 3;
                                want.max_abs = 1e-7;
                                want.max_ulp = 2;
                                want.max_ulp_same_sign = 2;
                                want.sign_changes = 5;
                                want.count = 11;
                            }
                            got = want;
                            dck_diff_elements_isa(DCK_DIFF_ISA_SCALAR, t, a, b, n, 1000, tp, &want);
                            dck_diff_elements_isa((dck_diff_isa)isa, t, a, b, n, 1000, tp, &got);
                            char what[160];
                            snprintf(what, sizeof what, "%s %s kind %d n %zu tol %d carried %d",
                                     dck_diff_isa_name((dck_diff_isa)isa), dck_dtype_name(t), kind,
                                     n, tk, carried);
                            kt_assert_same(&want, &got, what);
                        }
                    }
                    /* an equal run: the four-lane sum and the NaN/Inf counts */
                    dck_diff_stats want, got;
                    dck_diff_stats_init(&want);
                    dck_diff_stats_init(&got);
                    dck_diff_equal_isa(DCK_DIFF_ISA_SCALAR, t, a, n, &want);
                    dck_diff_equal_isa((dck_diff_isa)isa, t, a, n, &got);
                    char what[160];
                    snprintf(what, sizeof what, "equal run: %s %s kind %d n %zu",
                             dck_diff_isa_name((dck_diff_isa)isa), dck_dtype_name(t), kind, n);
                    kt_assert_same(&want, &got, what);
                    free(a);
                    free(b);
                }
            }
        }
    }
    /* the public entry point runs the best kernel */
    ck_assert(dck_diff_isa_available(dck_diff_isa_best()));
    if (!isas) TU_SKIP("no vector diff kernel runs on this machine (x86-64 with AVX2 needed)");
}
END_TEST

/* The largest relative difference, whose quotients the kernels compute only
 * where one may beat the running maximum: pairs of finite numbers a few
 * ULPs apart, so that many quotients tie or nearly tie after rounding, with
 * the distance growing along the run (every step then holds a new maximum),
 * among subnormals, and quotients rising in the smallest steps the dtype
 * has in one vector lane (where the other lanes never trigger a divide); every narrow float dtype, both signs. */
START_TEST(test_kernel_max_rel_near_ties) {
    static const struct {
        dck_dtype t;
        uint32_t inf, mant; /* first non-finite magnitude, first normal one */
    } types[] = {{DCK_F32, 0x7f800000u, 0x800000u}, {DCK_BF16, 0x7f80u, 0x80u},
                 {DCK_F16, 0x7c00u, 0x400u},         {DCK_F8_E5M2, 0x7cu, 0x4u},
                 {DCK_F8_E4M3, 0x7eu, 0x8u}};
    enum { N = 4099 };
    static uint8_t a[N * 4], b[N * 4];
    for (int isa = DCK_DIFF_ISA_SCALAR + 1; isa < DCK_DIFF_ISA_COUNT; isa++) {
        if (!dck_diff_isa_available((dck_diff_isa)isa)) continue;
        for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
            dck_dtype t = types[ti].t;
            size_t sz = dck_dtype_size(t);
            uint64_t sign = 1ull << (8 * sz - 1);
            for (int mode = 0; mode < 5; mode++) {
                for (size_t i = 0; i < N; i++) {
                    uint64_t span = mode == 3 ? types[ti].mant : types[ti].inf - 8;
                    uint64_t x = kt_next() % span, d;
                    /* mode 4: one exponent, mantissas falling along the run, one ULP
                     * apart: each quotient beats the last by the least it can */
                    if (mode == 4) {
                        /* up to the middle of the run, then down again */
                        uint64_t k = (i < N / 2 ? i : N - 1 - i) / 4, m = types[ti].mant;
                        x = m * 2 - 2 - (k < m - 2 ? k : m - 2);
                    }
                    if (mode == 0) d = kt_next() % 4;
                    else if (mode == 1) d = 1;
                    else if (mode == 4) d = i % 4 == 1; /* one vector lane only */
                    else d = 1 + i / 512;
                    uint64_t y = x + d < types[ti].inf ? x + d : x;
                    uint64_t sg = kt_next() & 1 ? sign : 0;
                    if (kt_next() % 2) {
                        uint64_t tmp = x;
                        x = y;
                        y = tmp;
                    }
                    kt_store(a + i * sz, sz, x | sg);
                    kt_store(b + i * sz, sz, y | sg);
                }
                dck_diff_stats want, got;
                dck_diff_stats_init(&want);
                dck_diff_stats_init(&got);
                dck_diff_elements_isa(DCK_DIFF_ISA_SCALAR, t, a, b, N, 0, NULL, &want);
                dck_diff_elements_isa((dck_diff_isa)isa, t, a, b, N, 0, NULL, &got);
                char what[120];
                snprintf(what, sizeof what, "max rel: %s %s mode %d",
                         dck_diff_isa_name((dck_diff_isa)isa), dck_dtype_name(t), mode);
                kt_assert_same(&want, &got, what);
            }
        }
    }
}
END_TEST

/* Sums of squares in element order, whatever the kernel: known values whose
 * order-dependent rounding shows (a large square first, then many that are
 * each below half its ULP: added one at a time they vanish, pairwise they
 * would not). */
START_TEST(test_kernel_sums_in_element_order) {
    enum { N = 1027 };
    static double a[N], b[N];
    a[0] = 1.0;
    b[0] = 0.0;
    for (int i = 1; i < N; i++) {
        a[i] = 0x1p-27; /* square 2^-54: half an ULP of 1.0, lost one at a time */
        b[i] = 0.0;
    }
    dck_diff_stats s;
    dck_diff_stats_init(&s);
    dck_diff_elements(DCK_F64, a, b, N, 0, NULL, &s);
    ck_assert_msg(s.sum_sq_a == 1.0, "sum_sq_a %a: not added in element order", s.sum_sq_a);
    ck_assert_msg(s.sum_sq_diff == 1.0, "sum_sq_diff %a", s.sum_sq_diff);
    ck_assert(s.sum_sq_b == 0.0 && !signbit(s.sum_sq_b));
    ck_assert_uint_eq(s.diff_count, N);
    /* the other order: the small ones first add up, then count */
    a[0] = 0x1p-27;
    a[N - 1] = 1.0;
    dck_diff_stats_init(&s);
    dck_diff_elements(DCK_F64, a, b, N, 0, NULL, &s);
    ck_assert_msg(s.sum_sq_a > 1.0, "sum_sq_a %a", s.sum_sq_a);
}
END_TEST

START_TEST(test_layer_names) {
    struct {
        const char *name, *layer;
    } cases[] = {
        {"model.layers.12.mlp.weight", "layers.12"},
        {"transformer.h.3.attn.c_attn.weight", "h.3"},
        {"optimizer.state.model.layers.12.mlp.weight.exp_avg", "layers.12"},
        {"0.weight", "0"},
        {"optimizer.state.3.exp_avg", NULL},
        {"optimizer.param_groups.0.lr", NULL},
        {"optimizer.param_state.12.step", NULL}, /* Megatron-Core: a parameter index */
        {"optimizer.state.7.model.layers.2.w", "layers.2"},
        {"encoder/block/7/kernel", "block/7"},
        {"model.embed_tokens.weight", NULL},
        {"lm_head.weight", NULL},
        {"layer3x.weight", NULL},
        /* Megatron-Core ShardedObjects: a grid position, never a layer */
        {"rng_state/shard_0.1_1.2.0.cuda_rng_state", NULL},
        {"decoder.layers.mlp.linear_fc1._extra_state/shard_1_2", NULL},
        {"model.layers.3.rng_state/shard_0_2.0.x", "layers.3"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *l = dck_layer_of_name(cases[i].name);
        if (cases[i].layer) {
            ck_assert_ptr_nonnull(l);
            ck_assert_str_eq(l, cases[i].layer);
        } else {
            ck_assert_ptr_null(l);
        }
        free(l);
    }
    ck_assert_str_eq(dck_diff_status_name(DCK_DIFF_WITHIN_TOLERANCE), "within_tolerance");
    ck_assert_str_eq(dck_diff_status_name(DCK_DIFF_MISSING_IN_A), "missing_in_a");
    ck_assert_str_eq(dck_diff_status_name(DCK_DIFF_SHAPE_MISMATCH), "shape_mismatch");
}
END_TEST

/* ------------------------------------------------------------------ checkpoints */

typedef struct {
    char *dir;
    char *a, *b;
} fixture;

static void st_write(const char *path, const dck_st_tensor *t, size_t n) {
    ck_assert_msg(dck_safetensors_write(path, t, n, NULL, 0, 0) == DCK_OK, "%s", dck_last_error());
}

static dck_st_tensor st_tensor(const char *name, dck_dtype t, const void *data, int nd,
                               const uint64_t *shape) {
    dck_st_tensor s;
    memset(&s, 0, sizeof s);
    s.name = name;
    s.dtype = t;
    s.ndim = nd;
    if (nd) memcpy(s.shape, shape, sizeof(uint64_t) * (size_t)nd);
    s.data = data;
    return s;
}

static dck_checkpoint *ck_open(const char *path) {
    dck_checkpoint *ck = NULL;
    const char *p[1] = {path};
    ck_assert_msg(dck_checkpoint_open(p, 1, NULL, &ck) == DCK_OK, "%s", dck_last_error());
    return ck;
}

static const dck_diff_tensor *find_t(const dck_diff_result *r, const char *name) {
    for (size_t i = 0; i < r->ntensors; i++)
        if (!strcmp(r->tensors[i].name, name)) return &r->tensors[i];
    ck_abort_msg("tensor %s not in the result", name);
    return NULL;
}

enum { BIG = 300000 }; /* F32: 1.2 MB, more than one 1 MiB chunk */

/* A: a small model; B: the same with known edits. */
static float w0[15], w1a[16], w1b[16], bigA[BIG], bigB[BIG], exA[16], exB[16];
static uint16_t h10a[24], h10b[24];
static double emb[7];

static void make_pair(fixture *fx, int edit) {
    for (int i = 0; i < 15; i++) w0[i] = (float)i * 0.25f;
    for (int i = 0; i < 16; i++) w1a[i] = w1b[i] = 1.0f + (float)i;
    for (int i = 0; i < 24; i++) h10a[i] = h10b[i] = (uint16_t)(0x3c00 + i);
    for (int i = 0; i < 7; i++) emb[i] = -1.5 * i;
    for (int i = 0; i < BIG; i++) bigA[i] = bigB[i] = (float)(i % 1000) / 7.0f;
    for (int i = 0; i < 16; i++) exA[i] = exB[i] = 0.5f;
    if (edit) {
        w1b[6] = nextafterf(w1b[6], 100.0f);      /* [1,2] of [4,4], 1 ULP */
        w1b[9] = nextafterf(nextafterf(w1b[9], 0.0f), 0.0f); /* 2 ULP down */
        h10b[13] = (uint16_t)(h10b[13] + 5);      /* [1,0,1] of [2,3,4], 5 ULP */
        bigB[BIG - 3] = bigA[BIG - 3] + 1.0f;     /* in the second chunk */
        exB[0] = NAN;
    }
    uint64_t s35[] = {3, 5}, s44[] = {4, 4}, s234[] = {2, 3, 4}, s7[] = {7}, sbig[] = {BIG},
             s16[] = {16};
    dck_st_tensor ta[] = {
        st_tensor("model.layers.0.w", DCK_F32, w0, 2, s35),
        st_tensor("model.layers.1.w", DCK_F32, w1a, 2, s44),
        st_tensor("model.layers.10.w", DCK_F16, h10a, 3, s234),
        st_tensor("model.embed", DCK_F64, emb, 1, s7),
        st_tensor("big", DCK_F32, bigA, 1, sbig),
        st_tensor("optimizer.state.model.layers.1.w.exp_avg", DCK_F32, exA, 1, s16),
    };
    dck_st_tensor tb[6];
    memcpy(tb, ta, sizeof ta);
    tb[1].data = w1b;
    tb[2].data = h10b;
    tb[4].data = bigB;
    tb[5].data = exB;
    fx->dir = tu_tmpdir();
    fx->a = tu_path(fx->dir, "a.safetensors");
    fx->b = tu_path(fx->dir, "b.safetensors");
    st_write(fx->a, ta, 6);
    st_write(fx->b, tb, 6);
}

static void fixture_free(fixture *fx) {
    tu_tmpdir_free(fx->dir);
    free(fx->a);
    free(fx->b);
}

START_TEST(test_checkpoints_known_edits) {
    fixture fx;
    make_pair(&fx, 1);
    dck_diff_result r;
    dck_diff_options o;
    dck_diff_options_init(&o);
    o.threads = 2;
    ck_assert_msg(dck_diff_paths(fx.a, fx.b, &o, &r) == DCK_OK, "%s", dck_last_error());
    ck_assert(!r.digest_only);
    ck_assert(!r.equal);
    ck_assert(!r.ok);
    ck_assert_uint_eq(r.ntensors, 6);
    /* model order: big, model.embed, model.layers.0, .1, .10, optimizer... */
    ck_assert_str_eq(r.tensors[0].name, "big");
    ck_assert_str_eq(r.tensors[4].name, "model.layers.10.w");
    const dck_diff_tensor *t = find_t(&r, "model.layers.1.w");
    ck_assert_int_eq(t->status, DCK_DIFF_DIFFER);
    ck_assert_uint_eq(t->stats.diff_count, 2);
    ck_assert_uint_eq(t->stats.count, 16);
    ck_assert_uint_eq(t->stats.max_ulp, 2);
    ck_assert_uint_eq(t->first_index[0], 1);
    ck_assert_uint_eq(t->first_index[1], 2);
    ck_assert_double_eq(t->stats.max_abs, 10.0 - (double)nextafterf(nextafterf(10.0f, 0), 0));
    ck_assert(t->has_digest_a && t->has_digest_b);
    t = find_t(&r, "model.layers.10.w");
    ck_assert_int_eq(t->status, DCK_DIFF_DIFFER);
    ck_assert_uint_eq(t->stats.diff_count, 1);
    ck_assert_uint_eq(t->stats.max_ulp, 5);
    ck_assert_uint_eq(t->first_index[0], 1);
    ck_assert_uint_eq(t->first_index[1], 0);
    ck_assert_uint_eq(t->first_index[2], 1);
    ck_assert_double_eq(t->stats.max_abs, 5 * 0x1p-10);
    t = find_t(&r, "big");
    ck_assert_int_eq(t->status, DCK_DIFF_DIFFER);
    ck_assert_uint_eq(t->stats.diff_count, 1);
    ck_assert_uint_eq(t->stats.first_flat, BIG - 3);
    ck_assert_uint_eq(t->first_index[0], BIG - 3);
    ck_assert_uint_eq(t->stats.count, BIG);
    t = find_t(&r, "optimizer.state.model.layers.1.w.exp_avg");
    ck_assert_int_eq(t->status, DCK_DIFF_DIFFER);
    ck_assert_uint_eq(t->stats.nan_vs_number, 1);
    ck_assert_uint_eq(t->stats.nan_b, 1);
    ck_assert_uint_eq(t->stats.nan_a, 0);
    ck_assert_int_eq(t->group, DCK_GROUP_OPTIMIZER);
    t = find_t(&r, "model.layers.0.w");
    ck_assert_int_eq(t->status, DCK_DIFF_EQUAL);
    ck_assert(!t->has_stats);
    ck_assert_int_eq(find_t(&r, "model.embed")->status, DCK_DIFF_EQUAL);
    ck_assert_uint_eq(r.count[DCK_DIFF_EQUAL], 2);
    ck_assert_uint_eq(r.count[DCK_DIFF_DIFFER], 4);
    ck_assert_int_eq(r.first_tensor, 0);
    /* layers: layers.0 (equal), layers.1 (weight + optimizer state), layers.10 */
    ck_assert_uint_eq(r.nlayers, 3);
    ck_assert_str_eq(r.layers[0].layer, "layers.0");
    ck_assert_uint_eq(r.layers[0].differing, 0);
    ck_assert_str_eq(r.layers[1].layer, "layers.1");
    ck_assert_uint_eq(r.layers[1].tensors, 2);
    ck_assert_uint_eq(r.layers[1].differing, 2);
    ck_assert_str_eq(r.layers[2].layer, "layers.10");
    ck_assert_int_eq(r.first_layer, 1);
    ck_assert_str_eq(r.tensors[r.layers[1].first_differing].name, "model.layers.1.w");
    ck_assert_uint_eq(r.group_tensors[DCK_GROUP_WEIGHTS], 5);
    ck_assert_uint_eq(r.group_differing[DCK_GROUP_WEIGHTS], 3);
    ck_assert_uint_eq(r.group_tensors[DCK_GROUP_OPTIMIZER], 1);
    ck_assert_uint_eq(r.group_differing[DCK_GROUP_OPTIMIZER], 1);

    /* Digests reported for differing tensors are the manifest digests. */
    dck_checkpoint *ca = ck_open(fx.a), *cb = ck_open(fx.b);
    dck_manifest *ma, *mb;
    dck_options ho;
    dck_options_init(&ho);
    ho.hash_files = 0;
    ck_assert_int_eq(dck_checkpoint_hash(ca, &ho, &ma), DCK_OK);
    ck_assert_int_eq(dck_checkpoint_hash(cb, &ho, &mb), DCK_OK);
    for (size_t i = 0; i < r.ntensors; i++) {
        const dck_diff_tensor *x = &r.tensors[i];
        if (!x->has_digest_a) continue;
        ck_assert(dck_digest_equal(x->digest_a, dck_manifest_find_tensor(ma, x->name)->digest));
        ck_assert(dck_digest_equal(x->digest_b, dck_manifest_find_tensor(mb, x->name)->digest));
    }

    /* --group optimizer: only that tensor */
    dck_diff_result g;
    o.groups = 1u << DCK_GROUP_OPTIMIZER;
    ck_assert_int_eq(dck_diff_checkpoints(ca, cb, &o, &g), DCK_OK);
    ck_assert_uint_eq(g.ntensors, 1);
    ck_assert_int_eq(g.tensors[0].status, DCK_DIFF_DIFFER);
    dck_diff_result_release(&g);
    o.groups = 1u << DCK_GROUP_RNG;
    ck_assert_int_eq(dck_diff_checkpoints(ca, cb, &o, &g), DCK_OK);
    ck_assert_uint_eq(g.ntensors, 0);
    ck_assert(g.equal);
    dck_diff_result_release(&g);

    /* manifest vs manifest, manifest vs checkpoint: digests only, same verdicts */
    for (int mode = 0; mode < 3; mode++) {
        char *pm = tu_path(fx.dir, "a.yaml");
        ck_assert_int_eq(dck_manifest_save(ma, DCK_FORMAT_YAML, pm), DCK_OK);
        char *pmb = tu_path(fx.dir, "b.json");
        ck_assert_int_eq(dck_manifest_save(mb, DCK_FORMAT_JSON, pmb), DCK_OK);
        dck_diff_options_init(&o);
        o.threads = 3;
        dck_status s = mode == 0   ? dck_diff_manifests(ma, mb, &o, &g)
                       : mode == 1 ? dck_diff_paths(pm, fx.b, &o, &g)
                                   : dck_diff_paths(fx.a, pmb, &o, &g);
        ck_assert_msg(s == DCK_OK, "%s", dck_last_error());
        ck_assert(g.digest_only);
        ck_assert(!g.equal);
        ck_assert_uint_eq(g.ntensors, 6);
        for (size_t i = 0; i < g.ntensors; i++) {
            ck_assert_str_eq(g.tensors[i].name, r.tensors[i].name);
            ck_assert_int_eq(g.tensors[i].status, r.tensors[i].status);
            ck_assert(!g.tensors[i].has_stats);
            ck_assert(g.tensors[i].has_digest_a && g.tensors[i].has_digest_b);
        }
        ck_assert_int_eq(g.first_layer, 1);
        dck_diff_result_release(&g);
        /* a manifest against its own checkpoint is equal */
        ck_assert_int_eq(dck_diff_paths(fx.a, pm, &o, &g), DCK_OK);
        ck_assert(g.equal && g.ok && g.digest_only);
        dck_diff_result_release(&g);
        free(pm);
        free(pmb);
    }
    dck_manifest_free(ma);
    dck_manifest_free(mb);
    dck_checkpoint_free(ca);
    dck_checkpoint_free(cb);
    dck_diff_result_release(&r);
    fixture_free(&fx);
}
END_TEST

static void assert_same_result(const dck_diff_result *x, const dck_diff_result *y) {
    ck_assert_uint_eq(x->ntensors, y->ntensors);
    for (size_t i = 0; i < x->ntensors; i++) {
        const dck_diff_tensor *a = &x->tensors[i], *b = &y->tensors[i];
        ck_assert_str_eq(a->name, b->name);
        ck_assert_int_eq(a->status, b->status);
        ck_assert_int_eq(memcmp(&a->stats, &b->stats, sizeof a->stats), 0);
        ck_assert_int_eq(memcmp(&a->rel_l2, &b->rel_l2, sizeof a->rel_l2), 0);
        ck_assert_int_eq(memcmp(a->first_index, b->first_index, sizeof a->first_index), 0);
        ck_assert_int_eq(a->has_digest_a, b->has_digest_a);
        if (a->has_digest_a) ck_assert(dck_digest_equal(a->digest_a, b->digest_a));
    }
    ck_assert_int_eq(x->first_layer, y->first_layer);
    ck_assert_int_eq(x->first_tensor, y->first_tensor);
}

START_TEST(test_thread_count_invariance) {
    /* Every element of a 3-chunk tensor differs, so the L2 sums run over many
     * chunks: their bits must not depend on the thread count. */
    enum { N = 700000 };
    float *a = malloc(N * 4), *b = malloc(N * 4);
    for (int i = 0; i < N; i++) {
        a[i] = sinf((float)i) * 3.0f;
        b[i] = a[i] + (float)(i % 13) * 1e-6f;
    }
    uint64_t sh[] = {700, 1000};
    char *dir = tu_tmpdir(), *pa = tu_path(dir, "a.safetensors"), *pb = tu_path(dir, "b.safetensors");
    dck_st_tensor ta = st_tensor("x", DCK_F32, a, 2, sh), tb = st_tensor("x", DCK_F32, b, 2, sh);
    st_write(pa, &ta, 1);
    st_write(pb, &tb, 1);
    dck_diff_result ref, r;
    dck_diff_options o;
    dck_diff_options_init(&o);
    o.threads = 1;
    ck_assert_int_eq(dck_diff_paths(pa, pb, &o, &ref), DCK_OK);
    ck_assert_uint_eq(ref.tensors[0].stats.diff_count, N - N / 13 - 1);
    ck_assert(ref.tensors[0].rel_l2 > 0);
    int counts[] = {2, 3, 4, 7, 64};
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
        o.threads = counts[k];
        ck_assert_int_eq(dck_diff_paths(pa, pb, &o, &r), DCK_OK);
        assert_same_result(&ref, &r);
        dck_diff_result_release(&r);
    }
    dck_diff_result_release(&ref);
    free(a);
    free(b);
    free(pa);
    free(pb);
    tu_tmpdir_free(dir);
}
END_TEST

START_TEST(test_sharded_vs_unsharded) {
    enum { R = 8, C = 6 };
    float full[R * C];
    for (int i = 0; i < R * C; i++) full[i] = (float)i - 20.0f;
    char *dir = tu_tmpdir();
    char *pu = tu_path(dir, "full.safetensors");
    char *d2 = tu_path(dir, "rows2"), *d3 = tu_path(dir, "cols3");
    ck_assert_int_eq(mkdir(d2, 0755), 0);
    ck_assert_int_eq(mkdir(d3, 0755), 0);
    uint64_t sh[] = {R, C};
    dck_st_tensor t = st_tensor("layers.0.w", DCK_F32, full, 2, sh);
    st_write(pu, &t, 1);
    /* 2 ways along rows, the second shard edited at global [5,2] */
    float rows[2][R / 2 * C];
    memcpy(rows[0], full, sizeof rows[0]);
    memcpy(rows[1], full + R / 2 * C, sizeof rows[1]);
    rows[1][1 * C + 2] += 0.5f;
    for (int k = 0; k < 2; k++) {
        uint64_t s[] = {R / 2, C};
        dck_st_tensor p = st_tensor("layers.0.w", DCK_F32, rows[k], 2, s);
        p.global_ndim = 2;
        p.global_shape[0] = R;
        p.global_shape[1] = C;
        p.offset[0] = (uint64_t)k * R / 2;
        char name[64];
        snprintf(name, sizeof name, "shard%d.safetensors", k);
        char *pp = tu_path(d2, name);
        st_write(pp, &p, 1);
        free(pp);
    }
    /* 3 ways along columns, unedited */
    for (int k = 0; k < 3; k++) {
        float cols[R * 2];
        for (int r = 0; r < R; r++)
            for (int c = 0; c < 2; c++) cols[r * 2 + c] = full[r * C + k * 2 + c];
        uint64_t s[] = {R, 2};
        dck_st_tensor p = st_tensor("layers.0.w", DCK_F32, cols, 2, s);
        p.global_ndim = 2;
        p.global_shape[0] = R;
        p.global_shape[1] = C;
        p.offset[1] = (uint64_t)k * 2;
        char name[64];
        snprintf(name, sizeof name, "shard%d.safetensors", k);
        char *pp = tu_path(d3, name);
        st_write(pp, &p, 1);
        free(pp);
    }
    dck_diff_result r;
    ck_assert_msg(dck_diff_paths(pu, d3, NULL, &r) == DCK_OK, "%s", dck_last_error());
    ck_assert(r.equal);
    ck_assert_int_eq(r.tensors[0].status, DCK_DIFF_EQUAL);
    dck_diff_result_release(&r);
    ck_assert_msg(dck_diff_paths(d3, d2, NULL, &r) == DCK_OK, "%s", dck_last_error());
    ck_assert(!r.equal);
    ck_assert_int_eq(r.tensors[0].status, DCK_DIFF_DIFFER);
    ck_assert_uint_eq(r.tensors[0].stats.diff_count, 1);
    ck_assert_uint_eq(r.tensors[0].first_index[0], 5);
    ck_assert_uint_eq(r.tensors[0].first_index[1], 2);
    ck_assert_double_eq(r.tensors[0].stats.max_abs, 0.5);
    ck_assert_str_eq(r.layers[r.first_layer].layer, "layers.0");
    dck_diff_result_release(&r);
    free(pu);
    free(d2);
    free(d3);
    tu_tmpdir_free(dir);
}
END_TEST

START_TEST(test_missing_and_mismatch) {
    float x[6] = {1, 2, 3, 4, 5, 6};
    double y[6] = {1, 2, 3, 4, 5, 6};
    uint64_t s23[] = {2, 3}, s32[] = {3, 2}, s6[] = {6};
    char *dir = tu_tmpdir(), *pa = tu_path(dir, "a.safetensors"), *pb = tu_path(dir, "b.safetensors");
    dck_st_tensor ta[] = {
        st_tensor("only_a", DCK_F32, x, 1, s6),
        st_tensor("dt", DCK_F32, x, 1, s6),
        st_tensor("sh", DCK_F32, x, 2, s23),
        st_tensor("same", DCK_F32, x, 1, s6),
    };
    dck_st_tensor tb[] = {
        st_tensor("only_b", DCK_F32, x, 1, s6),
        st_tensor("dt", DCK_F64, y, 1, s6),
        st_tensor("sh", DCK_F32, x, 2, s32),
        st_tensor("same", DCK_F32, x, 1, s6),
    };
    st_write(pa, ta, 4);
    st_write(pb, tb, 4);
    dck_diff_result r;
    ck_assert_int_eq(dck_diff_paths(pa, pb, NULL, &r), DCK_OK);
    ck_assert_uint_eq(r.ntensors, 5);
    ck_assert_int_eq(find_t(&r, "only_a")->status, DCK_DIFF_MISSING_IN_B);
    ck_assert_int_eq(find_t(&r, "only_b")->status, DCK_DIFF_MISSING_IN_A);
    ck_assert_int_eq(find_t(&r, "dt")->status, DCK_DIFF_DTYPE_MISMATCH);
    ck_assert_int_eq(find_t(&r, "sh")->status, DCK_DIFF_SHAPE_MISMATCH);
    ck_assert_int_eq(find_t(&r, "same")->status, DCK_DIFF_EQUAL);
    ck_assert(find_t(&r, "only_a")->has_digest_a && !find_t(&r, "only_a")->has_digest_b);
    ck_assert(find_t(&r, "only_b")->has_digest_b && !find_t(&r, "only_b")->has_digest_a);
    ck_assert_int_eq(find_t(&r, "dt")->dtype_b, DCK_F64);
    ck_assert(!r.equal && !r.ok);
    ck_assert_uint_eq(r.count[DCK_DIFF_MISSING_IN_A], 1);
    dck_diff_result_release(&r);
    /* tolerances never excuse a missing tensor */
    dck_diff_options o;
    dck_diff_options_init(&o);
    o.tol.atol = 1e9;
    ck_assert_int_eq(dck_diff_paths(pa, pb, &o, &r), DCK_OK);
    ck_assert(!r.ok);
    dck_diff_result_release(&r);
    free(pa);
    free(pb);
    tu_tmpdir_free(dir);
}
END_TEST

START_TEST(test_tolerance_status) {
    fixture fx;
    make_pair(&fx, 1);
    dck_diff_options o;
    dck_diff_options_init(&o);
    o.groups = 1u << DCK_GROUP_WEIGHTS;
    o.tol.ulp = 5; /* layers.1 (2 ULP) and layers.10 (5 ULP) pass; big (+1.0) does not */
    dck_diff_result r;
    ck_assert_int_eq(dck_diff_paths(fx.a, fx.b, &o, &r), DCK_OK);
    ck_assert_int_eq(find_t(&r, "model.layers.1.w")->status, DCK_DIFF_WITHIN_TOLERANCE);
    ck_assert_int_eq(find_t(&r, "model.layers.10.w")->status, DCK_DIFF_WITHIN_TOLERANCE);
    ck_assert_int_eq(find_t(&r, "big")->status, DCK_DIFF_DIFFER);
    ck_assert(!r.ok);
    dck_diff_result_release(&r);
    o.tol.atol = 1.0; /* big's 1.0 passes by atol */
    ck_assert_int_eq(dck_diff_paths(fx.a, fx.b, &o, &r), DCK_OK);
    ck_assert_int_eq(find_t(&r, "big")->status, DCK_DIFF_WITHIN_TOLERANCE);
    ck_assert(r.ok && !r.equal);
    ck_assert_uint_eq(r.count[DCK_DIFF_WITHIN_TOLERANCE], 3);
    dck_diff_result_release(&r);
    o.tol.atol = -1;
    o.tol.ulp = 4; /* layers.10 (5 ULP) fails again */
    ck_assert_int_eq(dck_diff_paths(fx.a, fx.b, &o, &r), DCK_OK);
    ck_assert_int_eq(find_t(&r, "model.layers.10.w")->status, DCK_DIFF_DIFFER);
    ck_assert(!r.ok);
    dck_diff_result_release(&r);
    /* identical checkpoints */
    ck_assert_int_eq(dck_diff_paths(fx.a, fx.a, NULL, &r), DCK_OK);
    ck_assert(r.equal && r.ok);
    ck_assert_int_eq(r.first_layer, -1);
    ck_assert_int_eq(r.first_tensor, -1);
    dck_diff_result_release(&r);
    fixture_free(&fx);
}
END_TEST

START_TEST(test_bad_inputs_name_the_path) {
    fixture fx;
    make_pair(&fx, 0);
    dck_diff_result r;
    char *missing = tu_path(fx.dir, "nope.safetensors");
    ck_assert_int_ne(dck_diff_paths(fx.a, missing, NULL, &r), DCK_OK);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), missing));
    /* truncated B: the header promises more data than the file has */
    char *trunc = tu_path(fx.dir, "t.safetensors");
    FILE *f = fopen(fx.b, "rb");
    static uint8_t buf[2000000];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    tu_write(trunc, buf, n / 2);
    ck_assert_int_ne(dck_diff_paths(fx.a, trunc, NULL, &r), DCK_OK);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "t.safetensors"));
    /* garbage text: neither a manifest nor a checkpoint */
    char *junk = tu_path(fx.dir, "junk.yaml");
    tu_write(junk, "hello: world\n", 13);
    ck_assert_int_ne(dck_diff_paths(junk, fx.b, NULL, &r), DCK_OK);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "junk.yaml"));
    free(missing);
    free(trunc);
    free(junk);
    fixture_free(&fx);
}
END_TEST


START_TEST(test_scalars_empty_and_values) {
    /* a 0-dim scalar that differs (first index is the empty index), an empty
     * tensor (equal, nothing to read) */
    double xa = 1.0, xb = -1.0;
    float none[1] = {0};
    uint64_t s0[] = {0, 4};
    char *dir = tu_tmpdir(), *pa = tu_path(dir, "a.safetensors"), *pb = tu_path(dir, "b.safetensors");
    dck_st_tensor ta[] = {st_tensor("loss_scale", DCK_F64, &xa, 0, NULL),
                          st_tensor("empty", DCK_F32, none, 2, s0)};
    dck_st_tensor tb[] = {st_tensor("loss_scale", DCK_F64, &xb, 0, NULL),
                          st_tensor("empty", DCK_F32, none, 2, s0)};
    st_write(pa, ta, 2);
    st_write(pb, tb, 2);
    dck_diff_result r;
    ck_assert_msg(dck_diff_paths(pa, pb, NULL, &r) == DCK_OK, "%s", dck_last_error());
    const dck_diff_tensor *t = find_t(&r, "loss_scale");
    ck_assert_int_eq(t->status, DCK_DIFF_DIFFER);
    ck_assert_int_eq(t->ndim_a, 0);
    ck_assert_uint_eq(t->stats.first_flat, 0);
    ck_assert_uint_eq(t->stats.max_ulp, 2 * 0x3ff0000000000000ull);
    ck_assert_double_eq(t->stats.max_abs, 2.0);
    ck_assert_int_eq(t->group, DCK_GROUP_OTHER);
    ck_assert_int_eq(find_t(&r, "empty")->status, DCK_DIFF_EQUAL);
    ck_assert_uint_eq(r.nlayers, 0);
    ck_assert_int_eq(r.first_layer, -1);
    dck_diff_result_release(&r);

    /* recorded values: a changed and a missing one make the sides differ */
    dck_manifest *ma, *mb;
    ck_assert_int_eq(dck_manifest_create(&ma), DCK_OK);
    ck_assert_int_eq(dck_manifest_create(&mb), DCK_OK);
    ck_assert_int_eq(dck_manifest_add_value(ma, "iteration", "100"), DCK_OK);
    ck_assert_int_eq(dck_manifest_add_value(mb, "iteration", "200"), DCK_OK);
    ck_assert_int_eq(dck_manifest_add_value(ma, "loss_scale_value", "65536"), DCK_OK);
    ck_assert_int_eq(dck_manifest_finalize(ma), DCK_OK);
    ck_assert_int_eq(dck_manifest_finalize(mb), DCK_OK);
    ck_assert_int_eq(dck_diff_manifests(ma, mb, NULL, &r), DCK_OK);
    ck_assert_uint_eq(r.ntensors, 0);
    ck_assert_uint_eq(r.nvalues, 2);
    ck_assert_str_eq(r.values[0].name, "iteration");
    ck_assert_str_eq(r.values[0].a, "100");
    ck_assert_str_eq(r.values[0].b, "200");
    ck_assert_str_eq(r.values[1].name, "loss_scale_value");
    ck_assert_ptr_null(r.values[1].b);
    ck_assert(!r.equal && !r.ok);
    dck_diff_result_release(&r);
    ck_assert_int_eq(dck_diff_manifests(ma, ma, NULL, &r), DCK_OK);
    ck_assert(r.equal && r.ok);
    dck_diff_result_release(&r);
    dck_manifest_free(ma);
    dck_manifest_free(mb);
    free(pa);
    free(pb);
    tu_tmpdir_free(dir);
}
END_TEST

static Suite *diff_suite(void) {
    Suite *s = suite_create("diff");
    TCase *tc = tcase_create("elements");
    tcase_add_test(tc, test_decode_every_float_dtype);
    tcase_add_test(tc, test_ulp_f32);
    tcase_add_test(tc, test_ulp_f64);
    tcase_add_test(tc, test_ulp_small_floats);
    tcase_add_test(tc, test_ulp_integers);
    tcase_add_test(tc, test_pair_statistics);
    tcase_add_test(tc, test_sign_changes);
    tcase_add_test(tc, test_known_edits_every_dtype);
    tcase_add_test(tc, test_tolerances);
    tcase_add_test(tc, test_rel_l2_and_merge);
    tcase_add_test(tc, test_layer_names);
    tcase_add_test(tc, test_kernels_match_reference);
    tcase_add_test(tc, test_kernel_sums_in_element_order);
    tcase_add_test(tc, test_kernel_max_rel_near_ties);
    suite_add_tcase(s, tc);
    tc = tcase_create("checkpoints");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_checkpoints_known_edits);
    tcase_add_test(tc, test_thread_count_invariance);
    tcase_add_test(tc, test_sharded_vs_unsharded);
    tcase_add_test(tc, test_missing_and_mismatch);
    tcase_add_test(tc, test_tolerance_status);
    tcase_add_test(tc, test_bad_inputs_name_the_path);
    tcase_add_test(tc, test_scalars_empty_and_values);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run(diff_suite()); }

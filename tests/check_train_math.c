/* The trainer's own transcendentals against libm (double precision,
 * rounded to float), Philox known answers, bf16 rounding, fixed-order sums.
 * The accuracy bounds asserted here are the documented ones (train.h). */
#include "testutil.h"
#include "train/train.h"

#include <math.h>

static int64_t ordered(float x) {
    int32_t i;
    memcpy(&i, &x, 4);
    return i < 0 ? (int64_t)INT32_MIN - i : i;
}
static int64_t ulps(float a, float b) {
    int64_t d = ordered(a) - ordered(b);
    return d < 0 ? -d : d;
}

/* Walks [lo, hi] in n steps plus each float's neighbours; returns max ulp. */
static int64_t max_ulp(float (*f)(float), double (*ref)(double), float lo, float hi, int n,
                       float *worst) {
    int64_t m = 0;
    for (int i = 0; i <= n; i++) {
        float x = lo + (hi - lo) * (float)i / (float)n;
        for (int k = -1; k <= 1; k++) {
            float y = nextafterf(x, k < 0 ? -INFINITY : INFINITY);
            if (k == 0) y = x;
            float got = f(y), want = (float)ref((double)y);
            int64_t u = ulps(got, want);
            if (u > m) {
                m = u;
                *worst = y;
            }
        }
    }
    return m;
}

START_TEST(exp_accuracy) {
    float w = 0;
    int64_t u = max_ulp(dck_expf, exp, -87.0f, 88.5f, 200000, &w);
    printf("expf: max %lld ulp (at %a)\n", (long long)u, (double)w);
    ck_assert_int_le(u, 2);
    u = max_ulp(dck_expf, exp, -1.0f, 1.0f, 200000, &w);
    ck_assert_int_le(u, 2);
    ck_assert(isinf(dck_expf(89.0f)));
    ck_assert(dck_expf(-105.0f) == 0.0f);
    ck_assert(dck_expf(0.0f) == 1.0f);
    ck_assert(isnan(dck_expf(NAN)));
    /* subnormal results stay within 1 ulp of the subnormal grid */
    ck_assert_int_le(ulps(dck_expf(-100.0f), (float)exp(-100.0)), 1);
}
END_TEST

START_TEST(log_accuracy) {
    float w = 0;
    int64_t u = max_ulp(dck_logf, log, 1e-30f, 10.0f, 200000, &w);
    int64_t u2 = max_ulp(dck_logf, log, 0.5f, 2.0f, 200000, &w);
    int64_t u3 = max_ulp(dck_logf, log, 1.0f, 3e38f, 200000, &w);
    printf("logf: max %lld / %lld / %lld ulp\n", (long long)u, (long long)u2, (long long)u3);
    ck_assert_int_le(u, 2);
    ck_assert_int_le(u2, 2);
    ck_assert_int_le(u3, 2);
    ck_assert(dck_logf(1.0f) == 0.0f);
    ck_assert(isinf(dck_logf(0.0f)) && dck_logf(0.0f) < 0);
    ck_assert(isnan(dck_logf(-1.0f)));
    ck_assert_int_le(ulps(dck_logf(1e-40f), (float)log(1e-40)), 2); /* subnormal input */
}
END_TEST

START_TEST(tanh_accuracy) {
    float w = 0;
    int64_t u = max_ulp(dck_tanhf, tanh, -10.0f, 10.0f, 200000, &w);
    printf("tanhf: max %lld ulp (at %a)\n", (long long)u, (double)w);
    ck_assert_int_le(u, 4);
    ck_assert(dck_tanhf(20.0f) == 1.0f && dck_tanhf(-20.0f) == -1.0f);
    ck_assert(dck_tanhf(0.0f) == 0.0f);
}
END_TEST

static double gelu_ref(double x) {
    /* 0.5 x (1 + tanh z), written as x / (1 + e^-2z) so that double
     * keeps its precision on the negative tail (1 + tanh z cancels) */
    double z = 0.7978845608028654 * (x + 0.044715 * x * x * x);
    return x / (1.0 + exp(-2.0 * z));
}

START_TEST(gelu_accuracy) {
    /* against the tanh-form GELU in double: within 4 ulp
     * for x >= -1; below, on the negative tail, the float rounding of the
     * argument z dominates: relative error <= 2^-22 |2z| + 4 ulp. The
     * derivative matches a central difference. */
    int64_t worst = 0;
    for (int i = 0; i <= 40000; i++) {
        float x = -12.0f + 24.0f * (float)i / 40000.0f;
        double want = gelu_ref(x);
        float got = dck_gelu(x);
        if (x >= -1.0f) {
            int64_t u = ulps(got, (float)want);
            if (u > worst) worst = u;
            ck_assert_msg(u <= 4, "gelu(%a): %lld ulp", (double)x, (long long)u);
        } else if (fabs(want) > 1e-30) {
            double z = 0.7978845608028654 * (x + 0.044715 * (double)x * x * x);
            double rel = fabs((got - want) / want);
            ck_assert_msg(rel <= ldexp(fabs(2 * z), -22) + 4.8e-7, "gelu(%a): rel %g", (double)x, rel);
        }
        double h = 1e-4;
        double num = (gelu_ref(x + h) - gelu_ref(x - h)) / (2 * h);
        ck_assert_msg(fabs(dck_gelu_grad(x) - num) < 1e-4, "gelu'(%g)", (double)x);
    }
    printf("gelu: max %lld ulp on [-1, 12]\n", (long long)worst);
}
END_TEST

START_TEST(cospi_powi) {
    for (int i = 0; i <= 1000; i++) {
        double p = i / 1000.0;
        ck_assert(fabs(dck_cospi(p) - cos(M_PI * p)) < 1e-15);
    }
    ck_assert(dck_powi(0.9, 0) == 1.0);
    ck_assert(fabs(dck_powi(0.9, 37) - pow(0.9, 37)) < 1e-15);
    ck_assert(dck_powi(2.0, 10) == 1024.0);
}
END_TEST

START_TEST(philox_known_answers) {
    /* Random123 kat_vectors, philox4x32 10 rounds */
    dck_philox_ctr a = dck_philox4x32((dck_philox_ctr){{0, 0, 0, 0}}, 0, 0);
    ck_assert_uint_eq(a.v[0], 0x6627e8d5u);
    ck_assert_uint_eq(a.v[1], 0xe169c58du);
    ck_assert_uint_eq(a.v[2], 0xbc57ac4cu);
    ck_assert_uint_eq(a.v[3], 0x9b00dbd8u);
    dck_philox_ctr b = dck_philox4x32(
        (dck_philox_ctr){{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu,
        0xffffffffu);
    ck_assert_uint_eq(b.v[0], 0x408f276du);
    ck_assert_uint_eq(b.v[1], 0x41c83b0eu);
    ck_assert_uint_eq(b.v[2], 0xa20bc7c6u);
    ck_assert_uint_eq(b.v[3], 0x6d5451fdu);
    dck_philox_ctr c = dck_philox4x32(
        (dck_philox_ctr){{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u,
        0x299f31d0u);
    ck_assert_uint_eq(c.v[0], 0xd16cfe09u);
    ck_assert_uint_eq(c.v[1], 0x94fdccebu);
    ck_assert_uint_eq(c.v[2], 0x5001e420u);
    ck_assert_uint_eq(c.v[3], 0x24126ea1u);
}
END_TEST

START_TEST(bf16_rne) {
    ck_assert_uint_eq(dck_f32_to_bf16(1.0f), 0x3f80);
    /* halfway cases go to even */
    ck_assert_uint_eq(dck_f32_to_bf16(dck_f32_from_bits(0x3f808000u)), 0x3f80);
    ck_assert_uint_eq(dck_f32_to_bf16(dck_f32_from_bits(0x3f818000u)), 0x3f82);
    ck_assert_uint_eq(dck_f32_to_bf16(dck_f32_from_bits(0x3f808001u)), 0x3f81);
    ck_assert_uint_eq(dck_f32_to_bf16(dck_f32_from_bits(0x7f7fffffu)), 0x7f80); /* to inf */
    ck_assert(isnan(dck_bf16_to_f32(dck_f32_to_bf16(NAN))));
    ck_assert_uint_eq(dck_f32_to_bf16(-0.0f), 0x8000);
}
END_TEST

START_TEST(fixed_order_sums) {
    /* the documented lane order, and a case where it differs from a
     * left-to-right sum (so the order is really the one promised) */
    float a[11], ones[11];
    for (int i = 0; i < 11; i++) {
        a[i] = (i == 0) ? 1e8f : (i == 8) ? -1e8f : 1.0f;
        ones[i] = 1.0f;
    }
    float lanes[8] = {0};
    for (int i = 0; i < 11; i++) lanes[i % 8] += a[i];
    float want = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
                 ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
    ck_assert(dck_sum(a, 11) == want);
    ck_assert(dck_dot(a, ones, 11) == want);
    float seq = 0;
    for (int i = 0; i < 11; i++) seq += a[i];
    ck_assert(want == 9.0f && seq == 2.0f);
    float big[10000];
    for (int i = 0; i < 10000; i++) big[i] = (float)(i % 7) * 0.25f;
    float s1 = dck_dot(big, big, 4096) + dck_dot(big + 4096, big + 4096, 4096);
    s1 += dck_dot(big + 8192, big + 8192, 10000 - 8192);
    ck_assert(dck_sumsq(big, 10000) == s1);
}
END_TEST

START_TEST(tree_sum_any_split) {
    /* the pairwise tree over 8 buffers equals subtrees of 2 or 4 finished */
    enum { N = 8, L = 257 };
    static float buf[3][N][L];
    for (int k = 0; k < 3; k++)
        for (int j = 0; j < N; j++)
            for (int i = 0; i < L; i++)
                buf[k][j][i] = (float)dck_philox_u32(7, (uint32_t)j, (uint32_t)i, 0, 0) * 1e-9f - 2.0f;
    float *p[N];
    for (int j = 0; j < N; j++) p[j] = buf[0][j];
    dck_tree_sum(p, N, L);
    for (int K = 2; K <= 4; K *= 2) {
        float *sub[4];
        for (int r = 0; r < K; r++) {
            float *q[N];
            for (int j = 0; j < N / K; j++) q[j] = buf[K == 2 ? 1 : 2][r * (N / K) + j];
            dck_tree_sum(q, (size_t)(N / K), L);
            sub[r] = q[0];
        }
        dck_tree_sum(sub, (size_t)K, L);
        ck_assert(memcmp(sub[0], buf[0][0], sizeof(float) * L) == 0);
    }
}
END_TEST

/* The array forms (several lanes at once) against the scalar functions, bit
 * for bit: a walk over the whole float range by a stride prime to 2^32, the
 * edges of dck_expf's paths and every special value, at every offset and
 * length modulo the vector width, so the vector body and the scalar tail
 * both meet every input. */
static size_t lane_inputs(float *x, size_t cap) {
    size_t n = 0;
    static const uint32_t special[] = {
        0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u,
        0x7f800001u, 0xff800001u, 0x7fc12345u, 0x7fbfffffu, 0x00000001u, 0x80000001u,
        0x007fffffu, 0x00800000u, 0x7f7fffffu, 0xff7fffffu, 0x3f800000u, 0xbf800000u,
        0x3f808000u, 0x3f818000u, 0x3f7f8000u,
    };
    for (size_t k = 0; k < sizeof special / sizeof special[0]; k++)
        x[n++] = dck_f32_from_bits(special[k]);
    /* dck_expf's edges: overflow, underflow, the normal range of 2^k */
    static const float edge[] = {88.72283935546875f, -103.97208404541016f, -87.33654f,
                                 -87.3365479f, -88.0f, -87.0f, 88.0f, 88.7f, 0.34657359f,
                                 -0.34657359f, 1e-30f, -1e-30f};
    for (size_t k = 0; k < sizeof edge / sizeof edge[0]; k++) {
        x[n++] = edge[k];
        x[n++] = nextafterf(edge[k], INFINITY);
        x[n++] = nextafterf(edge[k], -INFINITY);
    }
    for (int k = -130; k <= 130; k++) /* x with kf + 0.5 at every integer boundary */
        x[n++] = ((float)k + 0.5f) / 1.442695040888963407f;
    for (uint64_t u = 0; u < (1ull << 32) && n < cap; u += 40009u)
        x[n++] = dck_f32_from_bits((uint32_t)u);
    return n;
}

static void same_bits(const float *got, const float *want, const float *in, size_t n,
                      const char *what) {
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(dck_f32_bits(got[i]) == dck_f32_bits(want[i]),
                      "%s(%08x): %08x, scalar %08x", what, dck_f32_bits(in[i]),
                      dck_f32_bits(got[i]), dck_f32_bits(want[i]));
}

START_TEST(array_forms_match_scalar) {
    enum { CAP = 1 << 18 };
    float *x = malloc(CAP * sizeof(float)), *y = malloc(CAP * sizeof(float));
    float *s = malloc(CAP * sizeof(float)), *d = malloc(CAP * sizeof(float));
    float *want = malloc(CAP * sizeof(float));
    ck_assert(x && y && s && d && want);
    size_t n = lane_inputs(x, CAP);
    /* scaled copies reach the exp and GELU ranges densely, too */
    size_t m = n;
    for (size_t i = 0; i < n && m < CAP; i += 3) x[m++] = (float)((double)(i % 4000) / 20.0 - 110.0);
    for (size_t i = 0; i < n && m < CAP; i += 5) x[m++] = (float)((double)(i % 3000) / 300.0 - 5.0);
    n = m;
    /* everything once, and the first values (the specials and edges) at
     * every offset and length up to 64, body and tail */
    for (size_t off = 0; off < 9; off++)
        for (size_t len = 0; len <= (off ? 64 : n); len += (off || len < 64) ? 1 : n - 64) {
            const float *in = x + off;
            memcpy(y, in, len * sizeof(float));
            dck_expf_n(y, len);
            for (size_t i = 0; i < len; i++) want[i] = dck_expf(in[i]);
            same_bits(y, want, in, len, "dck_expf_n");

            dck_gelu_n(in, y, s, len);
            for (size_t i = 0; i < len; i++) want[i] = dck_gelu(in[i]);
            same_bits(y, want, in, len, "dck_gelu_n");
            for (size_t i = 0; i < len; i++) d[i] = 0.75f - (float)(i % 3);
            dck_gelu_grad_n(in, s, d, len);
            for (size_t i = 0; i < len; i++) want[i] = (0.75f - (float)(i % 3)) * dck_gelu_grad(in[i]);
            same_bits(d, want, in, len, "dck_gelu_grad_n");

            memcpy(y, in, len * sizeof(float));
            dck_bf16_round_n(y, len);
            for (size_t i = 0; i < len; i++) want[i] = dck_bf16_round(in[i]);
            same_bits(y, want, in, len, "dck_bf16_round_n");
        }
    free(x);
    free(y);
    free(s);
    free(d);
    free(want);
}
END_TEST

int main(void) {
    Suite *s = suite_create("train_math");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, exp_accuracy);
    tcase_add_test(tc, log_accuracy);
    tcase_add_test(tc, tanh_accuracy);
    tcase_add_test(tc, gelu_accuracy);
    tcase_add_test(tc, cospi_powi);
    tcase_add_test(tc, philox_known_answers);
    tcase_add_test(tc, bf16_rne);
    tcase_add_test(tc, fixed_order_sums);
    tcase_add_test(tc, tree_sum_any_split);
    tcase_add_test(tc, array_forms_match_scalar);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

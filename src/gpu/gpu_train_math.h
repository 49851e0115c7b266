/* The trainer's arithmetic, one source for the CPU and the GPU (detcheck-gpu(7), TRAINING).
 *
 * This header is compiled three ways: as C by the CPU trainer (src/train/),
 * as C by the kernels' CPU twin (src/gpu/train_twin.c), and as CUDA by the
 * kernels (cuda/train.cu). Every function is a fixed sequence of IEEE single
 * operations: +, -, *, / and sqrt, no libm transcendental, no table, no
 * data-dependent order. Built with -ffp-contract=off (cc) and --fmad=false
 * (nvcc; division and sqrt stay IEEE: no --use_fast_math, no -ftz), the
 * same inputs give the same bits on any CPU and any GPU, NaNs excepted: an
 * operation that makes a NaN from numbers gives 0x7fffffff on a GPU and
 * 0xffc00000 on x86, and a NaN operand's payload may or may not go through.
 * No code here canonicalises NaNs; the trainer stops at the first step
 * whose loss, gradient or updated weights are not finite (train_loop.c,
 * detcheck-train(1)), so a NaN never reaches a record, a root or a
 * checkpoint, and where a NaN sits is the same on both (only its bits
 * differ).
 *
 * Two kinds of shared code:
 *  - DCK_TMF functions (scalar): exp, log, tanh, GELU, bf16 rounding, the
 *    8-lane dot product and sum, LayerNorm rows, AdamW elements;
 *  - DCK_TM_* macros (expressions): the per-element formulas that the CPU
 *    also evaluates on vectors of DCK_VF lanes (train_vec.h; a GCC vector
 *    extension type takes the same operators), so the scalar tail, the
 *    vector body and the GPU thread all expand the very same expression.
 *
 * Reduction orders, written once here and followed by every loop shape:
 *  - dot/sum "8 lanes": element j goes to lane j % 8, each lane adds its
 *    elements in ascending j from +0, the lanes are combined as
 *    ((0+1)+(2+3))+((4+5)+(6+7));
 *  - sum of squares of the flat gradient: chunks of 4096 elements, each an
 *    8-lane dot product, chunk results added in ascending order from +0;
 *  - matrix products and accumulations (forward, weight and bias
 *    gradients, attention's weighted sums, softmax and cross-entropy sums):
 *    one chain per output, from its initial value, in ascending index. */
#ifndef DCK_GPU_TRAIN_MATH_H
#define DCK_GPU_TRAIN_MATH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if !defined(__CUDACC__)
#include <math.h> /* sqrtf: IEEE, as on the device */
#endif

#if defined(__CUDACC__)
#define DCK_TMF __host__ __device__ __forceinline__
#else
#define DCK_TMF static inline
#endif

DCK_TMF uint32_t dck_tm_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

DCK_TMF float dck_tm_from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* Not a NaN nor an infinity: by the bits, the same on every compiler and
 * under any floating-point flag. */
DCK_TMF int dck_tm_finite(float x) { return (dck_tm_bits(x) & 0x7f800000u) != 0x7f800000u; }

/* ------------------------------------------------------------------ exp */
/* ln 2 split so that k * LN2_HI is exact for |k| < 2^8 (Cody and Waite). */
#define DCK_TM_LN2_HI 0.693145751953125f        /* 0x3f317200 */
#define DCK_TM_LN2_LO 1.428606820309417232e-06f /* ln 2 - LN2_HI */
#define DCK_TM_LOG2E 1.442695040888963407f
/* dck_expf's range: above, +inf; below, 0 */
#define DCK_TM_EXP_HI 88.72283935546875f
#define DCK_TM_EXP_LO (-103.97208404541016f)

/* exp(r) for |r| <= 0.347: Taylor to r^7 (< 2^-27 relative), Horner from the
 * top. r: float or a float vector; p: an lvalue of r's type. */
#define DCK_TM_EXP_POLY(p, r)                                                                     \
    do {                                                                                          \
        p = 1.0f / 720.0f + (r) * (p);                                                            \
        p = 1.0f / 120.0f + (r) * (p);                                                            \
        p = 1.0f / 24.0f + (r) * (p);                                                             \
        p = 1.0f / 6.0f + (r) * (p);                                                              \
        p = 0.5f + (r) * (p);                                                                     \
        p = 1.0f + (r) * (p);                                                                     \
        p = 1.0f + (r) * (p);                                                                     \
    } while (0)

/* p * 2^k for k in [-150, 128], in at most two exact-power steps. */
DCK_TMF float dck_tm_scale_pow2(float p, int k) {
    if (k > 127) {
        p = p * 2.0f;
        k -= 1;
    }
    if (k < -126) {
        p = p * dck_tm_from_bits((uint32_t)(k + 100 + 127) << 23);
        return p * dck_tm_from_bits((uint32_t)(127 - 100) << 23);
    }
    return p * dck_tm_from_bits((uint32_t)(k + 127) << 23);
}

DCK_TMF float dck_tm_expf(float x) {
    if (x != x) return x;
    if (x > DCK_TM_EXP_HI) return dck_tm_from_bits(0x7f800000u);
    if (x < DCK_TM_EXP_LO) return 0.0f;
    float kf = x * DCK_TM_LOG2E;
    int k = (int)(kf + (kf >= 0.0f ? 0.5f : -0.5f));
    float r = x - (float)k * DCK_TM_LN2_HI;
    r = r - (float)k * DCK_TM_LN2_LO;
    float p = 1.0f / 5040.0f;
    DCK_TM_EXP_POLY(p, r);
    return dck_tm_scale_pow2(p, k);
}

/* ------------------------------------------------------------------ log, tanh */
DCK_TMF float dck_tm_logf(float x) {
    if (x != x) return x;
    if (x < 0.0f) return dck_tm_from_bits(0x7fc00000u);
    if (x == 0.0f) return dck_tm_from_bits(0xff800000u);
    uint32_t u = dck_tm_bits(x);
    if (u == 0x7f800000u) return x;
    int e = 0;
    if (u < 0x00800000u) { /* subnormal: scale up by 2^25 */
        x = x * 33554432.0f;
        u = dck_tm_bits(x);
        e = -25;
    }
    e += (int)(u >> 23) - 127;
    float m = dck_tm_from_bits((u & 0x007fffffu) | 0x3f800000u); /* [1, 2) */
    if (m > 1.41421356f) {
        m = m * 0.5f;
        e += 1;
    }
    /* log m = 2 atanh(s), s = (m-1)/(m+1), |s| <= 0.1716 */
    float f = m - 1.0f;
    float s = f / (2.0f + f);
    float s2 = s * s;
    float q = 1.0f / 13.0f;
    q = 1.0f / 11.0f + s2 * q;
    q = 1.0f / 9.0f + s2 * q;
    q = 1.0f / 7.0f + s2 * q;
    q = 1.0f / 5.0f + s2 * q;
    q = 1.0f / 3.0f + s2 * q;
    float t = s2 * q;
    /* log m = f - f s + 2 s t would be finer; 2s(1 + t) keeps it short */
    float lm = 2.0f * s + (2.0f * s) * t;
    float ef = (float)e;
    return ef * DCK_TM_LN2_HI + (lm + ef * DCK_TM_LN2_LO);
}

DCK_TMF float dck_tm_tanhf(float x) {
    if (x != x) return x;
    float a = x < 0.0f ? -x : x;
    float t;
    if (a < 0.3f) {
        /* odd Taylor series to x^15: the first omitted term is below
         * 2^-29 relative for |x| < 0.3 */
        float a2 = a * a;
        float p = -929569.0f / 638512875.0f;
        p = 21844.0f / 6081075.0f + a2 * p;
        p = -1382.0f / 155925.0f + a2 * p;
        p = 62.0f / 2835.0f + a2 * p;
        p = -17.0f / 315.0f + a2 * p;
        p = 2.0f / 15.0f + a2 * p;
        p = -1.0f / 3.0f + a2 * p;
        t = a + a * (a2 * p);
    } else if (a > 9.1f) {
        t = 1.0f;
    } else {
        t = 1.0f - 2.0f / (dck_tm_expf(2.0f * a) + 1.0f);
    }
    return x < 0.0f ? -t : t;
}

/* ------------------------------------------------------------------ GELU
 * tanh form: 0.5 x (1 + tanh z) = x * sigmoid(2 z), z = c (x + k x^3); the
 * sigmoid form has no cancellation near tanh z = -1. The forward pass keeps
 * the sigmoid s for the backward ((x * x) * x is x2 * x, so both see the
 * same z). */
#define DCK_TM_GELU_C 0.7978845608028654f /* sqrt(2 / pi) */
#define DCK_TM_GELU_K 0.044715f
/* -2 z of x (the argument of the sigmoid's exp) */
#define DCK_TM_GELU_M2Z(x) (-2.0f * (DCK_TM_GELU_C * ((x) + DCK_TM_GELU_K * (((x) * (x)) * (x)))))
/* s = 1 / (1 + e), e = exp(-2 z) */
#define DCK_TM_GELU_SIG(e) (1.0f / (1.0f + (e)))
/* d GELU / dx from x and its sigmoid s */
#define DCK_TM_GELU_GRAD(x, s)                                                                    \
    ((s) + (x) * (((2.0f * (s)) * (1.0f - (s))) *                                                 \
                  (DCK_TM_GELU_C * (1.0f + (3.0f * DCK_TM_GELU_K) * ((x) * (x))))))

DCK_TMF float dck_tm_gelu_sig(float x) { return DCK_TM_GELU_SIG(dck_tm_expf(DCK_TM_GELU_M2Z(x))); }
DCK_TMF float dck_tm_gelu(float x) { return x * dck_tm_gelu_sig(x); }
DCK_TMF float dck_tm_gelu_grad(float x) { return DCK_TM_GELU_GRAD(x, dck_tm_gelu_sig(x)); }

/* ------------------------------------------------------------------ bf16 */
/* Round to nearest even at bit 16; a NaN stays NaN, made quiet. */
DCK_TMF uint16_t dck_tm_f32_to_bf16(float x) {
    uint32_t u = dck_tm_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)((u + rounding) >> 16);
}
DCK_TMF float dck_tm_bf16_to_f32(uint16_t h) { return dck_tm_from_bits((uint32_t)h << 16); }
DCK_TMF float dck_tm_bf16_round(float x) { return dck_tm_bf16_to_f32(dck_tm_f32_to_bf16(x)); }

/* ------------------------------------------------------------------ fixed-order sums */
DCK_TMF float dck_tm_lanes8_combine(const float *acc) {
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* sum_j a[j sa] b[j sb], 8 lanes (element j in lane j % 8). The lanes are
 * named, not indexed by j: a GPU keeps them in registers. */
#define DCK_TM_LANE_STEP(acc, k, x) acc[k] = acc[k] + (x)
DCK_TMF float dck_tm_dot8(const float *a, size_t sa, const float *b, size_t sb, size_t n) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        DCK_TM_LANE_STEP(acc, 0, a[j * sa] * b[j * sb]);
        DCK_TM_LANE_STEP(acc, 1, a[(j + 1) * sa] * b[(j + 1) * sb]);
        DCK_TM_LANE_STEP(acc, 2, a[(j + 2) * sa] * b[(j + 2) * sb]);
        DCK_TM_LANE_STEP(acc, 3, a[(j + 3) * sa] * b[(j + 3) * sb]);
        DCK_TM_LANE_STEP(acc, 4, a[(j + 4) * sa] * b[(j + 4) * sb]);
        DCK_TM_LANE_STEP(acc, 5, a[(j + 5) * sa] * b[(j + 5) * sb]);
        DCK_TM_LANE_STEP(acc, 6, a[(j + 6) * sa] * b[(j + 6) * sb]);
        DCK_TM_LANE_STEP(acc, 7, a[(j + 7) * sa] * b[(j + 7) * sb]);
    }
    if (j + 0 < n) DCK_TM_LANE_STEP(acc, 0, a[j * sa] * b[j * sb]);
    if (j + 1 < n) DCK_TM_LANE_STEP(acc, 1, a[(j + 1) * sa] * b[(j + 1) * sb]);
    if (j + 2 < n) DCK_TM_LANE_STEP(acc, 2, a[(j + 2) * sa] * b[(j + 2) * sb]);
    if (j + 3 < n) DCK_TM_LANE_STEP(acc, 3, a[(j + 3) * sa] * b[(j + 3) * sb]);
    if (j + 4 < n) DCK_TM_LANE_STEP(acc, 4, a[(j + 4) * sa] * b[(j + 4) * sb]);
    if (j + 5 < n) DCK_TM_LANE_STEP(acc, 5, a[(j + 5) * sa] * b[(j + 5) * sb]);
    if (j + 6 < n) DCK_TM_LANE_STEP(acc, 6, a[(j + 6) * sa] * b[(j + 6) * sb]);
    return dck_tm_lanes8_combine(acc);
}

DCK_TMF float dck_tm_sum8(const float *a, size_t n) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    size_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int k = 0; k < 8; k++) DCK_TM_LANE_STEP(acc, k, a[j + (size_t)k]);
    for (int k = 0; j + (size_t)k < n; k++) DCK_TM_LANE_STEP(acc, k, a[j + (size_t)k]);
    return dck_tm_lanes8_combine(acc);
}

/* ------------------------------------------------------------------ LayerNorm */
#define DCK_TM_LN_EPS 1e-5f
/* y = ((x - mean) rstd) w + b, t = x - mean */
#define DCK_TM_LN_OUT(t, rs, w, b) (((t) * (rs)) * (w) + (b))
/* the input gradient from dxhat = dy w, xhat, the row means m1 = mean(dxhat),
 * m2 = mean(dxhat xhat) */
#define DCK_TM_LN_DX(rs, dxh, xh, m1, m2) ((rs) * (((dxh) - (m1)) - (xh) * (m2)))

/* 1 / sqrt(var + eps), var the 8-lane mean of squares */
DCK_TMF float dck_tm_ln_rstd(float var) { return 1.0f / sqrtf(var + DCK_TM_LN_EPS); }

/* ------------------------------------------------------------------ softmax backward */
/* ds_ij = (p_ij (dp_ij - sum_j p_ij dp_ij)) scale */
#define DCK_TM_SOFTMAX_DS(p, dp, sum_pd, scale) (((p) * ((dp) - (sum_pd))) * (scale))

/* ------------------------------------------------------------------ AdamW
 * One element: the moments, then the update of the fp32 master weight. The
 * step's constants come from dck_tm_adamw_consts (host). */
typedef struct {
    float b1, b2, one_b1, one_b2, bc1, bc2, eps, lr, decay, gscale;
} dck_tm_adamw;

/* m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2 (g already scaled) */
#define DCK_TM_ADAM_M(a, m, g) ((a)->b1 * (m) + (a)->one_b1 * (g))
#define DCK_TM_ADAM_V(a, v, g) ((a)->b2 * (v) + (a)->one_b2 * ((g) * (g)))

DCK_TMF float dck_tm_adamw_update(const dck_tm_adamw *a, int decay, float g_raw, float *m,
                                  float *v, float w) {
    float g = g_raw * a->gscale;
    float mo = DCK_TM_ADAM_M(a, *m, g);
    float vo = DCK_TM_ADAM_V(a, *v, g);
    *m = mo;
    *v = vo;
    float mhat = mo / a->bc1;
    float vhat = vo / a->bc2;
    float upd = mhat / (sqrtf(vhat) + a->eps);
    if (decay) w = w - a->decay * w;
    return w - a->lr * upd;
}

#endif /* DCK_GPU_TRAIN_MATH_H */

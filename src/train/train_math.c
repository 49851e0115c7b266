/* Transcendentals of the training loop, from +, -, *, / and sqrt only, so a
 * CUDA twin (built with --fmad=false, IEEE division and sqrt) computes the
 * same bits. Every function is a fixed sequence of float operations: no
 * table, no libm call, no data-dependent evaluation order. Accuracy against
 * libm is measured in tests/check_train_math.c. */
#include "train/train.h"
#include "train/train_vec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint32_t dck_f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

float dck_f32_from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* ln 2 split so that k * LN2_HI is exact for |k| < 2^8 (Cody and Waite). */
#define LN2_HI 0.693145751953125f        /* 0x3f317200 */
#define LN2_LO 1.428606820309417232e-06f /* ln 2 - LN2_HI */
#define LOG2E 1.442695040888963407f

static float scale_pow2(float p, int k) {
    /* p * 2^k for k in [-150, 128], in at most two exact-power steps. */
    if (k > 127) {
        p = p * 2.0f;
        k -= 1;
    }
    if (k < -126) {
        p = p * dck_f32_from_bits((uint32_t)(k + 100 + 127) << 23);
        return p * dck_f32_from_bits((uint32_t)(127 - 100) << 23);
    }
    return p * dck_f32_from_bits((uint32_t)(k + 127) << 23);
}

float dck_expf(float x) {
    if (x != x) return x;
    if (x > 88.72283935546875f) return dck_f32_from_bits(0x7f800000u);
    if (x < -103.97208404541016f) return 0.0f;
    float kf = x * LOG2E;
    int k = (int)(kf + (kf >= 0.0f ? 0.5f : -0.5f));
    float r = x - (float)k * LN2_HI;
    r = r - (float)k * LN2_LO;
    /* |r| <= 0.347: Taylor to r^7 leaves < 2^-27 relative. */
    float p = 1.0f / 5040.0f;
    p = 1.0f / 720.0f + r * p;
    p = 1.0f / 120.0f + r * p;
    p = 1.0f / 24.0f + r * p;
    p = 1.0f / 6.0f + r * p;
    p = 0.5f + r * p;
    p = 1.0f + r * p;
    p = 1.0f + r * p;
    return scale_pow2(p, k);
}

/* dck_expf on DCK_VF lanes: the same operations in the same order on each
 * lane, for the lanes on dck_expf's main path (x in range, 2^k normal).
 * Any other lane (NaN, overflow, underflow, a subnormal result) is left to
 * dck_expf itself, so every lane has dck_expf's bits. */
typedef int32_t vi32 __attribute__((vector_size(DCK_VF * sizeof(int32_t))));

static inline vi32 vsel_mask(vi32 m, vi32 a, vi32 b) { return (a & m) | (b & ~m); }

static inline dck_vf expf_v(dck_vf x) {
    vi32 ok = (x >= -103.97208404541016f) & (x <= 88.72283935546875f); /* false for NaN */
    dck_vf xs = (dck_vf)vsel_mask(ok, (vi32)x, (vi32){0});
    dck_vf kf = xs * LOG2E;
    dck_vf half = (dck_vf)vsel_mask(kf >= 0.0f, (vi32)dck_vsplat(0.5f), (vi32)dck_vsplat(-0.5f));
    vi32 k = __builtin_convertvector(kf + half, vi32); /* truncation, as (int) */
    dck_vf fk = __builtin_convertvector(k, dck_vf);
    dck_vf r = xs - fk * LN2_HI;
    r = r - fk * LN2_LO;
    dck_vf p = dck_vsplat(1.0f / 5040.0f);
    p = 1.0f / 720.0f + r * p;
    p = 1.0f / 120.0f + r * p;
    p = 1.0f / 24.0f + r * p;
    p = 1.0f / 6.0f + r * p;
    p = 0.5f + r * p;
    p = 1.0f + r * p;
    p = 1.0f + r * p;
    ok &= (k >= -126) & (k <= 127);
    dck_vf y = p * (dck_vf)((vsel_mask(ok, k, (vi32){0}) + 127) << 23);
    for (int l = 0; l < DCK_VF; l++)
        if (!ok[l]) y[l] = dck_expf(x[l]);
    return y;
}

void dck_expf_n(float *x, size_t n) {
    size_t i = 0;
    for (; i + DCK_VF <= n; i += DCK_VF) dck_vstore(x + i, expf_v(dck_vload(x + i)));
    for (; i < n; i++) x[i] = dck_expf(x[i]);
}

float dck_logf(float x) {
    if (x != x) return x;
    if (x < 0.0f) return dck_f32_from_bits(0x7fc00000u);
    if (x == 0.0f) return dck_f32_from_bits(0xff800000u);
    uint32_t u = dck_f32_bits(x);
    if (u == 0x7f800000u) return x;
    int e = 0;
    if (u < 0x00800000u) { /* subnormal: scale up by 2^25 */
        x = x * 33554432.0f;
        u = dck_f32_bits(x);
        e = -25;
    }
    e += (int)(u >> 23) - 127;
    float m = dck_f32_from_bits((u & 0x007fffffu) | 0x3f800000u); /* [1, 2) */
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
    return ef * LN2_HI + (lm + ef * LN2_LO);
}

float dck_tanhf(float x) {
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
        t = 1.0f - 2.0f / (dck_expf(2.0f * a) + 1.0f);
    }
    return x < 0.0f ? -t : t;
}

/* GELU, tanh form: 0.5 x (1 + tanh z) = x * sigmoid(2 z), z = c (x + k x^3).
 * The sigmoid form has no cancellation near tanh z = -1. */
#define GELU_C 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_K 0.044715f

float dck_gelu(float x) {
    float x3 = (x * x) * x;
    float z = GELU_C * (x + GELU_K * x3);
    float s = 1.0f / (1.0f + dck_expf(-2.0f * z));
    return x * s;
}

float dck_gelu_grad(float x) {
    float x2 = x * x;
    float z = GELU_C * (x + GELU_K * (x2 * x));
    float s = 1.0f / (1.0f + dck_expf(-2.0f * z));
    float dz = GELU_C * (1.0f + (3.0f * GELU_K) * x2);
    float ds = (2.0f * s) * (1.0f - s);
    return s + x * (ds * dz);
}

/* dck_gelu and dck_gelu_grad share z and the sigmoid s bit for bit
 * ((x * x) * x is x2 * x): the forward pass keeps s for the backward. */
void dck_gelu_n(const float *x, float *y, float *sig, size_t n) {
    size_t i = 0;
    for (; i + DCK_VF <= n; i += DCK_VF) {
        dck_vf v = dck_vload(x + i);
        dck_vf x3 = (v * v) * v;
        dck_vf z = GELU_C * (v + GELU_K * x3);
        dck_vf s = 1.0f / (1.0f + expf_v(-2.0f * z));
        dck_vstore(sig + i, s);
        dck_vstore(y + i, v * s);
    }
    for (; i < n; i++) {
        float v = x[i];
        float x3 = (v * v) * v;
        float z = GELU_C * (v + GELU_K * x3);
        float s = 1.0f / (1.0f + dck_expf(-2.0f * z));
        sig[i] = s;
        y[i] = v * s;
    }
}

void dck_gelu_grad_n(const float *x, const float *sig, float *d, size_t n) {
    size_t i = 0;
    for (; i + DCK_VF <= n; i += DCK_VF) {
        dck_vf v = dck_vload(x + i), s = dck_vload(sig + i);
        dck_vf x2 = v * v;
        dck_vf dz = GELU_C * (1.0f + (3.0f * GELU_K) * x2);
        dck_vf ds = (2.0f * s) * (1.0f - s);
        dck_vstore(d + i, dck_vload(d + i) * (s + v * (ds * dz)));
    }
    for (; i < n; i++) {
        float v = x[i], s = sig[i];
        float x2 = v * v;
        float dz = GELU_C * (1.0f + (3.0f * GELU_K) * x2);
        float ds = (2.0f * s) * (1.0f - s);
        d[i] = d[i] * (s + v * (ds * dz));
    }
}

double dck_cospi(double p) {
    if (p <= 0.0) return 1.0;
    if (p >= 1.0) return -1.0;
    /* cos(pi p) = -sin(pi (p - 1/2)), argument in [-pi/2, pi/2] */
    double x = 3.14159265358979323846 * (p - 0.5);
    double x2 = x * x;
    double term = x, sum = x;
    for (int k = 1; k <= 11; k++) {
        term = -term * x2 / (double)((2 * k) * (2 * k + 1));
        sum = sum + term;
    }
    return -sum;
}

double dck_powi(double b, long n) {
    double r = 1.0;
    while (n > 0) {
        if (n & 1) r = r * b;
        b = b * b;
        n >>= 1;
    }
    return r;
}

uint16_t dck_f32_to_bf16(float x) {
    uint32_t u = dck_f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
    uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)((u + rounding) >> 16);
}

float dck_bf16_to_f32(uint16_t h) { return dck_f32_from_bits((uint32_t)h << 16); }

/* dck_bf16_round on DCK_VF lanes: round to nearest even at bit 16, NaN
 * made quiet, as dck_f32_to_bf16 then dck_bf16_to_f32. */
typedef uint32_t vu32 __attribute__((vector_size(DCK_VF * sizeof(uint32_t))));

void dck_bf16_round_n(float *x, size_t n) {
    size_t i = 0;
    for (; i + DCK_VF <= n; i += DCK_VF) {
        vu32 u = (vu32)dck_vload(x + i);
        vu32 nan = (vu32)((u & 0x7fffffffu) > 0x7f800000u);
        vu32 rne = (u + (0x7fffu + ((u >> 16) & 1u))) & 0xffff0000u;
        vu32 quiet = (u & 0xffff0000u) | 0x00400000u;
        dck_vstore(x + i, (dck_vf)((quiet & nan) | (rne & ~nan)));
    }
    for (; i < n; i++) x[i] = dck_bf16_round(x[i]);
}

float dck_dot(const float *a, const float *b, size_t n) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    size_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int k = 0; k < 8; k++) acc[k] += a[j + k] * b[j + k];
    for (int k = 0; j < n; j++, k++) acc[k] += a[j] * b[j];
    return dck_lanes8_combine(acc);
}

float dck_sum(const float *a, size_t n) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    size_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int k = 0; k < 8; k++) acc[k] += a[j + k];
    for (int k = 0; j < n; j++, k++) acc[k] += a[j];
    return dck_lanes8_combine(acc);
}

float dck_sumsq(const float *a, size_t n) {
    float total = 0.0f;
    for (size_t c = 0; c < n; c += 4096) {
        size_t len = n - c < 4096 ? n - c : 4096;
        total += dck_dot(a + c, a + c, len);
    }
    return total;
}

const char *dck_float_text(float v, char *buf, size_t n) {
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, n, "%.*g", prec, (double)v);
        if (strtof(buf, NULL) == v) break;
    }
    return buf;
}

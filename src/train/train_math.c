/* Transcendentals of the training loop, from +, -, *, / and sqrt only, so a
 * CUDA twin (built with --fmad=false, IEEE division and sqrt) computes the
 * same bits. Every function is a fixed sequence of float operations: no
 * table, no libm call, no data-dependent evaluation order. Accuracy against
 * libm is measured in tests/check_train_math.c. */
#include "train/train.h"
#include "train/train_vec.h"
#include "gpu/gpu_train_math.h" /* the arithmetic, shared with the GPU kernels */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

float dck_expf(float x) { return dck_tm_expf(x); }

/* dck_expf on DCK_VF lanes: the same operations in the same order on each
 * lane, for the lanes on dck_expf's main path (x in range, 2^k normal).
 * Any other lane (NaN, overflow, underflow, a subnormal result) is left to
 * dck_expf itself, so every lane has dck_expf's bits. */
typedef int32_t vi32 __attribute__((vector_size(DCK_VF * sizeof(int32_t))));

static inline vi32 vsel_mask(vi32 m, vi32 a, vi32 b) { return (a & m) | (b & ~m); }

static inline dck_vf expf_v(dck_vf x) {
    vi32 ok = (x >= DCK_TM_EXP_LO) & (x <= DCK_TM_EXP_HI); /* false for NaN */
    dck_vf xs = (dck_vf)vsel_mask(ok, (vi32)x, (vi32){0});
    dck_vf kf = xs * DCK_TM_LOG2E;
    dck_vf half = (dck_vf)vsel_mask(kf >= 0.0f, (vi32)dck_vsplat(0.5f), (vi32)dck_vsplat(-0.5f));
    vi32 k = __builtin_convertvector(kf + half, vi32); /* truncation, as (int) */
    dck_vf fk = __builtin_convertvector(k, dck_vf);
    dck_vf r = xs - fk * DCK_TM_LN2_HI;
    r = r - fk * DCK_TM_LN2_LO;
    dck_vf p = dck_vsplat(1.0f / 5040.0f);
    DCK_TM_EXP_POLY(p, r);
    ok &= (k >= -126) & (k <= 127);
    dck_vf y = p * (dck_vf)((vsel_mask(ok, k, (vi32){0}) + 127) << 23);
    for (int l = 0; l < DCK_VF; l++)
        if (!ok[l]) y[l] = dck_tm_expf(x[l]);
    return y;
}

void dck_expf_n(float *x, size_t n) {
    size_t i = 0;
    for (; i + DCK_VF <= n; i += DCK_VF) dck_vstore(x + i, expf_v(dck_vload(x + i)));
    for (; i < n; i++) x[i] = dck_expf(x[i]);
}

float dck_logf(float x) { return dck_tm_logf(x); }
float dck_tanhf(float x) { return dck_tm_tanhf(x); }
float dck_gelu(float x) { return dck_tm_gelu(x); }
float dck_gelu_grad(float x) { return dck_tm_gelu_grad(x); }

/* dck_gelu and dck_gelu_grad share z and the sigmoid s bit for bit
 * ((x * x) * x is x2 * x): the forward pass keeps s for the backward. */
void dck_gelu_n(const float *x, float *y, float *sig, size_t n) {
    size_t i = 0;
    for (; i + DCK_VF <= n; i += DCK_VF) {
        dck_vf v = dck_vload(x + i);
        dck_vf s = DCK_TM_GELU_SIG(expf_v(DCK_TM_GELU_M2Z(v)));
        dck_vstore(sig + i, s);
        dck_vstore(y + i, v * s);
    }
    for (; i < n; i++) {
        float s = dck_tm_gelu_sig(x[i]);
        sig[i] = s;
        y[i] = x[i] * s;
    }
}

void dck_gelu_grad_n(const float *x, const float *sig, float *d, size_t n) {
    size_t i = 0;
    for (; i + DCK_VF <= n; i += DCK_VF) {
        dck_vf v = dck_vload(x + i), s = dck_vload(sig + i);
        dck_vstore(d + i, dck_vload(d + i) * DCK_TM_GELU_GRAD(v, s));
    }
    for (; i < n; i++) d[i] = d[i] * DCK_TM_GELU_GRAD(x[i], sig[i]);
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

uint16_t dck_f32_to_bf16(float x) { return dck_tm_f32_to_bf16(x); }
float dck_bf16_to_f32(uint16_t h) { return dck_tm_bf16_to_f32(h); }

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


/* A small decoder-only transformer (GPT-2 layout, pre-LayerNorm), forward and
 * backward by hand. Every sum runs in a fixed order that depends only on the
 * shapes: dot products through dck_dot (8 lanes), matrix products as
 * y = b + x0 w0 + x1 w1 + ... in input order, gradient accumulation over
 * tokens in token order and over sequences in sequence order. One thread
 * owns one microbatch, so the bits never depend on thread count.
 *
 * Weights are stored [in, out] (as GPT-2's Conv1D) so the forward product
 * and the weight gradient vectorise across the output without reordering
 * any sum: the kernels below put one output in each vector lane
 * (train_vec.h) and run that output's sum alone, in the scalar order, so the
 * bits are those of the plain loops for any vector width or compiler (a
 * CUDA twin runs the same per-output loop, one output per thread). The
 * input gradient keeps dck_dot's 8 lanes.
 *
 * In bf16 mode the forward pass sees bf16-rounded weights and rounds every
 * activation to bf16 (round-to-nearest-even); accumulation, logits, loss
 * and gradients stay fp32. */
#include "train/train.h"
#include "train/train_vec.h"
#include "gpu/gpu_train_math.h" /* the per-element formulas, shared with cuda/train.cu */

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void add_param(dck_model *m, const char *name, int ndim, uint64_t d0, uint64_t d1,
                      bool decay, float std, float value) {
    dck_param *p = &m->params[m->nparams++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = ndim;
    p->shape[0] = d0;
    p->shape[1] = ndim > 1 ? d1 : 0;
    p->numel = (size_t)d0 * (ndim > 1 ? (size_t)d1 : 1);
    p->row = ndim > 1 ? (size_t)d1 : 1;
    p->offset = m->total;
    p->decay = decay;
    p->init_std = std;
    p->init_value = value;
    m->total += p->numel;
}

dck_status dck_model_init(dck_model *m, const dck_train_config *cfg) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    size_t n = 5 + (size_t)BP_COUNT * (size_t)cfg->layers;
    m->params = dck_xcalloc(n, sizeof *m->params);
    if (!m->params) return dck_oom("train");
    uint64_t V = (uint64_t)cfg->vocab, S = (uint64_t)cfg->seq, d = (uint64_t)cfg->width;
    float std = 0.02f;
    float std_out = 0.02f / sqrtf(2.0f * (float)cfg->layers);
    char name[96];
    m->i_wte = m->nparams;
    add_param(m, "model.wte.weight", 2, V, d, true, std, 0);
    m->i_wpe = m->nparams;
    add_param(m, "model.wpe.weight", 2, S, d, true, std, 0);
    m->i_block0 = m->nparams;
    for (int l = 0; l < cfg->layers; l++) {
#define P(suffix, nd, a, b, dec, sd, val)                                    \
    snprintf(name, sizeof name, "model.blocks.%d.%s", l, suffix);              \
    add_param(m, name, nd, a, b, dec, sd, val)
        P("ln1.weight", 1, d, 0, false, 0, 1.0f);
        P("ln1.bias", 1, d, 0, false, 0, 0.0f);
        P("attn.qkv.weight", 2, d, 3 * d, true, std, 0);
        P("attn.qkv.bias", 1, 3 * d, 0, false, 0, 0.0f);
        P("attn.proj.weight", 2, d, d, true, std_out, 0);
        P("attn.proj.bias", 1, d, 0, false, 0, 0.0f);
        P("ln2.weight", 1, d, 0, false, 0, 1.0f);
        P("ln2.bias", 1, d, 0, false, 0, 0.0f);
        P("mlp.fc.weight", 2, d, 4 * d, true, std, 0);
        P("mlp.fc.bias", 1, 4 * d, 0, false, 0, 0.0f);
        P("mlp.proj.weight", 2, 4 * d, d, true, std_out, 0);
        P("mlp.proj.bias", 1, d, 0, false, 0, 0.0f);
#undef P
    }
    m->i_lnf_w = m->nparams;
    add_param(m, "model.ln_f.weight", 1, d, 0, false, 0, 1.0f);
    m->i_lnf_b = m->nparams;
    add_param(m, "model.ln_f.bias", 1, d, 0, false, 0, 0.0f);
    m->i_head = m->nparams;
    add_param(m, "model.lm_head.weight", 2, d, V, true, std, 0);
    return DCK_OK;
}

void dck_model_release(dck_model *m) {
    if (!m) return;
    free(m->params);
    m->params = NULL;
    m->nparams = 0;
}

long dck_model_find(const dck_model *m, const char *name) {
    for (size_t i = 0; i < m->nparams; i++)
        if (!strcmp(m->params[i].name, name)) return (long)i;
    return -1;
}

void dck_model_init_weights(const dck_model *m, float *master) {
    for (size_t t = 0; t < m->nparams; t++) {
        const dck_param *p = &m->params[t];
        float *w = master + p->offset;
        if (p->init_std == 0.0f) {
            for (size_t e = 0; e < p->numel; e++) w[e] = p->init_value;
            continue;
        }
        /* uniform with the given standard deviation: (2u - 1) sqrt(3) std */
        float a = p->init_std * 1.7320508075688772f;
        for (size_t e = 0; e < p->numel; e++) {
            uint32_t u = dck_philox_u32(m->cfg.seed, (uint32_t)t, (uint32_t)e,
                                        (uint32_t)((uint64_t)e >> 32), 0x1417u);
            float x = (float)(u >> 8) * (1.0f / 16777216.0f);
            w[e] = (x * 2.0f - 1.0f) * a;
        }
    }
}

/* ------------------------------------------------------------------ workspace */

typedef struct {
    float *x_in, *ln1, *mean1, *rstd1, *qkv, *probs, *att, *x_mid, *ln2, *mean2, *rstd2, *fc, *gel;
    float *sig; /* GELU's sigmoid of fc, for the backward pass */
} layer_cache;

struct dck_workspace {
    int S, d, H, F, V, L;
    layer_cache *lc;
    float *x_fin, *lnf, *meanf, *rstdf, *logits;
    float *dx, *dtmp, *dqkv, *datt, *dfc, *dln, *tmp, *row;
    float *ds; /* S x S: one head's score gradients */
    float *block; /* one allocation for everything above */
};

dck_workspace *dck_workspace_create(const dck_model *m) {
    const dck_train_config *c = &m->cfg;
    dck_workspace *w = dck_xcalloc(1, sizeof *w);
    if (!w) return NULL;
    w->S = c->seq;
    w->d = c->width;
    w->H = c->heads;
    w->F = 4 * c->width;
    w->V = c->vocab;
    w->L = c->layers;
    size_t S = (size_t)w->S, d = (size_t)w->d, H = (size_t)w->H, F = (size_t)w->F,
           V = (size_t)w->V;
    size_t wide = V > F ? V : F; /* F = 4d > d */
    size_t rowlen = S > wide ? S : wide;
    size_t per_layer = S * d * 5 + S * 4 + S * 3 * d + H * S * S + S * F * 3;
    size_t total = per_layer * (size_t)w->L + S * d * 2 + S * 2 + S * V /* final */
                   + S * d * 4 + S * 3 * d + S * F + S * wide + rowlen + S * S /* scratch */;
    w->lc = dck_xcalloc((size_t)w->L, sizeof *w->lc);
    w->block = dck_xcalloc(total, sizeof(float));
    if (!w->lc || !w->block) {
        dck_workspace_free(w);
        return NULL;
    }
    float *p = w->block;
#define TAKE(ptr, n) (ptr = p, p += (n))
    for (int l = 0; l < w->L; l++) {
        layer_cache *lc = &w->lc[l];
        TAKE(lc->x_in, S * d);
        TAKE(lc->ln1, S * d);
        TAKE(lc->mean1, S);
        TAKE(lc->rstd1, S);
        TAKE(lc->qkv, S * 3 * d);
        TAKE(lc->probs, H * S * S);
        TAKE(lc->att, S * d);
        TAKE(lc->x_mid, S * d);
        TAKE(lc->ln2, S * d);
        TAKE(lc->mean2, S);
        TAKE(lc->rstd2, S);
        TAKE(lc->fc, S * F);
        TAKE(lc->gel, S * F);
        TAKE(lc->sig, S * F);
    }
    TAKE(w->x_fin, S * d);
    TAKE(w->lnf, S * d);
    TAKE(w->meanf, S);
    TAKE(w->rstdf, S);
    TAKE(w->logits, S * V);
    TAKE(w->dx, S * d);
    TAKE(w->dtmp, S * d);
    TAKE(w->datt, S * d);
    TAKE(w->dln, S * d);
    TAKE(w->dqkv, S * 3 * d);
    TAKE(w->dfc, S * F);
    TAKE(w->tmp, S * wide);
    TAKE(w->row, rowlen);
    TAKE(w->ds, S * S);
#undef TAKE
    return w;
}

void dck_workspace_free(dck_workspace *w) {
    if (!w) return;
    free(w->lc);
    free(w->block);
    free(w);
}

/* ------------------------------------------------------------------ kernels */

static void round_bf16(float *x, size_t n, bool bf16) {
    if (bf16) dck_bf16_round_n(x, n);
}

/* Elementwise, DCK_VF lanes at a time: y = a + b; y = x - s; y = x / s;
 * y = x * s (s one float). */
static void v_add(float *y, const float *a, const float *b, size_t n) {
    size_t i = 0;
    for (; i + DCK_VF <= n; i += DCK_VF) dck_vstore(y + i, dck_vload(a + i) + dck_vload(b + i));
    for (; i < n; i++) y[i] = a[i] + b[i];
}

static void v_sub_s(float *y, const float *x, float s, size_t n) {
    size_t i = 0;
    for (; i + DCK_VF <= n; i += DCK_VF) dck_vstore(y + i, dck_vload(x + i) - s);
    for (; i < n; i++) y[i] = x[i] - s;
}

static void v_div_s(float *y, const float *x, float s, size_t n) {
    size_t i = 0;
    for (; i + DCK_VF <= n; i += DCK_VF) dck_vstore(y + i, dck_vload(x + i) / s);
    for (; i < n; i++) y[i] = x[i] / s;
}

static void v_mul_s(float *y, const float *x, float s, size_t n) {
    size_t i = 0;
    for (; i + DCK_VF <= n; i += DCK_VF) dck_vstore(y + i, dck_vload(x + i) * s);
    for (; i < n; i++) y[i] = x[i] * s;
}

/* Matrix products, vectorised across outputs: each output's sum runs alone,
 * in its own lane, in the order of the scalar loop
 *   C[r][n] = init + A(r,0) B[0][n] + A(r,1) B[1][n] + ... + A(r,K-1) B[K-1][n]
 * (k ascending, one rounding per * and per +), with A(r,k) = A[r*ar + k*ak]
 * and init = init[r*init_rs + n] (a bias: init_rs 0; C itself: accumulate)
 * or +0 (init NULL). A block holds 4 rows x 2 vectors of outputs in
 * registers over the whole k loop; the edges take one vector and then one
 * output at a time, with the same sum. */
typedef struct {
    const float *A;
    size_t ar, ak;
    const float *B;
    size_t ldb;
    const float *init;
    size_t init_rs;
    float *C;
    size_t ldc;
    size_t K;
} mm_args;

/* 4 rows x 2 vectors of outputs. */
static void mm_4x2(const mm_args *m, size_t r0, size_t n0) {
    const size_t V = DCK_VF;
    dck_vf c00, c01, c10, c11, c20, c21, c30, c31;
    if (m->init) {
        const float *p = m->init + r0 * m->init_rs + n0;
        size_t rs = m->init_rs;
        c00 = dck_vload(p), c01 = dck_vload(p + V);
        c10 = dck_vload(p + rs), c11 = dck_vload(p + rs + V);
        c20 = dck_vload(p + 2 * rs), c21 = dck_vload(p + 2 * rs + V);
        c30 = dck_vload(p + 3 * rs), c31 = dck_vload(p + 3 * rs + V);
    } else {
        c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = (dck_vf){0};
    }
    const float *a = m->A + r0 * m->ar, *b = m->B + n0;
    size_t ar = m->ar;
    for (size_t k = 0; k < m->K; k++, a += m->ak, b += m->ldb) {
        dck_vf w0 = dck_vload(b), w1 = dck_vload(b + V);
        float x0 = a[0], x1 = a[ar], x2 = a[2 * ar], x3 = a[3 * ar];
        c00 += x0 * w0;
        c01 += x0 * w1;
        c10 += x1 * w0;
        c11 += x1 * w1;
        c20 += x2 * w0;
        c21 += x2 * w1;
        c30 += x3 * w0;
        c31 += x3 * w1;
    }
    float *c = m->C + r0 * m->ldc + n0;
    size_t ldc = m->ldc;
    dck_vstore(c, c00), dck_vstore(c + V, c01);
    dck_vstore(c + ldc, c10), dck_vstore(c + ldc + V, c11);
    dck_vstore(c + 2 * ldc, c20), dck_vstore(c + 2 * ldc + V, c21);
    dck_vstore(c + 3 * ldc, c30), dck_vstore(c + 3 * ldc + V, c31);
}

/* 1 row x 1 vector of outputs: the edges. */
static void mm_1x1(const mm_args *m, size_t r, size_t n0) {
    dck_vf c = m->init ? dck_vload(m->init + r * m->init_rs + n0) : (dck_vf){0};
    const float *a = m->A + r * m->ar, *b = m->B + n0;
    for (size_t k = 0; k < m->K; k++, a += m->ak, b += m->ldb) c += *a * dck_vload(b);
    dck_vstore(m->C + r * m->ldc + n0, c);
}

/* 1 row x 1 output: the last outputs of a row, fewer than a vector. */
static void mm_one(const mm_args *m, size_t r, size_t n) {
    float c = m->init ? m->init[r * m->init_rs + n] : 0.0f;
    const float *a = m->A + r * m->ar, *b = m->B + n;
    for (size_t k = 0; k < m->K; k++, a += m->ak, b += m->ldb) c += *a * *b;
    m->C[r * m->ldc + n] = c;
}

static void mm(const mm_args *m, size_t R, size_t N) {
    size_t nb = N - N % (2 * DCK_VF), nv = N - N % DCK_VF;
    size_t r = 0;
    for (; r + 4 <= R; r += 4)
        for (size_t n = 0; n < nb; n += 2 * DCK_VF) mm_4x2(m, r, n);
    for (size_t r1 = 0; r1 < R; r1++) {
        for (size_t n = r1 < r ? nb : 0; n < nv; n += DCK_VF) mm_1x1(m, r1, n);
        for (size_t n = nv; n < N; n++) mm_one(m, r1, n);
    }
}

/* C[t][i] = dck_dot(A + t lda, B + i ldb, n) for t < T, i < I: 2 x 2 dot
 * products at once, each in its own 8 lanes (two 4-float vectors: lanes
 * 0-3, 4-7) exactly as dck_dot keeps them; the tail and the combination are
 * dck_dot's. */
typedef float v4f __attribute__((vector_size(16)));
typedef float v4f_u __attribute__((vector_size(16), aligned(4), may_alias));
#define LD4(p) (*(const v4f_u *)(const void *)(p))

static float dot_finish(v4f lo, v4f hi, const float *a, const float *b, size_t n8, size_t n) {
    float lanes[8];
    memcpy(lanes, &lo, 16);
    memcpy(lanes + 4, &hi, 16);
    for (size_t j = n8; j < n; j++) lanes[j - n8] += a[j] * b[j];
    return dck_lanes8_combine(lanes);
}

static void dots_2x2(const float *A, size_t lda, const float *B, size_t ldb, size_t n, float *C,
                     size_t ldc) {
    const float *a0 = A, *a1 = A + lda, *b0 = B, *b1 = B + ldb;
    v4f s00l = {0}, s00h = {0}, s01l = {0}, s01h = {0}, s10l = {0}, s10h = {0}, s11l = {0},
        s11h = {0};
    size_t n8 = n - n % 8;
    for (size_t j = 0; j < n8; j += 8) {
        v4f a0l = LD4(a0 + j), a0h = LD4(a0 + j + 4), a1l = LD4(a1 + j), a1h = LD4(a1 + j + 4);
        v4f b0l = LD4(b0 + j), b0h = LD4(b0 + j + 4), b1l = LD4(b1 + j), b1h = LD4(b1 + j + 4);
        s00l += a0l * b0l;
        s00h += a0h * b0h;
        s01l += a0l * b1l;
        s01h += a0h * b1h;
        s10l += a1l * b0l;
        s10h += a1h * b0h;
        s11l += a1l * b1l;
        s11h += a1h * b1h;
    }
    if (n8 < n) {
        C[0] = dot_finish(s00l, s00h, a0, b0, n8, n);
        C[1] = dot_finish(s01l, s01h, a0, b1, n8, n);
        C[ldc] = dot_finish(s10l, s10h, a1, b0, n8, n);
        C[ldc + 1] = dot_finish(s11l, s11h, a1, b1, n8, n);
        return;
    }
    /* no tail: combine the four dot products' lanes side by side, lane k of
     * each in x_k, as ((x0+x1)+(x2+x3))+((x4+x5)+(x6+x7)) */
    v4f x0 = {s00l[0], s01l[0], s10l[0], s11l[0]}, x1 = {s00l[1], s01l[1], s10l[1], s11l[1]};
    v4f x2 = {s00l[2], s01l[2], s10l[2], s11l[2]}, x3 = {s00l[3], s01l[3], s10l[3], s11l[3]};
    v4f x4 = {s00h[0], s01h[0], s10h[0], s11h[0]}, x5 = {s00h[1], s01h[1], s10h[1], s11h[1]};
    v4f x6 = {s00h[2], s01h[2], s10h[2], s11h[2]}, x7 = {s00h[3], s01h[3], s10h[3], s11h[3]};
    v4f r = ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7));
    C[0] = r[0];
    C[1] = r[1];
    C[ldc] = r[2];
    C[ldc + 1] = r[3];
}

static void dots(size_t T, size_t I, size_t n, const float *A, size_t lda, const float *B,
                 size_t ldb, float *C, size_t ldc) {
    size_t t = 0;
    for (; t + 2 <= T; t += 2) {
        size_t i = 0;
        for (; i + 2 <= I; i += 2) dots_2x2(A + t * lda, lda, B + i * ldb, ldb, n, C + t * ldc + i, ldc);
        for (; i < I; i++) {
            C[t * ldc + i] = dck_dot(A + t * lda, B + i * ldb, n);
            C[(t + 1) * ldc + i] = dck_dot(A + (t + 1) * lda, B + i * ldb, n);
        }
    }
    for (; t < T; t++)
        for (size_t i = 0; i < I; i++) C[t * ldc + i] = dck_dot(A + t * lda, B + i * ldb, n);
}

/* The same for j <= t only (C[t][j] = dck_dot(A + t lda, B + j ldb, n)):
 * pairs of rows against pairs of columns up to the diagonal; the block on
 * the diagonal also writes C[t][t+1] of its even row t (unused, as every
 * entry above the diagonal). */
static void dots_lower(size_t T, size_t n, const float *A, size_t lda, const float *B, size_t ldb,
                       float *C, size_t ldc) {
    size_t t = 0;
    for (; t + 2 <= T; t += 2)
        for (size_t j = 0; j <= t; j += 2)
            dots_2x2(A + t * lda, lda, B + j * ldb, ldb, n, C + t * ldc + j, ldc);
    for (; t < T; t++)
        for (size_t j = 0; j <= t; j++) C[t * ldc + j] = dck_dot(A + t * lda, B + j * ldb, n);
}

/* C[0..n) = sum_k a[k ak] B[k ldb + 0..n), k ascending from +0 (mm, one row). */
static void wsum(float *C, size_t n, const float *a, size_t ak, size_t K, const float *B,
                 size_t ldb) {
    mm_args m = {a, 0, ak, B, ldb, NULL, 0, C, 0, K};
    mm(&m, 1, n);
}

/* Y[t] = b + sum_i X[t][i] W[i], i ascending (b NULL: from +0). */
static void linear_fwd(const float *X, size_t S, size_t in, size_t out, const float *W,
                       const float *b, float *Y) {
    mm_args m = {X, in, 1, W, out, b, 0, Y, out, in};
    mm(&m, S, out);
}

/* dX = dY W^T (dck_dot's products), dW += X^T dY and db += dY, each
 * element's sum over tokens in token order. */
static void linear_bwd(const float *dY, const float *X, size_t S, size_t in, size_t out,
                       const float *W, float *dW, float *db, float *dX) {
    if (dX) dots(S, in, out, dY, out, W, out, dX, in);
    mm_args m = {X, 1, in, dY, out, dW, out, dW, out, S};
    mm(&m, in, out);
    if (db) {
        size_t o = 0;
        for (; o + DCK_VF <= out; o += DCK_VF) {
            dck_vf acc = dck_vload(db + o);
            for (size_t t = 0; t < S; t++) acc += dck_vload(dY + t * out + o);
            dck_vstore(db + o, acc);
        }
        for (; o < out; o++)
            for (size_t t = 0; t < S; t++) db[o] += dY[t * out + o];
    }
}

static void layernorm_fwd(const float *X, size_t S, size_t d, const float *w, const float *b,
                          float *Y, float *mean, float *rstd, float *tmp, bool bf16) {
    float inv_d = 1.0f / (float)d;
    for (size_t t = 0; t < S; t++) {
        const float *x = X + t * d;
        float mu = dck_sum(x, d) * inv_d;
        v_sub_s(tmp, x, mu, d);
        float var = dck_dot(tmp, tmp, d) * inv_d;
        float rs = dck_tm_ln_rstd(var);
        float *y = Y + t * d;
        size_t c = 0;
        for (; c + DCK_VF <= d; c += DCK_VF)
            dck_vstore(y + c, DCK_TM_LN_OUT(dck_vload(tmp + c), rs, dck_vload(w + c), dck_vload(b + c)));
        for (; c < d; c++) y[c] = DCK_TM_LN_OUT(tmp[c], rs, w[c], b[c]);
        mean[t] = mu;
        rstd[t] = rs;
    }
    round_bf16(Y, S * d, bf16);
}

/* dX = (or +=, with accumulate) the input gradient; dw, db accumulate. */
static void layernorm_bwd(const float *dY, const float *X, size_t S, size_t d, const float *w,
                          const float *mean, const float *rstd, float *dw, float *db, float *dX,
                          bool accumulate, float *xhat, float *dxhat) {
    float inv_d = 1.0f / (float)d;
    for (size_t t = 0; t < S; t++) {
        const float *x = X + t * d;
        const float *dy = dY + t * d;
        float rs = rstd[t], mu = mean[t];
        size_t c = 0;
        for (; c + DCK_VF <= d; c += DCK_VF) {
            dck_vf xh = (dck_vload(x + c) - mu) * rs, g = dck_vload(dy + c);
            dck_vstore(xhat + c, xh);
            dck_vstore(dxhat + c, g * dck_vload(w + c));
            dck_vstore(dw + c, dck_vload(dw + c) + g * xh);
            dck_vstore(db + c, dck_vload(db + c) + g);
        }
        for (; c < d; c++) {
            xhat[c] = (x[c] - mu) * rs;
            dxhat[c] = dy[c] * w[c];
            dw[c] += dy[c] * xhat[c];
            db[c] += dy[c];
        }
        float m1 = dck_sum(dxhat, d) * inv_d;
        float m2 = dck_dot(dxhat, xhat, d) * inv_d;
        float *dx = dX + t * d;
        for (c = 0; c + DCK_VF <= d; c += DCK_VF) {
            dck_vf g = DCK_TM_LN_DX(rs, dck_vload(dxhat + c), dck_vload(xhat + c), m1, m2);
            dck_vstore(dx + c, accumulate ? dck_vload(dx + c) + g : g);
        }
        for (; c < d; c++) {
            float g = DCK_TM_LN_DX(rs, dxhat[c], xhat[c], m1, m2);
            dx[c] = accumulate ? dx[c] + g : g;
        }
    }
}

/* Causal attention, one head at a time. probs (H x S x S) keeps row i of
 * head h's softmax in its first i + 1 entries; the rest is unused. */
static void attention_fwd(const float *qkv, size_t S, size_t d, size_t H, float *probs,
                          float *out, bool bf16) {
    size_t hd = d / H, d3 = 3 * d;
    float scale = 1.0f / sqrtf((float)hd);
    for (size_t h = 0; h < H; h++) {
        float *ph = probs + h * S * S;
        const float *q = qkv + h * hd, *k = qkv + d + h * hd, *v = qkv + 2 * d + h * hd;
        dots_lower(S, hd, q, d3, k, d3, ph, S); /* q_i . k_j */
        for (size_t i = 0; i < S; i++) {
            float *p = ph + i * S;
            float mx = -3.0e38f;
            for (size_t j = 0; j <= i; j++) {
                p[j] = p[j] * scale;
                if (p[j] > mx) mx = p[j];
            }
            v_sub_s(p, p, mx, i + 1);
            dck_expf_n(p, i + 1);
            float sum = 0.0f;
            for (size_t j = 0; j <= i; j++) sum += p[j];
            v_div_s(p, p, sum, i + 1);
            wsum(out + i * d + h * hd, hd, p, 1, i + 1, v, d3); /* sum_j p_j v_j */
        }
    }
    round_bf16(out, S * d, bf16);
}

/* dq_i = sum_{j<=i} ds_ij k_j (j ascending), dk_j = sum_{i>=j} ds_ij q_i and
 * dv_j = sum_{i>=j} p_ij g_i (i ascending), each from +0. */
static void attention_bwd(const float *dout, const float *qkv, const float *probs, size_t S,
                          size_t d, size_t H, float *dqkv, float *ds) {
    size_t hd = d / H, d3 = 3 * d;
    float scale = 1.0f / sqrtf((float)hd);
    for (size_t h = 0; h < H; h++) {
        const float *ph = probs + h * S * S, *g = dout + h * hd;
        const float *q = qkv + h * hd, *k = qkv + d + h * hd, *v = qkv + 2 * d + h * hd;
        float *dq = dqkv + h * hd, *dk = dqkv + d + h * hd, *dv = dqkv + 2 * d + h * hd;
        dots_lower(S, hd, g, d, v, d3, ds, S); /* dp_ij = g_i . v_j */
        for (size_t i = 0; i < S; i++) {
            const float *p = ph + i * S;
            float *dsi = ds + i * S;
            float sum_pd = 0.0f;
            for (size_t j = 0; j <= i; j++) sum_pd += p[j] * dsi[j];
            size_t j = 0;
            for (; j + DCK_VF <= i + 1; j += DCK_VF)
                dck_vstore(dsi + j, DCK_TM_SOFTMAX_DS(dck_vload(p + j), dck_vload(dsi + j), sum_pd, scale));
            for (; j <= i; j++) dsi[j] = DCK_TM_SOFTMAX_DS(p[j], dsi[j], sum_pd, scale);
        }
        for (size_t i = 0; i < S; i++) {
            wsum(dq + i * d3, hd, ds + i * S, 1, i + 1, k, d3);
            wsum(dk + i * d3, hd, ds + i * S + i, S, S - i, q + i * d3, d3);
            wsum(dv + i * d3, hd, ph + i * S + i, S, S - i, g + i * d, d);
        }
    }
}

/* ------------------------------------------------------------------ one microbatch */

static const float *P(const dck_model *m, const float *w, size_t i) {
    return w + m->params[i].offset;
}
static float *G(const dck_model *m, float *g, size_t i) { return g + m->params[i].offset; }

/* Forward and backward of one sequence; returns its summed token loss. */
static float sequence(const dck_model *m, dck_workspace *ws, const float *w,
                      const uint16_t *tok, float *grad, float inv_ntok) {
    size_t S = (size_t)ws->S, d = (size_t)ws->d, H = (size_t)ws->H, F = (size_t)ws->F,
           V = (size_t)ws->V;
    bool bf16 = m->cfg.precision == DCK_PREC_BF16;
    const float *wte = P(m, w, m->i_wte), *wpe = P(m, w, m->i_wpe);
    float *x = ws->lc[0].x_in;
    if (ws->L == 0) x = ws->x_fin;
    for (size_t t = 0; t < S; t++) v_add(x + t * d, wte + (size_t)tok[t] * d, wpe + t * d, d);
    round_bf16(x, S * d, bf16);

    for (int l = 0; l < ws->L; l++) {
        layer_cache *lc = &ws->lc[l];
        size_t b = m->i_block0 + (size_t)l * BP_COUNT;
        float *next = l + 1 < ws->L ? ws->lc[l + 1].x_in : ws->x_fin;
        layernorm_fwd(lc->x_in, S, d, P(m, w, b + BP_LN1_W), P(m, w, b + BP_LN1_B), lc->ln1,
                      lc->mean1, lc->rstd1, ws->row, bf16);
        linear_fwd(lc->ln1, S, d, 3 * d, P(m, w, b + BP_QKV_W), P(m, w, b + BP_QKV_B), lc->qkv);
        round_bf16(lc->qkv, S * 3 * d, bf16);
        attention_fwd(lc->qkv, S, d, H, lc->probs, lc->att, bf16);
        linear_fwd(lc->att, S, d, d, P(m, w, b + BP_PROJ_W), P(m, w, b + BP_PROJ_B), ws->tmp);
        round_bf16(ws->tmp, S * d, bf16);
        v_add(lc->x_mid, lc->x_in, ws->tmp, S * d);
        round_bf16(lc->x_mid, S * d, bf16);
        layernorm_fwd(lc->x_mid, S, d, P(m, w, b + BP_LN2_W), P(m, w, b + BP_LN2_B), lc->ln2,
                      lc->mean2, lc->rstd2, ws->row, bf16);
        linear_fwd(lc->ln2, S, d, F, P(m, w, b + BP_FC_W), P(m, w, b + BP_FC_B), lc->fc);
        round_bf16(lc->fc, S * F, bf16);
        dck_gelu_n(lc->fc, lc->gel, lc->sig, S * F);
        round_bf16(lc->gel, S * F, bf16);
        linear_fwd(lc->gel, S, F, d, P(m, w, b + BP_FC2_W), P(m, w, b + BP_FC2_B), ws->tmp);
        round_bf16(ws->tmp, S * d, bf16);
        v_add(next, lc->x_mid, ws->tmp, S * d);
        round_bf16(next, S * d, bf16);
    }
    layernorm_fwd(ws->x_fin, S, d, P(m, w, m->i_lnf_w), P(m, w, m->i_lnf_b), ws->lnf, ws->meanf,
                  ws->rstdf, ws->row, bf16);
    linear_fwd(ws->lnf, S, d, V, P(m, w, m->i_head), NULL, ws->logits);
    if (m->tap) dck_train_tap_activations(m, ws->block, (size_t)(ws->logits - ws->block) + S * V);

    /* cross-entropy; logits become d loss / d logits in place */
    float loss = 0.0f;
    for (size_t t = 0; t < S; t++) {
        float *lg = ws->logits + t * V;
        float mx = lg[0];
        for (size_t v = 1; v < V; v++)
            if (lg[v] > mx) mx = lg[v];
        v_sub_s(ws->tmp, lg, mx, V);
        dck_expf_n(ws->tmp, V);
        float sum = 0.0f;
        for (size_t v = 0; v < V; v++) sum += ws->tmp[v];
        size_t target = tok[t + 1];
        float lse = mx + dck_logf(sum);
        loss += lse - lg[target];
        v_div_s(lg, ws->tmp, sum, V);
        v_mul_s(lg, lg, inv_ntok, V);
        lg[target] -= inv_ntok;
    }

    /* backward */
    float *dx = ws->dx;
    linear_bwd(ws->logits, ws->lnf, S, d, V, P(m, w, m->i_head), G(m, grad, m->i_head), NULL,
               ws->dln);
    layernorm_bwd(ws->dln, ws->x_fin, S, d, P(m, w, m->i_lnf_w), ws->meanf, ws->rstdf,
                  G(m, grad, m->i_lnf_w), G(m, grad, m->i_lnf_b), dx, false, ws->row, ws->tmp);
    for (int l = ws->L - 1; l >= 0; l--) {
        layer_cache *lc = &ws->lc[l];
        size_t b = m->i_block0 + (size_t)l * BP_COUNT;
        /* next = x_mid + fc2(gelu(fc(ln2(x_mid)))) */
        linear_bwd(dx, lc->gel, S, F, d, P(m, w, b + BP_FC2_W), G(m, grad, b + BP_FC2_W),
                   G(m, grad, b + BP_FC2_B), ws->dfc);
        dck_gelu_grad_n(lc->fc, lc->sig, ws->dfc, S * F);
        linear_bwd(ws->dfc, lc->ln2, S, d, F, P(m, w, b + BP_FC_W), G(m, grad, b + BP_FC_W),
                   G(m, grad, b + BP_FC_B), ws->dln);
        layernorm_bwd(ws->dln, lc->x_mid, S, d, P(m, w, b + BP_LN2_W), lc->mean2, lc->rstd2,
                      G(m, grad, b + BP_LN2_W), G(m, grad, b + BP_LN2_B), dx, true, ws->row,
                      ws->tmp);
        /* x_mid = x_in + proj(attn(qkv(ln1(x_in)))) */
        linear_bwd(dx, lc->att, S, d, d, P(m, w, b + BP_PROJ_W), G(m, grad, b + BP_PROJ_W),
                   G(m, grad, b + BP_PROJ_B), ws->datt);
        attention_bwd(ws->datt, lc->qkv, lc->probs, S, d, H, ws->dqkv, ws->ds);
        linear_bwd(ws->dqkv, lc->ln1, S, d, 3 * d, P(m, w, b + BP_QKV_W),
                   G(m, grad, b + BP_QKV_W), G(m, grad, b + BP_QKV_B), ws->dln);
        layernorm_bwd(ws->dln, lc->x_in, S, d, P(m, w, b + BP_LN1_W), lc->mean1, lc->rstd1,
                      G(m, grad, b + BP_LN1_W), G(m, grad, b + BP_LN1_B), dx, true, ws->row,
                      ws->tmp);
    }
    float *dwte = G(m, grad, m->i_wte), *dwpe = G(m, grad, m->i_wpe);
    for (size_t t = 0; t < S; t++) {
        float *a = dwte + (size_t)tok[t] * d, *p = dwpe + t * d;
        const float *g = dx + t * d;
        v_add(a, a, g, d);
        v_add(p, p, g, d);
    }
    return loss;
}

float dck_model_microbatch(const dck_model *m, dck_workspace *ws, const float *w,
                           const uint16_t *tokens, float *grad) {
    size_t B = (size_t)m->cfg.batch, S = (size_t)m->cfg.seq;
    memset(grad, 0, m->total * sizeof(float));
    float inv_ntok = 1.0f / (float)(B * S);
    float loss = 0.0f;
    for (size_t s = 0; s < B; s++) loss += sequence(m, ws, w, tokens + s * (S + 1), grad, inv_ntok);
    return loss / (float)(B * S);
}

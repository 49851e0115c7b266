/* The trainer's step on a device (detcheck-gpu(7), TRAINING): the host side of the kernels of
 * cuda/train.cu, over a backend (the CUDA runtime, or the kernels' CPU twin).
 *
 * The launches below are the CPU trainer's sequence() (src/train/
 * train_model.c) for the whole microbatch at once: B sequences of S tokens
 * are N = B S rows. Every per-sequence operation of the CPU is per row here
 * and computes the same bits (gpu_train_kernels.h gives each kernel's
 * order); the CPU's weight-gradient accumulation over sequences, one
 * sequence after the other into the same buffer, is one chain over the N
 * rows. In bf16 mode the same tensors are rounded at the same points. */
#include "common/common.h"
#include "gpu/gpu_blas.h"
#include "gpu/gpu_train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DCK_TK_MAX_TREE 256 /* ranks: DCK_TRAIN_MAX_RANKS */

typedef struct {
    float *x_in, *ln1, *mean1, *rstd1, *qkv, *probs, *att, *x_mid, *ln2, *mean2, *rstd2, *fc, *gel,
        *sig;
} gt_layer;

struct dck_gt {
    dck_gt_model m;
    size_t *off_block; /* own copy */
    size_t *t_offset, *t_numel;
    bool *t_decay;
    dck_tk_backend be;
    int nbufs;
    size_t lo, hi, P;
    size_t N, d, H, F, V, S, B, L;
    /* device memory */
    float *master, *wparams, *m1, *m2;
    float **gbuf;
    float *gather; /* K x P, on first use */
    int gather_k;
    float *act; /* every activation of the forward pass, one block */
    size_t act_len;
    gt_layer *lc;
    float *x_fin, *lnf, *meanf, *rstdf, *logits;
    float *scratch; /* the backward's buffers and small things */
    float *dx, *datt, *dln, *dqkv, *dfc, *tmp, *ds, *row_loss, *loss, *lanes, *sumsq;
    uint16_t *tok;
    uint64_t *bad; /* AdamW's first non-finite weight, as dck_tk_note_first keeps it */
    int32_t *csr; /* vocab[N], start[N + 1], pos[N] */
    int32_t *h_csr, *h_count;
    size_t bytes;
    uint32_t nuniq; /* distinct tokens of the microbatch */
    void (*act_hook)(void *, float *, size_t);
    void *act_ctx;
    float *h_act;
    dck_blas_gt *blas; /* fast mode on cuBLAS (`train --bench`), NULL: the kernels */
};

static dck_status dalloc(dck_gt *g, size_t bytes, void *out) {
    void *p = NULL;
    DCK_TRY(g->be.alloc(g->be.ctx, bytes, &p));
    memcpy(out, &p, sizeof p);
    g->bytes += bytes;
    return DCK_OK;
}

/* ------------------------------------------------------------------ launch geometry
 * A logical grid of blocks, cut into launches within CUDA's limits (x: 2^31
 * - 1 blocks, y and z: 65535), each told its origin (gpu_train_kernels.h).
 * The dots' and the matrix products' row tiles are the y dimension: 65535 y
 * blocks of 32 rows end at 2,097,120 tokens per microbatch, far inside what
 * --batch and --seq allow. */
static dck_tk_limits launch_limits = {DCK_TK_GRID_X_MAX, DCK_TK_GRID_YZ_MAX};

dck_tk_limits dck_tk_launch_limits(void) { return launch_limits; }

void dck_tk_set_launch_limits(dck_tk_limits lim) {
    launch_limits.x = lim.x && lim.x <= DCK_TK_GRID_X_MAX ? lim.x : DCK_TK_GRID_X_MAX;
    launch_limits.yz = lim.yz && lim.yz <= DCK_TK_GRID_YZ_MAX ? lim.yz : DCK_TK_GRID_YZ_MAX;
}

static uint64_t pieces(uint64_t n, uint32_t lim) { return (n + lim - 1) / lim; }

uint64_t dck_tk_launch_count(dck_tk_blocks b, dck_tk_limits lim) {
    if (!b.x || !b.y || !b.z || b.x > UINT32_MAX || b.y > UINT32_MAX || b.z > UINT32_MAX ||
        !lim.x || !lim.yz)
        return 0;
    return pieces(b.x, lim.x) * pieces(b.y, lim.yz) * pieces(b.z, lim.yz);
}

static uint32_t piece_len(uint64_t n, uint64_t at, uint32_t lim) {
    return (uint32_t)(n - at < lim ? n - at : lim);
}

dck_tk_grid dck_tk_launch_piece(dck_tk_blocks b, dck_tk_limits lim, uint64_t i) {
    uint64_t nx = pieces(b.x, lim.x), ny = pieces(b.y, lim.yz);
    uint64_t ix = i % nx, iy = (i / nx) % ny, iz = i / nx / ny;
    dck_tk_grid g;
    g.at.x = (uint32_t)(ix * lim.x);
    g.at.y = (uint32_t)(iy * lim.yz);
    g.at.z = (uint32_t)(iz * lim.yz);
    g.x = piece_len(b.x, g.at.x, lim.x);
    g.y = piece_len(b.y, g.at.y, lim.yz);
    g.z = piece_len(b.z, g.at.z, lim.yz);
    return g;
}

static const char *const kernel_names[] = {
#define DCK_TK_NAME_(name) #name,
    DCK_TK_KERNELS(DCK_TK_NAME_)
#undef DCK_TK_NAME_
};

dck_status dck_tk_launch(const dck_tk_backend *be, int kernel, const void *args, size_t size,
                         dck_tk_blocks b) {
    dck_tk_limits lim = launch_limits;
    uint64_t n = dck_tk_launch_count(b, lim);
    if (!n)
        return dck_set_error(DCK_ERR_LIMIT,
                             "train gpu: kernel %s: a grid of %llu x %llu x %llu blocks is beyond "
                             "any launch (at most 2^32 - 1 blocks in each dimension)",
                             kernel >= 0 && kernel < DCK_TK_COUNT ? kernel_names[kernel] : "?",
                             (unsigned long long)b.x, (unsigned long long)b.y,
                             (unsigned long long)b.z);
    for (uint64_t i = 0; i < n; i++)
        DCK_TRY(be->launch(be->ctx, kernel, args, size, dck_tk_launch_piece(b, lim, i)));
    return DCK_OK;
}

static dck_tk_blocks grid1(size_t n) {
    size_t b = (n + DCK_TK_THREADS - 1) / DCK_TK_THREADS;
    return (dck_tk_blocks){b ? b : 1, 1, 1};
}

static dck_tk_blocks blocks(size_t x, size_t y, size_t z) { return (dck_tk_blocks){x, y, z}; }

#define LAUNCH(g, kernel, args, grid) dck_tk_launch(&(g)->be, DCK_TK_##kernel, &(args), sizeof(args), grid)

static dck_status ew(dck_gt *g, int op, float *y, const float *a, const float *b, float s, size_t n,
                     bool bf16) {
    if (n == 0) return DCK_OK;
    dck_tk_ew_args x = {y, a, b, s, op, bf16 ? 1 : 0, n};
    return LAUNCH(g, ew, x, grid1(n));
}

static dck_status round_bf16(dck_gt *g, float *x, size_t n) {
    return g->m.bf16 ? ew(g, DCK_EW_ROUND, x, x, NULL, 0, n, false) : DCK_OK;
}

void dck_gt_free(dck_gt *g) {
    if (!g) return;
    void *ctx = g->be.ctx;
    if (g->be.release) {
        if (g->wparams != g->master) g->be.release(ctx, g->wparams);
        g->be.release(ctx, g->master);
        g->be.release(ctx, g->m1);
        g->be.release(ctx, g->m2);
        if (g->gbuf)
            for (int i = 0; i < g->nbufs; i++) g->be.release(ctx, g->gbuf[i]);
        g->be.release(ctx, g->gather);
        g->be.release(ctx, g->act);
        g->be.release(ctx, g->scratch);
        g->be.release(ctx, g->tok);
        g->be.release(ctx, g->csr);
        g->be.release(ctx, g->bad);
    }
    dck_blas_gt_close(g->blas);
    if (g->be.destroy) g->be.destroy(ctx);
    free(g->gbuf);
    free(g->lc);
    free(g->off_block);
    free(g->t_offset);
    free(g->t_numel);
    free(g->t_decay);
    free(g->h_csr);
    free(g->h_count);
    free(g->h_act);
    free(g);
}

size_t dck_gt_device_bytes(const dck_gt *g) { return g->bytes; }

void dck_gt_set_activation_hook(dck_gt *g, void (*fn)(void *ctx, float *act, size_t n), void *ctx) {
    g->act_hook = fn;
    g->act_ctx = ctx;
}

dck_status dck_gt_create(const dck_gt_model *m, const dck_tk_backend *be, int nbufs, size_t lo,
                         size_t hi, dck_gt **out) {
    *out = NULL;
    dck_gt *g = dck_xcalloc(1, sizeof *g);
    if (!g) {
        if (be->destroy) be->destroy(be->ctx);
        return dck_oom("train gpu");
    }
    g->be = *be;
    g->m = *m;
    g->nbufs = m->fast ? 1 : nbufs;
    if (m->fast && dck_blas_fast_mode()) {
        dck_status s = dck_blas_gt_open(be->name, dck_tk_cuda_stream(be), &g->blas);
        if (s) {
            dck_gt_free(g);
            return s;
        }
    }
    g->lo = lo;
    g->hi = hi;
    g->P = m->total;
    g->S = m->seq;
    g->B = m->batch;
    g->N = g->S * g->B;
    g->d = m->width;
    g->H = m->heads;
    g->F = 4 * g->d;
    g->V = m->vocab;
    g->L = m->layers;
    size_t N = g->N, d = g->d, F = g->F, V = g->V, S = g->S, BH = g->B * g->H, L = g->L;
    dck_status s = DCK_OK;
    /* the rows are int32 in the embedding's token lists and uint32 in the
     * kernels' arguments; 2^31 tokens' activations would need far more
     * memory than any GPU has (about 180 bytes a token at the least) */
    if (N > INT32_MAX || BH * S > UINT32_MAX) {
        dck_gt_free(g);
        return dck_set_error(DCK_ERR_LIMIT,
                             "train gpu: %zu tokens per microbatch (%zu attention rows) are beyond "
                             "the device path's 2^31 - 1",
                             N, BH * S);
    }
    g->off_block = dck_xcalloc(L * DCK_GT_BLOCK_ITEMS + 1, sizeof *g->off_block);
    g->t_offset = dck_xcalloc(m->ntensors + 1, sizeof *g->t_offset);
    g->t_numel = dck_xcalloc(m->ntensors + 1, sizeof *g->t_numel);
    g->t_decay = dck_xcalloc(m->ntensors + 1, sizeof *g->t_decay);
    g->lc = dck_xcalloc(L + 1, sizeof *g->lc);
    g->gbuf = dck_xcalloc((size_t)g->nbufs, sizeof *g->gbuf);
    g->h_csr = dck_xcalloc(3 * N + 1, sizeof *g->h_csr);
    g->h_count = dck_xcalloc(V + 1, sizeof *g->h_count);
    if (!g->off_block || !g->t_offset || !g->t_numel || !g->t_decay || !g->lc || !g->gbuf ||
        !g->h_csr || !g->h_count) {
        dck_gt_free(g);
        return dck_oom("train gpu");
    }
    memcpy(g->off_block, m->off_block, L * DCK_GT_BLOCK_ITEMS * sizeof *g->off_block);
    memcpy(g->t_offset, m->t_offset, m->ntensors * sizeof *g->t_offset);
    memcpy(g->t_numel, m->t_numel, m->ntensors * sizeof *g->t_numel);
    memcpy(g->t_decay, m->t_decay, m->ntensors * sizeof *g->t_decay);
    g->m.off_block = g->off_block;
    g->m.t_offset = g->t_offset;
    g->m.t_numel = g->t_numel;
    g->m.t_decay = g->t_decay;
    size_t P = g->P, own = hi - lo;
    s = dalloc(g, P * 4, &g->master);
    if (!s && m->bf16) s = dalloc(g, P * 4, &g->wparams);
    if (!s && !m->bf16) g->wparams = g->master;
    if (!s) s = dalloc(g, own * 4 + 4, &g->m1);
    if (!s) s = dalloc(g, own * 4 + 4, &g->m2);
    for (int i = 0; !s && i < g->nbufs; i++) s = dalloc(g, P * 4, &g->gbuf[i]);
    /* the forward pass's activations, in one block (the activation hook) */
    size_t per_layer = N * d * 5 + N * 4 + N * 3 * d + BH * S * S + N * F * 3;
    g->act_len = per_layer * L + N * d * 2 + N * 2 + N * V;
    if (!s) s = dalloc(g, g->act_len * 4, &g->act);
    if (!s) {
        float *p = g->act;
#define TAKE(ptr, n) (ptr = p, p += (n))
        for (size_t l = 0; l < L; l++) {
            gt_layer *c = &g->lc[l];
            TAKE(c->x_in, N * d);
            TAKE(c->ln1, N * d);
            TAKE(c->mean1, N);
            TAKE(c->rstd1, N);
            TAKE(c->qkv, N * 3 * d);
            TAKE(c->probs, BH * S * S);
            TAKE(c->att, N * d);
            TAKE(c->x_mid, N * d);
            TAKE(c->ln2, N * d);
            TAKE(c->mean2, N);
            TAKE(c->rstd2, N);
            TAKE(c->fc, N * F);
            TAKE(c->gel, N * F);
            TAKE(c->sig, N * F);
        }
        TAKE(g->x_fin, N * d);
        TAKE(g->lnf, N * d);
        TAKE(g->meanf, N);
        TAKE(g->rstdf, N);
        TAKE(g->logits, N * V);
        size_t chunks = (P + DCK_TK_SUMSQ_CHUNK - 1) / DCK_TK_SUMSQ_CHUNK;
        size_t scratch = N * d * 4 + N * 3 * d + N * F + BH * S * S + N + 1 + chunks * 8 + 1;
        s = dalloc(g, scratch * 4, &g->scratch);
        if (!s) {
            p = g->scratch;
            TAKE(g->dx, N * d);
            TAKE(g->datt, N * d);
            TAKE(g->dln, N * d);
            TAKE(g->tmp, N * d);
            TAKE(g->dqkv, N * 3 * d);
            TAKE(g->dfc, N * F);
            TAKE(g->ds, BH * S * S);
            TAKE(g->row_loss, N);
            TAKE(g->loss, 1);
            TAKE(g->lanes, chunks * 8);
            TAKE(g->sumsq, 1);
        }
#undef TAKE
    }
    if (!s) s = dalloc(g, g->B * (S + 1) * sizeof(uint16_t), &g->tok);
    if (!s) s = dalloc(g, (3 * N + 1) * sizeof(int32_t), &g->csr);
    if (!s) s = dalloc(g, sizeof(uint64_t), &g->bad);
    if (s) {
        dck_gt_free(g);
        return s;
    }
    *out = g;
    return DCK_OK;
}

dck_status dck_gt_upload_state(dck_gt *g, const float *master, const float *m1, const float *m2) {
    size_t own = g->hi - g->lo;
    if (master) DCK_TRY(g->be.copy(g->be.ctx, g->master, master, g->P * 4, DCK_TK_H2D));
    if (m1) DCK_TRY(g->be.copy(g->be.ctx, g->m1, m1, own * 4, DCK_TK_H2D));
    if (m2) DCK_TRY(g->be.copy(g->be.ctx, g->m2, m2, own * 4, DCK_TK_H2D));
    if (master) DCK_TRY(dck_gt_refresh_weights(g));
    return g->be.sync(g->be.ctx);
}

dck_status dck_gt_download_state(dck_gt *g, float *master, float *m1, float *m2) {
    size_t own = g->hi - g->lo;
    if (master) DCK_TRY(g->be.copy(g->be.ctx, master, g->master, g->P * 4, DCK_TK_D2H));
    if (m1) DCK_TRY(g->be.copy(g->be.ctx, m1, g->m1, own * 4, DCK_TK_D2H));
    if (m2) DCK_TRY(g->be.copy(g->be.ctx, m2, g->m2, own * 4, DCK_TK_D2H));
    return g->be.sync(g->be.ctx);
}

dck_status dck_gt_download_master_slice(dck_gt *g, float *master) {
    DCK_TRY(g->be.copy(g->be.ctx, master + g->lo, g->master + g->lo, (g->hi - g->lo) * 4,
                       DCK_TK_D2H));
    return g->be.sync(g->be.ctx);
}

dck_status dck_gt_refresh_weights(dck_gt *g) {
    if (!g->m.bf16) return DCK_OK;
    return ew(g, DCK_EW_ROUND, g->wparams, g->master, NULL, 0, g->P, false);
}

/* ------------------------------------------------------------------ layers */

/* C[r][n] = init + sum_k A(r,k) B[k][n] (gpu_train_kernels.h: dck_tk_mm);
 * split > 1 only where init is C (fast mode's weight gradients). */
static dck_status mm(dck_gt *g, const float *A, size_t ar, size_t ak, const float *B, size_t ldb,
                     const float *init, size_t init_rs, float *C, size_t ldc, size_t R, size_t N,
                     size_t K, uint32_t split) {
    dck_tk_mm_args a = {A, ar, ak, B, ldb, init, init_rs, C, ldc, R, N, K, split};
    dck_tk_blocks gr = blocks((N + DCK_TK_MM_T - 1) / DCK_TK_MM_T, (R + DCK_TK_MM_T - 1) / DCK_TK_MM_T,
                              split > 1 ? split : 1);
    return LAUNCH(g, mm, a, gr);
}

static dck_status linear_fwd(dck_gt *g, const float *X, size_t in, size_t out, const float *W,
                             const float *b, float *Y) {
    if (g->blas) { /* the bench's cuBLAS fast mode: Y = the bias rows (K = 0), += X W */
        dck_blas_rm three[3];
        dck_blas_linear(g->N, in, out, three);
        three[0].beta = 1.0f;
        const float *ops[DCK_BLAS_OPERANDS] = {[DCK_BLAS_X] = X, [DCK_BLAS_W] = W, [DCK_BLAS_Y] = Y};
        DCK_TRY(mm(g, X, in, 1, W, out, b, 0, Y, out, g->N, out, 0, 1));
        return dck_blas_gt_gemm(g->blas, &three[0], ops);
    }
    return mm(g, X, in, 1, W, out, b, 0, Y, out, g->N, out, in, 1);
}

/* dX = dY W^T (8-lane dots), dW += X^T dY (a chain over the N rows), db +=
 * the column sums of dY */
static dck_status linear_bwd(dck_gt *g, const float *dY, const float *X, size_t in, size_t out,
                             const float *W, float *dW, float *db, float *dX) {
    size_t N = g->N;
    if (g->blas) { /* the bench's cuBLAS fast mode: dX = dY W^T, dW += X^T dY */
        dck_blas_rm three[3];
        dck_blas_linear(N, in, out, three);
        const float *ops[DCK_BLAS_OPERANDS] = {[DCK_BLAS_X] = X,   [DCK_BLAS_W] = W,
                                               [DCK_BLAS_DY] = dY, [DCK_BLAS_DX] = dX,
                                               [DCK_BLAS_DW] = dW};
        if (dX) DCK_TRY(dck_blas_gt_gemm(g->blas, &three[1], ops));
        DCK_TRY(dck_blas_gt_gemm(g->blas, &three[2], ops));
        if (db) {
            dck_tk_colsum_args a = {dY, out, db, N, out};
            DCK_TRY(LAUNCH(g, colsum, a, grid1(out)));
        }
        return DCK_OK;
    }
    if (dX) {
        dck_tk_dots_args a = {dY, out, W, out, dX, in, N, in, out};
        dck_tk_blocks gr = blocks((in + DCK_TK_DOT_T - 1) / DCK_TK_DOT_T,
                                  (N + DCK_TK_DOT_T - 1) / DCK_TK_DOT_T, 1);
        DCK_TRY(LAUNCH(g, dots, a, gr));
    }
    /* fast mode: the rows split across blocks that add with atomics */
    uint32_t split = g->m.fast ? (uint32_t)(N / 16 > 8 ? 8 : (N / 16 < 2 ? 2 : N / 16)) : 1;
    DCK_TRY(mm(g, X, 1, in, dY, out, dW, out, dW, out, in, out, N, split));
    if (db) {
        dck_tk_colsum_args a = {dY, out, db, N, out};
        DCK_TRY(LAUNCH(g, colsum, a, grid1(out)));
    }
    return DCK_OK;
}

static dck_status ln_fwd(dck_gt *g, const float *X, const float *w, const float *b, float *Y,
                         float *mean, float *rstd) {
    dck_tk_ln_args a = {X, w, b, NULL, Y, mean, rstd, NULL, NULL, NULL,
                        (uint32_t)g->N, (uint32_t)g->d, g->m.bf16, 0};
    return LAUNCH(g, ln_fwd, a, blocks((g->N + DCK_TK_LN_ROWS - 1) / DCK_TK_LN_ROWS, 1, 1));
}

static dck_status ln_bwd(dck_gt *g, const float *dY, const float *X, const float *w,
                         const float *mean, const float *rstd, float *dw, float *db, float *dX,
                         bool accumulate) {
    dck_tk_ln_args a = {X, w, NULL, dY, NULL, (float *)mean, (float *)rstd, dX, dw, db,
                        (uint32_t)g->N, (uint32_t)g->d, 0, accumulate};
    DCK_TRY(LAUNCH(g, ln_bwd_rows, a, blocks((g->N + DCK_TK_LN_ROWS - 1) / DCK_TK_LN_ROWS, 1, 1)));
    return LAUNCH(g, ln_bwd_cols, a, grid1(g->d));
}

static dck_tk_att_args att_args(const dck_gt *g, const float *qkv, float *probs) {
    dck_tk_att_args a;
    memset(&a, 0, sizeof a);
    a.qkv = qkv;
    a.probs = probs;
    a.B = (uint32_t)g->B;
    a.S = (uint32_t)g->S;
    a.d = (uint32_t)g->d;
    a.H = (uint32_t)g->H;
    a.scale = 1.0f / sqrtf((float)(g->d / g->H));
    a.bf16 = g->m.bf16;
    return a;
}

/* The weights' tensor for block l, item j. */
static const float *W(const dck_gt *g, size_t l, int j) {
    return g->wparams + g->off_block[l * DCK_GT_BLOCK_ITEMS + (size_t)j];
}
static float *G(const dck_gt *g, float *grad, size_t l, int j) {
    return grad + g->off_block[l * DCK_GT_BLOCK_ITEMS + (size_t)j];
}

static dck_status forward(dck_gt *g) {
    size_t N = g->N, d = g->d, F = g->F, V = g->V;
    bool bf16 = g->m.bf16;
    float *x0 = g->L ? g->lc[0].x_in : g->x_fin;
    dck_tk_embed_args e = {x0, g->wparams + g->m.off_wte, g->wparams + g->m.off_wpe, g->tok,
                           (uint32_t)g->S, (uint32_t)d, bf16, N * d};
    DCK_TRY(LAUNCH(g, embed, e, grid1(N * d)));
    for (size_t l = 0; l < g->L; l++) {
        gt_layer *c = &g->lc[l];
        float *next = l + 1 < g->L ? g->lc[l + 1].x_in : g->x_fin;
        DCK_TRY(ln_fwd(g, c->x_in, W(g, l, DCK_GT_LN1_W), W(g, l, DCK_GT_LN1_B), c->ln1, c->mean1,
                       c->rstd1));
        DCK_TRY(linear_fwd(g, c->ln1, d, 3 * d, W(g, l, DCK_GT_QKV_W), W(g, l, DCK_GT_QKV_B), c->qkv));
        DCK_TRY(round_bf16(g, c->qkv, N * 3 * d));
        dck_tk_att_args a = att_args(g, c->qkv, c->probs);
        a.out = c->att;
        DCK_TRY(LAUNCH(g, att_fwd, a, blocks(g->B * g->H * g->S, 1, 1)));
        DCK_TRY(linear_fwd(g, c->att, d, d, W(g, l, DCK_GT_PROJ_W), W(g, l, DCK_GT_PROJ_B), g->tmp));
        DCK_TRY(round_bf16(g, g->tmp, N * d));
        DCK_TRY(ew(g, DCK_EW_ADD, c->x_mid, c->x_in, g->tmp, 0, N * d, bf16));
        DCK_TRY(ln_fwd(g, c->x_mid, W(g, l, DCK_GT_LN2_W), W(g, l, DCK_GT_LN2_B), c->ln2, c->mean2,
                       c->rstd2));
        DCK_TRY(linear_fwd(g, c->ln2, d, F, W(g, l, DCK_GT_FC_W), W(g, l, DCK_GT_FC_B), c->fc));
        DCK_TRY(round_bf16(g, c->fc, N * F));
        dck_tk_gelu_args ge = {c->fc, c->gel, c->sig, bf16, N * F};
        DCK_TRY(LAUNCH(g, gelu_fwd, ge, grid1(N * F)));
        DCK_TRY(linear_fwd(g, c->gel, F, d, W(g, l, DCK_GT_FC2_W), W(g, l, DCK_GT_FC2_B), g->tmp));
        DCK_TRY(round_bf16(g, g->tmp, N * d));
        DCK_TRY(ew(g, DCK_EW_ADD, next, c->x_mid, g->tmp, 0, N * d, bf16));
    }
    DCK_TRY(ln_fwd(g, g->x_fin, g->wparams + g->m.off_lnf_w, g->wparams + g->m.off_lnf_b, g->lnf,
                   g->meanf, g->rstdf));
    DCK_TRY(linear_fwd(g, g->lnf, d, V, g->wparams + g->m.off_head, NULL, g->logits));
    dck_tk_xent_args x = {g->logits, g->row_loss, g->tok, (uint32_t)g->S, (uint32_t)V,
                          1.0f / (float)N, N};
    DCK_TRY(LAUNCH(g, xent, x, blocks(N, 1, 1)));
    dck_tk_loss_args lo = {g->row_loss, g->loss, (uint32_t)g->B, (uint32_t)g->S};
    return LAUNCH(g, loss, lo, blocks(1, 1, 1));
}

static dck_status backward(dck_gt *g, float *grad) {
    size_t d = g->d, F = g->F, V = g->V;
    DCK_TRY(linear_bwd(g, g->logits, g->lnf, d, V, g->wparams + g->m.off_head,
                       grad + g->m.off_head, NULL, g->dln));
    DCK_TRY(ln_bwd(g, g->dln, g->x_fin, g->wparams + g->m.off_lnf_w, g->meanf, g->rstdf,
                   grad + g->m.off_lnf_w, grad + g->m.off_lnf_b, g->dx, false));
    for (size_t l = g->L; l-- > 0;) {
        gt_layer *c = &g->lc[l];
        DCK_TRY(linear_bwd(g, g->dx, c->gel, F, d, W(g, l, DCK_GT_FC2_W), G(g, grad, l, DCK_GT_FC2_W),
                           G(g, grad, l, DCK_GT_FC2_B), g->dfc));
        DCK_TRY(ew(g, DCK_EW_GELU_BWD, g->dfc, c->fc, c->sig, 0, g->N * F, false));
        DCK_TRY(linear_bwd(g, g->dfc, c->ln2, d, F, W(g, l, DCK_GT_FC_W), G(g, grad, l, DCK_GT_FC_W),
                           G(g, grad, l, DCK_GT_FC_B), g->dln));
        DCK_TRY(ln_bwd(g, g->dln, c->x_mid, W(g, l, DCK_GT_LN2_W), c->mean2, c->rstd2,
                       G(g, grad, l, DCK_GT_LN2_W), G(g, grad, l, DCK_GT_LN2_B), g->dx, true));
        DCK_TRY(linear_bwd(g, g->dx, c->att, d, d, W(g, l, DCK_GT_PROJ_W),
                           G(g, grad, l, DCK_GT_PROJ_W), G(g, grad, l, DCK_GT_PROJ_B), g->datt));
        dck_tk_att_args a = att_args(g, c->qkv, c->probs);
        a.dout = g->datt;
        a.ds = g->ds;
        a.dqkv = g->dqkv;
        DCK_TRY(LAUNCH(g, att_bwd_ds, a, blocks(g->B * g->H * g->S, 1, 1)));
        DCK_TRY(LAUNCH(g, att_bwd_qkv, a, grid1(g->N * d)));
        DCK_TRY(linear_bwd(g, g->dqkv, c->ln1, d, 3 * d, W(g, l, DCK_GT_QKV_W),
                           G(g, grad, l, DCK_GT_QKV_W), G(g, grad, l, DCK_GT_QKV_B), g->dln));
        DCK_TRY(ln_bwd(g, g->dln, c->x_in, W(g, l, DCK_GT_LN1_W), c->mean1, c->rstd1,
                       G(g, grad, l, DCK_GT_LN1_W), G(g, grad, l, DCK_GT_LN1_B), g->dx, true));
    }
    /* embeddings: the rows of each token, in row order (lists built on the
     * host by build_token_lists) */
    dck_tk_emb_args e = {grad + g->m.off_wte, grad + g->m.off_wpe, g->dx, g->csr, g->csr + g->N,
                         g->csr + 2 * g->N + 1, g->nuniq, (uint32_t)g->B, (uint32_t)g->S,
                         (uint32_t)d};
    DCK_TRY(LAUNCH(g, emb_bwd_wte, e, grid1((size_t)g->nuniq * d)));
    return LAUNCH(g, emb_bwd_wpe, e, grid1(g->S * d));
}

/* For the embedding's gradient: the distinct tokens of the microbatch
 * (vocab[u]), and for each the rows that hold it in row order
 * (pos[start[u] .. start[u+1])), by a counting sort that keeps row order. */
static void build_token_lists(dck_gt *g, const uint16_t *tokens) {
    size_t N = g->N, S = g->S;
    int32_t *vocab = g->h_csr, *start = vocab + N, *pos = start + N + 1;
    int32_t *count = g->h_count; /* V + 1: per token, then its first slot */
    memset(count, 0, (g->V + 1) * sizeof *count);
    for (size_t r = 0; r < N; r++) count[tokens[(r / S) * (S + 1) + r % S]]++;
    uint32_t nu = 0;
    int32_t at = 0;
    for (size_t v = 0; v < g->V; v++) {
        if (!count[v]) continue;
        vocab[nu] = (int32_t)v;
        start[nu] = at;
        int32_t c = count[v];
        count[v] = at; /* the next free slot of token v */
        at += c;
        nu++;
    }
    start[nu] = at;
    for (size_t r = 0; r < N; r++) pos[count[tokens[(r / S) * (S + 1) + r % S]]++] = (int32_t)r;
    g->nuniq = nu;
}

dck_status dck_gt_microbatch(dck_gt *g, int buf, const uint16_t *tokens, float *loss) {
    if (buf < 0 || (!g->m.fast && buf >= g->nbufs))
        return dck_set_error(DCK_ERR_INVALID, "train gpu: no gradient buffer %d", buf);
    float *grad = g->gbuf[g->m.fast ? 0 : buf];
    size_t N = g->N;
    DCK_TRY(g->be.copy(g->be.ctx, g->tok, tokens, g->B * (g->S + 1) * sizeof(uint16_t), DCK_TK_H2D));
    build_token_lists(g, tokens);
    DCK_TRY(g->be.copy(g->be.ctx, g->csr, g->h_csr, (3 * N + 1) * sizeof(int32_t), DCK_TK_H2D));
    /* deterministic: every microbatch its own buffer from +0 (the CPU's
     * memset); fast: one buffer, zeroed by the step's first microbatch */
    if (!g->m.fast || buf == 0) DCK_TRY(g->be.zero(g->be.ctx, grad, g->P * 4));
    DCK_TRY(forward(g));
    if (g->act_hook) {
        if (!g->h_act && !(g->h_act = dck_xcalloc(g->act_len, sizeof(float))))
            return dck_oom("train gpu");
        DCK_TRY(g->be.copy(g->be.ctx, g->h_act, g->act, g->act_len * 4, DCK_TK_D2H));
        DCK_TRY(g->be.sync(g->be.ctx));
        g->act_hook(g->act_ctx, g->h_act, g->act_len);
        DCK_TRY(g->be.copy(g->be.ctx, g->act, g->h_act, g->act_len * 4, DCK_TK_H2D));
    }
    DCK_TRY(backward(g, grad));
    DCK_TRY(g->be.copy(g->be.ctx, loss, g->loss, sizeof(float), DCK_TK_D2H));
    return g->be.sync(g->be.ctx);
}

/* Pairwise over bufs[0..n), stride 1, 2, 4, ...: dck_tree_sum's order. */
static dck_status tree(dck_gt *g, float **bufs, size_t n) {
    for (size_t stride = 1; stride < n; stride *= 2)
        for (size_t j = 0; j + stride < n; j += 2 * stride)
            DCK_TRY(ew(g, DCK_EW_ADD, bufs[j], bufs[j], bufs[j + stride], 0, g->P, false));
    return DCK_OK;
}

dck_status dck_gt_tree(dck_gt *g, int n) {
    if (g->m.fast) return DCK_OK; /* already one buffer */
    if (n > g->nbufs) return dck_set_error(DCK_ERR_INVALID, "train gpu: %d buffers, %d held", n, g->nbufs);
    return tree(g, g->gbuf, (size_t)n);
}

dck_status dck_gt_grad_io(dck_gt *g, int buf, float *host, int dir) {
    float *dev = g->gbuf[buf];
    if (dir == DCK_TK_H2D) DCK_TRY(g->be.copy(g->be.ctx, dev, host, g->P * 4, DCK_TK_H2D));
    else DCK_TRY(g->be.copy(g->be.ctx, host, dev, g->P * 4, DCK_TK_D2H));
    return g->be.sync(g->be.ctx);
}

static dck_status gather_room(dck_gt *g, int K) {
    if (g->gather_k >= K) return DCK_OK;
    if (g->gather) g->be.release(g->be.ctx, g->gather);
    g->gather = NULL;
    g->gather_k = 0;
    DCK_TRY(dalloc(g, (size_t)K * g->P * 4, &g->gather));
    g->gather_k = K;
    return DCK_OK;
}

dck_status dck_gt_tree_host(dck_gt *g, const float *host_all, int K) {
    if (K > DCK_TK_MAX_TREE) return dck_set_error(DCK_ERR_INVALID, "train gpu: %d ranks", K);
    DCK_TRY(gather_room(g, K));
    DCK_TRY(g->be.copy(g->be.ctx, g->gather, host_all, (size_t)K * g->P * 4, DCK_TK_H2D));
    float *sub[DCK_TK_MAX_TREE];
    for (int r = 0; r < K; r++) sub[r] = g->gather + (size_t)r * g->P;
    DCK_TRY(tree(g, sub, (size_t)K));
    return g->be.copy(g->be.ctx, g->gbuf[0], g->gather, g->P * 4, DCK_TK_D2D);
}

int dck_gt_device_index(const dck_gt *g) { return g->be.device; }

static dck_status no_nccl(const dck_gt *g) {
    return dck_set_error(DCK_ERR_NODEVICE, "train: the %s backend has no NCCL", g->be.name);
}

dck_status dck_gt_nccl_id(dck_gt *g, dck_comm *comm, void *id) {
    return g->be.nccl_id ? g->be.nccl_id(g->be.ctx, comm, id) : no_nccl(g);
}

dck_status dck_gt_nccl_join(dck_gt *g, const void *id, int K, int rank, dck_comm *comm) {
    return g->be.nccl_join ? g->be.nccl_join(g->be.ctx, id, K, rank, comm) : no_nccl(g);
}

dck_status dck_gt_nccl_tree(dck_gt *g, int K) {
    if (!g->be.nccl_allgather) return no_nccl(g);
    if (K > DCK_TK_MAX_TREE) return dck_set_error(DCK_ERR_INVALID, "train gpu: %d ranks", K);
    DCK_TRY(gather_room(g, K));
    /* bytes: rank r's subtree sum lands in slot r, untouched */
    DCK_TRY(g->be.nccl_allgather(g->be.ctx, g->gbuf[0], g->gather, g->P * 4));
    float *sub[DCK_TK_MAX_TREE];
    for (int r = 0; r < K; r++) sub[r] = g->gather + (size_t)r * g->P;
    DCK_TRY(tree(g, sub, (size_t)K));
    return g->be.copy(g->be.ctx, g->gbuf[0], g->gather, g->P * 4, DCK_TK_D2D);
}

dck_status dck_gt_nccl_allreduce(dck_gt *g) {
    if (!g->be.nccl_allreduce_f32) return no_nccl(g);
    return g->be.nccl_allreduce_f32(g->be.ctx, g->gbuf[0], g->P);
}

dck_status dck_gt_scale_sumsq(dck_gt *g, float inv_m, float *sumsq) {
    float *grad = g->gbuf[0];
    DCK_TRY(ew(g, DCK_EW_SCALE, grad, grad, NULL, inv_m, g->P, false));
    size_t chunks = (g->P + DCK_TK_SUMSQ_CHUNK - 1) / DCK_TK_SUMSQ_CHUNK;
    dck_tk_sumsq_args a = {grad, g->P, g->lanes, g->sumsq};
    DCK_TRY(LAUNCH(g, sumsq_lanes, a, grid1(chunks * 8)));
    DCK_TRY(LAUNCH(g, sumsq_final, a, blocks(1, 1, 1)));
    DCK_TRY(g->be.copy(g->be.ctx, sumsq, g->sumsq, sizeof(float), DCK_TK_D2H));
    return g->be.sync(g->be.ctx);
}

dck_status dck_gt_adamw(dck_gt *g, const dck_tm_adamw *k) {
    DCK_TRY(g->be.zero(g->be.ctx, g->bad, sizeof(uint64_t)));
    for (size_t t = 0; t < g->m.ntensors; t++) {
        size_t off = g->t_offset[t], end = off + g->t_numel[t];
        size_t a = off > g->lo ? off : g->lo, b = end < g->hi ? end : g->hi;
        if (b <= a) continue;
        dck_tk_adamw_args x = {g->gbuf[0], g->master, g->m1, g->m2, NULL, a, b, g->lo,
                               g->t_decay[t] ? 1 : 0, *k, g->bad};
        DCK_TRY(LAUNCH(g, adamw, x, grid1(b - a)));
    }
    return DCK_OK;
}

dck_status dck_gt_first_nonfinite(dck_gt *g, uint64_t *index) {
    uint64_t v = 0;
    DCK_TRY(g->be.copy(g->be.ctx, &v, g->bad, sizeof v, DCK_TK_D2H));
    DCK_TRY(g->be.sync(g->be.ctx));
    *index = v ? ~v : UINT64_MAX;
    return DCK_OK;
}

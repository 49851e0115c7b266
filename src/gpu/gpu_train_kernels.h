/* The trainer's kernels (detcheck-gpu(7), TRAINING), written once for the GPU and its CPU twin.
 *
 * Every kernel is a list of phases separated by block barriers. A phase is a
 * DCK_TMF function of (arguments, block index, thread index, the block's
 * shared memory, the thread's registers) compiled by nvcc for cuda/train.cu,
 * where each phase runs on every thread of the block and a __syncthreads()
 * separates phases, and by cc for src/gpu/train_twin.c, which runs each
 * phase for every thread of a block in turn before the next phase: the same
 * code, the same tiles, the same stitching, on the CPU. The twin is tested
 * bit for bit against the CPU trainer (tests/check_train_twin.c), so only
 * the hardware is left to the GPU check.
 *
 * Each kernel's comment says the order of every sum; they are the CPU
 * trainer's orders (src/train/train_model.c, gpu_train_math.h):
 *  - "chain": one output, from its initial value, index ascending, one
 *    rounding per * and per + (as the CPU's per-output vector lanes);
 *  - "8 lanes": element j in lane j % 8, each lane a chain from +0, lanes
 *    combined as ((0+1)+(2+3))+((4+5)+(6+7)) (dck_dot, dck_sum).
 *
 * The whole microbatch (batch sequences of seq tokens, N = batch * seq rows)
 * runs at once: every per-sequence sum of the CPU is per row here, and the
 * CPU's accumulation of weight gradients over sequences (sequence after
 * sequence into the same buffer) is one chain over the N rows. */
#ifndef DCK_GPU_TRAIN_KERNELS_H
#define DCK_GPU_TRAIN_KERNELS_H

#include "gpu/gpu_train_math.h"

#if !defined(__cplusplus)
#include <stdbool.h>
#endif

/* ------------------------------------------------------------------ kernel table */
/* The order of the names in cuda_loader.c's table (DCK_KERNEL_TRAIN0 + id). */
#define DCK_TK_KERNELS(X)                                                                         \
    X(ew)                                                                                         \
    X(embed)                                                                                      \
    X(gelu_fwd)                                                                                   \
    X(ln_fwd)                                                                                     \
    X(ln_bwd_rows)                                                                                \
    X(ln_bwd_cols)                                                                                \
    X(mm)                                                                                         \
    X(dots)                                                                                       \
    X(colsum)                                                                                     \
    X(att_fwd)                                                                                    \
    X(att_bwd_ds)                                                                                 \
    X(att_bwd_qkv)                                                                                \
    X(xent)                                                                                       \
    X(loss)                                                                                       \
    X(emb_bwd_wte)                                                                                \
    X(emb_bwd_wpe)                                                                                \
    X(sumsq_lanes)                                                                                \
    X(sumsq_final)                                                                                \
    X(adamw)                                                                                      \
    X(fma_peak)

#define DCK_TK_ID_(name) DCK_TK_##name,
enum { DCK_TK_KERNELS(DCK_TK_ID_) DCK_TK_COUNT };
#undef DCK_TK_ID_

#define DCK_TK_THREADS 256 /* every kernel's block */

/* ------------------------------------------------------------------ launch geometry (detcheck-gpu(7), DEVICE)
 * A kernel's grid is logical: blocks (x, y, z) up to 2^32 - 1 in each
 * dimension (a matrix product of 2^33 tokens has 2^27 row tiles), while a
 * CUDA launch takes at most 2^31 - 1 blocks in x and 65535 in y and z.
 * gpu_train.c's launcher cuts a logical grid into launches within those
 * limits (dck_tk_launch_piece) and passes each launch its origin, the
 * logical index of its first block: every kernel adds it to blockIdx, so
 * block (o.x + blockIdx.x, o.y + blockIdx.y, o.z + blockIdx.z) does what
 * the whole grid's block of that index would. The CPU twin takes the same
 * launches and origins, and refuses a launch beyond the limits as the
 * hardware does. */
#define DCK_TK_GRID_X_MAX 2147483647u
#define DCK_TK_GRID_YZ_MAX 65535u
typedef struct {
    uint32_t x, y, z;
} dck_tk_origin;

/* ------------------------------------------------------------------ elementwise
 * Thread i of the grid (block * 256 + thread) owns element i. */
enum {
    DCK_EW_ADD,      /* y = a + b */
    DCK_EW_ROUND,    /* y = bf16_round(a) */
    DCK_EW_SCALE,    /* y = a * s */
    DCK_EW_GELU_BWD, /* y = y * gelu'(a) from a's sigmoid b */
    DCK_EW_FLIP,     /* y ^= 1 in the low bit (the fault-injection hook) */
};
typedef struct {
    float *y;
    const float *a, *b;
    float s;
    int op, bf16; /* bf16: the result rounded to bf16 */
    size_t n;
} dck_tk_ew_args;

DCK_TMF void dck_tk_ew(const dck_tk_ew_args *a, size_t i) {
    if (i >= a->n) return;
    float r;
    switch (a->op) {
    case DCK_EW_ADD: r = a->a[i] + a->b[i]; break;
    case DCK_EW_ROUND: r = dck_tm_bf16_round(a->a[i]); break;
    case DCK_EW_SCALE: r = a->a[i] * a->s; break;
    case DCK_EW_GELU_BWD: r = a->y[i] * DCK_TM_GELU_GRAD(a->a[i], a->b[i]); break;
    default: r = dck_tm_from_bits(dck_tm_bits(a->y[i]) ^ 1u); break;
    }
    a->y[i] = a->bf16 ? dck_tm_bf16_round(r) : r;
}

/* x[row][c] = wte[tok][c] + wpe[t][c], row = b S + t, tok the t-th token of
 * sequence b (S + 1 tokens each); bf16-rounded in bf16 mode. */
typedef struct {
    float *x;
    const float *wte, *wpe;
    const uint16_t *tok;
    uint32_t S, d;
    int bf16;
    size_t n; /* N d */
} dck_tk_embed_args;

DCK_TMF void dck_tk_embed(const dck_tk_embed_args *a, size_t i) {
    if (i >= a->n) return;
    size_t row = i / a->d, c = i % a->d, b = row / a->S, t = row % a->S;
    size_t v = a->tok[b * (a->S + 1) + t];
    float r = a->wte[v * a->d + c] + a->wpe[t * a->d + c];
    a->x[i] = a->bf16 ? dck_tm_bf16_round(r) : r;
}

/* y = x * s, s = sigmoid(2 z(x)) kept for the backward; y bf16-rounded in
 * bf16 mode. */
typedef struct {
    const float *x;
    float *y, *sig;
    int bf16;
    size_t n;
} dck_tk_gelu_args;

DCK_TMF void dck_tk_gelu_fwd(const dck_tk_gelu_args *a, size_t i) {
    if (i >= a->n) return;
    float s = dck_tm_gelu_sig(a->x[i]);
    a->sig[i] = s;
    float y = a->x[i] * s;
    a->y[i] = a->bf16 ? dck_tm_bf16_round(y) : y;
}

/* ------------------------------------------------------------------ LayerNorm
 * 8 threads per row, thread k of the row = lane k of the CPU's 8-lane sums
 * (elements c = k, k + 8, ... in order); 32 rows per block. Each thread
 * combines the 8 lanes from shared memory in the fixed order. */
#define DCK_TK_LN_ROWS 32
typedef struct {
    const float *x, *w, *b, *dy;
    float *y, *mean, *rstd, *dx, *dw, *db;
    uint32_t N, d;
    int bf16, accumulate;
} dck_tk_ln_args;

typedef struct {
    float lane[DCK_TK_LN_ROWS][8], lane2[DCK_TK_LN_ROWS][8];
} dck_tk_ln_shared;

/* forward, phase 1: lane sums of x */
DCK_TMF void dck_tk_ln_fwd_p1(const dck_tk_ln_args *a, uint32_t blk, uint32_t tid,
                              dck_tk_ln_shared *sh) {
    uint32_t r = tid / 8, k = tid % 8;
    size_t row = (size_t)blk * DCK_TK_LN_ROWS + r;
    float acc = 0.0f;
    if (row < a->N) {
        const float *x = a->x + row * a->d;
        for (uint32_t c = k; c < a->d; c += 8) acc += x[c];
    }
    sh->lane[r][k] = acc;
}

/* phase 2: mean = sum * (1/d); lane sums of (x - mean)^2 */
DCK_TMF void dck_tk_ln_fwd_p2(const dck_tk_ln_args *a, uint32_t blk, uint32_t tid,
                              dck_tk_ln_shared *sh) {
    uint32_t r = tid / 8, k = tid % 8;
    size_t row = (size_t)blk * DCK_TK_LN_ROWS + r;
    float acc = 0.0f;
    if (row < a->N) {
        float mu = dck_tm_lanes8_combine(sh->lane[r]) * (1.0f / (float)a->d);
        const float *x = a->x + row * a->d;
        for (uint32_t c = k; c < a->d; c += 8) {
            float t = x[c] - mu;
            acc += t * t;
        }
    }
    sh->lane2[r][k] = acc;
}

/* phase 3: rstd, the outputs of this lane's columns */
DCK_TMF void dck_tk_ln_fwd_p3(const dck_tk_ln_args *a, uint32_t blk, uint32_t tid,
                              dck_tk_ln_shared *sh) {
    uint32_t r = tid / 8, k = tid % 8;
    size_t row = (size_t)blk * DCK_TK_LN_ROWS + r;
    if (row >= a->N) return;
    float inv_d = 1.0f / (float)a->d;
    float mu = dck_tm_lanes8_combine(sh->lane[r]) * inv_d;
    float rs = dck_tm_ln_rstd(dck_tm_lanes8_combine(sh->lane2[r]) * inv_d);
    const float *x = a->x + row * a->d;
    float *y = a->y + row * a->d;
    for (uint32_t c = k; c < a->d; c += 8) {
        float v = DCK_TM_LN_OUT(x[c] - mu, rs, a->w[c], a->b[c]);
        y[c] = a->bf16 ? dck_tm_bf16_round(v) : v;
    }
    if (k == 0) {
        a->mean[row] = mu;
        a->rstd[row] = rs;
    }
}

/* backward rows, phase 1: lane sums of dxhat = dy w and of dxhat xhat,
 * xhat = (x - mean) rstd */
DCK_TMF void dck_tk_ln_bwd_p1(const dck_tk_ln_args *a, uint32_t blk, uint32_t tid,
                              dck_tk_ln_shared *sh) {
    uint32_t r = tid / 8, k = tid % 8;
    size_t row = (size_t)blk * DCK_TK_LN_ROWS + r;
    float s1 = 0.0f, s2 = 0.0f;
    if (row < a->N) {
        const float *x = a->x + row * a->d, *dy = a->dy + row * a->d;
        float mu = a->mean[row], rs = a->rstd[row];
        for (uint32_t c = k; c < a->d; c += 8) {
            float xh = (x[c] - mu) * rs, dxh = dy[c] * a->w[c];
            s1 += dxh;
            s2 += dxh * xh;
        }
    }
    sh->lane[r][k] = s1;
    sh->lane2[r][k] = s2;
}

/* phase 2: dx = (or +=) rstd ((dxhat - m1) - xhat m2) */
DCK_TMF void dck_tk_ln_bwd_p2(const dck_tk_ln_args *a, uint32_t blk, uint32_t tid,
                              dck_tk_ln_shared *sh) {
    uint32_t r = tid / 8, k = tid % 8;
    size_t row = (size_t)blk * DCK_TK_LN_ROWS + r;
    if (row >= a->N) return;
    float inv_d = 1.0f / (float)a->d;
    float m1 = dck_tm_lanes8_combine(sh->lane[r]) * inv_d;
    float m2 = dck_tm_lanes8_combine(sh->lane2[r]) * inv_d;
    const float *x = a->x + row * a->d, *dy = a->dy + row * a->d;
    float *dx = a->dx + row * a->d;
    float mu = a->mean[row], rs = a->rstd[row];
    for (uint32_t c = k; c < a->d; c += 8) {
        float xh = (x[c] - mu) * rs, dxh = dy[c] * a->w[c];
        float g = DCK_TM_LN_DX(rs, dxh, xh, m1, m2);
        dx[c] = a->accumulate ? dx[c] + g : g;
    }
}

/* backward columns: thread c, dw[c] += dy xhat and db[c] += dy, each a
 * chain over the rows 0..N-1 (sequence after sequence, as the CPU). */
DCK_TMF void dck_tk_ln_bwd_cols(const dck_tk_ln_args *a, size_t c) {
    if (c >= a->d) return;
    float dw = a->dw[c], db = a->db[c];
    for (size_t t = 0; t < a->N; t++) {
        float g = a->dy[t * a->d + c];
        float xh = (a->x[t * a->d + c] - a->mean[t]) * a->rstd[t];
        dw = dw + g * xh;
        db = db + g;
    }
    a->dw[c] = dw;
    a->db[c] = db;
}

/* ------------------------------------------------------------------ matrix product
 * C[r][n] = init + A(r,0) B[0][n] + ... + A(r,K-1) B[K-1][n]: a chain per
 * output in k order, A(r,k) = A[r ar + k ak], init = init[r init_rs + n]
 * (init may be C: accumulate) or +0. Tiles of 64 x 64 outputs per block
 * (16 x 16 threads, 4 x 4 outputs each: rows ty*4 + i, columns tx + 16 j),
 * the k loop in slices of 16 staged in shared memory; a k past K is never
 * added (an added 0 would turn a -0 into +0).
 *
 * Fast mode (split > 1, init == C): block z of the grid's third dimension
 * sums the k slice [z Kc, (z+1) Kc) from +0 and adds it to C with atomicAdd,
 * in whatever order the blocks finish: the bits change from run to run, as
 * in real split-K kernels. */
#define DCK_TK_MM_T 64
#define DCK_TK_MM_K 16
typedef struct {
    const float *A;
    size_t ar, ak;
    const float *B;
    size_t ldb;
    const float *init;
    size_t init_rs;
    float *C;
    size_t ldc;
    size_t R, N, K;
    uint32_t split; /* 0/1: deterministic */
} dck_tk_mm_args;

typedef struct {
    float As[DCK_TK_MM_K][DCK_TK_MM_T];
    float Bs[DCK_TK_MM_K][DCK_TK_MM_T];
} dck_tk_mm_shared;

typedef struct {
    float acc[4][4];
} dck_tk_mm_regs;

DCK_TMF void dck_tk_mm_k_range(const dck_tk_mm_args *a, uint32_t z, size_t *k0, size_t *k1) {
    if (a->split <= 1) {
        *k0 = 0;
        *k1 = a->K;
        return;
    }
    size_t per = (a->K + a->split - 1) / a->split;
    *k0 = (size_t)z * per < a->K ? (size_t)z * per : a->K;
    *k1 = *k0 + per < a->K ? *k0 + per : a->K;
}

DCK_TMF void dck_tk_mm_init(const dck_tk_mm_args *a, uint32_t bx, uint32_t by, uint32_t tid,
                            dck_tk_mm_regs *rg) {
    uint32_t tx = tid % 16, ty = tid / 16;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            size_t r = (size_t)by * DCK_TK_MM_T + ty * 4 + i, n = (size_t)bx * DCK_TK_MM_T + tx + 16 * j;
            rg->acc[i][j] = (a->split <= 1 && a->init && r < a->R && n < a->N)
                                ? a->init[r * a->init_rs + n]
                                : 0.0f;
        }
}

/* stage the k slice [k, k + 16): 1024 elements of A and of B, 4 each */
DCK_TMF void dck_tk_mm_stage(const dck_tk_mm_args *a, uint32_t bx, uint32_t by, uint32_t tid,
                             size_t k, size_t k1, dck_tk_mm_shared *sh) {
    for (uint32_t e = tid; e < DCK_TK_MM_K * DCK_TK_MM_T; e += DCK_TK_THREADS) {
        uint32_t kk = e / DCK_TK_MM_T, col = e % DCK_TK_MM_T;
        size_t r = (size_t)by * DCK_TK_MM_T + col, n = (size_t)bx * DCK_TK_MM_T + col;
        bool in_k = k + kk < k1;
        sh->As[kk][col] = in_k && r < a->R ? a->A[r * a->ar + (k + kk) * a->ak] : 0.0f;
        sh->Bs[kk][col] = in_k && n < a->N ? a->B[(k + kk) * a->ldb + n] : 0.0f;
    }
}

DCK_TMF void dck_tk_mm_accumulate(uint32_t tid, size_t k, size_t k1, const dck_tk_mm_shared *sh,
                                  dck_tk_mm_regs *rg) {
    uint32_t tx = tid % 16, ty = tid / 16;
    uint32_t kn = k1 - k < DCK_TK_MM_K ? (uint32_t)(k1 - k) : DCK_TK_MM_K;
    for (uint32_t kk = 0; kk < kn; kk++) {
        float x0 = sh->As[kk][ty * 4], x1 = sh->As[kk][ty * 4 + 1], x2 = sh->As[kk][ty * 4 + 2],
              x3 = sh->As[kk][ty * 4 + 3];
        for (int j = 0; j < 4; j++) {
            float w = sh->Bs[kk][tx + 16 * j];
            rg->acc[0][j] = rg->acc[0][j] + x0 * w;
            rg->acc[1][j] = rg->acc[1][j] + x1 * w;
            rg->acc[2][j] = rg->acc[2][j] + x2 * w;
            rg->acc[3][j] = rg->acc[3][j] + x3 * w;
        }
    }
}

/* fast mode's add into C: atomicAdd on the GPU (the order the blocks finish
 * in); the twin runs blocks in order */
DCK_TMF void dck_tk_add_out(float *p, float v) {
#if defined(__CUDA_ARCH__)
    atomicAdd(p, v);
#else
    *p = *p + v;
#endif
}

DCK_TMF void dck_tk_mm_store(const dck_tk_mm_args *a, uint32_t bx, uint32_t by, uint32_t tid,
                             const dck_tk_mm_regs *rg) {
    uint32_t tx = tid % 16, ty = tid / 16;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            size_t r = (size_t)by * DCK_TK_MM_T + ty * 4 + i, n = (size_t)bx * DCK_TK_MM_T + tx + 16 * j;
            if (r >= a->R || n >= a->N) continue;
            if (a->split <= 1)
                a->C[r * a->ldc + n] = rg->acc[i][j];
            else
                dck_tk_add_out(&a->C[r * a->ldc + n], rg->acc[i][j]);
        }
}

/* ------------------------------------------------------------------ dot products
 * C[t][i] = dot8(A + t lda, B + i ldb, n) (8 lanes): blocks of 32 x 32
 * outputs, 2 x 2 per thread (rows 2 ty, 2 ty + 1; columns 2 tx, 2 tx + 1),
 * each output with its own 8 lanes; the j loop in slices of 32 (a multiple
 * of 8, so element j is in lane j % 8 = jj % 8 of its slice) staged in
 * shared memory. */
#define DCK_TK_DOT_T 32
#define DCK_TK_DOT_J 32
typedef struct {
    const float *A;
    size_t lda;
    const float *B;
    size_t ldb;
    float *C;
    size_t ldc;
    size_t T, I, n;
} dck_tk_dots_args;

typedef struct {
    float As[DCK_TK_DOT_T][DCK_TK_DOT_J + 1], Bs[DCK_TK_DOT_T][DCK_TK_DOT_J + 1];
} dck_tk_dots_shared;

typedef struct {
    float lane[2][2][8]; /* [row][column][lane] */
} dck_tk_dots_regs;

DCK_TMF void dck_tk_dots_stage(const dck_tk_dots_args *a, uint32_t bx, uint32_t by, uint32_t tid,
                               size_t j0, dck_tk_dots_shared *sh) {
    for (uint32_t e = tid; e < DCK_TK_DOT_T * DCK_TK_DOT_J; e += DCK_TK_THREADS) {
        uint32_t row = e / DCK_TK_DOT_J, jj = e % DCK_TK_DOT_J;
        size_t t = (size_t)by * DCK_TK_DOT_T + row, i = (size_t)bx * DCK_TK_DOT_T + row;
        bool in_j = j0 + jj < a->n;
        sh->As[row][jj] = in_j && t < a->T ? a->A[t * a->lda + j0 + jj] : 0.0f;
        sh->Bs[row][jj] = in_j && i < a->I ? a->B[i * a->ldb + j0 + jj] : 0.0f;
    }
}

/* one element jj of the slice into lane k of the 4 outputs */
#define DCK_TK_DOTS_STEP(k, jj)                                                                   \
    do {                                                                                          \
        float x0_ = x0[jj], x1_ = x1[jj], w0_ = w0[jj], w1_ = w1[jj];                             \
        l[0][0][k] = l[0][0][k] + x0_ * w0_;                                                      \
        l[0][1][k] = l[0][1][k] + x0_ * w1_;                                                      \
        l[1][0][k] = l[1][0][k] + x1_ * w0_;                                                      \
        l[1][1][k] = l[1][1][k] + x1_ * w1_;                                                      \
    } while (0)

DCK_TMF void dck_tk_dots_accumulate(const dck_tk_dots_args *a, uint32_t tid, size_t j0,
                                    const dck_tk_dots_shared *sh, dck_tk_dots_regs *rg) {
    uint32_t tx = tid % 16, ty = tid / 16;
    uint32_t jn = a->n - j0 < DCK_TK_DOT_J ? (uint32_t)(a->n - j0) : DCK_TK_DOT_J;
    const float *x0 = sh->As[2 * ty], *x1 = sh->As[2 * ty + 1];
    const float *w0 = sh->Bs[2 * tx], *w1 = sh->Bs[2 * tx + 1];
    float(*l)[2][8] = rg->lane; /* named lanes (registers on a GPU) */
    uint32_t jj = 0;
    for (; jj + 8 <= jn; jj += 8) {
        DCK_TK_DOTS_STEP(0, jj);
        DCK_TK_DOTS_STEP(1, jj + 1);
        DCK_TK_DOTS_STEP(2, jj + 2);
        DCK_TK_DOTS_STEP(3, jj + 3);
        DCK_TK_DOTS_STEP(4, jj + 4);
        DCK_TK_DOTS_STEP(5, jj + 5);
        DCK_TK_DOTS_STEP(6, jj + 6);
        DCK_TK_DOTS_STEP(7, jj + 7);
    }
    if (jj + 0 < jn) DCK_TK_DOTS_STEP(0, jj);
    if (jj + 1 < jn) DCK_TK_DOTS_STEP(1, jj + 1);
    if (jj + 2 < jn) DCK_TK_DOTS_STEP(2, jj + 2);
    if (jj + 3 < jn) DCK_TK_DOTS_STEP(3, jj + 3);
    if (jj + 4 < jn) DCK_TK_DOTS_STEP(4, jj + 4);
    if (jj + 5 < jn) DCK_TK_DOTS_STEP(5, jj + 5);
    if (jj + 6 < jn) DCK_TK_DOTS_STEP(6, jj + 6);
}

DCK_TMF void dck_tk_dots_store(const dck_tk_dots_args *a, uint32_t bx, uint32_t by, uint32_t tid,
                               const dck_tk_dots_regs *rg) {
    uint32_t tx = tid % 16, ty = tid / 16;
    for (int r = 0; r < 2; r++)
        for (int q = 0; q < 2; q++) {
            size_t t = (size_t)by * DCK_TK_DOT_T + 2 * ty + (size_t)r;
            size_t i = (size_t)bx * DCK_TK_DOT_T + 2 * tx + (size_t)q;
            if (t < a->T && i < a->I) a->C[t * a->ldc + i] = dck_tm_lanes8_combine(rg->lane[r][q]);
        }
}

/* ------------------------------------------------------------------ column sums
 * C[o] = C[o] + A[0][o] + A[1][o] + ... (a chain over rows, per output o;
 * the bias gradients). */
typedef struct {
    const float *A;
    size_t lda;
    float *C;
    size_t rows, cols;
} dck_tk_colsum_args;

DCK_TMF void dck_tk_colsum(const dck_tk_colsum_args *a, size_t o) {
    if (o >= a->cols) return;
    float acc = a->C[o];
    for (size_t t = 0; t < a->rows; t++) acc = acc + a->A[t * a->lda + o];
    a->C[o] = acc;
}

/* ------------------------------------------------------------------ attention
 * One block per (sequence b, head h, query row i). Row i of head h's
 * softmax lives in probs[((b H + h) S + i) S + 0..i]; the scores are 8-lane
 * dot products q_i . k_j (threads over j), the maximum and the sum are
 * chains over j by thread 0 (the CPU's scalar loops), exp and the division
 * run per j, and out_i[c] = 0 + p_0 v_0[c] + p_1 v_1[c] + ... (threads over
 * c, chain over j). */
typedef struct {
    const float *qkv, *dout;
    float *probs, *out, *ds, *dqkv;
    uint32_t B, S, d, H;
    float scale;
    int bf16;
} dck_tk_att_args;

typedef struct {
    float mx, sum;
} dck_tk_att_shared;

DCK_TMF void dck_tk_att_index(const dck_tk_att_args *a, uint32_t blk, size_t *b, size_t *h,
                              size_t *i) {
    *i = blk % a->S;
    *h = (blk / a->S) % a->H;
    *b = blk / a->S / a->H;
}

DCK_TMF float *dck_tk_att_row(const dck_tk_att_args *a, float *base, uint32_t blk) {
    return base + (size_t)blk * a->S; /* blk = (b H + h) S + i */
}

/* forward phase 1: p_j = (q_i . k_j) scale, j <= i */
DCK_TMF void dck_tk_att_fwd_p1(const dck_tk_att_args *a, uint32_t blk, uint32_t tid) {
    size_t b, h, i;
    dck_tk_att_index(a, blk, &b, &h, &i);
    size_t hd = a->d / a->H, d3 = 3 * (size_t)a->d;
    const float *q = a->qkv + (b * a->S + i) * d3 + h * hd;
    float *p = dck_tk_att_row(a, a->probs, blk);
    for (size_t j = tid; j <= i; j += DCK_TK_THREADS) {
        const float *k = a->qkv + (b * a->S + j) * d3 + a->d + h * hd;
        p[j] = dck_tm_dot8(q, 1, k, 1, hd) * a->scale;
    }
}

/* phase 2, thread 0: the maximum (from -3e38, a strict > as the CPU) */
DCK_TMF void dck_tk_att_fwd_p2(const dck_tk_att_args *a, uint32_t blk, uint32_t tid,
                               dck_tk_att_shared *sh) {
    if (tid != 0) return;
    size_t b, h, i;
    dck_tk_att_index(a, blk, &b, &h, &i);
    const float *p = dck_tk_att_row(a, a->probs, blk);
    float mx = -3.0e38f;
    for (size_t j = 0; j <= i; j++)
        if (p[j] > mx) mx = p[j];
    sh->mx = mx;
}

/* phase 3: p_j = exp(p_j - max) */
DCK_TMF void dck_tk_att_fwd_p3(const dck_tk_att_args *a, uint32_t blk, uint32_t tid,
                               const dck_tk_att_shared *sh) {
    size_t b, h, i;
    dck_tk_att_index(a, blk, &b, &h, &i);
    float *p = dck_tk_att_row(a, a->probs, blk);
    for (size_t j = tid; j <= i; j += DCK_TK_THREADS) p[j] = dck_tm_expf(p[j] - sh->mx);
}

/* phase 4, thread 0: the sum, a chain over j from +0 */
DCK_TMF void dck_tk_att_fwd_p4(const dck_tk_att_args *a, uint32_t blk, uint32_t tid,
                               dck_tk_att_shared *sh) {
    if (tid != 0) return;
    size_t b, h, i;
    dck_tk_att_index(a, blk, &b, &h, &i);
    const float *p = dck_tk_att_row(a, a->probs, blk);
    float sum = 0.0f;
    for (size_t j = 0; j <= i; j++) sum += p[j];
    sh->sum = sum;
}

/* phase 5: p_j = p_j / sum */
DCK_TMF void dck_tk_att_fwd_p5(const dck_tk_att_args *a, uint32_t blk, uint32_t tid,
                               const dck_tk_att_shared *sh) {
    size_t b, h, i;
    dck_tk_att_index(a, blk, &b, &h, &i);
    float *p = dck_tk_att_row(a, a->probs, blk);
    for (size_t j = tid; j <= i; j += DCK_TK_THREADS) p[j] = p[j] / sh->sum;
}

/* phase 6: out_i[c] = chain over j of p_j v_j[c] from +0 (bf16-rounded in bf16 mode) */
DCK_TMF void dck_tk_att_fwd_p6(const dck_tk_att_args *a, uint32_t blk, uint32_t tid) {
    size_t b, h, i;
    dck_tk_att_index(a, blk, &b, &h, &i);
    size_t hd = a->d / a->H, d3 = 3 * (size_t)a->d;
    const float *p = dck_tk_att_row(a, a->probs, blk);
    for (size_t c = tid; c < hd; c += DCK_TK_THREADS) {
        float acc = 0.0f;
        for (size_t j = 0; j <= i; j++) acc = acc + p[j] * a->qkv[(b * a->S + j) * d3 + 2 * a->d + h * hd + c];
        float *o = a->out + (b * a->S + i) * a->d + h * hd + c;
        *o = a->bf16 ? dck_tm_bf16_round(acc) : acc;
    }
}

/* backward, phase 1: dp_j = g_i . v_j (8 lanes), j <= i, into ds's row */
DCK_TMF void dck_tk_att_bwd_p1(const dck_tk_att_args *a, uint32_t blk, uint32_t tid) {
    size_t b, h, i;
    dck_tk_att_index(a, blk, &b, &h, &i);
    size_t hd = a->d / a->H, d3 = 3 * (size_t)a->d;
    const float *g = a->dout + (b * a->S + i) * a->d + h * hd;
    float *ds = dck_tk_att_row(a, a->ds, blk);
    for (size_t j = tid; j <= i; j += DCK_TK_THREADS)
        ds[j] = dck_tm_dot8(g, 1, a->qkv + (b * a->S + j) * d3 + 2 * a->d + h * hd, 1, hd);
}

/* phase 2, thread 0: sum_j p_j dp_j, a chain from +0 */
DCK_TMF void dck_tk_att_bwd_p2(const dck_tk_att_args *a, uint32_t blk, uint32_t tid,
                               dck_tk_att_shared *sh) {
    if (tid != 0) return;
    size_t b, h, i;
    dck_tk_att_index(a, blk, &b, &h, &i);
    const float *p = dck_tk_att_row(a, a->probs, blk), *ds = dck_tk_att_row(a, a->ds, blk);
    float s = 0.0f;
    for (size_t j = 0; j <= i; j++) s += p[j] * ds[j];
    sh->sum = s;
}

/* phase 3: ds_j = (p_j (dp_j - sum)) scale */
DCK_TMF void dck_tk_att_bwd_p3(const dck_tk_att_args *a, uint32_t blk, uint32_t tid,
                               const dck_tk_att_shared *sh) {
    size_t b, h, i;
    dck_tk_att_index(a, blk, &b, &h, &i);
    const float *p = dck_tk_att_row(a, a->probs, blk);
    float *ds = dck_tk_att_row(a, a->ds, blk);
    for (size_t j = tid; j <= i; j += DCK_TK_THREADS)
        ds[j] = DCK_TM_SOFTMAX_DS(p[j], ds[j], sh->sum, a->scale);
}

/* dq_i = sum_{j<=i} ds_ij k_j, dk_i = sum_{i'>=i} ds_i'i q_i', dv_i = sum_{i'>=i}
 * p_i'i g_i': thread (b, h, i, c) of the grid, three chains from +0, j and
 * i' ascending. */
DCK_TMF void dck_tk_att_bwd_qkv(const dck_tk_att_args *a, size_t e) {
    size_t hd = a->d / a->H, d3 = 3 * (size_t)a->d, S = a->S;
    size_t c = e % hd, row = e / hd; /* row = (b H + h) S + i */
    size_t i = row % S, h = (row / S) % a->H, b = row / S / a->H;
    if (b >= a->B) return;
    const float *dsb = a->ds + (b * a->H + h) * S * S, *pb = a->probs + (b * a->H + h) * S * S;
    const float *qkv = a->qkv + b * S * d3 + h * hd + c;
    const float *g = a->dout + b * S * a->d + h * hd + c;
    float dq = 0.0f, dk = 0.0f, dv = 0.0f;
    for (size_t j = 0; j <= i; j++) dq = dq + dsb[i * S + j] * qkv[j * d3 + a->d];
    for (size_t r = i; r < S; r++) {
        dk = dk + dsb[r * S + i] * qkv[r * d3];
        dv = dv + pb[r * S + i] * g[r * a->d];
    }
    float *o = a->dqkv + (b * S + i) * d3 + h * hd + c;
    o[0] = dq;
    o[a->d] = dk;
    o[2 * (size_t)a->d] = dv;
}

/* ------------------------------------------------------------------ cross-entropy
 * One block per row (token) of the logits. Thread 0: the maximum (a chain
 * from lg[0], strict >), then the sum of exp(lg - max) (a chain from +0);
 * threads over v: the exps and the gradient lg = (e / sum) / ntok, minus
 * 1 / ntok at the target. row_loss = (max + log sum) - lg[target]. */
typedef struct {
    float *logits, *row_loss;
    const uint16_t *tok;
    uint32_t S, V;
    float inv_ntok;
    size_t N;
} dck_tk_xent_args;

typedef struct {
    float mx, sum, lgt;
} dck_tk_xent_shared;

DCK_TMF size_t dck_tk_xent_target(const dck_tk_xent_args *a, size_t row) {
    return a->tok[(row / a->S) * (a->S + 1) + row % a->S + 1];
}

DCK_TMF void dck_tk_xent_p1(const dck_tk_xent_args *a, uint32_t blk, uint32_t tid,
                            dck_tk_xent_shared *sh) {
    if (tid != 0) return;
    const float *lg = a->logits + (size_t)blk * a->V;
    float mx = lg[0];
    for (size_t v = 1; v < a->V; v++)
        if (lg[v] > mx) mx = lg[v];
    sh->mx = mx;
    sh->lgt = lg[dck_tk_xent_target(a, blk)];
}

DCK_TMF void dck_tk_xent_p2(const dck_tk_xent_args *a, uint32_t blk, uint32_t tid,
                            const dck_tk_xent_shared *sh) {
    float *lg = a->logits + (size_t)blk * a->V;
    for (size_t v = tid; v < a->V; v += DCK_TK_THREADS) lg[v] = dck_tm_expf(lg[v] - sh->mx);
}

DCK_TMF void dck_tk_xent_p3(const dck_tk_xent_args *a, uint32_t blk, uint32_t tid,
                            dck_tk_xent_shared *sh) {
    if (tid != 0) return;
    const float *lg = a->logits + (size_t)blk * a->V;
    float sum = 0.0f;
    for (size_t v = 0; v < a->V; v++) sum += lg[v];
    sh->sum = sum;
    a->row_loss[blk] = (sh->mx + dck_tm_logf(sum)) - sh->lgt;
}

DCK_TMF void dck_tk_xent_p4(const dck_tk_xent_args *a, uint32_t blk, uint32_t tid,
                            const dck_tk_xent_shared *sh) {
    float *lg = a->logits + (size_t)blk * a->V;
    size_t target = dck_tk_xent_target(a, blk);
    for (size_t v = tid; v < a->V; v += DCK_TK_THREADS) {
        float g = (lg[v] / sh->sum) * a->inv_ntok;
        lg[v] = v == target ? g - a->inv_ntok : g;
    }
}

/* The microbatch's loss, one thread: per sequence a chain over its tokens
 * from +0, the sequences' sums a chain from +0, then / (B S). */
typedef struct {
    const float *row_loss;
    float *out;
    uint32_t B, S;
} dck_tk_loss_args;

DCK_TMF void dck_tk_loss(const dck_tk_loss_args *a) {
    float total = 0.0f;
    for (size_t b = 0; b < a->B; b++) {
        float l = 0.0f;
        for (size_t t = 0; t < a->S; t++) l += a->row_loss[b * a->S + t];
        total += l;
    }
    a->out[0] = total / (float)((size_t)a->B * a->S);
}

/* ------------------------------------------------------------------ embedding backward
 * dwte[v][c] += dx[p][c] over the rows p that hold token v, in row order
 * (pos[start[u] .. start[u+1]) lists them for the u-th distinct token
 * vocab[u]; built on the host from the tokens); dwpe[t][c] += dx[b S + t][c]
 * over b ascending. One thread per (entry, c): chains. */
typedef struct {
    float *dwte, *dwpe;
    const float *dx;
    const int32_t *vocab, *start, *pos;
    uint32_t nuniq, B, S, d;
} dck_tk_emb_args;

DCK_TMF void dck_tk_emb_bwd_wte(const dck_tk_emb_args *a, size_t e) {
    size_t u = e / a->d, c = e % a->d;
    if (u >= a->nuniq) return;
    float *w = a->dwte + (size_t)a->vocab[u] * a->d + c;
    float acc = *w;
    for (int32_t q = a->start[u]; q < a->start[u + 1]; q++) acc = acc + a->dx[(size_t)a->pos[q] * a->d + c];
    *w = acc;
}

DCK_TMF void dck_tk_emb_bwd_wpe(const dck_tk_emb_args *a, size_t e) {
    size_t t = e / a->d, c = e % a->d;
    if (t >= a->S) return;
    float *w = a->dwpe + t * a->d + c;
    float acc = *w;
    for (size_t b = 0; b < a->B; b++) acc = acc + a->dx[(b * a->S + t) * a->d + c];
    *w = acc;
}

/* ------------------------------------------------------------------ norm, AdamW
 * Sum of squares: thread (chunk, lane k): the chain over elements
 * chunk 4096 + k, + 8, ... of its chunk (lane k of the chunk's 8-lane dot
 * product); then one thread: total = 0 + chunk 0 + chunk 1 + ..., each
 * chunk its 8 lanes combined. */
#define DCK_TK_SUMSQ_CHUNK 4096
typedef struct {
    const float *g;
    size_t n;
    float *lanes, *out;
} dck_tk_sumsq_args;

DCK_TMF void dck_tk_sumsq_lanes(const dck_tk_sumsq_args *a, size_t e) {
    size_t chunk = e / 8, k = e % 8, c0 = chunk * DCK_TK_SUMSQ_CHUNK;
    if (c0 >= a->n) return;
    size_t c1 = a->n - c0 < DCK_TK_SUMSQ_CHUNK ? a->n : c0 + DCK_TK_SUMSQ_CHUNK;
    float acc = 0.0f;
    for (size_t j = c0 + k; j < c1; j += 8) acc += a->g[j] * a->g[j];
    a->lanes[e] = acc;
}

DCK_TMF void dck_tk_sumsq_final(const dck_tk_sumsq_args *a) {
    float total = 0.0f;
    size_t chunks = (a->n + DCK_TK_SUMSQ_CHUNK - 1) / DCK_TK_SUMSQ_CHUNK;
    for (size_t c = 0; c < chunks; c++) total += dck_tm_lanes8_combine(a->lanes + 8 * c);
    a->out[0] = total;
}

/* The first element index i of a check that failed, whatever order the
 * threads run in: *p keeps the largest ~i (0: none), atomicMax on a GPU, a
 * plain max in the twin; the result is the same bits either way. */
DCK_TMF void dck_tk_note_first(uint64_t *p, uint64_t i) {
#if defined(__CUDA_ARCH__)
    atomicMax((unsigned long long *)p, (unsigned long long)~i);
#else
    if (~i > *p) *p = ~i;
#endif
}

/* AdamW on elements [a, b) of one parameter tensor (grad and master indexed
 * globally, the moments from lo); the bf16-rounded weights the forward pass
 * reads (wparams, may be NULL) follow. An updated weight that is not finite
 * (a NaN moment makes its weight NaN too) is noted in *bad (may be NULL):
 * the trainer stops there (detcheck-train(1): non-finite values). */
typedef struct {
    const float *grad;
    float *master, *m1, *m2, *wparams;
    size_t a, b, lo;
    int decay;
    dck_tm_adamw k;
    uint64_t *bad;
} dck_tk_adamw_args;

DCK_TMF void dck_tk_adamw(const dck_tk_adamw_args *a, size_t e) {
    size_t i = a->a + e;
    if (i >= a->b) return;
    float w = dck_tm_adamw_update(&a->k, a->decay, a->grad[i], &a->m1[i - a->lo], &a->m2[i - a->lo],
                                  a->master[i]);
    a->master[i] = w;
    if (a->bad && !dck_tm_finite(w)) dck_tk_note_first(a->bad, i);
}

/* ------------------------------------------------------------------ the benchmark's peer
 * FP32 throughput: each thread runs `iters` rounds of 8 independent fused
 * multiply-adds (fmaf: one instruction, two FLOPs); out keeps the result so
 * that nothing is optimised away. */
typedef struct {
    float *out;
    uint32_t iters;
    float x;
} dck_tk_fma_args;

#endif /* DCK_GPU_TRAIN_KERNELS_H */

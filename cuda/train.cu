// The trainer's kernels (detcheck-gpu(7), TRAINING): thin wrappers that run the phases of
// src/gpu/gpu_train_kernels.h on every thread of a block, with a barrier
// between phases. The arithmetic, the tiles and every sum's order are in
// that header (and its comments), shared with the CPU twin
// (src/gpu/train_twin.c) that tests them against the CPU trainer.
//
// Device code only, compiled to a fatbin with --fmad=false and embedded as
// data (see cuda/digest.cu and src/gpu/cuda_loader.c); each kernel takes its
// argument struct by value and the origin of its launch (a huge grid is
// cut into several launches), launched by src/gpu/gpu_train.c.
#include "gpu/gpu_train_kernels.h"

#include <cuda_runtime.h>

// Each launch is a piece of the kernel's logical grid (gpu_train_kernels.h:
// launch geometry): o is the logical index of its first block, BX/BY/BZ the
// logical index of this block.
#define BX (o.x + blockIdx.x)
#define BY (o.y + blockIdx.y)
#define BZ (o.z + blockIdx.z)
#define GRID_INDEX ((size_t)BX * DCK_TK_THREADS + threadIdx.x)
#define KERNEL(name, args_t)                                                                       \
    extern "C" __global__ void __launch_bounds__(DCK_TK_THREADS)                                   \
        dck_tk_##name##_kernel(args_t a, dck_tk_origin o)

KERNEL(ew, dck_tk_ew_args) { dck_tk_ew(&a, GRID_INDEX); }
KERNEL(embed, dck_tk_embed_args) { dck_tk_embed(&a, GRID_INDEX); }
KERNEL(gelu_fwd, dck_tk_gelu_args) { dck_tk_gelu_fwd(&a, GRID_INDEX); }

KERNEL(ln_fwd, dck_tk_ln_args) {
    __shared__ dck_tk_ln_shared sh;
    dck_tk_ln_fwd_p1(&a, BX, threadIdx.x, &sh);
    __syncthreads();
    dck_tk_ln_fwd_p2(&a, BX, threadIdx.x, &sh);
    __syncthreads();
    dck_tk_ln_fwd_p3(&a, BX, threadIdx.x, &sh);
}

KERNEL(ln_bwd_rows, dck_tk_ln_args) {
    __shared__ dck_tk_ln_shared sh;
    dck_tk_ln_bwd_p1(&a, BX, threadIdx.x, &sh);
    __syncthreads();
    dck_tk_ln_bwd_p2(&a, BX, threadIdx.x, &sh);
}

KERNEL(ln_bwd_cols, dck_tk_ln_args) { dck_tk_ln_bwd_cols(&a, GRID_INDEX); }

KERNEL(mm, dck_tk_mm_args) {
    __shared__ dck_tk_mm_shared sh;
    dck_tk_mm_regs rg;
    const uint32_t bx = BX, by = BY, tid = threadIdx.x;
    size_t k0, k1;
    dck_tk_mm_k_range(&a, BZ, &k0, &k1);
    dck_tk_mm_init(&a, bx, by, tid, &rg);
    for (size_t k = k0; k < k1; k += DCK_TK_MM_K) {
        dck_tk_mm_stage(&a, bx, by, tid, k, k1, &sh);
        __syncthreads();
        dck_tk_mm_accumulate(tid, k, k1, &sh, &rg);
        __syncthreads();
    }
    dck_tk_mm_store(&a, bx, by, tid, &rg);
}

KERNEL(dots, dck_tk_dots_args) {
    __shared__ dck_tk_dots_shared sh;
    dck_tk_dots_regs rg;
#pragma unroll
    for (int r = 0; r < 2; r++)
#pragma unroll
        for (int q = 0; q < 2; q++)
#pragma unroll
            for (int k = 0; k < 8; k++) rg.lane[r][q][k] = 0.0f;
    for (size_t j = 0; j < a.n; j += DCK_TK_DOT_J) {
        dck_tk_dots_stage(&a, BX, BY, threadIdx.x, j, &sh);
        __syncthreads();
        dck_tk_dots_accumulate(&a, threadIdx.x, j, &sh, &rg);
        __syncthreads();
    }
    dck_tk_dots_store(&a, BX, BY, threadIdx.x, &rg);
}

KERNEL(colsum, dck_tk_colsum_args) { dck_tk_colsum(&a, GRID_INDEX); }

KERNEL(att_fwd, dck_tk_att_args) {
    __shared__ dck_tk_att_shared sh;
    dck_tk_att_fwd_p1(&a, BX, threadIdx.x);
    __syncthreads();
    dck_tk_att_fwd_p2(&a, BX, threadIdx.x, &sh);
    __syncthreads();
    dck_tk_att_fwd_p3(&a, BX, threadIdx.x, &sh);
    __syncthreads();
    dck_tk_att_fwd_p4(&a, BX, threadIdx.x, &sh);
    __syncthreads();
    dck_tk_att_fwd_p5(&a, BX, threadIdx.x, &sh);
    __syncthreads();
    dck_tk_att_fwd_p6(&a, BX, threadIdx.x);
}

KERNEL(att_bwd_ds, dck_tk_att_args) {
    __shared__ dck_tk_att_shared sh;
    dck_tk_att_bwd_p1(&a, BX, threadIdx.x);
    __syncthreads();
    dck_tk_att_bwd_p2(&a, BX, threadIdx.x, &sh);
    __syncthreads();
    dck_tk_att_bwd_p3(&a, BX, threadIdx.x, &sh);
}

KERNEL(att_bwd_qkv, dck_tk_att_args) { dck_tk_att_bwd_qkv(&a, GRID_INDEX); }

KERNEL(xent, dck_tk_xent_args) {
    __shared__ dck_tk_xent_shared sh;
    dck_tk_xent_p1(&a, BX, threadIdx.x, &sh);
    __syncthreads();
    dck_tk_xent_p2(&a, BX, threadIdx.x, &sh);
    __syncthreads();
    dck_tk_xent_p3(&a, BX, threadIdx.x, &sh);
    __syncthreads();
    dck_tk_xent_p4(&a, BX, threadIdx.x, &sh);
}

KERNEL(loss, dck_tk_loss_args) {
    if (BX == 0 && threadIdx.x == 0) dck_tk_loss(&a);
}

KERNEL(emb_bwd_wte, dck_tk_emb_args) { dck_tk_emb_bwd_wte(&a, GRID_INDEX); }
KERNEL(emb_bwd_wpe, dck_tk_emb_args) { dck_tk_emb_bwd_wpe(&a, GRID_INDEX); }
KERNEL(sumsq_lanes, dck_tk_sumsq_args) { dck_tk_sumsq_lanes(&a, GRID_INDEX); }

KERNEL(sumsq_final, dck_tk_sumsq_args) {
    if (BX == 0 && threadIdx.x == 0) dck_tk_sumsq_final(&a);
}

KERNEL(adamw, dck_tk_adamw_args) { dck_tk_adamw(&a, GRID_INDEX); }

// The benchmark's peer: 8 independent FMA chains per thread (fmaf is one
// instruction even under --fmad=false).
KERNEL(fma_peak, dck_tk_fma_args) {
    float x = a.x + (float)threadIdx.x * 1e-7f;
    float r0 = x, r1 = x + 1, r2 = x + 2, r3 = x + 3, r4 = x + 4, r5 = x + 5, r6 = x + 6, r7 = x + 7;
    const float m = 0.9999f, c = 1e-4f;
    for (uint32_t it = 0; it < a.iters; it++) {
        r0 = fmaf(r0, m, c);
        r1 = fmaf(r1, m, c);
        r2 = fmaf(r2, m, c);
        r3 = fmaf(r3, m, c);
        r4 = fmaf(r4, m, c);
        r5 = fmaf(r5, m, c);
        r6 = fmaf(r6, m, c);
        r7 = fmaf(r7, m, c);
    }
    float s = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7));
    if (s == 1234.5f) a.out[0] = s; // never true in practice: keeps the chains alive
}

/* The CPU twin of cuda/train.cu: every kernel's phases (gpu_train_kernels.h)
 * run for each block of the grid in turn, each phase on every thread of the
 * block before the next phase starts (what __syncthreads guarantees), with
 * the block's shared memory and each thread's registers as C arrays. The
 * loops below mirror the kernels of cuda/train.cu one to one; a kernel added
 * there gets its twin here. The twin is a backend of gpu_train.c like the
 * CUDA runtime: the same launches, grids and buffers on host memory, tested
 * bit for bit against the CPU trainer (tests/check_train_twin.c). */
#include "common/common.h"
#include "gpu/gpu_train.h"

#include <stdlib.h>
#include <string.h>

#define T DCK_TK_THREADS
/* the launch's blocks, by their logical index (origin + index in the launch,
 * as cuda/train.cu's BX, BY, BZ) */
#define FOR_BLOCKS(g)                                                                              \
    for (uint32_t bz = (g).at.z; bz - (g).at.z < (g).z; bz++)                                      \
        for (uint32_t by = (g).at.y; by - (g).at.y < (g).y; by++)                                  \
            for (uint32_t bx = (g).at.x; bx - (g).at.x < (g).x; bx++)
#define FOR_THREADS for (uint32_t tid = 0; tid < T; tid++)
#define GRID_INDEX ((size_t)bx * T + tid)

static dck_status twin_mm(const dck_tk_mm_args *a, dck_tk_grid g) {
    dck_tk_mm_shared *sh = malloc(sizeof *sh);
    dck_tk_mm_regs *rg = malloc(T * sizeof *rg);
    if (!sh || !rg) {
        free(sh);
        free(rg);
        return dck_oom("train twin");
    }
    FOR_BLOCKS(g) {
        size_t k0, k1;
        dck_tk_mm_k_range(a, bz, &k0, &k1);
        FOR_THREADS dck_tk_mm_init(a, bx, by, tid, &rg[tid]);
        for (size_t k = k0; k < k1; k += DCK_TK_MM_K) {
            FOR_THREADS dck_tk_mm_stage(a, bx, by, tid, k, k1, sh);
            FOR_THREADS dck_tk_mm_accumulate(tid, k, k1, sh, &rg[tid]);
        }
        FOR_THREADS dck_tk_mm_store(a, bx, by, tid, &rg[tid]);
    }
    free(sh);
    free(rg);
    return DCK_OK;
}

static dck_status twin_dots(const dck_tk_dots_args *a, dck_tk_grid g) {
    dck_tk_dots_shared *sh = malloc(sizeof *sh);
    dck_tk_dots_regs *rg = malloc(T * sizeof *rg);
    if (!sh || !rg) {
        free(sh);
        free(rg);
        return dck_oom("train twin");
    }
    FOR_BLOCKS(g) {
        (void)bz;
        memset(rg, 0, T * sizeof *rg);
        for (size_t j = 0; j < a->n; j += DCK_TK_DOT_J) {
            FOR_THREADS dck_tk_dots_stage(a, bx, by, tid, j, sh);
            FOR_THREADS dck_tk_dots_accumulate(a, tid, j, sh, &rg[tid]);
        }
        FOR_THREADS dck_tk_dots_store(a, bx, by, tid, &rg[tid]);
    }
    free(sh);
    free(rg);
    return DCK_OK;
}

dck_status dck_tk_twin_launch(int kernel, const void *args, dck_tk_grid g) {
    /* what cudaLaunchKernel refuses (cudaErrorInvalidConfiguration) */
    dck_tk_limits lim = dck_tk_launch_limits();
    if (!g.x || !g.y || !g.z || g.x > lim.x || g.y > lim.yz || g.z > lim.yz ||
        (uint64_t)g.at.x + g.x - 1 > UINT32_MAX || (uint64_t)g.at.y + g.y - 1 > UINT32_MAX ||
        (uint64_t)g.at.z + g.z - 1 > UINT32_MAX)
        return dck_set_error(DCK_ERR_LIMIT,
                             "train twin: kernel %d: a launch of %u x %u x %u blocks (at %u, %u, "
                             "%u) is beyond the launch limits (%u x %u x %u)",
                             kernel, g.x, g.y, g.z, g.at.x, g.at.y, g.at.z, lim.x, lim.yz, lim.yz);
    switch (kernel) {
    case DCK_TK_ew:
        FOR_BLOCKS(g) FOR_THREADS dck_tk_ew(args, GRID_INDEX);
        return DCK_OK;
    case DCK_TK_embed:
        FOR_BLOCKS(g) FOR_THREADS dck_tk_embed(args, GRID_INDEX);
        return DCK_OK;
    case DCK_TK_gelu_fwd:
        FOR_BLOCKS(g) FOR_THREADS dck_tk_gelu_fwd(args, GRID_INDEX);
        return DCK_OK;
    case DCK_TK_ln_fwd: {
        dck_tk_ln_shared sh;
        FOR_BLOCKS(g) {
            FOR_THREADS dck_tk_ln_fwd_p1(args, bx, tid, &sh);
            FOR_THREADS dck_tk_ln_fwd_p2(args, bx, tid, &sh);
            FOR_THREADS dck_tk_ln_fwd_p3(args, bx, tid, &sh);
        }
        return DCK_OK;
    }
    case DCK_TK_ln_bwd_rows: {
        dck_tk_ln_shared sh;
        FOR_BLOCKS(g) {
            FOR_THREADS dck_tk_ln_bwd_p1(args, bx, tid, &sh);
            FOR_THREADS dck_tk_ln_bwd_p2(args, bx, tid, &sh);
        }
        return DCK_OK;
    }
    case DCK_TK_ln_bwd_cols:
        FOR_BLOCKS(g) FOR_THREADS dck_tk_ln_bwd_cols(args, GRID_INDEX);
        return DCK_OK;
    case DCK_TK_mm:
        return twin_mm(args, g);
    case DCK_TK_dots:
        return twin_dots(args, g);
    case DCK_TK_colsum:
        FOR_BLOCKS(g) FOR_THREADS dck_tk_colsum(args, GRID_INDEX);
        return DCK_OK;
    case DCK_TK_att_fwd: {
        dck_tk_att_shared sh;
        FOR_BLOCKS(g) {
            FOR_THREADS dck_tk_att_fwd_p1(args, bx, tid);
            FOR_THREADS dck_tk_att_fwd_p2(args, bx, tid, &sh);
            FOR_THREADS dck_tk_att_fwd_p3(args, bx, tid, &sh);
            FOR_THREADS dck_tk_att_fwd_p4(args, bx, tid, &sh);
            FOR_THREADS dck_tk_att_fwd_p5(args, bx, tid, &sh);
            FOR_THREADS dck_tk_att_fwd_p6(args, bx, tid);
        }
        return DCK_OK;
    }
    case DCK_TK_att_bwd_ds: {
        dck_tk_att_shared sh;
        FOR_BLOCKS(g) {
            FOR_THREADS dck_tk_att_bwd_p1(args, bx, tid);
            FOR_THREADS dck_tk_att_bwd_p2(args, bx, tid, &sh);
            FOR_THREADS dck_tk_att_bwd_p3(args, bx, tid, &sh);
        }
        return DCK_OK;
    }
    case DCK_TK_att_bwd_qkv:
        FOR_BLOCKS(g) FOR_THREADS dck_tk_att_bwd_qkv(args, GRID_INDEX);
        return DCK_OK;
    case DCK_TK_xent: {
        dck_tk_xent_shared sh;
        FOR_BLOCKS(g) {
            FOR_THREADS dck_tk_xent_p1(args, bx, tid, &sh);
            FOR_THREADS dck_tk_xent_p2(args, bx, tid, &sh);
            FOR_THREADS dck_tk_xent_p3(args, bx, tid, &sh);
            FOR_THREADS dck_tk_xent_p4(args, bx, tid, &sh);
        }
        return DCK_OK;
    }
    case DCK_TK_loss: /* block 0, thread 0 */
        if (!g.at.x && !g.at.y && !g.at.z) dck_tk_loss(args);
        return DCK_OK;
    case DCK_TK_emb_bwd_wte:
        FOR_BLOCKS(g) FOR_THREADS dck_tk_emb_bwd_wte(args, GRID_INDEX);
        return DCK_OK;
    case DCK_TK_emb_bwd_wpe:
        FOR_BLOCKS(g) FOR_THREADS dck_tk_emb_bwd_wpe(args, GRID_INDEX);
        return DCK_OK;
    case DCK_TK_sumsq_lanes:
        FOR_BLOCKS(g) FOR_THREADS dck_tk_sumsq_lanes(args, GRID_INDEX);
        return DCK_OK;
    case DCK_TK_sumsq_final:
        if (!g.at.x && !g.at.y && !g.at.z) dck_tk_sumsq_final(args);
        return DCK_OK;
    case DCK_TK_adamw:
        FOR_BLOCKS(g) FOR_THREADS dck_tk_adamw(args, GRID_INDEX);
        return DCK_OK;
    default:
        return dck_set_error(DCK_ERR_INVALID, "train twin: kernel %d has no CPU twin", kernel);
    }
}

/* ------------------------------------------------------------------ the backend */

static dck_status twin_alloc(void *ctx, size_t bytes, void **out) {
    (void)ctx;
    *out = dck_xcalloc(bytes ? bytes : 1, 1);
    return *out ? DCK_OK : dck_oom("train twin");
}
static void twin_release(void *ctx, void *p) {
    (void)ctx;
    free(p);
}
static dck_status twin_copy(void *ctx, void *dst, const void *src, size_t bytes, int dir) {
    (void)ctx;
    (void)dir;
    if (bytes) memmove(dst, src, bytes);
    return DCK_OK;
}
static dck_status twin_zero(void *ctx, void *p, size_t bytes) {
    (void)ctx;
    if (bytes) memset(p, 0, bytes);
    return DCK_OK;
}
static dck_status twin_launch(void *ctx, int kernel, const void *args, size_t size, dck_tk_grid g) {
    (void)ctx;
    (void)size;
    return dck_tk_twin_launch(kernel, args, g);
}
static dck_status twin_sync(void *ctx) {
    (void)ctx;
    return DCK_OK;
}
static void twin_destroy(void *ctx) { (void)ctx; }

dck_status dck_tk_twin_backend(dck_tk_backend *out) {
    *out = (dck_tk_backend){"twin", NULL, twin_alloc, twin_release, twin_copy, twin_zero,
                            twin_launch, twin_sync, twin_destroy, -1, NULL, NULL, NULL, NULL};
    return DCK_OK;
}

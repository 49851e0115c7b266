/* Short float vectors for the trainer's kernels (GCC/clang vector
 * extension, no intrinsics). An operation on a vector is DCK_VF independent
 * IEEE single operations, one per lane, so a kernel that puts one output in
 * each lane and keeps that output's own sum sequential computes the same
 * bits as the scalar loop, for any DCK_VF: the vectors only decide how many
 * outputs advance at once. -ffp-contract=off (the Makefile) keeps a * b + c
 * two roundings in vectors as in scalars; a CUDA twin runs the same
 * per-output loop with one output per thread.
 *
 * Loads and stores are unaligned (dck_vload / dck_vstore), as the rows of
 * the model's matrices start anywhere. */
#ifndef DCK_TRAIN_VEC_H
#define DCK_TRAIN_VEC_H

#include <stddef.h>

#include "gpu/gpu_train_math.h" /* dck_tm_lanes8_combine: the GPU's combination too */

#if defined(__AVX__)
#define DCK_VF 8 /* one ymm register */
#else
#define DCK_VF 4 /* one xmm (SSE2) / NEON register */
#endif

typedef float dck_vf __attribute__((vector_size(DCK_VF * sizeof(float))));
/* the same vector at 4-byte alignment, may alias float: for loads and stores */
typedef float dck_vf_u __attribute__((vector_size(DCK_VF * sizeof(float)), aligned(4), may_alias));

static inline dck_vf dck_vload(const float *p) { return *(const dck_vf_u *)(const void *)p; }
static inline void dck_vstore(float *p, dck_vf v) { *(dck_vf_u *)(void *)p = v; }
/* x in every lane, bit for bit (0 + x would turn -0 into +0) */
static inline dck_vf dck_vsplat(float x) {
    dck_vf v = {0};
    for (int k = 0; k < DCK_VF; k++) v[k] = x;
    return v;
}

/* The 8 lanes of a fixed-order reduction (train.h: dck_dot, dck_sum)
 * combined as ((0+1)+(2+3))+((4+5)+(6+7)). */
static inline float dck_lanes8_combine(const float *acc) { return dck_tm_lanes8_combine(acc); }

#endif

/* The fast baseline of `train --bench` (detcheck-train(1), OPTIONS): the trainer's matrix
 * products as a user's fast mode would run them, with cuBLAS SGEMM (loaded
 * with dlopen like the runtime: libcublas.so.MAJOR, then libcublas.so;
 * DETCHECK_CUBLAS_LIB names another), FP32 in and out, default math mode
 * (no TF32), weight gradients accumulated with beta = 1.
 *
 * The trainer's tensors are row-major; cuBLAS is column-major. The mapping
 * (dck_blas_from_row_major) is host logic, tested on the CPU against a
 * reference GEMM with cuBLAS's argument semantics (dck_blas_ref_sgemm), so a
 * wrong transpose or leading dimension is caught without a GPU. */
#ifndef DCK_GPU_BLAS_H
#define DCK_GPU_BLAS_H

#include "detcheck_static.h"

#include <stddef.h>
#include <stdint.h>

/* the values of cublasOperation_t's CUBLAS_OP_N and CUBLAS_OP_T */
typedef enum { DCK_BLAS_N = 0, DCK_BLAS_T = 1 } dck_blas_op;

/* The operands of one linear layer y = x W (+ b): X [tokens x in], W [in x
 * out], Y [tokens x out] and the gradients dY, dX, dW of the same shapes. */
enum { DCK_BLAS_X, DCK_BLAS_W, DCK_BLAS_Y, DCK_BLAS_DY, DCK_BLAS_DX, DCK_BLAS_DW,
       DCK_BLAS_OPERANDS };

/* A row-major product C = op(A) op(B) + beta C: C is M x N (ldc), op(A)
 * M x K, op(B) K x N; lda/ldb are the row strides of A and B as stored. */
typedef struct {
    const char *what; /* "fwd", "dX", "dW" */
    int a, b, c;      /* DCK_BLAS_* operands */
    dck_blas_op ta, tb;
    size_t M, N, K, lda, ldb, ldc;
    float beta;
} dck_blas_rm;

/* The same product as cublasSgemm's arguments (column-major): C' = op(A')
 * op(B') + beta C' with C' m x n; a, b, c: which operands go as A', B', C'. */
typedef struct {
    dck_blas_op transa, transb;
    int m, n, k, lda, ldb, ldc;
    int a, b, c;
    float beta;
} dck_blas_call;

/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, and a
 * row-major buffer read column-major is the transpose: the operands swap,
 * M and N swap, each keeps its op. DCK_ERR_INVALID when a dimension does not
 * fit cuBLAS's int. */
dck_status dck_blas_from_row_major(const dck_blas_rm *p, dck_blas_call *out);

/* cublasSgemm's semantics on the host (column-major, alpha 1), each output a
 * double-precision sum rounded once: the reference of the tests. -1 (and
 * nothing computed) where cuBLAS would answer CUBLAS_STATUS_INVALID_VALUE:
 * a leading dimension below the rows of its matrix as stored. */
int dck_blas_ref_sgemm(dck_blas_op transa, dck_blas_op transb, int m, int n, int k,
                       const float *A, int lda, const float *B, int ldb, float beta, float *C,
                       int ldc);

/* The three products of a linear layer (in -> out) over `tokens` rows, in the
 * order forward, dX, dW (dW accumulates: beta 1). */
void dck_blas_linear(size_t tokens, size_t in, size_t out, dck_blas_rm three[3]);

/* The linear layers of the trainer (gpu_train.c): per layer qkv (d -> 3d),
 * proj (d -> d), fc (d -> 4d), fc2 (4d -> d), then the head (d -> vocab), each
 * as dck_blas_linear; their shapes (in, out) into shapes[] (at most cap),
 * the count returned. */
size_t dck_blas_trainer_linears(uint32_t layers, uint32_t width, uint32_t vocab, size_t shapes[][2],
                                size_t cap);

/* cuBLAS's math mode for the bench (the values of cublasMath_t): FP32 the
 * exact baseline (CUBLAS_DEFAULT_MATH: FP32 FMA, no TF32), TF32 what a user
 * on Ampere or Hopper runs by default in frameworks that allow it
 * (CUBLAS_TF32_TENSOR_OP_MATH: tensor cores, 10-bit mantissas: another
 * product, a speed figure only). */
typedef enum { DCK_BLAS_FP32 = 0, DCK_BLAS_TF32 = 3 } dck_blas_math;

/* One step's linear layers with cuBLAS on the current CUDA device
 * (microbatches x, for each dck_blas_trainer_linears shape, the three
 * products of dck_blas_linear over `tokens` rows) in math mode `math`
 * (cublasSetMathMode): the best of a few timed rounds after a warm-up.
 * *seconds: per step; *flops: 2 M N K summed over the products, per second.
 * DCK_ERR_NODEVICE, saying why, without CUDA or without cuBLAS (or, for
 * TF32, without cublasSetMathMode): the baseline is then unavailable, never
 * estimated. */
dck_status dck_blas_cuda_bench(uint32_t layers, uint32_t width, uint32_t vocab, size_t tokens,
                               uint32_t microbatches, dck_blas_math math, double *seconds,
                               double *flops);

/* The three products of one layer (T tokens, in -> out) with cuBLAS on the
 * current device against dck_blas_ref_sgemm on the same random operands:
 * *max_err, the largest |cuBLAS - reference| / (1 + |reference|). The
 * bench runs it first and reports no baseline from wrong products. */
dck_status dck_blas_cuda_selftest(size_t T, size_t in, size_t out, double *max_err);

#ifdef DCK_HAVE_CUDA
#include "common/libfind.h"
/* What the search for cuBLAS found (libcublas.so.MAJOR, libcublasLt.so.MAJOR
 * first from the same folder; common/libfind.h), loading it if need be:
 * for doctor. *why is NULL when it loaded with the v2 SGEMM API, else the
 * message. */
const dck_libfind *dck_cublas_found(const char **why);
#endif

/* ------------------------------------------------------------------ the trainer's fast mode on cuBLAS
 * `train --bench` runs a third mode: the fast mode (one gradient buffer, the
 * ranks' sums in NCCL's or completion order) with every linear layer's
 * products on cuBLAS instead of the kernels' split-K atomics, as a user's
 * fast training would run them. A process-wide switch, set by the
 * bench only, read when the trainer's device state is made in fast mode
 * (gpu_train.c); off, nothing changes. On the twin the products go to
 * dck_blas_ref_sgemm through the same mapping, so the trainer's use of it
 * (operands, bias, accumulation) is tested on the CPU. */
void dck_blas_fast_mode_set(int on);
int dck_blas_fast_mode(void);

typedef struct dck_blas_gt dck_blas_gt;
/* For the backend (by name: "cuda" cuBLAS on its stream, "twin" the
 * reference); DCK_ERR_NODEVICE, saying why, for any other or without cuBLAS. */
dck_status dck_blas_gt_open(const char *backend, void *cuda_stream, dck_blas_gt **out);
void dck_blas_gt_close(dck_blas_gt *b);
/* One product (dck_blas_linear's) on the operands (device pointers; host
 * memory for the twin), queued on the stream. */
dck_status dck_blas_gt_gemm(dck_blas_gt *b, const dck_blas_rm *p,
                            const float *const ops[DCK_BLAS_OPERANDS]);

#endif /* DCK_GPU_BLAS_H */

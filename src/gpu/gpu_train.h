/* The trainer on a device (detcheck-gpu(7), TRAINING): the microbatch forward/backward, the
 * gradient tree, the norm and AdamW as kernels (cuda/train.cu, phases in
 * gpu_train_kernels.h), driven from the host by gpu_train.c over a backend:
 * the CUDA runtime (gpu_train_cuda.c) or the kernels' CPU twin
 * (train_twin.c), which runs the same phases, tiles and launches on host
 * memory. The train layer (src/train/train_loop.c) owns the run; this layer
 * knows only shapes and offsets. */
#ifndef DCK_GPU_TRAIN_H
#define DCK_GPU_TRAIN_H

#include "detcheck_static.h"
#include "gpu/gpu_train_kernels.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct dck_comm dck_comm; /* common.h */

#ifdef __cplusplus
extern "C" {
#endif

/* One launch: x * y * z blocks, the first of them block `at` of the
 * kernel's logical grid (gpu_train_kernels.h: launch geometry). */
typedef struct {
    uint32_t x, y, z;
    dck_tk_origin at;
} dck_tk_grid;

/* A kernel's logical grid, in blocks, and the limits of one launch. */
typedef struct {
    uint64_t x, y, z;
} dck_tk_blocks;
typedef struct {
    uint32_t x, yz;
} dck_tk_limits;
/* The launches that cover logical grid b within lim: their number (0 when a
 * dimension is 0 or above UINT32_MAX: no launch can do it), and launch i of
 * them (x fastest, then y, then z). Pure functions of the shapes. */
uint64_t dck_tk_launch_count(dck_tk_blocks b, dck_tk_limits lim);
dck_tk_grid dck_tk_launch_piece(dck_tk_blocks b, dck_tk_limits lim, uint64_t i);
/* The limits in force: CUDA's (2^31 - 1, 65535) unless a test lowered them
 * to run the cut on small shapes (both the launcher and the twin's check
 * follow them). */
dck_tk_limits dck_tk_launch_limits(void);
void dck_tk_set_launch_limits(dck_tk_limits lim);

enum { DCK_TK_H2D, DCK_TK_D2H, DCK_TK_D2D };

/* Where the kernels run. Pointers it hands out are device pointers (host
 * memory for the twin). Every call returns DCK_OK or sets its error. */
typedef struct {
    const char *name; /* "cuda", "twin" */
    void *ctx;
    dck_status (*alloc)(void *ctx, size_t bytes, void **out); /* zero-filled */
    void (*release)(void *ctx, void *p);
    dck_status (*copy)(void *ctx, void *dst, const void *src, size_t bytes, int dir);
    dck_status (*zero)(void *ctx, void *p, size_t bytes);
    /* one kernel of DCK_TK_KERNELS on a grid of blocks of DCK_TK_THREADS,
     * its argument struct by value */
    dck_status (*launch)(void *ctx, int kernel, const void *args, size_t args_size,
                         dck_tk_grid grid);
    dck_status (*sync)(void *ctx);
    void (*destroy)(void *ctx);
    int device; /* the GPU's index; -1: none (twin) */
    /* NCCL between the ranks' GPUs (NULL: not this backend): every rank of
     * comm calls nccl_id (NCCL loaded on every rank, or a failure on every
     * rank naming those without it), rank 0 makes the id (DCK_TK_NCCL_ID
     * bytes), every rank joins with it (non-blocking start-up, waited as a
     * collective); then collectives
     * on the backend's stream, each waited by dck_comm_wait on comm (the
     * collective timeout, ncclCommGetAsyncError, ncclCommAbort, the missing
     * rank named) */
    dck_status (*nccl_id)(void *ctx, dck_comm *comm, void *id);
    dck_status (*nccl_join)(void *ctx, const void *id, int nranks, int rank, dck_comm *comm);
    dck_status (*nccl_allgather)(void *ctx, const void *send, void *recv, size_t bytes);
    dck_status (*nccl_allreduce_f32)(void *ctx, float *data, size_t n);
} dck_tk_backend;
#define DCK_TK_NCCL_ID 128

/* Kernel `kernel` on logical grid b through backend be: as many launches as
 * the limits need (DCK_ERR_LIMIT naming the grid when none can do it). */
dck_status dck_tk_launch(const dck_tk_backend *be, int kernel, const void *args, size_t size,
                         dck_tk_blocks b);

/* The kernels' CPU twin (train_twin.c): each block of the grid in turn, each
 * phase on every thread of the block before the next; a grid beyond the
 * launch limits is refused (DCK_ERR_LIMIT), as CUDA refuses it. */
dck_status dck_tk_twin_launch(int kernel, const void *args, dck_tk_grid grid);
dck_status dck_tk_twin_backend(dck_tk_backend *out);
/* The CUDA runtime (gpu_train_cuda.c): DCK_ERR_NODEVICE, saying why, when
 * this build has no CUDA, the runtime cannot be loaded or no device is
 * visible; device -1: the current one. */
dck_status dck_tk_cuda_backend(int device, dck_tk_backend *out);
/* Achieved FP32 FLOP/s of a plain FMA-throughput kernel on the device (the
 * benchmark's peer). */
dck_status dck_tk_cuda_fma_peak(double *flops);
/* The CUDA backend's stream (NULL for another backend): cuBLAS queues the
 * fast baseline's products on it (gpu_blas.h). */
void *dck_tk_cuda_stream(const dck_tk_backend *be);

/* The model, as offsets into the flat parameter vector. */
enum { DCK_GT_LN1_W, DCK_GT_LN1_B, DCK_GT_QKV_W, DCK_GT_QKV_B, DCK_GT_PROJ_W, DCK_GT_PROJ_B,
       DCK_GT_LN2_W, DCK_GT_LN2_B, DCK_GT_FC_W, DCK_GT_FC_B, DCK_GT_FC2_W, DCK_GT_FC2_B,
       DCK_GT_BLOCK_ITEMS };
typedef struct {
    uint32_t vocab, layers, width, heads, seq, batch;
    bool bf16;
    bool fast; /* fast mode: split-K atomics, one gradient buffer accumulated */
    size_t total;
    size_t off_wte, off_wpe, off_lnf_w, off_lnf_b, off_head;
    const size_t *off_block; /* layers x DCK_GT_BLOCK_ITEMS */
    /* the tensors, for AdamW: [offset, offset + numel), weight decay or not */
    size_t ntensors;
    const size_t *t_offset, *t_numel;
    const bool *t_decay;
} dck_gt_model;

typedef struct dck_gt dck_gt;

/* nbufs gradient buffers of P floats (the rank's microbatches); the
 * moments hold [lo, hi). */
dck_status dck_gt_create(const dck_gt_model *m, const dck_tk_backend *be, int nbufs, size_t lo,
                         size_t hi, dck_gt **out);
void dck_gt_free(dck_gt *g);
/* Device bytes the run holds (for messages). */
size_t dck_gt_device_bytes(const dck_gt *g);

/* Called between the forward and the backward pass of every microbatch with
 * the activations (a host copy, written back to the device afterwards):
 * the fault-injection point of detcheck canary. NULL: none. */
void dck_gt_set_activation_hook(dck_gt *g, void (*fn)(void *ctx, float *act, size_t n),
                                void *ctx);

/* master: P floats; m1, m2: hi - lo floats. NULL: leave that one. */
dck_status dck_gt_upload_state(dck_gt *g, const float *master, const float *m1, const float *m2);
dck_status dck_gt_download_state(dck_gt *g, float *master, float *m1, float *m2);
/* master[lo, hi) only (ZeRO-1: this rank's slice), and back the whole vector */
dck_status dck_gt_download_master_slice(dck_gt *g, float *master);

/* Forward + backward of one microbatch (batch sequences of seq + 1 tokens,
 * host memory) into gradient buffer buf (fast mode: added to buffer 0);
 * *loss: its mean token loss. */
dck_status dck_gt_microbatch(dck_gt *g, int buf, const uint16_t *tokens, float *loss);
/* The fixed binary tree over buffers [0, n) (n a power of two), result in 0. */
dck_status dck_gt_tree(dck_gt *g, int n);
/* Gradient buffer buf to or from the host (the exchange between ranks). */
dck_status dck_gt_grad_io(dck_gt *g, int buf, float *host, int dir);
/* A second set of K gradient buffers' worth of device memory for the
 * exchanged subtree sums: sums host[r] (K x P floats) with the tree into
 * buffer 0. */
dck_status dck_gt_tree_host(dck_gt *g, const float *host_all, int K);
/* buffer 0 *= inv_m; *sumsq: its sum of squares (gpu_train_kernels.h's order) */
dck_status dck_gt_scale_sumsq(dck_gt *g, float inv_m, float *sumsq);
/* The exchange between ranks on the GPUs with NCCL (one GPU per rank):
 * dck_gt_nccl_setup makes (rank 0, id_out) or joins (id_in) the NCCL
 * communicator; DCK_ERR_NODEVICE when the backend has no NCCL. Then
 * deterministic: ncclAllGather of every rank's subtree sum (bytes) and the
 * fixed tree on the device, as dck_gt_tree_host; fast: ncclAllReduce (float
 * sum, NCCL's order) of buffer 0. */
int dck_gt_device_index(const dck_gt *g);
dck_status dck_gt_nccl_id(dck_gt *g, dck_comm *comm, void *id);
dck_status dck_gt_nccl_join(dck_gt *g, const void *id, int K, int rank, dck_comm *comm);
dck_status dck_gt_nccl_tree(dck_gt *g, int K);
dck_status dck_gt_nccl_allreduce(dck_gt *g);
/* AdamW over [lo, hi) from buffer 0, then (bf16) the forward weights */
dck_status dck_gt_adamw(dck_gt *g, const dck_tm_adamw *k);
/* The first element of [lo, hi) whose weight the last dck_gt_adamw left
 * not finite (NaN or infinite); UINT64_MAX: none. */
dck_status dck_gt_first_nonfinite(dck_gt *g, uint64_t *index);
/* after the master weights changed outside: (bf16) the forward weights */
dck_status dck_gt_refresh_weights(dck_gt *g);

#ifdef __cplusplus
}
#endif
#endif /* DCK_GPU_TRAIN_H */

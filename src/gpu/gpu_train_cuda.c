/* The CUDA backend of the trainer (gpu_train.h): device memory, copies and
 * the launches of cuda/train.cu's kernels on one stream, through the runtime
 * that cuda_loader.c loads with dlopen. Without CUDA in the build, or without
 * a usable device, dck_tk_cuda_backend is DCK_ERR_NODEVICE saying why. */
#include "common/common.h"
#include "gpu/gpu_train.h"

#ifndef DCK_HAVE_CUDA

dck_status dck_tk_cuda_backend(int device, dck_tk_backend *out) {
    (void)device;
    (void)out;
    return dck_set_error(DCK_ERR_NODEVICE,
                         "no CUDA device: this detcheck was built without CUDA (make CUDA=0)");
}

dck_status dck_tk_cuda_fma_peak(double *flops) {
    *flops = 0;
    return dck_tk_cuda_backend(-1, NULL);
}

void *dck_tk_cuda_stream(const dck_tk_backend *be) {
    (void)be;
    return NULL;
}

#else

#include "gpu/cuda_loader.h"
#include "gpu/gpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    const dck_cudart_api *rt;
    cudaStream_t stream;
    int device;
    const dck_nccl_api *nc; /* once joined */
    ncclComm_t comm;        /* NULL again once aborted */
    dck_comm *ranks;        /* the job's ranks: the collective timeout and the roll call */
} cuda_ctx;

static dck_status err(cudaError_t e, const char *what) {
    return e == cudaSuccess ? DCK_OK : dck_gpu_error((int)e, what);
}

static dck_status c_alloc(void *ctx, size_t bytes, void **out) {
    cuda_ctx *c = ctx;
    *out = NULL;
    cudaError_t e = c->rt->cudaMalloc(out, bytes ? bytes : 4);
    if (e != cudaSuccess) {
        (void)c->rt->cudaGetLastError();
        return dck_set_error(DCK_ERR_DEVICE, "train: cannot allocate %zu bytes on CUDA device %d: %s",
                             bytes, c->device, c->rt->cudaGetErrorString(e));
    }
    return err(c->rt->cudaMemsetAsync(*out, 0, bytes, c->stream), "cudaMemsetAsync");
}

static void c_release(void *ctx, void *p) {
    cuda_ctx *c = ctx;
    if (p) (void)c->rt->cudaFree(p);
}

static dck_status c_copy(void *ctx, void *dst, const void *src, size_t bytes, int dir) {
    cuda_ctx *c = ctx;
    if (!bytes) return DCK_OK;
    enum cudaMemcpyKind k = dir == DCK_TK_H2D   ? cudaMemcpyHostToDevice
                            : dir == DCK_TK_D2H ? cudaMemcpyDeviceToHost
                                                : cudaMemcpyDeviceToDevice;
    DCK_TRY(err(c->rt->cudaMemcpyAsync(dst, src, bytes, k, c->stream), "cudaMemcpyAsync"));
    /* host buffers are pageable and reused at once: wait for copies to them
     * or from them */
    if (dir != DCK_TK_D2D) return err(c->rt->cudaStreamSynchronize(c->stream), "train step");
    return DCK_OK;
}

static dck_status c_zero(void *ctx, void *p, size_t bytes) {
    cuda_ctx *c = ctx;
    return err(c->rt->cudaMemsetAsync(p, 0, bytes, c->stream), "cudaMemsetAsync");
}

static dck_status c_launch(void *ctx, int kernel, const void *args, size_t size, dck_tk_grid g) {
    cuda_ctx *c = ctx;
    (void)size;
    cudaKernel_t k;
    cudaError_t e = (cudaError_t)dck_cuda_kernel(DCK_KERNEL_TRAIN0 + kernel, &k);
    if (e != cudaSuccess) return err(e, "loading the trainer's kernels");
    dim3 grid = {g.x, g.y, g.z}, block = {DCK_TK_THREADS, 1, 1};
    /* the struct by value, copied at the launch, and the launch's origin in
     * the kernel's logical grid (cuda/train.cu's second parameter) */
    void *argv[2] = {(void *)args, &g.at};
    return err(c->rt->cudaLaunchKernel((const void *)k, grid, block, argv, 0, c->stream),
               "cudaLaunchKernel (train)");
}

static dck_status c_sync(void *ctx) {
    cuda_ctx *c = ctx;
    return err(c->rt->cudaStreamSynchronize(c->stream), "train step");
}

/* every rank: NCCL loaded on all of them (one rank's failure is every
 * rank's, named, before any enters NCCL); then rank 0 makes the id */
static dck_status c_nccl_id(void *ctx, dck_comm *comm, void *id) {
    cuda_ctx *c = ctx;
    const dck_nccl_api *nc;
    DCK_TRY(dck_nccl_load_all(comm, &nc));
    if (dck_comm_rank(comm) != 0) return DCK_OK;
    _Static_assert(sizeof(ncclUniqueId) == DCK_TK_NCCL_ID, "NCCL's unique id is 128 bytes");
    ncclResult_t r = nc->ncclGetUniqueId((ncclUniqueId *)id);
    return r == ncclSuccess ? DCK_OK
                            : dck_set_error(DCK_ERR_DEVICE, "train: ncclGetUniqueId: %s (device %d)",
                                            nc->ncclGetErrorString(r), c->device);
}

/* start-up without blocking, waited as the collectives (dck_nccl_init) */
static dck_status c_nccl_join(void *ctx, const void *id, int nranks, int rank, dck_comm *comm) {
    cuda_ctx *c = ctx;
    const dck_nccl_api *nc;
    DCK_TRY(dck_nccl_load(&nc));
    c->nc = nc;
    c->ranks = comm;
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    return dck_nccl_init(comm, nc, &c->comm, nranks, &u, rank);
}

/* The wait after every collective (dck_nccl_wait): a collective that is
 * only enqueued could otherwise hang the next copy from the device for
 * good; on a failure the communicator is aborted (c->comm NULL: c_destroy
 * leaves it). */
static dck_status nccl_wait(cuda_ctx *c, ncclResult_t r, const char *what) {
    char label[96];
    snprintf(label, sizeof label, "train: %s", what);
    return dck_nccl_wait(c->ranks, c->nc, &c->comm, c->stream, r, label);
}

static dck_status c_nccl_allgather(void *ctx, const void *send, void *recv, size_t bytes) {
    cuda_ctx *c = ctx;
    if (!c->comm) return dck_set_error(DCK_ERR_DEVICE, "train: no NCCL communicator");
    return nccl_wait(c, c->nc->ncclAllGather(send, recv, bytes, ncclUint8, c->comm, c->stream),
                     "ncclAllGather of the gradient sums");
}

static dck_status c_nccl_allreduce(void *ctx, float *data, size_t n) {
    cuda_ctx *c = ctx;
    if (!c->comm) return dck_set_error(DCK_ERR_DEVICE, "train: no NCCL communicator");
    return nccl_wait(c, c->nc->ncclAllReduce(data, data, n, ncclFloat32, ncclSum, c->comm, c->stream),
                     "ncclAllReduce of the gradients");
}

static void c_destroy(void *ctx) {
    cuda_ctx *c = ctx;
    if (!c) return;
    if (c->comm) (void)c->nc->ncclCommDestroy(c->comm);
    if (c->stream) (void)c->rt->cudaStreamDestroy(c->stream);
    free(c);
}

dck_status dck_tk_cuda_backend(int device, dck_tk_backend *out) {
    int n = 0;
    DCK_TRY(dck_gpu_device_count(&n));
    const dck_cudart_api *rt = dck_cudart_loaded();
    if (!rt) return dck_set_error(DCK_ERR_NODEVICE, "no CUDA runtime");
    if (device >= n)
        return dck_set_error(DCK_ERR_NODEVICE, "no CUDA device %d (%d visible)", device, n);
    if (device >= 0) DCK_TRY(err(rt->cudaSetDevice(device), "cudaSetDevice"));
    cuda_ctx *c = dck_xcalloc(1, sizeof *c);
    if (!c) return dck_oom("train gpu");
    c->rt = rt;
    (void)rt->cudaGetDevice(&c->device);
    cudaError_t e = rt->cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        free(c);
        return err(e, "cudaStreamCreateWithFlags");
    }
    cudaKernel_t k;
    e = (cudaError_t)dck_cuda_kernel(DCK_KERNEL_TRAIN0, &k);
    if (e != cudaSuccess) {
        c_destroy(c);
        return err(e, "loading the trainer's kernels (cuda/train.cu)");
    }
    *out = (dck_tk_backend){"cuda",   c,         c_alloc,          c_release,
                            c_copy,   c_zero,    c_launch,         c_sync,
                            c_destroy, c->device, c_nccl_id,       c_nccl_join,
                            c_nccl_allgather, c_nccl_allreduce};
    return DCK_OK;
}

/* the backend's stream, for cuBLAS in the bench's fast mode (gpu_blas.h) */
void *dck_tk_cuda_stream(const dck_tk_backend *be) {
    return be && be->ctx && be->name && !strcmp(be->name, "cuda") ? (void *)((cuda_ctx *)be->ctx)->stream
                                                                 : NULL;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

dck_status dck_tk_cuda_fma_peak(double *flops) {
    *flops = 0;
    dck_tk_backend be;
    DCK_TRY(dck_tk_cuda_backend(-1, &be));
    cuda_ctx *c = be.ctx;
    float *out = NULL;
    dck_status s = c_alloc(c, 4, (void **)&out);
    int sms = 0;
    if (!s) s = err(c->rt->cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, c->device),
                    "cudaDeviceGetAttribute");
    uint32_t blocks = (uint32_t)(sms > 0 ? sms : 1) * 8, iters = 1u << 16;
    dck_tk_fma_args a = {out, iters, 0.5f};
    double best = 0;
    for (int round = 0; !s && round < 4; round++) {
        s = c_sync(c);
        double t0 = now_s();
        if (!s) s = c_launch(c, DCK_TK_fma_peak, &a, sizeof a, (dck_tk_grid){.x = blocks, .y = 1, .z = 1});
        if (!s) s = c_sync(c);
        double dt = now_s() - t0;
        double f = (double)blocks * DCK_TK_THREADS * iters * 8.0 * 2.0 / dt;
        if (round > 0 && f > best) best = f; /* round 0 warms up */
    }
    c_release(c, out);
    c_destroy(c);
    *flops = best;
    return s;
}

#endif

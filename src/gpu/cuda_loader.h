/* The CUDA runtime and NCCL, loaded with dlopen on the first GPU call.
 *
 * A detcheck built with CUDA links neither libcudart nor libnccl (218 MB):
 * a CPU call maps none of them and starts as fast as a CPU-only build
 * (`ldd detcheck` lists neither). The first GPU call loads the runtime
 * (libcudart.so.MAJOR of the toolkit built against, then libcudart.so,
 * searched as common/libfind.h says: NVIDIA's wheels, conda, ...),
 * resolves the functions of the tables below once (thread-safe), and loads
 * the kernels (the fatbin that cuda/digest.cu compiles to, embedded in the
 * library) with cudaLibraryLoadData. NCCL is loaded only by the NCCL
 * reduction of `hash --distributed --device cuda`.
 *
 * A library that cannot be loaded is DCK_ERR_NODEVICE with a message that
 * names it and every place tried. DETCHECK_CUDART_LIB / DETCHECK_NCCL_LIB
 * name another library to load instead (a path or a soname; the tests point
 * them at missing names). */
#ifndef DCK_GPU_CUDA_LOADER_H
#define DCK_GPU_CUDA_LOADER_H

#ifdef DCK_HAVE_CUDA

#include "common/libfind.h"
#include "detcheck_static.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

/* Every runtime function detcheck calls: one line here, nothing else. */
#define DCK_CUDART_FUNCTIONS(X)                                                                 \
    X(cudaGetErrorString)                                                                       \
    X(cudaGetErrorName)                                                                         \
    X(cudaGetLastError)                                                                         \
    X(cudaRuntimeGetVersion)                                                                    \
    X(cudaDriverGetVersion)                                                                     \
    X(cudaGetDeviceCount)                                                                       \
    X(cudaGetDevice)                                                                            \
    X(cudaSetDevice)                                                                            \
    X(cudaDeviceGetAttribute)                                                                   \
    X(cudaDeviceGetPCIBusId)                                                                    \
    X(cudaPointerGetAttributes)                                                                 \
    X(cudaMalloc)                                                                               \
    X(cudaFree)                                                                                 \
    X(cudaMallocAsync)                                                                          \
    X(cudaFreeAsync)                                                                            \
    X(cudaHostAlloc)                                                                            \
    X(cudaFreeHost)                                                                             \
    X(cudaMemsetAsync)                                                                          \
    X(cudaMemcpyAsync)                                                                          \
    X(cudaStreamCreateWithFlags)                                                                \
    X(cudaStreamDestroy)                                                                        \
    X(cudaStreamSynchronize)                                                                    \
    X(cudaStreamQuery)                                                                          \
    X(cudaEventCreateWithFlags)                                                                 \
    X(cudaEventDestroy)                                                                         \
    X(cudaEventRecord)                                                                          \
    X(cudaEventSynchronize)                                                                     \
    X(cudaOccupancyMaxActiveBlocksPerMultiprocessor)                                            \
    X(cudaLibraryLoadData)                                                                      \
    X(cudaLibraryGetKernel)                                                                     \
    X(cudaLaunchKernel)

#define DCK_NCCL_FUNCTIONS(X)                                                                   \
    X(ncclGetErrorString)                                                                       \
    X(ncclGetUniqueId)                                                                          \
    X(ncclCommInitRank)                                                                         \
    X(ncclCommInitRankConfig)                                                                   \
    X(ncclCommDestroy)                                                                          \
    X(ncclReduce)                                                                               \
    X(ncclAllGather)                                                                            \
    X(ncclAllReduce)                                                                            \
    X(ncclCommGetAsyncError)                                                                    \
    X(ncclCommAbort)                                                                            \
    X(ncclCommCount)                                                                            \
    X(ncclCommUserRank)                                                                         \
    X(ncclCommCuDevice)

#define DCK_LOADER_FIELD_(name) __typeof__(&name) name;
typedef struct {
    DCK_CUDART_FUNCTIONS(DCK_LOADER_FIELD_)
} dck_cudart_api;
typedef struct {
    DCK_NCCL_FUNCTIONS(DCK_LOADER_FIELD_)
} dck_nccl_api;
#undef DCK_LOADER_FIELD_

/* The runtime's table: loaded on the first call (once per process, any
 * thread), the same table afterwards. DCK_ERR_NODEVICE, naming the library,
 * when it cannot be loaded or lacks a function. */
dck_status dck_cudart_load(const dck_cudart_api **out);
/* The same table (loading it if need be), or NULL, the error set, when the
 * runtime cannot be loaded: for code that runs after a successful load. */
const dck_cudart_api *dck_cudart_loaded(void);
dck_status dck_nccl_load(const dck_nccl_api **out);
/* What the search for each found (common/libfind.h: its path, the step that
 * found it, or every place tried), loading it if need be: for doctor. *why
 * is NULL when the library loaded with every function of its table, else
 * the loaders' message (a library found that lacks a function has a
 * handle and a path). */
const dck_libfind *dck_cudart_found(const char **why);
const dck_libfind *dck_nccl_found(const char **why);

struct dck_comm; /* common/common.h */
/* Waits for an NCCL collective enqueued on stream as every collective is
 * waited (dck_comm_wait on c; NULL: the job's communicator, if any): until
 * NCCL has enqueued it (a non-blocking communicator's ncclInProgress) and
 * the stream's work is done, NCCL reports a peer's failure apart
 * (ncclCommGetAsyncError), or the collective timeout passes. On a failure
 * the communicator is given up (ncclCommAbort, which also stops kernels
 * spinning on a peer that never comes) and *comm is set to NULL. enqueued:
 * what the call that enqueued the collective returned (a failure aborts at
 * once). what names the collective in messages. (src/gpu/gpu_nccl.c) */
dck_status dck_nccl_wait(struct dck_comm *c, const dck_nccl_api *nc, ncclComm_t *comm, cudaStream_t stream,
                         ncclResult_t enqueued, const char *what);

/* NCCL's start-up, which has no timeout of its own: a rank that never
 * joins (it could not load NCCL, or died) leaves the others in
 * ncclCommInitRank for good. (src/gpu/gpu_nccl.c)
 *
 * dck_nccl_load_all: every rank of c loads NCCL and learns at once whether
 * every other rank could (one all-gather over c's MPI, waited as every
 * collective). When one could not, every rank fails with the same message,
 * naming the ranks and their reasons (DCK_ERR_NODEVICE), before any rank
 * enters NCCL. */
dck_status dck_nccl_load_all(struct dck_comm *c, const dck_nccl_api **out);
/* dck_nccl_init: joins the communicator of id (rank of nranks) without
 * blocking (ncclCommInitRankConfig, blocking = 0), waited as a collective
 * (dck_comm_wait on c; NULL: the job's): until NCCL says it is ready
 * (ncclCommGetAsyncError), reports a failure, or the collective timeout
 * passes; on a failure the communicator is aborted (ncclCommAbort) and
 * *comm is NULL. The communicator is non-blocking: an enqueue may answer
 * ncclInProgress, which dck_nccl_wait takes as enqueued. */
dck_status dck_nccl_init(struct dck_comm *c, const dck_nccl_api *nc, ncclComm_t *comm, int nranks,
                         const ncclUniqueId *id, int rank);

/* The kernels of cuda/digest.cu and cuda/train.cu, loaded into the runtime
 * once (by name from the embedded fatbins). A CUDA error (0 = success). */
/* The trainer's kernels (cuda/train.cu) follow, DCK_KERNEL_TRAIN0 + DCK_TK_*
 * (gpu_train_kernels.h: DCK_TK_KERNELS). */
#include "gpu/gpu_train_kernels.h"
enum {
    DCK_KERNEL_SEGMENTS_SUM,
    DCK_KERNEL_WORD_SUM,
    DCK_KERNEL_TRAIN0,
    DCK_KERNEL_COUNT = DCK_KERNEL_TRAIN0 + DCK_TK_COUNT
};
int dck_cuda_kernel(int which, cudaKernel_t *out);

/* Scratch device memory on a stream (gpu.c). Stream-ordered allocation
 * (cudaMallocAsync) needs the device's memory pools, which some virtualised
 * GPUs do not offer: the call fails with cudaErrorNotSupported (801), or the
 * device says cudaDevAttrMemoryPoolsSupported = 0. That answer is remembered
 * per device in memo (DCK_GPU_POOL_MEMO entries, one per device index, 0
 * unknown) and the device gets cudaMalloc from then on; each block records
 * which call made it and is freed with the matching one. memo NULL: the
 * process's own. rt is a parameter so that a test can pass a fake runtime. */
#define DCK_GPU_POOL_MEMO 64
enum { DCK_GPU_POOLS_UNKNOWN, DCK_GPU_POOLS_YES, DCK_GPU_POOLS_NO };
typedef struct {
    void *ptr;
    int pooled; /* the call made (or that failed): 1 cudaMallocAsync (freed with
                 * cudaFreeAsync), 0 cudaMalloc; ptr is NULL after a failure */
} dck_gpu_scratch;
cudaError_t dck_gpu_scratch_alloc(const dck_cudart_api *rt, int *memo, int device, size_t bytes,
                                  cudaStream_t st, dck_gpu_scratch *out);
/* cudaMalloc'd blocks: the stream is synchronised first (the work queued on
 * it may still read the block). The block is released even on an error. */
cudaError_t dck_gpu_scratch_free(const dck_cudart_api *rt, dck_gpu_scratch *s, cudaStream_t st);
/* The process's memo for device (tests: force the fallback on a real GPU). */
void dck_gpu_pools_memo_set(int device, int state);

#endif /* DCK_HAVE_CUDA */
#endif /* DCK_GPU_CUDA_LOADER_H */

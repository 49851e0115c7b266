/* The launchers of the kernels of cuda/digest.cu (declared in gpu.h): grid
 * size and cudaLaunchKernel through the runtime that cuda_loader.c loads.
 * The argument arrays follow the kernels' parameter lists in digest.cu. */
#include "common/common.h"

#ifdef DCK_HAVE_CUDA

#include "gpu/cuda_loader.h"
#include "gpu/gpu.h"
#include "gpu/gpu_xxh3.h" /* DCK_KERNEL_THREADS, DCK_TILE_SEGMENTS */

/* Blocks that keep every SM busy (resident blocks per SM x SMs), found once
 * per device and kernel (racing threads store the same value). */
static cudaError_t fill_grid(const dck_cudart_api *rt, int which, cudaKernel_t kernel,
                             uint64_t work_blocks, uint32_t want, uint32_t *grid) {
    static uint32_t cache[DCK_KERNEL_COUNT][64];
    if (want == 0) {
        int dev = 0, sms = 0, per_sm = 0;
        cudaError_t e = rt->cudaGetDevice(&dev);
        if (e != cudaSuccess) return e;
        uint32_t *slot = dev >= 0 && dev < 64 ? &cache[which][dev] : NULL;
        uint32_t cached = slot ? __atomic_load_n(slot, __ATOMIC_RELAXED) : 0;
        if (cached) {
            want = cached;
        } else {
            e = rt->cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
            if (e == cudaSuccess)
                e = rt->cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                    &per_sm, (const void *)kernel, DCK_KERNEL_THREADS, 0);
            if (e != cudaSuccess) return e;
            want = (uint32_t)(sms > 0 ? sms : 1) * (uint32_t)(per_sm > 0 ? per_sm : 1);
            if (slot) __atomic_store_n(slot, want, __ATOMIC_RELAXED);
        }
    }
    if (work_blocks < want) want = (uint32_t)(work_blocks ? work_blocks : 1);
    *grid = want;
    return cudaSuccess;
}

/* The runtime and the kernel, or the CUDA error that stops the launch. */
static cudaError_t kernel_of(int which, const dck_cudart_api **rt, cudaKernel_t *k) {
    if (dck_cudart_load(rt)) return cudaErrorSharedObjectInitFailed;
    return (cudaError_t)dck_cuda_kernel(which, k);
}

static cudaError_t launch(const dck_cudart_api *rt, cudaKernel_t k, uint32_t grid, void **args,
                          void *stream) {
    dim3 g = {grid, 1, 1}, b = {DCK_KERNEL_THREADS, 1, 1};
    return rt->cudaLaunchKernel((const void *)k, g, b, args, 0, (cudaStream_t)stream);
}

int dck_cuda_segments_sum_launch(const void *data, uint64_t len, uint64_t first_segment,
                                 uint64_t *dev_lanes, uint32_t nblocks, void *stream) {
    if (len == 0) return (int)cudaSuccess;
    const dck_cudart_api *rt;
    cudaKernel_t k;
    cudaError_t e = kernel_of(DCK_KERNEL_SEGMENTS_SUM, &rt, &k);
    if (e != cudaSuccess) return (int)e;
    const uint8_t *bytes = data;
    uint64_t nseg = len / 128;
    uint32_t tail_len = (uint32_t)(len % 128);
    unsigned long long *lanes = (unsigned long long *)dev_lanes;
    uint32_t grid = 0;
    e = fill_grid(rt, DCK_KERNEL_SEGMENTS_SUM, k,
                  (nseg + DCK_TILE_SEGMENTS - 1) / DCK_TILE_SEGMENTS, nblocks, &grid);
    if (e != cudaSuccess) return (int)e;
    void *args[] = {&bytes, &nseg, &tail_len, &first_segment, &lanes};
    return (int)launch(rt, k, grid, args, stream);
}

int dck_cuda_word_sum_launch(const uint64_t *data, uint64_t nwords, uint64_t *dev_out,
                             uint32_t nblocks, void *stream) {
    if (nwords == 0) return (int)cudaSuccess;
    const dck_cudart_api *rt;
    cudaKernel_t k;
    cudaError_t e = kernel_of(DCK_KERNEL_WORD_SUM, &rt, &k);
    if (e != cudaSuccess) return (int)e;
    const unsigned long long *words = (const unsigned long long *)data;
    unsigned long long *out = (unsigned long long *)dev_out;
    uint32_t grid = 0;
    e = fill_grid(rt, DCK_KERNEL_WORD_SUM, k,
                  (nwords + DCK_KERNEL_THREADS - 1) / DCK_KERNEL_THREADS, nblocks, &grid);
    if (e != cudaSuccess) return (int)e;
    void *args[] = {&words, &nwords, &out};
    return (int)launch(rt, k, grid, args, stream);
}

#endif /* DCK_HAVE_CUDA */

// Digest v1 on the GPU: the segment-sum kernel and the benchmark's peer.
//
// Each segment j of a region is hashed with XXH3-128 seeded with its global
// index; the kernel adds the halves into two 64-bit lanes per thread, then per
// block (warp shuffles), then into the caller's device lanes with 64-bit
// atomics. Integer addition mod 2^64 is associative and commutative, so the
// bits do not depend on the grid, the scheduling or the order of the atomics,
// and they equal the CPU's (src/core/digest.c). The hash and the tile geometry are
// in src/gpu/gpu_xxh3.h, shared with the CPU twin (src/gpu/digest_twin.c).
//
// Device code only: the Makefile compiles this file to a fatbin (nvcc
// -fatbin) that is embedded in libdetcheck as data and loaded at run time
// through the dlopen'ed CUDA runtime (src/gpu/cuda_loader.c says why: no
// <<<>>> host stub, so nothing links cudart). The kernels are extern "C" so
// that the loader finds them by these names; their launchers (grid size,
// cudaLaunchKernel) are in src/gpu/gpu_launch.c, and their parameter lists
// must match the argument arrays there.
#include "gpu/gpu_xxh3.h"

#include <cuda_runtime.h>

namespace {

__device__ __forceinline__ void add_block_lanes(uint64_t lo, uint64_t hi,
                                                unsigned long long *dev_lanes) {
    __shared__ unsigned long long warp_lo[DCK_KERNEL_THREADS / 32];
    __shared__ unsigned long long warp_hi[DCK_KERNEL_THREADS / 32];
    for (int d = 16; d > 0; d >>= 1) {
        lo += __shfl_down_sync(0xffffffffu, (unsigned long long)lo, d);
        hi += __shfl_down_sync(0xffffffffu, (unsigned long long)hi, d);
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
        warp_lo[warp] = lo;
        warp_hi[warp] = hi;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long l = 0, h = 0;
        for (int w = 0; w < DCK_KERNEL_THREADS / 32; w++) {
            l += warp_lo[w];
            h += warp_hi[w];
        }
        if (l | h) {
            atomicAdd(&dev_lanes[0], l);
            atomicAdd(&dev_lanes[1], h);
        }
    }
}

} // namespace

// Whole segments [0, nseg) of data (segment k has global index
// first_segment + k), then, when tail_len > 0, the short segment after them.
extern "C" __global__ void __launch_bounds__(DCK_KERNEL_THREADS)
    dck_segments_sum_kernel(const uint8_t *data, uint64_t nseg, uint32_t tail_len,
                            uint64_t first_segment, unsigned long long *dev_lanes) {
    __shared__ uint64_t stage[DCK_STAGE_SLOTS];
    uint64_t lo = 0, hi = 0;
    const uint64_t ntiles = (nseg + DCK_TILE_SEGMENTS - 1) / DCK_TILE_SEGMENTS;
    const uint32_t shift = (uint32_t)(((uintptr_t)data & 7) * 8);
    for (uint64_t t = blockIdx.x; t < ntiles; t += gridDim.x) {
        uint64_t f;
        uint32_t count;
        dck_tile_range(t, nseg, &f, &count);
        const uint64_t start = (uint64_t)(uintptr_t)data + f * 128;
        const unsigned long long *words =
            reinterpret_cast<const unsigned long long *>(start & ~(uint64_t)7);
        const uint32_t nwords = dck_tile_words(start, count);
        // Streaming loads: every byte is read once.
#pragma unroll 4
        for (uint32_t q = threadIdx.x; q < nwords; q += DCK_KERNEL_THREADS)
            stage[dck_stage_slot(q)] = __ldcs(words + q);
        __syncthreads();
        if (threadIdx.x < count) {
            uint64_t w[16], l, h;
            dck_stage_segment(stage, threadIdx.x, shift, w);
            dck_xxh3_128_seg128(w, first_segment + f + threadIdx.x, &l, &h);
            lo += l;
            hi += h;
        }
        __syncthreads();
    }
    if (tail_len && blockIdx.x == 0 && threadIdx.x == 0) {
        uint64_t l, h;
        dck_xxh3_128_upto128(data + nseg * 128, tail_len, first_segment + nseg, &l, &h);
        lo += l;
        hi += h;
    }
    add_block_lanes(lo, hi, dev_lanes);
}

// The peer of the benchmark: reads every 64-bit word once and sums them.
extern "C" __global__ void __launch_bounds__(DCK_KERNEL_THREADS)
    dck_word_sum_kernel(const unsigned long long *data, uint64_t nwords,
                        unsigned long long *dev_out) {
    uint64_t s = 0;
    const uint64_t stride = (uint64_t)gridDim.x * DCK_KERNEL_THREADS;
#pragma unroll 4
    for (uint64_t i = (uint64_t)blockIdx.x * DCK_KERNEL_THREADS + threadIdx.x; i < nwords;
         i += stride)
        s += __ldcs(data + i);
    add_block_lanes(s, 0, dev_out);
}

/* GPU digest internals: the launchers of the kernels of cuda/digest.cu
 * (src/gpu/gpu_launch.c, built only with CUDA; the runtime is loaded on the
 * first GPU call by src/gpu/cuda_loader.c), the host logic shared by the GPU
 * path and its CPU twin, and the twin itself (always built; the CPU oracle
 * for the kernels' arithmetic). */
#ifndef DCK_GPU_INTERNAL_H
#define DCK_GPU_INTERNAL_H

#include "detcheck_static.h"

#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ fragment split
 * Where a fragment [offset, offset+length) of a tensor of tensor_bytes is
 * cut, exactly as dck_fragment_partial_compute cuts it: head bytes
 * [offset, offset+head_len), then the region [mid_begin, mid_end) of whole
 * segments (plus the tensor's short last segment when the fragment ends the
 * tensor), then tail bytes [tail_begin, end). Offsets are global. */
typedef struct {
    uint64_t offset, length;
    uint32_t head_len, tail_len;
    uint64_t mid_begin, mid_end; /* mid_begin % 128 == 0 when mid_end > mid_begin */
    uint64_t tail_begin;
} dck_fragment_split;

dck_status dck_fragment_split_compute(uint64_t tensor_bytes, uint64_t offset, uint64_t length,
                                      dck_fragment_split *out);

/* Builds a fragment partial from a split: copy(ctx, global_offset, dst, n)
 * fetches bytes of the fragment (from wherever they live); sum(ctx,
 * global_offset, n, first_segment, &lanes) reduces a run of segments. */
typedef dck_status (*dck_frag_copy_fn)(void *ctx, uint64_t goff, void *dst, size_t n);
typedef dck_status (*dck_frag_sum_fn)(void *ctx, uint64_t goff, uint64_t n, uint64_t first_segment,
                                      dck_lanes *out);
dck_status dck_fragment_partial_build(const dck_fragment_split *sp, dck_frag_copy_fn copy,
                                      dck_frag_sum_fn sum, void *ctx, dck_fragment_partial *out);

/* ------------------------------------------------------------------ CPU twin
 * The segment-sum kernel run on the CPU: the same tiles, the same staging of
 * aligned words (bytes outside the region read as zero, as they are shifted
 * out), the same funnel shifts and the same hash code (src/gpu/gpu_xxh3.h).
 * `address` plays the device address of data (only its low 3 bits matter).
 * nblocks is the grid size. */
dck_lanes dck_twin_segments_sum(const void *data, size_t len, uint64_t first_segment,
                                uintptr_t address, uint32_t nblocks);
/* dck_gpu_fragment_partial's logic over host memory, with the twin kernel. */
dck_status dck_twin_fragment_partial(uint64_t tensor_bytes, uint64_t offset, const void *data,
                                     size_t length, uint32_t nblocks, dck_fragment_partial *out);
/* XXH3-128 with a seed of 0..128 bytes, the twin's hash (for tests). */
void dck_twin_xxh3_128(const void *data, uint32_t len, uint64_t seed, uint64_t *low,
                       uint64_t *high);
void dck_twin_xxh3_128_seg128(const void *data, uint64_t seed, uint64_t *low, uint64_t *high);

/* ------------------------------------------------------------------ launchers (src/gpu/gpu_launch.c)
 * The kernels of cuda/digest.cu, launched through the loaded runtime. Return
 * a cudaError_t as int (0 = success; cudaErrorSharedObjectInitFailed when
 * the runtime cannot be loaded). dev_lanes: two uint64 in device memory that
 * the kernel adds its sums to (atomics; any order gives the same bits).
 * nblocks 0: fill the device. */
int dck_cuda_segments_sum_launch(const void *data, uint64_t len, uint64_t first_segment,
                                 uint64_t *dev_lanes, uint32_t nblocks, void *stream);
/* The benchmark's peer: the sum of the buffer as 64-bit words (the
 * memory-bandwidth limit of a read-once kernel). */
int dck_cuda_word_sum_launch(const uint64_t *data, uint64_t nwords, uint64_t *dev_out,
                             uint32_t nblocks, void *stream);

/* ------------------------------------------------------------------ host helpers (src/gpu/gpu.c) */
/* Sets DCK_ERR_DEVICE with the CUDA error text; returns it. */
dck_status dck_gpu_error(int cuda_err, const char *what);
/* Which device holds ptr (DCK_ERR_INVALID when it is not device memory). */
dck_status dck_gpu_pointer_device(const void *ptr, int *device);
/* The PCI bus id of a visible device ("0000:3b:00.0"), for detcheck canary's
 * report; DCK_ERR_NODEVICE without CUDA. */
dck_status dck_gpu_pci_bus_id(int device, char *buf, size_t n);

/* ------------------------------------------------------------------ file hashing (src/gpu/gpu_stream.c)
 * The logical bytes [begin, end) of a checkpoint tensor, begin a multiple of
 * 128, end a multiple of 128 or the tensor's size: a run of whole segments. */
typedef struct {
    size_t tensor;
    uint64_t begin, end;
} dck_lane_range;

/* Lane sums of ranges on the GPU: the bytes are read (dck_checkpoint_read,
 * `threads` readers) into one of two pinned buffers while the GPU copies and
 * hashes the other; each range's sums are added, on the device, to lanes
 * 2*tensor and 2*tensor+1 of an array of 2*ntensors uint64. */
typedef struct dck_gpu_job dck_gpu_job;
dck_status dck_gpu_job_create(int device, size_t ntensors, size_t buffer_bytes,
                              dck_gpu_job **out);
dck_status dck_gpu_job_run(dck_gpu_job *j, dck_checkpoint *ck, const dck_lane_range *r, size_t nr,
                           int threads);
uint64_t *dck_gpu_job_device_lanes(dck_gpu_job *j);
void *dck_gpu_job_stream(dck_gpu_job *j);
/* Waits for the job and copies the 2*ntensors lanes to the host. */
dck_status dck_gpu_job_download(dck_gpu_job *j, uint64_t *host_lanes);
void dck_gpu_job_free(dck_gpu_job *j);

/* The CPU twin of dck_gpu_job_run: the same double-buffered pipeline
 * (packing, rotation, fills by reader threads) over host buffers and the
 * twin kernel; buf_bytes and task_bytes (a multiple of 128, <= buf_bytes)
 * small in tests so that many buffers turn over. Adds into host_lanes. */
dck_status dck_twin_staged_lanes(dck_checkpoint *ck, const dck_lane_range *r, size_t nr,
                                 int threads, size_t buf_bytes, uint64_t task_bytes,
                                 uint64_t *host_lanes);

/* The same sums on the CPU (threads readers and hashers). */
dck_status dck_cpu_lanes_run(dck_checkpoint *ck, const dck_lane_range *r, size_t nr, int threads,
                             uint64_t *host_lanes);

#ifdef __cplusplus
}
#endif
#endif /* DCK_GPU_INTERNAL_H */

/* GPU digest throughput against the memory-bandwidth limit, in one run:
 * the segment-sum kernel over an 8 GiB device buffer vs the peer kernel
 * that reads the same buffer once as 64-bit words and sums them (a
 * read-once kernel can go no faster). Goal: ratio >= 0.8.
 *   bench_gpu [GiB]   (default 8)
 * Exit 0 goal met, 3 goal missed, 77 no GPU (skipped), 1 trouble. */
#include "detcheck.h"
#include "gpu/gpu.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#define CUDA_OK(call)                                                                           \
    do {                                                                                        \
        cudaError_t e_ = (cudaError_t)(call);                                                   \
        if (e_ != cudaSuccess) {                                                                \
            fprintf(stderr, "bench_gpu: %s: %s\n", #call, cudaGetErrorString(e_));              \
            return 1;                                                                           \
        }                                                                                       \
    } while (0)

int main(int argc, char **argv) {
    int n = 0;
    if (dck_gpu_device_count(&n) != DCK_OK) {
        printf("bench_gpu: skipped: %s\n", dck_last_error());
        return 77;
    }
    size_t gib = argc > 1 ? (size_t)strtoul(argv[1], NULL, 10) : 8;
    if (gib == 0) gib = 8;
    size_t bytes = gib << 30;
    uint8_t *d;
    uint64_t *out;
    CUDA_OK(cudaMalloc((void **)&d, bytes));
    CUDA_OK(cudaMalloc((void **)&out, 16));
    CUDA_OK(cudaMemset(d, 0x5a, bytes));
    cudaEvent_t a, b;
    CUDA_OK(cudaEventCreate(&a));
    CUDA_OK(cudaEventCreate(&b));
    float best_digest = 1e30f, best_read = 1e30f;
    for (int rep = 0; rep < 6; rep++) { /* rep 0 warms up */
        float ms;
        CUDA_OK(cudaEventRecord(a, 0));
        CUDA_OK(dck_cuda_word_sum_launch((const uint64_t *)d, bytes / 8, out, 0, NULL));
        CUDA_OK(cudaEventRecord(b, 0));
        CUDA_OK(cudaEventSynchronize(b));
        CUDA_OK(cudaEventElapsedTime(&ms, a, b));
        if (rep && ms < best_read) best_read = ms;
        CUDA_OK(cudaEventRecord(a, 0));
        CUDA_OK(dck_cuda_segments_sum_launch(d, bytes, 0, out, 0, NULL));
        CUDA_OK(cudaEventRecord(b, 0));
        CUDA_OK(cudaEventSynchronize(b));
        CUDA_OK(cudaEventElapsedTime(&ms, a, b));
        if (rep && ms < best_digest) best_digest = ms;
    }
    /* the same through the public API (pointer checks, scratch, copy-back) */
    dck_lanes l;
    cudaEventRecord(a, 0);
    if (dck_gpu_segments_sum(d, bytes, 0, NULL, &l) != DCK_OK) {
        fprintf(stderr, "bench_gpu: %s\n", dck_last_error());
        return 1;
    }
    cudaEventRecord(b, 0);
    cudaEventSynchronize(b);
    float api_ms;
    cudaEventElapsedTime(&api_ms, a, b);
    double gbs_d = (double)bytes / (best_digest * 1e-3) / 1e9;
    double gbs_r = (double)bytes / (best_read * 1e-3) / 1e9;
    double ratio = gbs_d / gbs_r;
    struct cudaDeviceProp prop;
    CUDA_OK(cudaGetDeviceProperties(&prop, 0));
    printf("bench_gpu: %s, %zu GiB device buffer, best of 5\n", prop.name, gib);
    printf("  digest v1 kernel     %8.1f GB/s  (%.2f ms)\n", gbs_d, best_digest);
    printf("  64-bit word sum      %8.1f GB/s  (%.2f ms)  [peer: read-once bandwidth limit]\n",
           gbs_r, best_read);
    printf("  public API call      %8.1f GB/s  (%.2f ms)\n",
           (double)bytes / (api_ms * 1e-3) / 1e9, api_ms);
    printf("  ratio digest/peer    %8.3f   goal >= 0.80: %s\n", ratio,
           ratio >= 0.8 ? "met" : "NOT met");
    cudaFree(d);
    cudaFree(out);
    return ratio >= 0.8 ? 0 : 3;
}

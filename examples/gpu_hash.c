/* Digests of tensors that live on the GPU, without copying them to the host.
 *
 *   1. a whole tensor:    dck_gpu_digest(dtype, shape, ndim, device_ptr, bytes, stream)
 *   2. a sharded tensor:  each holder of a run of its bytes (a GPU, a rank,
 *      a CPU thread) computes a partial for its fragment, at any byte offset;
 *      the partials combine, in any order, into the same digest.
 *   3. many tensors per step: the async call sums into device memory; one
 *      sync (or one NCCL all-reduce on uint64) at the end.
 *
 * Build (after make):   make gpu-tests   (-> BUILD/tests/gpu/gpu_hash)
 * or by hand:
 *   cc -std=c11 -Iinclude -I/usr/local/cuda/include examples/gpu_hash.c build/libdetcheck.a \
 *      $(pkg-config --libs libxxhash libzstd yaml-0.1 jansson) $(mpicc --showme:link) \
 *      -L/usr/local/cuda/lib64 -lcudart -ldl -lpthread -lm -o gpu_hash
 * (-lcudart for this program's own cudaMalloc & co.: libdetcheck links neither
 * cudart nor NCCL, it loads the runtime with dlopen on its first GPU call and
 * shares the one this program loaded.)
 * Exit 0 when the GPU digests equal the CPU's, 1 when not, 2 without a GPU. */
#include "detcheck_static.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK_DCK(call)                                                                         \
    do {                                                                                        \
        dck_status s_ = (call);                                                                 \
        if (s_ != DCK_OK) {                                                                     \
            fprintf(stderr, "gpu_hash: %s: %s\n", #call, dck_last_error());                     \
            return 2;                                                                           \
        }                                                                                       \
    } while (0)
#define CHECK_CUDA(call)                                                                        \
    do {                                                                                        \
        cudaError_t e_ = (call);                                                                \
        if (e_ != cudaSuccess) {                                                                \
            fprintf(stderr, "gpu_hash: %s: %s\n", #call, cudaGetErrorString(e_));               \
            return 2;                                                                           \
        }                                                                                       \
    } while (0)

int main(void) {
    int ndev;
    if (dck_gpu_device_count(&ndev) != DCK_OK) {
        fprintf(stderr, "gpu_hash: %s\n", dck_last_error());
        return 2;
    }

    /* A BF16 [1024, 333] "weight" (row bytes 666: not a multiple of 128). */
    uint64_t shape[2] = {1024, 333};
    size_t bytes = 1024 * 333 * 2;
    uint16_t *host = malloc(bytes);
    for (size_t i = 0; i < bytes / 2; i++) host[i] = (uint16_t)(i * 2654435761u >> 7);
    void *dev;
    cudaStream_t stream;
    CHECK_CUDA(cudaStreamCreate(&stream));
    CHECK_CUDA(cudaMalloc(&dev, bytes));
    CHECK_CUDA(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, stream));

    /* 1. whole tensor, on the GPU and on the CPU */
    dck_digest on_gpu, on_cpu;
    CHECK_DCK(dck_gpu_digest(DCK_BF16, shape, 2, dev, bytes, stream, &on_gpu));
    CHECK_DCK(dck_digest_buffer(DCK_BF16, shape, 2, host, bytes, 0, &on_cpu));
    char a[33], b[33];
    dck_digest_to_hex(on_gpu, a);
    dck_digest_to_hex(on_cpu, b);
    printf("whole tensor   GPU %s\n               CPU %s\n", a, b);

    /* 2. the same tensor in three fragments cut at odd byte offsets: two on
     * the GPU, one on the CPU, added in reverse order */
    uint64_t cut1 = 100003, cut2 = 400001;
    dck_fragment_partial p[3];
    CHECK_DCK(dck_gpu_fragment_partial(bytes, 0, dev, cut1, stream, &p[0]));
    CHECK_DCK(dck_gpu_fragment_partial(bytes, cut1, (char *)dev + cut1, cut2 - cut1, stream,
                                       &p[1]));
    CHECK_DCK(dck_fragment_partial_compute(bytes, cut2, (char *)host + cut2, bytes - cut2, &p[2]));
    dck_tensor_hasher *h;
    CHECK_DCK(dck_tensor_hasher_create(DCK_BF16, shape, 2, &h));
    for (int i = 2; i >= 0; i--) CHECK_DCK(dck_tensor_hasher_add(h, &p[i]));
    dck_digest stitched;
    CHECK_DCK(dck_tensor_hasher_final(h, &stitched));
    dck_tensor_hasher_free(h);
    dck_digest_to_hex(stitched, a);
    printf("3 fragments        %s\n", a);

    /* 3. async: lane sums accumulate on the device; read back once */
    uint64_t *lanes_dev, lanes[2];
    CHECK_CUDA(cudaMalloc((void **)&lanes_dev, sizeof lanes));
    CHECK_CUDA(cudaMemsetAsync(lanes_dev, 0, sizeof lanes, stream));
    /* the tensor's segments in two calls, split at a segment boundary */
    CHECK_DCK(dck_gpu_segments_sum_async(dev, 128 * 1000, 0, lanes_dev, stream));
    CHECK_DCK(dck_gpu_segments_sum_async((char *)dev + 128 * 1000, bytes - 128 * 1000, 1000,
                                         lanes_dev, stream));
    CHECK_CUDA(cudaMemcpyAsync(lanes, lanes_dev, sizeof lanes, cudaMemcpyDeviceToHost, stream));
    CHECK_CUDA(cudaStreamSynchronize(stream));
    dck_digest async = dck_digest_finish(DCK_BF16, shape, 2, (dck_lanes){lanes[0], lanes[1]});
    dck_digest_to_hex(async, a);
    printf("async lane sums    %s\n", a);

    int same = dck_digest_equal(on_gpu, on_cpu) && dck_digest_equal(stitched, on_cpu) &&
               dck_digest_equal(async, on_cpu);
    printf("%s\n", same ? "all equal to the CPU digest" : "MISMATCH");
    cudaFree(lanes_dev);
    cudaFree(dev);
    cudaStreamDestroy(stream);
    free(host);
    return same ? 0 : 1;
}

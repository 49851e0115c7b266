/* src/gpu/ is the device layer: the GPU digest (this file; the launchers,
 * gpu_launch.c; checkpoints streamed to the device, gpu_stream.c; the CPU
 * twin of its kernel, digest_twin.c), the trainer's kernels driven from the
 * host (gpu_train.c, over CUDA in gpu_train_cuda.c or the CPU twin in
 * train_twin.c), the cuBLAS baseline of `train --bench` (gpu_blas.c), which
 * GPU a rank uses (gpu_choice.c), and the CUDA runtime and NCCL loaded with
 * dlopen on the first GPU call (cuda_loader.c).
 *
 * This file: the public GPU API (include/detcheck.h, "GPU"): device names,
 * the devices and the device a pointer's memory is on, CUDA errors as
 * messages, and the digest of device memory through the kernels of
 * cuda/digest.cu, with its scratch memory (stream-ordered pools where the
 * device has them, cudaMalloc where not). Without CUDA (make CUDA=0) every
 * call says so with DCK_ERR_NODEVICE. The fragment logic is shared with the
 * CPU twin. */
#include "core/core.h"
#include "gpu/cuda_loader.h"
#include "gpu/gpu.h"

#include <string.h>

const char *dck_device_name(dck_device d) {
    switch (d) {
    case DCK_DEVICE_CPU: return "cpu";
    case DCK_DEVICE_CUDA: return "cuda";
    case DCK_DEVICE_AUTO: return "auto";
    }
    return "?";
}

dck_status dck_device_from_name(const char *name, dck_device *out) {
    if (name && !strcmp(name, "cpu")) *out = DCK_DEVICE_CPU;
    else if (name && !strcmp(name, "cuda")) *out = DCK_DEVICE_CUDA;
    else if (name && !strcmp(name, "auto")) *out = DCK_DEVICE_AUTO;
    else
        return dck_set_error(DCK_ERR_INVALID, "unknown device '%s' (cpu, cuda or auto)",
                             name ? name : "");
    return DCK_OK;
}

#ifndef DCK_HAVE_CUDA

static dck_status no_cuda(void) {
    return dck_set_error(DCK_ERR_NODEVICE,
                         "no CUDA device: this detcheck was built without CUDA (make CUDA=0)");
}

dck_status dck_gpu_device_count(int *count) {
    *count = 0;
    return no_cuda();
}

dck_status dck_gpu_pci_bus_id(int device, char *buf, size_t n) {
    (void)device;
    if (n) buf[0] = 0;
    return no_cuda();
}

dck_status dck_gpu_segments_sum(const void *dev_data, size_t len, uint64_t first_segment,
                                dck_cuda_stream stream, dck_lanes *out) {
    (void)dev_data, (void)len, (void)first_segment, (void)stream;
    *out = (dck_lanes){0, 0};
    return no_cuda();
}

dck_status dck_gpu_segments_sum_async(const void *dev_data, size_t len, uint64_t first_segment,
                                      uint64_t *dev_lanes, dck_cuda_stream stream) {
    (void)dev_data, (void)len, (void)first_segment, (void)dev_lanes, (void)stream;
    return no_cuda();
}

dck_status dck_gpu_fragment_partial(uint64_t tensor_bytes, uint64_t offset, const void *dev_data,
                                    size_t length, dck_cuda_stream stream,
                                    dck_fragment_partial *out) {
    (void)tensor_bytes, (void)offset, (void)dev_data, (void)length, (void)stream;
    memset(out, 0, sizeof *out);
    return no_cuda();
}

dck_status dck_gpu_digest(dck_dtype t, const uint64_t *shape, int ndim, const void *dev_data,
                          size_t len, dck_cuda_stream stream, dck_digest *out) {
    (void)t, (void)shape, (void)ndim, (void)dev_data, (void)len, (void)stream;
    memset(out, 0, sizeof *out);
    return no_cuda();
}

dck_status dck_gpu_error(int cuda_err, const char *what) {
    return dck_set_error(DCK_ERR_DEVICE, "%s: CUDA error %d", what, cuda_err);
}

dck_status dck_gpu_pointer_device(const void *ptr, int *device) {
    (void)ptr;
    *device = -1;
    return no_cuda();
}

#else /* DCK_HAVE_CUDA */

/* Every function below runs after dck_gpu_device_count succeeded (directly
 * or through dck_gpu_pointer_device), so the runtime is loaded: rt() is its
 * table. */
static const dck_cudart_api *rt(void) { return dck_cudart_loaded(); }

dck_status dck_gpu_error(int cuda_err, const char *what) {
    cudaError_t e = (cudaError_t)cuda_err;
    const dck_cudart_api *r = rt();
    if (!r) return dck_set_error(DCK_ERR_DEVICE, "%s: CUDA error %d", what, cuda_err);
    return dck_set_error(DCK_ERR_DEVICE, "%s: %s (%s)", what, r->cudaGetErrorString(e),
                         r->cudaGetErrorName(e));
}

dck_status dck_gpu_device_count(int *count) {
    int n = 0;
    const dck_cudart_api *r;
    *count = 0;
    DCK_TRY(dck_cudart_load(&r));
    cudaError_t e = r->cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)r->cudaGetLastError(); /* clear the (non-sticky) error state */
        if (e == cudaErrorInsufficientDriver) {
            int version = 0;
            r->cudaRuntimeGetVersion(&version);
            return dck_set_error(DCK_ERR_NODEVICE,
                                 "no CUDA device: no NVIDIA driver loaded, or one too old for "
                                 "CUDA %d.%d",
                                 version / 1000, version % 1000 / 10);
        }
        return dck_set_error(DCK_ERR_NODEVICE, "no CUDA device: %s", r->cudaGetErrorString(e));
    }
    if (n <= 0) return dck_set_error(DCK_ERR_NODEVICE, "no CUDA device found");
    *count = n;
    return DCK_OK;
}

dck_status dck_gpu_pci_bus_id(int device, char *buf, size_t n) {
    const dck_cudart_api *r;
    if (n) buf[0] = 0;
    DCK_TRY(dck_cudart_load(&r));
    cudaError_t e = r->cudaDeviceGetPCIBusId(buf, (int)n, device);
    if (e != cudaSuccess) return dck_gpu_error((int)e, "cudaDeviceGetPCIBusId");
    return DCK_OK;
}

dck_status dck_gpu_pointer_device(const void *ptr, int *device) {
    struct cudaPointerAttributes a;
    *device = -1;
    int n;
    dck_status s = dck_gpu_device_count(&n);
    if (s) return s;
    cudaError_t e = rt()->cudaPointerGetAttributes(&a, ptr);
    if (e != cudaSuccess) {
        (void)rt()->cudaGetLastError();
        return dck_set_error(DCK_ERR_INVALID, "pointer %p: not CUDA memory (%s)", ptr,
                             rt()->cudaGetErrorString(e));
    }
    if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)
        return dck_set_error(DCK_ERR_INVALID,
                             "pointer %p is host memory, not device memory "
                             "(use dck_digest_buffer for host buffers)",
                             ptr);
    *device = a.device;
    return DCK_OK;
}

/* ------------------------------------------------------------------ scratch memory
 * (cuda_loader.h says why). The memo is read and written with relaxed
 * atomics: two threads that race compute the same answer. */
static int pools_memo[DCK_GPU_POOL_MEMO];

void dck_gpu_pools_memo_set(int device, int state) {
    if (device >= 0 && device < DCK_GPU_POOL_MEMO)
        __atomic_store_n(&pools_memo[device], state, __ATOMIC_RELAXED);
}

cudaError_t dck_gpu_scratch_alloc(const dck_cudart_api *r, int *memo, int device, size_t bytes,
                                  cudaStream_t st, dck_gpu_scratch *out) {
    if (!memo) memo = pools_memo;
    int *slot = device >= 0 && device < DCK_GPU_POOL_MEMO ? &memo[device] : NULL;
    int state = slot ? __atomic_load_n(slot, __ATOMIC_RELAXED) : DCK_GPU_POOLS_UNKNOWN;
    out->ptr = NULL;
    out->pooled = 0;
    if (state == DCK_GPU_POOLS_UNKNOWN) {
        /* ask the device first (the documented test of pool support); the
         * 801 answer below covers a device that says yes and still refuses */
        int has = 1;
        if (r->cudaDeviceGetAttribute(&has, cudaDevAttrMemoryPoolsSupported, device) != cudaSuccess) {
            (void)r->cudaGetLastError();
            has = 1; /* unknown attribute (old driver): let the call itself tell */
        }
        state = has ? DCK_GPU_POOLS_YES : DCK_GPU_POOLS_NO;
        if (slot && !has) __atomic_store_n(slot, state, __ATOMIC_RELAXED);
    }
    if (state == DCK_GPU_POOLS_YES) {
        cudaError_t e = r->cudaMallocAsync(&out->ptr, bytes, st);
        if (e != cudaErrorNotSupported) {
            out->pooled = 1; /* the call made (or tried), for messages and the free */
            if (e != cudaSuccess) out->ptr = NULL;
            else if (slot) __atomic_store_n(slot, DCK_GPU_POOLS_YES, __ATOMIC_RELAXED);
            return e;
        }
        (void)r->cudaGetLastError(); /* 801 is not sticky: clear it */
        out->ptr = NULL;
        if (slot) __atomic_store_n(slot, DCK_GPU_POOLS_NO, __ATOMIC_RELAXED);
    }
    cudaError_t e = r->cudaMalloc(&out->ptr, bytes);
    if (e != cudaSuccess) out->ptr = NULL;
    return e;
}

cudaError_t dck_gpu_scratch_free(const dck_cudart_api *r, dck_gpu_scratch *s, cudaStream_t st) {
    if (!s->ptr) return cudaSuccess;
    cudaError_t e;
    if (s->pooled) {
        e = r->cudaFreeAsync(s->ptr, st);
    } else {
        e = r->cudaStreamSynchronize(st);
        cudaError_t f = r->cudaFree(s->ptr);
        if (e == cudaSuccess) e = f;
    }
    s->ptr = NULL;
    return e;
}

/* Runs the call on the device that holds the data, and switches back. */
typedef struct {
    int prev;
    int switched;
} dev_guard;

static dck_status guard_enter(const void *ptr, dev_guard *g) {
    int dev;
    g->switched = 0;
    dck_status s = dck_gpu_pointer_device(ptr, &dev);
    if (s) return s;
    cudaError_t e = rt()->cudaGetDevice(&g->prev);
    if (e != cudaSuccess) return dck_gpu_error(e, "cudaGetDevice");
    if (dev != g->prev) {
        e = rt()->cudaSetDevice(dev);
        if (e != cudaSuccess) return dck_gpu_error(e, "cudaSetDevice");
        g->switched = 1;
    }
    return DCK_OK;
}

static void guard_leave(dev_guard *g) {
    if (g->switched) (void)rt()->cudaSetDevice(g->prev);
}

dck_status dck_gpu_segments_sum_async(const void *dev_data, size_t len, uint64_t first_segment,
                                      uint64_t *dev_lanes, dck_cuda_stream stream) {
    if (len == 0) return DCK_OK;
    if (!dev_data || !dev_lanes) return dck_set_error(DCK_ERR_INVALID, "gpu digest: NULL pointer");
    /* the kernel adds to the lanes with 64-bit atomicAdd: a misaligned one
     * is a sticky error that ends the caller's whole CUDA context (torch's),
     * so it is refused here, before the runtime is even loaded */
    if ((uintptr_t)dev_lanes % 8)
        return dck_set_error(DCK_ERR_INVALID, "gpu digest: the lane sums at %p are not 8-byte aligned "
                             "(two uint64 of device memory wanted)", (void *)dev_lanes);
    dev_guard g;
    dck_status s = guard_enter(dev_data, &g);
    if (s) return s;
    int e = dck_cuda_segments_sum_launch(dev_data, len, first_segment, dev_lanes, 0, stream);
    guard_leave(&g);
    return e ? dck_gpu_error(e, "segment-sum kernel") : DCK_OK;
}

dck_status dck_gpu_segments_sum(const void *dev_data, size_t len, uint64_t first_segment,
                                dck_cuda_stream stream, dck_lanes *out) {
    *out = (dck_lanes){0, 0};
    if (len == 0) return DCK_OK;
    if (!dev_data) return dck_set_error(DCK_ERR_INVALID, "gpu digest: NULL pointer");
    dev_guard g;
    dck_status s = guard_enter(dev_data, &g);
    if (s) return s;
    cudaStream_t st = (cudaStream_t)stream;
    uint64_t host[2] = {0, 0};
    dck_gpu_scratch sc;
    int dev = -1; /* the data's device: guard_enter made it the current one */
    (void)rt()->cudaGetDevice(&dev);
    cudaError_t e = dck_gpu_scratch_alloc(rt(), NULL, dev, 2 * sizeof(uint64_t), st, &sc);
    uint64_t *lanes = sc.ptr;
    const char *what = sc.pooled ? "cudaMallocAsync" : "cudaMalloc";
    if (e == cudaSuccess) {
        what = "cudaMemsetAsync";
        e = rt()->cudaMemsetAsync(lanes, 0, 2 * sizeof(uint64_t), st);
        if (e == cudaSuccess) {
            what = "segment-sum kernel";
            e = (cudaError_t)dck_cuda_segments_sum_launch(dev_data, len, first_segment, lanes, 0,
                                                          st);
        }
        if (e == cudaSuccess) {
            what = "cudaMemcpyAsync";
            e = rt()->cudaMemcpyAsync(host, lanes, sizeof host, cudaMemcpyDeviceToHost, st);
        }
        int pooled = sc.pooled;
        cudaError_t f = dck_gpu_scratch_free(rt(), &sc, st);
        if (e == cudaSuccess) {
            what = "cudaStreamSynchronize";
            e = rt()->cudaStreamSynchronize(st);
        }
        if (e == cudaSuccess && f != cudaSuccess) {
            e = f;
            what = pooled ? "cudaFreeAsync" : "cudaFree";
        }
    }
    guard_leave(&g);
    if (e != cudaSuccess) return dck_gpu_error(e, what);
    *out = (dck_lanes){host[0], host[1]};
    return DCK_OK;
}

typedef struct {
    const uint8_t *dev; /* the fragment's bytes on the device */
    uint64_t offset;    /* their global offset */
    cudaStream_t stream;
} gpu_frag_ctx;

static dck_status gpu_copy(void *ctx, uint64_t goff, void *dst, size_t n) {
    gpu_frag_ctx *c = ctx;
    cudaError_t e = rt()->cudaMemcpyAsync(dst, c->dev + (goff - c->offset), n,
                                          cudaMemcpyDeviceToHost, c->stream);
    if (e == cudaSuccess) e = rt()->cudaStreamSynchronize(c->stream);
    return e == cudaSuccess ? DCK_OK : dck_gpu_error(e, "fragment edge copy");
}

static dck_status gpu_sum(void *ctx, uint64_t goff, uint64_t n, uint64_t first_segment,
                          dck_lanes *out) {
    gpu_frag_ctx *c = ctx;
    return dck_gpu_segments_sum(c->dev + (goff - c->offset), (size_t)n, first_segment, c->stream,
                                out);
}

dck_status dck_gpu_fragment_partial(uint64_t tensor_bytes, uint64_t offset, const void *dev_data,
                                    size_t length, dck_cuda_stream stream,
                                    dck_fragment_partial *out) {
    dck_fragment_split sp;
    memset(out, 0, sizeof *out);
    dck_status s = dck_fragment_split_compute(tensor_bytes, offset, length, &sp);
    if (s) return s;
    if (length == 0) return DCK_OK;
    if (!dev_data) return dck_set_error(DCK_ERR_INVALID, "gpu digest: NULL pointer");
    dev_guard g;
    s = guard_enter(dev_data, &g);
    if (s) return s;
    gpu_frag_ctx c = {dev_data, offset, (cudaStream_t)stream};
    s = dck_fragment_partial_build(&sp, gpu_copy, gpu_sum, &c, out);
    guard_leave(&g);
    return s;
}

dck_status dck_gpu_digest(dck_dtype t, const uint64_t *shape, int ndim, const void *dev_data,
                          size_t len, dck_cuda_stream stream, dck_digest *out) {
    uint64_t want;
    memset(out, 0, sizeof *out);
    if ((unsigned)t >= DCK_DTYPE_COUNT)
        return dck_set_error(DCK_ERR_INVALID, "gpu digest: unknown dtype %d", (int)t);
    dck_status s = dck_shape_bytes(t, shape, ndim, &want);
    if (s) return dck_set_error(s, "gpu digest: %s", dck_last_error());
    if (want != len)
        return dck_set_error(DCK_ERR_INVALID, "gpu digest: %zu bytes given, shape needs %llu", len,
                             (unsigned long long)want);
    dck_lanes l;
    DCK_TRY(dck_gpu_segments_sum(dev_data, len, 0, stream, &l));
    *out = dck_digest_finish(t, shape, ndim, l);
    return DCK_OK;
}

#endif /* DCK_HAVE_CUDA */

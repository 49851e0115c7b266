/* The fast baseline of `train --bench`: see gpu_blas.h. The mapping, the
 * reference GEMM and the trainer's shapes are host code, built everywhere;
 * the cuBLAS run needs CUDA in the build and cuBLAS on the machine. */
#include "common/common.h"
#include "gpu/gpu_blas.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

dck_status dck_blas_from_row_major(const dck_blas_rm *p, dck_blas_call *out) {
    const size_t dims[] = {p->M, p->N, p->K, p->lda, p->ldb, p->ldc};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i] > INT_MAX)
            return dck_set_error(DCK_ERR_INVALID, "cuBLAS %s: dimension %zu beyond int", p->what,
                                 dims[i]);
    *out = (dck_blas_call){
        .transa = p->tb, .transb = p->ta, /* the operands swap, each keeps its op */
        .m = (int)p->N, .n = (int)p->M, .k = (int)p->K,
        .lda = (int)p->ldb, .ldb = (int)p->lda, .ldc = (int)p->ldc,
        .a = p->b, .b = p->a, .c = p->c,
        .beta = p->beta,
    };
    return DCK_OK;
}

int dck_blas_ref_sgemm(dck_blas_op transa, dck_blas_op transb, int m, int n, int k,
                       const float *A, int lda, const float *B, int ldb, float beta, float *C,
                       int ldc) {
    /* cuBLAS's own checks (CUBLAS_STATUS_INVALID_VALUE): each leading
     * dimension covers the rows of its matrix as stored */
    int arows = transa == DCK_BLAS_N ? m : k, brows = transb == DCK_BLAS_N ? k : n;
    if (m < 0 || n < 0 || k < 0 || lda < (arows > 1 ? arows : 1) ||
        ldb < (brows > 1 ? brows : 1) || ldc < (m > 1 ? m : 1))
        return -1;
    /* column-major: X(i, j) = X[i + j ld]; op T reads the transpose */
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0;
            for (int l = 0; l < k; l++) {
                float a = transa == DCK_BLAS_N ? A[i + (size_t)l * lda] : A[l + (size_t)i * lda];
                float b = transb == DCK_BLAS_N ? B[l + (size_t)j * ldb] : B[j + (size_t)l * ldb];
                s += (double)a * b;
            }
            float *c = &C[i + (size_t)j * ldc];
            *c = (float)(s + (beta != 0 ? (double)beta * *c : 0));
        }
    return 0;
}

void dck_blas_linear(size_t tokens, size_t in, size_t out, dck_blas_rm three[3]) {
    /* gpu_train.c: Y = X W; dX = dY W^T; dW += X^T dY (all row-major) */
    three[0] = (dck_blas_rm){"fwd", DCK_BLAS_X, DCK_BLAS_W, DCK_BLAS_Y, DCK_BLAS_N, DCK_BLAS_N,
                             tokens, out, in, in, out, out, 0.0f};
    three[1] = (dck_blas_rm){"dX", DCK_BLAS_DY, DCK_BLAS_W, DCK_BLAS_DX, DCK_BLAS_N, DCK_BLAS_T,
                             tokens, in, out, out, out, in, 0.0f};
    three[2] = (dck_blas_rm){"dW", DCK_BLAS_X, DCK_BLAS_DY, DCK_BLAS_DW, DCK_BLAS_T, DCK_BLAS_N,
                             in, out, tokens, in, out, out, 1.0f};
}

size_t dck_blas_trainer_linears(uint32_t layers, uint32_t width, uint32_t vocab, size_t shapes[][2],
                                size_t cap) {
    size_t d = width, n = 0;
    const size_t block[4][2] = {{d, 3 * d}, {d, d}, {d, 4 * d}, {4 * d, d}};
    for (uint32_t l = 0; l < layers; l++)
        for (size_t i = 0; i < 4; i++, n++)
            if (n < cap) memcpy(shapes[n], block[i], sizeof block[i]);
    if (n < cap) shapes[n][0] = d, shapes[n][1] = vocab;
    return n + 1;
}

static int fast_blas;
void dck_blas_fast_mode_set(int on) { __atomic_store_n(&fast_blas, on != 0, __ATOMIC_RELAXED); }
int dck_blas_fast_mode(void) { return __atomic_load_n(&fast_blas, __ATOMIC_RELAXED); }

struct dck_blas_gt {
    int reference;  /* 1: the twin (dck_blas_ref_sgemm on host memory) */
    void *handle;   /* cuBLAS's */
};

/* cuBLAS's half, below: NULL handle and DCK_ERR_NODEVICE without CUDA */
static dck_status cublas_gt_open(void *stream, void **handle);
static void cublas_gt_close(void *handle);
static dck_status cublas_gt_gemm(void *handle, const dck_blas_call *c, const float *A,
                                 const float *B, float *C);

dck_status dck_blas_gt_open(const char *backend, void *cuda_stream, dck_blas_gt **out) {
    *out = NULL;
    int twin = !strcmp(backend, "twin");
    if (!twin && strcmp(backend, "cuda"))
        return dck_set_error(DCK_ERR_NODEVICE, "cuBLAS unavailable: device %s", backend);
    dck_blas_gt *b = dck_xcalloc(1, sizeof *b);
    if (!b) return dck_oom("cuBLAS fast mode");
    b->reference = twin;
    if (!twin) {
        dck_status s = cublas_gt_open(cuda_stream, &b->handle);
        if (s) {
            free(b);
            return s;
        }
    }
    *out = b;
    return DCK_OK;
}

void dck_blas_gt_close(dck_blas_gt *b) {
    if (!b) return;
    if (b->handle) cublas_gt_close(b->handle);
    free(b);
}

dck_status dck_blas_gt_gemm(dck_blas_gt *b, const dck_blas_rm *p,
                            const float *const ops[DCK_BLAS_OPERANDS]) {
    dck_blas_call c = {0}; /* set by dck_blas_from_row_major; gcc -O3 cannot see it */
    DCK_TRY(dck_blas_from_row_major(p, &c));
    /* the output is written: the operand table is const for the inputs */
    float *C;
    memcpy(&C, &ops[c.c], sizeof C);
    if (b->reference) {
        if (dck_blas_ref_sgemm(c.transa, c.transb, c.m, c.n, c.k, ops[c.a], c.lda, ops[c.b], c.ldb,
                               c.beta, C, c.ldc))
            return dck_set_error(DCK_ERR_INVALID, "reference GEMM (%s): invalid arguments",
                                 p->what);
        return DCK_OK;
    }
    return cublas_gt_gemm(b->handle, &c, ops[c.a], ops[c.b], C);
}

#ifndef DCK_HAVE_CUDA

static dck_status cublas_gt_open(void *stream, void **handle) {
    (void)stream;
    *handle = NULL;
    return dck_set_error(DCK_ERR_NODEVICE, "cuBLAS unavailable: this detcheck was built without "
                                           "CUDA (make CUDA=0)");
}
static void cublas_gt_close(void *handle) { (void)handle; }
static dck_status cublas_gt_gemm(void *handle, const dck_blas_call *c, const float *A,
                                 const float *B, float *C) {
    (void)handle, (void)c, (void)A, (void)B, (void)C;
    return dck_set_error(DCK_ERR_NODEVICE, "cuBLAS unavailable");
}

dck_status dck_blas_cuda_bench(uint32_t layers, uint32_t width, uint32_t vocab, size_t tokens,
                               uint32_t microbatches, dck_blas_math math, double *seconds,
                               double *flops) {
    (void)layers, (void)width, (void)vocab, (void)tokens, (void)microbatches, (void)math;
    *seconds = *flops = 0;
    return dck_set_error(DCK_ERR_NODEVICE, "cuBLAS unavailable: this detcheck was built without "
                                           "CUDA (make CUDA=0)");
}

dck_status dck_blas_cuda_selftest(size_t T, size_t in, size_t out, double *max_err) {
    (void)T, (void)in, (void)out;
    *max_err = 0;
    return dck_set_error(DCK_ERR_NODEVICE, "cuBLAS unavailable: this detcheck was built without "
                                           "CUDA (make CUDA=0)");
}

#else

#include "common/libfind.h"
#include "gpu/cuda_loader.h"
#include "gpu/gpu.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* cuBLAS's v2 API as declared in cublas_api.h, restated so that a toolkit
 * without the cuBLAS headers still builds (the handle is opaque, the status
 * an int: 0 success). */
typedef void *dck_cublas_handle;
typedef int (*cublas_create_fn)(dck_cublas_handle *);
typedef int (*cublas_destroy_fn)(dck_cublas_handle);
typedef int (*cublas_set_stream_fn)(dck_cublas_handle, cudaStream_t);
typedef int (*cublas_sgemm_fn)(dck_cublas_handle, int, int, int, int, int, const float *,
                               const float *, int, const float *, int, const float *, float *, int);
typedef int (*cublas_set_math_mode_fn)(dck_cublas_handle, int); /* cublasMath_t */

static struct {
    pthread_once_t once;
    cublas_create_fn create;
    cublas_destroy_fn destroy;
    cublas_set_stream_fn set_stream;
    cublas_sgemm_fn sgemm;
    cublas_set_math_mode_fn set_math_mode; /* NULL: no TF32 row (FP32 is the default mode) */
    dck_libfind found; /* what the search loaded, or every place it tried */
    char why[2048];
} cublas = {PTHREAD_ONCE_INIT, NULL, NULL, NULL, NULL, NULL, {0}, ""};

static void load_cublas(void) {
    /* libcublas.so.MAJOR of the toolkit built against, then any; its
     * libcublasLt.so.MAJOR (NEEDED by it) loaded first from the same
     * folder, so a wheel's cuBLAS loads by its path alone */
    char versioned[32], lt[32], cu_dir[32];
    snprintf(versioned, sizeof versioned, "libcublas.so.%d", CUDART_VERSION / 1000);
    snprintf(lt, sizeof lt, "libcublasLt.so.%d", CUDART_VERSION / 1000);
    snprintf(cu_dir, sizeof cu_dir, "nvidia/cu%d/lib", CUDART_VERSION / 1000);
    const dck_libfind_spec spec = {"DETCHECK_CUBLAS_LIB", {versioned, "libcublas.so", NULL},
                                   {cu_dir, "nvidia/cublas/lib", NULL}, lt, 0, 1};
    if (!dck_libfind_load(&spec, &cublas.found)) {
        dck_libfind_why(&spec, &cublas.found, "cuBLAS", cublas.why, sizeof cublas.why);
        return;
    }
    static const char *const fns[4] = {"cublasCreate_v2", "cublasDestroy_v2", "cublasSetStream_v2",
                                       "cublasSgemm_v2"};
    void *f[4];
    for (int i = 0; i < 4; i++)
        if (!(f[i] = dlsym(cublas.found.handle, fns[i]))) {
            /* the handle stays open: doctor names the library it found */
            dck_libfind_lacks(&cublas.found, "cuBLAS", fns[i], "lacks the v2 SGEMM API", cublas.why,
                              sizeof cublas.why);
            return;
        }
    /* POSIX: a function pointer converts from dlsym's void * */
    memcpy(&cublas.create, &f[0], sizeof f[0]);
    memcpy(&cublas.destroy, &f[1], sizeof f[1]);
    memcpy(&cublas.set_stream, &f[2], sizeof f[2]);
    memcpy(&cublas.sgemm, &f[3], sizeof f[3]);
    void *mm = dlsym(cublas.found.handle, "cublasSetMathMode");
    if (mm) memcpy(&cublas.set_math_mode, &mm, sizeof mm);
}

const dck_libfind *dck_cublas_found(const char **why) {
    pthread_once(&cublas.once, load_cublas);
    *why = cublas.sgemm ? NULL : cublas.why;
    return &cublas.found;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static dck_status blas_ready(const dck_cudart_api **rt) {
    int ndev = 0;
    DCK_TRY(dck_gpu_device_count(&ndev));
    *rt = dck_cudart_loaded();
    if (!*rt) return dck_set_error(DCK_ERR_NODEVICE, "no CUDA runtime");
    pthread_once(&cublas.once, load_cublas);
    if (!cublas.sgemm) return dck_set_error(DCK_ERR_NODEVICE, "cuBLAS unavailable: %s", cublas.why);
    return DCK_OK;
}

dck_status dck_blas_cuda_selftest(size_t T, size_t in, size_t out, double *max_err) {
    const dck_cudart_api *rt;
    *max_err = 0;
    DCK_TRY(blas_ready(&rt));
    size_t n[DCK_BLAS_OPERANDS] = {T * in, in * out, T * out, T * out, T * in, in * out};
    float *host[DCK_BLAS_OPERANDS] = {0}, *ref[DCK_BLAS_OPERANDS] = {0}, *dev[DCK_BLAS_OPERANDS] = {0};
    dck_cublas_handle h = NULL;
    dck_status s = DCK_OK;
    cudaError_t e = cudaSuccess;
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    for (int i = 0; !s && i < DCK_BLAS_OPERANDS; i++) {
        host[i] = dck_xcalloc(n[i], sizeof(float));
        ref[i] = dck_xcalloc(n[i], sizeof(float));
        if (!host[i] || !ref[i]) {
            s = dck_oom("cuBLAS self-test");
            break;
        }
        for (size_t j = 0; j < n[i]; j++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            host[i][j] = ref[i][j] = (float)(x >> 40) / (float)(1u << 24) - 0.5f;
        }
        if ((e = rt->cudaMalloc((void **)&dev[i], n[i] * sizeof(float))) != cudaSuccess ||
            (e = rt->cudaMemcpyAsync(dev[i], host[i], n[i] * sizeof(float), cudaMemcpyHostToDevice,
                                     NULL)) != cudaSuccess)
            s = dck_gpu_error((int)e, "cuBLAS self-test");
    }
    int cs = 0;
    if (!s && (cs = cublas.create(&h)) != 0)
        s = dck_set_error(DCK_ERR_DEVICE, "cublasCreate: status %d", cs);
    dck_blas_rm three[3];
    dck_blas_linear(T, in, out, three);
    const float one = 1.0f;
    for (int p = 0; !s && p < 3; p++) {
        dck_blas_call c;
        if ((s = dck_blas_from_row_major(&three[p], &c))) break;
        cs = cublas.sgemm(h, (int)c.transa, (int)c.transb, c.m, c.n, c.k, &one, dev[c.a], c.lda,
                          dev[c.b], c.ldb, &c.beta, dev[c.c], c.ldc);
        if (cs) s = dck_set_error(DCK_ERR_DEVICE, "cublasSgemm (%s): status %d", three[p].what, cs);
        dck_blas_ref_sgemm(c.transa, c.transb, c.m, c.n, c.k, ref[c.a], c.lda, ref[c.b], c.ldb,
                           c.beta, ref[c.c], c.ldc);
    }
    for (int i = 0; !s && i < DCK_BLAS_OPERANDS; i++) {
        if ((e = rt->cudaMemcpyAsync(host[i], dev[i], n[i] * sizeof(float), cudaMemcpyDeviceToHost,
                                     NULL)) != cudaSuccess ||
            (e = rt->cudaStreamSynchronize(NULL)) != cudaSuccess) {
            s = dck_gpu_error((int)e, "cuBLAS self-test");
            break;
        }
        for (size_t j = 0; j < n[i]; j++) {
            double d = host[i][j] - (double)ref[i][j];
            d = (d < 0 ? -d : d) / (1.0 + (ref[i][j] < 0 ? -ref[i][j] : ref[i][j]));
            if (d > *max_err) *max_err = d;
        }
    }
    if (h) (void)cublas.destroy(h);
    for (int i = 0; i < DCK_BLAS_OPERANDS; i++) {
        if (dev[i]) (void)rt->cudaFree(dev[i]);
        free(host[i]);
        free(ref[i]);
    }
    return s;
}

static dck_status cublas_gt_open(void *stream, void **handle) {
    const dck_cudart_api *rt;
    *handle = NULL;
    DCK_TRY(blas_ready(&rt));
    double err = 0; /* no fast mode on products that are not the trainer's */
    DCK_TRY(dck_blas_cuda_selftest(37, 19, 53, &err));
    if (err > 1e-4)
        return dck_set_error(DCK_ERR_DEVICE, "cuBLAS: its products differ from the reference "
                                             "(relative error %.3g)", err);
    int cs = cublas.create(handle);
    if (cs) return dck_set_error(DCK_ERR_DEVICE, "cublasCreate: status %d", cs);
    if ((cs = cublas.set_stream(*handle, (cudaStream_t)stream)) != 0) {
        (void)cublas.destroy(*handle);
        *handle = NULL;
        return dck_set_error(DCK_ERR_DEVICE, "cublasSetStream: status %d", cs);
    }
    return DCK_OK;
}

static void cublas_gt_close(void *handle) { (void)cublas.destroy(handle); }

static dck_status cublas_gt_gemm(void *handle, const dck_blas_call *c, const float *A,
                                 const float *B, float *C) {
    const float one = 1.0f;
    int cs = cublas.sgemm(handle, (int)c->transa, (int)c->transb, c->m, c->n, c->k, &one, A,
                          c->lda, B, c->ldb, &c->beta, C, c->ldc);
    return cs ? dck_set_error(DCK_ERR_DEVICE, "cublasSgemm: status %d", cs) : DCK_OK;
}

dck_status dck_blas_cuda_bench(uint32_t layers, uint32_t width, uint32_t vocab, size_t tokens,
                               uint32_t microbatches, dck_blas_math math, double *seconds,
                               double *flops) {
    *seconds = *flops = 0;
    const dck_cudart_api *rt;
    DCK_TRY(blas_ready(&rt));
    if (math != DCK_BLAS_FP32 && !cublas.set_math_mode)
        return dck_set_error(DCK_ERR_NODEVICE, "cuBLAS %s lacks cublasSetMathMode: no TF32 "
                                               "figure", cublas.found.path);
    /* a baseline from products that are not the trainer's would be a false
     * figure: cuBLAS must first give the reference's products on odd shapes
     * (FP32 sums in another order: a relative 1e-4 is generous, a wrong
     * transpose is off by far more) */
    double err = 0;
    DCK_TRY(dck_blas_cuda_selftest(37, 19, 53, &err));
    if (err > 1e-4)
        return dck_set_error(DCK_ERR_DEVICE, "cuBLAS baseline: its products differ from the "
                                             "reference (relative error %.3g): not reported",
                             err);

    size_t nshapes = dck_blas_trainer_linears(layers, width, vocab, NULL, 0);
    size_t (*shapes)[2] = dck_xcalloc(nshapes, sizeof *shapes);
    if (!shapes) return dck_oom("cuBLAS bench");
    dck_blas_trainer_linears(layers, width, vocab, shapes, nshapes);
    /* one buffer per operand, sized for the largest layer (the products only
     * read and write them: the values do not matter for the time) */
    size_t maxin = 0, maxout = 0, maxw = 0;
    for (size_t i = 0; i < nshapes; i++) {
        if (shapes[i][0] > maxin) maxin = shapes[i][0];
        if (shapes[i][1] > maxout) maxout = shapes[i][1];
        if (shapes[i][0] * shapes[i][1] > maxw) maxw = shapes[i][0] * shapes[i][1];
    }
    size_t bytes[DCK_BLAS_OPERANDS] = {
        [DCK_BLAS_X] = tokens * maxin, [DCK_BLAS_DX] = tokens * maxin,
        [DCK_BLAS_Y] = tokens * maxout, [DCK_BLAS_DY] = tokens * maxout,
        [DCK_BLAS_W] = maxw, [DCK_BLAS_DW] = maxw};
    float *buf[DCK_BLAS_OPERANDS] = {0};
    cudaStream_t st = NULL;
    dck_cublas_handle h = NULL;
    dck_status s = DCK_OK;
    cudaError_t e = rt->cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    if (e != cudaSuccess) s = dck_gpu_error((int)e, "cudaStreamCreateWithFlags (cuBLAS bench)");
    for (int i = 0; !s && i < DCK_BLAS_OPERANDS; i++) {
        e = rt->cudaMalloc((void **)&buf[i], bytes[i] * sizeof(float));
        if (e == cudaSuccess) e = rt->cudaMemsetAsync(buf[i], 0, bytes[i] * sizeof(float), st);
        if (e != cudaSuccess) s = dck_gpu_error((int)e, "cudaMalloc (cuBLAS bench)");
    }
    int cs = 0;
    if (!s && (cs = cublas.create(&h)) != 0)
        s = dck_set_error(DCK_ERR_DEVICE, "cublasCreate: status %d", cs);
    if (!s && (cs = cublas.set_stream(h, st)) != 0)
        s = dck_set_error(DCK_ERR_DEVICE, "cublasSetStream: status %d", cs);
    /* the mode said, never the handle's default taken on trust: FP32 is
     * CUBLAS_DEFAULT_MATH (no TF32), TF32 CUBLAS_TF32_TENSOR_OP_MATH */
    if (!s && cublas.set_math_mode && (cs = cublas.set_math_mode(h, (int)math)) != 0)
        s = dck_set_error(DCK_ERR_DEVICE, "cublasSetMathMode(%d): status %d", (int)math, cs);
    double best = 0, work = 0;
    const float one = 1.0f;
    for (int round = 0; !s && round < 4; round++) { /* round 0 warms up */
        double t0 = now_s();
        work = 0;
        for (uint32_t mb = 0; !s && mb < microbatches; mb++)
            for (size_t i = 0; !s && i < nshapes; i++) {
                dck_blas_rm three[3];
                dck_blas_linear(tokens, shapes[i][0], shapes[i][1], three);
                for (int p = 0; !s && p < 3; p++) {
                    dck_blas_call c;
                    s = dck_blas_from_row_major(&three[p], &c);
                    if (s) break;
                    cs = cublas.sgemm(h, (int)c.transa, (int)c.transb, c.m, c.n, c.k, &one, buf[c.a],
                                      c.lda, buf[c.b], c.ldb, &c.beta, buf[c.c], c.ldc);
                    if (cs) s = dck_set_error(DCK_ERR_DEVICE, "cublasSgemm (%s): status %d",
                                              three[p].what, cs);
                    work += 2.0 * (double)c.m * c.n * c.k;
                }
            }
        if (!s && (e = rt->cudaStreamSynchronize(st)) != cudaSuccess)
            s = dck_gpu_error((int)e, "cuBLAS bench");
        double dt = now_s() - t0;
        if (!s && round > 0 && (best == 0 || dt < best)) best = dt;
    }
    if (h) (void)cublas.destroy(h);
    if (st) (void)rt->cudaStreamSynchronize(st);
    for (int i = 0; i < DCK_BLAS_OPERANDS; i++)
        if (buf[i]) (void)rt->cudaFree(buf[i]);
    if (st) (void)rt->cudaStreamDestroy(st);
    free(shapes);
    if (s) return s;
    *seconds = best;
    *flops = best > 0 ? work / best : 0;
    return DCK_OK;
}

#endif /* DCK_HAVE_CUDA */

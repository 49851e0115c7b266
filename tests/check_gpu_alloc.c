/* The scratch allocation of the GPU digest (src/gpu/gpu.c,
 * dck_gpu_scratch_alloc) without a GPU: a fake CUDA runtime (a table of our
 * own functions, as cuda_loader.c would fill it) whose device 1 has no
 * memory pools, as on some virtualised GPUs. The fallback to cudaMalloc is
 * taken on error 801 and when the device says it has no pools, remembered
 * per device, and each block is freed with the call that matches its
 * allocation. */
#include "testutil.h"

#ifdef DCK_HAVE_CUDA
#include "gpu/cuda_loader.h"

/* the fake runtime's books */
static int pools_attr[4] = {1, 1, 0, 1}; /* device 2 says no pools */
static int async_801[4] = {0, 1, 0, 0};  /* device 1 says yes, then fails with 801 */
static int current;
static int n_async, n_malloc, n_free_async, n_free, n_sync, n_attr, n_last_error;
static char arena[64][16];
static int used;

static cudaError_t f_attr(int *v, enum cudaDeviceAttr a, int dev) {
    n_attr++;
    if (a != cudaDevAttrMemoryPoolsSupported || dev < 0 || dev > 3) return cudaErrorInvalidValue;
    *v = pools_attr[dev];
    return cudaSuccess;
}
static cudaError_t f_malloc_async(void **p, size_t n, cudaStream_t st) {
    (void)n, (void)st;
    n_async++;
    if (async_801[current]) return cudaErrorNotSupported;
    *p = arena[used++];
    return cudaSuccess;
}
static cudaError_t f_malloc(void **p, size_t n) {
    (void)n;
    n_malloc++;
    *p = arena[used++];
    return cudaSuccess;
}
static cudaError_t f_free_async(void *p, cudaStream_t st) {
    (void)p, (void)st;
    n_free_async++;
    return cudaSuccess;
}
static cudaError_t f_free(void *p) {
    (void)p;
    n_free++;
    return cudaSuccess;
}
static cudaError_t f_sync(cudaStream_t st) {
    (void)st;
    n_sync++;
    return cudaSuccess;
}
static cudaError_t f_last_error(void) {
    n_last_error++;
    return cudaSuccess;
}

static dck_cudart_api fake(void) {
    dck_cudart_api r;
    memset(&r, 0, sizeof r);
    r.cudaDeviceGetAttribute = f_attr;
    r.cudaMallocAsync = f_malloc_async;
    r.cudaMalloc = f_malloc;
    r.cudaFreeAsync = f_free_async;
    r.cudaFree = f_free;
    r.cudaStreamSynchronize = f_sync;
    r.cudaGetLastError = f_last_error;
    return r;
}
static void reset(void) { n_async = n_malloc = n_free_async = n_free = n_sync = n_attr = n_last_error = used = 0; }

START_TEST(pools_device_uses_malloc_async) {
    dck_cudart_api r = fake();
    int memo[DCK_GPU_POOL_MEMO] = {0};
    reset();
    current = 0;
    for (int i = 0; i < 3; i++) {
        dck_gpu_scratch s;
        ck_assert_int_eq(dck_gpu_scratch_alloc(&r, memo, 0, 16, NULL, &s), cudaSuccess);
        ck_assert(s.pooled && s.ptr);
        ck_assert_int_eq(dck_gpu_scratch_free(&r, &s, NULL), cudaSuccess);
        ck_assert_ptr_null(s.ptr);
    }
    ck_assert_int_eq(n_async, 3);
    ck_assert_int_eq(n_free_async, 3);
    ck_assert_int_eq(n_malloc + n_free, 0);
    ck_assert_int_eq(n_attr, 1); /* asked once, then remembered */
    ck_assert_int_eq(memo[0], DCK_GPU_POOLS_YES);
}
END_TEST

START_TEST(error_801_falls_back_and_is_remembered) {
    dck_cudart_api r = fake();
    int memo[DCK_GPU_POOL_MEMO] = {0};
    reset();
    current = 1;
    dck_gpu_scratch s;
    ck_assert_int_eq(dck_gpu_scratch_alloc(&r, memo, 1, 16, NULL, &s), cudaSuccess);
    ck_assert(!s.pooled && s.ptr);
    ck_assert_int_eq(n_async, 1);
    ck_assert_int_eq(n_malloc, 1);
    ck_assert_int_ge(n_last_error, 1); /* 801 cleared, not left for the next call */
    ck_assert_int_eq(memo[1], DCK_GPU_POOLS_NO);
    /* freed with cudaFree after the stream's work, never cudaFreeAsync */
    ck_assert_int_eq(dck_gpu_scratch_free(&r, &s, NULL), cudaSuccess);
    ck_assert_int_eq(n_free, 1);
    ck_assert_int_eq(n_sync, 1);
    ck_assert_int_eq(n_free_async, 0);
    /* the next allocation on device 1 goes straight to cudaMalloc */
    ck_assert_int_eq(dck_gpu_scratch_alloc(&r, memo, 1, 16, NULL, &s), cudaSuccess);
    ck_assert_int_eq(n_async, 1);
    ck_assert_int_eq(n_malloc, 2);
    ck_assert_int_eq(dck_gpu_scratch_free(&r, &s, NULL), cudaSuccess);
    /* device 0 in the same process keeps its pools */
    current = 0;
    ck_assert_int_eq(dck_gpu_scratch_alloc(&r, memo, 0, 16, NULL, &s), cudaSuccess);
    ck_assert(s.pooled);
    ck_assert_int_eq(dck_gpu_scratch_free(&r, &s, NULL), cudaSuccess);
    ck_assert_int_eq(n_free_async, 1);
}
END_TEST

START_TEST(no_pools_attribute_never_tries_async) {
    dck_cudart_api r = fake();
    int memo[DCK_GPU_POOL_MEMO] = {0};
    reset();
    current = 2;
    dck_gpu_scratch s;
    ck_assert_int_eq(dck_gpu_scratch_alloc(&r, memo, 2, 16, NULL, &s), cudaSuccess);
    ck_assert(!s.pooled);
    ck_assert_int_eq(n_async, 0);
    ck_assert_int_eq(memo[2], DCK_GPU_POOLS_NO);
    ck_assert_int_eq(dck_gpu_scratch_free(&r, &s, NULL), cudaSuccess);
    ck_assert_int_eq(n_free, 1);
    ck_assert_int_eq(n_free_async, 0);
    /* a device index beyond the memo: asked every time, still right */
    reset();
    current = 1;
    ck_assert_int_eq(dck_gpu_scratch_alloc(&r, memo, DCK_GPU_POOL_MEMO + 3, 16, NULL, &s),
                     cudaSuccess);
    ck_assert(!s.pooled); /* the attribute query failed: the call itself said 801 */
    ck_assert_int_eq(dck_gpu_scratch_free(&r, &s, NULL), cudaSuccess);
    ck_assert_int_eq(n_free, 1);
}
END_TEST
#else
START_TEST(built_without_cuda) { TU_SKIP("CUDA=0 build: no scratch allocator to test"); }
END_TEST
#endif

int main(void) {
    Suite *s = suite_create("gpu_alloc");
    TCase *tc = tcase_create("alloc");
#ifdef DCK_HAVE_CUDA
    tcase_add_test(tc, pools_device_uses_malloc_async);
    tcase_add_test(tc, error_801_falls_back_and_is_remembered);
    tcase_add_test(tc, no_pools_attribute_never_tries_async);
#else
    tcase_add_test(tc, built_without_cuda);
#endif
    suite_add_tcase(s, tc);
    return tu_run(s);
}

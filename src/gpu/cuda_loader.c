/* The CUDA runtime, NCCL and the kernels, loaded on the first GPU call
 * (see cuda_loader.h for why).
 *
 * How the kernels are launched without linking cudart: nvcc's <<<>>> launch
 * syntax compiles to a host stub that registers the kernels with cudart from
 * a static constructor (__cudaRegisterFatBinary), which ties every program
 * that links the object to libcudart at load time. Instead cuda/digest.cu is
 * compiled to a fatbin only (device code: SASS for each CUDA_ARCHS and PTX
 * for the last), embedded in the library as data (dck_cuda_digest_fatbin),
 * and loaded through the runtime API obtained here: cudaLibraryLoadData (a
 * context-independent library: every device gets the module when it first
 * needs it), cudaLibraryGetKernel by the kernels' extern "C" names, and
 * cudaLaunchKernel / cudaOccupancyMaxActiveBlocksPerMultiprocessor, which
 * take the cudaKernel_t as their function handle. Everything stays on the
 * runtime API (streams, pinned memory, the primary contexts, the public
 * API's cudaStream_t) rather than mixing in the driver API, and only one
 * library, libcudart, is loaded for a GPU hash. */
#include "common/common.h"

#ifdef DCK_HAVE_CUDA

#include "common/libfind.h"
#include "gpu/cuda_loader.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The fatbin of cuda/digest.cu (the Makefile embeds it; see there). */
extern const unsigned char dck_cuda_digest_fatbin[];
extern const unsigned char dck_cuda_train_fatbin[];

/* A library and its function table, loaded once. */
typedef struct {
    dck_libfind_spec spec;  /* where it is looked for (common/libfind.h) */
    const char *what;       /* for messages */
    const char *const *fns; /* function names, in table order */
    size_t nfns;
    void **table;
    pthread_once_t once;
    int ok;
    dck_libfind found;      /* what the search loaded, or every place it tried */
    char why[2048];         /* the failure, when !ok */
} lib_loader;

#define DCK_LOADER_NAME_(name) #name,
static const char *const cudart_names[] = {DCK_CUDART_FUNCTIONS(DCK_LOADER_NAME_)};
static const char *const nccl_names[] = {DCK_NCCL_FUNCTIONS(DCK_LOADER_NAME_)};
#undef DCK_LOADER_NAME_

static dck_cudart_api cudart_table;
static dck_nccl_api nccl_table;
_Static_assert(sizeof cudart_table == sizeof cudart_names / sizeof cudart_names[0] * sizeof(void *),
               "one function pointer per name");
_Static_assert(sizeof nccl_table == sizeof nccl_names / sizeof nccl_names[0] * sizeof(void *),
               "one function pointer per name");

/* libcudart.so.MAJOR of the toolkit built against (its ABI), then any; the
 * wheels' folder of that CUDA major (nvidia/cuMAJOR/lib): set by cuda_names */
static char cudart_soname[32], cu_wheel_dir[32];
static void cuda_names(void) {
    snprintf(cudart_soname, sizeof cudart_soname, "libcudart.so.%d", CUDART_VERSION / 1000);
    snprintf(cu_wheel_dir, sizeof cu_wheel_dir, "nvidia/cu%d/lib", CUDART_VERSION / 1000);
}
static lib_loader cudart = {
    /* CUDA 13's wheels put every library in nvidia/cu13/lib; CUDA 12's
     * one package each (nvidia-cuda-runtime-cu12: nvidia/cuda_runtime/lib) */
    {"DETCHECK_CUDART_LIB", {cudart_soname, "libcudart.so", NULL},
     {cu_wheel_dir, "nvidia/cuda_runtime/lib", NULL}, NULL, 0, 1},
    "the CUDA runtime",
    cudart_names,
    sizeof cudart_names / sizeof cudart_names[0],
    (void **)&cudart_table,
    PTHREAD_ONCE_INIT,
    0,
    {0},
    "",
};

static lib_loader nccl = {
    /* nvidia-nccl-cu12 and -cu13 both install nvidia/nccl/lib */
    {"DETCHECK_NCCL_LIB", {"libnccl.so.2", NULL, NULL},
     {"nvidia/nccl/lib", cu_wheel_dir, NULL}, NULL, 0, 1},
    "NCCL",
    nccl_names,
    sizeof nccl_names / sizeof nccl_names[0],
    (void **)&nccl_table,
    PTHREAD_ONCE_INIT,
    0,
    {0},
    "",
};

static void load(lib_loader *l) {
    if (!dck_libfind_load(&l->spec, &l->found)) {
        dck_libfind_why(&l->spec, &l->found, l->what, l->why, sizeof l->why);
        return;
    }
    for (size_t i = 0; i < l->nfns; i++) {
        /* POSIX: a function pointer converts from dlsym's void * */
        void *f = dlsym(l->found.handle, l->fns[i]);
        if (!f) {
            dck_libfind_lacks(&l->found, l->what, l->fns[i], "too old for this detcheck", l->why, sizeof l->why);
            memset(l->table, 0, l->nfns * sizeof(void *));
            return; /* the handle stays open: doctor names the library it found */
        }
        memcpy(&l->table[i], &f, sizeof f);
    }
    l->ok = 1; /* the handle stays open for the life of the process */
}

static void load_cudart(void) {
    cuda_names();
    load(&cudart);
}
static void load_nccl(void) {
    cuda_names();
    load(&nccl);
}

dck_status dck_cudart_load(const dck_cudart_api **out) {
    pthread_once(&cudart.once, load_cudart);
    *out = cudart.ok ? &cudart_table : NULL;
    return cudart.ok ? DCK_OK : dck_set_error(DCK_ERR_NODEVICE, "no CUDA device: %s", cudart.why);
}

const dck_cudart_api *dck_cudart_loaded(void) {
    /* pthread_once makes the table visible to every thread that got DCK_OK */
    const dck_cudart_api *rt = NULL;
    return dck_cudart_load(&rt) == DCK_OK ? rt : NULL;
}

dck_status dck_nccl_load(const dck_nccl_api **out) {
    pthread_once(&nccl.once, load_nccl);
    *out = nccl.ok ? &nccl_table : NULL;
    return nccl.ok ? DCK_OK : dck_set_error(DCK_ERR_NODEVICE, "%s", nccl.why);
}

const dck_libfind *dck_cudart_found(const char **why) {
    pthread_once(&cudart.once, load_cudart);
    *why = cudart.ok ? NULL : cudart.why;
    return &cudart.found;
}

const dck_libfind *dck_nccl_found(const char **why) {
    pthread_once(&nccl.once, load_nccl);
    *why = nccl.ok ? NULL : nccl.why;
    return &nccl.found;
}

/* ------------------------------------------------------------------ kernels */

#define DCK_TK_NAME_(name) "dck_tk_" #name "_kernel",
static const char *const kernel_names[DCK_KERNEL_COUNT] = {
    [DCK_KERNEL_SEGMENTS_SUM] = "dck_segments_sum_kernel",
    [DCK_KERNEL_WORD_SUM] = "dck_word_sum_kernel",
    DCK_TK_KERNELS(DCK_TK_NAME_)
};
#undef DCK_TK_NAME_
/* the fatbin that holds each kernel: digest.cu's first, then train.cu's */
static const unsigned char *kernel_fatbin(int k) {
    return k < DCK_KERNEL_TRAIN0 ? dck_cuda_digest_fatbin : dck_cuda_train_fatbin;
}
static pthread_once_t kernels_once = PTHREAD_ONCE_INIT;
static cudaKernel_t kernels[DCK_KERNEL_COUNT];
static cudaError_t kernels_error = cudaSuccess;

static void load_kernels(void) {
    const dck_cudart_api *rt = dck_cudart_loaded();
    if (!rt) {
        kernels_error = cudaErrorSharedObjectInitFailed;
        return;
    }
    cudaLibrary_t lib = NULL;
    const unsigned char *loaded = NULL;
    cudaError_t e = cudaSuccess;
    for (int k = 0; k < DCK_KERNEL_COUNT && e == cudaSuccess; k++) {
        if (kernel_fatbin(k) != loaded) {
            loaded = kernel_fatbin(k);
            e = rt->cudaLibraryLoadData(&lib, loaded, NULL, NULL, 0, NULL, NULL, 0);
            if (e != cudaSuccess) break;
        }
        e = rt->cudaLibraryGetKernel(&kernels[k], lib, kernel_names[k]);
    }
    kernels_error = e; /* the library stays loaded for the life of the process */
}

int dck_cuda_kernel(int which, cudaKernel_t *out) {
    *out = NULL;
    if (which < 0 || which >= DCK_KERNEL_COUNT) return (int)cudaErrorInvalidValue;
    pthread_once(&kernels_once, load_kernels);
    if (kernels_error != cudaSuccess) return (int)kernels_error;
    *out = kernels[which];
    return (int)cudaSuccess;
}

#endif /* DCK_HAVE_CUDA */

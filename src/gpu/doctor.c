/* dck_doctor_probe: what this detcheck finds at run time, for `detcheck
 * doctor` (detcheck-doctor(1)). Each library is asked for through its own
 * loader (the search of common/libfind.h, once per process), so what doctor
 * says is what a GPU hash or a distributed run would load, and why not. It
 * lives in the GPU layer, the lowest that sees every loader (CUDA, cuBLAS,
 * NCCL here; MPI in common/) and the digest's kernels (core/). */
#include "common/common.h"
#include "common/libfind.h"
#include "core/digest_simd.h"

#ifdef DCK_HAVE_CUDA
#include "gpu/cuda_loader.h"
#include "gpu/gpu_blas.h"
#endif
#ifdef DCK_HAVE_MPI
#include "common/mpi_loader.h"
#endif

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ rows */

typedef struct {
    dck_doctor_result *r;
    bool oom;
} probe;

/* vasprintf, noting a failure in p->oom (NULL then) */
static char *vtext(probe *p, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
static char *vtext(probe *p, const char *fmt, va_list ap) {
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0) {
        p->oom = true;
        return NULL;
    }
    return s;
}

static char *text(probe *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *text(probe *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *s = vtext(p, fmt, ap);
    va_end(ap);
    return s;
}

/* Appends a formatted line to the row's detail ("a\nb"). */
static void add_line(probe *p, dck_doctor_row *w, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void add_line(probe *p, dck_doctor_row *w, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *line = vtext(p, fmt, ap);
    va_end(ap);
    if (!line) return;
    char *s = w->detail ? text(p, "%s\n%s", w->detail, line) : line;
    if (s != line) free(line);
    if (!s) return;
    free(w->detail);
    w->detail = s;
}

static dck_doctor_row *row(probe *p, const char *key, const char *name) {
    dck_doctor_row *row = &p->r->rows[p->r->n++];
    row->key = key;
    row->name = name;
    row->state = DCK_DOCTOR_INFO;
    return row;
}

#if defined(DCK_HAVE_CUDA) || defined(DCK_HAVE_MPI)
/* A library's row from its loader's search: found and usable (why NULL),
 * found but unusable (a handle, why the loader's message), or absent
 * (every place tried, one line each). 1 when usable. */
static int from_search(probe *p, dck_doctor_row *w, const dck_libfind *f, const char *why) {
    if (f->handle) {
        w->path = text(p, "%s", f->path);
        w->from = text(p, "%s", f->from);
    }
    if (!why) {
        w->state = DCK_DOCTOR_FOUND;
        return 1;
    }
    w->state = f->handle ? DCK_DOCTOR_UNUSABLE : DCK_DOCTOR_ABSENT;
    size_t n = strlen(f->tried);
    if (f->handle || !n) w->why = text(p, "%s", why);
    else w->why = text(p, "%.*s", (int)(n - 1), f->tried); /* without the last "\n" */
    return 0;
}
#endif

#if !defined(DCK_HAVE_CUDA) || !defined(DCK_HAVE_MPI)
static void not_built(probe *p, dck_doctor_row *w, const char *what) {
    w->state = DCK_DOCTOR_NOT_BUILT;
    w->why = text(p, "this detcheck was built without %s", what);
}
#endif

/* ------------------------------------------------------------------ detcheck and the CPU */

static void probe_detcheck(probe *p) {
    dck_doctor_row *w = row(p, "detcheck", "detcheck");
    w->version = text(p, "%s", dck_version());
    add_line(p, w, "digest: v1 (detcheck-digest(7))");
#ifdef DCK_HAVE_CUDA
    add_line(p, w, "CUDA: built with CUDA %d.%d's headers (loads libcudart.so.%d at run time)",
             CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10, CUDART_VERSION / 1000);
#else
    add_line(p, w, "CUDA: not built in (make CUDA=0, or no nvcc at build time)");
#endif
#if defined(DCK_HAVE_MPI) && defined(OMPI_MAJOR_VERSION)
    add_line(p, w, "MPI: built with Open MPI %d.%d.%d's headers (loads libmpi at run time)", OMPI_MAJOR_VERSION,
             OMPI_MINOR_VERSION, OMPI_RELEASE_VERSION);
#elif defined(DCK_HAVE_MPI)
    add_line(p, w, "MPI: built in (loads libmpi at run time)");
#else
    add_line(p, w, "MPI: not built in (make MPI=0, or no mpicc at build time)");
#endif
}

static void probe_cpu(probe *p) {
    dck_doctor_row *w = row(p, "cpu", "CPU (digest)");
    const dck_digest_kernel *k = dck_digest_kernel_active();
    w->version = text(p, "%s", k->name);
    const char *want = getenv("DETCHECK_DIGEST_KERNEL");
    w->from = want && *want ? text(p, "DETCHECK_DIGEST_KERNEL=%s", want) : text(p, "the widest the CPU runs");
    for (size_t i = 0; i < dck_digest_kernel_count(); i++) {
        const dck_digest_kernel *ki = dck_digest_kernel_at(i);
        add_line(p, w, "kernel %s (needs %s): %s", ki->name, ki->needs,
                 dck_digest_kernel_supported(ki) ? "runs here" : "not on this CPU");
    }
}

/* ------------------------------------------------------------------ CUDA */

#ifdef DCK_HAVE_CUDA
/* The driver API, as much as doctor needs: CUresult is an int, 0 success. */
typedef int (*cu_init_fn)(unsigned);
typedef int (*cu_int_fn)(int *);
typedef int (*cu_device_get_fn)(int *, int);
typedef int (*cu_device_name_fn)(char *, int, int);
typedef int (*cu_error_fn)(int, const char **);

static void *sym(void *h, const char *name) { return h ? dlsym(h, name) : NULL; }

/* "CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected" */
static char *cu_error(probe *p, void *h, const char *call, int e) {
    const char *name = NULL, *str = NULL;
    cu_error_fn en, es;
    void *a = sym(h, "cuGetErrorName"), *b = sym(h, "cuGetErrorString");
    memcpy(&en, &a, sizeof a);
    memcpy(&es, &b, sizeof b);
    if (en) en(e, &name);
    if (es) es(e, &str);
    return text(p, "%s: error %d%s%s%s%s", call, e, name ? " " : "", name ? name : "", str ? ": " : "", str ? str : "");
}

static void probe_driver(probe *p) {
    dck_doctor_row *w = row(p, "driver", "CUDA driver");
    /* the driver is the system's (never a wheel's, nor the toolkit's stub) */
    const dck_libfind_spec spec = {NULL, {"libcuda.so.1", NULL, NULL}, {NULL}, NULL, 0, 0};
    dck_libfind f;
    dck_libfind_load(&spec, &f);
    if (!from_search(p, w, &f, f.handle ? NULL : "not found")) return;
    void *h = f.handle;
    cu_init_fn init;
    cu_int_fn version, count;
    cu_device_get_fn get;
    cu_device_name_fn name;
    void *fs[5] = {sym(h, "cuInit"), sym(h, "cuDriverGetVersion"), sym(h, "cuDeviceGetCount"), sym(h, "cuDeviceGet"),
                   sym(h, "cuDeviceGetName")};
    memcpy(&init, &fs[0], sizeof fs[0]);
    memcpy(&version, &fs[1], sizeof fs[1]);
    memcpy(&count, &fs[2], sizeof fs[2]);
    memcpy(&get, &fs[3], sizeof fs[3]);
    memcpy(&name, &fs[4], sizeof fs[4]);
    int v = 0, e, n = 0;
    if (!init || !version || !count || !get || !name) {
        w->state = DCK_DOCTOR_UNUSABLE;
        w->why = text(p, "%s lacks the driver API (cuInit, cuDriverGetVersion, cuDeviceGetCount, ...)", f.path);
        return; /* the handle stays open, as the loaders' */
    }
    if (version(&v) == 0) w->version = text(p, "%d.%d", v / 1000, v % 1000 / 10);
    if ((e = init(0)) != 0 || (e = count(&n)) != 0) {
        w->state = DCK_DOCTOR_UNUSABLE;
        w->why = cu_error(p, h, "cuInit", e);
        return;
    }
    add_line(p, w, "%d device%s", n, n == 1 ? "" : "s");
    for (int i = 0; i < n && i < 64; i++) {
        char nm[256] = "";
        int dev = 0;
        bool named = get(&dev, i) == 0 && name(nm, (int)sizeof nm, dev) == 0;
        add_line(p, w, "GPU %d: %s", i, named ? nm : "(no name)");
    }
}

static void probe_cudart(probe *p) {
    dck_doctor_row *w = row(p, "cuda", "CUDA runtime");
    const char *why;
    const dck_libfind *f = dck_cudart_found(&why);
    if (!from_search(p, w, f, why)) return;
    const dck_cudart_api *rt = dck_cudart_loaded();
    int v = 0, n = 0;
    if (rt->cudaRuntimeGetVersion(&v) == cudaSuccess) w->version = text(p, "%d.%d", v / 1000, v % 1000 / 10);
    int dv = 0;
    if (rt->cudaDriverGetVersion(&dv) == cudaSuccess) {
        if (dv) add_line(p, w, "the driver supports CUDA %d.%d", dv / 1000, dv % 1000 / 10);
        else add_line(p, w, "no driver (cudaDriverGetVersion: 0)");
    }
    cudaError_t e = rt->cudaGetDeviceCount(&n);
    if (e == cudaSuccess) add_line(p, w, "cudaGetDeviceCount: %d device%s", n, n == 1 ? "" : "s");
    else add_line(p, w, "cudaGetDeviceCount: %s: %s", rt->cudaGetErrorName(e), rt->cudaGetErrorString(e));
}

static void probe_cublas(probe *p) {
    dck_doctor_row *w = row(p, "cublas", "cuBLAS");
    const char *why;
    const dck_libfind *f = dck_cublas_found(&why);
    if (!from_search(p, w, f, why)) return;
    /* cublasGetProperty(libraryPropertyType: MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL) */
    int (*prop)(int, int *);
    void *a = dlsym(f->handle, "cublasGetProperty");
    memcpy(&prop, &a, sizeof a);
    int v[3] = {0};
    if (prop && prop(0, &v[0]) == 0 && prop(1, &v[1]) == 0 && prop(2, &v[2]) == 0)
        w->version = text(p, "%d.%d.%d", v[0], v[1], v[2]);
    if (f->companion) {
        add_line(p, w, "cuBLASLt loaded first from the same folder");
    }
}

static void probe_nccl(probe *p) {
    dck_doctor_row *w = row(p, "nccl", "NCCL");
    const char *why;
    const dck_libfind *f = dck_nccl_found(&why);
    if (!from_search(p, w, f, why)) return;
    int (*get)(int *);
    void *a = dlsym(f->handle, "ncclGetVersion");
    memcpy(&get, &a, sizeof a);
    int v = 0;
    /* NCCL_VERSION_CODE: major*10000 + minor*100 + patch since 2.9, major*1000 before */
    if (get && get(&v) == 0)
        w->version = v >= 10000 ? text(p, "%d.%d.%d", v / 10000, v % 10000 / 100, v % 100)
                                : text(p, "%d.%d.%d", v / 1000, v % 1000 / 100, v % 100);
}
#endif /* DCK_HAVE_CUDA */

/* ------------------------------------------------------------------ MPI */

static void probe_mpi(probe *p) {
    dck_doctor_row *w = row(p, "mpi", "MPI");
#ifdef DCK_HAVE_MPI
    const char *why;
    const dck_libfind *f = dck_mpi_found(&why);
    if (!from_search(p, w, f, why)) return;
    /* MPI_Get_library_version may be called before MPI_Init (MPI 3.0) */
    int (*get)(char *, int *);
    void *a = dlsym(f->handle, "MPI_Get_library_version");
    memcpy(&get, &a, sizeof a);
    char v[MPI_MAX_LIBRARY_VERSION_STRING + 1] = "";
    int len = 0;
    if (get && get(v, &len) == 0) {
        v[len >= 0 && len <= MPI_MAX_LIBRARY_VERSION_STRING ? len : MPI_MAX_LIBRARY_VERSION_STRING] = '\0';
        v[strcspn(v, "\n,")] = '\0'; /* the first line; Open MPI's goes on ", repo rev: ..." */
        w->version = text(p, "%s", v);
    }
#else
    not_built(p, w, "MPI (make MPI=0, or no mpicc at build time)");
#endif
}

/* ------------------------------------------------------------------ the probe */

enum { DOCTOR_ROWS = 7 };

dck_status dck_doctor_probe(dck_doctor_result *out) {
    memset(out, 0, sizeof *out);
    out->rows = dck_xcalloc(DOCTOR_ROWS, sizeof *out->rows);
    if (!out->rows) return dck_oom("doctor");
    probe p = {out, false};
    probe_detcheck(&p);
    probe_cpu(&p);
#ifdef DCK_HAVE_CUDA
    probe_driver(&p);
    probe_cudart(&p);
    probe_cublas(&p);
    probe_nccl(&p);
#else
    static const char *const cuda_rows[][2] = {
        {"driver", "CUDA driver"}, {"cuda", "CUDA runtime"}, {"cublas", "cuBLAS"}, {"nccl", "NCCL"}};
    for (size_t i = 0; i < sizeof cuda_rows / sizeof cuda_rows[0]; i++)
        not_built(&p, row(&p, cuda_rows[i][0], cuda_rows[i][1]), "CUDA (make CUDA=0, or no nvcc at build time)");
#endif
    probe_mpi(&p);
    if (p.oom) {
        dck_doctor_result_release(out);
        return dck_oom("doctor");
    }
    return DCK_OK;
}

void dck_doctor_result_release(dck_doctor_result *r) {
    if (!r) return;
    for (size_t i = 0; r->rows && i < r->n; i++) {
        dck_doctor_row *w = &r->rows[i];
        free(w->version);
        free(w->path);
        free(w->from);
        free(w->detail);
        free(w->why);
    }
    free(r->rows);
    memset(r, 0, sizeof *r);
}

const char *dck_doctor_state_name(dck_doctor_state s) {
    static const char *const names[] = {
        [DCK_DOCTOR_FOUND] = "found",         [DCK_DOCTOR_UNUSABLE] = "unusable",
        [DCK_DOCTOR_ABSENT] = "absent",       [DCK_DOCTOR_NOT_BUILT] = "not built",
        [DCK_DOCTOR_INFO] = "info",
    };
    return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "?";
}

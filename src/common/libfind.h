/* The one search for the shared libraries detcheck loads at run time and
 * never bundles: the CUDA runtime, cuBLAS (with cuBLASLt), NCCL, the CUDA
 * driver and MPI (src/gpu/cuda_loader.c, src/gpu/gpu_blas.c,
 * src/common/mpi_loader.c; `detcheck doctor` shows what each found).
 *
 * Where, in this order, stopping at the first that loads:
 *   1. the override variable (DETCHECK_CUDART_LIB, ...): a path or a soname,
 *      and nothing else when it is set (tests point it at missing names);
 *   2. already loaded in the process (a Python process that imported torch):
 *      dlopen(soname, RTLD_NOLOAD);
 *   3. NVIDIA's wheels: each site-packages folder's sub-folders of the
 *      spec (nvidia/cu13/lib, nvidia/cuda_runtime/lib, ...);
 *   4. $CONDA_PREFIX/lib;
 *   5. the system's loader path (plain dlopen of the soname: LD_LIBRARY_PATH,
 *      the binary's rpath, ld.so.cache);
 *   6. $CUDA_HOME/lib64, $CUDA_HOME/lib, then the same of $CUDA_PATH (CUDA
 *      libraries only).
 * The site-packages folders, each once, in order: $DETCHECK_SITE_PACKAGES (a
 * colon list), the folders named site-packages or dist-packages above
 * libdetcheck's own file (SITE/detcheck/_native/ in the wheel) and above the
 * executable, then each PREFIX's lib/python3.N/site-packages (also lib64,
 * dist-packages) for PREFIX the executable's ../ (pip puts it in VENV/bin),
 * $VIRTUAL_ENV,
 * $CONDA_PREFIX and the user's base ($PYTHONUSERBASE, else ~/.local).
 *
 * The result says what was loaded (its real path), which step found it, and
 * when nothing loaded, every place tried with why, one line each, for the
 * loaders' messages and doctor's rows. */
#ifndef DCK_COMMON_LIBFIND_H
#define DCK_COMMON_LIBFIND_H

#include <stddef.h>

typedef struct {
    const char *env;               /* the override variable, or NULL */
    const char *sonames[3];        /* tried at each place, in order; NULL ends */
    const char *wheel_dirs[3];     /* under site-packages; NULL ends (none: MPI) */
    const char *companion;         /* loaded first from the same folder (cuBLASLt beside
                                    * cuBLAS, which needs it and may not find it), or NULL */
    int global;                    /* RTLD_GLOBAL (Open MPI's plugins need its symbols);
                                    * else RTLD_LOCAL */
    int cuda;                      /* also $CUDA_HOME and $CUDA_PATH */
} dck_libfind_spec;

enum { DCK_LIBFIND_PATH_MAX = 4096, DCK_LIBFIND_TRIED_MAX = 4096 };
typedef struct {
    void *handle;                  /* NULL: nothing loaded */
    void *companion;               /* the companion's handle, when it was loaded */
    char path[DCK_LIBFIND_PATH_MAX]; /* the real path of what was loaded */
    char from[64];                 /* the step that found it: "NVIDIA wheel", "already
                                    * loaded", "system loader path", "DETCHECK_NCCL_LIB"... */
    char tried[DCK_LIBFIND_TRIED_MAX]; /* the places tried before, one line each
                                        * ("STEP: why"), ending in "\n"; cut with "..." */
} dck_libfind;

/* Searches as above and fills out (all of it, found or not). 1 when a
 * library loaded (the handles stay open until dck_libfind_close), else 0. */
int dck_libfind_load(const dck_libfind_spec *spec, dck_libfind *out);
/* Closes what dck_libfind_load opened (a library that lacks a function the
 * caller needs); out->handle is NULL afterwards. */
void dck_libfind_close(dck_libfind *f);
/* The loaders' message for a library not found, into buf: "cannot load
 * WHAT (NAMES): PLACE: why; PLACE: why" (NAMES: the sonames, or the
 * override's value). */
void dck_libfind_why(const dck_libfind_spec *spec, const dck_libfind *f, const char *what, char *buf, size_t n);
/* The message for a library found that lacks a function: "WHAT has no FN:
 * HOW (PATH, found by STEP)". */
void dck_libfind_lacks(const dck_libfind *f, const char *what, const char *fn, const char *how, char *buf,
                       size_t n);

#endif

/* libmpi, loaded on the first distributed call (see mpi_loader.h for why). */
#include "common/common.h"

#ifdef DCK_HAVE_MPI

#include "common/mpi_loader.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The soname of the MPI built against (its ABI): Open MPI 3.0 to 5.x keep
 * libmpi.so.40; MPICH (and its ABI-compatible kin) libmpi.so.12. */
#if defined(OMPI_MAJOR_VERSION) && OMPI_MAJOR_VERSION >= 3
#define DCK_MPI_SONAME "libmpi.so.40"
#elif defined(MPICH)
#define DCK_MPI_SONAME "libmpi.so.12"
#else
#define DCK_MPI_SONAME "libmpi.so"
#endif

#define DCK_MPI_NAME_(name) #name,
static const char *const fn_names[] = {DCK_MPI_FUNCTIONS(DCK_MPI_NAME_)};
#undef DCK_MPI_NAME_
enum { NFNS = sizeof fn_names / sizeof fn_names[0] };

static dck_mpi_api api;
_Static_assert(offsetof(dck_mpi_api, comm_world) == NFNS * sizeof(void *),
               "one function pointer per name, then the handles");
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int loaded;
static char why[512]; /* the failure, when !loaded */

/* The handles: with Open MPI the address of a global of libmpi (the value
 * its header's OMPI_PREDEFINED_GLOBAL would take at link time); otherwise
 * the header's constant, which references no symbol. The global is looked
 * up in the process's scope first: a program linked with libmpi that names
 * MPI_COMM_WORLD holds a copy of ompi_mpi_comm_world (a copy relocation),
 * and that copy is the object libmpi itself uses; dlsym on libmpi's handle
 * would find its own, never initialised, definition. */
static int resolve_handles(void *h) {
#ifdef OMPI_PREDEFINED_GLOBAL
    void *p;
#define DCK_MPI_HANDLE_(field, type, macro, global)                                             \
    if (!(p = dlsym(RTLD_DEFAULT, #global)) && !(p = dlsym(h, #global))) {                      \
        snprintf(why, sizeof why, "the MPI library has no %s (for %s): not Open MPI?", #global, \
                 #macro);                                                                       \
        return 0;                                                                               \
    }                                                                                           \
    api.field = (type)p;
    DCK_MPI_HANDLES(DCK_MPI_HANDLE_)
#undef DCK_MPI_HANDLE_
#else
    (void)h;
#define DCK_MPI_HANDLE_(field, type, macro, global) api.field = macro;
    DCK_MPI_HANDLES(DCK_MPI_HANDLE_)
#undef DCK_MPI_HANDLE_
#endif
    return 1;
}

static void load(void) {
    const char *over = getenv("DETCHECK_MPI_LIB");
    const char *const mine[] = {DCK_MPI_SONAME, "libmpi.so", NULL};
    const char *const one[] = {over, NULL};
    const char *const *names = over && *over ? one : mine;
    void *h = NULL;
    const char *err = "";
    char tried[256] = "";
    for (size_t i = 0; names[i] && !h; i++) {
        /* GLOBAL: Open MPI's plugins resolve libmpi's symbols from the
         * global scope when MPI_Init dlopens them */
        h = dlopen(names[i], RTLD_NOW | RTLD_GLOBAL);
        if (!h) {
            err = dlerror();
            size_t n = strlen(tried);
            snprintf(tried + n, sizeof tried - n, "%s%s", n ? ", " : "", names[i]);
        }
    }
    if (!h) {
        snprintf(why, sizeof why, "cannot load the MPI library (%s): %s", tried,
                 err ? err : "not found");
        return;
    }
    void **table = (void **)&api;
    for (size_t i = 0; i < NFNS; i++) {
        /* POSIX: a function pointer converts from dlsym's void * */
        void *f = dlsym(h, fn_names[i]);
        if (!f) {
            snprintf(why, sizeof why, "the MPI library has no %s: not MPI, or too old", fn_names[i]);
            memset(&api, 0, sizeof api);
            dlclose(h);
            return;
        }
        memcpy(&table[i], &f, sizeof f);
    }
    if (!resolve_handles(h)) {
        memset(&api, 0, sizeof api);
        dlclose(h);
        return;
    }
    loaded = 1; /* the handle stays open for the life of the process */
}

dck_status dck_mpi_load(const dck_mpi_api **out) {
    pthread_once(&once, load);
    *out = loaded ? &api : NULL;
    return loaded ? DCK_OK : dck_set_error(DCK_ERR_COMM, "mpi: %s", why);
}

#endif /* DCK_HAVE_MPI */

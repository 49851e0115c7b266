/* libmpi, loaded on the first distributed call (see mpi_loader.h for why). */
#include "common/common.h"

#ifdef DCK_HAVE_MPI

#include "common/libfind.h"
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
static dck_libfind found; /* what the search loaded, or every place it tried */
static char why[2048];    /* the failure, when !loaded */

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
        dck_libfind_lacks(&found, "the MPI library", #global, "not Open MPI? (for " #macro ")",  \
                          why, sizeof why);                                                     \
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
    /* GLOBAL: Open MPI's plugins resolve libmpi's symbols from the global
     * scope when MPI_Init dlopens them. No wheel ships MPI. */
    const dck_libfind_spec spec = {"DETCHECK_MPI_LIB", {DCK_MPI_SONAME, "libmpi.so", NULL}, {NULL}, NULL, 1, 0};
    if (!dck_libfind_load(&spec, &found)) {
        dck_libfind_why(&spec, &found, "the MPI library", why, sizeof why);
        return;
    }
    void *h = found.handle;
    void **table = (void **)&api;
    for (size_t i = 0; i < NFNS; i++) {
        /* POSIX: a function pointer converts from dlsym's void * */
        void *f = dlsym(h, fn_names[i]);
        if (!f) {
            dck_libfind_lacks(&found, "the MPI library", fn_names[i], "not MPI, or too old", why, sizeof why);
            memset(&api, 0, sizeof api);
            return; /* the handle stays open: doctor names the library it found */
        }
        memcpy(&table[i], &f, sizeof f);
    }
    if (!resolve_handles(h)) {
        memset(&api, 0, sizeof api);
        return;
    }
    loaded = 1; /* the handle stays open for the life of the process */
}

dck_status dck_mpi_load(const dck_mpi_api **out) {
    pthread_once(&once, load);
    *out = loaded ? &api : NULL;
    return loaded ? DCK_OK : dck_set_error(DCK_ERR_COMM, "mpi: %s", why);
}

const dck_libfind *dck_mpi_found(const char **whynot) {
    pthread_once(&once, load);
    *whynot = loaded ? NULL : why;
    return &found;
}

#endif /* DCK_HAVE_MPI */

/* MPI (Open MPI), loaded with dlopen on the first distributed call.
 *
 * detcheck links no MPI library: `ldd detcheck` lists no libmpi, and a
 * plain call (verify, hash, diff) maps none of Open MPI's libraries, which
 * were most of its start-up time. dck_comm_init loads libmpi when the
 * process was started by a launcher (mpirun sets OMPI_COMM_WORLD_SIZE,
 * PMIX_RANK, ...), resolves the functions and handles of the tables below
 * once (thread-safe), and only then calls MPI_Init.
 *
 * libmpi is opened RTLD_NOW | RTLD_GLOBAL: Open MPI's plugins (mca_*.so,
 * which it dlopens itself during MPI_Init) take their MPI and OPAL symbols
 * from the global scope and fail to load otherwise. It is tried as
 * DETCHECK_MPI_LIB (a path or a soname; the tests point it at a missing
 * name), else the soname of the Open MPI built against (libmpi.so.40 for
 * Open MPI 3 to 5), else libmpi.so, searched as common/libfind.h says
 * (already loaded, $CONDA_PREFIX/lib, the loader's path); the Makefile adds an rpath to mpicc's
 * library folder, so an Open MPI outside the loader's path is found as the
 * linked one was. A library that cannot be loaded is DCK_ERR_COMM with a
 * message naming it; the CLI exits 2.
 *
 * Types and prototypes come from <mpi.h> at compile time (__typeof__ only:
 * no symbol of it is referenced). Open MPI's predefined handles
 * (MPI_COMM_WORLD, MPI_BYTE, MPI_SUM, ...) are the addresses of globals of
 * libmpi (ompi_mpi_comm_world, ...), so they are resolved with dlsym too;
 * an MPI whose handles are compile-time constants (MPICH) takes them from
 * the header. */
#ifndef DCK_COMMON_MPI_LOADER_H
#define DCK_COMMON_MPI_LOADER_H

#ifdef DCK_HAVE_MPI /* set by the Makefile when mpicc is found */

#include "common/libfind.h"
#include "detcheck.h"

#include <mpi.h>

/* Every MPI function detcheck calls: one line here, nothing else. */
#define DCK_MPI_FUNCTIONS(X)                                                                    \
    X(MPI_Initialized)                                                                          \
    X(MPI_Init)                                                                                 \
    X(MPI_Finalize)                                                                             \
    X(MPI_Abort)                                                                                \
    X(MPI_Error_string)                                                                         \
    X(MPI_Comm_set_errhandler)                                                                  \
    X(MPI_Comm_rank)                                                                            \
    X(MPI_Comm_size)                                                                            \
    X(MPI_Ibarrier)                                                                             \
    X(MPI_Test)                                                                                 \
    X(MPI_Isend)                                                                                \
    X(MPI_Irecv)                                                                                \
    X(MPI_Cancel)                                                                               \
    X(MPI_Request_free)                                                                         \
    X(MPI_Bcast)                                                                                \
    X(MPI_Gather)                                                                               \
    X(MPI_Gatherv)                                                                              \
    X(MPI_Allgather)                                                                            \
    X(MPI_Allgatherv)                                                                           \
    X(MPI_Reduce)                                                                               \
    X(MPI_Allreduce)                                                                            \
    X(MPI_Iallgather)                                                                           \
    X(MPI_Iallgatherv)                                                                          \
    X(MPI_Iallreduce)                                                                           \
    X(MPI_Ibcast)

/* Every predefined handle: the field, its type, the header's name, and
 * Open MPI's global behind it. */
#define DCK_MPI_HANDLES(X)                                                                      \
    X(comm_world, MPI_Comm, MPI_COMM_WORLD, ompi_mpi_comm_world)                                \
    X(errors_return, MPI_Errhandler, MPI_ERRORS_RETURN, ompi_mpi_errors_return)                 \
    X(byte, MPI_Datatype, MPI_BYTE, ompi_mpi_byte)                                              \
    X(int_, MPI_Datatype, MPI_INT, ompi_mpi_int)                                                \
    X(float_, MPI_Datatype, MPI_FLOAT, ompi_mpi_float)                                          \
    X(uint64, MPI_Datatype, MPI_UINT64_T, ompi_mpi_uint64_t)                                    \
    X(sum, MPI_Op, MPI_SUM, ompi_mpi_op_sum)                                                    \
    X(max, MPI_Op, MPI_MAX, ompi_mpi_op_max)                                                    \
    X(min, MPI_Op, MPI_MIN, ompi_mpi_op_min)

#define DCK_MPI_FN_FIELD_(name) __typeof__(&name) name;
#define DCK_MPI_HANDLE_FIELD_(field, type, macro, global) type field;
typedef struct {
    DCK_MPI_FUNCTIONS(DCK_MPI_FN_FIELD_)
    DCK_MPI_HANDLES(DCK_MPI_HANDLE_FIELD_)
} dck_mpi_api;
#undef DCK_MPI_FN_FIELD_
#undef DCK_MPI_HANDLE_FIELD_

/* The table: loaded on the first call (once per process, any thread), the
 * same table afterwards. DCK_ERR_COMM, naming the library, when it cannot
 * be loaded or lacks a function or handle. */
dck_status dck_mpi_load(const dck_mpi_api **out);
/* What the search found (common/libfind.h), loading it if need be: for
 * doctor. *why is NULL when the table loaded, else the message. */
const dck_libfind *dck_mpi_found(const char **why);

/* A barrier on MPI_COMM_WORLD that sleeps while it waits. Open MPI's
 * blocking calls poll (opal_progress) until the last rank arrives, burning a
 * core that the ranks still working, or other jobs on the node, could use;
 * this one starts MPI_Ibarrier and tests it between growing sleeps (20 us to
 * 1 ms: at most 1 ms late). For waits of unknown length, before the
 * collectives that follow uneven work. (In comm.c, beside dck_mpi_check.) */
dck_status dck_mpi_quiet_barrier(const dck_mpi_api *m);

#endif /* DCK_HAVE_MPI */
#endif /* DCK_COMMON_MPI_LOADER_H */

/* Communication between ranks. MPI (Open MPI) when the process was started
 * by a launcher that says so in the environment; otherwise one rank and no
 * MPI call at all (so library tests and plain runs never touch MPI, and never
 * load it: libmpi is opened with dlopen by dck_comm_init, see mpi_loader.h,
 * and every call below goes through its table). In the
 * deterministic mode only bytes (MPI_BYTE) and integer status cross ranks:
 * MPI never performs floating-point arithmetic on our behalf. */
#include "common/common.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef DCK_HAVE_MPI /* set by the Makefile when mpicc is found */
#include "common/mpi_loader.h"

/* Set by dck_comm_init before any MPI communicator exists: every MPI branch
 * below runs on a communicator that it made. */
static const dck_mpi_api *mpi;
#endif

struct dck_comm {
    int rank, size;
    bool mpi;
    bool we_initialised;
};

static dck_comm self_comm = {0, 1, false, false};

dck_comm *dck_comm_self(void) { return &self_comm; }

#ifndef DCK_HAVE_MPI
/* Only an MPI communicator reaches a collective's MPI branch; without MPI
 * there is none, so this is a library bug rather than bad input. */
static dck_status no_mpi(const char *what) {
    return dck_set_error(DCK_ERR_COMM, "mpi: %s on an MPI communicator, but built without MPI",
                         what);
}
#endif

static bool launched_by_mpi(void) {
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK",
                                 "MPI_LOCALNRANKS", "SLURM_PMIXP_ABORT_AGENT_PORT"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) return true;
    return false;
}

dck_status dck_comm_init(int *argc, char ***argv, dck_comm **out) {
    *out = &self_comm;
#ifdef DCK_HAVE_MPI
    if (!launched_by_mpi()) return DCK_OK;
    DCK_TRY(dck_mpi_load(&mpi));
    int inited = 0;
    mpi->MPI_Initialized(&inited);
    dck_comm *c = dck_xcalloc(1, sizeof *c);
    if (!c) return dck_oom("mpi");
    if (!inited) {
        if (mpi->MPI_Init(argc, argv) != MPI_SUCCESS) {
            free(c);
            return dck_set_error(DCK_ERR_COMM, "mpi: MPI_Init failed");
        }
        c->we_initialised = true;
    }
    mpi->MPI_Comm_set_errhandler(mpi->comm_world, mpi->errors_return);
    mpi->MPI_Comm_rank(mpi->comm_world, &c->rank);
    mpi->MPI_Comm_size(mpi->comm_world, &c->size);
    c->mpi = true;
    *out = c;
#else
    (void)argc;
    (void)argv;
    if (launched_by_mpi())
        return dck_set_error(DCK_ERR_COMM, "mpi: launched by mpirun but built without MPI");
#endif
    return DCK_OK;
}

void dck_comm_finalize(dck_comm *c) {
    if (!c || c == &self_comm) return;
#ifdef DCK_HAVE_MPI
    if (c->we_initialised) mpi->MPI_Finalize();
#endif
    free(c);
}

int dck_comm_rank(const dck_comm *c) { return c->rank; }
int dck_comm_size(const dck_comm *c) { return c->size; }
bool dck_comm_is_mpi(const dck_comm *c) { return c->mpi; }

#ifdef DCK_HAVE_MPI
dck_status dck_mpi_check(int rc, const char *what) {
    if (rc == MPI_SUCCESS) return DCK_OK;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    const dck_mpi_api *m = NULL; /* loaded: rc came from one of its calls */
    if (dck_mpi_load(&m) || m->MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) len = 0;
    return dck_set_error(DCK_ERR_COMM, "mpi: %s failed: %.*s", what, len, msg);
}

/* declared in mpi_loader.h */
dck_status dck_mpi_quiet_barrier(const dck_mpi_api *m) {
    MPI_Request req;
    DCK_TRY(dck_mpi_check(m->MPI_Ibarrier(m->comm_world, &req), "MPI_Ibarrier"));
    long ns = 20000;
    for (;;) {
        int done = 0;
        DCK_TRY(dck_mpi_check(m->MPI_Test(&req, &done, MPI_STATUS_IGNORE), "MPI_Test of a barrier"));
        if (done) return DCK_OK;
        struct timespec ts = {0, ns};
        nanosleep(&ts, NULL);
        if (ns < 1000000) ns *= 2;
    }
}
#endif

dck_status dck_comm_barrier(dck_comm *c) {
#ifdef DCK_HAVE_MPI
    if (c->mpi) return dck_mpi_quiet_barrier(mpi); /* waits here can be long: sleep */
#endif
    (void)c;
    return DCK_OK;
}

/* Large byte counts go as blocks of a derived type so counts fit an int. */
dck_status dck_comm_allgather(dck_comm *c, const void *send, void *recv, size_t n) {
    if (!c->mpi) {
        if (recv != send) memcpy(recv, send, n);
        return DCK_OK;
    }
#ifdef DCK_HAVE_MPI
    if (n <= INT_MAX)
        return dck_mpi_check(mpi->MPI_Allgather(send, (int)n, mpi->byte, recv, (int)n, mpi->byte,
                                                mpi->comm_world),
                       "MPI_Allgather");
    return dck_set_error(DCK_ERR_LIMIT, "mpi: allgather of %zu bytes per rank", n);
#else
    return no_mpi("dck_comm_allgather");
#endif
}

dck_status dck_comm_allgatherv(dck_comm *c, const void *send, size_t n, void *recv,
                               const size_t *counts, const size_t *displs) {
    if (!c->mpi) {
        if ((char *)recv + displs[0] != send) memcpy((char *)recv + displs[0], send, n);
        return DCK_OK;
    }
#ifdef DCK_HAVE_MPI
    int *ic = malloc(sizeof(int) * (size_t)c->size * 2);
    if (!ic) return dck_oom("mpi");
    for (int r = 0; r < c->size; r++) {
        if (counts[r] > INT_MAX || displs[r] > INT_MAX) {
            free(ic);
            return dck_set_error(DCK_ERR_LIMIT, "mpi: allgatherv block beyond 2 GiB");
        }
        ic[r] = (int)counts[r];
        ic[c->size + r] = (int)displs[r];
    }
    /* the caller's own block may already sit in recv: MPI wants MPI_IN_PLACE */
    const void *sb = (const char *)recv + displs[c->rank] == (const char *)send ? MPI_IN_PLACE : send;
    int rc = mpi->MPI_Allgatherv(sb, (int)n, mpi->byte, recv, ic, ic + c->size, mpi->byte,
                                 mpi->comm_world);
    free(ic);
    return dck_mpi_check(rc, "MPI_Allgatherv");
#else
    (void)counts;
    return no_mpi("dck_comm_allgatherv");
#endif
}

dck_status dck_comm_allreduce_sum_f32(dck_comm *c, float *data, size_t n) {
    if (!c->mpi) return DCK_OK;
#ifdef DCK_HAVE_MPI
    if (n > INT_MAX) return dck_set_error(DCK_ERR_LIMIT, "mpi: allreduce of %zu floats", n);
    return dck_mpi_check(mpi->MPI_Allreduce(MPI_IN_PLACE, data, (int)n, mpi->float_, mpi->sum,
                                            mpi->comm_world),
                         "MPI_Allreduce");
#else
    (void)data;
    (void)n;
    return no_mpi("dck_comm_allreduce_sum_f32");
#endif
}

dck_status dck_comm_agree(dck_comm *c, dck_status s) {
    if (!c->mpi) return s;
#ifdef DCK_HAVE_MPI
    /* the worst status wins; the lowest failing rank's message travels to
     * every rank, so rank 0 (the one that prints) can say what went wrong */
    int mine = (int)s, worst = 0;
    if (mpi->MPI_Allreduce(&mine, &worst, 1, mpi->int_, mpi->max, mpi->comm_world) != MPI_SUCCESS)
        return dck_set_error(DCK_ERR_COMM, "mpi: MPI_Allreduce of a status failed");
    if (worst == DCK_OK) return DCK_OK;
    int cand = s != DCK_OK ? c->rank : INT_MAX, who = INT_MAX;
    if (mpi->MPI_Allreduce(&cand, &who, 1, mpi->int_, mpi->min, mpi->comm_world) != MPI_SUCCESS)
        return dck_set_error(DCK_ERR_COMM, "mpi: MPI_Allreduce of a rank failed");
    struct {
        int status;
        char msg[1020];
    } m;
    memset(&m, 0, sizeof m);
    if (c->rank == who) {
        m.status = (int)s;
        snprintf(m.msg, sizeof m.msg, "%s", dck_last_error());
    }
    if (mpi->MPI_Bcast(&m, (int)sizeof m, mpi->byte, who, mpi->comm_world) != MPI_SUCCESS)
        return dck_set_error(DCK_ERR_COMM, "mpi: MPI_Bcast of an error failed");
    if (c->rank == who) return s;
    if (m.msg[0])
        return dck_set_error((dck_status)m.status, "rank %d: %s", who, m.msg);
    return dck_set_error((dck_status)m.status, "rank %d failed (%s)", who,
                         dck_strerror((dck_status)m.status));
#else
    return s;
#endif
}

dck_status dck_comm_bcast(dck_comm *c, void *data, size_t n, int root) {
    if (!c->mpi) return DCK_OK;
#ifdef DCK_HAVE_MPI
    if (n > INT_MAX) return dck_set_error(DCK_ERR_LIMIT, "mpi: bcast of %zu bytes", n);
    return dck_mpi_check(mpi->MPI_Bcast(data, (int)n, mpi->byte, root, mpi->comm_world),
                         "MPI_Bcast");
#else
    (void)data;
    (void)n;
    (void)root;
    return no_mpi("dck_comm_bcast");
#endif
}

void dck_comm_abort(dck_comm *c, int code) {
#ifdef DCK_HAVE_MPI
    if (c->mpi) mpi->MPI_Abort(mpi->comm_world, code);
#endif
    (void)c;
    (void)code;
}

#ifdef DCK_HAVE_MPI
static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
#endif

/* Point to point with MPI_Test polling (and sleeps, as the quiet barrier):
 * a blocking collective would hang on a dead rank forever. Each sender
 * first sends its size (8 bytes, tag + 1), and the root posts the receive
 * of the block only when the size is n: a larger message must never meet a
 * smaller receive, because Open MPI's single-copy path (vader, CMA) writes
 * the whole message before it reports the truncation (issue 19: ranks
 * started with other settings overflowed rank 0's buffer). */
dck_status dck_comm_gather_deadline(dck_comm *c, const void *send, void *recv, size_t n, int root,
                                    int tag, double seconds, bool *arrived) {
    if (!c->mpi) {
        if (recv != send) memcpy(recv, send, n);
        arrived[0] = true;
        return DCK_OK;
    }
#ifdef DCK_HAVE_MPI
    if (n > INT_MAX) return dck_set_error(DCK_ERR_LIMIT, "mpi: gather of %zu bytes per rank", n);
    int K = c->size, pending = 0;
    /* requests [0, K): the sizes, [K, 2K): the blocks (a sender uses 0 and
     * K); which are live: our own flags, since MPI_REQUEST_NULL is a global
     * of libmpi (mpi_loader.h) */
    MPI_Request *req = calloc((size_t)K * 2, sizeof *req);
    bool *live = calloc((size_t)K * 2, sizeof *live);
    uint64_t *size = calloc((size_t)K, sizeof *size), mine = n;
    if (!req || !live || !size) {
        free(req);
        free(live);
        free(size);
        return dck_oom("mpi");
    }
    dck_status s = DCK_OK;
    int wrong = -1; /* the first rank whose block is not n bytes */
    if (c->rank == root) {
        for (int r = 0; r < K && !s; r++) {
            arrived[r] = r == root;
            if (r == root) {
                memcpy((char *)recv + (size_t)r * n, send, n);
                continue;
            }
            s = dck_mpi_check(mpi->MPI_Irecv(&size[r], 8, mpi->byte, r, tag + 1, mpi->comm_world, &req[r]),
                              "MPI_Irecv");
            if (!s) pending++, live[r] = true;
        }
    } else {
        s = dck_mpi_check(mpi->MPI_Isend(&mine, 8, mpi->byte, root, tag + 1, mpi->comm_world, &req[0]),
                          "MPI_Isend");
        if (!s) pending = 1, live[0] = true;
        if (!s) s = dck_mpi_check(mpi->MPI_Isend(send, (int)n, mpi->byte, root, tag, mpi->comm_world, &req[K]),
                                  "MPI_Isend");
        if (!s) pending = 2, live[K] = true;
    }
    double end = mono_s() + seconds;
    long ns = 20000;
    while (!s && pending > 0 && mono_s() < end) {
        for (int i = 0; i < 2 * K && !s; i++) {
            int done = 0;
            if (!live[i]) continue;
            s = dck_mpi_check(mpi->MPI_Test(&req[i], &done, MPI_STATUS_IGNORE), "MPI_Test");
            if (s || !done) continue;
            pending--;
            live[i] = false;
            if (c->rank != root) continue;
            int r = i % K;
            if (i >= K) {
                arrived[r] = true;
            } else if (size[r] == n) { /* the block fits: now receive it */
                s = dck_mpi_check(mpi->MPI_Irecv((char *)recv + (size_t)r * n, (int)n, mpi->byte, r, tag,
                                                 mpi->comm_world, &req[K + r]),
                                  "MPI_Irecv");
                if (!s) pending++, live[K + r] = true;
            } else if (wrong < 0) {
                wrong = r; /* never received: its sender waits until the caller aborts */
            }
        }
        if (pending == 0) break;
        struct timespec ts = {0, ns};
        nanosleep(&ts, NULL);
        if (ns < 10000000) ns *= 2;
    }
    /* what never came is cancelled: the caller names it and aborts the job */
    for (int i = 0; i < 2 * K; i++)
        if (live[i]) {
            mpi->MPI_Cancel(&req[i]);
            mpi->MPI_Request_free(&req[i]);
        }
    free(req);
    free(live);
    if (!s && wrong >= 0)
        s = dck_set_error(DCK_ERR_COMM, "mpi: rank %d sends %llu bytes, rank %d expects %zu: the ranks "
                          "run different settings or versions (nothing received)", wrong,
                          (unsigned long long)size[wrong], root, n);
    free(size);
    if (!s && pending > 0 && c->rank != root)
        s = dck_set_error(DCK_ERR_COMM, "mpi: rank %d: rank %d took no report within %.0f s",
                          c->rank, root, seconds);
    return s;
#else
    (void)root;
    (void)tag;
    (void)seconds;
    return no_mpi("dck_comm_gather_deadline");
#endif
}

/* Rank root sends n bytes to every rank r with to[r] (root's view; NULL:
 * every rank), the others receive them, each waiting at most `seconds`:
 * unlike MPI_Bcast, no rank waits on one that is missing (its tree could
 * route through it). Needed by the callers of dck_comm_gather_deadline to
 * tell the ranks that reported what rank 0 decided, missing ranks
 * included. */
dck_status dck_comm_bcast_deadline(dck_comm *c, void *data, size_t n, int root, int tag, double seconds,
                                   const bool *to) {
    if (!c->mpi) return DCK_OK;
#ifdef DCK_HAVE_MPI
    if (n > INT_MAX) return dck_set_error(DCK_ERR_LIMIT, "mpi: bcast of %zu bytes", n);
    int K = c->size, pending = 0;
    MPI_Request *req = calloc((size_t)K, sizeof *req);
    bool *live = calloc((size_t)K, sizeof *live);
    if (!req || !live) {
        free(req);
        free(live);
        return dck_oom("mpi");
    }
    dck_status s = DCK_OK;
    for (int r = 0; r < K && !s; r++) {
        if (c->rank == root ? r == root || (to && !to[r]) : r != c->rank) continue;
        s = c->rank == root
                ? dck_mpi_check(mpi->MPI_Isend(data, (int)n, mpi->byte, r, tag, mpi->comm_world, &req[r]), "MPI_Isend")
                : dck_mpi_check(mpi->MPI_Irecv(data, (int)n, mpi->byte, root, tag, mpi->comm_world, &req[r]), "MPI_Irecv");
        if (!s) pending++, live[r] = true;
    }
    double end = mono_s() + seconds;
    long ns = 20000;
    while (!s && pending > 0 && mono_s() < end) {
        for (int r = 0; r < K && !s; r++) {
            int done = 0;
            if (!live[r]) continue;
            s = dck_mpi_check(mpi->MPI_Test(&req[r], &done, MPI_STATUS_IGNORE), "MPI_Test");
            if (!s && done) pending--, live[r] = false;
        }
        if (pending == 0) break;
        struct timespec ts = {0, ns};
        nanosleep(&ts, NULL);
        if (ns < 10000000) ns *= 2;
    }
    for (int r = 0; r < K; r++)
        if (live[r]) {
            mpi->MPI_Cancel(&req[r]);
            mpi->MPI_Request_free(&req[r]);
        }
    free(req);
    free(live);
    if (!s && pending > 0)
        s = c->rank == root ? dck_set_error(DCK_ERR_COMM, "mpi: %d rank%s took no word from rank %d within %.0f s",
                                            pending, pending == 1 ? "" : "s", root, seconds)
                            : dck_set_error(DCK_ERR_COMM, "mpi: rank %d: no word from rank %d within %.0f s",
                                            c->rank, root, seconds);
    return s;
#else
    (void)data;
    (void)n;
    (void)root;
    (void)tag;
    (void)seconds;
    (void)to;
    return no_mpi("dck_comm_bcast_deadline");
#endif
}

/* Communication between ranks. MPI (Open MPI) when the process was started
 * by a launcher that says so in the environment; otherwise one rank and no
 * MPI call at all (so library tests and plain runs never touch MPI, and never
 * load it: libmpi is opened with dlopen by dck_comm_init, see mpi_loader.h,
 * and every call below goes through its table). In the
 * deterministic mode only bytes (MPI_BYTE) and integer status cross ranks:
 * MPI never performs floating-point arithmetic on our behalf. */
#include "common/common.h"

#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
    double timeout; /* of dck_comm_wait; 0: DETCHECK_COLLECTIVE_TIMEOUT or the default */
    bool broken;    /* a wait failed: a rank may be missing, no collective is safe */
};

static dck_comm self_comm = {.rank = 0, .size = 1};
static dck_comm *job_comm; /* dck_comm_init's MPI communicator, for dck_comm_wait(NULL) */

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#ifdef DCK_HAVE_MPI
/* Testing (tests/cli/test_train_mpi.sh): DETCHECK_TEST_STALL=RANK:N stops
 * rank RANK before its Nth collective for good, a hung peer for the others
 * to name. */
static void test_stall(const dck_comm *c) {
    static long count;
    const char *v = getenv("DETCHECK_TEST_STALL");
    int r;
    long n;
    if (!v || sscanf(v, "%d:%ld", &r, &n) != 2 || r != c->rank || ++count != n) return;
    for (;;) sleep(60);
}
#endif

dck_comm *dck_comm_self(void) { return &self_comm; }

#ifndef DCK_HAVE_MPI
/* Only an MPI communicator reaches a collective's MPI branch; without MPI
 * there is none, so this is a library bug rather than bad input. */
static dck_status no_mpi(const char *what) {
    return dck_set_error(DCK_ERR_COMM, "mpi: %s on an MPI communicator, but built without MPI",
                         what);
}
#endif

bool dck_comm_launched(void) {
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK",
                                 "MPI_LOCALNRANKS", "SLURM_PMIXP_ABORT_AGENT_PORT"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) return true;
    return false;
}

dck_status dck_comm_init(int *argc, char ***argv, dck_comm **out) {
    *out = &self_comm;
    double t;
    DCK_TRY(dck_comm_timeout_env(&t)); /* a bad value fails up front, on every rank */
#ifdef DCK_HAVE_MPI
    if (!dck_comm_launched()) return DCK_OK;
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
    *out = job_comm = c;
#else
    (void)argc;
    (void)argv;
    if (dck_comm_launched())
        return dck_set_error(DCK_ERR_COMM, "mpi: launched by mpirun but built without MPI");
#endif
    return DCK_OK;
}

void dck_comm_finalize(dck_comm *c) {
    if (!c || c == &self_comm) return;
#ifdef DCK_HAVE_MPI
    /* broken: MPI_Finalize would wait for the missing rank; the launcher
     * ends the job when this rank exits */
    if (c->we_initialised && !c->broken) mpi->MPI_Finalize();
#endif
    if (c == job_comm) job_comm = NULL;
    free(c);
}

int dck_comm_rank(const dck_comm *c) { return c->rank; }
int dck_comm_size(const dck_comm *c) { return c->size; }
bool dck_comm_is_mpi(const dck_comm *c) { return c->mpi; }
bool dck_comm_broken(const dck_comm *c) { return c && c->broken; }
dck_comm *dck_comm_job(void) { return job_comm; }
void dck_comm_set_timeout(dck_comm *c, double seconds) { c->timeout = seconds; }

dck_status dck_comm_timeout_env(double *seconds) {
    *seconds = DCK_COMM_TIMEOUT_DEFAULT;
    const char *v = getenv("DETCHECK_COLLECTIVE_TIMEOUT");
    if (!v || !*v) return DCK_OK;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || *end || !(x >= 0.1 && x <= 604800.0))
        return dck_set_error(DCK_ERR_INVALID, "DETCHECK_COLLECTIVE_TIMEOUT=%s: seconds from 0.1 to "
                             "604800 wanted", v);
    *seconds = x;
    return DCK_OK;
}

double dck_comm_timeout(const dck_comm *c) {
    if (c && c->timeout > 0) return c->timeout;
    double t;
    return dck_comm_timeout_env(&t) ? DCK_COMM_TIMEOUT_DEFAULT : t; /* refused by dck_comm_init */
}

/* After a failed wait: the ranks that still answer meet with a deadline
 * (rank 0 collects, then tells those it heard whom it heard), so every
 * survivor can name the missing ranks; a survivor that never hears rank 0
 * names rank 0. Writes "; rank 3 did not answer ..." to out. */
static void roll_call(dck_comm *c, double seconds, char *out, size_t len) {
    out[0] = 0;
#ifdef DCK_HAVE_MPI
    enum { TAG = 7301 }; /* and 7302 for the sizes, 7303 the answer */
    int K = c->size, me = c->rank;
    bool *arrived = calloc((size_t)K, sizeof *arrived);
    int *all = calloc((size_t)K, sizeof *all);
    if (!arrived || !all) {
        free(arrived);
        free(all);
        return;
    }
    dck_status s = dck_comm_gather_deadline(c, &me, all, sizeof me, 0, TAG, seconds, arrived);
    if (!s) s = dck_comm_bcast_deadline(c, arrived, (size_t)K * sizeof *arrived, 0, TAG + 2, seconds,
                                        c->rank == 0 ? arrived : NULL);
    if (s && c->rank != 0) {
        snprintf(out, len, "; rank 0 did not answer a roll call within %.1f s (dead or hung)", seconds);
    } else if (!s) {
        size_t n = 0;
        int missing = 0;
        for (int r = 0; r < K && n + 16 < len; r++)
            if (!arrived[r])
                n += (size_t)snprintf(out + n, len - n, "%s%d", missing++ ? ", " : "; rank ", r);
        if (missing)
            snprintf(out + n, len - n, " did not answer a roll call within %.1f s (dead or hung)", seconds);
        else
            snprintf(out, len, "; every rank answered a roll call afterwards (one was late, or the "
                     "operation itself failed)");
    }
    free(arrived);
    free(all);
#else
    (void)c;
    (void)seconds;
    (void)len;
#endif
}

dck_status dck_comm_wait(dck_comm *c, const dck_comm_op *op, const char *what) {
    if (!c) c = job_comm;
    double limit = dck_comm_timeout(c), end = mono_s() + limit;
    long ns = 0; /* quiet: the first poll at once, then asleep from 20 us up to ~1 ms */
    dck_status s;
    bool late = false;
    for (;;) {
        bool done = false;
        if ((s = op->test(op->ctx, &done))) break;
        if (done) return DCK_OK;
        if (op->async_error && (s = op->async_error(op->ctx))) break;
        if (mono_s() >= end) {
            s = DCK_ERR_COMM;
            late = true;
            break;
        }
        if (!op->quiet) {
            sched_yield();
            continue;
        }
        if (ns) {
            struct timespec ts = {0, ns};
            nanosleep(&ts, NULL);
        }
        ns = ns ? (ns < 1000000 ? ns * 2 : ns) : 20000;
    }
    char msg[640], missing[256] = "";
    if (late)
        snprintf(msg, sizeof msg, "%s: not complete within %.1f s (DETCHECK_COLLECTIVE_TIMEOUT)", what,
                 limit);
    else
        snprintf(msg, sizeof msg, "%s: %s", what, dck_last_error());
    /* the operation is given up before anything else: NCCL's kernels would
     * otherwise spin on the device for good */
    if (op->abort) op->abort(op->ctx);
    if (c && c->mpi) {
        c->broken = true;
        roll_call(c, limit < 60.0 ? limit : 60.0, missing, sizeof missing);
        /* every survivor reports (rank 0 may be the missing one): say which */
        return dck_set_error(s, "rank %d: %s%s", c->rank, msg, missing);
    }
    return dck_set_error(s, "%s%s", msg, missing);
}

#ifdef DCK_HAVE_MPI
/* a collective after a failed wait would wait for the missing rank too */
static dck_status refuse_broken(const char *what) {
    return dck_set_error(DCK_ERR_COMM, "mpi: %s after a collective failed (a rank is missing)", what);
}
#endif

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

/* Every collective below is non-blocking, waited by dck_comm_wait: a dead
 * or hung rank ends the wait after the collective timeout, named, instead
 * of hanging the job. The data collectives poll back to back (MPI moves
 * their data only inside its calls), the barrier asleep, as before. */
static dck_status req_test(void *ctx, bool *done) {
    int d = 0;
    DCK_TRY(dck_mpi_check(mpi->MPI_Test((MPI_Request *)ctx, &d, MPI_STATUS_IGNORE), "MPI_Test"));
    *done = d != 0;
    return DCK_OK;
}

/* rc: the call that started request *req */
static dck_status mpi_wait_as(dck_comm *c, int rc, MPI_Request *req, const char *what, bool quiet) {
    DCK_TRY(dck_mpi_check(rc, what));
    dck_comm_op op = {req, req_test, NULL, NULL, quiet};
    return dck_comm_wait(c, &op, what);
}

static dck_status mpi_wait(dck_comm *c, int rc, MPI_Request *req, const char *what) {
    return mpi_wait_as(c, rc, req, what, false);
}

/* before each collective: refuse on a broken communicator; the test stall */
static dck_status mpi_enter(dck_comm *c, const char *what) {
    if (c->broken) return refuse_broken(what);
    test_stall(c);
    return DCK_OK;
}
#endif

dck_status dck_comm_barrier(dck_comm *c) {
#ifdef DCK_HAVE_MPI
    if (c->mpi) { /* waits here can be long: asleep */
        MPI_Request req;
        DCK_TRY(mpi_enter(c, "MPI_Ibarrier"));
        return mpi_wait_as(c, mpi->MPI_Ibarrier(mpi->comm_world, &req), &req, "MPI_Ibarrier", true);
    }
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
    if (n > INT_MAX) return dck_set_error(DCK_ERR_LIMIT, "mpi: allgather of %zu bytes per rank", n);
    DCK_TRY(mpi_enter(c, "MPI_Iallgather"));
    MPI_Request req;
    return mpi_wait(c, mpi->MPI_Iallgather(send, (int)n, mpi->byte, recv, (int)n, mpi->byte,
                                           mpi->comm_world, &req),
                    &req, "MPI_Iallgather");
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
    DCK_TRY(mpi_enter(c, "MPI_Iallgatherv"));
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
    MPI_Request req;
    int rc = mpi->MPI_Iallgatherv(sb, (int)n, mpi->byte, recv, ic, ic + c->size, mpi->byte,
                                  mpi->comm_world, &req);
    dck_status s = mpi_wait(c, rc, &req, "MPI_Iallgatherv"); /* ic is read until it completes */
    free(ic);
    return s;
#else
    (void)counts;
    return no_mpi("dck_comm_allgatherv");
#endif
}

dck_status dck_comm_allreduce_sum_f32(dck_comm *c, float *data, size_t n) {
    if (!c->mpi) return DCK_OK;
#ifdef DCK_HAVE_MPI
    if (n > INT_MAX) return dck_set_error(DCK_ERR_LIMIT, "mpi: allreduce of %zu floats", n);
    DCK_TRY(mpi_enter(c, "MPI_Iallreduce"));
    MPI_Request req;
    return mpi_wait(c, mpi->MPI_Iallreduce(MPI_IN_PLACE, data, (int)n, mpi->float_, mpi->sum,
                                           mpi->comm_world, &req),
                    &req, "MPI_Iallreduce");
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
    /* broken: this rank's own failure is the news; nobody is left to agree with */
    if (c->broken) return s ? s : refuse_broken("agreeing on a status");
    test_stall(c);
    int mine = (int)s, worst = 0;
    MPI_Request req;
    DCK_TRY(mpi_wait(c, mpi->MPI_Iallreduce(&mine, &worst, 1, mpi->int_, mpi->max, mpi->comm_world, &req),
                     &req, "MPI_Iallreduce of a status"));
    if (worst == DCK_OK) return DCK_OK;
    int cand = s != DCK_OK ? c->rank : INT_MAX, who = INT_MAX;
    DCK_TRY(mpi_wait(c, mpi->MPI_Iallreduce(&cand, &who, 1, mpi->int_, mpi->min, mpi->comm_world, &req),
                     &req, "MPI_Iallreduce of a rank"));
    struct {
        int status;
        char msg[1020];
    } m;
    memset(&m, 0, sizeof m);
    if (c->rank == who) {
        m.status = (int)s;
        snprintf(m.msg, sizeof m.msg, "%s", dck_last_error());
    }
    DCK_TRY(mpi_wait(c, mpi->MPI_Ibcast(&m, (int)sizeof m, mpi->byte, who, mpi->comm_world, &req), &req,
                     "MPI_Ibcast of an error"));
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
    DCK_TRY(mpi_enter(c, "MPI_Ibcast"));
    MPI_Request req;
    return mpi_wait(c, mpi->MPI_Ibcast(data, (int)n, mpi->byte, root, mpi->comm_world, &req), &req,
                    "MPI_Ibcast");
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

/* Point to point with MPI_Test polling (and sleeps, as the quiet barrier):
 * a blocking collective would hang on a dead rank forever. Each sender
 * first sends its size (8 bytes, tag + 1), and the root posts the receive
 * of the block only when the size is n: a larger message must never meet a
 * smaller receive, because Open MPI's single-copy path (vader, CMA) writes
 * the whole message before it reports the truncation (ranks started
 * with other settings must not overflow rank 0's buffer; detcheck-canary(1), LIMITS). */
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

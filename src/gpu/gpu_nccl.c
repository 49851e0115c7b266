/* NCCL's start-up and the wait after an NCCL collective (cuda_loader.h:
 * dck_nccl_load_all, dck_nccl_init, dck_nccl_wait), shared by the
 * distributed hash's reduction of lane sums, the trainer's collectives and
 * the replica check's gathers: dck_comm_wait's operations over a stream
 * and a communicator. */
#ifdef DCK_HAVE_CUDA

#include "common/common.h"
#include "gpu/cuda_loader.h"
#include "gpu/gpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const dck_cudart_api *rt;
    const dck_nccl_api *nc;
    ncclComm_t comm; /* NULL once aborted */
    cudaStream_t stream;
    bool enqueuing;  /* a non-blocking communicator answered ncclInProgress */
} nccl_op;

static dck_status nccl_done(void *ctx, bool *done) {
    nccl_op *x = ctx;
    *done = false;
    if (x->enqueuing) { /* until NCCL has enqueued it, the stream may look idle */
        ncclResult_t a = ncclInProgress;
        if (x->nc->ncclCommGetAsyncError(x->comm, &a) == ncclSuccess && a == ncclInProgress) return DCK_OK;
        x->enqueuing = false; /* enqueued, or an error that nccl_async reports */
    }
    cudaError_t e = x->rt->cudaStreamQuery(x->stream);
    *done = e == cudaSuccess;
    if (e == cudaSuccess || e == cudaErrorNotReady) return DCK_OK;
    return dck_gpu_error((int)e, "a NCCL collective's stream");
}

static dck_status nccl_async(void *ctx) {
    nccl_op *x = ctx;
    ncclResult_t a = ncclSuccess;
    if (x->nc->ncclCommGetAsyncError(x->comm, &a) != ncclSuccess || a == ncclSuccess || a == ncclInProgress)
        return DCK_OK;
    return dck_set_error(DCK_ERR_COMM, "NCCL reports %s (ncclCommGetAsyncError)", x->nc->ncclGetErrorString(a));
}

static void nccl_abort(void *ctx) {
    nccl_op *x = ctx;
    if (x->comm) (void)x->nc->ncclCommAbort(x->comm);
    x->comm = NULL;
}

dck_status dck_nccl_wait(struct dck_comm *c, const dck_nccl_api *nc, ncclComm_t *comm, cudaStream_t stream,
                         ncclResult_t enqueued, const char *what) {
    const dck_cudart_api *rt = dck_cudart_loaded();
    nccl_op x = {rt, nc, *comm, stream, enqueued == ncclInProgress};
    if (!rt || (enqueued != ncclSuccess && enqueued != ncclInProgress)) {
        dck_status s = rt ? dck_set_error(DCK_ERR_DEVICE, "%s: %s", what, nc->ncclGetErrorString(enqueued))
                          : DCK_ERR_NODEVICE; /* dck_cudart_loaded set the message */
        nccl_abort(&x);
        *comm = NULL;
        return s;
    }
    dck_comm_op op = {&x, nccl_done, nccl_async, nccl_abort, false};
    dck_status s = dck_comm_wait(c, &op, what);
    *comm = x.comm;
    return s;
}

/* ------------------------------------------------------------------ start-up */

/* What each rank says of its NCCL: its status, and the loader's message
 * (the places tried) cut to the record, visibly. */
typedef struct {
    int32_t status;
    char why[476];
} nccl_loaded;

dck_status dck_nccl_load_all(dck_comm *c, const dck_nccl_api **out) {
    *out = NULL;
    nccl_loaded me;
    memset(&me, 0, sizeof me);
    me.status = (int32_t)dck_nccl_load(out);
    if (me.status) {
        const char *why = dck_last_error();
        if (strlen(why) < sizeof me.why) memcpy(me.why, why, strlen(why));
        else snprintf(me.why, sizeof me.why, "%.*s ...", (int)sizeof me.why - 5, why);
    }
    int K = dck_comm_size(c);
    nccl_loaded *all = dck_xcalloc((size_t)K, sizeof *all);
    if (!all) return dck_oom("nccl");
    dck_status s = dck_comm_allgather(c, &me, all, sizeof me);
    char ranks[256] = "", reasons[4096] = "";
    size_t nr = 0, nw = 0;
    int failed = 0;
    dck_status worst = DCK_OK;
    for (int r = 0; r < K && !s; r++) {
        if (!all[r].status) continue;
        all[r].why[sizeof all[r].why - 1] = 0; /* another rank's bytes */
        worst = (dck_status)all[r].status;
        if (nr < sizeof ranks)
            nr += (size_t)snprintf(ranks + nr, sizeof ranks - nr, "%s%d", failed ? ", " : "", r);
        /* each reason once, with the first rank that gives it */
        bool said = false;
        for (int q = 0; q < r && !said; q++) said = all[q].status && !strcmp(all[q].why, all[r].why);
        if (!said && nw < sizeof reasons)
            nw += (size_t)snprintf(reasons + nw, sizeof reasons - nw, "; rank %d: %s", r, all[r].why);
        failed++;
    }
    free(all);
    if (s) {
        *out = NULL;
        return s;
    }
    if (!failed) return DCK_OK;
    /* lists too long for their buffers end visibly cut */
    if (nr >= sizeof ranks) memcpy(ranks + sizeof ranks - 5, " ...", 5);
    if (nw >= sizeof reasons) memcpy(reasons + sizeof reasons - 5, " ...", 5);
    *out = NULL;
    return dck_set_error(worst, "NCCL could not be loaded on %d of %d ranks (rank%s %s), so no rank starts it%s",
                         failed, K, failed == 1 ? "" : "s", ranks, reasons);
}

typedef struct {
    const dck_nccl_api *nc;
    ncclComm_t comm; /* NULL once aborted */
} nccl_start;

/* ready when NCCL's state of the communicator leaves ncclInProgress */
static dck_status start_done(void *ctx, bool *done) {
    nccl_start *x = ctx;
    ncclResult_t a = ncclInProgress, r = x->nc->ncclCommGetAsyncError(x->comm, &a);
    *done = r == ncclSuccess && a == ncclSuccess;
    if (r != ncclSuccess)
        return dck_set_error(DCK_ERR_COMM, "ncclCommGetAsyncError: %s", x->nc->ncclGetErrorString(r));
    if (a == ncclSuccess || a == ncclInProgress) return DCK_OK;
    return dck_set_error(DCK_ERR_COMM, "NCCL reports %s", x->nc->ncclGetErrorString(a));
}

static void start_abort(void *ctx) {
    nccl_start *x = ctx;
    if (x->comm) (void)x->nc->ncclCommAbort(x->comm);
    x->comm = NULL;
}

dck_status dck_nccl_init(dck_comm *c, const dck_nccl_api *nc, ncclComm_t *comm, int nranks,
                         const ncclUniqueId *id, int rank) {
    static const char what[] = "NCCL start-up (ncclCommInitRankConfig)";
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0; /* returns at once; ready when ncclCommGetAsyncError says so */
    nccl_start x = {nc, NULL};
    ncclResult_t r = nc->ncclCommInitRankConfig(&x.comm, nranks, *id, rank, &config);
    *comm = NULL;
    if (r != ncclSuccess && r != ncclInProgress) {
        dck_status s = dck_set_error(DCK_ERR_DEVICE, "%s: %s", what, nc->ncclGetErrorString(r));
        start_abort(&x);
        return s;
    }
    /* start-up waits for every rank: asleep between polls, as a barrier */
    dck_comm_op op = {&x, start_done, NULL, start_abort, true};
    DCK_TRY(dck_comm_wait(c, &op, what));
    *comm = x.comm;
    return DCK_OK;
}

#endif /* DCK_HAVE_CUDA */

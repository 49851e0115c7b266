/* The wait after an NCCL collective (cuda_loader.h, dck_nccl_wait), shared
 * by the distributed hash's reduction of lane sums and the replica check's
 * gathers: dck_comm_wait's operation over a stream and a communicator. */
#ifdef DCK_HAVE_CUDA

#include "common/common.h"
#include "gpu/cuda_loader.h"
#include "gpu/gpu.h"

typedef struct {
    const dck_cudart_api *rt;
    const dck_nccl_api *nc;
    ncclComm_t comm; /* NULL once aborted */
    cudaStream_t stream;
} nccl_op;

static dck_status nccl_done(void *ctx, bool *done) {
    nccl_op *x = ctx;
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
    nccl_op x = {rt, nc, *comm, stream};
    if (!rt || enqueued != ncclSuccess) {
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

#endif /* DCK_HAVE_CUDA */

/* The replica check (include/detcheck.h, "Replica check";
 * man detcheck-replica(7)): data-parallel replicas compared during a run.
 *
 * Three gathers, the later ones only when the first finds a difference:
 *   1. each rank's 16-byte root (dck_root_digest over its tensors' names and
 *      digests): the whole cost of a check when the replicas agree;
 *   2. a fixed head per rank: its status (a rank that failed to digest sent
 *      FAILED_ROOT in gather 1, so the others learn of it here rather than
 *      wait for it), its tensor list's digest (names, dtypes, shapes, in
 *      order: another list is trouble, not a mismatch), host and device;
 *   3. the per-tensor digests, n x 16 bytes per rank.
 * Every rank takes the same branch from the same gathered bytes, so no rank
 * enters a gather that another skips. The verdict (dck_replica_decide) is
 * arithmetic on the gathered table, the same on every rank.
 *
 * Transports: MPI through the job's communicator (dck_comm_allgather: the
 * collective timeout and the roll call that names a missing rank), NCCL
 * through the caller's communicator (gathers of device buffers, waited by
 * dck_nccl_wait), and, in tests/check_replica.c, ranks played by threads. */
#include "hash/hash.h"

#ifdef DCK_HAVE_MPI
#include "common/mpi_loader.h"
#endif
#ifdef DCK_HAVE_CUDA
#include "gpu/cuda_loader.h"
#endif

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Sent as the root by a rank whose own digests failed: it differs from every
 * real root but with probability 2^-128, so the others go on to gather 2. */
static const dck_digest FAILED_ROOT = {UINT64_MAX, UINT64_MAX};

typedef struct {
    int32_t status;
    uint32_t reserved;
    uint64_t ntensors;
    dck_digest list; /* names, dtypes and shapes, in the caller's order */
    char where[160]; /* "HOST cuda:0 (bus 0000:3b:00.0)" or "HOST cpu" */
    char error[512];
} replica_head;

void dck_replica_options_init(dck_replica_options *o) { memset(o, 0, sizeof *o); }

void dck_replica_result_release(dck_replica_result *r) {
    if (!r) return;
    free(r->deviant);
    free(r->tensor_name);
    for (size_t g = 0; r->groups && g < r->ngroups; g++) free(r->groups[g].ranks);
    free(r->groups);
    for (int i = 0; r->hosts && i < r->nranks; i++) free(r->hosts[i]);
    free(r->hosts);
    memset(r, 0, sizeof *r);
    r->tensor = -1;
}

/* ------------------------------------------------------------------ the verdict */

static int cmp_group(const void *a, const void *b) {
    const dck_replica_group *x = a, *y = b;
    if (x->nranks != y->nranks) return x->nranks > y->nranks ? -1 : 1;
    return (x->ranks[0] > y->ranks[0]) - (x->ranks[0] < y->ranks[0]);
}

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

dck_status dck_replica_decide(const dck_digest *roots, int size, const dck_digest *digests, size_t n,
                              dck_replica_result *out) {
    out->same = 1;
    out->tensor = -1;
    if (size < 1) return dck_set_error(DCK_ERR_INVALID, "replica check: %d ranks", size);
    for (int r = 1; r < size; r++) out->same &= dck_digest_equal(roots[r], roots[0]);
    if (out->same) return DCK_OK;
    /* groups by root: group[r] is rank r's */
    int *group = dck_xcalloc((size_t)size, sizeof *group), ngroups = 0;
    out->groups = dck_xcalloc((size_t)size, sizeof *out->groups);
    if (!group || !out->groups) {
        free(group);
        return dck_oom("replica check");
    }
    for (int r = 0; r < size; r++) {
        int g = 0;
        while (g < ngroups && !dck_digest_equal(out->groups[g].root, roots[r])) g++;
        if (g == ngroups) out->groups[ngroups++].root = roots[r];
        group[r] = g;
        out->groups[g].nranks++;
    }
    out->ngroups = (size_t)ngroups;
    int major = -1;
    for (int g = 0; g < ngroups; g++) {
        out->groups[g].ranks = dck_xmalloc(out->groups[g].nranks * sizeof(int));
        if (!out->groups[g].ranks) {
            free(group);
            return dck_oom("replica check");
        }
        out->groups[g].nranks = 0; /* counted again as the ranks go in */
    }
    for (int r = 0; r < size; r++) {
        dck_replica_group *g = &out->groups[group[r]];
        g->ranks[g->nranks++] = r;
    }
    free(group);
    /* the largest group first, then by lowest rank (as ReplicaGuard's groups) */
    dck_qsort(out->groups, out->ngroups, sizeof *out->groups, cmp_group);
    /* a strict majority, or no culprit: one against one, 2 against 2, 2/2/1
     * name nobody */
    for (int g = 0; g < ngroups; g++)
        if (2 * out->groups[g].nranks > (size_t)size) major = g;
    out->majority = major >= 0;
    if (major >= 0) {
        out->deviant = dck_xmalloc((size_t)size * sizeof *out->deviant);
        if (!out->deviant) return dck_oom("replica check");
        for (int g = 0; g < ngroups; g++)
            for (size_t k = 0; g != major && k < out->groups[g].nranks; k++)
                out->deviant[out->ndeviant++] = out->groups[g].ranks[k];
        dck_qsort(out->deviant, out->ndeviant, sizeof *out->deviant, cmp_int);
    }
    /* the first tensor, in the callers' order, not the same on every rank */
    for (size_t i = 0; i < n && out->tensor < 0; i++)
        for (int r = 1; r < size; r++)
            if (!dck_digest_equal(digests[(size_t)r * n + i], digests[i])) {
                out->tensor = (long)i;
                break;
            }
    if (out->tensor < 0)
        return dck_set_error(DCK_ERR_COMM, "replica check: the ranks' roots differ but every tensor's digest "
                             "agrees (a root was damaged on the way)");
    return DCK_OK;
}

/* ------------------------------------------------------------------ this rank's side */

static dck_status tensor_digest(const dck_replica_tensor *t, const dck_replica_options *o, dck_digest *d) {
    if (!t->name) return dck_set_error(DCK_ERR_INVALID, "a tensor without a name");
    dck_status s = t->memory == DCK_MEMORY_CUDA
                       ? dck_gpu_digest(t->dtype, t->shape, t->ndim, t->data, t->nbytes, o->stream, d)
                   : t->memory == DCK_MEMORY_HOST
                       ? dck_digest_buffer(t->dtype, t->shape, t->ndim, t->data, t->nbytes, o->threads, d)
                       : dck_set_error(DCK_ERR_INVALID, "unknown memory %d", (int)t->memory);
    if (s) return dck_set_error(s, "tensor %s: %s", t->name, dck_last_error());
    return DCK_OK;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A name given twice: the root (over names, in name order) could not tell
 * which digest is whose, so two replicas holding them swapped would agree. */
static dck_status names_unique(const char **names, size_t n) {
    const char **v = dck_xmalloc(n * sizeof *v);
    if (!v) return dck_oom("replica check");
    memcpy(v, names, n * sizeof *v);
    dck_qsort(v, n, sizeof *v, cmp_name);
    dck_status s = DCK_OK;
    for (size_t i = 1; i < n && !s; i++)
        if (!strcmp(v[i - 1], v[i])) s = dck_set_error(DCK_ERR_INVALID, "tensor %s given twice", v[i]);
    free(v);
    return s;
}

/* The digest of the tensor list: names, dtypes and shapes, in order. */
static dck_digest list_digest(const dck_replica_tensor *t, size_t n) {
    XXH3_state_t st;
    XXH3_128bits_reset(&st);
    for (size_t i = 0; i < n; i++) {
        uint64_t meta[2 + DCK_MAX_DIMS] = {(uint64_t)t[i].dtype, (uint64_t)t[i].ndim};
        for (int d = 0; d < t[i].ndim && d < DCK_MAX_DIMS; d++) meta[2 + d] = t[i].shape[d];
        XXH3_128bits_update(&st, t[i].name ? t[i].name : "", (t[i].name ? strlen(t[i].name) : 0) + 1);
        XXH3_128bits_update(&st, meta, sizeof meta);
    }
    XXH128_hash_t h = XXH3_128bits_digest(&st);
    return (dck_digest){h.high64, h.low64};
}

/* "HOST cuda:0 (bus 0000:3b:00.0)" when a tensor is on a GPU, else "HOST cpu" */
static void where_am_i(const dck_replica_tensor *t, size_t n, char *out, size_t len) {
    char host[64] = "?";
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "?");
    for (size_t i = 0; i < n; i++) {
        int dev = -1;
        char bus[32] = "?";
        if (t[i].memory != DCK_MEMORY_CUDA) continue;
        if (dck_gpu_pointer_device(t[i].data, &dev) == DCK_OK) (void)dck_gpu_pci_bus_id(dev, bus, sizeof bus);
        snprintf(out, len, "%s cuda:%d (bus %s)", host, dev, bus);
        return;
    }
    snprintf(out, len, "%s cpu", host);
}

static dck_status gather(const dck_replica_transport *tr, const void *send, void *recv, size_t n) {
    dck_status s = tr->allgather(tr->ctx, send, recv, n);
    return s ? dck_set_error(s, "replica check: %s", dck_last_error()) : DCK_OK;
}

/* Gather 2: trouble (a failed rank, another tensor list) or DCK_OK. */
static dck_status heads(const dck_replica_transport *tr, const dck_replica_tensor *t, size_t n,
                        dck_status mine, const char *my_error, replica_head *all, dck_replica_result *out) {
    size_t K = (size_t)out->nranks; /* tr->size, checked by dck_replica_run */
    replica_head h;
    memset(&h, 0, sizeof h);
    h.status = (int32_t)mine;
    h.ntensors = n;
    h.list = list_digest(t, n);
    where_am_i(t, n, h.where, sizeof h.where);
    if (mine) snprintf(h.error, sizeof h.error, "%s", my_error);
    DCK_TRY(gather(tr, &h, all, sizeof h));
    for (int r = 0; r < (int)K; r++)
        if (all[r].status)
            return dck_set_error((dck_status)all[r].status, "replica check: rank %d: %.*s", r,
                                 (int)sizeof all[r].error - 1, all[r].error);
    /* the list most ranks hold (ties: the lowest rank's); the others are named */
    int best = 0, bestn = 0;
    for (int r = 0; r < (int)K; r++) {
        int c = 0;
        for (int q = 0; q < (int)K; q++)
            c += all[q].ntensors == all[r].ntensors && dck_digest_equal(all[q].list, all[r].list);
        if (c > bestn) best = r, bestn = c;
    }
    if (bestn < (int)K) {
        char names[256] = "";
        size_t at = 0;
        int odd = 0;
        for (int r = 0; r < (int)K && at + 16 < sizeof names; r++)
            if (all[r].ntensors != all[best].ntensors || !dck_digest_equal(all[r].list, all[best].list))
                at += (size_t)snprintf(names + at, sizeof names - at, "%s%d", odd++ ? ", " : "", r), (void)0;
        return dck_set_error(DCK_ERR_MISMATCH, "replica check: rank%s %s hold%s another tensor list (names, "
                             "dtypes, shapes or order) than rank %d (%llu tensors): not replicas of one "
                             "model, nothing compared", odd == 1 ? "" : "s", names, odd == 1 ? "s" : "",
                             best, (unsigned long long)all[best].ntensors);
    }
    out->hosts = dck_xcalloc(K, sizeof *out->hosts);
    if (!out->hosts) return dck_oom("replica check");
    for (size_t r = 0; r < K; r++) {
        out->hosts[r] = dck_strndup(all[r].where, sizeof all[r].where - 1);
        if (!out->hosts[r]) return dck_oom("replica check");
    }
    return DCK_OK;
}

dck_status dck_replica_run(const dck_replica_tensor *t, size_t n, const dck_replica_options *o,
                           const dck_replica_transport *tr, dck_replica_result *out) {
    dck_replica_options defaults;
    if (!o) dck_replica_options_init(&defaults), o = &defaults;
    memset(out, 0, sizeof *out);
    out->tensor = -1;
    if (tr->size < 1 || tr->rank < 0 || tr->rank >= tr->size)
        return dck_set_error(DCK_ERR_INVALID, "replica check: rank %d of %d", tr->rank, tr->size);
    out->rank = tr->rank;
    out->nranks = tr->size;
    int K = tr->size;
    if (n && !t) return dck_set_error(DCK_ERR_INVALID, "replica check: %zu tensors and no list", n);
    /* this rank's digests and root; a failure still takes part in the
     * gathers (FAILED_ROOT), so that no rank waits for this one */
    dck_digest *dg = dck_xcalloc(n ? n : 1, sizeof *dg);
    const char **names = dck_xcalloc(n ? n : 1, sizeof *names);
    dck_status mine = dg && names ? DCK_OK : dck_oom("replica check");
    /* replicas of nothing would agree without evidence */
    if (!mine && !n) mine = dck_set_error(DCK_ERR_INVALID, "no tensors given: nothing to compare");
    for (size_t i = 0; i < n && !mine; i++) {
        mine = tensor_digest(&t[i], o, &dg[i]);
        names[i] = t[i].name;
    }
    if (!mine) mine = names_unique(names, n);
    char *my_error = mine ? dck_strdup(dck_last_error()) : NULL;
    out->root = mine ? FAILED_ROOT : dck_root_digest(names, dg, n);
    dck_digest *roots = dck_xcalloc((size_t)K, sizeof *roots);
    replica_head *all = NULL;
    dck_digest *table = NULL;
    dck_status s = roots ? gather(tr, &out->root, roots, sizeof out->root) : dck_oom("replica check");
    if (!s) {
        int same = 1;
        for (int r = 1; r < K; r++) same &= dck_digest_equal(roots[r], roots[0]);
        if (same && mine) /* every rank failed alike */
            s = dck_set_error(mine, "replica check: %s", my_error ? my_error : dck_strerror(mine));
        else if (same)
            out->same = out->compared = K > 1; /* one replica: nothing compared, no evidence */
        else {
            all = dck_xcalloc((size_t)K, sizeof *all);
            s = all ? heads(tr, t, n, mine, my_error ? my_error : "", all, out) : dck_oom("replica check");
            /* every rank holds n tensors now */
            if (!s && n > SIZE_MAX / sizeof *dg / (size_t)K)
                s = dck_set_error(DCK_ERR_LIMIT, "replica check: %zu tensors", n);
            if (!s) table = dck_xmalloc(n * (size_t)K * sizeof *table + 1);
            if (!s && !table) s = dck_oom("replica check");
            if (!s) s = gather(tr, dg, table, n * sizeof *dg);
            if (!s) s = dck_replica_decide(roots, K, table, n, out);
            out->compared = !s;
            if (!s) {
                out->tensor_name = dck_strdup(t[out->tensor].name);
                if (!out->tensor_name) s = dck_oom("replica check");
            }
        }
    }
    if (s) {
        dck_replica_result_release(out);
        out->tensor = -1;
    }
    free(table);
    free(all);
    free(roots);
    free(my_error);
    free(names);
    free(dg);
    return s;
}

/* ------------------------------------------------------------------ transports */

static dck_status mpi_allgather(void *ctx, const void *send, void *recv, size_t n) {
    return dck_comm_allgather(ctx, send, recv, n);
}

#ifdef DCK_HAVE_CUDA
typedef struct {
    const dck_cudart_api *rt;
    const dck_nccl_api *nc;
    ncclComm_t comm;
    cudaStream_t stream;
    int rank, size, device;
} nccl_gather;

/* n bytes from host memory of every rank into recv: through one device
 * buffer of size x n bytes, gathered in place */
static dck_status nccl_allgather(void *ctx, const void *send, void *recv, size_t n) {
    nccl_gather *x = ctx;
    if (!x->comm) return dck_set_error(DCK_ERR_COMM, "NCCL: the communicator was aborted by an earlier failure");
    size_t total = n * (size_t)x->size;
    dck_gpu_scratch buf = {0};
    cudaError_t e = dck_gpu_scratch_alloc(x->rt, NULL, x->device, total ? total : 1, x->stream, &buf);
    if (e != cudaSuccess) return dck_gpu_error((int)e, "device memory for a gather");
    char *dev = buf.ptr;
    e = x->rt->cudaMemcpyAsync(dev + n * (size_t)x->rank, send, n, cudaMemcpyHostToDevice, x->stream);
    dck_status s = e != cudaSuccess ? dck_gpu_error((int)e, "cudaMemcpyAsync to a gather") : DCK_OK;
    if (!s)
        s = dck_nccl_wait(dck_comm_job(), x->nc, &x->comm, x->stream,
                          x->nc->ncclAllGather(dev + n * (size_t)x->rank, dev, n, ncclUint8, x->comm, x->stream),
                          "ncclAllGather");
    if (!s) e = x->rt->cudaMemcpyAsync(recv, dev, total, cudaMemcpyDeviceToHost, x->stream);
    if (!s && e == cudaSuccess) e = x->rt->cudaStreamSynchronize(x->stream);
    if (!s && e != cudaSuccess) s = dck_gpu_error((int)e, "cudaMemcpyAsync from a gather");
    /* after an aborted collective the stream may never drain: the block is
     * left to the process rather than freed behind a hung kernel */
    if (x->comm) (void)dck_gpu_scratch_free(x->rt, &buf, x->stream);
    return s;
}

static dck_status nccl_transport(void *comm, dck_cuda_stream stream, nccl_gather *x, dck_replica_transport *tr) {
    int n = 0;
    DCK_TRY(dck_gpu_device_count(&n));
    x->rt = dck_cudart_loaded();
    DCK_TRY(dck_nccl_load(&x->nc));
    x->comm = comm;
    x->stream = stream;
    ncclResult_t r = x->nc->ncclCommCount(x->comm, &x->size);
    if (r == ncclSuccess) r = x->nc->ncclCommUserRank(x->comm, &x->rank);
    if (r == ncclSuccess) r = x->nc->ncclCommCuDevice(x->comm, &x->device);
    if (r != ncclSuccess)
        return dck_set_error(DCK_ERR_DEVICE, "replica check: the NCCL communicator: %s", x->nc->ncclGetErrorString(r));
    cudaError_t e = x->rt->cudaSetDevice(x->device);
    if (e != cudaSuccess) return dck_gpu_error((int)e, "cudaSetDevice to the NCCL communicator's device");
    *tr = (dck_replica_transport){x, x->rank, x->size, nccl_allgather};
    return DCK_OK;
}
#endif

/* The job's MPI communicator: MPI_COMM_WORLD when a launcher started the
 * process and the caller initialised MPI; else this process alone. */
static dck_status mpi_transport(dck_replica_transport *tr) {
    dck_comm *c = dck_comm_job();
#ifdef DCK_HAVE_MPI
    const dck_mpi_api *m = NULL;
    int inited = 0;
    if (!c && dck_mpi_load(&m) == DCK_OK) m->MPI_Initialized(&inited);
    dck_clear_error();
    /* dck_comm_init takes the caller's MPI (it initialises none here) and
     * says whether a launcher started the process */
    if (!c && inited) DCK_TRY(dck_comm_init(NULL, NULL, &c));
#endif
    /* a launcher without MPI initialised: refused, never one rank in silence */
    if (!c && dck_comm_launched())
        return dck_set_error(DCK_ERR_COMM, "replica check: started by an MPI launcher but MPI is not "
                             "initialised: call MPI_Init first, or pass an NCCL communicator");
    if (!c) c = dck_comm_self();
    *tr = (dck_replica_transport){c, dck_comm_rank(c), dck_comm_size(c), mpi_allgather};
    return DCK_OK;
}

dck_status dck_replica_check(const dck_replica_tensor *t, size_t n, const dck_replica_options *o,
                             dck_replica_result *out) {
    memset(out, 0, sizeof *out);
    out->tensor = -1;
    dck_replica_transport tr;
    if (o && o->nccl_comm) {
#ifdef DCK_HAVE_CUDA
        nccl_gather x = {0};
        const dck_cudart_api *rt = NULL;
        int caller_device = -1; /* the caller's current device, given back */
        if (dck_cudart_load(&rt) == DCK_OK && rt->cudaGetDevice(&caller_device) != cudaSuccess)
            caller_device = -1;
        dck_status s = nccl_transport(o->nccl_comm, o->stream, &x, &tr);
        if (!s) s = dck_replica_run(t, n, o, &tr, out);
        if (caller_device >= 0) (void)rt->cudaSetDevice(caller_device);
        return s;
#else
        return dck_set_error(DCK_ERR_NODEVICE, "replica check: an NCCL communicator, but this detcheck was "
                             "built without CUDA (make CUDA=0)");
#endif
    }
    DCK_TRY(mpi_transport(&tr));
    return dck_replica_run(t, n, o, &tr, out);
}

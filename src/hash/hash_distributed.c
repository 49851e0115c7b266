/* Checkpoint hashing split over ranks and devices.
 *
 * Assignment: the tensors, in model order, are laid end to end; rank r of K
 * takes bytes [r*T/K, (r+1)*T/K) of that stream (T = total bytes), cut at
 * any byte. Each rank reduces its share of each tensor to lane sums (CPU
 * threads, or the GPU through pinned double buffers) plus, for a tensor that
 * another rank shares, the partial segments at its fragment's edges.
 * Combination: the lane sums go to rank 0 by an integer reduction (MPI_SUM
 * on MPI_UINT64_T, or NCCL ncclSum on ncclUint64 with --device cuda): mod
 * 2^64 integer sums are exact in any order and any reduction algorithm.
 * The edge bytes go to rank 0 by a gather and are stitched in offset order
 * by dck_tensor_hasher (which also checks that the fragments tile each
 * tensor). Whole-file hashes: file i is hashed by rank i % K and summed in
 * the same integer reduction (the other ranks contribute zeros). Rank 0
 * builds the manifest exactly as dck_checkpoint_hash does. */
#include "gpu/gpu.h"
#include "hash/hash.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef DCK_HAVE_MPI /* set by the Makefile when mpicc is found */
#include <mpi.h>
#endif

#ifdef DCK_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif

void dck_distributed_range(uint64_t total, int r, int k, uint64_t *begin, uint64_t *end) {
    *begin = (uint64_t)((unsigned __int128)total * (unsigned)r / (unsigned)k);
    *end = (uint64_t)((unsigned __int128)total * (unsigned)(r + 1) / (unsigned)k);
}

int dck_distributed_gpu_of_rank(int rank, int ndevices) {
    static const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID",
                                 "PMI_LOCAL_RANK"};
    if (ndevices <= 0) return 0;
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        char *end;
        if (v && *v) {
            long l = strtol(v, &end, 10);
            if (!*end && l >= 0) return (int)(l % ndevices);
        }
    }
    return rank % ndevices;
}

/* An edge record: a fragment of a tensor that more than one rank holds. */
typedef struct {
    uint64_t tensor;
    dck_fragment_partial p;
} edge_rec;

/* ------------------------------------------------------------------ communication */

typedef struct {
    int rank, size;
    int mpi; /* MPI calls are made */
} world;


/* Every rank learns the worst status; a rank that did not fail reports that
 * another did. Keeps ranks out of collectives their peers never enter. */
static dck_status agree(const world *w, dck_status s) {
#ifdef DCK_HAVE_MPI
    if (!w->mpi) return s;
    int mine = (int)s, worst = 0;
    if (MPI_Allreduce(&mine, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD) != MPI_SUCCESS)
        return dck_set_error(DCK_ERR_COMM, "mpi: agreeing on a status failed");
    if (worst && !s)
        return dck_set_error((dck_status)worst, "another rank failed (%s)",
                             dck_strerror((dck_status)worst));
    return s;
#else
    (void)w;
    return s;
#endif
}

/* Integer sum of n uint64 to rank 0 (in place there). */
static dck_status reduce_u64(const world *w, uint64_t *v, size_t n) {
#ifdef DCK_HAVE_MPI
    if (!w->mpi) return DCK_OK;
    for (size_t done = 0; done < n;) {
        int c = n - done > (size_t)INT_MAX / 2 ? INT_MAX / 2 : (int)(n - done);
        int rc = w->rank == 0 ? MPI_Reduce(MPI_IN_PLACE, v + done, c, MPI_UINT64_T, MPI_SUM, 0,
                                           MPI_COMM_WORLD)
                              : MPI_Reduce(v + done, NULL, c, MPI_UINT64_T, MPI_SUM, 0,
                                           MPI_COMM_WORLD);
        dck_status s = dck_mpi_check(rc, "MPI_Reduce of lane sums");
        if (s) return s;
        done += (size_t)c;
    }
    return DCK_OK;
#else
    (void)w, (void)v, (void)n;
    return DCK_OK;
#endif
}

/* Gathers every rank's edge records on rank 0. */
static dck_status gather_edges(const world *w, const edge_rec *mine, size_t n, edge_rec **all,
                               size_t *nall) {
    *all = NULL;
    *nall = 0;
    if (!w->mpi) {
        if (!n) return DCK_OK;
        *all = malloc(n * sizeof **all);
        if (!*all) return dck_oom(NULL);
        memcpy(*all, mine, n * sizeof **all);
        *nall = n;
        return DCK_OK;
    }
#ifdef DCK_HAVE_MPI
    /* At most a few records per rank (a rank's range cuts at most two
     * tensors), so byte counts fit an int. */
    int cnt = (int)(n * sizeof(edge_rec));
    int *counts = NULL, *displs = NULL;
    if (w->rank == 0) {
        counts = calloc((size_t)w->size, sizeof *counts);
        displs = calloc((size_t)w->size, sizeof *displs);
        if (!counts || !displs) {
            free(counts);
            free(displs);
            return dck_oom(NULL);
        }
    }
    dck_status s = dck_mpi_check(MPI_Gather(&cnt, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD),
                             "MPI_Gather of edge counts");
    size_t total = 0;
    if (!s && w->rank == 0) {
        for (int r = 0; r < w->size; r++) {
            displs[r] = (int)total;
            total += (size_t)counts[r];
        }
        *all = malloc(total ? total : 1);
        if (!*all) s = dck_oom(NULL);
    }
    /* rank 0 cannot bail out alone: the others are in the Gatherv */
    if (!s)
        s = dck_mpi_check(MPI_Gatherv(mine, cnt, MPI_BYTE, *all, counts, displs, MPI_BYTE, 0,
                                  MPI_COMM_WORLD),
                      "MPI_Gatherv of fragment edges");
    *nall = total / sizeof(edge_rec);
    free(counts);
    free(displs);
    return s;
#else
    return dck_set_error(DCK_ERR_COMM, "built without MPI");
#endif
}

#if defined(DCK_HAVE_CUDA) && defined(DCK_HAVE_MPI)
/* NCCL wants one GPU per rank: are all ranks on distinct (host, GPU)? Ranks
 * that share a GPU combine with MPI instead (the same integer sums). */
static dck_status gpus_distinct(const world *w, int device, int *distinct) {
    char id[160];
    char host[96] = {0}, bus[32] = {0};
    gethostname(host, sizeof host - 1);
    if (cudaDeviceGetPCIBusId(bus, (int)sizeof bus, device) != cudaSuccess)
        snprintf(bus, sizeof bus, "device%d", device);
    memset(id, 0, sizeof id);
    snprintf(id, sizeof id, "%s/%s", host, bus);
    char *all = malloc(sizeof id * (size_t)w->size);
    if (!all) return dck_oom(NULL);
    dck_status s = dck_mpi_check(MPI_Allgather(id, (int)sizeof id, MPI_BYTE, all, (int)sizeof id,
                                           MPI_BYTE, MPI_COMM_WORLD),
                             "MPI_Allgather of GPU ids");
    *distinct = 1;
    for (int i = 0; i < w->size && !s; i++)
        for (int j = i + 1; j < w->size; j++)
            if (!strcmp(all + sizeof id * (size_t)i, all + sizeof id * (size_t)j)) *distinct = 0;
    free(all);
    return s;
}
#endif

/* ------------------------------------------------------------------ whole files */

static dck_status file_xxh128(const dck_file *f, dck_digest *out) {
    int fd = open(f->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return dck_set_error(DCK_ERR_IO, "%s: %s", f->path, strerror(errno));
    size_t cap = (size_t)8 << 20;
    uint8_t *buf = malloc(cap);
    XXH3_state_t *st = XXH3_createState();
    dck_status s = DCK_OK;
    if (!buf || !st) s = dck_oom(NULL);
    else XXH3_128bits_reset(st);
    uint64_t done = 0;
    while (!s && done < f->size) {
        size_t want = f->size - done < cap ? (size_t)(f->size - done) : cap;
        ssize_t got = pread(fd, buf, want, (off_t)done);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) s = dck_set_error(DCK_ERR_IO, "%s: %s", f->path, strerror(errno));
        else if (got == 0) s = dck_set_error(DCK_ERR_TRUNCATED, "%s: file shrank while hashed", f->path);
        else {
            XXH3_128bits_update(st, buf, (size_t)got);
            done += (uint64_t)got;
        }
    }
    if (!s) {
        XXH128_hash_t h = XXH3_128bits_digest(st);
        *out = (dck_digest){h.high64, h.low64};
    }
    if (st) XXH3_freeState(st);
    free(buf);
    close(fd);
    return s;
}

typedef struct {
    dck_checkpoint *ck;
    const uint32_t *files;
    uint64_t *words; /* 2 per file: high64, low64 */
} files_job;

static dck_status file_task(void *ctx, size_t i, int worker) {
    (void)worker;
    files_job *j = ctx;
    uint32_t fi = j->files[i];
    dck_digest d = {0, 0};
    DCK_TRY(file_xxh128(j->ck->files[fi], &d));
    j->words[2 * fi] = d.high64;
    j->words[2 * fi + 1] = d.low64;
    return DCK_OK;
}

static dck_status hash_my_files(dck_checkpoint *ck, const world *w, int threads, uint64_t *words) {
    uint32_t *mine = malloc(sizeof *mine * (ck->nfiles ? ck->nfiles : 1));
    if (!mine) return dck_oom(NULL);
    size_t n = 0;
    for (uint32_t fi = 0; fi < ck->nfiles; fi++)
        if ((int)(fi % (uint32_t)w->size) == w->rank) mine[n++] = fi;
    files_job j = {ck, mine, words};
    dck_status s =
        dck_parallel_for_status(threads < (int)n ? threads : (int)(n ? n : 1), n, file_task, &j);
    free(mine);
    return s;
}

/* ------------------------------------------------------------------ this rank's share */

typedef struct {
    dck_checkpoint *ck;
    size_t tensor;
} read_ctx;

static dck_status edge_copy(void *ctx, uint64_t goff, void *dst, size_t n) {
    read_ctx *c = ctx;
    return dck_checkpoint_read(c->ck, c->tensor, goff, dst, n);
}

static dck_status edge_no_sum(void *ctx, uint64_t goff, uint64_t n, uint64_t first,
                              dck_lanes *out) {
    (void)ctx, (void)goff, (void)n, (void)first;
    *out = (dck_lanes){0, 0}; /* the middle's sums travel in the reduction */
    return DCK_OK;
}

/* Cuts this rank's byte range into per-tensor middles (whole segments) and
 * edge records (for tensors not wholly inside the range). */
static dck_status plan_share(dck_checkpoint *ck, const world *w, dck_lane_range **ranges,
                             size_t *nr, edge_rec **edges, size_t *ne) {
    uint64_t total = 0;
    for (size_t i = 0; i < ck->ntensors; i++) total += ck->tensors[i].info.nbytes;
    uint64_t gb, ge;
    dck_distributed_range(total, w->rank, w->size, &gb, &ge);
    size_t capr = 0, cape = 0;
    *ranges = NULL;
    *edges = NULL;
    *nr = *ne = 0;
    uint64_t base = 0;
    for (size_t i = 0; i < ck->ntensors && base < ge; i++) {
        uint64_t n = ck->tensors[i].info.nbytes;
        uint64_t lo = gb > base ? gb : base, hi = ge < base + n ? ge : base + n;
        base += n;
        if (lo >= hi) continue;
        dck_fragment_split sp;
        dck_status s = dck_fragment_split_compute(n, lo - (base - n), hi - lo, &sp);
        if (s) return s;
        if (sp.mid_end > sp.mid_begin) {
            if ((s = dck_grow((void **)ranges, &capr, *nr + 1, sizeof **ranges))) return s;
            (*ranges)[(*nr)++] = (dck_lane_range){i, sp.mid_begin, sp.mid_end};
        }
        if (sp.length == n) continue; /* the whole tensor is ours: no stitching */
        if ((s = dck_grow((void **)edges, &cape, *ne + 1, sizeof **edges))) return s;
        edge_rec *e = &(*edges)[(*ne)++];
        memset(e, 0, sizeof *e);
        e->tensor = i;
        read_ctx rc = {ck, i};
        if ((s = dck_fragment_partial_build(&sp, edge_copy, edge_no_sum, &rc, &e->p))) return s;
    }
    return DCK_OK;
}

/* ------------------------------------------------------------------ entry */

dck_status dck_checkpoint_hash_plan(dck_checkpoint *ck, const dck_options *opt,
                                    const dck_hash_plan *plan, dck_manifest **out) {
    *out = NULL;
    if (opt) ck->opt = *opt;
    int threads = ck->opt.threads > 0 ? ck->opt.threads : dck_default_threads();
    world w = {0, 1, 0};
#ifdef DCK_HAVE_MPI
    if (plan->distributed) {
        int inited = 0;
        MPI_Initialized(&inited);
        if (!inited)
            return dck_set_error(DCK_ERR_COMM, "distributed hashing: MPI is not initialised");
        MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
        MPI_Comm_size(MPI_COMM_WORLD, &w.size);
        w.mpi = 1;
    }
#else
    if (plan->distributed)
        return dck_set_error(DCK_ERR_COMM, "distributed hashing: built without MPI");
#endif
    const int gpu = plan->device == DCK_DEVICE_CUDA;
    size_t nt = ck->ntensors, nf = ck->nfiles;
    /* words: 2 lanes per tensor, then 2 hash words per file */
    uint64_t *words = calloc(2 * (nt + nf) + 1, sizeof *words);
    dck_lane_range *ranges = NULL;
    edge_rec *edges = NULL, *all = NULL;
    size_t nr = 0, ne = 0, nall = 0;
    dck_digest *td = NULL;
    dck_gpu_job *job = NULL;
    int gpu_index = -1;
    dck_status s = words ? DCK_OK : dck_oom(NULL);
    if (!s) s = plan_share(ck, &w, &ranges, &nr, &edges, &ne);
    if (!s && gpu) {
        int ndev = 0;
        s = dck_gpu_device_count(&ndev);
        if (!s) gpu_index = dck_distributed_gpu_of_rank(w.rank, ndev);
        if (!s) s = dck_gpu_job_create(gpu_index, nt, plan->gpu_buffer_bytes, &job);
        if (!s) s = dck_gpu_job_run(job, ck, ranges, nr, threads);
    } else if (!s) {
        s = dck_cpu_lanes_run(ck, ranges, nr, threads, words);
    }
    /* Whole-file hashes on the CPU, while the GPU works through its queue. */
    if (!s && ck->opt.hash_files) s = hash_my_files(ck, &w, threads, words + 2 * nt);
    s = agree(&w, s);
#if defined(DCK_HAVE_CUDA) && defined(DCK_HAVE_MPI)
    int use_nccl = 0;
    if (!s && gpu && w.mpi && w.size > 1) s = agree(&w, gpus_distinct(&w, gpu_index, &use_nccl));
    if (!s && use_nccl) {
        /* NCCL on uint64: integer sums, exact whatever ring or tree NCCL picks. */
        ncclUniqueId id;
        ncclComm_t comm = NULL;
        ncclResult_t nr_ = ncclSuccess;
        if (w.rank == 0) nr_ = ncclGetUniqueId(&id);
        int ok = nr_ == ncclSuccess;
        s = dck_mpi_check(MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Bcast");
        if (!s && !ok) s = dck_set_error(DCK_ERR_DEVICE, "nccl: %s", ncclGetErrorString(nr_));
        if (!s) s = dck_mpi_check(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD), "MPI_Bcast");
        if (!s) {
            nr_ = ncclCommInitRank(&comm, w.size, id, w.rank);
            if (nr_ == ncclSuccess)
                nr_ = ncclReduce(dck_gpu_job_device_lanes(job), dck_gpu_job_device_lanes(job),
                                 2 * nt, ncclUint64, ncclSum, 0, comm,
                                 (cudaStream_t)dck_gpu_job_stream(job));
            if (nr_ == ncclSuccess)
                nr_ = cudaStreamSynchronize((cudaStream_t)dck_gpu_job_stream(job)) == cudaSuccess
                          ? ncclSuccess
                          : ncclUnhandledCudaError;
            if (comm) ncclCommDestroy(comm);
            if (nr_ != ncclSuccess)
                s = dck_set_error(DCK_ERR_DEVICE, "nccl reduce of lane sums: %s",
                                  ncclGetErrorString(nr_));
        }
        s = agree(&w, s);
        /* lanes now summed on rank 0's device; file words still per rank */
        if (!s && w.rank == 0) s = dck_gpu_job_download(job, words);
        else if (!s) memset(words, 0, 2 * nt * sizeof *words);
        s = agree(&w, s);
        if (!s) s = reduce_u64(&w, words + 2 * nt, 2 * nf);
    } else
#endif
    {
        if (!s && gpu) s = agree(&w, dck_gpu_job_download(job, words));
        if (!s) s = reduce_u64(&w, words, 2 * (nt + nf));
    }
    s = agree(&w, s);
    if (!s) s = gather_edges(&w, edges, ne, &all, &nall);
    s = agree(&w, s);
    if (!s && w.rank == 0) {
        td = calloc(nt ? nt : 1, sizeof *td);
        if (!td) s = dck_oom(NULL);
        /* Stitch the tensors that ranks share; the rest are final already. */
        char *shared = calloc(nt ? nt : 1, 1);
        if (!shared && !s) s = dck_oom(NULL);
        for (size_t i = 0; i < nall && !s; i++) {
            if (all[i].tensor >= nt) s = dck_set_error(DCK_ERR_COMM, "bad edge record");
            else shared[all[i].tensor] = 1;
        }
        for (size_t ti = 0; ti < nt && !s; ti++) {
            dck_tensor_entry *t = &ck->tensors[ti];
            dck_lanes total = {words[2 * ti], words[2 * ti + 1]};
            if (!shared[ti]) {
                td[ti] = dck_digest_finish(t->info.dtype, t->info.shape, t->info.ndim, total);
                continue;
            }
            dck_tensor_hasher *h;
            s = dck_tensor_hasher_create(t->info.dtype, t->info.shape, t->info.ndim, &h);
            int first = 1;
            for (size_t i = 0; i < nall && !s; i++) {
                if (all[i].tensor != ti) continue;
                dck_fragment_partial p = all[i].p;
                if (first && p.length) {
                    p.lanes = total; /* the reduced sums of every rank's middles */
                    first = 0;
                }
                s = dck_tensor_hasher_add(h, &p);
            }
            if (!s) s = dck_tensor_hasher_final(h, &td[ti]);
            if (s)
                s = dck_set_error(s, "tensor %s (%s): %s", t->info.name, t->info.source,
                                  dck_last_error());
            dck_tensor_hasher_free(h);
        }
        free(shared);
        if (!s) {
            dck_digest *fd = calloc(ck->nfiles ? ck->nfiles : 1, sizeof *fd);
            if (!fd) s = dck_oom(NULL);
            for (size_t fi = 0; fd && fi < ck->nfiles; fi++)
                fd[fi] = (dck_digest){words[2 * nt + 2 * fi], words[2 * nt + 2 * fi + 1]};
            if (!s) s = dck_ck_build_manifest(ck, td, fd, out);
            free(fd);
        }
    }
    s = agree(&w, s);
    if (s && *out) {
        dck_manifest_free(*out);
        *out = NULL;
    }
    dck_gpu_job_free(job);
    free(words);
    free(ranges);
    free(edges);
    free(all);
    free(td);
    return s;
}

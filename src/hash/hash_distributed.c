/* Checkpoint hashing split over ranks and devices.
 *
 * Assignment: the tensors, in model order, are laid end to end; rank r of K
 * takes bytes [r*T/K, (r+1)*T/K) of that stream (T = total bytes), cut at
 * any byte (on the CPU with whole-file hashes, a rank's share is smaller by
 * 3/4 of the bytes of the files it hashes: weighted_range). Each rank reduces
 * its share of each tensor to lane sums (under MPI on the CPU: the engine of
 * plain hash, dck_cpu_hash_ranges, which reads each of its files once for
 * the segments and the file's hash together; in one process: logical reads,
 * dck_cpu_lanes_run; or the GPU through pinned double buffers) plus, for a
 * tensor that another rank shares, the partial segments at its fragment's
 * edges.
 * Combination: the lane sums go to rank 0 by an integer reduction (MPI_SUM
 * on MPI_UINT64_T, or NCCL ncclSum on ncclUint64 with --device cuda): mod
 * 2^64 integer sums are exact in any order and any reduction algorithm.
 * The edge bytes go to rank 0 by a gather and are stitched in offset order
 * by dck_tensor_hasher (which also checks that the fragments tile each
 * tensor). Whole-file hashes: each file is hashed by one rank (the one
 * whose share holds most of its tensor bytes: file_owners) and summed in
 * the same integer reduction (the other ranks contribute zeros). Rank 0
 * builds the manifest exactly as dck_checkpoint_hash does. */
#include "gpu/gpu.h"
#include "gpu/gpu_choice.h"
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
#include "common/mpi_loader.h" /* libmpi, loaded by dck_comm_init */
#endif

#ifdef DCK_HAVE_CUDA
#include "gpu/cuda_loader.h" /* cudart and NCCL, loaded when first needed */
#endif

void dck_distributed_range(uint64_t total, int r, int k, uint64_t *begin, uint64_t *end) {
    *begin = (uint64_t)((unsigned __int128)total * (unsigned)r / (unsigned)k);
    *end = (uint64_t)((unsigned __int128)total * (unsigned)(r + 1) / (unsigned)k);
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
#ifdef DCK_HAVE_MPI
    const dck_mpi_api *m; /* when mpi */
#endif
} world;


/* Every rank learns the worst status; a rank that did not fail reports that
 * another did. Keeps ranks out of collectives their peers never enter. */
static dck_status agree(const world *w, dck_status s) {
#ifdef DCK_HAVE_MPI
    if (!w->mpi) return s;
    /* a wait (dck_comm_wait) found a rank missing: it would never agree */
    if (dck_comm_broken(dck_comm_job())) return s;
    int mine = (int)s, worst = 0;
    if (w->m->MPI_Allreduce(&mine, &worst, 1, w->m->int_, w->m->max, w->m->comm_world) !=
        MPI_SUCCESS)
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

/* Waits, asleep, until every rank gets here: a rank done with its share
 * sleeps until the slowest is done too, rather than spin in the blocking
 * collective that follows (Open MPI polls there, taking a core from the
 * ranks still hashing when ranks share a node). Returns s, or the barrier's
 * failure. */
static dck_status quiet_wait(const world *w, dck_status s) {
#ifdef DCK_HAVE_MPI
    if (!w->mpi || dck_comm_broken(dck_comm_job())) return s; /* broken: see agree */
    dck_status b = dck_mpi_quiet_barrier(w->m);
    return s ? s : b;
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
        const dck_mpi_api *m = w->m;
        int rc = m->MPI_Reduce(w->rank == 0 ? MPI_IN_PLACE : v + done, w->rank == 0 ? v + done : NULL,
                               c, m->uint64, m->sum, 0, m->comm_world);
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
    const dck_mpi_api *m = w->m;
    dck_status s = dck_mpi_check(m->MPI_Gather(&cnt, 1, m->int_, counts, 1, m->int_, 0, m->comm_world),
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
        s = dck_mpi_check(m->MPI_Gatherv(mine, cnt, m->byte, *all, counts, displs, m->byte, 0,
                                         m->comm_world),
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
    const dck_cudart_api *rt = dck_cudart_loaded(); /* loaded: the job ran */
    if (!rt || rt->cudaDeviceGetPCIBusId(bus, (int)sizeof bus, device) != cudaSuccess)
        snprintf(bus, sizeof bus, "device%d", device);
    memset(id, 0, sizeof id);
    snprintf(id, sizeof id, "%s/%s", host, bus);
    char *all = malloc(sizeof id * (size_t)w->size);
    if (!all) return dck_oom(NULL);
    const dck_mpi_api *m = w->m;
    dck_status s = dck_mpi_check(m->MPI_Allgather(id, (int)sizeof id, m->byte, all, (int)sizeof id,
                                                  m->byte, m->comm_world),
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

static dck_status hash_my_files(dck_checkpoint *ck, const world *w, const int *owner, int threads,
                                uint64_t *words) {
    uint32_t *mine = malloc(sizeof *mine * (ck->nfiles ? ck->nfiles : 1));
    if (!mine) return dck_oom(NULL);
    size_t n = 0;
    for (uint32_t fi = 0; fi < ck->nfiles; fi++)
        if (owner[fi] == w->rank) mine[n++] = fi;
    files_job j = {ck, mine, words};
    dck_status s =
        dck_parallel_for_status(threads < (int)n ? threads : (int)(n ? n : 1), n, file_task, &j);
    free(mine);
    return s;
}

/* The CPU engine of plain hash on this rank's ranges and files: each file
 * this rank streams is read once, for its segments and its whole-file hash
 * together. words: 2 lanes per tensor, then 2 hash words per file. */
static dck_status hash_share_cpu(dck_checkpoint *ck, const world *w, const int *owner,
                                 const dck_lane_range *ranges, size_t nr, int threads,
                                 uint64_t *words) {
    size_t nt = ck->ntensors, nf = ck->nfiles;
    unsigned char *want = calloc(nf ? nf : 1, 1);
    dck_digest *fh = calloc(nf ? nf : 1, sizeof *fh);
    dck_status s = want && fh ? DCK_OK : dck_oom(NULL);
    for (size_t fi = 0; fi < nf && !s; fi++)
        want[fi] = ck->opt.hash_files && owner[fi] == w->rank;
    if (!s) s = dck_cpu_hash_ranges(ck, ranges, nr, want, threads, words, fh);
    for (size_t fi = 0; fi < nf && !s; fi++)
        if (want[fi]) {
            words[2 * nt + 2 * fi] = fh[fi].high64;
            words[2 * nt + 2 * fi + 1] = fh[fi].low64;
        }
    free(want);
    free(fh);
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

/* ------------------------------------------------------------------ who hashes what */

typedef struct {
    uint32_t file;
    int rank;
    uint64_t bytes;
} cover_rec;

static int cmp_cover(const void *a, const void *b) {
    const cover_rec *x = a, *y = b;
    if (x->file != y->file) return x->file < y->file ? -1 : 1;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

/* The rank whose equal cut of [0, total) holds byte x. */
static int rank_of(uint64_t x, uint64_t total, int k) {
    int r = (int)((unsigned __int128)x * (unsigned)k / total);
    if (r >= k) r = k - 1;
    uint64_t b, e;
    for (;;) {
        dck_distributed_range(total, r, k, &b, &e);
        if (x < b && r > 0) r--;
        else if (x >= e && r + 1 < k) r++;
        else return r;
    }
}

/* Which rank hashes each whole file: the one whose equal cut of the tensors
 * holds most of the file's tensor bytes (it reads them anyway, so the file
 * is read once), ties to the lowest; a file without tensor bytes goes to
 * rank i % K. Every rank computes the same answer from the checkpoint. */
static dck_status file_owners(dck_checkpoint *ck, const world *w, int **out) {
    size_t nf = ck->nfiles;
    int k = w->size;
    int *owner = malloc(sizeof *owner * (nf ? nf : 1));
    if (!owner) return dck_oom(NULL);
    for (size_t fi = 0; fi < nf; fi++) owner[fi] = (int)(fi % (size_t)k);
    *out = owner;
    uint64_t total = 0;
    for (size_t i = 0; i < ck->ntensors; i++) total += ck->tensors[i].info.nbytes;
    if (k == 1 || !nf || !total) return DCK_OK;
    cover_rec *v = NULL;
    size_t n = 0, cap = 0;
    uint64_t base = 0;
    dck_status s = DCK_OK;
    for (size_t ti = 0; ti < ck->ntensors && !s; ti++) {
        const dck_tensor_entry *t = &ck->tensors[ti];
        uint64_t nb = t->info.nbytes, es = dck_dtype_size(t->info.dtype);
        base += nb;
        if (!nb) continue;
        int r0 = rank_of(base - nb, total, k), r1 = rank_of(base - 1, total, k);
        for (size_t pi = 0; pi < t->npieces && !s; pi++) {
            const dck_piece *p = &t->pieces[pi];
            uint64_t pn = es; /* the piece's share of the tensor's bytes */
            for (int d = 0; d < t->info.ndim; d++) pn *= p->shape[d];
            for (int r = r0; r <= r1 && !s; r++) {
                uint64_t b, e;
                dck_distributed_range(total, r, k, &b, &e);
                uint64_t lo = b > base - nb ? b : base - nb, hi = e < base ? e : base;
                if (lo >= hi) continue;
                if ((s = dck_grow((void **)&v, &cap, n + 1, sizeof *v))) break;
                v[n++] = (cover_rec){p->file, r,
                                     (uint64_t)((unsigned __int128)(hi - lo) * pn / nb)};
            }
        }
    }
    if (!s) {
        dck_qsort(v, n, sizeof *v, cmp_cover);
        for (size_t i = 0; i < n;) {
            uint32_t f = v[i].file;
            uint64_t best = 0;
            while (i < n && v[i].file == f) {
                int r = v[i].rank;
                uint64_t sum = 0;
                for (; i < n && v[i].file == f && v[i].rank == r; i++) sum += v[i].bytes;
                if (sum > best && f < nf) {
                    best = sum;
                    owner[f] = r;
                }
            }
        }
    }
    free(v);
    return s;
}

/* Bytes of filling up to level L: sum over ranks of max(0, L - extra[r]). */
static unsigned __int128 fill_to(unsigned __int128 level, const uint64_t *extra, int k) {
    unsigned __int128 sum = 0;
    for (int i = 0; i < k; i++)
        if (level > extra[i]) sum += level - extra[i];
    return sum;
}

/* Cuts [0, total) in rank order so that rank r's share plus extra[r] (other
 * work it has, in the same units) is as even as whole bytes allow: water
 * filling. Integer arithmetic only, so every rank computes the same cuts. */
static void weighted_range(uint64_t total, const uint64_t *extra, int k, int r, uint64_t *begin,
                           uint64_t *end) {
    *begin = *end = 0;
    if (!total) return;
    /* the lowest level that holds every byte */
    unsigned __int128 lo = 1, hi = (unsigned __int128)total;
    for (int i = 0; i < k; i++) hi += extra[i];
    while (lo < hi) {
        unsigned __int128 mid = lo + (hi - lo) / 2;
        if (fill_to(mid, extra, k) >= total) hi = mid;
        else lo = mid + 1;
    }
    /* one level lower, then the bytes left one each to the ranks below it */
    uint64_t left = (uint64_t)(total - fill_to(lo - 1, extra, k)), pos = 0;
    for (int i = 0; i <= r; i++) {
        uint64_t len = lo - 1 > extra[i] ? (uint64_t)(lo - 1 - extra[i]) : 0;
        if (lo > extra[i] && left) {
            len++;
            left--;
        }
        *begin = pos;
        pos += len;
        *end = pos;
    }
}

/* With whole-file hashes on the CPU engine, a rank hashes its files in the
 * same pass as its share of the tensors (file_owners), and reads
 * all of a file for its hash: its share is smaller by 3/4 of the bytes of its
 * files. Measured on one node (AVX-512, page cache): a byte read only for the
 * file's hash (mapping + XXH3 from memory) costs about 3/4 of a byte of
 * segments (mapping + the segment kernel). The split never changes a digest,
 * only who computes what. */
#define FILE_HASH_COST_NUM 3
#define FILE_HASH_COST_DEN 4

/* Cuts this rank's byte range into per-tensor middles (whole segments) and
 * edge records (for tensors not wholly inside the range). */
static dck_status plan_share(dck_checkpoint *ck, const world *w, const int *owner, int weigh_files,
                             dck_lane_range **ranges, size_t *nr, edge_rec **edges, size_t *ne) {
    uint64_t total = 0;
    for (size_t i = 0; i < ck->ntensors; i++) total += ck->tensors[i].info.nbytes;
    uint64_t gb, ge;
    if (weigh_files) {
        uint64_t *extra = calloc((size_t)w->size, sizeof *extra);
        if (!extra) return dck_oom(NULL);
        for (size_t fi = 0; fi < ck->nfiles; fi++)
            extra[owner[fi]] += ck->files[fi]->size / FILE_HASH_COST_DEN * FILE_HASH_COST_NUM;
        weighted_range(total, extra, w->size, w->rank, &gb, &ge);
        free(extra);
    } else {
        dck_distributed_range(total, w->rank, w->size, &gb, &ge);
    }
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

/* ------------------------------------------------------------------ progress */

/* This rank's progress (the caller's callback, from this thread) over its
 * passes: its share of the tensors (the engines report each pass's own done
 * and total), then, when hashed apart, its whole files (`after` bytes,
 * reported when done). Only installed when the caller set a callback. */
typedef struct {
    void (*cb)(void *ctx, uint64_t done, uint64_t total);
    void *ctx;
    uint64_t base, last_total, after;
} rank_progress;

static void pass_progress(void *ctx, uint64_t done, uint64_t total) {
    rank_progress *p = ctx;
    p->last_total = total;
    if (done > total) done = total;
    p->cb(p->ctx, p->base + done, p->base + total + p->after);
}

/* ------------------------------------------------------------------ entry */

dck_status dck_checkpoint_hash_plan(dck_checkpoint *ck, const dck_options *opt,
                                    const dck_hash_plan *plan, dck_manifest **out) {
    *out = NULL;
    if (opt) ck->opt = *opt;
    int threads = ck->opt.threads > 0 ? ck->opt.threads : dck_default_threads();
    world w = {0};
    w.size = 1;
#ifdef DCK_HAVE_MPI
    if (plan->distributed) {
        int inited = 0;
        /* loaded already by dck_comm_init, or by the caller's own MPI_Init
         * (dlopen then finds the libmpi the program linked) */
        DCK_TRY(dck_mpi_load(&w.m));
        w.m->MPI_Initialized(&inited);
        if (!inited)
            return dck_set_error(DCK_ERR_COMM, "distributed hashing: MPI is not initialised");
        w.m->MPI_Comm_rank(w.m->comm_world, &w.rank);
        w.m->MPI_Comm_size(w.m->comm_world, &w.size);
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
    int *owner = NULL; /* the rank that hashes each whole file */
    dck_status s = words ? DCK_OK : dck_oom(NULL);
    if (!s) s = file_owners(ck, &w, &owner);
    if (!s)
        s = plan_share(ck, &w, owner, !gpu && w.mpi && ck->opt.hash_files, &ranges, &nr, &edges,
                       &ne);
    /* progress: the bytes this rank reads, not the whole job's (cheap, and
     * what this rank's terminal can speak for) */
    rank_progress rp = {ck->opt.progress, ck->opt.progress_ctx, 0, 0, 0};
    const int files_apart = ck->opt.hash_files && (gpu || !w.mpi);
    if (rp.cb) {
        for (size_t fi = 0; files_apart && owner && fi < nf; fi++)
            if (owner[fi] == w.rank) rp.after += ck->files[fi]->size;
        ck->opt.progress = pass_progress;
        ck->opt.progress_ctx = &rp;
    }
    if (!s && gpu) {
        int ndev = 0;
        s = dck_gpu_device_count(&ndev);
        dck_gpu_choice ch; /* the rule train and canary use too */
        if (!s) s = dck_gpu_choose(w.rank, ndev, &ch);
        if (!s) gpu_index = ch.index;
        if (!s) s = dck_gpu_job_create(gpu_index, nt, plan->gpu_buffer_bytes, &job);
        if (!s) s = dck_gpu_job_run(job, ck, ranges, nr, threads);
    } else if (!s && w.mpi) {
        /* every rank: plain hash's engine on its share, its files in the same pass */
        s = hash_share_cpu(ck, &w, owner, ranges, nr, threads, words);
    } else if (!s) {
        s = dck_cpu_lanes_run(ck, ranges, nr, threads, words);
    }
    /* Whole-file hashes on the CPU, while the GPU works through its queue. */
    rp.base += rp.last_total;
    rp.last_total = 0;
    if (!s && files_apart) s = hash_my_files(ck, &w, owner, threads, words + 2 * nt);
    if (!s && rp.cb && rp.base + rp.after) rp.cb(rp.ctx, rp.base + rp.after, rp.base + rp.after);
    ck->opt.progress = rp.cb;
    ck->opt.progress_ctx = rp.ctx;
    /* each rank: no lane sums of zeros read where a file lost mapped pages */
    if (!s) s = dck_files_check(ck->files, ck->nfiles);
    s = quiet_wait(&w, s);
    s = agree(&w, s);
#if defined(DCK_HAVE_CUDA) && defined(DCK_HAVE_MPI)
    int use_nccl = 0;
    if (!s && gpu && w.mpi && w.size > 1) s = agree(&w, gpus_distinct(&w, gpu_index, &use_nccl));
    if (!s && use_nccl) {
        /* NCCL on uint64: integer sums, exact whatever ring or tree NCCL picks. */
        ncclUniqueId id;
        ncclComm_t comm = NULL;
        ncclResult_t nr_ = ncclSuccess;
        const dck_nccl_api *nc = NULL;
        /* every rank loads NCCL; a rank without it fails them all, named
         * (the job's communicator: the caller's own MPI has none, then a
         * plain agreement), before any rank waits in NCCL's start-up */
        dck_comm *jc = dck_comm_job();
        s = agree(&w, jc ? dck_nccl_load_all(jc, &nc) : dck_nccl_load(&nc));
        if (!s && w.rank == 0) nr_ = nc->ncclGetUniqueId(&id);
        int ok = nr_ == ncclSuccess;
        if (!s)
            s = dck_mpi_check(w.m->MPI_Bcast(&ok, 1, w.m->int_, 0, w.m->comm_world), "MPI_Bcast");
        if (!s && !ok) s = dck_set_error(DCK_ERR_DEVICE, "nccl: %s", nc->ncclGetErrorString(nr_));
        if (!s)
            s = dck_mpi_check(
                w.m->MPI_Bcast(&id, sizeof id, w.m->byte, 0, w.m->comm_world), "MPI_Bcast");
        if (!s) {
            /* start-up and reduce as the trainer's collectives: the
             * timeout, NCCL's asynchronous errors, ncclCommAbort, the
             * missing rank named */
            s = dck_nccl_init(NULL, nc, &comm, w.size, &id, w.rank);
            cudaStream_t st = (cudaStream_t)dck_gpu_job_stream(job);
            if (!s)
                s = dck_nccl_wait(NULL, nc, &comm, st,
                                  nc->ncclReduce(dck_gpu_job_device_lanes(job), dck_gpu_job_device_lanes(job),
                                                 2 * nt, ncclUint64, ncclSum, 0, comm, st),
                                  "nccl reduce of lane sums");
            if (comm) nc->ncclCommDestroy(comm);
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
    s = quiet_wait(&w, s); /* the others wait while rank 0 builds the manifest */
    s = agree(&w, s);
    if (s && *out) {
        dck_manifest_free(*out);
        *out = NULL;
    }
    dck_gpu_job_free(job);
    free(owner);
    free(words);
    free(ranges);
    free(edges);
    free(all);
    free(td);
    return s;
}

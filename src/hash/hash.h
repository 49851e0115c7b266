/* hash/: the hashing engines. The CPU engine (hash_cpu.c: dck_checkpoint_hash,
 * dck_hash_paths) and hashing split over devices and ranks (hash_distributed.c):
 * `detcheck hash --device cuda` and `mpirun -np K detcheck hash
 * --distributed`. The manifest is the one dck_checkpoint_hash builds. */
#ifndef DCK_HASH_H
#define DCK_HASH_H

#include "core/core.h"
#include "gpu/gpu.h" /* dck_lane_range */

typedef struct {
    dck_device device; /* DCK_DEVICE_CPU or DCK_DEVICE_CUDA (resolve auto first) */
    /* 1: split the work over the ranks of MPI_COMM_WORLD (MPI initialised by
     * the caller, e.g. dck_comm_init); every rank calls with the same
     * checkpoint paths and options. 0: this process does everything. */
    int distributed;
    /* Bytes per pinned staging buffer for --device cuda (0: 64 MiB). */
    size_t gpu_buffer_bytes;
} dck_hash_plan;

/* Rank 0 (or the only process) gets the manifest; other ranks get NULL.
 * Every rank returns the same status (a failure anywhere fails all, and the
 * failing rank's message names the file). */
dck_status dck_checkpoint_hash_plan(dck_checkpoint *ck, const dck_options *opt,
                                    const dck_hash_plan *plan, dck_manifest **out);

/* The CPU engine of dck_checkpoint_hash on a share of the work: adds the
 * lane sums of each range (whole segments) to lanes[2*tensor] and
 * lanes[2*tensor+1], and, for every file i with want_file[i] set (want_file
 * may be NULL), writes its whole-file xxh128 to file_hashes[i]. Files are
 * streamed once, in cache-sized blocks; tensors not stored whole and in
 * order in one piece are read through dck_cpu_lanes_run. */
dck_status dck_cpu_hash_ranges(dck_checkpoint *ck, const dck_lane_range *r, size_t nr,
                               const unsigned char *want_file, int threads, uint64_t *lanes,
                               dck_digest *file_hashes);

/* The byte range [*begin, *end) of the concatenation of all tensors (model
 * order) that rank r of k hashes: k equal cuts, at any byte. */
void dck_distributed_range(uint64_t total, int r, int k, uint64_t *begin, uint64_t *end);

/* ------------------------------------------------------------------ replica.c
 * dck_replica_check (include/detcheck.h, "Replica check") over a transport:
 * MPI (dck_comm_allgather), NCCL (the caller's communicator) or, in tests,
 * ranks played by threads. allgather puts n bytes of every rank into recv,
 * in rank order, and waits at most the collective timeout. */
typedef struct {
    void *ctx;
    int rank, size;
    dck_status (*allgather)(void *ctx, const void *send, void *recv, size_t n);
} dck_replica_transport;

dck_status dck_replica_run(const dck_replica_tensor *t, size_t n, const dck_replica_options *o,
                           const dck_replica_transport *tr, dck_replica_result *out);

/* dck_replica_decide, the verdict: detcheck_static.h. */

#endif

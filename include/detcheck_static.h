/* detcheck: the unstable part of the API, for static linking.
 *
 * UNSTABLE. What this header declares may change or go away in any release,
 * minor and patch releases included, without a change of SONAME: it exposes
 * how the digest is computed (lane sums, fragment partials, incremental
 * hashing) and helpers the detcheck tools share (the safetensors writer,
 * atomic file output). Include it only from code that links libdetcheck.a,
 * or that is built against the exact version of libdetcheck.so it runs
 * with, in the manner of ZSTD_STATIC_LINKING_ONLY. Its functions are
 * exported (DCK_API) so that such code can also use the shared library.
 * The stable API is detcheck.h, which this header includes.
 */
#ifndef DETCHECK_STATIC_H
#define DETCHECK_STATIC_H

#include "detcheck.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ lane sums
 * The digest of man/detcheck-digest.7 sums, as 64-bit integers, one 128-bit
 * hash per 128-byte segment; these are the pieces of that computation. */

/* Partial lane sums over some set of whole segments (mod 2^64). Partial sums
 * of disjoint segment sets add up in any order to the same bits. */
typedef struct {
    uint64_t lo;
    uint64_t hi;
} dck_lanes;

static inline void dck_lanes_add(dck_lanes *acc, dck_lanes x) {
    acc->lo += x.lo;
    acc->hi += x.hi;
}

/* Sum of h_j over the segments of data, which starts at the global segment
 * boundary first_segment*128. len may end inside a segment only when that is
 * the tensor's last (short) segment. */
DCK_API dck_lanes dck_segments_sum(const void *data, size_t len, uint64_t first_segment);

/* The record R and the final digest from the total lane sums. */
DCK_API dck_digest dck_digest_finish(dck_dtype t, const uint64_t *shape, int ndim,
                                     dck_lanes total);

/* ------------------------------------------------------------------ fragments
 * A fragment is a run of global bytes [offset, offset+length) of one logical
 * tensor of tensor_bytes bytes. Its partial form holds the lane sums of the
 * segments wholly inside it and the bytes of the (at most two) segments it
 * only partly covers; partials from any split, computed anywhere (threads,
 * GPUs, ranks), combine into the tensor's digest. It is a fixed-size plain
 * struct so it can be sent over MPI as bytes. */
typedef struct {
    uint64_t offset;     /* global byte offset of the fragment */
    uint64_t length;     /* bytes in the fragment */
    dck_lanes lanes;     /* sums over whole segments inside */
    uint32_t head_len;   /* bytes [offset, offset+head_len) of a partial segment */
    uint32_t tail_len;   /* bytes [offset+length-tail_len, offset+length) */
    uint8_t head[DCK_SEGMENT];
    uint8_t tail[DCK_SEGMENT];
} dck_fragment_partial;

DCK_API dck_status dck_fragment_partial_compute(uint64_t tensor_bytes, uint64_t offset,
                                                const void *data, size_t length,
                                                dck_fragment_partial *out);

/* Accumulates fragments of one tensor in any order; final checks that they
 * cover every byte exactly once (DCK_ERR_LAYOUT otherwise). Thread-safe. */
typedef struct dck_tensor_hasher dck_tensor_hasher;
DCK_API dck_status dck_tensor_hasher_create(dck_dtype t, const uint64_t *shape, int ndim,
                                            dck_tensor_hasher **out);
/* Raw bytes of a fragment. */
DCK_API dck_status dck_tensor_hasher_update(dck_tensor_hasher *h, uint64_t offset,
                                            const void *data, size_t length);
/* A fragment already reduced elsewhere (CPU thread, GPU, other rank). */
DCK_API dck_status dck_tensor_hasher_add(dck_tensor_hasher *h, const dck_fragment_partial *p);
DCK_API dck_status dck_tensor_hasher_final(dck_tensor_hasher *h, dck_digest *out);
DCK_API void dck_tensor_hasher_free(dck_tensor_hasher *h);

/* ------------------------------------------------------------------ GPU lane sums
 * The kernels compute the same segment lane sums as the CPU (integer adds,
 * so any grid and any order give the same bits): partials from the GPU
 * combine with partials from the CPU and other ranks (dck_lanes_add,
 * dck_tensor_hasher_add). Device pointers, streams and DCK_ERR_NODEVICE as
 * for dck_gpu_digest (detcheck.h). */

/* Lane sums of the segments of a device buffer that starts at the global
 * segment boundary first_segment*128 (as dck_segments_sum). */
DCK_API dck_status dck_gpu_segments_sum(const void *dev_data, size_t len, uint64_t first_segment,
                                        dck_cuda_stream stream, dck_lanes *out);

/* The same, asynchronous: adds the sums to dev_lanes, two uint64 (lo, hi)
 * in device memory, without waiting. Many tensors can be summed into one
 * array (or into an array of lanes) and read back, or reduced with NCCL on
 * uint64, once. */
DCK_API dck_status dck_gpu_segments_sum_async(const void *dev_data, size_t len,
                                              uint64_t first_segment, uint64_t *dev_lanes,
                                              dck_cuda_stream stream);

/* A fragment [offset, offset+length) of a tensor of tensor_bytes bytes whose
 * bytes are at dev_data: the same partial as dck_fragment_partial_compute
 * (offset need not be segment-aligned). */
DCK_API dck_status dck_gpu_fragment_partial(uint64_t tensor_bytes, uint64_t offset,
                                            const void *dev_data, size_t length,
                                            dck_cuda_stream stream, dck_fragment_partial *out);

/* ------------------------------------------------------------------ safetensors writer
 * Used by the trainer, tests and the demo. Written to a temporary name,
 * fsynced, renamed. With zstd_level > 0 the file is zstd-compressed. */

typedef struct {
    const char *name;
    dck_dtype dtype;
    int ndim;
    uint64_t shape[DCK_MAX_DIMS];   /* stored (slice) shape */
    const void *data;               /* row-major little-endian */
    /* detcheck sharded layout: when global_ndim > 0 the stored tensor is the
     * slice [offset, offset+shape) of a global tensor of global_shape. */
    int global_ndim;
    uint64_t global_shape[DCK_MAX_DIMS];
    uint64_t offset[DCK_MAX_DIMS];
} dck_st_tensor;

typedef struct {
    const char *key;
    const char *value;
} dck_kv;

DCK_API dck_status dck_safetensors_write(const char *path, const dck_st_tensor *tensors, size_t n,
                                         const dck_kv *meta, size_t nmeta, int zstd_level);

/* ------------------------------------------------------------------ files */

/* Writes data to path via a temporary name in the same directory, fsync,
 * rename, fsync of the directory. */
DCK_API dck_status dck_write_file_atomic(const char *path, const void *data, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* DETCHECK_STATIC_H */

/* detcheck: bit-for-bit reproducibility checks for training runs.
 *
 * The stable public API. Every symbol is prefixed dck_. Handles are opaque,
 * created by *_create / *_open and released by *_free (which accept NULL).
 * Functions return dck_status; on failure dck_last_error() holds a message
 * that names the file and the problem. The library never prints or exits.
 * Memory the library returns to the caller is released with dck_free.
 *
 * Only the functions declared here and in detcheck_static.h (marked DCK_API)
 * are exported from libdetcheck.so. detcheck_static.h holds the building
 * blocks (lane sums, fragments, incremental hashing, the safetensors writer)
 * whose interface may still change from one release to the next.
 */
#ifndef DETCHECK_H
#define DETCHECK_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the exported functions. The library is built with
 * -fvisibility=hidden, so nothing else leaves libdetcheck.so. Define DCK_API
 * before including this header to decorate them differently. */
#ifndef DCK_API
#if defined(__GNUC__) && __GNUC__ >= 4
#define DCK_API __attribute__((visibility("default")))
#else
#define DCK_API
#endif
#endif

/* The shared library's SONAME is libdetcheck.so.DCK_VERSION_MAJOR. */
#define DCK_VERSION_MAJOR 0
#define DCK_VERSION_MINOR 1
#define DCK_VERSION_PATCH 0
#define DCK_VERSION_STRING "0.1.0"
/* MAJOR*10000 + MINOR*100 + PATCH: 0.1.0 is 100. */
#define DCK_VERSION_NUMBER \
    (DCK_VERSION_MAJOR * 10000 + DCK_VERSION_MINOR * 100 + DCK_VERSION_PATCH)

/* ------------------------------------------------------------------ status */

typedef enum {
    DCK_OK = 0,
    DCK_ERR_INVALID,     /* invalid argument or usage */
    DCK_ERR_IO,          /* a file could not be opened, read or written */
    DCK_ERR_TRUNCATED,   /* input ends early */
    DCK_ERR_FORMAT,      /* input is malformed */
    DCK_ERR_UNSUPPORTED, /* well-formed input of a kind not supported */
    DCK_ERR_LIMIT,       /* input exceeds a safety limit */
    DCK_ERR_LAYOUT,      /* shards overlap, leave gaps or disagree */
    DCK_ERR_NOMEM,
    DCK_ERR_NODEVICE,    /* no GPU, or built without CUDA */
    DCK_ERR_DEVICE,      /* a CUDA or NCCL call failed */
    DCK_ERR_COMM,        /* an MPI call failed */
    DCK_ERR_MISMATCH     /* inputs disagree (e.g. config of a resumed run) */
} dck_status;

DCK_API const char *dck_strerror(dck_status s);
/* The detailed message of the last failure on this thread ("" if none). */
DCK_API const char *dck_last_error(void);
/* Sets the thread's last-error message and returns s (for library code and
 * extensions that report through the same channel). */
DCK_API dck_status dck_set_error(dck_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
DCK_API void dck_clear_error(void);
/* DCK_VERSION_STRING and DCK_VERSION_NUMBER of the library in use (which
 * may be newer than the header a program was compiled with). */
DCK_API const char *dck_version(void);
DCK_API unsigned dck_version_number(void);

/* Releases memory the library returned to the caller (such as the string of
 * dck_layer_of_name). NULL is a no-op. */
DCK_API void dck_free(void *p);

/* ------------------------------------------------------------------ dtypes */

typedef enum {
    DCK_BOOL = 0,
    DCK_U8,
    DCK_I8,
    DCK_I16,
    DCK_U16,
    DCK_F16,
    DCK_BF16,
    DCK_I32,
    DCK_U32,
    DCK_F32,
    DCK_F64,
    DCK_I64,
    DCK_U64,
    DCK_F8_E4M3,
    DCK_F8_E5M2,
    DCK_C64,  /* complex64: real then imaginary part, each an F32 */
    DCK_C128, /* complex128: each part an F64 */
    DCK_DTYPE_COUNT
} dck_dtype;

/* safetensors name: "BF16", "F32", ... */
DCK_API const char *dck_dtype_name(dck_dtype t);
/* DCK_ERR_FORMAT for unknown names */
DCK_API dck_status dck_dtype_from_name(const char *name, dck_dtype *out);
DCK_API size_t dck_dtype_size(dck_dtype t);
DCK_API int dck_dtype_is_float(dck_dtype t);

#define DCK_MAX_DIMS 16

/* Element count of a shape; DCK_ERR_LIMIT when the product (times elem
 * size) overflows 64 bits. */
DCK_API dck_status dck_shape_bytes(dck_dtype t, const uint64_t *shape, int ndim, uint64_t *nbytes);

/* ------------------------------------------------------------------ digest v1
 * See man/detcheck-digest.7 (frozen). */

#define DCK_SEGMENT 128u

typedef struct {
    uint64_t high64; /* printed first */
    uint64_t low64;
} dck_digest;

/* Digest of a whole tensor held contiguously in memory (row-major,
 * little-endian). threads <= 0 picks the default. */
DCK_API dck_status dck_digest_buffer(dck_dtype t, const uint64_t *shape, int ndim, const void *data,
                                     size_t len, int threads, dck_digest *out);

/* 32 lowercase hex digits + NUL, high64 then low64 (xxhsum -H2 order). */
DCK_API void dck_digest_to_hex(dck_digest d, char out[33]);
DCK_API dck_status dck_digest_from_hex(const char *hex, dck_digest *out);
DCK_API int dck_digest_equal(dck_digest a, dck_digest b);

/* XXH3-128 of a whole buffer, seed 0 (the manifest's file hash). */
DCK_API dck_digest dck_xxh128(const void *data, size_t len);

/* Root digest over named digests (sorted bytewise inside; input order free). */
DCK_API dck_digest dck_root_digest(const char *const *names, const dck_digest *digests, size_t n);

/* ------------------------------------------------------------------ names */

typedef enum {
    DCK_GROUP_WEIGHTS = 0,
    DCK_GROUP_OPTIMIZER,
    DCK_GROUP_RNG,
    DCK_GROUP_OTHER,
    DCK_GROUP_COUNT
} dck_group;

DCK_API const char *dck_group_name(dck_group g);
DCK_API dck_status dck_group_from_name(const char *name, dck_group *out);
/* The documented name rules (man detcheck-hash(1), GROUPS). */
DCK_API dck_group dck_group_of_name(const char *tensor_name);
/* Model order: strcmp except that runs of digits compare as numbers
 * ("layers.2" < "layers.10"). */
DCK_API int dck_name_compare(const char *a, const char *b);

/* ------------------------------------------------------------------ manifest */

typedef struct dck_manifest dck_manifest;

typedef struct {
    const char *name;
    dck_group group;
    dck_dtype dtype;
    int ndim;
    uint64_t shape[DCK_MAX_DIMS];
    dck_digest digest;
} dck_manifest_tensor;

typedef struct {
    const char *path; /* relative to the hashed directory; never absolute, never ".." */
    uint64_t bytes;
    dck_digest xxh128;
} dck_manifest_file;

/* A non-tensor leaf that matters for resume (iteration, loss scale...). */
typedef struct {
    const char *name;
    const char *value; /* canonical text */
} dck_manifest_value;

DCK_API dck_status dck_manifest_create(dck_manifest **out);
DCK_API void dck_manifest_free(dck_manifest *m);
DCK_API dck_status dck_manifest_add_tensor(dck_manifest *m, const dck_manifest_tensor *t);
DCK_API dck_status dck_manifest_add_file(dck_manifest *m, const dck_manifest_file *f);
DCK_API dck_status dck_manifest_add_value(dck_manifest *m, const char *name, const char *value);
/* Free-form metadata (tool, created, source); kept in order of setting. */
DCK_API dck_status dck_manifest_set_meta(dck_manifest *m, const char *key, const char *value);
DCK_API const char *dck_manifest_get_meta(const dck_manifest *m, const char *key);

DCK_API size_t dck_manifest_tensor_count(const dck_manifest *m);
DCK_API const dck_manifest_tensor *dck_manifest_tensor_at(const dck_manifest *m, size_t i);
DCK_API const dck_manifest_tensor *dck_manifest_find_tensor(const dck_manifest *m,
                                                             const char *name);
DCK_API size_t dck_manifest_file_count(const dck_manifest *m);
DCK_API const dck_manifest_file *dck_manifest_file_at(const dck_manifest *m, size_t i);
DCK_API size_t dck_manifest_value_count(const dck_manifest *m);
DCK_API const dck_manifest_value *dck_manifest_value_at(const dck_manifest *m, size_t i);

/* Sorts tensors (model order), files and values (by name). DCK_ERR_FORMAT on
 * duplicate tensor names. Computes the root digest. */
DCK_API dck_status dck_manifest_finalize(dck_manifest *m);
DCK_API dck_digest dck_manifest_root(const dck_manifest *m);

typedef enum { DCK_FORMAT_YAML = 0, DCK_FORMAT_JSON = 1 } dck_format;

DCK_API dck_status dck_manifest_write(const dck_manifest *m, dck_format fmt, FILE *out);
/* Written to PATH.tmp.XXXX, fsynced, renamed. */
DCK_API dck_status dck_manifest_save(const dck_manifest *m, dck_format fmt, const char *path);
/* YAML or JSON (detected). Checks version, hex, paths; recomputes and checks
 * the root digest. */
DCK_API dck_status dck_manifest_load(const char *path, dck_manifest **out);
DCK_API dck_status dck_manifest_parse(const char *text, size_t len, const char *label,
                                      dck_manifest **out);
/* 1 when path is a regular file that is taken as a manifest before the
 * checkpoint readers: text in its first bytes, and not an index file
 * (*.index.json). The one rule verify and diff share. */
DCK_API int dck_manifest_sniff(const char *path);

/* ------------------------------------------------------------------ checkpoints */

typedef struct dck_checkpoint dck_checkpoint;

typedef struct {
    const char *name;
    dck_dtype dtype;
    int ndim;
    uint64_t shape[DCK_MAX_DIMS]; /* global (logical) shape */
    dck_group group;
    uint64_t nbytes;
    const char *source; /* file it came from (first shard) */
} dck_tensor_info;

typedef struct {
    int threads;           /* <= 0: default (online CPUs) */
    long iteration;        /* Megatron: -1 = latest */
    int hash_files;        /* 1: also whole-file xxh128 (default 1) */
    /* Progress, called from the calling thread: done and total bytes. */
    void (*progress)(void *ctx, uint64_t done, uint64_t total);
    void *progress_ctx;
    /* Legacy Megatron-LM trees (mp_rank_XX[_YYY] directories), see
     * man detcheck-formats(7): 0 (default) names every tensor by its rank
     * directory; 1 merges the ranks' model weights into the tensors of the
     * unsplit model (split tensors concatenated, replicated tensors checked
     * identical and kept once, pipeline-local layer numbers made global). */
    int megatron_merge;
    /* Tensor-parallel split rules "GLOB=DIM" (DIM a dimension number, or
     * "none" for replicated), tried in order before the built-in ones; the
     * first whose fnmatch(3) GLOB matches the merged name wins. Only with
     * megatron_merge. Not copied: the strings must outlive the checkpoint. */
    const char *const *tp_split_rules;
    size_t ntp_split_rules;
    /* Notes for the user (a file of a directory that is skipped as not a
     * checkpoint file), called from the calling thread; NULL: none. */
    void (*notice)(void *ctx, const char *msg);
    void *notice_ctx;
} dck_options;

DCK_API void dck_options_init(dck_options *o);

/* Opens files or directories of any supported format (detected by content):
 * safetensors (+ HF index, + detcheck sharded layout), PyTorch .pt, DCP,
 * Megatron, NumPy, each optionally zstd-compressed. Several paths are merged
 * as shards of one checkpoint. */
DCK_API dck_status dck_checkpoint_open(const char *const *paths, size_t npaths,
                                       const dck_options *opt, dck_checkpoint **out);
DCK_API void dck_checkpoint_free(dck_checkpoint *ck);
DCK_API size_t dck_checkpoint_tensor_count(const dck_checkpoint *ck);
/* Tensors in model order. */
DCK_API const dck_tensor_info *dck_checkpoint_tensor(const dck_checkpoint *ck, size_t i);
/* Index by name, or -1. */
DCK_API long dck_checkpoint_find(const dck_checkpoint *ck, const char *name);
/* Logical row-major little-endian bytes [offset, offset+len) of tensor i.
 * Random access; zstd inputs are decompressed to a temporary file once. */
DCK_API dck_status dck_checkpoint_read(dck_checkpoint *ck, size_t i, uint64_t offset, void *buf,
                                       size_t len);
DCK_API size_t dck_checkpoint_value_count(const dck_checkpoint *ck);
DCK_API const dck_manifest_value *dck_checkpoint_value(const dck_checkpoint *ck, size_t i);

/* Digests every tensor (multithreaded; identical for every thread count)
 * and, with hash_files, every file; builds a finalized manifest. */
DCK_API dck_status dck_checkpoint_hash(dck_checkpoint *ck, const dck_options *opt,
                                       dck_manifest **out);

/* Convenience: open + hash. */
DCK_API dck_status dck_hash_paths(const char *const *paths, size_t npaths, const dck_options *opt,
                                  dck_manifest **out);

/* ------------------------------------------------------------------ verify */

typedef enum {
    DCK_CMP_EQUAL = 0,
    DCK_CMP_DIGEST,      /* same dtype and shape, different bits */
    DCK_CMP_DTYPE,
    DCK_CMP_SHAPE,
    DCK_CMP_MISSING,     /* in golden, not in actual */
    DCK_CMP_EXTRA,       /* in actual, not in golden */
    DCK_CMP_FILE,        /* whole-file hash or size differs (with files) */
    DCK_CMP_VALUE        /* a recorded value differs or is missing/extra */
} dck_cmp_kind;

typedef struct {
    const char *name; /* tensor name, file path or value name */
    dck_cmp_kind kind;
    const dck_manifest_tensor *golden; /* NULL when absent (or for files/values) */
    const dck_manifest_tensor *actual;
    /* DCK_CMP_VALUE: the two values (NULL when absent on that side). */
    const dck_manifest_value *golden_value, *actual_value;
    /* DCK_CMP_FILE: the two file records (NULL when absent on that side). */
    const dck_manifest_file *golden_file, *actual_file;
} dck_cmp_entry;

typedef struct {
    size_t n;            /* entries that differ, in model order */
    dck_cmp_entry *entries;
    size_t tensors_compared;
    size_t tensors_equal;
} dck_cmp_result;

/* Compares by tensor name; with compare_files also whole-file hashes; values
 * always. Result entries point into golden/actual, which must outlive it. */
DCK_API dck_status dck_manifest_compare(const dck_manifest *golden, const dck_manifest *actual,
                                        int compare_files, dck_cmp_result *out);
DCK_API void dck_cmp_result_release(dck_cmp_result *r);
DCK_API const char *dck_cmp_kind_name(dck_cmp_kind k);

/* Layout state (detcheck-formats(7), "Layout state"): what describes or
 * belongs to one rank of a parallel layout, by name (a table: the
 * tensor/pipeline/data-parallel sizes of Megatron's args, Megatron-Core's
 * per-rank ShardedObjects such as rng_state/shard_O_G, rank 0's own
 * optimizer.param_state.N). It cannot be equal across a change of layout.
 * The layouts are taken from what is stored: when a per-rank object's grid
 * G is on one side only (or a layout value the reader checks against its
 * files differs), the entries of r that are layout state move to *aside
 * (n, entries; release it as r) and *why names that difference ("rng_state:
 * grid 1.1 only in the golden"). When only the layout values as the writer
 * claims them differ (args.tensor_model_parallel_size: 1 vs 2 over the same
 * stored grids), those values move (and per-rank state that has no grid),
 * per-rank state with a grid stays and is compared rank by rank. Same
 * layouts: why is "" and per-rank state stays. Writer bookkeeping that one
 * version records and another does not (the table's writer rows) moves to
 * *aside whenever it is on one side only. Whatever moves to *aside was not
 * compared: a verdict is OK only if *aside is empty or the caller accepts it
 * explicitly (--accept-layout-state). */
DCK_API dck_status dck_cmp_set_aside_layout_state(const dck_manifest *golden, const dck_manifest *actual,
                                                  dck_cmp_result *r, dck_cmp_result *aside, char *why,
                                                  size_t why_len);
/* 1 when name is layout state (the table above), else 0. */
DCK_API int dck_is_layout_state(const char *name);

/* ------------------------------------------------------------------ diff
 * See man detcheck-diff(1). Two checkpoints are compared tensor by tensor (as logical tensors, by
 * name): bytes first (equal bytes, equal digests: reported equal with no
 * element work), then, for tensors whose bytes differ, element by element in
 * fixed 1 MiB chunks reduced in chunk order, so every number is identical
 * for every thread count. When either side is a manifest only digests are
 * compared. */

typedef enum {
    DCK_DIFF_EQUAL = 0,        /* same dtype, shape and bits */
    DCK_DIFF_WITHIN_TOLERANCE, /* bits differ; every difference within the tolerances */
    DCK_DIFF_DIFFER,           /* bits differ (beyond the tolerances, when given) */
    DCK_DIFF_MISSING_IN_A,
    DCK_DIFF_MISSING_IN_B,
    DCK_DIFF_DTYPE_MISMATCH,
    DCK_DIFF_SHAPE_MISMATCH,   /* same dtype, different shape */
    DCK_DIFF_STATUS_COUNT
} dck_diff_status;

/* "equal", "within_tolerance", "differ", "missing_in_a", ... */
DCK_API const char *dck_diff_status_name(dck_diff_status s);

/* Tolerances; a negative value means "not given". An element pair whose
 * bits differ is within tolerance when neither side is NaN or infinite and
 * |a-b| <= atol + rtol*max(|a|,|b|) (when atol or rtol is given) or its ULP
 * distance is <= ulp (when ulp is given). */
typedef struct {
    double atol;
    double rtol;
    int64_t ulp;
} dck_diff_tolerance;

DCK_API void dck_diff_tolerance_init(dck_diff_tolerance *t); /* nothing given */
DCK_API int dck_diff_tolerance_given(const dck_diff_tolerance *t);

/* Element statistics of two tensors of one dtype and shape. Numeric fields
 * are over the pairs whose bits differ and where neither side is NaN. */
typedef struct {
    uint64_t count;         /* elements compared */
    uint64_t diff_count;    /* elements whose bits differ */
    uint64_t beyond_count;  /* of those, beyond the tolerances (all, when none given) */
    uint64_t first_flat;    /* row-major index of the first differing element; UINT64_MAX none */
    double max_abs;         /* max |a-b| (infinite when an infinity is involved) */
    double max_rel;         /* max |a-b| / max(|a|,|b|) */
    uint64_t max_ulp;       /* ULP distance on the dtype's grid; integers: |a-b| */
    uint64_t nan_a, nan_b;  /* NaN elements in each side */
    uint64_t inf_a, inf_b;  /* infinite elements in each side */
    uint64_t nan_vs_number; /* one side NaN, the other not */
    uint64_t nan_payload;   /* both NaN, with different bits (payload or sign) */
    double sum_sq_diff;     /* sum (a-b)^2 over pairs where both are finite */
    double sum_sq_a, sum_sq_b;
    /* Sign changes: differing pairs of a signed dtype (floats, signed
     * integers) whose signs differ where neither side is zero or NaN
     * (8.4e-06 against -8.4e-06, +inf against -inf). +0 against -0 is no sign
     * change (ULP distance 0), nor is a zero against a number (its distance is
     * the number's from zero), nor a NaN (counted in nan_vs_number and
     * nan_payload). A sign change near zero is ~2^31 float32 ULPs however
     * small the numbers, which is what max_ulp reports; max_ulp_same_sign is
     * the largest ULP distance of the other numeric pairs, the figure of
     * drift that sign changes do not dominate. */
    uint64_t sign_changes;
    uint64_t max_ulp_same_sign;
} dck_diff_stats;

DCK_API void dck_diff_stats_init(dck_diff_stats *s);
/* Accumulates n element pairs of dtype t; a[0] and b[0] are element number
 * first_flat of the tensor. */
DCK_API void dck_diff_elements(dck_dtype t, const void *a, const void *b, size_t n,
                               uint64_t first_flat, const dck_diff_tolerance *tol,
                               dck_diff_stats *acc);
/* Folds part (covering later elements) into acc. Merging in a fixed order
 * gives the same bits whatever computed the parts. */
DCK_API void dck_diff_stats_merge(dck_diff_stats *acc, const dck_diff_stats *part);
/* ||a-b|| / max(||a||, ||b||) over the finite pairs; 0 when both are zero. */
DCK_API double dck_diff_rel_l2(const dck_diff_stats *s);

/* One element of dtype t as a double (exact for every float dtype). */
DCK_API double dck_element_to_double(dck_dtype t, const void *p);
/* ULP distance between two elements of a float dtype on its own grid (the
 * number of representable values from a to b; +0 and -0 are 0 apart, the
 * largest finite value and infinity 1); integers: |a-b|. Returns 0 and sets
 * *out = 0 when either is NaN, 1 otherwise. */
DCK_API int dck_ulp_distance(dck_dtype t, const void *a, const void *b, uint64_t *out);

typedef struct {
    int threads;             /* <= 0: default */
    dck_diff_tolerance tol;
    unsigned groups;         /* bit mask of 1u << dck_group; 0: every group */
    void (*progress)(void *ctx, uint64_t done, uint64_t total);
    void *progress_ctx;      /* progress is called from the calling thread; done
                              * never goes back, total may grow once (the
                              * statistics of tensors whose bytes differ are
                              * planned after the first pass) */
    /* How dck_diff_paths opens checkpoints (Megatron iteration, merging);
     * NULL: defaults. Its threads, hash_files and progress are ignored (the
     * fields above rule). */
    const dck_options *open_options;
    /* Tensors and values whose names match one of these fnmatch(3) globs
     * are left out on both sides (--exclude). Not copied. */
    const char *const *exclude;
    size_t nexclude;
    /* 1: a tensor on one side only that shares storage with another tensor
     * of its side (dck_diff_tensor.alias_of) is left out (--ignore-aliases). */
    int ignore_aliases;
    /* 1: layout state (dck_cmp_set_aside_layout_state) is compared even when
     * the two layouts differ (--require-rank-state); 0: it is set aside. */
    int require_rank_state;
    /* 1: layout state set aside is accepted (--accept-layout-state): listed,
     * and no obstacle to equal/ok; 0: anything set aside makes equal and ok
     * 0 (what was not compared is never part of an OK). */
    int accept_layout_state;
} dck_diff_options;

DCK_API void dck_diff_options_init(dck_diff_options *o);

typedef struct {
    const char *name;
    dck_diff_status status;
    dck_group group;
    const char *layer;       /* "layers.12", "h.3"; NULL when the name has no numeric part
                              * and for a stacked tensor (its slices say); when no name
                              * of the result numbers a layer, its module ("fc1" for
                              * "fc1.weight"; dck_diff_result.layers_are_modules) */
    int in_a, in_b;
    dck_dtype dtype_a, dtype_b;
    int ndim_a, ndim_b;
    uint64_t shape_a[DCK_MAX_DIMS], shape_b[DCK_MAX_DIMS];
    int has_digest_a, has_digest_b; /* two checkpoints: only for tensors not equal */
    dck_digest digest_a, digest_b;
    int has_stats;           /* element statistics below are valid */
    dck_diff_stats stats;
    uint64_t first_index[DCK_MAX_DIMS]; /* stats.first_flat as an index (ndim_a entries) */
    double rel_l2;
    /* Differing pairs with no NaN on either side: the pairs stats.max_abs,
     * max_rel, max_ulp and rel_l2 are figures of. 0 while stats.diff_count
     * is not (a NaN-only difference): those four are undefined (the CLI
     * prints "-", JSON null) and stats.nan_vs_number / nan_payload say what
     * differs. */
    uint64_t numeric_diff_count;
    /* A tensor on one side only that shares storage with another tensor of
     * that side (a tied weight torch.save wrote twice): that tensor's name;
     * NULL otherwise or when the reader cannot tell (manifests, safetensors). */
    const char *alias_of;
    /* A stacked tensor (Megatron-Core's torch_dist: every layer of a stack in
     * one tensor whose leading dimension is the layer, named with a "layers"
     * component followed by no number, "decoder.layers.mlp.linear_fc1.weight"):
     * one slice per leading index, "decoder.layers.0", "decoder.layers.1", ...
     * (layer above is then NULL). 0 / NULL for other tensors and when a
     * manifest is involved (a digest covers the whole tensor). */
    size_t nslices;
    struct dck_diff_slice *slices;
} dck_diff_tensor;

/* One layer of a stacked tensor: its elements [i, ...] along the leading
 * dimension. */
typedef struct dck_diff_slice {
    const char *layer;       /* "decoder.layers.1": the name's component before
                              * "layers", "layers", the index */
    dck_diff_status status;  /* from the slice's statistics when the tensor has
                              * them; otherwise the tensor's status (missing,
                              * mismatched: every layer of it differs) */
    dck_diff_stats stats;    /* valid when the tensor's has_stats; first_flat
                              * is an index into the whole tensor */
    double rel_l2;
    uint64_t numeric_diff_count; /* as dck_diff_tensor's */
} dck_diff_slice;

typedef struct {
    const char *layer;
    size_t tensors;          /* a stacked tensor's slice counts as one */
    size_t differing;        /* tensors not equal (within_tolerance included) */
    size_t first_differing;  /* index into tensors of its first differing one */
    uint64_t max_ulp;        /* over the tensors with a numeric difference */
    size_t numeric_differing; /* tensors whose numeric_diff_count > 0 */
    size_t nan_only;         /* tensors that differ only where one side is NaN: when
                              * numeric_differing is 0 and nan_only is not, max_ulp is
                              * no figure of the layer (printed "-", JSON null) */
    uint64_t sign_changes;   /* summed over its tensors (dck_diff_stats) */
    uint64_t max_ulp_same_sign; /* over its tensors, as max_ulp */
} dck_diff_layer;

typedef struct {
    const char *name;
    const char *a, *b;       /* NULL when absent from that side */
} dck_diff_value;

/* The order of dck_diff_result's tensors and layers. */
typedef enum {
    DCK_DIFF_ORDER_NAME = 0, /* neither side keeps its tensors' order: names sorted,
                              * numbers as numbers ("layers.2" before "layers.10") */
    DCK_DIFF_ORDER_A,        /* checkpoint A's own order (the model's): a torch.save
                              * pickle's, DCP's metadata's, an index's weight_map as
                              * written; tensors only in B after their predecessor in B */
    DCK_DIFF_ORDER_B         /* B's, when A keeps none */
} dck_diff_order;

/* "name", "a", "b" */
DCK_API const char *dck_diff_order_name(dck_diff_order o);

typedef struct {
    int digest_only;         /* a manifest was involved: no element statistics */
    int equal;               /* every tensor and value has the same bits */
    int ok;                  /* equal, or every difference within the tolerances */
    size_t ntensors;
    dck_diff_tensor *tensors; /* union of both sides, in `order` */
    size_t count[DCK_DIFF_STATUS_COUNT];
    long first_tensor;       /* first tensor not equal, in `order`; -1 none */
    size_t nlayers;
    dck_diff_layer *layers;  /* layers with a numeric part (modules: layers_are_modules),
                              * in the order of their first tensor (name order: by name) */
    long first_layer;        /* first layer with a tensor not equal; -1 none */
    size_t group_tensors[DCK_GROUP_COUNT];
    size_t group_differing[DCK_GROUP_COUNT];
    size_t nvalues;
    dck_diff_value *values;  /* recorded values that differ */
    uint64_t bytes_compared; /* bytes read element by element, each side */
    /* The two layouts differ (layouts_differ says how, "" when they do not):
     * their layout state (dck_cmp_set_aside_layout_state) is listed here, not
     * in tensors/values, and counts in none of the figures above; so is writer
     * bookkeeping recorded on one side only, whatever the layouts. Anything
     * listed here makes equal and ok 0 unless accept_layout_state. */
    char layouts_differ[256];
    size_t naside_tensors;
    dck_diff_tensor *aside_tensors;
    size_t naside_values;
    dck_diff_value *aside_values;
    dck_diff_order order;
    /* Both sides keep an order and list the tensors they share in different
     * ones: A's is used. */
    int orders_disagree;
    /* No tensor's name numbers a layer (fc1, fc2, head): each tensor's layer
     * is its module, the name up to its last '.' (a name without one has
     * none). */
    int layers_are_modules;
} dck_diff_result;

DCK_API dck_status dck_diff_checkpoints(dck_checkpoint *a, dck_checkpoint *b,
                                        const dck_diff_options *o, dck_diff_result *out);
DCK_API dck_status dck_diff_manifests(const dck_manifest *a, const dck_manifest *b,
                                      const dck_diff_options *o, dck_diff_result *out);
/* Opens each path as a manifest (YAML/JSON) or a checkpoint; with a manifest
 * on either side the checkpoint side is hashed and digests compared. Errors
 * name the path that failed. */
DCK_API dck_status dck_diff_paths(const char *a, const char *b, const dck_diff_options *o,
                                  dck_diff_result *out);
DCK_API void dck_diff_result_release(dck_diff_result *r);
/* "layers.12" for "model.layers.12.mlp.weight": a numeric name component
 * and the one before it. NULL when none (or out of memory). The caller
 * releases the string with dck_free. */
DCK_API char *dck_layer_of_name(const char *tensor_name);

/* ------------------------------------------------------------------ GPU
 * Digests of tensors that live in CUDA device memory, bit-identical to the
 * CPU's. Built without CUDA (make CUDA=0) or on a machine without a GPU,
 * every function returns DCK_ERR_NODEVICE. A device pointer may be device or
 * managed memory of any device (the call runs on that device) and at any
 * byte alignment. stream is a cudaStream_t (NULL: the legacy default
 * stream); the synchronous calls wait for their own work on it. Sums and
 * fragment partials of device memory: detcheck_static.h. */

typedef void *dck_cuda_stream;

/* Usable CUDA devices (0 with DCK_ERR_NODEVICE and a message saying why). */
DCK_API dck_status dck_gpu_device_count(int *count);

/* Digest of a whole tensor held contiguously in device memory (row-major,
 * little-endian): the same bits as dck_digest_buffer on the host. */
DCK_API dck_status dck_gpu_digest(dck_dtype t, const uint64_t *shape, int ndim,
                                  const void *dev_data, size_t len, dck_cuda_stream stream,
                                  dck_digest *out);

/* Where checkpoint hashing runs (detcheck hash --device). */
typedef enum { DCK_DEVICE_CPU = 0, DCK_DEVICE_CUDA, DCK_DEVICE_AUTO } dck_device;
DCK_API const char *dck_device_name(dck_device d);
/* "cpu", "cuda", "auto"; DCK_ERR_INVALID otherwise. */
DCK_API dck_status dck_device_from_name(const char *name, dck_device *out);

/* ------------------------------------------------------------------ Seals
 * A sealed checkpoint carries the digests of the state it was written from
 * (detcheck-seal(1)): CKPT/detcheck-seal.yaml inside a directory checkpoint,
 * CKPT.detcheck-seal.yaml beside a file. A seal is a manifest whose metadata
 * say seal: 1, with seal_from (memory | files), seal_checkpoint (the
 * checkpoint's base name), seal_step and seal_world_size when known. */

#define DCK_SEAL_NAME "detcheck-seal.yaml"
#define DCK_SEAL_SUFFIX ".detcheck-seal.yaml"

/* The seal path of checkpoint ckpt (malloc'd into *out; dck_free). */
DCK_API dck_status dck_seal_path(const char *ckpt, char **out);

/* Sets the seal metadata of m (before dck_manifest_finalize): from is
 * "memory" or "files"; step < 0: unknown; world_size 0: unknown. */
DCK_API dck_status dck_seal_mark(dck_manifest *m, const char *ckpt, const char *from, long long step,
                                 int world_size);

/* Writes finalized m as the seal of ckpt, atomically. It replaces only an
 * earlier seal: a symlink, anything but a regular file, or a file that is
 * not a seal is refused (DCK_ERR_INVALID, naming it). */
DCK_API dck_status dck_seal_save(const dck_manifest *m, const char *ckpt);

/* Loads the seal at seal_path: a symlink or non-regular file is refused
 * (DCK_ERR_INVALID), a manifest without seal: 1 is DCK_ERR_FORMAT. */
DCK_API dck_status dck_seal_load(const char *seal_path, dck_manifest **out);

/* ckpt's files against its seal: hashed with opt (NULL: defaults) and
 * compared, tensors, values and (when the seal has them) files. */
typedef struct {
    dck_manifest *seal, *actual;
    dck_cmp_result cmp;        /* differences, model order */
    char **holders;            /* per cmp entry: the checkpoint files that hold it ("a, b"), or NULL */
    int same;                  /* 1: nothing differs */
    char *seal_path;
} dck_seal_result;
DCK_API dck_status dck_seal_verify(const char *ckpt, const dck_options *opt, dck_seal_result *out);
DCK_API void dck_seal_result_release(dck_seal_result *r);

/* ------------------------------------------------------------------ Replica check
 * Data-parallel replicas compared during a run (detcheck-replica(7)): every
 * replica must hold bit-identical state after each step; one that differs is
 * the evidence of silent data corruption, and the majority names it. Every
 * rank of the replica group calls dck_replica_check with its replicated
 * tensors in model order (the same names, dtypes and shapes on every rank).
 * Each rank digests its tensors where they live (host memory: the CPU digest;
 * CUDA device memory: the GPU digest, in place, nothing copied to the host),
 * combines one 16-byte root (dck_root_digest over names and digests) and
 * all-gathers the roots: 16 bytes per rank when they are equal. Only when they
 * differ does it gather the ranks' tensor lists, hosts and devices, then the
 * per-tensor digests, and decide by strict majority.
 *
 * The group: the ranks of an NCCL communicator when options.nccl_comm is set
 * (the gathers run over it on options.stream), else MPI_COMM_WORLD when the
 * process was started by an MPI launcher (MPI initialised by the caller:
 * MPI_Init before the first check), else this process alone. Every gather
 * waits at most the collective timeout (DETCHECK_COLLECTIVE_TIMEOUT, as
 * detcheck canary and hash --distributed): a dead or hung rank is
 * DCK_ERR_COMM naming it (under MPI the ranks that still answer say which),
 * never a hang; after it the communicator is unusable (NCCL's is aborted
 * with ncclCommAbort) and the run must end.
 *
 * A mismatch is a result (compared = 1, same = 0), not an error; a group of
 * one rank compares nothing (compared = 0), which is no agreement either. Errors are trouble: a
 * rank's tensor list differs from the others' (DCK_ERR_MISMATCH, naming the
 * ranks), a rank failed to digest (its message, on every rank), a rank is
 * missing (DCK_ERR_COMM). */

typedef enum { DCK_MEMORY_HOST = 0, DCK_MEMORY_CUDA } dck_memory;

typedef struct {
    const char *name;
    dck_dtype dtype;
    int ndim;
    uint64_t shape[DCK_MAX_DIMS];
    const void *data;   /* contiguous, row-major, little-endian */
    size_t nbytes;      /* the shape's bytes */
    dck_memory memory;  /* where data lives: host or CUDA device memory */
} dck_replica_tensor;

typedef struct {
    int threads;               /* CPU digests; <= 0: the default */
    void *nccl_comm;           /* an ncclComm_t: the replica group; NULL: MPI or one rank */
    dck_cuda_stream stream;    /* the stream of the GPU digests and NCCL gathers */
} dck_replica_options;

DCK_API void dck_replica_options_init(dck_replica_options *o);

typedef struct {
    dck_digest root;
    size_t nranks;
    int *ranks;                /* ascending */
} dck_replica_group;

typedef struct {
    int rank, nranks;          /* this rank in the group; the group's size */
    dck_digest root;           /* this rank's root */
    int compared;              /* 1: two ranks or more compared; 0: a group of one rank,
                                * nothing compared (same is 0 too: no evidence) */
    int same;                  /* 1: every rank holds this root (and compared) */
    /* The rest is set when same is 0, identically on every rank. */
    int majority;              /* 1: one root is held by more than half of the ranks */
    size_t ndeviant;
    int *deviant;              /* the ranks outside the majority, ascending; none without
                                * one (two replicas that differ: a third is needed to
                                * tell which; no group above half: never a guess) */
    long tensor;               /* the first tensor (model order: the callers' order) whose
                                * digest is not the same on every rank; -1 when same */
    char *tensor_name;         /* its name; NULL when same */
    size_t ngroups;
    dck_replica_group *groups; /* the ranks by root: the largest group first, then by
                                * lowest rank */
    char **hosts;              /* nranks entries: "HOST cuda:0 (bus 0000:3b:00.0)" or
                                * "HOST cpu" */
} dck_replica_result;

/* t: n tensors in model order (n 0 is refused: no evidence). o NULL:
 * defaults. out is filled on DCK_OK (release it with
 * dck_replica_result_release) and zeroed otherwise. */
DCK_API dck_status dck_replica_check(const dck_replica_tensor *t, size_t n, const dck_replica_options *o,
                                     dck_replica_result *out);
DCK_API void dck_replica_result_release(dck_replica_result *r);

#ifdef __cplusplus
}
#endif
#endif /* DETCHECK_H */

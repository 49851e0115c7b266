/* Internal interfaces shared between the subsystems of libdetcheck. */
#ifndef DCK_INTERNAL_H
#define DCK_INTERNAL_H

#include "detcheck.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

/* ------------------------------------------------------------------ limits */
#define DCK_MAX_HEADER_BYTES (100u * 1000u * 1000u) /* safetensors JSON header */
#define DCK_MAX_TENSORS (1u << 20)
/* A strided view (stride 0 broadcasts) may be larger than its storage, but
 * not beyond this many logical bytes per stored byte, plus 1 GiB. */
#define DCK_MAX_VIEW_EXPANSION 1024u
#define DCK_MAX_NAME 4096

/* ------------------------------------------------------------------ util.c */
void *dck_xmalloc(size_t n);          /* NULL on failure (no abort) */
void *dck_xcalloc(size_t n, size_t m);
void *dck_xrealloc(void *p, size_t n);
char *dck_strdup(const char *s);
char *dck_strndup(const char *s, size_t n);
char *dck_path_join(const char *dir, const char *name);
int dck_default_threads(void);
/* Growable array helper: ensures capacity for need elements of size sz. */
dck_status dck_grow(void **ptr, size_t *cap, size_t need, size_t sz);
int dck_has_suffix(const char *s, const char *suffix);
/* Appends a copy of (name, value) to a growable array of values. */
dck_status dck_value_push(dck_manifest_value **arr, size_t *n, size_t *cap, const char *name,
                          const char *value);
/* qsort that accepts (NULL, 0): qsort's pointer must be non-null even then. */
void dck_qsort(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *));

/* ------------------------------------------------------------------ comm.c
 * An MPI return code as a status whose message names the call (for code
 * built with MPI; rc is an MPI error code). */
dck_status dck_mpi_check(int rc, const char *what);

/* ------------------------------------------------------------------ pool.c
 * Runs fn(ctx, i, worker) for i in [0, n) on `threads` threads (the caller is
 * one of them); items are taken dynamically. */
typedef void (*dck_task_fn)(void *ctx, size_t i, int worker);
void dck_parallel_for(int threads, size_t n, dck_task_fn fn, void *ctx);

/* ------------------------------------------------------------------ io.c
 * A checkpoint file. Raw files are memory-mapped window by window; zstd
 * files (magic 28 b5 2f fd) are decompressed as a stream, or once to an
 * unlinked temporary file when random access is needed. */
typedef struct dck_file {
    char *path;        /* as given / joined */
    char *relpath;     /* relative to the hashed root, for the manifest */
    uint64_t size;     /* bytes on disk */
    uint64_t data_size;/* bytes after decompression (unknown zstd: UINT64_MAX until mapped) */
    bool zstd;
    int fd;
    /* full random-access map (lazily created by dck_file_map) */
    const uint8_t *map;
    uint64_t map_len;
    int tmp_fd;        /* decompressed temporary for zstd, -1 otherwise */
    bool mapped;       /* dck_file_map done (map may be NULL for empty files) */
    pthread_mutex_t map_mu; /* makes the first dck_file_map thread-safe */
} dck_file;

dck_status dck_file_open(const char *path, const char *relpath, dck_file **out);
void dck_file_close(dck_file *f);
/* Whole (decompressed) contents, mapped read-only. */
dck_status dck_file_map(dck_file *f, const uint8_t **data, uint64_t *len);
/* Reads [off, off+len) of decompressed contents: from the map if any, else
 * pread for raw files, else maps (zstd). */
dck_status dck_file_pread(dck_file *f, uint64_t off, void *buf, size_t len);
/* Reads the first up to len bytes of decompressed contents (streams zstd; no
 * temporary file). Returns bytes read in *got. */
dck_status dck_file_read_prefix(dck_file *f, void *buf, size_t len, size_t *got);

/* Sequential window stream over decompressed contents, for hashing. */
typedef struct dck_stream dck_stream;
dck_status dck_stream_open(dck_file *f, size_t window, bool hash_file, dck_stream **out);
/* Next window: *data points to bytes [*off, *off + *len). *len = 0 at end.
 * Valid until the next call. With hash_file set at open, the stored bytes
 * are fed to the whole-file xxh128: for zstd files inside next() (the
 * compressed input), for raw files by dck_stream_hash_window(), which the
 * caller runs once per window, on any thread, concurrently with its own
 * work on the window, before the next call of next(). */
dck_status dck_stream_next(dck_stream *s, const uint8_t **data, uint64_t *off, size_t *len);
void dck_stream_hash_window(dck_stream *s);
/* After the stream ended: the stored file's xxh128 (what xxhsum -H2 prints). */
dck_digest dck_stream_file_hash(dck_stream *s);

/* Atomic output: a temporary file beside path; commit fsyncs, renames and
 * fsyncs the directory; abort removes the temporary. */
typedef struct {
    int fd;
    char *path;
    char *tmp;
} dck_atomic_file;
dck_status dck_atomic_open(const char *path, dck_atomic_file *af);
dck_status dck_atomic_write(dck_atomic_file *af, const void *data, size_t len);
dck_status dck_atomic_commit(dck_atomic_file *af);
void dck_atomic_abort(dck_atomic_file *af);
void dck_stream_close(dck_stream *s);

/* ------------------------------------------------------------------ checkpoint.c
 * What readers produce. A tensor is stored as one or more pieces; a piece is
 * a hyperrectangular slice [offset, offset+shape) of the global tensor whose
 * elements lie in one file, either contiguously in row-major order starting
 * at file_offset (strides == NULL), or at arbitrary element strides from
 * file_offset (PyTorch views). byteswap: stored big-endian. */
typedef struct {
    uint32_t file;                 /* index into ck->files */
    uint64_t file_offset;          /* byte offset in the decompressed file */
    uint64_t offset[DCK_MAX_DIMS]; /* slice start, elements */
    uint64_t shape[DCK_MAX_DIMS];  /* slice extent, elements */
    int64_t *strides;              /* element strides (malloc'd) or NULL */
    bool byteswap;
} dck_piece;

typedef struct {
    dck_tensor_info info;      /* info.name / info.source owned here */
    dck_piece *pieces;
    size_t npieces, cap_pieces;
} dck_tensor_entry;

struct dck_checkpoint {
    dck_file **files;
    size_t nfiles, cap_files;
    dck_tensor_entry *tensors;
    size_t ntensors, cap_tensors;
    dck_manifest_value *values; /* name/value strings owned */
    size_t nvalues, cap_values;
    char *root;                 /* directory the relpaths are relative to */
    dck_options opt;
};

/* An empty checkpoint with a copy of opt (NULL: defaults). Readers that
 * build in steps (Megatron merging) load into a scratch one, validate it and
 * move its contents over. */
dck_status dck_ck_create(const dck_options *opt, dck_checkpoint **out);
/* Builders used by readers. add_file returns the file index; the checkpoint
 * takes ownership of f. add_piece finds or creates the tensor by name; when
 * it exists, dtype and global shape must agree (DCK_ERR_LAYOUT names both
 * files). For a duplicate unsharded tensor (two pieces each covering the
 * whole tensor) the overlap check in dck_checkpoint_validate reports it. */
dck_status dck_ck_add_file(dck_checkpoint *ck, dck_file *f, uint32_t *index);
dck_status dck_ck_add_piece(dck_checkpoint *ck, const char *name, dck_dtype dtype,
                            const uint64_t *global_shape, int ndim, const dck_piece *piece);
dck_status dck_ck_add_value(dck_checkpoint *ck, const char *name, const char *value);
/* Checks every tensor's pieces: inside bounds, disjoint, covering it. Sorts
 * tensors in model order and fills info (group, nbytes, source). */
dck_status dck_ck_validate(dck_checkpoint *ck);
/* The manifest of a hashed checkpoint: tensor_digests in tensor order,
 * file_hashes (whole-file xxh128) in file order; tool and created metadata,
 * values; finalized. Every hashing path (CPU, GPU, distributed) uses it. */
dck_status dck_ck_build_manifest(dck_checkpoint *ck, const dck_digest *tensor_digests,
                                 const dck_digest *file_hashes, dck_manifest **out);

/* Readers: each fills ck from one path (a file or a directory). They are
 * tried by dck_checkpoint_open in turn on content sniffing. */
typedef struct {
    const char *name;
    /* Can this reader take this path? (1 yes, 0 no). head: first bytes of
     * the decompressed file (up to 64), or NULL for a directory. */
    int (*probe)(const char *path, bool is_dir, const uint8_t *head, size_t nhead);
    dck_status (*open)(dck_checkpoint *ck, const char *path, const char *relroot);
} dck_reader;

/* The reader table (checkpoint.c). Readers of later issues register here. */
extern const dck_reader dck_reader_safetensors;
extern const dck_reader dck_reader_st_index;   /* *.safetensors.index.json */
extern const dck_reader dck_reader_megatron;   /* Megatron-LM checkpoint roots and iter_N dirs */
extern const dck_reader dck_reader_dcp;        /* torch.distributed.checkpoint directories */
extern const dck_reader dck_reader_npz;        /* NumPy .npz */
extern const dck_reader dck_reader_pt;         /* torch.save: zip, legacy, tar */
extern const dck_reader dck_reader_npy;        /* NumPy .npy */

/* reader_megatron.c: merging legacy Megatron-LM rank directories.
 * Checks opt's tensor-parallel split rules (syntax; merging turned on). */
dck_status dck_megatron_check_options(const dck_options *opt);
/* The split dimension of a merged tensor name: opt's rules, then the
 * built-in ones; -1 replicated. *rule: the rule that decided ("GLOB=DIM"),
 * or NULL when none matched. */
dck_status dck_megatron_split_dim(const dck_options *opt, const char *name, int *dim,
                                  const char **rule);

/* safetensors.c: parse one file's header into pieces. */
dck_status dck_safetensors_open_file(dck_checkpoint *ck, const char *path, const char *relpath);
/* Parses the header JSON (bytes after the 8-byte length) of a file of
 * data_size bytes; used by the reader and the fuzz target. */
dck_status dck_safetensors_parse_header(dck_checkpoint *ck, uint32_t file, const char *json,
                                        size_t json_len, uint64_t data_size, const char *label);

/* ------------------------------------------------------------------ sharded layout
 * detcheck's sharded safetensors: __metadata__ holds
 *   "detcheck.layout": "sharded-v1"
 *   "detcheck.slice.<tensor name>": "{\"global_shape\":[...],\"offset\":[...]}"
 * for each stored tensor that is a slice of a larger global tensor. */
#define DCK_LAYOUT_KEY "detcheck.layout"
#define DCK_LAYOUT_VALUE "sharded-v1"
#define DCK_SLICE_PREFIX "detcheck.slice."

/* ------------------------------------------------------------------ hashing internals (digest.c) */
/* Hex helpers */
void dck_hex_encode(const uint8_t *in, size_t n, char *out);
/* Canonical 16 bytes of a digest: high64 BE, low64 BE. */
void dck_digest_canonical(dck_digest d, uint8_t out[16]);

#endif

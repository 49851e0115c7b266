/* common/: the bottom layer of libdetcheck. Errors, memory, strings, dtypes,
 * names, the thread pool, file I/O (mapping, streams, atomic output), zip
 * and MPI communication. Depends on nothing but the public header and
 * system libraries; every other layer may use it. */
#ifndef DCK_COMMON_H
#define DCK_COMMON_H

/* ------------------------------------------------------------------ no fast math
 * detcheck promises the same bits from any build, so the floating-point
 * value-changing optimisations are refused at compile time (every library
 * file includes this header). GCC names each part; clang names only
 * -ffast-math and -ffinite-math-only, so the Makefile also refuses the
 * flags by name (-fassociative-math, -freciprocal-math, ...). The Makefile
 * appends -ffp-contract=off after the user's flags: no fused multiply-add. */
#if defined(__FAST_MATH__)
#error "detcheck must not be built with -ffast-math (or -Ofast): it changes floating-point results; drop it from CFLAGS"
#elif defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__
#error "detcheck must not be built with -ffinite-math-only: NaN and infinity handling is part of its results"
#elif defined(__ASSOCIATIVE_MATH__) || defined(__RECIPROCAL_MATH__) || defined(__NO_SIGNED_ZEROS__)
#error "detcheck must not be built with -fassociative-math, -freciprocal-math, -fno-signed-zeros or -funsafe-math-optimizations: they reorder or change floating-point results"
#endif

#include "detcheck_static.h"

#include <pthread.h>
#include <setjmp.h>
#include <sys/stat.h>
#include <sys/types.h>
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

/* ------------------------------------------------------------------ errors (util.c)
 * Every failure sets its message where it happens: return dck_set_error(...).
 * DCK_TRY passes a failure (whose message is already set) up unchanged, as
 * NCCL's NCCLCHECK does; DCK_TRY_GOTO stores it in st and jumps to cleanup. */
#define DCK_TRY(call)                                                                              \
    do {                                                                                           \
        dck_status dck_try_status_ = (call);                                                       \
        if (dck_try_status_ != DCK_OK) return dck_try_status_;                                     \
    } while (0)
#define DCK_TRY_GOTO(st, call, label)                                                              \
    do {                                                                                           \
        if (((st) = (call)) != DCK_OK) goto label;                                                 \
    } while (0)
/* DCK_ERR_NOMEM with "out of memory" ("WHAT: out of memory" when what is
 * given): the one message for a failed allocation. */
dck_status dck_oom(const char *what);

/* ------------------------------------------------------------------ util.c */
void *dck_xmalloc(size_t n);          /* NULL on failure (no abort) */
void *dck_xcalloc(size_t n, size_t m);
void *dck_xrealloc(void *p, size_t n);
/* Faults in the pages of [p, p + n), an array about to be filled whole. */
void dck_prefault(void *p, size_t n);
char *dck_strdup(const char *s);
char *dck_strndup(const char *s, size_t n);
char *dck_path_join(const char *dir, const char *name);
/* a joined with b (a relative path), or a copy of b when a is NULL or "". */
char *dck_rel_join(const char *a, const char *b);
/* dir/name exists (stat, links followed) as a directory (want_dir) or a
 * regular file. */
bool dck_path_exists_in(const char *dir, const char *name, bool want_dir);
/* The entries of a directory, sorted by strcmp: "." and ".." left out, and
 * with skip_hidden every name that starts with '.'. Release with
 * dck_strv_free. */
dck_status dck_list_dir(const char *path, bool skip_hidden, char ***out, size_t *n);
void dck_strv_free(char **v, size_t n);
int dck_default_threads(void);
/* Growable array helper: ensures capacity for need elements of size sz. */
dck_status dck_grow(void **ptr, size_t *cap, size_t need, size_t sz);
int dck_has_suffix(const char *s, const char *suffix);
/* Appends a copy of (name, value) to a growable array of values. */
dck_status dck_value_push(dck_manifest_value **arr, size_t *n, size_t *cap, const char *name,
                          const char *value);
/* qsort that accepts (NULL, 0): qsort's pointer must be non-null even then. */
void dck_qsort(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *));
/* A float's bits and back (as records and messages carry floats). */
uint32_t dck_f32_bits(float x);
float dck_f32_from_bits(uint32_t u);
/* Shortest decimal that reads back as the same float (finite x). */
const char *dck_float_text(float v, char *buf, size_t n);

/* ------------------------------------------------------------------ comm.c
 * An MPI return code as a status whose message names the call (for code
 * built with MPI; rc is an MPI error code). */
dck_status dck_mpi_check(int rc, const char *what);

/* ------------------------------------------------------------------ pool.c
 * Runs fn(ctx, i, worker) for i in [0, n) on `threads` threads (the caller is
 * one of them); items are taken dynamically. */
typedef void (*dck_task_fn)(void *ctx, size_t i, int worker);
void dck_parallel_for(int threads, size_t n, dck_task_fn fn, void *ctx);

/* Tasks that can fail. Error messages are per thread (dck_last_error), so a
 * message set on a worker never reaches the caller by itself: this is the
 * one way a parallel loop reports a failure. Runs fn as dck_parallel_for
 * does and returns DCK_OK, or the first failure with its message set on the
 * calling thread (the worker's dck_last_error() is copied; a status returned
 * without a message gets dck_strerror's text). "First" is the lowest task
 * index that failed, not the earliest in time, so one input gives one
 * message whatever the thread count. Once a task has failed, tasks with
 * higher indexes are skipped (they cannot change the outcome); lower ones
 * still run. Tasks must not rely on running when an earlier one failed. */
typedef dck_status (*dck_status_task_fn)(void *ctx, size_t i, int worker);
dck_status dck_parallel_for_status(int threads, size_t n, dck_status_task_fn fn, void *ctx);
/* Bytes of a dck_last_error() message, NUL included (longer ones are cut). */
#define DCK_ERROR_MESSAGE_MAX 1024

/* ------------------------------------------------------------------ io.c
 * A checkpoint file. Raw files are memory-mapped window by window; zstd
 * files (magic 28 b5 2f fd) are decompressed as a stream, or once to an
 * unlinked temporary file when random access is needed. */
typedef struct dck_file {
    char *path;        /* as given / joined */
    char *relpath;     /* relative to the hashed root, for the manifest */
    uint64_t size;     /* bytes on disk */
    uint64_t data_size;/* bytes after decompression (a zstd frame without its size is decoded once at open to learn it) */
    bool zstd;
    int fd;            /* -1: reopened for each use (see dck_file_fd) */
    bool fd_kept;      /* fd counts against the cap of kept descriptors */
    dev_t dev;         /* identity when opened: a reopen must find the same file */
    ino_t ino;
    /* full random-access map (lazily created by dck_file_map) */
    const uint8_t *map;
    uint64_t map_len;
    int tmp_fd;        /* decompressed temporary for zstd, -1 otherwise */
    bool mapped;       /* dck_file_map done (map may be NULL for empty files) */
    pthread_mutex_t map_mu; /* makes the first dck_file_map thread-safe */
    int lost;          /* a map of it lost pages (SIGBUS; set by io.c's handler) */
    int was_mapped;    /* some of it was read from a map (its size is checked) */
} dck_file;

dck_status dck_file_open(const char *path, const char *relpath, dck_file **out);
/* dck_file_open that also reads the first up to len decompressed bytes
 * (*got), for a raw file in the one read that looks for the zstd magic. */
dck_status dck_file_open_prefix(const char *path, const char *relpath, void *head, size_t len,
                                size_t *got, dck_file **out);
/* Raw files: up to len bytes at off into buf, one pread where the kernel
 * gives them at once; *got < len only at the file's end now. */
dck_status dck_file_read_at(dck_file *f, uint64_t off, void *buf, size_t len, size_t *got);
void dck_file_close(dck_file *f);
/* A descriptor for f (its own, or one opened again, checked to be the same
 * file); hand it back with dck_file_fd_put. Files opened past the cap of
 * kept descriptors (a quarter of RLIMIT_NOFILE, at most 256) hold none. */
dck_status dck_file_fd(dck_file *f, int *fd);
void dck_file_fd_put(dck_file *f, int fd);
/* Its size now (it may have shrunk since it was opened). */
uint64_t dck_file_size_now(dck_file *f);
/* "PATH: changed while being read (now N bytes, was M)" */
dck_status dck_file_changed_error(dck_file *f);
/* Opens path read-only if it is a regular file, never blocking (a FIFO or a
 * device is an error naming its type). st may be NULL. */
dck_status dck_open_regular(const char *path, int *fd, struct stat *st);
/* "a FIFO", "a directory", "a symbolic link", ... for messages. */
const char *dck_file_type_name(mode_t m);
/* The bound on decoded bytes (zstd, inflated members): max(1 GiB, 4096 x
 * disk), or DETCHECK_MAX_DECODED; and the message for going past it. */
dck_status dck_decoded_limit(const char *label, uint64_t disk, uint64_t *out);
dck_status dck_decoded_too_large(const char *label, const char *what, uint64_t limit);

/* Strict UTF-8 (dck_utf8_width, dck_utf8_decode, dck_utf8_put): utf8.h. */
#include "utf8.h"

/* A file that shrinks while mapped: every map io.c makes is registered, and
 * a SIGBUS on a page the file lost maps zeros there and marks the file
 * changed (io.c explains why), on any thread. Code that reads a map checks
 * before it reports what it read: dck_file_changed (a page was lost; an
 * atomic load, cheap enough per window), dck_files_check (that, or a mapped
 * raw file now shorter than when opened: "FILE: changed while being read",
 * exit 2). */
bool dck_file_changed(const dck_file *f);
dck_status dck_files_check(dck_file *const *files, size_t n);
/* A map of bytes [off, off + len) of a raw file (a header read in place),
 * registered as above; NULL where it cannot be made (read it instead). */
void *dck_file_map_range(dck_file *f, uint64_t off, size_t len);
void dck_file_unmap_range(void *p, size_t len);
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
/* The same, only while nothing is at path (renameat2 RENAME_NOREPLACE, or
 * link+unlink where the file system refuses it): a file that appeared there
 * is kept, DCK_ERR_INVALID naming it. */
dck_status dck_atomic_commit_new(dck_atomic_file *af);
void dck_atomic_abort(dck_atomic_file *af);
void dck_stream_close(dck_stream *s);

/* ------------------------------------------------------------------ side files
 * The bytes of a side file (a recording's tensor_digests.bin, a trace.bin),
 * streamed: from a regular file, never past the size it had when opened (a
 * live run appends, and what it appends later is not part of this reading),
 * or from memory (the fuzz targets). Nothing is read whole: a reader
 * allocates for what it has read, never for what a count merely declares. */
typedef struct {
    const char *path;  /* the file, or the label of the memory, for messages */
    int fd;            /* -1: mem */
    const uint8_t *mem;
    uint64_t size;     /* bytes to read in all */
    uint64_t pos;      /* offset of the next byte handed out */
    uint64_t read_end; /* offset just past buf's bytes */
    size_t at, have;   /* buf[at..have) are the bytes from pos on */
    uint8_t buf[1 << 16];
} dck_src;
/* Runs parse(src, ctx) over path (data NULL: a regular file, opened without
 * blocking) or over data[0..len) labelled path, and closes what it opened. */
dck_status dck_src_run(const char *path, const uint8_t *data, size_t len,
                       dck_status (*parse)(dck_src *, void *), void *ctx);
/* Up to n bytes into dst; *got < n only at the end of the data. */
dck_status dck_src_take(dck_src *s, uint8_t *dst, size_t n, size_t *got);
/* dck_grow, its failure naming the file */
dck_status dck_src_grow(const dck_src *s, void **p, size_t *cap, size_t need, size_t sz);
/* n bytes little-endian (n <= 8) */
uint64_t dck_le(const uint8_t *p, int n);

/* The one rule for every output path (manifests, canary goldens, JUnit and
 * Markdown reports, recordings): an output may be written where nothing is,
 * over an empty regular file, or over a regular file that is an output of
 * the same kind (same_kind(path) true; NULL: only nothing or empty). Never
 * over an input (inputs[i]: same device and inode, also when path names it
 * through a link), a symbolic link (the rename would replace the link, not
 * what it names), a FIFO, a device, a directory, or a file its owner made
 * read-only. what names the kind in messages ("JUnit report"). Called before
 * the work starts, so a refused output costs nothing; DCK_ERR_INVALID with
 * "OPTION PATH: why" (option may be NULL). */
typedef bool (*dck_output_kind)(const char *path);
dck_status dck_output_check(const char *option, const char *path, const char *what,
                            dck_output_kind same_kind, const char *const *inputs, size_t ninputs);
/* The rule again at the moment of writing, for af written aside: the path
 * is checked (as above), then af renamed in, over the file the check let
 * through, or, where the check saw nothing, only while nothing is there
 * (dck_atomic_commit_new): a file that appears after the check is never
 * replaced. af is committed or aborted in every case. */
dck_status dck_output_commit(dck_atomic_file *af, const char *option, const char *what, dck_output_kind same_kind,
                             const char *const *inputs, size_t ninputs);
/* data written to path by the rule at the moment of writing (above). */
dck_status dck_output_write(const char *option, const char *path, const char *what, dck_output_kind same_kind,
                            const char *const *inputs, size_t ninputs, const void *data, size_t len);

/* ------------------------------------------------------------------ comm.c
 * MPI when launched by mpirun (detected from the environment), otherwise a
 * single rank. Only bytes and integers cross it in deterministic mode. */
typedef struct dck_comm dck_comm;
dck_status dck_comm_init(int *argc, char ***argv, dck_comm **out);
dck_comm *dck_comm_self(void); /* single rank, static */
void dck_comm_finalize(dck_comm *c);
int dck_comm_rank(const dck_comm *c);
int dck_comm_size(const dck_comm *c);
bool dck_comm_is_mpi(const dck_comm *c);
/* a launcher (mpirun, srun with PMIx) started this process: its environment says so */
bool dck_comm_launched(void);
dck_status dck_comm_barrier(dck_comm *c);
/* recv holds size() blocks of n bytes, in rank order. */
dck_status dck_comm_allgather(dck_comm *c, const void *send, void *recv, size_t n);
/* Variable-size blocks: counts[r] bytes from rank r at displs[r]. */
dck_status dck_comm_allgatherv(dck_comm *c, const void *send, size_t n, void *recv,
                               const size_t *counts, const size_t *displs);
/* fast mode only: MPI_Allreduce(MPI_SUM) on floats, in place. */
dck_status dck_comm_allreduce_sum_f32(dck_comm *c, float *data, size_t n);
/* Worst status over ranks (so every rank takes the same branch). */
dck_status dck_comm_agree(dck_comm *c, dck_status s);
dck_status dck_comm_bcast(dck_comm *c, void *data, size_t n, int root);
void dck_comm_abort(dck_comm *c, int code);
/* Rank root collects n bytes from every rank into recv (size() blocks, in
 * rank order) but waits at most `seconds`: arrived[r] (root only; size()
 * entries) says whose block came. The other ranks send and wait at most as
 * long for the send. tag keeps two such gathers apart. A rank that died or
 * hangs is then named by the caller instead of hanging it (detcheck canary);
 * afterwards, with a rank missing, only dck_comm_abort is safe. Each block
 * is preceded by its size (on tag + 1): a rank sending another size (another
 * version or configuration) is an error naming it, never an overflow. */
dck_status dck_comm_gather_deadline(dck_comm *c, const void *send, void *recv, size_t n, int root,
                                    int tag, double seconds, bool *arrived);
/* The way back: rank root sends n bytes to every rank r with to[r] (NULL:
 * every rank), each side waiting at most `seconds` (tag keeps it apart), so
 * that no rank waits on a missing one as MPI_Bcast would. */
dck_status dck_comm_bcast_deadline(dck_comm *c, void *data, size_t n, int root, int tag, double seconds,
                                   const bool *to);

/* Waiting on a collective (detcheck-train(1), ENVIRONMENT): an operation in flight (an MPI
 * request; an NCCL collective on a stream) is polled, asleep between polls,
 * until it completes, fails, a peer's failure is reported apart (NCCL's
 * ncclCommGetAsyncError), or the collective timeout passes. Then the
 * operation is given up (ncclCommAbort), the ranks that still answer take a
 * roll call with a deadline so that every survivor names the missing
 * ranks, and the communicator is marked broken: later collectives on it
 * fail at once and dck_comm_finalize skips MPI_Finalize (which would wait
 * for the missing rank), so the survivors exit 2 instead of hanging. */
typedef struct {
    void *ctx;
    dck_status (*test)(void *ctx, bool *done); /* a failure of the operation: message set */
    dck_status (*async_error)(void *ctx);      /* NULL, or a peer's failure (message set) */
    void (*abort)(void *ctx);                  /* NULL, or: give the operation up */
    /* asleep between polls (from 20 us to ~1 ms): for waits that are long by
     * nature (barriers); otherwise polls back to back, yielding the CPU, as a
     * blocking MPI call or cudaStreamSynchronize would, since MPI moves a
     * collective's data only inside its calls */
    bool quiet;
} dck_comm_op;
/* c NULL: the job's communicator made by dck_comm_init, if any. what names
 * the operation in messages. DCK_ERR_COMM on a timeout or a peer's failure. */
dck_status dck_comm_wait(dck_comm *c, const dck_comm_op *op, const char *what);
/* The collective timeout in seconds: DETCHECK_COLLECTIVE_TIMEOUT (0.1 to
 * 604800; default DCK_COMM_TIMEOUT_DEFAULT), or what dck_comm_set_timeout
 * set. DCK_ERR_INVALID, naming the variable, for a bad value. */
#define DCK_COMM_TIMEOUT_DEFAULT 600.0
dck_status dck_comm_timeout_env(double *seconds);
double dck_comm_timeout(const dck_comm *c);
void dck_comm_set_timeout(dck_comm *c, double seconds);
/* a collective of c timed out or a peer failed: only exiting is safe */
bool dck_comm_broken(const dck_comm *c);
/* the MPI communicator dck_comm_init made; NULL: none (one rank, or the
 * caller's own MPI) */
dck_comm *dck_comm_job(void);

#endif

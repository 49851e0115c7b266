/* detcheck: the unstable part of the API, for static linking.
 *
 * UNSTABLE. What this header declares may change or go away in any release,
 * minor and patch releases included, without a change of SONAME: it exposes
 * how the digest is computed (lane sums, fragment partials, incremental
 * hashing) and helpers the detcheck tools share (the safetensors writer,
 * atomic file output, the readers of recorded runs). Include it only from code that links libdetcheck.a,
 * or that is built against the exact version of libdetcheck.so it runs
 * with, in the manner of ZSTD_STATIC_LINKING_ONLY. Its functions are
 * exported (DCK_API) so that such code can also use the shared library.
 * The stable API is detcheck.h, which this header includes.
 */
#ifndef DETCHECK_STATIC_H
#define DETCHECK_STATIC_H

#include "detcheck.h"

#include <stdbool.h>

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
 * in device memory, 8-byte aligned (64-bit atomics add to them: a
 * misaligned pointer is refused with DCK_ERR_INVALID before any launch,
 * since the fault would end the caller's CUDA context), without waiting.
 * Many tensors can be summed into one
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

/* ------------------------------------------------------------------ recorded runs
 * The two binary files a recorded run holds next to its trajectory (formats:
 * man detcheck-bisect(1), RECORDED RUNS and TRACE FILES): the per-step tensor
 * digests (RUN/tensor_digests.bin) and the per-module or per-op traces
 * (RUN/trace.bin), read and compared as detcheck bisect does. The readers
 * stream the file, refuse anything malformed with a message naming the file
 * and the byte offset (DCK_ERR_FORMAT; DCK_ERR_UNSUPPORTED for a version or
 * flags they do not know; DCK_ERR_IO for a file that is not regular), and
 * drop only a last record cut short by the end of the file (a killed run).
 * The Python package reads recordings through these. */

typedef struct {
    long step;
    size_t n;
    size_t first; /* index of its first entry in the recording's entries */
} dck_rec_step;

typedef struct {
    uint32_t id; /* into names and kinds */
    dck_digest digest;
} dck_rec_entry;

/* kinds: 0 gradient, 1 parameter, 2 optimizer state, 3 state (what a resume
 * restores besides weights and optimizer: data.batch, rng.*, lr.N, ...). */
typedef struct {
    size_t nnames;
    char **names;
    uint8_t *kinds;
    size_t nsteps;
    dck_rec_step *steps; /* ascending */
    size_t nentries;
    dck_rec_entry *entries; /* each step's in file order */
} dck_recording;

/* Reads RUN/tensor_digests.bin at path into out (released on failure). */
DCK_API dck_status dck_recording_load(const char *path, dck_recording *out);
DCK_API void dck_recording_release(dck_recording *r);
/* The first recorded step present in both whose tensors differ, and the
 * first tensor there (state first, then gradients, parameters, optimizer
 * state; model order within a kind). A state entry present in one run only
 * is passed over. Returns 1 and fills step, kind, name (into a buffer of
 * nlen) and how ("digest", "only in A", "only in B"); 0 when every common
 * step agrees; -1 when out of memory. */
DCK_API int dck_recording_compare(const dck_recording *a, const dck_recording *b, long *step, int *kind,
                                  char *name, size_t nlen, const char **how);

typedef struct {
    uint8_t present; /* 0: no tensor (digest zero) */
    dck_digest digest;
} dck_trace_slot;

/* phase: 0 forward, 1 backward, 2 optimizer; kind: 0 module, 1 op. */
typedef struct {
    uint8_t phase, kind, nin, nout;
    uint32_t module, op; /* name ids; op 0xffffffff for a module event */
    uint32_t call;
    size_t slot; /* its first slot in the trace's slots: inputs, then outputs */
} dck_trace_event;

typedef struct {
    long step;
    bool truncated; /* the recorder dropped the events past n */
    size_t n;
    size_t first; /* index of its first event in the trace's events */
} dck_trace_step;

typedef struct {
    uint32_t version; /* the file's: 1 or 2 */
    size_t nnames;
    char **names;
    size_t nsteps;
    dck_trace_step *steps; /* ascending */
    size_t nevents;
    dck_trace_event *events;
    size_t nslots;
    dck_trace_slot *slots;
} dck_trace;

typedef enum { DCK_TRACE_AGREE = 0, DCK_TRACE_OUTPUT, DCK_TRACE_EXECUTION } dck_trace_how;

/* Where two traces part: the first step traced in both (ascending) where
 * an event differs, and in it the first event in execution order.
 * EXECUTION: the events at position event differ in phase, kind, module,
 * op, call or their input/output counts, or one run's step ended there
 * (a or b NULL; a step the recorder truncated never ends early: only the
 * events both hold are compared). OUTPUT: the events agree as keys and
 * output `output` differs (presence or digest); input is the first input
 * that differed already (-1: every input equal: the event is the culprit). */
typedef struct {
    dck_trace_how how;
    long step;
    size_t event;               /* position in the step, from 0 */
    const dck_trace_event *a, *b;
    int output, input;          /* OUTPUT only; -1 otherwise */
    size_t common;              /* steps traced in both */
    size_t agreeing;            /* of those, compared and agreeing before the difference */
    size_t truncated[2];        /* steps compared that run A, run B truncated */
    long first_truncated[2];    /* the first of them (-1: none) */
    size_t blind;               /* agreeing steps whose outputs have no digest in either run: nothing compared */
    long first_blind;           /* the first of them (-1: none) */
} dck_trace_diff;

/* Reads RUN/trace.bin at path into out (released on failure). */
DCK_API dck_status dck_trace_load(const char *path, dck_trace *out);
DCK_API void dck_trace_release(dck_trace *t);
/* Fills d; returns d->how != DCK_TRACE_AGREE. Names are compared by their
 * text: each run numbers its names in the order it met them. */
DCK_API bool dck_trace_compare(const dck_trace *a, const dck_trace *b, dck_trace_diff *d);

/* ------------------------------------------------------------------ recorded runs
 * A run directory as `detcheck train --out` or the Python package's
 * Recorder writes it: trajectory.jsonl, and where recorded
 * tensor_digests.bin, trace.bin and complete checkpoints step_NNNNNNNN
 * (man detcheck-bisect(1)). dck_run_open reads them all: a file that is
 * absent is absent, one that is there and malformed (or a FIFO, a dangling
 * link) is an error naming it. */
typedef struct dck_run dck_run;
DCK_API dck_status dck_run_open(const char *dir, dck_run **out);
DCK_API void dck_run_free(dck_run *run); /* NULL: nothing */

/* What one run holds and the other lacks: never agreement (man
 * detcheck-bisect(1), "not compared"). */
typedef struct {
    const char *item;  /* "trajectory_steps", "roots", "recorded_steps", "recorded_state",
                          "traced_steps", "truncated_steps", "checkpoints" (static) */
    int run;           /* 0: run A holds them alone (truncated_steps: cut them), 1: run B */
    size_t count;
    long first, last;
    bool empty_side;   /* the other run holds none at all: never accepted */
    const char *why;   /* why the other run's list is empty ("has no trace.bin", "traced none",
                          "has none"; static), or NULL */
    char *name;        /* recorded_state: the first entry's name as recorded; else NULL */
} dck_runs_gap;
enum { DCK_RUNS_MAX_GAPS = 16 }; /* seven items, two runs each */

/* One traced event: phase 0 forward, 1 backward, 2 optimizer; kind 0
 * module, 1 op (op NULL for a module); names as recorded. */
typedef struct {
    bool present; /* false: the run's step ended before it */
    int phase, kind;
    char *module, *op;
    unsigned call, nin, nout;
} dck_runs_event;

/* What would localise a difference further: nothing, an op trace, or the
 * dump of the first differing step's traced outputs (next_step). */
typedef enum { DCK_RUNS_NEXT_NONE = 0, DCK_RUNS_NEXT_TRACE_OPS, DCK_RUNS_NEXT_DUMP_STEP } dck_runs_next;
typedef enum { DCK_RUNS_TRACE_AGREE = 0, DCK_RUNS_TRACE_OUTPUT, DCK_RUNS_TRACE_EXECUTION } dck_runs_trace_how;

/* The traces (trace.bin): the first traced step in both where an event
 * differs, and in it the first event in execution order; judged against
 * the first step whose trajectory or recorded tensors differ (bound). */
typedef struct {
    bool has[2], both, found;
    size_t common, agreeing;  /* steps traced in both; of those, agreeing before the difference */
    size_t truncated[2];      /* compared steps run A, run B truncated */
    long first_truncated[2];  /* the first of them (-1: none) */
    unsigned version[2];      /* trace.bin versions */
    dck_runs_trace_how how;
    long step;
    size_t event;             /* position in the step, from 0 */
    int output, input;        /* OUTPUT: the output that differs, the first input that already
                                 differed (-1: inputs equal: the culprit) */
    bool input_is_state;      /* that input is the module's parameters and buffers */
    dck_runs_event a, b;      /* the events of run A and run B at that position */
    long bound;               /* the first step whose trajectory or recorded tensors differ, -1 */
    bool late;                /* the difference comes after bound: context, never the culprit */
    bool ops;                 /* traced op by op */
    bool unseen;              /* the first differing tensor (at bound) is one the trace cannot see */
    dck_runs_next next;
    long next_step;
} dck_runs_trace;

typedef struct {
    bool allow_partial; /* gaps other than an empty side are accepted (still listed) */
    bool missing_steps; /* a trajectory may lack steps, or share none with the other (resume-check's
                           runs: the command judges their steps itself): they are gaps, not trouble */
} dck_runs_opts;

/* The comparison of two runs (dck_runs_compare). Strings are the result's
 * (dck_runs_result_release); names as recorded. */
typedef struct {
    long last_step[2];              /* each trajectory's last step */
    bool traj_differs;              /* the first step both ran whose record differs: */
    long traj_step;
    char *traj_detail;              /* what differs there */
    /* recorded tensors (tensor_digests.bin) */
    bool rec_has[2], rec_both, rec_found;
    size_t rec_steps[2], rec_common;
    long rec_step;                  /* the first differing tensor: step, kind (0 gradient, */
    int rec_kind;                   /* 1 parameter, 2 optimizer state, 3 state), name, and */
    char *rec_name;                 /* how: "digest", "only in A", "only in B" (static) */
    const char *rec_how;
    dck_runs_trace trace;
    /* the earliest step where anything recorded differs, and what
     * ("trajectory", "tensor", "event"; static); -1 and NULL: none */
    long first_step;
    const char *first_differing;
    /* checkpoints: in each run, in both; the last where both agree and the
     * first after it that differs (-1: none), with its tensors */
    size_t ckpts[2], ckpts_in_both;
    long ckpt_agree, ckpt_differ;
    dck_manifest *ckpt_a, *ckpt_b;  /* the manifests at ckpt_differ */
    dck_cmp_result ckpt_diff;
    dck_runs_gap gaps[DCK_RUNS_MAX_GAPS];
    size_t ngaps;
    bool found;     /* a difference: trajectory, checkpoint, tensor or event */
    bool accepted;  /* every gap accepted (opts->allow_partial, none an empty side) */
    bool different; /* found, or a gap not accepted: exit 1 */
} dck_runs_result;

/* Compares run a with run b (man detcheck-bisect(1)); out is released with
 * dck_runs_result_release whatever the status. Trouble (a trajectory with
 * no records or a missing step, runs without a step in common: unless
 * opts->missing_steps; out of memory, a checkpoint's manifest) is an error
 * naming the file. */
DCK_API dck_status dck_runs_compare(const dck_run *a, const dck_run *b, const dck_runs_opts *opts,
                                    dck_runs_result *out);
DCK_API void dck_runs_result_release(dck_runs_result *r);

/* ------------------------------------------------------------------ the newest sealed checkpoint
 * detcheck-latest(1): the checkpoints of a directory by the step their
 * names say, newest first, each judged by its seal (detcheck.h, Seals). */

/* The step checkpoint name `name` says (detcheck-latest(1), LAYOUTS):
 * step_N (detcheck's own step_NNNNNNNN), step-N, iter_NNNNNNN, global_stepN,
 * checkpoint-N, each alone or with a checkpoint file's extension (.pt,
 * .pth, .bin, .ckpt, .safetensors, .npz), and one step=N component of a
 * .ckpt name (epoch=E-step=N.ckpt). 1 and *step, or 0: none (another name,
 * trailing text, digits beyond 2^63 - 1). */
DCK_API int dck_latest_step(const char *name, long long *step);

/* What became of a candidate (names: dck_latest_state_name). */
typedef enum {
    DCK_LATEST_OLDER = 0,    /* not judged: a newer one qualified */
    DCK_LATEST_CHOSEN,       /* the newest that qualifies */
    DCK_LATEST_LINK,         /* a symbolic link: not followed */
    DCK_LATEST_SPECIAL,      /* neither a file nor a directory */
    DCK_LATEST_UNSEALED,     /* no seal */
    DCK_LATEST_TORN_SEAL,    /* a seal that does not load as a manifest */
    DCK_LATEST_NOT_SEAL,     /* a manifest that is no seal, a link, a FIFO at the seal's path */
    DCK_LATEST_OTHER_SEAL,   /* the seal of another step */
    DCK_LATEST_CORRUPT,      /* --verify: the files differ from the seal */
    DCK_LATEST_UNREADABLE    /* --verify: the files could not be read */
} dck_latest_state;
/* "chosen", "unsealed", "torn seal", ... (static) */
DCK_API const char *dck_latest_state_name(dck_latest_state s);

typedef struct {
    char *name;          /* the entry's name in the directory, as it is */
    char *path;          /* DIR/NAME, DIR as given */
    long long step;
    dck_latest_state state;
    char *why;           /* skipped: the reason, whole ("unsealed (no PATH)"); else NULL */
    size_t differences;  /* corrupt: how many */
    char *first;         /* corrupt: the first difference's name, or NULL */
    char *first_files;   /* corrupt: the checkpoint files that hold it ("a, b"), or NULL */
} dck_latest_entry;

typedef struct {
    dck_latest_entry *entries; /* the candidates, newest first: step descending, then name (strcmp) */
    size_t n;
    long chosen;               /* entries' index of the newest that qualifies; -1: none */
    char **others;             /* entries that are no candidates (no step in the name, temporary
                                * names tmp-*), sorted; names starting with '.' and seals left out */
    size_t nothers;
} dck_latest_result;

/* Called as each candidate is judged (the CLI names each skipped one as
 * it goes, before a long --verify of the next). */
typedef void (*dck_latest_judged_fn)(void *ctx, const dck_latest_entry *e);

/* The newest checkpoint of dir (its entries, one level) that qualifies:
 * its seal loads and is its own (the seal's step is the name's); with
 * verify, also its files hash to the seal (dck_seal_verify with opt).
 * Candidates are judged newest first up to the first that qualifies.
 * Trouble (dir missing, not a directory, unreadable): an error naming it.
 * Release out with dck_latest_result_release whatever the status. */
DCK_API dck_status dck_latest_find(const char *dir, int verify, const dck_options *opt, dck_latest_judged_fn judged,
                                   void *ctx, dck_latest_result *out);
DCK_API void dck_latest_result_release(dck_latest_result *r);

/* ------------------------------------------------------------------ Replica verdict
 * The vote of dck_replica_check (detcheck-replica(7)) for callers that
 * gather the roots and digests themselves (the Python ReplicaGuard over
 * torch.distributed): from every rank's root and, when they differ, the
 * size x n per-tensor digests, rank-major, out's same, majority, deviant,
 * tensor and groups (not its tensor_name and hosts). Release out with
 * dck_replica_result_release. */
DCK_API dck_status dck_replica_decide(const dck_digest *roots, int size, const dck_digest *digests, size_t n,
                                      dck_replica_result *out);

/* ------------------------------------------------------------------ doctor
 * What this detcheck finds at run time (detcheck-doctor(1)): its build, the
 * digest's CPU kernel, and the libraries it loads but never bundles (CUDA
 * driver and runtime, cuBLAS, NCCL, MPI), each looked for as a GPU hash or
 * a distributed run would look (in order: DETCHECK_*_LIB, already loaded,
 * NVIDIA's wheels in site-packages, $CONDA_PREFIX/lib, the system's loader
 * path, $CUDA_HOME), with where it was found or why not. */
typedef enum {
    DCK_DOCTOR_FOUND,     /* loaded, with every function detcheck calls */
    DCK_DOCTOR_UNUSABLE,  /* found, but it lacks a function or its first calls fail: why */
    DCK_DOCTOR_ABSENT,    /* not found: why holds each place tried, one line each */
    DCK_DOCTOR_NOT_BUILT, /* this detcheck was built without it */
    DCK_DOCTOR_INFO       /* facts of detcheck itself (its version, the CPU) */
} dck_doctor_state;

typedef struct {
    const char *key;        /* "detcheck", "cpu", "driver", "cuda", "cublas", "nccl", "mpi" (static) */
    const char *name;       /* "CUDA runtime", ... (static) */
    dck_doctor_state state;
    char *version;          /* its version ("13.0", "2.27.3"; the CPU: the digest kernel), or NULL */
    char *path;             /* the real path of the library loaded, or NULL */
    char *from;             /* the step that found it ("NVIDIA wheel", ...), or NULL */
    char *detail;           /* more facts, lines joined by '\n' (devices, kernels), or NULL */
    char *why;              /* unusable, absent, not built: why, lines joined by '\n', or NULL */
} dck_doctor_row;

typedef struct {
    dck_doctor_row *rows;   /* in the order above */
    size_t n;
} dck_doctor_result;

/* Loads each library through detcheck's own loaders (once per process) and
 * fills out; an error only when out of memory. Release out with
 * dck_doctor_result_release. */
DCK_API dck_status dck_doctor_probe(dck_doctor_result *out);
DCK_API void dck_doctor_result_release(dck_doctor_result *r);
/* "found", "unusable", "absent", "not built", "info" (static) */
DCK_API const char *dck_doctor_state_name(dck_doctor_state s);

#ifdef __cplusplus
}
#endif
#endif /* DETCHECK_STATIC_H */

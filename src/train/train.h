/* The built-in trainer (src/train/, detcheck-train(1)): its numerics, model,
 * data, optimizer, loop, the writing and resuming of its checkpoints, the
 * option table and the canary's taps. What reads a recorded run (the
 * trajectory, the tensor digests and traces, a run's checkpoints) lives in
 * src/runs/, which this layer includes. Internal to libdetcheck and the
 * CLI; every numeric routine here is written so that a CUDA twin can
 * reproduce its bits (fixed reduction orders, no libm transcendental). */
#ifndef DCK_TRAIN_H
#define DCK_TRAIN_H

#include "core/core.h"
#include "runs/checkpoints.h"
#include "runs/trajectory.h"

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

/* ------------------------------------------------------------------ train_math.c
 * Float routines from +, -, *, / and sqrt only (accuracy in
 * tests/check_train_math.c). */
float dck_expf(float x);   /* <= 2 ulp over the finite range (1 measured) */
float dck_logf(float x);   /* <= 2 ulp for normal positive x */
float dck_tanhf(float x);  /* <= 4 ulp (2 measured) */
float dck_gelu(float x);   /* tanh-approximate GELU, as x * sigmoid(2 z) */
float dck_gelu_grad(float x);
/* The same bits on arrays, several elements at once: x[i] = dck_expf(x[i]);
 * y[i] = dck_gelu(x[i]) keeping its sigmoid in sig[i]; and, from that sig,
 * d[i] = d[i] * dck_gelu_grad(x[i]). */
void dck_expf_n(float *x, size_t n);
void dck_gelu_n(const float *x, float *y, float *sig, size_t n);
void dck_gelu_grad_n(const float *x, const float *sig, float *d, size_t n);
double dck_cospi(double p); /* cos(pi p) for the LR schedule, |err| < 1e-15 */
double dck_powi(double b, long n); /* b^n by repeated squaring (n >= 0) */
/* bf16 round-to-nearest-even (NaN stays NaN, quiet). */
uint16_t dck_f32_to_bf16(float x);
float dck_bf16_to_f32(uint16_t h);
static inline float dck_bf16_round(float x) { return dck_bf16_to_f32(dck_f32_to_bf16(x)); }
void dck_bf16_round_n(float *x, size_t n); /* x[i] = dck_bf16_round(x[i]), the same bits */
/* Fixed-order reductions: 8 lanes (element j into lane j % 8), lanes
 * combined as ((0+1)+(2+3))+((4+5)+(6+7)). */
float dck_dot(const float *a, const float *b, size_t n);
float dck_sum(const float *a, size_t n);
/* Sum of squares in chunks of 4096 (8-lane each), chunks added in order. */
float dck_sumsq(const float *a, size_t n);

/* ------------------------------------------------------------------ train_philox.c */
typedef struct {
    uint32_t v[4];
} dck_philox_ctr;
/* Philox4x32-10 (Salmon et al. 2011; Random123). */
dck_philox_ctr dck_philox4x32(dck_philox_ctr ctr, uint32_t k0, uint32_t k1);
/* One 32-bit word from (seed, a, b, c, d). */
uint32_t dck_philox_u32(uint64_t seed, uint32_t a, uint32_t b, uint32_t c, uint32_t d);

/* ------------------------------------------------------------------ configuration */
typedef enum { DCK_PREC_FP32 = 0, DCK_PREC_BF16 = 1 } dck_precision;
typedef enum { DCK_MODE_DET = 0, DCK_MODE_FAST = 1 } dck_train_mode;

#define DCK_TRAIN_PATH 1024

/* Limits of one run. The step's tree sums keep one pointer per microbatch
 * and per rank on the stack (train_loop.c); the option table's range of
 * --microbatches is DCK_TRAIN_MAX_MICROBATCHES, and dck_train_config_ranks
 * refuses more than DCK_TRAIN_MAX_RANKS ranks. Both are powers of two, and K
 * divides M, so the rank limit is the tighter one only above it. */
#define DCK_TRAIN_MAX_MICROBATCHES 1024
#define DCK_TRAIN_MAX_RANKS 256
_Static_assert((DCK_TRAIN_MAX_MICROBATCHES & (DCK_TRAIN_MAX_MICROBATCHES - 1)) == 0 &&
                   (DCK_TRAIN_MAX_RANKS & (DCK_TRAIN_MAX_RANKS - 1)) == 0,
               "the microbatch and rank limits are powers of two");
_Static_assert(DCK_TRAIN_MAX_RANKS <= DCK_TRAIN_MAX_MICROBATCHES,
               "K divides M: more ranks than microbatches could never run");

typedef struct {
    /* identity of the run: stored in every checkpoint, checked on resume */
    int vocab, layers, width, heads, seq;
    int batch;        /* sequences per microbatch */
    int microbatches; /* M: a power of two; K ranks must divide it */
    uint64_t seed;
    char data[DCK_TRAIN_PATH]; /* uint16 token file, "" = synthetic task */
    float lr, min_lr, beta1, beta2, eps, weight_decay, clip;
    long warmup, decay_steps; /* decay_steps 0: this run's --steps */
    dck_precision precision;
    /* how to run it (free to change between runs, K and threads included) */
    long steps;
    dck_train_mode mode;
    int threads;
    char out[DCK_TRAIN_PATH]; /* "" = no output */
    char resume_from[DCK_TRAIN_PATH]; /* a step directory; "" = latest in out */
    bool resume;
    bool decay_set;   /* decay_steps given explicitly */
    long ckpt_every;  /* 0 = only the final step (when out is set) */
    long digest_every;/* root digest in the trajectory every N steps (1) */
    int compress;     /* zstd level for shards, 0 = none (--compress: 3) */
    char device[16];  /* "" or cpu, cuda, auto; twin: the GPU path's CPU twin (tests) */
    char preset[16];  /* the --preset that set the model's shape ("": none) */
    /* testing hooks (documented in detcheck-train(1)) */
    long flip_step;   /* after step s, flip the low bit of one weight */
    char flip_tensor[256];
    uint64_t flip_index;
    long kill_after_ckpt;  /* SIGKILL right after the checkpoint of step s */
    long kill_during_ckpt; /* SIGKILL while writing the checkpoint of step s */
} dck_train_config;

/* What an option of the table (train_config.c) belongs to, from the run's
 * identity outwards; asking for a scope includes every scope before it. */
typedef enum {
    DCK_TRAIN_IDENTITY = 0, /* stored in every checkpoint, checked on resume */
    DCK_TRAIN_NUMERICS = 1, /* changes the bits, not stored: --mode */
    DCK_TRAIN_RUN = 2,      /* how to run, the same for every run of an experiment:
                               --steps, --threads, --digest-every, --compress */
    DCK_TRAIN_INSTANCE = 3, /* one run's own: --out, --resume, checkpoints, testing hooks */
} dck_train_scope;

void dck_train_config_init(dck_train_config *c);
/* Sets one option by its long flag name without dashes ("width", "lr",
 * "precision"...). DCK_ERR_INVALID with a message for unknown names or bad
 * values. */
dck_status dck_train_config_set(dck_train_config *c, const char *name, const char *value);
int dck_train_flag_takes_value(const char *name); /* -1 unknown, 0 switch, 1 value */
/* The option table's names in its order (NULL past the end). */
const char *dck_train_option_name(size_t i);
/* Checks every option against the table's range, then sizes and
 * combinations (not K). */
dck_status dck_train_config_check(const dck_train_config *c);
/* Checks that K ranks can run c: at most DCK_TRAIN_MAX_RANKS, dividing M. */
dck_status dck_train_config_ranks(const dck_train_config *c, int ranks);
/* Canonical JSON of the identity part (*json malloc'd); decay_steps resolved. */
dck_status dck_train_config_json(const dck_train_config *c, char **json);

/* One command-line flag: --name VALUE, or --name alone when value is NULL. */
typedef struct {
    const char *name; /* without dashes */
    const char *value;
} dck_train_flag;
/* The flags, in the option table's order, that reproduce c's options of
 * scope up to `upto`: dck_train_config_set of each on a dck_train_config_init
 * config gives back the same fields bit for bit (floats as the shortest
 * decimal that reads back as the same float). Options that are off (at their
 * default: --data, --mode deterministic, --decay-steps, --compress, --out,
 * --resume, --ckpt-every, the testing hooks) are left out, so decay_steps is
 * not resolved here. *flags is one malloc'd block (free it); *n flags. */
dck_status dck_train_config_to_flags(const dck_train_config *c, dck_train_scope upto,
                                     dck_train_flag **flags, size_t *n);
/* The same flags as one shell command-line fragment ("--vocab 256 --layers
 * 2 ..."), string values in single quotes (malloc'd; NULL when out of memory). */
char *dck_train_config_flags(const dck_train_config *c, dck_train_scope upto);
/* Compares a stored config JSON with c: DCK_ERR_MISMATCH naming the fields. */
dck_status dck_train_config_match(const dck_train_config *c, const char *stored_json,
                                  const char *label);
/* Fills the identity fields of c from a stored config JSON. */
dck_status dck_train_config_from_json(dck_train_config *c, const char *json, const char *label);


/* ------------------------------------------------------------------ train_model.c */
typedef struct {
    char name[96];    /* model.<...> */
    int ndim;
    uint64_t shape[2];
    size_t offset;    /* in the flat parameter vector */
    size_t numel;
    size_t row;       /* elements per row (shape[1], or 1) */
    bool decay;       /* weight decay applies */
    float init_std;   /* 0: constant init_value */
    float init_value;
} dck_param;

typedef struct {
    dck_train_config cfg;
    dck_param *params;
    size_t nparams;
    size_t total; /* P */
    /* indices of parameter tensors */
    size_t i_wte, i_wpe, i_lnf_w, i_lnf_b, i_head;
    size_t i_block0; /* block l, item j: i_block0 + 12 l + j */
    struct dck_train_tap *tap; /* canary taps (train_inject.c); NULL: none */
} dck_model;

enum { BP_LN1_W, BP_LN1_B, BP_QKV_W, BP_QKV_B, BP_PROJ_W, BP_PROJ_B, BP_LN2_W, BP_LN2_B,
       BP_FC_W, BP_FC_B, BP_FC2_W, BP_FC2_B, BP_COUNT };

dck_status dck_model_init(dck_model *m, const dck_train_config *cfg);
void dck_model_release(dck_model *m);
long dck_model_find(const dck_model *m, const char *name);
/* Initial fp32 master weights (every element keyed by seed, tensor, index). */
void dck_model_init_weights(const dck_model *m, float *master);

/* Per-thread work space for one microbatch. */
typedef struct dck_workspace dck_workspace;
dck_workspace *dck_workspace_create(const dck_model *m);
void dck_workspace_free(dck_workspace *w);
/* Forward + backward of one microbatch (batch sequences of seq+1 tokens,
 * row-major). grad (P floats) is overwritten with the gradient of the mean
 * token loss; returns that loss. w: parameters as used in the forward pass
 * (bf16-rounded in bf16 mode). */
float dck_model_microbatch(const dck_model *m, dck_workspace *ws, const float *w,
                           const uint16_t *tokens, float *grad);

/* ------------------------------------------------------------------ train_data.c */
typedef struct dck_data dck_data;
dck_status dck_data_open(const dck_train_config *cfg, dck_data **out);
void dck_data_free(dck_data *d);
/* Sample g: seq+1 tokens. */
void dck_data_sample(const dck_data *d, uint64_t g, uint16_t *tokens);

/* ------------------------------------------------------------------ train_optim.c */
/* Learning rate at step s (1-based). */
float dck_lr_at(const dck_train_config *c, long step);
/* AdamW on elements [lo, hi) of the flat vectors (grad, master indexed
 * globally; the moments hold only [lo, hi)); step is 1-based. */
void dck_adamw(const dck_model *m, const dck_train_config *c, long step, float lr, float gscale,
               const float *grad, float *master, float *exp_avg, float *exp_avg_sq, size_t lo,
               size_t hi);
/* Pairwise tree over n (power of two) buffers of len floats, in place:
 * result in bufs[0]. Same bits as any aligned split of the tree. */
void dck_tree_sum(float **bufs, size_t n, size_t len);
/* ZeRO-1 ownership: rank r owns [start[r], start[r+1]) of the flat vector,
 * cut at row boundaries. start has size+1 entries. */
void dck_zero_partition(const dck_model *m, int size, size_t *start);

/* ------------------------------------------------------------------ train_loop.c */
typedef struct {
    long step;
    float loss, grad_norm, lr;
    bool has_root;
    dck_digest root;
    double seconds; /* since the loop started */
} dck_train_step_info;

typedef struct {
    void *ctx;
    void (*on_step)(void *ctx, const dck_train_step_info *s);   /* rank 0 only */
    void (*on_message)(void *ctx, int warning, const char *msg); /* rank 0 only */
    struct dck_train_tap *tap; /* state taps, every rank (train_inject.c); NULL: none */
} dck_train_hooks;

typedef struct {
    long first_step;   /* 1, or the resumed step + 1 */
    long last_step;
    float first_loss, last_loss;
    double seconds;    /* wall time of the step loop */
    double steps_per_s;
    bool has_root;     /* final_root is the root after last_step */
    dck_digest final_root;
    /* A resumed run re-checks the trajectory records it found after the
     * resume step against the ones it recomputes (rank 0): the first step
     * whose record differs or is missing (0: none), and how. */
    long recheck_step;
    char recheck_what[640];
} dck_train_result;

dck_status dck_train_run(const dck_train_config *cfg, dck_comm *comm, const dck_train_hooks *hooks,
                         dck_train_result *res);

/* ------------------------------------------------------------------ train_ckpt.c */

/* Makes or empties the step directory of `step` under out for a new
 * checkpoint. Nothing is followed and only the names detcheck writes there
 * (dck_ckpt_own_name) are removed; a step directory that is a symbolic link,
 * not a directory, or that holds anything else is DCK_ERR_INVALID naming it,
 * and nothing is deleted then. */
dck_status dck_ckpt_prepare_dir(const char *out, long step);
/* Whether a step directory's entry is one detcheck writes: COMPLETE,
 * manifest.json, rank_NNNNN_of_NNNNN.safetensors[.zst], and their
 * NAME.tmp.XXXXXX temporaries. */
bool dck_ckpt_own_name(const char *name);

/* ------------------------------------------------------------------ train_inject.c
 * Taps on a step's state, for detcheck canary (canary.h): the trainer calls
 * them at fixed points of every step (weights before the step, activations
 * between forward and backward, gradients after backward, optimizer state
 * after the update). A tap reads the state (per-tensor digests) and may
 * change it (one flipped bit: fault injection). */
typedef enum {
    DCK_TAP_WEIGHTS, DCK_TAP_GRADIENTS, DCK_TAP_EXP_AVG, DCK_TAP_EXP_AVG_SQ, /* recorded */
    DCK_TAP_ACTIVATIONS, /* only injected into: per sequence, from worker threads */
    DCK_TAP_COUNT
} dck_tap_point;
#define DCK_TAP_RECORDED 4
typedef struct dck_train_tap {
    void *ctx;
    /* data holds elements [lo, hi) of the flat vector of m's layout (the
     * forward activations of one sequence for DCK_TAP_ACTIVATIONS) */
    void (*on_state)(void *ctx, const dck_model *m, dck_tap_point what, long step, float *data,
                     size_t lo, size_t hi);
    long step; /* the step in progress, for the activation tap */
    /* the tap injects a fault on purpose (detcheck canary --inject): the run
     * goes on through non-finite values (detcheck-train(1)), as the first
     * difference it is compared for is the fault itself, before them */
    bool faults;
} dck_train_tap;
/* The trainer's calls: each does nothing when no tap is set. b: a second
 * vector of the same range (exp_avg_sq after exp_avg), or NULL. */
void dck_train_tap_state(const dck_train_hooks *h, const dck_model *m, long step, dck_tap_point what,
                         float *a, float *b, size_t lo, size_t hi);
void dck_train_tap_activations(const dck_model *m, float *act, size_t n);

#endif

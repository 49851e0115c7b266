/* detcheck canary (canary.c): every rank runs the same short training run on
 * its own device, without any reduction, records per-step roots and
 * per-tensor digests, and rank 0 compares every rank with an oracle (the CPU
 * reference, a golden file, or the majority). See man/detcheck-canary.1. */
#ifndef DCK_TRAIN_CANARY_H
#define DCK_TRAIN_CANARY_H

#include "train/train.h"

/* One flipped bit in one run: --inject RANK:STEP:TENSOR:INDEX:BIT. TENSOR
 * names the point of the step: model.X (weights before the step), grad.X
 * (gradients after backward), optimizer.exp_avg.X / optimizer.exp_avg_sq.X
 * (optimizer state after the update), activations (the forward activations
 * of every sequence of the step, flat). */
typedef struct {
    bool on;
    int rank;
    long step;
    char tensor[160];
    uint64_t index;
    int bit;
} dck_canary_inject;
dck_status dck_canary_inject_parse(const char *spec, dck_canary_inject *inj);
/* Whether the tensor, index and step exist in run c (DCK_ERR_INVALID naming them). */
dck_status dck_canary_inject_check(const dck_train_config *c, const dck_canary_inject *inj);

/* Workload sizes (the option table of canary.c): sets the model, data and
 * steps of c. DCK_ERR_INVALID naming the presets for an unknown name. */
dck_status dck_canary_preset(dck_train_config *c, const char *name);
const char *dck_canary_preset_name(size_t i); /* NULL past the end */
const char *dck_canary_preset_help(size_t i);

typedef enum { DCK_ORACLE_CPU = 0, DCK_ORACLE_GOLDEN, DCK_ORACLE_VOTE } dck_canary_oracle;

typedef struct {
    dck_train_config cfg;     /* cfg.device: where every rank runs (cpu, cuda, twin) */
    dck_canary_inject inject;
    dck_canary_oracle oracle;
    const char *golden;       /* DCK_ORACLE_GOLDEN */
    const char *write_golden; /* rank 0's run goes there too; NULL none */
    double seconds;           /* repeat for this long, comparing each pass with the first */
    double timeout;           /* rank 0 waits this long for the others' reports */
    int stall_rank;           /* testing: this rank never reports (-1 none) */
    size_t hist_budget;       /* bytes of per-step state kept for the element detail */
    void (*progress)(void *ctx, double done, double total); /* rank 0, between passes */
    void *ctx;
} dck_canary_opts;
void dck_canary_opts_init(dck_canary_opts *o);
/* Settles c->device before any run: "" and cpu stay the CPU; cuda checks
 * that a GPU is visible (DCK_ERR_NODEVICE saying why); auto becomes cuda
 * when one is, else cpu; twin (the GPU path on its CPU twin, for tests)
 * stays. Each rank's trainer then takes the GPU of dck_gpu_choose (the
 * node-local rank modulo the visible devices, as train and hash), so that
 * the ranks of a node train on their own GPUs, sharing them round-robin
 * when there are more ranks than GPUs. */
dck_status dck_canary_device_ready(dck_train_config *c);

enum { DCK_CANARY_SAME = 0, DCK_CANARY_DIFFERS, DCK_CANARY_ERROR, DCK_CANARY_TIMEOUT };

typedef struct {
    char host[64], device[96], id[64];
    int rank, local;
    int gpu;            /* --device cuda: the device index (dck_gpu_choose); -1 otherwise */
    int result;         /* DCK_CANARY_* */
    char error[256];    /* ERROR, TIMEOUT: why */
    long step;          /* DIFFERS: first differing step (0: none) */
    char tensor[192];   /* ... and the first tensor there (or "root") */
    bool has_detail;    /* element counts of that tensor at detail_step */
    long detail_step;
    uint64_t numel, ndiff;
    uint32_t bits;      /* OR of (a ^ b) over the differing elements */
    int group;          /* --vote: 1 + the first rank with the same record */
    int passes;         /* --seconds: passes run; pass_diff the first that left pass 1 */
    int pass_diff;
    long pass_step;
    char pass_tensor[192];
} dck_canary_rank;

typedef struct {
    int nranks;
    dck_canary_rank *ranks; /* rank 0 only */
    int identical;
    long steps;
    size_t params;        /* elements of the model */
    char oracle_text[300];/* "CPU reference on rank 0", "golden FILE", "majority (3 of 4)" */
    bool no_majority;
    bool any_timeout;     /* then only dck_comm_abort is safe: some rank is missing (every rank
                             that heard rank 0's verdict knows) */
    bool wait_for_abort;  /* not rank 0: rank 0 reports, then ends the job; leave it to */
    char final_root[33];  /* the oracle's final root digest (hex), "" unknown */
    int exit_code;        /* 0 all identical, 1 some rank differs, 2 trouble (every rank) */
} dck_canary_report;
void dck_canary_report_release(dck_canary_report *r);

/* Limits (man detcheck-canary(1), LIMITS): a canary run has 1 to
 * DCK_CANARY_MAX_STEPS steps; --vote needs DCK_CANARY_MIN_VOTERS ranks (two
 * cannot outvote one faulty rank: one against one is no majority). */
#define DCK_CANARY_MAX_STEPS 10000
#define DCK_CANARY_MIN_VOTERS 3

/* Golden files. The largest golden file read for a run of `steps` steps of
 * a model with `ntensors` tensors (bytes): 1 MiB + 1 KiB per tensor + 48
 * bytes per digest (what golden_write writes takes 35; the rest is room for
 * white space); a larger file is refused before it is read. */
uint64_t dck_canary_golden_limit(long steps, size_t ntensors);
/* Whether path starts as a golden file does (the kind --write-golden may
 * replace, dck_output_check). */
bool dck_canary_is_golden(const char *path);
typedef struct {
    long steps;           /* 1..DCK_CANARY_MAX_STEPS */
    size_t ntensors;
    char *config;         /* the run's identity JSON, as stored */
    char *names;          /* ntensors names, each with its NUL, one after another */
    dck_digest *roots;    /* [steps] */
    dck_digest *digests;  /* [steps][DCK_TAP_RECORDED][ntensors] */
} dck_canary_golden;
/* Parses a golden file's text (len bytes, no NUL needed); label names it in
 * messages ("LABEL:LINE: why", DCK_ERR_FORMAT; DCK_ERR_UNSUPPORTED for
 * another version). Memory: at most about the text's size again. */
dck_status dck_canary_golden_parse(const char *text, size_t len, const char *label,
                                   dck_canary_golden *g);
void dck_canary_golden_release(dck_canary_golden *g);
/* Reads the golden file at path written for run c of model m (its size
 * bounded by dck_canary_golden_limit; its steps, config and tensor names
 * checked against c and m, DCK_ERR_MISMATCH naming what differs). */
dck_status dck_canary_golden_read(const char *path, const dck_train_config *c, const dck_model *m,
                                  dck_canary_golden *g);
/* Writes run c's golden file (step_roots [steps], digests
 * [steps][DCK_TAP_RECORDED][m->nparams]) by the output rule (dck_output_write:
 * only over a golden file). */
dck_status dck_canary_golden_write(const char *path, const dck_train_config *c, const dck_model *m,
                                   const dck_digest *step_roots, const dck_digest *digests);

/* The whole check: every rank of comm runs; rank 0 fills *rep with every
 * rank, the others only exit_code. A rank that fails or does not report is
 * in the report (ERROR / TIMEOUT), not a failure status; a status is
 * returned for trouble such as a bad golden file (message set). */
dck_status dck_canary_check(const dck_canary_opts *o, dck_comm *comm, dck_canary_report *rep);

#endif

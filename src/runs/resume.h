/* The resume diagnosis: an uninterrupted run against a run stopped at step
 * K (the same command, up to K) and against the run resumed from K's
 * checkpoint (steps K+1..), over what each recorded: trajectory, tensor
 * digests and traces. Where they part first, what one run recorded and the
 * other did not, and the state that was not restored (man
 * detcheck-resume-check(1), USER COMMANDS). The results are structured:
 * steps, kinds, counts and names as recorded (pointing into the runs'
 * recordings); the command line words them. */
#ifndef DCK_RUNS_RESUME_H
#define DCK_RUNS_RESUME_H

#include "common/common.h"
#include "runs/trajectory.h"
#include "runs/recording.h"
#include "runs/trace.h"

/* What one run recorded: its trajectory (ascending, at least one record)
 * and its tensor digests (NULL: none recorded). */
typedef struct {
    const dck_traj_rec *traj;
    size_t ntraj;
    const dck_recording *rec;
} dck_resume_view;

/* The first step where run b parts from run a: the trajectory's (tstep,
 * what its fields say) or a recorded entry's (rstep; kind, name whole and
 * how: "digest", "only in A", "only in B", as dck_recording_compare says),
 * whichever comes first (step). A state name in one run only is no
 * parting (dck_resume_first_gap names it). -1: none. */
typedef struct {
    long step, tstep, rstep;
    char what[1024];
    int kind;
    char name[DCK_REC_NAME_MAX + 1];
    const char *how;
} dck_resume_parting;
/* DCK_ERR_NOMEM when out of memory. */
dck_status dck_resume_first_parting(const dck_resume_view *a, const dck_resume_view *b, dck_resume_parting *p);

/* Something of lo..hi that one run recorded and the other did not: a step
 * (of the trajectory, the tensor digests or the trace), a root digest, a
 * state entry, or the events of a traced step that one run's recorder cut
 * shorter. The comparisons pair what both hold, so without it what one
 * run lacks would be compared nowhere: it is a difference, never
 * agreement. */
typedef enum {
    DCK_RESUME_GAP_STEP,  /* the step */
    DCK_RESUME_GAP_ROOT,  /* the root digest of the step */
    DCK_RESUME_GAP_STATE, /* state entry `entry` of the step */
    DCK_RESUME_GAP_CUT    /* what the traced step holds past `events` events */
} dck_resume_gap_kind;
typedef struct {
    long step;         /* -1: none */
    int lacks;         /* the run that lacks it: 0 run a, 1 run b */
    const char *file;  /* DCK_TRAJECTORY, DCK_RECORD_FILE or DCK_TRACE_FILE */
    bool ended;        /* a step of DCK_TRAJECTORY: the lacking run's trajectory ended before it (else a hole) */
    dck_resume_gap_kind kind;
    const char *entry; /* GAP_STATE: its name, into the recording that holds it */
    size_t events;     /* GAP_CUT: the events the lacking run's cut step holds */
} dck_resume_gap;
/* The first gap of lo..hi between a and b in their trajectories and tensor
 * digests (steps, root digests; state entries at steps both recorded, the
 * weights a process records at its first step, start.*, left out), into
 * g (step -1: none). DCK_ERR_NOMEM when out of memory. */
dck_status dck_resume_first_gap(const dck_resume_view *a, const dck_resume_view *b, long lo, long hi,
                                dck_resume_gap *g);

/* The traces of both runs (NULL: the run wrote none; at least one given)
 * over lo..hi: the first step traced in one run only, or a step cut
 * differently (the run that cut it shorter lacks the events past its cut),
 * into g when it comes before g's gap (a DCK_TRACE_FILE gap); the steps
 * both truncated alike (their events past the recorder's bound compared
 * nowhere: said with the verdict) into *alike. */
typedef struct {
    size_t steps;      /* steps of lo..hi both traced and truncated alike */
    long first, last;  /* the first and last of them (-1: none) */
} dck_resume_cut;
void dck_resume_trace_gaps(const dck_trace *a, const dck_trace *b, long lo, long hi, dck_resume_gap *g,
                           dck_resume_cut *alike);
/* g := c when c comes first (an earlier step; at the same step the gap
 * found first stays). */
void dck_resume_gap_take(dck_resume_gap *g, const dck_resume_gap *c);

/* The first parameter (model order) whose start.NAME in the resumed run's
 * first step K+1 (the weights it started from) differs from the
 * uninterrupted run's NAME after step K, into *name (NAME, into res's
 * recording; NULL: none, or not both recorded). DCK_ERR_NOMEM when out of
 * memory. */
dck_status dck_resume_start_differing(const dck_resume_view *full, const dck_resume_view *res, long K,
                                      const char **name);

/* The state that was not restored: the first cause that matches at the
 * first differing step D = p->step, in this order. */
typedef enum {
    DCK_RESUME_WEIGHTS,    /* D = K+1 and start.NAME differs: the checkpoint lacks the weights after K */
    DCK_RESUME_DATA,       /* data.batch differs */
    DCK_RESUME_RNG,        /* an RNG state differs (dck_resume_rngs, in its order) */
    DCK_RESUME_LR,         /* the trajectory's lr or a group's lr.N differs */
    DCK_RESUME_SCALER,     /* a scaler.* entry differs */
    DCK_RESUME_EMA,        /* an ema.* entry differs */
    DCK_RESUME_OPTIMIZER,  /* optimizer state differs with every gradient equal */
    DCK_RESUME_TENSOR,     /* none of those: the first differing tensor (p's kind, name, how) */
    DCK_RESUME_TRAJECTORY, /* none of those: the trajectory (p's what when tstep is D) */
    DCK_RESUME_CAUSE_COUNT
} dck_resume_cause;
/* The RNG states looked at, in order, and what their difference means. */
typedef struct {
    const char *name, *why; /* "rng.torch", "torch's CPU RNG state was not restored" */
} dck_resume_rng;
extern const dck_resume_rng dck_resume_rngs[];
extern const size_t dck_resume_nrngs;
/* "weights", "data", "rng", "lr", "scaler", "ema", "optimizer", "tensor",
 * "trajectory": the names JSON and reports give the causes. */
const char *dck_resume_cause_name(dck_resume_cause c);

typedef struct {
    dck_resume_cause cause;
    /* WEIGHTS: the parameter (its entry is start.NAME); DATA, RNG, SCALER,
     * EMA, OPTIMIZER: the entry; LR: the group's entry that differs, or
     * NULL (the trajectory's lr alone); TENSOR, TRAJECTORY: NULL (p names
     * it). Into the recordings. */
    const char *name;
    size_t rng;        /* RNG: its index in dck_resume_rngs */
    long batch_step;   /* DATA: the uninterrupted run's step whose batch the resumed one equals (-1: none) */
    bool lr_traj;      /* LR: the trajectory's lr differs: lr[0] (full), lr[1] (res) as written, NaN: none */
    double lr[2];
} dck_resume_diagnosis;
/* The cause of the first difference p (at D = p->step > K) between the
 * uninterrupted run full and the run res resumed from K. DCK_ERR_NOMEM
 * when out of memory. */
dck_status dck_resume_diagnose(const dck_resume_view *full, const dck_resume_view *res, long K,
                               const dck_resume_parting *p, dck_resume_diagnosis *d);

/* Two runs of the same command that part at step D = p->step, before the
 * stop (nothing resumed): what was equal at D, and where that puts the
 * difference. */
typedef enum {
    DCK_RESUME_ARISES_UNKNOWN = 0,
    DCK_RESUME_ARISES_UPDATE,    /* a parameter differs first, gradients and optimizer state equal */
    DCK_RESUME_ARISES_FORWARD    /* a gradient differs first, the batch equal: forward or backward */
} dck_resume_arises;
typedef struct {
    size_t n[DCK_REC_KIND_COUNT];    /* entries of each kind in both at D */
    size_t diff[DCK_REC_KIND_COUNT]; /* of those, differing */
    bool has_batch, batch_equal;     /* data.batch in both; equal */
    bool has_rng, rng_equal;         /* an rng.* in both; every one equal */
    dck_resume_arises arises;
} dck_resume_tally;
/* DCK_ERR_NOMEM when out of memory. */
dck_status dck_resume_tally_parting(const dck_resume_view *a, const dck_resume_view *b, const dck_resume_parting *p,
                                    dck_resume_tally *t);

/* The trajectories of `detcheck train`'s reference run a and of a run b
 * resumed from one of its checkpoints, each of steps 1..steps (the
 * built-in trainer form): the first of a differing record, a root digest
 * one run holds at a step both hold, a step one lacks, or a step never
 * run that one holds. dck_traj_compare pairs the steps both hold, so what
 * one lacks is a difference of its own, never agreement. */
typedef enum {
    DCK_RESUME_TRAJ_SAME,    /* none of these */
    DCK_RESUME_TRAJ_DIFFERS, /* the records of step differ: what */
    DCK_RESUME_TRAJ_ROOT,    /* run `side` lacks the root digest of step */
    DCK_RESUME_TRAJ_MISSING, /* run `side` lacks step */
    DCK_RESUME_TRAJ_EXTRA    /* run `side` holds step, which was never run */
} dck_resume_traj_kind;
typedef struct {
    dck_resume_traj_kind kind;
    long step;      /* -1: SAME */
    int side;       /* 0 run a (the reference), 1 run b */
    size_t na, nb;  /* the records of each */
    char what[600]; /* DIFFERS: dck_traj_compare's words */
} dck_resume_traj_verdict;
void dck_resume_traj_check(const dck_traj_rec *a, size_t na, const dck_traj_rec *b, size_t nb, long steps,
                           dck_resume_traj_verdict *d);

#endif

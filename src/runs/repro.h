/* What repro compares of N runs of a user's command besides
 * dck_runs_compare (man detcheck-repro(1)): the steps each run recorded in
 * its tensor digests and its trace, every run's recordings against run
 * 1's, and the determinism settings of the runs' run.json (repro.c). */
#ifndef DCK_RUNS_REPRO_H
#define DCK_RUNS_REPRO_H

#include "runs/recording.h"
#include "runs/trace.h"

#include <jansson.h>
#include <stdbool.h>

/* A step a run recorded: in its trajectory, its tensor digests or its
 * trace (events: how many the recorder kept, truncated: it dropped more). */
typedef struct {
    long step;
    size_t events;
    bool truncated;
} dck_step_mark;

/* What a run recorded besides its trajectory, one file each: the steps of
 * its tensor digests and of its trace. One run recording a step that
 * another did not is a difference, never agreement. */
typedef enum { DCK_SIDE_TENSORS, DCK_SIDE_TRACE, DCK_NSIDES } dck_run_side;
extern const char *const dck_side_files[DCK_NSIDES]; /* DCK_RECORD_FILE, DCK_TRACE_FILE */

typedef struct {
    bool has; /* the file is there */
    dck_step_mark *steps;
    size_t n;
} dck_side_steps;

/* The steps of run dir's side files (absent: has false; a FIFO or a
 * dangling link is there, and refused). rec, when not NULL, keeps its
 * tensor digests (zeroed when absent; dck_recording_release). Release out
 * with dck_run_sides_release whatever the status. */
dck_status dck_run_sides_load(const char *dir, dck_side_steps out[DCK_NSIDES], dck_recording *rec);
void dck_run_sides_release(dck_side_steps s[DCK_NSIDES]);

/* The first step one ascending list has and the other lacks: 1 in a only,
 * 2 in b only (*step that step), 0 the same steps. */
int dck_steps_first_unpaired(const dck_step_mark *a, size_t na, const dck_step_mark *b, size_t nb, long *step);

/* What one run's recordings show against run 1's, in order. */
typedef enum {
    DCK_REPRO_STEPS,      /* side: a step one run only recorded */
    DCK_REPRO_TRUNCATED,  /* a traced step the recorder cut in one run, or at another event */
    DCK_REPRO_STATE_ONLY, /* state entries one run only recorded, at steps both recorded */
    DCK_REPRO_TENSOR      /* the first differing tensor (dck_recording_compare) */
} dck_repro_what;

typedef struct {
    dck_repro_what what;
    dck_run_side side; /* STEPS */
    int run;           /* STEPS, STATE_ONLY: 0 run 1's only, 1 the other run's */
    long step;         /* STEPS: the first step unpaired; else the step */
    size_t events[2];  /* TRUNCATED: the events each kept */
    bool truncated[2]; /* TRUNCATED: which the recorder cut */
    size_t count;      /* STATE_ONLY: how many entries */
    int kind;          /* TENSOR */
    const char *how;   /* TENSOR: "digest", "only in A", "only in B" */
    char *name;        /* STATE_ONLY: the first entry's; TENSOR: the tensor's (malloc'd, whole) */
} dck_repro_finding;

typedef struct {
    dck_repro_finding *f;
    size_t n;
    size_t truncated_alike; /* traced steps both cut at the same event: not compared past it */
    bool differ;            /* any finding */
    long at;                /* the earliest step a finding names (-1: none) */
    const char *at_what;    /* what differs there: "recorded_steps", "traced_steps",
                               "truncated_steps", "recorded_state", "tensor" */
} dck_repro_recordings;

/* Run b's recordings (sides, rec) against run 1's (a, rec_a): the same
 * steps of tensor digests and of traces, the same truncation of each
 * traced step, the same tensors in each common step, no state entry in
 * one only. DCK_ERR_NOMEM on trouble; release out with
 * dck_repro_recordings_release whatever the status. */
dck_status dck_repro_recordings_compare(const dck_side_steps a[DCK_NSIDES], const dck_recording *rec_a,
                                        const dck_side_steps b[DCK_NSIDES], const dck_recording *rec_b,
                                        dck_repro_recordings *out);
void dck_repro_recordings_release(dck_repro_recordings *r);

/* run.json in run folder dir (at most DCK_RUN_JSON_MAX bytes): its
 * settings object (*out, a new reference), or *out NULL with DCK_OK when
 * dir has none. On trouble *out is NULL and the error names the file:
 * unreadable (*unreadable true: not a regular file, too large), or not a
 * detcheck run header (detcheck_run, settings). */
enum { DCK_RUN_JSON_MAX = 1 << 20 };
dck_status dck_run_settings_load(const char *dir, json_t **out, bool *unreadable);

/* The settings of a run.json settings object s that make a run
 * nondeterministic as they are (man detcheck-repro(1), SETTINGS): their
 * keys and how they are ("false", "true", "unset"), at most max; how many. */
enum { DCK_SETTINGS_OFF_MAX = 8 };
size_t dck_settings_off(const json_t *s, const char **keys, const char **hows, size_t max);
/* The keys whose values differ between the runs' settings objects (NULL:
 * that run wrote none, passed over), in the order the runs recorded them,
 * each once: *keys malloc'd (the strings are the objects'), *n of them. */
dck_status dck_settings_differ(json_t *const *settings, size_t nruns, const char ***keys, size_t *n);

/* The determinism tax (repro --tax): runs alternate deterministic (even
 * indices, side 0) and not (odd, side 1). Per side: the median of its
 * runs' medians of step time, the least and the greatest; the ratio of the
 * sides' medians and its spread (least deterministic over greatest
 * non-deterministic, and the converse). */
typedef struct {
    double median[2], min[2], max[2];
    double ratio, ratio_min, ratio_max;
} dck_repro_tax;
/* The median of v (sorted in place; n > 0). */
double dck_median(double *v, size_t n);
/* From the medians of nruns runs (nruns even, at least 2): out.
 * DCK_ERR_INVALID when the non-deterministic runs' step times are 0 (no
 * ratio), DCK_ERR_NOMEM. */
dck_status dck_repro_tax_of(const double *run_medians, size_t nruns, dck_repro_tax *out);

#endif

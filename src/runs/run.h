/* A recorded run directory as one type (dck_run, detcheck_static.h): what
 * run.c reads of it, for the comparison of runs (compare.c). */
#ifndef DCK_RUNS_RUN_H
#define DCK_RUNS_RUN_H

#include "detcheck_static.h"
#include "runs/checkpoints.h"
#include "runs/trajectory.h"
#include "runs/recording.h"
#include "runs/trace.h"

struct dck_run {
    char *dir;              /* as given */
    dck_traj_rec *traj;     /* trajectory.jsonl (required) */
    size_t ntraj;
    bool has_rec;           /* tensor_digests.bin is there */
    dck_recording rec;
    bool has_trace;         /* trace.bin is there */
    dck_trace trace;
    long *ckpts;            /* complete checkpoints, ascending */
    size_t nckpts;
};

#endif

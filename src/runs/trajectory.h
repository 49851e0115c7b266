/* A run's trajectory (RUN/trajectory.jsonl; man detcheck-train(1), OUTPUT):
 * one JSON object per line and step, ascending, written by the trainer and
 * the Python Recorder,
 *   {"step":N,"loss":X,"loss_bits":"8 hex","grad_norm":X,
 *    "grad_norm_bits":"8 hex","lr":X[,"root":"32 hex"][,"step_time_s":X]}
 * (a value that is not finite is null). The one C reader and writer: runs
 * are compared by the bits, and a torn last line (a killed run) is no
 * record. */
#ifndef DCK_RUNS_TRAJECTORY_H
#define DCK_RUNS_TRAJECTORY_H

#include "common/common.h"

#include <stdio.h>

#define DCK_TRAJECTORY "trajectory.jsonl"

/* One trajectory record. lr_bits: the lr as float32 bits, what runs are
 * compared by; lr: the value as written (NaN: null), for the lines that
 * show it; step_time_s: the recorder's wall time of the step (NaN: absent,
 * or not a number >= 0), for repro --tax. */
typedef struct {
    long step;
    uint32_t loss_bits, grad_norm_bits, lr_bits;
    double lr, step_time_s;
    bool has_root;
    dck_digest root;
} dck_traj_rec;
/* One line of a trajectory file (its newline may be included); messages
 * name path:lineno. */
dck_status dck_traj_parse_line(const char *line, size_t len, const char *path, long lineno,
                               dck_traj_rec *r);
/* Reads DIR/trajectory.jsonl; a torn last line is ignored. */
dck_status dck_traj_load(const char *path, dck_traj_rec **recs, size_t *n);

/* Appends r's line to f, the trajectory at path (for messages): the loss,
 * grad norm and lr (of its bits) as the shortest decimals that read back
 * as the same floats, null when not finite; the loss and grad norm bits;
 * the root when r has one. Flushed: a full disk is DCK_ERR_IO naming path,
 * never a record thinned out. */
dck_status dck_traj_append(FILE *f, const char *path, const dck_traj_rec *r);
/* The record a reader gets from the line dck_traj_append writes for w:
 * the lr through its decimal as the reader takes it (lr_bits, lr; null:
 * 0 and NaN), step_time_s NaN. */
dck_traj_rec dck_traj_as_read(const dck_traj_rec *w);

/* First step present in both where loss, grad norm, lr or root (when both
 * have one) differ: returns 1 and sets *step and a description, else 0. */
int dck_traj_compare(const dck_traj_rec *a, size_t na, const dck_traj_rec *b, size_t nb,
                     long *step, char *what, size_t wlen);
/* The first step of lo..hi that trajectory t (ascending) holds no record
 * of, or -1 when it holds each: dck_traj_compare pairs the steps both
 * hold, so a step one run lacks is compared nowhere unless asked here. */
long dck_traj_first_missing(const dck_traj_rec *t, size_t n, long lo, long hi);
/* The first step of lo..hi both trajectories hold where one has a root
 * digest and the other none (dck_traj_compare compares a root only where
 * both have one), or -1; *in_a: a has it. */
long dck_traj_root_unmatched(const dck_traj_rec *a, size_t na, const dck_traj_rec *b, size_t nb, long lo, long hi,
                             bool *in_a);

#endif

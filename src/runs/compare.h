/* The comparison of two recorded runs (dck_runs_compare, detcheck_static.h)
 * and the parts of it that a caller with traces of its own uses (the user
 * form of resume-check compares two runs' traces over the steps it
 * resumed): compare.c. */
#ifndef DCK_RUNS_COMPARE_H
#define DCK_RUNS_COMPARE_H

#include "detcheck_static.h"
#include "runs/trace.h"

/* The plain form of d (dck_trace_compare of a and b): counts, the
 * differing events with their names copied; has and both are the caller's.
 * Release with dck_runs_trace_release. */
dck_status dck_runs_trace_from(const dck_trace *a, const dck_trace *b, const dck_trace_diff *d, dck_runs_trace *out);
/* Judges t against step, the earliest step where the trajectory or a
 * recorded tensor differs (-1: none), and kind, the first differing
 * tensor's kind at it (-1: none there; named: it has a name): bound, late,
 * ops, unseen, next (man detcheck-bisect(1), TRACES). */
void dck_runs_trace_judge(dck_runs_trace *t, const dck_trace *a, const dck_trace *b, long step, int kind, bool named);
void dck_runs_trace_release(dck_runs_trace *t);

#endif

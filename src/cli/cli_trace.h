/* The comparison of two runs' traces (trace.bin): loaded, judged and its
 * notes printed (cli_trace.c); its lines are report/trace_text.h's. */
#ifndef DCK_CLI_TRACE_H
#define DCK_CLI_TRACE_H

#include "cli.h"
#include "report/trace_text.h"

/* bisect's and repro's: f takes r (dck_runs_compare's, judged; r is left
 * empty), its notes are printed under cmd's name (with notes) and its lines made; kind
 * and name: the first differing tensor at r->bound (kind -1: none).
 * Non-zero, with a message, when out of memory. */
int cli_trace_take(const char *cmd, bool notes, const char *const runs[2], dck_runs_trace *r, int kind,
                   const char *name, cli_trace_first *f);

/* Compares runs[0]'s and runs[1]'s trace.bin when both have one (a warning
 * when one only has); non-zero, with a message under cmd's name, on
 * trouble. Release f with cli_trace_release in every case. */
int cli_trace_compare(const char *cmd, const char *const runs[2], cli_trace_first *f);
/* Judges f (cli_trace_compare's, found or not, traced or not) against
 * what the recordings found first: step, the earliest step where the
 * trajectory or a recorded tensor differs (-1: none), and kind and name,
 * the first differing tensor at that step (kind -1: none there). A trace
 * difference after that step is context, never the culprit (the runs
 * already differed: a module's weights, say, that the module trace does not
 * see); a gradient, parameter or optimizer state differing first at a step
 * the trace saw no difference in is said so (unseen); next says what would
 * localise further. Non-zero, with a message under cmd's name, when out
 * of memory. */
int cli_trace_judge(const char *cmd, cli_trace_first *f, long step, int kind, const char *name);
#endif

/* The comparison of two runs' traces (trace.bin): cli_trace.c. */
#ifndef DCK_CLI_TRACE_H
#define DCK_CLI_TRACE_H

#include "cli.h"
#include "report/report.h"
#include "detcheck_static.h"
#include "runs/trace.h"

/* Both runs traced (trace.bin): the first traced step in both where an
 * event differs, and in it the first event in execution order (r, the
 * library's dck_runs_trace), and its lines. */
typedef struct {
    bool has[2]; /* trace.bin in run A, run B */
    bool both, found;
    dck_trace t[2];   /* cli_trace_compare's: the traces it read */
    dck_trace_diff d; /* cli_trace_compare's */
    dck_runs_trace r; /* what is rendered: cli_trace_compare's and cli_trace_judge's, or cli_trace_take's */
    /* with found, malloc'd and whole however long the names (cli_trace_release) */
    char *line;       /* "first differing op: ..." / "execution differs ..." (names as in the file) */
    char *safe_line;  /* the same, fit for a terminal (cli_safe) */
    char *magnitudes; /* how to see the magnitudes of an output that differs ("" for execution) */
    char tensor[64];      /* the differing output's name in the dumps: "00014.output.0" */
    char dump[2][4096];   /* RUN/dump_step_S/trace.safetensors */
    bool dumps;           /* both dumps present */
    /* with r.unseen: "the module trace cannot see ...", whole (names as
     * recorded), or NULL; with r.late, line and safe_line say the trace's
     * difference is context, and magnitudes is "" */
    char *unseen;
    char *safe_unseen;    /* the same for a terminal */
} cli_trace_first;

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
void cli_trace_release(cli_trace_first *f);
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
/* The option of repro that does f->r.next ("--trace ops", "--dump-step K")
 * into buf; "" for none. */
const char *cli_trace_next_option(const cli_trace_first *f, char *buf, size_t n);
/* bisect's line for f->r.next ("next: ..." naming what to rerun for runs),
 * malloc'd, whole; "" for none; NULL when out of memory. */
char *cli_trace_next_line(const cli_trace_first *f, const char *const runs[2]);
/* "first_event": {step, event, phase, kind, module, op, call, output,
 * input, culprit, how, tensor, magnitudes, run_b, context}, or null. */
json_t *cli_trace_json(const cli_trace_first *f, bool *oom);
/* The report's case for the traces, classname CLASSNAME[.step_N.PHASE]. */
void cli_trace_report(cli_report *rep, const char *classname, const cli_trace_first *f);

#endif

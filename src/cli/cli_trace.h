/* The comparison of two runs' traces (trace.bin): cli_trace.c. */
#ifndef DCK_CLI_TRACE_H
#define DCK_CLI_TRACE_H

#include "cli.h"
#include "cli_report.h"
#include "train/train_trace.h"

/* Both runs traced (trace.bin): the first traced step in both where an
 * event differs, and in it the first event in execution order. The traces
 * stay loaded until the report is written: the difference points into
 * them. */
typedef struct {
    bool has[2]; /* trace.bin in run A, run B */
    bool both, found;
    dck_trace t[2];
    dck_trace_diff d;
    /* with found, malloc'd and whole however long the names (cli_trace_release) */
    char *line;       /* "first differing op: ..." / "execution differs ..." (names as in the file) */
    char *safe_line;  /* the same, fit for a terminal (cli_safe) */
    char *magnitudes; /* how to see the magnitudes of an output that differs ("" for execution) */
    char tensor[64];      /* the differing output's name in the dumps: "00014.output.0" */
    char dump[2][4096];   /* RUN/dump_step_S/trace.safetensors */
    bool dumps;           /* both dumps present */
} cli_trace_first;

/* Compares runs[0]'s and runs[1]'s trace.bin when both have one (a warning
 * when one only has); non-zero, with a message under cmd's name, on
 * trouble. Release f with cli_trace_release in every case. */
int cli_trace_compare(const char *cmd, const char *const runs[2], cli_trace_first *f);
void cli_trace_release(cli_trace_first *f);
/* "first_event": {step, event, phase, kind, module, op, call, output,
 * input, culprit, how, tensor, magnitudes, run_b}, or null. */
json_t *cli_trace_json(const cli_trace_first *f, bool *oom);
/* The report's case for the traces, classname CLASSNAME[.step_N.PHASE]. */
void cli_trace_report(cli_report *rep, const char *classname, const cli_trace_first *f);

#endif

/* Two runs' traces (trace.bin) as bisect, repro and resume-check show
 * them: the first differing event's lines, JSON and report case
 * (trace_text.c). */
#ifndef DCK_REPORT_TRACE_TEXT_H
#define DCK_REPORT_TRACE_TEXT_H

#include "report/report.h"
#include "report/json.h"
#include "detcheck_static.h"
#include "runs/trace.h"
#include "runs/compare.h"

/* Both runs traced (trace.bin): the first traced step in both where an
 * event differs, and in it the first event in execution order (r, the
 * library's dck_runs_trace), and its lines. */
typedef struct {
    bool has[2]; /* trace.bin in run A, run B */
    bool both, found;
    dck_trace t[2];   /* cli/cli_trace.c's cli_trace_compare: the traces it read */
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

void cli_trace_release(cli_trace_first *f);
/* f's lines of its difference (f->r found, runs its folders: the dumps'
 * paths); DCK_ERR_OOM with f released and not found. */
dck_status cli_trace_found_lines(const char *const runs[2], cli_trace_first *f);
/* The lines of f's judgement (f->r judged against the recordings' first
 * differing tensor, kind and name, kind -1: none): unseen, and a late
 * difference's context lines; DCK_ERR_OOM when out of memory. */
dck_status cli_trace_judged_lines(cli_trace_first *f, int kind, const char *name);
/* f (zeroed first) takes r (dck_runs_compare's, judged; r is left
 * empty) and makes its lines; kind and name as cli_trace_judged_lines.
 * Release f with cli_trace_release in every case. */
dck_status cli_trace_adopt(const char *const runs[2], dck_runs_trace *r, int kind, const char *name,
                           cli_trace_first *f);
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

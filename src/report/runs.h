/* What bisect and repro say of the comparison of two runs
 * (dck_runs_compare): its lines and its JSON document (runs.c). */
#ifndef DCK_REPORT_RUNS_H
#define DCK_REPORT_RUNS_H

#include "report/report.h"
#include "report/json.h"
#include "report/trace_text.h"

#include <stdio.h>

typedef struct {
    const char *runs[2];
    const dck_runs_result *res;
    cli_trace_first trf;                   /* the traces' lines (res's trace, taken) */
    char *gap_lines[DCK_RUNS_MAX_GAPS];    /* after "not compared: ", names as recorded */
    const char *first_what;                /* what parts at the first step when the trajectories
                                              part later ("a recorded tensor"), or NULL */
    char replay[8192];                     /* the command that replays the divergence, or "" */
    char *next;                            /* "next: ...", or "" */
    char next_option[64];                  /* repro's option for it, or "" */
} cli_runs_verdict;

/* The text after "not compared: " of a gap (man detcheck-bisect(1)),
 * malloc'd, whole; NULL when out of memory. */
char *cli_runs_gap_text(const dck_runs_gap *g);
/* The text after "not compared: " of gap i. */
const char *cli_runs_gap_line(const cli_runs_verdict *v, size_t i);
/* bisect --json's document. */
json_t *cli_runs_json(const cli_runs_verdict *v, bool *oom);
/* What a first differing tensor's how ("digest", "only in A", "only in
 * B") says: after its name on the terminal, and as a report's failure. */
typedef struct {
    const char *how, *suffix, *what, *type;
} cli_runs_how;
const cli_runs_how *cli_runs_how_of(const char *how);
/* bisect's lines (quiet: -q's), at most limit tensors (0: all). */
void cli_runs_print(FILE *out, const cli_runs_verdict *v, bool quiet, long limit);
/* The same lines as -q prints them, appended whole to the array *lines of
 * *n; DCK_ERR_NOMEM when out of memory. */
dck_status cli_runs_lines(const cli_runs_verdict *v, long limit, char ***lines, size_t *n);

#endif

/* What bisect and repro say of the comparison of two runs
 * (dck_runs_compare): its lines, its JSON document, the replay command and
 * what would localise further. cli_runs.c. */
#ifndef DCK_CLI_RUNS_H
#define DCK_CLI_RUNS_H

#include "cli.h"
#include "report/report.h"
#include "cli_trace.h"

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

/* v from res (its trace is taken into v->trf); with notes, the trace's
 * notes printed under cmd's name. Non-zero, with a message, on trouble. Release v with
 * cli_runs_verdict_release in every case. */
int cli_runs_verdict_make(const char *cmd, bool notes, const char *const runs[2], dck_runs_result *res,
                          cli_runs_verdict *v);
void cli_runs_verdict_release(cli_runs_verdict *v);
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

/* --junit, --markdown, --html by getopt code for bisect and repro; arg
 * NULL or "": its value is missing. 1 taken, 0 not one of them, -1 misuse
 * (the usage message printed). */
int cli_runs_report_option(cli_report *rep, int code, const char *arg);

#endif

/* The verdict of bisect and repro on two runs (dck_runs_compare): made
 * here (cli_runs.c), shown by report/runs.h. */
#ifndef DCK_CLI_RUNS_H
#define DCK_CLI_RUNS_H

#include "cli.h"
#include "report/runs.h"
#include "cli_trace.h"

/* v from res (its trace is taken into v->trf); with notes, the trace's
 * notes printed under cmd's name. Non-zero, with a message, on trouble. Release v with
 * cli_runs_verdict_release in every case. */
int cli_runs_verdict_make(const char *cmd, bool notes, const char *const runs[2], dck_runs_result *res,
                          cli_runs_verdict *v);
void cli_runs_verdict_release(cli_runs_verdict *v);
/* --junit, --markdown, --html by getopt code for bisect and repro; arg
 * NULL or "": its value is missing. 1 taken, 0 not one of them, -1 misuse
 * (the usage message printed). */
int cli_runs_report_option(cli_report *rep, int code, const char *arg);

#endif

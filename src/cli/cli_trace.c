/* The comparison of two runs' traces (trace.bin) for bisect, repro and
 * the user form of resume-check: loaded, judged, and its notes printed;
 * its lines, JSON and report case are report/trace_text.c's. */
#include "cli_trace.h"
#include "runs/compare.h"
#include "runs/recording.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Whether run dir holds path at all: a FIFO or a dangling link is there
 * (and refused when read, naming it), only ENOENT is absence. */
static bool present(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0 || errno != ENOENT;
}


/* The notes on what was not compared: a trace in one run only, steps the
 * recorder truncated. */
static int print_notes(const char *cmd, const char *const runs[2], const dck_runs_trace *r) {
    for (int k = 0; k < 2; k++) {
        char *p = dck_path_join(runs[k], DCK_TRACE_FILE);
        if (!p) return cli_fail(cmd, dck_oom(NULL));
        if (r->has[k] && !r->has[1 - k])
            cli_warn(cmd, "%s: traced in run %c only; the traces are not compared", p, 'A' + k);
        else if (r->truncated[k])
            cli_info(cmd, "note: %s: %zu compared traced step%s truncated by the recorder (first: step %ld); "
                     "events past the bound are not compared", p, r->truncated[k],
                     r->truncated[k] == 1 ? "" : "s", r->first_truncated[k]);
        free(p);
    }
    return 0;
}

/* Compares the runs' trace.bin when both have one; non-zero (and a message
 * printed) on trouble. */
int cli_trace_compare(const char *cmd, const char *const runs[2], cli_trace_first *f) {
    memset(f, 0, sizeof *f);
    char *p[2] = {dck_path_join(runs[0], DCK_TRACE_FILE), dck_path_join(runs[1], DCK_TRACE_FILE)};
    int rc = 0;
    if (!p[0] || !p[1]) {
        rc = cli_fail(cmd, dck_oom(NULL));
        goto out;
    }
    for (int k = 0; k < 2; k++) f->r.has[k] = f->has[k] = present(p[k]);
    f->r.both = f->both = f->has[0] && f->has[1];
    f->r.first_truncated[0] = f->r.first_truncated[1] = -1;
    dck_status s = DCK_OK;
    if (f->both) {
        s = dck_trace_load(p[0], &f->t[0]);
        if (!s) s = dck_trace_load(p[1], &f->t[1]);
        if (!s) {
            f->found = dck_trace_compare(&f->t[0], &f->t[1], &f->d);
            s = dck_runs_trace_from(&f->t[0], &f->t[1], &f->d, &f->r);
        }
    }
    if (s) {
        rc = cli_fail(cmd, s);
        cli_trace_release(f);
        goto out;
    }
    if ((rc = print_notes(cmd, runs, &f->r))) goto out;
    if (f->found && (s = cli_trace_found_lines(runs, f))) rc = cli_fail(cmd, s);
out:
    free(p[0]);
    free(p[1]);
    return rc;
}

int cli_trace_judge(const char *cmd, cli_trace_first *f, long step, int kind, const char *name) {
    dck_runs_trace_judge(&f->r, &f->t[0], &f->t[1], step, kind, name != NULL);
    dck_status s = cli_trace_judged_lines(f, kind, name);
    return s ? cli_fail(cmd, s) : 0;
}

int cli_trace_take(const char *cmd, bool notes, const char *const runs[2], dck_runs_trace *r, int kind,
                   const char *name, cli_trace_first *f) {
    memset(f, 0, sizeof *f);
    int rc = notes ? print_notes(cmd, runs, r) : 0;
    dck_status s = rc ? DCK_OK : cli_trace_adopt(runs, r, kind, name, f);
    return rc ? rc : s ? cli_fail(cmd, s) : 0;
}

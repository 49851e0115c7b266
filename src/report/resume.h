/* resume-check's results and their words (resume.c): the stop points of
 * the user's command form (`-- CMD`) and the interrupted runs of the
 * built-in trainer form, as lines, the --json document and the
 * --junit/--markdown/--html reports. The command (src/cli/) runs the
 * processes, fills these results and prints what is rendered here; the
 * comparisons are the library's resume diagnosis (runs/resume.h). See man
 * detcheck-resume-check(1). */
#ifndef DCK_REPORT_RESUME_H
#define DCK_REPORT_RESUME_H

#include "report/report.h"
#include "runs/resume.h"

#include <jansson.h>
#include <stdbool.h>

/* ------------------------------------------------------------------ -- CMD: one stop point */

typedef struct {
    long at;
    bool kill, done;
    bool parted;       /* the stop run parted from the uninterrupted run before its stop */
    int result;        /* 0 identical, 1 different, 2 trouble */
    long first_step;   /* -1: none */
    long index;        /* resumed_index, -1: none */
    const char *cause; /* NULL: none */
    /* names whole (recorded names run to DCK_REC_NAME_MAX bytes, a command
     * line to any length): malloc'd, NULL none */
    char *state;        /* the state entry the cause names */
    char *line;         /* "at K (...): ..." */
    char *not_compared; /* what both runs left out alike (events past the trace bound) */
    char trace[4096];   /* with --trace: the first differing module or op of the resumed steps, "" none */
    json_t *event;      /* its JSON (bisect's "first_event"), or NULL */
    char *next;         /* "next: ..." when no resume mistake names the difference, malloc'd, NULL none */
} cli_resume_stop;

void cli_resume_stop_release(cli_resume_stop *s);
/* "SIGKILL after the checkpoint" or "clean stop" */
const char *cli_resume_mode(const cli_resume_stop *s);
/* s->line, or "(out of memory)" */
const char *cli_resume_line(const cli_resume_stop *s);
/* s->line := "at K (MODE): " and the formatted text, whole (NULL when out
 * of memory). */
void cli_resume_stop_line(cli_resume_stop *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A gap (dck_resume_gap) between the uninterrupted run and the stopped
 * run (resumed false: before the stop) or the resumed run; span: what is
 * compared ("every resumed step 6..10"). Sets the line, and s->state for
 * a state entry. */
void cli_resume_gap_line(cli_resume_stop *s, const dck_resume_gap *g, bool resumed, const char *span);
/* The resumed run's first difference at D = p->step (stop point K), with
 * its cause d: s->cause, s->state and the line. Non-zero when out of
 * memory. */
int cli_resume_cause_line(cli_resume_stop *s, long K, const dck_resume_parting *p, const dck_resume_diagnosis *d);
/* A difference that only the traces found, at step tstep: the line names
 * s->trace, which it takes (s->trace becomes ""). */
void cli_resume_trace_line(cli_resume_stop *s, long tstep);
/* The stopped run parts from the uninterrupted run at D = p->step before
 * its stop: the line says what was equal at D (t), where that puts the
 * difference and how to see it (cmdline: the command, shell words).
 * Non-zero when out of memory. */
int cli_resume_before_line(cli_resume_stop *s, const dck_resume_parting *p, const dck_resume_tally *t,
                           const char *cmdline);

/* ------------------------------------------------------------------ -- CMD: the verdict */

typedef struct {
    const cli_resume_stop *stops;
    int nstops;
    char *const *cmd; /* the command's words */
    int ncmd;
    const char *cmdline;  /* the same, shell words */
    bool kill;
    long steps;           /* the uninterrupted run's last step, -1: none */
    int rc;               /* the exit status */
    const char *error;    /* the trouble (NULL: "trouble (out of memory)") */
    const char *tail;     /* the failed run's last stderr lines, or NULL */
    const char *work;     /* the work folder */
    bool keep;            /* kept */
    const char *full_dir; /* the uninterrupted run's recording */
    /* cli_resume_user_summarize's */
    int ndiff, nincomplete; /* stop points that differ; incomplete ones */
    int nbefore, nclean;    /* runs that parted before their stop; that did not */
    bool intermittent;
    const char *not_compared; /* what the stop points left out alike */
} cli_resume_user_result;

/* The counts of r (from r->stops), and the exit status they give (2 when
 * trouble). */
int cli_resume_user_summarize(cli_resume_user_result *r, bool trouble);
/* The lines the command prints after the stop points: "intermittent: ..."
 * (NULL: none) and the verdict; malloc'd, NULL when out of memory. */
char *cli_resume_user_intermittent(const cli_resume_user_result *r);
char *cli_resume_user_title(const cli_resume_user_result *r);
/* The report's title, properties, one case per stop point and the page's
 * figure. */
void cli_resume_user_report(cli_report *rep, const cli_resume_user_result *r, const char *title);
/* The --json document; *oom as for cli_jset. */
json_t *cli_resume_user_json(const cli_resume_user_result *r, bool *oom);

/* ------------------------------------------------------------------ the built-in trainer */

/* One interrupted run against the reference. */
typedef struct {
    char name[64];    /* "killed_after_K", "killed_during_D" */
    char what[1024];
    long first_step;  /* -1: none */
    char tensor[512];
    int result;       /* 0 identical, 1 different, 2 trouble */
} cli_resume_check_case;

/* c's words for d, the trajectories' verdict: what := "first differing
 * step S: ...", result 1 (nothing when d found none). */
void cli_resume_check_trajectory(cli_resume_check_case *c, const dck_resume_traj_verdict *d);
/* c's words for the final checkpoints' comparison r when tensors differ:
 * appended to what, result 1. */
void cli_resume_check_final(cli_resume_check_case *c, const dck_cmp_result *r);

typedef struct {
    const cli_resume_check_case *cases;
    int n;
    int worst;   /* 0, 1, 2 */
    long steps;
    const char *at, *work;
    bool show_work; /* the work folder stays: a property of the report */
} cli_resume_check_result;

/* The verdict line the command prints (malloc'd, NULL when out of
 * memory). */
char *cli_resume_check_title(const cli_resume_check_result *r);
json_t *cli_resume_check_json(const cli_resume_check_result *r, bool *oom);
void cli_resume_check_report(cli_report *rep, const cli_resume_check_result *r);

#endif

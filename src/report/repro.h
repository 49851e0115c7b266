/* What repro says of its runs (man detcheck-repro(1)): the lines of a
 * run's recordings against run 1's, the determinism settings, and each
 * run's entry of the --json document (repro.c). */
#ifndef DCK_REPORT_REPRO_H
#define DCK_REPORT_REPRO_H

#include "report/json.h"
#include "report/report.h"
#include "runs/repro.h"

#include <stdio.h>

/* The lines of f (run number run's recordings against run 1's: a and b
 * their sides) appended to *lines, whole; the first differing tensor's
 * only when bisect said the runs agree (bisect_same: its own line is
 * missing). Where f names an earlier step than bisect's first differing
 * one (div_step, -1: none), f's lines lead and bisect's step line, one of
 * the first nbisect, no longer claims to be the first. DCK_ERR_NOMEM when
 * out of memory. */
dck_status cli_repro_recording_lines(const dck_repro_recordings *f, const dck_side_steps a[DCK_NSIDES],
                                     const dck_side_steps b[DCK_NSIDES], int run, bool bisect_same, long div_step,
                                     char ***lines, size_t *nlines);

/* The settings of s that are off (dck_settings_off), as "key=value, ..."
 * into buf (and as strings into arr when not NULL). */
void cli_repro_settings_off(const json_t *s, char *buf, size_t len, json_t *arr, bool *oom);
/* Prints on out (and adds to doc, when not NULL, as settings_off and
 * settings_differ) what the n runs recorded (settings[i]: run i+1's, NULL
 * for none): the settings that are off, per run or for every run, and
 * those that differ; summary, the line for the reports. */
void cli_repro_settings(json_t *const *settings, int n, FILE *out, json_t *doc, bool *oom, char *summary,
                        size_t slen);

/* One run as the --json document's "runs" show it. */
typedef struct {
    const char *dir, *var, *value; /* var "": nothing varied */
    int status;                    /* its exit status, <0: none */
    double seconds;
    long records;
    json_t *settings; /* run.json's, or NULL */
    int bisect;       /* the comparison with run 1: 0 identical */
    json_t *result;   /* bisect's --json document of it, or NULL */
    char *const *lines; /* the lines of its difference, whole */
    size_t nlines;
    long div_step;        /* its first differing step, -1 unknown */
    const char *div_what; /* what differs there ("trajectory", "tensor", "recorded_steps"...), or NULL */
    const dck_step_mark *steps; /* its trajectory's, records of them */
    long first_step, last_step;
} cli_repro_run;
/* Run number i (0: run 1); tax: its median step time instead of the
 * comparison. */
json_t *cli_repro_run_json(const cli_repro_run *r, int i, bool tax, double median, bool *oom);
/* The verdict over nruns runs: ndiff differ from run 1, first (an index)
 * the one that differs first; truncated traced steps cut alike in every
 * run, incomplete when that is not accepted; tensors: run 1 recorded
 * tensor digests; next the line of what would localise further ("": none). */
typedef struct {
    int nruns, ndiff, first;
    long truncated;
    bool incomplete, tensors;
    const char *next;
} cli_repro_verdict;
/* The verdict's lines on out (r1 run 1, f the run that differs first), the
 * first of them into title. */
void cli_repro_verdict_print(FILE *out, const cli_repro_run *r1, const cli_repro_run *f, const cli_repro_verdict *v,
                             char *title, size_t tlen);
/* The document's "first_divergence": run number i, f, the first run that
 * differs from run 1; next, the verdict's last line ("": none). */
json_t *cli_repro_divergence_json(const cli_repro_run *f, int i, const char *next, bool *oom);
/* The reports' case of run number i (0: run 1, the reference; records1 its
 * steps); summary, the settings line for a failure's detail ("": none). */
void cli_repro_run_case(cli_report *rep, const cli_repro_run *r, int i, long records1, const char *summary);

/* repro --tax's lines on out, the first (the verdict) into title: nper
 * runs per side, tmin..tmax steps timed per run. */
void cli_repro_tax_print(FILE *out, const dck_repro_tax *t, size_t nper, size_t tmin, size_t tmax, char *title,
                         size_t tlen);
/* The document's "tax": med[i] run i's median step time (even i:
 * deterministic), summary the settings line ("": none). */
json_t *cli_repro_tax_json(const dck_repro_tax *t, const double *med, size_t nruns, const char *summary, bool *oom);

#endif

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
} cli_repro_run;
/* Run number i (0: run 1); tax: its median step time instead of the
 * comparison. */
json_t *cli_repro_run_json(const cli_repro_run *r, int i, bool tax, double median, bool *oom);

#endif

/* What repro says of its runs (repro.h, man detcheck-repro(1)): the
 * library's findings on the runs' recordings and settings (runs/repro.c)
 * as lines, JSON and the reports' summary. */
#include "report/repro.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const side_what[DCK_NSIDES] = {"tensor digests", "traced steps"};

/* "4 steps (0..3)", or why none. */
static void side_text(const dck_side_steps *s, int k, char *buf, size_t n) {
    if (!s->has) snprintf(buf, n, "none (no %s)", dck_side_files[k]);
    else if (!s->n) snprintf(buf, n, "none (its %s holds no step)", dck_side_files[k]);
    else
        snprintf(buf, n, "%zu step%s (%ld..%ld)", s->n, s->n == 1 ? "" : "s", s->steps[0].step,
                 s->steps[s->n - 1].step);
}

/* The line of finding x of run number run. */
static int finding_line(const dck_repro_finding *x, const dck_side_steps a[DCK_NSIDES],
                        const dck_side_steps b[DCK_NSIDES], int run, bool bisect_same, char ***lines,
                        size_t *nlines) {
    char sa[128], sb[128], only[64] = "";
    switch (x->what) {
    case DCK_REPRO_STEPS:
        side_text(&a[x->side], x->side, sa, sizeof sa);
        side_text(&b[x->side], x->side, sb, sizeof sb);
        return cli_lines_add(lines, nlines, "%s: run 1 recorded %s, run %d %s; step %ld recorded in run %d only",
                             side_what[x->side], sa, run, sb, x->step, x->run ? run : 1);
    case DCK_REPRO_TRUNCATED:
        return cli_lines_add(lines, nlines,
                             "traced step %ld: run 1 kept %zu events%s, run %d %zu%s; the events past the "
                             "shorter are not compared",
                             x->step, x->events[0], x->truncated[0] ? " (truncated by the recorder)" : "", run,
                             x->events[1], x->truncated[1] ? " (truncated by the recorder)" : "");
    case DCK_REPRO_STATE_ONLY:
        return cli_lines_add(lines, nlines, "state entries recorded in run %d only: %zu, the first %s at step %ld",
                             x->run ? run : 1, x->count, cli_safe(x->name), x->step);
    case DCK_REPRO_TENSOR:
        if (!bisect_same) return 0; /* bisect said otherwise: its own line is missing */
        if (strcmp(x->how, "digest"))
            snprintf(only, sizeof only, " (recorded in run %d only)", !strcmp(x->how, "only in A") ? 1 : run);
        return cli_lines_add(lines, nlines, "first differing tensor: step %ld, %s %s%s", x->step,
                             dck_rec_kind_name((dck_rec_kind)x->kind), cli_safe(x->name), only);
    }
    return 0;
}

dck_status cli_repro_recording_lines(const dck_repro_recordings *f, const dck_side_steps a[DCK_NSIDES],
                                     const dck_side_steps b[DCK_NSIDES], int run, bool bisect_same, long div_step,
                                     char ***lines, size_t *nlines) {
    size_t nbisect = *nlines; /* bisect's, before repro's own */
    for (size_t i = 0; i < f->n; i++)
        if (finding_line(&f->f[i], a, b, run, bisect_same, lines, nlines)) return dck_oom(NULL);
    if (!f->differ || div_step < 0 || f->at < 0 || f->at >= div_step) return DCK_OK;
    /* repro's own finding comes first: its lines lead, and bisect's step
     * line no longer claims to be the first (one step in every line: the
     * header's) */
    static const char pre[] = "first differing step: ";
    char **v = *lines;
    for (size_t k = 0; k < nbisect; k++)
        if (!strncmp(v[k], pre, sizeof pre - 1)) {
            char *l = NULL;
            if (asprintf(&l, "what both runs recorded first differs at step %s", v[k] + sizeof pre - 1) < 0)
                return dck_oom(NULL);
            free(v[k]);
            v[k] = l;
        }
    for (size_t k = nbisect; k < *nlines; k++) { /* rotate repro's lines to the front */
        char *l = v[k];
        memmove(&v[k - nbisect + 1], &v[k - nbisect], nbisect * sizeof *v);
        v[k - nbisect] = l;
    }
    return DCK_OK;
}

void cli_repro_settings_off(const json_t *s, char *buf, size_t len, json_t *arr, bool *oom) {
    const char *keys[DCK_SETTINGS_OFF_MAX], *hows[DCK_SETTINGS_OFF_MAX];
    size_t n = dck_settings_off(s, keys, hows, DCK_SETTINGS_OFF_MAX);
    buf[0] = 0;
    for (size_t i = 0; i < n; i++) {
        size_t at = strlen(buf);
        snprintf(buf + at, len - at, "%s%s=%s", at ? ", " : "", keys[i], hows[i]);
        if (arr) cli_jappend(arr, json_string(keys[i]), oom);
    }
}

/* A setting's value as text: strings bare, null as "unset". */
static void value_text(json_t *v, char *buf, size_t len) {
    if (!v) snprintf(buf, len, "absent");
    else if (json_is_null(v)) snprintf(buf, len, "unset");
    else if (json_is_string(v)) snprintf(buf, len, "%s", json_string_value(v));
    else {
        char *d = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        snprintf(buf, len, "%s", d ? d : "?");
        free(d);
    }
}

void cli_repro_settings(json_t *const *settings, int n, FILE *out, json_t *doc, bool *oom, char *summary,
                        size_t slen) {
    char first[1024], cur[1024];
    int known = 0;
    bool same = true;
    json_t *offs = json_array(), *diffs = json_array();
    summary[0] = 0;
    for (int i = 0; i < n; i++) {
        if (!settings[i]) continue;
        json_t *names = json_array();
        cli_repro_settings_off(settings[i], cur, sizeof cur, names, oom);
        json_t *e = json_object();
        cli_jset(e, "run", json_integer(i + 1), oom);
        cli_jset(e, "off", names, oom);
        cli_jappend(offs, e, oom);
        if (!known++) snprintf(first, sizeof first, "%s", cur);
        else if (strcmp(first, cur)) same = false;
    }
    if (known && same && first[0]) {
        fprintf(out, "determinism settings off: %s (%s)\n", first, known == n ? "every run" : "every run that wrote run.json");
        snprintf(summary, slen, "determinism settings off: %s", first);
    } else if (known && same) {
        fprintf(out, "determinism settings: none off\n");
    } else if (known) {
        fprintf(out, "determinism settings off:\n");
        for (int i = 0; i < n; i++) {
            if (!settings[i]) continue;
            cli_repro_settings_off(settings[i], cur, sizeof cur, NULL, oom);
            fprintf(out, "  run %d: %s\n", i + 1, cur[0] ? cur : "none");
            size_t at = strlen(summary);
            snprintf(summary + at, slen - at, "%srun %d: %s", at ? "; " : "determinism settings off: ", i + 1,
                     cur[0] ? cur : "none");
        }
    }
    const char **keys = NULL;
    size_t nkeys = 0;
    if (dck_settings_differ(settings, (size_t)n, &keys, &nkeys)) *oom = true;
    for (size_t d = 0; d < nkeys; d++) {
        const char *key = keys[d];
        if (!d) fprintf(out, "settings that differ between runs:");
        fprintf(out, "%s %s (", d ? ";" : "", key);
        json_t *e = json_object(), *vals = json_array();
        cli_jset(e, "name", cli_json_text(key), oom);
        for (int j = 0, k = 0; j < n; j++) {
            if (!settings[j]) continue;
            json_t *w = json_object_get(settings[j], key);
            value_text(w, cur, sizeof cur);
            fprintf(out, "%srun %d: %s", k++ ? ", " : "", j + 1, cli_safe(cur));
            cli_jappend(vals, w ? json_incref(w) : json_null(), oom);
        }
        fprintf(out, ")");
        cli_jset(e, "values", vals, oom);
        cli_jappend(diffs, e, oom);
    }
    if (nkeys) fprintf(out, "\n");
    free(keys);
    if (doc) {
        cli_jset(doc, "settings_off", offs, oom);
        cli_jset(doc, "settings_differ", diffs, oom);
    } else {
        json_decref(offs);
        json_decref(diffs);
    }
}

json_t *cli_repro_run_json(const cli_repro_run *r, int i, bool tax, double median, bool *oom) {
    json_t *e = json_object();
    cli_jset(e, "run", json_integer(i + 1), oom);
    cli_jset(e, "dir", cli_json_text(r->dir), oom);
    json_t *env = json_object();
    if (r->var[0]) cli_jset(env, r->var, cli_json_text(r->value), oom);
    cli_jset(e, "env", env, oom);
    cli_jset(e, "exit", r->status >= 0 ? json_integer(r->status) : json_null(), oom);
    cli_jset(e, "seconds", cli_json_number("%.3f", r->seconds), oom);
    cli_jset(e, "steps", json_integer(r->records), oom);
    cli_jset(e, "settings", r->settings ? json_incref(r->settings) : json_null(), oom);
    if (tax) {
        cli_jset(e, "median_step_time_s", cli_json_number("%.6g", median), oom);
    } else if (i > 0 && r->result) {
        cli_jset(e, "identical", json_boolean(r->bisect == 0), oom);
        json_t *b = json_object_get(r->result, "first_step");
        cli_jset(e, "first_step", json_incref(b ? b : json_null()), oom);
        b = json_object_get(r->result, "first_tensor");
        cli_jset(e, "first_tensor", json_incref(b ? b : json_null()), oom);
        b = json_object_get(r->result, "first_event");
        cli_jset(e, "first_event", json_incref(b ? b : json_null()), oom);
    }
    return e;
}

void cli_repro_tax_print(FILE *out, const dck_repro_tax *t, size_t nper, size_t tmin, size_t tmax, char *title,
                         size_t tlen) {
    snprintf(title, tlen,
             "determinism tax: %.2fx step time (deterministic %.4g s / non-deterministic %.4g s, "
             "medians; spread %.2fx..%.2fx; wall clock)",
             t->ratio, t->median[0], t->median[1], t->ratio_min, t->ratio_max);
    fprintf(out, "%s\n", title);
    static const char *const label[2] = {"deterministic (DETCHECK_DETERMINISTIC=1):    ",
                                         "non-deterministic (DETCHECK_DETERMINISTIC=0):"};
    for (int k = 0; k < 2; k++)
        fprintf(out, "  %s median %.4g s/step, spread %.4g..%.4g s (per-run medians of %zu runs)\n", label[k],
                t->median[k], t->min[k], t->max[k], nper);
    if (tmin == tmax)
        fprintf(out, "  clock: wall (step_time_s as the recorder measured it); %zu steps timed per run, "
                     "the first step of each run skipped (warm-up)\n", tmin);
    else
        fprintf(out, "  clock: wall (step_time_s as the recorder measured it); %zu..%zu steps timed per "
                     "run, the first step of each run skipped (warm-up)\n", tmin, tmax);
}

json_t *cli_repro_tax_json(const dck_repro_tax *t, const double *med, size_t nruns, const char *summary, bool *oom) {
    json_t *o = json_object();
    cli_jset(o, "clock", json_string("wall"), oom);
    cli_jset(o, "ratio", cli_json_number("%.6g", t->ratio), oom);
    cli_jset(o, "ratio_min", cli_json_number("%.6g", t->ratio_min), oom);
    cli_jset(o, "ratio_max", cli_json_number("%.6g", t->ratio_max), oom);
    static const char *const key[2] = {"deterministic", "nondeterministic"};
    for (size_t k = 0; k < 2; k++) {
        json_t *s = json_object(), *v = json_array();
        cli_jset(s, "median_s", cli_json_number("%.6g", t->median[k]), oom);
        cli_jset(s, "min_s", cli_json_number("%.6g", t->min[k]), oom);
        cli_jset(s, "max_s", cli_json_number("%.6g", t->max[k]), oom);
        for (size_t i = k; i < nruns; i += 2) cli_jappend(v, cli_json_number("%.6g", med[i]), oom);
        cli_jset(s, "run_medians_s", v, oom);
        cli_jset(o, key[k], s, oom);
    }
    cli_jset(o, "warmup_steps_skipped", json_integer(1), oom);
    cli_jset(o, "settings", summary[0] ? cli_json_text(summary) : json_null(), oom);
    return o;
}

json_t *cli_repro_divergence_json(const cli_repro_run *f, int i, const char *next, bool *oom) {
    json_t *fd = json_object(), *lines = json_array();
    cli_jset(fd, "run", json_integer(i + 1), oom);
    cli_jset(fd, "step", f->div_step >= 0 ? json_integer(f->div_step) : json_null(), oom);
    cli_jset(fd, "what", f->div_what ? json_string(f->div_what) : json_null(), oom);
    json_t *v = json_object_get(f->result, "detail");
    cli_jset(fd, "detail", json_incref(v ? v : json_null()), oom);
    v = json_object_get(f->result, "first_tensor");
    cli_jset(fd, "tensor", json_incref(v ? v : json_null()), oom);
    v = json_object_get(f->result, "first_event");
    cli_jset(fd, "event", json_incref(v ? v : json_null()), oom);
    for (size_t k = 0; k < f->nlines; k++) cli_jappend(lines, cli_json_text(f->lines[k]), oom);
    cli_jset(fd, "lines", lines, oom);
    bool is_next = !strncmp(next, "next: ", 6);
    cli_jset(fd, "magnitudes", next[0] && !is_next ? cli_json_text(next) : json_null(), oom);
    cli_jset(fd, "next", next[0] ? cli_json_text(next) : json_null(), oom);
    return fd;
}

void cli_repro_run_case(cli_report *rep, const cli_repro_run *r, int i, long records1, const char *summary) {
    char msg[4096], nm[32], var[320] = "";
    snprintf(nm, sizeof nm, "run_%d", i + 1);
    if (r->var[0]) snprintf(var, sizeof var, " (%s=%s)", r->var, r->value);
    if (i == 0) {
        snprintf(msg, sizeof msg, "reference run%s: %ld steps", var, r->records);
        cli_report_case(rep, "detcheck.repro", nm, CLI_CASE_PASS, NULL, msg, NULL);
        return;
    }
    if (r->bisect == 0) {
        snprintf(msg, sizeof msg, "identical to run 1%s: %ld steps", var, r->records);
        cli_report_case(rep, "detcheck.repro", nm, CLI_CASE_PASS, NULL, msg, NULL);
        return;
    }
    /* bisect's lines whole (their names have no bound) */
    char *text = NULL;
    size_t tlen = 0;
    FILE *m = open_memstream(&text, &tlen);
    if (m) {
        fprintf(m, "differs from run 1%s", var);
        for (size_t k = 0; k < r->nlines; k++) fprintf(m, "; %s", r->lines[k]);
        if (!r->nlines) fprintf(m, "; steps recorded: run 1 %ld, run %d %ld", records1, i + 1, r->records);
        if (fclose(m) != 0) {
            free(text);
            text = NULL;
        }
    }
    json_t *ft = json_object_get(r->result, "first_tensor");
    if (text)
        cli_report_case(rep, "detcheck.repro", nm, CLI_CASE_FAIL, ft && json_is_object(ft) ? "digest" : "trajectory",
                        text, summary[0] ? summary : NULL);
    else
        rep->oom = true;
    free(text);
}

void cli_repro_verdict_print(FILE *out, const cli_repro_run *r1, const cli_repro_run *f, const cli_repro_verdict *v,
                             char *title, size_t tlen) {
    if (!v->ndiff) {
        char aside[256] = "";
        if (v->truncated)
            snprintf(aside, sizeof aside,
                     "; not compared: the events past the recorder's bound in %ld traced step%s (truncated alike in "
                     "every run)%s",
                     v->truncated, v->truncated == 1 ? "" : "s",
                     v->incomplete ? " (--allow-partial accepts them)" : "");
        snprintf(title, tlen, "%s: %d runs, %ld steps, %s%s", v->incomplete ? "incomplete" : "reproducible", v->nruns,
                 r1->records,
                 v->tensors ? "every tensor identical" : "every trajectory record identical (no tensor digests recorded)",
                 aside);
        fprintf(out, "%s\n", title);
        return;
    }
    int first = v->first;
    char at[64] = "";
    if (f->div_step >= 0) snprintf(at, sizeof at, " at step %ld", f->div_step);
    snprintf(title, tlen, "not reproducible: run %d differs from run 1%s (%d of %d runs differ from run 1)", first + 1,
             at, v->ndiff, v->nruns);
    fprintf(out, "%s\n", title);
    for (size_t k = 0; k < f->nlines; k++) fprintf(out, "%s\n", f->lines[k]);
    if (v->next[0]) fprintf(out, "%s\n", cli_safe_line(v->next));
    long only;
    int w = dck_steps_first_unpaired(r1->steps, (size_t)r1->records, f->steps, (size_t)f->records, &only);
    if (w)
        fprintf(out, "steps recorded: run 1 %ld (%ld..%ld), run %d %ld (%ld..%ld); step %ld in run %d only\n",
                r1->records, r1->first_step, r1->last_step, first + 1, f->records, f->first_step, f->last_step, only,
                w == 1 ? 1 : first + 1);
    if (f->var[0])
        fprintf(out, "varied: %s=%s in run 1, %s in run %d\n", f->var, cli_safe(r1->value), cli_safe(f->value),
                first + 1);
}

/* What repro compares of N runs besides dck_runs_compare (repro.h): the
 * steps of the runs' side files, the recordings of a run against run 1's,
 * and the determinism settings of run.json. The words for them are the
 * command's (report/repro.c). */
#include "runs/repro.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *const dck_side_files[DCK_NSIDES] = {DCK_RECORD_FILE, DCK_TRACE_FILE};

static dck_status load_side(const char *dir, int k, dck_side_steps *out, dck_recording *rec) {
    char p[PATH_MAX + 32];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, dck_side_files[k]);
    if (lstat(p, &st) != 0 && errno == ENOENT) return DCK_OK;
    out->has = true;
    dck_status s;
    if (k == DCK_SIDE_TENSORS) {
        dck_recording r;
        s = dck_recording_load(p, &r);
        if (!s && r.nsteps && !(out->steps = calloc(r.nsteps, sizeof *out->steps))) s = dck_oom(p);
        for (size_t i = 0; !s && i < r.nsteps; i++)
            out->steps[out->n++] = (dck_step_mark){r.steps[i].step, r.steps[i].n, false};
        if (rec && !s) *rec = r;
        else dck_recording_release(&r);
    } else {
        dck_trace t;
        s = dck_trace_load(p, &t);
        if (!s && t.nsteps && !(out->steps = calloc(t.nsteps, sizeof *out->steps))) s = dck_oom(p);
        for (size_t i = 0; !s && i < t.nsteps; i++)
            out->steps[out->n++] = (dck_step_mark){t.steps[i].step, t.steps[i].n, t.steps[i].truncated};
        dck_trace_release(&t);
    }
    return s;
}

dck_status dck_run_sides_load(const char *dir, dck_side_steps out[DCK_NSIDES], dck_recording *rec) {
    memset(out, 0, DCK_NSIDES * sizeof *out);
    if (rec) memset(rec, 0, sizeof *rec);
    dck_status s = DCK_OK;
    for (int k = 0; k < DCK_NSIDES && !s; k++) s = load_side(dir, k, &out[k], k == DCK_SIDE_TENSORS ? rec : NULL);
    return s;
}

void dck_run_sides_release(dck_side_steps s[DCK_NSIDES]) {
    for (int k = 0; k < DCK_NSIDES; k++) {
        free(s[k].steps);
        s[k].steps = NULL;
        s[k].n = 0;
    }
}

int dck_steps_first_unpaired(const dck_step_mark *a, size_t na, const dck_step_mark *b, size_t nb, long *step) {
    for (size_t i = 0, j = 0; i < na || j < nb; i++, j++) {
        if (j == nb || (i < na && a[i].step < b[j].step)) {
            *step = a[i].step;
            return 1;
        }
        if (i == na || b[j].step < a[i].step) {
            *step = b[j].step;
            return 2;
        }
    }
    return 0;
}

/* One more finding; it names step as what differs there when no earlier
 * finding named an earlier step. NULL when out of memory. */
static dck_repro_finding *add(dck_repro_recordings *r, dck_repro_what what, long step, const char *at_what) {
    dck_repro_finding *f = realloc(r->f, (r->n + 1) * sizeof *f);
    if (!f) return NULL;
    r->f = f;
    f = &r->f[r->n++];
    memset(f, 0, sizeof *f);
    f->what = what;
    f->step = step;
    r->differ = true;
    if (r->at < 0 || step < r->at) r->at = step, r->at_what = at_what;
    return f;
}

dck_status dck_repro_recordings_compare(const dck_side_steps a[DCK_NSIDES], const dck_recording *rec_a,
                                        const dck_side_steps b[DCK_NSIDES], const dck_recording *rec_b,
                                        dck_repro_recordings *out) {
    memset(out, 0, sizeof *out);
    out->at = -1;
    dck_repro_finding *f;
    for (int k = 0; k < DCK_NSIDES; k++) {
        long step;
        int w = dck_steps_first_unpaired(a[k].steps, a[k].n, b[k].steps, b[k].n, &step);
        if (w) {
            if (!(f = add(out, DCK_REPRO_STEPS, step, k == DCK_SIDE_TENSORS ? "recorded_steps" : "traced_steps")))
                return dck_oom(NULL);
            f->side = (dck_run_side)k;
            f->run = w - 1;
            continue;
        }
        for (size_t s = 0; k == DCK_SIDE_TRACE && s < b[k].n; s++) {
            const dck_step_mark *x = &a[k].steps[s], *y = &b[k].steps[s];
            if (!x->truncated && !y->truncated) continue;
            if (x->truncated && y->truncated && x->events == y->events) {
                out->truncated_alike++;
                continue;
            }
            if (!(f = add(out, DCK_REPRO_TRUNCATED, x->step, "truncated_steps"))) return dck_oom(NULL);
            f->side = DCK_SIDE_TRACE;
            f->events[0] = x->events;
            f->events[1] = y->events;
            f->truncated[0] = x->truncated;
            f->truncated[1] = y->truncated;
        }
    }
    if (!a[DCK_SIDE_TENSORS].n || !b[DCK_SIDE_TENSORS].n) return DCK_OK;
    long step;
    int kind;
    const char *how;
    char *name = malloc(DCK_REC_NAME_MAX + 1); /* every name whole */
    dck_rec_state_only so;
    int c = name ? dck_recording_compare(rec_a, rec_b, &step, &kind, name, DCK_REC_NAME_MAX + 1, &how) : -1;
    if (c < 0 || dck_recording_state_only(rec_a, rec_b, &so)) {
        free(name);
        return dck_oom("comparing the recorded tensors");
    }
    /* a state entry one run recorded and the other did not: a difference,
     * as every entry one side lacks */
    for (int k = 0; k < 2; k++) {
        if (!so.count[k]) continue;
        if (!(f = add(out, DCK_REPRO_STATE_ONLY, so.step[k], "recorded_state")) || !(f->name = strdup(so.name[k]))) {
            free(name);
            return dck_oom(NULL);
        }
        f->run = k;
        f->count = so.count[k];
    }
    if (c > 0) {
        if (!(f = add(out, DCK_REPRO_TENSOR, step, "tensor"))) {
            free(name);
            return dck_oom(NULL);
        }
        f->kind = kind;
        f->how = how;
        f->name = name;
        name = NULL;
    }
    free(name);
    return DCK_OK;
}

void dck_repro_recordings_release(dck_repro_recordings *r) {
    for (size_t i = 0; i < r->n; i++) free(r->f[i].name);
    free(r->f);
    memset(r, 0, sizeof *r);
    r->at = -1;
}

/* Reads a small regular file whole (FIFOs and devices refused). */
static char *read_small(const char *path, size_t *len) {
    int fd;
    struct stat st;
    if (dck_open_regular(path, &fd, &st)) return NULL;
    char *b = NULL;
    if (st.st_size <= DCK_RUN_JSON_MAX && (b = malloc((size_t)st.st_size + 1))) {
        ssize_t got = pread(fd, b, (size_t)st.st_size, 0);
        if (got < 0) {
            free(b);
            b = NULL;
        } else {
            b[got] = 0;
            *len = (size_t)got;
        }
    } else if (st.st_size > DCK_RUN_JSON_MAX) {
        dck_set_error(DCK_ERR_FORMAT, "%s: larger than %d bytes", path, DCK_RUN_JSON_MAX);
    }
    close(fd);
    return b;
}

dck_status dck_run_settings_load(const char *dir, json_t **out, bool *unreadable) {
    char *p = dck_path_join(dir, "run.json");
    size_t len = 0;
    struct stat st;
    *out = NULL;
    *unreadable = false;
    if (p && lstat(p, &st) != 0 && errno == ENOENT) {
        free(p);
        return DCK_OK;
    }
    char *b = p ? read_small(p, &len) : NULL;
    json_t *doc = b ? json_loadb(b, len, 0, NULL) : NULL, *s = json_object_get(doc, "settings");
    dck_status r = DCK_OK;
    if (!b) {
        *unreadable = true;
        r = dck_set_error(DCK_ERR_IO, "%s: %s", p ? p : "run.json", dck_last_error());
    } else if (!json_is_object(s) || !json_is_integer(json_object_get(doc, "detcheck_run"))) {
        r = dck_set_error(DCK_ERR_FORMAT, "%s: not a detcheck run header (detcheck_run, settings)", p);
    } else {
        *out = json_incref(s);
    }
    json_decref(doc);
    free(b);
    free(p);
    return r;
}

/* The settings that make a run nondeterministic when they are so. */
typedef enum { OFF_WHEN_FALSE, OFF_WHEN_TRUE, OFF_WHEN_NULL_ON_GPU } off_rule;
static const struct {
    const char *key;
    off_rule rule;
} off_rules[] = {{"deterministic_algorithms", OFF_WHEN_FALSE}, {"CUBLAS_WORKSPACE_CONFIG", OFF_WHEN_NULL_ON_GPU},
                 {"cudnn_deterministic", OFF_WHEN_FALSE},      {"cudnn_benchmark", OFF_WHEN_TRUE},
                 {"tf32_matmul", OFF_WHEN_TRUE},               {"tf32_cudnn", OFF_WHEN_TRUE}};

size_t dck_settings_off(const json_t *s, const char **keys, const char **hows, size_t max) {
    size_t n = 0;
    if (!s) return 0;
    json_t *gpus = json_object_get(s, "gpus");
    bool gpu = json_is_array(gpus) && json_array_size(gpus) > 0;
    for (size_t i = 0; i < sizeof off_rules / sizeof off_rules[0] && n < max; i++) {
        json_t *v = json_object_get(s, off_rules[i].key);
        const char *how = NULL;
        if (off_rules[i].rule == OFF_WHEN_FALSE && json_is_false(v)) how = "false";
        else if (off_rules[i].rule == OFF_WHEN_TRUE && json_is_true(v)) how = "true";
        else if (off_rules[i].rule == OFF_WHEN_NULL_ON_GPU && gpu && (!v || json_is_null(v))) how = "unset";
        if (!how) continue;
        keys[n] = off_rules[i].key;
        hows[n++] = how;
    }
    return n;
}

dck_status dck_settings_differ(json_t *const *settings, size_t nruns, const char ***keys, size_t *n) {
    *keys = NULL;
    *n = 0;
    for (size_t i = 0; i < nruns; i++) {
        const char *key;
        json_t *v;
        if (!settings[i]) continue;
        json_object_foreach(settings[i], key, v) {
            bool seen = false, differ = false;
            json_t *ref = NULL;
            int have = 0;
            for (size_t j = 0; j < i && !seen; j++) seen = settings[j] && json_object_get(settings[j], key);
            if (seen) continue;
            for (size_t j = 0; j < nruns; j++) {
                if (!settings[j]) continue;
                json_t *w = json_object_get(settings[j], key);
                if (!have++) ref = w;
                else if (!(w == ref || (w && ref && json_equal(w, ref)))) differ = true;
            }
            if (!differ) continue;
            const char **k = realloc(*keys, (*n + 1) * sizeof *k);
            if (!k) {
                free(*keys);
                *keys = NULL;
                *n = 0;
                return dck_oom(NULL);
            }
            *keys = k;
            k[(*n)++] = key;
        }
    }
    return DCK_OK;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double dck_median(double *v, size_t n) {
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

dck_status dck_repro_tax_of(const double *run_medians, size_t nruns, dck_repro_tax *out) {
    memset(out, 0, sizeof *out);
    double *tmp = malloc((nruns / 2 + 1) * sizeof *tmp);
    if (!tmp) return dck_oom(NULL);
    for (int k = 0; k < 2; k++) {
        size_t n = 0;
        out->min[k] = out->max[k] = run_medians[k];
        for (size_t i = (size_t)k; i < nruns; i += 2) {
            if (run_medians[i] < out->min[k]) out->min[k] = run_medians[i];
            if (run_medians[i] > out->max[k]) out->max[k] = run_medians[i];
            tmp[n++] = run_medians[i];
        }
        out->median[k] = dck_median(tmp, n);
    }
    free(tmp);
    if (!(out->median[1] > 0) || !(out->min[1] > 0))
        return dck_set_error(DCK_ERR_INVALID, "the non-deterministic runs' step times are 0: no ratio");
    out->ratio = out->median[0] / out->median[1];
    out->ratio_min = out->min[0] / out->max[1];
    out->ratio_max = out->max[0] / out->min[1];
    return DCK_OK;
}

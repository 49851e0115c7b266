/* dck_runs_compare: where two recorded runs part (man detcheck-bisect(1)).
 * The first step whose trajectory records differ, the first recorded
 * tensor and traced event that differ, the last agreeing checkpoint and
 * the tensors that differ at the first one after it; and what one run
 * holds and the other lacks, which is never agreement (gaps). The result
 * is data only: bisect, repro and the reports render it. */
#include "runs/compare.h"
#include "runs/run.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ gaps */

static dck_runs_gap *gap_add(dck_runs_result *r, const char *item, int k, size_t count, long first, long last) {
    if (!count || r->ngaps == DCK_RUNS_MAX_GAPS) return NULL;
    dck_runs_gap *g = &r->gaps[r->ngaps++];
    *g = (dck_runs_gap){item, k, count, first, last, false, NULL, NULL};
    return g;
}

/* Steps of a (ascending) that b (ascending) lacks: how many, the first and
 * last. */
static size_t only_in(const long *a, size_t na, const long *b, size_t nb, long *first, long *last) {
    size_t n = 0;
    for (size_t i = 0, j = 0; i < na; i++) {
        while (j < nb && b[j] < a[i]) j++;
        if (j < nb && b[j] == a[i]) continue;
        if (!n++) *first = a[i];
        *last = a[i];
    }
    return n;
}

/* The steps each of the two lists holds alone, as gaps of item; why[k],
 * when given, says why run k's list is empty. */
static void steps_gap(dck_runs_result *r, const char *item, const long *const v[2], const size_t n[2],
                      const char *const why[2]) {
    for (int k = 0; k < 2; k++) {
        long first = 0, last = 0;
        size_t c = only_in(v[k], n[k], v[1 - k], n[1 - k], &first, &last);
        dck_runs_gap *g = gap_add(r, item, k, c, first, last);
        if (!g) continue;
        g->empty_side = n[1 - k] == 0;
        if (why && !n[1 - k]) g->why = why[1 - k];
    }
}

/* The step numbers of n records of size bytes whose long step is at off. */
static long *step_list(const void *recs, size_t n, size_t size, size_t off) {
    long *v = malloc((n ? n : 1) * sizeof *v);
    for (size_t i = 0; v && i < n; i++) memcpy(&v[i], (const char *)recs + i * size + off, sizeof *v);
    return v;
}

/* The gaps of two step lists of records (size bytes, long step at off). */
static dck_status records_gap(dck_runs_result *r, const char *item, const void *const recs[2], const size_t n[2],
                              size_t size, size_t off, const char *const why[2]) {
    long *v[2] = {step_list(recs[0], n[0], size, off), step_list(recs[1], n[1], size, off)};
    dck_status s = v[0] && v[1] ? DCK_OK : dck_oom(NULL);
    if (!s) steps_gap(r, item, (const long *const *)v, n, why);
    free(v[0]);
    free(v[1]);
    return s;
}

/* ------------------------------------------------------------------ trajectories */

/* A run's records are one per step, consecutive from its first: a missing
 * step or an empty file would otherwise read as agreement. */
static dck_status traj_check(const dck_run *r) {
    if (r->ntraj == 0) return dck_set_error(DCK_ERR_FORMAT, "%s/%s has no records", r->dir, DCK_TRAJECTORY);
    for (size_t i = 1; i < r->ntraj; i++)
        if (r->traj[i].step != r->traj[i - 1].step + 1)
            return dck_set_error(DCK_ERR_FORMAT, "%s/%s has a gap: step %ld is missing", r->dir, DCK_TRAJECTORY,
                                 r->traj[i - 1].step + 1);
    return DCK_OK;
}

static dck_status traj_compare(const dck_run *const run[2], bool missing_steps, dck_runs_result *r) {
    for (int k = 0; k < 2 && !missing_steps; k++) DCK_TRY(traj_check(run[k]));
    const dck_traj_rec *t[2] = {run[0]->traj, run[1]->traj};
    size_t n[2] = {run[0]->ntraj, run[1]->ntraj};
    if (!missing_steps && (t[0][n[0] - 1].step < t[1][0].step || t[1][n[1] - 1].step < t[0][0].step))
        return dck_set_error(DCK_ERR_INVALID, "%s and %s have no step in common (steps %ld..%ld and %ld..%ld)",
                             run[0]->dir, run[1]->dir, t[0][0].step, t[0][n[0] - 1].step, t[1][0].step,
                             t[1][n[1] - 1].step);
    char what[1024] = "";
    r->traj_step = -1;
    r->traj_differs = dck_traj_compare(t[0], n[0], t[1], n[1], &r->traj_step, what, sizeof what) != 0;
    if (r->traj_differs && !(r->traj_detail = strdup(what))) return dck_oom(NULL);
    for (int k = 0; k < 2; k++) r->last_step[k] = n[k] ? t[k][n[k] - 1].step : -1;
    /* steps in one trajectory only, and root digests one run recorded at a
     * step both ran (dck_traj_compare compares a root where both have one) */
    const void *recs[2] = {t[0], t[1]};
    DCK_TRY(records_gap(r, "trajectory_steps", recs, n, sizeof *t[0], offsetof(dck_traj_rec, step), NULL));
    size_t nroot[2] = {0, 0};
    long first[2] = {0, 0}, last[2] = {0, 0};
    for (size_t i = 0, j = 0; i < n[0] && j < n[1];) {
        if (t[0][i].step != t[1][j].step) {
            t[0][i].step < t[1][j].step ? i++ : j++;
            continue;
        }
        if (t[0][i].has_root != t[1][j].has_root) {
            int k = t[0][i].has_root ? 0 : 1;
            if (!nroot[k]++) first[k] = t[0][i].step;
            last[k] = t[0][i].step;
        }
        i++;
        j++;
    }
    for (int k = 0; k < 2; k++) gap_add(r, "roots", k, nroot[k], first[k], last[k]);
    return DCK_OK;
}

/* ------------------------------------------------------------------ recorded tensors */

static dck_status rec_compare(const dck_run *const run[2], dck_runs_result *r) {
    const dck_recording *rec[2] = {&run[0]->rec, &run[1]->rec};
    for (int k = 0; k < 2; k++) {
        r->rec_has[k] = run[k]->has_rec;
        r->rec_steps[k] = rec[k]->nsteps;
    }
    r->rec_both = r->rec_has[0] && r->rec_has[1];
    /* a file in one run only, or one that holds no step: its steps are the
     * other run's alone (a run that recorded nothing agrees with none) */
    const char *why[2];
    for (int k = 0; k < 2; k++) why[k] = !r->rec_has[k] ? "has no " DCK_RECORD_FILE : "recorded none";
    const void *steps[2] = {rec[0]->steps, rec[1]->steps};
    DCK_TRY(records_gap(r, "recorded_steps", steps, r->rec_steps, sizeof(dck_rec_step), offsetof(dck_rec_step, step),
                        why));
    if (!r->rec_both) return DCK_OK;
    r->rec_common = dck_recording_common_steps(rec[0], rec[1]);
    char *name = malloc(DCK_REC_NAME_MAX + 1);
    if (!name) return dck_oom(NULL);
    dck_rec_state_only u;
    int c = dck_recording_compare(rec[0], rec[1], &r->rec_step, &r->rec_kind, name, DCK_REC_NAME_MAX + 1, &r->rec_how);
    if (c < 0 || dck_recording_state_only(rec[0], rec[1], &u)) {
        free(name);
        return dck_oom("comparing the recorded tensors");
    }
    dck_status s = DCK_OK;
    for (int k = 0; k < 2 && !s; k++) {
        dck_runs_gap *g = gap_add(r, "recorded_state", k, u.count[k], u.step[k], u.last[k]);
        if (g && !(g->name = strdup(u.name[k] ? u.name[k] : ""))) s = dck_oom(NULL);
    }
    r->rec_found = c > 0;
    if (r->rec_found && !s) r->rec_name = name;
    else free(name);
    if (!r->rec_found) r->rec_how = NULL;
    return s;
}

/* ------------------------------------------------------------------ traces */

static dck_status event_from(const dck_trace *t, const dck_trace_event *e, dck_runs_event *out) {
    memset(out, 0, sizeof *out);
    if (!e) return DCK_OK;
    *out = (dck_runs_event){true, e->phase, e->kind, strdup(t->names[e->module]),
                            e->kind == DCK_TRACE_OP ? strdup(t->names[e->op]) : NULL, e->call, e->nin, e->nout};
    return out->module && (out->op || e->kind != DCK_TRACE_OP) ? DCK_OK : dck_oom(NULL);
}

dck_status dck_runs_trace_from(const dck_trace *a, const dck_trace *b, const dck_trace_diff *d, dck_runs_trace *out) {
    /* outputs absent in both runs agree without evidence: a step where
     * that is all there is (digests that failed, CUDA tensors without a
     * working GPU digest) compared nothing, and is never agreement */
    if (d->blind)
        return dck_set_error(DCK_ERR_FORMAT,
                             "%s: step %ld (and %zu more) traced in both runs, but none of its events' outputs has a "
                             "digest in either (the recorder could not digest them): nothing was compared there",
                             DCK_TRACE_FILE, d->first_blind, d->blind - 1);
    out->found = d->how != DCK_TRACE_AGREE;
    out->common = d->common;
    out->agreeing = d->agreeing;
    out->version[0] = a->version;
    out->version[1] = b->version;
    for (int k = 0; k < 2; k++) {
        out->truncated[k] = d->truncated[k];
        out->first_truncated[k] = d->first_truncated[k];
    }
    out->how = d->how == DCK_TRACE_OUTPUT ? DCK_RUNS_TRACE_OUTPUT
             : d->how == DCK_TRACE_EXECUTION ? DCK_RUNS_TRACE_EXECUTION
                                              : DCK_RUNS_TRACE_AGREE;
    out->step = d->step;
    out->event = d->event;
    out->output = d->output;
    out->input = d->input;
    out->input_is_state = d->a && d->input >= 0 && dck_trace_input_is_state(a, d->a, d->input);
    if (!out->found) return DCK_OK;
    DCK_TRY(event_from(a, d->a, &out->a));
    return event_from(b, d->b, &out->b);
}

void dck_runs_trace_release(dck_runs_trace *t) {
    const dck_runs_event *e[2] = {&t->a, &t->b};
    for (int k = 0; k < 2; k++) {
        free(e[k]->module);
        free(e[k]->op);
    }
    memset(&t->a, 0, sizeof t->a);
    memset(&t->b, 0, sizeof t->b);
}

/* Whether both traces hold step. */
static bool traced_in_both(const dck_trace *a, const dck_trace *b, long step) {
    const dck_trace *t[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        bool in = false;
        for (size_t i = 0; i < t[k]->nsteps && !in; i++) in = t[k]->steps[i].step == step;
        if (!in) return false;
    }
    return true;
}

void dck_runs_trace_judge(dck_runs_trace *t, const dck_trace *a, const dck_trace *b, long step, int kind, bool named) {
    t->bound = step;
    t->late = t->found && step >= 0 && t->step > step;
    t->ops = false;
    const dck_trace *tr[2] = {a, b};
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < tr[k]->nevents && !t->ops; i++) t->ops = tr[k]->events[i].kind == DCK_TRACE_OP;
    /* the tensor kinds a trace does not digest: a module's gradients
     * flowing in and out are traced, a parameter's gradient, the update and
     * the optimizer's state are not */
    bool blind = kind == DCK_REC_GRADIENT || kind == DCK_REC_PARAMETER || kind == DCK_REC_OPTIMIZER;
    t->unseen = blind && step >= 0 && named && t->both && (!t->found || t->late) && traced_in_both(a, b, step);
    /* a culprit named: its magnitudes are the next step; an execution
     * difference in a module: its ops; nothing found where the runs part,
     * or only later: an op trace, else the dump of the first differing step */
    t->next = DCK_RUNS_NEXT_NONE;
    t->next_step = step;
    if (t->found && !t->late)
        t->next = t->how == DCK_RUNS_TRACE_OUTPUT || t->ops ? DCK_RUNS_NEXT_NONE : DCK_RUNS_NEXT_TRACE_OPS;
    else if (!t->ops)
        t->next = DCK_RUNS_NEXT_TRACE_OPS;
    else if (step >= 0)
        t->next = DCK_RUNS_NEXT_DUMP_STEP;
}

/* Both traces compared; a trace in one run only is read too, for the steps
 * it holds alone; steps the recorder cut short: their events past the
 * bound were never compared, in whichever run. */
static dck_status trace_compare(const dck_run *const run[2], dck_runs_result *r) {
    dck_runs_trace *t = &r->trace;
    const dck_trace *tr[2] = {&run[0]->trace, &run[1]->trace};
    for (int k = 0; k < 2; k++) t->has[k] = run[k]->has_trace;
    t->both = t->has[0] && t->has[1];
    t->first_truncated[0] = t->first_truncated[1] = -1;
    if (t->both) {
        dck_trace_diff d;
        dck_trace_compare(tr[0], tr[1], &d);
        DCK_TRY(dck_runs_trace_from(tr[0], tr[1], &d, t));
    }
    if (!t->has[0] && !t->has[1]) return DCK_OK;
    const char *why[2];
    for (int k = 0; k < 2; k++) why[k] = !t->has[k] ? "has no " DCK_TRACE_FILE : "traced none";
    const void *steps[2] = {tr[0]->steps, tr[1]->steps};
    size_t n[2] = {tr[0]->nsteps, tr[1]->nsteps};
    DCK_TRY(records_gap(r, "traced_steps", steps, n, sizeof(dck_trace_step), offsetof(dck_trace_step, step), why));
    size_t ncut[2] = {0, 0};
    long first[2] = {0, 0}, last[2] = {0, 0};
    for (size_t i = 0, j = 0; i < n[0] && j < n[1];) {
        const dck_trace_step *x[2] = {&tr[0]->steps[i], &tr[1]->steps[j]};
        if (x[0]->step != x[1]->step) {
            x[0]->step < x[1]->step ? i++ : j++;
            continue;
        }
        for (int k = 0; k < 2; k++)
            if (x[k]->truncated) {
                if (!ncut[k]++) first[k] = x[k]->step;
                last[k] = x[k]->step;
            }
        i++;
        j++;
    }
    for (int k = 0; k < 2; k++) gap_add(r, "truncated_steps", k, ncut[k], first[k], last[k]);
    return DCK_OK;
}

/* ------------------------------------------------------------------ checkpoints */

/* Checkpoints in both runs, ascending (those in one run only are gaps):
 * the last agreeing one before the divergence, the first differing one at
 * or after it. */
static dck_status ckpt_compare(const dck_run *const run[2], dck_runs_result *r) {
    const long *cs[2] = {run[0]->ckpts, run[1]->ckpts};
    size_t nc[2] = {run[0]->nckpts, run[1]->nckpts};
    static const char *const none[2] = {"has none", "has none"};
    steps_gap(r, "checkpoints", cs, nc, none);
    r->ckpts[0] = nc[0];
    r->ckpts[1] = nc[1];
    for (size_t i = 0, j = 0; i < nc[0] && j < nc[1];) {
        if (cs[0][i] != cs[1][j]) {
            cs[0][i] < cs[1][j] ? i++ : j++;
            continue;
        }
        long at = cs[0][i];
        i++;
        j++;
        r->ckpts_in_both++;
        if (r->ckpt_differ >= 0) continue;
        dck_manifest *m[2] = {NULL, NULL};
        dck_cmp_result c;
        dck_status s = dck_ckpt_manifest_load(run[0]->dir, at, &m[0]);
        if (!s) s = dck_ckpt_manifest_load(run[1]->dir, at, &m[1]);
        if (!s) s = dck_manifest_compare(m[0], m[1], 0, &c);
        if (!s && c.n) {
            r->ckpt_differ = at;
            r->ckpt_a = m[0];
            r->ckpt_b = m[1];
            r->ckpt_diff = c;
            continue;
        }
        if (!s) dck_cmp_result_release(&c);
        dck_manifest_free(m[0]);
        dck_manifest_free(m[1]);
        if (s) return s;
        if (!(r->traj_differs && at >= r->traj_step)) r->ckpt_agree = at; /* bits agree, trajectory does not */
    }
    return DCK_OK;
}

/* ------------------------------------------------------------------ the whole */

dck_status dck_runs_compare(const dck_run *a, const dck_run *b, const dck_runs_opts *opts, dck_runs_result *out) {
    memset(out, 0, sizeof *out);
    out->first_step = out->ckpt_agree = out->ckpt_differ = out->traj_step = -1;
    out->trace.bound = out->trace.next_step = -1;
    const dck_run *const run[2] = {a, b};
    DCK_TRY(traj_compare(run, opts && opts->missing_steps, out));
    DCK_TRY(rec_compare(run, out));
    DCK_TRY(trace_compare(run, out));
    /* one step for every line: the earliest where anything recorded differs
     * (trajectory, tensors, trace); the trace's own difference is judged
     * against the trajectory's and the tensors' (a culprit never comes
     * after the runs already parted) */
    long first = out->traj_differs ? out->traj_step : -1;
    if (out->rec_found && (first < 0 || out->rec_step < first)) first = out->rec_step;
    bool tensor_first = out->rec_found && out->rec_step == first;
    dck_runs_trace_judge(&out->trace, &a->trace, &b->trace, first, tensor_first ? out->rec_kind : -1, tensor_first);
    if (out->trace.found && (first < 0 || out->trace.step < first)) first = out->trace.step;
    out->first_step = first;
    out->first_differing = first < 0                                      ? NULL
                           : out->traj_differs && out->traj_step == first ? "trajectory"
                           : out->rec_found && out->rec_step == first     ? "tensor"
                                                                          : "event";
    DCK_TRY(ckpt_compare(run, out));
    /* a difference found; or items not compared, which only allow_partial
     * accepts (never an empty side) */
    out->found = out->traj_differs || out->ckpt_differ >= 0 || out->rec_found || out->trace.found;
    out->accepted = true;
    for (size_t i = 0; i < out->ngaps; i++)
        if (!(opts && opts->allow_partial) || out->gaps[i].empty_side) out->accepted = false;
    out->different = out->found || !out->accepted;
    return DCK_OK;
}

void dck_runs_result_release(dck_runs_result *r) {
    if (!r) return;
    free(r->traj_detail);
    free(r->rec_name);
    dck_runs_trace_release(&r->trace);
    for (size_t i = 0; i < r->ngaps; i++) free(r->gaps[i].name);
    if (r->ckpt_differ >= 0) dck_cmp_result_release(&r->ckpt_diff);
    dck_manifest_free(r->ckpt_a);
    dck_manifest_free(r->ckpt_b);
    memset(r, 0, sizeof *r);
    r->first_step = r->ckpt_agree = r->ckpt_differ = r->traj_step = -1;
}

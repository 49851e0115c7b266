/* The resume diagnosis (resume.h): an uninterrupted run against the run
 * stopped at K and the run resumed from K, over their trajectories, tensor
 * digests and traces; structured results for the command line to word
 * (man detcheck-resume-check(1), USER COMMANDS). */
#include "runs/resume.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ lookups */

/* One recorded step's entries sorted by kind and name, for lookups by name. */
typedef struct {
    const dck_recording *r;
    dck_rec_entry *v;
    size_t n;
} sview;

static int view_cmp(const void *x, const void *y, void *ctx) {
    const dck_recording *r = ctx;
    const dck_rec_entry *a = x, *b = y;
    int c = (int)r->kinds[a->id] - (int)r->kinds[b->id];
    return c ? c : strcmp(r->names[a->id], r->names[b->id]);
}

static const dck_rec_step *find_step(const dck_recording *r, long step) {
    size_t lo = 0, hi = r->nsteps;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->steps[mid].step < step) lo = mid + 1;
        else hi = mid;
    }
    return lo < r->nsteps && r->steps[lo].step == step ? &r->steps[lo] : NULL;
}

/* The view of step (empty when not recorded); false when out of memory. */
static bool view_of(const dck_resume_view *u, long step, sview *sv) {
    memset(sv, 0, sizeof *sv);
    const dck_rec_step *st = u->rec ? find_step(u->rec, step) : NULL;
    if (!st) return true;
    sv->r = u->rec;
    if (!(sv->v = malloc((st->n ? st->n : 1) * sizeof *sv->v))) return false;
    memcpy(sv->v, u->rec->entries + st->first, st->n * sizeof *sv->v);
    sv->n = st->n;
    qsort_r(sv->v, sv->n, sizeof *sv->v, view_cmp, (void *)sv->r);
    return true;
}

static const dck_rec_entry *view_get(const sview *sv, int kind, const char *name) {
    size_t lo = 0, hi = sv->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const dck_rec_entry *e = &sv->v[mid];
        int c = (int)sv->r->kinds[e->id] - kind;
        if (!c) c = strcmp(sv->r->names[e->id], name);
        if (!c) return e;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

static const char *ename(const sview *sv, const dck_rec_entry *e) { return sv->r->names[e->id]; }
static int ekind(const sview *sv, const dck_rec_entry *e) { return sv->r->kinds[e->id]; }

/* Both have NAME of KIND and their digests differ. */
static bool differs(const sview *a, const sview *b, int kind, const char *name) {
    const dck_rec_entry *x = view_get(a, kind, name), *y = view_get(b, kind, name);
    return x && y && !dck_digest_equal(x->digest, y->digest);
}

/* The first entry of KIND (and names starting with prefix, when given), in
 * model order, whose digests differ between the views; NULL when none. */
static const char *first_differing(const sview *a, const sview *b, int kind, const char *prefix) {
    const char *best = NULL;
    for (size_t i = 0; i < b->n; i++) {
        const char *n = ename(b, &b->v[i]);
        if (ekind(b, &b->v[i]) != kind || (prefix && strncmp(n, prefix, strlen(prefix)))) continue;
        if (differs(a, b, kind, n) && (!best || dck_name_compare(n, best) < 0)) best = n;
    }
    return best;
}

/* The lr of the trajectory record of step (the value as written; NaN
 * when null or absent). */
static double traj_lr(const dck_resume_view *r, long step) {
    for (size_t i = 0; i < r->ntraj; i++)
        if (r->traj[i].step == step) return r->traj[i].lr;
    return NAN;
}

static long last_step(const dck_resume_view *r) { return r->ntraj ? r->traj[r->ntraj - 1].step : -1; }

/* ------------------------------------------------------------------ partings and gaps */

dck_status dck_resume_first_parting(const dck_resume_view *a, const dck_resume_view *b, dck_resume_parting *p) {
    memset(p, 0, sizeof *p);
    p->step = p->tstep = p->rstep = -1;
    if (!dck_traj_compare(a->traj, a->ntraj, b->traj, b->ntraj, &p->tstep, p->what, sizeof p->what)) p->tstep = -1;
    if (a->rec && b->rec) {
        int c = dck_recording_compare(a->rec, b->rec, &p->rstep, &p->kind, p->name, sizeof p->name, &p->how);
        if (c < 0) return dck_oom("comparing the recorded tensors");
        if (!c) p->rstep = -1;
    }
    p->step = p->tstep;
    if (p->rstep >= 0 && (p->step < 0 || p->rstep < p->step)) p->step = p->rstep;
    return DCK_OK;
}

void dck_resume_gap_take(dck_resume_gap *g, const dck_resume_gap *c) {
    if (c->step >= 0 && (g->step < 0 || c->step < g->step)) *g = *c;
}

static void take(dck_resume_gap *g, dck_resume_gap c) { dck_resume_gap_take(g, &c); }

/* r less the start.* entries of its first step, for
 * dck_recording_state_only: a process records the weights it started from
 * once, at its first step, and a resumed process's first step is none of
 * the uninterrupted run's first (dck_resume_diagnose compares them with
 * the weights after K). Shares r's names; free out's steps and entries. */
static bool without_start(const dck_recording *r, dck_recording *out) {
    *out = *r;
    out->steps = malloc((r->nsteps ? r->nsteps : 1) * sizeof *r->steps);
    out->entries = malloc((r->nentries ? r->nentries : 1) * sizeof *r->entries);
    if (!out->steps || !out->entries) {
        free(out->steps);
        free(out->entries);
        return false;
    }
    memcpy(out->steps, r->steps, r->nsteps * sizeof *r->steps);
    memcpy(out->entries, r->entries, r->nentries * sizeof *r->entries);
    if (r->nsteps) {
        dck_rec_step *f = &out->steps[0];
        size_t k = 0;
        for (size_t i = 0; i < f->n; i++) {
            const dck_rec_entry *e = &r->entries[f->first + i];
            if (r->kinds[e->id] != DCK_REC_STATE || strncmp(r->names[e->id], "start.", 6))
                out->entries[f->first + k++] = *e;
        }
        f->n = k;
    }
    return true;
}

/* The first step of lo..hi in one of two ascending step lists only, or
 * -1; *in_a: a holds it. The lists are arrays of a struct of size stride
 * whose first member is its step (dck_rec_step, dck_trace_step). */
static long steps_unmatched(const void *a, size_t na, const void *b, size_t nb, size_t stride, long lo, long hi,
                            bool *in_a) {
#define STEP_AT(v, k) (*(const long *)(const void *)((const char *)(v) + (k) * stride))
    size_t i = 0, j = 0;
    while (i < na && STEP_AT(a, i) < lo) i++;
    while (j < nb && STEP_AT(b, j) < lo) j++;
    for (;;) {
        long x = i < na && STEP_AT(a, i) <= hi ? STEP_AT(a, i) : -1;
        long y = j < nb && STEP_AT(b, j) <= hi ? STEP_AT(b, j) : -1;
#undef STEP_AT
        if (x < 0 && y < 0) return -1;
        if (x == y) {
            i++, j++;
            continue;
        }
        *in_a = y < 0 || (x >= 0 && x < y);
        return *in_a ? x : y;
    }
}
_Static_assert(offsetof(dck_rec_step, step) == 0 && offsetof(dck_trace_step, step) == 0,
               "steps_unmatched reads a step list's steps at offset 0");

dck_status dck_resume_first_gap(const dck_resume_view *a, const dck_resume_view *b, long lo, long hi,
                                dck_resume_gap *g) {
    *g = (dck_resume_gap){.step = -1};
    long ma = dck_traj_first_missing(a->traj, a->ntraj, lo, hi), mb = dck_traj_first_missing(b->traj, b->ntraj, lo, hi);
    take(g, (dck_resume_gap){.step = ma, .lacks = 0, .file = DCK_TRAJECTORY, .ended = ma > last_step(a)});
    take(g, (dck_resume_gap){.step = mb, .lacks = 1, .file = DCK_TRAJECTORY, .ended = mb > last_step(b)});
    bool in_a = false;
    long d = steps_unmatched(a->rec ? a->rec->steps : NULL, a->rec ? a->rec->nsteps : 0, b->rec ? b->rec->steps : NULL,
                             b->rec ? b->rec->nsteps : 0, sizeof(dck_rec_step), lo, hi, &in_a);
    take(g, (dck_resume_gap){.step = d, .lacks = in_a, .file = DCK_RECORD_FILE});
    d = dck_traj_root_unmatched(a->traj, a->ntraj, b->traj, b->ntraj, lo, hi, &in_a);
    take(g, (dck_resume_gap){.step = d, .lacks = in_a, .file = DCK_TRAJECTORY, .kind = DCK_RESUME_GAP_ROOT});
    if (!a->rec || !b->rec) return DCK_OK;
    dck_recording x, y;
    dck_rec_state_only u;
    bool okx = without_start(a->rec, &x), oky = okx && without_start(b->rec, &y);
    int c = oky ? dck_recording_state_only(&x, &y, &u) : -1;
    if (okx) free(x.steps), free(x.entries);
    if (oky) free(y.steps), free(y.entries);
    if (c < 0) return dck_oom("comparing the recorded state");
    /* u counts over every step both hold: within lo..hi for the pairs compared here */
    for (int k = 0; k < 2; k++)
        if (u.count[k] && u.step[k] >= lo && u.step[k] <= hi)
            take(g, (dck_resume_gap){.step = u.step[k], .lacks = !k, .file = DCK_RECORD_FILE,
                                     .kind = DCK_RESUME_GAP_STATE, .entry = u.name[k]});
    return DCK_OK;
}

void dck_resume_trace_gaps(const dck_trace *a, const dck_trace *b, long lo, long hi, dck_resume_gap *g,
                           dck_resume_cut *alike) {
    *alike = (dck_resume_cut){.first = -1, .last = -1};
    if (!a || !b) {
        /* traced in one run only: every step of lo..hi is compared nowhere */
        if (a || b) take(g, (dck_resume_gap){.step = lo, .lacks = !b, .file = DCK_TRACE_FILE});
        return;
    }
    bool in_a = false;
    long d = steps_unmatched(a->steps, a->nsteps, b->steps, b->nsteps, sizeof(dck_trace_step), lo, hi, &in_a);
    take(g, (dck_resume_gap){.step = d, .lacks = in_a, .file = DCK_TRACE_FILE});
    /* a step the recorder truncated: its events past the bound were never
     * compared. Truncated differently, one run holds events the other
     * lacks: a gap; alike, said in the verdict as not compared */
    for (size_t i = 0, j = 0; i < a->nsteps && j < b->nsteps;) {
        const dck_trace_step *x[2] = {&a->steps[i], &b->steps[j]};
        if (x[0]->step != x[1]->step) {
            if (x[0]->step < x[1]->step) i++;
            else j++;
            continue;
        }
        i++, j++;
        if (x[0]->step < lo || x[0]->step > hi || (!x[0]->truncated && !x[1]->truncated)) continue;
        if (x[0]->truncated == x[1]->truncated && x[0]->n == x[1]->n) {
            if (!alike->steps++) alike->first = x[0]->step;
            alike->last = x[0]->step;
            continue;
        }
        /* the run that cut the step shorter; a run that ended its step
         * before the other's cut is an execution difference of its own */
        int k = x[0]->truncated && (!x[1]->truncated || x[0]->n < x[1]->n) ? 0 : 1;
        if (x[k]->n <= x[!k]->n)
            take(g, (dck_resume_gap){.step = x[0]->step, .lacks = k, .file = DCK_TRACE_FILE,
                                     .kind = DCK_RESUME_GAP_CUT, .events = x[k]->n});
    }
}

/* ------------------------------------------------------------------ the cause */

dck_status dck_resume_start_differing(const dck_resume_view *full, const dck_resume_view *res, long K,
                                      const char **name) {
    *name = NULL;
    if (!res->rec || !res->rec->nsteps || res->rec->steps[0].step != K + 1) return DCK_OK;
    sview ak, b;
    bool oka = view_of(full, K, &ak), okb = view_of(res, K + 1, &b); /* both: both are freed */
    for (size_t i = 0; oka && okb && i < b.n; i++) {
        const char *sn = ename(&b, &b.v[i]);
        if (ekind(&b, &b.v[i]) != DCK_REC_STATE || strncmp(sn, "start.", 6)) continue;
        const dck_rec_entry *w = view_get(&ak, DCK_REC_PARAMETER, sn + 6);
        if (w && !dck_digest_equal(w->digest, b.v[i].digest) && (!*name || dck_name_compare(sn + 6, *name) < 0))
            *name = sn + 6;
    }
    free(ak.v);
    free(b.v);
    return oka && okb ? DCK_OK : dck_oom(NULL);
}

const dck_resume_rng dck_resume_rngs[] = {{"rng.torch", "torch's CPU RNG state was not restored"},
                                          {"rng.cuda", "the CUDA RNG states were not restored"},
                                          {"rng.numpy", "NumPy's global RNG state was not restored"},
                                          {"rng.python", "Python's random state was not restored"}};
const size_t dck_resume_nrngs = sizeof dck_resume_rngs / sizeof dck_resume_rngs[0];

const char *dck_resume_cause_name(dck_resume_cause c) {
    static const char *const names[DCK_RESUME_CAUSE_COUNT] = {
        [DCK_RESUME_WEIGHTS] = "weights", [DCK_RESUME_DATA] = "data",           [DCK_RESUME_RNG] = "rng",
        [DCK_RESUME_LR] = "lr",           [DCK_RESUME_SCALER] = "scaler",       [DCK_RESUME_EMA] = "ema",
        [DCK_RESUME_OPTIMIZER] = "optimizer", [DCK_RESUME_TENSOR] = "tensor", [DCK_RESUME_TRAJECTORY] = "trajectory"};
    return (unsigned)c < DCK_RESUME_CAUSE_COUNT ? names[c] : "?";
}

/* The first step of full whose data.batch has the digest of x, or -1. */
static long batch_step(const dck_recording *full, const dck_rec_entry *x) {
    for (size_t i = 0; i < full->nsteps; i++) {
        const dck_rec_step *st = &full->steps[i];
        for (size_t k = 0; k < st->n; k++) {
            const dck_rec_entry *e = &full->entries[st->first + k];
            if (full->kinds[e->id] == DCK_REC_STATE && !strcmp(full->names[e->id], "data.batch") &&
                dck_digest_equal(e->digest, x->digest))
                return st->step;
        }
    }
    return -1;
}

/* Every gradient both views hold is equal, and none is in one only. */
static bool gradients_equal(const sview *a, const sview *b) {
    for (int side = 0; side < 2; side++) {
        const sview *x = side ? b : a, *y = side ? a : b;
        for (size_t i = 0; i < x->n; i++) {
            if (ekind(x, &x->v[i]) != DCK_REC_GRADIENT) continue;
            const dck_rec_entry *e = view_get(y, DCK_REC_GRADIENT, ename(x, &x->v[i]));
            if (!e || !dck_digest_equal(e->digest, x->v[i].digest)) return false;
        }
    }
    return true;
}

/* The causes after the weights, in the order of the spec, at the views of
 * step D; false when none matches. */
static bool state_cause(const dck_resume_view *full, const dck_resume_view *res, long D, const sview *a,
                        const sview *b, dck_resume_diagnosis *d) {
    /* data: the batch, and which of the uninterrupted run's it is */
    if (differs(a, b, DCK_REC_STATE, "data.batch")) {
        d->cause = DCK_RESUME_DATA;
        d->name = "data.batch";
        d->batch_step = batch_step(full->rec, view_get(b, DCK_REC_STATE, "data.batch"));
        return true;
    }
    for (size_t i = 0; i < dck_resume_nrngs; i++)
        if (differs(a, b, DCK_REC_STATE, dck_resume_rngs[i].name)) {
            d->cause = DCK_RESUME_RNG;
            d->name = dck_resume_rngs[i].name;
            d->rng = i;
            return true;
        }
    /* lr: the trajectory's values when they differ, else the group's */
    const char *g = first_differing(a, b, DCK_REC_STATE, "lr.");
    d->lr[0] = traj_lr(full, D);
    d->lr[1] = traj_lr(res, D);
    d->lr_traj = isnan(d->lr[0]) != isnan(d->lr[1]) || (!isnan(d->lr[0]) && d->lr[0] != d->lr[1]);
    if (d->lr_traj || g) {
        d->cause = DCK_RESUME_LR;
        d->name = g;
        return true;
    }
    static const struct {
        dck_resume_cause cause;
        const char *prefix;
    } families[] = {{DCK_RESUME_SCALER, "scaler."}, {DCK_RESUME_EMA, "ema."}};
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        if ((d->name = first_differing(a, b, DCK_REC_STATE, families[i].prefix))) {
            d->cause = families[i].cause;
            return true;
        }
    /* optimizer: its state differs while every gradient agrees */
    if ((d->name = first_differing(a, b, DCK_REC_OPTIMIZER, NULL)) && gradients_equal(a, b)) {
        d->cause = DCK_RESUME_OPTIMIZER;
        return true;
    }
    d->name = NULL;
    return false;
}

dck_status dck_resume_diagnose(const dck_resume_view *full, const dck_resume_view *res, long K,
                               const dck_resume_parting *p, dck_resume_diagnosis *d) {
    long D = p->step;
    *d = (dck_resume_diagnosis){.batch_step = -1, .lr = {NAN, NAN}};
    /* weights: the weights the resumed process started step K+1 from
     * (start.NAME) against the uninterrupted run's after step K */
    if (D == K + 1) {
        if (dck_resume_start_differing(full, res, K, &d->name)) return dck_oom("naming the cause");
        if (d->name) {
            d->cause = DCK_RESUME_WEIGHTS;
            return DCK_OK;
        }
    }
    sview a, b;
    bool oka = view_of(full, D, &a), okb = view_of(res, D, &b); /* both, whatever the first gives: both are freed */
    if (oka && okb && !state_cause(full, res, D, &a, &b, d))
        /* the first differing tensor, as bisect names it, else the
         * trajectory: loss or gradient-norm bits (or its root) */
        d->cause = p->rstep == D ? DCK_RESUME_TENSOR : DCK_RESUME_TRAJECTORY;
    free(a.v);
    free(b.v);
    return oka && okb ? DCK_OK : dck_oom("naming the cause");
}

/* ------------------------------------------------------------------ a parting before the stop */

dck_status dck_resume_tally_parting(const dck_resume_view *full, const dck_resume_view *stop,
                                    const dck_resume_parting *p, dck_resume_tally *t) {
    long D = p->step;
    memset(t, 0, sizeof *t);
    t->batch_equal = t->rng_equal = true;
    sview a, b;
    bool oka = view_of(full, D, &a), okb = view_of(stop, D, &b); /* both: both are freed */
    for (size_t i = 0; oka && okb && i < b.n; i++) {
        int k = ekind(&b, &b.v[i]);
        const char *nm = ename(&b, &b.v[i]);
        const dck_rec_entry *x = view_get(&a, k, nm);
        if (!x || k < 0 || k >= DCK_REC_KIND_COUNT) continue;
        bool eq = dck_digest_equal(x->digest, b.v[i].digest);
        t->n[k]++;
        t->diff[k] += !eq;
        if (k == DCK_REC_STATE && !strcmp(nm, "data.batch")) t->has_batch = true, t->batch_equal = eq;
        if (k == DCK_REC_STATE && !strncmp(nm, "rng.", 4)) t->has_rng = true, t->rng_equal &= eq;
    }
    free(a.v);
    free(b.v);
    if (!oka || !okb) return dck_oom(NULL);
    /* where the difference arises: the update, when the weights differ
     * first with equal gradients and moments; forward or backward, when a
     * gradient differs first from an equal batch */
    bool grads = t->n[DCK_REC_GRADIENT] && !t->diff[DCK_REC_GRADIENT];
    bool moments = !t->n[DCK_REC_OPTIMIZER] || !t->diff[DCK_REC_OPTIMIZER];
    if (p->rstep == D && p->kind == DCK_REC_PARAMETER && grads && moments) t->arises = DCK_RESUME_ARISES_UPDATE;
    else if (p->rstep == D && p->kind == DCK_REC_GRADIENT && t->has_batch && t->batch_equal)
        t->arises = DCK_RESUME_ARISES_FORWARD;
    return DCK_OK;
}

/* ------------------------------------------------------------------ the built-in trainer's runs */

void dck_resume_traj_check(const dck_traj_rec *a, size_t na, const dck_traj_rec *b, size_t nb, long steps,
                           dck_resume_traj_verdict *d) {
    memset(d, 0, sizeof *d);
    d->na = na;
    d->nb = nb;
    long step = -1;
    bool diff = dck_traj_compare(a, na, b, nb, &step, d->what, sizeof d->what);
    long lack_a = dck_traj_first_missing(a, na, 1, steps), lack_b = dck_traj_first_missing(b, nb, 1, steps);
    long gap = lack_a >= 0 && (lack_b < 0 || lack_a <= lack_b) ? lack_a : lack_b;
    bool root_a = false;
    long root = dck_traj_root_unmatched(a, na, b, nb, 1, steps, &root_a);
    if (root >= 0 && (!diff || root < step) && (gap < 0 || root < gap)) {
        d->kind = DCK_RESUME_TRAJ_ROOT;
        d->step = root;
        d->side = root_a; /* a holds it: b lacks it */
    } else if (gap >= 0 && (!diff || gap <= step)) {
        d->kind = DCK_RESUME_TRAJ_MISSING;
        d->step = gap;
        d->side = gap != lack_a;
    } else if (!diff && (na != (size_t)steps || nb != (size_t)steps)) {
        /* each holds 1..steps: the others are steps never run */
        const dck_traj_rec *extra = na != (size_t)steps ? a : b;
        d->kind = DCK_RESUME_TRAJ_EXTRA;
        d->step = extra[0].step < 1 ? extra[0].step : steps + 1;
        d->side = extra != a;
    } else {
        d->kind = diff ? DCK_RESUME_TRAJ_DIFFERS : DCK_RESUME_TRAJ_SAME;
        d->step = diff ? step : -1;
    }
    if (d->kind != DCK_RESUME_TRAJ_DIFFERS) d->what[0] = 0;
}

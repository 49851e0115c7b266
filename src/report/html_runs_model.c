/* The runs page's model (html_runs.h): the two runs as dck_run_open read
 * them (trajectory.jsonl, tensor_digests.bin, trace.bin, the checkpoints
 * of `detcheck train`), their steps paired and compared step by step into
 * the grid's cells, and each part's first difference as dck_runs_compare
 * found it. A checkpoint that cannot be read becomes a note under the
 * figure, never an error (the command has checked its inputs already);
 * only running out of memory fails (F->oom). */
#include "report/html_runs.h"

#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ notes and names */

void runs_note(fig *F, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (cli_lines_vadd(&F->notes, &F->nnotes, fmt, ap)) F->oom = true;
    va_end(ap);
}

size_t runs_module_len(const char *name) {
    const char *dot = strrchr(name, '.');
    return dot && dot != name ? (size_t)(dot - name) : strlen(name);
}

size_t runs_rec_module_len(const char *name, int kind) {
    size_t n = runs_module_len(name), m = n;
    if (kind != DCK_REC_OPTIMIZER || n == strlen(name)) return n;
    /* the parameter's name is name[0..n) */
    while (m > 0 && name[m - 1] != '.') m--;
    return m > 1 ? m - 1 : n;
}

/* ------------------------------------------------------------------ the grid's rows */

static int key_compare(const char *a, const char *b) {
    int c = dck_name_compare(a, b);
    return c ? c : strcmp(a, b);
}

/* The row of module name[0..len) in g, made when new; -1 when out of memory. */
static long group_row(fig *F, group *g, const char *name, size_t len) {
    char stack[512], *key = len < sizeof stack ? stack : malloc(len + 1);
    if (!key) return F->oom = true, -1;
    memcpy(key, name, len);
    key[len] = 0;
    size_t lo = 0, hi = g->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = key_compare(g->rows[g->order[mid]].name, key);
        if (c == 0) {
            if (key != stack) free(key);
            return (long)g->order[mid];
        }
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    if (g->n == g->cap) {
        size_t cap = g->cap ? 2 * g->cap : 32;
        row *r = realloc(g->rows, cap * sizeof *r);
        if (r) g->rows = r;
        size_t *o = r ? realloc(g->order, cap * sizeof *o) : NULL;
        if (o) g->order = o;
        if (!r || !o) {
            if (key != stack) free(key);
            return F->oom = true, -1;
        }
        g->cap = cap;
    }
    row *r = &g->rows[g->n];
    memset(r, 0, sizeof *r);
    r->name = key == stack ? strdup(key) : key;
    r->cells = calloc(F->ncols, sizeof *r->cells);
    if (!r->name || !r->cells) {
        free(r->name);
        free(r->cells);
        return F->oom = true, -1;
    }
    for (size_t c = 0; c < F->ncols; c++) {
        r->cells[c].mark = CLI_MARK_COUNT;
        r->cells[c].first = -1;
    }
    r->first = -1;
    r->at = LONG_MIN;
    memmove(g->order + lo + 1, g->order + lo, (g->n - lo) * sizeof *g->order);
    g->order[lo] = g->n;
    return (long)g->n++;
}

/* What one tensor (or field) of row r says about step: the state that
 * matters most wins; among differences, the first in kind order (rank)
 * and model order names the cell. */
static void row_note(row *r, long step, int st, int rank, const char *what, const char *kind, const char *how) {
    if (r->at != step) {
        r->at = step;
        r->st = CLI_MARK_COUNT;
        r->what = NULL;
    }
    bool better = prio(st) > prio(r->st);
    if (!better && prio(st) == prio(r->st) && is_diff(st) && r->what && what)
        better = rank < r->rank || (rank == r->rank && key_compare(what, r->what) < 0);
    if (!better) return;
    r->st = st;
    r->rank = rank;
    r->what = what;
    r->kind = kind;
    r->how = how;
}

/* The rows noted at step go into their column's cells. */
static void group_fold(fig *F, group *g, long step) {
    size_t col = col_of(F, step);
    for (size_t i = 0; i < g->n; i++) {
        row *r = &g->rows[i];
        if (r->at != step || r->st == CLI_MARK_COUNT) continue;
        cell *c = &r->cells[col];
        c->ncmp++;
        if (prio(r->st) > prio(c->mark)) c->mark = (uint8_t)r->st;
        if (!is_diff(r->st)) continue;
        c->ndiff++;
        if (r->first < 0) r->first = step;
        if (c->first >= 0) continue;
        c->first = step;
        if (r->what && asprintf(&c->what, "%s%s%s%s%s", r->kind ? r->kind : "", r->kind ? " " : "", r->what,
                                r->how ? ", " : "", r->how ? r->how : "") < 0) {
            c->what = NULL;
            F->oom = true;
        }
    }
}

static void group_release(group *g, size_t ncols) {
    for (size_t i = 0; i < g->n; i++) {
        for (size_t c = 0; g->rows[i].cells && c < ncols; c++) free(g->rows[i].cells[c].what);
        free(g->rows[i].cells);
        free(g->rows[i].name);
    }
    free(g->rows);
    free(g->order);
    free(g->shown);
}

/* ------------------------------------------------------------------ the steps */

/* A file one run recorded and the other did not: its part is not drawn. */
static void one_sided_notes(fig *F) {
    const dck_run *a = F->r[0], *b = F->r[1];
    if (a->has_rec != b->has_rec)
        runs_note(F, "%s recorded in %s only: the tensors are not compared", DCK_RECORD_FILE,
                  F->runs[a->has_rec ? 0 : 1].label);
    if (a->has_trace != b->has_trace)
        runs_note(F, "%s in %s only: the traces are not compared", DCK_TRACE_FILE, F->runs[a->has_trace ? 0 : 1].label);
}

/* The checkpoint steps both runs hold (at most MAX_CKPTS, the first). */
static long *common_ckpts(fig *F, size_t *n) {
    const dck_run *a = F->r[0], *b = F->r[1];
    size_t cap = a->nckpts < b->nckpts ? a->nckpts : b->nckpts;
    *n = 0;
    if (!cap) return NULL;
    long *v = malloc(cap * sizeof *v);
    if (!v) return F->oom = true, NULL;
    for (size_t i = 0, j = 0; i < a->nckpts && j < b->nckpts;) {
        if (a->ckpts[i] < b->ckpts[j]) i++;
        else if (b->ckpts[j] < a->ckpts[i]) j++;
        else v[(*n)++] = a->ckpts[i], i++, j++;
    }
    if (*n > MAX_CKPTS) {
        runs_note(F, "%zu checkpoints in both: the first %d are compared", *n, MAX_CKPTS);
        *n = MAX_CKPTS;
    }
    return v;
}

/* The steps of the trajectories, merged: one pair per step either holds. */
static void make_pairs(fig *F) {
    const dck_run *a = F->r[0], *b = F->r[1];
    size_t na = a->ntraj, nb = b->ntraj;
    if (!na && !nb) return;
    F->pairs = malloc((na + nb) * sizeof *F->pairs);
    if (!F->pairs) {
        F->oom = true;
        return;
    }
    for (size_t i = 0, j = 0; i < na || j < nb;) {
        pair *p = &F->pairs[F->npairs++];
        p->a = p->b = NULL;
        if (j >= nb || (i < na && a->traj[i].step < b->traj[j].step)) p->a = &a->traj[i++];
        else if (i >= na || b->traj[j].step < a->traj[i].step) p->b = &b->traj[j++];
        else p->a = &a->traj[i++], p->b = &b->traj[j++];
        p->step = p->a ? p->a->step : p->b->step;
    }
}

static void span(fig *F, long s, bool *any) {
    if (!*any || s < F->smin) F->smin = s;
    if (!*any || s > F->smax) F->smax = s;
    *any = true;
}

/* The steps the picture spans, and its columns; false when there is none. */
static bool make_columns(fig *F, const long *ck, size_t nck) {
    bool any = false;
    for (size_t i = 0; i < F->npairs; i++) span(F, F->pairs[i].step, &any);
    for (int k = 0; k < 2; k++) {
        const dck_run *d = F->r[k];
        for (size_t i = 0; both_rec(F) && i < d->rec.nsteps; i++) span(F, d->rec.steps[i].step, &any);
        for (size_t i = 0; both_trace(F) && i < d->trace.nsteps; i++) span(F, d->trace.steps[i].step, &any);
    }
    for (size_t i = 0; i < nck; i++) span(F, ck[i], &any);
    if (!any) return false;
    /* in doubles: a bogus step far away must not overflow the count */
    double range = (double)F->smax - (double)F->smin + 1;
    F->bin = range <= MAX_COLS ? 1 : (long)ceil(range / MAX_COLS);
    F->ncols = (size_t)ceil(range / (double)F->bin);
    F->colw = PLOT_W / (int)F->ncols;
    if (F->bin > 1) runs_note(F, "%.0f steps: each column of the grid holds %ld steps", range, F->bin);
    return true;
}

/* ------------------------------------------------------------------ comparing, step by step */

/* A float field of a trajectory record: identical bits, NaN/Inf on one
 * side only, or different. */
static int float_state(uint32_t a, uint32_t b) {
    if (a == b) return CLI_MARK_EQUAL;
    if (isfinite(dck_f32_from_bits(a)) != isfinite(dck_f32_from_bits(b))) return CLI_MARK_NONFINITE;
    return CLI_MARK_DIFFERS;
}

/* Rows loss, grad norm, lr and root, over the steps both trajectories
 * hold; a row nothing was known for (root without digests) is dropped. */
static void build_traj(fig *F) {
    static const char *const fields[] = {"loss", "grad norm", "lr", "root"};
    group *g = &F->traj;
    g->title = "trajectory";
    /* in the fields' order, not the names' */
    g->rows = calloc(4, sizeof *g->rows);
    g->order = calloc(4, sizeof *g->order);
    if (!g->rows || !g->order) {
        F->oom = true;
        return;
    }
    for (g->n = 0; g->n < 4; g->n++) {
        row *r = &g->rows[g->n];
        g->order[g->n] = g->n;
        r->name = strdup(fields[g->n]);
        r->cells = calloc(F->ncols, sizeof *r->cells);
        if (!r->name || !r->cells) {
            F->oom = true;
            g->n++; /* released with the others */
            return;
        }
        for (size_t c = 0; c < F->ncols; c++) r->cells[c].mark = CLI_MARK_COUNT, r->cells[c].first = -1;
        r->first = -1;
        r->at = LONG_MIN;
    }
    g->cap = 4;
    for (size_t i = 0; i < F->npairs; i++) {
        const pair *p = &F->pairs[i];
        if (!p->a || !p->b) continue;
        char what[4][96];
        char x[32], y[32];
        snprintf(what[0], sizeof what[0], "loss %s vs %s", fnum(dck_f32_from_bits(p->a->loss_bits), x, sizeof x),
                 fnum(dck_f32_from_bits(p->b->loss_bits), y, sizeof y));
        snprintf(what[1], sizeof what[1], "grad norm %s vs %s",
                 fnum(dck_f32_from_bits(p->a->grad_norm_bits), x, sizeof x),
                 fnum(dck_f32_from_bits(p->b->grad_norm_bits), y, sizeof y));
        snprintf(what[2], sizeof what[2], "lr %s vs %s", fnum(dck_f32_from_bits(p->a->lr_bits), x, sizeof x),
                 fnum(dck_f32_from_bits(p->b->lr_bits), y, sizeof y));
        snprintf(what[3], sizeof what[3], "root digest");
        row_note(&g->rows[0], p->step, float_state(p->a->loss_bits, p->b->loss_bits), 0, what[0], NULL, NULL);
        row_note(&g->rows[1], p->step, float_state(p->a->grad_norm_bits, p->b->grad_norm_bits), 0, what[1], NULL,
                 NULL);
        row_note(&g->rows[2], p->step, float_state(p->a->lr_bits, p->b->lr_bits), 0, what[2], NULL, NULL);
        if (p->a->has_root && p->b->has_root)
            row_note(&g->rows[3], p->step,
                     dck_digest_equal(p->a->root, p->b->root) ? CLI_MARK_EQUAL : CLI_MARK_DIFFERS, 0, what[3], NULL,
                     NULL);
        group_fold(F, g, p->step);
    }
}

/* Recorded tensors by (kind, name), to pair A's ids with B's. */
static int rec_id_cmp(const void *x, const void *y, void *ctx) {
    const dck_recording *r = ctx;
    uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    int c = (int)r->kinds[a] - (int)r->kinds[b];
    return c ? c : strcmp(r->names[a], r->names[b]);
}

static int tdiff_cmp(const void *x, const void *y) {
    const tensor_diff *a = x, *b = y;
    int c = dck_rec_kind_rank(a->kind) - dck_rec_kind_rank(b->kind);
    return c ? c : key_compare(a->name, b->name);
}

static void rec_diff(fig *F, int kind, const char *name, const char *how) {
    if (F->nrdiffs == F->rdiffs_cap) {
        size_t cap = F->rdiffs_cap ? 2 * F->rdiffs_cap : 64;
        tensor_diff *v = realloc(F->rdiffs, cap * sizeof *v);
        if (!v) {
            F->oom = true;
            return;
        }
        F->rdiffs = v;
        F->rdiffs_cap = cap;
    }
    F->rdiffs[F->nrdiffs++] = (tensor_diff){kind, name, how};
}

/* Rows: the modules of the recorded tensors (every kind), over the steps
 * both recorded. A state entry one run recorded and the other did not is
 * no information (as for bisect); any other tensor on one side only is
 * "on one side only". */
static void build_rec(fig *F) {
    const dck_recording *A = &F->r[0]->rec, *B = &F->r[1]->rec;
    group *g = &F->rec;
    g->title = "recorded tensors, by module";
    long *rowa = malloc((A->nnames + 1) * sizeof *rowa), *rowb = malloc((B->nnames + 1) * sizeof *rowb);
    long *bofa = malloc((A->nnames + 1) * sizeof *bofa);
    uint32_t *byname = malloc((B->nnames + 1) * sizeof *byname);
    size_t *stamp = calloc(B->nnames + 1, sizeof *stamp), *seen = calloc(B->nnames + 1, sizeof *seen);
    dck_digest *dig = malloc((B->nnames + 1) * sizeof *dig);
    if (!rowa || !rowb || !bofa || !byname || !stamp || !seen || !dig) {
        F->oom = true;
        goto out;
    }
    for (size_t i = 0; i < A->nnames && !F->oom; i++)
        rowa[i] = group_row(F, g, A->names[i], runs_rec_module_len(A->names[i], A->kinds[i]));
    for (size_t i = 0; i < B->nnames && !F->oom; i++)
        rowb[i] = group_row(F, g, B->names[i], runs_rec_module_len(B->names[i], B->kinds[i]));
    if (F->oom) goto out;
    for (uint32_t i = 0; i < B->nnames; i++) byname[i] = i;
    qsort_r(byname, B->nnames, sizeof *byname, rec_id_cmp, (void *)B);
    for (size_t i = 0; i < A->nnames; i++) {
        size_t lo = 0, hi = B->nnames;
        bofa[i] = -1;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            uint32_t j = byname[mid];
            int c = (int)B->kinds[j] - (int)A->kinds[i];
            if (!c) c = strcmp(B->names[j], A->names[i]);
            if (!c) {
                bofa[i] = j;
                break;
            }
            if (c < 0) lo = mid + 1;
            else hi = mid;
        }
    }
    size_t t = 0;
    for (size_t i = 0, j = 0; i < A->nsteps && j < B->nsteps;) {
        const dck_rec_step *sa = &A->steps[i], *sb = &B->steps[j];
        if (sa->step < sb->step) {
            i++;
            continue;
        }
        if (sb->step < sa->step) {
            j++;
            continue;
        }
        i++, j++, t++;
        long step = sa->step;
        bool listing = step == F->rstep;
        for (size_t k = 0; k < sb->n; k++) {
            const dck_rec_entry *e = &B->entries[sb->first + k];
            stamp[e->id] = t;
            dig[e->id] = e->digest;
        }
        for (size_t k = 0; k < sa->n; k++) {
            const dck_rec_entry *e = &A->entries[sa->first + k];
            int kind = A->kinds[e->id], st;
            const char *how = NULL;
            long jb = bofa[e->id];
            if (jb >= 0 && stamp[jb] == t) {
                seen[jb] = t;
                st = dck_digest_equal(e->digest, dig[jb]) ? CLI_MARK_EQUAL : CLI_MARK_DIFFERS;
            } else if (kind == DCK_REC_STATE) {
                continue;
            } else {
                st = CLI_MARK_MISSING;
                how = "only in run A";
            }
            const char *kn = dck_rec_kind_name((dck_rec_kind)kind);
            if (rowa[e->id] >= 0)
                row_note(&g->rows[rowa[e->id]], step, st, dck_rec_kind_rank(kind), A->names[e->id], kn, how);
            if (listing && st != CLI_MARK_EQUAL) rec_diff(F, kind, A->names[e->id], how ? how : "digest differs");
        }
        for (size_t k = 0; k < sb->n; k++) {
            const dck_rec_entry *e = &B->entries[sb->first + k];
            int kind = B->kinds[e->id];
            if (seen[e->id] == t || kind == DCK_REC_STATE) continue;
            if (rowb[e->id] >= 0)
                row_note(&g->rows[rowb[e->id]], step, CLI_MARK_MISSING, dck_rec_kind_rank(kind), B->names[e->id],
                         dck_rec_kind_name((dck_rec_kind)kind), "only in run B");
            if (listing) rec_diff(F, kind, B->names[e->id], "only in run B");
        }
        group_fold(F, g, step);
    }
    if (F->nrdiffs) qsort(F->rdiffs, F->nrdiffs, sizeof *F->rdiffs, tdiff_cmp);
out:
    free(rowa);
    free(rowb);
    free(bofa);
    free(byname);
    free(stamp);
    free(seen);
    free(dig);
}

/* The first differing checkpoint, as the result has it: its first tensor
 * and the list of those that differ. */
static void take_ckpt(fig *F, long step, const dck_cmp_result *r) {
    const dck_manifest_tensor *t = r->entries[0].golden ? r->entries[0].golden : r->entries[0].actual;
    F->cstep = step;
    F->cname = r->entries[0].name;
    F->ckind = dck_cmp_kind_name(r->entries[0].kind);
    F->cgroup = t ? dck_group_name(t->group) : NULL;
    F->ncdiffs_total = r->n;
    size_t n = r->n < MAX_TENSORS ? r->n : MAX_TENSORS;
    F->cdiffs = calloc(n ? n : 1, sizeof *F->cdiffs);
    if (!F->cdiffs) F->oom = true;
    for (size_t j = 0; j < n && F->cdiffs; j++)
        if (asprintf(&F->cdiffs[F->ncdiffs++], "%s (%s)", r->entries[j].name, dck_cmp_kind_name(r->entries[j].kind)) <
            0) {
            F->cdiffs[--F->ncdiffs] = NULL;
            F->oom = true;
            break;
        }
}

/* Rows: the modules of the checkpoints' tensors, at the checkpoints both
 * runs hold (built-in `detcheck train` runs); at the first that differs,
 * the result's manifests and tensors. */
static void build_ckpt(fig *F, const long *ck, size_t nck) {
    group *g = &F->ckpt;
    g->title = "checkpoint tensors, by module";
    for (size_t i = 0; i < nck && !F->oom; i++) {
        bool first = F->res && ck[i] == F->res->ckpt_differ;
        dck_manifest *own[2] = {NULL, NULL};
        dck_cmp_result diff;
        memset(&diff, 0, sizeof diff);
        dck_status s = DCK_OK;
        for (int k = 0; k < 2 && !first && !s; k++) s = dck_ckpt_manifest_load(F->r[k]->dir, ck[i], &own[k]);
        if (!first && !s) s = dck_manifest_compare(own[0], own[1], 0, &diff);
        if (s) {
            if (s == DCK_ERR_NOMEM) F->oom = true;
            else runs_note(F, "checkpoint %ld: %s; the checkpoints after it are not compared", ck[i], dck_last_error());
            dck_clear_error();
            dck_manifest_free(own[0]);
            dck_manifest_free(own[1]);
            break;
        }
        const dck_manifest *m[2] = {first ? F->res->ckpt_a : own[0], first ? F->res->ckpt_b : own[1]};
        const dck_cmp_result *r = first ? &F->res->ckpt_diff : &diff;
        F->ncompared++;
        for (int k = 0; k < 2; k++)
            for (size_t j = 0; j < dck_manifest_tensor_count(m[k]); j++) {
                const char *nm = dck_manifest_tensor_at(m[k], j)->name;
                long ri = group_row(F, g, nm, runs_module_len(nm));
                if (ri >= 0) row_note(&g->rows[ri], ck[i], CLI_MARK_EQUAL, 0, nm, NULL, NULL);
            }
        for (size_t j = 0; j < r->n; j++) {
            const dck_cmp_entry *e = &r->entries[j];
            int st = e->kind == DCK_CMP_DIGEST || e->kind == DCK_CMP_VALUE ? CLI_MARK_DIFFERS : CLI_MARK_MISSING;
            long ri = group_row(F, g, e->name, runs_module_len(e->name));
            if (ri >= 0) row_note(&g->rows[ri], ck[i], st, 0, e->name, NULL, dck_cmp_kind_name(e->kind));
        }
        if (first) take_ckpt(F, ck[i], r);
        group_fold(F, g, ck[i]);
        dck_cmp_result_release(&diff);
        dck_manifest_free(own[0]);
        dck_manifest_free(own[1]);
    }
}

/* The row of a traced event's module (made when new). */
static long trace_row(fig *F, const dck_trace *t, long *rows, const dck_trace_event *e) {
    if (e->module >= t->nnames) return -1;
    const char *m = t->names[e->module];
    if (rows[e->module] == -2) rows[e->module] = group_row(F, &F->trace, m, strlen(m));
    return rows[e->module];
}

static const char *event_what(const dck_trace *t, const dck_trace_event *e) {
    return e->kind == DCK_TRACE_OP && e->op < t->nnames ? t->names[e->op] : "module output";
}

/* Rows: the traced modules, over the steps both traced: an event whose
 * outputs differ marks its module; where execution parts (another event,
 * or a step that ended), the modules of both events differ and the rest of
 * the step is unknown. */
static void build_trace(fig *F) {
    const dck_trace *A = &F->r[0]->trace, *B = &F->r[1]->trace;
    group *g = &F->trace;
    g->title = "traced modules";
    long *ra = malloc((A->nnames + 1) * sizeof *ra), *rb = malloc((B->nnames + 1) * sizeof *rb);
    if (!ra || !rb) {
        F->oom = true;
        goto out;
    }
    for (size_t i = 0; i < A->nnames; i++) ra[i] = -2;
    for (size_t i = 0; i < B->nnames; i++) rb[i] = -2;
    for (size_t i = 0, j = 0; i < A->nsteps && j < B->nsteps && !F->oom;) {
        const dck_trace_step *sa = &A->steps[i], *sb = &B->steps[j];
        if (sa->step < sb->step) {
            i++;
            continue;
        }
        if (sb->step < sa->step) {
            j++;
            continue;
        }
        i++, j++;
        long step = sa->step;
        size_t n = sa->n > sb->n ? sa->n : sb->n;
        for (size_t k = 0; k < n; k++) {
            const dck_trace_event *a = k < sa->n ? &A->events[sa->first + k] : NULL;
            const dck_trace_event *b = k < sb->n ? &B->events[sb->first + k] : NULL;
            long xa = a ? trace_row(F, A, ra, a) : -1, xb = b ? trace_row(F, B, rb, b) : -1;
            const char *phase = dck_trace_phase_name((a ? a : b)->phase);
            if (!a || !b) {
                /* a step the recorder cut short: its later events unknown */
                if ((!a && sa->truncated) || (!b && sb->truncated)) break;
                long x = a ? xa : xb;
                if (x >= 0)
                    row_note(&g->rows[x], step, CLI_MARK_DIFFERS, 0, a ? "its step ended in run B here" :
                             "its step ended in run A here", phase, NULL);
                break;
            }
            if (!dck_trace_same_event(A, a, B, b)) {
                if (xa >= 0) row_note(&g->rows[xa], step, CLI_MARK_DIFFERS, 0, "execution differs", phase, NULL);
                if (xb >= 0) row_note(&g->rows[xb], step, CLI_MARK_DIFFERS, 0, "execution differs", phase, NULL);
                break;
            }
            const dck_trace_slot *pa = &A->slots[a->slot + a->nin], *pb = &B->slots[b->slot + b->nin];
            bool eq = true;
            for (int o = 0; o < a->nout && eq; o++)
                eq = pa[o].present == pb[o].present && dck_digest_equal(pa[o].digest, pb[o].digest);
            /* rank: the first event in execution order names the cell */
            if (xa >= 0)
                row_note(&g->rows[xa], step, eq ? CLI_MARK_EQUAL : CLI_MARK_DIFFERS, k < INT_MAX ? (int)k : INT_MAX,
                         event_what(A, a), phase, NULL);
        }
        group_fold(F, g, step);
    }
out:
    free(ra);
    free(rb);
}

/* ------------------------------------------------------------------ where the runs part */

/* repro's own first differences besides bisect's (one step in every line,
 * the page's too): tensor digests of a step, or a state entry at a step
 * both recorded, that one run recorded and the other did not (the
 * result's gaps). Runs of repro start alike, so these are differences
 * (resume-check's resumed run records its start.* entries at another step
 * by design). */
static void lstep_take(fig *F, long step, const char *what, int k) {
    if (step < 0 || (F->lstep >= 0 && F->lstep <= step)) return;
    F->lstep = step;
    snprintf(F->lwhat, sizeof F->lwhat, "%s recorded in run %s only", what, k ? "B" : "A");
}

static void rec_unpaired(fig *F) {
    static const char *const items[][2] = {{"recorded_steps", "tensor digests"}, {"recorded_state", "a state entry"}};
    for (size_t i = 0; i < F->res->ngaps; i++)
        for (size_t k = 0; k < sizeof items / sizeof items[0]; k++)
            if (!strcmp(F->res->gaps[i].item, items[k][0]))
                lstep_take(F, F->res->gaps[i].first, items[k][1], F->res->gaps[i].run);
}

/* Each part's first difference, as dck_runs_compare found them (the
 * checkpoints' in build_ckpt); and for repro and resume-check a step one
 * run recorded and the other did not (bisect compares the steps both ran;
 * a resumed run of resume-check starts after its stop point by design). */
static void find_parts(fig *F) {
    const dck_runs_result *res = F->res;
    const dck_run *a = F->r[0], *b = F->r[1];
    F->tstep = F->rstep = F->cstep = F->estep = F->lstep = F->first = -1;
    if (res && res->traj_differs) F->tstep = res->traj_step, F->twhat = res->traj_detail;
    if (res && res->rec_found)
        F->rstep = res->rec_step, F->rkind = res->rec_kind, F->rname = res->rec_name, F->rhow = res->rec_how;
    if (res && res->trace.found) F->estep = res->trace.step, F->td = &res->trace;
    if (strcmp(F->cmd, "bisect") && a->ntraj && b->ntraj) {
        bool resumed = !strcmp(F->cmd, "resume-check");
        long start = a->traj[0].step > b->traj[0].step ? a->traj[0].step : b->traj[0].step;
        for (size_t i = 0; i < F->npairs && F->lstep < 0; i++) {
            const pair *p = &F->pairs[i];
            if ((p->a == NULL) == (p->b == NULL) || (resumed && p->step < start)) continue;
            F->lstep = p->step;
            snprintf(F->lwhat, sizeof F->lwhat, "recorded in run %s only", p->a ? "A" : "B");
        }
    }
    if (res && !strcmp(F->cmd, "repro")) rec_unpaired(F);
}

static void take_first(fig *F) {
    long v[] = {F->tstep, F->rstep, F->cstep, F->estep, F->lstep};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        if (v[i] >= 0 && (F->first < 0 || v[i] < F->first)) F->first = v[i];
}

bool runs_build(fig *F) {
    one_sided_notes(F);
    make_pairs(F);
    size_t nck = 0;
    long *ck = F->oom ? NULL : common_ckpts(F, &nck);
    bool any = !F->oom && make_columns(F, ck, nck);
    if (any) {
        find_parts(F);
        build_traj(F);
        if (both_rec(F) && !F->oom) build_rec(F);
        if (nck && !F->oom) build_ckpt(F, ck, nck);
        if (both_trace(F) && !F->oom) build_trace(F);
        take_first(F);
    }
    free(ck);
    return any;
}

void runs_release(fig *F) {
    for (size_t i = 0; i < F->nnotes; i++) free(F->notes[i]);
    free(F->notes);
    free(F->pairs);
    group_release(&F->traj, F->ncols);
    group_release(&F->rec, F->ncols);
    group_release(&F->ckpt, F->ncols);
    group_release(&F->trace, F->ncols);
    free(F->rdiffs);
    for (size_t i = 0; i < F->ncdiffs; i++) free(F->cdiffs[i]);
    free(F->cdiffs);
}

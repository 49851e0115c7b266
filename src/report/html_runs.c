/* The picture of two runs, for bisect, repro and resume-check (html.h):
 * both runs' loss and gradient-norm curves over the steps, |A - B| of each
 * on a log scale, a grid of steps x modules coloured identical / differs /
 * not recorded, and the first difference (step, tensor, op) named on the
 * picture, with a vertical line at its step across curves and grid.
 *
 * Everything is read here from the two run directories (trajectory.jsonl,
 * tensor_digests.bin, trace.bin, the checkpoints of `detcheck train`), so a
 * command only names them. What cannot be read becomes a note under the
 * figure, never an error: the command has already checked its inputs and
 * said what it found; the page illustrates it. Only running out of memory
 * fails (NULL), as every figure does. */
#include "report/html.h"
#include "train/train.h"
#include "train/train_record.h"
#include "train/train_trace.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum {
    MAX_COLS = 200,          /* past this many steps a column holds several (>= 4 px each) */
    MAX_ROWS = 64,           /* rows of one group of the grid; the rest in a note */
    MAX_CKPTS = 1024,        /* common checkpoints compared */
    MAX_STEP_ROWS = 1000,    /* rows of the table of all steps */
    MAX_TENSORS = 100,       /* first differing tensors listed */
    MAX_POINT_MARKS = 60,    /* markers on the curves' points up to this many steps */
    MAX_DELTA_MARKS = 150,   /* the same for |A - B| (each with its title) */
    LABEL_CHARS = 34,        /* a row label past this is cut in the middle */
    MERGE_COLS = 12,         /* narrow cells of one state drawn as one rect, at most */
    NEAR_BEFORE = 3,         /* the table around the first difference */
    NEAR_AFTER = 6,
};

/* Geometry in CSS pixels: the page renders at device scale 1, and cells
 * and the line sit on whole pixels, so their colours are exact in a
 * screenshot (tests/cli/html_lib.sh). */
#define FIG_W 1040 /* fits a window 1,100 px wide */
#define GX0 220    /* left edge of the plots and the grid: row labels and ticks left of it */
#define PLOT_W 804 /* at most */
#define CURVE_H 100 /* a plot of both runs' values */
#define DELTA_H 120 /* a plot of |A - B|: a decade at least 10 px for 9 decades */

/* Colours of this figure besides cli_marks and CLI_HTML_*: the band of
 * steps whose values are equal bits, under |A - B|. */
#define EQUAL_BAND "#c4c4c4"

/* ------------------------------------------------------------------ what is drawn */

typedef struct {
    long step;
    const dck_traj_rec *a, *b; /* NULL: not recorded in that run */
} pair;

/* One cell of the grid: the steps of its column, folded. */
typedef struct {
    uint8_t mark;          /* the state that matters most (prio); CLI_MARK_COUNT: nothing compared */
    uint32_t ncmp, ndiff;  /* steps compared, of them differing */
    long first;            /* the first differing step, -1 */
    char *what;            /* what differs first there, or NULL */
} cell;

typedef struct {
    char *name;
    cell *cells;           /* one per column */
    long first;            /* the row's first differing step, -1 */
    /* the step being folded in (at), its state and what differs first */
    long at;
    int st, rank;
    const char *what, *kind, *how;
} row;

typedef struct {
    const char *title;
    row *rows;
    size_t n, cap;
    size_t *order;         /* row indices in display order: by name (dck_name_compare,
                            * then strcmp), the trajectory's in its fields' order */
    size_t *shown, nshown; /* what is drawn, in display order */
    long hidden_diff;      /* rows that differ and are not drawn */
} group;

typedef struct {
    int kind;              /* dck_rec_kind */
    const char *name, *how;
} tensor_diff;

typedef struct {
    dck_traj_rec *traj;
    size_t ntraj;
    bool has_traj, has_rec, has_trace;
    dck_recording rec;
    dck_trace trace;
    long *ckpts;
    size_t nckpts;
} run_data;

typedef struct {
    const char *cmd;
    const cli_html_run *runs;
    const cli_html_unpaired *unpaired; /* the command's, or NULL */
    run_data r[2];
    bool oom;
    char **notes;
    size_t nnotes;
    /* the steps: every one either trajectory holds, and the columns */
    pair *pairs;
    size_t npairs;
    long smin, smax, bin;
    size_t ncols;
    int colw;
    group traj, rec, ckpt, trace;
    /* where the runs part: each part's first step (-1: none) */
    long tstep, rstep, cstep, estep, lstep, first;
    char twhat[1024];      /* the trajectory's fields that differ */
    int rkind;
    char rname[DCK_REC_NAME_MAX + 1];
    const char *rhow;
    tensor_diff *rdiffs;   /* every tensor that differs at rstep */
    size_t nrdiffs, rdiffs_cap;
    char *cname;           /* the first differing checkpoint's first tensor */
    const char *ckind, *cgroup;
    char **cdiffs;         /* its differing tensors (name (kind)) */
    size_t ncdiffs, ncdiffs_total, ncompared;
    dck_trace_diff td;     /* the first differing traced event */
    char lwhat[64];        /* "recorded in run A only" */
} fig;

/* ------------------------------------------------------------------ notes and text */

static void note(fig *F, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(fig *F, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (cli_lines_vadd(&F->notes, &F->nnotes, fmt, ap)) F->oom = true;
    va_end(ap);
}

static bool present(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0 || errno != ENOENT;
}

/* A module: the tensor's name without its last component ("layers.0.weight"
 * is in "layers.0"); a name without a dot is its own. */
static size_t module_len(const char *name) {
    const char *dot = strrchr(name, '.');
    return dot && dot != name ? (size_t)(dot - name) : strlen(name);
}

/* The module of a recorded tensor: an optimizer state is named after its
 * parameter ("layers.0.weight.exp_avg"), so it is in its parameter's. */
static size_t rec_module_len(const char *name, int kind) {
    size_t n = module_len(name), m = n;
    if (kind != DCK_REC_OPTIMIZER || n == strlen(name)) return n;
    /* the parameter's name is name[0..n) */
    while (m > 0 && name[m - 1] != '.') m--;
    return m > 1 ? m - 1 : n;
}

/* A name for a row label: at most n bytes, cut in the middle (its start and
 * its end say the most: the model part and the layer's own name), never
 * inside a UTF-8 sequence. */
static void cut_name(FILE *f, const char *s, size_t n) {
    size_t len = strlen(s), head = n / 3, tail = n - head - 3;
    if (len <= n) {
        cli_html_text(f, s);
        return;
    }
    while (head && ((unsigned char)s[head] & 0xc0) == 0x80) head--;
    const char *t = s + len - tail;
    while (*t && ((unsigned char)*t & 0xc0) == 0x80) t++;
    cli_html_textn(f, s, head);
    fputs("...", f);
    cli_html_text(f, t);
}

static const char *num(double v, char *buf, size_t n) { return cli_html_num(v, buf, n); }

/* A float as the shortest decimal that reads back as its bits: two values
 * that differ in the last bit print differently. */
static const char *fnum(float v, char *buf, size_t n) {
    if (!isfinite(v)) return cli_html_num(v, buf, n);
    return dck_float_text(v, buf, n);
}

/* ------------------------------------------------------------------ the grid's rows */

static int prio(int m) {
    switch (m) {
    case CLI_MARK_EQUAL: return 1;
    case CLI_MARK_MISSING: return 2;
    case CLI_MARK_DIFFERS: return 3;
    case CLI_MARK_NONFINITE: return 4;
    default: return 0;
    }
}

static bool is_diff(int m) { return prio(m) >= 2; }

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

/* In doubles: steps from files may lie far apart, and a long would overflow. */
static size_t col_of(const fig *F, long step) {
    size_t c = (size_t)(((double)step - (double)F->smin) / (double)F->bin);
    return c < F->ncols ? c : F->ncols - 1;
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

/* ------------------------------------------------------------------ reading the runs */

/* One file of a run: 1 loaded, 0 absent, -1 not readable (a note says
 * why; the command has said it already, or has not needed the file). */
static int load_file(fig *F, int k, const char *file, dck_status (*load)(const char *, void *), void *out) {
    char *p = dck_path_join(F->runs[k].dir, file);
    if (!p) return F->oom = true, -1;
    int got = 0;
    if (present(p)) {
        dck_status s = load(p, out);
        got = s ? -1 : 1;
        if (s == DCK_ERR_NOMEM) F->oom = true;
        else if (s) note(F, "%s: %s", F->runs[k].label, dck_last_error());
        dck_clear_error();
    }
    free(p);
    return got;
}

typedef struct {
    dck_traj_rec **recs;
    size_t *n;
} traj_out;

static dck_status load_traj(const char *path, void *out) {
    traj_out *t = out;
    return dck_traj_load(path, t->recs, t->n);
}
static dck_status load_rec(const char *path, void *out) { return dck_recording_load(path, out); }
static dck_status load_trace(const char *path, void *out) { return dck_trace_load(path, out); }

static void load_runs(fig *F) {
    for (int k = 0; k < 2; k++) {
        run_data *d = &F->r[k];
        traj_out t = {&d->traj, &d->ntraj};
        int got = load_file(F, k, DCK_TRAJECTORY, load_traj, &t);
        d->has_traj = got > 0;
        if (!got) note(F, "%s: no %s: no curves for it", F->runs[k].label, DCK_TRAJECTORY);
        d->has_rec = load_file(F, k, DCK_RECORD_FILE, load_rec, &d->rec) > 0;
        d->has_trace = load_file(F, k, DCK_TRACE_FILE, load_trace, &d->trace) > 0;
        dck_status s = dck_ckpt_list(F->runs[k].dir, &d->ckpts, &d->nckpts, NULL, NULL);
        if (s == DCK_ERR_NOMEM) F->oom = true;
        else if (s) note(F, "%s: checkpoints: %s", F->runs[k].label, dck_last_error());
        dck_clear_error();
    }
    if (F->r[0].has_rec != F->r[1].has_rec)
        note(F, "%s recorded in %s only: the tensors are not compared", DCK_RECORD_FILE,
             F->runs[F->r[0].has_rec ? 0 : 1].label);
    if (F->r[0].has_trace != F->r[1].has_trace)
        note(F, "%s in %s only: the traces are not compared", DCK_TRACE_FILE, F->runs[F->r[0].has_trace ? 0 : 1].label);
}

static bool both_rec(const fig *F) { return F->r[0].has_rec && F->r[1].has_rec; }
static bool both_trace(const fig *F) { return F->r[0].has_trace && F->r[1].has_trace; }

/* The checkpoint steps both runs hold (at most MAX_CKPTS, the first). */
static long *common_ckpts(fig *F, size_t *n) {
    const run_data *a = &F->r[0], *b = &F->r[1];
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
        note(F, "%zu checkpoints in both: the first %d are compared", *n, MAX_CKPTS);
        *n = MAX_CKPTS;
    }
    return v;
}

/* The steps of the trajectories, merged: one pair per step either holds. */
static void make_pairs(fig *F) {
    const run_data *a = &F->r[0], *b = &F->r[1];
    size_t na = a->has_traj ? a->ntraj : 0, nb = b->has_traj ? b->ntraj : 0;
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
        const run_data *d = &F->r[k];
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
    if (F->bin > 1) note(F, "%.0f steps: each column of the grid holds %ld steps", range, F->bin);
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
    const dck_recording *A = &F->r[0].rec, *B = &F->r[1].rec;
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
        rowa[i] = group_row(F, g, A->names[i], rec_module_len(A->names[i], A->kinds[i]));
    for (size_t i = 0; i < B->nnames && !F->oom; i++)
        rowb[i] = group_row(F, g, B->names[i], rec_module_len(B->names[i], B->kinds[i]));
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


/* Rows: the modules of the checkpoints' tensors, at the checkpoints both
 * runs hold (built-in `detcheck train` runs). */
static void build_ckpt(fig *F, const long *ck, size_t nck) {
    group *g = &F->ckpt;
    g->title = "checkpoint tensors, by module";
    for (size_t i = 0; i < nck && !F->oom; i++) {
        dck_manifest *m[2] = {NULL, NULL};
        dck_cmp_result r;
        memset(&r, 0, sizeof r);
        dck_status s = dck_ckpt_manifest_load(F->runs[0].dir, ck[i], &m[0]);
        if (!s) s = dck_ckpt_manifest_load(F->runs[1].dir, ck[i], &m[1]);
        if (!s) s = dck_manifest_compare(m[0], m[1], 0, &r);
        if (s) {
            if (s == DCK_ERR_NOMEM) F->oom = true;
            else note(F, "checkpoint %ld: %s; the checkpoints after it are not compared", ck[i], dck_last_error());
            dck_clear_error();
            dck_manifest_free(m[0]);
            dck_manifest_free(m[1]);
            break;
        }
        F->ncompared++;
        for (int k = 0; k < 2; k++)
            for (size_t j = 0; j < dck_manifest_tensor_count(m[k]); j++) {
                const char *nm = dck_manifest_tensor_at(m[k], j)->name;
                long ri = group_row(F, g, nm, module_len(nm));
                if (ri >= 0) row_note(&g->rows[ri], ck[i], CLI_MARK_EQUAL, 0, nm, NULL, NULL);
            }
        for (size_t j = 0; j < r.n; j++) {
            const dck_cmp_entry *e = &r.entries[j];
            int st = e->kind == DCK_CMP_DIGEST || e->kind == DCK_CMP_VALUE ? CLI_MARK_DIFFERS : CLI_MARK_MISSING;
            long ri = group_row(F, g, e->name, module_len(e->name));
            if (ri >= 0) row_note(&g->rows[ri], ck[i], st, 0, e->name, NULL, dck_cmp_kind_name(e->kind));
        }
        if (r.n && F->cstep < 0) {
            const dck_manifest_tensor *t = r.entries[0].golden ? r.entries[0].golden : r.entries[0].actual;
            F->cstep = ck[i];
            F->cname = strdup(r.entries[0].name);
            F->ckind = dck_cmp_kind_name(r.entries[0].kind);
            F->cgroup = t ? dck_group_name(t->group) : NULL;
            F->ncdiffs_total = r.n;
            size_t n = r.n < MAX_TENSORS ? r.n : MAX_TENSORS;
            F->cdiffs = calloc(n ? n : 1, sizeof *F->cdiffs);
            if (!F->cname || !F->cdiffs) F->oom = true;
            for (size_t j = 0; j < n && F->cdiffs; j++)
                if (asprintf(&F->cdiffs[F->ncdiffs++], "%s (%s)", r.entries[j].name,
                             dck_cmp_kind_name(r.entries[j].kind)) < 0) {
                    F->cdiffs[--F->ncdiffs] = NULL;
                    F->oom = true;
                    break;
                }
        }
        group_fold(F, g, ck[i]);
        dck_cmp_result_release(&r);
        dck_manifest_free(m[0]);
        dck_manifest_free(m[1]);
    }
}

/* The same event as far as execution goes (as dck_trace_compare: names by
 * their text, since each run numbers its names in the order it met them). */
static bool same_key(const dck_trace *ta, const dck_trace_event *a, const dck_trace *tb, const dck_trace_event *b) {
    if (a->phase != b->phase || a->kind != b->kind || a->call != b->call || a->nin != b->nin || a->nout != b->nout)
        return false;
    if (strcmp(ta->names[a->module], tb->names[b->module])) return false;
    return a->kind != DCK_TRACE_OP || !strcmp(ta->names[a->op], tb->names[b->op]);
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
    const dck_trace *A = &F->r[0].trace, *B = &F->r[1].trace;
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
            if (!same_key(A, a, B, b)) {
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
 * both recorded, that one run recorded and the other did not. Runs of
 * repro start alike, so these are differences (resume-check's resumed run
 * records its start.* entries at another step by design). */
static void lstep_take(fig *F, long step, const char *what, int k) {
    if (step < 0 || (F->lstep >= 0 && F->lstep <= step)) return;
    F->lstep = step;
    snprintf(F->lwhat, sizeof F->lwhat, "%s recorded in run %s only", what, k ? "B" : "A");
}

static void rec_unpaired(fig *F) {
    const run_data *r = F->r;
    if (!r[0].has_rec && !r[1].has_rec) return;
    for (size_t i = 0, j = 0; i < r[0].rec.nsteps || j < r[1].rec.nsteps;) {
        long a = i < r[0].rec.nsteps ? r[0].rec.steps[i].step : LONG_MAX;
        long b = j < r[1].rec.nsteps ? r[1].rec.steps[j].step : LONG_MAX;
        if (a != b) {
            lstep_take(F, a < b ? a : b, "tensor digests", a < b ? 0 : 1);
            break;
        }
        i++, j++;
    }
    dck_rec_state_only u;
    if (both_rec(F) && dck_recording_state_only(&r[0].rec, &r[1].rec, &u)) F->oom = true;
    else if (both_rec(F))
        for (int k = 0; k < 2; k++)
            if (u.count[k]) lstep_take(F, u.step[k], "a state entry", k);
}

/* Each part's first difference, as the commands find them (dck_traj_compare,
 * dck_recording_compare, dck_trace_compare; the checkpoints in
 * build_ckpt); and for repro and resume-check a step one run recorded and
 * the other did not (bisect compares the steps both ran; a resumed run of
 * resume-check starts after its stop point by design). */
static void find_parts(fig *F) {
    const run_data *a = &F->r[0], *b = &F->r[1];
    F->tstep = F->rstep = F->cstep = F->estep = F->lstep = F->first = -1;
    if (a->has_traj && b->has_traj &&
        !dck_traj_compare(a->traj, a->ntraj, b->traj, b->ntraj, &F->tstep, F->twhat, sizeof F->twhat))
        F->tstep = -1;
    if (both_rec(F)) {
        int c = dck_recording_compare(&a->rec, &b->rec, &F->rstep, &F->rkind, F->rname, sizeof F->rname, &F->rhow);
        if (c < 0) F->oom = true;
        if (c <= 0) F->rstep = -1;
    }
    if (both_trace(F) && dck_trace_compare(&a->trace, &b->trace, &F->td)) F->estep = F->td.step;
    if (strcmp(F->cmd, "bisect") && a->has_traj && b->has_traj && a->ntraj && b->ntraj) {
        bool resumed = !strcmp(F->cmd, "resume-check");
        long start = a->traj[0].step > b->traj[0].step ? a->traj[0].step : b->traj[0].step;
        for (size_t i = 0; i < F->npairs && F->lstep < 0; i++) {
            const pair *p = &F->pairs[i];
            if ((p->a == NULL) == (p->b == NULL) || (resumed && p->step < start)) continue;
            F->lstep = p->step;
            snprintf(F->lwhat, sizeof F->lwhat, "recorded in run %s only", p->a ? "A" : "B");
        }
    }
    if (!strcmp(F->cmd, "repro")) rec_unpaired(F);
}

static void take_first(fig *F) {
    long v[] = {F->tstep, F->rstep, F->cstep, F->estep, F->lstep};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        if (v[i] >= 0 && (F->first < 0 || v[i] < F->first)) F->first = v[i];
}

/* The first step whose trajectory or recorded tensors differ: a traced
 * event after it is context, never the culprit (cli_trace_judge). */
static long rec_bound(const fig *F) {
    return F->tstep >= 0 && (F->rstep < 0 || F->tstep < F->rstep) ? F->tstep : F->rstep;
}

static void put_name(FILE *f, const char *s, size_t cut) {
    if (cut) cut_name(f, s, cut);
    else cli_html_text(f, s);
}

/* The traced event that differs first, with names cut to cut bytes. */
static void put_event(FILE *f, const fig *F, size_t cut) {
    const dck_trace_diff *d = &F->td;
    const dck_trace *t = &F->r[0].trace;
    if (d->how == DCK_TRACE_OUTPUT && d->a) {
        const dck_trace_event *e = d->a;
        fputs(e->kind == DCK_TRACE_OP ? "op " : "module ", f);
        if (e->kind == DCK_TRACE_OP) {
            put_name(f, t->names[e->op], cut);
            fputs(" in ", f);
        }
        put_name(f, t->names[e->module], cut);
        fprintf(f, " (%s)", dck_trace_phase_name(e->phase));
    } else {
        fprintf(f, "op: execution differs at event %zu", d->event);
    }
}

/* "first difference: step S, tensor T (kind), op O", names cut to cut
 * bytes (0: whole), escaped. */
static void put_first(FILE *f, const fig *F, size_t cut) {
    long S = F->first;
    fprintf(f, "first difference: step %ld", S);
    if (F->lstep == S && F->tstep != S && F->rstep != S && F->cstep != S && F->estep != S) {
        fputs(", ", f); /* what the header's step names comes first */
        cli_html_text(f, F->lwhat);
    }
    if (F->rstep >= 0) {
        fputs(", tensor ", f);
        put_name(f, F->rname, cut);
        fprintf(f, " (%s%s%s)", dck_rec_kind_name((dck_rec_kind)F->rkind), strcmp(F->rhow, "digest") ? ", " : "",
                strcmp(F->rhow, "digest") ? F->rhow : "");
        if (F->rstep != S) fprintf(f, " at step %ld", F->rstep);
    } else if (F->cstep >= 0 && F->cname) {
        fputs(", tensor ", f);
        put_name(f, F->cname, cut);
        fprintf(f, " (%s%s%s)", F->cgroup ? F->cgroup : F->ckind, F->cgroup && strcmp(F->ckind, "digest") ? ", " : "",
                F->cgroup && strcmp(F->ckind, "digest") ? F->ckind : "");
        if (F->cstep != S) fprintf(f, " at checkpoint %ld", F->cstep);
    }
    if (F->estep >= 0) {
        fputs(", ", f);
        put_event(f, F, cut);
        if (F->estep != S) fprintf(f, " at step %ld", F->estep);
        if (rec_bound(F) >= 0 && F->estep > rec_bound(F)) fputs(" (context, not a culprit)", f);
    }
}

/* The traced event in full, for the table under the figure. */
static void put_event_line(FILE *f, const fig *F) {
    const dck_trace_diff *d = &F->td;
    const dck_trace *t[2] = {&F->r[0].trace, &F->r[1].trace};
    fprintf(f, "step %ld, event %zu: ", d->step, d->event);
    if (d->how == DCK_TRACE_OUTPUT && d->a) {
        put_event(f, F, 0);
        fprintf(f, ", call %u: output %d differs; ", d->a->call, d->output);
        long bound = rec_bound(F);
        if (bound >= 0 && d->step > bound)
            fprintf(f, "the runs already differ at step %ld: context, not a culprit", bound);
        else if (d->input < 0) fputs("its inputs are equal: this event is the culprit", f);
        else fprintf(f, "its input %d already differed (inherited)", d->input);
        return;
    }
    for (int k = 0; k < 2; k++) {
        const dck_trace_event *e = k ? d->b : d->a;
        fputs(k ? "; " : "", f);
        cli_html_text(f, F->runs[k].label);
        fputs(" ran ", f);
        if (!e) {
            fputs("nothing more (its step ended)", f);
            continue;
        }
        fprintf(f, "%s ", dck_trace_phase_name(e->phase));
        if (e->kind == DCK_TRACE_OP) {
            cli_html_text(f, t[k]->names[e->op]);
            fputs(" in ", f);
        }
        cli_html_text(f, t[k]->names[e->module]);
        fprintf(f, " (call %u, %u inputs, %u outputs)", e->call, e->nin, e->nout);
    }
}

/* ------------------------------------------------------------------ the picture: curves */

static double x_of(const fig *F, long step) {
    return GX0 + ((double)step - (double)F->smin + 0.5) / (double)F->bin * F->colw;
}
static double grid_x1(const fig *F) { return GX0 + (double)F->ncols * F->colw; }

static float field_of(const dck_traj_rec *r, int field) {
    return dck_f32_from_bits(field ? r->grad_norm_bits : r->loss_bits);
}
static uint32_t bits_of(const dck_traj_rec *r, int field) { return field ? r->grad_norm_bits : r->loss_bits; }
static const char *field_name(int field) { return field ? "grad norm" : "loss"; }

/* A round step for about n ticks over range. */
static double nice_step(double range, int n) {
    double raw = range / n, p = pow(10, floor(log10(raw))), m = raw / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

/* The step axis under a plot at y: ticks and labels. */
static void step_ticks(FILE *f, const fig *F, double y) {
    double range = (double)F->smax - (double)F->smin + 1;
    double k = range <= 10 ? 1 : nice_step(range, 10);
    double t = ceil((double)F->smin / k) * k;
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"axis\"/>", GX0, y, grid_x1(F), y);
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" class=\"tick\" text-anchor=\"end\">step</text>", GX0 - 6, y + 13);
    for (; t <= (double)F->smax; t += k) {
        double x = x_of(F, (long)t);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"axis\"/>"
                   "<text x=\"%.1f\" y=\"%.1f\" class=\"tick\" text-anchor=\"middle\">%.0f</text>",
                x, y, x, y + 3, x, y + 13, t);
    }
}

/* A downward triangle at the top of a plot: a value that is NaN or Inf. */
static void nonfinite_mark(FILE *f, double x, double y, const char *colour, const char *title) {
    fprintf(f, "<g><path d=\"M%.1f %.1fL%.1f %.1fL%.1f %.1fZ\" fill=\"%s\"/><title>", x - 4, y, x + 4, y, x, y + 7,
            colour);
    cli_html_text(f, title);
    fputs("</title></g>", f);
}

/* One run's curve of field: a polyline, broken where the run has no record
 * or the value is not finite, at most two points a pixel (the extremes), so
 * a long run stays a small page; with few steps a marker on each (circles
 * for run A, squares for run B: the runs differ by shape as well). */
static void curve(FILE *f, const fig *F, int field, int side, double lo, double hi, double y0, double h) {
    const char *colour = side ? CLI_HTML_RUN_B : CLI_HTML_RUN_A;
    const char *style = side ? "stroke-width=\"2\" stroke-dasharray=\"7 5\"" : "stroke-width=\"2\"";
    bool open = false;
    long px = LONG_MIN;
    double bx = 0, ymin = 0, ymax = 0; /* the pixel's bucket: its first x, its extremes */
    for (size_t i = 0; i <= F->npairs; i++) {
        const dck_traj_rec *r = i < F->npairs ? (side ? F->pairs[i].b : F->pairs[i].a) : NULL;
        float v = r ? field_of(r, field) : NAN;
        double x = r ? x_of(F, F->pairs[i].step) : 0, y = y0 + h - ((double)v - lo) / (hi - lo) * h;
        bool ok = r && isfinite(v);
        if (open && (!ok || (long)floor(x) != px)) {
            fprintf(f, "%.1f,%.1f ", bx, ymin);
            if (ymax != ymin) fprintf(f, "%.1f,%.1f ", bx, ymax);
        }
        if (open && !ok) {
            fprintf(f, "\" fill=\"none\" stroke=\"%s\" %s/>", colour, style);
            open = false;
        }
        if (!ok) continue;
        if (!open) {
            fputs("<polyline points=\"", f);
            open = true;
            px = LONG_MIN;
        }
        if ((long)floor(x) != px) {
            px = (long)floor(x);
            bx = x;
            ymin = ymax = y;
        } else {
            if (y < ymin) ymin = y;
            if (y > ymax) ymax = y;
        }
    }
    if (F->npairs > MAX_POINT_MARKS) return;
    for (size_t i = 0; i < F->npairs; i++) {
        const dck_traj_rec *r = side ? F->pairs[i].b : F->pairs[i].a;
        float v = r ? field_of(r, field) : NAN;
        if (!r || !isfinite(v)) continue;
        double x = x_of(F, F->pairs[i].step), y = y0 + h - ((double)v - lo) / (hi - lo) * h;
        char t[32];
        if (side)
            fprintf(f, "<g><rect x=\"%.1f\" y=\"%.1f\" width=\"6\" height=\"6\" fill=\"%s\"/>", x - 3, y - 3, colour);
        else fprintf(f, "<g><circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>", x, y, colour);
        fprintf(f, "<title>step %ld, ", F->pairs[i].step);
        cli_html_text(f, F->runs[side].label);
        fprintf(f, ": %s %s</title></g>", field_name(field), fnum(v, t, sizeof t));
    }
}

/* NaN/Inf values of one run: a mark per column, the first one's step in
 * its title. */
static void nonfinite_marks(FILE *f, const fig *F, int field, int side, double y) {
    size_t last = SIZE_MAX;
    for (size_t i = 0; i < F->npairs; i++) {
        const dck_traj_rec *r = side ? F->pairs[i].b : F->pairs[i].a;
        if (!r || isfinite(field_of(r, field)) || col_of(F, F->pairs[i].step) == last) continue;
        last = col_of(F, F->pairs[i].step);
        char t[512], v[32];
        snprintf(t, sizeof t, "step %ld, %s: %s %s", F->pairs[i].step, F->runs[side].label, field_name(field),
                 num(field_of(r, field), v, sizeof v));
        nonfinite_mark(f, x_of(F, F->pairs[i].step), y, side ? CLI_HTML_RUN_B : CLI_HTML_RUN_A, t);
    }
}

/* Both runs' values of field over the steps, on a linear axis. */
static void curve_panel(FILE *f, const fig *F, int field, double y0, double h) {
    double lo = INFINITY, hi = -INFINITY;
    bool bad = false;
    for (size_t i = 0; i < F->npairs; i++)
        for (int k = 0; k < 2; k++) {
            const dck_traj_rec *r = k ? F->pairs[i].b : F->pairs[i].a;
            if (!r) continue;
            double v = field_of(r, field);
            if (!isfinite(v)) {
                bad = true;
                continue;
            }
            if (v < lo) lo = v;
            if (v > hi) hi = v;
        }
    double x1 = grid_x1(F);
    fprintf(f, "<text x=\"%d\" y=\"%.1f\">%s of both runs</text>", GX0, y0 - 4, field_name(field));
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" class=\"axis\"/>", GX0, y0, GX0, y0 + h);
    if (bad) {
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" class=\"tick\" text-anchor=\"end\">NaN/Inf</text>", GX0 - 3, y0 + 7);
        nonfinite_marks(f, F, field, 0, y0);
        nonfinite_marks(f, F, field, 1, y0 + 8);
    }
    if (lo > hi) {
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" class=\"tick\">no finite value</text>", GX0 + 8, y0 + h / 2);
        return;
    }
    double spanv = hi - lo;
    if (!(spanv > 0)) {
        spanv = fabs(hi) > 0 ? fabs(hi) * 0.1 : 1;
        lo -= spanv / 2;
        hi += spanv / 2;
    }
    double k = nice_step(hi - lo, 4);
    lo = floor(lo / k) * k;
    hi = ceil(hi / k) * k;
    /* NaN marks sit in the top 16 px: the curves below them */
    double top = bad ? y0 + 16 : y0, ph = y0 + h - top;
    for (double t = lo; t <= hi + k / 2; t += k) {
        double y = top + ph - (t - lo) / (hi - lo) * ph;
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"grid\"/>"
                   "<text x=\"%d\" y=\"%.1f\" class=\"tick\" text-anchor=\"end\">%.4g</text>",
                GX0, y, x1, y, GX0 - 3, y + 3, fabs(t) < k / 1e6 ? 0.0 : t);
    }
    curve(f, F, field, 0, lo, hi, top, ph);
    curve(f, F, field, 1, lo, hi, top, ph);
}

/* |A - B| of field where both runs have the step, on a log axis: equal bits
 * in a band at its foot (an exact zero has no logarithm, and "equal" is
 * the answer a reader looks for), NaN/Inf against a number in a strip at
 * its top; the differences between, as a line with marks. */
static void delta_panel(FILE *f, const fig *F, int field, double y0, double h) {
    double nan_y = y0, top = y0 + 12, bottom = y0 + h - 16, band = y0 + h - 10, x1 = grid_x1(F);
    double dmin = INFINITY, dmax = 0;
    size_t ndiff = 0, nboth = 0, nbad = 0;
    for (size_t i = 0; i < F->npairs; i++) {
        const pair *p = &F->pairs[i];
        if (!p->a || !p->b) continue;
        nboth++;
        if (bits_of(p->a, field) == bits_of(p->b, field)) continue;
        double d = fabs((double)field_of(p->a, field) - (double)field_of(p->b, field));
        if (!isfinite(d)) {
            nbad++;
            continue;
        }
        ndiff++;
        if (d > 0 && d < dmin) dmin = d;
        if (d > dmax) dmax = d;
    }
    fprintf(f, "<text x=\"%d\" y=\"%.1f\">|A &#x2212; B| of the %s (log scale)</text>", GX0, y0 - 4, field_name(field));
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" class=\"axis\"/>", GX0, y0, GX0, y0 + h);
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" class=\"tick\" text-anchor=\"end\">NaN/Inf</text>", GX0 - 3, nan_y + 7);
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" class=\"tick\" text-anchor=\"end\">equal</text>", GX0 - 3, band + 7);
    cli_logscale s = cli_logscale_fit(dmin, dmax > 0 ? dmax : dmin, bottom, top);
    if (dmax > 0) cli_svg_log_ticks(f, &s, GX0, GX0, x1, true);
    if (!nboth)
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" class=\"tick\">no step in both runs</text>", GX0 + 8, (top + bottom) / 2);
    else if (!ndiff && !nbad)
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" class=\"tick\">equal bits at every step both runs hold</text>", GX0 + 8,
                (top + bottom) / 2);
    /* the band: runs of consecutive steps with equal bits */
    double sw = (double)F->colw / (double)F->bin;
    for (size_t i = 0; i < F->npairs;) {
        const pair *p = &F->pairs[i];
        if (!p->a || !p->b || bits_of(p->a, field) != bits_of(p->b, field)) {
            i++;
            continue;
        }
        size_t j = i;
        while (j + 1 < F->npairs && F->pairs[j + 1].a && F->pairs[j + 1].b &&
               bits_of(F->pairs[j + 1].a, field) == bits_of(F->pairs[j + 1].b, field) &&
               F->pairs[j + 1].step == F->pairs[j].step + 1)
            j++;
        double xa = x_of(F, p->step) - sw / 2, xb = x_of(F, F->pairs[j].step) + sw / 2;
        fprintf(f, "<g><rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"8\" fill=\"%s\"/><title>", xa, band,
                xb - xa > 1 ? xb - xa : 1, EQUAL_BAND);
        if (j == i) fprintf(f, "step %ld: %s equal bits</title></g>", p->step, field_name(field));
        else fprintf(f, "steps %ld-%ld: %s equal bits</title></g>", p->step, F->pairs[j].step, field_name(field));
        i = j + 1;
    }
    /* the differences: a line through consecutive ones, and their marks */
    bool open = false;
    for (size_t i = 0; i <= F->npairs; i++) {
        const pair *p = i < F->npairs ? &F->pairs[i] : NULL;
        bool ok = p && p->a && p->b && bits_of(p->a, field) != bits_of(p->b, field);
        double d = ok ? fabs((double)field_of(p->a, field) - (double)field_of(p->b, field)) : 0;
        ok = ok && isfinite(d);
        if (open && !ok) {
            fprintf(f, "\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"/>", CLI_HTML_DELTA);
            open = false;
        }
        if (!ok) continue;
        if (!open) fputs("<polyline points=\"", f);
        open = true;
        fprintf(f, "%.1f,%.1f ", x_of(F, p->step), cli_logscale_at(&s, d));
    }
    size_t last = SIZE_MAX;
    for (size_t i = 0; i < F->npairs; i++) {
        const pair *p = &F->pairs[i];
        if (!p->a || !p->b || bits_of(p->a, field) == bits_of(p->b, field)) continue;
        float a = field_of(p->a, field), b = field_of(p->b, field);
        double d = fabs((double)a - (double)b), x = x_of(F, p->step);
        char t[640], u[32], v[32], w[32];
        snprintf(t, sizeof t, "step %ld: |A - B| = %s (%s %s, %s %s)%s", p->step, num(d, w, sizeof w),
                 F->runs[0].label, fnum(a, u, sizeof u), F->runs[1].label, fnum(b, v, sizeof v),
                 d == 0 ? ": other bits, equal values" : "");
        if (!isfinite(d)) {
            if (col_of(F, p->step) == last) continue;
            last = col_of(F, p->step);
            nonfinite_mark(f, x, nan_y, CLI_HTML_DELTA, t);
        } else if (ndiff <= MAX_DELTA_MARKS) {
            fprintf(f, "<g><circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"/><title>", x, cli_logscale_at(&s, d),
                    CLI_HTML_DELTA);
            cli_html_text(f, t);
            fputs("</title></g>", f);
        }
    }
}

/* ------------------------------------------------------------------ the picture: the grid */

typedef struct {
    size_t row, pos;
    long first;
} pick;

static int pick_by_first(const void *x, const void *y) {
    const pick *a = x, *b = y;
    if (a->first != b->first) return a->first < b->first ? -1 : 1;
    return a->pos < b->pos ? -1 : a->pos > b->pos;
}
static int pick_by_pos(const void *x, const void *y) {
    const pick *a = x, *b = y;
    return a->pos < b->pos ? -1 : a->pos > b->pos;
}

/* The rows drawn: all of them, or past MAX_ROWS those that differ (the
 * first to differ first) and then the others, in model order (a note
 * says how many are left out). */
static void choose_rows(fig *F, group *g) {
    if (!g->n) return;
    pick *p = malloc(g->n * sizeof *p);
    g->shown = malloc(g->n * sizeof *g->shown);
    if (!p || !g->shown) {
        free(p);
        F->oom = true;
        return;
    }
    /* a row nothing is known of (a root the runs did not record) is left out */
    size_t nd = 0, n = 0;
    for (size_t i = 0; i < g->n; i++) {
        size_t r = g->order[i], c = 0;
        while (c < F->ncols && !g->rows[r].cells[c].ncmp) c++;
        if (c == F->ncols) continue;
        p[n++] = (pick){r, i, g->rows[r].first >= 0 ? g->rows[r].first : LONG_MAX};
        nd += g->rows[r].first >= 0;
    }
    if (n > MAX_ROWS) {
        qsort(p, n, sizeof *p, pick_by_first);
        n = MAX_ROWS;
        g->hidden_diff = nd > n ? (long)(nd - n) : 0;
        if (g->hidden_diff)
            note(F, "%s: %d of %zu rows drawn, those that differ first; %ld more differ (the tables list the first "
                    "differing tensors)", g->title, MAX_ROWS, g->n, g->hidden_diff);
        else
            note(F, "%s: %d of %zu rows drawn: the %zu that differ, then the first others in model order", g->title,
                 MAX_ROWS, g->n, nd);
        qsort(p, n, sizeof *p, pick_by_pos);
    }
    for (size_t i = 0; i < n; i++) g->shown[i] = p[i].row;
    g->nshown = n;
    free(p);
}

/* A cell's title (a run of cells c0..c1 drawn as one, folded into x),
 * malloc'd and whole however long its names; NULL when out of memory. */
static char *cell_title(const fig *F, size_t c0, size_t c1, const char *rowname, const cell *x) {
    long lo = F->smin + (long)c0 * F->bin, hi = F->smin + (long)(c1 + 1) * F->bin - 1;
    if (hi > F->smax) hi = F->smax;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    if (lo == hi) fprintf(f, "step %ld, %s: ", lo, rowname);
    else fprintf(f, "steps %ld-%ld, %s: ", lo, hi, rowname);
    const char *what = x->what ? x->what : "";
    switch (x->mark) {
    case CLI_MARK_COUNT: fputs("not recorded in both runs", f); break;
    case CLI_MARK_EQUAL:
        if (lo == hi) fputs("identical", f);
        else fprintf(f, "identical (%u step%s compared)", x->ncmp, x->ncmp == 1 ? "" : "s");
        break;
    default: {
        const char *w = x->mark == CLI_MARK_NONFINITE ? "NaN/Inf on one side"
                        : x->mark == CLI_MARK_MISSING ? "on one side only"
                                                      : "differs";
        if (lo == hi) fprintf(f, "%s: %s", w, what);
        else fprintf(f, "%s at %u of %u compared steps; first at step %ld: %s", w, x->ndiff, x->ncmp, x->first, what);
    }
    }
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

static int drawn(int mark) { return mark == CLI_MARK_COUNT ? CLI_MARK_ABSENT : mark; }

/* One group's rows from y; returns the y under them. *mask collects the
 * marks drawn (for the legend); the first difference's row gets the marker. */
static double draw_group(FILE *f, fig *F, const group *g, double y, int rh, unsigned *mask, const row *mark_row) {
    if (!g->nshown) return y;
    /* a label on every row down to 8 px rows (a smaller font), then on
     * every few */
    int every = rh >= 8 ? 1 : (8 + rh - 1) / rh, gap = F->colw >= 6 ? 1 : 0;
    char font[40] = "";
    if (rh < 11) snprintf(font, sizeof font, " style=\"font-size:%dpx\"", rh >= 8 ? rh : 8);
    fprintf(f, "<text x=\"8\" y=\"%.1f\" font-weight=\"bold\">", y + 11);
    cli_html_text(f, g->title);
    fputs("</text>", f);
    y += 15;
    /* thin rows: a label every few, in step with the marked row's */
    size_t phase = 0;
    for (size_t i = 0; i < g->nshown; i++)
        if (&g->rows[g->shown[i]] == mark_row) phase = i % (size_t)every;
    for (size_t i = 0; i < g->nshown; i++) {
        const row *r = &g->rows[g->shown[i]];
        double ry = y + (double)i * rh;
        if (i % (size_t)every == phase) {
            fprintf(f, "<text x=\"%d\" y=\"%.1f\" class=\"tick\" text-anchor=\"end\"%s>", GX0 - 14,
                    ry + rh / 2.0 + (rh < 11 ? rh / 3.0 : 3.5), font);
            cut_name(f, r->name, LABEL_CHARS);
            fputs("<title>", f);
            cli_html_text(f, r->name);
            fputs("</title></text>", f);
        }
        for (size_t c = 0; c < F->ncols;) {
            const cell *x = &r->cells[c];
            size_t e = c;
            /* narrow columns (no gap to tell them apart): a run of cells in
             * one state is one rect, titled for all of them, short enough
             * that its state's shape repeats along the row */
            cell run = *x;
            if (!gap)
                while (e + 1 < F->ncols && e + 1 - c < MERGE_COLS && r->cells[e + 1].mark == x->mark) {
                    const cell *y = &r->cells[++e];
                    run.ncmp += y->ncmp;
                    run.ndiff += y->ndiff;
                    if (run.first < 0) run.first = y->first, run.what = y->what;
                }
            x = &run;
            char *t = cell_title(F, c, e, r->name, x);
            if (!t) F->oom = true;
            int m = drawn(x->mark);
            *mask |= 1u << m;
            cli_svg_cell(f, GX0 + (double)c * F->colw, ry, (double)(e - c + 1) * F->colw - gap, rh - 1, (cli_mark)m,
                         t ? t : "");
            free(t);
            c = e + 1;
        }
        if (r == mark_row) {
            char *t = NULL;
            if (asprintf(&t, "first difference: %s, step %ld", r->name, F->first) < 0) t = NULL, F->oom = true;
            cli_svg_first_marker(f, GX0 - 2, ry + (rh - 1) / 2.0, rh - 1 > 8 ? rh - 1 : 8, t ? t : "");
            free(t);
        }
    }
    return y + (double)g->nshown * rh + 8;
}

/* The row the first difference's marker points at: the named tensor's
 * module (recorded, checkpoint or traced, as the label names it), or the
 * first row that differs in the first difference's column. */
static const row *first_row(const fig *F) {
    if (F->first < 0) return NULL;
    const group *g = NULL;
    const char *name = NULL;
    size_t len = 0;
    if (F->rstep == F->first) g = &F->rec, name = F->rname, len = rec_module_len(name, F->rkind);
    else if (F->cstep == F->first && F->cname) g = &F->ckpt, name = F->cname, len = module_len(name);
    else if (F->estep == F->first && (F->td.a || F->td.b)) {
        const dck_trace_event *e = F->td.a ? F->td.a : F->td.b;
        g = &F->trace;
        name = F->r[F->td.a ? 0 : 1].trace.names[e->module];
        len = strlen(name);
    }
    if (g) {
        for (size_t i = 0; i < g->nshown; i++) {
            const row *r = &g->rows[g->shown[i]];
            if (strlen(r->name) == len && !memcmp(r->name, name, len)) return r;
        }
    }
    const group *all[] = {&F->traj, &F->rec, &F->ckpt, &F->trace};
    size_t col = col_of(F, F->first);
    for (size_t k = 0; k < 4; k++)
        for (size_t i = 0; i < all[k]->nshown; i++) {
            const row *r = &all[k]->rows[all[k]->shown[i]];
            if (is_diff(r->cells[col].mark)) return r;
        }
    return NULL;
}

/* ------------------------------------------------------------------ the figure */

/* What the figure says when no step differs: the command's verdict (bisect's
 * words), so that what one run holds alone is never shown as agreement.
 * [0] title, [1] the line on the picture, [2] the caption's lead. */
static const char *const *calm_words(const fig *F) {
    static const char *const words[][3] = {
        {"no difference between the runs", "no difference: every step both runs hold agrees bit for bit",
         "<strong>No difference:</strong> every step both runs hold agrees bit for bit. "},
        {"incomplete: what one run holds and the other lacks was not compared",
         "incomplete: not compared: what one run holds and the other lacks (listed under the figure)",
         "<strong>Incomplete:</strong> the steps both runs hold agree bit for bit, but what one run holds and the "
         "other lacks was not compared (listed under the figure); that is no agreement. "},
        {"identical where both runs hold data (--allow-partial)",
         "identical where both runs hold data (--allow-partial); not compared: listed under the figure",
         "<strong>Identical where both runs hold data</strong> (--allow-partial accepted what was not compared, "
         "listed under the figure). "},
    };
    const cli_html_unpaired *u = F->unpaired;
    return words[!u || !u->n ? 0 : u->counted ? 1 : 2];
}

/* The command's unpaired items, each named: under the figure. */
static void put_unpaired(FILE *f, const fig *F) {
    const cli_html_unpaired *u = F->unpaired;
    if (!u || !u->n) return;
    fprintf(f, "<h3 class=\"unpaired\">Not compared (%s)</h3>\n<ul class=\"unpaired\">",
            u->counted ? "no agreement: the verdict counts them" : "accepted by --allow-partial");
    for (size_t i = 0; i < u->n; i++) {
        fputs("<li>not compared: ", f);
        cli_html_text(f, u->lines[i] ? u->lines[i] : "(out of memory)");
        fputs("</li>", f);
    }
    fputs("</ul>\n", f);
}

static void svg(FILE *f, fig *F, unsigned *mask) {
    const group *groups[] = {&F->traj, &F->rec, &F->ckpt, &F->trace};
    size_t rows = 0;
    for (size_t k = 0; k < 4; k++) rows += groups[k]->nshown;
    /* a label on every row up to 60 rows (11 px a row); past it thinner
     * rows and a label every few, the grid at most about 600 px high */
    int rh = rows <= 48 ? 12 : rows <= 60 ? 11 : (int)(600 / rows) < 6 ? 6 : (int)(600 / rows);
    bool curves = F->npairs > 0;
    /* heights: the label lines, four plots, the step axis, the grid */
    double y = 44, line_top = y - 6;
    double h = y + (curves ? 2 * (CURVE_H + DELTA_H + 28) + 34 : 0);
    for (size_t k = 0; k < 4; k++) h += groups[k]->nshown ? 15 + (double)groups[k]->nshown * rh + 8 : 0;
    h += 30;
    fprintf(f, "<svg width=\"%d\" height=\"%.0f\" viewBox=\"0 0 %d %.0f\" role=\"img\"><title>",
            FIG_W, h + 12, FIG_W, h + 12);
    if (F->first >= 0) put_first(f, F, 0);
    else fputs(calm_words(F)[0], f);
    fputs("</title>\n", f);
    if (F->first >= 0) {
        fputs("<text x=\"8\" y=\"16\" class=\"first\">", f);
        put_first(f, F, 60);
        fputs("</text>", f);
        if (F->tstep >= 0) {
            fprintf(f, "<text x=\"8\" y=\"32\">trajectory: step %ld, ", F->tstep);
            cli_html_text(f, F->twhat);
            fputs("</text>", f);
        }
    } else {
        fprintf(f, "<text x=\"8\" y=\"16\" font-weight=\"bold\">%s</text>", calm_words(F)[1]);
    }
    fputs("\n", f);
    if (curves) {
        for (int field = 0; field < 2; field++) {
            curve_panel(f, F, field, y + 14, CURVE_H);
            y += CURVE_H + 14;
            delta_panel(f, F, field, y + 14, DELTA_H);
            y += DELTA_H + 14;
            fputs("\n", f);
        }
        step_ticks(f, F, y + 4);
        y += 34;
    }
    const row *mr = first_row(F);
    for (size_t k = 0; k < 4; k++) {
        y = draw_group(f, F, groups[k], y, rh, mask, mr);
        fputs("\n", f);
    }
    step_ticks(f, F, y - 4);
    if (F->first >= 0) {
        long x = lround(x_of(F, F->first));
        fprintf(f, "<g><line x1=\"%ld\" y1=\"%.1f\" x2=\"%ld\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"/>"
                   "<title>",
                x, line_top, x, y - 6, CLI_HTML_FIRST);
        put_first(f, F, 0);
        fputs("</title></g>", f);
        bool right = x > grid_x1(F) - 80;
        fprintf(f, "<text x=\"%ld\" y=\"%.1f\" class=\"first\" text-anchor=\"%s\">step %ld</text>",
                right ? x - 4 : x + 4, line_top + 8, right ? "end" : "start", F->first);
    }
    fputs("</svg>\n", f);
}

static void put_pair_value(FILE *f, const dck_traj_rec *r, int field) {
    char b[32];
    fputs("<td class=\"n\">", f);
    if (r) fputs(fnum(field_of(r, field), b, sizeof b), f);
    else fputs("-", f);
    fputs("</td>", f);
}

static void put_pair_delta(FILE *f, const pair *p, int field) {
    char b[32];
    fputs("<td class=\"n\">", f);
    if (!p->a || !p->b) fputs("-", f);
    else if (bits_of(p->a, field) == bits_of(p->b, field)) fputs("0", f);
    else fputs(num(fabs((double)field_of(p->a, field) - (double)field_of(p->b, field)), b, sizeof b), f);
    fputs("</td>", f);
}

static void steps_head(FILE *f) {
    fputs("<table class=\"steps\"><thead><tr><th>step</th>", f);
    for (int field = 0; field < 2; field++)
        fprintf(f, "<th>%s A</th><th>%s B</th><th>|A &#x2212; B|</th>", field_name(field), field_name(field));
    fputs("<th>lr</th><th>root</th><th>equal bits</th></tr></thead><tbody>\n", f);
}

static void steps_row(FILE *f, const fig *F, const pair *p) {
    bool first = p->step == F->first;
    if (first) fprintf(f, "<tr class=\"first\"><td class=\"n\"><strong>%ld</strong></td>", p->step);
    else fprintf(f, "<tr><td class=\"n\">%ld</td>", p->step);
    for (int field = 0; field < 2; field++) {
        put_pair_value(f, p->a, field);
        put_pair_value(f, p->b, field);
        put_pair_delta(f, p, field);
    }
    if (!p->a || !p->b) {
        fprintf(f, "<td>-</td><td>-</td><td>recorded in %s only", p->a ? "A" : "B");
    } else {
        bool lr = p->a->lr_bits == p->b->lr_bits, roots = p->a->has_root && p->b->has_root;
        bool root = roots && dck_digest_equal(p->a->root, p->b->root);
        fprintf(f, "<td>%s</td><td>%s</td><td>", lr ? "equal" : "differs", !roots ? "-" : root ? "equal" : "differs");
        const char *differ[4];
        size_t n = 0;
        if (p->a->loss_bits != p->b->loss_bits) differ[n++] = "loss";
        if (p->a->grad_norm_bits != p->b->grad_norm_bits) differ[n++] = "grad norm";
        if (!lr) differ[n++] = "lr";
        if (roots && !root) differ[n++] = "root";
        if (!n) fputs("yes", f);
        for (size_t i = 0; i < n; i++) fprintf(f, "%s%s", i ? ", " : "no: ", differ[i]);
    }
    if (first) {
        /* what parts here: the trajectory's own column says whether it does */
        const char *parts[4];
        size_t n = 0;
        if (F->rstep == p->step) parts[n++] = "recorded tensor";
        if (F->cstep == p->step) parts[n++] = "checkpoint";
        if (F->estep == p->step) parts[n++] = "traced op";
        if (F->lstep == p->step) parts[n++] = "steps recorded";
        fputs("; the first difference", f);
        for (size_t i = 0; i < n; i++) fprintf(f, "%s%s", i ? ", " : ": ", parts[i]);
    }
    fputs("</td></tr>\n", f);
}

static void tables(FILE *f, fig *F) {
    if (F->npairs) {
        size_t at = 0;
        while (at < F->npairs && F->first >= 0 && F->pairs[at].step < F->first) at++;
        size_t lo = F->first >= 0 ? (at > NEAR_BEFORE ? at - NEAR_BEFORE : 0) : 0;
        size_t hi = F->first >= 0 ? at + NEAR_AFTER : NEAR_BEFORE + NEAR_AFTER;
        if (hi > F->npairs) hi = F->npairs;
        fputs(F->first >= 0 ? "<h3>Steps around the first difference</h3>\n" : "<h3>The first steps</h3>\n", f);
        steps_head(f);
        for (size_t i = lo; i < hi; i++) steps_row(f, F, &F->pairs[i]);
        fputs("</tbody></table>\n", f);
        size_t n = F->npairs < MAX_STEP_ROWS ? F->npairs : MAX_STEP_ROWS;
        fprintf(f, "<details><summary>All %zu steps</summary>\n", F->npairs);
        if (n < F->npairs) fprintf(f, "<p class=\"note\">The first %zu steps.</p>\n", n);
        steps_head(f);
        for (size_t i = 0; i < n; i++) steps_row(f, F, &F->pairs[i]);
        fputs("</tbody></table></details>\n", f);
    }
    if (F->rstep >= 0) {
        fprintf(f, "<h3>Recorded tensors that differ at step %ld</h3>\n", F->rstep);
        fputs("<table class=\"tensors\"><thead><tr><th>kind</th><th>tensor</th><th>what</th></tr></thead><tbody>\n", f);
        for (size_t i = 0; i < F->nrdiffs && i < MAX_TENSORS; i++) {
            const tensor_diff *t = &F->rdiffs[i];
            fprintf(f, "<tr><td>%s</td><td class=\"name\">", dck_rec_kind_name((dck_rec_kind)t->kind));
            cli_html_text(f, t->name);
            fputs("</td><td>", f);
            cli_html_text(f, t->how);
            fputs("</td></tr>\n", f);
        }
        fputs("</tbody></table>\n", f);
        if (F->nrdiffs > MAX_TENSORS) fprintf(f, "<p class=\"note\">%zu more.</p>\n", F->nrdiffs - MAX_TENSORS);
    }
    if (F->cstep >= 0) {
        fprintf(f, "<h3>Checkpoint tensors that differ at step %ld</h3>\n<p>%zu of the tensors differ", F->cstep,
                F->ncdiffs_total);
        fprintf(f, " (%zu checkpoint%s in both compared).</p>\n<ol>", F->ncompared, F->ncompared == 1 ? "" : "s");
        for (size_t i = 0; i < F->ncdiffs; i++) {
            fputs("<li>", f);
            cli_html_text(f, F->cdiffs[i]);
            fputs("</li>", f);
        }
        fputs("</ol>\n", f);
        if (F->ncdiffs_total > F->ncdiffs)
            fprintf(f, "<p class=\"note\">%zu more.</p>\n", F->ncdiffs_total - F->ncdiffs);
    }
    if (F->estep >= 0) {
        fputs("<h3>First differing traced event</h3>\n<p>", f);
        put_event_line(f, F);
        fputs("</p>\n", f);
    }
}

static void legend_line(FILE *f, const fig *F, int k) {
    const run_data *d = &F->r[k];
    fprintf(f, "<span><svg width=\"30\" height=\"10\" aria-hidden=\"true\"><line x1=\"1\" y1=\"5\" x2=\"29\" y2=\"5\" "
               "stroke=\"%s\" stroke-width=\"2\"%s/></svg> ",
            k ? CLI_HTML_RUN_B : CLI_HTML_RUN_A, k ? " stroke-dasharray=\"7 5\"" : "");
    fputs(k ? "B: " : "A: ", f);
    cli_html_text(f, F->runs[k].label);
    fputs(k ? " (dashed, squares): " : " (solid, circles): ", f);
    cli_html_text(f, F->runs[k].dir);
    if (d->has_traj && d->ntraj) fprintf(f, ", steps %ld..%ld", d->traj[0].step, d->traj[d->ntraj - 1].step);
    fputs("</span> ", f);
}

static void release(fig *F) {
    for (int k = 0; k < 2; k++) {
        free(F->r[k].traj);
        dck_recording_release(&F->r[k].rec);
        dck_trace_release(&F->r[k].trace);
        free(F->r[k].ckpts);
    }
    for (size_t i = 0; i < F->nnotes; i++) free(F->notes[i]);
    free(F->notes);
    free(F->pairs);
    group_release(&F->traj, F->ncols);
    group_release(&F->rec, F->ncols);
    group_release(&F->ckpt, F->ncols);
    group_release(&F->trace, F->ncols);
    free(F->rdiffs);
    free(F->cname);
    for (size_t i = 0; i < F->ncdiffs; i++) free(F->cdiffs[i]);
    free(F->cdiffs);
}

char *cli_html_runs_figure(const char *cmd, const cli_html_run runs[2]) {
    return cli_html_runs_figure_unpaired(cmd, runs, NULL);
}

char *cli_html_runs_figure_unpaired(const char *cmd, const cli_html_run runs[2], const cli_html_unpaired *unpaired) {
    fig *F = calloc(1, sizeof *F);
    if (!F) return NULL;
    F->cmd = cmd;
    F->runs = runs;
    F->unpaired = unpaired;
    load_runs(F);
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
        choose_rows(F, &F->traj);
        choose_rows(F, &F->rec);
        choose_rows(F, &F->ckpt);
        choose_rows(F, &F->trace);
    }
    free(ck);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = F->oom ? NULL : open_memstream(&buf, &len);
    if (!f) {
        release(F);
        free(F);
        return NULL;
    }
    fputs("<section class=\"runs\"><h2>", f);
    cli_html_text(f, runs[0].label);
    fputs(" and ", f);
    cli_html_text(f, runs[1].label);
    fputs(", step by step</h2>\n<p class=\"legend\">", f);
    legend_line(f, F, 0);
    legend_line(f, F, 1);
    fputs("</p>\n", f);
    unsigned mask = 0;
    if (any) {
        fputs("<figure>\n", f);
        svg(f, F, &mask);
        fputs("<figcaption>", f);
        if (F->first >= 0) {
            fputs("<strong>", f);
            put_first(f, F, 0);
            fputs("</strong> (the vertical line). ", f);
        } else {
            fputs(calm_words(F)[2], f);
        }
        fputs("Above: the loss and the gradient norm of both runs, and under each the absolute difference "
              "|A &#x2212; B| on a log scale (equal bits in the grey band at its foot, NaN or Inf at its top). "
              "Below: one column per step",
              f);
        if (F->bin > 1) fprintf(f, " (%ld steps a column)", F->bin);
        fputs(", one row per module (a tensor's name without its last component), per trajectory field, per "
              "traced module; each cell says whether the runs' bits at that step are identical.</figcaption>\n"
              "</figure>\n",
              f);
        cli_html_legend(f, mask);
    } else {
        fputs("<p class=\"note\">Nothing to draw: neither run holds a readable record.</p>\n", f);
    }
    put_unpaired(f, F);
    if (F->nnotes) {
        fputs("<ul class=\"note\">", f);
        for (size_t i = 0; i < F->nnotes; i++) {
            fputs("<li>", f);
            cli_html_text(f, F->notes[i]);
            fputs("</li>", f);
        }
        fputs("</ul>\n", f);
    }
    if (any) tables(f, F);
    fputs("</section>\n", f);
    bool oom = F->oom;
    release(F);
    free(F);
    if (fclose(f) != 0 || oom) {
        free(buf);
        return NULL;
    }
    return buf;
}

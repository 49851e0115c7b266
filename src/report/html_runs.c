/* The picture of two runs, for bisect, repro and resume-check (html.h):
 * both runs' loss and gradient-norm curves over the steps, |A - B| of each
 * on a log scale, a grid of steps x modules coloured identical / differs /
 * not recorded, and the first difference (step, tensor, op) named on the
 * picture, with a vertical line at its step across curves and grid.
 *
 * A command hands over the two runs as dck_run_open read them
 * (trajectory.jsonl, tensor_digests.bin, trace.bin, the checkpoints of
 * `detcheck train`) and dck_runs_compare's result, or only the run
 * directories (cli_html_runs_figure_dirs opens and compares them):
 * html_runs_model.c compares the runs step by step, this file draws what it
 * found. What cannot be read becomes a note under the figure, never an
 * error: the command has already checked its inputs and said what it
 * found; the page illustrates it. Only running out of memory fails (NULL),
 * as every figure does. */
#include "report/html_runs.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Colours of this figure besides cli_marks and CLI_HTML_*: the band of
 * steps whose values are equal bits, under |A - B|. */
#define EQUAL_BAND "#c4c4c4"

/* ------------------------------------------------------------------ text */

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
    const dck_runs_trace *d = F->td;
    if (d->how == DCK_RUNS_TRACE_OUTPUT && d->a.present) {
        const dck_runs_event *e = &d->a;
        fputs(e->kind == DCK_TRACE_OP ? "op " : "module ", f);
        if (e->kind == DCK_TRACE_OP) {
            put_name(f, e->op, cut);
            fputs(" in ", f);
        }
        put_name(f, e->module, cut);
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
    const dck_runs_trace *d = F->td;
    fprintf(f, "step %ld, event %zu: ", d->step, d->event);
    if (d->how == DCK_RUNS_TRACE_OUTPUT && d->a.present) {
        put_event(f, F, 0);
        fprintf(f, ", call %u: output %d differs; ", d->a.call, d->output);
        long bound = rec_bound(F);
        if (bound >= 0 && d->step > bound)
            fprintf(f, "the runs already differ at step %ld: context, not a culprit", bound);
        else if (d->input < 0) fputs("its inputs are equal: this event is the culprit", f);
        else fprintf(f, "its input %d already differed (inherited)", d->input);
        return;
    }
    for (int k = 0; k < 2; k++) {
        const dck_runs_event *e = k ? &d->b : &d->a;
        fputs(k ? "; " : "", f);
        cli_html_text(f, F->runs[k].label);
        fputs(" ran ", f);
        if (!e->present) {
            fputs("nothing more (its step ended)", f);
            continue;
        }
        fprintf(f, "%s ", dck_trace_phase_name(e->phase));
        if (e->kind == DCK_TRACE_OP) {
            cli_html_text(f, e->op);
            fputs(" in ", f);
        }
        cli_html_text(f, e->module);
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
            runs_note(F, "%s: %d of %zu rows drawn, those that differ first; %ld more differ (the tables list the first "
                    "differing tensors)", g->title, MAX_ROWS, g->n, g->hidden_diff);
        else
            runs_note(F, "%s: %d of %zu rows drawn: the %zu that differ, then the first others in model order", g->title,
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
    if (F->rstep == F->first) g = &F->rec, name = F->rname, len = runs_rec_module_len(name, F->rkind);
    else if (F->cstep == F->first && F->cname) g = &F->ckpt, name = F->cname, len = runs_module_len(name);
    else if (F->estep == F->first && (F->td->a.present || F->td->b.present)) {
        g = &F->trace;
        name = (F->td->a.present ? &F->td->a : &F->td->b)->module;
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
 * words), so that what one run holds alone is never shown as agreement,
 * nor runs that could not be compared. [0] title, [1] the line on the
 * picture, [2] the caption's lead. */
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
        {"not compared: the runs could not be compared", "not compared: the runs could not be compared (see the notes)",
         "<strong>Not compared:</strong> the runs could not be compared (the notes under the figure say why). "},
    };
    const cli_html_unpaired *u = F->unpaired;
    return words[!F->res ? 3 : !u || !u->n ? 0 : u->counted ? 1 : 2];
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
    const dck_run *d = F->r[k];
    fprintf(f, "<span><svg width=\"30\" height=\"10\" aria-hidden=\"true\"><line x1=\"1\" y1=\"5\" x2=\"29\" y2=\"5\" "
               "stroke=\"%s\" stroke-width=\"2\"%s/></svg> ",
            k ? CLI_HTML_RUN_B : CLI_HTML_RUN_A, k ? " stroke-dasharray=\"7 5\"" : "");
    fputs(k ? "B: " : "A: ", f);
    cli_html_text(f, F->runs[k].label);
    fputs(k ? " (dashed, squares): " : " (solid, circles): ", f);
    cli_html_text(f, d->dir);
    if (d->ntraj) fprintf(f, ", steps %ld..%ld", d->traj[0].step, d->traj[d->ntraj - 1].step);
    fputs("</span> ", f);
}

/* The figure of F (made by the callers below), which it releases. */
static char *runs_figure(fig *F) {
    const cli_html_run *runs = F->runs;
    bool any = runs_build(F);
    if (any) {
        choose_rows(F, &F->traj);
        choose_rows(F, &F->rec);
        choose_rows(F, &F->ckpt);
        choose_rows(F, &F->trace);
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *f = F->oom ? NULL : open_memstream(&buf, &len);
    if (!f) {
        runs_release(F);
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
    runs_release(F);
    free(F);
    if (fclose(f) != 0 || oom) {
        free(buf);
        return NULL;
    }
    return buf;
}

char *cli_html_runs_figure(const char *cmd, const cli_html_run runs[2], const dck_runs_result *result,
                           const cli_html_unpaired *unpaired) {
    fig *F = calloc(1, sizeof *F);
    if (!F) return NULL;
    *F = (fig){.cmd = cmd, .runs = runs, .unpaired = unpaired, .r = {runs[0].run, runs[1].run}, .res = result};
    return runs_figure(F);
}

char *cli_html_runs_figure_dirs(const char *cmd, const cli_html_run_dir dirs[2], const cli_html_unpaired *unpaired) {
    dck_run *run[2] = {NULL, NULL}, none[2]; /* none: a run that cannot be read, drawn as empty */
    cli_html_run runs[2];
    dck_runs_result res;
    fig *F = calloc(1, sizeof *F);
    if (!F) return NULL;
    memset(none, 0, sizeof none);
    for (int k = 0; k < 2; k++) {
        dck_status s = dck_run_open(dirs[k].dir, &run[k]);
        if (s && s != DCK_ERR_NOMEM) runs_note(F, "%s: %s", dirs[k].label, dck_last_error());
        F->oom |= s == DCK_ERR_NOMEM;
        none[k].dir = (char *)dirs[k].dir;
        runs[k] = (cli_html_run){run[k] ? run[k] : &none[k], dirs[k].label};
    }
    /* the steps one run lacks are the command's to judge (unpaired) */
    const dck_runs_opts opts = {.missing_steps = true};
    dck_status s = run[0] && run[1] ? dck_runs_compare(run[0], run[1], &opts, &res) : DCK_ERR_INVALID;
    if (s && run[0] && run[1] && s != DCK_ERR_NOMEM) runs_note(F, "comparing the runs: %s", dck_last_error());
    F->oom |= s == DCK_ERR_NOMEM;
    dck_clear_error();
    F->cmd = cmd;
    F->runs = runs;
    F->unpaired = unpaired;
    F->r[0] = runs[0].run;
    F->r[1] = runs[1].run;
    F->res = s ? NULL : &res;
    char *html = runs_figure(F);
    if (run[0] && run[1]) dck_runs_result_release(&res);
    dck_run_free(run[0]);
    dck_run_free(run[1]);
    return html;
}

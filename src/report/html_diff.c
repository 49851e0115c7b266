/* diff's picture for --html (html.h): one row per layer in model order,
 * and for each group of tensors (weights, optimizer, rng, other) a panel
 * with the layer's state as a mark and its largest ULP distance and
 * relative L2 as bars on log scales, so that a reader sees where the two
 * checkpoints part and how the difference grows through the model. The
 * tables under it give every number again, for readers without a mouse (the
 * cells' titles are tooltips) and on paper.
 *
 * Sizes: a row costs a few hundred bytes whatever the number of tensors in
 * its layer (one mark and two bars per group, nothing per tensor), and the
 * table of differing tensors stops at TENSOR_ROWS rows, so a diff of 10,000
 * tensors stays a page of a few MB that Chromium draws at once. */
#include "report/html.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum {
    TENSOR_ROWS = 2000, /* rows of the differing-tensors table */
    LAYER_ROWS = 5000,  /* rows of the per-layer table */
    LABEL_CHARS = 28,   /* a longer layer name is cut in the picture */
};

/* What one layer holds of one group: the tensors (a stacked tensor counts
 * once per layer it spans, with that layer's slice) and their differences. */
typedef struct {
    size_t tensors, differing, within, only_a, only_b, mismatched;
    size_t nonfinite; /* tensors whose NaN/Inf differ (counts, or payloads) */
    size_t numeric;   /* tensors with a finite distance: the bars' figures */
    size_t nan_only;  /* tensors that differ only where a NaN is */
    uint64_t max_ulp;
    uint64_t max_ulp_same; /* over same-sign pairs (dck_diff_stats.max_ulp_same_sign): the bars */
    uint64_t sign_changes;
    double max_l2;    /* NaN when a tensor's is not a number (overflowed sums) */
    uint64_t nan_a, nan_b, inf_a, inf_b, nan_vs_number, nan_payload;
    long first;       /* its first differing tensor, model order; -1 none */
} cell;

static void cell_add(cell *c, const dck_diff_tensor *t, long idx, dck_diff_status status,
                     const dck_diff_stats *st, uint64_t numeric, double rel_l2) {
    c->tensors++;
    if (status == DCK_DIFF_EQUAL) return;
    c->differing++;
    if (c->first < 0 || idx < c->first) c->first = idx;
    switch (status) {
    case DCK_DIFF_WITHIN_TOLERANCE: c->within++; break;
    case DCK_DIFF_MISSING_IN_A: c->only_b++; break;
    case DCK_DIFF_MISSING_IN_B: c->only_a++; break;
    case DCK_DIFF_DTYPE_MISMATCH:
    case DCK_DIFF_SHAPE_MISMATCH: c->mismatched++; break;
    default: break;
    }
    if (!t->has_stats) return;
    c->nan_a += st->nan_a;
    c->nan_b += st->nan_b;
    c->inf_a += st->inf_a;
    c->inf_b += st->inf_b;
    c->nan_vs_number += st->nan_vs_number;
    c->nan_payload += st->nan_payload;
    if (st->nan_a != st->nan_b || st->inf_a != st->inf_b || st->nan_payload || st->nan_vs_number) c->nonfinite++;
    if (numeric) {
        if (!c->numeric || st->max_ulp > c->max_ulp) c->max_ulp = st->max_ulp;
        if (!c->numeric || st->max_ulp_same_sign > c->max_ulp_same) c->max_ulp_same = st->max_ulp_same_sign;
        c->sign_changes += st->sign_changes;
        if (!c->numeric || (!isnan(c->max_l2) && (isnan(rel_l2) || rel_l2 > c->max_l2))) c->max_l2 = rel_l2;
        c->numeric++;
    } else if (st->diff_count) {
        c->nan_only++;
    }
}

static void cell_merge(cell *c, const cell *o) {
    if (!o->tensors) return;
    if (o->numeric) {
        if (!c->numeric || o->max_ulp > c->max_ulp) c->max_ulp = o->max_ulp;
        if (!c->numeric || o->max_ulp_same > c->max_ulp_same) c->max_ulp_same = o->max_ulp_same;
        if (!c->numeric || (!isnan(c->max_l2) && (isnan(o->max_l2) || o->max_l2 > c->max_l2))) c->max_l2 = o->max_l2;
    }
    if (o->first >= 0 && (c->first < 0 || o->first < c->first)) c->first = o->first;
    c->tensors += o->tensors;
    c->differing += o->differing;
    c->within += o->within;
    c->only_a += o->only_a;
    c->only_b += o->only_b;
    c->mismatched += o->mismatched;
    c->nonfinite += o->nonfinite;
    c->numeric += o->numeric;
    c->nan_only += o->nan_only;
    c->nan_a += o->nan_a;
    c->nan_b += o->nan_b;
    c->inf_a += o->inf_a;
    c->inf_b += o->inf_b;
    c->nan_vs_number += o->nan_vs_number;
    c->nan_payload += o->nan_payload;
    c->sign_changes += o->sign_changes;
}

/* The one state a cell is drawn with: what most needs a look wins (the
 * title and the tables say the rest). */
static cli_mark cell_mark(const cell *c) {
    if (!c->differing) return CLI_MARK_EQUAL;
    if (c->nonfinite) return CLI_MARK_NONFINITE;
    if (c->only_a + c->only_b + c->mismatched) return CLI_MARK_MISSING;
    return c->differing > c->within ? CLI_MARK_DIFFERS : CLI_MARK_TOLERANCE;
}

/* "NaN 2/0, Inf 0/1 (A/B); NaN against a number 2; NaN payloads 1", or ""
 * when the NaN and infinity counts tell nothing. */
static void nonfinite_text(char *b, size_t n, const cell *c) {
    size_t k = 0;
    b[0] = 0;
#define PUT(...)                                                                                     \
    do {                                                                                             \
        if (k < n) k += (size_t)snprintf(b + k, n - k, __VA_ARGS__);                                 \
    } while (0)
    if (c->nan_a || c->nan_b) PUT("NaN %llu/%llu", (unsigned long long)c->nan_a, (unsigned long long)c->nan_b);
    if (c->inf_a || c->inf_b)
        PUT("%sInf %llu/%llu", k ? ", " : "", (unsigned long long)c->inf_a, (unsigned long long)c->inf_b);
    if (k) PUT(" (A/B)");
    if (c->nan_vs_number) PUT("%sNaN against a number %llu", k ? "; " : "", (unsigned long long)c->nan_vs_number);
    if (c->nan_payload) PUT("%sNaN payloads differ %llu", k ? "; " : "", (unsigned long long)c->nan_payload);
#undef PUT
}

/* The rows of d->layers (in model or name order) by their names' bytes,
 * for layer_row. */
static const dck_diff_result *rows_of;
static int cmp_row_name(const void *x, const void *y) {
    return strcmp(rows_of->layers[*(const size_t *)x].layer, rows_of->layers[*(const size_t *)y].layer);
}

static size_t *rows_by_name(const dck_diff_result *d) {
    size_t *v = malloc((d->nlayers ? d->nlayers : 1) * sizeof *v);
    if (!v) return NULL;
    for (size_t i = 0; i < d->nlayers; i++) v[i] = i;
    rows_of = d;
    qsort(v, d->nlayers, sizeof *v, cmp_row_name);
    return v;
}

/* The row of a layer name. */
static long layer_row(const dck_diff_result *d, const size_t *by_name, const char *layer) {
    size_t lo = 0, hi = d->nlayers;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(d->layers[by_name[mid]].layer, layer);
        if (c == 0) return (long)by_name[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

static bool has_layer(const dck_diff_tensor *t) { return t->layer || t->nslices; }

/* ------------------------------------------------------------------ text */

/* The largest ULP distance of same-sign pairs; with sign changes (a value
 * against its negation near zero is ~2^31 float32 ULPs, however small) also
 * their count and the distance with them. */
static void ulp_text(char *b, size_t n, const cell *c) {
    if (c->numeric && c->sign_changes)
        snprintf(b, n, "%llu (same-sign pairs; %llu sign change%s, max ULP %llu with them)",
                 (unsigned long long)c->max_ulp_same, (unsigned long long)c->sign_changes,
                 c->sign_changes == 1 ? "" : "s", (unsigned long long)c->max_ulp);
    else if (c->numeric) snprintf(b, n, "%llu", (unsigned long long)c->max_ulp);
    else if (c->nan_only) snprintf(b, n, "- (NaN only)");
    else snprintf(b, n, "-");
}

/* The sign-change column: a count, "-" where nothing was measured. */
static void sign_text(char *b, size_t n, const cell *c) {
    if (c->numeric) snprintf(b, n, "%llu", (unsigned long long)c->sign_changes);
    else snprintf(b, n, "-");
}

static void l2_text(char *b, size_t n, const cell *c) {
    if (c->numeric) cli_html_num(c->max_l2, b, n);
    else snprintf(b, n, "-");
}

/* A cell's tooltip: the layer, the group and every figure of the cell. */
static void cell_title(FILE *f, const dck_diff_result *d, const char *layer, dck_group g, const cell *c) {
    fputs("<title>", f);
    cli_html_text(f, layer);
    fprintf(f, ", %s: %zu tensor%s", dck_group_name(g), c->tensors, c->tensors == 1 ? "" : "s");
    if (!c->differing) {
        fputs(", identical</title>", f);
        return;
    }
    fprintf(f, ", %zu differ", c->differing);
    if (c->within) fprintf(f, " (%zu within the tolerances)", c->within);
    if (c->only_a) fprintf(f, "; %zu only in A", c->only_a);
    if (c->only_b) fprintf(f, "; %zu only in B", c->only_b);
    if (c->mismatched) fprintf(f, "; %zu dtype or shape mismatched", c->mismatched);
    if (!d->digest_only) {
        char u[128], l[32], nf[256];
        ulp_text(u, sizeof u, c);
        l2_text(l, sizeof l, c);
        nonfinite_text(nf, sizeof nf, c);
        fprintf(f, "; max ULP %s; rel L2 %s; NaN/Inf: %s", u, l, nf[0] ? nf : "none differ");
    } else {
        fputs("; digests only (a manifest): no magnitudes", f);
    }
    fputs("; first: ", f);
    cli_html_text(f, d->tensors[c->first].name);
    fputs("</title>", f);
}

/* At most LABEL_CHARS bytes of a layer name, cut at a character boundary. */
static void label_text(FILE *f, const char *s) {
    size_t n = strlen(s);
    if (n <= LABEL_CHARS) {
        cli_html_text(f, s);
        return;
    }
    n = LABEL_CHARS - 3;
    n = dck_utf8_back(s, n);
    cli_html_textn(f, s, n);
    fputs("...", f);
}

static void fmt_shape(char *b, size_t n, const uint64_t *shape, int ndim) {
    size_t k = (size_t)snprintf(b, n, "[");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(b + k, n - k, "%s%llu", i ? "," : "", (unsigned long long)shape[i]);
    if (k < n) snprintf(b + k, n - k, "]");
}

/* ------------------------------------------------------------------ the picture */

/* Geometry, in CSS pixels. A bar starts FLOOR pixels left of its scale's
 * lowest decade, so the smallest figure (1 ULP) is a bar, not nothing; a
 * figure of 0 (only +0 against -0 differs) is a stub of 2 pixels. */
enum { MARK_X = 14, LABEL_X = 18, MARK_W = 16, FLOOR = 6, COL_GAP = 24, PANEL_GAP = 28 };

typedef struct {
    const dck_diff_result *d;
    const cell *cells;    /* nrows x DCK_GROUP_COUNT */
    size_t nrows;
    long nolayer_row, first_row;
    int groups[DCK_GROUP_COUNT], ngroups;
    double row_h, label_w, col_w, panel_w, x0, width, height;
    double head;          /* above the rows: group names, and the scales when there are bars */
    cli_logscale ulp, l2; /* at x = 0; moved to each column */
    bool any_numeric;
    bool any_signs;       /* a cell has sign changes: the ULP scale leaves room for their count */
} picture;

static const char *row_name(const picture *p, size_t i) {
    return (long)i == p->nolayer_row ? "(no layer)" : p->d->layers[i].layer;
}

/* The first differing tensor of the first differing row. */
static const char *first_name(const picture *p) {
    const dck_diff_result *d = p->d;
    if (p->first_row == p->nolayer_row) return d->tensors[d->first_tensor].name;
    return d->tensors[d->layers[p->first_row].first_differing].name;
}

static cli_logscale at_x(cli_logscale s, double x) {
    s.p0 += x;
    s.p1 += x;
    return s;
}

static double bar_end(const cli_logscale *s, double v, double x) {
    if (!(v > 0)) return x + 2;
    return cli_logscale_at(s, v);
}

static void bar(FILE *f, double x, double end, double y, double h) {
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>", x, y, end - x, h,
            CLI_HTML_BAR);
}

/* One cell: the mark, then the two bars, or words where there is no bar
 * to draw (a NaN-only difference, a tensor on one side only, digests). */
static void draw_cell(FILE *f, const picture *p, size_t row, int g, double px, unsigned *used) {
    const cell *c = &p->cells[row * DCK_GROUP_COUNT + (size_t)g];
    if (!c->tensors) return;
    double y = p->head + (double)row * p->row_h, h = p->row_h - 4, ty = y + p->row_h / 2 + 4;
    cli_mark m = cell_mark(c);
    *used |= 1u << m;
    fputs("<g>", f);
    cell_title(f, p->d, row_name(p, row), (dck_group)g, c);
    cli_svg_cell(f, px, y + 2, h, h, m, NULL);
    double ux = px + MARK_W, lx = ux + p->col_w + COL_GAP;
    if (c->numeric && !p->d->digest_only) {
        cli_logscale su = at_x(p->ulp, ux + FLOOR), sl = at_x(p->l2, lx + FLOOR);
        double ue = bar_end(&su, (double)c->max_ulp_same, ux);
        bar(f, ux, ue, y + 2, h);
        /* sign changes: a count beside the bar, never a bar of ~2^31 ULPs */
        if (c->sign_changes)
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"signs\">&#177;%llu</text>", ue + 3, ty,
                    (unsigned long long)c->sign_changes);
        if (!isnan(c->max_l2)) bar(f, lx, bar_end(&sl, c->max_l2, lx), y + 2, h);
        else fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">rel L2 NaN</text>", lx + 2, ty);
    } else if (c->differing) {
        char t[256];
        if (p->d->digest_only) snprintf(t, sizeof t, "%zu of %zu differ", c->differing, c->tensors);
        else if (c->nonfinite || c->nan_only) nonfinite_text(t, sizeof t, c);
        else if (c->only_a + c->only_b) snprintf(t, sizeof t, "%zu on one side only", c->only_a + c->only_b);
        else if (c->mismatched) snprintf(t, sizeof t, "%zu mismatched", c->mismatched);
        else snprintf(t, sizeof t, "%zu differ", c->differing);
        /* a long NaN story is cut to the cell; the title has all of it */
        size_t room = (size_t)((p->d->digest_only ? p->panel_w - MARK_W : 2 * p->col_w + COL_GAP) / 6.5);
        if (strlen(t) > room && room > 3) strcpy(t + room - 3, "...");
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">%s</text>", ux + 2, ty, t);
    }
    fputs("</g>", f);
}

static void draw(FILE *f, const picture *p) {
    const dck_diff_result *d = p->d;
    double top = p->head, bottom = p->head + (double)p->nrows * p->row_h;
    fprintf(f,
            "<svg width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" role=\"img\" "
            "aria-label=\"max ULP and relative L2 per layer and group\">",
            p->width, p->height, p->width, p->height);
    /* every other row shaded, so a row reads across the panels */
    for (size_t i = 1; i < p->nrows; i += 2)
        fprintf(f, "<rect x=\"%d\" y=\"%.1f\" width=\"%.0f\" height=\"%.1f\" fill=\"#f2f2f2\"/>", LABEL_X - 2,
                top + (double)i * p->row_h, p->width - LABEL_X + 2, p->row_h);
    unsigned used = 0;
    for (int k = 0; k < p->ngroups; k++) {
        int g = p->groups[k];
        double px = p->x0 + k * (p->panel_w + PANEL_GAP), ux = px + MARK_W, lx = ux + p->col_w + COL_GAP;
        fprintf(f, "<text x=\"%.1f\" y=\"13\" style=\"font-weight:bold\">%s (%zu of %zu differ)</text>", px,
                dck_group_name((dck_group)g), d->group_differing[g], d->group_tensors[g]);
        if (d->digest_only || !p->any_numeric) continue;
        fprintf(f, "<text x=\"%.1f\" y=\"28\">%s</text><text x=\"%.1f\" y=\"28\">rel L2</text>", ux,
                p->any_signs ? "same-sign ULP" : "max ULP", lx);
        cli_logscale su = at_x(p->ulp, ux + FLOOR), sl = at_x(p->l2, lx + FLOOR);
        cli_svg_log_ticks(f, &su, 42, top - 4, bottom, false);
        cli_svg_log_ticks(f, &sl, 42, top - 4, bottom, false);
        if (p->nrows > 30) { /* long pictures: the scale again at the foot */
            cli_svg_log_ticks(f, &su, bottom + 13, bottom, bottom, false);
            cli_svg_log_ticks(f, &sl, bottom + 13, bottom, bottom, false);
        }
    }
    for (size_t i = 0; i < p->nrows; i++) {
        double y = top + (double)i * p->row_h;
        bool first = (long)i == p->first_row;
        if (first) {
            char *t = NULL; /* whole, however long the names */
            if (asprintf(&t, "first differing %s: %s (tensor %s)", d->layers_are_modules ? "module" : "layer",
                         row_name(p, i), first_name(p)) < 0)
                t = NULL;
            cli_svg_first_marker(f, MARK_X, y + p->row_h / 2, p->row_h - 4, t ? t : "first differing layer");
            free(t);
        }
        fprintf(f, "<text x=\"%d\" y=\"%.1f\"%s>", LABEL_X, y + p->row_h / 2 + 4, first ? " class=\"first\"" : "");
        label_text(f, row_name(p, i));
        fputs("</text>", f);
        for (int k = 0; k < p->ngroups; k++)
            draw_cell(f, p, i, p->groups[k], p->x0 + k * (p->panel_w + PANEL_GAP), &used);
        fputc('\n', f);
    }
    fputs("</svg>\n", f);
    cli_html_legend(f, used);
    if (!d->digest_only && p->any_numeric)
        fprintf(f,
                "<p class=\"legend\"><span><svg width=\"28\" height=\"14\" viewBox=\"0 0 28 14\" "
                "aria-hidden=\"true\"><rect x=\"0\" y=\"2\" width=\"28\" height=\"10\" fill=\"%s\"/></svg> "
                "max ULP / rel L2 (log scales; a bar that reaches 1 is 1 ULP)</span>%s</p>\n",
                CLI_HTML_BAR,
                p->any_signs ? "<span>&#177;N: N sign changes (signs differ, neither side 0)</span>"
                               "<span>same-sign ULP: the other pairs' max ULP</span>"
                             : "");
}

/* ------------------------------------------------------------------ tables */

static void layer_table(FILE *f, const picture *p) {
    const dck_diff_result *d = p->d;
    fputs("<h3>Layers</h3>\n<table class=\"layers\"><thead><tr><th>layer</th><th>tensors</th><th>differing</th>"
          "<th>max ULP</th><th>max rel L2</th><th>NaN/Inf</th><th>first differing tensor</th><th>sign changes</th>"
          "</tr></thead><tbody>\n",
          f);
    size_t shown = 0;
    for (size_t i = 0; i < p->nrows && shown < LAYER_ROWS; i++, shown++) {
        cell all = {.first = -1};
        for (int g = 0; g < DCK_GROUP_COUNT; g++) cell_merge(&all, &p->cells[i * DCK_GROUP_COUNT + (size_t)g]);
        char u[128] = "-", l[32] = "-", nf[256] = "", sg[32] = "-";
        if (!d->digest_only) {
            ulp_text(u, sizeof u, &all);
            sign_text(sg, sizeof sg, &all);
            l2_text(l, sizeof l, &all);
            nonfinite_text(nf, sizeof nf, &all);
        }
        bool first = (long)i == p->first_row;
        fputs(first ? "<tr><td class=\"name\"><strong>" : "<tr><td class=\"name\">", f);
        cli_html_text(f, row_name(p, i));
        fprintf(f, "%s</td><td class=\"n\">%zu</td><td class=\"n\">%zu</td><td class=\"n\">%s</td>"
                   "<td class=\"n\">%s</td><td>%s</td><td class=\"name\">",
                first ? " (first)</strong>" : "", all.tensors, all.differing, u, l, nf[0] ? nf : "-");
        if (all.first >= 0) cli_html_text(f, d->tensors[all.first].name);
        else fputs("-", f);
        fprintf(f, "</td><td class=\"n\">%s</td></tr>\n", sg);
    }
    fputs("</tbody></table>\n", f);
    if (p->nrows > LAYER_ROWS)
        fprintf(f, "<p class=\"note\">%zu more layers not listed (--json lists them all).</p>\n",
                p->nrows - LAYER_ROWS);
}

static void tensor_table(FILE *f, const dck_diff_result *d) {
    size_t nd = d->ntensors - d->count[DCK_DIFF_EQUAL];
    fprintf(f, "<h3>Differing tensors (%zu)</h3>\n", nd);
    if (!nd) {
        fputs("<p>None: every tensor has the same bits.</p>\n", f);
        return;
    }
    fputs("<table class=\"tensors\"><thead><tr><th>tensor</th><th>group</th><th>dtype</th><th>status</th>"
          "<th>differ</th><th>max abs</th><th>max ULP</th><th>rel L2</th><th>NaN/Inf (A/B)</th>"
          "<th>sign changes</th></tr></thead><tbody>\n",
          f);
    size_t shown = 0;
    for (size_t i = 0; i < d->ntensors && shown < TENSOR_ROWS; i++) {
        const dck_diff_tensor *t = &d->tensors[i];
        if (t->status == DCK_DIFF_EQUAL) continue;
        shown++;
        char dt[64], st[600], dc[64] = "-", ma[32] = "-", mu[128] = "-", l2[32] = "-", nf[256] = "-", sg[32] = "-";
        if (t->in_a && t->in_b && t->dtype_a != t->dtype_b)
            snprintf(dt, sizeof dt, "%s/%s", dck_dtype_name(t->dtype_a), dck_dtype_name(t->dtype_b));
        else snprintf(dt, sizeof dt, "%s", dck_dtype_name(t->in_a ? t->dtype_a : t->dtype_b));
        snprintf(st, sizeof st, "%s", dck_diff_status_name(t->status));
        if (t->status == DCK_DIFF_SHAPE_MISMATCH) {
            char sa[256], sb[256];
            fmt_shape(sa, sizeof sa, t->shape_a, t->ndim_a);
            fmt_shape(sb, sizeof sb, t->shape_b, t->ndim_b);
            snprintf(st, sizeof st, "%s %s/%s", dck_diff_status_name(t->status), sa, sb);
        }
        if (t->has_stats) {
            const dck_diff_stats *s = &t->stats;
            snprintf(dc, sizeof dc, "%llu/%llu", (unsigned long long)s->diff_count, (unsigned long long)s->count);
            if (t->numeric_diff_count) { /* NaN-only: no pair to measure, "-" rather than 0 */
                cli_html_num(s->max_abs, ma, sizeof ma);
                cli_html_num(t->rel_l2, l2, sizeof l2);
            }
            cell c = {.first = -1};
            cell_add(&c, t, (long)i, t->status, s, t->numeric_diff_count, t->rel_l2);
            if (t->numeric_diff_count) {
                ulp_text(mu, sizeof mu, &c);
                sign_text(sg, sizeof sg, &c);
            }
            nonfinite_text(nf, sizeof nf, &c);
            if (!nf[0]) snprintf(nf, sizeof nf, "-");
        }
        fputs("<tr><td class=\"name\">", f);
        cli_html_text(f, t->name);
        fprintf(f, "</td><td>%s</td><td>%s</td><td>%s</td><td class=\"n\">%s</td><td class=\"n\">%s</td>"
                   "<td class=\"n\">%s</td><td class=\"n\">%s</td><td>%s</td><td class=\"n\">%s</td></tr>\n",
                dck_group_name(t->group), dt, st, dc, ma, mu, l2, nf, sg);
    }
    fputs("</tbody></table>\n", f);
    if (nd > shown)
        fprintf(f, "<p class=\"note\">%zu more differing tensors not listed (--json lists them all).</p>\n",
                nd - shown);
}

static void value_table(FILE *f, const dck_diff_result *d) {
    if (!d->nvalues) return;
    fprintf(f, "<h3>Recorded values that differ (%zu)</h3>\n<table class=\"values\"><thead><tr><th>value</th>"
               "<th>A</th><th>B</th></tr></thead><tbody>\n",
            d->nvalues);
    for (size_t i = 0; i < d->nvalues && i < TENSOR_ROWS; i++) {
        const dck_diff_value *v = &d->values[i];
        fputs("<tr><td class=\"name\">", f);
        cli_html_text(f, v->name);
        fputs("</td><td class=\"msg\">", f);
        cli_html_text(f, v->a ? v->a : "(absent)");
        fputs("</td><td class=\"msg\">", f);
        cli_html_text(f, v->b ? v->b : "(absent)");
        fputs("</td></tr>\n", f);
    }
    fputs("</tbody></table>\n", f);
    if (d->nvalues > TENSOR_ROWS)
        fprintf(f, "<p class=\"note\">%zu more values not listed (--json lists them all).</p>\n",
                d->nvalues - TENSOR_ROWS);
}

/* ------------------------------------------------------------------ the figure */

/* Fills p's cells (one row per layer, and one for the tensors of no layer
 * when there are any); false when out of memory. */
static bool collect(picture *p) {
    const dck_diff_result *d = p->d;
    bool nolayer = false;
    for (size_t i = 0; i < d->ntensors && !nolayer; i++) nolayer = !has_layer(&d->tensors[i]);
    p->nrows = d->nlayers + nolayer;
    p->nolayer_row = nolayer ? (long)d->nlayers : -1;
    cell *cells = calloc(p->nrows ? p->nrows * DCK_GROUP_COUNT : 1, sizeof *cells);
    size_t *by_name = rows_by_name(d);
    if (!cells || !by_name) {
        free(cells);
        free(by_name);
        return false;
    }
    for (size_t i = 0; i < p->nrows * DCK_GROUP_COUNT; i++) cells[i].first = -1;
    for (size_t i = 0; i < d->ntensors; i++) {
        const dck_diff_tensor *t = &d->tensors[i];
        for (size_t l = 0; l < t->nslices; l++) {
            const dck_diff_slice *sl = &t->slices[l];
            long r = layer_row(d, by_name, sl->layer);
            if (r >= 0) /* every slice's layer is one of d->layers */
                cell_add(&cells[(size_t)r * DCK_GROUP_COUNT + t->group], t, (long)i, sl->status, &sl->stats,
                         sl->numeric_diff_count, sl->rel_l2);
        }
        if (t->nslices) continue;
        long r = t->layer ? layer_row(d, by_name, t->layer) : p->nolayer_row;
        if (r >= 0)
            cell_add(&cells[(size_t)r * DCK_GROUP_COUNT + t->group], t, (long)i, t->status, &t->stats,
                     t->numeric_diff_count, t->rel_l2);
    }
    free(by_name);
    p->cells = cells;
    return true;
}

static void layout(picture *p) {
    const dck_diff_result *d = p->d;
    p->ngroups = 0;
    for (int g = 0; g < DCK_GROUP_COUNT; g++)
        if (d->group_tensors[g]) p->groups[p->ngroups++] = g;
    p->row_h = p->nrows <= 64 ? 18 : 14;
    size_t longest = 10;
    for (size_t i = 0; i < p->nrows; i++) {
        size_t n = strlen(row_name(p, i));
        if (n > longest) longest = n;
    }
    if (longest > LABEL_CHARS) longest = LABEL_CHARS;
    p->label_w = 7.0 * (double)longest;
    p->x0 = LABEL_X + p->label_w + 12;
    /* the panels share about 1,100 pixels: a page fits a laptop's width */
    double room = 1100 - p->x0 - (p->ngroups - 1) * PANEL_GAP;
    if (d->digest_only) {
        p->col_w = 0;
        p->panel_w = MARK_W + 160;
    } else {
        p->col_w = (room / (p->ngroups ? p->ngroups : 1) - MARK_W - COL_GAP) / 2;
        if (p->col_w > 160) p->col_w = 160;
        if (p->col_w < 90) p->col_w = 90;
        p->panel_w = MARK_W + 2 * p->col_w + COL_GAP;
    }
    p->width = p->x0 + p->ngroups * p->panel_w + (p->ngroups - 1) * PANEL_GAP + 8;
    /* the first differing tensor's layer; the row of no layer when that
     * tensor numbers none */
    p->first_row = -1;
    if (d->first_tensor >= 0)
        p->first_row = has_layer(&d->tensors[d->first_tensor]) ? d->first_layer : p->nolayer_row;
    /* one scale per kind of figure for every panel, so that groups compare */
    uint64_t umax = 1;
    double lmin = INFINITY, lmax = 0;
    for (size_t i = 0; i < p->nrows * DCK_GROUP_COUNT; i++) {
        const cell *c = &p->cells[i];
        if (!c->numeric) continue;
        p->any_numeric = true;
        if (c->max_ulp_same > umax) umax = c->max_ulp_same;
        if (c->sign_changes) p->any_signs = true;
        if (c->max_l2 > 0 && isfinite(c->max_l2)) {
            if (c->max_l2 < lmin) lmin = c->max_l2;
            if (c->max_l2 > lmax) lmax = c->max_l2;
        }
    }
    if (!(lmax > 0)) lmin = lmax = 1e-7;
    p->ulp = cli_logscale_fit(1, (double)umax, 0, p->col_w - FLOOR - (p->any_signs ? 48 : 0));
    p->l2 = cli_logscale_fit(lmin, lmax, 0, p->col_w - FLOOR);
    p->head = p->any_numeric ? 48 : 22;
    p->height = p->head + (double)p->nrows * p->row_h + (p->nrows > 30 && p->any_numeric ? 20 : 6);
}

char *cli_html_diff_figure(const dck_diff_result *d, const char *a, const char *b) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    picture p = {.d = d};
    bool ok = collect(&p);
    if (ok) layout(&p);
    fprintf(f, "<section class=\"figure diff\">\n<h2>Difference by %s</h2>\n<p>A: ",
            d->layers_are_modules ? "module" : "layer");
    cli_html_text(f, a);
    fputs("<br>B: ", f);
    cli_html_text(f, b);
    fputs("</p>\n", f);
    if (ok && d->first_tensor >= 0) {
        fprintf(f, "<p><strong>first differing %s: ", d->layers_are_modules ? "module" : "layer");
        cli_html_text(f, row_name(&p, (size_t)p.first_row));
        fputs("</strong> (tensor ", f);
        cli_html_text(f, first_name(&p));
        fputs(")", f);
        if (p.first_row == p.nolayer_row && d->first_layer >= 0) {
            fputs("; first numbered layer that differs: ", f);
            cli_html_text(f, d->layers[d->first_layer].layer);
            fputs(" (tensor ", f);
            cli_html_text(f, d->tensors[d->layers[d->first_layer].first_differing].name);
            fputs(")", f);
        }
        fputs("</p>\n", f);
    } else if (ok && d->ntensors) {
        fprintf(f, "<p>All %zu tensors have the same bits%s.</p>\n", d->ntensors,
                d->nvalues ? " (recorded values differ: see below)" : "");
    }
    if (d->digest_only)
        fputs("<p class=\"note\">A manifest is involved: only digests were compared, so there are no "
              "magnitudes (max ULP, relative L2) to draw; a layer's tensors are marked identical or "
              "different.</p>\n",
              f);
    if (d->layouts_differ[0] || d->naside_tensors || d->naside_values) {
        fprintf(f, "<p class=\"note\">%zu tensors and %zu values of layout state not compared", d->naside_tensors,
                d->naside_values);
        if (d->layouts_differ[0]) {
            fputs(" (layouts differ: ", f);
            cli_html_text(f, d->layouts_differ);
            fputs(")", f);
        }
        fputs(".</p>\n", f);
    }
    if (ok && p.nrows) {
        static const char *const absent_word[DCK_GROUP_COUNT] = {"weights", "optimizer state", "RNG state", ""};
        bool note = false;
        for (int g = 0; g < DCK_GROUP_OTHER; g++)
            if (!d->group_tensors[g]) {
                fprintf(f, "%s%s", note ? ", " : "<p class=\"note\">No ", absent_word[g]);
                note = true;
            }
        if (note) fputs(" on either side.</p>\n", f);
        fputs("<figure>\n", f);
        draw(f, &p);
        fprintf(f, "<figcaption>One row per %s (tensors %s in the last row), in %s. Per group the %s's state, "
                   "its largest ULP distance and its largest relative L2 difference. A cell's title gives its "
                   "numbers; so do the tables below.</figcaption>\n</figure>\n",
                d->layers_are_modules ? "module, a name up to its last dot (no name numbers a layer)" : "layer",
                d->layers_are_modules ? "whose names have no dot" : "whose names number no layer",
                d->order == DCK_DIFF_ORDER_A   ? (d->orders_disagree ? "model order, A's own order of its tensors "
                                                                       "(B lists them in another)"
                                                                     : "model order, A's own order of its tensors")
                : d->order == DCK_DIFF_ORDER_B ? "model order, B's own order of its tensors (A keeps none)"
                                               : "name order: neither checkpoint keeps the order of its tensors",
                d->layers_are_modules ? "module" : "layer");
        layer_table(f, &p);
    } else if (ok) {
        fputs("<p>No tensors on either side.</p>\n", f);
    }
    if (ok) {
        tensor_table(f, d);
        value_table(f, d);
    }
    fputs("</section>\n", f);
    free((cell *)p.cells);
    bool bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad || !ok) {
        free(buf);
        return NULL;
    }
    return buf;
}

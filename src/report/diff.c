/* What diff says of its comparison (diff.h, man detcheck-diff(1)): the
 * library's dck_diff_result as the table on the terminal and as the
 * --json document. */
#include "report/diff.h"
#include "report/json.h"
#include "report/text.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ formatting */

static const char *C_RED = "\033[31m", *C_GREEN = "\033[32m", *C_YELLOW = "\033[33m",
                  *C_BOLD = "\033[1m", *C_OFF = "\033[0m";
static const char *status_color(const cli_diff_render_opts *o, dck_diff_status s) {
    if (!o->color) return "";
    if (s == DCK_DIFF_EQUAL) return C_GREEN;
    if (s == DCK_DIFF_WITHIN_TOLERANCE) return C_YELLOW;
    return C_RED;
}

static const char *off(const cli_diff_render_opts *o) { return o->color ? C_OFF : ""; }

static void fmt_shape(char *out, size_t cap, const uint64_t *shape, int ndim) {
    size_t k = 0;
    k += (size_t)snprintf(out + k, cap - k, "[");
    for (int d = 0; d < ndim && k < cap; d++)
        k += (size_t)snprintf(out + k, cap - k, "%s%llu", d ? "," : "",
                              (unsigned long long)shape[d]);
    if (k < cap) snprintf(out + k, cap - k, "]");
}

static void fmt_num(char *out, size_t cap, double v) {
    if (isinf(v)) snprintf(out, cap, "inf");
    else if (v == 0) snprintf(out, cap, "0");
    else snprintf(out, cap, "%.3g", v);
}

/* dtype and shape columns: one side, or "A/B" when they disagree. */
static void fmt_type(const dck_diff_tensor *t, char *dt, size_t dcap, char *sh, size_t scap) {
    char sa[256], sb[256];
    if (t->in_a) fmt_shape(sa, sizeof sa, t->shape_a, t->ndim_a);
    if (t->in_b) fmt_shape(sb, sizeof sb, t->shape_b, t->ndim_b);
    if (t->in_a && t->in_b && t->dtype_a != t->dtype_b)
        snprintf(dt, dcap, "%s/%s", dck_dtype_name(t->dtype_a), dck_dtype_name(t->dtype_b));
    else snprintf(dt, dcap, "%s", dck_dtype_name(t->in_a ? t->dtype_a : t->dtype_b));
    if (t->in_a && t->in_b && strcmp(sa, sb) != 0) snprintf(sh, scap, "%s/%s", sa, sb);
    else snprintf(sh, scap, "%s", t->in_a ? sa : sb);
}

/* Bits differ only where a NaN is involved: MAX_ABS, MAX_REL, REL_L2 and
 * MAX_ULP have no pair to be figures of. */
static int nan_only(const dck_diff_tensor *t) {
    return t->has_stats && t->stats.diff_count && !t->numeric_diff_count;
}

static int has_nonfinite_news(const dck_diff_stats *s) {
    return s->nan_a != s->nan_b || s->inf_a != s->inf_b || s->nan_payload || s->nan_vs_number;
}

/* What "first" goes by: the checkpoint's own order of its tensors (the
 * model's) where one keeps it, else names. */
static const char *order_text(const dck_diff_result *r) {
    switch (r->order) {
    case DCK_DIFF_ORDER_A:
        return r->orders_disagree ? "model (A's own order of its tensors; B lists the tensors both hold in another "
                                    "order)"
                                  : "model (A's own order of its tensors)";
    case DCK_DIFF_ORDER_B: return "model (B's own order of its tensors; A keeps none)";
    default: return "name (neither side keeps the order of its tensors: names sorted, numbers as numbers)";
    }
}

/* Rank for --top: tensors with NaN differences first (no finite distance),
 * then by max ULP, then model order. */
static const dck_diff_result *top_r;
static int cmp_top(const void *x, const void *y) {
    const dck_diff_tensor *a = &top_r->tensors[*(const size_t *)x];
    const dck_diff_tensor *b = &top_r->tensors[*(const size_t *)y];
    int na = a->stats.nan_payload + a->stats.nan_vs_number > 0;
    int nb = b->stats.nan_payload + b->stats.nan_vs_number > 0;
    if (na != nb) return nb - na;
    if (a->stats.max_ulp != b->stats.max_ulp) return a->stats.max_ulp < b->stats.max_ulp ? 1 : -1;
    return *(const size_t *)x < *(const size_t *)y ? -1 : 1;
}

enum { NCOL = 10 };

typedef struct {
    char *cell[NCOL];
    const dck_diff_tensor *t;
} row;

static char *dupf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *dupf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *p = NULL;
    if (vasprintf(&p, fmt, ap) < 0) p = NULL;
    va_end(ap);
    return p;
}

/* Under a stacked tensor's row: which of its layers differ (the first few;
 * the layer summary has them all). */
static void print_slices(const dck_diff_tensor *t, int indent) {
    enum { SHOWN = 8 };
    size_t nd = 0;
    for (size_t l = 0; l < t->nslices; l++) nd += t->slices[l].status != DCK_DIFF_EQUAL;
    if (!nd) return;
    printf("%*s  differing layers (%zu of %zu):", indent, "", nd, t->nslices);
    size_t k = 0;
    for (size_t l = 0; l < t->nslices && k < SHOWN; l++)
        if (t->slices[l].status != DCK_DIFF_EQUAL)
            printf("%s %s", k++ ? "," : "", cli_safe(t->slices[l].layer));
    printf("%s\n", nd > SHOWN ? ", ..." : "");
}

/* One table row per listed tensor; widths from the cells, so long names and
 * shapes never break the alignment. */
static void print_rows(const dck_diff_result *r, const cli_diff_render_opts *o, size_t *name_w) {
    int verbose = o->verbose;
    static const char *const head_el[NCOL] = {"STATUS",  "TENSOR",  "DTYPE",  "SHAPE",
                                              "DIFFER",  "MAX_ABS", "MAX_REL", "REL_L2",
                                              "MAX_ULP", "FIRST"};
    static const char *const head_dg[NCOL] = {"STATUS", "TENSOR", "DTYPE", "SHAPE", "DIGEST_A",
                                              "DIGEST_B"};
    static const int right_el[NCOL] = {0, 0, 0, 0, 1, 1, 1, 1, 1, 0}, right_dg[NCOL] = {0};
    const char *const *head = r->digest_only ? head_dg : head_el;
    const int *right = r->digest_only ? right_dg : right_el;
    int ncol = r->digest_only ? 6 : NCOL;
    size_t n = 0;
    for (size_t i = 0; i < r->ntensors; i++) n += verbose || r->tensors[i].status != DCK_DIFF_EQUAL;
    *name_w = 6;
    if (!n) return;
    row *rows = calloc(n, sizeof *rows);
    if (!rows) return;
    size_t w[NCOL] = {0}, k = 0;
    for (size_t i = 0; i < r->ntensors; i++) {
        const dck_diff_tensor *t = &r->tensors[i];
        if (!verbose && t->status == DCK_DIFF_EQUAL) continue;
        row *rw = &rows[k++];
        rw->t = t;
        char dt[64], sh[600];
        fmt_type(t, dt, sizeof dt, sh, sizeof sh);
        rw->cell[0] = dupf("%s", dck_diff_status_name(t->status));
        rw->cell[1] = dupf("%s", cli_safe(t->name));
        rw->cell[2] = dupf("%s", dt);
        rw->cell[3] = dupf("%s", sh);
        if (r->digest_only) {
            char ha[33] = "-", hb[33] = "-";
            if (t->has_digest_a) dck_digest_to_hex(t->digest_a, ha);
            if (t->has_digest_b) dck_digest_to_hex(t->digest_b, hb);
            rw->cell[4] = dupf("%s", ha);
            rw->cell[5] = dupf("%s", hb);
        } else if (t->has_stats) {
            const dck_diff_stats *st = &t->stats;
            char ma[32], mr[32], l2[32], first[600];
            /* NaN-only: no pair to measure; "-", never a 0 that reads as "same" */
            int fig = nan_only(t) ? 0 : 1;
            fmt_num(ma, sizeof ma, st->max_abs);
            fmt_num(mr, sizeof mr, st->max_rel);
            fmt_num(l2, sizeof l2, t->rel_l2);
            if (!fig) strcpy(ma, "-"), strcpy(mr, "-"), strcpy(l2, "-");
            if (st->first_flat != UINT64_MAX)
                fmt_shape(first, sizeof first, t->first_index, t->ndim_a);
            else snprintf(first, sizeof first, "-");
            rw->cell[4] = dupf("%llu/%llu", (unsigned long long)st->diff_count,
                               (unsigned long long)st->count);
            rw->cell[5] = dupf("%s", ma);
            rw->cell[6] = dupf("%s", mr);
            rw->cell[7] = dupf("%s", l2);
            rw->cell[8] = fig ? dupf("%llu", (unsigned long long)st->max_ulp) : dupf("-");
            rw->cell[9] = dupf("%s", first);
        }
    }
    for (int c = 0; c < ncol; c++) {
        w[c] = strlen(head[c]);
        for (size_t i = 0; i < n; i++)
            if (rows[i].cell[c] && strlen(rows[i].cell[c]) > w[c]) w[c] = strlen(rows[i].cell[c]);
    }
    *name_w = w[1];
    /* last column that any row fills: no trailing blanks */
    int last = 3;
    for (int c = ncol - 1; c > 3; c--) {
        int any = 0;
        for (size_t i = 0; i < n && !any; i++) any = rows[i].cell[c] != NULL;
        if (any) {
            last = c;
            break;
        }
    }
    printf("%s", o->color ? C_BOLD : "");
    for (int c = 0; c <= last; c++) {
        const char *sep = c ? "  " : "";
        if (right[c]) printf("%s%*s", sep, (int)w[c], head[c]);
        else if (c == last) printf("%s%s", sep, head[c]);
        else printf("%s%-*s", sep, (int)w[c], head[c]);
    }
    printf("%s\n", off(o));
    for (size_t i = 0; i < n; i++) {
        row *rw = &rows[i];
        int lastc = 3;
        for (int c = last; c > 3; c--)
            if (rw->cell[c]) {
                lastc = c;
                break;
            }
        printf("%s%-*s%s", status_color(o, rw->t->status), (int)w[0], rw->cell[0], off(o));
        for (int c = 1; c <= lastc; c++) {
            const char *v = rw->cell[c] ? rw->cell[c] : "";
            if (right[c]) printf("  %*s", (int)w[c], v);
            else if (c == lastc) printf("  %s", v);
            else printf("  %-*s", (int)w[c], v);
        }
        printf("\n");
        if (rw->t->alias_of)
            printf("%*s  shares storage with %s (a tied weight?)\n", (int)w[0], "", cli_safe(rw->t->alias_of));
        if (rw->t->has_stats && has_nonfinite_news(&rw->t->stats)) {
            const dck_diff_stats *st = &rw->t->stats;
            printf("%*s  NaN: A %llu, B %llu; Inf: A %llu, B %llu; NaN vs number: %llu; "
                   "NaN payloads differ: %llu\n",
                   (int)w[0], "", (unsigned long long)st->nan_a, (unsigned long long)st->nan_b,
                   (unsigned long long)st->inf_a, (unsigned long long)st->inf_b,
                   (unsigned long long)st->nan_vs_number, (unsigned long long)st->nan_payload);
        }
        if (rw->t->has_stats && rw->t->stats.sign_changes)
            printf("%*s  sign changes: %llu (nonzero on both sides, signs differ); max ULP of the other pairs: "
                   "%llu\n", (int)w[0], "", (unsigned long long)rw->t->stats.sign_changes,
                   (unsigned long long)rw->t->stats.max_ulp_same_sign);
        print_slices(rw->t, (int)w[0]);
        for (int c = 0; c < NCOL; c++) free(rw->cell[c]);
    }
    free(rows);
}

/* Tensors with differing elements, worst first (malloc'd; NULL when out of
 * memory). */
static size_t *top_indices(const dck_diff_result *r, size_t *n) {
    size_t *idx = malloc((r->ntensors ? r->ntensors : 1) * sizeof *idx);
    *n = 0;
    if (!idx) return NULL;
    for (size_t i = 0; i < r->ntensors; i++)
        if (r->tensors[i].has_stats && r->tensors[i].stats.diff_count) idx[(*n)++] = i;
    top_r = r;
    qsort(idx, *n, sizeof *idx, cmp_top);
    return idx;
}

void cli_diff_print_table(const dck_diff_result *r, const char *pa, const char *pb, const dck_diff_tolerance *tol,
                          const cli_diff_render_opts *o) {
    int verbose = o->verbose;
    long top = o->top;
    printf("A: %s\nB: %s\n", cli_safe(pa), cli_safe(pb));
    if (r->digest_only)
        printf("(a manifest is involved: digests compared, no element statistics)\n");
    printf("\n");
    size_t w, shown = 0;
    for (size_t i = 0; i < r->ntensors; i++) shown += verbose || r->tensors[i].status != DCK_DIFF_EQUAL;
    print_rows(r, o, &w);
    size_t neq = r->count[DCK_DIFF_EQUAL];
    if (!verbose && neq)
        printf("%s(%zu equal tensor%s not shown; -v lists them)\n", shown ? "\n" : "", neq,
               neq == 1 ? "" : "s");

    if (top > 0 && !r->digest_only) {
        size_t n = 0, *idx = top_indices(r, &n);
        if (idx) {
            printf("\nTop %ld by max ULP:\n", top);
            for (size_t k = 0; k < n && k < (size_t)top; k++) {
                const dck_diff_tensor *t = &r->tensors[idx[k]];
                char ma[32], mu[32];
                fmt_num(ma, sizeof ma, t->stats.max_abs);
                snprintf(mu, sizeof mu, "%llu", (unsigned long long)t->stats.max_ulp);
                if (nan_only(t)) strcpy(ma, "-"), strcpy(mu, "-");
                printf("  %2zu. %-*s  max_ulp %s  max_abs %s  differ %llu%s", k + 1, (int)w,
                       cli_safe(t->name), mu, ma,
                       (unsigned long long)t->stats.diff_count,
                       t->stats.nan_payload + t->stats.nan_vs_number ? "  (NaN differences)" : "");
                if (t->stats.sign_changes)
                    printf("  sign changes %llu, same-sign max_ulp %llu", (unsigned long long)t->stats.sign_changes,
                           (unsigned long long)t->stats.max_ulp_same_sign);
                printf("\n");
            }
            if (!n) printf("  (no tensor has differing elements)\n");
            free(idx);
        }
    }

    printf("\n");
    size_t nd = 0;
    for (size_t i = 0; i < r->nlayers; i++) nd += r->layers[i].differing > 0;
    if (r->nlayers) {
        /* no name numbers a layer (fc1, fc2, head): the rows are modules */
        const char *unit = r->layers_are_modules ? "module" : "layer";
        printf("%s: %zu of %zu differ", r->layers_are_modules ? "Modules" : "Layers", nd, r->nlayers);
        if (r->first_layer >= 0) {
            const dck_diff_layer *L = &r->layers[r->first_layer];
            printf("; first differing %s: %s%s%s (%s)", unit, o->color ? C_BOLD : "", cli_safe(L->layer),
                   off(o), cli_safe(r->tensors[L->first_differing].name));
        }
        printf("\n");
        for (size_t i = 0; i < r->nlayers && nd; i++) {
            const dck_diff_layer *L = &r->layers[i];
            if (!L->differing) continue;
            printf("  %-20s %zu/%zu tensors differ", cli_safe(L->layer), L->differing, L->tensors);
            if (r->digest_only) {
            } else if (!L->numeric_differing && L->nan_only) {
                printf(", max ULP - (NaN only)");
            } else {
                printf(", max ULP %llu", (unsigned long long)L->max_ulp);
                /* a sign change near zero is ~2^31 float32 ULPs: the figure of
                 * the other pairs beside it */
                if (L->sign_changes)
                    printf(" (%llu sign change%s; same-sign pairs: max ULP %llu)",
                           (unsigned long long)L->sign_changes, L->sign_changes == 1 ? "" : "s",
                           (unsigned long long)L->max_ulp_same_sign);
            }
            printf("\n");
        }
    }
    if (r->first_tensor >= 0)
        printf("First differing tensor: %s\n", cli_safe(r->tensors[r->first_tensor].name));
    if (r->ntensors) printf("Order: %s\n", order_text(r));
    printf("Groups:");
    int gshown = 0;
    for (int g = 0; g < DCK_GROUP_COUNT; g++)
        if (r->group_tensors[g])
            printf("%s %s %zu/%zu differ", gshown++ ? "," : "", dck_group_name((dck_group)g),
                   r->group_differing[g], r->group_tensors[g]);
    printf("%s\n", gshown ? "" : " none");
    for (size_t i = 0; i < r->nvalues; i++)
        printf("Value %s: A %s, B %s\n", cli_safe(r->values[i].name),
               r->values[i].a ? cli_safe(r->values[i].a) : "(absent)",
               r->values[i].b ? cli_safe(r->values[i].b) : "(absent)");
    if (r->naside_tensors || r->naside_values) {
        if (r->layouts_differ[0])
            printf("Layouts differ (%s): %zu tensor%s and %zu value%s of per-rank layout state not compared "
                   "(--require-rank-state compares them%s)\n", cli_safe(r->layouts_differ), r->naside_tensors,
                   r->naside_tensors == 1 ? "" : "s", r->naside_values, r->naside_values == 1 ? "" : "s",
                   o->layout_accepted ? "; accepted" : ", --accept-layout-state accepts them");
        else
            printf("Writer bookkeeping on one side only (%zu value%s, first %s), not compared "
                   "(--require-rank-state compares it%s)\n", r->naside_values + r->naside_tensors,
                   r->naside_values + r->naside_tensors == 1 ? "" : "s",
                   cli_safe(r->naside_values ? r->aside_values[0].name : r->aside_tensors[0].name),
                   o->layout_accepted ? "; accepted" : ", --accept-layout-state accepts it");
        for (size_t i = 0; i < r->naside_tensors && i < 10; i++)
            printf("  layout  %s (%s)\n", cli_safe(r->aside_tensors[i].name),
                   !r->aside_tensors[i].in_b ? "in A only" : !r->aside_tensors[i].in_a ? "in B only" : "in both");
        if (r->naside_tensors > 10) printf("  ... and %zu more (--json lists them all)\n", r->naside_tensors - 10);
    }
    if (r->digest_only && dck_diff_tolerance_given(tol) && !r->equal)
        printf("(tolerances need element statistics; digests that differ are differences)\n");

    size_t naside = r->naside_tensors + r->naside_values;
    const char *verdict = r->equal                       ? "equal"
                          : r->ok                        ? "within tolerance"
                          : naside && !o->layout_accepted ? "not equal (layout state not compared)"
                                                         : "different";
    printf("Result: %s%s%s (%zu tensors", o->color ? (r->equal ? C_GREEN : r->ok ? C_YELLOW : C_RED) : "",
           verdict, off(o), r->ntensors);
    for (int s = 0; s < DCK_DIFF_STATUS_COUNT; s++)
        if (r->count[s]) printf(", %zu %s", r->count[s], dck_diff_status_name((dck_diff_status)s));
    if (r->nvalues) printf(", %zu value%s", r->nvalues, r->nvalues == 1 ? " differs" : "s differ");
    if (naside) printf(", %zu not compared%s", naside, o->layout_accepted ? " (accepted)" : "");
    printf(")");
    cli_print_exclude_list(stdout, o->exclude, o->nexclude);
    printf("\n");
}

/* ------------------------------------------------------------------ JSON */

/* Exact (round-trip) doubles; infinities and NaN as the strings "inf",
 * "-inf", "nan". */
static json_t *json_num(double v) {
    if (isinf(v)) return json_string(v > 0 ? "inf" : "-inf");
    if (isnan(v)) return json_string("nan");
    return cli_json_number("%.17g", v);
}

static json_t *json_shape(const uint64_t *shape, int ndim, bool *oom) {
    json_t *a = json_array();
    for (int d = 0; d < ndim; d++) cli_jappend(a, cli_json_u64(shape[d]), oom);
    return a;
}

static json_t *json_name(const dck_diff_result *r, long i) {
    return i >= 0 ? cli_json_text(r->tensors[i].name) : json_null();
}

/* A stacked tensor's layers: status, and with element statistics the
 * per-tensor figures of each layer (null where a NaN-only difference
 * leaves no pair to measure). */
static json_t *json_slices(const dck_diff_tensor *x, bool *oom) {
    json_t *a = json_array();
    for (size_t l = 0; l < x->nslices; l++) {
        const dck_diff_slice *sl = &x->slices[l];
        const dck_diff_stats *st = &sl->stats;
        json_t *o = json_object();
        cli_jset(o, "layer", cli_json_text(sl->layer), oom);
        cli_jset(o, "index", cli_json_u64(l), oom);
        cli_jset(o, "status", json_string(dck_diff_status_name(sl->status)), oom);
        if (x->has_stats) {
            int fig = !(st->diff_count && !sl->numeric_diff_count);
            cli_jset(o, "count", cli_json_u64(st->count), oom);
            cli_jset(o, "diff_count", cli_json_u64(st->diff_count), oom);
            cli_jset(o, "beyond_tolerance", cli_json_u64(st->beyond_count), oom);
            cli_jset(o, "max_abs", fig ? json_num(st->max_abs) : json_null(), oom);
            cli_jset(o, "max_rel", fig ? json_num(st->max_rel) : json_null(), oom);
            cli_jset(o, "max_ulp", fig ? cli_json_u64(st->max_ulp) : json_null(), oom);
            cli_jset(o, "max_ulp_same_sign", fig ? cli_json_u64(st->max_ulp_same_sign) : json_null(), oom);
            cli_jset(o, "sign_changes", cli_json_u64(st->sign_changes), oom);
            cli_jset(o, "rel_l2", fig ? json_num(sl->rel_l2) : json_null(), oom);
            cli_jset(o, "nan_vs_number", cli_json_u64(st->nan_vs_number), oom);
            cli_jset(o, "nan_payload", cli_json_u64(st->nan_payload), oom);
        }
        cli_jappend(a, o, oom);
    }
    return a;
}

dck_status cli_diff_print_json(const dck_diff_result *r, const char *pa, const char *pb, const dck_diff_tolerance *tol,
                               const cli_diff_render_opts *o) {
    long top = o->top;
    bool oom = false;
    json_t *doc = json_object();
    cli_jset(doc, "a", cli_json_text(pa), &oom);
    cli_jset(doc, "b", cli_json_text(pb), &oom);
    cli_jset(doc, "mode", json_string(r->digest_only ? "digests" : "elements"), &oom);
    cli_jset(doc, "equal", json_boolean(r->equal), &oom);
    cli_jset(doc, "ok", json_boolean(r->ok), &oom);

    json_t *t = json_object();
    cli_jset(t, "atol", tol->atol < 0 ? json_null() : json_num(tol->atol), &oom);
    cli_jset(t, "rtol", tol->rtol < 0 ? json_null() : json_num(tol->rtol), &oom);
    cli_jset(t, "ulp", tol->ulp < 0 ? json_null() : json_integer((json_int_t)tol->ulp), &oom);
    cli_jset(doc, "tolerance", t, &oom);

    json_t *sum = json_object();
    cli_jset(sum, "tensors", cli_json_u64(r->ntensors), &oom);
    for (int k = 0; k < DCK_DIFF_STATUS_COUNT; k++)
        cli_jset(sum, dck_diff_status_name((dck_diff_status)k), cli_json_u64(r->count[k]), &oom);
    cli_jset(sum, "order", json_string(r->order == DCK_DIFF_ORDER_NAME ? "name" : "model"), &oom);
    cli_jset(sum, "order_from",
             r->order == DCK_DIFF_ORDER_NAME ? json_null() : json_string(dck_diff_order_name(r->order)), &oom);
    cli_jset(sum, "orders_disagree", json_boolean(r->orders_disagree), &oom);
    cli_jset(sum, "layers_are", json_string(r->layers_are_modules ? "modules" : "numbered"), &oom);
    cli_jset(sum, "first_differing_tensor", json_name(r, r->first_tensor), &oom);
    cli_jset(sum, "first_differing_layer",
             r->first_layer >= 0 ? cli_json_text(r->layers[r->first_layer].layer) : json_null(), &oom);
    json_t *groups = json_object();
    for (int g = 0; g < DCK_GROUP_COUNT; g++) {
        json_t *o = json_object();
        cli_jset(o, "tensors", cli_json_u64(r->group_tensors[g]), &oom);
        cli_jset(o, "differing", cli_json_u64(r->group_differing[g]), &oom);
        cli_jset(groups, dck_group_name((dck_group)g), o, &oom);
    }
    cli_jset(sum, "groups", groups, &oom);
    cli_jset(sum, "bytes_compared", cli_json_u64(r->bytes_compared), &oom);
    cli_jset(doc, "summary", sum, &oom);

    json_t *layers = json_array();
    for (size_t i = 0; i < r->nlayers; i++) {
        const dck_diff_layer *L = &r->layers[i];
        json_t *o = json_object();
        cli_jset(o, "layer", cli_json_text(L->layer), &oom);
        cli_jset(o, "tensors", cli_json_u64(L->tensors), &oom);
        cli_jset(o, "differing", cli_json_u64(L->differing), &oom);
        if (!r->digest_only) {
            int fig = L->numeric_differing || !L->nan_only;
            cli_jset(o, "max_ulp", fig ? cli_json_u64(L->max_ulp) : json_null(), &oom);
            cli_jset(o, "max_ulp_same_sign", fig ? cli_json_u64(L->max_ulp_same_sign) : json_null(), &oom);
            cli_jset(o, "sign_changes", cli_json_u64(L->sign_changes), &oom);
        }
        cli_jset(o, "first_differing_tensor",
                 L->differing ? json_name(r, (long)L->first_differing) : json_null(), &oom);
        cli_jappend(layers, o, &oom);
    }
    cli_jset(doc, "layers", layers, &oom);

    if (top > 0 && !r->digest_only) {
        size_t n = 0, *idx = top_indices(r, &n);
        json_t *a = json_array();
        if (!idx) oom = true;
        for (size_t k = 0; idx && k < n && k < (size_t)top; k++)
            cli_jappend(a, cli_json_text(r->tensors[idx[k]].name), &oom);
        free(idx);
        cli_jset(doc, "top", a, &oom);
    }
    json_t *values = json_array();
    for (size_t i = 0; i < r->nvalues; i++) {
        json_t *o = json_object();
        cli_jset(o, "name", cli_json_text(r->values[i].name), &oom);
        cli_jset(o, "a", cli_json_str_or_null(r->values[i].a), &oom);
        cli_jset(o, "b", cli_json_str_or_null(r->values[i].b), &oom);
        cli_jappend(values, o, &oom);
    }
    cli_jset(doc, "values", values, &oom);
    if (r->naside_tensors || r->naside_values) {
        json_t *ls = json_object(), *names = json_array(), *vnames = json_array();
        cli_jset(ls, "layouts_differ", cli_json_text(r->layouts_differ), &oom);
        for (size_t i = 0; i < r->naside_tensors; i++) cli_jappend(names, cli_json_text(r->aside_tensors[i].name), &oom);
        for (size_t i = 0; i < r->naside_values; i++) cli_jappend(vnames, cli_json_text(r->aside_values[i].name), &oom);
        cli_jset(ls, "tensors_not_compared", names, &oom);
        cli_jset(ls, "values_not_compared", vnames, &oom);
        cli_jset(ls, "accepted", json_boolean(o->layout_accepted), &oom);
        cli_jset(doc, "layout_state", ls, &oom);
    }

    json_t *tensors = json_array();
    for (size_t i = 0; i < r->ntensors; i++) {
        const dck_diff_tensor *x = &r->tensors[i];
        json_t *o = json_object();
        cli_jset(o, "name", cli_json_text(x->name), &oom);
        cli_jset(o, "status", json_string(dck_diff_status_name(x->status)), &oom);
        cli_jset(o, "group", json_string(dck_group_name(x->group)), &oom);
        cli_jset(o, "layer", cli_json_str_or_null(x->layer), &oom);
        cli_jset(o, "dtype", json_string(dck_dtype_name(x->in_a ? x->dtype_a : x->dtype_b)), &oom);
        cli_jset(o, "shape",
                 x->in_a ? json_shape(x->shape_a, x->ndim_a, &oom) : json_shape(x->shape_b, x->ndim_b, &oom),
                 &oom);
        if (x->status == DCK_DIFF_DTYPE_MISMATCH || x->status == DCK_DIFF_SHAPE_MISMATCH) {
            cli_jset(o, "dtype_b", json_string(dck_dtype_name(x->dtype_b)), &oom);
            cli_jset(o, "shape_b", json_shape(x->shape_b, x->ndim_b, &oom), &oom);
        }
        if (x->alias_of) cli_jset(o, "alias_of", cli_json_text(x->alias_of), &oom);
        char h[33];
        if (x->has_digest_a) {
            dck_digest_to_hex(x->digest_a, h);
            cli_jset(o, "digest_a", json_string(h), &oom);
        }
        if (x->has_digest_b) {
            dck_digest_to_hex(x->digest_b, h);
            cli_jset(o, "digest_b", json_string(h), &oom);
        }
        if (x->has_stats) {
            const dck_diff_stats *st = &x->stats;
            cli_jset(o, "count", cli_json_u64(st->count), &oom);
            cli_jset(o, "diff_count", cli_json_u64(st->diff_count), &oom);
            cli_jset(o, "beyond_tolerance", cli_json_u64(st->beyond_count), &oom);
            int fig = !nan_only(x); /* NaN-only: null, never 0 */
            cli_jset(o, "max_abs", fig ? json_num(st->max_abs) : json_null(), &oom);
            cli_jset(o, "max_rel", fig ? json_num(st->max_rel) : json_null(), &oom);
            cli_jset(o, "max_ulp", fig ? cli_json_u64(st->max_ulp) : json_null(), &oom);
            cli_jset(o, "max_ulp_same_sign", fig ? cli_json_u64(st->max_ulp_same_sign) : json_null(), &oom);
            cli_jset(o, "sign_changes", cli_json_u64(st->sign_changes), &oom);
            cli_jset(o, "first_index",
                     st->first_flat != UINT64_MAX ? json_shape(x->first_index, x->ndim_a, &oom) : json_null(),
                     &oom);
            cli_jset(o, "rel_l2", fig ? json_num(x->rel_l2) : json_null(), &oom);
            cli_jset(o, "nan_a", cli_json_u64(st->nan_a), &oom);
            cli_jset(o, "nan_b", cli_json_u64(st->nan_b), &oom);
            cli_jset(o, "inf_a", cli_json_u64(st->inf_a), &oom);
            cli_jset(o, "inf_b", cli_json_u64(st->inf_b), &oom);
            cli_jset(o, "nan_vs_number", cli_json_u64(st->nan_vs_number), &oom);
            cli_jset(o, "nan_payload", cli_json_u64(st->nan_payload), &oom);
        }
        if (x->nslices) cli_jset(o, "layers", json_slices(x, &oom), &oom);
        cli_jappend(tensors, o, &oom);
    }
    cli_jset(doc, "tensors", tensors, &oom);
    return cli_json_print(doc, CLI_JSON_LINES, oom);
}

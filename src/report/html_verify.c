/* verify's picture for --html (html.h): per group of tensors (weights,
 * optimizer, rng, other), and for recorded values and files when there are
 * any, a bar split into identical, differing and missing or extra entries,
 * with the counts as words beside it; then the list of what differs. A
 * difference is one tensor among thousands, so every part that is not empty
 * gets a width of its own (MIN_PART pixels) whatever its share: a single
 * differing tensor is never a sliver nobody sees. */
#include "report/html.h"

#include <stdlib.h>
#include <string.h>

enum {
    ROWS_MAX = 2000, /* rows of the table of differences */
    BAR_X = 110,
    BAR_W = 480,
    ROW_H = 24,
    MIN_PART = 14,
};

/* A row of the picture: a tensor group, the recorded values, the files. */
enum { PART_EQUAL, PART_DIFFERS, PART_MISMATCH, PART_MISSING, PART_EXTRA, NPARTS };

typedef struct {
    const char *label;
    size_t compared; /* golden entries compared (tensors, values, files) */
    size_t part[NPARTS];
} row;

static const cli_mark part_mark[NPARTS] = {CLI_MARK_EQUAL, CLI_MARK_DIFFERS, CLI_MARK_MISSING, CLI_MARK_MISSING,
                                           CLI_MARK_MISSING};
static const char *const part_word[NPARTS] = {"identical", "differ (digest)", "dtype or shape differs",
                                              "missing (in golden, not in checkpoint)",
                                              "extra (in checkpoint, not in golden)"};
static const char *const part_short[NPARTS] = {"identical", "differ", "mismatched", "missing", "extra"};

enum { ROW_VALUES = DCK_GROUP_COUNT, ROW_FILES, NROWS };

static void draw_row(FILE *f, const row *r, double y, unsigned *used) {
    size_t total = 0, nz = 0;
    for (int k = 0; k < NPARTS; k++) {
        total += r->part[k];
        nz += r->part[k] != 0;
    }
    fprintf(f, "<text x=\"4\" y=\"%.0f\" style=\"font-weight:bold\">%s</text>", y + ROW_H / 2 + 4, r->label);
    double x = BAR_X, spare = BAR_W - (double)(nz * MIN_PART);
    for (int k = 0; k < NPARTS; k++) {
        if (!r->part[k]) continue;
        double w = MIN_PART + spare * (double)r->part[k] / (double)total;
        char t[160];
        snprintf(t, sizeof t, "%s: %zu of %zu %s", r->label, r->part[k], total, part_word[k]);
        /* a pixel of white between parts: two of one mark stay two */
        cli_svg_cell(f, x, y + 4, w - 1, ROW_H - 8, part_mark[k], t);
        *used |= 1u << part_mark[k];
        x += w;
    }
    if (!total) {
        fprintf(f, "<text x=\"%d\" y=\"%.0f\">no entries on either side</text>\n", BAR_X, y + ROW_H / 2 + 4);
        return;
    }
    fprintf(f, "<text x=\"%d\" y=\"%.0f\">", BAR_X + BAR_W + 12, y + ROW_H / 2 + 4);
    const char *sep = "";
    for (int k = 0; k < NPARTS; k++) {
        if (!r->part[k] && k) continue;
        fprintf(f, "%s%zu %s", sep, r->part[k], part_short[k]);
        sep = ", ";
    }
    fputs("</text>\n", f);
}

static void shape_text(char *b, size_t n, const dck_manifest_tensor *t) {
    size_t k = (size_t)snprintf(b, n, "%s [", dck_dtype_name(t->dtype));
    for (int i = 0; i < t->ndim && k < n; i++)
        k += (size_t)snprintf(b + k, n - k, "%s%llu", i ? "," : "", (unsigned long long)t->shape[i]);
    if (k < n) snprintf(b + k, n - k, "]");
}

static void file_text(char *b, size_t n, const dck_manifest_file *fl) {
    char h[33];
    if (!fl) {
        snprintf(b, n, "-");
        return;
    }
    dck_digest_to_hex(fl->xxh128, h);
    snprintf(b, n, "%llu bytes, xxh128 %s", (unsigned long long)fl->bytes, h);
}

static void cell_text(FILE *f, const char *s) {
    fputs("<td class=\"msg\">", f);
    cli_html_text(f, s);
    fputs("</td>", f);
}

static void entry_row(FILE *f, const dck_cmp_entry *e) {
    char g[600] = "-", a[600] = "-";
    const char *group = "-", *what = dck_cmp_kind_name(e->kind);
    const dck_manifest_tensor *t = e->golden ? e->golden : e->actual;
    if (e->kind <= DCK_CMP_EXTRA && t) group = dck_group_name(t->group);
    switch (e->kind) {
    case DCK_CMP_DIGEST:
        dck_digest_to_hex(e->golden->digest, g);
        dck_digest_to_hex(e->actual->digest, a);
        what = "digest";
        break;
    case DCK_CMP_DTYPE:
    case DCK_CMP_SHAPE:
        shape_text(g, sizeof g, e->golden);
        shape_text(a, sizeof a, e->actual);
        what = e->kind == DCK_CMP_DTYPE ? "dtype" : "shape";
        break;
    case DCK_CMP_MISSING:
        if (e->golden) shape_text(g, sizeof g, e->golden);
        what = "missing";
        break;
    case DCK_CMP_EXTRA:
        if (e->actual) shape_text(a, sizeof a, e->actual);
        what = "extra";
        break;
    case DCK_CMP_FILE:
        group = "file";
        file_text(g, sizeof g, e->golden_file);
        file_text(a, sizeof a, e->actual_file);
        what = !e->actual_file ? "file missing" : !e->golden_file ? "file extra" : "file contents";
        break;
    case DCK_CMP_VALUE:
        group = "value";
        what = !e->actual_value ? "value missing" : !e->golden_value ? "value extra" : "value";
        break;
    default: break;
    }
    fputs("<tr><td class=\"name\">", f);
    cli_html_text(f, e->name);
    fprintf(f, "</td><td>%s</td><td>%s</td>", group, what);
    if (e->kind == DCK_CMP_VALUE) { /* values are text from files: escaped */
        cell_text(f, e->golden_value ? e->golden_value->value : "-");
        cell_text(f, e->actual_value ? e->actual_value->value : "-");
    } else {
        /* digests whole, on one line, to be compared by eye or searched for */
        fprintf(f, "<td><code>%s</code></td><td><code>%s</code></td>", g, a);
    }
    fputs("</tr>\n", f);
}

char *cli_html_verify_figure(const dck_manifest *golden, const dck_cmp_result *cmp) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    row rows[NROWS] = {{0}};
    for (int g = 0; g < DCK_GROUP_COUNT; g++) rows[g].label = dck_group_name((dck_group)g);
    rows[ROW_VALUES].label = "values";
    rows[ROW_FILES].label = "files";
    size_t ng = golden ? dck_manifest_tensor_count(golden) : 0;
    for (size_t i = 0; i < ng; i++) rows[dck_manifest_tensor_at(golden, i)->group].compared++;
    rows[ROW_VALUES].compared = golden ? dck_manifest_value_count(golden) : 0;
    rows[ROW_FILES].compared = golden ? dck_manifest_file_count(golden) : 0;
    size_t golden_differ[NROWS] = {0};
    const char *first = NULL;
    for (size_t i = 0; i < cmp->n; i++) {
        const dck_cmp_entry *e = &cmp->entries[i];
        int k = -1, part = -1;
        switch (e->kind) {
        case DCK_CMP_DIGEST: part = PART_DIFFERS; break;
        case DCK_CMP_DTYPE:
        case DCK_CMP_SHAPE: part = PART_MISMATCH; break;
        case DCK_CMP_MISSING: part = PART_MISSING; break;
        case DCK_CMP_EXTRA: part = PART_EXTRA; break;
        case DCK_CMP_VALUE:
        case DCK_CMP_FILE: {
            bool g = e->kind == DCK_CMP_VALUE ? e->golden_value != NULL : e->golden_file != NULL;
            bool a = e->kind == DCK_CMP_VALUE ? e->actual_value != NULL : e->actual_file != NULL;
            part = g && a ? PART_DIFFERS : g ? PART_MISSING : PART_EXTRA;
            k = e->kind == DCK_CMP_VALUE ? ROW_VALUES : ROW_FILES;
            break;
        }
        default: continue;
        }
        if (k < 0) {
            const dck_manifest_tensor *t = e->kind == DCK_CMP_EXTRA ? e->actual : e->golden;
            if (!t) continue;
            k = (int)t->group;
            if (!first) first = e->name;
        }
        rows[k].part[part]++;
        if (part != PART_EXTRA) golden_differ[k]++;
    }
    if (!first && cmp->n) first = cmp->entries[0].name;
    size_t shown = 0;
    for (int k = 0; k < NROWS; k++) {
        rows[k].part[PART_EQUAL] = rows[k].compared > golden_differ[k] ? rows[k].compared - golden_differ[k] : 0;
        /* the four groups always (a group's absence says something);
         * values and files when the golden records any */
        size_t all = 0;
        for (int p = 0; p < NPARTS; p++) all += rows[k].part[p];
        if (k < DCK_GROUP_COUNT || all) shown++;
    }

    fputs("<section class=\"figure verify\">\n<h2>Tensors by group</h2>\n", f);
    if (first) {
        fprintf(f, "<p><strong>%zu difference%s</strong>; first: ", cmp->n, cmp->n == 1 ? "" : "s");
        cli_html_text(f, first);
        fputs("</p>\n", f);
    } else {
        fprintf(f, "<p>Every one of the %zu golden tensors is identical.</p>\n", ng);
    }
    double height = (double)shown * ROW_H + 8;
    fprintf(f,
            "<figure>\n<svg width=\"%d\" height=\"%.0f\" viewBox=\"0 0 %d %.0f\" role=\"img\" "
            "aria-label=\"identical, differing, missing and extra entries by group\">\n",
            BAR_X + BAR_W + 300, height, BAR_X + BAR_W + 300, height);
    unsigned used = 0;
    double y = 4;
    for (int k = 0; k < NROWS; k++) {
        size_t all = 0;
        for (int p = 0; p < NPARTS; p++) all += rows[k].part[p];
        if (k >= DCK_GROUP_COUNT && !all) continue;
        draw_row(f, &rows[k], y, &used);
        y += ROW_H;
    }
    fputs("</svg>\n", f);
    cli_html_legend(f, used);
    fputs("<figcaption>Per group, the golden manifest's entries as compared (less what --exclude left "
          "out and layout state set aside): identical, differing, with another dtype or shape, or "
          "missing; and the checkpoint's extra entries. A part's title gives its count.</figcaption>\n"
          "</figure>\n",
          f);

    fprintf(f, "<h3>Differences (%zu)</h3>\n", cmp->n);
    if (cmp->n) {
        fputs("<table class=\"differences\"><thead><tr><th>name</th><th>group</th><th>what differs</th>"
              "<th>golden</th><th>checkpoint</th></tr></thead><tbody>\n",
              f);
        for (size_t i = 0; i < cmp->n && i < ROWS_MAX; i++) entry_row(f, &cmp->entries[i]);
        fputs("</tbody></table>\n", f);
        if (cmp->n > ROWS_MAX)
            fprintf(f, "<p class=\"note\">%zu more differences not listed (--json lists them all).</p>\n",
                    cmp->n - ROWS_MAX);
    } else {
        fputs("<p>None.</p>\n", f);
    }
    fputs("</section>\n", f);
    bool bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad) {
        free(buf);
        return NULL;
    }
    return buf;
}

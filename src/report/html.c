/* The HTML page of a report (html.h): escaping, the marks every figure
 * draws states with, log scales, and the frame around a command's figure.
 *
 * The page is HTML5 that a validator accepts (tests/cli/html_lib.sh runs
 * tidy on every page the tests write), ASCII only, with no script: what a
 * tooltip would show is in each cell's SVG <title> and again in the tables
 * under the figure, so a reader without a mouse, without JavaScript or on
 * paper loses nothing. */
#include "report/html.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------ text */

/* A name quoted as on the terminal (cli_quote_char: \\, \xNN, \u{HHHH}, so
 * U+202E shows as text, never as a reference the browser would apply), then
 * & < > " ' as entities and the other non-ASCII characters as references
 * (the page is ASCII). */
void cli_html_textn(FILE *f, const char *s, size_t n) {
    static const char *const entities[128] = {
        ['&'] = "&amp;", ['<'] = "&lt;", ['>'] = "&gt;", ['"'] = "&quot;", ['\''] = "&#39;"};
    const char *end = s + strnlen(s, n);
    char esc[CLI_QUOTE_MAX];
    long cp;
    for (const char *p = s; p < end;) {
        size_t len = cli_quote_char(p, end, esc, &cp);
        if (esc[0]) fputs(esc, f);
        else if (cp >= 0x80) fprintf(f, "&#x%lx;", cp);
        else if (entities[cp]) fputs(entities[cp], f);
        else fputc((int)cp, f);
        p += len;
    }
}

void cli_html_text(FILE *f, const char *s) {
    if (s) cli_html_textn(f, s, strlen(s));
}

void cli_html_textf(FILE *f, const char *fmt, ...) {
    char *s = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n < 0) return; /* the memstream's own failure shows at fclose */
    cli_html_text(f, s);
    free(s);
}

const char *cli_html_num(double v, char *buf, size_t n) {
    if (isnan(v)) snprintf(buf, n, "NaN");
    else if (isinf(v)) snprintf(buf, n, v > 0 ? "inf" : "-inf");
    else snprintf(buf, n, "%.3g", v);
    return buf;
}

/* ------------------------------------------------------------------ marks */

/* Okabe & Ito's palette (light blue for "identical", so that the states that
 * need attention are the dark ones); the shapes, drawn in a 10 x 10 box,
 * carry the state without colour: nothing (identical), a dot (within
 * tolerance), a cross (differs), an exclamation mark (non-finite), a slash
 * (missing), a bar (failed), a clock (timed out), an outline (absent). */
const cli_mark_style cli_marks[CLI_MARK_COUNT] = {
    [CLI_MARK_EQUAL] = {"identical", "#a6d5f0", NULL, NULL},
    [CLI_MARK_TOLERANCE] = {"within tolerance", "#f0e442", "#000000", "M3.5 5a1.5 1.5 0 1 0 3 0a1.5 1.5 0 1 0-3 0"},
    [CLI_MARK_DIFFERS] = {"differs", "#d55e00", "#ffffff", "M2 2L8 8M8 2L2 8"},
    [CLI_MARK_NONFINITE] = {"NaN/Inf", "#cc79a7", "#000000", "M5 1.5V6M5 7.5V8.5"},
    [CLI_MARK_MISSING] = {"on one side only / mismatched", "#999999", "#000000", "M2 8L8 2"},
    [CLI_MARK_FAILED] = {"failed", "#3d3d3d", "#ffffff", "M2 5H8"},
    [CLI_MARK_TIMEOUT] = {"timed out", "#e69f00", "#000000", "M5 2V5H7.5M1.8 5a3.2 3.2 0 1 0 6.4 0a3.2 3.2 0 1 0-6.4 0"},
    [CLI_MARK_ABSENT] = {"not recorded", "#ffffff", "#bbbbbb", "M0.5 0.5H9.5V9.5H0.5Z"},
};

/* A coordinate with at most two decimals and no trailing zeros: a grid of
 * thousands of cells is most of a page's bytes. */
static const char *px(double v, char *buf, size_t n) {
    snprintf(buf, n, "%.2f", v);
    char *e = buf + strlen(buf);
    while (e > buf && e[-1] == '0') *--e = 0;
    if (e > buf && e[-1] == '.') *--e = 0;
    if (!strcmp(buf, "-0")) snprintf(buf, n, "0");
    return buf;
}

static void shape(FILE *f, double x, double y, double w, double h, cli_mark m) {
    const cli_mark_style *st = &cli_marks[m];
    if (!st->shape || w < 5 || h < 5) return;
    double s = (w < h ? w : h) / 10.0;
    char a[24], b[24], c[24];
    fprintf(f, "<path class=\"mk\" d=\"%s\" transform=\"translate(%s %s) scale(%s)\" stroke=\"%s\"%s/>", st->shape,
            px(x + (w - 10 * s) / 2, a, sizeof a), px(y + (h - 10 * s) / 2, b, sizeof b), px(s, c, sizeof c), st->ink,
            s >= 1.2 ? " stroke-width=\"1.5\"" : "");
}

void cli_svg_cell(FILE *f, double x, double y, double w, double h, cli_mark m, const char *title) {
    char a[24], b[24], c[24], d[24];
    fprintf(f, "<g><rect x=\"%s\" y=\"%s\" width=\"%s\" height=\"%s\" fill=\"%s\"/>", px(x, a, sizeof a),
            px(y, b, sizeof b), px(w, c, sizeof c), px(h, d, sizeof d), cli_marks[m].fill);
    shape(f, x, y, w, h, m);
    if (title) {
        fputs("<title>", f);
        cli_html_text(f, title);
        fputs("</title>", f);
    }
    fputs("</g>", f);
}

void cli_html_legend(FILE *f, unsigned mask) {
    fputs("<p class=\"legend\">", f);
    for (int m = 0; m < CLI_MARK_COUNT; m++) {
        if (!(mask & (1u << m))) continue;
        fputs("<span><svg width=\"14\" height=\"14\" viewBox=\"0 0 14 14\" aria-hidden=\"true\">", f);
        cli_svg_cell(f, 0, 0, 14, 14, (cli_mark)m, NULL);
        fprintf(f, "</svg> %s</span> ", cli_marks[m].word);
    }
    fputs("</p>\n", f);
}

void cli_svg_first_marker(FILE *f, double x, double y, double h, const char *title) {
    fprintf(f, "<g><path d=\"M%.2f %.2fL%.2f %.2fL%.2f %.2fZ\" fill=\"%s\"/>", x - h * 0.9, y - h / 2, x, y,
            x - h * 0.9, y + h / 2, CLI_HTML_FIRST);
    if (title) {
        fputs("<title>", f);
        cli_html_text(f, title);
        fputs("</title>", f);
    }
    fputs("</g>", f);
}

/* ------------------------------------------------------------------ log scales */

cli_logscale cli_logscale_fit(double min, double max, double p0, double p1) {
    cli_logscale s = {0, 1, p0, p1};
    if (!(min > 0) || !isfinite(min)) min = 1;
    if (!(max > 0) || !isfinite(max)) max = min;
    if (max < min) max = min;
    s.lo = (int)floor(log10(min));
    s.hi = (int)ceil(log10(max));
    if (s.hi <= s.lo) s.hi = s.lo + 1;
    return s;
}

double cli_logscale_at(const cli_logscale *s, double v) {
    double t = v > 0 && isfinite(v) ? (log10(v) - s->lo) / (s->hi - s->lo) : v > 0 ? 1 : 0;
    if (t < 0) t = 0;
    if (t > 1) t = 1;
    return s->p0 + t * (s->p1 - s->p0);
}

void cli_svg_log_ticks(FILE *f, const cli_logscale *s, double at, double from, double to, bool vertical) {
    /* at most 8 labels, and at least 30 px apart: "1e-6" is about 25 px wide */
    int n = s->hi - s->lo, step = 1;
    double span = fabs(s->p1 - s->p0);
    while (n / step > 8 || (n && span * step / n < 30 && step < n)) step++;
    for (int d = s->lo; d <= s->hi; d += step) {
        double p = cli_logscale_at(s, pow(10, d));
        char label[16];
        if (d == 0) snprintf(label, sizeof label, "1");
        else if (d == 1) snprintf(label, sizeof label, "10");
        else snprintf(label, sizeof label, "1e%d", d);
        if (vertical)
            fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" class=\"grid\"/>"
                       "<text x=\"%.2f\" y=\"%.2f\" class=\"tick\" text-anchor=\"end\">%s</text>",
                    from, p, to, p, at - 3, p + 3, label);
        else
            fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" class=\"grid\"/>"
                       "<text x=\"%.2f\" y=\"%.2f\" class=\"tick\" text-anchor=\"middle\">%s</text>",
                    p, from, p, to, p, at, label);
    }
}

/* ------------------------------------------------------------------ the page */

static const char css[] =
    "body{font:14px/1.4 'DejaVu Sans',Arial,sans-serif;color:#000;background:#fff;margin:16px 24px}"
    "h1{font-size:20px;margin:0 0 6px}h2{font-size:16px;margin:20px 0 6px}"
    "h1 .v{padding:1px 8px;border:2px solid #000;margin-right:8px}"
    ".ok .v{background:#e8f4ea}.fail .v{background:#a40000;color:#fff}.trouble .v{background:#222;color:#fff}"
    "dl.props{display:grid;grid-template-columns:max-content auto;gap:0 12px;margin:6px 0}"
    "dl.props dt{font-weight:bold}dl.props dd{margin:0;word-break:break-all}"
    "table{border-collapse:collapse;margin:4px 0}td,th{border:1px solid #bbb;padding:1px 6px;text-align:left;"
    "vertical-align:top}th{background:#eee}td.n{text-align:right;font-variant-numeric:tabular-nums}"
    "td.name,td.msg{word-break:break-all}"
    ".legend span{margin-right:14px;white-space:nowrap}.legend svg{vertical-align:-2px;border:1px solid #777}"
    "svg text{font:11px 'DejaVu Sans',Arial,sans-serif;fill:#000}svg .tick{font-size:10px;fill:#333}"
    "svg .grid{stroke:#ddd;stroke-width:1}svg .axis{stroke:#000;stroke-width:1}"
    "svg .first{font-weight:bold;fill:#0072b2}svg path.mk{fill:none;vector-effect:non-scaling-stroke}"
    "figure{margin:8px 0}figcaption{font-size:13px;color:#333}"
    ".note{color:#333}details summary{cursor:default;font-weight:bold}"
    "@media print{body{margin:0}details{display:block}details>*{display:block}}";

static const char *result_word(cli_case_result r) {
    static const char *const words[] = {"pass", "fail", "error", "skipped"};
    return words[r];
}

static void cases_table(FILE *f, const cli_report *r, bool failing) {
    fputs("<table class=\"cases\"><thead><tr><th>result</th><th>check</th><th>name</th><th>what</th></tr>"
          "</thead><tbody>\n",
          f);
    for (size_t i = 0; i < r->n; i++) {
        const cli_case *c = &r->cases[i];
        bool bad = c->result == CLI_CASE_FAIL || c->result == CLI_CASE_ERROR;
        if (failing != bad) continue;
        fprintf(f, "<tr class=\"%s\"><td>%s</td><td>", result_word(c->result), result_word(c->result));
        cli_html_text(f, c->classname);
        fputs("</td><td class=\"name\">", f);
        cli_html_text(f, c->name);
        fputs("</td><td class=\"msg\">", f);
        cli_html_text(f, c->message);
        if (c->detail) {
            fputs("<br>", f);
            cli_html_text(f, c->detail);
        }
        fputs("</td></tr>\n", f);
    }
    fputs("</tbody></table>\n", f);
}

char *cli_report_html_text(const cli_report *r, size_t *len) {
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f) return NULL;
    size_t fail = 0, err = 0, skip = 0;
    for (size_t i = 0; i < r->n; i++) {
        fail += r->cases[i].result == CLI_CASE_FAIL;
        err += r->cases[i].result == CLI_CASE_ERROR;
        skip += r->cases[i].result == CLI_CASE_SKIPPED;
    }
    const char *verdict = err ? "TROUBLE" : fail ? "DIFFERENT" : "OK";
    const char *cls = err ? "trouble" : fail ? "fail" : "ok";
    char stamp[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &tm);
    fprintf(f, "%s %s -->\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n", CLI_HTML_MAGIC, r->cmd);
    fprintf(f, "<meta name=\"generator\" content=\"detcheck %s\">\n", dck_version());
    fprintf(f, "<title>detcheck %s: %s</title>\n<style>%s</style>\n</head>\n<body>\n", r->cmd, verdict, css);
    fprintf(f, "<header class=\"%s\"><h1><span class=\"v\">%s</span>detcheck %s</h1>\n", cls, verdict, r->cmd);
    if (r->title) {
        fputs("<p class=\"title\">", f);
        cli_html_text(f, r->title);
        fputs("</p>\n", f);
    }
    fputs("<dl class=\"props\">", f);
    for (size_t i = 0; i + 1 < r->nprops; i += 2) {
        fputs("<dt>", f);
        cli_html_text(f, r->props[i]);
        fputs("</dt><dd>", f);
        cli_html_text(f, r->props[i + 1]);
        fputs("</dd>", f);
    }
    fprintf(f, "<dt>written</dt><dd>%s by detcheck %s</dd></dl>\n</header>\n<main>\n", stamp, dck_version());
    if (r->figure) fputs(r->figure, f);
    fprintf(f, "<section><h2>Checks</h2>\n<p>%zu checks: %zu passed, %zu failed, %zu errors, %zu skipped.</p>\n",
            r->n, r->n - fail - err - skip, fail, err, skip);
    if (fail + err) {
        fputs("<h3>Failed</h3>\n", f);
        cases_table(f, r, true);
    }
    if (r->n - fail - err) {
        fprintf(f, "<details%s><summary>Passed and skipped (%zu)</summary>\n", fail + err ? "" : " open",
                r->n - fail - err);
        cases_table(f, r, false);
        fputs("</details>\n", f);
    }
    fputs("</section>\n</main>\n</body>\n</html>\n", f);
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

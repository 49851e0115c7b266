/* --html FILE: one self-contained page per report (html.c frames it;
 * html_*.c draw each command's picture). The page is written with the other
 * reports by cli_report_finish, atomically, and needs nothing from elsewhere:
 * inline CSS, inline SVG, no script, no font or image from the network, so a
 * CI system can keep it as an artifact and anyone can open it offline.
 *
 * Reading it must not depend on colour: every state has a fill, a shape drawn
 * on it and a word in the legend (cli_marks), chosen from the Okabe-Ito
 * palette so that the common colour-vision deficiencies and a grey-scale
 * print still tell them apart. The fills are exact colours, and nothing else
 * on a page uses them, so a test can find a state's cells in a rendered PNG
 * (tests/cli/html_lib.sh). */
#ifndef DCK_REPORT_HTML_H
#define DCK_REPORT_HTML_H

#include "report/report.h"
#include "train/canary.h"

#include <stdio.h>

/* ------------------------------------------------------------------ text
 * Text from files (tensor names, hosts, paths, messages) is quoted as on a
 * terminal (cli_quote_char, text.h: \\, \xNN, \u{HHHH}: a bidi override or a
 * C1 control shows as that text, never as a reference the browser would
 * apply), then & < > " ' are entities and other non-ASCII characters
 * references &#xHHHH; (the page itself is ASCII). */
void cli_html_text(FILE *f, const char *s);
void cli_html_textf(FILE *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* the same, at most n bytes of s */
void cli_html_textn(FILE *f, const char *s, size_t n);

/* ------------------------------------------------------------------ marks */
typedef enum {
    CLI_MARK_EQUAL = 0,    /* identical bits */
    CLI_MARK_TOLERANCE,    /* differs within the tolerances */
    CLI_MARK_DIFFERS,      /* differs */
    CLI_MARK_NONFINITE,    /* NaN or Inf where the other side has a number */
    CLI_MARK_MISSING,      /* on one side only, or shapes/dtypes disagree */
    CLI_MARK_FAILED,       /* the check could not run (error) */
    CLI_MARK_TIMEOUT,      /* no answer in time */
    CLI_MARK_ABSENT,       /* not recorded here: no information */
    CLI_MARK_COUNT
} cli_mark;

typedef struct {
    const char *word;  /* legend and titles: "identical", "differs"... */
    const char *fill;  /* "#rrggbb", unique on a page */
    const char *ink;   /* colour of the shape drawn on the fill */
    const char *shape; /* an SVG path in a 10 x 10 box (NULL: none) */
} cli_mark_style;
extern const cli_mark_style cli_marks[CLI_MARK_COUNT];

/* Colours besides the marks, each used for one thing only. */
#define CLI_HTML_FIRST "#0072b2"  /* the "first difference" marker and line */
#define CLI_HTML_RUN_A "#332288"  /* run A's curve */
#define CLI_HTML_RUN_B "#ddaa33"  /* run B's curve (dashed) */
#define CLI_HTML_DELTA "#882255"  /* |A - B| */
#define CLI_HTML_BAR "#44aa99"    /* a figure's bar (max ULP, rel L2) */

/* One cell of a grid: the mark's fill, its shape scaled into the cell when
 * the cell is at least 5 px, and an SVG <title> (a tooltip; escaped here). */
void cli_svg_cell(FILE *f, double x, double y, double w, double h, cli_mark m, const char *title);
/* The legend for the marks of mask (1u << mark): a swatch with the shape and
 * the word for each, as HTML. */
void cli_html_legend(FILE *f, unsigned mask);
/* A marker pointing right at (x, y) (height h) in CLI_HTML_FIRST, with its
 * title: the "first difference" marker. */
void cli_svg_first_marker(FILE *f, double x, double y, double h, const char *title);

/* ------------------------------------------------------------------ log scales
 * Values on a log10 axis from 10^lo to 10^hi over the pixels [p0, p1]. */
typedef struct {
    int lo, hi;     /* decades */
    double p0, p1;  /* pixels */
} cli_logscale;
/* The decades spanning [min, max] (positive, finite), at least one. */
cli_logscale cli_logscale_fit(double min, double max, double p0, double p1);
double cli_logscale_at(const cli_logscale *s, double v); /* clamped to [p0, p1] */
/* Tick lines and labels (1e-6, 1, 1e3...) of a horizontal axis at y, from y
 * to y_end (grid lines), or of a vertical axis when vertical (x = y). */
void cli_svg_log_ticks(FILE *f, const cli_logscale *s, double at, double from, double to, bool vertical);

/* Numbers as the page prints them: "%.3g", "NaN", "inf". */
const char *cli_html_num(double v, char *buf, size_t n);

/* ------------------------------------------------------------------ the page
 * cli_report_finish writes it when --html was given: the verdict, the
 * properties, the command's figure (cli_report_figure), then the cases
 * (failing ones first, all of them in a table). The first bytes are
 * CLI_HTML_MAGIC, which is how an existing file is known as a detcheck page
 * (cli_report_is_html: the kind --html may replace). */
#define CLI_HTML_MAGIC "<!DOCTYPE html>\n<!-- detcheck report"
char *cli_report_html_text(const cli_report *r, size_t *len);

/* ------------------------------------------------------------------ figures
 * Each returns malloc'd HTML (a <section> with SVG and its own tables) for
 * cli_report_figure, or NULL when out of memory. */
char *cli_html_diff_figure(const dck_diff_result *d, const char *a, const char *b);
char *cli_html_verify_figure(const dck_manifest *golden, const dck_cmp_result *cmp);
/* What the command found one run holding and the other lacking, in its own
 * words (bisect's "not compared: " lines, the JSON's not_compared details),
 * and whether they count against its verdict (exit 1; false where
 * --allow-partial accepted them). The page names each, and never says "no
 * difference" where they count: what was not compared is no agreement. */
typedef struct {
    const char *const *lines;
    size_t n;
    bool counted;
} cli_html_unpaired;
/* bisect, repro, resume-check: two runs as dck_run_open read them
 * (trajectory.jsonl and, when recorded, tensor_digests.bin, trace.bin, the
 * checkpoints), drawn step by step, and where dck_runs_compare found them
 * part (result; NULL: not compared, which the page says). label: "run A",
 * "uninterrupted"...; unpaired: the command's, or NULL. */
typedef struct {
    const dck_run *run;
    const char *label;
} cli_html_run;
char *cli_html_runs_figure(const char *cmd, const cli_html_run runs[2], const dck_runs_result *result,
                           const cli_html_unpaired *unpaired);
/* The same for a command that holds the run directories only: opened and
 * compared here (a step one run lacks is the command's to judge: its
 * unpaired items). A run that cannot be read is a note on the page. */
typedef struct {
    const char *dir, *label;
} cli_html_run_dir;
char *cli_html_runs_figure_dirs(const char *cmd, const cli_html_run_dir runs[2], const cli_html_unpaired *unpaired);
/* canary: rank 0's report (html_canary.c): hosts x devices */
char *cli_html_canary_figure(const dck_canary_report *rep);
/* canary's title, properties and one case per rank (html_canary.c), shared
 * by the command and the synthetic 1,024-rank test; kind: "cpu", "cuda"... */
void cli_canary_report(cli_report *r, const dck_canary_report *rep, const char *kind, const char *preset);

#endif

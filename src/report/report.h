/* --junit FILE, --markdown FILE and --html FILE: the reports verify, diff,
 * resume-check, bisect, repro and canary write for CI systems and people
 * (report.c; the page: html.c). Reports are the binary's, not the
 * library's; they use the library's layers and never the command line
 * (src/cli/), which prints their messages (cli.h). A command collects one
 * case per tensor or per check while it prints as usual, then writes both
 * reports at the end; the XML follows tests/junit.xsd (the Ant/Jenkins JUnit
 * shape that GitHub Actions reporters, GitLab and Jenkins read). */
#ifndef DCK_REPORT_H
#define DCK_REPORT_H

#include "common/common.h"
#include "report/text.h"

#include <stdbool.h>
#include <time.h>

/* Exit codes, as cmp(1) and diff(1): same, different, trouble. */
enum { DCK_EXIT_SAME = 0, DCK_EXIT_DIFFERENT = 1, DCK_EXIT_TROUBLE = 2 };

/* getopt codes, beside cli/cli_options.c's 0x1000... */
enum { CLI_OPT_JUNIT = 0x1100, CLI_OPT_MARKDOWN, CLI_OPT_HTML };
/* three rows for a command's struct option table */
#define CLI_REPORT_LONGOPTS                                                                                  \
    {"junit", required_argument, NULL, CLI_OPT_JUNIT}, {"markdown", required_argument, NULL, CLI_OPT_MARKDOWN}, \
        {"html", required_argument, NULL, CLI_OPT_HTML}

/* the order of resume-check's results: identical, different, trouble */
typedef enum { CLI_CASE_PASS, CLI_CASE_FAIL, CLI_CASE_ERROR, CLI_CASE_SKIPPED } cli_case_result;

typedef struct {
    char *classname, *name;
    cli_case_result result;
    char *type;    /* failure kind: "digest", "missing", "trajectory"... */
    char *message; /* one line naming the tensor and what differs */
    char *detail;  /* more lines (failure body); may be NULL */
} cli_case;

typedef struct {
    const char *cmd;                /* "verify" */
    const char *junit, *markdown;   /* paths ("-": stdout); NULL: not wanted */
    const char *html;               /* the page's path ("-": stdout); NULL: not wanted */
    char *figure;                   /* the command's picture for the page (cli_report_figure) */
    cli_case *cases;
    size_t n, cap;
    char **props;                   /* name, value, name, value... */
    size_t nprops;
    char *title;                    /* the verdict line, as the command printed it */
    const char *const *exclude;     /* --exclude globs: golden tensors skipped */
    char *const *aliases;           /* verify: per comparison entry, the tensor an
                                     * extra one shares storage with, or NULL */
    size_t nexclude;
    struct timespec t0;
    bool oom;                       /* sticky: an allocation failed */
    /* cli_report_validate's view, for the rule again at the moment of
     * writing: which report paths held a file then */
    bool checked, present[3];       /* junit, markdown, html */
} cli_report;

void cli_report_init(cli_report *r, const char *cmd);
/* --junit/--markdown, by getopt code or by name ("--junit", "--junit=F");
 * 1 taken, 0 not one of them. */
int cli_report_option(cli_report *r, int code, const char *arg);
/* For commands that parse argv themselves (resume-check, bisect): 1 taken
 * (*used: 1 when next was the value), 0 not ours, -1 misuse (the error
 * set; cli_report_arg prints it). */
int cli_report_take_arg(cli_report *r, const char *a, const char *next, int *used);
bool cli_report_wanted(const cli_report *r);
/* After the options, before any work: the report paths follow the rule of
 * every output (dck_output_check): each may replace only a report of its own
 * kind (a JUnit XML, a detcheck Markdown summary), never one of the inputs,
 * a link, a FIFO, a read-only file; the two are not one file; and --json
 * with a report on standard output ('-') is refused, since stdout would hold
 * two documents. DCK_ERR_INVALID with the error set when refused
 * (cli_report_check prints it as a usage error). */
dck_status cli_report_validate(cli_report *r, bool json, const char *const *inputs, size_t ninputs);
/* The kinds, for dck_output_check: the first bytes of a JUnit XML document,
 * of a Markdown summary as cli_report_markdown_text writes it. */
bool cli_report_is_junit(const char *path);
bool cli_report_is_markdown(const char *path);
bool cli_report_is_html(const char *path);
/* The command's picture (HTML from cli_html_*_figure), taken over; NULL
 * (out of memory) makes the report fail as out of memory. Only when r->html. */
void cli_report_figure(cli_report *r, char *html);
void cli_report_property(cli_report *r, const char *name, const char *value);
void cli_report_title(cli_report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Strings are copied; message and detail may be NULL. */
void cli_report_case(cli_report *r, const char *classname, const char *name, cli_case_result res,
                     const char *type, const char *message, const char *detail);
/* verify --exclude: golden tensors whose names match one of the globs
 * (fnmatch) are reported as skipped by cli_report_compare. */
void cli_report_exclude(cli_report *r, const char *const *globs, size_t n);
/* verify: alias[i] (or NULL) names the tensor extra entry i of the next
 * comparison shares storage with; its failure message says so. */
void cli_report_aliases(cli_report *r, char *const *alias);
/* A manifest comparison: with golden, a passing case per golden tensor the
 * comparison found equal; a failing case per entry. prefix names the
 * checkpoint in classnames ("detcheck.verify", "detcheck.bisect.step_4");
 * the sides name the two manifests in messages ("golden", "checkpoint"). */
void cli_report_compare(cli_report *r, const char *prefix, const dck_manifest *golden,
                        const dck_cmp_result *cmp, const char *golden_side, const char *actual_side);
/* A diff: one case per tensor (equal and within tolerance pass), one failing
 * case per differing value. */
void cli_report_diff(cli_report *r, const dck_diff_result *d);
/* Writes the reports asked for (atomically) and releases r. The rule of
 * cli_report_validate applies again at the moment of writing, after the
 * document is written aside and before it takes the path: a file that is
 * not a report of its kind (or that appeared there while the command ran)
 * is never replaced, and the report is written nowhere. exit_status is
 * the status the command is about to exit with: a report never states
 * another verdict, so a trouble (2) that no error case explains, or a
 * difference (1) that no failing case names, becomes a case of its own.
 * The error, set when one is not written, names the file
 * (cli_report_finish prints it). */
dck_status cli_report_write(cli_report *r, int exit_status);
void cli_report_release(cli_report *r);

/* The text forms, for tests and for cli_report_write: a malloc'd document. */
char *cli_report_junit_text(const cli_report *r, size_t *len);
char *cli_report_markdown_text(const cli_report *r, size_t *len);

#endif

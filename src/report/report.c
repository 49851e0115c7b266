/* --junit, --markdown and --html reports (see report.h; the page's
 * frame and figures: html.c, html_*.c).
 *
 * JUnit XML has no formal standard; the shape written here is the one Ant's
 * XMLJUnitResultFormatter established and Jenkins' junit-10.xsd describes,
 * which is what GitHub Actions reporters (dorny/test-reporter,
 * mikepenz/action-junit-report), GitLab (artifacts:reports:junit) and
 * Jenkins (junit step) read: <testsuites> holding one <testsuite> with
 * <properties>, then one <testcase classname name time> per tensor or check,
 * each with at most one <failure message type> or <error message type>.
 * tests/junit.xsd is that shape, and the tests validate every report
 * against it with xmllint.
 *
 * Names come from files: any bytes. They are quoted as on a terminal
 * (cli_quote_char, text.h), so that XML 1.0's forbidden characters (controls
 * other than tab, newline and CR, even as &#N;; bytes that are not UTF-8;
 * U+FFFE/U+FFFF) and the ones a reader should not get raw (C1 controls,
 * bidi overrides, line separators) are the text \xNN or \u{HHHH}, and a
 * backslash is \\, so the text stays one-to-one: the name "w\x01" (five
 * characters) and "w" followed by byte 0x01 read differently; everything
 * else is escaped (&amp; &lt; &gt; &quot; &apos;). */
#include "report/report.h"
#include "report/html.h"

#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *dup_or_null(const char *s, bool *oom) {
    if (!s) return NULL;
    char *d = strdup(s);
    if (!d) *oom = true;
    return d;
}

void cli_report_init(cli_report *r, const char *cmd) {
    memset(r, 0, sizeof *r);
    r->cmd = cmd;
    clock_gettime(CLOCK_MONOTONIC, &r->t0);
}

bool cli_report_wanted(const cli_report *r) { return r->junit || r->markdown || r->html; }

void cli_report_figure(cli_report *r, char *html) {
    free(r->figure);
    r->figure = html;
    if (!html) r->oom = true;
}

/* GitHub Actions' $GITHUB_STEP_SUMMARY is one file per step that every
 * command of the step appends to (GitHub's contract): a report to it is
 * appended, keeping what earlier commands wrote, and is never replaced. */
static bool is_step_summary(const char *path) {
    const char *g = getenv("GITHUB_STEP_SUMMARY");
    struct stat a, b;
    if (!g || !*g) return false;
    if (!strcmp(g, path)) return true;
    return stat(g, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* The first bytes of path (NUL-terminated in buf), without blocking on a
 * FIFO: dck_output_check has already refused anything but a regular file. */
static size_t head_of(const char *path, char *buf, size_t cap) {
    int fd = -1;
    buf[0] = 0;
    if (dck_open_regular(path, &fd, NULL)) {
        dck_clear_error();
        return 0;
    }
    ssize_t n = pread(fd, buf, cap - 1, 0);
    close(fd);
    if (n < 0) n = 0;
    buf[n] = 0;
    return (size_t)n;
}

bool cli_report_is_junit(const char *path) {
    char b[1024];
    head_of(path, b, sizeof b);
    const char *p = b;
    if (!strncmp(p, "\xef\xbb\xbf", 3)) p += 3;
    while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n') p++;
    if (strncmp(p, "<?xml", 5) && strncmp(p, "<testsuite", 10)) return false;
    return strstr(p, "<testsuites") || strstr(p, "<testsuite ") || strstr(p, "<testsuite>");
}

bool cli_report_is_markdown(const char *path) {
    /* only what we write: "### :x: detcheck verify: DIFFERENT"; a README.md
     * or notes are not ours to replace */
    char b[256];
    head_of(path, b, sizeof b);
    if (strncmp(b, "### :", 5)) return false;
    const char *nl = strchr(b, '\n');
    const char *d = strstr(b, ": detcheck ");
    return d && (!nl || d < nl);
}

bool cli_report_is_html(const char *path) {
    char b[64];
    head_of(path, b, sizeof b);
    return !strncmp(b, CLI_HTML_MAGIC, strlen(CLI_HTML_MAGIC));
}

/* The reports, in the order of cli_report's present[]: each may replace
 * only a report of its own kind. */
enum { NKINDS = 3 };
static const struct {
    const char *option, *what;
    dck_output_kind kind;
} kinds[NKINDS] = {{"--junit", "JUnit report", cli_report_is_junit},
                   {"--markdown", "detcheck Markdown report", cli_report_is_markdown},
                   {"--html", "detcheck HTML report", cli_report_is_html}};

dck_status cli_report_validate(cli_report *r, bool json, const char *const *inputs, size_t ninputs) {
    const char *paths[NKINDS] = {r->junit, r->markdown, r->html};
    int on_stdout = 0;
    r->checked = true;
    for (size_t i = 0; i < NKINDS; i++) {
        struct stat st;
        r->present[i] = paths[i] && lstat(paths[i], &st) == 0;
    }
    for (size_t i = 0; i < NKINDS; i++) {
        if (!paths[i]) continue;
        if (!strcmp(paths[i], "-")) {
            if (json)
                return dck_set_error(DCK_ERR_INVALID, "--json and %s - would both write to standard output; "
                                     "write the report to a file", kinds[i].option);
            if (on_stdout++)
                return dck_set_error(DCK_ERR_INVALID, "two reports would both write to standard output; "
                                     "write one of them to a file");
            continue;
        }
        /* the step summary is appended to, never replaced (emit) */
        if (i == 1 && is_step_summary(paths[i])) continue;
        DCK_TRY(dck_output_check(kinds[i].option, paths[i], kinds[i].what, kinds[i].kind, inputs, ninputs));
    }
    for (size_t i = 0; i < NKINDS; i++)
        for (size_t j = i + 1; j < NKINDS; j++) {
            if (!paths[i] || !paths[j] || !strcmp(paths[i], "-")) continue;
            struct stat a, b;
            bool same = !strcmp(paths[i], paths[j]) ||
                        (stat(paths[i], &a) == 0 && stat(paths[j], &b) == 0 && a.st_dev == b.st_dev &&
                         a.st_ino == b.st_ino);
            if (same)
                return dck_set_error(DCK_ERR_INVALID, "%s and %s name the same file (%s); give each its own",
                                     kinds[i].option, kinds[j].option, paths[i]);
        }
    return DCK_OK;
}

int cli_report_option(cli_report *r, int code, const char *arg) {
    if (code == CLI_OPT_JUNIT) r->junit = arg;
    else if (code == CLI_OPT_MARKDOWN) r->markdown = arg;
    else if (code == CLI_OPT_HTML) r->html = arg;
    else return 0;
    return 1;
}

int cli_report_take_arg(cli_report *r, const char *a, const char *next, int *used) {
    static const struct {
        const char *name;
        int code;
    } opts[] = {{"--junit", CLI_OPT_JUNIT}, {"--markdown", CLI_OPT_MARKDOWN}, {"--html", CLI_OPT_HTML}};
    *used = 0;
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) {
        size_t n = strlen(opts[i].name);
        if (strncmp(a, opts[i].name, n) != 0) continue;
        const char *val;
        if (a[n] == '=') val = a + n + 1;
        else if (a[n] == 0) {
            if (!next) {
                dck_set_error(DCK_ERR_INVALID, "%s needs a file name ('-': standard output)", a);
                return -1;
            }
            val = next;
            *used = 1;
        } else continue;
        if (!*val) {
            dck_set_error(DCK_ERR_INVALID, "%s needs a file name ('-': standard output)", opts[i].name);
            return -1;
        }
        return cli_report_option(r, opts[i].code, val);
    }
    return 0;
}

void cli_report_exclude(cli_report *r, const char *const *globs, size_t n) {
    r->exclude = globs;
    r->nexclude = n;
}

void cli_report_aliases(cli_report *r, char *const *alias) { r->aliases = alias; }

void cli_report_property(cli_report *r, const char *name, const char *value) {
    if (!value) return;
    char **p = realloc(r->props, sizeof *p * (r->nprops + 2));
    if (!p) {
        r->oom = true;
        return;
    }
    r->props = p;
    p[r->nprops] = dup_or_null(name, &r->oom);
    p[r->nprops + 1] = dup_or_null(value, &r->oom);
    r->nprops += 2;
}

void cli_report_title(cli_report *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    free(r->title);
    if (vasprintf(&r->title, fmt, ap) < 0) {
        r->title = NULL;
        r->oom = true;
    }
    va_end(ap);
}

void cli_report_case(cli_report *r, const char *classname, const char *name, cli_case_result res,
                     const char *type, const char *message, const char *detail) {
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 64;
        cli_case *c = realloc(r->cases, sizeof *c * cap);
        if (!c) {
            r->oom = true;
            return;
        }
        r->cases = c;
        r->cap = cap;
    }
    cli_case *c = &r->cases[r->n++];
    c->classname = dup_or_null(classname, &r->oom);
    c->name = dup_or_null(name ? name : "", &r->oom);
    c->result = res;
    c->type = dup_or_null(type, &r->oom);
    c->message = dup_or_null(message, &r->oom);
    c->detail = dup_or_null(detail, &r->oom);
}

void cli_report_release(cli_report *r) {
    for (size_t i = 0; i < r->n; i++) {
        cli_case *c = &r->cases[i];
        free(c->classname);
        free(c->name);
        free(c->type);
        free(c->message);
        free(c->detail);
    }
    for (size_t i = 0; i < r->nprops; i++) free(r->props[i]);
    free(r->props);
    free(r->cases);
    free(r->title);
    free(r->figure);
    const char *cmd = r->cmd;
    memset(r, 0, sizeof *r);
    r->cmd = cmd;
}

/* ------------------------------------------------------------------ text */

/* The text quoted first (cli_quote_char): what XML 1.0 cannot carry (C0
 * controls, bytes that are not UTF-8, U+FFFE/U+FFFF) and what a reader
 * should not get raw (C1 controls, bidi overrides, line separators) arrive
 * as the text \xNN / \u{HHHH}, a backslash as \\, then the entities. lines:
 * a log's tail in an element's text, whose tabs and newlines stay. */
static void xml_text(FILE *f, const char *s, bool lines) {
    if (!s) return;
    static const char *const entities[128] = {
        ['&'] = "&amp;", ['<'] = "&lt;", ['>'] = "&gt;", ['"'] = "&quot;", ['\''] = "&apos;"};
    const char *end = s + strlen(s);
    char esc[CLI_QUOTE_MAX];
    long cp;
    for (const char *p = s; p < end;) {
        size_t n = cli_quote_char(p, end, esc, &cp);
        if (esc[0] && !(lines && (cp == '\t' || cp == '\n'))) fputs(esc, f);
        else if (cp >= 0 && cp < 0x80 && entities[cp]) fputs(entities[cp], f);
        else fwrite(p, 1, n, f);
        p += n;
    }
}

/* Markdown table cell: the text quoted (cli_quote_char), then every ASCII
 * punctuation character that Markdown or GitHub's tables give a meaning to
 * backslash-escaped (CommonMark lets any ASCII punctuation be), those of
 * the quoted text too, so "\x01" renders as typed and a name cannot break
 * the table, inject markup or read as another name. */
static void md_chars(FILE *f, const char *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (strchr("\\`*_{}[]()<>#|~&!$^=", p[i])) fputc('\\', f);
        fputc(p[i], f);
    }
}

static void md_text(FILE *f, const char *s) {
    if (!s) return;
    const char *end = s + strlen(s);
    char esc[CLI_QUOTE_MAX];
    long cp;
    for (const char *p = s; p < end;) {
        size_t n = cli_quote_char(p, end, esc, &cp);
        md_chars(f, esc[0] ? esc : p, esc[0] ? strlen(esc) : n);
        p += n;
    }
}

static void counts(const cli_report *r, size_t *fail, size_t *err, size_t *skip) {
    *fail = *err = *skip = 0;
    for (size_t i = 0; i < r->n; i++) {
        if (r->cases[i].result == CLI_CASE_FAIL) ++*fail;
        if (r->cases[i].result == CLI_CASE_ERROR) ++*err;
        if (r->cases[i].result == CLI_CASE_SKIPPED) ++*skip;
    }
}

static double elapsed(const cli_report *r) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    double s = (double)(t.tv_sec - r->t0.tv_sec) + (double)(t.tv_nsec - r->t0.tv_nsec) * 1e-9;
    return s < 0 ? 0 : s;
}

char *cli_report_junit_text(const cli_report *r, size_t *len) {
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f) return NULL;
    size_t fail, err, skip;
    counts(r, &fail, &err, &skip);
    char suite[64], stamp[32], host[256] = "localhost";
    snprintf(suite, sizeof suite, "detcheck %s", r->cmd);
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
    if (gethostname(host, sizeof host - 1) != 0 || !host[0]) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = 0;
    double secs = elapsed(r);
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f, "<testsuites name=\"%s\" tests=\"%zu\" failures=\"%zu\" errors=\"%zu\" time=\"%.3f\">\n",
            suite, r->n, fail, err, secs);
    fprintf(f,
            "  <testsuite name=\"%s\" tests=\"%zu\" failures=\"%zu\" errors=\"%zu\" skipped=\"%zu\" "
            "time=\"%.3f\" timestamp=\"%s\" hostname=\"",
            suite, r->n, fail, err, skip, secs, stamp);
    xml_text(f, host, false);
    fprintf(f, "\">\n    <properties>\n");
    fprintf(f, "      <property name=\"detcheck.version\" value=\"%s\"/>\n", dck_version());
    for (size_t i = 0; i + 1 < r->nprops; i += 2) {
        fprintf(f, "      <property name=\"");
        xml_text(f, r->props[i], false);
        fprintf(f, "\" value=\"");
        xml_text(f, r->props[i + 1], false);
        fprintf(f, "\"/>\n");
    }
    fprintf(f, "    </properties>\n");
    for (size_t i = 0; i < r->n; i++) {
        const cli_case *c = &r->cases[i];
        fprintf(f, "    <testcase classname=\"");
        xml_text(f, c->classname ? c->classname : suite, false);
        fprintf(f, "\" name=\"");
        xml_text(f, c->name, false);
        fprintf(f, "\" time=\"0\"");
        if (c->result == CLI_CASE_PASS && !c->message) {
            fprintf(f, "/>\n");
            continue;
        }
        fprintf(f, ">\n");
        if (c->result == CLI_CASE_SKIPPED) {
            fprintf(f, "      <skipped message=\"");
            xml_text(f, c->message, false);
            fprintf(f, "\"/>\n");
        } else if (c->result == CLI_CASE_PASS) {
            /* a pass worth a note (within tolerance): shown as output */
            fprintf(f, "      <system-out>");
            xml_text(f, c->message, false);
            fprintf(f, "</system-out>\n");
        } else {
            const char *el = c->result == CLI_CASE_FAIL ? "failure" : "error";
            fprintf(f, "      <%s message=\"", el);
            xml_text(f, c->message ? c->message : "", false);
            fprintf(f, "\" type=\"");
            xml_text(f, c->type ? c->type : el, false);
            fprintf(f, "\">");
            /* the body repeats the message: some viewers show only one */
            xml_text(f, c->message, false);
            if (c->detail) {
                fputc('\n', f);
                xml_text(f, c->detail, true);
            }
            fprintf(f, "</%s>\n", el);
        }
        fprintf(f, "    </testcase>\n");
    }
    fprintf(f, "  </testsuite>\n</testsuites>\n");
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* Rows of failures the summary lists: a summary is read by people; the
 * JUnit report and --json have them all. */
enum { MD_MAX_ROWS = 100 };

char *cli_report_markdown_text(const cli_report *r, size_t *len) {
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f) return NULL;
    size_t fail, err, skip;
    counts(r, &fail, &err, &skip);
    const char *verdict = err ? "trouble" : fail ? "DIFFERENT" : "OK";
    const char *mark = err ? ":warning:" : fail ? ":x:" : ":white_check_mark:";
    fprintf(f, "### %s detcheck %s: %s\n\n", mark, r->cmd, verdict);
    if (r->title) {
        md_text(f, r->title);
        fprintf(f, "\n\n");
    }
    for (size_t i = 0; i + 1 < r->nprops; i += 2) {
        fprintf(f, "- ");
        md_text(f, r->props[i]);
        fprintf(f, ": ");
        md_text(f, r->props[i + 1]);
        fputc('\n', f);
    }
    if (r->nprops) fputc('\n', f);
    fprintf(f, "| checks | passed | failed | errors | skipped |\n| ---: | ---: | ---: | ---: | ---: |\n");
    fprintf(f, "| %zu | %zu | %zu | %zu | %zu |\n", r->n, r->n - fail - err - skip, fail, err, skip);
    if (fail + err) {
        fprintf(f, "\n| | name | what differs |\n| --- | --- | --- |\n");
        size_t shown = 0;
        for (size_t i = 0; i < r->n && shown < MD_MAX_ROWS; i++) {
            const cli_case *c = &r->cases[i];
            if (c->result == CLI_CASE_PASS || c->result == CLI_CASE_SKIPPED) continue;
            fprintf(f, "| %s | ", c->result == CLI_CASE_FAIL ? ":x:" : ":warning:");
            md_text(f, c->name);
            fprintf(f, " | ");
            /* the name has its own column */
            const char *m = c->message ? c->message : "";
            size_t nl = strlen(c->name);
            if (!strncmp(m, c->name, nl) && !strncmp(m + nl, ": ", 2)) m += nl + 2;
            md_text(f, m);
            fprintf(f, " |\n");
            shown++;
        }
        if (fail + err > shown)
            fprintf(f, "\n%zu more not listed here (see the JUnit report or --json).\n", fail + err - shown);
    }
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

static dck_status write_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return dck_set_error(DCK_ERR_IO, "write error: %s", w < 0 ? strerror(errno) : "no progress");
        p += w;
        n -= (size_t)w;
    }
    return DCK_OK;
}

static dck_status append_summary(const char *path, const char *doc, size_t len) {
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NONBLOCK | O_NOCTTY, 0666);
    if (fd < 0) return dck_set_error(DCK_ERR_IO, "cannot open: %s", strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return dck_set_error(DCK_ERR_IO, "not a regular file");
    }
    /* a blank line apart from what the step wrote before */
    dck_status s = st.st_size > 0 ? write_all(fd, "\n", 1) : DCK_OK;
    if (!s) s = write_all(fd, doc, len);
    if (!s && fsync(fd) != 0) s = dck_set_error(DCK_ERR_IO, "fsync failed: %s", strerror(errno));
    if (close(fd) != 0 && !s) s = dck_set_error(DCK_ERR_IO, "close failed: %s", strerror(errno));
    return s;
}

/* The rule of cli_report_validate again, at the moment of writing: the
 * command may have run for hours, and a user's file (or the command's own)
 * may have taken the path meanwhile. The inputs were refused before the
 * work; a path that became one since is refused by the kind (an input is
 * never a report). Where the path holds nothing at the check, the rename
 * never replaces (dck_output_commit): a file that appears in between stays. */
static dck_status write_report(const cli_report *r, size_t k, const char *path, const char *doc, size_t len) {
    dck_atomic_file af;
    DCK_TRY(dck_atomic_open(path, &af));
    dck_status s = dck_atomic_write(&af, doc, len);
    struct stat st;
    if (!s && r->checked && !r->present[k] && lstat(path, &st) == 0)
        s = dck_set_error(DCK_ERR_INVALID, "%s %s appeared while the command ran (detcheck did not write it); "
                                           "refusing to replace it: the report is not written",
                          kinds[k].option, path);
    if (s) {
        dck_atomic_abort(&af);
        return s;
    }
    s = dck_output_commit(&af, kinds[k].option, kinds[k].what, kinds[k].kind, NULL, 0);
    if (s == DCK_ERR_INVALID)
        return dck_set_error(s, "%s (it changed while the command ran): the report is not written", dck_last_error());
    return s;
}

static dck_status emit(cli_report *r, size_t k, char *(*text)(const cli_report *, size_t *)) {
    const char *paths[NKINDS] = {r->junit, r->markdown, r->html}, *path = paths[k];
    size_t len = 0;
    char *doc = text(r, &len);
    if (!doc) return dck_oom(NULL);
    dck_status s = DCK_OK;
    if (!strcmp(path, "-")) {
        if (fwrite(doc, 1, len, stdout) != len || fflush(stdout) != 0)
            s = dck_set_error(DCK_ERR_IO, "cannot write the report to standard output");
    } else if (is_step_summary(path)) {
        s = append_summary(path, doc, len);
    } else {
        s = write_report(r, k, path, doc, len);
    }
    free(doc);
    if (s) return dck_set_error(s, "report %s: %s", path, dck_last_error());
    return DCK_OK;
}

dck_status cli_report_write(cli_report *r, int exit_status) {
    dck_status rc = DCK_OK;
    size_t fail, err, skip;
    char cls[64];
    counts(r, &fail, &err, &skip);
    snprintf(cls, sizeof cls, "detcheck.%s", r->cmd);
    /* what the command printed must have reached stdout now: main() turns
     * a late write error into exit status 2, which the report must state */
    if (fflush(stdout) != 0 || ferror(stdout)) exit_status = DCK_EXIT_TROUBLE;
    if (exit_status == DCK_EXIT_TROUBLE && !err)
        cli_report_case(r, cls, "exit status", CLI_CASE_ERROR, "trouble",
                        "the command ended in trouble (exit status 2); its standard error says why", NULL);
    else if (exit_status == DCK_EXIT_DIFFERENT && !fail && !err)
        cli_report_case(r, cls, "exit status", CLI_CASE_FAIL, "different",
                        "the command found a difference (exit status 1) that no other case names", NULL);
    if (r->oom) rc = dck_oom(NULL);
    char *(*const text[NKINDS])(const cli_report *, size_t *) = {cli_report_junit_text, cli_report_markdown_text,
                                                                  cli_report_html_text};
    const char *paths[NKINDS] = {r->junit, r->markdown, r->html};
    for (size_t k = 0; k < NKINDS && !rc; k++)
        if (paths[k]) rc = emit(r, k, text[k]);
    cli_report_release(r);
    return rc;
}

/* ------------------------------------------------------------------ builders */

static void shape_text(char *b, size_t n, const uint64_t *shape, int ndim) {
    size_t k = (size_t)snprintf(b, n, "[");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(b + k, n - k, "%s%llu", i ? ", " : "", (unsigned long long)shape[i]);
    if (k < n) snprintf(b + k, n - k, "]");
}

static void classname(char *b, size_t n, const char *prefix, const char *what) {
    snprintf(b, n, "%s.%s", prefix, what);
}

/* One failing case for a comparison entry; sides: what the golden and the
 * actual manifest stand for ("golden", "checkpoint"; "run A", "run B"). */
static void compare_case(cli_report *r, const char *prefix, const dck_cmp_result *cmp,
                         const dck_cmp_entry *e, const char *const sides[2]) {
    char msg[DCK_MAX_NAME + 2048], a[33], b[33], sa[256], sb[256], cls[256];
    const char *name = e->name, *type = dck_cmp_kind_name(e->kind);
    const dck_manifest_tensor *t = e->golden ? e->golden : e->actual;
    classname(cls, sizeof cls, prefix,
              t ? dck_group_name(t->group) : e->kind == DCK_CMP_FILE ? "files" : "values");
    switch (e->kind) {
    case DCK_CMP_DIGEST:
        dck_digest_to_hex(e->actual->digest, a);
        dck_digest_to_hex(e->golden->digest, b);
        shape_text(sa, sizeof sa, e->golden->shape, e->golden->ndim);
        snprintf(msg, sizeof msg, "%s: digest %s in the %s, %s in the %s (%s %s)", name, a, sides[1], b,
                 sides[0], dck_dtype_name(e->golden->dtype), sa);
        break;
    case DCK_CMP_DTYPE:
        snprintf(msg, sizeof msg, "%s: dtype %s in the %s, %s in the %s", name,
                 dck_dtype_name(e->actual->dtype), sides[1], dck_dtype_name(e->golden->dtype), sides[0]);
        break;
    case DCK_CMP_SHAPE:
        shape_text(sa, sizeof sa, e->actual->shape, e->actual->ndim);
        shape_text(sb, sizeof sb, e->golden->shape, e->golden->ndim);
        snprintf(msg, sizeof msg, "%s: shape %s in the %s, %s in the %s", name, sa, sides[1], sb, sides[0]);
        break;
    case DCK_CMP_MISSING:
        snprintf(msg, sizeof msg, "%s: missing (in the %s, not in the %s)", name, sides[0], sides[1]);
        break;
    case DCK_CMP_EXTRA: {
        const char *alias = r->aliases ? r->aliases[e - cmp->entries] : NULL;
        snprintf(msg, sizeof msg, "%s: extra (in the %s, not in the %s)%s%s%s", name, sides[1], sides[0],
                 alias ? "; shares storage with " : "", alias ? alias : "",
                 alias ? " (a tied weight? --ignore-aliases)" : "");
        break;
    }
    case DCK_CMP_FILE:
        if (!e->actual_file || !e->golden_file) {
            snprintf(msg, sizeof msg, "file %s: %s (in the %s, not in the %s)", name,
                     e->actual_file ? "extra" : "missing", sides[e->actual_file ? 1 : 0],
                     sides[e->actual_file ? 0 : 1]);
        } else {
            dck_digest_to_hex(e->actual_file->xxh128, a);
            dck_digest_to_hex(e->golden_file->xxh128, b);
            snprintf(msg, sizeof msg, "file %s: %llu bytes xxh128 %s in the %s, %llu bytes %s in the %s", name,
                     (unsigned long long)e->actual_file->bytes, a, sides[1],
                     (unsigned long long)e->golden_file->bytes, b, sides[0]);
        }
        break;
    case DCK_CMP_VALUE:
        snprintf(msg, sizeof msg, "value %s: %s in the %s, %s in the %s", name,
                 e->actual_value ? e->actual_value->value : "(absent)", sides[1],
                 e->golden_value ? e->golden_value->value : "(absent)", sides[0]);
        break;
    default: snprintf(msg, sizeof msg, "%s: %s", name, type); break;
    }
    cli_report_case(r, cls, name, CLI_CASE_FAIL, type, msg, NULL);
}

typedef struct {
    const char *name;
    const dck_cmp_entry *e;
} entry_ref;

static int cmp_ref(const void *x, const void *y) {
    return strcmp(((const entry_ref *)x)->name, ((const entry_ref *)y)->name);
}

void cli_report_compare(cli_report *r, const char *prefix, const dck_manifest *golden,
                        const dck_cmp_result *cmp, const char *golden_side, const char *actual_side) {
    const char *const sides[2] = {golden_side, actual_side};
    /* tensor entries by name, so that every golden tensor is reported in
     * model order, passing or failing */
    entry_ref *refs = cmp->n ? malloc(sizeof *refs * cmp->n) : NULL;
    size_t nref = 0;
    if (cmp->n && !refs) {
        r->oom = true;
        return;
    }
    for (size_t i = 0; i < cmp->n; i++)
        if (cmp->entries[i].kind <= DCK_CMP_MISSING && cmp->entries[i].golden)
            refs[nref++] = (entry_ref){cmp->entries[i].name, &cmp->entries[i]};
    if (nref) qsort(refs, nref, sizeof *refs, cmp_ref);
    char cls[256];
    size_t ng = golden ? dck_manifest_tensor_count(golden) : 0;
    for (size_t i = 0; i < ng; i++) {
        const dck_manifest_tensor *t = dck_manifest_tensor_at(golden, i);
        entry_ref key = {t->name, NULL};
        entry_ref *hit = nref ? bsearch(&key, refs, nref, sizeof *refs, cmp_ref) : NULL;
        const char *glob = NULL;
        for (size_t g = 0; g < r->nexclude && !glob; g++)
            if (fnmatch(r->exclude[g], t->name, 0) == 0) glob = r->exclude[g];
        if (glob) {
            char why[512];
            snprintf(why, sizeof why, "excluded by --exclude %s", glob);
            classname(cls, sizeof cls, prefix, dck_group_name(t->group));
            cli_report_case(r, cls, t->name, CLI_CASE_SKIPPED, NULL, why, NULL);
        } else if (hit) {
            compare_case(r, prefix, cmp, hit->e, sides);
        } else {
            classname(cls, sizeof cls, prefix, dck_group_name(t->group));
            cli_report_case(r, cls, t->name, CLI_CASE_PASS, NULL, NULL, NULL);
        }
    }
    /* the rest: extras, files, values (and every entry without a golden) */
    for (size_t i = 0; i < cmp->n; i++) {
        const dck_cmp_entry *e = &cmp->entries[i];
        if (golden && e->kind <= DCK_CMP_MISSING && e->golden) continue;
        compare_case(r, prefix, cmp, e, sides);
    }
    free(refs);
}

static void num_text(char *b, size_t n, double v) {
    if (v != v) snprintf(b, n, "NaN");
    else if (v == 0) snprintf(b, n, "0");
    else snprintf(b, n, "%.3g", v);
}

static void diff_case(cli_report *r, const dck_diff_tensor *t) {
    char cls[256], msg[DCK_MAX_NAME + 2048], sa[256], sb[256], h1[33], h2[33];
    classname(cls, sizeof cls, "detcheck.diff", dck_group_name(t->group));
    const char *type = dck_diff_status_name(t->status);
    cli_case_result res = CLI_CASE_FAIL;
    size_t k = 0;
    switch (t->status) {
    case DCK_DIFF_EQUAL: cli_report_case(r, cls, t->name, CLI_CASE_PASS, NULL, NULL, NULL); return;
    case DCK_DIFF_MISSING_IN_A: snprintf(msg, sizeof msg, "%s: only in B", t->name); break;
    case DCK_DIFF_MISSING_IN_B: snprintf(msg, sizeof msg, "%s: only in A", t->name); break;
    case DCK_DIFF_DTYPE_MISMATCH:
        snprintf(msg, sizeof msg, "%s: dtype %s in A, %s in B", t->name, dck_dtype_name(t->dtype_a),
                 dck_dtype_name(t->dtype_b));
        break;
    case DCK_DIFF_SHAPE_MISMATCH:
        shape_text(sa, sizeof sa, t->shape_a, t->ndim_a);
        shape_text(sb, sizeof sb, t->shape_b, t->ndim_b);
        snprintf(msg, sizeof msg, "%s: shape %s in A, %s in B", t->name, sa, sb);
        break;
    default:
        if (t->status == DCK_DIFF_WITHIN_TOLERANCE) res = CLI_CASE_PASS;
        if (!t->has_stats) {
            dck_digest_to_hex(t->digest_a, h1);
            dck_digest_to_hex(t->digest_b, h2);
            snprintf(msg, sizeof msg, "%s: digest %s in A, %s in B", t->name,
                     t->has_digest_a ? h1 : "?", t->has_digest_b ? h2 : "?");
            break;
        }
        const dck_diff_stats *s = &t->stats;
        /* NaN pairs have no distance: when they are every difference, the
         * figures are "-" rather than 0, which would read as "equal" */
        bool nan_only = s->diff_count > 0 && s->diff_count == s->nan_vs_number + s->nan_payload;
        char ma[32] = "-", mr[32] = "-", mu[32] = "-", l2[32] = "-";
        if (!nan_only) {
            num_text(ma, sizeof ma, s->max_abs);
            num_text(mr, sizeof mr, s->max_rel);
            snprintf(mu, sizeof mu, "%llu", (unsigned long long)s->max_ulp);
            num_text(l2, sizeof l2, t->rel_l2);
        }
        k = (size_t)snprintf(msg, sizeof msg, "%s: %llu of %llu elements differ", t->name,
                             (unsigned long long)s->diff_count, (unsigned long long)s->count);
        if (s->beyond_count != s->diff_count && k < sizeof msg)
            k += (size_t)snprintf(msg + k, sizeof msg - k, " (%llu beyond the tolerances)",
                                  (unsigned long long)s->beyond_count);
        if (k < sizeof msg)
            k += (size_t)snprintf(msg + k, sizeof msg - k, "; max abs %s, max rel %s, max ULP %s, rel L2 %s",
                                  ma, mr, mu, l2);
        if (s->sign_changes && k < sizeof msg)
            k += (size_t)snprintf(msg + k, sizeof msg - k, "; sign changes %llu, same-sign max ULP %llu",
                                  (unsigned long long)s->sign_changes, (unsigned long long)s->max_ulp_same_sign);
        if (s->first_flat != UINT64_MAX && k < sizeof msg) {
            shape_text(sa, sizeof sa, t->first_index, t->ndim_a);
            k += (size_t)snprintf(msg + k, sizeof msg - k, "; first at %s", sa);
        }
        if ((s->nan_vs_number || s->nan_payload) && k < sizeof msg)
            k += (size_t)snprintf(msg + k, sizeof msg - k, "; NaN against a number %llu, NaN payloads %llu",
                                  (unsigned long long)s->nan_vs_number, (unsigned long long)s->nan_payload);
        if ((s->nan_a != s->nan_b || s->inf_a != s->inf_b) && k < sizeof msg)
            snprintf(msg + k, sizeof msg - k, "; NaN %llu/%llu, Inf %llu/%llu in A/B",
                     (unsigned long long)s->nan_a, (unsigned long long)s->nan_b,
                     (unsigned long long)s->inf_a, (unsigned long long)s->inf_b);
        break;
    }
    cli_report_case(r, cls, t->name, res, type, msg, NULL);
}

void cli_report_diff(cli_report *r, const dck_diff_result *d) {
    for (size_t i = 0; i < d->ntensors; i++) diff_case(r, &d->tensors[i]);
    char msg[DCK_MAX_NAME + 2048];
    for (size_t i = 0; i < d->nvalues; i++) {
        const dck_diff_value *v = &d->values[i];
        snprintf(msg, sizeof msg, "value %s: %s in A, %s in B", v->name, v->a ? v->a : "(absent)",
                 v->b ? v->b : "(absent)");
        cli_report_case(r, "detcheck.diff.values", v->name, CLI_CASE_FAIL, "value", msg, NULL);
    }
}

/* Helpers shared by the subcommands: messages (the reports' too), number
 * parsing, colour and hash's manifest output (the shared
 * options are cli_options.c's; names are quoted by report/text.c, JSON
 * written by report/json.c, shell words by report/text.c).
 * The command table is main.c's; nothing here names a subcommand. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* cli_rank and cli_quiet live in cli_progress.c (messages clear its line) */

/* A message as one line whatever its arguments hold: names the library put
 * in its messages, or a caller passed raw, are quoted here (cli_safe_line). */
static void vput_line(const char *fmt, va_list ap) {
    char *msg = NULL;
    if (vasprintf(&msg, fmt, ap) < 0) msg = NULL;
    fputs(msg ? cli_safe_line(msg) : "(message not shown: out of memory)", stderr);
    free(msg);
}

static void vmsg(const char *kind, const char *cmd, const char *fmt, va_list ap) {
    if (cli_rank != 0) return;
    cli_progress_clear(); /* a message never lands on the progress line */
    fprintf(stderr, "detcheck%s%s: %s", cmd ? " " : "", cmd ? cmd : "", kind);
    vput_line(fmt, ap);
    fputc('\n', stderr);
}

void cli_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vmsg("error: ", cmd, fmt, ap);
    va_end(ap);
}

void cli_warn(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vmsg("warning: ", cmd, fmt, ap);
    va_end(ap);
}

void cli_notice(void *ctx, const char *msg) {
    cli_info(ctx ? (const char *)ctx : "detcheck", "note: %s", msg);
}

void cli_info(const char *cmd, const char *fmt, ...) {
    if (cli_quiet) return;
    va_list ap;
    va_start(ap, fmt);
    vmsg("", cmd, fmt, ap);
    va_end(ap);
}

int cli_fail(const char *cmd, dck_status s) {
    const char *m = dck_last_error();
    cli_error(cmd, "%s", (m && *m) ? m : dck_strerror(s));
    return DCK_EXIT_TROUBLE;
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    if (cli_rank == 0) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "detcheck %s: ", cmd);
        vput_line(fmt, ap);
        va_end(ap);
        fprintf(stderr, "\nTry 'detcheck %s --help'.\n", cmd);
    }
    return DCK_EXIT_TROUBLE;
}

int cli_report_arg(cli_report *r, const char *a, const char *next, int *used) {
    int taken = cli_report_take_arg(r, a, next, used);
    if (taken < 0) cli_usage_error(r->cmd, "%s", dck_last_error());
    return taken;
}

int cli_report_check(cli_report *r, bool json, const char *const *inputs, size_t ninputs) {
    return cli_report_validate(r, json, inputs, ninputs) ? cli_usage_error(r->cmd, "%s", dck_last_error()) : 0;
}

int cli_report_finish(cli_report *r, int exit_status) {
    dck_status s = cli_report_write(r, exit_status);
    return s ? cli_fail(r->cmd, s) : 0;
}

bool cli_parse_long(const char *s, long min, long max, long *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < min || v > max) return false;
    *out = v;
    return true;
}

bool cli_parse_double(const char *s, double *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || isnan(v)) return false;
    *out = v;
    return true;
}

int cli_valued_option(const char *cmd, int argc, char **argv, int *i, const char *const *valued, size_t nv,
                      const char **val) {
    const char *a = argv[*i];
    for (size_t k = 0; k < nv; k++) {
        size_t len = strlen(valued[k]);
        if (!strcmp(a, valued[k])) {
            if (*i + 1 >= argc || !strcmp(argv[*i + 1], "--")) {
                cli_usage_error(cmd, "%s needs a value", a);
                return -2;
            }
            *val = argv[++*i];
            return (int)k;
        }
        if (!strncmp(a, valued[k], len) && a[len] == '=') {
            *val = a + len + 1;
            return (int)k;
        }
    }
    return -1;
}

bool cli_color(void) {
    const char *nc = getenv("NO_COLOR");
    return isatty(1) && !(nc && *nc);
}

/* This process's rank as an MPI launcher (Open MPI, PMIx, PMI) says, or -1. */

dck_status cli_emit_manifest(dck_manifest *m, const char *const *paths, size_t npaths,
                             dck_format fmt, const char *output, const char *how) {
    /* source: the paths as given, for the reader of the manifest */
    size_t len = 1;
    for (size_t i = 0; i < npaths; i++) len += strlen(paths[i]) + 1;
    char *src = malloc(len);
    if (!src) return dck_oom(NULL);
    src[0] = 0;
    for (size_t i = 0; i < npaths; i++) {
        if (i) strcat(src, " ");
        strcat(src, paths[i]);
    }
    dck_status s = dck_manifest_set_meta(m, "source", src);
    free(src);
    if (s) return s;
    if (output) s = dck_manifest_save(m, fmt, output);
    else s = dck_manifest_write(m, fmt, stdout);
    if (!s && !output && fflush(stdout) != 0)
        s = dck_set_error(DCK_ERR_IO, "cannot write to standard output");
    if (!s && output) {
        char hex[33];
        dck_digest_to_hex(dck_manifest_root(m), hex);
        cli_info("hash", "%zu tensors, root %s -> %s%s", dck_manifest_tensor_count(m), hex, output, how);
    }
    return s;
}

/* A checkpoint directory can hold thousands of shards; the library keeps a
 * descriptor for up to a quarter of the soft limit and reopens the rest for
 * each use. The soft limit is raised to the hard one (capped: what a large
 * checkpoint needs, not the kernel's maximum), as a shell's `ulimit -n
 * hard` would; a limit the user set as hard stays. */
void cli_raise_fd_limit(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
    rlim_t want = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > 65536 ? 65536 : rl.rlim_max;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
        rl.rlim_cur = want;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

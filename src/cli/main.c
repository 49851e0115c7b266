/* detcheck: entry point and the subcommand table. */
#include "cli.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <errno.h>
#include <math.h>

static const dck_command commands[] = {
    {"hash", cmd_hash, "digest every tensor of a checkpoint into a manifest"},
    {"verify", cmd_verify, "compare a checkpoint with a golden manifest (exit 0 same, 1 different)"},
    {"diff", cmd_diff, "compare two checkpoints layer by layer, with counts and ULP distances"},
    {"train", cmd_train, "run the built-in deterministic training loop (CPU, MPI)"},
    {"resume-check", cmd_resume_check, "check that killing and resuming reproduces a run bitwise"},
    {"bisect", cmd_bisect, "find the first step and tensor where two runs part"},
};

int cli_rank = 0;
bool cli_quiet = false;

static void vmsg(const char *kind, const char *cmd, const char *fmt, va_list ap) {
    if (cli_rank != 0) return;
    fprintf(stderr, "detcheck%s%s: %s", cmd ? " " : "", cmd ? cmd : "", kind);
    vfprintf(stderr, fmt, ap);
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
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fprintf(stderr, "\nTry 'detcheck %s --help'.\n", cmd);
    }
    return DCK_EXIT_TROUBLE;
}

int cli_add_tp_split(const char *cmd, dck_options *o, const char *rule) {
    /* one command per process: the rules live until exit */
    static const char **rules;
    static size_t cap;
    if (o->ntp_split_rules == cap) {
        size_t ncap = cap ? cap * 2 : 8;
        const char **p = realloc(rules, ncap * sizeof *p);
        if (!p) {
            cli_error(cmd, "out of memory");
            return DCK_EXIT_TROUBLE;
        }
        rules = p;
        cap = ncap;
    }
    if (!strchr(rule, '='))
        return cli_usage_error(cmd, "--tp-split wants GLOB=DIM (DIM a dimension number or 'none'), not '%s'", rule);
    rules[o->ntp_split_rules++] = rule;
    o->tp_split_rules = rules;
    return 0;
}

int cli_check_megatron(const char *cmd, const dck_options *o) {
    if (o->ntp_split_rules && !o->megatron_merge)
        return cli_usage_error(cmd, "--tp-split needs --megatron-merge");
    return 0;
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

static int progress_shown;

void cli_progress(void *ctx, uint64_t done, uint64_t total) {
    (void)ctx;
    if (cli_quiet || cli_rank != 0 || !isatty(2) || total == 0) return;
    int pct = (int)(done * 100 / total);
    int bar = pct / 4;
    fprintf(stderr, "\r[%.*s%*s] %3d%% %8.1f MiB", bar, "#########################", 25 - bar, "",
            pct, (double)done / 1048576.0);
    progress_shown = 1;
}

void cli_progress_end(void) {
    if (progress_shown) {
        fprintf(stderr, "\r%60s\r", "");
        progress_shown = 0;
    }
}

void cli_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p == '\n') fputs("\\n", f);
        else if (*p == '\t') fputs("\\t", f);
        else if (*p == '\r') fputs("\\r", f);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

const char *cli_safe(const char *s) {
    static char bufs[4][1024];
    static int k;
    char *b = bufs[k++ & 3];
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p && n + 5 < sizeof bufs[0]; p++) {
        if (*p < 0x20 || *p == 0x7f) n += (size_t)snprintf(b + n, sizeof bufs[0] - n, "\\x%02x", *p);
        else b[n++] = (char)*p;
    }
    b[n] = 0;
    return b;
}

bool cli_color(void) {
    const char *nc = getenv("NO_COLOR");
    return isatty(1) && !(nc && *nc);
}

/* This process's rank as an MPI launcher (Open MPI, PMIx, PMI) says, or -1. */
static int launcher_rank(void) {
    static const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        long r;
        if (v && cli_parse_long(v, 0, 1 << 24, &r)) return (int)r;
    }
    return -1;
}

static void usage(FILE *out) {
    fprintf(out,
            "usage: detcheck COMMAND [OPTIONS] [ARGS]\n"
            "\n"
            "Proves, bit for bit, that training runs are reproducible.\n"
            "\n"
            "Commands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-14s %s\n", commands[i].name, commands[i].help);
    fprintf(out,
            "\n"
            "Options:\n"
            "  -h, --help     this help; 'detcheck COMMAND --help' for a command's\n"
            "  --version      print the version\n"
            "\n"
            "Exit status: 0 same, 1 different, 2 trouble. See detcheck(1).\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return DCK_EXIT_TROUBLE;
    }
    const char *name = argv[1];
    if (!strcmp(name, "-h") || !strcmp(name, "--help") || !strcmp(name, "help")) {
        if (!strcmp(name, "help") && argc > 2) {
            for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
                if (!strcmp(argv[2], commands[i].name)) {
                    char *hargv[] = {argv[2], (char *)"--help", NULL};
                    return commands[i].fn(2, hargv);
                }
        }
        usage(stdout);
        return 0;
    }
    if (!strcmp(name, "--version") || !strcmp(name, "-V")) {
        printf("detcheck %s (digest v1)\n", dck_version());
        return 0;
    }
    /* Under an MPI launcher only rank 0 prints: commands that use MPI set
     * cli_rank themselves; for the others every rank does the same work and
     * ranks other than 0 stay silent. */
    int env_rank = launcher_rank();
    if (env_rank > 0) {
        cli_rank = env_rank;
        if (!freopen("/dev/null", "w", stdout)) return DCK_EXIT_TROUBLE;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(name, commands[i].name)) {
            int rc = commands[i].fn(argc - 1, argv + 1);
            /* output that never reached its destination is trouble */
            if (fflush(stdout) != 0 || ferror(stdout)) {
                fprintf(stderr, "detcheck %s: error: cannot write to standard output\n", name);
                return DCK_EXIT_TROUBLE;
            }
            return rc;
        }
    fprintf(stderr, "detcheck: unknown command '%s'\nTry 'detcheck --help'.\n", name);
    return DCK_EXIT_TROUBLE;
}

/* The detcheck command line: a table of subcommands, one file each. */
#ifndef DCK_CLI_H
#define DCK_CLI_H

#include "common/common.h" /* detcheck.h, dck_oom, DCK_TRY */
#include <stdbool.h>
#include <stdio.h>

/* Exit codes, as cmp(1) and diff(1): same, different, trouble. */
enum { DCK_EXIT_SAME = 0, DCK_EXIT_DIFFERENT = 1, DCK_EXIT_TROUBLE = 2 };

typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv); /* argv[0] is the subcommand name */
    const char *help;                 /* one line for `detcheck --help` */
} dck_command;

int cmd_hash(int argc, char **argv);
/* hash --device / --distributed (cmd_hash_plan.c) */
int cmd_hash_planned(int argc, char **argv, const char *const *paths, size_t npaths,
                     const dck_options *o, dck_format fmt, const char *output, dck_device device,
                     int distributed);
int cmd_verify(int argc, char **argv);
int cmd_diff(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_resume_check(int argc, char **argv);
int cmd_bisect(int argc, char **argv);

/* Messages: "detcheck CMD: ..." on stderr. Under MPI only rank 0 prints
 * (cli_rank is set by commands that initialise MPI). */
extern int cli_rank;
extern bool cli_quiet;
void cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cli_warn(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cli_info(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Library failure: prints dck_last_error() (or dck_strerror) and returns 2. */
int cli_fail(const char *cmd, dck_status s);
/* Misuse: message plus "try 'detcheck CMD --help'", returns 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* --megatron-merge and --tp-split GLOB=DIM (hash, verify, diff). add
 * appends a rule (argv strings outlive the command) to o; check, after the
 * options, refuses rules without merging. Each returns 0, or exit status 2
 * after a usage message. */
int cli_add_tp_split(const char *cmd, dck_options *o, const char *rule);
int cli_check_megatron(const char *cmd, const dck_options *o);

/* Strict number parsing: the whole string, in range. */
bool cli_parse_long(const char *s, long min, long max, long *out);
bool cli_parse_double(const char *s, double *out);

/* Progress bar on stderr when it is a terminal (and not quiet). */
void cli_progress(void *ctx, uint64_t done, uint64_t total);
void cli_progress_end(void);

/* hash's output: records the source paths in the manifest, writes it to
 * output (atomically) or stdout, and notes the root on stderr (how: a suffix
 * for that note, e.g. " (cuda, distributed)"). */
dck_status cli_emit_manifest(dck_manifest *m, const char *const *paths, size_t npaths,
                             dck_format fmt, const char *output, const char *how);

/* Writes s as a JSON string literal (quoted, escaped). */
void cli_json_string(FILE *f, const char *s);

/* A name from a file, fit to print on a terminal line: control characters
 * (newline, ESC...) as \xNN, so a file cannot forge report lines. Rotating
 * static buffers: valid for the next three calls. */
const char *cli_safe(const char *s);

/* Terminal colour for stdout (isatty and NO_COLOR unset). */
bool cli_color(void);

#endif

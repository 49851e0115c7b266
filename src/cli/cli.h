/* The detcheck command line (src/cli/): the command table (main.c), one
 * file per subcommand (cmd_NAME.c: it parses, calls the library and hands
 * the result to a report of src/report/), the one option parser
 * (cli_options.c: every command's options, train's included), the messages
 * (cli_util.c), the progress line (cli_progress.c) and the user's commands
 * run as children (cli_run.c). */
#ifndef DCK_CLI_H
#define DCK_CLI_H

#include "common/common.h" /* detcheck.h, dck_oom, DCK_TRY */
#include "report/json.h"   /* --json documents */
#include "report/report.h" /* exit codes, names quoted, the reports */
#include "train/train.h"   /* dck_train_config: train's options */
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

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
int cmd_seal(int argc, char **argv);
int cmd_diff(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_resume_check(int argc, char **argv);
int cmd_bisect(int argc, char **argv);
int cmd_canary(int argc, char **argv);
int cmd_repro(int argc, char **argv);
int cmd_latest(int argc, char **argv);
int cmd_doctor(int argc, char **argv);
/* resume-check -- CMD ARGS... (cmd_resume_user.c): the user's own training */
int cmd_resume_user(int argc, char **argv);

/* ------------------------------------------------------------------ cli_run.c
 * A user's command as a child (repro, resume-check). cli_run_catch_signals
 * makes SIGINT, SIGTERM and SIGHUP set cli_interrupted; cli_run_child then
 * passes them on to the child's group. */
extern volatile sig_atomic_t cli_interrupted;
void cli_run_catch_signals(void);
/* Removes a work folder the command made and all under it, depth first,
 * never following a link (nftw FTW_PHYS). */
void cli_remove_tree(const char *dir);
/* A command's temporary work folder: TMPDIR (or /tmp)/detcheck-CMD.XXXXXX
 * into work (n bytes), made with mkdtemp; 0, or DCK_EXIT_TROUBLE with the
 * message said. */
int cli_temp_workdir(const char *cmd, char *work, size_t n);
/* dir made absolute in place (a user's command may change its directory
 * before it records); left as it is when that does not fit in n with room
 * for the names the command adds under it. */
void cli_absolute_dir(char *dir, size_t n);
/* Creates a file of ours in a work folder (a log): new, never through a
 * link nor over a file someone planted there (O_EXCL | O_NOFOLLOW); the
 * error names the path and what is there. */
dck_status cli_create_new(const char *path, int *fd);
/* A folder a command created for a run, after the run (that ran a user's
 * command): still that folder (dev, ino as created), not a link, at its
 * own path (dir absolute: nothing above it swapped). The error says how
 * it changed. */
dck_status cli_dir_unchanged(const char *dir, dev_t dev, ino_t ino);
/* The same file of several runs (RUN/trajectory.jsonl of each), after the
 * runs: each its own, not a symbolic link and no two the same file (a hard
 * link to another run's); absent ones pass. At most 8; the error names
 * the path (and the other). */
dck_status cli_run_files_own(const char *const *paths, size_t n);
/* Runs argv with stdin from /dev/null, stdout and stderr into files
 * (created new: cli_create_new) and the variables of env (NAME, VALUE
 * pairs; VALUE NULL unsets NAME; a NULL NAME ends the list) set, in its own
 * process group; returns its exit status (128+signal when killed), -1 when
 * it could not start, -2 past timeout (0: none), -3 interrupted,
 * CLI_RUN_NO_LOG when a log could not be created (not started; the error
 * is set). The group is killed at the end: nothing the command left behind
 * writes on. */
enum { CLI_RUN_NO_LOG = -4 };
int cli_run_child(char *const *argv, const char *const *env, const char *out, const char *err, double timeout,
                  double *seconds);
/* cli_run_child's status in words: "exited with status 3", "was killed by
 * signal 9 (Killed)", "did not finish within T s (--timeout)..." */
void cli_run_describe(int st, double timeout, char *buf, size_t len);
/* The last `lines` lines of a file (of its last 64 KiB), malloc'd, or NULL
 * (also for a symbolic link there: a log is read back only when ours). */
char *cli_file_tail(const char *path, int lines);
/* The tail of a failed run's stderr as error lines ("its stderr, last N
 * lines (PATH):", then each line indented), or that it is empty. */
void cli_print_tail(const char *cmd, const char *path, int lines);

/* Messages: "detcheck CMD: ..." on stderr. Under MPI only rank 0 prints
 * (cli_rank is set by commands that initialise MPI). */
extern int cli_rank;
extern bool cli_quiet;
void cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cli_warn(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Soft RLIMIT_NOFILE up to the hard limit (at most 65536): once, at start. */
void cli_raise_fd_limit(void);
void cli_info(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* dck_options.notice for the CLI: ctx is the command's name; quiet hides it. */
void cli_notice(void *ctx, const char *msg);
/* Library failure: prints dck_last_error() (or dck_strerror) and returns 2. */
int cli_fail(const char *cmd, dck_status s);
/* Misuse: message plus "try 'detcheck CMD --help'", returns 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The reports (report/report.h) with their messages: cli_report_take_arg,
 * cli_report_validate and cli_report_write, whose failures these print
 * under the report's command (a usage error for the first two); each
 * returns what the command returns: -1 misuse (arg), DCK_EXIT_TROUBLE after
 * the message (check, finish), else as the report function. */
int cli_report_arg(cli_report *r, const char *a, const char *next, int *used);
int cli_report_check(cli_report *r, bool json, const char *const *inputs, size_t ninputs);
int cli_report_finish(cli_report *r, int exit_status);

/* ------------------------------------------------------------------ cli_options.c
 * The one option parser. The options commands share, in one table:
 * -t/--threads N, -q/--quiet, -h/--help, --json, --iteration N,
 * --megatron-merge, --megatron-per-rank, --tp-split GLOB=DIM and the filters
 * of verify and diff. A command fills a cli_shared and calls cli_getopt in
 * place of getopt_long: it handles the shared options itself and returns the
 * command's own codes (and getopt's '?' and ':'), -1 after the last option,
 * or CLI_STOP when the command must return sh.exit now (the help printed, or
 * a misuse reported). */
enum { CLI_OPT_JSON = 0x1000, CLI_OPT_ITERATION, CLI_OPT_MEGATRON_MERGE, CLI_OPT_TP_SPLIT,
       CLI_OPT_EXCLUDE, CLI_OPT_IGNORE_ALIASES, CLI_OPT_REQUIRE_RANK_STATE, CLI_OPT_MEGATRON_PER_RANK,
       CLI_OPT_ACCEPT_LAYOUT_STATE,
       CLI_STOP = -2 };
typedef struct {
    const char *cmd;
    const char *help_text;   /* printed by -h/--help */
    dck_options *read;       /* how checkpoints are read: --iteration, Megatron (NULL: the
                              * command reads none, and takes none of those nor the filters) */
    int *threads;            /* where --threads goes (NULL: no --threads, no -t) */
    long threads_max;        /* its range is 1..threads_max */
    const char *threads_want;/* "--threads wants %s, not 'ARG'" */
    bool json, help;         /* results */
    int exit;                /* with CLI_STOP: the exit status */
    /* --exclude GLOB (repeatable), --ignore-aliases, --require-rank-state and
     * --accept-layout-state: only where filters is set (verify, diff); other
     * commands refuse them */
    bool filters, ignore_aliases, require_rank_state, accept_layout_state;
    const char **exclude;    /* argv strings */
    size_t nexclude;
    bool no_shared;          /* none of the shared options (train's options: the
                              * command's extra callback takes -h, -q, --json) */
} cli_shared;
int cli_getopt(int argc, char **argv, const char *own_short, const struct option *own_long,
               cli_shared *sh);
/* One shared option by its code (a command's alias calls it too): 1 done,
 * 0 not a shared option, -1 misuse (usage message printed). */
int cli_shared_option(cli_shared *sh, int code, const char *arg);
/* What an OK leaves out, said with it: "; left out by --exclude: 'G1',
 * 'G2'" on f (nothing without --exclude). */
void cli_print_excluded(FILE *f, const cli_shared *sh);
/* --tp-split: appends a rule (argv strings outlive the command) to o;
 * cli_check_megatron, after the options, refuses rules with
 * --megatron-per-rank (the commands set o->megatron_merge: merging is the
 * CLI's default). Each returns 0, or exit status 2 after a usage message. */
int cli_add_tp_split(const char *cmd, dck_options *o, const char *rule);
int cli_check_megatron(const char *cmd, const dck_options *o);

/* train's options (the trainer's table, src/train/train_config.c), parsed
 * by cli_getopt from argv[1..] for train and the commands that pass them
 * on: --name VALUE or --name=VALUE, names in full. Every argument goes first
 * to extra(ctx, arg, next, &used), the command's own options: 1 consumed
 * (plus `used` following arguments), 0 not its own, -1 error already
 * reported. Returns 0 or an exit code, after a usage message. */
int cli_parse_train_args(const char *cmd, int argc, char **argv, dck_train_config *c,
                         int (*extra)(void *, const char *, const char *, int *), void *ectx);
/* The train options a command that passes the others on (canary,
 * resume-check) does not take, in one table per command, NULL-terminated:
 * cli_parse_train_args_except refuses each by name with `why`, and
 * cli_print_refused lists them in the command's --help on the line
 * "Train options not taken here: --out ...", from which ci/completion.sh
 * leaves them out of the command's completions. */
typedef struct {
    const char *name; /* without the dashes */
    const char *why;
} cli_refused;
int cli_parse_train_args_except(const char *cmd, int argc, char **argv, dck_train_config *c,
                                const cli_refused *refused,
                                int (*extra)(void *, const char *, const char *, int *), void *ectx);
void cli_print_refused(FILE *out, const cli_refused *refused);

/* Strict number parsing: the whole string, in range. */
bool cli_parse_long(const char *s, long min, long max, long *out);
bool cli_parse_double(const char *s, double *out);

/* cli_progress.c: a progress line on stderr when it is a terminal (and not
 * quiet, rank 0 only): bytes with rate and ETA. cli_progress is the
 * library's progress callback (ctx unused); cli_progress_steps the same in
 * trainer steps; cli_progress_clear rubs the line out (messages call it),
 * cli_progress_end also restarts the clock for the next run of reports. */
void cli_progress(void *ctx, uint64_t done, uint64_t total);
void cli_progress_steps(uint64_t done, uint64_t total);
void cli_progress_clear(void);
void cli_progress_end(void);
bool cli_progress_enabled(void);
/* Colour on stderr: a terminal, NO_COLOR unset or empty, TERM not dumb. */
bool cli_color_stderr(void);

/* hash's output: records the source paths in the manifest, writes it to
 * output (atomically) or stdout, and notes the root on stderr (how: a suffix
 * for that note, e.g. " (cuda, distributed)"). */
dck_status cli_emit_manifest(dck_manifest *m, const char *const *paths, size_t npaths,
                             dck_format fmt, const char *output, const char *how);

/* argv[*i] as one of the options named in valued, "--name VALUE" or
 * "--name=VALUE": its index in valued, *val its value (*i moved past a
 * separate one); -1 when it is none of them; -2 when its value is missing
 * (a usage error printed under cmd's name). */
int cli_valued_option(const char *cmd, int argc, char **argv, int *i, const char *const *valued, size_t nv,
                      const char **val);

/* Terminal colour for stdout (isatty and NO_COLOR unset). */
bool cli_color(void);

#endif

/* detcheck resume-check -- CMD ARGS...: does a user's own training resume
 * bit for bit? Runs the command uninterrupted, then per stop point K a run
 * that stops at K through the detcheck package's contract (DETCHECK_STOP_AT;
 * stop.json when it calls session().stopped(K), required with --kill,
 * where it SIGKILLs itself right after the checkpoint) and
 * a run that resumes from that checkpoint (DETCHECK_RESUME=1); reads the
 * recordings (trajectory.jsonl, tensor_digests.bin) in-process; the library's
 * resume diagnosis (runs/resume.h) finds the first differing resumed step
 * and the state that was not restored; report/resume.h words it (lines,
 * JSON, reports), which this file prints. See man detcheck-resume-check(1),
 * USER COMMANDS. */
#include "cli.h"
#include "report/resume.h"
#include "cli_trace.h"
#include "runs/resume.h"
#include "train/train.h"
#include "runs/recording.h"

#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CMD "resume-check"
enum { MAX_STOPS = 64, TAIL_LINES = 20, MAX_STOP_JSON = 1 << 16 };

/* -h, --help (printed by cli_getopt) */
static const char user_help[] =
    "usage: detcheck resume-check [OPTIONS] -- CMD ARGS...\n"
    "\n"
    "Runs your training command uninterrupted, then for each stop point K a run\n"
    "that stops at step K (DETCHECK_STOP_AT=K: the script saves the checkpoint\n"
    "and exits 0; detcheck.session().stopped(K) also writes stop.json, which\n"
    "--kill needs) and a run that resumes from that checkpoint\n"
    "(DETCHECK_RESUME=1); compares every resumed step K+1.. with the\n"
    "uninterrupted run bit for bit (trajectory and every recorded tensor; a\n"
    "step one run lacks differs) and names the state that was not restored:\n"
    "weights, data, RNG, LR, GradScaler, EMA or optimizer state.\n"
    "\n"
    "Options:\n"
    "  --at K[,K...]            stop points (default: half of the uninterrupted\n"
    "                           run's last step)\n"
    "  --kill                   the stop run SIGKILLs itself right after the\n"
    "                           checkpoint (DETCHECK_STOP_KILL=1) instead of\n"
    "                           stopping cleanly\n"
    "  --trace MODE             DETCHECK_TRACE for the runs: none (default),\n"
    "                           modules or ops\n"
    "  --launcher \"CMD ...\"     prefix of every run, e.g. \"torchrun --nproc_per_node 2\"\n"
    "  --resume-launcher \"...\"  prefix of the resumed runs (default: --launcher)\n"
    "  --timeout SECONDS        per run; its process group is killed after it\n"
    "  --workdir DIR            keep the runs in DIR (default: a temporary directory\n"
    "                           under $TMPDIR, removed when every stop reproduces)\n"
    "  --keep                   keep the temporary directory\n"
    "  --allow-partial          accept traced steps that both runs' recorders cut\n"
    "                           alike (their events past the bound not compared;\n"
    "                           said in the verdict); without it: incomplete (1)\n"
    "  --json                   machine-readable result (one document)\n"
    "  --junit FILE             also a JUnit XML report (a test case per stop point)\n"
    "  --markdown FILE          also a Markdown summary ('-': stdout)\n"
    "  --html FILE              also a self-contained HTML page (curves,\n"
    "                           step x module grid)\n"
    "  -q, --quiet              no progress lines\n"
    "\n"
    "Exit status: 0 every stop point reproduced, 1 one differs (or incomplete:\n"
    "something not compared, without --allow-partial), 2 trouble (bad\n"
    "options, a run that failed, recorded nothing or did not honour the contract).\n";

/* ------------------------------------------------------------------ options */

/* Options of the built-in trainer form that mean nothing for a user's
 * command (beside train's own, refused by their table). */
static const struct {
    const char *name, *why;
} trainer_only[] = {{"--resume-device", "the resumed run's device is your command's business"},
                    {"--resume-flip-bit", "a testing hook of the built-in trainer"}};

typedef struct {
    long at[MAX_STOPS];
    int nat;
    bool kill, keep, json, allow_partial;
    const char *trace, *launcher, *resume_launcher, *workdir;
    double timeout; /* 0: none */
    char **cmd;
    int ncmd;
    cli_report rep;
} uopts;

/* "--steps" or "--steps=..." when NAME is one of train's options. */
static const char *train_option(const char *a) {
    if (strncmp(a, "--", 2)) return NULL;
    for (size_t i = 0; dck_train_option_name(i); i++) {
        const char *n = dck_train_option_name(i);
        size_t len = strlen(n);
        if (!strncmp(a + 2, n, len) && (a[2 + len] == 0 || a[2 + len] == '=')) return n;
    }
    return NULL;
}

static int parse_at(uopts *o, const char *val) {
    const char *p = val;
    o->nat = 0;
    for (;;) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        char w[32];
        long k;
        if (n == 0 || n >= sizeof w) return cli_usage_error(CMD, "--at '%s': wants steps K[,K...] (1 or more each)", val);
        memcpy(w, p, n);
        w[n] = 0;
        if (!cli_parse_long(w, 1, LONG_MAX / 2, &k))
            return cli_usage_error(CMD, "--at '%s': wants steps K[,K...] (1 or more each)", val);
        if (o->nat == MAX_STOPS) return cli_usage_error(CMD, "--at: more than %d stop points", MAX_STOPS);
        for (int i = 0; i < o->nat; i++)
            if (o->at[i] == k) return cli_usage_error(CMD, "--at: step %ld given twice", k);
        o->at[o->nat++] = k;
        if (!e) break;
        p = e + 1;
    }
    return 0;
}

/* The options of this form, beside the shared -q, -h and --json
 * (cli_getopt). '+': options come first, up to '--' or the first word that
 * is none, which is refused (the command comes after '--'). */
enum { OPT_AT = 256, OPT_TRACE, OPT_LAUNCHER, OPT_RESUME_LAUNCHER, OPT_TIMEOUT, OPT_WORKDIR, OPT_KEEP, OPT_KILL,
       OPT_ALLOW_PARTIAL };
static const struct option user_options[] = {{"at", required_argument, NULL, OPT_AT},
                                             {"trace", required_argument, NULL, OPT_TRACE},
                                             {"launcher", required_argument, NULL, OPT_LAUNCHER},
                                             {"resume-launcher", required_argument, NULL, OPT_RESUME_LAUNCHER},
                                             {"timeout", required_argument, NULL, OPT_TIMEOUT},
                                             {"workdir", required_argument, NULL, OPT_WORKDIR},
                                             {"keep", no_argument, NULL, OPT_KEEP},
                                             {"kill", no_argument, NULL, OPT_KILL},
                                             {"allow-partial", no_argument, NULL, OPT_ALLOW_PARTIAL},
                                             CLI_REPORT_LONGOPTS,
                                             {NULL, 0, NULL, 0}};

/* The word a refused option was written as: a train option's (the
 * built-in trainer form's), one of that form's own, an unknown option, or
 * a word before '--' that is none. Returns 2 after the message. */
static int refuse(const char *a) {
    const char *t = train_option(a);
    if (t)
        return cli_usage_error(CMD, "--%s is a `detcheck train` option, for the built-in trainer form; with "
                                    "'-- CMD' your command trains as it is (its own options go after '--')",
                               t);
    for (size_t j = 0; j < sizeof trainer_only / sizeof trainer_only[0]; j++)
        if (!strncmp(a, trainer_only[j].name, strlen(trainer_only[j].name)))
            return cli_usage_error(CMD, "%s: not with '-- CMD': %s", trainer_only[j].name, trainer_only[j].why);
    if (a[0] == '-') return cli_usage_error(CMD, "unknown option '%s'", a);
    return cli_usage_error(CMD, "'%s': the command comes after '--' (detcheck resume-check [OPTIONS] -- CMD "
                                "ARGS...)", a);
}

/* The word getopt refused: the last it took, or the group of short
 * options it is still inside (-xq: x refused, q not read yet). */
static const char *refused_word(int argc, char **argv) {
    const char *next = optind < argc ? argv[optind] : NULL;
    if (optopt > 0 && optopt < 256 && next && next[0] == '-' && next[1] != '-' && strchr(next + 1, optopt))
        return next;
    return argv[optind - 1];
}

static bool report_code(int c) { return c == CLI_OPT_JUNIT || c == CLI_OPT_MARKDOWN || c == CLI_OPT_HTML; }

static const char *option_name(int c) {
    for (size_t i = 0; user_options[i].name; i++)
        if (user_options[i].val == c) return user_options[i].name;
    return "?";
}

/* Every option is checked here, before any run. *help: -h or --help
 * (printed). */
static int parse_args(int argc, char **argv, uopts *o, bool *help) {
    cli_shared sh = {.cmd = CMD, .help_text = user_help};
    int c, value_at = 0; /* the last option value given as a word of its own */
    optind = 0;          /* glibc starts afresh (and reads the '+') */
    opterr = 0;
    while ((c = cli_getopt(argc, argv, "+:", user_options, &sh)) != -1) {
        if (c == CLI_STOP) {
            *help = sh.help;
            return sh.help ? 0 : sh.exit;
        }
        if (c == '?') return refuse(refused_word(argc, argv));
        if (c == ':') {
            const char *a = argv[optind - 1];
            if (train_option(a)) return refuse(a);
            if (report_code(optopt)) return cli_usage_error(CMD, "%s needs a file name ('-': standard output)", a);
            return cli_usage_error(CMD, "%s needs a value", a);
        }
        /* the option as written ("--at", "--at=3"): a train option's name
         * is never read as an abbreviation of one of ours (--resume) */
        const char *val = optarg, *a = argv[optind - 1];
        if (val && val == argv[optind - 1]) a = argv[optind - 2], value_at = optind - 1;
        if (train_option(a)) return refuse(a);
        if (val && val == argv[optind - 1] && !strcmp(val, "--") && !report_code(c))
            return cli_usage_error(CMD, "%s needs a value", a);
        switch (c) {
        case OPT_AT:
            if ((c = parse_at(o, val))) return c;
            break;
        case OPT_TRACE:
            if (strcmp(val, "modules") && strcmp(val, "ops") && strcmp(val, "none"))
                return cli_usage_error(CMD, "--trace '%s': none, modules or ops", val);
            o->trace = val;
            break;
        case OPT_LAUNCHER:
        case OPT_RESUME_LAUNCHER:
            if (!val[strspn(val, " \t")]) return cli_usage_error(CMD, "--%s: empty", option_name(c));
            if (c == OPT_LAUNCHER) o->launcher = val;
            else o->resume_launcher = val;
            break;
        case OPT_TIMEOUT:
            if (!cli_parse_double(val, &o->timeout) || !(o->timeout > 0) || o->timeout > 86400.0 * 30)
                return cli_usage_error(CMD, "--timeout '%s': not a number of seconds", val);
            break;
        case OPT_WORKDIR:
            if (!*val) return cli_usage_error(CMD, "--workdir: empty");
            o->workdir = val;
            break;
        case OPT_KEEP: o->keep = true; break;
        case OPT_KILL: o->kill = true; break;
        case OPT_ALLOW_PARTIAL: o->allow_partial = true; break;
        default: /* --junit, --markdown, --html */
            if (!*val) return cli_usage_error(CMD, "--%s needs a file name ('-': standard output)", option_name(c));
            cli_report_option(&o->rep, c, val);
            break;
        }
    }
    /* getopt stopped after '--' (not an option's value), or at a word
     * that is no option */
    if (optind < 2 || optind - 1 == value_at || strcmp(argv[optind - 1], "--"))
        return optind < argc ? refuse(argv[optind])
                             : cli_usage_error(CMD, "no '--': detcheck resume-check [OPTIONS] -- CMD ARGS...");
    o->cmd = argv + optind;
    o->ncmd = argc - optind;
    o->json = sh.json;
    if (o->ncmd == 0) return cli_usage_error(CMD, "no command after '--'");
    if (cli_report_check(&o->rep, o->json, NULL, 0)) return DCK_EXIT_TROUBLE;
    return 0;
}

/* ------------------------------------------------------------------ runs */

/* One run of the user's command as a child: its folder, outputs and exit
 * status (a run, in the library's word, is the recorded folder it leaves:
 * dck_run), and what the command read of it. */
typedef struct {
    char label[64];                                  /* "the uninterrupted run", "the stop run at 5" */
    char dir[PATH_MAX], ckpt[PATH_MAX], out[PATH_MAX], err[PATH_MAX];
    dev_t dev;                                       /* the folder as created (re-checked after each run) */
    ino_t ino;
    int status;
    double seconds;
    dck_traj_rec *traj;
    size_t ntraj;
    bool has_rec;
    dck_recording rec;
} child_run;

static void run_release(child_run *r) {
    free(r->traj);
    r->traj = NULL;
    r->ntraj = 0;
    if (r->has_rec) dck_recording_release(&r->rec);
    r->has_rec = false;
}

static long first_step(const child_run *r) { return r->ntraj ? r->traj[0].step : -1; }
static long last_step(const child_run *r) { return r->ntraj ? r->traj[r->ntraj - 1].step : -1; }
/* The last step of its trajectory or its tensor digests. */
static long last_recorded(const child_run *r) {
    long t = last_step(r), d = r->has_rec && r->rec.nsteps ? r->rec.steps[r->rec.nsteps - 1].step : -1;
    return t > d ? t : d;
}

/* The outcome of the whole command; trouble stops it. */
typedef struct {
    int rc;              /* 0, 1, 2 */
    char *error;         /* the trouble, malloc'd (NULL: none, or out of memory) */
    const char *err;     /* stderr of the run that failed, or NULL */
} verdict;

/* Sets and prints the trouble. cmdline: a command line to rerun, added
 * after ": " whole and as it is (cli_shell_join's words are printable and
 * read back by sh -c; cli_safe would cut and escape them). */
static void vtrouble(verdict *v, const char *err, const char *cmdline, const char *fmt, va_list ap) {
    char *text = NULL;
    if (vasprintf(&text, fmt, ap) < 0) text = NULL;
    free(v->error);
    v->error = NULL;
    if (text && cmdline && asprintf(&v->error, "%s: %s", text, cmdline) < 0) v->error = NULL;
    if (cmdline) {
        /* not through cli_error, whose quoting would turn the newlines
         * inside the shell quotes into \x0a, which sh reads as text */
        cli_progress_clear();
        fprintf(stderr, "detcheck %s: error: %s: %s\n", CMD, text ? cli_safe_line(text) : "trouble", cmdline);
    } else {
        cli_error(CMD, "%s", text ? cli_safe_line(text) : "out of memory");
    }
    if (!cmdline) v->error = text, text = NULL;
    free(text);
    v->rc = DCK_EXIT_TROUBLE;
    v->err = err;
}

static void trouble(verdict *v, const char *err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void trouble(verdict *v, const char *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vtrouble(v, err, NULL, fmt, ap);
    va_end(ap);
}

static void trouble_rerun(verdict *v, const char *err, const char *cmdline, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void trouble_rerun(verdict *v, const char *err, const char *cmdline, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vtrouble(v, err, cmdline, fmt, ap);
    va_end(ap);
}

static const char *error_text(const verdict *v) { return v->error ? v->error : "trouble (out of memory)"; }

/* Splits a launcher on blanks (no quoting: a launcher is a plain command
 * line such as "torchrun --nproc_per_node 2"), as the trainer form does,
 * then the command: a NULL-terminated argv, malloc'd (the words too). */
static char **command_of(const char *launcher, char **cmd, int ncmd) {
    size_t n = 0, cap = (size_t)ncmd + 1 + (launcher ? strlen(launcher) / 2 + 1 : 0);
    char **v = calloc(cap, sizeof *v);
    if (!v) return NULL;
    if (launcher) {
        char *copy = strdup(launcher), *save = NULL;
        if (!copy) {
            free(v);
            return NULL;
        }
        for (char *w = strtok_r(copy, " \t", &save); w; w = strtok_r(NULL, " \t", &save))
            if (!(v[n++] = strdup(w))) break;
        free(copy);
    }
    for (int i = 0; i < ncmd; i++) v[n++] = strdup(cmd[i]);
    for (size_t i = 0; i < n; i++)
        if (!v[i]) {
            for (size_t j = 0; j < n; j++) free(v[j]);
            free(v);
            return NULL;
        }
    return v;
}

static void free_argv(char **v) {
    for (size_t i = 0; v && v[i]; i++) free(v[i]);
    free(v);
}

static bool absent(const char *path) {
    struct stat st;
    return lstat(path, &st) != 0 && errno == ENOENT;
}

/* The files a run records: each run's own, re-checked after every run. */
static const char *const recorded_files[] = {DCK_TRAJECTORY, DCK_RECORD_FILE, DCK_TRACE_FILE, "stop.json"};

/* After a run of the user's command (which may have touched anything in
 * the work folder): every run folder so far is still the folder detcheck
 * created, and what they recorded is their own (not a link, not another
 * run's file): a folder or file swapped for another run's would have a
 * run compared with itself. runs[n - 1] is the run that just ended. */
static void check_runs(const child_run *const *runs, int n, verdict *v) {
    for (int i = 0; i < n && !v->rc; i++)
        if (cli_dir_unchanged(runs[i]->dir, runs[i]->dev, runs[i]->ino))
            trouble(v, NULL, "%s's folder %s (replaced during %s): its recording would not be its own; nothing is "
                             "compared",
                    runs[i]->label, dck_last_error(), runs[n - 1]->label);
    for (size_t k = 0; k < sizeof recorded_files / sizeof recorded_files[0] && !v->rc; k++) {
        char *paths[3] = {NULL, NULL, NULL};
        bool oom = false;
        for (int i = 0; i < n; i++) oom |= !(paths[i] = dck_path_join(runs[i]->dir, recorded_files[k]));
        if (oom) trouble(v, NULL, "out of memory");
        else if (cli_run_files_own((const char *const *)paths, (size_t)n))
            trouble(v, NULL, "%s (after %s): a run's recording must be its own; nothing is compared", dck_last_error(),
                    runs[n - 1]->label);
        for (int i = 0; i < n; i++) free(paths[i]);
    }
}

/* Runs one run and reads what it recorded. Returns 0; on trouble sets v.
 * expect_kill: the run must end by SIGKILL (--kill's stop run); earlier:
 * the runs before it (at most 2), re-checked with it. */
static void run_one(const uopts *o, child_run *r, const char *launcher, const char *const *env, bool expect_kill,
                    const child_run *const *earlier, int nearlier, verdict *v) {
    struct stat dst;
    if (mkdir(r->dir, 0777) != 0 || lstat(r->dir, &dst) != 0) {
        trouble(v, NULL, "%s: cannot create: %s", r->dir, strerror(errno));
        return;
    }
    r->dev = dst.st_dev;
    r->ino = dst.st_ino;
    if (mkdir(r->ckpt, 0777) != 0 && errno != EEXIST) {
        trouble(v, NULL, "%s: cannot create: %s", r->ckpt, strerror(errno));
        return;
    }
    char **argv = command_of(launcher, o->cmd, o->ncmd);
    if (!argv) {
        trouble(v, NULL, "out of memory");
        return;
    }
    int n = 0;
    while (argv[n]) n++;
    char *line = cli_shell_join(argv, n);
    r->status = cli_run_child(argv, env, r->out, r->err, o->timeout, &r->seconds);
    free_argv(argv);
    bool killed = r->status == 128 + SIGKILL;
    if (r->status != 0 && !(expect_kill && killed)) {
        char what[PATH_MAX + 512];
        cli_run_describe(r->status, o->timeout, what, sizeof what);
        /* a log that could not be created is a file someone planted at
         * its name: not ours, never read back (nor its tail reported) */
        bool ours = r->status != CLI_RUN_NO_LOG;
        if (!ours) r->err[0] = 0;
        trouble_rerun(v, ours ? r->err : NULL, line ? line : "(out of memory)", "%s %s", r->label, what);
        free(line);
        if (ours && r->status != -3) cli_print_tail(CMD, r->err, TAIL_LINES);
        return;
    }
    free(line);
    const child_run *runs[3];
    for (int i = 0; i < nearlier && i < 2; i++) runs[i] = earlier[i];
    runs[nearlier < 2 ? nearlier : 2] = r;
    check_runs(runs, (nearlier < 2 ? nearlier : 2) + 1, v);
    if (v->rc) return;
    char *traj = dck_path_join(r->dir, DCK_TRAJECTORY), *side = dck_path_join(r->dir, DCK_RECORD_FILE);
    if (!traj || !side) {
        free(traj);
        free(side);
        trouble(v, NULL, "out of memory");
        return;
    }
    if (absent(traj)) {
        trouble(v, r->err, "%s recorded nothing: %s is absent, so the command did not honour DETCHECK_RECORD", r->label,
                traj);
        cli_error(CMD, "hint: record with detcheck.autorecord(model, optimizer), detcheck.Recorder.from_env() or the "
                       "HF / Lightning callbacks, and follow detcheck.session() (man detcheck-resume-check)");
    } else {
        dck_status s = dck_traj_load(traj, &r->traj, &r->ntraj);
        if (s) trouble(v, NULL, "%s", dck_last_error());
        else if (!r->ntraj) trouble(v, r->err, "%s recorded nothing: %s has no records", r->label, traj);
        else if (!absent(side)) {
            if ((s = dck_recording_load(side, &r->rec))) trouble(v, NULL, "%s", dck_last_error());
            else r->has_rec = true;
        }
    }
    free(traj);
    free(side);
    if (!v->rc) cli_info(CMD, "%s: steps %ld..%ld in %.1f s", r->label, first_step(r), last_step(r), r->seconds);
}

/* stop.json of a stop run: {"detcheck_stop": 1, "step": K, ...}, written
 * by detcheck.session().stopped(K). A clean stop needs none (the process
 * exits 0 with its recording ending at K); --kill does: the process dies
 * by SIGKILL, and stop.json is what says its checkpoint of K was complete.
 * When present it must say K. False when absent (nothing set in v). */
static bool check_stop_json(const child_run *r, long K, bool kill, verdict *v) {
    char *p = dck_path_join(r->dir, "stop.json");
    if (!p) {
        trouble(v, NULL, "out of memory");
        return false;
    }
    if (absent(p)) {
        if (kill)
            trouble(v, r->err,
                    "%s wrote no stop.json (%s): with --kill the script must call detcheck.session().stopped(%ld) once "
                    "the checkpoint of step %ld is complete: it writes stop.json, then SIGKILLs the process "
                    "(DETCHECK_STOP_KILL=1)",
                    r->label, p, K, K);
        free(p);
        return false;
    }
    int fd;
    struct stat st;
    dck_status s = dck_open_regular(p, &fd, &st);
    if (s) {
        trouble(v, NULL, "%s", dck_last_error());
        free(p);
        return true;
    }
    if (st.st_size > MAX_STOP_JSON) {
        close(fd);
        trouble(v, r->err, "%s: %lld bytes, too large for a stop record (at most %d bytes: {\"detcheck_stop\": 1, "
                           "\"step\": K, ...})",
                p, (long long)st.st_size, MAX_STOP_JSON);
        free(p);
        return true;
    }
    char *b = malloc((size_t)st.st_size + 1);
    ssize_t got = b ? pread(fd, b, (size_t)st.st_size, 0) : -1;
    close(fd);
    json_t *doc = got >= 0 ? json_loadb(b, (size_t)got, 0, NULL) : NULL;
    json_t *mark = json_object_get(doc, "detcheck_stop"), *step = json_object_get(doc, "step");
    if (!b)
        trouble(v, NULL, "out of memory reading %s", p);
    else if (got < 0)
        trouble(v, NULL, "%s: cannot read: %s", p, strerror(errno));
    else if (!json_is_integer(mark) || json_integer_value(mark) != 1 || !json_is_integer(step))
        trouble(v, NULL, "%s: not a stop record ({\"detcheck_stop\": 1, \"step\": K, \"checkpoint\": ..., \"pid\": ...})",
                p);
    else if (json_integer_value(step) != K)
        trouble(v, r->err, "%s says step %lld, not %ld (DETCHECK_STOP_AT=%ld not honoured)", p,
                (long long)json_integer_value(step), K, K);
    json_decref(doc);
    free(b);
    free(p);
    return true;
}

/* What a run recorded, as the resume diagnosis reads it. */
static dck_resume_view view_of(const child_run *r) {
    return (dck_resume_view){r->traj, r->ntraj, r->has_rec ? &r->rec : NULL};
}

/* ------------------------------------------------------------------ the verdict of one stop point */

/* The first step where b parts from a (dck_resume_first_parting). Non-zero
 * (v set) when out of memory. */
static int first_parting(const child_run *a, const child_run *b, dck_resume_parting *p, verdict *v) {
    dck_resume_view x = view_of(a), y = view_of(b);
    dck_status s = dck_resume_first_parting(&x, &y, p);
    if (s) {
        cli_fail(CMD, s);
        trouble(v, NULL, "out of memory comparing the recorded tensors");
        return -1;
    }
    return 0;
}

/* The first of lo..hi that one run recorded and the other did not
 * (dck_resume_first_gap). Non-zero (v set) when out of memory. */
static int first_gap(const child_run *a, const child_run *b, long lo, long hi, dck_resume_gap *g, verdict *v) {
    dck_resume_view x = view_of(a), y = view_of(b);
    dck_status s = dck_resume_first_gap(&x, &y, lo, hi, g);
    if (s) {
        cli_fail(CMD, s);
        trouble(v, NULL, "out of memory comparing the recorded state");
        return -1;
    }
    return 0;
}

/* The cause at the first differing step D of resumed run res against the
 * uninterrupted run full, stop point K (dck_resume_diagnose), and its
 * line. */
static dck_status diagnose(const child_run *full, const child_run *res, long K, const dck_resume_parting *p,
                           cli_resume_stop *s) {
    dck_resume_view f = view_of(full), r = view_of(res);
    dck_resume_diagnosis d;
    DCK_TRY(dck_resume_diagnose(&f, &r, K, p, &d));
    return cli_resume_cause_line(s, K, p, &d) ? dck_oom("naming the cause") : DCK_OK;
}

/* The stop run parts from the uninterrupted run at D <= K: nothing was
 * resumed yet, two runs of the same command gave two results; the line
 * (cli_resume_before_line) says what was equal at D
 * (dck_resume_tally_parting) and how to see it. Non-zero when out of
 * memory. */
static int before_stop_line(const uopts *o, const child_run *full, const child_run *stop, const dck_resume_parting *p,
                            cli_resume_stop *s) {
    dck_resume_view f = view_of(full), b = view_of(stop);
    dck_resume_tally t;
    if (dck_resume_tally_parting(&f, &b, p, &t)) return -1;
    char **argv = command_of(o->launcher, o->cmd, o->ncmd);
    int n = 0;
    while (argv && argv[n]) n++;
    char *cmdline = argv ? cli_shell_join(argv, n) : NULL;
    free_argv(argv);
    int rc = cmdline ? cli_resume_before_line(s, p, &t, cmdline) : -1;
    free(cmdline);
    return rc;
}

/* ------------------------------------------------------------------ work dir */

/* The names of the runs' entries in the work dir: one left by an earlier
 * check would be read as this one's. */
static bool run_entry(const char *n) {
    static const char *const exact[] = {"full", "full.ckpt", "full.out", "full.err"};
    static const char *const prefix[] = {"stop_", "resume_", "ckpt_"};
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
        if (!strcmp(n, exact[i])) return true;
    for (size_t i = 0; i < sizeof prefix / sizeof prefix[0]; i++)
        if (!strncmp(n, prefix[i], strlen(prefix[i]))) return true;
    return false;
}

/* The mark of a work folder of ours: resume-check writes it into the
 * --workdir it takes, and removes the run entries an earlier check left
 * only in a folder that holds it (read without following a link), so a
 * user's own file of such a name (full.out, stop_3...) is never deleted. */
#define WORK_MARK ".detcheck-resume-check"
static const char work_magic[] = "detcheck resume-check work folder, version 1\n";

static bool work_marked(const char *work) {
    char p[PATH_MAX], buf[sizeof work_magic];
    snprintf(p, sizeof p, "%s/%s", work, WORK_MARK);
    int fd = open(p, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return false;
    struct stat st;
    ssize_t got = -1;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == (off_t)sizeof work_magic - 1)
        got = read(fd, buf, sizeof buf);
    close(fd);
    return got == (ssize_t)sizeof work_magic - 1 && !memcmp(buf, work_magic, sizeof work_magic - 1);
}

/* --workdir: created when absent, and marked as ours. An earlier check's
 * empty run folders and its files go, only in a marked folder; anything
 * else of a run's name is refused, naming it. */
static int prepare_workdir(const char *work) {
    struct stat st;
    if (mkdir(work, 0777) != 0 && (errno != EEXIST || stat(work, &st) != 0 || !S_ISDIR(st.st_mode))) {
        cli_error(CMD, "--workdir %s: cannot create it: %s", work, errno == EEXIST ? "not a directory" : strerror(errno));
        return DCK_EXIT_TROUBLE;
    }
    bool ours = work_marked(work);
    DIR *d = opendir(work);
    if (!d) {
        cli_error(CMD, "--workdir %s: cannot read it: %s", work, strerror(errno));
        return DCK_EXIT_TROUBLE;
    }
    int rc = 0;
    for (struct dirent *e; !rc && (e = readdir(d));) {
        if (!run_entry(e->d_name)) continue;
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", work, e->d_name);
        rc = DCK_EXIT_TROUBLE;
        if (!ours)
            cli_error(CMD, "%s exists and detcheck did not create it (%s holds no %s of an earlier check): "
                           "resume-check never deletes or writes over it; remove it or choose another --workdir",
                      p, work, WORK_MARK);
        else if (lstat(p, &st) != 0 || !(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)))
            cli_error(CMD, "%s exists and is neither a file nor a folder of an earlier check: remove it or choose "
                           "another --workdir", p);
        else if ((S_ISDIR(st.st_mode) ? rmdir(p) : unlink(p)) != 0)
            cli_error(CMD, "%s exists and is not empty (an earlier check?): remove it or choose another --workdir", p);
        else
            rc = 0;
    }
    closedir(d);
    if (!rc && !ours) {
        char p[PATH_MAX];
        int fd;
        snprintf(p, sizeof p, "%s/%s", work, WORK_MARK);
        dck_status s = cli_create_new(p, &fd);
        if (!s && write(fd, work_magic, sizeof work_magic - 1) != (ssize_t)sizeof work_magic - 1)
            s = dck_set_error(DCK_ERR_IO, "%s: cannot write: %s", p, strerror(errno));
        if (fd >= 0) close(fd);
        if (s) rc = cli_fail(CMD, s);
    }
    return rc;
}

/* ------------------------------------------------------------------ main */

static void run_paths(child_run *r, const char *work, const char *name, const char *ckpt, const char *label) {
    memset(r, 0, sizeof *r);
    snprintf(r->label, sizeof r->label, "%s", label);
    snprintf(r->dir, sizeof r->dir, "%s/%s", work, name);
    snprintf(r->ckpt, sizeof r->ckpt, "%s/%s", work, ckpt);
    snprintf(r->out, sizeof r->out, "%s/%s.out", work, name);
    snprintf(r->err, sizeof r->err, "%s/%s.err", work, name);
}

/* One stop point: the stop run, its checks, the resume run, the verdict. */
/* With --trace: the uninterrupted run's and the resumed run's traces over
 * the steps both traced (the resumed ones), as bisect compares them: the
 * first differing module or op, into s->trace and s->event (after p, where
 * the recordings part, context and never the culprit); the first step of
 * lo..hi traced in one run only into g. Non-zero on trouble. */
static int compare_traces(const child_run *full, const child_run *res, long lo, long hi, const dck_resume_parting *p,
                          cli_resume_stop *s, long *step, dck_resume_gap *g, verdict *v) {
    cli_trace_first *tf = calloc(1, sizeof *tf);
    *step = -1;
    if (!tf) {
        cli_fail(CMD, dck_oom(NULL));
        trouble(v, NULL, "out of memory comparing the traces");
        return -1;
    }
    const char *runs[2] = {full->dir, res->dir};
    int rc = cli_trace_compare(CMD, runs, tf);
    if (!rc && cli_trace_judge(CMD, tf, p->step, p->rstep == p->step ? p->kind : -1, p->name)) {
        trouble(v, NULL, "out of memory comparing the traces");
        rc = -1;
    }
    /* --trace asked for the traces of every resumed step: a run without
     * one, or a step one run traced and the other not, is compared
     * nowhere; so are the events past the recorder's bound in a step
     * both truncated alike (said in the verdict) */
    dck_resume_cut alike = {0, -1, -1};
    if (!rc && !tf->has[0] && !tf->has[1]) {
        trouble(v, res->err, "--trace: neither %s nor %s wrote %s, so no trace was compared (record with "
                             "detcheck.autorecord or detcheck.Recorder.from_env, which read DETCHECK_TRACE)",
                full->dir, res->dir, DCK_TRACE_FILE);
        rc = -1;
    } else if (!rc) {
        dck_resume_trace_gaps(tf->has[0] ? &tf->t[0] : NULL, tf->has[1] ? &tf->t[1] : NULL, lo, hi, g, &alike);
    }
    if (alike.steps &&
        asprintf(&s->not_compared,
                 "events past the recorder's bound in %zu traced step%s (%ld..%ld), which both runs truncated alike",
                 alike.steps, alike.steps == 1 ? "" : "s", alike.first, alike.last) < 0) {
        s->not_compared = NULL;
        cli_fail(CMD, dck_oom(NULL));
        trouble(v, NULL, "out of memory comparing the traces");
        rc = -1;
    }
    if (rc) {
        if (!v->rc) trouble(v, NULL, "the traces of %s and %s could not be compared", full->dir, res->dir);
    } else if (tf->found) {
        bool oom = false;
        snprintf(s->trace, sizeof s->trace, "%s", tf->line);
        s->event = cli_trace_json(tf, &oom);
        *step = tf->d.step;
        if (oom) {
            cli_fail(CMD, dck_oom(NULL));
            trouble(v, NULL, "out of memory comparing the traces");
            rc = -1;
        }
    }
    cli_trace_release(tf);
    free(tf);
    return rc;
}

static void check_stop(const uopts *o, const char *work, child_run *full, cli_resume_stop *s, verdict *v) {
    long K = s->at;
    char name[64], ck[64], label[64], at[32];
    child_run stop, res;
    memset(&res, 0, sizeof res);
    snprintf(name, sizeof name, "stop_%ld", K);
    snprintf(ck, sizeof ck, "ckpt_%ld", K);
    snprintf(label, sizeof label, "the stop run at %ld", K);
    run_paths(&stop, work, name, ck, label);
    snprintf(at, sizeof at, "%ld", K);
    const char *trace = o->trace ? o->trace : "none";
    /* each run sees the variables of its part of the contract, and not
     * those of the others even when the caller's environment has them */
    const char *env_stop[] = {"DETCHECK_RECORD", stop.dir,  "DETCHECK_CHECKPOINT_DIR", stop.ckpt,
                              "DETCHECK_STOP_AT", at,       "DETCHECK_TRACE",          trace,
                              "DETCHECK_RESUME", NULL,      "DETCHECK_STOP_KILL",      o->kill ? "1" : NULL,
                              NULL};
    cli_info(CMD, "stop run at %ld (%s)", K, cli_resume_mode(s));
    const child_run *before_stop[1] = {full}, *before_res[2] = {full, &stop};
    run_one(o, &stop, o->launcher, env_stop, o->kill, before_stop, 1, v);
    if (v->rc) goto out;
    /* the contract: stopped at K (recorded no step past it), said so in
     * stop.json, and with --kill died by SIGKILL after it */
    if (last_step(&stop) > K) {
        trouble(v, stop.err, "%s did not stop at step %ld: it recorded steps %ld..%ld (DETCHECK_STOP_AT not honoured)",
                stop.label, K, first_step(&stop), last_step(&stop));
        cli_error(CMD, "hint: when detcheck.session().should_stop(step) says so, save step K's checkpoint and exit 0 "
                       "(or call .stopped(step, path), which --kill needs); the Hugging Face and Lightning callbacks "
                       "do both (man detcheck-resume-check, USER COMMANDS)");
        goto out;
    }
    bool said = check_stop_json(&stop, K, o->kill, v);
    if (v->rc) goto out;
    if (last_step(&stop) < K) {
        if (said)
            trouble(v, stop.err, "%s recorded steps %ld..%ld, but its stop.json says step %ld", stop.label,
                    first_step(&stop), last_step(&stop), K);
        else
            trouble(v, stop.err,
                    "%s exited with status 0 after recording steps %ld..%ld: a clean stop ends its recording at step "
                    "%ld (DETCHECK_STOP_AT=%ld not honoured)",
                    stop.label, first_step(&stop), last_step(&stop), K, K);
        goto out;
    }
    if (o->kill && stop.status == 0) {
        trouble(v, stop.err,
                "%s exited with status 0: with --kill it must SIGKILL itself right after writing stop.json "
                "(DETCHECK_STOP_KILL=1 not honoured)",
                stop.label);
        goto out;
    }
    /* the stop run must be the uninterrupted run up to K, step by step */
    dck_resume_parting p;
    if (first_parting(full, &stop, &p, v)) goto out;
    long lo = first_step(&stop) < first_step(full) ? first_step(&stop) : first_step(full);
    dck_resume_gap g;
    if (first_gap(full, &stop, lo, K, &g, v)) goto out;
    if (g.step >= 0 && (p.step < 0 || g.step <= p.step)) {
        s->done = true;
        s->result = DCK_EXIT_DIFFERENT;
        s->cause = "before_stop";
        s->first_step = g.step;
        char span[96];
        snprintf(span, sizeof span, "every step %ld..%ld before the stop", lo, K);
        cli_resume_gap_line(s, &g, false, span);
        goto out;
    }
    if (p.step >= 0 && p.step <= K) {
        s->done = true;
        s->result = DCK_EXIT_DIFFERENT;
        s->cause = "before_stop";
        s->first_step = p.step;
        s->parted = true;
        if (before_stop_line(o, full, &stop, &p, s)) {
            cli_fail(CMD, dck_oom(NULL));
            trouble(v, NULL, "out of memory comparing the runs before the stop");
        }
        goto out;
    }

    snprintf(name, sizeof name, "resume_%ld", K);
    snprintf(label, sizeof label, "the resume run from %ld", K);
    run_paths(&res, work, name, ck, label);
    const char *env_res[] = {"DETCHECK_RECORD", res.dir, "DETCHECK_CHECKPOINT_DIR", res.ckpt,
                             "DETCHECK_RESUME", "1",     "DETCHECK_TRACE",          trace,
                             "DETCHECK_STOP_AT", NULL,   "DETCHECK_STOP_KILL",      NULL,
                             NULL};
    cli_info(CMD, "resume run from %ld", K);
    run_one(o, &res, o->resume_launcher ? o->resume_launcher : o->launcher, env_res, false, before_res, 2, v);
    if (v->rc) goto out;
    s->done = true;
    long F = first_step(&res), L = last_step(&res), S = last_step(full);
    if (F != K + 1) {
        s->result = DCK_EXIT_DIFFERENT;
        s->cause = "steps";
        s->first_step = K + 1;
        s->index = 1;
        if (F <= first_step(full))
            cli_resume_stop_line(s, "the resumed run recorded steps %ld..%ld: it started over at step %ld (no checkpoint loaded?)",
                      F, L, F);
        else
            cli_resume_stop_line(s, "the resumed run recorded steps %ld..%ld: it started at step %ld, not at step %ld (the step "
                         "after the stop)",
                      F, L, F, K + 1);
        goto out;
    }
    if (first_parting(full, &res, &p, v)) goto out;
    /* the weights the resumed process started from: recorded once
     * (start.*), compared here even when every later step agrees */
    if (p.step < 0 || p.step > K + 1) {
        const char *w;
        dck_resume_view fv = view_of(full), rv = view_of(&res);
        if (dck_resume_start_differing(&fv, &rv, K, &w)) {
            cli_fail(CMD, dck_oom(NULL));
            trouble(v, NULL, "out of memory comparing the starting weights");
            goto out;
        }
        if (w) p.step = K + 1;
    }
    /* every step K+1.. recorded by both, and compared: the first step one
     * lacks is the verdict unless a difference comes before it */
    long hi = last_recorded(full) > last_recorded(&res) ? last_recorded(full) : last_recorded(&res);
    if (first_gap(full, &res, K + 1, hi, &g, v)) goto out;
    long tstep = -1;
    if (strcmp(trace, "none") && compare_traces(full, &res, K + 1, hi, &p, s, &tstep, &g, v)) goto out;
    long other = p.step >= 0 ? p.step : tstep;
    if (g.step >= 0 && (other < 0 || g.step <= other)) {
        s->result = DCK_EXIT_DIFFERENT;
        s->cause = "steps";
        s->first_step = g.step;
        s->index = g.step - K;
        if (g.ended && !strcmp(g.file, DCK_TRAJECTORY))
            cli_resume_stop_line(s, "the resumed run recorded steps %ld..%ld, the uninterrupted run steps %ld..%ld", F, L,
                      first_step(full), S);
        else {
            char span[96];
            snprintf(span, sizeof span, "every resumed step %ld..%ld", K + 1, hi);
            cli_resume_gap_line(s, &g, true, span);
        }
        goto out;
    }
    if (p.step < 0 && tstep >= 0) {
        /* every recorded tensor agrees, an intermediate does not */
        s->result = DCK_EXIT_DIFFERENT;
        s->cause = "trace";
        s->first_step = tstep;
        s->index = tstep - K;
        cli_resume_trace_line(s, tstep);
        goto out;
    }
    if (p.step < 0) {
        /* what both runs left out alike was compared nowhere: no OK
         * without --allow-partial */
        bool incomplete = s->not_compared && !o->allow_partial;
        s->result = incomplete ? DCK_EXIT_DIFFERENT : DCK_EXIT_SAME;
        if (incomplete) s->cause = "not_compared";
        cli_resume_stop_line(s, "%s %ld..%ld identical to the uninterrupted run%s%s%s",
                  incomplete ? "incomplete: resumed steps" : "resumed steps", K + 1, S,
                  s->not_compared ? "; not compared: " : "", s->not_compared ? s->not_compared : "",
                  incomplete ? " (--allow-partial accepts them)" : "");
        goto out;
    }
    s->result = DCK_EXIT_DIFFERENT;
    s->first_step = p.step;
    s->index = p.step - K;
    if (diagnose(full, &res, K, &p, s)) {
        cli_fail(CMD, dck_oom("naming the cause"));
        trouble(v, NULL, "out of memory naming the cause");
    }
out:
    run_release(&stop);
    run_release(&res);
}

/* Causes that name no resume mistake (a tensor, the trajectory, a traced
 * intermediate): what would localise further is an op trace of the same
 * check, whose ops cover forward, backward and the optimizer step. With an
 * op trace already, the line that names the op is the localisation. */
static const char *const unexplained[] = {"tensor", "trajectory", "trace"};

/* s->next for a stop point that differs for an unexplained cause: the
 * whole resume-check command with --trace ops (shell words, whole); false
 * when out of memory. */
static bool next_line(const uopts *o, cli_resume_stop *s) {
    bool want = false;
    for (size_t i = 0; s->result == DCK_EXIT_DIFFERENT && s->cause && i < sizeof unexplained / sizeof *unexplained; i++)
        want |= !strcmp(s->cause, unexplained[i]);
    if (!want || (o->trace && !strcmp(o->trace, "ops"))) return true;
    char at[32];
    snprintf(at, sizeof at, "%ld", s->at);
    const char *words[16];
    int n = 0;
    words[n++] = "detcheck";
    words[n++] = "resume-check";
    words[n++] = "--trace";
    words[n++] = "ops";
    words[n++] = "--at";
    words[n++] = at;
    if (s->kill) words[n++] = "--kill";
    if (o->launcher) words[n++] = "--launcher", words[n++] = o->launcher;
    if (o->resume_launcher) words[n++] = "--resume-launcher", words[n++] = o->resume_launcher;
    words[n++] = "--";
    char *head = cli_shell_join((char **)words, n), *tail = cli_shell_join(o->cmd, o->ncmd);
    bool ok = head && tail &&
              asprintf(&s->next, "next: localise with an op trace (forward, backward and the optimizer step): %s %s",
                       head, tail) >= 0;
    if (!ok) s->next = NULL;
    free(head);
    free(tail);
    return ok;
}

int cmd_resume_user(int argc, char **argv) {
    uopts o;
    memset(&o, 0, sizeof o);
    cli_report_init(&o.rep, CMD);
    bool help = false, temp = false, oom = false;
    cli_resume_stop *stops = calloc(MAX_STOPS, sizeof *stops); /* ~9 KiB each: not on the stack */
    int nstops = 0;
    child_run full;
    memset(&full, 0, sizeof full);
    verdict v;
    memset(&v, 0, sizeof v);
    char work[PATH_MAX - 128] = "", *cmdline = NULL, *title = NULL;
    int rc = stops ? parse_args(argc, argv, &o, &help) : cli_fail(CMD, dck_oom(NULL));
    if (rc) goto done;
    if (help) goto done;
    if (getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK")) {
        rc = cli_usage_error(CMD, "run resume-check itself without a launcher; pass --launcher \"CMD ...\" instead");
        goto done;
    }
    if (!(cmdline = cli_shell_join(o.cmd, o.ncmd))) {
        rc = cli_fail(CMD, dck_oom(NULL));
        goto done;
    }
    if (o.workdir) {
        if (strlen(o.workdir) >= sizeof work - 64) {
            rc = cli_usage_error(CMD, "--workdir: path too long");
            goto done;
        }
        snprintf(work, sizeof work, "%s", o.workdir);
        if ((rc = prepare_workdir(work))) goto done;
    } else {
        if ((rc = cli_temp_workdir(CMD, work, sizeof work))) goto done;
        temp = true;
    }
    cli_absolute_dir(work, sizeof work);
    cli_run_catch_signals();

    /* ---- the uninterrupted run */
    run_paths(&full, work, "full", "full.ckpt", "the uninterrupted run");
    const char *trace = o.trace ? o.trace : "none";
    const char *env_full[] = {"DETCHECK_RECORD", full.dir, "DETCHECK_CHECKPOINT_DIR", full.ckpt,
                              "DETCHECK_TRACE",  trace,    "DETCHECK_STOP_AT",        NULL,
                              "DETCHECK_RESUME", NULL,     "DETCHECK_STOP_KILL",      NULL,
                              NULL};
    cli_info(CMD, "uninterrupted run: %s", cmdline); /* shell words: printable, whole */
    run_one(&o, &full, o.launcher, env_full, false, NULL, 0, &v);
    if (!v.rc && full.has_rec == false)
        cli_warn(CMD, "%s/%s absent: only the trajectories are compared", full.dir, DCK_RECORD_FILE);
    long S = v.rc ? -1 : last_step(&full), F0 = v.rc ? -1 : first_step(&full);
    if (!v.rc && !o.nat) {
        o.at[o.nat++] = S / 2 >= 1 ? S / 2 : 1;
    }
    for (int i = 0; !v.rc && i < o.nat; i++)
        if (o.at[i] >= S || o.at[i] < F0)
            trouble(&v, NULL, "stop point %ld: the uninterrupted run recorded steps %ld..%ld, so a stop point is a "
                              "step from %ld to %ld (a resumed run must have steps left)",
                    o.at[i], F0, S, F0, S - 1);

    /* ---- the stop points */
    for (int i = 0; !v.rc && i < o.nat && !cli_interrupted; i++) {
        cli_resume_stop *s = &stops[nstops++];
        memset(s, 0, sizeof *s);
        s->at = o.at[i];
        s->kill = o.kill;
        s->first_step = s->index = -1;
        check_stop(&o, work, &full, s, &v);
        if (!v.rc && !next_line(&o, s)) {
            cli_fail(CMD, dck_oom(NULL));
            trouble(&v, NULL, "out of memory");
        }
        if (v.rc) {
            s->result = DCK_EXIT_TROUBLE;
            cli_resume_stop_line(s, "trouble: %s", error_text(&v));
        } else if (!o.json) {
            printf("%s\n", cli_safe_line(cli_resume_line(s)));
            if (s->trace[0]) printf("%s\n", cli_safe_line(s->trace));
            if (s->next) printf("%s\n", s->next); /* shell words: printable, whole */
        }
    }
    if (!v.rc && cli_interrupted) trouble(&v, NULL, "interrupted");

    /* ---- the verdict */
    cli_resume_user_result res = {.stops = stops, .nstops = nstops, .cmd = o.cmd, .ncmd = o.ncmd,
                                  .cmdline = cmdline, .kill = o.kill, .steps = S, .error = v.error,
                                  .work = work, .full_dir = full.dir};
    rc = res.rc = cli_resume_user_summarize(&res, v.rc);
    if (res.intermittent && rc != DCK_EXIT_TROUBLE && !o.json) {
        char *line = cli_resume_user_intermittent(&res);
        if (!line) {
            rc = cli_fail(CMD, dck_oom(NULL));
            goto done;
        }
        printf("%s\n", line);
        free(line);
    }
    if (!(title = cli_resume_user_title(&res))) {
        rc = cli_fail(CMD, dck_oom(NULL));
        goto done;
    }
    if (rc != DCK_EXIT_TROUBLE && !o.json) printf("%s\n", title);
    bool keep = rc || !temp || o.keep;
    char *tail = v.err ? cli_file_tail(v.err, TAIL_LINES) : NULL;
    res.tail = tail;
    if (cli_report_wanted(&o.rep)) {
        res.keep = keep;
        cli_resume_user_report(&o.rep, &res, title);
        if (cli_report_finish(&o.rep, rc)) rc = DCK_EXIT_TROUBLE, keep = true;
    }
    if (o.json) {
        res.rc = rc;
        res.keep = keep;
        json_t *doc = cli_resume_user_json(&res, &oom);
        dck_status s = cli_json_print(doc, CLI_JSON_COMPACT, oom);
        if (s) rc = cli_fail(CMD, s), keep = true;
    }
    free(tail);
    if (keep) {
        if (rc == DCK_EXIT_DIFFERENT && !o.json) printf("runs kept in %s\n", work);
        else if (temp) cli_info(CMD, "runs kept in %s", work);
    } else {
        cli_remove_tree(work);
    }
    if (cli_interrupted) rc = DCK_EXIT_TROUBLE;
done:
    free(v.error);
    run_release(&full);
    for (int i = 0; stops && i < nstops; i++) cli_resume_stop_release(&stops[i]);
    free(title);
    free(stops);
    free(cmdline);
    cli_report_release(&o.rep);
    return rc;
}

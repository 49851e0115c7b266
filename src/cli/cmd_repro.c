/* detcheck repro: "is my training bitwise reproducible?" for a user's own
 * command. Runs it N times with recording switched on from the environment
 * (DETCHECK_RECORD=WORKDIR/run_I, DETCHECK_TRACE), optionally varying one
 * factor per run, compares every run with the first as bisect does
 * (dck_runs_compare) and by its recordings (runs/repro.c), and prints a
 * verdict with the determinism settings each run recorded in its run.json
 * (report/runs.c, report/repro.c). --tax times the command with the
 * deterministic settings on and off instead. See man/detcheck-repro.1. */
#include "cli.h"
#include "report/html.h"
#include "report/report.h"
#include "cli_runs.h"
#include "report/repro.h"
#include "train/train.h"
#include "runs/recording.h"
#include "runs/trace.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CMD "repro"
enum { MAX_RUNS = 1000, TAIL_LINES = 20 };

static const char repro_help[] =
    "usage: detcheck repro [OPTIONS] -- CMD ARGS...\n"
    "\n"
    "Runs CMD N times, each with DETCHECK_RECORD=WORKDIR/run_I (the detcheck Python\n"
    "package records there: detcheck.autorecord, Recorder.from_env, the HF and\n"
    "Lightning callbacks), bisects every run against run 1 and prints a verdict:\n"
    "reproducible, or the first differing step, tensor and module/op, with the\n"
    "determinism settings that were off in the runs (from their run.json).\n"
    "\n"
    "Options:\n"
    "  -n N              number of runs (default 2; with --env: its number of values;\n"
    "                    with --tax: runs per setting)\n"
    "  --trace MODE      DETCHECK_TRACE for the runs: modules (default), ops or none\n"
    "  --vary FACTOR     vary one factor per run: threads (DETCHECK_THREADS: run 1\n"
    "                    the CPU count, then 1, 2, 3...)\n"
    "  --env NAME=A,B    run I gets the I-th value of variable NAME\n"
    "  --tax             time the command with DETCHECK_DETERMINISTIC=1 and =0 (N runs\n"
    "                    each, alternating) and print the step-time ratio\n"
    "  --timeout SECONDS  per run; its process group is killed after it\n"
    "  --dump-step K     DETCHECK_DUMP_STEP for the runs: each dumps the outputs of\n"
    "                    traced step K (RUN/dump_step_K/trace.safetensors), and the\n"
    "                    verdict names the `detcheck diff` that gives their magnitudes\n"
    "  --workdir DIR     keep the runs in DIR (default: a temporary directory under\n"
    "                    $TMPDIR, removed when the runs are reproducible)\n"
    "  --keep            keep the temporary directory\n"
    "  --allow-partial   accept traced steps that every run's recorder cut alike\n"
    "                    (their events past the bound not compared; said in the\n"
    "                    verdict); without it they make the verdict incomplete (1)\n"
    "  --json            machine-readable result (one document)\n"
    "  --junit FILE      also a JUnit XML report (a test case per run)\n"
    "  --markdown FILE   also a Markdown summary ('-': stdout)\n"
    "  --html FILE       also a self-contained HTML page (curves, step x module grid)\n"
    "  -q, --quiet       no progress lines\n"
    "\n"
    "Exit status: 0 reproducible, 1 not reproducible, 2 trouble (bad options, a run\n"
    "that failed or recorded nothing).\n";

/* ------------------------------------------------------------------ options */

/* The factors --vary knows: the variable each run gets. */
static const struct {
    const char *name, *var;
} factors[] = {{"threads", "DETCHECK_THREADS"}};

/* Variables repro sets itself: --env may not take them. */
static const struct {
    const char *var, *instead;
} owned[] = {{"DETCHECK_RECORD", "repro sets it to WORKDIR/run_I"},
             {"DETCHECK_TRACE", "use --trace"},
             {"DETCHECK_DUMP_STEP", "use --dump-step"}};

typedef struct {
    long n;
    bool n_set, keep, json, tax, allow_partial;
    const char *workdir, *trace;
    int vary; /* index in factors, or -1 */
    const char *env_arg;
    char *env_name;
    char **env_values;
    size_t nenv;
    double timeout; /* 0: none */
    long dump_step; /* -1: none */
    char **cmd;
    int ncmd;
    cli_report rep;
} repro_opts;

static bool valid_var(const char *s, size_t n) {
    if (!n || !(s[0] == '_' || (s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= 'a' && s[0] <= 'z'))) return false;
    for (size_t i = 1; i < n; i++)
        if (!(s[i] == '_' || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= 'a' && s[i] <= 'z') ||
              (s[i] >= '0' && s[i] <= '9')))
            return false;
    return true;
}

/* --env NAME=A,B[,C]: the name and its values (argv's copy, split). */
static int parse_env(repro_opts *o, const char *arg) {
    const char *eq = strchr(arg, '=');
    if (!eq || !valid_var(arg, (size_t)(eq - arg)))
        return cli_usage_error(CMD, "--env '%s': wants NAME=A,B[,C...] (NAME a variable name)", arg);
    o->env_name = strndup(arg, (size_t)(eq - arg));
    if (!o->env_name) return cli_fail(CMD, dck_oom(NULL));
    for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++)
        if (!strcmp(o->env_name, owned[i].var))
            return cli_usage_error(CMD, "--env %s: %s", owned[i].var, owned[i].instead);
    const char *v = eq + 1;
    size_t n = 1;
    for (const char *p = v; *p; p++) n += *p == ',';
    if (!*v || n < 2)
        return cli_usage_error(CMD, "--env %s needs two values or more, one per run (NAME=A,B[,C...])",
                               o->env_name);
    o->env_values = calloc(n, sizeof *o->env_values);
    if (!o->env_values) return cli_fail(CMD, dck_oom(NULL));
    for (const char *p = v;; p++)
        if (*p == ',' || !*p) {
            if (!(o->env_values[o->nenv++] = strndup(v, (size_t)(p - v)))) return cli_fail(CMD, dck_oom(NULL));
            if (!*p) break;
            v = p + 1;
        }
    return 0;
}

enum { OPT_N = 'n', OPT_WORKDIR = 0x1200, OPT_TRACE, OPT_VARY, OPT_ENV, OPT_TIMEOUT, OPT_DUMP_STEP, OPT_KEEP,
       OPT_ALLOW_PARTIAL, OPT_TAX };
static const struct option repro_options[] = {
    {"workdir", required_argument, NULL, OPT_WORKDIR}, {"trace", required_argument, NULL, OPT_TRACE},
    {"vary", required_argument, NULL, OPT_VARY},       {"env", required_argument, NULL, OPT_ENV},
    {"timeout", required_argument, NULL, OPT_TIMEOUT}, {"dump-step", required_argument, NULL, OPT_DUMP_STEP},
    {"keep", no_argument, NULL, OPT_KEEP},             {"allow-partial", no_argument, NULL, OPT_ALLOW_PARTIAL},
    {"tax", no_argument, NULL, OPT_TAX},               CLI_REPORT_LONGOPTS,
    {NULL, 0, NULL, 0}};

/* The name of a valued option, for its messages. */
static const char *option_name(int code) {
    if (code == OPT_N) return "-n";
    for (const struct option *o = repro_options; o->name; o++)
        if (o->val == code) {
            static char buf[32];
            snprintf(buf, sizeof buf, "--%s", o->name);
            return buf;
        }
    return "?";
}

/* One option of repro's own (a value of its own never "--": the command's
 * separator; the reports' take any name). */
static int take_option(repro_opts *o, int c, const char *val) {
    int r;
    if (val && !strcmp(val, "--") && (c < CLI_OPT_JUNIT || c > CLI_OPT_HTML))
        return cli_usage_error(CMD, "%s needs a value", option_name(c));
    switch (c) {
    case OPT_KEEP: o->keep = true; break;
    case OPT_ALLOW_PARTIAL: o->allow_partial = true; break;
    case OPT_TAX: o->tax = true; break;
    case OPT_N:
        if (!cli_parse_long(val, 1, MAX_RUNS, &o->n))
            return cli_usage_error(CMD, "-n '%s': wants a number of runs, 2 to %d", val, MAX_RUNS);
        if (o->n < 2) return cli_usage_error(CMD, "-n %ld: one run proves nothing; 2 or more", o->n);
        o->n_set = true;
        break;
    case OPT_WORKDIR: o->workdir = val; break;
    case OPT_TRACE:
        if (strcmp(val, "modules") && strcmp(val, "ops") && strcmp(val, "none"))
            return cli_usage_error(CMD, "--trace '%s': modules, ops or none", val);
        o->trace = val;
        break;
    case OPT_VARY:
        if (o->vary >= 0) return cli_usage_error(CMD, "--vary given twice: one factor per run");
        for (size_t f = 0; f < sizeof factors / sizeof factors[0]; f++)
            if (!strcmp(val, factors[f].name)) o->vary = (int)f;
        if (o->vary < 0) return cli_usage_error(CMD, "--vary '%s': unknown factor (threads)", val);
        break;
    case OPT_ENV:
        if (o->env_arg) return cli_usage_error(CMD, "--env given twice: one factor per run");
        o->env_arg = val;
        if ((r = parse_env(o, val))) return r;
        break;
    case OPT_TIMEOUT:
        if (!cli_parse_double(val, &o->timeout) || !(o->timeout > 0) || o->timeout > 86400.0 * 30)
            return cli_usage_error(CMD, "--timeout '%s': not a number of seconds", val);
        break;
    case OPT_DUMP_STEP:
        if (!cli_parse_long(val, 0, LONG_MAX, &o->dump_step))
            return cli_usage_error(CMD, "--dump-step '%s': wants a step number (0 or more)", val);
        break;
    default:
        r = cli_runs_report_option(&o->rep, c, val);
        if (r < 0) return DCK_EXIT_TROUBLE;
        if (!r) return cli_usage_error(CMD, "unknown option code %d", c);
    }
    return 0;
}

/* Every option is checked here, before any run. Options end at '--' (or
 * at the first word that is none: an error, the command comes after
 * '--'). */
static int parse_args(int argc, char **argv, repro_opts *o, bool *help) {
    cli_shared sh = {.cmd = CMD, .help_text = repro_help};
    int c, r;
    const char *value = NULL; /* the last option's value: a "--" there is no separator */
    optind = 1;
    opterr = 0;
    while ((c = cli_getopt(argc, argv, "+:n:", repro_options, &sh)) != -1) {
        value = optarg;
        if (c == CLI_STOP) {
            *help = sh.help;
            return sh.exit;
        }
        if (c == ':') {
            if (cli_runs_report_option(&o->rep, optopt, NULL) < 0) return DCK_EXIT_TROUBLE;
            return cli_usage_error(CMD, "%s needs a value", option_name(optopt));
        }
        if (c == '?') return cli_usage_error(CMD, "unknown option '%s'", argv[optind - 1]);
        if ((r = take_option(o, c, optarg))) return r;
    }
    o->json = sh.json;
    int i = optind;
    bool separator = i > 1 && !strcmp(argv[i - 1], "--") && argv[i - 1] != value;
    if (i < argc && !separator)
        return cli_usage_error(CMD, "'%s': the command comes after '--' (detcheck repro [OPTIONS] -- CMD ARGS...)",
                               argv[i]);
    i = separator ? i - 1 : argc; /* the index of '--' */
    if (i >= argc) return cli_usage_error(CMD, "no '--': detcheck repro [OPTIONS] -- CMD ARGS...");
    o->cmd = argv + i + 1;
    o->ncmd = argc - i - 1;
    if (o->ncmd == 0) return cli_usage_error(CMD, "no command after '--'");
    if (o->vary >= 0 && o->env_arg) return cli_usage_error(CMD, "--vary and --env: one factor per run");
    if (o->dump_step >= 0 && o->trace && !strcmp(o->trace, "none"))
        return cli_usage_error(CMD, "--dump-step with --trace none: a dump holds the outputs of a traced step");
    if (o->dump_step >= 0 && o->tax) return cli_usage_error(CMD, "--dump-step with --tax: the dump would be timed");
    if (o->tax && (o->vary >= 0 || o->env_arg))
        return cli_usage_error(CMD, "--tax varies DETCHECK_DETERMINISTIC itself: no --vary or --env");
    if (o->env_arg) {
        if (o->n_set && (size_t)o->n != o->nenv)
            return cli_usage_error(CMD, "--env %s has %zu values, but -n %ld runs", o->env_name, o->nenv, o->n);
        if (o->nenv > MAX_RUNS) return cli_usage_error(CMD, "--env %s: more than %d values", o->env_name, MAX_RUNS);
        o->n = (long)o->nenv;
    }
    if (cli_report_check(&o->rep, o->json, NULL, 0)) return DCK_EXIT_TROUBLE;
    return 0;
}

/* ------------------------------------------------------------------ runs */

/* One run of the user's command as a child: its folder, outputs and exit
 * status (a run, in the library's word, is the recorded folder it leaves:
 * dck_run), and what the command read of it. */
typedef struct {
    char dir[PATH_MAX], out[PATH_MAX], err[PATH_MAX];
    dev_t dev; /* its folder as repro created it */
    ino_t ino;
    dck_step_mark *steps; /* its trajectory's, one per record */
    char var[64], value[256]; /* the varied variable, or "" */
    int status;               /* exit status, 128+signal; -2 timeout, -3 interrupted, -1 no start */
    double seconds;
    long records, first_step, last_step;
    double *step_times; /* tax: step_time_s of each record but the first */
    size_t ntimes;
    bool times_missing;
    json_t *settings; /* run.json's, or NULL */
    /* the comparison with run 1 */
    int bisect;       /* bisect's exit status */
    json_t *result;   /* its --json document */
    char **lines;     /* its text lines, when different */
    size_t nlines;
    long div_step;    /* first differing step, -1 unknown */
    const char *div_what; /* what differs there: bisect's first_differing ("trajectory", "tensor",
                             "event") or what repro found itself (bisect's not_compared items:
                             "recorded_steps", "traced_steps", "truncated_steps", "recorded_state",
                             "trajectory_steps") */
} child_run;

static int cpu_count(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* trajectory.jsonl, read by the library's one reader (dck_traj_load, as
 * bisect reads it: a torn last line ignored, any other bad line trouble
 * naming file and line): its steps and, for --tax, step_time_s of each
 * record but the first (warm-up). */
static int read_trajectory(child_run *r, const char *path, bool times) {
    dck_traj_rec *t = NULL;
    size_t n = 0;
    dck_status ds = dck_traj_load(path, &t, &n);
    if (ds) return cli_fail(CMD, ds);
    r->first_step = n ? t[0].step : -1;
    r->last_step = n ? t[n - 1].step : -1;
    r->steps = n ? calloc(n, sizeof *r->steps) : NULL;
    r->step_times = times && n > 1 ? calloc(n - 1, sizeof *r->step_times) : NULL;
    if ((n && !r->steps) || (times && n > 1 && !r->step_times)) {
        free(t);
        return cli_fail(CMD, dck_oom(path));
    }
    for (size_t i = 0; i < n; i++) {
        r->steps[i] = (dck_step_mark){t[i].step, 0, false};
        if (!times || i == 0) continue;
        if (isnan(t[i].step_time_s)) r->times_missing = true;
        else r->step_times[r->ntimes++] = t[i].step_time_s;
    }
    r->records = (long)n;
    free(t);
    return 0;
}

/* run.json: its settings object, or NULL (a warning says why). */
static json_t *read_settings(int idx, const char *dir) {
    json_t *s = NULL;
    bool unreadable = false;
    dck_status st = dck_run_settings_load(dir, &s, &unreadable);
    if (!st && !s) cli_warn(CMD, "run %d wrote no run.json: its determinism settings are unknown", idx);
    else if (st && unreadable) cli_warn(CMD, "%s; its determinism settings are unknown", dck_last_error());
    else if (st) cli_warn(CMD, "%s", dck_last_error());
    return s;
}

/* ------------------------------------------------------------------ settings */

/* What the runs recorded in run.json, said as cli_repro_settings says it. */
static void report_settings(const child_run *runs, int n, FILE *out, json_t *doc, bool *oom, char *summary,
                            size_t slen) {
    json_t *settings[2 * MAX_RUNS];
    for (int i = 0; i < n; i++) settings[i] = runs[i].settings;
    cli_repro_settings(settings, n, out, doc, oom, summary, slen);
}

/* ------------------------------------------------------------------ the runs' own folders */

/* Every file repro creates in its work folder, per run I: a file or a link
 * someone planted at one of these names is refused, never truncated or
 * followed (cli_create_new at the moment of creation; here before any run,
 * so that no run is spent first). */
static const char *const work_files[] = {"run_%d.out", "run_%d.err"};

static int check_work_files(const char *work, int nruns) {
    for (int i = 0; i < nruns; i++)
        for (size_t k = 0; k < sizeof work_files / sizeof work_files[0]; k++) {
            char name[64], p[PATH_MAX];
            struct stat st;
            snprintf(name, sizeof name, work_files[k], i + 1);
            snprintf(p, sizeof p, "%s/%s", work, name);
            if (lstat(p, &st) == 0) {
                cli_error(CMD, "%s exists (%s) and repro creates it: remove it or choose another --workdir", p,
                          S_ISLNK(st.st_mode) ? "a symbolic link" : "an earlier run's log?");
                return DCK_EXIT_TROUBLE;
            }
        }
    return 0;
}

/* A run's folder after a run: still the folder repro created (same device
 * and inode, not a link, at its own path). A command that swapped it, for
 * a link to run 1's say, would have run 1 compared with itself. */
static int check_run_dir(const child_run *r, int idx) {
    if (!cli_dir_unchanged(r->dir, r->dev, r->ino)) return 0;
    cli_error(CMD, "run %d's folder %s: its recording would not be its own (replaced during the runs); "
                   "nothing is compared",
              idx + 1, dck_last_error());
    return DCK_EXIT_TROUBLE;
}

/* The files the runs recorded are their own: not links, not one file
 * shared by two runs (a hard link to another run's). */
static int check_run_files(const child_run *runs, int n) {
    static const char *const files[] = {DCK_TRAJECTORY, DCK_RECORD_FILE, DCK_TRACE_FILE, "run.json"};
    enum { NF = sizeof files / sizeof files[0] };
    struct stat *seen = calloc((size_t)n * NF, sizeof *seen);
    if (!seen) return cli_fail(CMD, dck_oom(NULL));
    int rc = 0;
    for (int i = 0; i < n && !rc; i++)
        for (size_t k = 0; k < NF && !rc; k++) {
            char p[PATH_MAX + 32];
            struct stat *st = &seen[(size_t)i * NF + k];
            snprintf(p, sizeof p, "%s/%s", runs[i].dir, files[k]);
            if (lstat(p, st) != 0) {
                st->st_ino = 0; /* absent: said where it matters */
                continue;
            }
            if (S_ISLNK(st->st_mode)) {
                cli_error(CMD, "%s is a symbolic link: a run's recording must be its own; nothing is compared", p);
                rc = DCK_EXIT_TROUBLE;
            }
            for (int j = 0; j < i && !rc; j++) {
                const struct stat *o = &seen[(size_t)j * NF + k];
                if (o->st_ino && o->st_dev == st->st_dev && o->st_ino == st->st_ino) {
                    cli_error(CMD, "%s is the same file as run %d's %s: a run's recording must be its own; "
                                   "nothing is compared",
                              p, j + 1, files[k]);
                    rc = DCK_EXIT_TROUBLE;
                }
            }
        }
    free(seen);
    return rc;
}

/* ------------------------------------------------------------------ recordings */

static int add_line(child_run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* One more line of run r's difference, whole (names are never cut). */
static int add_line(child_run *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int e = cli_lines_vadd(&r->lines, &r->nlines, fmt, ap);
    va_end(ap);
    return e ? cli_fail(CMD, dck_oom(NULL)) : 0;
}

/* Run i's recordings against run 1's (ref, rec1), by repro itself, so that
 * the verdict does not rest on bisect's (dck_repro_recordings_compare): a
 * difference adds its lines to run i and marks it different; *truncated
 * counts the traced steps both cut alike. Non-zero on trouble. */
static int compare_recordings(child_run *runs, int i, const dck_side_steps ref[DCK_NSIDES], const dck_recording *rec1,
                              long *truncated) {
    child_run *r = &runs[i];
    dck_side_steps cur[DCK_NSIDES];
    dck_recording rec;
    dck_repro_recordings f;
    memset(&f, 0, sizeof f);
    dck_status s = dck_run_sides_load(r->dir, cur, &rec);
    if (!s) s = dck_repro_recordings_compare(ref, rec1, cur, &rec, &f);
    if (!s) s = cli_repro_recording_lines(&f, ref, cur, i + 1, r->bisect == 0, r->div_step, &r->lines, &r->nlines);
    if (!s) {
        *truncated += (long)f.truncated_alike;
        if (f.differ) {
            if (r->bisect == 0) r->bisect = 1;
            if (r->div_step < 0 || (f.at >= 0 && f.at < r->div_step)) r->div_step = f.at, r->div_what = f.at_what;
        }
    }
    dck_repro_recordings_release(&f);
    dck_run_sides_release(cur);
    dck_recording_release(&rec);
    return s ? cli_fail(CMD, s) : 0;
}

/* ------------------------------------------------------------------ bisect */

/* The detail of the first item of bisect's not_compared list (steps,
 * roots, checkpoints one run only holds) that compare_recordings does not
 * judge itself, or NULL. bisect runs with --allow-partial so that it still
 * names the first difference; what it did not compare is a difference
 * here, but for what repro checks on its own with its own words: recorded
 * and traced steps, state entries, traced steps the recorder cut (alike in
 * both runs: --allow-partial's). */
static const char *bisect_not_compared(json_t *doc) {
    static const char *const own[] = {"recorded_steps", "recorded_state", "traced_steps", "truncated_steps"};
    json_t *v;
    size_t k;
    json_array_foreach(json_object_get(doc, "not_compared"), k, v) {
        const char *item = json_string_value(json_object_get(v, "item"));
        const char *detail = json_string_value(json_object_get(v, "detail"));
        bool mine = false;
        for (size_t i = 0; item && i < sizeof own / sizeof own[0]; i++) mine |= !strcmp(item, own[i]);
        if (!mine) return detail ? detail : item ? item : "an item bisect did not name";
    }
    return NULL;
}

/* Run i against run 1 (ref), as bisect --allow-partial compares them
 * (what it did not compare is judged here): its --json document into
 * r->result, and when they differ its -q lines into r->lines. */
static int compare_runs(const dck_run *ref, child_run *runs, int i) {
    child_run *r = &runs[i];
    const char *dirs[2] = {runs[0].dir, r->dir};
    dck_run *cur = NULL;
    dck_runs_result res;
    cli_runs_verdict v;
    memset(&res, 0, sizeof res);
    memset(&v, 0, sizeof v);
    const dck_runs_opts ro = {.allow_partial = true};
    int rc = 0;
    dck_status s = dck_run_open(r->dir, &cur);
    if (!s) s = dck_runs_compare(ref, cur, &ro, &res);
    if (s) {
        cli_error(CMD, "comparing run %d with run 1: %s", i + 1, dck_last_error());
        rc = DCK_EXIT_TROUBLE;
        goto out;
    }
    /* the comparison's notes, as bisect says them */
    if ((rc = cli_runs_verdict_make("bisect", !cli_quiet, dirs, &res, &v))) goto out;
    bool oom = false;
    r->result = cli_runs_json(&v, &oom);
    if (oom) {
        rc = cli_fail(CMD, dck_oom(NULL));
        goto out;
    }
    r->bisect = res.different ? 1 : 0;
    r->div_step = -1;
    const char *nc = bisect_not_compared(r->result);
    if (nc && r->bisect == 0) {
        if ((rc = add_line(r, "not compared: %s", cli_safe(nc)))) goto out;
        r->bisect = 1;
    }
    if (r->bisect == 0) goto out;
    /* the earliest step any part names: bisect's own (trajectory, tensor,
     * traced event), else the earliest of its parts */
    json_t *steps[] = {json_object_get(r->result, "first_differing_step"), json_object_get(r->result, "first_step"),
                       json_object_get(json_object_get(r->result, "first_tensor"), "step"),
                       json_object_get(json_object_get(r->result, "first_event"), "step")};
    for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++)
        if (json_is_integer(steps[k]) && (r->div_step < 0 || json_integer_value(steps[k]) < r->div_step))
            r->div_step = (long)json_integer_value(steps[k]);
    r->div_what = json_string_value(json_object_get(r->result, "first_differing")); /* r->result's */
    /* and its lines as bisect -q prints them */
    if (!res.different) goto out;
    if (cli_runs_lines(&v, 20, &r->lines, &r->nlines)) rc = cli_fail(CMD, dck_oom(NULL));
out:
    cli_runs_verdict_release(&v);
    dck_runs_result_release(&res);
    dck_run_free(cur);
    return rc;
}

/* ------------------------------------------------------------------ output */

/* Run r as the reports show it. */
static cli_repro_run view(const child_run *r) {
    return (cli_repro_run){.dir = r->dir, .var = r->var, .value = r->value, .status = r->status,
                           .seconds = r->seconds, .records = r->records, .settings = r->settings,
                           .bisect = r->bisect, .result = r->result, .lines = r->lines, .nlines = r->nlines,
                           .div_step = r->div_step, .div_what = r->div_what, .steps = r->steps,
                           .first_step = r->first_step, .last_step = r->last_step};
}

static json_t *run_json(const child_run *r, int i, bool tax, double median, bool *oom) {
    const cli_repro_run v = view(r);
    return cli_repro_run_json(&v, i, tax, median, oom);
}

/* This repro's command line again with option first in front (the same
 * options, --trace ops replacing the run's own --trace), malloc'd; NULL
 * when out of memory. */
static char *rerun_command(const repro_opts *o, const char *first) {
    char opts[1024] = "", *cmd = cli_shell_join(o->cmd, o->ncmd);
    size_t at = 0;
    bool traces = !strncmp(first, "--trace ", 8);
#define OPT(...) (at += (size_t)snprintf(opts + at, at < sizeof opts ? sizeof opts - at : 0, __VA_ARGS__))
    if (!o->env_arg && o->n != 2) OPT(" -n %ld", o->n);
    if (strcmp(o->trace, "modules") && !traces) OPT(" --trace %s", o->trace);
    if (o->vary >= 0) OPT(" --vary %s", factors[o->vary].name);
    if (o->env_arg) {
        char *e = cli_shell_join((char *const *)&o->env_arg, 1);
        OPT(" --env %s", e ? e : o->env_arg);
        free(e);
    }
    if (o->timeout > 0) OPT(" --timeout %g", o->timeout);
#undef OPT
    char *line = NULL;
    if (!cmd || asprintf(&line, "detcheck repro %s%s -- %s", first, opts, cmd) < 0) line = NULL;
    free(cmd);
    return line;
}

/* The verdict's last line: what would localise the first divergence (run
 * f) further. A culprit's magnitudes: the `detcheck diff` of the two dumps
 * when the runs dumped that step (bisect's own line), else the repro
 * command that dumps it (--dump-step STEP). Where the trace named no
 * culprit at the first differing step (bisect's next_option): the repro
 * command with an op trace, or, traced by ops already, the dump of that
 * step. "" when bisect names neither. */
static void next_line(const repro_opts *o, const child_run *f, char *buf, size_t n) {
    json_t *ev = json_object_get(f->result, "first_event");
    json_t *step = json_object_get(ev, "step");
    const char *m = json_string_value(json_object_get(ev, "magnitudes"));
    const char *next = json_string_value(json_object_get(f->result, "next_option"));
    char first[64], *cmd = NULL;
    buf[0] = 0;
    if (next && !strcmp(next, "--trace ops")) {
        if ((cmd = rerun_command(o, next))) snprintf(buf, n, "next: localise with an op trace: %s", cmd);
    } else if (next && !strncmp(next, "--dump-step ", 12)) {
        if ((cmd = rerun_command(o, next)))
            snprintf(buf, n, "next: magnitudes of step %s's traced outputs, for detcheck diff's max ULP and rel L2: %s",
                     next + 12, cmd);
    } else if (!json_is_object(ev) || !json_is_integer(step) || !m) {
        return;
    } else if (!strncmp(m, "dumps present:", 14)) {
        snprintf(buf, n, "magnitudes: %s", m + 14 + (m[14] == ' '));
    } else {
        snprintf(first, sizeof first, "--dump-step %lld", (long long)json_integer_value(step));
        if ((cmd = rerun_command(o, first)))
            snprintf(buf, n, "magnitudes: rerun with every run dumping step %lld's outputs, for detcheck diff's max "
                             "ULP and rel L2: %s",
                     (long long)json_integer_value(step), cmd);
    }
    free(cmd);
}

/* ------------------------------------------------------------------ main */

int cmd_repro(int argc, char **argv) {
    repro_opts o;
    memset(&o, 0, sizeof o);
    o.n = 2;
    o.trace = NULL; /* modules; none with --tax (tracing would be timed too) */
    o.vary = -1;
    o.dump_step = -1;
    cli_report_init(&o.rep, CMD);
    bool help = false;
    child_run *runs = NULL;
    int nruns = 0, rc = parse_args(argc, argv, &o, &help);
    char work[PATH_MAX] = "", *cmdline = NULL, next_text[8192] = "";
    bool temp = false, oom = false;
    if (rc) goto done;
    if (help) goto done; /* printed by cli_getopt */
    nruns = o.tax ? (int)(2 * o.n) : (int)o.n;
    if (!o.trace) o.trace = o.tax ? "none" : "modules";
    runs = calloc((size_t)nruns, sizeof *runs);
    cmdline = cli_shell_join(o.cmd, o.ncmd);
    if (!runs || !cmdline) {
        rc = cli_fail(CMD, dck_oom(NULL));
        goto done;
    }
    /* the work directory: a run directory left by an earlier repro would be
     * read as this one's, so one that is not empty is refused, before any run */
    if (o.workdir) {
        if (strlen(o.workdir) > PATH_MAX - 64) {
            rc = cli_usage_error(CMD, "--workdir: path too long");
            goto done;
        }
        snprintf(work, sizeof work, "%s", o.workdir);
        struct stat st;
        if (mkdir(work, 0777) != 0 && (errno != EEXIST || stat(work, &st) != 0 || !S_ISDIR(st.st_mode))) {
            cli_error(CMD, "--workdir %s: cannot create it: %s", work, errno == EEXIST ? "not a directory" : strerror(errno));
            rc = DCK_EXIT_TROUBLE;
            goto done;
        }
        for (int i = 0; i < nruns; i++) {
            char d[PATH_MAX];
            snprintf(d, sizeof d, "%s/run_%d", work, i + 1);
            if (rmdir(d) != 0 && errno != ENOENT) {
                cli_error(CMD, "%s exists and is not empty (an earlier run?): remove it or choose another --workdir",
                          d);
                rc = DCK_EXIT_TROUBLE;
                goto done;
            }
        }
    } else {
        if ((rc = cli_temp_workdir(CMD, work, sizeof work))) goto done;
        temp = true;
    }
    cli_absolute_dir(work, sizeof work);
    if ((rc = check_work_files(work, nruns))) goto done;
    cli_run_catch_signals();

    /* ---- the runs */
    int ncpu = cpu_count(), failed = -1;
    char trouble[512] = "";
    for (int i = 0; i < nruns; i++) {
        child_run *r = &runs[i];
        snprintf(r->dir, sizeof r->dir, "%s/run_%d", work, i + 1);
        snprintf(r->out, sizeof r->out, "%s/run_%d.out", work, i + 1);
        snprintf(r->err, sizeof r->err, "%s/run_%d.err", work, i + 1);
        struct stat dst;
        if (mkdir(r->dir, 0777) != 0 || lstat(r->dir, &dst) != 0) {
            cli_error(CMD, "%s: cannot create: %s", r->dir, strerror(errno));
            rc = DCK_EXIT_TROUBLE;
            break;
        }
        r->dev = dst.st_dev;
        r->ino = dst.st_ino;
        if (o.vary >= 0) {
            /* run 1 the CPU count, then 1, 2, 3... without it again */
            long v = ncpu;
            if (i > 0) {
                v = i;
                if (v >= ncpu) v++;
            }
            snprintf(r->var, sizeof r->var, "%s", factors[o.vary].var);
            snprintf(r->value, sizeof r->value, "%ld", v);
        } else if (o.env_arg) {
            snprintf(r->var, sizeof r->var, "%s", o.env_name);
            snprintf(r->value, sizeof r->value, "%s", o.env_values[i]);
        } else if (o.tax) {
            snprintf(r->var, sizeof r->var, "DETCHECK_DETERMINISTIC");
            snprintf(r->value, sizeof r->value, "%d", i % 2 == 0);
        }
        char dump[32];
        const char *env[9] = {"DETCHECK_RECORD", r->dir, "DETCHECK_TRACE", o.trace};
        size_t ne = 4;
        if (o.dump_step >= 0) {
            snprintf(dump, sizeof dump, "%ld", o.dump_step);
            env[ne++] = "DETCHECK_DUMP_STEP";
            env[ne++] = dump;
        }
        if (r->var[0]) {
            env[ne++] = r->var;
            env[ne++] = r->value;
        }
        if (r->var[0]) cli_info(CMD, "run %d of %d: %s=%s", i + 1, nruns, r->var, cli_safe(r->value));
        else cli_info(CMD, "run %d of %d", i + 1, nruns);
        r->status = cli_run_child(o.cmd, env, r->out, r->err, o.timeout, &r->seconds);
        char what[256];
        cli_run_describe(r->status, o.timeout, what, sizeof what);
        if (r->status != 0) {
            cli_error(CMD, "run %d of %d %s: %s", i + 1, nruns, what, cli_safe_line(cmdline));
            snprintf(trouble, sizeof trouble, "run %d of %d %s", i + 1, nruns, what);
            if (r->status != CLI_RUN_NO_LOG) cli_print_tail(CMD, r->err, TAIL_LINES);
            else r->err[0] = 0; /* not ours: never read back */
            failed = i;
            rc = DCK_EXIT_TROUBLE;
            break;
        }
        /* the folders of this run and the earlier ones are still theirs */
        for (int k = 0; k <= i && !rc; k++) rc = check_run_dir(&runs[k], k);
        if (rc) {
            snprintf(trouble, sizeof trouble, "a run folder was replaced during run %d", i + 1);
            break;
        }
        char *traj = dck_path_join(r->dir, "trajectory.jsonl");
        struct stat st;
        if (!traj || lstat(traj, &st) != 0) {
            cli_error(CMD,
                      "run %d of %d recorded nothing: %s/trajectory.jsonl is absent, so the command did not "
                      "honour DETCHECK_RECORD",
                      i + 1, nruns, r->dir);
            cli_error(CMD, "hint: call detcheck.autorecord(model, optimizer) in the training script, or record "
                           "with detcheck.Recorder.from_env() (or the HF / Lightning callbacks)");
            snprintf(trouble, sizeof trouble, "run %d of %d recorded nothing (DETCHECK_RECORD not honoured)", i + 1,
                     nruns);
            free(traj);
            failed = i;
            rc = DCK_EXIT_TROUBLE;
            break;
        }
        rc = read_trajectory(r, traj, o.tax);
        free(traj);
        if (!rc && r->records == 0) {
            cli_error(CMD, "run %d of %d: %s/trajectory.jsonl has no records", i + 1, nruns, r->dir);
            rc = DCK_EXIT_TROUBLE;
        }
        if (rc) {
            snprintf(trouble, sizeof trouble, "run %d of %d: its trajectory.jsonl cannot be read", i + 1, nruns);
            failed = i;
            break;
        }
        r->settings = read_settings(i + 1, r->dir);
        cli_info(CMD, "run %d of %d: %ld steps in %.1f s", i + 1, nruns, r->records, r->seconds);
    }
    if (!rc && (rc = check_run_files(runs, nruns)))
        snprintf(trouble, sizeof trouble, "a run's recorded file is not its own");

    json_t *doc = o.json ? json_object() : NULL;
    FILE *devnull = fopen("/dev/null", "w");
    FILE *out = o.json && devnull ? devnull : stdout;
    char title[4096] = "", summary[2048] = "";
    if (doc) {
        json_t *c = json_array();
        cli_jset(doc, "verdict", json_null(), &oom); /* first; set below */
        for (int i = 0; i < o.ncmd; i++) cli_jappend(c, cli_json_text(o.cmd[i]), &oom);
        cli_jset(doc, "command", c, &oom);
    }

    /* ---- trouble in a run: said above; the reports and the document say it too */
    if (rc) {
        snprintf(title, sizeof title, "trouble: %s", trouble[0] ? trouble : "the runs could not be prepared");
        if (doc) {
            cli_jset(doc, "verdict", json_string("trouble"), &oom);
            cli_jset(doc, "error", cli_json_text(title), &oom);
            char *tail = failed >= 0 ? cli_file_tail(runs[failed].err, TAIL_LINES) : NULL;
            cli_jset(doc, "stderr_tail", tail ? cli_json_text(tail) : json_null(), &oom);
            free(tail);
        }
        if (cli_report_wanted(&o.rep)) {
            char *tail = failed >= 0 ? cli_file_tail(runs[failed].err, TAIL_LINES) : NULL;
            char nm[32];
            snprintf(nm, sizeof nm, "run_%d", failed + 1);
            cli_report_case(&o.rep, "detcheck.repro", nm, CLI_CASE_ERROR, "run", title, tail);
            free(tail);
        }
        goto finish;
    }

    if (o.tax) {
        /* ---- the determinism tax: per-run medians of step_time_s */
        double *med = calloc((size_t)nruns, sizeof *med);
        size_t tmin = SIZE_MAX, tmax = 0;
        dck_repro_tax tax;
        if (!med) {
            rc = cli_fail(CMD, dck_oom(NULL));
            goto finish;
        }
        for (int i = 0; i < nruns && !rc; i++) {
            child_run *r = &runs[i];
            if (r->times_missing || r->ntimes == 0) {
                cli_error(CMD, "run %d: %s/trajectory.jsonl %s", i + 1, r->dir,
                          r->ntimes == 0 && !r->times_missing
                              ? "has no step after the first (warm-up): nothing to time"
                              : "has records without step_time_s: the recorder did not time its steps");
                snprintf(title, sizeof title, "trouble: run %d has no step times", i + 1);
                rc = DCK_EXIT_TROUBLE;
                break;
            }
            json_t *det = json_object_get(r->settings, "deterministic_algorithms");
            if (json_is_boolean(det) && json_is_true(det) != (i % 2 == 0))
                cli_warn(CMD, "run %d: DETCHECK_DETERMINISTIC=%s, but its run.json says deterministic_algorithms=%s: "
                              "the recorder did not switch it",
                         i + 1, r->value, json_is_true(det) ? "true" : "false");
            med[i] = dck_median(r->step_times, r->ntimes);
            if (r->ntimes < tmin) tmin = r->ntimes;
            if (r->ntimes > tmax) tmax = r->ntimes;
        }
        if (!rc) {
            if (dck_repro_tax_of(med, (size_t)nruns, &tax)) {
                cli_error(CMD, "%s", dck_last_error());
                snprintf(title, sizeof title, "trouble: step times of 0");
                rc = DCK_EXIT_TROUBLE;
            } else {
                cli_repro_tax_print(out, &tax, (size_t)nruns / 2, tmin, tmax, title, sizeof title);
                /* the settings once, in the document and the reports (they
                 * differ between the two sides by design); on the terminal
                 * only what the deterministic runs still left off */
                report_settings(runs, nruns, devnull ? devnull : out, doc, &oom, summary, sizeof summary);
                char off[1024], first_off[1024] = "";
                bool same = true;
                for (int i = 0; i < nruns; i += 2) {
                    cli_repro_settings_off(runs[i].settings, off, sizeof off, NULL, &oom);
                    if (i == 0) snprintf(first_off, sizeof first_off, "%s", off);
                    else if (strcmp(off, first_off)) same = false;
                }
                if (!same)
                    fprintf(out, "  determinism settings off differ between the deterministic runs (every run's: "
                                 "--json, --junit, --markdown)\n");
                else if (first_off[0])
                    fprintf(out, "  still off in the deterministic runs: %s (every run's settings: --json, --junit, "
                                 "--markdown)\n", first_off);
                if (summary[0]) cli_report_property(&o.rep, "settings", summary);
                if (doc) {
                    cli_jset(doc, "verdict", json_string("tax"), &oom);
                    cli_jset(doc, "tax", cli_repro_tax_json(&tax, med, (size_t)nruns, summary, &oom), &oom);
                    json_t *rs = json_array();
                    for (int i = 0; i < nruns; i++) cli_jappend(rs, run_json(&runs[i], i, true, med[i], &oom), &oom);
                    cli_jset(doc, "runs", rs, &oom);
                }
                if (cli_report_wanted(&o.rep)) {
                    char msg[256], nm[32];
                    snprintf(msg, sizeof msg, "%.6g", tax.ratio);
                    cli_report_property(&o.rep, "tax_ratio", msg);
                    for (int i = 0; i < nruns; i++) {
                        snprintf(nm, sizeof nm, "run_%d", i + 1);
                        snprintf(msg, sizeof msg, "DETCHECK_DETERMINISTIC=%s: median step time %.4g s over %zu steps",
                                 runs[i].value, med[i], runs[i].ntimes);
                        cli_report_case(&o.rep, "detcheck.repro.tax", nm, CLI_CASE_PASS, NULL, msg, NULL);
                    }
                }
            }
        }
        free(med);
        goto finish;
    }

    /* ---- compare every run with run 1 */
    int ndiff = 0, first = -1;
    dck_side_steps ref[DCK_NSIDES];
    dck_recording rec1;
    long truncated = 0; /* traced steps both runs truncated alike, over all comparisons */
    dck_run *run1 = NULL;
    dck_status ls = dck_run_sides_load(runs[0].dir, ref, &rec1);
    if (!ls) ls = dck_run_open(runs[0].dir, &run1);
    if (ls) rc = cli_fail(CMD, ls);
    if (rc) snprintf(title, sizeof title, "trouble: run 1's recording cannot be read");
    for (int i = 1; i < nruns && !rc; i++) {
        if ((rc = compare_runs(run1, runs, i)) || (rc = compare_recordings(runs, i, ref, &rec1, &truncated))) {
            snprintf(title, sizeof title, "trouble: comparing run %d with run 1 failed", i + 1);
            break;
        }
        child_run *r = &runs[i];
        long only;
        bool steps_differ = dck_steps_first_unpaired(runs[0].steps, (size_t)runs[0].records, r->steps, (size_t)r->records, &only);
        if (steps_differ && (r->div_step < 0 || only < r->div_step)) r->div_step = only, r->div_what = "trajectory_steps";
        if (r->bisect == 1 || steps_differ) {
            if (r->bisect == 0) r->bisect = 1; /* fewer or more steps: not the same run */
            ndiff++;
            long s = r->div_step >= 0 ? r->div_step : LONG_MAX;
            long best = first < 0 ? LONG_MAX : runs[first].div_step >= 0 ? runs[first].div_step : LONG_MAX;
            if (first < 0 || s < best) first = i;
        }
    }
    /* every run recorded the steps of run 1 (else they differ) */
    bool tensors = ref[DCK_SIDE_TENSORS].n > 0;
    dck_run_sides_release(ref);
    dck_recording_release(&rec1);
    dck_run_free(run1);
    if (rc) goto finish;
    /* traced steps the recorder cut alike in every run: what lies past the
     * bound was compared nowhere, so no OK without --allow-partial */
    bool incomplete = !ndiff && truncated && !o.allow_partial;
    if (ndiff) next_line(&o, &runs[first], next_text, sizeof next_text);
    {
        const cli_repro_run r1 = view(&runs[0]), f = view(&runs[ndiff ? first : 0]);
        const cli_repro_verdict v = {nruns, ndiff, first, truncated, incomplete, tensors, next_text};
        cli_repro_verdict_print(out, &r1, &f, &v, title, sizeof title);
    }
    if (doc) {
        cli_jset(doc, "verdict", json_string(ndiff ? "different" : incomplete ? "incomplete" : "reproducible"), &oom);
        cli_jset(doc, "reproducible", json_boolean(!ndiff && !incomplete), &oom);
        cli_jset(doc, "truncated_steps_not_compared", json_integer(truncated), &oom);
        cli_jset(doc, "steps", json_integer(runs[0].records), &oom);
        cli_jset(doc, "tensors_compared", json_boolean(tensors), &oom);
        json_t *fd = json_null();
        if (ndiff) {
            const cli_repro_run f = view(&runs[first]);
            fd = cli_repro_divergence_json(&f, first, next_text, &oom);
        }
        cli_jset(doc, "first_divergence", fd, &oom);
    }
    report_settings(runs, nruns, ndiff || !cli_quiet || !devnull ? out : devnull, doc, &oom, summary, sizeof summary);
    if (doc) {
        json_t *rs = json_array();
        for (int i = 0; i < nruns; i++) cli_jappend(rs, run_json(&runs[i], i, false, 0, &oom), &oom);
        cli_jset(doc, "runs", rs, &oom);
    }
    if (cli_report_wanted(&o.rep)) {
        cli_report_property(&o.rep, "trace", o.trace);
        if (ndiff && next_text[0]) cli_report_property(&o.rep, "next", next_text);
        if (o.vary >= 0) cli_report_property(&o.rep, "vary", factors[o.vary].name);
        if (o.env_arg) cli_report_property(&o.rep, "env", o.env_arg);
        for (int i = 0; i < nruns; i++) {
            const cli_repro_run v = view(&runs[i]);
            cli_repro_run_case(&o.rep, &v, i, runs[0].records, summary);
        }
        if (o.rep.html) {
            /* run 1 against the run that differs first (else run 2); drawn
             * now, while a temporary work directory is still there */
            int b = ndiff ? first : 1;
            char lb[32];
            snprintf(lb, sizeof lb, "run %d", b + 1);
            const cli_html_run_dir pair[2] = {{runs[0].dir, "run 1"}, {runs[b].dir, lb}};
            /* what bisect found one of them holding alone (its not_compared
             * details): repro accepts none of it */
            json_t *ncs = json_object_get(runs[b].result, "not_compared");
            size_t nnc = json_array_size(ncs);
            const char **lines = calloc(nnc ? nnc : 1, sizeof *lines);
            for (size_t k = 0; lines && k < nnc; k++)
                lines[k] = json_string_value(json_object_get(json_array_get(ncs, k), "detail"));
            const cli_html_unpaired unpaired = {lines, nnc, true};
            cli_report_figure(&o.rep, lines ? cli_html_runs_figure_dirs(CMD, pair, &unpaired) : NULL);
            free(lines);
        }
    }
    rc = ndiff || incomplete ? DCK_EXIT_DIFFERENT : DCK_EXIT_SAME;

finish:
    if (cli_report_wanted(&o.rep)) {
        cli_report_property(&o.rep, "command", cmdline);
        if (rc || !temp || o.keep) cli_report_property(&o.rep, "workdir", work);
        if (title[0]) cli_report_title(&o.rep, "%s", title);
        if (cli_report_finish(&o.rep, rc)) rc = DCK_EXIT_TROUBLE;
    }
    bool keep = rc || !temp || o.keep;
    if (doc) {
        if (rc == DCK_EXIT_TROUBLE && json_is_null(json_object_get(doc, "verdict"))) {
            cli_jset(doc, "verdict", json_string("trouble"), &oom);
            cli_jset(doc, "error", cli_json_text(title[0] ? title : "trouble"), &oom);
        }
        cli_jset(doc, "workdir", cli_json_text(work), &oom);
        cli_jset(doc, "kept", json_boolean(keep), &oom);
        dck_status s = cli_json_print(doc, CLI_JSON_COMPACT, oom);
        if (s) rc = cli_fail(CMD, s);
    }
    if (devnull) fclose(devnull);
    if (keep) {
        if (rc == DCK_EXIT_DIFFERENT && !o.json) printf("runs kept in %s\n", work);
        else if (temp) cli_info(CMD, "runs kept in %s", work);
    } else {
        cli_remove_tree(work);
    }
    if (cli_interrupted) rc = DCK_EXIT_TROUBLE;
done:
    for (int i = 0; runs && i < nruns; i++) {
        free(runs[i].step_times);
        free(runs[i].steps);
        json_decref(runs[i].settings);
        json_decref(runs[i].result);
        for (size_t k = 0; k < runs[i].nlines; k++) free(runs[i].lines[k]);
        free(runs[i].lines);
    }
    free(runs);
    free(cmdline);
    free(o.env_name);
    for (size_t i = 0; i < o.nenv; i++) free(o.env_values[i]);
    free(o.env_values);
    cli_report_release(&o.rep); /* after cli_report_finish: nothing left */
    return rc;
}

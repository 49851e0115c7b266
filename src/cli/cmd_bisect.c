/* detcheck bisect: where two runs of `detcheck train` part. The first step
 * whose trajectory records differ; with checkpoints, the last one where both
 * runs agree, the tensors that differ at the first one after (model order),
 * and the command that replays the divergence from the agreeing checkpoint.
 * See man/detcheck-bisect.1. */
#include "train_cli.h"
#include "report/report.h"
#include "report/html.h"
#include "runs/recording.h"
#include "cli_trace.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CMD "bisect"

static void usage(FILE *out) {
    fprintf(out,
            "usage: detcheck bisect [OPTIONS] RUN_A RUN_B\n"
            "\n"
            "RUN_A and RUN_B are --out directories of `detcheck train`. Prints the first\n"
            "step where their trajectories (loss, gradient norm, LR, root digest of the\n"
            "model and optimizer state) differ; when both have checkpoints, the last\n"
            "checkpoint where they agree, the tensors that differ at the first checkpoint\n"
            "after it, and a command that replays run A from the agreeing checkpoint.\n"
            "Runs recorded by the Python package (detcheck.Recorder) hold per-tensor\n"
            "digests instead of checkpoints: then the first differing tensor is named\n"
            "(state first: what the step started from, then gradients, parameters and\n"
            "optimizer state; model order in each).\n"
            "With per-step traces (trace.bin) in both, the first differing module or op\n"
            "of the first differing traced step, and whether its inputs were equal\n"
            "(the culprit) or already differed (inherited); a traced event after the\n"
            "first step whose trajectory or tensors differ is context, never the\n"
            "culprit. A recorded run's verdict ends with what would localise further\n"
            "(next: an op trace, or the dump of the first differing step).\n"
            "What one run holds and the other lacks (steps, root digests, recorded steps\n"
            "and state entries, traced steps, trace events past a truncation,\n"
            "checkpoints) is never agreement: each is named as not compared, and the\n"
            "exit status is 1 unless --allow-partial accepts them.\n"
            "\n"
            "Options:\n"
            "  --json        machine-readable result\n"
            "  --junit FILE  also a JUnit XML report (the trajectory, the first differing\n"
            "                recorded tensor, the first differing traced event, and a\n"
            "                test case per tensor of the first differing checkpoint)\n"
            "  --markdown FILE  also a Markdown summary ('-': stdout)\n"
            "  --html FILE   also a self-contained HTML page (curves, step x module grid)\n"
            "  --limit N     list at most N differing tensors (default 20, 0 = all)\n"
            "  --allow-partial  exit 0 when all that both runs hold agrees, though some\n"
            "                items were not compared (still named)\n"
            "  -q, --quiet   only the first differing step\n"
            "\n"
            "Exit status: 0 identical, 1 different, 2 trouble.\n");
}



/* The flags of run A's config, read from a checkpoint's config.train. */
static char *replay_flags(const char *run, long step) {
    char *dir = dck_ckpt_dir(run, step);
    char **shards = NULL;
    size_t ns = 0;
    dck_checkpoint *ck = NULL;
    char *json = NULL, *flags = NULL;
    dck_options opt;
    dck_options_init(&opt);
    opt.hash_files = 0;
    if (dir && !dck_ckpt_shards(dir, &shards, &ns) &&
        !dck_checkpoint_open((const char *const *)shards, ns, &opt, &ck)) {
        long i = dck_checkpoint_find(ck, "config.train");
        const dck_tensor_info *ti = i >= 0 ? dck_checkpoint_tensor(ck, (size_t)i) : NULL;
        if (ti && ti->dtype == DCK_U8 && ti->shape[0] < (1u << 20) &&
            (json = calloc(ti->shape[0] + 1, 1)) &&
            !dck_checkpoint_read(ck, (size_t)i, 0, json, ti->shape[0])) {
            dck_train_config c;
            dck_train_config_init(&c);
            /* what reproduces the trajectory: the stored identity, and the mode */
            if (!dck_train_config_from_json(&c, json, dir))
                flags = dck_train_config_flags(&c, DCK_TRAIN_NUMERICS);
        }
    }
    free(json);
    dck_checkpoint_free(ck);
    dck_free_strings(shards, ns);
    free(dir);
    return flags;
}

/* What one run holds and the other lacks (verdicts.md, classes 1 and 2):
 * never agreement. Each is named in the verdict ("not compared: ...", the
 * JSON's not_compared, a report case) and makes the exit 1 unless
 * --allow-partial accepts it. */
typedef struct {
    const char *item; /* trajectory_steps, roots, recorded_steps, recorded_state,
                         traced_steps, truncated_steps, checkpoints */
    char run;         /* the run that holds them ('A', 'B'); truncated_steps: the run that cut them */
    size_t count;
    long first, last;
    bool empty_side;  /* the other run holds none at all: an empty side is never agreement,
                         and --allow-partial does not accept it */
    char *line;       /* the text after "not compared: " (names as recorded; NULL: out of memory) */
} gap;

typedef struct {
    gap v[16]; /* seven items, two runs each */
    size_t n;
} gaps;

static gap *gap_add(gaps *g, const char *item, int k, size_t count, long first, long last, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
static gap *gap_add(gaps *g, const char *item, int k, size_t count, long first, long last, const char *fmt, ...) {
    if (!count || g->n == sizeof g->v / sizeof g->v[0]) return NULL;
    gap *x = &g->v[g->n++];
    *x = (gap){item, (char)('A' + k), count, first, last, false, NULL};
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&x->line, fmt, ap) < 0) x->line = NULL;
    va_end(ap);
    return x;
}

/* Whether --allow-partial (accept) lets every gap out of the verdict. */
static bool gaps_accepted(const gaps *g, bool accept) {
    for (size_t i = 0; i < g->n; i++)
        if (!accept || g->v[i].empty_side) return false;
    return true;
}

static const char *gap_line(const gap *x) { return x->line ? x->line : "(out of memory)"; }

static void gaps_release(gaps *g) {
    for (size_t i = 0; i < g->n; i++) free(g->v[i].line);
    g->n = 0;
}

/* "steps 5..6", "step 5", "3 steps from 1 to 9" (not consecutive) */
static void span(char *buf, size_t n, const char *noun, size_t count, long first, long last) {
    if (count == 1) snprintf(buf, n, "%s %ld", noun, first);
    else if ((unsigned long)(last - first) + 1 == count) snprintf(buf, n, "%ss %ld..%ld", noun, first, last);
    else snprintf(buf, n, "%zu %ss from %ld to %ld", count, noun, first, last);
}

/* Steps of a (ascending) that b (ascending) lacks: how many, the first
 * and last. */
static size_t only_in(const long *a, size_t na, const long *b, size_t nb, long *first, long *last) {
    size_t n = 0;
    for (size_t i = 0, j = 0; i < na; i++) {
        while (j < nb && b[j] < a[i]) j++;
        if (j < nb && b[j] == a[i]) continue;
        if (!n++) *first = a[i];
        *last = a[i];
    }
    return n;
}

/* The steps each of the two lists holds alone, as gaps named noun
 * ("recorded step"); why[k], when given, says why run k's list is empty. */
static void steps_gap(gaps *g, const char *item, const char *noun, const long *const v[2], const size_t n[2],
                      const char *const why[2]) {
    for (int k = 0; k < 2; k++) {
        long first = 0, last = 0;
        size_t c = only_in(v[k], n[k], v[1 - k], n[1 - k], &first, &last);
        char sp[128], why_s[160] = "";
        span(sp, sizeof sp, noun, c, first, last);
        if (why && why[1 - k] && !n[1 - k]) snprintf(why_s, sizeof why_s, " (run %c %s)", 'A' + (1 - k), why[1 - k]);
        gap *x = gap_add(g, item, k, c, first, last, "%s in run %c only%s", sp, 'A' + k, why_s);
        if (x) x->empty_side = n[1 - k] == 0;
    }
}

/* The step numbers of n records of size bytes whose long step is at off. */
static long *step_list(const void *recs, size_t n, size_t size, size_t off) {
    long *v = malloc((n ? n : 1) * sizeof *v);
    for (size_t i = 0; v && i < n; i++) memcpy(&v[i], (const char *)recs + i * size + off, sizeof *v);
    return v;
}

/* The first tensor whose recorded digests differ (both runs recorded). */
typedef struct {
    bool has[2]; /* tensor_digests.bin in run A, run B */
    bool both, found;
    size_t steps[2]; /* steps each recorded */
    size_t common;
    long step;
    int kind;
    const char *how;
    char name[DCK_REC_NAME_MAX + 1];
} rec_first;

/* Whether run dir holds path at all: a FIFO or a dangling link is there
 * (and refused when read, naming it), only ENOENT is absence. */
static bool present(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0 || errno != ENOENT;
}

/* Compares the runs' tensor_digests.bin when both have one; what one run
 * recorded and the other did not (a file in one run only, steps, state
 * entries) into g. Non-zero (and a message printed) on trouble. */
static int rec_compare(const char *const runs[2], rec_first *f, gaps *g) {
    memset(f, 0, sizeof *f);
    dck_recording r[2];
    memset(r, 0, sizeof r);
    char *p[2] = {dck_path_join(runs[0], DCK_RECORD_FILE), dck_path_join(runs[1], DCK_RECORD_FILE)};
    long *st[2] = {NULL, NULL};
    int rc = 0;
    if (!p[0] || !p[1]) {
        rc = cli_fail(CMD, dck_oom(NULL));
        goto out;
    }
    for (int k = 0; k < 2; k++) f->has[k] = present(p[k]);
    f->both = f->has[0] && f->has[1];
    for (int k = 0; k < 2 && !rc; k++) {
        dck_status s = f->has[k] ? dck_recording_load(p[k], &r[k]) : DCK_OK;
        if (!s && !(st[k] = step_list(r[k].steps, r[k].nsteps, sizeof *r[k].steps, offsetof(dck_rec_step, step))))
            s = dck_oom(NULL);
        if (s) rc = cli_fail(CMD, s);
        f->steps[k] = r[k].nsteps;
    }
    if (rc) goto out;
    /* a file in one run only, or one that holds no step: its steps are
     * the other run's alone (a run that recorded nothing agrees with none) */
    const char *why[2];
    for (int k = 0; k < 2; k++) why[k] = !f->has[k] ? "has no " DCK_RECORD_FILE : "recorded none";
    steps_gap(g, "recorded_steps", "recorded step", (const long *const *)st, f->steps, why);
    if (f->both) {
        dck_rec_state_only u;
        f->common = dck_recording_common_steps(&r[0], &r[1]);
        int c = dck_recording_compare(&r[0], &r[1], &f->step, &f->kind, f->name, sizeof f->name, &f->how);
        if (c >= 0 && !dck_recording_state_only(&r[0], &r[1], &u)) {
            for (int k = 0; k < 2; k++)
                gap_add(g, "recorded_state", k, u.count[k], u.step[k], u.last[k],
                        "%zu state entr%s in run %c only, at steps both recorded (first: step %ld, %s)", u.count[k],
                        u.count[k] == 1 ? "y" : "ies", 'A' + k, u.step[k], u.name[k] ? u.name[k] : "");
        } else {
            rc = cli_fail(CMD, dck_oom("comparing the recorded tensors"));
        }
        f->found = c > 0;
    }
out:
    dck_recording_release(&r[0]);
    dck_recording_release(&r[1]);
    free(st[0]);
    free(st[1]);
    free(p[0]);
    free(p[1]);
    return rc;
}

/* What dck_recording_compare's "how" means: after the tensor's name on
 * the terminal (suffix), and as a report's failure (what, type). */
static const struct {
    const char *how, *suffix, *what, *type;
} hows[] = {{"digest", "", "digest differs between run A and run B", "digest"},
            {"only in A", " (recorded in run A only)", "recorded in run A only", "only_in_a"},
            {"only in B", " (recorded in run B only)", "recorded in run B only", "only_in_b"}};

static size_t how_index(const rec_first *f) {
    for (size_t i = 0; i < sizeof hows / sizeof hows[0]; i++)
        if (!strcmp(f->how, hows[i].how)) return i;
    return 0;
}

static const char *rec_how(const rec_first *f) { return hows[how_index(f)].suffix; }

static void rec_print(const rec_first *f) {
    printf("first differing tensor: step %ld, %s %s%s\n", f->step, dck_rec_kind_name((dck_rec_kind)f->kind),
           cli_safe(f->name), rec_how(f));
}

/* The report's case for the recorded tensors: with a difference, one
 * failing case named after the first differing tensor (classname
 * detcheck.bisect.step_N.KIND, as the checkpoints' cases); a pass when
 * every common step agrees (skipped when there is none). Absent when one
 * run or neither was recorded
 * (what one run recorded alone is a "not compared" case). */
static void rec_report(cli_report *rep, const rec_first *f) {
    static const char *const kinds[DCK_REC_KIND_COUNT] = {"gradients", "parameters", "optimizer_state", "state"};
    char cls[128], msg[DCK_REC_NAME_MAX + 256];
    if (f->found) {
        size_t h = how_index(f);
        snprintf(cls, sizeof cls, "detcheck.bisect.step_%ld.%s", f->step,
                 (unsigned)f->kind < DCK_REC_KIND_COUNT ? kinds[f->kind] : "tensors");
        snprintf(msg, sizeof msg, "%s: first differing tensor, step %ld, %s: %s", f->name, f->step,
                 dck_rec_kind_name((dck_rec_kind)f->kind), hows[h].what);
        cli_report_case(rep, cls, f->name, CLI_CASE_FAIL, hows[h].type, msg, NULL);
    } else if (f->both && f->common) {
        snprintf(msg, sizeof msg, "%zu recorded step%s in both agree tensor by tensor", f->common,
                 f->common == 1 ? "" : "s");
        cli_report_case(rep, "detcheck.bisect", "recorded tensors", CLI_CASE_PASS, NULL, msg, NULL);
    } else if (f->both) { /* nothing passed over nothing */
        cli_report_case(rep, "detcheck.bisect", "recorded tensors", CLI_CASE_SKIPPED, NULL,
                        "no step recorded in both: the tensors are not compared", NULL);
    }
}

int cmd_bisect(int argc, char **argv) {
    bool json = false, allow_partial = false;
    long limit = 20;
    const char *runs[2] = {NULL, NULL};
    int nruns = 0, used = 0, rep_arg;
    cli_report rep;
    cli_report_init(&rep, CMD);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--allow-partial")) {
            allow_partial = true;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            cli_quiet = true;
        } else if (!strcmp(a, "--limit")) {
            if (i + 1 >= argc || !cli_parse_long(argv[++i], 0, 1000000000, &limit))
                return cli_usage_error(CMD, "--limit needs a number");
        } else if ((rep_arg = cli_report_arg(&rep, a, i + 1 < argc ? argv[i + 1] : NULL, &used))) {
            if (rep_arg < 0) return DCK_EXIT_TROUBLE;
            i += used;
        } else if (a[0] == '-' && a[1]) {
            return cli_usage_error(CMD, "unknown option '%s'", a);
        } else if (nruns < 2) {
            runs[nruns++] = a;
        } else {
            return cli_usage_error(CMD, "unexpected argument '%s'", a);
        }
    }
    if (nruns != 2) return cli_usage_error(CMD, "needs two run directories");
    if (cli_report_check(&rep, json, runs, 2)) return DCK_EXIT_TROUBLE;

    dck_traj_rec *tr[2] = {NULL, NULL};
    size_t nt[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        struct stat st;
        if (stat(runs[k], &st) != 0 || !S_ISDIR(st.st_mode)) {
            cli_error(CMD, "%s: not a directory", runs[k]);
            free(tr[0]);
            return DCK_EXIT_TROUBLE;
        }
        char *p = dck_path_join(runs[k], DCK_TRAJECTORY);
        dck_status s = dck_traj_load(p, &tr[k], &nt[k]);
        free(p);
        if (s) {
            free(tr[0]);
            return cli_fail(CMD, s);
        }
        /* A run's records are one per step, consecutive from its first: a
         * missing step or an empty file would otherwise read as agreement. */
        const char *bad = nt[k] == 0 ? "has no records" : NULL;
        long gap = 0;
        for (size_t r = 1; r < nt[k] && !bad; r++)
            if (tr[k][r].step != tr[k][r - 1].step + 1) {
                bad = "has a gap";
                gap = tr[k][r - 1].step + 1;
            }
        if (bad) {
            if (gap) cli_error(CMD, "%s/%s %s: step %ld is missing", runs[k], DCK_TRAJECTORY, bad, gap);
            else cli_error(CMD, "%s/%s %s", runs[k], DCK_TRAJECTORY, bad);
            free(tr[0]);
            free(tr[1]);
            return DCK_EXIT_TROUBLE;
        }
    }
    if (tr[0][nt[0] - 1].step < tr[1][0].step || tr[1][nt[1] - 1].step < tr[0][0].step) {
        cli_error(CMD, "%s and %s have no step in common (steps %ld..%ld and %ld..%ld)", runs[0], runs[1],
                  tr[0][0].step, tr[0][nt[0] - 1].step, tr[1][0].step, tr[1][nt[1] - 1].step);
        free(tr[0]);
        free(tr[1]);
        return DCK_EXIT_TROUBLE;
    }
    long step = -1;
    char what[1024] = "";
    int traj_diff = dck_traj_compare(tr[0], nt[0], tr[1], nt[1], &step, what, sizeof what);
    long last[2] = {nt[0] ? tr[0][nt[0] - 1].step : 0, nt[1] ? tr[1][nt[1] - 1].step : 0};
    gaps g;
    memset(&g, 0, sizeof g);
    cli_trace_first trf;
    memset(&trf, 0, sizeof trf);
    long *cs[2] = {NULL, NULL}, *common = NULL;
    size_t nc[2] = {0, 0}, ncommon = 0;
    dck_manifest *ma = NULL, *mb = NULL;
    long agree = -1, differ = -1;
    dck_cmp_result diff;
    memset(&diff, 0, sizeof diff);
    int rc = DCK_EXIT_SAME;
    char *next = NULL; /* what would localise further: "next: ...", or "" */
    rec_first recf;
    /* steps in one trajectory only, and root digests one run recorded at
     * a step both ran: not compared (dck_traj_compare compares a root
     * where both have one) */
    long *ts[2] = {step_list(tr[0], nt[0], sizeof *tr[0], offsetof(dck_traj_rec, step)),
                   step_list(tr[1], nt[1], sizeof *tr[1], offsetof(dck_traj_rec, step))};
    if (ts[0] && ts[1]) steps_gap(&g, "trajectory_steps", "trajectory step", (const long *const *)ts, nt, NULL);
    free(ts[0]);
    free(ts[1]);
    if (!ts[0] || !ts[1]) {
        rc = cli_fail(CMD, dck_oom(NULL));
        goto traj_out;
    }
    size_t nroot[2] = {0, 0};
    long root_first[2] = {0, 0}, root_last[2] = {0, 0};
    for (size_t i = 0, j = 0; i < nt[0] && j < nt[1];) {
        if (tr[0][i].step != tr[1][j].step) {
            tr[0][i].step < tr[1][j].step ? i++ : j++;
            continue;
        }
        if (tr[0][i].has_root != tr[1][j].has_root) {
            int k = tr[0][i].has_root ? 0 : 1;
            if (!nroot[k]++) root_first[k] = tr[0][i].step;
            root_last[k] = tr[0][i].step;
        }
        i++;
        j++;
    }
    for (int k = 0; k < 2; k++) {
        char sp[128];
        span(sp, sizeof sp, "step", nroot[k], root_first[k], root_last[k]);
        gap_add(&g, "roots", k, nroot[k], root_first[k], root_last[k],
                "root digests at %s in run %c only (run %c recorded none there)", sp, 'A' + k, 'B' - k);
    }
    /* recorded runs: per-tensor digests next to the trajectory */
    if (rec_compare(runs, &recf, &g)) {
        rc = DCK_EXIT_TROUBLE;
        goto traj_out;
    }
    /* traced runs: per-event digests of traced steps; a trace in one run
     * only is read too, for the steps it holds alone */
    if (cli_trace_compare(CMD, runs, &trf)) {
        rc = DCK_EXIT_TROUBLE;
        goto traj_out;
    }
    if (trf.has[0] || trf.has[1]) {
        long *v[2] = {NULL, NULL};
        size_t n[2];
        const char *why[2];
        dck_status s = DCK_OK;
        for (int k = 0; k < 2 && !s; k++) {
            if (trf.has[k] && !trf.both) {
                char *p = dck_path_join(runs[k], DCK_TRACE_FILE);
                s = p ? dck_trace_load(p, &trf.t[k]) : dck_oom(NULL);
                free(p);
            }
            why[k] = !trf.has[k] ? "has no " DCK_TRACE_FILE : "traced none";
            n[k] = trf.t[k].nsteps;
            if (!s && !(v[k] = step_list(trf.t[k].steps, n[k], sizeof *trf.t[k].steps, offsetof(dck_trace_step, step))))
                s = dck_oom(NULL);
        }
        if (!s) steps_gap(&g, "traced_steps", "traced step", (const long *const *)v, n, why);
        free(v[0]);
        free(v[1]);
        if (s) {
            rc = cli_fail(CMD, s);
            goto traj_out;
        }
        /* a step the recorder cut short: its events past the bound were
         * never compared, in whichever run */
        size_t ncut[2] = {0, 0};
        long cut_first[2] = {0, 0}, cut_last[2] = {0, 0};
        const dck_trace *t = trf.t;
        for (size_t i = 0, j = 0; i < t[0].nsteps && j < t[1].nsteps;) {
            const dck_trace_step *x[2] = {&t[0].steps[i], &t[1].steps[j]};
            if (x[0]->step != x[1]->step) {
                x[0]->step < x[1]->step ? i++ : j++;
                continue;
            }
            for (int k = 0; k < 2; k++)
                if (x[k]->truncated) {
                    if (!ncut[k]++) cut_first[k] = x[k]->step;
                    cut_last[k] = x[k]->step;
                }
            i++;
            j++;
        }
        for (int k = 0; k < 2; k++) {
            char sp[128];
            span(sp, sizeof sp, "traced step", ncut[k], cut_first[k], cut_last[k]);
            gap_add(&g, "truncated_steps", k, ncut[k], cut_first[k], cut_last[k],
                    "events past the recorder's bound in %s, which run %c truncated", sp, 'A' + k);
        }
    }
traj_out:
    free(tr[0]);
    free(tr[1]);
    if (rc) goto out;
    /* one step for every line: the earliest where anything recorded
     * differs (trajectory, tensors, trace); the trace's own difference is
     * judged against the trajectory's and the tensors' (a culprit never
     * comes after the runs already parted) */
    long first = traj_diff ? step : -1;
    if (recf.found && (first < 0 || recf.step < first)) first = recf.step;
    bool tensor_first = recf.found && recf.step == first;
    if (cli_trace_judge(CMD, &trf, first, tensor_first ? recf.kind : -1, tensor_first ? recf.name : NULL)) {
        rc = DCK_EXIT_TROUBLE;
        goto out;
    }
    if (trf.found && (first < 0 || trf.d.step < first)) first = trf.d.step;
    /* what parts at it, when the trajectories part later */
    const char *first_what = !traj_diff || step == first ? NULL : tensor_first ? "a recorded tensor" : "a traced event";

    /* checkpoints in both runs, ascending; those in one run only are not
     * compared */
    for (int k = 0; k < 2; k++) {
        dck_status s = dck_ckpt_list(runs[k], &cs[k], &nc[k], NULL, NULL);
        if (s) {
            rc = cli_fail(CMD, s);
            goto out;
        }
    }
    const char *const no_ckpt[2] = {"has none", "has none"};
    steps_gap(&g, "checkpoints", "checkpoint", (const long *const *)cs, nc, no_ckpt);
    if (!(common = malloc((nc[0] ? nc[0] : 1) * sizeof *common))) {
        rc = cli_fail(CMD, dck_oom(NULL));
        goto out;
    }
    for (size_t i = 0, j = 0; i < nc[0] && j < nc[1];) {
        if (cs[0][i] < cs[1][j])
            i++;
        else if (cs[1][j] < cs[0][i])
            j++;
        else {
            common[ncommon++] = cs[0][i];
            i++;
            j++;
        }
    }
    /* walk the common checkpoints: the last agreeing one before the
     * divergence, the first differing one at or after it */
    for (size_t i = 0; i < ncommon; i++) {
        dck_manifest *a = NULL, *b = NULL;
        dck_status s = dck_ckpt_manifest_load(runs[0], common[i], &a);
        if (!s) s = dck_ckpt_manifest_load(runs[1], common[i], &b);
        dck_cmp_result r;
        if (!s) s = dck_manifest_compare(a, b, 0, &r);
        if (s) {
            dck_manifest_free(a);
            dck_manifest_free(b);
            rc = cli_fail(CMD, s);
            goto out;
        }
        if (r.n == 0) {
            dck_cmp_result_release(&r);
            dck_manifest_free(a);
            dck_manifest_free(b);
            if (traj_diff && common[i] >= step) continue; /* bits agree, trajectory does not */
            agree = common[i];
            continue;
        }
        differ = common[i];
        ma = a;
        mb = b;
        diff = r;
        break;
    }
    /* a difference found; or items not compared, which only
     * --allow-partial accepts */
    bool found = traj_diff || differ >= 0 || recf.found || trf.found;
    bool accepted = gaps_accepted(&g, allow_partial);
    bool different = found || !accepted;
    char *flags = NULL, replay[8192] = "";
    if (found) {
        long target = differ >= 0 ? differ : step;
        if (agree >= 0 && (flags = replay_flags(runs[0], agree))) {
            char *d = dck_ckpt_dir(runs[0], agree);
            snprintf(replay, sizeof replay,
                     "detcheck train %s --resume-from %s --steps %ld --ckpt-every 1 --out REPLAY_DIR",
                     flags, d, target);
            free(d);
        } else if (differ >= 0 && (flags = replay_flags(runs[0], differ))) {
            snprintf(replay, sizeof replay,
                     "detcheck train %s --steps %ld --ckpt-every 1 --out REPLAY_DIR", flags, target);
        }
        free(flags);
    }
    /* what would localise further (recorded runs: train's runs, with
     * checkpoints, have their replay); the last line of the verdict */
    char next_option[64];
    next = found && !replay[0] && !nc[0] && !nc[1] ? cli_trace_next_line(&trf, runs) : strdup("");
    if (!next) {
        rc = cli_fail(CMD, dck_oom(NULL));
        goto out;
    }
    cli_trace_next_option(&trf, next_option, sizeof next_option);
    if (!next[0]) next_option[0] = 0;
    if (json) {
        bool oom = false;
        json_t *o = json_object(), *steps = json_array(), *tensors = json_array();
        cli_jset(o, "identical", json_boolean(!different), &oom);
        cli_jappend(steps, json_integer(last[0]), &oom);
        cli_jappend(steps, json_integer(last[1]), &oom);
        cli_jset(o, "steps", steps, &oom);
        cli_jset(o, "first_step", traj_diff ? json_integer(step) : json_null(), &oom);
        cli_jset(o, "detail", traj_diff ? cli_json_text(what) : json_null(), &oom);
        /* one step for every line: the earliest where the trajectory, a
         * recorded tensor or a traced event differs, and which */
        cli_jset(o, "first_differing_step", first >= 0 ? json_integer(first) : json_null(), &oom);
        cli_jset(o, "first_differing",
                 first < 0                          ? json_null()
                 : traj_diff && step == first       ? json_string("trajectory")
                 : recf.found && recf.step == first ? json_string("tensor")
                                                    : json_string("event"),
                 &oom);
        cli_jset(o, "checkpoints_in_both", cli_json_u64(ncommon), &oom);
        cli_jset(o, "last_agreeing_checkpoint", agree >= 0 ? json_integer(agree) : json_null(), &oom);
        cli_jset(o, "first_differing_checkpoint", differ >= 0 ? json_integer(differ) : json_null(), &oom);
        for (size_t i = 0; differ >= 0 && i < diff.n; i++) {
            json_t *t = json_object();
            cli_jset(t, "name", cli_json_text(diff.entries[i].name), &oom);
            cli_jset(t, "kind", json_string(dck_cmp_kind_name(diff.entries[i].kind)), &oom);
            cli_jappend(tensors, t, &oom);
        }
        cli_jset(o, "tensors", tensors, &oom);
        cli_jset(o, "replay", replay[0] ? cli_json_text(replay) : json_null(), &oom);
        if (recf.has[0] || recf.has[1]) { /* recorded runs only: the document of train runs is unchanged */
            json_t *rs = json_array();
            cli_jappend(rs, cli_json_u64(recf.steps[0]), &oom);
            cli_jappend(rs, cli_json_u64(recf.steps[1]), &oom);
            cli_jset(o, "recorded_steps", rs, &oom);
            cli_jset(o, "recorded_steps_in_both", cli_json_u64(recf.common), &oom);
            json_t *ft = recf.found ? json_object() : json_null();
            if (recf.found) {
                cli_jset(ft, "step", json_integer(recf.step), &oom);
                cli_jset(ft, "kind", json_string(dck_rec_kind_name((dck_rec_kind)recf.kind)), &oom);
                cli_jset(ft, "name", cli_json_text(recf.name), &oom);
                cli_jset(ft, "how", json_string(recf.how), &oom);
            }
            cli_jset(o, "first_tensor", ft, &oom);
        }
        if (trf.both) { /* traced runs only */
            json_t *tc = json_array();
            cli_jappend(tc, cli_json_u64(trf.d.truncated[0]), &oom);
            cli_jappend(tc, cli_json_u64(trf.d.truncated[1]), &oom);
            cli_jset(o, "traced_steps_in_both", cli_json_u64(trf.d.common), &oom);
            cli_jset(o, "traced_steps_truncated", tc, &oom);
            cli_jset(o, "first_event", cli_trace_json(&trf, &oom), &oom);
            cli_jset(o, "trace_unseen", trf.unseen ? cli_json_text(trf.unseen) : json_null(), &oom);
        }
        /* what one run holds and the other lacks: "identical" is false
         * when any is here, unless --allow-partial accepted them */
        json_t *nc_ = json_array();
        for (size_t i = 0; i < g.n; i++) {
            json_t *x = json_object();
            char run[2] = {g.v[i].run, 0};
            cli_jset(x, "item", json_string(g.v[i].item), &oom);
            cli_jset(x, "run", json_string(run), &oom);
            cli_jset(x, "count", cli_json_u64(g.v[i].count), &oom);
            cli_jset(x, "first", json_integer(g.v[i].first), &oom);
            cli_jset(x, "last", json_integer(g.v[i].last), &oom);
            cli_jset(x, "empty_side", json_boolean(g.v[i].empty_side), &oom);
            cli_jset(x, "detail", cli_json_text(gap_line(&g.v[i])), &oom);
            cli_jappend(nc_, x, &oom);
        }
        cli_jset(o, "not_compared", nc_, &oom);
        cli_jset(o, "partial_accepted", json_boolean(g.n && accepted), &oom);
        cli_jset(o, "next", next[0] ? cli_json_text(next) : json_null(), &oom);
        cli_jset(o, "next_option", next_option[0] ? json_string(next_option) : json_null(), &oom);
        dck_status s = cli_json_print(o, CLI_JSON_COMPACT, oom);
        if (s) {
            rc = cli_fail(CMD, s);
            goto out;
        }
    } else if (!found) {
        /* "identical" only when everything was compared */
        printf("%s: %ld and %ld steps agree bit for bit",
               !g.n ? "identical" : accepted ? "identical where both runs hold data (--allow-partial)" : "incomplete",
               last[0], last[1]);
        printf("; %zu checkpoint%s in both agree", ncommon, ncommon == 1 ? "" : "s");
        if (recf.both) printf("; %zu recorded step%s agree tensor by tensor", recf.common, recf.common == 1 ? "" : "s");
        if (trf.both) printf("; %zu traced step%s agree event by event", trf.d.common, trf.d.common == 1 ? "" : "s");
        printf("\n");
        for (size_t i = 0; i < g.n; i++) printf("not compared: %s\n", cli_safe(gap_line(&g.v[i])));
    } else {
        if (traj_diff && !first_what)
            printf("first differing step: %ld (%s)\n", step, cli_safe_line(what));
        else if (traj_diff)
            printf("first differing step: %ld (%s; the trajectories part at step %ld: %s)\n", first, first_what, step,
                   cli_safe_line(what));
        else if (differ >= 0)
            printf("trajectories agree; the checkpoints do not\n");
        else if (recf.found)
            printf("trajectories agree; the recorded tensors do not\n");
        else
            printf("trajectories agree; the traced steps do not\n");
        if (recf.found) rec_print(&recf);
        if (trf.unseen) printf("%s\n", trf.safe_unseen);
        if (trf.found) printf("%s\n", trf.safe_line);
        if (!cli_quiet) {
            if (trf.found && trf.magnitudes[0]) printf("%s\n", cli_safe_line(trf.magnitudes));
            if (trf.both)
                printf("traced steps in both: %zu, %zu agree%s\n", trf.d.common, trf.d.agreeing,
                       trf.found ? " before the first differing one" : "");
            printf("checkpoints in both: %zu\n", ncommon);
            if (agree >= 0)
                printf("last agreeing checkpoint: step %ld\n", agree);
            else if (ncommon)
                printf("last agreeing checkpoint: none\n");
            if (differ >= 0) {
                printf("first differing checkpoint: step %ld, %zu of %zu tensors differ:\n", differ,
                       diff.n, diff.tensors_compared);
                for (size_t i = 0; i < diff.n && (limit == 0 || i < (size_t)limit); i++)
                    printf("  %s (%s)\n", cli_safe(diff.entries[i].name), dck_cmp_kind_name(diff.entries[i].kind));
                if (limit && diff.n > (size_t)limit) printf("  ... %zu more\n", diff.n - (size_t)limit);
            }
            if (replay[0]) printf("replay: %s\n", cli_safe_line(replay));
            for (size_t i = 0; i < g.n; i++) printf("not compared: %s\n", cli_safe(gap_line(&g.v[i])));
            if (next[0]) printf("%s\n", cli_safe_line(next));
        }
    }
    if (cli_report_wanted(&rep)) {
        /* The report states the verdict of the exit status: every reason
         * bisect has for exit 1 (the trajectory, a checkpoint, a recorded
         * tensor) is a failing case, and the title names the first of each. */
        char msg[1200], pre[64], tensor[DCK_REC_NAME_MAX + 256] = "";
        /* the traced event's line, whole (its names have no bound) */
        const char *event_sep = trf.found ? "; " : "", *event = trf.found ? trf.line : "";
        const char *unseen_sep = trf.unseen ? "; " : "", *unseen = trf.unseen ? trf.unseen : "";
        cli_report_property(&rep, "run_a", runs[0]);
        cli_report_property(&rep, "run_b", runs[1]);
        if (replay[0]) cli_report_property(&rep, "replay", replay);
        if (next[0]) cli_report_property(&rep, "next", next);
        if (recf.found)
            snprintf(tensor, sizeof tensor, "; first differing tensor: step %ld, %s %s%s", recf.step,
                     dck_rec_kind_name((dck_rec_kind)recf.kind), recf.name, rec_how(&recf));
        if (!found && !g.n)
            cli_report_title(&rep, "identical");
        else if (!found)
            cli_report_title(&rep, "%s; not compared: %s%s",
                             accepted ? "identical where both runs hold data (--allow-partial)" : "incomplete",
                             gap_line(&g.v[0]), g.n > 1 ? " (and more)" : "");
        else if (traj_diff && !first_what)
            cli_report_title(&rep, "the runs part: first differing step %ld (%s)%s%s%s%s%s", step, what, tensor,
                             unseen_sep, unseen, event_sep, event);
        else if (traj_diff)
            cli_report_title(&rep, "the runs part: first differing step %ld (%s; the trajectories part at step %ld: %s)%s%s%s%s%s",
                             first, first_what, step, what, tensor, unseen_sep, unseen, event_sep, event);
        else if (differ >= 0)
            cli_report_title(&rep, "trajectories agree; the checkpoints do not (first differing checkpoint: step %ld)%s%s%s",
                             differ, tensor, event_sep, event);
        else if (recf.found)
            cli_report_title(&rep, "trajectories agree; the recorded tensors do not%s%s%s%s%s", tensor, unseen_sep,
                             unseen, event_sep, event);
        else
            cli_report_title(&rep, "trajectories agree; the traced steps do not%s%s", event_sep, event);
        snprintf(msg, sizeof msg, "first differing step %ld: %s", step, what);
        cli_report_case(&rep, "detcheck.bisect", "trajectory", traj_diff ? CLI_CASE_FAIL : CLI_CASE_PASS,
                        "trajectory", traj_diff ? msg : NULL, NULL);
        rec_report(&rep, &recf);
        cli_trace_report(&rep, "detcheck.bisect", &trf);
        for (size_t i = 0; i < g.n; i++) {
            char nm[64];
            snprintf(nm, sizeof nm, "not compared: %s", g.v[i].item);
            bool ok = allow_partial && !g.v[i].empty_side;
            cli_report_case(&rep, "detcheck.bisect", nm, ok ? CLI_CASE_SKIPPED : CLI_CASE_FAIL,
                            "not_compared", gap_line(&g.v[i]), NULL);
        }
        if (differ >= 0) {
            snprintf(pre, sizeof pre, "detcheck.bisect.step_%ld", differ);
            cli_report_compare(&rep, pre, ma, &diff, "run A", "run B");
        }
        if (rep.html) {
            /* the figure reads the runs again, traces included: the cases
             * hold copies of what they name, so these can go first */
            const cli_html_run pair[2] = {{runs[0], "run A"}, {runs[1], "run B"}};
            const char *lines[sizeof g.v / sizeof g.v[0]];
            for (size_t i = 0; i < g.n; i++) lines[i] = gap_line(&g.v[i]);
            const cli_html_unpaired unpaired = {lines, g.n, !accepted};
            cli_trace_release(&trf);
            cli_report_figure(&rep, cli_html_runs_figure_unpaired(CMD, pair, &unpaired));
        }
        if (cli_report_finish(&rep, different ? DCK_EXIT_DIFFERENT : DCK_EXIT_SAME)) {
            rc = DCK_EXIT_TROUBLE;
            goto out;
        }
    }
    rc = different ? DCK_EXIT_DIFFERENT : DCK_EXIT_SAME;
out:
    free(next);
    cli_trace_release(&trf);
    gaps_release(&g);
    free(cs[0]);
    free(cs[1]);
    free(common);
    if (differ >= 0) dck_cmp_result_release(&diff);
    dck_manifest_free(ma);
    dck_manifest_free(mb);
    return rc;
}

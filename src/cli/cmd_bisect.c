/* detcheck bisect: where two runs of `detcheck train` part. The first step
 * whose trajectory records differ; with checkpoints, the last one where both
 * runs agree, the tensors that differ at the first one after (model order),
 * and the command that replays the divergence from the agreeing checkpoint.
 * See man/detcheck-bisect.1. */
#include "train_cli.h"
#include "cli_report.h"
#include "cli_html.h"
#include "train/train_record.h"
#include "cli_trace.h"

#include <errno.h>
#include <stdarg.h>
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
            "optimizer state; model order in each; a state entry recorded in one run only\n"
            "is no difference).\n"
            "With per-step traces (trace.bin) in both, the first differing module or op\n"
            "of the first differing traced step, and whether its inputs were equal\n"
            "(the culprit) or already differed (inherited).\n"
            "\n"
            "Options:\n"
            "  --json        machine-readable result\n"
            "  --junit FILE  also a JUnit XML report (the trajectory, the first differing\n"
            "                recorded tensor, the first differing traced event, and a\n"
            "                test case per tensor of the first differing checkpoint)\n"
            "  --markdown FILE  also a Markdown summary ('-': stdout)\n"
            "  --html FILE   also a self-contained HTML page (curves, step x module grid)\n"
            "  --limit N     list at most N differing tensors (default 20, 0 = all)\n"
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

/* The first tensor whose recorded digests differ (both runs recorded). */
typedef struct {
    bool has[2]; /* tensor_digests.bin in run A, run B */
    bool both, found;
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

/* Compares the runs' tensor_digests.bin when both have one; non-zero (and
 * a message printed) on trouble. */
static int rec_compare(const char *const runs[2], rec_first *f) {
    memset(f, 0, sizeof *f);
    dck_recording r[2];
    memset(r, 0, sizeof r);
    char *p[2] = {dck_path_join(runs[0], DCK_RECORD_FILE), dck_path_join(runs[1], DCK_RECORD_FILE)};
    int rc = 0;
    if (!p[0] || !p[1]) {
        rc = cli_fail(CMD, dck_oom(NULL));
        goto out;
    }
    for (int k = 0; k < 2; k++) f->has[k] = present(p[k]);
    f->both = f->has[0] && f->has[1];
    if (f->has[0] != f->has[1]) {
        /* nothing to compare them with: said, so that agreement of the
         * trajectories is not taken for agreement of the tensors */
        cli_warn(CMD, "%s: recorded in run %c only; the tensors are not compared", p[f->has[0] ? 0 : 1],
                 f->has[0] ? 'A' : 'B');
    } else if (f->both) {
        dck_status s = dck_recording_load(p[0], &r[0]);
        if (!s) s = dck_recording_load(p[1], &r[1]);
        if (s) {
            rc = cli_fail(CMD, s);
        } else {
            f->common = dck_recording_common_steps(&r[0], &r[1]);
            int c = dck_recording_compare(&r[0], &r[1], &f->step, &f->kind, f->name, sizeof f->name, &f->how);
            if (c < 0) rc = cli_fail(CMD, dck_oom("comparing the recorded tensors"));
            f->found = c > 0;
        }
    }
out:
    dck_recording_release(&r[0]);
    dck_recording_release(&r[1]);
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
 * every common step agrees; skipped when one run only was recorded. Absent
 * when neither was (runs of detcheck train). */
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
    } else if (f->both) {
        snprintf(msg, sizeof msg, "%zu recorded step%s in both agree tensor by tensor", f->common,
                 f->common == 1 ? "" : "s");
        cli_report_case(rep, "detcheck.bisect", "recorded tensors", CLI_CASE_PASS, NULL, msg, NULL);
    } else if (f->has[0] || f->has[1]) {
        snprintf(msg, sizeof msg, "%s recorded in run %c only: the tensors are not compared", DCK_RECORD_FILE,
                 f->has[0] ? 'A' : 'B');
        cli_report_case(rep, "detcheck.bisect", "recorded tensors", CLI_CASE_SKIPPED, NULL, msg, NULL);
    }
}

int cmd_bisect(int argc, char **argv) {
    bool json = false;
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
    /* recorded runs: per-tensor digests next to the trajectory */
    rec_first recf;
    if (rec_compare(runs, &recf)) {
        free(tr[0]);
        free(tr[1]);
        return DCK_EXIT_TROUBLE;
    }
    /* traced runs: per-event digests of traced steps */
    cli_trace_first trf;
    if (cli_trace_compare(CMD, runs, &trf)) {
        free(tr[0]);
        free(tr[1]);
        return DCK_EXIT_TROUBLE;
    }
    free(tr[0]);
    free(tr[1]);

    /* checkpoints in both runs, ascending */
    long *cs[2] = {NULL, NULL};
    size_t nc[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        dck_status s = dck_ckpt_list(runs[k], &cs[k], &nc[k], NULL, NULL);
        if (s) {
            free(cs[0]);
            cli_trace_release(&trf);
            return cli_fail(CMD, s);
        }
    }
    long common[4096];
    size_t ncommon = 0;
    for (size_t i = 0, j = 0; i < nc[0] && j < nc[1] && ncommon < 4096;) {
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
    free(cs[0]);
    free(cs[1]);
    /* walk the common checkpoints: the last agreeing one before the
     * divergence, the first differing one at or after it */
    long agree = -1, differ = -1;
    dck_manifest *ma = NULL, *mb = NULL;
    dck_cmp_result diff;
    memset(&diff, 0, sizeof diff);
    int rc = DCK_EXIT_SAME;
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
    bool different = traj_diff || differ >= 0 || recf.found || trf.found;
    char *flags = NULL, replay[8192] = "";
    if (different) {
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
    if (json) {
        bool oom = false;
        json_t *o = json_object(), *steps = json_array(), *tensors = json_array();
        cli_jset(o, "identical", json_boolean(!different), &oom);
        cli_jappend(steps, json_integer(last[0]), &oom);
        cli_jappend(steps, json_integer(last[1]), &oom);
        cli_jset(o, "steps", steps, &oom);
        cli_jset(o, "first_step", traj_diff ? json_integer(step) : json_null(), &oom);
        cli_jset(o, "detail", traj_diff ? cli_json_text(what) : json_null(), &oom);
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
        if (recf.both) { /* recorded runs only: the document of train runs is unchanged */
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
        }
        dck_status s = cli_json_print(o, CLI_JSON_COMPACT, oom);
        if (s) {
            rc = cli_fail(CMD, s);
            goto out;
        }
    } else if (!different) {
        printf("identical: %ld and %ld steps agree bit for bit", last[0], last[1]);
        if (last[0] != last[1]) printf(" (over the %ld steps both ran)", last[0] < last[1] ? last[0] : last[1]);
        printf("; %zu checkpoint%s in both agree", ncommon, ncommon == 1 ? "" : "s");
        if (recf.both) printf("; %zu recorded step%s agree tensor by tensor", recf.common, recf.common == 1 ? "" : "s");
        if (trf.both) printf("; %zu traced step%s agree event by event", trf.d.common, trf.d.common == 1 ? "" : "s");
        printf("\n");
    } else {
        if (traj_diff)
            printf("first differing step: %ld (%s)\n", step, cli_safe_line(what));
        else if (differ >= 0)
            printf("trajectories agree; the checkpoints do not\n");
        else if (recf.found)
            printf("trajectories agree; the recorded tensors do not\n");
        else
            printf("trajectories agree; the traced steps do not\n");
        if (recf.found) rec_print(&recf);
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
        }
    }
    if (cli_report_wanted(&rep)) {
        /* The report states the verdict of the exit status: every reason
         * bisect has for exit 1 (the trajectory, a checkpoint, a recorded
         * tensor) is a failing case, and the title names the first of each. */
        char msg[1200], pre[64], tensor[DCK_REC_NAME_MAX + 256] = "", event[4200] = "";
        cli_report_property(&rep, "run_a", runs[0]);
        cli_report_property(&rep, "run_b", runs[1]);
        if (replay[0]) cli_report_property(&rep, "replay", replay);
        if (recf.found)
            snprintf(tensor, sizeof tensor, "; first differing tensor: step %ld, %s %s%s", recf.step,
                     dck_rec_kind_name((dck_rec_kind)recf.kind), recf.name, rec_how(&recf));
        if (trf.found) snprintf(event, sizeof event, "; %s", trf.line);
        if (!different)
            cli_report_title(&rep, "identical");
        else if (traj_diff)
            cli_report_title(&rep, "the runs part: first differing step %ld (%s)%s%s", step, what, tensor, event);
        else if (differ >= 0)
            cli_report_title(&rep, "trajectories agree; the checkpoints do not (first differing checkpoint: step %ld)%s%s",
                             differ, tensor, event);
        else if (recf.found)
            cli_report_title(&rep, "trajectories agree; the recorded tensors do not%s%s", tensor, event);
        else
            cli_report_title(&rep, "trajectories agree; the traced steps do not%s", event);
        snprintf(msg, sizeof msg, "first differing step %ld: %s", step, what);
        cli_report_case(&rep, "detcheck.bisect", "trajectory", traj_diff ? CLI_CASE_FAIL : CLI_CASE_PASS,
                        "trajectory", traj_diff ? msg : NULL, NULL);
        rec_report(&rep, &recf);
        cli_trace_report(&rep, "detcheck.bisect", &trf);
        if (differ >= 0) {
            snprintf(pre, sizeof pre, "detcheck.bisect.step_%ld", differ);
            cli_report_compare(&rep, pre, ma, &diff, "run A", "run B");
        }
        if (rep.html) {
            /* the figure reads the runs again, traces included: the cases
             * hold copies of what they name, so these can go first */
            const cli_html_run pair[2] = {{runs[0], "run A"}, {runs[1], "run B"}};
            cli_trace_release(&trf);
            cli_report_figure(&rep, cli_html_runs_figure(CMD, pair));
        }
        if (cli_report_finish(&rep, different ? DCK_EXIT_DIFFERENT : DCK_EXIT_SAME)) {
            rc = DCK_EXIT_TROUBLE;
            goto out;
        }
    }
    rc = different ? DCK_EXIT_DIFFERENT : DCK_EXIT_SAME;
out:
    cli_trace_release(&trf);
    if (differ >= 0) dck_cmp_result_release(&diff);
    dck_manifest_free(ma);
    dck_manifest_free(mb);
    return rc;
}

/* detcheck bisect: where two runs of `detcheck train` part. The first step
 * whose trajectory records differ; with checkpoints, the last one where both
 * runs agree, the tensors that differ at the first one after (model order),
 * and the command that replays the divergence from the agreeing checkpoint.
 * See man/detcheck-bisect.1. */
#include "train_cli.h"
#include "cli_report.h"
#include "train/train_record.h"

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
            "(gradients, then parameters, then optimizer state; model order in each).\n"
            "\n"
            "Options:\n"
            "  --json        machine-readable result\n"
            "  --junit FILE  also a JUnit XML report (the trajectory, and a test case per\n"
            "                tensor of the first differing checkpoint)\n"
            "  --markdown FILE  also a Markdown summary ('-': stdout)\n"
            "  --limit N     list at most N differing tensors (default 20, 0 = all)\n"
            "  -q, --quiet   only the first differing step\n"
            "\n"
            "Exit status: 0 identical, 1 different, 2 trouble.\n");
}


static dck_status load_manifest(const char *run, long step, dck_manifest **out) {
    char *d = dck_ckpt_dir(run, step);
    char *p = d ? dck_path_join(d, DCK_CKPT_MANIFEST) : NULL;
    dck_status s = p ? dck_manifest_load(p, out) : dck_oom(NULL);
    free(d);
    free(p);
    return s;
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
    bool both, found;
    size_t common;
    long step;
    int kind;
    const char *how;
    char name[1024];
} rec_first;

/* Compares the runs' tensor_digests.bin when both have one; non-zero (and
 * a message printed) on trouble. */
static int rec_compare(const char *const runs[2], rec_first *f) {
    memset(f, 0, sizeof *f);
    dck_recording r[2];
    memset(r, 0, sizeof r);
    char *p[2] = {dck_path_join(runs[0], DCK_RECORD_FILE), dck_path_join(runs[1], DCK_RECORD_FILE)};
    int rc = 0;
    struct stat st;
    if (!p[0] || !p[1]) {
        rc = cli_fail(CMD, dck_oom(NULL));
    } else if (stat(p[0], &st) == 0 && stat(p[1], &st) == 0) {
        f->both = true;
        dck_status s = dck_recording_load(p[0], &r[0]);
        if (!s) s = dck_recording_load(p[1], &r[1]);
        if (s) {
            rc = cli_fail(CMD, s);
        } else {
            f->common = dck_recording_common_steps(&r[0], &r[1]);
            int c = dck_recording_compare(&r[0], &r[1], &f->step, &f->kind, f->name, sizeof f->name, &f->how);
            if (c < 0) rc = cli_fail(CMD, dck_oom(NULL));
            f->found = c > 0;
        }
    }
    dck_recording_release(&r[0]);
    dck_recording_release(&r[1]);
    free(p[0]);
    free(p[1]);
    return rc;
}

static void rec_print(const rec_first *f) {
    const char *how = !strcmp(f->how, "digest") ? "" : !strcmp(f->how, "only in A") ? " (recorded in run A only)"
                                                                                      : " (recorded in run B only)";
    printf("first differing tensor: step %ld, %s %s%s\n", f->step, dck_rec_kind_name((dck_rec_kind)f->kind),
           cli_safe(f->name), how);
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
    free(tr[0]);
    free(tr[1]);

    /* checkpoints in both runs, ascending */
    long *cs[2] = {NULL, NULL};
    size_t nc[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        dck_status s = dck_ckpt_list(runs[k], &cs[k], &nc[k], NULL, NULL);
        if (s) {
            free(cs[0]);
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
        dck_status s = load_manifest(runs[0], common[i], &a);
        if (!s) s = load_manifest(runs[1], common[i], &b);
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
    bool different = traj_diff || differ >= 0 || recf.found;
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
        printf("\n");
    } else {
        if (traj_diff)
            printf("first differing step: %ld (%s)\n", step, what);
        else if (differ >= 0)
            printf("trajectories agree; the checkpoints do not\n");
        else
            printf("trajectories agree; the recorded tensors do not\n");
        if (recf.found) rec_print(&recf);
        if (!cli_quiet) {
            printf("checkpoints in both: %zu\n", ncommon);
            if (agree >= 0)
                printf("last agreeing checkpoint: step %ld\n", agree);
            else if (ncommon)
                printf("last agreeing checkpoint: none\n");
            if (differ >= 0) {
                printf("first differing checkpoint: step %ld, %zu of %zu tensors differ:\n", differ,
                       diff.n, diff.tensors_compared);
                for (size_t i = 0; i < diff.n && (limit == 0 || i < (size_t)limit); i++)
                    printf("  %s (%s)\n", diff.entries[i].name, dck_cmp_kind_name(diff.entries[i].kind));
                if (limit && diff.n > (size_t)limit) printf("  ... %zu more\n", diff.n - (size_t)limit);
            }
            if (replay[0]) printf("replay: %s\n", replay);
        }
    }
    if (cli_report_wanted(&rep)) {
        char msg[1200], pre[64];
        cli_report_property(&rep, "run_a", runs[0]);
        cli_report_property(&rep, "run_b", runs[1]);
        if (replay[0]) cli_report_property(&rep, "replay", replay);
        cli_report_title(&rep, "%s", !different ? "identical"
                                     : traj_diff ? "the runs part"
                                                 : "trajectories agree; the checkpoints do not");
        snprintf(msg, sizeof msg, "first differing step %ld: %s", step, what);
        cli_report_case(&rep, "detcheck.bisect", "trajectory", traj_diff ? CLI_CASE_FAIL : CLI_CASE_PASS,
                        "trajectory", traj_diff ? msg : NULL, NULL);
        if (differ >= 0) {
            snprintf(pre, sizeof pre, "detcheck.bisect.step_%ld", differ);
            cli_report_compare(&rep, pre, ma, &diff, "run A", "run B");
        }
        if (cli_report_finish(&rep)) {
            rc = DCK_EXIT_TROUBLE;
            goto out;
        }
    }
    rc = different ? DCK_EXIT_DIFFERENT : DCK_EXIT_SAME;
out:
    if (differ >= 0) dck_cmp_result_release(&diff);
    dck_manifest_free(ma);
    dck_manifest_free(mb);
    return rc;
}

/* The verdict of bisect and repro on two runs (dck_runs_compare's result):
 * the replay command of a train run, the trace's notes and the line of
 * what would localise further; its lines and JSON are report/runs.c's
 * (man detcheck-bisect(1)). */
#include "cli_runs.h"
#include "train/train.h"
#include "runs/recording.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int cli_runs_verdict_make(const char *cmd, bool notes, const char *const runs[2], dck_runs_result *res,
                          cli_runs_verdict *v) {
    memset(v, 0, sizeof *v);
    v->runs[0] = runs[0];
    v->runs[1] = runs[1];
    v->res = res;
    for (size_t i = 0; i < res->ngaps; i++) v->gap_lines[i] = cli_runs_gap_text(&res->gaps[i]);
    bool tensor_first = res->rec_found && res->rec_step == res->first_step;
    if (cli_trace_take(cmd, notes, runs, &res->trace, tensor_first ? res->rec_kind : -1, tensor_first ? res->rec_name : NULL,
                       &v->trf))
        return DCK_EXIT_TROUBLE;
    v->first_what = !res->traj_differs || res->traj_step == res->first_step ? NULL
                    : tensor_first                                            ? "a recorded tensor"
                                                                              : "a traced event";
    if (res->found) {
        char *flags = NULL;
        long target = res->ckpt_differ >= 0 ? res->ckpt_differ : res->traj_step;
        if (res->ckpt_agree >= 0 && (flags = replay_flags(runs[0], res->ckpt_agree))) {
            char *d = dck_ckpt_dir(runs[0], res->ckpt_agree);
            snprintf(v->replay, sizeof v->replay,
                     "detcheck train %s --resume-from %s --steps %ld --ckpt-every 1 --out REPLAY_DIR", flags, d,
                     target);
            free(d);
        } else if (res->ckpt_differ >= 0 && (flags = replay_flags(runs[0], res->ckpt_differ))) {
            snprintf(v->replay, sizeof v->replay, "detcheck train %s --steps %ld --ckpt-every 1 --out REPLAY_DIR",
                     flags, target);
        }
        free(flags);
    }
    /* what would localise further (recorded runs: train's runs, with
     * checkpoints, have their replay); the last line of the verdict */
    v->next = res->found && !v->replay[0] && !res->ckpts[0] && !res->ckpts[1] ? cli_trace_next_line(&v->trf, runs)
                                                                             : strdup("");
    if (!v->next) return cli_fail(cmd, dck_oom(NULL));
    cli_trace_next_option(&v->trf, v->next_option, sizeof v->next_option);
    if (!v->next[0]) v->next_option[0] = 0;
    return 0;
}

void cli_runs_verdict_release(cli_runs_verdict *v) {
    cli_trace_release(&v->trf);
    for (size_t i = 0; i < DCK_RUNS_MAX_GAPS; i++) free(v->gap_lines[i]);
    free(v->next);
    memset(v, 0, sizeof *v);
}

int cli_runs_report_option(cli_report *rep, int code, const char *arg) {
    static const char *const names[] = {"--junit", "--markdown", "--html"};
    if (code < CLI_OPT_JUNIT || code > CLI_OPT_HTML) return 0;
    if (!arg || !*arg) {
        cli_usage_error(rep->cmd, "%s needs a file name ('-': standard output)", names[code - CLI_OPT_JUNIT]);
        return -1;
    }
    return cli_report_option(rep, code, arg);
}

/* What bisect and repro say of the comparison of two runs: the library's
 * dck_runs_result rendered as bisect's lines and its --json document, with
 * the replay command of a train run and the line of what would localise
 * further (man detcheck-bisect(1)). */
#include "cli_runs.h"
#include "train/train.h"
#include "runs/recording.h"

#include <stdarg.h>
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

/* "steps 5..6", "step 5", "3 steps from 1 to 9" (not consecutive) */
static void span(char *buf, size_t n, const char *noun, size_t count, long first, long last) {
    if (count == 1) snprintf(buf, n, "%s %ld", noun, first);
    else if ((unsigned long)(last - first) + 1 == count) snprintf(buf, n, "%ss %ld..%ld", noun, first, last);
    else snprintf(buf, n, "%zu %ss from %ld to %ld", count, noun, first, last);
}

/* The line of each item (man detcheck-bisect(1), "not compared"). */
static char *gap_line(const dck_runs_gap *g) {
    static const struct {
        const char *item, *noun;
    } nouns[] = {{"trajectory_steps", "trajectory step"}, {"recorded_steps", "recorded step"},
                 {"traced_steps", "traced step"},         {"checkpoints", "checkpoint"},
                 {"roots", "step"},                       {"truncated_steps", "traced step"}};
    const char *noun = "step";
    for (size_t i = 0; i < sizeof nouns / sizeof nouns[0]; i++)
        if (!strcmp(g->item, nouns[i].item)) noun = nouns[i].noun;
    char sp[128], why[160] = "", *line = NULL;
    char run = (char)('A' + g->run), other = (char)('B' - g->run);
    span(sp, sizeof sp, noun, g->count, g->first, g->last);
    int n;
    if (!strcmp(g->item, "roots"))
        n = asprintf(&line, "root digests at %s in run %c only (run %c recorded none there)", sp, run, other);
    else if (!strcmp(g->item, "recorded_state"))
        n = asprintf(&line, "%zu state entr%s in run %c only, at steps both recorded (first: step %ld, %s)", g->count,
                     g->count == 1 ? "y" : "ies", run, g->first, g->name ? g->name : "");
    else if (!strcmp(g->item, "truncated_steps"))
        n = asprintf(&line, "events past the recorder's bound in %s, which run %c truncated", sp, run);
    else {
        if (g->why) snprintf(why, sizeof why, " (run %c %s)", other, g->why);
        n = asprintf(&line, "%s in run %c only%s", sp, run, why);
    }
    return n < 0 ? NULL : line;
}

const char *cli_runs_gap_line(const cli_runs_verdict *v, size_t i) {
    return v->gap_lines[i] ? v->gap_lines[i] : "(out of memory)";
}

int cli_runs_verdict_make(const char *cmd, bool notes, const char *const runs[2], dck_runs_result *res,
                          cli_runs_verdict *v) {
    memset(v, 0, sizeof *v);
    v->runs[0] = runs[0];
    v->runs[1] = runs[1];
    v->res = res;
    for (size_t i = 0; i < res->ngaps; i++) v->gap_lines[i] = gap_line(&res->gaps[i]);
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

json_t *cli_runs_json(const cli_runs_verdict *v, bool *oom) {
    const dck_runs_result *r = v->res;
    const cli_trace_first *trf = &v->trf;
    const dck_cmp_result *diff = &r->ckpt_diff;
    json_t *o = json_object(), *steps = json_array(), *tensors = json_array();
    cli_jset(o, "identical", json_boolean(!r->different), oom);
    cli_jappend(steps, json_integer(r->last_step[0]), oom);
    cli_jappend(steps, json_integer(r->last_step[1]), oom);
    cli_jset(o, "steps", steps, oom);
    cli_jset(o, "first_step", r->traj_differs ? json_integer(r->traj_step) : json_null(), oom);
    cli_jset(o, "detail", r->traj_differs ? cli_json_text(r->traj_detail) : json_null(), oom);
    /* one step for every line: the earliest where the trajectory, a
     * recorded tensor or a traced event differs, and which */
    cli_jset(o, "first_differing_step", r->first_step >= 0 ? json_integer(r->first_step) : json_null(), oom);
    cli_jset(o, "first_differing", r->first_differing ? json_string(r->first_differing) : json_null(), oom);
    cli_jset(o, "checkpoints_in_both", cli_json_u64(r->ckpts_in_both), oom);
    cli_jset(o, "last_agreeing_checkpoint", r->ckpt_agree >= 0 ? json_integer(r->ckpt_agree) : json_null(), oom);
    cli_jset(o, "first_differing_checkpoint", r->ckpt_differ >= 0 ? json_integer(r->ckpt_differ) : json_null(), oom);
    for (size_t i = 0; r->ckpt_differ >= 0 && i < diff->n; i++) {
        json_t *t = json_object();
        cli_jset(t, "name", cli_json_text(diff->entries[i].name), oom);
        cli_jset(t, "kind", json_string(dck_cmp_kind_name(diff->entries[i].kind)), oom);
        cli_jappend(tensors, t, oom);
    }
    cli_jset(o, "tensors", tensors, oom);
    cli_jset(o, "replay", v->replay[0] ? cli_json_text(v->replay) : json_null(), oom);
    if (r->rec_has[0] || r->rec_has[1]) { /* recorded runs only: the document of train runs is unchanged */
        json_t *rs = json_array();
        cli_jappend(rs, cli_json_u64(r->rec_steps[0]), oom);
        cli_jappend(rs, cli_json_u64(r->rec_steps[1]), oom);
        cli_jset(o, "recorded_steps", rs, oom);
        cli_jset(o, "recorded_steps_in_both", cli_json_u64(r->rec_common), oom);
        json_t *ft = r->rec_found ? json_object() : json_null();
        if (r->rec_found) {
            cli_jset(ft, "step", json_integer(r->rec_step), oom);
            cli_jset(ft, "kind", json_string(dck_rec_kind_name((dck_rec_kind)r->rec_kind)), oom);
            cli_jset(ft, "name", cli_json_text(r->rec_name), oom);
            cli_jset(ft, "how", json_string(r->rec_how), oom);
        }
        cli_jset(o, "first_tensor", ft, oom);
    }
    if (trf->both) { /* traced runs only */
        json_t *tc = json_array();
        cli_jappend(tc, cli_json_u64(trf->r.truncated[0]), oom);
        cli_jappend(tc, cli_json_u64(trf->r.truncated[1]), oom);
        cli_jset(o, "traced_steps_in_both", cli_json_u64(trf->r.common), oom);
        cli_jset(o, "traced_steps_truncated", tc, oom);
        cli_jset(o, "first_event", cli_trace_json(trf, oom), oom);
        cli_jset(o, "trace_unseen", trf->unseen ? cli_json_text(trf->unseen) : json_null(), oom);
    }
    /* what one run holds and the other lacks: "identical" is false when
     * any is here, unless --allow-partial accepted them */
    json_t *nc = json_array();
    for (size_t i = 0; i < r->ngaps; i++) {
        const dck_runs_gap *g = &r->gaps[i];
        json_t *x = json_object();
        char run[2] = {(char)('A' + g->run), 0};
        cli_jset(x, "item", json_string(g->item), oom);
        cli_jset(x, "run", json_string(run), oom);
        cli_jset(x, "count", cli_json_u64(g->count), oom);
        cli_jset(x, "first", json_integer(g->first), oom);
        cli_jset(x, "last", json_integer(g->last), oom);
        cli_jset(x, "empty_side", json_boolean(g->empty_side), oom);
        cli_jset(x, "detail", cli_json_text(cli_runs_gap_line(v, i)), oom);
        cli_jappend(nc, x, oom);
    }
    cli_jset(o, "not_compared", nc, oom);
    cli_jset(o, "partial_accepted", json_boolean(r->ngaps && r->accepted), oom);
    cli_jset(o, "next", v->next[0] ? cli_json_text(v->next) : json_null(), oom);
    cli_jset(o, "next_option", v->next_option[0] ? json_string(v->next_option) : json_null(), oom);
    return o;
}

/* What dck_runs_result's rec_how means: after the tensor's name on the
 * terminal (suffix), and as a report's failure (what, type). */
static const cli_runs_how hows[] = {{"digest", "", "digest differs between run A and run B", "digest"},
                                    {"only in A", " (recorded in run A only)", "recorded in run A only", "only_in_a"},
                                    {"only in B", " (recorded in run B only)", "recorded in run B only", "only_in_b"}};

const cli_runs_how *cli_runs_how_of(const char *how) {
    for (size_t i = 0; how && i < sizeof hows / sizeof hows[0]; i++)
        if (!strcmp(how, hows[i].how)) return &hows[i];
    return &hows[0];
}

void cli_runs_print(FILE *out, const cli_runs_verdict *v, bool quiet, long limit) {
    const dck_runs_result *r = v->res;
    const cli_trace_first *trf = &v->trf;
    const dck_cmp_result *diff = &r->ckpt_diff;
    if (!r->found) {
        /* "identical" only when everything was compared */
        fprintf(out, "%s: %ld and %ld steps agree bit for bit",
                !r->ngaps     ? "identical"
                : r->accepted ? "identical where both runs hold data (--allow-partial)"
                              : "incomplete",
                r->last_step[0], r->last_step[1]);
        fprintf(out, "; %zu checkpoint%s in both agree", r->ckpts_in_both, r->ckpts_in_both == 1 ? "" : "s");
        if (r->rec_both)
            fprintf(out, "; %zu recorded step%s agree tensor by tensor", r->rec_common, r->rec_common == 1 ? "" : "s");
        if (trf->both)
            fprintf(out, "; %zu traced step%s agree event by event", trf->r.common, trf->r.common == 1 ? "" : "s");
        fprintf(out, "\n");
        for (size_t i = 0; i < r->ngaps; i++) fprintf(out, "not compared: %s\n", cli_safe(cli_runs_gap_line(v, i)));
        return;
    }
    if (r->traj_differs && !v->first_what)
        fprintf(out, "first differing step: %ld (%s)\n", r->traj_step, cli_safe_line(r->traj_detail));
    else if (r->traj_differs)
        fprintf(out, "first differing step: %ld (%s; the trajectories part at step %ld: %s)\n", r->first_step,
                v->first_what, r->traj_step, cli_safe_line(r->traj_detail));
    else if (r->ckpt_differ >= 0)
        fprintf(out, "trajectories agree; the checkpoints do not\n");
    else if (r->rec_found)
        fprintf(out, "trajectories agree; the recorded tensors do not\n");
    else
        fprintf(out, "trajectories agree; the traced steps do not\n");
    if (r->rec_found)
        fprintf(out, "first differing tensor: step %ld, %s %s%s\n", r->rec_step,
                dck_rec_kind_name((dck_rec_kind)r->rec_kind), cli_safe(r->rec_name), cli_runs_how_of(r->rec_how)->suffix);
    if (trf->unseen) fprintf(out, "%s\n", trf->safe_unseen);
    if (trf->found) fprintf(out, "%s\n", trf->safe_line);
    if (quiet) return;
    if (trf->found && trf->magnitudes[0]) fprintf(out, "%s\n", cli_safe_line(trf->magnitudes));
    if (trf->both)
        fprintf(out, "traced steps in both: %zu, %zu agree%s\n", trf->r.common, trf->r.agreeing,
                trf->found ? " before the first differing one" : "");
    fprintf(out, "checkpoints in both: %zu\n", r->ckpts_in_both);
    if (r->ckpt_agree >= 0)
        fprintf(out, "last agreeing checkpoint: step %ld\n", r->ckpt_agree);
    else if (r->ckpts_in_both)
        fprintf(out, "last agreeing checkpoint: none\n");
    if (r->ckpt_differ >= 0) {
        fprintf(out, "first differing checkpoint: step %ld, %zu of %zu tensors differ:\n", r->ckpt_differ, diff->n,
                diff->tensors_compared);
        for (size_t i = 0; i < diff->n && (limit == 0 || i < (size_t)limit); i++)
            fprintf(out, "  %s (%s)\n", cli_safe(diff->entries[i].name), dck_cmp_kind_name(diff->entries[i].kind));
        if (limit && diff->n > (size_t)limit) fprintf(out, "  ... %zu more\n", diff->n - (size_t)limit);
    }
    if (v->replay[0]) fprintf(out, "replay: %s\n", cli_safe_line(v->replay));
    for (size_t i = 0; i < r->ngaps; i++) fprintf(out, "not compared: %s\n", cli_safe(cli_runs_gap_line(v, i)));
    if (v->next[0]) fprintf(out, "%s\n", cli_safe_line(v->next));
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

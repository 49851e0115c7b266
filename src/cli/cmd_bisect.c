/* detcheck bisect: where two runs of `detcheck train` part. The first step
 * whose trajectory records differ; with checkpoints, the last one where both
 * runs agree, the tensors that differ at the first one after (model order),
 * and the command that replays the divergence from the agreeing checkpoint.
 * The options, the library's comparison (dck_runs_compare) and its
 * rendering (cli_runs.c, the reports). See man/detcheck-bisect.1. */
#include "report/report.h"
#include "report/html.h"
#include "cli_runs.h"
#include "runs/recording.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CMD "bisect"

static const char bisect_help[] =
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
    "Exit status: 0 identical, 1 different, 2 trouble.\n";

/* The report's case for the recorded tensors: with a difference, one
 * failing case named after the first differing tensor (classname
 * detcheck.bisect.step_N.KIND, as the checkpoints' cases); a pass when
 * every common step agrees (skipped when there is none). Absent when one
 * run or neither was recorded
 * (what one run recorded alone is a "not compared" case). */
static void rec_report(cli_report *rep, const dck_runs_result *f) {
    static const char *const kinds[DCK_REC_KIND_COUNT] = {"gradients", "parameters", "optimizer_state", "state"};
    char cls[128], msg[DCK_REC_NAME_MAX + 256];
    if (f->rec_found) {
        const cli_runs_how *h = cli_runs_how_of(f->rec_how);
        snprintf(cls, sizeof cls, "detcheck.bisect.step_%ld.%s", f->rec_step,
                 (unsigned)f->rec_kind < DCK_REC_KIND_COUNT ? kinds[f->rec_kind] : "tensors");
        snprintf(msg, sizeof msg, "%s: first differing tensor, step %ld, %s: %s", f->rec_name, f->rec_step,
                 dck_rec_kind_name((dck_rec_kind)f->rec_kind), h->what);
        cli_report_case(rep, cls, f->rec_name, CLI_CASE_FAIL, h->type, msg, NULL);
    } else if (f->rec_both && f->rec_common) {
        snprintf(msg, sizeof msg, "%zu recorded step%s in both agree tensor by tensor", f->rec_common,
                 f->rec_common == 1 ? "" : "s");
        cli_report_case(rep, "detcheck.bisect", "recorded tensors", CLI_CASE_PASS, NULL, msg, NULL);
    } else if (f->rec_both) { /* nothing passed over nothing */
        cli_report_case(rep, "detcheck.bisect", "recorded tensors", CLI_CASE_SKIPPED, NULL,
                        "no step recorded in both: the tensors are not compared", NULL);
    }
}

/* The report: the verdict of the exit status. Every reason bisect has for
 * exit 1 (the trajectory, a checkpoint, a recorded tensor, a traced event,
 * an item not compared) is a failing case, and the title names the first
 * of each. */
static int report(cli_report *rep, cli_runs_verdict *v, bool allow_partial, dck_run *const run[2]) {
    const dck_runs_result *r = v->res;
    const cli_trace_first *trf = &v->trf;
    const char *const *runs = v->runs;
    char msg[1200], pre[64], tensor[DCK_REC_NAME_MAX + 256] = "";
    /* the traced event's line, whole (its names have no bound) */
    const char *event_sep = trf->found ? "; " : "", *event = trf->found ? trf->line : "";
    const char *unseen_sep = trf->unseen ? "; " : "", *unseen = trf->unseen ? trf->unseen : "";
    const char *what = r->traj_differs ? r->traj_detail : "";
    long step = r->traj_step;
    cli_report_property(rep, "run_a", runs[0]);
    cli_report_property(rep, "run_b", runs[1]);
    if (v->replay[0]) cli_report_property(rep, "replay", v->replay);
    if (v->next[0]) cli_report_property(rep, "next", v->next);
    if (r->rec_found)
        snprintf(tensor, sizeof tensor, "; first differing tensor: step %ld, %s %s%s", r->rec_step,
                 dck_rec_kind_name((dck_rec_kind)r->rec_kind), r->rec_name, cli_runs_how_of(r->rec_how)->suffix);
    if (!r->found && !r->ngaps)
        cli_report_title(rep, "identical");
    else if (!r->found)
        cli_report_title(rep, "%s; not compared: %s%s",
                         r->accepted ? "identical where both runs hold data (--allow-partial)" : "incomplete",
                         cli_runs_gap_line(v, 0), r->ngaps > 1 ? " (and more)" : "");
    else if (r->traj_differs && !v->first_what)
        cli_report_title(rep, "the runs part: first differing step %ld (%s)%s%s%s%s%s", step, what, tensor,
                         unseen_sep, unseen, event_sep, event);
    else if (r->traj_differs)
        cli_report_title(rep, "the runs part: first differing step %ld (%s; the trajectories part at step %ld: %s)%s%s%s%s%s",
                         r->first_step, v->first_what, step, what, tensor, unseen_sep, unseen, event_sep, event);
    else if (r->ckpt_differ >= 0)
        cli_report_title(rep, "trajectories agree; the checkpoints do not (first differing checkpoint: step %ld)%s%s%s",
                         r->ckpt_differ, tensor, event_sep, event);
    else if (r->rec_found)
        cli_report_title(rep, "trajectories agree; the recorded tensors do not%s%s%s%s%s", tensor, unseen_sep, unseen,
                         event_sep, event);
    else
        cli_report_title(rep, "trajectories agree; the traced steps do not%s%s", event_sep, event);
    snprintf(msg, sizeof msg, "first differing step %ld: %s", step, what);
    cli_report_case(rep, "detcheck.bisect", "trajectory", r->traj_differs ? CLI_CASE_FAIL : CLI_CASE_PASS,
                    "trajectory", r->traj_differs ? msg : NULL, NULL);
    rec_report(rep, r);
    cli_trace_report(rep, "detcheck.bisect", trf);
    for (size_t i = 0; i < r->ngaps; i++) {
        char nm[64];
        snprintf(nm, sizeof nm, "not compared: %s", r->gaps[i].item);
        bool ok = allow_partial && !r->gaps[i].empty_side;
        cli_report_case(rep, "detcheck.bisect", nm, ok ? CLI_CASE_SKIPPED : CLI_CASE_FAIL, "not_compared",
                        cli_runs_gap_line(v, i), NULL);
    }
    if (r->ckpt_differ >= 0) {
        snprintf(pre, sizeof pre, "detcheck.bisect.step_%ld", r->ckpt_differ);
        cli_report_compare(rep, pre, r->ckpt_a, &r->ckpt_diff, "run A", "run B");
    }
    if (rep->html) {
        const cli_html_run pair[2] = {{run[0], "run A"}, {run[1], "run B"}};
        const char *lines[DCK_RUNS_MAX_GAPS];
        for (size_t i = 0; i < r->ngaps; i++) lines[i] = cli_runs_gap_line(v, i);
        const cli_html_unpaired unpaired = {lines, r->ngaps, !r->accepted};
        dck_runs_result shown = *r; /* with its traced event, which cli_trace_take moved into v->trf */
        shown.trace = v->trf.r;
        cli_report_figure(rep, cli_html_runs_figure(CMD, pair, &shown, &unpaired));
    }
    return cli_report_finish(rep, r->different ? DCK_EXIT_DIFFERENT : DCK_EXIT_SAME) ? DCK_EXIT_TROUBLE : 0;
}

enum { OPT_LIMIT = 0x1200, OPT_ALLOW_PARTIAL };

int cmd_bisect(int argc, char **argv) {
    static const struct option opts[] = {{"limit", required_argument, NULL, OPT_LIMIT},
                                         {"allow-partial", no_argument, NULL, OPT_ALLOW_PARTIAL},
                                         CLI_REPORT_LONGOPTS,
                                         {NULL, 0, NULL, 0}};
    cli_shared sh = {.cmd = CMD, .help_text = bisect_help};
    dck_runs_opts ro = {.allow_partial = false};
    long limit = 20;
    cli_report rep;
    cli_report_init(&rep, CMD);
    optind = 1;
    opterr = 0;
    int c;
    while ((c = cli_getopt(argc, argv, ":", opts, &sh)) != -1) {
        switch (c) {
        case CLI_STOP: return sh.exit;
        case OPT_ALLOW_PARTIAL: ro.allow_partial = true; break;
        case OPT_LIMIT:
            if (!cli_parse_long(optarg, 0, 1000000000, &limit)) return cli_usage_error(CMD, "--limit needs a number");
            break;
        case CLI_OPT_JUNIT:
        case CLI_OPT_MARKDOWN:
        case CLI_OPT_HTML:
            if (cli_runs_report_option(&rep, c, optarg) < 0) return DCK_EXIT_TROUBLE;
            break;
        case ':':
            if (optopt == OPT_LIMIT) return cli_usage_error(CMD, "--limit needs a number");
            if (cli_runs_report_option(&rep, optopt, NULL) < 0) return DCK_EXIT_TROUBLE;
            return cli_usage_error(CMD, "unknown option '%s'", argv[optind - 1]);
        default: return cli_usage_error(CMD, "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (argc - optind > 2) return cli_usage_error(CMD, "unexpected argument '%s'", argv[optind + 2]);
    if (argc - optind != 2) return cli_usage_error(CMD, "needs two run directories");
    const char *runs[2] = {argv[optind], argv[optind + 1]};
    if (cli_report_check(&rep, sh.json, runs, 2)) return DCK_EXIT_TROUBLE;

    dck_run *run[2] = {NULL, NULL};
    dck_runs_result res;
    cli_runs_verdict v;
    memset(&res, 0, sizeof res);
    memset(&v, 0, sizeof v);
    int rc = DCK_EXIT_TROUBLE;
    dck_status s = dck_run_open(runs[0], &run[0]);
    if (!s) s = dck_run_open(runs[1], &run[1]);
    if (!s) s = dck_runs_compare(run[0], run[1], &ro, &res);
    if (s) {
        cli_fail(CMD, s);
        goto out;
    }
    if (cli_runs_verdict_make(CMD, true, runs, &res, &v)) goto out;
    if (sh.json) {
        bool oom = false;
        json_t *o = cli_runs_json(&v, &oom);
        if ((s = cli_json_print(o, CLI_JSON_COMPACT, oom))) {
            cli_fail(CMD, s);
            goto out;
        }
    } else {
        cli_runs_print(stdout, &v, cli_quiet, limit);
    }
    if (cli_report_wanted(&rep) && report(&rep, &v, ro.allow_partial, run)) goto out;
    rc = res.different ? DCK_EXIT_DIFFERENT : DCK_EXIT_SAME;
out:
    cli_runs_verdict_release(&v);
    dck_runs_result_release(&res);
    dck_run_free(run[0]);
    dck_run_free(run[1]);
    return rc;
}

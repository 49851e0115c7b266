/* resume-check's words (resume.h): the lines of each stop point of a
 * user's command and of each interrupted run of the built-in trainer, the
 * verdict, the --json document and the reports, from the results the
 * command collected. See man detcheck-resume-check(1). */
#include "report/resume.h"
#include "report/html.h"
#include "report/json.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ a stop point's line */

void cli_resume_stop_release(cli_resume_stop *s) {
    free(s->state);
    free(s->line);
    free(s->not_compared);
    free(s->next);
    json_decref(s->event);
}

const char *cli_resume_mode(const cli_resume_stop *s) { return s->kill ? "SIGKILL after the checkpoint" : "clean stop"; }
const char *cli_resume_line(const cli_resume_stop *s) { return s->line ? s->line : "(out of memory)"; }

void cli_resume_stop_line(cli_resume_stop *s, const char *fmt, ...) {
    char *text = NULL;
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&text, fmt, ap) < 0) text = NULL;
    va_end(ap);
    free(s->line);
    if (!text || asprintf(&s->line, "at %ld (%s): %s", s->at, cli_resume_mode(s), text) < 0) s->line = NULL;
    free(text);
}

static void set_state(cli_resume_stop *s, const char *prefix, const char *name) {
    free(s->state);
    if (asprintf(&s->state, "%s%s", prefix, name) < 0) s->state = NULL;
}

/* What g says one run lacks, as the subject of "... is missing from":
 * malloc'd (names whole), NULL when out of memory. */
static char *gap_subject(const dck_resume_gap *g) {
    char *t = NULL;
    int k;
    switch (g->kind) {
    case DCK_RESUME_GAP_ROOT: k = asprintf(&t, "the root digest of step %ld", g->step); break;
    case DCK_RESUME_GAP_STATE: k = asprintf(&t, "state entry %s of step %ld", g->entry, g->step); break;
    case DCK_RESUME_GAP_CUT:
        k = asprintf(&t, "what traced step %ld holds past its first %zu events (truncated by the recorder)", g->step,
                     g->events);
        break;
    default: k = asprintf(&t, "step %ld", g->step); break;
    }
    return k < 0 ? NULL : t;
}

void cli_resume_gap_line(cli_resume_stop *s, const dck_resume_gap *g, bool resumed, const char *span) {
    /* the two runs a gap lies between, by dck_resume_gap.lacks: the
     * stopped run before the stop, the resumed run after it */
    static const char *const before_roles[2] = {"the uninterrupted run", "the stopped run"};
    static const char *const resumed_roles[2] = {"the uninterrupted run", "the resumed run"};
    const char *const *roles = resumed ? resumed_roles : before_roles;
    char *subject = gap_subject(g);
    cli_resume_stop_line(s, "%s is missing from %s's %s (%s recorded it): %s is compared, so both runs must record each",
                         subject ? subject : "(out of memory)", roles[g->lacks], g->file, roles[!g->lacks], span);
    if (g->kind == DCK_RESUME_GAP_STATE) set_state(s, "", g->entry);
    free(subject);
}

static void ordinal(long i, char *buf, size_t n) {
    if (i == 1) {
        snprintf(buf, n, "first");
        return;
    }
    const char *suf = "th";
    if (i % 100 < 11 || i % 100 > 13) suf = i % 10 == 1 ? "st" : i % 10 == 2 ? "nd" : i % 10 == 3 ? "rd" : "th";
    snprintf(buf, n, "%ld%s", i, suf);
}

static void lr_text(double v, char *buf, size_t n) {
    if (isnan(v)) snprintf(buf, n, "none");
    else snprintf(buf, n, "%.9g", v);
}

/* CAUSE_MAX: a cause's text, one recorded name whole and words */
enum { CAUSE_MAX = DCK_REC_NAME_MAX + 1024 };

/* The cause d in words, into buf; s->cause and s->state. */
static void cause_text(cli_resume_stop *s, long K, const dck_resume_parting *p, const dck_resume_diagnosis *d,
                       char *buf, size_t n) {
    long D = p->step;
    s->cause = dck_resume_cause_name(d->cause);
    switch (d->cause) {
    case DCK_RESUME_WEIGHTS:
        set_state(s, "start.", d->name);
        snprintf(buf, n,
                 "weights: the resumed run started from other weights than those after step %ld: parameter %s "
                 "(the checkpoint does not hold the weights after step %ld's update)",
                 K, d->name, K);
        break;
    case DCK_RESUME_DATA:
        set_state(s, "", d->name);
        if (d->batch_step < 0) snprintf(buf, n, "data: the batch differs (it equals no batch of the uninterrupted run)");
        else if (d->batch_step < D)
            snprintf(buf, n, "data: the batch differs (the loader restarted: the batch equals that of step %ld)",
                     d->batch_step);
        else snprintf(buf, n, "data: the batch differs (the batch equals that of step %ld)", d->batch_step);
        break;
    case DCK_RESUME_RNG:
        set_state(s, "", d->name);
        snprintf(buf, n, "%s differs before any tensor (%s)", d->name, dck_resume_rngs[d->rng].why);
        break;
    case DCK_RESUME_LR:
        set_state(s, "", d->name ? d->name : "");
        if (d->lr_traj) {
            char ta[64], tb[64];
            lr_text(d->lr[0], ta, sizeof ta);
            lr_text(d->lr[1], tb, sizeof tb);
            snprintf(buf, n, "lr differs: %s vs %s (the LR scheduler's state: not restored, or stepped once more)", ta,
                     tb);
        } else {
            snprintf(buf, n, "%s differs (the LR scheduler's state: not restored, or stepped once more)", d->name);
        }
        break;
    case DCK_RESUME_SCALER:
        set_state(s, "", d->name);
        snprintf(buf, n, "%s differs (the GradScaler state was not restored)", d->name);
        break;
    case DCK_RESUME_EMA:
        set_state(s, "", d->name);
        snprintf(buf, n, "%s differs (the EMA weights were not restored)", d->name);
        break;
    case DCK_RESUME_OPTIMIZER:
        snprintf(buf, n, "optimizer: %s differs with equal gradients (the optimizer state was not restored)", d->name);
        break;
    case DCK_RESUME_TENSOR: {
        /* as bisect names it */
        static const struct {
            const char *how, *suffix;
        } hows[] = {{"only in A", " (recorded in the uninterrupted run only)"},
                    {"only in B", " (recorded in the resumed run only)"}};
        const char *suffix = "";
        for (size_t i = 0; i < sizeof hows / sizeof hows[0]; i++)
            if (!strcmp(p->how, hows[i].how)) suffix = hows[i].suffix;
        if (p->kind == DCK_REC_STATE) set_state(s, "", p->name);
        snprintf(buf, n, "first differing tensor: %s %s%s", dck_rec_kind_name((dck_rec_kind)p->kind), p->name, suffix);
        break;
    }
    default: /* the trajectory: loss or gradient-norm bits (or its root) */
        snprintf(buf, n, "trajectory: %s", p->tstep == D ? p->what : "differs");
        break;
    }
}

int cli_resume_cause_line(cli_resume_stop *s, long K, const dck_resume_parting *p, const dck_resume_diagnosis *d) {
    char *cause = malloc(CAUSE_MAX), nth[32];
    if (!cause) return -1;
    cause_text(s, K, p, d, cause, CAUSE_MAX);
    ordinal(p->step - K, nth, sizeof nth);
    cli_resume_stop_line(s, "first difference at step %ld (the %s resumed step): %s", p->step, nth, cause);
    free(cause);
    return 0;
}

void cli_resume_trace_line(cli_resume_stop *s, long tstep) {
    char nth[32];
    ordinal(tstep - s->at, nth, sizeof nth);
    cli_resume_stop_line(s, "first difference at step %ld (the %s resumed step): %s", tstep, nth, s->trace);
    s->trace[0] = 0;
}

/* Such a difference can be intermittent (allocation- or timing-dependent
 * kernels differ in some runs only), so `repro -n 2` may pass; enough runs
 * with the op trace, which covers the optimizer step, localise it. */
int cli_resume_before_line(cli_resume_stop *s, const dck_resume_parting *p, const dck_resume_tally *t,
                           const char *cmdline) {
    static const char *const arises[] = {
        [DCK_RESUME_ARISES_UNKNOWN] = "",
        [DCK_RESUME_ARISES_UPDATE] = " (the difference arises in the optimizer's update of the weights)",
        [DCK_RESUME_ARISES_FORWARD] = " (the difference arises in forward or backward: the batch is equal)"};
    long D = p->step;
    char *first = NULL, *equal = NULL;
    int rc = -1;
    if (p->rstep == D) {
        if (asprintf(&first, "first differing tensor: %s %s", dck_rec_kind_name((dck_rec_kind)p->kind), p->name) < 0)
            first = NULL;
    } else if (asprintf(&first, "first difference: trajectory %s", p->tstep == D ? p->what : "differs") < 0) {
        first = NULL;
    }
    /* the kinds that agree whole at D, in the step's own order */
    static const struct {
        int kind;
        const char *name;
    } kinds[] = {{DCK_REC_GRADIENT, "gradients"}, {DCK_REC_OPTIMIZER, "optimizer state"}};
    char eq[256] = "";
    size_t len = 0;
    if (t->has_batch && t->batch_equal)
        len += (size_t)snprintf(eq + len, sizeof eq - len, "%sdata.batch", len ? ", " : "");
    if (t->has_rng && t->rng_equal && len < sizeof eq)
        len += (size_t)snprintf(eq + len, sizeof eq - len, "%sRNG states", len ? ", " : "");
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0] && len < sizeof eq; i++)
        if (t->n[kinds[i].kind] && !t->diff[kinds[i].kind])
            len += (size_t)snprintf(eq + len, sizeof eq - len, "%s%s (%zu)", len ? ", " : "", kinds[i].name,
                                    t->n[kinds[i].kind]);
    if (asprintf(&equal, "%s%s", len ? "; equal at that step: " : "", eq) < 0) equal = NULL;
    if (first && equal) {
        cli_resume_stop_line(
            s,
            "the stopped run already differs at step %ld, before the stop and before anything was resumed: two runs "
            "of the same command differ, so the command is not reproducible run to run; %s%s%s. Such a difference "
            "can be intermittent (in some runs only: detcheck repro -n 2 may pass); to see and localise it: "
            "detcheck repro -n 30 --trace ops -- %s (the op trace covers the optimizer step)",
            D, first, equal, arises[t->arises], cmdline);
        rc = s->line ? 0 : -1;
    }
    free(first);
    free(equal);
    return rc;
}

/* ------------------------------------------------------------------ -- CMD: the verdict */

static bool cause_is(const cli_resume_stop *s, const char *cause) { return s->cause && !strcmp(s->cause, cause); }

int cli_resume_user_summarize(cli_resume_user_result *r, bool trouble) {
    r->ndiff = r->nincomplete = r->nbefore = r->nclean = 0;
    r->not_compared = NULL; /* said in the verdict too */
    for (int i = 0; i < r->nstops; i++) {
        const cli_resume_stop *s = &r->stops[i];
        bool inc = cause_is(s, "not_compared");
        r->nincomplete += inc;
        r->ndiff += s->result == DCK_EXIT_DIFFERENT && !inc;
        if (!r->not_compared) r->not_compared = s->not_compared;
        /* runs of the command that parted before their stop beside runs
         * that did not: the difference is intermittent, evidence in hand */
        r->nbefore += s->parted;
        r->nclean += s->done && !cause_is(s, "before_stop");
    }
    r->intermittent = r->nbefore && r->nclean;
    return trouble ? DCK_EXIT_TROUBLE : r->ndiff || r->nincomplete ? DCK_EXIT_DIFFERENT : DCK_EXIT_SAME;
}

static const char *error_text(const cli_resume_user_result *r) {
    return r->error ? r->error : "trouble (out of memory)";
}

char *cli_resume_user_intermittent(const cli_resume_user_result *r) {
    char *t = NULL;
    if (asprintf(&t,
                 "intermittent: %d of %d runs of the command parted from the uninterrupted run before their stop, "
                 "the other %d did not",
                 r->nbefore, r->nbefore + r->nclean, r->nclean) < 0)
        t = NULL;
    return t;
}

char *cli_resume_user_title(const cli_resume_user_result *r) {
    /* whole: the trouble may hold a command line of any length */
    char *title = NULL;
    int n = r->nstops, tl;
    if (r->rc == DCK_EXIT_TROUBLE)
        tl = asprintf(&title, "trouble: %s", error_text(r));
    else if (r->ndiff)
        tl = asprintf(&title, "not reproduced: %d of %d stop point%s differ%s", r->ndiff, n, n == 1 ? "" : "s",
                      n == 1 ? "s" : "");
    else
        tl = asprintf(&title,
                      "%s: %d stop point%s, every resumed step bitwise identical to the uninterrupted run (%ld "
                      "steps)%s%s%s",
                      r->nincomplete ? "incomplete" : "reproduced", n, n == 1 ? "" : "s", r->steps,
                      r->not_compared ? "; not compared: " : "", r->not_compared ? r->not_compared : "",
                      r->nincomplete ? " (--allow-partial accepts them)" : "");
    return tl < 0 ? NULL : title;
}

void cli_resume_user_report(cli_report *rep, const cli_resume_user_result *r, const char *title) {
    cli_report_property(rep, "command", r->cmdline);
    cli_report_property(rep, "mode", r->kill ? "kill" : "clean");
    if (r->keep) cli_report_property(rep, "workdir", r->work);
    cli_report_title(rep, "%s", title);
    int n = r->nstops;
    if (r->rc == DCK_EXIT_TROUBLE && (!n || r->stops[n - 1].result != DCK_EXIT_TROUBLE))
        cli_report_case(rep, "detcheck.resume_check", r->steps < 0 ? "uninterrupted" : "stop_points", CLI_CASE_ERROR,
                        "run", error_text(r), r->tail);
    for (int i = 0; i < n; i++) {
        const cli_resume_stop *s = &r->stops[i];
        char nm[64];
        snprintf(nm, sizeof nm, "at_%ld", s->at);
        if (s->result == DCK_EXIT_TROUBLE) {
            cli_report_case(rep, "detcheck.resume_check", nm, CLI_CASE_ERROR, "contract", cli_resume_line(s), r->tail);
        } else {
            char *msg = NULL;
            if (asprintf(&msg, "%s%s%s%s%s", cli_resume_line(s), s->trace[0] ? "; " : "", s->trace,
                         s->next ? "; " : "", s->next ? s->next : "") < 0)
                msg = NULL;
            cli_report_case(rep, "detcheck.resume_check", nm, s->result ? CLI_CASE_FAIL : CLI_CASE_PASS,
                            s->result ? s->cause : NULL, msg ? msg : cli_resume_line(s), NULL);
            free(msg);
        }
    }
    if (!rep->html) return;
    /* the uninterrupted run against the first resumed run that differs
     * (the stop run, when it parted before its stop), else the first that
     * reproduced; before the work directory goes */
    int pick = -1;
    for (int i = 0; i < n && pick < 0; i++)
        if (r->stops[i].result == DCK_EXIT_DIFFERENT) pick = i;
    for (int i = 0; i < n && pick < 0; i++)
        if (r->stops[i].done && r->stops[i].result == DCK_EXIT_SAME) pick = i;
    if (pick < 0) return;
    const cli_resume_stop *s = &r->stops[pick];
    bool before = cause_is(s, "before_stop");
    char *dir = NULL, label[64];
    if (asprintf(&dir, "%s/%s_%ld", r->work, before ? "stop" : "resume", s->at) < 0) {
        cli_report_figure(rep, NULL);
        return;
    }
    snprintf(label, sizeof label, before ? "the run stopped at %ld" : "the run resumed from %ld", s->at);
    const cli_html_run_dir pair[2] = {{r->full_dir, "the uninterrupted run"}, {dir, label}};
    /* what one run lacks, or what both cut alike, in the stop line's
     * words: the page names it and says no agreement */
    bool gap = cause_is(s, "steps") || cause_is(s, "not_compared");
    const char *item = gap ? cli_resume_line(s) : s->not_compared;
    const cli_html_unpaired unpaired = {&item, item ? 1 : 0, gap};
    cli_report_figure(rep, cli_html_runs_figure_dirs(rep->cmd, pair, &unpaired));
    free(dir);
}

json_t *cli_resume_user_json(const cli_resume_user_result *r, bool *oom) {
    json_t *doc = json_object(), *c = json_array(), *arr = json_array();
    static const char *const verdicts[] = {"reproduced", "different", "trouble"};
    cli_jset(doc, "verdict",
             json_string(r->rc == DCK_EXIT_DIFFERENT && !r->ndiff ? "incomplete" : verdicts[r->rc]), oom);
    for (int i = 0; i < r->ncmd; i++) cli_jappend(c, cli_json_text(r->cmd[i]), oom);
    cli_jset(doc, "command", c, oom);
    cli_jset(doc, "steps", r->steps >= 0 ? json_integer(r->steps) : json_null(), oom);
    cli_jset(doc, "intermittent", r->nbefore ? json_boolean(r->intermittent) : json_null(), oom);
    for (int i = 0; i < r->nstops; i++) {
        const cli_resume_stop *s = &r->stops[i];
        json_t *e = json_object();
        cli_jset(e, "at", json_integer(s->at), oom);
        cli_jset(e, "mode", json_string(s->kill ? "kill" : "clean"), oom);
        cli_jset(e, "identical", s->done ? json_boolean(s->result == 0) : json_null(), oom);
        cli_jset(e, "first_step", s->first_step >= 0 ? json_integer(s->first_step) : json_null(), oom);
        cli_jset(e, "resumed_index", s->index >= 0 ? json_integer(s->index) : json_null(), oom);
        cli_jset(e, "cause", s->cause ? json_string(s->cause) : json_null(), oom);
        cli_jset(e, "state", s->state && s->state[0] ? cli_json_text(s->state) : json_null(), oom);
        cli_jset(e, "line", cli_json_text(cli_resume_line(s)), oom);
        cli_jset(e, "not_compared", cli_json_str_or_null(s->not_compared), oom);
        cli_jset(e, "trace", s->trace[0] ? cli_json_text(s->trace) : json_null(), oom);
        cli_jset(e, "next", cli_json_str_or_null(s->next), oom);
        cli_jset(e, "event", s->event ? json_incref(s->event) : json_null(), oom);
        cli_jappend(arr, e, oom);
    }
    cli_jset(doc, "stops", arr, oom);
    if (r->rc == DCK_EXIT_TROUBLE) {
        cli_jset(doc, "error", cli_json_text(error_text(r)), oom);
        cli_jset(doc, "stderr_tail", r->tail ? cli_json_text(r->tail) : json_null(), oom);
    }
    cli_jset(doc, "workdir", cli_json_text(r->work), oom);
    cli_jset(doc, "kept", json_boolean(r->keep), oom);
    return doc;
}

/* ------------------------------------------------------------------ the built-in trainer */

void cli_resume_check_trajectory(cli_resume_check_case *c, const dck_resume_traj_verdict *d) {
    static const char *const run[2] = {"reference", "resumed"};
    char what[600];
    switch (d->kind) {
    case DCK_RESUME_TRAJ_SAME: return;
    case DCK_RESUME_TRAJ_DIFFERS: snprintf(what, sizeof what, "%s", d->what); break;
    case DCK_RESUME_TRAJ_ROOT:
        snprintf(what, sizeof what, "the root digest of step %ld is missing from the %s run's trajectory (the %s run "
                 "recorded it)", d->step, run[d->side], run[!d->side]);
        break;
    case DCK_RESUME_TRAJ_MISSING:
        snprintf(what, sizeof what, "step %ld is missing from the %s run's trajectory (%zu and %zu records)", d->step,
                 run[d->side], d->na, d->nb);
        break;
    case DCK_RESUME_TRAJ_EXTRA:
        snprintf(what, sizeof what, "step %ld was never run, but the %s run's trajectory holds it (%zu and %zu "
                 "records)", d->step, run[d->side], d->na, d->nb);
        break;
    }
    c->first_step = d->step;
    snprintf(c->what, sizeof c->what, "first differing step %ld: %s", d->step, what);
    c->result = 1;
}

void cli_resume_check_final(cli_resume_check_case *c, const dck_cmp_result *r) {
    if (!r->n) return;
    snprintf(c->tensor, sizeof c->tensor, "%s", r->entries[0].name);
    size_t len = strlen(c->what);
    snprintf(c->what + len, sizeof c->what - len, "%sfinal checkpoint: %zu of %zu tensors differ, first %s (%s)",
             len ? "; " : "", r->n, r->tensors_compared, r->entries[0].name, dck_cmp_kind_name(r->entries[0].kind));
    c->result = 1;
}

char *cli_resume_check_title(const cli_resume_check_result *r) {
    char *t = NULL;
    int k;
    if (r->worst == 0)
        k = asprintf(&t, "resume-check: identical (%d interrupted runs, %ld steps each, bit for bit)", r->n, r->steps);
    else
        k = asprintf(&t, "resume-check: %s; runs kept in %s", r->worst == 1 ? "NOT reproducible" : "trouble",
                     cli_safe(r->work));
    return k < 0 ? NULL : t;
}

json_t *cli_resume_check_json(const cli_resume_check_result *r, bool *oom) {
    static const char *const result[] = {"identical", "different", "trouble"};
    json_t *o = json_object(), *arr = json_array();
    cli_jset(o, "identical", json_boolean(r->worst == 0), oom);
    cli_jset(o, "steps", json_integer(r->steps), oom);
    cli_jset(o, "workdir", cli_json_text(r->work), oom);
    for (int i = 0; i < r->n; i++) {
        const cli_resume_check_case *c = &r->cases[i];
        json_t *e = json_object();
        cli_jset(e, "name", cli_json_text(c->name), oom);
        cli_jset(e, "result", json_string(result[c->result]), oom);
        cli_jset(e, "first_step", c->first_step >= 0 ? json_integer(c->first_step) : json_null(), oom);
        cli_jset(e, "tensor", c->tensor[0] ? cli_json_text(c->tensor) : json_null(), oom);
        cli_jset(e, "detail", cli_json_text(c->what), oom);
        cli_jappend(arr, e, oom);
    }
    cli_jset(o, "checks", arr, oom);
    return o;
}

void cli_resume_check_report(cli_report *rep, const cli_resume_check_result *r) {
    static const char *const kinds[] = {NULL, "different", "trouble"};
    char steps[32];
    snprintf(steps, sizeof steps, "%ld", r->steps);
    cli_report_property(rep, "steps", steps);
    cli_report_property(rep, "at", r->at);
    if (r->show_work) cli_report_property(rep, "workdir", r->work);
    cli_report_title(rep, "%s: %d interrupted runs of %ld steps",
                     r->worst == 0 ? "identical" : r->worst == 1 ? "NOT reproducible" : "trouble", r->n, r->steps);
    for (int i = 0; i < r->n; i++)
        cli_report_case(rep, "detcheck.resume-check", r->cases[i].name, (cli_case_result)r->cases[i].result,
                        kinds[r->cases[i].result], r->cases[i].result ? r->cases[i].what : NULL, NULL);
    if (!rep->html) return;
    /* the reference against the first resumed run that differs (else the
     * first one that ran through), before the work directory may go */
    int pick = -1;
    for (int want = 1; want >= 0 && pick < 0; want--)
        for (int i = 0; i < r->n && pick < 0; i++)
            if (r->cases[i].result == want) pick = i;
    if (pick < 0) return;
    char *ref = NULL, *res = NULL, label[96];
    if (asprintf(&ref, "%s/reference", r->work) < 0) ref = NULL;
    if (asprintf(&res, "%s/%s", r->work, r->cases[pick].name) < 0) res = NULL;
    snprintf(label, sizeof label, "resumed run (%s)", r->cases[pick].name);
    const cli_html_run_dir pair[2] = {{ref, "uninterrupted run"}, {res, label}};
    cli_report_figure(rep, ref && res ? cli_html_runs_figure_dirs(rep->cmd, pair, NULL) : NULL);
    free(ref);
    free(res);
}

/* What bisect, repro and the user form of resume-check say of two runs'
 * traces (trace.bin): the first differing event (the library's
 * dck_runs_trace) as lines, JSON and a report's case (man
 * detcheck-bisect(1)). The command line loads, judges and prints the
 * notes (cli/cli_trace.c). */
#include "report/trace_text.h"
#include "runs/recording.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void cli_trace_release(cli_trace_first *f) {
    dck_trace_release(&f->t[0]);
    dck_trace_release(&f->t[1]);
    dck_runs_trace_release(&f->r);
    free(f->line);
    free(f->safe_line);
    free(f->magnitudes);
    free(f->unseen);
    free(f->safe_unseen);
    f->line = f->safe_line = f->magnitudes = f->unseen = f->safe_unseen = NULL;
}

static const char *same_name(const char *s) { return s; }

/* A malloc'd string, whole however long its names are; NULL when out of
 * memory. */
static char *strf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *strf(const char *fmt, ...) {
    char *s;
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&s, fmt, ap) < 0) s = NULL;
    va_end(ap);
    return s;
}

/* "forward model.fc (aten.mm.default, call 0)", "forward model.fc (module,
 * call 0)"; with counts, " with 2 inputs and 1 output" after it. */
static char *event_desc(const dck_runs_event *e, bool counts, const char *(*name)(const char *)) {
    char with[96] = "";
    if (counts)
        snprintf(with, sizeof with, " with %u input%s and %u output%s", e->nin, e->nin == 1 ? "" : "s", e->nout,
                 e->nout == 1 ? "" : "s");
    return strf("%s %s (%s, call %u)%s", dck_trace_phase_name(e->phase), name(e->module),
                e->kind == DCK_TRACE_OP ? name(e->op) : "module", e->call, with);
}

/* The verdict line of a difference, names through name (cli_safe for the
 * terminal, as they are for reports and JSON), whole; NULL when out of
 * memory. */
static char *trace_line(const cli_trace_first *f, const char *(*name)(const char *)) {
    const dck_runs_trace *d = &f->r;
    if (d->how == DCK_RUNS_TRACE_EXECUTION) {
        /* counts shown only when they are all that differs */
        bool counts = d->a.present && d->b.present && (d->a.nin != d->b.nin || d->a.nout != d->b.nout);
        char *x[2];
        for (int k = 0; k < 2; k++) {
            const dck_runs_event *e = k ? &d->b : &d->a;
            x[k] = e->present ? event_desc(e, counts, name)
                              : strf("nothing more (its step ended after %zu events)", d->event);
        }
        /* version 1 has no parameters' input and no optimizer phase: such runs never agree */
        char vers[128] = "";
        if (d->version[0] != d->version[1])
            snprintf(vers, sizeof vers, " (trace.bin versions %u and %u: record both runs with one detcheck)",
                     d->version[0], d->version[1]);
        char *line = x[0] && x[1] ? strf("execution differs at event %zu of step %ld: run A ran %s, run B ran %s%s",
                                         d->event, d->step, x[0], x[1], vers)
                                  : NULL;
        free(x[0]);
        free(x[1]);
        return line;
    }
    const dck_runs_event *e = &d->a;
    char how[128];
    if (d->input < 0) snprintf(how, sizeof how, "inputs equal, output differs (culprit)");
    else if (d->input_is_state)
        snprintf(how, sizeof how, "its parameters and buffers already differed (inherited)");
    else snprintf(how, sizeof how, "input %d already differed (inherited)", d->input);
    const char *module = name(e->module);
    if (e->kind == DCK_TRACE_OP)
        return strf("first differing op: step %ld, %s, %s (%s, call %u), output %d: %s", d->step,
                    dck_trace_phase_name(e->phase), module, name(e->op), e->call, d->output, how);
    return strf("first differing module: step %ld, %s, %s (call %u), output %d: %s", d->step,
                dck_trace_phase_name(e->phase), module, e->call, d->output, how);
}

static bool regular_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

dck_status cli_trace_found_lines(const char *const runs[2], cli_trace_first *f) {
    f->line = trace_line(f, same_name);
    f->safe_line = trace_line(f, cli_safe);
    if (f->r.how == DCK_RUNS_TRACE_OUTPUT) {
        /* magnitudes: the recorder dumps one traced step's outputs as
         * safetensors, tensors named by the event's index in the step */
        char *w[2] = {NULL, NULL};
        snprintf(f->tensor, sizeof f->tensor, "%05zu.output.%d", f->r.event, f->r.output);
        for (int k = 0; k < 2; k++) {
            snprintf(f->dump[k], sizeof f->dump[k], "%s/dump_step_%ld/trace.safetensors", runs[k], f->r.step);
            char *word = f->dump[k];
            w[k] = cli_shell_join(&word, 1);
        }
        f->dumps = regular_file(f->dump[0]) && regular_file(f->dump[1]);
        if (w[0] && w[1] && f->dumps)
            f->magnitudes = strf("dumps present: detcheck diff %s %s (tensor %s)", w[0], w[1], f->tensor);
        else if (w[0] && w[1])
            f->magnitudes = strf("magnitudes: rerun both runs with DETCHECK_DUMP_STEP=%ld (e.g. DETCHECK_DUMP_STEP=%ld "
                                 "<your training command>), then: detcheck diff %s %s (tensor %s)",
                                 f->r.step, f->r.step, w[0], w[1], f->tensor);
        free(w[0]);
        free(w[1]);
    } else {
        f->magnitudes = strf("%s", "");
    }
    if (!f->line || !f->safe_line || !f->magnitudes) {
        cli_trace_release(f);
        f->found = false;
        return dck_oom(NULL);
    }
    return DCK_OK;
}

/* A later trace difference, as context: what differs there, without the
 * culprit's words (the runs already differed at f->bound, so equal inputs
 * of the event say nothing about where the difference came from). */
static char *context_line(const cli_trace_first *f, const char *(*name)(const char *)) {
    const dck_runs_trace *d = &f->r;
    const dck_runs_event *e = &d->a;
    char *what;
    if (d->how == DCK_RUNS_TRACE_EXECUTION) what = trace_line(f, name);
    else {
        /* which input already differed, when one did: the weights of a
         * module (its parameters-and-buffers input) say where it came from */
        char in[96] = "";
        if (d->input >= 0 && d->input_is_state)
            snprintf(in, sizeof in, " (its parameters and buffers already differed)");
        else if (d->input >= 0)
            snprintf(in, sizeof in, " (input %d already differed)", d->input);
        if (e->kind == DCK_TRACE_OP)
            what = strf("%s, %s (%s, call %u), output %d differs%s", dck_trace_phase_name(e->phase),
                        name(e->module), name(e->op), e->call, d->output, in);
        else
            what = strf("%s, %s (call %u), output %d differs%s", dck_trace_phase_name(e->phase),
                        name(e->module), e->call, d->output, in);
    }
    char *line = what ? strf("first trace difference, at step %ld, comes after the first differing step %ld "
                             "(context, not a culprit): %s",
                             d->step, d->bound, what)
                      : NULL;
    free(what);
    return line;
}

/* "the module trace cannot see ...": the tensor kinds a trace does not
 * digest (a module's gradients flowing in and out are traced, a parameter's
 * gradient, the update and the optimizer's state are not). */
static char *unseen_line(const cli_trace_first *f, int kind, const char *tensor, const char *(*name)(const char *)) {
    const char *k = dck_rec_kind_name((dck_rec_kind)kind);
    if (f->r.ops)
        return strf("the op trace shows no difference at step %ld, where the first difference is %s %s", f->r.bound, k,
                    name(tensor));
    return strf("the module trace cannot see parameter gradients or the optimizer update: the first difference is "
                "%s %s at step %ld",
                k, name(tensor), f->r.bound);
}

dck_status cli_trace_judged_lines(cli_trace_first *f, int kind, const char *name) {
    if (f->r.unseen) {
        f->unseen = unseen_line(f, kind, name, same_name);
        f->safe_unseen = unseen_line(f, kind, name, cli_safe);
        if (!f->unseen || !f->safe_unseen) return dck_oom(NULL);
    }
    if (f->r.late) {
        char *l = context_line(f, same_name), *sl = context_line(f, cli_safe), *m = strf("%s", "");
        if (!l || !sl || !m) {
            free(l);
            free(sl);
            free(m);
            return dck_oom(NULL);
        }
        free(f->line);
        free(f->safe_line);
        free(f->magnitudes);
        f->line = l;
        f->safe_line = sl;
        f->magnitudes = m;
    }
    return DCK_OK;
}

dck_status cli_trace_adopt(const char *const runs[2], dck_runs_trace *r, int kind, const char *name,
                           cli_trace_first *f) {
    memset(f, 0, sizeof *f);
    f->r = *r;
    memset(&r->a, 0, sizeof r->a); /* f's now */
    memset(&r->b, 0, sizeof r->b);
    f->has[0] = f->r.has[0];
    f->has[1] = f->r.has[1];
    f->both = f->r.both;
    f->found = f->r.found;
    dck_status s = f->found ? cli_trace_found_lines(runs, f) : DCK_OK;
    return s ? s : cli_trace_judged_lines(f, kind, name);
}

const char *cli_trace_next_option(const cli_trace_first *f, char *buf, size_t n) {
    if (f->r.next == DCK_RUNS_NEXT_TRACE_OPS) snprintf(buf, n, "--trace ops");
    else if (f->r.next == DCK_RUNS_NEXT_DUMP_STEP) snprintf(buf, n, "--dump-step %ld", f->r.next_step);
    else if (n) buf[0] = 0;
    return buf;
}

char *cli_trace_next_line(const cli_trace_first *f, const char *const runs[2]) {
    if (f->r.next == DCK_RUNS_NEXT_TRACE_OPS)
        return strf("%s", "next: localise with an op trace: rerun both runs with DETCHECK_TRACE=ops (detcheck repro "
                          "--trace ops -- CMD runs and compares them), then bisect them again");
    if (f->r.next != DCK_RUNS_NEXT_DUMP_STEP) return strf("%s", "");
    char *w[2], *line = NULL;
    for (int k = 0; k < 2; k++) {
        char *p = strf("%s/dump_step_%ld/trace.safetensors", runs[k], f->r.next_step);
        w[k] = p ? cli_shell_join(&p, 1) : NULL;
        free(p);
    }
    if (w[0] && w[1])
        line = strf("next: magnitudes of step %ld's traced outputs: rerun both runs with DETCHECK_DUMP_STEP=%ld "
                    "(detcheck repro --dump-step %ld --trace ops -- CMD), then: detcheck diff %s %s",
                    f->r.next_step, f->r.next_step, f->r.next_step, w[0], w[1]);
    free(w[0]);
    free(w[1]);
    return line;
}

static json_t *trace_event_json(const dck_runs_event *e, bool *oom) {
    if (!e->present) return json_null();
    json_t *o = json_object();
    cli_jset(o, "phase", json_string(dck_trace_phase_name(e->phase)), oom);
    cli_jset(o, "kind", json_string(e->kind == DCK_TRACE_OP ? "op" : "module"), oom);
    cli_jset(o, "module", cli_json_text(e->module), oom);
    cli_jset(o, "op", e->kind == DCK_TRACE_OP ? cli_json_text(e->op) : json_null(), oom);
    cli_jset(o, "call", json_integer(e->call), oom);
    return o;
}

/* "first_event": {step, event, phase, kind, module, op, call, output,
 * input, culprit, how, tensor, magnitudes, run_b, context}; phase..call
 * are run A's event (null when its step ended: how "execution"), run_b run
 * B's event for how "execution" (else null); context true when the event
 * comes after the first differing step of the recordings (cli_trace_judge:
 * culprit false then, whatever its inputs). */
json_t *cli_trace_json(const cli_trace_first *f, bool *oom) {
    if (!f->found) return json_null();
    const dck_runs_trace *d = &f->r;
    bool out = d->how == DCK_RUNS_TRACE_OUTPUT;
    json_t *o = json_object();
    cli_jset(o, "step", json_integer(d->step), oom);
    cli_jset(o, "event", cli_json_u64(d->event), oom);
    json_t *a = trace_event_json(&d->a, oom);
    static const char *const keys[] = {"phase", "kind", "module", "op", "call"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        json_t *v = a && json_is_object(a) ? json_object_get(a, keys[k]) : NULL;
        cli_jset(o, keys[k], v ? json_incref(v) : json_null(), oom);
    }
    json_decref(a);
    cli_jset(o, "output", out ? json_integer(d->output) : json_null(), oom);
    cli_jset(o, "input", out && d->input >= 0 ? json_integer(d->input) : json_null(), oom);
    cli_jset(o, "culprit", json_boolean(out && d->input < 0 && !d->late), oom);
    cli_jset(o, "how", json_string(out ? "output" : "execution"), oom);
    cli_jset(o, "tensor", out ? json_string(f->tensor) : json_null(), oom);
    cli_jset(o, "magnitudes", out && f->magnitudes[0] ? cli_json_text(f->magnitudes) : json_null(), oom);
    cli_jset(o, "run_b", out ? json_null() : trace_event_json(&d->b, oom), oom);
    cli_jset(o, "context", json_boolean(d->late), oom);
    return o;
}

/* The report's case for the traces: failing, named after the first
 * differing event (classname CLASSNAME.step_N.PHASE, name "MODULE
 * (OP, call N)"; type culprit, inherited, execution, or context when it
 * comes after the first differing step); a pass when every
 * traced step in both agrees (skipped when there is none); nothing when
 * one run only was traced (the caller names what was not compared). */
void cli_trace_report(cli_report *rep, const char *classname, const cli_trace_first *f) {
    char cls[128], msg[128];
    if (f->found) {
        const dck_runs_trace *d = &f->r;
        const dck_runs_event *e = d->a.present ? &d->a : &d->b;
        snprintf(cls, sizeof cls, "%s.step_%ld.%s", classname, d->step, dck_trace_phase_name(e->phase));
        char *name = e->kind == DCK_TRACE_OP ? strf("%s (%s, call %u)", e->module, e->op, e->call)
                                             : strf("%s (call %u)", e->module, e->call);
        const char *type = d->late ? "context" : d->how == DCK_RUNS_TRACE_EXECUTION ? "execution"
                                               : d->input < 0                ? "culprit"
                                                                             : "inherited";
        char *text = strf("%s%s%s%s%s", f->unseen ? f->unseen : "", f->unseen ? "; " : "", f->line,
                          f->magnitudes[0] ? "; " : "", f->magnitudes);
        if (name && text) cli_report_case(rep, cls, name, CLI_CASE_FAIL, type, text, NULL);
        else rep->oom = true;
        free(name);
        free(text);
    } else if (f->both && f->r.common) {
        snprintf(msg, sizeof msg, "%zu traced step%s in both agree event by event", f->r.common,
                 f->r.common == 1 ? "" : "s");
        cli_report_case(rep, classname, "traced steps", CLI_CASE_PASS, NULL, msg, NULL);
    } else if (f->both) { /* nothing passed over nothing */
        cli_report_case(rep, classname, "traced steps", CLI_CASE_SKIPPED, NULL,
                        "no step traced in both: the traces are not compared", NULL);
    }
}

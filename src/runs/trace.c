/* Reading the per-step traces a recorded run holds (trace.h): its STEP
 * records, checked field by field (the header, NAME records and the torn
 * last record are the framing both recording files share, framing.c); and
 * finding the first step and event where two traces part. */
#include "runs/trace.h"
#include "runs/framing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { STEP_HEAD = 13, EVENT_HEAD = 16, SLOT_BYTES = 17 };

const char *dck_trace_phase_name(int phase) {
    static const char *const n[DCK_TRACE_PHASE_COUNT] = {"forward", "backward", "optimizer"};
    return (unsigned)phase < DCK_TRACE_PHASE_COUNT ? n[phase] : "?";
}

bool dck_trace_input_is_state(const dck_trace *t, const dck_trace_event *e, int input) {
    return t->version >= 2 && e->kind == DCK_TRACE_MODULE && e->nin && input == e->nin - 1;
}

/* Per version: the phases its events may have and how the message says so. */
static const struct {
    uint8_t phases;
    const char *expected;
} version_rules[DCK_TRACE_VERSION + 1] = {
    [1] = {2, "0 or 1"},
    [2] = {3, "0, 1 or 2"},
};

void dck_trace_release(dck_trace *t) {
    if (!t) return;
    for (size_t i = 0; i < t->nnames; i++) free(t->names[i]);
    free(t->names);
    free(t->steps);
    free(t->events);
    free(t->slots);
    memset(t, 0, sizeof *t);
}

typedef struct {
    dck_trace *r;
    size_t steps, events, slots; /* capacities */
} trace_state;

/* One event at offset at (its step's header read); *torn when the file
 * ends inside it. Every field is checked as soon as it is read, so a
 * count read over the records that follow it meets bytes that are no
 * event and is refused at their offset. */
static dck_status read_event(dck_src *s, trace_state *t, uint64_t at, int64_t step, bool *torn) {
    dck_trace *r = t->r;
    uint8_t h[EVENT_HEAD];
    size_t got;
    DCK_TRY(dck_src_take(s, h, sizeof h, &got));
    if (got < sizeof h) return *torn = true, DCK_OK;
    dck_trace_event e = {.phase = h[0], .kind = h[1], .module = (uint32_t)dck_le(h + 2, 4), .op = (uint32_t)dck_le(h + 6, 4),
                         .call = (uint32_t)dck_le(h + 10, 4), .nin = h[14], .nout = h[15], .slot = r->nslots};
    if (e.phase >= version_rules[r->version].phases)
        return dck_set_error(DCK_ERR_FORMAT, "%s: byte %llu: step %lld: event with phase %u (expected %s)", s->path,
                             (unsigned long long)at, (long long)step, e.phase, version_rules[r->version].expected);
    if (e.kind >= DCK_TRACE_KIND_COUNT)
        return dck_set_error(DCK_ERR_FORMAT, "%s: byte %llu: step %lld: event with kind %u (expected 0 or 1)", s->path,
                             (unsigned long long)at, (long long)step, e.kind);
    if (e.module >= r->nnames)
        return dck_set_error(DCK_ERR_FORMAT, "%s: byte %llu: step %lld: event uses module name id %u, never named",
                             s->path, (unsigned long long)at, (long long)step, e.module);
    if (e.kind == DCK_TRACE_MODULE && e.op != DCK_TRACE_NO_OP)
        return dck_set_error(DCK_ERR_FORMAT, "%s: byte %llu: step %lld: module event with op name id %u (expected 0xffffffff)",
                             s->path, (unsigned long long)at, (long long)step, e.op);
    if (e.kind == DCK_TRACE_OP && e.op >= r->nnames)
        return dck_set_error(DCK_ERR_FORMAT, "%s: byte %llu: step %lld: op event uses op name id %u, never named",
                             s->path, (unsigned long long)at, (long long)step, e.op);
    /* the writer traces only ops inside optimizer.step() */
    if (e.kind == DCK_TRACE_MODULE && e.phase == DCK_TRACE_OPTIMIZER)
        return dck_set_error(DCK_ERR_FORMAT, "%s: byte %llu: step %lld: module event in phase 2 (optimizer: ops only)",
                             s->path, (unsigned long long)at, (long long)step);
    /* its last input is the module's parameters and buffers, present or not */
    if (e.kind == DCK_TRACE_MODULE && r->version >= 2 && !e.nin)
        return dck_set_error(DCK_ERR_FORMAT,
                             "%s: byte %llu: step %lld: module event with no input (version 2: its last input is "
                             "its parameters and buffers)",
                             s->path, (unsigned long long)at, (long long)step);
    size_t nslots = (size_t)e.nin + e.nout;
    for (size_t k = 0; k < nslots; k++) {
        uint8_t b[SLOT_BYTES];
        uint64_t sat = s->pos;
        DCK_TRY(dck_src_take(s, b, sizeof b, &got));
        if (got < sizeof b) return *torn = true, DCK_OK;
        dck_trace_slot x = {b[0], {dck_le(b + 1, 8), dck_le(b + 9, 8)}};
        if (x.present > 1 || (!x.present && (x.digest.high64 || x.digest.low64)))
            return dck_set_error(DCK_ERR_FORMAT,
                                 "%s: byte %llu: step %lld: %s %zu of the event at byte %llu has present byte %u%s",
                                 s->path, (unsigned long long)sat, (long long)step, k < e.nin ? "input" : "output",
                                 k < e.nin ? k : k - e.nin, (unsigned long long)at, x.present,
                                 x.present > 1 ? " (expected 0 or 1)" : " and a digest that is not zero");
        DCK_TRY(dck_src_grow(s, (void **)&r->slots, &t->slots, r->nslots + 1, sizeof *r->slots));
        r->slots[r->nslots++] = x;
    }
    DCK_TRY(dck_src_grow(s, (void **)&r->events, &t->events, r->nevents + 1, sizeof *r->events));
    r->events[r->nevents++] = e;
    return DCK_OK;
}

/* A step record after its type byte at offset at. A record that runs to
 * the end of the file is torn (a killed run) and dropped, but the events
 * it holds must still be events; a count past DCK_TRACE_MAX_EVENTS is
 * damage whatever follows. */
static dck_status read_step(dck_src *s, void *ctx, uint64_t at, bool *torn) {
    trace_state *t = ctx;
    dck_trace *r = t->r;
    uint8_t h[STEP_HEAD];
    size_t got;
    DCK_TRY(dck_src_take(s, h, sizeof h, &got));
    if (got < sizeof h) return *torn = true, DCK_OK;
    int64_t step = (int64_t)dck_le(h, 8);
    uint64_t cnt = dck_le(h + 8, 4);
    uint8_t trunc = h[12];
    if (r->nsteps && step <= r->steps[r->nsteps - 1].step)
        return dck_set_error(DCK_ERR_FORMAT, "%s: byte %llu: step %lld after step %ld", s->path,
                             (unsigned long long)at, (long long)step, r->steps[r->nsteps - 1].step);
    if (cnt > DCK_TRACE_MAX_EVENTS)
        return dck_set_error(DCK_ERR_FORMAT, "%s: byte %llu: step %lld holds %llu events (at most %u)", s->path,
                             (unsigned long long)at, (long long)step, (unsigned long long)cnt, DCK_TRACE_MAX_EVENTS);
    if (trunc > 1)
        return dck_set_error(DCK_ERR_FORMAT, "%s: byte %llu: step %lld: truncated byte %u (expected 0 or 1)", s->path,
                             (unsigned long long)(at + 13), (long long)step, trunc);
    size_t first = r->nevents, slots = r->nslots;
    for (uint64_t k = 0; k < cnt && !*torn; k++) DCK_TRY(read_event(s, t, s->pos, step, torn));
    if (*torn) { /* dropped whole */
        r->nevents = first;
        r->nslots = slots;
        return DCK_OK;
    }
    DCK_TRY(dck_src_grow(s, (void **)&r->steps, &t->steps, r->nsteps + 1, sizeof *r->steps));
    r->steps[r->nsteps++] = (dck_trace_step){(long)step, trunc == 1, (size_t)cnt, first};
    return DCK_OK;
}

/* One id per name (the framing checks it): the writer names each once, and
 * a second id of one name is damage (Python's read_trace refuses it too). */
static dck_status named_twice(dck_src *s, void *ctx, uint32_t a, uint32_t b, uint64_t at_b) {
    const dck_trace *r = ((trace_state *)ctx)->r;
    return dck_set_error(DCK_ERR_FORMAT, "%s: byte %llu: name %s recorded twice, as ids %u and %u", s->path,
                         (unsigned long long)at_b, r->names[a], a, b);
}

/* The writer names the root module and ops outside the model, so an empty
 * name is damage (and would print as nothing). */
static const dck_frame_format format = {
    .magic = "DCKTRAC",
    .file_kind = "trace",
    .min_version = DCK_TRACE_MIN_VERSION,
    .max_version = DCK_TRACE_VERSION,
    .refuse_empty_names = true,
    .name_label = "name id",
    .read_step = read_step,
    .named_twice = named_twice,
};

static dck_status parse(dck_src *s, void *out) {
    dck_trace *r = out;
    trace_state t = {.r = r};
    return dck_frame_read(s, &format, (dck_frame_names){&r->names, &r->nnames, NULL}, &r->version, &t);
}

dck_status dck_trace_parse(const char *label, const uint8_t *data, size_t len, dck_trace *out) {
    memset(out, 0, sizeof *out);
    /* (empty input may come with no pointer: still memory, not a path) */
    dck_status st = dck_src_run(label, data ? data : (const uint8_t *)"", len, parse, out);
    if (st) dck_trace_release(out);
    return st;
}

dck_status dck_trace_load(const char *path, dck_trace *out) {
    memset(out, 0, sizeof *out);
    dck_status st = dck_src_run(path, NULL, 0, parse, out);
    if (st) dck_trace_release(out);
    return st;
}

/* ------------------------------------------------------------------ comparing */

static bool slot_equal(const dck_trace_slot *x, const dck_trace_slot *y) {
    return x->present == y->present && dck_digest_equal(x->digest, y->digest);
}

bool dck_trace_same_event(const dck_trace *ta, const dck_trace_event *a, const dck_trace *tb, const dck_trace_event *b) {
    if (a->phase != b->phase || a->kind != b->kind || a->call != b->call || a->nin != b->nin || a->nout != b->nout)
        return false;
    if (strcmp(ta->names[a->module], tb->names[b->module])) return false;
    return a->kind != DCK_TRACE_OP || !strcmp(ta->names[a->op], tb->names[b->op]);
}

/* One step traced in both: fills d and returns true at its first
 * difference; else counts in seen[0] the outputs compared, in seen[1]
 * those with a digest (absent in both runs: equal, but no evidence). */
static bool compare_step(const dck_trace *ta, const dck_trace_step *sa, const dck_trace *tb, const dck_trace_step *sb,
                         dck_trace_diff *d, size_t seen[2]) {
    size_t n = sa->n < sb->n ? sa->n : sb->n;
    for (size_t i = 0; i <= n; i++) {
        const dck_trace_event *a = i < sa->n ? &ta->events[sa->first + i] : NULL;
        const dck_trace_event *b = i < sb->n ? &tb->events[sb->first + i] : NULL;
        if (!a || !b) {
            /* one step ended: a difference of execution, unless the
             * recorder cut that step short (its later events unknown) */
            if ((!a && !b) || (!a && sa->truncated) || (!b && sb->truncated)) return false;
        } else if (dck_trace_same_event(ta, a, tb, b)) {
            const dck_trace_slot *xa = &ta->slots[a->slot], *xb = &tb->slots[b->slot];
            int out = -1, in = -1;
            for (int k = 0; k < a->nout && out < 0; k++)
                if (!slot_equal(&xa[a->nin + k], &xb[b->nin + k])) out = k;
            if (out < 0) {
                seen[0] += a->nout;
                for (int k = 0; k < a->nout; k++) seen[1] += xa[a->nin + k].present;
                continue;
            }
            for (int k = 0; k < a->nin && in < 0; k++)
                if (!slot_equal(&xa[k], &xb[k])) in = k;
            d->how = DCK_TRACE_OUTPUT;
            d->step = sa->step;
            d->event = i;
            d->a = a;
            d->b = b;
            d->output = out;
            d->input = in;
            return true;
        }
        d->how = DCK_TRACE_EXECUTION;
        d->step = sa->step;
        d->event = i;
        d->a = a;
        d->b = b;
        return true;
    }
    return false;
}

bool dck_trace_compare(const dck_trace *a, const dck_trace *b, dck_trace_diff *d) {
    memset(d, 0, sizeof *d);
    d->output = d->input = -1;
    d->first_truncated[0] = d->first_truncated[1] = d->first_blind = -1;
    for (size_t i = 0, j = 0; i < a->nsteps && j < b->nsteps;) {
        if (a->steps[i].step < b->steps[j].step) i++;
        else if (b->steps[j].step < a->steps[i].step) j++;
        else d->common++, i++, j++;
    }
    for (size_t i = 0, j = 0; i < a->nsteps && j < b->nsteps;) {
        if (a->steps[i].step < b->steps[j].step) {
            i++;
            continue;
        }
        if (b->steps[j].step < a->steps[i].step) {
            j++;
            continue;
        }
        const dck_trace_step *s[2] = {&a->steps[i], &b->steps[j]};
        for (int k = 0; k < 2; k++)
            if (s[k]->truncated && !d->truncated[k]++) d->first_truncated[k] = s[k]->step;
        size_t seen[2] = {0, 0};
        if (compare_step(a, s[0], b, s[1], d, seen)) return true;
        if (seen[0] && !seen[1] && !d->blind++) d->first_blind = s[0]->step;
        d->agreeing++;
        i++;
        j++;
    }
    return false;
}

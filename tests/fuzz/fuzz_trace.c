/* libFuzzer target: the reader of a traced run's trace.bin (detcheck
 * bisect), on the input's bytes. The file is read twice, from memory
 * (dck_trace_parse) and from a file (dck_trace_load, the descriptor path
 * bisect takes): both must agree, status and content. What is read must
 * hold the format's promises (a version it reads, names UTF-8, not empty, without NUL,
 * steps ascending, counts within the cap, name ids named, module events without an op,
 * in forward or backward, and from version 2 with their parameters' input; the
 * optimizer's phase from version 2 only,
 * present 0 or 1 with a zero digest when 0, slots where the events say)
 * and compare equal to itself. */
#include "detcheck.h"
#include "core/core.h" /* dck_utf8_valid */
#include "runs/trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *tmp_path(void) {
    static char path[256];
    if (!path[0]) snprintf(path, sizeof path, "/tmp/dck-fuzz-trace-%d.bin", (int)getpid());
    return path;
}

static int write_file(const char *path, const uint8_t *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    int ok = fwrite(data, 1, size, f) == size;
    return fclose(f) == 0 && ok;
}

#define CHECK(c, ...)                                                                              \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static void same_trace(const dck_trace *a, const dck_trace *b) {
    CHECK(a->version == b->version, "memory and file readings differ in version");
    CHECK(a->nnames == b->nnames && a->nsteps == b->nsteps && a->nevents == b->nevents && a->nslots == b->nslots,
          "memory and file readings differ in size");
    for (size_t i = 0; i < a->nnames; i++) CHECK(!strcmp(a->names[i], b->names[i]), "name %zu differs", i);
    /* field by field: the structs have padding */
    for (size_t i = 0; i < a->nsteps; i++) {
        const dck_trace_step *x = &a->steps[i], *y = &b->steps[i];
        CHECK(x->step == y->step && x->truncated == y->truncated && x->n == y->n && x->first == y->first,
              "step %zu differs", i);
    }
    for (size_t i = 0; i < a->nevents; i++) {
        const dck_trace_event *x = &a->events[i], *y = &b->events[i];
        CHECK(x->phase == y->phase && x->kind == y->kind && x->nin == y->nin && x->nout == y->nout &&
                  x->module == y->module && x->op == y->op && x->call == y->call && x->slot == y->slot,
              "event %zu differs", i);
    }
    for (size_t i = 0; i < a->nslots; i++)
        CHECK(a->slots[i].present == b->slots[i].present && dck_digest_equal(a->slots[i].digest, b->slots[i].digest),
              "slot %zu differs", i);
}

static void promises(const dck_trace *t) {
    CHECK(t->version >= DCK_TRACE_MIN_VERSION && t->version <= DCK_TRACE_VERSION, "version %u", t->version);
    for (size_t i = 0; i < t->nnames; i++)
        CHECK(t->names[i][0] && dck_utf8_valid(t->names[i], strlen(t->names[i])), "name %zu is empty or not UTF-8", i);
    size_t next = 0, slot = 0;
    for (size_t s = 0; s < t->nsteps; s++) {
        const dck_trace_step *st = &t->steps[s];
        CHECK(!s || t->steps[s - 1].step < st->step, "steps out of order");
        CHECK(st->first == next && st->n <= DCK_TRACE_MAX_EVENTS, "step %zu's events", s);
        for (size_t k = 0; k < st->n; k++) {
            const dck_trace_event *e = &t->events[st->first + k];
            CHECK(e->phase < DCK_TRACE_PHASE_COUNT && e->kind < DCK_TRACE_KIND_COUNT, "phase or kind");
            CHECK(t->version >= 2 || e->phase != DCK_TRACE_OPTIMIZER, "optimizer phase in version 1");
            CHECK(e->kind == DCK_TRACE_OP || (e->phase != DCK_TRACE_OPTIMIZER && (t->version < 2 || e->nin)),
                  "module event in the optimizer's phase or without its parameters' input");
            CHECK(dck_trace_input_is_state(t, e, e->nin - 1) == (t->version >= 2 && e->kind == DCK_TRACE_MODULE),
                  "parameters' input");
            CHECK(e->module < t->nnames, "module id past the names");
            CHECK(e->kind == DCK_TRACE_OP ? e->op < t->nnames : e->op == DCK_TRACE_NO_OP, "op id");
            CHECK(e->slot == slot, "event's slots");
            for (size_t j = 0; j < (size_t)e->nin + e->nout; j++) {
                const dck_trace_slot *x = &t->slots[slot + j];
                CHECK(x->present == 1 || (x->present == 0 && !x->digest.high64 && !x->digest.low64), "slot");
            }
            slot += (size_t)e->nin + e->nout;
        }
        next += st->n;
    }
    CHECK(next == t->nevents && slot == t->nslots, "events or slots outside the steps");
    dck_trace_diff d;
    CHECK(!dck_trace_compare(t, t, &d), "a trace differs from itself");
    CHECK(d.common == t->nsteps && d.agreeing == t->nsteps, "common steps with itself");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dck_trace a, b;
    dck_status sa = dck_trace_parse("fuzz", data, size, &a);
    const char *p = tmp_path();
    if (!write_file(p, data, size)) abort();
    dck_status sb = dck_trace_load(p, &b);
    CHECK(sa == sb, "memory reading %d, file reading %d (%s)", (int)sa, (int)sb, dck_last_error());
    if (!sa) {
        same_trace(&a, &b);
        promises(&a);
    }
    dck_trace_release(&a);
    dck_trace_release(&b);
    return 0;
}

/* Reading the tensor digests a recorded run holds (recording.h): its STEP
 * records (the header, NAME records and the torn last record are the
 * framing both recording files share, framing.c); and finding the first
 * step and tensor where two recordings part. */
#include "runs/recording.h"
#include "runs/framing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { STEP_HEAD = 12, ENTRY_BYTES = 20 };

const char *dck_rec_kind_name(dck_rec_kind k) {
    static const char *const n[DCK_REC_KIND_COUNT] = {"gradient", "parameter", "optimizer state", "state"};
    return (unsigned)k < DCK_REC_KIND_COUNT ? n[k] : "?";
}

int dck_rec_kind_rank(int kind) {
    /* state first: what the step started from explains what follows */
    static const int rank[DCK_REC_KIND_COUNT] = {1, 2, 3, 0};
    return (unsigned)kind < DCK_REC_KIND_COUNT ? rank[kind] : DCK_REC_KIND_COUNT;
}

void dck_recording_release(dck_recording *r) {
    if (!r) return;
    for (size_t i = 0; i < r->nnames; i++) free(r->names[i]);
    free(r->names);
    free(r->kinds);
    free(r->steps);
    free(r->entries);
    memset(r, 0, sizeof *r);
}

typedef struct {
    dck_recording *r;
    size_t steps, entries, seen; /* capacities */
    size_t *seen_in; /* per id: 1 + the index of the last step that listed it */
} rec_state;

/* A step record after its type byte at offset at. A step lists each named
 * tensor at most once, so its count is at most the names before it: a
 * larger count is damage, not a tear, whatever follows. A record that runs
 * to the end of the file is torn (a killed run) and dropped, but the
 * entries it holds must still be entries. */
static dck_status read_step(dck_src *s, void *ctx, uint64_t at, bool *torn) {
    rec_state *t = ctx;
    dck_recording *r = t->r;
    /* names that came since the last step: listed in none yet */
    size_t had = t->seen;
    DCK_TRY(dck_src_grow(s, (void **)&t->seen_in, &t->seen, r->nnames, sizeof *t->seen_in));
    if (t->seen > had) memset(t->seen_in + had, 0, (t->seen - had) * sizeof *t->seen_in);
    uint8_t h[STEP_HEAD];
    size_t got;
    DCK_TRY(dck_src_take(s, h, sizeof h, &got));
    if (got < sizeof h) return *torn = true, DCK_OK;
    int64_t step = (int64_t)dck_le(h, 8);
    uint64_t cnt = dck_le(h + 8, 4);
    if (r->nsteps && step <= r->steps[r->nsteps - 1].step)
        return dck_set_error(DCK_ERR_FORMAT, "%s: byte %llu: step %lld after step %ld", s->path,
                             (unsigned long long)at, (long long)step, r->steps[r->nsteps - 1].step);
    if (cnt > r->nnames)
        return dck_set_error(DCK_ERR_FORMAT, "%s: byte %llu: step %lld lists %llu tensors, but only %zu are named before it",
                             s->path, (unsigned long long)at, (long long)step, (unsigned long long)cnt, r->nnames);
    size_t first = r->nentries;
    size_t mark = r->nsteps + 1;
    for (uint64_t k = 0; k < cnt; k++) {
        uint8_t e[ENTRY_BYTES];
        uint64_t eat = s->pos;
        DCK_TRY(dck_src_take(s, e, sizeof e, &got));
        if (got < sizeof e) {
            r->nentries = first;
            return *torn = true, DCK_OK;
        }
        uint32_t id = (uint32_t)dck_le(e, 4);
        if (id >= r->nnames)
            return dck_set_error(DCK_ERR_FORMAT, "%s: byte %llu: step %lld uses tensor id %u, never named",
                                 s->path, (unsigned long long)eat, (long long)step, id);
        if (t->seen_in[id] == mark)
            return dck_set_error(DCK_ERR_FORMAT, "%s: byte %llu: step %lld lists tensor id %u (%s) twice",
                                 s->path, (unsigned long long)eat, (long long)step, id, r->names[id]);
        t->seen_in[id] = mark;
        DCK_TRY(dck_src_grow(s, (void **)&r->entries, &t->entries, r->nentries + 1, sizeof *r->entries));
        dck_rec_entry *x = &r->entries[r->nentries++];
        x->id = id;
        x->digest.high64 = dck_le(e + 4, 8);
        x->digest.low64 = dck_le(e + 12, 8);
    }
    DCK_TRY(dck_src_grow(s, (void **)&r->steps, &t->steps, r->nsteps + 1, sizeof *r->steps));
    r->steps[r->nsteps++] = (dck_rec_step){(long)step, (size_t)cnt, first};
    return DCK_OK;
}

/* One id per (kind, name) (the framing checks it): a step's entries are
 * matched with the other run's by kind and name. */
static dck_status named_twice(dck_src *s, void *ctx, uint32_t a, uint32_t b, uint64_t at_b) {
    const dck_recording *r = ((rec_state *)ctx)->r;
    (void)at_b;
    return dck_set_error(DCK_ERR_FORMAT, "%s: tensor %s (%s) is named twice, as ids %u and %u", s->path, r->names[a],
                         dck_rec_kind_name((dck_rec_kind)r->kinds[a]), a, b);
}

static const dck_frame_format format = {
    .magic = "DCKTDIG",
    .file_kind = "tensor digest",
    .min_version = DCK_RECORD_VERSION,
    .max_version = DCK_RECORD_VERSION,
    .name_kinds = DCK_REC_KIND_COUNT,
    .name_label = "name of tensor id",
    .read_step = read_step,
    .named_twice = named_twice,
};

static dck_status parse(dck_src *s, void *out) {
    dck_recording *r = out;
    rec_state t = {.r = r};
    dck_status st = dck_frame_read(s, &format, (dck_frame_names){&r->names, &r->nnames, &r->kinds}, NULL, &t);
    free(t.seen_in);
    return st;
}

dck_status dck_recording_parse(const char *label, const uint8_t *data, size_t len, dck_recording *out) {
    memset(out, 0, sizeof *out);
    /* (empty input may come with no pointer: still memory, not a path) */
    dck_status st = dck_src_run(label, data ? data : (const uint8_t *)"", len, parse, out);
    if (st) dck_recording_release(out);
    return st;
}

dck_status dck_recording_load(const char *path, dck_recording *out) {
    memset(out, 0, sizeof *out);
    dck_status st = dck_src_run(path, NULL, 0, parse, out);
    if (st) dck_recording_release(out);
    return st;
}

/* sorting the entries of one step: kind, then model order */
static const dck_recording *sort_rec;

static int entry_cmp(const void *x, const void *y) {
    const dck_rec_entry *a = x, *b = y;
    int ka = dck_rec_kind_rank(sort_rec->kinds[a->id]), kb = dck_rec_kind_rank(sort_rec->kinds[b->id]);
    if (ka != kb) return ka - kb;
    return dck_name_compare(sort_rec->names[a->id], sort_rec->names[b->id]);
}

static dck_rec_entry *sorted_step(const dck_recording *r, const dck_rec_step *st) {
    dck_rec_entry *v = malloc((st->n ? st->n : 1) * sizeof *v);
    if (!v) return NULL;
    memcpy(v, r->entries + st->first, st->n * sizeof *v);
    sort_rec = r; /* bisect is single-threaded */
    qsort(v, st->n, sizeof *v, entry_cmp);
    return v;
}

size_t dck_recording_common_steps(const dck_recording *a, const dck_recording *b) {
    size_t n = 0;
    for (size_t i = 0, j = 0; i < a->nsteps && j < b->nsteps;) {
        if (a->steps[i].step < b->steps[j].step) i++;
        else if (b->steps[j].step < a->steps[i].step) j++;
        else n++, i++, j++;
    }
    return n;
}

/* The first difference of a step both recorded. */
typedef struct {
    long *step;
    int *kind;
    char *name;
    size_t nlen;
    const char **how;
} rec_found;

/* One step recorded in both, merged in kind and model order. With f: its
 * first difference (1, f filled in), at once unless u is given too. With
 * u: the state entries one run only holds, counted to the end. -1: out of
 * memory. */
static int walk_step(const dck_recording *a, const dck_rec_step *sa, const dck_recording *b, const dck_rec_step *sb,
                     const rec_found *f, dck_rec_state_only *u) {
    dck_rec_entry *x = sorted_step(a, sa), *y = sorted_step(b, sb);
    if (!x || !y) {
        free(x);
        free(y);
        return -1;
    }
    size_t p = 0, q = 0, nx = sa->n, ny = sb->n;
    int found = 0;
    while ((p < nx || q < ny) && !(found && !u)) {
        int c;
        if (p == nx) c = 1;
        else if (q == ny) c = -1;
        else {
            c = dck_rec_kind_rank(a->kinds[x[p].id]) - dck_rec_kind_rank(b->kinds[y[q].id]);
            if (!c) c = strcmp(a->names[x[p].id], b->names[y[q].id]) ? dck_name_compare(a->names[x[p].id], b->names[y[q].id]) : 0;
        }
        /* a state name one run only recorded: no tensor difference, but
         * not compared either (counted for u) */
        int side = c < 0 && a->kinds[x[p].id] == DCK_REC_STATE ? 0 : c > 0 && b->kinds[y[q].id] == DCK_REC_STATE ? 1 : -1;
        if (side >= 0) {
            const char *nm = side ? b->names[y[q].id] : a->names[x[p].id];
            if (u && !u->count[side]++) {
                u->step[side] = sa->step;
                u->name[side] = nm;
            }
            if (u) u->last[side] = sa->step;
            if (side) q++;
            else p++;
            continue;
        }
        const char *nm = NULL, *how = NULL;
        int kind = 0;
        if (c < 0) {
            nm = a->names[x[p++].id];
            kind = a->kinds[x[p - 1].id];
            how = "only in A";
        } else if (c > 0) {
            nm = b->names[y[q++].id];
            kind = b->kinds[y[q - 1].id];
            how = "only in B";
        } else {
            if (!dck_digest_equal(x[p].digest, y[q].digest)) {
                nm = a->names[x[p].id];
                kind = a->kinds[x[p].id];
                how = "digest";
            }
            p++;
            q++;
        }
        if (nm && f && !found) {
            snprintf(f->name, f->nlen, "%s", nm);
            *f->kind = kind;
            *f->how = how;
            *f->step = sa->step;
            found = 1;
        }
    }
    free(x);
    free(y);
    return found;
}

/* Every step in both, in order, through walk_step; stops at the first
 * difference when only f is asked for. */
static int walk(const dck_recording *a, const dck_recording *b, const rec_found *f, dck_rec_state_only *u) {
    int found = 0;
    for (size_t i = 0, j = 0; i < a->nsteps && j < b->nsteps && !(found && !u);) {
        if (a->steps[i].step < b->steps[j].step) {
            i++;
            continue;
        }
        if (b->steps[j].step < a->steps[i].step) {
            j++;
            continue;
        }
        int c = walk_step(a, &a->steps[i], b, &b->steps[j], found ? NULL : f, u);
        if (c < 0) return -1;
        found |= c;
        i++;
        j++;
    }
    return found;
}

int dck_recording_compare(const dck_recording *a, const dck_recording *b, long *step, int *kind,
                          char *name, size_t nlen, const char **how) {
    const rec_found f = {step, kind, name, nlen, how};
    return walk(a, b, &f, NULL);
}

int dck_recording_state_only(const dck_recording *a, const dck_recording *b, dck_rec_state_only *u) {
    memset(u, 0, sizeof *u);
    u->step[0] = u->step[1] = u->last[0] = u->last[1] = -1;
    return walk(a, b, NULL, u) < 0 ? -1 : 0;
}

/* The CPU hashing engine: every file is streamed once in windows; each
 * window is cut into tasks (runs of one piece) hashed on the thread pool,
 * concurrently with the whole-file xxh128 of the window. Strided and
 * byte-swapped pieces are gathered through the file's map. Digests are the
 * same for every thread count (digest v1 sums lanes, order-free). */
#include "hash/hash.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW_BYTES ((size_t)128 << 20)
#define TASK_BYTES ((uint64_t)1 << 20)

typedef struct {
    dck_tensor_entry *t;
    dck_tensor_hasher *h;
    const dck_piece *p;
    dck_piece_geom g;
    uint64_t a, b;   /* stored byte range of the piece [a, b) in this task */
    const uint8_t *data; /* bytes of stored offset a */
} hash_task;

typedef struct {
    hash_task *tasks;
    size_t n, cap;
    dck_stream *stream;
    const char *path; /* the file the window belongs to, for messages */
} window_job;

static dck_status run_task(const window_job *j, const hash_task *k) {
    uint64_t a = k->a;
    const uint8_t *d = k->data;
    while (a < k->b) {
        uint64_t run = a / k->g.run_bytes, in = a % k->g.run_bytes;
        uint64_t take = k->g.run_bytes - in;
        if (take > k->b - a) take = k->b - a;
        uint64_t goff = dck_piece_run_global(k->t, k->p, &k->g, run) + in;
        dck_status s = dck_tensor_hasher_update(k->h, goff, d, (size_t)take);
        if (s)
            return dck_set_error(s, "%s: tensor %s: %s", j->path, k->t->info.name,
                                 dck_last_error());
        a += take;
        d += take;
    }
    return DCK_OK;
}

/* Task 0 feeds the window to the whole-file hash; task i > 0 hashes tasks[i - 1]. */
static dck_status window_task(void *ctx, size_t i, int worker) {
    (void)worker;
    window_job *j = ctx;
    if (i == 0) {
        dck_stream_hash_window(j->stream);
        return DCK_OK;
    }
    return run_task(j, &j->tasks[i - 1]);
}

typedef struct {
    dck_tensor_entry *t;
    dck_tensor_hasher *h;
    size_t pi;
    uint64_t start; /* piece stored begin */
    uint64_t end;
} span;

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* Task boundaries: split at stored offsets whose global offset falls on a
 * segment edge where possible, so few partial segments need stitching. */
static dck_status add_tasks(window_job *j, const span *sp, const dck_piece_geom *g, uint64_t w0,
                            const uint8_t *wdata, uint64_t a, uint64_t b) {
    while (a < b) {
        uint64_t e = a + TASK_BYTES;
        if (e >= b) e = b;
        else if (g->q < 0) e -= (e - sp->start) % DCK_SEGMENT; /* global == stored - start */
        dck_status s = dck_grow((void **)&j->tasks, &j->cap, j->n + 1, sizeof *j->tasks);
        if (s) return s;
        hash_task *k = &j->tasks[j->n++];
        k->t = sp->t;
        k->h = sp->h;
        k->p = &sp->t->pieces[sp->pi];
        k->g = *g;
        k->a = a - sp->start;
        k->b = e - sp->start;
        k->data = wdata + (a - w0);
        a = e;
    }
    return DCK_OK;
}

static dck_status hash_file_stream(dck_checkpoint *ck, uint32_t fi, span *sp, size_t nsp, int threads,
                                   dck_digest *fhash, uint64_t *done, uint64_t total) {
    dck_file *f = ck->files[fi];
    dck_stream *st;
    dck_status s = dck_stream_open(f, WINDOW_BYTES, ck->opt.hash_files != 0, &st);
    if (s) return s;
    window_job j = {0};
    j.stream = st;
    j.path = f->path;
    size_t first = 0;
    for (;;) {
        const uint8_t *wd;
        uint64_t w0;
        size_t wl;
        if ((s = dck_stream_next(st, &wd, &w0, &wl))) break;
        if (!wl) break;
        uint64_t w1 = w0 + wl;
        j.n = 0;
        while (first < nsp && sp[first].end <= w0) first++;
        for (size_t i = first; i < nsp && sp[i].start < w1 && !s; i++) {
            if (sp[i].end <= w0) continue;
            dck_piece_geom g;
            dck_piece_geom_of(sp[i].t, &sp[i].t->pieces[sp[i].pi], &g);
            uint64_t a = sp[i].start > w0 ? sp[i].start : w0;
            uint64_t b = sp[i].end < w1 ? sp[i].end : w1;
            s = add_tasks(&j, &sp[i], &g, w0, wd, a, b);
        }
        if (s) break;
        if ((s = dck_parallel_for_status(threads, j.n + 1, window_task, &j))) break;
        *done += wl;
        if (ck->opt.progress) ck->opt.progress(ck->opt.progress_ctx, *done, total);
    }
    if (!s) {
        uint64_t size = st ? f->data_size : 0;
        for (size_t i = 0; i < nsp; i++)
            if (sp[i].end > size) {
                s = dck_set_error(DCK_ERR_TRUNCATED,
                                  "%s: truncated: tensor %s needs bytes up to %llu, file has %llu",
                                  f->path, sp[i].t->info.name, (unsigned long long)sp[i].end,
                                  (unsigned long long)size);
                break;
            }
    }
    if (!s) *fhash = dck_stream_file_hash(st);
    dck_stream_close(st);
    free(j.tasks);
    return s;
}

static dck_status hash_strided(dck_checkpoint *ck, dck_tensor_entry *t, dck_tensor_hasher *h,
                               const dck_piece *p) {
    dck_file *f = ck->files[p->file];
    const uint8_t *base;
    uint64_t blen, pend = 0;
    dck_status s = dck_file_map(f, &base, &blen);
    if (s) return s;
    if (dck_piece_extent(t, p, &pend) || pend > blen)
        return dck_set_error(DCK_ERR_TRUNCATED, "%s: truncated: tensor %s needs bytes up to %llu",
                             f->path, t->info.name, (unsigned long long)pend);
    size_t es = dck_dtype_size(t->info.dtype);
    uint64_t n = t->info.nbytes / es;
    size_t per = (size_t)(TASK_BYTES / es);
    uint8_t *buf = malloc(per * es);
    if (!buf) return dck_oom(NULL);
    for (uint64_t e = 0; e < n && !s; e += per) {
        size_t k = (size_t)(n - e < per ? n - e : per);
        dck_piece_gather(t, p, base, e, k, buf);
        if ((s = dck_tensor_hasher_update(h, e * es, buf, k * es)))
            s = dck_set_error(s, "%s: tensor %s: %s", f->path, t->info.name, dck_last_error());
    }
    free(buf);
    return s;
}

dck_status dck_checkpoint_hash(dck_checkpoint *ck, const dck_options *optin, dck_manifest **out) {
    *out = NULL;
    if (optin) ck->opt = *optin;
    int threads = ck->opt.threads > 0 ? ck->opt.threads : dck_default_threads();
    dck_tensor_hasher **h = calloc(ck->ntensors ? ck->ntensors : 1, sizeof *h);
    dck_digest *fh = calloc(ck->nfiles ? ck->nfiles : 1, sizeof *fh), *td = NULL;
    span *sp = NULL;
    size_t nsp = 0, cap = 0;
    dck_manifest *m = NULL;
    dck_status s = DCK_OK;
    if (!h || !fh) {
        s = dck_oom(NULL);
        goto done;
    }
    for (size_t i = 0; i < ck->ntensors && !s; i++) {
        dck_tensor_entry *t = &ck->tensors[i];
        s = dck_tensor_hasher_create(t->info.dtype, t->info.shape, t->info.ndim, &h[i]);
    }
    uint64_t total = 0, done_bytes = 0;
    for (size_t fi = 0; fi < ck->nfiles; fi++)
        total += ck->files[fi]->data_size != UINT64_MAX ? ck->files[fi]->data_size : ck->files[fi]->size;
    for (uint32_t fi = 0; fi < ck->nfiles && !s; fi++) {
        nsp = 0;
        for (size_t ti = 0; ti < ck->ntensors && !s; ti++) {
            dck_tensor_entry *t = &ck->tensors[ti];
            for (size_t pi = 0; pi < t->npieces; pi++) {
                dck_piece *p = &t->pieces[pi];
                if (p->file != fi || p->strides || p->byteswap) continue;
                if ((s = dck_grow((void **)&sp, &cap, nsp + 1, sizeof *sp))) break;
                uint64_t e;
                dck_piece_extent(t, p, &e);
                sp[nsp++] = (span){t, h[ti], pi, p->file_offset, e};
            }
        }
        if (s) break;
        dck_qsort(sp, nsp, sizeof *sp, cmp_span);
        s = hash_file_stream(ck, fi, sp, nsp, threads, &fh[fi], &done_bytes, total);
    }
    for (size_t ti = 0; ti < ck->ntensors && !s; ti++) {
        dck_tensor_entry *t = &ck->tensors[ti];
        for (size_t pi = 0; pi < t->npieces && !s; pi++)
            if (t->pieces[pi].strides || t->pieces[pi].byteswap)
                s = hash_strided(ck, t, h[ti], &t->pieces[pi]);
    }
    if (s) goto done;
    td = calloc(ck->ntensors ? ck->ntensors : 1, sizeof *td);
    if (!td) {
        s = dck_oom(NULL);
        goto done;
    }
    for (size_t ti = 0; ti < ck->ntensors && !s; ti++)
        if ((s = dck_tensor_hasher_final(h[ti], &td[ti])))
            s = dck_set_error(s, "tensor %s (%s): %s", ck->tensors[ti].info.name,
                              ck->tensors[ti].info.source, dck_last_error());
    if (!s) s = dck_ck_build_manifest(ck, td, fh, &m);
done:
    if (h)
        for (size_t i = 0; i < ck->ntensors; i++) dck_tensor_hasher_free(h[i]);
    free(h);
    free(fh);
    free(td);
    free(sp);
    if (s) {
        dck_manifest_free(m);
        return s;
    }
    *out = m;
    return DCK_OK;
}

dck_status dck_hash_paths(const char *const *paths, size_t npaths, const dck_options *opt,
                          dck_manifest **out) {
    dck_checkpoint *ck;
    *out = NULL;
    dck_status s = dck_checkpoint_open(paths, npaths, opt, &ck);
    if (s) return s;
    s = dck_checkpoint_hash(ck, opt, out);
    dck_checkpoint_free(ck);
    return s;
}

/* The CPU hashing engine: every byte of a file is read once.
 *
 * Files are streamed in windows (dck_stream). A window is cut into blocks
 * of BLOCK_BYTES (cache-sized) and each block is one task of the thread
 * pool: it hashes the tensor bytes that start in the block, then feeds the
 * block to the whole-file xxh128 while it is still in the cache. The
 * whole-file hash must see the blocks in order; whichever thread finishes
 * the next block in line takes the file's baton and hashes every finished
 * block from there (with one thread: each block right after its segments).
 * Small files are handed to the pool many at a time (a batch), so a
 * directory of thousands of files is a few pool loops, not thousands; a
 * file of one block (up to 256 KiB) is not mapped but read whole by the
 * task that hashes it, with one pread into that worker's buffer.
 *
 * Tensors stored whole and contiguous (one piece, in order) are "direct":
 * their bytes are cut at segment boundaries, so each task adds its lane
 * sums straight to the tensor's; a segment that a window edge cuts is
 * stitched on the calling thread. Every other piece goes through a
 * dck_tensor_hasher (partial segments stitched in offset order), strided
 * and byte-swapped pieces through the file's map. Digests are the same for
 * every thread count and batch size (digest v1 sums lanes, order-free).
 *
 * The same engine hashes a rank's share under --distributed
 * (dck_cpu_hash_ranges): spans of whole segments, lane sums out. */
#include "core/digest_simd.h"
#include "gpu/gpu.h"
#include "hash/hash.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW_BYTES ((size_t)128 << 20)
#define BLOCK_BYTES ((uint64_t)256 << 10)
/* Tasks of pieces that go through a tensor hasher (and its error messages'
 * fragments): 1 MiB. */
#define TASK_BYTES ((uint64_t)1 << 20)
/* Files up to a window are batched until a batch holds this much. */
#define BATCH_BYTES ((uint64_t)16 << 20)
#define BATCH_FILES 4096

typedef struct {
    dck_tensor_entry *t;
    size_t ti, pi;       /* tensor and piece */
    uint32_t file;
    uint64_t start, end; /* stored bytes to hash, [start, end) */
    uint64_t pstart;     /* the piece's first stored byte */
    int direct;          /* global offset = stored - pstart; lane sums straight */
} span;

typedef struct {
    const span *sp;
    uint64_t a, b;       /* stored bytes [a, b) */
    size_t doff;         /* where stored offset a lies in its window's bytes */
    size_t order;        /* creation order (ties of a) */
} task;

typedef struct {
    size_t unit;
    size_t xoff;          /* the block's bytes in its window, for the whole-file hash */
    size_t xlen;
    size_t t0, t1;        /* its tasks */
    int ready;            /* tasks done (under the batch's mu) */
    int failed;           /* a task failed (read after the loop) */
} block;

/* One window of one file. */
typedef struct {
    dck_file *f;
    uint32_t fi;
    const uint8_t *wd; /* the window's bytes; NULL: a small file its block reads itself */
    uint64_t rlen;     /* that block: the bytes to read from offset 0 */
    const span *sp;    /* that file's spans (for a file found cut short) */
    size_t nsp;
    dck_xxh3 *xh;   /* whole-file hash fed by blocks; NULL: none here */
    size_t b0, b1;  /* its blocks */
    size_t cursor;  /* next block for the whole-file hash (under mu) */
    int busy;       /* a thread holds the baton (under mu) */
} unit;

typedef struct {
    dck_checkpoint *ck;
    uint64_t *lanes;         /* 2 per tensor: direct spans' sums (atomics) */
    dck_tensor_hasher **h;   /* per tensor, for the others */
    task *tasks;
    size_t nt, cap_t;
    block *blocks;
    size_t nb, cap_b;
    unit *units;
    size_t nu, cap_u;
    uint8_t **wbuf;          /* per pool worker: BLOCK_BYTES for small files read whole */
    int nwbuf;
    pthread_mutex_t mu;
} batch;

/* ------------------------------------------------------------------ tasks */

static void add_lanes(uint64_t *lanes, size_t ti, dck_lanes l) {
    __atomic_fetch_add(&lanes[2 * ti], l.lo, __ATOMIC_RELAXED);
    __atomic_fetch_add(&lanes[2 * ti + 1], l.hi, __ATOMIC_RELAXED);
}

static dck_status run_task(batch *b, const task *k, const uint8_t *wd) {
    const span *sp = k->sp;
    const uint8_t *data = wd + k->doff;
    if (sp->direct) {
        add_lanes(b->lanes, sp->ti,
                  dck_segments_sum(data, (size_t)(k->b - k->a), (k->a - sp->pstart) / DCK_SEGMENT));
        return DCK_OK;
    }
    const dck_piece *p = &sp->t->pieces[sp->pi];
    dck_piece_geom g;
    dck_piece_geom_of(sp->t, p, &g);
    uint64_t a = k->a - sp->pstart, end = k->b - sp->pstart;
    const uint8_t *d = data;
    while (a < end) {
        uint64_t run = a / g.run_bytes, in = a % g.run_bytes;
        uint64_t take = g.run_bytes - in;
        if (take > end - a) take = end - a;
        uint64_t goff = dck_piece_run_global(sp->t, p, &g, run) + in;
        dck_status s = dck_tensor_hasher_update(b->h[sp->ti], goff, d, (size_t)take);
        if (s)
            return dck_set_error(s, "%s: tensor %s: %s", b->ck->files[sp->file]->path,
                                 sp->t->info.name, dck_last_error());
        a += take;
        d += take;
    }
    return DCK_OK;
}

/* A small file whole into this worker's buffer, one pread: mapping it
 * instead costs an mmap, a munmap, page faults and a TLB flush per file,
 * more than copying 64 KiB. A file cut short since it was opened fails as
 * file_finish would have said (the first span past its end); bytes beyond
 * its size when opened are not read, as the stream maps none. */
static dck_status read_small(batch *b, unit *u, block *bk, int worker, const uint8_t **wd) {
    if (worker < 0 || worker >= b->nwbuf)
        return dck_set_error(DCK_ERR_IO, "%s: no buffer for worker %d", u->f->path, worker);
    /* page-aligned: the kernel's copy into a misaligned buffer runs at a
     * fraction of its speed on some CPUs */
    if (!b->wbuf[worker] && posix_memalign((void **)&b->wbuf[worker], 4096, BLOCK_BYTES))
        return dck_oom(NULL);
    size_t got = 0;
    DCK_TRY(dck_file_read_at(u->f, 0, b->wbuf[worker], (size_t)u->rlen, &got));
    for (size_t i = 0; got < u->rlen && i < u->nsp; i++)
        if (u->sp[i].end > got)
            return dck_set_error(DCK_ERR_TRUNCATED,
                                 "%s: truncated: tensor %s needs bytes up to %llu, file has %llu",
                                 u->f->path, u->sp[i].t->info.name,
                                 (unsigned long long)u->sp[i].end, (unsigned long long)got);
    if (bk->xlen > got) bk->xlen = got; /* the whole-file hash of what is there */
    *wd = b->wbuf[worker];
    return DCK_OK;
}

/* Block i: its tasks, then the whole-file hash of every finished block in
 * line (the baton). A file that shrinks while its window is mapped reads
 * zeros where it lost pages (io.c); batch_run checks the window's file
 * before any of it counts. */
static dck_status block_task(void *ctx, size_t i, int worker) {
    batch *b = ctx;
    block *bk = &b->blocks[i];
    unit *u = &b->units[bk->unit];
    const uint8_t *wd = u->wd;
    dck_status s = DCK_OK;
    if (!wd && (s = read_small(b, u, bk, worker, &wd))) {
        bk->failed = 1;
        return s;
    }
    for (size_t k = bk->t0; k < bk->t1; k++) {
        if ((s = run_task(b, &b->tasks[k], wd))) {
            bk->failed = 1;
            return s;
        }
    }
    if (!u->xh) return DCK_OK;
    if (!u->wd) {
        /* the unit's only block, in this worker's buffer: no baton */
        dck_xxh3_update(u->xh, wd + bk->xoff, bk->xlen);
        pthread_mutex_lock(&b->mu);
        bk->ready = 1;
        u->cursor = u->b1;
        pthread_mutex_unlock(&b->mu);
        return DCK_OK;
    }
    pthread_mutex_lock(&b->mu);
    bk->ready = 1;
    if (!u->busy) {
        u->busy = 1;
        while (u->cursor < u->b1 && b->blocks[u->cursor].ready) {
            const block *x = &b->blocks[u->cursor];
            pthread_mutex_unlock(&b->mu);
            dck_xxh3_update(u->xh, u->wd + x->xoff, x->xlen);
            pthread_mutex_lock(&b->mu);
            u->cursor++;
        }
        u->busy = 0;
    }
    pthread_mutex_unlock(&b->mu);
    return DCK_OK;
}

/* ------------------------------------------------------------------ planning a window */

static dck_status push_task(batch *b, const span *sp, uint64_t a, uint64_t e, uint64_t w0) {
    DCK_TRY(dck_grow((void **)&b->tasks, &b->cap_t, b->nt + 1, sizeof *b->tasks));
    b->tasks[b->nt] = (task){sp, a, e, (size_t)(a - w0), b->nt};
    b->nt++;
    return DCK_OK;
}

/* A segment of a direct span that a window edge cuts: its first bytes wait
 * here for the next window. */
typedef struct {
    size_t span;
    uint64_t seg_start; /* stored offset of the segment */
    uint32_t len;
    uint8_t bytes[DCK_SEGMENT];
} stitch;

typedef struct {
    stitch *v;
    size_t n, cap;
} stitches;

/* Direct span bytes [a, b) of the window [w0, w0 + wl): the stitched
 * segment at a window's start completes first, a segment cut by the
 * window's end waits; the rest becomes tasks cut at block ends, on segment
 * boundaries. */
static dck_status plan_direct(batch *b, stitches *stv, const span *spans, size_t si,
                              const uint8_t *wd, uint64_t w0, size_t wl, uint64_t a, uint64_t e) {
    const span *sp = &spans[si];
    uint64_t w1 = w0 + wl;
    if (a > sp->start && (a - sp->pstart) % DCK_SEGMENT) {
        size_t k = 0;
        while (k < stv->n && stv->v[k].span != si) k++;
        if (k == stv->n) return dck_set_error(DCK_ERR_LAYOUT, "segment stitch lost");
        stitch *st = &stv->v[k];
        uint64_t seg_end = st->seg_start + DCK_SEGMENT;
        uint64_t upto = seg_end < e ? seg_end : e;
        if (!wd) return dck_set_error(DCK_ERR_LAYOUT, "segment stitch in a file read whole");
        memcpy(st->bytes + st->len, wd + (a - w0), (size_t)(upto - a));
        st->len += (uint32_t)(upto - a);
        if (upto == seg_end || upto == sp->end) {
            add_lanes(b->lanes, sp->ti,
                      dck_segments_sum(st->bytes, st->len, (st->seg_start - sp->pstart) / DCK_SEGMENT));
            stv->v[k] = stv->v[--stv->n];
        }
        a = upto;
    }
    if (e == w1 && e < sp->end && (e - sp->pstart) % DCK_SEGMENT) {
        uint64_t cut = e - (e - sp->pstart) % DCK_SEGMENT;
        if (cut < a) return dck_set_error(DCK_ERR_LAYOUT, "window smaller than a segment");
        if (!wd) return dck_set_error(DCK_ERR_LAYOUT, "segment stitch in a file read whole");
        DCK_TRY(dck_grow((void **)&stv->v, &stv->cap, stv->n + 1, sizeof *stv->v));
        stitch *st = &stv->v[stv->n++];
        st->span = si;
        st->seg_start = cut;
        st->len = (uint32_t)(e - cut);
        memcpy(st->bytes, wd + (cut - w0), st->len);
        e = cut;
    }
    while (a < e) {
        uint64_t next = w0 + ((a - w0) / BLOCK_BYTES + 1) * BLOCK_BYTES, c = e;
        if (next < e) {
            c = next - (next - sp->pstart) % DCK_SEGMENT;
            if (c <= a) c = a + DCK_SEGMENT < e ? a + DCK_SEGMENT : e;
        }
        DCK_TRY(push_task(b, sp, a, c, w0));
        a = c;
    }
    return DCK_OK;
}

/* Other pieces: tasks of TASK_BYTES, cut on segment boundaries where the
 * piece is the whole tensor, so few partial segments need stitching. */
static dck_status plan_hasher(batch *b, const span *sp, uint64_t w0, uint64_t a, uint64_t e) {
    dck_piece_geom g;
    dck_piece_geom_of(sp->t, &sp->t->pieces[sp->pi], &g);
    while (a < e) {
        uint64_t c = a + TASK_BYTES;
        if (c >= e) c = e;
        else if (g.q < 0) c -= (c - sp->pstart) % DCK_SEGMENT; /* global == stored - start */
        DCK_TRY(push_task(b, sp, a, c, w0));
        a = c;
    }
    return DCK_OK;
}

static int cmp_task(const void *x, const void *y) {
    const task *a = x, *b = y;
    if (a->a != b->a) return a->a < b->a ? -1 : 1;
    return a->order < b->order ? -1 : a->order > b->order;
}

/* Adds the window [w0, w0 + wl) of file u's spans [*first, nsp) to the
 * batch: its tasks and blocks. */
static dck_status plan_window(batch *b, size_t ui, stitches *stv, const span *sp, size_t nsp,
                              size_t *first, const uint8_t *wd, uint64_t w0, size_t wl) {
    uint64_t w1 = w0 + wl;
    size_t t_begin = b->nt;
    while (*first < nsp && sp[*first].end <= w0) (*first)++;
    for (size_t i = *first; i < nsp && sp[i].start < w1; i++) {
        if (sp[i].end <= w0) continue;
        uint64_t a = sp[i].start > w0 ? sp[i].start : w0;
        uint64_t e = sp[i].end < w1 ? sp[i].end : w1;
        DCK_TRY(sp[i].direct ? plan_direct(b, stv, sp, i, wd, w0, wl, a, e)
                             : plan_hasher(b, &sp[i], w0, a, e));
    }
    /* blocks in offset order, each with the tasks that start in it
     * (overlapping pieces can put tasks out of order) */
    dck_qsort(b->tasks + t_begin, b->nt - t_begin, sizeof *b->tasks, cmp_task);
    unit *u = &b->units[ui];
    u->b0 = u->cursor = b->nb;
    size_t k = t_begin;
    for (uint64_t x = w0; x < w1; x += BLOCK_BYTES) {
        uint64_t xe = w1 - x > BLOCK_BYTES ? x + BLOCK_BYTES : w1;
        size_t k0 = k;
        while (k < b->nt && b->tasks[k].a < xe) k++;
        /* nothing to do here (a file read whole always gets its block, which
         * finds it cut short) */
        if (k == k0 && !u->xh && u->wd) continue;
        DCK_TRY(dck_grow((void **)&b->blocks, &b->cap_b, b->nb + 1, sizeof *b->blocks));
        block *bk = &b->blocks[b->nb++];
        bk->unit = ui;
        bk->xoff = (size_t)(x - w0);
        bk->xlen = (size_t)(xe - x);
        bk->t0 = k0;
        bk->t1 = k;
        bk->ready = bk->failed = 0;
    }
    u->b1 = b->nb;
    return DCK_OK;
}

/* ------------------------------------------------------------------ files */

typedef struct {
    dck_checkpoint *ck;
    int threads;
    uint64_t *lanes;
    dck_tensor_hasher **h;
    const unsigned char *want_file; /* whole-file hash of file i wanted */
    dck_digest *fh;
    uint64_t done, total;           /* progress */
} engine;

/* One file being streamed. */
typedef struct {
    uint32_t fi;
    dck_stream *st;
    dck_xxh3 *xh;
    span *sp; /* its spans, sorted by start */
    size_t nsp, first;
    uint64_t streamed; /* bytes seen so far */
    uint64_t needed;   /* without its hash: the bytes up to the last span's end */
    int want;          /* its whole-file hash is wanted */
    size_t unit;       /* its unit in the batch (small files) */
    uint64_t whole;    /* > 0: no stream; its block reads these bytes from 0 */
    stitches stv;
} open_file;

static dck_status file_open(engine *e, uint32_t fi, span *sp, size_t nsp, open_file *of) {
    memset(of, 0, sizeof *of);
    dck_file *f = e->ck->files[fi];
    int want = e->want_file && e->want_file[fi];
    of->fi = fi;
    of->sp = sp;
    of->nsp = nsp;
    of->want = want;
    for (size_t i = 0; i < nsp; i++)
        if (sp[i].end > of->needed) of->needed = sp[i].end;
    /* A raw file of one block whose spans lie inside it: its block reads it
     * (every byte with its hash; else up to its last span's end). */
    uint64_t whole = want ? f->size : of->needed;
    if (!f->zstd && f->size <= BLOCK_BYTES && of->needed <= f->size && whole) {
        of->whole = whole;
        if (want && !(of->xh = dck_xxh3_create())) return dck_oom(NULL);
        return DCK_OK;
    }
    /* zstd: the stream hashes the stored (compressed) bytes itself */
    DCK_TRY(dck_stream_open(f, WINDOW_BYTES, want && f->zstd, &of->st));
    if (want && !f->zstd && !(of->xh = dck_xxh3_create())) {
        dck_stream_close(of->st);
        of->st = NULL;
        return dck_oom(NULL);
    }
    return DCK_OK;
}

static void file_close(open_file *of) {
    dck_stream_close(of->st);
    dck_xxh3_free(of->xh);
    free(of->stv.v);
    of->st = NULL;
    of->xh = NULL;
    of->stv.v = NULL;
}

/* After the last window: every span was inside the file; its hash. */
static dck_status file_finish(engine *e, open_file *of) {
    dck_file *f = e->ck->files[of->fi];
    for (size_t i = 0; i < of->nsp; i++)
        if (of->sp[i].end > of->streamed)
            return dck_set_error(DCK_ERR_TRUNCATED,
                                 "%s: truncated: tensor %s needs bytes up to %llu, file has %llu",
                                 f->path, of->sp[i].t->info.name, (unsigned long long)of->sp[i].end,
                                 (unsigned long long)of->streamed);
    /* mapped windows: a page lost in the last one, or a cut inside a page
     * (read as zeros, no fault) */
    if (of->st && !f->zstd && (dck_file_changed(f) || dck_file_size_now(f) < f->size))
        return dck_file_changed_error(f);
    if (of->stv.n) return dck_set_error(DCK_ERR_LAYOUT, "%s: a segment was left unstitched", f->path);
    if (e->want_file && e->want_file[of->fi])
        e->fh[of->fi] = of->xh ? dck_xxh3_digest(of->xh) : dck_stream_file_hash(of->st);
    return DCK_OK;
}

/* The next window of a file into the batch; *len = 0 at its end. */
static dck_status file_window(batch *b, open_file *of, size_t *len) {
    const uint8_t *wd = NULL;
    uint64_t w0 = 0;
    if (of->whole) {
        *len = (size_t)of->whole;
        of->whole = 0; /* one window */
    } else {
        DCK_TRY(dck_stream_next(of->st, &wd, &w0, len));
    }
    if (!*len) return DCK_OK;
    of->streamed = w0 + *len;
    of->unit = b->nu;
    DCK_TRY(dck_grow((void **)&b->units, &b->cap_u, b->nu + 1, sizeof *b->units));
    unit *u = &b->units[b->nu];
    memset(u, 0, sizeof *u);
    u->f = b->ck->files[of->fi];
    u->fi = of->fi;
    u->wd = wd;
    u->rlen = *len;
    u->sp = of->sp;
    u->nsp = of->nsp;
    u->xh = of->xh;
    b->nu++;
    return plan_window(b, b->nu - 1, &of->stv, of->sp, of->nsp, &of->first, wd, w0, *len);
}

static void batch_reset(batch *b) {
    b->nt = b->nb = b->nu = 0;
}

/* Runs the batch's blocks on the pool; *bad: the unit of the block whose
 * failure is reported (the first unit whose file changed while mapped, else
 * the lowest failing block). */
static dck_status batch_run(engine *e, batch *b, size_t *bad) {
    *bad = SIZE_MAX;
    if (!b->nb) return DCK_OK;
    dck_status s = dck_parallel_for_status(e->threads, b->nb, block_task, b);
    for (size_t i = 0; i < b->nu; i++)
        if (b->units[i].wd && dck_file_changed(b->units[i].f)) {
            *bad = i;
            return dck_file_changed_error(b->units[i].f);
        }
    if (s) {
        for (size_t k = 0; k < b->nb && *bad == SIZE_MAX; k++)
            if (b->blocks[k].failed) *bad = b->blocks[k].unit;
        return s;
    }
    for (size_t i = 0; i < b->nu; i++)
        if (b->units[i].xh && b->units[i].cursor != b->units[i].b1)
            return dck_set_error(DCK_ERR_IO, "%s: whole-file hash incomplete",
                                 b->units[i].f->path);
    return DCK_OK;
}

static void progress(engine *e, uint64_t bytes) {
    e->done += bytes;
    if (e->ck->opt.progress) e->ck->opt.progress(e->ck->opt.progress_ctx, e->done, e->total);
}

/* A large or compressed file: window after window, each its own pool loop. */
static dck_status hash_large(engine *e, batch *b, uint32_t fi, span *sp, size_t nsp) {
    open_file of;
    DCK_TRY(file_open(e, fi, sp, nsp, &of));
    dck_status s = DCK_OK;
    for (;;) {
        size_t len = 0, bad;
        batch_reset(b);
        /* a rank's share may end early in a file it does not hash */
        if (!of.want && of.streamed >= of.needed && of.streamed) break;
        if ((s = file_window(b, &of, &len)) || !len) break;
        if ((s = batch_run(e, b, &bad))) break;
        progress(e, len);
    }
    if (!s) s = file_finish(e, &of);
    file_close(&of);
    return s;
}

/* Small raw files: one window each, all in one pool loop. Failures are
 * reported in file order, as hashing one file after another would. */
static dck_status hash_small(engine *e, batch *b, open_file *ofs, size_t n) {
    uint64_t bytes = 0;
    batch_reset(b);
    for (size_t i = 0; i < n; i++) {
        size_t len = 0;
        ofs[i].unit = SIZE_MAX;
        DCK_TRY(file_window(b, &ofs[i], &len));
        bytes += len;
    }
    size_t bad;
    dck_status failed = batch_run(e, b, &bad);
    char msg[DCK_ERROR_MESSAGE_MAX];
    snprintf(msg, sizeof msg, "%s", failed ? dck_last_error() : "");
    for (size_t i = 0; i < n; i++) {
        if (failed && (bad == SIZE_MAX || ofs[i].unit == bad))
            return dck_set_error(failed, "%s", msg);
        const uint8_t *d;
        uint64_t off;
        size_t len = 0;
        if (ofs[i].st) DCK_TRY(dck_stream_next(ofs[i].st, &d, &off, &len)); /* its end; unmaps the window */
        if (len)
            return dck_set_error(DCK_ERR_IO, "%s: more than one window",
                                 e->ck->files[ofs[i].fi]->path);
        DCK_TRY(file_finish(e, &ofs[i]));
    }
    if (failed) return dck_set_error(failed, "%s", msg);
    progress(e, bytes);
    return DCK_OK;
}

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->file != y->file) return x->file < y->file ? -1 : 1;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    return x->ti < y->ti ? -1 : x->ti > y->ti;
}

/* Streams every file that has spans or whose hash is wanted. */
static dck_status engine_run(engine *e, span *sp, size_t nsp) {
    dck_checkpoint *ck = e->ck;
    dck_qsort(sp, nsp, sizeof *sp, cmp_span);
    batch b;
    memset(&b, 0, sizeof b);
    b.ck = ck;
    b.lanes = e->lanes;
    b.h = e->h;
    pthread_mutex_init(&b.mu, NULL);
    /* as many workers as dck_parallel_for gives a loop */
    b.nwbuf = e->threads < 1 ? 1 : e->threads > 256 ? 256 : e->threads;
    b.wbuf = calloc((size_t)b.nwbuf, sizeof *b.wbuf);
    open_file *ofs = calloc(BATCH_FILES, sizeof *ofs);
    size_t nofs = 0;
    uint64_t batch_bytes = 0;
    dck_status s = ofs && b.wbuf ? DCK_OK : dck_oom(NULL);
    size_t k = 0;
    for (uint32_t fi = 0; fi < ck->nfiles && !s; fi++) {
        size_t k0 = k;
        while (k < nsp && sp[k].file == fi) k++;
        dck_file *f = ck->files[fi];
        if (k == k0 && !(e->want_file && e->want_file[fi])) continue;
        if (f->zstd || f->size > WINDOW_BYTES) {
            /* files stay in order: the batch before this one first */
            if (nofs) {
                s = hash_small(e, &b, ofs, nofs);
                for (size_t i = 0; i < nofs; i++) file_close(&ofs[i]);
                nofs = 0;
                batch_bytes = 0;
                if (s) break;
            }
            s = hash_large(e, &b, fi, sp + k0, k - k0);
            continue;
        }
        if ((s = file_open(e, fi, sp + k0, k - k0, &ofs[nofs]))) break;
        nofs++;
        batch_bytes += f->size;
        if (nofs == BATCH_FILES || batch_bytes >= BATCH_BYTES) {
            s = hash_small(e, &b, ofs, nofs);
            for (size_t i = 0; i < nofs; i++) file_close(&ofs[i]);
            nofs = 0;
            batch_bytes = 0;
        }
    }
    if (!s && nofs) s = hash_small(e, &b, ofs, nofs);
    for (size_t i = 0; i < nofs; i++) file_close(&ofs[i]);
    free(ofs);
    for (int i = 0; b.wbuf && i < b.nwbuf; i++) free(b.wbuf[i]);
    free(b.wbuf);
    pthread_mutex_destroy(&b.mu);
    free(b.tasks);
    free(b.blocks);
    free(b.units);
    return s;
}

/* ------------------------------------------------------------------ spans */

/* A tensor stored whole, contiguous and in order in one piece: its stored
 * bytes are its bytes (global offset = stored - file_offset). */
static int is_direct(const dck_tensor_entry *t, uint64_t *pend) {
    if (t->npieces != 1) return 0;
    const dck_piece *p = &t->pieces[0];
    if (p->strides || p->byteswap) return 0;
    dck_piece_geom g;
    dck_piece_geom_of(t, p, &g);
    uint64_t want;
    if (g.q >= 0 || dck_shape_bytes(t->info.dtype, t->info.shape, t->info.ndim, &want)) return 0;
    if (dck_piece_extent(t, p, pend)) return 0;
    return *pend - p->file_offset == want && want == t->info.nbytes;
}

static dck_status push_span(span **v, size_t *n, size_t *cap, span sp) {
    DCK_TRY(dck_grow((void **)v, cap, *n + 1, sizeof **v));
    (*v)[(*n)++] = sp;
    return DCK_OK;
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
    if (!s) s = dck_files_check(&f, 1); /* zeros read where it lost pages */
    free(buf);
    return s;
}

/* ------------------------------------------------------------------ entry points */

dck_status dck_checkpoint_hash(dck_checkpoint *ck, const dck_options *optin, dck_manifest **out) {
    *out = NULL;
    if (optin) ck->opt = *optin;
    size_t nt = ck->ntensors, nf = ck->nfiles;
    engine e;
    memset(&e, 0, sizeof e);
    e.ck = ck;
    e.threads = ck->opt.threads > 0 ? ck->opt.threads : dck_default_threads();
    e.lanes = calloc(2 * nt + 1, sizeof *e.lanes);
    e.h = calloc(nt ? nt : 1, sizeof *e.h);
    e.fh = calloc(nf ? nf : 1, sizeof *e.fh);
    unsigned char *want = malloc(nf ? nf : 1);
    unsigned char *direct = calloc(nt ? nt : 1, 1);
    dck_digest *td = calloc(nt ? nt : 1, sizeof *td);
    span *sp = NULL;
    size_t nsp = 0, cap = 0;
    dck_manifest *m = NULL;
    dck_status s = DCK_OK;
    if (!e.lanes || !e.h || !e.fh || !want || !direct || !td ||
        (s = dck_grow((void **)&sp, &cap, nt, sizeof *sp))) {
        s = s ? s : dck_oom(NULL);
        goto done;
    }
    /* arrays filled whole: faulted in at once, not page by page */
    dck_prefault(e.lanes, (2 * nt + 1) * sizeof *e.lanes);
    dck_prefault(e.h, nt * sizeof *e.h);
    dck_prefault(td, nt * sizeof *td);
    dck_prefault(sp, nt * sizeof *sp);
    memset(want, ck->opt.hash_files != 0, nf ? nf : 1);
    e.want_file = want;
    for (size_t fi = 0; fi < nf; fi++)
        e.total += ck->files[fi]->data_size != UINT64_MAX ? ck->files[fi]->data_size : ck->files[fi]->size;
    for (size_t ti = 0; ti < nt && !s; ti++) {
        dck_tensor_entry *t = &ck->tensors[ti];
        uint64_t pend;
        if (is_direct(t, &pend)) {
            direct[ti] = 1;
            const dck_piece *p = &t->pieces[0]; /* empty ones too: the bounds check */
            s = push_span(&sp, &nsp, &cap,
                          (span){t, ti, 0, p->file, p->file_offset, pend, p->file_offset, 1});
            continue;
        }
        if ((s = dck_tensor_hasher_create(t->info.dtype, t->info.shape, t->info.ndim, &e.h[ti])))
            break;
        for (size_t pi = 0; pi < t->npieces && !s; pi++) {
            dck_piece *p = &t->pieces[pi];
            if (p->strides || p->byteswap) continue;
            uint64_t end;
            dck_piece_extent(t, p, &end);
            s = push_span(&sp, &nsp, &cap,
                          (span){t, ti, pi, p->file, p->file_offset, end, p->file_offset, 0});
        }
    }
    if (!s) s = engine_run(&e, sp, nsp);
    for (size_t ti = 0; ti < nt && !s; ti++) {
        dck_tensor_entry *t = &ck->tensors[ti];
        for (size_t pi = 0; pi < t->npieces && !s; pi++)
            if (t->pieces[pi].strides || t->pieces[pi].byteswap)
                s = hash_strided(ck, t, e.h[ti], &t->pieces[pi]);
    }
    for (size_t ti = 0; ti < nt && !s; ti++) {
        dck_tensor_entry *t = &ck->tensors[ti];
        if (direct[ti])
            td[ti] = dck_digest_finish(t->info.dtype, t->info.shape, t->info.ndim,
                                       (dck_lanes){e.lanes[2 * ti], e.lanes[2 * ti + 1]});
        else if ((s = dck_tensor_hasher_final(e.h[ti], &td[ti])))
            s = dck_set_error(s, "tensor %s (%s): %s", t->info.name, t->info.source,
                              dck_last_error());
    }
    if (!s) s = dck_ck_build_manifest(ck, td, e.fh, &m);
done:
    if (e.h)
        for (size_t i = 0; i < nt; i++) dck_tensor_hasher_free(e.h[i]);
    free(e.h);
    free(e.lanes);
    free(e.fh);
    free(want);
    free(direct);
    free(td);
    free(sp);
    if (s) {
        dck_manifest_free(m);
        return s;
    }
    *out = m;
    return DCK_OK;
}

dck_status dck_cpu_hash_ranges(dck_checkpoint *ck, const dck_lane_range *r, size_t nr,
                               const unsigned char *want_file, int threads, uint64_t *lanes,
                               dck_digest *file_hashes) {
    engine e;
    memset(&e, 0, sizeof e);
    e.ck = ck;
    e.threads = threads > 0 ? threads : dck_default_threads();
    e.lanes = lanes;
    e.want_file = want_file;
    e.fh = file_hashes;
    span *sp = NULL;
    dck_lane_range *other = NULL;
    size_t nsp = 0, cap = 0, nother = 0, cap_other = 0;
    dck_status s = DCK_OK;
    for (size_t i = 0; i < nr && !s; i++) {
        dck_tensor_entry *t = &ck->tensors[r[i].tensor];
        uint64_t pend;
        if (r[i].end <= r[i].begin) continue;
        if (is_direct(t, &pend) && r[i].begin % DCK_SEGMENT == 0 && r[i].end <= t->info.nbytes) {
            const dck_piece *p = &t->pieces[0];
            s = push_span(&sp, &nsp, &cap,
                          (span){t, r[i].tensor, 0, p->file, p->file_offset + r[i].begin,
                                 p->file_offset + r[i].end, p->file_offset, 1});
        } else if (!(s = dck_grow((void **)&other, &cap_other, nother + 1, sizeof *other))) {
            other[nother++] = r[i];
        }
    }
    /* Progress: the bytes the engine streams, as engine_run counts them (a
     * file hashed whole: all of it; else up to its last span's end). */
    void (*prog)(void *, uint64_t, uint64_t) = ck->opt.progress;
    uint64_t *upto = prog && !s ? calloc(ck->nfiles ? ck->nfiles : 1, sizeof *upto) : NULL;
    if (upto) {
        for (size_t i = 0; i < nsp; i++)
            if (sp[i].end > upto[sp[i].file]) upto[sp[i].file] = sp[i].end;
        for (uint32_t fi = 0; fi < ck->nfiles; fi++) {
            const dck_file *f = ck->files[fi];
            if (want_file && want_file[fi])
                upto[fi] = f->data_size != UINT64_MAX ? f->data_size : f->size;
            e.total += upto[fi];
        }
        free(upto);
    }
    if (!s) s = engine_run(&e, sp, nsp);
    /* pieces the stream cannot take in order: logical reads (not counted:
     * their own count would start again from 0) */
    ck->opt.progress = NULL;
    if (!s && nother) s = dck_cpu_lanes_run(ck, other, nother, e.threads, lanes);
    ck->opt.progress = prog;
    if (!s && prog && e.total) prog(ck->opt.progress_ctx, e.total, e.total);
    free(sp);
    free(other);
    return s;
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

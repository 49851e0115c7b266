/* detcheck diff: layer-by-layer comparison of two checkpoints (or digests of
 * manifests), with exact counts and ULP distances (man detcheck-diff(1)).
 *
 * Determinism: tensors are cut into chunks of DIFF_CHUNK bytes, a constant,
 * never derived from the thread count. Each chunk's statistics are computed
 * by one thread in element order into its own slot; the slots are folded in
 * chunk order. So the floating-point sums (L2 norms) and every other number
 * are the same bits for every thread count. Digests are integer lane sums
 * and do not depend on order at all.
 *
 * Passes: two checkpoints are first compared chunk by chunk with memcmp (a
 * tensor is settled "equal" with no element work, and "differs" at its
 * first differing chunk); the tensors that differ are then read again for
 * their statistics and digests, since norms and NaN/Inf counts cover every
 * element. With a manifest on either side only digests are computed.
 *
 * Memory: each worker holds two chunk buffers; the per-chunk slots cover one
 * window of chunks at a time; pages of mapped files (zstd temporaries,
 * strided pieces) are dropped after each window. Nothing grows with tensor
 * or checkpoint size. */
#include "formats/formats.h"
#include "common/element.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#define DIFF_CHUNK ((size_t)1 << 20) /* bytes; a multiple of DCK_SEGMENT and of every element size */
#define WINDOW_ITEMS 1024u  /* chunks per window (per-chunk results held at once) */
#define WINDOW_MAPPED 32u   /* with mapped files: their pages are let go after each */
#define DIFF_MAX_THREADS 32 /* 32 workers x 2 MiB buffers: 64 MiB, the memory bound */

/* ------------------------------------------------------------------ names */

static const char *const status_names[DCK_DIFF_STATUS_COUNT] = {
    "equal",        "within_tolerance", "differ",        "missing_in_a",
    "missing_in_b", "dtype_mismatch",   "shape_mismatch"};

const char *dck_diff_status_name(dck_diff_status s) {
    return (unsigned)s < DCK_DIFF_STATUS_COUNT ? status_names[s] : "?";
}

void dck_diff_tolerance_init(dck_diff_tolerance *t) {
    t->atol = -1;
    t->rtol = -1;
    t->ulp = -1;
}

int dck_diff_tolerance_given(const dck_diff_tolerance *t) {
    return t && (t->atol >= 0 || t->rtol >= 0 || t->ulp >= 0);
}

void dck_diff_options_init(dck_diff_options *o) {
    memset(o, 0, sizeof *o);
    dck_diff_tolerance_init(&o->tol);
}

static int is_digits(const char *s, size_t n) {
    if (!n) return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return 0;
    return 1;
}

static int comp_is(const char *s, size_t n, const char *word) {
    return s && strlen(word) == n && !memcmp(s, word, n);
}

char *dck_layer_of_name(const char *name) {
    /* Components are separated by '.', '/' or ':' (as dck_group_of_name).
     * The number after "state" or "param_groups" in a PyTorch optimizer
     * state dict is a parameter index, not a layer. */
    const char *prev = NULL, *s = name;
    size_t prev_n = 0;
    while (*s) {
        size_t n = strcspn(s, "./:");
        if (is_digits(s, n) && !comp_is(prev, prev_n, "state") &&
            !comp_is(prev, prev_n, "param_groups")) {
            const char *start = prev ? prev : s;
            return dck_strndup(start, (size_t)(s + n - start));
        }
        if (n) {
            prev = s;
            prev_n = n;
        }
        s += n;
        if (*s) s++;
    }
    return NULL;
}

void dck_diff_stats_init(dck_diff_stats *s) {
    memset(s, 0, sizeof *s);
    s->first_flat = UINT64_MAX;
}

/* The element loop, specialised per dtype by constant propagation. */
static inline __attribute__((always_inline)) void
elements_loop(dck_dtype t, const uint8_t *pa, const uint8_t *pb, size_t n, uint64_t first_flat,
              const dck_diff_tolerance *tol, dck_diff_stats *acc) {
    const size_t sz = dck_dtype_size(t);
    const int isf = dck_dtype_is_float(t);
    const int has_abs = tol && (tol->atol >= 0 || tol->rtol >= 0);
    const int has_ulp = tol && tol->ulp >= 0;
    const double atol = (tol && tol->atol > 0) ? tol->atol : 0;
    const double rtol = (tol && tol->rtol > 0) ? tol->rtol : 0;
    const uint64_t ulp_tol = has_ulp ? (uint64_t)tol->ulp : 0;
    dck_diff_stats s = *acc;
    for (size_t i = 0; i < n; i++) {
        uint64_t ua = load_bits(pa + i * sz, sz), ub = load_bits(pb + i * sz, sz);
        int ca = 0, cb = 0;
        if (isf) {
            ca = classify(t, ua);
            cb = classify(t, ub);
            s.nan_a += ca == 2;
            s.inf_a += ca == 1;
            s.nan_b += cb == 2;
            s.inf_b += cb == 1;
        }
        double va = bits_to_double(t, ua), vb = bits_to_double(t, ub);
        if (ca == 0 && cb == 0) {
            double d = va - vb;
            s.sum_sq_diff += d * d;
            s.sum_sq_a += va * va;
            s.sum_sq_b += vb * vb;
        }
        if (ua == ub) continue;
        s.diff_count++;
        if (s.first_flat == UINT64_MAX) s.first_flat = first_flat + i;
        if (ca == 2 || cb == 2) {
            /* No numeric distance; never within tolerance. */
            if (ca == 2 && cb == 2) s.nan_payload++;
            else s.nan_vs_number++;
            s.beyond_count++;
            continue;
        }
        uint64_t ulp;
        double abs_d, mag;
        if (isf) {
            ulp = float_ulp(t, ua, ub);
            abs_d = fabs(va - vb);
            mag = fmax(fabs(va), fabs(vb));
        } else {
            ulp = int_dist(t, ua, ub);
            abs_d = (double)ulp;
            mag = fmax(fabs(va), fabs(vb));
        }
        double rel;
        if (isinf(abs_d)) rel = INFINITY;
        else rel = mag > 0 ? abs_d / mag : 0;
        if (ulp > s.max_ulp) s.max_ulp = ulp;
        if (abs_d > s.max_abs) s.max_abs = abs_d;
        if (rel > s.max_rel) s.max_rel = rel;
        int within = 0;
        if (ca == 0 && cb == 0) {
            if (has_abs && abs_d <= atol + rtol * mag) within = 1;
            if (has_ulp && ulp <= ulp_tol) within = 1;
        }
        if (!within) s.beyond_count++;
    }
    s.count += n;
    *acc = s;
}

/* A run of elements whose bytes are known to be equal on both sides: only
 * the NaN/Inf counts and the norms move. Most of a differing tensor takes
 * this path, so the sum of squares runs on four accumulators (element i
 * into lane i % 4, lanes added in a fixed order at the end): independent
 * chains, and still the same bits for the same chunk every time. */
static inline __attribute__((always_inline)) void
equal_loop(dck_dtype t, const uint8_t *p, size_t n, dck_diff_stats *acc) {
    const size_t sz = dck_dtype_size(t);
    const int isf = dck_dtype_is_float(t);
    uint64_t nan = 0, inf = 0;
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
#define EQ_ONE(k, lane)                                                                          \
    do {                                                                                         \
        uint64_t u = load_bits(p + (k) * sz, sz);                                                \
        int c = isf ? classify(t, u) : 0;                                                        \
        nan += c == 2;                                                                           \
        inf += c == 1;                                                                           \
        double v = bits_to_double(t, u);                                                         \
        v = c ? 0.0 : v;                                                                         \
        lane += v * v;                                                                           \
    } while (0)
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        EQ_ONE(i, s0);
        EQ_ONE(i + 1, s1);
        EQ_ONE(i + 2, s2);
        EQ_ONE(i + 3, s3);
    }
    if (i < n) EQ_ONE(i, s0);
    if (i + 1 < n) EQ_ONE(i + 1, s1);
    if (i + 2 < n) EQ_ONE(i + 2, s2);
#undef EQ_ONE
    double sq = (s0 + s1) + (s2 + s3);
    acc->nan_a += nan;
    acc->nan_b += nan;
    acc->inf_a += inf;
    acc->inf_b += inf;
    acc->sum_sq_a += sq;
    acc->sum_sq_b += sq;
    acc->count += n;
}

#define DTYPE_CASES(X)                                                                           \
    X(DCK_BOOL) X(DCK_U8) X(DCK_I8) X(DCK_I16) X(DCK_U16) X(DCK_F16) X(DCK_BF16) X(DCK_I32)      \
        X(DCK_U32) X(DCK_F32) X(DCK_F64) X(DCK_I64) X(DCK_U64) X(DCK_F8_E4M3) X(DCK_F8_E5M2)

void dck_diff_elements(dck_dtype t, const void *a, const void *b, size_t n, uint64_t first_flat,
                       const dck_diff_tolerance *tol, dck_diff_stats *acc) {
    switch (t) {
#define X(T)                                                                                     \
    case T: elements_loop(T, a, b, n, first_flat, tol, acc); break;
        DTYPE_CASES(X)
#undef X
    default: break;
    }
}

static void diff_equal_elements(dck_dtype t, const void *p, size_t n, dck_diff_stats *acc) {
    switch (t) {
#define X(T)                                                                                     \
    case T: equal_loop(T, p, n, acc); break;
        DTYPE_CASES(X)
#undef X
    default: break;
    }
}

void dck_diff_stats_merge(dck_diff_stats *acc, const dck_diff_stats *p) {
    acc->count += p->count;
    acc->diff_count += p->diff_count;
    acc->beyond_count += p->beyond_count;
    if (acc->first_flat == UINT64_MAX) acc->first_flat = p->first_flat;
    if (p->max_abs > acc->max_abs) acc->max_abs = p->max_abs;
    if (p->max_rel > acc->max_rel) acc->max_rel = p->max_rel;
    if (p->max_ulp > acc->max_ulp) acc->max_ulp = p->max_ulp;
    acc->nan_a += p->nan_a;
    acc->nan_b += p->nan_b;
    acc->inf_a += p->inf_a;
    acc->inf_b += p->inf_b;
    acc->nan_vs_number += p->nan_vs_number;
    acc->nan_payload += p->nan_payload;
    acc->sum_sq_diff += p->sum_sq_diff;
    acc->sum_sq_a += p->sum_sq_a;
    acc->sum_sq_b += p->sum_sq_b;
}

double dck_diff_rel_l2(const dck_diff_stats *s) {
    double den = sqrt(fmax(s->sum_sq_a, s->sum_sq_b));
    double num = sqrt(s->sum_sq_diff);
    if (num == 0) return 0;
    if (den == 0) return INFINITY;
    return num / den;
}

/* ------------------------------------------------------------------ sides */

typedef struct {
    const char *name; /* borrowed from the checkpoint or manifest */
    dck_group group;
    dck_dtype dtype;
    int ndim;
    const uint64_t *shape;
    uint64_t nbytes;
    int has_digest;
    dck_digest digest;
    size_t index; /* in the checkpoint */
} side_tensor;

typedef struct {
    const char *label;    /* path, for messages */
    dck_checkpoint *ck;   /* exactly one of ck, m */
    const dck_manifest *m;
    side_tensor *t;
    size_t n;
} side;

static int cmp_side_tensor(const void *x, const void *y) {
    return dck_name_compare(((const side_tensor *)x)->name, ((const side_tensor *)y)->name);
}

static int group_selected(unsigned mask, dck_group g) { return !mask || (mask & (1u << g)); }

static dck_status side_build(side *sd, unsigned groups) {
    size_t n = sd->ck ? dck_checkpoint_tensor_count(sd->ck) : dck_manifest_tensor_count(sd->m);
    sd->t = dck_xcalloc(n ? n : 1, sizeof *sd->t);
    if (!sd->t) return dck_oom(NULL);
    sd->n = 0;
    for (size_t i = 0; i < n; i++) {
        side_tensor *st = &sd->t[sd->n];
        if (sd->ck) {
            const dck_tensor_info *ti = dck_checkpoint_tensor(sd->ck, i);
            st->name = ti->name;
            st->group = ti->group;
            st->dtype = ti->dtype;
            st->ndim = ti->ndim;
            st->shape = ti->shape;
            st->nbytes = ti->nbytes;
            st->index = i;
        } else {
            const dck_manifest_tensor *mt = dck_manifest_tensor_at(sd->m, i);
            st->name = mt->name;
            st->group = mt->group;
            st->dtype = mt->dtype;
            st->ndim = mt->ndim;
            st->shape = mt->shape;
            if (dck_shape_bytes(mt->dtype, mt->shape, mt->ndim, &st->nbytes) != DCK_OK)
                st->nbytes = 0;
            st->has_digest = 1;
            st->digest = mt->digest;
        }
        if (group_selected(groups, st->group)) sd->n++;
    }
    qsort(sd->t, sd->n, sizeof *sd->t, cmp_side_tensor);
    return DCK_OK;
}

/* dck_checkpoint_read maps a file lazily (zstd: decompresses it to a
 * temporary) for compressed files and strided or byte-swapped pieces; that
 * first map is not meant to race, so it is done here, before the chunk
 * workers start: one thread per file (files are independent). Raw row-major
 * pieces are read with pread and never mapped. */
static dck_status premap_task(void *ctx, size_t i, int worker) {
    (void)worker;
    dck_file **files = ctx;
    const uint8_t *d;
    uint64_t n;
    return dck_file_map(files[i], &d, &n);
}

static dck_status premap(side *a, side *b, int threads) {
    size_t cap = (a->ck ? a->ck->nfiles : 0) + (b->ck ? b->ck->nfiles : 0), n = 0;
    if (!cap) return DCK_OK;
    dck_file **files = dck_xcalloc(cap, sizeof *files);
    if (!files) return dck_oom(NULL);
    for (int side_i = 0; side_i < 2; side_i++) {
        dck_checkpoint *ck = side_i ? b->ck : a->ck;
        if (!ck) continue;
        size_t first = n;
        for (size_t ti = 0; ti < ck->ntensors; ti++) {
            const dck_tensor_entry *t = &ck->tensors[ti];
            for (size_t pi = 0; pi < t->npieces; pi++) {
                const dck_piece *p = &t->pieces[pi];
                dck_file *f = ck->files[p->file];
                if (f->mapped || !(f->zstd || p->strides || p->byteswap)) continue;
                int seen = 0;
                for (size_t k = first; k < n && !seen; k++) seen = files[k] == f;
                if (!seen && n < cap) files[n++] = f;
            }
        }
    }
    dck_status s = dck_parallel_for_status(threads, n, premap_task, files);
    free(files);
    return s;
}

/* Mapped files (zstd temporaries, strided pieces) count in the resident set
 * as their pages are touched; between windows, when no worker runs, the
 * pages are dropped from this process (the page cache keeps them), so the
 * resident set stays bounded by a window, not by the checkpoint. */
static void side_release_maps(side *sd) {
    if (!sd->ck) return;
    for (size_t i = 0; i < sd->ck->nfiles; i++) {
        dck_file *f = sd->ck->files[i];
        if (f->mapped && f->map && f->map_len)
            (void)madvise((void *)f->map, (size_t)f->map_len, MADV_DONTNEED);
    }
}

/* ------------------------------------------------------------------ chunk engine */

enum { JOB_EQUAL, JOB_STATS, JOB_DIGEST_A, JOB_DIGEST_B };

typedef struct {
    uint32_t kind;
    size_t tensor; /* index into the result */
    uint64_t offset, len;
} work_item;

typedef struct {
    dck_lanes la, lb;
    dck_diff_stats st;
} work_out;

typedef struct {
    side *a, *b;
    dck_diff_result *r;
    const side_tensor **ta, **tb; /* per result tensor, NULL when absent */
    const dck_diff_tolerance *tol;
    uint8_t **buf_a, **buf_b;     /* per worker */
    atomic_uchar *differs;        /* per result tensor (JOB_EQUAL) */
    work_item *items;
    work_out *out;
    size_t window;                /* chunks per window */
} engine;

static dck_status read_side(side *sd, const side_tensor *st, uint64_t off, void *buf, size_t len) {
    dck_status s = dck_checkpoint_read(sd->ck, st->index, off, buf, len);
    if (s != DCK_OK) {
        const char *m = dck_last_error();
        if (!m || !*m) dck_set_error(s, "%s: tensor %s: %s", sd->label, st->name, dck_strerror(s));
    }
    return s;
}

/* A failing chunk stops the diff; dck_parallel_for_status reports the
 * lowest failing chunk, so the message does not depend on the threads. */
static dck_status work_task(void *ctx, size_t i, int worker) {
    engine *e = ctx;
    const work_item *it = &e->items[i];
    work_out *o = &e->out[i];
    const side_tensor *ta = e->ta[it->tensor], *tb = e->tb[it->tensor];
    uint8_t *ba = e->buf_a[worker], *bb = e->buf_b[worker];
    size_t len = (size_t)it->len;
    switch (it->kind) {
    case JOB_EQUAL:
        /* Once one chunk differs the tensor goes to the statistics pass;
         * skipping its other chunks changes no result. */
        if (atomic_load_explicit(&e->differs[it->tensor], memory_order_relaxed)) return DCK_OK;
        DCK_TRY(read_side(e->a, ta, it->offset, ba, len));
        DCK_TRY(read_side(e->b, tb, it->offset, bb, len));
        if (memcmp(ba, bb, len) != 0)
            atomic_store_explicit(&e->differs[it->tensor], 1, memory_order_relaxed);
        return DCK_OK;
    case JOB_STATS: {
        DCK_TRY(read_side(e->a, ta, it->offset, ba, len));
        DCK_TRY(read_side(e->b, tb, it->offset, bb, len));
        uint64_t seg = it->offset / DCK_SEGMENT;
        o->la = dck_segments_sum(ba, len, seg);
        o->lb = dck_segments_sum(bb, len, seg);
        size_t esz = dck_dtype_size(ta->dtype);
        dck_diff_stats_init(&o->st);
        if (memcmp(ba, bb, len) == 0)
            diff_equal_elements(ta->dtype, ba, len / esz, &o->st);
        else
            dck_diff_elements(ta->dtype, ba, bb, len / esz, it->offset / esz, e->tol, &o->st);
        return DCK_OK;
    }
    case JOB_DIGEST_A:
        DCK_TRY(read_side(e->a, ta, it->offset, ba, len));
        o->la = dck_segments_sum(ba, len, it->offset / DCK_SEGMENT);
        return DCK_OK;
    default:
        DCK_TRY(read_side(e->b, tb, it->offset, bb, len));
        o->lb = dck_segments_sum(bb, len, it->offset / DCK_SEGMENT);
        return DCK_OK;
    }
}

typedef struct {
    uint32_t kind;
    size_t tensor;
    uint64_t nbytes;
} job;

typedef struct {
    int threads;
    void (*progress)(void *ctx, uint64_t done, uint64_t total);
    void *progress_ctx;
    uint64_t done, total;
} progress_state;

static uint64_t job_read_bytes(const job *j) {
    return (j->kind == JOB_EQUAL || j->kind == JOB_STATS) ? 2 * j->nbytes : j->nbytes;
}

/* Runs the chunks of jobs window by window; after each window folds the
 * per-chunk outputs in chunk order into lanes / stats. */
static dck_status engine_run(engine *e, const job *jobs, size_t njobs, dck_lanes *lanes_a,
                             dck_lanes *lanes_b, progress_state *ps) {
    size_t j = 0;
    uint64_t off = 0;
    while (j < njobs) {
        size_t n = 0;
        while (j < njobs && n < e->window) {
            const job *jb = &jobs[j];
            if (off >= jb->nbytes) {
                j++;
                off = 0;
                continue;
            }
            uint64_t len = jb->nbytes - off;
            if (len > DIFF_CHUNK) len = DIFF_CHUNK;
            e->items[n++] = (work_item){jb->kind, jb->tensor, off, len};
            off += len;
        }
        if (!n) break;
        DCK_TRY(dck_parallel_for_status(ps->threads, n, work_task, e));
        for (size_t i = 0; i < n; i++) {
            const work_item *it = &e->items[i];
            work_out *o = &e->out[i];
            dck_diff_tensor *dt = &e->r->tensors[it->tensor];
            switch (it->kind) {
            case JOB_STATS:
                dck_lanes_add(&lanes_a[it->tensor], o->la);
                dck_lanes_add(&lanes_b[it->tensor], o->lb);
                dck_diff_stats_merge(&dt->stats, &o->st);
                break;
            case JOB_DIGEST_A: dck_lanes_add(&lanes_a[it->tensor], o->la); break;
            case JOB_DIGEST_B: dck_lanes_add(&lanes_b[it->tensor], o->lb); break;
            default: break;
            }
            ps->done += (it->kind == JOB_EQUAL || it->kind == JOB_STATS) ? 2 * it->len : it->len;
        }
        side_release_maps(e->a);
        side_release_maps(e->b);
        if (ps->progress) ps->progress(ps->progress_ctx, ps->done, ps->total);
    }
    return DCK_OK;
}

/* ------------------------------------------------------------------ result */

void dck_diff_result_release(dck_diff_result *r) {
    if (!r) return;
    for (size_t i = 0; i < r->ntensors; i++) {
        free((char *)r->tensors[i].name);
        free((char *)r->tensors[i].layer);
    }
    free(r->tensors);
    free(r->layers); /* layer names point into tensors */
    for (size_t i = 0; i < r->nvalues; i++) {
        free((char *)r->values[i].name);
        free((char *)r->values[i].a);
        free((char *)r->values[i].b);
    }
    free(r->values);
    memset(r, 0, sizeof *r);
}

static void flat_to_index(uint64_t flat, const uint64_t *shape, int ndim, uint64_t *idx) {
    for (int d = ndim - 1; d >= 0; d--) {
        uint64_t n = shape[d] ? shape[d] : 1;
        idx[d] = flat % n;
        flat /= n;
    }
}

typedef struct {
    const char *layer;
    size_t tensor;
} layer_ref;

static int cmp_layer_ref(const void *x, const void *y) {
    const layer_ref *a = x, *b = y;
    int c = dck_name_compare(a->layer, b->layer);
    if (c) return c;
    return a->tensor < b->tensor ? -1 : a->tensor > b->tensor;
}

static dck_status summarise(dck_diff_result *r) {
    r->first_tensor = -1;
    r->first_layer = -1;
    size_t nl = 0;
    for (size_t i = 0; i < r->ntensors; i++) {
        dck_diff_tensor *t = &r->tensors[i];
        r->count[t->status]++;
        r->group_tensors[t->group]++;
        if (t->status != DCK_DIFF_EQUAL) {
            r->group_differing[t->group]++;
            if (r->first_tensor < 0) r->first_tensor = (long)i;
        }
        nl += t->layer != NULL;
    }
    layer_ref *refs = dck_xcalloc(nl ? nl : 1, sizeof *refs);
    r->layers = dck_xcalloc(nl ? nl : 1, sizeof *r->layers);
    if (!refs || !r->layers) {
        free(refs);
        return dck_oom(NULL);
    }
    size_t k = 0;
    for (size_t i = 0; i < r->ntensors; i++)
        if (r->tensors[i].layer) refs[k++] = (layer_ref){r->tensors[i].layer, i};
    qsort(refs, nl, sizeof *refs, cmp_layer_ref);
    r->nlayers = 0;
    for (size_t i = 0; i < nl; i++) {
        if (!r->nlayers || strcmp(r->layers[r->nlayers - 1].layer, refs[i].layer) != 0)
            r->layers[r->nlayers++] = (dck_diff_layer){refs[i].layer, 0, 0, 0, 0};
        dck_diff_layer *L = &r->layers[r->nlayers - 1];
        const dck_diff_tensor *t = &r->tensors[refs[i].tensor];
        L->tensors++;
        if (t->status != DCK_DIFF_EQUAL) {
            if (!L->differing || refs[i].tensor < L->first_differing)
                L->first_differing = refs[i].tensor;
            L->differing++;
            if (t->has_stats && t->stats.max_ulp > L->max_ulp) L->max_ulp = t->stats.max_ulp;
        }
    }
    free(refs);
    for (size_t i = 0; i < r->nlayers; i++)
        if (r->layers[i].differing) {
            r->first_layer = (long)i;
            break;
        }
    r->equal = r->nvalues == 0 && r->count[DCK_DIFF_EQUAL] == r->ntensors;
    r->ok = r->nvalues == 0 &&
            r->count[DCK_DIFF_EQUAL] + r->count[DCK_DIFF_WITHIN_TOLERANCE] == r->ntensors;
    return DCK_OK;
}

typedef struct {
    const char *name, *value;
} value_ref;

static int cmp_value_ref(const void *x, const void *y) {
    return strcmp(((const value_ref *)x)->name, ((const value_ref *)y)->name);
}

static dck_status side_values(const side *sd, value_ref **out, size_t *n) {
    size_t k = sd->ck ? dck_checkpoint_value_count(sd->ck) : dck_manifest_value_count(sd->m);
    value_ref *v = dck_xcalloc(k ? k : 1, sizeof *v);
    if (!v) return dck_oom(NULL);
    for (size_t i = 0; i < k; i++) {
        const dck_manifest_value *mv =
            sd->ck ? dck_checkpoint_value(sd->ck, i) : dck_manifest_value_at(sd->m, i);
        v[i] = (value_ref){mv->name, mv->value};
    }
    qsort(v, k, sizeof *v, cmp_value_ref);
    *out = v;
    *n = k;
    return DCK_OK;
}

static dck_status add_value_diff(dck_diff_result *r, size_t *cap, const char *name,
                                 const char *a, const char *b) {
    dck_status s = dck_grow((void **)&r->values, cap, r->nvalues + 1, sizeof *r->values);
    if (s) return s;
    dck_diff_value *v = &r->values[r->nvalues];
    v->name = dck_strdup(name);
    v->a = a ? dck_strdup(a) : NULL;
    v->b = b ? dck_strdup(b) : NULL;
    if (!v->name || (a && !v->a) || (b && !v->b)) {
        free((char *)v->name);
        free((char *)v->a);
        free((char *)v->b);
        return dck_oom(NULL);
    }
    r->nvalues++;
    return DCK_OK;
}

static dck_status compare_values(const side *a, const side *b, dck_diff_result *r) {
    value_ref *va = NULL, *vb = NULL;
    size_t na = 0, nb = 0, cap = 0;
    dck_status s = side_values(a, &va, &na);
    if (!s) s = side_values(b, &vb, &nb);
    size_t i = 0, j = 0;
    while (!s && (i < na || j < nb)) {
        int c = i >= na ? 1 : j >= nb ? -1 : strcmp(va[i].name, vb[j].name);
        if (c < 0) {
            s = add_value_diff(r, &cap, va[i].name, va[i].value, NULL);
            i++;
        } else if (c > 0) {
            s = add_value_diff(r, &cap, vb[j].name, NULL, vb[j].value);
            j++;
        } else {
            if (strcmp(va[i].value, vb[j].value) != 0)
                s = add_value_diff(r, &cap, va[i].name, va[i].value, vb[j].value);
            i++;
            j++;
        }
    }
    free(va);
    free(vb);
    return s;
}

static int same_shape(const side_tensor *x, const side_tensor *y) {
    if (x->ndim != y->ndim) return 0;
    for (int d = 0; d < x->ndim; d++)
        if (x->shape[d] != y->shape[d]) return 0;
    return 1;
}

static dck_status diff_sides(side *a, side *b, const dck_diff_options *opt,
                             dck_diff_result *out) {
    dck_diff_options defaults;
    if (!opt) {
        dck_diff_options_init(&defaults);
        opt = &defaults;
    }
    memset(out, 0, sizeof *out);
    dck_status s = side_build(a, opt->groups);
    if (!s) s = side_build(b, opt->groups);
    if (s) {
        free(a->t);
        free(b->t);
        a->t = b->t = NULL;
        return s;
    }

    /* Union of names in model order. */
    size_t cap = a->n + b->n;
    dck_diff_result *r = out;
    r->digest_only = !(a->ck && b->ck);
    r->tensors = dck_xcalloc(cap ? cap : 1, sizeof *r->tensors);
    const side_tensor **ta = dck_xcalloc(cap ? cap : 1, sizeof *ta);
    const side_tensor **tb = dck_xcalloc(cap ? cap : 1, sizeof *tb);
    dck_lanes *lanes_a = dck_xcalloc(cap ? cap : 1, sizeof *lanes_a);
    dck_lanes *lanes_b = dck_xcalloc(cap ? cap : 1, sizeof *lanes_b);
    atomic_uchar *differs = dck_xcalloc(cap ? cap : 1, sizeof *differs);
    job *jobs = dck_xcalloc(cap ? cap : 1, sizeof *jobs);
    engine e;
    memset(&e, 0, sizeof e);
    int threads = opt->threads > 0 ? opt->threads : dck_default_threads();
    if (threads > DIFF_MAX_THREADS) threads = DIFF_MAX_THREADS;
    if (!r->tensors || !ta || !tb || !lanes_a || !lanes_b || !differs || !jobs) {
        s = dck_oom(NULL);
        goto done;
    }
    size_t i = 0, j = 0, n = 0;
    while (i < a->n || j < b->n) {
        int c = i >= a->n ? 1 : j >= b->n ? -1 : dck_name_compare(a->t[i].name, b->t[j].name);
        ta[n] = c <= 0 ? &a->t[i++] : NULL;
        tb[n] = c >= 0 ? &b->t[j++] : NULL;
        dck_diff_tensor *t = &r->tensors[n];
        const side_tensor *any = ta[n] ? ta[n] : tb[n];
        t->name = dck_strdup(any->name);
        t->layer = dck_layer_of_name(any->name);
        r->ntensors = ++n;
        if (!t->name) {
            s = dck_oom(NULL);
            goto done;
        }
        t->group = any->group;
        t->stats.first_flat = UINT64_MAX;
        if (ta[n - 1]) {
            t->in_a = 1;
            t->dtype_a = ta[n - 1]->dtype;
            t->ndim_a = ta[n - 1]->ndim;
            memcpy(t->shape_a, ta[n - 1]->shape, sizeof(uint64_t) * (size_t)t->ndim_a);
            t->has_digest_a = ta[n - 1]->has_digest;
            t->digest_a = ta[n - 1]->digest;
        }
        if (tb[n - 1]) {
            t->in_b = 1;
            t->dtype_b = tb[n - 1]->dtype;
            t->ndim_b = tb[n - 1]->ndim;
            memcpy(t->shape_b, tb[n - 1]->shape, sizeof(uint64_t) * (size_t)t->ndim_b);
            t->has_digest_b = tb[n - 1]->has_digest;
            t->digest_b = tb[n - 1]->digest;
        }
        if (!t->in_a) t->status = DCK_DIFF_MISSING_IN_A;
        else if (!t->in_b) t->status = DCK_DIFF_MISSING_IN_B;
        else if (t->dtype_a != t->dtype_b) t->status = DCK_DIFF_DTYPE_MISMATCH;
        else if (!same_shape(ta[n - 1], tb[n - 1])) t->status = DCK_DIFF_SHAPE_MISMATCH;
        else t->status = DCK_DIFF_EQUAL; /* until shown otherwise */
    }

    /* Buffers and windows, only when a checkpoint is read. */
    e.a = a;
    e.b = b;
    e.r = r;
    e.ta = ta;
    e.tb = tb;
    e.tol = &opt->tol;
    e.differs = differs;
    progress_state ps = {threads, opt->progress, opt->progress_ctx, 0, 0};
    if (a->ck || b->ck) {
        s = premap(a, b, threads);
        if (s) goto done;
        e.window = WINDOW_ITEMS;
        for (int k = 0; k < 2; k++) {
            dck_checkpoint *ck = k ? b->ck : a->ck;
            for (size_t f = 0; ck && f < ck->nfiles; f++)
                if (ck->files[f]->mapped) e.window = WINDOW_MAPPED;
        }
        e.items = dck_xcalloc(WINDOW_ITEMS, sizeof *e.items);
        e.out = dck_xcalloc(WINDOW_ITEMS, sizeof *e.out);
        e.buf_a = dck_xcalloc((size_t)threads, sizeof *e.buf_a);
        e.buf_b = dck_xcalloc((size_t)threads, sizeof *e.buf_b);
        if (!e.items || !e.out || !e.buf_a || !e.buf_b) {
            s = dck_oom(NULL);
            goto done;
        }
        for (int w = 0; w < threads; w++) {
            e.buf_a[w] = a->ck ? dck_xmalloc(DIFF_CHUNK) : NULL;
            e.buf_b[w] = b->ck ? dck_xmalloc(DIFF_CHUNK) : NULL;
            if ((a->ck && !e.buf_a[w]) || (b->ck && !e.buf_b[w])) {
                s = dck_oom(NULL);
                goto done;
            }
        }
    }

    /* Pass 1 (two checkpoints): which tensors have bytes that differ.
     * With a manifest: digests of the checkpoint side. */
    size_t njobs = 0;
    for (size_t t = 0; t < r->ntensors; t++) {
        dck_diff_tensor *dt = &r->tensors[t];
        if (a->ck && b->ck) {
            if (dt->status == DCK_DIFF_EQUAL) {
                if (ta[t]->nbytes) jobs[njobs++] = (job){JOB_EQUAL, t, ta[t]->nbytes};
            } else {
                /* Tensors present on one side or mismatched: their digests. */
                if (dt->in_a) jobs[njobs++] = (job){JOB_DIGEST_A, t, ta[t]->nbytes};
            }
        } else {
            if (a->ck && dt->in_a) jobs[njobs++] = (job){JOB_DIGEST_A, t, ta[t]->nbytes};
            if (b->ck && dt->in_b) jobs[njobs++] = (job){JOB_DIGEST_B, t, tb[t]->nbytes};
        }
    }
    /* At most one job per tensor per pass: the B-side digests of tensors
     * absent from A or mismatched wait for pass 2. */
    for (size_t k = 0; k < njobs; k++) ps.total += job_read_bytes(&jobs[k]);
    if (a->ck && b->ck)
        for (size_t t = 0; t < r->ntensors; t++)
            if (r->tensors[t].status != DCK_DIFF_EQUAL && r->tensors[t].in_b)
                ps.total += tb[t]->nbytes;
    s = engine_run(&e, jobs, njobs, lanes_a, lanes_b, &ps);
    if (s) goto done;

    if (a->ck && b->ck) {
        /* Pass 2: statistics (and digests) of the tensors whose bytes differ,
         * the B-side digests of tensors absent from A or mismatched. */
        njobs = 0;
        for (size_t t = 0; t < r->ntensors; t++) {
            dck_diff_tensor *dt = &r->tensors[t];
            if (dt->status == DCK_DIFF_EQUAL) {
                if (atomic_load(&differs[t])) {
                    jobs[njobs++] = (job){JOB_STATS, t, ta[t]->nbytes};
                    ps.total += 2 * ta[t]->nbytes;
                    dt->has_stats = 1;
                }
            } else if (dt->in_b) {
                jobs[njobs++] = (job){JOB_DIGEST_B, t, tb[t]->nbytes};
            }
        }
        s = engine_run(&e, jobs, njobs, lanes_a, lanes_b, &ps);
        if (s) goto done;
    }

    /* Digests, statuses and indices. */
    for (size_t t = 0; t < r->ntensors; t++) {
        dck_diff_tensor *dt = &r->tensors[t];
        int pair_read = a->ck && b->ck && dt->status == DCK_DIFF_EQUAL;
        if (dt->in_a && a->ck && (!pair_read || dt->has_stats)) {
            dt->digest_a = dck_digest_finish(dt->dtype_a, dt->shape_a, dt->ndim_a, lanes_a[t]);
            dt->has_digest_a = 1;
        }
        if (dt->in_b && b->ck && (!pair_read || dt->has_stats)) {
            dt->digest_b = dck_digest_finish(dt->dtype_b, dt->shape_b, dt->ndim_b, lanes_b[t]);
            dt->has_digest_b = 1;
        }
        if (dt->status != DCK_DIFF_EQUAL) continue;
        if (dt->has_stats) {
            r->bytes_compared += ta[t]->nbytes;
            if (dt->stats.diff_count == 0) dt->status = DCK_DIFF_EQUAL;
            else if (dt->stats.beyond_count == 0) dt->status = DCK_DIFF_WITHIN_TOLERANCE;
            else dt->status = DCK_DIFF_DIFFER;
            if (dt->stats.first_flat != UINT64_MAX)
                flat_to_index(dt->stats.first_flat, dt->shape_a, dt->ndim_a, dt->first_index);
            dt->rel_l2 = dck_diff_rel_l2(&dt->stats);
        } else if (r->digest_only) {
            dt->status = dck_digest_equal(dt->digest_a, dt->digest_b) ? DCK_DIFF_EQUAL
                                                                      : DCK_DIFF_DIFFER;
        }
    }
    s = compare_values(a, b, r);
    if (!s) s = summarise(r);

done:
    if (e.buf_a)
        for (int w = 0; w < threads; w++) free(e.buf_a[w]);
    if (e.buf_b)
        for (int w = 0; w < threads; w++) free(e.buf_b[w]);
    free(e.buf_a);
    free(e.buf_b);
    free(e.items);
    free(e.out);
    free(ta);
    free(tb);
    free(lanes_a);
    free(lanes_b);
    free((void *)differs);
    free(jobs);
    free(a->t);
    free(b->t);
    a->t = b->t = NULL;
    if (s) dck_diff_result_release(out);
    return s;
}

dck_status dck_diff_checkpoints(dck_checkpoint *a, dck_checkpoint *b, const dck_diff_options *o,
                                dck_diff_result *out) {
    if (!a || !b || !out) return dck_set_error(DCK_ERR_INVALID, "diff: NULL argument");
    side sa = {"A", a, NULL, NULL, 0}, sb = {"B", b, NULL, NULL, 0};
    return diff_sides(&sa, &sb, o, out);
}

dck_status dck_diff_manifests(const dck_manifest *a, const dck_manifest *b,
                              const dck_diff_options *o, dck_diff_result *out) {
    if (!a || !b || !out) return dck_set_error(DCK_ERR_INVALID, "diff: NULL argument");
    side sa = {"A", NULL, a, NULL, 0}, sb = {"B", NULL, b, NULL, 0};
    return diff_sides(&sa, &sb, o, out);
}

/* ------------------------------------------------------------------ paths */

/* Failures name the path (the user gave two; say which one is bad). */
static dck_status name_path(dck_status s, const char *path) {
    const char *m = dck_last_error();
    if (m && *m && strstr(m, path)) return s;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", m && *m ? m : dck_strerror(s));
    return dck_set_error(s, "%s: %s", path, msg);
}

static dck_status open_side(const char *path, const dck_options *open_opt, int threads, side *sd) {
    memset(sd, 0, sizeof *sd);
    sd->label = path;
    dck_clear_error();
    dck_options o;
    if (open_opt) o = *open_opt;
    else dck_options_init(&o);
    o.threads = threads;
    o.hash_files = 0;
    o.progress = NULL;
    o.progress_ctx = NULL;
    const char *paths[1] = {path};
    if (dck_manifest_sniff(path)) {
        dck_manifest *m = NULL;
        dck_status s = dck_manifest_load(path, &m);
        if (!s) {
            sd->m = m;
            return DCK_OK;
        }
        /* A text-looking file that some reader takes is a checkpoint after
         * all; otherwise the manifest's complaint is the useful one. */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", dck_last_error());
        if (dck_checkpoint_open(paths, 1, &o, &sd->ck) == DCK_OK) return DCK_OK;
        dck_set_error(s, "%s", msg);
        return name_path(s, path);
    }
    dck_status s = dck_checkpoint_open(paths, 1, &o, &sd->ck);
    return s ? name_path(s, path) : DCK_OK;
}

static void close_side(side *sd) {
    dck_checkpoint_free(sd->ck);
    dck_manifest_free((dck_manifest *)sd->m);
    sd->ck = NULL;
    sd->m = NULL;
}

dck_status dck_diff_paths(const char *a, const char *b, const dck_diff_options *o,
                          dck_diff_result *out) {
    if (!a || !b || !out) return dck_set_error(DCK_ERR_INVALID, "diff: NULL argument");
    memset(out, 0, sizeof *out);
    int threads = o ? o->threads : 0;
    const dck_options *open_opt = o ? o->open_options : NULL;
    side sa, sb;
    dck_status s = open_side(a, open_opt, threads, &sa);
    if (s) return s;
    s = open_side(b, open_opt, threads, &sb);
    if (s) {
        close_side(&sa);
        return s;
    }
    s = diff_sides(&sa, &sb, o, out);
    close_side(&sa);
    close_side(&sb);
    return s;
}

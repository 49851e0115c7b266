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
 * Element statistics: diff_kernels.c (vector kernels per dtype and
 * instruction set, the same bits as the scalar reference).
 *
 * Reading: a tensor stored contiguously in a file is read in place from the
 * file's map (no copy), and a worker drops a chunk's pages from the process
 * when done with it; other tensors are read with pread into the worker's
 * buffers (or through the map of a zstd temporary or a file with strided
 * pieces, whose pages are dropped after each window).
 *
 * Memory: each worker holds two chunk buffers; the per-chunk slots cover one
 * window of chunks at a time; mapped pages are let go as above. Nothing
 * grows with tensor or checkpoint size.
 *
 * This file is the engine: the passes, the chunks and their workers, the
 * result and its summaries. The sides it compares (opening the two paths,
 * each side's tensors, reading their bytes, their values, the model's
 * order): diff_sides.c. */
#include "diff/diff_sides.h"
#include "diff/diff_kernels.h"
#include "common/element.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DIFF_CHUNK ((size_t)1 << 20) /* bytes; a multiple of DCK_SEGMENT and of every element size */
#define WINDOW_ITEMS 1024u  /* chunks per window (per-chunk results held at once) */
#define WINDOW_MAPPED 32u   /* with mapped files: their pages are let go after each */
#define DIFF_MAX_THREADS 32 /* 32 workers x 2 MiB buffers: 64 MiB, the memory bound */
/* A stacked tensor is split into at most this many layers (real models have
 * a few hundred; a longer leading dimension is no layer stack, and the
 * per-layer results must stay small). */
#define DIFF_MAX_SLICES 4096u
/* Per-layer statistics of the chunks of one window (each chunk of a stacked
 * tensor holds one entry per layer it spans): a window ends before it needs
 * more, so memory does not grow with the number of stacked tensors. */
#define WINDOW_SLICES (4 * DIFF_MAX_SLICES)

/* ------------------------------------------------------------------ names */

static const char *const status_names[DCK_DIFF_STATUS_COUNT] = {
    "equal",        "within_tolerance", "differ",        "missing_in_a",
    "missing_in_b", "dtype_mismatch",   "shape_mismatch"};

const char *dck_diff_status_name(dck_diff_status s) {
    return (unsigned)s < DCK_DIFF_STATUS_COUNT ? status_names[s] : "?";
}

const char *dck_diff_order_name(dck_diff_order o) {
    static const char *const names[] = {"name", "a", "b"};
    return (unsigned)o < sizeof names / sizeof names[0] ? names[o] : "?";
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

/* Components after which a number is a parameter index, not a layer:
 * PyTorch's optimizer state dict ("state", "param_groups") and Megatron-
 * Core's per-parameter optimizer state ("param_state"). */
static const char *const param_index_words[] = {"state", "param_groups", "param_state"};

static int numbers_a_parameter(const char *prev, size_t prev_n) {
    for (size_t i = 0; i < sizeof param_index_words / sizeof param_index_words[0]; i++)
        if (comp_is(prev, prev_n, param_index_words[i])) return 1;
    return 0;
}

char *dck_layer_of_name(const char *name) {
    /* Components are separated by '.', '/' or ':' (as dck_group_of_name).
     * A Megatron-Core ShardedObject's "KEY/shard_O_G" and what follows it
     * are the object's position in a grid of ranks or layers and its items
     * ("rng_state/shard_0.1_1.2.0.cuda_rng_state"): no layer of the name. */
    const char *prev = NULL, *s = name, *end = strstr(name, "/shard_");
    size_t prev_n = 0;
    while (*s && (!end || s < end)) {
        size_t n = strcspn(s, "./:");
        if (is_digits(s, n) && !numbers_a_parameter(prev, prev_n)) {
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

/* Megatron-Core's torch_dist format stacks a transformer's layers into one
 * tensor whose leading dimension is the layer: "decoder.layers.mlp.fc1.weight"
 * [L, ...] holds what "decoder.layers.1.mlp.fc1.weight" would for layer 1.
 * Such a name has a component "layers" followed by a component that is no
 * number. Its layers are named by the component before "layers", "layers"
 * and the index ("decoder.layers.1"), for the weight and its optimizer state
 * ("optimizer.state.exp_avg.decoder.layers.mlp.fc1.weight") alike, so a
 * layer's weights and state group together. Returns the length of that stem
 * ("decoder.layers") at *stem, with the separator that follows it in *sep;
 * 0 when the name is no stack. */
static size_t stacked_stem(const char *name, const char **stem, char *sep) {
    const char *prev = NULL, *s = name;
    while (*s) {
        size_t n = strcspn(s, "./:");
        if (comp_is(s, n, "layers")) {
            const char *next = s[n] ? s + n + 1 : NULL;
            if (!next || is_digits(next, strcspn(next, "./:"))) return 0;
            *stem = prev ? prev : s;
            *sep = s[n];
            return (size_t)(s + n - *stem);
        }
        if (n) prev = s;
        s += n;
        if (*s) s++;
    }
    return 0;
}

/* Sets up the slices of a stacked tensor (the layer count: the longer
 * leading dimension of the two sides); no-op for other tensors. One block
 * holds the slices and their names (released with one free). */
static dck_status stack_slices(dck_diff_tensor *t) {
    const char *stem;
    char sep;
    size_t sl = stacked_stem(t->name, &stem, &sep);
    if (!sl) return DCK_OK;
    uint64_t L = 0;
    if (t->in_a && t->ndim_a >= 1) L = t->shape_a[0];
    if (t->in_b && t->ndim_b >= 1 && t->shape_b[0] > L) L = t->shape_b[0];
    if (!L || L > DIFF_MAX_SLICES) return DCK_OK;
    size_t name_cap = sl + 1 + 21; /* stem, separator, index and NUL */
    dck_diff_slice *v = dck_xmalloc((size_t)L * (sizeof *v + name_cap));
    if (!v) return dck_oom(NULL);
    char *names = (char *)(v + L);
    for (size_t i = 0; i < (size_t)L; i++) {
        char *nm = names + i * name_cap;
        snprintf(nm, name_cap, "%.*s%c%zu", (int)sl, stem, sep, i);
        memset(&v[i], 0, sizeof v[i]);
        v[i].layer = nm;
        dck_diff_stats_init(&v[i].stats);
    }
    t->slices = v;
    t->nslices = (size_t)L;
    free((char *)t->layer); /* a number later in the name is no layer */
    t->layer = NULL;
    return DCK_OK;
}

void dck_diff_stats_init(dck_diff_stats *s) {
    memset(s, 0, sizeof *s);
    s->first_flat = UINT64_MAX;
}

/* The element kernels (diff_kernels.c): vectorised per dtype, the same
 * bits as the scalar reference. */
void dck_diff_elements(dck_dtype t, const void *a, const void *b, size_t n, uint64_t first_flat,
                       const dck_diff_tolerance *tol, dck_diff_stats *acc) {
    if (dck_dtype_is_complex(t)) {
        /* the parts, as floats: counts are of parts, first_flat of elements */
        int first = acc->first_flat == UINT64_MAX;
        dck_diff_elements_isa(dck_diff_isa_best(), dck_dtype_part(t), a, b, 2 * n, 2 * first_flat, tol, acc);
        if (first && acc->first_flat != UINT64_MAX) acc->first_flat /= 2;
        return;
    }
    dck_diff_elements_isa(dck_diff_isa_best(), t, a, b, n, first_flat, tol, acc);
}

static void diff_equal_elements(dck_dtype t, const void *p, size_t n, dck_diff_stats *acc) {
    dck_diff_equal_isa(dck_diff_isa_best(), dck_dtype_part(t), p, dck_dtype_is_complex(t) ? 2 * n : n, acc);
}

void dck_diff_stats_merge(dck_diff_stats *acc, const dck_diff_stats *p) {
    acc->count += p->count;
    acc->diff_count += p->diff_count;
    acc->beyond_count += p->beyond_count;
    if (acc->first_flat == UINT64_MAX) acc->first_flat = p->first_flat;
    if (p->max_abs > acc->max_abs) acc->max_abs = p->max_abs;
    if (p->max_rel > acc->max_rel) acc->max_rel = p->max_rel;
    if (p->max_ulp > acc->max_ulp) acc->max_ulp = p->max_ulp;
    if (p->max_ulp_same_sign > acc->max_ulp_same_sign) acc->max_ulp_same_sign = p->max_ulp_same_sign;
    acc->sign_changes += p->sign_changes;
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

/* ------------------------------------------------------------------ chunk engine */

enum { JOB_EQUAL, JOB_STATS, JOB_DIGEST_A, JOB_DIGEST_B };

typedef struct {
    uint32_t kind;
    size_t tensor; /* index into the result */
    uint64_t offset, len;
    /* JOB_STATS of a stacked tensor: the layers [l0, l0+nl) the chunk spans,
     * their statistics at engine.slice_pool[pool] (0 / unused otherwise) */
    uint64_t l0;
    size_t nl, pool;
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
    const uint64_t *slice_elems;  /* per result tensor: elements per layer of a
                                   * stacked tensor being compared, else 0 */
    dck_diff_stats *slice_pool;   /* WINDOW_SLICES entries, when needed */
} engine;

/* A differing chunk is taken in blocks of this many bytes (a multiple of
 * DCK_SEGMENT and of every element size): both sides' segment sums and the
 * element statistics of a block run while it is in the core's cache. The
 * element statistics of consecutive blocks accumulate in element order, so
 * the result is that of one call over the chunk. */
#define FUSED_BLOCK ((size_t)32 << 10)

/* Element statistics of n elements from flat index flat (b NULL: the same
 * bytes as a) into st; for a stacked tensor into the statistics of each
 * layer the elements belong to instead. */
static void chunk_elements(const engine *e, const work_item *it, dck_dtype t, const uint8_t *a,
                           const uint8_t *b, uint64_t flat, size_t n, dck_diff_stats *st) {
    uint64_t per = it->nl ? e->slice_elems[it->tensor] : 0;
    size_t esz = dck_dtype_size(t);
    while (n) {
        size_t k = n;
        dck_diff_stats *acc = st;
        if (per) {
            uint64_t layer = flat / per, left = (layer + 1) * per - flat;
            if (left < k) k = (size_t)left;
            acc = &e->slice_pool[it->pool + (size_t)(layer - it->l0)];
        }
        if (b) dck_diff_elements(t, a, b, k, flat, e->tol, acc);
        else diff_equal_elements(t, a, k, acc);
        a += k * esz;
        if (b) b += k * esz;
        flat += k;
        n -= k;
    }
}

/* A failing chunk stops the diff; dck_parallel_for_status reports the
 * lowest failing chunk, so the message does not depend on the threads. A
 * file truncated while it is compared reads zeros where it lost pages
 * (io.c): engine_run checks the files after each window, before its
 * chunks count. */
static dck_status work_task(void *ctx, size_t i, int worker) {
    engine *e = ctx;
    const work_item *it = &e->items[i];
    work_out *o = &e->out[i];
    const side_tensor *ta = e->ta[it->tensor], *tb = e->tb[it->tensor];
    const uint8_t *xa, *xb;
    size_t len = (size_t)it->len;
    switch (it->kind) {
    case JOB_EQUAL:
        /* Once one chunk differs the tensor goes to the statistics pass;
         * skipping its other chunks changes no result. */
        if (atomic_load_explicit(&e->differs[it->tensor], memory_order_relaxed)) return DCK_OK;
        DCK_TRY(dck_diff_side_bytes(e->a, ta, it->offset, len, e->buf_a[worker], &xa));
        DCK_TRY(dck_diff_side_bytes(e->b, tb, it->offset, len, e->buf_b[worker], &xb));
        if (memcmp(xa, xb, len) != 0)
            atomic_store_explicit(&e->differs[it->tensor], 1, memory_order_relaxed);
        dck_diff_release_direct(ta, it->offset, len);
        dck_diff_release_direct(tb, it->offset, len);
        return DCK_OK;
    case JOB_STATS: {
        DCK_TRY(dck_diff_side_bytes(e->a, ta, it->offset, len, e->buf_a[worker], &xa));
        DCK_TRY(dck_diff_side_bytes(e->b, tb, it->offset, len, e->buf_b[worker], &xb));
        uint64_t seg = it->offset / DCK_SEGMENT;
        size_t esz = dck_dtype_size(ta->dtype);
        dck_diff_stats_init(&o->st);
        for (size_t k = 0; k < it->nl; k++) dck_diff_stats_init(&e->slice_pool[it->pool + k]);
        if (memcmp(xa, xb, len) == 0) {
            /* the same bytes: the same segment sums */
            o->la = o->lb = dck_segments_sum(xa, len, seg);
            chunk_elements(e, it, ta->dtype, xa, NULL, it->offset / esz, len / esz, &o->st);
        } else {
            memset(&o->la, 0, sizeof o->la);
            memset(&o->lb, 0, sizeof o->lb);
            for (size_t at = 0; at < len; at += FUSED_BLOCK) {
                size_t n = len - at < FUSED_BLOCK ? len - at : FUSED_BLOCK;
                dck_lanes_add(&o->la, dck_segments_sum(xa + at, n, seg + at / DCK_SEGMENT));
                dck_lanes_add(&o->lb, dck_segments_sum(xb + at, n, seg + at / DCK_SEGMENT));
                chunk_elements(e, it, ta->dtype, xa + at, xb + at, (it->offset + at) / esz, n / esz,
                               &o->st);
            }
        }
        /* a stacked tensor's chunk: its statistics are its layers' in order */
        for (size_t k = 0; k < it->nl; k++) dck_diff_stats_merge(&o->st, &e->slice_pool[it->pool + k]);
        dck_diff_release_direct(ta, it->offset, len);
        dck_diff_release_direct(tb, it->offset, len);
        return DCK_OK;
    }
    case JOB_DIGEST_A:
        DCK_TRY(dck_diff_side_bytes(e->a, ta, it->offset, len, e->buf_a[worker], &xa));
        o->la = dck_segments_sum(xa, len, it->offset / DCK_SEGMENT);
        dck_diff_release_direct(ta, it->offset, len);
        return DCK_OK;
    default:
        DCK_TRY(dck_diff_side_bytes(e->b, tb, it->offset, len, e->buf_b[worker], &xb));
        o->lb = dck_segments_sum(xb, len, it->offset / DCK_SEGMENT);
        dck_diff_release_direct(tb, it->offset, len);
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
        size_t n = 0, pool = 0;
        while (j < njobs && n < e->window) {
            const job *jb = &jobs[j];
            if (off >= jb->nbytes) {
                j++;
                off = 0;
                continue;
            }
            uint64_t len = jb->nbytes - off;
            if (len > DIFF_CHUNK) len = DIFF_CHUNK;
            work_item w = {jb->kind, jb->tensor, off, len, 0, 0, 0};
            uint64_t per = e->slice_elems ? e->slice_elems[jb->tensor] : 0;
            if (jb->kind == JOB_STATS && per) {
                size_t esz = dck_dtype_size(e->ta[jb->tensor]->dtype);
                uint64_t first = off / esz, last = (off + len) / esz - 1;
                w.l0 = first / per;
                w.nl = (size_t)(last / per - w.l0 + 1);
                if (pool + w.nl > WINDOW_SLICES) break; /* the next window takes it */
                w.pool = pool;
                pool += w.nl;
            }
            e->items[n++] = w;
            off += len;
        }
        if (!n) break;
        dck_status s = dck_parallel_for_status(ps->threads, n, work_task, e);
        DCK_TRY(dck_diff_side_changed(e->a, 0)); /* before the chunks' own errors: zeros read */
        DCK_TRY(dck_diff_side_changed(e->b, 0));
        if (s) return s;
        for (size_t i = 0; i < n; i++) {
            const work_item *it = &e->items[i];
            work_out *o = &e->out[i];
            dck_diff_tensor *dt = &e->r->tensors[it->tensor];
            switch (it->kind) {
            case JOB_STATS:
                dck_lanes_add(&lanes_a[it->tensor], o->la);
                dck_lanes_add(&lanes_b[it->tensor], o->lb);
                dck_diff_stats_merge(&dt->stats, &o->st);
                for (size_t k = 0; k < it->nl; k++)
                    dck_diff_stats_merge(&dt->slices[it->l0 + k].stats, &e->slice_pool[it->pool + k]);
                break;
            case JOB_DIGEST_A: dck_lanes_add(&lanes_a[it->tensor], o->la); break;
            case JOB_DIGEST_B: dck_lanes_add(&lanes_b[it->tensor], o->lb); break;
            default: break;
            }
            ps->done += (it->kind == JOB_EQUAL || it->kind == JOB_STATS) ? 2 * it->len : it->len;
        }
        dck_diff_side_release_maps(e->a);
        dck_diff_side_release_maps(e->b);
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
        free((char *)r->tensors[i].alias_of);
        free(r->tensors[i].slices); /* with their names */
    }
    free(r->tensors);
    free(r->layers); /* layer names point into tensors */
    for (size_t i = 0; i < r->nvalues; i++) {
        free((char *)r->values[i].name);
        free((char *)r->values[i].a);
        free((char *)r->values[i].b);
    }
    free(r->values);
    for (size_t i = 0; i < r->naside_tensors; i++) {
        free((char *)r->aside_tensors[i].name);
        free((char *)r->aside_tensors[i].layer);
        free((char *)r->aside_tensors[i].alias_of);
        free(r->aside_tensors[i].slices);
    }
    free(r->aside_tensors);
    for (size_t i = 0; i < r->naside_values; i++) {
        free((char *)r->aside_values[i].name);
        free((char *)r->aside_values[i].a);
        free((char *)r->aside_values[i].b);
    }
    free(r->aside_values);
    memset(r, 0, sizeof *r);
}

/* ------------------------------------------------------------ layout state
 * Two different layouts (a layout value differs, or a per-rank object's
 * grid): their per-rank state cannot be equal, so it moves out of the
 * comparison into aside_tensors/aside_values (listed, not counted). */
typedef struct {
    const dck_diff_result *r;
    int side_b;
} side_names;

static const char *side_name_at(const void *ctx, size_t i) {
    const side_names *sn = ctx;
    const dck_diff_tensor *t = &sn->r->tensors[i];
    return (sn->side_b ? t->in_b : t->in_a) ? t->name : "";
}

static dck_status set_aside_layout_state(dck_diff_result *r) {
    const char *first[2] = {NULL, NULL};
    char buf[2][512];
    for (size_t i = 0; i < r->nvalues; i++) {
        int vk = dck_layout_value_kind(r->values[i].name);
        if (!vk || first[vk - 1]) continue;
        snprintf(buf[vk - 1], sizeof buf[0], "%s: %s vs %s", r->values[i].name, r->values[i].a ? r->values[i].a : "(none)",
                 r->values[i].b ? r->values[i].b : "(none)");
        first[vk - 1] = buf[vk - 1];
    }
    side_names a = {r, 0}, b = {r, 1};
    int differ = dck_layouts_differ(first[1], first[0], side_name_at, &a, r->ntensors, &b, r->ntensors, "the first",
                                    "the second", r->layouts_differ, sizeof r->layouts_differ);
    size_t nt = 0, nv = 0;
#define ASIDE(name, one_side) dck_layout_set_aside(name, one_side, differ)
    for (size_t i = 0; i < r->ntensors; i++)
        nt += ASIDE(r->tensors[i].name, !r->tensors[i].in_a || !r->tensors[i].in_b);
    for (size_t i = 0; i < r->nvalues; i++) nv += ASIDE(r->values[i].name, !r->values[i].a || !r->values[i].b);
    if ((nt && !(r->aside_tensors = dck_xcalloc(nt, sizeof *r->aside_tensors))) ||
        (nv && !(r->aside_values = dck_xcalloc(nv, sizeof *r->aside_values))))
        return dck_oom(NULL);
    size_t k = 0;
    for (size_t i = 0; i < r->ntensors; i++) {
        if (ASIDE(r->tensors[i].name, !r->tensors[i].in_a || !r->tensors[i].in_b))
            r->aside_tensors[r->naside_tensors++] = r->tensors[i];
        else r->tensors[k++] = r->tensors[i];
    }
    r->ntensors = k;
    k = 0;
    for (size_t i = 0; i < r->nvalues; i++) {
        if (ASIDE(r->values[i].name, !r->values[i].a || !r->values[i].b))
            r->aside_values[r->naside_values++] = r->values[i];
        else r->values[k++] = r->values[i];
    }
#undef ASIDE
    r->nvalues = k;
    return DCK_OK;
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
    const dck_diff_slice *slice; /* the tensor's slice of that layer, or NULL */
} layer_ref;

static int cmp_layer_ref(const void *x, const void *y) {
    const layer_ref *a = x, *b = y;
    int c = dck_name_compare(a->layer, b->layer);
    if (c) return c;
    return a->tensor < b->tensor ? -1 : a->tensor > b->tensor;
}

/* A model without numbered layers (fc1, fc2, head): each tensor's layer is
 * its module, the name up to its last '.', so the summary and the page have
 * a row per module rather than one of everything. */
static dck_status layers_from_modules(dck_diff_result *r) {
    const char *stem;
    char sep;
    for (size_t i = 0; i < r->ntensors; i++) /* a stack is numbered (digests: not split) */
        if (r->tensors[i].layer || r->tensors[i].nslices || stacked_stem(r->tensors[i].name, &stem, &sep))
            return DCK_OK;
    r->layers_are_modules = r->ntensors > 0;
    for (size_t i = 0; i < r->ntensors; i++) {
        const char *dot = strrchr(r->tensors[i].name, '.');
        if (dot && dot > r->tensors[i].name &&
            !(r->tensors[i].layer = dck_strndup(r->tensors[i].name, (size_t)(dot - r->tensors[i].name))))
            return dck_oom(NULL);
    }
    return DCK_OK;
}

/* Layers in the order of their first tensor (ties, the layers of one
 * stacked tensor: by name). first[k]: layer k's first tensor. */
typedef struct {
    dck_diff_layer layer;
    size_t first;
} layer_at;

static int cmp_layer_at(const void *x, const void *y) {
    const layer_at *a = x, *b = y;
    if (a->first != b->first) return a->first < b->first ? -1 : 1;
    return dck_name_compare(a->layer.layer, b->layer.layer);
}

static dck_status order_layers(dck_diff_result *r, const size_t *first) {
    layer_at *v = dck_xcalloc(r->nlayers ? r->nlayers : 1, sizeof *v);
    if (!v) return dck_oom(NULL);
    for (size_t i = 0; i < r->nlayers; i++) v[i] = (layer_at){r->layers[i], first[i]};
    qsort(v, r->nlayers, sizeof *v, cmp_layer_at);
    for (size_t i = 0; i < r->nlayers; i++) r->layers[i] = v[i].layer;
    free(v);
    return DCK_OK;
}

static dck_status summarise(dck_diff_result *r) {
    r->first_tensor = -1;
    r->first_layer = -1;
    DCK_TRY(layers_from_modules(r));
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
        nl += t->nslices;
    }
    layer_ref *refs = dck_xcalloc(nl ? nl : 1, sizeof *refs);
    size_t *first = dck_xcalloc(nl ? nl : 1, sizeof *first); /* per layer: its first tensor */
    r->layers = dck_xcalloc(nl ? nl : 1, sizeof *r->layers);
    if (!refs || !first || !r->layers) {
        free(refs);
        free(first);
        return dck_oom(NULL);
    }
    size_t k = 0;
    for (size_t i = 0; i < r->ntensors; i++) {
        const dck_diff_tensor *t = &r->tensors[i];
        if (t->layer) refs[k++] = (layer_ref){t->layer, i, NULL};
        for (size_t l = 0; l < t->nslices; l++) refs[k++] = (layer_ref){t->slices[l].layer, i, &t->slices[l]};
    }
    qsort(refs, nl, sizeof *refs, cmp_layer_ref);
    r->nlayers = 0;
    for (size_t i = 0; i < nl; i++) {
        if (!r->nlayers || strcmp(r->layers[r->nlayers - 1].layer, refs[i].layer) != 0) {
            first[r->nlayers] = refs[i].tensor; /* refs of a layer are in tensor order */
            r->layers[r->nlayers++] = (dck_diff_layer){.layer = refs[i].layer};
        }
        dck_diff_layer *L = &r->layers[r->nlayers - 1];
        const dck_diff_tensor *t = &r->tensors[refs[i].tensor];
        const dck_diff_slice *sl = refs[i].slice; /* a stacked tensor: its layer's part */
        dck_diff_status status = sl ? sl->status : t->status;
        const dck_diff_stats *st = sl ? &sl->stats : &t->stats;
        uint64_t numeric = sl ? sl->numeric_diff_count : t->numeric_diff_count;
        L->tensors++;
        if (status != DCK_DIFF_EQUAL) {
            if (!L->differing || refs[i].tensor < L->first_differing)
                L->first_differing = refs[i].tensor;
            L->differing++;
            if (t->has_stats && st->max_ulp > L->max_ulp) L->max_ulp = st->max_ulp;
            if (t->has_stats && st->max_ulp_same_sign > L->max_ulp_same_sign)
                L->max_ulp_same_sign = st->max_ulp_same_sign;
            if (t->has_stats) L->sign_changes += st->sign_changes;
            if (t->has_stats && numeric) L->numeric_differing++;
            else if (t->has_stats && st->diff_count) L->nan_only++;
        }
    }
    free(refs);
    dck_status s = r->order != DCK_DIFF_ORDER_NAME ? order_layers(r, first) : DCK_OK;
    free(first);
    if (s) return s;
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

static int same_shape(const side_tensor *x, const side_tensor *y) {
    if (x->ndim != y->ndim) return 0;
    for (int d = 0; d < x->ndim; d++)
        if (x->shape[d] != y->shape[d]) return 0;
    return 1;
}

/* A stacked tensor whose bytes differ: its elements per layer for the
 * workers, and the per-window pool of per-layer statistics (both allocated
 * when first needed). */
static dck_status plan_slices(engine *e, size_t t, const side_tensor *st, size_t cap) {
    if (!e->slice_elems && !(e->slice_elems = dck_xcalloc(cap ? cap : 1, sizeof *e->slice_elems)))
        return dck_oom(NULL);
    if (!e->slice_pool && !(e->slice_pool = dck_xcalloc(WINDOW_SLICES, sizeof *e->slice_pool)))
        return dck_oom(NULL);
    uint64_t per = 1;
    for (int d = 1; d < st->ndim; d++) per *= st->shape[d];
    ((uint64_t *)e->slice_elems)[t] = per; /* 0 for an empty layer: nothing to split */
    return DCK_OK;
}

/* Each layer's status from its statistics, as the tensor's; a tensor not
 * compared element by element passes its status to every layer. */
static void finish_slices(dck_diff_tensor *dt) {
    for (size_t l = 0; l < dt->nslices; l++) {
        dck_diff_slice *sl = &dt->slices[l];
        if (!dt->has_stats) {
            sl->status = dt->status;
            continue;
        }
        const dck_diff_stats *st = &sl->stats;
        sl->status = !st->diff_count ? DCK_DIFF_EQUAL
                     : !st->beyond_count ? DCK_DIFF_WITHIN_TOLERANCE : DCK_DIFF_DIFFER;
        sl->rel_l2 = dck_diff_rel_l2(st);
        sl->numeric_diff_count = st->diff_count - st->nan_vs_number - st->nan_payload;
    }
}

static dck_status diff_sides(side *a, side *b, const dck_diff_options *opt,
                             dck_diff_result *out) {
    dck_diff_options defaults;
    if (!opt) {
        dck_diff_options_init(&defaults);
        opt = &defaults;
    }
    memset(out, 0, sizeof *out);
    long *alias_a = NULL, *alias_b = NULL; /* shared storage per side, when first needed */
    dck_status s = dck_diff_side_build(a, opt);
    if (!s) s = dck_diff_side_build(b, opt);
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
        const side_tensor *any = ta[n] ? ta[n] : tb[n];
        const side *one = ta[n] ? a : b;
        long alias = -1;
        if (!(ta[n] && tb[n]) && one->ck) { /* one side only: a tied weight? */
            long **al = one == a ? &alias_a : &alias_b;
            size_t nt = dck_checkpoint_tensor_count(one->ck);
            if (!*al) {
                if (!(*al = malloc((nt ? nt : 1) * sizeof **al))) {
                    s = dck_oom(NULL);
                    goto done;
                }
                if ((s = dck_ck_storage_aliases(one->ck, *al))) goto done;
            }
            alias = (*al)[any->index];
            if (alias >= 0 && opt->ignore_aliases) continue;
        }
        dck_diff_tensor *t = &r->tensors[n];
        if (alias >= 0 && !(t->alias_of = dck_strdup(dck_checkpoint_tensor(one->ck, (size_t)alias)->name))) {
            s = dck_oom(NULL);
            goto done;
        }
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
        /* digests cover whole tensors: with a manifest, no layer of a stack
         * can be told from another */
        if (!r->digest_only && (s = stack_slices(t))) goto done;
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
        s = dck_diff_premap(a, b, threads);
        if (s) goto done;
        s = dck_diff_side_set_direct(a);
        if (!s) s = dck_diff_side_set_direct(b);
        if (s) goto done;
        e.window = dck_diff_side_reads_maps(a) || dck_diff_side_reads_maps(b) ? WINDOW_MAPPED : WINDOW_ITEMS;
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
                    if (dt->nslices && (s = plan_slices(&e, t, ta[t], cap))) goto done;
                }
            } else if (dt->in_b) {
                jobs[njobs++] = (job){JOB_DIGEST_B, t, tb[t]->nbytes};
            }
        }
        s = engine_run(&e, jobs, njobs, lanes_a, lanes_b, &ps);
        if (s) goto done;
    }
    if ((s = dck_diff_side_changed(a, 1)) || (s = dck_diff_side_changed(b, 1))) goto done;

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
            dt->numeric_diff_count = dt->stats.diff_count - dt->stats.nan_vs_number - dt->stats.nan_payload;
        } else if (r->digest_only) {
            dt->status = dck_digest_equal(dt->digest_a, dt->digest_b) ? DCK_DIFF_EQUAL
                                                                      : DCK_DIFF_DIFFER;
        }
    }
    for (size_t t = 0; t < r->ntensors; t++) finish_slices(&r->tensors[t]);
    s = dck_diff_model_order(r, a, b, ta, tb);
    if (!s) s = dck_diff_compare_values(a, b, opt, r);
    if (!s && !opt->require_rank_state) s = set_aside_layout_state(r);
    if (!s) s = summarise(r);
    /* what was set aside was not compared: no OK over it unless accepted */
    if (!s && (r->naside_tensors || r->naside_values) && !opt->accept_layout_state) r->equal = r->ok = 0;

done:
    free(alias_a);
    free(alias_b);
    if (e.buf_a)
        for (int w = 0; w < threads; w++) free(e.buf_a[w]);
    if (e.buf_b)
        for (int w = 0; w < threads; w++) free(e.buf_b[w]);
    free(e.buf_a);
    free(e.buf_b);
    free(e.items);
    free(e.out);
    free((void *)e.slice_elems);
    free(e.slice_pool);
    free(ta);
    free(tb);
    free(lanes_a);
    free(lanes_b);
    free((void *)differs);
    free(jobs);
    free(a->t);
    free(b->t);
    free(a->whole);
    free(b->whole);
    a->t = b->t = NULL;
    a->whole = b->whole = NULL;
    if (s) dck_diff_result_release(out);
    return s;
}

dck_status dck_diff_checkpoints(dck_checkpoint *a, dck_checkpoint *b, const dck_diff_options *o,
                                dck_diff_result *out) {
    if (!a || !b || !out) return dck_set_error(DCK_ERR_INVALID, "diff: NULL argument");
    side sa = {"A", a, NULL, NULL, 0, NULL}, sb = {"B", b, NULL, NULL, 0, NULL};
    return diff_sides(&sa, &sb, o, out);
}

dck_status dck_diff_manifests(const dck_manifest *a, const dck_manifest *b,
                              const dck_diff_options *o, dck_diff_result *out) {
    if (!a || !b || !out) return dck_set_error(DCK_ERR_INVALID, "diff: NULL argument");
    side sa = {"A", NULL, a, NULL, 0, NULL}, sb = {"B", NULL, b, NULL, 0, NULL};
    return diff_sides(&sa, &sb, o, out);
}

dck_status dck_diff_paths(const char *a, const char *b, const dck_diff_options *o,
                          dck_diff_result *out) {
    if (!a || !b || !out) return dck_set_error(DCK_ERR_INVALID, "diff: NULL argument");
    memset(out, 0, sizeof *out);
    int threads = o ? o->threads : 0;
    const dck_options *open_opt = o ? o->open_options : NULL;
    side sa, sb;
    dck_status s = dck_diff_side_open(a, open_opt, threads, &sa);
    if (s) return s;
    s = dck_diff_side_open(b, open_opt, threads, &sb);
    if (s) {
        dck_diff_side_close(&sa);
        return s;
    }
    s = diff_sides(&sa, &sb, o, out);
    dck_diff_side_close(&sa);
    dck_diff_side_close(&sb);
    return s;
}

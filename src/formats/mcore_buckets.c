/* Megatron-Core's dp_reshardable optimizer state: per-parameter tensors
 * recovered from the bucket buffers.
 *
 * The distributed optimizer keeps its state in the layout of the gradient
 * buffers: per model-parallel rank G (dp_group_idx_G) and per (param dtype,
 * grad dtype) buffer B (gbuf_idx_B), the rank's local parameters are laid
 * out in REVERSE registration order, each start padded to a multiple of 64
 * elements, and cut into buckets (a bucket closes once it holds bucket_size
 * elements, or before and after a shared embedding). dp_reshardable saves
 * each bucket's state as one 1-D tensor per state (`param`, the fp32 master
 * weight, `exp_avg`, `exp_avg_sq`) of the bucket's unpadded size: up to the
 * end of its last parameter (or that end padded to 64 before a shared
 * embedding). The gaps between parameters are saved too, from torch.empty:
 * arbitrary bytes, so a digest of the bucket differs between identical runs.
 *
 * The checkpoint does not store the parameter-to-bucket map (Megatron
 * recomputes it from the model at load), but everything it depends on is
 * there: the registration order is the order of the model's tensors in
 * the .metadata (stacked `X.layers.*` tensors layer-major: layer 0's
 * parameters, then layer 1's), the local shards are the model tensors'
 * chunks (at TP > 1 rank G holds the G-th chunk along the split; a tensor
 * of one chunk is replicated), and each bucket's size is its stored size.
 * The map is inferred (order, 64-padding, each bucket consumed exactly up
 * to its size) and then checked: every parameter's `param` slice must
 * equal its model weight (bit for bit, or, for a bf16/fp16 weight, the
 * master rounded to nearest-even) and every bucket must be consumed
 * exactly. Then each bucket state becomes optimizer.state.{fp32_param,
 * exp_avg, ...}.KEY in the parameter's global shape: pieces pointing into
 * the bucket's bytes, padding left out, the digests those of the
 * model-space layouts. Otherwise (the check fails, or the layout is one
 * this does not place: pipeline or expert parallelism, chained optimizers,
 * several buffers of one param dtype) the buckets are compared as stored,
 * whole, padding included, and each is named by a value saying so and why
 * (detcheck-formats(7)): state compared nowhere would be an OK over what
 * was never looked at (detcheck-formats(7), FORMATS). A bucket stored in a way the
 * checkpoint's own validation refuses (gaps, overlaps, bytes past a file's
 * end) is left as it is, for that validation to report. */
#include "formats/readers.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BK_ROOT "optimizer.distributed.dp_group_idx_"
#define BK_PAD 64 /* parameter starts in a buffer: multiples of 64 elements */
#define BK_BLOCK 4096 /* elements compared at a time */

/* One stored bucket state tensor, its name taken apart. */
typedef struct {
    long t;               /* tensor index at the start */
    unsigned long g, b, k;
    const char *dt;       /* the text after "dtype_", up to ".bucket_idx_" */
    size_t dtl;
    const char *state;    /* after "bucket_idx_K." */
    bool prefixed;        /* something before optimizer.distributed (chained_N.) */
    bool parsed;
} bk_tensor;

/* A stored range of a bucket state: elements [lo, hi) at byte fo of file. */
typedef struct {
    uint64_t lo, hi, fo;
    uint32_t file;
} bk_range;

typedef struct {
    const bk_tensor *bt;  /* its name parts */
    bk_range *r;
    size_t nr;
} bk_state;

typedef struct {
    unsigned long g, b, k;
    uint64_t numel;       /* stored (unpadded) size */
    bk_state *st;         /* states, by name */
    size_t nst;
    long param;           /* index into st of "param", -1 none */
} bk_bucket;

/* A parameter in registration order: a model tensor, or one layer of a
 * stacked one; chunks: its local shards, in offset order. */
typedef struct {
    long t;
    const char *key;
    int layer;            /* -1: not stacked */
    dck_dtype dtype;
    const dck_piece **chunks;
    size_t nchunks;
} bk_param;

/* Where a parameter of group g lies: bucket, start, chunk. */
typedef struct {
    size_t param, bucket;
    uint64_t start, numel;
    const dck_piece *chunk;
    bool first;           /* the first group holding it (replicas are reported once) */
} bk_place;

typedef struct {
    dck_checkpoint *ck;
    const char *label;
    bk_tensor *bt;
    size_t nbt;
    bk_bucket *bk;
    size_t nbk;
    bk_param *par;
    size_t npar;
    bk_place *pl;
    size_t npl, cap_pl;
    const dck_piece **chunkbuf;
    char reason[512];     /* why the map is not recovered ("" while it may be) */
    bool leave;           /* malformed storage: leave it to validation */
    bool placed;          /* infer_map placed every parameter (pl complete) */
} bk_ctx;

static bool eat_num(const char **p, unsigned long *out) {
    const char *s = *p;
    if (*s < '0' || *s > '9') return false;
    unsigned long v = 0;
    while (*s >= '0' && *s <= '9') {
        if (v > 100000000ul) return false;
        v = v * 10 + (unsigned long)(*s++ - '0');
    }
    *p = s;
    *out = v;
    return true;
}

static bool eat(const char **p, const char *lit) {
    size_t n = strlen(lit);
    if (strncmp(*p, lit, n)) return false;
    *p += n;
    return true;
}

/* Is name a bucket state (1), and are its parts read (o->parsed)? A name
 * with optimizer.distributed.dp_group_idx_ and .bucket_idx_ in it is one,
 * even when the rest is not the form this knows. */
static bool parse_bucket(const char *name, bk_tensor *o) {
    const char *at = strstr(name, BK_ROOT);
    if (!at || !strstr(at, ".bucket_idx_")) return false;
    memset(o, 0, sizeof *o);
    o->prefixed = at != name;
    const char *p = at + strlen(BK_ROOT);
    if (!eat_num(&p, &o->g) || !eat(&p, ".gbuf_idx_") || !eat_num(&p, &o->b) || !eat(&p, ".dtype_")) return true;
    const char *e = strstr(p, ".bucket_idx_");
    o->dt = p;
    o->dtl = (size_t)(e - p);
    p = e + strlen(".bucket_idx_");
    if (!eat_num(&p, &o->k) || !eat(&p, ".") || !*p || strchr(p, '.')) return true;
    o->state = p;
    o->parsed = true;
    return true;
}

static int cmp_bt(const void *a, const void *b) {
    const bk_tensor *x = a, *y = b;
    if (x->g != y->g) return x->g < y->g ? -1 : 1;
    if (x->b != y->b) return x->b < y->b ? -1 : 1;
    if (x->k != y->k) return x->k < y->k ? -1 : 1;
    return strcmp(x->state, y->state);
}

static int cmp_range(const void *a, const void *b) {
    const bk_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static int cmp_chunk(const void *a, const void *b, void *ctx) {
    int nd = *(const int *)ctx;
    const dck_piece *x = *(const dck_piece *const *)a, *y = *(const dck_piece *const *)b;
    for (int d = 0; d < nd; d++)
        if (x->offset[d] != y->offset[d]) return x->offset[d] < y->offset[d] ? -1 : 1;
    return 0;
}

/* The reason the map is not recovered: the first one found is kept. */
__attribute__((format(printf, 2, 3))) static void no_map(bk_ctx *c, const char *fmt, ...) {
    if (c->reason[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->reason, sizeof c->reason, fmt, ap);
    va_end(ap);
    /* cut to fit: never in the middle of a character (values are UTF-8) */
    size_t n = strlen(c->reason);
    while (n && !dck_utf8_valid(c->reason, n)) c->reason[--n] = 0;
}

static const char *tname(const bk_ctx *c, long t) { return c->ck->tensors[t].info.name; }

/* ------------------------------------------------------------------ buckets */

/* The stored ranges of one bucket state: 1-D, contiguous, tiling [0, numel)
 * inside their files; c->leave when not (validation says what is wrong). */
static dck_status load_ranges(bk_ctx *c, bk_state *s, uint64_t numel) {
    const dck_tensor_entry *t = &c->ck->tensors[s->bt->t];
    if (!(s->r = calloc(t->npieces + 1, sizeof *s->r))) return dck_oom(NULL);
    for (size_t i = 0; i < t->npieces; i++) {
        const dck_piece *p = &t->pieces[i];
        if (p->strides || p->byteswap) {
            no_map(c, "%s is stored strided or byte-swapped", t->info.name);
            return DCK_OK;
        }
        if (!p->shape[0]) continue;
        const dck_file *f = c->ck->files[p->file];
        uint64_t end;
        if (p->offset[0] > numel || p->shape[0] > numel - p->offset[0] || dck_piece_extent(t, p, &end) ||
            (f->data_size != UINT64_MAX && end > f->data_size)) {
            dck_clear_error();
            c->leave = true;
            return DCK_OK;
        }
        s->r[s->nr++] = (bk_range){p->offset[0], p->offset[0] + p->shape[0], p->file_offset, p->file};
    }
    dck_qsort(s->r, s->nr, sizeof *s->r, cmp_range);
    uint64_t at = 0;
    for (size_t i = 0; i < s->nr; i++) {
        if (s->r[i].lo != at) break;
        at = s->r[i].hi;
    }
    if (at != numel) c->leave = true;
    return DCK_OK;
}

/* Groups the bucket state tensors into buckets, checks their names and
 * shapes; the reason when they are not the form this places. */
static dck_status collect_buckets(bk_ctx *c) {
    for (size_t i = 0; i < c->nbt; i++) {
        const bk_tensor *b = &c->bt[i];
        if (!b->parsed) {
            no_map(c, "%s: bucket name not of the form " BK_ROOT "G.gbuf_idx_B.dtype_D.bucket_idx_K.STATE",
                   tname(c, b->t));
            return DCK_OK;
        }
        if (b->prefixed) {
            no_map(c, "%s: several optimizers (chained or expert-parallel state) are not placed", tname(c, b->t));
            return DCK_OK;
        }
    }
    dck_qsort(c->bt, c->nbt, sizeof *c->bt, cmp_bt);
    if (!(c->bk = calloc(c->nbt, sizeof *c->bk))) return dck_oom(NULL);
    for (size_t i = 0; i < c->nbt;) {
        size_t j = i;
        while (j < c->nbt && c->bt[j].g == c->bt[i].g && c->bt[j].b == c->bt[i].b && c->bt[j].k == c->bt[i].k) j++;
        bk_bucket *k = &c->bk[c->nbk++];
        k->g = c->bt[i].g;
        k->b = c->bt[i].b;
        k->k = c->bt[i].k;
        k->param = -1;
        if (!(k->st = calloc(j - i, sizeof *k->st))) return dck_oom(NULL);
        const dck_tensor_entry *t0 = &c->ck->tensors[c->bt[i].t];
        k->numel = t0->info.ndim == 1 ? t0->info.shape[0] : 0;
        for (size_t q = i; q < j; q++) {
            const dck_tensor_entry *t = &c->ck->tensors[c->bt[q].t];
            if (t->info.ndim != 1 || t->info.shape[0] != k->numel) {
                no_map(c, "%s: bucket states are not 1-D tensors of one size", t->info.name);
                return DCK_OK;
            }
            if (q > i && !strcmp(c->bt[q].state, c->bt[q - 1].state)) {
                no_map(c, "%s: stored twice", t->info.name);
                return DCK_OK;
            }
            if (q > i && (c->bt[q].dtl != c->bt[i].dtl || memcmp(c->bt[q].dt, c->bt[i].dt, c->bt[i].dtl))) {
                no_map(c, "%s: the states of one bucket name different dtypes", t->info.name);
                return DCK_OK;
            }
            bk_state *s = &k->st[k->nst++];
            s->bt = &c->bt[q];
            if (!strcmp(s->bt->state, "param")) k->param = (long)(k->nst - 1);
            DCK_TRY(load_ranges(c, s, k->numel));
            if (c->leave || c->reason[0]) return DCK_OK;
        }
        if (k->param < 0) {
            no_map(c, "%s: no param (master weight) state to check the map against", t0->info.name);
            return DCK_OK;
        }
        i = j;
    }
    /* groups 0..n-1, buffers 0..m-1 and buckets 0..K-1 of each, no gaps */
    for (size_t i = 0; i < c->nbk; i++) {
        const bk_bucket *k = &c->bk[i], *p = i ? &c->bk[i - 1] : NULL;
        bool ok = p ? (k->g == p->g ? (k->b == p->b ? k->k == p->k + 1 : k->b == p->b + 1 && k->k == 0)
                                    : k->g == p->g + 1 && k->b == 0 && k->k == 0)
                    : k->g == 0 && k->b == 0 && k->k == 0;
        if (!ok) {
            no_map(c, "dp_group_idx_%lu gbuf_idx_%lu bucket_idx_%lu: the groups, buffers or buckets stored are not "
                      "numbered from 0 without gaps", k->g, k->b, k->k);
            return DCK_OK;
        }
    }
    return DCK_OK;
}

/* The param dtype a buffer's name gives ("(torch.bfloat16, torch.float32)"):
 * -1 when it does not say. */
static int gbuf_param_dtype(const bk_tensor *b) {
    char buf[64];
    const char *p = b->dt;
    size_t n = b->dtl;
    if (n < 8 || n >= sizeof buf || strncmp(p, "(torch.", 7)) return -1;
    size_t l = 0;
    for (p += 7, n -= 7; l < n && p[l] != ',' && p[l] != ')'; l++) buf[l] = p[l];
    buf[l] = 0;
    return dck_pk_torch_dtype(buf);
}

/* ------------------------------------------------------------------ parameters */

/* The stem of a stacked tensor: the name up to a component "layers" not
 * followed by a layer number (decoder.layers.mlp.linear_fc1.weight ->
 * "decoder.layers"), as detcheck diff reads stacks; 0 when none. */
static size_t stack_stem(const char *name) {
    const char *s = name;
    while (*s) {
        size_t n = strcspn(s, ".");
        if (n == 6 && !strncmp(s, "layers", 6)) {
            const char *next = s[n] ? s + n + 1 : NULL;
            if (!next || (*next >= '0' && *next <= '9')) return 0;
            return (size_t)(s + n - name);
        }
        s += n;
        if (*s) s++;
    }
    return 0;
}

/* The model tensors of the .metadata: not optimizer state. */
static bool is_model_key(const char *k) {
    const char *o = strstr(k, "optimizer.");
    return !(o && (o == k || o[-1] == '.'));
}

static dck_status add_param(bk_ctx *c, long t, const char *key, int layer, size_t cap) {
    if (c->npar >= cap) return dck_set_error(DCK_ERR_LIMIT, "%s: too many parameters", c->label);
    const dck_tensor_entry *e = &c->ck->tensors[t];
    bk_param *p = &c->par[c->npar++];
    p->t = t;
    p->key = key;
    p->layer = layer;
    p->dtype = e->info.dtype;
    p->chunks = c->chunkbuf;
    for (size_t i = 0; i < e->npieces; i++) {
        const dck_piece *q = &e->pieces[i];
        if (layer >= 0 && q->offset[0] != (uint64_t)layer) continue;
        c->chunkbuf[p->nchunks++] = q;
    }
    c->chunkbuf += p->nchunks;
    int nd = e->info.ndim;
    if (p->nchunks > 1) qsort_r(p->chunks, p->nchunks, sizeof *p->chunks, cmp_chunk, &nd);
    return DCK_OK;
}

/* The parameters in registration order: the model tensors in .metadata
 * order, a run of stacked tensors of one stem expanded layer-major. */
static dck_status collect_params(bk_ctx *c, const pk_node *sdm) {
    size_t n = sdm->u.dict.n, total = 0, cap = 0;
    long *ts = calloc(n + 1, sizeof *ts);
    if (!ts) return dck_oom(NULL);
    size_t nt = 0;
    for (size_t i = 0; i < n; i++) {
        const pk_node *k = sdm->u.dict.keys[i];
        if (k->kind != PK_STR || !is_model_key(k->u.s.p) ||
            !dck_pk_object_is(sdm->u.dict.vals[i], "torch.distributed.checkpoint.metadata", "TensorStorageMetadata"))
            continue;
        long t = dck_checkpoint_find(c->ck, k->u.s.p);
        if (t < 0) continue; /* nothing stored: an empty tensor */
        if (dck_ck_check_tensor(c->ck, (size_t)t)) { /* read below: validation reports it */
            dck_clear_error();
            c->leave = true;
            break;
        }
        const dck_tensor_entry *e = &c->ck->tensors[t];
        ts[nt++] = t;
        total += e->npieces;
        cap += e->info.ndim && stack_stem(e->info.name) ? e->info.shape[0] : 1;
    }
    if (c->leave) {
        free(ts);
        return DCK_OK;
    }
    dck_status s = DCK_OK;
    c->par = calloc(cap + 1, sizeof *c->par);
    const dck_piece **cb = calloc(total + 1, sizeof *cb);
    if (!c->par || !cb) {
        free(ts);
        free(cb);
        return dck_oom(NULL);
    }
    c->chunkbuf = cb;
    for (size_t i = 0; i < nt && !s && !c->reason[0];) {
        const dck_tensor_entry *e = &c->ck->tensors[ts[i]];
        size_t sl = e->info.ndim ? stack_stem(e->info.name) : 0;
        bool stacked = sl > 0;
        for (size_t q = 0; stacked && q < e->npieces; q++)
            if (e->pieces[q].shape[0] != 1) stacked = false;
        if (!stacked) {
            s = add_param(c, ts[i], e->info.name, -1, cap);
            i++;
            continue;
        }
        /* the run of stacked tensors of this stem */
        size_t j = i + 1;
        while (j < nt) {
            const dck_tensor_entry *f = &c->ck->tensors[ts[j]];
            if (!f->info.ndim || stack_stem(f->info.name) != sl || strncmp(f->info.name, e->info.name, sl)) break;
            j++;
        }
        uint64_t L = e->info.shape[0];
        for (size_t q = i; q < j; q++) {
            const dck_tensor_entry *f = &c->ck->tensors[ts[q]];
            bool ok = f->info.shape[0] == L;
            for (size_t r = 0; ok && r < f->npieces; r++) ok = f->pieces[r].shape[0] == 1;
            if (!ok) {
                no_map(c, "%s: a stacked tensor whose layers are not stored one chunk row each, or whose "
                          "layer count differs from %s's", f->info.name, e->info.name);
                break;
            }
        }
        for (uint64_t l = 0; l < L && !s && !c->reason[0]; l++)
            for (size_t q = i; q < j && !s; q++)
                s = add_param(c, ts[q], c->ck->tensors[ts[q]].info.name, (int)l, cap);
        i = j;
    }
    free(ts);
    c->chunkbuf = cb; /* freed by the caller */
    return s;
}

/* ------------------------------------------------------------------ the map */

static uint64_t pad_up(uint64_t x, uint64_t m) { return (x + m - 1) / m * m; }

static uint64_t chunk_numel(const bk_param *p, const dck_piece *q, const dck_checkpoint *ck) {
    uint64_t n = 1;
    for (int d = 0; d < ck->tensors[p->t].info.ndim; d++) n *= q->shape[d];
    return n;
}

static const char *pname(const bk_param *p, char *buf, size_t n) {
    if (p->layer < 0) return p->key;
    snprintf(buf, n, "%s (layer %d)", p->key, p->layer);
    return buf;
}

static dck_status place(bk_ctx *c, size_t param, size_t bucket, uint64_t start, uint64_t numel,
                        const dck_piece *chunk, bool first) {
    DCK_TRY(dck_grow((void **)&c->pl, &c->cap_pl, c->npl + 1, sizeof *c->pl));
    c->pl[c->npl++] = (bk_place){param, bucket, start, numel, chunk, first};
    return DCK_OK;
}

/* Lays out the parameters of every group's buffers: reverse registration
 * order, starts padded to 64, each bucket consumed up to its stored size. */
static dck_status infer_map(bk_ctx *c) {
    unsigned long ngroups = c->bk[c->nbk - 1].g + 1;
    size_t tp = 1;
    for (size_t i = 0; i < c->npar; i++)
        if (c->par[i].nchunks > tp) tp = c->par[i].nchunks;
    for (size_t i = 0; i < c->npar; i++)
        if (c->par[i].nchunks != 1 && c->par[i].nchunks != tp) {
            char nb[DCK_MAX_NAME + 32];
            no_map(c, "%s has %zu chunks where others have %zu (a split this does not place)",
                   pname(&c->par[i], nb, sizeof nb), c->par[i].nchunks, tp);
            return DCK_OK;
        }
    if (ngroups != tp) {
        no_map(c, "%lu model-parallel groups (dp_group_idx) but the model tensors are split %zu ways: pipeline "
                  "or expert parallelism is not placed", ngroups, tp);
        return DCK_OK;
    }
    for (size_t g0 = 0, g1; g0 < c->nbk; g0 = g1) {
        unsigned long g = c->bk[g0].g;
        for (g1 = g0; g1 < c->nbk && c->bk[g1].g == g; g1++) {}
        /* the buffers of the group and their param dtypes */
        size_t nbuf = c->bk[g1 - 1].b + 1;
        int bdt[16];
        if (nbuf > 16) {
            no_map(c, "dp_group_idx_%lu has %zu buffers", g, nbuf);
            return DCK_OK;
        }
        for (size_t i = g0; i < g1; i++) bdt[c->bk[i].b] = gbuf_param_dtype(c->bk[i].st[0].bt);
        for (size_t x = 0; x < nbuf && nbuf > 1; x++)
            for (size_t y = 0; y <= x; y++)
                if (bdt[x] < 0 || (y < x && bdt[x] == bdt[y])) {
                    no_map(c, "dp_group_idx_%lu: %zu buffers that their dtypes do not tell apart", g, nbuf);
                    return DCK_OK;
                }
        for (size_t b = 0; b < nbuf; b++) {
            size_t k0 = g0;
            while (c->bk[k0].b != b) k0++;
            size_t k = k0, kend = k0;
            while (kend < g1 && c->bk[kend].b == b) kend++;
            uint64_t pos = 0;
            size_t inb = 0;
            for (size_t pi = c->npar; pi-- > 0;) {
                const bk_param *p = &c->par[pi];
                if (nbuf > 1 && (int)p->dtype != bdt[b]) continue;
                const dck_piece *ch = p->nchunks == 1 ? p->chunks[0] : p->chunks[g];
                uint64_t n = chunk_numel(p, ch, c->ck);
                char nb[DCK_MAX_NAME + 32];
                if (k == kend) {
                    no_map(c, "dp_group_idx_%lu gbuf_idx_%zu: %s and the parameters before it in registration "
                              "order do not fit in the stored buckets", g, b, pname(p, nb, sizeof nb));
                    return DCK_OK;
                }
                uint64_t s = pad_up(pos, BK_PAD);
                if (inb && s == c->bk[k].numel) { /* closed before a shared embedding */
                    k++;
                    inb = 0;
                    s = 0;
                    if (k == kend) {
                        no_map(c, "dp_group_idx_%lu gbuf_idx_%zu: %s does not fit in the stored buckets", g, b,
                               pname(p, nb, sizeof nb));
                        return DCK_OK;
                    }
                }
                if (s > c->bk[k].numel || n > c->bk[k].numel - s) {
                    no_map(c, "dp_group_idx_%lu gbuf_idx_%zu bucket_idx_%lu (%llu elements) does not end at a "
                              "parameter's end: %s would lie at [%llu, %llu)", g, b, c->bk[k].k,
                           (unsigned long long)c->bk[k].numel, pname(p, nb, sizeof nb), (unsigned long long)s,
                           (unsigned long long)(s + n));
                    return DCK_OK;
                }
                DCK_TRY(place(c, pi, k, s, n, ch, p->nchunks > 1 || g == 0));
                inb++;
                pos = s + n;
                if (pos == c->bk[k].numel) {
                    k++;
                    inb = 0;
                    pos = 0;
                }
            }
            if (inb && pad_up(pos, BK_PAD) == c->bk[k].numel) k++;
            if (k != kend) {
                no_map(c, "dp_group_idx_%lu gbuf_idx_%zu: the parameters fill %llu of the %llu elements of "
                          "bucket_idx_%lu (parameters missing from the model's tensors?)", g, b,
                       (unsigned long long)pos, (unsigned long long)c->bk[k].numel, c->bk[k].k);
                return DCK_OK;
            }
        }
    }
    return DCK_OK;
}

/* ------------------------------------------------------------------ the check */

static uint16_t f32_to_bf16(uint32_t x) { return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16); }

static uint16_t f32_to_f16(uint32_t x) {
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to infinity (NaN: caller) */
    if (ax < 0x33000000u) return (uint16_t)sign;               /* below half the least subnormal */
    uint32_t e = ax >> 23, q, rem, half;
    if (e < 113) { /* subnormal: m * 2^(e-150) in units of 2^-24 */
        uint32_t m = (ax & 0x7fffffu) | 0x800000u, sh = 126 - e;
        q = m >> sh;
        rem = m & ((1u << sh) - 1);
        half = 1u << (sh - 1);
    } else {
        q = ((e - 112) << 10) | ((ax & 0x7fffffu) >> 13);
        rem = ax & 0x1fffu;
        half = 0x1000u;
    }
    if (rem > half || (rem == half && (q & 1))) q++;
    return (uint16_t)(sign | q);
}

/* Does the fp32 master m give the weight w (stored as dtype wt)? */
static bool master_gives(uint32_t m, uint16_t w, dck_dtype wt) {
    bool mnan = (m & 0x7fffffffu) > 0x7f800000u;
    if (wt == DCK_BF16) return mnan ? (w & 0x7fff) > 0x7f80 : f32_to_bf16(m) == w;
    return mnan ? (w & 0x7fff) > 0x7c00 : f32_to_f16(m) == w;
}

/* Compares one placed parameter's master weights with its model weight:
 * 1 equal, 0 not (reason set), or an error. */
static dck_status check_one(bk_ctx *c, const bk_place *pl, const uint8_t **maps) {
    const bk_bucket *k = &c->bk[pl->bucket];
    const bk_state *ps = &k->st[k->param];
    const dck_tensor_entry *bt = &c->ck->tensors[ps->bt->t];
    const bk_param *p = &c->par[pl->param];
    const dck_tensor_entry *mt = &c->ck->tensors[p->t];
    dck_dtype mdt = bt->info.dtype, wdt = mt->info.dtype;
    size_t mes = dck_dtype_size(mdt), wes = dck_dtype_size(wdt);
    char nb[DCK_MAX_NAME + 32];
    bool same = mdt == wdt, round = mdt == DCK_F32 && (wdt == DCK_BF16 || wdt == DCK_F16);
    if (!same && !round) {
        no_map(c, "%s is %s with %s master weights: no check for that pair", pname(p, nb, sizeof nb),
               dck_dtype_name(wdt), dck_dtype_name(mdt));
        return DCK_OK;
    }
    const dck_file *wf = c->ck->files[pl->chunk->file];
    uint64_t wend;
    if (dck_piece_extent(mt, pl->chunk, &wend) || (wf->data_size != UINT64_MAX && wend > wf->data_size) ||
        !maps[pl->chunk->file]) {
        dck_clear_error();
        c->leave = true; /* validation reports the model tensor */
        return DCK_OK;
    }
    uint8_t wbuf[BK_BLOCK * 16];
    size_t ri = 0;
    for (uint64_t e = 0; e < pl->numel;) {
        size_t n = pl->numel - e < BK_BLOCK ? (size_t)(pl->numel - e) : BK_BLOCK;
        dck_piece_gather(mt, pl->chunk, maps[pl->chunk->file], e, n, wbuf);
        /* the master weights of [start + e, start + e + n), range by range */
        for (size_t done = 0; done < n;) {
            uint64_t at = pl->start + e + done;
            while (ri < ps->nr && ps->r[ri].hi <= at) ri++;
            const bk_range *r = &ps->r[ri]; /* the ranges tile the bucket */
            size_t m = (size_t)(r->hi - at < n - done ? r->hi - at : n - done);
            const uint8_t *mb = maps[r->file];
            if (!mb) {
                c->leave = true;
                return DCK_OK;
            }
            mb += r->fo + (at - r->lo) * mes;
            bool eq = true;
            if (same) eq = !memcmp(mb, wbuf + done * wes, m * mes);
            else
                for (size_t i = 0; i < m && eq; i++) {
                    uint32_t mv;
                    uint16_t wv;
                    memcpy(&mv, mb + i * 4, 4);
                    memcpy(&wv, wbuf + (done + i) * 2, 2);
                    eq = master_gives(mv, wv, wdt);
                }
            if (!eq) {
                no_map(c, "the master weights (param) at [%llu, %llu) of dp_group_idx_%lu gbuf_idx_%lu "
                          "bucket_idx_%lu differ from %s, which the inferred map puts there",
                       (unsigned long long)pl->start, (unsigned long long)(pl->start + pl->numel), k->g, k->b, k->k,
                       pname(p, nb, sizeof nb));
                return DCK_OK;
            }
            done += m;
        }
        e += n;
    }
    return DCK_OK;
}

static dck_status check_map(bk_ctx *c) {
    const uint8_t **maps = calloc(c->ck->nfiles + 1, sizeof *maps);
    if (!maps) return dck_oom(NULL);
    for (size_t f = 0; f < c->ck->nfiles; f++) {
        uint64_t len;
        if (dck_file_map(c->ck->files[f], &maps[f], &len)) {
            dck_clear_error();
            maps[f] = NULL;
        }
    }
    dck_status s = DCK_OK;
    for (size_t i = 0; i < c->npl && !s && !c->reason[0] && !c->leave; i++) s = check_one(c, &c->pl[i], maps);
    free(maps);
    return s;
}

/* ------------------------------------------------------------------ results */

/* optimizer.state.STATE.KEY, the master weights as fp32_param (the name the
 * other layouts are reported under). */
static void state_name(char *buf, size_t n, const char *state, const char *key) {
    snprintf(buf, n, "optimizer.state.%s.%s", strcmp(state, "param") ? state : "fp32_param", key);
}

/* Every name the recovered tensors take is free (else not recovered). */
static void check_names(bk_ctx *c) {
    char nm[DCK_MAX_NAME + 64];
    for (size_t i = 0; i < c->npl && !c->reason[0]; i++) {
        const bk_place *pl = &c->pl[i];
        if (!pl->first || c->par[pl->param].layer > 0) continue;
        const bk_bucket *k = &c->bk[pl->bucket];
        for (size_t s = 0; s < k->nst; s++) {
            state_name(nm, sizeof nm, k->st[s].bt->state, c->par[pl->param].key);
            if (strlen(nm) > DCK_MAX_NAME || dck_checkpoint_find(c->ck, nm) >= 0)
                no_map(c, "%s is stored already (or its name is too long)", nm);
        }
    }
}

static dck_status emit(bk_ctx *c) {
    char nm[DCK_MAX_NAME + 64];
    dck_piece_vec pv = {0};
    dck_status s = DCK_OK;
    for (size_t i = 0; i < c->npl && !s; i++) {
        const bk_place *pl = &c->pl[i];
        if (!pl->first) continue;
        const bk_param *p = &c->par[pl->param];
        const dck_tensor_entry *mt = &c->ck->tensors[p->t];
        int nd = mt->info.ndim;
        uint64_t gshape[DCK_MAX_DIMS], b[DCK_MAX_DIMS], base[DCK_MAX_DIMS], inner[DCK_MAX_DIMS];
        memcpy(gshape, mt->info.shape, sizeof gshape);
        memcpy(b, pl->chunk->shape, sizeof b);
        memcpy(base, pl->chunk->offset, sizeof base);
        inner[nd - 1] = 1;
        for (int d = nd - 2; d >= 0; d--) inner[d] = inner[d + 1] * b[d + 1];
        const bk_bucket *k = &c->bk[pl->bucket];
        for (size_t si = 0; si < k->nst && !s; si++) {
            const bk_state *st = &k->st[si];
            const dck_tensor_entry *bt = &c->ck->tensors[st->bt->t];
            size_t es = dck_dtype_size(bt->info.dtype);
            state_name(nm, sizeof nm, st->bt->state, p->key);
            uint64_t lo = pl->start, hi = pl->start + pl->numel;
            pv.n = 0;
            for (size_t r = 0; r < st->nr && !s; r++) {
                const bk_range *g = &st->r[r];
                uint64_t a = g->lo > lo ? g->lo : lo, z = g->hi < hi ? g->hi : hi;
                if (a >= z) continue;
                dck_piece tmpl;
                memset(&tmpl, 0, sizeof tmpl);
                tmpl.file = g->file;
                s = dck_mcore_split_range(&pv, &tmpl, nd, b, inner, base, a - lo, z - lo, g->fo + (a - g->lo) * es,
                                          es);
            }
            for (size_t q = 0; q < pv.n && !s; q++) s = dck_ck_add_piece(c->ck, nm, bt->info.dtype, gshape, nd, &pv.v[q]);
        }
    }
    free(pv.v);
    return s;
}

/* Where the inferred map (not verified) puts the padding of bucket k:
 * "[1984, 2048), [4032, 4096)", "none", or "not known" when the map was
 * not inferred. Placements of one bucket are consecutive in c->pl, in
 * order of their starts (infer_map fills each bucket from 0 up). */
static void padding_of(const bk_ctx *c, size_t k, char *buf, size_t n) {
    if (!c->placed) {
        snprintf(buf, n, "not known");
        return;
    }
    size_t len = 0, shown = 0, more = 0;
    uint64_t at = 0;
    buf[0] = 0;
    for (size_t i = 0; i <= c->npl; i++) {
        if (i < c->npl && c->pl[i].bucket != k) continue;
        uint64_t s = i < c->npl ? c->pl[i].start : c->bk[k].numel;
        if (s > at && more) more++;
        else if (s > at) {
            int w = snprintf(buf + len, n - len, "%s[%llu, %llu)", shown ? ", " : "", (unsigned long long)at,
                             (unsigned long long)s);
            if (w > 0 && (size_t)w < n - len - 24) { /* room left for " and N more" */
                len += (size_t)w;
                shown++;
            } else {
                buf[len] = 0;
                more++;
            }
        }
        if (i < c->npl) at = s + c->pl[i].numel;
    }
    if (more) snprintf(buf + len, n - len, " and %zu more", more);
    if (!shown && !more) snprintf(buf, n, "none");
}

/* Not recovered: the bucket tensors stay as stored, 1-D and whole, so the
 * state is still compared, padding (torch.empty bytes) included; each
 * bucket state's value NAME.padding says so, where the padding lies as far
 * as the map was inferred, and why; a note. Two identical runs may then
 * differ in the padding alone: a difference to look at, never an OK over
 * state compared nowhere. */
static dck_status compared_whole(bk_ctx *c) {
    char v[sizeof c->reason + 1024], pad[768], nm[DCK_MAX_NAME + 16];
    /* buckets were formed (collect_buckets) or not: name every state */
    for (size_t i = 0; i < c->nbt; i++) {
        size_t k = 0;
        while (c->placed && k < c->nbk && !(c->bk[k].g == c->bt[i].g && c->bk[k].b == c->bt[i].b &&
                                            c->bk[k].k == c->bt[i].k))
            k++;
        padding_of(c, k, pad, sizeof pad);
        snprintf(v, sizeof v,
                 "compared whole, padding included (where the inferred map, not verified, puts it: %s): "
                 "per-parameter map not recovered (%s)", pad, c->reason);
        if (strlen(tname(c, c->bt[i].t)) + 8 > DCK_MAX_NAME)
            return dck_set_error(DCK_ERR_LIMIT, "%s: bucket name too long: %.80s...", c->label, tname(c, c->bt[i].t));
        snprintf(nm, sizeof nm, "%s.padding", tname(c, c->bt[i].t));
        DCK_TRY(dck_ck_add_value(c->ck, nm, v));
    }
    if (c->ck->opt.notice) {
        char msg[DCK_ERROR_MESSAGE_MAX];
        snprintf(msg, sizeof msg,
                 "%s: dp_reshardable optimizer state (%zu bucket tensors) compared as stored, padding included "
                 "(its torch.empty bytes may differ between identical runs): per-parameter map not recovered (%s)",
                 c->label, c->nbt, c->reason);
        c->ck->opt.notice(c->ck->opt.notice_ctx, msg);
    }
    return DCK_OK;
}

dck_status dck_mcore_buckets(dck_checkpoint *ck, const pk_node *sdm, const char *label) {
    bk_ctx c;
    memset(&c, 0, sizeof c);
    c.ck = ck;
    c.label = label;
    size_t n0 = ck->ntensors;
    for (size_t i = 0; i < n0; i++) {
        bk_tensor b;
        if (parse_bucket(ck->tensors[i].info.name, &b)) c.nbt++;
    }
    if (!c.nbt) return DCK_OK;
    const dck_piece **chunkbuf = NULL;
    dck_status s = DCK_OK;
    if (!(c.bt = calloc(c.nbt, sizeof *c.bt))) {
        s = dck_oom(NULL);
        goto out;
    }
    c.nbt = 0;
    for (size_t i = 0; i < n0; i++)
        if (parse_bucket(ck->tensors[i].info.name, &c.bt[c.nbt])) c.bt[c.nbt++].t = (long)i;
    /* storage that validation refuses stays for it to report (exit 2
     * naming the file), whatever happens to the map */
    for (size_t i = 0; i < c.nbt; i++)
        if (dck_ck_check_tensor(ck, (size_t)c.bt[i].t)) {
            dck_clear_error();
            goto out;
        }
    if ((s = collect_buckets(&c)) || c.leave) goto out;
    if (!c.reason[0]) {
        s = collect_params(&c, sdm);
        chunkbuf = c.chunkbuf;
        if (s || c.leave) goto out;
    }
    if (!c.reason[0] && !c.npar) no_map(&c, "no model tensors in the .metadata");
    if (!c.reason[0] && (s = infer_map(&c))) goto out;
    c.placed = !c.reason[0] && !c.leave;
    if (!c.reason[0] && (s = check_map(&c))) goto out;
    if (c.leave) goto out;
    if (!c.reason[0]) check_names(&c);
    if (c.reason[0]) {
        s = compared_whole(&c);
        goto out;
    }
    if ((s = emit(&c))) goto out;
    /* the new tensors come after n0: d2 marks the old bucket tensors only */
    unsigned char *d2 = calloc(ck->ntensors + 1, 1);
    if (!d2) {
        s = dck_oom(NULL);
        goto out;
    }
    for (size_t i = 0; i < c.nbt; i++) d2[c.bt[i].t] = 1;
    dck_ck_remove_tensors(ck, d2);
    free(d2);
out:
    for (size_t i = 0; i < c.nbk; i++) {
        for (size_t j = 0; j < c.bk[i].nst; j++) free(c.bk[i].st[j].r);
        free(c.bk[i].st);
    }
    free(c.bk);
    free(c.bt);
    free(c.par);
    free(c.pl);
    free(chunkbuf);
    return s;
}

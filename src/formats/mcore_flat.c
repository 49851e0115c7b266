/* Megatron-Core's additions to a torch_dist (DCP) `.metadata`.
 *
 * Megatron-Core pickles an MCoreMetadata: torch's Metadata plus
 * `mcore_data`, a dict from a tensor's key to Megatron's own facts about it.
 * One matters to digests: `nd_reformulated_orig_global_shape`. A tensor
 * saved with a flattened range (the distributed optimizer's state in
 * megatron-core <= 0.15 `fully_sharded_model_space`, and
 * `--dist-ckpt-save-pre-mcore-014`) is a parameter of global shape O
 * (rank n) held as TP chunks of shape b (b[d] = O[d] / F[d], F the number of
 * chunks along dim d, layer dimensions chunked into single layers), each
 * chunk flattened row-major and split over data-parallel ranks. It is
 * stored as the tensor [F[0], ..., F[n-1], prod(b)]: storage element
 * [i_0, ..., i_{n-1}, k] is element k (row-major) of chunk i, i.e. the
 * parameter's element (i_d * b[d] + j_d)_d where j is k unravelled in b.
 * The storage shape then depends on the TP size ([2,1,1,1536] at TP1,
 * [2,2,1,768] at TP2 for a [2,48,32] parameter); the parameter does not.
 *
 * dck_mcore_unflatten rewrites the pieces of such a tensor into pieces of
 * the parameter: every run of a stored chunk (a contiguous range of one
 * flattened TP chunk) becomes at most 2n-1 hyperrectangles of the
 * parameter, each contiguous in the file, so the digest is that of the
 * parameter itself (digest v1 is taken over the logical tensor whatever
 * its pieces), equal to the model-space (fully_reshardable) layout's.
 *
 * Names: the master weights are `optimizer.state.fp32_param.KEY` in the
 * flattened-range format and `optimizer.state.param.KEY` in
 * fully_reshardable; detcheck reports both as `fp32_param` (see
 * detcheck-formats(7), "Megatron-Core optimizer state"). */
#include "formats/readers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ND_KEY "nd_reformulated_orig_global_shape"

typedef struct {
    const char *key;
    int nd;
    uint64_t shape[DCK_MAX_DIMS];
} mc_flat;

struct dck_mcore {
    mc_flat *flat;
    size_t nflat;
    const char **names; /* state_dict_metadata keys, sorted */
    size_t nnames;
};

static int cmp_flat(const void *a, const void *b) {
    return strcmp(((const mc_flat *)a)->key, ((const mc_flat *)b)->key);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

void dck_mcore_free(dck_mcore *m) {
    if (!m) return;
    free(m->flat);
    free(m->names);
    free(m);
}

dck_status dck_mcore_create(const pk_node *root, const pk_node *sdm, const char *label, bool megatron,
                            dck_mcore **out) {
    *out = NULL;
    const pk_node *md = dck_pk_get(root, "mcore_data");
    if ((!md || md->kind == PK_NONE) && !megatron) return DCK_OK; /* plain torch DCP */
    if (md && md->kind == PK_NONE) md = NULL;
    if (md && md->kind != PK_DICT)
        return dck_set_error(DCK_ERR_FORMAT, "%s: mcore_data is not a dict", label);
    dck_mcore *m = calloc(1, sizeof *m);
    if (!m) return dck_oom(NULL);
    dck_status s = DCK_OK;
    size_t n = md ? md->u.dict.n : 0;
    if (!(m->flat = calloc(n + 1, sizeof *m->flat)) ||
        !(m->names = calloc(sdm->u.dict.n + 1, sizeof *m->names))) {
        dck_mcore_free(m);
        return dck_oom(NULL);
    }
    for (size_t i = 0; i < n && !s; i++) {
        const pk_node *k = md->u.dict.keys[i], *v = md->u.dict.vals[i];
        if (k->kind != PK_STR) {
            s = dck_set_error(DCK_ERR_FORMAT, "%s: mcore_data key is not a string", label);
            break;
        }
        const pk_node *sh = v && v->kind == PK_DICT ? dck_pk_get(v, ND_KEY) : NULL;
        if (!sh || sh->kind == PK_NONE) continue;
        mc_flat *f = &m->flat[m->nflat];
        size_t nk;
        pk_node **it = dck_pk_items(sh, &nk);
        if (!it || nk == 0 || nk >= DCK_MAX_DIMS) {
            s = dck_set_error(DCK_ERR_FORMAT, "%s: mcore_data: %s of %s is not a shape of 1 to %d dimensions",
                              label, ND_KEY, k->u.s.p, DCK_MAX_DIMS - 1);
            break;
        }
        for (size_t d = 0; d < nk && !s; d++) {
            int64_t x;
            if (!dck_pk_int(it[d], &x) || x < 0)
                s = dck_set_error(DCK_ERR_FORMAT, "%s: mcore_data: %s of %s is not a shape", label, ND_KEY,
                                  k->u.s.p);
            else
                f->shape[d] = (uint64_t)x;
        }
        f->key = k->u.s.p;
        f->nd = (int)nk;
        m->nflat++;
    }
    if (!s) {
        qsort(m->flat, m->nflat, sizeof *m->flat, cmp_flat);
        for (size_t i = 1; i < m->nflat && !s; i++)
            if (!strcmp(m->flat[i - 1].key, m->flat[i].key))
                s = dck_set_error(DCK_ERR_FORMAT, "%s: mcore_data lists %s twice", label, m->flat[i].key);
    }
    for (size_t i = 0; i < sdm->u.dict.n && !s; i++)
        if (sdm->u.dict.keys[i]->kind == PK_STR) m->names[m->nnames++] = sdm->u.dict.keys[i]->u.s.p;
    if (!s) qsort(m->names, m->nnames, sizeof *m->names, cmp_str);
    if (s) {
        dck_mcore_free(m);
        return s;
    }
    *out = m;
    return DCK_OK;
}

bool dck_mcore_flat_shape(const dck_mcore *m, const char *fqn, int *nd, const uint64_t **shape) {
    if (!m || !m->nflat) return false;
    mc_flat key;
    key.key = fqn;
    const mc_flat *f = bsearch(&key, m->flat, m->nflat, sizeof *m->flat, cmp_flat);
    if (!f) return false;
    *nd = f->nd;
    *shape = f->shape;
    return true;
}

/* `optimizer.state.param.` as a whole component path: at the start of the
 * name or after a '.' (chained optimizers prefix `chained_N.`). */
#define MASTER_FROM "optimizer.state.param."
#define MASTER_TO "optimizer.state.fp32_param."

const char *dck_mcore_name(const dck_mcore *m, const char *fqn, char *buf, size_t n) {
    if (!m) return fqn;
    const char *p = fqn;
    for (;;) {
        p = strstr(p, MASTER_FROM);
        if (!p) return fqn;
        if (p == fqn || p[-1] == '.') break;
        p++;
    }
    size_t pre = (size_t)(p - fqn), rest = strlen(p + strlen(MASTER_FROM));
    if (pre + strlen(MASTER_TO) + rest + 1 > n) return fqn;
    memcpy(buf, fqn, pre);
    memcpy(buf + pre, MASTER_TO, strlen(MASTER_TO));
    memcpy(buf + pre + strlen(MASTER_TO), p + strlen(MASTER_FROM), rest + 1);
    /* both names stored: keep each as it is rather than merge two tensors */
    const char *key = buf;
    if (bsearch(&key, m->names, m->nnames, sizeof *m->names, cmp_str)) return fqn;
    return buf;
}

static void fmt_shape(char *b, size_t n, const uint64_t *s, int nd) {
    size_t o = 0;
    o += (size_t)snprintf(b + o, n - o, "[");
    for (int i = 0; i < nd && o < n; i++)
        o += (size_t)snprintf(b + o, n - o, "%s%llu", i ? "," : "", (unsigned long long)s[i]);
    if (o < n) snprintf(b + o, n - o, "]");
}

static dck_status push(dck_piece_vec *pv, const dck_piece *p) {
    if (pv->n == pv->cap && dck_grow((void **)&pv->v, &pv->cap, pv->n + 1, sizeof *pv->v)) return dck_oom(NULL);
    pv->v[pv->n++] = *p;
    return DCK_OK;
}

/* One piece per hyperrectangle: fixed indices before dim d, a range along
 * d, whole after it (declared in formats.h). */
dck_status dck_mcore_split_range(dck_piece_vec *pv, const dck_piece *tmpl, int nd, const uint64_t *b,
                                 const uint64_t *inner, const uint64_t *base, uint64_t s, uint64_t e,
                                 uint64_t fo, size_t es) {
    uint64_t pos = s;
    while (pos < e) {
        int d = nd - 1;
        for (int q = 0; q < nd; q++)
            if (pos % inner[q] == 0 && e - pos >= inner[q]) {
                d = q;
                break;
            }
        uint64_t at = (pos / inner[d]) % b[d];
        uint64_t k = (e - pos) / inner[d];
        if (k > b[d] - at) k = b[d] - at;
        dck_piece p = *tmpl;
        p.strides = NULL;
        p.file_offset = fo + (pos - s) * es;
        for (int q = 0; q < nd; q++) {
            if (q < d) {
                p.offset[q] = base[q] + (pos / inner[q]) % b[q];
                p.shape[q] = 1;
            } else if (q == d) {
                p.offset[q] = base[q] + at;
                p.shape[q] = k;
            } else {
                p.offset[q] = base[q];
                p.shape[q] = b[q];
            }
        }
        DCK_TRY(push(pv, &p));
        pos += k * inner[d];
    }
    return DCK_OK;
}

dck_status dck_mcore_unflatten(dck_checkpoint *ck, const char *label, const char *name, int nd,
                               const uint64_t *oshape) {
    long idx = dck_checkpoint_find(ck, name);
    if (idx < 0) return DCK_OK; /* nothing stored (empty tensor) */
    dck_tensor_entry *t = &ck->tensors[idx];
    const uint64_t *S = t->info.shape;
    char a[200], b[200];
    fmt_shape(a, sizeof a, oshape, nd);
    fmt_shape(b, sizeof b, S, t->info.ndim);
    uint64_t blk[DCK_MAX_DIMS], inner[DCK_MAX_DIMS], numel = 1;
    bool ok = t->info.ndim == nd + 1;
    for (int d = 0; ok && d < nd; d++) {
        if (S[d] == 0 || oshape[d] % S[d]) {
            ok = false;
            break;
        }
        blk[d] = oshape[d] / S[d];
        if (__builtin_mul_overflow(numel, blk[d], &numel)) ok = false;
    }
    if (ok && numel != S[nd]) ok = false;
    if (!ok)
        return dck_set_error(DCK_ERR_FORMAT,
                             "%s: tensor %s: mcore_data gives the original shape %s, which does not match "
                             "its stored flattened-range shape %s (expected [chunks per dim..., chunk numel])",
                             label, name, a, b);
    if (numel == 0) { /* no elements: nothing to place */
        for (size_t i = 0; i < t->npieces; i++) free(t->pieces[i].strides);
        t->npieces = 0;
        t->info.ndim = nd;
        memcpy(t->info.shape, oshape, sizeof(uint64_t) * (size_t)nd);
        return DCK_OK;
    }
    inner[nd - 1] = 1;
    for (int d = nd - 2; d >= 0; d--) inner[d] = inner[d + 1] * blk[d + 1];
    size_t es = dck_dtype_size(t->info.dtype);
    dck_piece_vec pv = {0};
    dck_status s = DCK_OK;
    for (size_t pi = 0; pi < t->npieces && !s; pi++) {
        const dck_piece *p = &t->pieces[pi];
        const char *fp = ck->files[p->file]->path;
        if (p->strides) {
            s = dck_set_error(DCK_ERR_UNSUPPORTED, "%s: tensor %s: strided chunk of a flattened-range tensor", fp,
                              name);
            break;
        }
        bool empty = false;
        for (int d = 0; d <= nd; d++) {
            if (p->offset[d] > S[d] || p->shape[d] > S[d] - p->offset[d]) {
                s = dck_set_error(DCK_ERR_LAYOUT, "%s: tensor %s: chunk along dim %d [%llu, +%llu) outside stored size %s",
                                  fp, name, d, (unsigned long long)p->offset[d], (unsigned long long)p->shape[d], b);
                break;
            }
            if (!p->shape[d]) empty = true;
        }
        if (s || empty) continue;
        /* runs: one per stored chunk index the piece spans, row-major */
        uint64_t len = p->shape[nd], run = 0, ci[DCK_MAX_DIMS], base[DCK_MAX_DIMS];
        for (int d = 0; d < nd; d++) ci[d] = p->offset[d];
        for (;;) {
            for (int d = 0; d < nd; d++) base[d] = ci[d] * blk[d];
            s = dck_mcore_split_range(&pv, p, nd, blk, inner, base, p->offset[nd], p->offset[nd] + len,
                            p->file_offset + run * len * es, es);
            if (s) break;
            run++;
            int d = nd - 1;
            for (; d >= 0; d--) {
                if (++ci[d] < p->offset[d] + p->shape[d]) break;
                ci[d] = p->offset[d];
            }
            if (d < 0) break;
        }
    }
    if (s) {
        free(pv.v);
        return s;
    }
    if (!pv.v && !(pv.v = malloc(sizeof *pv.v))) return dck_oom(NULL);
    if (t->cap_pieces) free(t->pieces); /* else in the arena */
    t->pieces = pv.v;
    t->npieces = pv.n;
    t->cap_pieces = pv.cap ? pv.cap : 1;
    t->info.ndim = nd;
    memcpy(t->info.shape, oshape, sizeof(uint64_t) * (size_t)nd);
    return DCK_OK;
}

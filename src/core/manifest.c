/* Manifests: the documents (YAML or JSON) that hold per-tensor digests,
 * the root digest, whole-file hashes and values of a checkpoint:
 *
 *   detcheck: 1
 *   tool: detcheck 0.1.0
 *   created: 2026-11-29T10:00:00Z
 *   root: <32 hex>
 *   tensors:
 *     - {name: ..., group: weights, dtype: BF16, shape: [4096, 4096], digest: <32 hex>}
 *   values:
 *     - {name: iteration, value: "1000"}
 *   files:
 *     - {path: model-00001-of-00002.safetensors, bytes: 123, xxh128: <32 hex>}
 *
 * This file is the model: building a manifest, its entries in name order,
 * its root digest, and the UTF-8 rule every name follows. Writing it:
 * manifest_write.c; reading it: manifest_parse.c; comparing two and the
 * layout state set aside: manifest_compare.c. */
#include "core/manifest_impl.h"

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Tensor names and file paths are copied into blocks (no allocation per
 * tensor; a manifest may list a million). */
typedef struct name_block {
    struct name_block *next;
    size_t used, cap;
    char data[];
} name_block;

static char *m_strdup(dck_manifest *m, const char *s) {
    size_t n = strlen(s) + 1;
    name_block *b = m->names;
    if (!b || b->cap - b->used < n) {
        size_t cap = b ? b->cap * 2 : 4096;
        if (cap > ((size_t)1 << 20)) cap = (size_t)1 << 20;
        if (cap < n) cap = n;
        name_block *nb = malloc(sizeof *nb + cap);
        if (!nb) return NULL;
        nb->next = b;
        nb->used = 0;
        nb->cap = cap;
        m->names = b = nb;
    }
    char *p = b->data + b->used;
    memcpy(p, s, n);
    b->used += n;
    return p;
}

dck_status dck_manifest_create(dck_manifest **out) {
    *out = calloc(1, sizeof **out);
    return *out ? DCK_OK : dck_oom(NULL);
}

void dck_manifest_free(dck_manifest *m) {
    if (!m) return;
    for (name_block *b = m->names, *nb; b; b = nb) {
        nb = b->next;
        free(b);
    }
    for (size_t i = 0; i < m->nv; i++) {
        free((char *)m->v[i].name);
        free((char *)m->v[i].value);
    }
    for (size_t i = 0; i < m->nmeta; i++) {
        free(m->meta[i].key);
        free(m->meta[i].value);
    }
    free(m->t);
    free(m->f);
    free(m->v);
    free(m->meta);
    free(m);
}

/* Arrays of many megabytes that are about to be filled: transparent huge
 * pages where the system hands them out on request (THP "madvise"), so
 * that a million tensors cost a few hundred page faults, not 100,000. The
 * 2 MiB-aligned part of the block only; nothing changes elsewhere. */
void dck_hugepage_hint(void *p, size_t n) {
#ifdef MADV_HUGEPAGE
    const uintptr_t huge = (uintptr_t)2 << 20;
    if (!p || n < 2 * huge) return;
    uintptr_t a = ((uintptr_t)p + huge - 1) & ~(huge - 1), e = ((uintptr_t)p + n) & ~(huge - 1);
    if (e > a) madvise((void *)a, e - a, MADV_HUGEPAGE);
#else
    (void)p;
    (void)n;
#endif
}

dck_status dck_manifest_reserve(dck_manifest *m, size_t ntensors, size_t nfiles) {
    if (ntensors > SIZE_MAX / sizeof *m->t || nfiles > SIZE_MAX / sizeof *m->f) return dck_oom(NULL);
    if (m->nt + ntensors > m->cap_t) {
        void *p = realloc(m->t, (m->nt + ntensors) * sizeof *m->t);
        if (!p) return dck_oom(NULL);
        m->t = p;
        m->cap_t = m->nt + ntensors;
        dck_hugepage_hint(m->t, m->cap_t * sizeof *m->t);
        dck_prefault(m->t + m->nt, ntensors * sizeof *m->t);
    }
    if (m->nf + nfiles > m->cap_f) {
        void *p = realloc(m->f, (m->nf + nfiles) * sizeof *m->f);
        if (!p) return dck_oom(NULL);
        m->f = p;
        m->cap_f = m->nf + nfiles;
    }
    return DCK_OK;
}

dck_status dck_manifest_add_tensor(dck_manifest *m, const dck_manifest_tensor *t) {
    if (!t->name) return dck_set_error(DCK_ERR_INVALID, "manifest: tensor entry without a name");
    if (t->ndim < 0 || t->ndim > DCK_MAX_DIMS || (unsigned)t->dtype >= DCK_DTYPE_COUNT ||
        (unsigned)t->group >= DCK_GROUP_COUNT)
        return dck_set_error(DCK_ERR_INVALID,
                             "manifest: tensor %s: invalid entry (dtype %d, %d dimensions, group %d)",
                             t->name, (int)t->dtype, t->ndim, (int)t->group);
    dck_status s = dck_grow((void **)&m->t, &m->cap_t, m->nt + 1, sizeof *m->t);
    if (s) return s;
    m->t[m->nt] = *t;
    if (!(m->t[m->nt].name = m_strdup(m, t->name))) return dck_oom(NULL);
    m->nt++;
    m->finalized = false;
    return DCK_OK;
}

dck_status dck_manifest_add_file(dck_manifest *m, const dck_manifest_file *f) {
    if (!f->path) return dck_set_error(DCK_ERR_INVALID, "manifest: file entry without a path");
    dck_status s = dck_grow((void **)&m->f, &m->cap_f, m->nf + 1, sizeof *m->f);
    if (s) return s;
    m->f[m->nf] = *f;
    if (!(m->f[m->nf].path = m_strdup(m, f->path))) return dck_oom(NULL);
    m->nf++;
    return DCK_OK;
}

dck_status dck_manifest_add_value(dck_manifest *m, const char *name, const char *value) {
    if (!name || !value)
        return dck_set_error(DCK_ERR_INVALID, "manifest: value %s without a %s",
                             name ? name : "(NULL)", name ? "value" : "name");
    return dck_value_push(&m->v, &m->nv, &m->cap_v, name, value);
}

dck_status dck_manifest_set_meta(dck_manifest *m, const char *key, const char *value) {
    if (!key || !value)
        return dck_set_error(DCK_ERR_INVALID, "manifest: metadata %s without a %s",
                             key ? key : "(NULL)", key ? "value" : "key");
    for (size_t i = 0; i < m->nmeta; i++)
        if (!strcmp(m->meta[i].key, key)) {
            char *v = dck_strdup(value);
            if (!v) return dck_oom(NULL);
            free(m->meta[i].value);
            m->meta[i].value = v;
            return DCK_OK;
        }
    dck_status s = dck_grow((void **)&m->meta, &m->cap_meta, m->nmeta + 1, sizeof *m->meta);
    if (s) return s;
    char *k = dck_strdup(key), *v = dck_strdup(value);
    if (!k || !v) {
        free(k);
        free(v);
        return dck_oom(NULL);
    }
    m->meta[m->nmeta++] = (meta_kv){k, v};
    return DCK_OK;
}

const char *dck_manifest_get_meta(const dck_manifest *m, const char *key) {
    for (size_t i = 0; i < m->nmeta; i++)
        if (!strcmp(m->meta[i].key, key)) return m->meta[i].value;
    return NULL;
}

size_t dck_manifest_tensor_count(const dck_manifest *m) { return m->nt; }
const dck_manifest_tensor *dck_manifest_tensor_at(const dck_manifest *m, size_t i) {
    return i < m->nt ? &m->t[i] : NULL;
}
size_t dck_manifest_file_count(const dck_manifest *m) { return m->nf; }
const dck_manifest_file *dck_manifest_file_at(const dck_manifest *m, size_t i) {
    return i < m->nf ? &m->f[i] : NULL;
}
size_t dck_manifest_value_count(const dck_manifest *m) { return m->nv; }
const dck_manifest_value *dck_manifest_value_at(const dck_manifest *m, size_t i) {
    return i < m->nv ? &m->v[i] : NULL;
}

const dck_manifest_tensor *dck_manifest_find_tensor(const dck_manifest *m, const char *name) {
    if (m->finalized) {
        size_t lo = 0, hi = m->nt;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            int c = dck_name_compare(m->t[mid].name, name);
            if (!c) return &m->t[mid];
            if (c < 0) lo = mid + 1;
            else hi = mid;
        }
        return NULL;
    }
    for (size_t i = 0; i < m->nt; i++)
        if (!strcmp(m->t[i].name, name)) return &m->t[i];
    return NULL;
}

static int cmp_mt(const void *a, const void *b) {
    return dck_name_compare(((const dck_manifest_tensor *)a)->name,
                            ((const dck_manifest_tensor *)b)->name);
}
static int cmp_mf(const void *a, const void *b) {
    return dck_name_compare(((const dck_manifest_file *)a)->path, ((const dck_manifest_file *)b)->path);
}
static int cmp_mv(const void *a, const void *b) {
    return dck_name_compare(((const dck_manifest_value *)a)->name,
                            ((const dck_manifest_value *)b)->name);
}

/* qsort, after a check whether the array is sorted already (the tensors of
 * a validated checkpoint, a manifest read back) */
static void sort_if_needed(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *)) {
    const char *p = base;
    for (size_t i = 1; i < n; i++)
        if (cmp(p + (i - 1) * size, p + i * size) > 0) {
            dck_qsort(base, n, size, cmp);
            return;
        }
}

/* Entries in strcmp order of their names, by a multikey quicksort (Bentley
 * and Sedgewick): names share long prefixes ("model.layers.N.mlp."), which
 * every strcmp of a comparison sort walks again, while this one partitions
 * on one byte at a time. Small parts are sorted by insertion, and a part
 * that recursion on unequal splits takes too deep by qsort_r, both from
 * byte d on (the bytes before d are equal there). */
typedef const dck_manifest_tensor *mt_ptr;

static int cmp_mt_from(const void *a, const void *b, void *ctx) {
    size_t d = *(const size_t *)ctx;
    return strcmp((*(const mt_ptr *)a)->name + d, (*(const mt_ptr *)b)->name + d);
}

static void mt_sort_from(mt_ptr *v, size_t n, size_t d, int budget) {
    while (n > 1) {
        if (n < 16) {
            for (size_t i = 1; i < n; i++) {
                mt_ptr x = v[i];
                size_t j = i;
                while (j && strcmp(v[j - 1]->name + d, x->name + d) > 0) {
                    v[j] = v[j - 1];
                    j--;
                }
                v[j] = x;
            }
            return;
        }
        if (budget <= 0) {
            qsort_r(v, n, sizeof *v, cmp_mt_from, &d);
            return;
        }
        unsigned char a = (unsigned char)v[0]->name[d], b = (unsigned char)v[n / 2]->name[d],
                      c = (unsigned char)v[n - 1]->name[d];
        unsigned char pv = a < b ? (b < c ? b : a < c ? c : a) : (a < c ? a : b < c ? c : b);
        /* [0, lt) below the pivot byte, [lt, i) equal to it, [gt, n) above */
        size_t lt = 0, i = 0, gt = n;
        while (i < gt) {
            unsigned char x = (unsigned char)v[i]->name[d];
            mt_ptr t = v[i];
            if (x < pv) {
                v[i++] = v[lt];
                v[lt++] = t;
            } else if (x > pv) {
                v[i] = v[--gt];
                v[gt] = t;
            } else {
                i++;
            }
        }
        if (!pv) { /* equal names (no two are), or the lower and upper parts */
            mt_sort_from(v, lt, d, budget - 1);
            mt_sort_from(v + gt, n - gt, d, budget - 1);
            return;
        }
        if (lt == 0 && gt == n) {
            /* one byte for all: the rest of their common prefix in one pass,
             * not one pass per byte ("model.layers." is 13) */
            const char *f = v[0]->name + d + 1;
            size_t l = strlen(f);
            for (size_t k = 1; k < n && l; k++) {
                const char *x = v[k]->name + d + 1;
                size_t j = 0;
                while (j < l && f[j] == x[j]) j++;
                l = j;
            }
            d += 1 + l;
            continue;
        }
        mt_sort_from(v, lt, d, budget - 1);
        mt_sort_from(v + gt, n - gt, d, budget - 1);
        v += lt;
        n = gt - lt;
        d++;
    }
}

/* The root digest (detcheck-digest(7), what dck_root_digest computes):
 * names in strcmp order, u32 length | name | canonical digest, XXH3-128.
 * Sorts pointers to the entries rather than copies of names and digests. */
static dck_status root_of(const dck_manifest *m, dck_digest *out) {
    const dck_manifest_tensor **v = malloc(sizeof *v * (m->nt ? m->nt : 1));
    if (!v) return dck_oom(NULL);
    for (size_t i = 0; i < m->nt; i++) v[i] = &m->t[i];
    /* model order is strcmp order when no names differ in a number's length */
    for (size_t i = 1; i < m->nt; i++)
        if (strcmp(v[i - 1]->name, v[i]->name) > 0) {
            mt_sort_from(v, m->nt, 0, 96);
            break;
        }
    XXH3_state_t st;
    XXH3_128bits_reset(&st);
    for (size_t i = 0; i < m->nt; i++) {
        uint32_t len = (uint32_t)strlen(v[i]->name);
        uint8_t lb[4] = {(uint8_t)len, (uint8_t)(len >> 8), (uint8_t)(len >> 16), (uint8_t)(len >> 24)};
        uint8_t c[16];
        dck_digest_canonical(v[i]->digest, c);
        XXH3_128bits_update(&st, lb, 4);
        XXH3_128bits_update(&st, v[i]->name, len);
        XXH3_128bits_update(&st, c, 16);
    }
    free(v);
    XXH128_hash_t h = XXH3_128bits_digest(&st);
    *out = (dck_digest){h.high64, h.low64};
    return DCK_OK;
}

dck_status dck_manifest_finalize(dck_manifest *m) {
    sort_if_needed(m->t, m->nt, sizeof *m->t, cmp_mt);
    sort_if_needed(m->f, m->nf, sizeof *m->f, cmp_mf);
    sort_if_needed(m->v, m->nv, sizeof *m->v, cmp_mv);
    for (size_t i = 1; i < m->nt; i++)
        if (!strcmp(m->t[i - 1].name, m->t[i].name))
            return dck_set_error(DCK_ERR_FORMAT, "duplicate tensor name %s", m->t[i].name);
    for (size_t i = 1; i < m->nf; i++)
        if (!strcmp(m->f[i - 1].path, m->f[i].path))
            return dck_set_error(DCK_ERR_FORMAT, "duplicate file path %s", m->f[i].path);
    for (size_t i = 1; i < m->nv; i++)
        if (!strcmp(m->v[i - 1].name, m->v[i].name))
            return dck_set_error(DCK_ERR_FORMAT, "duplicate value name %s", m->v[i].name);
    DCK_TRY(root_of(m, &m->root));
    m->finalized = true;
    return DCK_OK;
}

dck_digest dck_manifest_root(const dck_manifest *m) { return m->root; }

const char *dck_text_escape(const char *str, char *buf, size_t n) {
    const unsigned char *s = (const unsigned char *)str, *end = s + strlen(str);
    size_t k = 0;
    if (n < 8) { /* no room for one escape and the cut mark */
        if (n) buf[0] = 0;
        return buf;
    }
    while (s < end) {
        int w = *s >= 0x20 && *s < 0x7F && *s != '\\' && *s != '\'' ? 1 : *s >= 0x80 ? dck_utf8_width(s, end) : 0;
        size_t need = w ? (size_t)w : 4;
        if (k + need + 4 > n) { /* room for "..." and the NUL */
            memcpy(buf + k, "...", 3);
            k += 3;
            break;
        }
        if (w) {
            memcpy(buf + k, s, (size_t)w);
            s += w;
        } else {
            snprintf(buf + k, 5, "\\x%02x", *s++);
        }
        k += need;
    }
    buf[k] = 0;
    return buf;
}

dck_status dck_check_utf8(const char *where, const char *what, const char *s) {
    if (dck_utf8_valid(s, strlen(s))) return DCK_OK;
    char e[256];
    return dck_set_error(DCK_ERR_FORMAT, "%s: %s '%s' is not valid UTF-8", where, what,
                         dck_text_escape(s, e, sizeof e));
}

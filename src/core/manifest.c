/* Manifests: the YAML (libyaml) and JSON (jansson) documents that hold
 * per-tensor digests, the root digest, whole-file hashes and values; and
 * their comparison.
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
 */
#include "core/core.h"

#include <jansson.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>
#include <yaml.h>

#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <sys/stat.h>

#define MANIFEST_VERSION 1
/* Manifest sizes, by the memory reading one takes (measured per byte of
 * text, peak RSS): the layout detcheck writes is read directly (about 2.6x:
 * 1 GiB of text, under 3 GB); any other text goes through a jansson tree
 * (YAML about 11x, JSON about 7x), so it gets a quarter of that (256 MiB:
 * also under 3 GB; a JSON manifest of the 2^20 tensors a checkpoint may
 * hold is about 240 MB). */
#define MAX_MANIFEST_BYTES ((size_t)1 << 30)
#define MAX_TREE_MANIFEST_BYTES ((size_t)256 << 20)

typedef struct {
    char *key, *value;
} meta_kv;

struct dck_manifest {
    dck_manifest_tensor *t;
    size_t nt, cap_t;
    dck_manifest_file *f;
    size_t nf, cap_f;
    dck_manifest_value *v;
    size_t nv, cap_v;
    meta_kv *meta;
    size_t nmeta, cap_meta;
    dck_digest root;
    bool finalized;
    struct name_block *names; /* tensor names and file paths */
};

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

/* ------------------------------------------------------------------ YAML out */

static dck_status check_text(const dck_manifest *m);

typedef struct {
    yaml_emitter_t em;
    int ok;
} yout;

/* inited: what yaml_*_event_initialize returned. An event it refused (a
 * string that is not UTF-8, no memory) is never emitted: the emitter would
 * read it uninitialised and may loop forever. */
static void y_emit(yout *y, int inited, yaml_event_t *ev) {
    if (!inited) y->ok = 0;
    else if (!y->ok) yaml_event_delete(ev);
    else if (!yaml_emitter_emit(&y->em, ev)) y->ok = 0;
}

/* Plain style unless a YAML 1.1 resolver would read the text as something
 * other than a string (a number, a bool, null...). */
static int needs_quotes(const char *s) {
    if (!*s) return 1;
    int ndig = 0, ne = 0;
    const char *p = s;
    for (; *p; p++) {
        if (isdigit((unsigned char)*p)) ndig++;
        else if (*p == 'e' || *p == 'E') ne++;
        else if (*p != '.' && *p != '-' && *p != '+' && *p != '_') break; /* not a number */
    }
    if (!*p && ndig && ne <= 1) return 1;
    /* the words below are at most 5 bytes long */
    if (p - s > 5 || strnlen(p, 6) > (size_t)(5 - (p - s))) return 0;
    static const char *words[] = {"y", "n", "yes", "no", "true", "false", "on", "off", "null", "~"};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (!strcasecmp(s, words[i])) return 1;
    return 0;
}

static void y_scalar(yout *y, const char *s, int quote) {
    yaml_event_t ev;
    int k = yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)s, (int)strlen(s), 1, 1,
                                         quote || needs_quotes(s) ? YAML_DOUBLE_QUOTED_SCALAR_STYLE
                                                                  : YAML_ANY_SCALAR_STYLE);
    y_emit(y, k, &ev);
}

static void y_str(yout *y, const char *s) { y_scalar(y, s, 0); }

static void y_u64(yout *y, uint64_t v) {
    char b[32];
    snprintf(b, sizeof b, "%llu", (unsigned long long)v);
    yaml_event_t ev;
    int k = yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)b, (int)strlen(b), 1, 1,
                                         YAML_PLAIN_SCALAR_STYLE);
    y_emit(y, k, &ev);
}

static void y_map_start(yout *y, int flow) {
    yaml_event_t ev;
    int k = yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1,
                                                flow ? YAML_FLOW_MAPPING_STYLE : YAML_BLOCK_MAPPING_STYLE);
    y_emit(y, k, &ev);
}
static void y_map_end(yout *y) {
    yaml_event_t ev;
    int k = yaml_mapping_end_event_initialize(&ev);
    y_emit(y, k, &ev);
}
static void y_seq_start(yout *y, int flow) {
    yaml_event_t ev;
    int k = yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1,
                                                 flow ? YAML_FLOW_SEQUENCE_STYLE : YAML_BLOCK_SEQUENCE_STYLE);
    y_emit(y, k, &ev);
}
static void y_seq_end(yout *y) {
    yaml_event_t ev;
    int k = yaml_sequence_end_event_initialize(&ev);
    y_emit(y, k, &ev);
}

static int y_write_handler(void *data, unsigned char *buf, size_t size) {
    return fwrite(buf, 1, size, (FILE *)data) == size;
}

static dck_status write_yaml(const dck_manifest *m, FILE *out) {
    yout y;
    memset(&y, 0, sizeof y);
    y.ok = 1;
    if (!yaml_emitter_initialize(&y.em)) return dck_oom(NULL);
    yaml_emitter_set_output(&y.em, y_write_handler, out);
    yaml_emitter_set_unicode(&y.em, 1);
    yaml_emitter_set_width(&y.em, -1);
    yaml_event_t ev;
    y_emit(&y, yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING), &ev);
    y_emit(&y, yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1), &ev);
    y_map_start(&y, 0);
    y_str(&y, "detcheck");
    y_u64(&y, MANIFEST_VERSION);
    for (size_t i = 0; i < m->nmeta; i++) {
        y_str(&y, m->meta[i].key);
        y_str(&y, m->meta[i].value);
    }
    char hex[33];
    dck_digest_to_hex(m->root, hex);
    y_str(&y, "root");
    y_str(&y, hex);
    y_str(&y, "tensors");
    y_seq_start(&y, 0);
    for (size_t i = 0; i < m->nt; i++) {
        const dck_manifest_tensor *t = &m->t[i];
        y_map_start(&y, 1);
        y_str(&y, "name");
        y_str(&y, t->name);
        y_str(&y, "group");
        y_str(&y, dck_group_name(t->group));
        y_str(&y, "dtype");
        y_str(&y, dck_dtype_name(t->dtype));
        y_str(&y, "shape");
        y_seq_start(&y, 1);
        for (int d = 0; d < t->ndim; d++) y_u64(&y, t->shape[d]);
        y_seq_end(&y);
        y_str(&y, "digest");
        dck_digest_to_hex(t->digest, hex);
        y_str(&y, hex);
        y_map_end(&y);
    }
    y_seq_end(&y);
    if (m->nv) {
        y_str(&y, "values");
        y_seq_start(&y, 0);
        for (size_t i = 0; i < m->nv; i++) {
            y_map_start(&y, 1);
            y_str(&y, "name");
            y_str(&y, m->v[i].name);
            y_str(&y, "value");
            y_scalar(&y, m->v[i].value, 1);
            y_map_end(&y);
        }
        y_seq_end(&y);
    }
    y_str(&y, "files");
    y_seq_start(&y, 0);
    for (size_t i = 0; i < m->nf; i++) {
        y_map_start(&y, 1);
        y_str(&y, "path");
        y_str(&y, m->f[i].path);
        y_str(&y, "bytes");
        y_u64(&y, m->f[i].bytes);
        y_str(&y, "xxh128");
        dck_digest_to_hex(m->f[i].xxh128, hex);
        y_str(&y, hex);
        y_map_end(&y);
    }
    y_seq_end(&y);
    y_map_end(&y);
    y_emit(&y, yaml_document_end_event_initialize(&ev, 1), &ev);
    y_emit(&y, yaml_stream_end_event_initialize(&ev), &ev);
    int ok = y.ok && yaml_emitter_flush(&y.em);
    yaml_emitter_delete(&y.em);
    return ok ? DCK_OK : dck_set_error(DCK_ERR_IO, "cannot write manifest");
}

/* ------------------------------------------------------------------ JSON out */

/* jansson refuses a string that is not UTF-8 (json_string gives NULL and
 * json_object_set_new drops the entry): every call is checked, so that a
 * document is whole or not written at all. */
static void jset(json_t *o, const char *k, json_t *v, bool *ok) {
    if (!o) json_decref(v);
    if (!o || !v || json_object_set_new(o, k, v)) *ok = false;
}
static void jadd(json_t *a, json_t *v, bool *ok) {
    if (!a) json_decref(v);
    if (!a || !v || json_array_append_new(a, v)) *ok = false;
}

/* NULL when jansson refused something (no memory: the strings were checked) */
static json_t *to_json(const dck_manifest *m) {
    bool ok = true;
    json_t *r = json_object();
    char hex[33];
    jset(r, "detcheck", json_integer(MANIFEST_VERSION), &ok);
    for (size_t i = 0; i < m->nmeta; i++) jset(r, m->meta[i].key, json_string(m->meta[i].value), &ok);
    dck_digest_to_hex(m->root, hex);
    jset(r, "root", json_string(hex), &ok);
    json_t *ts = json_array();
    for (size_t i = 0; i < m->nt && ok; i++) {
        const dck_manifest_tensor *t = &m->t[i];
        json_t *o = json_object(), *sh = json_array();
        jset(o, "name", json_string(t->name), &ok);
        jset(o, "group", json_string(dck_group_name(t->group)), &ok);
        jset(o, "dtype", json_string(dck_dtype_name(t->dtype)), &ok);
        for (int d = 0; d < t->ndim; d++) jadd(sh, json_integer((json_int_t)t->shape[d]), &ok);
        jset(o, "shape", sh, &ok);
        dck_digest_to_hex(t->digest, hex);
        jset(o, "digest", json_string(hex), &ok);
        jadd(ts, o, &ok);
    }
    jset(r, "tensors", ts, &ok);
    if (m->nv) {
        json_t *vs = json_array();
        for (size_t i = 0; i < m->nv && ok; i++) {
            json_t *o = json_object();
            jset(o, "name", json_string(m->v[i].name), &ok);
            jset(o, "value", json_string(m->v[i].value), &ok);
            jadd(vs, o, &ok);
        }
        jset(r, "values", vs, &ok);
    }
    json_t *fs = json_array();
    for (size_t i = 0; i < m->nf && ok; i++) {
        json_t *o = json_object();
        jset(o, "path", json_string(m->f[i].path), &ok);
        jset(o, "bytes", json_integer((json_int_t)m->f[i].bytes), &ok);
        dck_digest_to_hex(m->f[i].xxh128, hex);
        jset(o, "xxh128", json_string(hex), &ok);
        jadd(fs, o, &ok);
    }
    jset(r, "files", fs, &ok);
    if (!ok) {
        json_decref(r);
        return NULL;
    }
    return r;
}

static int json_fwrite(const char *buf, size_t size, void *data) {
    return fwrite(buf, 1, size, (FILE *)data) == size ? 0 : -1;
}

/* Through libyaml and jansson: what every manifest was written with before
 * the direct writers, which must match it byte for byte. */
dck_status dck_manifest_write_reference(const dck_manifest *m, dck_format fmt, FILE *out) {
    DCK_TRY(check_text(m));
    if (fmt == DCK_FORMAT_YAML) return write_yaml(m, out);
    json_t *j = to_json(m);
    if (!j) return dck_oom(NULL);
    int r = json_dump_callback(j, json_fwrite, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(j);
    if (r != 0 || fputc('\n', out) == EOF) return dck_set_error(DCK_ERR_IO, "cannot write manifest");
    return DCK_OK;
}

/* ------------------------------------------------------------------ direct output
 * The manifest text written directly into one buffer, byte for byte what
 * the libyaml emitter (write_yaml) and jansson's dump (to_json) write:
 * tests/check_manifest.c and tests/fuzz/fuzz_manifest.c compare the two
 * on many names. A document holding a string these writers do not cover
 * (YAML: a line break in a scalar or a key over 128 bytes, which libyaml
 * lays out over several lines; either format: bytes that are not UTF-8, or
 * a metadata key that is also a top-level key) goes through the libraries
 * instead. */

typedef struct {
    char *p;
    size_t n, cap;
    bool oom;
    /* a stream the text goes to as the buffer fills (the buffer stays at
     * OB_SINK_BYTES: a 100k-tensor manifest is 15 MB of text, fresh pages
     * the kernel would zero first); NULL: the whole text stays in p */
    FILE *sink;
    bool sink_failed;
} obuf;

#define OB_SINK_BYTES ((size_t)1 << 20)

static void ob_flush(obuf *b) {
    if (b->sink && b->n && !b->sink_failed && fwrite(b->p, 1, b->n, b->sink) != b->n)
        b->sink_failed = true;
    b->n = 0;
}

static void ob_reserve(obuf *b, size_t more) {
    if (b->oom || b->cap - b->n >= more) return;
    if (b->sink && b->n) {
        ob_flush(b);
        if (b->cap >= more) return;
    }
    size_t nc = b->cap ? b->cap : 4096;
    while (nc - b->n < more) {
        if (nc > SIZE_MAX / 2) {
            b->oom = true;
            return;
        }
        nc *= 2;
    }
    char *np = realloc(b->p, nc);
    if (!np) {
        b->oom = true;
        return;
    }
    b->p = np;
    b->cap = nc;
    dck_hugepage_hint(np, nc);
}

static void ob_put(obuf *b, const void *s, size_t n) {
    ob_reserve(b, n);
    if (b->oom) return;
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

static void ob_str(obuf *b, const char *s) { ob_put(b, s, strlen(s)); }

static void ob_c(obuf *b, char c) {
    ob_reserve(b, 1);
    if (!b->oom) b->p[b->n++] = c;
}

static void ob_u64(obuf *b, uint64_t v) {
    char t[24];
    int k = 24;
    do t[--k] = (char)('0' + v % 10);
    while (v /= 10);
    ob_put(b, t + k, (size_t)(24 - k));
}

/* "%lld" of the value as jansson's json_int_t holds it */
static void ob_i64(obuf *b, uint64_t u) {
    if ((int64_t)u < 0) {
        ob_c(b, '-');
        u = 0 - u;
    }
    ob_u64(b, u);
}

/* dck_digest_to_hex: high64 then low64, 16 lowercase digits each */
static void hex32(dck_digest d, char out[33]) {
    static const char hx[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        out[15 - i] = hx[(d.high64 >> (4 * i)) & 15];
        out[31 - i] = hx[(d.low64 >> (4 * i)) & 15];
    }
    out[32] = 0;
}

static void ob_hex(obuf *b, dck_digest d) {
    char hex[33];
    hex32(d, hex);
    ob_put(b, hex, 32);
}

static int utf8_width(const unsigned char *s, const unsigned char *end) { return dck_utf8_width(s, end); }

bool dck_utf8_valid(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str, *end = s + n;
    while (s < end) {
        if (*s < 0x80) {
            s++;
            continue;
        }
        int w = utf8_width(s, end);
        if (!w) return false;
        s += w;
    }
    return true;
}

const char *dck_text_escape(const char *str, char *buf, size_t n) {
    const unsigned char *s = (const unsigned char *)str, *end = s + strlen(str);
    size_t k = 0;
    if (n < 8) { /* no room for one escape and the cut mark */
        if (n) buf[0] = 0;
        return buf;
    }
    while (s < end) {
        int w = *s >= 0x20 && *s < 0x7F && *s != '\\' && *s != '\'' ? 1 : *s >= 0x80 ? utf8_width(s, end) : 0;
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

/* libyaml's IS_BREAK: CR, LF, NEL, LS, PS. */
static bool y_is_break(const unsigned char *s) {
    return s[0] == '\r' || s[0] == '\n' || (s[0] == 0xC2 && s[1] == 0x85) ||
           (s[0] == 0xE2 && s[1] == 0x80 && (s[2] == 0xA8 || s[2] == 0xA9));
}

/* How a string may be written: bit 0 valid UTF-8, bit 1 no YAML line break. */
enum { STR_UTF8 = 1, STR_NOBREAK = 2 };
static unsigned str_class(const char *str) {
    const unsigned char *s = (const unsigned char *)str, *end = s + strlen(str);
    unsigned r = STR_UTF8 | STR_NOBREAK;
    while (s < end) {
        if (*s >= 0x20 && *s < 0x80) {
            s++;
            continue;
        }
        int w = utf8_width(s, end);
        if (!w) return 0; /* libyaml and jansson refuse it: leave it to them */
        if (y_is_break(s)) r &= ~(unsigned)STR_NOBREAK;
        s += w;
    }
    return r;
}

/* libyaml's IS_PRINTABLE (0.2.5) on valid UTF-8. */
static bool y_printable(const unsigned char *s) {
    unsigned c = s[0];
    return c == 0x0A || (c >= 0x20 && c <= 0x7E) || (c == 0xC2 && s[1] >= 0xA0) || (c > 0xC2 && c < 0xED) ||
           (c == 0xED && s[1] < 0xA0) || c == 0xEE ||
           (c == 0xEF && !(s[1] == 0xBB && s[2] == 0xBF) && !(s[1] == 0xBF && (s[2] == 0xBE || s[2] == 0xBF)));
}

static bool y_blankz(const unsigned char *s) { return *s == ' ' || *s == '\t' || *s == 0 || y_is_break(s); }

static int y_width(unsigned c) {
    return (c & 0x80) == 0 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
}

enum { Y_FLOW_PLAIN = 1, Y_BLOCK_PLAIN = 2, Y_SINGLE = 4 };

/* yaml_emitter_analyze_scalar for a non-empty scalar without line breaks
 * (valid UTF-8, NUL-terminated): the styles it allows. */
static unsigned y_analyze(const unsigned char *s, size_t len) {
    bool flow_ind = false, block_ind = false, special = false, lead_space = false, trail_space = false;
    if ((s[0] == '-' && s[1] == '-' && s[2] == '-') || (s[0] == '.' && s[1] == '.' && s[2] == '.'))
        flow_ind = block_ind = true;
    bool preceded = true, followed = y_blankz(s + y_width(s[0]));
    for (size_t i = 0; i < len;) {
        unsigned c = s[i];
        int w = y_width(c);
        if (i == 0) {
            if (strchr("#,[]{}&*!|>'\"%@`", (int)c) && c) flow_ind = block_ind = true;
            if (c == '?' || c == ':') {
                flow_ind = true;
                if (followed) block_ind = true;
            }
            if (c == '-' && followed) flow_ind = block_ind = true;
        } else {
            if (c == ',' || c == '?' || c == '[' || c == ']' || c == '{' || c == '}') flow_ind = true;
            if (c == ':') {
                flow_ind = true;
                if (followed) block_ind = true;
            }
            if (c == '#' && preceded) flow_ind = block_ind = true;
        }
        if (!y_printable(s + i)) special = true;
        if (c == ' ') {
            if (i == 0) lead_space = true;
            if (i + (size_t)w == len) trail_space = true;
        }
        preceded = y_blankz(s + i);
        i += (size_t)w;
        if (i < len) followed = y_blankz(s + i + y_width(s[i]));
    }
    unsigned r = Y_FLOW_PLAIN | Y_BLOCK_PLAIN | Y_SINGLE;
    if (lead_space || trail_space) r &= ~(unsigned)(Y_FLOW_PLAIN | Y_BLOCK_PLAIN);
    if (special) r = 0;
    if (flow_ind) r &= ~(unsigned)Y_FLOW_PLAIN;
    if (block_ind) r &= ~(unsigned)Y_BLOCK_PLAIN;
    return r;
}

static void y_double(obuf *b, const unsigned char *s, size_t len) {
    ob_c(b, '"');
    for (size_t i = 0; i < len;) {
        const unsigned char *c = s + i;
        int w = y_width(*c);
        bool bom = c[0] == 0xEF && c[1] == 0xBB && c[2] == 0xBF;
        if (y_printable(c) && !bom && !y_is_break(c) && *c != '"' && *c != '\\') {
            ob_put(b, c, (size_t)w);
            i += (size_t)w;
            continue;
        }
        uint32_t v = w == 1 ? c[0] : w == 2 ? c[0] & 0x1Fu : w == 3 ? c[0] & 0x0Fu : c[0] & 0x07u;
        for (int k = 1; k < w; k++) v = (v << 6) + (c[k] & 0x3Fu);
        i += (size_t)w;
        ob_c(b, '\\');
        const char *esc = NULL;
        switch (v) {
        case 0x00: esc = "0"; break;
        case 0x07: esc = "a"; break;
        case 0x08: esc = "b"; break;
        case 0x09: esc = "t"; break;
        case 0x0A: esc = "n"; break;
        case 0x0B: esc = "v"; break;
        case 0x0C: esc = "f"; break;
        case 0x0D: esc = "r"; break;
        case 0x1B: esc = "e"; break;
        case 0x22: esc = "\""; break;
        case 0x5C: esc = "\\"; break;
        case 0x85: esc = "N"; break;
        case 0xA0: esc = "_"; break;
        case 0x2028: esc = "L"; break;
        case 0x2029: esc = "P"; break;
        }
        if (esc) {
            ob_str(b, esc);
            continue;
        }
        int digits = v <= 0xFF ? 2 : v <= 0xFFFF ? 4 : 8;
        ob_c(b, digits == 2 ? 'x' : digits == 4 ? 'u' : 'U');
        for (int k = (digits - 1) * 4; k >= 0; k -= 4) ob_c(b, "0123456789ABCDEF"[(v >> k) & 0xF]);
    }
    ob_c(b, '"');
}

/* Bytes that never make a YAML indicator in a scalar's middle and are
 * printable: [A-Za-z0-9._/-] */
static const unsigned char y_safe[256] = {
    ['-'] = 1, ['.'] = 1, ['/'] = 1, ['_'] = 1,
    ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1, ['8'] = 1, ['9'] = 1,
    ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1, ['G'] = 1, ['H'] = 1, ['I'] = 1,
    ['J'] = 1, ['K'] = 1, ['L'] = 1, ['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1, ['Q'] = 1, ['R'] = 1,
    ['S'] = 1, ['T'] = 1, ['U'] = 1, ['V'] = 1, ['W'] = 1, ['X'] = 1, ['Y'] = 1, ['Z'] = 1,
    ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1, ['h'] = 1, ['i'] = 1,
    ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1, ['o'] = 1, ['p'] = 1, ['q'] = 1, ['r'] = 1,
    ['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1, ['w'] = 1, ['x'] = 1, ['y'] = 1, ['z'] = 1,
};

/* Most names are letters, digits and . _ / - only: plain in both contexts
 * (y_analyze allows it), unless they start with "---" or "..." or are "-". */
static bool y_all_safe(const unsigned char *s, size_t len) {
    size_t i = 0;
    while (i < len && y_safe[s[i]]) i++;
    return i == len && len && !(s[0] == '-' && (len == 1 || (s[1] == '-' && s[2] == '-'))) &&
           !(s[0] == '.' && s[1] == '.' && s[2] == '.');
}

/* A scalar as y_scalar() emits it, after the ' ' or nothing that precedes
 * it. flow: inside a flow collection. */
static void y_out(obuf *b, const char *str, bool quote, bool flow) {
    const unsigned char *s = (const unsigned char *)str;
    size_t len = strlen(str);
    if (quote || needs_quotes(str)) {
        y_double(b, s, len);
        return;
    }
    if (y_all_safe(s, len)) {
        ob_put(b, s, len);
        return;
    }
    unsigned a = y_analyze(s, len);
    if (a & (flow ? Y_FLOW_PLAIN : Y_BLOCK_PLAIN)) {
        ob_put(b, s, len);
    } else if (a & Y_SINGLE) {
        ob_c(b, '\'');
        for (size_t i = 0; i < len; i++) {
            if (s[i] == '\'') ob_c(b, '\'');
            ob_c(b, (char)s[i]);
        }
        ob_c(b, '\'');
    } else {
        y_double(b, s, len);
    }
}

static bool reserved_key(const char *k) {
    return !strcmp(k, "detcheck") || !strcmp(k, "root") || !strcmp(k, "tensors") || !strcmp(k, "values") ||
           !strcmp(k, "files");
}

/* Every string of the document is UTF-8 (the rule of dck_check_utf8; the
 * readers enforce it, this is the writers' own check): libyaml would loop,
 * jansson would drop the entry. */
static dck_status check_text(const dck_manifest *m) {
    for (size_t i = 0; i < m->nmeta; i++) {
        DCK_TRY(dck_check_utf8("manifest", "metadata key", m->meta[i].key));
        DCK_TRY(dck_check_utf8("manifest", "metadata value", m->meta[i].value));
    }
    for (size_t i = 0; i < m->nt; i++) DCK_TRY(dck_check_utf8("manifest", "tensor name", m->t[i].name));
    for (size_t i = 0; i < m->nv; i++) {
        DCK_TRY(dck_check_utf8("manifest", "value name", m->v[i].name));
        DCK_TRY(dck_check_utf8("manifest", "value text", m->v[i].value));
    }
    for (size_t i = 0; i < m->nf; i++) DCK_TRY(dck_check_utf8("manifest", "file path", m->f[i].path));
    return DCK_OK;
}

/* Can the direct writers produce this document? Sets *yaml and *json. */
static void direct_ok(const dck_manifest *m, bool *yaml, bool *json) {
    unsigned all = STR_UTF8 | STR_NOBREAK;
    bool long_key = false, reserved = false;
    for (size_t i = 0; i < m->nmeta; i++) {
        all &= str_class(m->meta[i].key) & str_class(m->meta[i].value);
        if (strlen(m->meta[i].key) > 128) long_key = true; /* not a simple key for libyaml */
        if (reserved_key(m->meta[i].key)) reserved = true;
    }
    for (size_t i = 0; i < m->nt && all; i++) all &= str_class(m->t[i].name);
    for (size_t i = 0; i < m->nv && all; i++) all &= str_class(m->v[i].name) & str_class(m->v[i].value);
    for (size_t i = 0; i < m->nf && all; i++) all &= str_class(m->f[i].path);
    *json = (all & STR_UTF8) && !reserved;
    *yaml = *json && (all & STR_NOBREAK) && !long_key;
}

/* y_out of a constant word (group and dtype names), once per document */
typedef struct {
    char text[32];
    size_t len;
} y_word;

static void y_word_of(y_word *w, const char *s) {
    obuf t = {0};
    y_out(&t, s, false, true);
    w->len = 0;
    if (!t.oom && t.n < sizeof w->text) {
        memcpy(w->text, t.p, t.n);
        w->len = t.n;
    }
    free(t.p);
}

static void y_put_word(obuf *b, const y_word *w, const char *s) {
    if (w->len) ob_put(b, w->text, w->len);
    else y_out(b, s, false, true);
}

static void yaml_direct(const dck_manifest *m, obuf *b) {
    y_word groups[DCK_GROUP_COUNT], dtypes[DCK_DTYPE_COUNT];
    for (int i = 0; i < DCK_GROUP_COUNT; i++) y_word_of(&groups[i], dck_group_name((dck_group)i));
    for (int i = 0; i < DCK_DTYPE_COUNT; i++) y_word_of(&dtypes[i], dck_dtype_name((dck_dtype)i));
    ob_str(b, "detcheck: 1\n");
    for (size_t i = 0; i < m->nmeta; i++) {
        y_out(b, m->meta[i].key, false, false);
        ob_put(b, ": ", 2);
        y_out(b, m->meta[i].value, false, false);
        ob_c(b, '\n');
    }
    char hex[33];
    dck_digest_to_hex(m->root, hex);
    ob_str(b, "root: ");
    y_out(b, hex, false, false);
    ob_str(b, m->nt ? "\ntensors:\n" : "\ntensors: []\n");
    for (size_t i = 0; i < m->nt; i++) {
        const dck_manifest_tensor *t = &m->t[i];
        ob_str(b, "- {name: ");
        y_out(b, t->name, false, true);
        ob_str(b, ", group: ");
        y_put_word(b, &groups[t->group], dck_group_name(t->group));
        ob_str(b, ", dtype: ");
        y_put_word(b, &dtypes[t->dtype], dck_dtype_name(t->dtype));
        ob_str(b, ", shape: [");
        for (int d = 0; d < t->ndim; d++) {
            if (d) ob_put(b, ", ", 2);
            ob_u64(b, t->shape[d]);
        }
        ob_str(b, "], digest: ");
        hex32(t->digest, hex);
        y_out(b, hex, false, true);
        ob_str(b, "}\n");
    }
    if (m->nv) {
        ob_str(b, "values:\n");
        for (size_t i = 0; i < m->nv; i++) {
            ob_str(b, "- {name: ");
            y_out(b, m->v[i].name, false, true);
            ob_str(b, ", value: ");
            y_out(b, m->v[i].value, true, true);
            ob_str(b, "}\n");
        }
    }
    ob_str(b, m->nf ? "files:\n" : "files: []\n");
    for (size_t i = 0; i < m->nf; i++) {
        ob_str(b, "- {path: ");
        y_out(b, m->f[i].path, false, true);
        ob_str(b, ", bytes: ");
        ob_u64(b, m->f[i].bytes);
        ob_str(b, ", xxh128: ");
        hex32(m->f[i].xxh128, hex);
        y_out(b, hex, false, true);
        ob_str(b, "}\n");
    }
}

/* jansson's dump_string without flags */
static void j_str(obuf *b, const char *str) {
    const unsigned char *s = (const unsigned char *)str;
    ob_c(b, '"');
    size_t run = 0;
    for (;; s++) {
        unsigned c = *s;
        if (c >= 0x20 && c != '"' && c != '\\') {
            run++;
            continue;
        }
        ob_put(b, s - run, run);
        run = 0;
        if (!c) break;
        switch (c) {
        case '"': ob_put(b, "\\\"", 2); break;
        case '\\': ob_put(b, "\\\\", 2); break;
        case '\b': ob_put(b, "\\b", 2); break;
        case '\f': ob_put(b, "\\f", 2); break;
        case '\n': ob_put(b, "\\n", 2); break;
        case '\r': ob_put(b, "\\r", 2); break;
        case '\t': ob_put(b, "\\t", 2); break;
        default: {
            char e[8];
            snprintf(e, sizeof e, "\\u%04X", c);
            ob_put(b, e, 6);
        }
        }
    }
    ob_c(b, '"');
}

static void j_key(obuf *b, int depth, const char *k) {
    ob_c(b, '\n');
    for (int i = 0; i < depth; i++) ob_put(b, "  ", 2);
    j_str(b, k);
    ob_put(b, ": ", 2);
}

static void j_hex(obuf *b, dck_digest d) {
    ob_c(b, '"');
    ob_hex(b, d);
    ob_c(b, '"');
}

/* json_dump_callback(JSON_INDENT(2) | JSON_PRESERVE_ORDER) of to_json(), and the newline */
static void json_direct(const dck_manifest *m, obuf *b) {
    ob_str(b, "{\n  \"detcheck\": 1");
    for (size_t i = 0; i < m->nmeta; i++) {
        ob_c(b, ',');
        j_key(b, 1, m->meta[i].key);
        j_str(b, m->meta[i].value);
    }
    ob_str(b, ",\n  \"root\": ");
    j_hex(b, m->root);
    ob_str(b, ",\n  \"tensors\": [");
    for (size_t i = 0; i < m->nt; i++) {
        const dck_manifest_tensor *t = &m->t[i];
        ob_str(b, i ? ",\n    {\n      \"name\": " : "\n    {\n      \"name\": ");
        j_str(b, t->name);
        ob_str(b, ",\n      \"group\": ");
        j_str(b, dck_group_name(t->group));
        ob_str(b, ",\n      \"dtype\": ");
        j_str(b, dck_dtype_name(t->dtype));
        ob_str(b, ",\n      \"shape\": [");
        for (int d = 0; d < t->ndim; d++) {
            ob_str(b, d ? ",\n        " : "\n        ");
            ob_i64(b, t->shape[d]);
        }
        ob_str(b, t->ndim ? "\n      ],\n      \"digest\": " : "],\n      \"digest\": ");
        j_hex(b, t->digest);
        ob_str(b, "\n    }");
    }
    ob_str(b, m->nt ? "\n  ]" : "]");
    if (m->nv) {
        ob_str(b, ",\n  \"values\": [");
        for (size_t i = 0; i < m->nv; i++) {
            ob_str(b, i ? ",\n    {\n      \"name\": " : "\n    {\n      \"name\": ");
            j_str(b, m->v[i].name);
            ob_str(b, ",\n      \"value\": ");
            j_str(b, m->v[i].value);
            ob_str(b, "\n    }");
        }
        ob_str(b, "\n  ]");
    }
    ob_str(b, ",\n  \"files\": [");
    for (size_t i = 0; i < m->nf; i++) {
        ob_str(b, i ? ",\n    {\n      \"path\": " : "\n    {\n      \"path\": ");
        j_str(b, m->f[i].path);
        ob_str(b, ",\n      \"bytes\": ");
        ob_i64(b, m->f[i].bytes);
        ob_str(b, ",\n      \"xxh128\": ");
        j_hex(b, m->f[i].xxh128);
        ob_str(b, "\n    }");
    }
    ob_str(b, m->nf ? "\n  ]\n}\n" : "]\n}\n");
}

/* The document in b (*direct true), or *direct false when the libraries
 * must write it; an error for a string that is not UTF-8. */
static dck_status write_direct(const dck_manifest *m, dck_format fmt, obuf *b, bool *direct) {
    bool y, j;
    *direct = false;
    DCK_TRY(check_text(m));
    direct_ok(m, &y, &j);
    if (!(fmt == DCK_FORMAT_YAML ? y : j)) return DCK_OK;
    *direct = true;
    size_t want = 256 + m->nt * 160 + m->nf * 120;
    ob_reserve(b, b->sink && want > OB_SINK_BYTES ? OB_SINK_BYTES : want);
    if (fmt == DCK_FORMAT_YAML) yaml_direct(m, b);
    else json_direct(m, b);
    return DCK_OK;
}

dck_status dck_manifest_write(const dck_manifest *m, dck_format fmt, FILE *out) {
    obuf b = {0};
    b.sink = out;
    bool direct;
    DCK_TRY(write_direct(m, fmt, &b, &direct));
    if (!direct) return dck_manifest_write_reference(m, fmt, out);
    dck_status s = DCK_OK;
    if (!b.oom) ob_flush(&b);
    if (b.oom) s = dck_oom(NULL);
    else if (b.sink_failed) s = dck_set_error(DCK_ERR_IO, "cannot write manifest");
    free(b.p);
    return s;
}

bool dck_manifest_is_file(const char *path) {
    /* text in its first bytes (every checkpoint format is binary: none is
     * parsed whole to learn that it is no manifest), then a whole load;
     * dck_manifest_sniff is the formats layer's, above this one */
    unsigned char head[64];
    int fd = -1;
    if (dck_open_regular(path, &fd, NULL)) {
        dck_clear_error();
        return false;
    }
    ssize_t n = pread(fd, head, sizeof head, 0);
    close(fd);
    for (ssize_t i = 0; i < n; i++)
        if (head[i] < 0x20 && head[i] != '\n' && head[i] != '\r' && head[i] != '\t') return false;
    dck_manifest *old = NULL;
    bool yes = n > 0 && dck_manifest_load(path, &old) == DCK_OK;
    dck_manifest_free(old);
    dck_clear_error();
    return yes;
}

dck_status dck_manifest_save(const dck_manifest *m, dck_format fmt, const char *path) {
    /* every caller (hash -o, the Python package's Manifest.save) gets the
     * rule of every output here: never a link, a FIFO, a read-only file, or
     * a file that is not a manifest (a checkpoint, a trajectory, notes) */
    DCK_TRY(dck_output_check(NULL, path, "manifest", dck_manifest_is_file, NULL, 0));
    obuf b = {0};
    bool direct;
    dck_status s = write_direct(m, fmt, &b, &direct);
    if (s) return s;
    if (direct) {
        s = b.oom ? dck_oom(NULL) : dck_output_write(NULL, path, "manifest", dck_manifest_is_file, NULL, 0, b.p, b.n);
        free(b.p);
        return s;
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    if (!mem) return dck_oom(NULL);
    s = dck_manifest_write_reference(m, fmt, mem);
    fclose(mem);
    if (!s) s = dck_output_write(NULL, path, "manifest", dck_manifest_is_file, NULL, 0, buf, len);
    free(buf);
    return s;
}

/* ------------------------------------------------------------------ parsing
 * Both formats are read into a jansson tree (YAML scalars become strings),
 * then one validator builds the manifest. */

/* YAML read event by event into a jansson tree (scalars become strings),
 * at most DCK_MANIFEST_MAX_DEPTH collections deep: libyaml's scanner keeps
 * a stack as deep as the document and walks it for every token, so a
 * 200 KB document of nested collections took a minute through
 * yaml_parser_load; here it stops at the first collection too deep, having
 * read a few bytes. No manifest uses aliases: one is refused (an alias
 * repeats a tree, which "billion laughs" documents multiply), as are
 * duplicate keys and keys that are not scalars. */
typedef struct {
    json_t *node;
    char *key; /* in a mapping: the key read, waiting for its value */
} y_frame;

enum { YL_OK, YL_NOT_MANIFEST, YL_DEEP, YL_SYNTAX, YL_NOMEM };

/* Hangs v (owned) under the innermost collection, or makes it the root. */
static int yl_attach(y_frame *st, int depth, json_t **root, json_t *v) {
    if (!v) return YL_NOMEM;
    if (!depth) {
        *root = v;
        return YL_OK;
    }
    y_frame *f = &st[depth - 1];
    if (json_is_array(f->node)) return json_array_append_new(f->node, v) ? YL_NOMEM : YL_OK;
    if (!f->key) { /* a key: scalars only */
        const char *k = json_string_value(v);
        f->key = k ? strdup(k) : NULL;
        json_decref(v);
        return !k ? YL_NOT_MANIFEST : f->key ? YL_OK : YL_NOMEM;
    }
    int r = json_object_get(f->node, f->key) ? YL_NOT_MANIFEST : YL_OK;
    if (r == YL_OK && json_object_set_new(f->node, f->key, v)) r = YL_NOMEM;
    else if (r != YL_OK) json_decref(v);
    free(f->key);
    f->key = NULL;
    return r;
}

static int yaml_events_to_json(yaml_parser_t *p, json_t **out) {
    y_frame st[DCK_MANIFEST_MAX_DEPTH];
    int depth = 0, r = YL_OK;
    json_t *root = NULL;
    bool done = false;
    while (!done && r == YL_OK) {
        yaml_event_t ev;
        if (!yaml_parser_parse(p, &ev)) {
            r = p->error == YAML_MEMORY_ERROR ? YL_NOMEM : YL_SYNTAX;
            break;
        }
        switch (ev.type) {
        case YAML_SCALAR_EVENT: {
            json_t *v = json_stringn((const char *)ev.data.scalar.value, ev.data.scalar.length);
            /* libyaml checks its input is UTF-8: a refusal is memory */
            r = yl_attach(st, depth, &root, v);
            break;
        }
        case YAML_SEQUENCE_START_EVENT:
        case YAML_MAPPING_START_EVENT:
            if (depth == DCK_MANIFEST_MAX_DEPTH) {
                r = YL_DEEP;
                break;
            }
            st[depth].node = ev.type == YAML_SEQUENCE_START_EVENT ? json_array() : json_object();
            st[depth].key = NULL;
            if (!st[depth].node) r = YL_NOMEM;
            else depth++;
            break;
        case YAML_SEQUENCE_END_EVENT:
        case YAML_MAPPING_END_EVENT:
            depth--;
            free(st[depth].key); /* none after a complete mapping */
            r = yl_attach(st, depth, &root, st[depth].node);
            break;
        case YAML_ALIAS_EVENT:
            r = YL_NOT_MANIFEST;
            break;
        case YAML_DOCUMENT_END_EVENT: /* the first document, as yaml_parser_load */
        case YAML_STREAM_END_EVENT:
            done = true;
            break;
        default:
            break;
        }
        yaml_event_delete(&ev);
    }
    while (depth > 0) {
        depth--;
        free(st[depth].key);
        json_decref(st[depth].node);
    }
    if (r == YL_OK && !root) r = YL_NOT_MANIFEST;
    if (r != YL_OK) json_decref(root);
    else *out = root;
    return r;
}

/* Integer from a JSON integer or a YAML scalar string of decimal digits. */
static int get_u64(json_t *v, uint64_t *out) {
    if (json_is_integer(v)) {
        if (json_integer_value(v) < 0) return 0;
        *out = (uint64_t)json_integer_value(v);
        return 1;
    }
    const char *s = json_string_value(v);
    if (!s || !*s || strlen(s) > 20) return 0;
    for (const char *p = s; *p; p++)
        if (!isdigit((unsigned char)*p)) return 0;
    errno = 0;
    unsigned long long x = strtoull(s, NULL, 10);
    if (errno) return 0;
    *out = x;
    return 1;
}

static int safe_relpath(const char *p) {
    if (!p || !*p || p[0] == '/' || p[0] == '\\') return 0;
    /* no ".." component */
    const char *s = p;
    while (*s) {
        size_t n = strcspn(s, "/\\");
        if (n == 2 && s[0] == '.' && s[1] == '.') return 0;
        s += n;
        if (*s) s++;
    }
    return 1;
}

static dck_status from_json(json_t *r, const char *label, dck_manifest **out) {
    dck_manifest *m;
    dck_status s = dck_manifest_create(&m);
    if (s) return s;
    uint64_t ver;
    json_t *tensors, *files, *values;
    const char *key;
    json_t *val;
    dck_digest root;
    if (!json_is_object(r)) {
        s = dck_set_error(DCK_ERR_FORMAT, "%s: not a detcheck manifest (top level is not a mapping)", label);
        goto fail;
    }
    if (!get_u64(json_object_get(r, "detcheck"), &ver)) {
        s = dck_set_error(DCK_ERR_FORMAT, "%s: not a detcheck manifest (no 'detcheck: VERSION' key)", label);
        goto fail;
    }
    if (ver != MANIFEST_VERSION) {
        s = dck_set_error(DCK_ERR_UNSUPPORTED, "%s: unknown manifest version %llu (this detcheck reads %d)",
                          label, (unsigned long long)ver, MANIFEST_VERSION);
        goto fail;
    }
    if (dck_digest_from_hex(json_string_value(json_object_get(r, "root")), &root)) {
        s = dck_set_error(DCK_ERR_FORMAT, "%s: root is not 32 lowercase hex digits", label);
        goto fail;
    }
    json_object_foreach(r, key, val) {
        if (!strcmp(key, "detcheck") || !strcmp(key, "root") || !strcmp(key, "tensors") ||
            !strcmp(key, "files") || !strcmp(key, "values"))
            continue;
        if (json_is_string(val) && (s = dck_manifest_set_meta(m, key, json_string_value(val)))) goto fail;
    }
    tensors = json_object_get(r, "tensors");
    if (!json_is_array(tensors)) {
        s = dck_set_error(DCK_ERR_FORMAT, "%s: 'tensors' is not a list", label);
        goto fail;
    }
    for (size_t i = 0; i < json_array_size(tensors); i++) {
        json_t *o = json_array_get(tensors, i);
        dck_manifest_tensor t;
        memset(&t, 0, sizeof t);
        json_t *sh = json_object_get(o, "shape");
        t.name = json_string_value(json_object_get(o, "name"));
        const char *g = json_string_value(json_object_get(o, "group"));
        const char *dt = json_string_value(json_object_get(o, "dtype"));
        const char *dg = json_string_value(json_object_get(o, "digest"));
        if (!t.name) {
            s = dck_set_error(DCK_ERR_FORMAT, "%s: tensor entry %zu has no name", label, i);
            goto fail;
        }
        if (!g || dck_group_from_name(g, &t.group)) {
            s = dck_set_error(DCK_ERR_FORMAT, "%s: tensor %s: bad group", label, t.name);
            goto fail;
        }
        if (!dt || dck_dtype_from_name(dt, &t.dtype)) {
            s = dck_set_error(DCK_ERR_FORMAT, "%s: tensor %s: unknown dtype %s", label, t.name, dt ? dt : "(none)");
            goto fail;
        }
        if (!dg || dck_digest_from_hex(dg, &t.digest)) {
            s = dck_set_error(DCK_ERR_FORMAT, "%s: tensor %s: digest is not 32 lowercase hex digits", label, t.name);
            goto fail;
        }
        if (!json_is_array(sh) || json_array_size(sh) > DCK_MAX_DIMS) {
            s = dck_set_error(DCK_ERR_FORMAT, "%s: tensor %s: bad shape", label, t.name);
            goto fail;
        }
        t.ndim = (int)json_array_size(sh);
        for (int d = 0; d < t.ndim; d++)
            if (!get_u64(json_array_get(sh, (size_t)d), &t.shape[d])) {
                s = dck_set_error(DCK_ERR_FORMAT, "%s: tensor %s: bad shape", label, t.name);
                goto fail;
            }
        if ((s = dck_manifest_add_tensor(m, &t))) goto fail;
    }
    values = json_object_get(r, "values");
    if (values && !json_is_array(values)) {
        s = dck_set_error(DCK_ERR_FORMAT, "%s: 'values' is not a list", label);
        goto fail;
    }
    for (size_t i = 0; i < json_array_size(values); i++) {
        json_t *o = json_array_get(values, i);
        const char *n = json_string_value(json_object_get(o, "name"));
        const char *v = json_string_value(json_object_get(o, "value"));
        if (!n || !v) {
            s = dck_set_error(DCK_ERR_FORMAT, "%s: value entry %zu needs name and value", label, i);
            goto fail;
        }
        if ((s = dck_manifest_add_value(m, n, v))) goto fail;
    }
    files = json_object_get(r, "files");
    if (files && !json_is_array(files)) {
        s = dck_set_error(DCK_ERR_FORMAT, "%s: 'files' is not a list", label);
        goto fail;
    }
    for (size_t i = 0; i < json_array_size(files); i++) {
        json_t *o = json_array_get(files, i);
        dck_manifest_file f;
        f.path = json_string_value(json_object_get(o, "path"));
        if (!safe_relpath(f.path)) {
            s = dck_set_error(DCK_ERR_FORMAT, "%s: file path %s is absolute or contains '..'", label,
                              f.path ? f.path : "(none)");
            goto fail;
        }
        if (!get_u64(json_object_get(o, "bytes"), &f.bytes) ||
            dck_digest_from_hex(json_string_value(json_object_get(o, "xxh128")), &f.xxh128)) {
            s = dck_set_error(DCK_ERR_FORMAT, "%s: file %s: bad bytes or xxh128", label, f.path);
            goto fail;
        }
        if ((s = dck_manifest_add_file(m, &f))) goto fail;
    }
    if ((s = dck_manifest_finalize(m))) {
        s = dck_set_error(s, "%s: %s", label, dck_last_error());
        goto fail;
    }
    if (!dck_digest_equal(root, m->root)) {
        s = dck_set_error(DCK_ERR_FORMAT, "%s: root digest does not match the tensors listed (edited manifest?)", label);
        goto fail;
    }
    *out = m;
    return DCK_OK;
fail:
    dck_manifest_free(m);
    return s;
}

/* ------------------------------------------------------------------ parsing: the written layout
 * Manifests that detcheck wrote (the YAML above, line for line) are read
 * directly into a manifest: no libyaml document, no jansson tree. The
 * reader takes only what it can read exactly as libyaml reads it: plain
 * scalars the emitter would write plain in that place (y_analyze), quoted
 * scalars on one line of printable text, known escapes. Anything else (a
 * comment, other indentation, a key twice, a field it does not expect, a
 * manifest that would fail a check) returns "not mine" and the general
 * path below reads the document and words any error, so both paths give
 * the same manifest or the same message. */

typedef struct {
    const char *p, *end;
    char *buf; /* decoded scalars */
    size_t n, cap;
    bool oom; /* not "not mine": memory ran out */
} fy;

static int fy_room(fy *y, size_t more) {
    if (y->cap - y->n >= more) return 1;
    size_t nc = y->cap ? y->cap * 2 : 4096;
    while (nc - y->n < more) nc *= 2;
    char *b = realloc(y->buf, nc);
    if (!b) return !(y->oom = true);
    y->buf = b;
    y->cap = nc;
    return 1;
}

/* A code point libyaml's reader lets through in a quoted scalar on one line. */
static int fy_printable(uint32_t v) {
    return (v >= 0x20 && v <= 0x7E) || (v >= 0xA0 && v <= 0xD7FF && v != 0x2028 && v != 0x2029) ||
           (v >= 0xE000 && v <= 0xFFFD && v != 0xFEFF) || (v >= 0x10000 && v <= 0x10FFFF);
}

/* One UTF-8 character at p: its width (0: not valid, or not printable). */
static int fy_char(const unsigned char *p, const unsigned char *end, uint32_t *v) {
    int w = utf8_width(p, end);
    if (!w) return 0;
    uint32_t c = w == 1 ? p[0] : w == 2 ? p[0] & 0x1Fu : w == 3 ? p[0] & 0x0Fu : p[0] & 0x07u;
    for (int k = 1; k < w; k++) c = (c << 6) | (p[k] & 0x3Fu);
    *v = c;
    return fy_printable(c) ? w : 0;
}

static void fy_put_utf8(char *o, uint32_t v, size_t *k) {
    size_t i = *k;
    if (v < 0x80) o[i++] = (char)v;
    else if (v < 0x800) {
        o[i++] = (char)(0xC0 | (v >> 6));
        o[i++] = (char)(0x80 | (v & 0x3F));
    } else if (v < 0x10000) {
        o[i++] = (char)(0xE0 | (v >> 12));
        o[i++] = (char)(0x80 | ((v >> 6) & 0x3F));
        o[i++] = (char)(0x80 | (v & 0x3F));
    } else {
        o[i++] = (char)(0xF0 | (v >> 18));
        o[i++] = (char)(0x80 | ((v >> 12) & 0x3F));
        o[i++] = (char)(0x80 | ((v >> 6) & 0x3F));
        o[i++] = (char)(0x80 | (v & 0x3F));
    }
    *k = i;
}

/* A scalar at the cursor, decoded into y->buf; its offset there, or -1.
 * flow: inside {} or []; key: a top-level key (ends at ':'). */
static long fy_scalar(fy *y, bool flow, bool key) {
    const unsigned char *p = (const unsigned char *)y->p, *end = (const unsigned char *)y->end;
    if (p >= end) return -1;
    size_t start = y->n;
    if (*p == '\'' || *p == '"') {
        bool dq = *p == '"';
        p++;
        for (;;) {
            if (p >= end || *p == '\n' || *p == '\r') return -1;
            if (!fy_room(y, 8)) return -1;
            if (!dq && *p == '\'') {
                if (p + 1 < end && p[1] == '\'') {
                    y->buf[y->n++] = '\'';
                    p += 2;
                    continue;
                }
                p++;
                break;
            }
            if (dq && *p == '"') {
                p++;
                break;
            }
            if (dq && *p == '\\') {
                if (p + 1 >= end) return -1;
                uint32_t v;
                int digits = 0;
                switch (p[1]) {
                case '0': v = 0; break;
                case 'a': v = 7; break;
                case 'b': v = 8; break;
                case 't': v = 9; break;
                case 'n': v = 10; break;
                case 'v': v = 11; break;
                case 'f': v = 12; break;
                case 'r': v = 13; break;
                case 'e': v = 0x1B; break;
                case '"': v = '"'; break;
                case '\\': v = '\\'; break;
                case 'N': v = 0x85; break;
                case '_': v = 0xA0; break;
                case 'L': v = 0x2028; break;
                case 'P': v = 0x2029; break;
                case 'x': digits = 2; break;
                case 'u': digits = 4; break;
                case 'U': digits = 8; break;
                default: return -1;
                }
                p += 2;
                if (digits) {
                    if (end - p < digits) return -1;
                    v = 0;
                    for (int i = 0; i < digits; i++) {
                        unsigned c = p[i];
                        int h = c >= '0' && c <= '9' ? (int)(c - '0') : c >= 'a' && c <= 'f' ? (int)(c - 'a' + 10)
                                : c >= 'A' && c <= 'F' ? (int)(c - 'A' + 10) : -1;
                        if (h < 0) return -1;
                        v = v * 16 + (uint32_t)h;
                    }
                    p += digits;
                    if ((v >= 0xD800 && v <= 0xDFFF) || v > 0x10FFFF) return -1;
                }
                if (v == 0) return -1; /* a NUL in a string: the general path */
                fy_put_utf8(y->buf, v, &y->n);
                continue;
            }
            uint32_t v;
            int w = fy_char(p, end, &v);
            if (!w) return -1;
            memcpy(y->buf + y->n, p, (size_t)w);
            y->n += (size_t)w;
            p += w;
        }
    } else {
        /* plain: to the end of the line (a value), the ':' of ": " (a key),
         * a ',', '}' or ']' (in flow); then it must be what the emitter
         * would write plain there */
        const unsigned char *q = p;
        if (flow) {
            while (q < end && *q != ',' && *q != '}' && *q != ']' && *q != ':' && *q != '\n') q++;
        } else if (key) {
            while (q < end && *q != '\n' && !(*q == ':' && (q + 1 == end || q[1] == ' ' || q[1] == '\n'))) q++;
        } else {
            while (q < end && *q != '\n') q++;
        }
        size_t len = (size_t)(q - p);
        if (!len || !fy_room(y, len + 1)) return -1;
        memcpy(y->buf + y->n, p, len);
        y->buf[y->n + len] = 0;
        if (!y_all_safe((const unsigned char *)y->buf + y->n, len)) { /* the NUL-terminated copy */
            if (memchr(p, 0, len) || str_class(y->buf + y->n) != (STR_UTF8 | STR_NOBREAK)) return -1;
            for (size_t i = 0; i < len; i++)
                if (p[i] < 0x20 || p[i] == 0x7F) return -1;
            unsigned a = y_analyze((const unsigned char *)y->buf + y->n, len);
            if (!(a & (flow ? Y_FLOW_PLAIN : Y_BLOCK_PLAIN))) return -1;
        }
        y->n += len;
        p = q;
    }
    if (!fy_room(y, 1)) return -1;
    y->buf[y->n++] = 0;
    y->p = (const char *)p;
    return (long)start;
}

static int fy_lit(fy *y, const char *s) {
    size_t n = strlen(s);
    if ((size_t)(y->end - y->p) < n || memcmp(y->p, s, n)) return 0;
    y->p += n;
    return 1;
}

/* u64 from the digits a YAML scalar holds, as get_u64 reads them */
static int digits_u64(const char *s, uint64_t *out) {
    if (!*s || strlen(s) > 20) return 0;
    for (const char *p = s; *p; p++)
        if (!isdigit((unsigned char)*p)) return 0;
    errno = 0;
    unsigned long long x = strtoull(s, NULL, 10);
    if (errno) return 0;
    *out = x;
    return 1;
}

enum { FY_TENSORS, FY_VALUES, FY_FILES };
static const char *const fy_fields[3][5] = {
    {"name", "group", "dtype", "shape", "digest"},
    {"name", "value", NULL, NULL, NULL},
    {"path", "bytes", "xxh128", NULL, NULL},
};

/* One "- {...}\n" item of list kind into m; 1 done, 0 not mine. */
static int fy_item(fy *y, int kind, dck_manifest *m) {
    if (!fy_lit(y, "- {")) return 0;
    y->n = 0;
    long val[5] = {-1, -1, -1, -1, -1};
    uint64_t shape[DCK_MAX_DIMS];
    int ndim = -1;
    for (int first = 1;; first = 0) {
        if (!first && !fy_lit(y, ", ")) break;
        long k = fy_scalar(y, true, false);
        if (k < 0 || !fy_lit(y, ": ")) return 0;
        int f = -1;
        for (int i = 0; i < 5; i++)
            if (fy_fields[kind][i] && !strcmp(y->buf + k, fy_fields[kind][i])) f = i;
        if (f < 0 || val[f] >= 0) return 0; /* a field it does not know, or twice */
        if (kind == FY_TENSORS && f == 3) {
            if (!fy_lit(y, "[")) return 0;
            ndim = 0;
            if (!fy_lit(y, "]")) {
                for (;;) {
                    long d = fy_scalar(y, true, false);
                    if (d < 0 || ndim == DCK_MAX_DIMS || !digits_u64(y->buf + d, &shape[ndim])) return 0;
                    ndim++;
                    if (fy_lit(y, "]")) break;
                    if (!fy_lit(y, ", ")) return 0;
                }
            }
            val[3] = 0;
        } else {
            if ((val[f] = fy_scalar(y, true, false)) < 0) return 0;
        }
    }
    if (!fy_lit(y, "}\n")) return 0;
    for (int i = 0; i < 5; i++)
        if (fy_fields[kind][i] && val[i] < 0) return 0;
    const char *b = y->buf;
    if (kind == FY_TENSORS) {
        dck_manifest_tensor t;
        memset(&t, 0, sizeof t);
        t.name = b + val[0];
        t.ndim = ndim;
        memcpy(t.shape, shape, sizeof(uint64_t) * (size_t)ndim);
        dck_clear_error();
        if (dck_group_from_name(b + val[1], &t.group) || dck_dtype_from_name(b + val[2], &t.dtype) ||
            dck_digest_from_hex(b + val[4], &t.digest))
            return 0;
        dck_status s = dck_manifest_add_tensor(m, &t);
        y->oom |= s == DCK_ERR_NOMEM;
        if (s) return 0;
    } else if (kind == FY_VALUES) {
        dck_status s = dck_manifest_add_value(m, b + val[0], b + val[1]);
        y->oom |= s == DCK_ERR_NOMEM;
        if (s) return 0;
    } else {
        dck_manifest_file fl;
        fl.path = b + val[0];
        if (!safe_relpath(fl.path) || !digits_u64(b + val[1], &fl.bytes) ||
            dck_digest_from_hex(b + val[2], &fl.xxh128))
            return 0;
        dck_status s = dck_manifest_add_file(m, &fl);
        y->oom |= s == DCK_ERR_NOMEM;
        if (s) return 0;
    }
    return 1;
}

/* 1: text was a manifest in the written layout, *out holds it; 0: not
 * (nothing set; the general path reads it); -1: memory ran out. */
static int parse_written_yaml(const char *text, size_t len, dck_manifest **out) {
    fy y = {text, text + len, NULL, 0, 0, false};
    dck_manifest *m;
    if (dck_manifest_create(&m)) return -1;
    /* top-level keys seen (a repeat is the general path's error) */
    char *keys[64];
    size_t nkeys = 0;
    int ok = 0, have_version = 0, have_root = 0, have_tensors = 0;
    dck_digest root = {0, 0};
    while (y.p < y.end) {
        y.n = 0;
        long k = fy_scalar(&y, false, true);
        /* keys up to 128 bytes: the emitter writes longer ones another way,
         * and libyaml's scanner limits implicit keys */
        if (k < 0 || strlen(y.buf + k) > 128 || !fy_lit(&y, ":") || nkeys == sizeof keys / sizeof keys[0])
            goto done;
        for (size_t i = 0; i < nkeys; i++)
            if (!strcmp(keys[i], y.buf + k)) goto done;
        if (!(keys[nkeys] = strdup(y.buf + k))) {
            y.oom = true;
            goto done;
        }
        const char *key = keys[nkeys++];
        int list = !strcmp(key, "tensors") ? FY_TENSORS + 1 : !strcmp(key, "values") ? FY_VALUES + 1
                   : !strcmp(key, "files") ? FY_FILES + 1 : 0;
        if (list) {
            if (fy_lit(&y, " []\n")) {
                /* empty */
            } else if (fy_lit(&y, "\n") && y.p + 1 < y.end && y.p[0] == '-' && y.p[1] == ' ') {
                while (y.p + 1 < y.end && y.p[0] == '-' && y.p[1] == ' ')
                    if (!fy_item(&y, list - 1, m)) goto done;
            } else {
                goto done;
            }
            have_tensors |= list == FY_TENSORS + 1;
            continue;
        }
        y.n = 0;
        long v;
        if (!fy_lit(&y, " ") || (v = fy_scalar(&y, false, false)) < 0 || !fy_lit(&y, "\n")) goto done;
        const char *value = y.buf + v;
        if (!strcmp(key, "detcheck")) {
            uint64_t ver;
            if (!digits_u64(value, &ver) || ver != MANIFEST_VERSION) goto done;
            have_version = 1;
        } else if (!strcmp(key, "root")) {
            if (dck_digest_from_hex(value, &root)) goto done;
            have_root = 1;
        } else if (dck_manifest_set_meta(m, key, value)) { /* memory only */
            y.oom = true;
            goto done;
        }
    }
    if (have_version && have_root && have_tensors) {
        dck_status fs = dck_manifest_finalize(m);
        y.oom |= fs == DCK_ERR_NOMEM;
        ok = fs == DCK_OK && dck_digest_equal(root, m->root);
    }
done:
    for (size_t i = 0; i < nkeys; i++) free(keys[i]);
    free(y.buf);
    if (!ok) {
        dck_manifest_free(m);
        dck_clear_error();
        return y.oom ? -1 : 0;
    }
    *out = m;
    return 1;
}

/* The deepest nesting of [ and { outside strings (jansson allows 2048
 * levels; one pass here keeps its recursion and a deep tree away). */
static int json_depth(const char *text, size_t len) {
    int d = 0, most = 0;
    bool str = false;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (str) {
            if (c == '\\') i++;
            else if (c == '"') str = false;
        } else if (c == '"') {
            str = true;
        } else if (c == '[' || c == '{') {
            if (++d > most && (most = d) > DCK_MANIFEST_MAX_DEPTH) break;
        } else if (c == ']' || c == '}') {
            d--;
        }
    }
    return most;
}

dck_status dck_manifest_parse(const char *text, size_t len, const char *label, dck_manifest **out) {
    *out = NULL;
    int direct = len && text[0] != '{' ? parse_written_yaml(text, len, out) : 0;
    if (direct > 0) return DCK_OK;
    if (direct < 0)
        return dck_set_error(DCK_ERR_NOMEM, "%s: out of memory reading a manifest of %zu bytes", label, len);
    size_t k = 0;
    while (k < len && isspace((unsigned char)text[k])) k++;
    json_t *root = NULL;
    if (len > MAX_TREE_MANIFEST_BYTES)
        return dck_set_error(DCK_ERR_LIMIT,
                             "%s: manifest of %zu bytes not in the layout detcheck writes: larger than %zu MiB "
                             "(the limit for JSON and edited YAML; a manifest detcheck writes as YAML may "
                             "have 1 GiB)",
                             label, len, MAX_TREE_MANIFEST_BYTES >> 20);
    if (k < len && text[k] == '{') {
        if (json_depth(text, len) > DCK_MANIFEST_MAX_DEPTH)
            return dck_set_error(DCK_ERR_LIMIT, "%s: manifest nested deeper than %d levels", label,
                                 DCK_MANIFEST_MAX_DEPTH);
        json_error_t je;
        root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
        /* jansson words every syntax error; out of memory it may leave the text empty */
        if (!root && (json_error_code(&je) == json_error_out_of_memory || !je.text[0]))
            return dck_set_error(DCK_ERR_NOMEM, "%s: out of memory reading a manifest of %zu bytes", label, len);
        if (!root)
            return dck_set_error(DCK_ERR_FORMAT, "%s: invalid JSON at line %d: %s", label, je.line, je.text);
    } else {
        yaml_parser_t p;
        if (!yaml_parser_initialize(&p)) return dck_oom(NULL);
        yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
        int r = yaml_events_to_json(&p, &root);
        dck_status s = DCK_OK;
        if (r == YL_SYNTAX)
            s = dck_set_error(DCK_ERR_FORMAT, "%s: not YAML: %s at line %zu", label,
                              p.problem ? p.problem : "parse error", p.problem_mark.line + 1);
        else if (r == YL_NOMEM)
            s = dck_set_error(DCK_ERR_NOMEM, "%s: out of memory reading a manifest of %zu bytes", label, len);
        else if (r == YL_DEEP)
            s = dck_set_error(DCK_ERR_LIMIT, "%s: manifest nested deeper than %d levels", label,
                              DCK_MANIFEST_MAX_DEPTH);
        else if (r == YL_NOT_MANIFEST)
            s = dck_set_error(DCK_ERR_FORMAT,
                              "%s: not a detcheck manifest (empty, duplicate keys, aliases or keys that are not text)",
                              label);
        yaml_parser_delete(&p);
        if (s) return s;
    }
    dck_status s = from_json(root, label, out);
    json_decref(root);
    return s;
}

dck_status dck_manifest_load(const char *path, dck_manifest **out) {
    *out = NULL;
    /* a regular file only: a FIFO (verify --golden FIFO) would block open() */
    int fd;
    struct stat st0;
    DCK_TRY(dck_open_regular(path, &fd, &st0));
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        return dck_set_error(DCK_ERR_IO, "%s: cannot open: %s", path, strerror(e));
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    dck_status s = DCK_OK;
    /* a regular file: its size, plus one byte to see the end, in one read */
    struct stat st;
    size_t chunk = 65536;
    if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= 0 &&
        (uint64_t)st.st_size <= MAX_MANIFEST_BYTES)
        chunk = (size_t)st.st_size + 1;
    for (;;) {
        if (len + chunk > cap && (s = dck_grow((void **)&buf, &cap, len + chunk, 1))) break;
        size_t want = cap - len, r = fread(buf + len, 1, want, f);
        len += r;
        if (len > MAX_MANIFEST_BYTES) {
            s = dck_set_error(DCK_ERR_LIMIT, "%s: manifest larger than 1 GiB", path);
            break;
        }
        if (r < want) { /* end of file, or an error */
            if (ferror(f)) s = dck_set_error(DCK_ERR_IO, "%s: read error", path);
            break;
        }
        chunk = 65536;
    }
    fclose(f);
    if (!s) s = dck_manifest_parse(buf ? buf : "", len, path, out);
    free(buf);
    return s;
}

/* ------------------------------------------------------------------ compare */

const char *dck_cmp_kind_name(dck_cmp_kind k) {
    static const char *n[] = {"equal", "digest", "dtype", "shape", "missing", "extra", "file", "value"};
    return (unsigned)k < sizeof n / sizeof n[0] ? n[k] : "?";
}

static dck_status push(dck_cmp_result *r, size_t *cap, const char *name, dck_cmp_kind k,
                       const dck_manifest_tensor *g, const dck_manifest_tensor *a) {
    dck_status s = dck_grow((void **)&r->entries, cap, r->n + 1, sizeof *r->entries);
    if (s) return s;
    memset(&r->entries[r->n], 0, sizeof r->entries[r->n]);
    r->entries[r->n].name = name;
    r->entries[r->n].kind = k;
    r->entries[r->n].golden = g;
    r->entries[r->n].actual = a;
    r->n++;
    return DCK_OK;
}

static dck_status push_value(dck_cmp_result *r, size_t *cap, const dck_manifest_value *g,
                             const dck_manifest_value *a) {
    dck_status s = push(r, cap, g ? g->name : a->name, DCK_CMP_VALUE, NULL, NULL);
    if (s) return s;
    r->entries[r->n - 1].golden_value = g;
    r->entries[r->n - 1].actual_value = a;
    return DCK_OK;
}

static dck_status push_file(dck_cmp_result *r, size_t *cap, const dck_manifest_file *g,
                            const dck_manifest_file *a) {
    dck_status s = push(r, cap, g ? g->path : a->path, DCK_CMP_FILE, NULL, NULL);
    if (s) return s;
    r->entries[r->n - 1].golden_file = g;
    r->entries[r->n - 1].actual_file = a;
    return DCK_OK;
}

dck_status dck_manifest_compare(const dck_manifest *g, const dck_manifest *a, int compare_files,
                                dck_cmp_result *r) {
    memset(r, 0, sizeof *r);
    size_t cap = 0, i = 0, j = 0;
    dck_status s = DCK_OK;
    while ((i < g->nt || j < a->nt) && !s) {
        int c = i == g->nt ? 1 : j == a->nt ? -1 : dck_name_compare(g->t[i].name, a->t[j].name);
        if (c < 0) {
            s = push(r, &cap, g->t[i].name, DCK_CMP_MISSING, &g->t[i], NULL);
            i++;
        } else if (c > 0) {
            s = push(r, &cap, a->t[j].name, DCK_CMP_EXTRA, NULL, &a->t[j]);
            j++;
        } else {
            const dck_manifest_tensor *x = &g->t[i], *y = &a->t[j];
            r->tensors_compared++;
            if (x->dtype != y->dtype) s = push(r, &cap, x->name, DCK_CMP_DTYPE, x, y);
            else if (x->ndim != y->ndim || memcmp(x->shape, y->shape, sizeof(uint64_t) * (size_t)x->ndim))
                s = push(r, &cap, x->name, DCK_CMP_SHAPE, x, y);
            else if (!dck_digest_equal(x->digest, y->digest)) s = push(r, &cap, x->name, DCK_CMP_DIGEST, x, y);
            else r->tensors_equal++;
            i++;
            j++;
        }
    }
    for (i = 0, j = 0; (i < g->nv || j < a->nv) && !s;) {
        int c = i == g->nv ? 1 : j == a->nv ? -1 : dck_name_compare(g->v[i].name, a->v[j].name);
        if (c < 0) s = push_value(r, &cap, &g->v[i++], NULL);
        else if (c > 0) s = push_value(r, &cap, NULL, &a->v[j++]);
        else {
            if (strcmp(g->v[i].value, a->v[j].value)) s = push_value(r, &cap, &g->v[i], &a->v[j]);
            i++;
            j++;
        }
    }
    if (compare_files)
        for (i = 0, j = 0; (i < g->nf || j < a->nf) && !s;) {
            int c = i == g->nf ? 1 : j == a->nf ? -1 : dck_name_compare(g->f[i].path, a->f[j].path);
            if (c < 0) s = push_file(r, &cap, &g->f[i++], NULL);
            else if (c > 0) s = push_file(r, &cap, NULL, &a->f[j++]);
            else {
                if (g->f[i].bytes != a->f[j].bytes || !dck_digest_equal(g->f[i].xxh128, a->f[j].xxh128))
                    s = push_file(r, &cap, &g->f[i], &a->f[j]);
                i++;
                j++;
            }
        }
    if (s) dck_cmp_result_release(r);
    return s;
}

/* ------------------------------------------------------------ layout state
 *
 * A table, so that an auditor reads in one place what may be set aside.
 * LAYOUT_VALUE: a value that describes the layout as the writer claims it
 * (Megatron's args): set aside when the layouts differ, never itself the
 * evidence that they do (a lying args.tensor_model_parallel_size must not
 * hide the RNG state). LAYOUT_STORED: a layout value the reader checks
 * against what is stored (DeepSpeed's partition count against its rank
 * files): evidence, as the per-rank grids are. PER_RANK: state of one rank
 * (or written by one rank) of the layout; with a ShardedObject grid
 * (KEY/shard_O_G) the grid G is part of the stored layout too. Globs are
 * fnmatch(3) without FNM_PATHNAME. */
typedef enum { LS_NONE, LS_LAYOUT_VALUE, LS_LAYOUT_STORED, LS_PER_RANK, LS_WRITER, LS_LOCATION } layout_kind;
static const struct {
    const char *glob;
    layout_kind kind;
} layout_state[] = {
    /* Megatron-LM's args (common.pt / the common state) */
    {"args.tensor_model_parallel_size", LS_LAYOUT_VALUE},
    {"args.pipeline_model_parallel_size", LS_LAYOUT_VALUE},
    {"args.virtual_pipeline_model_parallel_size", LS_LAYOUT_VALUE},
    {"args.context_parallel_size", LS_LAYOUT_VALUE},
    {"args.expert_model_parallel_size", LS_LAYOUT_VALUE},
    {"args.expert_tensor_parallel_size", LS_LAYOUT_VALUE},
    {"args.data_parallel_size", LS_LAYOUT_VALUE},
    {"args.world_size", LS_LAYOUT_VALUE},
    {"args.use_distributed_optimizer", LS_LAYOUT_VALUE},
    {"args.dist_ckpt_optim_fully_reshardable", LS_LAYOUT_VALUE},
    {"args.ckpt_format", LS_LAYOUT_VALUE},
    /* how Megatron-Core sharded the distributed optimizer's state */
    {"content_metadata.distrib_optim_sharding_type", LS_LAYOUT_VALUE},
    {"optimizer.param_state_sharding_type", LS_LAYOUT_VALUE},
    /* DeepSpeed: the partition count, which formats/deepspeed.c checks
     * against the rank files; the rest (ranks, ZeRO stage and config,
     * samples of all ranks) as the files claim it */
    {"deepspeed.layout.partition_count*", LS_LAYOUT_STORED},
    {"deepspeed.layout.*", LS_LAYOUT_VALUE},
    /* ZeRO-3's padding of each parameter, which the partition count decides */
    {"deepspeed.zero3_padding.*", LS_PER_RANK},
    /* per-rank ShardedObjects: RNG of (pipeline, tensor) rank */
    {"rng_state/shard_*", LS_PER_RANK},
    {"*.rng_state/shard_*", LS_PER_RANK},
    /* common.pt holds rank 0's optimizer.param_state, numbered by rank 0's
     * own parameters (the per-parameter step of torch's AdamW) */
    {"optimizer.param_state.*", LS_PER_RANK},
    /* WRITER: bookkeeping that one version of the writer records and another
     * does not (megatron-core 0.19 marks each param group default_config;
     * 0.15 does not): set aside when on one side only, whatever the layouts;
     * compared when both sides record it */
    {"*param_groups.*.default_config", LS_WRITER},
    /* legacy Megatron-LM trees (mp_rank_XX[_YYY]/): merged, the model's
     * weights are named without the rank directory; what keeps it is per
     * rank (optimizer, RNG, distrib_optim.pt, Transformer Engine's FP8
     * _extra_state), except the weights themselves read per rank
     * (--megatron-per-rank), which must differ loudly, hence the NONE row */
    {"mp_rank_*.model.*._extra_state", LS_PER_RANK},
    {"mp_rank_*.model.*._extra_state.*", LS_PER_RANK},
    {"mp_rank_*.model.*", LS_NONE},
    {"mp_rank_[0-9]*", LS_PER_RANK},
    /* LOCATION: the optimizer's param groups, which Megatron-Core stores in
     * the common state (fully_reshardable, fully_sharded_model_space) or
     * per model-parallel rank (dp_reshardable): set aside when the layouts
     * differ and it is on one side only; compared when on both */
    {"optimizer.optimizer.param_groups.*", LS_LOCATION},
    {"optimizer.distributed.dp_group_idx_[0-9]*.optimizer.*", LS_LOCATION},
    /* dp_reshardable's other per model-parallel rank state (per_bucket_numel) */
    {"optimizer.distributed.dp_group_idx_[0-9]*", LS_PER_RANK},
};

static layout_kind layout_kind_of(const char *name) {
    if (!name) return LS_NONE;
    /* first match rules: a NONE row exempts what a later row would take */
    for (size_t i = 0; i < sizeof layout_state / sizeof layout_state[0]; i++)
        if (fnmatch(layout_state[i].glob, name, 0) == 0) return layout_state[i].kind;
    return LS_NONE;
}

int dck_is_layout_state(const char *name) { return name && layout_kind_of(name) != LS_NONE; }

/* Names that start with a rank's own key: a legacy rank directory
 * (mp_rank_01_000.), Megatron-Core dp_reshardable's per model-parallel rank
 * optimizer state (optimizer.distributed.dp_group_idx_1.). */
static const char *const rank_prefixes[] = {"mp_rank_", "optimizer.distributed.dp_group_idx_"};

/* The grid a per-rank name belongs to: KEY/shard_O_G gives the KEY and G
 * spans ("rng_state", "1.2"); a legacy rank directory's name
 * (mp_rank_01_000.optimizer...) the directory as key, no grid. False when
 * the name has neither. */
static bool grid_of(const char *name, const char **key, size_t *kl, const char **grid, size_t *gl) {
    for (size_t i = 0; i < sizeof rank_prefixes / sizeof rank_prefixes[0]; i++) {
        size_t p = strlen(rank_prefixes[i]), l = p;
        if (strncmp(name, rank_prefixes[i], p)) continue;
        while (isdigit((unsigned char)name[l]) || (name[l] == '_' && isdigit((unsigned char)name[l + 1]))) l++;
        if (l == p || name[l] != '.') return false;
        *key = name;
        *kl = l;
        *grid = name + l;
        *gl = 0;
        return true;
    }
    const char *sh = strstr(name, "/shard_");
    if (!sh) return false;
    const char *o = sh + 7, *us = strchr(o, '_');
    if (!us) return false;
    /* G has as many integers as O ("0.1_1.2.0.x": O 0.1, G 1.2; the ".0"
     * after G is the object's own item) */
    size_t nint = 1;
    for (const char *c = o; c < us; c++) nint += *c == '.';
    const char *g = us + 1, *e = g;
    for (size_t k = 0; k < nint; k++) {
        if (k) {
            if (*e != '.') return false;
            e++;
        }
        if (!isdigit((unsigned char)*e)) return false;
        while (isdigit((unsigned char)*e)) e++;
    }
    *key = name;
    *kl = (size_t)(sh - name);
    *grid = g;
    *gl = (size_t)(e - g);
    return true;
}

/* The first per-rank grid of side a not on side b ("rng_state: grid 1.1
 * only in the golden"), into why. Quadratic in the per-rank names, which
 * are few (one RNG object per rank). */
static bool grid_missing(dck_name_at_fn at, const void *ca, size_t na, const void *cb, size_t nb, char *why,
                         size_t n, const char *side) {
    for (size_t i = 0; i < na; i++) {
        const char *name = at(ca, i), *k, *g;
        size_t kl, gl;
        if (layout_kind_of(name) != LS_PER_RANK || !grid_of(name, &k, &kl, &g, &gl)) continue;
        bool found = false;
        for (size_t j = 0; j < nb && !found; j++) {
            const char *k2, *g2;
            size_t kl2, gl2;
            found = grid_of(at(cb, j), &k2, &kl2, &g2, &gl2) && kl2 == kl && gl2 == gl && !memcmp(k, k2, kl) &&
                    !memcmp(g, g2, gl);
        }
        if (!found) {
            if (gl) snprintf(why, n, "%.*s: grid %.*s only in %s", (int)kl, k, (int)gl, g, side);
            else snprintf(why, n, "%.*s only in %s", (int)kl, k, side);
            return true;
        }
    }
    return false;
}

int dck_layout_value_kind(const char *name) {
    layout_kind k = layout_kind_of(name);
    return k == LS_LAYOUT_STORED ? DCK_LAYOUTS_STORED : k == LS_LAYOUT_VALUE ? DCK_LAYOUTS_CLAIMED : DCK_LAYOUTS_SAME;
}

int dck_layouts_differ(const char *stored, const char *claimed, dck_name_at_fn at, const void *ca, size_t na,
                       const void *cb, size_t nb, const char *label_a, const char *label_b, char *why, size_t n) {
    char buf[512];
    if (stored) {
        snprintf(why, n, "%s", stored);
        return DCK_LAYOUTS_STORED;
    }
    if (grid_missing(at, ca, na, cb, nb, buf, sizeof buf, label_a) ||
        grid_missing(at, cb, nb, ca, na, buf, sizeof buf, label_b)) {
        snprintf(why, n, "%s", buf);
        return DCK_LAYOUTS_STORED;
    }
    if (claimed) {
        snprintf(why, n, "%s as claimed; the stored layout is the same, per-rank state compared", claimed);
        return DCK_LAYOUTS_CLAIMED;
    }
    if (n) why[0] = 0;
    return DCK_LAYOUTS_SAME;
}

/* Per-rank state is set aside only when what is stored differs (a grid, a
 * checked layout value); when only the claimed values differ, the same
 * ranks stored the same objects: compared, except what has no grid to tell
 * its rank and is on one side only (rank 0's optimizer.param_state.N, which
 * one sharding type of the same ranks keeps and another does not). */
int dck_layout_set_aside(const char *name, bool one_side, int differ) {
    const char *k, *g;
    size_t kl, gl;
    switch (layout_kind_of(name)) {
    case LS_WRITER: return one_side;
    case LS_LOCATION: return differ != DCK_LAYOUTS_SAME && one_side;
    case LS_LAYOUT_VALUE:
    case LS_LAYOUT_STORED: return differ != DCK_LAYOUTS_SAME;
    case LS_PER_RANK:
        return differ == DCK_LAYOUTS_STORED ||
               (differ == DCK_LAYOUTS_CLAIMED && one_side && !grid_of(name, &k, &kl, &g, &gl));
    default: return 0;
    }
}

static const char *manifest_name_at(const void *ctx, size_t i) {
    const dck_manifest *m = ctx;
    return i < m->nt ? m->t[i].name : m->v[i - m->nt].name;
}

dck_status dck_cmp_set_aside_layout_state(const dck_manifest *g, const dck_manifest *a, dck_cmp_result *r,
                                          dck_cmp_result *aside, char *why, size_t why_len) {
    memset(aside, 0, sizeof *aside);
    char first[2][512];
    bool found[2] = {false, false};
    /* the first layout value of each kind that differs (or is on one side only) */
    for (size_t i = 0; i < r->n; i++) {
        const dck_cmp_entry *e = &r->entries[i];
        int vk = e->kind == DCK_CMP_VALUE ? dck_layout_value_kind(e->name) : DCK_LAYOUTS_SAME;
        if (!vk || found[vk - 1]) continue;
        found[vk - 1] = true;
        snprintf(first[vk - 1], sizeof first[0], "%s: %s vs %s", e->name,
                 e->golden_value ? e->golden_value->value : "(none)", e->actual_value ? e->actual_value->value : "(none)");
    }
    char buf[512];
    int differ = dck_layouts_differ(found[1] ? first[1] : NULL, found[0] ? first[0] : NULL, manifest_name_at, g,
                                    g->nt + g->nv, a, a->nt + a->nv, "the golden", "the checkpoint", buf, sizeof buf);
    if (why && why_len) snprintf(why, why_len, "%s", buf);
    size_t k = 0, cap = 0;
    for (size_t i = 0; i < r->n; i++) {
        const dck_cmp_entry *e = &r->entries[i];
        bool one_side = e->kind == DCK_CMP_MISSING || e->kind == DCK_CMP_EXTRA ||
                        (e->kind == DCK_CMP_VALUE && (!e->golden_value || !e->actual_value));
        if (e->kind != DCK_CMP_FILE && dck_layout_set_aside(e->name, one_side, differ)) {
            dck_status s = dck_grow((void **)&aside->entries, &cap, aside->n + 1, sizeof *aside->entries);
            if (s) {
                dck_cmp_result_release(aside);
                return s;
            }
            aside->entries[aside->n++] = *e;
        } else
            r->entries[k++] = *e;
    }
    r->n = k;
    return DCK_OK;
}

void dck_cmp_result_release(dck_cmp_result *r) {
    if (!r) return;
    free(r->entries);
    memset(r, 0, sizeof *r);
}

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
#include <yaml.h>

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MANIFEST_VERSION 1
#define MAX_MANIFEST_BYTES ((size_t)1 << 30)

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
};

dck_status dck_manifest_create(dck_manifest **out) {
    *out = calloc(1, sizeof **out);
    return *out ? DCK_OK : dck_oom(NULL);
}

void dck_manifest_free(dck_manifest *m) {
    if (!m) return;
    for (size_t i = 0; i < m->nt; i++) free((char *)m->t[i].name);
    for (size_t i = 0; i < m->nf; i++) free((char *)m->f[i].path);
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
    if (!(m->t[m->nt].name = dck_strdup(t->name))) return dck_oom(NULL);
    m->nt++;
    m->finalized = false;
    return DCK_OK;
}

dck_status dck_manifest_add_file(dck_manifest *m, const dck_manifest_file *f) {
    if (!f->path) return dck_set_error(DCK_ERR_INVALID, "manifest: file entry without a path");
    dck_status s = dck_grow((void **)&m->f, &m->cap_f, m->nf + 1, sizeof *m->f);
    if (s) return s;
    m->f[m->nf] = *f;
    if (!(m->f[m->nf].path = dck_strdup(f->path))) return dck_oom(NULL);
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

dck_status dck_manifest_finalize(dck_manifest *m) {
    dck_qsort(m->t, m->nt, sizeof *m->t, cmp_mt);
    dck_qsort(m->f, m->nf, sizeof *m->f, cmp_mf);
    dck_qsort(m->v, m->nv, sizeof *m->v, cmp_mv);
    for (size_t i = 1; i < m->nt; i++)
        if (!strcmp(m->t[i - 1].name, m->t[i].name))
            return dck_set_error(DCK_ERR_FORMAT, "duplicate tensor name %s", m->t[i].name);
    for (size_t i = 1; i < m->nf; i++)
        if (!strcmp(m->f[i - 1].path, m->f[i].path))
            return dck_set_error(DCK_ERR_FORMAT, "duplicate file path %s", m->f[i].path);
    for (size_t i = 1; i < m->nv; i++)
        if (!strcmp(m->v[i - 1].name, m->v[i].name))
            return dck_set_error(DCK_ERR_FORMAT, "duplicate value name %s", m->v[i].name);
    const char **names = malloc(sizeof *names * (m->nt ? m->nt : 1));
    dck_digest *d = malloc(sizeof *d * (m->nt ? m->nt : 1));
    if (!names || !d) {
        free(names);
        free(d);
        return dck_oom(NULL);
    }
    for (size_t i = 0; i < m->nt; i++) {
        names[i] = m->t[i].name;
        d[i] = m->t[i].digest;
    }
    m->root = dck_root_digest(names, d, m->nt);
    free(names);
    free(d);
    m->finalized = true;
    return DCK_OK;
}

dck_digest dck_manifest_root(const dck_manifest *m) { return m->root; }

/* ------------------------------------------------------------------ YAML out */

typedef struct {
    yaml_emitter_t em;
    int ok;
} yout;

static void y_emit(yout *y, yaml_event_t *ev) {
    if (y->ok && !yaml_emitter_emit(&y->em, ev)) y->ok = 0;
}

/* Plain style unless a YAML 1.1 resolver would read the text as something
 * other than a string (a number, a bool, null...). */
static int needs_quotes(const char *s) {
    if (!*s) return 1;
    int digits_only = 1, ndig = 0, ne = 0;
    for (const char *p = s; *p; p++) {
        if (isdigit((unsigned char)*p)) ndig++;
        else if (*p == 'e' || *p == 'E') ne++;
        else if (*p != '.' && *p != '-' && *p != '+' && *p != '_') digits_only = 0;
    }
    if (digits_only && ndig && ne <= 1) return 1;
    static const char *words[] = {"y", "n", "yes", "no", "true", "false", "on", "off", "null", "~"};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (!strcasecmp(s, words[i])) return 1;
    return 0;
}

static void y_scalar(yout *y, const char *s, int quote) {
    yaml_event_t ev;
    yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)s, (int)strlen(s), 1, 1,
                                 quote || needs_quotes(s) ? YAML_DOUBLE_QUOTED_SCALAR_STYLE
                                                          : YAML_ANY_SCALAR_STYLE);
    y_emit(y, &ev);
}

static void y_str(yout *y, const char *s) { y_scalar(y, s, 0); }

static void y_u64(yout *y, uint64_t v) {
    char b[32];
    snprintf(b, sizeof b, "%llu", (unsigned long long)v);
    yaml_event_t ev;
    yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)b, (int)strlen(b), 1, 1,
                                 YAML_PLAIN_SCALAR_STYLE);
    y_emit(y, &ev);
}

static void y_map_start(yout *y, int flow) {
    yaml_event_t ev;
    yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1,
                                        flow ? YAML_FLOW_MAPPING_STYLE : YAML_BLOCK_MAPPING_STYLE);
    y_emit(y, &ev);
}
static void y_map_end(yout *y) {
    yaml_event_t ev;
    yaml_mapping_end_event_initialize(&ev);
    y_emit(y, &ev);
}
static void y_seq_start(yout *y, int flow) {
    yaml_event_t ev;
    yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1,
                                         flow ? YAML_FLOW_SEQUENCE_STYLE : YAML_BLOCK_SEQUENCE_STYLE);
    y_emit(y, &ev);
}
static void y_seq_end(yout *y) {
    yaml_event_t ev;
    yaml_sequence_end_event_initialize(&ev);
    y_emit(y, &ev);
}

static int y_write_handler(void *data, unsigned char *buf, size_t size) {
    return fwrite(buf, 1, size, (FILE *)data) == size;
}

static dck_status write_yaml(const dck_manifest *m, FILE *out) {
    yout y;
    memset(&y, 0, sizeof y);
    y.ok = 1;
    yaml_emitter_initialize(&y.em);
    yaml_emitter_set_output(&y.em, y_write_handler, out);
    yaml_emitter_set_unicode(&y.em, 1);
    yaml_emitter_set_width(&y.em, -1);
    yaml_event_t ev;
    yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING);
    y_emit(&y, &ev);
    yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1);
    y_emit(&y, &ev);
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
    yaml_document_end_event_initialize(&ev, 1);
    y_emit(&y, &ev);
    yaml_stream_end_event_initialize(&ev);
    y_emit(&y, &ev);
    int ok = y.ok && yaml_emitter_flush(&y.em);
    yaml_emitter_delete(&y.em);
    return ok ? DCK_OK : dck_set_error(DCK_ERR_IO, "cannot write manifest");
}

/* ------------------------------------------------------------------ JSON out */

static json_t *to_json(const dck_manifest *m) {
    json_t *r = json_object();
    char hex[33];
    json_object_set_new(r, "detcheck", json_integer(MANIFEST_VERSION));
    for (size_t i = 0; i < m->nmeta; i++)
        json_object_set_new(r, m->meta[i].key, json_string(m->meta[i].value));
    dck_digest_to_hex(m->root, hex);
    json_object_set_new(r, "root", json_string(hex));
    json_t *ts = json_array();
    for (size_t i = 0; i < m->nt; i++) {
        const dck_manifest_tensor *t = &m->t[i];
        json_t *o = json_object(), *sh = json_array();
        json_object_set_new(o, "name", json_string(t->name));
        json_object_set_new(o, "group", json_string(dck_group_name(t->group)));
        json_object_set_new(o, "dtype", json_string(dck_dtype_name(t->dtype)));
        for (int d = 0; d < t->ndim; d++) json_array_append_new(sh, json_integer((json_int_t)t->shape[d]));
        json_object_set_new(o, "shape", sh);
        dck_digest_to_hex(t->digest, hex);
        json_object_set_new(o, "digest", json_string(hex));
        json_array_append_new(ts, o);
    }
    json_object_set_new(r, "tensors", ts);
    if (m->nv) {
        json_t *vs = json_array();
        for (size_t i = 0; i < m->nv; i++) {
            json_t *o = json_object();
            json_object_set_new(o, "name", json_string(m->v[i].name));
            json_object_set_new(o, "value", json_string(m->v[i].value));
            json_array_append_new(vs, o);
        }
        json_object_set_new(r, "values", vs);
    }
    json_t *fs = json_array();
    for (size_t i = 0; i < m->nf; i++) {
        json_t *o = json_object();
        json_object_set_new(o, "path", json_string(m->f[i].path));
        json_object_set_new(o, "bytes", json_integer((json_int_t)m->f[i].bytes));
        dck_digest_to_hex(m->f[i].xxh128, hex);
        json_object_set_new(o, "xxh128", json_string(hex));
        json_array_append_new(fs, o);
    }
    json_object_set_new(r, "files", fs);
    return r;
}

static int json_fwrite(const char *buf, size_t size, void *data) {
    return fwrite(buf, 1, size, (FILE *)data) == size ? 0 : -1;
}

dck_status dck_manifest_write(const dck_manifest *m, dck_format fmt, FILE *out) {
    if (fmt == DCK_FORMAT_YAML) return write_yaml(m, out);
    json_t *j = to_json(m);
    int r = json_dump_callback(j, json_fwrite, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(j);
    if (r != 0 || fputc('\n', out) == EOF) return dck_set_error(DCK_ERR_IO, "cannot write manifest");
    return DCK_OK;
}

dck_status dck_manifest_save(const dck_manifest *m, dck_format fmt, const char *path) {
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    if (!mem) return dck_oom(NULL);
    dck_status s = dck_manifest_write(m, fmt, mem);
    fclose(mem);
    if (!s) s = dck_write_file_atomic(path, buf, len);
    free(buf);
    return s;
}

/* ------------------------------------------------------------------ parsing
 * Both formats are read into a jansson tree (YAML scalars become strings),
 * then one validator builds the manifest. */

/* Converts a YAML node tree; *budget counts the nodes still allowed. A
 * manifest visits each node once; aliases that make the tree a DAG (the
 * "billion laughs" document) run out of budget instead of memory. */
static json_t *yaml_node_to_json(yaml_document_t *doc, yaml_node_t *n, int depth, size_t *budget) {
    if (!n || depth > 64 || *budget == 0) return NULL;
    (*budget)--;
    switch (n->type) {
    case YAML_SCALAR_NODE:
        return json_stringn((const char *)n->data.scalar.value, n->data.scalar.length);
    case YAML_SEQUENCE_NODE: {
        json_t *a = json_array();
        for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
            json_t *c = yaml_node_to_json(doc, yaml_document_get_node(doc, *it), depth + 1, budget);
            if (!c) {
                json_decref(a);
                return NULL;
            }
            json_array_append_new(a, c);
        }
        return a;
    }
    case YAML_MAPPING_NODE: {
        json_t *o = json_object();
        for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
            yaml_node_t *k = yaml_document_get_node(doc, p->key);
            json_t *v = yaml_node_to_json(doc, yaml_document_get_node(doc, p->value), depth + 1, budget);
            if (!k || k->type != YAML_SCALAR_NODE || !v || json_object_get(o, (const char *)k->data.scalar.value)) {
                json_decref(v);
                json_decref(o);
                return NULL;
            }
            json_object_set_new(o, (const char *)k->data.scalar.value, v);
        }
        return o;
    }
    default:
        return NULL;
    }
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

dck_status dck_manifest_parse(const char *text, size_t len, const char *label, dck_manifest **out) {
    *out = NULL;
    size_t k = 0;
    while (k < len && isspace((unsigned char)text[k])) k++;
    json_t *root = NULL;
    if (k < len && text[k] == '{') {
        json_error_t je;
        root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
        if (!root)
            return dck_set_error(DCK_ERR_FORMAT, "%s: invalid JSON at line %d: %s", label, je.line, je.text);
    } else {
        yaml_parser_t p;
        yaml_document_t doc;
        yaml_parser_initialize(&p);
        yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
        if (!yaml_parser_load(&p, &doc)) {
            dck_status s = dck_set_error(DCK_ERR_FORMAT, "%s: not YAML: %s at line %zu", label,
                                         p.problem ? p.problem : "parse error", p.problem_mark.line + 1);
            yaml_parser_delete(&p);
            return s;
        }
        yaml_node_t *rn = yaml_document_get_root_node(&doc);
        size_t budget = (size_t)(doc.nodes.top - doc.nodes.start);
        root = rn ? yaml_node_to_json(&doc, rn, 0, &budget) : NULL;
        yaml_document_delete(&doc);
        yaml_parser_delete(&p);
        if (!root)
            return dck_set_error(DCK_ERR_FORMAT,
                                 "%s: not a detcheck manifest (empty, duplicate keys, aliases or nesting over 64)",
                                 label);
    }
    dck_status s = from_json(root, label, out);
    json_decref(root);
    return s;
}

dck_status dck_manifest_load(const char *path, dck_manifest **out) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return dck_set_error(DCK_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    char *buf = NULL;
    size_t len = 0, cap = 0;
    dck_status s = DCK_OK;
    for (;;) {
        if (len + 65536 > cap && (s = dck_grow((void **)&buf, &cap, len + 65536, 1))) break;
        size_t r = fread(buf + len, 1, cap - len, f);
        len += r;
        if (len > MAX_MANIFEST_BYTES) {
            s = dck_set_error(DCK_ERR_LIMIT, "%s: manifest larger than 1 GiB", path);
            break;
        }
        if (r == 0) {
            if (ferror(f)) s = dck_set_error(DCK_ERR_IO, "%s: read error", path);
            break;
        }
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

void dck_cmp_result_release(dck_cmp_result *r) {
    if (!r) return;
    free(r->entries);
    memset(r, 0, sizeof *r);
}

/* Writing manifests (manifest.c has the model and the document's layout):
 * the reference writers through libyaml and jansson, and the direct
 * writers that give the same bytes into one buffer, with no document tree
 * and no library call per scalar. dck_manifest_save writes a file by the
 * output rule. */
#include "core/manifest_impl.h"

#include <jansson.h>
#include <yaml.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static void y_double(obuf *b, const unsigned char *s, size_t len) {
    ob_c(b, '"');
    for (size_t i = 0; i < len;) {
        const unsigned char *c = s + i;
        uint32_t v;
        int w = dck_utf8_decode(c, s + len, &v);
        bool bom = c[0] == 0xEF && c[1] == 0xBB && c[2] == 0xBF;
        if (y_printable(c) && !bom && !y_is_break(c) && *c != '"' && *c != '\\') {
            ob_put(b, c, (size_t)w);
            i += (size_t)w;
            continue;
        }
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

/* A scalar as y_scalar() emits it, after the ' ' or nothing that precedes
 * it. flow: inside a flow collection. */
static void y_out(obuf *b, const char *str, bool quote, bool flow) {
    const unsigned char *s = (const unsigned char *)str;
    size_t len = strlen(str);
    if (quote || needs_quotes(str)) {
        y_double(b, s, len);
        return;
    }
    if (dck_yaml_all_safe(s, len)) {
        ob_put(b, s, len);
        return;
    }
    unsigned a = dck_yaml_analyze(s, len);
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
        all &= dck_yaml_str_class(m->meta[i].key) & dck_yaml_str_class(m->meta[i].value);
        if (strlen(m->meta[i].key) > 128) long_key = true; /* not a simple key for libyaml */
        if (reserved_key(m->meta[i].key)) reserved = true;
    }
    for (size_t i = 0; i < m->nt && all; i++) all &= dck_yaml_str_class(m->t[i].name);
    for (size_t i = 0; i < m->nv && all; i++)
        all &= dck_yaml_str_class(m->v[i].name) & dck_yaml_str_class(m->v[i].value);
    for (size_t i = 0; i < m->nf && all; i++) all &= dck_yaml_str_class(m->f[i].path);
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

dck_status dck_manifest_save(const dck_manifest *m, dck_format fmt, const char *path) {
    /* every caller (hash -o, the Python package's Manifest.save) gets the
     * rule of every output here: never a link, a FIFO, a read-only file, or
     * a file that is not a manifest (a checkpoint, a trajectory, notes) */
    return dck_manifest_save_kind(m, fmt, path, "manifest", dck_manifest_is_file);
}

dck_status dck_manifest_save_kind(const dck_manifest *m, dck_format fmt, const char *path, const char *what,
                                  dck_output_kind same_kind) {
    DCK_TRY(dck_output_check(NULL, path, what, same_kind, NULL, 0));
    obuf b = {0};
    bool direct;
    dck_status s = write_direct(m, fmt, &b, &direct);
    if (s) return s;
    if (direct) {
        s = b.oom ? dck_oom(NULL) : dck_output_write(NULL, path, what, same_kind, NULL, 0, b.p, b.n);
        free(b.p);
        return s;
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    if (!mem) return dck_oom(NULL);
    s = dck_manifest_write_reference(m, fmt, mem);
    fclose(mem);
    if (!s) s = dck_output_write(NULL, path, what, same_kind, NULL, 0, buf, len);
    free(buf);
    return s;
}


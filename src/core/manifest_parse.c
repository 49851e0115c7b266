/* Reading manifests (manifest.c has the model and the layout): the layout
 * detcheck writes is read directly (fy_*, no document tree); any other
 * YAML or JSON goes through a jansson tree and one validator, which words
 * every error. dck_manifest_load reads a file, dck_manifest_is_file tells
 * a manifest from anything else (the output rule's test). */
#include "core/manifest_impl.h"

#include <jansson.h>
#include <yaml.h>

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Manifest sizes, by the memory reading one takes (measured per byte of
 * text, peak RSS): the layout detcheck writes is read directly (about 2.6x:
 * 1 GiB of text, under 3 GB); any other text goes through a jansson tree
 * (YAML about 11x, JSON about 7x), so it gets a quarter of that (256 MiB:
 * also under 3 GB; a JSON manifest of the 2^20 tensors a checkpoint may
 * hold is about 240 MB). */
#define MAX_MANIFEST_BYTES ((size_t)1 << 30)
#define MAX_TREE_MANIFEST_BYTES ((size_t)256 << 20)

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

/* u64 from decimal digits only (at most 20, no sign, no space): a YAML
 * scalar's, or a JSON string's in get_u64 */
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

/* Integer from a JSON integer or a YAML scalar string of decimal digits. */
static int get_u64(json_t *v, uint64_t *out) {
    if (json_is_integer(v)) {
        if (json_integer_value(v) < 0) return 0;
        *out = (uint64_t)json_integer_value(v);
        return 1;
    }
    const char *s = json_string_value(v);
    return s && digits_u64(s, out);
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
 * Manifests that detcheck wrote (the YAML of manifest_write.c's
 * yaml_direct, line for line) are read directly into a manifest: no
 * libyaml document, no jansson tree. The reader takes only what it can
 * read exactly as libyaml reads it: plain scalars the emitter would write
 * plain in that place (dck_yaml_analyze), quoted scalars on one line of
 * printable text, known escapes. Anything else (a comment, other
 * indentation, a key twice, a field it does not expect, a manifest that
 * would fail a check) returns "not mine" and the general path above reads
 * the document and words any error, so both paths give the same manifest
 * or the same message. */

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
    int w = dck_utf8_decode(p, end, v);
    return w && fy_printable(*v) ? w : 0;
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
                y->n += dck_utf8_put(y->buf + y->n, v);
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
        if (!dck_yaml_all_safe((const unsigned char *)y->buf + y->n, len)) { /* the NUL-terminated copy */
            if (memchr(p, 0, len) || dck_yaml_str_class(y->buf + y->n) != (STR_UTF8 | STR_NOBREAK)) return -1;
            for (size_t i = 0; i < len; i++)
                if (p[i] < 0x20 || p[i] == 0x7F) return -1;
            unsigned a = dck_yaml_analyze((const unsigned char *)y->buf + y->n, len);
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

/* Walking the unpickled tree (see pickle.h): dotted names through dicts,
 * sequences and opaque objects, tensors and arrays reported by name, scalars
 * as the text Python prints for them. Bounded in depth and in visits. */
#include "formats/pickle.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PK_MAX_WALK_DEPTH 100

uint64_t dck_pk_walk_budget(const pk_ctx *c) {
    uint64_t b = 4 * (uint64_t)dck_pk_node_count(c) + 100000;
    return b < PK_MAX_WALK_VISITS ? b : PK_MAX_WALK_VISITS;
}

/* ------------------------------------------------------------------ canonical text */

typedef struct {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 64;
        while (nc < b->n + n + 1) nc *= 2;
        char *q = realloc(b->p, nc);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_str(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

/* Python's repr of a float: the shortest digits that read back the same,
 * positional for exponents in [-4, 16), else d.ddde+XX. */
static void float_text(double v, char *out, size_t n) {
    if (isnan(v)) { snprintf(out, n, "nan"); return; }
    if (isinf(v)) { snprintf(out, n, v < 0 ? "-inf" : "inf"); return; }
    char e[40];
    int prec;
    for (prec = 0; prec < 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec, v);
        if (strtod(e, NULL) == v) break;
    }
    snprintf(e, sizeof e, "%.*e", prec, v);
    /* e: [-]d[.ddd]e[+-]XX */
    const char *p = e;
    bool neg = *p == '-';
    if (neg) p++;
    char digits[32];
    size_t nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    digits[nd] = 0;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') digits[--nd] = 0;
    size_t k = 0;
    char buf[64];
    if (neg) buf[k++] = '-';
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            buf[k++] = '0';
            buf[k++] = '.';
            for (int i = 0; i < -exp - 1; i++) buf[k++] = '0';
            for (size_t i = 0; i < nd; i++) buf[k++] = digits[i];
        } else {
            for (int i = 0; i <= exp; i++) buf[k++] = (size_t)i < nd ? digits[i] : '0';
            buf[k++] = '.';
            if ((size_t)exp + 1 < nd)
                for (size_t i = (size_t)exp + 1; i < nd; i++) buf[k++] = digits[i];
            else
                buf[k++] = '0';
        }
        buf[k] = 0;
    } else {
        buf[k++] = digits[0];
        if (nd > 1) {
            buf[k++] = '.';
            for (size_t i = 1; i < nd; i++) buf[k++] = digits[i];
        }
        k += (size_t)snprintf(buf + k, sizeof buf - k, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
    snprintf(out, n, "%s", buf);
}

/* Little-endian two's complement to decimal (up to 512 bytes; hex beyond). */
static void bigint_text(const uint8_t *p, size_t n, sbuf *b) {
    if (n > 512) {
        sb_str(b, "0x");
        char h[3];
        for (size_t i = n; i-- > 0;) {
            snprintf(h, sizeof h, "%02x", p[i]);
            sb_str(b, h);
        }
        return;
    }
    uint8_t mag[512];
    bool neg = n && (p[n - 1] & 0x80);
    memcpy(mag, p, n);
    if (neg) { /* negate */
        int carry = 1;
        for (size_t i = 0; i < n; i++) {
            int v = (uint8_t)~mag[i] + carry;
            mag[i] = (uint8_t)v;
            carry = v >> 8;
        }
    }
    char dig[1300];
    size_t nd = 0;
    size_t len = n;
    while (len && !mag[len - 1]) len--;
    while (len) {
        unsigned rem = 0;
        for (size_t i = len; i-- > 0;) {
            unsigned cur = (rem << 8) | mag[i];
            mag[i] = (uint8_t)(cur / 10);
            rem = cur % 10;
        }
        dig[nd++] = (char)('0' + rem);
        while (len && !mag[len - 1]) len--;
    }
    if (!nd) dig[nd++] = '0';
    if (neg) sb_str(b, "-");
    for (size_t i = nd; i-- > 0;) sb_add(b, &dig[i], 1);
}

static bool is_scalar(const pk_node *n) {
    return n->kind == PK_NONE || n->kind == PK_BOOL || n->kind == PK_INT || n->kind == PK_BIGINT ||
           n->kind == PK_FLOAT;
}

static void scalar_text(const pk_node *n, sbuf *b) {
    char t[64];
    switch (n->kind) {
    case PK_NONE: sb_str(b, "None"); break;
    case PK_BOOL: sb_str(b, n->u.b ? "True" : "False"); break;
    case PK_INT: snprintf(t, sizeof t, "%lld", (long long)n->u.i); sb_str(b, t); break;
    case PK_BIGINT: bigint_text((const uint8_t *)n->u.s.p, n->u.s.len, b); break;
    case PK_FLOAT: float_text(n->u.f, t, sizeof t); sb_str(b, t); break;
    default: break;
    }
}

static bool scalar_seq(const pk_node *n) {
    if (n->kind != PK_TUPLE && n->kind != PK_LIST) return false;
    for (size_t i = 0; i < n->u.seq.n; i++)
        if (!is_scalar(n->u.seq.items[i])) return false;
    return true;
}

char *dck_pk_scalar_text(const pk_node *n) {
    sbuf b = {0};
    if (is_scalar(n)) scalar_text(n, &b);
    else if (scalar_seq(n)) {
        bool tup = n->kind == PK_TUPLE;
        sb_str(&b, tup ? "(" : "[");
        for (size_t i = 0; i < n->u.seq.n; i++) {
            if (i) sb_str(&b, ", ");
            scalar_text(n->u.seq.items[i], &b);
        }
        if (tup && n->u.seq.n == 1) sb_str(&b, ",");
        sb_str(&b, tup ? ")" : "]");
    } else
        return NULL;
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

/* ------------------------------------------------------------------ walking */

/* Slots of the cache of sequence texts (below). */
#define PK_SEQ_CACHE 64

typedef struct {
    const pk_walker *w;
    const char *label;
    uint64_t visits;
    uint64_t value_bytes; /* against PK_MAX_VALUE_BYTES (pickle.h) */
    sbuf name;
    /* texts of sequences recorded as one value, by node: a shared list is
     * printed once, however often it is referenced */
    struct {
        const pk_node *n;
        char *text;
    } seq_cache[PK_SEQ_CACHE];
} walk_state;

/* Every value goes through here: a list referenced many times through the
 * memo is recorded once per reference, so the total is what is bounded. */
static dck_status emit_value(walk_state *ws, const char *name, const char *text) {
    size_t len = strlen(text) + strlen(name);
    if (len > PK_MAX_VALUE_BYTES - ws->value_bytes)
        return dck_set_error(DCK_ERR_LIMIT,
                             "%s: values take more than %llu MiB of text (limit; a list shared by many "
                             "references?) at %s",
                             ws->label, (unsigned long long)(PK_MAX_VALUE_BYTES >> 20), name);
    ws->value_bytes += len;
    return ws->w->value(ws->w->ctx, name, text);
}

/* The text of a sequence of scalars, from the cache or printed into it
 * (NULL: out of memory). Owned by the cache. */
static const char *seq_text(walk_state *ws, const pk_node *n) {
    size_t h = (size_t)(((uintptr_t)n >> 4) * 0x9e3779b97f4a7c15ull >> 58) % PK_SEQ_CACHE;
    if (ws->seq_cache[h].n == n) return ws->seq_cache[h].text;
    char *t = dck_pk_scalar_text(n);
    if (!t) return NULL;
    free(ws->seq_cache[h].text);
    ws->seq_cache[h].n = n;
    ws->seq_cache[h].text = t;
    return t;
}

static dck_status walk(walk_state *ws, const pk_node *n, int depth, bool tensors_only);

/* Appends one name component (control characters become '?'). */
static void name_push(sbuf *nm, const char *comp, size_t len) {
    if (nm->n) sb_add(nm, ".", 1);
    for (size_t i = 0; i < len; i++) {
        char ch = comp[i];
        if ((unsigned char)ch < 0x20 || ch == 0x7f) ch = '?';
        sb_add(nm, &ch, 1);
    }
}

static dck_status walk_child(walk_state *ws, const pk_node *key, size_t index, const pk_node *v,
                             int depth, bool tensors_only) {
    size_t saved = ws->name.n;
    char buf[48];
    if (!key) {
        snprintf(buf, sizeof buf, "%zu", index);
        name_push(&ws->name, buf, strlen(buf));
    } else if (key->kind == PK_STR || key->kind == PK_BYTES) {
        name_push(&ws->name, key->u.s.p, key->u.s.len);
    } else if (is_scalar(key)) {
        sbuf t = {0};
        scalar_text(key, &t);
        name_push(&ws->name, t.p ? t.p : "", t.n);
        free(t.p);
    } else {
        snprintf(buf, sizeof buf, "key%zu", index);
        name_push(&ws->name, buf, strlen(buf));
    }
    if (ws->name.oom) return dck_oom(NULL);
    dck_status s = walk(ws, v, depth + 1, tensors_only);
    ws->name.n = saved;
    if (ws->name.p) ws->name.p[saved] = 0;
    return s;
}

static const char *cur_name(walk_state *ws) { return ws->name.p ? ws->name.p : ""; }

static dck_status walk_dict(walk_state *ws, const pk_node *d, int depth, bool tensors_only) {
    for (size_t i = 0; i < d->u.dict.n; i++) {
        dck_status s = walk_child(ws, d->u.dict.keys[i], i, d->u.dict.vals[i], depth, tensors_only);
        if (s) return s;
    }
    return DCK_OK;
}

/* A whole torch.nn.Module pickled (torch.save(model)): named as its
 * state_dict() names it, parameters, persistent buffers, then submodules,
 * so that it digests like the model's state dict. */
static bool is_module(const pk_node *n) {
    const pk_node *p = dck_pk_get(n, "_parameters"), *m = dck_pk_get(n, "_modules");
    return p && p->kind == PK_DICT && m && m->kind == PK_DICT;
}

static bool in_set(const pk_node *set, const pk_node *key) {
    size_t k;
    pk_node **it = dck_pk_items(set, &k);
    for (size_t i = 0; it && i < k; i++)
        if (it[i]->kind == PK_STR && key->kind == PK_STR && it[i]->u.s.len == key->u.s.len &&
            !memcmp(it[i]->u.s.p, key->u.s.p, key->u.s.len))
            return true;
    return false;
}

static dck_status walk_module(walk_state *ws, const pk_node *n, int depth) {
    const pk_node *parts[2] = {dck_pk_get(n, "_parameters"), dck_pk_get(n, "_buffers")};
    const pk_node *skip = dck_pk_get(n, "_non_persistent_buffers_set");
    dck_status s = DCK_OK;
    for (int k = 0; k < 2 && !s; k++) {
        const pk_node *d = parts[k];
        if (!d || d->kind != PK_DICT) continue;
        for (size_t i = 0; i < d->u.dict.n && !s; i++) {
            const pk_node *v = d->u.dict.vals[i];
            if (v->kind == PK_NONE || (k == 1 && in_set(skip, d->u.dict.keys[i]))) continue;
            s = walk_child(ws, d->u.dict.keys[i], i, v, depth, false);
        }
    }
    const pk_node *m = dck_pk_get(n, "_modules");
    for (size_t i = 0; i < m->u.dict.n && !s; i++)
        if (m->u.dict.vals[i]->kind != PK_NONE) s = walk_child(ws, m->u.dict.keys[i], i, m->u.dict.vals[i], depth, false);
    return s;
}

/* A quantized tensor's parameters, named after it: NAME.qscheme (torch's
 * name), then per tensor the values NAME.scale and NAME.zero_point, per
 * channel the tensors NAME.scale and NAME.zero_point and the value
 * NAME.axis. They belong to the tensor, so they are reported wherever the
 * tensor is (also among an opaque object's arguments). */
static dck_status walk_qparams(walk_state *ws, const pk_tensor *t, int depth) {
    dck_status s = DCK_OK;
    size_t saved = ws->name.n;
    char axis[32];
    snprintf(axis, sizeof axis, "%lld", (long long)t->qaxis);
    static const char *const parts[] = {"qscheme", "scale", "zero_point", "axis"};
    for (int k = 0; k < (t->per_channel ? 4 : 3) && !s; k++) {
        name_push(&ws->name, parts[k], strlen(parts[k]));
        if (ws->name.oom) return dck_oom(NULL);
        if (k == 0 || k == 3) {
            if (ws->w->value) s = emit_value(ws, cur_name(ws), k == 0 ? t->qscheme : axis);
        } else
            s = walk(ws, k == 1 ? t->qscale : t->qzero, depth + 1, false);
        ws->name.n = saved;
        if (ws->name.p) ws->name.p[saved] = 0;
    }
    return s;
}

static dck_status walk(walk_state *ws, const pk_node *n, int depth, bool tensors_only) {
    if (depth > PK_MAX_WALK_DEPTH)
        return dck_set_error(DCK_ERR_LIMIT, "%s: objects nested deeper than %d levels at %s", ws->label,
                             PK_MAX_WALK_DEPTH, cur_name(ws));
    uint64_t maxv = ws->w->max_visits ? ws->w->max_visits : PK_MAX_WALK_VISITS;
    if (++ws->visits > maxv)
        return dck_set_error(DCK_ERR_LIMIT, "%s: more than %llu objects reachable (shared references)",
                             ws->label, (unsigned long long)maxv);
    dck_status s = DCK_OK;
    switch (n->kind) {
    case PK_TENSOR:
        if (ws->w->tensor && (s = ws->w->tensor(ws->w->ctx, cur_name(ws), n))) return s;
        return n->u.tensor->qscheme ? walk_qparams(ws, n->u.tensor, depth) : DCK_OK;
    case PK_NDARRAY:
        return ws->w->ndarray ? ws->w->ndarray(ws->w->ctx, cur_name(ws), n) : DCK_OK;
    case PK_NONE: case PK_BOOL: case PK_INT: case PK_BIGINT: case PK_FLOAT: {
        if (tensors_only || !ws->w->value) return DCK_OK;
        char *t = dck_pk_scalar_text(n);
        if (!t) return dck_oom(NULL);
        s = emit_value(ws, cur_name(ws), t);
        free(t);
        return s;
    }
    case PK_BYTES: { /* serialized state: recorded by its digest */
        if (tensors_only || !ws->w->value) return DCK_OK;
        char t[48];
        memcpy(t, "bytes:", 6);
        dck_digest_to_hex(dck_xxh128(n->u.s.p, n->u.s.len), t + 6);
        return emit_value(ws, cur_name(ws), t);
    }
    case PK_TUPLE: case PK_LIST: case PK_SET:
        if (!tensors_only && ws->w->value && n->u.seq.n > PK_SEQ_VALUE_MIN && scalar_seq(n)) {
            const char *t = seq_text(ws, n);
            return t ? emit_value(ws, cur_name(ws), t) : dck_oom(NULL);
        }
        for (size_t i = 0; i < n->u.seq.n && !s; i++)
            s = walk_child(ws, NULL, i, n->u.seq.items[i], depth, tensors_only);
        return s;
    case PK_DICT:
        return walk_dict(ws, n, depth, tensors_only);
    case PK_OBJECT: {
        const pk_node *st = n->u.obj.state;
        if (ws->w->other && !tensors_only && (s = ws->w->other(ws->w->ctx, cur_name(ws), n))) return s;
        if (is_module(n)) return walk_module(ws, n, depth);
        if (st) {
            if (st->kind == PK_DICT) s = walk_dict(ws, st, depth, tensors_only);
            else if (st->kind == PK_TUPLE && st->u.seq.n == 2 &&
                     (st->u.seq.items[0]->kind == PK_DICT || st->u.seq.items[0]->kind == PK_NONE)) {
                for (int k = 0; k < 2 && !s; k++)
                    if (st->u.seq.items[k]->kind == PK_DICT)
                        s = walk_dict(ws, st->u.seq.items[k], depth, tensors_only);
            } else
                s = walk(ws, st, depth + 1, tensors_only);
        }
        if (!s && n->u.obj.dict) s = walk_dict(ws, n->u.obj.dict, depth, tensors_only);
        if (!s && n->u.obj.items)
            for (size_t i = 0; i < n->u.obj.items->u.seq.n && !s; i++)
                s = walk_child(ws, NULL, i, n->u.obj.items->u.seq.items[i], depth, tensors_only);
        /* arguments of unknown constructors: only tensors matter there */
        if (!s && n->u.obj.args &&
            (n->u.obj.args->kind == PK_TUPLE || n->u.obj.args->kind == PK_LIST))
            for (size_t i = 0; i < n->u.obj.args->u.seq.n && !s; i++)
                s = walk_child(ws, NULL, i, n->u.obj.args->u.seq.items[i], depth, true);
        return s;
    }
    default:
        if (ws->w->other && !tensors_only) return ws->w->other(ws->w->ctx, cur_name(ws), n);
        return DCK_OK;
    }
}

dck_status dck_pk_walk(const pk_node *root, const char *prefix, const pk_walker *w, const char *label) {
    walk_state ws;
    memset(&ws, 0, sizeof ws);
    ws.w = w;
    ws.label = label ? label : "pickle";
    if (prefix && *prefix) sb_str(&ws.name, prefix);
    if (ws.name.oom) return dck_oom(NULL);
    dck_status s = walk(&ws, root, 0, false);
    free(ws.name.p);
    for (int i = 0; i < PK_SEQ_CACHE; i++) free(ws.seq_cache[i].text);
    return s;
}

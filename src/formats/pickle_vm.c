/* The pickle virtual machine (see pickle_vm.h). Nothing here imports, calls
 * or evaluates: globals are names, and what a call of a global builds is
 * decided by the handler table the context was given, row by row; a call of
 * any other name builds an opaque object. The opcodes are one table,
 * OPCODES, near the end of this file. */
#include "formats/pickle_vm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dck_pk_limits_default(pk_limits *l) {
    l->max_memo = (size_t)1 << 23;
    l->max_stack = (size_t)1 << 22;
    l->max_marks = 10000;
    l->max_nodes = (size_t)1 << 24;
    l->max_bytes = (uint64_t)1 << 30;
    l->max_str = (uint64_t)1 << 30;
    l->max_tensors = DCK_MAX_TENSORS;
}

/* ------------------------------------------------------------------ context */

#define NODE_BLOCK 4096

typedef struct node_block {
    struct node_block *next;
    size_t used;
    pk_node nodes[NODE_BLOCK];
} node_block;

typedef struct mem_block {
    struct mem_block *next;
    size_t used, cap;
    uint8_t data[];
} mem_block;

struct pk_ctx {
    char *label;
    pk_limits lim;
    const pk_handlers *h; /* NULL: every global is opaque */
    node_block *nodes;
    mem_block *mem;
    size_t nnodes;
    uint64_t bytes;
    size_t ntensors;
    pk_node **storages;
    size_t nstorages, cap_storages;
    /* per load */
    const uint8_t *in;
    size_t len, pos;
    int64_t base;
    pk_node **stack;
    size_t sp, scap;
    size_t *marks;
    size_t nmarks, mcap;
    pk_node **memo;
    size_t memo_cap, memo_count;
    pk_node *root; /* set by STOP */
    bool stopped;
};

static const pk_node none_node = {.kind = PK_NONE};

dck_status dck_pk_ctx_create(const char *label, const pk_limits *lim, const pk_handlers *handlers,
                             pk_ctx **out) {
    pk_ctx *c = calloc(1, sizeof *c);
    if (!c) return dck_oom(NULL);
    c->label = dck_strdup(label ? label : "pickle");
    if (!c->label) {
        free(c);
        return dck_oom(NULL);
    }
    if (lim) c->lim = *lim;
    else dck_pk_limits_default(&c->lim);
    c->h = handlers;
    *out = c;
    return DCK_OK;
}

static void free_node_arrays(pk_node *n) {
    switch (n->kind) {
    case PK_TUPLE:
    case PK_LIST:
    case PK_SET:
        free(n->u.seq.items);
        break;
    case PK_DICT:
        free(n->u.dict.keys);
        free(n->u.dict.vals);
        break;
    default:
        break;
    }
}

void dck_pk_ctx_free(pk_ctx *c) {
    if (!c) return;
    for (node_block *b = c->nodes; b;) {
        for (size_t i = 0; i < b->used; i++) free_node_arrays(&b->nodes[i]);
        node_block *nx = b->next;
        free(b);
        b = nx;
    }
    for (mem_block *m = c->mem; m;) {
        mem_block *nx = m->next;
        free(m);
        m = nx;
    }
    free(c->stack);
    free(c->marks);
    free(c->memo);
    free(c->storages);
    free(c->label);
    free(c);
}

size_t dck_pk_node_count(const pk_ctx *c) { return c->nnodes; }

size_t dck_pk_tensor_count(const pk_ctx *c) { return c->ntensors; }

pk_node *const *dck_pk_storages(const pk_ctx *c, size_t *n) {
    *n = c->nstorages;
    return c->storages;
}

static dck_status err_at(pk_ctx *c, dck_status s, const char *what) {
    return dck_set_error(s, "%s: %s at byte %zu", c->label, what, c->pos);
}

dck_status dck_pk_error(pk_ctx *c, dck_status s, const char *what) { return err_at(c, s, what); }

static dck_status account(pk_ctx *c, uint64_t n) {
    if (n > c->lim.max_bytes || c->bytes > c->lim.max_bytes - n)
        return dck_set_error(DCK_ERR_LIMIT, "%s: objects need more than %llu bytes of memory (limit)",
                             c->label, (unsigned long long)c->lim.max_bytes);
    c->bytes += n;
    return DCK_OK;
}

static void *arena_alloc(pk_ctx *c, size_t n, dck_status *st) {
    n = (n + 7) & ~(size_t)7;
    if ((*st = account(c, n))) return NULL;
    if (!c->mem || c->mem->cap - c->mem->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        mem_block *m = malloc(sizeof *m + cap);
        if (!m) {
            *st = dck_oom(NULL);
            return NULL;
        }
        m->used = 0;
        m->cap = cap;
        if (c->mem && n > 65536) { /* keep the current small block first */
            m->next = c->mem->next;
            c->mem->next = m;
            m->used = n;
            return m->data;
        }
        m->next = c->mem;
        c->mem = m;
    }
    void *p = c->mem->data + c->mem->used;
    c->mem->used += n;
    return p;
}

void *dck_pk_alloc(pk_ctx *c, size_t n, dck_status *st) { return arena_alloc(c, n, st); }

static pk_node *new_node(pk_ctx *c, pk_kind k, dck_status *st) {
    if (c->nnodes >= c->lim.max_nodes) {
        *st = dck_set_error(DCK_ERR_LIMIT, "%s: more than %zu objects (limit)", c->label,
                            c->lim.max_nodes);
        return NULL;
    }
    if (!c->nodes || c->nodes->used == NODE_BLOCK) {
        if ((*st = account(c, sizeof(node_block)))) return NULL;
        node_block *b = malloc(sizeof *b);
        if (!b) {
            *st = dck_oom(NULL);
            return NULL;
        }
        b->used = 0;
        b->next = c->nodes;
        c->nodes = b;
    }
    pk_node *n = &c->nodes->nodes[c->nodes->used++];
    memset(n, 0, sizeof *n);
    n->kind = k;
    c->nnodes++;
    *st = DCK_OK;
    return n;
}

pk_node *dck_pk_new_node(pk_ctx *c, pk_kind k, dck_status *st) { return new_node(c, k, st); }

/* Grows an array owned by a node, with accounting. */
static dck_status grow_arr(pk_ctx *c, void **p, size_t *cap, size_t need, size_t sz) {
    if (need <= *cap) return DCK_OK;
    size_t nc = *cap ? *cap * 2 : 4;
    while (nc < need) nc *= 2;
    dck_status s = account(c, (uint64_t)(nc - *cap) * sz);
    if (s) return s;
    void *q = realloc(*p, nc * sz);
    if (!q) return dck_oom(NULL);
    *p = q;
    *cap = nc;
    return DCK_OK;
}

static dck_status seq_push(pk_ctx *c, pk_node *seq, pk_node *item) {
    dck_status s = grow_arr(c, (void **)&seq->u.seq.items, &seq->u.seq.cap, seq->u.seq.n + 1,
                            sizeof(pk_node *));
    if (s) return s;
    seq->u.seq.items[seq->u.seq.n++] = item;
    return DCK_OK;
}

dck_status dck_pk_seq_push(pk_ctx *c, pk_node *seq, pk_node *item) { return seq_push(c, seq, item); }

static dck_status dict_set(pk_ctx *c, pk_node *d, pk_node *k, pk_node *v) {
    /* Later keys replace earlier equal string/int keys, as Python dicts do. */
    for (size_t i = 0; i < d->u.dict.n; i++) {
        pk_node *o = d->u.dict.keys[i];
        if (o->kind == k->kind &&
            ((k->kind == PK_STR && o->u.s.len == k->u.s.len && !memcmp(o->u.s.p, k->u.s.p, k->u.s.len)) ||
             (k->kind == PK_INT && o->u.i == k->u.i))) {
            if (d->u.dict.n > 64) break; /* large dicts: keep all, checked later by name */
            d->u.dict.vals[i] = v;
            return DCK_OK;
        }
        if (i > 64) break;
    }
    size_t cap = d->u.dict.cap;
    dck_status s = grow_arr(c, (void **)&d->u.dict.keys, &cap, d->u.dict.n + 1, sizeof(pk_node *));
    if (s) return s;
    size_t cap2 = d->u.dict.cap;
    s = grow_arr(c, (void **)&d->u.dict.vals, &cap2, d->u.dict.n + 1, sizeof(pk_node *));
    if (s) return s;
    d->u.dict.cap = cap;
    d->u.dict.keys[d->u.dict.n] = k;
    d->u.dict.vals[d->u.dict.n++] = v;
    return DCK_OK;
}

dck_status dck_pk_dict_set(pk_ctx *c, pk_node *d, pk_node *k, pk_node *v) { return dict_set(c, d, k, v); }

static pk_node *new_str(pk_ctx *c, const char *p, size_t len, int64_t src, pk_kind k, dck_status *st) {
    pk_node *n = new_node(c, k, st);
    if (!n) return NULL;
    if (k == PK_BYTES && src >= 0) { /* zero-copy: the bytes stay in the input */
        n->u.s.p = p;
    } else {
        char *q = arena_alloc(c, len + 1, st);
        if (!q) return NULL;
        memcpy(q, p, len);
        q[len] = 0;
        n->u.s.p = q;
    }
    n->u.s.len = len;
    n->u.s.src = src;
    return n;
}

pk_node *dck_pk_new_str(pk_ctx *c, const char *p, size_t len, int64_t src, pk_kind k,
                        dck_status *st) {
    return new_str(c, p, len, src, k, st);
}

/* The tensor limit is checked before the node is made (so a stream with too
 * many tensors fails at the first one beyond the limit). */
dck_status dck_pk_new_tensor(pk_ctx *c, pk_node **out) {
    if (c->ntensors >= c->lim.max_tensors) return err_at(c, DCK_ERR_LIMIT, "more tensors than the limit");
    dck_status s;
    pk_node *t = new_node(c, PK_TENSOR, &s);
    if (!t) return s;
    pk_tensor *tt = arena_alloc(c, sizeof *tt, &s);
    if (!tt) return s;
    memset(tt, 0, sizeof *tt);
    t->u.tensor = tt;
    c->ntensors++;
    *out = t;
    return DCK_OK;
}

dck_status dck_pk_add_storage(pk_ctx *c, pk_node *storage) {
    dck_status s = grow_arr(c, (void **)&c->storages, &c->cap_storages, c->nstorages + 1, sizeof(pk_node *));
    if (s) return s;
    c->storages[c->nstorages++] = storage;
    return DCK_OK;
}

/* ------------------------------------------------------------------ stack */

static dck_status push(pk_ctx *c, pk_node *n) {
    if (c->sp >= c->lim.max_stack)
        return err_at(c, DCK_ERR_LIMIT, "stack deeper than the limit");
    if (c->sp == c->scap) {
        size_t nc = c->scap ? c->scap * 2 : 64;
        pk_node **q = realloc(c->stack, nc * sizeof *q);
        if (!q) return dck_oom(NULL);
        c->stack = q;
        c->scap = nc;
    }
    c->stack[c->sp++] = n;
    return DCK_OK;
}

static size_t floor_sp(pk_ctx *c) { return c->nmarks ? c->marks[c->nmarks - 1] : 0; }

static dck_status pop(pk_ctx *c, pk_node **out) {
    if (c->sp <= floor_sp(c)) return err_at(c, DCK_ERR_FORMAT, "stack underflow");
    *out = c->stack[--c->sp];
    return DCK_OK;
}

static dck_status top(pk_ctx *c, pk_node **out) {
    if (c->sp <= floor_sp(c)) return err_at(c, DCK_ERR_FORMAT, "stack underflow");
    *out = c->stack[c->sp - 1];
    return DCK_OK;
}

static dck_status pop_mark(pk_ctx *c, size_t *from) {
    if (!c->nmarks) return err_at(c, DCK_ERR_FORMAT, "no MARK on the stack");
    *from = c->marks[--c->nmarks];
    return DCK_OK;
}

/* ------------------------------------------------------------------ input */

static dck_status need(pk_ctx *c, uint64_t n) {
    if (n > c->len - c->pos) return err_at(c, DCK_ERR_TRUNCATED, "pickle ends early");
    return DCK_OK;
}

static uint64_t rd_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* A text line ending in \n (protocol 0 operands). */
static dck_status read_line(pk_ctx *c, const char **p, size_t *n) {
    const uint8_t *s = c->in + c->pos;
    const uint8_t *e = memchr(s, '\n', c->len - c->pos);
    if (!e) return err_at(c, DCK_ERR_TRUNCATED, "pickle ends inside a text operand");
    *p = (const char *)s;
    *n = (size_t)(e - s);
    c->pos += *n + 1;
    return DCK_OK;
}

/* A little-endian length of `bytes` bytes, then that many bytes present. */
static dck_status read_len(pk_ctx *c, int bytes, uint64_t *len) {
    dck_status s = need(c, (uint64_t)bytes);
    if (s) return s;
    uint64_t v = rd_le(c->in + c->pos, bytes);
    c->pos += (size_t)bytes;
    if (v > c->lim.max_str) return err_at(c, DCK_ERR_LIMIT, "string or bytes longer than the limit");
    if ((s = need(c, v))) return s;
    *len = v;
    return DCK_OK;
}

/* ------------------------------------------------------------------ reading nodes */

bool dck_pk_is_global(const pk_node *n, const char *module, const char *name) {
    return n && n->kind == PK_GLOBAL && !strcmp(n->u.global.module, module) &&
           !strcmp(n->u.global.name, name);
}

bool dck_pk_object_is(const pk_node *n, const char *module, const char *name) {
    return n && n->kind == PK_OBJECT && dck_pk_is_global(n->u.obj.cls, module, name);
}

pk_node **dck_pk_items(const pk_node *n, size_t *count) {
    static pk_node *no_items[1];
    if (n && (n->kind == PK_TUPLE || n->kind == PK_LIST || n->kind == PK_SET)) {
        *count = n->u.seq.n;
        return n->u.seq.items ? n->u.seq.items : no_items;
    }
    *count = 0;
    return NULL;
}

bool dck_pk_int(const pk_node *n, int64_t *out) {
    if (!n) return false;
    if (n->kind == PK_INT) {
        *out = n->u.i;
        return true;
    }
    if (n->kind == PK_BOOL) {
        *out = n->u.b;
        return true;
    }
    return false;
}

static pk_node *dict_get(const pk_node *d, const char *key) {
    if (!d || d->kind != PK_DICT) return NULL;
    size_t kl = strlen(key);
    for (size_t i = 0; i < d->u.dict.n; i++) {
        const pk_node *k = d->u.dict.keys[i];
        if (k->kind == PK_STR && k->u.s.len == kl && !memcmp(k->u.s.p, key, kl))
            return d->u.dict.vals[i];
    }
    return NULL;
}

pk_node *dck_pk_get(const pk_node *n, const char *key) {
    if (!n) return NULL;
    if (n->kind == PK_DICT) return dict_get(n, key);
    if (n->kind != PK_OBJECT) return NULL;
    pk_node *st = n->u.obj.state, *r;
    if (st && st->kind == PK_DICT && (r = dict_get(st, key))) return r;
    if (st && st->kind == PK_TUPLE && st->u.seq.n == 2) {
        if ((r = dict_get(st->u.seq.items[0], key))) return r;
        if ((r = dict_get(st->u.seq.items[1], key))) return r;
    }
    return dict_get(n->u.obj.dict, key);
}

/* ------------------------------------------------------------------ calls of globals */

static dck_status make_object(pk_ctx *c, pk_node *cls, pk_node *args, pk_node **out) {
    dck_status s;
    pk_node *o = new_node(c, PK_OBJECT, &s);
    if (!o) return s;
    o->u.obj.cls = cls;
    o->u.obj.args = args;
    /* a storage handed to a global nobody interprets: remember which, so
     * that the reader can name it when refusing the unread bytes */
    size_t n;
    pk_node **a = dck_pk_items(args, &n);
    for (size_t i = 0; a && cls->kind == PK_GLOBAL && i < n; i++)
        if (a[i]->kind == PK_STORAGE && !a[i]->u.storage.passed_to) a[i]->u.storage.passed_to = cls;
    *out = o;
    return DCK_OK;
}

/* The row of the handlers' allow-list for a global, or NULL. */
static const pk_global_rule *find_rule(const pk_ctx *c, const pk_node *g) {
    if (!c->h || g->kind != PK_GLOBAL) return NULL;
    for (size_t i = 0; i < c->h->nglobals; i++) {
        const pk_global_rule *r = &c->h->globals[i];
        if (!strcmp(r->module, g->u.global.module) && !strcmp(r->name, g->u.global.name)) return r;
    }
    return NULL;
}

/* fn(*args) (reduce) or fn.__new__(fn, *args): the allow-list's handler,
 * else (no row, no handler, or the handler keeps it opaque) an object. */
static dck_status call_global(pk_ctx *c, bool reduce, pk_node *fn, pk_node *args, int depth,
                              pk_node **out) {
    const pk_global_rule *r = find_rule(c, fn);
    pk_call_fn f = r ? (reduce ? r->reduce : r->newobj) : NULL;
    if (f) {
        pk_call call = {fn, args, NULL, 0, depth};
        call.a = dck_pk_items(args, &call.n);
        pk_node *v = NULL;
        dck_status s = f(c, &call, &v);
        if (s) return s;
        if (v) {
            *out = v;
            return DCK_OK;
        }
    }
    return make_object(c, fn, args, out);
}

dck_status dck_pk_reduce(pk_ctx *c, pk_node *fn, pk_node *args, int depth, pk_node **out) {
    return call_global(c, true, fn, args, depth, out);
}

static dck_status persistent_load(pk_ctx *c, pk_node *pid, pk_node **out) {
    if (c->h && c->h->persistent_load) return c->h->persistent_load(c, pid, out);
    dck_status s;
    pk_node *r = new_node(c, PK_PERSID, &s);
    if (!r) return s;
    r->u.persid.pid = pid;
    *out = r;
    return DCK_OK;
}

/* ------------------------------------------------------------------ text operands */

static int hexval(int ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* A string node over bytes decoded into the arena (no source offset). */
static dck_status decoded_str_node(pk_ctx *c, const uint8_t *q, size_t k, pk_node **out) {
    dck_status s;
    pk_node *r = new_node(c, PK_STR, &s);
    if (!r) return s;
    r->u.s.p = (const char *)q;
    r->u.s.len = k;
    r->u.s.src = -1;
    *out = r;
    return DCK_OK;
}

/* STRING: a Python repr with quotes and backslash escapes. */
static dck_status decode_string(pk_ctx *c, const char *p, size_t n, pk_node **out) {
    if (n < 2 || (p[0] != '\'' && p[0] != '"') || p[n - 1] != p[0])
        return err_at(c, DCK_ERR_FORMAT, "STRING operand without quotes");
    p++;
    n -= 2;
    dck_status s;
    uint8_t *q = arena_alloc(c, n + 1, &s);
    if (!q) return s;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '\\' || i + 1 == n) { q[k++] = (uint8_t)p[i]; continue; }
        char e = p[++i];
        switch (e) {
        case 'n': q[k++] = '\n'; break;
        case 't': q[k++] = '\t'; break;
        case 'r': q[k++] = '\r'; break;
        case '0': case '1': case '2': case '3': case '4': case '5': case '6': case '7': {
            int v = 0, d = 0;
            while (d < 3 && i < n && p[i] >= '0' && p[i] <= '7') { v = v * 8 + (p[i] - '0'); i++; d++; }
            i--;
            q[k++] = (uint8_t)v;
            break;
        }
        case 'x':
            if (i + 2 < n && hexval(p[i + 1]) >= 0 && hexval(p[i + 2]) >= 0) {
                q[k++] = (uint8_t)(hexval(p[i + 1]) * 16 + hexval(p[i + 2]));
                i += 2;
            } else
                return err_at(c, DCK_ERR_FORMAT, "bad \\x escape in STRING");
            break;
        default: q[k++] = (uint8_t)e; break;
        }
    }
    q[k] = 0;
    return decoded_str_node(c, q, k, out);
}

/* UNICODE: raw-unicode-escape (\uXXXX, \UXXXXXXXX; other bytes are latin1). */
static dck_status decode_unicode(pk_ctx *c, const char *p, size_t n, pk_node **out) {
    dck_status s;
    if (n > (SIZE_MAX - 1) / 4) return err_at(c, DCK_ERR_LIMIT, "string too long");
    uint8_t *q = arena_alloc(c, n * 4 + 1, &s);
    if (!q) return s;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t ch = (uint8_t)p[i];
        if (ch == '\\' && i + 1 < n && (p[i + 1] == 'u' || p[i + 1] == 'U')) {
            int digits = p[i + 1] == 'u' ? 4 : 8;
            if (i + 2 + (size_t)digits > n) return err_at(c, DCK_ERR_FORMAT, "bad \\u escape");
            uint32_t cp = 0;
            for (int d = 0; d < digits; d++) {
                int h = hexval(p[i + 2 + d]);
                if (h < 0) return err_at(c, DCK_ERR_FORMAT, "bad \\u escape");
                cp = cp * 16 + (uint32_t)h;
            }
            if (cp > 0x10ffff) return err_at(c, DCK_ERR_FORMAT, "bad \\U escape");
            k += dck_utf8_put((char *)q + k, cp);
            i += 1 + (size_t)digits;
        } else
            k += dck_utf8_put((char *)q + k, ch);
    }
    q[k] = 0;
    return decoded_str_node(c, q, k, out);
}

static dck_status parse_int_text(pk_ctx *c, const char *p, size_t n, pk_node **out) {
    char buf[64];
    if (n && p[n - 1] == 'L') n--;
    if (n == 0 || n >= sizeof buf) return err_at(c, DCK_ERR_UNSUPPORTED, "integer operand too long");
    memcpy(buf, p, n);
    buf[n] = 0;
    dck_status s;
    pk_node *r;
    if (!strcmp(buf, "00") || !strcmp(buf, "01")) {
        r = new_node(c, PK_BOOL, &s);
        if (!r) return s;
        r->u.b = buf[1] == '1';
        *out = r;
        return DCK_OK;
    }
    char *end;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (*end) return err_at(c, DCK_ERR_FORMAT, "malformed integer operand");
    if (errno) { /* beyond int64: to little-endian two's complement, as LONG1 */
        uint8_t mag[32] = {0};
        const char *d = buf + (buf[0] == '-' || buf[0] == '+');
        for (; *d; d++) {
            unsigned carry = (unsigned)(*d - '0');
            for (size_t i = 0; i < sizeof mag; i++) {
                unsigned x = mag[i] * 10u + carry;
                mag[i] = (uint8_t)x;
                carry = x >> 8;
            }
        }
        if (buf[0] == '-') {
            unsigned carry = 1;
            for (size_t i = 0; i < sizeof mag; i++) {
                unsigned x = (uint8_t)~mag[i] + carry;
                mag[i] = (uint8_t)x;
                carry = x >> 8;
            }
        }
        size_t n = sizeof mag; /* drop redundant sign bytes */
        while (n > 1 && ((mag[n - 1] == 0 && !(mag[n - 2] & 0x80)) || (mag[n - 1] == 0xff && (mag[n - 2] & 0x80))))
            n--;
        r = new_str(c, (const char *)mag, n, -1, PK_BIGINT, &s);
        if (!r) return s;
        *out = r;
        return DCK_OK;
    }
    r = new_node(c, PK_INT, &s);
    if (!r) return s;
    r->u.i = v;
    *out = r;
    return DCK_OK;
}

/* ------------------------------------------------------------------ memo and globals */

static dck_status memo_key_text(pk_ctx *c, const char *p, size_t n, uint64_t *key) {
    char buf[32];
    if (n == 0 || n >= sizeof buf) return err_at(c, DCK_ERR_FORMAT, "bad memo key");
    memcpy(buf, p, n);
    buf[n] = 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(buf, &end, 10);
    if (*end || errno || buf[0] == '-') return err_at(c, DCK_ERR_FORMAT, "bad memo key");
    *key = v;
    return DCK_OK;
}

static dck_status memo_put(pk_ctx *c, uint64_t key) {
    pk_node *t = NULL;
    dck_status s = top(c, &t);
    if (s) return s;
    if (key >= c->lim.max_memo) return err_at(c, DCK_ERR_LIMIT, "memo key beyond the memo size limit");
    if (key >= c->memo_cap) {
        size_t nc = c->memo_cap ? c->memo_cap : 64;
        while (nc <= key) nc *= 2;
        if (nc > c->lim.max_memo) nc = c->lim.max_memo;
        if ((s = account(c, (nc - c->memo_cap) * sizeof(pk_node *)))) return s;
        pk_node **q = realloc(c->memo, nc * sizeof *q);
        if (!q) return dck_oom(NULL);
        memset(q + c->memo_cap, 0, (nc - c->memo_cap) * sizeof *q);
        c->memo = q;
        c->memo_cap = nc;
    }
    if (!c->memo[key]) c->memo_count++;
    c->memo[key] = t;
    return DCK_OK;
}

static dck_status memo_get(pk_ctx *c, uint64_t key) {
    if (key >= c->memo_cap || !c->memo[key]) return err_at(c, DCK_ERR_FORMAT, "memo key not defined");
    return push(c, c->memo[key]);
}

static dck_status global_from(pk_ctx *c, const char *m, size_t ml, const char *nm, size_t nl) {
    dck_status s;
    pk_node *g = new_node(c, PK_GLOBAL, &s);
    if (!g) return s;
    char *mm = arena_alloc(c, ml + 1, &s);
    if (!mm) return s;
    char *nn = arena_alloc(c, nl + 1, &s);
    if (!nn) return s;
    memcpy(mm, m, ml);
    mm[ml] = 0;
    memcpy(nn, nm, nl);
    nn[nl] = 0;
    g->u.global.module = mm;
    g->u.global.name = nn;
    return push(c, g);
}

/* ------------------------------------------------------------------ containers */

static dck_status build_seq(pk_ctx *c, pk_kind k, size_t from) {
    dck_status s;
    pk_node *t = new_node(c, k, &s);
    if (!t) return s;
    for (size_t i = from; i < c->sp; i++)
        if ((s = seq_push(c, t, c->stack[i]))) return s;
    c->sp = from;
    return push(c, t);
}

static dck_status add_to(pk_ctx *c, pk_node *target, size_t from) {
    dck_status s;
    if (target->kind == PK_OBJECT) {
        if (!target->u.obj.items) {
            target->u.obj.items = new_node(c, PK_LIST, &s);
            if (!target->u.obj.items) return s;
        }
        target = target->u.obj.items;
    }
    if (target->kind != PK_LIST && target->kind != PK_SET)
        return err_at(c, DCK_ERR_FORMAT, "APPEND to something that is not a list");
    for (size_t i = from; i < c->sp; i++)
        if ((s = seq_push(c, target, c->stack[i]))) return s;
    c->sp = from;
    return DCK_OK;
}

static dck_status set_items(pk_ctx *c, pk_node *target, size_t from) {
    dck_status s;
    if ((c->sp - from) % 2) return err_at(c, DCK_ERR_FORMAT, "SETITEMS with an odd number of values");
    if (target->kind == PK_OBJECT) {
        if (!target->u.obj.dict) {
            target->u.obj.dict = new_node(c, PK_DICT, &s);
            if (!target->u.obj.dict) return s;
        }
        target = target->u.obj.dict;
    }
    if (target->kind != PK_DICT) return err_at(c, DCK_ERR_FORMAT, "SETITEM on something that is not a dict");
    for (size_t i = from; i < c->sp; i += 2)
        if ((s = dict_set(c, target, c->stack[i], c->stack[i + 1]))) return s;
    c->sp = from;
    return DCK_OK;
}

/* Pushes a new empty container of kind k. */
static dck_status push_new(pk_ctx *c, pk_kind k) {
    dck_status s;
    pk_node *n = new_node(c, k, &s);
    if (!n) return s;
    return push(c, n);
}

/* ------------------------------------------------------------------ opcodes
 * One function per opcode (or family of opcodes that differ in operand
 * width); op is the opcode byte. The table OPCODES below maps bytes to them. */

typedef dck_status (*op_fn)(pk_ctx *c, uint8_t op);

static dck_status op_proto(pk_ctx *c, uint8_t op) {
    (void)op;
    DCK_TRY(need(c, 1));
    if (c->in[c->pos] > 5) return err_at(c, DCK_ERR_UNSUPPORTED, "pickle protocol above 5");
    c->pos++;
    return DCK_OK;
}

static dck_status op_frame(pk_ctx *c, uint8_t op) { /* frames are inline; the length is advisory */
    (void)op;
    DCK_TRY(need(c, 8));
    c->pos += 8;
    return DCK_OK;
}

static dck_status op_stop(pk_ctx *c, uint8_t op) {
    (void)op;
    DCK_TRY(pop(c, &c->root));
    c->stopped = true;
    return DCK_OK;
}

static dck_status op_mark(pk_ctx *c, uint8_t op) {
    (void)op;
    if (c->nmarks >= c->lim.max_marks) return err_at(c, DCK_ERR_LIMIT, "MARKs nested deeper than the limit");
    DCK_TRY(dck_grow((void **)&c->marks, &c->mcap, c->nmarks + 1, sizeof *c->marks));
    c->marks[c->nmarks++] = c->sp;
    return DCK_OK;
}

static dck_status op_pop(pk_ctx *c, uint8_t op) {
    (void)op;
    if (c->sp > floor_sp(c)) c->sp--;
    else if (c->nmarks) c->nmarks--;
    else return err_at(c, DCK_ERR_FORMAT, "stack underflow");
    return DCK_OK;
}

static dck_status op_pop_mark(pk_ctx *c, uint8_t op) {
    (void)op;
    size_t from = 0;
    DCK_TRY(pop_mark(c, &from));
    c->sp = from;
    return DCK_OK;
}

static dck_status op_dup(pk_ctx *c, uint8_t op) {
    (void)op;
    pk_node *n = NULL;
    DCK_TRY(top(c, &n));
    return push(c, n);
}

static dck_status op_none(pk_ctx *c, uint8_t op) {
    (void)op;
    return push(c, (pk_node *)&none_node);
}

static dck_status op_bool(pk_ctx *c, uint8_t op) { /* NEWTRUE 0x88, NEWFALSE 0x89 */
    dck_status s;
    pk_node *n = new_node(c, PK_BOOL, &s);
    if (!n) return s;
    n->u.b = op == 0x88;
    return push(c, n);
}

static dck_status op_int_text(pk_ctx *c, uint8_t op) { /* INT, LONG: decimal text */
    (void)op;
    const char *lp = NULL;
    size_t ll = 0;
    pk_node *n = NULL;
    DCK_TRY(read_line(c, &lp, &ll));
    DCK_TRY(parse_int_text(c, lp, ll, &n));
    return push(c, n);
}

static dck_status op_binint(pk_ctx *c, uint8_t op) { /* BININT (int32), BININT1 (u8), BININT2 (u16) */
    int b = op == 'J' ? 4 : op == 'K' ? 1 : 2;
    DCK_TRY(need(c, (uint64_t)b));
    uint64_t v = rd_le(c->in + c->pos, b);
    c->pos += (size_t)b;
    dck_status s;
    pk_node *n = new_node(c, PK_INT, &s);
    if (!n) return s;
    n->u.i = b == 4 ? (int64_t)(int32_t)(uint32_t)v : (int64_t)v;
    return push(c, n);
}

static dck_status op_long_bin(pk_ctx *c, uint8_t op) { /* LONG1, LONG4: two's complement bytes */
    int b = op == 0x8a ? 1 : 4;
    DCK_TRY(need(c, (uint64_t)b));
    int64_t cnt = op == 0x8a ? (int64_t)c->in[c->pos] : (int64_t)(int32_t)(uint32_t)rd_le(c->in + c->pos, 4);
    c->pos += (size_t)b;
    if (cnt < 0) return err_at(c, DCK_ERR_FORMAT, "LONG4 with a negative length");
    if ((uint64_t)cnt > c->lim.max_str) return err_at(c, DCK_ERR_LIMIT, "integer longer than the limit");
    DCK_TRY(need(c, (uint64_t)cnt));
    const uint8_t *p = c->in + c->pos;
    c->pos += (size_t)cnt;
    dck_status s;
    pk_node *n = NULL;
    if (cnt <= 8) {
        uint64_t v = cnt ? rd_le(p, (int)cnt) : 0;
        if (cnt && cnt < 8 && (p[cnt - 1] & 0x80)) v |= ~(uint64_t)0 << (8 * cnt);
        if (!(n = new_node(c, PK_INT, &s))) return s;
        n->u.i = (int64_t)v;
    } else if (!(n = new_str(c, (const char *)p, (size_t)cnt, c->base + (int64_t)(p - c->in), PK_BIGINT, &s)))
        return s;
    return push(c, n);
}

static dck_status op_float_text(pk_ctx *c, uint8_t op) { /* FLOAT: repr text */
    (void)op;
    const char *lp = NULL;
    size_t ll = 0;
    DCK_TRY(read_line(c, &lp, &ll));
    char buf[64];
    if (ll == 0 || ll >= sizeof buf) return err_at(c, DCK_ERR_FORMAT, "bad FLOAT operand");
    memcpy(buf, lp, ll);
    buf[ll] = 0;
    char *end;
    double v = strtod(buf, &end);
    if (*end) return err_at(c, DCK_ERR_FORMAT, "bad FLOAT operand");
    dck_status s;
    pk_node *n = new_node(c, PK_FLOAT, &s);
    if (!n) return s;
    n->u.f = v;
    return push(c, n);
}

static dck_status op_binfloat(pk_ctx *c, uint8_t op) { /* big-endian IEEE double */
    (void)op;
    DCK_TRY(need(c, 8));
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | c->in[c->pos + (size_t)i];
    c->pos += 8;
    dck_status s;
    pk_node *n = new_node(c, PK_FLOAT, &s);
    if (!n) return s;
    memcpy(&n->u.f, &v, 8);
    return push(c, n);
}

static dck_status op_string(pk_ctx *c, uint8_t op) { /* STRING: quoted repr */
    (void)op;
    const char *lp = NULL;
    size_t ll = 0;
    pk_node *n = NULL;
    DCK_TRY(read_line(c, &lp, &ll));
    DCK_TRY(decode_string(c, lp, ll, &n));
    return push(c, n);
}

static dck_status op_unicode(pk_ctx *c, uint8_t op) { /* UNICODE: raw-unicode-escape */
    (void)op;
    const char *lp = NULL;
    size_t ll = 0;
    pk_node *n = NULL;
    DCK_TRY(read_line(c, &lp, &ll));
    DCK_TRY(decode_unicode(c, lp, ll, &n));
    return push(c, n);
}

/* BINSTRING, SHORT_BINSTRING, BINUNICODE, SHORT_BINUNICODE, BINUNICODE8 */
static dck_status op_binstr(pk_ctx *c, uint8_t op) {
    uint64_t L = 0;
    DCK_TRY(read_len(c, op == 'U' || op == 0x8c ? 1 : op == 0x8d ? 8 : 4, &L));
    if (op == 'T' && L > 0x7fffffffu) return err_at(c, DCK_ERR_FORMAT, "BINSTRING with a negative length");
    dck_status s;
    pk_node *n = new_str(c, (const char *)c->in + c->pos, (size_t)L, c->base + (int64_t)c->pos, PK_STR, &s);
    if (!n) return s;
    c->pos += (size_t)L;
    return push(c, n);
}

/* BINBYTES, SHORT_BINBYTES, BINBYTES8, BYTEARRAY8 */
static dck_status op_binbytes(pk_ctx *c, uint8_t op) {
    uint64_t L = 0;
    DCK_TRY(read_len(c, op == 'C' ? 1 : op == 'B' ? 4 : 8, &L));
    dck_status s;
    pk_node *n = new_str(c, (const char *)c->in + c->pos, (size_t)L, c->base + (int64_t)c->pos, PK_BYTES, &s);
    if (!n) return s;
    c->pos += (size_t)L;
    return push(c, n);
}

static dck_status op_empty_tuple(pk_ctx *c, uint8_t op) { (void)op; return push_new(c, PK_TUPLE); }
static dck_status op_empty_list(pk_ctx *c, uint8_t op) { (void)op; return push_new(c, PK_LIST); }
static dck_status op_empty_dict(pk_ctx *c, uint8_t op) { (void)op; return push_new(c, PK_DICT); }
static dck_status op_empty_set(pk_ctx *c, uint8_t op) { (void)op; return push_new(c, PK_SET); }

/* TUPLE, LIST, FROZENSET: the items above the last MARK. */
static dck_status op_seq_from_mark(pk_ctx *c, uint8_t op) {
    size_t from = 0;
    DCK_TRY(pop_mark(c, &from));
    return build_seq(c, op == 't' ? PK_TUPLE : op == 'l' ? PK_LIST : PK_SET, from);
}

static dck_status op_tuple_n(pk_ctx *c, uint8_t op) { /* TUPLE1..3: the top 1..3 items */
    size_t k = (size_t)(op - 0x84);
    if (c->sp < floor_sp(c) + k) return err_at(c, DCK_ERR_FORMAT, "stack underflow");
    return build_seq(c, PK_TUPLE, c->sp - k);
}

static dck_status op_append(pk_ctx *c, uint8_t op) {
    (void)op;
    pk_node *x = NULL, *n = NULL;
    DCK_TRY(pop(c, &x));
    DCK_TRY(top(c, &n));
    c->sp++;
    c->stack[c->sp - 1] = x;
    return add_to(c, n, c->sp - 1);
}

static dck_status op_appends(pk_ctx *c, uint8_t op) { /* APPENDS (lists), ADDITEMS (sets) */
    size_t from = 0;
    DCK_TRY(pop_mark(c, &from));
    if (from == 0 || from <= floor_sp(c))
        return err_at(c, DCK_ERR_FORMAT, op == 'e' ? "APPENDS without a list" : "ADDITEMS without a set");
    return add_to(c, c->stack[from - 1], from);
}

static dck_status op_dict(pk_ctx *c, uint8_t op) {
    (void)op;
    size_t from = 0;
    DCK_TRY(pop_mark(c, &from));
    dck_status s;
    pk_node *n = new_node(c, PK_DICT, &s);
    if (!n) return s;
    DCK_TRY(set_items(c, n, from));
    return push(c, n);
}

static dck_status op_setitem(pk_ctx *c, uint8_t op) {
    (void)op;
    if (c->sp < floor_sp(c) + 3) return err_at(c, DCK_ERR_FORMAT, "stack underflow");
    return set_items(c, c->stack[c->sp - 3], c->sp - 2);
}

static dck_status op_setitems(pk_ctx *c, uint8_t op) {
    (void)op;
    size_t from = 0;
    DCK_TRY(pop_mark(c, &from));
    if (from == 0 || from <= floor_sp(c)) return err_at(c, DCK_ERR_FORMAT, "SETITEMS without a dict");
    return set_items(c, c->stack[from - 1], from);
}

static dck_status op_global(pk_ctx *c, uint8_t op) { /* GLOBAL: module\nname\n */
    (void)op;
    const char *lp = NULL, *lp2 = NULL;
    size_t ll = 0, ll2 = 0;
    DCK_TRY(read_line(c, &lp, &ll));
    DCK_TRY(read_line(c, &lp2, &ll2));
    return global_from(c, lp, ll, lp2, ll2);
}

static dck_status op_stack_global(pk_ctx *c, uint8_t op) {
    (void)op;
    pk_node *x = NULL, *y = NULL;
    DCK_TRY(pop(c, &y));
    DCK_TRY(pop(c, &x));
    if (x->kind != PK_STR || y->kind != PK_STR)
        return err_at(c, DCK_ERR_FORMAT, "STACK_GLOBAL operands are not strings");
    return global_from(c, x->u.s.p, x->u.s.len, y->u.s.p, y->u.s.len);
}

static dck_status op_reduce(pk_ctx *c, uint8_t op) {
    (void)op;
    pk_node *x = NULL, *y = NULL, *n = NULL;
    DCK_TRY(pop(c, &y));
    DCK_TRY(pop(c, &x));
    DCK_TRY(call_global(c, true, x, y, 0, &n));
    return push(c, n);
}

static dck_status op_newobj(pk_ctx *c, uint8_t op) { /* NEWOBJ: cls args; NEWOBJ_EX: cls args kwargs */
    pk_node *x = NULL, *y = NULL, *n = NULL;
    if (op == 0x92) DCK_TRY(pop(c, &n)); /* keyword arguments: not kept */
    DCK_TRY(pop(c, &y));
    DCK_TRY(pop(c, &x));
    DCK_TRY(call_global(c, false, x, y, 0, &n));
    return push(c, n);
}

static dck_status op_inst(pk_ctx *c, uint8_t op) { /* INST: module\nname\n, arguments from MARK */
    (void)op;
    const char *lp = NULL, *lp2 = NULL;
    size_t ll = 0, ll2 = 0, from = 0;
    pk_node *n = NULL;
    DCK_TRY(read_line(c, &lp, &ll));
    DCK_TRY(read_line(c, &lp2, &ll2));
    DCK_TRY(pop_mark(c, &from));
    DCK_TRY(build_seq(c, PK_TUPLE, from));
    DCK_TRY(global_from(c, lp, ll, lp2, ll2));
    pk_node *x = c->stack[--c->sp];
    pk_node *y = c->stack[--c->sp];
    DCK_TRY(call_global(c, false, x, y, 0, &n));
    return push(c, n);
}

static dck_status op_obj(pk_ctx *c, uint8_t op) { /* OBJ: class and arguments from MARK */
    (void)op;
    size_t from = 0;
    pk_node *n = NULL;
    DCK_TRY(pop_mark(c, &from));
    if (from >= c->sp) return err_at(c, DCK_ERR_FORMAT, "OBJ without a class");
    pk_node *x = c->stack[from];
    DCK_TRY(build_seq(c, PK_TUPLE, from + 1));
    pk_node *y = c->stack[--c->sp];
    c->sp = from;
    DCK_TRY(call_global(c, false, x, y, 0, &n));
    return push(c, n);
}

static dck_status op_build(pk_ctx *c, uint8_t op) { /* BUILD: obj.__setstate__(state) */
    (void)op;
    pk_node *x = NULL, *y = NULL;
    DCK_TRY(pop(c, &y));
    DCK_TRY(top(c, &x));
    if (x->kind == PK_OBJECT) {
        x->u.obj.state = y;
        return DCK_OK;
    }
    return c->h && c->h->build ? c->h->build(c, x, y) : DCK_OK;
}

static dck_status op_put(pk_ctx *c, uint8_t op) { /* PUT: decimal key */
    (void)op;
    const char *lp = NULL;
    size_t ll = 0;
    uint64_t L = 0;
    DCK_TRY(read_line(c, &lp, &ll));
    DCK_TRY(memo_key_text(c, lp, ll, &L));
    return memo_put(c, L);
}

static dck_status op_binput(pk_ctx *c, uint8_t op) { /* BINPUT (u8), LONG_BINPUT (u32) */
    int b = op == 'q' ? 1 : 4;
    DCK_TRY(need(c, (uint64_t)b));
    uint64_t L = rd_le(c->in + c->pos, b);
    c->pos += (size_t)b;
    return memo_put(c, L);
}

static dck_status op_memoize(pk_ctx *c, uint8_t op) {
    (void)op;
    return memo_put(c, c->memo_count);
}

static dck_status op_get(pk_ctx *c, uint8_t op) { /* GET: decimal key */
    (void)op;
    const char *lp = NULL;
    size_t ll = 0;
    uint64_t L = 0;
    DCK_TRY(read_line(c, &lp, &ll));
    DCK_TRY(memo_key_text(c, lp, ll, &L));
    return memo_get(c, L);
}

static dck_status op_binget(pk_ctx *c, uint8_t op) { /* BINGET (u8), LONG_BINGET (u32) */
    int b = op == 'h' ? 1 : 4;
    DCK_TRY(need(c, (uint64_t)b));
    uint64_t L = rd_le(c->in + c->pos, b);
    c->pos += (size_t)b;
    return memo_get(c, L);
}

static dck_status op_persid(pk_ctx *c, uint8_t op) { /* PERSID: the id as text */
    (void)op;
    const char *lp = NULL;
    size_t ll = 0;
    dck_status s;
    pk_node *x = NULL, *n = NULL;
    DCK_TRY(read_line(c, &lp, &ll));
    if (!(x = new_str(c, lp, ll, -1, PK_STR, &s))) return s;
    DCK_TRY(persistent_load(c, x, &n));
    return push(c, n);
}

static dck_status op_binpersid(pk_ctx *c, uint8_t op) { /* BINPERSID: the id from the stack */
    (void)op;
    pk_node *x = NULL, *n = NULL;
    DCK_TRY(pop(c, &x));
    DCK_TRY(persistent_load(c, x, &n));
    return push(c, n);
}

static dck_status op_nothing(pk_ctx *c, uint8_t op) { /* READONLY_BUFFER: no effect on values */
    (void)c;
    (void)op;
    return DCK_OK;
}

static dck_status op_next_buffer(pk_ctx *c, uint8_t op) {
    (void)op;
    return err_at(c, DCK_ERR_UNSUPPORTED, "out-of-band buffer (NEXT_BUFFER)");
}

static dck_status op_ext(pk_ctx *c, uint8_t op) {
    (void)op;
    return err_at(c, DCK_ERR_UNSUPPORTED, "extension registry opcode (EXT1/2/4)");
}

/* Every opcode of pickle protocols 0 to 5, by byte. A byte without a row is
 * rejected ("unknown opcode 0xNN"); EXT1/2/4 and NEXT_BUFFER have rows that
 * refuse them. */
typedef struct {
    const char *name;
    op_fn fn;
} pk_opcode;
#define OP(byte, name, fn) [byte] = {name, fn}
static const pk_opcode OPCODES[256] = {
    /* protocols 0 and 1 */
    OP('(', "MARK", op_mark),                 OP('.', "STOP", op_stop),
    OP('0', "POP", op_pop),                   OP('1', "POP_MARK", op_pop_mark),
    OP('2', "DUP", op_dup),                   OP('N', "NONE", op_none),
    OP('I', "INT", op_int_text),              OP('L', "LONG", op_int_text),
    OP('J', "BININT", op_binint),             OP('K', "BININT1", op_binint),
    OP('M', "BININT2", op_binint),            OP('F', "FLOAT", op_float_text),
    OP('G', "BINFLOAT", op_binfloat),         OP('S', "STRING", op_string),
    OP('T', "BINSTRING", op_binstr),          OP('U', "SHORT_BINSTRING", op_binstr),
    OP('V', "UNICODE", op_unicode),           OP('X', "BINUNICODE", op_binstr),
    OP(')', "EMPTY_TUPLE", op_empty_tuple),   OP('t', "TUPLE", op_seq_from_mark),
    OP(']', "EMPTY_LIST", op_empty_list),     OP('l', "LIST", op_seq_from_mark),
    OP('a', "APPEND", op_append),             OP('e', "APPENDS", op_appends),
    OP('}', "EMPTY_DICT", op_empty_dict),     OP('d', "DICT", op_dict),
    OP('s', "SETITEM", op_setitem),           OP('u', "SETITEMS", op_setitems),
    OP('c', "GLOBAL", op_global),             OP('R', "REDUCE", op_reduce),
    OP('i', "INST", op_inst),                 OP('o', "OBJ", op_obj),
    OP('b', "BUILD", op_build),               OP('p', "PUT", op_put),
    OP('q', "BINPUT", op_binput),             OP('r', "LONG_BINPUT", op_binput),
    OP('g', "GET", op_get),                   OP('h', "BINGET", op_binget),
    OP('j', "LONG_BINGET", op_binget),        OP('P', "PERSID", op_persid),
    OP('Q', "BINPERSID", op_binpersid),
    /* protocol 2 */
    OP(0x80, "PROTO", op_proto),              OP(0x81, "NEWOBJ", op_newobj),
    OP(0x82, "EXT1", op_ext),                 OP(0x83, "EXT2", op_ext),
    OP(0x84, "EXT4", op_ext),                 OP(0x85, "TUPLE1", op_tuple_n),
    OP(0x86, "TUPLE2", op_tuple_n),           OP(0x87, "TUPLE3", op_tuple_n),
    OP(0x88, "NEWTRUE", op_bool),             OP(0x89, "NEWFALSE", op_bool),
    OP(0x8a, "LONG1", op_long_bin),           OP(0x8b, "LONG4", op_long_bin),
    /* protocol 3 */
    OP('B', "BINBYTES", op_binbytes),         OP('C', "SHORT_BINBYTES", op_binbytes),
    /* protocol 4 */
    OP(0x8c, "SHORT_BINUNICODE", op_binstr),  OP(0x8d, "BINUNICODE8", op_binstr),
    OP(0x8e, "BINBYTES8", op_binbytes),       OP(0x8f, "EMPTY_SET", op_empty_set),
    OP(0x90, "ADDITEMS", op_appends),         OP(0x91, "FROZENSET", op_seq_from_mark),
    OP(0x92, "NEWOBJ_EX", op_newobj),         OP(0x93, "STACK_GLOBAL", op_stack_global),
    OP(0x94, "MEMOIZE", op_memoize),          OP(0x95, "FRAME", op_frame),
    /* protocol 5 */
    OP(0x96, "BYTEARRAY8", op_binbytes),      OP(0x97, "NEXT_BUFFER", op_next_buffer),
    OP(0x98, "READONLY_BUFFER", op_nothing),
};
#undef OP

dck_status dck_pk_load(pk_ctx *c, const uint8_t *data, size_t len, int64_t base, pk_node **root,
                       size_t *used) {
    c->in = data;
    c->len = len;
    c->pos = 0;
    c->base = base;
    c->sp = 0;
    c->nmarks = 0;
    if (c->memo) memset(c->memo, 0, c->memo_cap * sizeof *c->memo);
    c->memo_count = 0;
    c->root = NULL;
    c->stopped = false;
    *root = NULL;
    while (!c->stopped) {
        DCK_TRY(need(c, 1));
        uint8_t op = c->in[c->pos++];
        if (!OPCODES[op].fn) {
            char what[64];
            snprintf(what, sizeof what, "unknown opcode 0x%02x", op);
            c->pos--;
            return err_at(c, DCK_ERR_FORMAT, what);
        }
        DCK_TRY(OPCODES[op].fn(c, op));
    }
    *root = c->root;
    if (used) *used = c->pos;
    return DCK_OK;
}

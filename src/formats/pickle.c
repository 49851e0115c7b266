/* The restricted unpickler (see pickle.h). Nothing here imports, calls or
 * evaluates: globals are names, and REDUCE of a known name builds a plain
 * value while REDUCE of any other name builds an opaque object. */
#include "formats/pickle.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PK_MAX_WALK_DEPTH 100

void pk_limits_default(pk_limits *l) {
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
};

static const pk_node none_node = {.kind = PK_NONE};

dck_status pk_ctx_create(const char *label, const pk_limits *lim, pk_ctx **out) {
    pk_ctx *c = calloc(1, sizeof *c);
    if (!c) return dck_oom(NULL);
    c->label = dck_strdup(label ? label : "pickle");
    if (!c->label) {
        free(c);
        return dck_oom(NULL);
    }
    if (lim) c->lim = *lim;
    else pk_limits_default(&c->lim);
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

void pk_ctx_free(pk_ctx *c) {
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

size_t pk_tensor_count(const pk_ctx *c) { return c->ntensors; }

uint64_t pk_walk_budget(const pk_ctx *c) {
    uint64_t b = 4 * (uint64_t)c->nnodes + 100000;
    return b < PK_MAX_WALK_VISITS ? b : PK_MAX_WALK_VISITS;
}

pk_node *const *pk_storages(const pk_ctx *c, size_t *n) {
    *n = c->nstorages;
    return c->storages;
}

static dck_status err_at(pk_ctx *c, dck_status s, const char *what) {
    return dck_set_error(s, "%s: %s at byte %zu", c->label, what, c->pos);
}

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

/* ------------------------------------------------------------------ names */

bool pk_is_global(const pk_node *n, const char *module, const char *name) {
    return n && n->kind == PK_GLOBAL && !strcmp(n->u.global.module, module) &&
           !strcmp(n->u.global.name, name);
}

bool pk_object_is(const pk_node *n, const char *module, const char *name) {
    return n && n->kind == PK_OBJECT && pk_is_global(n->u.obj.cls, module, name);
}

static bool gname_is(const pk_node *g, const char *name) {
    return g && g->kind == PK_GLOBAL && !strcmp(g->u.global.name, name);
}

static bool gmod_is(const pk_node *g, const char *m) {
    return g && g->kind == PK_GLOBAL && !strcmp(g->u.global.module, m);
}

int pk_torch_dtype(const char *name) {
    static const struct {
        const char *n;
        dck_dtype t;
    } tab[] = {
        {"float32", DCK_F32},   {"float", DCK_F32},        {"float64", DCK_F64},
        {"double", DCK_F64},    {"float16", DCK_F16},      {"half", DCK_F16},
        {"bfloat16", DCK_BF16}, {"int64", DCK_I64},        {"long", DCK_I64},
        {"int32", DCK_I32},     {"int", DCK_I32},          {"int16", DCK_I16},
        {"short", DCK_I16},     {"int8", DCK_I8},          {"uint8", DCK_U8},
        {"bool", DCK_BOOL},     {"uint16", DCK_U16},       {"uint32", DCK_U32},
        {"uint64", DCK_U64},    {"float8_e4m3fn", DCK_F8_E4M3}, {"float8_e5m2", DCK_F8_E5M2},
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (!strcmp(tab[i].n, name)) return (int)tab[i].t;
    return -1;
}

int pk_storage_dtype(const char *type_name) {
    static const struct {
        const char *n;
        dck_dtype t;
    } tab[] = {
        {"FloatStorage", DCK_F32}, {"DoubleStorage", DCK_F64}, {"HalfStorage", DCK_F16},
        {"BFloat16Storage", DCK_BF16}, {"LongStorage", DCK_I64}, {"IntStorage", DCK_I32},
        {"ShortStorage", DCK_I16}, {"CharStorage", DCK_I8}, {"ByteStorage", DCK_U8},
        {"BoolStorage", DCK_BOOL},
    };
    if (!strcmp(type_name, "UntypedStorage")) return -2;
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (!strcmp(tab[i].n, type_name)) return (int)tab[i].t;
    return -1;
}

int pk_numpy_dtype(const char *descr, bool *byteswap) {
    *byteswap = false;
    char order = '=';
    if (*descr == '<' || *descr == '>' || *descr == '|' || *descr == '=') order = *descr++;
    static const struct {
        const char *n;
        dck_dtype t;
    } tab[] = {
        {"b1", DCK_BOOL}, {"?", DCK_BOOL}, {"u1", DCK_U8},  {"i1", DCK_I8},  {"i2", DCK_I16},
        {"u2", DCK_U16},  {"f2", DCK_F16}, {"i4", DCK_I32}, {"u4", DCK_U32}, {"f4", DCK_F32},
        {"f8", DCK_F64},  {"i8", DCK_I64}, {"u8", DCK_U64}, {"B", DCK_U8},   {"b", DCK_I8},
        {"h", DCK_I16},   {"H", DCK_U16},  {"e", DCK_F16},  {"i", DCK_I32},  {"I", DCK_U32},
        {"f", DCK_F32},   {"d", DCK_F64},  {"l", DCK_I64},  {"L", DCK_U64},  {"q", DCK_I64},
        {"Q", DCK_U64},
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (!strcmp(tab[i].n, descr)) {
            if (order == '>' && dck_dtype_size(tab[i].t) > 1) *byteswap = true;
            return (int)tab[i].t;
        }
    return -1;
}

/* ------------------------------------------------------------------ helpers */

pk_node **pk_items(const pk_node *n, size_t *count) {
    static pk_node *no_items[1];
    if (n && (n->kind == PK_TUPLE || n->kind == PK_LIST || n->kind == PK_SET)) {
        *count = n->u.seq.n;
        return n->u.seq.items ? n->u.seq.items : no_items;
    }
    *count = 0;
    return NULL;
}

bool pk_int(const pk_node *n, int64_t *out) {
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

pk_node *pk_get(const pk_node *n, const char *key) {
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

/* ------------------------------------------------------------------ torch and numpy */

static dck_status shape_of(pk_ctx *c, const pk_node *t, int *nd, uint64_t *out, const char *what) {
    size_t n;
    pk_node **it = pk_items(t, &n);
    if (!it && !(t && t->kind == PK_OBJECT && gname_is(t->u.obj.cls, "Size")))
        return err_at(c, DCK_ERR_FORMAT, what);
    if (n > DCK_MAX_DIMS) return err_at(c, DCK_ERR_LIMIT, "tensor with more than 16 dimensions");
    for (size_t i = 0; i < n; i++) {
        int64_t v;
        if (!pk_int(it[i], &v) || v < 0) return err_at(c, DCK_ERR_FORMAT, what);
        out[i] = (uint64_t)v;
    }
    *nd = (int)n;
    return DCK_OK;
}

static dck_status persistent_load(pk_ctx *c, pk_node *pid, pk_node **out);

static dck_status rebuild_tensor(pk_ctx *c, pk_node *args, int version, pk_node **out) {
    size_t n;
    pk_node **a = pk_items(args, &n);
    if (!a || n < 4 || (version == 3 && n < 7))
        return err_at(c, DCK_ERR_FORMAT, "_rebuild_tensor with too few arguments");
    if (a[0]->kind == PK_TUPLE) { /* a storage id in place (hand-written tar files) */
        pk_node *st;
        dck_status s0 = persistent_load(c, a[0], &st);
        if (s0) return s0;
        a[0] = st;
    }
    if (a[0]->kind != PK_STORAGE)
        return err_at(c, DCK_ERR_FORMAT, "_rebuild_tensor of something that is not a storage");
    if (c->ntensors >= c->lim.max_tensors)
        return err_at(c, DCK_ERR_LIMIT, "more tensors than the limit");
    dck_status s;
    pk_node *t = new_node(c, PK_TENSOR, &s);
    if (!t) return s;
    pk_tensor *tt = arena_alloc(c, sizeof *tt, &s);
    if (!tt) return s;
    memset(tt, 0, sizeof *tt);
    t->u.tensor = tt;
    tt->storage = a[0];
    int64_t off;
    if (!pk_int(a[1], &off) || off < 0) return err_at(c, DCK_ERR_FORMAT, "bad tensor storage offset");
    tt->offset = (uint64_t)off;
    int nd2;
    uint64_t st[DCK_MAX_DIMS];
    if ((s = shape_of(c, a[2], &tt->ndim, tt->size, "bad tensor size"))) return s;
    if ((s = shape_of(c, a[3], &nd2, st, "bad tensor stride"))) return s;
    if (nd2 != tt->ndim) return err_at(c, DCK_ERR_FORMAT, "tensor size and stride differ in length");
    for (int i = 0; i < nd2; i++) {
        if (st[i] > (uint64_t)INT64_MAX) return err_at(c, DCK_ERR_FORMAT, "bad tensor stride");
        tt->stride[i] = (int64_t)st[i];
    }
    if (version == 3) {
        pk_node *d = a[6];
        if (d->kind != PK_GLOBAL) return err_at(c, DCK_ERR_FORMAT, "_rebuild_tensor_v3 without a dtype");
        tt->dtype = pk_torch_dtype(d->u.global.name);
        tt->dtype_name = d->u.global.name;
    } else {
        tt->dtype = a[0]->u.storage.dtype;
        tt->dtype_name = a[0]->u.storage.type_name;
    }
    c->ntensors++;
    *out = t;
    return DCK_OK;
}

/* _codecs.encode(text, encoding): protocol 2's way of writing bytes. */
static dck_status codecs_encode(pk_ctx *c, pk_node *args, pk_node **out) {
    size_t n;
    pk_node **a = pk_items(args, &n);
    if (!a || n < 1 || a[0]->kind != PK_STR) return err_at(c, DCK_ERR_FORMAT, "bad _codecs.encode");
    const char *enc = n >= 2 && a[1]->kind == PK_STR ? a[1]->u.s.p : "utf-8";
    const uint8_t *p = (const uint8_t *)a[0]->u.s.p;
    size_t len = a[0]->u.s.len;
    dck_status s;
    if (!strcmp(enc, "utf-8") || !strcmp(enc, "utf8") || !strcmp(enc, "ascii")) {
        *out = new_str(c, (const char *)p, len, -1, PK_BYTES, &s);
        return *out ? DCK_OK : s;
    }
    if (strcmp(enc, "latin1") && strcmp(enc, "latin-1") && strcmp(enc, "iso-8859-1"))
        return err_at(c, DCK_ERR_UNSUPPORTED, "_codecs.encode with an encoding other than latin1/utf-8");
    pk_node *b = new_node(c, PK_BYTES, &s);
    if (!b) return s;
    uint8_t *q = arena_alloc(c, len + 1, &s);
    if (!q) return s;
    size_t k = 0;
    for (size_t i = 0; i < len;) {
        if (p[i] < 0x80) q[k++] = p[i++];
        else if ((p[i] & 0xe0) == 0xc0 && i + 1 < len && (p[i] & 0x1f) <= 3 && (p[i + 1] & 0xc0) == 0x80) {
            q[k++] = (uint8_t)(((p[i] & 0x1f) << 6) | (p[i + 1] & 0x3f));
            i += 2;
        } else
            return err_at(c, DCK_ERR_FORMAT, "_codecs.encode latin1 text with a code point above 255");
    }
    b->u.s.p = (const char *)q;
    b->u.s.len = k;
    b->u.s.src = -1;
    *out = b;
    return DCK_OK;
}

static bool is_numpy_mod(const pk_node *g) {
    return gmod_is(g, "numpy.core.multiarray") || gmod_is(g, "numpy._core.multiarray") ||
           gmod_is(g, "numpy");
}

/* numpy scalar(dtype, bytes) -> a plain number. */
static dck_status numpy_scalar(pk_ctx *c, pk_node *args, pk_node **out) {
    size_t n;
    pk_node **a = pk_items(args, &n);
    if (!a || n < 2 || a[0]->kind != PK_NPDTYPE || a[1]->kind != PK_BYTES)
        return err_at(c, DCK_ERR_FORMAT, "bad numpy scalar");
    int t = a[0]->u.npdtype.dtype;
    if (t < 0 || a[1]->u.s.len != dck_dtype_size((dck_dtype)t)) {
        *out = NULL; /* keep as opaque */
        return DCK_OK;
    }
    uint8_t b[8] = {0};
    memcpy(b, a[1]->u.s.p, a[1]->u.s.len);
    if (a[0]->u.npdtype.order == '>') {
        size_t l = a[1]->u.s.len;
        for (size_t i = 0; i < l / 2; i++) {
            uint8_t x = b[i];
            b[i] = b[l - 1 - i];
            b[l - 1 - i] = x;
        }
    }
    dck_status s;
    pk_node *r;
    switch ((dck_dtype)t) {
    case DCK_BOOL:
        r = new_node(c, PK_BOOL, &s);
        if (r) r->u.b = b[0] != 0;
        break;
    case DCK_F16: case DCK_BF16: case DCK_F8_E4M3: case DCK_F8_E5M2: case DCK_F32: case DCK_F64:
        r = new_node(c, PK_FLOAT, &s);
        if (r) r->u.f = dck_element_to_double((dck_dtype)t, b);
        break;
    case DCK_U64: {
        uint64_t v = rd_le(b, 8);
        if (v > (uint64_t)INT64_MAX) { *out = NULL; return DCK_OK; }
        r = new_node(c, PK_INT, &s);
        if (r) r->u.i = (int64_t)v;
        break;
    }
    default: {
        size_t l = dck_dtype_size((dck_dtype)t);
        uint64_t v = rd_le(b, (int)l);
        int64_t sv;
        bool sgn = t == DCK_I8 || t == DCK_I16 || t == DCK_I32 || t == DCK_I64;
        if (sgn && l < 8 && (v >> (8 * l - 1)) & 1) v |= ~(uint64_t)0 << (8 * l);
        sv = (int64_t)v;
        r = new_node(c, PK_INT, &s);
        if (r) r->u.i = sv;
    }
    }
    if (!r) return s;
    *out = r;
    return DCK_OK;
}

static dck_status make_object(pk_ctx *c, pk_node *cls, pk_node *args, pk_node **out) {
    dck_status s;
    pk_node *o = new_node(c, PK_OBJECT, &s);
    if (!o) return s;
    o->u.obj.cls = cls;
    o->u.obj.args = args;
    *out = o;
    return DCK_OK;
}

static bool is_dict_class(const pk_node *g) {
    return pk_is_global(g, "collections", "OrderedDict") || pk_is_global(g, "builtins", "dict") ||
           pk_is_global(g, "__builtin__", "dict") || pk_is_global(g, "collections", "defaultdict");
}

static dck_status fill_dict_from(pk_ctx *c, pk_node *d, pk_node *src) {
    if (!src) return DCK_OK;
    if (src->kind == PK_DICT) {
        for (size_t i = 0; i < src->u.dict.n; i++) {
            dck_status s = dict_set(c, d, src->u.dict.keys[i], src->u.dict.vals[i]);
            if (s) return s;
        }
        return DCK_OK;
    }
    size_t n;
    pk_node **it = pk_items(src, &n);
    for (size_t i = 0; i < n; i++) {
        size_t m;
        pk_node **kv = pk_items(it[i], &m);
        if (m != 2) return err_at(c, DCK_ERR_FORMAT, "dict built from something that is not pairs");
        dck_status s = dict_set(c, d, kv[0], kv[1]);
        if (s) return s;
    }
    return DCK_OK;
}

/* REDUCE: callable(*args), for the callables we know by name. */
static dck_status apply_reduce_at(pk_ctx *c, pk_node *fn, pk_node *args, pk_node **out, int depth);

static dck_status apply_reduce(pk_ctx *c, pk_node *fn, pk_node *args, pk_node **out) {
    return apply_reduce_at(c, fn, args, out, 0);
}

static dck_status apply_reduce_at(pk_ctx *c, pk_node *fn, pk_node *args, pk_node **out, int depth) {
    dck_status s;
    if (depth > 8) /* _rebuild_from_type nests; hostile args may loop */
        return err_at(c, DCK_ERR_LIMIT, "_rebuild_from_type nested deeper than 8");
    size_t n;
    pk_node **a = pk_items(args, &n);
    if (fn->kind == PK_GLOBAL) {
        const char *m = fn->u.global.module, *nm = fn->u.global.name;
        if (is_dict_class(fn)) {
            pk_node *d = new_node(c, PK_DICT, &s);
            if (!d) return s;
            if (n >= 1 && !pk_is_global(fn, "collections", "defaultdict") &&
                (s = fill_dict_from(c, d, a[0])))
                return s;
            *out = d;
            return DCK_OK;
        }
        if (!strcmp(m, "torch._utils")) {
            if (!strcmp(nm, "_rebuild_tensor_v2")) return rebuild_tensor(c, args, 2, out);
            if (!strcmp(nm, "_rebuild_tensor_v3")) return rebuild_tensor(c, args, 3, out);
            if (!strcmp(nm, "_rebuild_tensor")) return rebuild_tensor(c, args, 1, out);
            if ((!strcmp(nm, "_rebuild_parameter") || !strcmp(nm, "_rebuild_parameter_with_state")) &&
                n >= 1 && a[0]->kind == PK_TENSOR) {
                *out = a[0];
                return DCK_OK;
            }
            if (!strcmp(nm, "_rebuild_from_type") && n >= 3 && a[0]->kind == PK_GLOBAL) {
                pk_node *r;
                if ((s = apply_reduce_at(c, a[0], a[2], &r, depth + 1))) return s;
                *out = r;
                return DCK_OK;
            }
        }
        if (!strcmp(m, "torch._tensor") && !strcmp(nm, "_rebuild_from_type_v2") && n >= 3 &&
            a[0]->kind == PK_GLOBAL) {
            pk_node *r;
            if ((s = apply_reduce_at(c, a[0], a[2], &r, depth + 1))) return s;
            *out = r;
            return DCK_OK;
        }
        if (!strcmp(m, "torch") && !strcmp(nm, "Size") && n == 1 && pk_items(a[0], &(size_t){0})) {
            *out = a[0];
            return DCK_OK;
        }
        if (!strcmp(m, "_codecs") && !strcmp(nm, "encode")) return codecs_encode(c, args, out);
        if ((!strcmp(m, "builtins") || !strcmp(m, "__builtin__")) &&
            (!strcmp(nm, "set") || !strcmp(nm, "frozenset") || !strcmp(nm, "list") ||
             !strcmp(nm, "tuple"))) {
            pk_node *r = new_node(c, nm[0] == 'l' ? PK_LIST : nm[0] == 't' ? PK_TUPLE : PK_SET, &s);
            if (!r) return s;
            size_t k = 0;
            pk_node **it = n >= 1 ? pk_items(a[0], &k) : NULL;
            for (size_t i = 0; i < k; i++)
                if ((s = seq_push(c, r, it[i]))) return s;
            *out = r;
            return DCK_OK;
        }
        if ((!strcmp(m, "builtins") || !strcmp(m, "__builtin__")) &&
            (!strcmp(nm, "bytearray") || !strcmp(nm, "bytes"))) {
            if (n == 0) {
                *out = new_str(c, "", 0, -1, PK_BYTES, &s);
                return *out ? DCK_OK : s;
            }
            if (a[0]->kind == PK_BYTES) {
                *out = a[0];
                return DCK_OK;
            }
            if (a[0]->kind == PK_STR) return codecs_encode(c, args, out);
        }
        if (is_numpy_mod(fn) && !strcmp(nm, "_reconstruct")) {
            pk_node *r = new_node(c, PK_NDARRAY, &s);
            if (!r) return s;
            pk_ndarray *nd = arena_alloc(c, sizeof *nd, &s);
            if (!nd) return s;
            memset(nd, 0, sizeof *nd);
            r->u.ndarray = nd;
            *out = r;
            return DCK_OK;
        }
        if (is_numpy_mod(fn) && !strcmp(nm, "dtype") && n >= 1 && a[0]->kind == PK_STR) {
            pk_node *r = new_node(c, PK_NPDTYPE, &s);
            if (!r) return s;
            snprintf(r->u.npdtype.code, sizeof r->u.npdtype.code, "%s", a[0]->u.s.p);
            bool bs;
            r->u.npdtype.dtype = pk_numpy_dtype(r->u.npdtype.code, &bs);
            r->u.npdtype.order = '=';
            *out = r;
            return DCK_OK;
        }
        if (is_numpy_mod(fn) && !strcmp(nm, "scalar")) {
            pk_node *r = NULL;
            if ((s = numpy_scalar(c, args, &r))) return s;
            if (r) {
                *out = r;
                return DCK_OK;
            }
        }
    }
    return make_object(c, fn, args, out);
}

static dck_status apply_newobj(pk_ctx *c, pk_node *cls, pk_node *args, pk_node **out) {
    dck_status s;
    if (is_dict_class(cls)) {
        pk_node *d = new_node(c, PK_DICT, &s);
        if (!d) return s;
        *out = d;
        return DCK_OK;
    }
    if (pk_is_global(cls, "builtins", "set") || pk_is_global(cls, "builtins", "list")) {
        pk_node *d = new_node(c, cls->u.global.name[0] == 's' ? PK_SET : PK_LIST, &s);
        if (!d) return s;
        *out = d;
        return DCK_OK;
    }
    return make_object(c, cls, args, out);
}

static dck_status ndarray_build(pk_ctx *c, pk_node *arr, pk_node *state) {
    size_t n;
    pk_node **a = pk_items(state, &n);
    pk_ndarray *nd = arr->u.ndarray;
    if (!a || (n != 5 && n != 4)) return err_at(c, DCK_ERR_FORMAT, "bad numpy array state");
    size_t k = n == 5 ? 1 : 0;
    dck_status s = shape_of(c, a[k], &nd->ndim, nd->shape, "bad numpy array shape");
    if (s) return s;
    if (a[k + 1]->kind != PK_NPDTYPE) return err_at(c, DCK_ERR_FORMAT, "numpy array without a dtype");
    nd->dtype = a[k + 1];
    int64_t f;
    nd->fortran = pk_int(a[k + 2], &f) && f;
    nd->data = a[k + 3];
    return DCK_OK;
}

static dck_status apply_build(pk_ctx *c, pk_node *obj, pk_node *state) {
    switch (obj->kind) {
    case PK_OBJECT:
        obj->u.obj.state = state;
        return DCK_OK;
    case PK_NDARRAY:
        return ndarray_build(c, obj, state);
    case PK_NPDTYPE: {
        size_t n;
        pk_node **a = pk_items(state, &n);
        if (n >= 2 && a[1]->kind == PK_STR && a[1]->u.s.len == 1) obj->u.npdtype.order = a[1]->u.s.p[0];
        if (obj->u.npdtype.order == '>' && obj->u.npdtype.dtype >= 0 &&
            dck_dtype_size((dck_dtype)obj->u.npdtype.dtype) == 1)
            obj->u.npdtype.order = '|';
        return DCK_OK;
    }
    default: /* attributes of dicts (module _metadata), parameters: not data */
        return DCK_OK;
    }
}

static dck_status persistent_load(pk_ctx *c, pk_node *pid, pk_node **out) {
    size_t n;
    pk_node **a = pk_items(pid, &n);
    dck_status s;
    if (a && n >= 5 && a[0]->kind == PK_STR && !strcmp(a[0]->u.s.p, "storage")) {
        pk_node *r = new_node(c, PK_STORAGE, &s);
        if (!r) return s;
        pk_node *ty = a[1];
        if (ty->kind != PK_GLOBAL) return err_at(c, DCK_ERR_FORMAT, "storage type is not a class");
        r->u.storage.type_name = ty->u.global.name;
        int d = pk_storage_dtype(ty->u.global.name);
        r->u.storage.dtype = d == -2 ? DCK_U8 : d;
        if (a[2]->kind == PK_STR) r->u.storage.key = a[2]->u.s.p;
        else if (a[2]->kind == PK_INT) {
            char buf[32];
            snprintf(buf, sizeof buf, "%lld", (long long)a[2]->u.i);
            pk_node *k = new_str(c, buf, strlen(buf), -1, PK_STR, &s);
            if (!k) return s;
            r->u.storage.key = k->u.s.p;
        } else
            return err_at(c, DCK_ERR_FORMAT, "storage key is not a string");
        r->u.storage.location = a[3]->kind == PK_STR ? a[3]->u.s.p : "?";
        int64_t numel;
        if (!pk_int(a[4], &numel) || numel < 0) return err_at(c, DCK_ERR_FORMAT, "bad storage size");
        r->u.storage.numel = (uint64_t)numel;
        if (n >= 6 && a[5]->kind != PK_NONE) {
            size_t m;
            pk_node **v = pk_items(a[5], &m);
            int64_t vo, vs;
            if (m != 3 || !pk_int(v[1], &vo) || !pk_int(v[2], &vs) || vo < 0 || vs < 0 ||
                v[0]->kind != PK_STR)
                return err_at(c, DCK_ERR_FORMAT, "bad storage view metadata");
            /* the tensor refers to the view: key becomes the view's root */
            r->u.storage.is_view = true;
            r->u.storage.view_offset = (uint64_t)vo;
            r->u.storage.view_size = (uint64_t)vs;
        }
        if ((s = grow_arr(c, (void **)&c->storages, &c->cap_storages, c->nstorages + 1, sizeof(pk_node *))))
            return s;
        c->storages[c->nstorages++] = r;
        *out = r;
        return DCK_OK;
    }
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

static size_t put_utf8(uint8_t *q, uint32_t cp) {
    if (cp < 0x80) { q[0] = (uint8_t)cp; return 1; }
    if (cp < 0x800) { q[0] = (uint8_t)(0xc0 | (cp >> 6)); q[1] = (uint8_t)(0x80 | (cp & 0x3f)); return 2; }
    if (cp < 0x10000) {
        q[0] = (uint8_t)(0xe0 | (cp >> 12)); q[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
        q[2] = (uint8_t)(0x80 | (cp & 0x3f)); return 3;
    }
    q[0] = (uint8_t)(0xf0 | (cp >> 18)); q[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3f));
    q[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f)); q[3] = (uint8_t)(0x80 | (cp & 0x3f)); return 4;
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
            k += put_utf8(q + k, cp);
            i += 1 + (size_t)digits;
        } else
            k += put_utf8(q + k, ch);
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
    pk_node *t;
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

/* ------------------------------------------------------------------ the machine */

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

static dck_status read_len(pk_ctx *c, int bytes, uint64_t *len) {
    dck_status s = need(c, (uint64_t)bytes);
    if (s) return s;
    uint64_t v = rd_le(c->in + c->pos, bytes);
    c->pos += (size_t)bytes;
    if (bytes == 4 && v > 0x7fffffffu && 0) v = 0;
    if (v > c->lim.max_str) return err_at(c, DCK_ERR_LIMIT, "string or bytes longer than the limit");
    if ((s = need(c, v))) return s;
    *len = v;
    return DCK_OK;
}

dck_status pk_load(pk_ctx *c, const uint8_t *data, size_t len, int64_t base, pk_node **root,
                   size_t *used) {
    c->in = data;
    c->len = len;
    c->pos = 0;
    c->base = base;
    c->sp = 0;
    c->nmarks = 0;
    if (c->memo) memset(c->memo, 0, c->memo_cap * sizeof *c->memo);
    c->memo_count = 0;
    dck_status s = DCK_OK;
    *root = NULL;
    for (;;) {
        if ((s = need(c, 1))) return s;
        uint8_t op = c->in[c->pos++];
        pk_node *n = NULL, *x = NULL, *y = NULL;
        uint64_t L;
        const char *lp, *lp2;
        size_t ll, ll2;
        size_t from = 0;
        switch (op) {
        case 0x80: /* PROTO */
            if ((s = need(c, 1))) return s;
            if (c->in[c->pos] > 5) return err_at(c, DCK_ERR_UNSUPPORTED, "pickle protocol above 5");
            c->pos++;
            break;
        case 0x95: /* FRAME: frames are inline; the length is advisory */
            if ((s = need(c, 8))) return s;
            c->pos += 8;
            break;
        case '.': /* STOP */
            if ((s = pop(c, &n))) return s;
            *root = n;
            if (used) *used = c->pos;
            return DCK_OK;
        case '(': /* MARK */
            if (c->nmarks >= c->lim.max_marks) return err_at(c, DCK_ERR_LIMIT, "MARKs nested deeper than the limit");
            if ((s = dck_grow((void **)&c->marks, &c->mcap, c->nmarks + 1, sizeof *c->marks))) return s;
            c->marks[c->nmarks++] = c->sp;
            break;
        case '0': /* POP */
            if (c->sp > floor_sp(c)) c->sp--;
            else if (c->nmarks) c->nmarks--;
            else return err_at(c, DCK_ERR_FORMAT, "stack underflow");
            break;
        case '1': /* POP_MARK */
            if ((s = pop_mark(c, &from))) return s;
            c->sp = from;
            break;
        case '2': /* DUP */
            if ((s = top(c, &n)) || (s = push(c, n))) return s;
            break;
        case 'N':
            if ((s = push(c, (pk_node *)&none_node))) return s;
            break;
        case 0x88: case 0x89: /* NEWTRUE, NEWFALSE */
            if (!(n = new_node(c, PK_BOOL, &s))) return s;
            n->u.b = op == 0x88;
            if ((s = push(c, n))) return s;
            break;
        case 'I': case 'L': /* INT, LONG (text) */
            if ((s = read_line(c, &lp, &ll)) || (s = parse_int_text(c, lp, ll, &n)) || (s = push(c, n)))
                return s;
            break;
        case 'J': case 'K': case 'M': { /* BININT, BININT1, BININT2 */
            int b = op == 'J' ? 4 : op == 'K' ? 1 : 2;
            if ((s = need(c, (uint64_t)b))) return s;
            uint64_t v = rd_le(c->in + c->pos, b);
            c->pos += (size_t)b;
            if (!(n = new_node(c, PK_INT, &s))) return s;
            n->u.i = b == 4 ? (int64_t)(int32_t)(uint32_t)v : (int64_t)v;
            if ((s = push(c, n))) return s;
            break;
        }
        case 0x8a: case 0x8b: { /* LONG1, LONG4 */
            int b = op == 0x8a ? 1 : 4;
            if ((s = need(c, (uint64_t)b))) return s;
            int64_t cnt = op == 0x8a ? (int64_t)c->in[c->pos] : (int64_t)(int32_t)(uint32_t)rd_le(c->in + c->pos, 4);
            c->pos += (size_t)b;
            if (cnt < 0) return err_at(c, DCK_ERR_FORMAT, "LONG4 with a negative length");
            if ((uint64_t)cnt > c->lim.max_str) return err_at(c, DCK_ERR_LIMIT, "integer longer than the limit");
            if ((s = need(c, (uint64_t)cnt))) return s;
            const uint8_t *p = c->in + c->pos;
            c->pos += (size_t)cnt;
            if (cnt <= 8) {
                uint64_t v = cnt ? rd_le(p, (int)cnt) : 0;
                if (cnt && cnt < 8 && (p[cnt - 1] & 0x80)) v |= ~(uint64_t)0 << (8 * cnt);
                if (!(n = new_node(c, PK_INT, &s))) return s;
                n->u.i = (int64_t)v;
            } else if (!(n = new_str(c, (const char *)p, (size_t)cnt, c->base + (int64_t)(p - c->in), PK_BIGINT, &s)))
                return s;
            if ((s = push(c, n))) return s;
            break;
        }
        case 'F': { /* FLOAT (text) */
            if ((s = read_line(c, &lp, &ll))) return s;
            char buf[64];
            if (ll == 0 || ll >= sizeof buf) return err_at(c, DCK_ERR_FORMAT, "bad FLOAT operand");
            memcpy(buf, lp, ll);
            buf[ll] = 0;
            char *end;
            double v = strtod(buf, &end);
            if (*end) return err_at(c, DCK_ERR_FORMAT, "bad FLOAT operand");
            if (!(n = new_node(c, PK_FLOAT, &s))) return s;
            n->u.f = v;
            if ((s = push(c, n))) return s;
            break;
        }
        case 'G': { /* BINFLOAT: big-endian IEEE double */
            if ((s = need(c, 8))) return s;
            uint64_t v = 0;
            for (int i = 0; i < 8; i++) v = (v << 8) | c->in[c->pos + (size_t)i];
            c->pos += 8;
            if (!(n = new_node(c, PK_FLOAT, &s))) return s;
            memcpy(&n->u.f, &v, 8);
            if ((s = push(c, n))) return s;
            break;
        }
        case 'S': /* STRING */
            if ((s = read_line(c, &lp, &ll)) || (s = decode_string(c, lp, ll, &n)) || (s = push(c, n)))
                return s;
            break;
        case 'V': /* UNICODE */
            if ((s = read_line(c, &lp, &ll)) || (s = decode_unicode(c, lp, ll, &n)) || (s = push(c, n)))
                return s;
            break;
        case 'T': case 'U': case 'X': case 0x8c: case 0x8d: /* BINSTRING, SHORT_BINSTRING, BINUNICODE, SHORT_BINUNICODE, BINUNICODE8 */
            if ((s = read_len(c, op == 'U' || op == 0x8c ? 1 : op == 0x8d ? 8 : 4, &L))) return s;
            if (op == 'T' && L > 0x7fffffffu) return err_at(c, DCK_ERR_FORMAT, "BINSTRING with a negative length");
            n = new_str(c, (const char *)c->in + c->pos, (size_t)L, c->base + (int64_t)c->pos, PK_STR, &s);
            if (!n) return s;
            c->pos += (size_t)L;
            if ((s = push(c, n))) return s;
            break;
        case 'B': case 'C': case 0x8e: case 0x96: /* BINBYTES, SHORT_BINBYTES, BINBYTES8, BYTEARRAY8 */
            if ((s = read_len(c, op == 'C' ? 1 : op == 'B' ? 4 : 8, &L))) return s;
            n = new_str(c, (const char *)c->in + c->pos, (size_t)L, c->base + (int64_t)c->pos, PK_BYTES, &s);
            if (!n) return s;
            c->pos += (size_t)L;
            if ((s = push(c, n))) return s;
            break;
        case ')': /* EMPTY_TUPLE */
            if (!(n = new_node(c, PK_TUPLE, &s)) || (s = push(c, n))) return s;
            break;
        case 't': /* TUPLE */
            if ((s = pop_mark(c, &from)) || (s = build_seq(c, PK_TUPLE, from))) return s;
            break;
        case 0x85: case 0x86: case 0x87: { /* TUPLE1..3 */
            size_t k = (size_t)(op - 0x84);
            if (c->sp < floor_sp(c) + k) return err_at(c, DCK_ERR_FORMAT, "stack underflow");
            if ((s = build_seq(c, PK_TUPLE, c->sp - k))) return s;
            break;
        }
        case ']': /* EMPTY_LIST */
            if (!(n = new_node(c, PK_LIST, &s)) || (s = push(c, n))) return s;
            break;
        case 'l': /* LIST */
            if ((s = pop_mark(c, &from)) || (s = build_seq(c, PK_LIST, from))) return s;
            break;
        case 'a': /* APPEND */
            if ((s = pop(c, &x)) || (s = top(c, &n))) return s;
            c->sp++;
            c->stack[c->sp - 1] = x;
            if ((s = add_to(c, n, c->sp - 1))) return s;
            break;
        case 'e': /* APPENDS */
            if ((s = pop_mark(c, &from))) return s;
            if (from == 0 || from <= floor_sp(c)) return err_at(c, DCK_ERR_FORMAT, "APPENDS without a list");
            if ((s = add_to(c, c->stack[from - 1], from))) return s;
            break;
        case '}': /* EMPTY_DICT */
            if (!(n = new_node(c, PK_DICT, &s)) || (s = push(c, n))) return s;
            break;
        case 'd': /* DICT */
            if ((s = pop_mark(c, &from))) return s;
            if (!(n = new_node(c, PK_DICT, &s))) return s;
            if ((s = set_items(c, n, from)) || (s = push(c, n))) return s;
            break;
        case 's': /* SETITEM */
            if (c->sp < floor_sp(c) + 3) return err_at(c, DCK_ERR_FORMAT, "stack underflow");
            if ((s = set_items(c, c->stack[c->sp - 3], c->sp - 2))) return s;
            break;
        case 'u': /* SETITEMS */
            if ((s = pop_mark(c, &from))) return s;
            if (from == 0 || from <= floor_sp(c)) return err_at(c, DCK_ERR_FORMAT, "SETITEMS without a dict");
            if ((s = set_items(c, c->stack[from - 1], from))) return s;
            break;
        case 0x8f: /* EMPTY_SET */
            if (!(n = new_node(c, PK_SET, &s)) || (s = push(c, n))) return s;
            break;
        case 0x90: /* ADDITEMS */
            if ((s = pop_mark(c, &from))) return s;
            if (from == 0 || from <= floor_sp(c)) return err_at(c, DCK_ERR_FORMAT, "ADDITEMS without a set");
            if ((s = add_to(c, c->stack[from - 1], from))) return s;
            break;
        case 0x91: /* FROZENSET */
            if ((s = pop_mark(c, &from)) || (s = build_seq(c, PK_SET, from))) return s;
            break;
        case 'c': /* GLOBAL */
            if ((s = read_line(c, &lp, &ll)) || (s = read_line(c, &lp2, &ll2))) return s;
            if ((s = global_from(c, lp, ll, lp2, ll2))) return s;
            break;
        case 0x93: /* STACK_GLOBAL */
            if ((s = pop(c, &y)) || (s = pop(c, &x))) return s;
            if (x->kind != PK_STR || y->kind != PK_STR)
                return err_at(c, DCK_ERR_FORMAT, "STACK_GLOBAL operands are not strings");
            if ((s = global_from(c, x->u.s.p, x->u.s.len, y->u.s.p, y->u.s.len))) return s;
            break;
        case 'R': /* REDUCE */
            if ((s = pop(c, &y)) || (s = pop(c, &x))) return s;
            if ((s = apply_reduce(c, x, y, &n)) || (s = push(c, n))) return s;
            break;
        case 0x81: /* NEWOBJ */
            if ((s = pop(c, &y)) || (s = pop(c, &x))) return s;
            if ((s = apply_newobj(c, x, y, &n)) || (s = push(c, n))) return s;
            break;
        case 0x92: /* NEWOBJ_EX */
            if ((s = pop(c, &n)) || (s = pop(c, &y)) || (s = pop(c, &x))) return s;
            if ((s = apply_newobj(c, x, y, &n)) || (s = push(c, n))) return s;
            break;
        case 'i': /* INST */
            if ((s = read_line(c, &lp, &ll)) || (s = read_line(c, &lp2, &ll2))) return s;
            if ((s = pop_mark(c, &from)) || (s = build_seq(c, PK_TUPLE, from))) return s;
            if ((s = global_from(c, lp, ll, lp2, ll2))) return s;
            x = c->stack[--c->sp];
            y = c->stack[--c->sp];
            if ((s = apply_newobj(c, x, y, &n)) || (s = push(c, n))) return s;
            break;
        case 'o': /* OBJ */
            if ((s = pop_mark(c, &from))) return s;
            if (from >= c->sp) return err_at(c, DCK_ERR_FORMAT, "OBJ without a class");
            x = c->stack[from];
            if ((s = build_seq(c, PK_TUPLE, from + 1))) return s;
            y = c->stack[--c->sp];
            c->sp = from;
            if ((s = apply_newobj(c, x, y, &n)) || (s = push(c, n))) return s;
            break;
        case 'b': /* BUILD */
            if ((s = pop(c, &y)) || (s = top(c, &x))) return s;
            if ((s = apply_build(c, x, y))) return s;
            break;
        case 'p': /* PUT */
            if ((s = read_line(c, &lp, &ll)) || (s = memo_key_text(c, lp, ll, &L)) || (s = memo_put(c, L)))
                return s;
            break;
        case 'q': case 'r': { /* BINPUT, LONG_BINPUT */
            int b = op == 'q' ? 1 : 4;
            if ((s = need(c, (uint64_t)b))) return s;
            L = rd_le(c->in + c->pos, b);
            c->pos += (size_t)b;
            if ((s = memo_put(c, L))) return s;
            break;
        }
        case 0x94: /* MEMOIZE */
            if ((s = memo_put(c, c->memo_count))) return s;
            break;
        case 'g': /* GET */
            if ((s = read_line(c, &lp, &ll)) || (s = memo_key_text(c, lp, ll, &L)) || (s = memo_get(c, L)))
                return s;
            break;
        case 'h': case 'j': { /* BINGET, LONG_BINGET */
            int b = op == 'h' ? 1 : 4;
            if ((s = need(c, (uint64_t)b))) return s;
            L = rd_le(c->in + c->pos, b);
            c->pos += (size_t)b;
            if ((s = memo_get(c, L))) return s;
            break;
        }
        case 'P': /* PERSID */
            if ((s = read_line(c, &lp, &ll))) return s;
            if (!(x = new_str(c, lp, ll, -1, PK_STR, &s))) return s;
            if ((s = persistent_load(c, x, &n)) || (s = push(c, n))) return s;
            break;
        case 'Q': /* BINPERSID */
            if ((s = pop(c, &x)) || (s = persistent_load(c, x, &n)) || (s = push(c, n))) return s;
            break;
        case 0x98: /* READONLY_BUFFER */
            break;
        case 0x97:
            return err_at(c, DCK_ERR_UNSUPPORTED, "out-of-band buffer (NEXT_BUFFER)");
        case 0x82: case 0x83: case 0x84:
            return err_at(c, DCK_ERR_UNSUPPORTED, "extension registry opcode (EXT1/2/4)");
        default: {
            char what[64];
            snprintf(what, sizeof what, "unknown opcode 0x%02x", op);
            c->pos--;
            return err_at(c, DCK_ERR_FORMAT, what);
        }
        }
    }
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

char *pk_scalar_text(const pk_node *n) {
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

typedef struct {
    const pk_walker *w;
    const char *label;
    uint64_t visits;
    sbuf name;
} walk_state;

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
    const pk_node *p = pk_get(n, "_parameters"), *m = pk_get(n, "_modules");
    return p && p->kind == PK_DICT && m && m->kind == PK_DICT;
}

static bool in_set(const pk_node *set, const pk_node *key) {
    size_t k;
    pk_node **it = pk_items(set, &k);
    for (size_t i = 0; it && i < k; i++)
        if (it[i]->kind == PK_STR && key->kind == PK_STR && it[i]->u.s.len == key->u.s.len &&
            !memcmp(it[i]->u.s.p, key->u.s.p, key->u.s.len))
            return true;
    return false;
}

static dck_status walk_module(walk_state *ws, const pk_node *n, int depth) {
    const pk_node *parts[2] = {pk_get(n, "_parameters"), pk_get(n, "_buffers")};
    const pk_node *skip = pk_get(n, "_non_persistent_buffers_set");
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
    const pk_node *m = pk_get(n, "_modules");
    for (size_t i = 0; i < m->u.dict.n && !s; i++)
        if (m->u.dict.vals[i]->kind != PK_NONE) s = walk_child(ws, m->u.dict.keys[i], i, m->u.dict.vals[i], depth, false);
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
        return ws->w->tensor ? ws->w->tensor(ws->w->ctx, cur_name(ws), n) : DCK_OK;
    case PK_NDARRAY:
        return ws->w->ndarray ? ws->w->ndarray(ws->w->ctx, cur_name(ws), n) : DCK_OK;
    case PK_NONE: case PK_BOOL: case PK_INT: case PK_BIGINT: case PK_FLOAT: {
        if (tensors_only || !ws->w->value) return DCK_OK;
        char *t = pk_scalar_text(n);
        if (!t) return dck_oom(NULL);
        s = ws->w->value(ws->w->ctx, cur_name(ws), t);
        free(t);
        return s;
    }
    case PK_BYTES: { /* serialized state: recorded by its digest */
        if (tensors_only || !ws->w->value) return DCK_OK;
        char t[48];
        memcpy(t, "bytes:", 6);
        dck_digest_to_hex(dck_xxh128(n->u.s.p, n->u.s.len), t + 6);
        return ws->w->value(ws->w->ctx, cur_name(ws), t);
    }
    case PK_TUPLE: case PK_LIST: case PK_SET:
        if (!tensors_only && ws->w->value && n->u.seq.n > PK_SEQ_VALUE_MIN && scalar_seq(n)) {
            char *t = pk_scalar_text(n);
            if (!t) return dck_oom(NULL);
            s = ws->w->value(ws->w->ctx, cur_name(ws), t);
            free(t);
            return s;
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

dck_status pk_walk(const pk_node *root, const char *prefix, const pk_walker *w, const char *label) {
    walk_state ws = {w, label ? label : "pickle", 0, {0}};
    if (prefix && *prefix) sb_str(&ws.name, prefix);
    if (ws.name.oom) return dck_oom(NULL);
    dck_status s = walk(&ws, root, 0, false);
    free(ws.name.p);
    return s;
}

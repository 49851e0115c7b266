/* The handlers that make the pickle VM read checkpoints: the allow-list
 * GLOBALS ({module, name, REDUCE handler, NEWOBJ handler}) of the globals
 * whose calls build plain values (collections, builtins, _codecs, torch,
 * NumPy), torch storages as persistent ids, and BUILD of NumPy arrays and
 * dtypes. Nothing here imports or calls anything: a handler reads the
 * arguments of a call by name and builds nodes. */
#include "formats/pickle.h"

#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------ dtypes */

int dck_pk_torch_dtype(const char *name) {
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
        {"complex64", DCK_C64}, {"cfloat", DCK_C64},       {"complex128", DCK_C128},
        {"cdouble", DCK_C128},
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (!strcmp(tab[i].n, name)) return (int)tab[i].t;
    return -1;
}

int dck_pk_storage_dtype(const char *type_name) {
    static const struct {
        const char *n;
        dck_dtype t;
    } tab[] = {
        {"FloatStorage", DCK_F32}, {"DoubleStorage", DCK_F64}, {"HalfStorage", DCK_F16},
        {"BFloat16Storage", DCK_BF16}, {"LongStorage", DCK_I64}, {"IntStorage", DCK_I32},
        {"ShortStorage", DCK_I16}, {"CharStorage", DCK_I8}, {"ByteStorage", DCK_U8},
        {"BoolStorage", DCK_BOOL}, {"ComplexFloatStorage", DCK_C64}, {"ComplexDoubleStorage", DCK_C128},
        /* quantized tensors' integers, as stored (see _rebuild_qtensor) */
        {"QInt8Storage", DCK_I8}, {"QUInt8Storage", DCK_U8}, {"QInt32Storage", DCK_I32},
    };
    if (!strcmp(type_name, "UntypedStorage")) return -2;
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (!strcmp(tab[i].n, type_name)) return (int)tab[i].t;
    return -1;
}

int dck_pk_numpy_dtype(const char *descr, bool *byteswap) {
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
        {"Q", DCK_U64},   {"c8", DCK_C64}, {"c16", DCK_C128}, {"F", DCK_C64}, {"D", DCK_C128},
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (!strcmp(tab[i].n, descr)) {
            if (order == '>' && dck_dtype_size(tab[i].t) > 1) *byteswap = true;
            return (int)tab[i].t;
        }
    return -1;
}

/* ------------------------------------------------------------------ helpers */

static bool gname_is(const pk_node *g, const char *name) {
    return g && g->kind == PK_GLOBAL && !strcmp(g->u.global.name, name);
}

static uint64_t rd_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* A tuple/list (or torch.Size object) of non-negative integers. */
static dck_status shape_of(pk_ctx *c, const pk_node *t, int *nd, uint64_t *out, const char *what) {
    size_t n;
    pk_node **it = dck_pk_items(t, &n);
    if (!it && !(t && t->kind == PK_OBJECT && gname_is(t->u.obj.cls, "Size")))
        return dck_pk_error(c, DCK_ERR_FORMAT, what);
    if (n > DCK_MAX_DIMS) return dck_pk_error(c, DCK_ERR_LIMIT, "tensor with more than 16 dimensions");
    for (size_t i = 0; i < n; i++) {
        int64_t v;
        if (!dck_pk_int(it[i], &v) || v < 0) return dck_pk_error(c, DCK_ERR_FORMAT, what);
        out[i] = (uint64_t)v;
    }
    *nd = (int)n;
    return DCK_OK;
}

/* ------------------------------------------------------------------ persistent ids */

/* ('storage', StorageType, key, location, numel[, view]) is a torch storage;
 * any other id stays a PK_PERSID. */
static dck_status torch_persistent_load(pk_ctx *c, pk_node *pid, pk_node **out) {
    size_t n;
    pk_node **a = dck_pk_items(pid, &n);
    dck_status s;
    if (a && n >= 5 && a[0]->kind == PK_STR && !strcmp(a[0]->u.s.p, "storage")) {
        pk_node *r = dck_pk_new_node(c, PK_STORAGE, &s);
        if (!r) return s;
        pk_node *ty = a[1];
        if (ty->kind != PK_GLOBAL) return dck_pk_error(c, DCK_ERR_FORMAT, "storage type is not a class");
        r->u.storage.type_name = ty->u.global.name;
        int d = dck_pk_storage_dtype(ty->u.global.name);
        r->u.storage.dtype = d == -2 ? DCK_U8 : d;
        if (a[2]->kind == PK_STR) r->u.storage.key = a[2]->u.s.p;
        else if (a[2]->kind == PK_INT) {
            char buf[32];
            snprintf(buf, sizeof buf, "%lld", (long long)a[2]->u.i);
            pk_node *k = dck_pk_new_str(c, buf, strlen(buf), -1, PK_STR, &s);
            if (!k) return s;
            r->u.storage.key = k->u.s.p;
        } else
            return dck_pk_error(c, DCK_ERR_FORMAT, "storage key is not a string");
        r->u.storage.location = a[3]->kind == PK_STR ? a[3]->u.s.p : "?";
        int64_t numel;
        if (!dck_pk_int(a[4], &numel) || numel < 0) return dck_pk_error(c, DCK_ERR_FORMAT, "bad storage size");
        r->u.storage.numel = (uint64_t)numel;
        if (n >= 6 && a[5]->kind != PK_NONE) {
            size_t m;
            pk_node **v = dck_pk_items(a[5], &m);
            int64_t vo, vs;
            if (m != 3 || !dck_pk_int(v[1], &vo) || !dck_pk_int(v[2], &vs) || vo < 0 || vs < 0 ||
                v[0]->kind != PK_STR)
                return dck_pk_error(c, DCK_ERR_FORMAT, "bad storage view metadata");
            /* the tensor refers to the view: key becomes the view's root */
            r->u.storage.is_view = true;
            r->u.storage.view_offset = (uint64_t)vo;
            r->u.storage.view_size = (uint64_t)vs;
        }
        DCK_TRY(dck_pk_add_storage(c, r));
        *out = r;
        return DCK_OK;
    }
    pk_node *r = dck_pk_new_node(c, PK_PERSID, &s);
    if (!r) return s;
    r->u.persid.pid = pid;
    *out = r;
    return DCK_OK;
}

/* ------------------------------------------------------------------ REDUCE and NEWOBJ handlers
 * Each sets *out, or leaves it NULL to keep the call an opaque object. */

static dck_status rebuild_tensor(pk_ctx *c, const pk_call *k, int version, pk_node **out) {
    size_t n = k->n;
    pk_node **a = k->a;
    if (!a || n < 4 || (version == 3 && n < 7))
        return dck_pk_error(c, DCK_ERR_FORMAT, "_rebuild_tensor with too few arguments");
    if (a[0]->kind == PK_TUPLE) { /* a storage id in place (hand-written tar files) */
        pk_node *st;
        DCK_TRY(torch_persistent_load(c, a[0], &st));
        a[0] = st;
    }
    if (a[0]->kind != PK_STORAGE)
        return dck_pk_error(c, DCK_ERR_FORMAT, "_rebuild_tensor of something that is not a storage");
    pk_node *t;
    DCK_TRY(dck_pk_new_tensor(c, &t));
    pk_tensor *tt = t->u.tensor;
    tt->storage = a[0];
    a[0]->u.storage.used = true;
    int64_t off;
    if (!dck_pk_int(a[1], &off) || off < 0) return dck_pk_error(c, DCK_ERR_FORMAT, "bad tensor storage offset");
    tt->offset = (uint64_t)off;
    int nd2;
    uint64_t st[DCK_MAX_DIMS];
    DCK_TRY(shape_of(c, a[2], &tt->ndim, tt->size, "bad tensor size"));
    DCK_TRY(shape_of(c, a[3], &nd2, st, "bad tensor stride"));
    if (nd2 != tt->ndim) return dck_pk_error(c, DCK_ERR_FORMAT, "tensor size and stride differ in length");
    for (int i = 0; i < nd2; i++) {
        if (st[i] > (uint64_t)INT64_MAX) return dck_pk_error(c, DCK_ERR_FORMAT, "bad tensor stride");
        tt->stride[i] = (int64_t)st[i];
    }
    if (version == 3) {
        pk_node *d = a[6];
        if (d->kind != PK_GLOBAL) return dck_pk_error(c, DCK_ERR_FORMAT, "_rebuild_tensor_v3 without a dtype");
        tt->dtype = dck_pk_torch_dtype(d->u.global.name);
        tt->dtype_name = d->u.global.name;
    } else {
        tt->dtype = a[0]->u.storage.dtype;
        tt->dtype_name = a[0]->u.storage.type_name;
    }
    *out = t;
    return DCK_OK;
}

static dck_status rebuild_tensor_v1(pk_ctx *c, const pk_call *k, pk_node **out) { return rebuild_tensor(c, k, 1, out); }
static dck_status rebuild_tensor_v2(pk_ctx *c, const pk_call *k, pk_node **out) { return rebuild_tensor(c, k, 2, out); }
static dck_status rebuild_tensor_v3(pk_ctx *c, const pk_call *k, pk_node **out) { return rebuild_tensor(c, k, 3, out); }

/* _rebuild_qtensor(storage, offset, size, stride, quantizer_params,
 * requires_grad, hooks): the stored integers as a tensor of the storage's
 * dtype (qint8 I8, quint8 U8, qint32 I32), with quantizer_params
 * (qscheme, scale, zero_point) per tensor or (qscheme, scales, zero_points,
 * axis) per channel, scales and zero points being tensors. torch writes
 * per_channel_affine for the float_qparams scheme too; both are read. */
static dck_status rebuild_qtensor(pk_ctx *c, const pk_call *k, pk_node **out) {
    static const struct {
        const char *name;
        bool per_channel;
    } schemes[] = {
        {"per_tensor_affine", false},
        {"per_channel_affine", true},
        {"per_channel_affine_float_qparams", true},
    };
    if (!k->a || k->n < 5) return dck_pk_error(c, DCK_ERR_FORMAT, "_rebuild_qtensor with too few arguments");
    pk_node *t = NULL;
    DCK_TRY(rebuild_tensor(c, k, 2, &t));
    pk_tensor *tt = t->u.tensor;
    size_t n;
    pk_node **q = dck_pk_items(k->a[4], &n);
    if (!q || n < 1 || q[0]->kind != PK_GLOBAL)
        return dck_pk_error(c, DCK_ERR_FORMAT, "_rebuild_qtensor without a qscheme");
    const char *qs = q[0]->u.global.name;
    size_t i = 0;
    while (i < sizeof schemes / sizeof schemes[0] && strcmp(schemes[i].name, qs)) i++;
    if (i == sizeof schemes / sizeof schemes[0]) {
        char what[160];
        snprintf(what, sizeof what, "quantized tensor with qscheme %.64s, which detcheck does not read", qs);
        return dck_pk_error(c, DCK_ERR_UNSUPPORTED, what);
    }
    tt->qscheme = qs;
    tt->per_channel = schemes[i].per_channel;
    if (!tt->per_channel) {
        if (n != 3 || (q[1]->kind != PK_FLOAT && q[1]->kind != PK_INT) || q[2]->kind != PK_INT)
            return dck_pk_error(c, DCK_ERR_FORMAT, "bad per-tensor quantizer parameters");
    } else if (n != 4 || q[1]->kind != PK_TENSOR || q[2]->kind != PK_TENSOR || !dck_pk_int(q[3], &tt->qaxis) ||
               tt->qaxis < 0 || tt->qaxis >= (tt->ndim ? tt->ndim : 1)) {
        return dck_pk_error(c, DCK_ERR_FORMAT, "bad per-channel quantizer parameters");
    }
    tt->qscale = q[1];
    tt->qzero = q[2];
    *out = t;
    return DCK_OK;
}

dck_status dck_pk_check_storages_used(const pk_ctx *c, const char *label) {
    size_t n;
    pk_node *const *st = dck_pk_storages(c, &n);
    for (size_t i = 0; i < n; i++) {
        const pk_node *s = st[i];
        if (s->u.storage.used) continue;
        const pk_node *g = s->u.storage.passed_to;
        if (g)
            return dck_set_error(DCK_ERR_UNSUPPORTED,
                                 "%s: storage %s (%s) is read by %s.%s, which detcheck does not know: "
                                 "its bytes would go unhashed",
                                 label, s->u.storage.key, s->u.storage.type_name, g->u.global.module,
                                 g->u.global.name);
        return dck_set_error(DCK_ERR_UNSUPPORTED,
                             "%s: storage %s (%s) is not read by any tensor detcheck knows: its bytes "
                             "would go unhashed",
                             label, s->u.storage.key, s->u.storage.type_name);
    }
    return DCK_OK;
}

/* _rebuild_parameter(tensor, ...): the tensor. */
static dck_status rebuild_parameter(pk_ctx *c, const pk_call *k, pk_node **out) {
    (void)c;
    if (k->n >= 1 && k->a[0]->kind == PK_TENSOR) *out = k->a[0];
    return DCK_OK;
}

/* _rebuild_from_type(func, type, args, dict): func(*args); types nest, and
 * hostile arguments may loop through the memo, hence the depth bound. */
static dck_status rebuild_from_type(pk_ctx *c, const pk_call *k, pk_node **out) {
    if (k->n < 3 || k->a[0]->kind != PK_GLOBAL) return DCK_OK;
    if (k->depth + 1 > 8) return dck_pk_error(c, DCK_ERR_LIMIT, "_rebuild_from_type nested deeper than 8");
    return dck_pk_reduce(c, k->a[0], k->a[2], k->depth + 1, out);
}

/* torch.Size((d0, d1, ...)): the tuple. */
static dck_status torch_size(pk_ctx *c, const pk_call *k, pk_node **out) {
    (void)c;
    if (k->n == 1 && dck_pk_items(k->a[0], &(size_t){0})) *out = k->a[0];
    return DCK_OK;
}

/* _codecs.encode(text, encoding): protocol 2's way of writing bytes. */
static dck_status codecs_encode(pk_ctx *c, const pk_call *k, pk_node **out) {
    size_t n = k->n;
    pk_node **a = k->a;
    if (!a || n < 1 || a[0]->kind != PK_STR) return dck_pk_error(c, DCK_ERR_FORMAT, "bad _codecs.encode");
    const char *enc = n >= 2 && a[1]->kind == PK_STR ? a[1]->u.s.p : "utf-8";
    const uint8_t *p = (const uint8_t *)a[0]->u.s.p;
    size_t len = a[0]->u.s.len;
    dck_status s;
    if (!strcmp(enc, "utf-8") || !strcmp(enc, "utf8") || !strcmp(enc, "ascii")) {
        *out = dck_pk_new_str(c, (const char *)p, len, -1, PK_BYTES, &s);
        return *out ? DCK_OK : s;
    }
    if (strcmp(enc, "latin1") && strcmp(enc, "latin-1") && strcmp(enc, "iso-8859-1"))
        return dck_pk_error(c, DCK_ERR_UNSUPPORTED, "_codecs.encode with an encoding other than latin1/utf-8");
    pk_node *b = dck_pk_new_node(c, PK_BYTES, &s);
    if (!b) return s;
    uint8_t *q = dck_pk_alloc(c, len + 1, &s);
    if (!q) return s;
    size_t j = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        int w = dck_utf8_decode(p + i, p + len, &cp);
        if (!w) return dck_pk_error(c, DCK_ERR_FORMAT, "_codecs.encode latin1 text that is not UTF-8");
        if (cp > 0xff)
            return dck_pk_error(c, DCK_ERR_FORMAT, "_codecs.encode latin1 text with a code point above 255");
        q[j++] = (uint8_t)cp;
        i += (size_t)w;
    }
    b->u.s.p = (const char *)q;
    b->u.s.len = j;
    b->u.s.src = -1;
    *out = b;
    return DCK_OK;
}

/* bytes() / bytearray() of nothing, of bytes, or of text and an encoding. */
static dck_status bytes_from(pk_ctx *c, const pk_call *k, pk_node **out) {
    dck_status s;
    if (k->n == 0) {
        *out = dck_pk_new_str(c, "", 0, -1, PK_BYTES, &s);
        return *out ? DCK_OK : s;
    }
    if (k->a[0]->kind == PK_BYTES) {
        *out = k->a[0];
        return DCK_OK;
    }
    if (k->a[0]->kind == PK_STR) return codecs_encode(c, k, out);
    return DCK_OK;
}

static dck_status fill_dict_from(pk_ctx *c, pk_node *d, pk_node *src) {
    if (!src) return DCK_OK;
    if (src->kind == PK_DICT) {
        for (size_t i = 0; i < src->u.dict.n; i++)
            DCK_TRY(dck_pk_dict_set(c, d, src->u.dict.keys[i], src->u.dict.vals[i]));
        return DCK_OK;
    }
    size_t n;
    pk_node **it = dck_pk_items(src, &n);
    for (size_t i = 0; i < n; i++) {
        size_t m;
        pk_node **kv = dck_pk_items(it[i], &m);
        if (m != 2) return dck_pk_error(c, DCK_ERR_FORMAT, "dict built from something that is not pairs");
        DCK_TRY(dck_pk_dict_set(c, d, kv[0], kv[1]));
    }
    return DCK_OK;
}

/* dict(src) / OrderedDict(src): a dict of a dict or of (key, value) pairs. */
static dck_status dict_from(pk_ctx *c, const pk_call *k, pk_node **out) {
    dck_status s;
    pk_node *d = dck_pk_new_node(c, PK_DICT, &s);
    if (!d) return s;
    if (k->n >= 1) DCK_TRY(fill_dict_from(c, d, k->a[0]));
    *out = d;
    return DCK_OK;
}

/* list(it), tuple(it), set(it), frozenset(it): the items of a sequence. */
static dck_status seq_from(pk_ctx *c, const pk_call *k, pk_kind kind, pk_node **out) {
    dck_status s;
    pk_node *r = dck_pk_new_node(c, kind, &s);
    if (!r) return s;
    size_t n = 0;
    pk_node **it = k->n >= 1 ? dck_pk_items(k->a[0], &n) : NULL;
    for (size_t i = 0; i < n; i++) DCK_TRY(dck_pk_seq_push(c, r, it[i]));
    *out = r;
    return DCK_OK;
}

static dck_status list_from(pk_ctx *c, const pk_call *k, pk_node **out) { return seq_from(c, k, PK_LIST, out); }
static dck_status tuple_from(pk_ctx *c, const pk_call *k, pk_node **out) { return seq_from(c, k, PK_TUPLE, out); }
static dck_status set_from(pk_ctx *c, const pk_call *k, pk_node **out) { return seq_from(c, k, PK_SET, out); }

/* Empty containers (NEWOBJ; items and keys come by APPENDS / SETITEMS). */
static dck_status empty(pk_ctx *c, pk_kind kind, pk_node **out) {
    dck_status s;
    *out = dck_pk_new_node(c, kind, &s);
    return *out ? DCK_OK : s;
}

static dck_status empty_dict(pk_ctx *c, const pk_call *k, pk_node **out) { (void)k; return empty(c, PK_DICT, out); }
static dck_status empty_list(pk_ctx *c, const pk_call *k, pk_node **out) { (void)k; return empty(c, PK_LIST, out); }
static dck_status empty_set(pk_ctx *c, const pk_call *k, pk_node **out) { (void)k; return empty(c, PK_SET, out); }

/* numpy _reconstruct(ndarray, shape, dtype): an array filled in by BUILD. */
static dck_status np_reconstruct(pk_ctx *c, const pk_call *k, pk_node **out) {
    (void)k;
    dck_status s;
    pk_node *r = dck_pk_new_node(c, PK_NDARRAY, &s);
    if (!r) return s;
    pk_ndarray *nd = dck_pk_alloc(c, sizeof *nd, &s);
    if (!nd) return s;
    memset(nd, 0, sizeof *nd);
    r->u.ndarray = nd;
    *out = r;
    return DCK_OK;
}

/* numpy dtype("f4", ...): its byte order comes by BUILD. */
static dck_status np_dtype(pk_ctx *c, const pk_call *k, pk_node **out) {
    if (k->n < 1 || k->a[0]->kind != PK_STR) return DCK_OK;
    dck_status s;
    pk_node *r = dck_pk_new_node(c, PK_NPDTYPE, &s);
    if (!r) return s;
    snprintf(r->u.npdtype.code, sizeof r->u.npdtype.code, "%s", k->a[0]->u.s.p);
    bool bs;
    r->u.npdtype.dtype = dck_pk_numpy_dtype(r->u.npdtype.code, &bs);
    r->u.npdtype.order = '=';
    *out = r;
    return DCK_OK;
}

/* numpy scalar(dtype, bytes) -> a plain number (opaque when the dtype is
 * not one detcheck reads, or a u64 beyond int64). */
static dck_status np_scalar(pk_ctx *c, const pk_call *k, pk_node **out) {
    size_t n = k->n;
    pk_node **a = k->a;
    if (!a || n < 2 || a[0]->kind != PK_NPDTYPE || a[1]->kind != PK_BYTES)
        return dck_pk_error(c, DCK_ERR_FORMAT, "bad numpy scalar");
    int t = a[0]->u.npdtype.dtype;
    /* complex scalars have no one-number text: left opaque, as unknown dtypes */
    if (t < 0 || t == DCK_C64 || t == DCK_C128 || a[1]->u.s.len != dck_dtype_size((dck_dtype)t))
        return DCK_OK;
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
        r = dck_pk_new_node(c, PK_BOOL, &s);
        if (r) r->u.b = b[0] != 0;
        break;
    case DCK_F16: case DCK_BF16: case DCK_F8_E4M3: case DCK_F8_E5M2: case DCK_F32: case DCK_F64:
        r = dck_pk_new_node(c, PK_FLOAT, &s);
        if (r) r->u.f = dck_element_to_double((dck_dtype)t, b);
        break;
    case DCK_U64: {
        uint64_t v = rd_le(b, 8);
        if (v > (uint64_t)INT64_MAX) return DCK_OK;
        r = dck_pk_new_node(c, PK_INT, &s);
        if (r) r->u.i = (int64_t)v;
        break;
    }
    default: {
        size_t l = dck_dtype_size((dck_dtype)t);
        uint64_t v = rd_le(b, (int)l);
        bool sgn = t == DCK_I8 || t == DCK_I16 || t == DCK_I32 || t == DCK_I64;
        if (sgn && l < 8 && (v >> (8 * l - 1)) & 1) v |= ~(uint64_t)0 << (8 * l);
        r = dck_pk_new_node(c, PK_INT, &s);
        if (r) r->u.i = (int64_t)v;
    }
    }
    if (!r) return s;
    *out = r;
    return DCK_OK;
}

/* ------------------------------------------------------------------ the allow-list
 * The only globals whose calls build values: REDUCE is fn(*args), NEWOBJ
 * (also NEWOBJ_EX, INST, OBJ) is cls.__new__(cls, *args). An empty column,
 * a handler that does not recognise its arguments, and every module.name
 * that has no row here make an opaque object that keeps the call's
 * arguments. Nothing is ever imported or run. */
static const pk_global_rule GLOBALS[] = {
    /* module                  name                             REDUCE             NEWOBJ */
    {"collections",            "OrderedDict",                   dict_from,         empty_dict},
    {"collections",            "defaultdict",                   empty_dict,        empty_dict},
    {"builtins",               "dict",                          dict_from,         empty_dict},
    {"__builtin__",            "dict",                          dict_from,         empty_dict},
    {"builtins",               "list",                          list_from,         empty_list},
    {"builtins",               "set",                           set_from,          empty_set},
    {"builtins",               "frozenset",                     set_from,          NULL},
    {"builtins",               "tuple",                         tuple_from,        NULL},
    {"__builtin__",            "list",                          list_from,         NULL},
    {"__builtin__",            "set",                           set_from,          NULL},
    {"__builtin__",            "frozenset",                     set_from,          NULL},
    {"__builtin__",            "tuple",                         tuple_from,        NULL},
    {"builtins",               "bytes",                         bytes_from,        NULL},
    {"builtins",               "bytearray",                     bytes_from,        NULL},
    {"__builtin__",            "bytes",                         bytes_from,        NULL},
    {"__builtin__",            "bytearray",                     bytes_from,        NULL},
    {"_codecs",                "encode",                        codecs_encode,     NULL},
    {"torch",                  "Size",                          torch_size,        NULL},
    {"torch._utils",           "_rebuild_tensor",               rebuild_tensor_v1, NULL},
    {"torch._utils",           "_rebuild_tensor_v2",            rebuild_tensor_v2, NULL},
    {"torch._utils",           "_rebuild_tensor_v3",            rebuild_tensor_v3, NULL},
    {"torch._utils",           "_rebuild_qtensor",              rebuild_qtensor,   NULL},
    {"torch._utils",           "_rebuild_parameter",            rebuild_parameter, NULL},
    {"torch._utils",           "_rebuild_parameter_with_state", rebuild_parameter, NULL},
    {"torch._utils",           "_rebuild_from_type",            rebuild_from_type, NULL},
    {"torch._tensor",          "_rebuild_from_type_v2",         rebuild_from_type, NULL},
    {"numpy",                  "_reconstruct",                  np_reconstruct,    NULL},
    {"numpy",                  "dtype",                         np_dtype,          NULL},
    {"numpy",                  "scalar",                        np_scalar,         NULL},
    {"numpy.core.multiarray",  "_reconstruct",                  np_reconstruct,    NULL},
    {"numpy.core.multiarray",  "dtype",                         np_dtype,          NULL},
    {"numpy.core.multiarray",  "scalar",                        np_scalar,         NULL},
    {"numpy._core.multiarray", "_reconstruct",                  np_reconstruct,    NULL},
    {"numpy._core.multiarray", "dtype",                         np_dtype,          NULL},
    {"numpy._core.multiarray", "scalar",                        np_scalar,         NULL},
};

/* ------------------------------------------------------------------ BUILD */

static dck_status ndarray_build(pk_ctx *c, pk_node *arr, pk_node *state) {
    size_t n;
    pk_node **a = dck_pk_items(state, &n);
    pk_ndarray *nd = arr->u.ndarray;
    if (!a || (n != 5 && n != 4)) return dck_pk_error(c, DCK_ERR_FORMAT, "bad numpy array state");
    size_t k = n == 5 ? 1 : 0;
    DCK_TRY(shape_of(c, a[k], &nd->ndim, nd->shape, "bad numpy array shape"));
    if (a[k + 1]->kind != PK_NPDTYPE) return dck_pk_error(c, DCK_ERR_FORMAT, "numpy array without a dtype");
    nd->dtype = a[k + 1];
    int64_t f;
    nd->fortran = dck_pk_int(a[k + 2], &f) && f;
    nd->data = a[k + 3];
    return DCK_OK;
}

/* BUILD of what the handlers above made (opaque objects are the VM's). */
static dck_status torch_build(pk_ctx *c, pk_node *obj, pk_node *state) {
    switch (obj->kind) {
    case PK_NDARRAY:
        return ndarray_build(c, obj, state);
    case PK_NPDTYPE: {
        size_t n;
        pk_node **a = dck_pk_items(state, &n);
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

const pk_handlers dck_pk_torch_handlers = {
    GLOBALS, sizeof GLOBALS / sizeof GLOBALS[0], torch_persistent_load, torch_build,
};

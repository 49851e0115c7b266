/* PyTorch torch.save files: the zip format (PyTorch 1.6 on), the legacy
 * format (pickled magic number, protocol, sys_info, object, storage keys,
 * then the storages) and the old tar format. Tensors are pieces of the file
 * itself: stored zip entries and legacy storages are read in place. */
#include "formats/readers.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zstd.h>

/* ------------------------------------------------------------------ decoded bytes
 * A .pt.zst is decompressed to a temporary file before its zip is read (io.c
 * bounds that, as every zstd input: dck_decoded_limit), and deflated members
 * are inflated to another here, under the same bound over the bytes on disk
 * of the checkpoint's files. */

/* The memfile's bound: on-disk bytes of the checkpoint's files so far. */
static dck_status memfile_limit(const dck_memfile *m, uint64_t *out) {
    uint64_t disk = 0;
    for (size_t i = 0; i < m->ck->nfiles; i++)
        if (m->ck->files[i]->relpath) disk += m->ck->files[i]->size;
    return dck_decoded_limit(m->label, disk, out);
}

/* ------------------------------------------------------------------ memfile */

static dck_status memfile_pwrite(dck_memfile *m, uint64_t off, const void *data, size_t len) {
    dck_file *f = m->ck->files[m->index];
    size_t done = 0;
    while (done < len) {
        ssize_t r = pwrite(f->fd, (const uint8_t *)data + done, len - done, (off_t)(off + done));
        if (r < 0) {
            if (errno == EINTR) continue;
            return dck_set_error(DCK_ERR_IO, "%s: cannot write a temporary file: %s", m->label,
                                 strerror(errno));
        }
        done += (size_t)r;
    }
    return DCK_OK;
}

static dck_status memfile_open(dck_memfile *m) {
    if (!m->open) {
        const char *tdir = getenv("TMPDIR");
        if (!tdir || !*tdir) tdir = "/tmp";
        int fd = open(tdir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
        if (fd < 0) {
            char *tmpl = dck_path_join(tdir, "detcheck-decoded.XXXXXX");
            fd = tmpl ? mkstemp(tmpl) : -1;
            if (fd >= 0) unlink(tmpl);
            free(tmpl);
        }
        if (fd < 0)
            return dck_set_error(DCK_ERR_IO, "%s: cannot create a temporary file in %s: %s", m->label,
                                 tdir, strerror(errno));
        dck_file *f = calloc(1, sizeof *f);
        if (!f || !(f->path = dck_strdup(m->label))) {
            free(f);
            close(fd);
            return dck_oom(NULL);
        }
        f->fd = fd;
        f->tmp_fd = -1;
        f->relpath = NULL; /* decoded bytes: not a file of the checkpoint */
        pthread_mutex_init(&f->map_mu, NULL);
        dck_status s = dck_ck_add_file(m->ck, f, &m->index);
        if (s) return s;
        m->open = true;
        m->size = 0;
    }
    return DCK_OK;
}

/* Room for len bytes at a 64-byte aligned offset. */
static dck_status memfile_reserve(dck_memfile *m, uint64_t len, uint32_t *file, uint64_t *offset) {
    dck_status s = memfile_open(m);
    if (s) return s;
    dck_file *f = m->ck->files[m->index];
    uint64_t off = (m->size + 63) & ~(uint64_t)63, limit;
    if (len > UINT64_MAX / 2 - off) return dck_set_error(DCK_ERR_LIMIT, "%s: decoded data too large", m->label);
    DCK_TRY(memfile_limit(m, &limit));
    if (off + len > limit) return dck_decoded_too_large(m->label, "has inflated members and views of", limit);
    m->size = off + len;
    if (ftruncate(f->fd, (off_t)m->size) != 0)
        return dck_set_error(DCK_ERR_IO, "%s: cannot write a temporary file: %s", m->label, strerror(errno));
    f->size = f->data_size = m->size;
    *file = m->index;
    *offset = off;
    return DCK_OK;
}

dck_status dck_memfile_append(dck_memfile *m, const void *data, size_t len, uint32_t *file,
                              uint64_t *offset) {
    dck_status s = memfile_reserve(m, len, file, offset);
    return s ? s : memfile_pwrite(m, *offset, data, len);
}

typedef struct {
    dck_memfile *m;
    uint64_t base;
} entry_sink;

static dck_status sink_to_memfile(void *ctx, uint64_t off, const void *data, size_t len) {
    entry_sink *es = ctx;
    return memfile_pwrite(es->m, es->base + off, data, len);
}

dck_status dck_memfile_add_entry(dck_memfile *m, const dck_zip_entry *e, const uint8_t *zip_data,
                                 const char *label, uint32_t *file, uint64_t *offset) {
    dck_status s = memfile_reserve(m, e->usize, file, offset);
    if (s) return s;
    entry_sink es = {m, *offset};
    return dck_zip_extract_stream(e, zip_data, sink_to_memfile, &es, label);
}

dck_status dck_memfile_read(dck_memfile *m, uint64_t off, void *buf, size_t len) {
    if (!m->open) return dck_set_error(DCK_ERR_INVALID, "%s: nothing decoded", m->label);
    dck_file *f = m->ck->files[m->index];
    size_t done = 0;
    while (done < len) {
        ssize_t r = pread(f->fd, (uint8_t *)buf + done, len - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return dck_set_error(DCK_ERR_IO, "%s: cannot read a temporary file", m->label);
        done += (size_t)r;
    }
    return DCK_OK;
}

/* ------------------------------------------------------------------ pieces */

dck_status dck_rd_piece(const char *label, const char *name, dck_dtype dtype, int ndim,
                        const uint64_t *shape, const int64_t *strides, uint64_t first,
                        uint64_t base_offset, uint64_t avail, uint32_t file, bool byteswap,
                        dck_piece *out) {
    memset(out, 0, sizeof *out);
    size_t es = dck_dtype_size(dtype);
    uint64_t numel = 1;
    bool empty = false;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 0) empty = true;
        else if (numel > UINT64_MAX / shape[i])
            return dck_set_error(DCK_ERR_LIMIT, "%s: tensor %s: element count overflows", label, name);
        else numel *= shape[i];
    }
    if (empty) numel = 0;
    /* last element reached, in elements from the storage start */
    uint64_t last = first;
    bool contiguous = true;
    if (numel) {
        uint64_t expect = 1;
        for (int i = ndim - 1; i >= 0; i--) {
            if (strides) {
                if (strides[i] < 0)
                    return dck_set_error(DCK_ERR_FORMAT, "%s: tensor %s: negative stride", label, name);
                uint64_t st = (uint64_t)strides[i];
                if (shape[i] > 1 && st != expect) contiguous = false;
                if (shape[i] > 1) {
                    if (st && (shape[i] - 1) > (UINT64_MAX / 2 - last) / st)
                        return dck_set_error(DCK_ERR_FORMAT, "%s: tensor %s: storage extent overflows",
                                             label, name);
                    last += (shape[i] - 1) * st;
                }
            }
            expect *= shape[i];
        }
        if (!strides) last = first + numel - 1;
        if (last >= UINT64_MAX / 16 || (last + 1) * es > avail)
            return dck_set_error(DCK_ERR_FORMAT,
                                 "%s: tensor %s: elements up to %llu lie outside its storage of %llu bytes",
                                 label, name, (unsigned long long)(last + 1),
                                 (unsigned long long)avail);
    }
    if (first > UINT64_MAX / 16 || base_offset > UINT64_MAX - first * es)
        return dck_set_error(DCK_ERR_FORMAT, "%s: tensor %s: storage offset overflows", label, name);
    out->file = file;
    out->file_offset = base_offset + (numel ? first * es : 0);
    for (int i = 0; i < ndim; i++) out->shape[i] = shape[i];
    out->byteswap = byteswap && es > 1;
    if (strides && !contiguous && numel) {
        out->strides = malloc(sizeof(int64_t) * (size_t)(ndim ? ndim : 1));
        if (!out->strides) return dck_oom(NULL);
        memcpy(out->strides, strides, sizeof(int64_t) * (size_t)ndim);
    }
    return DCK_OK;
}

/* ------------------------------------------------------------------ sources */

typedef struct {
    const char *key;
    uint32_t file;
    uint64_t off;   /* file offset of the storage's first byte */
    uint64_t bytes;
    size_t es;      /* element size of the storage (tar views count in elements) */
} st_loc;

typedef struct {
    const char *key;
    pk_tensor t;
    pk_node storage;
} tar_tensor;

typedef struct {
    dck_checkpoint *ck;
    uint32_t file;
    const char *label;
    const uint8_t *data; /* container bytes */
    uint64_t len, base;  /* base: offset of data[0] in the file */
    const dck_zip *zip;
    const char *zprefix;
    st_loc *locs;        /* resolved storages */
    size_t nlocs, cap_locs;
    size_t *slots;       /* index of locs by key: locs index + 1, 0 empty */
    size_t nslots;
    tar_tensor *tt;      /* tar format: tensors by key */
    size_t ntt;
    bool byteswap;
    bool pkl_in_file;    /* pickle bytes are the file's (zero-copy BINBYTES) */
    const dck_pt_opts *o;
    dck_memfile *mem;
    size_t count;        /* tensors added */
} pt_src;

/* Storages by key: an open-addressing index (files hold up to millions). */
static size_t key_hash(const char *k) {
    uint64_t h = 1469598103934665603ull;
    for (; *k; k++) h = (h ^ (uint8_t)*k) * 1099511628211ull;
    return (size_t)h;
}

static st_loc *find_loc(pt_src *p, const char *key) {
    if (!p->slots) return NULL;
    for (size_t h = key_hash(key) & (p->nslots - 1);; h = (h + 1) & (p->nslots - 1)) {
        size_t i = p->slots[h];
        if (!i) return NULL;
        if (!strcmp(p->locs[i - 1].key, key)) return &p->locs[i - 1];
    }
}

static dck_status add_loc(pt_src *p, const char *key, uint32_t file, uint64_t off, uint64_t bytes) {
    if (find_loc(p, key)) return dck_set_error(DCK_ERR_FORMAT, "%s: storage %s appears twice", p->label, key);
    dck_status s = dck_grow((void **)&p->locs, &p->cap_locs, p->nlocs + 1, sizeof *p->locs);
    if (s) return s;
    p->locs[p->nlocs++] = (st_loc){key, file, off, bytes, 1};
    if (p->nlocs * 2 > p->nslots) {
        size_t n = p->nslots ? p->nslots * 2 : 64;
        while (n < p->nlocs * 2) n *= 2;
        size_t *sl = calloc(n, sizeof *sl);
        if (!sl) return dck_oom(NULL);
        free(p->slots);
        p->slots = sl;
        p->nslots = n;
        for (size_t i = 0; i < p->nlocs; i++) {
            size_t h = key_hash(p->locs[i].key) & (n - 1);
            while (sl[h]) h = (h + 1) & (n - 1);
            sl[h] = i + 1;
        }
    } else {
        size_t h = key_hash(key) & (p->nslots - 1);
        while (p->slots[h]) h = (h + 1) & (p->nslots - 1);
        p->slots[h] = p->nlocs;
    }
    return DCK_OK;
}

/* Where the bytes of a storage are. */
static dck_status storage_loc(pt_src *p, const pk_node *st, uint32_t *file, uint64_t *off,
                              uint64_t *bytes) {
    const char *key = st->u.storage.key;
    st_loc *l = find_loc(p, key);
    if (!l && p->zip) {
        size_t n = strlen(p->zprefix) + strlen(key) + 8;
        char *ename = malloc(n);
        if (!ename) return dck_oom(NULL);
        snprintf(ename, n, "%sdata/%s", p->zprefix, key);
        const dck_zip_entry *e = dck_zip_find(p->zip, ename);
        free(ename);
        if (!e)
            return dck_set_error(DCK_ERR_FORMAT, "%s: storage %s has no entry %sdata/%s", p->label, key,
                                 p->zprefix, key);
        dck_status s;
        if (e->method == 0) {
            s = add_loc(p, key, p->file, p->base + e->data_offset, e->usize);
        } else {
            uint32_t f;
            uint64_t o;
            s = dck_memfile_add_entry(p->mem, e, p->data, p->label, &f, &o);
            if (!s) s = add_loc(p, key, f, o, e->usize);
        }
        if (s) return s;
        l = &p->locs[p->nlocs - 1];
    }
    if (!l) return dck_set_error(DCK_ERR_FORMAT, "%s: storage %s is not in the file", p->label, key);
    *file = l->file;
    *off = l->off;
    *bytes = l->bytes;
    if (st->u.storage.is_view) { /* legacy storage views: a byte range of the root */
        int d = st->u.storage.dtype;
        size_t es = d >= 0 ? dck_dtype_size((dck_dtype)d) : 1;
        uint64_t vo = st->u.storage.view_offset, vs = st->u.storage.view_size;
        if (vo > l->bytes / es || vs > l->bytes / es - vo)
            return dck_set_error(DCK_ERR_FORMAT, "%s: storage view outside storage %s", p->label, key);
        *off += vo * es;
        *bytes = vs * es;
    }
    return DCK_OK;
}

static const char *leaf_name(pt_src *p, const char *name, const char *fallback) {
    if (*name) return name;
    if (p->o && p->o->root_name) return p->o->root_name;
    return fallback;
}

/* A strided piece copied, in row-major order, to the decoded file: the
 * chunks of a sharded tensor must be contiguous (a DCP chunk saved from a
 * view keeps its view's strides). */
static dck_status densify(pt_src *p, const char *name, dck_dtype dt, int nd, const uint64_t *shape, dck_piece *pc) {
    size_t es = dck_dtype_size(dt);
    uint64_t numel = 1, last = 0;
    for (int i = 0; i < nd; i++) {
        numel *= shape[i];
        if (shape[i]) last += (shape[i] - 1) * (uint64_t)pc->strides[i];
    }
    uint64_t span = numel ? (last + 1) * es : 0;
    const uint8_t *src;
    uint8_t *own = NULL;
    dck_status s = DCK_OK;
    if (pc->file == p->file) {
        src = p->data + (pc->file_offset - p->base); /* inside the container, checked by dck_rd_piece */
    } else {
        if (!(own = malloc(span ? (size_t)span : 1))) return dck_oom(NULL);
        if ((s = dck_memfile_read(p->mem, pc->file_offset, own, (size_t)span))) {
            free(own);
            return s;
        }
        src = own;
    }
    uint32_t file = 0;
    uint64_t off = 0;
    if ((s = memfile_reserve(p->mem, numel * es, &file, &off))) {
        free(own);
        return s;
    }
    enum { CHUNK = 1 << 20 };
    uint8_t *buf = malloc(CHUNK);
    uint64_t idx[DCK_MAX_DIMS] = {0};
    size_t fill = 0;
    uint64_t out = 0;
    for (uint64_t e = 0; e < numel && !s && buf; e++) {
        uint64_t at = 0;
        for (int i = 0; i < nd; i++) at += idx[i] * (uint64_t)pc->strides[i];
        memcpy(buf + fill, src + at * es, es);
        fill += es;
        if (fill + es > CHUNK || e + 1 == numel) {
            s = memfile_pwrite(p->mem, off + out, buf, fill);
            out += fill;
            fill = 0;
        }
        for (int i = nd - 1; i >= 0; i--) { /* next index, row-major */
            if (++idx[i] < shape[i]) break;
            idx[i] = 0;
        }
    }
    if (!buf) s = dck_oom(NULL);
    free(buf);
    free(own);
    if (s) return dck_set_error(s, "%s: tensor %s: %s", p->label, name, dck_last_error());
    free(pc->strides);
    pc->strides = NULL;
    pc->file = file;
    pc->file_offset = off;
    return DCK_OK;
}

static dck_status emit_tensor(pt_src *p, const char *name, const pk_tensor *t) {
    if (t->dtype < 0)
        return dck_set_error(DCK_ERR_UNSUPPORTED, "%s: tensor %s has dtype %s, which detcheck does not read",
                             p->label, name, t->dtype_name ? t->dtype_name : "?");
    uint32_t file = 0;
    uint64_t off = 0, bytes = 0;
    dck_status s = storage_loc(p, t->storage, &file, &off, &bytes);
    if (s) return s;
    dck_piece pc;
    s = dck_rd_piece(p->label, name, (dck_dtype)t->dtype, t->ndim, t->size, t->stride, t->offset, off,
                     bytes, file, p->byteswap, &pc);
    if (s) return s;
    const uint64_t *gshape = t->size;
    int gnd = t->ndim;
    if (p->o && p->o->gshape && !strcmp(name, p->o->root_name ? p->o->root_name : "")) {
        if (p->o->gndim != t->ndim) {
            free(pc.strides);
            return dck_set_error(DCK_ERR_FORMAT, "%s: chunk of %s has %d dimensions, metadata says %d",
                                 p->label, name, t->ndim, p->o->gndim);
        }
        gshape = p->o->gshape;
        for (int i = 0; i < gnd; i++) pc.offset[i] = p->o->goffset[i];
        if (pc.strides && (s = densify(p, name, (dck_dtype)t->dtype, t->ndim, t->size, &pc))) {
            free(pc.strides);
            return s;
        }
    }
    s = dck_ck_add_piece(p->ck, name, (dck_dtype)t->dtype, gshape, gnd, &pc);
    if (s) free(pc.strides);
    else p->count++;
    return s;
}

static dck_status cb_tensor(void *ctx, const char *name, const pk_node *n) {
    pt_src *p = ctx;
    return emit_tensor(p, leaf_name(p, name, "tensor"), n->u.tensor);
}

static dck_status cb_ndarray(void *ctx, const char *name, const pk_node *n) {
    pt_src *p = ctx;
    name = leaf_name(p, name, "array");
    const pk_ndarray *a = n->u.ndarray;
    if (!a->dtype || !a->data) return DCK_OK; /* never built: not an array */
    int dt = a->dtype->u.npdtype.dtype;
    if (dt < 0 || a->data->kind != PK_BYTES) {
        if (!strcmp(a->dtype->u.npdtype.code, "O")) return DCK_OK; /* object arrays hold no numbers */
        return dck_set_error(DCK_ERR_UNSUPPORTED, "%s: NumPy array %s has dtype %s, which detcheck does not read",
                             p->label, name, a->dtype->u.npdtype.code);
    }
    size_t es = dck_dtype_size((dck_dtype)dt);
    uint64_t numel = 1;
    for (int i = 0; i < a->ndim; i++) numel = a->shape[i] && numel <= UINT64_MAX / a->shape[i] ? numel * a->shape[i] : 0;
    if (numel > UINT64_MAX / es || numel * es != a->data->u.s.len) {
        bool zero = false;
        for (int i = 0; i < a->ndim; i++) zero |= a->shape[i] == 0;
        if (!(zero && a->data->u.s.len == 0))
            return dck_set_error(DCK_ERR_FORMAT, "%s: NumPy array %s: %zu data bytes for its shape", p->label,
                                 name, a->data->u.s.len);
    }
    uint32_t file = 0;
    uint64_t off = 0;
    dck_status s;
    if (a->data->u.s.src >= 0 && p->pkl_in_file) {
        file = p->file;
        off = (uint64_t)a->data->u.s.src;
    } else if ((s = dck_memfile_append(p->mem, a->data->u.s.p, a->data->u.s.len, &file, &off)))
        return s;
    int64_t st[DCK_MAX_DIMS];
    int64_t acc = 1;
    for (int i = 0; i < a->ndim; i++) { /* Fortran order: first index fastest */
        st[i] = acc;
        acc *= (int64_t)(a->shape[i] ? a->shape[i] : 1);
    }
    bool bs = a->dtype->u.npdtype.order == '>';
    dck_piece pc;
    s = dck_rd_piece(p->label, name, (dck_dtype)dt, a->ndim, a->shape, a->fortran ? st : NULL, 0, off,
                     a->data->u.s.len, file, bs, &pc);
    if (s) return s;
    s = dck_ck_add_piece(p->ck, name, (dck_dtype)dt, a->shape, a->ndim, &pc);
    if (s) free(pc.strides);
    else p->count++;
    return s;
}

static dck_status cb_value(void *ctx, const char *name, const char *text) {
    pt_src *p = ctx;
    if (p->o && !p->o->values) return DCK_OK;
    return dck_ck_add_value(p->ck, leaf_name(p, name, "value"), text);
}

static dck_status cb_other(void *ctx, const char *name, const pk_node *n) {
    pt_src *p = ctx;
    if (n->kind == PK_PERSID && n->u.persid.pid->kind == PK_STR) { /* tar format: a tensor by key */
        for (size_t i = 0; i < p->ntt; i++)
            if (!strcmp(p->tt[i].key, n->u.persid.pid->u.s.p))
                return emit_tensor(p, leaf_name(p, name, "tensor"), &p->tt[i].t);
    }
    return DCK_OK;
}

static dck_status walk_root(pt_src *p, const pk_ctx *c, const pk_node *root) {
    pk_walker w = {p, cb_tensor, cb_ndarray, cb_value, cb_other, dck_pk_walk_budget(c)};
    size_t n;
    pk_node **it;
    if (p->o && p->o->unwrap_single && root && (root->kind == PK_LIST || root->kind == PK_TUPLE) &&
        (it = dck_pk_items(root, &n)) && n == 1)
        root = it[0];
    size_t before = p->ck->ntensors;
    DCK_TRY(dck_pk_walk(root, p->o && p->o->prefix ? p->o->prefix : "", &w, p->label));
    /* the walk follows the pickle: a state_dict's order, the model's */
    dck_ck_mark_ordered(p->ck, before);
    return DCK_OK;
}

/* ------------------------------------------------------------------ zip */

static dck_status npz_load(dck_checkpoint *ck, uint32_t file, const uint8_t *data, uint64_t len,
                           const dck_zip *z, const char *label, const dck_pt_opts *o, dck_memfile *mem);

dck_status dck_pt_load_zip(dck_checkpoint *ck, uint32_t file, const uint8_t *data, uint64_t len,
                           uint64_t base, const char *label, const dck_pt_opts *o,
                           dck_memfile *mem) {
    dck_zip z;
    dck_status s = dck_zip_open(data, len, label, &z);
    if (s) return s;
    const dck_zip_entry *pkl = NULL;
    for (size_t i = 0; i < z.n && !pkl; i++) {
        const char *nm = z.entries[i].name;
        size_t l = strlen(nm);
        if (!strcmp(nm, "data.pkl") || (l > 9 && !strcmp(nm + l - 9, "/data.pkl"))) pkl = &z.entries[i];
    }
    if (!pkl) {
        s = npz_load(ck, file, data, len, &z, label, o, mem);
        dck_zip_free(&z);
        return s;
    }
    char *prefix = dck_strndup(pkl->name, strlen(pkl->name) - 8);
    pt_src p = {0};
    p.ck = ck;
    p.file = file;
    p.label = label;
    p.data = data;
    p.len = len;
    p.base = base;
    p.zip = &z;
    p.zprefix = prefix;
    p.o = o;
    p.mem = mem;
    pk_ctx *pc = NULL;
    uint8_t *pbuf = NULL;
    char *bo = NULL;
    if (!prefix) {
        s = dck_oom(NULL);
        goto done;
    }
    {
        size_t n = strlen(prefix) + 16;
        bo = malloc(n);
        if (!bo) {
            s = dck_oom(NULL);
            goto done;
        }
        snprintf(bo, n, "%sbyteorder", prefix);
        const dck_zip_entry *be = dck_zip_find(&z, bo);
        if (be && be->method == 0) {
            const char *t = (const char *)data + be->data_offset;
            if (be->usize == 3 && !memcmp(t, "big", 3)) p.byteswap = true;
            else if (!(be->usize == 6 && !memcmp(t, "little", 6))) {
                s = dck_set_error(DCK_ERR_FORMAT, "%s: byteorder record is neither little nor big", label);
                goto done;
            }
        }
    }
    const uint8_t *pk = data + pkl->data_offset;
    if (pkl->method == 0) {
        p.pkl_in_file = true;
    } else {
        if (pkl->usize > DCK_MAX_HEADER_BYTES * 10ull) {
            s = dck_set_error(DCK_ERR_LIMIT, "%s: data.pkl of %llu bytes (limit)", label,
                              (unsigned long long)pkl->usize);
            goto done;
        }
        pbuf = malloc(pkl->usize ? (size_t)pkl->usize : 1);
        if (!pbuf) {
            s = dck_oom(NULL);
            goto done;
        }
        if ((s = dck_zip_extract(pkl, data, pbuf, label))) goto done;
        pk = pbuf;
    }
    {
        size_t ln = strlen(label) + 16;
        char *pl = malloc(ln);
        if (!pl) {
            s = dck_oom(NULL);
            goto done;
        }
        snprintf(pl, ln, "%s: data.pkl", label);
        s = dck_pk_ctx_create(pl, NULL, &dck_pk_torch_handlers, &pc);
        free(pl);
        if (s) goto done;
    }
    pk_node *root;
    size_t used;
    if ((s = dck_pk_load(pc, pk, (size_t)pkl->usize, (int64_t)(base + pkl->data_offset), &root, &used))) goto done;
    if ((s = dck_pk_check_storages_used(pc, label))) goto done;
    s = walk_root(&p, pc, root);
done:
    dck_pk_ctx_free(pc);
    free(pbuf);
    free(bo);
    free(prefix);
    free(p.locs);
    free(p.slots);
    dck_zip_free(&z);
    return s;
}

/* ------------------------------------------------------------------ npz */

static dck_status npz_load(dck_checkpoint *ck, uint32_t file, const uint8_t *data, uint64_t len,
                           const dck_zip *z, const char *label, const dck_pt_opts *o, dck_memfile *mem) {
    (void)len;
    size_t arrays = 0;
    for (size_t i = 0; i < z->n; i++) {
        const dck_zip_entry *e = &z->entries[i];
        size_t l = strlen(e->name);
        if (l < 4 || strcmp(e->name + l - 4, ".npy")) continue;
        if (!strcmp(e->name + l - 1, "/")) continue;
        char *name;
        const char *pre = o && o->prefix && *o->prefix ? o->prefix : NULL;
        size_t nl = (pre ? strlen(pre) + 1 : 0) + l - 4 + 1;
        name = malloc(nl);
        if (!name) return dck_oom(NULL);
        snprintf(name, nl, "%s%s%.*s", pre ? pre : "", pre ? "." : "", (int)(l - 4), e->name);
        const uint8_t *buf = data + e->data_offset;
        uint8_t *own = NULL;
        uint32_t f = file;
        uint64_t base = e->data_offset;
        dck_status s = DCK_OK;
        if (e->method != 0) { /* inflated to the decoded file; the header read back */
            size_t hn = e->usize < ((uint64_t)1 << 20) + 16 ? (size_t)e->usize : ((size_t)1 << 20) + 16;
            if (!(s = dck_memfile_add_entry(mem, e, data, label, &f, &base))) {
                if (!(own = malloc(hn ? hn : 1))) s = dck_oom(NULL);
                else if (!(s = dck_memfile_read(mem, base, own, hn))) buf = own;
            }
        }
        dck_dtype dt;
        bool bs, fo;
        int nd;
        uint64_t shape[DCK_MAX_DIMS], doff;
        if (!s) {
            size_t ll = strlen(label) + l + 4;
            char *lab = malloc(ll);
            if (!lab) s = dck_oom(NULL);
            else {
                snprintf(lab, ll, "%s: %s", label, e->name);
                s = dck_npy_parse_header(buf, e->usize, lab, &dt, &bs, &fo, &nd, shape, &doff);
                free(lab);
            }
        }
        if (!s) {
            int64_t st[DCK_MAX_DIMS];
            int64_t acc = 1;
            for (int k = 0; k < nd; k++) {
                st[k] = acc;
                acc *= (int64_t)(shape[k] ? shape[k] : 1);
            }
            dck_piece pc;
            s = dck_rd_piece(label, name, dt, nd, shape, fo ? st : NULL, 0, base + doff, e->usize - doff, f,
                             bs, &pc);
            if (!s) {
                s = dck_ck_add_piece(ck, name, dt, shape, nd, &pc);
                if (s) free(pc.strides);
            }
        }
        free(own);
        free(name);
        if (s) return s;
        arrays++;
    }
    if (!arrays)
        return dck_set_error(DCK_ERR_FORMAT, "%s: zip archive with neither data.pkl (torch.save) nor .npy members",
                             label);
    return DCK_OK;
}

/* ------------------------------------------------------------------ legacy */

static const uint8_t legacy_magic[10] = {0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};

bool dck_is_zip(const uint8_t *head, size_t n) {
    return n >= 4 && head[0] == 'P' && head[1] == 'K' && head[2] == 3 && head[3] == 4;
}

bool dck_is_legacy_torch(const uint8_t *head, size_t n) {
    return n >= 14 && head[0] == 0x80 && head[2] == 0x8a && head[3] == 10 && !memcmp(head + 4, legacy_magic, 10);
}

static const char *const tar_names[] = {"sys_info", "pickle", "storages", "tensors"};

bool dck_is_tar(const uint8_t *head, size_t n) {
    if (n < 64) return false;
    for (size_t i = 0; i < 4; i++) {
        size_t l = strlen(tar_names[i]);
        if (!memcmp(head, tar_names[i], l) && head[l] == 0) {
            for (size_t k = l; k < 64; k++)
                if (head[k]) return false;
            return true;
        }
    }
    return false;
}

static dck_status load_one(pk_ctx *c, const uint8_t *data, uint64_t len, uint64_t *pos, uint64_t base,
                           pk_node **root) {
    size_t used;
    dck_status s = dck_pk_load(c, data + *pos, (size_t)(len - *pos), (int64_t)(base + *pos), root, &used);
    if (s) return s;
    *pos += used;
    return DCK_OK;
}

static size_t storage_es(const pk_node *st) {
    int d = st->u.storage.dtype;
    return d >= 0 ? dck_dtype_size((dck_dtype)d) : 1;
}

static int cmp_storage_key(const void *a, const void *b) {
    return strcmp((*(pk_node *const *)a)->u.storage.key, (*(pk_node *const *)b)->u.storage.key);
}

static dck_status legacy_load(pt_src *p) {
    pk_node **sorted = NULL;
    pk_ctx *c;
    dck_status s = dck_pk_ctx_create(p->label, NULL, &dck_pk_torch_handlers, &c);
    if (s) return s;
    uint64_t pos = 0;
    pk_node *magic, *proto, *info, *root, *keys;
    if ((s = load_one(c, p->data, p->len, &pos, 0, &magic))) goto done;
    if (magic->kind != PK_BIGINT || magic->u.s.len != 10 || memcmp(magic->u.s.p, legacy_magic, 10)) {
        s = dck_set_error(DCK_ERR_FORMAT, "%s: not a torch.save file (bad magic number)", p->label);
        goto done;
    }
    if ((s = load_one(c, p->data, p->len, &pos, 0, &proto))) goto done;
    int64_t pv;
    if (!dck_pk_int(proto, &pv) || pv != 1001) {
        s = dck_set_error(DCK_ERR_UNSUPPORTED, "%s: legacy torch.save protocol version is not 1001", p->label);
        goto done;
    }
    if ((s = load_one(c, p->data, p->len, &pos, 0, &info))) goto done;
    pk_node *le = dck_pk_get(info, "little_endian");
    if (le && le->kind == PK_BOOL && !le->u.b) p->byteswap = true;
    if ((s = load_one(c, p->data, p->len, &pos, 0, &root))) goto done;
    if ((s = load_one(c, p->data, p->len, &pos, 0, &keys))) goto done;
    size_t nk, nst;
    pk_node **k = dck_pk_items(keys, &nk);
    pk_node *const *sts = dck_pk_storages(c, &nst);
    if (!k && keys->kind != PK_LIST) {
        s = dck_set_error(DCK_ERR_FORMAT, "%s: legacy storage key list missing", p->label);
        goto done;
    }
    sorted = malloc((nst ? nst : 1) * sizeof *sorted);
    if (!sorted) {
        s = dck_oom(NULL);
        goto done;
    }
    memcpy(sorted, sts, nst * sizeof *sorted);
    qsort(sorted, nst, sizeof *sorted, cmp_storage_key);
    for (size_t i = 0; i < nk; i++) {
        if (k[i]->kind != PK_STR) {
            s = dck_set_error(DCK_ERR_FORMAT, "%s: legacy storage key is not a string", p->label);
            goto done;
        }
        const pk_node *st = NULL;
        const char *want = k[i]->u.s.p;
        size_t lo = 0, hi = nst;
        while (lo < hi) { /* sorted below */
            size_t mid = (lo + hi) / 2;
            int c = strcmp(sorted[mid]->u.storage.key, want);
            if (!c) {
                st = sorted[mid];
                break;
            }
            if (c < 0) lo = mid + 1;
            else hi = mid;
        }
        if (p->len - pos < 8) {
            s = dck_set_error(DCK_ERR_TRUNCATED, "%s: truncated: storage %s missing", p->label, k[i]->u.s.p);
            goto done;
        }
        uint64_t cnt = 0;
        for (int b = 0; b < 8; b++)
            cnt |= (uint64_t)p->data[pos + (p->byteswap ? 7 - b : b)] << (8 * b);
        pos += 8;
        size_t es = st ? storage_es(st) : 1;
        if (!st && i + 1 < nk) {
            s = dck_set_error(DCK_ERR_FORMAT, "%s: storage %s is not used by any tensor", p->label, k[i]->u.s.p);
            goto done;
        }
        if (cnt > (p->len - pos) / es) {
            s = dck_set_error(DCK_ERR_TRUNCATED, "%s: truncated: storage %s needs %llu bytes", p->label,
                              k[i]->u.s.p, (unsigned long long)(cnt * es));
            goto done;
        }
        if ((s = add_loc(p, k[i]->u.s.p, p->file, p->base + pos, cnt * es))) goto done;
        pos += cnt * es;
    }
    if ((s = dck_pk_check_storages_used(c, p->label))) goto done;
    s = walk_root(p, c, root);
done:
    free(sorted);
    dck_pk_ctx_free(c);
    return s;
}

/* ------------------------------------------------------------------ tar */

typedef struct {
    uint64_t off, size;
    bool found;
} tar_member;

static dck_status tar_members(pt_src *p, tar_member m[4]) {
    memset(m, 0, 4 * sizeof *m);
    uint64_t pos = 0;
    while (p->len - pos >= 512) {
        const uint8_t *h = p->data + pos;
        bool zero = true;
        for (int i = 0; i < 512 && zero; i++) zero = h[i] == 0;
        if (zero) break;
        uint64_t size = 0;
        for (int i = 124; i < 136 && h[i] >= '0' && h[i] <= '7'; i++) size = size * 8 + (uint64_t)(h[i] - '0');
        pos += 512;
        if (size > p->len - pos) return dck_set_error(DCK_ERR_TRUNCATED, "%s: truncated tar member", p->label);
        for (int i = 0; i < 4; i++) {
            size_t l = strlen(tar_names[i]);
            if (!memcmp(h, tar_names[i], l) && h[l] == 0) m[i] = (tar_member){pos, size, true};
        }
        pos += (size + 511) / 512 * 512;
        if (pos > p->len) pos = p->len;
    }
    return DCK_OK;
}

static dck_status tar_load(pt_src *p) {
    tar_member m[4];
    dck_status s = tar_members(p, m);
    if (s) return s;
    if (!m[1].found || !m[2].found)
        return dck_set_error(DCK_ERR_FORMAT, "%s: tar torch file without pickle or storages", p->label);
    pk_ctx *c;
    if ((s = dck_pk_ctx_create(p->label, NULL, &dck_pk_torch_handlers, &c))) return s;
    pk_node *n, *root;
    const uint8_t *sd = p->data + m[2].off;
    uint64_t pos = 0, slen = m[2].size;
    int64_t cnt;
    if ((s = load_one(c, sd, slen, &pos, m[2].off, &n))) goto done;
    if (!dck_pk_int(n, &cnt) || cnt < 0 || (uint64_t)cnt > slen) {
        s = dck_set_error(DCK_ERR_FORMAT, "%s: bad storage count", p->label);
        goto done;
    }
    for (int64_t i = 0; i < cnt; i++) {
        if ((s = load_one(c, sd, slen, &pos, m[2].off, &n))) goto done;
        size_t k;
        pk_node **a = dck_pk_items(n, &k);
        if (k != 3 || a[0]->kind != PK_STR || a[2]->kind != PK_GLOBAL) {
            s = dck_set_error(DCK_ERR_FORMAT, "%s: bad storage record", p->label);
            goto done;
        }
        int d = dck_pk_storage_dtype(a[2]->u.global.name);
        size_t es = d >= 0 ? dck_dtype_size((dck_dtype)d) : 1;
        if (slen - pos < 8) {
            s = dck_set_error(DCK_ERR_TRUNCATED, "%s: truncated storage", p->label);
            goto done;
        }
        uint64_t num = 0;
        for (int b = 0; b < 8; b++) num |= (uint64_t)sd[pos + (uint64_t)b] << (8 * b);
        pos += 8;
        if (num > (slen - pos) / es) {
            s = dck_set_error(DCK_ERR_TRUNCATED, "%s: truncated storage %s", p->label, a[0]->u.s.p);
            goto done;
        }
        if ((s = add_loc(p, a[0]->u.s.p, p->file, p->base + m[2].off + pos, num * es))) goto done;
        p->locs[p->nlocs - 1].es = es;
        pos += num * es;
    }
    if (pos < slen) { /* storage views: (target, root, offset, numel) */
        if ((s = load_one(c, sd, slen, &pos, m[2].off, &n))) goto done;
        size_t k;
        pk_node **v = dck_pk_items(n, &k);
        for (size_t i = 0; i < k; i++) {
            size_t q;
            pk_node **a = dck_pk_items(v[i], &q);
            int64_t off, num;
            st_loc *r;
            if (q != 4 || a[0]->kind != PK_STR || a[1]->kind != PK_STR || !dck_pk_int(a[2], &off) ||
                !dck_pk_int(a[3], &num) || off < 0 || num < 0 || !(r = find_loc(p, a[1]->u.s.p)) ||
                (uint64_t)off > r->bytes / r->es || (uint64_t)num > r->bytes / r->es - (uint64_t)off) {
                s = dck_set_error(DCK_ERR_FORMAT, "%s: bad storage view", p->label);
                goto done;
            }
            size_t es = r->es;
            if ((s = add_loc(p, a[0]->u.s.p, r->file, r->off + (uint64_t)off * es, (uint64_t)num * es)))
                goto done;
            p->locs[p->nlocs - 1].es = es;
        }
    }
    if (m[3].found) {
        const uint8_t *td = p->data + m[3].off;
        uint64_t tl = m[3].size;
        pos = 0;
        if ((s = load_one(c, td, tl, &pos, m[3].off, &n))) goto done;
        if (!dck_pk_int(n, &cnt) || cnt < 0 || (uint64_t)cnt > tl) {
            s = dck_set_error(DCK_ERR_FORMAT, "%s: bad tensor count", p->label);
            goto done;
        }
        p->tt = calloc((size_t)cnt + 1, sizeof *p->tt);
        if (!p->tt) {
            s = dck_oom(NULL);
            goto done;
        }
        for (int64_t i = 0; i < cnt; i++) {
            if ((s = load_one(c, td, tl, &pos, m[3].off, &n))) goto done;
            size_t k;
            pk_node **a = dck_pk_items(n, &k);
            if (k < 3 || a[0]->kind != PK_STR || a[1]->kind != PK_STR || a[2]->kind != PK_GLOBAL) {
                s = dck_set_error(DCK_ERR_FORMAT, "%s: bad tensor record", p->label);
                goto done;
            }
            if (tl - pos < 8) goto trunc;
            int32_t nd = (int32_t)(td[pos] | td[pos + 1] << 8 | td[pos + 2] << 16 | (uint32_t)td[pos + 3] << 24);
            pos += 8;
            if (nd < 0 || nd > DCK_MAX_DIMS) {
                s = dck_set_error(DCK_ERR_FORMAT, "%s: bad tensor rank", p->label);
                goto done;
            }
            if (tl - pos < 16 * (uint64_t)nd + 8) goto trunc;
            tar_tensor *t = &p->tt[p->ntt++];
            t->key = a[0]->u.s.p;
            t->t.ndim = nd;
            for (int d = 0; d < nd; d++) {
                uint64_t v = 0, w = 0;
                for (int b = 0; b < 8; b++) {
                    v |= (uint64_t)td[pos + 8 * (uint64_t)d + (uint64_t)b] << (8 * b);
                    w |= (uint64_t)td[pos + 8 * ((uint64_t)nd + (uint64_t)d) + (uint64_t)b] << (8 * b);
                }
                if ((int64_t)v < 0 || (int64_t)w < 0) {
                    s = dck_set_error(DCK_ERR_FORMAT, "%s: bad tensor size", p->label);
                    goto done;
                }
                t->t.size[d] = v;
                t->t.stride[d] = (int64_t)w;
            }
            pos += 16 * (uint64_t)nd;
            uint64_t so = 0;
            for (int b = 0; b < 8; b++) so |= (uint64_t)td[pos + (uint64_t)b] << (8 * b);
            pos += 8;
            t->t.offset = so;
            int d = dck_pk_storage_dtype(a[2]->u.global.name[0] ? a[2]->u.global.name : "");
            if (d < 0) { /* FloatTensor -> FloatStorage */
                char sn[64];
                const char *tn = a[2]->u.global.name;
                size_t l = strlen(tn);
                if (l > 6 && l < 50 && !strcmp(tn + l - 6, "Tensor")) {
                    snprintf(sn, sizeof sn, "%.*sStorage", (int)(l - 6), tn);
                    d = dck_pk_storage_dtype(sn);
                }
            }
            t->t.dtype = d;
            t->t.dtype_name = a[2]->u.global.name;
            t->storage.kind = PK_STORAGE;
            t->storage.u.storage.key = a[1]->u.s.p;
            t->storage.u.storage.dtype = d;
            t->t.storage = &t->storage;
        }
    }
    if ((s = load_one(c, p->data + m[1].off, m[1].size, &(uint64_t){0}, m[1].off, &root))) goto done;
    s = walk_root(p, c, root);
    goto done;
trunc:
    s = dck_set_error(DCK_ERR_TRUNCATED, "%s: truncated tensor record", p->label);
done:
    dck_pk_ctx_free(c);
    free(p->tt);
    p->tt = NULL;
    return s;
}

/* ------------------------------------------------------------------ entry points */

dck_status dck_pt_load_file(dck_checkpoint *ck, uint32_t file, const dck_pt_opts *o) {
    dck_file *f = ck->files[file];
    const uint8_t *data;
    uint64_t len;
    dck_status s = dck_file_map(f, &data, &len);
    if (s) return s;
    dck_memfile mem = {ck, f->path, 0, false, 0};
    if (dck_is_zip(data, len)) return dck_pt_load_zip(ck, file, data, len, 0, f->path, o, &mem);
    pt_src p = {0};
    p.ck = ck;
    p.file = file;
    p.label = f->path;
    p.data = data;
    p.len = len;
    p.o = o;
    p.mem = &mem;
    p.pkl_in_file = true;
    if (dck_is_legacy_torch(data, len)) s = legacy_load(&p);
    else if (dck_is_tar(data, len)) s = tar_load(&p);
    else s = dck_set_error(DCK_ERR_FORMAT, "%s: not a torch.save file", f->path);
    free(p.locs);
    free(p.slots);
    return s;
}

dck_status dck_pt_open_path(dck_checkpoint *ck, const char *path, const char *relpath,
                            const dck_pt_opts *o) {
    dck_file *f;
    dck_status s = dck_file_open(path, relpath, &f);
    if (s) return s;
    uint32_t idx;
    if ((s = dck_ck_add_file(ck, f, &idx))) return s;
    return dck_pt_load_file(ck, idx, o);
}

static int pt_probe(const char *path, bool is_dir, const uint8_t *head, size_t n) {
    (void)path;
    if (is_dir) return 0;
    return dck_is_zip(head, n) || dck_is_legacy_torch(head, n) || dck_is_tar(head, n);
}

static dck_status pt_open(dck_checkpoint *ck, const char *path, const char *relpath) {
    dck_pt_opts o = {"", NULL, NULL, NULL, 0, true, false};
    return dck_pt_open_path(ck, path, relpath, &o);
}

const dck_reader dck_reader_pt = {"pytorch", pt_probe, pt_open, NULL, 1};

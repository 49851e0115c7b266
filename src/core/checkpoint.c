/* The checkpoint model: a tensor is one or more hyperrectangular slices
 * (pieces) stored in files; validation, the name index, logical reads and
 * the manifest of a hashed checkpoint. Opening paths is formats/open.c;
 * hashing is hash/hash_cpu.c. */
#include "core/core.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

void dck_options_init(dck_options *o) {
    memset(o, 0, sizeof *o);
    o->threads = 0;
    o->iteration = -1;
    o->hash_files = 1;
}

/* ------------------------------------------------------------------ name index */

typedef struct {
    size_t *slots; /* tensor index + 1, 0 = empty */
    size_t cap;
} name_index;

static size_t name_hash(const char *s) { return (size_t)XXH3_64bits(s, strlen(s)); }

/* Private state kept beside the public struct (allocated together). */
typedef struct ck_private {
    name_index idx;
} ck_private;

/* dck_checkpoint is declared in core.h; private data is allocated
 * together with it. */
typedef struct {
    dck_checkpoint ck;
    ck_private priv;
} ck_box;

static ck_private *priv_of(dck_checkpoint *ck) { return &((ck_box *)ck)->priv; }

static dck_status index_rebuild(dck_checkpoint *ck, size_t cap) {
    name_index *ix = &priv_of(ck)->idx;
    size_t *slots = calloc(cap, sizeof *slots);
    if (!slots) return dck_oom(NULL);
    for (size_t i = 0; i < ck->ntensors; i++) {
        size_t h = name_hash(ck->tensors[i].info.name) & (cap - 1);
        while (slots[h]) h = (h + 1) & (cap - 1);
        slots[h] = i + 1;
    }
    free(ix->slots);
    ix->slots = slots;
    ix->cap = cap;
    return DCK_OK;
}

static long index_find(dck_checkpoint *ck, const char *name) {
    name_index *ix = &priv_of(ck)->idx;
    if (!ix->cap) return -1;
    size_t h = name_hash(name) & (ix->cap - 1);
    while (ix->slots[h]) {
        size_t i = ix->slots[h] - 1;
        if (!strcmp(ck->tensors[i].info.name, name)) return (long)i;
        h = (h + 1) & (ix->cap - 1);
    }
    return -1;
}

/* ------------------------------------------------------------------ builders */

dck_status dck_ck_add_file(dck_checkpoint *ck, dck_file *f, uint32_t *index) {
    dck_status s = dck_grow((void **)&ck->files, &ck->cap_files, ck->nfiles + 1, sizeof *ck->files);
    if (s) {
        dck_file_close(f);
        return s;
    }
    ck->files[ck->nfiles] = f;
    *index = (uint32_t)ck->nfiles++;
    return DCK_OK;
}

static void fmt_shape(char *buf, size_t n, const uint64_t *shape, int nd) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < nd && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%llu", i ? ", " : "", (unsigned long long)shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

dck_status dck_ck_add_piece(dck_checkpoint *ck, const char *name, dck_dtype dtype,
                            const uint64_t *global_shape, int ndim, const dck_piece *piece) {
    if (ndim < 0 || ndim > DCK_MAX_DIMS)
        return dck_set_error(DCK_ERR_LIMIT, "%s: tensor %s has %d dimensions (limit %d)",
                             ck->files[piece->file]->path, name, ndim, DCK_MAX_DIMS);
    if (strlen(name) > DCK_MAX_NAME)
        return dck_set_error(DCK_ERR_LIMIT, "%s: tensor name longer than %d bytes",
                             ck->files[piece->file]->path, DCK_MAX_NAME);
    long i = index_find(ck, name);
    dck_tensor_entry *t;
    if (i < 0) {
        if (ck->ntensors >= DCK_MAX_TENSORS)
            return dck_set_error(DCK_ERR_LIMIT, "%s: more than %u tensors",
                                 ck->files[piece->file]->path, DCK_MAX_TENSORS);
        dck_status s = dck_grow((void **)&ck->tensors, &ck->cap_tensors, ck->ntensors + 1,
                                sizeof *ck->tensors);
        if (s) return s;
        t = &ck->tensors[ck->ntensors];
        memset(t, 0, sizeof *t);
        t->info.name = dck_strdup(name);
        t->info.source = dck_strdup(ck->files[piece->file]->path);
        if (!t->info.name || !t->info.source) {
            free((char *)t->info.name);
            free((char *)t->info.source);
            return dck_oom(NULL);
        }
        t->info.dtype = dtype;
        t->info.ndim = ndim;
        if (ndim) memcpy(t->info.shape, global_shape, sizeof(uint64_t) * (size_t)ndim);
        ck->ntensors++;
        name_index *ix = &priv_of(ck)->idx;
        if (ck->ntensors * 2 > ix->cap) {
            s = index_rebuild(ck, ix->cap ? ix->cap * 2 : 64);
            if (s) return s;
        } else {
            size_t h = name_hash(name) & (ix->cap - 1);
            while (ix->slots[h]) h = (h + 1) & (ix->cap - 1);
            ix->slots[h] = ck->ntensors;
        }
    } else {
        t = &ck->tensors[i];
        if (t->info.dtype != dtype || t->info.ndim != ndim ||
            (ndim && memcmp(t->info.shape, global_shape, sizeof(uint64_t) * (size_t)ndim))) {
            char a[256], b[256];
            fmt_shape(a, sizeof a, t->info.shape, t->info.ndim);
            fmt_shape(b, sizeof b, global_shape, ndim);
            return dck_set_error(DCK_ERR_LAYOUT,
                                 "tensor %s is %s %s in %s but %s %s in %s", name,
                                 dck_dtype_name(t->info.dtype), a, t->info.source,
                                 dck_dtype_name(dtype), b, ck->files[piece->file]->path);
        }
    }
    /* Most tensors have one piece: start with exactly one (a piece is ~300
     * bytes, and a header may list a million tensors). */
    dck_status s = t->cap_pieces == 0 && (t->pieces = malloc(sizeof *t->pieces)) != NULL
                       ? (t->cap_pieces = 1, DCK_OK)
                       : dck_grow((void **)&t->pieces, &t->cap_pieces, t->npieces + 1, sizeof *t->pieces);
    if (s) return s;
    t->pieces[t->npieces++] = *piece;
    return DCK_OK;
}

dck_status dck_ck_add_value(dck_checkpoint *ck, const char *name, const char *value) {
    return dck_value_push(&ck->values, &ck->nvalues, &ck->cap_values, name, value);
}

/* ------------------------------------------------------------------ validation */

static uint64_t piece_elems(const dck_piece *p, int nd) {
    uint64_t n = 1;
    for (int i = 0; i < nd; i++) n *= p->shape[i];
    return n;
}

static int boxes_overlap(const dck_piece *a, const dck_piece *b, int nd) {
    for (int i = 0; i < nd; i++) {
        if (a->offset[i] + a->shape[i] <= b->offset[i]) return 0;
        if (b->offset[i] + b->shape[i] <= a->offset[i]) return 0;
    }
    return 1;
}

static dck_status extent_overflow(const dck_tensor_entry *t) {
    return dck_set_error(DCK_ERR_LIMIT, "tensor %s: storage extent overflows 64 bits",
                         t->info.name);
}

/* Highest byte (exclusive) a piece touches in its file. The message names
 * the tensor, not the file (a piece knows only its file's index); callers
 * with the checkpoint at hand replace it with one that names the file. */
dck_status dck_piece_extent(const dck_tensor_entry *t, const dck_piece *p, uint64_t *end) {
    uint64_t es = dck_dtype_size(t->info.dtype), n = piece_elems(p, t->info.ndim);
    if (n == 0) {
        *end = p->file_offset;
        return DCK_OK;
    }
    uint64_t last = 0;
    if (p->strides) {
        for (int i = 0; i < t->info.ndim; i++) {
            if (p->strides[i] < 0)
                return dck_set_error(DCK_ERR_UNSUPPORTED,
                                     "tensor %s: negative stride %lld along dim %d", t->info.name,
                                     (long long)p->strides[i], i);
            uint64_t st = (uint64_t)p->strides[i];
            if (st && (p->shape[i] - 1) > UINT64_MAX / st) return extent_overflow(t);
            uint64_t d = (p->shape[i] - 1) * st;
            if (last > UINT64_MAX - d) return extent_overflow(t);
            last += d;
        }
        last += 1;
    } else {
        last = n;
    }
    if (last > UINT64_MAX / es || p->file_offset > UINT64_MAX - last * es)
        return extent_overflow(t);
    *end = p->file_offset + last * es;
    return DCK_OK;
}

static int cmp_tensor(const void *a, const void *b) {
    return dck_name_compare(((const dck_tensor_entry *)a)->info.name,
                            ((const dck_tensor_entry *)b)->info.name);
}

dck_status dck_ck_validate(dck_checkpoint *ck) {
    for (size_t ti = 0; ti < ck->ntensors; ti++) {
        dck_tensor_entry *t = &ck->tensors[ti];
        int nd = t->info.ndim;
        uint64_t nbytes;
        if (dck_shape_bytes(t->info.dtype, t->info.shape, nd, &nbytes) != DCK_OK)
            return dck_set_error(DCK_ERR_LIMIT, "%s: tensor %s: shape product overflows",
                                 t->info.source, t->info.name);
        t->info.nbytes = nbytes;
        t->info.group = dck_group_of_name(t->info.name);
        uint64_t total = 1, covered = 0;
        for (int i = 0; i < nd; i++) total *= t->info.shape[i];
        if (nbytes == 0) total = 0;
        for (size_t pi = 0; pi < t->npieces; pi++) {
            dck_piece *p = &t->pieces[pi];
            const char *fp = ck->files[p->file]->path;
            for (int i = 0; i < nd; i++)
                if (p->offset[i] > t->info.shape[i] || p->shape[i] > t->info.shape[i] - p->offset[i])
                    return dck_set_error(DCK_ERR_LAYOUT,
                                         "%s: tensor %s: slice along dim %d [%llu, +%llu) outside "
                                         "global size %llu",
                                         fp, t->info.name, i, (unsigned long long)p->offset[i],
                                         (unsigned long long)p->shape[i],
                                         (unsigned long long)t->info.shape[i]);
            if (p->strides && t->npieces != 1)
                return dck_set_error(DCK_ERR_UNSUPPORTED,
                                     "%s: tensor %s: strided storage of a sharded tensor", fp,
                                     t->info.name);
            uint64_t end;
            dck_status s = dck_piece_extent(t, p, &end);
            if (s) return dck_set_error(s, "%s: tensor %s: storage extent overflows or negative stride",
                                        fp, t->info.name);
            if (p->strides) {
                uint64_t stored = end - p->file_offset;
                uint64_t cap = stored > (UINT64_MAX - (1ull << 30)) / DCK_MAX_VIEW_EXPANSION
                                   ? UINT64_MAX
                                   : stored * DCK_MAX_VIEW_EXPANSION + (1ull << 30);
                if (nbytes > cap)
                    return dck_set_error(DCK_ERR_LIMIT,
                                         "%s: tensor %s: a view of %llu bytes over %llu stored bytes "
                                         "(over the %ux expansion limit)",
                                         fp, t->info.name, (unsigned long long)nbytes,
                                         (unsigned long long)stored, DCK_MAX_VIEW_EXPANSION);
            }
            uint64_t ds = ck->files[p->file]->data_size;
            if (ds != UINT64_MAX && end > ds)
                return dck_set_error(DCK_ERR_TRUNCATED,
                                     "%s: truncated or out of bounds: tensor %s needs bytes up to "
                                     "%llu, file has %llu",
                                     fp, t->info.name, (unsigned long long)end, (unsigned long long)ds);
            covered += piece_elems(p, nd);
            for (size_t pj = 0; pj < pi; pj++) {
                if (!boxes_overlap(p, &t->pieces[pj], nd) || piece_elems(&t->pieces[pj], nd) == 0 ||
                    piece_elems(p, nd) == 0)
                    continue;
                const char *fq = ck->files[t->pieces[pj].file]->path;
                if (piece_elems(p, nd) == total && piece_elems(&t->pieces[pj], nd) == total)
                    return dck_set_error(DCK_ERR_LAYOUT, "duplicate tensor name %s in %s and %s",
                                         t->info.name, fq, fp);
                return dck_set_error(DCK_ERR_LAYOUT, "tensor %s: slices in %s and %s overlap",
                                     t->info.name, fq, fp);
            }
        }
        if (covered != total)
            return dck_set_error(DCK_ERR_LAYOUT,
                                 "tensor %s: shards cover %llu of its %llu elements (gap; first shard %s)",
                                 t->info.name, (unsigned long long)covered, (unsigned long long)total,
                                 t->info.source);
    }
    dck_qsort(ck->tensors, ck->ntensors, sizeof *ck->tensors, cmp_tensor);
    size_t cap = 64;
    while (cap < ck->ntensors * 2) cap *= 2;
    return index_rebuild(ck, cap);
}

dck_status dck_ck_create(const dck_options *opt, dck_checkpoint **out) {
    ck_box *box = calloc(1, sizeof *box);
    *out = NULL;
    if (!box) return dck_oom(NULL);
    if (opt) box->ck.opt = *opt;
    else dck_options_init(&box->ck.opt);
    *out = &box->ck;
    return DCK_OK;
}

void dck_checkpoint_free(dck_checkpoint *ck) {
    if (!ck) return;
    for (size_t i = 0; i < ck->nfiles; i++) dck_file_close(ck->files[i]);
    free(ck->files);
    for (size_t i = 0; i < ck->ntensors; i++) {
        dck_tensor_entry *t = &ck->tensors[i];
        for (size_t p = 0; p < t->npieces; p++) free(t->pieces[p].strides);
        free(t->pieces);
        free((char *)t->info.name);
        free((char *)t->info.source);
    }
    free(ck->tensors);
    for (size_t i = 0; i < ck->nvalues; i++) {
        free((char *)ck->values[i].name);
        free((char *)ck->values[i].value);
    }
    free(ck->values);
    free(ck->root);
    free(priv_of(ck)->idx.slots);
    free((ck_box *)ck);
}

size_t dck_checkpoint_tensor_count(const dck_checkpoint *ck) { return ck->ntensors; }

const dck_tensor_info *dck_checkpoint_tensor(const dck_checkpoint *ck, size_t i) {
    return i < ck->ntensors ? &ck->tensors[i].info : NULL;
}

long dck_checkpoint_find(const dck_checkpoint *ck, const char *name) {
    return index_find((dck_checkpoint *)ck, name);
}

size_t dck_checkpoint_value_count(const dck_checkpoint *ck) { return ck->nvalues; }

const dck_manifest_value *dck_checkpoint_value(const dck_checkpoint *ck, size_t i) {
    return i < ck->nvalues ? &ck->values[i] : NULL;
}

/* ------------------------------------------------------------------ piece geometry
 * A contiguous piece is a set of runs: q is the last dim where the slice is
 * narrower than the tensor; each run spans shape[q] * inner(q) elements of
 * one global "row" (the tensor viewed as [prod(dims < q), rest]). */

void dck_piece_geom_of(const dck_tensor_entry *t, const dck_piece *p, dck_piece_geom *g) {
    int nd = t->info.ndim;
    uint64_t es = dck_dtype_size(t->info.dtype);
    g->q = -1;
    for (int i = nd - 1; i >= 0; i--)
        if (p->offset[i] != 0 || p->shape[i] != t->info.shape[i]) {
            g->q = i;
            break;
        }
    if (g->q < 0) {
        g->run_bytes = g->row_bytes = t->info.nbytes;
        g->col_byte = 0;
        g->nruns = t->info.nbytes ? 1 : 0;
        return;
    }
    uint64_t inner = es;
    for (int i = g->q + 1; i < nd; i++) inner *= t->info.shape[i];
    g->run_bytes = p->shape[g->q] * inner;
    g->row_bytes = t->info.shape[g->q] * inner;
    g->col_byte = p->offset[g->q] * inner;
    g->nruns = 1;
    for (int i = 0; i < g->q; i++) g->nruns *= p->shape[i];
    if (g->run_bytes == 0) g->nruns = 0;
}

/* Global byte offset of run r of a piece. */
uint64_t dck_piece_run_global(const dck_tensor_entry *t, const dck_piece *p, const dck_piece_geom *g,
                           uint64_t r) {
    if (g->q < 0) return 0;
    uint64_t row = 0, mul = 1;
    /* r is the row-major index over the piece's dims < q */
    uint64_t idx[DCK_MAX_DIMS];
    for (int i = g->q - 1; i >= 0; i--) {
        idx[i] = r % p->shape[i];
        r /= p->shape[i];
    }
    for (int i = g->q - 1; i >= 0; i--) {
        row += (p->offset[i] + idx[i]) * mul;
        mul *= t->info.shape[i];
    }
    return row * g->row_bytes + g->col_byte;
}

/* If global row `row` holds a run of the piece, its run index. */
int dck_piece_run_of_row(const dck_tensor_entry *t, const dck_piece *p, const dck_piece_geom *g,
                      uint64_t row, uint64_t *run) {
    if (g->q < 0) {
        *run = 0;
        return row == 0;
    }
    uint64_t idx[DCK_MAX_DIMS];
    for (int i = g->q - 1; i >= 0; i--) {
        idx[i] = row % t->info.shape[i];
        row /= t->info.shape[i];
        if (idx[i] < p->offset[i] || idx[i] >= p->offset[i] + p->shape[i]) return 0;
    }
    uint64_t r = 0;
    for (int i = 0; i < g->q; i++) r = r * p->shape[i] + (idx[i] - p->offset[i]);
    *run = r;
    return 1;
}

/* Gathers elements [e0, e0+n) (row-major within the piece, which for a
 * strided piece is the whole tensor) into buf, byte-swapped to
 * little-endian when stored big-endian. */
void dck_piece_gather(const dck_tensor_entry *t, const dck_piece *p, const uint8_t *base,
                         uint64_t e0, size_t n, uint8_t *buf) {
    int nd = t->info.ndim;
    size_t es = dck_dtype_size(t->info.dtype);
    int64_t st[DCK_MAX_DIMS];
    if (p->strides) memcpy(st, p->strides, sizeof(int64_t) * (size_t)nd);
    else {
        int64_t m = 1;
        for (int i = nd - 1; i >= 0; i--) {
            st[i] = m;
            m *= (int64_t)p->shape[i];
        }
    }
    uint64_t idx[DCK_MAX_DIMS], r = e0;
    for (int i = nd - 1; i >= 0; i--) {
        idx[i] = p->shape[i] ? r % p->shape[i] : 0;
        r = p->shape[i] ? r / p->shape[i] : 0;
    }
    for (size_t k = 0; k < n; k++) {
        uint64_t off = 0;
        for (int i = 0; i < nd; i++) off += idx[i] * (uint64_t)st[i];
        const uint8_t *src = base + p->file_offset + off * es;
        if (p->byteswap)
            for (size_t b = 0; b < es; b++) buf[k * es + b] = src[es - 1 - b];
        else memcpy(buf + k * es, src, es);
        for (int i = nd - 1; i >= 0; i--) {
            if (++idx[i] < p->shape[i]) break;
            idx[i] = 0;
        }
    }
}

/* ------------------------------------------------------------------ logical reads */

dck_status dck_checkpoint_read(dck_checkpoint *ck, size_t ti, uint64_t off, void *vbuf, size_t len) {
    if (ti >= ck->ntensors)
        return dck_set_error(DCK_ERR_INVALID, "tensor index %zu out of range (%zu tensors)", ti,
                             ck->ntensors);
    dck_tensor_entry *t = &ck->tensors[ti];
    if (off > t->info.nbytes || len > t->info.nbytes - off)
        return dck_set_error(DCK_ERR_INVALID, "read of tensor %s outside its %llu bytes",
                             t->info.name, (unsigned long long)t->info.nbytes);
    uint8_t *buf = vbuf;
    uint64_t end = off + len;
    size_t es = dck_dtype_size(t->info.dtype);
    for (size_t pi = 0; pi < t->npieces; pi++) {
        dck_piece *p = &t->pieces[pi];
        dck_file *f = ck->files[p->file];
        if (p->strides || p->byteswap) {
            const uint8_t *base;
            uint64_t blen, pend;
            dck_status s = dck_file_map(f, &base, &blen);
            if (s) return s;
            if (dck_piece_extent(t, p, &pend) || pend > blen)
                return dck_set_error(DCK_ERR_TRUNCATED, "%s: truncated: tensor %s", f->path,
                                     t->info.name);
            uint64_t e0 = off / es, e1 = (end + es - 1) / es;
            uint8_t tmp[4096];
            size_t per = sizeof tmp / es;
            for (uint64_t e = e0; e < e1; e += per) {
                size_t n = (size_t)(e1 - e < per ? e1 - e : per);
                dck_piece_gather(t, p, base, e, n, tmp);
                uint64_t a = e * es, b = a + n * es;
                uint64_t lo = a > off ? a : off, hi = b < end ? b : end;
                memcpy(buf + (lo - off), tmp + (lo - a), (size_t)(hi - lo));
            }
            continue;
        }
        dck_piece_geom g;
        dck_piece_geom_of(t, p, &g);
        if (!g.nruns) continue;
        uint64_t r0 = off / g.row_bytes, r1 = (end - 1) / g.row_bytes;
        for (uint64_t row = r0; row <= r1 && len; row++) {
            uint64_t run;
            if (!dck_piece_run_of_row(t, p, &g, row, &run)) continue;
            uint64_t a = row * g.row_bytes + g.col_byte, b = a + g.run_bytes;
            uint64_t lo = a > off ? a : off, hi = b < end ? b : end;
            if (lo >= hi) continue;
            dck_status s = dck_file_pread(f, p->file_offset + run * g.run_bytes + (lo - a),
                                          buf + (lo - off), (size_t)(hi - lo));
            if (s) return s;
        }
    }
    return DCK_OK;
}

static const char *iso_time(char *buf, size_t n) {
    time_t now = time(NULL);
    const char *sde = getenv("SOURCE_DATE_EPOCH");
    if (sde && *sde) now = (time_t)strtoll(sde, NULL, 10);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

dck_status dck_ck_build_manifest(dck_checkpoint *ck, const dck_digest *tensor_digests,
                                 const dck_digest *file_hashes, dck_manifest **out) {
    dck_manifest *m;
    *out = NULL;
    dck_status s = dck_manifest_create(&m);
    if (s) return s;
    char tbuf[64];
    dck_manifest_set_meta(m, "tool", "detcheck " DCK_VERSION_STRING);
    dck_manifest_set_meta(m, "created", iso_time(tbuf, sizeof tbuf));
    for (size_t ti = 0; ti < ck->ntensors && !s; ti++) {
        dck_tensor_entry *t = &ck->tensors[ti];
        dck_manifest_tensor mt;
        memset(&mt, 0, sizeof mt);
        mt.name = t->info.name;
        mt.group = t->info.group;
        mt.dtype = t->info.dtype;
        mt.ndim = t->info.ndim;
        memcpy(mt.shape, t->info.shape, sizeof mt.shape);
        mt.digest = tensor_digests[ti];
        s = dck_manifest_add_tensor(m, &mt);
    }
    if (ck->opt.hash_files)
        for (size_t fi = 0; fi < ck->nfiles && !s; fi++) {
            if (!ck->files[fi]->relpath) continue; /* bytes a reader decoded, not a file */
            dck_manifest_file mf = {ck->files[fi]->relpath, ck->files[fi]->size, file_hashes[fi]};
            s = dck_manifest_add_file(m, &mf);
        }
    for (size_t vi = 0; vi < ck->nvalues && !s; vi++)
        s = dck_manifest_add_value(m, ck->values[vi].name, ck->values[vi].value);
    if (!s) s = dck_manifest_finalize(m);
    if (s) {
        dck_manifest_free(m);
        return s;
    }
    *out = m;
    return DCK_OK;
}


/* Checkpoints: opening paths with the readers, the piece model (a tensor is
 * one or more hyperrectangular slices stored in files), validation, logical
 * reads and the hashing engine. */
#include "internal.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

/* Readers tried in order on each path. */
static const dck_reader *const readers[] = {
    &dck_reader_st_index,
    &dck_reader_safetensors,
    &dck_reader_megatron,
    &dck_reader_dcp,
    &dck_reader_npz,
    &dck_reader_pt,
    &dck_reader_npy,
};

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

/* dck_checkpoint is declared in internal.h; private data is allocated
 * together with it. */
typedef struct {
    dck_checkpoint ck;
    ck_private priv;
} ck_box;

static ck_private *priv_of(dck_checkpoint *ck) { return &((ck_box *)ck)->priv; }

static dck_status index_rebuild(dck_checkpoint *ck, size_t cap) {
    name_index *ix = &priv_of(ck)->idx;
    size_t *slots = calloc(cap, sizeof *slots);
    if (!slots) return dck_set_error(DCK_ERR_NOMEM, "out of memory");
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
            return dck_set_error(DCK_ERR_NOMEM, "out of memory");
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

/* Highest byte (exclusive) a piece touches in its file. */
static dck_status piece_extent(const dck_tensor_entry *t, const dck_piece *p, uint64_t *end) {
    uint64_t es = dck_dtype_size(t->info.dtype), n = piece_elems(p, t->info.ndim);
    if (n == 0) {
        *end = p->file_offset;
        return DCK_OK;
    }
    uint64_t last = 0;
    if (p->strides) {
        for (int i = 0; i < t->info.ndim; i++) {
            if (p->strides[i] < 0) return DCK_ERR_UNSUPPORTED;
            uint64_t st = (uint64_t)p->strides[i];
            if (st && (p->shape[i] - 1) > UINT64_MAX / st) return DCK_ERR_LIMIT;
            uint64_t d = (p->shape[i] - 1) * st;
            if (last > UINT64_MAX - d) return DCK_ERR_LIMIT;
            last += d;
        }
        last += 1;
    } else {
        last = n;
    }
    if (last > UINT64_MAX / es || p->file_offset > UINT64_MAX - last * es) return DCK_ERR_LIMIT;
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
            dck_status s = piece_extent(t, p, &end);
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

/* ------------------------------------------------------------------ open */

static dck_status open_file_path(dck_checkpoint *ck, const char *path, const char *relpath) {
    dck_file *f;
    dck_status s = dck_file_open(path, relpath, &f);
    if (s) return s;
    uint8_t head[64];
    size_t got = 0;
    s = dck_file_read_prefix(f, head, sizeof head, &got);
    dck_file_close(f);
    if (s) return s;
    for (size_t i = 0; i < sizeof readers / sizeof readers[0]; i++)
        if (readers[i]->probe(path, false, head, got)) return readers[i]->open(ck, path, relpath);
    return dck_set_error(DCK_ERR_UNSUPPORTED, "%s: not a checkpoint format detcheck reads", path);
}

static int cmp_str(const void *a, const void *b) {
    return dck_name_compare(*(char *const *)a, *(char *const *)b);
}

static dck_status open_dir(dck_checkpoint *ck, const char *path) {
    for (size_t i = 0; i < sizeof readers / sizeof readers[0]; i++)
        if (readers[i]->probe(path, true, NULL, 0)) return readers[i]->open(ck, path, "");
    DIR *d = opendir(path);
    if (!d) return dck_set_error(DCK_ERR_IO, "%s: cannot open directory: %s", path, strerror(errno));
    char **names = NULL;
    size_t n = 0, cap = 0;
    dck_status s = DCK_OK;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if ((s = dck_grow((void **)&names, &cap, n + 1, sizeof *names))) break;
        if (!(names[n] = dck_strdup(e->d_name))) {
            s = dck_set_error(DCK_ERR_NOMEM, "out of memory");
            break;
        }
        n++;
    }
    closedir(d);
    if (!s) dck_qsort(names, n, sizeof *names, cmp_str);
    size_t opened = 0;
    for (size_t i = 0; i < n && !s; i++) {
        char *p = dck_path_join(path, names[i]);
        struct stat st;
        if (!p) s = dck_set_error(DCK_ERR_NOMEM, "out of memory");
        else if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) {
            dck_file *f;
            s = dck_file_open(p, names[i], &f);
            uint8_t head[64];
            size_t got = 0;
            if (!s) {
                s = dck_file_read_prefix(f, head, sizeof head, &got);
                dck_file_close(f);
            }
            for (size_t r = 0; !s && r < sizeof readers / sizeof readers[0]; r++)
                if (readers[r] != &dck_reader_st_index && readers[r]->probe(p, false, head, got)) {
                    s = readers[r]->open(ck, p, names[i]);
                    opened++;
                    break;
                }
        }
        free(p);
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    if (!s && !opened)
        s = dck_set_error(DCK_ERR_FORMAT, "%s: no checkpoint files in this directory", path);
    return s;
}

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s && s[1] ? s + 1 : p;
}

dck_status dck_ck_create(const dck_options *opt, dck_checkpoint **out) {
    ck_box *box = calloc(1, sizeof *box);
    *out = NULL;
    if (!box) return dck_set_error(DCK_ERR_NOMEM, "out of memory");
    if (opt) box->ck.opt = *opt;
    else dck_options_init(&box->ck.opt);
    *out = &box->ck;
    return DCK_OK;
}

dck_status dck_checkpoint_open(const char *const *paths, size_t npaths, const dck_options *opt,
                               dck_checkpoint **out) {
    *out = NULL;
    if (!npaths) return dck_set_error(DCK_ERR_INVALID, "no input paths");
    /* bad split rules are an error whatever the paths hold */
    dck_status s = opt ? dck_megatron_check_options(opt) : DCK_OK;
    dck_checkpoint *ck;
    if (s || (s = dck_ck_create(opt, &ck))) return s;
    for (size_t i = 0; i < npaths && !s; i++) {
        struct stat st;
        if (stat(paths[i], &st) != 0) {
            s = dck_set_error(DCK_ERR_IO, "%s: %s", paths[i], strerror(errno));
            break;
        }
        if (S_ISDIR(st.st_mode)) {
            if (!ck->root) ck->root = dck_strdup(paths[i]);
            s = open_dir(ck, paths[i]);
        } else {
            s = open_file_path(ck, paths[i], base_name(paths[i]));
        }
    }
    if (!s) s = dck_ck_validate(ck);
    if (s) {
        dck_checkpoint_free(ck);
        return s;
    }
    *out = ck;
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

typedef struct {
    int q;              /* -1: the piece is the whole tensor */
    uint64_t run_bytes; /* bytes per run */
    uint64_t row_bytes; /* global bytes per row (dims >= q) */
    uint64_t col_byte;  /* byte offset of the run within its row */
    uint64_t nruns;
} piece_geom;

static void geom_of(const dck_tensor_entry *t, const dck_piece *p, piece_geom *g) {
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
static uint64_t run_global(const dck_tensor_entry *t, const dck_piece *p, const piece_geom *g,
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
static int run_of_row(const dck_tensor_entry *t, const dck_piece *p, const piece_geom *g,
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
static void gather_elems(const dck_tensor_entry *t, const dck_piece *p, const uint8_t *base,
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
    if (ti >= ck->ntensors) return dck_set_error(DCK_ERR_INVALID, "tensor index out of range");
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
            if (piece_extent(t, p, &pend) || pend > blen)
                return dck_set_error(DCK_ERR_TRUNCATED, "%s: truncated: tensor %s", f->path,
                                     t->info.name);
            uint64_t e0 = off / es, e1 = (end + es - 1) / es;
            uint8_t tmp[4096];
            size_t per = sizeof tmp / es;
            for (uint64_t e = e0; e < e1; e += per) {
                size_t n = (size_t)(e1 - e < per ? e1 - e : per);
                gather_elems(t, p, base, e, n, tmp);
                uint64_t a = e * es, b = a + n * es;
                uint64_t lo = a > off ? a : off, hi = b < end ? b : end;
                memcpy(buf + (lo - off), tmp + (lo - a), (size_t)(hi - lo));
            }
            continue;
        }
        piece_geom g;
        geom_of(t, p, &g);
        if (!g.nruns) continue;
        uint64_t r0 = off / g.row_bytes, r1 = (end - 1) / g.row_bytes;
        for (uint64_t row = r0; row <= r1 && len; row++) {
            uint64_t run;
            if (!run_of_row(t, p, &g, row, &run)) continue;
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

/* ------------------------------------------------------------------ hashing engine */

#define WINDOW_BYTES ((size_t)128 << 20)
#define TASK_BYTES ((uint64_t)1 << 20)

typedef struct {
    dck_tensor_entry *t;
    dck_tensor_hasher *h;
    const dck_piece *p;
    piece_geom g;
    uint64_t a, b;   /* stored byte range of the piece [a, b) in this task */
    const uint8_t *data; /* bytes of stored offset a */
} hash_task;

typedef struct {
    hash_task *tasks;
    size_t n, cap;
    dck_stream *stream;
    dck_status err;
} window_job;

static void run_task(const hash_task *k, dck_status *err) {
    uint64_t a = k->a;
    const uint8_t *d = k->data;
    while (a < k->b) {
        uint64_t run = a / k->g.run_bytes, in = a % k->g.run_bytes;
        uint64_t take = k->g.run_bytes - in;
        if (take > k->b - a) take = k->b - a;
        uint64_t goff = run_global(k->t, k->p, &k->g, run) + in;
        dck_status s = dck_tensor_hasher_update(k->h, goff, d, (size_t)take);
        if (s && !*err) *err = s;
        a += take;
        d += take;
    }
}

static void window_task(void *ctx, size_t i, int worker) {
    (void)worker;
    window_job *j = ctx;
    if (i == 0) {
        dck_stream_hash_window(j->stream);
        return;
    }
    dck_status e = DCK_OK;
    run_task(&j->tasks[i - 1], &e);
    if (e) __atomic_store_n(&j->err, e, __ATOMIC_RELAXED);
}

typedef struct {
    dck_tensor_entry *t;
    dck_tensor_hasher *h;
    size_t pi;
    uint64_t start; /* piece stored begin */
    uint64_t end;
} span;

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* Task boundaries: split at stored offsets whose global offset falls on a
 * segment edge where possible, so few partial segments need stitching. */
static dck_status add_tasks(window_job *j, const span *sp, const piece_geom *g, uint64_t w0,
                            const uint8_t *wdata, uint64_t a, uint64_t b) {
    while (a < b) {
        uint64_t e = a + TASK_BYTES;
        if (e >= b) e = b;
        else if (g->q < 0) e -= (e - sp->start) % DCK_SEGMENT; /* global == stored - start */
        dck_status s = dck_grow((void **)&j->tasks, &j->cap, j->n + 1, sizeof *j->tasks);
        if (s) return s;
        hash_task *k = &j->tasks[j->n++];
        k->t = sp->t;
        k->h = sp->h;
        k->p = &sp->t->pieces[sp->pi];
        k->g = *g;
        k->a = a - sp->start;
        k->b = e - sp->start;
        k->data = wdata + (a - w0);
        a = e;
    }
    return DCK_OK;
}

static dck_status hash_file_stream(dck_checkpoint *ck, uint32_t fi, span *sp, size_t nsp, int threads,
                                   dck_digest *fhash, uint64_t *done, uint64_t total) {
    dck_file *f = ck->files[fi];
    dck_stream *st;
    dck_status s = dck_stream_open(f, WINDOW_BYTES, ck->opt.hash_files != 0, &st);
    if (s) return s;
    window_job j = {0};
    j.stream = st;
    size_t first = 0;
    for (;;) {
        const uint8_t *wd;
        uint64_t w0;
        size_t wl;
        if ((s = dck_stream_next(st, &wd, &w0, &wl))) break;
        if (!wl) break;
        uint64_t w1 = w0 + wl;
        j.n = 0;
        while (first < nsp && sp[first].end <= w0) first++;
        for (size_t i = first; i < nsp && sp[i].start < w1 && !s; i++) {
            if (sp[i].end <= w0) continue;
            piece_geom g;
            geom_of(sp[i].t, &sp[i].t->pieces[sp[i].pi], &g);
            uint64_t a = sp[i].start > w0 ? sp[i].start : w0;
            uint64_t b = sp[i].end < w1 ? sp[i].end : w1;
            s = add_tasks(&j, &sp[i], &g, w0, wd, a, b);
        }
        if (s) break;
        dck_parallel_for(threads, j.n + 1, window_task, &j);
        if ((s = j.err)) break;
        *done += wl;
        if (ck->opt.progress) ck->opt.progress(ck->opt.progress_ctx, *done, total);
    }
    if (!s) {
        uint64_t size = st ? f->data_size : 0;
        for (size_t i = 0; i < nsp; i++)
            if (sp[i].end > size) {
                s = dck_set_error(DCK_ERR_TRUNCATED,
                                  "%s: truncated: tensor %s needs bytes up to %llu, file has %llu",
                                  f->path, sp[i].t->info.name, (unsigned long long)sp[i].end,
                                  (unsigned long long)size);
                break;
            }
    }
    if (!s) *fhash = dck_stream_file_hash(st);
    dck_stream_close(st);
    free(j.tasks);
    return s;
}

static dck_status hash_strided(dck_checkpoint *ck, dck_tensor_entry *t, dck_tensor_hasher *h,
                               const dck_piece *p) {
    dck_file *f = ck->files[p->file];
    const uint8_t *base;
    uint64_t blen, pend;
    dck_status s = dck_file_map(f, &base, &blen);
    if (s) return s;
    if (piece_extent(t, p, &pend) || pend > blen)
        return dck_set_error(DCK_ERR_TRUNCATED, "%s: truncated: tensor %s needs bytes up to %llu",
                             f->path, t->info.name, (unsigned long long)pend);
    size_t es = dck_dtype_size(t->info.dtype);
    uint64_t n = t->info.nbytes / es;
    size_t per = (size_t)(TASK_BYTES / es);
    uint8_t *buf = malloc(per * es);
    if (!buf) return dck_set_error(DCK_ERR_NOMEM, "out of memory");
    for (uint64_t e = 0; e < n && !s; e += per) {
        size_t k = (size_t)(n - e < per ? n - e : per);
        gather_elems(t, p, base, e, k, buf);
        s = dck_tensor_hasher_update(h, e * es, buf, k * es);
    }
    free(buf);
    return s;
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

dck_status dck_checkpoint_hash(dck_checkpoint *ck, const dck_options *optin, dck_manifest **out) {
    *out = NULL;
    if (optin) ck->opt = *optin;
    int threads = ck->opt.threads > 0 ? ck->opt.threads : dck_default_threads();
    dck_tensor_hasher **h = calloc(ck->ntensors ? ck->ntensors : 1, sizeof *h);
    dck_digest *fh = calloc(ck->nfiles ? ck->nfiles : 1, sizeof *fh), *td = NULL;
    span *sp = NULL;
    size_t nsp = 0, cap = 0;
    dck_manifest *m = NULL;
    dck_status s = DCK_OK;
    if (!h || !fh) {
        s = dck_set_error(DCK_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < ck->ntensors && !s; i++) {
        dck_tensor_entry *t = &ck->tensors[i];
        s = dck_tensor_hasher_create(t->info.dtype, t->info.shape, t->info.ndim, &h[i]);
    }
    uint64_t total = 0, done_bytes = 0;
    for (size_t fi = 0; fi < ck->nfiles; fi++)
        total += ck->files[fi]->data_size != UINT64_MAX ? ck->files[fi]->data_size : ck->files[fi]->size;
    for (uint32_t fi = 0; fi < ck->nfiles && !s; fi++) {
        nsp = 0;
        for (size_t ti = 0; ti < ck->ntensors && !s; ti++) {
            dck_tensor_entry *t = &ck->tensors[ti];
            for (size_t pi = 0; pi < t->npieces; pi++) {
                dck_piece *p = &t->pieces[pi];
                if (p->file != fi || p->strides || p->byteswap) continue;
                if ((s = dck_grow((void **)&sp, &cap, nsp + 1, sizeof *sp))) break;
                uint64_t e;
                piece_extent(t, p, &e);
                sp[nsp++] = (span){t, h[ti], pi, p->file_offset, e};
            }
        }
        if (s) break;
        dck_qsort(sp, nsp, sizeof *sp, cmp_span);
        s = hash_file_stream(ck, fi, sp, nsp, threads, &fh[fi], &done_bytes, total);
    }
    for (size_t ti = 0; ti < ck->ntensors && !s; ti++) {
        dck_tensor_entry *t = &ck->tensors[ti];
        for (size_t pi = 0; pi < t->npieces && !s; pi++)
            if (t->pieces[pi].strides || t->pieces[pi].byteswap)
                s = hash_strided(ck, t, h[ti], &t->pieces[pi]);
    }
    if (s) goto done;
    td = calloc(ck->ntensors ? ck->ntensors : 1, sizeof *td);
    if (!td) {
        s = dck_set_error(DCK_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (size_t ti = 0; ti < ck->ntensors && !s; ti++)
        if ((s = dck_tensor_hasher_final(h[ti], &td[ti])))
            s = dck_set_error(s, "tensor %s (%s): %s", ck->tensors[ti].info.name,
                              ck->tensors[ti].info.source, dck_last_error());
    if (!s) s = dck_ck_build_manifest(ck, td, fh, &m);
done:
    if (h)
        for (size_t i = 0; i < ck->ntensors; i++) dck_tensor_hasher_free(h[i]);
    free(h);
    free(fh);
    free(td);
    free(sp);
    if (s) {
        dck_manifest_free(m);
        return s;
    }
    *out = m;
    return DCK_OK;
}

dck_status dck_hash_paths(const char *const *paths, size_t npaths, const dck_options *opt,
                          dck_manifest **out) {
    dck_checkpoint *ck;
    *out = NULL;
    dck_status s = dck_checkpoint_open(paths, npaths, opt, &ck);
    if (s) return s;
    s = dck_checkpoint_hash(ck, opt, out);
    dck_checkpoint_free(ck);
    return s;
}

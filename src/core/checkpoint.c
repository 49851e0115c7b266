/* The checkpoint model: a tensor is one or more hyperrectangular slices
 * (pieces) stored in files; validation, the name index, logical reads and
 * the manifest of a hashed checkpoint. Opening paths is formats/open.c;
 * hashing is hash/hash_cpu.c. */
#include "core/core.h"
#include "common/element.h"

#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
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

/* ------------------------------------------------------------------ name index
 * Open addressing over tensor indexes. Each slot keeps 32 bits of the
 * name's hash, so a probe touches a tensor's name only when they agree,
 * and the full hashes are kept per tensor, so growing the table or sorting
 * the tensors never hashes a name again. */

typedef struct {
    uint32_t idx1; /* tensor index + 1, 0 = empty */
    uint32_t fp;   /* high 32 bits of the name's hash */
} ix_slot;

typedef struct {
    ix_slot *slots;
    size_t cap;        /* a power of two, at least twice the tensors */
    uint64_t *hashes;  /* per tensor */
    size_t cap_hashes;
} name_index;

static uint64_t name_hash(const char *s, size_t n) { return XXH3_64bits(s, n); }

/* Names and first pieces live in blocks owned by the checkpoint: no
 * allocation per tensor (a header may list a million tensors). */
typedef struct arena_block {
    struct arena_block *next;
    size_t used, cap;
    size_t faulted; /* data[0, faulted) is faulted in (ARENA_FAULT_STEP at a time) */
    _Alignas(16) unsigned char data[];
} arena_block;

/* The arena is filled front to back: its pages are faulted in a step ahead
 * of use, one call per step instead of a page fault per page (a 100k-tensor
 * header fills 30 MB of it), never more than a step past its end. */
#define ARENA_FAULT_STEP ((size_t)1 << 20)

/* Private state kept beside the public struct (allocated together). */
typedef struct ck_private {
    name_index idx;
    arena_block *arena;
    uint64_t next_seq; /* the seq of the next tensor added */
} ck_private;

/* dck_checkpoint is declared in core.h; private data is allocated
 * together with it. */
typedef struct {
    dck_checkpoint ck;
    ck_private priv;
} ck_box;

static ck_private *priv_of(dck_checkpoint *ck) { return &((ck_box *)ck)->priv; }

static void *arena_alloc(dck_checkpoint *ck, size_t n) {
    ck_private *pv = priv_of(ck);
    arena_block *b = pv->arena;
    n = (n + 15) & ~(size_t)15;
    if (!b || b->cap - b->used < n) {
        size_t cap = b ? b->cap * 2 : 16384;
        if (cap > ((size_t)8 << 20)) cap = (size_t)8 << 20; /* doubling from 16 KiB to 8 MiB */
        if (cap < n) cap = n;
        arena_block *nb = malloc(sizeof *nb + cap);
        if (!nb) return NULL;
        dck_hugepage_hint(nb, sizeof *nb + cap);
        nb->next = b;
        nb->used = 0;
        nb->cap = cap;
        nb->faulted = 0;
        pv->arena = b = nb;
    }
    void *p = b->data + b->used;
    b->used += n;
    if (b->used > b->faulted && b->cap >= 2 * ARENA_FAULT_STEP) {
        size_t upto = b->used + ARENA_FAULT_STEP < b->cap ? b->used + ARENA_FAULT_STEP : b->cap;
        dck_prefault(b->data + b->faulted, upto - b->faulted);
        b->faulted = upto;
    }
    return p;
}

static void ix_put(ix_slot *slots, size_t cap, uint64_t h, size_t i) {
    size_t m = cap - 1, p = (size_t)h & m;
    while (slots[p].idx1) p = (p + 1) & m;
    slots[p] = (ix_slot){(uint32_t)(i + 1), (uint32_t)(h >> 32)};
}

static dck_status index_rebuild(dck_checkpoint *ck, size_t cap) {
    name_index *ix = &priv_of(ck)->idx;
    ix_slot *slots = calloc(cap, sizeof *slots);
    if (!slots) return dck_oom(NULL);
    dck_prefault(slots, cap * sizeof *slots); /* touched all over, at random */
    for (size_t i = 0; i < ck->ntensors; i++) ix_put(slots, cap, ix->hashes[i], i);
    free(ix->slots);
    ix->slots = slots;
    ix->cap = cap;
    return DCK_OK;
}

static long index_find_h(dck_checkpoint *ck, const char *name, uint64_t h) {
    name_index *ix = &priv_of(ck)->idx;
    if (!ix->cap) return -1;
    size_t m = ix->cap - 1, p = (size_t)h & m;
    uint32_t fp = (uint32_t)(h >> 32);
    for (; ix->slots[p].idx1; p = (p + 1) & m) {
        size_t i = ix->slots[p].idx1 - 1;
        if (ix->slots[p].fp == fp && !strcmp(ck->tensors[i].info.name, name)) return (long)i;
    }
    return -1;
}

void dck_ck_prefetch_name(dck_checkpoint *ck, const char *name) {
    name_index *ix = &priv_of(ck)->idx;
    if (!ix->cap) return;
    uint64_t h = name_hash(name, strlen(name));
    __builtin_prefetch(&ix->slots[(size_t)h & (ix->cap - 1)]);
}

static long index_find(dck_checkpoint *ck, const char *name) {
    return index_find_h(ck, name, name_hash(name, strlen(name)));
}

/* Puts the tensors in model order, moving their hashes along and
 * renumbering the table (no name is hashed again). */
static int cmp_tensor_idx(const void *a, const void *b, void *ctx) {
    const dck_tensor_entry *t = ctx;
    return dck_name_compare(t[*(const uint32_t *)a].info.name, t[*(const uint32_t *)b].info.name);
}

static dck_status index_sort(dck_checkpoint *ck) {
    name_index *ix = &priv_of(ck)->idx;
    size_t n = ck->ntensors;
    uint32_t *perm = malloc(n * sizeof *perm), *inv = malloc(n * sizeof *inv);
    dck_tensor_entry *nt = malloc(ck->cap_tensors * sizeof *nt);
    uint64_t *nh = malloc(ix->cap_hashes * sizeof *nh);
    if (!perm || !inv || !nt || !nh) {
        free(perm);
        free(inv);
        free(nt);
        free(nh);
        return dck_oom(NULL);
    }
    for (size_t i = 0; i < n; i++) perm[i] = (uint32_t)i;
    qsort_r(perm, n, sizeof *perm, cmp_tensor_idx, ck->tensors);
    for (size_t k = 0; k < n; k++) {
        nt[k] = ck->tensors[perm[k]];
        nh[k] = ix->hashes[perm[k]];
        inv[perm[k]] = (uint32_t)k;
    }
    for (size_t p = 0; p < ix->cap; p++)
        if (ix->slots[p].idx1) ix->slots[p].idx1 = inv[ix->slots[p].idx1 - 1] + 1;
    free(ck->tensors);
    free(ix->hashes);
    ck->tensors = nt;
    ix->hashes = nh;
    free(perm);
    free(inv);
    return DCK_OK;
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
    size_t nl = strlen(name);
    if (nl > DCK_MAX_NAME)
        return dck_set_error(DCK_ERR_LIMIT, "%s: tensor name longer than %d bytes",
                             ck->files[piece->file]->path, DCK_MAX_NAME);
    uint64_t h = name_hash(name, nl);
    long i = index_find_h(ck, name, h);
    dck_tensor_entry *t;
    if (i < 0) {
        if (ck->ntensors >= DCK_MAX_TENSORS)
            return dck_set_error(DCK_ERR_LIMIT, "%s: more than %u tensors",
                                 ck->files[piece->file]->path, DCK_MAX_TENSORS);
        /* every reader's names enter here (a name seen before was checked) */
        DCK_TRY(dck_check_utf8(ck->files[piece->file]->path, "tensor name", name));
        name_index *ix = &priv_of(ck)->idx;
        dck_status s = dck_grow((void **)&ck->tensors, &ck->cap_tensors, ck->ntensors + 1,
                                sizeof *ck->tensors);
        if (!s) s = dck_grow((void **)&ix->hashes, &ix->cap_hashes, ck->ntensors + 1, sizeof *ix->hashes);
        if (s) return s;
        if (ck->ntensors + 1 == ck->cap_tensors / 2 + 1) /* just grown */
            dck_hugepage_hint(ck->tensors, ck->cap_tensors * sizeof *ck->tensors);
        char *nm = arena_alloc(ck, nl + 1);
        if (!nm) return dck_oom(NULL);
        memcpy(nm, name, nl + 1);
        t = &ck->tensors[ck->ntensors];
        memset(t, 0, sizeof *t);
        t->info.name = nm;
        t->seq = priv_of(ck)->next_seq++;
        /* the file's own path: files live as long as the checkpoint */
        t->info.source = ck->files[piece->file]->path;
        t->info.dtype = dtype;
        t->info.ndim = ndim;
        if (ndim) memcpy(t->info.shape, global_shape, sizeof(uint64_t) * (size_t)ndim);
        ix->hashes[ck->ntensors] = h;
        ck->ntensors++;
        if (ck->ntensors * 2 > ix->cap) {
            s = index_rebuild(ck, ix->cap ? ix->cap * 2 : 64);
            if (s) {
                ck->ntensors--;
                return s;
            }
        } else {
            ix_put(ix->slots, ix->cap, h, ck->ntensors - 1);
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
    /* Most tensors have one piece: it goes to the arena (cap_pieces 0); a
     * second one moves them to an array of their own. */
    if (t->npieces == 0) {
        if (!(t->pieces = arena_alloc(ck, sizeof *t->pieces))) return dck_oom(NULL);
    } else if (t->cap_pieces == 0) {
        dck_piece *pc = malloc(2 * sizeof *pc);
        if (!pc) return dck_oom(NULL);
        memcpy(pc, t->pieces, t->npieces * sizeof *pc);
        t->pieces = pc;
        t->cap_pieces = 2;
    } else {
        dck_status s = dck_grow((void **)&t->pieces, &t->cap_pieces, t->npieces + 1, sizeof *t->pieces);
        if (s) return s;
    }
    t->pieces[t->npieces++] = *piece;
    return DCK_OK;
}

/* Reservation growth: the first reservation (one file's header, which knows
 * its tensor count) is exact, so a one-file checkpoint carries no slack; a
 * later one (the next file of a directory) grows by half at least, so that
 * reserving file after file costs amortised O(1) per tensor, not a copy of
 * every earlier tensor per file (quadratic in files: 8000 files took 2.5 s). */
static dck_status grow_reserve(void **ptr, size_t *cap, size_t need, size_t sz) {
    if (need <= *cap) return DCK_OK;
    if (*cap && need < *cap + *cap / 2) need = *cap + *cap / 2;
    if (need > SIZE_MAX / sz) return dck_oom(NULL);
    void *p = realloc(*ptr, need * sz);
    if (!p) return dck_oom(NULL);
    *ptr = p;
    *cap = need;
    return DCK_OK;
}

dck_status dck_ck_reserve(dck_checkpoint *ck, size_t more) {
    name_index *ix = &priv_of(ck)->idx;
    if (more > DCK_MAX_TENSORS) more = DCK_MAX_TENSORS;
    size_t need = ck->ntensors + more;
    DCK_TRY(grow_reserve((void **)&ck->tensors, &ck->cap_tensors, need, sizeof *ck->tensors));
    dck_hugepage_hint(ck->tensors, ck->cap_tensors * sizeof *ck->tensors);
    dck_prefault(ck->tensors + ck->ntensors, more * sizeof *ck->tensors);
    DCK_TRY(grow_reserve((void **)&ix->hashes, &ix->cap_hashes, need, sizeof *ix->hashes));
    dck_prefault(ix->hashes + ck->ntensors, more * sizeof *ix->hashes);
    size_t cap = ix->cap ? ix->cap : 64;
    while (cap < need * 2) cap *= 2;
    return cap != ix->cap ? index_rebuild(ck, cap) : DCK_OK;
}

static dck_status add_value_from(dck_checkpoint *ck, const char *name, const char *value, uint32_t file) {
    const char *where = file != UINT32_MAX ? ck->files[file]->path : "checkpoint";
    DCK_TRY(dck_check_utf8(where, "value name", name));
    char e[256];
    if (!dck_utf8_valid(value, strlen(value)))
        return dck_set_error(DCK_ERR_FORMAT, "%s: value %s: text '%s' is not valid UTF-8", where, name,
                             dck_text_escape(value, e, sizeof e));
    DCK_TRY(dck_grow((void **)&ck->value_files, &ck->cap_value_files, ck->nvalues + 1, sizeof *ck->value_files));
    ck->value_files[ck->nvalues] = file;
    return dck_value_push(&ck->values, &ck->nvalues, &ck->cap_values, name, value);
}

/* A value comes from the file its reader added last. */
dck_status dck_ck_add_value(dck_checkpoint *ck, const char *name, const char *value) {
    return add_value_from(ck, name, value, ck->nfiles ? (uint32_t)(ck->nfiles - 1) : UINT32_MAX);
}

/* ------------------------------------------------------------------ file roles
 * Files whose name says what they hold (transformers' Trainer checkpoint-N/,
 * Accelerate's save_state folders, DeepSpeed, Hugging Face snapshots):
 * their tensors take the file's group, whatever their own names say (the
 * RNG state "cpu" is no weight; an optimizer's "state.0.step" is no
 * "other"). Documented in detcheck-formats(7), "File roles". */
static const struct {
    const char *glob; /* fnmatch(3) over the base name */
    dck_group group;
} file_roles[] = {
    {"optimizer.pt", DCK_GROUP_OPTIMIZER},          /* Trainer, Accelerate */
    {"optimizer.bin", DCK_GROUP_OPTIMIZER},         /* Accelerate */
    {"optimizer_[0-9]*.bin", DCK_GROUP_OPTIMIZER},  /* Accelerate, 2nd optimizer on */
    {"optim.pt", DCK_GROUP_OPTIMIZER},
    {"*_optim_states.pt", DCK_GROUP_OPTIMIZER},     /* DeepSpeed ZeRO */
    {"scheduler.pt", DCK_GROUP_OTHER},              /* Trainer */
    {"scheduler.bin", DCK_GROUP_OTHER},             /* Accelerate */
    {"scheduler_[0-9]*.bin", DCK_GROUP_OTHER},
    {"scaler.pt", DCK_GROUP_OTHER},                 /* AMP grad scaler */
    {"sampler.bin", DCK_GROUP_OTHER},               /* Accelerate */
    {"sampler_[0-9]*.bin", DCK_GROUP_OTHER},
    {"training_args.bin", DCK_GROUP_OTHER},         /* Trainer */
    {"rng_state.pth", DCK_GROUP_RNG},               /* Trainer, one process */
    {"rng_state_[0-9]*.pth", DCK_GROUP_RNG},        /* Trainer, per process */
    {"random_states_[0-9]*.pkl", DCK_GROUP_RNG},    /* Accelerate, per process */
    /* Weight files (model.safetensors, model-N-of-M.safetensors,
     * pytorch_model.bin...) have no row: the names decide, which make model
     * parameters weights; a row would regroup what other tools store in
     * files of those names and change manifests written before. */
};

int dck_file_role_group(const char *path) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    char base[256];
    size_t n = strlen(b);
    if (n >= sizeof base) return -1;
    memcpy(base, b, n + 1);
    if (dck_has_suffix(base, ".zst")) base[n - 4] = 0;
    for (size_t i = 0; i < sizeof file_roles / sizeof file_roles[0]; i++)
        if (fnmatch(file_roles[i].glob, base, 0) == 0) return (int)file_roles[i].group;
    return -1;
}

/* ------------------------------------------------------------------ moving, aliases */

void dck_ck_remove_tensors(dck_checkpoint *ck, const unsigned char *drop) {
    name_index *ix = &priv_of(ck)->idx;
    size_t k = 0;
    for (size_t i = 0; i < ck->ntensors; i++) {
        dck_tensor_entry *t = &ck->tensors[i];
        if (!drop[i]) {
            ck->tensors[k] = *t;
            ix->hashes[k++] = ix->hashes[i];
            continue;
        }
        for (size_t p = 0; p < t->npieces; p++) free(t->pieces[p].strides);
        if (t->cap_pieces) free(t->pieces); /* else in the arena, as the name */
    }
    if (k == ck->ntensors) return;
    ck->ntensors = k;
    /* the table only shrinks: same capacity, slots renumbered */
    memset(ix->slots, 0, ix->cap * sizeof *ix->slots);
    for (size_t i = 0; i < k; i++) ix_put(ix->slots, ix->cap, ix->hashes[i], i);
}

void dck_ck_reset(dck_checkpoint *ck) {
    for (size_t i = 0; i < ck->nfiles; i++) dck_file_close(ck->files[i]);
    for (size_t i = 0; i < ck->ntensors; i++) {
        dck_tensor_entry *t = &ck->tensors[i];
        for (size_t p = 0; p < t->npieces; p++) free(t->pieces[p].strides);
        if (t->cap_pieces) free(t->pieces);
    }
    for (size_t i = 0; i < ck->nvalues; i++) {
        free((char *)ck->values[i].name);
        free((char *)ck->values[i].value);
    }
    ck->nfiles = ck->ntensors = ck->nvalues = 0;
    ck_private *pv = priv_of(ck);
    if (pv->idx.cap) memset(pv->idx.slots, 0, pv->idx.cap * sizeof *pv->idx.slots);
    for (arena_block *b = pv->arena, *nb; b; b = nb) {
        nb = b->next;
        free(b);
    }
    pv->arena = NULL;
}

void dck_ck_mark_ordered(dck_checkpoint *ck, size_t from) {
    for (size_t i = from; i < ck->ntensors; i++) ck->tensors[i].ordered = true;
}

bool dck_ck_keeps_order(const dck_checkpoint *ck) {
    for (size_t i = 0; i < ck->ntensors; i++)
        if (!ck->tensors[i].ordered) return false;
    return ck->ntensors > 0;
}

static int cmp_seq_idx(const void *a, const void *b, void *ctx) {
    const dck_tensor_entry *t = ctx;
    uint64_t x = t[*(const size_t *)a].seq, y = t[*(const size_t *)b].seq;
    return x < y ? -1 : x > y;
}

dck_status dck_ck_move(dck_checkpoint *dst, dck_checkpoint *src, const char *prefix) {
    dck_status s = DCK_OK;
    size_t pl = prefix ? strlen(prefix) : 0;
    uint32_t *fmap = malloc((src->nfiles ? src->nfiles : 1) * sizeof *fmap);
    char *nm = malloc(pl + DCK_MAX_NAME + 1);
    /* in the order the reader added them (src may be sorted by name) */
    size_t *order = malloc((src->ntensors ? src->ntensors : 1) * sizeof *order);
    if (!fmap || !nm || !order) s = dck_oom(NULL);
    for (size_t i = 0; order && i < src->ntensors; i++) order[i] = i;
    if (!s) qsort_r(order, src->ntensors, sizeof *order, cmp_seq_idx, src->tensors);
    for (size_t fi = 0; fi < src->nfiles && !s; fi++) { /* files first: pieces name them by index */
        dck_file *f = src->files[fi];
        src->files[fi] = NULL;
        s = dck_ck_add_file(dst, f, &fmap[fi]);
    }
    if (!s) memcpy(nm, prefix ? prefix : "", pl);
    for (size_t k = 0; k < src->ntensors && !s; k++) {
        dck_tensor_entry *t = &src->tensors[order[k]];
        snprintf(nm + pl, DCK_MAX_NAME + 1, "%s", t->info.name);
        size_t before = dst->ntensors;
        for (size_t pi = 0; pi < t->npieces && !s; pi++) {
            dck_piece q = t->pieces[pi];
            q.file = fmap[q.file];
            if (!(s = dck_ck_add_piece(dst, nm, t->info.dtype, t->info.shape, t->info.ndim, &q)))
                t->pieces[pi].strides = NULL; /* now owned by dst */
        }
        if (!s && dst->ntensors > before) dst->tensors[before].ordered = t->ordered;
    }
    for (size_t vi = 0; vi < src->nvalues && !s; vi++) {
        snprintf(nm + pl, DCK_MAX_NAME + 1, "%s", src->values[vi].name);
        uint32_t f = src->value_files && src->value_files[vi] != UINT32_MAX ? fmap[src->value_files[vi]] : UINT32_MAX;
        s = add_value_from(dst, nm, src->values[vi].value, f);
    }
    free(fmap);
    free(nm);
    free(order);
    dck_checkpoint_free(src);
    return s;
}

typedef struct {
    uint32_t file;
    uint64_t lo, hi;
    size_t i;
} stored_range;

static int cmp_stored_range(const void *a, const void *b) {
    const stored_range *x = a, *y = b;
    if (x->file != y->file) return x->file < y->file ? -1 : 1;
    if (x->lo != y->lo) return x->lo < y->lo ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

dck_status dck_ck_storage_aliases(const dck_checkpoint *ck, long *out) {
    size_t n = 0;
    stored_range *v = malloc((ck->ntensors ? ck->ntensors : 1) * sizeof *v);
    if (!v) return dck_oom(NULL);
    for (size_t i = 0; i < ck->ntensors; i++) {
        const dck_tensor_entry *t = &ck->tensors[i];
        uint64_t end;
        out[i] = -1;
        if (t->npieces != 1 || dck_piece_extent(t, &t->pieces[0], &end) || end == t->pieces[0].file_offset)
            continue;
        v[n++] = (stored_range){t->pieces[0].file, t->pieces[0].file_offset, end, i};
    }
    qsort(v, n, sizeof *v, cmp_stored_range);
    /* a sweep per file: each range meets the open one that reaches furthest */
    size_t far = 0;
    for (size_t k = 0; k < n; k++) {
        if (k && v[far].file == v[k].file && v[far].hi > v[k].lo) {
            out[v[k].i] = (long)v[far].i;
            if (out[v[far].i] < 0) out[v[far].i] = (long)v[k].i;
        }
        if (!k || v[far].file != v[k].file || v[k].hi > v[far].hi) far = k;
    }
    free(v);
    return DCK_OK;
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

/* Whether any two non-empty pieces of t may overlap, in O(n log n): a
 * sweep along the dimension with the most distinct offsets (the one the
 * tensor is chunked along), comparing each piece only with the pieces still
 * open there. 40,000 DCP chunks of one tensor took 3.5 s pairwise. When it
 * says yes (or cannot tell: no memory, bounds that overflow), the pairwise
 * loop of dck_ck_validate finds the pair and reports it as it always has. */
typedef struct {
    uint64_t lo, hi;
    size_t i;
} sweep_item;

static int cmp_sweep(const void *a, const void *b) {
    const sweep_item *x = a, *y = b;
    if (x->lo != y->lo) return x->lo < y->lo ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

/* ...over the first n pieces of t only */
static int pieces_may_overlap(const dck_tensor_entry *t, int nd, size_t n) {
    if (n < 2) return 0;
    if (nd == 0) return 1;
    for (size_t k = 0; k < n; k++)
        for (int i = 0; i < nd; i++)
            if (t->pieces[k].offset[i] > UINT64_MAX - t->pieces[k].shape[i]) return 1;
    sweep_item *v = malloc(n * sizeof *v);
    size_t *act = malloc(n * sizeof *act);
    if (!v || !act) {
        free(v);
        free(act);
        return 1;
    }
    int best = 0;
    size_t best_distinct = 0;
    for (int d = 0; d < nd; d++) {
        for (size_t k = 0; k < n; k++) v[k] = (sweep_item){t->pieces[k].offset[d], 0, k};
        dck_qsort(v, n, sizeof *v, cmp_sweep);
        size_t distinct = 1;
        for (size_t k = 1; k < n; k++) distinct += v[k].lo != v[k - 1].lo;
        if (distinct > best_distinct) {
            best_distinct = distinct;
            best = d;
        }
    }
    size_t m = 0;
    for (size_t k = 0; k < n; k++)
        if (piece_elems(&t->pieces[k], nd))
            v[m++] = (sweep_item){t->pieces[k].offset[best],
                                  t->pieces[k].offset[best] + t->pieces[k].shape[best], k};
    dck_qsort(v, m, sizeof *v, cmp_sweep);
    size_t nopen = 0;
    int hit = 0;
    for (size_t k = 0; k < m && !hit; k++) {
        size_t keep = 0;
        for (size_t j = 0; j < nopen; j++) /* close what ends before this one starts */
            if (v[act[j]].hi > v[k].lo) act[keep++] = act[j];
        nopen = keep;
        for (size_t j = 0; j < nopen && !hit; j++)
            hit = boxes_overlap(&t->pieces[v[act[j]].i], &t->pieces[v[k].i], nd);
        act[nopen++] = k;
    }
    free(v);
    free(act);
    return hit;
}

static int cmp_tensor(const void *a, const void *b) {
    return dck_name_compare(((const dck_tensor_entry *)a)->info.name,
                            ((const dck_tensor_entry *)b)->info.name);
}

static int cmp_value_idx(const void *a, const void *b, void *ctx) {
    const dck_checkpoint *ck = ctx;
    return strcmp(ck->values[*(const size_t *)a].name, ck->values[*(const size_t *)b].name);
}

/* No value name twice: the message names both files (a folder of files that
 * share names is read with a namespace per file, formats/open.c). */
static dck_status check_values(const dck_checkpoint *ck) {
    if (ck->nvalues < 2) return DCK_OK;
    size_t *ix = malloc(ck->nvalues * sizeof *ix);
    if (!ix) return dck_oom(NULL);
    for (size_t i = 0; i < ck->nvalues; i++) ix[i] = i;
    qsort_r(ix, ck->nvalues, sizeof *ix, cmp_value_idx, (void *)ck);
    dck_status s = DCK_OK;
    for (size_t i = 1; i < ck->nvalues && !s; i++) {
        const char *n = ck->values[ix[i]].name;
        if (strcmp(ck->values[ix[i - 1]].name, n)) continue;
        size_t x = ix[i - 1] < ix[i] ? ix[i - 1] : ix[i], y = ix[i - 1] ^ ix[i] ^ x;
        uint32_t fa = ck->value_files ? ck->value_files[x] : UINT32_MAX;
        uint32_t fb = ck->value_files ? ck->value_files[y] : UINT32_MAX;
        const char *pa = fa != UINT32_MAX ? ck->files[fa]->path : "checkpoint";
        const char *pb = fb != UINT32_MAX ? ck->files[fb]->path : "checkpoint";
        if (fa == fb) s = dck_set_error(DCK_ERR_LAYOUT, "%s: duplicate value name %s", pa, n);
        else s = dck_set_error(DCK_ERR_LAYOUT, "duplicate value name %s in %s and %s", n, pa, pb);
    }
    free(ix);
    return s;
}

/* One tensor's pieces: inside bounds and their files, disjoint, covering
 * it; fills info.nbytes. */
static dck_status check_pieces(dck_checkpoint *ck, dck_tensor_entry *t) {
    int nd = t->info.ndim;
    uint64_t nbytes;
    if (dck_shape_bytes(t->info.dtype, t->info.shape, nd, &nbytes) != DCK_OK)
        return dck_set_error(DCK_ERR_LIMIT, "%s: tensor %s: shape product overflows",
                             t->info.source, t->info.name);
    t->info.nbytes = nbytes;
    uint64_t total = 1, covered = 0;
    for (int i = 0; i < nd; i++) total *= t->info.shape[i];
    if (nbytes == 0) total = 0;
    /* The pairwise search below reports the first piece (in piece
     * order) that overlaps an earlier one. It starts at the shortest
     * prefix of pieces that overlaps (a binary search over prefixes
     * with the sweep: O(n log^2 n)), so a single bad chunk among
     * 200,000 costs a sweep, not n^2/2 comparisons; and it is skipped
     * when the sweep finds none. */
    size_t first_pair = t->npieces;
    if (pieces_may_overlap(t, nd, t->npieces)) {
        size_t lo = 2, hi = t->npieces; /* the shortest overlapping prefix is in [lo, hi] */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (pieces_may_overlap(t, nd, mid)) hi = mid;
            else lo = mid + 1;
        }
        first_pair = hi - 1;
    }
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
        for (size_t pj = 0; pi >= first_pair && pj < pi; pj++) {
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
    return DCK_OK;
}

dck_status dck_ck_check_tensor(dck_checkpoint *ck, size_t i) { return check_pieces(ck, &ck->tensors[i]); }

dck_status dck_ck_validate(dck_checkpoint *ck) {
    DCK_TRY(check_values(ck));
    /* the group of each file's role, once per file (-1: the names decide) */
    signed char *role = malloc(ck->nfiles ? ck->nfiles : 1);
    if (!role) return dck_oom(NULL);
    for (size_t f = 0; f < ck->nfiles; f++) role[f] = (signed char)dck_file_role_group(ck->files[f]->path);
    for (size_t ti = 0; ti < ck->ntensors; ti++) {
        dck_tensor_entry *t = &ck->tensors[ti];
        int r = t->npieces ? role[t->pieces[0].file] : -1;
        t->info.group = r >= 0 ? (dck_group)r : dck_group_of_name(t->info.name);
    }
    free(role);
    for (size_t ti = 0; ti < ck->ntensors; ti++) DCK_TRY(check_pieces(ck, &ck->tensors[ti]));
    /* model order; files often list their tensors in it already. The name
     * index follows (it holds every tensor: dck_ck_add_piece keeps it). */
    size_t sorted = 1;
    while (sorted < ck->ntensors && cmp_tensor(&ck->tensors[sorted - 1], &ck->tensors[sorted]) <= 0)
        sorted++;
    return sorted < ck->ntensors ? index_sort(ck) : DCK_OK;
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
        if (t->cap_pieces) free(t->pieces); /* else in the arena, as the name */
    }
    free(ck->tensors);
    for (size_t i = 0; i < ck->nvalues; i++) {
        free((char *)ck->values[i].name);
        free((char *)ck->values[i].value);
    }
    free(ck->values);
    free(ck->value_files);
    free(ck->root);
    free(priv_of(ck)->idx.slots);
    free(priv_of(ck)->idx.hashes);
    for (arena_block *b = priv_of(ck)->arena, *nb; b; b = nb) {
        nb = b->next;
        free(b);
    }
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
    size_t es = dck_dtype_size(t->info.dtype), su = dck_dtype_size(dck_dtype_part(t->info.dtype));
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
        if (p->byteswap) /* each part of a complex on its own */
            for (size_t b = 0; b < es; b++) buf[k * es + b] = src[(b / su) * su + su - 1 - b % su];
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
    /* no digest of zeros read where a file lost mapped pages (io.c) */
    DCK_TRY(dck_files_check(ck->files, ck->nfiles));
    dck_status s = dck_manifest_create(&m);
    if (!s) s = dck_manifest_reserve(m, ck->ntensors, ck->nfiles);
    if (s) {
        dck_manifest_free(m);
        return s;
    }
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


/* DeepSpeed checkpoints: ZeRO stages 1, 2 and 3, and universal checkpoints.
 *
 *   ROOT/latest                                   the tag ("global_step3")
 *   ROOT/global_step3/
 *     mp_rank_00_model_states.pt                  ZeRO-1/2: module (whole weights),
 *                                                 param_shapes, ds_config, counters
 *     zero_pp_rank_R_mp_rank_00_optim_states.pt   one per data-parallel rank R: the
 *                                                 rank's flat partition of each group
 *     zero_pp_rank_R_mp_rank_00_model_states.pt   ZeRO-3, one per rank: module holds
 *                                                 empty placeholders
 *   ROOT/latest_universal                         ds_to_universal's output:
 *   ROOT/global_step3_universal/
 *     mp_rank_00_model_states.pt, zero/optimizer_state.pt,
 *     zero/PARAM/{fp32,exp_avg,exp_avg_sq,step}.pt  one parameter's state, whole
 *
 * Every file is read by the torch.save reader into a scratch checkpoint
 * under its stem (STEM.path); the pickles of the files whose structure
 * matters are parsed again here for that structure (param_shapes in order,
 * partition counts, the per-group state keys), which the reader's walk
 * flattens into names.
 * Then the scratch pieces are handed to ck under logical names:
 *
 *   module.NAME                       the model's state dict as saved (ZeRO-3:
 *                                     the parameters rebuilt from the partitions)
 *   optimizer.state.fp32_param.NAME   fp32 master weights, in the parameter's shape
 *   optimizer.state.KEY.NAME          per-element optimizer state (exp_avg,
 *                                     exp_avg_sq), and per-group scalars (step)
 *
 * so that the digests do not depend on the number of data-parallel ranks,
 * on the stage (1 or 2), or on the universal form. Layout rules (those of
 * deepspeed's zero_to_fp32.py, checked against every file):
 *   ZeRO-1/2: group g's partitions, concatenated in rank order, hold the
 *     group's parameters in param_shapes order, each followed by its
 *     param_alignment_paddings entry when the file has them; the group's
 *     tail is padding (offsets aligned to 2 x ranks must agree).
 *   ZeRO-3: each parameter is partitioned on its own: rank r holds elements
 *     [r*k, (r+1)*k) of it (k = ceil(numel / ranks), the last padded) at the
 *     same offset of its flat groups, parameters in param_shapes order.
 * The optimizer state of a group has the layout of the group's partition.
 * Values that describe the layout (ranks, stage, partition counts, the ZeRO
 * config) are named deepspeed.layout.* (detcheck-formats(7), "DeepSpeed"). */
#include "formats/readers.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define LATEST "latest"
#define LATEST_UNIVERSAL "latest_universal"
#define MAX_RANKS 100000u
#define NAME_MAX_LEN 4096

/* ------------------------------------------------------------------ names */

/* Digits at s (at most 9): the number and the end, or NULL. */
static const char *number(const char *s, unsigned long *v) {
    size_t k = 0;
    *v = 0;
    for (; isdigit((unsigned char)s[k]) && k < 9; k++) *v = *v * 10 + (unsigned long)(s[k] - '0');
    return k && !isdigit((unsigned char)s[k]) ? s + k : NULL;
}

/* The files of a tag directory, by name. The ZeRO files may carry the
 * prefix of the BF16/FP16 optimizers' files. */
typedef enum { F_MODEL, F_ZMODEL, F_OPTIM, F_PIPE, F_UNKNOWN } ds_kind;

static const char *const zero_prefixes[] = {"zero_pp_rank_", "bf16_zero_pp_rank_", "fp16_zero_pp_rank_"};
static const struct {
    const char *suffix;
    ds_kind kind;
} zero_suffixes[] = {{"_optim_states.pt", F_OPTIM}, {"_model_states.pt", F_ZMODEL}};

static ds_kind file_kind(const char *nm, unsigned long *rank, unsigned long *mp) {
    const char *e;
    *rank = *mp = 0;
    if (!dck_has_suffix(nm, ".pt")) return F_UNKNOWN;
    if (!strncmp(nm, "layer_", 6)) return F_PIPE; /* pipeline stages: layer_NN-model_states.pt */
    if (!strncmp(nm, "mp_rank_", 8) && (e = number(nm + 8, mp)) && !strcmp(e, "_model_states.pt")) return F_MODEL;
    for (size_t i = 0; i < sizeof zero_prefixes / sizeof zero_prefixes[0]; i++) {
        size_t l = strlen(zero_prefixes[i]);
        if (strncmp(nm, zero_prefixes[i], l) || !(e = number(nm + l, rank)) || strncmp(e, "_mp_rank_", 9) ||
            !(e = number(e + 9, mp)))
            continue;
        for (size_t k = 0; k < sizeof zero_suffixes / sizeof zero_suffixes[0]; k++)
            if (!strcmp(e, zero_suffixes[k].suffix)) return zero_suffixes[k].kind;
    }
    return F_UNKNOWN;
}

/* A ZeRO tag directory (optimizer partitions), or a universal one. */
static int tag_kind(const char *path) {
    char **names;
    size_t n;
    if (dck_list_dir(path, true, &names, &n)) {
        dck_clear_error();
        return 0;
    }
    int optim = 0, model = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned long r, m;
        ds_kind k = file_kind(names[i], &r, &m);
        optim |= k == F_OPTIM;
        model |= k == F_MODEL;
    }
    dck_strv_free(names, n);
    if (optim) return 1;
    return model && dck_path_exists_in(path, "zero", true) ? 2 : 0;
}

/* The tag a root's latest (or latest_universal) file names, into buf. */
static bool root_tag(const char *root, char *buf, size_t cap, const char **which) {
    static const char *const files[] = {LATEST, LATEST_UNIVERSAL};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char *p = dck_path_join(root, files[i]);
        FILE *f = p ? fopen(p, "r") : NULL;
        free(p);
        if (!f) continue;
        size_t got = fread(buf, 1, cap - 1, f);
        fclose(f);
        buf[got] = 0;
        while (got && isspace((unsigned char)buf[got - 1])) buf[--got] = 0;
        /* a directory name of this root, nothing else */
        if (!got || strchr(buf, '/') || !strcmp(buf, ".") || !strcmp(buf, "..")) continue;
        *which = files[i];
        return true;
    }
    return false;
}

static int ds_probe(const char *path, bool is_dir, const uint8_t *head, size_t nhead) {
    (void)head;
    (void)nhead;
    if (!is_dir) return 0;
    if (tag_kind(path)) return 1;
    char tag[256];
    const char *which;
    if (!root_tag(path, tag, sizeof tag, &which)) return 0;
    /* a tag of deepspeed's default name that is missing: this reader says so */
    if (!dck_path_exists_in(path, tag, true)) return !strncmp(tag, "global_step", 11);
    char *p = dck_path_join(path, tag);
    int k = p ? tag_kind(p) : 0;
    free(p);
    return k != 0;
}

/* ------------------------------------------------------------------ the files */

typedef struct {
    char *name;     /* relative to the tag directory */
    char *stem;     /* prefix of its names in the scratch checkpoint */
    uint32_t file;  /* index in the scratch checkpoint */
    pk_ctx *pc;     /* its pickle, parsed again for structure (or NULL) */
    uint8_t *pbuf;
    pk_node *root;
} ds_file;

/* A parameter: name, shape, group (param_shapes order). */
typedef struct {
    const char *name;
    int nd;
    uint64_t shape[DCK_MAX_DIMS];
    uint64_t numel;
    size_t group;
    size_t esize; /* bytes per element of the module's tensor (ZeRO-1/2) */
} ds_param;

/* A flat partition tensor of the scratch checkpoint, placed in ck. */
typedef struct {
    uint32_t file;  /* ck file */
    uint64_t off;   /* byte offset of element 0 */
    uint64_t n;     /* elements */
    dck_dtype dt;
    bool bs;
} ds_flat;

typedef struct {
    dck_checkpoint *ck, *scr;
    const char *dir, *rel;  /* the tag directory, and relative to the root hashed */
    ds_file *files;
    size_t nfiles, cap_files;
    size_t model;           /* the model file: mp_rank_00, or rank 0's ZeRO-3 one */
    size_t *optim, *zmodel; /* per rank: index into files */
    size_t world;
    uint32_t *fmap;         /* scratch file -> ck file */
    size_t nmoved;          /* scratch files ck owns (the scratch borrows them) */
    unsigned char *used;    /* per scratch tensor: reported under another name, or dropped */
    ds_param *params;
    size_t nparams;
    int64_t stage;
    bool bf16_optimizer; /* ZeRO-1 by BF16_Optimizer (bf16_zero_pp_rank_* files) */
} ds_ctx;

static void ctx_free(ds_ctx *c) {
    for (size_t i = 0; i < c->nfiles; i++) {
        free(c->files[i].name);
        free(c->files[i].stem);
        dck_pk_ctx_free(c->files[i].pc);
        free(c->files[i].pbuf);
    }
    free(c->files);
    free(c->optim);
    free(c->zmodel);
    free(c->fmap);
    free(c->used);
    free(c->params);
    for (size_t i = 0; c->scr && i < c->nmoved; i++) c->scr->files[i] = NULL;
    dck_checkpoint_free(c->scr);
}

static const char *fpath(const ds_ctx *c, size_t fi) { return c->scr->files[c->files[fi].file]->path; }

/* Adds dir/name to the scratch checkpoint under its stem. */
static dck_status add_file(ds_ctx *c, const char *name) {
    dck_status s = dck_grow((void **)&c->files, &c->cap_files, c->nfiles + 1, sizeof *c->files);
    if (s) return s;
    ds_file *f = &c->files[c->nfiles];
    memset(f, 0, sizeof *f);
    f->name = dck_strdup(name);
    f->stem = dck_strndup(name, strlen(name) - 3); /* without .pt */
    if (!f->name || !f->stem) {
        free(f->name);
        free(f->stem);
        return dck_oom(NULL);
    }
    c->nfiles++;
    char *p = dck_path_join(c->dir, name), *r = dck_rel_join(c->rel, name);
    dck_file *df = NULL;
    if (!p || !r) s = dck_oom(NULL);
    else s = dck_file_open(p, r, &df);
    free(p);
    free(r);
    if (!s) s = dck_ck_add_file(c->scr, df, &f->file);
    /* a root that is a tensor (the universal step.pt) takes the stem */
    dck_pt_opts o = {f->stem, f->stem, NULL, NULL, 0, true, false};
    if (!s) s = dck_pt_load_file(c->scr, f->file, &o);
    return s;
}

/* Parses a file's data.pkl again, for its structure. */
static dck_status load_tree(ds_ctx *c, size_t fi) {
    ds_file *f = &c->files[fi];
    if (f->root) return DCK_OK;
    const char *path = fpath(c, fi);
    const uint8_t *data;
    uint64_t len;
    DCK_TRY(dck_file_map(c->scr->files[f->file], &data, &len));
    if (!dck_is_zip(data, len))
        return dck_set_error(DCK_ERR_UNSUPPORTED, "%s: not a zip torch.save file (the form DeepSpeed writes)", path);
    dck_zip z;
    DCK_TRY(dck_zip_open(data, len, path, &z));
    const dck_zip_entry *pkl = NULL;
    for (size_t i = 0; i < z.n && !pkl; i++) {
        const char *nm = z.entries[i].name;
        if (!strcmp(nm, "data.pkl") || dck_has_suffix(nm, "/data.pkl")) pkl = &z.entries[i];
    }
    dck_status s = DCK_OK;
    char label[NAME_MAX_LEN];
    snprintf(label, sizeof label, "%s: data.pkl", path);
    if (!pkl) s = dck_set_error(DCK_ERR_FORMAT, "%s: no data.pkl", path);
    else if (pkl->usize > DCK_MAX_HEADER_BYTES * 10ull)
        s = dck_set_error(DCK_ERR_LIMIT, "%s: data.pkl of %llu bytes (limit)", path, (unsigned long long)pkl->usize);
    else if (!(f->pbuf = malloc(pkl->usize ? (size_t)pkl->usize : 1))) s = dck_oom(NULL);
    else if (!(s = dck_zip_extract(pkl, data, f->pbuf, path)) &&
             !(s = dck_pk_ctx_create(label, NULL, &dck_pk_torch_handlers, &f->pc))) {
        size_t used;
        s = dck_pk_load(f->pc, f->pbuf, (size_t)pkl->usize, (int64_t)pkl->data_offset, &f->root, &used);
    }
    dck_zip_free(&z);
    return s;
}

/* ------------------------------------------------------------------ pickle structure */

/* dict item by integer key (torch optimizer state: {0: {...}}). */
static const pk_node *get_index(const pk_node *d, int64_t key) {
    if (!d || d->kind != PK_DICT) return NULL;
    for (size_t i = 0; i < d->u.dict.n; i++) {
        int64_t k;
        if (d->u.dict.keys[i]->kind == PK_INT && dck_pk_int(d->u.dict.keys[i], &k) && k == key)
            return d->u.dict.vals[i];
    }
    return NULL;
}

/* An int, or an enum member pickled as a call with it (ZeroStageEnum(2)). */
static bool int_of(const pk_node *n, int64_t *v) {
    if (!n) return false;
    if (dck_pk_int(n, v)) return true;
    size_t k;
    pk_node **a = n && n->kind == PK_OBJECT ? dck_pk_items(n->u.obj.args, &k) : NULL;
    return a && k == 1 && dck_pk_int(a[0], v);
}

static bool none(const pk_node *n) { return !n || n->kind == PK_NONE; }

/* A torch.Size (a tuple of non-negative ints). */
static bool shape_of(const pk_node *n, ds_param *p) {
    size_t k;
    pk_node **it = dck_pk_items(n, &k);
    if (!it && n && n->kind == PK_OBJECT) { /* Size((d0, ...)) kept as a call */
        size_t na;
        pk_node **a = dck_pk_items(n->u.obj.args, &na);
        it = a && na == 1 ? dck_pk_items(a[0], &k) : NULL;
    }
    if (!it && !(n && (n->kind == PK_TUPLE || n->kind == PK_LIST))) return false;
    if (k >= DCK_MAX_DIMS) return false;
    p->nd = (int)k;
    p->numel = 1;
    for (size_t i = 0; i < k; i++) {
        int64_t v;
        if (!dck_pk_int(it[i], &v) || v < 0) return false;
        p->shape[i] = (uint64_t)v;
        if (__builtin_mul_overflow(p->numel, p->shape[i], &p->numel)) return false;
    }
    return true;
}

/* The parameters of param_shapes (a list of one dict per group, or one
 * dict), in order. */
static dck_status read_params(ds_ctx *c, const pk_node *ps, const char *path, size_t *ngroups) {
    size_t ng;
    pk_node **groups = dck_pk_items(ps, &ng);
    const pk_node *one = ps;
    if (none(ps))
        return dck_set_error(DCK_ERR_FORMAT, "%s: no param_shapes (DeepSpeed's engine writes them; without them the "
                             "flat partitions cannot be cut into parameters)", path);
    if (!groups) {
        if (!ps || ps->kind != PK_DICT)
            return dck_set_error(DCK_ERR_FORMAT, "%s: param_shapes is neither a list of dicts nor a dict", path);
        groups = (pk_node **)&one;
        ng = 1;
    }
    size_t total = 0;
    for (size_t g = 0; g < ng; g++) {
        if (groups[g]->kind != PK_DICT)
            return dck_set_error(DCK_ERR_FORMAT, "%s: param_shapes[%zu] is not a dict", path, g);
        total += groups[g]->u.dict.n;
    }
    if (!(c->params = calloc(total ? total : 1, sizeof *c->params))) return dck_oom(NULL);
    for (size_t g = 0; g < ng; g++)
        for (size_t i = 0; i < groups[g]->u.dict.n; i++) {
            ds_param *p = &c->params[c->nparams];
            const pk_node *k = groups[g]->u.dict.keys[i];
            if (k->kind != PK_STR)
                return dck_set_error(DCK_ERR_FORMAT, "%s: param_shapes[%zu]: a key is not a string", path, g);
            if (!shape_of(groups[g]->u.dict.vals[i], p))
                return dck_set_error(DCK_ERR_FORMAT,
                                     "%s: param_shapes[%zu]: %s is not a shape of at most %d dimensions",
                                     path, g, k->u.s.p, DCK_MAX_DIMS - 1);
            p->name = k->u.s.p;
            p->group = g;
            c->nparams++;
        }
    *ngroups = ng;
    return DCK_OK;
}

/* ------------------------------------------------------------------ placing pieces */

static long sfind(const ds_ctx *c, size_t fi, const char *path) {
    char name[NAME_MAX_LEN];
    if ((size_t)snprintf(name, sizeof name, "%s.%s", c->files[fi].stem, path) >= sizeof name) return -1;
    return dck_checkpoint_find(c->scr, name);
}

/* The flat (1-D, contiguous) tensor at path of file fi. */
static dck_status flat_of(ds_ctx *c, size_t fi, const char *path, ds_flat *out) {
    long ti = sfind(c, fi, path);
    if (ti < 0) return dck_set_error(DCK_ERR_FORMAT, "%s: no tensor %s", fpath(c, fi), path);
    const dck_tensor_entry *t = &c->scr->tensors[ti];
    if (t->info.ndim != 1 || t->npieces != 1 || t->pieces[0].strides)
        return dck_set_error(DCK_ERR_FORMAT, "%s: %s is not a flat contiguous tensor", fpath(c, fi), path);
    c->used[ti] = 1;
    *out = (ds_flat){c->fmap[t->pieces[0].file], t->pieces[0].file_offset, t->info.shape[0], t->info.dtype,
                     t->pieces[0].byteswap};
    return DCK_OK;
}

/* Elements [s, s + n) (row-major) of tensor name of shape p, stored
 * contiguously from element e of f: one piece per hyperrectangle (fixed
 * indices before some dimension d, a range along d, whole after it). */
static dck_status place(dck_checkpoint *ck, const char *name, const ds_param *p, const ds_flat *f, uint64_t e,
                        uint64_t s, uint64_t n) {
    size_t es = dck_dtype_size(f->dt);
    dck_piece q;
    memset(&q, 0, sizeof q);
    q.file = f->file;
    q.byteswap = f->bs;
    if (p->numel == 0 || p->nd == 0) { /* all of it, or nothing, in one piece */
        q.file_offset = f->off + e * es;
        for (int d = 0; d < p->nd; d++) q.shape[d] = p->shape[d];
        return dck_ck_add_piece(ck, name, f->dt, p->shape, p->nd, &q);
    }
    uint64_t inner[DCK_MAX_DIMS];
    inner[p->nd - 1] = 1;
    for (int d = p->nd - 2; d >= 0; d--) inner[d] = inner[d + 1] * p->shape[d + 1];
    for (uint64_t pos = s, end = s + n; pos < end;) {
        int d = p->nd - 1;
        for (int k = 0; k < p->nd; k++)
            if (pos % inner[k] == 0 && end - pos >= inner[k]) {
                d = k;
                break;
            }
        uint64_t at = (pos / inner[d]) % p->shape[d], k = (end - pos) / inner[d];
        if (k > p->shape[d] - at) k = p->shape[d] - at;
        q.file_offset = f->off + (e + pos - s) * es;
        for (int x = 0; x < p->nd; x++) {
            q.offset[x] = x < d ? (pos / inner[x]) % p->shape[x] : x == d ? at : 0;
            q.shape[x] = x < d ? 1 : x == d ? k : p->shape[x];
        }
        DCK_TRY(dck_ck_add_piece(ck, name, f->dt, p->shape, p->nd, &q));
        pos += k * inner[d];
    }
    return DCK_OK;
}

static dck_status state_name(char *buf, size_t n, const char *kind, const char *param) {
    if ((size_t)snprintf(buf, n, "optimizer.state.%s.%s", kind, param) >= n)
        return dck_set_error(DCK_ERR_LIMIT, "parameter name %.60s...: too long", param);
    return DCK_OK;
}

/* Copies scratch tensor ti into ck as name (pieces, strides duplicated). */
static dck_status move_tensor(ds_ctx *c, long ti, const char *name) {
    const dck_tensor_entry *t = &c->scr->tensors[ti];
    for (size_t i = 0; i < t->npieces; i++) {
        dck_piece q = t->pieces[i];
        q.file = c->fmap[q.file];
        if (q.strides) {
            int64_t *st = malloc(sizeof *st * (size_t)(t->info.ndim ? t->info.ndim : 1));
            if (!st) return dck_oom(NULL);
            memcpy(st, q.strides, sizeof *st * (size_t)t->info.ndim);
            q.strides = st;
        }
        dck_status s = dck_ck_add_piece(c->ck, name, t->info.dtype, t->info.shape, t->info.ndim, &q);
        if (s) {
            free(q.strides);
            return s;
        }
    }
    c->used[ti] = 1;
    return DCK_OK;
}

/* Copies tensor `from` of ck (contiguous pieces) as `to`: a shared
 * parameter under its second name. */
static dck_status alias(dck_checkpoint *ck, const char *from, const char *to) {
    long i = dck_checkpoint_find(ck, from);
    if (i < 0) return DCK_OK;
    size_t n = ck->tensors[i].npieces;
    dck_piece *v = malloc(sizeof *v * (n ? n : 1));
    if (!v) return dck_oom(NULL);
    memcpy(v, ck->tensors[i].pieces, sizeof *v * n);
    dck_tensor_info info = ck->tensors[i].info;
    dck_status s = DCK_OK;
    for (size_t k = 0; k < n && !s; k++)
        s = v[k].strides ? dck_set_error(DCK_ERR_UNSUPPORTED, "tensor %s: strided shared parameter", from)
                         : dck_ck_add_piece(ck, to, info.dtype, info.shape, info.ndim, &v[k]);
    free(v);
    return s;
}

/* ------------------------------------------------------------------ the optimizer state */

/* One kind of per-group state: a flat tensor per rank (exp_avg), or a
 * scalar per group (step). */
typedef struct {
    const char *key;
    bool scalar;
} ds_state_key;

/* The state keys of group g (rank 0's), and where the state dicts are. */
static const pk_node *group_state(const pk_node *osd, int64_t stage, size_t g) {
    const pk_node *base = dck_pk_get(osd, stage <= 2 ? "base_optimizer_state" : "optimizer_state_dict");
    return get_index(dck_pk_get(base, "state"), (int64_t)g);
}

static const char *state_path(char *buf, size_t n, int64_t stage, size_t g, const char *key) {
    snprintf(buf, n, "optimizer_state_dict.%s.state.%zu.%s",
             stage <= 2 ? "base_optimizer_state" : "optimizer_state_dict", g, key);
    return buf;
}

static const char *flat_path(char *buf, size_t n, int64_t stage, size_t g) {
    snprintf(buf, n, "optimizer_state_dict.%s.%zu", stage <= 2 ? "single_partition_of_fp32_groups" : "fp32_flat_groups",
             g);
    return buf;
}

/* The keys of a group's state dict: tensors whose per-rank length is the
 * partition's (flat state), or of one element (per-group scalars). Others
 * stay under their file's names. */
static dck_status state_keys(ds_ctx *c, const pk_node *st, size_t g, const uint64_t *len, ds_state_key **out,
                             size_t *nk) {
    *out = NULL;
    *nk = 0;
    if (!st) return DCK_OK;
    if (st->kind != PK_DICT)
        return dck_set_error(DCK_ERR_FORMAT, "%s: optimizer state of group %zu is not a dict",
                             fpath(c, c->optim[0]), g);
    if (!(*out = calloc(st->u.dict.n + 1, sizeof **out))) return dck_oom(NULL);
    char path[NAME_MAX_LEN];
    for (size_t i = 0; i < st->u.dict.n; i++) {
        const pk_node *k = st->u.dict.keys[i], *v = st->u.dict.vals[i];
        if (k->kind != PK_STR || v->kind != PK_TENSOR) continue;
        long ti = sfind(c, c->optim[0], state_path(path, sizeof path, c->stage, g, k->u.s.p));
        if (ti < 0) continue;
        const dck_tensor_info *t = &c->scr->tensors[ti].info;
        uint64_t numel = 1;
        for (int d = 0; d < t->ndim; d++) numel *= t->shape[d];
        if (t->ndim == 1 && numel == len[0]) (*out)[(*nk)++] = (ds_state_key){k->u.s.p, false};
        else if (numel == 1) (*out)[(*nk)++] = (ds_state_key){k->u.s.p, true};
    }
    return DCK_OK;
}

/* A per-group scalar: rank 0's tensor, the same bytes on every rank. */
static dck_status group_scalar(ds_ctx *c, size_t g, const char *key, long *ti0) {
    char path[NAME_MAX_LEN];
    state_path(path, sizeof path, c->stage, g, key);
    *ti0 = -1;
    uint8_t a[16], b[16];
    for (size_t r = 0; r < c->world; r++) {
        long ti = sfind(c, c->optim[r], path);
        if (ti < 0)
            return dck_set_error(DCK_ERR_FORMAT, "%s: no tensor %s (rank 0 has it)", fpath(c, c->optim[r]), path);
        const dck_tensor_entry *t = &c->scr->tensors[ti], *t0 = r ? &c->scr->tensors[*ti0] : t;
        if (t->info.nbytes > sizeof a || t->info.dtype != t0->info.dtype || t->info.nbytes != t0->info.nbytes)
            return dck_set_error(DCK_ERR_FORMAT, "%s: %s differs in dtype or size from rank 0's",
                                 fpath(c, c->optim[r]), path);
        c->used[ti] = 1;
        if (!r) {
            *ti0 = ti;
            DCK_TRY(dck_checkpoint_read(c->scr, (size_t)ti, 0, a, (size_t)t->info.nbytes));
            continue;
        }
        DCK_TRY(dck_checkpoint_read(c->scr, (size_t)ti, 0, b, (size_t)t->info.nbytes));
        if (memcmp(a, b, (size_t)t->info.nbytes))
            return dck_set_error(DCK_ERR_FORMAT, "%s: %s differs from rank 0's (%s)", fpath(c, c->optim[r]), path,
                                 fpath(c, c->optim[0]));
    }
    return DCK_OK;
}

/* Flat tensors of every rank for group g at path (fp32 partition or a
 * state key), checked against the partition lengths len (NULL: set them). */
static dck_status rank_flats(ds_ctx *c, const char *path, uint64_t *len, bool set, ds_flat *out) {
    for (size_t r = 0; r < c->world; r++) {
        DCK_TRY(flat_of(c, c->optim[r], path, &out[r]));
        if (set) len[r] = out[r].n;
        else if (out[r].n != len[r])
            return dck_set_error(DCK_ERR_FORMAT,
                                 "%s: %s has %llu elements, DeepSpeed's partition of param_shapes %llu "
                                 "(inconsistent partition sizes)",
                                 fpath(c, c->optim[r]), path, (unsigned long long)out[r].n, (unsigned long long)len[r]);
        if (out[r].dt != out[0].dt)
            return dck_set_error(DCK_ERR_FORMAT, "%s: %s is %s, rank 0's %s", fpath(c, c->optim[r]), path,
                                 dck_dtype_name(out[r].dt), dck_dtype_name(out[0].dt));
    }
    return DCK_OK;
}

/* A shape as text, "[7, 11]". */
static const char *shape_text(char *buf, size_t n, const uint64_t *shape, int nd) {
    size_t at = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < nd && at < n; d++)
        at += (size_t)snprintf(buf + at, n - at, "%s%llu", d ? ", " : "", (unsigned long long)shape[d]);
    if (at < n) snprintf(buf + at, n - at, "]");
    return buf;
}

/* ZeRO-1/2 save the module whole: every parameter of param_shapes (and of
 * frozen_param_shapes) is a module tensor of that shape. A shape that
 * differs would cut the partitions wrongly, real elements taken for
 * padding or padding for elements; it is refused. The module tensor's
 * element size is the one DeepSpeed's parameter alignment uses. */
static dck_status module_shapes(ds_ctx *c) {
    const char *mpath = fpath(c, c->model);
    char path[NAME_MAX_LEN], a[256], b[256];
    const pk_node *frozen = dck_pk_get(c->files[c->model].root, "frozen_param_shapes");
    size_t nfrozen = !none(frozen) && frozen->kind == PK_DICT ? frozen->u.dict.n : 0;
    for (size_t i = 0; i < c->nparams + nfrozen; i++) {
        ds_param fp = {0}, *p = i < c->nparams ? &c->params[i] : &fp;
        const char *list = i < c->nparams ? "param_shapes" : "frozen_param_shapes";
        if (i >= c->nparams) {
            const pk_node *k = frozen->u.dict.keys[i - c->nparams];
            if (k->kind != PK_STR || !shape_of(frozen->u.dict.vals[i - c->nparams], &fp))
                return dck_set_error(DCK_ERR_FORMAT, "%s: frozen_param_shapes: entry %zu is not a name and a shape",
                                     mpath, i - c->nparams);
            fp.name = k->u.s.p;
        }
        snprintf(path, sizeof path, "module.%s", p->name);
        long ti = sfind(c, c->model, path);
        if (ti < 0)
            return dck_set_error(DCK_ERR_FORMAT, "%s: %s names %s, which the module's state dict lacks", mpath, list,
                                 p->name);
        const dck_tensor_info *t = &c->scr->tensors[ti].info;
        if (t->ndim != p->nd || memcmp(t->shape, p->shape, sizeof *p->shape * (size_t)p->nd))
            return dck_set_error(DCK_ERR_FORMAT, "%s: %s says %s is %s, the module's tensor is %s", mpath, list,
                                 p->name, shape_text(a, sizeof a, p->shape, p->nd),
                                 shape_text(b, sizeof b, t->shape, t->ndim));
        p->esize = dck_dtype_size(t->dtype);
    }
    return DCK_OK;
}

/* The element alignment DeepSpeed may have used between parameters
 * (stage_1_and_2.py: 1, or 16 bytes' worth with parameter_alignment):
 * true when pad[i] is (-end of parameter i) % a for every parameter but
 * the last, whose entry is 0, with one of them. */
static bool deepspeed_alignment(const ds_param *p, size_t np, const uint64_t *pad) {
    uint64_t g = 16, e = p[0].esize; /* 16 / gcd(16, element size) */
    while (e) {
        uint64_t t = g % e;
        g = e;
        e = t;
    }
    uint64_t aligns[2] = {1, 16 / g};
    for (size_t k = 0; k < 2; k++) {
        uint64_t off = 0, a = aligns[k];
        bool ok = true;
        for (size_t i = 0; i < np && ok; i++) {
            off += p[i].numel;
            uint64_t want = i + 1 == np ? 0 : (a - off % a) % a;
            ok = pad[i] == want;
            off += want;
        }
        if (ok) return true;
    }
    return false;
}

/* ZeRO-1/2, group g, laid out as DeepSpeed lays it out (stage_1_and_2.py,
 * bf16_optimizer.py): the parameters p[0..np) in param_shapes order, each
 * followed by its param_alignment_paddings entry (P elements in all); the
 * group padded to T = P rounded up to 2 x ranks and cut into partitions of
 * S = T / ranks, rank r's covering [r*S, (r+1)*S). Its group_paddings entry
 * is what of it lies beyond P (ZeroOptimizer), or T - P on the last rank
 * (BF16_Optimizer). The fp32 partition is saved without that padding by
 * ZeroOptimizer, whole by BF16_Optimizer; the optimizer state whole. Every
 * length is checked against these numbers: padding is what this
 * bookkeeping says, never what is left over. */
static dck_status zero12_group(ds_ctx *c, size_t g, const ds_param *p, size_t np, const pk_node *pad) {
    const char *opath = fpath(c, c->optim[0]);
    size_t npad = 0;
    pk_node **pads = none(pad) ? NULL : dck_pk_items(pad, &npad);
    if (!none(pad) && (!pads || npad != np))
        return dck_set_error(DCK_ERR_FORMAT,
                             "%s: param_alignment_paddings of group %zu: %zu entries for %zu parameters",
                             opath, g, npad, np);
    uint64_t *len = calloc(c->world, sizeof *len), *slen = calloc(c->world, sizeof *slen);
    uint64_t *pv = calloc(np + 1, sizeof *pv);
    ds_flat *fl = calloc(c->world, sizeof *fl);
    ds_state_key *keys = NULL;
    size_t nk = 0;
    char path[NAME_MAX_LEN], name[NAME_MAX_LEN];
    dck_status s = len && slen && pv && fl ? DCK_OK : dck_oom(NULL);
    uint64_t padded = 0, unpadded = 0, w = c->world;
    for (size_t i = 0; i < np && !s; i++) {
        int64_t v = 0;
        if (pads && (!dck_pk_int(pads[i], &v) || v < 0 || v > (int64_t)(UINT32_MAX)))
            s = dck_set_error(DCK_ERR_FORMAT, "%s: param_alignment_paddings of group %zu: entry %zu is not a size",
                              opath, g, i);
        pv[i] = (uint64_t)v;
        if (!s && (__builtin_add_overflow(padded, p[i].numel + pv[i], &padded) || padded > (UINT64_MAX >> 8)))
            s = dck_set_error(DCK_ERR_LIMIT, "%s: group %zu: parameters of more than 2^56 elements", opath, g);
        unpadded += p[i].numel;
    }
    if (!s && np && pads && !deepspeed_alignment(p, np, pv))
        s = dck_set_error(DCK_ERR_FORMAT, "%s: param_alignment_paddings of group %zu are not DeepSpeed's alignment "
                          "of the parameters of param_shapes (%s)", opath, g, fpath(c, c->model));
    uint64_t total = (padded + 2 * w - 1) / (2 * w) * (2 * w), part = total / w;
    /* rank r's group_paddings entry, and the lengths of its fp32 partition
     * (len) and of its optimizer state (slen) */
    for (size_t r = 0; r < c->world && !s; r++) {
        uint64_t lo = r * part, held = padded <= lo ? 0 : padded - lo < part ? padded - lo : part;
        uint64_t gpad = c->bf16_optimizer ? (r + 1 == w ? total - unpadded : 0) : part - held;
        len[r] = c->bf16_optimizer ? part : held;
        slen[r] = part;
        const pk_node *gp = dck_pk_get(dck_pk_get(c->files[c->optim[r]].root, "optimizer_state_dict"),
                                       "group_paddings");
        size_t ngp;
        pk_node **gps = dck_pk_items(gp, &ngp);
        int64_t have;
        if (none(gp)) continue; /* older writers: the numbers above still hold */
        if (!gps || ngp <= g || !dck_pk_int(gps[g], &have) || have < 0 || (uint64_t)have != gpad)
            s = dck_set_error(DCK_ERR_FORMAT, "%s: group_paddings of group %zu is not %llu, the padding of rank %zu's "
                              "partition of %llu elements when the parameters of param_shapes (%s) take %llu "
                              "(inconsistent partition sizes)", fpath(c, c->optim[r]), g, (unsigned long long)gpad,
                              r, (unsigned long long)part, fpath(c, c->model), (unsigned long long)padded);
    }
    if (!s) s = rank_flats(c, flat_path(path, sizeof path, c->stage, g), len, false, fl);
    const pk_node *osd = dck_pk_get(c->files[c->optim[0]].root, "optimizer_state_dict");
    if (!s) s = state_keys(c, group_state(osd, c->stage, g), g, slen, &keys, &nk);
    /* where each parameter is: the kinds are placed one after the other */
    for (size_t k = 0; k <= nk && !s; k++) {
        const char *kind = k ? keys[k - 1].key : "fp32_param";
        long scalar = -1;
        if (k && keys[k - 1].scalar) s = group_scalar(c, g, kind, &scalar);
        else if (k) s = rank_flats(c, state_path(path, sizeof path, c->stage, g, kind), slen, false, fl);
        uint64_t off = 0;
        for (size_t i = 0; i < np && !s; i++) {
            if ((s = state_name(name, sizeof name, kind, p[i].name))) break;
            if (scalar >= 0) {
                s = move_tensor(c, scalar, name);
                continue;
            }
            if (p[i].numel == 0) s = place(c->ck, name, &p[i], &fl[0], 0, 0, 0);
            for (size_t r = 0; r < c->world && !s; r++) {
                uint64_t start = r * part, end = off + p[i].numel, lo = off > start ? off : start;
                uint64_t hi = end < start + part ? end : start + part;
                if (lo < hi) s = place(c->ck, name, &p[i], &fl[r], lo - start, lo - off, hi - lo);
            }
            off += p[i].numel + pv[i];
        }
    }
    free(len);
    free(slen);
    free(pv);
    free(fl);
    free(keys);
    return s;
}

/* The name of tensor name's padding: the elements that DeepSpeed's
 * partitions hold beyond the size param_shapes gives it. */
static dck_status padding_name(char *buf, size_t n, const char *name) {
    if ((size_t)snprintf(buf, n, "deepspeed.zero3_padding.%s", name) >= n)
        return dck_set_error(DCK_ERR_LIMIT, "tensor name %.60s...: too long", name);
    return DCK_OK;
}

/* ZeRO-3: elements [lo, hi) of rank r's part of a parameter (at offset o of
 * the rank's flat groups, in group g0 or later; cum[g] where group g
 * starts) as elements [at, at + hi - lo) of tensor name of shape p. */
static dck_status zero3_span(ds_ctx *c, const char *name, const ds_param *p, const ds_flat *fl, const uint64_t *cum,
                             size_t g0, size_t ngroups, size_t r, uint64_t o, uint64_t lo, uint64_t hi, uint64_t at) {
    for (size_t g = g0; g < ngroups && cum[g] < o + hi; g++) {
        uint64_t a = o + lo > cum[g] ? o + lo : cum[g], b = o + hi < cum[g + 1] ? o + hi : cum[g + 1];
        if (a < b) DCK_TRY(place(c->ck, name, p, &fl[g * c->world + r], a - cum[g], at + (a - o - lo), b - a));
    }
    return DCK_OK;
}

/* ZeRO-3: every parameter cut into world equal parts (the last padded),
 * part r at the same offset of rank r's flat groups. Nothing in the
 * checkpoint but param_shapes says where a parameter ends and its padding
 * begins (the module holds empty placeholders, the flat groups only add
 * up), so the moments' padding is reported, compared, as
 * deepspeed.zero3_padding.NAME: DeepSpeed keeps it zero (the gradients'
 * padding is), and a param_shapes that makes real elements padding shows
 * there. The fp32 partition's padding is torch.empty's, different in two
 * identical runs: it is never digested, as at ZeRO-1/2. */
static dck_status zero3_params(ds_ctx *c, size_t ngroups) {
    const char *opath = fpath(c, c->optim[0]);
    uint64_t *cum = calloc(ngroups + 1, sizeof *cum), *len = calloc(c->world, sizeof *len);
    ds_flat *fl = calloc(c->world * (ngroups ? ngroups : 1), sizeof *fl);
    ds_state_key *keys = NULL;
    size_t nk = 0;
    char path[NAME_MAX_LEN], name[NAME_MAX_LEN], pname[NAME_MAX_LEN];
    dck_status s = cum && len && fl ? DCK_OK : dck_oom(NULL);
    /* the groups: the same lengths on every rank */
    for (size_t g = 0; g < ngroups && !s; g++) {
        s = rank_flats(c, flat_path(path, sizeof path, c->stage, g), len, true, fl + g * c->world);
        for (size_t r = 1; r < c->world && !s; r++)
            if (len[r] != len[0])
                s = dck_set_error(DCK_ERR_FORMAT,
                                  "%s: %s has %llu elements, rank 0's %llu (inconsistent partition sizes)",
                                  fpath(c, c->optim[r]), path, (unsigned long long)len[r], (unsigned long long)len[0]);
        cum[g + 1] = cum[g] + len[0];
    }
    if (!s && ngroups) {
        uint64_t l0 = cum[1];
        len[0] = l0;
        s = state_keys(c, group_state(dck_pk_get(c->files[c->optim[0]].root, "optimizer_state_dict"), c->stage, 0), 0,
                       len, &keys, &nk);
    }
    for (size_t k = 0; k <= nk && !s; k++) {
        const char *kind = k ? keys[k - 1].key : "fp32_param";
        bool scalar = k && keys[k - 1].scalar;
        long *sc = calloc(ngroups + 1, sizeof *sc);
        if (!sc) {
            s = dck_oom(NULL);
            break;
        }
        for (size_t g = 0; g < ngroups && !s; g++) {
            if (scalar) {
                s = group_scalar(c, g, kind, &sc[g]);
                continue;
            }
            for (size_t r = 0; r < c->world; r++) len[r] = cum[g + 1] - cum[g];
            if (k) s = rank_flats(c, state_path(path, sizeof path, c->stage, g, kind), len, false, fl + g * c->world);
        }
        uint64_t o = 0;
        for (size_t i = 0; i < c->nparams && !s; i++) {
            const ds_param *p = &c->params[i];
            uint64_t part = (p->numel + c->world - 1) / c->world;
            if (part > cum[ngroups] - o) {
                s = dck_set_error(DCK_ERR_FORMAT, "%s: parameter %s needs elements [%llu, %llu) of each rank's flat "
                                  "groups, which hold %llu (partitions and param_shapes do not add up)",
                                  opath, p->name, (unsigned long long)o, (unsigned long long)(o + part),
                                  (unsigned long long)cum[ngroups]);
                break;
            }
            if ((s = state_name(name, sizeof name, kind, p->name))) break;
            size_t g0 = 0;
            while (g0 + 1 < ngroups && cum[g0 + 1] <= o) g0++;
            if (scalar) {
                s = move_tensor(c, sc[g0], name);
                o += part;
                continue;
            }
            if (p->numel == 0) s = place(c->ck, name, p, &fl[g0 * c->world], 0, 0, 0);
            /* rank r's part: its elements of the parameter, then what
             * param_shapes makes padding, which goes to the padding tensor */
            ds_param pp = {.nd = 1, .shape = {part * c->world - p->numel}, .numel = part * c->world - p->numel};
            if (!k) pp.numel = 0; /* fp32_param: torch.empty's */
            if (!s && pp.numel) s = padding_name(pname, sizeof pname, name);
            for (size_t r = 0; r < c->world && !s; r++) {
                uint64_t real = p->numel > r * part ? p->numel - r * part : 0;
                if (real > part) real = part;
                s = zero3_span(c, name, p, fl, cum, g0, ngroups, r, o, 0, real, r * part);
                if (!s && pp.numel)
                    s = zero3_span(c, pname, &pp, fl, cum, g0, ngroups, r, o, real, part, r * part + real - p->numel);
            }
            o += part;
        }
        if (!s && o != cum[ngroups])
            s = dck_set_error(DCK_ERR_FORMAT, "%s: the parameters take %llu elements of the %llu each rank's flat "
                              "groups hold (inconsistent partition sizes)", opath, (unsigned long long)o,
                              (unsigned long long)cum[ngroups]);
        free(sc);
    }
    free(cum);
    free(len);
    free(fl);
    free(keys);
    return s;
}

/* ZeRO-3: the weights are the fp32 partitions, the only whole copy saved
 * (module holds empty placeholders). The first piece, an empty one in the
 * model file, keeps them in the weights group (a tensor takes the group of
 * the file its first piece lies in, and *_optim_states.pt is optimizer
 * state). */
static dck_status zero3_weights(ds_ctx *c) {
    char name[NAME_MAX_LEN], path[NAME_MAX_LEN];
    for (size_t i = 0; i < c->nparams; i++) {
        const ds_param *p = &c->params[i];
        snprintf(path, sizeof path, "module.%s", p->name);
        long ph = sfind(c, c->model, path);
        if (ph >= 0) c->used[ph] = 1;
        DCK_TRY(state_name(name, sizeof name, "fp32_param", p->name));
        long fi = dck_checkpoint_find(c->ck, name);
        if (fi < 0) continue;
        if (ph >= 0 && p->nd > 0 && c->scr->tensors[ph].npieces) {
            dck_piece q;
            memset(&q, 0, sizeof q);
            q.file = c->fmap[c->scr->tensors[ph].pieces[0].file];
            q.file_offset = c->scr->tensors[ph].pieces[0].file_offset;
            for (int d = 1; d < p->nd; d++) q.shape[d] = p->shape[d];
            DCK_TRY(dck_ck_add_piece(c->ck, path, c->ck->tensors[fi].info.dtype, p->shape, p->nd, &q));
        }
        DCK_TRY(alias(c->ck, name, path));
    }
    return DCK_OK;
}

/* ZeRO-3 frozen parameters: the ranks' fragments concatenated, cut to the
 * parameter's size (what they hold beyond it is torch.empty's padding,
 * never digested; the fragments must hold the whole parameter). */
static dck_status zero3_frozen(ds_ctx *c, const pk_node *shapes) {
    if (none(shapes) || shapes->kind != PK_DICT) return DCK_OK;
    char path[NAME_MAX_LEN], name[NAME_MAX_LEN];
    ds_flat *f = calloc(c->world, sizeof *f);
    dck_status s = f ? DCK_OK : dck_oom(NULL);
    for (size_t i = 0; i < shapes->u.dict.n && !s; i++) {
        const pk_node *k = shapes->u.dict.keys[i];
        ds_param p = {0};
        if (k->kind != PK_STR || !shape_of(shapes->u.dict.vals[i], &p)) {
            s = dck_set_error(DCK_ERR_FORMAT, "%s: frozen_param_shapes: entry %zu is not a name and a shape",
                              fpath(c, c->model), i);
            break;
        }
        p.name = k->u.s.p;
        snprintf(name, sizeof name, "module.%s", p.name);
        long ph = sfind(c, c->model, name);
        if (ph >= 0) c->used[ph] = 1;
        snprintf(path, sizeof path, "frozen_param_fragments.%s", p.name);
        uint64_t held = 0;
        for (size_t r = 0; r < c->world && !s; r++) {
            s = flat_of(c, c->zmodel[r], path, &f[r]);
            held += s ? 0 : f[r].n;
        }
        /* each rank a fragment of ceil(numel / ranks), as DeepSpeed cuts it */
        uint64_t part = (p.numel + c->world - 1) / c->world;
        if (!s && held != part * c->world)
            s = dck_set_error(DCK_ERR_FORMAT, "%s: frozen parameter %s of %llu elements: the ranks' fragments hold "
                              "%llu, not %zu x %llu", fpath(c, c->model), p.name, (unsigned long long)p.numel,
                              (unsigned long long)held, c->world, (unsigned long long)part);
        if (!s && !p.numel) s = place(c->ck, name, &p, &f[0], 0, 0, 0);
        for (uint64_t r = 0, at = 0; r < c->world && !s; r++) {
            uint64_t cnt = f[r].n < p.numel - at ? f[r].n : p.numel - at;
            if (cnt) s = place(c->ck, name, &p, &f[r], 0, at, cnt);
            at += cnt;
        }
    }
    free(f);
    return s;
}

/* ------------------------------------------------------------------ values */

/* Renames of the model file's values (names without the file's stem):
 * NULL drops (structure this reader has read: the shapes are the tensors'),
 * a name under deepspeed.layout. marks what describes the layout. */
static const struct {
    const char *from, *to;
} model_values[] = {
    {"param_shapes", NULL},
    {"frozen_param_shapes", NULL},
    {"frozen_param_fragments", NULL},
    {"shared_params", NULL},
    {"buffer_names", NULL},
    {"dp_world_size", "deepspeed.layout.dp_world_size"},
    {"mp_world_size", "deepspeed.layout.mp_world_size"},
    {"checkpoint_parallel_dimensions", "deepspeed.layout.checkpoint_parallel_dimensions"},
    /* samples of every data-parallel rank: grows with their number */
    {"global_samples", "deepspeed.layout.global_samples"},
    {"ds_config.zero_optimization", "deepspeed.layout.ds_config.zero_optimization"},
    {"ds_config.train_batch_size", "deepspeed.layout.ds_config.train_batch_size"},
};

/* Values of rank 0's optimizer file (names without its stem and
 * `optimizer_state_dict.`; the universal zero/optimizer_state.pt has them
 * at its root). Any other is dropped: layout bookkeeping (group_paddings,
 * param_slice_mappings) or a copy of the model file's. */
static const struct {
    const char *from, *to;
} optim_values[] = {
    {"loss_scaler", "optimizer.loss_scaler"},
    {"dynamic_loss_scale", "optimizer.dynamic_loss_scale"},
    {"overflow", "optimizer.overflow"},
    {"clip_grad", "optimizer.clip_grad"},
    {"base_optimizer_state.param_groups", "optimizer.param_groups"}, /* ZeRO-1/2 */
    {"optimizer_state_dict.param_groups", "optimizer.param_groups"}, /* ZeRO-3 */
    {"param_groups", "optimizer.param_groups"},                      /* universal */
    {"partition_count", "deepspeed.layout.partition_count"},
};

/* name == p or name starts with "p.": the rest (after the dot), else NULL. */
static const char *under(const char *name, const char *p) {
    size_t l = strlen(p);
    if (strncmp(name, p, l)) return NULL;
    return name[l] == 0 ? name + l : name[l] == '.' ? name + l + 1 : NULL;
}

static dck_status put_value(dck_checkpoint *ck, const char *to, const char *rest, const char *value) {
    char name[NAME_MAX_LEN];
    snprintf(name, sizeof name, "%s%s%s", to, *rest ? "." : "", rest);
    return dck_ck_add_value(ck, name, value);
}

static dck_status model_value(dck_checkpoint *ck, const char *name, const char *value) {
    for (size_t i = 0; i < sizeof model_values / sizeof model_values[0]; i++) {
        const char *rest = under(name, model_values[i].from);
        if (rest) return model_values[i].to ? put_value(ck, model_values[i].to, rest, value) : DCK_OK;
    }
    return dck_ck_add_value(ck, name, value);
}

static dck_status optim_value(dck_checkpoint *ck, const char *name, const char *value) {
    for (size_t i = 0; i < sizeof optim_values / sizeof optim_values[0]; i++) {
        const char *rest = under(name, optim_values[i].from);
        if (!rest) continue;
        /* param_groups.N.params: the optimizer's indexes of its flat parameters */
        const char *dot = strchr(rest, '.');
        if (!strcmp(optim_values[i].to, "optimizer.param_groups") && dot && under(dot + 1, "params")) return DCK_OK;
        return put_value(ck, optim_values[i].to, rest, value);
    }
    return DCK_OK;
}

/* The scratch values of file fi (names STEM.path) through fn, with prefix
 * (after the stem) stripped; others of the file are dropped. */
static dck_status file_values(ds_ctx *c, size_t fi, const char *prefix,
                              dck_status (*fn)(dck_checkpoint *, const char *, const char *)) {
    size_t sl = strlen(c->files[fi].stem), pl = strlen(prefix);
    for (size_t i = 0; i < c->scr->nvalues; i++) {
        const char *n = c->scr->values[i].name;
        if (strncmp(n, c->files[fi].stem, sl) || n[sl] != '.' || strncmp(n + sl + 1, prefix, pl)) continue;
        DCK_TRY(fn(c->ck, n + sl + 1 + pl, c->scr->values[i].value));
    }
    return DCK_OK;
}

/* The zero stage and the writer's version, as values. */
static dck_status structure_values(ds_ctx *c, const pk_node *osd) {
    char buf[64];
    int64_t st;
    if (int_of(dck_pk_get(osd, "zero_stage"), &st)) {
        snprintf(buf, sizeof buf, "%lld", (long long)st);
        DCK_TRY(dck_ck_add_value(c->ck, "deepspeed.layout.zero_stage", buf));
    }
    const pk_node *v = dck_pk_get(c->files[c->model].root, "ds_version");
    if (v && v->kind == PK_STR) DCK_TRY(dck_ck_add_value(c->ck, "deepspeed.ds_version", v->u.s.p));
    return DCK_OK;
}

/* ------------------------------------------------------------------ opening */

/* Moves the scratch files into ck (every file read is a file of the
 * checkpoint, for verify --files). */
static dck_status move_files(ds_ctx *c) {
    if (!(c->fmap = calloc(c->scr->nfiles + 1, sizeof *c->fmap))) return dck_oom(NULL);
    for (size_t i = 0; i < c->scr->nfiles; i++) {
        dck_status s = dck_ck_add_file(c->ck, c->scr->files[i], &c->fmap[i]);
        if (s) return s;
        c->nmoved = i + 1;
    }
    return DCK_OK;
}

/* What is left of the scratch tensors: the model file's under their names
 * without its stem (module.NAME, lr_scheduler...), other files' under
 * their full scratch names (tensors this reader does not know, per file). */
static dck_status rest_tensors(ds_ctx *c, bool drop_zmodels) {
    size_t sl = strlen(c->files[c->model].stem);
    for (size_t ti = 0; ti < c->scr->ntensors; ti++) {
        if (c->used[ti]) continue;
        const char *n = c->scr->tensors[ti].info.name;
        uint32_t f = c->scr->tensors[ti].npieces ? c->scr->tensors[ti].pieces[0].file : UINT32_MAX;
        bool model = !strncmp(n, c->files[c->model].stem, sl) && n[sl] == '.';
        if (model && under(n + sl + 1, "frozen_param_fragments")) continue; /* module holds them (ZeRO-1/2) */
        if (!model && drop_zmodels) {
            bool zm = false; /* ZeRO-3 model files of other ranks: copies of rank 0's buffers */
            for (size_t r = 1; r < c->world && !zm; r++) zm = c->files[c->zmodel[r]].file == f;
            if (zm) continue;
        }
        DCK_TRY(move_tensor(c, (long)ti, model ? n + sl + 1 : n));
    }
    return DCK_OK;
}

static dck_status open_zero(ds_ctx *c) {
    char **names = NULL;
    size_t n = 0;
    dck_status s = dck_list_dir(c->dir, true, &names, &n);
    if (s) return s;
    size_t model = SIZE_MAX;
    unsigned long maxr = 0;
    bool any = false;
    for (size_t i = 0; i < n && !s; i++) {
        unsigned long r, mp;
        ds_kind k = file_kind(names[i], &r, &mp);
        if (k == F_PIPE)
            s = dck_set_error(DCK_ERR_UNSUPPORTED, "%s/%s: a pipeline-parallel DeepSpeed checkpoint (layer files); "
                              "detcheck reads ZeRO checkpoints without pipeline stages", c->dir, names[i]);
        else if ((k == F_MODEL || k == F_OPTIM || k == F_ZMODEL) && mp != 0)
            s = dck_set_error(DCK_ERR_UNSUPPORTED, "%s/%s: model-parallel rank %lu; detcheck reads DeepSpeed "
                              "checkpoints of one model-parallel rank (mp_rank_00)", c->dir, names[i], mp);
        else if (k == F_UNKNOWN && dck_has_suffix(names[i], ".pt"))
            s = dck_set_error(DCK_ERR_UNSUPPORTED, "%s/%s: a .pt file detcheck does not know in a DeepSpeed "
                              "checkpoint", c->dir, names[i]);
        else if (k == F_OPTIM || k == F_ZMODEL) {
            if (r >= MAX_RANKS) s = dck_set_error(DCK_ERR_LIMIT, "%s/%s: rank above %u", c->dir, names[i], MAX_RANKS);
            if (r + 1 > maxr) maxr = r + 1;
            any = true;
        }
    }
    if (!s && !any) s = dck_set_error(DCK_ERR_FORMAT, "%s: no *_optim_states.pt files", c->dir);
    if (!s && (!(c->optim = malloc(maxr * sizeof *c->optim)) || !(c->zmodel = malloc(maxr * sizeof *c->zmodel))))
        s = dck_oom(NULL);
    for (size_t r = 0; !s && r < maxr; r++) c->optim[r] = c->zmodel[r] = SIZE_MAX;
    for (size_t i = 0; i < n && !s; i++) {
        unsigned long r, mp;
        ds_kind k = file_kind(names[i], &r, &mp);
        if (k != F_MODEL && k != F_OPTIM && k != F_ZMODEL) continue;
        size_t *slot = k == F_MODEL ? &model : k == F_OPTIM ? &c->optim[r] : &c->zmodel[r];
        if (*slot != SIZE_MAX) {
            s = dck_set_error(DCK_ERR_FORMAT, "%s: %s and %s are the same rank's file", c->dir, c->files[*slot].name,
                              names[i]);
            break;
        }
        *slot = c->nfiles;
        s = add_file(c, names[i]);
    }
    dck_strv_free(names, n);
    if (s) return s;
    c->world = maxr;
    if (c->optim[0] == SIZE_MAX)
        return dck_set_error(DCK_ERR_FORMAT, "%s: zero_pp_rank_0_mp_rank_00_optim_states.pt is missing", c->dir);
    if ((s = load_tree(c, c->optim[0]))) return s;
    const pk_node *osd = dck_pk_get(c->files[c->optim[0]].root, "optimizer_state_dict");
    const char *o0 = fpath(c, c->optim[0]);
    /* BF16_Optimizer (ZeRO-1 in bf16 with fp32 gradient accumulation) writes
     * no zero_stage; its files are named bf16_zero_pp_rank_* */
    c->bf16_optimizer = none(dck_pk_get(osd, "zero_stage")) && !strncmp(c->files[c->optim[0]].name, "bf16_", 5) &&
                        !none(dck_pk_get(osd, "single_partition_of_fp32_groups"));
    if (c->bf16_optimizer) c->stage = 1;
    else if (!int_of(dck_pk_get(osd, "zero_stage"), &c->stage) || c->stage < 0 || c->stage > 3)
        return dck_set_error(DCK_ERR_FORMAT, "%s: optimizer_state_dict has no zero_stage of 0 to 3", o0);
    /* partition_count: the number of ranks (a list per group at stages 1/2) */
    const pk_node *pc = dck_pk_get(osd, "partition_count");
    int64_t world = -1, v;
    size_t npc;
    pk_node **pcs = dck_pk_items(pc, &npc);
    if (pcs)
        for (size_t i = 0; i < npc; i++) {
            if (!dck_pk_int(pcs[i], &v) || (world >= 0 && v != world)) {
                world = -2;
                break;
            }
            world = v;
        }
    else if (dck_pk_int(pc, &v))
        world = v;
    if (world < 1 || world > (int64_t)MAX_RANKS)
        return dck_set_error(DCK_ERR_FORMAT, "%s: partition_count is not one rank count of 1 to %u", o0, MAX_RANKS);
    if ((uint64_t)world < c->world)
        return dck_set_error(DCK_ERR_FORMAT, "%s: partition_count %lld, but there are files of rank %zu",
                             o0, (long long)world, c->world - 1);
    c->world = (size_t)world;
    size_t *o = realloc(c->optim, c->world * sizeof *c->optim);
    if (o) c->optim = o;
    size_t *z = o ? realloc(c->zmodel, c->world * sizeof *c->zmodel) : NULL;
    if (z) c->zmodel = z;
    if (!o || !z) return dck_oom(NULL);
    for (size_t r = maxr; r < c->world; r++) c->optim[r] = c->zmodel[r] = SIZE_MAX;
    for (size_t r = 0; r < c->world; r++) {
        if (c->optim[r] == SIZE_MAX)
            return dck_set_error(DCK_ERR_FORMAT, "%s: zero_pp_rank_%zu_mp_rank_00_optim_states.pt is missing "
                                 "(partition_count %zu in %s)", c->dir, r, c->world, o0);
        if (c->stage == 3 && c->zmodel[r] == SIZE_MAX)
            return dck_set_error(DCK_ERR_FORMAT, "%s: zero_pp_rank_%zu_mp_rank_00_model_states.pt is missing "
                                 "(ZeRO-3, partition_count %zu in %s)", c->dir, r, c->world, o0);
    }
    c->model = c->stage == 3 ? c->zmodel[0] : model;
    if (c->model == SIZE_MAX)
        return dck_set_error(DCK_ERR_FORMAT, "%s: mp_rank_00_model_states.pt is missing", c->dir);
    if ((s = load_tree(c, c->model)) || (s = dck_ck_validate(c->scr))) return s;
    if (!(c->used = calloc(c->scr->ntensors + 1, 1))) return dck_oom(NULL);
    if ((s = move_files(c))) return s;
    const pk_node *mroot = c->files[c->model].root;
    size_t ng = 0;
    if ((s = read_params(c, dck_pk_get(mroot, "param_shapes"), fpath(c, c->model), &ng))) return s;
    if (c->stage <= 2) {
        for (size_t r = 1; r < c->world && !s; r++) s = load_tree(c, c->optim[r]); /* their group_paddings */
        if (s || (s = module_shapes(c))) return s;
        const pk_node *pad = dck_pk_get(osd, "param_alignment_paddings");
        size_t npads = 0;
        pk_node **pads = none(pad) ? NULL : dck_pk_items(pad, &npads);
        if (!none(pad) && (!pads || npads != ng))
            return dck_set_error(DCK_ERR_FORMAT, "%s: param_alignment_paddings: %zu groups, param_shapes %zu", o0,
                                 npads, ng);
        size_t nflat;
        if (!dck_pk_items(dck_pk_get(osd, "single_partition_of_fp32_groups"), &nflat) || nflat != ng)
            return dck_set_error(DCK_ERR_FORMAT, "%s: single_partition_of_fp32_groups: not one partition per group of "
                                 "param_shapes (%zu groups)", o0, ng);
        for (size_t g = 0, i = 0; g < ng && !s; g++) {
            size_t j = i;
            while (j < c->nparams && c->params[j].group == g) j++;
            s = zero12_group(c, g, c->params + i, j - i, pads ? pads[g] : NULL);
            i = j;
        }
    } else {
        size_t nflat;
        if (!dck_pk_items(dck_pk_get(osd, "fp32_flat_groups"), &nflat))
            return dck_set_error(DCK_ERR_FORMAT, "%s: no fp32_flat_groups list (ZeRO-3)", o0);
        s = zero3_params(c, nflat);
        if (!s) s = zero3_frozen(c, dck_pk_get(mroot, "frozen_param_shapes"));
        if (!s) s = zero3_weights(c);
    }
    /* shared parameters: one copy saved, reported under both names */
    const pk_node *sh = dck_pk_get(mroot, "shared_params");
    for (size_t i = 0; !s && sh && sh->kind == PK_DICT && i < sh->u.dict.n; i++) {
        const pk_node *a = sh->u.dict.keys[i], *b = sh->u.dict.vals[i];
        if (a->kind != PK_STR || b->kind != PK_STR) continue;
        char fa[NAME_MAX_LEN], fb[NAME_MAX_LEN];
        if ((s = state_name(fa, sizeof fa, "fp32_param", a->u.s.p)) ||
            (s = state_name(fb, sizeof fb, "fp32_param", b->u.s.p)))
            break;
        if (dck_checkpoint_find(c->ck, fa) < 0) s = alias(c->ck, fb, fa);
        if (!s && c->stage == 3) {
            snprintf(fa, sizeof fa, "module.%s", a->u.s.p);
            snprintf(fb, sizeof fb, "module.%s", b->u.s.p);
            long ph = sfind(c, c->model, fa);
            if (ph >= 0) c->used[ph] = 1;
            if (dck_checkpoint_find(c->ck, fa) < 0) s = alias(c->ck, fb, fa);
        }
    }
    if (!s) s = rest_tensors(c, c->stage == 3);
    if (!s) s = file_values(c, c->model, "", model_value);
    if (!s) s = file_values(c, c->optim[0], "optimizer_state_dict.", optim_value);
    if (!s) s = structure_values(c, osd);
    return s;
}

/* A universal checkpoint: zero/PARAM/KIND.pt hold each parameter's state
 * whole ({'param': tensor, ...}, or the tensor: step.pt). */
static const struct {
    const char *file, *kind;
} universal_kinds[] = {
    {"fp32", "fp32_param"}, /* the master weights: the name ZeRO's get */
};

static dck_status open_universal(ds_ctx *c) {
    char **names = NULL, **params = NULL;
    size_t n = 0, np = 0;
    dck_status s = dck_list_dir(c->dir, true, &names, &n);
    size_t model = SIZE_MAX;
    for (size_t i = 0; i < n && !s; i++) {
        unsigned long r, mp;
        ds_kind k = file_kind(names[i], &r, &mp);
        if (k == F_MODEL && mp != 0)
            s = dck_set_error(DCK_ERR_UNSUPPORTED, "%s/%s: model-parallel rank %lu; detcheck reads DeepSpeed "
                              "checkpoints of one model-parallel rank (mp_rank_00)", c->dir, names[i], mp);
        else if (k == F_PIPE)
            s = dck_set_error(DCK_ERR_UNSUPPORTED, "%s/%s: a pipeline-parallel DeepSpeed checkpoint (layer files); "
                              "detcheck reads ZeRO checkpoints without pipeline stages", c->dir, names[i]);
        else if (k == F_MODEL) {
            model = c->nfiles;
            s = add_file(c, names[i]);
        }
    }
    dck_strv_free(names, n);
    if (!s && model == SIZE_MAX) s = dck_set_error(DCK_ERR_FORMAT, "%s: mp_rank_00_model_states.pt is missing", c->dir);
    char *zdir = s ? NULL : dck_path_join(c->dir, "zero");
    if (!s && !zdir) s = dck_oom(NULL);
    if (!s) s = dck_list_dir(zdir, true, &params, &np);
    size_t ostate = SIZE_MAX;
    /* each parameter's files, named zero/PARAM/KIND in the scratch */
    for (size_t i = 0; i < np && !s; i++) {
        char *pdir = dck_path_join(zdir, params[i]);
        if (!pdir) {
            s = dck_oom(NULL);
            break;
        }
        struct stat st;
        if (stat(pdir, &st) == 0 && S_ISREG(st.st_mode)) {
            if (!strcmp(params[i], "optimizer_state.pt")) {
                char rel[NAME_MAX_LEN];
                snprintf(rel, sizeof rel, "zero/%s", params[i]);
                ostate = c->nfiles;
                s = add_file(c, rel);
            }
            free(pdir);
            continue;
        }
        char **kinds = NULL;
        size_t nk = 0;
        s = dck_list_dir(pdir, true, &kinds, &nk);
        for (size_t k = 0; k < nk && !s; k++) {
            if (!dck_has_suffix(kinds[k], ".pt")) continue;
            char rel[NAME_MAX_LEN];
            if ((size_t)snprintf(rel, sizeof rel, "zero/%s/%s", params[i], kinds[k]) >= sizeof rel) {
                s = dck_set_error(DCK_ERR_LIMIT, "%s/%s: name too long", zdir, params[i]);
                break;
            }
            s = add_file(c, rel);
        }
        dck_strv_free(kinds, nk);
        free(pdir);
    }
    free(zdir);
    dck_strv_free(params, np);
    if (s) return s;
    c->model = model;
    if ((s = load_tree(c, c->model)) || (ostate != SIZE_MAX && (s = load_tree(c, ostate))) ||
        (s = dck_ck_validate(c->scr)))
        return s;
    if (!(c->used = calloc(c->scr->ntensors + 1, 1))) return dck_oom(NULL);
    if ((s = move_files(c))) return s;
    for (size_t fi = 0; fi < c->nfiles && !s; fi++) {
        const char *stem = c->files[fi].stem, *sl1, *sl2;
        if (strncmp(stem, "zero/", 5) || !(sl1 = strchr(stem + 5, '/')) || (sl2 = strchr(sl1 + 1, '/'))) continue;
        char param[NAME_MAX_LEN], kind[NAME_MAX_LEN], name[NAME_MAX_LEN], sname[NAME_MAX_LEN];
        snprintf(param, sizeof param, "%.*s", (int)(sl1 - stem - 5), stem + 5);
        snprintf(kind, sizeof kind, "%s", sl1 + 1);
        for (size_t u = 0; u < sizeof universal_kinds / sizeof universal_kinds[0]; u++)
            if (!strcmp(kind, universal_kinds[u].file)) snprintf(kind, sizeof kind, "%s", universal_kinds[u].kind);
        if ((s = state_name(name, sizeof name, kind, param))) break;
        snprintf(sname, sizeof sname, "%s.param", stem);
        long ti = dck_checkpoint_find(c->scr, sname);
        if (ti < 0) ti = dck_checkpoint_find(c->scr, stem); /* a tensor saved alone */
        if (ti < 0) {
            s = dck_set_error(DCK_ERR_FORMAT, "%s: neither a tensor nor a dict with 'param'", fpath(c, fi));
            break;
        }
        /* the parameter's state has the module tensor's shape (step: a scalar) */
        const dck_tensor_info *t = &c->scr->tensors[ti].info;
        char mname[NAME_MAX_LEN + 8];
        snprintf(mname, sizeof mname, "module.%s", param);
        long mi = t->ndim ? sfind(c, c->model, mname) : -1;
        const dck_tensor_info *m = mi >= 0 ? &c->scr->tensors[mi].info : NULL;
        if (m && (m->ndim != t->ndim || memcmp(m->shape, t->shape, sizeof *t->shape * (size_t)t->ndim))) {
            char a[256], b[256];
            s = dck_set_error(DCK_ERR_FORMAT, "%s: %s, the module's tensor %s is %s (%s)", fpath(c, fi),
                              shape_text(a, sizeof a, t->shape, t->ndim), param,
                              shape_text(b, sizeof b, m->shape, m->ndim), fpath(c, c->model));
            break;
        }
        s = move_tensor(c, ti, name);
    }
    if (!s) s = rest_tensors(c, false);
    if (!s) s = file_values(c, c->model, "", model_value);
    if (!s && ostate != SIZE_MAX) s = file_values(c, ostate, "", optim_value);
    if (!s) s = structure_values(c, ostate != SIZE_MAX ? c->files[ostate].root : NULL);
    return s;
}

static dck_status open_tag(dck_checkpoint *ck, const char *dir, const char *rel, int kind) {
    ds_ctx c;
    memset(&c, 0, sizeof c);
    c.ck = ck;
    c.dir = dir;
    c.rel = rel;
    dck_status s = dck_ck_create(&ck->opt, &c.scr);
    if (!s) s = kind == 2 ? open_universal(&c) : open_zero(&c);
    ctx_free(&c);
    return s;
}

static dck_status ds_open(dck_checkpoint *ck, const char *path, const char *relroot) {
    int kind = tag_kind(path);
    if (kind) return open_tag(ck, path, relroot, kind);
    char tag[256];
    const char *which;
    if (!root_tag(path, tag, sizeof tag, &which))
        return dck_set_error(DCK_ERR_FORMAT, "%s: no DeepSpeed tag directory", path);
    char *p = dck_path_join(path, tag), *r = dck_rel_join(relroot, tag);
    if (!p || !r) {
        free(p);
        free(r);
        return dck_oom(NULL);
    }
    kind = tag_kind(p);
    dck_status s = kind ? open_tag(ck, p, r, kind)
                        : dck_set_error(DCK_ERR_FORMAT, "%s/%s names %s, which %s", path, which, tag,
                                        dck_path_exists_in(path, tag, true) ? "is no DeepSpeed checkpoint directory"
                                                                : "does not exist");
    free(p);
    free(r);
    return s;
}

const dck_reader dck_reader_deepspeed = {"deepspeed", ds_probe, ds_open, NULL, 0};

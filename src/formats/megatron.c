/* Megatron-LM checkpoint trees.
 *
 *   ROOT/latest_checkpointed_iteration.txt   "1000" or "release"
 *   ROOT/iter_0001000/                        (or ROOT/release/)
 *       mp_rank_00/model_optim_rng.pt         legacy: one dir per TP rank
 *       mp_rank_00_001/model_optim_rng.pt     legacy: TP rank 00, PP rank 001
 *       mp_rank_00/distrib_optim.pt           distributed optimizer state
 *     or, the torch_dist layout:
 *       .metadata, __R_N.distcp               a DCP checkpoint
 *       metadata.json, common.pt              backend info, unsharded state
 *
 * Given the root, the iteration named in latest_checkpointed_iteration.txt
 * is read (or options.iteration when >= 0); an iter_N directory can also be
 * given directly. Without options.megatron_merge (the library's default;
 * the CLI merges unless --megatron-per-rank) legacy rank directories are
 * not merged: their tensors are named RANKDIR.path
 * (mp_rank_01.model.language_model...), and other .pt files of a rank
 * directory RANKDIR.STEM.path (mp_rank_00.distrib_optim...). With it the
 * model weights are merged into the tensors of the unsplit model and the
 * common state is named once (see "merging" below and man
 * detcheck-formats(7)). */
#include "formats/readers.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>


#define LATEST "latest_checkpointed_iteration.txt"

static bool is_rank_dir(const char *name) {
    if (strncmp(name, "mp_rank_", 8)) return false;
    const char *s = name + 8;
    if (!isdigit((unsigned char)*s)) return false;
    while (isdigit((unsigned char)*s)) s++;
    if (*s == '_') {
        s++;
        if (!isdigit((unsigned char)*s)) return false;
        while (isdigit((unsigned char)*s)) s++;
    }
    return *s == 0;
}

static const char *base_of(const char *p) {
    size_t l = strlen(p);
    while (l > 1 && p[l - 1] == '/') l--;
    const char *b = p + l;
    while (b > p && b[-1] != '/') b--;
    return b;
}

static bool is_iter_dir(const char *path) {
    if (dck_path_exists_in(path, "common.pt", false) || dck_path_exists_in(path, "metadata.json", false)) return true;
    DIR *d = opendir(path);
    if (!d) return false;
    struct dirent *e;
    bool found = false;
    while ((e = readdir(d)) && !found) found = is_rank_dir(e->d_name);
    closedir(d);
    return found;
}

static dck_status add_plain_file(dck_checkpoint *ck, const char *path, const char *rel) {
    dck_file *f;
    dck_status s = dck_file_open(path, rel, &f);
    if (s) return s;
    uint32_t idx;
    return dck_ck_add_file(ck, f, &idx);
}

static dck_status load_rank_dir(dck_checkpoint *ck, const char *dir, const char *rel, const char *rank) {
    char **names;
    size_t n;
    dck_status s = dck_list_dir(dir, false, &names, &n);
    if (s) return s;
    size_t loaded = 0;
    for (size_t i = 0; i < n && !s; i++) {
        const char *nm = names[i];
        size_t l = strlen(nm);
        size_t stem = l;
        if (stem > 4 && !strcmp(nm + stem - 4, ".zst")) stem -= 4;
        if (stem > 3 && !strncmp(nm + stem - 3, ".pt", 3)) stem -= 3;
        else continue;
        char *p = dck_path_join(dir, nm), *r = dck_rel_join(rel, nm);
        char *prefix = malloc(strlen(rank) + stem + 2);
        if (!p || !r || !prefix) s = dck_oom(NULL);
        else {
            if (stem == strlen("model_optim_rng") && !strncmp(nm, "model_optim_rng", stem))
                snprintf(prefix, strlen(rank) + stem + 2, "%s", rank);
            else
                snprintf(prefix, strlen(rank) + stem + 2, "%s.%.*s", rank, (int)stem, nm);
            dck_pt_opts o = {prefix, NULL, NULL, NULL, 0, true, false};
            s = dck_pt_open_path(ck, p, r, &o);
            loaded++;
        }
        free(p);
        free(r);
        free(prefix);
    }
    dck_strv_free(names, n);
    if (!s && !loaded) s = dck_set_error(DCK_ERR_FORMAT, "%s: rank directory without .pt files", dir);
    return s;
}

static dck_status merge_rank_dirs(dck_checkpoint *ck, const char *dir, const char *rel,
                                  char **names, size_t n);

static dck_status load_iter_dir(dck_checkpoint *ck, const char *dir, const char *rel) {
    dck_status s = DCK_OK;
    if (dck_path_exists_in(dir, ".metadata", false) || dck_path_exists_in(dir, ".metadata.zst", false)) { /* torch_dist */
        if ((s = dck_dcp_load_dir(ck, dir, rel))) return s;
        const char *extra[] = {"common.pt", "common.pt.zst"};
        for (int i = 0; i < 2 && !s; i++)
            if (dck_path_exists_in(dir, extra[i], false)) {
                char *p = dck_path_join(dir, extra[i]), *r = dck_rel_join(rel, extra[i]);
                dck_pt_opts o = {"", NULL, NULL, NULL, 0, true, false};
                s = p && r ? dck_pt_open_path(ck, p, r, &o) : dck_oom(NULL);
                free(p);
                free(r);
            }
        if (!s && dck_path_exists_in(dir, "metadata.json", false)) {
            char *p = dck_path_join(dir, "metadata.json"), *r = dck_rel_join(rel, "metadata.json");
            s = p && r ? add_plain_file(ck, p, r) : dck_oom(NULL);
            free(p);
            free(r);
        }
        return s;
    }
    char **names;
    size_t n;
    if ((s = dck_list_dir(dir, false, &names, &n))) return s;
    if (ck->opt.megatron_merge) {
        s = merge_rank_dirs(ck, dir, rel, names, n);
        dck_strv_free(names, n);
        return s;
    }
    size_t ranks = 0;
    for (size_t i = 0; i < n && !s; i++) {
        if (!is_rank_dir(names[i]) || !dck_path_exists_in(dir, names[i], true)) continue;
        char *p = dck_path_join(dir, names[i]), *r = dck_rel_join(rel, names[i]);
        s = p && r ? load_rank_dir(ck, p, r, names[i]) : dck_oom(NULL);
        free(p);
        free(r);
        ranks++;
    }
    dck_strv_free(names, n);
    if (!s && !ranks)
        s = dck_set_error(DCK_ERR_FORMAT, "%s: Megatron iteration directory without mp_rank_* directories or .metadata", dir);
    return s;
}

static dck_status read_latest(const char *root, char *buf, size_t n) {
    char *p = dck_path_join(root, LATEST);
    if (!p) return dck_oom(NULL);
    FILE *f = fopen(p, "r");
    if (!f) {
        dck_status s = dck_set_error(DCK_ERR_IO, "%s: cannot open: %s", p, strerror(errno));
        free(p);
        return s;
    }
    size_t got = fread(buf, 1, n - 1, f);
    fclose(f);
    buf[got] = 0;
    while (got && isspace((unsigned char)buf[got - 1])) buf[--got] = 0;
    size_t lead = strspn(buf, " \t\r\n");
    memmove(buf, buf + lead, strlen(buf + lead) + 1);
    bool digits = *buf != 0;
    for (const char *c = buf; *c; c++) digits &= isdigit((unsigned char)*c) != 0;
    if (!digits && strcmp(buf, "release")) {
        dck_status s = dck_set_error(DCK_ERR_FORMAT, "%s: neither an iteration number nor 'release'", p);
        free(p);
        return s;
    }
    free(p);
    return DCK_OK;
}

static int mg_probe(const char *path, bool is_dir, const uint8_t *head, size_t n) {
    (void)head;
    (void)n;
    if (!is_dir) return 0;
    if (dck_path_exists_in(path, LATEST, false)) return 1;
    const char *b = base_of(path);
    if ((!strncmp(b, "iter_", 5) && isdigit((unsigned char)b[5])) || !strncmp(b, "release", 7)) return is_iter_dir(path);
    return 0;
}

static dck_status mg_open(dck_checkpoint *ck, const char *path, const char *relroot) {
    if (!dck_path_exists_in(path, LATEST, false)) return load_iter_dir(ck, path, relroot);
    char it[64], dirname[80];
    if (ck->opt.iteration >= 0) {
        snprintf(dirname, sizeof dirname, "iter_%07ld", ck->opt.iteration);
    } else {
        dck_status s = read_latest(path, it, sizeof it);
        if (s) return s;
        if (!strcmp(it, "release")) snprintf(dirname, sizeof dirname, "release");
        else {
            char *end;
            errno = 0;
            long long v = strtoll(it, &end, 10);
            if (!isdigit((unsigned char)it[0]) || *end || errno || v > 999999999)
                return dck_set_error(DCK_ERR_FORMAT, "%s/%s: '%s' is not an iteration number", path, LATEST, it);
            snprintf(dirname, sizeof dirname, "iter_%07lld", v);
        }
    }
    if (!dck_path_exists_in(path, dirname, true))
        return dck_set_error(DCK_ERR_IO, "%s: no directory %s for the iteration asked for", path, dirname);
    char *p = dck_path_join(path, dirname), *r = dck_rel_join(relroot, dirname);
    dck_status s;
    if (!p || !r) s = dck_oom(NULL);
    else if (!(s = load_iter_dir(ck, p, r))) {
        /* which iteration was read matters for resume: record it */
        const char *num = dirname + 5;
        if (!strncmp(dirname, "iter_", 5)) {
            while (*num == '0' && num[1]) num++;
            s = dck_ck_add_value(ck, "megatron.iteration", num);
        } else
            s = dck_ck_add_value(ck, "megatron.iteration", "release");
    }
    free(p);
    free(r);
    return s;
}

/* ------------------------------------------------------------------ merging
 *
 * With options.megatron_merge a legacy iteration directory is read as one
 * model. Every rank directory is loaded into a scratch checkpoint under its
 * usual per-rank names and validated; then the tensors under "model." of
 * the rank's model_optim_rng.pt are renamed and placed:
 *   - pipeline: the number after the first "layers" component is made
 *     global by adding the layers (per name prefix up to that component)
 *     of the earlier stages; other names are kept;
 *   - tensor parallelism: a tensor whose merged name matches a split rule
 *     GLOB=DIM is the concatenation of the TP ranks' tensors along DIM, in
 *     rank order: rank r's tensor is a piece at offset r * (local size)
 *     along DIM of the global tensor, so the usual stitching digests the
 *     concatenated tensor; any other tensor is replicated: every TP rank
 *     must hold the same bytes (checked here), and rank 0's copy is used.
 * SwiGLU (args.swiglu True): each rank's linear_fc1 / dense_h_to_4h holds
 * its own [gate; up] rows, so a built-in rule for them places rank r's
 * halves at r * h and T * h + r * h (h = half the local rows), which is
 * the unsplit [gate; up] (megatron's apply_swiglu_sharded_factory).
 * Values: those under "model." (e.g. _extra_state None) merge like
 * replicated tensors, the common state of model_optim_rng.pt (args,
 * iteration, checkpoint_version, opt_param_scheduler...) loses the rank
 * prefix, each when every rank that holds it holds the same text;
 * otherwise they keep their per-rank names.
 * Everything else (optimizer state, RNG state, TE's per-rank _extra_state
 * tensors, other files of the rank directory) keeps its per-rank name: it
 * cannot be merged meaningfully, or legitimately differs between ranks.
 * A name that starts with a rank directory is per-rank state: verify and
 * diff set it aside when the rank directories stored differ, and say so
 * (no OK unless --accept-layout-state: core/manifest_compare.c, "layout state"). */

#define MAX_RULE_GLOB 1024
#define MAX_RANK_NUM 999999
#define MAX_GRID (1u << 20)

/* Megatron-LM's tensor-parallel layers: ColumnParallelLinear and
 * VocabParallelEmbedding split their output rows (dim 0), RowParallelLinear
 * its input columns (dim 1; its bias is replicated). Legacy names
 * (language_model.encoder.layers.N...) and Megatron-core names
 * (decoder.layers.N...). glu: the MLP's first layer, whose rank tensors
 * are [gate; up] each when the model is SwiGLU. Documented in
 * detcheck-formats(7). */
static const struct {
    const char *text;
    bool glu;
} default_rules[] = {
    {"*.self_attention.query_key_value.weight=0", false}, {"*.self_attention.query_key_value.bias=0", false},
    {"*.mlp.dense_h_to_4h.weight=0", true},               {"*.mlp.dense_h_to_4h.bias=0", true},
    {"*.self_attention.dense.weight=1", false},           {"*.mlp.dense_4h_to_h.weight=1", false},
    {"*.self_attention.linear_qkv.weight=0", false},      {"*.self_attention.linear_qkv.bias=0", false},
    {"*.mlp.linear_fc1.weight=0", true},                  {"*.mlp.linear_fc1.bias=0", true},
    {"*.self_attention.linear_proj.weight=1", false},     {"*.mlp.linear_fc2.weight=1", false},
    {"*word_embeddings.weight=0", false},                 {"*word_embeddings_for_head.weight=0", false},
    {"*output_layer.weight=0", false},
};
#define NDEFAULT_RULES (sizeof default_rules / sizeof default_rules[0])

/* Is rule (as dck_megatron_split_dim returns it) a built-in GLU rule? */
static bool glu_rule(const char *rule) {
    for (size_t i = 0; i < NDEFAULT_RULES; i++)
        if (rule == default_rules[i].text) return default_rules[i].glu;
    return false;
}

/* "GLOB=DIM": the glob (copied into glob, NUL-terminated) and the
 * dimension (-1 for "none"). */
static dck_status parse_rule(const char *text, char *glob, size_t cap, int *dim) {
    const char *eq = text ? strrchr(text, '=') : NULL;
    if (!eq || eq == text)
        return dck_set_error(DCK_ERR_INVALID, "tensor-parallel split rule '%s': expected GLOB=DIM "
                             "(DIM a dimension number or 'none')", text ? text : "(null)");
    size_t gl = (size_t)(eq - text);
    if (gl >= cap)
        return dck_set_error(DCK_ERR_INVALID, "tensor-parallel split rule '%.40s...': glob longer "
                             "than %zu bytes", text, cap - 1);
    const char *d = eq + 1;
    if (!strcmp(d, "none")) *dim = -1;
    else {
        long v = 0;
        size_t k = 0;
        for (; isdigit((unsigned char)d[k]) && k < 3; k++) v = v * 10 + (d[k] - '0');
        if (!k || d[k])
            return dck_set_error(DCK_ERR_INVALID, "tensor-parallel split rule '%s': DIM '%s' is "
                                 "neither a dimension number nor 'none'", text, d);
        if (v >= DCK_MAX_DIMS)
            return dck_set_error(DCK_ERR_INVALID, "tensor-parallel split rule '%s': dimension %ld "
                                 "out of range (0 to %d)", text, v, DCK_MAX_DIMS - 1);
        *dim = (int)v;
    }
    memcpy(glob, text, gl);
    glob[gl] = 0;
    return DCK_OK;
}

/* Checks opt's tensor-parallel split rules (syntax; merging turned on). */
static dck_status mg_check_options(const dck_options *opt) {
    if (!opt->ntp_split_rules) return DCK_OK;
    if (!opt->tp_split_rules)
        return dck_set_error(DCK_ERR_INVALID, "tensor-parallel split rules: NULL array");
    if (!opt->megatron_merge)
        return dck_set_error(DCK_ERR_INVALID, "tensor-parallel split rules are used only when "
                             "merging Megatron rank directories, which is off (--megatron-per-rank)");
    char glob[MAX_RULE_GLOB + 1];
    for (size_t i = 0; i < opt->ntp_split_rules; i++) {
        int dim;
        dck_status s = parse_rule(opt->tp_split_rules[i], glob, sizeof glob, &dim);
        if (s) return s;
    }
    return DCK_OK;
}

dck_status dck_megatron_split_dim(const dck_options *opt, const char *name, int *dim,
                                  const char **rule) {
    char glob[MAX_RULE_GLOB + 1];
    size_t nuser = opt ? opt->ntp_split_rules : 0;
    *dim = -1;
    *rule = NULL;
    for (size_t i = 0; i < nuser + NDEFAULT_RULES; i++) {
        const char *text = i < nuser ? opt->tp_split_rules[i] : default_rules[i - nuser].text;
        int d = -1;
        dck_status s = parse_rule(text, glob, sizeof glob, &d);
        if (s) return s;
        if (fnmatch(glob, name, 0) == 0) {
            *dim = d;
            *rule = text;
            return DCK_OK;
        }
    }
    return DCK_OK;
}

typedef struct {
    const char *name; /* directory name (owned by the listing) */
    int tp, pp;       /* pp -1: mp_rank_XX, no pipeline rank */
} rank_dir;

static bool parse_rank(const char *name, int *tp, int *pp) {
    if (!is_rank_dir(name)) return false;
    const char *s = name + 8;
    long v[2] = {0, -1};
    for (int k = 0; k < 2 && *s; k++) {
        if (k) s++; /* '_' */
        v[k] = 0;
        for (; isdigit((unsigned char)*s); s++) {
            v[k] = v[k] * 10 + (*s - '0');
            if (v[k] > MAX_RANK_NUM) return false;
        }
    }
    *tp = (int)v[0];
    *pp = (int)v[1];
    return true;
}

/* A model tensor of one rank, on its way to a merged name. */
typedef struct {
    size_t ti;      /* index in the scratch checkpoint */
    size_t rank;    /* index in the rank list */
    int tp, pp;     /* pp -1: mp_rank_XX, no pipeline rank */
    char *merged;   /* merged name */
} model_tensor;

/* Layers a pipeline stage holds under one name prefix ("...encoder.layers"). */
typedef struct {
    const char *prefix; /* points into a tensor name */
    size_t len;
    int pp;
    uint64_t count;     /* highest local layer number + 1 */
} layer_count;

/* The first "layers" component followed by a number: the length of the
 * prefix up to and including "layers", the number, and where it ends. */
static bool find_layer(const char *name, size_t *prefix_len, uint64_t *num, size_t *num_end) {
    const char *c = name;
    while (*c) {
        const char *e = strchr(c, '.');
        if (!e) return false;
        if (e - c == 6 && !strncmp(c, "layers", 6) && isdigit((unsigned char)e[1])) {
            const char *d = e + 1;
            uint64_t v = 0;
            size_t k = 0;
            for (; isdigit((unsigned char)d[k]); k++) {
                if (k == 9) break; /* bounded: not a layer number */
                v = v * 10 + (uint64_t)(d[k] - '0');
            }
            if (k < 9 && (d[k] == '.' || d[k] == 0)) {
                *prefix_len = (size_t)(e - name);
                *num = v;
                *num_end = (size_t)(d + k - name);
                return true;
            }
        }
        c = e + 1;
    }
    return false;
}

static int cmp_model_tensor(const void *a, const void *b) {
    const model_tensor *x = a, *y = b;
    int c = strcmp(x->merged, y->merged);
    if (c) return c;
    if (x->pp != y->pp) return x->pp < y->pp ? -1 : 1;
    return x->tp < y->tp ? -1 : x->tp > y->tp;
}

static void rank_name(char *buf, size_t n, int tp, int pp) {
    if (pp < 0) snprintf(buf, n, "mp_rank_%02d", tp);
    else snprintf(buf, n, "mp_rank_%02d_%03d", tp, pp);
}

static void shape_text(char *buf, size_t n, const dck_tensor_info *t) {
    size_t k = (size_t)snprintf(buf, n, "%s [", dck_dtype_name(t->dtype));
    for (int i = 0; i < t->ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%llu", i ? ", " : "", (unsigned long long)t->shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

/* Do two tensors of the scratch checkpoint (same dtype and shape) hold the
 * same bytes? */
static dck_status same_bytes(dck_checkpoint *scr, size_t a, size_t b, uint8_t *ba, uint8_t *bb,
                             size_t cap, bool *same) {
    uint64_t total = scr->tensors[a].info.nbytes;
    *same = true;
    for (uint64_t off = 0; off < total && *same; off += cap) {
        size_t len = (size_t)(total - off < cap ? total - off : cap);
        dck_status s = dck_checkpoint_read(scr, a, off, ba, len);
        if (!s) s = dck_checkpoint_read(scr, b, off, bb, len);
        if (s) return s;
        *same = memcmp(ba, bb, len) == 0;
    }
    return DCK_OK;
}

/* Moves tensor ti of scr into ck as name (pieces shifted by shift elements
 * along dim, when dim >= 0; files renumbered by fmap). */
static dck_status move_tensor(dck_checkpoint *ck, dck_checkpoint *scr, size_t ti, const char *name,
                              const uint64_t *gshape, int dim, uint64_t shift, const uint32_t *fmap) {
    dck_tensor_entry *t = &scr->tensors[ti];
    for (size_t pi = 0; pi < t->npieces; pi++) {
        dck_piece q = t->pieces[pi];
        q.file = fmap[q.file];
        if (dim >= 0) q.offset[dim] += shift;
        dck_status s = dck_ck_add_piece(ck, name, t->info.dtype, gshape ? gshape : t->info.shape,
                                        t->info.ndim, &q);
        if (s) return s;
        t->pieces[pi].strides = NULL; /* now owned by ck */
    }
    return DCK_OK;
}

/* Moves TP rank r's SwiGLU tensor ti of scr (one contiguous piece: h gate
 * rows, then h up rows) into ck as name: the halves at r * h and
 * T * h + r * h of the merged [gate; up]. */
static dck_status move_glu(dck_checkpoint *ck, dck_checkpoint *scr, size_t ti, const char *name,
                           const uint64_t *gshape, int r, int T, const uint32_t *fmap) {
    const dck_tensor_entry *t = &scr->tensors[ti];
    uint64_t h = t->info.shape[0] / 2, row = t->info.nbytes / t->info.shape[0];
    for (uint64_t half = 0; half < 2; half++) {
        dck_piece q = t->pieces[0];
        q.file = fmap[q.file];
        q.shape[0] = h;
        q.offset[0] = half * (uint64_t)T * h + (uint64_t)r * h;
        q.file_offset += half * h * row;
        dck_status s = dck_ck_add_piece(ck, name, t->info.dtype, gshape, t->info.ndim, &q);
        if (s) return s;
    }
    return DCK_OK;
}

/* A tensor stored as one contiguous little-endian piece covering it (what
 * splitting it into GLU halves needs). */
static bool one_plain_piece(const dck_tensor_entry *e) {
    if (e->npieces != 1 || e->pieces[0].strides || e->pieces[0].byteswap) return false;
    for (int d = 0; d < e->info.ndim; d++)
        if (e->pieces[0].offset[d] || e->pieces[0].shape[d] != e->info.shape[d]) return false;
    return true;
}

/* One merged tensor, members m[0..k) sorted by stage and TP rank: checks
 * (place false: the first pass, which reads replicated tensors), or moves
 * it into ck (place true: the second pass). swiglu: the checkpoint's
 * args.swiglu is True (the built-in GLU rules then split by halves). */
static dck_status merge_one(dck_checkpoint *ck, dck_checkpoint *scr, const char *dir,
                            const model_tensor *m, size_t k, int T, const uint32_t *fmap,
                            uint8_t *ba, uint8_t *bb, size_t cap, bool place, bool swiglu) {
    const char *name = m[0].merged;
    char ra[64], rb[64], sa[600], sb[600];
    /* sorted by stage, then TP rank: one stage, every TP rank once */
    if (m[k - 1].pp != m[0].pp) {
        rank_name(ra, sizeof ra, m[0].tp, m[0].pp);
        rank_name(rb, sizeof rb, m[k - 1].tp, m[k - 1].pp);
        return dck_set_error(DCK_ERR_LAYOUT, "%s: tensor %s is on two pipeline stages (%s and %s)",
                             dir, name, ra, rb);
    }
    for (size_t i = 0; i < (size_t)T; i++)
        if (i >= k || m[i].tp != (int)i) {
            rank_name(ra, sizeof ra, m[0].tp, m[0].pp);
            rank_name(rb, sizeof rb, (int)i, m[0].pp);
            return dck_set_error(DCK_ERR_LAYOUT, "%s: tensor %s is in %s but not in %s", dir, name, ra, rb);
        }
    if (k > (size_t)T) /* two local names merge into one */
        return dck_set_error(DCK_ERR_LAYOUT, "%s: two tensors of one rank are both named %s when merged",
                             dir, name);
    int dim;
    const char *rule;
    dck_status s = dck_megatron_split_dim(&ck->opt, name, &dim, &rule);
    if (s) return s;
    const dck_tensor_info *t0 = &scr->tensors[m[0].ti].info;
    rank_name(ra, sizeof ra, m[0].tp, m[0].pp);
    if (dim >= t0->ndim)
        return dck_set_error(DCK_ERR_INVALID, "%s: split rule '%s' splits dimension %d but tensor %s "
                             "has %d dimension%s (in %s)", dir, rule, dim, name, t0->ndim,
                             t0->ndim == 1 ? "" : "s", ra);
    for (size_t i = 1; i < k; i++) {
        const dck_tensor_info *ti = &scr->tensors[m[i].ti].info;
        if (ti->dtype == t0->dtype && ti->ndim == t0->ndim &&
            (!t0->ndim || !memcmp(ti->shape, t0->shape, sizeof(uint64_t) * (size_t)t0->ndim)))
            continue;
        rank_name(rb, sizeof rb, m[i].tp, m[i].pp);
        shape_text(sa, sizeof sa, t0);
        shape_text(sb, sizeof sb, ti);
        if (dim >= 0)
            return dck_set_error(DCK_ERR_LAYOUT, "%s: tensor %s, split along dimension %d by rule "
                                 "'%s', is %s in %s but %s in %s (tensor-parallel shards must "
                                 "agree in dtype and shape)", dir, name, dim, rule, sa, ra, sb, rb);
        return dck_set_error(DCK_ERR_LAYOUT, "%s: replicated tensor %s is %s in %s but %s in %s "
                             "(if tensor parallelism splits it, give it a split rule)", dir, name,
                             sa, ra, sb, rb);
    }
    uint64_t gshape[DCK_MAX_DIMS];
    if (t0->ndim) memcpy(gshape, t0->shape, sizeof(uint64_t) * (size_t)t0->ndim);
    if (dim < 0) {
        if (place) return move_tensor(ck, scr, m[0].ti, name, NULL, -1, 0, fmap);
        for (size_t i = 1; i < k; i++) {
            bool same;
            if ((s = same_bytes(scr, m[0].ti, m[i].ti, ba, bb, cap, &same))) return s;
            if (!same) {
                rank_name(rb, sizeof rb, m[i].tp, m[i].pp);
                return dck_set_error(DCK_ERR_MISMATCH, "%s: replicated tensor %s differs between "
                                     "tensor-parallel ranks %s and %s (if tensor parallelism "
                                     "splits it, give it a split rule with --tp-split; "
                                     "--megatron-per-rank reads every rank as saved)", dir, name, ra, rb);
            }
        }
        return DCK_OK;
    }
    if (gshape[dim] > UINT64_MAX / (uint64_t)T)
        return dck_set_error(DCK_ERR_LIMIT, "%s: tensor %s: merged size overflows", dir, name);
    gshape[dim] *= (uint64_t)T;
    bool glu = swiglu && T > 1 && glu_rule(rule);
    if (glu && (dim != 0 || !t0->shape[0] || t0->shape[0] % 2))
        return dck_set_error(DCK_ERR_LAYOUT, "%s: tensor %s (in %s): args.swiglu is True but its "
                             "dimension 0 (%llu) does not hold a gate and an up half (give it "
                             "a --tp-split rule)", dir, name, ra,
                             (unsigned long long)(t0->ndim ? t0->shape[0] : 0));
    for (size_t i = 0; i < k; i++) {
        const dck_tensor_entry *e = &scr->tensors[m[i].ti];
        if (glu) {
            if (!one_plain_piece(e)) {
                rank_name(rb, sizeof rb, m[i].tp, m[i].pp);
                return dck_set_error(DCK_ERR_UNSUPPORTED, "%s: SwiGLU tensor %s in %s is stored as a "
                                     "view or big-endian; splitting it into gate and up halves needs "
                                     "a contiguous little-endian tensor", dir, name, rb);
            }
            if (place && (s = move_glu(ck, scr, m[i].ti, name, gshape, (int)i, T, fmap))) return s;
            continue;
        }
        for (size_t pi = 0; pi < e->npieces && T > 1; pi++)
            if (e->pieces[pi].strides || e->pieces[pi].byteswap) {
                rank_name(rb, sizeof rb, m[i].tp, m[i].pp);
                return dck_set_error(DCK_ERR_UNSUPPORTED, "%s: tensor %s in %s is stored as a "
                                     "non-contiguous view or big-endian; merging tensor-parallel "
                                     "shards needs contiguous little-endian tensors", dir, name, rb);
            }
        if (place && (s = move_tensor(ck, scr, m[i].ti, name, gshape, dim, (uint64_t)i * t0->shape[dim], fmap)))
            return s;
    }
    return DCK_OK;
}

/* A model weight to merge: under "model.", except Transformer Engine's
 * _extra_state (per-rank runtime state such as FP8 scaling factors, which
 * legitimately differs between ranks). */
static bool merged_weight(const char *local) {
    if (strncmp(local, "model.", 6)) return false;
    const char *x = strstr(local, "._extra_state");
    return !(x && (x[13] == 0 || x[13] == '.'));
}

/* The merged name (malloc'd) of local, a "model." name of stage pp: the
 * number after its first "layers" made global. */
static char *merged_name(const char *local, int pp, const layer_count *lc, size_t nlc) {
    size_t pl, ne;
    uint64_t num, before = 0;
    if (find_layer(local, &pl, &num, &ne))
        for (size_t j = 0; j < nlc; j++)
            if (lc[j].pp < pp && lc[j].len == pl && !memcmp(lc[j].prefix, local, pl)) before += lc[j].count;
    if (!before) return dck_strdup(local);
    size_t len = strlen(local) + 24;
    char *m = malloc(len);
    if (m) snprintf(m, len, "%.*s.%llu%s", (int)pl, local, (unsigned long long)(num + before), local + ne);
    return m;
}

/* Top-level keys of model_optim_rng.pt that hold one rank's own state
 * (Megatron-LM's save_checkpoint): never named without the rank. */
static const char *const per_rank_keys[] = {"optimizer", "rng_state"};

static bool per_rank_key(const char *local) {
    size_t l = strcspn(local, ".");
    for (size_t i = 0; i < sizeof per_rank_keys / sizeof per_rank_keys[0]; i++)
        if (strlen(per_rank_keys[i]) == l && !strncmp(local, per_rank_keys[i], l)) return true;
    return false;
}

/* A value of a rank directory on its way to a merged name. */
typedef struct {
    size_t vi;     /* index in the scratch checkpoint */
    char *merged;  /* NULL: keeps its per-rank name */
    size_t want;   /* copies that make the group: the TP ranks (model), every rank (common) */
    int pp, tp;
} rank_value;

/* Groups by merged name (stage, TP rank within); a total order, so that
 * the values come out the same whatever the sort. */
static int cmp_rank_value(const void *a, const void *b) {
    const rank_value *x = a, *y = b;
    if (!x->merged != !y->merged) return x->merged ? -1 : 1;
    int c = x->merged ? strcmp(x->merged, y->merged) : 0;
    if (c) return c;
    if (x->pp != y->pp) return x->pp < y->pp ? -1 : 1;
    if (x->tp != y->tp) return x->tp < y->tp ? -1 : 1;
    return (x->vi > y->vi) - (x->vi < y->vi);
}

/* Finds the rank directory a scratch tensor name starts with (sorted list). */
static long find_rank(const rank_dir *r, size_t n, const char *name, size_t len) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strncmp(r[mid].name, name, len);
        if (!c && r[mid].name[len]) c = 1;
        if (!c) return (long)mid;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

/* Adds scr's values to ck (after the files moved: fmap): model values and
 * the common state of model_optim_rng.pt once under their merged names
 * when every rank that must hold one holds the same text, everything else
 * under its per-rank name. */
static dck_status merge_values(dck_checkpoint *ck, const dck_checkpoint *scr, const rank_dir *ranks,
                               size_t nr, int T, const layer_count *lc, size_t nlc, const uint32_t *fmap) {
    rank_value *rv = calloc(scr->nvalues ? scr->nvalues : 1, sizeof *rv);
    if (!rv) return dck_oom(NULL);
    dck_status s = DCK_OK;
    size_t n = 0;
    for (size_t vi = 0; vi < scr->nvalues && !s; vi++) {
        const char *nm = scr->values[vi].name, *dot = strchr(nm, '.');
        long ri = dot ? find_rank(ranks, nr, nm, (size_t)(dot - nm)) : -1;
        uint32_t f = scr->value_files ? scr->value_files[vi] : UINT32_MAX;
        rank_value v = {vi, NULL, 0, 0, 0};
        /* only model_optim_rng.pt holds the model and the common state (a
         * file the pickle reader added, such as a numpy array's, has no
         * relpath: its path is the .pt's) */
        const char *from = f != UINT32_MAX ? ck->files[fmap[f]]->path : NULL;
        if (ri >= 0 && from && !strncmp(base_of(from), "model_optim_rng.pt", 18)) {
            const char *local = dot + 1;
            v.pp = ranks[ri].pp;
            v.tp = ranks[ri].tp;
            if (!strncmp(local, "model.", 6)) {
                v.merged = merged_name(local, v.pp, lc, nlc);
                v.want = (size_t)T;
            } else if (!per_rank_key(local)) {
                v.merged = dck_strdup(local);
                v.want = nr;
            }
            if (v.want && !v.merged) s = dck_oom(NULL);
        }
        rv[n++] = v;
    }
    if (!s) dck_qsort(rv, n, sizeof *rv, cmp_rank_value);
    for (size_t i = 0; i < n && !s;) {
        size_t k = 1;
        while (rv[i].merged && i + k < n && rv[i + k].merged && !strcmp(rv[i + k].merged, rv[i].merged)) k++;
        bool one = rv[i].merged && k == rv[i].want;
        for (size_t j = 1; j < k && one; j++)
            one = !strcmp(scr->values[rv[i + j].vi].value, scr->values[rv[i].vi].value);
        if (one) s = dck_ck_add_value(ck, rv[i].merged, scr->values[rv[i].vi].value);
        for (size_t j = 0; j < k && !one && !s; j++)
            s = dck_ck_add_value(ck, scr->values[rv[i + j].vi].name, scr->values[rv[i + j].vi].value);
        i += k;
    }
    for (size_t i = 0; i < n; i++) free(rv[i].merged);
    free(rv);
    return s;
}

/* args.swiglu of the first rank directory is "True". */
static bool swiglu_of(const dck_checkpoint *scr, const char *rank) {
    size_t rl = strlen(rank);
    for (size_t vi = 0; vi < scr->nvalues; vi++) {
        const char *nm = scr->values[vi].name;
        if (!strncmp(nm, rank, rl) && !strcmp(nm + rl, ".args.swiglu"))
            return !strcmp(scr->values[vi].value, "True");
    }
    return false;
}

static dck_status merge_rank_dirs(dck_checkpoint *ck, const char *dir, const char *rel,
                                  char **names, size_t n) {
    rank_dir *ranks = calloc(n ? n : 1, sizeof *ranks);
    size_t nr = 0;
    dck_checkpoint *scr = NULL;
    model_tensor *mt = NULL;
    layer_count *lc = NULL;
    size_t nmt = 0, nlc = 0, caplc = 0;
    uint32_t *fmap = NULL, *grid = NULL;
    uint8_t *ba = NULL, *bb = NULL;
    const size_t cap = (size_t)1 << 20;
    dck_status s = DCK_OK;
    if (!ranks) return dck_oom(NULL);
    int T = 0, P = 0;
    for (size_t i = 0; i < n; i++) { /* names are sorted: so is ranks */
        int tp, pp;
        if (!is_rank_dir(names[i]) || !dck_path_exists_in(dir, names[i], true)) continue;
        if (!parse_rank(names[i], &tp, &pp)) {
            s = dck_set_error(DCK_ERR_LIMIT, "%s: rank directory %s: rank number above %d", dir,
                              names[i], MAX_RANK_NUM);
            goto done;
        }
        if (nr && (pp < 0) != (ranks[0].pp < 0)) {
            s = dck_set_error(DCK_ERR_FORMAT, "%s: rank directories with and without a pipeline "
                              "rank (%s, %s)", dir, ranks[0].name, names[i]);
            goto done;
        }
        ranks[nr++] = (rank_dir){names[i], tp, pp};
        if (tp + 1 > T) T = tp + 1;
        if (pp + 1 > P) P = pp + 1;
    }
    if (!nr) {
        s = dck_set_error(DCK_ERR_FORMAT, "%s: Megatron iteration directory without mp_rank_* directories or .metadata", dir);
        goto done;
    }
    if (P < 1) P = 1;
    if ((uint64_t)T * (uint64_t)P > MAX_GRID) {
        s = dck_set_error(DCK_ERR_LIMIT, "%s: %d tensor-parallel x %d pipeline ranks: more than %u",
                          dir, T, P, MAX_GRID);
        goto done;
    }
    /* the rank directories must form the whole T x P grid */
    if (!(grid = calloc((size_t)T * (size_t)P, sizeof *grid))) {
        s = dck_oom(NULL);
        goto done;
    }
    for (size_t i = 0; i < nr; i++) {
        uint32_t *g = &grid[(size_t)(ranks[i].pp < 0 ? 0 : ranks[i].pp) * (size_t)T + (size_t)ranks[i].tp];
        if (*g) {
            s = dck_set_error(DCK_ERR_FORMAT, "%s: %s and %s are the same rank", dir,
                              ranks[*g - 1].name, ranks[i].name);
            goto done;
        }
        *g = (uint32_t)i + 1;
    }
    for (int pp = 0; pp < P; pp++)
        for (int tp = 0; tp < T; tp++)
            if (!grid[(size_t)pp * (size_t)T + (size_t)tp]) {
                char want[64];
                rank_name(want, sizeof want, tp, ranks[0].pp < 0 ? -1 : pp);
                s = dck_set_error(DCK_ERR_FORMAT, "%s: rank directory %s is missing (the others "
                                  "make a grid of %d tensor-parallel x %d pipeline ranks)", dir,
                                  want, T, P);
                goto done;
            }

    /* every rank under its own names, checked */
    if ((s = dck_ck_create(&ck->opt, &scr))) goto done;
    for (size_t i = 0; i < nr && !s; i++) {
        char *p = dck_path_join(dir, ranks[i].name), *r = dck_rel_join(rel, ranks[i].name);
        s = p && r ? load_rank_dir(scr, p, r, ranks[i].name) : dck_oom(NULL);
        free(p);
        free(r);
    }
    if (s || (s = dck_ck_validate(scr))) goto done;

    /* model tensors and the layers of each stage */
    if (!(mt = calloc(scr->ntensors ? scr->ntensors : 1, sizeof *mt))) {
        s = dck_oom(NULL);
        goto done;
    }
    for (size_t ti = 0; ti < scr->ntensors; ti++) {
        const char *nm = scr->tensors[ti].info.name, *dot = strchr(nm, '.');
        long ri = dot ? find_rank(ranks, nr, nm, (size_t)(dot - nm)) : -1;
        if (ri < 0) continue;
        const char *local = dot + 1;
        if (!strncmp(local, "model", 5) && isdigit((unsigned char)local[5])) {
            s = dck_set_error(DCK_ERR_UNSUPPORTED, "%s: %s holds virtual pipeline stages (%.*s...); "
                              "merging them is not supported: read it without merging", dir,
                              ranks[ri].name, (int)strcspn(local, "."), local);
            goto done;
        }
        if (!merged_weight(local)) continue; /* optimizer, RNG, other files: per rank */
        /* pp -1 (no stages) stays: messages then name mp_rank_XX */
        mt[nmt++] = (model_tensor){ti, (size_t)ri, ranks[ri].tp, ranks[ri].pp, NULL};
        size_t pl, ne;
        uint64_t num;
        if (!find_layer(local, &pl, &num, &ne)) continue;
        size_t j = 0;
        while (j < nlc && !(lc[j].pp == mt[nmt - 1].pp && lc[j].len == pl && !memcmp(lc[j].prefix, local, pl))) j++;
        if (j == nlc) {
            if ((s = dck_grow((void **)&lc, &caplc, nlc + 1, sizeof *lc))) goto done;
            lc[nlc++] = (layer_count){local, pl, mt[nmt - 1].pp, 0};
        }
        if (num + 1 > lc[j].count) lc[j].count = num + 1;
    }
    for (size_t i = 0; i < nmt; i++) {
        const char *local = strchr(scr->tensors[mt[i].ti].info.name, '.') + 1;
        if (!(mt[i].merged = merged_name(local, mt[i].pp, lc, nlc))) {
            s = dck_oom(NULL);
            goto done;
        }
    }
    dck_qsort(mt, nmt, sizeof *mt, cmp_model_tensor);
    bool swiglu = swiglu_of(scr, ranks[0].name);

    /* check everything before moving anything */
    if (!(ba = malloc(cap)) || !(bb = malloc(cap)) ||
        !(fmap = calloc(scr->nfiles ? scr->nfiles : 1, sizeof *fmap))) {
        s = dck_oom(NULL);
        goto done;
    }
    for (int place = 0; place < 2 && !s; place++) {
        if (place) { /* files first: pieces name them by index */
            for (size_t fi = 0; fi < scr->nfiles && !s; fi++) {
                dck_file *f = scr->files[fi];
                scr->files[fi] = NULL;
                s = dck_ck_add_file(ck, f, &fmap[fi]);
            }
            for (size_t ti = 0; ti < scr->ntensors && !s; ti++) {
                const char *nm = scr->tensors[ti].info.name, *dot = strchr(nm, '.');
                if (dot && find_rank(ranks, nr, nm, (size_t)(dot - nm)) >= 0 && merged_weight(dot + 1))
                    continue;
                s = move_tensor(ck, scr, ti, nm, NULL, -1, 0, fmap);
            }
            if (!s) s = merge_values(ck, scr, ranks, nr, T, lc, nlc, fmap);
        }
        for (size_t i = 0; i < nmt && !s;) {
            size_t k = 1;
            while (i + k < nmt && !strcmp(mt[i + k].merged, mt[i].merged)) k++;
            s = merge_one(ck, scr, dir, mt + i, k, T, fmap, ba, bb, cap, place != 0, swiglu);
            i += k;
        }
    }
done:
    for (size_t i = 0; i < nmt; i++) free(mt[i].merged);
    free(mt);
    free(lc);
    free(fmap);
    free(grid);
    free(ba);
    free(bb);
    free(ranks);
    dck_checkpoint_free(scr);
    return s;
}

const dck_reader dck_reader_megatron = {"megatron", mg_probe, mg_open, mg_check_options, 1};

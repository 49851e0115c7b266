/* Comparing manifests (manifest.c has the model): a golden against an
 * actual one, entry by entry in name order (dck_manifest_compare), and the
 * table of layout state, what may be set aside when two checkpoints were
 * written by different layouts (dck_layout_*; diff/ uses it too). */
#include "core/manifest_impl.h"

#include <ctype.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ compare */

const char *dck_cmp_kind_name(dck_cmp_kind k) {
    static const char *n[] = {"equal", "digest", "dtype", "shape", "missing", "extra", "file", "value"};
    return (unsigned)k < sizeof n / sizeof n[0] ? n[k] : "?";
}

static dck_status push(dck_cmp_result *r, size_t *cap, const char *name, dck_cmp_kind k,
                       const dck_manifest_tensor *g, const dck_manifest_tensor *a) {
    dck_status s = dck_grow((void **)&r->entries, cap, r->n + 1, sizeof *r->entries);
    if (s) return s;
    memset(&r->entries[r->n], 0, sizeof r->entries[r->n]);
    r->entries[r->n].name = name;
    r->entries[r->n].kind = k;
    r->entries[r->n].golden = g;
    r->entries[r->n].actual = a;
    r->n++;
    return DCK_OK;
}

static dck_status push_value(dck_cmp_result *r, size_t *cap, const dck_manifest_value *g,
                             const dck_manifest_value *a) {
    dck_status s = push(r, cap, g ? g->name : a->name, DCK_CMP_VALUE, NULL, NULL);
    if (s) return s;
    r->entries[r->n - 1].golden_value = g;
    r->entries[r->n - 1].actual_value = a;
    return DCK_OK;
}

static dck_status push_file(dck_cmp_result *r, size_t *cap, const dck_manifest_file *g,
                            const dck_manifest_file *a) {
    dck_status s = push(r, cap, g ? g->path : a->path, DCK_CMP_FILE, NULL, NULL);
    if (s) return s;
    r->entries[r->n - 1].golden_file = g;
    r->entries[r->n - 1].actual_file = a;
    return DCK_OK;
}

dck_status dck_manifest_compare(const dck_manifest *g, const dck_manifest *a, int compare_files,
                                dck_cmp_result *r) {
    memset(r, 0, sizeof *r);
    size_t cap = 0, i = 0, j = 0;
    dck_status s = DCK_OK;
    while ((i < g->nt || j < a->nt) && !s) {
        int c = i == g->nt ? 1 : j == a->nt ? -1 : dck_name_compare(g->t[i].name, a->t[j].name);
        if (c < 0) {
            s = push(r, &cap, g->t[i].name, DCK_CMP_MISSING, &g->t[i], NULL);
            i++;
        } else if (c > 0) {
            s = push(r, &cap, a->t[j].name, DCK_CMP_EXTRA, NULL, &a->t[j]);
            j++;
        } else {
            const dck_manifest_tensor *x = &g->t[i], *y = &a->t[j];
            r->tensors_compared++;
            if (x->dtype != y->dtype) s = push(r, &cap, x->name, DCK_CMP_DTYPE, x, y);
            else if (x->ndim != y->ndim || memcmp(x->shape, y->shape, sizeof(uint64_t) * (size_t)x->ndim))
                s = push(r, &cap, x->name, DCK_CMP_SHAPE, x, y);
            else if (!dck_digest_equal(x->digest, y->digest)) s = push(r, &cap, x->name, DCK_CMP_DIGEST, x, y);
            else r->tensors_equal++;
            i++;
            j++;
        }
    }
    for (i = 0, j = 0; (i < g->nv || j < a->nv) && !s;) {
        int c = i == g->nv ? 1 : j == a->nv ? -1 : dck_name_compare(g->v[i].name, a->v[j].name);
        if (c < 0) s = push_value(r, &cap, &g->v[i++], NULL);
        else if (c > 0) s = push_value(r, &cap, NULL, &a->v[j++]);
        else {
            if (strcmp(g->v[i].value, a->v[j].value)) s = push_value(r, &cap, &g->v[i], &a->v[j]);
            i++;
            j++;
        }
    }
    if (compare_files)
        for (i = 0, j = 0; (i < g->nf || j < a->nf) && !s;) {
            int c = i == g->nf ? 1 : j == a->nf ? -1 : dck_name_compare(g->f[i].path, a->f[j].path);
            if (c < 0) s = push_file(r, &cap, &g->f[i++], NULL);
            else if (c > 0) s = push_file(r, &cap, NULL, &a->f[j++]);
            else {
                if (g->f[i].bytes != a->f[j].bytes || !dck_digest_equal(g->f[i].xxh128, a->f[j].xxh128))
                    s = push_file(r, &cap, &g->f[i], &a->f[j]);
                i++;
                j++;
            }
        }
    if (s) dck_cmp_result_release(r);
    return s;
}

/* ------------------------------------------------------------ layout state
 *
 * A table, so that an auditor reads in one place what may be set aside.
 * LAYOUT_VALUE: a value that describes the layout as the writer claims it
 * (Megatron's args): set aside when the layouts differ, never itself the
 * evidence that they do (a lying args.tensor_model_parallel_size must not
 * hide the RNG state). LAYOUT_STORED: a layout value the reader checks
 * against what is stored (DeepSpeed's partition count against its rank
 * files): evidence, as the per-rank grids are. PER_RANK: state of one rank
 * (or written by one rank) of the layout; with a ShardedObject grid
 * (KEY/shard_O_G) the grid G is part of the stored layout too. Globs are
 * fnmatch(3) without FNM_PATHNAME. */
typedef enum { LS_NONE, LS_LAYOUT_VALUE, LS_LAYOUT_STORED, LS_PER_RANK, LS_WRITER, LS_LOCATION } layout_kind;
static const struct {
    const char *glob;
    layout_kind kind;
} layout_state[] = {
    /* Megatron-LM's args (common.pt / the common state) */
    {"args.tensor_model_parallel_size", LS_LAYOUT_VALUE},
    {"args.pipeline_model_parallel_size", LS_LAYOUT_VALUE},
    {"args.virtual_pipeline_model_parallel_size", LS_LAYOUT_VALUE},
    {"args.context_parallel_size", LS_LAYOUT_VALUE},
    {"args.expert_model_parallel_size", LS_LAYOUT_VALUE},
    {"args.expert_tensor_parallel_size", LS_LAYOUT_VALUE},
    {"args.data_parallel_size", LS_LAYOUT_VALUE},
    {"args.world_size", LS_LAYOUT_VALUE},
    {"args.use_distributed_optimizer", LS_LAYOUT_VALUE},
    {"args.dist_ckpt_optim_fully_reshardable", LS_LAYOUT_VALUE},
    {"args.ckpt_format", LS_LAYOUT_VALUE},
    /* how Megatron-Core sharded the distributed optimizer's state */
    {"content_metadata.distrib_optim_sharding_type", LS_LAYOUT_VALUE},
    {"optimizer.param_state_sharding_type", LS_LAYOUT_VALUE},
    /* DeepSpeed: the partition count, which formats/deepspeed.c checks
     * against the rank files; the rest (ranks, ZeRO stage and config,
     * samples of all ranks) as the files claim it */
    {"deepspeed.layout.partition_count*", LS_LAYOUT_STORED},
    {"deepspeed.layout.*", LS_LAYOUT_VALUE},
    /* ZeRO-3's padding of each parameter, which the partition count decides */
    {"deepspeed.zero3_padding.*", LS_PER_RANK},
    /* per-rank ShardedObjects: RNG of (pipeline, tensor) rank */
    {"rng_state/shard_*", LS_PER_RANK},
    {"*.rng_state/shard_*", LS_PER_RANK},
    /* common.pt holds rank 0's optimizer.param_state, numbered by rank 0's
     * own parameters (the per-parameter step of torch's AdamW) */
    {"optimizer.param_state.*", LS_PER_RANK},
    /* WRITER: bookkeeping that one version of the writer records and another
     * does not (megatron-core 0.19 marks each param group default_config;
     * 0.15 does not): set aside when on one side only, whatever the layouts;
     * compared when both sides record it */
    {"*param_groups.*.default_config", LS_WRITER},
    /* legacy Megatron-LM trees (mp_rank_XX[_YYY]/): merged, the model's
     * weights are named without the rank directory; what keeps it is per
     * rank (optimizer, RNG, distrib_optim.pt, Transformer Engine's FP8
     * _extra_state), except the weights themselves read per rank
     * (--megatron-per-rank), which must differ loudly, hence the NONE row */
    {"mp_rank_*.model.*._extra_state", LS_PER_RANK},
    {"mp_rank_*.model.*._extra_state.*", LS_PER_RANK},
    {"mp_rank_*.model.*", LS_NONE},
    {"mp_rank_[0-9]*", LS_PER_RANK},
    /* LOCATION: the optimizer's param groups, which Megatron-Core stores in
     * the common state (fully_reshardable, fully_sharded_model_space) or
     * per model-parallel rank (dp_reshardable): set aside when the layouts
     * differ and it is on one side only; compared when on both */
    {"optimizer.optimizer.param_groups.*", LS_LOCATION},
    {"optimizer.distributed.dp_group_idx_[0-9]*.optimizer.*", LS_LOCATION},
    /* dp_reshardable's other per model-parallel rank state (per_bucket_numel) */
    {"optimizer.distributed.dp_group_idx_[0-9]*", LS_PER_RANK},
};

static layout_kind layout_kind_of(const char *name) {
    if (!name) return LS_NONE;
    /* first match rules: a NONE row exempts what a later row would take */
    for (size_t i = 0; i < sizeof layout_state / sizeof layout_state[0]; i++)
        if (fnmatch(layout_state[i].glob, name, 0) == 0) return layout_state[i].kind;
    return LS_NONE;
}

int dck_is_layout_state(const char *name) { return name && layout_kind_of(name) != LS_NONE; }

/* Names that start with a rank's own key: a legacy rank directory
 * (mp_rank_01_000.), Megatron-Core dp_reshardable's per model-parallel rank
 * optimizer state (optimizer.distributed.dp_group_idx_1.). */
static const char *const rank_prefixes[] = {"mp_rank_", "optimizer.distributed.dp_group_idx_"};

/* The grid a per-rank name belongs to: KEY/shard_O_G gives the KEY and G
 * spans ("rng_state", "1.2"); a legacy rank directory's name
 * (mp_rank_01_000.optimizer...) the directory as key, no grid. False when
 * the name has neither. */
static bool grid_of(const char *name, const char **key, size_t *kl, const char **grid, size_t *gl) {
    for (size_t i = 0; i < sizeof rank_prefixes / sizeof rank_prefixes[0]; i++) {
        size_t p = strlen(rank_prefixes[i]), l = p;
        if (strncmp(name, rank_prefixes[i], p)) continue;
        while (isdigit((unsigned char)name[l]) || (name[l] == '_' && isdigit((unsigned char)name[l + 1]))) l++;
        if (l == p || name[l] != '.') return false;
        *key = name;
        *kl = l;
        *grid = name + l;
        *gl = 0;
        return true;
    }
    const char *sh = strstr(name, "/shard_");
    if (!sh) return false;
    const char *o = sh + 7, *us = strchr(o, '_');
    if (!us) return false;
    /* G has as many integers as O ("0.1_1.2.0.x": O 0.1, G 1.2; the ".0"
     * after G is the object's own item) */
    size_t nint = 1;
    for (const char *c = o; c < us; c++) nint += *c == '.';
    const char *g = us + 1, *e = g;
    for (size_t k = 0; k < nint; k++) {
        if (k) {
            if (*e != '.') return false;
            e++;
        }
        if (!isdigit((unsigned char)*e)) return false;
        while (isdigit((unsigned char)*e)) e++;
    }
    *key = name;
    *kl = (size_t)(sh - name);
    *grid = g;
    *gl = (size_t)(e - g);
    return true;
}

/* The first per-rank grid of side a not on side b ("rng_state: grid 1.1
 * only in the golden"), into why. Quadratic in the per-rank names, which
 * are few (one RNG object per rank). */
static bool grid_missing(dck_name_at_fn at, const void *ca, size_t na, const void *cb, size_t nb, char *why,
                         size_t n, const char *side) {
    for (size_t i = 0; i < na; i++) {
        const char *name = at(ca, i), *k, *g;
        size_t kl, gl;
        if (layout_kind_of(name) != LS_PER_RANK || !grid_of(name, &k, &kl, &g, &gl)) continue;
        bool found = false;
        for (size_t j = 0; j < nb && !found; j++) {
            const char *k2, *g2;
            size_t kl2, gl2;
            found = grid_of(at(cb, j), &k2, &kl2, &g2, &gl2) && kl2 == kl && gl2 == gl && !memcmp(k, k2, kl) &&
                    !memcmp(g, g2, gl);
        }
        if (!found) {
            if (gl) snprintf(why, n, "%.*s: grid %.*s only in %s", (int)kl, k, (int)gl, g, side);
            else snprintf(why, n, "%.*s only in %s", (int)kl, k, side);
            return true;
        }
    }
    return false;
}

int dck_layout_value_kind(const char *name) {
    layout_kind k = layout_kind_of(name);
    return k == LS_LAYOUT_STORED ? DCK_LAYOUTS_STORED : k == LS_LAYOUT_VALUE ? DCK_LAYOUTS_CLAIMED : DCK_LAYOUTS_SAME;
}

int dck_layouts_differ(const char *stored, const char *claimed, dck_name_at_fn at, const void *ca, size_t na,
                       const void *cb, size_t nb, const char *label_a, const char *label_b, char *why, size_t n) {
    char buf[512];
    if (stored) {
        snprintf(why, n, "%s", stored);
        return DCK_LAYOUTS_STORED;
    }
    if (grid_missing(at, ca, na, cb, nb, buf, sizeof buf, label_a) ||
        grid_missing(at, cb, nb, ca, na, buf, sizeof buf, label_b)) {
        snprintf(why, n, "%s", buf);
        return DCK_LAYOUTS_STORED;
    }
    if (claimed) {
        snprintf(why, n, "%s as claimed; the stored layout is the same, per-rank state compared", claimed);
        return DCK_LAYOUTS_CLAIMED;
    }
    if (n) why[0] = 0;
    return DCK_LAYOUTS_SAME;
}

/* Per-rank state is set aside only when what is stored differs (a grid, a
 * checked layout value); when only the claimed values differ, the same
 * ranks stored the same objects: compared, except what has no grid to tell
 * its rank and is on one side only (rank 0's optimizer.param_state.N, which
 * one sharding type of the same ranks keeps and another does not). */
int dck_layout_set_aside(const char *name, bool one_side, int differ) {
    const char *k, *g;
    size_t kl, gl;
    switch (layout_kind_of(name)) {
    case LS_WRITER: return one_side;
    case LS_LOCATION: return differ != DCK_LAYOUTS_SAME && one_side;
    case LS_LAYOUT_VALUE:
    case LS_LAYOUT_STORED: return differ != DCK_LAYOUTS_SAME;
    case LS_PER_RANK:
        return differ == DCK_LAYOUTS_STORED ||
               (differ == DCK_LAYOUTS_CLAIMED && one_side && !grid_of(name, &k, &kl, &g, &gl));
    default: return 0;
    }
}

static const char *manifest_name_at(const void *ctx, size_t i) {
    const dck_manifest *m = ctx;
    return i < m->nt ? m->t[i].name : m->v[i - m->nt].name;
}

dck_status dck_cmp_set_aside_layout_state(const dck_manifest *g, const dck_manifest *a, dck_cmp_result *r,
                                          dck_cmp_result *aside, char *why, size_t why_len) {
    memset(aside, 0, sizeof *aside);
    char first[2][512];
    bool found[2] = {false, false};
    /* the first layout value of each kind that differs (or is on one side only) */
    for (size_t i = 0; i < r->n; i++) {
        const dck_cmp_entry *e = &r->entries[i];
        int vk = e->kind == DCK_CMP_VALUE ? dck_layout_value_kind(e->name) : DCK_LAYOUTS_SAME;
        if (!vk || found[vk - 1]) continue;
        found[vk - 1] = true;
        snprintf(first[vk - 1], sizeof first[0], "%s: %s vs %s", e->name,
                 e->golden_value ? e->golden_value->value : "(none)", e->actual_value ? e->actual_value->value : "(none)");
    }
    char buf[512];
    int differ = dck_layouts_differ(found[1] ? first[1] : NULL, found[0] ? first[0] : NULL, manifest_name_at, g,
                                    g->nt + g->nv, a, a->nt + a->nv, "the golden", "the checkpoint", buf, sizeof buf);
    if (why && why_len) snprintf(why, why_len, "%s", buf);
    size_t k = 0, cap = 0;
    for (size_t i = 0; i < r->n; i++) {
        const dck_cmp_entry *e = &r->entries[i];
        bool one_side = e->kind == DCK_CMP_MISSING || e->kind == DCK_CMP_EXTRA ||
                        (e->kind == DCK_CMP_VALUE && (!e->golden_value || !e->actual_value));
        if (e->kind != DCK_CMP_FILE && dck_layout_set_aside(e->name, one_side, differ)) {
            dck_status s = dck_grow((void **)&aside->entries, &cap, aside->n + 1, sizeof *aside->entries);
            if (s) {
                dck_cmp_result_release(aside);
                return s;
            }
            aside->entries[aside->n++] = *e;
        } else
            r->entries[k++] = *e;
    }
    r->n = k;
    return DCK_OK;
}

void dck_cmp_result_release(dck_cmp_result *r) {
    if (!r) return;
    free(r->entries);
    memset(r, 0, sizeof *r);
}

/* Merging legacy Megatron-LM rank directories (options.megatron_merge):
 * the TP=2 x PP=2 tree of tests/fixtures/megatron_tp2pp2 (written by real
 * PyTorch, see make_fixtures.py) must give the digests of the same model
 * built whole as safetensors; concatenation along dims 0 and 1 checked
 * against bytes put together here; replicated tensors that differ, shards
 * whose shapes disagree, incomplete rank grids and bad split rules are
 * errors that name the tensor, the rule and the rank directories. */
#include "testutil.h"
#include "fixtures.h"
#include "formats/formats.h"

#include <jansson.h>

#define TREE "megatron_tp2pp2"
#define LM "model.language_model."

static dck_manifest *hash_opts(const char *path, int merge, const char *const *rules, size_t nrules,
                               dck_status *st) {
    dck_options o;
    dck_options_init(&o);
    o.threads = 2;
    o.megatron_merge = merge;
    o.tp_split_rules = rules;
    o.ntp_split_rules = nrules;
    dck_manifest *m = NULL;
    const char *p[] = {path};
    *st = dck_hash_paths(p, 1, &o, &m);
    return m;
}

static dck_manifest *must_hash(const char *path, int merge) {
    dck_status s;
    dck_manifest *m = hash_opts(path, merge, NULL, 0, &s);
    if (s) ck_abort_msg("%s: %s", path, dck_last_error());
    return m;
}


/* ------------------------------------------------------------------ the whole model */

/* TREE.values.json names the values per rank directory. Merged, the
 * common state (outside optimizer and rng_state, the same in every rank
 * directory: checked here) is named once without the rank prefix: the
 * values expected then. */
static json_t *merged_values(void) {
    json_error_t jerr;
    json_t *want = json_load_file(fx(TREE ".values.json"), 0, &jerr);
    ck_assert_msg(want != NULL, "%s: %s", TREE ".values.json", jerr.text);
    json_t *out = json_object();
    const char *k;
    json_t *v;
    json_object_foreach(want, k, v) {
        const char *dot = strchr(k, '.');
        if (!strncmp(k, "mp_rank_", 8) && dot && strncmp(dot + 1, "optimizer.", 10) &&
            strncmp(dot + 1, "rng_state.", 10)) {
            json_t *had = json_object_get(out, dot + 1);
            ck_assert_msg(!had || json_equal(had, v), "%s differs between rank directories", dot + 1);
            json_object_set(out, dot + 1, v);
        } else
            json_object_set(out, k, v);
    }
    json_decref(want);
    return out;
}

START_TEST(merge_tp2pp2_is_the_whole_model) {
    dck_manifest *a = must_hash(fx(TREE), 1), *b = must_hash(fx(TREE ".safetensors"), 0);
    same_tensors(a, b, TREE " merged vs " TREE ".safetensors");
    json_t *want = merged_values();
    ck_assert_uint_eq(dck_manifest_value_count(a), json_object_size(want));
    for (size_t i = 0; i < dck_manifest_value_count(a); i++) {
        const dck_manifest_value *v = dck_manifest_value_at(a, i);
        json_t *e = json_object_get(want, v->name);
        ck_assert_msg(e && !strcmp(json_string_value(e), v->value), "value %s = %s", v->name, v->value);
    }
    json_decref(want);
    /* stage 1's local layer 0 is global layer 2 (stage 0 holds 2); no layer 3 */
    const dck_manifest_tensor *t = dck_manifest_find_tensor(a, LM "encoder.layers.2.mlp.dense_4h_to_h.weight");
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(t->shape[0], 4);
    ck_assert_uint_eq(t->shape[1], 8); /* two [4, 4] shards along dim 1 */
    ck_assert_ptr_null(dck_manifest_find_tensor(a, LM "encoder.layers.3.input_norm.weight"));
    ck_assert_ptr_nonnull(dck_manifest_find_tensor(a, LM "encoder.final_norm.weight"));
    t = dck_manifest_find_tensor(a, LM "embedding.word_embeddings.weight");
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(t->shape[0], 20);
    /* optimizer and RNG state stay per rank */
    t = dck_manifest_find_tensor(a, "mp_rank_01_001.distrib_optim.0.exp_avg");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->group, DCK_GROUP_OPTIMIZER);
    t = dck_manifest_find_tensor(a, "mp_rank_01_000.rng_state.0.cuda_rng_state");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->group, DCK_GROUP_RNG);
    ck_assert_ptr_nonnull(dck_manifest_find_tensor(a, "mp_rank_00_001.optimizer.optimizer.state.0.exp_avg"));
    /* no model tensor left under a rank name; every file still listed */
    for (size_t i = 0; i < dck_manifest_tensor_count(a); i++)
        ck_assert_msg(!strstr(dck_manifest_tensor_at(a, i)->name, ".model."), "%s",
                      dck_manifest_tensor_at(a, i)->name);
    ck_assert_uint_eq(dck_manifest_file_count(a), 8);
    dck_manifest_free(a);
    dck_manifest_free(b);
}
END_TEST

START_TEST(merge_off_keeps_rank_names) {
    dck_manifest *m = must_hash(fx(TREE), 0);
    const dck_manifest_tensor *t =
        dck_manifest_find_tensor(m, "mp_rank_01_001.model.language_model.encoder.layers.0.mlp.dense_4h_to_h.weight");
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(t->shape[1], 4);
    ck_assert_ptr_null(dck_manifest_find_tensor(m, LM "encoder.layers.0.input_norm.weight"));
    dck_manifest_free(m);
}
END_TEST

/* ------------------------------------------------------------------ concatenation, by hand */

/* Logical bytes of tensor NAME of the checkpoint at path (opened as is). */
static void *tensor_bytes(const char *path, const char *name, dck_tensor_info *info) {
    dck_checkpoint *ck;
    const char *p[] = {path};
    ck_assert_msg(dck_checkpoint_open(p, 1, NULL, &ck) == DCK_OK, "%s", dck_last_error());
    long i = dck_checkpoint_find(ck, name);
    ck_assert_msg(i >= 0, "%s: no %s", path, name);
    *info = *dck_checkpoint_tensor(ck, (size_t)i);
    info->name = info->source = NULL;
    void *b = malloc(info->nbytes ? info->nbytes : 1);
    ck_assert_int_eq(dck_checkpoint_read(ck, (size_t)i, 0, b, info->nbytes), DCK_OK);
    dck_checkpoint_free(ck);
    return b;
}

/* The digest of two rank tensors of the unmerged tree concatenated along
 * dim (0 or 1 of a 2-D tensor, or 0 of a 1-D one). */
static dck_digest concat_digest(const char *tree, const char *r0, const char *r1, const char *local, int dim,
                                uint64_t *shape_out) {
    char n0[512], n1[512];
    snprintf(n0, sizeof n0, "%s.%s", r0, local);
    snprintf(n1, sizeof n1, "%s.%s", r1, local);
    dck_tensor_info a, b;
    uint8_t *x = tensor_bytes(tree, n0, &a), *y = tensor_bytes(tree, n1, &b);
    ck_assert_uint_eq(a.nbytes, b.nbytes);
    uint8_t *z = malloc(a.nbytes * 2);
    uint64_t shape[2] = {a.shape[0], a.ndim > 1 ? a.shape[1] : 1};
    if (dim == 0) {
        memcpy(z, x, a.nbytes);
        memcpy(z + a.nbytes, y, a.nbytes);
    } else { /* row by row: rank 0's columns, then rank 1's */
        size_t row = a.nbytes / shape[0];
        for (uint64_t r = 0; r < shape[0]; r++) {
            memcpy(z + 2 * r * row, x + r * row, row);
            memcpy(z + (2 * r + 1) * row, y + r * row, row);
        }
    }
    memcpy(shape_out, a.shape, sizeof(uint64_t) * (size_t)a.ndim);
    shape_out[dim] *= 2;
    dck_digest d;
    ck_assert_int_eq(dck_digest_buffer(a.dtype, shape_out, a.ndim, z, a.nbytes * 2, 1, &d), DCK_OK);
    free(x);
    free(y);
    free(z);
    return d;
}

static void expect_digest(const dck_manifest *m, const char *name, dck_digest want, const uint64_t *shape) {
    const dck_manifest_tensor *t = dck_manifest_find_tensor(m, name);
    ck_assert_msg(t != NULL, "no %s", name);
    for (int d = 0; d < t->ndim; d++) ck_assert_uint_eq(t->shape[d], shape[d]);
    ck_assert_msg(dck_digest_equal(t->digest, want), "%s: %s, concatenated %s", name, tu_hex(t->digest),
                  tu_hex(want));
}

/* TP only (mp_rank_XX): the older fixture tree; split along dims 0 and 1. */
START_TEST(merge_tp_only_concatenates) {
    const char *tree = fx("megatron");
    dck_manifest *m = must_hash(tree, 1);
    uint64_t shape[DCK_MAX_DIMS];
    dck_digest d = concat_digest(tree, "mp_rank_00", "mp_rank_01", LM "embedding.word_embeddings.weight", 0, shape);
    expect_digest(m, LM "embedding.word_embeddings.weight", d, shape);
    ck_assert_uint_eq(shape[0], 16);
    d = concat_digest(tree, "mp_rank_00", "mp_rank_01", LM "encoder.layers.0.mlp.dense_4h_to_h.weight", 1, shape);
    expect_digest(m, LM "encoder.layers.0.mlp.dense_4h_to_h.weight", d, shape); /* BF16 rows of 16 bytes */
    ck_assert_uint_eq(shape[1], 16);
    d = concat_digest(tree, "mp_rank_00", "mp_rank_01", LM "encoder.layers.0.self_attention.query_key_value.weight",
                      0, shape);
    expect_digest(m, LM "encoder.layers.0.self_attention.query_key_value.weight", d, shape);
    ck_assert_uint_eq(dck_manifest_tensor_count(m), 3 + 2 * 8); /* 3 merged + 8 per rank (optimizer, RNG) */
    dck_manifest_free(m);
}
END_TEST

/* User rules come before the built-in ones: a replicated norm split along
 * dim 0 is its two (equal) copies end to end; a split weight declared
 * replicated is a mismatch. */
START_TEST(merge_user_rules_first) {
    const char *tree = fx(TREE);
    const char *split_norm[] = {"*.layers.1.input_norm.weight=0"};
    dck_status s;
    dck_manifest *m = hash_opts(tree, 1, split_norm, 1, &s);
    ck_assert_msg(s == DCK_OK, "%s", dck_last_error());
    uint64_t shape[DCK_MAX_DIMS];
    dck_digest d = concat_digest(tree, "mp_rank_00_000", "mp_rank_01_000",
                                 "model.language_model.encoder.layers.1.input_norm.weight", 0, shape);
    expect_digest(m, LM "encoder.layers.1.input_norm.weight", d, shape);
    ck_assert_uint_eq(shape[0], 8);
    /* the other layers' norms: still replicated */
    ck_assert_uint_eq(dck_manifest_find_tensor(m, LM "encoder.layers.0.input_norm.weight")->shape[0], 4);
    dck_manifest_free(m);

    const char *none[] = {"*.mlp.dense_4h_to_h.weight=none"};
    m = hash_opts(tree, 1, none, 1, &s);
    ck_assert_int_eq(s, DCK_ERR_MISMATCH);
    ck_assert_ptr_null(m);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "mlp.dense_4h_to_h.weight"));
}
END_TEST

START_TEST(split_rules_defaults) {
    static const struct {
        const char *name;
        int dim;
    } cases[] = {
        {LM "encoder.layers.7.self_attention.query_key_value.weight", 0},
        {LM "encoder.layers.7.self_attention.query_key_value.bias", 0},
        {LM "encoder.layers.7.self_attention.dense.weight", 1},
        {LM "encoder.layers.7.self_attention.dense.bias", -1},
        {LM "encoder.layers.7.mlp.dense_h_to_4h.weight", 0},
        {LM "encoder.layers.7.mlp.dense_h_to_4h.bias", 0},
        {LM "encoder.layers.7.mlp.dense_4h_to_h.weight", 1},
        {LM "encoder.layers.7.mlp.dense_4h_to_h.bias", -1},
        {LM "encoder.layers.7.input_norm.weight", -1},
        {LM "encoder.final_norm.bias", -1},
        {LM "embedding.word_embeddings.weight", 0},
        {LM "embedding.position_embeddings.weight", -1},
        {LM "output_layer.weight", 0},
        {"model.word_embeddings_for_head.weight", 0},
        /* Megatron-core names */
        {"model.decoder.layers.3.self_attention.linear_qkv.weight", 0},
        {"model.decoder.layers.3.self_attention.linear_qkv.layer_norm_weight", -1},
        {"model.decoder.layers.3.self_attention.linear_proj.weight", 1},
        {"model.decoder.layers.3.self_attention.linear_proj.bias", -1},
        {"model.decoder.layers.3.mlp.linear_fc1.weight", 0},
        {"model.decoder.layers.3.mlp.linear_fc2.weight", 1},
        {"model.embedding.word_embeddings.weight", 0},
        {"model.output_layer.weight", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int dim = 99;
        const char *rule = NULL;
        ck_assert_int_eq(dck_megatron_split_dim(NULL, cases[i].name, &dim, &rule), DCK_OK);
        ck_assert_msg(dim == cases[i].dim, "%s: dim %d, expected %d", cases[i].name, dim, cases[i].dim);
        ck_assert_msg((rule == NULL) == (dim < 0), "%s: rule %s", cases[i].name, rule ? rule : "NULL");
    }
    dck_options o;
    dck_options_init(&o);
    const char *rules[] = {"*.dense.weight=none", "*norm.weight=0"};
    o.megatron_merge = 1;
    o.tp_split_rules = rules;
    o.ntp_split_rules = 2;
    int dim;
    const char *rule;
    ck_assert_int_eq(dck_megatron_split_dim(&o, LM "encoder.layers.1.self_attention.dense.weight", &dim, &rule), DCK_OK);
    ck_assert_int_eq(dim, -1);
    ck_assert_str_eq(rule, "*.dense.weight=none");
    ck_assert_int_eq(dck_megatron_split_dim(&o, LM "encoder.final_norm.weight", &dim, &rule), DCK_OK);
    ck_assert_int_eq(dim, 0);
    ck_assert_str_eq(rule, "*norm.weight=0");
    ck_assert_int_eq(dck_megatron_split_dim(&o, LM "output_layer.weight", &dim, &rule), DCK_OK);
    ck_assert_int_eq(dim, 0);
    ck_assert_str_eq(rule, "*output_layer.weight=0");
}
END_TEST

/* dck_diff_paths reads both sides with open_options: the merged tree and
 * the whole model have the same tensors; every value the merged tree
 * records (merged_values) is reported, absent from the safetensors side. */
START_TEST(diff_open_options) {
    dck_options ro;
    dck_options_init(&ro);
    ro.megatron_merge = 1;
    dck_diff_options o;
    dck_diff_options_init(&o);
    o.threads = 2;
    o.open_options = &ro;
    dck_diff_result r;
    ck_assert_msg(dck_diff_paths(fx(TREE), fx(TREE ".safetensors"), &o, &r) == DCK_OK, "%s", dck_last_error());
    /* 38 merged weights and the 24 per-rank optimizer and RNG tensors the
     * safetensors file stores under the same rank names: the stored layouts
     * agree, so all 62 are compared (equal) */
    ck_assert_uint_eq(r.ntensors, 62);
    ck_assert_uint_eq(r.count[DCK_DIFF_EQUAL], 62);
    ck_assert_uint_eq(r.naside_tensors, 0);
    /* a layout value on one side only (args.tensor_model_parallel_size) is
     * a claim, not what is stored: it alone is set aside, and that is no
     * OK (equal is 0 without accept_layout_state) */
    json_t *want = merged_values();
    size_t nwant = 0, naside = 0;
    const char *k;
    json_t *v;
    json_object_foreach(want, k, v) {
        int aside = dck_layout_set_aside(k, true, DCK_LAYOUTS_CLAIMED);
        nwant += !aside;
        naside += aside;
    }
    ck_assert_uint_eq(r.naside_values, naside);
    ck_assert_uint_gt(naside, 0);
    ck_assert_msg(r.nvalues == nwant, "%zu values differ, expected all %zu of the tree's", r.nvalues, nwant);
    for (size_t i = 0; i < r.nvalues; i++) {
        json_t *e = json_object_get(want, r.values[i].name);
        ck_assert_msg(e != NULL, "unexpected value %s", r.values[i].name);
        ck_assert_msg(r.values[i].a && !strcmp(r.values[i].a, json_string_value(e)), "%s: A %s, expected %s",
                      r.values[i].name, r.values[i].a ? r.values[i].a : "(absent)", json_string_value(e));
        ck_assert_msg(r.values[i].b == NULL, "%s: B %s, expected absent", r.values[i].name, r.values[i].b);
    }
    json_decref(want);
    ck_assert(!r.equal);
    dck_diff_result_release(&r);
    /* without merging: rank names on one side, whole names on the other */
    o.open_options = NULL;
    ck_assert_int_eq(dck_diff_paths(fx(TREE), fx(TREE ".safetensors"), &o, &r), DCK_OK);
    ck_assert_uint_eq(r.count[DCK_DIFF_EQUAL], 16 + 8); /* optimizer and RNG only */
    dck_diff_result_release(&r);
    /* the iteration: iter 10 of the root is its iter_0000010 */
    char it10[4200];
    snprintf(it10, sizeof it10, "%s/iter_0000010", fx("megatron"));
    dck_options_init(&ro);
    ro.iteration = 10;
    o.open_options = &ro;
    ck_assert_int_eq(dck_diff_paths(fx("megatron"), it10, &o, &r), DCK_OK);
    ck_assert_uint_eq(r.count[DCK_DIFF_EQUAL], r.ntensors);
    ck_assert_uint_eq(r.nvalues, 1); /* only the root records megatron.iteration */
    ck_assert_str_eq(r.values[0].name, "megatron.iteration");
    dck_diff_result_release(&r);
    o.open_options = NULL; /* the latest, 20: the ranks' recorded iterations differ */
    ck_assert_int_eq(dck_diff_paths(fx("megatron"), it10, &o, &r), DCK_OK);
    int found = 0;
    for (size_t i = 0; i < r.nvalues; i++)
        if (!strcmp(r.values[i].name, "mp_rank_00.iteration")) {
            ck_assert_str_eq(r.values[i].a, "20");
            ck_assert_str_eq(r.values[i].b, "10");
            found = 1;
        }
    ck_assert(found);
    dck_diff_result_release(&r);
}
END_TEST

/* ------------------------------------------------------------------ errors */

/* A copy of the tree in a temporary directory, with rank 01_000's
 * model_optim_rng.pt replaced by tests/fixtures/megatron_tp2pp2_bad/BAD
 * (NULL: unchanged). */
static char *tree_copy(const char *tmp, const char *bad) {
    char cmd[9000];
    char *dst = tu_path(tmp, "tree");
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", fx(TREE), dst);
    ck_assert_int_eq(system(cmd), 0);
    if (bad) {
        char b[300];
        snprintf(b, sizeof b, TREE "_bad/%s", bad);
        snprintf(cmd, sizeof cmd, "cp '%s' '%s/iter_0000007/mp_rank_01_000/model_optim_rng.pt'", fx(b), dst);
        ck_assert_int_eq(system(cmd), 0);
    }
    return dst;
}

static void expect_error(const char *path, int merge, const char *const *rules, size_t n, dck_status want,
                         const char *const *needles) {
    dck_status s;
    dck_manifest *m = hash_opts(path, merge, rules, n, &s);
    ck_assert_msg(s == want, "%s: status %d (%s), expected %d", path, s, dck_last_error(), want);
    ck_assert_ptr_null(m);
    for (; *needles; needles++)
        ck_assert_msg(strstr(dck_last_error(), *needles) != NULL, "'%s' not in: %s", *needles, dck_last_error());
}

START_TEST(merge_replicated_mismatch) {
    char *tmp = tu_tmpdir(), *tree = tree_copy(tmp, "replica_differs.pt");
    const char *needles[] = {LM "encoder.layers.1.input_norm.weight", "mp_rank_00_000", "mp_rank_01_000",
                             "differs", NULL};
    expect_error(tree, 1, NULL, 0, DCK_ERR_MISMATCH, needles);
    /* per rank, the tree reads: the check is the merge's */
    dck_manifest *m = must_hash(tree, 0);
    dck_manifest_free(m);
    free(tree);
    tu_tmpdir_free(tmp);
}
END_TEST

START_TEST(merge_shard_shapes_disagree) {
    char *tmp = tu_tmpdir(), *tree = tree_copy(tmp, "shape_differs.pt");
    const char *needles[] = {LM "encoder.layers.0.mlp.dense_h_to_4h.weight", "[4, 4] in mp_rank_00_000",
                             "[3, 4] in mp_rank_01_000", "*.mlp.dense_h_to_4h.weight=0", NULL};
    expect_error(tree, 1, NULL, 0, DCK_ERR_LAYOUT, needles);
    free(tree);
    tu_tmpdir_free(tmp);
}
END_TEST

START_TEST(merge_bad_rules) {
    static const struct {
        const char *rule;
        const char *needle;
    } bad[] = {
        {"no-equals-sign", "expected GLOB=DIM"},
        {"=0", "expected GLOB=DIM"},
        {"*.weight=", "neither a dimension number nor 'none'"},
        {"*.weight=x", "neither a dimension number nor 'none'"},
        {"*.weight=-1", "neither a dimension number nor 'none'"},
        {"*.weight=1 ", "neither a dimension number nor 'none'"},
        {"*.weight=16", "out of range"},
        {"*.weight=1000", "neither a dimension number nor 'none'"},
        /* in range for the rule, not for the tensor */
        {"*input_norm.weight=1", "has 1 dimension"},
        {"*dense_4h_to_h.weight=2", "has 2 dimensions"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *rules[] = {bad[i].rule};
        const char *needles[] = {bad[i].rule, bad[i].needle, NULL};
        expect_error(fx(TREE), 1, rules, 1, DCK_ERR_INVALID, needles);
    }
    /* rules without merging; a NULL array */
    const char *rules[] = {"*.weight=0"};
    const char *n1[] = {"merging", NULL};
    expect_error(fx(TREE), 0, rules, 1, DCK_ERR_INVALID, n1);
    const char *n2[] = {"NULL", NULL};
    expect_error(fx(TREE), 1, NULL, 1, DCK_ERR_INVALID, n2);
    /* a bad rule is an error whatever the path holds */
    const char *bad_rule[] = {"x"};
    const char *n3[] = {"'x'", NULL};
    expect_error(fx(TREE ".safetensors"), 1, bad_rule, 1, DCK_ERR_INVALID, n3);
}
END_TEST

START_TEST(merge_rank_grid) {
    char *tmp = tu_tmpdir(), *tree = tree_copy(tmp, NULL);
    char cmd[9000];
    /* a missing rank directory */
    snprintf(cmd, sizeof cmd, "mv '%s/iter_0000007/mp_rank_01_001' '%s/saved'", tree, tmp);
    ck_assert_int_eq(system(cmd), 0);
    const char *n1[] = {"mp_rank_01_001 is missing", "2 tensor-parallel x 2 pipeline", NULL};
    expect_error(tree, 1, NULL, 0, DCK_ERR_FORMAT, n1);
    dck_manifest_free(must_hash(tree, 0)); /* per rank: fine */
    /* with and without a pipeline rank */
    snprintf(cmd, sizeof cmd, "mv '%s/saved' '%s/iter_0000007/mp_rank_01'", tmp, tree);
    ck_assert_int_eq(system(cmd), 0);
    const char *n2[] = {"with and without a pipeline rank", "mp_rank_01", NULL};
    expect_error(tree, 1, NULL, 0, DCK_ERR_FORMAT, n2);
    /* one rank twice */
    snprintf(cmd, sizeof cmd, "mv '%s/iter_0000007/mp_rank_01' '%s/iter_0000007/mp_rank_01_001' && "
             "cp -r '%s/iter_0000007/mp_rank_01_001' '%s/iter_0000007/mp_rank_1_001'", tree, tree, tree, tree);
    ck_assert_int_eq(system(cmd), 0);
    const char *n3[] = {"mp_rank_01_001 and mp_rank_1_001 are the same rank", NULL};
    expect_error(tree, 1, NULL, 0, DCK_ERR_FORMAT, n3);
    /* a tensor on one TP rank only: rank 01_000 given stage 1's file */
    snprintf(cmd, sizeof cmd, "rm -r '%s/iter_0000007/mp_rank_1_001' && cp '%s/iter_0000007/mp_rank_01_001/model_optim_rng.pt' "
             "'%s/iter_0000007/mp_rank_01_000/'", tree, tree, tree);
    ck_assert_int_eq(system(cmd), 0);
    const char *n4[] = {"is in mp_rank_00_000 but not in mp_rank_01_000", NULL};
    expect_error(tree, 1, NULL, 0, DCK_ERR_LAYOUT, n4);
    free(tree);
    tu_tmpdir_free(tmp);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("readers_megatron");
    TCase *c = tcase_create("merge");
    tcase_set_timeout(c, 60);
    tcase_add_test(c, merge_tp2pp2_is_the_whole_model);
    tcase_add_test(c, merge_off_keeps_rank_names);
    tcase_add_test(c, merge_tp_only_concatenates);
    tcase_add_test(c, merge_user_rules_first);
    tcase_add_test(c, split_rules_defaults);
    tcase_add_test(c, diff_open_options);
    tcase_add_test(c, merge_replicated_mismatch);
    tcase_add_test(c, merge_shard_shapes_disagree);
    tcase_add_test(c, merge_bad_rules);
    tcase_add_test(c, merge_rank_grid);
    suite_add_tcase(s, c);
    return s;
}

int main(void) { return tu_run(suite()); }

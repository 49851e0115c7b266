/* The sharded layouts (detcheck-digest(7), SHARDED LAYOUT), through the library, from the real files of
 * tests/fixtures/layouts (make_fixtures.py, fx_layouts): .bin shards behind
 * an index read by content, groups by file role, namespaces for files that
 * share names, safetensors preferred over .bin, complex tensors, shared
 * storage (tied weights). tests/cli/test_layouts.sh covers the CLI side. */
#include "fixtures.h"
#include "core/core.h"
#include "common/element.h"

static dck_status open1(const char *path, dck_checkpoint **ck) {
    dck_options o;
    dck_options_init(&o);
    o.threads = 2;
    const char *p[] = {path};
    return dck_checkpoint_open(p, 1, &o, ck);
}

static dck_manifest *hash1(const char *path) {
    dck_options o;
    dck_options_init(&o);
    o.threads = 2;
    dck_manifest *m = NULL;
    const char *p[] = {path};
    ck_assert_msg(dck_hash_paths(p, 1, &o, &m) == DCK_OK, "%s: %s", path, dck_last_error());
    return m;
}

START_TEST(file_roles) {
    static const struct {
        const char *path;
        int group;
    } cases[] = {
        {"ckpt/checkpoint-500/optimizer.pt", DCK_GROUP_OPTIMIZER},
        {"optimizer_1.bin", DCK_GROUP_OPTIMIZER},
        {"bf16_zero_pp_rank_3_mp_rank_00_optim_states.pt", DCK_GROUP_OPTIMIZER},
        {"scheduler.pt", DCK_GROUP_OTHER},
        {"rng_state.pth", DCK_GROUP_RNG},
        {"rng_state_7.pth", DCK_GROUP_RNG},
        {"random_states_0.pkl.zst", DCK_GROUP_RNG},
        {"model.safetensors", -1}, /* weight files: the names decide */
        {"model-00002-of-00003.safetensors", -1},
        {"model_optim_rng.pt", -1},
        {"checkpoint.pt", -1},
        {"optimizer.pt.bak", -1},
        {"rng_state_x.pth", -1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ck_assert_msg(dck_file_role_group(cases[i].path) == cases[i].group, "%s: %d", cases[i].path,
                      dck_file_role_group(cases[i].path));
}
END_TEST

/* Trainer checkpoint-N/: the RNG state's "cpu" is rng, the optimizer's
 * "state.0.step" optimizer (the names alone said weights and other). */
START_TEST(trainer_groups) {
    dck_manifest *m = hash1(fx("layouts/trainer/checkpoint-1"));
    const struct {
        const char *name;
        dck_group g;
    } want[] = {{"cpu", DCK_GROUP_RNG},
                {"numpy.1", DCK_GROUP_RNG},
                {"state.0.step", DCK_GROUP_OPTIMIZER},
                {"state.0.exp_avg", DCK_GROUP_OPTIMIZER},
                {"transformer.wte.weight", DCK_GROUP_WEIGHTS}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const dck_manifest_tensor *t = dck_manifest_find_tensor(m, want[i].name);
        ck_assert_msg(t != NULL, "%s missing", want[i].name);
        ck_assert_msg(t->group == want[i].g, "%s: group %s", want[i].name, dck_group_name(t->group));
    }
    dck_manifest_free(m);
}
END_TEST

/* pytorch_model.bin.index.json: its .bin shards give the digests of the
 * safetensors save_pretrained wrote of the same model, plus the tied
 * lm_head.weight, which shares transformer.wte.weight's storage. */
START_TEST(bin_index_and_aliases) {
    dck_manifest *bin = hash1(fx("layouts/hf_bin/pytorch_model.bin.index.json"));
    dck_manifest *st = hash1(fx("layouts/hf_bin.safetensors"));
    ck_assert_uint_eq(dck_manifest_tensor_count(bin), dck_manifest_tensor_count(st) + 1);
    for (size_t i = 0; i < dck_manifest_tensor_count(st); i++) {
        const dck_manifest_tensor *a = dck_manifest_tensor_at(st, i);
        const dck_manifest_tensor *b = dck_manifest_find_tensor(bin, a->name);
        ck_assert_msg(b && dck_digest_equal(a->digest, b->digest), "%s", a->name);
    }
    ck_assert_ptr_nonnull(dck_manifest_find_tensor(bin, "lm_head.weight"));
    dck_manifest_free(bin);
    dck_manifest_free(st);

    dck_checkpoint *ck;
    ck_assert_msg(open1(fx("layouts/hf_bin"), &ck) == DCK_OK, "%s", dck_last_error());
    size_t n = dck_checkpoint_tensor_count(ck);
    long *al = malloc(n * sizeof *al);
    ck_assert_int_eq(dck_ck_storage_aliases(ck, al), DCK_OK);
    long lm = dck_checkpoint_find(ck, "lm_head.weight"), wte = dck_checkpoint_find(ck, "transformer.wte.weight");
    ck_assert_int_ge(lm, 0);
    ck_assert_int_eq(al[lm], wte);
    ck_assert_int_eq(al[wte], lm);
    for (size_t i = 0; i < n; i++)
        if ((long)i != lm && (long)i != wte) ck_assert_msg(al[i] < 0, "%s", dck_checkpoint_tensor(ck, i)->name);
    free(al);
    dck_checkpoint_free(ck);

    /* views of one storage; safetensors cannot share */
    ck_assert_int_eq(open1(fx("views.pt"), &ck), DCK_OK);
    n = dck_checkpoint_tensor_count(ck);
    al = malloc(n * sizeof *al);
    ck_assert_int_eq(dck_ck_storage_aliases(ck, al), DCK_OK);
    ck_assert_int_ge(al[dck_checkpoint_find(ck, "shared_a")], 0);
    ck_assert_int_lt(al[dck_checkpoint_find(ck, "expanded")], 0);
    free(al);
    dck_checkpoint_free(ck);
    ck_assert_int_eq(open1(fx("views.safetensors"), &ck), DCK_OK);
    n = dck_checkpoint_tensor_count(ck);
    al = malloc(n * sizeof *al);
    ck_assert_int_eq(dck_ck_storage_aliases(ck, al), DCK_OK);
    for (size_t i = 0; i < n; i++) ck_assert_int_lt(al[i], 0);
    free(al);
    dck_checkpoint_free(ck);
}
END_TEST

/* A snapshot with model.safetensors and pytorch_model.bin: the safetensors,
 * with a note. */
static char notes[4096];
static void note(void *ctx, const char *msg) {
    (void)ctx;
    strncat(notes, msg, sizeof notes - strlen(notes) - 2);
    strcat(notes, "\n");
}

START_TEST(snapshot_prefers_safetensors) {
    dck_options o;
    dck_options_init(&o);
    o.notice = note;
    notes[0] = 0;
    const char *p[] = {fx("layouts/hf_snapshot")};
    dck_checkpoint *ck;
    ck_assert_msg(dck_checkpoint_open(p, 1, &o, &ck) == DCK_OK, "%s", dck_last_error());
    ck_assert_int_lt(dck_checkpoint_find(ck, "lm_head.weight"), 0);
    ck_assert_ptr_nonnull(strstr(notes, "pytorch_model.bin: skipped: model.safetensors preferred"));
    dck_checkpoint_free(ck);
}
END_TEST

/* Files that share names: a namespace per file, only for those files. */
START_TEST(namespaces_when_names_collide) {
    dck_options o;
    dck_options_init(&o);
    o.notice = note;
    notes[0] = 0;
    dck_checkpoint *ck;
    const char *p[] = {fx("layouts/model_optim")};
    ck_assert_msg(dck_checkpoint_open(p, 1, &o, &ck) == DCK_OK, "%s", dck_last_error());
    int model_step = 0, optim_step = 0, plain = 0;
    for (size_t i = 0; i < dck_checkpoint_value_count(ck); i++) {
        const char *n = dck_checkpoint_value(ck, i)->name;
        model_step += !strcmp(n, "model.step");
        optim_step += !strcmp(n, "optim.step");
        plain += !strcmp(n, "step");
    }
    ck_assert_int_eq(model_step + optim_step, 2);
    ck_assert_int_eq(plain, 0);
    ck_assert_int_ge(dck_checkpoint_find(ck, "optim.optimizer.state.0.exp_avg"), 0);
    dck_checkpoint_free(ck);

    /* DeepSpeed global_stepN/: its own reader (deepspeed.c), which refuses
     * this hand-written one (no param_shapes) and reassembles a real one */
    p[0] = fx("layouts/deepspeed/global_step2");
    ck_assert_int_eq(dck_checkpoint_open(p, 1, &o, &ck), DCK_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "mp_rank_00_model_states.pt: no param_shapes"));
    p[0] = fx("mcore/ds_zero2_dp2");
    ck_assert_msg(dck_checkpoint_open(p, 1, &o, &ck) == DCK_OK, "%s", dck_last_error());
    ck_assert_int_ge(dck_checkpoint_find(ck, "optimizer.state.exp_avg.0.weight"), 0);
    long w = dck_checkpoint_find(ck, "module.0.weight");
    ck_assert_int_ge(w, 0);
    ck_assert_int_eq(dck_checkpoint_tensor(ck, (size_t)w)->group, DCK_GROUP_WEIGHTS);
    dck_checkpoint_free(ck);

    /* no collision: no name changes (the Trainer folder) */
    p[0] = fx("layouts/trainer/checkpoint-1");
    ck_assert_int_eq(dck_checkpoint_open(p, 1, &o, &ck), DCK_OK);
    ck_assert_int_ge(dck_checkpoint_find(ck, "cpu"), 0);
    dck_checkpoint_free(ck);

    /* stems that collide too: an error naming both files */
    char *dir = tu_tmpdir(), *a = tu_path(dir, "model.pt"), *b = tu_path(dir, "model.bin");
    FILE *f = fopen(fx("layouts/model_optim/model.pt"), "rb");
    ck_assert_ptr_nonnull(f);
    static char buf[1 << 16];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    tu_write(a, buf, len);
    tu_write(b, buf, len);
    p[0] = dir;
    ck_assert_int_eq(dck_checkpoint_open(p, 1, &o, &ck), DCK_ERR_LAYOUT);
    ck_assert_msg(strstr(dck_last_error(), "model.pt") && strstr(dck_last_error(), "model.bin"), "%s",
                  dck_last_error());
    free(a);
    free(b);
    tu_tmpdir_free(dir);
}
END_TEST

/* Complex tensors: the same digests from torch.save, NumPy (both byte
 * orders), safetensors and DCP; element helpers on the parts. */
START_TEST(complex_every_reader) {
    dck_manifest *pt = hash1(fx("layouts/complex.pt"));
    dck_manifest *npy = hash1(fx("layouts/complex.npy"));
    dck_manifest *npz = hash1(fx("layouts/complex.npz"));
    dck_manifest *st = hash1(fx("layouts/complex.safetensors"));
    dck_manifest *dcp = hash1(fx("layouts/complex_dcp"));
    const dck_manifest_tensor *c64 = dck_manifest_find_tensor(pt, "c64"), *c128 = dck_manifest_find_tensor(pt, "c128");
    ck_assert(c64 && c128);
    ck_assert_int_eq(c64->dtype, DCK_C64);
    ck_assert_int_eq(c128->dtype, DCK_C128);
    ck_assert(dck_digest_equal(c64->digest, dck_manifest_find_tensor(npy, "complex")->digest));
    ck_assert(dck_digest_equal(c64->digest, dck_manifest_find_tensor(npz, "c64_be")->digest));
    ck_assert(dck_digest_equal(c64->digest, dck_manifest_find_tensor(st, "c64")->digest));
    ck_assert(dck_digest_equal(c64->digest, dck_manifest_find_tensor(dcp, "c64")->digest));
    ck_assert(dck_digest_equal(c128->digest, dck_manifest_find_tensor(npz, "c128")->digest));
    ck_assert(dck_digest_equal(c128->digest, dck_manifest_find_tensor(dcp, "c128")->digest));
    const char *views[] = {"c64_t", "c64_row"};
    for (int i = 0; i < 2; i++)
        ck_assert(dck_digest_equal(dck_manifest_find_tensor(pt, views[i])->digest,
                                   dck_manifest_find_tensor(st, views[i])->digest));
    dck_manifest_free(pt);
    dck_manifest_free(npy);
    dck_manifest_free(npz);
    dck_manifest_free(st);
    dck_manifest_free(dcp);

    ck_assert_str_eq(dck_dtype_name(DCK_C64), "C64");
    ck_assert_uint_eq(dck_dtype_size(DCK_C128), 16);
    float z[2] = {1.5f, -2.0f}, w[2] = {1.5f, NAN};
    ck_assert_double_eq(dck_element_to_double(DCK_C64, z), 1.5);
    uint64_t u;
    ck_assert_int_eq(dck_ulp_distance(DCK_C64, z, w, &u), 0);
    dck_diff_stats s;
    dck_diff_stats_init(&s);
    dck_diff_elements(DCK_C64, z, w, 1, 0, NULL, &s);
    ck_assert_uint_eq(s.count, 2);
    ck_assert_uint_eq(s.diff_count, 1);
    ck_assert_uint_eq(s.nan_vs_number, 1);
    ck_assert_uint_eq(s.first_flat, 0);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("readers_layouts");
    TCase *c = tcase_create("layouts");
    tcase_set_timeout(c, 120);
    tcase_add_test(c, file_roles);
    tcase_add_test(c, trainer_groups);
    tcase_add_test(c, bin_index_and_aliases);
    tcase_add_test(c, snapshot_prefers_safetensors);
    tcase_add_test(c, namespaces_when_names_collide);
    tcase_add_test(c, complex_every_reader);
    suite_add_tcase(s, c);
    return s;
}

int main(void) { return tu_run(suite()); }

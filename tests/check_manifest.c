/* Manifests: YAML and JSON round trips, validation of hostile manifests,
 * comparison in model order. */
#include "testutil.h"
#include "formats/formats.h"

static dck_manifest *sample(int variant) {
    dck_manifest *m;
    ck_assert_int_eq(dck_manifest_create(&m), DCK_OK);
    const char *names[] = {"model.layers.10.w", "model.layers.2.w", "optimizer.state.0.exp_avg",
                           "rng.seed", "weird: name, with [yaml] {chars}", "12345"};
    for (int i = 0; i < 6; i++) {
        dck_manifest_tensor t;
        memset(&t, 0, sizeof t);
        t.name = names[i];
        t.group = dck_group_of_name(names[i]);
        t.dtype = i == 3 ? DCK_U8 : DCK_BF16;
        t.ndim = i % 3;
        t.shape[0] = 4096;
        t.shape[1] = 11;
        t.digest.high64 = 0x1111111111111111ULL * (uint64_t)(i + 1);
        t.digest.low64 = 0x0123456789abcdefULL + (uint64_t)i + (uint64_t)(variant == 1) * (i == 2);
        ck_assert_int_eq(dck_manifest_add_tensor(m, &t), DCK_OK);
    }
    /* an all-digit digest must survive YAML typing */
    dck_manifest_tensor t;
    memset(&t, 0, sizeof t);
    t.name = "digits";
    t.dtype = DCK_F32;
    dck_digest_from_hex("12345678901234567890123456789012", &t.digest);
    dck_manifest_add_tensor(m, &t);
    dck_manifest_file f = {"model-00001-of-00002.safetensors", 123, {1, 2}};
    dck_manifest_add_file(m, &f);
    dck_manifest_add_value(m, "iteration", variant == 2 ? "1001" : "1000");
    dck_manifest_add_value(m, "flag", "true");
    dck_manifest_set_meta(m, "tool", "detcheck test");
    ck_assert_int_eq(dck_manifest_finalize(m), DCK_OK);
    return m;
}

static void roundtrip(dck_format fmt) {
    dck_manifest *m = sample(0), *back;
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    ck_assert_int_eq(dck_manifest_write(m, fmt, mem), DCK_OK);
    fclose(mem);
    ck_assert_msg(dck_manifest_parse(buf, len, "mem", &back) == DCK_OK, "%s\n%s", dck_last_error(), buf);
    ck_assert_uint_eq(dck_manifest_tensor_count(back), dck_manifest_tensor_count(m));
    ck_assert(dck_digest_equal(dck_manifest_root(m), dck_manifest_root(back)));
    dck_cmp_result r;
    ck_assert_int_eq(dck_manifest_compare(m, back, 1, &r), DCK_OK);
    ck_assert_uint_eq(r.n, 0);
    ck_assert_uint_eq(r.tensors_equal, 7);
    dck_cmp_result_release(&r);
    ck_assert_str_eq(dck_manifest_get_meta(back, "tool"), "detcheck test");
    ck_assert_str_eq(dck_manifest_value_at(back, 1)->value, "1000");
    /* model order */
    ck_assert_str_eq(dck_manifest_tensor_at(back, 2)->name, "model.layers.2.w");
    ck_assert_str_eq(dck_manifest_tensor_at(back, 3)->name, "model.layers.10.w");
    free(buf);
    dck_manifest_free(m);
    dck_manifest_free(back);
}

START_TEST(test_yaml_roundtrip) { roundtrip(DCK_FORMAT_YAML); }
END_TEST
START_TEST(test_json_roundtrip) { roundtrip(DCK_FORMAT_JSON); }
END_TEST

START_TEST(test_compare) {
    dck_manifest *a = sample(0), *b = sample(1), *c = sample(2);
    dck_cmp_result r;
    ck_assert_int_eq(dck_manifest_compare(a, b, 0, &r), DCK_OK);
    ck_assert_uint_eq(r.n, 1);
    ck_assert_str_eq(r.entries[0].name, "optimizer.state.0.exp_avg");
    ck_assert_int_eq(r.entries[0].kind, DCK_CMP_DIGEST);
    dck_cmp_result_release(&r);
    ck_assert_int_eq(dck_manifest_compare(a, c, 0, &r), DCK_OK);
    ck_assert_uint_eq(r.n, 1);
    ck_assert_int_eq(r.entries[0].kind, DCK_CMP_VALUE);
    dck_cmp_result_release(&r);
    /* missing / extra / dtype / shape */
    dck_manifest *d;
    dck_manifest_create(&d);
    for (size_t i = 0; i < dck_manifest_tensor_count(a); i++) {
        dck_manifest_tensor t = *dck_manifest_tensor_at(a, i);
        if (!strcmp(t.name, "model.layers.2.w")) continue;
        if (!strcmp(t.name, "rng.seed")) t.dtype = DCK_I8;
        if (!strcmp(t.name, "model.layers.10.w")) { t.ndim = 1; t.shape[0] = 1; }
        dck_manifest_add_tensor(d, &t);
    }
    dck_manifest_tensor x;
    memset(&x, 0, sizeof x);
    x.name = "zzz.extra";
    dck_manifest_add_tensor(d, &x);
    dck_manifest_add_value(d, "iteration", "1000");
    dck_manifest_add_value(d, "flag", "true");
    dck_manifest_finalize(d);
    ck_assert_int_eq(dck_manifest_compare(a, d, 1, &r), DCK_OK);
    ck_assert_uint_eq(r.n, 5);
    ck_assert_str_eq(r.entries[0].name, "model.layers.2.w");
    ck_assert_int_eq(r.entries[0].kind, DCK_CMP_MISSING);
    ck_assert_int_eq(r.entries[1].kind, DCK_CMP_SHAPE);
    ck_assert_int_eq(r.entries[2].kind, DCK_CMP_DTYPE);
    ck_assert_int_eq(r.entries[3].kind, DCK_CMP_EXTRA);
    ck_assert_int_eq(r.entries[4].kind, DCK_CMP_FILE);
    dck_cmp_result_release(&r);
    dck_manifest_free(a);
    dck_manifest_free(b);
    dck_manifest_free(c);
    dck_manifest_free(d);
}
END_TEST

static void expect_parse_error(const char *text, dck_status want, const char *msg) {
    dck_manifest *m = NULL;
    dck_status s = dck_manifest_parse(text, strlen(text), "golden.yaml", &m);
    ck_assert_msg(s == want, "got %d (%s) for:\n%s", s, dck_last_error(), text);
    ck_assert_msg(strstr(dck_last_error(), msg) && strstr(dck_last_error(), "golden.yaml"),
                  "'%s' lacks '%s'", dck_last_error(), msg);
    ck_assert_ptr_null(m);
}

START_TEST(test_bad_manifests) {
    expect_parse_error("key: [unclosed", DCK_ERR_FORMAT, "not YAML");
    expect_parse_error("- a\n- b\n", DCK_ERR_FORMAT, "not a detcheck manifest");
    expect_parse_error("hello: world\n", DCK_ERR_FORMAT, "not a detcheck manifest");
    expect_parse_error("", DCK_ERR_FORMAT, "not a detcheck manifest");
    expect_parse_error("detcheck: 7\nroot: 00000000000000000000000000000000\ntensors: []\n",
                       DCK_ERR_UNSUPPORTED, "unknown manifest version 7");
    expect_parse_error("detcheck: 1\nroot: xyz\ntensors: []\n", DCK_ERR_FORMAT, "root");
    expect_parse_error("detcheck: 1\nroot: 99aabb\ntensors: []\n", DCK_ERR_FORMAT, "root");
    /* root of zero tensors is fixed; use it with a bad tensor digest */
    char root0[33];
    dck_digest_to_hex(dck_root_digest(NULL, NULL, 0), root0);
    char buf[1024];
    snprintf(buf, sizeof buf,
             "detcheck: 1\nroot: %s\ntensors:\n  - {name: a, group: weights, dtype: F32, shape: [1], digest: 0123}\n",
             root0);
    expect_parse_error(buf, DCK_ERR_FORMAT, "digest");
    snprintf(buf, sizeof buf,
             "detcheck: 1\nroot: %s\ntensors:\n  - {name: a, group: weights, dtype: F99, shape: [1], digest: 0123456789abcdef0123456789abcdef}\n",
             root0);
    expect_parse_error(buf, DCK_ERR_FORMAT, "unknown dtype");
    snprintf(buf, sizeof buf,
             "detcheck: 1\nroot: %s\ntensors:\n  - {name: a, group: weights, dtype: F32, shape: [-1], digest: 0123456789abcdef0123456789abcdef}\n",
             root0);
    expect_parse_error(buf, DCK_ERR_FORMAT, "shape");
    snprintf(buf, sizeof buf,
             "detcheck: 1\nroot: %s\ntensors: []\nfiles:\n  - {path: /etc/passwd, bytes: 1, xxh128: 0123456789abcdef0123456789abcdef}\n",
             root0);
    expect_parse_error(buf, DCK_ERR_FORMAT, "absolute or contains '..'");
    snprintf(buf, sizeof buf,
             "detcheck: 1\nroot: %s\ntensors: []\nfiles:\n  - {path: a/../../b, bytes: 1, xxh128: 0123456789abcdef0123456789abcdef}\n",
             root0);
    expect_parse_error(buf, DCK_ERR_FORMAT, "absolute or contains '..'");
    /* a tensor whose digest was edited no longer matches the root */
    snprintf(buf, sizeof buf,
             "detcheck: 1\nroot: %s\ntensors:\n  - {name: a, group: weights, dtype: F32, shape: [1], digest: 0123456789abcdef0123456789abcdef}\n",
             root0);
    expect_parse_error(buf, DCK_ERR_FORMAT, "root digest does not match");
    expect_parse_error("detcheck: 1\ndetcheck: 1\n", DCK_ERR_FORMAT, "golden.yaml");
    expect_parse_error("{\"detcheck\": 1, \"root\": 5", DCK_ERR_FORMAT, "invalid JSON");
    /* "billion laughs": 9 levels of aliases, 10 each, would expand to 10^9
     * nodes; refused at once instead of exhausting memory */
    char bomb[4096];
    size_t k = (size_t)snprintf(bomb, sizeof bomb, "detcheck: 1\nroot: %s\nx0: &a0 [q,q,q,q,q,q,q,q,q,q]\n", root0);
    for (int i = 1; i < 9; i++) {
        k += (size_t)snprintf(bomb + k, sizeof bomb - k, "x%d: &a%d [", i, i);
        for (int j = 0; j < 10; j++) k += (size_t)snprintf(bomb + k, sizeof bomb - k, "%s*a%d", j ? "," : "", i - 1);
        k += (size_t)snprintf(bomb + k, sizeof bomb - k, "]\n");
    }
    snprintf(bomb + k, sizeof bomb - k, "tensors: []\n");
    expect_parse_error(bomb, DCK_ERR_FORMAT, "aliases");
    /* a message that wraps the previous one stays intact */
    snprintf(buf, sizeof buf,
             "detcheck: 1\nroot: %s\ntensors:\n  - {name: a, group: weights, dtype: F32, shape: [1], digest: 0123456789abcdef0123456789abcdef}\n"
             "  - {name: a, group: weights, dtype: F32, shape: [1], digest: 0123456789abcdef0123456789abcdef}\n",
             root0);
    expect_parse_error(buf, DCK_ERR_FORMAT, "golden.yaml: duplicate tensor name a");
}
END_TEST

START_TEST(test_save_atomic) {
    char *d = tu_tmpdir();
    char *p = tu_path(d, "m.yaml");
    dck_manifest *m = sample(0), *back;
    ck_assert_int_eq(dck_manifest_save(m, DCK_FORMAT_YAML, p), DCK_OK);
    ck_assert_int_eq(dck_manifest_load(p, &back), DCK_OK);
    ck_assert(dck_digest_equal(dck_manifest_root(m), dck_manifest_root(back)));
    dck_manifest_free(back);
    /* no temporary left behind */
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "test $(ls '%s' | wc -l) -eq 1", d);
    ck_assert_int_eq(system(cmd), 0);
    /* saving into a missing directory fails cleanly */
    char *q = tu_path(d, "nodir/m.yaml");
    ck_assert_int_eq(dck_manifest_save(m, DCK_FORMAT_YAML, q), DCK_ERR_IO);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "nodir/m.yaml"));
    ck_assert_int_eq(dck_manifest_load(q, &back), DCK_ERR_IO);
    dck_manifest_free(m);
    free(p);
    free(q);
    tu_tmpdir_free(d);
}
END_TEST

int main(void) {
    Suite *s = suite_create("manifest");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_yaml_roundtrip);
    tcase_add_test(tc, test_json_roundtrip);
    tcase_add_test(tc, test_compare);
    tcase_add_test(tc, test_bad_manifests);
    tcase_add_test(tc, test_save_atomic);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

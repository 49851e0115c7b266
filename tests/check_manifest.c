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

/* A Megatron-like manifest: weight w, per-rank RNG objects of a 1 x tp grid
 * (digest rng_seed + rank), args.tensor_model_parallel_size = tp. */
static dck_manifest *layout_sample(int tp, uint64_t rng_seed) {
    dck_manifest *m;
    ck_assert_int_eq(dck_manifest_create(&m), DCK_OK);
    dck_manifest_tensor t;
    memset(&t, 0, sizeof t);
    t.name = "decoder.final_layernorm.weight";
    t.dtype = DCK_F32;
    t.ndim = 1;
    t.shape[0] = 32;
    t.digest.low64 = 42;
    ck_assert_int_eq(dck_manifest_add_tensor(m, &t), DCK_OK);
    for (int r = 0; r < tp; r++) {
        char name[96];
        snprintf(name, sizeof name, "rng_state/shard_0.%d_1.%d.0.cuda_rng_state", r, tp);
        t.name = name;
        t.dtype = DCK_U8;
        t.shape[0] = 5056;
        t.digest.low64 = rng_seed + (uint64_t)r;
        ck_assert_int_eq(dck_manifest_add_tensor(m, &t), DCK_OK);
    }
    char v[8];
    snprintf(v, sizeof v, "%d", tp);
    ck_assert_int_eq(dck_manifest_add_value(m, "args.tensor_model_parallel_size", v), DCK_OK);
    ck_assert_int_eq(dck_manifest_add_value(m, "iteration", "5"), DCK_OK);
    ck_assert_int_eq(dck_manifest_finalize(m), DCK_OK);
    return m;
}

/* Layout state: set aside only when the layouts differ; compared otherwise. */
START_TEST(test_layout_state) {
    dck_manifest *tp1 = layout_sample(1, 100), *tp2 = layout_sample(2, 100), *tp2b = layout_sample(2, 200);
    dck_cmp_result r, aside;
    char why[256];
    /* TP1 golden, TP2 checkpoint: 1 missing + 2 extra RNG, the TP value */
    ck_assert_int_eq(dck_manifest_compare(tp1, tp2, 0, &r), DCK_OK);
    ck_assert_uint_eq(r.n, 4);
    ck_assert_int_eq(dck_cmp_set_aside_layout_state(tp1, tp2, &r, &aside, why, sizeof why), DCK_OK);
    ck_assert_uint_eq(r.n, 0);
    ck_assert_uint_eq(aside.n, 4);
    ck_assert_str_eq(why, "rng_state: grid 1.1 only in the golden");
    ck_assert_uint_eq(r.tensors_equal, 1);
    dck_cmp_result_release(&r);
    dck_cmp_result_release(&aside);
    /* same layout, different RNG bits: compared, both differ */
    ck_assert_int_eq(dck_manifest_compare(tp2, tp2b, 0, &r), DCK_OK);
    ck_assert_uint_eq(r.n, 2);
    ck_assert_int_eq(dck_cmp_set_aside_layout_state(tp2, tp2b, &r, &aside, why, sizeof why), DCK_OK);
    ck_assert_uint_eq(r.n, 2);
    ck_assert_uint_eq(aside.n, 0);
    ck_assert_str_eq(why, "");
    ck_assert_int_eq(r.entries[0].kind, DCK_CMP_DIGEST);
    dck_cmp_result_release(&r);
    dck_cmp_result_release(&aside);
    /* a grid that differs with no layout value recorded is a layout change */
    dck_manifest *g = layout_sample(1, 100), *a;
    ck_assert_int_eq(dck_manifest_create(&a), DCK_OK);
    for (size_t i = 0; i < dck_manifest_tensor_count(tp2); i++)
        ck_assert_int_eq(dck_manifest_add_tensor(a, dck_manifest_tensor_at(tp2, i)), DCK_OK);
    ck_assert_int_eq(dck_manifest_add_value(a, "args.tensor_model_parallel_size", "1"), DCK_OK);
    ck_assert_int_eq(dck_manifest_add_value(a, "iteration", "5"), DCK_OK);
    ck_assert_int_eq(dck_manifest_finalize(a), DCK_OK);
    ck_assert_int_eq(dck_manifest_compare(g, a, 0, &r), DCK_OK);
    ck_assert_int_eq(dck_cmp_set_aside_layout_state(g, a, &r, &aside, why, sizeof why), DCK_OK);
    ck_assert_uint_eq(r.n, 0);
    ck_assert_uint_eq(aside.n, 3);
    ck_assert_msg(strstr(why, "rng_state: grid 1.1 only in the golden"), "%s", why);
    dck_cmp_result_release(&r);
    dck_cmp_result_release(&aside);
    dck_manifest_free(a);
    /* a lying layout value (TP 2 over the stored TP1 grid) and a changed
     * RNG: the layout is what is stored, so the RNG is still compared and
     * differs; the claim alone is set aside (detcheck-digest(7), SHARDED LAYOUT) */
    dck_manifest *lie = layout_sample(1, 200);
    ck_assert_int_eq(dck_manifest_create(&a), DCK_OK);
    for (size_t i = 0; i < dck_manifest_tensor_count(lie); i++)
        ck_assert_int_eq(dck_manifest_add_tensor(a, dck_manifest_tensor_at(lie, i)), DCK_OK);
    ck_assert_int_eq(dck_manifest_add_value(a, "args.tensor_model_parallel_size", "2"), DCK_OK);
    ck_assert_int_eq(dck_manifest_add_value(a, "iteration", "5"), DCK_OK);
    ck_assert_int_eq(dck_manifest_finalize(a), DCK_OK);
    ck_assert_int_eq(dck_manifest_compare(g, a, 0, &r), DCK_OK);
    ck_assert_uint_eq(r.n, 2);
    ck_assert_int_eq(dck_cmp_set_aside_layout_state(g, a, &r, &aside, why, sizeof why), DCK_OK);
    ck_assert_uint_eq(r.n, 1);
    ck_assert_str_eq(r.entries[0].name, "rng_state/shard_0.0_1.1.0.cuda_rng_state");
    ck_assert_uint_eq(aside.n, 1);
    ck_assert_str_eq(aside.entries[0].name, "args.tensor_model_parallel_size");
    ck_assert_msg(strstr(why, "args.tensor_model_parallel_size: 1 vs 2 as claimed"), "%s", why);
    dck_cmp_result_release(&r);
    dck_cmp_result_release(&aside);
    dck_manifest_free(lie);
    ck_assert(dck_is_layout_state("optimizer.param_state.3.step"));
    ck_assert(!dck_is_layout_state("optimizer.state.exp_avg.decoder.layers.mlp.linear_fc1.weight"));
    dck_manifest_free(tp1);
    dck_manifest_free(tp2);
    dck_manifest_free(tp2b);
    dck_manifest_free(g);
    dck_manifest_free(a);
}
END_TEST

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


/* The manifest writers write directly; libyaml and jansson wrote every
 * manifest before them, and the bytes must stay the same. Names with
 * quotes, colons, YAML indicators, unicode, control characters, line
 * breaks (which go to the libraries), words YAML would type... */
static const char *const tricky[] = {
    "", " ", "a", "-", "--", "---", "---x", "...", "..x", "-x", "- x", "?", "?x", "? x", ":", ":x", "x:", "x: y",
    "x:y", "#x", "x #y", "x#y", "a,b", "a[0]", "{a}", "&a", "*a", "!a", "|a", ">a", "'a", "a'b", "\"a", "a\"b",
    "%a", "@a", "`a", "a\\b", " a", "a ", "a  b", "a\tb", "\t", "yes", "No", "TRUE", "off", "~", "null", "y",
    "1", "1.5", "1e5", "1e5e", "-1", "+1", "0x1F", "12_3", "e", "E.", "1.2.3", "model.layers.0.weight",
    "caf\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\xc2\xa0", "\xc2\x9f", "\xc2\x85", "\xe2\x80\xa8",
    "\xe2\x80\xa9", "\xef\xbb\xbf", "\xef\xbf\xbe", "\xef\xbf\xbd", "\xed\x9f\xbf", "\xee\x80\x80", "\x01",
    "\x1b", "\x7f", "a\nb", "a\rb", "\n", "a\n", "a \nb", "a\n b", "/x/y:z", "C:\\x", "a/../b",
};

static char *write_to_string(const dck_manifest *m, dck_format fmt, int reference, size_t *len) {
    char *buf = NULL;
    FILE *mem = open_memstream(&buf, len);
    dck_status s = reference ? dck_manifest_write_reference(m, fmt, mem) : dck_manifest_write(m, fmt, mem);
    fclose(mem);
    ck_assert_msg(s == DCK_OK, "%s", dck_last_error());
    return buf;
}

/* The manifest text reads back the same through the direct reader of the
 * written layout and through libyaml (a leading blank line sends a
 * document to libyaml): the same status, the same manifest. */
static void expect_same_reading(const char *text, size_t len, const char *what) {
    char *shifted = malloc(len + 1);
    shifted[0] = '\n';
    memcpy(shifted + 1, text, len);
    dck_manifest *a = NULL, *b = NULL;
    dck_status sa = dck_manifest_parse(text, len, "m.yaml", &a);
    dck_status sb = dck_manifest_parse(shifted, len + 1, "m.yaml", &b);
    ck_assert_msg(sa == sb, "%s: read %d directly, %d by libyaml (%s)\n%s", what, sa, sb, dck_last_error(), text);
    if (!sa) {
        size_t la, lb;
        char *ja = write_to_string(a, DCK_FORMAT_JSON, 1, &la), *jb = write_to_string(b, DCK_FORMAT_JSON, 1, &lb);
        ck_assert_msg(la == lb && !memcmp(ja, jb, la), "%s: read differently:\n%s\n%s", what, ja, jb);
        free(ja);
        free(jb);
    }
    dck_manifest_free(a);
    dck_manifest_free(b);
    free(shifted);
}

static void expect_same_text(const dck_manifest *m, const char *what) {
    for (int f = 0; f < 2; f++) {
        dck_format fmt = f ? DCK_FORMAT_JSON : DCK_FORMAT_YAML;
        size_t la, lb;
        char *a = write_to_string(m, fmt, 0, &la), *b = write_to_string(m, fmt, 1, &lb);
        ck_assert_msg(la == lb && !memcmp(a, b, la), "%s, %s:\n--- direct\n%s\n--- library\n%s", what,
                      f ? "JSON" : "YAML", a, b);
        if (!f) expect_same_reading(a, la, what);
        free(a);
        free(b);
    }
}

static dck_manifest *tricky_manifest(const char *const *names, size_t n, const char *meta_key,
                                     const char *meta_value, const char *value) {
    dck_manifest *m;
    ck_assert_int_eq(dck_manifest_create(&m), DCK_OK);
    for (size_t i = 0; i < n; i++) {
        dck_manifest_tensor t;
        memset(&t, 0, sizeof t);
        t.name = names[i];
        t.group = dck_group_of_name(names[i]);
        t.dtype = (dck_dtype)(i % DCK_DTYPE_COUNT);
        t.ndim = (int)(i % 4);
        for (int d = 0; d < t.ndim; d++) t.shape[d] = i % 5 == 0 ? UINT64_MAX - (uint64_t)d : (uint64_t)(i * 31 + (size_t)d);
        /* digests of every kind: hex that YAML would read as a number too */
        if (i % 7 == 0) dck_digest_from_hex("12345678901234567890123456789e12", &t.digest);
        else t.digest = (dck_digest){0x0123456789abcdefULL * (i + 1), 0xfedcba9876543210ULL ^ i};
        ck_assert_int_eq(dck_manifest_add_tensor(m, &t), DCK_OK);
        dck_manifest_file fl = {names[i][0] ? names[i] : "empty", i * 1000003ULL, {i, ~(uint64_t)i}};
        if (i % 3 == 0) ck_assert_int_eq(dck_manifest_add_file(m, &fl), DCK_OK);
    }
    if (meta_key) ck_assert_int_eq(dck_manifest_set_meta(m, meta_key, meta_value), DCK_OK);
    if (value) {
        ck_assert_int_eq(dck_manifest_add_value(m, value, value), DCK_OK);
        ck_assert_int_eq(dck_manifest_add_value(m, "zz.second", "1000"), DCK_OK);
    }
    ck_assert_int_eq(dck_manifest_set_meta(m, "tool", "detcheck test"), DCK_OK);
    if (dck_manifest_finalize(m) != DCK_OK) { /* duplicate file paths: not a manifest */
        dck_manifest_free(m);
        return NULL;
    }
    return m;
}

START_TEST(test_direct_text_as_libraries) {
    size_t nt = sizeof tricky / sizeof tricky[0];
    /* all at once, and one at a time with every kind of meta and value */
    dck_manifest *m = tricky_manifest(tricky, nt, "source", "a b: c", "iteration");
    ck_assert_ptr_nonnull(m);
    expect_same_text(m, "all names");
    dck_manifest_free(m);
    for (size_t i = 0; i < nt; i++) {
        m = tricky_manifest(&tricky[i], 1, tricky[i], tricky[i], tricky[i][0] ? tricky[i] : "v");
        ck_assert_ptr_nonnull(m);
        expect_same_text(m, tricky[i]);
        dck_manifest_free(m);
    }
    /* empty lists, a key YAML cannot write as a simple key, keys that are top-level keys */
    m = tricky_manifest(NULL, 0, NULL, NULL, NULL);
    expect_same_text(m, "empty");
    dck_manifest_free(m);
    char longkey[200];
    memset(longkey, 'k', sizeof longkey - 1);
    longkey[sizeof longkey - 1] = 0;
    const char *keys[] = {longkey, "root", "detcheck", "files", "values", "tensors", "created"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        m = tricky_manifest(tricky, 3, keys[i], "x", NULL);
        expect_same_text(m, keys[i]);
        dck_manifest_free(m);
    }
    /* documents in the written layout, bent: each is read the same both ways */
    const char *docs[] = {
        "detcheck: 1\nroot: 0\ntensors: []\n",
        "detcheck: 2\nroot: 99aabb\ntensors: []\n",
        "detcheck: 1\ndetcheck: 1\n",
        "detcheck: 1\nroot: %s\ntensors: []\nk: a\nk: b\n",
        "detcheck: 1\nroot: %s\ntensors: []\nk: \"a\\u2028b\"\n",
        "detcheck: 1\nroot: %s\ntensors: []\nk: \"a\\x00b\"\n",
        "detcheck: 1\nroot: %s\ntensors: []\nk: \"\\/\\ \\t\"\n",
        "detcheck: 1\nroot: %s\ntensors: []\nk: 'a''b'\n",
        "detcheck: 1\nroot: %s\ntensors: []\nk: a # comment\n",
        "detcheck: 1\nroot: %s\ntensors: []\nk: a:b\n",
        "detcheck: 1\nroot: %s\ntensors: []\nk:\n",
        "detcheck: 1\nroot: %s\ntensors: []\nfiles: []\nvalues: []\n",
        "detcheck: 1\nroot: %s\ntensors:\n",
        "detcheck: 1\nroot: %s\ntensors: []",
        "detcheck: 1\r\nroot: %s\r\ntensors: []\r\n",
        "---\ndetcheck: 1\nroot: %s\ntensors: []\n...\n",
        "detcheck: 1\nroot: %s\ntensors: []\nfiles:\n- {path: a, bytes: 1, xxh128: 0123456789abcdef0123456789abcdef}\n",
        "detcheck: 1\nroot: %s\ntensors: []\nfiles:\n- {path: /a, bytes: 1, xxh128: 0123456789abcdef0123456789abcdef}\n",
        "detcheck: 1\nroot: %s\ntensors: []\nfiles:\n- {path: a, bytes: 1, xxh128: 0123456789abcdef0123456789abcdef, x: 1}\n",
        "detcheck: 1\nroot: %s\ntensors: []\nvalues:\n- {name: a, value: \"1\"}\n- {name: a, value: \"2\"}\n",
        "detcheck: 1\nroot: %s\ntensors:\n- {name: a, group: weights, dtype: F32, shape: [1], digest: 0123456789abcdef0123456789abcdef}\n",
    };
    char root0[33], doc[1024];
    dck_digest_to_hex(dck_root_digest(NULL, NULL, 0), root0);
    for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++) {
        snprintf(doc, sizeof doc, docs[i], root0);
        expect_same_reading(doc, strlen(doc), docs[i]);
    }
    char key[2100];
    for (size_t n = 120; n < 2100; n += n < 140 ? 4 : 500) {
        memset(key, 'k', n);
        snprintf(key + n, sizeof key - n, ": v\nroot: %s\ntensors: []\ndetcheck: 1\n", root0);
        expect_same_reading(key, strlen(key), "long key");
    }
    /* random names made of the pieces above */
    srand(7);
    const char *names[64];
    char store[64][64];
    for (int round = 0; round < 300; round++) {
        size_t n = 0;
        for (int i = 0; i < 64; i++) {
            store[i][0] = 0;
            int k = 1 + rand() % 4;
            for (int j = 0; j < k; j++) {
                const char *p = tricky[rand() % (int)nt];
                if (strlen(store[i]) + strlen(p) < 63) strcat(store[i], p);
            }
            int dup = 0;
            for (size_t q = 0; q < n; q++) dup |= !strcmp(names[q], store[i]);
            if (!dup) names[n++] = store[i];
        }
        m = tricky_manifest(names, n, names[0], names[n - 1], names[n / 2][0] ? names[n / 2] : "v");
        if (!m) continue;
        expect_same_text(m, "random names");
        dck_manifest_free(m);
    }
}
END_TEST

/* A manifest of more text than the writer's 1 MiB buffer (it goes out as
 * the buffer fills) and of names whose strcmp order (the root's) is far
 * from model order: shared prefixes of every length, names that are
 * prefixes of others, numbers of every width, bytes >= 0x80, long runs of
 * one byte. The text is the libraries' byte for byte, the same as saved
 * whole to a file, and the root is dck_root_digest's. */
START_TEST(test_large_text_and_root) {
    enum { N = 12000 };
    char **names = malloc(N * sizeof *names);
    dck_digest *dg = malloc(N * sizeof *dg);
    dck_manifest *m;
    ck_assert_int_eq(dck_manifest_create(&m), DCK_OK);
    for (size_t i = 0; i < N; i++) { /* every name differs: j does */
        char b[300];
        size_t j = (i * 7919) % N;
        switch (j % 6) {
        case 0: snprintf(b, sizeof b, "model.layers.%zu.mlp.experts.%zu.weight", j / 6 % 500, j / 3000); break;
        case 1: snprintf(b, sizeof b, "model.layers.%zu", j / 6); break;
        case 2: snprintf(b, sizeof b, "model.layers.%zu.caf\xc3\xa9.%zu", j / 6 % 37, j); break;
        case 3: snprintf(b, sizeof b, "%0*zu", (int)(1 + j % 40), j / 6); break;
        case 4: {
            size_t k = 1 + j % 250; /* "aaa...a" of every length, then a number */
            memset(b, 'a', k);
            snprintf(b + k, sizeof b - k, "%zu", j);
            break;
        }
        default: snprintf(b, sizeof b, "optimizer.state.%zu.exp_avg\xe2\x82\xac", j / 6); break;
        }
        names[i] = strdup(b);
        dg[i] = (dck_digest){0x9e3779b97f4a7c15ULL * (i + 1), i};
        dck_manifest_tensor t;
        memset(&t, 0, sizeof t);
        t.name = names[i];
        t.group = dck_group_of_name(names[i]);
        t.dtype = DCK_F32;
        t.ndim = 1;
        t.shape[0] = i;
        t.digest = dg[i];
        ck_assert_int_eq(dck_manifest_add_tensor(m, &t), DCK_OK);
    }
    ck_assert_int_eq(dck_manifest_set_meta(m, "tool", "detcheck test"), DCK_OK);
    ck_assert_int_eq(dck_manifest_finalize(m), DCK_OK);
    dck_digest root = dck_root_digest((const char *const *)names, dg, N);
    ck_assert(dck_digest_equal(dck_manifest_root(m), root));
    char *d = tu_tmpdir(), *p = tu_path(d, "m.yaml");
    for (int f = 0; f < 2; f++) {
        dck_format fmt = f ? DCK_FORMAT_JSON : DCK_FORMAT_YAML;
        size_t la, lb;
        char *a = write_to_string(m, fmt, 0, &la), *b = write_to_string(m, fmt, 1, &lb);
        ck_assert_uint_gt(la, (size_t)3 << 19); /* more than the 1 MiB buffer */
        ck_assert_msg(la == lb && !memcmp(a, b, la), "%s: direct and library text differ",
                      f ? "JSON" : "YAML");
        ck_assert_int_eq(dck_manifest_save(m, fmt, p), DCK_OK);
        FILE *fp = fopen(p, "rb");
        char *c = malloc(la + 1);
        size_t lc = fread(c, 1, la + 1, fp);
        fclose(fp);
        ck_assert_msg(lc == la && !memcmp(a, c, la), "saved text differs from written text");
        free(a);
        free(b);
        free(c);
    }
    free(p);
    tu_tmpdir_free(d);
    for (size_t i = 0; i < N; i++) free(names[i]);
    free(names);
    free(dg);
    dck_manifest_free(m);
}
END_TEST

/* The group rules on names that take each branch of the one-pass reader:
 * components split at '.', '/' and ':', compared case-insensitively, whole
 * words and substrings, components longer than its 128-byte buffer. */
START_TEST(test_group_rules) {
    static const struct {
        const char *name;
        dck_group g;
    } cases[] = {
        {"model.layers.0.weight", DCK_GROUP_WEIGHTS},
        {"Optimizer/state", DCK_GROUP_OPTIMIZER},
        {"a:OPTIM", DCK_GROUP_OPTIMIZER},
        {"x.distrib_optim.y", DCK_GROUP_OPTIMIZER},
        {"x.Optimizer_State", DCK_GROUP_OPTIMIZER},
        {"x.param_groups.0", DCK_GROUP_OPTIMIZER},
        {"master.w", DCK_GROUP_OPTIMIZER},
        {"masters.w", DCK_GROUP_WEIGHTS},
        {"layer.sgdMomentum_buf", DCK_GROUP_OPTIMIZER},
        {"layer.xADAMx", DCK_GROUP_OPTIMIZER},
        {"layer.ada", DCK_GROUP_WEIGHTS},
        {"state.exp_av", DCK_GROUP_WEIGHTS},
        {"RNG", DCK_GROUP_RNG},
        {"a.rn", DCK_GROUP_WEIGHTS},
        {"a.rngx/b", DCK_GROUP_RNG},
        {"a.xrng", DCK_GROUP_WEIGHTS},
        {"a.my_Random_thing", DCK_GROUP_RNG},
        {"cuda.Generator", DCK_GROUP_RNG},
        {"a.x_rng_state", DCK_GROUP_RNG},
        {"rng.step", DCK_GROUP_RNG},
        {"step.rng", DCK_GROUP_RNG},
        {"rng.optimizer", DCK_GROUP_OPTIMIZER},
        {"train.STEP", DCK_GROUP_OTHER},
        {"train.steps", DCK_GROUP_WEIGHTS},
        {"Iteration", DCK_GROUP_OTHER},
        {"iter", DCK_GROUP_OTHER},
        {"args", DCK_GROUP_OTHER},
        {"epoch", DCK_GROUP_OTHER},
        {"x._metadata", DCK_GROUP_OTHER},
        {"x.metadata", DCK_GROUP_OTHER},
        {"x.loss_scale", DCK_GROUP_OTHER},
        {"x.lr_scheduler", DCK_GROUP_OTHER},
        {"x.scheduler", DCK_GROUP_OTHER},
        {"config", DCK_GROUP_OTHER},
        {"...", DCK_GROUP_WEIGHTS},
        {"", DCK_GROUP_WEIGHTS},
        {"caf\xc3\xa9.\xc3\x89POCH", DCK_GROUP_WEIGHTS},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ck_assert_msg(dck_group_of_name(cases[i].name) == cases[i].g, "%s: group %d, wanted %d",
                      cases[i].name, (int)dck_group_of_name(cases[i].name), (int)cases[i].g);
    /* components of 120 to 300 bytes, a word at either end or none */
    char b[400];
    for (size_t k = 120; k < 300; k += 7) {
        memset(b, 'q', k);
        b[k] = 0;
        ck_assert_int_eq(dck_group_of_name(b), DCK_GROUP_WEIGHTS);
        memcpy(b + k - 4, "AdaM", 4);
        ck_assert_int_eq(dck_group_of_name(b), DCK_GROUP_OPTIMIZER);
        memset(b, 'q', k);
        memcpy(b, "Rng", 3);
        ck_assert_int_eq(dck_group_of_name(b), DCK_GROUP_RNG);
        memcpy(b, "qqqgenerator", 12);
        snprintf(b + k, sizeof b - k, ".step");
        ck_assert_int_eq(dck_group_of_name(b), DCK_GROUP_RNG);
        memset(b, 'q', k);
        snprintf(b + k, sizeof b - k, "/step");
        ck_assert_int_eq(dck_group_of_name(b), DCK_GROUP_OTHER);
    }
}
END_TEST

/* A string that is not UTF-8 made libyaml's emitter loop forever
 * (an event it refused was emitted uninitialised) and jansson drop the
 * entry. Every writer refuses it now, naming it escaped. */
static void expect_write_refused(dck_manifest *m, const char *what) {
    for (int fmt = 0; fmt < 2; fmt++)
        for (int ref = 0; ref < 2; ref++) {
            dck_format f = fmt ? DCK_FORMAT_JSON : DCK_FORMAT_YAML;
            char *buf = NULL;
            size_t len = 0;
            FILE *mem = open_memstream(&buf, &len);
            dck_status s = ref ? dck_manifest_write_reference(m, f, mem) : dck_manifest_write(m, f, mem);
            fclose(mem);
            ck_assert_msg(s == DCK_ERR_FORMAT, "%s fmt %d ref %d: status %d, wrote:\n%s", what, fmt, ref, s, buf);
            ck_assert_msg(strstr(dck_last_error(), what) && strstr(dck_last_error(), "is not valid UTF-8"),
                          "'%s' lacks '%s'", dck_last_error(), what);
            free(buf);
        }
    char *d = tu_tmpdir(), path[4096];
    snprintf(path, sizeof path, "%s/m.yaml", d);
    ck_assert_int_eq(dck_manifest_save(m, DCK_FORMAT_YAML, path), DCK_ERR_FORMAT);
    ck_assert_int_ne(access(path, F_OK), 0);
    tu_tmpdir_free(d);
}

START_TEST(test_not_utf8_refused) {
    static const struct {
        const char *tensor, *value_name, *value, *path, *meta, *what;
    } cases[] = {
        {"ab\xff", "v", "1", "f", "x", "tensor name 'ab\\xff'"},
        {"a\xed\xa0\x80", "v", "1", "f", "x", "tensor name 'a\\xed\\xa0\\x80'"}, /* a surrogate */
        {"a\xc0\xaf", "v", "1", "f", "x", "tensor name 'a\\xc0\\xaf'"},         /* overlong */
        {"a", "v\xfe", "1", "f", "x", "value name 'v\\xfe'"},
        {"a", "v", "1\x80", "f", "x", "value text '1\\x80'"},
        {"a", "v", "1", "f\xff.bin", "x", "file path 'f\\xff.bin'"},
        {"a", "v", "1", "f", "x\xf5", "metadata value 'x\\xf5'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dck_manifest *m;
        ck_assert_int_eq(dck_manifest_create(&m), DCK_OK);
        dck_manifest_tensor t;
        memset(&t, 0, sizeof t);
        t.name = cases[i].tensor;
        t.dtype = DCK_F32;
        ck_assert_int_eq(dck_manifest_add_tensor(m, &t), DCK_OK);
        ck_assert_int_eq(dck_manifest_add_value(m, cases[i].value_name, cases[i].value), DCK_OK);
        dck_manifest_file f = {cases[i].path, 1, {1, 2}};
        ck_assert_int_eq(dck_manifest_add_file(m, &f), DCK_OK);
        ck_assert_int_eq(dck_manifest_set_meta(m, "tool", cases[i].meta), DCK_OK);
        ck_assert_int_eq(dck_manifest_finalize(m), DCK_OK);
        expect_write_refused(m, cases[i].what);
        dck_manifest_free(m);
    }
    /* the check itself, and the escaping of a message: cut with "..." */
    ck_assert(dck_utf8_valid("w\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 10));
    ck_assert(!dck_utf8_valid("\xf4\x90\x80\x80", 4)); /* above U+10FFFF */
    char e[16], e2[64];
    ck_assert_str_eq(dck_text_escape("a'\\\x01\xc3\xa9", e2, sizeof e2), "a\\x27\\x5c\\x01\xc3\xa9");
    ck_assert_str_eq(dck_text_escape("abcdefghijklmnopqrstuvwxyz", e, sizeof e), "abcdefghijkl...");
    ck_assert_int_eq(dck_check_utf8("x.npz", "tensor name", "ab\xff"), DCK_ERR_FORMAT);
    ck_assert_str_eq(dck_last_error(), "x.npz: tensor name 'ab\\xff' is not valid UTF-8");
}
END_TEST

/* Nesting was quadratic in libyaml (a 200 KB manifest of nested
 * collections took 53 s, as maps 88 s); the reader stops at
 * DCK_MANIFEST_MAX_DEPTH, as soon as it gets there. */
static char *nested(const char *pre, const char *open, const char *mid, const char *close, const char *post,
                    size_t n) {
    size_t lo = strlen(open), lc = strlen(close), lp = strlen(pre), lm = strlen(mid);
    char *b = malloc(lp + n * (lo + lc) + lm + strlen(post) + 1), *w = b;
    ck_assert_ptr_nonnull(b);
    memcpy(w, pre, lp), w += lp;
    for (size_t i = 0; i < n; i++) memcpy(w, open, lo), w += lo;
    memcpy(w, mid, lm), w += lm;
    for (size_t i = 0; i < n; i++) memcpy(w, close, lc), w += lc;
    strcpy(w, post);
    return b;
}

/* expect_parse_error without the text in the message (Check's limit) */
static void expect_parse_error_long(const char *text, dck_status want, const char *msg) {
    dck_manifest *m = NULL;
    dck_status s = dck_manifest_parse(text, strlen(text), "golden.yaml", &m);
    ck_assert_msg(s == want && strstr(dck_last_error(), msg) && strstr(dck_last_error(), "golden.yaml"),
                  "status %d, '%s' lacks '%s' (text: %.60s...)", s, dck_last_error(), msg, text);
    ck_assert_ptr_null(m);
}

START_TEST(test_nesting_bounded) {
    static const struct {
        const char *pre, *open, *mid, *close, *post;
    } kinds[] = {
        {"detcheck: 1\nx: ", "[", "", "]", "\n"},
        {"detcheck: 1\nx: ", "{a: ", "1", "}", "\n"},
        {"detcheck: 1\nx:\n", "- ", "1", "", "\n"}, /* block sequences on one line */
        {"{\"detcheck\": 1, \"x\": ", "[", "", "]", "}"},
        {"{\"detcheck\": 1, \"x\": ", "{\"a\": ", "1", "}", "}"},
    };
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        /* 100,000 levels: refused at once */
        char *t = nested(kinds[k].pre, kinds[k].open, kinds[k].mid, kinds[k].close, kinds[k].post, 100000);
        expect_parse_error_long(t, DCK_ERR_LIMIT, "manifest nested deeper than 8 levels");
        free(t);
        /* one level over the limit (the document is one): refused; at it: read on (then not a manifest) */
        t = nested(kinds[k].pre, kinds[k].open, kinds[k].mid, kinds[k].close, kinds[k].post, DCK_MANIFEST_MAX_DEPTH);
        expect_parse_error_long(t, DCK_ERR_LIMIT, "manifest nested deeper than 8 levels");
        free(t);
        t = nested(kinds[k].pre, kinds[k].open, kinds[k].mid, kinds[k].close, kinds[k].post,
                   DCK_MANIFEST_MAX_DEPTH - 1);
        expect_parse_error_long(t, DCK_ERR_FORMAT, "root");
        free(t);
    }
    /* a string holding brackets is not nesting */
    char *t = nested("{\"detcheck\": 1, \"x\": \"", "[", "\\\"", "{", "\"}", 1000);
    expect_parse_error_long(t, DCK_ERR_FORMAT, "root");
    free(t);
}
END_TEST

int main(void) {
    Suite *s = suite_create("manifest");
    TCase *tc = tcase_create("core");
    /* the text tests write megabytes both ways; under the sanitizers on a
     * loaded machine that takes more than Check's default 4 s */
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_yaml_roundtrip);
    tcase_add_test(tc, test_json_roundtrip);
    tcase_add_test(tc, test_compare);
    tcase_add_test(tc, test_layout_state);
    tcase_add_test(tc, test_bad_manifests);
    tcase_add_test(tc, test_save_atomic);
    tcase_add_test(tc, test_direct_text_as_libraries);
    tcase_add_test(tc, test_large_text_and_root);
    tcase_add_test(tc, test_group_rules);
    suite_add_tcase(s, tc);
    /* a hang here (libyaml's quadratic nesting) fails in 10 s */
    TCase *tb = tcase_create("bounded");
    tcase_set_timeout(tb, 10);
    tcase_add_test(tb, test_not_utf8_refused);
    tcase_add_test(tb, test_nesting_bounded);
    suite_add_tcase(s, tb);
    return tu_run(s);
}

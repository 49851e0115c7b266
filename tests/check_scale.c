/* Scale: a checkpoint of 100,000 tensors in one file and an index over 8
 * shards naming them all give the right manifest (every digest, the root,
 * the text the libraries would write) and the right errors. Correctness at
 * scale, not time: speed is bench/'s business. */
#include "testutil.h"
#include "formats/formats.h"

#define NT 100000
#define NEL 16
#define SHARDS 8

static char *dir;
static char **names;
static float *data; /* NT x NEL */

/* Names in an order that is neither the file's (strcmp) nor the model's:
 * layer numbers of every width, experts, optimizer state. */
static void make_tensors(void) {
    names = malloc(NT * sizeof *names);
    data = malloc((size_t)NT * NEL * sizeof *data);
    for (size_t i = 0; i < NT; i++) {
        char b[96];
        size_t j = (i * 7919) % NT; /* a permutation of 0..NT-1 */
        if (j % 10 == 9)
            snprintf(b, sizeof b, "optimizer.state.%zu.exp_avg", j / 10);
        else
            snprintf(b, sizeof b, "model.layers.%zu.mlp.experts.%zu.w%zu", j / 640, (j / 10) % 64, j % 10);
        names[i] = strdup(b);
        for (int k = 0; k < NEL; k++) data[i * NEL + k] = (float)(i * 0.5) + (float)k * 0.25f;
    }
}

static void setup(void) {
    dir = tu_tmpdir();
    if (!names) make_tensors();
}
static void teardown(void) {
    tu_tmpdir_free(dir);
    dir = NULL;
}

static void write_shard(const char *path, size_t from, size_t to) {
    dck_st_tensor *t = calloc(to - from, sizeof *t);
    for (size_t i = from; i < to; i++) {
        dck_st_tensor *x = &t[i - from];
        x->name = names[i];
        x->dtype = DCK_F32;
        x->ndim = 1;
        x->shape[0] = NEL;
        x->data = &data[i * NEL];
    }
    ck_assert_msg(dck_safetensors_write(path, t, to - from, NULL, 0, 0) == DCK_OK, "%s", dck_last_error());
    free(t);
}

/* The manifest holds every tensor with its own digest, in model order, and
 * the root of all of them. */
static void check_manifest(const dck_manifest *m) {
    ck_assert_uint_eq(dck_manifest_tensor_count(m), NT);
    for (size_t i = 1; i < NT; i++)
        ck_assert_msg(dck_name_compare(dck_manifest_tensor_at(m, i - 1)->name, dck_manifest_tensor_at(m, i)->name) < 0,
                      "not in model order at %zu", i);
    dck_digest *want = malloc(NT * sizeof *want);
    uint64_t shape[1] = {NEL};
    for (size_t i = 0; i < NT; i++) {
        ck_assert_int_eq(dck_digest_buffer(DCK_F32, shape, 1, &data[i * NEL], NEL * sizeof(float), 1, &want[i]), DCK_OK);
        const dck_manifest_tensor *t = dck_manifest_find_tensor(m, names[i]);
        ck_assert_msg(t != NULL, "%s missing", names[i]);
        ck_assert_msg(dck_digest_equal(t->digest, want[i]), "digest of %s", names[i]);
        ck_assert_int_eq(t->dtype, DCK_F32);
        ck_assert_int_eq(t->ndim, 1);
        ck_assert_uint_eq(t->shape[0], NEL);
        ck_assert_int_eq(t->group, dck_group_of_name(names[i]));
    }
    dck_digest root = dck_root_digest((const char *const *)names, want, NT);
    ck_assert_msg(dck_digest_equal(root, dck_manifest_root(m)), "root");
    free(want);
}

/* The manifest text is what libyaml / jansson write, and reads back. */
static void check_text(const dck_manifest *m) {
    for (int f = 0; f < 2; f++) {
        dck_format fmt = f ? DCK_FORMAT_JSON : DCK_FORMAT_YAML;
        char *a = NULL, *b = NULL;
        size_t la = 0, lb = 0;
        FILE *ma = open_memstream(&a, &la), *mb = open_memstream(&b, &lb);
        ck_assert_int_eq(dck_manifest_write(m, fmt, ma), DCK_OK);
        ck_assert_int_eq(dck_manifest_write_reference(m, fmt, mb), DCK_OK);
        fclose(ma);
        fclose(mb);
        ck_assert_uint_eq(la, lb);
        ck_assert_msg(!memcmp(a, b, la), "%s text differs from the library's", f ? "JSON" : "YAML");
        dck_manifest *back;
        ck_assert_msg(dck_manifest_parse(a, la, "mem", &back) == DCK_OK, "%s", dck_last_error());
        ck_assert(dck_digest_equal(dck_manifest_root(back), dck_manifest_root(m)));
        ck_assert_uint_eq(dck_manifest_tensor_count(back), NT);
        dck_manifest_free(back);
        free(a);
        free(b);
    }
}

START_TEST(test_100k_tensors_one_file) {
    char *p = tu_path(dir, "tiny.safetensors");
    write_shard(p, 0, NT);
    dck_options o;
    dck_options_init(&o);
    o.threads = 2;
    const char *ps[] = {p};
    dck_checkpoint *ck;
    ck_assert_msg(dck_checkpoint_open(ps, 1, &o, &ck) == DCK_OK, "%s", dck_last_error());
    ck_assert_uint_eq(dck_checkpoint_tensor_count(ck), NT);
    /* the name index follows the tensors into model order */
    for (size_t i = 0; i < NT; i += 997) {
        long at = dck_checkpoint_find(ck, names[i]);
        ck_assert(at >= 0);
        ck_assert_str_eq(dck_checkpoint_tensor(ck, (size_t)at)->name, names[i]);
        ck_assert_str_eq(dck_checkpoint_tensor(ck, (size_t)at)->source, p);
    }
    ck_assert_int_eq(dck_checkpoint_find(ck, "model.layers.0.mlp.experts.0"), -1);
    dck_manifest *m;
    ck_assert_msg(dck_checkpoint_hash(ck, &o, &m) == DCK_OK, "%s", dck_last_error());
    dck_checkpoint_free(ck);
    check_manifest(m);
    check_text(m);
    ck_assert_uint_eq(dck_manifest_file_count(m), 1);
    dck_manifest_free(m);
    free(p);
}
END_TEST

static char *write_index(const char *name, size_t extra_missing, int dup) {
    size_t cap = (size_t)NT * 96 + 4096, k = 0;
    char *t = malloc(cap);
    k += (size_t)snprintf(t + k, cap - k, "{\n  \"metadata\": {\"total_size\": %d},\n  \"weight_map\": {",
                          NT * NEL * 4);
    for (size_t i = 0; i < NT; i++)
        k += (size_t)snprintf(t + k, cap - k, "%s\n    \"%s\": \"model-%05zu-of-%05d.safetensors\"", i ? "," : "",
                              names[i], i * SHARDS / NT + 1, SHARDS);
    if (extra_missing) k += (size_t)snprintf(t + k, cap - k, ",\n    \"not.in.any.shard\": \"model-00001-of-%05d.safetensors\"", SHARDS);
    if (dup) k += (size_t)snprintf(t + k, cap - k, ",\n    \"%s\": \"model-00002-of-%05d.safetensors\"", names[NT / 2], SHARDS);
    k += (size_t)snprintf(t + k, cap - k, "\n  }\n}\n");
    char *p = tu_path(dir, name);
    tu_write(p, t, k);
    free(t);
    return p;
}

START_TEST(test_index_over_8_shards) {
    const char *shards[SHARDS];
    for (int s = 0; s < SHARDS; s++) {
        char fn[64];
        snprintf(fn, sizeof fn, "model-%05d-of-%05d.safetensors", s + 1, SHARDS);
        char *p = tu_path(dir, fn);
        write_shard(p, (size_t)s * NT / SHARDS, (size_t)(s + 1) * NT / SHARDS);
        shards[s] = p;
    }
    char *idx = write_index("model.safetensors.index.json", 0, 0);
    dck_options o;
    dck_options_init(&o);
    o.threads = 2;
    dck_manifest *by_index, *by_shards, *by_dir;
    const char *pi[] = {idx};
    ck_assert_msg(dck_hash_paths(pi, 1, &o, &by_index) == DCK_OK, "%s", dck_last_error());
    check_manifest(by_index);
    ck_assert_uint_eq(dck_manifest_file_count(by_index), SHARDS);
    ck_assert_msg(dck_hash_paths(shards, SHARDS, &o, &by_shards) == DCK_OK, "%s", dck_last_error());
    const char *pd[] = {dir};
    ck_assert_msg(dck_hash_paths(pd, 1, &o, &by_dir) == DCK_OK, "%s", dck_last_error());
    dck_cmp_result r;
    ck_assert_int_eq(dck_manifest_compare(by_index, by_shards, 1, &r), DCK_OK);
    ck_assert_uint_eq(r.n, 0);
    ck_assert_uint_eq(r.tensors_equal, NT);
    dck_cmp_result_release(&r);
    ck_assert(dck_digest_equal(dck_manifest_root(by_index), dck_manifest_root(by_dir)));
    check_text(by_dir);
    dck_manifest_free(by_index);
    dck_manifest_free(by_shards);
    dck_manifest_free(by_dir);

    /* a name no shard holds, after 100,000 that they do */
    char *bad = write_index("missing.index.json", 1, 0);
    const char *pb[] = {bad};
    dck_manifest *m = NULL;
    ck_assert_int_eq(dck_hash_paths(pb, 1, &o, &m), DCK_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "not.in.any.shard"));
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "in no shard"));
    /* a name listed twice */
    char *dup = write_index("dup.index.json", 0, 1);
    const char *pu[] = {dup};
    ck_assert_int_eq(dck_hash_paths(pu, 1, &o, &m), DCK_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "duplicate"));
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "dup.index.json"));
    for (int s = 0; s < SHARDS; s++) free((char *)shards[s]);
    free(idx);
    free(bad);
    free(dup);
}
END_TEST

/* A header of 100,000 tensors whose last key repeats one far before it. */
START_TEST(test_duplicate_key_at_scale) {
    size_t cap = (size_t)NT * 96 + 64, k = 0;
    char *h = malloc(cap);
    h[k++] = '{';
    for (size_t i = 0; i <= NT; i++)
        k += (size_t)snprintf(h + k, cap - k, "%s\"t%zu\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[%zu,%zu]}",
                              i ? "," : "", i == NT ? 17 : i, i, i + 1);
    h[k++] = '}';
    char *p = tu_path(dir, "dup.safetensors");
    FILE *f = fopen(p, "wb");
    uint8_t lb[8];
    for (int i = 0; i < 8; i++) lb[i] = (uint8_t)((uint64_t)k >> (8 * i));
    fwrite(lb, 1, 8, f);
    fwrite(h, 1, k, f);
    for (size_t i = 0; i <= NT; i++) fputc(0, f);
    fclose(f);
    const char *ps[] = {p};
    dck_manifest *m = NULL;
    ck_assert_int_eq(dck_hash_paths(ps, 1, NULL, &m), DCK_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "invalid JSON"));
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "duplicate"));
    ck_assert_ptr_nonnull(strstr(dck_last_error(), p));
    free(h);
    free(p);
}
END_TEST

/* A tensor in many chunks (DCP writes one per rank and per chunk): the
 * overlap check sorts instead of comparing every pair. Pairwise, 40,000
 * chunks took 3.5 s and one bad chunk among 200,000 about 90 s; the sweep
 * takes about 5 s for all of this test (10x under its tcase's 60 s
 * timeout, which a quadratic check overruns on any machine). The
 * verdicts are the pairwise check's: disjoint chunks pass, one overlapping
 * chunk or one missing chunk is named. */
#define NCHUNK 200000
#define GRID 300

static dck_checkpoint *chunked(const char *dir, uint64_t n1, uint64_t n2, int extra_overlap, int drop) {
    char *path = tu_path(dir, "chunks.bin");
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    for (uint64_t i = 0; i < n1 * n2; i++) {
        float v = (float)i;
        fwrite(&v, 4, 1, f);
    }
    fclose(f);
    dck_checkpoint *ck = NULL;
    ck_assert_int_eq(dck_ck_create(NULL, &ck), DCK_OK);
    dck_file *df = NULL;
    ck_assert_msg(dck_file_open(path, "chunks.bin", &df) == DCK_OK, "%s", dck_last_error());
    uint32_t fi;
    ck_assert_int_eq(dck_ck_add_file(ck, df, &fi), DCK_OK);
    uint64_t g[2] = {n1, n2};
    int nd = n2 > 1 ? 2 : 1;
    /* chunks in an order that is not the file's: a permutation */
    uint64_t n = n1 * n2, step = 7919;
    for (uint64_t k = 0; k < n; k++) {
        uint64_t i = (k * step) % n;
        if (drop && i == n / 2) continue;
        dck_piece p = {0};
        p.file = fi;
        p.file_offset = 4 * i;
        p.offset[0] = i / n2;
        p.shape[0] = 1;
        if (nd == 2) {
            p.offset[1] = i % n2;
            p.shape[1] = 1;
        }
        ck_assert_msg(dck_ck_add_piece(ck, "w", DCK_F32, g, nd, &p) == DCK_OK, "%s", dck_last_error());
    }
    if (extra_overlap) { /* a chunk of two elements over two others */
        dck_piece p = {0};
        p.file = fi;
        p.offset[0] = nd == 2 ? n1 / 2 : n / 3;
        p.shape[0] = nd == 2 ? 1 : 2;
        if (nd == 2) {
            p.offset[1] = n2 / 2;
            p.shape[1] = 2;
        }
        ck_assert_int_eq(dck_ck_add_piece(ck, "w", DCK_F32, g, nd, &p), DCK_OK);
    }
    free(path);
    return ck;
}

START_TEST(test_many_chunks_one_tensor) {
    dck_checkpoint *ck = chunked(dir, NCHUNK, 1, 0, 0);
    ck_assert_msg(dck_ck_validate(ck) == DCK_OK, "%s", dck_last_error());
    dck_checkpoint_free(ck);
    ck = chunked(dir, GRID, GRID, 0, 0); /* a 2-D grid of chunks */
    ck_assert_msg(dck_ck_validate(ck) == DCK_OK, "%s", dck_last_error());
    dck_checkpoint_free(ck);
    for (int two = 0; two < 2; two++) {
        ck = two ? chunked(dir, GRID, GRID, 1, 0) : chunked(dir, NCHUNK, 1, 1, 0);
        ck_assert_int_eq(dck_ck_validate(ck), DCK_ERR_LAYOUT);
        ck_assert_msg(strstr(dck_last_error(), "tensor w: slices in") &&
                          strstr(dck_last_error(), "overlap"),
                      "%s", dck_last_error());
        dck_checkpoint_free(ck);
    }
    ck = chunked(dir, NCHUNK, 1, 0, 1);
    ck_assert_int_eq(dck_ck_validate(ck), DCK_ERR_LAYOUT);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "gap"));
    dck_checkpoint_free(ck);
}
END_TEST

int main(void) {
    Suite *s = suite_create("scale");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_100k_tensors_one_file);
    tcase_add_test(tc, test_index_over_8_shards);
    tcase_add_test(tc, test_duplicate_key_at_scale);
    suite_add_tcase(s, tc);
    TCase *chunks = tcase_create("chunks");
    tcase_set_timeout(chunks, 60);
    tcase_add_checked_fixture(chunks, setup, teardown);
    tcase_add_test(chunks, test_many_chunks_one_tensor);
    suite_add_tcase(s, chunks);
    return tu_run(s);
}

/* safetensors reader and writer, detcheck's sharded layout (stitching of
 * slices along any dim, 1 to 4 ways, on and off segment edges), zstd, and
 * every kind of bad input the foundation issue lists. */
#include "testutil.h"
#include "formats/formats.h"

#include <jansson.h>
#include <zstd.h>

static char *dir;

static void setup(void) { dir = tu_tmpdir(); }
static void teardown(void) { tu_tmpdir_free(dir); dir = NULL; }

static float *make_f32(size_t n, unsigned seed) {
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = (float)((i * 2654435761u + seed) % 100003) * 0.001f - 7.5f;
    return v;
}

/* Writes a raw safetensors file: header text + data bytes of length dlen. */
static char *raw_st(const char *name, const char *hdr, size_t dlen, uint64_t fake_len) {
    char *p = tu_path(dir, name);
    FILE *f = fopen(p, "wb");
    uint64_t n = fake_len ? fake_len : strlen(hdr);
    uint8_t lb[8];
    for (int i = 0; i < 8; i++) lb[i] = (uint8_t)(n >> (8 * i));
    fwrite(lb, 1, 8, f);
    fwrite(hdr, 1, strlen(hdr), f);
    for (size_t i = 0; i < dlen; i++) fputc((int)(i & 0xff), f);
    fclose(f);
    return p;
}

static dck_status hash1(const char *path, dck_manifest **m) {
    const char *ps[] = {path};
    return dck_hash_paths(ps, 1, NULL, m);
}

START_TEST(test_roundtrip_single) {
    float *a = make_f32(300, 1);
    int64_t step = 42;
    dck_st_tensor t[2] = {
        {.name = "model.layers.0.weight", .dtype = DCK_F32, .ndim = 2, .shape = {3, 100}, .data = a},
        {.name = "train.step", .dtype = DCK_I64, .ndim = 0, .data = &step},
    };
    char *p = tu_path(dir, "a.safetensors");
    ck_assert_int_eq(dck_safetensors_write(p, t, 2, NULL, 0, 0), DCK_OK);
    dck_manifest *m;
    ck_assert_int_eq(hash1(p, &m), DCK_OK);
    ck_assert_uint_eq(dck_manifest_tensor_count(m), 2);
    const dck_manifest_tensor *w = dck_manifest_find_tensor(m, "model.layers.0.weight");
    ck_assert_ptr_nonnull(w);
    dck_digest want;
    dck_digest_buffer(DCK_F32, t[0].shape, 2, a, 1200, 1, &want);
    ck_assert(dck_digest_equal(want, w->digest));
    ck_assert_int_eq(w->group, DCK_GROUP_WEIGHTS);
    ck_assert_int_eq(dck_manifest_find_tensor(m, "train.step")->group, DCK_GROUP_OTHER);
    ck_assert_uint_eq(dck_manifest_file_count(m), 1);
    ck_assert_str_eq(dck_manifest_file_at(m, 0)->path, "a.safetensors");
    dck_manifest_free(m);
    free(p);
    free(a);
}
END_TEST

/* Splits a [R, C] tensor into k slices along dim, at uneven cut points, each
 * slice a shard file; the sharded digest must equal the unsharded one. */
static void check_split(dck_dtype dt, uint64_t R, uint64_t C, int dim, int k, int zstd) {
    size_t es = dck_dtype_size(dt);
    size_t nb = (size_t)(R * C * es);
    uint8_t *full = malloc(nb);
    for (size_t i = 0; i < nb; i++) full[i] = (uint8_t)(i * 131 + R + C + (size_t)k);
    uint64_t gshape[2] = {R, C};
    dck_digest want;
    ck_assert_int_eq(dck_digest_buffer(dt, gshape, 2, full, nb, 1, &want), DCK_OK);
    uint64_t extent = dim == 0 ? R : C;
    uint64_t cuts[6];
    cuts[0] = 0;
    for (int i = 1; i < k; i++) cuts[i] = extent * (uint64_t)i / (uint64_t)k + (i % 2); /* uneven */
    cuts[k] = extent;
    char sub[64];
    snprintf(sub, sizeof sub, "split_%d_%d_%llu_%llu_%d", dim, k, (unsigned long long)R, (unsigned long long)C, zstd);
    char *sd = tu_path(dir, sub);
    mkdir(sd, 0755);
    const char *paths[6];
    for (int s = 0; s < k; s++) {
        uint64_t a = cuts[s], b = cuts[s + 1];
        uint64_t rows = dim == 0 ? b - a : R, cols = dim == 0 ? C : b - a;
        uint8_t *slice = malloc((size_t)(rows * cols * es) + 1);
        for (uint64_t r = 0; r < rows; r++)
            for (uint64_t c = 0; c < cols; c++) {
                uint64_t gr = dim == 0 ? a + r : r, gc = dim == 0 ? c : a + c;
                memcpy(slice + (r * cols + c) * es, full + (gr * C + gc) * es, es);
            }
        dck_st_tensor t = {.name = "w", .dtype = dt, .ndim = 2, .shape = {rows, cols}, .data = slice,
                           .global_ndim = 2, .global_shape = {R, C}};
        t.offset[dim] = a;
        char fn[64];
        snprintf(fn, sizeof fn, "shard%d.safetensors%s", s, zstd ? ".zst" : "");
        char *p = tu_path(sd, fn);
        ck_assert_int_eq(dck_safetensors_write(p, &t, 1, NULL, 0, zstd ? 3 : 0), DCK_OK);
        paths[s] = p;
        free(slice);
    }
    /* as a list of files, in reverse order */
    const char *rev[6];
    for (int s = 0; s < k; s++) rev[s] = paths[k - 1 - s];
    for (int threads = 1; threads <= 3; threads += 2) {
        dck_options o;
        dck_options_init(&o);
        o.threads = threads;
        dck_manifest *m;
        ck_assert_msg(dck_hash_paths(rev, (size_t)k, &o, &m) == DCK_OK, "%s", dck_last_error());
        ck_assert_msg(dck_digest_equal(dck_manifest_tensor_at(m, 0)->digest, want),
                      "split dim %d k %d R %llu C %llu", dim, k, (unsigned long long)R, (unsigned long long)C);
        ck_assert_uint_eq(dck_manifest_tensor_at(m, 0)->shape[0], R);
        dck_manifest_free(m);
    }
    /* as a directory */
    dck_manifest *m;
    ck_assert_int_eq(hash1(sd, &m), DCK_OK);
    ck_assert(dck_digest_equal(dck_manifest_tensor_at(m, 0)->digest, want));
    ck_assert_uint_eq(dck_manifest_file_count(m), (size_t)k);
    dck_manifest_free(m);
    /* logical reads give the full tensor back */
    dck_checkpoint *ck;
    ck_assert_int_eq(dck_checkpoint_open(paths, (size_t)k, NULL, &ck), DCK_OK);
    uint8_t *back = malloc(nb + 1);
    ck_assert_int_eq(dck_checkpoint_read(ck, 0, 0, back, nb), DCK_OK);
    ck_assert(memcmp(back, full, nb) == 0);
    if (nb > 10) {
        ck_assert_int_eq(dck_checkpoint_read(ck, 0, 3, back, nb - 7), DCK_OK);
        ck_assert(memcmp(back, full + 3, nb - 7) == 0);
    }
    dck_checkpoint_free(ck);
    free(back);
    for (int s = 0; s < k; s++) free((char *)paths[s]);
    free(sd);
    free(full);
}

START_TEST(test_sharded_dim0) {
    for (int k = 1; k <= 4; k++) {
        check_split(DCK_F32, 7, 100, 0, k, 0);  /* 400-byte rows: cuts off segment edges */
        check_split(DCK_BF16, 8, 64, 0, k, 0);  /* 128-byte rows: cuts on edges */
        check_split(DCK_U8, 33, 5, 0, k, 0);
    }
}
END_TEST

START_TEST(test_sharded_lastdim) {
    for (int k = 1; k <= 4; k++) {
        check_split(DCK_F32, 7, 100, 1, k, 0);
        check_split(DCK_BF16, 6, 256, 1, k, 0); /* 64-element pieces: whole segments */
        check_split(DCK_F64, 5, 9, 1, k, 0);
    }
}
END_TEST

START_TEST(test_sharded_zstd) {
    check_split(DCK_F32, 50, 70, 0, 3, 1);
    check_split(DCK_F32, 50, 70, 1, 2, 1);
}
END_TEST

START_TEST(test_sharded_errors) {
    float a[8] = {0};
    /* overlap: two slices [0,3) and [2,4) of a [4, 2] tensor */
    dck_st_tensor t1 = {.name = "w", .dtype = DCK_F32, .ndim = 2, .shape = {3, 2}, .data = a,
                        .global_ndim = 2, .global_shape = {4, 2}};
    dck_st_tensor t2 = t1;
    t2.shape[0] = 2;
    t2.offset[0] = 2;
    char *p1 = tu_path(dir, "o1.safetensors"), *p2 = tu_path(dir, "o2.safetensors");
    dck_safetensors_write(p1, &t1, 1, NULL, 0, 0);
    dck_safetensors_write(p2, &t2, 1, NULL, 0, 0);
    const char *ps[] = {p1, p2};
    dck_manifest *m;
    ck_assert_int_eq(dck_hash_paths(ps, 2, NULL, &m), DCK_ERR_LAYOUT);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "overlap"));
    /* gap: [0,1) and [2,4) */
    t1.shape[0] = 1;
    dck_safetensors_write(p1, &t1, 1, NULL, 0, 0);
    ck_assert_int_eq(dck_hash_paths(ps, 2, NULL, &m), DCK_ERR_LAYOUT);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "gap"));
    /* global shapes disagree */
    t1.shape[0] = 2;
    t1.global_shape[0] = 5;
    dck_safetensors_write(p1, &t1, 1, NULL, 0, 0);
    ck_assert_int_eq(dck_hash_paths(ps, 2, NULL, &m), DCK_ERR_LAYOUT);
    /* slice outside the global tensor */
    char *bad = raw_st("slice_oob.safetensors",
                       "{\"__metadata__\":{\"detcheck.slice.w\":\"{\\\"global_shape\\\":[4],\\\"offset\\\":[3]}\"},"
                       "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, 0);
    ck_assert_int_eq(hash1(bad, &m), DCK_ERR_LAYOUT);
    free(bad);
    bad = raw_st("slice_bad.safetensors",
                 "{\"__metadata__\":{\"detcheck.slice.w\":\"{nope\"},"
                 "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, 0);
    ck_assert_int_eq(hash1(bad, &m), DCK_ERR_FORMAT);
    free(bad);
    /* a slice record for a tensor the file does not hold */
    bad = raw_st("slice_orphan.safetensors",
                 "{\"__metadata__\":{\"detcheck.slice.v\":\"{\\\"global_shape\\\":[4],\\\"offset\\\":[0]}\"},"
                 "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, 0);
    ck_assert_int_eq(hash1(bad, &m), DCK_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "does not hold"));
    free(bad);
    /* metadata values are strings */
    bad = raw_st("meta_int.safetensors",
                 "{\"__metadata__\":{\"step\":5},\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                 8, 0);
    ck_assert_int_eq(hash1(bad, &m), DCK_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "not a string"));
    free(bad);
    free(p1);
    free(p2);
}
END_TEST

START_TEST(test_duplicate_across_shards) {
    float a[4] = {1, 2, 3, 4};
    dck_st_tensor t = {.name = "w", .dtype = DCK_F32, .ndim = 1, .shape = {4}, .data = a};
    char *p1 = tu_path(dir, "d1.safetensors"), *p2 = tu_path(dir, "d2.safetensors");
    dck_safetensors_write(p1, &t, 1, NULL, 0, 0);
    dck_safetensors_write(p2, &t, 1, NULL, 0, 0);
    const char *ps[] = {p1, p2};
    dck_manifest *m;
    ck_assert_int_eq(dck_hash_paths(ps, 2, NULL, &m), DCK_ERR_LAYOUT);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "duplicate tensor name w"));
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "d1.safetensors"));
    free(p1);
    free(p2);
}
END_TEST

#define EXPECT_BAD(path, status, text)                                                        \
    do {                                                                                     \
        dck_manifest *m_ = NULL;                                                             \
        dck_status s_ = hash1(path, &m_);                                                    \
        ck_assert_msg(s_ == (status), "%s: got %d (%s)", path, s_, dck_last_error());        \
        ck_assert_msg(strstr(dck_last_error(), text) != NULL, "message '%s' lacks '%s'",     \
                      dck_last_error(), text);                                               \
        ck_assert_ptr_nonnull(strstr(dck_last_error(), path));                               \
        dck_manifest_free(m_);                                                               \
    } while (0)

START_TEST(test_bad_inputs) {
    char *p;
    p = raw_st("t1.safetensors", "", 0, 0);
    /* a 3-byte file */
    FILE *f = fopen(p, "wb");
    fwrite("abc", 1, 3, f);
    fclose(f);
    { dck_manifest *m; ck_assert_int_ne(hash1(p, &m), DCK_OK); }
    free(p);
    /* truncated file: data shorter than offsets say */
    p = raw_st("trunc.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 10, 0);
    EXPECT_BAD(p, DCK_ERR_FORMAT, "out of bounds");
    free(p);
    /* header length beyond the file */
    p = raw_st("hl.safetensors", "{}", 0, 5000);
    EXPECT_BAD(p, DCK_ERR_TRUNCATED, "beyond the file");
    free(p);
    /* header over 100 MB */
    p = raw_st("huge.safetensors", "{}", 0, 200000000ull);
    EXPECT_BAD(p, DCK_ERR_LIMIT, "limit");
    free(p);
    /* invalid JSON */
    p = raw_st("json.safetensors", "{\"w\": {\"dtype\": ", 0, 0);
    EXPECT_BAD(p, DCK_ERR_FORMAT, "invalid JSON");
    free(p);
    /* unknown dtype */
    p = raw_st("dt.safetensors", "{\"w\":{\"dtype\":\"F128\",\"shape\":[1],\"data_offsets\":[0,16]}}", 16, 0);
    EXPECT_BAD(p, DCK_ERR_UNSUPPORTED, "unknown dtype F128");
    free(p);
    /* shape product overflow */
    p = raw_st("ovf.safetensors",
               "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,4]}}", 4, 0);
    EXPECT_BAD(p, DCK_ERR_LIMIT, "overflow");
    free(p);
    /* offsets not matching shape x dtype */
    p = raw_st("size.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,16]}}", 16, 0);
    EXPECT_BAD(p, DCK_ERR_FORMAT, "shape x dtype size");
    free(p);
    /* overlapping */
    p = raw_st("ovl.safetensors",
               "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, 0);
    EXPECT_BAD(p, DCK_ERR_FORMAT, "overlap");
    free(p);
    /* non-contiguous */
    p = raw_st("hole.safetensors",
               "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}", 20, 0);
    EXPECT_BAD(p, DCK_ERR_FORMAT, "not contiguous");
    free(p);
    /* trailing bytes */
    p = raw_st("trail.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12, 0);
    EXPECT_BAD(p, DCK_ERR_FORMAT, "trailing");
    free(p);
    /* duplicate keys in the header */
    p = raw_st("dupkey.safetensors",
               "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, 0);
    EXPECT_BAD(p, DCK_ERR_FORMAT, "invalid JSON");
    free(p);
    /* missing fields */
    p = raw_st("fields.safetensors", "{\"a\":{\"dtype\":\"F32\"}}", 0, 0);
    EXPECT_BAD(p, DCK_ERR_FORMAT, "data_offsets");
    free(p);
    /* not a checkpoint */
    p = tu_path(dir, "text.txt");
    tu_write(p, "hello world, this is not a checkpoint", 37);
    EXPECT_BAD(p, DCK_ERR_UNSUPPORTED, "not a checkpoint");
    free(p);
    /* missing path */
    p = tu_path(dir, "nope.safetensors");
    EXPECT_BAD(p, DCK_ERR_IO, "No such file");
    free(p);
}
END_TEST

START_TEST(test_zstd_stream_and_corrupt) {
    float *a = make_f32(100000, 3);
    dck_st_tensor t = {.name = "w", .dtype = DCK_F32, .ndim = 1, .shape = {100000}, .data = a};
    char *p = tu_path(dir, "z.safetensors"), *pz = tu_path(dir, "z.safetensors.zst");
    dck_safetensors_write(p, &t, 1, NULL, 0, 0);
    dck_safetensors_write(pz, &t, 1, NULL, 0, 5);
    dck_manifest *m1, *m2;
    ck_assert_int_eq(hash1(p, &m1), DCK_OK);
    ck_assert_int_eq(hash1(pz, &m2), DCK_OK);
    ck_assert(dck_digest_equal(dck_manifest_root(m1), dck_manifest_root(m2)));
    /* file hash is of the stored (compressed) bytes */
    FILE *f = fopen(pz, "rb");
    fseek(f, 0, SEEK_END);
    long zl = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *zb = malloc((size_t)zl);
    ck_assert_int_eq(fread(zb, 1, (size_t)zl, f), zl);
    fclose(f);
    ck_assert(dck_digest_equal(dck_manifest_file_at(m2, 0)->xxh128, dck_xxh128(zb, (size_t)zl)));
    ck_assert_uint_eq(dck_manifest_file_at(m2, 0)->bytes, (uint64_t)zl);
    dck_manifest_free(m1);
    dck_manifest_free(m2);
    /* corrupt frame: flip bytes in the middle */
    for (long i = zl / 2; i < zl / 2 + 16; i++) zb[i] ^= 0x5a;
    tu_write(pz, zb, (size_t)zl);
    EXPECT_BAD(pz, DCK_ERR_FORMAT, "corrupt zstd frame");
    /* truncated frame */
    for (long i = zl / 2; i < zl / 2 + 16; i++) zb[i] ^= 0x5a;
    tu_write(pz, zb, (size_t)zl - 100);
    { dck_manifest *m; dck_status s = hash1(pz, &m); ck_assert_int_ne(s, DCK_OK); ck_assert_ptr_nonnull(strstr(dck_last_error(), pz)); }
    free(zb);
    free(p);
    free(pz);
    free(a);
}
END_TEST

START_TEST(test_hf_index) {
    float *a = make_f32(64, 1), *b = make_f32(32, 2);
    dck_st_tensor t1 = {.name = "model.layers.10.w", .dtype = DCK_F32, .ndim = 1, .shape = {64}, .data = a};
    dck_st_tensor t2 = {.name = "model.layers.2.w", .dtype = DCK_F32, .ndim = 1, .shape = {32}, .data = b};
    char *p1 = tu_path(dir, "model-00001-of-00002.safetensors");
    char *p2 = tu_path(dir, "model-00002-of-00002.safetensors");
    dck_safetensors_write(p1, &t1, 1, NULL, 0, 0);
    dck_safetensors_write(p2, &t2, 1, NULL, 0, 0);
    const char *idx = "{\"metadata\":{\"total_size\":384},\"weight_map\":{"
                      "\"model.layers.10.w\":\"model-00001-of-00002.safetensors\","
                      "\"model.layers.2.w\":\"model-00002-of-00002.safetensors\"}}";
    char *pi = tu_path(dir, "model.safetensors.index.json");
    tu_write(pi, idx, strlen(idx));
    dck_manifest *m;
    ck_assert_int_eq(hash1(pi, &m), DCK_OK);
    ck_assert_uint_eq(dck_manifest_tensor_count(m), 2);
    /* model order: layers.2 before layers.10 */
    ck_assert_str_eq(dck_manifest_tensor_at(m, 0)->name, "model.layers.2.w");
    dck_digest r = dck_manifest_root(m);
    dck_manifest_free(m);
    /* the directory uses the index too */
    ck_assert_int_eq(hash1(dir, &m), DCK_OK);
    ck_assert(dck_digest_equal(r, dck_manifest_root(m)));
    dck_manifest_free(m);
    /* an index naming a tensor no shard holds */
    const char *bad = "{\"weight_map\":{\"x\":\"model-00001-of-00002.safetensors\","
                      "\"model.layers.10.w\":\"model-00001-of-00002.safetensors\"}}";
    tu_write(pi, bad, strlen(bad));
    EXPECT_BAD(pi, DCK_ERR_FORMAT, "in no shard");
    const char *evil = "{\"weight_map\":{\"x\":\"../../etc/passwd\"}}";
    tu_write(pi, evil, strlen(evil));
    EXPECT_BAD(pi, DCK_ERR_FORMAT, "relative");
    free(p1);
    free(p2);
    free(pi);
    free(a);
    free(b);
}
END_TEST

START_TEST(test_threads_and_large) {
    /* > one 64 MiB window, several tensors, unaligned sizes */
    size_t n1 = 20 * 1024 * 1024 + 3, n2 = 999, n3 = 5 * 1024 * 1024 + 1;
    float *a = make_f32(n1, 1), *b = make_f32(n2, 2), *c = make_f32(n3, 3);
    dck_st_tensor t[3] = {
        {.name = "a", .dtype = DCK_F32, .ndim = 1, .shape = {n1}, .data = a},
        {.name = "b", .dtype = DCK_F32, .ndim = 1, .shape = {n2}, .data = b},
        {.name = "c", .dtype = DCK_F32, .ndim = 1, .shape = {n3}, .data = c},
    };
    char *p = tu_path(dir, "big.safetensors");
    ck_assert_int_eq(dck_safetensors_write(p, t, 3, NULL, 0, 0), DCK_OK);
    dck_digest want[3];
    for (int i = 0; i < 3; i++)
        dck_digest_buffer(DCK_F32, t[i].shape, 1, t[i].data, t[i].shape[0] * 4, 1, &want[i]);
    dck_digest root0 = {0, 0};
    for (int th = 1; th <= 4; th++) {
        dck_options o;
        dck_options_init(&o);
        o.threads = th;
        const char *ps[] = {p};
        dck_manifest *m;
        ck_assert_int_eq(dck_hash_paths(ps, 1, &o, &m), DCK_OK);
        for (int i = 0; i < 3; i++)
            ck_assert(dck_digest_equal(dck_manifest_tensor_at(m, (size_t)i)->digest, want[i]));
        if (th == 1) root0 = dck_manifest_root(m);
        ck_assert(dck_digest_equal(root0, dck_manifest_root(m)));
        dck_manifest_free(m);
    }
    free(p);
    free(a);
    free(b);
    free(c);
}
END_TEST

/* A strided view may broadcast (stride 0) beyond its storage, but a tiny
 * file must not claim an astronomically large tensor (hash would run for
 * ever): views are capped at DCK_MAX_VIEW_EXPANSION x storage + 1 GiB. */
START_TEST(test_view_expansion_limit) {
    char *p = tu_path(dir, "storage.bin");
    tu_write(p, "abcdefgh", 8);
    for (int huge = 0; huge <= 1; huge++) {
        dck_checkpoint *ck;
        ck_assert_int_eq(dck_ck_create(NULL, &ck), DCK_OK);
        dck_file *f;
        ck_assert_int_eq(dck_file_open(p, "storage.bin", &f), DCK_OK);
        uint32_t fi;
        ck_assert_int_eq(dck_ck_add_file(ck, f, &fi), DCK_OK);
        uint64_t n = huge ? (1ull << 30) : 1000;
        uint64_t shape[2] = {n, n};
        dck_piece pc;
        memset(&pc, 0, sizeof pc);
        pc.file = fi;
        pc.shape[0] = pc.shape[1] = n;
        pc.strides = calloc(2, sizeof *pc.strides); /* stride 0, 0: one element broadcast */
        ck_assert_int_eq(dck_ck_add_piece(ck, "w", DCK_F32, shape, 2, &pc), DCK_OK);
        dck_status s = dck_ck_validate(ck);
        if (huge) {
            ck_assert_int_eq(s, DCK_ERR_LIMIT);
            ck_assert_ptr_nonnull(strstr(dck_last_error(), "expansion limit"));
            ck_assert_ptr_nonnull(strstr(dck_last_error(), "storage.bin"));
        } else {
            ck_assert_msg(s == DCK_OK, "%s", dck_last_error()); /* 4 MB over 4 bytes: a real broadcast */
        }
        dck_checkpoint_free(ck);
    }
    free(p);
}
END_TEST


/* The header reader accepts exactly the JSON that jansson's loader accepts
 * with the flags the reader used before it (JSON_REJECT_DUPLICATES |
 * JSON_ALLOW_NUL): every malformed header is still rejected, naming the
 * file, and nothing valid is. jansson is the judge here; the fuzz target
 * (tests/fuzz/fuzz_safetensors.c) asks it the same question at random. */
typedef struct {
    const char *text;
    size_t len; /* 0: strlen */
} hdr_case;

#define E "\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]"

static const hdr_case header_cases[] = {
    {"{\"a\":{" E "}}", 0},
    {"  {\"a\":{" E "}}  \n\t\r ", 0},
    {"{\"a\":{" E "}} x", 0},
    {"{\"a\":{" E "}}\0", sizeof("{\"a\":{" E "}}\0") - 1}, /* NUL padding */
    {"{\"a\":{" E "},}", 0},
    {"{\"a\":{" E ",}}", 0},
    {"{\"a\":{" E "}", 0},
    {"{\"a\" {" E "}}", 0},
    {"{'a':{" E "}}", 0},
    {"{a:{" E "}}", 0},
    {"[]", 0},
    {"[1,2,]", 0},
    {"\"x\"", 0},
    {"", 0},
    {"{}", 0},
    {"{\"a\":{" E "},\"a\":{" E "}}", 0},
    {"{\"a\":{" E ",\"dtype\":\"U8\"}}", 0},
    {"{\"a\":{" E ",\"x\":{\"k\":1,\"k\":2}}}", 0},
    {"{\"a\":{" E ",\"x\":[{\"k\":1},{\"k\":2}]}}", 0},
    {"{\"__metadata__\":{\"k\":\"v\",\"k\":\"w\"},\"a\":{" E "}}", 0},
    {"{\"__metadata__\":{\"k\":\"v\"},\"__metadata__\":{},\"a\":{" E "}}", 0},
    {"{\"__metadata__\":{\"k\":\"v\\u0000w\"},\"a\":{" E "}}", 0},
    {"{\"a\\u0000b\":{" E "}}", 0},
    {"{\"a\":{" E ",\"x\":\"\\ud83d\\ude00\"}}", 0},
    {"{\"a\":{" E ",\"x\":\"\\ud83d\"}}", 0},
    {"{\"a\":{" E ",\"x\":\"\\ude00\"}}", 0},
    {"{\"a\":{" E ",\"x\":\"\\ud83d\\u0041\"}}", 0},
    {"{\"a\":{" E ",\"x\":\"\\u12G4\"}}", 0},
    {"{\"a\":{" E ",\"x\":\"\\x41\"}}", 0},
    {"{\"a\":{" E ",\"x\":\"\\/\\b\\f\\n\\r\\t\\\"\\\\\"}}", 0},
    {"{\"a\":{" E ",\"x\":\"tab\there\"}}", 0},
    {"{\"a\":{" E ",\"x\":\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"}}", 0},
    {"{\"a\":{" E ",\"x\":\"\xc0\x80\"}}", 0},
    {"{\"a\":{" E ",\"x\":\"\xed\xa0\x80\"}}", 0},
    {"{\"a\":{" E ",\"x\":\"\xf4\x90\x80\x80\"}}", 0},
    {"{\"a\":{" E ",\"x\":\"\xf5\x80\x80\x80\"}}", 0},
    {"{\"a\":{" E ",\"x\":\"\xe2\x82\"}}", 0},
    {"{\"a\":{" E ",\"x\":\"\x80\"}}", 0},
    {"{\"a\":{" E ",\"x\":\"\x7f\"}}", 0},
    {"{\"\xff\":{" E "}}", 0},
    {"{\"a\":{" E ",\"x\":1e400}}", 0},
    {"{\"a\":{" E ",\"x\":-1e400}}", 0},
    {"{\"a\":{" E ",\"x\":1e-400}}", 0},
    {"{\"a\":{" E ",\"x\":1.5E+3}}", 0},
    {"{\"a\":{" E ",\"x\":01}}", 0},
    {"{\"a\":{" E ",\"x\":-0}}", 0},
    {"{\"a\":{" E ",\"x\":-}}", 0},
    {"{\"a\":{" E ",\"x\":1.}}", 0},
    {"{\"a\":{" E ",\"x\":.5}}", 0},
    {"{\"a\":{" E ",\"x\":1e}}", 0},
    {"{\"a\":{" E ",\"x\":1e+}}", 0},
    {"{\"a\":{" E ",\"x\":+1}}", 0},
    {"{\"a\":{" E ",\"x\":9223372036854775807}}", 0},
    {"{\"a\":{" E ",\"x\":9223372036854775808}}", 0},
    {"{\"a\":{" E ",\"x\":-9223372036854775808}}", 0},
    {"{\"a\":{" E ",\"x\":-9223372036854775809}}", 0},
    {"{\"a\":{" E ",\"x\":123456789012345678901234567890}}", 0},
    {"{\"a\":{" E ",\"x\":12a}}", 0},
    {"{\"a\":{" E ",\"x\":[true,false,null]}}", 0},
    {"{\"a\":{" E ",\"x\":tru}}", 0},
    {"{\"a\":{" E ",\"x\":nulll}}", 0},
    {"{\"a\":{" E ",\"x\":True}}", 0},
    {"{\"a\":{" E ",\"x\":[1 2]}}", 0},
    {"{\"a\":{" E ",\"x\":[1,]}}", 0},
    {"{\"a\":{" E ",\"x\":{}}}", 0},
    {"{\"a\":{" E ",\"x\":{\"\":1}}}", 0},
    {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1e0],\"data_offsets\":[0,1]}}", 0},
    {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,99999999999999999999]}}", 0},
    {"{\"a\":{\"dtype\":\"U8\\u0000x\",\"shape\":[1],\"data_offsets\":[0,1]}}", 0},
    {"{\"a\":{" E "},\"b\":\"c\"}", 0},
    {"{\"a\":{" E "}\"b\":1}", 0},
    {"{\"a\":{" E "}}}", 0},
    {"{\"a\":{" E "}]", 0},
};

static int jansson_accepts(const char *t, size_t n) {
    json_error_t je;
    json_t *j = json_loadb(t, n, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    json_decref(j);
    return j != NULL;
}

/* Our reader's verdict on the JSON (not on what it says): 1 accepted. */
static int reader_accepts(const char *t, size_t n, const char *file) {
    dck_checkpoint *ck;
    ck_assert_int_eq(dck_ck_create(NULL, &ck), DCK_OK);
    dck_file *f;
    ck_assert_int_eq(dck_file_open(file, "x", &f), DCK_OK);
    uint32_t fi;
    ck_assert_int_eq(dck_ck_add_file(ck, f, &fi), DCK_OK);
    dck_status s = dck_safetensors_parse_header(ck, fi, t, n, UINT64_MAX, "hdr.safetensors");
    int syntax = s == DCK_ERR_FORMAT && strstr(dck_last_error(), "invalid JSON");
    if (s) ck_assert_ptr_nonnull(strstr(dck_last_error(), "hdr.safetensors"));
    dck_checkpoint_free(ck);
    return !syntax;
}

/* nesting depth d inside an extra field of a valid entry */
static char *nested(int d, size_t *len) {
    size_t cap = (size_t)d * 2 + 128, k = 0;
    char *t = malloc(cap);
    k += (size_t)snprintf(t, cap, "{\"a\":{" E ",\"x\":");
    for (int i = 0; i < d; i++) t[k++] = '[';
    for (int i = 0; i < d; i++) t[k++] = ']';
    k += (size_t)snprintf(t + k, cap - k, "}}");
    *len = k;
    return t;
}

START_TEST(test_header_json_as_jansson) {
    char *file = tu_path(dir, "any.bin");
    tu_write(file, "x", 1);
    for (size_t i = 0; i < sizeof header_cases / sizeof header_cases[0]; i++) {
        const char *t = header_cases[i].text;
        size_t n = header_cases[i].len ? header_cases[i].len : strlen(t);
        int want = jansson_accepts(t, n), got = reader_accepts(t, n, file);
        ck_assert_msg(want == got, "case %zu (%.*s): jansson %s, reader %s (%s)", i, (int)n, t,
                      want ? "accepts" : "rejects", got ? "accepts" : "rejects", dck_last_error());
    }
    /* nesting: the value at depth 2048 is jansson's last; 4 levels are the
     * header's own (object, entry, the field's value) */
    for (int d = 2040; d <= 2050; d++) {
        size_t n;
        char *t = nested(d, &n);
        int want = jansson_accepts(t, n), got = reader_accepts(t, n, file);
        ck_assert_msg(want == got, "depth %d: jansson %d, reader %d", d, want, got);
        free(t);
    }
    free(file);
}
END_TEST

static unsigned char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*len ? *len : 1);
    ck_assert_uint_eq(fread(b, 1, *len, f), *len);
    fclose(f);
    return b;
}

/* A directory of files on both sides of the size up to which the engine
 * reads a file whole into a buffer of its own (256 KiB) rather than
 * streaming it: every tensor digest and whole-file hash is the buffer's,
 * for every thread count; a file that grows after it was opened is hashed
 * as it was (its first `bytes` bytes), as a streamed file is. */
START_TEST(test_small_files_read_whole) {
    static const size_t elems[] = {1, 100, 65000, 65500, 65530, 65536, 66000, 100000};
    enum { NF = sizeof elems / sizeof elems[0] };
    char *paths[NF];
    dck_digest want[NF][2];
    unsigned char *bytes[NF];
    size_t len[NF];
    for (size_t i = 0; i < NF; i++) {
        char name[64];
        snprintf(name, sizeof name, "f%zu.safetensors", i);
        paths[i] = tu_path(dir, name);
        float *a = make_f32(elems[i], (int)i + 1), *b = make_f32(i + 3, (int)i + 7);
        char na[32], nb[32];
        snprintf(na, sizeof na, "f%zu.a", i);
        snprintf(nb, sizeof nb, "f%zu.b", i);
        dck_st_tensor t[2] = {
            {.name = na, .dtype = DCK_F32, .ndim = 1, .shape = {elems[i]}, .data = a},
            {.name = nb, .dtype = DCK_F32, .ndim = 1, .shape = {i + 3}, .data = b},
        };
        ck_assert_int_eq(dck_safetensors_write(paths[i], t, 2, NULL, 0, 0), DCK_OK);
        for (int k = 0; k < 2; k++)
            dck_digest_buffer(DCK_F32, t[k].shape, 1, t[k].data, t[k].shape[0] * 4, 1, &want[i][k]);
        bytes[i] = slurp(paths[i], &len[i]);
        free(a);
        free(b);
    }
    for (int grow = 0; grow < 2; grow++)
        for (int th = 1; th <= 3; th++) {
            dck_options o;
            dck_options_init(&o);
            o.threads = th;
            const char *ps[] = {dir};
            dck_checkpoint *ck;
            ck_assert_msg(dck_checkpoint_open(ps, 1, &o, &ck) == DCK_OK, "%s", dck_last_error());
            if (grow) /* appended after the open: not hashed */
                for (size_t i = 0; i < NF; i += 3) {
                    FILE *f = fopen(paths[i], "ab");
                    fputs("grown after open", f);
                    fclose(f);
                }
            dck_manifest *m;
            ck_assert_msg(dck_checkpoint_hash(ck, &o, &m) == DCK_OK, "%s", dck_last_error());
            ck_assert_uint_eq(dck_manifest_file_count(m), NF);
            for (size_t i = 0; i < NF; i++) {
                for (size_t k = 0; k < 2; k++)
                    ck_assert(dck_digest_equal(dck_manifest_tensor_at(m, 2 * i + k)->digest, want[i][k]));
                const dck_manifest_file *mf = dck_manifest_file_at(m, i);
                ck_assert_uint_eq(mf->bytes, len[i]);
                ck_assert_msg(dck_digest_equal(mf->xxh128, dck_xxh128(bytes[i], len[i])),
                              "%s: whole-file hash (%zu bytes, %d threads, grown %d)", mf->path, len[i],
                              th, grow);
            }
            dck_manifest_free(m);
            dck_checkpoint_free(ck);
            if (grow) /* back to what they were */
                for (size_t i = 0; i < NF; i += 3) ck_assert_int_eq(truncate(paths[i], (off_t)len[i]), 0);
        }
    for (size_t i = 0; i < NF; i++) {
        free(paths[i]);
        free(bytes[i]);
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("safetensors");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_roundtrip_single);
    tcase_add_test(tc, test_sharded_dim0);
    tcase_add_test(tc, test_sharded_lastdim);
    tcase_add_test(tc, test_sharded_zstd);
    tcase_add_test(tc, test_sharded_errors);
    tcase_add_test(tc, test_duplicate_across_shards);
    tcase_add_test(tc, test_bad_inputs);
    tcase_add_test(tc, test_zstd_stream_and_corrupt);
    tcase_add_test(tc, test_hf_index);
    tcase_add_test(tc, test_threads_and_large);
    tcase_add_test(tc, test_view_expansion_limit);
    tcase_add_test(tc, test_header_json_as_jansson);
    tcase_add_test(tc, test_small_files_read_whole);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

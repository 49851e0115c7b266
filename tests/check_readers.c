/* Readers of PyTorch (.pt zip, legacy, tar), DCP, Megatron and NumPy files:
 * each fixture of tests/fixtures (written by real PyTorch, see
 * make_fixtures.py) must give the same digests as the same tensors written
 * as safetensors, and the values Python prints; zstd-compressed copies the
 * same; DCP saved by 1 and by 2 ranks the same; the public files of
 * ../shared/fixtures/public the digests computed independently (torch +
 * digest v1 in Python); damaged files an error, never a crash. */
#include "testutil.h"
#include "fixtures.h"
#include "formats/formats.h"
#include "formats/readers.h"

#include <jansson.h>
#include <sys/stat.h>
#include <zstd.h>

static dck_manifest *hash_path(const char *path, long iteration, dck_status *st) {
    dck_options o;
    dck_options_init(&o);
    o.threads = 2;
    o.iteration = iteration;
    dck_manifest *m = NULL;
    const char *p[] = {path};
    *st = dck_hash_paths(p, 1, &o, &m);
    return m;
}

static dck_manifest *must_hash(const char *path) {
    dck_status s;
    dck_manifest *m = hash_path(path, -1, &s);
    if (s) ck_abort_msg("%s: %s", path, dck_last_error());
    return m;
}

static void check_pair(const char *ckpt, const char *base) {
    char st[256], vj[256];
    snprintf(st, sizeof st, "%s.safetensors", base);
    snprintf(vj, sizeof vj, "%s.values.json", base);
    dck_manifest *a = must_hash(fx(ckpt)), *b = must_hash(fx(st));
    same_tensors(a, b, ckpt);
    same_values(a, vj);
    dck_manifest_free(a);
    dck_manifest_free(b);
}

START_TEST(pt_dtypes) { check_pair("dtypes.pt", "dtypes"); }
END_TEST
START_TEST(pt_protocol4) { check_pair("dtypes_proto4.pt", "dtypes"); }
END_TEST
START_TEST(pt_views_shared_storage) { check_pair("views.pt", "views"); }
END_TEST
START_TEST(pt_legacy_format) { check_pair("views_legacy.pt", "views"); }
END_TEST
START_TEST(pt_big_endian) { check_pair("bigendian.pt", "bigendian"); }
END_TEST
START_TEST(pt_training_optimizer_rng) {
    check_pair("training.pt", "training");
    dck_manifest *m = must_hash(fx("training.pt"));
    const dck_manifest_tensor *t = dck_manifest_find_tensor(m, "optimizer.state.0.exp_avg");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->group, DCK_GROUP_OPTIMIZER);
    t = dck_manifest_find_tensor(m, "rng_state.0.torch_rng_state");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->group, DCK_GROUP_RNG);
    ck_assert_int_eq(t->dtype, DCK_U8);
    t = dck_manifest_find_tensor(m, "rng_state.0.np_rng_state.1"); /* NumPy MT19937 key, from a pickle */
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->group, DCK_GROUP_RNG);
    ck_assert_int_eq(t->dtype, DCK_U32);
    ck_assert_uint_eq(t->shape[0], 624);
    t = dck_manifest_find_tensor(m, "model.0.weight");
    ck_assert_int_eq(t->group, DCK_GROUP_WEIGHTS);
    /* decoded bytes (the NumPy key) are hashed but are not a file of the checkpoint */
    ck_assert_uint_eq(dck_manifest_file_count(m), 1);
    ck_assert_str_eq(dck_manifest_file_at(m, 0)->path, "training.pt");
    dck_manifest_free(m);
}
END_TEST
/* torch.save(model): module objects named as their state_dict() */
START_TEST(pt_whole_module) { check_pair("whole_model.pt", "whole_model"); }
END_TEST
START_TEST(npy_single) { check_pair("array.npy", "array"); }
END_TEST
START_TEST(npz_stored) { check_pair("arrays.npz", "arrays"); }
END_TEST
START_TEST(npz_deflated) { check_pair("arrays_deflated.npz", "arrays"); }
END_TEST
START_TEST(dcp_one_rank) { check_pair("dcp1", "dcp"); }
END_TEST
START_TEST(dcp_two_ranks) {
    check_pair("dcp2", "dcp");
    dck_manifest *a = must_hash(fx("dcp1")), *b = must_hash(fx("dcp2"));
    same_tensors(a, b, "dcp1 vs dcp2");
    dck_manifest_free(a);
    dck_manifest_free(b);
}
END_TEST
/* chunks as raw row-major bytes (serialization_format=SAFETENSORS) */
START_TEST(dcp_raw_chunks) { check_pair("dcp_raw", "dcp"); }
END_TEST
START_TEST(megatron_legacy_latest) {
    check_pair("megatron", "megatron");
    dck_manifest *m = must_hash(fx("megatron"));
    const dck_manifest_tensor *t = dck_manifest_find_tensor(m, "mp_rank_01.distrib_optim.0.exp_avg");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->group, DCK_GROUP_OPTIMIZER);
    t = dck_manifest_find_tensor(m, "mp_rank_00.rng_state.0.rng_tracker_states.model-parallel-rng");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->group, DCK_GROUP_RNG);
    dck_manifest_free(m);
}
END_TEST
START_TEST(megatron_iteration_option) {
    dck_status s;
    dck_manifest *m = hash_path(fx("megatron"), 10, &s);
    ck_assert_msg(s == DCK_OK, "%s", dck_last_error());
    int found = 0;
    for (size_t i = 0; i < dck_manifest_value_count(m); i++) {
        const dck_manifest_value *v = dck_manifest_value_at(m, i);
        if (!strcmp(v->name, "mp_rank_00.iteration")) {
            ck_assert_str_eq(v->value, "10");
            found++;
        }
        if (!strcmp(v->name, "megatron.iteration")) {
            ck_assert_str_eq(v->value, "10");
            found++;
        }
    }
    ck_assert_int_eq(found, 2);
    dck_manifest_free(m);
    m = hash_path(fx("megatron"), 30, &s);
    ck_assert_int_ne(s, DCK_OK);
    ck_assert_ptr_null(m);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "iter_0000030"));
    /* an iteration directory given directly */
    char p[4200];
    snprintf(p, sizeof p, "%s/iter_0000020", fx("megatron"));
    m = hash_path(p, -1, &s);
    ck_assert_msg(s == DCK_OK, "%s", dck_last_error());
    ck_assert_ptr_nonnull(dck_manifest_find_tensor(m, "mp_rank_00.model.language_model.embedding.word_embeddings.weight"));
    dck_manifest_free(m);
}
END_TEST
START_TEST(megatron_torch_dist) { check_pair("megatron_dist", "megatron_dist"); }
END_TEST

/* ------------------------------------------------------------------ zstd */

static void *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "%s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *b = malloc(n ? (size_t)n : 1);
    ck_assert_uint_eq(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void zstd_copy(const char *src, const char *dst) {
    size_t n;
    void *b = slurp(src, &n);
    size_t cap = ZSTD_compressBound(n);
    void *z = malloc(cap);
    size_t zn = ZSTD_compress(z, cap, b, n, 3);
    ck_assert(!ZSTD_isError(zn));
    tu_write(dst, z, zn);
    free(b);
    free(z);
}

static void zstd_pair(const char *name, const char *base, const char *zname) {
    char *dir = tu_tmpdir();
    char *dst = tu_path(dir, zname);
    zstd_copy(fx(name), dst);
    char st[256];
    snprintf(st, sizeof st, "%s.safetensors", base);
    dck_manifest *a = must_hash(dst), *b = must_hash(fx(st));
    same_tensors(a, b, zname);
    dck_manifest_free(a);
    dck_manifest_free(b);
    free(dst);
    tu_tmpdir_free(dir);
}

START_TEST(zstd_files) {
    zstd_pair("training.pt", "training", "training.pt.zst");
    zstd_pair("views_legacy.pt", "views", "views_legacy.pt.zst");
    zstd_pair("array.npy", "array", "array.npy.zst");
    zstd_pair("arrays_deflated.npz", "arrays", "arrays_deflated.npz.zst");
}
END_TEST

START_TEST(zstd_dcp_directory) {
    char *dir = tu_tmpdir();
    const char *names[] = {".metadata", "__0_0.distcp", "__1_0.distcp"};
    for (int i = 0; i < 3; i++) {
        char src[4200], zn[64];
        snprintf(src, sizeof src, "%s/%s", fx("dcp2"), names[i]);
        snprintf(zn, sizeof zn, "%s.zst", names[i]);
        char *dst = tu_path(dir, zn);
        zstd_copy(src, dst);
        free(dst);
    }
    dck_manifest *a = must_hash(dir), *b = must_hash(fx("dcp.safetensors"));
    same_tensors(a, b, "zstd dcp");
    dck_manifest_free(a);
    dck_manifest_free(b);
    tu_tmpdir_free(dir);
}
END_TEST

/* Frames without a content size (as zstd writes from a pipe), of b: its
 * decoded size is known only by decoding. */
static size_t zstd_unsized(const void *b, size_t n, uint8_t *z, size_t cap) {
    ZSTD_CCtx *c = ZSTD_createCCtx();
    ck_assert(c != NULL);
    ck_assert(!ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, 0)));
    size_t zn = ZSTD_compress2(c, z, cap, b, n);
    ck_assert(!ZSTD_isError(zn));
    ZSTD_freeCCtx(c);
    return zn;
}

/* tests/fixtures/NAME with 8 bytes appended is refused by its
 * reader ("trailing"); compressed in frames that declare no size, the same
 * bytes must be refused when opened, with the same message after the path:
 * the reader judges the decoded stream as the plain file. */
static void trailing_in_zstd(const char *name) {
    char *dir = tu_tmpdir();
    size_t n;
    uint8_t *b = slurp(fx(name), &n);
    b = realloc(b, n + 8);
    memcpy(b + n, "junkjunk", 8);
    char *plain = tu_path(dir, name);
    tu_write(plain, b, n + 8);
    dck_status s;
    dck_manifest *m = hash_path(plain, -1, &s);
    ck_assert_msg(s == DCK_ERR_FORMAT && !m, "%s + 8 bytes: read", name);
    ck_assert_msg(strstr(dck_last_error(), "trailing") != NULL, "%s", dck_last_error());
    char want[DCK_ERROR_MESSAGE_MAX];
    snprintf(want, sizeof want, "%s", dck_last_error() + strlen(plain));
    /* one frame holding all, and the file's frame then a junk frame */
    size_t cap = ZSTD_compressBound(n + 8) * 2;
    uint8_t *z = malloc(cap);
    size_t whole = zstd_unsized(b, n + 8, z, cap);
    size_t first = zstd_unsized(b, n, z + whole, cap - whole);
    size_t junk = zstd_unsized(b + n, 8, z + whole + first, cap - whole - first);
    const struct {
        size_t at, len;
    } cases[] = {{0, whole}, {whole, first + junk}};
    char zname[256];
    snprintf(zname, sizeof zname, "%s.zst", name);
    char *zp = tu_path(dir, zname);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tu_write(zp, z + cases[i].at, cases[i].len);
        dck_options o;
        dck_options_init(&o);
        o.hash_files = 0; /* the open alone must refuse it, before any hashing */
        dck_checkpoint *ck = NULL;
        const char *p[] = {zp};
        s = dck_checkpoint_open(p, 1, &o, &ck);
        ck_assert_msg(s == DCK_ERR_FORMAT, "%s case %zu: opened (%d)", zname, i, (int)s);
        ck_assert_ptr_null(ck);
        ck_assert_msg(!strncmp(dck_last_error(), zp, strlen(zp)) &&
                          !strcmp(dck_last_error() + strlen(zp), want),
                      "%s case %zu: '%s', plain file: '%s'", zname, i, dck_last_error(), want);
    }
    /* the file alone, in a frame without its size, still reads */
    tu_write(zp, z + whole, first);
    dck_manifest_free(must_hash(zp));
    free(zp);
    free(z);
    free(plain);
    free(b);
    tu_tmpdir_free(dir);
}

START_TEST(zstd_trailing_bytes) {
    trailing_in_zstd("array.safetensors");
    trailing_in_zstd("array.npy");
}
END_TEST

/* ------------------------------------------------------------------ zip64 */

static size_t put(uint8_t *b, size_t k, uint64_t v, int n) {
    for (int i = 0; i < n; i++) b[k + (size_t)i] = (uint8_t)(v >> (8 * i));
    return k + (size_t)n;
}

/* An .npz whose only member's sizes and offset are in zip64 extra fields and
 * whose end of central directory is a zip64 record (as PyTorch writes files
 * over 4 GiB): the member must read as the same array. */
START_TEST(zip64_records) {
    size_t n;
    uint8_t *npy = slurp(fx("array.npy"), &n);
    uint8_t *b = calloc(1, n + 512);
    const char *name = "array.npy";
    size_t nl = strlen(name), k = 0;
    k = put(b, k, 0x04034b50, 4); /* local header */
    k = put(b, k, 45, 2);
    k = put(b, k, 0, 2);
    k = put(b, k, 0, 2);
    k = put(b, k, 0, 4);
    k = put(b, k, 0, 4);           /* crc unused for stored */
    k = put(b, k, 0xffffffffu, 4);
    k = put(b, k, 0xffffffffu, 4);
    k = put(b, k, nl, 2);
    k = put(b, k, 20, 2);
    memcpy(b + k, name, nl);
    k += nl;
    k = put(b, k, 1, 2);
    k = put(b, k, 16, 2);
    k = put(b, k, n, 8);
    k = put(b, k, n, 8);
    memcpy(b + k, npy, n);
    k += n;
    size_t cd = k;
    k = put(b, k, 0x02014b50, 4); /* central directory */
    k = put(b, k, 45, 2);
    k = put(b, k, 45, 2);
    k = put(b, k, 0, 2);
    k = put(b, k, 0, 2);
    k = put(b, k, 0, 4);
    k = put(b, k, 0, 4);
    k = put(b, k, 0xffffffffu, 4);
    k = put(b, k, 0xffffffffu, 4);
    k = put(b, k, nl, 2);
    k = put(b, k, 28, 2);
    k = put(b, k, 0, 2);
    k = put(b, k, 0, 2);
    k = put(b, k, 0, 2);
    k = put(b, k, 0, 4);
    k = put(b, k, 0xffffffffu, 4);
    memcpy(b + k, name, nl);
    k += nl;
    k = put(b, k, 1, 2);
    k = put(b, k, 24, 2);
    k = put(b, k, n, 8);
    k = put(b, k, n, 8);
    k = put(b, k, 0, 8);
    size_t cd_size = k - cd, z64 = k;
    k = put(b, k, 0x06064b50, 4); /* zip64 end of central directory */
    k = put(b, k, 44, 8);
    k = put(b, k, 45, 2);
    k = put(b, k, 45, 2);
    k = put(b, k, 0, 4);
    k = put(b, k, 0, 4);
    k = put(b, k, 1, 8);
    k = put(b, k, 1, 8);
    k = put(b, k, cd_size, 8);
    k = put(b, k, cd, 8);
    k = put(b, k, 0x07064b50, 4); /* locator */
    k = put(b, k, 0, 4);
    k = put(b, k, z64, 8);
    k = put(b, k, 1, 4);
    k = put(b, k, 0x06054b50, 4); /* end of central directory, all ones */
    k = put(b, k, 0xffff, 2);
    k = put(b, k, 0xffff, 2);
    k = put(b, k, 0xffff, 2);
    k = put(b, k, 0xffff, 2);
    k = put(b, k, 0xffffffffu, 4);
    k = put(b, k, 0xffffffffu, 4);
    k = put(b, k, 0, 2);
    char *dir = tu_tmpdir();
    char *p = tu_path(dir, "z64.npz");
    tu_write(p, b, k);
    dck_manifest *a = must_hash(p), *r = must_hash(fx("array.safetensors"));
    same_tensors(a, r, "zip64");
    dck_manifest_free(a);
    dck_manifest_free(r);
    free(p);
    tu_tmpdir_free(dir);
    free(b);
    free(npy);
}
END_TEST

/* ------------------------------------------------------------------ damaged files */

/* The truncated lengths tried of a file of N bytes: every length below 2 KiB
 * (headers, the whole of most fixtures), then every STEP-th and the last
 * STEP (a file cut just short of its end). */
static int cut_tried(size_t cut, size_t n, size_t step) { return cut < 2048 || cut % step == 0 || cut + step >= n; }

/* Every truncation tried of a file: an error whose message names the file,
 * never a result; a single-byte corruption every STEP bytes: an error or a
 * result, never a crash (run under ASan by make check SANITIZE=1). */
static void damage_bytes(const char *name, uint8_t *b, size_t n, size_t step) {
    char *dir = tu_tmpdir();
    char *p = tu_path(dir, name);
    for (size_t cut = 0; cut < n; cut++) {
        if (!cut_tried(cut, n, step)) continue;
        tu_write(p, b, cut);
        dck_status s;
        dck_manifest *m = hash_path(p, -1, &s);
        ck_assert_msg(s != DCK_OK, "%s cut to %zu of %zu bytes: read without an error", name, cut, n);
        ck_assert_ptr_null(m);
        ck_assert_msg(strstr(dck_last_error(), name) != NULL, "%s cut to %zu bytes: message does not name the file: %s",
                      name, cut, dck_last_error());
    }
    for (size_t at = 0; at < n; at += step) {
        uint8_t old = b[at];
        b[at] ^= 0xa5;
        tu_write(p, b, n);
        dck_status s;
        dck_manifest *m = hash_path(p, -1, &s);
        dck_manifest_free(m);
        b[at] = old;
    }
    free(p);
    tu_tmpdir_free(dir);
}
static void damage(const char *name, size_t step) {
    size_t n;
    uint8_t *b = slurp(fx(name), &n);
    damage_bytes(name, b, n, step);
    free(b);
}
/* The same for tests/fixtures/NAME compressed with zstd, as NAME.zst: a
 * frame cut short is an error, never a shorter file. */
static void damage_zstd(const char *name, size_t step) {
    size_t n;
    void *b = slurp(fx(name), &n);
    size_t cap = ZSTD_compressBound(n);
    uint8_t *z = malloc(cap);
    size_t zn = ZSTD_compress(z, cap, b, n, 3);
    ck_assert(!ZSTD_isError(zn));
    char zname[256];
    snprintf(zname, sizeof zname, "%s.zst", name);
    damage_bytes(zname, z, zn, step);
    free(b);
    free(z);
}

/* The same for one file (MEMBER) of a checkpoint directory: the message
 * names the member. */
static void damage_in_dir(const char *dirname, const char *member, size_t step) {
    char *dir = tu_tmpdir();
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s/ck'", fx(dirname), dir);
    ck_assert_int_eq(system(cmd), 0);
    char p[4200], ckp[4200];
    snprintf(ckp, sizeof ckp, "%s/ck", dir);
    snprintf(p, sizeof p, "%s/ck/%s", dir, member);
    size_t n;
    uint8_t *b = slurp(p, &n);
    for (size_t cut = 0; cut < n; cut++) {
        if (!cut_tried(cut, n, step)) continue;
        tu_write(p, b, cut);
        dck_status s;
        dck_manifest *m = hash_path(ckp, -1, &s);
        ck_assert_msg(s != DCK_OK, "%s/%s cut to %zu of %zu bytes: read without an error", dirname, member, cut, n);
        ck_assert_ptr_null(m);
        ck_assert_msg(strstr(dck_last_error(), member) != NULL,
                      "%s/%s cut to %zu bytes: message does not name the file: %s", dirname, member, cut,
                      dck_last_error());
    }
    for (size_t at = 0; at < n; at += step) {
        uint8_t old = b[at];
        b[at] ^= 0x5a;
        tu_write(p, b, n);
        dck_status s;
        dck_manifest *m = hash_path(ckp, -1, &s);
        dck_manifest_free(m);
        b[at] = old;
    }
    free(b);
    tu_tmpdir_free(dir);
}

START_TEST(damaged_dcp) {
    damage_in_dir("dcp2", ".metadata", 13);
    damage_in_dir("dcp2", "__1_0.distcp", 97);
    damage_in_dir("dcp_raw", "__0_0.distcp", 97);
}
END_TEST

/* .metadata that says float16 where the chunks hold float32 (the pickled
 * global torch.float32, renamed in place): DCP's loaders would create half
 * tensors and round the chunks into them; an error naming the chunk's
 * tensor and file, never digests of the float32 chunks (detcheck-formats(7), FORMATS).
 * tests/cli/test_dcp_meta.sh covers the other facts, with torch. */
START_TEST(dcp_metadata_dtype_disagrees) {
    static const char *const dirs[] = {"dcp1", "dcp2", "dcp_raw"}; /* torch.save zips; raw chunks */
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        char *dir = tu_tmpdir();
        char cmd[8400], p[4200];
        snprintf(cmd, sizeof cmd, "cp -r '%s' '%s/ck'", fx(dirs[i]), dir);
        ck_assert_int_eq(system(cmd), 0);
        snprintf(p, sizeof p, "%s/ck/.metadata", dir);
        size_t n;
        uint8_t *b = slurp(p, &n);
        uint8_t *hit = memmem(b, n, "float32", 7);
        ck_assert_msg(hit != NULL && !memmem(hit + 1, n - (size_t)(hit + 1 - b), "float32", 7), "%s", dirs[i]);
        memcpy(hit, "float16", 7);
        tu_write(p, b, n);
        snprintf(p, sizeof p, "%s/ck", dir);
        dck_status s;
        dck_manifest *m = hash_path(p, -1, &s);
        ck_assert_msg(s == DCK_ERR_LAYOUT, "%s: status %d: %s", dirs[i], (int)s, s ? dck_last_error() : "read");
        ck_assert_ptr_null(m);
        ck_assert_msg(strstr(dck_last_error(), "is stored as F32, .metadata says F16") &&
                          strstr(dck_last_error(), ".distcp: chunk of model."),
                      "%s: %s", dirs[i], dck_last_error());
        free(b);
        tu_tmpdir_free(dir);
    }
}
END_TEST

START_TEST(damaged_zip_pt) { damage("views.pt", 7); }
END_TEST
/* DeepSpeed ZeRO-2, DP 2, with DeepSpeed's padding (detcheck-formats(7), FORMATS): the last
 * rank's optimizer file (its shorter fp32 partition, group_paddings) */
START_TEST(damaged_deepspeed) {
    damage_in_dir("ds_padding/z2_dp2_f32", "global_step3/zero_pp_rank_1_mp_rank_00_optim_states.pt", 97);
}
END_TEST
START_TEST(damaged_legacy_pt) { damage("views_legacy.pt", 5); }
END_TEST
START_TEST(damaged_npz) { damage("arrays_deflated.npz", 3); }
END_TEST
START_TEST(damaged_npy) { damage("array.npy", 1); }
END_TEST
START_TEST(damaged_zstd) {
    damage_zstd("array.npy", 1);
    damage_zstd("views_legacy.pt", 5);
    damage_zstd("arrays_deflated.npz", 3);
}
END_TEST

/* A storage entry that is shorter than its tensor claims: exit with a
 * message naming the tensor, no read past the entry. */
START_TEST(tensor_beyond_storage) {
    size_t n;
    uint8_t *b = slurp(fx("views.pt"), &n);
    /* views.pt's first tensor 'base' is 6x10; make the size 6x11 (BININT1 10 -> 11) in data.pkl */
    const uint8_t pat[] = {'K', 6, 'K', 10, 0x86};
    uint8_t *hit = memmem(b, n, pat, sizeof pat);
    ck_assert_ptr_nonnull(hit);
    hit[3] = 11;
    char *dir = tu_tmpdir();
    char *p = tu_path(dir, "views.pt");
    tu_write(p, b, n);
    dck_status s;
    dck_manifest *m = hash_path(p, -1, &s);
    ck_assert_int_eq(s, DCK_ERR_FORMAT);
    ck_assert_ptr_null(m);
    ck_assert_msg(strstr(dck_last_error(), "outside its storage") != NULL, "%s", dck_last_error());
    free(p);
    free(b);
    tu_tmpdir_free(dir);
}
END_TEST

/* ------------------------------------------------------------------ fuzz regressions */

/* fuzz_npy: a header whose 'descr' key is followed only by blanks up to the
 * header's end; the value pointer ran past the header (SEGV in memchr). */
static const uint8_t fuzz_npy_descr_at_end[] = {
    0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 0x01, 0x00, 0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73, 0x63,
    0x72, 0x27, 0x27, 0x3c, 0x00, 0x00, 0x00, 0x66, 0x34, 0x27, 0x2c, 0x20, 0x27, 0x66, 0x6f, 0x72,
    0x74, 0x72, 0x61, 0x6e, 0x5f, 0x6f, 0x72, 0x64, 0x65, 0x72, 0x27, 0x3a, 0x20, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x46, 0x61, 0x6c, 0x73, 0x65, 0x2c, 0x20, 0x27, 0x73, 0x68,
    0x61, 0x70, 0x65, 0x27, 0x3a, 0x20, 0x28, 0x35, 0x2c, 0x20, 0x20, 0x20, 0x20, 0x20, 0x55, 0x4d,
    0x50, 0x59, 0x01, 0x00, 0x76, 0x00, 0x7b, 0x27, 0x64, 0x65, 0x73, 0x63, 0x72, 0x27, 0x3a, 0x20,
    0x27, 0x3e, 0x69, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x00,
    0x80, 0x3f, 0x00, 0x40, 0x00, 0x00, 0x00, 0x40, 0x01, 0x00, 0x00, 0x04, 0x00, 0x00, 0xff, 0x00,
    0x41, 0x00, 0x00, 0x10, 0x2c, 0x00, 0x20, 0x00, 0x41, 0x00, 0x00, 0x30, 0x41
};

START_TEST(regression_fuzz_npy_descr_at_end) {
    dck_dtype dt;
    bool bs, fo;
    int nd;
    uint64_t shape[DCK_MAX_DIMS], off;
    ck_assert_int_eq(dck_npy_parse_header(fuzz_npy_descr_at_end, sizeof fuzz_npy_descr_at_end, "x.npy", &dt, &bs,
                                          &fo, &nd, shape, &off),
                     DCK_ERR_FORMAT);
}
END_TEST

/* fuzz_zip: an .npz member whose deflated size claims 4 GiB; it was
 * allocated before inflating. Now: refused (beyond deflate's ratio). */
static const uint8_t fuzz_zip_huge_claim[] = {
    0x50, 0x4b, 0x03, 0x04, 0x2d, 0x00, 0x00, 0x00, 0x08, 0x00, 0x01, 0x05, 0x21, 0x00, 0x2d, 0x6f,
    0x22, 0x26, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x05, 0x00, 0x14, 0x00, 0x61, 0x2e,
    0x6e, 0x70, 0x79, 0x01, 0x00, 0x10, 0x00, 0xb0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x66,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x9b, 0xec, 0x17, 0xea, 0x1b, 0x10, 0xc9, 0xc8, 0x50,
    0xc6, 0x50, 0xad, 0x9e, 0x92, 0x5a, 0x9c, 0x5c, 0xa4, 0x6e, 0xa5, 0xa0, 0x6e, 0x93, 0x66, 0xa2,
    0xae, 0xa3, 0xa0, 0x9e, 0x96, 0x5f, 0x54, 0x52, 0x94, 0x98, 0x17, 0x9f, 0x5f, 0x94, 0x92, 0x0a,
    0x12, 0x77, 0x4b, 0xcc, 0x29, 0x4e, 0x05, 0x8a, 0x17, 0x67, 0x24, 0x16, 0xa4, 0x02, 0xf9, 0x1a,
    0xc6, 0x3a, 0x0a, 0x26, 0x9a, 0x3a, 0x0a, 0xb5, 0x0a, 0x64, 0x03, 0x2e, 0x06, 0x30, 0x93, 0x4e,
    0x55, 0x4d, 0x50, 0x59, 0x04, 0xc4, 0x0d, 0x45, 0xbc, 0x00, 0x88, 0x0f, 0x00, 0xf1, 0x03, 0x20,
    0x66, 0x70, 0x64, 0x60, 0x10, 0x00, 0x62, 0x05, 0x20, 0x36, 0x70, 0x04, 0x00, 0x50, 0x4b, 0x03,
    0x04, 0x2d, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x21, 0x00, 0x6f, 0x14, 0x6f, 0x8e, 0xff,
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x05, 0x00, 0x14, 0x00, 0x62, 0x2e, 0x6e, 0x70, 0x79,
    0x01, 0x00, 0x10, 0x00, 0xb0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x78, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x9b, 0xec, 0x17, 0xea, 0x1b, 0x10, 0xc9, 0xc8, 0x50, 0xc6, 0x50, 0xad,
    0x9e, 0x92, 0x5a, 0x9c, 0x5c, 0xa4, 0x6e, 0xa5, 0xa0, 0x6e, 0x93, 0x69, 0xa4, 0xae, 0xa3, 0xa0,
    0x9e, 0x96, 0x5f, 0x54, 0x52, 0x94, 0x98, 0x17, 0x9f, 0x5f, 0x94, 0x92, 0x0a, 0x12, 0x0f, 0x29,
    0x2a, 0x4d, 0x05, 0x0a, 0x17, 0x67, 0x24, 0x16, 0xa4, 0x02, 0xb9, 0x1a, 0x46, 0x3a, 0x0a, 0xc6,
    0x3a, 0x0a, 0x26, 0x9a, 0x3a, 0x0a, 0xb5, 0x0a, 0x64, 0x02, 0x2e, 0x06, 0x06, 0x1e, 0x06, 0x16,
    0x06, 0x01, 0x06, 0x0e, 0x06, 0x11, 0x06, 0x46, 0x06, 0x5e, 0x06, 0x56, 0x06, 0x41, 0x06, 0x4e,
    0x06, 0x51, 0x06, 0x26, 0x06, 0x3e, 0x06, 0x36, 0x06, 0x21, 0x06, 0x2e, 0x06, 0x31, 0x06, 0x66,
    0x06, 0x7e, 0x06, 0x76, 0x06, 0x61, 0x06, 0x6e, 0x06, 0x71, 0x06, 0x00, 0x50, 0x4b, 0x03, 0x04,
    0x2d, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x21, 0x00, 0xb0, 0x1b, 0xa9, 0x0f, 0xff, 0xff,
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x05, 0x00, 0x14, 0x00, 0x63, 0x2e, 0x6e, 0x70, 0x79, 0x01,
    0x00, 0x10, 0x00, 0xa8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x53, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x9b, 0xec, 0x17, 0xea, 0x1b, 0x10, 0xc9, 0xc8, 0x50, 0xc6, 0x50, 0xad, 0x9e,
    0x92, 0x5a, 0x9c, 0x5c, 0xa4, 0x6e, 0xa5, 0xa0, 0x6e, 0x97, 0x66, 0xa1, 0xae, 0xa3, 0xa0, 0x9e,
    0x96, 0x5f, 0x54, 0x52, 0x94, 0x98, 0x17, 0x9f, 0x2f, 0x94, 0x92, 0x0a, 0x12, 0x77, 0x4b, 0xcc,
    0x29, 0x4e, 0x05, 0x8a, 0x17, 0x67, 0x24, 0x16, 0xa4, 0x02, 0xf9, 0x1a, 0xa6, 0x3a, 0x9a, 0x3a,
    0x0a, 0xb5, 0x0a, 0x14, 0x00, 0x2e, 0x06, 0x28, 0xb0, 0xff, 0x00, 0xa1, 0x1d, 0xa0, 0x7c, 0x07,
    0x0e, 0x28, 0x2d, 0x00, 0xa1, 0x01, 0x50, 0x4b, 0x01, 0x02, 0x2d, 0x03, 0x2d, 0x00, 0x00, 0x00,
    0x08, 0x00, 0x00, 0x00, 0x21, 0x00, 0x2d, 0x6f, 0x22, 0x26, 0x66, 0x00, 0x00, 0x00, 0xb0, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x01,
    0x00, 0x00, 0x00, 0x00, 0x61, 0x2e, 0x6e, 0x70, 0x79, 0x50, 0x4b, 0x01, 0x02, 0x2d, 0x03, 0x2d,
    0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x21, 0x00, 0x6f, 0x14, 0x6f, 0x8e, 0x78, 0x00, 0x00,
    0x00, 0x50, 0xff, 0xff, 0xf5, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x80, 0x01, 0x9d, 0x00, 0x00, 0x00, 0x62, 0x2e, 0x6e, 0x70, 0x79, 0x50, 0x4b, 0x01, 0x02,
    0x2d, 0x03, 0x2d, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x21, 0x00, 0xb0, 0x1b, 0xa9, 0x0f,
    0x53, 0x00, 0x00, 0x00, 0xa8, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x80, 0x01, 0x4c, 0x01, 0x00, 0x00, 0x63, 0x2e, 0x6e, 0x70, 0x79, 0x50,
    0x4b, 0x05, 0x06, 0x00, 0x00, 0x00, 0x00, 0x03, 0x00, 0x03, 0x00, 0x99, 0x00, 0x00, 0x00, 0xd6,
    0x01, 0x00, 0x00, 0x00, 0x00
};

START_TEST(regression_fuzz_zip_huge_claim) {
    char *dir = tu_tmpdir();
    char *p = tu_path(dir, "claim.npz");
    tu_write(p, fuzz_zip_huge_claim, sizeof fuzz_zip_huge_claim);
    dck_status s;
    dck_manifest *m = hash_path(p, -1, &s);
    ck_assert_int_eq(s, DCK_ERR_FORMAT);
    ck_assert_ptr_null(m);
    ck_assert_msg(strstr(dck_last_error(), "claim.npz") != NULL, "%s", dck_last_error());
    ck_assert_msg(strstr(dck_last_error(), "beyond deflate's ratio") != NULL, "%s", dck_last_error());
    free(p);
    tu_tmpdir_free(dir);
}
END_TEST

/* ------------------------------------------------------------------ public fixtures */

static const struct {
    const char *file, *tensor, *digest;
} public_digests[] = {
    {"bfloat16.pt", "tensor", "3b35798e83e1c0a53788d0a4f925d694"},
    {"burn_mnist.pt", "conv1.bias", "01063277b1d02a7ba7adfffd0f44fcec"},
    {"burn_mnist.pt", "conv1.weight", "9c49406523ab20e880f7190f04552790"},
    {"burn_mnist.pt", "conv2.bias", "36ed565cc62840c7edea4706ff22be1c"},
    {"burn_mnist.pt", "conv2.weight", "01966bd25c10cbf3579efe82e7ece9b4"},
    {"burn_mnist.pt", "conv3.bias", "723368f2a670cad82f089ba2880a35b3"},
    {"burn_mnist.pt", "conv3.weight", "ec96d5021500cc340096afb9253348ce"},
    {"burn_mnist.pt", "fc1.bias", "c5d34e1dd1faf38493840d6975754490"},
    {"burn_mnist.pt", "fc1.weight", "32e5b1503e173c04bef8d4b9f0571ed2"},
    {"burn_mnist.pt", "fc2.bias", "b768280c0ff1819134504d24386bc2be"},
    {"burn_mnist.pt", "fc2.weight", "171c57d5a24418b0bee673b5fb31369a"},
    {"burn_mnist.pt", "norm1.bias", "d207bc64977d29ebfc2e847a3adb600d"},
    {"burn_mnist.pt", "norm1.num_batches_tracked", "4ccb87ba4b7f93f867fec907176649f5"},
    {"burn_mnist.pt", "norm1.running_mean", "bfe50a861b92ca3f8f1cade9c3e0e965"},
    {"burn_mnist.pt", "norm1.running_var", "0624690317aa50230511af3ff00b11a0"},
    {"burn_mnist.pt", "norm1.weight", "4dac0717f16789e3ad051faac4f2561a"},
    {"burn_mnist.pt", "norm2.bias", "8ffa44d9ccafae42ebaef01d189b825f"},
    {"burn_mnist.pt", "norm2.num_batches_tracked", "4ccb87ba4b7f93f867fec907176649f5"},
    {"burn_mnist.pt", "norm2.running_mean", "ffa744aedc8fccb58ab84aeaf6099819"},
    {"burn_mnist.pt", "norm2.running_var", "780a59a242ca15ee03a384437dce5e86"},
    {"burn_mnist.pt", "norm2.weight", "283762001b3e4d1f61ab9da0cc29ba53"},
    {"candle_fortran_tensor_3d.pth", "tensor_fortran", "fc15c333a75d4b37ee0e7acb4f5f5dab"},
    {"candle_test.npy", "candle_test", "a2f208a01c4f2339392b5bd61ae86e85"},
    {"candle_test.npz", "x", "a2f208a01c4f2339392b5bd61ae86e85"},
    {"candle_test.npz", "x_plus_one", "814a5fd9234350019e976d0f56c8aaac"},
    {"candle_test.pt", "test", "d36394428ce6df2c112fb707f9e3cd02"},
    {"checkpoint.pt", "model_state_dict.fc1.bias", "a67e7687e51f613236873ff06734c56e"},
    {"checkpoint.pt", "model_state_dict.fc1.weight", "64bffc2b96ecda3fad9e0f27d12273c4"},
    {"checkpoint.pt", "model_state_dict.fc2.bias", "652b4c3d3e02817eb0b6977b7a9dc2c7"},
    {"checkpoint.pt", "model_state_dict.fc2.weight", "319b0b79bf659d2e1e930b0c2c223ebd"},
    {"checkpoint.pt", "optimizer_state_dict.state.0.momentum_buffer", "e49683c4c2a5446b2246061d99dbf8f6"},
    {"float32.pt", "tensor", "3a79d48e5d4969556cdd4de2e848e1bb"},
    {"legacy_with_offsets.pt", "tensor1", "5d11a973c638280de1acc46d6d1aeed0"},
    {"legacy_with_offsets.pt", "tensor2", "f0c73095f31e403c72522f4d5647cea1"},
    {"legacy_with_offsets.pt", "tensor3", "02f4ec53b2d0895856f87016ae40bc6f"},
    {"multi_layer.safetensors", "conv1.bias", "cbcdc353432c75302c0676280423d91a"},
    {"multi_layer.safetensors", "conv1.weight", "3f34bbfd8b8407488e4e539122238d4c"},
    {"multi_layer.safetensors", "fc1.bias", "4eeed13138d4529e042b4db1829606ac"},
    {"multi_layer.safetensors", "fc1.weight", "e5ccddc2dac437ee7ca3aa925b792e92"},
    {"multi_layer.safetensors", "norm1.bias", "268d2a1ef458d49fdc36bad40fd51e27"},
    {"multi_layer.safetensors", "norm1.num_batches_tracked", "8566ea5be0d359472e1fe1d429fc6988"},
    {"multi_layer.safetensors", "norm1.running_mean", "fa51f87762783392f077c51ea7fe3325"},
    {"multi_layer.safetensors", "norm1.running_var", "bf6d43382d354de75120d765eeead4ed"},
    {"multi_layer.safetensors", "norm1.weight", "c9fa997931d44bbae6e66379809b4386"},
    {"parameter.pt", "param", "74791b568914247ffbffda6b1cbec2c4"},
    {"simple_legacy.pt", "bias", "02ef4f18ba3e0cdf2444aac2c0411dc0"},
    {"simple_legacy.pt", "running_mean", "c8485ef20f597080454f6018df4f00a4"},
    {"simple_legacy.pt", "weight", "e99e4ee69dde50eb9638f2831d335a30"},
    {"state_dict.pt", "bias", "c18ae8041fd8dcd80f9a2552aac891e1"},
    {"state_dict.pt", "running_mean", "b8cd10fbb24bd353131dd0ed7087971b"},
    {"state_dict.pt", "running_var", "d4cc1de01cc1f863d7b9f7499158f766"},
    {"state_dict.pt", "weight", "9c51a0afa55e767faf09c6ad109126ed"},
    {"torchtune_tiny_fair_checkpoint.pt", "layers.0.attention.wk.weight", "c54a6dde6476dc1f1be4af3ec5789871"},
    {"torchtune_tiny_fair_checkpoint.pt", "layers.0.attention.wo.weight", "c54a6dde6476dc1f1be4af3ec5789871"},
    {"torchtune_tiny_fair_checkpoint.pt", "layers.0.attention.wq.weight", "c54a6dde6476dc1f1be4af3ec5789871"},
    {"torchtune_tiny_fair_checkpoint.pt", "layers.0.attention.wv.weight", "c54a6dde6476dc1f1be4af3ec5789871"},
    {"torchtune_tiny_fair_checkpoint.pt", "layers.0.attention_norm.weight", "364ed534c2fba3c8bb694ad819fbd159"},
    {"torchtune_tiny_fair_checkpoint.pt", "layers.0.feed_forward.w1.weight", "bbea0efe1bd12b0343d01055666bec60"},
    {"torchtune_tiny_fair_checkpoint.pt", "layers.0.feed_forward.w2.weight", "08d21165321009c41ef697f2d974da2a"},
    {"torchtune_tiny_fair_checkpoint.pt", "layers.0.feed_forward.w3.weight", "bbea0efe1bd12b0343d01055666bec60"},
    {"torchtune_tiny_fair_checkpoint.pt", "layers.0.ffn_norm.weight", "364ed534c2fba3c8bb694ad819fbd159"},
    {"torchtune_tiny_fair_checkpoint.pt", "layers.1.attention.wk.weight", "c54a6dde6476dc1f1be4af3ec5789871"},
    {"torchtune_tiny_fair_checkpoint.pt", "layers.1.attention.wo.weight", "c54a6dde6476dc1f1be4af3ec5789871"},
    {"torchtune_tiny_fair_checkpoint.pt", "layers.1.attention.wq.weight", "c54a6dde6476dc1f1be4af3ec5789871"},
    {"torchtune_tiny_fair_checkpoint.pt", "layers.1.attention.wv.weight", "c54a6dde6476dc1f1be4af3ec5789871"},
    {"torchtune_tiny_fair_checkpoint.pt", "layers.1.attention_norm.weight", "364ed534c2fba3c8bb694ad819fbd159"},
    {"torchtune_tiny_fair_checkpoint.pt", "layers.1.feed_forward.w1.weight", "bbea0efe1bd12b0343d01055666bec60"},
    {"torchtune_tiny_fair_checkpoint.pt", "layers.1.feed_forward.w2.weight", "08d21165321009c41ef697f2d974da2a"},
    {"torchtune_tiny_fair_checkpoint.pt", "layers.1.feed_forward.w3.weight", "bbea0efe1bd12b0343d01055666bec60"},
    {"torchtune_tiny_fair_checkpoint.pt", "layers.1.ffn_norm.weight", "364ed534c2fba3c8bb694ad819fbd159"},
    {"torchtune_tiny_fair_checkpoint.pt", "norm.weight", "364ed534c2fba3c8bb694ad819fbd159"},
    {"torchtune_tiny_fair_checkpoint.pt", "output.weight", "23eba6eea99f6b6128a992bceecb8778"},
    {"torchtune_tiny_fair_checkpoint.pt", "tok_embeddings.weight", "23eba6eea99f6b6128a992bceecb8778"},
    {"torchtune_tiny_state_dict_with_one_key.pt", "test_key", "570381b6e19ca2fd0b867beb65b7246d"},
    {"tar_float32.tar", "tensor", "3a79d48e5d4969556cdd4de2e848e1bb"},
};

START_TEST(public_fixtures) {
    TU_NEED_PUBLIC_FIXTURES(pub);
    const char *last = "";
    dck_manifest *m = NULL;
    size_t files = 0, tensors = 0, in_file = 0;
    size_t n = sizeof public_digests / sizeof public_digests[0];
    for (size_t i = 0; i <= n; i++) {
        if (i == n || strcmp(public_digests[i].file, last)) {
            if (m) ck_assert_msg(dck_manifest_tensor_count(m) == in_file, "%s: %zu tensors, expected %zu", last,
                                 dck_manifest_tensor_count(m), in_file);
            dck_manifest_free(m);
            m = NULL;
            if (i == n) break;
            last = public_digests[i].file;
            char p[4200];
            snprintf(p, sizeof p, "%s/%s", pub, last);
            m = must_hash(p);
            files++;
            in_file = 0;
        }
        const dck_manifest_tensor *t = dck_manifest_find_tensor(m, public_digests[i].tensor);
        ck_assert_msg(t != NULL, "%s: no tensor %s", last, public_digests[i].tensor);
        ck_assert_msg(!strcmp(tu_hex(t->digest), public_digests[i].digest), "%s: %s is %s, expected %s", last,
                      public_digests[i].tensor, tu_hex(t->digest), public_digests[i].digest);
        tensors++;
        in_file++;
    }
    ck_assert_uint_eq(files, 16);
    ck_assert_uint_eq(tensors, n);
    /* the values of checkpoint.pt */
    char p[4200];
    snprintf(p, sizeof p, "%s/checkpoint.pt", pub);
    m = must_hash(p);
    int seen = 0;
    for (size_t i = 0; i < dck_manifest_value_count(m); i++) {
        const dck_manifest_value *v = dck_manifest_value_at(m, i);
        if (!strcmp(v->name, "epoch")) seen += !strcmp(v->value, "42");
        if (!strcmp(v->name, "loss")) seen += !strcmp(v->value, "0.123");
    }
    ck_assert_int_eq(seen, 2);
    dck_manifest_free(m);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("readers");
    TCase *c = tcase_create("fixtures");
    tcase_set_timeout(c, 120);
    tcase_add_test(c, pt_dtypes);
    tcase_add_test(c, pt_protocol4);
    tcase_add_test(c, pt_views_shared_storage);
    tcase_add_test(c, pt_legacy_format);
    tcase_add_test(c, pt_big_endian);
    tcase_add_test(c, pt_training_optimizer_rng);
    tcase_add_test(c, pt_whole_module);
    tcase_add_test(c, npy_single);
    tcase_add_test(c, npz_stored);
    tcase_add_test(c, npz_deflated);
    tcase_add_test(c, dcp_one_rank);
    tcase_add_test(c, dcp_two_ranks);
    tcase_add_test(c, dcp_raw_chunks);
    tcase_add_test(c, megatron_legacy_latest);
    tcase_add_test(c, megatron_iteration_option);
    tcase_add_test(c, megatron_torch_dist);
    tcase_add_test(c, zstd_files);
    tcase_add_test(c, zstd_dcp_directory);
    tcase_add_test(c, zstd_trailing_bytes);
    tcase_add_test(c, zip64_records);
    tcase_add_test(c, damaged_dcp);
    tcase_add_test(c, dcp_metadata_dtype_disagrees);
    tcase_add_test(c, damaged_zip_pt);
    tcase_add_test(c, damaged_deepspeed);
    tcase_add_test(c, damaged_legacy_pt);
    tcase_add_test(c, damaged_npz);
    tcase_add_test(c, damaged_npy);
    tcase_add_test(c, damaged_zstd);
    tcase_add_test(c, tensor_beyond_storage);
    tcase_add_test(c, regression_fuzz_npy_descr_at_end);
    tcase_add_test(c, regression_fuzz_zip_huge_claim);
    tcase_add_test(c, public_fixtures);
    suite_add_tcase(s, c);
    return s;
}

int main(void) { return tu_run(suite()); }

/* Seals (runs/seal.c, man detcheck-seal(1)): the step a checkpoint's name
 * says, the seal's path, the writer that replaces only an earlier seal, the
 * loader that refuses links, FIFOs and manifests without seal: 1, the check
 * of a checkpoint's files against its seal with the files that hold each
 * difference, and the directory readers, which never see a seal. */
#include "testutil.h"
#include "fixtures.h"
#include "core/core.h"
#include "runs/seal.h"

#include <fcntl.h>

static void sh(const char *fmt, const char *a, const char *b) {
    char cmd[9000];
    snprintf(cmd, sizeof cmd, fmt, a, b);
    ck_assert_msg(system(cmd) == 0, "%s", cmd);
}

/* tests/fixtures/name copied to dir/as */
static char *copy_fixture(const char *dir, const char *name, const char *as) {
    char *p = tu_path(dir, as);
    sh("cp -r '%s' '%s'", fx(name), p);
    return p;
}

static int notices;
static void count_notice(void *ctx, const char *msg) {
    (void)ctx;
    if (strstr(msg, "seal")) notices++;
}

static dck_manifest *hash(const char *path, int files) {
    dck_options o;
    dck_options_init(&o);
    o.threads = 2;
    o.hash_files = files;
    o.megatron_merge = 1;
    o.notice = count_notice;
    dck_manifest *m = NULL;
    ck_assert_msg(dck_hash_paths(&path, 1, &o, &m) == DCK_OK, "%s: %s", path, dck_last_error());
    return m;
}

/* seals ckpt from its files, as `detcheck seal` does */
static void seal_files(const char *ckpt, long long step) {
    dck_manifest *m = hash(ckpt, 1);
    ck_assert_int_eq(dck_seal_mark(m, ckpt, "files", step, 0), DCK_OK);
    ck_assert_int_eq(dck_manifest_finalize(m), DCK_OK);
    ck_assert_msg(dck_seal_save(m, ckpt) == DCK_OK, "%s", dck_last_error());
    dck_manifest_free(m);
}

static void expect_error(dck_status got, dck_status want, const char *part1, const char *part2) {
    ck_assert_msg(got == want, "status %d, want %d: %s", got, want, dck_last_error());
    ck_assert_msg(strstr(dck_last_error(), part1), "'%s' not in: %s", part1, dck_last_error());
    if (part2) ck_assert_msg(strstr(dck_last_error(), part2), "'%s' not in: %s", part2, dck_last_error());
}

START_TEST(test_name_step) {
    static const struct {
        const char *name;
        long long step; /* -1: none */
    } cases[] = {
        {"step_100", 100},           {"/ckpts/iter_0000010/", 10},   {"global_step3", 3},
        {"checkpoint-500", 500},     {"run/epoch=1-step=42.ckpt", 42}, {"step=7.ckpt", 7},
        {"step_00000020", 20},       {"step-9", 9},                  {"step_100.pt", 100},
        {"model.pt", -1},            {"foostep_3", -1},              {"mystep=5", -1},
        {"step_12abc", -1},          {"step_", -1},                  {"iter_1234567890123456789", 1234567890123456789LL}, {"iter_99999999999999999999", -1},
        {"step_100.tmp", -1},
        {"checkpoint-best", -1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        long long s = -5;
        int got = dck_seal_name_step(cases[i].name, &s);
        ck_assert_msg(got == (cases[i].step >= 0), "%s: %d", cases[i].name, got);
        if (got) ck_assert_msg(s == cases[i].step, "%s: step %lld", cases[i].name, s);
    }
}
END_TEST

START_TEST(test_path) {
    char *d = tu_tmpdir(), *ck = copy_fixture(d, "dcp1", "step_3"), *f = copy_fixture(d, "dtypes.pt", "m.pt");
    char *p, want[4200];
    char slash[4200];
    snprintf(slash, sizeof slash, "%s//", ck);
    ck_assert_int_eq(dck_seal_path(slash, &p), DCK_OK);
    snprintf(want, sizeof want, "%s/detcheck-seal.yaml", ck);
    ck_assert_str_eq(p, want);
    dck_free(p);
    ck_assert_int_eq(dck_seal_path(f, &p), DCK_OK);
    snprintf(want, sizeof want, "%s.detcheck-seal.yaml", f);
    ck_assert_str_eq(p, want);
    dck_free(p);
    char *gone = tu_path(d, "gone");
    expect_error(dck_seal_path(gone, &p), DCK_ERR_IO, gone, "no such checkpoint");
    ck_assert_ptr_null(p);
    free(gone);
    free(ck);
    free(f);
    tu_tmpdir_free(d);
}
END_TEST

START_TEST(test_save_load) {
    char *d = tu_tmpdir(), *ck = copy_fixture(d, "dcp2", "step_11");
    seal_files(ck, 11);
    char *sp = tu_path(ck, DCK_SEAL_NAME);
    dck_manifest *m;
    ck_assert_msg(dck_seal_load(sp, &m) == DCK_OK, "%s", dck_last_error());
    ck_assert_str_eq(dck_manifest_get_meta(m, "seal"), "1");
    ck_assert_str_eq(dck_manifest_get_meta(m, "seal_from"), "files");
    ck_assert_str_eq(dck_manifest_get_meta(m, "seal_checkpoint"), "step_11");
    ck_assert_str_eq(dck_manifest_get_meta(m, "seal_step"), "11");
    ck_assert_str_eq(dck_manifest_get_meta(m, "source"), ck);
    ck_assert_ptr_null(dck_manifest_get_meta(m, "seal_world_size"));
    ck_assert_ptr_nonnull(dck_manifest_get_meta(m, "created"));
    ck_assert_uint_eq(dck_manifest_file_count(m), 3); /* .metadata and both .distcp, not the seal */
    /* the seal is a manifest as hash -o writes it */
    dck_manifest *plain;
    ck_assert_int_eq(dck_manifest_load(sp, &plain), DCK_OK);
    ck_assert(dck_digest_equal(dck_manifest_root(plain), dck_manifest_root(m)));
    dck_manifest_free(plain);
    /* an earlier seal is replaced */
    dck_manifest *again = hash(ck, 1);
    ck_assert_int_eq(dck_seal_mark(again, ck, "memory", -1, 4), DCK_OK);
    ck_assert_int_eq(dck_manifest_finalize(again), DCK_OK);
    ck_assert_msg(dck_seal_save(again, ck) == DCK_OK, "%s", dck_last_error());
    dck_manifest_free(m);
    ck_assert_int_eq(dck_seal_load(sp, &m), DCK_OK);
    ck_assert_str_eq(dck_manifest_get_meta(m, "seal_from"), "memory");
    ck_assert_str_eq(dck_manifest_get_meta(m, "seal_world_size"), "4");
    ck_assert_ptr_null(dck_manifest_get_meta(m, "seal_step"));
    dck_manifest_free(m);
    /* marks checked */
    expect_error(dck_seal_mark(again, ck, "disk", -1, 0), DCK_ERR_INVALID, "disk", NULL);
    dck_manifest *bare = hash(ck, 0);
    expect_error(dck_seal_save(bare, ck), DCK_ERR_INVALID, "not marked as a seal", NULL);
    dck_manifest_free(bare);
    dck_manifest_free(again);
    free(sp);
    free(ck);
    tu_tmpdir_free(d);
}
END_TEST

/* what dck_seal_save refuses at the seal path, leaving it as it was */
START_TEST(test_save_refuses) {
    char *d = tu_tmpdir(), *ck = copy_fixture(d, "dcp1", "ck");
    char *sp = tu_path(ck, DCK_SEAL_NAME), *other = tu_path(d, "other.yaml");
    dck_manifest *m = hash(ck, 1);
    ck_assert_int_eq(dck_seal_mark(m, ck, "files", -1, 0), DCK_OK);
    ck_assert_int_eq(dck_manifest_finalize(m), DCK_OK);
    /* a plain manifest (hash -o) is no seal */
    dck_manifest *plain = hash(ck, 1);
    ck_assert_int_eq(dck_manifest_save(plain, DCK_FORMAT_YAML, sp), DCK_OK);
    long before = tu_file_size(sp);
    expect_error(dck_seal_save(m, ck), DCK_ERR_INVALID, sp, "not a detcheck seal");
    ck_assert_int_eq(tu_file_size(sp), before);
    unlink(sp);
    static const char *texts[] = {"garbage\n", ""};
    for (int i = 0; i < 2; i++) {
        tu_write(sp, texts[i], strlen(texts[i]));
        expect_error(dck_seal_save(m, ck), DCK_ERR_INVALID, sp, "not a detcheck seal");
        ck_assert_int_eq(tu_file_size(sp), (long)strlen(texts[i]));
        unlink(sp);
    }
    /* a link to a seal is refused too (the rename would replace the link) */
    ck_assert_int_eq(dck_seal_save(m, ck), DCK_OK);
    ck_assert_int_eq(rename(sp, other), 0);
    ck_assert_int_eq(symlink(other, sp), 0);
    expect_error(dck_seal_save(m, ck), DCK_ERR_INVALID, sp, "symbolic link");
    unlink(sp);
    ck_assert_int_eq(mkfifo(sp, 0644), 0);
    expect_error(dck_seal_save(m, ck), DCK_ERR_INVALID, sp, "FIFO");
    unlink(sp);
    ck_assert_int_eq(mkdir(sp, 0755), 0);
    expect_error(dck_seal_save(m, ck), DCK_ERR_INVALID, sp, "directory");
    rmdir(sp);
    char *gone = tu_path(d, "gone");
    expect_error(dck_seal_save(m, gone), DCK_ERR_IO, gone, NULL);
    free(gone);
    dck_manifest_free(plain);
    dck_manifest_free(m);
    free(sp);
    free(other);
    free(ck);
    tu_tmpdir_free(d);
}
END_TEST

/* a FIFO is never opened for reading: no hang (the tcase's timeout) */
START_TEST(test_load_refuses) {
    char *d = tu_tmpdir(), *ck = copy_fixture(d, "dcp1", "ck");
    char *sp = tu_path(ck, DCK_SEAL_NAME), *other = tu_path(d, "other.yaml");
    dck_manifest *m = NULL;
    ck_assert_int_eq(mkfifo(sp, 0644), 0);
    expect_error(dck_seal_load(sp, &m), DCK_ERR_INVALID, sp, "FIFO");
    unlink(sp);
    seal_files(ck, -1);
    ck_assert_int_eq(rename(sp, other), 0);
    ck_assert_int_eq(symlink(other, sp), 0);
    expect_error(dck_seal_load(sp, &m), DCK_ERR_INVALID, sp, "symbolic link");
    unlink(sp);
    dck_manifest *plain = hash(ck, 1);
    ck_assert_int_eq(dck_manifest_save(plain, DCK_FORMAT_YAML, sp), DCK_OK);
    char want[4200];
    snprintf(want, sizeof want, "%s: not a detcheck seal (a manifest without seal: 1)", sp);
    expect_error(dck_seal_load(sp, &m), DCK_ERR_FORMAT, want, NULL);
    unlink(sp);
    ck_assert_int_eq(dck_manifest_set_meta(plain, "seal", "2"), DCK_OK);
    ck_assert_int_eq(dck_manifest_save(plain, DCK_FORMAT_YAML, sp), DCK_OK);
    expect_error(dck_seal_load(sp, &m), DCK_ERR_UNSUPPORTED, sp, "version '2'");
    unlink(sp);
    tu_write(sp, "", 0);
    ck_assert_int_ne(dck_seal_load(sp, &m), DCK_OK);
    ck_assert_ptr_null(m);
    tu_write(sp, "\x01\x02garbage", 9);
    ck_assert_int_ne(dck_seal_load(sp, &m), DCK_OK);
    ck_assert_ptr_null(m);
    dck_manifest_free(plain);
    free(sp);
    free(other);
    free(ck);
    tu_tmpdir_free(d);
}
END_TEST

/* flips one byte of tensor name's data in the file of its first piece */
static const char *flip_tensor_byte(const char *ckpt, const char *name) {
    dck_checkpoint *ck;
    ck_assert_int_eq(dck_checkpoint_open(&ckpt, 1, NULL, &ck), DCK_OK);
    long t = dck_checkpoint_find(ck, name);
    ck_assert_int_ge(t, 0);
    const dck_piece *p = &ck->tensors[t].pieces[0];
    static char rel[256];
    snprintf(rel, sizeof rel, "%s", ck->files[p->file]->relpath);
    int fd = open(ck->files[p->file]->path, O_RDWR);
    ck_assert_int_ge(fd, 0);
    unsigned char b;
    ck_assert_int_eq(pread(fd, &b, 1, (off_t)p->file_offset + 1), 1);
    b ^= 0x10;
    ck_assert_int_eq(pwrite(fd, &b, 1, (off_t)p->file_offset + 1), 1);
    close(fd);
    dck_checkpoint_free(ck);
    return rel;
}

START_TEST(test_verify) {
    char *d = tu_tmpdir(), *ck = copy_fixture(d, "dcp2", "step_11");
    dck_seal_result r;
    expect_error(dck_seal_verify(ck, NULL, &r), DCK_ERR_IO, "is not sealed (no ", DCK_SEAL_NAME);
    ck_assert_ptr_null(r.seal_path);
    seal_files(ck, 11);
    ck_assert_msg(dck_seal_verify(ck, NULL, &r) == DCK_OK, "%s", dck_last_error());
    ck_assert_int_eq(r.same, 1);
    ck_assert_uint_eq(r.cmp.n, 0);
    ck_assert_uint_eq(r.cmp.tensors_equal, dck_manifest_tensor_count(r.seal));
    ck_assert_uint_gt(r.cmp.tensors_equal, 0);
    dck_seal_result_release(&r);
    dck_seal_result_release(&r); /* twice: nothing left */
    /* a tensor split over both .distcp files names both */
    dck_checkpoint *c;
    const char *cp = ck;
    ck_assert_int_eq(dck_checkpoint_open(&cp, 1, NULL, &c), DCK_OK);
    const char *split = NULL;
    for (size_t i = 0; i < c->ntensors && !split; i++)
        for (size_t p = 1; p < c->tensors[i].npieces && !split; p++)
            if (c->tensors[i].pieces[p].file != c->tensors[i].pieces[0].file) split = c->tensors[i].info.name;
    ck_assert_ptr_nonnull(split);
    char name[256];
    snprintf(name, sizeof name, "%s", split);
    dck_checkpoint_free(c);
    const char *file = flip_tensor_byte(ck, name);
    ck_assert_msg(dck_seal_verify(ck, NULL, &r) == DCK_OK, "%s", dck_last_error());
    ck_assert_int_eq(r.same, 0);
    int seen_tensor = 0, seen_file = 0;
    for (size_t i = 0; i < r.cmp.n; i++) {
        const dck_cmp_entry *e = &r.cmp.entries[i];
        if (e->kind == DCK_CMP_DIGEST) {
            ck_assert_str_eq(e->name, name);
            ck_assert_str_eq(r.holders[i], "__0_0.distcp, __1_0.distcp");
            seen_tensor = 1;
        } else if (e->kind == DCK_CMP_FILE) {
            ck_assert_str_eq(e->name, file);
            ck_assert_str_eq(r.holders[i], file);
            seen_file = 1;
        }
    }
    ck_assert(seen_tensor && seen_file);
    dck_seal_result_release(&r);
    /* a seal of another step */
    char *other = tu_path(d, "step_12");
    ck_assert_int_eq(rename(ck, other), 0);
    expect_error(dck_seal_verify(other, NULL, &r), DCK_ERR_MISMATCH, "seal of step 11, checkpoint's name says step 12",
                 NULL);
    free(other);
    /* a missing checkpoint */
    expect_error(dck_seal_verify(ck, NULL, &r), DCK_ERR_IO, ck, NULL);
    free(ck);
    tu_tmpdir_free(d);
}
END_TEST

/* A single file: its name holds every tensor. */
START_TEST(test_verify_file) {
    char *d = tu_tmpdir(), *f = copy_fixture(d, "training.pt", "training.pt");
    seal_files(f, -1);
    dck_seal_result r;
    ck_assert_msg(dck_seal_verify(f, NULL, &r) == DCK_OK, "%s", dck_last_error());
    ck_assert_int_eq(r.same, 1);
    char want[4200];
    snprintf(want, sizeof want, "%s.detcheck-seal.yaml", f);
    ck_assert_str_eq(r.seal_path, want);
    const char *name = dck_manifest_tensor_at(r.seal, 0)->name;
    char nm[512];
    snprintf(nm, sizeof nm, "%s", name);
    dck_seal_result_release(&r);
    flip_tensor_byte(f, nm);
    ck_assert_int_eq(dck_seal_verify(f, NULL, &r), DCK_OK);
    ck_assert_int_eq(r.same, 0);
    for (size_t i = 0; i < r.cmp.n; i++) ck_assert_str_eq(r.holders[i], "training.pt");
    dck_seal_result_release(&r);
    free(f);
    tu_tmpdir_free(d);
}
END_TEST

/* Every directory reader hashes a checkpoint the same with a seal (and the
 * seal writer's temporaries, and seals of its files) inside: same root,
 * same files, no note about them. */
START_TEST(test_readers_ignore_seal) {
    static const char *dirs[] = {
        "dcp1", "dcp2", "megatron", "megatron_dist/iter_0000005", "megatron_tp2pp2",
        "mcore/fsms_tp2dp2/iter_0000005", "mcore/ds_zero2_dp2/global_step3", "mcore/ds_zero2_dp2",
        "mcore/legacy_tp2", "layouts/hf_snapshot", "layouts/trainer/checkpoint-1", "layouts/model_optim",
        "layouts/accelerate", "PLAIN",
    };
    char *d = tu_tmpdir();
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        char as[64];
        snprintf(as, sizeof as, "ck%zu", i);
        char *ck;
        if (!strcmp(dirs[i], "PLAIN")) { /* a plain directory of .pt and .safetensors files */
            ck = tu_path(d, as);
            ck_assert_int_eq(mkdir(ck, 0755), 0);
            sh("cp '%s' '%s'", fx("dtypes.pt"), ck);
            sh("cp '%s' '%s'", fx("array.safetensors"), ck);
        } else {
            ck = copy_fixture(d, dirs[i], as);
        }
        dck_manifest *before = hash(ck, 1);
        notices = 0;
        seal_files(ck, -1);
        char *tmp = tu_path(ck, DCK_SEAL_NAME ".tmp.Ab12Cd"), *beside = tu_path(ck, "x.pt" DCK_SEAL_SUFFIX);
        tu_write(tmp, "x", 1);
        tu_write(beside, "y", 1);
        dck_manifest *after = hash(ck, 1);
        ck_assert_msg(notices == 0, "%s: %d notes about the seal", dirs[i], notices);
        ck_assert_msg(dck_digest_equal(dck_manifest_root(before), dck_manifest_root(after)), "%s: root", dirs[i]);
        ck_assert_uint_eq(dck_manifest_file_count(before), dck_manifest_file_count(after));
        for (size_t f = 0; f < dck_manifest_file_count(after); f++)
            ck_assert_msg(!strstr(dck_manifest_file_at(after, f)->path, "seal"), "%s: %s", dirs[i],
                          dck_manifest_file_at(after, f)->path);
        dck_seal_result r;
        dck_options o; /* as seal_files hashed it */
        dck_options_init(&o);
        o.megatron_merge = 1;
        ck_assert_msg(dck_seal_verify(ck, &o, &r) == DCK_OK, "%s: %s", dirs[i], dck_last_error());
        ck_assert_msg(r.same, "%s: differs from its seal", dirs[i]);
        dck_seal_result_release(&r);
        dck_manifest_free(before);
        dck_manifest_free(after);
        free(tmp);
        free(beside);
        free(ck);
    }
    tu_tmpdir_free(d);
}
END_TEST

int main(void) {
    Suite *s = suite_create("seal");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_name_step);
    tcase_add_test(tc, test_path);
    tcase_add_test(tc, test_save_load);
    tcase_add_test(tc, test_save_refuses);
    tcase_add_test(tc, test_load_refuses);
    tcase_add_test(tc, test_verify);
    tcase_add_test(tc, test_verify_file);
    tcase_add_test(tc, test_readers_ignore_seal);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

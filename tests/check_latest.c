/* dck_latest_* (detcheck_static.h; detcheck-latest(1)): the step of a
 * checkpoint's name, one case per layout and each way a name is no step
 * (trailing text, overflow, signs, two steps); the candidates of a
 * directory newest first with ties by name, what is no candidate, and the
 * judgement of each by its seal (unsealed, torn, not a seal, another
 * step's, a link) without --verify. The files against the seal
 * (--verify) are tests/cli/test_latest.sh's. */
#include "testutil.h"
#include "detcheck_static.h"

#include <stdarg.h>

START_TEST(step_layouts) {
    static const struct {
        const char *name;
        long long step;
    } yes[] = {
        {"step_100", 100},
        {"step_00000100", 100}, /* detcheck's own */
        {"step_0", 0},
        {"step-7", 7},
        {"iter_0000100", 100},  /* Megatron-LM */
        {"iter_12345678", 12345678},
        {"global_step10", 10},  /* DeepSpeed */
        {"checkpoint-500", 500}, /* Hugging Face */
        {"step=100.ckpt", 100},  /* Lightning */
        {"epoch=0-step=100.ckpt", 100},
        {"epoch=3-step=1200-v1.ckpt", 1200},
        {"model-epoch=02-val_loss=-0.5-step=42.ckpt", 42},
        {"step_100.pt", 100},
        {"step_100.pth", 100},
        {"checkpoint-500.safetensors", 500},
        {"global_step3.bin", 3},
        {"step_9223372036854775807", 9223372036854775807LL},
        {"step_0009223372036854775807", 9223372036854775807LL},
    };
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        long long step = -1;
        ck_assert_msg(dck_latest_step(yes[i].name, &step) == 1, "%s: no step", yes[i].name);
        ck_assert_msg(step == yes[i].step, "%s: step %lld", yes[i].name, step);
    }
}
END_TEST

START_TEST(step_refused) {
    static const char *const no[] = {
        "step_", "step_12abc", "step_12.tmp", "step_100.pt.tmp", "step_-5", "step_+5", "step_ 5", "step_5 ",
        "step_9223372036854775808",         /* 2^63 */
        "step_18446744073709551616",        /* 2^64: would wrap to 0 */
        "step_99999999999999999999999",
        "Step_100", "steps_100", "xstep_100", "step100", "iter_", "iter_1e3", "global_step", "global_step-1",
        "checkpoint-", "checkpoint_500", "tmp-checkpoint-500", ".step_100", "checkpoint-500.detcheck-seal.yaml",
        "step=100", "step=100.pt", "epoch=0.ckpt", "last.ckpt", "epoch=0-step=12abc.ckpt",
        "step=1-step=2.ckpt", "step=.ckpt", "epoch=0-step=18446744073709551616.ckpt", "latest",
        "latest_checkpointed_iteration.txt", "", "step_\xd9\xa3", /* an Arabic-Indic digit is no digit */
    };
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        long long step = -7;
        ck_assert_msg(dck_latest_step(no[i], &step) == 0, "'%s' took as step %lld", no[i], step);
    }
}
END_TEST

/* A seal at path: a manifest with the metadata given (key, value, ...,
 * NULL), as detcheck seal writes it for an empty checkpoint. */
static void write_seal(const char *path, ...) {
    dck_manifest *m = NULL;
    ck_assert_int_eq(dck_manifest_create(&m), DCK_OK);
    va_list ap;
    va_start(ap, path);
    for (const char *k; (k = va_arg(ap, const char *));) {
        const char *v = va_arg(ap, const char *);
        ck_assert_int_eq(dck_manifest_set_meta(m, k, v), DCK_OK);
    }
    va_end(ap);
    ck_assert_int_eq(dck_manifest_add_value(m, "epoch", "1"), DCK_OK);
    ck_assert_int_eq(dck_manifest_finalize(m), DCK_OK);
    ck_assert_int_eq(dck_manifest_save(m, DCK_FORMAT_YAML, path), DCK_OK);
    dck_manifest_free(m);
}

static char *ckpt(const char *dir, const char *name) {
    char *p = tu_path(dir, name);
    ck_assert_int_eq(mkdir(p, 0755), 0);
    return p;
}

static void sealed(const char *dir, const char *name, const char *step) {
    char *p = ckpt(dir, name), *s = tu_path(p, DCK_SEAL_NAME);
    write_seal(s, "seal", "1", "seal_from", "files", "seal_checkpoint", name, "seal_step", step, NULL);
    free(s);
    free(p);
}

static const dck_latest_entry *entry(const dck_latest_result *r, const char *name) {
    for (size_t i = 0; i < r->n; i++)
        if (!strcmp(r->entries[i].name, name)) return &r->entries[i];
    ck_abort_msg("%s is no candidate", name);
    return NULL;
}

static size_t judged_count;
static void count_judged(void *ctx, const dck_latest_entry *e) {
    (void)ctx;
    ck_assert(e->state != DCK_LATEST_OLDER);
    judged_count++;
}

START_TEST(scan_and_judge) {
    char *d = tu_tmpdir();
    sealed(d, "step_100", "100");
    sealed(d, "iter_0000100", "100"); /* the same step: ties go by name */
    sealed(d, "global_step150", "150");
    free(ckpt(d, "step_300"));            /* a save killed before its seal */
    sealed(d, "step_250", "250");         /* its seal cut short below */
    sealed(d, "checkpoint-240", "240");   /* a manifest, but no seal: 1 below */
    sealed(d, "step_230", "100");         /* the seal of another step */
    char *p = tu_path(d, "step_250/" DCK_SEAL_NAME);
    long size = tu_file_size(p);
    ck_assert_int_eq(truncate(p, size / 2), 0);
    free(p);
    p = tu_path(d, "checkpoint-240/" DCK_SEAL_NAME);
    write_seal(p, "tool", "detcheck", NULL);
    free(p);
    /* a link, however newer, is not followed */
    p = tu_path(d, "step_400");
    ck_assert_int_eq(symlink("step_100", p), 0);
    free(p);
    free(ckpt(d, "tmp-checkpoint-500"));
    free(ckpt(d, ".step_600"));
    free(ckpt(d, "logs"));
    dck_latest_result r;
    judged_count = 0;
    ck_assert_int_eq(dck_latest_find(d, 0, NULL, count_judged, NULL, &r), DCK_OK);
    ck_assert_uint_eq(r.n, 8);
    static const char *const order[] = {"step_400", "step_300", "step_250", "checkpoint-240", "step_230",
                                        "global_step150", "iter_0000100", "step_100"};
    for (size_t i = 0; i < 8; i++) ck_assert_str_eq(r.entries[i].name, order[i]);
    ck_assert_int_eq(r.chosen, 5);
    ck_assert_uint_eq(judged_count, 6);
    ck_assert_str_eq(r.entries[5].name, "global_step150");
    ck_assert_int_eq(entry(&r, "global_step150")->state, DCK_LATEST_CHOSEN);
    ck_assert_ptr_null(entry(&r, "global_step150")->why);
    ck_assert_int_eq(entry(&r, "step_400")->state, DCK_LATEST_LINK);
    ck_assert_int_eq(entry(&r, "step_300")->state, DCK_LATEST_UNSEALED);
    ck_assert_ptr_nonnull(strstr(entry(&r, "step_300")->why, "unsealed (no "));
    ck_assert_ptr_nonnull(strstr(entry(&r, "step_300")->why, "step_300/" DCK_SEAL_NAME ")"));
    ck_assert_int_eq(entry(&r, "step_250")->state, DCK_LATEST_TORN_SEAL);
    ck_assert_int_eq(entry(&r, "checkpoint-240")->state, DCK_LATEST_NOT_SEAL);
    ck_assert_int_eq(entry(&r, "step_230")->state, DCK_LATEST_OTHER_SEAL);
    ck_assert_ptr_nonnull(strstr(entry(&r, "step_230")->why, "seal of step 100, checkpoint's name says step 230"));
    ck_assert_int_eq(entry(&r, "iter_0000100")->state, DCK_LATEST_OLDER);
    ck_assert_int_eq(entry(&r, "step_100")->state, DCK_LATEST_OLDER);
    /* no candidates: named, sorted; '.' names left out */
    ck_assert_uint_eq(r.nothers, 2);
    ck_assert_str_eq(r.others[0], "logs");
    ck_assert_str_eq(r.others[1], "tmp-checkpoint-500");
    dck_latest_result_release(&r);
    tu_tmpdir_free(d);
}
END_TEST

START_TEST(none_and_trouble) {
    char *d = tu_tmpdir();
    dck_latest_result r;
    /* an empty directory: no candidate, no trouble */
    ck_assert_int_eq(dck_latest_find(d, 1, NULL, NULL, NULL, &r), DCK_OK);
    ck_assert_uint_eq(r.n, 0);
    ck_assert_int_eq(r.chosen, -1);
    dck_latest_result_release(&r);
    /* none qualifies: each judged */
    free(ckpt(d, "step_1"));
    free(ckpt(d, "step_2"));
    ck_assert_int_eq(dck_latest_find(d, 0, NULL, NULL, NULL, &r), DCK_OK);
    ck_assert_int_eq(r.chosen, -1);
    ck_assert_uint_eq(r.n, 2);
    ck_assert_int_eq(r.entries[0].state, DCK_LATEST_UNSEALED);
    ck_assert_int_eq(r.entries[1].state, DCK_LATEST_UNSEALED);
    dck_latest_result_release(&r);
    /* a file checkpoint's seal beside it is no entry of its own */
    char *f = tu_path(d, "step_3.pt"), *fs = tu_path(d, "step_3.pt" DCK_SEAL_SUFFIX);
    tu_write(f, "x", 1);
    write_seal(fs, "seal", "1", "seal_step", "3", NULL);
    ck_assert_int_eq(dck_latest_find(d, 0, NULL, NULL, NULL, &r), DCK_OK);
    ck_assert_uint_eq(r.n, 3);
    ck_assert_uint_eq(r.nothers, 0);
    ck_assert_int_eq(r.chosen, 0);
    ck_assert_str_eq(r.entries[0].name, "step_3.pt");
    dck_latest_result_release(&r);
    /* trouble: missing, not a directory */
    char *missing = tu_path(d, "nope");
    ck_assert_int_ne(dck_latest_find(missing, 0, NULL, NULL, NULL, &r), DCK_OK);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "nope"));
    dck_latest_result_release(&r);
    ck_assert_int_eq(dck_latest_find(f, 0, NULL, NULL, NULL, &r), DCK_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "not a directory"));
    dck_latest_result_release(&r);
    free(missing);
    free(f);
    free(fs);
    tu_tmpdir_free(d);
}
END_TEST

int main(void) {
    Suite *s = suite_create("latest");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, step_layouts);
    tcase_add_test(tc, step_refused);
    tcase_add_test(tc, scan_and_judge);
    tcase_add_test(tc, none_and_trouble);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

/* What repro compares of N runs besides dck_runs_compare (src/runs/repro.c):
 * the steps of the runs' side files, absent or malformed; the first step
 * one list lacks; a run's recordings against run 1's (steps recorded by
 * one run only, traced steps cut differently, state entries in one run
 * only, the first differing tensor: each a difference, never agreement;
 * steps cut alike counted as not compared); the run.json settings that are
 * off and those that differ, run.json absent or malformed; the
 * determinism tax's medians. The command's words for them:
 * tests/cli/test_repro.sh. */
#include "testutil.h"
#include "runs/repro.h"

#include <stdint.h>
#include <sys/stat.h>

START_TEST(first_unpaired) {
    const dck_step_mark a[] = {{1, 0, false}, {2, 0, false}, {3, 0, false}};
    const dck_step_mark b[] = {{1, 0, false}, {3, 0, false}};
    long step = -7;
    ck_assert_int_eq(dck_steps_first_unpaired(a, 3, a, 3, &step), 0);
    ck_assert_int_eq(step, -7);
    ck_assert_int_eq(dck_steps_first_unpaired(a, 3, b, 2, &step), 1);
    ck_assert_int_eq(step, 2);
    ck_assert_int_eq(dck_steps_first_unpaired(b, 2, a, 3, &step), 2);
    ck_assert_int_eq(step, 2);
    ck_assert_int_eq(dck_steps_first_unpaired(a, 2, a, 3, &step), 2); /* a longer list: its last step */
    ck_assert_int_eq(step, 3);
    ck_assert_int_eq(dck_steps_first_unpaired(NULL, 0, NULL, 0, &step), 0);
}
END_TEST

START_TEST(sides_absent_and_malformed) {
    char *top = tu_tmpdir(), *a = tu_run_dir(top, "a");
    dck_side_steps s[DCK_NSIDES];
    dck_recording rec;
    /* absent: not there, not an error */
    ck_assert_int_eq(dck_run_sides_load(a, s, &rec), DCK_OK);
    ck_assert(!s[DCK_SIDE_TENSORS].has && !s[DCK_SIDE_TRACE].has);
    ck_assert_uint_eq(rec.nsteps, 0);
    dck_run_sides_release(s);
    tu_write_recording(a, 2, 4, -1, false);
    ck_assert_int_eq(dck_run_sides_load(a, s, &rec), DCK_OK);
    ck_assert(s[DCK_SIDE_TENSORS].has && !s[DCK_SIDE_TRACE].has);
    ck_assert_uint_eq(s[DCK_SIDE_TENSORS].n, 3);
    ck_assert_int_eq(s[DCK_SIDE_TENSORS].steps[0].step, 2);
    ck_assert_uint_eq(s[DCK_SIDE_TENSORS].steps[0].events, 2);
    ck_assert_uint_eq(rec.nsteps, 3);
    dck_recording_release(&rec);
    dck_run_sides_release(s);
    /* malformed: an error naming the file; a FIFO is there, refused */
    char *tr = tu_path(a, "trace.bin");
    tu_write(tr, "garbage!garbage!", 16);
    ck_assert_int_ne(dck_run_sides_load(a, s, NULL), DCK_OK);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "trace.bin"));
    dck_run_sides_release(s);
    unlink(tr);
    ck_assert_int_eq(mkfifo(tr, 0600), 0);
    ck_assert_int_ne(dck_run_sides_load(a, s, NULL), DCK_OK);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "trace.bin"));
    dck_run_sides_release(s);
    free(tr);
    free(a);
    tu_tmpdir_free(top);
}
END_TEST

/* run 1's and run 2's sides and recordings from folders a and b */
typedef struct {
    dck_side_steps s[2][DCK_NSIDES];
    dck_recording rec[2];
    dck_repro_recordings f;
} pair;

static void compare_dirs(const char *a, const char *b, pair *p) {
    ck_assert_int_eq(dck_run_sides_load(a, p->s[0], &p->rec[0]), DCK_OK);
    ck_assert_int_eq(dck_run_sides_load(b, p->s[1], &p->rec[1]), DCK_OK);
    ck_assert_int_eq(dck_repro_recordings_compare(p->s[0], &p->rec[0], p->s[1], &p->rec[1], &p->f), DCK_OK);
}

static void pair_release(pair *p) {
    for (int k = 0; k < 2; k++) {
        dck_run_sides_release(p->s[k]);
        dck_recording_release(&p->rec[k]);
    }
    dck_repro_recordings_release(&p->f);
}

START_TEST(recordings_agree_and_differ) {
    char *top = tu_tmpdir(), *a = tu_run_dir(top, "a"), *b = tu_run_dir(top, "b"), *c = tu_run_dir(top, "c"),
         *d = tu_run_dir(top, "d"), *e = tu_run_dir(top, "e");
    pair p;
    /* the same recordings: nothing found */
    tu_write_recording(a, 1, 4, -1, false);
    tu_write_recording(b, 1, 4, -1, false);
    compare_dirs(a, b, &p);
    ck_assert(!p.f.differ && p.f.n == 0 && p.f.at == -1 && p.f.truncated_alike == 0);
    pair_release(&p);
    /* a parameter's digest at step 3: the first differing tensor */
    tu_write_recording(c, 1, 4, 3, false);
    compare_dirs(a, c, &p);
    ck_assert(p.f.differ && p.f.n == 1);
    ck_assert_int_eq(p.f.f[0].what, DCK_REPRO_TENSOR);
    ck_assert_int_eq(p.f.f[0].step, 3);
    ck_assert_int_eq(p.f.f[0].kind, 1);
    ck_assert_str_eq(p.f.f[0].name, "fc.weight");
    ck_assert_str_eq(p.f.f[0].how, "digest");
    ck_assert_int_eq(p.f.at, 3);
    ck_assert_str_eq(p.f.at_what, "tensor");
    pair_release(&p);
    /* step 4 recorded by run 1 only: a difference, never agreement */
    tu_write_recording(d, 1, 3, -1, false);
    compare_dirs(a, d, &p);
    ck_assert(p.f.differ && p.f.n == 1);
    ck_assert_int_eq(p.f.f[0].what, DCK_REPRO_STEPS);
    ck_assert_int_eq(p.f.f[0].side, DCK_SIDE_TENSORS);
    ck_assert_int_eq(p.f.f[0].run, 0);
    ck_assert_int_eq(p.f.f[0].step, 4);
    ck_assert_str_eq(p.f.at_what, "recorded_steps");
    pair_release(&p);
    /* no digests at all in run 2: every step of run 1's is unpaired */
    compare_dirs(a, top, &p);
    ck_assert(p.f.differ && p.f.n == 1 && p.f.f[0].what == DCK_REPRO_STEPS && p.f.f[0].step == 1);
    pair_release(&p);
    /* a state entry in run 2 only: a difference too */
    tu_write_recording(e, 1, 4, -1, true);
    compare_dirs(a, e, &p);
    ck_assert(p.f.differ && p.f.n == 1);
    ck_assert_int_eq(p.f.f[0].what, DCK_REPRO_STATE_ONLY);
    ck_assert_int_eq(p.f.f[0].run, 1);
    ck_assert_uint_eq(p.f.f[0].count, 4);
    ck_assert_str_eq(p.f.f[0].name, "rng");
    ck_assert_int_eq(p.f.at, 1);
    ck_assert_str_eq(p.f.at_what, "recorded_state");
    pair_release(&p);
    free(a);
    free(b);
    free(c);
    free(d);
    free(e);
    tu_tmpdir_free(top);
}
END_TEST

START_TEST(traced_steps_cut) {
    /* step 2 cut alike in both: not compared past the bound (counted);
     * step 3 cut in run 2 only, step 4 at another event: differences */
    dck_step_mark ta[] = {{1, 5, false}, {2, 8, true}, {3, 9, false}, {4, 8, true}};
    dck_step_mark tb[] = {{1, 5, false}, {2, 8, true}, {3, 8, true}, {4, 7, true}};
    dck_side_steps a[DCK_NSIDES] = {{false, NULL, 0}, {true, ta, 4}};
    dck_side_steps b[DCK_NSIDES] = {{false, NULL, 0}, {true, tb, 4}};
    dck_recording none;
    memset(&none, 0, sizeof none);
    dck_repro_recordings f;
    ck_assert_int_eq(dck_repro_recordings_compare(a, &none, b, &none, &f), DCK_OK);
    ck_assert(f.differ && f.n == 2);
    ck_assert_uint_eq(f.truncated_alike, 1);
    ck_assert_int_eq(f.f[0].what, DCK_REPRO_TRUNCATED);
    ck_assert_int_eq(f.f[0].step, 3);
    ck_assert(!f.f[0].truncated[0] && f.f[0].truncated[1]);
    ck_assert_uint_eq(f.f[0].events[0], 9);
    ck_assert_uint_eq(f.f[0].events[1], 8);
    ck_assert_int_eq(f.f[1].step, 4);
    ck_assert_int_eq(f.at, 3);
    ck_assert_str_eq(f.at_what, "truncated_steps");
    dck_repro_recordings_release(&f);
    /* a traced step in run 1 only: the steps differ, truncation unjudged */
    b[DCK_SIDE_TRACE].n = 3;
    ck_assert_int_eq(dck_repro_recordings_compare(a, &none, b, &none, &f), DCK_OK);
    ck_assert(f.differ && f.n == 1 && f.f[0].what == DCK_REPRO_STEPS && f.f[0].side == DCK_SIDE_TRACE);
    ck_assert_int_eq(f.f[0].step, 4);
    ck_assert_str_eq(f.at_what, "traced_steps");
    dck_repro_recordings_release(&f);
}
END_TEST

START_TEST(settings_off_and_differ) {
    json_t *s1 = json_loads("{\"deterministic_algorithms\": false, \"cudnn_benchmark\": true, \"gpus\": [\"H100\"],"
                            " \"seed\": 1}",
                            0, NULL);
    json_t *s3 = json_loads("{\"deterministic_algorithms\": false, \"cudnn_benchmark\": true, \"gpus\": [\"H100\"],"
                            " \"seed\": 2, \"CUBLAS_WORKSPACE_CONFIG\": \":4096:8\", \"extra\": null}",
                            0, NULL);
    ck_assert_ptr_nonnull(s1);
    ck_assert_ptr_nonnull(s3);
    const char *keys[DCK_SETTINGS_OFF_MAX], *hows[DCK_SETTINGS_OFF_MAX];
    /* on a GPU, an unset CUBLAS_WORKSPACE_CONFIG is off too */
    size_t n = dck_settings_off(s1, keys, hows, DCK_SETTINGS_OFF_MAX);
    ck_assert_uint_eq(n, 3);
    ck_assert_str_eq(keys[0], "deterministic_algorithms");
    ck_assert_str_eq(hows[0], "false");
    ck_assert_str_eq(keys[1], "CUBLAS_WORKSPACE_CONFIG");
    ck_assert_str_eq(hows[1], "unset");
    ck_assert_str_eq(keys[2], "cudnn_benchmark");
    ck_assert_str_eq(hows[2], "true");
    ck_assert_uint_eq(dck_settings_off(s3, keys, hows, 1), 1); /* at most max */
    ck_assert_uint_eq(dck_settings_off(NULL, keys, hows, DCK_SETTINGS_OFF_MAX), 0);
    /* the keys that differ, in the runs' order, each once; a run without
     * run.json (NULL) passed over */
    json_t *const runs[] = {s1, NULL, s3};
    const char **differ = NULL;
    ck_assert_int_eq(dck_settings_differ(runs, 3, &differ, &n), DCK_OK);
    ck_assert_uint_eq(n, 3);
    ck_assert_str_eq(differ[0], "seed");
    ck_assert_str_eq(differ[1], "CUBLAS_WORKSPACE_CONFIG");
    ck_assert_str_eq(differ[2], "extra");
    free(differ);
    json_t *const same[] = {s1, s1};
    ck_assert_int_eq(dck_settings_differ(same, 2, &differ, &n), DCK_OK);
    ck_assert_uint_eq(n, 0);
    free(differ);
    json_decref(s1);
    json_decref(s3);
}
END_TEST

START_TEST(settings_load) {
    char *top = tu_tmpdir(), *a = tu_run_dir(top, "a"), *p = tu_path(a, "run.json");
    json_t *s = (json_t *)1;
    bool unreadable = true;
    /* absent: no settings, no error */
    ck_assert_int_eq(dck_run_settings_load(a, &s, &unreadable), DCK_OK);
    ck_assert(s == NULL && !unreadable);
    const char good[] = "{\"detcheck_run\": 1, \"settings\": {\"seed\": 3}}";
    tu_write(p, good, sizeof good - 1);
    ck_assert_int_eq(dck_run_settings_load(a, &s, &unreadable), DCK_OK);
    ck_assert_int_eq(json_integer_value(json_object_get(s, "seed")), 3);
    json_decref(s);
    /* not a detcheck run header: an error naming the file */
    const char bad[] = "{\"settings\": {}}";
    tu_write(p, bad, sizeof bad - 1);
    ck_assert_int_eq(dck_run_settings_load(a, &s, &unreadable), DCK_ERR_FORMAT);
    ck_assert(s == NULL && !unreadable);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "run.json: not a detcheck run header"));
    /* a FIFO is there, refused, never read (it would block) */
    unlink(p);
    ck_assert_int_eq(mkfifo(p, 0600), 0);
    ck_assert_int_ne(dck_run_settings_load(a, &s, &unreadable), DCK_OK);
    ck_assert(s == NULL && unreadable);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "run.json"));
    free(p);
    free(a);
    tu_tmpdir_free(top);
}
END_TEST

START_TEST(tax) {
    double v[] = {3, 1, 2};
    ck_assert_double_eq(dck_median(v, 3), 2);
    double w[] = {4, 1, 3, 2};
    ck_assert_double_eq(dck_median(w, 4), 2.5);
    /* runs alternate deterministic (even) and not (odd) */
    const double med[] = {2.0, 1.0, 4.0, 1.0, 3.0, 2.0};
    dck_repro_tax t;
    ck_assert_int_eq(dck_repro_tax_of(med, 6, &t), DCK_OK);
    ck_assert_double_eq(t.median[0], 3.0);
    ck_assert_double_eq(t.median[1], 1.0);
    ck_assert_double_eq(t.min[0], 2.0);
    ck_assert_double_eq(t.max[0], 4.0);
    ck_assert_double_eq(t.max[1], 2.0);
    ck_assert_double_eq(t.ratio, 3.0);
    ck_assert_double_eq(t.ratio_min, 1.0);
    ck_assert_double_eq(t.ratio_max, 4.0);
    /* step times of 0: no ratio, never an infinite one */
    const double zero[] = {2.0, 0.0};
    ck_assert_int_eq(dck_repro_tax_of(zero, 2, &t), DCK_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "step times are 0"));
}
END_TEST

int main(void) {
    Suite *s = suite_create("runs_repro");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, first_unpaired);
    tcase_add_test(tc, sides_absent_and_malformed);
    tcase_add_test(tc, recordings_agree_and_differ);
    tcase_add_test(tc, traced_steps_cut);
    tcase_add_test(tc, settings_off_and_differ);
    tcase_add_test(tc, settings_load);
    tcase_add_test(tc, tax);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

/* dck_run_open and dck_runs_compare (src/runs/) on small run folders this
 * test writes: absent files are absent, malformed ones are errors naming
 * the file; agreeing runs agree, the first differing step and tensor are
 * found, and what one run holds alone is a gap, never agreement. */
#include "testutil.h"
#include "detcheck_static.h"

#include <stdint.h>
#include <sys/stat.h>

/* trajectory.jsonl of steps lo..hi (but skip), loss bits of step `odd`
 * changed */
static void write_traj(const char *dir, long lo, long hi, long skip, long odd) {
    char *p = tu_path(dir, "trajectory.jsonl");
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    for (long s = lo; s <= hi; s++)
        if (s != skip)
            fprintf(f, "{\"step\":%ld,\"loss_bits\":\"%08x\",\"grad_norm_bits\":\"3f800000\",\"lr\":0.001}\n", s,
                    s == odd ? 0x40000000u : 0x3f800000u);
    fclose(f);
    free(p);
}


/* dck_runs_compare of two folders (allow: allow_partial) into r. */
static void compare(const char *a, const char *b, bool allow, dck_runs_result *r) {
    dck_run *ra = NULL, *rb = NULL;
    ck_assert_int_eq(dck_run_open(a, &ra), DCK_OK);
    ck_assert_int_eq(dck_run_open(b, &rb), DCK_OK);
    dck_runs_opts o = {.allow_partial = allow};
    ck_assert_int_eq(dck_runs_compare(ra, rb, &o, r), DCK_OK);
    dck_run_free(ra);
    dck_run_free(rb);
}

static const dck_runs_gap *gap_of(const dck_runs_result *r, const char *item) {
    for (size_t i = 0; i < r->ngaps; i++)
        if (!strcmp(r->gaps[i].item, item)) return &r->gaps[i];
    return NULL;
}

START_TEST(open_absent_and_malformed) {
    char *top = tu_tmpdir();
    dck_run *r = (dck_run *)1;
    char *nodir = tu_path(top, "none");
    ck_assert_int_ne(dck_run_open(nodir, &r), DCK_OK);
    ck_assert_ptr_null(r);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "not a directory"));
    char *a = tu_run_dir(top, "a");
    /* no trajectory: the one file a run must hold */
    ck_assert_int_ne(dck_run_open(a, &r), DCK_OK);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "trajectory.jsonl"));
    /* a trajectory alone: the other files are absent, not errors */
    write_traj(a, 1, 3, -1, -1);
    ck_assert_int_eq(dck_run_open(a, &r), DCK_OK);
    dck_run_free(r);
    dck_run_free(NULL);
    /* malformed: an error naming the file */
    char *rec = tu_path(a, "tensor_digests.bin");
    tu_write(rec, "garbage!garbage!", 16);
    ck_assert_int_eq(dck_run_open(a, &r), DCK_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "/tensor_digests.bin: byte 0: not a detcheck tensor digest file"));
    unlink(rec);
    /* a FIFO is there (refused, naming it), not absent */
    char *tr = tu_path(a, "trace.bin");
    ck_assert_int_eq(mkfifo(tr, 0600), 0);
    ck_assert_int_ne(dck_run_open(a, &r), DCK_OK);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "trace.bin"));
    unlink(tr);
    char *traj = tu_path(a, "trajectory.jsonl");
    tu_write(traj, "{\"step\":1}\n{}\n", 14);
    ck_assert_int_eq(dck_run_open(a, &r), DCK_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "trajectory.jsonl:1: needs step"));
    free(traj);
    free(tr);
    free(rec);
    free(a);
    free(nodir);
    tu_tmpdir_free(top);
}
END_TEST

START_TEST(agreeing_runs_agree) {
    char *top = tu_tmpdir();
    char *a = tu_run_dir(top, "a"), *b = tu_run_dir(top, "b");
    write_traj(a, 1, 4, -1, -1);
    write_traj(b, 1, 4, -1, -1);
    tu_write_recording(a, 1, 4, -1, false);
    tu_write_recording(b, 1, 4, -1, false);
    dck_runs_result r;
    compare(a, b, false, &r);
    ck_assert(!r.found && !r.different && r.accepted);
    ck_assert_uint_eq(r.ngaps, 0);
    ck_assert(r.rec_both && !r.rec_found);
    ck_assert_uint_eq(r.rec_common, 4);
    ck_assert_int_eq(r.first_step, -1);
    ck_assert_int_eq(r.last_step[0], 4);
    dck_runs_result_release(&r);
    free(a);
    free(b);
    tu_tmpdir_free(top);
}
END_TEST

START_TEST(first_differing_step_and_tensor) {
    char *top = tu_tmpdir();
    char *a = tu_run_dir(top, "a"), *b = tu_run_dir(top, "b");
    write_traj(a, 1, 5, -1, -1);
    write_traj(b, 1, 5, -1, 4); /* the trajectories part at step 4 */
    tu_write_recording(a, 1, 5, -1, false);
    tu_write_recording(b, 1, 5, 3, false); /* a parameter already at step 3 */
    dck_runs_result r;
    compare(a, b, false, &r);
    ck_assert(r.found && r.different);
    ck_assert(r.traj_differs);
    ck_assert_int_eq(r.traj_step, 4);
    ck_assert_ptr_nonnull(strstr(r.traj_detail, "loss_bits"));
    ck_assert(r.rec_found);
    ck_assert_int_eq(r.rec_step, 3);
    ck_assert_int_eq(r.rec_kind, 1);
    ck_assert_str_eq(r.rec_name, "fc.weight");
    ck_assert_str_eq(r.rec_how, "digest");
    ck_assert_int_eq(r.first_step, 3);
    ck_assert_str_eq(r.first_differing, "tensor");
    ck_assert(!r.trace.has[0] && !r.trace.found);
    dck_runs_result_release(&r);
    free(a);
    free(b);
    tu_tmpdir_free(top);
}
END_TEST

START_TEST(gaps_are_not_agreement) {
    char *top = tu_tmpdir();
    char *a = tu_run_dir(top, "a"), *b = tu_run_dir(top, "b"), *c = tu_run_dir(top, "c");
    write_traj(a, 1, 4, -1, -1);
    write_traj(b, 1, 4, -1, -1);
    tu_write_recording(a, 1, 4, -1, false); /* b recorded no tensors: an empty side */
    dck_runs_result r;
    compare(a, b, true, &r);
    const dck_runs_gap *g = gap_of(&r, "recorded_steps");
    ck_assert_ptr_nonnull(g);
    ck_assert(g->run == 0 && g->count == 4 && g->first == 1 && g->last == 4 && g->empty_side);
    ck_assert_str_eq(g->why, "has no tensor_digests.bin");
    ck_assert(!r.found && !r.accepted && r.different); /* allow_partial never accepts an empty side */
    dck_runs_result_release(&r);
    /* more steps in one trajectory: a gap, which allow_partial accepts */
    write_traj(c, 1, 6, -1, -1);
    tu_write_recording(c, 1, 4, -1, false);
    compare(a, c, false, &r);
    g = gap_of(&r, "trajectory_steps");
    ck_assert_ptr_nonnull(g);
    ck_assert(g->run == 1 && g->count == 2 && g->first == 5 && g->last == 6 && !g->empty_side);
    ck_assert(!r.found && r.different);
    dck_runs_result_release(&r);
    compare(a, c, true, &r);
    ck_assert(!r.found && r.accepted && !r.different && r.ngaps == 1);
    dck_runs_result_release(&r);
    /* a trajectory with a missing step is trouble, naming it */
    write_traj(c, 1, 6, 3, -1);
    dck_run *ra = NULL, *rc = NULL;
    ck_assert_int_eq(dck_run_open(a, &ra), DCK_OK);
    ck_assert_int_eq(dck_run_open(c, &rc), DCK_OK);
    ck_assert_int_eq(dck_runs_compare(ra, rc, NULL, &r), DCK_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "c/trajectory.jsonl has a gap: step 3 is missing"));
    dck_runs_result_release(&r);
    /* ... unless the caller judges the steps (missing_steps): then the
     * step is a gap, and the steps both hold are compared */
    const dck_runs_opts gapped = {.missing_steps = true};
    ck_assert_int_eq(dck_runs_compare(ra, rc, &gapped, &r), DCK_OK);
    g = gap_of(&r, "trajectory_steps");
    ck_assert_ptr_nonnull(g);
    ck_assert(g->run == 0 && g->count == 1 && g->first == 3 && g->last == 3 && !g->empty_side);
    ck_assert(!r.found && r.different && r.last_step[0] == 4 && r.last_step[1] == 6);
    dck_runs_result_release(&r);
    dck_run_free(rc);
    /* runs without a step in common, and a trajectory without records:
     * trouble, or with missing_steps gaps (an empty side) */
    static const long span[][2] = {{7, 9}, {1, 0}};
    for (size_t i = 0; i < sizeof span / sizeof span[0]; i++) {
        write_traj(c, span[i][0], span[i][1], -1, 8);
        ck_assert_int_eq(dck_run_open(c, &rc), DCK_OK);
        ck_assert_int_ne(dck_runs_compare(ra, rc, NULL, &r), DCK_OK);
        dck_runs_result_release(&r);
        ck_assert_int_eq(dck_runs_compare(ra, rc, &gapped, &r), DCK_OK);
        ck_assert(!r.traj_differs && r.different && r.last_step[1] == (i ? -1 : 9));
        g = gap_of(&r, "trajectory_steps");
        ck_assert(g && g->run == 0 && g->count == 4 && g->first == 1 && g->last == 4 && g->empty_side == (i == 1));
        dck_runs_result_release(&r);
        dck_run_free(rc);
    }
    dck_run_free(ra);
    free(a);
    free(b);
    free(c);
    tu_tmpdir_free(top);
}
END_TEST

int main(void) {
    Suite *s = suite_create("runs_compare");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, open_absent_and_malformed);
    tcase_add_test(tc, agreeing_runs_agree);
    tcase_add_test(tc, first_differing_step_and_tensor);
    tcase_add_test(tc, gaps_are_not_agreement);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

/* dck_comm_wait (src/common/comm.c), the wait after every collective that
 * the trainer's NCCL all-gather and all-reduce, the hash's NCCL reduce and
 * the MPI collectives share (detcheck-train(1), ENVIRONMENT), driven here by fake operations: one
 * that completes, one whose peer reports an error apart (as
 * ncclCommGetAsyncError does), one that never completes (a peer that never
 * answers) under a short timeout, one whose own test fails. The MPI side
 * with a real stalled rank is tests/cli/test_train_mpi.sh. */
#include "testutil.h"
#include "common/common.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    int polls, done_after; /* done at poll done_after; < 0 never */
    int async_at;          /* the async source reports at this poll; < 0 never */
    int fail_at;           /* the test itself fails at this poll; < 0 never */
    int aborts, async_calls;
    bool quiet;
} fake_op;

static dck_status f_test(void *ctx, bool *done) {
    fake_op *f = ctx;
    f->polls++;
    if (f->fail_at >= 0 && f->polls >= f->fail_at)
        return dck_set_error(DCK_ERR_DEVICE, "fake stream: an illegal address");
    *done = f->done_after >= 0 && f->polls >= f->done_after;
    return DCK_OK;
}

static dck_status f_async(void *ctx) {
    fake_op *f = ctx;
    f->async_calls++;
    if (f->async_at >= 0 && f->polls >= f->async_at)
        return dck_set_error(DCK_ERR_COMM, "NCCL reports remote process exited (ncclCommGetAsyncError)");
    return DCK_OK;
}

static void f_abort(void *ctx) { ((fake_op *)ctx)->aborts++; }

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static dck_status wait_on(fake_op *f, const char *what) {
    dck_comm_op op = {f, f_test, f_async, f_abort, f->quiet};
    return dck_comm_wait(dck_comm_self(), &op, what);
}

START_TEST(completes_without_abort) {
    unsetenv("DETCHECK_COLLECTIVE_TIMEOUT");
    fake_op f = {.done_after = 5, .async_at = -1, .fail_at = -1};
    ck_assert_int_eq(wait_on(&f, "ncclAllGather of the gradient sums"), DCK_OK);
    ck_assert_int_eq(f.polls, 5);
    ck_assert_int_eq(f.aborts, 0);
    ck_assert_int_ge(f.async_calls, 4); /* the async source is read while it runs */
    /* no async source, no abort (MPI requests): the same */
    fake_op g = {.done_after = 1, .async_at = -1, .fail_at = -1};
    dck_comm_op op = {&g, f_test, NULL, NULL, false};
    ck_assert_int_eq(dck_comm_wait(NULL, &op, "MPI_Iallgather"), DCK_OK);
}
END_TEST

/* a peer's failure reported apart: given up at once, NCCL's message kept */
START_TEST(async_error_aborts) {
    unsetenv("DETCHECK_COLLECTIVE_TIMEOUT");
    fake_op f = {.done_after = -1, .async_at = 3, .fail_at = -1};
    double t0 = mono();
    dck_status s = wait_on(&f, "train: ncclAllReduce of the gradients");
    ck_assert_int_eq(s, DCK_ERR_COMM);
    ck_assert_double_lt(mono() - t0, 5.0); /* not the 600 s timeout */
    ck_assert_int_eq(f.aborts, 1);
    ck_assert_int_eq(f.polls, 3);
    const char *m = dck_last_error();
    ck_assert_msg(strstr(m, "train: ncclAllReduce of the gradients: NCCL reports remote process exited"),
                  "%s", m);
}
END_TEST

/* a peer that never answers: the timeout, then the abort */
START_TEST(timeout_aborts_and_says_so) {
    setenv("DETCHECK_COLLECTIVE_TIMEOUT", "0.3", 1);
    ck_assert_double_eq_tol(dck_comm_timeout(NULL), 0.3, 1e-9);
    fake_op f = {.done_after = -1, .async_at = -1, .fail_at = -1, .quiet = true};
    double t0 = mono();
    dck_status s = wait_on(&f, "train: ncclAllGather of the gradient sums");
    double dt = mono() - t0;
    ck_assert_int_eq(s, DCK_ERR_COMM);
    ck_assert_double_ge(dt, 0.3);
    ck_assert_double_lt(dt, 3.0);
    ck_assert_int_eq(f.aborts, 1);
    /* quiet: asleep between polls, not spinning: a few hundred polls, not millions */
    ck_assert_int_lt(f.polls, 2000);
    const char *m = dck_last_error();
    ck_assert_msg(strstr(m, "train: ncclAllGather of the gradient sums: not complete within 0.3 s "
                            "(DETCHECK_COLLECTIVE_TIMEOUT)"), "%s", m);
    /* dck_comm_set_timeout overrides the variable */
    dck_comm_set_timeout(dck_comm_self(), 0.2);
    ck_assert_double_eq_tol(dck_comm_timeout(dck_comm_self()), 0.2, 1e-9);
    fake_op g = {.done_after = -1, .async_at = -1, .fail_at = -1}; /* back to back */
    t0 = mono();
    ck_assert_int_eq(wait_on(&g, "x"), DCK_ERR_COMM);
    ck_assert_double_lt(mono() - t0, 0.29);
    ck_assert_int_eq(g.aborts, 1);
    dck_comm_set_timeout(dck_comm_self(), 0);
    unsetenv("DETCHECK_COLLECTIVE_TIMEOUT");
    ck_assert(!dck_comm_broken(dck_comm_self())); /* one rank: nobody to miss */
}
END_TEST

/* the operation's own failure: passed up with its status, and given up */
START_TEST(failed_test_aborts) {
    unsetenv("DETCHECK_COLLECTIVE_TIMEOUT");
    fake_op f = {.done_after = -1, .async_at = -1, .fail_at = 2};
    ck_assert_int_eq(wait_on(&f, "nccl reduce of lane sums"), DCK_ERR_DEVICE);
    ck_assert_int_eq(f.aborts, 1);
    ck_assert_msg(strstr(dck_last_error(), "nccl reduce of lane sums: fake stream: an illegal address"),
                  "%s", dck_last_error());
}
END_TEST

START_TEST(timeout_variable_checked) {
    double t;
    unsetenv("DETCHECK_COLLECTIVE_TIMEOUT");
    ck_assert_int_eq(dck_comm_timeout_env(&t), DCK_OK);
    ck_assert_double_eq(t, DCK_COMM_TIMEOUT_DEFAULT);
    static const char *const bad[] = {"abc", "0", "-5", "0.05", "1e9", "5s", "nan"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("DETCHECK_COLLECTIVE_TIMEOUT", bad[i], 1);
        ck_assert_msg(dck_comm_timeout_env(&t) == DCK_ERR_INVALID, "'%s' accepted", bad[i]);
        ck_assert_msg(strstr(dck_last_error(), "DETCHECK_COLLECTIVE_TIMEOUT="), "%s", dck_last_error());
        /* refused up front by dck_comm_init, on every rank */
        dck_comm *c = NULL;
        ck_assert_int_eq(dck_comm_init(NULL, NULL, &c), DCK_ERR_INVALID);
    }
    setenv("DETCHECK_COLLECTIVE_TIMEOUT", "45", 1);
    ck_assert_int_eq(dck_comm_timeout_env(&t), DCK_OK);
    ck_assert_double_eq(t, 45.0);
    unsetenv("DETCHECK_COLLECTIVE_TIMEOUT");
}
END_TEST

int main(void) {
    Suite *s = suite_create("comm");
    TCase *tc = tcase_create("wait");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, completes_without_abort);
    tcase_add_test(tc, async_error_aborts);
    tcase_add_test(tc, timeout_aborts_and_says_so);
    tcase_add_test(tc, failed_test_aborts);
    tcase_add_test(tc, timeout_variable_checked);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

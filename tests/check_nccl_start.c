/* NCCL's start-up (src/gpu/gpu_nccl.c: dck_nccl_load_all, dck_nccl_init)
 * and the wait after a collective on a non-blocking communicator
 * (dck_nccl_wait), without a GPU: a stub libnccl.so.2 and a stub CUDA
 * runtime built here with cc. The stub's ncclCommInitRankConfig records the
 * config it was given and its ncclCommGetAsyncError answers ncclInProgress
 * for DCK_STUB_NCCL_POLLS polls (-1: for good), then DCK_STUB_NCCL_THEN
 * (0: ready); ncclCommAbort is counted. So the start-up that never
 * completes ends after the collective timeout, aborted, and a start-up that
 * completes is ready, on one rank here.
 *
 * Started by an MPI launcher (tests/cli/test_nccl_start.sh: mpirun -np 3),
 * the suite runs its ranks' case instead: every rank loads NCCL and learns
 * whether all could; the ranks listed in DCK_TEST_NCCL_MISSING_ON have
 * DETCHECK_NCCL_LIB pointed at a missing library, and every rank must fail
 * at once with the same message naming them and their reasons. */
#include "testutil.h"
#include "common/common.h"

#ifdef DCK_HAVE_CUDA
#include "gpu/cuda_loader.h"

#include <dlfcn.h>
#include <time.h>

static char *stubs; /* the folder of the stubs, built once by main */

/* every function of the loader's tables, weak, answering 0 (success) */
#define WEAK_(name) "__attribute__((weak)) int " #name "(void) { return 0; }\n"
static const char nccl_weak[] = DCK_NCCL_FUNCTIONS(WEAK_);
static const char cudart_weak[] = DCK_CUDART_FUNCTIONS(WEAK_);
#undef WEAK_

static const char nccl_stub[] =
    "#include <stdlib.h>\n"
    "#include <string.h>\n"
    "typedef struct { unsigned long size; unsigned magic, version; int blocking; } cfg;\n"
    "typedef struct { char internal[128]; } uid; /* by value, as nccl.h's ncclUniqueId */\n"
    "int dck_stub_blocking = -99, dck_stub_aborts, dck_stub_polls;\n"
    "static int n(const char *v, int d) { const char *e = getenv(v); return e ? atoi(e) : d; }\n"
    "static char comm_;\n"
    "int ncclCommInitRankConfig(void **comm, int nranks, uid id, int rank, cfg *c) {\n"
    "    (void)nranks, (void)id.internal, (void)rank;\n"
    "    dck_stub_blocking = c->magic == 0xcafebeef ? c->blocking : -1;\n"
    "    *comm = &comm_;\n"
    "    return n(\"DCK_STUB_NCCL_INIT\", 7);\n"
    "}\n"
    "int ncclCommGetAsyncError(void *comm, int *state) {\n"
    "    (void)comm;\n"
    "    int polls = n(\"DCK_STUB_NCCL_POLLS\", 0);\n"
    "    *state = polls < 0 || ++dck_stub_polls <= polls ? 7 : n(\"DCK_STUB_NCCL_THEN\", 0);\n"
    "    return 0;\n"
    "}\n"
    "int ncclCommAbort(void *comm) { (void)comm; dck_stub_aborts++; return 0; }\n"
    "const char *ncclGetErrorString(int r) { return r == 6 ? \"remote process exited or there was a "
    "network error\" : r == 4 ? \"invalid argument\" : \"stub error\"; }\n"
    "int ncclGetUniqueId(char id[128]) { memset(id, 0, 128); return 0; }\n";

/* stubs/NAME: the weak defaults plus strong (NULL: none), as one library.
 * Called by main, outside the tests: no ck_assert here. */
static int put(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    int ok = f && fputs(text, f) >= 0;
    if (f && fclose(f)) ok = 0;
    return ok;
}
static int build(const char *name, const char *weak, const char *strong) {
    char *w = tu_path(stubs, "weak.c"), *s = tu_path(stubs, "strong.c"), *so = tu_path(stubs, name);
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "cc -shared -fPIC -Wl,-soname,%s -o '%s' '%s' '%s'", name, so, w, s);
    int ok = put(w, weak) && put(s, strong ? strong : "") && system(cmd) == 0;
    if (!ok) fprintf(stderr, "check_nccl_start: cannot build the stub %s: %s\n", name, cmd);
    free(w);
    free(s);
    free(so);
    return ok;
}

static void use_stubs(void) {
    char *n = tu_path(stubs, "libnccl.so.2"), *c = tu_path(stubs, "libcudart.so.99");
    setenv("DETCHECK_NCCL_LIB", n, 1);
    setenv("DETCHECK_CUDART_LIB", c, 1);
    free(n);
    free(c);
}

/* the stub's books, through the handle the loader opened */
static int stub_int(const char *name) {
    void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD);
    ck_assert_ptr_nonnull(h);
    int *v = dlsym(h, name);
    ck_assert_ptr_nonnull(v);
    int x = *v;
    dlclose(h);
    return x;
}

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const ncclUniqueId zero_id;

/* a start-up that completes after a few polls: ready, non-blocking asked */
START_TEST(start_up_ready) {
    use_stubs();
    setenv("DCK_STUB_NCCL_POLLS", "3", 1);
    const dck_nccl_api *nc;
    ck_assert_int_eq(dck_nccl_load_all(dck_comm_self(), &nc), DCK_OK);
    ncclComm_t comm = NULL;
    ck_assert_int_eq(dck_nccl_init(NULL, nc, &comm, 1, &zero_id, 0), DCK_OK);
    ck_assert_ptr_nonnull(comm);
    ck_assert_int_eq(stub_int("dck_stub_blocking"), 0);
    ck_assert_int_eq(stub_int("dck_stub_polls"), 4);
    ck_assert_int_eq(stub_int("dck_stub_aborts"), 0);
}
END_TEST

/* a start-up that never completes (a peer that never joins): the
 * collective timeout, then ncclCommAbort, not a wait for good */
START_TEST(start_up_times_out_and_aborts) {
    use_stubs();
    setenv("DCK_STUB_NCCL_POLLS", "-1", 1);
    setenv("DETCHECK_COLLECTIVE_TIMEOUT", "0.4", 1);
    const dck_nccl_api *nc;
    ck_assert_int_eq(dck_nccl_load(&nc), DCK_OK);
    ncclComm_t comm = NULL;
    double t0 = mono();
    ck_assert_int_eq(dck_nccl_init(NULL, nc, &comm, 2, &zero_id, 0), DCK_ERR_COMM);
    double dt = mono() - t0;
    ck_assert_double_ge(dt, 0.4);
    ck_assert_double_lt(dt, 5.0);
    ck_assert_ptr_null(comm);
    ck_assert_int_eq(stub_int("dck_stub_aborts"), 1);
    ck_assert_msg(strstr(dck_last_error(), "NCCL start-up (ncclCommInitRankConfig): not complete within 0.4 s "
                                           "(DETCHECK_COLLECTIVE_TIMEOUT)"), "%s", dck_last_error());
    unsetenv("DETCHECK_COLLECTIVE_TIMEOUT");
}
END_TEST

/* NCCL reports a failure during start-up: at once, its words, aborted */
START_TEST(start_up_failure_reported) {
    use_stubs();
    setenv("DCK_STUB_NCCL_POLLS", "2", 1);
    setenv("DCK_STUB_NCCL_THEN", "6", 1);
    const dck_nccl_api *nc;
    ck_assert_int_eq(dck_nccl_load(&nc), DCK_OK);
    ncclComm_t comm = NULL;
    ck_assert_int_eq(dck_nccl_init(NULL, nc, &comm, 2, &zero_id, 0), DCK_ERR_COMM);
    ck_assert_ptr_null(comm);
    ck_assert_int_eq(stub_int("dck_stub_aborts"), 1);
    ck_assert_msg(strstr(dck_last_error(), "NCCL start-up (ncclCommInitRankConfig): NCCL reports remote process "
                                           "exited"), "%s", dck_last_error());
    /* refused by the call itself */
    setenv("DCK_STUB_NCCL_INIT", "4", 1);
    ck_assert_int_eq(dck_nccl_init(NULL, nc, &comm, 2, &zero_id, 0), DCK_ERR_DEVICE);
    ck_assert_ptr_null(comm);
    ck_assert_msg(strstr(dck_last_error(), "ncclCommInitRankConfig): invalid argument"), "%s", dck_last_error());
    ck_assert_int_eq(stub_int("dck_stub_aborts"), 2);
}
END_TEST

/* a rank that cannot load NCCL is named, with the loader's reason */
START_TEST(load_failure_named) {
    setenv("DETCHECK_NCCL_LIB", "libnccl-dck-missing.so.2", 1);
    const dck_nccl_api *nc = (const dck_nccl_api *)1;
    ck_assert_int_eq(dck_nccl_load_all(dck_comm_self(), &nc), DCK_ERR_NODEVICE);
    ck_assert_ptr_null(nc);
    const char *m = dck_last_error();
    ck_assert_msg(strstr(m, "NCCL could not be loaded on 1 of 1 ranks (rank 0), so no rank starts it; rank 0: "), "%s", m);
    ck_assert_msg(strstr(m, "libnccl-dck-missing.so.2"), "%s", m);
}
END_TEST

/* a collective on a non-blocking communicator may answer ncclInProgress
 * (still being enqueued): waited until NCCL has enqueued it, then the
 * stream; not an error */
START_TEST(collective_in_progress_waited) {
    use_stubs();
    setenv("DCK_STUB_NCCL_POLLS", "5", 1);
    const dck_nccl_api *nc;
    ck_assert_int_eq(dck_nccl_load(&nc), DCK_OK);
    ncclComm_t comm = (ncclComm_t)&zero_id;
    ck_assert_int_eq(dck_nccl_wait(dck_comm_self(), nc, &comm, NULL, ncclInProgress, "ncclAllGather"), DCK_OK);
    ck_assert_ptr_nonnull(comm);
    ck_assert_int_ge(stub_int("dck_stub_polls"), 6);
    ck_assert_int_eq(stub_int("dck_stub_aborts"), 0);
}
END_TEST

/* ------------------------------------------------------------------ ranks */

/* is rank r in the comma-separated list v */
static bool listed(const char *v, int r) {
    for (const char *p = v; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (atoi(p) == r) return true;
    return false;
}

START_TEST(ranks_agree_that_nccl_loaded) {
    dck_comm *c = NULL;
    ck_assert_int_eq(dck_comm_init(NULL, NULL, &c), DCK_OK);
    int me = dck_comm_rank(c), K = dck_comm_size(c);
    const char *missing = getenv("DCK_TEST_NCCL_MISSING_ON");
    char miss[64];
    snprintf(miss, sizeof miss, "libnccl-dck-missing-on-rank-%d.so.2", me);
    if (listed(missing, me)) setenv("DETCHECK_NCCL_LIB", miss, 1);
    else use_stubs();
    const dck_nccl_api *nc = NULL;
    double t0 = mono();
    dck_status s = dck_nccl_load_all(c, &nc);
    double dt = mono() - t0;
    int failed = 0;
    char names[64] = "";
    for (int r = 0; r < K; r++)
        if (listed(missing, r))
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%d", failed++ ? ", " : "", r);
    if (!failed) {
        ck_assert_msg(s == DCK_OK, "rank %d: %s", me, dck_last_error());
        ck_assert_ptr_nonnull(nc);
    } else {
        const char *m = dck_last_error();
        ck_assert_int_eq(s, DCK_ERR_NODEVICE);
        ck_assert_ptr_null(nc);
        char want[128];
        snprintf(want, sizeof want, "NCCL could not be loaded on %d of %d ranks (rank%s %s)", failed, K,
                 failed == 1 ? "" : "s", names);
        ck_assert_msg(strstr(m, want), "rank %d: %s", me, m);
        for (int r = 0; r < K; r++) { /* each failing rank with its own reason */
            snprintf(want, sizeof want, "; rank %d: cannot load NCCL (libnccl-dck-missing-on-rank-%d.so.2)", r, r);
            ck_assert_msg(!strstr(m, want) == !listed(missing, r), "rank %d: %s", me, m);
        }
        printf("rank %d: %s\n", me, m);
    }
    ck_assert_double_lt(dt, 10.0); /* at once: not a collective timeout */
    dck_comm_finalize(c);
}
END_TEST
#else
START_TEST(built_without_cuda) { TU_SKIP("CUDA=0 build: no NCCL start-up to test"); }
END_TEST
#endif

int main(void) {
    Suite *s = suite_create("nccl_start");
    TCase *tc = tcase_create("start");
#ifdef DCK_HAVE_CUDA
    tcase_set_timeout(tc, 60);
    stubs = tu_tmpdir();
    if (!stubs) return 1;
    if (!build("libnccl.so.2", nccl_weak, nccl_stub) || !build("libcudart.so.99", cudart_weak, NULL)) {
        tu_tmpdir_free(stubs);
        return 1;
    }
    if (dck_comm_launched()) {
        /* under mpirun: the ranks' case, in this process (MPI once) */
        setenv("CK_FORK", "no", 1);
        tcase_add_test(tc, ranks_agree_that_nccl_loaded);
    } else {
        /* forked: each test starts with nothing loaded */
        tcase_add_test(tc, start_up_ready);
        tcase_add_test(tc, start_up_times_out_and_aborts);
        tcase_add_test(tc, start_up_failure_reported);
        tcase_add_test(tc, load_failure_named);
        tcase_add_test(tc, collective_in_progress_waited);
    }
#else
    tcase_add_test(tc, built_without_cuda);
#endif
    suite_add_tcase(s, tc);
    int rc = tu_run(s);
#ifdef DCK_HAVE_CUDA
    tu_tmpdir_free(stubs);
#endif
    return rc;
}

/* The library's progress callback (dck_options.progress for hashing,
 * dck_diff_options.progress for diff), which the CLI draws on a terminal:
 * called from the calling thread, done never goes back nor past total, the
 * total never shrinks (diff learns of its second pass, the statistics of
 * tensors whose bytes differ, only after the first: the total grows then),
 * the last call has done == total, and the library itself prints nothing on
 * stdout or stderr (only the command line does). */
#include "testutil.h"

#include "detcheck_static.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>

typedef struct {
    pthread_t caller;
    int calls, other_thread, backwards;
    uint64_t last_done, total;
} record;

static void on_progress(void *ctx, uint64_t done, uint64_t total) {
    record *r = ctx;
    if (!pthread_equal(pthread_self(), r->caller)) r->other_thread++;
    if (done > total || (r->calls && (done < r->last_done || total < r->total))) r->backwards++;
    r->calls++;
    r->last_done = done;
    r->total = total;
}

/* Two files of several tensors, big enough for several windows. */
static char *make_files(char *paths[2], float bump) {
    char *dir = tu_tmpdir();
    ck_assert_ptr_nonnull(dir);
    enum { N = 3 << 20 }; /* elements per tensor: 12 MiB */
    float *x = malloc(sizeof *x * N);
    ck_assert_ptr_nonnull(x);
    for (size_t i = 0; i < N; i++) x[i] = (float)(i % 1000) * 0.25f;
    for (int f = 0; f < 2; f++) {
        if (f == 1) x[N / 2] += bump;
        dck_st_tensor t[2];
        memset(t, 0, sizeof t);
        t[0].name = "model.layers.0.weight";
        t[1].name = "model.layers.1.weight";
        for (int k = 0; k < 2; k++) {
            t[k].dtype = DCK_F32;
            t[k].ndim = 1;
            t[k].shape[0] = N;
            t[k].data = x;
        }
        paths[f] = tu_path(dir, f ? "b.safetensors" : "a.safetensors");
        ck_assert_msg(dck_safetensors_write(paths[f], t, 2, NULL, 0, 0) == DCK_OK, "%s", dck_last_error());
    }
    free(x);
    return dir;
}

/* Runs fn with stdout and stderr sent to files; returns their total size. */
static long silenced(const char *dir, void (*fn)(void *), void *arg) {
    char *po = tu_path(dir, "stdout.txt"), *pe = tu_path(dir, "stderr.txt");
    fflush(stdout);
    fflush(stderr);
    int so = dup(1), se = dup(2);
    int fo = open(po, O_WRONLY | O_CREAT | O_TRUNC, 0644), fe = open(pe, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert(so >= 0 && se >= 0 && fo >= 0 && fe >= 0);
    dup2(fo, 1);
    dup2(fe, 2);
    fn(arg);
    fflush(stdout);
    fflush(stderr);
    dup2(so, 1);
    dup2(se, 2);
    close(so);
    close(se);
    close(fo);
    close(fe);
    long n = tu_file_size(po) + tu_file_size(pe);
    free(po);
    free(pe);
    return n;
}

typedef struct {
    char **paths;
    record rec;
    dck_status s;
    dck_manifest *m;
    dck_diff_result d;
} job;

static void run_hash(void *arg) {
    job *j = arg;
    dck_options o;
    dck_options_init(&o);
    o.threads = 4;
    o.progress = on_progress;
    o.progress_ctx = &j->rec;
    j->s = dck_hash_paths((const char *const *)j->paths, 1, &o, &j->m);
}

static void run_diff(void *arg) {
    job *j = arg;
    dck_diff_options o;
    dck_diff_options_init(&o);
    o.threads = 4;
    o.progress = on_progress;
    o.progress_ctx = &j->rec;
    j->s = dck_diff_paths(j->paths[0], j->paths[1], &o, &j->d);
}

START_TEST(hash_reports_progress) {
    char *paths[2];
    char *dir = make_files(paths, 1.0f);
    job j;
    memset(&j, 0, sizeof j);
    j.paths = paths;
    j.rec.caller = pthread_self();
    long printed = silenced(dir, run_hash, &j);
    ck_assert_msg(j.s == DCK_OK, "%s", dck_last_error());
    ck_assert_int_eq(printed, 0);
    ck_assert_int_ge(j.rec.calls, 1); /* a file that fits one window: one call */
    ck_assert_int_eq(j.rec.other_thread, 0);
    ck_assert_int_eq(j.rec.backwards, 0);
    ck_assert_uint_eq(j.rec.last_done, j.rec.total);
    ck_assert_uint_ge(j.rec.total, 2u * (12u << 20)); /* the tensors' bytes at least */
    dck_manifest_free(j.m);
    free(paths[0]);
    free(paths[1]);
    tu_tmpdir_free(dir);
}
END_TEST

START_TEST(diff_reports_progress) {
    char *paths[2];
    char *dir = make_files(paths, 1.0f);
    job j;
    memset(&j, 0, sizeof j);
    j.paths = paths;
    j.rec.caller = pthread_self();
    long printed = silenced(dir, run_diff, &j);
    ck_assert_msg(j.s == DCK_OK, "%s", dck_last_error());
    ck_assert_int_eq(printed, 0);
    ck_assert_int_ge(j.rec.calls, 2);
    ck_assert_int_eq(j.rec.other_thread, 0);
    ck_assert_int_eq(j.rec.backwards, 0);
    ck_assert_uint_eq(j.rec.last_done, j.rec.total);
    ck_assert_int_eq(j.d.equal, 0);
    dck_diff_result_release(&j.d);
    free(paths[0]);
    free(paths[1]);
    tu_tmpdir_free(dir);
}
END_TEST

int main(void) {
    Suite *s = suite_create("progress");
    TCase *tc = tcase_create("callback");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, hash_reports_progress);
    tcase_add_test(tc, diff_reports_progress);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

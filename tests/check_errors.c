/* One error path: a worker thread's message reaches the caller, the same
 * message for every thread count (dck_parallel_for_status reports the lowest
 * failing task), and every public function that fails says why, naming its
 * input. */
#include "testutil.h"
#include "core/core.h"
#include "gpu/gpu.h"
#include "hash/hash.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

static char *dir;

static void setup(void) { dir = tu_tmpdir(); }
static void teardown(void) {
    tu_tmpdir_free(dir);
    dir = NULL;
}

static const int thread_counts[] = {1, 2, 4};
#define NCOUNTS (sizeof thread_counts / sizeof thread_counts[0])

/* ------------------------------------------------------------------ the helper */

#define POOL_TASKS 200
#define POOL_FIRST_FAIL 52 /* the lowest i >= 50 with i % 7 == 3 */

typedef struct {
    atomic_int ran[POOL_TASKS];
} pool_ctx;

static void spin_us(long us) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do clock_gettime(CLOCK_MONOTONIC, &t);
    while ((t.tv_sec - t0.tv_sec) * 1000000L + (t.tv_nsec - t0.tv_nsec) / 1000 < us);
}

/* Tasks i >= 50 with i % 7 == 3 fail, each with its own message and status.
 * Low indexes are slow, so with threads the high ones fail first in time:
 * the helper must still report the lowest. */
static dck_status pool_task(void *vctx, size_t i, int worker) {
    (void)worker;
    pool_ctx *c = vctx;
    atomic_fetch_add(&c->ran[i], 1);
    if (i < 60) spin_us((long)(60 - i) * 20);
    if (i >= 50 && i % 7 == 3)
        return dck_set_error(i % 2 ? DCK_ERR_FORMAT : DCK_ERR_IO, "task %zu failed", i);
    return DCK_OK;
}

/* A message longer than the slot is cut visibly, at a character's edge. */
START_TEST(long_message_cut_visibly) {
    char name[3000];
    memset(name, 'a', sizeof name - 1);
    name[sizeof name - 1] = 0;
    name[975] = (char)0xc3, name[976] = (char)0xa9; /* U+00E9 across the cut (1024 - 48) */
    dck_set_error(DCK_ERR_FORMAT, "%s: bad", name);
    const char *m = dck_last_error();
    ck_assert_ptr_nonnull(strstr(m, "... (message cut: 3004 bytes in all)"));
    ck_assert_uint_lt(strlen(m), DCK_ERROR_MESSAGE_MAX);
    for (const unsigned char *p = (const unsigned char *)m; *p; p++) { /* valid UTF-8: the cut kept no half */
        if (*p < 0x80) continue;
        ck_assert_uint_eq(*p & 0xe0, 0xc0);
        ck_assert_uint_eq(p[1] & 0xc0, 0x80);
        p++;
    }
}
END_TEST

START_TEST(pool_reports_lowest_failing_task) {
    static const int threads[] = {1, 2, 3, 4, 8, 16};
    for (int round = 0; round < 5; round++)
        for (size_t k = 0; k < sizeof threads / sizeof threads[0]; k++) {
            pool_ctx *c = calloc(1, sizeof *c);
            dck_clear_error();
            dck_status s = dck_parallel_for_status(threads[k], POOL_TASKS, pool_task, c);
            ck_assert_int_eq(s, DCK_ERR_IO); /* 52 is even */
            ck_assert_str_eq(dck_last_error(), "task 52 failed");
            /* every task below the first failure ran, exactly once */
            for (size_t i = 0; i < POOL_TASKS; i++) {
                ck_assert_int_le(atomic_load(&c->ran[i]), 1);
                if (i <= POOL_FIRST_FAIL) ck_assert_int_eq(atomic_load(&c->ran[i]), 1);
            }
            free(c);
        }
}
END_TEST

/* Four tasks meet at a barrier, so each runs on its own thread; the tasks
 * on workers other than the caller (worker 0) fail. The reported message
 * can only have been set on a worker thread. */
typedef struct {
    pthread_barrier_t bar;
    atomic_size_t lowest_on_worker;
    atomic_int workers_seen;
} barrier_ctx;

static dck_status barrier_task(void *vctx, size_t i, int worker) {
    barrier_ctx *c = vctx;
    pthread_barrier_wait(&c->bar);
    atomic_fetch_or(&c->workers_seen, 1 << worker);
    if (worker == 0) return DCK_OK;
    size_t cur = atomic_load(&c->lowest_on_worker);
    while (i < cur && !atomic_compare_exchange_weak(&c->lowest_on_worker, &cur, i)) {
    }
    return dck_set_error(DCK_ERR_LAYOUT, "task %zu failed on a worker thread", i);
}

START_TEST(pool_message_crosses_threads) {
    for (int round = 0; round < 20; round++) {
        barrier_ctx c;
        pthread_barrier_init(&c.bar, NULL, 4);
        atomic_init(&c.lowest_on_worker, SIZE_MAX);
        atomic_init(&c.workers_seen, 0);
        dck_set_error(DCK_ERR_IO, "stale caller message");
        dck_status s = dck_parallel_for_status(4, 4, barrier_task, &c);
        pthread_barrier_destroy(&c.bar);
        ck_assert_int_eq(atomic_load(&c.workers_seen), 0xf);
        ck_assert_int_eq(s, DCK_ERR_LAYOUT);
        char want[64];
        snprintf(want, sizeof want, "task %zu failed on a worker thread",
                 atomic_load(&c.lowest_on_worker));
        ck_assert_str_eq(dck_last_error(), want);
    }
}
END_TEST

static dck_status ok_task(void *ctx, size_t i, int worker) {
    (void)ctx, (void)worker;
    if (i == 0) dck_set_error(DCK_ERR_IO, "text of a task that then succeeded");
    return DCK_OK;
}

/* Task 0 leaves text behind and succeeds; task 1 fails without a message. */
static dck_status bare_task(void *ctx, size_t i, int worker) {
    (void)ctx, (void)worker;
    if (i == 0) {
        dck_set_error(DCK_ERR_IO, "text of a task that then succeeded");
        return DCK_OK;
    }
    return DCK_ERR_TRUNCATED;
}

START_TEST(pool_success_and_bare_status) {
    for (size_t k = 0; k < NCOUNTS; k++) {
        /* a loop that succeeds leaves the caller's message as it was */
        dck_set_error(DCK_ERR_FORMAT, "the caller's own message");
        ck_assert_int_eq(dck_parallel_for_status(thread_counts[k], 50, ok_task, NULL), DCK_OK);
        ck_assert_str_eq(dck_last_error(), "the caller's own message");
        ck_assert_int_eq(dck_parallel_for_status(thread_counts[k], 0, ok_task, NULL), DCK_OK);
        ck_assert_str_eq(dck_last_error(), "the caller's own message");
        /* a bare status gets the status text, never an earlier task's */
        ck_assert_int_eq(dck_parallel_for_status(1, 2, bare_task, NULL), DCK_ERR_TRUNCATED);
        ck_assert_str_eq(dck_last_error(), dck_strerror(DCK_ERR_TRUNCATED));
    }
}
END_TEST

/* ------------------------------------------------------------------ engines */

#define BIG_ELEMS ((size_t)4 << 20) /* F32: 16 MiB */

static float *big_data(void) {
    float *v = malloc(BIG_ELEMS * sizeof *v);
    for (size_t i = 0; i < BIG_ELEMS; i++) v[i] = (float)(i % 1000) * 0.5f;
    return v;
}

/* One F32 tensor "w" of BIG_ELEMS elements; returns the path and the
 * offset of the data in the file. */
static char *write_big(const char *name, uint64_t *data_start) {
    float *v = big_data();
    dck_st_tensor t = {.name = "w", .dtype = DCK_F32, .ndim = 1, .shape = {BIG_ELEMS}, .data = v};
    char *p = tu_path(dir, name);
    ck_assert_int_eq(dck_safetensors_write(p, &t, 1, NULL, 0, 0), DCK_OK);
    free(v);
    FILE *f = fopen(p, "rb");
    uint8_t lb[8];
    ck_assert_uint_eq(fread(lb, 1, 8, f), 8);
    fclose(f);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | lb[i];
    *data_start = 8 + n;
    return p;
}

static dck_checkpoint *open1(const char *path) {
    dck_checkpoint *ck;
    const char *ps[] = {path};
    dck_status s = dck_checkpoint_open(ps, 1, NULL, &ck);
    ck_assert_msg(s == DCK_OK, "%s", dck_last_error());
    return ck;
}

static void opts(dck_options *o, int threads, int hash_files) {
    dck_options_init(o);
    o->threads = threads;
    o->hash_files = hash_files;
}

/* Every thread count gave the same failure, whose message names must_name. */
static void same_for_every_count(dck_status st[NCOUNTS], char msg[NCOUNTS][DCK_ERROR_MESSAGE_MAX],
                                 dck_status want, const char *must_name) {
    for (size_t k = 0; k < NCOUNTS; k++) {
        ck_assert_int_eq(st[k], want);
        ck_assert_msg(strstr(msg[k], must_name), "message \"%s\" does not name %s", msg[k],
                      must_name);
        ck_assert_str_eq(msg[k], msg[0]);
    }
}

/* The CPU engine (dck_checkpoint_hash): a tensor hasher refuses bytes inside
 * a window task. The checkpoint's model is made to disagree with its storage
 * (the tensor's shape cut to a quarter after the pieces were validated), the
 * only way to make a hasher refuse bytes there: tasks 4 to 15 of the 16
 * one-MiB tasks fail, each with its own offsets in the message. */
START_TEST(hash_cpu_worker_message) {
    uint64_t ds;
    char *p = write_big("w.safetensors", &ds);
    dck_status st[NCOUNTS];
    char msg[NCOUNTS][DCK_ERROR_MESSAGE_MAX];
    for (size_t k = 0; k < NCOUNTS; k++) {
        dck_checkpoint *ck = open1(p);
        ck->tensors[0].info.shape[0] = BIG_ELEMS / 4;
        dck_options o;
        opts(&o, thread_counts[k], 1);
        dck_manifest *m = NULL;
        dck_clear_error();
        st[k] = dck_checkpoint_hash(ck, &o, &m);
        snprintf(msg[k], sizeof msg[k], "%s", dck_last_error());
        ck_assert_ptr_null(m);
        dck_checkpoint_free(ck);
    }
    same_for_every_count(st, msg, DCK_ERR_LAYOUT, p);
    char want[64];
    /* task 4: the first MiB past the 4 MiB the hasher takes */
    snprintf(want, sizeof want, "tensor w: fragment [%zu, +%zu)", (size_t)4 << 20,
             (size_t)1 << 20);
    ck_assert_msg(strstr(msg[0], want), "\"%s\" is not the first failing task's", msg[0]);
    free(p);
}
END_TEST

/* The lane engines (dck_cpu_lanes_run through dck_checkpoint_hash_plan, and
 * the staged pipeline of --device cuda through its CPU twin) read with
 * dck_checkpoint_read in worker threads: the file shrinks after it was
 * opened, so every read task past the new end fails, each naming its own
 * end offset. */
START_TEST(lanes_worker_message) {
    uint64_t ds;
    char *p = write_big("w.safetensors", &ds);
    dck_status st[NCOUNTS], st2[NCOUNTS];
    char msg[NCOUNTS][DCK_ERROR_MESSAGE_MAX], msg2[NCOUNTS][DCK_ERROR_MESSAGE_MAX];
    for (size_t k = 0; k < NCOUNTS; k++) {
        ck_assert_int_eq(truncate(p, (off_t)(ds + BIG_ELEMS * 4)), 0); /* whole again */
        dck_checkpoint *ck = open1(p);
        ck_assert_int_eq(truncate(p, (off_t)(ds + (5u << 20))), 0);
        dck_options o;
        opts(&o, thread_counts[k], 0);
        dck_hash_plan plan = {DCK_DEVICE_CPU, 0, 0};
        dck_manifest *m = NULL;
        dck_clear_error();
        st[k] = dck_checkpoint_hash_plan(ck, &o, &plan, &m);
        snprintf(msg[k], sizeof msg[k], "%s", dck_last_error());
        ck_assert_ptr_null(m);
        dck_lane_range r = {0, 0, BIG_ELEMS * 4};
        uint64_t lanes[2] = {0, 0};
        dck_clear_error();
        st2[k] = dck_twin_staged_lanes(ck, &r, 1, thread_counts[k], (size_t)8 << 20,
                                       (uint64_t)1 << 20, lanes);
        snprintf(msg2[k], sizeof msg2[k], "%s", dck_last_error());
        dck_checkpoint_free(ck);
    }
    same_for_every_count(st, msg, DCK_ERR_TRUNCATED, p);
    same_for_every_count(st2, msg2, DCK_ERR_TRUNCATED, p);
    char want[64];
    /* read tasks of 4 MiB: task 1 ends at 8 MiB; twin tasks of 1 MiB: task 5 at 6 MiB */
    snprintf(want, sizeof want, "needs bytes up to %llu,", (unsigned long long)(ds + (8u << 20)));
    ck_assert_msg(strstr(msg[0], want), "\"%s\" is not the first failing task's", msg[0]);
    snprintf(want, sizeof want, "needs bytes up to %llu,", (unsigned long long)(ds + (6u << 20)));
    ck_assert_msg(strstr(msg2[0], want), "\"%s\" is not the first failing task's", msg2[0]);
    free(p);
}
END_TEST

/* The diff engine: B shrinks after it was opened; the 1 MiB chunks past its
 * new end fail. */
START_TEST(diff_worker_message) {
    uint64_t ds;
    char *pa = write_big("a.safetensors", &ds);
    char *pb = write_big("b.safetensors", &ds);
    dck_status st[NCOUNTS];
    char msg[NCOUNTS][DCK_ERROR_MESSAGE_MAX];
    for (size_t k = 0; k < NCOUNTS; k++) {
        ck_assert_int_eq(truncate(pb, (off_t)(ds + BIG_ELEMS * 4)), 0);
        dck_checkpoint *a = open1(pa), *b = open1(pb);
        ck_assert_int_eq(truncate(pb, (off_t)(ds + (7u << 19))), 0); /* 3.5 MiB */
        dck_diff_options o;
        dck_diff_options_init(&o);
        o.threads = thread_counts[k];
        dck_diff_result r;
        dck_clear_error();
        st[k] = dck_diff_checkpoints(a, b, &o, &r);
        snprintf(msg[k], sizeof msg[k], "%s", dck_last_error());
        if (st[k] == DCK_OK) dck_diff_result_release(&r);
        dck_checkpoint_free(a);
        dck_checkpoint_free(b);
    }
    same_for_every_count(st, msg, DCK_ERR_TRUNCATED, pb);
    char want[64];
    snprintf(want, sizeof want, "needs bytes up to %llu,", (unsigned long long)(ds + (4u << 20)));
    ck_assert_msg(strstr(msg[0], want), "\"%s\" is not the first failing chunk's", msg[0]);
    free(pa);
    free(pb);
}
END_TEST

/* Whole-file hashes of hash_plan (one task per file) reopen the files by
 * name: three of four were removed after the checkpoint was opened (tensor
 * reads go through the open descriptors and succeed). */
START_TEST(file_hash_worker_message) {
    char *sub = tu_path(dir, "ck");
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    char *paths[4];
    for (int i = 0; i < 4; i++) {
        char name[32];
        snprintf(name, sizeof name, "part%d.safetensors", i);
        paths[i] = tu_path(sub, name);
        float v[64];
        for (int j = 0; j < 64; j++) v[j] = (float)(i * 64 + j);
        char tn[16];
        snprintf(tn, sizeof tn, "t%d", i);
        dck_st_tensor t = {.name = tn, .dtype = DCK_F32, .ndim = 1, .shape = {64}, .data = v};
        ck_assert_int_eq(dck_safetensors_write(paths[i], &t, 1, NULL, 0, 0), DCK_OK);
    }
    dck_status st[NCOUNTS];
    char msg[NCOUNTS][DCK_ERROR_MESSAGE_MAX];
    for (size_t k = 0; k < NCOUNTS; k++) {
        dck_checkpoint *ck = open1(sub);
        for (int i = 1; i < 4; i++) {
            char moved[4200];
            snprintf(moved, sizeof moved, "%s.away", paths[i]);
            ck_assert_int_eq(rename(paths[i], moved), 0);
        }
        dck_options o;
        opts(&o, thread_counts[k], 1);
        dck_hash_plan plan = {DCK_DEVICE_CPU, 0, 0};
        dck_manifest *m = NULL;
        dck_clear_error();
        st[k] = dck_checkpoint_hash_plan(ck, &o, &plan, &m);
        snprintf(msg[k], sizeof msg[k], "%s", dck_last_error());
        ck_assert_ptr_null(m);
        dck_checkpoint_free(ck);
        for (int i = 1; i < 4; i++) {
            char moved[4200];
            snprintf(moved, sizeof moved, "%s.away", paths[i]);
            ck_assert_int_eq(rename(moved, paths[i]), 0);
        }
    }
    same_for_every_count(st, msg, DCK_ERR_IO, paths[1]); /* the first missing file */
    for (int i = 0; i < 4; i++) free(paths[i]);
    free(sub);
}
END_TEST

/* ------------------------------------------------------------------ bad input, table-driven */

static char *bad_path(const char *name) { return tu_path(dir, name); }

static dck_status c_dtype_unknown(void) {
    dck_dtype t;
    return dck_dtype_from_name("F128", &t);
}
static dck_status c_dtype_null(void) {
    dck_dtype t;
    return dck_dtype_from_name(NULL, &t);
}
static dck_status c_group_unknown(void) {
    dck_group g;
    return dck_group_from_name("bogus", &g);
}
static dck_status c_group_null(void) {
    dck_group g;
    return dck_group_from_name(NULL, &g);
}
static dck_status c_shape_overflow(void) {
    uint64_t shape[2] = {1ull << 40, 1ull << 40}, n;
    return dck_shape_bytes(DCK_F32, shape, 2, &n);
}
static dck_status c_shape_rank(void) {
    uint64_t shape[DCK_MAX_DIMS + 1] = {0}, n;
    return dck_shape_bytes(DCK_F32, shape, DCK_MAX_DIMS + 1, &n);
}
static dck_status c_shape_null(void) {
    uint64_t n;
    return dck_shape_bytes(DCK_F32, NULL, 2, &n);
}
static dck_status c_hex_short(void) {
    dck_digest d;
    return dck_digest_from_hex("0123", &d);
}
static dck_status c_hex_upper(void) {
    dck_digest d;
    return dck_digest_from_hex("0123456789ABCDEFfedcba9876543210", &d);
}
static dck_status c_hex_bad_char(void) {
    dck_digest d;
    return dck_digest_from_hex("0123456789abcdeffedcba987654321g", &d);
}
static dck_status c_hex_null(void) {
    dck_digest d;
    return dck_digest_from_hex(NULL, &d);
}
static dck_status c_digest_len(void) {
    uint64_t shape[1] = {3};
    float v[3] = {0};
    dck_digest d;
    return dck_digest_buffer(DCK_F32, shape, 1, v, 8, 1, &d);
}
static dck_status c_digest_dtype(void) {
    uint64_t shape[1] = {3};
    float v[3] = {0};
    dck_digest d;
    return dck_digest_buffer((dck_dtype)99, shape, 1, v, 12, 1, &d);
}
static dck_status c_digest_shape(void) {
    uint64_t shape[2] = {1ull << 40, 1ull << 40};
    float v[3] = {0};
    dck_digest d;
    return dck_digest_buffer(DCK_F32, shape, 2, v, 12, 1, &d);
}
static dck_status c_fragment_outside(void) {
    uint8_t b[20] = {0};
    dck_fragment_partial p;
    return dck_fragment_partial_compute(100, 90, b, 20, &p);
}
static dck_status c_fragment_null(void) {
    dck_fragment_partial p;
    return dck_fragment_partial_compute(100, 0, NULL, 20, &p);
}
static dck_status c_hasher_dtype(void) {
    uint64_t shape[1] = {4};
    dck_tensor_hasher *h;
    return dck_tensor_hasher_create((dck_dtype)99, shape, 1, &h);
}
static dck_status c_hasher_rank(void) {
    uint64_t shape[DCK_MAX_DIMS + 1] = {0};
    dck_tensor_hasher *h;
    return dck_tensor_hasher_create(DCK_F32, shape, DCK_MAX_DIMS + 1, &h);
}
static dck_status c_hasher_shape(void) {
    uint64_t shape[2] = {1ull << 40, 1ull << 40};
    dck_tensor_hasher *h;
    return dck_tensor_hasher_create(DCK_F32, shape, 2, &h);
}
static dck_tensor_hasher *hasher100(void) {
    uint64_t shape[1] = {100};
    dck_tensor_hasher *h;
    ck_assert_int_eq(dck_tensor_hasher_create(DCK_U8, shape, 1, &h), DCK_OK);
    return h;
}
static dck_status c_hasher_update_outside(void) {
    uint8_t b[10] = {0};
    dck_tensor_hasher *h = hasher100();
    dck_status s = dck_tensor_hasher_update(h, 150, b, 10);
    dck_tensor_hasher_free(h);
    return s;
}
static dck_status c_hasher_add_outside(void) {
    dck_fragment_partial p;
    memset(&p, 0, sizeof p);
    p.offset = 200;
    p.length = 10;
    dck_tensor_hasher *h = hasher100();
    dck_status s = dck_tensor_hasher_add(h, &p);
    dck_tensor_hasher_free(h);
    return s;
}
static dck_status c_hasher_gap(void) {
    uint8_t b[50] = {0};
    dck_tensor_hasher *h = hasher100();
    ck_assert_int_eq(dck_tensor_hasher_update(h, 0, b, 50), DCK_OK);
    dck_digest d;
    dck_status s = dck_tensor_hasher_final(h, &d);
    dck_tensor_hasher_free(h);
    return s;
}
static dck_status c_hasher_overlap(void) {
    uint8_t b[60] = {0};
    dck_tensor_hasher *h = hasher100();
    ck_assert_int_eq(dck_tensor_hasher_update(h, 0, b, 60), DCK_OK);
    ck_assert_int_eq(dck_tensor_hasher_update(h, 40, b, 60), DCK_OK);
    dck_digest d;
    dck_status s = dck_tensor_hasher_final(h, &d);
    dck_tensor_hasher_free(h);
    return s;
}
static dck_status c_manifest_tensor(void) {
    dck_manifest *m;
    ck_assert_int_eq(dck_manifest_create(&m), DCK_OK);
    dck_manifest_tensor t;
    memset(&t, 0, sizeof t);
    t.name = "layer.weight";
    t.ndim = DCK_MAX_DIMS + 1;
    dck_status s = dck_manifest_add_tensor(m, &t);
    dck_manifest_free(m);
    return s;
}
static dck_status c_manifest_tensor_noname(void) {
    dck_manifest *m;
    ck_assert_int_eq(dck_manifest_create(&m), DCK_OK);
    dck_manifest_tensor t;
    memset(&t, 0, sizeof t);
    dck_status s = dck_manifest_add_tensor(m, &t);
    dck_manifest_free(m);
    return s;
}
static dck_status c_manifest_file_nopath(void) {
    dck_manifest *m;
    ck_assert_int_eq(dck_manifest_create(&m), DCK_OK);
    dck_manifest_file f;
    memset(&f, 0, sizeof f);
    dck_status s = dck_manifest_add_file(m, &f);
    dck_manifest_free(m);
    return s;
}
static dck_status c_manifest_value_null(void) {
    dck_manifest *m;
    ck_assert_int_eq(dck_manifest_create(&m), DCK_OK);
    dck_status s = dck_manifest_add_value(m, "iteration", NULL);
    dck_manifest_free(m);
    return s;
}
static dck_status c_manifest_meta_null(void) {
    dck_manifest *m;
    ck_assert_int_eq(dck_manifest_create(&m), DCK_OK);
    dck_status s = dck_manifest_set_meta(m, "source", NULL);
    dck_manifest_free(m);
    return s;
}
static dck_status c_manifest_duplicate(void) {
    dck_manifest *m;
    ck_assert_int_eq(dck_manifest_create(&m), DCK_OK);
    dck_manifest_tensor t;
    memset(&t, 0, sizeof t);
    t.name = "layer.weight";
    ck_assert_int_eq(dck_manifest_add_tensor(m, &t), DCK_OK);
    ck_assert_int_eq(dck_manifest_add_tensor(m, &t), DCK_OK);
    dck_status s = dck_manifest_finalize(m);
    dck_manifest_free(m);
    return s;
}
static dck_status c_manifest_load_missing(void) {
    char *p = bad_path("missing.yaml");
    dck_manifest *m;
    dck_status s = dck_manifest_load(p, &m);
    free(p);
    return s;
}
static dck_status c_manifest_parse(void) {
    const char *text = "{\"not\": \"a manifest\"";
    dck_manifest *m;
    return dck_manifest_parse(text, strlen(text), "golden.json", &m);
}
static dck_status c_manifest_save(void) {
    char *p = bad_path("no-such-dir/out.yaml");
    dck_manifest *m;
    ck_assert_int_eq(dck_manifest_create(&m), DCK_OK);
    ck_assert_int_eq(dck_manifest_finalize(m), DCK_OK);
    dck_status s = dck_manifest_save(m, DCK_FORMAT_YAML, p);
    dck_manifest_free(m);
    free(p);
    return s;
}
static dck_status c_open_none(void) {
    dck_checkpoint *ck;
    return dck_checkpoint_open(NULL, 0, NULL, &ck);
}
static dck_status c_open_missing(void) {
    char *p = bad_path("missing.safetensors");
    const char *ps[] = {p};
    dck_checkpoint *ck;
    dck_status s = dck_checkpoint_open(ps, 1, NULL, &ck);
    free(p);
    return s;
}
static dck_status c_open_junk(void) {
    char *p = bad_path("junk.bin");
    tu_write(p, "\x01\x02\x03 not a checkpoint", 20);
    const char *ps[] = {p};
    dck_checkpoint *ck;
    dck_status s = dck_checkpoint_open(ps, 1, NULL, &ck);
    free(p);
    return s;
}
static dck_status c_hash_missing(void) {
    char *p = bad_path("missing.safetensors");
    const char *ps[] = {p};
    dck_manifest *m;
    dck_status s = dck_hash_paths(ps, 1, NULL, &m);
    free(p);
    return s;
}
static dck_checkpoint *small_ck(void) {
    float v[8] = {0};
    dck_st_tensor t = {.name = "small.weight", .dtype = DCK_F32, .ndim = 1, .shape = {8}, .data = v};
    char *p = bad_path("small.safetensors");
    ck_assert_int_eq(dck_safetensors_write(p, &t, 1, NULL, 0, 0), DCK_OK);
    dck_checkpoint *ck = open1(p);
    free(p);
    return ck;
}
static dck_status c_read_index(void) {
    dck_checkpoint *ck = small_ck();
    float b[1];
    dck_status s = dck_checkpoint_read(ck, 99, 0, b, 4);
    dck_checkpoint_free(ck);
    return s;
}
static dck_status c_read_range(void) {
    dck_checkpoint *ck = small_ck();
    float b[4];
    dck_status s = dck_checkpoint_read(ck, 0, 24, b, 16);
    dck_checkpoint_free(ck);
    return s;
}
static dck_status c_st_write_dtype(void) {
    uint8_t v[4] = {0};
    dck_st_tensor t = {.name = "odd.weight", .dtype = (dck_dtype)99, .ndim = 1, .shape = {4}, .data = v};
    char *p = bad_path("odd.safetensors");
    dck_status s = dck_safetensors_write(p, &t, 1, NULL, 0, 0);
    free(p);
    return s;
}
static dck_status c_st_write_nodata(void) {
    dck_st_tensor t = {.name = "empty.weight", .dtype = DCK_F32, .ndim = 1, .shape = {4}};
    char *p = bad_path("nodata.safetensors");
    dck_status s = dck_safetensors_write(p, &t, 1, NULL, 0, 0);
    free(p);
    return s;
}
static dck_status c_write_atomic(void) {
    char *p = bad_path("no-such-dir/blob.bin");
    dck_status s = dck_write_file_atomic(p, "x", 1);
    free(p);
    return s;
}
static dck_status c_diff_null(void) {
    dck_diff_result r;
    return dck_diff_checkpoints(NULL, NULL, NULL, &r);
}
static dck_status c_diff_missing(void) {
    char *a = bad_path("missing-a.safetensors");
    dck_diff_result r;
    dck_status s = dck_diff_paths(a, a, NULL, &r);
    free(a);
    return s;
}
static dck_status c_device_name(void) {
    dck_device d;
    return dck_device_from_name("gpu", &d);
}
static dck_status c_piece_extent(void) {
    dck_tensor_entry t;
    memset(&t, 0, sizeof t);
    t.info.name = "view.weight";
    t.info.dtype = DCK_F32;
    t.info.ndim = 2;
    t.info.shape[0] = t.info.shape[1] = 3;
    int64_t strides[2] = {1, -3};
    dck_piece p;
    memset(&p, 0, sizeof p);
    p.shape[0] = p.shape[1] = 3;
    p.strides = strides;
    uint64_t end;
    return dck_piece_extent(&t, &p, &end);
}
static dck_status c_piece_extent_overflow(void) {
    dck_tensor_entry t;
    memset(&t, 0, sizeof t);
    t.info.name = "huge.weight";
    t.info.dtype = DCK_F32;
    t.info.ndim = 1;
    t.info.shape[0] = 4;
    dck_piece p;
    memset(&p, 0, sizeof p);
    p.shape[0] = 4;
    p.file_offset = UINT64_MAX - 8;
    uint64_t end;
    return dck_piece_extent(&t, &p, &end);
}

typedef struct {
    const char *what;
    dck_status (*call)(void);
    dck_status want;
    const char *mention; /* a part of the input the message must name */
} bad_case;

static const bad_case bad_cases[] = {
    {"dck_dtype_from_name unknown", c_dtype_unknown, DCK_ERR_FORMAT, "F128"},
    {"dck_dtype_from_name NULL", c_dtype_null, DCK_ERR_FORMAT, "NULL"},
    {"dck_group_from_name unknown", c_group_unknown, DCK_ERR_FORMAT, "bogus"},
    {"dck_group_from_name NULL", c_group_null, DCK_ERR_FORMAT, "NULL"},
    {"dck_shape_bytes overflow", c_shape_overflow, DCK_ERR_LIMIT, "[1099511627776, 1099511627776] of F32"},
    {"dck_shape_bytes rank", c_shape_rank, DCK_ERR_LIMIT, "17 dimensions"},
    {"dck_shape_bytes NULL", c_shape_null, DCK_ERR_INVALID, "NULL"},
    {"dck_digest_from_hex short", c_hex_short, DCK_ERR_FORMAT, "\"0123\""},
    {"dck_digest_from_hex uppercase", c_hex_upper, DCK_ERR_FORMAT, "0123456789ABCDEF"},
    {"dck_digest_from_hex non-hex", c_hex_bad_char, DCK_ERR_FORMAT, "character 32"},
    {"dck_digest_from_hex NULL", c_hex_null, DCK_ERR_FORMAT, "NULL"},
    {"dck_digest_buffer length", c_digest_len, DCK_ERR_INVALID, "8 bytes given"},
    {"dck_digest_buffer dtype", c_digest_dtype, DCK_ERR_INVALID, "99"},
    {"dck_digest_buffer shape", c_digest_shape, DCK_ERR_LIMIT, "1099511627776"},
    {"dck_fragment_partial_compute outside", c_fragment_outside, DCK_ERR_LAYOUT, "[90, +20)"},
    {"dck_fragment_partial_compute NULL", c_fragment_null, DCK_ERR_INVALID, "NULL"},
    {"dck_tensor_hasher_create dtype", c_hasher_dtype, DCK_ERR_INVALID, "99"},
    {"dck_tensor_hasher_create rank", c_hasher_rank, DCK_ERR_INVALID, "17 dimensions"},
    {"dck_tensor_hasher_create shape", c_hasher_shape, DCK_ERR_LIMIT, "1099511627776"},
    {"dck_tensor_hasher_update outside", c_hasher_update_outside, DCK_ERR_LAYOUT, "[150, +10)"},
    {"dck_tensor_hasher_add outside", c_hasher_add_outside, DCK_ERR_LAYOUT, "[200, +10)"},
    {"dck_tensor_hasher_final gap", c_hasher_gap, DCK_ERR_LAYOUT, "[50, 100) are missing"},
    {"dck_tensor_hasher_final overlap", c_hasher_overlap, DCK_ERR_LAYOUT, "covered twice"},
    {"dck_manifest_add_tensor rank", c_manifest_tensor, DCK_ERR_INVALID, "layer.weight"},
    {"dck_manifest_add_tensor no name", c_manifest_tensor_noname, DCK_ERR_INVALID, "without a name"},
    {"dck_manifest_add_file no path", c_manifest_file_nopath, DCK_ERR_INVALID, "without a path"},
    {"dck_manifest_add_value NULL", c_manifest_value_null, DCK_ERR_INVALID, "iteration"},
    {"dck_manifest_set_meta NULL", c_manifest_meta_null, DCK_ERR_INVALID, "source"},
    {"dck_manifest_finalize duplicate", c_manifest_duplicate, DCK_ERR_FORMAT, "layer.weight"},
    {"dck_manifest_load missing", c_manifest_load_missing, DCK_ERR_IO, "missing.yaml"},
    {"dck_manifest_parse bad", c_manifest_parse, DCK_ERR_FORMAT, "golden.json"},
    {"dck_manifest_save no dir", c_manifest_save, DCK_ERR_IO, "no-such-dir/out.yaml"},
    {"dck_checkpoint_open none", c_open_none, DCK_ERR_INVALID, "no input paths"},
    {"dck_checkpoint_open missing", c_open_missing, DCK_ERR_IO, "missing.safetensors"},
    {"dck_checkpoint_open junk", c_open_junk, DCK_ERR_UNSUPPORTED, "junk.bin"},
    {"dck_hash_paths missing", c_hash_missing, DCK_ERR_IO, "missing.safetensors"},
    {"dck_checkpoint_read index", c_read_index, DCK_ERR_INVALID, "99"},
    {"dck_checkpoint_read range", c_read_range, DCK_ERR_INVALID, "small.weight"},
    {"dck_safetensors_write dtype", c_st_write_dtype, DCK_ERR_INVALID, "odd.weight"},
    {"dck_safetensors_write no data", c_st_write_nodata, DCK_ERR_INVALID, "empty.weight"},
    {"dck_write_file_atomic no dir", c_write_atomic, DCK_ERR_IO, "no-such-dir/blob.bin"},
    {"dck_diff_checkpoints NULL", c_diff_null, DCK_ERR_INVALID, "NULL"},
    {"dck_diff_paths missing", c_diff_missing, DCK_ERR_IO, "missing-a.safetensors"},
    {"dck_device_from_name unknown", c_device_name, DCK_ERR_INVALID, "gpu"},
    {"dck_piece_extent negative stride", c_piece_extent, DCK_ERR_UNSUPPORTED, "view.weight"},
    {"dck_piece_extent overflow", c_piece_extent_overflow, DCK_ERR_LIMIT, "huge.weight"},
};

START_TEST(bad_input_says_why) {
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        const bad_case *c = &bad_cases[i];
        dck_clear_error();
        dck_status s = c->call();
        const char *m = dck_last_error();
        ck_assert_msg(s == c->want, "%s: status %d (%s), want %d", c->what, (int)s, m,
                      (int)c->want);
        ck_assert_msg(*m, "%s: no message", c->what);
        ck_assert_msg(strstr(m, c->mention), "%s: message \"%s\" does not name \"%s\"", c->what,
                      m, c->mention);
    }
}
END_TEST

/* The GPU calls fail differently with and without a device (no device, or
 * host memory given as device memory); either way they say why. */
START_TEST(gpu_bad_input_says_why) {
    uint64_t shape[1] = {4};
    float host[4] = {0};
    dck_digest d;
    dck_clear_error();
    dck_status s = dck_gpu_digest(DCK_F32, shape, 1, host, 16, NULL, &d);
    ck_assert_int_ne(s, DCK_OK);
    ck_assert_msg(*dck_last_error(), "dck_gpu_digest: no message");
    dck_clear_error();
    s = dck_gpu_digest((dck_dtype)99, shape, 1, host, 16, NULL, &d);
    ck_assert_int_ne(s, DCK_OK);
    ck_assert_msg(*dck_last_error(), "dck_gpu_digest dtype: no message");
    dck_lanes l;
    dck_clear_error();
    s = dck_gpu_segments_sum(host, 16, 0, NULL, &l);
    ck_assert_int_ne(s, DCK_OK);
    ck_assert_msg(*dck_last_error(), "dck_gpu_segments_sum: no message");
}
END_TEST

int main(void) {
    Suite *s = suite_create("errors");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, long_message_cut_visibly);
    tcase_add_test(tc, pool_reports_lowest_failing_task);
    tcase_add_test(tc, pool_message_crosses_threads);
    tcase_add_test(tc, pool_success_and_bare_status);
    tcase_add_test(tc, hash_cpu_worker_message);
    tcase_add_test(tc, lanes_worker_message);
    tcase_add_test(tc, diff_worker_message);
    tcase_add_test(tc, file_hash_worker_message);
    tcase_add_test(tc, bad_input_says_why);
    tcase_add_test(tc, gpu_bad_input_says_why);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

/* A minimal fork-join parallel-for on pthreads. The caller participates, so
 * threads == 1 runs inline with no thread created. Items are handed out by
 * an atomic counter: which thread runs which item varies from run to run,
 * which is why every reduction built on it must be order-independent
 * (integer lane sums) or write to per-item slots. The same goes for
 * failures: dck_parallel_for_status reports the lowest failing index, with
 * the message its worker set, not whichever failed first in time. */
#include "common/common.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    dck_task_fn fn;
    void *ctx;
    size_t n;
    atomic_size_t next;
} pool_job;

typedef struct {
    pool_job *job;
    int worker;
} pool_arg;

static void run_items(pool_job *job, int worker) {
    for (;;) {
        size_t i = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed);
        if (i >= job->n) return;
        job->fn(job->ctx, i, worker);
    }
}

static void *pool_thread(void *p) {
    pool_arg *a = p;
    run_items(a->job, a->worker);
    return NULL;
}

void dck_parallel_for(int threads, size_t n, dck_task_fn fn, void *ctx) {
    if (threads < 1) threads = 1;
    if ((size_t)threads > n) threads = (int)n;
    pool_job job = {fn, ctx, n, 0};
    if (threads <= 1) {
        run_items(&job, 0);
        return;
    }
    pthread_t tids[256];
    pool_arg args[256];
    if (threads > 256) threads = 256;
    int started = 0;
    for (int t = 1; t < threads; t++) {
        args[t].job = &job;
        args[t].worker = t;
        if (pthread_create(&tids[t], NULL, pool_thread, &args[t]) != 0) break;
        started = t;
    }
    run_items(&job, 0);
    for (int t = 1; t <= started; t++) pthread_join(tids[t], NULL);
}

/* ------------------------------------------------------------------ tasks that fail */

typedef struct {
    dck_status_task_fn fn;
    void *ctx;
    pthread_mutex_t mu;
    atomic_size_t failed_at; /* lowest failed index; SIZE_MAX while none */
    dck_status status;       /* its status and message (under mu) */
    char msg[DCK_ERROR_MESSAGE_MAX];
} status_job;

static void status_task(void *ctx, size_t i, int worker) {
    status_job *j = ctx;
    /* A lower index failed already: this one cannot become the first. */
    if (i > atomic_load_explicit(&j->failed_at, memory_order_relaxed)) return;
    dck_clear_error(); /* no stale text for a task that fails without a message */
    dck_status s = j->fn(j->ctx, i, worker);
    if (s == DCK_OK) return;
    pthread_mutex_lock(&j->mu);
    if (i < atomic_load_explicit(&j->failed_at, memory_order_relaxed)) {
        atomic_store_explicit(&j->failed_at, i, memory_order_relaxed);
        j->status = s;
        /* the message of this thread, which is the worker that failed */
        snprintf(j->msg, sizeof j->msg, "%s", dck_last_error());
    }
    pthread_mutex_unlock(&j->mu);
}

dck_status dck_parallel_for_status(int threads, size_t n, dck_status_task_fn fn, void *ctx) {
    status_job j;
    j.fn = fn;
    j.ctx = ctx;
    pthread_mutex_init(&j.mu, NULL);
    atomic_init(&j.failed_at, SIZE_MAX);
    j.status = DCK_OK;
    j.msg[0] = 0;
    /* The caller's thread runs tasks too (and clears its message for each):
     * keep what it held, for a loop that succeeds. */
    char caller_msg[DCK_ERROR_MESSAGE_MAX];
    snprintf(caller_msg, sizeof caller_msg, "%s", dck_last_error());
    dck_parallel_for(threads, n, status_task, &j);
    pthread_mutex_destroy(&j.mu);
    if (j.status == DCK_OK) {
        dck_set_error(DCK_OK, "%s", caller_msg);
        return DCK_OK;
    }
    return dck_set_error(j.status, "%s", j.msg[0] ? j.msg : dck_strerror(j.status));
}

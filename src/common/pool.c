/* A minimal fork-join parallel-for on pthreads. The caller participates, so
 * threads == 1 runs inline with no thread created. Items are handed out by
 * an atomic counter: which thread runs which item varies from run to run,
 * which is why every reduction built on it must be order-independent
 * (integer lane sums) or write to per-item slots. */
#include "common/common.h"

#include <pthread.h>
#include <stdatomic.h>

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

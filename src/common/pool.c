/* A parallel-for on one persistent pool of pthreads. The caller participates,
 * so threads == 1 runs inline with no thread involved. Items are handed out
 * by an atomic counter: which thread runs which item varies from run to run,
 * which is why every reduction built on it must be order-independent
 * (integer lane sums) or write to per-item slots. The same goes for
 * failures: dck_parallel_for_status reports the lowest failing index, with
 * the message its worker set, not whichever failed first in time.
 *
 * Why a pool: a run hashes thousands of files and windows, each one loop;
 * creating and joining threads for each cost more than hashing a small file.
 * Workers are created on demand and then wait, idle, for the next loop. A
 * loop of `threads` gets threads - 1 workers of its own (idle ones, or new
 * ones when none is idle), so concurrent and nested loops never wait for
 * each other, and a loop's tasks really run on `threads` threads at once
 * (tasks may meet at a barrier). */
#include "common/common.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    dck_task_fn fn;
    void *ctx;
    size_t n;
    atomic_size_t next;
    int helpers;          /* workers still on this loop (under pool_mu) */
    pthread_cond_t done;  /* signalled when helpers drops to 0 */
} pool_job;

typedef struct pool_worker {
    pthread_cond_t wake;
    pool_job *job; /* the loop it helps; NULL while idle (under pool_mu) */
    int index;     /* its worker number in that loop */
    struct pool_worker *next_idle;
} pool_worker;

/* Idle workers beyond this many exit instead of waiting. */
#define POOL_MAX_IDLE 256

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static pool_worker *pool_idle;
static int pool_nidle;
/* Workers of the parent after a fork: gone in the child, kept reachable. */
static pool_worker *pool_orphans;
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;

static void run_items(pool_job *job, int worker) {
    for (;;) {
        size_t i = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed);
        if (i >= job->n) return;
        job->fn(job->ctx, i, worker);
    }
}

static void *pool_thread(void *p) {
    pool_worker *w = p;
    pthread_mutex_lock(&pool_mu);
    for (;;) {
        while (!w->job) pthread_cond_wait(&w->wake, &pool_mu);
        pool_job *job = w->job;
        int index = w->index;
        pthread_mutex_unlock(&pool_mu);
        run_items(job, index);
        pthread_mutex_lock(&pool_mu);
        w->job = NULL;
        int stay = pool_nidle < POOL_MAX_IDLE;
        if (stay) {
            w->next_idle = pool_idle;
            pool_idle = w;
            pool_nidle++;
        }
        /* after this the job (on the caller's stack) may be gone */
        if (--job->helpers == 0) pthread_cond_signal(&job->done);
        if (!stay) break;
    }
    pthread_mutex_unlock(&pool_mu);
    pthread_cond_destroy(&w->wake);
    free(w);
    return NULL;
}

/* fork(): the child has none of the parent's workers. Lock the pool across
 * the fork so its lists are consistent, then start the child's afresh. */
static void pool_prepare(void) { pthread_mutex_lock(&pool_mu); }
static void pool_parent(void) { pthread_mutex_unlock(&pool_mu); }
static void pool_child(void) {
    while (pool_idle) {
        pool_worker *w = pool_idle;
        pool_idle = w->next_idle;
        w->next_idle = pool_orphans;
        pool_orphans = w;
    }
    pool_nidle = 0;
    pthread_mutex_unlock(&pool_mu);
}
static void pool_init(void) { pthread_atfork(pool_prepare, pool_parent, pool_child); }

/* Hands the loop to an idle worker, or a new one; 0 when neither can be had. */
static int pool_enlist(pool_job *job, int index) {
    pool_worker *w = pool_idle;
    if (w) {
        pool_idle = w->next_idle;
        pool_nidle--;
        w->job = job;
        w->index = index;
        pthread_cond_signal(&w->wake);
        return 1;
    }
    w = calloc(1, sizeof *w);
    if (!w) return 0;
    pthread_cond_init(&w->wake, NULL);
    w->job = job;
    w->index = index;
    pthread_attr_t attr;
    pthread_t tid;
    int ok = pthread_attr_init(&attr) == 0;
    if (ok) {
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        ok = pthread_create(&tid, &attr, pool_thread, w) == 0;
        pthread_attr_destroy(&attr);
    }
    if (!ok) {
        pthread_cond_destroy(&w->wake);
        free(w);
    }
    return ok;
}

void dck_parallel_for(int threads, size_t n, dck_task_fn fn, void *ctx) {
    if (threads < 1) threads = 1;
    if ((size_t)threads > n) threads = (int)n;
    if (threads > 256) threads = 256;
    pool_job job = {fn, ctx, n, 0, 0, PTHREAD_COND_INITIALIZER};
    if (threads <= 1) {
        run_items(&job, 0);
        return;
    }
    pthread_once(&pool_once, pool_init);
    pthread_mutex_lock(&pool_mu);
    /* a worker that cannot be had leaves the loop to fewer threads */
    for (int t = 1; t < threads && pool_enlist(&job, t); t++) job.helpers++;
    pthread_mutex_unlock(&pool_mu);
    run_items(&job, 0);
    pthread_mutex_lock(&pool_mu);
    while (job.helpers) pthread_cond_wait(&job.done, &pool_mu);
    pthread_mutex_unlock(&pool_mu);
    pthread_cond_destroy(&job.done);
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

/* Lane sums of runs of checkpoint tensors, on the CPU or streamed to the GPU
 * through pinned double buffers (detcheck hash --device cuda, and the ranks
 * of --distributed). Bytes come from dck_checkpoint_read, so every reader,
 * layout, byte order and compression the CPU engine accepts works here. */
#include "core/core.h"
#include "gpu/cuda_loader.h"
#include "gpu/gpu.h"

#include <stdlib.h>
#include <string.h>

#define READ_BYTES ((uint64_t)4 << 20) /* one read task; a multiple of 128 */

/* Files that random-access reads would map lazily (zstd, strided or
 * byte-swapped pieces) are mapped here, once, before threads read. */
static dck_status premap(dck_checkpoint *ck, const dck_lane_range *r, size_t nr) {
    for (size_t i = 0; i < nr; i++) {
        if (i && r[i].tensor == r[i - 1].tensor) continue;
        const dck_tensor_entry *t = &ck->tensors[r[i].tensor];
        for (size_t pi = 0; pi < t->npieces; pi++) {
            dck_file *f = ck->files[t->pieces[pi].file];
            if (f->mapped) continue;
            if (f->zstd || t->pieces[pi].strides || t->pieces[pi].byteswap) {
                const uint8_t *d;
                uint64_t l;
                dck_status s = dck_file_map(f, &d, &l);
                if (s) return s;
            }
        }
    }
    return DCK_OK;
}

/* Read tasks: [a, b) of a tensor, at most READ_BYTES, 128-aligned starts. */
typedef struct {
    size_t tensor;
    uint64_t a, b;
    size_t pos; /* GPU: byte position in the staging buffer */
} read_task;

static dck_status cut_tasks(const dck_lane_range *r, size_t nr, uint64_t task_bytes,
                            read_task **out, size_t *n) {
    size_t cap = 0;
    *out = NULL;
    *n = 0;
    for (size_t i = 0; i < nr; i++)
        for (uint64_t a = r[i].begin; a < r[i].end; a += task_bytes) {
            dck_status s = dck_grow((void **)out, &cap, *n + 1, sizeof **out);
            if (s) return s;
            uint64_t b = r[i].end - a > task_bytes ? a + task_bytes : r[i].end;
            (*out)[(*n)++] = (read_task){r[i].tensor, a, b, 0};
        }
    return DCK_OK;
}

/* ------------------------------------------------------------------ CPU */

typedef struct {
    dck_checkpoint *ck;
    const read_task *t;
    uint8_t **bufs; /* one per worker */
    uint64_t *lanes;
} cpu_job;

static dck_status cpu_task(void *ctx, size_t i, int worker) {
    cpu_job *j = ctx;
    const read_task *t = &j->t[i];
    size_t n = (size_t)(t->b - t->a);
    DCK_TRY(dck_checkpoint_read(j->ck, t->tensor, t->a, j->bufs[worker], n));
    dck_lanes l = dck_segments_sum(j->bufs[worker], n, t->a / DCK_SEGMENT);
    __atomic_fetch_add(&j->lanes[2 * t->tensor], l.lo, __ATOMIC_RELAXED);
    __atomic_fetch_add(&j->lanes[2 * t->tensor + 1], l.hi, __ATOMIC_RELAXED);
    return DCK_OK;
}

/* Bytes of n read tasks (progress). */
static uint64_t bytes_of(const read_task *t, size_t n) {
    uint64_t b = 0;
    for (size_t i = 0; i < n; i++) b += t[i].b - t[i].a;
    return b;
}

dck_status dck_cpu_lanes_run(dck_checkpoint *ck, const dck_lane_range *r, size_t nr, int threads,
                             uint64_t *host_lanes) {
    if (threads <= 0) threads = dck_default_threads();
    read_task *tasks;
    size_t nt;
    dck_status s = premap(ck, r, nr);
    if (!s) s = cut_tasks(r, nr, READ_BYTES, &tasks, &nt);
    if (s) return s;
    if (!nt) return DCK_OK;
    if ((size_t)threads > nt) threads = (int)nt;
    cpu_job j;
    memset(&j, 0, sizeof j);
    j.ck = ck;
    j.t = tasks;
    j.lanes = host_lanes;
    j.bufs = calloc((size_t)threads, sizeof *j.bufs);
    for (int w = 0; j.bufs && w < threads; w++)
        if (!(j.bufs[w] = malloc(READ_BYTES))) break;
    if (!j.bufs || !j.bufs[threads - 1]) s = dck_oom(NULL);
    /* With a progress callback, the tasks go in rounds of a few per
     * thread, reported after each from this thread; without, in one loop. */
    void (*progress)(void *, uint64_t, uint64_t) = ck->opt.progress;
    size_t round = progress ? (size_t)threads * 4 : nt;
    uint64_t done = 0, total = progress ? bytes_of(tasks, nt) : 0;
    for (size_t i = 0; i < nt && !s; i += round) {
        size_t n = nt - i < round ? nt - i : round;
        j.t = tasks + i;
        s = dck_parallel_for_status(threads, n, cpu_task, &j);
        if (!s && progress) {
            done += bytes_of(tasks + i, n);
            progress(ck->opt.progress_ctx, done, total);
        }
    }
    for (int w = 0; j.bufs && w < threads; w++) free(j.bufs[w]);
    free(j.bufs);
    free(tasks);
    return s;
}

/* ------------------------------------------------------------------ staged pipeline
 * The double-buffered loop of --device cuda, written once over a backend:
 * the CUDA one (pinned buffers, async copies, kernels, events) and the CPU
 * twin's (host buffers, the twin kernel), so CI tests the packing and the
 * buffer rotation without a GPU. Tasks are packed into a staging buffer at
 * 256-byte aligned positions; while the device works on one buffer, reader
 * threads fill the other. */
typedef struct {
    size_t buf_bytes;
    uint64_t task_bytes; /* <= buf_bytes, a multiple of 128 */
    void *ctx;
    uint8_t *(*staging)(void *ctx, int b);
    dck_status (*wait)(void *ctx, int b); /* the device is done with buffer b */
    /* copy bytes [0, used) of buffer b to the device, add each task's sums */
    dck_status (*submit)(void *ctx, int b, size_t used, const read_task *t, size_t n);
} stage_backend;

typedef struct {
    dck_checkpoint *ck;
    const read_task *t;
    uint8_t *staging;
} fill_job;

static dck_status fill_task(void *ctx, size_t i, int worker) {
    (void)worker;
    fill_job *f = ctx;
    const read_task *t = &f->t[i];
    return dck_checkpoint_read(f->ck, t->tensor, t->a, f->staging + t->pos, (size_t)(t->b - t->a));
}

static dck_status staged_run(const stage_backend *be, dck_checkpoint *ck, const dck_lane_range *r,
                             size_t nr, int threads) {
    if (threads <= 0) threads = dck_default_threads();
    read_task *tasks;
    size_t nt;
    dck_status s = premap(ck, r, nr);
    if (!s) s = cut_tasks(r, nr, be->task_bytes, &tasks, &nt);
    if (s) return s;
    bool used[2] = {false, false};
    int b = 0;
    uint64_t done = 0, total = ck->opt.progress ? bytes_of(tasks, nt) : 0;
    for (size_t i = 0; i < nt && !s;) {
        size_t first = i, pos = 0;
        for (; i < nt; i++) {
            size_t n = (size_t)(tasks[i].b - tasks[i].a);
            if (pos + n > be->buf_bytes) break;
            tasks[i].pos = pos;
            pos += (n + 255) & ~(size_t)255;
        }
        if (used[b] && (s = be->wait(be->ctx, b))) break;
        fill_job f;
        memset(&f, 0, sizeof f);
        f.ck = ck;
        f.t = tasks + first;
        f.staging = be->staging(be->ctx, b);
        if ((s = dck_parallel_for_status(threads, i - first, fill_task, &f))) break;
        s = be->submit(be->ctx, b, pos, tasks + first, i - first);
        used[b] = true;
        if (!s && ck->opt.progress) { /* read and queued: the reading is the long part */
            done += bytes_of(tasks + first, i - first);
            ck->opt.progress(ck->opt.progress_ctx, done, total);
        }
        b ^= 1;
    }
    free(tasks);
    return s;
}

/* The twin backend: "device" buffers in host memory at a fake device
 * address, the twin kernel with a 3-block grid. */
typedef struct {
    size_t buf_bytes;
    uint8_t *host[2], *dev[2];
    uint64_t *lanes;
} twin_stage;

static uint8_t *twin_staging(void *ctx, int b) { return ((twin_stage *)ctx)->host[b]; }
static dck_status twin_wait(void *ctx, int b) {
    (void)ctx, (void)b;
    return DCK_OK;
}
static dck_status twin_submit(void *ctx, int b, size_t used, const read_task *t, size_t n) {
    twin_stage *ts = ctx;
    memcpy(ts->dev[b], ts->host[b], used);
    memset(ts->host[b], 0xee, ts->buf_bytes); /* a stale read would show */
    for (size_t k = 0; k < n; k++) {
        dck_lanes l = dck_twin_segments_sum(ts->dev[b] + t[k].pos, (size_t)(t[k].b - t[k].a),
                                            t[k].a / DCK_SEGMENT,
                                            (uintptr_t)0x7f1200000000ULL + t[k].pos, 3);
        ts->lanes[2 * t[k].tensor] += l.lo;
        ts->lanes[2 * t[k].tensor + 1] += l.hi;
    }
    return DCK_OK;
}

dck_status dck_twin_staged_lanes(dck_checkpoint *ck, const dck_lane_range *r, size_t nr,
                                 int threads, size_t buf_bytes, uint64_t task_bytes,
                                 uint64_t *host_lanes) {
    if (task_bytes == 0 || task_bytes % DCK_SEGMENT || task_bytes > buf_bytes)
        return dck_set_error(DCK_ERR_INVALID, "staging: bad buffer or task size");
    twin_stage ts;
    memset(&ts, 0, sizeof ts);
    ts.buf_bytes = buf_bytes;
    ts.lanes = host_lanes;
    dck_status s = DCK_OK;
    for (int b = 0; b < 2 && !s; b++)
        if (!(ts.host[b] = malloc(buf_bytes)) || !(ts.dev[b] = malloc(buf_bytes)))
            s = dck_oom(NULL);
    stage_backend be = {buf_bytes, task_bytes, &ts, twin_staging, twin_wait, twin_submit};
    if (!s) s = staged_run(&be, ck, r, nr, threads);
    for (int b = 0; b < 2; b++) {
        free(ts.host[b]);
        free(ts.dev[b]);
    }
    return s;
}

/* ------------------------------------------------------------------ GPU */

#ifndef DCK_HAVE_CUDA

static dck_status no_cuda(void) {
    return dck_set_error(DCK_ERR_NODEVICE,
                         "no CUDA device: this detcheck was built without CUDA (make CUDA=0)");
}

dck_status dck_gpu_job_create(int device, size_t ntensors, size_t buffer_bytes,
                              dck_gpu_job **out) {
    (void)device, (void)ntensors, (void)buffer_bytes;
    *out = NULL;
    return no_cuda();
}
dck_status dck_gpu_job_run(dck_gpu_job *j, dck_checkpoint *ck, const dck_lane_range *r, size_t nr,
                           int threads) {
    (void)j, (void)ck, (void)r, (void)nr, (void)threads;
    return no_cuda();
}
uint64_t *dck_gpu_job_device_lanes(dck_gpu_job *j) {
    (void)j;
    return NULL;
}
void *dck_gpu_job_stream(dck_gpu_job *j) {
    (void)j;
    return NULL;
}
dck_status dck_gpu_job_download(dck_gpu_job *j, uint64_t *host_lanes) {
    (void)j, (void)host_lanes;
    return no_cuda();
}
void dck_gpu_job_free(dck_gpu_job *j) { (void)j; }

#else

struct dck_gpu_job {
    int device, prev_device;
    size_t ntensors;
    size_t buf_bytes;
    uint8_t *pinned[2];
    uint8_t *dev[2];
    cudaEvent_t done[2];
    cudaStream_t stream;
    uint64_t *dev_lanes;
};

/* The runtime: loaded by dck_gpu_device_count before any job exists. */
static const dck_cudart_api *rt(void) { return dck_cudart_loaded(); }

#define CU(call, what)                                                                          \
    do {                                                                                        \
        cudaError_t e_ = (call);                                                                \
        if (e_ != cudaSuccess) return dck_gpu_error(e_, what);                                  \
    } while (0)

static dck_status job_alloc(dck_gpu_job *j) {
    CU(rt()->cudaSetDevice(j->device), "cudaSetDevice");
    CU(rt()->cudaStreamCreateWithFlags(&j->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    for (int b = 0; b < 2; b++) {
        CU(rt()->cudaHostAlloc((void **)&j->pinned[b], j->buf_bytes, cudaHostAllocDefault),
           "cudaHostAlloc (pinned staging buffer)");
        CU(rt()->cudaMalloc((void **)&j->dev[b], j->buf_bytes), "cudaMalloc (staging buffer)");
        CU(rt()->cudaEventCreateWithFlags(&j->done[b], cudaEventDisableTiming), "cudaEventCreate");
    }
    size_t lb = 2 * sizeof(uint64_t) * (j->ntensors ? j->ntensors : 1);
    CU(rt()->cudaMalloc((void **)&j->dev_lanes, lb), "cudaMalloc (lanes)");
    CU(rt()->cudaMemsetAsync(j->dev_lanes, 0, lb, j->stream), "cudaMemsetAsync");
    return DCK_OK;
}

dck_status dck_gpu_job_create(int device, size_t ntensors, size_t buffer_bytes,
                              dck_gpu_job **out) {
    *out = NULL;
    int n;
    dck_status s = dck_gpu_device_count(&n);
    if (s) return s;
    if (device < 0 || device >= n)
        return dck_set_error(DCK_ERR_NODEVICE, "no CUDA device %d (%d present)", device, n);
    dck_gpu_job *j = calloc(1, sizeof *j);
    if (!j) return dck_oom(NULL);
    if (!buffer_bytes) buffer_bytes = (size_t)64 << 20;
    buffer_bytes = (buffer_bytes + READ_BYTES - 1) / READ_BYTES * READ_BYTES;
    j->device = device;
    j->ntensors = ntensors;
    j->buf_bytes = buffer_bytes;
    rt()->cudaGetDevice(&j->prev_device);
    s = job_alloc(j);
    if (s) {
        dck_gpu_job_free(j);
        return s;
    }
    *out = j;
    return DCK_OK;
}

void dck_gpu_job_free(dck_gpu_job *j) {
    if (!j) return;
    if (j->stream) rt()->cudaStreamSynchronize(j->stream);
    for (int b = 0; b < 2; b++) {
        if (j->pinned[b]) rt()->cudaFreeHost(j->pinned[b]);
        if (j->dev[b]) rt()->cudaFree(j->dev[b]);
        if (j->done[b]) rt()->cudaEventDestroy(j->done[b]);
    }
    if (j->dev_lanes) rt()->cudaFree(j->dev_lanes);
    if (j->stream) rt()->cudaStreamDestroy(j->stream);
    rt()->cudaSetDevice(j->prev_device);
    free(j);
}

uint64_t *dck_gpu_job_device_lanes(dck_gpu_job *j) { return j->dev_lanes; }
void *dck_gpu_job_stream(dck_gpu_job *j) { return j->stream; }

static uint8_t *cuda_staging(void *ctx, int b) { return ((dck_gpu_job *)ctx)->pinned[b]; }

static dck_status cuda_wait(void *ctx, int b) {
    cudaError_t e = rt()->cudaEventSynchronize(((dck_gpu_job *)ctx)->done[b]);
    return e == cudaSuccess ? DCK_OK : dck_gpu_error(e, "staging buffer wait");
}

static dck_status cuda_submit(void *ctx, int b, size_t used, const read_task *t, size_t n) {
    dck_gpu_job *j = ctx;
    cudaError_t e = rt()->cudaMemcpyAsync(j->dev[b], j->pinned[b], used,
                                          cudaMemcpyHostToDevice, j->stream);
    for (size_t k = 0; k < n && e == cudaSuccess; k++)
        e = (cudaError_t)dck_cuda_segments_sum_launch(j->dev[b] + t[k].pos, t[k].b - t[k].a,
                                                      t[k].a / DCK_SEGMENT,
                                                      j->dev_lanes + 2 * t[k].tensor, 0,
                                                      j->stream);
    if (e == cudaSuccess) e = rt()->cudaEventRecord(j->done[b], j->stream);
    return e == cudaSuccess ? DCK_OK : dck_gpu_error(e, "staging copy or segment-sum kernel");
}

dck_status dck_gpu_job_run(dck_gpu_job *j, dck_checkpoint *ck, const dck_lane_range *r, size_t nr,
                           int threads) {
    CU(rt()->cudaSetDevice(j->device), "cudaSetDevice");
    stage_backend be = {j->buf_bytes, READ_BYTES, j, cuda_staging, cuda_wait, cuda_submit};
    return staged_run(&be, ck, r, nr, threads);
}

dck_status dck_gpu_job_download(dck_gpu_job *j, uint64_t *host_lanes) {
    CU(rt()->cudaSetDevice(j->device), "cudaSetDevice");
    CU(rt()->cudaMemcpyAsync(host_lanes, j->dev_lanes, 2 * sizeof(uint64_t) * j->ntensors,
                             cudaMemcpyDeviceToHost, j->stream),
       "cudaMemcpyAsync (lanes)");
    CU(rt()->cudaStreamSynchronize(j->stream), "cudaStreamSynchronize");
    return DCK_OK;
}

#endif /* DCK_HAVE_CUDA */

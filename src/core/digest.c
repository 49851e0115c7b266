/* Tensor digest v1 and the root digest (man detcheck-digest(7)).
 *
 * digest = XXH3_128(record(dtype, shape, sum_j XXH3_128_seed=j(segment_j))).
 * The lane sums are plain 64-bit integer adds, so any split of the segments
 * (threads, shards, GPU blocks, ranks) gives the same bits. */
#include "core/core.h"
#include "core/digest_simd.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ kernels */

static void xxh3_update_portable(void *state, const void *data, size_t len) {
    XXH3_128bits_update((XXH3_state_t *)state, data, len);
}

#if DCK_DIGEST_X86
/* cpuid and the OS's saved register state (libgcc / compiler-rt check XCR0) */
static int cpu_runs_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
}
static int cpu_runs_avx512(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
}
static int cpu_runs_avx512ifma(void) {
    return cpu_runs_avx512() && __builtin_cpu_supports("avx512ifma");
}
#endif

/* Portable first; then wider ones, the widest last (the default pick). */
static const dck_digest_kernel kernels[] = {
    {"portable", "nothing", NULL, NULL, xxh3_update_portable},
#if DCK_DIGEST_X86
    {"avx2", "AVX2", cpu_runs_avx2, dck_segments_avx2, dck_xxh3_update_avx2},
    {"avx512", "AVX-512F and AVX-512DQ", cpu_runs_avx512, dck_segments_avx512,
     dck_xxh3_update_avx512},
    {"avx512ifma", "AVX-512F, AVX-512DQ and AVX-512 IFMA", cpu_runs_avx512ifma,
     dck_segments_avx512ifma, dck_xxh3_update_avx512},
#endif
};
#define NKERNELS (sizeof kernels / sizeof kernels[0])

size_t dck_digest_kernel_count(void) { return NKERNELS; }

const dck_digest_kernel *dck_digest_kernel_at(size_t i) { return i < NKERNELS ? &kernels[i] : NULL; }

int dck_digest_kernel_supported(const dck_digest_kernel *k) {
    return k && (!k->cpu_runs || k->cpu_runs());
}

static const dck_digest_kernel *active_kernel; /* set once (atomics): any racer picks the same */

const dck_digest_kernel *dck_digest_kernel_active(void) {
    const dck_digest_kernel *k = __atomic_load_n(&active_kernel, __ATOMIC_ACQUIRE);
    if (k) return k;
    const char *want = getenv("DETCHECK_DIGEST_KERNEL");
    for (size_t i = 0; i < NKERNELS && !k; i++)
        if (want && !strcmp(want, kernels[i].name) && dck_digest_kernel_supported(&kernels[i]))
            k = &kernels[i];
    for (size_t i = NKERNELS; i-- > 0 && !k;)
        if (dck_digest_kernel_supported(&kernels[i])) k = &kernels[i];
    __atomic_store_n(&active_kernel, k, __ATOMIC_RELEASE);
    return k;
}

/* ------------------------------------------------------------------ segments */

dck_lanes dck_segments_sum_kernel(const dck_digest_kernel *k, const void *data, size_t len,
                                  uint64_t first_segment) {
    const uint8_t *p = data;
    uint64_t lanes[2] = {0, 0};
    size_t whole = len / DCK_SEGMENT, i = 0;
    if (k->segments && whole) i = k->segments(p, whole, first_segment, lanes);
    for (; i < whole; i++) {
        XXH128_hash_t h = XXH3_128bits_withSeed(p + i * DCK_SEGMENT, DCK_SEGMENT, first_segment + i);
        lanes[0] += h.low64;
        lanes[1] += h.high64;
    }
    size_t rest = len % DCK_SEGMENT;
    if (rest) {
        XXH128_hash_t h = XXH3_128bits_withSeed(p + whole * DCK_SEGMENT, rest, first_segment + whole);
        lanes[0] += h.low64;
        lanes[1] += h.high64;
    }
    return (dck_lanes){lanes[0], lanes[1]};
}

dck_lanes dck_segments_sum(const void *data, size_t len, uint64_t first_segment) {
    return dck_segments_sum_kernel(dck_digest_kernel_active(), data, len, first_segment);
}

/* ------------------------------------------------------------------ whole-file streams */

dck_xxh3 *dck_xxh3_create(void) {
    XXH3_state_t *s = XXH3_createState(); /* 64-byte aligned, as the type demands */
    if (s) XXH3_128bits_reset(s);
    return (dck_xxh3 *)s;
}

void dck_xxh3_update(dck_xxh3 *s, const void *data, size_t len) {
    if (len) dck_digest_kernel_active()->xxh3_update(s, data, len);
}

dck_digest dck_xxh3_digest(const dck_xxh3 *s) {
    XXH128_hash_t h = XXH3_128bits_digest((const XXH3_state_t *)s);
    return (dck_digest){h.high64, h.low64};
}

void dck_xxh3_free(dck_xxh3 *s) { XXH3_freeState((XXH3_state_t *)s); }

static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

dck_digest dck_digest_finish(dck_dtype t, const uint64_t *shape, int ndim, dck_lanes total) {
    uint8_t rec[4 + 1 + 32 + 4 + 8 * DCK_MAX_DIMS + 16];
    const char *name = dck_dtype_name(t);
    size_t nl = strlen(name), k = 0;
    memcpy(rec, "DCK1", 4);
    k = 4;
    rec[k++] = (uint8_t)nl;
    memcpy(rec + k, name, nl);
    k += nl;
    uint32_t nd = (uint32_t)ndim;
    for (int i = 0; i < 4; i++) rec[k++] = (uint8_t)(nd >> (8 * i));
    for (int i = 0; i < ndim; i++, k += 8) put_u64(rec + k, shape[i]);
    put_u64(rec + k, total.lo);
    k += 8;
    put_u64(rec + k, total.hi);
    k += 8;
    XXH128_hash_t h = XXH3_128bits(rec, k);
    return (dck_digest){h.high64, h.low64};
}

dck_digest dck_xxh128(const void *data, size_t len) {
    XXH128_hash_t h = XXH3_128bits(data, len);
    return (dck_digest){h.high64, h.low64};
}

/* ------------------------------------------------------------------ buffers */

#define CHUNK_SEGMENTS (8192u) /* 1 MiB of segments per task */

typedef struct {
    const uint8_t *data;
    size_t len;
    uint64_t lo, hi;
} buf_job;

static void buf_task(void *ctx, size_t i, int worker) {
    (void)worker;
    buf_job *j = ctx;
    size_t off = i * (size_t)CHUNK_SEGMENTS * DCK_SEGMENT;
    size_t n = j->len - off;
    if (n > (size_t)CHUNK_SEGMENTS * DCK_SEGMENT) n = (size_t)CHUNK_SEGMENTS * DCK_SEGMENT;
    dck_lanes l = dck_segments_sum(j->data + off, n, off / DCK_SEGMENT);
    __atomic_fetch_add(&j->lo, l.lo, __ATOMIC_RELAXED);
    __atomic_fetch_add(&j->hi, l.hi, __ATOMIC_RELAXED);
}

dck_status dck_digest_buffer(dck_dtype t, const uint64_t *shape, int ndim, const void *data,
                             size_t len, int threads, dck_digest *out) {
    uint64_t want;
    if ((unsigned)t >= DCK_DTYPE_COUNT)
        return dck_set_error(DCK_ERR_INVALID, "digest: unknown dtype %d", (int)t);
    dck_status s = dck_shape_bytes(t, shape, ndim, &want);
    if (s) return dck_set_error(s, "digest: %s", dck_last_error());
    if (want != len)
        return dck_set_error(DCK_ERR_INVALID, "digest: %zu bytes given, shape needs %llu", len,
                             (unsigned long long)want);
    if (len && !data) return dck_set_error(DCK_ERR_INVALID, "digest: NULL data");
    if (threads <= 0) threads = dck_default_threads();
    buf_job j = {data, len, 0, 0};
    size_t chunk = (size_t)CHUNK_SEGMENTS * DCK_SEGMENT;
    dck_parallel_for(threads, (len + chunk - 1) / chunk, buf_task, &j);
    *out = dck_digest_finish(t, shape, ndim, (dck_lanes){j.lo, j.hi});
    return DCK_OK;
}

/* ------------------------------------------------------------------ hex */

void dck_hex_encode(const uint8_t *in, size_t n, char *out) {
    static const char hx[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hx[in[i] >> 4];
        out[2 * i + 1] = hx[in[i] & 15];
    }
    out[2 * n] = 0;
}

void dck_digest_canonical(dck_digest d, uint8_t out[16]) {
    for (int i = 0; i < 8; i++) {
        out[i] = (uint8_t)(d.high64 >> (56 - 8 * i));
        out[8 + i] = (uint8_t)(d.low64 >> (56 - 8 * i));
    }
}

void dck_digest_to_hex(dck_digest d, char out[33]) {
    uint8_t c[16];
    dck_digest_canonical(d, c);
    dck_hex_encode(c, 16, out);
}

dck_status dck_digest_from_hex(const char *hex, dck_digest *out) {
    if (!hex) return dck_set_error(DCK_ERR_FORMAT, "digest: missing (NULL)");
    size_t n = strlen(hex);
    if (n != 32)
        return dck_set_error(DCK_ERR_FORMAT, "digest \"%.64s%s\": %zu characters, not 32 hex digits",
                             hex, n > 64 ? "..." : "", n);
    uint64_t v[2] = {0, 0};
    for (int i = 0; i < 32; i++) {
        char c = hex[i];
        int x;
        if (c >= '0' && c <= '9') x = c - '0';
        else if (c >= 'a' && c <= 'f') x = c - 'a' + 10;
        else /* canonical form is lowercase */
            return dck_set_error(DCK_ERR_FORMAT,
                                 "digest \"%s\": character %d is not a lowercase hex digit", hex,
                                 i + 1);
        v[i / 16] = (v[i / 16] << 4) | (uint64_t)x;
    }
    out->high64 = v[0];
    out->low64 = v[1];
    return DCK_OK;
}

int dck_digest_equal(dck_digest a, dck_digest b) {
    return a.high64 == b.high64 && a.low64 == b.low64;
}

/* ------------------------------------------------------------------ fragments */

dck_status dck_fragment_partial_compute(uint64_t tensor_bytes, uint64_t offset, const void *data,
                                        size_t length, dck_fragment_partial *out) {
    memset(out, 0, offsetof(dck_fragment_partial, head));
    if (offset > tensor_bytes || length > tensor_bytes - offset)
        return dck_set_error(DCK_ERR_LAYOUT, "fragment [%llu, +%zu) outside tensor of %llu bytes",
                             (unsigned long long)offset, length,
                             (unsigned long long)tensor_bytes);
    if (length && !data) return dck_set_error(DCK_ERR_INVALID, "fragment: NULL data");
    out->offset = offset;
    out->length = length;
    if (!length) return DCK_OK;
    const uint8_t *p = data;
    uint64_t end = offset + length;
    uint64_t a = (offset + DCK_SEGMENT - 1) / DCK_SEGMENT * DCK_SEGMENT; /* first boundary */
    uint64_t b = end == tensor_bytes ? end : end / DCK_SEGMENT * DCK_SEGMENT;
    uint64_t head_end = a < end ? a : end;
    out->head_len = (uint32_t)(head_end - offset);
    memcpy(out->head, p, out->head_len);
    if (head_end == end) return DCK_OK;
    if (b < a) b = a;
    if (b > a) out->lanes = dck_segments_sum(p + (a - offset), (size_t)(b - a), a / DCK_SEGMENT);
    out->tail_len = (uint32_t)(end - b);
    memcpy(out->tail, p + (b - offset), out->tail_len);
    return DCK_OK;
}

typedef struct {
    uint64_t seg;
    uint32_t off, len;
    uint8_t bytes[DCK_SEGMENT];
} pending_piece;

typedef struct {
    uint64_t start, end;
} interval;

struct dck_tensor_hasher {
    dck_dtype dtype;
    int ndim;
    uint64_t shape[DCK_MAX_DIMS];
    uint64_t nbytes;
    uint64_t lo, hi; /* atomics */
    pthread_mutex_t mu;
    pending_piece *pend;
    size_t npend, cap_pend;
    interval *iv;
    size_t niv, cap_iv;
    dck_status failed; /* the first add that failed, and its message (malloc'd) */
    char *failed_msg;
};

dck_status dck_tensor_hasher_create(dck_dtype t, const uint64_t *shape, int ndim,
                                    dck_tensor_hasher **out) {
    *out = NULL;
    if ((unsigned)t >= DCK_DTYPE_COUNT)
        return dck_set_error(DCK_ERR_INVALID, "hasher: unknown dtype %d", (int)t);
    if (ndim < 0 || ndim > DCK_MAX_DIMS)
        return dck_set_error(DCK_ERR_INVALID, "hasher: %d dimensions (limit %d)", ndim,
                             DCK_MAX_DIMS);
    if (ndim && !shape) return dck_set_error(DCK_ERR_INVALID, "hasher: NULL shape");
    dck_tensor_hasher *h = calloc(1, sizeof *h);
    if (!h) return dck_oom(NULL);
    h->dtype = t;
    h->ndim = ndim;
    if (ndim) memcpy(h->shape, shape, sizeof(uint64_t) * (size_t)ndim);
    dck_status s = dck_shape_bytes(t, shape, ndim, &h->nbytes);
    if (s) {
        free(h);
        return dck_set_error(s, "hasher: %s", dck_last_error());
    }
    pthread_mutex_init(&h->mu, NULL);
    *out = h;
    return DCK_OK;
}

void dck_tensor_hasher_free(dck_tensor_hasher *h) {
    if (!h) return;
    pthread_mutex_destroy(&h->mu);
    free(h->failed_msg);
    free(h->pend);
    free(h->iv);
    free(h);
}

static dck_status add_pending(dck_tensor_hasher *h, uint64_t pos, const uint8_t *b, uint32_t n) {
    if (!n) return DCK_OK;
    dck_status s = dck_grow((void **)&h->pend, &h->cap_pend, h->npend + 1, sizeof *h->pend);
    if (s) return s;
    pending_piece *pp = &h->pend[h->npend++];
    pp->seg = pos / DCK_SEGMENT;
    pp->off = (uint32_t)(pos % DCK_SEGMENT);
    pp->len = n;
    memcpy(pp->bytes, b, n);
    return DCK_OK;
}

dck_status dck_tensor_hasher_add(dck_tensor_hasher *h, const dck_fragment_partial *p) {
    if (p->offset > h->nbytes || p->length > h->nbytes - p->offset ||
        p->head_len > DCK_SEGMENT || p->tail_len > DCK_SEGMENT ||
        (uint64_t)p->head_len + p->tail_len > p->length)
        return dck_set_error(DCK_ERR_LAYOUT,
                             "fragment [%llu, +%llu) does not fit a tensor of %llu bytes",
                             (unsigned long long)p->offset, (unsigned long long)p->length,
                             (unsigned long long)h->nbytes);
    if (!p->length) return DCK_OK;
    __atomic_fetch_add(&h->lo, p->lanes.lo, __ATOMIC_RELAXED);
    __atomic_fetch_add(&h->hi, p->lanes.hi, __ATOMIC_RELAXED);
    pthread_mutex_lock(&h->mu);
    dck_status s = add_pending(h, p->offset, p->head, p->head_len);
    if (!s) s = add_pending(h, p->offset + p->length - p->tail_len, p->tail, p->tail_len);
    if (!s) {
        uint64_t st = p->offset, en = p->offset + p->length;
        if (h->niv && h->iv[h->niv - 1].end == st) h->iv[h->niv - 1].end = en;
        else if (!(s = dck_grow((void **)&h->iv, &h->cap_iv, h->niv + 1, sizeof *h->iv)))
            h->iv[h->niv++] = (interval){st, en};
    }
    if (s && !h->failed) {
        /* final may run on another thread: keep this thread's message */
        h->failed = s;
        h->failed_msg = dck_strdup(dck_last_error());
    }
    pthread_mutex_unlock(&h->mu);
    return s;
}

dck_status dck_tensor_hasher_update(dck_tensor_hasher *h, uint64_t offset, const void *data,
                                    size_t length) {
    dck_fragment_partial p;
    dck_status s = dck_fragment_partial_compute(h->nbytes, offset, data, length, &p);
    if (s) return s;
    return dck_tensor_hasher_add(h, &p);
}

static int cmp_interval(const void *a, const void *b) {
    const interval *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

static int cmp_pending(const void *a, const void *b) {
    const pending_piece *x = a, *y = b;
    if (x->seg != y->seg) return x->seg < y->seg ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

dck_status dck_tensor_hasher_final(dck_tensor_hasher *h, dck_digest *out) {
    if (h->failed)
        return dck_set_error(h->failed, "an earlier fragment failed: %s",
                             h->failed_msg && *h->failed_msg ? h->failed_msg
                                                             : dck_strerror(h->failed));
    dck_qsort(h->iv, h->niv, sizeof *h->iv, cmp_interval);
    uint64_t pos = 0;
    for (size_t i = 0; i < h->niv; i++) {
        if (h->iv[i].start < pos)
            return dck_set_error(DCK_ERR_LAYOUT, "bytes [%llu, %llu) are covered twice",
                                 (unsigned long long)h->iv[i].start, (unsigned long long)pos);
        if (h->iv[i].start > pos)
            return dck_set_error(DCK_ERR_LAYOUT, "bytes [%llu, %llu) are missing",
                                 (unsigned long long)pos, (unsigned long long)h->iv[i].start);
        pos = h->iv[i].end;
    }
    if (pos != h->nbytes)
        return dck_set_error(DCK_ERR_LAYOUT, "bytes [%llu, %llu) are missing",
                             (unsigned long long)pos, (unsigned long long)h->nbytes);
    /* Stitch the partial segments in offset order. Coverage was checked
     * above, so the pieces of each segment tile it exactly. */
    dck_qsort(h->pend, h->npend, sizeof *h->pend, cmp_pending);
    uint64_t lo = h->lo, hi = h->hi;
    for (size_t i = 0; i < h->npend;) {
        uint8_t seg[DCK_SEGMENT];
        uint64_t j = h->pend[i].seg;
        uint32_t fill = 0;
        for (; i < h->npend && h->pend[i].seg == j; i++) {
            if (h->pend[i].off != fill)
                return dck_set_error(DCK_ERR_LAYOUT, "segment %llu is not tiled by its pieces",
                                     (unsigned long long)j);
            memcpy(seg + fill, h->pend[i].bytes, h->pend[i].len);
            fill += h->pend[i].len;
        }
        uint64_t want = h->nbytes - j * DCK_SEGMENT;
        if (want > DCK_SEGMENT) want = DCK_SEGMENT;
        if (fill != want)
            return dck_set_error(DCK_ERR_LAYOUT, "segment %llu is incomplete",
                                 (unsigned long long)j);
        XXH128_hash_t x = XXH3_128bits_withSeed(seg, fill, j);
        lo += x.low64;
        hi += x.high64;
    }
    *out = dck_digest_finish(h->dtype, h->shape, h->ndim, (dck_lanes){lo, hi});
    return DCK_OK;
}

/* ------------------------------------------------------------------ root */

typedef struct {
    const char *name;
    dck_digest d;
} named_digest;

static int cmp_named(const void *a, const void *b) {
    return strcmp(((const named_digest *)a)->name, ((const named_digest *)b)->name);
}

dck_digest dck_root_digest(const char *const *names, const dck_digest *digests, size_t n) {
    named_digest *v = malloc(sizeof *v * (n ? n : 1));
    XXH3_state_t st;
    XXH3_128bits_reset(&st);
    if (v) {
        for (size_t i = 0; i < n; i++) v[i] = (named_digest){names[i], digests[i]};
        dck_qsort(v, n, sizeof *v, cmp_named);
        for (size_t i = 0; i < n; i++) {
            uint32_t len = (uint32_t)strlen(v[i].name);
            uint8_t lb[4] = {(uint8_t)len, (uint8_t)(len >> 8), (uint8_t)(len >> 16),
                             (uint8_t)(len >> 24)};
            uint8_t c[16];
            dck_digest_canonical(v[i].d, c);
            XXH3_128bits_update(&st, lb, 4);
            XXH3_128bits_update(&st, v[i].name, len);
            XXH3_128bits_update(&st, c, 16);
        }
        free(v);
    }
    XXH128_hash_t h = XXH3_128bits_digest(&st);
    return (dck_digest){h.high64, h.low64};
}

/* The CPU twin of the GPU digest: the segment-sum kernel's tiles, staging,
 * funnel shifts and hash (src/gpu/gpu_xxh3.h, the same code the kernel
 * compiles) run on the host, and the fragment logic the GPU path uses. Built
 * with or without CUDA, so CI without a GPU tests the kernels' arithmetic
 * against libxxhash and the CPU digest. */
#include "core/core.h"
#include "gpu/gpu.h"
#include "gpu/gpu_xxh3.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ fragment split */

dck_status dck_fragment_split_compute(uint64_t tensor_bytes, uint64_t offset, uint64_t length,
                                      dck_fragment_split *out) {
    memset(out, 0, sizeof *out);
    if (offset > tensor_bytes || length > tensor_bytes - offset)
        return dck_set_error(DCK_ERR_LAYOUT,
                             "fragment [%llu, +%llu) outside tensor of %llu bytes",
                             (unsigned long long)offset, (unsigned long long)length,
                             (unsigned long long)tensor_bytes);
    out->offset = offset;
    out->length = length;
    uint64_t end = offset + length;
    out->mid_begin = out->mid_end = out->tail_begin = end;
    if (!length) return DCK_OK;
    /* The same cuts as dck_fragment_partial_compute (src/core/digest.c): the
     * head runs to the first segment boundary; the tail starts at the last
     * boundary, unless the fragment ends the tensor (then its short last
     * segment is whole). */
    uint64_t a = (offset + DCK_SEGMENT - 1) / DCK_SEGMENT * DCK_SEGMENT;
    uint64_t b = end == tensor_bytes ? end : end / DCK_SEGMENT * DCK_SEGMENT;
    uint64_t head_end = a < end ? a : end;
    out->head_len = (uint32_t)(head_end - offset);
    if (head_end == end) return DCK_OK;
    if (b < a) b = a;
    out->mid_begin = a;
    out->mid_end = b;
    out->tail_begin = b;
    out->tail_len = (uint32_t)(end - b);
    return DCK_OK;
}

dck_status dck_fragment_partial_build(const dck_fragment_split *sp, dck_frag_copy_fn copy,
                                      dck_frag_sum_fn sum, void *ctx, dck_fragment_partial *out) {
    memset(out, 0, sizeof *out); /* whole struct: it travels as bytes over MPI */
    out->offset = sp->offset;
    out->length = sp->length;
    out->head_len = sp->head_len;
    out->tail_len = sp->tail_len;
    dck_status s = DCK_OK;
    if (sp->head_len) s = copy(ctx, sp->offset, out->head, sp->head_len);
    if (!s && sp->mid_end > sp->mid_begin)
        s = sum(ctx, sp->mid_begin, sp->mid_end - sp->mid_begin, sp->mid_begin / DCK_SEGMENT,
                &out->lanes);
    if (!s && sp->tail_len) s = copy(ctx, sp->tail_begin, out->tail, sp->tail_len);
    return s;
}

/* ------------------------------------------------------------------ twin kernel */

/* The aligned word at device address wa, as the kernel loads it; bytes
 * outside the region [address, address+len) read as zero (the kernel's
 * funnel shifts discard them). */
static uint64_t twin_load_word(const uint8_t *data, size_t len, uintptr_t address, uint64_t wa) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) {
        uint64_t a = wa + (uint64_t)i;
        uint8_t byte = 0;
        if (a >= address && a - address < len) byte = data[a - address];
        v = (v << 8) | byte;
    }
    return v;
}

dck_lanes dck_twin_segments_sum(const void *data, size_t len, uint64_t first_segment,
                                uintptr_t address, uint32_t nblocks) {
    const uint8_t *p = data;
    uint64_t lo = 0, hi = 0;
    const uint64_t nseg = len / DCK_SEGMENT;
    const uint32_t tail_len = (uint32_t)(len % DCK_SEGMENT);
    const uint64_t ntiles = (nseg + DCK_TILE_SEGMENTS - 1) / DCK_TILE_SEGMENTS;
    const uint32_t shift = (uint32_t)((address & 7) * 8);
    if (nblocks == 0) nblocks = 1;
    uint64_t *stage = malloc(sizeof(uint64_t) * DCK_STAGE_SLOTS);
    if (!stage) return (dck_lanes){0, 0}; /* tests only; they compare with the CPU */
    for (uint32_t block = 0; block < nblocks; block++) {
        for (uint64_t t = block; t < ntiles; t += nblocks) {
            uint64_t f;
            uint32_t count;
            dck_tile_range(t, nseg, &f, &count);
            uint64_t start = (uint64_t)address + f * DCK_SEGMENT;
            uint64_t base = start & ~(uint64_t)7;
            uint32_t nwords = dck_tile_words(start, count);
            for (uint32_t q = 0; q < nwords; q++)
                stage[dck_stage_slot(q)] = twin_load_word(p, len, address, base + 8u * q);
            for (uint32_t k = 0; k < count; k++) {
                uint64_t w[16], l, h;
                dck_stage_segment(stage, k, shift, w);
                dck_xxh3_128_seg128(w, first_segment + f + k, &l, &h);
                lo += l;
                hi += h;
            }
        }
    }
    free(stage);
    if (tail_len) {
        uint64_t l, h;
        dck_xxh3_128_upto128(p + nseg * DCK_SEGMENT, tail_len, first_segment + nseg, &l, &h);
        lo += l;
        hi += h;
    }
    return (dck_lanes){lo, hi};
}

typedef struct {
    const uint8_t *data; /* the fragment's bytes */
    uint64_t offset;     /* its global offset */
    uint32_t nblocks;
} twin_ctx;

static dck_status twin_copy(void *ctx, uint64_t goff, void *dst, size_t n) {
    twin_ctx *c = ctx;
    memcpy(dst, c->data + (goff - c->offset), n);
    return DCK_OK;
}

static dck_status twin_sum(void *ctx, uint64_t goff, uint64_t n, uint64_t first_segment,
                           dck_lanes *out) {
    twin_ctx *c = ctx;
    const uint8_t *p = c->data + (goff - c->offset);
    *out = dck_twin_segments_sum(p, (size_t)n, first_segment, (uintptr_t)p, c->nblocks);
    return DCK_OK;
}

dck_status dck_twin_fragment_partial(uint64_t tensor_bytes, uint64_t offset, const void *data,
                                     size_t length, uint32_t nblocks, dck_fragment_partial *out) {
    dck_fragment_split sp;
    memset(out, 0, sizeof *out);
    dck_status s = dck_fragment_split_compute(tensor_bytes, offset, length, &sp);
    if (s) return s;
    twin_ctx c = {data, offset, nblocks};
    return dck_fragment_partial_build(&sp, twin_copy, twin_sum, &c, out);
}

void dck_twin_xxh3_128(const void *data, uint32_t len, uint64_t seed, uint64_t *low,
                       uint64_t *high) {
    dck_xxh3_128_upto128(data, len, seed, low, high);
}

void dck_twin_xxh3_128_seg128(const void *data, uint64_t seed, uint64_t *low, uint64_t *high) {
    uint64_t w[16];
    for (int i = 0; i < 16; i++) w[i] = dck_x3_rd64((const uint8_t *)data + 8 * i);
    dck_xxh3_128_seg128(w, seed, low, high);
}

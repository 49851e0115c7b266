/* Digest v1 kernels for AVX-512 (x86-64): eight segments at once, one per
 * 64-bit lane, and libxxhash's AVX-512 XXH3 stream update. Two builds of the
 * segment loop: AVX-512F + DQ (the 128-bit products from 32-bit multiplies)
 * and, where the CPU has IFMA, 52-bit multiply-adds (fewer instructions).
 * Compiled for AVX-512 by the target pragma and attributes below (the rest
 * of the build stays baseline x86-64); digest.c calls each only on a CPU
 * that has what it needs. Same bits as the portable path:
 * tests/check_digest_simd.c. */
#include "core/digest_simd.h"

#if DCK_DIGEST_X86
/* System headers first, outside the target region. */
#include <immintrin.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512dq"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq")
#endif
#define DCK_TARGET_IFMA __attribute__((target("avx512f,avx512dq,avx512ifma")))

#define XXH_INLINE_ALL
#define XXH_VECTOR XXH_AVX512
#include <xxhash.h>

void dck_xxh3_update_avx512(void *state, const void *data, size_t len) {
    XXH3_128bits_update((XXH3_state_t *)state, data, len);
}

/* The 128-bit product of x and y (per lane), folded: low64 ^ high64. From
 * four 32 x 32 -> 64 products; mid cannot overflow. */
static inline __m512i mul128_fold(__m512i x, __m512i y) {
    __m512i xh = _mm512_srli_epi64(x, 32), yh = _mm512_srli_epi64(y, 32);
    __m512i ll = _mm512_mul_epu32(x, y);
    __m512i hl = _mm512_mul_epu32(xh, y);
    __m512i lh = _mm512_mul_epu32(x, yh);
    __m512i hh = _mm512_mul_epu32(xh, yh);
    __m512i mid = _mm512_add_epi64(_mm512_add_epi64(hl, _mm512_srli_epi64(ll, 32)),
                                   _mm512_and_si512(lh, _mm512_set1_epi64(0xffffffff)));
    __m512i hi = _mm512_add_epi64(_mm512_add_epi64(hh, _mm512_srli_epi64(lh, 32)),
                                  _mm512_srli_epi64(mid, 32));
    __m512i lo = _mm512_mask_blend_epi32(0xaaaa, ll, _mm512_slli_epi64(mid, 32));
    return _mm512_xor_si512(lo, hi);
}

/* The same from 52-bit limbs: x = x0 + x1 2^52 (x1 < 2^12), likewise y.
 * x y = A0 + T1 2^52 + T2 2^104 with A0 = lo52(x0 y0), T1 = hi52(x0 y0) +
 * lo52(x0 y1) + lo52(x1 y0) < 2^54, T2 = x1 y1 + hi52(x0 y1) + hi52(x1 y0);
 * so low64 = A0 | T1 << 52 and high64 = (T1 >> 12) + (T2 << 40), no carry.
 * IFMA multiplies the low 52 bits of its inputs: x stands for x0. */
DCK_TARGET_IFMA static inline __m512i mul128_fold_ifma(__m512i x, __m512i y) {
    const __m512i z = _mm512_setzero_si512();
    __m512i x1 = _mm512_srli_epi64(x, 52), y1 = _mm512_srli_epi64(y, 52);
    __m512i a0 = _mm512_madd52lo_epu64(z, x, y);
    __m512i t1 = _mm512_madd52hi_epu64(z, x, y);
    t1 = _mm512_madd52lo_epu64(t1, x, y1);
    t1 = _mm512_madd52lo_epu64(t1, x1, y);
    __m512i t2 = _mm512_madd52lo_epu64(z, x1, y1);
    t2 = _mm512_madd52hi_epu64(t2, x, y1);
    t2 = _mm512_madd52hi_epu64(t2, x1, y);
    __m512i hi = _mm512_add_epi64(_mm512_srli_epi64(t1, 12), _mm512_slli_epi64(t2, 40));
    return _mm512_ternarylogic_epi64(a0, _mm512_slli_epi64(t1, 52), hi, 0x56); /* (a | b) ^ c */
}

/* XXH3's avalanche: x ^= x >> 37; x *= PMX1; x ^= x >> 32. */
static inline __m512i avalanche(__m512i x) {
    x = _mm512_xor_si512(x, _mm512_srli_epi64(x, 37));
    x = _mm512_mullo_epi64(x, _mm512_set1_epi64((long long)DCK_SX3_PMX1));
    return _mm512_xor_si512(x, _mm512_srli_epi64(x, 32));
}

/* Rows r[0..7] (eight 64-bit words each) to columns: lane k of c[j] is word
 * j of row k. */
static inline void transpose8(const __m512i r[8], __m512i c[8]) {
    __m512i t0 = _mm512_unpacklo_epi64(r[0], r[1]), t1 = _mm512_unpackhi_epi64(r[0], r[1]);
    __m512i t2 = _mm512_unpacklo_epi64(r[2], r[3]), t3 = _mm512_unpackhi_epi64(r[2], r[3]);
    __m512i t4 = _mm512_unpacklo_epi64(r[4], r[5]), t5 = _mm512_unpackhi_epi64(r[4], r[5]);
    __m512i t6 = _mm512_unpacklo_epi64(r[6], r[7]), t7 = _mm512_unpackhi_epi64(r[6], r[7]);
    __m512i u0 = _mm512_shuffle_i64x2(t0, t2, 0x88), u1 = _mm512_shuffle_i64x2(t0, t2, 0xdd);
    __m512i u2 = _mm512_shuffle_i64x2(t1, t3, 0x88), u3 = _mm512_shuffle_i64x2(t1, t3, 0xdd);
    __m512i u4 = _mm512_shuffle_i64x2(t4, t6, 0x88), u5 = _mm512_shuffle_i64x2(t4, t6, 0xdd);
    __m512i u6 = _mm512_shuffle_i64x2(t5, t7, 0x88), u7 = _mm512_shuffle_i64x2(t5, t7, 0xdd);
    c[0] = _mm512_shuffle_i64x2(u0, u4, 0x88);
    c[4] = _mm512_shuffle_i64x2(u0, u4, 0xdd);
    c[2] = _mm512_shuffle_i64x2(u1, u5, 0x88);
    c[6] = _mm512_shuffle_i64x2(u1, u5, 0xdd);
    c[1] = _mm512_shuffle_i64x2(u2, u6, 0x88);
    c[5] = _mm512_shuffle_i64x2(u2, u6, 0xdd);
    c[3] = _mm512_shuffle_i64x2(u3, u7, 0x88);
    c[7] = _mm512_shuffle_i64x2(u3, u7, 0xdd);
}

static const uint64_t secret[16] = {
    DCK_SX3_S0, DCK_SX3_S1, DCK_SX3_S2,  DCK_SX3_S3,  DCK_SX3_S4,  DCK_SX3_S5,
    DCK_SX3_S6, DCK_SX3_S7, DCK_SX3_S8,  DCK_SX3_S9,  DCK_SX3_S10, DCK_SX3_S11,
    DCK_SX3_S12, DCK_SX3_S13, DCK_SX3_S14, DCK_SX3_S15};

/* The segment loop, built twice. */
#define DCK_SEG_NAME dck_segments_avx512
#define DCK_SEG_ATTR
#define DCK_SEG_FOLD mul128_fold
#include "core/digest_avx512_loop.h"
#undef DCK_SEG_NAME
#undef DCK_SEG_ATTR
#undef DCK_SEG_FOLD

#define DCK_SEG_NAME dck_segments_avx512ifma
#define DCK_SEG_ATTR DCK_TARGET_IFMA
#define DCK_SEG_FOLD mul128_fold_ifma
#include "core/digest_avx512_loop.h"

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else
typedef int dck_digest_avx512_none; /* not x86: no kernel (ISO C wants a declaration) */
#endif

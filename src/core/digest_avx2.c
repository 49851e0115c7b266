/* Digest v1 kernels for AVX2 (x86-64): four segments at once, one per 64-bit
 * lane, and libxxhash's AVX2 XXH3 stream update. Compiled for AVX2 by the
 * target pragma below (the rest of the build stays baseline x86-64);
 * digest.c calls these only on a CPU that has AVX2. Same bits as the
 * portable path: tests/check_digest_simd.c. */
#include "core/digest_simd.h"

#if DCK_DIGEST_X86
/* System headers first, outside the target region. */
#include <immintrin.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2")
#endif

#define XXH_INLINE_ALL
#define XXH_VECTOR XXH_AVX2
#include <xxhash.h>

void dck_xxh3_update_avx2(void *state, const void *data, size_t len) {
    XXH3_128bits_update((XXH3_state_t *)state, data, len);
}

/* The 128-bit product of x and y (per lane), folded: low64 ^ high64. From
 * four 32 x 32 -> 64 products; mid cannot overflow. */
static inline __m256i mul128_fold(__m256i x, __m256i y) {
    __m256i xh = _mm256_srli_epi64(x, 32), yh = _mm256_srli_epi64(y, 32);
    __m256i ll = _mm256_mul_epu32(x, y);
    __m256i hl = _mm256_mul_epu32(xh, y);
    __m256i lh = _mm256_mul_epu32(x, yh);
    __m256i hh = _mm256_mul_epu32(xh, yh);
    __m256i mid = _mm256_add_epi64(_mm256_add_epi64(hl, _mm256_srli_epi64(ll, 32)),
                                   _mm256_and_si256(lh, _mm256_set1_epi64x(0xffffffff)));
    __m256i hi = _mm256_add_epi64(_mm256_add_epi64(hh, _mm256_srli_epi64(lh, 32)),
                                  _mm256_srli_epi64(mid, 32));
    __m256i lo = _mm256_blend_epi32(ll, _mm256_slli_epi64(mid, 32), 0xaa);
    return _mm256_xor_si256(lo, hi);
}

/* x * c mod 2^64 for a constant c (AVX2 has no 64-bit multiply). */
static inline __m256i mullo_const(__m256i x, uint64_t c) {
    __m256i cl = _mm256_set1_epi64x((long long)(c & 0xffffffff));
    __m256i ch = _mm256_set1_epi64x((long long)(c >> 32));
    __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(x, 32), cl),
                                     _mm256_mul_epu32(x, ch));
    return _mm256_add_epi64(_mm256_mul_epu32(x, cl), _mm256_slli_epi64(cross, 32));
}

/* XXH3's avalanche: x ^= x >> 37; x *= PMX1; x ^= x >> 32. */
static inline __m256i avalanche(__m256i x) {
    x = _mm256_xor_si256(x, _mm256_srli_epi64(x, 37));
    x = mullo_const(x, DCK_SX3_PMX1);
    return _mm256_xor_si256(x, _mm256_srli_epi64(x, 32));
}

/* Words i and i+1 of the four segments at p: lane k of *w0 is word i of
 * segment k. */
static inline void load_pair(const uint8_t *p, int i, __m256i *w0, __m256i *w1) {
    __m256i a = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(p + 8 * i))),
        _mm_loadu_si128((const __m128i *)(p + 256 + 8 * i)), 1); /* segments 0, 2 */
    __m256i b = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(p + 128 + 8 * i))),
        _mm_loadu_si128((const __m128i *)(p + 384 + 8 * i)), 1); /* segments 1, 3 */
    *w0 = _mm256_unpacklo_epi64(a, b);
    *w1 = _mm256_unpackhi_epi64(a, b);
}

static const uint64_t secret[16] = {
    DCK_SX3_S0, DCK_SX3_S1, DCK_SX3_S2,  DCK_SX3_S3,  DCK_SX3_S4,  DCK_SX3_S5,
    DCK_SX3_S6, DCK_SX3_S7, DCK_SX3_S8,  DCK_SX3_S9,  DCK_SX3_S10, DCK_SX3_S11,
    DCK_SX3_S12, DCK_SX3_S13, DCK_SX3_S14, DCK_SX3_S15};

/* XXH3_128bits_withSeed(segment, 128, seed) in each lane: the 17..128-byte
 * path, four rounds pairing chunk a (words 2a, 2a+1) from the front with
 * chunk 7 - a from the back, innermost pair first, then the 128-bit
 * finalisation. */
size_t dck_segments_avx2(const uint8_t *p, size_t nseg, uint64_t first, uint64_t lanes[2]) {
    __m256i seed = _mm256_add_epi64(_mm256_set1_epi64x((long long)first),
                                    _mm256_setr_epi64x(0, 1, 2, 3));
    /* (128 - seed) * P64_2, stepped as the seeds advance by 4 */
    __m256i len_term = mullo_const(_mm256_sub_epi64(_mm256_set1_epi64x(128), seed), DCK_SX3_P64_2);
    const __m256i len_step = _mm256_set1_epi64x((long long)(4 * DCK_SX3_P64_2));
    const __m256i four = _mm256_set1_epi64x(4);
    __m256i sum_lo = _mm256_setzero_si256(), sum_hi = _mm256_setzero_si256();
    size_t done = 0;
    for (; nseg - done >= 4; done += 4, p += 4 * 128) {
        __m256i acc0 = _mm256_set1_epi64x((long long)(128 * DCK_SX3_P64_1));
        __m256i acc1 = _mm256_setzero_si256();
#if defined(__clang__)
#pragma clang loop unroll(full)
#else
#pragma GCC unroll 4
#endif
        for (int round = 0; round < 4; round++) {
            int a = 3 - round, b = 7 - a;
            const uint64_t *s = secret + 4 * a;
            __m256i a0, a1, b0, b1;
            load_pair(p, 2 * a, &a0, &a1);
            load_pair(p, 2 * b, &b0, &b1);
            __m256i fa = mul128_fold(
                _mm256_xor_si256(a0, _mm256_add_epi64(_mm256_set1_epi64x((long long)s[0]), seed)),
                _mm256_xor_si256(a1, _mm256_sub_epi64(_mm256_set1_epi64x((long long)s[1]), seed)));
            __m256i fb = mul128_fold(
                _mm256_xor_si256(b0, _mm256_add_epi64(_mm256_set1_epi64x((long long)s[2]), seed)),
                _mm256_xor_si256(b1, _mm256_sub_epi64(_mm256_set1_epi64x((long long)s[3]), seed)));
            acc0 = _mm256_xor_si256(_mm256_add_epi64(acc0, fa), _mm256_add_epi64(b0, b1));
            acc1 = _mm256_xor_si256(_mm256_add_epi64(acc1, fb), _mm256_add_epi64(a0, a1));
        }
        /* low = avalanche(acc0 + acc1); high = -avalanche(acc0 P1 + acc1 P4 + (128 - seed) P2) */
        __m256i l = _mm256_add_epi64(acc0, acc1);
        __m256i h = _mm256_add_epi64(_mm256_add_epi64(mullo_const(acc0, DCK_SX3_P64_1),
                                                      mullo_const(acc1, DCK_SX3_P64_4)),
                                     len_term);
        sum_lo = _mm256_add_epi64(sum_lo, avalanche(l));
        sum_hi = _mm256_sub_epi64(sum_hi, avalanche(h));
        seed = _mm256_add_epi64(seed, four);
        len_term = _mm256_sub_epi64(len_term, len_step);
    }
    uint64_t v[4];
    _mm256_storeu_si256((__m256i *)v, sum_lo);
    lanes[0] += v[0] + v[1] + v[2] + v[3];
    _mm256_storeu_si256((__m256i *)v, sum_hi);
    lanes[1] += v[0] + v[1] + v[2] + v[3];
    return done;
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else
typedef int dck_digest_avx2_none; /* not x86: no kernel (ISO C wants a declaration) */
#endif

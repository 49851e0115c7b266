/* The segment loop of digest_avx512.c, included there once per build of it:
 * DCK_SEG_NAME (the function), DCK_SEG_ATTR (its target attribute, or
 * nothing) and DCK_SEG_FOLD (the folded 128-bit product) are defined by the
 * includer. Not a header to include anywhere else.
 *
 * XXH3_128bits_withSeed(segment, 128, seed) in each lane: the 17..128-byte
 * path, four rounds pairing chunk a (words 2a, 2a+1) from the front with
 * chunk 7 - a from the back, innermost pair first, then the 128-bit
 * finalisation. */
DCK_SEG_ATTR size_t DCK_SEG_NAME(const uint8_t *p, size_t nseg, uint64_t first, uint64_t lanes[2]) {
    __m512i seed = _mm512_add_epi64(_mm512_set1_epi64((long long)first),
                                    _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7));
    const __m512i eight = _mm512_set1_epi64(8);
    __m512i sum_lo = _mm512_setzero_si512(), sum_hi = _mm512_setzero_si512();
    size_t done = 0;
    for (; nseg - done >= 8; done += 8, p += 8 * 128) {
        __m512i r[8], w[16];
        for (int k = 0; k < 8; k++) r[k] = _mm512_loadu_si512(p + 128 * k);
        transpose8(r, w);
        for (int k = 0; k < 8; k++) r[k] = _mm512_loadu_si512(p + 128 * k + 64);
        transpose8(r, w + 8);
        __m512i acc0 = _mm512_set1_epi64((long long)(128 * DCK_SX3_P64_1));
        __m512i acc1 = _mm512_setzero_si512();
#if defined(__clang__)
#pragma clang loop unroll(full)
#else
#pragma GCC unroll 4
#endif
        for (int round = 0; round < 4; round++) {
            int a = 3 - round, b = 7 - a;
            const uint64_t *s = secret + 4 * a;
            __m512i fa = DCK_SEG_FOLD(
                _mm512_xor_si512(w[2 * a], _mm512_add_epi64(_mm512_set1_epi64((long long)s[0]), seed)),
                _mm512_xor_si512(w[2 * a + 1],
                                 _mm512_sub_epi64(_mm512_set1_epi64((long long)s[1]), seed)));
            __m512i fb = DCK_SEG_FOLD(
                _mm512_xor_si512(w[2 * b], _mm512_add_epi64(_mm512_set1_epi64((long long)s[2]), seed)),
                _mm512_xor_si512(w[2 * b + 1],
                                 _mm512_sub_epi64(_mm512_set1_epi64((long long)s[3]), seed)));
            acc0 = _mm512_xor_si512(_mm512_add_epi64(acc0, fa), _mm512_add_epi64(w[2 * b], w[2 * b + 1]));
            acc1 = _mm512_xor_si512(_mm512_add_epi64(acc1, fb), _mm512_add_epi64(w[2 * a], w[2 * a + 1]));
        }
        /* low = avalanche(acc0 + acc1); high = -avalanche(acc0 P1 + acc1 P4 + (128 - seed) P2) */
        __m512i l = _mm512_add_epi64(acc0, acc1);
        __m512i h = _mm512_add_epi64(
            _mm512_add_epi64(_mm512_mullo_epi64(acc0, _mm512_set1_epi64((long long)DCK_SX3_P64_1)),
                             _mm512_mullo_epi64(acc1, _mm512_set1_epi64((long long)DCK_SX3_P64_4))),
            _mm512_mullo_epi64(_mm512_sub_epi64(_mm512_set1_epi64(128), seed),
                               _mm512_set1_epi64((long long)DCK_SX3_P64_2)));
        sum_lo = _mm512_add_epi64(sum_lo, avalanche(l));
        sum_hi = _mm512_sub_epi64(sum_hi, avalanche(h));
        seed = _mm512_add_epi64(seed, eight);
    }
    /* unsigned sums (_mm512_reduce_add_epi64 adds as signed: overflow is UB) */
    uint64_t v[8];
    _mm512_storeu_si512(v, sum_lo);
    for (int k = 0; k < 8; k++) lanes[0] += v[k];
    _mm512_storeu_si512(v, sum_hi);
    for (int k = 0; k < 8; k++) lanes[1] += v[k];
    return done;
}

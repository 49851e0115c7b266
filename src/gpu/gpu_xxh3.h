/* XXH3-128 with a seed, for inputs of 0 to 128 bytes: the only lengths digest
 * v1 hashes (one segment). Written from the XXH3 specification
 * (xxhash_spec.md, "XXH3 Algorithm Description for small / medium inputs").
 *
 * This one header is compiled twice: as C for the CPU twin (src/gpu/digest_twin.c),
 * and as CUDA for the kernels (the .cu files in cuda/), so the twin's tests against
 * libxxhash test the very arithmetic the GPU runs. Integer operations only;
 * no table lookups (the secret words are constants), so device code needs no
 * constant memory and the host needs no copy of it.
 *
 * Only inputs up to 128 bytes are implemented: the 129..240 and >240 paths of
 * XXH3 are never used by digest v1 (segments are at most 128 bytes). */
#ifndef DCK_GPU_XXH3_H
#define DCK_GPU_XXH3_H

#include <stddef.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define DCK_HD __host__ __device__ __forceinline__
#else
#define DCK_HD static inline
#endif

/* The first 128 bytes of the XXH3 default secret, read as little-endian
 * 64-bit words: DCK_XS<i> = secret[8i : 8i+8]. */
#define DCK_XS0 0xbe4ba423396cfeb8ULL
#define DCK_XS1 0x1cad21f72c81017cULL
#define DCK_XS2 0xdb979083e96dd4deULL
#define DCK_XS3 0x1f67b3b7a4a44072ULL
#define DCK_XS4 0x78e5c0cc4ee679cbULL
#define DCK_XS5 0x2172ffcc7dd05a82ULL
#define DCK_XS6 0x8e2443f7744608b8ULL
#define DCK_XS7 0x4c263a81e69035e0ULL
#define DCK_XS8 0xcb00c391bb52283cULL
#define DCK_XS9 0xa32e531b8b65d088ULL
#define DCK_XS10 0x4ef90da297486471ULL
#define DCK_XS11 0xd8acdea946ef1938ULL
#define DCK_XS12 0x3f349ce33f76faa8ULL
#define DCK_XS13 0x1d4f0bc7c7bbdcf9ULL
#define DCK_XS14 0x3159b4cd4be0518aULL
#define DCK_XS15 0x647378d9c97e9fc8ULL

#define DCK_P32_1 0x9E3779B1ULL
#define DCK_P32_2 0x85EBCA77ULL
#define DCK_P64_1 0x9E3779B185EBCA87ULL
#define DCK_P64_2 0xC2B2AE3D27D4EB4FULL
#define DCK_P64_3 0x165667B19E3779F9ULL
#define DCK_P64_4 0x85EBCA77C2B2AE63ULL
#define DCK_PMX1 0x165667919E3779F9ULL
#define DCK_PMX2 0x9FB21C651E98DF25ULL

/* 64 x 64 -> 128-bit product. */
DCK_HD void dck_x3_mul128(uint64_t a, uint64_t b, uint64_t *lo, uint64_t *hi) {
#if defined(__CUDA_ARCH__)
    *lo = a * b;
    *hi = __umul64hi(a, b);
#else
    unsigned __int128 p = (unsigned __int128)a * b;
    *lo = (uint64_t)p;
    *hi = (uint64_t)(p >> 64);
#endif
}

DCK_HD uint64_t dck_x3_fold(uint64_t a, uint64_t b) {
    uint64_t lo, hi;
    dck_x3_mul128(a, b, &lo, &hi);
    return lo ^ hi;
}

DCK_HD uint32_t dck_x3_bswap32(uint32_t x) {
    return (x >> 24) | ((x >> 8) & 0xff00u) | ((x << 8) & 0xff0000u) | (x << 24);
}

DCK_HD uint64_t dck_x3_bswap64(uint64_t x) {
    return ((uint64_t)dck_x3_bswap32((uint32_t)x) << 32) | dck_x3_bswap32((uint32_t)(x >> 32));
}

DCK_HD uint32_t dck_x3_rotl32(uint32_t x, int r) {
    return (x << r) | (x >> (32 - r));
}

DCK_HD uint64_t dck_x3_rotl64(uint64_t x, int r) {
    return (x << r) | (x >> (64 - r));
}

/* Little-endian reads from bytes at any alignment. */
DCK_HD uint64_t dck_x3_rd64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

DCK_HD uint32_t dck_x3_rd32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

/* avalanche() of the specification (XXH3's own final mix). */
DCK_HD uint64_t dck_x3_avalanche(uint64_t x) {
    x ^= x >> 37;
    x *= DCK_PMX1;
    x ^= x >> 32;
    return x;
}

/* avalanche_XXH64() of the specification. */
DCK_HD uint64_t dck_x3_avalanche64(uint64_t x) {
    x ^= x >> 33;
    x *= DCK_P64_2;
    x ^= x >> 29;
    x *= DCK_P64_3;
    x ^= x >> 32;
    return x;
}

/* mixStep: one 16-byte chunk (two words) against two secret words. */
DCK_HD uint64_t dck_x3_mix16(uint64_t d0, uint64_t d1, uint64_t s0, uint64_t s1, uint64_t seed) {
    return dck_x3_fold(d0 ^ (s0 + seed), d1 ^ (s1 - seed));
}

/* mixTwoChunks on the two accumulators: chunk a = (a0, a1) with secret
 * words (s0, s1), chunk b = (b0, b1) with (s2, s3). */
DCK_HD void dck_x3_mix32(uint64_t acc[2], uint64_t a0, uint64_t a1, uint64_t b0, uint64_t b1,
                         uint64_t s0, uint64_t s1, uint64_t s2, uint64_t s3, uint64_t seed) {
    acc[0] += dck_x3_mix16(a0, a1, s0, s1, seed);
    acc[1] += dck_x3_mix16(b0, b1, s2, s3, seed);
    acc[0] ^= b0 + b1;
    acc[1] ^= a0 + a1;
}

/* Finalization of the 17..240-byte path. */
DCK_HD void dck_x3_finish_17to128(const uint64_t acc[2], uint64_t len, uint64_t seed,
                                  uint64_t *low, uint64_t *high) {
    uint64_t l = acc[0] + acc[1];
    uint64_t h = acc[0] * DCK_P64_1 + acc[1] * DCK_P64_4 + (len - seed) * DCK_P64_2;
    *low = dck_x3_avalanche(l);
    *high = (uint64_t)0 - dck_x3_avalanche(h);
}

/* XXH3_128bits_withSeed(p, len, seed) for 0 <= len <= 128. Reads bytes one
 * by one (any alignment); the GPU uses it for short last segments and for
 * segments at addresses that are not 16-byte aligned. */
DCK_HD void dck_xxh3_128_upto128(const uint8_t *p, uint32_t len, uint64_t seed, uint64_t *low,
                                 uint64_t *high) {
    if (len == 0) {
        *low = dck_x3_avalanche64(seed ^ DCK_XS8 ^ DCK_XS9);
        *high = dck_x3_avalanche64(seed ^ DCK_XS10 ^ DCK_XS11);
        return;
    }
    if (len <= 3) {
        uint32_t combined = (uint32_t)p[len - 1] | (len << 8) | ((uint32_t)p[0] << 16) |
                            ((uint32_t)p[len >> 1] << 24);
        /* the secret read as 32-bit words: secret[0:16] */
        uint32_t w0 = (uint32_t)DCK_XS0, w1 = (uint32_t)(DCK_XS0 >> 32);
        uint32_t w2 = (uint32_t)DCK_XS1, w3 = (uint32_t)(DCK_XS1 >> 32);
        uint64_t l = ((uint64_t)(w0 ^ w1) + seed) ^ (uint64_t)combined;
        uint64_t h = ((uint64_t)(w2 ^ w3) - seed) ^
                     (uint64_t)dck_x3_rotl32(dck_x3_bswap32(combined), 13);
        *low = dck_x3_avalanche64(l);
        *high = dck_x3_avalanche64(h);
        return;
    }
    if (len <= 8) {
        uint32_t first = dck_x3_rd32(p), last = dck_x3_rd32(p + len - 4);
        uint64_t mseed = seed ^ ((uint64_t)dck_x3_bswap32((uint32_t)seed) << 32);
        uint64_t combined = (uint64_t)first | ((uint64_t)last << 32);
        uint64_t v = ((DCK_XS2 ^ DCK_XS3) + mseed) ^ combined;
        uint64_t lo, hi;
        dck_x3_mul128(v, DCK_P64_1 + ((uint64_t)len << 2), &lo, &hi);
        hi += lo << 1;
        lo ^= hi >> 3;
        lo ^= lo >> 35;
        lo *= DCK_PMX2;
        lo ^= lo >> 28;
        *low = lo;
        *high = dck_x3_avalanche(hi);
        return;
    }
    if (len <= 16) {
        uint64_t first = dck_x3_rd64(p), last = dck_x3_rd64(p + len - 8);
        uint64_t v1 = ((DCK_XS4 ^ DCK_XS5) - seed) ^ first ^ last;
        uint64_t v2 = ((DCK_XS6 ^ DCK_XS7) + seed) ^ last;
        uint64_t lo, hi;
        dck_x3_mul128(v1, DCK_P64_1, &lo, &hi);
        lo += (uint64_t)(len - 1) << 54;
        hi += ((v2 >> 32) << 32) + (uint64_t)(uint32_t)v2 * DCK_P32_2;
        lo ^= dck_x3_bswap64(hi);
        uint64_t lo2, hi2;
        dck_x3_mul128(lo, DCK_P64_2, &lo2, &hi2);
        hi2 += hi * DCK_P64_2;
        *low = dck_x3_avalanche(lo2);
        *high = dck_x3_avalanche(hi2);
        return;
    }
    /* 17..128: chunk i from the front paired with chunk i from the back,
     * rounds from the innermost pair outwards. */
    uint64_t acc[2] = {(uint64_t)len * DCK_P64_1, 0};
    if (len > 32) {
        if (len > 64) {
            if (len > 96) {
                dck_x3_mix32(acc, dck_x3_rd64(p + 48), dck_x3_rd64(p + 56),
                             dck_x3_rd64(p + len - 64), dck_x3_rd64(p + len - 56), DCK_XS12,
                             DCK_XS13, DCK_XS14, DCK_XS15, seed);
            }
            dck_x3_mix32(acc, dck_x3_rd64(p + 32), dck_x3_rd64(p + 40),
                         dck_x3_rd64(p + len - 48), dck_x3_rd64(p + len - 40), DCK_XS8, DCK_XS9,
                         DCK_XS10, DCK_XS11, seed);
        }
        dck_x3_mix32(acc, dck_x3_rd64(p + 16), dck_x3_rd64(p + 24), dck_x3_rd64(p + len - 32),
                     dck_x3_rd64(p + len - 24), DCK_XS4, DCK_XS5, DCK_XS6, DCK_XS7, seed);
    }
    dck_x3_mix32(acc, dck_x3_rd64(p), dck_x3_rd64(p + 8), dck_x3_rd64(p + len - 16),
                 dck_x3_rd64(p + len - 8), DCK_XS0, DCK_XS1, DCK_XS2, DCK_XS3, seed);
    dck_x3_finish_17to128(acc, len, seed, low, high);
}

/* The same hash for a whole 128-byte segment given as its 16 little-endian
 * 64-bit words w[0..15] (already loaded into registers by the kernel). */
DCK_HD void dck_xxh3_128_seg128(const uint64_t w[16], uint64_t seed, uint64_t *low,
                                uint64_t *high) {
    uint64_t acc[2] = {(uint64_t)128 * DCK_P64_1, 0};
    /* round i pairs chunk i (words 2i, 2i+1) with chunk 7-i */
    dck_x3_mix32(acc, w[6], w[7], w[8], w[9], DCK_XS12, DCK_XS13, DCK_XS14, DCK_XS15, seed);
    dck_x3_mix32(acc, w[4], w[5], w[10], w[11], DCK_XS8, DCK_XS9, DCK_XS10, DCK_XS11, seed);
    dck_x3_mix32(acc, w[2], w[3], w[12], w[13], DCK_XS4, DCK_XS5, DCK_XS6, DCK_XS7, seed);
    dck_x3_mix32(acc, w[0], w[1], w[14], w[15], DCK_XS0, DCK_XS1, DCK_XS2, DCK_XS3, seed);
    dck_x3_finish_17to128(acc, 128, seed, low, high);
}

/* ------------------------------------------------------------------ kernel geometry
 * How the segment-sum kernel cuts and loads its work; shared with the CPU
 * twin so that the twin's tests cover the same index arithmetic.
 *
 * The whole segments of a region are cut into tiles of DCK_TILE_SEGMENTS;
 * tile t goes to block t % nblocks. A block first copies the tile into
 * shared memory as aligned 64-bit words (coalesced loads, whatever the
 * region's alignment: the first word starts at the 8-byte boundary at or
 * below the tile's first byte), then thread k rebuilds the 16 words of
 * segment k with a funnel shift and hashes it. Word q of a tile is kept in
 * slot q + q/16: one padding word per 128 bytes, so the 32 threads of a warp
 * reading word i of their segments hit distinct banks. A short last segment
 * (only a tensor's last segment can be short) is hashed by thread 0 of
 * block 0 on its own. Every word loaded is 8-byte aligned and holds at least
 * one byte of the region, so no load crosses into a page the region does not
 * touch. */
#define DCK_KERNEL_THREADS 256
#define DCK_TILE_SEGMENTS DCK_KERNEL_THREADS
#define DCK_STAGE_SLOTS (DCK_TILE_SEGMENTS * 17 + 1)

/* Segments [*first, *first + *count) of tile t out of nseg whole segments. */
DCK_HD void dck_tile_range(uint64_t t, uint64_t nseg, uint64_t *first, uint32_t *count) {
    uint64_t f = t * DCK_TILE_SEGMENTS;
    uint64_t left = f < nseg ? nseg - f : 0;
    *first = f;
    *count = (uint32_t)(left < DCK_TILE_SEGMENTS ? left : DCK_TILE_SEGMENTS);
}

/* Aligned words a tile of count segments starting at address start needs. */
DCK_HD uint32_t dck_tile_words(uint64_t start, uint32_t count) {
    uint64_t a = start & ~(uint64_t)7;
    return (uint32_t)((start + (uint64_t)count * 128 - a + 7) / 8);
}

DCK_HD uint32_t dck_stage_slot(uint32_t q) {
    return q + (q >> 4);
}

/* The 16 little-endian words of segment k of a staged tile; shift is
 * 8 * (start % 8), the tile's misalignment in bits. */
DCK_HD void dck_stage_segment(const uint64_t *stage, uint32_t k, uint32_t shift, uint64_t w[16]) {
    uint32_t base = 17 * k; /* slot of word 16k */
    if (shift == 0) {
        for (int i = 0; i < 16; i++) w[i] = stage[base + i];
    } else {
        uint64_t prev = stage[base];
        for (int i = 0; i < 16; i++) {
            uint64_t next = stage[base + i + 1 + (i == 15)]; /* word 16k+16 is slot 17k+17 */
            w[i] = (prev >> shift) | (next << (64 - shift));
            prev = next;
        }
    }
}

#endif /* DCK_GPU_XXH3_H */

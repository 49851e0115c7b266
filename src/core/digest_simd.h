/* Digest v1's inner loops, built once per instruction set and picked at run
 * time (src/core/digest.c): the 128-byte segment hash of many segments at
 * once across vector lanes, and the XXH3-128 stream update of whole-file
 * hashes. Every kernel gives the same bits as the portable one (libxxhash's
 * XXH3_128bits_withSeed per segment); tests/check_digest_simd.c checks it on
 * every kernel the CPU runs.
 *
 * The x86-64 kernels live in their own files (digest_avx2.c,
 * digest_avx512.c with digest_avx512_loop.h), compiled with target attributes, so the default build
 * still runs on any x86-64 and only the chosen kernel executes the newer
 * instructions. On other architectures only the portable kernel exists. */
#ifndef DCK_DIGEST_SIMD_H
#define DCK_DIGEST_SIMD_H

#include "core/core.h"

#include <stddef.h>
#include <stdint.h>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define DCK_DIGEST_X86 1
#else
#define DCK_DIGEST_X86 0
#endif

/* Lane sums of the first segments of p: adds to lanes[0] (low64 sum) and
 * lanes[1] (high64 sum) the hashes of segments [0, k) of the nseg whole
 * 128-byte segments at p (any alignment), segment i with seed first + i, and
 * returns k (a multiple of the kernel's width, at most nseg). The caller
 * hashes the rest. */
typedef size_t (*dck_segments_fn)(const uint8_t *p, size_t nseg, uint64_t first,
                                  uint64_t lanes[2]);
/* XXH3_128bits_update on a state from dck_xxh3_create. */
typedef void (*dck_xxh3_update_fn)(void *state, const void *data, size_t len);

typedef struct {
    const char *name;           /* "portable", "avx2", "avx512", "avx512ifma" */
    const char *needs;          /* what the CPU must have, for messages */
    int (*cpu_runs)(void);      /* NULL: any CPU */
    dck_segments_fn segments;   /* NULL: the portable loop only */
    dck_xxh3_update_fn xxh3_update;
} dck_digest_kernel;

/* Every kernel this build has, the portable one first. */
size_t dck_digest_kernel_count(void);
const dck_digest_kernel *dck_digest_kernel_at(size_t i);
/* Whether this CPU (and its OS) runs kernel k. */
int dck_digest_kernel_supported(const dck_digest_kernel *k);
/* The kernel dck_segments_sum and dck_xxh3_update use: the environment's
 * DETCHECK_DIGEST_KERNEL (a kernel name, when the CPU runs it), else the
 * widest the CPU runs. Chosen once per process. */
const dck_digest_kernel *dck_digest_kernel_active(void);
/* dck_segments_sum with a given kernel (tests and benchmarks). */
dck_lanes dck_segments_sum_kernel(const dck_digest_kernel *k, const void *data, size_t len,
                                  uint64_t first_segment);

/* A whole-file XXH3-128 stream (an XXH3_state_t, 64-byte aligned), updated
 * by the active kernel. create returns NULL when out of memory. */
typedef struct dck_xxh3 dck_xxh3;
dck_xxh3 *dck_xxh3_create(void);
void dck_xxh3_update(dck_xxh3 *s, const void *data, size_t len);
dck_digest dck_xxh3_digest(const dck_xxh3 *s);
void dck_xxh3_free(dck_xxh3 *s);

/* ------------------------------------------------------------------ the kernels
 * Only digest.c calls these, after checking the CPU. */
#if DCK_DIGEST_X86
size_t dck_segments_avx2(const uint8_t *p, size_t nseg, uint64_t first, uint64_t lanes[2]);
void dck_xxh3_update_avx2(void *state, const void *data, size_t len);
size_t dck_segments_avx512(const uint8_t *p, size_t nseg, uint64_t first, uint64_t lanes[2]);
size_t dck_segments_avx512ifma(const uint8_t *p, size_t nseg, uint64_t first, uint64_t lanes[2]);
void dck_xxh3_update_avx512(void *state, const void *data, size_t len);
#endif

/* ------------------------------------------------------------------ XXH3 constants
 * XXH3_128bits_withSeed of a 128-byte input (xxhash_spec.md, "17-128
 * bytes"), the only length a whole segment has: the first 128 bytes of the
 * default secret as little-endian 64-bit words (the same words as
 * src/gpu/gpu_xxh3.h, which a lower layer may not include), and the primes. */
#define DCK_SX3_S0 0xbe4ba423396cfeb8ULL
#define DCK_SX3_S1 0x1cad21f72c81017cULL
#define DCK_SX3_S2 0xdb979083e96dd4deULL
#define DCK_SX3_S3 0x1f67b3b7a4a44072ULL
#define DCK_SX3_S4 0x78e5c0cc4ee679cbULL
#define DCK_SX3_S5 0x2172ffcc7dd05a82ULL
#define DCK_SX3_S6 0x8e2443f7744608b8ULL
#define DCK_SX3_S7 0x4c263a81e69035e0ULL
#define DCK_SX3_S8 0xcb00c391bb52283cULL
#define DCK_SX3_S9 0xa32e531b8b65d088ULL
#define DCK_SX3_S10 0x4ef90da297486471ULL
#define DCK_SX3_S11 0xd8acdea946ef1938ULL
#define DCK_SX3_S12 0x3f349ce33f76faa8ULL
#define DCK_SX3_S13 0x1d4f0bc7c7bbdcf9ULL
#define DCK_SX3_S14 0x3159b4cd4be0518aULL
#define DCK_SX3_S15 0x647378d9c97e9fc8ULL
#define DCK_SX3_P64_1 0x9E3779B185EBCA87ULL
#define DCK_SX3_P64_2 0xC2B2AE3D27D4EB4FULL
#define DCK_SX3_P64_4 0x85EBCA77C2B2AE63ULL
#define DCK_SX3_PMX1 0x165667919E3779F9ULL

#endif

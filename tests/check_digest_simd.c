/* The digest kernels (src/core/digest_simd.h): every SIMD kernel this CPU
 * runs gives the same lane sums as the portable path (libxxhash's
 * XXH3_128bits_withSeed per segment) on random data of every length
 * 0..4096, at many segment offsets (seeds) and every alignment, and the
 * same whole-file XXH3-128 over any split of a stream. A kernel the CPU
 * lacks is skipped, by name. */
#include "testutil.h"
#include "core/digest_simd.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

static uint64_t rng_state;
static uint64_t rnd(void) { /* splitmix64: fixed, so failures reproduce */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static void fill(uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)rnd();
}

/* The digest's definition, segment by segment, straight from libxxhash. */
static dck_lanes reference(const uint8_t *p, size_t len, uint64_t first) {
    dck_lanes l = {0, 0};
    for (size_t off = 0, j = first; off < len; off += 128, j++) {
        size_t n = len - off < 128 ? len - off : 128;
        XXH128_hash_t h = XXH3_128bits_withSeed(p + off, n, j);
        l.lo += h.low64;
        l.hi += h.high64;
    }
    return l;
}

/* Segment offsets: small ones, around 2^32 and 2^63, the top of the range
 * (seeds wrap), and random ones. */
static uint64_t first_segment(size_t i) {
    static const uint64_t fixed[] = {0, 1, 7, 8, 255, 0xffffffffULL, 0x100000000ULL,
                                     0x7fffffffffffffffULL, 0xfffffffffffffff0ULL, ~0ULL};
    size_t n = sizeof fixed / sizeof fixed[0];
    return i < n ? fixed[i] : rnd() >> (rnd() % 64);
}

/* The kernel named by the test's loop index; NULL (and a visible skip) when
 * the CPU lacks it. */
static const dck_digest_kernel *kernel_or_skip(size_t i, int *skipped) {
    const dck_digest_kernel *k = dck_digest_kernel_at(i);
    *skipped = 0;
    if (!dck_digest_kernel_supported(k)) {
        *skipped = 1;
        return NULL;
    }
    return k;
}

START_TEST(kernel_lanes_every_length) {
    int skipped;
    const dck_digest_kernel *k = kernel_or_skip((size_t)_i, &skipped);
    if (skipped)
        TU_SKIP("kernel %s: this CPU lacks %s", dck_digest_kernel_at((size_t)_i)->name,
                dck_digest_kernel_at((size_t)_i)->needs);
    rng_state = 0x5eed0000 + (uint64_t)_i;
    uint8_t *buf = malloc(4096 + 64);
    ck_assert_ptr_nonnull(buf);
    size_t checked = 0;
    for (size_t len = 0; len <= 4096; len++) {
        fill(buf, len + 64);
        /* three offsets per length, every misalignment 0..63 over the lengths */
        for (size_t t = 0; t < 3; t++) {
            const uint8_t *p = buf + (len * 3 + t) % 64;
            uint64_t first = first_segment((len * 3 + t) % 40);
            dck_lanes want = reference(p, len, first);
            dck_lanes got = dck_segments_sum_kernel(k, p, len, first);
            ck_assert_msg(got.lo == want.lo && got.hi == want.hi,
                          "kernel %s, %zu bytes at misalignment %zu, first segment %llu: "
                          "%016llx %016llx, portable %016llx %016llx",
                          k->name, len, (size_t)((uintptr_t)p % 64), (unsigned long long)first,
                          (unsigned long long)got.lo, (unsigned long long)got.hi,
                          (unsigned long long)want.lo, (unsigned long long)want.hi);
            checked++;
        }
    }
    ck_assert_uint_eq(checked, 3 * 4097);
    printf("kernel %s: %zu buffers of 0..4096 bytes agree with the portable path\n", k->name,
           checked);
    free(buf);
}
END_TEST

/* Long runs at many offsets: the vector loop's seeds must advance exactly. */
START_TEST(kernel_lanes_long_runs) {
    int skipped;
    const dck_digest_kernel *k = kernel_or_skip((size_t)_i, &skipped);
    if (skipped)
        TU_SKIP("kernel %s: this CPU lacks %s", dck_digest_kernel_at((size_t)_i)->name,
                dck_digest_kernel_at((size_t)_i)->needs);
    rng_state = 0x10c0 + (uint64_t)_i;
    size_t n = (size_t)1 << 20;
    uint8_t *buf = malloc(n + 8);
    fill(buf, n + 8);
    for (int t = 0; t < 200; t++) {
        size_t len = (size_t)(rnd() % (n - 128)) + (t < 50 ? 0 : 128) + 1;
        if (len > n) len = n;
        uint64_t first = first_segment((size_t)t);
        const uint8_t *p = buf + t % 8;
        dck_lanes want = reference(p, len, first);
        dck_lanes got = dck_segments_sum_kernel(k, p, len, first);
        ck_assert_msg(got.lo == want.lo && got.hi == want.hi, "kernel %s, %zu bytes, first %llu",
                      k->name, len, (unsigned long long)first);
    }
    /* constant inputs: all zero and all ones (carries in every product) */
    for (int v = 0; v < 2; v++) {
        memset(buf, v ? 0xff : 0, 4096);
        for (uint64_t first = 0; first < 64; first += 5) {
            dck_lanes want = reference(buf, 4096, first);
            dck_lanes got = dck_segments_sum_kernel(k, buf, 4096, first);
            ck_assert(got.lo == want.lo && got.hi == want.hi);
        }
    }
    free(buf);
}
END_TEST

/* The whole-file hash: the kernel's stream update, over any split, is
 * libxxhash's one-shot XXH3-128. */
START_TEST(kernel_xxh3_stream) {
    int skipped;
    const dck_digest_kernel *k = kernel_or_skip((size_t)_i, &skipped);
    if (skipped)
        TU_SKIP("kernel %s: this CPU lacks %s", dck_digest_kernel_at((size_t)_i)->name,
                dck_digest_kernel_at((size_t)_i)->needs);
    rng_state = 0xf11e + (uint64_t)_i;
    size_t n = (size_t)3 << 20;
    uint8_t *buf = malloc(n);
    fill(buf, n);
    const size_t lens[] = {0, 1, 16, 128, 129, 240, 241, 1023, 1024, 1025, 65536, 1000003, n};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        size_t len = lens[li];
        XXH128_hash_t want = XXH3_128bits(buf, len);
        for (int split = 0; split < 4; split++) {
            XXH3_state_t *st = XXH3_createState();
            XXH3_128bits_reset(st);
            for (size_t off = 0; off < len;) {
                size_t take = split == 0 ? len : (size_t)(rnd() % (split == 1 ? 300 : 300000)) + 1;
                if (take > len - off) take = len - off;
                k->xxh3_update(st, buf + off, take);
                off += take;
            }
            XXH128_hash_t got = XXH3_128bits_digest(st);
            ck_assert_msg(got.low64 == want.low64 && got.high64 == want.high64,
                          "kernel %s: xxh128 of %zu bytes, split %d", k->name, len, split);
            XXH3_freeState(st);
        }
    }
    free(buf);
}
END_TEST

/* The kernel in use: one the CPU runs, the widest unless the environment
 * names another; dck_segments_sum agrees with the definition. */
START_TEST(active_kernel) {
    const dck_digest_kernel *k = dck_digest_kernel_active();
    ck_assert_ptr_nonnull(k);
    ck_assert(dck_digest_kernel_supported(k));
    if (!getenv("DETCHECK_DIGEST_KERNEL"))
        for (size_t i = dck_digest_kernel_count(); i-- > 0;)
            if (dck_digest_kernel_supported(dck_digest_kernel_at(i))) {
                ck_assert_str_eq(k->name, dck_digest_kernel_at(i)->name);
                break;
            }
    ck_assert_str_eq(dck_digest_kernel_at(0)->name, "portable");
    ck_assert(dck_digest_kernel_supported(dck_digest_kernel_at(0)));
    ck_assert_ptr_null(dck_digest_kernel_at(dck_digest_kernel_count()));
    rng_state = 42;
    uint8_t buf[3000];
    fill(buf, sizeof buf);
    dck_lanes want = reference(buf, sizeof buf, 99), got = dck_segments_sum(buf, sizeof buf, 99);
    ck_assert(got.lo == want.lo && got.hi == want.hi);
    /* the streaming helper the hashing engine uses */
    dck_xxh3 *x = dck_xxh3_create();
    ck_assert_ptr_nonnull(x);
    dck_xxh3_update(x, buf, 1000);
    dck_xxh3_update(x, buf + 1000, 0);
    dck_xxh3_update(x, buf + 1000, 2000);
    ck_assert(dck_digest_equal(dck_xxh3_digest(x), dck_xxh128(buf, sizeof buf)));
    dck_xxh3_free(x);
    printf("active digest kernel: %s\n", k->name);
}
END_TEST

int main(void) {
    Suite *s = suite_create("digest_simd");
    TCase *tc = tcase_create("kernels");
    tcase_set_timeout(tc, 120);
    int n = (int)dck_digest_kernel_count();
    /* one test per kernel, so a kernel the CPU lacks skips by name */
    tcase_add_loop_test(tc, kernel_lanes_every_length, 0, n);
    tcase_add_loop_test(tc, kernel_lanes_long_runs, 0, n);
    tcase_add_loop_test(tc, kernel_xxh3_stream, 0, n);
    tcase_add_test(tc, active_kernel);
    suite_add_tcase(s, tc);
    for (int i = 0; i < n; i++)
        printf("digest kernel %s: %s\n", dck_digest_kernel_at((size_t)i)->name,
               dck_digest_kernel_supported(dck_digest_kernel_at((size_t)i))
                   ? "tested"
                   : "skipped: the CPU lacks it");
    fflush(stdout);
    return tu_run(s);
}

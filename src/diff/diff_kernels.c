/* The element kernels of detcheck diff (see diff_kernels.h).
 *
 * The reference is the scalar loop: per element, classify both sides, add
 * the squares of the finite pairs to three running sums, and for the pairs
 * whose bits differ count, measure (abs, rel, ULP) and test the
 * tolerances. The vector kernels compute the same per-element values with
 * the same IEEE operations (-ffp-contract=off holds for vectors too), 4 or
 * 8 elements at a time:
 *   - counts are integer lane sums, flushed per block of 256 elements;
 *   - maxima are lane maxima of values that are never NaN (pairs that do not
 *     count are +0), folded with the reference's strict '>' at the end, so
 *     the result is the reference's whatever the order;
 *   - the squares are computed a vector at a time but added to the three
 *     sums one element at a time, in element order (three scalar chains
 *     side by side, each the scalar code's additions); a pair that is skipped adds
 *     -0.0, the identity of IEEE addition (x + -0 == x for every x, -0
 *     included), so the sums are the reference's bit for bit;
 *   - a block with no NaN or infinity takes a path without those masks,
 *     and divides for the relative difference only in steps where a lane
 *     may beat its running maximum (REL_MAX in diff_kernels_impl.h);
 *   - the first differing element is found by scanning the first block that
 *     has one;
 *   - sign changes are a lane count, and the same-sign ULP maximum the lane
 *     maximum of the ULP distance with sign-change lanes masked to 0.
 * The same source (diff_kernels_impl.h) is built for AVX2 and for AVX-512
 * on x86-64, chosen at run time; the reference is the portable path. A
 * dtype without a vector kernel (integers) and the last n % LANES elements
 * take the reference. */
#include "common/common.h"
#include "common/element.h"
#include "diff/diff_kernels.h"

#include <math.h>
#include <string.h>

/* Element size of a dtype as a constant (dck_dtype_size is a table
 * look-up the compiler cannot fold). */
static inline __attribute__((always_inline)) size_t elem_size(dck_dtype t) {
    switch (t) {
    case DCK_F64:
    case DCK_I64:
    case DCK_U64: return 8;
    case DCK_F32:
    case DCK_I32:
    case DCK_U32: return 4;
    case DCK_F16:
    case DCK_BF16:
    case DCK_I16:
    case DCK_U16: return 2;
    default: return 1;
    }
}

/* ------------------------------------------------------------------ reference */

/* The element loop, specialised per dtype by constant propagation. */
static inline __attribute__((always_inline)) void
elements_loop(dck_dtype t, const uint8_t *pa, const uint8_t *pb, size_t n, uint64_t first_flat,
              const dck_diff_tolerance *tol, dck_diff_stats *acc) {
    const size_t sz = elem_size(t);
    const int isf = dck_dtype_is_float(t);
    const int has_abs = tol && (tol->atol >= 0 || tol->rtol >= 0);
    const int has_ulp = tol && tol->ulp >= 0;
    const double atol = (tol && tol->atol > 0) ? tol->atol : 0;
    const double rtol = (tol && tol->rtol > 0) ? tol->rtol : 0;
    const uint64_t ulp_tol = has_ulp ? (uint64_t)tol->ulp : 0;
    dck_diff_stats s = *acc;
    for (size_t i = 0; i < n; i++) {
        uint64_t ua = load_bits(pa + i * sz, sz), ub = load_bits(pb + i * sz, sz);
        int ca = 0, cb = 0;
        if (isf) {
            ca = classify(t, ua);
            cb = classify(t, ub);
            s.nan_a += ca == 2;
            s.inf_a += ca == 1;
            s.nan_b += cb == 2;
            s.inf_b += cb == 1;
        }
        double va = bits_to_double(t, ua), vb = bits_to_double(t, ub);
        if (ca == 0 && cb == 0) {
            double d = va - vb;
            s.sum_sq_diff += d * d;
            s.sum_sq_a += va * va;
            s.sum_sq_b += vb * vb;
        }
        if (ua == ub) continue;
        s.diff_count++;
        if (s.first_flat == UINT64_MAX) s.first_flat = first_flat + i;
        if (ca == 2 || cb == 2) {
            /* No numeric distance; never within tolerance. */
            if (ca == 2 && cb == 2) s.nan_payload++;
            else s.nan_vs_number++;
            s.beyond_count++;
            continue;
        }
        uint64_t ulp;
        double abs_d, mag;
        if (isf) {
            ulp = float_ulp(t, ua, ub);
            abs_d = fabs(va - vb);
            mag = fmax(fabs(va), fabs(vb));
        } else {
            ulp = int_dist(t, ua, ub);
            abs_d = (double)ulp;
            mag = fmax(fabs(va), fabs(vb));
        }
        double rel;
        if (isinf(abs_d)) rel = INFINITY;
        else rel = mag > 0 ? abs_d / mag : 0;
        if (ulp > s.max_ulp) s.max_ulp = ulp;
        if (sign_change(t, ua, ub)) s.sign_changes++;
        else if (ulp > s.max_ulp_same_sign) s.max_ulp_same_sign = ulp;
        if (abs_d > s.max_abs) s.max_abs = abs_d;
        if (rel > s.max_rel) s.max_rel = rel;
        int within = 0;
        if (ca == 0 && cb == 0) {
            if (has_abs && abs_d <= atol + rtol * mag) within = 1;
            if (has_ulp && ulp <= ulp_tol) within = 1;
        }
        if (!within) s.beyond_count++;
    }
    s.count += n;
    *acc = s;
}

/* One element of an equal run into lane i % 4 (see diff_kernels.h). */
static inline __attribute__((always_inline)) void
equal_one(dck_dtype t, uint64_t u, uint64_t *nan, uint64_t *inf, double *lane) {
    int c = dck_dtype_is_float(t) ? classify(t, u) : 0;
    *nan += c == 2;
    *inf += c == 1;
    double v = bits_to_double(t, u);
    v = c ? 0.0 : v;
    *lane += v * v;
}

/* Elements [i, n) of an equal run, lanes and counts carried in. */
static inline __attribute__((always_inline)) void
equal_finish(dck_dtype t, const uint8_t *p, size_t i, size_t n, uint64_t nan, uint64_t inf,
             double lanes[4], dck_diff_stats *acc) {
    const size_t sz = elem_size(t);
    for (; i < n; i++) equal_one(t, load_bits(p + i * sz, sz), &nan, &inf, &lanes[i & 3]);
    double sq = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
    acc->nan_a += nan;
    acc->nan_b += nan;
    acc->inf_a += inf;
    acc->inf_b += inf;
    acc->sum_sq_a += sq;
    acc->sum_sq_b += sq;
    acc->count += n;
}

static inline __attribute__((always_inline)) void
equal_loop(dck_dtype t, const uint8_t *p, size_t n, dck_diff_stats *acc) {
    double lanes[4] = {0, 0, 0, 0};
    equal_finish(t, p, 0, n, 0, 0, lanes, acc);
}

#define DTYPE_CASES(X)                                                                           \
    X(DCK_BOOL) X(DCK_U8) X(DCK_I8) X(DCK_I16) X(DCK_U16) X(DCK_F16) X(DCK_BF16) X(DCK_I32)      \
        X(DCK_U32) X(DCK_F32) X(DCK_F64) X(DCK_I64) X(DCK_U64) X(DCK_F8_E4M3) X(DCK_F8_E5M2)

static void ref_elements(dck_dtype t, const void *a, const void *b, size_t n, uint64_t first_flat,
                         const dck_diff_tolerance *tol, dck_diff_stats *acc) {
    switch (t) {
#define X(T)                                                                                     \
    case T: elements_loop(T, a, b, n, first_flat, tol, acc); break;
        DTYPE_CASES(X)
#undef X
    default: break;
    }
}

static void ref_equal(dck_dtype t, const void *p, size_t n, dck_diff_stats *acc) {
    switch (t) {
#define X(T)                                                                                     \
    case T: equal_loop(T, p, n, acc); break;
        DTYPE_CASES(X)
#undef X
    default: break;
    }
}

/* ------------------------------------------------------------------ vector kernels */

/* The vector kernels: GCC/Clang vector extensions, built for AVX2 and for
 * AVX-512 and chosen at run time (x86-64). Elsewhere, and on x86-64 CPUs
 * without AVX2, the reference runs: the same template built for plain SSE2
 * (two doubles per vector) measured slower than the scalar loop, since
 * SSE2 has no 64-bit compares. */
#if (defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 9)) && defined(__x86_64__)
#define DCK_DIFF_X86 1
#endif

#if DCK_DIFF_X86

#include <immintrin.h>

/* First differing element of block [i0, i1) into s->first_flat. */
static inline __attribute__((always_inline)) void
first_in_block(dck_dtype t, const uint8_t *pa, const uint8_t *pb, size_t i0, size_t i1,
               uint64_t first_flat, dck_diff_stats *s) {
    const size_t sz = elem_size(t);
    for (size_t i = i0; i < i1; i++)
        if (memcmp(pa + i * sz, pb + i * sz, sz) != 0) {
            s->first_flat = first_flat + i;
            return;
        }
}

typedef struct {
    int has_abs, has_ulp;
    double atol, rtol;
    uint64_t ulp_tol;
} tol_consts;

/* The tolerances as the reference reads them. */
static inline __attribute__((always_inline)) tol_consts tol_of(const dck_diff_tolerance *tol) {
    tol_consts c;
    c.has_abs = tol && (tol->atol >= 0 || tol->rtol >= 0);
    c.has_ulp = tol && tol->ulp >= 0;
    c.atol = (tol && tol->atol > 0) ? tol->atol : 0;
    c.rtol = (tol && tol->rtol > 0) ? tol->rtol : 0;
    c.ulp_tol = c.has_ulp ? (uint64_t)tol->ulp : 0;
    return c;
}

#define LANES 4
#define SUFFIX avx2
#define KATTR __attribute__((target("avx2")))
#include "diff/diff_kernels_impl.h"
#undef LANES
#undef SUFFIX
#undef KATTR

#define LANES 8
#define SUFFIX avx512
#define KATTR __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq")))
#include "diff/diff_kernels_impl.h"
#undef LANES
#undef SUFFIX
#undef KATTR

#endif /* DCK_DIFF_X86 */

/* ------------------------------------------------------------------ dispatch */

static const char *const isa_names[DCK_DIFF_ISA_COUNT] = {"scalar", "avx2", "avx512"};

const char *dck_diff_isa_name(dck_diff_isa isa) {
    return (unsigned)isa < DCK_DIFF_ISA_COUNT ? isa_names[isa] : "?";
}

int dck_diff_isa_available(dck_diff_isa isa) {
    switch (isa) {
    case DCK_DIFF_ISA_SCALAR: return 1;
#if DCK_DIFF_X86
    case DCK_DIFF_ISA_AVX2:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2");
    case DCK_DIFF_ISA_AVX512:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
#endif
    default: return 0;
    }
}

dck_diff_isa dck_diff_isa_best(void) {
    static _Atomic int best = -1;
    int b = best;
    if (b < 0) {
        b = DCK_DIFF_ISA_SCALAR;
        for (int i = DCK_DIFF_ISA_COUNT - 1; i > DCK_DIFF_ISA_SCALAR; i--)
            if (dck_diff_isa_available((dck_diff_isa)i)) {
                b = i;
                break;
            }
        best = b;
    }
    return (dck_diff_isa)b;
}

void dck_diff_elements_isa(dck_diff_isa isa, dck_dtype t, const void *a, const void *b, size_t n,
                           uint64_t first_flat, const dck_diff_tolerance *tol,
                           dck_diff_stats *acc) {
    int done = 0;
    switch (isa) {
#if DCK_DIFF_X86
    case DCK_DIFF_ISA_AVX2: done = elements_avx2(t, a, b, n, first_flat, tol, acc); break;
    case DCK_DIFF_ISA_AVX512: done = elements_avx512(t, a, b, n, first_flat, tol, acc); break;
#endif
    default: break;
    }
    if (!done) ref_elements(t, a, b, n, first_flat, tol, acc);
}

void dck_diff_equal_isa(dck_diff_isa isa, dck_dtype t, const void *p, size_t n,
                        dck_diff_stats *acc) {
    int done = 0;
    switch (isa) {
#if DCK_DIFF_X86
    case DCK_DIFF_ISA_AVX2: done = equal_run_avx2(t, p, n, acc); break;
    case DCK_DIFF_ISA_AVX512: done = equal_run_avx512(t, p, n, acc); break;
#endif
    default: break;
    }
    if (!done) ref_equal(t, p, n, acc);
}

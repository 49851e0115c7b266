/* The vector element kernels, one instantiation per instruction set:
 * diff_kernels.c includes this file once per target with
 *   LANES    doubles per vector on that target (4: AVX2, 8: AVX-512),
 *   SUFFIX   the name suffix (avx2, avx512),
 *   KATTR    the function attribute that selects the target,
 * and gets elements_SUFFIX / equal_SUFFIX. Vectors are the target's own
 * width so that every operation, comparisons included, stays a vector
 * instruction (wider generic vectors are split, and their comparisons
 * scalarised, by GCC). Helpers are macros: no vector crosses a function
 * boundary, so no ABI question arises between targets.
 *
 * What each kernel computes, and why it is the reference's bits, is said at
 * the top of diff_kernels.c. */

#define KCAT2_(a, b) a##_##b
#define KCAT2(a, b) KCAT2_(a, b)
#define KNAME(name) KCAT2(name, SUFFIX)

typedef uint8_t KNAME(u8v) __attribute__((vector_size(LANES)));
typedef uint16_t KNAME(u16v) __attribute__((vector_size(2 * LANES)));
typedef uint32_t KNAME(u32v) __attribute__((vector_size(4 * LANES)));
typedef int32_t KNAME(i32v) __attribute__((vector_size(4 * LANES)));
typedef float KNAME(f32v) __attribute__((vector_size(4 * LANES)));
typedef uint64_t KNAME(u64v) __attribute__((vector_size(8 * LANES)));
typedef int64_t KNAME(i64v) __attribute__((vector_size(8 * LANES)));
typedef double KNAME(f64v) __attribute__((vector_size(8 * LANES)));
typedef double KNAME(f64q) __attribute__((vector_size(32))); /* four lanes of equal runs */
#define u8v KNAME(u8v)
#define u16v KNAME(u16v)
#define u32v KNAME(u32v)
#define i32v KNAME(i32v)
#define f32v KNAME(f32v)
#define u64v KNAME(u64v)
#define i64v KNAME(i64v)
#define f64v KNAME(f64v)
#define f64q KNAME(f64q)

#if LANES == 4
#define SPLAT(T, x) ((T){(x), (x), (x), (x)})
#elif LANES == 8
#define SPLAT(T, x) ((T){(x), (x), (x), (x), (x), (x), (x), (x)})
#else
#error "LANES must be 4 or 8"
#endif

#define BLOCK_GROUPS (512 / LANES) /* vector steps between flushes of the lane counts */

/* m ? a : b per lane, m all ones or zero, for integer vectors of one width */
#define SEL(M, A, B) (((A) & (M)) | ((B) & ~(M)))
#define SEL_U32(M, A, B) ((u32v)SEL((M), (i32v)(A), (i32v)(B)))
#define SEL_U64(M, A, B) ((u64v)SEL((M), (i64v)(A), (i64v)(B)))
#define SEL_F64(M, A, B) ((f64v)SEL((M), (i64v)(A), (i64v)(B)))
#define HSUM(V, OUT)                                                                             \
    do {                                                                                         \
        uint64_t h_ = 0;                                                                         \
        for (int k_ = 0; k_ < LANES; k_++) h_ += (uint64_t)(V)[k_];                              \
        (OUT) = h_;                                                                              \
    } while (0)

/* LANES elements of a narrow dtype (1, 2 or 4 bytes), zero-extended. */
#define LOAD_NARROW(T, P, OUT)                                                                   \
    do {                                                                                         \
        if (elem_size(T) == 4) {                                                                 \
            memcpy(&(OUT), (P), 4 * LANES);                                                      \
        } else if (elem_size(T) == 2) {                                                          \
            u16v h_;                                                                             \
            memcpy(&h_, (P), 2 * LANES);                                                         \
            (OUT) = __builtin_convertvector(h_, u32v);                                           \
        } else {                                                                                 \
            u8v b_;                                                                              \
            memcpy(&b_, (P), LANES);                                                             \
            (OUT) = __builtin_convertvector(b_, u32v);                                           \
        }                                                                                        \
    } while (0)

/* Binary16 bits (low 16 bits of each lane) as binary32 bits, exactly: normal
 * numbers rebias the exponent, subnormals are m * 2^-24 (exact in binary32),
 * infinities and NaNs keep an all-ones exponent. */
#define F16_TO_F32_BITS(U, OUT)                                                                  \
    do {                                                                                         \
        u32v e_ = ((U) >> 10) & 0x1f, m_ = (U) & 0x3ff, s_ = ((U) & 0x8000) << 16;              \
        u32v norm_ = s_ | ((e_ + 112) << 23) | (m_ << 13);                                       \
        f32v subf_ = __builtin_convertvector((i32v)m_, f32v) * 0x1p-24f;                         \
        u32v sub_ = (u32v)subf_ | s_;                                                            \
        u32v special_ = s_ | 0x7f800000u | (m_ << 13);                                           \
        i32v ez_ = (i32v)e_ == SPLAT(i32v, 0), e31_ = (i32v)e_ == SPLAT(i32v, 31);               \
        (OUT) = SEL_U32(ez_, sub_, SEL_U32(e31_, special_, norm_));                              \
    } while (0)

/* OCP E4M3 bits as binary32 bits (NaN lanes are never used as values). */
#define E4M3_TO_F32_BITS(U, OUT)                                                                 \
    do {                                                                                         \
        u32v e_ = ((U) >> 3) & 0xf, m_ = (U) & 7, s_ = ((U) & 0x80) << 24;                       \
        u32v norm_ = s_ | ((e_ + 120) << 23) | (m_ << 20);                                       \
        f32v subf_ = __builtin_convertvector((i32v)m_, f32v) * 0x1p-9f;                          \
        u32v sub_ = (u32v)subf_ | s_;                                                            \
        i32v ez_ = (i32v)e_ == SPLAT(i32v, 0);                                                   \
        (OUT) = SEL_U32(ez_, sub_, norm_);                                                       \
    } while (0)

/* binary32 bits to doubles (exact), one instruction: GCC does not pick it
 * for the generic conversion (for AVX2 it converts two halves and joins
 * them). */
#if LANES == 8
#define CVT_F32_F64(FB, OUT) ((OUT) = (f64v)_mm512_cvtps_pd((__m256)(FB)))
#else
#define CVT_F32_F64(FB, OUT) ((OUT) = (f64v)_mm256_cvtps_pd((__m128)(FB)))
#endif

/* Narrow elements as doubles, exactly as bits_to_double (NaN lanes aside,
 * whose value no statistic uses). */
#define NARROW_TO_F64(T, U, OUT)                                                                 \
    do {                                                                                         \
        u32v fb_;                                                                                \
        if ((T) == DCK_F32) fb_ = (U);                                                           \
        else if ((T) == DCK_BF16) fb_ = (U) << 16;                                               \
        else if ((T) == DCK_F16) F16_TO_F32_BITS((U), fb_);                                      \
        else if ((T) == DCK_F8_E5M2) F16_TO_F32_BITS((U) << 8, fb_);                             \
        else E4M3_TO_F32_BITS((U), fb_);                                                         \
        CVT_F32_F64(fb_, OUT);                                                                   \
    } while (0)

/* |a-b|, max(|a|,|b|) and the relative difference, as the reference computes
 * them, for lanes where neither side is NaN (the others are masked out by
 * the caller; their division is by 1, so no lane divides by zero). */
#define ABS_MAG_REL(VA, VB, D, ABSD, MAG, REL)                                                   \
    do {                                                                                         \
        const i64v am_ = SPLAT(i64v, (int64_t)0x7fffffffffffffffll);                             \
        const f64v inf_ = SPLAT(f64v, INFINITY), zero_ = SPLAT(f64v, 0.0);                       \
        (ABSD) = (f64v)((i64v)(D) & am_);                                                        \
        f64v fa_ = (f64v)((i64v)(VA) & am_), fb_ = (f64v)((i64v)(VB) & am_);                     \
        (MAG) = SEL_F64(fa_ > fb_, fa_, fb_);                                                    \
        i64v pos_ = (MAG) > zero_;                                                               \
        f64v q_ = (ABSD) / SEL_F64(pos_, (MAG), SPLAT(f64v, 1.0));                               \
        (REL) = SEL_F64((ABSD) == inf_, inf_, SEL_F64(pos_, q_, zero_));                         \
    } while (0)

/* Lane maxima with one instruction each. Every value that reaches them is
 * +0 or positive and never NaN (or belongs to a pass that is thrown away),
 * where max picks exactly what the reference's strict '>' keeps. */
#if LANES == 8
#define MAX_F64(ACC, X) ((ACC) = (f64v)_mm512_max_pd((__m512d)(ACC), (__m512d)(X)))
#define MAX_I32(A, B) ((i32v)_mm256_max_epi32((__m256i)(A), (__m256i)(B)))
#define ABS_I32(A) ((i32v)_mm256_abs_epi32((__m256i)(A)))
#define MAX_U32(A, B) ((u32v)_mm256_max_epu32((__m256i)(A), (__m256i)(B)))
#define MAX_U64(A, B) ((u64v)_mm512_max_epu64((__m512i)(A), (__m512i)(B)))
#else
#define MAX_F64(ACC, X) ((ACC) = (f64v)_mm256_max_pd((__m256d)(ACC), (__m256d)(X)))
#define MAX_I32(A, B) ((i32v)_mm_max_epi32((__m128i)(A), (__m128i)(B)))
#define ABS_I32(A) ((i32v)_mm_abs_epi32((__m128i)(A)))
#define MAX_U32(A, B) ((u32v)_mm_max_epu32((__m128i)(A), (__m128i)(B)))
#define MAX_U64(A, B) SEL_U64((A) > (B), (A), (B))
#endif

/* Lane maxima into the statistics, with the reference's strict '>'. */
#define FOLD_MAXIMA(S, VABS, VREL, VULP, VULPS)                                                   \
    do {                                                                                         \
        for (int k_ = 0; k_ < LANES; k_++) {                                                     \
            if ((VABS)[k_] > (S).max_abs) (S).max_abs = (VABS)[k_];                              \
            if ((VREL)[k_] > (S).max_rel) (S).max_rel = (VREL)[k_];                              \
            if ((uint64_t)(VULP)[k_] > (S).max_ulp) (S).max_ulp = (uint64_t)(VULP)[k_];          \
            if ((uint64_t)(VULPS)[k_] > (S).max_ulp_same_sign)                                   \
                (S).max_ulp_same_sign = (uint64_t)(VULPS)[k_];                                   \
        }                                                                                        \
    } while (0)

/* The counts of one block into the statistics; the first differing element
 * is looked for in the first block that has one. */
#define FLUSH_BLOCK(S)                                                                           \
    do {                                                                                         \
        uint64_t h, nne, within;                                                                 \
        HSUM(c_ne, nne);                                                                         \
        HSUM(c_within, within);                                                                  \
        (S).diff_count += nne;                                                                   \
        (S).beyond_count += nne - within;                                                        \
        HSUM(c_nan_a, h);                                                                        \
        (S).nan_a += h;                                                                          \
        HSUM(c_nan_b, h);                                                                        \
        (S).nan_b += h;                                                                          \
        HSUM(c_inf_a, h);                                                                        \
        (S).inf_a += h;                                                                          \
        HSUM(c_inf_b, h);                                                                        \
        (S).inf_b += h;                                                                          \
        HSUM(c_pay, h);                                                                          \
        (S).nan_payload += h;                                                                    \
        HSUM(c_vs, h);                                                                           \
        (S).nan_vs_number += h;                                                                  \
        HSUM(c_sign, h);                                                                         \
        (S).sign_changes += h;                                                                   \
        if (nne && (S).first_flat == UINT64_MAX)                                                 \
            first_in_block(t, pa, pb, g0 * LANES, g1 * LANES, first_flat, &(S));                 \
    } while (0)

/* Block size of the kernels: BLOCK_ELEMS elements, BLOCK_GROUPS_K vector
 * steps. Per block the counts are flushed, and the squares of the block are
 * stored; they are added to the running sums during the next block (a
 * software pipeline: the serial chain of additions overlaps the vector work
 * of the next block instead of waiting for it), the last block's at the
 * end. The order of the additions is still element order.
 *
 * The squares are stored in three planes (diff, a, b) with plain vector
 * stores, and the sums are three scalar chains that read them back one
 * element at a time: the three chains run side by side, so an element
 * costs one addition's latency, as one vector [diff, a, b, -] would, without
 * the shuffles that transposing into such rows costs. */
#define BLOCK_ELEMS 256
#define BLOCK_GROUPS_K (BLOCK_ELEMS / LANES)

/* The squares of the LANES elements of step J into the three planes of CUR
 * (plain vector stores: no transposition). */
#define STORE_ROWS(CUR, J, PD, PA, PB)                                                           \
    do {                                                                                         \
        memcpy(&(CUR)[0][(J) * LANES], &(PD), sizeof(f64v));                                     \
        memcpy(&(CUR)[1][(J) * LANES], &(PA), sizeof(f64v));                                     \
        memcpy(&(CUR)[2][(J) * LANES], &(PB), sizeof(f64v));                                     \
    } while (0)

/* The squares of step J into the buffer. */
#define STORE_SQUARES(CUR, J, VA, VB, D)                                                         \
    do {                                                                                         \
        f64v pd_ = (D) * (D), pa_ = (VA) * (VA), pb_ = (VB) * (VB);                              \
        STORE_ROWS(CUR, J, pd_, pa_, pb_);                                                       \
    } while (0)

/* Lanes that do not count add -0.0, the identity of IEEE addition
 * (x + -0.0 == x for every x, -0.0 included). */
#define STORE_SQUARES_MASKED(CUR, J, VA, VB, D, FIN64)                                           \
    do {                                                                                         \
        const i64v nz_ = SPLAT(i64v, (int64_t)0x8000000000000000ull);                            \
        f64v pd_ = SEL_F64((FIN64), (D) * (D), nz_);                                             \
        f64v pa_ = SEL_F64((FIN64), (VA) * (VA), nz_);                                           \
        f64v pb_ = SEL_F64((FIN64), (VB) * (VB), nz_);                                           \
        STORE_ROWS(CUR, J, pd_, pa_, pb_);                                                       \
    } while (0)

/* Element Q of the previous block into the three running sums: three
 * independent scalar chains, each one addition per element in element
 * order (the additions the scalar reference makes, in its order). */
#define CHAIN_ONE(PREV, Q)                                                                       \
    do {                                                                                         \
        sum_d += (PREV)[0][(Q)];                                                                 \
        sum_a += (PREV)[1][(Q)];                                                                 \
        sum_b += (PREV)[2][(Q)];                                                                 \
    } while (0)

/* The three sums stay in three registers: without this GCC packs two of
 * them into one vector and keeps it on the stack across the loop, which
 * adds a store and a load to every link of the chain. (An empty asm: no
 * instruction, the values are unchanged.) */
#define CHAIN_PIN() __asm__("" : "+x"(sum_d), "+x"(sum_a), "+x"(sum_b))

/* The running sums over the elements of step J of the previous block
 * (spelled out: GCC does not unroll the loop at -O2). */
#if LANES == 4
#define CHAIN_STEP(PREV, J)                                                                      \
    do {                                                                                         \
        CHAIN_ONE(PREV, (J) * 4 + 0);                                                            \
        CHAIN_ONE(PREV, (J) * 4 + 1);                                                            \
        CHAIN_ONE(PREV, (J) * 4 + 2);                                                            \
        CHAIN_ONE(PREV, (J) * 4 + 3);                                                            \
        CHAIN_PIN();                                                                             \
    } while (0)
#else
#define CHAIN_STEP(PREV, J)                                                                      \
    do {                                                                                         \
        CHAIN_ONE(PREV, (J) * 8 + 0);                                                            \
        CHAIN_ONE(PREV, (J) * 8 + 1);                                                            \
        CHAIN_ONE(PREV, (J) * 8 + 2);                                                            \
        CHAIN_ONE(PREV, (J) * 8 + 3);                                                            \
        CHAIN_ONE(PREV, (J) * 8 + 4);                                                            \
        CHAIN_ONE(PREV, (J) * 8 + 5);                                                            \
        CHAIN_ONE(PREV, (J) * 8 + 6);                                                            \
        CHAIN_ONE(PREV, (J) * 8 + 7);                                                            \
        CHAIN_PIN();                                                                             \
    } while (0)
#endif

/* The running sums over elements [Q0, Q1) of a block, in element order. */
#define CHAIN(PREV, Q0, Q1)                                                                      \
    do {                                                                                         \
        for (size_t q_ = (Q0); q_ < (Q1); q_++) CHAIN_ONE(PREV, q_);                             \
    } while (0)

#define ANY_LANE(V, OUT)                                                                         \
    do {                                                                                         \
        int64_t o_ = 0;                                                                          \
        for (int k_ = 0; k_ < LANES; k_++) o_ |= (int64_t)(V)[k_];                               \
        (OUT) = o_ != 0;                                                                         \
    } while (0)

/* |a-b| and max(|a|,|b|) where neither side is NaN or infinite (a finite
 * |a-b| is never infinite for narrow dtypes). */
#define ABS_MAG_FINITE(VA, VB, D, ABSD, MAG)                                                     \
    do {                                                                                         \
        const i64v am_ = SPLAT(i64v, (int64_t)0x7fffffffffffffffll);                             \
        (ABSD) = (f64v)((i64v)(D) & am_);                                                        \
        f64v fa_ = (f64v)((i64v)(VA) & am_), fb_ = (f64v)((i64v)(VB) & am_);                     \
        (MAG) = SEL_F64(fa_ > fb_, fa_, fb_);                                                    \
    } while (0)

/* Whether any lane of a comparison mask is set (one instruction). */
#if LANES == 8
#define ANY_MASK(M) (_mm512_movepi64_mask((__m512i)(M)) != 0)
#else
#define ANY_MASK(M) (_mm256_movemask_pd((__m256d)(M)) != 0)
#endif

/* The relative differences |a-b| / mag of finite lanes into bmax_rel
 * (mag 0 means both are zeros: |a-b| is 0, and so is the reference's
 * quotient, here 0 / 1), dividing only when a lane can beat its running
 * maximum M. A divide per step costs more than the rest of the step
 * (vdivpd's throughput); after the first elements almost no quotient
 * exceeds M, and a test by multiplication finds those that might:
 *   fl(x/y) > M implies x/y > M (rounding is monotonic and M is a double),
 *   so x > M*y. bmax_lim = fl(M*(1 - 2^-52)) and fl(bmax_lim*y) are each
 *   at most (1 + 2^-53) times their exact product, and
 *   (1 - 2^-52)(1 + 2^-53)^2 < 1, so fl(bmax_lim*y) < M*y < x for every
 *   lane whose quotient beats M. (An underflowed product is below every
 *   nonzero x, and x = 0 never beats M >= 0.)
 * Lanes that fail the test have quotients <= M, so dividing all lanes of a
 * step that has a candidate and taking the lane maxima gives exactly the
 * maxima of dividing every step. */
#define REL_MAX(ABSD, MAG)                                                                       \
    do {                                                                                         \
        if (__builtin_expect(ANY_MASK((ABSD) > bmax_lim * (MAG)), 0)) {                          \
            f64v mag1_ = SEL_F64((MAG) > SPLAT(f64v, 0.0), (MAG), SPLAT(f64v, 1.0));             \
            MAX_F64(bmax_rel, (ABSD) / mag1_);                                                   \
            bmax_lim = bmax_rel * SPLAT(f64v, 1.0 - 0x1p-52);                                    \
        }                                                                                        \
    } while (0)

/* One vector step of the narrow kernel. GENERAL (a constant): every lane
 * is classified and masked, for a block with NaN or infinite elements; else
 * the step assumes every element finite (a pair with equal bits then has
 * |a-b| = 0, rel 0 and ULP 0, and no mask but the differing one is needed)
 * and notes in `special` whether that held. TOL: tolerances were given.
 * CHAINED: the step also adds the previous block's squares. */
#define NARROW_STEP(GENERAL, TOL, CHAINED)                                                       \
    do {                                                                                         \
        u32v ua_, ub_;                                                                           \
        LOAD_NARROW(t, pa + g * LANES * sz, ua_);                                                \
        LOAD_NARROW(t, pb + g * LANES * sz, ub_);                                                \
        i32v ua = (i32v)ua_, ub = (i32v)ub_;                                                     \
        i32v ma = ua & vMag, mb = ub & vMag;                                                     \
        i32v eq = ua == ub, ne = ~eq;                                                            \
        /* without tolerances the finite pass counts equal pairs (negated: one    \
         * instruction) and turns them into differing ones after the block */                   \
        if ((GENERAL) || (TOL)) c_ne -= ne;                                                      \
        else c_ne += eq;                                                                         \
        i32v nan_a = vzero, nan_b = vzero, inf_a = vzero, inf_b = vzero, fin = ~vzero, num = ne; \
        i32v maxm = MAX_I32(ma, mb); /* the larger magnitude's bits */                           \
        if (!(GENERAL)) special = MAX_I32(special, maxm); /* >= vE: NaN or infinity */           \
        if (GENERAL) {                                                                           \
            if (has_inf) {                                                                       \
                nan_a = ma > vE;                                                                 \
                nan_b = mb > vE;                                                                 \
                inf_a = ma == vE;                                                                \
                inf_b = mb == vE;                                                                \
            } else {                                                                             \
                nan_a = ma == vE;                                                                \
                nan_b = mb == vE;                                                                \
            }                                                                                    \
            c_nan_a -= nan_a;                                                                    \
            c_nan_b -= nan_b;                                                                    \
            c_inf_a -= inf_a;                                                                    \
            c_inf_b -= inf_b;                                                                    \
            c_pay -= ne & nan_a & nan_b;                                                         \
            c_vs -= ne & (nan_a ^ nan_b);                                                        \
            fin = ~(nan_a | nan_b | inf_a | inf_b);                                              \
            num = ne & ~(nan_a | nan_b);                                                         \
        }                                                                                        \
        /* ULP distance on the sign-magnitude grid (float_ulp): |ma - mb| (no      \
         * overflow: both below 2^31) or ma + mb (unsigned) */                                   \
        i32v dist = ABS_I32(ma - mb);                                                            \
        i32v same_sign = ((ua ^ ub) & vS) == vzero;                                              \
        u32v ulp = (u32v)SEL(same_sign, dist, (i32v)((u32v)ma + (u32v)mb));                      \
        if (GENERAL) ulp &= (u32v)num;                                                           \
        bmax_ulp = MAX_U32(ulp, bmax_ulp);                                                       \
        /* sign changes (sign_change): signs differ, neither magnitude 0, no NaN */              \
        i32v flip = ~same_sign & (ma != vzero) & (mb != vzero);                                  \
        if (GENERAL) flip &= num;                                                                \
        c_sign -= flip;                                                                          \
        bmax_ulp_same = MAX_U32(ulp & ~(u32v)flip, bmax_ulp_same);                               \
        f64v va, vb;                                                                             \
        NARROW_TO_F64(t, ua_, va);                                                               \
        NARROW_TO_F64(t, ub_, vb);                                                               \
        f64v d = va - vb;                                                                        \
        f64v absd, mag;                                                                          \
        i64v fin64 = SPLAT(i64v, -1), num64;                                                     \
        if (GENERAL) {                                                                           \
            fin64 = __builtin_convertvector(fin, i64v);                                          \
            num64 = __builtin_convertvector(num, i64v);                                          \
            STORE_SQUARES_MASKED(cur, j, va, vb, d, fin64);                                      \
            f64v rel;                                                                            \
            ABS_MAG_REL(va, vb, d, absd, mag, rel);                                              \
            MAX_F64(bmax_abs, (f64v)((i64v)absd & num64));                                       \
            MAX_F64(bmax_rel, (f64v)((i64v)rel & num64));                                        \
        } else if (t == DCK_F32 || t == DCK_BF16) {                                              \
            /* max(|a|,|b|) from the magnitude bits (ordered as the values), as a   \
             * double by one conversion */                                                       \
            STORE_SQUARES(cur, j, va, vb, d);                                                    \
            NARROW_TO_F64(t, (u32v)maxm, mag);                                                   \
            absd = (f64v)((i64v)d & SPLAT(i64v, (int64_t)0x7fffffffffffffffll));                 \
            MAX_F64(bmax_abs, absd);                                                             \
            REL_MAX(absd, mag);                                                                  \
        } else {                                                                                 \
            STORE_SQUARES(cur, j, va, vb, d);                                                    \
            ABS_MAG_FINITE(va, vb, d, absd, mag);                                                \
            MAX_F64(bmax_abs, absd);                                                             \
            REL_MAX(absd, mag);                                                                  \
        }                                                                                        \
        if (CHAINED) CHAIN_STEP(prev, j);                                                        \
        if (TOL) {                                                                               \
            i32v w = vzero;                                                                      \
            if (has_abs) w |= __builtin_convertvector(absd <= vatol + vrtol * mag, i32v);        \
            if (has_ulp) w |= ulp <= vutol;                                                      \
            c_within -= w & fin & num;                                                           \
        }                                                                                        \
    } while (0)

/* F32, BF16, F16, F8: bits in 32-bit lanes (magnitudes are below 2^31, so
 * signed compares are exact, and a ULP distance, at most the sum of two
 * magnitudes, fits 32 bits). */
KATTR static inline __attribute__((always_inline)) void
KNAME(narrow)(dck_dtype t, const uint8_t *pa, const uint8_t *pb, size_t n, uint64_t first_flat,
              const dck_diff_tolerance *tol, dck_diff_stats *acc) {
    const size_t sz = elem_size(t);
    const int32_t S = (int32_t)(uint32_t)sign_mask(t), E = (int32_t)exp_mask(t);
    const int32_t MAG = (int32_t)((uint32_t)sign_mask(t) - 1);
    const int has_inf = t != DCK_F8_E4M3; /* E4M3: exponent and mantissa all ones is NaN */
    const tol_consts c = tol_of(tol);
    const int has_abs = c.has_abs, has_ulp = c.has_ulp, check_tol = has_abs || has_ulp;
    const uint32_t ulp_tol32 = c.ulp_tol > UINT32_MAX ? UINT32_MAX : (uint32_t)c.ulp_tol;
    const i32v vS = SPLAT(i32v, S), vMag = SPLAT(i32v, MAG), vE = SPLAT(i32v, E);
    const i32v vzero = SPLAT(i32v, 0);
    const f64v vatol = SPLAT(f64v, c.atol), vrtol = SPLAT(f64v, c.rtol);
    const u32v vutol = SPLAT(u32v, ulp_tol32);
    dck_diff_stats s = *acc;
    double sum_d = s.sum_sq_diff, sum_a = s.sum_sq_a, sum_b = s.sum_sq_b;
    f64v vmax_abs = SPLAT(f64v, 0.0), vmax_rel = SPLAT(f64v, 0.0);
    u32v vmax_ulp = (u32v)vzero, vmax_ulp_same = (u32v)vzero;
    double buf[2][3][BLOCK_ELEMS] __attribute__((aligned(64)));
    for (int q = 0; q < BLOCK_ELEMS; q++)
        for (int k = 0; k < 3; k++) buf[1][k][q] = -0.0;
    int cur_i = 0;
    size_t prev_n = BLOCK_ELEMS;
    const size_t ngroups = n / LANES;
    for (size_t g0 = 0; g0 < ngroups; g0 += BLOCK_GROUPS_K) {
        size_t g1 = ngroups - g0 > BLOCK_GROUPS_K ? g0 + BLOCK_GROUPS_K : ngroups;
        double(*cur)[BLOCK_ELEMS] = buf[cur_i], (*prev)[BLOCK_ELEMS] = buf[cur_i ^ 1];
        i32v c_ne = vzero, c_nan_a = vzero, c_nan_b = vzero, c_inf_a = vzero, c_inf_b = vzero;
        i32v c_pay = vzero, c_vs = vzero, c_within = vzero, c_sign = vzero;
        /* bmax_rel starts at the running maxima: the bound REL_MAX tests
         * against (max is idempotent, so folding it in again changes nothing) */
        f64v bmax_abs = SPLAT(f64v, 0.0), bmax_rel = vmax_rel;
        f64v bmax_lim = bmax_rel * SPLAT(f64v, 1.0 - 0x1p-52);
        u32v bmax_ulp = (u32v)vzero, bmax_ulp_same = (u32v)vzero;
        /* First as if every element were finite; NaN or infinity anywhere in
         * the block (magnitude >= the exponent mask) discards that pass's
         * counts, maxima and squares, and the block is taken again. */
        i32v special = vzero;
        size_t j = 0;
        if (check_tol)
            for (size_t g = g0; g < g1; g++, j++) NARROW_STEP(0, 1, 1);
        else
            for (size_t g = g0; g < g1; g++, j++) NARROW_STEP(0, 0, 1);
        int general;
        ANY_LANE(special >= vE, general);
        if (!check_tol) c_ne += SPLAT(i32v, (int32_t)j); /* equal pairs -> differing */
        if (general) {
            c_ne = c_within = c_sign = vzero;
            bmax_abs = SPLAT(f64v, 0.0);
            bmax_rel = vmax_rel;
            bmax_lim = bmax_rel * SPLAT(f64v, 1.0 - 0x1p-52);
            bmax_ulp = bmax_ulp_same = (u32v)vzero;
            j = 0;
            if (check_tol)
                for (size_t g = g0; g < g1; g++, j++) NARROW_STEP(1, 1, 0);
            else
                for (size_t g = g0; g < g1; g++, j++) NARROW_STEP(1, 0, 0);
        }
        MAX_F64(vmax_abs, bmax_abs);
        MAX_F64(vmax_rel, bmax_rel);
        vmax_ulp = MAX_U32(bmax_ulp, vmax_ulp);
        vmax_ulp_same = MAX_U32(bmax_ulp_same, vmax_ulp_same);
        CHAIN(prev, j * LANES, prev_n);
        prev_n = j * LANES;
        cur_i ^= 1;
        FLUSH_BLOCK(s);
    }
    CHAIN(buf[cur_i ^ 1], 0, prev_n);
    FOLD_MAXIMA(s, vmax_abs, vmax_rel, vmax_ulp, vmax_ulp_same);
    s.sum_sq_diff = sum_d;
    s.sum_sq_a = sum_a;
    s.sum_sq_b = sum_b;
    size_t done = ngroups * LANES;
    s.count += done;
    if (done < n)
        elements_loop(t, pa + done * sz, pb + done * sz, n - done, first_flat + done, tol, &s);
    *acc = s;
}

/* One vector step of the F64 kernel (GENERAL as in NARROW_STEP; a finite
 * difference of two doubles can overflow to infinity, so the relative
 * difference is always the general one). */
#define WIDE_STEP(GENERAL, TOL, CHAINED)                                                         \
    do {                                                                                         \
        i64v ua, ub;                                                                             \
        memcpy(&ua, pa + g * LANES * 8, 8 * LANES);                                              \
        memcpy(&ub, pb + g * LANES * 8, 8 * LANES);                                              \
        i64v ma = ua & vMag, mb = ub & vMag;                                                     \
        i64v ne = ua != ub;                                                                      \
        c_ne -= ne;                                                                              \
        i64v fin = ~vzero, num = ne;                                                             \
        if (!(GENERAL)) special |= (ma >= vE) | (mb >= vE);                                      \
        if (GENERAL) {                                                                           \
            i64v nan_a = ma > vE, nan_b = mb > vE, inf_a = ma == vE, inf_b = mb == vE;           \
            c_nan_a -= nan_a;                                                                    \
            c_nan_b -= nan_b;                                                                    \
            c_inf_a -= inf_a;                                                                    \
            c_inf_b -= inf_b;                                                                    \
            c_pay -= ne & nan_a & nan_b;                                                         \
            c_vs -= ne & (nan_a ^ nan_b);                                                        \
            fin = ~(nan_a | nan_b | inf_a | inf_b);                                              \
            num = ne & ~(nan_a | nan_b);                                                         \
        }                                                                                        \
        i64v dist = SEL(ma > mb, ma - mb, mb - ma);                                              \
        i64v same_sign = ((ua ^ ub) & vS) == vzero;                                              \
        u64v ulp = (u64v)SEL(same_sign, dist, (i64v)((u64v)ma + (u64v)mb));                      \
        if (GENERAL) ulp &= (u64v)num;                                                           \
        bmax_ulp = MAX_U64(ulp, bmax_ulp);                                                       \
        i64v flip = ~same_sign & (ma != vzero) & (mb != vzero);                                  \
        if (GENERAL) flip &= num;                                                                \
        c_sign -= flip;                                                                          \
        bmax_ulp_same = MAX_U64(ulp & ~(u64v)flip, bmax_ulp_same);                               \
        f64v va = (f64v)ua, vb = (f64v)ub;                                                       \
        f64v d = va - vb;                                                                        \
        if (GENERAL) STORE_SQUARES_MASKED(cur, j, va, vb, d, fin);                               \
        else STORE_SQUARES(cur, j, va, vb, d);                                                   \
        f64v absd, mag, rel;                                                                     \
        ABS_MAG_REL(va, vb, d, absd, mag, rel);                                                  \
        if (GENERAL) {                                                                           \
            MAX_F64(bmax_abs, (f64v)((i64v)absd & num));                                         \
            MAX_F64(bmax_rel, (f64v)((i64v)rel & num));                                          \
        } else {                                                                                 \
            MAX_F64(bmax_abs, absd);                                                             \
            MAX_F64(bmax_rel, rel);                                                              \
        }                                                                                        \
        if (CHAINED) CHAIN_STEP(prev, j);                                                        \
        if (TOL) {                                                                               \
            i64v w = vzero;                                                                      \
            if (has_abs) w |= absd <= vatol + vrtol * mag;                                       \
            if (has_ulp) w |= ulp <= vutol;                                                      \
            c_within -= w & fin & num;                                                           \
        }                                                                                        \
    } while (0)

/* F64: bits in 64-bit lanes (magnitudes below 2^63: signed compares exact). */
KATTR static inline __attribute__((always_inline)) void
KNAME(wide)(const uint8_t *pa, const uint8_t *pb, size_t n, uint64_t first_flat,
            const dck_diff_tolerance *tol, dck_diff_stats *acc) {
    const dck_dtype t = DCK_F64;
    const tol_consts c = tol_of(tol);
    const int has_abs = c.has_abs, has_ulp = c.has_ulp, check_tol = has_abs || has_ulp;
    const i64v vS = SPLAT(i64v, (int64_t)0x8000000000000000ull);
    const i64v vMag = SPLAT(i64v, (int64_t)0x7fffffffffffffffull);
    const i64v vE = SPLAT(i64v, (int64_t)0x7ff0000000000000ull);
    const i64v vzero = SPLAT(i64v, 0);
    const f64v vatol = SPLAT(f64v, c.atol), vrtol = SPLAT(f64v, c.rtol);
    const u64v vutol = SPLAT(u64v, c.ulp_tol);
    dck_diff_stats s = *acc;
    double sum_d = s.sum_sq_diff, sum_a = s.sum_sq_a, sum_b = s.sum_sq_b;
    f64v vmax_abs = SPLAT(f64v, 0.0), vmax_rel = SPLAT(f64v, 0.0);
    u64v vmax_ulp = (u64v)vzero, vmax_ulp_same = (u64v)vzero;
    double buf[2][3][BLOCK_ELEMS] __attribute__((aligned(64)));
    for (int q = 0; q < BLOCK_ELEMS; q++)
        for (int k = 0; k < 3; k++) buf[1][k][q] = -0.0;
    int cur_i = 0;
    size_t prev_n = BLOCK_ELEMS;
    const size_t ngroups = n / LANES;
    for (size_t g0 = 0; g0 < ngroups; g0 += BLOCK_GROUPS_K) {
        size_t g1 = ngroups - g0 > BLOCK_GROUPS_K ? g0 + BLOCK_GROUPS_K : ngroups;
        double(*cur)[BLOCK_ELEMS] = buf[cur_i], (*prev)[BLOCK_ELEMS] = buf[cur_i ^ 1];
        i64v c_ne = vzero, c_nan_a = vzero, c_nan_b = vzero, c_inf_a = vzero, c_inf_b = vzero;
        i64v c_pay = vzero, c_vs = vzero, c_within = vzero, c_sign = vzero;
        f64v bmax_abs = SPLAT(f64v, 0.0), bmax_rel = SPLAT(f64v, 0.0);
        u64v bmax_ulp = (u64v)vzero, bmax_ulp_same = (u64v)vzero;
        /* as in the narrow kernel: finite first, again if that was wrong */
        i64v special = vzero;
        size_t j = 0;
        if (check_tol)
            for (size_t g = g0; g < g1; g++, j++) WIDE_STEP(0, 1, 1);
        else
            for (size_t g = g0; g < g1; g++, j++) WIDE_STEP(0, 0, 1);
        int general;
        ANY_LANE(special, general);
        if (general) {
            c_ne = c_within = c_sign = vzero;
            bmax_abs = bmax_rel = SPLAT(f64v, 0.0);
            bmax_ulp = bmax_ulp_same = (u64v)vzero;
            j = 0;
            if (check_tol)
                for (size_t g = g0; g < g1; g++, j++) WIDE_STEP(1, 1, 0);
            else
                for (size_t g = g0; g < g1; g++, j++) WIDE_STEP(1, 0, 0);
        }
        MAX_F64(vmax_abs, bmax_abs);
        MAX_F64(vmax_rel, bmax_rel);
        vmax_ulp = MAX_U64(bmax_ulp, vmax_ulp);
        vmax_ulp_same = MAX_U64(bmax_ulp_same, vmax_ulp_same);
        CHAIN(prev, j * LANES, prev_n);
        prev_n = j * LANES;
        cur_i ^= 1;
        FLUSH_BLOCK(s);
    }
    CHAIN(buf[cur_i ^ 1], 0, prev_n);
    FOLD_MAXIMA(s, vmax_abs, vmax_rel, vmax_ulp, vmax_ulp_same);
    s.sum_sq_diff = sum_d;
    s.sum_sq_a = sum_a;
    s.sum_sq_b = sum_b;
    size_t done = ngroups * LANES;
    s.count += done;
    if (done < n)
        elements_loop(t, pa + done * 8, pb + done * 8, n - done, first_flat + done, tol, &s);
    *acc = s;
}

/* An equal run of a float dtype: NaN/Inf counts, and the squares of the
 * finite elements (others count 0.0, as in the reference) into lane i % 4:
 * steps of 8 elements, LANES at a time, lane accumulators as 4-lane
 * groups. */
KATTR static inline __attribute__((always_inline)) void
KNAME(equal)(dck_dtype t, const uint8_t *p, size_t n, dck_diff_stats *acc) {
    const size_t sz = elem_size(t);
    const int has_inf = t != DCK_F8_E4M3;
    const size_t nsteps = n / 8;
    f64q acc4 = {0, 0, 0, 0};
    uint64_t nan = 0, inf = 0;
    for (size_t s0 = 0; s0 < nsteps; s0 += BLOCK_GROUPS) {
        size_t s1 = nsteps - s0 > BLOCK_GROUPS ? s0 + BLOCK_GROUPS : nsteps;
        i64v c_nan = SPLAT(i64v, 0), c_inf = SPLAT(i64v, 0);
        for (size_t st = s0; st < s1; st++) {
            for (int j = 0; j < 8 / LANES; j++) {
                const uint8_t *x = p + (st * 8 + (size_t)j * LANES) * sz;
                f64v v;
                i64v is_nan, is_inf;
                if (t == DCK_F64) {
                    i64v u;
                    memcpy(&u, x, 8 * LANES);
                    i64v m = u & SPLAT(i64v, (int64_t)0x7fffffffffffffffull);
                    i64v ve = SPLAT(i64v, (int64_t)0x7ff0000000000000ull);
                    is_nan = m > ve;
                    is_inf = m == ve;
                    v = (f64v)u;
                } else {
                    u32v u;
                    LOAD_NARROW(t, x, u);
                    i32v m = (i32v)u & SPLAT(i32v, (int32_t)((uint32_t)sign_mask(t) - 1));
                    i32v ve = SPLAT(i32v, (int32_t)exp_mask(t));
                    i32v nan32, inf32;
                    if (has_inf) {
                        nan32 = m > ve;
                        inf32 = m == ve;
                    } else {
                        nan32 = m == ve;
                        inf32 = SPLAT(i32v, 0);
                    }
                    is_nan = __builtin_convertvector(nan32, i64v);
                    is_inf = __builtin_convertvector(inf32, i64v);
                    NARROW_TO_F64(t, u, v);
                }
                c_nan -= is_nan;
                c_inf -= is_inf;
                v = (f64v)((i64v)v & ~(is_nan | is_inf)); /* c ? 0.0 : v */
                f64v sq = v * v;
#if LANES == 4
                acc4 += sq;
#else
                f64q lo, hi;
                memcpy(&lo, &sq, sizeof lo);
                memcpy(&hi, (const char *)&sq + sizeof lo, sizeof hi);
                acc4 += lo;
                acc4 += hi;
#endif
            }
        }
        uint64_t h;
        HSUM(c_nan, h);
        nan += h;
        HSUM(c_inf, h);
        inf += h;
    }
    double lanes[4] = {acc4[0], acc4[1], acc4[2], acc4[3]};
    equal_finish(t, p, nsteps * 8, n, nan, inf, lanes, acc);
}

/* One entry per dtype (kept out of line, so each can be read in objdump),
 * and the switch: 0 for a dtype without a vector kernel. */
#define KDTYPE(T, NAME)                                                                          \
    KATTR static __attribute__((noinline)) void KNAME(NAME)(                                     \
        const uint8_t *a, const uint8_t *b, size_t n, uint64_t first_flat,                       \
        const dck_diff_tolerance *tol, dck_diff_stats *acc) {                                    \
        KNAME(narrow)(T, a, b, n, first_flat, tol, acc);                                         \
    }
KDTYPE(DCK_F32, elements_f32)
KDTYPE(DCK_BF16, elements_bf16)
KDTYPE(DCK_F16, elements_f16)
KDTYPE(DCK_F8_E5M2, elements_e5m2)
KDTYPE(DCK_F8_E4M3, elements_e4m3)
#undef KDTYPE

KATTR static __attribute__((noinline)) void
KNAME(elements_f64)(const uint8_t *a, const uint8_t *b, size_t n, uint64_t first_flat,
                    const dck_diff_tolerance *tol, dck_diff_stats *acc) {
    KNAME(wide)(a, b, n, first_flat, tol, acc);
}

static int KNAME(elements)(dck_dtype t, const uint8_t *a, const uint8_t *b, size_t n,
                           uint64_t first_flat, const dck_diff_tolerance *tol,
                           dck_diff_stats *acc) {
    switch (t) {
    case DCK_F32: KNAME(elements_f32)(a, b, n, first_flat, tol, acc); return 1;
    case DCK_BF16: KNAME(elements_bf16)(a, b, n, first_flat, tol, acc); return 1;
    case DCK_F16: KNAME(elements_f16)(a, b, n, first_flat, tol, acc); return 1;
    case DCK_F8_E5M2: KNAME(elements_e5m2)(a, b, n, first_flat, tol, acc); return 1;
    case DCK_F8_E4M3: KNAME(elements_e4m3)(a, b, n, first_flat, tol, acc); return 1;
    case DCK_F64: KNAME(elements_f64)(a, b, n, first_flat, tol, acc); return 1;
    default: return 0;
    }
}

KATTR static int KNAME(equal_run)(dck_dtype t, const uint8_t *p, size_t n, dck_diff_stats *acc) {
    switch (t) {
    case DCK_F32: KNAME(equal)(DCK_F32, p, n, acc); return 1;
    case DCK_BF16: KNAME(equal)(DCK_BF16, p, n, acc); return 1;
    case DCK_F16: KNAME(equal)(DCK_F16, p, n, acc); return 1;
    case DCK_F8_E5M2: KNAME(equal)(DCK_F8_E5M2, p, n, acc); return 1;
    case DCK_F8_E4M3: KNAME(equal)(DCK_F8_E4M3, p, n, acc); return 1;
    case DCK_F64: KNAME(equal)(DCK_F64, p, n, acc); return 1;
    default: return 0;
    }
}

#undef u8v
#undef u16v
#undef u32v
#undef i32v
#undef f32v
#undef u64v
#undef i64v
#undef f64v
#undef f64q
#undef STORE_ROWS
#undef SPLAT
#undef BLOCK_GROUPS
#undef SEL
#undef SEL_U32
#undef SEL_U64
#undef SEL_F64
#undef HSUM
#undef LOAD_NARROW
#undef F16_TO_F32_BITS
#undef E4M3_TO_F32_BITS
#undef NARROW_TO_F64
#undef CVT_F32_F64
#undef STORE_SQUARES
#undef STORE_SQUARES_MASKED
#undef CHAIN
#undef CHAIN_STEP
#undef CHAIN_ONE
#undef CHAIN_PIN
#undef ANY_LANE
#undef ABS_MAG_FINITE
#undef ANY_MASK
#undef REL_MAX
#undef NARROW_STEP
#undef WIDE_STEP
#undef BLOCK_ELEMS
#undef BLOCK_GROUPS_K
#undef ABS_MAG_REL
#undef MAX_F64
#undef MAX_I32
#undef ABS_I32
#undef MAX_U32
#undef MAX_U64
#undef FOLD_MAXIMA
#undef FLUSH_BLOCK
#undef KNAME
#undef KCAT2
#undef KCAT2_

/* Elements as bits: loading, conversion to double (exact for every float
 * dtype), classification and ULP distance. Inline so that diff's element
 * loop and every other user compile them into their own loops. */
#ifndef DCK_ELEMENT_H
#define DCK_ELEMENT_H

#include "detcheck.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline uint64_t load_bits(const uint8_t *p, size_t size) {
    switch (size) {
    case 1: return p[0];
    case 2: return (uint64_t)p[0] | (uint64_t)p[1] << 8;
    case 4: {
        uint32_t v;
        memcpy(&v, p, 4); /* little-endian host (checked in the build) */
        return v;
    }
    default: {
        uint64_t v;
        memcpy(&v, p, 8);
        return v;
    }
    }
}

/* Complex dtypes are pairs of floats (real, imaginary): the float dtype of
 * one part, or t itself for every other dtype. Element statistics, ULPs
 * and byte order work on the parts. */
static inline dck_dtype dck_dtype_part(dck_dtype t) {
    return t == DCK_C64 ? DCK_F32 : t == DCK_C128 ? DCK_F64 : t;
}

static inline int dck_dtype_is_complex(dck_dtype t) { return t == DCK_C64 || t == DCK_C128; }

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "detcheck assumes a little-endian host"
#endif

/* Powers of two by multiplication with exact small integers: no libm call
 * in the element loop, and every result is exact. */
static inline double f16_to_double(uint32_t b) {
    uint32_t e = (b >> 10) & 0x1f, m = b & 0x3ff;
    double v;
    if (e == 0) v = (double)m * 0x1p-24;
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = (double)(m | 0x400) * ((double)(1u << e) * 0x1p-25);
    return (b & 0x8000) ? -v : v;
}

static inline double e4m3_to_double(uint32_t b) {
    /* OCP FP8 E4M3 "fn": bias 7, no infinities, S.1111.111 is NaN. */
    uint32_t e = (b >> 3) & 0xf, m = b & 7;
    double v;
    if (e == 15 && m == 7) v = NAN;
    else if (e == 0) v = (double)m * 0x1p-9;
    else v = (double)(m | 8) * ((double)(1u << e) * 0x1p-10);
    return (b & 0x80) ? -v : v;
}

static inline double bits_to_double(dck_dtype t, uint64_t u) {
    switch (t) {
    case DCK_F64: {
        double d;
        memcpy(&d, &u, 8);
        return d;
    }
    case DCK_F32: {
        uint32_t w = (uint32_t)u;
        float f;
        memcpy(&f, &w, 4);
        return f;
    }
    case DCK_BF16: {
        uint32_t w = (uint32_t)u << 16;
        float f;
        memcpy(&f, &w, 4);
        return f;
    }
    case DCK_F16: return f16_to_double((uint32_t)u);
    case DCK_F8_E5M2: return f16_to_double((uint32_t)u << 8);
    case DCK_F8_E4M3: return e4m3_to_double((uint32_t)u);
    case DCK_BOOL:
    case DCK_U8:
    case DCK_U16:
    case DCK_U32:
    case DCK_U64: return (double)u;
    case DCK_I8: return (double)(int8_t)u;
    case DCK_I16: return (double)(int16_t)u;
    case DCK_I32: return (double)(int32_t)u;
    case DCK_I64: return (double)(int64_t)u;
    default: return 0;
    }
}

/* Sign bit and "exponent all ones" mask per float dtype. */
static inline uint64_t sign_mask(dck_dtype t) {
    switch (t) {
    case DCK_F64: return 0x8000000000000000ull;
    case DCK_F32: return 0x80000000u;
    case DCK_F16:
    case DCK_BF16: return 0x8000u;
    default: return 0x80u;
    }
}

static inline uint64_t exp_mask(dck_dtype t) {
    switch (t) {
    case DCK_F64: return 0x7ff0000000000000ull;
    case DCK_F32: return 0x7f800000u;
    case DCK_F16: return 0x7c00u;
    case DCK_BF16: return 0x7f80u;
    case DCK_F8_E5M2: return 0x7cu;
    default: return 0x7fu; /* E4M3: only S.1111.111 is special (NaN) */
    }
}

/* 0 finite, 1 infinite, 2 NaN. */
static inline int classify(dck_dtype t, uint64_t u) {
    uint64_t e = exp_mask(t);
    if ((u & e) != e) return 0;
    if (t == DCK_F8_E4M3) return 2;
    uint64_t mant = u & (sign_mask(t) - 1) & ~e;
    return mant ? 2 : 1;
}

/* Distance on the grid of sign-magnitude floats: the magnitudes are ordered
 * like the values, so same sign: |ma - mb|; opposite signs: ma + mb (which
 * puts +0 and -0 0 apart). Magnitudes are < 2^63, so it fits. */
static inline uint64_t float_ulp(dck_dtype t, uint64_t a, uint64_t b) {
    uint64_t s = sign_mask(t), ma = a & (s - 1), mb = b & (s - 1);
    if ((a & s) == (b & s)) return ma > mb ? ma - mb : mb - ma;
    return ma + mb;
}

static inline int is_signed_int(dck_dtype t) {
    return t == DCK_I8 || t == DCK_I16 || t == DCK_I32 || t == DCK_I64;
}

/* A sign change (dck_diff_stats.sign_changes): a and b of a signed dtype
 * (float or signed integer), neither zero (+0 and -0 alike) and signs that
 * differ. NaNs are the caller's to leave out. */
static inline int sign_change(dck_dtype t, uint64_t a, uint64_t b) {
    uint64_t s;
    switch (t) {
    case DCK_I8: s = 0x80u; break;
    case DCK_I16: s = 0x8000u; break;
    case DCK_I32: s = 0x80000000u; break;
    case DCK_I64: s = 0x8000000000000000ull; break;
    case DCK_BOOL:
    case DCK_U8:
    case DCK_U16:
    case DCK_U32:
    case DCK_U64: return 0;
    default: /* floats: zero is a zero magnitude */
        s = sign_mask(t);
        return ((a ^ b) & s) && (a & (s - 1)) && (b & (s - 1));
    }
    return ((a ^ b) & s) && a && b;
}

static inline uint64_t int_dist(dck_dtype t, uint64_t a, uint64_t b) {
    if (is_signed_int(t)) {
        int64_t x, y;
        switch (t) {
        case DCK_I8: x = (int8_t)a, y = (int8_t)b; break;
        case DCK_I16: x = (int16_t)a, y = (int16_t)b; break;
        case DCK_I32: x = (int32_t)a, y = (int32_t)b; break;
        default: x = (int64_t)a, y = (int64_t)b; break;
        }
        /* The true difference is below 2^64, so unsigned wrap-around gives it. */
        return x >= y ? (uint64_t)x - (uint64_t)y : (uint64_t)y - (uint64_t)x;
    }
    return a > b ? a - b : b - a;
}

#endif

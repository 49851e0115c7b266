/* diff/: the element kernels of dck_diff_elements, per dtype and per
 * instruction set (diff_kernels.c).
 *
 * Every kernel gives the same bits as the scalar reference, which is the
 * element loop diff has always had: counts, maxima and ULP distances do not
 * depend on order, and the three sums of squares (sum_sq_diff, sum_sq_a,
 * sum_sq_b) are added one element at a time in element order in every
 * kernel, so rel_l2 does not depend on the kernel, the thread count or the
 * build. tests/check_diff.c compares each kernel available on the machine
 * with the reference, bit for bit. */
#ifndef DCK_DIFF_KERNELS_H
#define DCK_DIFF_KERNELS_H

#include "detcheck.h"

#include <stddef.h>
#include <stdint.h>

typedef enum {
    DCK_DIFF_ISA_SCALAR, /* the reference: one element at a time (any build) */
    DCK_DIFF_ISA_AVX2,   /* vector kernels built for AVX2 (x86-64, run-time check) */
    DCK_DIFF_ISA_AVX512, /* the same source built for AVX-512 F/VL/BW/DQ */
    DCK_DIFF_ISA_COUNT
} dck_diff_isa;

/* The fastest kernel this machine runs (decided once). */
dck_diff_isa dck_diff_isa_best(void);
/* Whether this build and machine can run isa. */
int dck_diff_isa_available(dck_diff_isa isa);
const char *dck_diff_isa_name(dck_diff_isa isa);

/* dck_diff_elements with the kernel of isa (which must be available); a
 * dtype without a vector kernel takes the reference loop. */
void dck_diff_elements_isa(dck_diff_isa isa, dck_dtype t, const void *a, const void *b, size_t n,
                           uint64_t first_flat, const dck_diff_tolerance *tol,
                           dck_diff_stats *acc);

/* A run of n elements whose bytes are equal on both sides: only the NaN/Inf
 * counts and the norms move. The sum of squares runs on four lanes (element
 * i into lane i % 4, lanes added (0+1)+(2+3) at the end), so it is the same
 * bits for the same run every time. */
void dck_diff_equal_isa(dck_diff_isa isa, dck_dtype t, const void *p, size_t n,
                        dck_diff_stats *acc);

#endif

/* One element of any dtype as a double, and ULP distances (public API). */
#include "common/common.h"
#include "common/element.h"

double dck_element_to_double(dck_dtype t, const void *p) {
    t = dck_dtype_part(t); /* complex: the real part */
    size_t sz = dck_dtype_size(t);
    if (!sz) return 0;
    return bits_to_double(t, load_bits(p, sz));
}

int dck_ulp_distance(dck_dtype t, const void *a, const void *b, uint64_t *out) {
    size_t sz = dck_dtype_size(t);
    *out = 0;
    if (!sz || dck_dtype_is_complex(t)) return 0; /* no one grid for two parts */
    uint64_t ua = load_bits(a, sz), ub = load_bits(b, sz);
    if (!dck_dtype_is_float(t)) {
        *out = int_dist(t, ua, ub);
        return 1;
    }
    if (classify(t, ua) == 2 || classify(t, ub) == 2) return 0;
    *out = float_ulp(t, ua, ub);
    return 1;
}


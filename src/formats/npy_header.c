/* The .npy header (format versions 1 to 3): magic, version, the Python
 * dict literal with descr, fortran_order and shape. Used by the .npy/.npz
 * readers (npy.c) and by torch.save archives that hold NumPy arrays (pt.c). */
#include "formats/readers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NPY_MAX_HEADER ((uint64_t)1 << 20)

static const uint8_t npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

bool dck_is_npy(const uint8_t *head, size_t n) { return n >= 6 && !memcmp(head, npy_magic, 6); }

/* The value after 'key': in the header dict, or NULL. */
static const char *dict_value(const char *h, size_t n, const char *key) {
    size_t kl = strlen(key);
    for (size_t i = 0; i + kl + 2 <= n; i++) {
        if ((h[i] == '\'' || h[i] == '"') && !memcmp(h + i + 1, key, kl) && h[i + 1 + kl] == h[i]) {
            size_t j = i + 2 + kl;
            while (j < n && (h[j] == ' ')) j++;
            if (j < n && h[j] == ':') {
                j++;
                while (j < n && h[j] == ' ') j++;
                return j < n ? h + j : NULL; /* a value, not the end of the header */
            }
        }
    }
    return NULL;
}

dck_status dck_npy_parse_header(const uint8_t *data, uint64_t len, const char *label,
                                dck_dtype *dtype, bool *byteswap, bool *fortran, int *ndim,
                                uint64_t *shape, uint64_t *data_offset) {
    if (len < 10 || memcmp(data, npy_magic, 6))
        return dck_set_error(DCK_ERR_FORMAT, "%s: not a .npy array (bad magic)", label);
    unsigned major = data[6];
    uint64_t hl, ho;
    if (major == 1) {
        hl = (uint64_t)data[8] | (uint64_t)data[9] << 8;
        ho = 10;
    } else if (major == 2 || major == 3) {
        if (len < 12) return dck_set_error(DCK_ERR_TRUNCATED, "%s: truncated .npy header", label);
        hl = (uint64_t)data[8] | (uint64_t)data[9] << 8 | (uint64_t)data[10] << 16 | (uint64_t)data[11] << 24;
        ho = 12;
    } else
        return dck_set_error(DCK_ERR_UNSUPPORTED, "%s: .npy format version %u", label, major);
    if (hl > NPY_MAX_HEADER) return dck_set_error(DCK_ERR_LIMIT, "%s: .npy header of %llu bytes (limit 1 MiB)", label, (unsigned long long)hl);
    if (hl > len - ho) return dck_set_error(DCK_ERR_TRUNCATED, "%s: truncated .npy header", label);
    const char *h = (const char *)data + ho;
    size_t n = (size_t)hl;
    const char *d = dict_value(h, n, "descr");
    const char *f = dict_value(h, n, "fortran_order");
    const char *sh = dict_value(h, n, "shape");
    if (!d || !f || !sh) return dck_set_error(DCK_ERR_FORMAT, "%s: .npy header lacks descr, fortran_order or shape", label);
    const char *end = h + n;
    if (*d != '\'' && *d != '"')
        return dck_set_error(DCK_ERR_UNSUPPORTED, "%s: .npy array of a structured dtype", label);
    char q = *d++; /* d <= end: dict_value returned a position before end */
    const char *de = memchr(d, q, (size_t)(end - d));
    if (!de || de - d > 15) return dck_set_error(DCK_ERR_FORMAT, "%s: bad .npy descr", label);
    char descr[16];
    memcpy(descr, d, (size_t)(de - d));
    descr[de - d] = 0;
    int t = dck_pk_numpy_dtype(descr, byteswap);
    if (t < 0) return dck_set_error(DCK_ERR_UNSUPPORTED, "%s: .npy dtype '%s', which detcheck does not read", label, descr);
    *dtype = (dck_dtype)t;
    if ((size_t)(end - f) >= 4 && !memcmp(f, "True", 4)) *fortran = true;
    else if ((size_t)(end - f) >= 5 && !memcmp(f, "False", 5)) *fortran = false;
    else return dck_set_error(DCK_ERR_FORMAT, "%s: bad .npy fortran_order", label);
    if (*sh != '(') return dck_set_error(DCK_ERR_FORMAT, "%s: bad .npy shape", label);
    sh++;
    int nd = 0;
    for (;;) {
        while (sh < end && (*sh == ' ' || *sh == ',')) sh++;
        if (sh >= end) return dck_set_error(DCK_ERR_FORMAT, "%s: bad .npy shape", label);
        if (*sh == ')') break;
        if (*sh < '0' || *sh > '9') return dck_set_error(DCK_ERR_FORMAT, "%s: bad .npy shape", label);
        uint64_t v = 0;
        while (sh < end && *sh >= '0' && *sh <= '9') {
            if (v > (UINT64_MAX - 9) / 10) return dck_set_error(DCK_ERR_LIMIT, "%s: .npy dimension too large", label);
            v = v * 10 + (uint64_t)(*sh++ - '0');
        }
        if (sh < end && *sh == 'L') sh++;
        if (nd == DCK_MAX_DIMS) return dck_set_error(DCK_ERR_LIMIT, "%s: .npy array with more than 16 dimensions", label);
        shape[nd++] = v;
    }
    *ndim = nd;
    *data_offset = ho + hl;
    uint64_t nbytes;
    if (dck_shape_bytes(*dtype, shape, nd, &nbytes) != DCK_OK)
        return dck_set_error(DCK_ERR_LIMIT, "%s: .npy shape product overflows", label);
    if (nbytes > len - *data_offset)
        return dck_set_error(DCK_ERR_TRUNCATED, "%s: truncated: array needs %llu bytes after the header, has %llu",
                             label, (unsigned long long)nbytes, (unsigned long long)(len - *data_offset));
    if (nbytes < len - *data_offset)
        return dck_set_error(DCK_ERR_FORMAT, "%s: %llu trailing bytes after the array", label,
                             (unsigned long long)(len - *data_offset - nbytes));
    return DCK_OK;
}

/* NumPy .npy files (format versions 1 to 3) and .npz archives (zip of .npy
 * members, stored or deflated). A .npy holds one array, named by the file's
 * name without .npy (and .zst); an .npz member is named by its member name
 * without .npy. */
#include "readers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NPY_MAX_HEADER ((uint64_t)1 << 20)

static const uint8_t npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

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
    int t = pk_numpy_dtype(descr, byteswap);
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

static char *npy_name(const char *relpath) {
    const char *b = strrchr(relpath, '/');
    b = b ? b + 1 : relpath;
    size_t l = strlen(b);
    if (l > 4 && !strcmp(b + l - 4, ".zst")) l -= 4;
    if (l > 4 && !strncmp(b + l - 4, ".npy", 4)) l -= 4;
    return dck_strndup(b, l);
}

static int npy_probe(const char *path, bool is_dir, const uint8_t *head, size_t n) {
    (void)path;
    return !is_dir && n >= 6 && !memcmp(head, npy_magic, 6);
}

static dck_status npy_open(dck_checkpoint *ck, const char *path, const char *relpath) {
    dck_file *f;
    dck_status s = dck_file_open(path, relpath, &f);
    if (s) return s;
    uint32_t idx;
    if ((s = dck_ck_add_file(ck, f, &idx))) return s;
    const uint8_t *data;
    uint64_t len;
    if ((s = dck_file_map(f, &data, &len))) return s;
    dck_dtype dt;
    bool bs, fo;
    int nd;
    uint64_t shape[DCK_MAX_DIMS], off;
    if ((s = dck_npy_parse_header(data, len, path, &dt, &bs, &fo, &nd, shape, &off))) return s;
    char *name = npy_name(relpath && *relpath ? relpath : path);
    if (!name) return dck_set_error(DCK_ERR_NOMEM, "out of memory");
    int64_t st[DCK_MAX_DIMS], acc = 1;
    for (int i = 0; i < nd; i++) {
        st[i] = acc;
        acc *= (int64_t)(shape[i] ? shape[i] : 1);
    }
    dck_piece pc;
    s = dck_rd_piece(path, name, dt, nd, shape, fo ? st : NULL, 0, off, len - off, idx, bs, &pc);
    if (!s) {
        s = dck_ck_add_piece(ck, name, dt, shape, nd, &pc);
        if (s) free(pc.strides);
    }
    free(name);
    return s;
}

const dck_reader dck_reader_npy = {"numpy", npy_probe, npy_open};

/* .npz: a zip whose first member is an .npy (torch.save zips start with
 * data.pkl). Archives whose first name is too long to see here are still
 * read: the PyTorch reader hands zips without data.pkl to the same code. */
static int npz_probe(const char *path, bool is_dir, const uint8_t *head, size_t n) {
    (void)path;
    if (is_dir || !dck_is_zip(head, n) || n < 30) return 0;
    size_t nl = (size_t)head[26] | (size_t)head[27] << 8;
    if (30 + nl > n || nl < 4) return 0;
    return !memcmp(head + 30 + nl - 4, ".npy", 4);
}

static dck_status npz_open(dck_checkpoint *ck, const char *path, const char *relpath) {
    dck_pt_opts o = {"", NULL, NULL, NULL, 0, true};
    return dck_pt_open_path(ck, path, relpath, &o);
}

const dck_reader dck_reader_npz = {"numpy-npz", npz_probe, npz_open};

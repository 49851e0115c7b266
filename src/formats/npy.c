/* NumPy .npy files and .npz archives (zip of .npy members, stored or
 * deflated). A .npy holds one array, named by the file's name without .npy
 * (and .zst); an .npz member is named by its member name without .npy.
 * The header parser is npy_header.c. */
#include "formats/readers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    return !is_dir && dck_is_npy(head, n);
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
    if (!name) return dck_oom(NULL);
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

const dck_reader dck_reader_npy = {"numpy", npy_probe, npy_open, NULL, 1};

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
    dck_pt_opts o = {"", NULL, NULL, NULL, 0, true, false};
    return dck_pt_open_path(ck, path, relpath, &o);
}

const dck_reader dck_reader_npz = {"numpy-npz", npz_probe, npz_open, NULL, 1};

/* safetensors: reader (single files, directories, Hugging Face index files,
 * detcheck's sharded layout) and writer.
 *
 * File: u64 little-endian N | N bytes of JSON header | data. Header:
 * {"__metadata__": {str: str}, NAME: {"dtype": D, "shape": [..],
 *  "data_offsets": [begin, end]}, ...}, offsets relative to the data start.
 * The data region must be covered exactly: no holes, no overlaps. */
#include "formats/formats.h"

#include <jansson.h>
#include <zstd.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ reader */

typedef struct {
    const char *name;
    uint64_t begin, end;
} st_range;

static int cmp_range(const void *a, const void *b) {
    const st_range *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* No message: every caller sets its own, naming the file, tensor and field. */
static dck_status json_u64(json_t *v, uint64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) return DCK_ERR_FORMAT;
    *out = (uint64_t)json_integer_value(v);
    return DCK_OK;
}

/* detcheck.slice.NAME = {"global_shape": [...], "offset": [...]} */
static dck_status parse_slice(const char *label, const char *name, const char *text, int ndim,
                              const uint64_t *shape, uint64_t *gshape, uint64_t *offset) {
    json_error_t je;
    json_t *j = json_loads(text, JSON_REJECT_DUPLICATES, &je);
    dck_status s = DCK_OK;
    json_t *gs = j ? json_object_get(j, "global_shape") : NULL;
    json_t *of = j ? json_object_get(j, "offset") : NULL;
    if (!j || !json_is_array(gs) || !json_is_array(of) || (int)json_array_size(gs) != ndim ||
        (int)json_array_size(of) != ndim) {
        s = dck_set_error(DCK_ERR_FORMAT,
                          "%s: slice metadata of tensor %s is not {\"global_shape\": [%d ints], "
                          "\"offset\": [%d ints]}",
                          label, name, ndim, ndim);
        goto done;
    }
    for (int i = 0; i < ndim; i++) {
        if (json_u64(json_array_get(gs, (size_t)i), &gshape[i]) ||
            json_u64(json_array_get(of, (size_t)i), &offset[i])) {
            s = dck_set_error(DCK_ERR_FORMAT, "%s: slice metadata of tensor %s: bad integer",
                              label, name);
            goto done;
        }
        if (offset[i] > gshape[i] || shape[i] > gshape[i] - offset[i]) {
            s = dck_set_error(DCK_ERR_LAYOUT,
                              "%s: tensor %s: slice [%llu, +%llu) along dim %d outside global "
                              "size %llu",
                              label, name, (unsigned long long)offset[i],
                              (unsigned long long)shape[i], i, (unsigned long long)gshape[i]);
            goto done;
        }
    }
done:
    json_decref(j);
    return s;
}

dck_status dck_safetensors_parse_header(dck_checkpoint *ck, uint32_t file, const char *json,
                                        size_t json_len, uint64_t data_size, const char *label) {
    json_error_t je;
    json_t *root = json_loadb(json, json_len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (!root)
        return dck_set_error(DCK_ERR_FORMAT, "%s: invalid JSON header at byte %d: %s", label,
                             je.position, je.text);
    dck_status s = DCK_OK;
    st_range *ranges = NULL;
    size_t nr = 0;
    if (!json_is_object(root)) {
        s = dck_set_error(DCK_ERR_FORMAT, "%s: header is not a JSON object", label);
        goto done;
    }
    json_t *meta = json_object_get(root, "__metadata__");
    if (meta && !json_is_object(meta)) {
        s = dck_set_error(DCK_ERR_FORMAT, "%s: __metadata__ is not an object", label);
        goto done;
    }
    /* __metadata__ is a map of strings to strings (as the format's reference
     * reader requires); a slice record must describe a stored tensor. */
    const char *mk;
    json_t *mv;
    json_object_foreach(meta, mk, mv) {
        if (!json_is_string(mv)) {
            s = dck_set_error(DCK_ERR_FORMAT, "%s: __metadata__ value of %s is not a string", label, mk);
            goto done;
        }
        size_t pl = strlen(DCK_SLICE_PREFIX);
        if (!strncmp(mk, DCK_SLICE_PREFIX, pl) && !json_is_object(json_object_get(root, mk + pl))) {
            s = dck_set_error(DCK_ERR_FORMAT, "%s: metadata %s describes a tensor the file does not hold",
                              label, mk);
            goto done;
        }
    }
    size_t n = json_object_size(root);
    if (n > DCK_MAX_TENSORS) {
        s = dck_set_error(DCK_ERR_LIMIT, "%s: more than %u tensors", label, DCK_MAX_TENSORS);
        goto done;
    }
    ranges = calloc(n ? n : 1, sizeof *ranges);
    if (!ranges) {
        s = dck_oom(NULL);
        goto done;
    }
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (!strcmp(key, "__metadata__")) continue;
        json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"),
               *of = json_object_get(v, "data_offsets");
        if (!json_is_object(v) || !json_is_string(dt) || !json_is_array(sh) ||
            !json_is_array(of) || json_array_size(of) != 2) {
            s = dck_set_error(DCK_ERR_FORMAT,
                              "%s: tensor %s: entry needs dtype, shape and data_offsets [begin, end]",
                              label, key);
            goto done;
        }
        dck_dtype dtype;
        if (dck_dtype_from_name(json_string_value(dt), &dtype)) {
            s = dck_set_error(DCK_ERR_UNSUPPORTED, "%s: tensor %s: unknown dtype %s", label, key,
                              json_string_value(dt));
            goto done;
        }
        size_t nd = json_array_size(sh);
        if (nd > DCK_MAX_DIMS) {
            s = dck_set_error(DCK_ERR_LIMIT, "%s: tensor %s: %zu dimensions (limit %d)", label, key,
                              nd, DCK_MAX_DIMS);
            goto done;
        }
        dck_piece p;
        memset(&p, 0, sizeof p);
        p.file = file;
        for (size_t i = 0; i < nd; i++)
            if (json_u64(json_array_get(sh, i), &p.shape[i])) {
                s = dck_set_error(DCK_ERR_FORMAT, "%s: tensor %s: shape holds a non-integer", label,
                                  key);
                goto done;
            }
        uint64_t nbytes, b0, b1;
        if (dck_shape_bytes(dtype, p.shape, (int)nd, &nbytes)) {
            s = dck_set_error(DCK_ERR_LIMIT, "%s: tensor %s: shape product overflows 64 bits",
                              label, key);
            goto done;
        }
        if (json_u64(json_array_get(of, 0), &b0) || json_u64(json_array_get(of, 1), &b1) || b1 < b0) {
            s = dck_set_error(DCK_ERR_FORMAT, "%s: tensor %s: bad data_offsets", label, key);
            goto done;
        }
        if (data_size != UINT64_MAX && b1 > data_size) {
            s = dck_set_error(DCK_ERR_FORMAT,
                              "%s: tensor %s: data offsets [%llu, %llu) out of bounds (data is %llu "
                              "bytes)",
                              label, key, (unsigned long long)b0, (unsigned long long)b1,
                              (unsigned long long)data_size);
            goto done;
        }
        if (b1 - b0 != nbytes) {
            s = dck_set_error(DCK_ERR_FORMAT,
                              "%s: tensor %s: data offsets span %llu bytes but shape x dtype size "
                              "is %llu",
                              label, key, (unsigned long long)(b1 - b0), (unsigned long long)nbytes);
            goto done;
        }
        ranges[nr++] = (st_range){key, b0, b1};
        uint64_t gshape[DCK_MAX_DIMS];
        memcpy(gshape, p.shape, sizeof gshape);
        char mkey[DCK_MAX_NAME + 32];
        snprintf(mkey, sizeof mkey, "%s%s", DCK_SLICE_PREFIX, key);
        json_t *sl = meta ? json_object_get(meta, mkey) : NULL;
        if (sl) {
            if (!json_is_string(sl)) {
                s = dck_set_error(DCK_ERR_FORMAT, "%s: metadata %s is not a string", label, mkey);
                goto done;
            }
            if ((s = parse_slice(label, key, json_string_value(sl), (int)nd, p.shape, gshape,
                                 p.offset)))
                goto done;
        }
        /* 8-byte header length + header precede the data */
        p.file_offset = 8 + json_len + b0;
        if ((s = dck_ck_add_piece(ck, key, dtype, gshape, (int)nd, &p))) goto done;
    }
    dck_qsort(ranges, nr, sizeof *ranges, cmp_range);
    uint64_t pos = 0;
    for (size_t i = 0; i < nr; i++) {
        if (ranges[i].begin < pos) {
            s = dck_set_error(DCK_ERR_FORMAT, "%s: data of tensors %s and %s overlap", label,
                              ranges[i - 1].name, ranges[i].name);
            goto done;
        }
        if (ranges[i].begin > pos) {
            s = dck_set_error(DCK_ERR_FORMAT,
                              "%s: data is not contiguous: bytes [%llu, %llu) before tensor %s "
                              "belong to no tensor",
                              label, (unsigned long long)pos, (unsigned long long)ranges[i].begin,
                              ranges[i].name);
            goto done;
        }
        pos = ranges[i].end;
    }
    if (data_size != UINT64_MAX && pos != data_size) {
        s = dck_set_error(DCK_ERR_FORMAT, "%s: %llu trailing data bytes belong to no tensor", label,
                          (unsigned long long)(data_size - pos));
        goto done;
    }
done:
    free(ranges);
    json_decref(root);
    return s;
}

dck_status dck_safetensors_open_file(dck_checkpoint *ck, const char *path, const char *relpath) {
    dck_file *f;
    dck_status s = dck_file_open(path, relpath, &f);
    if (s) return s;
    uint8_t lenb[8];
    size_t got;
    if ((s = dck_file_read_prefix(f, lenb, 8, &got))) goto fail;
    if (got < 8) {
        s = dck_set_error(DCK_ERR_TRUNCATED, "%s: truncated: %zu bytes, shorter than the 8-byte header length",
                          path, got);
        goto fail;
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | lenb[i];
    if (n > DCK_MAX_HEADER_BYTES) {
        s = dck_set_error(DCK_ERR_LIMIT, "%s: header length %llu is over the %u-byte limit", path,
                          (unsigned long long)n, DCK_MAX_HEADER_BYTES);
        goto fail;
    }
    if (f->data_size != UINT64_MAX && 8 + n > f->data_size) {
        s = dck_set_error(DCK_ERR_TRUNCATED, "%s: header length %llu is beyond the file (%llu bytes)",
                          path, (unsigned long long)n, (unsigned long long)f->data_size);
        goto fail;
    }
    char *buf = malloc((size_t)n + 8);
    if (!buf) {
        s = dck_oom(NULL);
        goto fail;
    }
    if ((s = dck_file_read_prefix(f, buf, (size_t)n + 8, &got))) {
        free(buf);
        goto fail;
    }
    if (got < n + 8) {
        free(buf);
        s = dck_set_error(DCK_ERR_TRUNCATED, "%s: header length %llu is beyond the file", path,
                          (unsigned long long)n);
        goto fail;
    }
    uint64_t data_size = f->data_size == UINT64_MAX ? UINT64_MAX : f->data_size - 8 - n;
    uint32_t fi;
    if ((s = dck_ck_add_file(ck, f, &fi))) {
        free(buf);
        return s;
    }
    s = dck_safetensors_parse_header(ck, fi, buf + 8, (size_t)n, data_size, path);
    free(buf);
    return s;
fail:
    dck_file_close(f);
    return s;
}

static int st_probe(const char *path, bool is_dir, const uint8_t *head, size_t nhead) {
    (void)path;
    if (is_dir || nhead < 9) return 0;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | head[i];
    if (n == 0) return 0;
    size_t k = 8;
    while (k < nhead && (head[k] == ' ' || head[k] == '\n' || head[k] == '\t' || head[k] == '\r')) k++;
    return k < nhead && head[k] == '{';
}

static dck_status st_open(dck_checkpoint *ck, const char *path, const char *relpath) {
    return dck_safetensors_open_file(ck, path, relpath);
}

const dck_reader dck_reader_safetensors = {"safetensors", st_probe, st_open, NULL, 1};

/* ------------------------------------------------------------------ HF index */

static int cmp_cstr(const void *a, const void *b) {
    return dck_name_compare(*(char *const *)a, *(char *const *)b);
}

/* Opens the shards named in an index's weight_map (each once), relative to
 * the index's directory. Tensors must come from the shard the index names. */
static dck_status open_index(dck_checkpoint *ck, const char *index_path, const char *dir,
                             const char *relprefix) {
    json_error_t je;
    json_t *root = json_load_file(index_path, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return dck_set_error(DCK_ERR_FORMAT, "%s: invalid JSON at line %d: %s", index_path, je.line,
                             je.text);
    dck_status s = DCK_OK;
    json_t *wm = json_object_get(root, "weight_map");
    char **files = NULL;
    size_t nf = 0;
    if (!json_is_object(wm)) {
        s = dck_set_error(DCK_ERR_FORMAT, "%s: no weight_map object", index_path);
        goto done;
    }
    files = calloc(json_object_size(wm) + 1, sizeof *files);
    if (!files) {
        s = dck_oom(NULL);
        goto done;
    }
    const char *key;
    json_t *v;
    json_object_foreach(wm, key, v) {
        const char *fn = json_string_value(v);
        if (!fn || !*fn || fn[0] == '/' || strstr(fn, "..")) {
            s = dck_set_error(DCK_ERR_FORMAT, "%s: weight_map entry of %s is not a relative file name",
                              index_path, key);
            goto done;
        }
        size_t i;
        for (i = 0; i < nf; i++)
            if (!strcmp(files[i], fn)) break;
        if (i == nf) files[nf++] = (char *)fn;
    }
    dck_qsort(files, nf, sizeof *files, cmp_cstr);
    size_t before = ck->ntensors;
    for (size_t i = 0; i < nf && !s; i++) {
        char *p = dck_path_join(dir, files[i]);
        char *rp = dck_path_join(relprefix, files[i]);
        if (!p || !rp) s = dck_oom(NULL);
        else s = dck_safetensors_open_file(ck, p, rp);
        free(p);
        free(rp);
    }
    /* every tensor the index names must exist */
    if (!s) {
        json_object_foreach(wm, key, v) {
            size_t j;
            for (j = before; j < ck->ntensors; j++)
                if (!strcmp(ck->tensors[j].info.name, key)) break;
            if (j == ck->ntensors) {
                s = dck_set_error(DCK_ERR_FORMAT, "%s: tensor %s is in the index but in no shard",
                                  index_path, key);
                break;
            }
        }
    }
done:
    free(files);
    json_decref(root);
    return s;
}

#include <dirent.h>

static char *find_index_in_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return NULL;
    struct dirent *e;
    char *best = NULL;
    while ((e = readdir(d)))
        if (dck_has_suffix(e->d_name, ".safetensors.index.json") &&
            (!best || strcmp(e->d_name, best) < 0)) {
            free(best);
            best = dck_strdup(e->d_name);
        }
    closedir(d);
    return best;
}

static int idx_probe(const char *path, bool is_dir, const uint8_t *head, size_t nhead) {
    (void)head;
    (void)nhead;
    if (is_dir) {
        char *n = find_index_in_dir(path);
        free(n);
        return n != NULL;
    }
    return dck_has_suffix(path, ".index.json");
}

static dck_status idx_open(dck_checkpoint *ck, const char *path, const char *relpath) {
    (void)relpath;
    if (relpath && !*relpath) { /* a directory */
        char *n = find_index_in_dir(path);
        if (!n) return dck_set_error(DCK_ERR_FORMAT, "%s: no index file", path);
        char *ip = dck_path_join(path, n);
        free(n);
        if (!ip) return dck_oom(NULL);
        dck_status s = open_index(ck, ip, path, "");
        free(ip);
        return s;
    }
    char *dir = dck_strdup(path);
    if (!dir) return dck_oom(NULL);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else strcpy(dir, ".");
    dck_status s = open_index(ck, path, dir, "");
    free(dir);
    return s;
}

const dck_reader dck_reader_st_index = {"safetensors-index", idx_probe, idx_open, NULL, 0};

/* ------------------------------------------------------------------ writer */

typedef struct {
    dck_atomic_file af;
    ZSTD_CCtx *cz;
    uint8_t *zbuf;
    size_t zcap;
} st_out;

static dck_status out_write(st_out *o, const void *data, size_t len, int end) {
    if (!o->cz) return dck_atomic_write(&o->af, data, len);
    ZSTD_inBuffer ib = {data, len, 0};
    for (;;) {
        ZSTD_outBuffer ob = {o->zbuf, o->zcap, 0};
        size_t r = ZSTD_compressStream2(o->cz, &ob, &ib, end ? ZSTD_e_end : ZSTD_e_continue);
        if (ZSTD_isError(r))
            return dck_set_error(DCK_ERR_IO, "%s: zstd compression failed: %s", o->af.path,
                                 ZSTD_getErrorName(r));
        dck_status s = dck_atomic_write(&o->af, o->zbuf, ob.pos);
        if (s) return s;
        if (end ? r == 0 : ib.pos == ib.size) return DCK_OK;
    }
}

static json_t *u64_array(const uint64_t *v, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_integer((json_int_t)v[i]));
    return a;
}

dck_status dck_safetensors_write(const char *path, const dck_st_tensor *tensors, size_t n,
                                 const dck_kv *meta, size_t nmeta, int zstd_level) {
    json_t *hdr = json_object(), *md = json_object();
    dck_status s = DCK_OK;
    uint64_t pos = 0;
    char *text = NULL;
    st_out o;
    memset(&o, 0, sizeof o);
    o.af.fd = -1;
    for (size_t i = 0; i < nmeta; i++) json_object_set_new(md, meta[i].key, json_string(meta[i].value));
    for (size_t i = 0; i < n; i++) {
        const dck_st_tensor *t = &tensors[i];
        uint64_t nb;
        if (!t->name) {
            s = dck_set_error(DCK_ERR_INVALID, "%s: tensor %zu has no name", path, i);
            goto done;
        }
        if ((unsigned)t->dtype >= DCK_DTYPE_COUNT) {
            s = dck_set_error(DCK_ERR_INVALID, "%s: tensor %s: unknown dtype %d", path, t->name,
                              (int)t->dtype);
            goto done;
        }
        if (dck_shape_bytes(t->dtype, t->shape, t->ndim, &nb)) {
            s = dck_set_error(DCK_ERR_INVALID, "%s: tensor %s: shape overflows", path, t->name);
            goto done;
        }
        if (nb && !t->data) {
            s = dck_set_error(DCK_ERR_INVALID, "%s: tensor %s: NULL data", path, t->name);
            goto done;
        }
        json_t *e = json_object();
        json_object_set_new(e, "dtype", json_string(dck_dtype_name(t->dtype)));
        json_object_set_new(e, "shape", u64_array(t->shape, t->ndim));
        json_t *of = json_array();
        json_array_append_new(of, json_integer((json_int_t)pos));
        json_array_append_new(of, json_integer((json_int_t)(pos + nb)));
        json_object_set_new(e, "data_offsets", of);
        if (json_object_get(hdr, t->name)) {
            json_decref(e);
            s = dck_set_error(DCK_ERR_INVALID, "%s: duplicate tensor name %s", path, t->name);
            goto done;
        }
        json_object_set_new(hdr, t->name, e);
        pos += nb;
        if (t->global_ndim > 0) {
            if (t->global_ndim != t->ndim) {
                s = dck_set_error(DCK_ERR_INVALID, "%s: tensor %s: slice rank differs from global rank",
                                  path, t->name);
                goto done;
            }
            json_t *sl = json_object();
            json_object_set_new(sl, "global_shape", u64_array(t->global_shape, t->ndim));
            json_object_set_new(sl, "offset", u64_array(t->offset, t->ndim));
            char *st = json_dumps(sl, JSON_COMPACT);
            json_decref(sl);
            char key[DCK_MAX_NAME + 32];
            snprintf(key, sizeof key, "%s%s", DCK_SLICE_PREFIX, t->name);
            json_object_set_new(md, key, json_string(st));
            json_object_set_new(md, DCK_LAYOUT_KEY, json_string(DCK_LAYOUT_VALUE));
            free(st);
        }
    }
    if (json_object_size(md)) json_object_set(hdr, "__metadata__", md);
    text = json_dumps(hdr, JSON_COMPACT | JSON_SORT_KEYS);
    if (!text) {
        s = dck_oom(NULL);
        goto done;
    }
    /* Pad the header with spaces so the data starts 8-byte aligned. */
    size_t tl = strlen(text), padded = (tl + 7) / 8 * 8;
    uint8_t lenb[8];
    for (int i = 0; i < 8; i++) lenb[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    if ((s = dck_atomic_open(path, &o.af))) goto done;
    if (zstd_level > 0) {
        o.cz = ZSTD_createCCtx();
        o.zcap = ZSTD_CStreamOutSize();
        o.zbuf = malloc(o.zcap);
        if (!o.cz || !o.zbuf) {
            s = dck_oom(NULL);
            goto done;
        }
        ZSTD_CCtx_setParameter(o.cz, ZSTD_c_compressionLevel, zstd_level);
        ZSTD_CCtx_setParameter(o.cz, ZSTD_c_checksumFlag, 1);
        ZSTD_CCtx_setPledgedSrcSize(o.cz, 8 + padded + pos);
    }
    static const char spaces[8] = "        ";
    if ((s = out_write(&o, lenb, 8, 0)) || (s = out_write(&o, text, tl, 0)) ||
        (s = out_write(&o, spaces, padded - tl, 0)))
        goto done;
    for (size_t i = 0; i < n && !s; i++) {
        uint64_t nb;
        dck_shape_bytes(tensors[i].dtype, tensors[i].shape, tensors[i].ndim, &nb);
        s = out_write(&o, tensors[i].data, (size_t)nb, 0);
    }
    if (!s && o.cz) s = out_write(&o, NULL, 0, 1);
    if (!s) s = dck_atomic_commit(&o.af);
done:
    if (s && o.af.fd >= 0) dck_atomic_abort(&o.af);
    ZSTD_freeCCtx(o.cz);
    free(o.zbuf);
    free(text);
    json_decref(md);
    json_decref(hdr);
    return s;
}

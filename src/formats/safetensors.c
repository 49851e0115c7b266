/* safetensors: the reader (single files, directories, detcheck's sharded
 * layout); Hugging Face index files are read by safetensors_index.c, files
 * are written by safetensors_write.c.
 *
 * File: u64 little-endian N | N bytes of JSON header | data. Header:
 * {"__metadata__": {str: str}, NAME: {"dtype": D, "shape": [..],
 *  "data_offsets": [begin, end]}, ...}, offsets relative to the data start.
 * The data region must be covered exactly: no holes, no overlaps.
 *
 * Headers are read by the JSON scanner of common/json_scan.h, which accepts
 * exactly the documents jansson's loader accepts with the flags used before
 * (JSON_REJECT_DUPLICATES, plus JSON_ALLOW_NUL for headers);
 * tests/check_safetensors.c covers the corner cases. Reading a header costs
 * a few hundred nanoseconds per tensor. */
#include "formats/formats.h"
#include "common/json_scan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How many tensors ahead the loop that adds them fetches the slot of a
 * name into the cache (the name index of 100k tensors is megabytes). */
#define ST_PREFETCH_AHEAD 8

typedef struct {
    const char *name;
    uint64_t begin, end;
} st_range;

static int cmp_range(const void *a, const void *b) {
    const st_range *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* detcheck.slice.NAME = {"global_shape": [...], "offset": [...]}, read as
 * json_loads(JSON_REJECT_DUPLICATES) read it. */
static dck_status parse_slice(const char *label, const char *name, const char *text, int ndim,
                              const uint64_t *shape, uint64_t *gshape, uint64_t *offset) {
    dck_json js;
    DCK_TRY(dck_json_init(&js, text, strlen(text), false));
    uint64_t gv[DCK_MAX_DIMS], ov[DCK_MAX_DIMS];
    bool gok[DCK_MAX_DIMS], ook[DCK_MAX_DIMS];
    size_t ng = 0, no = 0;
    bool is_obj = false, has_g = false, has_o = false;
    int r = 0;
    dck_json_ws(&js);
    if (dck_json_at(&js, '{')) {
        is_obj = true;
        dck_json_obj o;
        dck_json_obj_open(&js, &o, false);
        const char *k;
        size_t kl;
        while ((r = dck_json_obj_next(&js, &o, &k, &kl)) == 1) {
            bool g = !strcmp(k, "global_shape"), f = !strcmp(k, "offset");
            if ((g || f) && dck_json_at(&js, '[')) {
                if (g) has_g = true;
                else has_o = true;
                r = dck_json_u64_array(&js, 2, g ? gv : ov, g ? gok : ook, DCK_MAX_DIMS, g ? &ng : &no);
            } else {
                r = dck_json_skip(&js, 2);
            }
            if (r) break;
        }
    } else if (dck_json_at(&js, '[')) {
        r = dck_json_skip(&js, 1);
    } else {
        r = dck_json_fail(&js, "'[' or '{' expected");
    }
    if (!r) r = dck_json_finish(&js);
    bool oom = js.oom;
    dck_json_free(&js);
    if (oom) return dck_oom(NULL);
    if (r || !is_obj || !has_g || !has_o || ng != (size_t)ndim || no != (size_t)ndim)
        return dck_set_error(DCK_ERR_FORMAT,
                             "%s: slice metadata of tensor %s is not {\"global_shape\": [%d ints], "
                             "\"offset\": [%d ints]}",
                             label, name, ndim, ndim);
    for (int i = 0; i < ndim; i++) {
        if (!gok[i] || !ook[i])
            return dck_set_error(DCK_ERR_FORMAT, "%s: slice metadata of tensor %s: bad integer",
                                 label, name);
        gshape[i] = gv[i];
        offset[i] = ov[i];
        if (offset[i] > gshape[i] || shape[i] > gshape[i] - offset[i])
            return dck_set_error(DCK_ERR_LAYOUT,
                                 "%s: tensor %s: slice [%llu, +%llu) along dim %d outside global "
                                 "size %llu",
                                 label, name, (unsigned long long)offset[i],
                                 (unsigned long long)shape[i], i, (unsigned long long)gshape[i]);
    }
    return DCK_OK;
}

/* One top-level member of a header, as the scanner found it. */
enum {
    ST_OBJECT = 1,     /* the value is an object */
    ST_SHAPE = 2,      /* "shape" is an array */
    ST_OFFSETS = 4,    /* "data_offsets" is an array of two elements */
    ST_OFF_OK = 8,     /* ... both integers >= 0 */
    ST_SHAPE_BAD = 16, /* one of the first DCK_MAX_DIMS shape elements is not an integer >= 0 */
};

typedef struct {
    const char *name;
    const char *dtype; /* NULL: missing or not a string */
    uint64_t b0, b1;
    size_t nd;         /* elements of "shape" */
    uint32_t dims;     /* index of the first stored one in the dims pool */
    uint32_t flags;
    uint32_t at;       /* offset of the key in the header */
} st_member;

typedef struct {
    const char *key, *value; /* value NULL: not a string */
    uint32_t at;
} st_meta;

typedef struct {
    dck_json js;
    st_member *m;
    size_t nm, cap_m;
    uint64_t *dims;
    size_t ndims, cap_dims;
    st_meta *meta;
    size_t nmeta, cap_meta;
    long meta_at;       /* member index of "__metadata__", -1 none */
    bool meta_object;
    bool slice_keys;    /* some metadata key starts with the slice prefix */
    uint32_t top_id, meta_id;
} st_header;

static int st_member_value(st_header *h, st_member *e) {
    dck_json *js = &h->js;
    if (!dck_json_at(js, '{')) return dck_json_skip(js, 2);
    e->flags |= ST_OBJECT;
    dck_json_obj o;
    dck_json_obj_open(js, &o, false);
    const char *k;
    size_t kl;
    int r;
    while ((r = dck_json_obj_next(js, &o, &k, &kl)) == 1) {
        if (kl == 5 && !memcmp(k, "dtype", 5) && dck_json_at(js, '"')) {
            size_t n;
            r = dck_json_string(js, false, &e->dtype, &n);
        } else if (kl == 5 && !memcmp(k, "shape", 5) && dck_json_at(js, '[')) {
            uint64_t v[DCK_MAX_DIMS];
            bool ok[DCK_MAX_DIMS];
            if ((r = dck_json_u64_array(js, 3, v, ok, DCK_MAX_DIMS, &e->nd))) return r;
            size_t keep = e->nd < DCK_MAX_DIMS ? e->nd : DCK_MAX_DIMS;
            if (h->ndims + keep > UINT32_MAX) return dck_json_fail(js, "too many dimensions");
            if (dck_grow((void **)&h->dims, &h->cap_dims, h->ndims + keep, sizeof *h->dims)) {
                js->oom = true;
                return dck_json_fail(js, "out of memory");
            }
            e->dims = (uint32_t)h->ndims;
            if (keep) memcpy(h->dims + h->ndims, v, keep * sizeof *v); /* dims may be NULL */
            h->ndims += keep;
            e->flags |= ST_SHAPE;
            for (size_t i = 0; i < keep; i++)
                if (!ok[i]) e->flags |= ST_SHAPE_BAD;
        } else if (kl == 12 && !memcmp(k, "data_offsets", 12) && dck_json_at(js, '[')) {
            uint64_t v[2];
            bool ok[2];
            size_t n;
            if ((r = dck_json_u64_array(js, 3, v, ok, 2, &n))) return r;
            if (n == 2) {
                e->flags |= ST_OFFSETS;
                if (ok[0] && ok[1]) e->flags |= ST_OFF_OK;
                e->b0 = v[0];
                e->b1 = v[1];
            }
        } else {
            r = dck_json_skip(js, 3); /* other keys, and the three above when of another type */
        }
        if (r) return r;
    }
    return r;
}

static int st_meta_value(st_header *h) {
    dck_json *js = &h->js;
    if (!dck_json_at(js, '{')) return dck_json_skip(js, 2);
    h->meta_object = true;
    dck_json_obj o;
    dck_json_obj_open(js, &o, true);
    h->meta_id = o.id;
    const char *k;
    size_t kl;
    int r;
    size_t pl = strlen(DCK_SLICE_PREFIX);
    for (;;) {
        const unsigned char *kat = js->p;
        if ((r = dck_json_obj_next(js, &o, &k, &kl)) != 1) break;
        if (dck_grow((void **)&h->meta, &h->cap_meta, h->nmeta + 1, sizeof *h->meta)) {
            js->oom = true;
            return dck_json_fail(js, "out of memory");
        }
        st_meta *mt = &h->meta[h->nmeta++];
        mt->key = k;
        mt->value = NULL;
        mt->at = (uint32_t)(kat - js->start);
        if (kl >= pl && !memcmp(k, DCK_SLICE_PREFIX, pl)) h->slice_keys = true;
        if (dck_json_at(js, '"')) {
            size_t n;
            r = dck_json_string(js, false, &mt->value, &n);
        } else {
            r = dck_json_skip(js, 3);
        }
        if (r) return r;
    }
    return r;
}

/* Scans a header into h; 0 or -1 (js.err set). *not_object: the top level
 * is an array. */
static int st_scan(st_header *h, bool *not_object, const char *label, dck_status *limit) {
    dck_json *js = &h->js;
    dck_json_ws(js);
    if (dck_json_at(js, '[')) {
        *not_object = true;
        return dck_json_skip(js, 1) ? -1 : dck_json_finish(js);
    }
    if (!dck_json_at(js, '{')) return dck_json_fail(js, "'[' or '{' expected");
    dck_json_obj o;
    dck_json_obj_open(js, &o, true);
    h->top_id = o.id;
    const char *k;
    size_t kl;
    int r;
    for (;;) {
        const unsigned char *kat = js->p;
        if ((r = dck_json_obj_next(js, &o, &k, &kl)) != 1) break;
        if (h->nm > DCK_MAX_TENSORS) {
            *limit = dck_set_error(DCK_ERR_LIMIT, "%s: more than %u tensors", label, DCK_MAX_TENSORS);
            return -1;
        }
        size_t cap0 = h->cap_m;
        if (dck_grow((void **)&h->m, &h->cap_m, h->nm + 1, sizeof *h->m)) {
            js->oom = true;
            return dck_json_fail(js, "out of memory");
        }
        /* a header of many tensors fills what doubling added: in one call */
        if (h->cap_m != cap0) dck_prefault(h->m + cap0, (h->cap_m - cap0) * sizeof *h->m);
        st_member *e = &h->m[h->nm++];
        memset(e, 0, sizeof *e);
        e->name = k;
        e->at = (uint32_t)(kat - js->start);
        if (!strcmp(k, "__metadata__")) {
            h->meta_at = (long)(h->nm - 1);
            if (dck_json_at(js, '{')) e->flags |= ST_OBJECT;
            r = st_meta_value(h);
        } else {
            r = st_member_value(h, e);
        }
        if (r) return r;
    }
    if (r || dck_json_finish(js)) return -1;
    /* duplicate keys of the two large objects, in tables sized once */
    if (h->nm && dck_json_dedupe(js, h->top_id, &h->m[0].name, sizeof *h->m, &h->m[0].at, sizeof *h->m, h->nm))
        return -1;
    if (h->nmeta &&
        dck_json_dedupe(js, h->meta_id, &h->meta[0].key, sizeof *h->meta, &h->meta[0].at, sizeof *h->meta, h->nmeta))
        return -1;
    return 0;
}

static int is_sorted_ranges(const st_range *r, size_t n) {
    for (size_t i = 1; i < n; i++)
        if (cmp_range(&r[i - 1], &r[i]) > 0) return 0;
    return 1;
}

dck_status dck_safetensors_parse_header(dck_checkpoint *ck, uint32_t file, const char *json,
                                        size_t json_len, uint64_t data_size, const char *label) {
    st_header h;
    memset(&h, 0, sizeof h);
    h.meta_at = -1;
    dck_status s = dck_json_init(&h.js, json, json_len, true);
    if (s) return s;
    st_range *ranges = NULL;
    size_t nr = 0;
    bool not_object = false;
    dck_status limit = DCK_OK;
    if (st_scan(&h, &not_object, label, &limit)) {
        s = limit ? limit : dck_json_error(&h.js, label, "header");
        goto done;
    }
    if (not_object) {
        s = dck_set_error(DCK_ERR_FORMAT, "%s: header is not a JSON object", label);
        goto done;
    }
    if (h.meta_at >= 0 && !h.meta_object) {
        s = dck_set_error(DCK_ERR_FORMAT, "%s: __metadata__ is not an object", label);
        goto done;
    }
    /* __metadata__ is a map of strings to strings (as the format's reference
     * reader requires); a slice record must describe a stored tensor. */
    size_t pl = strlen(DCK_SLICE_PREFIX);
    for (size_t i = 0; i < h.nmeta; i++) {
        const char *mk = h.meta[i].key;
        if (!h.meta[i].value) {
            s = dck_set_error(DCK_ERR_FORMAT, "%s: __metadata__ value of %s is not a string", label, mk);
            goto done;
        }
        if (!strncmp(mk, DCK_SLICE_PREFIX, pl)) {
            long at = dck_json_slot_find(&h.js, h.top_id, mk + pl, strlen(mk + pl));
            if (at < 0 || !(h.m[at].flags & ST_OBJECT)) {
                s = dck_set_error(DCK_ERR_FORMAT,
                                  "%s: metadata %s describes a tensor the file does not hold", label, mk);
                goto done;
            }
        }
    }
    if (h.nm > DCK_MAX_TENSORS) {
        s = dck_set_error(DCK_ERR_LIMIT, "%s: more than %u tensors", label, DCK_MAX_TENSORS);
        goto done;
    }
    ranges = malloc((h.nm ? h.nm : 1) * sizeof *ranges);
    if (!ranges) {
        s = dck_oom(NULL);
        goto done;
    }
    if ((s = dck_ck_reserve(ck, h.nm))) goto done;
    for (size_t mi = 0; mi < h.nm; mi++) {
        if (mi + ST_PREFETCH_AHEAD < h.nm) dck_ck_prefetch_name(ck, h.m[mi + ST_PREFETCH_AHEAD].name);
        if ((long)mi == h.meta_at) continue;
        const st_member *e = &h.m[mi];
        const char *key = e->name;
        if (!(e->flags & ST_OBJECT) || !e->dtype || !(e->flags & ST_SHAPE) || !(e->flags & ST_OFFSETS)) {
            s = dck_set_error(DCK_ERR_FORMAT,
                              "%s: tensor %s: entry needs dtype, shape and data_offsets [begin, end]",
                              label, key);
            goto done;
        }
        dck_dtype dtype;
        if (dck_dtype_from_name(e->dtype, &dtype)) {
            s = dck_set_error(DCK_ERR_UNSUPPORTED, "%s: tensor %s: unknown dtype %s", label, key, e->dtype);
            goto done;
        }
        size_t nd = e->nd;
        if (nd > DCK_MAX_DIMS) {
            s = dck_set_error(DCK_ERR_LIMIT, "%s: tensor %s: %zu dimensions (limit %d)", label, key,
                              nd, DCK_MAX_DIMS);
            goto done;
        }
        if (e->flags & ST_SHAPE_BAD) {
            s = dck_set_error(DCK_ERR_FORMAT, "%s: tensor %s: shape holds a non-integer", label, key);
            goto done;
        }
        dck_piece p;
        memset(&p, 0, sizeof p);
        p.file = file;
        memcpy(p.shape, h.dims + e->dims, nd * sizeof *p.shape);
        uint64_t nbytes, b0 = e->b0, b1 = e->b1;
        if (dck_shape_bytes(dtype, p.shape, (int)nd, &nbytes)) {
            s = dck_set_error(DCK_ERR_LIMIT, "%s: tensor %s: shape product overflows 64 bits",
                              label, key);
            goto done;
        }
        if (!(e->flags & ST_OFF_OK) || b1 < b0) {
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
        if (h.slice_keys) {
            /* the key as the old reader built it: cut at this length */
            char mkey[DCK_MAX_NAME + 32];
            int ml = snprintf(mkey, sizeof mkey, "%s%s", DCK_SLICE_PREFIX, key);
            size_t mlen = ml < 0 ? 0 : (size_t)ml < sizeof mkey ? (size_t)ml : sizeof mkey - 1;
            long at = dck_json_slot_find(&h.js, h.meta_id, mkey, mlen);
            if (at >= 0) {
                /* every metadata value is a string (checked above) */
                if ((s = parse_slice(label, key, h.meta[at].value, (int)nd, p.shape, gshape,
                                     p.offset)))
                    goto done;
            }
        }
        /* 8-byte header length + header precede the data */
        p.file_offset = 8 + json_len + b0;
        if ((s = dck_ck_add_piece(ck, key, dtype, gshape, (int)nd, &p))) goto done;
    }
    if (!is_sorted_ranges(ranges, nr)) dck_qsort(ranges, nr, sizeof *ranges, cmp_range);
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
    free(h.m);
    free(h.dims);
    free(h.meta);
    dck_json_free(&h.js);
    return s;
}

/* Headers up to this size are read with the length in one read; from
 * ST_MAP_BYTES on they are mapped (no copy, no fresh pages). */
#define ST_FIRST_READ 4096
#define ST_MAP_BYTES ((uint64_t)1 << 20)

/* The header of an open file whose first nhead decompressed bytes are in
 * head; takes f. */
static dck_status open_with_head(dck_checkpoint *ck, dck_file *f, const uint8_t *head, size_t got) {
    const char *path = f->path;
    dck_status s = DCK_OK;
    char *buf = NULL;
    void *map = NULL;
    if (got < 8) {
        s = dck_set_error(DCK_ERR_TRUNCATED, "%s: truncated: %zu bytes, shorter than the 8-byte header length",
                          path, got);
        goto fail;
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | head[i];
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
    const char *hdr = (const char *)head;
    if (n + 8 > got && !f->zstd && n >= ST_MAP_BYTES) {
        /* large headers are read from the page cache in place (a map io.c
         * registers: a file cut meanwhile reads zeros, and is named) */
        if ((map = dck_file_map_range(f, 0, (size_t)n + 8))) hdr = map;
    }
    if (n + 8 > got && !map) {
        if (!(buf = malloc((size_t)n + 8))) {
            s = dck_oom(NULL);
            goto fail;
        }
        if ((s = dck_file_read_prefix(f, buf, (size_t)n + 8, &got))) goto fail;
        if (got < n + 8) {
            s = dck_set_error(DCK_ERR_TRUNCATED, "%s: header length %llu is beyond the file", path,
                              (unsigned long long)n);
            goto fail;
        }
        hdr = buf;
    }
    uint64_t data_size = f->data_size == UINT64_MAX ? UINT64_MAX : f->data_size - 8 - n;
    uint32_t fi;
    if ((s = dck_ck_add_file(ck, f, &fi))) { /* f is closed */
        if (map) dck_file_unmap_range(map, (size_t)n + 8);
        free(buf);
        return s;
    }
    s = dck_safetensors_parse_header(ck, fi, hdr + 8, (size_t)n, data_size, ck->files[fi]->path);
    if (map) dck_file_unmap_range(map, (size_t)n + 8);
    free(buf);
    return s;
fail:
    if (map) dck_file_unmap_range(map, (size_t)n + 8);
    free(buf);
    dck_file_close(f);
    return s;
}

dck_status dck_safetensors_open_file(dck_checkpoint *ck, const char *path, const char *relpath) {
    dck_file *f;
    DCK_TRY(dck_file_open(path, relpath, &f));
    uint8_t first[ST_FIRST_READ];
    size_t got;
    dck_status s = dck_file_read_prefix(f, first, sizeof first, &got);
    if (s) {
        dck_file_close(f);
        return s;
    }
    return open_with_head(ck, f, first, got);
}

/* For open.c's scans, which open and sniff each file first: the same as
 * dck_safetensors_open_file on that open file (one open per file, and a
 * header that fits in what the sniffing read is not read again). Takes f. */
dck_status dck_safetensors_open_opened(dck_checkpoint *ck, dck_file *f, const uint8_t *head, size_t nhead);
dck_status dck_safetensors_open_opened(dck_checkpoint *ck, dck_file *f, const uint8_t *head, size_t nhead) {
    return open_with_head(ck, f, head, nhead);
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

/* The safetensors writer (detcheck_static.h: dck_safetensors_write): the
 * header by jansson with sorted keys, padded to 8 bytes, then the data,
 * optionally zstd-compressed, written atomically. */
#include "formats/formats.h"

#include <jansson.h>
#include <zstd.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    static const char spaces[] = "        "; /* 8 spaces and the NUL */
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

/* libFuzzer target: the safetensors header reader. Each input is hashed as
 * a whole file through the public open path, and is also read as a header
 * (as is, and past an 8-byte length) by the reader and by the jansson-based
 * reader it replaced (kept below as the reference): both must give the same
 * status and, when they accept, the same tensors and pieces. So the new
 * reader stays exactly as strict as jansson. */
#include "detcheck.h"
#include "fuzz_util.h"
#include "formats/formats.h"

#include <jansson.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------ reference: the reader before, on jansson */

typedef struct {
    const char *name;
    uint64_t begin, end;
} st_range;

static int ref_cmp_range(const void *a, const void *b) {
    const st_range *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static dck_status ref_json_u64(json_t *v, uint64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) return DCK_ERR_FORMAT;
    *out = (uint64_t)json_integer_value(v);
    return DCK_OK;
}

/* detcheck.slice.NAME = {"global_shape": [...], "offset": [...]} */
static dck_status ref_parse_slice(const char *label, const char *name, const char *text, int ndim,
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
        if (ref_json_u64(json_array_get(gs, (size_t)i), &gshape[i]) ||
            ref_json_u64(json_array_get(of, (size_t)i), &offset[i])) {
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

static dck_status ref_parse_header(dck_checkpoint *ck, uint32_t file, const char *json,
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
            if (ref_json_u64(json_array_get(sh, i), &p.shape[i])) {
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
        if (ref_json_u64(json_array_get(of, 0), &b0) || ref_json_u64(json_array_get(of, 1), &b1) || b1 < b0) {
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
            if ((s = ref_parse_slice(label, key, json_string_value(sl), (int)nd, p.shape, gshape,
                                 p.offset)))
                goto done;
        }
        /* 8-byte header length + header precede the data */
        p.file_offset = 8 + json_len + b0;
        if ((s = dck_ck_add_piece(ck, key, dtype, gshape, (int)nd, &p))) goto done;
    }
    dck_qsort(ranges, nr, sizeof *ranges, ref_cmp_range);
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


/* ------------------------------------------------------------------ the comparison */

static const char *dummy_path(void) {
    static char path[256];
    if (!path[0]) {
        snprintf(path, sizeof path, "/tmp/dck-fuzz-st-%d.bin", (int)getpid());
        FILE *f = fopen(path, "wb");
        if (f) {
            fputc(0, f);
            fclose(f);
        }
    }
    return path;
}

static dck_checkpoint *scratch(uint32_t *fi) {
    dck_checkpoint *ck;
    dck_file *f;
    if (dck_ck_create(NULL, &ck)) abort();
    if (dck_file_open(dummy_path(), "x", &f) || dck_ck_add_file(ck, f, fi)) abort();
    return ck;
}

static void same_tensors(const dck_checkpoint *a, const dck_checkpoint *b) {
    if (a->ntensors != b->ntensors) abort();
    for (size_t i = 0; i < a->ntensors; i++) {
        const dck_tensor_entry *x = &a->tensors[i], *y = &b->tensors[i];
        if (strcmp(x->info.name, y->info.name) || x->info.dtype != y->info.dtype || x->info.ndim != y->info.ndim ||
            memcmp(x->info.shape, y->info.shape, sizeof(uint64_t) * (size_t)x->info.ndim) || x->npieces != y->npieces)
            abort();
        for (size_t p = 0; p < x->npieces; p++) {
            const dck_piece *u = &x->pieces[p], *v = &y->pieces[p];
            if (u->file_offset != v->file_offset || u->file != v->file ||
                memcmp(u->offset, v->offset, sizeof u->offset) || memcmp(u->shape, v->shape, sizeof u->shape))
                abort();
        }
    }
}

static void differential(const char *text, size_t n, uint64_t data_size) {
    uint32_t fa, fb;
    dck_checkpoint *a = scratch(&fa), *b = scratch(&fb);
    dck_status sa = dck_safetensors_parse_header(a, fa, text, n, data_size, "fuzz");
    dck_status sb = ref_parse_header(b, fb, text, n, data_size, "fuzz");
    /* A NUL byte between tokens is not JSON whitespace: the reader refuses
     * it (DCK_ERR_FORMAT), as serde_json does, where jansson's lexer reads
     * on (found by make fuzz-long). There the reader may only be stricter:
     * whatever it accepts, the reference accepts the same way. */
    if (memchr(text, 0, n) && sa == DCK_ERR_FORMAT) sb = sa;
    if (sa != sb) {
        fprintf(stderr, "reader %d, reference %d on %zu bytes\n", (int)sa, (int)sb, n);
        abort();
    }
    if (sa == DCK_OK) same_tensors(a, b);
    dck_checkpoint_free(a);
    dck_checkpoint_free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_hash_as_file(data, size, ".safetensors");
    differential((const char *)data, size, UINT64_MAX);
    differential((const char *)data, size, 64);
    if (size > 8) differential((const char *)data + 8, size - 8, UINT64_MAX);
    return 0;
}

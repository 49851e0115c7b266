/* The one parser of the framing the binary recording files share
 * (framing.h): header, record types, NAME records, the torn last record,
 * and each name once. */
#include "runs/framing.h"

#include <stdlib.h>
#include <string.h>

enum { REC_NAME = 1, REC_STEP = 2 };
enum { HEADER_BYTES = 16 };

typedef struct {
    dck_src *s;
    const dck_frame_format *f;
    dck_frame_names n;
    size_t names, kinds, ats; /* capacities */
    uint64_t *name_at;        /* per id: its record's offset */
    uint8_t name[1 << 16];
} frame;

static dck_status read_header(dck_src *s, const dck_frame_format *f, uint32_t *version) {
    uint8_t h[HEADER_BYTES];
    size_t got;
    DCK_TRY(dck_src_take(s, h, sizeof h, &got));
    if (got < sizeof h || memcmp(h, f->magic, 8) != 0)
        return dck_set_error(DCK_ERR_FORMAT, "%s: byte 0: not a detcheck %s file (no %s header)", s->path, f->file_kind,
                             f->magic);
    uint32_t ver = (uint32_t)dck_le(h + 8, 4), flags = (uint32_t)dck_le(h + 12, 4);
    if (ver < f->min_version || ver > f->max_version) {
        if (f->min_version == f->max_version)
            return dck_set_error(DCK_ERR_UNSUPPORTED, "%s: byte 8: version %u (this detcheck reads %u)", s->path, ver,
                                 f->max_version);
        return dck_set_error(DCK_ERR_UNSUPPORTED, "%s: byte 8: version %u (this detcheck reads %u to %u)", s->path, ver,
                             f->min_version, f->max_version);
    }
    if (version) *version = ver;
    if (flags != 0)
        return dck_set_error(DCK_ERR_UNSUPPORTED, "%s: byte 12: flags 0x%x (this detcheck knows none)", s->path, flags);
    return DCK_OK;
}

/* A name record after its type byte at offset at; *torn when the file ends
 * inside it. Its head is checked even then: a damaged head is no tear. */
static dck_status read_name(frame *t, uint64_t at, bool *torn) {
    dck_src *s = t->s;
    const dck_frame_format *f = t->f;
    size_t nnames = *t->n.nnames, head = f->name_kinds ? 7 : 6;
    uint8_t h[7];
    size_t got;
    DCK_TRY(dck_src_take(s, h, head, &got));
    if (got < head) return *torn = true, DCK_OK;
    uint32_t id = (uint32_t)dck_le(h, 4);
    uint8_t kind = f->name_kinds ? h[4] : 0;
    size_t nl = (size_t)dck_le(h + head - 2, 2);
    bool bad_kind = f->name_kinds && kind >= f->name_kinds;
    if (id != nnames && !f->name_kinds)
        return dck_set_error(DCK_ERR_FORMAT, "%s: byte %llu: name record with id %u (expected id %zu)", s->path,
                             (unsigned long long)at, id, nnames);
    if (id != nnames || bad_kind)
        return dck_set_error(DCK_ERR_FORMAT, "%s: byte %llu: name record with id %u kind %u (expected id %zu, kind 0..%d)",
                             s->path, (unsigned long long)at, id, kind, nnames, f->name_kinds - 1);
    if (!nl && f->refuse_empty_names)
        return dck_set_error(DCK_ERR_FORMAT, "%s: byte %llu: name id %u is empty", s->path, (unsigned long long)at, id);
    DCK_TRY(dck_src_take(s, t->name, nl, &got));
    if (got < nl) return *torn = true, DCK_OK;
    const unsigned char *p = t->name, *end = t->name + nl;
    while (p < end) {
        int w = *p ? dck_utf8_width(p, end) : 0;
        if (!w)
            return dck_set_error(DCK_ERR_FORMAT, "%s: byte %llu: %s %u is not UTF-8 (byte 0x%02x at byte %llu)", s->path,
                                 (unsigned long long)at, f->name_label, id, *p,
                                 (unsigned long long)(at + 1 + head + (uint64_t)(p - t->name)));
        p += w;
    }
    DCK_TRY(dck_src_grow(s, (void **)t->n.names, &t->names, nnames + 1, sizeof **t->n.names));
    if (t->n.kinds) DCK_TRY(dck_src_grow(s, (void **)t->n.kinds, &t->kinds, nnames + 1, 1));
    DCK_TRY(dck_src_grow(s, (void **)&t->name_at, &t->ats, nnames + 1, sizeof *t->name_at));
    if (!((*t->n.names)[nnames] = dck_strndup((const char *)t->name, nl))) return dck_oom(s->path);
    if (t->n.kinds) (*t->n.kinds)[nnames] = kind;
    t->name_at[nnames] = at;
    *t->n.nnames = nnames + 1;
    return DCK_OK;
}

/* Ids in (kind and) name order: two of one name would pair the wrong
 * entries of two runs, which are matched by kind and name. */
static int id_cmp(const void *x, const void *y, void *ctx) {
    const dck_frame_names *n = ctx;
    uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    int c = n->kinds ? (int)(*n->kinds)[a] - (int)(*n->kinds)[b] : 0;
    return c ? c : strcmp((*n->names)[a], (*n->names)[b]);
}

static dck_status check_unique(frame *t, void *ctx) {
    size_t n = *t->n.nnames;
    if (n < 2) return DCK_OK;
    uint32_t *ids = malloc(n * sizeof *ids);
    if (!ids) return dck_oom(t->s->path);
    for (size_t i = 0; i < n; i++) ids[i] = (uint32_t)i;
    qsort_r(ids, n, sizeof *ids, id_cmp, &t->n);
    dck_status st = DCK_OK;
    for (size_t i = 1; i < n && !st; i++)
        if (!id_cmp(&ids[i - 1], &ids[i], &t->n)) {
            uint32_t a = ids[i - 1] < ids[i] ? ids[i - 1] : ids[i], b = ids[i - 1] ^ ids[i] ^ a;
            st = t->f->named_twice(t->s, ctx, a, b, t->name_at[b]);
        }
    free(ids);
    return st;
}

dck_status dck_frame_read(dck_src *s, const dck_frame_format *f, dck_frame_names names, uint32_t *version,
                          void *ctx) {
    DCK_TRY(read_header(s, f, version));
    frame *t = calloc(1, sizeof *t);
    if (!t) return dck_oom(s->path);
    t->s = s;
    t->f = f;
    t->n = names;
    dck_status st = DCK_OK;
    bool torn = false;
    size_t got;
    while (!st && !torn && s->pos < s->size) {
        uint64_t at = s->pos;
        uint8_t type;
        if ((st = dck_src_take(s, &type, 1, &got)) || !got) break;
        if (type == REC_NAME) st = read_name(t, at, &torn);
        else if (type == REC_STEP) st = f->read_step(s, ctx, at, &torn);
        else st = dck_set_error(DCK_ERR_FORMAT, "%s: byte %llu: unknown record type %u", s->path,
                                (unsigned long long)at, type);
    }
    if (!st) st = check_unique(t, ctx);
    free(t->name_at);
    free(t);
    return st;
}

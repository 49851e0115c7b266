/* Zip directory parser (see zip.h). Every offset and size read from the
 * archive is checked against the buffer before use. */
#include "common/zip.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define SIG_EOCD 0x06054b50u
#define SIG_EOCD64 0x06064b50u
#define SIG_LOC64 0x07064b50u
#define SIG_CEN 0x02014b50u
#define SIG_LOCAL 0x04034b50u

static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

void dck_zip_free(dck_zip *z) {
    if (!z) return;
    for (size_t i = 0; i < z->n; i++) free(z->entries[i].name);
    free(z->entries);
    free(z->sorted);
    memset(z, 0, sizeof *z);
}

static int cmp_idx(const void *a, const void *b, void *ctx) {
    const dck_zip_entry *e = ctx;
    return strcmp(e[*(const size_t *)a].name, e[*(const size_t *)b].name);
}

dck_status dck_zip_open(const uint8_t *data, uint64_t len, const char *label, dck_zip *out) {
    memset(out, 0, sizeof *out);
    if (len < 22) return dck_set_error(DCK_ERR_TRUNCATED, "%s: zip archive shorter than its end record", label);
    /* The end record is within the last 22 + 65535 bytes. */
    uint64_t lo = len > 22 + 65535 ? len - 22 - 65535 : 0;
    uint64_t eocd = UINT64_MAX;
    for (uint64_t p = len - 22 + 1; p-- > lo;) {
        if (le(data + p, 4) == SIG_EOCD && p + 22 + le(data + p + 20, 2) <= len) {
            eocd = p;
            break;
        }
    }
    if (eocd == UINT64_MAX) return dck_set_error(DCK_ERR_FORMAT, "%s: zip end of central directory not found", label);
    uint64_t nent = le(data + eocd + 10, 2);
    uint64_t cd_size = le(data + eocd + 12, 4);
    uint64_t cd_off = le(data + eocd + 16, 4);
    if (eocd >= 20 && le(data + eocd - 20, 4) == SIG_LOC64) {
        uint64_t r = le(data + eocd - 20 + 8, 8);
        if (r > len || len - r < 56 || le(data + r, 4) != SIG_EOCD64)
            return dck_set_error(DCK_ERR_FORMAT, "%s: bad zip64 end of central directory record", label);
        nent = le(data + r + 32, 8);
        cd_size = le(data + r + 40, 8);
        cd_off = le(data + r + 48, 8);
    }
    if (cd_off > len || cd_size > len - cd_off)
        return dck_set_error(DCK_ERR_FORMAT, "%s: zip central directory outside the archive", label);
    if (nent > DCK_ZIP_MAX_ENTRIES)
        return dck_set_error(DCK_ERR_LIMIT, "%s: zip archive with %llu entries (limit %zu)", label,
                             (unsigned long long)nent, DCK_ZIP_MAX_ENTRIES);
    if (nent > cd_size / 46)
        return dck_set_error(DCK_ERR_FORMAT, "%s: zip central directory too small for %llu entries",
                             label, (unsigned long long)nent);
    out->entries = calloc(nent ? nent : 1, sizeof *out->entries);
    out->sorted = calloc(nent ? nent : 1, sizeof *out->sorted);
    if (!out->entries || !out->sorted) {
        dck_zip_free(out);
        return dck_oom(NULL);
    }
    const uint8_t *cd = data + cd_off;
    uint64_t p = 0;
    dck_status s = DCK_OK;
    for (uint64_t i = 0; i < nent; i++) {
        if (cd_size - p < 46 || le(cd + p, 4) != SIG_CEN) {
            s = dck_set_error(DCK_ERR_FORMAT, "%s: bad zip central directory entry %llu", label,
                              (unsigned long long)i);
            break;
        }
        const uint8_t *h = cd + p;
        dck_zip_entry *e = &out->entries[out->n];
        e->flags = (uint16_t)le(h + 8, 2);
        e->method = (uint16_t)le(h + 10, 2);
        e->crc = (uint32_t)le(h + 16, 4);
        e->csize = le(h + 20, 4);
        e->usize = le(h + 24, 4);
        uint64_t nl = le(h + 28, 2), xl = le(h + 30, 2), cl = le(h + 32, 2);
        uint64_t loff = le(h + 42, 4);
        if (cd_size - p - 46 < nl + xl + cl) {
            s = dck_set_error(DCK_ERR_FORMAT, "%s: zip central directory entry %llu runs past the directory",
                              label, (unsigned long long)i);
            break;
        }
        e->name = dck_strndup((const char *)h + 46, (size_t)nl);
        if (!e->name) {
            s = dck_oom(NULL);
            break;
        }
        out->n++;
        if (strlen(e->name) != nl) {
            s = dck_set_error(DCK_ERR_FORMAT, "%s: zip entry name with a NUL byte", label);
            break;
        }
        /* zip64 extra field: the 64-bit values of the fields that are all ones */
        const uint8_t *x = h + 46 + nl;
        for (uint64_t q = 0; q + 4 <= xl;) {
            uint64_t id = le(x + q, 2), sz = le(x + q + 2, 2);
            if (q + 4 + sz > xl) break;
            if (id == 1) {
                const uint8_t *v = x + q + 4;
                uint64_t k = 0;
                if (e->usize == 0xffffffffu && k + 8 <= sz) { e->usize = le(v + k, 8); k += 8; }
                if (e->csize == 0xffffffffu && k + 8 <= sz) { e->csize = le(v + k, 8); k += 8; }
                if (loff == 0xffffffffu && k + 8 <= sz) { loff = le(v + k, 8); k += 8; }
            }
            q += 4 + sz;
        }
        p += 46 + nl + xl + cl;
        if (loff > len || len - loff < 30 || le(data + loff, 4) != SIG_LOCAL) {
            s = dck_set_error(DCK_ERR_FORMAT, "%s: zip entry %s: bad local header offset %llu", label,
                              e->name, (unsigned long long)loff);
            break;
        }
        uint64_t lnl = le(data + loff + 26, 2), lxl = le(data + loff + 28, 2);
        e->data_offset = loff + 30 + lnl + lxl;
        if (e->data_offset > len || e->csize > len - e->data_offset) {
            s = dck_set_error(DCK_ERR_TRUNCATED, "%s: zip entry %s: data runs past the end of the archive",
                              label, e->name);
            break;
        }
        if (e->flags & 1) {
            s = dck_set_error(DCK_ERR_UNSUPPORTED, "%s: zip entry %s is encrypted", label, e->name);
            break;
        }
        if (e->method == 8 && e->usize > e->csize * DCK_ZIP_MAX_RATIO + 64) {
            s = dck_set_error(DCK_ERR_FORMAT, "%s: zip entry %s claims %llu bytes from %llu compressed (beyond deflate's ratio)",
                              label, e->name, (unsigned long long)e->usize, (unsigned long long)e->csize);
            break;
        }
        if (e->method == 0 && e->csize != e->usize) {
            s = dck_set_error(DCK_ERR_FORMAT, "%s: stored zip entry %s: sizes %llu and %llu differ", label,
                              e->name, (unsigned long long)e->csize, (unsigned long long)e->usize);
            break;
        }
    }
    if (s) {
        dck_zip_free(out);
        return s;
    }
    for (size_t i = 0; i < out->n; i++) out->sorted[i] = i;
    qsort_r(out->sorted, out->n, sizeof *out->sorted, cmp_idx, out->entries);
    return DCK_OK;
}

const dck_zip_entry *dck_zip_find(const dck_zip *z, const char *name) {
    size_t lo = 0, hi = z->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(z->entries[z->sorted[mid]].name, name);
        if (!c) return &z->entries[z->sorted[mid]];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

#define SINK_CHUNK ((size_t)1 << 20)

dck_status dck_zip_extract_stream(const dck_zip_entry *e, const uint8_t *data, dck_zip_sink sink,
                                  void *ctx, const char *label) {
    const uint8_t *src = data + e->data_offset;
    uLong crc = crc32(0L, Z_NULL, 0);
    dck_status s = DCK_OK;
    if (e->method == 0) {
        for (uint64_t k = 0; k < e->usize && !s; k += SINK_CHUNK) {
            size_t n = e->usize - k < SINK_CHUNK ? (size_t)(e->usize - k) : SINK_CHUNK;
            crc = crc32(crc, src + k, (uInt)n);
            s = sink(ctx, k, src + k, n);
        }
    } else if (e->method == 8) {
        uint8_t *buf = malloc(SINK_CHUNK);
        if (!buf) return dck_oom(NULL);
        z_stream zs;
        memset(&zs, 0, sizeof zs);
        if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) {
            free(buf);
            return dck_set_error(DCK_ERR_NOMEM, "%s: cannot start inflate", label);
        }
        uint64_t in_left = e->csize, done = 0;
        zs.next_in = (Bytef *)src;
        int r = Z_OK;
        while (r == Z_OK && !s) {
            uInt ci = in_left > 0x40000000u ? 0x40000000u : (uInt)in_left;
            zs.avail_in = ci;
            zs.next_out = buf;
            zs.avail_out = (uInt)SINK_CHUNK;
            r = inflate(&zs, Z_NO_FLUSH);
            in_left -= ci - zs.avail_in;
            size_t got = SINK_CHUNK - zs.avail_out;
            if (got > e->usize - done) {
                s = dck_set_error(DCK_ERR_FORMAT, "%s: zip entry %s inflates to more than its %llu bytes", label,
                                  e->name, (unsigned long long)e->usize);
                break;
            }
            if (got) {
                crc = crc32(crc, buf, (uInt)got);
                s = sink(ctx, done, buf, got);
                done += got;
            }
            if (r == Z_OK && !got && ci == zs.avail_in) break; /* no progress */
        }
        inflateEnd(&zs);
        free(buf);
        if (!s && (r != Z_STREAM_END || done != e->usize))
            s = dck_set_error(DCK_ERR_FORMAT, "%s: zip entry %s: corrupt deflate data", label, e->name);
    } else {
        return dck_set_error(DCK_ERR_UNSUPPORTED, "%s: zip entry %s: compression method %u (only stored and deflated)",
                             label, e->name, e->method);
    }
    if (!s && (uint32_t)crc != e->crc)
        s = dck_set_error(DCK_ERR_FORMAT, "%s: zip entry %s: CRC-32 mismatch", label, e->name);
    return s;
}

dck_status dck_zip_extract(const dck_zip_entry *e, const uint8_t *data, void *out, const char *label) {
    const uint8_t *src = data + e->data_offset;
    if (e->method == 0) {
        if (e->usize) memcpy(out, src, (size_t)e->usize);
    } else if (e->method == 8) {
        z_stream zs;
        memset(&zs, 0, sizeof zs);
        if (inflateInit2(&zs, -MAX_WBITS) != Z_OK)
            return dck_set_error(DCK_ERR_NOMEM, "%s: cannot start inflate", label);
        uint64_t in_left = e->csize, out_left = e->usize;
        zs.next_in = (Bytef *)src;
        zs.next_out = out;
        int r = Z_OK;
        while (r == Z_OK) {
            uInt ci = in_left > 0x40000000u ? 0x40000000u : (uInt)in_left;
            uInt co = out_left > 0x40000000u ? 0x40000000u : (uInt)out_left;
            zs.avail_in = ci;
            zs.avail_out = co;
            r = inflate(&zs, Z_NO_FLUSH);
            in_left -= ci - zs.avail_in;
            out_left -= co - zs.avail_out;
            if (ci == zs.avail_in && co == zs.avail_out) break; /* no progress */
        }
        inflateEnd(&zs);
        if (r != Z_STREAM_END || out_left)
            return dck_set_error(DCK_ERR_FORMAT, "%s: zip entry %s: corrupt deflate data", label, e->name);
    } else {
        return dck_set_error(DCK_ERR_UNSUPPORTED, "%s: zip entry %s: compression method %u (only stored and deflated)",
                             label, e->name, e->method);
    }
    uLong crc = crc32(0L, Z_NULL, 0);
    const uint8_t *o = out;
    for (uint64_t k = 0; k < e->usize;) {
        uInt c = e->usize - k > 0x40000000u ? 0x40000000u : (uInt)(e->usize - k);
        crc = crc32(crc, o + k, c);
        k += c;
    }
    if ((uint32_t)crc != e->crc)
        return dck_set_error(DCK_ERR_FORMAT, "%s: zip entry %s: CRC-32 mismatch", label, e->name);
    return DCK_OK;
}

/* libFuzzer target: the manifest parser (YAML and JSON), and the manifest
 * writers: what the direct writers produce must be, byte for byte, what
 * libyaml and jansson produce (dck_manifest_write_reference), both for the
 * manifests the input parses to and for a manifest whose tensor names,
 * file paths and metadata are the input's bytes (cut at NUL bytes; bytes
 * that are not UTF-8 must be refused by every writer); and the
 * direct reader of the written layout must read what libyaml reads. */
#include "detcheck.h"
#include "core/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *text_of(const dck_manifest *m, dck_format fmt, int reference, size_t *len) {
    char *buf = NULL;
    *len = 0;
    FILE *f = open_memstream(&buf, len);
    if (!f) abort();
    dck_status s = reference ? dck_manifest_write_reference(m, fmt, f) : dck_manifest_write(m, fmt, f);
    fclose(f);
    if (s) {
        free(buf);
        return NULL;
    }
    return buf;
}

static void same_text(const dck_manifest *m, dck_format fmt) {
    size_t la, lb;
    char *a = text_of(m, fmt, 0, &la), *b = text_of(m, fmt, 1, &lb);
    if ((a == NULL) != (b == NULL) || (a && (la != lb || memcmp(a, b, la)))) {
        fprintf(stderr, "direct and library %s differ:\n--- direct\n%s\n--- library\n%s\n",
                fmt == DCK_FORMAT_YAML ? "YAML" : "JSON", a ? a : "(error)", b ? b : "(error)");
        abort();
    }
    free(a);
    free(b);
}

/* Every writer refuses a string that is not UTF-8 (libyaml's
 * emitter looped forever on the event it had refused, jansson dropped the
 * entry): the same error from all four, never a hang or a text. */
static void refused(const dck_manifest *m, dck_format fmt) {
    for (int ref = 0; ref < 2; ref++) {
        size_t len;
        char *t = text_of(m, fmt, ref, &len);
        if (t || !strstr(dck_last_error(), "is not valid UTF-8")) {
            fprintf(stderr, "%s writer (reference %d) took a string that is not UTF-8: %s\n",
                    fmt == DCK_FORMAT_YAML ? "YAML" : "JSON", ref, t ? t : dck_last_error());
            abort();
        }
    }
}

/* The oracle for dck_utf8_valid (RFC 3629, as jansson checks). */
static int utf8_ok(const unsigned char *s) {
    while (*s) {
        unsigned c = *s, n;
        uint32_t v;
        if (c < 0x80) { s++; continue; }
        if (c >= 0xC2 && c <= 0xDF) n = 2, v = c & 0x1F;
        else if (c >= 0xE0 && c <= 0xEF) n = 3, v = c & 0x0F;
        else if (c >= 0xF0 && c <= 0xF4) n = 4, v = c & 0x07;
        else return 0;
        for (unsigned i = 1; i < n; i++) {
            if ((s[i] & 0xC0) != 0x80) return 0;
            v = (v << 6) | (s[i] & 0x3F);
        }
        if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF) || (n == 3 && v < 0x800) || (n == 4 && v < 0x10000))
            return 0;
        s += n;
    }
    return 1;
}

static void from_bytes(const uint8_t *data, size_t size) {
    char *copy = malloc(size + 1);
    if (!copy) return;
    memcpy(copy, data, size);
    copy[size] = 0;
    dck_manifest *m;
    if (dck_manifest_create(&m)) abort();
    int valid = 1;
    size_t i = 0, k = 0;
    while (i <= size && k < 256) {
        const char *s = copy + i;
        size_t n = strlen(s);
        int ok = utf8_ok((const unsigned char *)s);
        if (ok != (int)dck_utf8_valid(s, n)) {
            fprintf(stderr, "dck_utf8_valid says %d for a string the oracle says %d\n", !ok, ok);
            abort();
        }
        valid &= ok;
        dck_manifest_tensor t;
        memset(&t, 0, sizeof t);
        t.name = s;
        t.group = (dck_group)(k % DCK_GROUP_COUNT);
        t.dtype = (dck_dtype)(k % DCK_DTYPE_COUNT);
        t.ndim = (int)(k % 3);
        t.shape[0] = n;
        t.shape[1] = (uint64_t)0 - k;
        t.digest = (dck_digest){k * 0x1111111111111111ULL, n * 0x1000000000000001ULL};
        if (!dck_manifest_find_tensor(m, s)) dck_manifest_add_tensor(m, &t);
        if (k % 2 == 0 && *s) { /* a repeated path: finalize refuses, nothing compared */
            dck_manifest_file f = {s, n, t.digest};
            dck_manifest_add_file(m, &f);
        }
        if (k == 0) dck_manifest_set_meta(m, s, s);
        if (k == 1) dck_manifest_add_value(m, s, s);
        i += n + 1;
        k++;
    }
    if (dck_manifest_finalize(m) == DCK_OK) {
        if (valid) {
            same_text(m, DCK_FORMAT_YAML);
            same_text(m, DCK_FORMAT_JSON);
        } else {
            refused(m, DCK_FORMAT_YAML);
            refused(m, DCK_FORMAT_JSON);
        }
    }
    dck_manifest_free(m);
    free(copy);
}

/* The direct reader of the written layout against libyaml: a leading
 * blank line sends the same document to libyaml. Same status; when read,
 * the same manifest. */
static void same_reading(const uint8_t *data, size_t size, dck_manifest *direct, dck_status sd) {
    char *shifted = malloc(size + 1);
    if (!shifted) return;
    shifted[0] = '\n';
    memcpy(shifted + 1, data, size);
    dck_manifest *m = NULL;
    dck_status s = dck_manifest_parse(shifted, size + 1, "fuzz", &m);
    free(shifted);
    if ((s == DCK_OK) != (sd == DCK_OK)) {
        fprintf(stderr, "direct reader %d, libyaml %d\n", (int)sd, (int)s);
        abort();
    }
    if (s == DCK_OK) {
        size_t la, lb;
        char *a = text_of(direct, DCK_FORMAT_JSON, 1, &la), *b = text_of(m, DCK_FORMAT_JSON, 1, &lb);
        if (!a || !b || la != lb || memcmp(a, b, la)) {
            fprintf(stderr, "read differently:\n%s\n%s\n", a ? a : "?", b ? b : "?");
            abort();
        }
        free(a);
        free(b);
        dck_manifest_free(m);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dck_manifest *m = NULL;
    dck_status s = dck_manifest_parse((const char *)data, size, "fuzz", &m);
    /* (a document that is JSON, or starts with a byte order mark, reads
     * otherwise after a blank line) */
    if (size && data[0] != '{' && data[0] != 0xEF) same_reading(data, size, m, s);
    if (s == DCK_OK) {
        same_text(m, DCK_FORMAT_YAML);
        same_text(m, DCK_FORMAT_JSON);
        /* and what it writes is read back the same both ways */
        size_t len;
        char *y = text_of(m, DCK_FORMAT_YAML, 0, &len);
        if (y) {
            dck_manifest *again = NULL;
            dck_status s2 = dck_manifest_parse(y, len, "fuzz", &again);
            same_reading((const uint8_t *)y, len, again, s2);
            dck_manifest_free(again);
            free(y);
        }
        dck_manifest_free(m);
    }
    from_bytes(data, size);
    return 0;
}

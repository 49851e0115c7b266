/* The CLI's JSON output: every --json document is built with jansson and
 * written by cli_json_print. Numbers keep the values the commands printed
 * by hand before: cli_json_number reads them back from the printf text
 * (integers stay integers), cli_json_u64 holds the whole unsigned range, and
 * reals are written with the fewest digits that read back as the same
 * doubles. */
#include "cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cli_jset(json_t *obj, const char *key, json_t *value, bool *oom) {
    /* jansson frees value when it cannot be set */
    if (!obj || !value || json_object_set_new(obj, key, value)) *oom = true;
}

void cli_jappend(json_t *arr, json_t *value, bool *oom) {
    if (!arr || !value || json_array_append_new(arr, value)) *oom = true;
}

/* Bytes of the UTF-8 sequence at p (RFC 3629: no overlong forms, no
 * surrogates, at most U+10FFFF), 0 when it is not one. */
static size_t utf8_len(const unsigned char *p) {
    unsigned c = p[0], cp, min;
    size_t n;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) n = 2, cp = c & 0x1F, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF) n = 3, cp = c & 0x0F, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4) n = 4, cp = c & 0x07, min = 0x10000;
    else return 0;
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0; /* the terminating NUL stops here too */
        cp = cp << 6 | (p[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

json_t *cli_json_text(const char *s) {
    json_t *v = json_string(s);
    if (v) return v;
    /* not UTF-8 (a name or path from elsewhere): each stray byte as U+FFFD */
    size_t len = strlen(s);
    char *t = malloc(3 * len + 1), *w = t;
    if (!t) return NULL;
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        size_t n = utf8_len(p);
        if (n) {
            memcpy(w, p, n);
            w += n;
            p += n;
        } else {
            memcpy(w, "\xef\xbf\xbd", 3);
            w += 3;
            p++;
        }
    }
    *w = 0;
    v = json_string(t);
    free(t);
    return v;
}

json_t *cli_json_str_or_null(const char *s) { return s ? cli_json_text(s) : json_null(); }

json_t *cli_json_number(const char *fmt, double v) {
    if (!isfinite(v)) return json_null(); /* no JSON number for it */
    char buf[512];
    snprintf(buf, sizeof buf, fmt, v);
    if (buf[strspn(buf, "-0123456789")] == 0) {
        /* the text was an integer ("%.9g" of 5.0, "%.17g" below 1e17) */
        char *end;
        long long i = strtoll(buf, &end, 10);
        if (!*end) return json_integer(i);
    }
    return json_real(strtod(buf, NULL));
}

/* jansson's integers are signed 64-bit: a larger unsigned value travels as a
 * string that no real string can be ("\u0000" cannot occur in a C string)
 * and cli_json_print writes its digits bare. */
#define U64_MARK "\\u0000u64:"

json_t *cli_json_u64(uint64_t v) {
    if (v <= (uint64_t)INT64_MAX) return json_integer((json_int_t)v);
    char buf[32];
    int n = snprintf(buf, sizeof buf, "%cu64:%llu", 0, (unsigned long long)v);
    return json_stringn(buf, (size_t)n);
}

/* The fewest significant digits (1..17) that read back as every real of v. */
static int real_digits(const json_t *v) {
    int most = 0;
    if (json_is_real(v)) {
        double x = json_real_value(v);
        char buf[40];
        int p = 1;
        for (; p < 17; p++) {
            snprintf(buf, sizeof buf, "%.*g", p, x);
            if (strtod(buf, NULL) == x) break;
        }
        return p;
    }
    if (json_is_object(v)) {
        const char *k;
        json_t *e;
        json_object_foreach((json_t *)v, k, e) {
            int d = real_digits(e);
            if (d > most) most = d;
        }
    } else if (json_is_array(v)) {
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) {
            int d = real_digits(e);
            if (d > most) most = d;
        }
    }
    return most;
}

/* The layout of CLI_JSON_LINES: one line per key of the document, an array
 * of objects or arrays as one line per element, everything else on its
 * line ({"a": 1, "b": 2}), so grep finds a whole record on one line. */
static char *dump_lines(const json_t *doc, size_t flags) {
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m) return NULL;
    bool bad = false;
    const char *key;
    json_t *v;
    size_t k = 0, nkeys = json_object_size(doc);
    fputs("{\n", m);
    json_object_foreach((json_t *)doc, key, v) {
        json_t *kj = json_string(key);
        char *ks = kj ? json_dumps(kj, flags | JSON_ENCODE_ANY) : NULL;
        json_decref(kj);
        bad |= !ks;
        fprintf(m, "  %s: ", ks ? ks : "\"\"");
        free(ks);
        bool records = json_is_array(v) && json_array_size(v) > 0;
        for (size_t i = 0; records && i < json_array_size(v); i++)
            records = json_is_object(json_array_get(v, i)) || json_is_array(json_array_get(v, i));
        if (records) {
            fputs("[\n", m);
            for (size_t i = 0; i < json_array_size(v); i++) {
                char *e = json_dumps(json_array_get(v, i), flags | JSON_ENCODE_ANY);
                bad |= !e;
                fprintf(m, "    %s%s\n", e ? e : "null", i + 1 < json_array_size(v) ? "," : "");
                free(e);
            }
            fputs("  ]", m);
        } else {
            char *e = json_dumps(v, flags | JSON_ENCODE_ANY);
            bad |= !e;
            fputs(e ? e : "null", m);
            free(e);
        }
        fputs(++k < nkeys ? ",\n" : "\n", m);
    }
    fputs("}", m);
    if (fclose(m) != 0 || bad) {
        free(buf);
        return NULL;
    }
    return buf;
}

dck_status cli_json_print(json_t *doc, cli_json_style style, bool oom) {
    if (oom || !doc) {
        json_decref(doc);
        return dck_oom(NULL);
    }
    size_t flags = JSON_PRESERVE_ORDER;
    int digits = real_digits(doc);
    if (digits) flags |= JSON_REAL_PRECISION(digits);
    char *text;
    if (style == CLI_JSON_LINES && json_is_object(doc))
        text = dump_lines(doc, flags); /* flags 0: ", " and ": " on one line */
    else
        text = json_dumps(doc, flags | (style == CLI_JSON_COMPACT ? JSON_COMPACT : JSON_INDENT(2)));
    json_decref(doc);
    if (!text) return dck_oom(NULL);
    /* unsigned integers beyond jansson's: the marked strings as bare digits */
    char *w = text;
    for (const char *r = text; *r;) {
        if (*r == '"' && !strncmp(r + 1, U64_MARK, strlen(U64_MARK))) {
            r += 1 + strlen(U64_MARK);
            while (*r && *r != '"') *w++ = *r++;
            if (*r) r++;
        } else {
            *w++ = *r++;
        }
    }
    *w = 0;
    fputs(text, stdout);
    fputc('\n', stdout);
    free(text);
    return DCK_OK;
}

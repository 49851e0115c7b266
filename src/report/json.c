/* The CLI's JSON output: every --json document is built with jansson and
 * written by cli_json_print. Numbers keep the values the commands printed
 * by hand before: cli_json_number reads them back from the printf text
 * (integers stay integers), cli_json_u64 holds the whole unsigned range, and
 * reals are written with the fewest digits that read back as the same
 * doubles. */
#include "report/json.h"
#include "report/text.h"

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

/* A name as a JSON string is the name itself when it is UTF-8 (the code
 * points text.h quotes are escaped as \uHHHH when the document is written:
 * cli_json_print); JSON cannot hold other bytes, so each byte that is not
 * UTF-8 is the four characters \xNN, as on the terminal. */
json_t *cli_json_text(const char *s) {
    json_t *v = json_string(s);
    if (v) return v;
    size_t len = strlen(s);
    char *t = malloc(4 * len + 1), *w = t;
    if (!t) return NULL;
    char esc[CLI_QUOTE_MAX];
    long cp;
    for (const char *p = s, *end = s + len; p < end;) {
        size_t n = cli_quote_char(p, end, esc, &cp);
        if (cp < 0) w = stpcpy(w, esc);
        else w = (char *)memcpy(w, p, n) + n;
        p += n;
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

/* The dumped document with the code points text.h quotes (jansson writes
 * them raw: C1 controls, bidi overrides, U+2028...) as JSON escapes: a
 * parser reads the same string, a terminal or a page gets no raw control.
 * They occur only inside strings; below DEL all is jansson's own (C0 inside
 * strings escaped, newlines between values, backslashes of its escapes). */
static void put_quoted(const char *text, FILE *out) {
    const char *end = text + strlen(text);
    char esc[CLI_QUOTE_MAX];
    long cp;
    for (const char *p = text; p < end;) {
        size_t n = cli_quote_char(p, end, esc, &cp);
        if (!esc[0] || cp < 0x7f) fwrite(p, 1, n, out);
        else if (cp < 0x10000) fprintf(out, "\\u%04x", (unsigned)cp);
        else fprintf(out, "\\u%04x\\u%04x", (unsigned)(0xd800 + ((cp - 0x10000) >> 10)),
                     (unsigned)(0xdc00 + ((cp - 0x10000) & 0x3ff)));
        p += n;
    }
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
    put_quoted(text, stdout);
    fputc('\n', stdout);
    free(text);
    return DCK_OK;
}

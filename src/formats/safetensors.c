/* safetensors: reader (single files, directories, Hugging Face index files,
 * detcheck's sharded layout) and writer.
 *
 * File: u64 little-endian N | N bytes of JSON header | data. Header:
 * {"__metadata__": {str: str}, NAME: {"dtype": D, "shape": [..],
 *  "data_offsets": [begin, end]}, ...}, offsets relative to the data start.
 * The data region must be covered exactly: no holes, no overlaps.
 *
 * Headers and index files are read by a small JSON scanner made for them:
 * no tree, one pass, the decoded strings in one block. It accepts exactly
 * the documents jansson's loader accepts with the flags used before
 * (JSON_REJECT_DUPLICATES, plus JSON_ALLOW_NUL for headers): the same
 * grammar, strict UTF-8, no NUL in keys, duplicate keys rejected in every
 * object, integers in the range of int64, reals that do not overflow a
 * double, nesting up to 2048. tests/fuzz/fuzz_safetensors.c checks that
 * against jansson itself, and tests/check_safetensors.c on the corner
 * cases. Reading a header costs a few hundred nanoseconds per tensor. */
#include "formats/formats.h"

#include <jansson.h>
#include <xxhash.h>
#include <zstd.h>

#include <errno.h>
#include <fcntl.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------ JSON scanner */

#define JS_MAX_DEPTH 2048 /* jansson's JSON_PARSER_MAX_DEPTH */
#define JS_SMALL 8        /* objects up to this many keys check duplicates by a scan */

typedef struct {
    uint32_t key; /* offset of the key in the arena + 1 (0: empty slot) */
    uint32_t fp;  /* 32 bits of the hash of (object, key); also the slot's place */
    uint32_t obj; /* serial number of the object */
    uint32_t val; /* the key's ordinal in its object */
} js_slot;

typedef struct {
    const unsigned char *start, *p, *end;
    char *arena; /* decoded strings, NUL-terminated; never longer than the input */
    size_t used;
    size_t faulted; /* arena[0, faulted) faulted in, JS_FAULT_STEP at a time */
    bool allow_nul;      /* \u0000 in string values (never in keys) */
    const char *err;     /* the first syntax error (static text), or NULL */
    size_t err_at;       /* its byte offset */
    bool oom;
    uint32_t nobj;
    js_slot *slots;      /* keys of large objects (js_obj_next, js_dedupe): open addressing */
    size_t cap_slots, nslots;
} jscan;

typedef struct {
    uint32_t id, n;
    bool first, hashed, deferred;
    const char *key[JS_SMALL];
    uint32_t len[JS_SMALL];
} js_obj;

static int js_fail(jscan *js, const char *what) {
    if (!js->err) {
        js->err = what;
        js->err_at = (size_t)(js->p - js->start);
    }
    return -1;
}

static dck_status js_init(jscan *js, const char *text, size_t len, bool allow_nul) {
    memset(js, 0, sizeof *js);
    if (len >= UINT32_MAX) return dck_set_error(DCK_ERR_LIMIT, "JSON text of %zu bytes (limit 4 GiB)", len);
    js->start = js->p = (const unsigned char *)text;
    js->end = js->start + len;
    js->allow_nul = allow_nul;
    js->arena = malloc(len + 1);
    return js->arena ? DCK_OK : dck_oom(NULL);
}

static void js_free(jscan *js) {
    free(js->arena);
    free(js->slots);
}

static inline void js_ws(jscan *js) {
    const unsigned char *p = js->p, *e = js->end;
    while (p < e && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    js->p = p;
}

static inline bool js_at(const jscan *js, unsigned char c) { return js->p < js->end && *js->p == c; }

static int hexval(unsigned c) {
    if (c >= '0' && c <= '9') return (int)(c - '0');
    if (c >= 'a' && c <= 'f') return (int)(c - 'a' + 10);
    if (c >= 'A' && c <= 'F') return (int)(c - 'A' + 10);
    return -1;
}

/* \uXXXX at p (p points at the backslash), or -1. */
static long u_escape(const unsigned char *p, const unsigned char *end) {
    if (end - p < 6 || p[0] != '\\' || p[1] != 'u') return -1;
    long v = 0;
    for (int i = 2; i < 6; i++) {
        int h = hexval(p[i]);
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    return v;
}

/* Length of a well-formed multi-byte UTF-8 sequence at p (2..4), else 0
 * (ASCII included: the caller takes those bytes itself). */
static int utf8_seq(const unsigned char *p, const unsigned char *end) {
    return p[0] < 0x80 ? 0 : dck_utf8_width(p, end);
}

static char *put_utf8(char *o, uint32_t v) {
    if (v < 0x80) *o++ = (char)v;
    else if (v < 0x800) {
        *o++ = (char)(0xC0 | (v >> 6));
        *o++ = (char)(0x80 | (v & 0x3F));
    } else if (v < 0x10000) {
        *o++ = (char)(0xE0 | (v >> 12));
        *o++ = (char)(0x80 | ((v >> 6) & 0x3F));
        *o++ = (char)(0x80 | (v & 0x3F));
    } else {
        *o++ = (char)(0xF0 | (v >> 18));
        *o++ = (char)(0x80 | ((v >> 12) & 0x3F));
        *o++ = (char)(0x80 | ((v >> 6) & 0x3F));
        *o++ = (char)(0x80 | (v & 0x3F));
    }
    return o;
}

/* The arena fills front to back: its pages are faulted in a step ahead, one
 * call per step rather than a page fault per page (a 100k-tensor header
 * decodes megabytes of names). */
#define JS_FAULT_STEP ((size_t)1 << 20)

/* A string at the cursor ('"'), decoded into the arena. Keys may not hold
 * NUL; values only with allow_nul. */
static int js_string(jscan *js, bool is_key, const char **out, size_t *outlen) {
    const unsigned char *p = js->p + 1, *end = js->end;
    size_t acap = (size_t)(js->end - js->start) + 1;
    if (js->used >= js->faulted && acap >= 2 * JS_FAULT_STEP) {
        size_t upto = js->used + JS_FAULT_STEP < acap ? js->used + JS_FAULT_STEP : acap;
        dck_prefault(js->arena + js->faulted, upto - js->faulted);
        js->faulted = upto;
    }
    char *o0 = js->arena + js->used, *o = o0;
    bool nul = false;
    for (;;) {
        /* the common run: printable ASCII, 8 bytes at a time while no byte
         * is a quote, a backslash, a control byte or >= 0x80 */
        while (end - p >= 8) {
            uint64_t w;
            memcpy(&w, p, 8);
            const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
            uint64_t q = w ^ (ones * '"'), bs = w ^ (ones * '\\');
            uint64_t special = ((q - ones) & ~q) | ((bs - ones) & ~bs) | ((w - ones * 0x20) & ~w) | w;
            if (special & high) break;
            memcpy(o, p, 8);
            o += 8;
            p += 8;
        }
        while (p < end && *p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\') *o++ = (char)*p++;
        if (p >= end) return js->p = p, js_fail(js, "premature end of input");
        unsigned c = *p;
        if (c == '"') break;
        if (c < 0x20) return js->p = p, js_fail(js, "control character in a string");
        if (c >= 0x80) {
            int n = utf8_seq(p, end);
            if (!n) return js->p = p, js_fail(js, "invalid UTF-8");
            memcpy(o, p, (size_t)n);
            o += n;
            p += n;
            continue;
        }
        /* backslash */
        if (end - p < 2) return js->p = p, js_fail(js, "premature end of input");
        switch (p[1]) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '/': *o++ = '/'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            long v = u_escape(p, end);
            if (v < 0) return js->p = p, js_fail(js, "invalid escape");
            p += 6;
            if (v >= 0xD800 && v <= 0xDBFF) {
                long w = u_escape(p, end);
                if (w < 0xDC00 || w > 0xDFFF) return js->p = p, js_fail(js, "invalid Unicode surrogate");
                v = ((v - 0xD800) << 10) + (w - 0xDC00) + 0x10000;
                p += 6;
            } else if (v >= 0xDC00 && v <= 0xDFFF) {
                return js->p = p, js_fail(js, "invalid Unicode surrogate");
            }
            if (v == 0) nul = true;
            o = put_utf8(o, (uint32_t)v);
            continue;
        }
        default: return js->p = p, js_fail(js, "invalid escape");
        }
        p += 2;
    }
    if (nul && (is_key || !js->allow_nul))
        return js->p = p, js_fail(js, is_key ? "NUL byte in object key" : "\\u0000 in a string");
    *o = 0;
    js->used += (size_t)(o - o0) + 1;
    js->p = p + 1;
    *out = o0;
    *outlen = (size_t)(o - o0);
    return 0;
}

static locale_t c_locale;
static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;
static void c_locale_init(void) { c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0); }

/* Does a JSON real overflow a double? (jansson rejects those.) */
static bool real_overflows(const unsigned char *s, size_t n) {
    char small[64], *buf = n < sizeof small ? small : malloc(n + 1);
    if (!buf) return true;
    memcpy(buf, s, n);
    buf[n] = 0;
    pthread_once(&c_locale_once, c_locale_init);
    errno = 0;
    double d = c_locale ? strtod_l(buf, NULL, c_locale) : strtod(buf, NULL);
    bool over = (d == HUGE_VAL || d == -HUGE_VAL) && errno == ERANGE;
    if (buf != small) free(buf);
    return over;
}

static inline bool is_digit(unsigned c) { return c - '0' < 10; }

/* A number at the cursor: 1 an integer (*iv), 2 a real, -1 an error. */
static int js_number(jscan *js, int64_t *iv) {
    const unsigned char *s = js->p, *p = s, *end = js->end;
    /* the common case: 1 to 18 digits, no leading zero, then not a fraction */
    if (p < end && (unsigned)(*p - '1') < 9u) {
        uint64_t v = (uint64_t)(*p++ - '0');
        while (p < end && is_digit(*p) && p - s < 18) v = v * 10 + (uint64_t)(*p++ - '0');
        if (p == end || (!is_digit(*p) && *p != '.' && *p != 'e' && *p != 'E')) {
            *iv = (int64_t)v;
            js->p = p;
            return 1;
        }
        p = s;
    }
    bool neg = p < end && *p == '-';
    if (neg) p++;
    const unsigned char *d0 = p;
    if (p < end && *p == '0') {
        p++;
        if (p < end && is_digit(*p)) return js->p = p, js_fail(js, "invalid number");
    } else if (p < end && is_digit(*p)) {
        while (p < end && is_digit(*p)) p++;
    } else {
        return js->p = p, js_fail(js, "invalid token");
    }
    if (p < end && (*p == '.' || *p == 'e' || *p == 'E')) {
        if (*p == '.') {
            p++;
            if (p >= end || !is_digit(*p)) return js->p = p, js_fail(js, "invalid number");
            while (p < end && is_digit(*p)) p++;
        }
        if (p < end && (*p == 'e' || *p == 'E')) {
            p++;
            if (p < end && (*p == '+' || *p == '-')) p++;
            if (p >= end || !is_digit(*p)) return js->p = p, js_fail(js, "invalid number");
            while (p < end && is_digit(*p)) p++;
        }
        if (real_overflows(s, (size_t)(p - s))) return js_fail(js, "real number overflow");
        js->p = p;
        return 2;
    }
    /* integers: the range of int64 (strtoll) */
    uint64_t v = 0, lim = neg ? (uint64_t)1 << 63 : ((uint64_t)1 << 63) - 1;
    for (const unsigned char *q = d0; q < p; q++) {
        unsigned dg = *q - '0';
        if (v > (lim - dg) / 10) return js_fail(js, "too big integer");
        v = v * 10 + dg;
    }
    *iv = neg ? (int64_t)(0 - v) : (int64_t)v;
    js->p = p;
    return 1;
}

/* ---- duplicate keys of large objects */

static uint32_t key_hash(const char *k, size_t len, uint32_t obj) {
    return (uint32_t)(XXH3_64bits_withSeed(k, len, obj) >> 32);
}

/* Inserts (obj, key), the key being a string of the arena; 1 inserted, 0
 * already there, -1 no memory. */
static int slot_insert(jscan *js, uint32_t obj, const char *k, uint32_t len, uint32_t val) {
    if ((js->nslots + 1) * 2 > js->cap_slots) {
        size_t nc = js->cap_slots ? js->cap_slots * 2 : 64;
        js_slot *ns = calloc(nc, sizeof *ns);
        if (!ns) return -1;
        for (size_t i = 0; i < js->cap_slots; i++) {
            js_slot *s = &js->slots[i];
            if (!s->key) continue;
            size_t h = s->fp & (nc - 1);
            while (ns[h].key) h = (h + 1) & (nc - 1);
            ns[h] = *s;
        }
        free(js->slots);
        js->slots = ns;
        js->cap_slots = nc;
    }
    uint32_t fp = key_hash(k, len, obj);
    size_t m = js->cap_slots - 1, h = fp & m;
    for (; js->slots[h].key; h = (h + 1) & m) {
        js_slot *s = &js->slots[h];
        if (s->fp == fp && s->obj == obj && !strcmp(js->arena + s->key - 1, k)) return 0;
    }
    js->slots[h] = (js_slot){(uint32_t)(k - js->arena) + 1, fp, obj, val};
    js->nslots++;
    return 1;
}

/* Looks (obj, key) up: the key's ordinal in its object, or -1. k is
 * NUL-terminated. */
static long slot_find(const jscan *js, uint32_t obj, const char *k, size_t len) {
    if (!js->cap_slots) return -1;
    uint32_t fp = key_hash(k, len, obj);
    size_t m = js->cap_slots - 1, h = fp & m;
    for (; js->slots[h].key; h = (h + 1) & m) {
        const js_slot *s = &js->slots[h];
        if (s->fp == fp && s->obj == obj && !strcmp(js->arena + s->key - 1, k)) return (long)s->val;
    }
    return -1;
}

/* A table for n more keys, so that slot_insert does not grow it. */
static int slots_reserve(jscan *js, size_t n) {
    size_t cap = 64;
    while (cap < (js->nslots + n) * 2 + 2) cap *= 2;
    if (cap <= js->cap_slots) return 0;
    js_slot *ns = calloc(cap, sizeof *ns);
    if (!ns) return -1;
    dck_prefault(ns, cap * sizeof *ns); /* touched all over, at random */
    for (size_t i = 0; i < js->cap_slots; i++) {
        js_slot *s = &js->slots[i];
        if (!s->key) continue;
        size_t h = s->fp & (cap - 1);
        while (ns[h].key) h = (h + 1) & (cap - 1);
        ns[h] = *s;
    }
    free(js->slots);
    js->slots = ns;
    js->cap_slots = cap;
    return 0;
}

/* The keys of a deferred object (key i at input offset at[i]; val = i):
 * 0, or -1 with the error of the first duplicate. */
/* How many keys ahead the loops that insert keys into a hash table fetch
 * the slot of a key into the cache (a table for 100k keys is megabytes:
 * a miss per key, unless it was asked for earlier). */
#define ST_PREFETCH_AHEAD 8

static int js_dedupe(jscan *js, uint32_t obj, const char *const *keys, size_t stride,
                     const uint32_t *at, size_t at_stride, size_t n) {
    if (slots_reserve(js, n)) {
        js->oom = true;
        return js_fail(js, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        if (i + ST_PREFETCH_AHEAD < n) {
            const char *kp = *(const char *const *)((const char *)keys + (i + ST_PREFETCH_AHEAD) * stride);
            __builtin_prefetch(&js->slots[key_hash(kp, strlen(kp), obj) & (js->cap_slots - 1)]);
        }
        const char *k = *(const char *const *)((const char *)keys + i * stride);
        int r = slot_insert(js, obj, k, (uint32_t)strlen(k), (uint32_t)i);
        if (r < 0) {
            js->oom = true;
            return js_fail(js, "out of memory");
        }
        if (r == 0) {
            js->err = "duplicate object key";
            js->err_at = *(const uint32_t *)((const char *)at + i * at_stride);
            return -1;
        }
    }
    return 0;
}

/* ---- objects and arrays */

/* At '{'. Duplicate keys are found as the keys come (a scan of the first
 * JS_SMALL, then the slot table), or, for a deferred object (the large
 * ones a header is made of), by the caller afterwards with js_dedupe, in a
 * table sized once. */
static void js_obj_open(jscan *js, js_obj *o, bool deferred) {
    js->p++;
    o->id = ++js->nobj;
    o->n = 0;
    o->first = true;
    o->hashed = false;
    o->deferred = deferred;
}

/* The next member: 1 its key is read and the cursor is at its value, 0 the
 * object ended, -1 an error. */
static int js_obj_next(jscan *js, js_obj *o, const char **key, size_t *klen) {
    js_ws(js);
    if (o->first) {
        o->first = false;
        if (js_at(js, '}')) {
            js->p++;
            return 0;
        }
    } else if (js_at(js, ',')) {
        js->p++;
        js_ws(js);
    } else if (js_at(js, '}')) {
        js->p++;
        return 0;
    } else {
        return js_fail(js, "'}' expected");
    }
    if (!js_at(js, '"')) return js_fail(js, "string or '}' expected");
    const unsigned char *kat = js->p;
    if (js_string(js, true, key, klen)) return -1;
    if (*klen > UINT32_MAX) return js->p = kat, js_fail(js, "key too long");
    uint32_t len = (uint32_t)*klen;
    int dup = 0;
    if (o->deferred) {
        /* checked by js_dedupe */
    } else if (!o->hashed && o->n < JS_SMALL) {
        for (uint32_t i = 0; i < o->n && !dup; i++)
            dup = o->len[i] == len && !memcmp(o->key[i], *key, len);
        if (!dup) {
            o->key[o->n] = *key;
            o->len[o->n] = len;
        }
    } else {
        if (!o->hashed) { /* the object outgrew the scan: move its keys over */
            for (uint32_t i = 0; i < JS_SMALL; i++)
                if (slot_insert(js, o->id, o->key[i], o->len[i], i) < 0) goto oom;
            o->hashed = true;
        }
        int r = slot_insert(js, o->id, *key, len, o->n);
        if (r < 0) goto oom;
        dup = r == 0;
    }
    if (dup) return js->p = kat, js_fail(js, "duplicate object key");
    o->n++;
    js_ws(js);
    if (!js_at(js, ':')) return js_fail(js, "':' expected");
    js->p++;
    js_ws(js);
    return 1;
oom:
    js->oom = true;
    return js_fail(js, "out of memory");
}

/* The next element of an array whose '[' was consumed: 1 the cursor is at
 * an element, 0 the array ended, -1 an error. */
static int js_arr_next(jscan *js, bool *first) {
    js_ws(js);
    if (*first) {
        *first = false;
        if (js_at(js, ']')) {
            js->p++;
            return 0;
        }
        return 1;
    }
    if (js_at(js, ',')) {
        js->p++;
        js_ws(js);
        return 1;
    }
    if (js_at(js, ']')) {
        js->p++;
        return 0;
    }
    return js_fail(js, "']' expected");
}

/* Any value at the cursor, at nesting depth `depth` (the top-level value is 1). */
static int js_skip(jscan *js, unsigned depth) {
    if (depth > JS_MAX_DEPTH) return js_fail(js, "maximum parsing depth reached");
    if (js->p >= js->end) return js_fail(js, "premature end of input");
    unsigned c = *js->p;
    if (c == '"') {
        const char *s;
        size_t n;
        return js_string(js, false, &s, &n);
    }
    if (c == '{') {
        js_obj o;
        js_obj_open(js, &o, false);
        const char *k;
        size_t kl;
        int r;
        while ((r = js_obj_next(js, &o, &k, &kl)) == 1)
            if (js_skip(js, depth + 1)) return -1;
        return r;
    }
    if (c == '[') {
        js->p++;
        bool first = true;
        int r;
        while ((r = js_arr_next(js, &first)) == 1)
            if (js_skip(js, depth + 1)) return -1;
        return r;
    }
    if (c == '-' || is_digit(c)) {
        int64_t v;
        return js_number(js, &v) < 0 ? -1 : 0;
    }
    const unsigned char *p = js->p;
    while (p < js->end && ((*p | 0x20) >= 'a' && (*p | 0x20) <= 'z')) p++;
    size_t n = (size_t)(p - js->p);
    if ((n == 4 && (!memcmp(js->p, "true", 4) || !memcmp(js->p, "null", 4))) ||
        (n == 5 && !memcmp(js->p, "false", 5))) {
        js->p = p;
        return 0;
    }
    return js_fail(js, "invalid token");
}

/* After the top-level value: only whitespace. */
static int js_finish(jscan *js) {
    js_ws(js);
    return js->p == js->end ? 0 : js_fail(js, "end of file expected");
}

/* An array of integers at the cursor ('[' not consumed): *count elements,
 * the first `max` stored in v[], ok[i] whether element i is an integer >= 0
 * (what json_u64 accepted). */
static int js_u64_array(jscan *js, unsigned depth, uint64_t *v, bool *ok, size_t max, size_t *count) {
    js->p++;
    bool first = true;
    size_t n = 0;
    int r;
    while ((r = js_arr_next(js, &first)) == 1) {
        bool good = false;
        uint64_t x = 0;
        if (depth + 1 > JS_MAX_DEPTH) return js_fail(js, "maximum parsing depth reached");
        if (js->p < js->end && (*js->p == '-' || is_digit(*js->p))) {
            int64_t iv;
            int k = js_number(js, &iv);
            if (k < 0) return -1;
            good = k == 1 && iv >= 0;
            x = good ? (uint64_t)iv : 0;
        } else if (js_skip(js, depth + 1)) {
            return -1;
        }
        if (n < max) {
            v[n] = x;
            ok[n] = good;
        }
        n++;
    }
    *count = n;
    return r;
}

static dck_status js_error(jscan *js, const char *label, const char *what) {
    if (js->oom) return dck_oom(NULL);
    return dck_set_error(DCK_ERR_FORMAT, "%s: invalid JSON %s at byte %zu: %s", label, what,
                         js->err_at, js->err);
}

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

/* detcheck.slice.NAME = {"global_shape": [...], "offset": [...]}, read as
 * json_loads(JSON_REJECT_DUPLICATES) read it. */
static dck_status parse_slice(const char *label, const char *name, const char *text, int ndim,
                              const uint64_t *shape, uint64_t *gshape, uint64_t *offset) {
    jscan js;
    DCK_TRY(js_init(&js, text, strlen(text), false));
    uint64_t gv[DCK_MAX_DIMS], ov[DCK_MAX_DIMS];
    bool gok[DCK_MAX_DIMS], ook[DCK_MAX_DIMS];
    size_t ng = 0, no = 0;
    bool is_obj = false, has_g = false, has_o = false;
    int r = 0;
    js_ws(&js);
    if (js_at(&js, '{')) {
        is_obj = true;
        js_obj o;
        js_obj_open(&js, &o, false);
        const char *k;
        size_t kl;
        while ((r = js_obj_next(&js, &o, &k, &kl)) == 1) {
            bool g = !strcmp(k, "global_shape"), f = !strcmp(k, "offset");
            if ((g || f) && js_at(&js, '[')) {
                if (g) has_g = true;
                else has_o = true;
                r = js_u64_array(&js, 2, g ? gv : ov, g ? gok : ook, DCK_MAX_DIMS, g ? &ng : &no);
            } else {
                r = js_skip(&js, 2);
            }
            if (r) break;
        }
    } else if (js_at(&js, '[')) {
        r = js_skip(&js, 1);
    } else {
        r = js_fail(&js, "'[' or '{' expected");
    }
    if (!r) r = js_finish(&js);
    bool oom = js.oom;
    js_free(&js);
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
    jscan js;
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
    jscan *js = &h->js;
    if (!js_at(js, '{')) return js_skip(js, 2);
    e->flags |= ST_OBJECT;
    js_obj o;
    js_obj_open(js, &o, false);
    const char *k;
    size_t kl;
    int r;
    while ((r = js_obj_next(js, &o, &k, &kl)) == 1) {
        if (kl == 5 && !memcmp(k, "dtype", 5) && js_at(js, '"')) {
            size_t n;
            r = js_string(js, false, &e->dtype, &n);
        } else if (kl == 5 && !memcmp(k, "shape", 5) && js_at(js, '[')) {
            uint64_t v[DCK_MAX_DIMS];
            bool ok[DCK_MAX_DIMS];
            if ((r = js_u64_array(js, 3, v, ok, DCK_MAX_DIMS, &e->nd))) return r;
            size_t keep = e->nd < DCK_MAX_DIMS ? e->nd : DCK_MAX_DIMS;
            if (h->ndims + keep > UINT32_MAX) return js_fail(js, "too many dimensions");
            if (dck_grow((void **)&h->dims, &h->cap_dims, h->ndims + keep, sizeof *h->dims)) {
                js->oom = true;
                return js_fail(js, "out of memory");
            }
            e->dims = (uint32_t)h->ndims;
            if (keep) memcpy(h->dims + h->ndims, v, keep * sizeof *v); /* dims may be NULL */
            h->ndims += keep;
            e->flags |= ST_SHAPE;
            for (size_t i = 0; i < keep; i++)
                if (!ok[i]) e->flags |= ST_SHAPE_BAD;
        } else if (kl == 12 && !memcmp(k, "data_offsets", 12) && js_at(js, '[')) {
            uint64_t v[2];
            bool ok[2];
            size_t n;
            if ((r = js_u64_array(js, 3, v, ok, 2, &n))) return r;
            if (n == 2) {
                e->flags |= ST_OFFSETS;
                if (ok[0] && ok[1]) e->flags |= ST_OFF_OK;
                e->b0 = v[0];
                e->b1 = v[1];
            }
        } else {
            r = js_skip(js, 3); /* other keys, and the three above when of another type */
        }
        if (r) return r;
    }
    return r;
}

static int st_meta_value(st_header *h) {
    jscan *js = &h->js;
    if (!js_at(js, '{')) return js_skip(js, 2);
    h->meta_object = true;
    js_obj o;
    js_obj_open(js, &o, true);
    h->meta_id = o.id;
    const char *k;
    size_t kl;
    int r;
    size_t pl = strlen(DCK_SLICE_PREFIX);
    for (;;) {
        const unsigned char *kat = js->p;
        if ((r = js_obj_next(js, &o, &k, &kl)) != 1) break;
        if (dck_grow((void **)&h->meta, &h->cap_meta, h->nmeta + 1, sizeof *h->meta)) {
            js->oom = true;
            return js_fail(js, "out of memory");
        }
        st_meta *mt = &h->meta[h->nmeta++];
        mt->key = k;
        mt->value = NULL;
        mt->at = (uint32_t)(kat - js->start);
        if (kl >= pl && !memcmp(k, DCK_SLICE_PREFIX, pl)) h->slice_keys = true;
        if (js_at(js, '"')) {
            size_t n;
            r = js_string(js, false, &mt->value, &n);
        } else {
            r = js_skip(js, 3);
        }
        if (r) return r;
    }
    return r;
}

/* Scans a header into h; 0 or -1 (js.err set). *not_object: the top level
 * is an array. */
static int st_scan(st_header *h, bool *not_object, const char *label, dck_status *limit) {
    jscan *js = &h->js;
    js_ws(js);
    if (js_at(js, '[')) {
        *not_object = true;
        return js_skip(js, 1) ? -1 : js_finish(js);
    }
    if (!js_at(js, '{')) return js_fail(js, "'[' or '{' expected");
    js_obj o;
    js_obj_open(js, &o, true);
    h->top_id = o.id;
    const char *k;
    size_t kl;
    int r;
    for (;;) {
        const unsigned char *kat = js->p;
        if ((r = js_obj_next(js, &o, &k, &kl)) != 1) break;
        if (h->nm > DCK_MAX_TENSORS) {
            *limit = dck_set_error(DCK_ERR_LIMIT, "%s: more than %u tensors", label, DCK_MAX_TENSORS);
            return -1;
        }
        size_t cap0 = h->cap_m;
        if (dck_grow((void **)&h->m, &h->cap_m, h->nm + 1, sizeof *h->m)) {
            js->oom = true;
            return js_fail(js, "out of memory");
        }
        /* a header of many tensors fills what doubling added: in one call */
        if (h->cap_m != cap0) dck_prefault(h->m + cap0, (h->cap_m - cap0) * sizeof *h->m);
        st_member *e = &h->m[h->nm++];
        memset(e, 0, sizeof *e);
        e->name = k;
        e->at = (uint32_t)(kat - js->start);
        if (!strcmp(k, "__metadata__")) {
            h->meta_at = (long)(h->nm - 1);
            if (js_at(js, '{')) e->flags |= ST_OBJECT;
            r = st_meta_value(h);
        } else {
            r = st_member_value(h, e);
        }
        if (r) return r;
    }
    if (r || js_finish(js)) return -1;
    /* duplicate keys of the two large objects, in tables sized once */
    if (h->nm && js_dedupe(js, h->top_id, &h->m[0].name, sizeof *h->m, &h->m[0].at, sizeof *h->m, h->nm))
        return -1;
    if (h->nmeta &&
        js_dedupe(js, h->meta_id, &h->meta[0].key, sizeof *h->meta, &h->meta[0].at, sizeof *h->meta, h->nmeta))
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
    dck_status s = js_init(&h.js, json, json_len, true);
    if (s) return s;
    st_range *ranges = NULL;
    size_t nr = 0;
    bool not_object = false;
    dck_status limit = DCK_OK;
    if (st_scan(&h, &not_object, label, &limit)) {
        s = limit ? limit : js_error(&h.js, label, "header");
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
            long at = slot_find(&h.js, h.top_id, mk + pl, strlen(mk + pl));
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
            long at = slot_find(&h.js, h.meta_id, mkey, mlen);
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
    js_free(&h.js);
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

/* ------------------------------------------------------------------ HF index */

#define MAX_INDEX_BYTES ((size_t)1 << 30)

static int cmp_cstr(const void *a, const void *b) {
    return dck_name_compare(*(char *const *)a, *(char *const *)b);
}

/* The whole file, NUL-terminated. */
static dck_status read_text_file(const char *path, size_t limit, char **out, size_t *len) {
    *out = NULL;
    int fd;
    struct stat st;
    DCK_TRY(dck_open_regular(path, &fd, &st)); /* a FIFO would block */
    dck_status s = DCK_OK;
    char *buf = NULL;
    size_t n = 0;
    if ((uint64_t)st.st_size > limit) {
        s = dck_set_error(DCK_ERR_LIMIT, "%s: %llu bytes, over the %zu-byte limit", path,
                          (unsigned long long)st.st_size, limit);
    } else if (!(buf = malloc((size_t)st.st_size + 1))) {
        s = dck_oom(NULL);
    } else {
        while (n < (size_t)st.st_size) {
            ssize_t r = read(fd, buf + n, (size_t)st.st_size - n);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) {
                s = dck_set_error(DCK_ERR_IO, "%s: read error: %s", path, strerror(errno));
                break;
            }
            if (r == 0) break;
            n += (size_t)r;
        }
    }
    close(fd);
    if (s) {
        free(buf);
        return s;
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return DCK_OK;
}

typedef struct {
    const char *tensor, *file; /* file NULL: not a string */
    uint32_t at;
} idx_entry;

/* The shards' tensors (ck->tensors[before, ntensors)) in the weight_map's
 * order as written, when it has one: transformers writes the map with its
 * keys sorted (json.dumps(sort_keys=True): "h.10" before "h.2"), which says
 * nothing of the model, and a map in byte order is taken for such; other
 * writers' maps keep the order they list. Tensors of a shard the map does
 * not name come after, in their shard's order. */
static void weight_map_order(dck_checkpoint *ck, size_t before, const idx_entry *wm, size_t nwm) {
    bool sorted = true;
    for (size_t i = 1; i < nwm && sorted; i++) sorted = strcmp(wm[i - 1].tensor, wm[i].tensor) < 0;
    if (sorted) return;
    if (before >= ck->ntensors) return;
    /* the shards' tensors hold seq base .. base+n-1 (added in turn, none
     * since), the named ones are distinct (found at or after before): the
     * same numbers, given out anew */
    uint64_t base = ck->tensors[before].seq, next = base + nwm;
    for (size_t i = before; i < ck->ntensors; i++) ck->tensors[i].ordered = false;
    for (size_t i = 0; i < nwm; i++) {
        dck_tensor_entry *t = &ck->tensors[dck_checkpoint_find(ck, wm[i].tensor)];
        t->seq = base + i;
        t->ordered = true;
    }
    for (size_t i = before; i < ck->ntensors; i++)
        if (!ck->tensors[i].ordered) ck->tensors[i].seq = next++;
    dck_ck_mark_ordered(ck, before);
}

/* Opens the shards named in an index's weight_map (each once), relative to
 * the index's directory, through open_shard (open.c: by content, so .bin
 * shards as well as safetensors). Tensors must come from the shard the
 * index names. */
dck_status dck_index_open(dck_checkpoint *ck, const char *index_path, const char *dir,
                          const char *relprefix, dck_index_shard_fn open_shard, void *ctx) {
    char *text;
    size_t len = 0;
    DCK_TRY(read_text_file(index_path, MAX_INDEX_BYTES, &text, &len));
    jscan js;
    dck_status s = js_init(&js, text, len, false);
    if (s) {
        free(text);
        return s;
    }
    idx_entry *wm = NULL;
    size_t nwm = 0, cap = 0;
    const char **files = NULL;
    bool have_wm = false;
    int r = 0;
    js_ws(&js);
    if (js_at(&js, '{')) {
        js_obj top;
        js_obj_open(&js, &top, false);
        const char *k;
        size_t kl;
        while (!r && (r = js_obj_next(&js, &top, &k, &kl)) == 1) {
            r = 0;
            if (strcmp(k, "weight_map") || !js_at(&js, '{')) {
                r = js_skip(&js, 2);
                continue;
            }
            have_wm = true;
            js_obj o;
            js_obj_open(&js, &o, true);
            uint32_t wm_id = o.id;
            const char *t;
            size_t tl;
            for (;;) {
                const unsigned char *kat = js.p;
                if ((r = js_obj_next(&js, &o, &t, &tl)) != 1) break;
                if (dck_grow((void **)&wm, &cap, nwm + 1, sizeof *wm)) {
                    js.oom = true;
                    r = js_fail(&js, "out of memory");
                    break;
                }
                idx_entry *e = &wm[nwm++];
                e->tensor = t;
                e->file = NULL;
                e->at = (uint32_t)(kat - js.start);
                size_t fl;
                r = js_at(&js, '"') ? js_string(&js, false, &e->file, &fl) : js_skip(&js, 3);
                if (r) break;
            }
            if (!r && nwm) r = js_dedupe(&js, wm_id, &wm[0].tensor, sizeof *wm, &wm[0].at, sizeof *wm, nwm);
        }
        if (!r) r = js_finish(&js);
    } else if (js_at(&js, '[')) {
        r = js_skip(&js, 1);
        if (!r) r = js_finish(&js);
    } else {
        r = js_fail(&js, "'[' or '{' expected");
    }
    if (r) {
        if (js.oom) {
            s = dck_oom(NULL);
        } else {
            int line = 1;
            for (size_t i = 0; i < js.err_at && i < len; i++) line += text[i] == '\n';
            s = dck_set_error(DCK_ERR_FORMAT, "%s: invalid JSON at line %d (byte %zu): %s",
                              index_path, line, js.err_at, js.err);
        }
        goto done;
    }
    if (!have_wm) {
        s = dck_set_error(DCK_ERR_FORMAT, "%s: no weight_map object", index_path);
        goto done;
    }
    files = malloc((nwm + 1) * sizeof *files);
    if (!files) {
        s = dck_oom(NULL);
        goto done;
    }
    /* each shard once (the scanner's table finds the repeats), in model order */
    uint32_t files_id = ++js.nobj;
    size_t nf = 0;
    const char *last = NULL;
    for (size_t i = 0; i < nwm; i++) {
        const char *fn = wm[i].file;
        if (!fn || !*fn || fn[0] == '/' || strstr(fn, "..")) {
            s = dck_set_error(DCK_ERR_FORMAT, "%s: weight_map entry of %s is not a relative file name",
                              index_path, wm[i].tensor);
            goto done;
        }
        if (last && !strcmp(fn, last)) continue; /* the usual run of one shard's tensors */
        last = fn;
        int r2 = slots_reserve(&js, 1) ? -1 : slot_insert(&js, files_id, fn, (uint32_t)strlen(fn), 0);
        if (r2 < 0) {
            s = dck_oom(NULL);
            goto done;
        }
        if (r2) files[nf++] = fn;
    }
    dck_qsort(files, nf, sizeof *files, cmp_cstr);
    size_t before = ck->ntensors;
    for (size_t i = 0; i < nf && !s; i++) {
        char *p = dck_path_join(dir, files[i]);
        char *rp = dck_path_join(relprefix, files[i]);
        if (!p || !rp) s = dck_oom(NULL);
        else s = open_shard(ctx, ck, p, rp, files[i]);
        free(p);
        free(rp);
    }
    /* every tensor the index names must exist (the checkpoint's name index
     * finds it; tensors of other paths opened before do not count) */
    for (size_t i = 0; i < nwm && !s; i++) {
        long at = dck_checkpoint_find(ck, wm[i].tensor);
        if (at < 0 || (size_t)at < before)
            s = dck_set_error(DCK_ERR_FORMAT, "%s: tensor %s is in the index but in no shard",
                              index_path, wm[i].tensor);
    }
    if (!s) weight_map_order(ck, before, wm, nwm);
done:
    free(files);
    free(wm);
    js_free(&js);
    free(text);
    return s;
}


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

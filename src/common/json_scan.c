/* The JSON scanner (json_scan.h says what it accepts and who uses it). It
 * reads a header of 100k tensors in a few hundred nanoseconds per tensor:
 * strings are copied 8 bytes at a time while they are plain ASCII, and the
 * duplicate keys of large objects are found in one table sized once. */
#include "common/json_scan.h"

#include <xxhash.h>

#include <errno.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

int dck_json_fail(dck_json *js, const char *what) {
    if (!js->err) {
        js->err = what;
        js->err_at = (size_t)(js->p - js->start);
    }
    return -1;
}

dck_status dck_json_init(dck_json *js, const char *text, size_t len, bool allow_nul) {
    memset(js, 0, sizeof *js);
    if (len >= UINT32_MAX) return dck_set_error(DCK_ERR_LIMIT, "JSON text of %zu bytes (limit 4 GiB)", len);
    js->start = js->p = (const unsigned char *)text;
    js->end = js->start + len;
    js->allow_nul = allow_nul;
    js->arena = malloc(len + 1);
    return js->arena ? DCK_OK : dck_oom(NULL);
}

void dck_json_free(dck_json *js) {
    free(js->arena);
    free(js->slots);
}

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

/* The escapes of one letter: the byte after the backslash, the byte it stands for. */
static const char esc_from[] = "\"\\/bfnrt", esc_to[] = "\"\\/\b\f\n\r\t";

size_t dck_json_char(const unsigned char *p, const unsigned char *end, char *out, size_t *outlen,
                     dck_json_char_fault *fault, size_t *fault_at) {
    unsigned c = *p;
    *fault_at = 0;
    if (c < 0x20) return *fault = DCK_JSON_CHAR_CONTROL, 0;
    if (c >= 0x80) {
        int n = dck_utf8_width(p, end);
        if (!n) return *fault = DCK_JSON_CHAR_UTF8, 0;
        memcpy(out, p, (size_t)n);
        *outlen = (size_t)n;
        return (size_t)n;
    }
    if (c != '\\') {
        out[0] = (char)c;
        *outlen = 1;
        return 1;
    }
    if (end - p < 2) return *fault = DCK_JSON_CHAR_END, 0;
    const char *e = memchr(esc_from, p[1], sizeof esc_from - 1);
    if (e) {
        out[0] = esc_to[e - esc_from];
        *outlen = 1;
        return 2;
    }
    if (p[1] != 'u') return *fault = DCK_JSON_CHAR_ESCAPE, 0;
    long v = u_escape(p, end);
    if (v < 0) return *fault = DCK_JSON_CHAR_U_ESCAPE, 0;
    size_t took = 6;
    if (v >= 0xD800 && v <= 0xDBFF) {
        const unsigned char *q = p + 6;
        *fault_at = 6;
        if (end - q < 2 || q[0] != '\\' || q[1] != 'u') return *fault = DCK_JSON_CHAR_LONE_HIGH, 0;
        long w = u_escape(q, end);
        if (w < 0xDC00 || w > 0xDFFF) return *fault = DCK_JSON_CHAR_BAD_PAIR, 0;
        v = ((v - 0xD800) << 10) + (w - 0xDC00) + 0x10000;
        took = 12;
    } else if (v >= 0xDC00 && v <= 0xDFFF) {
        *fault_at = 6;
        return *fault = DCK_JSON_CHAR_LONE_LOW, 0;
    }
    *fault_at = 0;
    *outlen = dck_utf8_put(out, (uint32_t)v);
    return took;
}

/* The scanner's words for a character's fault (jansson's). */
static const char *const char_fault_text[] = {
    [DCK_JSON_CHAR_END] = "premature end of input",
    [DCK_JSON_CHAR_CONTROL] = "control character in a string",
    [DCK_JSON_CHAR_UTF8] = "invalid UTF-8",
    [DCK_JSON_CHAR_ESCAPE] = "invalid escape",
    [DCK_JSON_CHAR_U_ESCAPE] = "invalid escape",
    [DCK_JSON_CHAR_LONE_LOW] = "invalid Unicode surrogate",
    [DCK_JSON_CHAR_LONE_HIGH] = "invalid Unicode surrogate",
    [DCK_JSON_CHAR_BAD_PAIR] = "invalid Unicode surrogate",
};

/* The arena fills front to back: its pages are faulted in a step ahead, one
 * call per step rather than a page fault per page (a 100k-tensor header
 * decodes megabytes of names). */
#define DCK_JSON_FAULT_STEP ((size_t)1 << 20)

/* A string at the cursor ('"'), decoded into the arena. Keys may not hold
 * NUL; values only with allow_nul. */
int dck_json_string(dck_json *js, bool is_key, const char **out, size_t *outlen) {
    const unsigned char *p = js->p + 1, *end = js->end;
    size_t acap = (size_t)(js->end - js->start) + 1;
    if (js->used >= js->faulted && acap >= 2 * DCK_JSON_FAULT_STEP) {
        size_t upto = js->used + DCK_JSON_FAULT_STEP < acap ? js->used + DCK_JSON_FAULT_STEP : acap;
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
        if (p >= end) return js->p = p, dck_json_fail(js, "premature end of input");
        if (*p == '"') break;
        /* the rest, one character at a time (written in place: never longer
         * than its text) */
        size_t n, at;
        dck_json_char_fault f;
        size_t took = dck_json_char(p, end, o, &n, &f, &at);
        if (!took) return js->p = p + at, dck_json_fail(js, char_fault_text[f]);
        if (n == 1 && !*o) nul = true;
        o += n;
        p += took;
    }
    if (nul && (is_key || !js->allow_nul))
        return js->p = p, dck_json_fail(js, is_key ? "NUL byte in object key" : "\\u0000 in a string");
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
int dck_json_number(dck_json *js, int64_t *iv) {
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
        if (p < end && is_digit(*p)) return js->p = p, dck_json_fail(js, "invalid number");
    } else if (p < end && is_digit(*p)) {
        while (p < end && is_digit(*p)) p++;
    } else {
        return js->p = p, dck_json_fail(js, "invalid token");
    }
    if (p < end && (*p == '.' || *p == 'e' || *p == 'E')) {
        if (*p == '.') {
            p++;
            if (p >= end || !is_digit(*p)) return js->p = p, dck_json_fail(js, "invalid number");
            while (p < end && is_digit(*p)) p++;
        }
        if (p < end && (*p == 'e' || *p == 'E')) {
            p++;
            if (p < end && (*p == '+' || *p == '-')) p++;
            if (p >= end || !is_digit(*p)) return js->p = p, dck_json_fail(js, "invalid number");
            while (p < end && is_digit(*p)) p++;
        }
        if (real_overflows(s, (size_t)(p - s))) return dck_json_fail(js, "real number overflow");
        js->p = p;
        return 2;
    }
    /* integers: the range of int64 (strtoll) */
    uint64_t v = 0, lim = neg ? (uint64_t)1 << 63 : ((uint64_t)1 << 63) - 1;
    for (const unsigned char *q = d0; q < p; q++) {
        unsigned dg = *q - '0';
        if (v > (lim - dg) / 10) return dck_json_fail(js, "too big integer");
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
int dck_json_slot_insert(dck_json *js, uint32_t obj, const char *k, uint32_t len, uint32_t val) {
    if ((js->nslots + 1) * 2 > js->cap_slots) {
        size_t nc = js->cap_slots ? js->cap_slots * 2 : 64;
        dck_json_slot *ns = calloc(nc, sizeof *ns);
        if (!ns) return -1;
        for (size_t i = 0; i < js->cap_slots; i++) {
            dck_json_slot *s = &js->slots[i];
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
        dck_json_slot *s = &js->slots[h];
        if (s->fp == fp && s->obj == obj && !strcmp(js->arena + s->key - 1, k)) return 0;
    }
    js->slots[h] = (dck_json_slot){(uint32_t)(k - js->arena) + 1, fp, obj, val};
    js->nslots++;
    return 1;
}

/* Looks (obj, key) up: the key's ordinal in its object, or -1. k is
 * NUL-terminated. */
long dck_json_slot_find(const dck_json *js, uint32_t obj, const char *k, size_t len) {
    if (!js->cap_slots) return -1;
    uint32_t fp = key_hash(k, len, obj);
    size_t m = js->cap_slots - 1, h = fp & m;
    for (; js->slots[h].key; h = (h + 1) & m) {
        const dck_json_slot *s = &js->slots[h];
        if (s->fp == fp && s->obj == obj && !strcmp(js->arena + s->key - 1, k)) return (long)s->val;
    }
    return -1;
}

/* A table for n more keys, so that dck_json_slot_insert does not grow it. */
int dck_json_slots_reserve(dck_json *js, size_t n) {
    size_t cap = 64;
    while (cap < (js->nslots + n) * 2 + 2) cap *= 2;
    if (cap <= js->cap_slots) return 0;
    dck_json_slot *ns = calloc(cap, sizeof *ns);
    if (!ns) return -1;
    dck_prefault(ns, cap * sizeof *ns); /* touched all over, at random */
    for (size_t i = 0; i < js->cap_slots; i++) {
        dck_json_slot *s = &js->slots[i];
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

/* How many keys ahead the loops that insert keys into a hash table fetch
 * the slot of a key into the cache (a table for 100k keys is megabytes:
 * a miss per key, unless it was asked for earlier). */
#define DCK_JSON_PREFETCH_AHEAD 8

/* The keys of a deferred object (key i at input offset at[i]; val = i):
 * 0, or -1 with the error of the first duplicate. */
int dck_json_dedupe(dck_json *js, uint32_t obj, const char *const *keys, size_t stride,
                    const uint32_t *at, size_t at_stride, size_t n) {
    if (dck_json_slots_reserve(js, n)) {
        js->oom = true;
        return dck_json_fail(js, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        if (i + DCK_JSON_PREFETCH_AHEAD < n) {
            const char *kp = *(const char *const *)((const char *)keys + (i + DCK_JSON_PREFETCH_AHEAD) * stride);
            __builtin_prefetch(&js->slots[key_hash(kp, strlen(kp), obj) & (js->cap_slots - 1)]);
        }
        const char *k = *(const char *const *)((const char *)keys + i * stride);
        int r = dck_json_slot_insert(js, obj, k, (uint32_t)strlen(k), (uint32_t)i);
        if (r < 0) {
            js->oom = true;
            return dck_json_fail(js, "out of memory");
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
 * DCK_JSON_SMALL, then the slot table), or, for a deferred object (the large
 * ones a header is made of), by the caller afterwards with dck_json_dedupe, in a
 * table sized once. */
void dck_json_obj_open(dck_json *js, dck_json_obj *o, bool deferred) {
    js->p++;
    o->id = ++js->nobj;
    o->n = 0;
    o->first = true;
    o->hashed = false;
    o->deferred = deferred;
}

/* The next member: 1 its key is read and the cursor is at its value, 0 the
 * object ended, -1 an error. */
int dck_json_obj_next(dck_json *js, dck_json_obj *o, const char **key, size_t *klen) {
    dck_json_ws(js);
    if (o->first) {
        o->first = false;
        if (dck_json_at(js, '}')) {
            js->p++;
            return 0;
        }
    } else if (dck_json_at(js, ',')) {
        js->p++;
        dck_json_ws(js);
    } else if (dck_json_at(js, '}')) {
        js->p++;
        return 0;
    } else {
        return dck_json_fail(js, "'}' expected");
    }
    if (!dck_json_at(js, '"')) return dck_json_fail(js, "string or '}' expected");
    const unsigned char *kat = js->p;
    if (dck_json_string(js, true, key, klen)) return -1;
    if (*klen > UINT32_MAX) return js->p = kat, dck_json_fail(js, "key too long");
    uint32_t len = (uint32_t)*klen;
    int dup = 0;
    if (o->deferred) {
        /* checked by dck_json_dedupe */
    } else if (!o->hashed && o->n < DCK_JSON_SMALL) {
        for (uint32_t i = 0; i < o->n && !dup; i++)
            dup = o->len[i] == len && !memcmp(o->key[i], *key, len);
        if (!dup) {
            o->key[o->n] = *key;
            o->len[o->n] = len;
        }
    } else {
        if (!o->hashed) { /* the object outgrew the scan: move its keys over */
            for (uint32_t i = 0; i < DCK_JSON_SMALL; i++)
                if (dck_json_slot_insert(js, o->id, o->key[i], o->len[i], i) < 0) goto oom;
            o->hashed = true;
        }
        int r = dck_json_slot_insert(js, o->id, *key, len, o->n);
        if (r < 0) goto oom;
        dup = r == 0;
    }
    if (dup) return js->p = kat, dck_json_fail(js, "duplicate object key");
    o->n++;
    dck_json_ws(js);
    if (!dck_json_at(js, ':')) return dck_json_fail(js, "':' expected");
    js->p++;
    dck_json_ws(js);
    return 1;
oom:
    js->oom = true;
    return dck_json_fail(js, "out of memory");
}

/* The next element of an array whose '[' was consumed: 1 the cursor is at
 * an element, 0 the array ended, -1 an error. */
int dck_json_arr_next(dck_json *js, bool *first) {
    dck_json_ws(js);
    if (*first) {
        *first = false;
        if (dck_json_at(js, ']')) {
            js->p++;
            return 0;
        }
        return 1;
    }
    if (dck_json_at(js, ',')) {
        js->p++;
        dck_json_ws(js);
        return 1;
    }
    if (dck_json_at(js, ']')) {
        js->p++;
        return 0;
    }
    return dck_json_fail(js, "']' expected");
}

/* Any value at the cursor, at nesting depth `depth` (the top-level value is 1). */
int dck_json_skip(dck_json *js, unsigned depth) {
    if (depth > DCK_JSON_MAX_DEPTH) return dck_json_fail(js, "maximum parsing depth reached");
    if (js->p >= js->end) return dck_json_fail(js, "premature end of input");
    unsigned c = *js->p;
    if (c == '"') {
        const char *s;
        size_t n;
        return dck_json_string(js, false, &s, &n);
    }
    if (c == '{') {
        dck_json_obj o;
        dck_json_obj_open(js, &o, false);
        const char *k;
        size_t kl;
        int r;
        while ((r = dck_json_obj_next(js, &o, &k, &kl)) == 1)
            if (dck_json_skip(js, depth + 1)) return -1;
        return r;
    }
    if (c == '[') {
        js->p++;
        bool first = true;
        int r;
        while ((r = dck_json_arr_next(js, &first)) == 1)
            if (dck_json_skip(js, depth + 1)) return -1;
        return r;
    }
    if (c == '-' || is_digit(c)) {
        int64_t v;
        return dck_json_number(js, &v) < 0 ? -1 : 0;
    }
    const unsigned char *p = js->p;
    while (p < js->end && ((*p | 0x20) >= 'a' && (*p | 0x20) <= 'z')) p++;
    size_t n = (size_t)(p - js->p);
    if ((n == 4 && (!memcmp(js->p, "true", 4) || !memcmp(js->p, "null", 4))) ||
        (n == 5 && !memcmp(js->p, "false", 5))) {
        js->p = p;
        return 0;
    }
    return dck_json_fail(js, "invalid token");
}

/* After the top-level value: only whitespace. */
int dck_json_finish(dck_json *js) {
    dck_json_ws(js);
    return js->p == js->end ? 0 : dck_json_fail(js, "end of file expected");
}

/* An array of integers at the cursor ('[' not consumed): *count elements,
 * the first `max` stored in v[], ok[i] whether element i is an integer >= 0
 * (what json_u64 accepted). */
int dck_json_u64_array(dck_json *js, unsigned depth, uint64_t *v, bool *ok, size_t max, size_t *count) {
    js->p++;
    bool first = true;
    size_t n = 0;
    int r;
    while ((r = dck_json_arr_next(js, &first)) == 1) {
        bool good = false;
        uint64_t x = 0;
        if (depth + 1 > DCK_JSON_MAX_DEPTH) return dck_json_fail(js, "maximum parsing depth reached");
        if (js->p < js->end && (*js->p == '-' || is_digit(*js->p))) {
            int64_t iv;
            int k = dck_json_number(js, &iv);
            if (k < 0) return -1;
            good = k == 1 && iv >= 0;
            x = good ? (uint64_t)iv : 0;
        } else if (dck_json_skip(js, depth + 1)) {
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

dck_status dck_json_error(dck_json *js, const char *label, const char *what) {
    if (js->oom) return dck_oom(NULL);
    return dck_set_error(DCK_ERR_FORMAT, "%s: invalid JSON %s at byte %zu: %s", label, what,
                         js->err_at, js->err);
}

/* A small strict scanner of JSON text: no tree, one pass, the decoded
 * strings in one block (the arena). It accepts exactly the documents
 * jansson's loader accepts with JSON_REJECT_DUPLICATES (plus JSON_ALLOW_NUL
 * where allow_nul is set): the same grammar, strict UTF-8 (utf8.h), no NUL
 * in keys, integers in the range of int64, reals that do not overflow a
 * double, nesting up to DCK_JSON_MAX_DEPTH. The caller walks the document
 * (dck_json_obj_next, dck_json_arr_next, dck_json_skip for what it does not
 * need); a syntax error is kept as static text with its byte offset, the
 * first one only, and the caller turns it into its message.
 *
 * Users: safetensors headers and Hugging Face index files (formats/), the
 * canary's golden files (train/canary_golden.c). tests/fuzz/fuzz_safetensors.c
 * checks the scanner against jansson itself. */
#ifndef DCK_COMMON_JSON_SCAN_H
#define DCK_COMMON_JSON_SCAN_H

#include "common/common.h"

#define DCK_JSON_MAX_DEPTH 2048 /* jansson's JSON_PARSER_MAX_DEPTH */
#define DCK_JSON_SMALL 8        /* objects up to this many keys check duplicates by a scan */

typedef struct {
    uint32_t key; /* offset of the key in the arena + 1 (0: empty slot) */
    uint32_t fp;  /* 32 bits of the hash of (object, key); also the slot's place */
    uint32_t obj; /* serial number of the object */
    uint32_t val; /* the key's ordinal in its object */
} dck_json_slot;

typedef struct {
    const unsigned char *start, *p, *end;
    char *arena;      /* decoded strings, NUL-terminated; never longer than the input */
    size_t used;
    size_t faulted;   /* arena[0, faulted) faulted in, a step at a time */
    bool allow_nul;   /* \u0000 in string values (never in keys) */
    const char *err;  /* the first syntax error (static text), or NULL */
    size_t err_at;    /* its byte offset */
    bool oom;
    uint32_t nobj;
    dck_json_slot *slots; /* keys of large objects (dck_json_obj_next, dck_json_dedupe): open addressing */
    size_t cap_slots, nslots;
} dck_json;

/* An object being read (dck_json_obj_open .. dck_json_obj_next == 0). */
typedef struct {
    uint32_t id, n;
    bool first, hashed, deferred;
    const char *key[DCK_JSON_SMALL];
    uint32_t len[DCK_JSON_SMALL];
} dck_json_obj;

/* The scanner over text[0, len) (no NUL needed); DCK_ERR_LIMIT from 4 GiB. */
dck_status dck_json_init(dck_json *js, const char *text, size_t len, bool allow_nul);
void dck_json_free(dck_json *js);

/* Records the first syntax error (what: static text) at the cursor; -1. */
int dck_json_fail(dck_json *js, const char *what);
/* The error as a status: out of memory, or DCK_ERR_FORMAT "LABEL: invalid
 * JSON WHAT at byte N: ERR". */
dck_status dck_json_error(dck_json *js, const char *label, const char *what);

/* Past the white space at p; white space at the cursor; whether the cursor
 * is at byte c. */
static inline const unsigned char *dck_json_skip_ws(const unsigned char *p, const unsigned char *end) {
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    return p;
}
static inline void dck_json_ws(dck_json *js) { js->p = dck_json_skip_ws(js->p, js->end); }
static inline bool dck_json_at(const dck_json *js, unsigned char c) { return js->p < js->end && *js->p == c; }

/* What is wrong with a string's character (dck_json_char). */
typedef enum {
    DCK_JSON_CHAR_END = 1,   /* the text ends after a backslash */
    DCK_JSON_CHAR_CONTROL,   /* a byte below 0x20 */
    DCK_JSON_CHAR_UTF8,      /* no well-formed UTF-8 sequence starts here */
    DCK_JSON_CHAR_ESCAPE,    /* a backslash before none of "\/bfnrtu */
    DCK_JSON_CHAR_U_ESCAPE,  /* \u without four hex digits */
    DCK_JSON_CHAR_LONE_LOW,  /* \uDC00-\uDFFF first */
    DCK_JSON_CHAR_LONE_HIGH, /* \uD800-\uDBFF not followed by \u */
    DCK_JSON_CHAR_BAD_PAIR,  /* ... followed by a \u that is no low surrogate */
} dck_json_char_fault;

/* One character of a string's body at p (p < end; *p is not the closing
 * quote), the one decoding of escapes, surrogate pairs and UTF-8 for every
 * JSON reader: its UTF-8 into out (room for 4 bytes; never more than it
 * took), *outlen bytes; returns the bytes of text it took. 0 on a fault:
 * *fault says which, *fault_at where, from p (6: after a surrogate's
 * escape). \u0000 is a character (out "\0"): the caller decides. */
size_t dck_json_char(const unsigned char *p, const unsigned char *end, char *out, size_t *outlen,
                     dck_json_char_fault *fault, size_t *fault_at);

/* Each of these returns 0 (or 1 where said), -1 on an error (js->err set). */

/* A string at the cursor ('"'), decoded into the arena (*out, NUL-terminated,
 * *outlen bytes). Keys may not hold NUL; values only with allow_nul. */
int dck_json_string(dck_json *js, bool is_key, const char **out, size_t *outlen);
/* A number at the cursor: 1 an integer (*iv), 2 a real. */
int dck_json_number(dck_json *js, int64_t *iv);
/* At '{'. A deferred object (the large ones) leaves its duplicate keys to
 * dck_json_dedupe, once, afterwards; the others are checked as keys come. */
void dck_json_obj_open(dck_json *js, dck_json_obj *o, bool deferred);
/* The next member: 1 its key is read and the cursor is at its value, 0 the
 * object ended. */
int dck_json_obj_next(dck_json *js, dck_json_obj *o, const char **key, size_t *klen);
/* The next element of an array whose '[' was consumed: 1 the cursor is at
 * an element, 0 the array ended. */
int dck_json_arr_next(dck_json *js, bool *first);
/* Any value at the cursor, at nesting depth `depth` (the top-level value is 1). */
int dck_json_skip(dck_json *js, unsigned depth);
/* After the top-level value: only white space. */
int dck_json_finish(dck_json *js);
/* An array of integers at the cursor ('[' not consumed): *count elements,
 * the first `max` stored in v[], ok[i] whether element i is an integer >= 0. */
int dck_json_u64_array(dck_json *js, unsigned depth, uint64_t *v, bool *ok, size_t max, size_t *count);

/* Keys in the scanner's table, by (object id, key): keys are strings of the
 * arena. The keys of a deferred object, n of them: keys[i * stride] the key,
 * at[i * at_stride] its offset in the text (for the error); -1 at the first
 * duplicate. */
int dck_json_dedupe(dck_json *js, uint32_t obj, const char *const *keys, size_t stride,
                    const uint32_t *at, size_t at_stride, size_t n);
/* The key's ordinal in its object, or -1 (k NUL-terminated). */
long dck_json_slot_find(const dck_json *js, uint32_t obj, const char *k, size_t len);
/* Inserts (obj, key): 1 inserted, 0 already there, -1 no memory. */
int dck_json_slot_insert(dck_json *js, uint32_t obj, const char *k, uint32_t len, uint32_t val);
/* Room for n more keys, so that dck_json_slot_insert does not grow the table; -1 no memory. */
int dck_json_slots_reserve(dck_json *js, size_t n);

#endif

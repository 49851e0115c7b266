/* UTF-8, the one decoder and encoder of the library: names in checkpoint
 * headers, manifests, recordings and traces, and the escapes of the JSON
 * and YAML scanners, all go through these, so every reader accepts exactly
 * the same text. Strict (jansson's rules): no overlongs, no surrogates,
 * nothing past U+10FFFF. */
#ifndef DCK_COMMON_UTF8_H
#define DCK_COMMON_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The width of the well-formed sequence at s (1 for ASCII), 0 when it is
 * not well formed or runs past end; its code point into *cp when cp is not
 * NULL. s < end. */
int dck_utf8_decode(const unsigned char *s, const unsigned char *end, uint32_t *cp);

/* The width alone (dck_utf8_decode without the code point). */
static inline int dck_utf8_width(const unsigned char *s, const unsigned char *end) {
    return dck_utf8_decode(s, end, NULL);
}

/* Writes the encoding of cp (at most U+10FFFF; the caller has checked)
 * into out, which has room for 4 bytes; returns the bytes written (1..4). */
size_t dck_utf8_put(char *out, uint32_t cp);

/* Whether the n bytes at s are all well-formed UTF-8. Names (tensor, value,
 * file path, metadata) and value texts are UTF-8: YAML and JSON can hold
 * nothing else, and libyaml's emitter loops forever on an event it was
 * refused. One rule for every reader (detcheck-formats(7) "Names"): a name
 * that is not UTF-8 is refused where it enters a checkpoint
 * (dck_ck_add_piece, dck_ck_add_value), exit 2 naming the file and showing
 * the name escaped (dck_check_utf8, core.h); the manifest writers refuse it
 * again. */
bool dck_utf8_valid(const char *s, size_t n);

/* Cutting text at a character: the start of the character byte i is in
 * (i itself, or back over continuation bytes; never before 0), and the
 * first character start at or after i (never past len). */
static inline size_t dck_utf8_back(const char *s, size_t i) {
    while (i && ((unsigned char)s[i] & 0xC0) == 0x80) i--;
    return i;
}
static inline size_t dck_utf8_forward(const char *s, size_t i, size_t len) {
    while (i < len && ((unsigned char)s[i] & 0xC0) == 0x80) i++;
    return i;
}

#endif

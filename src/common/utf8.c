/* UTF-8 decoding and encoding (utf8.h says why there is one of each). */
#include "utf8.h"

int dck_utf8_decode(const unsigned char *s, const unsigned char *end, uint32_t *cp) {
    unsigned c = s[0];
    int n;
    uint32_t v;
    if (c < 0x80) n = 1, v = c;
    else if (c >= 0xC2 && c <= 0xDF) n = 2, v = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) n = 3, v = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4) n = 4, v = c & 0x07;
    else return 0;
    if (end - s < n) return 0;
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF) || (n == 3 && v < 0x800) || (n == 4 && v < 0x10000))
        return 0;
    if (cp) *cp = v;
    return n;
}

size_t dck_utf8_put(char *out, uint32_t cp) {
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

bool dck_utf8_valid(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str, *end = s + n;
    while (s < end) {
        if (*s < 0x80) {
            s++;
            continue;
        }
        int w = dck_utf8_width(s, end);
        if (!w) return false;
        s += w;
    }
    return true;
}

/* The YAML scalar rules of libyaml's emitter (0.2.5) that manifests follow:
 * which strings it may write at all (dck_yaml_str_class), and in which
 * styles (dck_yaml_analyze, dck_yaml_all_safe). The direct writer
 * (manifest_write.c) writes what the emitter would, and the reader of the
 * written layout (manifest_parse.c) takes only what it would have written,
 * both by these. */
#include "core/manifest_impl.h"

#include <string.h>

/* STR_UTF8: valid UTF-8 (jansson's rules); STR_NOBREAK: no YAML line break. */
unsigned dck_yaml_str_class(const char *str) {
    const unsigned char *s = (const unsigned char *)str, *end = s + strlen(str);
    unsigned r = STR_UTF8 | STR_NOBREAK;
    while (s < end) {
        if (*s >= 0x20 && *s < 0x80) {
            s++;
            continue;
        }
        int w = dck_utf8_width(s, end);
        if (!w) return 0; /* libyaml and jansson refuse it: leave it to them */
        if (y_is_break(s)) r &= ~(unsigned)STR_NOBREAK;
        s += w;
    }
    return r;
}

static bool y_blankz(const unsigned char *s) { return *s == ' ' || *s == '\t' || *s == 0 || y_is_break(s); }

/* yaml_emitter_analyze_scalar for a non-empty scalar without line breaks
 * (valid UTF-8, NUL-terminated): the styles it allows. */
unsigned dck_yaml_analyze(const unsigned char *s, size_t len) {
    const unsigned char *end = s + len;
    bool flow_ind = false, block_ind = false, special = false, lead_space = false, trail_space = false;
    if ((s[0] == '-' && s[1] == '-' && s[2] == '-') || (s[0] == '.' && s[1] == '.' && s[2] == '.'))
        flow_ind = block_ind = true;
    bool preceded = true, followed = y_blankz(s + dck_utf8_width(s, end));
    for (size_t i = 0; i < len;) {
        unsigned c = s[i];
        int w = dck_utf8_width(s + i, end);
        if (i == 0) {
            if (strchr("#,[]{}&*!|>'\"%@`", (int)c) && c) flow_ind = block_ind = true;
            if (c == '?' || c == ':') {
                flow_ind = true;
                if (followed) block_ind = true;
            }
            if (c == '-' && followed) flow_ind = block_ind = true;
        } else {
            if (c == ',' || c == '?' || c == '[' || c == ']' || c == '{' || c == '}') flow_ind = true;
            if (c == ':') {
                flow_ind = true;
                if (followed) block_ind = true;
            }
            if (c == '#' && preceded) flow_ind = block_ind = true;
        }
        if (!y_printable(s + i)) special = true;
        if (c == ' ') {
            if (i == 0) lead_space = true;
            if (i + (size_t)w == len) trail_space = true;
        }
        preceded = y_blankz(s + i);
        i += (size_t)w;
        if (i < len) followed = y_blankz(s + i + dck_utf8_width(s + i, end));
    }
    unsigned r = Y_FLOW_PLAIN | Y_BLOCK_PLAIN | Y_SINGLE;
    if (lead_space || trail_space) r &= ~(unsigned)(Y_FLOW_PLAIN | Y_BLOCK_PLAIN);
    if (special) r = 0;
    if (flow_ind) r &= ~(unsigned)Y_FLOW_PLAIN;
    if (block_ind) r &= ~(unsigned)Y_BLOCK_PLAIN;
    return r;
}

/* Bytes that never make a YAML indicator in a scalar's middle and are
 * printable: [A-Za-z0-9._/-] */
static const unsigned char y_safe[256] = {
    ['-'] = 1, ['.'] = 1, ['/'] = 1, ['_'] = 1,
    ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1, ['8'] = 1, ['9'] = 1,
    ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1, ['G'] = 1, ['H'] = 1, ['I'] = 1,
    ['J'] = 1, ['K'] = 1, ['L'] = 1, ['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1, ['Q'] = 1, ['R'] = 1,
    ['S'] = 1, ['T'] = 1, ['U'] = 1, ['V'] = 1, ['W'] = 1, ['X'] = 1, ['Y'] = 1, ['Z'] = 1,
    ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1, ['h'] = 1, ['i'] = 1,
    ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1, ['o'] = 1, ['p'] = 1, ['q'] = 1, ['r'] = 1,
    ['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1, ['w'] = 1, ['x'] = 1, ['y'] = 1, ['z'] = 1,
};

/* Most names are letters, digits and . _ / - only: plain in both contexts
 * (dck_yaml_analyze allows it), unless they start with "---" or "..." or
 * are "-". */
bool dck_yaml_all_safe(const unsigned char *s, size_t len) {
    size_t i = 0;
    while (i < len && y_safe[s[i]]) i++;
    return i == len && len && !(s[0] == '-' && (len == 1 || (s[1] == '-' && s[2] == '-'))) &&
           !(s[0] == '.' && s[1] == '.' && s[2] == '.');
}


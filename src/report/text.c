/* Text as every output shows it (text.h): the one table that quotes names
 * (terminal, JSON, Markdown, JUnit, HTML), the ring of quoted strings for
 * messages, growing arrays of lines, and shell words. */
#include "report/text.h"
#include "common/common.h"
#include "common/utf8.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Code points that a name shows as \u{HHHH} (text.h): they move the cursor
 * or change a terminal's state (C1: U+009B is CSI, U+009D OSC where 8-bit
 * controls are read), reorder what is drawn around them (bidi), break a
 * line, or draw nothing, so that two names would look the same. */
static const struct {
    long lo, hi;
} quoted_points[] = {
    {0x80, 0x9f},     /* C1 controls */
    {0x61c, 0x61c},   /* ARABIC LETTER MARK */
    {0x200b, 0x200f}, /* zero-width space, non-joiner, joiner; LRM, RLM */
    {0x2028, 0x2029}, /* line and paragraph separators */
    {0x202a, 0x202e}, /* bidi embeddings and overrides */
    {0x2060, 0x2064}, /* word joiner, invisible operators */
    {0x2066, 0x2069}, /* bidi isolates */
    {0xfdd0, 0xfdef}, /* noncharacters (HTML and XML refuse them) */
    {0xfeff, 0xfeff}, /* zero-width no-break space (BOM) */
};

static bool quoted_point(long cp) {
    if ((cp & 0xfffe) == 0xfffe) return true; /* U+FFFE, U+FFFF in every plane */
    for (size_t i = 0; i < sizeof quoted_points / sizeof quoted_points[0]; i++)
        if (cp >= quoted_points[i].lo && cp <= quoted_points[i].hi) return true;
    return false;
}

size_t cli_quote_char(const char *s, const char *end, char esc[CLI_QUOTE_MAX], long *cp) {
    const unsigned char *p = (const unsigned char *)s;
    int n = dck_utf8_width(p, (const unsigned char *)end);
    esc[0] = 0;
    if (!n) { /* not UTF-8 */
        *cp = -1;
        snprintf(esc, CLI_QUOTE_MAX, "\\x%02x", p[0]);
        return 1;
    }
    static const unsigned char lead_mask[] = {0, 0x7f, 0x1f, 0x0f, 0x07};
    long v = p[0] & lead_mask[n];
    for (int i = 1; i < n; i++) v = v << 6 | (p[i] & 0x3f);
    *cp = v;
    if (v == '\\') snprintf(esc, CLI_QUOTE_MAX, "\\\\");
    else if (v < 0x20 || v == 0x7f) snprintf(esc, CLI_QUOTE_MAX, "\\x%02x", (unsigned)v);
    else if (quoted_point(v)) snprintf(esc, CLI_QUOTE_MAX, "\\u{%04x}", (unsigned)v);
    return (size_t)n;
}

/* The ring of quoted strings cli_safe returns: allocated, so a name of any
 * length is shown whole; the oldest is freed when its slot is reused. */
enum { QUOTE_RING = 8 };
static char *quote_ring[QUOTE_RING];
static unsigned quote_next;

static void quote_ring_free(void) {
    for (int i = 0; i < QUOTE_RING; i++) {
        free(quote_ring[i]);
        quote_ring[i] = NULL;
    }
}

/* Two passes over s[0..n): the length, then the text. A backslash stays
 * single in a line (its names are quoted already). */
static const char *quote_to_ring(const char *s, size_t n, bool line) {
    if (!s) s = "", n = 0;
    const char *end = s + n;
    size_t len = 0;
    char esc[CLI_QUOTE_MAX];
    long cp;
    for (const char *p = s; p < end && *p;) {
        size_t k = cli_quote_char(p, end, esc, &cp);
        len += esc[0] && !(line && cp == '\\') ? strlen(esc) : k;
        p += k;
    }
    char *b = malloc(len + 1), *w = b;
    if (!b) return "(not shown: out of memory)";
    for (const char *p = s; p < end && *p;) {
        size_t k = cli_quote_char(p, end, esc, &cp);
        if (esc[0] && !(line && cp == '\\')) w = stpcpy(w, esc);
        else w = (char *)memcpy(w, p, k) + k;
        p += k;
    }
    *w = 0;
    /* messages may come from the library's worker threads */
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static bool registered;
    pthread_mutex_lock(&mu);
    if (!registered) registered = atexit(quote_ring_free) == 0;
    unsigned slot = quote_next++ % QUOTE_RING;
    free(quote_ring[slot]);
    quote_ring[slot] = b;
    pthread_mutex_unlock(&mu);
    return b;
}

const char *cli_safe(const char *s) { return quote_to_ring(s, s ? strlen(s) : 0, false); }
const char *cli_safen(const char *s, size_t n) { return quote_to_ring(s, s ? strnlen(s, n) : 0, false); }
const char *cli_safe_line(const char *s) { return quote_to_ring(s, s ? strlen(s) : 0, true); }

int cli_lines_vadd(char ***v, size_t *n, const char *fmt, va_list ap) {
    char *b = NULL;
    if (vasprintf(&b, fmt, ap) < 0) return -1;
    char **w = realloc(*v, (*n + 1) * sizeof *w);
    if (!w) {
        free(b);
        return -1;
    }
    *v = w;
    w[(*n)++] = b;
    return 0;
}

int cli_lines_add(char ***v, size_t *n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = cli_lines_vadd(v, n, fmt, ap);
    va_end(ap);
    return rc;
}

/* Bytes at p of what must go through printf (0: none): what a name
 * shows escaped (cli_quote_char's one table) but the newline, which stays
 * inside the quotes, and the backslash, which quotes keep as it is. */
static int shell_escaped(const unsigned char *p, const unsigned char *end) {
    if (*p == '\n' || *p == '\\') return 0;
    char esc[CLI_QUOTE_MAX];
    long cp;
    size_t k = cli_quote_char((const char *)p, (const char *)end, esc, &cp);
    return esc[0] ? (int)k : 0;
}

/* One argument as a shell word that sh -c reads back byte for byte and a
 * terminal shows as text: as it is when it needs no quoting, else in
 * single quotes (a quote as \', a newline as itself). What a terminal
 * would act on or hide (C0 controls but the newline, DEL, C1 controls,
 * bidi and other invisible format characters, line separators, bytes that
 * are not UTF-8) goes outside the quotes as "$(printf '\ooo...')": POSIX
 * sh has no $'...', and a command substitution only strips newlines,
 * which stay inside the quotes. out NULL: only counts. */
static size_t shell_word(char *out, const char *s) {
    const unsigned char *p = (const unsigned char *)s, *end = p + strlen(s);
    size_t n = 0;
    bool inq = false, plain = p < end;
#define PUT(str, k) (out ? memcpy(out + n, (str), (k)) : NULL, n += (k))
#define QUOTE(want) ((inq) != (want) ? (PUT("'", 1), inq = (want)) : 0)
    for (const unsigned char *c = p; c < end && plain; c++)
        plain = strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%", *c) != NULL;
    if (plain) PUT(s, (size_t)(end - p));
    else if (p == end) PUT("''", 2);
    while (!plain && p < end) {
        int k = shell_escaped(p, end);
        if (k) {
            QUOTE(false);
            PUT("\"$(printf '", 11);
            for (; p < end && (k = shell_escaped(p, end)); p += k)
                for (int i = 0; i < k; i++) {
                    char oct[5];
                    snprintf(oct, sizeof oct, "\\%03o", p[i]);
                    PUT(oct, 4);
                }
            PUT("')\"", 3);
        } else if (*p == '\'') {
            QUOTE(false);
            PUT("\\'", 2);
            p++;
        } else {
            int w = dck_utf8_width(p, end);
            QUOTE(true);
            PUT(p, (size_t)w);
            p += w;
        }
    }
    QUOTE(false);
#undef PUT
#undef QUOTE
    if (out) out[n] = 0;
    return n;
}

char *cli_shell_join(char *const *argv, int n) {
    size_t len = 1;
    for (int i = 0; i < n; i++) len += shell_word(NULL, argv[i]) + 1;
    char *s = malloc(len), *p = s;
    if (!s) return NULL;
    *p = 0;
    for (int i = 0; i < n; i++) {
        if (i) *p++ = ' ';
        p += shell_word(p, argv[i]);
    }
    return s;
}

void cli_print_exclude_list(FILE *f, const char *const *globs, size_t n) {
    for (size_t g = 0; g < n; g++) fprintf(f, "%s'%s'", g ? ", " : "; left out by --exclude: ", cli_safe(globs[g]));
}

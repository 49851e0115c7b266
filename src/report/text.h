/* Text as every output shows it (text.c): names quoted by one table, and
 * growing arrays of lines. */
#ifndef DCK_REPORT_TEXT_H
#define DCK_REPORT_TEXT_H

#include <stdio.h>
#include <stdarg.h>
#include <stddef.h>

/* Names are data: a tensor, file, module, op or host
 * name, a value, a path: anything from a checkpoint, a recording or the
 * command line is shown whole, never cut, and quoted by one table in every
 * output (terminal, JSON, Markdown, JUnit, HTML), as git's core.quotePath
 * and ls --quoting-style=escape do, so that it can neither drive a terminal
 * or a page nor read as another name:
 *   a backslash                                       \\
 *   C0 controls, DEL, each byte that is not UTF-8     \xNN
 *   C1 controls (U+0080..U+009F: CSI, OSC...), bidi marks, embeddings,
 *   overrides and isolates (U+061C, U+200E/F, U+202A..E, U+2066..9), line
 *   and paragraph separators (U+2028/9), invisible format characters
 *   (U+200B..D, U+2060..4, U+FEFF) and noncharacters   \u{HHHH}
 * Everything else is itself. JSON keeps the name as data instead: the code
 * points above as JSON escapes \uHHHH (a parser reads the name back), bytes
 * that are not UTF-8 as the text \xNN (cli_json_text).
 *
 * The character at s (before end): the bytes it covers (1 for a byte that
 * is not UTF-8); esc receives its quoted text, or "" when it shows as
 * itself; *cp its code point, -1 for a byte that is not UTF-8. */
enum { CLI_QUOTE_MAX = 16 };
size_t cli_quote_char(const char *s, const char *end, char esc[CLI_QUOTE_MAX], long *cp);
/* s quoted as above, whole, for a terminal line or a message. Ring of eight
 * allocated strings (freed at exit): valid for the next seven calls. */
const char *cli_safe(const char *s);
/* the same, of the first n bytes of s */
const char *cli_safen(const char *s, size_t n);
/* A composed line (a message, a command line) whose names may be quoted
 * already: quoted as above except that backslashes stay single. Same ring. */
const char *cli_safe_line(const char *s);
/* "; left out by --exclude: 'A', 'B'" (nothing for n 0): how verify and
 * diff end the line that says what was compared. */
void cli_print_exclude_list(FILE *f, const char *const *globs, size_t n);
/* Appends the formatted line, whole, to the array *v of *n lines (both
 * grown; the caller frees each line and the array); -1 when out of
 * memory, nothing appended. */
int cli_lines_add(char ***v, size_t *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int cli_lines_vadd(char ***v, size_t *n, const char *fmt, va_list ap);

/* argv as one shell command line (each word quoted when it needs it), so
 * that a printed command runs as it reads; malloc'd, NULL when out of memory. */
char *cli_shell_join(char *const *argv, int n);

#endif

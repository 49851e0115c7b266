/* --json documents (json.c): every command's --json output. */
#ifndef DCK_REPORT_JSON_H
#define DCK_REPORT_JSON_H

#include "common/common.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* --json output: documents built with jansson, written by cli_json_print.
 * The builders keep a sticky failure: cli_jset and cli_jappend set *oom when
 * jansson could not allocate (the value is freed), and cli_json_print then
 * writes nothing. */
void cli_jset(json_t *obj, const char *key, json_t *value, bool *oom);
void cli_jappend(json_t *arr, json_t *value, bool *oom);
/* A string from a file, a path or a message: as it is when it is UTF-8
 * (which JSON must be), else each byte that is not as U+FFFD. */
json_t *cli_json_text(const char *s);
json_t *cli_json_str_or_null(const char *s); /* cli_json_text, or null for NULL */
/* A number as printf(fmt, v) writes it: a JSON integer when that text is
 * one, else a real with the text's value ("%.3f" of 0.9364 is 0.936); null
 * for NaN and infinities. */
json_t *cli_json_number(const char *fmt, double v);
/* An unsigned 64-bit integer, exact over the whole range. */
json_t *cli_json_u64(uint64_t v);
/* Writes doc and a newline to stdout and frees it: keys in insertion order,
 * reals with the fewest digits that read back as the same doubles. Styles:
 * COMPACT one line without blanks (train, bisect, resume-check); LINES one
 * line per top-level key and per record of an array of objects (diff: grep
 * finds a tensor's record on one line); INDENT jansson's indentation by 2
 * (verify). DCK_ERR_NOMEM (message set), writing nothing, when oom. */
typedef enum { CLI_JSON_COMPACT, CLI_JSON_LINES, CLI_JSON_INDENT } cli_json_style;
dck_status cli_json_print(json_t *doc, cli_json_style style, bool oom);

#endif

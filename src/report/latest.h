/* What detcheck latest says of dck_latest_find's result (latest.c): the
 * count of the skipped candidates by why, and its --json document. */
#ifndef DCK_REPORT_LATEST_H
#define DCK_REPORT_LATEST_H

#include "report/json.h"

#include <stdbool.h>
#include <stddef.h>

/* "4 candidates: 1 unsealed, 1 torn seal, 2 corrupt" (the judged ones, by
 * why, in the order of dck_latest_state) into buf. */
enum { CLI_LATEST_COUNTS_MAX = 512 };
void cli_latest_counts(const dck_latest_result *r, char *buf, size_t n);
/* latest --json: the directory, the chosen checkpoint (or null), each
 * skipped one with why, how many older ones were not judged, the entries
 * that are no candidates. */
json_t *cli_latest_json(const char *dir, bool verify, const dck_latest_result *r, bool *oom);

#endif

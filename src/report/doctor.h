/* What detcheck doctor prints of dck_doctor_probe's result (doctor.c): one
 * line per row, its facts and its reasons indented below; and its --json
 * document. */
#ifndef DCK_REPORT_DOCTOR_H
#define DCK_REPORT_DOCTOR_H

#include "report/json.h"

#include <stdbool.h>
#include <stdio.h>

void cli_doctor_print(FILE *out, const dck_doctor_result *r);
/* {"rows": [{"key", "name", "state", "version", "path", "from", "detail":
 * [lines], "why": [lines]}, ...]}: absent members are null, absent lists []. */
json_t *cli_doctor_json(const dck_doctor_result *r, bool *oom);

#endif

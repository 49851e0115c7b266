/* The newest sealed checkpoint of a directory (latest.c) and the step a
 * checkpoint's name says (latest_step.c); the API, dck_latest_*, is in
 * detcheck_static.h (detcheck-latest(1)). */
#ifndef DCK_RUNS_LATEST_H
#define DCK_RUNS_LATEST_H

#include "core/core.h"

/* The decimal digits s[0..n) (latest_step.c): 1 and *v, or 0 (none,
 * another character, a value beyond LLONG_MAX: no step rather than a
 * wrapped one). */
int dck_latest_digits(const char *s, size_t n, long long *v);

#endif

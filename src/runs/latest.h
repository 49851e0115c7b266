/* The newest sealed checkpoint of a directory (latest.c; the API,
 * dck_latest_*, in detcheck_static.h; detcheck-latest(1)). */
#ifndef DCK_RUNS_LATEST_H
#define DCK_RUNS_LATEST_H

#include "core/core.h"

#endif

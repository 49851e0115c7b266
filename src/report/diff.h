/* What diff says of its comparison (diff.c, man detcheck-diff(1)): the
 * table on the terminal and the --json document of a dck_diff_result. */
#ifndef DCK_REPORT_DIFF_H
#define DCK_REPORT_DIFF_H

#include "detcheck.h"

#include <stdbool.h>
#include <stddef.h>

/* How the result is shown: what the command line asked for. */
typedef struct {
    bool color;           /* ANSI colours in the table */
    bool layout_accepted; /* --accept-layout-state: the state set aside is accepted */
    const char *const *exclude; /* --exclude's globs, said with the verdict */
    size_t nexclude;
    int verbose; /* list equal tensors too */
    long top;    /* --top K: the K worst tensors (0: none) */
} cli_diff_render_opts;

/* The table of r (pa, pb: the two sides as given) on stdout. */
void cli_diff_print_table(const dck_diff_result *r, const char *pa, const char *pb, const dck_diff_tolerance *tol,
                          const cli_diff_render_opts *o);
/* The --json document of r on stdout; DCK_ERR_NOMEM (nothing written) or
 * a write error from cli_json_print. */
dck_status cli_diff_print_json(const dck_diff_result *r, const char *pa, const char *pb, const dck_diff_tolerance *tol,
                               const cli_diff_render_opts *o);

#endif

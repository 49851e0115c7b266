/* The runs page's model (html_runs_model.c builds it, html_runs.c draws
 * it): the two runs as dck_run_open read them, their steps paired, the
 * grid's groups of rows (one cell per column of steps) and where the runs
 * part first (dck_runs_compare's result). Private to the two files. */
#ifndef DCK_REPORT_HTML_RUNS_H
#define DCK_REPORT_HTML_RUNS_H

#include "report/html.h"
#include "runs/run.h"

#include <math.h>
#include <stdint.h>

enum {
    MAX_COLS = 200,          /* past this many steps a column holds several (>= 4 px each) */
    MAX_ROWS = 64,           /* rows of one group of the grid; the rest in a note */
    MAX_CKPTS = 1024,        /* common checkpoints compared */
    MAX_STEP_ROWS = 1000,    /* rows of the table of all steps */
    MAX_TENSORS = 100,       /* first differing tensors listed */
    MAX_POINT_MARKS = 60,    /* markers on the curves' points up to this many steps */
    MAX_DELTA_MARKS = 150,   /* the same for |A - B| (each with its title) */
    LABEL_CHARS = 34,        /* a row label past this is cut in the middle */
    MERGE_COLS = 12,         /* narrow cells of one state drawn as one rect, at most */
    NEAR_BEFORE = 3,         /* the table around the first difference */
    NEAR_AFTER = 6,
};

/* Geometry in CSS pixels: the page renders at device scale 1, and cells
 * and the line sit on whole pixels, so their colours are exact in a
 * screenshot (tests/cli/html_lib.sh). */
#define FIG_W 1040 /* fits a window 1,100 px wide */
#define GX0 220    /* left edge of the plots and the grid: row labels and ticks left of it */
#define PLOT_W 804 /* at most */
#define CURVE_H 100 /* a plot of both runs' values */
#define DELTA_H 120 /* a plot of |A - B|: a decade at least 10 px for 9 decades */

/* ------------------------------------------------------------------ what is drawn */

typedef struct {
    long step;
    const dck_traj_rec *a, *b; /* NULL: not recorded in that run */
} pair;

/* One cell of the grid: the steps of its column, folded. */
typedef struct {
    uint8_t mark;          /* the state that matters most (prio); CLI_MARK_COUNT: nothing compared */
    uint32_t ncmp, ndiff;  /* steps compared, of them differing */
    long first;            /* the first differing step, -1 */
    char *what;            /* what differs first there, or NULL */
} cell;

typedef struct {
    char *name;
    cell *cells;           /* one per column */
    long first;            /* the row's first differing step, -1 */
    /* the step being folded in (at), its state and what differs first */
    long at;
    int st, rank;
    const char *what, *kind, *how;
} row;

typedef struct {
    const char *title;
    row *rows;
    size_t n, cap;
    size_t *order;         /* row indices in display order: by name (dck_name_compare,
                            * then strcmp), the trajectory's in its fields' order */
    size_t *shown, nshown; /* what is drawn, in display order */
    long hidden_diff;      /* rows that differ and are not drawn */
} group;

typedef struct {
    int kind;              /* dck_rec_kind */
    const char *name, *how;
} tensor_diff;

typedef struct {
    const char *cmd;
    const cli_html_run *runs;
    const cli_html_unpaired *unpaired; /* the command's, or NULL */
    const dck_run *r[2];   /* runs[k].run */
    const dck_runs_result *res; /* NULL: not compared (a note says why) */
    bool oom;
    char **notes;
    size_t nnotes;
    /* the steps: every one either trajectory holds, and the columns */
    pair *pairs;
    size_t npairs;
    long smin, smax, bin;
    size_t ncols;
    int colw;
    group traj, rec, ckpt, trace;
    /* where the runs part: each part's first step (-1: none), as res has
     * them, and the first step one run recorded alone (lstep) */
    long tstep, rstep, cstep, estep, lstep, first;
    const char *twhat;     /* the trajectory's fields that differ */
    int rkind;
    const char *rname, *rhow;
    tensor_diff *rdiffs;   /* every tensor that differs at rstep */
    size_t nrdiffs, rdiffs_cap;
    const char *cname;     /* the first differing checkpoint's first tensor */
    const char *ckind, *cgroup;
    char **cdiffs;         /* its differing tensors (name (kind)) */
    size_t ncdiffs, ncdiffs_total, ncompared;
    const dck_runs_trace *td; /* the first differing traced event (estep >= 0) */
    char lwhat[64];        /* "recorded in run A only" */
} fig;

/* ------------------------------------------------------------------ shared helpers */

static inline int prio(int m) {
    switch (m) {
    case CLI_MARK_EQUAL: return 1;
    case CLI_MARK_MISSING: return 2;
    case CLI_MARK_DIFFERS: return 3;
    case CLI_MARK_NONFINITE: return 4;
    default: return 0;
    }
}

static inline bool is_diff(int m) { return prio(m) >= 2; }

/* In doubles: steps from files may lie far apart, and a long would overflow. */
static inline size_t col_of(const fig *F, long step) {
    size_t c = (size_t)(((double)step - (double)F->smin) / (double)F->bin);
    return c < F->ncols ? c : F->ncols - 1;
}

static inline bool both_rec(const fig *F) { return F->r[0]->has_rec && F->r[1]->has_rec; }
static inline bool both_trace(const fig *F) { return F->r[0]->has_trace && F->r[1]->has_trace; }

/* A float as the shortest decimal that reads back as its bits: two values
 * that differ in the last bit print differently. */
static inline const char *fnum(float v, char *buf, size_t n) {
    if (!isfinite(v)) return cli_html_num(v, buf, n);
    return dck_float_text(v, buf, n);
}

/* A note under the figure (what could not be read or drawn). */
void runs_note(fig *F, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A module: the tensor's name without its last component ("layers.0.weight"
 * is in "layers.0"); a name without a dot is its own. */
size_t runs_module_len(const char *name);
/* The module of a recorded tensor: an optimizer state is named after its
 * parameter ("layers.0.weight.exp_avg"), so it is in its parameter's. */
size_t runs_rec_module_len(const char *name, int kind);

/* Pairs both runs' steps, compares them step by step into F's groups and
 * takes the first differences of F->res; false when there is no step to
 * draw. Out of memory: F->oom. */
bool runs_build(fig *F);
void runs_release(fig *F);

#endif

/* canary's page (html.h) and its report cases: the job drawn as a grid
 * of hosts x devices, one cell per rank coloured and marked identical,
 * differs, failed or timed out, then the ranks that need attention and every
 * rank in tables.
 *
 * The grid must stay readable at a thousand ranks and more: 128 hosts of 8
 * GPUs are 128 rows, so the rows wrap into side-by-side blocks (each with
 * its host labels and device numbers) within a 1,200 px window, cells
 * shrink to 12 px when there are many, the domain every host shares is left
 * out of the labels, and a name still too long is cut in the middle with a
 * visible ellipsis (the head and tail tell nodes apart), the full name in
 * the label's tooltip and in the tables.
 *
 * A rank that timed out sent nothing, not even its host. Drawn in a row of
 * its own it would leave a hole where the dead device is and a stray cell
 * elsewhere, so it is placed where its neighbouring ranks say it runs when
 * they say it plainly: between two ranks of one host whose local ranks are
 * as far apart as their ranks (block placement), or at the end of the host
 * of the rank before it, or the start of the host after it, when that host
 * has fewer ranks than the others and the slot is free; its title says the
 * place is inferred. Any other timed-out rank goes to the rows "? no
 * report" at the end. */
#include "report/html.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ words */

/* "cpu:3", "cuda:5": as canary prints a device; kind "" is the CPU */
static void dev_text(char *b, size_t n, const char *kind, const dck_canary_rank *x) {
    snprintf(b, n, "%s:%d", kind && kind[0] ? kind : "cpu", x->gpu >= 0 ? x->gpu : x->local);
}

static int bit_index(uint32_t b) {
    for (int i = 0; i < 32; i++)
        if (b == (1u << i)) return i;
    return -1;
}

/* What differs, as canary's text line says it: "at step 3: grad.x, 1 of
 * 4096 elements differ, bits 0x00000008 (bit 3)" (and the pass of an
 * intermittent fault). */
static void differs_text(char *b, size_t n, const dck_canary_rank *x) {
    size_t k = (size_t)snprintf(b, n, "at step %ld: %s", x->step, x->tensor);
    if (x->has_detail && k < n) {
        k += (size_t)snprintf(b + k, n - k, ", %llu of %llu elements differ, bits 0x%08x",
                              (unsigned long long)x->ndiff, (unsigned long long)x->numel, x->bits);
        int bit = bit_index(x->bits);
        if (bit >= 0 && k < n) k += (size_t)snprintf(b + k, n - k, " (bit %d)", bit);
    }
    if (x->pass_diff && k < n)
        snprintf(b + k, n - k, "; pass %d of %d differed from the first at step %ld (%s)", x->pass_diff,
                 x->passes, x->pass_step, x->pass_tensor);
}

/* ------------------------------------------------------------------ the cases */

void cli_canary_report(cli_report *r, const dck_canary_report *rep, const char *kind, const char *preset) {
    char v[64];
    cli_report_title(r, "%d of %d devices identical%s", rep->identical, rep->nranks,
                     rep->no_majority ? "; no majority" : "");
    cli_report_property(r, "oracle", rep->oracle_text);
    snprintf(v, sizeof v, "%ld", rep->steps);
    cli_report_property(r, "steps", v);
    snprintf(v, sizeof v, "%d", rep->nranks);
    cli_report_property(r, "ranks", v);
    cli_report_property(r, "device", kind && kind[0] ? kind : "cpu");
    cli_report_property(r, "preset", preset);
    if (rep->final_root[0]) cli_report_property(r, "final root (oracle)", rep->final_root);
    if (rep->no_majority)
        cli_report_case(r, "detcheck.canary", "oracle", CLI_CASE_ERROR, "no majority",
                        "no majority: no group of identical ranks holds more than half, so no rank "
                        "could be judged",
                        NULL);
    for (int i = 0; rep->ranks && i < rep->nranks; i++) {
        const dck_canary_rank *x = &rep->ranks[i];
        char name[32], dev[32], what[768], msg[1400];
        snprintf(name, sizeof name, "rank %d", x->rank);
        dev_text(dev, sizeof dev, kind, x);
        switch (x->result) {
        case DCK_CANARY_SAME:
            if (rep->no_majority) {
                snprintf(msg, sizeof msg, "rank %d: %s %s undecided (same record as rank %d)", x->rank, x->host,
                         dev, x->group - 1);
                cli_report_case(r, "detcheck.canary", name, CLI_CASE_SKIPPED, NULL, msg, NULL);
            } else {
                cli_report_case(r, "detcheck.canary", name, CLI_CASE_PASS, NULL, NULL, NULL);
            }
            break;
        case DCK_CANARY_DIFFERS:
            differs_text(what, sizeof what, x);
            snprintf(msg, sizeof msg, "rank %d: %s %s (%s, %s) differs %s", x->rank, x->host, dev, x->device,
                     x->id, what);
            cli_report_case(r, "detcheck.canary", name, CLI_CASE_FAIL, "differs", msg, NULL);
            break;
        case DCK_CANARY_ERROR:
            snprintf(msg, sizeof msg, "rank %d: %s %s (%s, %s) failed: %s", x->rank, x->host, dev, x->device,
                     x->id, x->error);
            cli_report_case(r, "detcheck.canary", name, CLI_CASE_ERROR, "error", msg, NULL);
            break;
        default:
            snprintf(msg, sizeof msg, "rank %d: timed out: %s", x->rank, x->error);
            cli_report_case(r, "detcheck.canary", name, CLI_CASE_ERROR, "timeout", msg, NULL);
            break;
        }
    }
}

/* ------------------------------------------------------------------ the grid */

typedef struct {
    const char *host; /* NULL: the rows of ranks without a report */
    int first;        /* its first rank: the rows' order */
    int id;           /* while building: the row's index before that order */
    int last;         /* its last rank, for the label's tooltip */
    int n;            /* cells filled */
} grid_row;

typedef struct {
    int nrows, ncols;
    grid_row *rows;
    int *row, *col;  /* per rank; row -1: not placed */
    bool *inferred;  /* per rank: a timed-out rank placed by its neighbours */
    int *cell;       /* [nrows][ncols]: the rank there, -1 none */
    bool by_order;   /* columns are the order of the ranks on each host (local ranks unusable) */
    bool gpu_cols;   /* every rank's GPU is its local rank: the columns are GPUs */
    int unknown;     /* rows "? no report" */
} grid;

/* qsort_r: rank indices by host name, then rank */
static int by_host_rank(const void *a, const void *b, void *ctx) {
    const dck_canary_rank *rk = ctx, *x = &rk[*(const int *)a], *y = &rk[*(const int *)b];
    int c = strcmp(x->host, y->host);
    return c ? c : (x->rank > y->rank) - (x->rank < y->rank);
}

static int by_first(const void *a, const void *b) {
    const grid_row *x = a, *y = b;
    return (x->first > y->first) - (x->first < y->first);
}

static bool known(const dck_canary_rank *x) { return x->result != DCK_CANARY_TIMEOUT; }

/* Cells past this are not drawn: a job whose hosts hold wildly different
 * numbers of ranks would make a grid of mostly holes. */
enum { GRID_MAX_CELLS = 1 << 22 };

static void grid_release(grid *g) {
    free(g->rows);
    free(g->row);
    free(g->col);
    free(g->inferred);
    free(g->cell);
}

/* Fills the cells (nrows x ncols); false when two ranks claim one. */
static bool grid_fill(grid *g, const dck_canary_rank *rk, int K) {
    size_t cells = (size_t)g->nrows * (size_t)g->ncols;
    for (size_t i = 0; i < cells; i++) g->cell[i] = -1;
    for (int i = 0; i < K; i++) {
        if (g->row[i] < 0 || !known(&rk[i])) continue;
        int *c = &g->cell[(size_t)g->row[i] * (size_t)g->ncols + (size_t)g->col[i]];
        if (*c >= 0) return false;
        *c = i;
    }
    return true;
}

static bool slot_free(const grid *g, int row, int col) {
    return row >= 0 && row < g->nrows && col >= 0 && col < g->ncols &&
           g->cell[(size_t)row * (size_t)g->ncols + (size_t)col] < 0;
}

static void place(grid *g, int rank, int row, int col, bool inferred) {
    g->row[rank] = row;
    g->col[rank] = col;
    g->inferred[rank] = inferred;
    g->cell[(size_t)row * (size_t)g->ncols + (size_t)col] = rank;
    g->rows[row].n++;
    if (rank < g->rows[row].first) g->rows[row].first = rank;
    if (rank > g->rows[row].last) g->rows[row].last = rank;
}

/* 0, or -1 out of memory, or 1 too large to draw. */
static int grid_build(grid *g, const dck_canary_report *rep) {
    const dck_canary_rank *rk = rep->ranks;
    int K = rep->nranks;
    g->row = malloc(sizeof *g->row * (size_t)K);
    g->col = calloc((size_t)K, sizeof *g->col);
    g->inferred = calloc((size_t)K, sizeof *g->inferred);
    g->rows = calloc((size_t)K + 1, sizeof *g->rows);
    int *idx = malloc(sizeof *idx * (size_t)K), *to_row = malloc(sizeof *to_row * ((size_t)K + 1));
    if (!g->row || !g->col || !g->inferred || !g->rows || !idx || !to_row) {
        free(idx);
        free(to_row);
        return -1;
    }
    /* hosts: the reported ranks grouped by host name (sorted by name, then
     * rank), the rows in the order of each host's first rank */
    int nk = 0, unplaced = 0;
    for (int i = 0; i < K; i++) {
        g->row[i] = -1;
        if (known(&rk[i])) idx[nk++] = i;
        else unplaced++;
    }
    qsort_r(idx, (size_t)nk, sizeof *idx, by_host_rank, (void *)rk);
    for (int j = 0; j < nk; j++) {
        const dck_canary_rank *x = &rk[idx[j]];
        if (!j || strcmp(x->host, rk[idx[j - 1]].host))
            g->rows[g->nrows++] = (grid_row){x->host, idx[j], g->nrows, idx[j], 0};
        grid_row *w = &g->rows[g->nrows - 1];
        w->last = idx[j];
        g->row[idx[j]] = w->id;
        g->col[idx[j]] = w->n++; /* its place in its host's rank order */
    }
    qsort(g->rows, (size_t)g->nrows, sizeof *g->rows, by_first);
    int maxper = 1, maxlocal = 0;
    for (int h = 0; h < g->nrows; h++) {
        to_row[g->rows[h].id] = h;
        if (g->rows[h].n > maxper) maxper = g->rows[h].n;
        g->rows[h].n = 0; /* counted again as the cells are placed */
    }
    bool locals_ok = true;
    for (int j = 0; j < nk; j++) {
        const dck_canary_rank *x = &rk[idx[j]];
        g->row[idx[j]] = to_row[g->row[idx[j]]];
        if (x->local > maxlocal) maxlocal = x->local;
        if (x->local < 0) locals_ok = false;
    }
    free(idx);
    free(to_row);
    /* columns: the local rank when the launcher gave usable ones (one rank
     * per local index on each host, and not so sparse that most of the grid
     * would be holes), else the ranks' order on their host */
    locals_ok &= maxlocal < 2 * maxper;
    int wide = locals_ok && maxlocal + 1 > maxper ? maxlocal + 1 : maxper;
    /* at most a row of "? no report" per timed-out rank */
    if ((size_t)(g->nrows + unplaced) * (size_t)wide > GRID_MAX_CELLS) return 1;
    g->cell = malloc(sizeof *g->cell * (size_t)(g->nrows + unplaced) * (size_t)wide);
    if (!g->cell) return -1;
    if (locals_ok) {
        int *order = malloc(sizeof *order * (size_t)K);
        if (!order) return -1;
        memcpy(order, g->col, sizeof *order * (size_t)K);
        for (int i = 0; i < K; i++)
            if (known(&rk[i])) g->col[i] = rk[i].local;
        g->ncols = maxlocal + 1;
        if (!grid_fill(g, rk, K)) { /* two ranks on one local index */
            memcpy(g->col, order, sizeof *order * (size_t)K);
            locals_ok = false;
        }
        free(order);
    }
    if (!locals_ok) {
        g->ncols = maxper;
        grid_fill(g, rk, K); /* the order on a host is unique */
    }
    g->by_order = !locals_ok;
    g->gpu_cols = locals_ok;
    for (int i = 0; i < K; i++) {
        if (!known(&rk[i])) continue;
        g->gpu_cols &= rk[i].gpu == rk[i].local;
        g->rows[g->row[i]].n++;
    }
    /* timed-out ranks: where the neighbours say, when they say it plainly */
    for (int r = 0; r < K; r++) {
        if (known(&rk[r])) continue;
        int a = r - 1, b = r + 1;
        while (a >= 0 && !known(&rk[a])) a--;
        while (b < K && !known(&rk[b])) b++;
        bool ha = a >= 0, hb = b < K;
        if (ha && hb && g->row[a] == g->row[b]) {
            /* between two ranks of one host: there, if its local ranks run
             * as the ranks do (not so under a round-robin placement) */
            if (g->col[b] - g->col[a] == b - a && slot_free(g, g->row[a], g->col[a] + (r - a)))
                place(g, r, g->row[a], g->col[a] + (r - a), true);
        } else if (ha && g->rows[g->row[a]].n < maxper && slot_free(g, g->row[a], g->col[a] + (r - a))) {
            place(g, r, g->row[a], g->col[a] + (r - a), true); /* the end of the host before it */
        } else if (hb && g->rows[g->row[b]].n < maxper && slot_free(g, g->row[b], g->col[b] - (b - r))) {
            place(g, r, g->row[b], g->col[b] - (b - r), true); /* the start of the host after it */
        }
    }
    /* the rest: rows of their own, in rank order */
    int k = 0;
    for (int r = 0; r < K; r++) {
        if (g->row[r] >= 0) continue;
        if (k % g->ncols == 0) {
            g->rows[g->nrows] = (grid_row){NULL, r, g->nrows, r, 0};
            for (int c = 0; c < g->ncols; c++) g->cell[(size_t)g->nrows * (size_t)g->ncols + (size_t)c] = -1;
            g->nrows++;
            g->unknown++;
        }
        place(g, r, g->nrows - 1, k % g->ncols, false);
        k++;
    }
    return 0;
}

/* ------------------------------------------------------------------ drawing */

static cli_mark mark_of(const dck_canary_report *rep, const dck_canary_rank *x) {
    switch (x->result) {
    case DCK_CANARY_SAME: return rep->no_majority ? CLI_MARK_ABSENT : CLI_MARK_EQUAL;
    case DCK_CANARY_DIFFERS: return CLI_MARK_DIFFERS;
    case DCK_CANARY_ERROR: return CLI_MARK_FAILED;
    default: return CLI_MARK_TIMEOUT;
    }
}

static const char *state_word(const dck_canary_report *rep, const dck_canary_rank *x) {
    if (x->result == DCK_CANARY_SAME && rep->no_majority) return "undecided";
    return cli_marks[mark_of(rep, x)].word;
}

/* The domain every host name ends with (".cluster.example"), left out of
 * the labels so that they show what tells the hosts apart; 0 when none. */
static size_t common_suffix(const grid *g) {
    const char *suf = NULL;
    size_t n = 0;
    for (int h = 0; h < g->nrows; h++) {
        const char *host = g->rows[h].host;
        if (!host) continue;
        size_t len = strlen(host);
        if (!suf) {
            suf = strchr(host, '.');
            if (!suf) return 0;
            n = strlen(suf);
        }
        /* the longest ".x.y" of suf that host ends with, and not all of it */
        while (n && (len <= n || memcmp(host + len - n, suf + strlen(suf) - n, n))) {
            const char *next = memchr(suf + strlen(suf) - n + 1, '.', n - 1);
            n = next ? strlen(next) : 0;
        }
        if (!n) return 0;
    }
    return n;
}

/* A host's label: without the common suffix, at most max bytes, cut in the
 * middle with an ellipsis (U+2026) on character boundaries. */
enum { LABEL_MAX = 22 };
static void label_text(char *out, size_t n, const char *host, size_t strip, size_t max) {
    size_t len = strlen(host);
    len = len > strip ? len - strip : len;
    if (len <= max) {
        snprintf(out, n, "%.*s", (int)len, host);
        return;
    }
    size_t head = max / 2 - 1, tail = len - (max - head - 2);
    head = dck_utf8_back(host, head);
    tail = dck_utf8_forward(host, tail, len);
    snprintf(out, n, "%.*s\xe2\x80\xa6%.*s", (int)head, host, (int)(len - tail), host + tail);
}

/* Characters as the page shows them (quoted ones as their text: \xNN
 * takes four). */
static size_t shown_chars(const char *s) {
    size_t n = 0;
    const char *end = s + strlen(s);
    char esc[CLI_QUOTE_MAX];
    long cp;
    for (const char *p = s; p < end; n += esc[0] ? strlen(esc) : 1) p += cli_quote_char(p, end, esc, &cp);
    return n;
}

static void cell_title(char *b, size_t n, const dck_canary_report *rep, const grid *g, int i) {
    const dck_canary_rank *x = &rep->ranks[i];
    size_t k;
    if (!known(x)) {
        k = (size_t)snprintf(b, n, "rank %d: timed out: %s", x->rank, x->error);
        if (g->inferred[i] && k < n)
            snprintf(b + k, n - k, "; sent no host or device: placed on %s, local %d, by its neighbouring ranks",
                     g->rows[g->row[i]].host, g->col[i]);
        return;
    }
    k = (size_t)snprintf(b, n, "rank %d on %s, local %d, device %s, %s%s: %s", x->rank, x->host, x->local,
                         x->device, x->id[0] ? "bus id " : "", x->id[0] ? x->id : "no bus id",
                         state_word(rep, x));
    if (k >= n) return;
    if (x->result == DCK_CANARY_DIFFERS) {
        b[k++] = ' ';
        differs_text(b + k, n - k, x);
    } else if (x->result == DCK_CANARY_ERROR) {
        snprintf(b + k, n - k, ": %s", x->error);
    } else if (rep->no_majority) {
        snprintf(b + k, n - k, " (same record as rank %d)", x->group - 1);
    }
}

enum {
    MAX_W = 1150,   /* the figure's width budget (px): a 1,200 px window less the margins */
    BLOCK_GAP = 20, /* between blocks of rows */
    HEAD_H = 16,    /* the column numbers above each block */
};

static void draw_grid(FILE *f, const dck_canary_report *rep, const grid *g) {
    /* labels: shorter when the rows are many, to fit more blocks */
    size_t maxc = 3, strip = common_suffix(g), lmax = g->nrows > 128 ? 16 : LABEL_MAX;
    char lab[LABEL_MAX * 4 + 8];
    for (int h = 0; h < g->nrows; h++) {
        if (g->rows[h].host) label_text(lab, sizeof lab, g->rows[h].host, strip, lmax);
        else snprintf(lab, sizeof lab, "? no report");
        size_t c = shown_chars(lab);
        if (c > maxc) maxc = c;
    }
    /* big cells for a small job; 12 px ones from a few hundred ranks on;
     * narrower still only when a host has very many ranks */
    long cells = (long)g->nrows * g->ncols;
    int p = cells <= 64 ? 22 : cells <= 256 ? 18 : 14;
    /* label width: the longest label at DejaVu Sans' mean advance (6.5 px
     * a character at 10 px, 7 at 11 px) */
    int L = 10 + (int)(maxc * (p < 16 ? 6.5 : 7.0) + 0.5);
    if (L + g->ncols * p > MAX_W) p = (MAX_W - L) / g->ncols;
    if (p < 6) p = 6;
    int gap = p >= 10 ? 2 : 1, cs = p - gap;
    int bw = L + g->ncols * p;
    int nb = 1;
    if (g->nrows > 24) {
        int fit = (MAX_W + BLOCK_GAP) / (bw + BLOCK_GAP);
        int want = (g->nrows + 15) / 16;
        nb = fit < want ? fit : want;
        if (nb < 1) nb = 1;
    }
    int R = (g->nrows + nb - 1) / nb;
    nb = (g->nrows + R - 1) / R;
    int W = nb * bw + (nb - 1) * BLOCK_GAP, H = HEAD_H + R * p;
    /* every n-th column numbered, n so that the numbers do not touch */
    int digits = 1, every = 1;
    for (int c = g->ncols - 1; c >= 10; c /= 10) digits++;
    static const int steps[] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000};
    for (size_t s = 0; s < sizeof steps / sizeof steps[0]; s++)
        if ((every = steps[s]) * p >= digits * 7 + 3) break;
    const char *small = p < 16 ? " class=\"tick\"" : "";
    fprintf(f, "<svg width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" aria-label=\"%d ranks on "
               "%d hosts, coloured by result\">\n",
            W, H, W, H, rep->nranks, g->nrows - g->unknown);
    char title[1400];
    for (int b = 0; b < nb; b++) {
        int x0 = b * (bw + BLOCK_GAP);
        for (int c = 0; c < g->ncols; c += every)
            fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"tick\" text-anchor=\"middle\">%d</text>",
                    x0 + L + c * p + cs / 2, HEAD_H - 5, c);
        fputc('\n', f);
        for (int rr = 0; rr < R && b * R + rr < g->nrows; rr++) {
            int h = b * R + rr, y = HEAD_H + rr * p;
            const grid_row *w = &g->rows[h];
            if (w->host) label_text(lab, sizeof lab, w->host, strip, lmax);
            else snprintf(lab, sizeof lab, "? no report");
            fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\"%s><title>", x0 + L - 6, y + cs / 2 + 4, small);
            if (w->host) cli_html_textf(f, "%s: ranks %d to %d", w->host, w->first, w->last);
            else cli_html_textf(f, "timed out, host unknown: ranks %d to %d", w->first, w->last);
            fputs("</title>", f);
            cli_html_text(f, lab);
            fputs("</text>", f);
            for (int c = 0; c < g->ncols; c++) {
                int i = g->cell[(size_t)h * (size_t)g->ncols + (size_t)c];
                if (i < 0) continue;
                cell_title(title, sizeof title, rep, g, i);
                cli_svg_cell(f, x0 + L + c * p, y, cs, cs, mark_of(rep, &rep->ranks[i]), title);
            }
            fputc('\n', f);
        }
    }
    fputs("</svg>\n", f);
    int hosts = g->nrows - g->unknown;
    if (hosts == 1) fputs("<figcaption>A row for the host; columns: ", f);
    else fprintf(f, "<figcaption>Rows: the %d hosts in the order of their first rank%s; columns: ", hosts,
                 nb > 1 ? ", in blocks side by side" : "");
    fprintf(f, "%s. Each cell's tooltip names its rank, host, device and bus id; the tables below say the same.",
            g->by_order ? "the host's ranks in rank order (the launcher gave no usable local ranks)"
            : g->gpu_cols ? "the GPU index on the host (the local rank)"
                          : "the local rank on the host");
    if (strip) {
        const char *any = NULL;
        for (int h = 0; h < g->nrows && !any; h++) any = g->rows[h].host;
        fputs(" Host names are shown without the ending they all share, ", f);
        cli_html_text(f, any + strlen(any) - strip);
        fputs(".", f);
    }
    bool inferred = false;
    for (int i = 0; i < rep->nranks; i++) inferred |= g->inferred[i];
    if (inferred)
        fputs(" A rank that timed out sent no host: it is drawn where its neighbouring ranks place it "
              "(its tooltip says so).", f);
    if (g->unknown) fputs(" The rows \"? no report\" hold the timed-out ranks whose place is unknown.", f);
    fputs("</figcaption>\n", f);
}

/* ------------------------------------------------------------------ tables */

static void rank_row(FILE *f, const dck_canary_report *rep, const grid *g, int i) {
    const dck_canary_rank *x = &rep->ranks[i];
    char what[768];
    /* a host name and a bus id read as one word: not broken at their dashes */
    fprintf(f, "<tr><td class=\"n\">%d</td><td style=\"white-space:nowrap\">", x->rank);
    if (known(x)) cli_html_text(f, x->host);
    else fputs("?", f);
    if (known(x)) fprintf(f, "</td><td class=\"n\">%d</td><td class=\"n\">", x->local);
    else fputs("</td><td></td><td class=\"n\">", f);
    if (x->gpu >= 0) fprintf(f, "%d", x->gpu);
    fputs("</td><td class=\"name\">", f);
    if (known(x)) cli_html_text(f, x->device);
    fputs("</td><td style=\"white-space:nowrap\">", f);
    cli_html_text(f, x->id);
    fprintf(f, "</td><td>%s</td>", state_word(rep, x));
    if (x->result == DCK_CANARY_DIFFERS) {
        fprintf(f, "<td class=\"n\">%ld</td><td class=\"name\">", x->step);
        cli_html_text(f, x->tensor);
        fputs("</td><td class=\"msg\">", f);
        what[0] = 0;
        if (x->has_detail) {
            int bit = bit_index(x->bits);
            size_t k = (size_t)snprintf(what, sizeof what, "%llu of %llu elements differ, bits 0x%08x",
                                        (unsigned long long)x->ndiff, (unsigned long long)x->numel, x->bits);
            if (bit >= 0) snprintf(what + k, sizeof what - k, " (bit %d)", bit);
        }
        cli_html_text(f, what);
        if (x->pass_diff)
            cli_html_textf(f, "%spass %d of %d differed from the first at step %ld (%s)", what[0] ? "; " : "",
                           x->pass_diff, x->passes, x->pass_step, x->pass_tensor);
    } else {
        fputs("<td></td><td></td><td class=\"msg\">", f);
        if (x->result >= DCK_CANARY_ERROR) cli_html_text(f, x->error);
        if (g && g->inferred[i])
            cli_html_textf(f, "; sent no host: drawn on %s, local %d, where its neighbouring ranks place it",
                           g->rows[g->row[i]].host, g->col[i]);
        else if (rep->no_majority) fprintf(f, "same record as rank %d", x->group - 1);
        else if (x->passes > 1) fprintf(f, "%d passes", x->passes);
    }
    fputs("</td></tr>\n", f);
}

/* g: the grid drawn, or NULL */
static void rank_table(FILE *f, const dck_canary_report *rep, const grid *g, bool attention) {
    fputs("<table class=\"ranks\"><thead><tr><th>rank</th><th>host</th><th>local</th><th>GPU</th>"
          "<th>device</th><th>bus id / CPUs</th><th>result</th><th>first step</th><th>first tensor</th>"
          "<th>detail</th></tr></thead><tbody>\n",
          f);
    for (int i = 0; i < rep->nranks; i++) {
        const dck_canary_rank *x = &rep->ranks[i];
        if (attention && x->result == DCK_CANARY_SAME && !rep->no_majority) continue;
        rank_row(f, rep, g, i);
    }
    fputs("</tbody></table>\n", f);
}

/* ------------------------------------------------------------------ the figure */

/* Non-identical ranks named in the summary line; the table has them all. */
enum { SUMMARY_NAMED = 12 };

char *cli_html_canary_figure(const dck_canary_report *rep) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    int K = rep->ranks ? rep->nranks : 0;
    int n[5] = {0}; /* identical, differs, failed, timed out, undecided */
    for (int i = 0; i < K; i++) {
        const dck_canary_rank *x = &rep->ranks[i];
        n[x->result == DCK_CANARY_SAME && rep->no_majority ? 4 : x->result]++;
    }
    grid g = {0};
    int gs = K ? grid_build(&g, rep) : 1;
    if (gs < 0) {
        grid_release(&g);
        fclose(f);
        free(buf);
        return NULL;
    }
    fputs("<section class=\"canary\">\n<h2>Devices</h2>\n<p>", f);
    fprintf(f, "%d rank%s", K, K == 1 ? "" : "s");
    if (gs == 0) fprintf(f, " on %d host%s", g.nrows - g.unknown, g.nrows - g.unknown == 1 ? "" : "s");
    fprintf(f, ": <b>%d identical</b>, <b>%d differ%s</b>, <b>%d failed</b>, <b>%d timed out</b>", n[0], n[1],
            n[1] == 1 ? "s" : "", n[2], n[3]);
    if (n[4]) fprintf(f, ", <b>%d undecided</b>", n[4]);
    fputs(". Oracle: ", f);
    cli_html_text(f, rep->oracle_text);
    fprintf(f, "; %ld step%s.", rep->steps, rep->steps == 1 ? "" : "s");
    if (rep->no_majority)
        fputs(" <b>No majority</b>: no group of identical ranks holds more than half, so no rank could "
              "be judged; white cells are the undecided ranks.",
              f);
    fputs("</p>\n", f);
    int bad = n[1] + n[2] + n[3];
    if (bad) {
        fputs("<p>Not identical: ", f);
        int named = 0;
        for (int i = 0; i < K && named < SUMMARY_NAMED; i++) {
            const dck_canary_rank *x = &rep->ranks[i];
            if (x->result == DCK_CANARY_SAME) continue;
            fprintf(f, "%s<b>rank %d</b> ", named ? "; " : "", x->rank);
            if (known(x)) {
                fputs("(", f);
                cli_html_text(f, x->host);
                fprintf(f, ", local %d", x->local);
                if (x->gpu >= 0) fprintf(f, ", GPU %d", x->gpu);
                if (x->id[0]) {
                    fputs(", ", f);
                    cli_html_text(f, x->id);
                }
                fputs(") ", f);
            }
            if (x->result == DCK_CANARY_DIFFERS) {
                fprintf(f, "differs at step %ld: ", x->step);
                cli_html_text(f, x->tensor);
            } else {
                fputs(x->result == DCK_CANARY_ERROR ? "failed: " : "timed out: ", f);
                cli_html_text(f, x->error);
            }
            named++;
        }
        if (bad > named) fprintf(f, "; and %d more (the table below)", bad - named);
        fputs(".</p>\n", f);
    }
    unsigned mask = 1u << CLI_MARK_EQUAL | 1u << CLI_MARK_DIFFERS | 1u << CLI_MARK_FAILED | 1u << CLI_MARK_TIMEOUT;
    if (n[4]) mask |= 1u << CLI_MARK_ABSENT;
    cli_html_legend(f, mask);
    if (gs == 0) {
        fputs("<figure class=\"grid\">\n", f);
        draw_grid(f, rep, &g);
        fputs("</figure>\n", f);
    } else if (K) {
        fprintf(f, "<p class=\"note\">The grid is not drawn: the hosts hold so different numbers of ranks that "
                   "it would take more than %d cells; the tables list every rank.</p>\n",
                GRID_MAX_CELLS);
    }
    if (K && (bad || n[4])) {
        fprintf(f, "<h3>Ranks that are not identical (%d)</h3>\n", bad + n[4]);
        rank_table(f, rep, gs == 0 ? &g : NULL, true);
    }
    if (K) {
        fprintf(f, "<details><summary>All ranks (%d)</summary>\n", K);
        rank_table(f, rep, gs == 0 ? &g : NULL, false);
        fputs("</details>\n", f);
    }
    fputs("</section>\n", f);
    grid_release(&g);
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

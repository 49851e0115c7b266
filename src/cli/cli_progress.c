/* Progress on stderr for the long commands: hash, verify and diff pass
 * cli_progress to the library as its progress callback (dck_options and
 * dck_diff_options: the library never prints, it reports bytes done and
 * the total from the calling thread), resume-check reports trainer steps
 * with cli_progress_steps. One line, redrawn in place:
 *
 *   [#########...........]  42%  1.2 GiB / 2.9 GiB  310 MiB/s  ETA 0:05
 *
 * Only when stderr is a terminal, never with -q (cli_quiet) nor on MPI
 * ranks other than 0, so logs and pipes never see carriage returns. The bar
 * is coloured only when stderr is a terminal and NO_COLOR is unset or empty
 * (https://no-color.org) and TERM is not "dumb". A message (cli_error,
 * cli_info...) clears the line first; the next report draws it again. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Who prints at all (cli.h): here rather than in cli_util.c, whose
 * messages rub the progress line out first, so that the dependency runs one
 * way (cli_util -> cli_progress), as ci/layers.py wants within a layer. */
int cli_rank = 0;
bool cli_quiet = false;

/* Redraws at most this often (the last report always draws). */
#define REDRAW_NS 100000000LL
/* Rate and ETA of bytes are shown once this much time has passed: an
 * earlier rate is noise (steps come after whole runs: shown at once). */
#define RATE_AFTER_S 0.25

static struct {
    bool started;      /* a run of reports is under way (t0 valid) */
    int shown;         /* columns on screen now; 0: nothing shown */
    struct timespec t0;
    long long last_ns; /* since t0, of the last draw */
} P;

static double since(const struct timespec *t0, long long *ns_out) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    long long ns = (long long)(t.tv_sec - t0->tv_sec) * 1000000000LL + (t.tv_nsec - t0->tv_nsec);
    if (ns_out) *ns_out = ns;
    return (double)ns * 1e-9;
}

bool cli_progress_enabled(void) { return !cli_quiet && cli_rank == 0 && isatty(2); }

bool cli_color_stderr(void) {
    const char *nc = getenv("NO_COLOR"), *term = getenv("TERM");
    return isatty(2) && !(nc && *nc) && !(term && !strcmp(term, "dumb"));
}

static void fmt_bytes(char *b, size_t n, double v) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    while (v >= 1024 && u < 5) {
        v /= 1024;
        u++;
    }
    snprintf(b, n, u ? "%.1f %s" : "%.0f %s", v, units[u]);
}

static void fmt_count(char *b, size_t n, double v, bool bytes) {
    if (bytes) fmt_bytes(b, n, v);
    else snprintf(b, n, "%.0f", v);
}

static void fmt_eta(char *b, size_t n, double s) {
    if (s > 359999) s = 359999;
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(b, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(b, n, "%ld:%02ld", t / 60, t % 60);
}

static void draw(uint64_t done, uint64_t total, bool bytes) {
    if (!cli_progress_enabled() || total == 0) return;
    if (done > total) done = total;
    if (!P.started) {
        clock_gettime(CLOCK_MONOTONIC, &P.t0);
        P.started = true;
        P.last_ns = -REDRAW_NS;
    }
    long long ns;
    double secs = since(&P.t0, &ns);
    if (done < total && P.shown && ns - P.last_ns < REDRAW_NS) return;
    P.last_ns = ns;
    int pct = (int)((double)done * 100.0 / (double)total);
    int fill = pct / 5;
    char d[32], t[32], rate[48] = "", eta[48] = "";
    fmt_count(d, sizeof d, (double)done, bytes);
    fmt_count(t, sizeof t, (double)total, bytes);
    if (done == total) {
        snprintf(eta, sizeof eta, "  ETA 0:00");
    }
    if ((secs >= RATE_AFTER_S || (!bytes && secs > 0)) && done > 0) {
        double per_s = (double)done / secs;
        char r[32], e[24];
        if (bytes) {
            fmt_bytes(r, sizeof r, per_s);
            snprintf(rate, sizeof rate, "  %s/s", r);
        } else {
            snprintf(rate, sizeof rate, "  %.2f steps/s", per_s);
        }
        fmt_eta(e, sizeof e, (double)(total - done) / per_s);
        snprintf(eta, sizeof eta, "  ETA %s", e);
    } else if (done < total) {
        snprintf(eta, sizeof eta, "  ETA --");
    }
    bool color = cli_color_stderr();
    char line[256];
    /* the bar, then the figures; colour codes stay out of the width count */
    int w = snprintf(line, sizeof line, "[%.*s%*s] %3d%%  %s / %s%s%s%s", fill, "####################",
                     20 - fill, "", pct, d, t, bytes ? "" : " steps", rate, eta);
    if (w < 0) return;
    if (w >= (int)sizeof line) w = (int)sizeof line - 1;
    fputc('\r', stderr);
    if (color) fprintf(stderr, "[\033[32m%.*s\033[0m%s", fill, "####################", line + 1 + fill);
    else fputs(line, stderr);
    if (P.shown > w) fprintf(stderr, "%*s", P.shown - w, ""); /* rub out a longer line */
    P.shown = w > P.shown ? w : P.shown;
    fflush(stderr);
}

void cli_progress(void *ctx, uint64_t done, uint64_t total) {
    (void)ctx;
    draw(done, total, true);
}

void cli_progress_steps(uint64_t done, uint64_t total) { draw(done, total, false); }

void cli_progress_clear(void) {
    if (P.shown) {
        fprintf(stderr, "\r%*s\r", P.shown, "");
        fflush(stderr);
        P.shown = 0;
    }
}

void cli_progress_end(void) {
    cli_progress_clear();
    P.started = false;
}

/* detcheck latest: the newest checkpoint of a directory that is sealed
 * (and with --verify, whose files match its seal), for requeue scripts.
 * Exit 0 found (its path on stdout), 1 none qualifies, 2 trouble. */
#include "cli.h"
#include "report/latest.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static const char latest_help[] =
    "usage: detcheck latest [--verify] [--json] [--threads N] [-q] DIR\n"
    "\n"
    "Prints DIR/NAME, the newest checkpoint in DIR by the step its name says\n"
    "(step_N, step-N, iter_NNNNNNN, global_stepN, checkpoint-N, Lightning's\n"
    "...step=N....ckpt: detcheck-latest(1)) whose seal loads and is its own.\n"
    "Each newer one that does not qualify is named on stderr with why: unsealed,\n"
    "torn seal, not a seal, seal of another step, a symbolic link (not followed);\n"
    "with --verify also corrupt (its files differ from its seal) or unreadable.\n"
    "For requeue scripts: CKPT=$(detcheck latest --verify /ckpts) && ...\n"
    "\n"
    "Options:\n"
    "      --verify       also hash each candidate's files and compare them with\n"
    "                     its seal, as detcheck verify --seal does\n"
    "      --json         a JSON document on stdout instead of the path: the chosen\n"
    "                     checkpoint and each one skipped, with why\n"
    "  -t, --threads N    worker threads for hashing (--verify)\n"
    "  -q, --quiet        nothing on stderr but errors (the path is still printed)\n"
    "  -h, --help         this help\n"
    "\n"
    "Exit status: 0 found, 1 none qualifies, 2 trouble (DIR missing, not a\n"
    "directory, unreadable).\n";

static void say_skipped(void *ctx, const dck_latest_entry *e) {
    (void)ctx;
    if (e->state != DCK_LATEST_CHOSEN) cli_info("latest", "%s: skipped: %s", cli_safe(e->path), e->why);
}

/* The entries that are no candidates, named rather than set aside in
 * silence: a newer checkpoint in a layout of no row would be one of them. */
static void print_others(const char *dir, const dck_latest_result *r) {
    enum { SHOWN = 5 };
    char *list = NULL;
    size_t len = 0;
    FILE *f = r->nothers ? open_memstream(&list, &len) : NULL;
    if (!f) return;
    for (size_t i = 0; i < r->nothers && i < SHOWN; i++) fprintf(f, "%s%s", i ? ", " : "", cli_safe(r->others[i]));
    if (r->nothers > SHOWN) fprintf(f, ", %zu more (--json lists them)", r->nothers - SHOWN);
    if (fclose(f) == 0)
        cli_info("latest", "note: %zu entr%s of %s name%s no step (no candidate%s): %s", r->nothers,
                 r->nothers == 1 ? "y" : "ies", cli_safe(dir), r->nothers == 1 ? "s" : "", r->nothers == 1 ? "" : "s",
                 list);
    free(list);
}

int cmd_latest(int argc, char **argv) {
    enum { OPT_VERIFY = 0x2000 };
    static const struct option opts[] = {{"verify", no_argument, NULL, OPT_VERIFY}, {NULL, 0, NULL, 0}};
    dck_options o;
    dck_options_init(&o);
    o.megatron_merge = 1; /* as verify and seal read a legacy Megatron tree: one model */
    int verify = 0;
    cli_shared sh = {.cmd = "latest", .help_text = latest_help, .threads = &o.threads, .threads_max = 1024,
                     .threads_want = "an integer 1..1024"};
    optind = 1;
    opterr = 0;
    int c;
    while ((c = cli_getopt(argc, argv, "", opts, &sh)) != -1) {
        switch (c) {
        case CLI_STOP: return sh.exit;
        case OPT_VERIFY: verify = 1; break;
        default: return cli_usage_error("latest", "unknown or incomplete option '%s'", argv[optind - 1]);
        }
    }
    if (optind >= argc) return cli_usage_error("latest", "no DIR given");
    if (argc - optind > 1) return cli_usage_error("latest", "one DIR only, not also '%s'", argv[optind + 1]);
    const char *dir = argv[optind];
    o.progress = cli_progress;
    o.notice = cli_notice; /* files a reader skips in a checkpoint (--verify) */
    o.notice_ctx = (void *)"latest";
    dck_latest_result r;
    dck_status s = dck_latest_find(dir, verify, &o, say_skipped, NULL, &r);
    cli_progress_end();
    if (s) {
        dck_latest_result_release(&r);
        return cli_fail("latest", s);
    }
    int rc = r.chosen >= 0 ? DCK_EXIT_SAME : DCK_EXIT_DIFFERENT;
    print_others(dir, &r);
    if (sh.json) {
        bool oom = false;
        if ((s = cli_json_print(cli_latest_json(dir, verify, &r, &oom), CLI_JSON_INDENT, oom))) rc = cli_fail("latest", s);
    } else if (r.chosen >= 0) {
        /* the path as it is for $(...); quoted only for a person's terminal */
        const char *path = r.entries[r.chosen].path;
        printf("%s\n", isatty(STDOUT_FILENO) ? cli_safe(path) : path);
    }
    if (r.chosen < 0 && r.n) {
        char counts[CLI_LATEST_COUNTS_MAX];
        cli_latest_counts(&r, counts, sizeof counts);
        cli_info("latest", "no checkpoint in %s qualifies (%s%s)", cli_safe(dir), counts,
                 verify ? "" : "; --verify not given: files not read");
    } else if (r.chosen < 0) {
        cli_info("latest", "no checkpoint in %s: no entry names a step (layouts: detcheck-latest(1))", cli_safe(dir));
    }
    dck_latest_result_release(&r);
    return rc;
}

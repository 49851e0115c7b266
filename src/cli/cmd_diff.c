/* detcheck diff: compare two checkpoints (or manifests) layer by layer.
 * The library computes (dck_diff_*) and report/diff.c prints the table or
 * the JSON document; this file parses flags and chooses the output. */
#include "cli.h"
#include "report/diff.h"
#include "report/html.h"
#include "report/report.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const CMD = "diff";

static const char diff_help[] =
    "usage: detcheck diff [OPTIONS] A B\n"
    "\n"
    "Compares two checkpoints tensor by tensor (as logical tensors, by name,\n"
    "whatever their formats or sharding). Tensors whose bytes are equal are\n"
    "reported equal; the others element by element: count of differing elements,\n"
    "max abs/rel difference, max ULP distance on the dtype's grid, first differing\n"
    "index, NaN/Inf counts, relative L2 norm. With a manifest on either side only\n"
    "digests are compared.\n"
    "\n"
    "Options:\n"
    "  --atol X        within tolerance when |a-b| <= X + rtol*max(|a|,|b|)\n"
    "  --rtol Y        relative tolerance (with or without --atol)\n"
    "  --ulp N         within tolerance when at most N ULPs apart\n"
    "                  (a pair passes when it meets any tolerance given;\n"
    "                  NaN and infinity differences never do)\n"
    "  --group G       only tensors of group G: weights, optimizer, rng, other\n"
    "                  (repeatable, or comma-separated)\n"
    "  --exclude GLOB  leave out tensors and values whose names match GLOB\n"
    "                  (fnmatch(3); repeatable)\n"
    "  --ignore-aliases  leave out a tensor on one side only that shares storage\n"
    "                  with another of its side (a tied weight torch.save wrote)\n"
    "  --require-rank-state  compare layout state (per-rank RNG, layout sizes)\n"
    "                  even when the layouts differ; by default it is listed\n"
    "                  and not compared then, and the result is not equal\n"
    "                  (see detcheck-formats(7))\n"
    "  --accept-layout-state  accept the layout state set aside: listed, not\n"
    "                  compared, and no obstacle to 'equal'\n"
    "  --top K         also list the K worst tensors by max ULP\n"
    "  -v, --verbose   list equal tensors too\n"
    "  --json          print a JSON document instead of the table\n"
    "  --junit FILE    also a JUnit XML report (a test case per tensor) for CI\n"
    "  --markdown FILE also a Markdown summary ('-': stdout)\n"
    "  --html FILE     also a self-contained HTML page (picture + tables)\n"
    "  --color WHEN    auto (default), always, never\n"
    "  -t, --threads N worker threads (default: online CPUs); no result\n"
    "                  depends on it\n"
    "  --iteration N   Megatron-LM checkpoint roots: read iter_N instead of\n"
    "                  the latest iteration (both sides)\n"
    "  --tp-split GLOB=DIM  legacy Megatron-LM trees (merged into the unsplit\n"
    "                  model's tensors): split rule for tensor-parallel ranks\n"
    "                  ('none': replicated); repeatable (see detcheck-formats(7))\n"
    "  --megatron-per-rank  legacy Megatron-LM trees: name tensors by rank\n"
    "                  directory, as saved\n"
    "  --megatron-merge  merge them (the default)\n"
    "  -q, --quiet     no progress bar\n"
    "  -h, --help      this help\n"
    "\n"
    "Exit status: 0 equal (or every difference within the tolerances),\n"
    "1 different, 2 trouble. See detcheck-diff(1).\n";

/* ------------------------------------------------------------------ main */

static int parse_groups(const char *arg, unsigned *mask) {
    char buf[256];
    if (strlen(arg) >= sizeof buf) return 0;
    snprintf(buf, sizeof buf, "%s", arg);
    int n = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save), n++) {
        dck_group g;
        if (dck_group_from_name(tok, &g) != DCK_OK) return 0;
        *mask |= 1u << g;
    }
    return n > 0;
}

int cmd_diff(int argc, char **argv) {
    enum { OPT_ATOL = 256, OPT_RTOL, OPT_ULP, OPT_TOP, OPT_GROUP, OPT_COLOR };
    static const struct option longopts[] = {
        {"atol", required_argument, 0, OPT_ATOL},   {"rtol", required_argument, 0, OPT_RTOL},
        {"ulp", required_argument, 0, OPT_ULP},     {"top", required_argument, 0, OPT_TOP},
        {"group", required_argument, 0, OPT_GROUP}, {"color", required_argument, 0, OPT_COLOR},
        {"verbose", no_argument, 0, 'v'},           CLI_REPORT_LONGOPTS, {0, 0, 0, 0}};
    cli_report rep;
    cli_report_init(&rep, CMD);
    dck_diff_options opt;
    dck_diff_options_init(&opt);
    dck_options ropt; /* how checkpoints are read (Megatron) */
    dck_options_init(&ropt);
    ropt.megatron_merge = 1; /* legacy Megatron trees as one model unless --megatron-per-rank */
    opt.open_options = &ropt;
    cli_shared sh = {.cmd = CMD, .help_text = diff_help, .read = &ropt, .threads = &opt.threads,
                     .threads_max = 4096, .threads_want = "a count >= 1", .filters = true};
    int verbose = 0, color = -1;
    long top = 0;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = cli_getopt(argc, argv, ":vj:", longopts, &sh)) != -1) {
        long v;
        double d;
        switch (c) {
        case CLI_STOP: return sh.exit;
        case OPT_ATOL:
        case OPT_RTOL:
            if (!cli_parse_double(optarg, &d) || d < 0 || isinf(d))
                return cli_usage_error(CMD, "--%s wants a finite number >= 0, not '%s'",
                                       c == OPT_ATOL ? "atol" : "rtol", optarg);
            if (c == OPT_ATOL) opt.tol.atol = d;
            else opt.tol.rtol = d;
            break;
        case OPT_ULP:
            if (!cli_parse_long(optarg, 0, INT64_MAX, &v))
                return cli_usage_error(CMD, "--ulp wants an integer >= 0, not '%s'", optarg);
            opt.tol.ulp = v;
            break;
        case OPT_TOP:
            if (!cli_parse_long(optarg, 1, 1000000, &v))
                return cli_usage_error(CMD, "--top wants a count >= 1, not '%s'", optarg);
            top = v;
            break;
        case OPT_GROUP:
            if (!parse_groups(optarg, &opt.groups))
                return cli_usage_error(CMD,
                                       "--group wants weights, optimizer, rng or other, not '%s'",
                                       optarg);
            break;
        case OPT_COLOR:
            if (!strcmp(optarg, "auto")) color = -1;
            else if (!strcmp(optarg, "always")) color = 1;
            else if (!strcmp(optarg, "never")) color = 0;
            else return cli_usage_error(CMD, "--color wants auto, always or never, not '%s'", optarg);
            break;
        case 'v': verbose = 1; break;
        case CLI_OPT_JUNIT:
        case CLI_OPT_MARKDOWN:
        case CLI_OPT_HTML: cli_report_option(&rep, c, optarg); break;
        case 'j': /* make(1) habit: -j N is --threads N */
            if (cli_shared_option(&sh, 't', optarg) < 0) return DCK_EXIT_TROUBLE;
            break;
        case ':': return cli_usage_error(CMD, "option '%s' needs a value", argv[optind - 1]);
        default: return cli_usage_error(CMD, "unknown option '%s'", argv[optind - 1]);
        }
    }
    int json = sh.json;
    if (argc - optind != 2)
        return cli_usage_error(CMD, "wants two checkpoints or manifests, A and B (got %d)",
                               argc - optind);
    if (cli_check_megatron(CMD, &ropt)) return DCK_EXIT_TROUBLE;
    if (cli_report_check(&rep, json, (const char *const *)argv + optind, 2)) return DCK_EXIT_TROUBLE;
    opt.exclude = sh.exclude;
    opt.nexclude = sh.nexclude;
    opt.ignore_aliases = sh.ignore_aliases;
    opt.require_rank_state = sh.require_rank_state;
    opt.accept_layout_state = sh.accept_layout_state;
    ropt.notice = cli_notice; /* files skipped, safetensors preferred, names namespaced */
    ropt.notice_ctx = (void *)CMD;
    const char *pa = argv[optind], *pb = argv[optind + 1];
    cli_diff_render_opts ro = {.color = !json && (color == 1 || (color == -1 && cli_color())),
                               .layout_accepted = sh.accept_layout_state,
                               .exclude = sh.exclude, .nexclude = sh.nexclude,
                               .verbose = verbose, .top = top};
    if (!json) {
        opt.progress = cli_progress;
        opt.progress_ctx = NULL;
    }
    dck_diff_result r;
    dck_status s = dck_diff_paths(pa, pb, &opt, &r);
    cli_progress_end();
    if (s != DCK_OK) return cli_fail(CMD, s);
    int trouble = 0;
    if (json) {
        dck_status js = cli_diff_print_json(&r, pa, pb, &opt.tol, &ro);
        if (js) trouble = cli_fail(CMD, js);
    } else cli_diff_print_table(&r, pa, pb, &opt.tol, &ro);
    if (r.digest_only && dck_diff_tolerance_given(&opt.tol) && json)
        cli_warn(CMD, "tolerances need element statistics; a manifest holds digests only");
    int rc = trouble ? trouble : r.ok ? DCK_EXIT_SAME : DCK_EXIT_DIFFERENT;
    fflush(stdout);
    if (ferror(stdout)) {
        cli_error(CMD, "cannot write the report to stdout");
        rc = DCK_EXIT_TROUBLE;
    }
    if (cli_report_wanted(&rep)) {
        cli_report_property(&rep, "a", pa);
        cli_report_property(&rep, "b", pb);
        cli_report_title(&rep, "%zu of %zu tensors differ%s", r.ntensors - r.count[DCK_DIFF_EQUAL],
                         r.ntensors, r.ok && !r.equal ? " (all within the tolerances)" : "");
        cli_report_diff(&rep, &r);
        if (rep.html) cli_report_figure(&rep, cli_html_diff_figure(&r, pa, pb));
        int e = cli_report_finish(&rep, rc);
        if (e) rc = e;
    }
    dck_diff_result_release(&r);
    return rc;
}

/* The options hash, verify and diff share: one table (cli_shared_options),
 * one parser (cli_getopt / cli_shared_option). Each command keeps its own
 * options, help text and messages for unknown options. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

static const struct option shared[] = {
    {"threads", required_argument, NULL, 't'},
    {"quiet", no_argument, NULL, 'q'},
    {"help", no_argument, NULL, 'h'},
    {"json", no_argument, NULL, CLI_OPT_JSON},
    {"iteration", required_argument, NULL, CLI_OPT_ITERATION},
    {"megatron-merge", no_argument, NULL, CLI_OPT_MEGATRON_MERGE},
    {"megatron-per-rank", no_argument, NULL, CLI_OPT_MEGATRON_PER_RANK},
    {"tp-split", required_argument, NULL, CLI_OPT_TP_SPLIT},
    {"exclude", required_argument, NULL, CLI_OPT_EXCLUDE},
    {"ignore-aliases", no_argument, NULL, CLI_OPT_IGNORE_ALIASES},
    {"require-rank-state", no_argument, NULL, CLI_OPT_REQUIRE_RANK_STATE},
    {"accept-layout-state", no_argument, NULL, CLI_OPT_ACCEPT_LAYOUT_STATE},
};
#define NSHARED (sizeof shared / sizeof shared[0])
static const char shared_short[] = "t:qh";

int cli_add_tp_split(const char *cmd, dck_options *o, const char *rule) {
    /* one command per process: the rules live until exit */
    static const char **rules;
    static size_t cap;
    if (o->ntp_split_rules == cap) {
        size_t ncap = cap ? cap * 2 : 8;
        const char **p = realloc(rules, ncap * sizeof *p);
        if (!p) {
            cli_error(cmd, "out of memory");
            return DCK_EXIT_TROUBLE;
        }
        rules = p;
        cap = ncap;
    }
    if (!strchr(rule, '='))
        return cli_usage_error(cmd, "--tp-split wants GLOB=DIM (DIM a dimension number or 'none'), not '%s'", rule);
    rules[o->ntp_split_rules++] = rule;
    o->tp_split_rules = rules;
    return 0;
}

int cli_check_megatron(const char *cmd, const dck_options *o) {
    if (o->ntp_split_rules && !o->megatron_merge)
        return cli_usage_error(cmd, "--tp-split applies to merged rank directories: not with --megatron-per-rank");
    return 0;
}

int cli_shared_option(cli_shared *sh, int code, const char *arg) {
    long v;
    switch (code) {
    case 't':
        if (!cli_parse_long(arg, 1, sh->threads_max, &v)) {
            cli_usage_error(sh->cmd, "--threads wants %s, not '%s'", sh->threads_want, arg);
            return -1;
        }
        *sh->threads = (int)v;
        return 1;
    case 'q': cli_quiet = true; return 1;
    case 'h': sh->help = true; return 1;
    case CLI_OPT_JSON: sh->json = true; return 1;
    case CLI_OPT_ITERATION: /* Megatron checkpoint roots: which iter_N directory */
        if (!cli_parse_long(arg, 0, 999999999, &v)) {
            cli_usage_error(sh->cmd, "--iteration wants an integer 0..999999999, not '%s'", arg);
            return -1;
        }
        sh->read->iteration = v;
        return 1;
    /* the default: a Megatron user compares models, not rank directories */
    case CLI_OPT_MEGATRON_MERGE: sh->read->megatron_merge = 1; return 1;
    case CLI_OPT_MEGATRON_PER_RANK: sh->read->megatron_merge = 0; return 1;
    case CLI_OPT_TP_SPLIT: return cli_add_tp_split(sh->cmd, sh->read, arg) ? -1 : 1;
    case CLI_OPT_EXCLUDE:
    case CLI_OPT_IGNORE_ALIASES:
    case CLI_OPT_REQUIRE_RANK_STATE:
    case CLI_OPT_ACCEPT_LAYOUT_STATE:
        if (!sh->filters) {
            cli_usage_error(sh->cmd, "--%s is for verify and diff",
                            code == CLI_OPT_EXCLUDE                ? "exclude"
                            : code == CLI_OPT_IGNORE_ALIASES       ? "ignore-aliases"
                            : code == CLI_OPT_REQUIRE_RANK_STATE ? "require-rank-state"
                                                                   : "accept-layout-state");
            return -1;
        }
        if (code == CLI_OPT_ACCEPT_LAYOUT_STATE) {
            sh->accept_layout_state = true;
            return 1;
        }
        if (code == CLI_OPT_IGNORE_ALIASES) {
            sh->ignore_aliases = true;
            return 1;
        }
        if (code == CLI_OPT_REQUIRE_RANK_STATE) {
            sh->require_rank_state = true;
            return 1;
        }
        if (!*arg) {
            cli_usage_error(sh->cmd, "--exclude wants a glob (fnmatch(3): *, ?, [...]), not ''");
            return -1;
        } else {
            /* one command per process: the list lives until exit (a
             * static, as --tp-split's rules) */
            static const char **globs;
            static size_t cap;
            if (sh->nexclude == cap) {
                size_t ncap = cap ? cap * 2 : 8;
                const char **p = realloc(globs, ncap * sizeof *p);
                if (!p) {
                    cli_error(sh->cmd, "out of memory");
                    return -1;
                }
                globs = p;
                cap = ncap;
            }
            globs[sh->nexclude++] = arg;
            sh->exclude = globs;
        }
        return 1;
    default: return 0;
    }
}

int cli_getopt(int argc, char **argv, const char *own_short, const struct option *own_long,
               cli_shared *sh) {
    /* the command's options and the shared ones, built once per process */
    static struct option longs[64];
    static char shorts[64];
    static const struct option *built_for;
    if (built_for != own_long) {
        size_t n = 0;
        for (; own_long[n].name; n++) {
            if (n + NSHARED + 1 >= sizeof longs / sizeof longs[0]) {
                cli_error(sh->cmd, "internal error: too many options");
                sh->exit = DCK_EXIT_TROUBLE;
                return CLI_STOP;
            }
            longs[n] = own_long[n];
        }
        /* a command that reads no checkpoint (bisect, repro: no read, no
         * threads) is offered none of the readers' options */
        for (size_t i = 0; i < NSHARED; i++)
            if (sh->read || shared[i].val == 'q' || shared[i].val == 'h' || shared[i].val == CLI_OPT_JSON)
                longs[n++] = shared[i];
        memset(&longs[n], 0, sizeof longs[n]);
        snprintf(shorts, sizeof shorts, "%s%s", own_short, sh->read ? shared_short : "qh");
        built_for = own_long;
    }
    for (;;) {
        int c = getopt_long(argc, argv, shorts, longs, NULL);
        if (c == -1) return -1;
        int r = cli_shared_option(sh, c, optarg);
        if (r == 0) return c;
        if (r < 0) {
            sh->exit = DCK_EXIT_TROUBLE;
            return CLI_STOP;
        }
        if (sh->help) {
            fputs(sh->help_text, stdout);
            sh->exit = DCK_EXIT_SAME;
            return CLI_STOP;
        }
    }
}

void cli_print_excluded(FILE *f, const cli_shared *sh) {
    for (size_t g = 0; g < sh->nexclude; g++)
        fprintf(f, "%s'%s'", g ? ", " : "; left out by --exclude: ", cli_safe(sh->exclude[g]));
}

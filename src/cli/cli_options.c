/* The one option parser of the command line: cli_getopt, getopt_long over
 * a command's own table and the options commands share (one table:
 * cli_shared_option); and train's options (the trainer's option table,
 * src/train/train_config.c, as getopt_long entries) for train, canary and
 * resume-check (cli_parse_train_args). Each command keeps its own options,
 * help text and messages for unknown options. */
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

/* The shared options a command takes: --threads where it has threads to
 * set, the ways of reading checkpoints (--iteration, Megatron, the
 * filters) where it reads them (read); -q, -h and --json everywhere. The
 * others are unknown to it, as any option it does not have. */
static bool takes(const cli_shared *sh, int code) {
    if (sh->no_shared) return false;
    switch (code) {
    case 't': return sh->threads != NULL;
    case 'q':
    case 'h':
    case CLI_OPT_JSON: return true;
    default: return sh->read != NULL;
    }
}

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
        size_t n = 0, k = strlen(own_short);
        if (k + 2 * NSHARED >= sizeof shorts) {
            cli_error(sh->cmd, "internal error: too many short options");
            sh->exit = DCK_EXIT_TROUBLE;
            return CLI_STOP;
        }
        memcpy(shorts, own_short, k);
        for (; own_long[n].name; n++) {
            if (n + NSHARED + 1 >= sizeof longs / sizeof longs[0]) {
                cli_error(sh->cmd, "internal error: too many options");
                sh->exit = DCK_EXIT_TROUBLE;
                return CLI_STOP;
            }
            longs[n] = own_long[n];
        }
        for (size_t i = 0; i < NSHARED; i++) {
            if (!takes(sh, shared[i].val)) continue;
            longs[n++] = shared[i];
            if (shared[i].val < 256) {
                shorts[k++] = (char)shared[i].val;
                if (shared[i].has_arg == required_argument) shorts[k++] = ':';
            }
        }
        shorts[k] = 0;
        memset(&longs[n], 0, sizeof longs[n]);
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
    cli_print_exclude_list(f, (const char *const *)sh->exclude, sh->nexclude);
}

/* ------------------------------------------------------------------ train's options */

enum { CLI_OPT_TRAIN = 0x1400, CLI_OPT_REFUSED = 0x1480 };

void cli_print_refused(FILE *out, const cli_refused *refused) {
    fprintf(out, "Train options not taken here:");
    for (const cli_refused *r = refused; r->name; r++) fprintf(out, " --%s", r->name);
    fprintf(out, "\n");
}

int cli_parse_train_args(const char *cmd, int argc, char **argv, dck_train_config *c,
                         int (*extra)(void *, const char *, const char *, int *), void *ectx) {
    return cli_parse_train_args_except(cmd, argc, argv, c, NULL, extra, ectx);
}

/* The trainer's table as getopt_long entries: the refused names first
 * (optional_argument, so that "--out=DIR" and "--out" at the end are
 * refused as "--out" is), then every train option the command takes. */
static const struct option *train_options(const char *cmd, const cli_refused *refused) {
    static struct option longs[64];
    size_t n = 0, max = sizeof longs / sizeof longs[0] - 1;
    for (size_t k = 0; refused && refused[k].name; k++) {
        if (n == max) goto full;
        longs[n++] = (struct option){refused[k].name, optional_argument, NULL, CLI_OPT_REFUSED + (int)k};
    }
    const char *name;
    for (size_t i = 0; (name = dck_train_option_name(i)); i++) {
        const cli_refused *r = refused;
        while (r && r->name && strcmp(r->name, name)) r++;
        if (r && r->name) continue;
        if (n == max) goto full;
        longs[n++] = (struct option){name, dck_train_flag_takes_value(name) ? required_argument : no_argument,
                                     NULL, CLI_OPT_TRAIN + (int)i};
    }
    memset(&longs[n], 0, sizeof longs[n]);
    return longs;
full:
    cli_error(cmd, "internal error: too many train options");
    return NULL;
}

int cli_parse_train_args_except(const char *cmd, int argc, char **argv, dck_train_config *c,
                                const cli_refused *refused,
                                int (*extra)(void *, const char *, const char *, int *), void *ectx) {
    const struct option *longs = train_options(cmd, refused);
    if (!longs) return DCK_EXIT_TROUBLE;
    /* -h, -q and --json are the command's own (extra), as its other options */
    cli_shared sh = {.cmd = cmd, .no_shared = true};
    optind = 1;
    opterr = 0;
    while (optind < argc) {
        int i = optind;
        const char *a = argv[i];
        /* the command's own options first: a command may take an option the
         * trainer's table also has in its own sense (canary's --preset) */
        if (extra) {
            int used = 0;
            int r = extra(ectx, a, i + 1 < argc ? argv[i + 1] : NULL, &used);
            if (r < 0) return DCK_EXIT_TROUBLE;
            if (r > 0) {
                optind = i + 1 + used;
                continue;
            }
        }
        /* long options only: train's have no short forms, and a word that is
         * none ("-x", "--", a path) is an error here */
        if (strncmp(a, "--", 2) != 0 || !a[2]) return cli_usage_error(cmd, "unexpected argument '%s'", a);
        /* names in full: the command's own options are not in the table, so
         * getopt_long could not tell an abbreviation of one of them from an
         * abbreviation of a train option (canary's --t: --timeout, or
         * --threads?) */
        size_t nl = strcspn(a + 2, "=");
        const struct option *o = longs;
        while (o->name && (strlen(o->name) != nl || strncmp(o->name, a + 2, nl))) o++;
        if (!o->name) return cli_usage_error(cmd, "unknown option '%s'", a);
        int code = cli_getopt(argc, argv, "+:", longs, &sh);
        if (code == CLI_STOP) return sh.exit;
        if (code == -1) return cli_usage_error(cmd, "unexpected argument '%s'", a); /* not an option to it */
        if (code == ':') return cli_usage_error(cmd, "%s needs a value", a);
        if (code == '?') return cli_usage_error(cmd, "%s takes no value", o->name);
        if (code >= CLI_OPT_REFUSED)
            return cli_usage_error(cmd, "--%s: %s", o->name, refused[code - CLI_OPT_REFUSED].why);
        if (dck_train_config_set(c, o->name, optarg) != DCK_OK) return cli_usage_error(cmd, "%s", dck_last_error());
    }
    return 0;
}

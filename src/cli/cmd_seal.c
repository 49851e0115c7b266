/* detcheck seal: the seal of a checkpoint from its files (man
 * detcheck-seal(1)), for checkpoints written without the Python API.
 * Exit 0 sealed, 2 trouble. */
#include "cli.h"
#include "runs/seal.h"

#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char seal_help[] =
    "usage: detcheck seal CKPT [--step N] [--threads N] [--json] [-q]\n"
    "\n"
    "Hashes the files of checkpoint CKPT (a directory or a file in any format\n"
    "detcheck reads) and writes its seal: CKPT/detcheck-seal.yaml inside a\n"
    "directory, CKPT.detcheck-seal.yaml beside a file; a manifest as hash -o\n"
    "writes it, with seal: 1, seal_from: files, the checkpoint's name and step,\n"
    "and the whole-file hashes. 'detcheck verify --seal CKPT' checks the files\n"
    "against it later. The seal is written atomically and replaces only an\n"
    "earlier seal: never a link, a FIFO or any other file.\n"
    "\n"
    "Options:\n"
    "      --step N       the step the checkpoint holds (default: the step its\n"
    "                     name says: step_N, iter_NNNNNNN, global_stepN,\n"
    "                     checkpoint-N, ...step=N...; else none is recorded)\n"
    "  -t, --threads N    worker threads for hashing\n"
    "      --iteration N  Megatron-LM checkpoint root: read iter_N instead of the\n"
    "                     latest iteration\n"
    "      --tp-split GLOB=DIM, --megatron-per-rank, --megatron-merge  legacy\n"
    "                     Megatron-LM trees, as hash (see detcheck-formats(7))\n"
    "      --json         the result as JSON on stdout\n"
    "  -q, --quiet        print nothing; the exit status says it all\n"
    "  -h, --help         this help\n"
    "\n"
    "Exit status: 0 sealed, 2 trouble.\n";

int cmd_seal(int argc, char **argv) {
    static const struct option opts[] = {{"step", required_argument, NULL, 'S'}, {NULL, 0, NULL, 0}};
    dck_options o;
    dck_options_init(&o);
    o.megatron_merge = 1; /* legacy Megatron trees as one model, as hash and verify read them */
    cli_shared sh = {.cmd = "seal", .help_text = seal_help, .read = &o, .threads = &o.threads,
                     .threads_max = 1024, .threads_want = "an integer 1..1024"};
    long step = -1;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = cli_getopt(argc, argv, "", opts, &sh)) != -1) {
        switch (c) {
        case CLI_STOP: return sh.exit;
        case 'S':
            if (!cli_parse_long(optarg, 0, LONG_MAX, &step))
                return cli_usage_error("seal", "--step wants a step 0 or more, not '%s'", optarg);
            break;
        default: return cli_usage_error("seal", "unknown or incomplete option '%s'", argv[optind - 1]);
        }
    }
    if (optind >= argc) return cli_usage_error("seal", "no CKPT given");
    if (argc - optind > 1) return cli_usage_error("seal", "one CKPT at a time, not %d", argc - optind);
    if (cli_check_megatron("seal", &o)) return DCK_EXIT_TROUBLE;
    const char *ckpt = argv[optind];
    long long named;
    if (dck_seal_name_step(ckpt, &named)) {
        if (step >= 0 && step != named)
            return cli_usage_error("seal", "--step %ld, but the name of %s says step %lld", step, cli_safe(ckpt),
                                   named);
        step = (long)named;
    }
    char *seal_path = NULL;
    dck_status s = dck_seal_path(ckpt, &seal_path);
    /* the rule of every output before the work: a refused seal costs nothing */
    if (!s) s = dck_seal_output_check(seal_path);
    dck_manifest *m = NULL;
    if (!s) {
        o.hash_files = 1; /* verify --seal compares the files too */
        o.progress = cli_progress;
        o.notice = cli_notice;
        o.notice_ctx = (void *)"seal";
        s = dck_hash_paths(&ckpt, 1, &o, &m);
        cli_progress_end();
    }
    if (!s) s = dck_seal_mark(m, ckpt, "files", step, 0);
    if (!s) s = dck_manifest_finalize(m);
    if (!s) s = dck_seal_save(m, ckpt);
    int rc = s ? cli_fail("seal", s) : DCK_EXIT_SAME;
    if (!s && !cli_quiet) {
        char root[33];
        dck_digest_to_hex(dck_manifest_root(m), root);
        if (sh.json) {
            bool oom = false;
            json_t *doc = json_object();
            cli_jset(doc, "checkpoint", cli_json_text(ckpt), &oom);
            cli_jset(doc, "seal", cli_json_text(seal_path), &oom);
            cli_jset(doc, "tensors", cli_json_u64(dck_manifest_tensor_count(m)), &oom);
            cli_jset(doc, "root", json_string(root), &oom);
            cli_jset(doc, "step", step >= 0 ? json_integer(step) : json_null(), &oom);
            if ((s = cli_json_print(doc, CLI_JSON_INDENT, oom))) rc = cli_fail("seal", s);
        } else {
            printf("sealed %s: %zu tensors, root %s -> %s\n", cli_safe(ckpt), dck_manifest_tensor_count(m), root,
                   cli_safe(seal_path));
        }
    }
    dck_manifest_free(m);
    dck_free(seal_path);
    return rc;
}

/* detcheck hash: digest every tensor of a checkpoint into a manifest. */
#include "cli.h"
#include "core/core.h" /* dck_manifest_is_file */

#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char hash_help[] =
    "usage: detcheck hash PATH... [-o MANIFEST] [--json] [--threads N] [-q]\n"
    "                    [--device cpu|cuda|auto] [--distributed] [--iteration N]\n"
    "                    [--tp-split GLOB=DIM]... [--megatron-per-rank]\n"
    "\n"
    "Digests every tensor (weights, optimizer state, RNG state) of a checkpoint\n"
    "with tensor digest v1 and writes a manifest: YAML, or JSON with --json.\n"
    "PATH is a checkpoint file or directory in any format detcheck reads\n"
    "(safetensors, a directory or an *.index.json of shards in any of them,\n"
    "detcheck's sharded layout, and the others listed in detcheck(1)), optionally\n"
    "zstd-compressed. Several PATHs are merged as shards of one checkpoint.\n"
    "\n"
    "Options:\n"
    "  -o, --output FILE  write the manifest to FILE (atomically) instead of stdout\n"
    "      --json         JSON instead of YAML\n"
    "  -t, --threads N    worker threads (default: online CPUs); the digests are\n"
    "                     the same for every N\n"
    "      --no-files     omit whole-file hashes\n"
    "      --device DEV   cpu (default), cuda (stream the data to the GPU; exit 2\n"
    "                     without one) or auto (the GPU when there is one); the\n"
    "                     digests are the same on every device\n"
    "      --distributed  under mpirun: split the work over the ranks (integer\n"
    "                     reductions, NCCL with --device cuda); rank 0 writes\n"
    "                     the same manifest as a single process\n"
    "      --iteration N  Megatron-LM checkpoint root: read iter_N instead of the\n"
    "                     latest iteration\n"
    "      --tp-split GLOB=DIM  legacy Megatron-LM trees (mp_rank_XX[_YYY]), whose\n"
    "                     ranks' weights are merged into the unsplit model's\n"
    "                     tensors: those whose merged name matches GLOB are split\n"
    "                     along DIM across tensor-parallel ranks ('none':\n"
    "                     replicated); repeatable, tried in order before the\n"
    "                     built-in rules (see detcheck-formats(7))\n"
    "      --megatron-per-rank  legacy Megatron-LM trees: do not merge; name every\n"
    "                     tensor by its rank directory, as saved\n"
    "      --megatron-merge  merge them (the default)\n"
    "  -q, --quiet        no progress or notes on stderr\n"
    "  -h, --help         this help\n"
    "\n"
    "Environment: DETCHECK_DIGEST_KERNEL=portable|avx2|avx512|avx512ifma picks the\n"
    "segment hash's instruction set (default: the widest this CPU runs; one it\n"
    "lacks is ignored); every kernel gives the same digests.\n"
    "\n"
    "Exit status: 0 done, 2 trouble (unreadable or malformed input).\n";

int cmd_hash(int argc, char **argv) {
    static const struct option opts[] = {
        {"output", required_argument, NULL, 'o'}, {"no-files", no_argument, NULL, 'F'},
        {"device", required_argument, NULL, 'D'}, {"distributed", no_argument, NULL, 'M'},
        {NULL, 0, NULL, 0}};
    const char *output = NULL;
    dck_format fmt = DCK_FORMAT_YAML;
    dck_options o;
    dck_options_init(&o);
    o.megatron_merge = 1; /* legacy Megatron trees as one model unless --megatron-per-rank */
    dck_device device = DCK_DEVICE_CPU;
    int distributed = 0;
    cli_shared sh = {.cmd = "hash", .help_text = hash_help, .read = &o, .threads = &o.threads,
                     .threads_max = 1024, .threads_want = "an integer 1..1024"};
    optind = 1;
    opterr = 0;
    int c;
    while ((c = cli_getopt(argc, argv, "o:", opts, &sh)) != -1) {
        switch (c) {
        case CLI_STOP: return sh.exit;
        case 'o': output = optarg; break;
        case 'F': o.hash_files = 0; break;
        case 'D':
            if (dck_device_from_name(optarg, &device))
                return cli_usage_error("hash", "--device wants cpu, cuda or auto, not '%s'", optarg);
            break;
        case 'M': distributed = 1; break;
        default:
            return cli_usage_error("hash", "unknown or incomplete option '%s'", argv[optind - 1]);
        }
    }
    if (sh.json) fmt = DCK_FORMAT_JSON;
    if (optind >= argc) return cli_usage_error("hash", "no PATH given");
    /* -o follows the rule of every output (dck_output_check): never a
     * checkpoint it is about to read (a shard inside a hashed directory is
     * caught too: every checkpoint format is binary or an *.index.json,
     * which dck_manifest_is_file refuses), a link, a FIFO, a read-only file, nor any
     * file that is not a manifest (a Megatron tree's
     * latest_checkpointed_iteration.txt, notes) */
    if (output && dck_output_check("-o", output, "manifest", dck_manifest_is_file, (const char *const *)argv + optind,
                                   (size_t)(argc - optind)))
        return cli_usage_error("hash", "%s", dck_last_error());
    if (getenv("OMPI_COMM_WORLD_SIZE") && atoi(getenv("OMPI_COMM_WORLD_SIZE")) > 1 && !distributed)
        cli_warn("hash", "started by mpirun without --distributed: every rank hashes everything");
    if (cli_check_megatron("hash", &o)) return DCK_EXIT_TROUBLE;
    const char *how = "";
    if (device == DCK_DEVICE_AUTO && !distributed) {
        /* no GPU here: plain hash, the same engine and the same manifest */
        int ngpu = 0;
        if (dck_gpu_device_count(&ngpu) != DCK_OK || ngpu <= 0) {
            cli_info("hash", "device auto: hashing on the CPU (%s)", dck_last_error());
            device = DCK_DEVICE_CPU;
            how = " (cpu)";
        }
    }
    if (device != DCK_DEVICE_CPU || distributed)
        return cmd_hash_planned(argc, argv, (const char *const *)argv + optind,
                                (size_t)(argc - optind), &o, fmt, output, device, distributed);
    o.progress = cli_progress;
    o.notice = cli_notice;
    o.notice_ctx = (void *)"hash";
    dck_manifest *m;
    const char *const *paths = (const char *const *)argv + optind;
    size_t npaths = (size_t)(argc - optind);
    dck_status s = dck_hash_paths(paths, npaths, &o, &m);
    cli_progress_end();
    if (s) return cli_fail("hash", s);
    s = cli_emit_manifest(m, paths, npaths, fmt, output, how);
    dck_manifest_free(m);
    if (s) return cli_fail("hash", s);
    return 0;
}

/* detcheck: entry point and the subcommand table. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const dck_command commands[] = {
    {"hash", cmd_hash, "digest every tensor of a checkpoint into a manifest"},
    {"verify", cmd_verify, "compare a checkpoint with a golden manifest (exit 0 same, 1 different)"},
    {"seal", cmd_seal, "write a checkpoint's seal from its files (verify --seal checks them)"},
    {"diff", cmd_diff, "compare two checkpoints layer by layer, with counts and ULP distances"},
    {"train", cmd_train, "run the built-in deterministic training loop (CPU, MPI)"},
    {"resume-check", cmd_resume_check, "check that killing and resuming reproduces a run bitwise"},
    {"bisect", cmd_bisect, "find the first step and tensor where two runs part"},
    {"canary", cmd_canary, "run the same training steps on every device and name the one that differs"},
    {"repro", cmd_repro, "run a training command N times and say whether it is bitwise reproducible"},
    {"latest", cmd_latest, "print the newest sealed checkpoint of a directory (--verify: whose files match)"},
    {"doctor", cmd_doctor, "say what this detcheck finds at run time (CUDA, cuBLAS, NCCL, MPI, CPU) and from where"},
};

static int launcher_rank(void) {
    /* SLURM_PROCID: srun's task rank, set with or without an MPI plugin */
    static const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        long r;
        if (v && cli_parse_long(v, 0, 1 << 24, &r)) return (int)r;
    }
    return -1;
}

static void usage(FILE *out) {
    fprintf(out,
            "usage: detcheck COMMAND [OPTIONS] [ARGS]\n"
            "\n"
            "Proves, bit for bit, that training runs are reproducible.\n"
            "\n"
            "Commands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-14s %s\n", commands[i].name, commands[i].help);
    fprintf(out,
            "\n"
            "Options:\n"
            "  -h, --help     this help; 'detcheck COMMAND --help' for a command's\n"
            "  --version      print the version (--version --verbose: as detcheck doctor)\n"
            "\n"
            "Exit status: 0 same, 1 different, 2 trouble. See detcheck(1).\n");
}

int main(int argc, char **argv) {
    cli_raise_fd_limit();
    if (argc < 2) {
        usage(stderr);
        return DCK_EXIT_TROUBLE;
    }
    const char *name = argv[1];
    if (!strcmp(name, "-h") || !strcmp(name, "--help") || !strcmp(name, "help")) {
        if (!strcmp(name, "help") && argc > 2) {
            for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
                if (!strcmp(argv[2], commands[i].name)) {
                    char *hargv[] = {argv[2], (char *)"--help", NULL};
                    return commands[i].fn(2, hargv);
                }
        }
        usage(stdout);
        return 0;
    }
    if (!strcmp(name, "--version") || !strcmp(name, "-V")) {
        if (argc > 2 && (!strcmp(argv[2], "--verbose") || !strcmp(argv[2], "-v"))) {
            char *dargv[] = {(char *)"doctor", NULL};
            return cmd_doctor(1, dargv);
        }
        printf("detcheck %s (digest v1)\n", dck_version());
        return 0;
    }
    /* Under an MPI launcher only rank 0 prints: commands that use MPI set
     * cli_rank themselves; for the others every rank does the same work and
     * ranks other than 0 stay silent. */
    int env_rank = launcher_rank();
    if (env_rank > 0) {
        cli_rank = env_rank;
        if (!freopen("/dev/null", "w", stdout)) return DCK_EXIT_TROUBLE;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(name, commands[i].name)) {
            int rc = commands[i].fn(argc - 1, argv + 1);
            /* output that never reached its destination is trouble */
            if (fflush(stdout) != 0 || ferror(stdout)) {
                fprintf(stderr, "detcheck %s: error: cannot write to standard output\n", name);
                return DCK_EXIT_TROUBLE;
            }
            return rc;
        }
    fprintf(stderr, "detcheck: unknown command '%s'\nTry 'detcheck --help'.\n", name);
    return DCK_EXIT_TROUBLE;
}

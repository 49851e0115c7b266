/* detcheck doctor: what this detcheck finds at run time, and from where
 * (dck_doctor_probe; printed by src/report/doctor.c). A report: exit 0
 * after printing; --require makes it a preflight check. */
#include "cli.h"
#include "report/doctor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char doctor_help[] =
    "usage: detcheck doctor [--json] [--require LIST]\n"
    "\n"
    "Prints this detcheck's version and build, the digest's CPU kernel, and each\n"
    "library it loads at run time but never bundles: the CUDA driver and runtime,\n"
    "cuBLAS, NCCL and MPI. For each one found: its version, its path and the step\n"
    "of the search that found it; for each one absent or unusable: every place\n"
    "looked in, and why it failed. The search, in order: DETCHECK_*_LIB, already\n"
    "loaded, NVIDIA's wheels in site-packages, $CONDA_PREFIX/lib, the system's\n"
    "loader path, $CUDA_HOME (detcheck-doctor(1)).\n"
    "\n"
    "Options:\n"
    "      --json            a JSON document on stdout instead of the lines\n"
    "      --require LIST    exit 1 unless each of LIST (comma-separated: driver,\n"
    "                        cuda, cublas, nccl, mpi) is found and usable\n"
    "  -q, --quiet           nothing on stderr but errors\n"
    "  -h, --help            this help\n"
    "\n"
    "Exit status: 0 printed (and every --require found), 1 one of --require\n"
    "missing, 2 trouble (a bad option).\n";

/* The rows --require takes: the libraries, by key. */
static const char *const requirable[] = {"driver", "cuda", "cublas", "nccl", "mpi"};

static int known(const char *key, size_t n) {
    for (size_t i = 0; i < sizeof requirable / sizeof requirable[0]; i++)
        if (strlen(requirable[i]) == n && !strncmp(requirable[i], key, n)) return 1;
    return 0;
}

int cmd_doctor(int argc, char **argv) {
    enum { OPT_REQUIRE = 0x2000 };
    static const struct option opts[] = {{"require", required_argument, NULL, OPT_REQUIRE}, {NULL, 0, NULL, 0}};
    cli_shared sh = {.cmd = "doctor", .help_text = doctor_help};
    const char *require = NULL;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = cli_getopt(argc, argv, "", opts, &sh)) != -1) {
        switch (c) {
        case CLI_STOP: return sh.exit;
        case OPT_REQUIRE: require = optarg; break;
        default: return cli_usage_error("doctor", "unknown or incomplete option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) return cli_usage_error("doctor", "no arguments, not '%s'", argv[optind]);
    for (const char *p = require; p && *p;) {
        size_t n = strcspn(p, ",");
        if (!known(p, n))
            return cli_usage_error("doctor", "--require takes driver, cuda, cublas, nccl, mpi; not '%s'",
                                   cli_safen(p, n));
        p += n + (p[n] == ',');
    }
    dck_doctor_result r;
    dck_status s = dck_doctor_probe(&r);
    if (s) return cli_fail("doctor", s);
    int rc = DCK_EXIT_SAME;
    if (sh.json) {
        bool oom = false;
        if ((s = cli_json_print(cli_doctor_json(&r, &oom), CLI_JSON_INDENT, oom))) rc = cli_fail("doctor", s);
    } else {
        cli_doctor_print(stdout, &r);
    }
    for (const char *p = require; p && *p && rc == DCK_EXIT_SAME;) {
        size_t n = strcspn(p, ",");
        for (size_t i = 0; i < r.n; i++)
            if (strlen(r.rows[i].key) == n && !strncmp(r.rows[i].key, p, n) && r.rows[i].state != DCK_DOCTOR_FOUND) {
                cli_error("doctor", "--require %s: %s is %s", r.rows[i].key, r.rows[i].name,
                          dck_doctor_state_name(r.rows[i].state));
                rc = DCK_EXIT_DIFFERENT;
            }
        p += n + (p[n] == ',');
    }
    dck_doctor_result_release(&r);
    return rc;
}

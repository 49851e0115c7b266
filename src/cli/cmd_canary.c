/* detcheck canary: the same short training run on every device of a job,
 * compared bit for bit with an oracle; names the device that differs. The
 * work is src/train/canary.c; this file parses, prints and exits. See
 * man/detcheck-canary.1. */
#include "report/html.h"
#include "cli.h"
#include "train/canary.h"

#include <sched.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* train's options canary has no use for: it writes no checkpoint, and its
 * fault is --inject */
static const cli_refused canary_refused[] = {
    {"out", "canary writes no checkpoint"},
    {"resume", "canary writes no checkpoint, so there is nothing to resume"},
    {"resume-from", "canary writes no checkpoint, so there is nothing to resume"},
    {"flip-bit", "train's fault; canary's is --inject RANK:STEP:TENSOR:INDEX:BIT"},
    {"kill-after-ckpt", "canary writes no checkpoint (a stalled rank: --test-stall)"},
    {"kill-during-ckpt", "canary writes no checkpoint (a stalled rank: --test-stall)"},
    {"ckpt-every", "canary writes no checkpoint"},
    {"compress", "canary writes no checkpoint"},
    {"bench", "train's timing run; canary compares ranks"},
    {NULL, NULL}};

static void usage(FILE *out) {
    fprintf(out,
            "usage: detcheck canary [OPTIONS]\n"
            "       mpirun -np K detcheck canary [OPTIONS]\n"
            "       srun --mpi=pmix -n K detcheck canary [OPTIONS]\n"
            "\n"
            "Every rank (one per device) runs the same short deterministic training\n"
            "run on its own, recording the digest of every tensor at every step;\n"
            "rank 0 compares each rank with an oracle and names the ranks that differ:\n"
            "first step, first tensor, how many elements and which bits.\n"
            "\n"
            "Oracle (default: the CPU reference, computed on rank 0):\n"
            "  --golden FILE        the record written by --write-golden\n"
            "  --write-golden FILE  write rank 0's record to FILE (on a trusted machine)\n"
            "  --vote               the majority of the ranks (at least 3)\n"
            "  (one oracle per run; every rank must run the same settings)\n"
            "\n"
            "Run:\n"
            "  --preset NAME        workload size:\n");
    for (size_t i = 0; dck_canary_preset_name(i); i++)
        fprintf(out, "                         %-6s %s\n", dck_canary_preset_name(i),
                dck_canary_preset_help(i));
    fprintf(out,
            "  --device D           cpu (default), cuda, auto, or twin (the GPU path on\n"
            "                       its CPU twin); the oracle's reference is on the CPU\n"
            "  --seconds T          repeat the run for T seconds, comparing every pass\n"
            "                       with the first (intermittent faults)\n"
            "  --timeout S          rank 0 waits S seconds for the other ranks (300)\n"
            "  --threads T          threads per rank (default: the CPUs it may use)\n"
            "  Every other option is a `detcheck train` option (--steps: 1 to 10000, --width, --seed,\n"
            "  --precision...), applied after the preset\n"
            "  --json               the report as JSON\n"
            "  -q, --quiet          no progress line\n"
            "\n"
            "Reports (written by rank 0; '-': standard output):\n"
            "  --junit FILE         also a JUnit XML report (a test case per rank) for CI\n"
            "  --markdown FILE      also a Markdown summary\n"
            "  --html FILE          also a self-contained HTML page: every rank in a grid\n"
            "                       of hosts x devices, coloured identical / differs /\n"
            "                       failed / timed out, and tables\n"
            "\n"
            "Testing hooks:\n"
            "  --inject RANK:STEP:TENSOR:INDEX:BIT  flip one bit in one rank's run;\n"
            "        TENSOR: model.X (weights before STEP), grad.X (gradients),\n"
            "        optimizer.exp_avg.X, optimizer.exp_avg_sq.X (after the update),\n"
            "        activations (of every sequence of STEP)\n"
            "  --test-stall RANK    that rank never reports (a hung device)\n"
            "\n");
    cli_print_refused(out, canary_refused);
    fprintf(out,
            "\n"
            "Exit status: 0 every rank identical to the oracle; 1 some rank differs;\n"
            "2 trouble (a rank failed, died or timed out: named; no majority; bad flags\n"
            "or golden file).\n");
}

typedef struct {
    dck_canary_opts *o;
    bool help, json, quiet, threads_set, vote;
    int injects;
    cli_report rep;
} canary_flags;

static int canary_extra(void *ctx, const char *a, const char *next, int *used) {
    canary_flags *f = ctx;
    dck_canary_opts *o = f->o;
    *used = 0;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) return f->help = true, 1;
    if (!strcmp(a, "--json")) return f->json = true, 1;
    if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) return f->quiet = true, 1;
    if (!strcmp(a, "--vote")) return f->vote = true, 1;
    int taken = cli_report_arg(&f->rep, a, next, used);
    if (taken) return taken;
    static const char *const with_value[] = {"--golden", "--write-golden", "--seconds", "--timeout",
                                             "--inject", "--test-stall"};
    size_t k = 0, n = sizeof with_value / sizeof with_value[0];
    while (k < n && strcmp(a, with_value[k])) k++;
    if (k == n) return 0;
    if (!next) {
        cli_usage_error("canary", "%s needs a value", a);
        return -1;
    }
    *used = 1;
    double d;
    long l;
    switch (k) {
    case 0:
    case 1:
        if (!*next) { /* "" would name no file: an empty variable in a script */
            cli_usage_error("canary", "%s needs a file name, not ''", a);
            return -1;
        }
        *(k == 0 ? &o->golden : &o->write_golden) = next;
        return 1;
    case 2:
    case 3:
        if (!cli_parse_double(next, &d) || !(d >= 0 && d <= 1e7) || (k == 3 && d < 1)) {
            cli_usage_error("canary", "%s wants seconds%s, not '%s'", a, k == 3 ? " (>= 1)" : "", next);
            return -1;
        }
        *(k == 2 ? &o->seconds : &o->timeout) = d;
        return 1;
    case 4:
        if (++f->injects > 1) {
            cli_usage_error("canary", "--inject given twice: one fault per run");
            return -1;
        }
        if (dck_canary_inject_parse(next, &o->inject)) {
            cli_usage_error("canary", "%s", dck_last_error());
            return -1;
        }
        return 1;
    default: /* --test-stall */
        if (!cli_parse_long(next, 1, 1 << 24, &l)) {
            cli_usage_error("canary", "--test-stall wants a rank other than 0, not '%s'", next);
            return -1;
        }
        o->stall_rank = (int)l;
        return 1;
    }
}

static void progress(void *ctx, double done, double total) {
    (void)ctx;
    fprintf(stderr, "\rdetcheck canary: %.0f of %.0f s%s", done, total, done >= total ? "\n" : "");
    fflush(stderr);
}

static const char *const result_names[] = {"identical", "DIFFERS", "ERROR", "TIMEOUT"};

static int bit_index(uint32_t b) {
    for (int i = 0; i < 32; i++)
        if (b == (1u << i)) return i;
    return -1;
}

static void print_text(const dck_canary_report *r, const dck_canary_opts *o, const char *preset) {
    printf("detcheck canary: %d rank%s, preset %s (%zu parameters, %ld steps), oracle: %s\n",
           r->nranks, r->nranks == 1 ? "" : "s", preset, r->params, r->steps, r->oracle_text);
    for (int i = 0; i < r->nranks; i++) {
        const dck_canary_rank *x = &r->ranks[i];
        char dev[32];
        /* cuda: the GPU's index (ranks beyond the GPUs share them); else the local rank */
        snprintf(dev, sizeof dev, "%s:%d", o->cfg.device[0] ? o->cfg.device : "cpu",
                 x->gpu >= 0 ? x->gpu : x->local);
        /* no majority: nothing to be identical to; the groups say who agrees */
        bool undecided = r->no_majority && x->result == DCK_CANARY_SAME;
        printf("%s rank %d %s %s", cli_safe(x->host), x->rank, x->result == DCK_CANARY_TIMEOUT ? "?" : dev,
               undecided ? "undecided" : result_names[x->result]);
        if (undecided) printf(" (same record as rank %d)", x->group - 1);
        if (x->result == DCK_CANARY_DIFFERS) {
            printf(" at step %ld: %s", x->step, x->tensor);
            if (x->has_detail) {
                printf(", %llu of %llu elements differ, bits 0x%08x", (unsigned long long)x->ndiff,
                       (unsigned long long)x->numel, x->bits);
                int b = bit_index(x->bits);
                if (b >= 0) printf(" (bit %d)", b);
            }
            if (x->pass_diff)
                printf("; pass %d of %d differed from the first at step %ld (%s)", x->pass_diff,
                       x->passes, x->pass_step, x->pass_tensor);
        } else if (x->result >= DCK_CANARY_ERROR) {
            printf(": %s", cli_safe_line(x->error));
        } else if (x->passes > 1 && !undecided) {
            printf(" (%d passes)", x->passes);
        }
        putchar('\n');
        if (x->result != DCK_CANARY_SAME && x->result != DCK_CANARY_TIMEOUT)
            printf("    device: %s, %s\n", cli_safe(x->device), cli_safe(x->id));
    }
    if (r->no_majority) printf("no majority: no group of identical ranks holds more than half\n");
    printf("%d of %d devices identical\n", r->identical, r->nranks);
}

static dck_status print_json(const dck_canary_report *r, const dck_canary_opts *o, const char *preset) {
    bool oom = false;
    json_t *doc = json_object(), *arr = json_array();
    cli_jset(doc, "ranks", json_integer(r->nranks), &oom);
    cli_jset(doc, "preset", json_string(preset), &oom);
    cli_jset(doc, "device", json_string(o->cfg.device[0] ? o->cfg.device : "cpu"), &oom);
    cli_jset(doc, "steps", json_integer(r->steps), &oom);
    cli_jset(doc, "parameters", cli_json_u64(r->params), &oom);
    cli_jset(doc, "oracle", cli_json_text(r->oracle_text), &oom);
    cli_jset(doc, "final_root", r->final_root[0] ? json_string(r->final_root) : json_null(), &oom);
    for (int i = 0; i < r->nranks; i++) {
        const dck_canary_rank *x = &r->ranks[i];
        json_t *e = json_object();
        cli_jset(e, "host", cli_json_text(x->host), &oom);
        cli_jset(e, "rank", json_integer(x->rank), &oom);
        cli_jset(e, "local", json_integer(x->local), &oom);
        cli_jset(e, "device", cli_json_text(x->device), &oom);
        cli_jset(e, "id", cli_json_text(x->id), &oom);
        cli_jset(e, "result", json_string(x->result == DCK_CANARY_SAME ? "identical"
                                          : x->result == DCK_CANARY_DIFFERS ? "differs"
                                          : x->result == DCK_CANARY_ERROR ? "error" : "timeout"),
                 &oom);
        cli_jset(e, "passes", json_integer(x->passes), &oom);
        if (x->result == DCK_CANARY_DIFFERS) {
            cli_jset(e, "step", json_integer(x->step), &oom);
            cli_jset(e, "tensor", cli_json_text(x->tensor), &oom);
            if (x->has_detail) {
                char bits[16];
                snprintf(bits, sizeof bits, "0x%08x", x->bits);
                cli_jset(e, "elements", cli_json_u64(x->numel), &oom);
                cli_jset(e, "differing", cli_json_u64(x->ndiff), &oom);
                cli_jset(e, "bits", json_string(bits), &oom);
            }
            if (x->pass_diff) cli_jset(e, "pass_differs", json_integer(x->pass_diff), &oom);
        }
        if (x->result >= DCK_CANARY_ERROR) cli_jset(e, "error", cli_json_text(x->error), &oom);
        cli_jappend(arr, e, &oom);
    }
    cli_jset(doc, "results", arr, &oom);
    cli_jset(doc, "identical", json_integer(r->identical), &oom);
    cli_jset(doc, "exit", json_integer(r->exit_code), &oom);
    return cli_json_print(doc, CLI_JSON_LINES, oom);
}

/* --write-golden is an output too: a report in its place would replace the
 * golden record just written (dck_output_check lets both through while the
 * file does not exist yet). */
static int reports_apart(const cli_report *r, const char *golden) {
    static const char *const opt[] = {"--junit", "--markdown", "--html"};
    const char *path[] = {r->junit, r->markdown, r->html};
    for (size_t i = 0; golden && i < sizeof path / sizeof path[0]; i++) {
        struct stat a, b;
        if (!path[i] || !strcmp(path[i], "-")) continue;
        if (!strcmp(path[i], golden) ||
            (stat(path[i], &a) == 0 && stat(golden, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino))
            return cli_usage_error("canary", "%s and --write-golden name the same file (%s); give each its own",
                                   opt[i], golden);
    }
    return 0;
}

static int cpus_here(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
    int n = CPU_COUNT(&set);
    return n > 0 ? n : 1;
}

int cmd_canary(int argc, char **argv) {
    dck_canary_opts o;
    dck_canary_opts_init(&o);
    canary_flags f = {.o = &o};
    cli_report_init(&f.rep, "canary");
    /* the preset first, so that train flags given with it refine it */
    const char *preset = "tiny";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") || !strncmp(argv[i], "--threads=", 10)) f.threads_set = true;
        if (!strcmp(argv[i], "--preset") && i + 1 < argc) preset = argv[i + 1];
        if (!strncmp(argv[i], "--preset=", 9)) preset = argv[i] + 9;
        if (!strcmp(argv[i], "--")) break;
    }
    if (dck_canary_preset(&o.cfg, preset)) return cli_usage_error("canary", "%s", dck_last_error());
    /* canary's --preset (tiny, cpu, gpu) is not train's (model shapes only):
     * taken out before train's parser sees the rest */
    char **args = calloc((size_t)argc + 1, sizeof *args);
    if (!args) return cli_fail("canary", dck_oom(NULL));
    int na = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--")) {
            while (i < argc) args[na++] = argv[i++];
            break;
        }
        if (!strcmp(argv[i], "--preset") && i + 1 < argc) {
            i++;
            continue;
        }
        if (strncmp(argv[i], "--preset=", 9) != 0) args[na++] = argv[i];
    }
    int rc = cli_parse_train_args_except("canary", na, args, &o.cfg, canary_refused, canary_extra, &f);
    free(args);
    if (f.help) {
        usage(stdout);
        return 0;
    }
    if (rc) return rc;
    /* one oracle: a second one given would be ignored without a word */
    if (f.vote && o.golden)
        return cli_usage_error("canary", "--golden and --vote: two oracles; give one");
    if (f.vote) o.oracle = DCK_ORACLE_VOTE;
    if (o.golden) o.oracle = DCK_ORACLE_GOLDEN;
    const dck_train_config *c = &o.cfg;
    if (c->steps < 1 || c->steps > DCK_CANARY_MAX_STEPS)
        return cli_usage_error("canary", "--steps %ld: canary runs 1 to %d steps (with none, nothing "
                               "would be compared)", c->steps, DCK_CANARY_MAX_STEPS);
    if (c->mode != DCK_MODE_DET)
        return cli_usage_error("canary", "--mode fast is not reproducible by design: canary runs the "
                               "deterministic mode");
    if (o.oracle == DCK_ORACLE_GOLDEN && o.write_golden)
        return cli_usage_error("canary", "--golden and --write-golden together");
    if (dck_train_config_check(c) || dck_canary_inject_check(c, &o.inject))
        return cli_usage_error("canary", "%s", dck_last_error());
    /* --device is train's (cpu, cuda, auto, twin): settled here, before the
     * launcher starts MPI, so that every rank fails alike without a GPU */
    if (dck_canary_device_ready(&o.cfg)) return cli_fail("canary", DCK_ERR_NODEVICE);
    if (!f.threads_set) {
        int t = cpus_here();
        o.cfg.threads = t < o.cfg.microbatches ? t : o.cfg.microbatches;
    }
    cli_quiet = f.quiet;
    dck_comm *comm = NULL;
    dck_status s = dck_comm_init(&argc, &argv, &comm);
    if (s) return cli_fail("canary", s);
    cli_rank = dck_comm_rank(comm);
    int K = dck_comm_size(comm);
    /* mpirun --enable-recovery (Open MPI) exits 0 whatever its ranks exit
     * with: a CI step that reads only mpirun's status would pass a faulty
     * rank; said once, up front */
    const char *recovery = getenv("OMPI_MCA_orte_enable_recovery");
    if (recovery && *recovery && strcmp(recovery, "0") && strcmp(recovery, "false"))
        cli_warn("canary", "under mpirun --enable-recovery, mpirun itself exits 0 whatever the ranks' "
                 "statuses: take the verdict from this report (or --json's \"exit\"), not from mpirun");
    /* srun without an MPI plugin starts tasks that cannot reach each other:
     * each would compare itself alone and pass */
    const char *tasks = getenv("SLURM_STEP_NUM_TASKS");
    long nt;
    if (K == 1 && tasks && cli_parse_long(tasks, 1, 1 << 24, &nt) && nt > 1) {
        rc = cli_usage_error("canary", "srun started %ld tasks, but they are not connected (one MPI "
                             "rank each): run srun --mpi=pmix (srun --mpi=list shows the plugins)",
                             nt);
        dck_comm_finalize(comm);
        return rc;
    }
    /* what depends on the job's size: the same answer on every rank */
    const char *why = NULL;
    char buf[160];
    if (o.inject.on && o.inject.rank >= K)
        snprintf(buf, sizeof buf, "--inject: rank %d, but the job has %d rank%s", o.inject.rank, K,
                 K == 1 ? "" : "s"), why = buf;
    else if (o.stall_rank >= K)
        snprintf(buf, sizeof buf, "--test-stall: rank %d, but the job has %d rank%s", o.stall_rank, K,
                 K == 1 ? "" : "s"), why = buf;
    else if (o.oracle == DCK_ORACLE_VOTE && K < DCK_CANARY_MIN_VOTERS)
        snprintf(buf, sizeof buf, "--vote needs at least %d ranks, the job has %d: %s", DCK_CANARY_MIN_VOTERS,
                 K, K == 1 ? "one rank would vote with itself" : "two ranks cannot form a majority against "
                 "one faulty rank"), why = buf;
    if (why) {
        rc = cli_usage_error("canary", "%s", why);
        dck_comm_finalize(comm);
        return rc;
    }
    /* the reports follow the rule of every output: never an input (nor the
     * golden file written), never a file of another kind. Rank 0 writes
     * them, so rank 0 checks, before any run, and every rank stops with it */
    const char *inputs[] = {o.golden, o.cfg.data[0] ? o.cfg.data : NULL};
    bool bad = cli_rank == 0 && (cli_report_check(&f.rep, f.json, inputs, sizeof inputs / sizeof inputs[0]) ||
                                 reports_apart(&f.rep, o.write_golden));
    if (dck_comm_agree(comm, bad ? DCK_ERR_INVALID : DCK_OK)) {
        dck_comm_finalize(comm);
        return DCK_EXIT_TROUBLE;
    }
    if (cli_rank == 0 && !f.quiet && !f.json && o.seconds > 0 && isatty(2)) o.progress = progress;
    dck_canary_report rep;
    char why_not[512] = "";
    s = dck_canary_check(&o, comm, &rep);
    if (s) {
        snprintf(why_not, sizeof why_not, "%s", dck_last_error());
        rc = cli_fail("canary", s);
    } else {
        rc = rep.exit_code;
        if (cli_rank == 0) {
            if (f.json) {
                if ((s = print_json(&rep, &o, preset))) rc = cli_fail("canary", s);
            } else {
                print_text(&rep, &o, preset);
            }
            if (o.write_golden && rc != 2) cli_info("canary", "golden record written to %s", o.write_golden);
        }
    }
    /* before a missing rank ends the job below */
    if (cli_rank == 0 && cli_report_wanted(&f.rep)) {
        if (s) {
            cli_report_case(&f.rep, "detcheck.canary", "canary", CLI_CASE_ERROR, "trouble", why_not, NULL);
        } else {
            cli_canary_report(&f.rep, &rep, o.cfg.device, preset);
            if (f.rep.html) cli_report_figure(&f.rep, cli_html_canary_figure(&rep));
        }
        int wrc = cli_report_finish(&f.rep, rc);
        if (wrc) rc = wrc;
    }
    if (rep.any_timeout) {
        /* a rank is missing: MPI_Finalize would wait for it; end the job.
         * Rank 0 does, after its report. A rank that heard its verdict
         * leaves that to it for a moment (an abort or exit from here could
         * end the job before the report is out), then exits with the
         * report's status itself: under mpirun --enable-recovery rank 0's
         * MPI_Abort ends rank 0 alone. */
        fflush(stdout);
        fflush(stderr);
        bool wait = rep.wait_for_abort;
        dck_canary_report_release(&rep);
        if (wait) {
            sleep(5);
            return DCK_EXIT_TROUBLE;
        }
        dck_comm_abort(comm, DCK_EXIT_TROUBLE);
        return DCK_EXIT_TROUBLE;
    }
    dck_canary_report_release(&rep);
    dck_comm_finalize(comm);
    return rc;
}

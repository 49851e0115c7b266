/* detcheck resume-check: proves that killing a run and resuming it (on the
 * same or another number of ranks) reproduces the uninterrupted run bit for
 * bit. It drives `detcheck train` as child processes: a reference run; per
 * kill point K a run SIGKILLed right after its checkpoint K and one
 * SIGKILLed while writing the next checkpoint (a torn one, which the resume
 * must skip); the resumes of both; then it compares trajectories
 * (dck_resume_traj_check) and final checkpoint manifests, and prints what
 * report/resume.h words of them. See man detcheck-resume-check(1). */
#define _XOPEN_SOURCE 700
#include "cli.h"
#include "report/report.h"
#include "report/resume.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CMD "resume-check"

typedef struct {
    char **v;
    int n, cap;
} strv;

static int sv_add(strv *s, const char *x) {
    if (s->n + 2 > s->cap) {
        int cap = s->cap ? s->cap * 2 : 32;
        char **v = realloc(s->v, sizeof *v * (size_t)cap);
        if (!v) return -1;
        s->v = v;
        s->cap = cap;
    }
    if (!(s->v[s->n] = strdup(x))) return -1;
    s->n++;
    s->v[s->n] = NULL;
    return 0;
}

static int sv_addf(strv *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int sv_addf(strv *s, const char *fmt, ...) {
    char buf[DCK_TRAIN_PATH + 64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return sv_add(s, buf);
}

static void sv_free(strv *s) {
    for (int i = 0; i < s->n; i++) free(s->v[i]);
    free(s->v);
    memset(s, 0, sizeof *s);
}

/* train's options resume-check sets itself for each run */
static const cli_refused rc_refused[] = {
    {"out", "resume-check sets each run's folder itself (in --workdir)"},
    {"resume", "resume-check resumes the interrupted runs itself"},
    {"resume-from", "resume-check resumes the interrupted runs itself"},
    {"kill-after-ckpt", "resume-check stops the runs itself (--at K)"},
    {"kill-during-ckpt", "resume-check stops the runs itself (--at K)"},
    {"flip-bit", "a fault in every run; for the resumed runs only: --resume-flip-bit"},
    {"bench", "train's timing run; resume-check compares trajectories"},
    {NULL, NULL}};

static void usage(FILE *out) {
    fprintf(out,
            "usage: detcheck resume-check --steps N --at K[,K...] [OPTIONS] [TRAIN OPTIONS]\n"
            "   or: detcheck resume-check [OPTIONS] -- CMD ARGS...  (your own training command:\n"
            "       its options with `detcheck resume-check --help --`)\n"
            "\n"
            "Runs `detcheck train` N steps uninterrupted; then, for each K, a run killed\n"
            "(SIGKILL) right after its checkpoint at step K and a run killed while writing\n"
            "its next checkpoint; resumes both; compares every trajectory record and the\n"
            "final checkpoint manifests with the reference, bit for bit.\n"
            "\n"
            "Options:\n"
            "  --steps N                 length of every run\n"
            "  --at K[,K...]             kill points (1 <= K < N)\n"
            "  --ckpt-every E            checkpoint interval (default: K itself); K must be\n"
            "                            a multiple of E\n"
            "  --launcher \"CMD ...\"      prefix of every run, e.g. \"mpirun -np 2\"\n"
            "  --resume-launcher \"...\"   prefix of the resumed runs (default: --launcher),\n"
            "                            e.g. another number of ranks\n"
            "  --resume-device DEV       the resumed runs' --device (cpu, cuda, auto): a\n"
            "                            checkpoint of one device resumed on another\n"
            "  --workdir DIR             keep the runs in DIR (default: a temporary directory,\n"
            "                            removed when everything is identical)\n"
            "  --keep                    keep the temporary directory\n"
            "  --timeout SECONDS         per run (default 600)\n"
            "  --json                    machine-readable result\n"
            "  --junit FILE              also a JUnit XML report (a test case per check)\n"
            "  --markdown FILE           also a Markdown summary ('-': stdout)\n"
            "  --html FILE               also a self-contained HTML page (curves,\n"
            "                            step x module grid)\n"
            "  -q, --quiet               no progress lines\n"
            "  --resume-flip-bit STEP:TENSOR:INDEX\n"
            "                            testing hook: corrupt the resumed runs on purpose\n"
            "Every other option is a `detcheck train` option (model size, seed,\n"
            "precision, threads...) passed to every run.\n");
    cli_print_refused(out, rc_refused);
    fprintf(out,
            "\n"
            "Exit status: 0 identical, 1 different (first step and tensor printed), 2 trouble.\n");
}

typedef struct {
    bool help, json, keep;
    char *at, *launcher, *resume_launcher, *workdir, *flip;
    char resume_device[32]; /* "--device=DEV" for the resumed runs, or "" */
    long timeout;
    int bad;
    cli_report rep; /* --junit, --markdown */
} rc_flags;

static int rc_extra(void *ctx, const char *a, const char *next, int *used) {
    rc_flags *f = ctx;
    *used = 0;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) return f->help = true, 1;
    if (!strcmp(a, "--json")) return f->json = true, 1;
    if (!strcmp(a, "--keep")) return f->keep = true, 1;
    if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) return cli_quiet = true, 1;
    int rep = cli_report_arg(&f->rep, a, next, used);
    if (rep) return rep;
    static const char *valued[] = {"--at", "--launcher", "--resume-launcher", "--workdir",
                                   "--timeout", "--resume-flip-bit", "--resume-device"};
    for (size_t i = 0; i < sizeof valued / sizeof valued[0]; i++) {
        size_t n = strlen(valued[i]);
        const char *val = NULL;
        if (!strcmp(a, valued[i])) {
            if (!next) {
                cli_usage_error(CMD, "%s needs a value", a);
                return -1;
            }
            val = next;
            *used = 1;
        } else if (!strncmp(a, valued[i], n) && a[n] == '=') {
            val = a + n + 1;
        } else {
            continue;
        }
        switch (i) {
        case 0: f->at = (char *)val; break;
        case 1: f->launcher = (char *)val; break;
        case 2: f->resume_launcher = (char *)val; break;
        case 3: f->workdir = (char *)val; break;
        case 4:
            if (!cli_parse_long(val, 1, 86400 * 7, &f->timeout)) {
                cli_usage_error(CMD, "--timeout '%s': not a number of seconds", val);
                return -1;
            }
            break;
        case 6: snprintf(f->resume_device, sizeof f->resume_device, "--device=%.16s", val); break;
        default: f->flip = (char *)val; break;
        }
        return 1;
    }
    return 0;
}

/* Splits a launcher string on blanks (no quoting: a launcher is a plain
 * command line such as "mpirun --oversubscribe -np 4"). */
static int add_words(strv *s, const char *line) {
    if (!line) return 0;
    char *copy = strdup(line), *save = NULL;
    if (!copy) return -1;
    for (char *w = strtok_r(copy, " \t", &save); w; w = strtok_r(NULL, " \t", &save))
        if (sv_add(s, w)) {
            free(copy);
            return -1;
        }
    free(copy);
    return 0;
}

/* The options of c every run shares (identity, mode, steps, threads...) as
 * argv words, from the trainer's option table. */
static int add_config(strv *s, const dck_train_config *c) {
    dck_train_flag *f;
    size_t n;
    if (dck_train_config_to_flags(c, DCK_TRAIN_RUN, &f, &n)) return -1;
    int e = 0;
    for (size_t i = 0; i < n; i++)
        e |= f[i].value ? sv_addf(s, "--%s=%s", f[i].name, f[i].value) : sv_addf(s, "--%s", f[i].name);
    free(f);
    e |= sv_add(s, "-q");
    return e;
}

/* Runs argv with stdout and stderr into log; exit status, 128+signal when
 * killed, -1 when it could not start, -2 on timeout. */
static int run_child(char **argv, const char *log, long timeout_s) {
    int fd; /* new: a file or link planted at its name is refused, never truncated */
    if (cli_create_new(log, &fd)) {
        cli_fail(CMD, DCK_ERR_IO);
        return CLI_RUN_NO_LOG;
    }
    pid_t pid = fork();
    if (pid < 0 || pid > 0) close(fd);
    if (pid < 0) return -1;
    if (pid == 0) {
        setpgid(0, 0);
        dup2(fd, 1);
        dup2(fd, 2);
        execvp(argv[0], argv);
        fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) {
            if (WIFEXITED(st)) return WEXITSTATUS(st);
            if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
            return -1;
        }
        if (r < 0 && errno != EINTR) return -1;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (t.tv_sec - t0.tv_sec > timeout_s) {
            kill(-pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -2;
        }
        struct timespec nap = {0, 20 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
}

typedef struct {
    const char *self;
    const dck_train_config *c;
    const char *work;
    long timeout;
    bool json;
} ctx_t;

static void show_log(const char *log) {
    FILE *f = fopen(log, "r");
    if (!f) return;
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f) && n++ < 40) fprintf(stderr, "  | %s", line);
    fclose(f);
}

/* One `detcheck train` run; returns its exit status (see run_child). */
static int train_run(ctx_t *x, const char *launcher, const char *name, const char *extra1,
                     const char *extra2, long ckpt_every, const char *flip, char **log_out) {
    strv a = {0};
    char out[DCK_TRAIN_PATH + 64], log[DCK_TRAIN_PATH + 64];
    snprintf(out, sizeof out, "%s/%s", x->work, name);
    snprintf(log, sizeof log, "%s/%s%s.log", x->work, name, extra1 && !strcmp(extra1, "--resume") ? ".resume" : "");
    int e = add_words(&a, launcher);
    e |= sv_add(&a, x->self) | sv_add(&a, "train") | add_config(&a, x->c);
    e |= sv_addf(&a, "--out=%s", out) | sv_addf(&a, "--ckpt-every=%ld", ckpt_every);
    if (extra1) e |= sv_add(&a, extra1);
    if (extra2) e |= sv_add(&a, extra2);
    if (flip) e |= sv_addf(&a, "--flip-bit=%s", flip);
    int rc = e ? -1 : run_child(a.v, log, x->timeout);
    sv_free(&a);
    if (log_out) *log_out = strdup(rc == CLI_RUN_NO_LOG ? "" : log); /* not ours: never shown */
    return rc;
}

static bool exists(const char *dir, long step, const char *file) {
    char *d = dck_ckpt_dir(dir, step);
    char *p = d ? dck_path_join(d, file) : NULL;
    struct stat st;
    bool ok = p && stat(p, &st) == 0;
    free(d);
    free(p);
    return ok;
}

static bool log_has(const char *log, const char *needle) {
    FILE *f = fopen(log, "r");
    if (!f) return false;
    char line[4096];
    bool hit = false;
    while (!hit && fgets(line, sizeof line, f)) hit = strstr(line, needle) != NULL;
    fclose(f);
    return hit;
}

typedef cli_resume_check_case check_t;

/* Compares run dir b against the reference a: trajectories, then the final
 * checkpoint manifests. */
static int compare_runs(ctx_t *x, const char *a, const char *b, check_t *ck) {
    char pa[DCK_TRAIN_PATH + 64], pb[DCK_TRAIN_PATH + 64];
    snprintf(pa, sizeof pa, "%s/%s/%s", x->work, a, DCK_TRAJECTORY);
    snprintf(pb, sizeof pb, "%s/%s/%s", x->work, b, DCK_TRAJECTORY);
    dck_traj_rec *ra = NULL, *rb = NULL;
    size_t na = 0, nb = 0;
    /* each run's own (a launcher is the user's command: it may have
     * linked a file to another run's) */
    const char *const own[2] = {pa, pb};
    if (cli_run_files_own(own, 2)) {
        snprintf(ck->what, sizeof ck->what, "%s: a run's recording must be its own; nothing is compared",
                 dck_last_error());
        return ck->result = 2;
    }
    dck_status s = dck_traj_load(pa, &ra, &na);
    if (!s) s = dck_traj_load(pb, &rb, &nb);
    if (s) {
        snprintf(ck->what, sizeof ck->what, "%s", dck_last_error());
        free(ra);
        free(rb);
        return ck->result = 2;
    }
    /* every step 1..steps in both, and no other (dck_resume_traj_check) */
    dck_resume_traj_verdict d;
    dck_resume_traj_check(ra, na, rb, nb, x->c->steps, &d);
    free(ra);
    free(rb);
    cli_resume_check_trajectory(ck, &d);
    /* final manifests, tensors and values (files differ with K by design) */
    char *da = NULL, *db = NULL, *ma = NULL, *mb = NULL;
    snprintf(pa, sizeof pa, "%s/%s", x->work, a);
    snprintf(pb, sizeof pb, "%s/%s", x->work, b);
    da = dck_ckpt_dir(pa, x->c->steps);
    db = dck_ckpt_dir(pb, x->c->steps);
    ma = da ? dck_path_join(da, DCK_CKPT_MANIFEST) : NULL;
    mb = db ? dck_path_join(db, DCK_CKPT_MANIFEST) : NULL;
    dck_manifest *A = NULL, *B = NULL;
    const char *const steps_own[2] = {da, db}, *const manifests_own[2] = {ma, mb};
    if (!ma || !mb) s = dck_oom(CMD);
    else if (cli_run_files_own(steps_own, 2) || cli_run_files_own(manifests_own, 2)) s = DCK_ERR_IO;
    else s = dck_manifest_load(ma, &A);
    if (!s) s = dck_manifest_load(mb, &B);
    if (!s) {
        dck_cmp_result r;
        s = dck_manifest_compare(A, B, 0, &r);
        if (!s) {
            cli_resume_check_final(ck, &r);
            dck_cmp_result_release(&r);
        }
    }
    if (s) {
        snprintf(ck->what, sizeof ck->what, "%s", dck_last_error());
        ck->result = 2;
    }
    dck_manifest_free(A);
    dck_manifest_free(B);
    free(da);
    free(db);
    free(ma);
    free(mb);
    return ck->result;
}


int cmd_resume_check(int argc, char **argv) {
    /* `-- CMD ARGS...`: the user's own training (cmd_resume_user.c); without
     * it, the built-in trainer */
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--")) return cmd_resume_user(argc, argv);
    dck_train_config c;
    dck_train_config_init(&c);
    c.steps = 0;
    rc_flags f = {0};
    f.timeout = 600;
    cli_report_init(&f.rep, CMD);
    int rc = cli_parse_train_args_except(CMD, argc, argv, &c, rc_refused, rc_extra, &f);
    if (f.help) {
        usage(stdout);
        return 0;
    }
    if (rc) return rc;
    if (getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK"))
        return cli_usage_error(CMD, "run resume-check itself without mpirun; pass --launcher "
                                    "\"mpirun -np K\" instead");
    if (c.steps < 2) return cli_usage_error(CMD, "--steps N (at least 2) is required");
    if (!f.at) return cli_usage_error(CMD, "--at K[,K...] is required");
    long ats[64];
    int nat = 0;
    {
        char *copy = strdup(f.at), *save = NULL;
        for (char *w = strtok_r(copy, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
            long k;
            if (nat == 64 || !cli_parse_long(w, 1, c.steps - 1, &k)) {
                free(copy);
                return cli_usage_error(CMD, "--at '%s': each K must be an integer in [1, %ld]",
                                       f.at, c.steps - 1);
            }
            if (c.ckpt_every > 0 && k % c.ckpt_every != 0) {
                free(copy);
                return cli_usage_error(CMD, "--at %ld is not a multiple of --ckpt-every %ld", k,
                                       c.ckpt_every);
            }
            ats[nat++] = k;
        }
        free(copy);
        if (!nat) return cli_usage_error(CMD, "--at needs at least one step");
    }
    if (c.decay_steps <= 0) c.decay_steps = c.steps;
    {
        dck_train_config t = c;
        snprintf(t.out, sizeof t.out, "%s", "(workdir)");
        if (dck_train_config_check(&t)) return cli_usage_error(CMD, "%s", dck_last_error());
    }
    if (f.resume_device[0]) {
        /* checked now, not after the reference runs have taken their time */
        dck_train_config t = c;
        if (dck_train_config_set(&t, "device", f.resume_device + strlen("--device=")))
            return cli_usage_error(CMD, "--resume-device: %s", dck_last_error());
    }
    if (cli_report_check(&f.rep, f.json, NULL, 0)) return DCK_EXIT_TROUBLE;
    if (f.flip) {
        dck_train_config t = c;
        if (dck_train_config_set(&t, "flip-bit", f.flip))
            return cli_usage_error(CMD, "%s", dck_last_error());
    }
    char self[PATH_MAX];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0) {
        cli_error(CMD, "cannot find the detcheck binary (/proc/self/exe)");
        return DCK_EXIT_TROUBLE;
    }
    self[sl] = 0;
    char work[DCK_TRAIN_PATH];
    bool temp = !f.workdir;
    if (f.workdir) {
        snprintf(work, sizeof work, "%s", f.workdir);
        if (mkdir(work, 0777) != 0 && errno != EEXIST) {
            cli_error(CMD, "%s: cannot create: %s", work, strerror(errno));
            return DCK_EXIT_TROUBLE;
        }
    } else {
        if (cli_temp_workdir(CMD, work, sizeof work)) return DCK_EXIT_TROUBLE;
    }
    const char *rl = f.resume_launcher ? f.resume_launcher : f.launcher;
    ctx_t x = {self, &c, work, f.timeout, f.json};
    check_t checks[129];
    int nchk = 0, worst = 0;
    char *log = NULL;

    /* progress in trainer steps: the reference run, then per K the run
     * killed after K, the one killed while writing D, and their resumes */
    uint64_t pdone = 0, ptotal = (uint64_t)c.steps;
    for (int i = 0; i < nat; i++) {
        long E = c.ckpt_every > 0 ? c.ckpt_every : ats[i];
        long D = ats[i] + E <= c.steps ? ats[i] + E : c.steps;
        ptotal += (uint64_t)(ats[i] + D + 2 * (c.steps - ats[i]));
    }
    cli_progress_steps(0, ptotal); /* starts the clock */
    long ref_every = c.ckpt_every > 0 ? c.ckpt_every : ats[0];
    cli_info(CMD, "reference: %ld steps%s%s", c.steps, f.launcher ? " under " : "",
             f.launcher ? f.launcher : "");
    int r = train_run(&x, f.launcher, "reference", NULL, NULL, ref_every, NULL, &log);
    if (r != 0) {
        cli_error(CMD, "the reference run failed (exit %d); its log %s:", r, log);
        show_log(log);
        free(log);
        return DCK_EXIT_TROUBLE;
    }
    free(log);
    /* the run folders as their runs left them, re-checked after every
     * later run (a launcher is the user's command) */
    char ref_dir[DCK_TRAIN_PATH + 16];
    struct stat ref_st;
    snprintf(ref_dir, sizeof ref_dir, "%s/reference", work);
    if (lstat(ref_dir, &ref_st) != 0 || !S_ISDIR(ref_st.st_mode)) {
        cli_error(CMD, "%s: the reference run left no folder there", ref_dir);
        return DCK_EXIT_TROUBLE;
    }
    cli_progress_steps(pdone += (uint64_t)c.steps, ptotal);
    for (int i = 0; i < nat && worst < 2; i++) {
        long K = ats[i], E = c.ckpt_every > 0 ? c.ckpt_every : K;
        long D = K + E <= c.steps ? K + E : c.steps;
        for (int kind = 0; kind < 2 && worst < 2; kind++) {
            check_t *ck = &checks[nchk++];
            memset(ck, 0, sizeof *ck);
            ck->first_step = -1;
            snprintf(ck->name, sizeof ck->name, "%s_%ld", kind ? "killed_during" : "killed_after",
                     kind ? D : K);
            char opt[64];
            snprintf(opt, sizeof opt, "--kill-%s-ckpt=%ld", kind ? "during" : "after", kind ? D : K);
            r = train_run(&x, f.launcher, ck->name, opt, NULL, E, NULL, &log);
            bool ok = r != 0 && r != -1 && r != -2 && r != 2;
            char dir[DCK_TRAIN_PATH + 80];
            snprintf(dir, sizeof dir, "%s/%s", work, ck->name);
            struct stat run_st;
            if (ok && (lstat(dir, &run_st) != 0 || !S_ISDIR(run_st.st_mode))) ok = false;
            if (ok && !exists(dir, K, DCK_CKPT_MARKER)) ok = false;
            if (ok && kind && exists(dir, D, DCK_CKPT_MARKER)) ok = false;
            if (!ok) {
                snprintf(ck->what, sizeof ck->what,
                         "the run to kill %s checkpoint %ld did not die as planned (exit %d); log %s",
                         kind ? "while writing" : "after", kind ? D : K, r, log);
                ck->result = worst = 2;
                free(log);
                break;
            }
            free(log);
            cli_progress_steps(pdone += (uint64_t)(kind ? D : K), ptotal);
            r = train_run(&x, rl, ck->name, "--resume", f.resume_device[0] ? f.resume_device : NULL,
                          E, f.flip, &log);
            /* exit 1: it ran to the end, but re-checking the records the
             * interrupted run left after its checkpoint found a difference;
             * the comparison below names the step and the tensor */
            if (r != 0 && r != 1) {
                snprintf(ck->what, sizeof ck->what, "the resumed run failed (exit %d); log %s", r, log);
                ck->result = worst = 2;
                show_log(log);
                free(log);
                break;
            }
            if (kind && !log_has(log, "torn checkpoint")) {
                snprintf(ck->what, sizeof ck->what,
                         "the resumed run did not report the torn checkpoint %ld; log %s", D, log);
                ck->result = worst = 2;
                free(log);
                break;
            }
            free(log);
            cli_progress_steps(pdone += (uint64_t)(c.steps - K), ptotal);
            if (cli_dir_unchanged(ref_dir, ref_st.st_dev, ref_st.st_ino) ||
                cli_dir_unchanged(dir, run_st.st_dev, run_st.st_ino)) {
                snprintf(ck->what, sizeof ck->what, "%s (replaced during the runs): its recording would not be its "
                         "own; nothing is compared", dck_last_error());
                ck->result = worst = 2;
                break;
            }
            compare_runs(&x, "reference", ck->name, ck);
            if (ck->result > worst) worst = ck->result;
            if (!f.json) {
                if (ck->result == 0)
                    cli_info(CMD, "%s checkpoint %ld, resumed from %ld%s%s: identical",
                             kind ? "killed while writing" : "killed after", kind ? D : K, K,
                             rl ? " under " : "", rl ? rl : "");
            }
        }
    }
    cli_progress_end();
    cli_resume_check_result res = {checks, nchk, worst, c.steps, f.at, work, worst || !temp || f.keep};
    if (f.json) {
        bool oom = false;
        dck_status s = cli_json_print(cli_resume_check_json(&res, &oom), CLI_JSON_COMPACT, oom);
        if (s) {
            cli_fail(CMD, s);
            worst = 2;
        }
    } else {
        for (int i = 0; i < nchk; i++)
            if (checks[i].result == 1)
                printf("%s: DIFFERENT: %s\n", checks[i].name, cli_safe_line(checks[i].what));
            else if (checks[i].result == 2)
                cli_error(CMD, "%s: %s", checks[i].name, checks[i].what);
        char *title = cli_resume_check_title(&res);
        if (title) printf("%s\n", title);
        else worst = cli_fail(CMD, dck_oom(NULL));
        free(title);
    }
    if (cli_report_wanted(&f.rep)) {
        res.worst = worst;
        res.show_work = worst || !temp || f.keep;
        cli_resume_check_report(&f.rep, &res);
        if (cli_report_finish(&f.rep, worst == 0 ? DCK_EXIT_SAME : worst == 1 ? DCK_EXIT_DIFFERENT
                                                                              : DCK_EXIT_TROUBLE))
            worst = 2;
    }
    if (worst == 0 && temp && !f.keep) cli_remove_tree(work);
    return worst == 0 ? DCK_EXIT_SAME : worst == 1 ? DCK_EXIT_DIFFERENT : DCK_EXIT_TROUBLE;
}

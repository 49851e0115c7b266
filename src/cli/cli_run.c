/* Running a user's command as a child (repro, resume-check): its own
 * process group, stdin from /dev/null, stdout and stderr into files, a
 * timeout, and SIGINT/SIGTERM/SIGHUP passed on to the group; then the tail
 * of its stderr for the user when it failed. */
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

volatile sig_atomic_t cli_interrupted;
static void on_signal(int sig) { cli_interrupted = sig; }

void cli_run_catch_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

dck_status cli_create_new(const char *path, int *fd) {
    *fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, 0644);
    if (*fd >= 0) return DCK_OK;
    struct stat st;
    if (errno == EEXIST && lstat(path, &st) == 0)
        return dck_set_error(DCK_ERR_IO, "%s exists (%s) and this command creates it: refusing to write through or "
                                         "over it; remove it or choose another work folder",
                             path,
                             S_ISLNK(st.st_mode) ? "a symbolic link" : S_ISREG(st.st_mode) ? "a file" : "not a file");
    return dck_set_error(DCK_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
}

dck_status cli_dir_unchanged(const char *dir, dev_t dev, ino_t ino) {
    struct stat st;
    char real[PATH_MAX];
    const char *how = NULL;
    if (lstat(dir, &st) != 0) how = "is gone";
    else if (S_ISLNK(st.st_mode)) how = "is now a symbolic link";
    else if (!S_ISDIR(st.st_mode)) how = "is no longer a folder";
    else if (st.st_dev != dev || st.st_ino != ino) how = "is another folder than the one detcheck created";
    else if (dir[0] == '/' && (!realpath(dir, real) || strcmp(real, dir))) how = "now resolves to another path";
    return how ? dck_set_error(DCK_ERR_IO, "%s %s", dir, how) : DCK_OK;
}

dck_status cli_run_files_own(const char *const *paths, size_t n) {
    struct stat st[8];
    if (n > sizeof st / sizeof st[0]) return dck_set_error(DCK_ERR_INVALID, "cli_run_files_own: %zu files", n);
    for (size_t i = 0; i < n; i++) {
        if (lstat(paths[i], &st[i]) != 0) {
            st[i].st_ino = 0; /* absent: said where it matters */
            continue;
        }
        if (S_ISLNK(st[i].st_mode)) return dck_set_error(DCK_ERR_IO, "%s is a symbolic link", paths[i]);
        for (size_t j = 0; j < i; j++)
            if (st[j].st_ino && st[j].st_dev == st[i].st_dev && st[j].st_ino == st[i].st_ino)
                return dck_set_error(DCK_ERR_IO, "%s is the same file as %s", paths[i], paths[j]);
    }
    return DCK_OK;
}

int cli_run_child(char *const *argv, const char *const *env, const char *out, const char *err, double timeout,
                  double *seconds) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* the logs are created here, new, so that a file or link planted at
     * their names is refused with its name rather than truncated */
    int fo = -1, fe = -1;
    if (cli_create_new(out, &fo)) return CLI_RUN_NO_LOG;
    if (cli_create_new(err, &fe)) {
        close(fo);
        return CLI_RUN_NO_LOG;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        close(fo);
        close(fe);
        return -1;
    }
    if (pid == 0) {
        setpgid(0, 0);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        int in = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (in < 0 || dup2(in, 0) < 0 || dup2(fo, 1) < 0 || dup2(fe, 2) < 0) _exit(127);
        /* a NULL value unsets: a variable of the contract that this run
         * must not see, though the caller's environment has it */
        for (size_t i = 0; env && env[i]; i += 2)
            if (env[i + 1] ? setenv(env[i], env[i + 1], 1) : unsetenv(env[i])) _exit(127);
        execvp(argv[0], argv);
        fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(fo);
    close(fe);
    setpgid(pid, pid);
    int st, rc = -1;
    bool killed = false;
    double kill_at = 0;
    *seconds = 0;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        clock_gettime(CLOCK_MONOTONIC, &t);
        double el = (double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) * 1e-9;
        if (r == pid) {
            *seconds = el;
            if (rc == -1) rc = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
            break;
        }
        if (r < 0 && errno != EINTR) break;
        if (!killed && timeout > 0 && el > timeout) {
            kill(-pid, SIGKILL);
            killed = true;
            rc = -2;
        } else if (!killed && cli_interrupted) {
            /* SIGTERM first, so that the command may close its files */
            kill(-pid, SIGTERM);
            killed = true;
            kill_at = el + 5;
            rc = -3;
        } else if (rc == -3 && el > kill_at) {
            kill(-pid, SIGKILL);
            kill_at = 1e300;
        }
        struct timespec nap = {0, 10 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    kill(-pid, SIGKILL); /* what the command left running in its group */
    return rc;
}

void cli_run_describe(int st, double timeout, char *buf, size_t len) {
    if (st == CLI_RUN_NO_LOG) snprintf(buf, len, "was not started: %s", dck_last_error());
    else if (st == -1) snprintf(buf, len, "could not be started");
    else if (st == -2) snprintf(buf, len, "did not finish within %g s (--timeout): its process group was killed", timeout);
    else if (st == -3) snprintf(buf, len, "was interrupted");
    else if (st > 128) snprintf(buf, len, "was killed by signal %d (%s)", st - 128, strsignal(st - 128));
    else if (st == 127) snprintf(buf, len, "exited with status 127 (command not found?)");
    else snprintf(buf, len, "exited with status %d", st);
}

char *cli_file_tail(const char *path, int lines) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK); /* a link planted there is not ours */
    if (fd < 0) return NULL;
    struct stat st;
    char *buf = NULL;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        off_t from = st.st_size > 65536 ? st.st_size - 65536 : 0;
        size_t want = (size_t)(st.st_size - from);
        buf = malloc(want + 1);
        ssize_t got = buf ? pread(fd, buf, want, from) : -1;
        if (got < 0) {
            free(buf);
            buf = NULL;
        } else {
            buf[got] = 0;
            size_t n = (size_t)got;
            while (n && buf[n - 1] == '\n') buf[--n] = 0;
            char *p = buf + n;
            int seen = 0;
            while (p > buf) {
                if (p[-1] == '\n' && ++seen == lines) break;
                p--;
            }
            memmove(buf, p, strlen(p) + 1);
        }
    }
    close(fd);
    return buf;
}

void cli_print_tail(const char *cmd, const char *path, int lines) {
    char *t = cli_file_tail(path, lines);
    if (!t || !*t) {
        cli_error(cmd, "its stderr (%s) is empty", path);
        free(t);
        return;
    }
    cli_error(cmd, "its stderr, last %d lines (%s):", lines, path);
    cli_progress_clear();
    for (char *s = t, *e; s; s = e ? e + 1 : NULL) {
        e = strchr(s, '\n');
        if (e) *e = 0;
        fprintf(stderr, "  %s\n", cli_safe_line(s));
    }
    free(t);
}

static int remove_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

void cli_remove_tree(const char *dir) { nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

int cli_temp_workdir(const char *cmd, char *work, size_t n) {
    const char *t = getenv("TMPDIR");
    snprintf(work, n, "%.*s/detcheck-%s.XXXXXX", (int)(n > 96 ? n - 96 : 0), t && *t ? t : "/tmp", cmd);
    if (mkdtemp(work)) return 0;
    cli_error(cmd, "cannot create a temporary directory %s: %s", work, strerror(errno));
    return DCK_EXIT_TROUBLE;
}

void cli_absolute_dir(char *dir, size_t n) {
    char abs[PATH_MAX];
    if (realpath(dir, abs) && strlen(abs) + 64 < n) snprintf(dir, n, "%s", abs);
}

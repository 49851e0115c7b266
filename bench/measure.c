/* The benchmarks' timer (bench/lib.sh): runs one command and appends one
 * line to OUT:
 *     WALL_S CPU_S PEAK_RSS_KIB EXIT
 * wall time from fork to reaping, user+sys CPU time and peak resident set of
 * the command and every descendant it waited for (wait4's rusage, microsecond
 * resolution: GNU time prints only hundredths, too coarse for start-up
 * times), and its exit status (124: killed after TIMEOUT_S seconds, with its
 * whole process group; 128+N: killed by signal N).
 *
 *     measure OUT TIMEOUT_S CMD [ARGS...]
 *
 * measure exits with the command's status; its own stdout/stderr are the
 * command's. bench/measure.py does the same where there is no C compiler. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static volatile sig_atomic_t timed_out;
static pid_t child;
static void on_alarm(int sig) {
    (void)sig;
    timed_out = 1;
    if (child > 0) kill(-child, SIGKILL);
}

/* Interrupted (Ctrl-C, or the bench killed): the command is in its own
 * process group, out of reach of the terminal, so take it down too. */
static void on_stop(int sig) {
    if (child > 0) kill(-child, SIGKILL);
    signal(sig, SIG_DFL);
    raise(sig);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: measure OUT TIMEOUT_S CMD [ARGS...]\n");
        return 2;
    }
    const char *out = argv[1];
    double limit = atof(argv[2]);
    double t0 = now();
    child = fork();
    if (child < 0) {
        perror("measure: fork");
        return 2;
    }
    if (child == 0) {
        setpgid(0, 0); /* its own group: a timeout kills mpirun's ranks too */
        execvp(argv[3], argv + 3);
        fprintf(stderr, "measure: %s: %s\n", argv[3], strerror(errno));
        _exit(127);
    }
    setpgid(child, child);
    signal(SIGINT, on_stop);
    signal(SIGTERM, on_stop);
    signal(SIGHUP, on_stop);
    if (limit > 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_alarm;
        sigaction(SIGALRM, &sa, NULL);
        struct itimerval it = {{0, 0}, {(time_t)limit, (suseconds_t)((limit - (double)(time_t)limit) * 1e6)}};
        setitimer(ITIMER_REAL, &it, NULL);
    }
    int st;
    struct rusage ru;
    pid_t w;
    while ((w = wait4(child, &st, 0, &ru)) < 0 && errno == EINTR) {
    }
    double t1 = now();
    if (w < 0) {
        perror("measure: wait4");
        return 2;
    }
    int rc = timed_out ? 124 : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
                 (double)ru.ru_stime.tv_usec * 1e-6;
    FILE *f = fopen(out, "a");
    if (!f) {
        fprintf(stderr, "measure: %s: %s\n", out, strerror(errno));
        return 2;
    }
    fprintf(f, "%.6f %.6f %ld %d\n", t1 - t0, cpu, ru.ru_maxrss, rc);
    if (fclose(f) != 0) return 2;
    return rc;
}

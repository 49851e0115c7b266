#!/usr/bin/env python3
"""The benchmarks' timer where bench/measure.c cannot be built (same
interface, same output line):

    measure.py OUT TIMEOUT_S CMD [ARGS...]

appends "WALL_S CPU_S PEAK_RSS_KIB EXIT" to OUT: wall time, user+sys CPU time
and peak RSS of the command and the descendants it waited for (wait4), its
exit status (124 after TIMEOUT_S, the process group killed)."""
import os
import signal
import sys
import time


def main():
    if len(sys.argv) < 4:
        sys.stderr.write("usage: measure.py OUT TIMEOUT_S CMD [ARGS...]\n")
        return 2
    out, limit, cmd = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        try:
            os.setpgid(0, 0)
            os.execvp(cmd[0], cmd)
        except OSError as e:
            sys.stderr.write("measure: %s: %s\n" % (cmd[0], e.strerror))
        os._exit(127)
    try:
        os.setpgid(pid, pid)
    except OSError:
        pass
    timed_out = []

    def on_alarm(sig, frame):
        timed_out.append(1)
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass

    def on_stop(sig, frame):
        # the command is in its own process group, out of the terminal's reach
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_stop)
    if limit > 0:
        signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, limit)
    while True:
        try:
            _, st, ru = os.wait4(pid, 0)
            break
        except InterruptedError:
            continue
    t1 = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, 0)
    if timed_out:
        rc = 124
    elif os.WIFEXITED(st):
        rc = os.WEXITSTATUS(st)
    else:
        rc = 128 + os.WTERMSIG(st)
    with open(out, "a") as f:
        f.write("%.6f %.6f %d %d\n" % (t1 - t0, ru.ru_utime + ru.ru_stime, ru.ru_maxrss, rc))
    return rc


sys.exit(main())

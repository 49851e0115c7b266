"""Files and locks of a run directory: the Recorder's outputs, opened for
writing from their start but never through a link or into a FIFO, and the
directory's ``.lock`` (flock, as ``detcheck train`` takes it on its run
directory, src/train/train_loop.c)."""
import errno
import fcntl
import os
import socket
import stat

LOCK_FILE = ".lock"  # DCK_TRAIN_LOCK


def open_output(path):
    """A Recorder's file, for writing from its start: a new file or a regular
    one (a recording being replaced); never through a link or into a FIFO."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise ValueError("%s is a symbolic link; refusing to write through it" % path) from None
        raise ValueError("%s: cannot open for writing: %s" % (path, e.strerror)) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise ValueError("%s is not a regular file; refusing to write into it" % path)
    os.set_blocking(fd, True)
    os.ftruncate(fd, 0)
    return os.fdopen(fd, "wb")


def take_lock(out_dir):
    """flock(LOCK_EX) on out_dir/.lock, as detcheck train's take_lock: the
    kernel drops it when the process dies, so a killed run leaves no stale
    lock. The holder's pid and host are written there; a second writer is
    refused naming them. Returns the lock's descriptor."""
    p = os.path.join(out_dir, LOCK_FILE)
    try:  # O_NOFOLLOW: a link planted as .lock never truncates what it points at
        fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as e:
        raise ValueError("%s: cannot open the run's lock file: %s" % (p, e.strerror)) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        held = os.pread(fd, 256, 0).decode("utf-8", "replace").split()
        os.close(fd)
        if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise ValueError("%s: cannot lock: %s" % (p, e.strerror)) from None
        who = "a process whose pid is not yet recorded"
        if held and held[0].isdigit():
            who = "pid %s%s" % (held[0], " on host %s" % held[1] if len(held) > 1 else "")
        raise ValueError("%s: another detcheck.Recorder or detcheck train (%s) is writing into this run "
                         "directory (it holds %s); wait for it, or choose another directory"
                         % (out_dir, who, p)) from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, ("%d %s\n" % (os.getpid(), socket.gethostname())).encode(), 0)
    except OSError as e:
        os.close(fd)
        raise ValueError("%s: cannot write: %s" % (p, e.strerror)) from None
    return fd

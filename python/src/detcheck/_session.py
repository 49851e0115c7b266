"""The resume contract between a training script and ``detcheck
resume-check``, read from the environment the command sets:

- ``DETCHECK_RECORD=DIR``: record into DIR (:func:`detcheck.autorecord`,
  :meth:`detcheck.Recorder.from_env`, the callbacks).
- ``DETCHECK_STOP_AT=K``: stop after step K (an integer >= 1), once its
  checkpoint is complete.
- ``DETCHECK_RESUME=1``: resume from the last checkpoint under the
  checkpoint directory.
- ``DETCHECK_CHECKPOINT_DIR=DIR``: where the checkpoints go (each run of
  resume-check gets its own).
- ``DETCHECK_STOP_KILL=1``: after the checkpoint at K, the process SIGKILLs
  itself instead of stopping cleanly (a crash right after the checkpoint).

A clean stop is the process exiting 0 with its recording ending at step K
(after :meth:`Session.should_stop` said so and the checkpoint was saved).
:meth:`Session.stopped` is the precise form: it leaves ``DIR/stop.json``
(written atomically: a temporary name, fsync, rename): ``{"detcheck_stop":
1, "step": K, "checkpoint": "<absolute path or null>", "pid": PID}``,
which resume-check checks when present and requires with ``--kill``
(DETCHECK_STOP_KILL=1: the process dies by SIGKILL, and only stop.json
says that its checkpoint of K was complete).

Sealed stops: ``stopped(K, checkpoint, state=state)`` seals the checkpoint
from the state it was saved from (:func:`detcheck.seal`) before stop.json
says it is complete, and the resumed run calls
``session().resumed(checkpoint, state)`` once it has loaded it
(:func:`detcheck.verify_seal`: :class:`detcheck.SealError` when the state
loaded is not the state saved, or the checkpoint is unsealed)::

    def state():
        return {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step}
    torch.save(state(), path)
    detcheck.session().stopped(step, checkpoint=path, state=state())
    # the resumed run
    saved = torch.load(path)
    model.load_state_dict(saved["model"]); opt.load_state_dict(saved["optimizer"]); step = saved["step"]
    detcheck.session().resumed(path, state())   # the state as loaded, not the file read back
"""
import json
import os
import signal
import sys

from . import _lib
from ._settings import record_dir as _record_dir

ENV_STOP_AT = "DETCHECK_STOP_AT"
ENV_RESUME = "DETCHECK_RESUME"
ENV_CHECKPOINT_DIR = "DETCHECK_CHECKPOINT_DIR"
ENV_STOP_KILL = "DETCHECK_STOP_KILL"
STOP_FILE = "stop.json"


def _flag(name):
    v = os.environ.get(name, "").strip()
    if v not in ("", "0", "1"):
        raise ValueError("detcheck: %s=%r (0 or 1)" % (name, v))
    return v == "1"


def _stop_at():
    v = os.environ.get(ENV_STOP_AT, "").strip()
    if not v:
        return None
    try:
        n = int(v, 10)
    except ValueError:
        n = None
    if n is None or n < 1:
        raise ValueError("detcheck: %s=%r is not a step number (an integer >= 1)" % (ENV_STOP_AT, v))
    return n


def _fsync_tree(path):
    """fsync a checkpoint (a file, or a directory's files and the directory)
    so that it is on disk before stop.json says it is complete."""
    paths = []
    if os.path.isdir(path):
        for root, dirs, files in os.walk(path):
            paths += [os.path.join(root, f) for f in files]
            paths.append(root)
    elif os.path.exists(path):
        paths = [path]
    parent = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(parent):
        paths.append(parent)  # the checkpoint's own name
    for p in paths:
        try:
            fd = os.open(p, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            os.fsync(fd)
        except OSError:  # a directory fsync some filesystems refuse: the data is still written
            pass
        finally:
            os.close(fd)


class Session:
    """What ``detcheck resume-check`` asks of this run (see the module).

    ``record_dir``: DETCHECK_RECORD (None when unset, and on ranks other
    than 0 when WORLD_SIZE > 1); ``stop_at``: DETCHECK_STOP_AT as an int or
    None; ``resume``: DETCHECK_RESUME=1; ``kill``: DETCHECK_STOP_KILL=1."""

    def __init__(self):
        self.stop_at = _stop_at()
        self.resume = _flag(ENV_RESUME)
        self.kill = _flag(ENV_STOP_KILL)
        self.record_dir = _record_dir()

    def __repr__(self):
        return "detcheck.Session(record_dir=%r, stop_at=%r, resume=%r, kill=%r, checkpoint_dir=%r)" % (
            self.record_dir, self.stop_at, self.resume, self.kill, os.environ.get(ENV_CHECKPOINT_DIR) or None)

    def checkpoint_dir(self, default=None):
        """DETCHECK_CHECKPOINT_DIR when set (not empty), else ``default``:
        where the script saves its checkpoints and, with ``resume``, loads
        the last one from."""
        v = os.environ.get(ENV_CHECKPOINT_DIR, "")
        return v if v else default

    def should_stop(self, step):
        """True once the last completed step ``step`` reached stop_at
        (never without DETCHECK_STOP_AT). Save the checkpoint of this step,
        then stop (exit 0, step K the last one recorded), or call
        :meth:`stopped` -- which DETCHECK_STOP_KILL=1 (``--kill``) needs."""
        if isinstance(step, bool):
            raise TypeError("detcheck.session().should_stop: step %r is a bool, not an integer" % (step,))
        try:
            import operator
            step = operator.index(step)
        except TypeError:
            raise TypeError("detcheck.session().should_stop: step %r (%s) is not an integer"
                            % (step, type(step).__name__)) from None
        return self.stop_at is not None and step >= self.stop_at

    def stopped(self, step, checkpoint=None, state=None):
        """Called right after the checkpoint of step ``step`` is saved:
        with ``state`` (the state the checkpoint was saved from: what
        ``detcheck.seal`` takes), seals ``checkpoint`` from it first
        (step ``step``); syncs ``checkpoint`` (a file or directory, and its
        seal) to disk, flushes and closes the Recorders writing into
        DETCHECK_RECORD (their last step is on disk), writes ``stop.json``
        there atomically, and with DETCHECK_STOP_KILL=1 SIGKILLs this
        process (it does not return). Returns the stop.json path (None
        when nothing is recorded). Optional for a clean stop; required with
        DETCHECK_STOP_KILL=1."""
        import operator
        step = operator.index(step)
        if state is not None:
            if checkpoint is None:
                raise ValueError("detcheck.session().stopped: state given without the checkpoint to seal")
            from ._seal import seal
            seal(checkpoint, state, step=step)
        ckpt = None
        if checkpoint is not None:
            ckpt = os.path.abspath(os.fspath(checkpoint))
            _fsync_tree(ckpt)
            if state is not None and not os.path.isdir(ckpt):
                from ._seal import seal_path
                _fsync_tree(seal_path(ckpt))  # a file's seal lies beside it
        path = None
        if self.record_dir is not None:
            _close_recorders(self.record_dir)
            os.makedirs(self.record_dir, exist_ok=True)
            doc = {"detcheck_stop": 1, "step": step, "checkpoint": ckpt, "pid": os.getpid()}
            data = (json.dumps(doc) + "\n").encode()
            path = os.path.join(self.record_dir, STOP_FILE)
            _lib.check(_lib.write_file_atomic(path.encode(), data, len(data)))
        if self.kill:
            for f in (sys.stdout, sys.stderr):
                try:
                    f.flush()
                except Exception:
                    pass
            os.kill(os.getpid(), signal.SIGKILL)
        return path

    def resumed(self, checkpoint, state, require=True):
        """Called right after a resumed run loaded ``checkpoint`` into
        ``state`` (and restored its RNG states), before its first step:
        ``detcheck.verify_seal(checkpoint, state, require=require)``, so a
        resume from a checkpoint that :meth:`stopped` sealed raises
        :class:`detcheck.SealError` when what was loaded is not what was
        saved (or, unless ``require=False``, when it is unsealed). Returns
        the :class:`detcheck.SealResult`."""
        from ._seal import verify_seal
        return verify_seal(checkpoint, state, require=require)


def _same_dir(a, b):
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def _close_recorders(d):
    """Finishes a step taken but not finished (its loss is then absent) and
    closes every open Recorder writing into d."""
    from ._recorder import _OPEN
    for rec in list(_OPEN):
        if rec.closed or rec.out_dir is None or not _same_dir(rec.out_dir, d):
            continue
        if rec.pending is not None:
            rec.finish(rec.pending)
        auto = getattr(rec, "_auto", None)
        if auto is not None:
            auto.close()  # its optimizer hook goes too
        else:
            rec.close()


def session():
    """The resume contract of this run, read from the environment now
    (``DETCHECK_RECORD``, ``DETCHECK_STOP_AT``, ``DETCHECK_RESUME``,
    ``DETCHECK_CHECKPOINT_DIR``, ``DETCHECK_STOP_KILL``); a bad value
    raises ValueError naming the variable. See :class:`Session`."""
    return Session()

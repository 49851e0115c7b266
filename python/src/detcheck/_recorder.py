"""Recording a training run for ``detcheck bisect``: one trajectory line per
step (the trainer's format, src/runs/trajectory.c) and, every ``every``
steps, the digest of every gradient, parameter and optimizer state tensor
in a compact binary side file.

Side file ``tensor_digests.bin`` (all integers little-endian):

    header   8 bytes "DCKTDIG\\0", u32 version (1), u32 flags (0)
    records  u8 type, then
      1 NAME  u32 id, u8 kind (0 gradient, 1 parameter, 2 optimizer state,
              3 state), u16 length, the name (UTF-8); ids count up from 0,
              each named once, before its first use
      2 STEP  i64 step, u32 count, count x (u32 id, u64 high64, u64 low64)

A torn last record (a killed run) is ignored by readers.

State entries (kind 3, :mod:`detcheck._state`) hold what a resume must
restore besides weights and optimizer state: the step's batch
(``data.batch``), the RNG states at the step's start (``rng.torch``,
``rng.cuda``, ``rng.numpy``, ``rng.python``), each param group's lr
(``lr.N``), the GradScaler's state (``scaler.*``), EMA weights (``ema.*``)
and, on the first step a process records, the weights it started that step
from (``start.NAME``). They are not part of the step's root digest (the
trajectory's root covers kinds 0-2 only, as before), and come first in a
step record, as ``detcheck bisect`` orders them: what the step started from
explains what follows.

"The step's start" is the first forward call of the model in training mode
after the previous step was taken (a forward pre-hook on the model's root
module, installed when the Recorder is given the model), or
:meth:`Recorder.start_step`; without either, the time of :meth:`Recorder.step`.
Under ``detcheck resume-check`` (DETCHECK_STOP_AT, DETCHECK_RESUME or
DETCHECK_CHECKPOINT_DIR set) a traced step's events begin there too.

One writer per run directory: a Recorder holds flock(LOCK_EX) on
``out_dir/.lock`` (the file and the lock ``detcheck train`` takes on its run
directory, src/train/train_loop.c) until it is closed, and writes its pid and
host there, so that a second writer is refused with the holder named.
"""
import ctypes
import math
import operator
import os
import struct
import time
import weakref

from . import _lib
from . import _state
from . import _trace
from ._digest import digest_struct
from ._files import open_output, take_lock
from ._settings import from_env, write_run_json

MAGIC = b"DCKTDIG\0"
VERSION = 1
SIDE_FILE = "tensor_digests.bin"
TRAJECTORY = "trajectory.jsonl"
RUN_JSON = "run.json"
MAX_NAME_BYTES = 0xFFFF  # the u16 length of a name record
_STEP_MAX = (1 << 63) - 1
KINDS = ("gradient", "parameter", "optimizer", "state")
STATE = 3
# the order of kinds in a step record: state first, as detcheck bisect sorts
# them (src/runs/recording.c, dck_rec_kind_rank)
KIND_RANK = (1, 2, 3, 0)
# the Recorders writing now, for detcheck.session().stopped() to close
_OPEN = weakref.WeakSet()
_NAME, _STEP = 1, 2


def _f32_bits(v):
    return struct.unpack("<I", struct.pack("<f", v))[0]


def _json_float(v):
    """The shortest decimal that reads back as the same float32 (as the
    trainer writes), or null for NaN and infinities (JSON has none)."""
    if v is None or not math.isfinite(v):
        return "null"
    f = struct.unpack("<f", struct.pack("<f", v))[0]
    for p in range(1, 18):
        s = "%.*g" % (p, f)
        if struct.unpack("<f", struct.pack("<f", float(s)))[0] == f:
            return s
    return repr(f)


def _scalar(v, what="value"):
    if v is None:
        return None
    try:
        if hasattr(v, "item"):
            v = v.detach().float().item() if hasattr(v, "detach") else v.item()
        return float(v)
    except (TypeError, ValueError, RuntimeError) as e:
        raise TypeError("detcheck.Recorder: %s %r is not a number (%s)" % (what, v, e)) from None


def _step_number(step):
    """The step as an int in [0, 2^63): integers only (int, NumPy or 0-d
    torch integers), no bool, no float (1.5 is not truncated to 1)."""
    if isinstance(step, bool) or type(step).__name__ == "bool_":
        raise TypeError("detcheck.Recorder: step %r is a bool, not an integer" % (step,))
    try:
        n = operator.index(step)
    except TypeError:
        raise TypeError("detcheck.Recorder: step %r (%s) is not an integer" % (step, type(step).__name__)) from None
    if n < 0 or n > _STEP_MAX:
        raise ValueError("detcheck.Recorder: step %d outside 0..%d (the side file's i64)" % (n, _STEP_MAX))
    return n


def _name_bytes(kind, name):
    """A recorded tensor's name as UTF-8; a name that has no UTF-8 form (a
    lone surrogate) or is longer than a record holds is refused, never
    replaced or cut."""
    try:
        nb = name.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError("detcheck.Recorder: %s name %r cannot be written as UTF-8 (%s)"
                         % (KINDS[kind], name, e.reason)) from None
    if len(nb) > MAX_NAME_BYTES:
        raise ValueError("detcheck.Recorder: %s name %.60r... is %d bytes of UTF-8 (a record holds at most %d)"
                         % (KINDS[kind], name, len(nb), MAX_NAME_BYTES))
    return nb


class _Null:
    """Where a rank that records nothing writes (Recorder(None))."""
    closed = False

    def write(self, data):
        pass

    def flush(self):
        pass


class Recorder:
    """Records a run into ``out_dir`` for ``detcheck bisect``.

    ``Recorder(out_dir, every=1)``: call :meth:`step` once per optimizer step,
    after ``optimizer.step()`` and before ``zero_grad()``, with consecutive
    step numbers. Each call appends a line to ``out_dir/trajectory.jsonl``
    (step, loss, loss_bits, grad_norm, grad_norm_bits, lr and, on recorded
    steps, root); every ``every`` steps (``step % every == 0``) it also
    digests every gradient, parameter and optimizer state tensor into
    ``out_dir/tensor_digests.bin``. ``detcheck bisect RUN_A RUN_B`` then names
    the first step and the first tensor where two runs part. An existing
    recording in out_dir is replaced (never through a symlink or into a
    FIFO). The Recorder locks out_dir (``.lock``, as detcheck train) until
    :meth:`close`; a second writer raises ValueError naming the holder's pid
    and host.

    ``model`` / ``optimizer``: what :meth:`step` digests when not given them,
    and the model traced. ``trace``: ``"modules"`` (the default with a
    model), ``"ops"`` or ``"none"``: hooks installed now record each traced
    step's module calls or ATen ops, with the digests of their tensors, into
    ``out_dir/trace.bin`` (see :mod:`detcheck._trace`; read back with
    :func:`detcheck.read_trace`). ``trace_steps``: the steps traced (None:
    all); ``trace_limit_events``: events per step at most (past it the
    step is marked truncated). ``dump_step=K``: step K's traced outputs go
    to ``out_dir/dump_step_K/trace.safetensors`` (tensor names
    ``"%05d.output.%d"``), at most ``dump_limit_bytes`` of them (then a
    warning). ``out_dir/run.json`` (argv and the determinism settings) is
    written now; each trajectory line has ``step_time_s``.

    Each recorded step also holds state entries (kind 3, not part of the
    root; see the module): the RNG states at the step's start, the batch,
    every param group's lr, and ``scaler`` (a GradScaler) and ``ema`` (a
    module, an AveragedModel or a dict of tensors) when given. With a
    model, a forward pre-hook on its root module marks the step's start and
    collects its inputs as the batch (removed by :meth:`close`)."""

    def __init__(self, out_dir, every=1, model=None, optimizer=None, trace=None, trace_steps=None,
                 trace_limit_events=_trace.DEFAULT_LIMIT_EVENTS, dump_step=None, dump_limit_bytes=1 << 30,
                 scaler=None, ema=None):
        if isinstance(every, bool) or int(every) < 1:
            raise ValueError("detcheck.Recorder: every must be an integer >= 1, not %r" % (every,))
        if trace is None:
            trace = "modules" if model is not None else "none"
        if trace not in _trace.MODES:
            raise ValueError("detcheck.Recorder: trace must be one of %s, not %r" % (", ".join(_trace.MODES), trace))
        if trace != "none" and model is None:
            raise ValueError("detcheck.Recorder: trace=%r needs the model (Recorder(..., model=model))" % trace)
        if isinstance(trace_limit_events, bool) or not 1 <= int(trace_limit_events) <= _trace.MAX_LIMIT_EVENTS:
            raise ValueError("detcheck.Recorder: trace_limit_events must be in 1..%d, not %r"
                             % (_trace.MAX_LIMIT_EVENTS, trace_limit_events))
        if dump_step is not None:
            dump_step = _step_number(dump_step)
            if trace == "none":
                raise ValueError("detcheck.Recorder: dump_step=%d needs a trace (trace='modules' or 'ops')" % dump_step)
        if isinstance(dump_limit_bytes, bool) or int(dump_limit_bytes) < 0:
            raise ValueError("detcheck.Recorder: dump_limit_bytes must be >= 0, not %r" % (dump_limit_bytes,))
        self.out_dir = None if out_dir is None else str(out_dir)
        self.every = int(every)
        self.model, self.optimizer = model, optimizer
        self.scaler, self.ema = scaler, _state.check_ema(ema)
        self.trace = trace
        self.trace_steps = None if trace_steps is None else frozenset(_step_number(x) for x in trace_steps)
        self.trace_limit_events = int(trace_limit_events)
        self.dump_step = dump_step
        self.dump_limit_bytes = int(dump_limit_bytes)
        self._lock = None
        self._tracer = None
        self._tfile = None
        self._tids = {}
        self._t_prev = None
        self._dumped = None
        self._loss = None
        self._auto = None
        self._hook = None
        self._start = None  # what the next step started from: (rng entries, start entries or None)
        self._fwd = []  # digests of the model's forward inputs since the last step
        self._started = False  # start.* written (the first step this process records)
        self._in_step = False  # the model's first forward of this step was seen
        # under resume-check a step's trace starts at the step's start: a resumed run skips data
        # (ops before its first forward) that the uninterrupted one does not
        self._trace_from_start = any(os.environ.get(v) for v in
                                     ("DETCHECK_STOP_AT", "DETCHECK_RESUME", "DETCHECK_CHECKPOINT_DIR"))
        if self.out_dir is None:
            self._traj, self._side = _Null(), _Null()
        else:
            os.makedirs(self.out_dir, exist_ok=True)
            self._lock = take_lock(self.out_dir)  # before anything in the directory is touched
            try:
                self._traj = open_output(os.path.join(self.out_dir, TRAJECTORY))
                self._side = open_output(os.path.join(self.out_dir, SIDE_FILE))
                tpath = os.path.join(self.out_dir, _trace.TRACE_FILE)
                if trace != "none":
                    self._tfile = open_output(tpath)
                    self._tfile.write(_trace.MAGIC + struct.pack("<II", _trace.VERSION, 0))
                    self._tfile.flush()
                elif os.path.lexists(tpath):  # a trace of an earlier recording here is stale
                    os.unlink(tpath)
                write_run_json(self.out_dir)
                if trace != "none":
                    self._tracer = _trace.Tracer(model, trace, self.trace_limit_events, self.dump_limit_bytes)
                    # the first step's number is not known yet: collect, keep it if it is traced
                    self._tracer.reset(True, dump_step is not None)
            except BaseException:
                self._traj = getattr(self, "_traj", None)
                self.close()
                raise
        self._side.write(MAGIC + struct.pack("<II", VERSION, 0))
        self._side.flush()
        self._ids = {}
        self._last = None
        self._pending = None
        if model is not None and hasattr(model, "register_forward_pre_hook"):
            # first among the model's pre-hooks: the RNG states before anything consumes them; a weak
            # reference, so that the model does not keep the Recorder (and its lock) alive
            ref = weakref.ref(self)

            def pre(module, args, kwargs):
                r = ref()
                if r is not None:
                    r._forward_pre(module, args, kwargs)
            self._hook = model.register_forward_pre_hook(pre, with_kwargs=True, prepend=True)
        if self.out_dir is not None:
            _OPEN.add(self)

    @classmethod
    def from_env(cls, model=None, optimizer=None, **kwargs):
        """A Recorder into ``$DETCHECK_RECORD`` (what ``detcheck repro``
        sets), or None when it is unset or empty (then nothing is changed).
        Applies ``DETCHECK_THREADS`` and ``DETCHECK_DETERMINISTIC`` first;
        ``DETCHECK_TRACE`` (modules, the default; ops; none),
        ``DETCHECK_TRACE_STEPS`` (1,3,5-8) and ``DETCHECK_DUMP_STEP`` choose
        the trace. ``kwargs`` go to the constructor and win over the
        environment. With ``WORLD_SIZE`` > 1 only rank 0 records."""
        return from_env(cls, model=model, optimizer=optimizer, **kwargs)

    @property
    def closed(self):
        """True once :meth:`close` ran (for a Recorder(None): never)."""
        t = getattr(self, "_traj", None)
        return t is None or (not isinstance(t, _Null) and t.closed)

    def loss(self, value):
        """Keeps ``value`` (a float or 0-d tensor) as the loss of the next
        recorded step that is not given one (for :func:`detcheck.autorecord`,
        which records inside ``optimizer.step()``). Returns value."""
        self._loss = value
        return value

    def _next_recorded(self):
        """Whether the next step writes digests (unknown before the first
        step: then it may)."""
        return self._last is None or (self._last + 1) % self.every == 0

    def _capture_start(self, model, optimizer):
        """The step's start: the RNG states now and, until the first step
        this process records is written, the weights (start.NAME)."""
        rng = [(STATE, n, d) for n, d in _state.rng_states()]
        start = None
        if not self._started and (model is not None or optimizer is not None):
            start = [(STATE, "start." + n, d) for k, n, d in self._collect(model, optimizer, False, True) if k == 1]
        return rng, start

    def _mark_in_step(self):
        if not self._in_step:
            self._in_step = True
            if self._trace_from_start and self._tracer is not None:
                self._tracer.drop_collected()

    def _forward_pre(self, module, args, kwargs):
        # an evaluation forward between two steps is not part of either
        if self.closed or not getattr(module, "training", True):
            return
        self._mark_in_step()
        if not self._next_recorded():
            return
        tr = self._tracer
        if tr is not None:
            tr.paused += 1  # the Recorder's own work is not traced
        try:
            if self._start is None:
                try:
                    self._start = self._capture_start(self.model, self.optimizer)
                except Exception:  # the step's take() meets it again and raises there, not in forward
                    self._start = None
            self._fwd.extend(_state.leaf_digests((args, kwargs), tensors_only=True))
        finally:
            if tr is not None:
                tr.paused = max(0, tr.paused - 1)

    def start_step(self, model=None, optimizer=None):
        """Marks the next step's start now: its RNG states (and, on the
        first step this process records, its starting weights) are taken
        here rather than at the model's first forward call, and forward
        inputs seen before are not its batch. For loops whose model is not
        called through its root module (a LightningModule's training_step),
        or that consume random numbers before the forward call that belong
        to the step."""
        model = self.model if model is None else model
        optimizer = self.optimizer if optimizer is None else optimizer
        self._fwd = []
        self._in_step = False
        self._mark_in_step()
        self._start = self._capture_start(model, optimizer) if self._next_recorded() else None

    def _state_entries(self, model, optimizer, batch, scaler, ema):
        """The step's kind-3 entries, sorted by name."""
        start = self._start if self._start is not None else self._capture_start(model, optimizer)
        rng, st = start
        out = list(rng)
        if st is not None and not self._started:
            out += st
        ds = _state.leaf_digests(batch) if batch is not None else self._fwd
        if ds:
            out.append((STATE, "data.batch", _state.combine(ds)))
        out += [(STATE, n, d) for n, d in _state.lr_states(optimizer)]
        out += [(STATE, n, d) for n, d in _state.scaler_states(self.scaler if scaler is None else scaler)]
        out += [(STATE, n, d) for n, d in _state.ema_states(self.ema if ema is None else _state.check_ema(ema))]
        import functools
        enc = {id(e): _name_bytes(STATE, e[1]) for e in out}
        out.sort(key=functools.cmp_to_key(lambda a, b: _lib.name_compare(enc[id(a)], enc[id(b)])))
        return out, st is not None

    def _traced(self, step):
        return self.trace_steps is None or step in self.trace_steps or step == self.dump_step

    def close(self):
        """Flushes and closes the files, removes the model's trace hooks and
        step-start hook and releases the directory's lock (also at garbage
        collection)."""
        _OPEN.discard(self)
        h, self._hook = getattr(self, "_hook", None), None
        if h is not None:
            h.remove()
        tr, self._tracer = getattr(self, "_tracer", None), None
        if tr is not None:
            tr.close()  # the model's hooks go
        try:
            for f in (getattr(self, "_traj", None), getattr(self, "_side", None), getattr(self, "_tfile", None)):
                if f and not f.closed and not isinstance(f, _Null):
                    f.flush()
                    os.fsync(f.fileno())
                    f.close()
        finally:
            fd, self._lock = getattr(self, "_lock", None), None
            if fd is not None:
                os.close(fd)  # the lock goes last

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


    def digests(self, model=None, optimizer=None, grads=True, params=True):
        """The digests a recorded step takes: a list of (kind, name, hex)
        in order (gradients, parameters, optimizer state; model order in
        each, as detcheck names it)."""
        return [(KINDS[k], n, _lib.hex_of(d)) for k, n, d in self._collect(model, optimizer, grads, params)]

    def _collect(self, model, optimizer, grads, params):
        out = []
        names = {}
        if model is not None:
            for n, p in model.named_parameters():
                names[id(p)] = n
                if grads and p.grad is not None:
                    out.append((0, n, digest_struct(p.grad)))
                if params:
                    out.append((1, n, digest_struct(p)))
            if params:
                for n, b in model.named_buffers():
                    out.append((1, n, digest_struct(b)))
        if optimizer is not None:
            import torch
            for gi, group in enumerate(optimizer.param_groups):
                for pi, p in enumerate(group["params"]):
                    pname = names.get(id(p), "group%d.param%d" % (gi, pi))
                    if model is None and grads and p.grad is not None:
                        out.append((0, pname, digest_struct(p.grad)))
                    if model is None and params:
                        out.append((1, pname, digest_struct(p)))
                    for k, v in optimizer.state.get(p, {}).items():
                        if isinstance(v, torch.Tensor):
                            out.append((2, "%s.%s" % (pname, k), digest_struct(v)))
        # model order within each kind, as detcheck bisect lists them
        import functools
        enc = {id(e): _name_bytes(e[0], e[1]) for e in out}

        def cmp(a, b):
            if a[0] != b[0]:
                return KIND_RANK[a[0]] - KIND_RANK[b[0]]
            return _lib.name_compare(enc[id(a)], enc[id(b)])
        out.sort(key=functools.cmp_to_key(cmp))
        return out

    def step(self, step, loss=None, grad_norm=None, lr=None, model=None, optimizer=None, grads=True, batch=None,
             scaler=None, ema=None):
        """Records step ``step`` (an int, one more than the last one).

        Steps are integers in 0..2^63-1 (int, NumPy or 0-d torch integers):
        a bool, a float or a string raises TypeError, a negative, too large
        or out-of-order step ValueError. Tensor names must be UTF-8 and at
        most 65535 bytes (ValueError naming the tensor). A call that raises
        writes nothing and leaves the Recorder as it was: the step is not
        counted and may be recorded again.

        ``loss`` and ``grad_norm``: floats or 0-d tensors (recorded as
        float32 bits, as the trainer does; an absent one is written as
        ``null`` with bits ``00000000``); ``lr``: taken from the
        optimizer's first group when not given. On a recorded step the
        digests of the model's gradients (``grads=True``), parameters and
        buffers, and the optimizer's state tensors are written and their root
        digest goes into the trajectory line, with the step's state entries
        (not part of the root): ``batch`` (any nest of dicts, lists and
        tuples of tensors, arrays, numbers and strings) is digested as
        ``data.batch`` (else the model's forward inputs of the step, when the
        Recorder has the model); ``scaler`` (a GradScaler) and ``ema`` (a
        module, an AveragedModel or a dict of tensors) win over the
        constructor's. Returns the root (hex) or None."""
        if self._pending is not None:
            raise ValueError("detcheck.Recorder: step %d taken but not finished" % self._pending[0])
        kept = self._loss
        if loss is None:
            loss, self._loss = self._loss, None
        saved = self._state()
        if self._tracer is not None:
            self._tracer.active = False  # the Recorder's own work (loss.item()) is not traced
        try:
            loss, grad_norm = _scalar(loss, "loss"), _scalar(grad_norm, "grad_norm")  # before anything is written
            rec = self.take(step, lr=lr, model=model, optimizer=optimizer, grads=grads, batch=batch,
                            scaler=scaler, ema=ema)
            return self.finish(rec, loss=loss, grad_norm=grad_norm)
        except BaseException:
            self._restore(saved)  # the step is not counted: its digests go too
            self._loss = kept
            raise

    def _state(self):
        return (self._side.tell() if hasattr(self._side, "tell") else 0,
                self._traj.tell() if hasattr(self._traj, "tell") else 0,
                self._tfile.tell() if self._tfile is not None else 0,
                dict(self._ids), dict(self._tids), self._last, self._pending, self._t_prev, self._dumped,
                self._tracer.snapshot() if self._tracer is not None else None,
                self._start, list(self._fwd), self._started, self._in_step)

    def _restore(self, saved):
        (side, traj, tpos, self._ids, self._tids, self._last, self._pending, self._t_prev, dumped, tsnap,
         self._start, self._fwd, self._started, self._in_step) = saved
        if self._tracer is not None and tsnap is not None:
            self._tracer.restore(tsnap)  # the step's events, to record it again
        if self._dumped is not None and self._dumped != dumped:  # a dump this step wrote goes too
            try:
                os.unlink(self._dumped)
            except OSError:
                pass
        self._dumped = dumped
        for f, pos in ((self._side, side), (self._traj, traj), (self._tfile, tpos)):
            if f is not None and not isinstance(f, _Null) and not f.closed:
                try:
                    f.flush()
                except OSError:
                    pass
                f.seek(pos)
                f.truncate()

    def _append(self, f, data, saved):
        """Writes one whole record, or nothing: a failed write is cut back."""
        try:
            f.write(data)
            f.flush()
        except BaseException:
            self._restore(saved)
            raise

    def take(self, step, lr=None, model=None, optimizer=None, grads=True, batch=None, scaler=None, ema=None):
        """The first half of :meth:`step`, for callers that learn the loss
        after the gradients are gone (the transformers Trainer logs it after
        ``zero_grad()``): checks the step number, takes the step's digests
        now (on a recorded step) into the side file, and returns a pending
        record; :meth:`finish` then writes its trajectory line. Arguments as
        :meth:`step` (``batch``, ``scaler``, ``ema`` too). One record at a time: the next ``take`` or ``step``
        needs it finished."""
        if self._pending is not None:
            raise ValueError("detcheck.Recorder: step %d taken but not finished" % self._pending[0])
        step = _step_number(step)
        if self._last is not None and step != self._last + 1:
            raise ValueError("detcheck.Recorder: step %d after step %d (steps must be consecutive)"
                             % (step, self._last))
        model = self.model if model is None else model
        optimizer = self.optimizer if optimizer is None else optimizer
        if lr is None and optimizer is not None and optimizer.param_groups:
            lr = optimizer.param_groups[0].get("lr")
        lr = _scalar(lr, "lr")
        now = time.perf_counter()
        saved = self._state()
        tr = self._tracer
        if tr is not None:
            tr.active = False  # the Recorder's own work is not traced
        try:
            root = self._take(step, lr, model, optimizer, grads, saved, batch, scaler, ema)
        except BaseException:
            self._restore(saved)
            raise
        self._start, self._fwd, self._in_step = None, [], False  # the next step starts afresh
        if tr is not None:
            nxt = step + 1
            tr.reset(self._traced(nxt), nxt == self.dump_step)
        self._last = step
        self._pending = (step, lr, root, None if self._t_prev is None else now - self._t_prev)
        self._t_prev = now
        return self._pending

    def _take(self, step, lr, model, optimizer, grads, saved, batch, scaler, ema):
        # everything is computed before anything is written: a step that
        # raises leaves the files and the Recorder as they were
        root = None
        if self._tracer is not None and self._traced(step):
            self._tracer.check_step(step)  # CUDA tensors traced, none digested: refused, not written
        has_model = model is not None or optimizer is not None
        if step % self.every == 0 and (has_model or batch is not None):
            recs = self._collect(model, optimizer, grads, True) if has_model else []
            state, started = self._state_entries(model, optimizer, batch, scaler, ema)
            ids, new_names, out = {}, [], []
            for k, n, d in state + recs:
                i = self._ids.get((k, n), ids.get((k, n)))
                if i is None:
                    i = ids[(k, n)] = len(self._ids) + len(ids)
                    nb = _name_bytes(k, n)
                    new_names.append(struct.pack("<BIBH", _NAME, i, k, len(nb)) + nb)
                out.append(struct.pack("<IQQ", i, d.high64, d.low64))
            data = b"".join(new_names) + struct.pack("<BqI", _STEP, step, len(out)) + b"".join(out)
            if has_model:  # the root covers kinds 0-2 only: state entries leave it as it was
                names = (ctypes.c_char_p * max(1, len(recs)))(
                    *[("%s/%s" % (KINDS[k], n)).encode() for k, n, _ in recs])
                digs = (_lib.Digest * max(1, len(recs)))(*[d for _, _, d in recs])
                root = _lib.hex_of(_lib.root_digest(names, digs, len(recs)))
            self._append(self._side, data, saved)
            self._ids.update(ids)
            self._started = self._started or started
        tr = self._tracer
        if tr is not None and self._traced(step):
            data, new = _trace.step_record(step, tr.events, tr.truncated, self._tids)
            self._append(self._tfile, data, saved)
            self._tids.update(new)
            if step == self.dump_step and tr.dumping:
                d = os.path.join(self.out_dir, "dump_step_%d" % step)
                os.makedirs(d, exist_ok=True)
                path = os.path.join(d, "trace.safetensors")
                _trace.write_dump(path, step, self.trace, tr.dump, tr.dump_full)
                self._dumped = path
        return root

    @property
    def pending(self):
        """The record :meth:`take` returned and :meth:`finish` has not
        written yet, or None."""
        return self._pending

    def finish(self, pending, loss=None, grad_norm=None):
        """Writes the trajectory line of the record :meth:`take` returned,
        with its ``loss`` and ``grad_norm`` (as :meth:`step`; None: absent).
        Returns the step's root (hex) or None."""
        if pending is None or pending is not self._pending:
            raise ValueError("detcheck.Recorder: finish() of a record that is not the pending one")
        step, lr, root, dt = pending
        loss, grad_norm = _scalar(loss, "loss"), _scalar(grad_norm, "grad_norm")
        line = '{"step":%d,"loss":%s,"loss_bits":"%08x","grad_norm":%s,"grad_norm_bits":"%08x","lr":%s' % (
            step, _json_float(loss), _f32_bits(loss if loss is not None else 0.0),
            _json_float(grad_norm), _f32_bits(grad_norm if grad_norm is not None else 0.0),
            _json_float(lr))
        line += ',"step_time_s":%s' % ("null" if dt is None else "%.9g" % dt)
        if root:
            line += ',"root":"%s"' % root
        self._append(self._traj, (line + "}\n").encode(), self._state())
        self._pending = None  # finished only once its line is written
        return root

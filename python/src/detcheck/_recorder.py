"""Recording a training run for ``detcheck bisect``: one trajectory line per
step (the trainer's format, src/train/train_loop.c) and, every ``every``
steps, the digest of every gradient, parameter and optimizer state tensor
in a compact binary side file.

Side file ``tensor_digests.bin`` (all integers little-endian):

    header   8 bytes "DCKTDIG\\0", u32 version (1), u32 flags (0)
    records  u8 type, then
      1 NAME  u32 id, u8 kind (0 gradient, 1 parameter, 2 optimizer state),
              u16 length, the name (UTF-8); ids count up from 0, each named
              once, before its first use
      2 STEP  i64 step, u32 count, count x (u32 id, u64 high64, u64 low64)

A torn last record (a killed run) is ignored by readers.
"""
import ctypes
import json
import math
import os
import struct

from . import _lib
from ._digest import digest_struct

MAGIC = b"DCKTDIG\0"
VERSION = 1
SIDE_FILE = "tensor_digests.bin"
TRAJECTORY = "trajectory.jsonl"
KINDS = ("gradient", "parameter", "optimizer")
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


def _scalar(v):
    if v is None:
        return None
    if hasattr(v, "item"):
        v = v.detach().float().item() if hasattr(v, "detach") else v.item()
    return float(v)


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
    recording in out_dir is replaced."""

    def __init__(self, out_dir, every=1):
        if int(every) < 1:
            raise ValueError("detcheck.Recorder: every must be >= 1")
        self.out_dir = None if out_dir is None else str(out_dir)
        self.every = int(every)
        if self.out_dir is None:
            self._traj, self._side = _Null(), _Null()
        else:
            os.makedirs(self.out_dir, exist_ok=True)
            self._traj = open(os.path.join(self.out_dir, TRAJECTORY), "w")
            self._side = open(os.path.join(self.out_dir, SIDE_FILE), "wb")
        self._side.write(MAGIC + struct.pack("<II", VERSION, 0))
        self._side.flush()
        self._ids = {}
        self._last = None
        self._pending = None

    def close(self):
        """Flushes and closes both files (also at garbage collection)."""
        for f in (getattr(self, "_traj", None), getattr(self, "_side", None)):
            if f and not f.closed and not isinstance(f, _Null):
                f.flush()
                os.fsync(f.fileno())
                f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def _id(self, kind, name):
        key = (kind, name)
        i = self._ids.get(key)
        if i is None:
            i = self._ids[key] = len(self._ids)
            nb = name.encode("utf-8", "replace")[:65535]
            self._side.write(struct.pack("<BIBH", _NAME, i, kind, len(nb)) + nb)
        return i

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
        enc = {id(e): e[1].encode() for e in out}

        def cmp(a, b):
            if a[0] != b[0]:
                return a[0] - b[0]
            return _lib.name_compare(enc[id(a)], enc[id(b)])
        out.sort(key=functools.cmp_to_key(cmp))
        return out

    def step(self, step, loss=None, grad_norm=None, lr=None, model=None, optimizer=None, grads=True):
        """Records step ``step`` (an int, one more than the last one).

        ``loss`` and ``grad_norm``: floats or 0-d tensors (recorded as
        float32 bits, as the trainer does; an absent one is written as
        ``null`` with bits ``00000000``); ``lr``: taken from the
        optimizer's first group when not given. On a recorded step the
        digests of the model's gradients (``grads=True``), parameters and
        buffers, and the optimizer's state tensors are written and their root
        digest goes into the trajectory line. Returns the root (hex) or None."""
        return self.finish(self.take(step, lr=lr, model=model, optimizer=optimizer, grads=grads),
                           loss=loss, grad_norm=grad_norm)

    def take(self, step, lr=None, model=None, optimizer=None, grads=True):
        """The first half of :meth:`step`, for callers that learn the loss
        after the gradients are gone (the transformers Trainer logs it after
        ``zero_grad()``): checks the step number, takes the step's digests
        now (on a recorded step) into the side file, and returns a pending
        record; :meth:`finish` then writes its trajectory line. Arguments as
        :meth:`step`. One record at a time: the next ``take`` or ``step``
        needs it finished."""
        if self._pending is not None:
            raise ValueError("detcheck.Recorder: step %d taken but not finished" % self._pending[0])
        step = int(step)
        if self._last is not None and step != self._last + 1:
            raise ValueError("detcheck.Recorder: step %d after step %d (steps must be consecutive)"
                             % (step, self._last))
        self._last = step
        if lr is None and optimizer is not None and optimizer.param_groups:
            lr = optimizer.param_groups[0].get("lr")
        lr = _scalar(lr)
        root = None
        if step % self.every == 0 and (model is not None or optimizer is not None):
            recs = self._collect(model, optimizer, grads, True)
            ids = [self._id(k, n) for k, n, _ in recs]
            body = b"".join(struct.pack("<IQQ", i, d.high64, d.low64) for i, (_, _, d) in zip(ids, recs))
            self._side.write(struct.pack("<BqI", _STEP, step, len(recs)) + body)
            self._side.flush()
            names = (ctypes.c_char_p * max(1, len(recs)))(
                *[("%s/%s" % (KINDS[k], n)).encode() for k, n, _ in recs])
            digs = (_lib.Digest * max(1, len(recs)))(*[d for _, _, d in recs])
            root = _lib.hex_of(_lib.root_digest(names, digs, len(recs)))
        self._pending = (step, lr, root)
        return self._pending

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
        self._pending = None
        step, lr, root = pending
        loss, grad_norm = _scalar(loss), _scalar(grad_norm)
        line = '{"step":%d,"loss":%s,"loss_bits":"%08x","grad_norm":%s,"grad_norm_bits":"%08x","lr":%s' % (
            step, _json_float(loss), _f32_bits(loss if loss is not None else 0.0),
            _json_float(grad_norm), _f32_bits(grad_norm if grad_norm is not None else 0.0),
            _json_float(lr))
        if root:
            line += ',"root":"%s"' % root
        self._traj.write(line + "}\n")
        self._traj.flush()
        return root


def read_digests(run_dir):
    """Reads a run's tensor_digests.bin: {step: [(kind, name, hex), ...]}."""
    path = os.path.join(str(run_dir), SIDE_FILE)
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != MAGIC:
        raise ValueError("%s: not a detcheck digest file (bad magic)" % path)
    ver, = struct.unpack_from("<I", data, 8)
    if ver != VERSION:
        raise ValueError("%s: version %d (this reads %d)" % (path, ver, VERSION))
    pos, names, steps = 16, {}, {}
    while pos < len(data):
        t = data[pos]
        if t == _NAME and pos + 8 <= len(data):
            i, kind, n = struct.unpack_from("<IBH", data, pos + 1)
            if pos + 8 + n > len(data):
                break
            names[i] = (KINDS[kind], data[pos + 8:pos + 8 + n].decode("utf-8", "replace"))
            pos += 8 + n
        elif t == _STEP and pos + 13 <= len(data):
            st, cnt = struct.unpack_from("<qI", data, pos + 1)
            if pos + 13 + 20 * cnt > len(data):
                break
            recs = []
            for k in range(cnt):
                i, hi, lo = struct.unpack_from("<IQQ", data, pos + 13 + 20 * k)
                recs.append(names[i] + ("%016x%016x" % (hi, lo),))
            steps[st] = recs
            pos += 13 + 20 * cnt
        else:
            if t in (_NAME, _STEP):
                break  # torn last record
            raise ValueError("%s: bad record type %d at byte %d" % (path, t, pos))
    return steps

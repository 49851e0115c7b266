"""Layer and op traces inside a training step, for ``detcheck bisect``.

A :class:`detcheck.Recorder` made with ``model=`` and ``trace="modules"`` or
``trace="ops"`` installs hooks on the model when it is made; on each traced
step it collects, in execution order, one *event* per

- ``trace="modules"``: module forward call (forward hooks: the forward
  arguments' tensors as inputs, the output's tensors as outputs) and module
  backward (``register_full_backward_hook``: the gradients flowing in,
  grad_output, as inputs; those flowing out, grad_input, as outputs). The
  last input of every module event is one digest over the module's
  parameters and buffers (``named_parameters()`` then ``named_buffers()``,
  recursive: the digest v1 of the 17-byte slots of their digests, each
  tensor digested once per step while its version counter stands), absent
  when it has none: a module whose weights already differ is inherited,
  never the culprit;
- ``trace="ops"``: ATen op (a ``TorchDispatchMode``): the op's overload name
  (``aten.mm.default``), the innermost module running it (a stack kept by
  module forward pre/post hooks, and backward pre/post hooks in backward),
  its tensor inputs and outputs; an op that writes its arguments (in place,
  ``out=``, ``_foreach_*_`` ops that return nothing) has the written
  arguments it does not return as further outputs, read after it;

each with a call index (its index among the step's events of the same phase,
module and op) and the digest v1 of every tensor (CUDA tensors on the device,
with the library's kernel, on the current stream: no host copy).

Module names are those of ``model.named_modules()``; the root module is
``(root)``, and an op run outside any module of the model (a loss computed
outside it, gradient clipping) has the module ``(outside)``. Ops run inside
``optimizer.step()`` (between the optimizer's step pre and post hooks) are
phase "optimizer", module ``(optimizer)`` (ops traces only: no module runs
there), so a differing update is named by its op.

Not events (ops traces): ops that only alias or move storage without
computing: views, decided from the op's schema (every return aliases an
input and nothing is written: ``view``, ``t``, ``transpose``, ``detach``,
``alias``, ``expand``, ``slice``, ``select``, ``split``, ``unbind``,
``as_strided``, ``view.dtype``, ``lift_fresh``...), ``_unsafe_view``
(reshape's, not annotated as a view) and the ops tagged ``inplace_view``
(``set_`` in all its overloads, ``resize_``, ``as_strided_``,
``unsqueeze_``, ``squeeze_``, ``t_``, ``transpose_``, ``detach_``): their
outputs are their inputs' bytes, and they still drop the slots of what they
rewrite. Nor are the ops run while a DataLoader starts an iterator or produces a
batch (``DataLoader.__iter__``, ``_BaseDataLoaderIter.__next__``, on the
tracing thread, for any ``num_workers``, through accelerate's
``DataLoaderShard`` too): its sampler draws, and the main
process rebuilds the workers' batches from shared memory in an order that
depends on timing; the batch itself is compared through the recording's
``data.batch`` state. Their writes still drop slots. DataLoader workers
forked from a tracing process trace nothing.

Slots are bounded: at most 255 inputs and 255 outputs per event (further
tensors are not listed: a ``_foreach_`` op over more than 255 tensors lists
the first ones).

The events of a step are written to ``trace.bin`` (format: man
detcheck-bisect(1), section TRACE FILES; version 2: version 1 had neither
the parameters' input nor the optimizer's phase, and is still read) when
:meth:`Recorder.step` (or ``take``) records that step: the events collected
since the previous call.
"""
import bisect
import functools
import os
import struct
import threading
import warnings
import weakref

from . import _lib
from ._digest import digest_torch_parts, torch_dtype_name, _is_dtensor
from ._state import digest_u8

TRACE_FILE = "trace.bin"
MAGIC = b"DCKTRAC\0"
VERSION = 2  # written; read: 1 and 2
MIN_VERSION = 1
MODES = ("none", "modules", "ops")
ROOT_NAME = "(root)"
OUTSIDE_NAME = "(outside)"
OPTIMIZER_NAME = "(optimizer)"
NO_OP = 0xFFFFFFFF
MAX_SLOTS = 255  # u8 input and output counts: further tensors are not listed
DEFAULT_LIMIT_EVENTS = 1000000
MAX_LIMIT_EVENTS = 1 << 24  # DCK_TRACE_MAX_EVENTS: the CLI refuses a step holding more
MAX_NAME_BYTES = 0xFFFF
FORWARD, BACKWARD, OPTIMIZER = 0, 1, 2
PHASES = ("forward", "backward", "optimizer")
# per version: the phases its events may have, as the reader's message says them
_VERSION_PHASES = {1: (2, "0 or 1"), 2: (3, "0, 1 or 2")}
KINDS = ("module", "op")
_NAME, _STEP = 1, 2
_ABSENT = b"\0" + bytes(16)
_EVENT = struct.Struct("<BBIIIBB")
_SLOT = struct.Struct("<BQQ")
# a trace file is read whole: bounded as the tensor digest side file
MAX_BYTES = 1 << 34


def _torch():
    import torch
    return torch


def _slot(t):
    """The 17 bytes of one slot: present + digest, or absent (None, or a
    tensor detcheck cannot digest: a sparse or meta tensor, a dtype it does
    not read)."""
    if t is None:
        return _ABSENT
    try:
        if _is_dtensor(t):
            t = t.to_local()  # no collective inside a hook: the rank's shard
        d = digest_torch_parts(t)[2]
    except (TypeError, ValueError, RuntimeError, NotImplementedError, _lib.DetcheckError):
        return _ABSENT
    return _SLOT.pack(1, d.high64, d.low64)


class _SlotCache:
    """Slots of the tensors already digested in this traced step (ops mode):
    an op's inputs are mostly earlier ops' outputs, a weight is read by
    several ops, and views (``t()`` of ``t()``, ``detach()``) show the same
    bytes again: each layout of each memory is digested once per step.

    The key is the layout (storage, offset, dtype, shape, strides, conj/neg
    bits); an entry holds a weak reference to the tensor it was taken of and
    counts only while that tensor lives (its storage cannot be freed and
    reused meanwhile) and its version counter has not moved since (an output
    is created inside the dispatcher with a counter of its own: its entry
    adopts the counter it has at the first reuse). Every write PyTorch
    dispatches is seen by the op mode, whatever alias it goes through
    (``x.data`` has a counter of its own): an op whose schema writes drops the
    entries of every storage its arguments touch. The cache is emptied at
    each step and around ``optimizer.step()``. Writes PyTorch does not
    dispatch (a NumPy view of the tensor written in place, a raw kernel on its
    pointer) between two ops of a traced step are not seen: the later op's
    input slot keeps the earlier digest."""

    def __init__(self):
        self.slots = {}  # layout key -> [weakref, version or None, slot]
        self.by_storage = {}  # storage ptr -> keys
        self.unset = {}  # storage ptr -> weakref: memory an op allocated and nothing has written yet

    def clear(self):
        self.slots.clear()
        self.by_storage.clear()
        self.unset.clear()

    def allocated(self, tensors):
        """These tensors are an allocating op's outputs (torch.empty_like:
        whatever bytes the allocator hands out): until an op writes them
        their slots are absent, never a digest of leftover memory, which
        differs between runs that computed the same bits (a resumed
        process allocates differently)."""
        for t in tensors:
            try:
                self.unset[t.untyped_storage().data_ptr()] = weakref.ref(t)
            except (TypeError, RuntimeError, NotImplementedError, AttributeError):
                pass

    def slot(self, t, fresh=False):
        """t's slot; fresh: t was just made by the op (its version counter
        is not yet the one autograd gives it)."""
        if t is None:
            return _ABSENT
        try:
            sp = t.untyped_storage().data_ptr()
            if self.unset:
                u = self.unset.get(sp)
                if u is not None:
                    if u() is not None:
                        return _ABSENT
                    del self.unset[sp]  # that allocation was freed: sp is other memory now
            key = (sp, t.get_device(), t.storage_offset(), t.dtype, t.shape, t.stride(), t.is_conj(), t.is_neg())
        except (TypeError, RuntimeError, NotImplementedError, AttributeError):
            return _slot(t)  # no storage (a DTensor, a sparse or meta tensor, a subclass)
        e = self.slots.get(key)
        if e is not None:
            o = e[0]()
            if o is not None:
                if e[1] is None:
                    e[1] = o._version
                    return e[2]
                if o._version == e[1]:
                    return e[2]
        s = _slot(t)
        if s is _ABSENT:
            return s
        try:
            self.slots[key] = [weakref.ref(t), None if fresh else t._version, s]
        except (TypeError, RuntimeError):  # an inference tensor has no version counter
            return s
        self.by_storage.setdefault(sp, set()).add(key)
        return s

    def fresh(self, t):
        return self.slot(t, True)

    def written(self, tensors):
        """An op that writes ran with these tensor arguments: every entry of
        their storages is stale."""
        for t in tensors:
            try:
                sp = t.untyped_storage().data_ptr()
            except (TypeError, RuntimeError, NotImplementedError, AttributeError):
                self.clear()  # a storage we cannot name: nothing is kept
                return
            for k in self.by_storage.pop(sp, ()):
                self.slots.pop(k, None)
            self.unset.pop(sp, None)  # written: its bytes mean something now


# DataLoaders at work on this thread (starting an iterator, producing a
# batch): the op trace leaves their ops out (see the module)
_LOADER = threading.local()


def _in_loader():
    return getattr(_LOADER, "depth", 0)


def _pause_in_loaders():
    """Wraps, once per process, ``DataLoader.__iter__`` (the iterator's
    start: its sampler, a persistent loader's reset) and the iterators'
    ``__next__`` (``_BaseDataLoaderIter``'s, which the single- and
    multi-process iterators and accelerate's loaders all go through) to
    count, per thread, the loaders at work."""
    try:
        from torch.utils.data.dataloader import DataLoader, _BaseDataLoaderIter
    except ImportError:
        return
    for cls, name in ((DataLoader, "__iter__"), (_BaseDataLoaderIter, "__next__")):
        f = cls.__dict__.get(name)
        if f is None or getattr(f, "_detcheck_loader", False):
            continue

        def counted(*a, _f=f, **k):
            _LOADER.depth = _in_loader() + 1
            try:
                return _f(*a, **k)
            finally:
                _LOADER.depth -= 1
        functools.update_wrapper(counted, f)
        counted._detcheck_loader = True
        setattr(cls, name, counted)


# Tracers of this process: a forked child (a DataLoader worker) traces nothing
_TRACERS = weakref.WeakSet()


def _forked():
    for tr in list(_TRACERS):
        tr.paused += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def _next_seq():
    return _torch()._C._autograd._get_sequence_nr()


def _leaves(x):
    from torch.utils._pytree import tree_leaves
    return tree_leaves(x)


class _Event:
    __slots__ = ("phase", "kind", "module", "op", "call", "nin", "ins", "nout", "outs")

    def __init__(self, phase, kind, module, op, call, nin, ins, nout, outs):
        self.phase, self.kind, self.module, self.op, self.call = phase, kind, module, op, call
        self.nin, self.ins, self.nout, self.outs = nin, ins, nout, outs


class Tracer:
    """The hooks of one Recorder on one model; events of the current step
    in ``events``. ``active``: this step is traced; ``dumping``: its
    outputs are kept for a dump (bounded by ``dump_limit``)."""

    def __init__(self, model, mode, limit_events, dump_limit=0):
        if mode not in ("modules", "ops"):
            raise ValueError("detcheck.Recorder: trace must be one of %s, not %r" % (", ".join(MODES), mode))
        self.model = model
        self.mode = mode
        self.limit = limit_events
        self.dump_limit = dump_limit
        self.active = False
        self.dumping = False
        self.paused = 0
        self.in_opt = 0  # inside optimizer.step(): the optimizer's phase
        self._handles = []
        self._dispatch = None
        self.cache = _SlotCache()
        self._state_slots = {}  # id(tensor) -> [weakref, version, slot]: parameters and buffers this step
        _TRACERS.add(self)
        _pause_in_loaders()
        from torch.optim.optimizer import register_optimizer_step_pre_hook, register_optimizer_step_post_hook
        # for the Tracer's life (not armed and disarmed: a hook may disarm it inside optimizer.step())
        self._opt_handles = [register_optimizer_step_pre_hook(self._opt_pre),
                             register_optimizer_step_post_hook(self._opt_post)]
        self.reset(False, False)

    # ---------------------------------------------------------- state
    def reset(self, active, dumping):
        """Drops the collected events; the next step is traced when active
        (and its outputs kept when dumping). Hooks come and go with it."""
        self.events = []
        self.truncated = False
        self.calls = {}
        self.dump = []  # (event index, output index, tensor copy)
        self.dump_bytes = 0
        self.dump_full = False
        self._fstack = []
        self._seqs, self._seqnames = [], []
        self.cache.clear()
        self._state_slots.clear()
        self.active = active
        self.dumping = dumping and active
        if active:
            self._arm()
        else:
            self._disarm()

    def drop_collected(self):
        """Forgets the events collected so far in this step (those before
        its start), keeping whether it is traced."""
        self.events = []
        self.truncated = False
        self.calls = {}
        self.dump = []
        self.dump_bytes = 0
        self.dump_full = False

    _STATE = ("events", "truncated", "calls", "dump", "dump_bytes", "dump_full", "_fstack", "_seqs", "_seqnames",
              "active", "dumping")

    def snapshot(self):
        """The collected state (by reference: reset() starts new lists)."""
        return tuple(getattr(self, a) for a in self._STATE)

    def restore(self, snap):
        for a, v in zip(self._STATE, snap):
            setattr(self, a, v)
        self.cache.clear()
        self._state_slots.clear()
        if self.active:
            self._arm()

    def _arm(self):
        if self._handles:
            return
        if self.mode == "modules":  # the root's inputs need no gradient: PyTorch says so every step
            warnings.filterwarnings("ignore", category=UserWarning,
                                    message="Full backward hook is firing when gradients are computed with respect "
                                            "to module outputs")
            # a module returning a dict or a ModelOutput has no backward event (said in the docs)
            warnings.filterwarnings("ignore", category=UserWarning,
                                    message="For backward hooks to be called, module output should be a Tensor")
        try:
            for name, m in self.model.named_modules():
                nm = name or ROOT_NAME
                self._handles.append(m.register_forward_pre_hook(functools.partial(self._fpre, nm),
                                                                 with_kwargs=True))
                self._handles.append(m.register_forward_hook(functools.partial(self._fpost, nm),
                                                             with_kwargs=True))
                if self.mode == "modules":
                    try:
                        self._handles.append(m.register_full_backward_hook(functools.partial(self._bpost, nm)))
                    except RuntimeError as e:  # a module with old-style backward hooks refuses full ones
                        warnings.warn("detcheck.Recorder: module %s is not traced in backward (%s)" % (nm, e))
            if self.mode == "ops":
                self._dispatch = _op_mode(self)
                self._dispatch.__enter__()
        except BaseException:
            self._disarm()
            raise

    def _disarm(self):
        for h in self._handles:
            h.remove()
        self._handles = []
        if self._dispatch is not None:
            d, self._dispatch = self._dispatch, None
            try:
                d.__exit__(None, None, None)
            except Exception:  # another mode entered after ours is still on top: ours stays, idle
                pass

    def close(self):
        self.active = False
        self._disarm()
        for h in self._opt_handles:
            h.remove()
        self._opt_handles = []

    def _opt_pre(self, *a):
        self.in_opt += 1
        self.cache.clear()

    def _opt_post(self, *a):
        self.in_opt = max(0, self.in_opt - 1)
        self.cache.clear()

    # ---------------------------------------------------------- events
    def _full(self):
        if len(self.events) >= self.limit:
            self.truncated = True
            return True
        return False

    def state_slot(self, module):
        """The slot of a module's parameters and buffers (recursive,
        named_parameters() then named_buffers()): the digest v1 of their
        slots, absent when it has none. Each tensor is digested once per
        step while its version counter stands (an inference tensor, which
        has none, each time)."""
        slots = []
        for _, t in list(module.named_parameters()) + list(module.named_buffers()):
            e = self._state_slots.get(id(t))
            try:
                v = t._version
            except (AttributeError, RuntimeError):
                v = None
            if e is None or e[0]() is not t or v is None or e[1] != v:
                e = [weakref.ref(t), v, _slot(t)]
                if v is not None:
                    self._state_slots[id(t)] = e
            slots.append(e[2])
        if not slots:
            return _ABSENT
        d = digest_u8(b"".join(slots))
        return _SLOT.pack(1, d.high64, d.low64)

    def module_ins(self, module, tensors):
        """A module event's inputs: (count, slot bytes) of the tensors (the
        first MAX_SLOTS - 1), then its parameters and buffers."""
        tensors = tensors[:MAX_SLOTS - 1]
        return len(tensors) + 1, b"".join(_slot(t) for t in tensors) + self.state_slot(module)

    def add_digested(self, phase, kind, module, op, nin, ib, outs, slot=_slot):
        key = (phase, module, op)
        call = self.calls.get(key, 0)
        self.calls[key] = call + 1
        outs = outs[:MAX_SLOTS]
        ob = b"".join(slot(t) for t in outs)
        if self.dumping and not self.dump_full:
            self._keep(len(self.events), outs)
        self.events.append(_Event(phase, kind, module, op, call, nin, ib, len(outs), ob))

    def _keep(self, index, outs):
        torch = _torch()
        for j, t in enumerate(outs):
            if t is None or not isinstance(t, torch.Tensor):
                continue
            try:
                if _is_dtensor(t):
                    t = t.to_local()
                torch_dtype_name(t)
                if t.layout != torch.strided or t.device.type == "meta":
                    continue
                n = t.numel() * t.element_size()
                if self.dump_bytes + n > self.dump_limit:
                    self.dump_full = True
                    warnings.warn("detcheck.Recorder: the dump reached dump_limit_bytes=%d at event %d; "
                                  "later outputs are not dumped" % (self.dump_limit, index))
                    return
                c = t.detach().clone(memory_format=torch.contiguous_format)
            except (TypeError, RuntimeError, NotImplementedError):
                continue
            self.dump_bytes += n
            self.dump.append((index, j, c))

    # ---------------------------------------------------------- hooks
    def _fpre(self, nm, module, args, kwargs):
        if not self.active or self.paused or self.in_opt:
            return None
        if self.mode == "ops":
            self._fstack.append((id(module), nm, None))
            self._transition(nm)
        elif not self._full():
            # inputs (and weights) digested before forward runs (an in-place module changes them)
            ins = [t for t in _leaves((args, kwargs)) if isinstance(t, _torch().Tensor)]
            self._fstack.append((id(module), nm, self.module_ins(module, ins)))
        else:
            self._fstack.append((id(module), nm, None))
        return None

    def _pop(self, stack, key):
        for i in range(len(stack) - 1, -1, -1):
            if stack[i][0] == key:
                e = stack[i]
                del stack[i:]
                return e
        return None

    def _fpost(self, nm, module, args, kwargs, output):
        if not self.active or self.paused or self.in_opt:
            return None
        e = self._pop(self._fstack, id(module))
        if self.mode == "ops":
            self._transition(self._fstack[-1][1] if self._fstack else OUTSIDE_NAME)
        if self.mode == "modules" and e is not None and e[2] is not None and not self._full():
            outs = [t for t in _leaves(output) if isinstance(t, _torch().Tensor)]
            self.add_digested(FORWARD, 0, nm, None, e[2][0], e[2][1], outs)
        return None

    def _bpost(self, nm, module, grad_input, grad_output):
        if self.active and not self.paused and not self.in_opt and not self._full():
            nin, ib = self.module_ins(module, list(grad_output))
            self.add_digested(BACKWARD, 0, nm, None, nin, ib, list(grad_input))
        return None

    def _transition(self, nm):
        """From the autograd sequence number now on, nodes made belong to
        module nm (the forward's module stack, as backward ops find it)."""
        self._seqs.append(_next_seq())
        self._seqnames.append(nm)

    def module_now(self, phase):
        """The module an op runs in: in forward the innermost module whose
        forward is running; in backward the module whose forward made the
        autograd node being run (its sequence number), else (outside)."""
        if phase == FORWARD:
            return self._fstack[-1][1] if self._fstack else OUTSIDE_NAME
        node = _torch()._C._current_autograd_node()
        if node is None or not self._seqs:
            return OUTSIDE_NAME
        i = bisect.bisect_right(self._seqs, node._sequence_nr())
        return self._seqnames[i - 1] if i else OUTSIDE_NAME


# ops that only alias or move storage, not annotated as views by their schema
_METADATA_OPS = frozenset(("aten::_unsafe_view", "aten::set_"))


def _op_mode(tracer):
    torch = _torch()
    from torch.utils._python_dispatch import TorchDispatchMode
    Tensor = torch.Tensor
    graph_task = torch._C._current_graph_task_id
    inplace_view = getattr(torch.Tag, "inplace_view", None)

    kinds = {}  # op -> (writes an argument, metadata only, its written arguments as (index, name))
    # ops that return memory they do not initialise
    allocating = set()
    for name, overload in (("empty", "memory_format"), ("empty_like", "default"), ("new_empty", "default"),
                           ("empty_strided", "default"), ("new_empty_strided", "default"),
                           ("empty_permuted", "default")):
        op = getattr(getattr(torch.ops.aten, name, None), overload, None)  # not every torch has every one
        if op is not None:
            allocating.add(op)

    def kind(func):
        k = kinds.get(func)
        if k is None:
            try:
                sc = func._schema
                w = bool(sc.is_mutable)
                # a view: every return aliases an input, nothing is written
                view = not w and bool(sc.returns) and all(r.alias_info is not None for r in sc.returns)
                meta = view or sc.name in _METADATA_OPS or (inplace_view is not None and inplace_view in func.tags)
                written = tuple((i, a.name) for i, a in enumerate(sc.arguments)
                                if a.alias_info is not None and a.alias_info.is_write)
                k = (w, meta, written)
            except AttributeError:  # an op without a schema: assume it writes and computes
                k = (True, False, ())
            kinds[func] = k
        return k

    def written_args(spec, args, kwargs, returned):
        """The tensors of the written arguments that the op did not return."""
        seen = {id(t) for t in returned if t is not None}
        out = []
        for i, name in spec:
            v = args[i] if i < len(args) else kwargs.get(name)
            for t in _leaves(v):
                if isinstance(t, Tensor) and id(t) not in seen:
                    seen.add(id(t))
                    out.append(t)
        return out

    class _OpTrace(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            tr = tracer
            if not tr.active or tr.paused or func.namespace == "profiler" or tr._full():
                return func(*args, **kwargs)
            writes, meta, written = kind(func)
            if meta or _in_loader():
                # not an event; what it writes (set_ points a tensor at other memory) drops the slots
                if not writes:
                    return func(*args, **kwargs)
                ins = [t for t in _leaves((args, kwargs)) if isinstance(t, Tensor)]
                tr.cache.written(ins)
                out = func(*args, **kwargs)
                tr.cache.written(ins)
                return out
            ins = [t for t in _leaves((args, kwargs)) if isinstance(t, Tensor)]
            slot = tr.cache.slot
            ib = b"".join(slot(t) for t in ins[:MAX_SLOTS])  # before the op: an in-place op changes them
            out = func(*args, **kwargs)
            if writes:
                tr.cache.written(ins)
            # an op that returns nothing (out None: _foreach_add_) has no returned output
            outs = [] if out is None else [t if isinstance(t, Tensor) else None for t in _leaves(out)
                                           if t is None or isinstance(t, Tensor)]
            if func in allocating:
                tr.cache.allocated([t for t in outs if t is not None])
            if written:  # what it wrote, read now (a _foreach_ op returns nothing)
                outs += written_args(written, args, kwargs, outs)
            if tr.in_opt:
                phase, module = OPTIMIZER, OPTIMIZER_NAME
            else:
                phase = BACKWARD if graph_task() != -1 else FORWARD
                module = tr.module_now(phase)
            tr.add_digested(phase, 1, module, str(func), min(len(ins), MAX_SLOTS), ib, outs, tr.cache.fresh)
            return out

    return _OpTrace()


# -------------------------------------------------------------- writing
def name_bytes(name):
    """A trace name as UTF-8 (a module path or an op name): at most 65535
    bytes, no NUL (ValueError otherwise)."""
    try:
        nb = name.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError("detcheck.Recorder: trace name %r cannot be written as UTF-8 (%s)"
                         % (name, e.reason)) from None
    if len(nb) > MAX_NAME_BYTES or b"\0" in nb or not nb:
        raise ValueError("detcheck.Recorder: trace name %.60r is empty, holds a NUL byte or is longer "
                         "than %d bytes" % (name, MAX_NAME_BYTES))
    return nb


def step_record(step, events, truncated, ids):
    """The bytes of one step's record (with the name records it needs
    first) and the new names' ids ({name: id}, not yet in ``ids``)."""
    new = {}
    parts = []

    def idof(name):
        i = ids.get(name)
        if i is None:
            i = new.get(name)
        if i is None:
            nb = name_bytes(name)
            i = new[name] = len(ids) + len(new)
            parts.append(struct.pack("<BIH", _NAME, i, len(nb)) + nb)
        return i

    body = []
    for e in events:
        m = idof(e.module)
        o = NO_OP if e.op is None else idof(e.op)
        body.append(_EVENT.pack(e.phase, e.kind, m, o, e.call, e.nin, e.nout))
        body.append(e.ins)
        body.append(e.outs)
    parts.append(struct.pack("<BqIB", _STEP, step, len(events), 1 if truncated else 0))
    return b"".join(parts) + b"".join(body), new


def write_dump(path, step, mode, kept, truncated):
    """Writes the kept outputs as safetensors (the library's writer: a
    temporary name, fsync, rename), tensor names "%05d.output.%d"."""
    torch = _torch()
    n = len(kept)
    arr = (_lib.StTensor * max(1, n))()
    keep = []
    for k, (i, j, t) in enumerate(kept):
        h = t.cpu().contiguous() if t.device.type != "cpu" else t
        name = ("%05d.output.%d" % (i, j)).encode()
        keep.append((h, name))
        st = arr[k]
        st.name = name
        st.dtype = _lib.DTYPE_CODE[torch_dtype_name(h)]
        st.ndim = h.dim()
        if h.dim() > _lib.MAX_DIMS:
            raise ValueError("detcheck.Recorder: dumped tensor %s has more than %d dimensions"
                             % (name.decode(), _lib.MAX_DIMS))
        for d, s in enumerate(h.shape):
            st.shape[d] = s
        st.data = h.data_ptr() if h.numel() else None
        st.global_ndim = 0
    meta = (_lib.KV * 3)(_lib.KV(b"detcheck_step", str(step).encode()),
                         _lib.KV(b"detcheck_trace", mode.encode()),
                         _lib.KV(b"detcheck_dump_truncated", b"1" if truncated else b"0"))
    _lib.check(_lib.safetensors_write(path.encode(), arr, n, meta, 3, 0))
    del keep


# -------------------------------------------------------------- reading
class TraceEvent:
    """One event of a trace: ``phase`` ("forward"/"backward"/"optimizer"),
    ``kind`` ("module"/"op"), ``module`` (qualified name, "(root)",
    "(outside)", "(optimizer)"), ``op`` (an ATen overload name, or None for a
    module event), ``call``, ``inputs`` and ``outputs`` (lists of
    32-hex-digit digests, None for an absent slot), ``index`` (position in
    the step's event list), ``state_input`` (the index of the input that is
    the module's parameters and buffers: a version 2 module event's last;
    else None)."""
    __slots__ = ("index", "phase", "kind", "module", "op", "call", "inputs", "outputs", "state_input")

    def __init__(self, index, phase, kind, module, op, call, inputs, outputs, state_input=None):
        self.index, self.phase, self.kind, self.module, self.op = index, phase, kind, module, op
        self.call, self.inputs, self.outputs, self.state_input = call, inputs, outputs, state_input

    def key(self):
        """What identifies the event across runs, as ``detcheck bisect``
        matches events (src/train/train_trace.c, same_key): (phase, kind,
        module, op, call, input count, output count). Two events whose
        counts differ executed differently."""
        return (self.phase, self.kind, self.module, self.op, self.call, len(self.inputs), len(self.outputs))

    def __eq__(self, other):
        return isinstance(other, TraceEvent) and all(getattr(self, a) == getattr(other, a)
                                                     for a in self.__slots__)

    def __repr__(self):
        return "TraceEvent(%d, %s, %s %s%s call %d, %d inputs, %d outputs)" % (
            self.index, self.phase, self.kind, self.module, "" if self.op is None else " " + self.op,
            self.call, len(self.inputs), len(self.outputs))


class TraceStep:
    """A traced step: ``step``, ``truncated`` (the recorder's per-step bound
    dropped events past these), ``events`` (TraceEvent list)."""
    __slots__ = ("step", "truncated", "events")

    def __init__(self, step, truncated, events):
        self.step, self.truncated, self.events = step, truncated, events

    def __repr__(self):
        return "TraceStep(%d, %d events%s)" % (self.step, len(self.events),
                                               ", truncated" if self.truncated else "")


_NAME_HEAD, _STEP_HEAD = 6, 13  # after the record's type byte


def _utf8_width(b, i):
    """dck_utf8_width (src/common/common.h): the width of the well-formed
    UTF-8 sequence at b[i] (no overlongs, no surrogates, nothing past
    U+10FFFF), 0 when it is not one."""
    c = b[i]
    if c < 0x80:
        return 1
    if 0xC2 <= c <= 0xDF:
        w, v = 2, c & 0x1F
    elif 0xE0 <= c <= 0xEF:
        w, v = 3, c & 0x0F
    elif 0xF0 <= c <= 0xF4:
        w, v = 4, c & 0x07
    else:
        return 0
    if len(b) - i < w:
        return 0
    for k in range(1, w):
        if b[i + k] & 0xC0 != 0x80:
            return 0
        v = (v << 6) | (b[i + k] & 0x3F)
    if v > 0x10FFFF or 0xD800 <= v <= 0xDFFF or (w == 3 and v < 0x800) or (w == 4 and v < 0x10000):
        return 0
    return w


def _bad_name_byte(raw):
    """The index of the first byte of raw that is a NUL or starts no
    well-formed UTF-8 sequence, else -1 (read_name's walk)."""
    i = 0
    while i < len(raw):
        w = _utf8_width(raw, i) if raw[i] else 0
        if not w:
            return i
        i += w
    return -1


def parse_trace(path, data):
    """The steps of a trace file's bytes, data, as :func:`read_trace`
    returns them; path names the file in messages. Mirrors
    src/train/train_trace.c (parse, read_name, read_step, read_event,
    check_unique) check for check, in its order, with its messages."""
    n = len(data)
    if n < 16 or data[:8] != MAGIC:
        raise ValueError("%s: byte 0: not a detcheck trace file (no DCKTRAC header)" % path)
    ver, flags = struct.unpack_from("<II", data, 8)
    if not MIN_VERSION <= ver <= VERSION:
        raise ValueError("%s: byte 8: version %d (this detcheck reads %d to %d)" % (path, ver, MIN_VERSION, VERSION))
    nphases, expected = _VERSION_PHASES[ver]
    if flags:
        raise ValueError("%s: byte 12: flags 0x%x (this detcheck knows none)" % (path, flags))
    pos, names, name_at, steps, last = 16, [], [], {}, None
    torn = False
    while not torn and pos < n:
        at = pos
        t = data[pos]
        pos += 1
        if t == _NAME:
            # the header is checked even when the name is cut short: a damaged header is no tear
            if n - pos < _NAME_HEAD:
                break
            i, ln = struct.unpack_from("<IH", data, pos)
            pos += _NAME_HEAD
            if i != len(names):
                raise ValueError("%s: byte %d: name record with id %d (expected id %d)" % (path, at, i, len(names)))
            if not ln:
                raise ValueError("%s: byte %d: name id %d is empty" % (path, at, i))
            if n - pos < ln:
                break
            raw = bytes(data[pos:pos + ln])
            bad = _bad_name_byte(raw)
            if bad >= 0:
                raise ValueError("%s: byte %d: name id %d is not UTF-8 (byte 0x%02x at byte %d)"
                                 % (path, at, i, raw[bad], at + 1 + _NAME_HEAD + bad))
            names.append(raw.decode("utf-8"))
            name_at.append(at)
            pos += ln
        elif t == _STEP:
            if n - pos < _STEP_HEAD:
                break
            st, cnt, trunc = struct.unpack_from("<qIB", data, pos)
            pos += _STEP_HEAD
            if last is not None and st <= last:
                raise ValueError("%s: byte %d: step %d after step %d" % (path, at, st, last))
            if cnt > MAX_LIMIT_EVENTS:
                raise ValueError("%s: byte %d: step %d holds %d events (at most %d)"
                                 % (path, at, st, cnt, MAX_LIMIT_EVENTS))
            if trunc > 1:
                raise ValueError("%s: byte %d: step %d: truncated byte %d (expected 0 or 1)"
                                 % (path, at + 13, st, trunc))
            events = []
            for k in range(cnt):
                # every field checked as soon as it is read: a count read over
                # the records after it meets bytes that are no event
                eat = pos
                if n - pos < _EVENT.size:
                    torn = True
                    break
                ph, kd, mid, oid, call, nin, nout = _EVENT.unpack_from(data, pos)
                pos += _EVENT.size
                if ph >= nphases:
                    raise ValueError("%s: byte %d: step %d: event with phase %d (expected %s)"
                                     % (path, eat, st, ph, expected))
                if kd > 1:
                    raise ValueError("%s: byte %d: step %d: event with kind %d (expected 0 or 1)"
                                     % (path, eat, st, kd))
                if mid >= len(names):
                    raise ValueError("%s: byte %d: step %d: event uses module name id %d, never named"
                                     % (path, eat, st, mid))
                if kd == 0 and oid != NO_OP:
                    raise ValueError("%s: byte %d: step %d: module event with op name id %d (expected 0xffffffff)"
                                     % (path, eat, st, oid))
                if kd == 1 and oid >= len(names):
                    raise ValueError("%s: byte %d: step %d: op event uses op name id %d, never named"
                                     % (path, eat, st, oid))
                if kd == 0 and ph == OPTIMIZER:
                    raise ValueError("%s: byte %d: step %d: module event in phase 2 (optimizer: ops only)"
                                     % (path, eat, st))
                if kd == 0 and ver >= 2 and not nin:
                    raise ValueError("%s: byte %d: step %d: module event with no input (version 2: its last input "
                                     "is its parameters and buffers)" % (path, eat, st))
                slots = []
                for s in range(nin + nout):
                    if n - pos < _SLOT.size:
                        torn = True
                        break
                    pr, hi, lo = _SLOT.unpack_from(data, pos)
                    if pr > 1 or (pr == 0 and (hi or lo)):
                        raise ValueError("%s: byte %d: step %d: %s %d of the event at byte %d has present byte %d%s"
                                         % (path, pos, st, "input" if s < nin else "output",
                                            s if s < nin else s - nin, eat, pr,
                                            " (expected 0 or 1)" if pr > 1 else " and a digest that is not zero"))
                    slots.append("%016x%016x" % (hi, lo) if pr else None)
                    pos += _SLOT.size
                if torn:
                    break
                events.append(TraceEvent(k, PHASES[ph], KINDS[kd], names[mid], None if kd == 0 else names[oid],
                                         call, slots[:nin], slots[nin:],
                                         nin - 1 if kd == 0 and ver >= 2 else None))
            if torn:  # a killed run: the step is dropped whole
                break
            steps[st] = TraceStep(st, trunc == 1, events)
            last = st
        else:
            raise ValueError("%s: byte %d: unknown record type %d" % (path, at, t))
    # one id per name (check_unique, after the whole file): of the names
    # recorded twice the first in byte order, its two lowest ids, at the
    # offset of the later one's record
    first = {}
    dup = None
    for i, nm in enumerate(names):
        j = first.setdefault(nm, i)
        if j != i and (dup is None or nm.encode("utf-8") < dup[0].encode("utf-8")):
            dup = (nm, j, i)
    if dup is not None:
        nm, a, b = dup
        raise ValueError("%s: byte %d: name %s recorded twice, as ids %d and %d" % (path, name_at[b], nm, a, b))
    return steps


def read_trace(run_dir):
    """Reads a run's trace.bin: {step: TraceStep}.

    Refuses (ValueError naming the file and the byte offset) exactly what
    ``detcheck bisect``'s reader (src/train/train_trace.c) refuses, with its
    messages: a missing or bad magic, a version other than 1 and 2, flags
    other than 0, an unknown record type; a name record whose id is not the
    next one, whose name is empty, holds a NUL or is not UTF-8, or (checked
    once the file is read) names a name already named; a step not after the
    previous one, holding more than 2^24 events, or whose truncated byte is
    not 0 or 1; an event with a phase past 1 (version 1) or 2 (version 2),
    a kind other than 0/1, a module or op name id not named before it, a
    module event with an op id other than 0xffffffff, in phase 2 (the
    optimizer's: ops only) or, in version 2, without inputs (its last is its
    parameters and buffers); a slot whose present byte is not 0 or 1, or an
    absent slot with a digest. Every field is checked as it is read, so only a record
    cut short by the end of the file (a killed run), with nothing wrong
    before the cut, is ignored. Also refused: a file that is not a regular
    file (a FIFO: never waited on) or larger than 16 GiB."""
    from ._recorder import _read_regular
    path = os.path.join(str(run_dir), TRACE_FILE)
    return parse_trace(path, _read_regular(path))


class TraceDifference(tuple):
    """Where two traces part: a 4-tuple ``(step, event_a, event_b,
    inputs_equal)`` with attributes ``step``, ``event`` (the position in the
    step, from 0), ``a`` and ``b`` (the events there, None where that run's
    step ended), ``how`` ("execution" or "output"), ``output`` (the first
    differing output's index, how "output" only, else None), ``input`` (the
    first input that differed already, None when every input is equal or
    how is "execution"), ``input_is_state`` (that input is the module's
    parameters and buffers), ``culprit`` (how "output" and every input
    equal) and ``inputs_equal`` (None for "execution")."""

    def __new__(cls, step, event, a, b, output=None, input=None):
        how = "execution" if output is None else "output"
        inputs_equal = None if output is None else input is None
        self = tuple.__new__(cls, (step, a, b, inputs_equal))
        self.step, self.event, self.a, self.b, self.how = step, event, a, b, how
        self.output, self.input, self.inputs_equal = output, input, inputs_equal
        self.input_is_state = input is not None and input == a.state_input
        self.culprit = how == "output" and input is None
        return self

    def __repr__(self):
        return "TraceDifference(step %d, event %d, %s, output %s, input %s: %r / %r)" % (
            self.step, self.event, self.how, self.output, self.input, self.a, self.b)


def _first_unequal(x, y):
    return next((k for k, (p, q) in enumerate(zip(x, y)) if p != q), None)


def first_difference(a, b):
    """The first difference of two traces ({step: TraceStep}, as
    :func:`read_trace` returns), as ``detcheck bisect`` finds it
    (src/train/train_trace.c, dck_trace_compare): a :class:`TraceDifference`
    (a tuple ``(step, event_a, event_b, inputs_equal)``), or None when every
    step both traced agrees.

    In each step both traced, ascending, events are compared position by
    position in the order the file holds them (execution order). Where their
    keys (:meth:`TraceEvent.key`: phase, kind, module, op, call, input and
    output counts) differ, or one run's step ends while the other's goes on,
    the runs executed differently: ``inputs_equal`` is None and the missing
    event is None. A step the recorder truncated never ends early (its
    events past the count are unknown): where the truncated run's step ends
    first, only the events both hold are compared; a step that ends first
    without being truncated is a difference even when the other run's step
    is truncated. Otherwise the first event one of whose outputs differs
    (presence or digest) is returned, with the first differing output,
    ``inputs_equal`` True when every input is equal (this event computed
    other bits: the culprit) and False when an input already differed
    (inherited: ``input`` names the first such input)."""
    for st in sorted(set(a) & set(b)):
        sa, sb = a[st], b[st]
        xa, xb = sa.events, sb.events
        n = min(len(xa), len(xb))
        for i in range(n + 1):
            x = xa[i] if i < len(xa) else None
            y = xb[i] if i < len(xb) else None
            if x is None or y is None:
                if (x is None and y is None) or (x is None and sa.truncated) or (y is None and sb.truncated):
                    break
                return TraceDifference(st, i, x, y)
            if x.key() != y.key():
                return TraceDifference(st, i, x, y)
            out = _first_unequal(x.outputs, y.outputs)
            if out is not None:
                return TraceDifference(st, i, x, y, out, _first_unequal(x.inputs, y.inputs))
    return None

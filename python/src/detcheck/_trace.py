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
from ._digest import digest_torch_parts
from ._tensors import torch_dtype_name, _is_dtensor
from ._state import digest_u8

TRACE_FILE = "trace.bin"
MAGIC = b"DCKTRAC\0"
VERSION = 2  # written (the C reader reads 1 and 2)
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
KINDS = ("module", "op")
_NAME, _STEP = 1, 2
_ABSENT = b"\0" + bytes(16)
_EVENT = struct.Struct("<BBIIIBB")
_SLOT = struct.Struct("<BQQ")


def _torch():
    import torch
    return torch


def _on_cuda(t):
    """Whether t's digest is taken on a CUDA device (tests fake it)."""
    return getattr(getattr(t, "device", None), "type", None) == "cuda"


class _CudaTally:
    """The CUDA tensors a traced step tried to digest and how many it could:
    a step whose CUDA slots are all absent compared nothing on the device
    (the digest failed, e.g. no CUDA runtime for the library), and is
    refused rather than written as a trace that bisect finds identical."""
    __slots__ = ("tried", "digested", "error")

    def __init__(self):
        self.tried = self.digested = 0
        self.error = None  # the first failure: "shape dtype: message"


def _slot(t, tally=None):
    """The 17 bytes of one slot: present + digest, or absent (None, or a
    tensor detcheck cannot digest: a sparse or meta tensor, a dtype it does
    not read). tally: counts the CUDA tensors tried and digested."""
    if t is None:
        return _ABSENT
    cuda = False
    try:
        if _is_dtensor(t):
            t = t.to_local()  # no collective inside a hook: the rank's shard
        cuda = tally is not None and _on_cuda(t)
        if cuda:
            tally.tried += 1
        d = digest_torch_parts(t)[2]
    except (TypeError, ValueError, RuntimeError, NotImplementedError, _lib.DetcheckError) as e:
        if cuda and tally.error is None:
            tally.error = "%s %s: %s" % (tuple(t.shape), t.dtype, e)
        return _ABSENT
    if cuda:
        tally.digested += 1
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

    def __init__(self, digest=None):
        self.digest = digest or _slot  # t -> its slot (the Tracer's: counts CUDA digests)
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
            return self.digest(t)  # no storage (a DTensor, a sparse or meta tensor, a subclass)
        e = self.slots.get(key)
        if e is not None:
            o = e[0]()
            if o is not None:
                if e[1] is None:
                    e[1] = o._version
                    return e[2]
                if o._version == e[1]:
                    return e[2]
        s = self.digest(t)
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
        self.cuda = _CudaTally()  # this step's CUDA digests
        self.cuda_checked = False  # a CUDA tensor of the model was digested when tracing started
        self.cache = _SlotCache(self.slot)
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
        self.cuda = _CudaTally()
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
        self.cuda = _CudaTally()  # their CUDA digests go with them
        self.truncated = False
        self.calls = {}
        self.dump = []
        self.dump_bytes = 0
        self.dump_full = False

    _STATE = ("events", "truncated", "calls", "dump", "dump_bytes", "dump_full", "_fstack", "_seqs", "_seqnames",
              "active", "dumping", "cuda")

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

    def slot(self, t):
        """t's slot, its CUDA digest counted in this step's tally."""
        return _slot(t, self.cuda)

    def check_cuda(self):
        """Digests the model's first CUDA parameter or buffer now, when
        tracing starts, so that a CUDA digest that cannot work raises with
        its own message (inside a traced step it would be an absent slot)."""
        if self.cuda_checked:
            return
        torch = _torch()
        self.paused += 1  # the digest's own ops are no events
        try:
            self._check_cuda(torch)
        finally:
            self.paused -= 1

    def _check_cuda(self, torch):
        for name, t in list(self.model.named_parameters()) + list(self.model.named_buffers()):
            if _is_dtensor(t) or not _on_cuda(t) or t.layout != torch.strided:
                continue
            try:
                torch_dtype_name(t)
            except TypeError:  # a dtype detcheck does not read: absent by design, not a failure
                continue
            try:
                digest_torch_parts(t.detach())
            except Exception as e:
                raise RuntimeError("detcheck.Recorder: trace: the digest of CUDA tensor %s %s %s failed: %s "
                                   "(a trace without the digests of its CUDA tensors compares nothing)"
                                   % (name, tuple(t.shape), t.dtype, e)) from e
            self.cuda_checked = True
            return

    def check_step(self, step):
        """Refuses step's events when it tried to digest CUDA tensors and
        could digest none: every CUDA slot absent, the trace would compare
        nothing there (bisect would find it identical)."""
        c = self.cuda
        if c.tried and not c.digested:
            raise RuntimeError("detcheck.Recorder: trace step %d: none of the %d CUDA tensor digests it took "
                               "succeeded (first: %s); a trace whose CUDA tensors have no digest compares "
                               "nothing, so the step is not recorded" % (step, c.tried, c.error))

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
                e = [weakref.ref(t), v, self.slot(t)]
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
        return len(tensors) + 1, b"".join(self.slot(t) for t in tensors) + self.state_slot(module)

    def add_digested(self, phase, kind, module, op, nin, ib, outs, slot=None):
        slot = slot or self.slot
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
        if nm == ROOT_NAME and not self.cuda_checked:
            self.check_cuda()  # when tracing starts: the model's forward
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

"""The replica guard: data-parallel replicas compared during the run, the
deviant rank named by majority (python/README.md, "Replica guard").

In data-parallel training every replica holds bit-identical weights after
each step, and identical optimizer state where that state is replicated: a
replica that differs is the evidence of silent data corruption, which
NaN checks miss nearly always. Every ``every`` steps each rank digests its
replicated state where it lives (a CUDA tensor on its GPU) and the ranks
exchange one 16-byte root each; only when the roots differ do they gather
the per-tensor digests, and a strict majority of the replicas names the
deviant rank(s) and the first differing tensor, in model order.

What is replicated, and compared:

- plain tensors (DDP, or a model every rank holds whole): the parameters,
  buffers and, when given, the optimizer's state, across ``group``
  (default: the world);
- DTensors (FSDP2): a parameter's local shard across the group of its
  mesh's Replicate dimension (HSDP: the ranks holding the same shard); a
  DTensor with no Replicate dimension is held once and not compared
  (:attr:`ReplicaGuard.not_compared` says so);
- an optimizer whose state is partitioned over the ranks (DeepSpeed ZeRO,
  Megatron's distributed optimizer): its state is not compared, the
  parameters (whole on every rank after their all-gather) are; ZeRO-3
  partitions the parameters themselves and is refused."""
import ctypes
import logging
import socket
import sys

from . import _lib
from ._digest import digest_torch_parts
from ._tensors import _is_dtensor

_log = logging.getLogger("detcheck")


class ReplicaMismatch(Exception):
    """Replicas that should hold the same bits do not: ``step``, ``ranks``
    (the deviant ranks by strict majority; empty when two replicas differ
    or no root has a majority: then nobody is blamed), ``tensor`` (the
    first differing name, model order: a parameter or buffer as the model
    names it, ``optimizer.state.NAME.KEY`` for optimizer state), ``kind``
    (parameter, buffer, optimizer state), ``hosts`` ({rank: "host device"}
    of every replica), ``groups`` (the ranks by the root they hold, largest
    first), ``replicas`` (the ranks compared)."""

    def __init__(self, message, step=None, ranks=(), tensor=None, kind=None, hosts=None, groups=(), replicas=()):
        super().__init__(message)
        self.step, self.ranks, self.tensor, self.kind = step, list(ranks), tensor, kind
        self.hosts, self.groups, self.replicas = dict(hosts or {}), [list(g) for g in groups], list(replicas)

    def __reduce__(self):
        return (ReplicaMismatch, (str(self), self.step, self.ranks, self.tensor, self.kind, self.hosts, self.groups,
                                  self.replicas))


def _device_text(t):
    """Where tensor t lives, as a mismatch names it: "cpu", or "cuda:N
    (bus DDDD:BB:DD.0)"."""
    if t is None or t.device.type != "cuda":
        return "cpu" if t is None else str(t.device)
    import torch
    i = t.device.index if t.device.index is not None else torch.cuda.current_device()
    p = torch.cuda.get_device_properties(i)
    bus = getattr(p, "pci_bus_id", None)
    if bus is None:
        return "cuda:%d" % i
    return "cuda:%d (bus %04x:%02x:%02x.0)" % (i, getattr(p, "pci_domain_id", 0), bus, getattr(p, "pci_device_id", 0))


def _partitioned_optimizer(opt):
    """An optimizer whose state each rank holds a part of (DeepSpeed's ZeRO
    optimizers, Megatron's distributed optimizer)."""
    for cls in type(opt).__mro__:
        mod, name = cls.__module__ or "", cls.__name__
        if mod.startswith("deepspeed.") and "Zero" in name:
            return True
        if mod.startswith("megatron.") and "DistributedOptimizer" in name:
            return True
    return False


class ReplicaGuard:
    """Compares the data-parallel replicas' state every ``every`` steps.

    ``model``: the model (a DDP/FSDP wrapper or the module); ``optimizer``:
    its optimizer, whose state is compared where it is replicated;
    ``group``: the process group of the replicas (default: the world);
    ``on_mismatch``: ``"raise"`` (raise :class:`ReplicaMismatch` on every
    rank), ``"warn"`` (log it once per step and return it from
    :meth:`step`), or a callable called with it (its result returned).

    Call :meth:`step` after ``optimizer.step()`` (before a checkpoint is
    written from the state), and :meth:`check` at any time, e.g. right
    after a resume, before the first step. Both are collectives over the
    replicas."""

    def __init__(self, model, optimizer=None, *, group=None, every=1, on_mismatch="raise"):
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError("detcheck.ReplicaGuard: every must be an integer >= 1, not %r" % (every,))
        if on_mismatch not in ("raise", "warn") and not callable(on_mismatch):
            raise ValueError("detcheck.ReplicaGuard: on_mismatch is 'raise', 'warn' or a callable, not %r"
                             % (on_mismatch,))
        if any(hasattr(p, "ds_tensor") for p in model.parameters()):
            raise ValueError("detcheck.ReplicaGuard: DeepSpeed ZeRO-3 partitions the parameters themselves: no "
                             "rank holds a replica to compare (ZeRO-1/2 keep them whole)")
        self.model, self.optimizer, self.group = model, optimizer, group
        self.every, self.on_mismatch = every, on_mismatch
        self.not_compared = []
        self._warned = set()

    # ---------------------------------------------------------------- what is compared

    def _entries(self):
        """[(group, [(name, kind, local tensor)])]: the replicated state in
        model order, by the group that holds replicas of it."""
        plain, shards, self.not_compared = [], [], []
        name_of = {}
        mesh_group = [None]

        def add(name, kind, t):
            if t is None:
                return
            if _is_dtensor(t):
                g = self._replicate_group(t, name)
                if g is None:
                    self.not_compared.append(name)
                    return
                if mesh_group[0] is None:
                    mesh_group[0] = g
                elif g is not mesh_group[0]:
                    raise ValueError("detcheck.ReplicaGuard: %s replicates over another group than the model's "
                                     "other DTensors; guard them separately" % name)
                shards.append((name, kind, t.to_local()))
            else:
                plain.append((name, kind, t))

        for name, p in self.model.named_parameters():
            name_of[id(p)] = name
            add(name, "parameter", p.detach())
        for name, b in self.model.named_buffers():
            add(name, "buffer", b)
        opt = self.optimizer
        if opt is not None and not _partitioned_optimizer(opt):
            state = getattr(opt, "state", {})
            for p in (p for g in opt.param_groups for p in g["params"]):
                st = state.get(p) if hasattr(state, "get") else None
                if not st:
                    continue
                if id(p) not in name_of:
                    # a parameter the model does not hold (an inner optimizer of a
                    # partitioning wrapper, over its flat shards): not a replica
                    self.not_compared.append("optimizer state of a parameter of shape %s the model does not hold"
                                             % (tuple(p.shape),))
                    continue
                pname = name_of[id(p)]
                for k in sorted(st, key=str):
                    v = st[k]
                    if hasattr(v, "data_ptr"):
                        add("optimizer.state.%s.%s" % (pname, k), "optimizer state", v)
        elif opt is not None:
            self.not_compared.append("optimizer state (%s: partitioned over the ranks)" % type(opt).__name__)
        out = []
        if plain:
            out.append((self.group, plain))
        if shards:
            out.append((mesh_group[0], shards))
        return out

    def _replicate_group(self, t, name):
        """The process group of a DTensor's Replicate mesh dimension, or None
        when it has none (sharded everywhere: no replica to compare)."""
        from torch.distributed.tensor import Replicate
        dims = [i for i, p in enumerate(t.placements) if isinstance(p, Replicate)]
        if not dims:
            return None
        if len(dims) > 1:
            raise ValueError("detcheck.ReplicaGuard: %s is replicated over %d mesh dimensions; guard with the "
                             "group that spans them" % (name, len(dims)))
        return t.device_mesh.get_group(dims[0])

    # ---------------------------------------------------------------- the comparison

    def step(self, step):
        """The check of step ``step`` when it is due (every ``every``
        steps); None when it is not or the replicas agree."""
        if step % self.every:
            return None
        return self.check(step)

    def check(self, step=None):
        """Compares the replicas now. None when they agree, else what
        ``on_mismatch`` says (raise, or the mismatch returned)."""
        passes = self._entries()
        if not passes and "empty" not in self._warned:  # no evidence is no OK: said once
            self._warned.add("empty")
            _log.warning("detcheck.ReplicaGuard: no replicated tensor to compare (%s)",
                         "; ".join(self.not_compared) or "the model holds no parameters or buffers")
        found = None
        for group, entries in passes:
            if _replicas(group) < 2:
                if "alone" not in self._warned:  # said once: a guard with nothing to compare is no guard
                    self._warned.add("alone")
                    _log.warning("detcheck.ReplicaGuard: one replica in the group (torch.distributed %s): nothing "
                                 "is compared", "initialised" if _dist() else "not initialised")
                self.not_compared.extend(n for n, _, _ in entries)
                continue
            found = _compare(group, entries, step)
            if found is not None:
                break
        dist = _dist()
        if dist and any(g is not None and dist.get_world_size(g) < dist.get_world_size() for g, _ in passes):
            # replicas compared within groups smaller than the world (HSDP's
            # replicate groups): every rank learns the verdict, so every rank
            # raises, not only those of the group that found it
            flag = __import__("torch").tensor([0 if found is None else 1 + dist.get_rank()],
                                              device="cuda" if dist.get_backend() == "nccl" else "cpu")
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            if int(flag.item()):
                verdicts = [None] * dist.get_world_size()
                dist.all_gather_object(verdicts, found)
                found = next(v for v in verdicts if v is not None)
        return None if found is None else self._handle(found)

    def _handle(self, m):
        if self.on_mismatch == "raise":
            raise m
        if self.on_mismatch == "warn":
            if m.step not in self._warned:
                self._warned.add(m.step)
                _log.warning("%s", m)
            return m
        return self.on_mismatch(m)


def _dist():
    """torch.distributed when it is initialised, else None."""
    dist = sys.modules.get("torch.distributed")
    return dist if dist is not None and dist.is_available() and dist.is_initialized() else None


def _replicas(group):
    dist = _dist()
    return dist.get_world_size(group) if dist else 1


def _compare(group, entries, step):
    dist = _dist()
    world = dist.get_world_size(group)
    import torch
    names = [n.encode("utf-8", "surrogateescape") for n, _, _ in entries]
    digests = (_lib.Digest * max(len(entries), 1))()
    for i, (_, _, t) in enumerate(entries):
        digests[i] = digest_torch_parts(t)[2]
    cnames = (ctypes.c_char_p * max(len(names), 1))(*names)
    root = _lib.root_digest(cnames, digests, len(entries))
    raw = bytes.fromhex(_lib.hex_of(root))
    dev = "cuda" if dist.get_backend(group) == "nccl" else "cpu"
    t = torch.frombuffer(bytearray(raw), dtype=torch.uint8).to(dev)
    roots = [torch.empty_like(t) for _ in range(world)]
    dist.all_gather(roots, t, group=group)  # 16 bytes a rank
    roots = [bytes(r.cpu().tolist()) for r in roots]
    if all(r == roots[0] for r in roots):
        return None
    # they differ: the per-tensor digests, where each rank runs
    where = _device_text(entries[0][2] if entries else None)
    info = (names, [_lib.hex_of(digests[i]) for i in range(len(entries))], socket.gethostname(), where)
    gathered = [None] * world
    dist.all_gather_object(gathered, info, group=group)
    ranks = [dist.get_global_rank(group, r) if group is not None else r for r in range(world)]
    return _verdict(entries, roots, gathered, ranks, step)


def _verdict(entries, roots, gathered, ranks, step):
    """The mismatch every rank builds alike from the gathered roots and
    digests. ranks: the global rank of each member of the group."""
    for r, (nm, _, _, _) in enumerate(gathered):
        if nm != gathered[0][0]:
            k = next((i for i, (a, b) in enumerate(zip(nm, gathered[0][0])) if a != b), min(len(nm), len(gathered[0][0])))
            raise ValueError("detcheck.ReplicaGuard: rank %d holds another list of tensors than rank %d (they part at "
                             "entry %d): the replicas are not the same model" % (ranks[r], ranks[0], k))
    # the vote is the library's (dck_replica_decide), the one dck_replica_check casts
    world, n = len(roots), len(entries)
    croots = (_lib.Digest * world)(*[_lib.digest_of_hex(r.hex()) for r in roots])
    table = (_lib.Digest * max(world * n, 1))(*[_lib.digest_of_hex(h) for g in gathered for h in g[1]])
    res = _lib.ReplicaResult()
    if _lib.replica_decide(croots, world, table, n, ctypes.byref(res)):
        msg = _lib.last_error().decode("utf-8", "replace")
        _lib.replica_result_release(ctypes.byref(res))
        raise ValueError("detcheck.ReplicaGuard: %s" % msg)
    try:
        groups = [[res.groups[g].ranks[k] for k in range(res.groups[g].nranks)] for g in range(res.ngroups)]
        major = groups[0] if res.majority else None
        deviant = [res.deviant[k] for k in range(res.ndeviant)]
        first = entries[res.tensor][:2] if res.tensor >= 0 else None
    finally:
        _lib.replica_result_release(ctypes.byref(res))
    hosts = {ranks[r]: "%s %s" % (g[2], g[3]) for r, g in enumerate(gathered)}
    at = "step %s" % step if step is not None else "the check"
    what = "%s %s" % (first[1], first[0]) if first else "the tensor list"
    if deviant:
        who = ", ".join("rank %d (%s)" % (ranks[r], hosts[ranks[r]]) for r in deviant)
        msg = ("detcheck.ReplicaGuard: at %s, %s differs from the other %d replica%s: first differing %s "
               "(the majority of %d of %d replicas agree)" % (
                   at, who, len(major), "" if len(major) == 1 else "s", what, len(major), world))
    elif world == 2:
        msg = ("detcheck.ReplicaGuard: at %s, the 2 replicas (ranks %d and %d) differ: first differing %s; a third "
               "replica is needed to tell which one is wrong" % (at, ranks[0], ranks[1], what))
    else:
        msg = ("detcheck.ReplicaGuard: at %s, the %d replicas disagree with no majority (%s): first differing %s; "
               "nobody is blamed" % (at, world, " | ".join(",".join(str(ranks[r]) for r in g) for g in groups), what))
    return ReplicaMismatch(msg, step=step, ranks=[ranks[r] for r in deviant], tensor=first[0] if first else None,
                           kind=first[1] if first else None, hosts=hosts,
                           groups=[[ranks[r] for r in g] for g in groups], replicas=ranks)

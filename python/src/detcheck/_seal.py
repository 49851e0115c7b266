"""Sealed checkpoints: the digests of the state a run saved, written beside
the checkpoint right after the save, and checked against the state the run
holds after the load (detcheck-seal(1)).

The seal is a detcheck manifest (``detcheck hash -o``'s format) whose
metadata say ``seal: 1``: ``PATH/detcheck-seal.yaml`` inside a directory
checkpoint, ``PATH.detcheck-seal.yaml`` beside a file. Its names are the
checkpoint's own, as ``detcheck hash PATH`` names the files, so that
``detcheck verify --seal PATH`` checks the files offline against the same
seal:

- a directory (torch.distributed.checkpoint): DCP's flattened keys
  (``flatten_state_dict`` after Stateful objects gave their state_dict, as
  ``dcp.save`` does); a tensor is digested where it lives, a DTensor from
  the shards of every rank (its digest is the same for any sharding, so a
  seal written by 4 ranks verifies a load on 2 or 1); a non-tensor entry
  is walked as the pickle DCP stores it (its scalars are values);
- a file (``torch.save``): the names :func:`detcheck.manifest` gives.

Collectives: for a directory, every rank of ``group`` (default: the world
when torch.distributed is initialised) calls :func:`seal` and
:func:`verify_seal` together, as it calls ``dcp.save`` / ``dcp.load``.
For a file, nothing is exchanged unless ``group`` is given: the process
that wrote the file seals it (a per-rank file gets its own seal).

What the ranks hold of a plain (non-DTensor) tensor must agree: DCP
writes one copy of a name every rank saves (its de-duplication of
replicated state), so ranks that disagree have lost data, and :func:`seal`
raises naming the tensor and the ranks.

RNG states: a state entry that holds this process's torch RNG state at
the seal (``torch.get_rng_state()``, a CUDA device's) is recorded as such
(``seal_rng``); after the load, :func:`verify_seal` checks that the
process's RNG state is the one that entry loaded, so a resume that loads
the state but forgets ``torch.set_rng_state`` is named."""
import ctypes
import io
import os
import sys
import time
import warnings

from . import _lib
from ._digest import digest_numpy_parts, digest_torch_parts
from ._manifest import Manifest, _Walker, _xxh128
from ._shard import digest_shards, dtensor_item
from ._tensors import _is_dtensor, is_torch_tensor

SEAL_NAME = "detcheck-seal.yaml"
SEAL_SUFFIX = ".detcheck-seal.yaml"

# the kinds of SealError: a difference (dck_cmp kinds, as verify names them)
# or no seal at all
_KIND_OF_CMP = {"digest": "differs", "value": "differs", "dtype": "dtype", "shape": "shape",
                "missing": "missing", "extra": "extra", "file": "differs"}


class SealError(Exception):
    """The state is not what the checkpoint's seal says, or the checkpoint
    has no seal. ``path`` (the checkpoint), ``tensor`` (the first differing
    name, or None), ``kind`` (differs, missing, extra, dtype, shape,
    replicas -- ranks that disagree at the seal --, unsealed, or trouble:
    a seal that cannot be read or written, named in the message),
    ``files`` (the checkpoint files that hold it, when known),
    ``differences`` (every difference as (name, kind))."""

    def __init__(self, message, path=None, tensor=None, kind=None, files=(), differences=()):
        super().__init__(message)
        self.path, self.tensor, self.kind = path, tensor, kind
        self.files, self.differences = list(files), list(differences)

    def __reduce__(self):  # pickled between ranks
        return (_make_error, (str(self), self.path, self.tensor, self.kind, self.files, self.differences))


def _make_error(message, path, tensor, kind, files, differences):
    return SealError(message, path, tensor, kind, files, differences)


class SealResult:
    """What :func:`seal` wrote or :func:`verify_seal` checked: ``path`` (the
    checkpoint), ``seal_path``, ``sealed`` (False only for an unsealed
    checkpoint accepted with ``require=False``: nothing was compared),
    ``tensors_compared``, ``values_compared``, ``root`` (the state's root
    digest), ``step``, ``world_size`` (the ranks that sealed),
    ``rng_checked`` (the entries whose RNG state was compared with the
    process's). True when sealed and equal."""

    def __init__(self, path, seal_path, sealed, tensors=0, values=0, root=None, step=None, world_size=None,
                 rng_checked=()):
        self.path, self.seal_path, self.sealed = path, seal_path, sealed
        self.tensors_compared, self.values_compared, self.root = tensors, values, root
        self.step, self.world_size, self.rng_checked = step, world_size, list(rng_checked)

    def __bool__(self):
        return self.sealed

    def __repr__(self):
        if not self.sealed:
            return "<detcheck.SealResult %s: unsealed, nothing compared>" % self.path
        return "<detcheck.SealResult %s: %d tensors, %d values, root %s>" % (
            self.path, self.tensors_compared, self.values_compared, self.root)


def _c(name, restype, *argtypes):
    f = getattr(_lib.lib, name, None)
    if f is None:
        raise RuntimeError("detcheck: %s has no %s (a libdetcheck older than the seals)" % (_lib.LIB_PATH, name))
    f.restype, f.argtypes = restype, list(argtypes)
    return f


def seal_path(path):
    """Where the seal of checkpoint ``path`` is (or goes)."""
    p = os.fspath(path)
    return os.path.join(p, SEAL_NAME) if os.path.isdir(p) else p + SEAL_SUFFIX


# ---------------------------------------------------------------- the state, named as the checkpoint names it

class _Entries:
    """One rank's digests of the state: ``tensors`` {name: (dtype, shape,
    hex)} of what this rank digests alone, ``dtensors`` [(name, item)] to
    digest with the other ranks, ``values`` {name: text}."""

    def __init__(self):
        self.tensors, self.dtensors, self.values, self.local = {}, [], {}, {}

    def tensor(self, name, t):
        if is_torch_tensor(t) and _is_dtensor(t):
            item, _ = dtensor_item(t)
            self.dtensors.append((name, item))
            return
        dt, shape, d = digest_torch_parts(t) if is_torch_tensor(t) else digest_numpy_parts(t)
        if name in self.tensors:
            raise ValueError("detcheck.seal: the state names %s twice" % name)
        self.tensors[name] = (dt, tuple(int(s) for s in shape), _lib.hex_of(d))

    def value(self, name, text):
        self.values[name] = text


def _dcp_entries(state):
    """The state as dcp.save names it: Stateful entries by their
    state_dict(), then DCP's own flatten_state_dict."""
    from torch.distributed.checkpoint._nested_dict import flatten_state_dict
    from torch.distributed.checkpoint.stateful import Stateful

    top = {k: (v.state_dict() if isinstance(v, Stateful) else v) for k, v in state.items()}
    flat, _ = flatten_state_dict(top)
    e = _Entries()
    walker = _Walker(e.tensor, e.value)
    for fqn, v in flat.items():
        if is_torch_tensor(v):
            e.tensor(fqn, v)
        elif isinstance(v, io.BytesIO):  # DCP writes its bytes as they are
            e.value(fqn, "bytes:" + _lib.hex_of(_xxh128(v.getvalue())))
        else:
            walker.walk(v, fqn)  # a torch.save'd object: its scalars (and any tensors in it)
    return e


def _file_entries(state):
    e = _Entries()
    _Walker(e.tensor, e.value).walk(state, "")
    return e


def _rng_sources():
    """{source: digest hex} of this process's torch RNG states."""
    torch = sys.modules.get("torch")
    out = {}
    if torch is None:
        return out
    out["torch"] = _lib.hex_of(digest_torch_parts(torch.get_rng_state())[2])
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for i in range(torch.cuda.device_count()):
            out["cuda:%d" % i] = _lib.hex_of(digest_torch_parts(torch.cuda.get_rng_state(i))[2])
    return out


def _group(group, collective):
    """(group, world size, rank) of the exchange, or (None, 1, 0)."""
    if not collective:
        return None, 1, 0
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None, 1, 0
    return group, dist.get_world_size(group), dist.get_rank(group)


def _all_gather(obj, group, world):
    if world == 1:
        return [obj]
    import torch.distributed as dist
    out = [None] * world
    dist.all_gather_object(out, obj, group=group)
    return out


def _state_digests(path, state, group, collective, what):
    """Every rank's entries, gathered, and the DTensors' digests:
    (tensors {name: [(rank, (dtype, shape, hex))]}, values {name: [(rank,
    text)]}, rng {name: source} this rank found, world, rank)."""
    if not isinstance(state, dict) and os.path.isdir(path):
        raise TypeError("detcheck.%s: state of a directory checkpoint (torch.distributed.checkpoint) is the "
                        "dict given to dcp.save / dcp.load, not a %s" % (what, type(state).__name__))
    group, world, rank = _group(group, collective)
    e = _dcp_entries(state) if os.path.isdir(path) else _file_entries(state)
    dn = [n for n, _ in e.dtensors]
    if e.dtensors:
        whole = digest_shards([it for _, it in e.dtensors], group=group if world > 1 else None)
    else:
        whole = []
    rngs = _rng_sources()
    rng = {n: src for n, (dt, _, h) in e.tensors.items() if dt == "U8" for src, hh in rngs.items() if h == hh}
    gathered = _all_gather((sorted(dn), e.tensors, e.values), group, world)
    for r, (names, _, _) in enumerate(gathered):
        if names != sorted(dn):
            raise ValueError("detcheck.%s: rank %d holds DTensors %s, this rank %s: the ranks must pass the "
                             "same state" % (what, r, names[:5], sorted(dn)[:5]))
    tensors, values = {}, {}
    for n, d in zip(dn, whole):
        tensors[n] = [(None, (d.dtype, tuple(d.shape), str(d)))]
    for r, (_, ts, vs) in enumerate(gathered):
        for n, t in ts.items():
            if n in tensors and tensors[n][0][0] is None:
                raise ValueError("detcheck.%s: %s is a DTensor on some ranks and a plain tensor on rank %d"
                                 % (what, n, r))
            tensors.setdefault(n, []).append((r, t))
        for n, v in vs.items():
            values.setdefault(n, []).append((r, v))
    return tensors, values, rng, world, rank


def _manifest(tensors, values, meta=()):
    """A finalized Manifest of {name: (dtype, shape, hex)} and {name: text}."""
    h = ctypes.c_void_p()
    _lib.check(_lib.manifest_create(ctypes.byref(h)))
    m = Manifest(h.value)
    for name, (dt, shape, hx) in tensors.items():
        rec = _lib.ManifestTensor()
        nm = name.encode("utf-8", "surrogateescape")
        rec.name, rec.group, rec.dtype, rec.ndim = nm, _lib.group_of_name(nm), _lib.DTYPE_CODE[dt], len(shape)
        for i, s in enumerate(shape):
            rec.shape[i] = s
        rec.digest = _lib.digest_of_hex(hx)
        _lib.check(_lib.manifest_add_tensor(m._h, ctypes.byref(rec)))
    for name, text in values.items():
        _lib.check(_lib.manifest_add_value(m._h, name.encode("utf-8", "surrogateescape"), text.encode()))
    for k, v in meta:
        _lib.check(_lib.manifest_set_meta(m._h, k.encode(), str(v).encode()))
    return m


# ---------------------------------------------------------------- seal

def seal_manifest(path, manifest, step=None, world_size=None, rng=None):
    """Writes ``manifest`` (an unfinalized one from :func:`_manifest`, or a
    :class:`Manifest` of the state) as the memory seal of checkpoint
    ``path``; no collective. Returns the seal's path. Raises SealError when
    the seal cannot be written (an existing file that is not a seal, a
    link, a FIFO...)."""
    path = os.fspath(path)
    m = manifest
    _lib.check(_lib.manifest_set_meta(m._h, b"tool", b"detcheck-python"))
    _lib.check(_lib.manifest_set_meta(m._h, b"created", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()).encode()))
    if rng:
        _lib.check(_lib.manifest_set_meta(m._h, b"seal_rng",
                                          ",".join("%s=%s" % kv for kv in sorted(rng.items())).encode()))
    mark = _c("dck_seal_mark", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p,
              ctypes.c_longlong, ctypes.c_int)
    _lib.check(mark(m._h, os.fsencode(path), b"memory", -1 if step is None else int(step), int(world_size or 0)))
    _lib.check(_lib.manifest_finalize(m._h))
    save = _c("dck_seal_save", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)
    st = save(m._h, os.fsencode(path))
    if st:
        raise SealError("detcheck.seal: %s" % _lib.last_error().decode("utf-8", "replace"), path=path,
                        kind="trouble")
    return seal_path(path)


def seal(path, state, *, step=None, group=None):
    """Seals the checkpoint just written at ``path`` with the digests of
    ``state``, the state it was written from (call it right after
    ``dcp.save(state, checkpoint_id=path)`` or ``torch.save(state, path)``).

    A directory checkpoint is sealed by every rank of ``group`` together
    (default: the world when torch.distributed is initialised); one rank
    writes the seal. A file is sealed by the process that calls it, unless
    ``group`` is given. ``step``: the training step, recorded in the seal.
    Raises :class:`SealError` on every rank when the ranks' copies of a
    plain tensor disagree (kind ``replicas``: DCP kept only one) or the
    seal cannot be written (an existing file at the seal path that is not
    a seal is never replaced). Returns a :class:`SealResult`."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise SealError("detcheck.seal: %s does not exist: seal a checkpoint after it is written" % path,
                        path=path, kind="trouble")
    collective = os.path.isdir(path) or group is not None
    tensors, values, rng, world, rank = _state_digests(path, state, group, collective, "seal")
    merged_t, merged_v, err = {}, {}, None
    for n, copies in tensors.items():
        merged_t[n] = copies[0][1]
        other = next(((r, c) for r, c in copies[1:] if c != copies[0][1]), None)
        if other and err is None:
            err = SealError("detcheck.seal: %s: rank %d's copy of %s differs from rank %d's (%s): dcp.save keeps "
                            "one copy of a plain tensor every rank saves, so the checkpoint cannot restore both; "
                            "make it a DTensor or key it by rank" % (path, other[0], n, copies[0][0],
                                                                     _what_differs(copies[0][1], other[1])),
                            path=path, tensor=n, kind="replicas")
    for n, copies in values.items():
        merged_v[n] = copies[0][1]
        other = next(((r, v) for r, v in copies[1:] if v != copies[0][1]), None)
        if other and err is None:
            err = SealError("detcheck.seal: %s: rank %d's %s is %s, rank %d's %s: dcp.save keeps one of them"
                            % (path, other[0], n, other[1], copies[0][0], copies[0][1]),
                            path=path, tensor=n, kind="replicas")
    # the RNG entries every rank found (each rank's own state)
    rngs = _all_gather(rng, group, world)
    common = {n: s for n, s in rngs[0].items() if all(r.get(n) == s for r in rngs)}
    sp = seal_path(path)
    if err is None and rank == 0:
        m = _manifest(merged_t, merged_v)
        try:
            seal_manifest(path, m, step=step, world_size=world, rng=common)
        except SealError as e:
            err = e
    if world > 1:  # every rank raises what rank 0 met
        err = _all_gather(err, group, world)[0] or err
    if err is not None:
        raise err
    return SealResult(path, sp, True, len(merged_t), len(merged_v), _root(merged_t, merged_v), step, world,
                      sorted(common))


def _what_differs(a, b):
    if a[0] != b[0]:
        return "dtype %s, not %s" % (b[0], a[0])
    if a[1] != b[1]:
        return "shape %s, not %s" % (list(b[1]), list(a[1]))
    return "digest %s, not %s" % (b[2], a[2])


def _root(tensors, values):
    m = _manifest(tensors, values)
    _lib.check(_lib.manifest_finalize(m._h))
    return m.root


# ---------------------------------------------------------------- verify

def load_seal(path, require=True):
    """The seal of checkpoint ``path`` as a :class:`Manifest` (checked as
    ``detcheck verify --seal`` checks it: a link, a FIFO, a manifest that is
    no seal raise SealError), or None when unsealed and not required."""
    sp = seal_path(path)
    if not os.path.lexists(sp):
        msg = ("detcheck.verify_seal: %s is not sealed (no %s): its state cannot be checked; seal checkpoints "
               "with detcheck.seal (or detcheck seal PATH for files already written)" % (path, sp))
        if require:
            raise SealError(msg, path=path, kind="unsealed")
        warnings.warn(msg + "; accepted (require=False)", stacklevel=3)
        return None
    load = _c("dck_seal_load", ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p))
    h = ctypes.c_void_p()
    if load(os.fsencode(sp), ctypes.byref(h)):
        raise SealError("detcheck.verify_seal: %s" % _lib.last_error().decode("utf-8", "replace"), path=path,
                        kind="trouble")
    m = Manifest(h.value)
    m._source = sp
    return m


def _meta(m, key):
    f = _c("dck_manifest_get_meta", ctypes.c_char_p, ctypes.c_void_p, ctypes.c_char_p)
    v = f(m._h, key.encode())
    return v.decode("utf-8", "replace") if v is not None else None


def _holders(path, name):
    """The files of checkpoint path that hold entry name."""
    if not os.path.isdir(path):
        return [os.path.basename(path)]
    try:
        from torch.distributed.checkpoint import FileSystemReader
        md = FileSystemReader(path).read_metadata()
    except Exception:  # noqa: BLE001 -- only a better message is lost
        return []
    files = set()
    for idx, info in (md.storage_data or {}).items():
        fqn = getattr(idx, "fqn", None)
        if fqn == name or (fqn and name.startswith(fqn + ".")):
            files.add(info.relative_path)
    return sorted(files)


def verify_manifest(path, manifest, require=True, *, _rank_copies=None):
    """Compares ``manifest`` (the loaded state, as a finalized
    :class:`Manifest`) with checkpoint ``path``'s seal; no collective.
    Raises :class:`SealError` at the first difference; returns a
    :class:`SealResult`."""
    path = os.fspath(path)
    gold = load_seal(path, require)
    if gold is None:
        return SealResult(path, seal_path(path), False)
    r = _lib.CmpResult()
    _lib.check(_lib.manifest_compare(gold._h, manifest._h, 0, ctypes.byref(r)))
    try:
        diffs = []
        for i in range(r.n):
            e = r.entries[i]
            diffs.append((e.name.decode("utf-8", "replace"), _KIND_OF_CMP[_lib.CMP_KINDS[e.kind]]))
        compared = r.tensors_compared
    finally:
        _lib.cmp_result_release(ctypes.byref(r))
    if diffs:
        name, kind = diffs[0]
        files = _holders(path, name)
        what = {"differs": "differs from the seal", "missing": "is in the seal but not in the state",
                "extra": "is in the state but not in the seal", "dtype": "has another dtype than in the seal",
                "shape": "has another shape than in the seal"}[kind]
        where = " (in %s)" % ", ".join(files) if files else ""
        ranks = ""
        if _rank_copies and name in _rank_copies:
            ranks = " on rank %d" % _rank_copies[name]
        more = "; %d more difference%s" % (len(diffs) - 1, "" if len(diffs) == 2 else "s") if len(diffs) > 1 else ""
        raise SealError("detcheck.verify_seal: %s: %s %s%s%s%s (sealed %s at step %s by %s rank%s)" % (
            path, name, what, ranks, where, more, _meta(gold, "created") or "?", _meta(gold, "seal_step") or "?",
            _meta(gold, "seal_world_size") or "?", "" if _meta(gold, "seal_world_size") == "1" else "s"),
            path=path, tensor=name, kind=kind, files=files, differences=diffs)
    step = _meta(gold, "seal_step")
    world = _meta(gold, "seal_world_size")
    return SealResult(path, seal_path(path), True, compared, len(manifest.values), manifest.root,
                      int(step) if step and step.isdigit() else None, int(world) if world and world.isdigit() else None)


def _sealed_rng(gold):
    text = _meta(gold, "seal_rng") if gold is not None else None
    out = {}
    for part in (text or "").split(","):
        if "=" in part:
            n, s = part.rsplit("=", 1)
            out[n] = s
    return out


def verify_seal(path, state, *, group=None, require=True):
    """After the load: digests ``state`` (the state the run loaded, as
    given to ``dcp.load`` or returned by ``torch.load``) and compares it
    with the seal of the checkpoint at ``path``, on whatever topology the
    run now has (a directory: every rank of ``group`` together, as
    dcp.load; a file: this process, unless ``group`` is given).

    Equal: returns a :class:`SealResult`. Different: raises
    :class:`SealError` on every rank, naming the first differing entry
    (``.tensor``), its kind and, for the checkpoint's files, the file that
    holds it. The RNG entries the seal names must also hold the process's
    RNG state now (restored after the load). No seal: SealError (kind
    ``unsealed``) unless ``require=False``, which warns and returns an
    unsealed result (False)."""
    path = os.fspath(path)
    collective = os.path.isdir(path) or group is not None
    tensors, values, _, world, rank = _state_digests(path, state, group, collective, "verify_seal")
    err, res = None, None
    try:
        gold = load_seal(path, require)
        if gold is None:
            res = SealResult(path, seal_path(path), False)
        else:
            # a rank's copy that is not the seal's is the one compared (and named)
            want = {n: (dt, tuple(shape), hx) for n, (_, dt, shape, hx) in gold.tensors.items()}
            merged, from_rank = {}, {}
            for n, copies in tensors.items():
                pick = next(((r, c) for r, c in copies if want.get(n) != c), copies[0])
                merged[n] = pick[1]
                if pick[0] is not None and world > 1 and want.get(n) is not None and want[n] != pick[1]:
                    from_rank[n] = pick[0]
            gv = gold.values
            mv = {}
            for n, copies in values.items():
                pick = next(((r, v) for r, v in copies if gv.get(n) != v), copies[0])
                mv[n] = pick[1]
                if world > 1 and n in gv and gv[n] != pick[1]:
                    from_rank[n] = pick[0]
            m = _manifest(merged, mv)
            _lib.check(_lib.manifest_finalize(m._h))
            res = verify_manifest(path, m, require, _rank_copies=from_rank)
            res.rng_checked = _check_rng(path, gold, tensors, rank)
    except SealError as e:
        err = e
    if world > 1:  # every rank raises the first error any rank met
        errs = _all_gather(err, group, world)
        err = next((x for x in errs if x is not None), None)
    if err is not None:
        raise err
    return res


def _check_rng(path, gold, tensors, rank):
    """The seal's RNG entries against the process's RNG states now."""
    sealed = _sealed_rng(gold)
    if not sealed:
        return []
    live = _rng_sources()
    checked = []
    for name, src in sorted(sealed.items()):
        if src not in live:
            continue  # e.g. a CUDA generator on a host without that device: not this process's
        mine = next((c for r, c in tensors.get(name, []) if r == rank or r is None), None)
        if mine is None:
            continue  # missing: the comparison above named it
        if mine[2] != live[src]:
            raise SealError("detcheck.verify_seal: %s: %s was the %s RNG state at the save, and it was loaded, "
                            "but the process's %s RNG state is not it: the RNG state was not restored (%s)"
                            % (path, name, src, src, "torch.set_rng_state(state[...])" if src == "torch"
                               else "torch.cuda.set_rng_state(..., %s)" % src.split(":")[1]),
                            path=path, tensor=name, kind="differs", files=_holders(path, name),
                            differences=[(name, "differs")])
        checked.append(name)
    return checked

"""Manifests of live Python objects: the names, groups, tensors and values
``detcheck hash`` gives the same object once torch.save'd, built here by
walking the object the way the library walks the unpickled tree
(src/formats/pickle_walk.c), and digesting every tensor in place."""
import collections
import copyreg
import ctypes
import json
import os
import types
import sys

from . import _lib
from ._digest import digest_numpy_parts, digest_torch_parts
from ._shard import digest_dtensor
from ._tensors import _is_dtensor, is_numpy_array, is_torch_tensor

# a sequence of more scalars than this is one value (pickle.h PK_SEQ_VALUE_MIN)
SEQ_VALUE_MIN = 8


def _scalar_text(v):
    """The text the walker records for a scalar: Python's own repr."""
    if hasattr(v, "item") and not isinstance(v, (bool, int, float)):
        v = v.item()  # a NumPy scalar: the file holds its value
    if v is None:
        return "None"
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, int):
        return str(int(v))
    return repr(float(v))


def _is_scalar(v):
    np = sys.modules.get("numpy")
    if np is not None and isinstance(v, np.generic):
        return isinstance(v, (np.bool_, np.integer, np.floating))  # the unpickler reads their value
    return v is None or type(v) in (bool, int, float) or (
        isinstance(v, (int, float)) and type(v).__module__ == "builtins")


def _component(text):
    # control characters become '?', as in the library
    return "".join("?" if (ord(c) < 0x20 or ord(c) == 0x7F) else c for c in text)


def _join(prefix, comp):
    comp = _component(comp)
    return prefix + "." + comp if prefix else comp


def _c_dict(x):
    """A dict the unpickler builds as a dict (pickle_torch.c's allow-list:
    dict, collections.OrderedDict, collections.defaultdict); a subclass is
    an object there."""
    return type(x) in (dict, collections.OrderedDict, collections.defaultdict)


def _by_reference(x):
    """Pickled as a reference to a global (pickle's save_global): nothing
    to record."""
    return isinstance(x, (type, types.FunctionType, types.BuiltinFunctionType))


def _what(obj, name):
    t = type(obj)
    return "%s (a %s.%s)" % (name or "the object", t.__module__, t.__qualname__)


class _Walker:
    """Walks what torch.save would pickle (protocol 2), named as the
    library's walk of the unpickled tree names it (pickle_walk.c): dicts by
    key, sequences by index, modules as their state_dict, and every other
    object through its __reduce_ex__(2) -- its state (__getstate__: a
    __dict__, __slots__ as (dict, slots)), the items a deque or a list
    subclass appends, the entries a dict subclass sets, and its constructor
    arguments (tensors only there, as in the library). An object pickle
    cannot save raises TypeError naming its path and type: a tensor is never
    dropped silently."""

    def __init__(self, on_tensor, on_value):
        self.on_tensor = on_tensor
        self.on_value = on_value
        self.depth = 0

    def key_text(self, key, index):
        if isinstance(key, (str, bytes)):
            return key if isinstance(key, str) else key.decode("utf-8", "replace")
        if _is_scalar(key):
            return _scalar_text(key)
        return "key%d" % index

    def module(self, m, name):
        for k, v in m._parameters.items():
            if v is not None:
                self.walk(v, _join(name, k))
        skip = getattr(m, "_non_persistent_buffers_set", set())
        for k, v in m._buffers.items():
            if v is not None and k not in skip:
                self.walk(v, _join(name, k))
        for k, v in m._modules.items():
            if v is not None:
                self.walk(v, _join(name, k))

    def walk(self, obj, name, tensors_only=False):
        self.depth += 1
        if self.depth > 100:
            raise ValueError("detcheck.manifest: objects nested deeper than 100 levels at %s" % name)
        try:
            self._walk(obj, name, tensors_only)
        finally:
            self.depth -= 1

    def items(self, pairs, name, tensors_only):
        for i, (k, v) in enumerate(pairs):
            self.walk(v, _join(name, self.key_text(k, i)), tensors_only)

    def _walk(self, obj, name, tensors_only):
        torch = sys.modules.get("torch")
        np = sys.modules.get("numpy")
        if is_torch_tensor(obj) or is_numpy_array(obj):
            self.on_tensor(name, obj)
        elif _is_scalar(obj):
            if not tensors_only:
                self.on_value(name, _scalar_text(obj))
        elif type(obj) in (bytes, bytearray):
            if not tensors_only:
                self.on_value(name, "bytes:" + _lib.hex_of(_xxh128(bytes(obj))))
        elif type(obj) in (tuple, list, set, frozenset) or (torch is not None and type(obj) is torch.Size):
            seq = list(obj)
            if (not tensors_only and isinstance(obj, (tuple, list)) and len(seq) > SEQ_VALUE_MIN
                    and all(_is_scalar(v) for v in seq)):  # (never a set: the library walks its items)
                body = ", ".join(_scalar_text(v) for v in seq)
                self.on_value(name, "(%s)" % body if isinstance(obj, tuple) else "[%s]" % body)
            else:
                for i, v in enumerate(seq):
                    self.walk(v, _join(name, str(i)), tensors_only)
        elif _c_dict(obj):
            self.items(obj.items(), name, tensors_only)
        elif isinstance(obj, str) or _by_reference(obj) or (np is not None and isinstance(obj, np.dtype)):
            pass  # strings are not recorded; globals and dtypes hold nothing
        elif torch is not None and isinstance(obj, torch.nn.Module):
            self.module(obj, name)
        elif torch is not None and isinstance(obj, torch.optim.Optimizer):
            self.walk(obj.state_dict(), name, tensors_only)
        elif hasattr(obj, "state_dict") and callable(obj.state_dict):
            self.walk(obj.state_dict(), name, tensors_only)  # schedulers, scalers...
        else:
            self.reduced(obj, name, tensors_only)

    def reduced(self, obj, name, tensors_only):
        """An object as pickle saves it (save_reduce) and the library walks
        the opaque object it becomes: state, set entries, appended items,
        then the constructor's arguments (tensors only)."""
        try:
            reducer = copyreg.dispatch_table.get(type(obj))
            rv = reducer(obj) if reducer else obj.__reduce_ex__(2)
        except Exception as e:
            raise TypeError("detcheck.manifest: %s cannot be pickled, so torch.save cannot save it "
                            "and detcheck cannot name its tensors: %s" % (_what(obj, name), e)) from None
        if isinstance(rv, str):
            return  # a global, by name
        if not isinstance(rv, tuple) or not 2 <= len(rv) <= 6:
            raise TypeError("detcheck.manifest: %s: __reduce_ex__ returned %r, which pickle refuses"
                            % (_what(obj, name), type(rv).__name__))
        rv = rv + (None,) * (6 - len(rv))
        func, args, state, listitems, dictitems, _ = rv
        args = tuple(args or ())
        if func is copyreg.__newobj__:
            args = args[1:]  # NEWOBJ: cls, then its arguments
        elif func is getattr(copyreg, "__newobj_ex__", None) and (args[1] or args[2]):
            raise TypeError("detcheck.manifest: %s pickles through __getnewargs_ex__, whose arguments "
                            "detcheck hash cannot name; give the object a __getstate__ or pass its tensors "
                            "in a dict" % _what(obj, name))
        elif func in _BUILDERS:
            raise TypeError("detcheck.manifest: %s pickles as a call of %s, which detcheck.manifest does not "
                            "follow; pass a plain %s instead" % (_what(obj, name), func.__name__, func.__name__))
        if state is not None:
            if _c_dict(state):
                self.items(state.items(), name, tensors_only)
            elif type(state) is tuple and len(state) == 2 and (state[0] is None or _c_dict(state[0])):
                for part in state:  # (__dict__, __slots__ values)
                    if part is None:
                        continue
                    if not _c_dict(part):
                        raise TypeError("detcheck.manifest: %s: state (dict, %s): detcheck hash reads "
                                        "only dicts there" % (_what(obj, name), type(part).__name__))
                    self.items(part.items(), name, tensors_only)
            else:
                self.walk(state, name, tensors_only)
        if dictitems is not None:
            self.items(dictitems, name, tensors_only)
        if listitems is not None:
            for i, v in enumerate(listitems):
                self.walk(v, _join(name, str(i)), tensors_only)
        for i, v in enumerate(args):  # arguments of unknown constructors: only tensors matter
            self.walk(v, _join(name, str(i)), True)


# constructors the unpickler builds plain values with (pickle_torch.c);
# an object reducing to one of them is refused rather than guessed at
_BUILDERS = (dict, list, set, frozenset, tuple, bytes, bytearray, collections.OrderedDict,
             collections.defaultdict)


def _same_file(a, b):
    try:
        sa, sb = os.stat(a), os.stat(b)
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def _xxh128(data):
    f = _lib.lib.dck_xxh128
    f.restype = _lib.Digest
    f.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    buf = ctypes.create_string_buffer(data, len(data))
    return f(ctypes.cast(buf, ctypes.c_void_p), len(data))


class Manifest:
    """A finalized manifest (libdetcheck's dck_manifest): ``tensors`` (name ->
    (group, dtype, shape, digest)), ``values`` (name -> text), ``root``.
    ``save(path)`` writes it as ``detcheck hash -o`` does (YAML, or JSON when
    the path ends in .json or fmt="json"). ``notices``: what
    :func:`hash_files` set aside as not a checkpoint file."""

    notices = ()

    def __init__(self, handle):
        self._h = ctypes.c_void_p(handle)

    def __del__(self):
        h, self._h = getattr(self, "_h", None), None
        if h and _lib is not None and _lib.manifest_free is not None:
            _lib.manifest_free(h)

    @classmethod
    def load(cls, path):
        """Reads a YAML or JSON manifest (checks it, as detcheck verify does)."""
        h = ctypes.c_void_p()
        _lib.check(_lib.manifest_load(os.fsencode(str(path)), ctypes.byref(h)))
        m = cls(h.value)
        m._source = str(path)  # an input: save() never replaces it
        return m

    @property
    def tensors(self):
        out = {}
        for i in range(_lib.manifest_tensor_count(self._h)):
            t = _lib.manifest_tensor_at(self._h, i).contents
            out[t.name.decode()] = (_lib.GROUPS[t.group], _lib.DTYPES[t.dtype],
                                    tuple(t.shape[:t.ndim]), _lib.hex_of(t.digest))
        return out

    @property
    def values(self):
        out = {}
        for i in range(_lib.manifest_value_count(self._h)):
            v = _lib.manifest_value_at(self._h, i).contents
            out[v.name.decode()] = v.value.decode()
        return out

    @property
    def root(self):
        return _lib.hex_of(_lib.manifest_root(self._h))

    def save(self, path, fmt=None):
        """Writes the manifest to path (temporary name, fsync, rename) and
        returns path.

        As every detcheck output, it replaces only a file of its own kind:
        it refuses (ValueError, naming the path and why) a symlink, anything
        but a regular file (a FIFO, a directory), a read-only file, the file
        this manifest was loaded from, and an existing non-empty file that
        is not a detcheck manifest (the checkpoint, a trajectory.jsonl...).
        An existing manifest or an empty file is replaced."""
        path = str(path)
        if fmt is None:
            fmt = "json" if path.endswith(".json") else "yaml"
        if fmt not in ("yaml", "json"):
            raise ValueError("detcheck: manifest format yaml or json, not %r" % fmt)
        src = getattr(self, "_source", None)
        if src and _same_file(path, src):
            raise ValueError("%s is also an input (%s); refusing to overwrite it" % (path, src))
        # the library applies the rule of every output (dck_output_check):
        # its refusals are DCK_ERR_INVALID, a ValueError here
        st = _lib.manifest_save(self._h, 1 if fmt == "json" else 0, os.fsencode(path))
        if st == _lib.ERR_INVALID:
            raise ValueError(_lib.last_error().decode("utf-8", "replace"))
        _lib.check(st)
        return path

    def __repr__(self):
        return "<detcheck.Manifest %d tensors, %d values, root %s>" % (
            len(self.tensors), len(self.values), self.root)


def hash_files(*paths, threads=0, files=True, iteration=None, megatron_merge=True, tp_split=()):
    """The manifest ``detcheck hash PATH...`` writes: the library opens the
    files or directories (any format it reads, found by content; several
    paths are shards of one checkpoint) and digests every tensor
    (dck_hash_paths). Needs neither NumPy nor torch.

    ``threads``: worker threads (0: online CPUs; the digests are the same
    for every count); ``files``: also the whole-file hashes (``--no-files``
    when False); ``iteration``: a Megatron-LM root's iter_N (None: the
    latest); ``megatron_merge``: legacy Megatron-LM rank directories merged
    into the unsplit model (False: ``--megatron-per-rank``); ``tp_split``:
    the ``--tp-split GLOB=DIM`` rules. Returns a :class:`Manifest` whose
    ``notices`` are the notes ``detcheck hash`` prints (a file of a
    directory skipped as not a checkpoint file). Raises DetcheckError with
    the library's message (naming the file and the problem) for input it
    cannot read."""
    if not paths:
        raise ValueError("detcheck.hash_files: no path given")
    if tp_split and not megatron_merge:
        raise ValueError("detcheck.hash_files: tp_split applies to merged rank directories, "
                         "not with megatron_merge=False")
    o = _lib.Options()
    _lib.options_init(ctypes.byref(o))
    o.threads = threads
    o.hash_files = 1 if files else 0
    o.megatron_merge = 1 if megatron_merge else 0
    if iteration is not None:
        o.iteration = iteration
    rules = (ctypes.c_char_p * max(1, len(tp_split)))(*[r.encode() for r in tp_split])
    o.tp_split_rules, o.ntp_split_rules = rules, len(tp_split)
    notices = []
    on_notice = _lib.NOTICE(lambda ctx, msg: notices.append(msg.decode("utf-8", "replace")))
    o.notice = ctypes.cast(on_notice, ctypes.c_void_p)
    names = [os.fsencode(str(p)) for p in paths]
    h = ctypes.c_void_p()
    _lib.check(_lib.hash_paths((ctypes.c_char_p * len(names))(*names), len(names), ctypes.byref(o),
                               ctypes.byref(h)))
    m = Manifest(h.value)
    # source: the paths as given, as detcheck hash records them
    _lib.check(_lib.manifest_set_meta(m._h, b"source", b" ".join(names)))
    m.notices = notices
    return m


def manifest(obj, prefix=""):
    """The manifest of a module, an optimizer, a state dict, or any nested
    dict/list/tuple of tensors, arrays and scalars.

    Names, groups, digests and values are those ``detcheck hash`` gives the
    object once saved with ``torch.save(obj)`` (a module: as torch.save(module)
    or torch.save(module.state_dict()); an optimizer: as
    torch.save(optimizer.state_dict())). Tensors are digested in place (CUDA
    ones on their device); strings are not recorded, as in the file. Other
    objects (deques, namedtuples, dataclasses, objects with __slots__ or
    __getstate__ or __reduce__, dict/list/set subclasses) are walked as
    pickle saves them (see _Walker); one that pickle cannot save raises
    TypeError naming its path and type. Returns a :class:`Manifest`."""
    return manifest_of_parts([(obj, prefix, None)])


def names_of(obj):
    """(tensor names, value names) that :func:`manifest` gives obj, found
    without digesting anything."""
    t, v = [], []
    _Walker(lambda n, x: t.append(n or ("tensor" if is_torch_tensor(x) else "array")),
            lambda n, x: v.append(n or "value")).walk(obj, "")
    return t, v


def manifest_of_parts(parts, copied=None, keep=None):
    """One manifest of several objects, as the files of a directory
    checkpoint: each part ``(obj, prefix, group)`` is walked as
    :func:`manifest` walks it, its names under ``prefix`` ("" for none),
    its tensors in ``group`` (a name of _lib.GROUPS: the group the reader
    gives its file's role, detcheck-formats(7) "File roles"; None: by their
    names). ``copied``: (Manifest, names) whose entries of those names are
    taken as they are; ``keep``: a test of the names the parts' walks give
    (None: all are kept). Returns a finalized :class:`Manifest`."""
    h = ctypes.c_void_p()
    _lib.check(_lib.manifest_create(ctypes.byref(h)))
    m = Manifest(h.value)
    group = None

    def on_tensor(name, t):
        name = name or ("tensor" if is_torch_tensor(t) else "array")
        if keep is not None and not keep(name):
            return
        if is_torch_tensor(t) and _is_dtensor(t):  # a collective: the whole tensor's digest
            dg = digest_dtensor(t)
            dt, shape, d = dg.dtype, dg.shape, _lib.digest_of_hex(str(dg))
        else:
            dt, shape, d = digest_torch_parts(t) if is_torch_tensor(t) else digest_numpy_parts(t)
        rec = _lib.ManifestTensor()
        nm = name.encode("utf-8", "surrogateescape")
        rec.name = nm
        rec.group = _lib.group_of_name(nm) if group is None else _lib.GROUPS.index(group)
        rec.dtype = _lib.DTYPE_CODE[dt]
        rec.ndim = len(shape)
        for i, s in enumerate(shape):
            rec.shape[i] = s
        rec.digest = d
        _lib.check(_lib.manifest_add_tensor(m._h, ctypes.byref(rec)))

    def on_value(name, text):
        name = name or "value"
        if keep is None or keep(name):
            _lib.check(_lib.manifest_add_value(m._h, name.encode(), text.encode()))

    walker = _Walker(on_tensor, on_value)
    for obj, prefix, group in parts:
        walker.walk(obj, prefix)
    if copied is not None:
        src, names = copied
        for i in range(_lib.manifest_tensor_count(src._h)):
            t = _lib.manifest_tensor_at(src._h, i)
            if t.contents.name.decode("utf-8", "surrogateescape") in names:
                _lib.check(_lib.manifest_add_tensor(m._h, t))
        for i in range(_lib.manifest_value_count(src._h)):
            v = _lib.manifest_value_at(src._h, i).contents
            if v.name.decode("utf-8", "surrogateescape") in names:
                _lib.check(_lib.manifest_add_value(m._h, v.name, v.value))
    _lib.check(_lib.manifest_set_meta(m._h, b"tool", b"detcheck-python"))
    _lib.check(_lib.manifest_set_meta(m._h, b"source", b"python object"))
    _lib.check(_lib.manifest_finalize(m._h))
    return m


class Difference:
    """One difference, as ``detcheck verify`` lists it: ``name``, ``kind``
    (digest, dtype, shape, missing, extra, value, file), and the two sides
    (``actual``/``golden``: digest hex, dtype, shape or value text; None when
    absent)."""

    def __init__(self, name, kind, actual, golden):
        self.name, self.kind, self.actual, self.golden = name, kind, actual, golden

    def __repr__(self):
        return "Difference(%r, %r, actual=%r, golden=%r)" % (self.name, self.kind, self.actual, self.golden)

    def __str__(self):
        if self.kind == "missing":
            return "missing  %s (in golden, not in actual)" % self.name
        if self.kind == "extra":
            return "extra    %s (in actual, not in golden)" % self.name
        return "%-8s %s: %s, golden %s" % ("differs" if self.kind == "digest" else self.kind,
                                           self.name, self.actual, self.golden)


class VerifyResult:
    """``ok`` (True when every tensor and value has the golden bits),
    ``differences`` (a list of :class:`Difference`, model order: the CLI's
    list), ``first`` (the first, or None), ``tensors_compared``,
    ``tensors_equal``, ``actual`` (the :class:`Manifest` computed);
    ``layouts_differ`` (how the golden's parallel layout and the checkpoint's
    differ, "" when they do not) and ``layout_state`` (the differences of
    per-rank layout state set aside then: see detcheck-formats(7)). What
    was set aside was not compared: ``ok`` is False while ``layout_state``
    is not empty, unless verify was told ``accept_layout_state``."""

    def __init__(self, ok, differences, compared, equal, actual, layouts_differ="", layout_state=()):
        self.ok, self.differences = ok, differences
        self.tensors_compared, self.tensors_equal, self.actual = compared, equal, actual
        self.layouts_differ, self.layout_state = layouts_differ, list(layout_state)

    @property
    def first(self):
        return self.differences[0] if self.differences else None

    def __bool__(self):
        return self.ok

    def __str__(self):
        if self.ok:
            return "OK: %d tensors identical (root %s)" % (self.tensors_equal, self.actual.root)
        if not self.differences:
            return "NOT COMPARED: %d entries of layout state (layouts differ: %s)" % (
                len(self.layout_state), self.layouts_differ or "writer bookkeeping on one side only")
        lines = ["DIFFERENT: %d difference%s; first: %s" % (
            len(self.differences), "" if len(self.differences) == 1 else "s", self.differences[0].name)]
        lines += ["  " + str(d) for d in self.differences]
        return "\n".join(lines)


def _side(t, kind):
    if not t:
        return None
    t = t.contents
    if kind == "dtype":
        return _lib.DTYPES[t.dtype]
    if kind == "shape":
        return list(t.shape[:t.ndim])
    return _lib.hex_of(t.digest)


def _differences(r):
    diffs = []
    for i in range(r.n):
        e = r.entries[i]
        kind = _lib.CMP_KINDS[e.kind]
        if kind == "value":
            a = e.actual_value.contents.value.decode() if e.actual_value else None
            g = e.golden_value.contents.value.decode() if e.golden_value else None
        else:
            a, g = _side(e.actual, kind), _side(e.golden, kind)
        diffs.append(Difference(e.name.decode("utf-8", "replace"), kind, a, g))
    return diffs


def verify(obj, golden, require_rank_state=False, accept_layout_state=False):
    """Compares obj (anything :func:`manifest` takes, or a :class:`Manifest`)
    with a golden manifest (a path to a YAML/JSON manifest, or a Manifest),
    tensors and values, as ``detcheck verify`` does: per-rank layout state of
    two different parallel layouts (as stored: the per-rank grids) is set
    aside (``layout_state``) unless require_rank_state
    (``--require-rank-state``), and is no OK unless accept_layout_state
    (``--accept-layout-state``). Returns a :class:`VerifyResult`."""
    actual = obj if isinstance(obj, Manifest) else manifest(obj)
    gold = golden if isinstance(golden, Manifest) else Manifest.load(golden)
    r, aside = _lib.CmpResult(), _lib.CmpResult()
    why = ctypes.create_string_buffer(512)
    _lib.check(_lib.manifest_compare(gold._h, actual._h, 0, ctypes.byref(r)))
    try:
        if not require_rank_state:
            _lib.check(_lib.cmp_set_aside_layout_state(gold._h, actual._h, ctypes.byref(r), ctypes.byref(aside),
                                                       why, len(why)))
        res = VerifyResult(r.n == 0 and (aside.n == 0 or accept_layout_state), _differences(r), r.tensors_compared,
                           r.tensors_equal, actual, why.value.decode("utf-8", "replace"), _differences(aside))
    finally:
        _lib.cmp_result_release(ctypes.byref(aside))
        _lib.cmp_result_release(ctypes.byref(r))
    res._golden = gold
    return res

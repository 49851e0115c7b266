"""The "state" entries of a recorded step (kind 3 in tensor_digests.bin):
what a resumed run must restore besides the weights and the optimizer
state, digested so that ``detcheck resume-check`` can name what was not
restored. None of them is part of the step's root digest.

Each is digest v1 of one tensor (what ``detcheck hash`` gives it saved):

- ``data.batch``: the leaves' digests in order, 16 bytes each (high64 then
  low64, little-endian), concatenated and digested as a 1-d U8 tensor.
- ``rng.torch``: ``torch.get_rng_state()`` (1-d U8).
- ``rng.cuda``: ``torch.cuda.get_rng_state_all()`` concatenated (1-d U8),
  only once CUDA is initialised.
- ``rng.numpy``: NumPy's global (legacy) state, only when numpy is imported:
  the 624 key words as little-endian u32, then pos and has_gauss as i32 and
  cached_gaussian as f64 (1-d U8).
- ``rng.python``: ``random.getstate()``: version as u32, the 625 ints as
  u32, a u8 flag (1: gauss_next is set) and gauss_next as f64 (0.0 when
  unset) (1-d U8).

  torch, NumPy and Python seed their global generators from the OS's
  entropy at import, so two runs of a script that never seeds one (and
  never draws from it) hold different states that change nothing. Such a
  state is left out: each ``rng.*`` entry is recorded once the state
  differs from what it was when detcheck was imported (for NumPy imported,
  or CUDA initialised, later: when the Recorder first saw it), that is once
  the script seeded, restored or drew from it; from then on at every
  recorded step. A generator untouched since cannot have shaped the
  training.
- ``lr.N``: param group N's lr, a 0-d F64 tensor.
- ``scaler.scale`` (0-d F64) and ``scaler.growth_tracker`` (0-d I64):
  ``GradScaler.state_dict()``'s "scale" and "_growth_tracker".
- ``ema.NAME``: the EMA weights (a module's parameters and buffers, or a
  dict's tensors).
- ``start.NAME``: parameter or buffer NAME at the step's start.
"""
import ctypes
import struct
import sys
import warnings
from collections.abc import Mapping

from . import _lib
from ._digest import digest_struct, digest_numpy_parts
from ._tensors import is_numpy_array, is_torch_tensor

_warned = set()


def _warn_once(key, msg):
    if key not in _warned:
        _warned.add(key)
        warnings.warn(msg, stacklevel=3)


def digest_raw(dtype, shape, data):
    """Digest v1 of a little-endian buffer of dtype and shape."""
    arr, nd = _lib.shape_array(shape)
    buf = ctypes.create_string_buffer(bytes(data), max(1, len(data)))
    out = _lib.Digest()
    _lib.check(_lib.digest_buffer(_lib.DTYPE_CODE[dtype], arr, nd, buf, len(data), 0, ctypes.byref(out)))
    return out


def digest_u8(data):
    return digest_raw("U8", (len(data),), data)


def digest_f64(v):
    return digest_raw("F64", (), struct.pack("<d", float(v)))


def digest_i64(v):
    return digest_raw("I64", (), struct.pack("<q", int(v)))


def _iter_leaves(x, tensors_only):
    """Pytree leaves in order: mappings by their own order (a dict, a
    transformers BatchEncoding), lists and tuples by index."""
    if x is None:
        return
    if isinstance(x, Mapping):
        for v in x.values():
            yield from _iter_leaves(v, tensors_only)
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from _iter_leaves(v, tensors_only)
    elif is_torch_tensor(x) or is_numpy_array(x):
        yield x
    elif not tensors_only and isinstance(x, (bool, int, float, str, bytes)):
        yield x
    elif not tensors_only:
        np = sys.modules.get("numpy")
        if np is not None and isinstance(x, np.generic):
            yield np.asarray(x)


def _leaf_digest(x):
    if is_torch_tensor(x):
        return digest_struct(x)
    if is_numpy_array(x):
        return digest_numpy_parts(x)[2]
    if isinstance(x, bool):
        return digest_raw("BOOL", (), bytes([x]))
    if isinstance(x, int):
        if -(1 << 63) <= x < (1 << 63):
            return digest_i64(x)
        return digest_u8(str(x).encode())
    if isinstance(x, float):
        return digest_f64(x)
    if isinstance(x, str):
        return digest_u8(x.encode("utf-8", "surrogatepass"))
    return digest_u8(bytes(x))


def leaf_digests(x, tensors_only=False):
    """The digests of x's leaves (tensors, arrays and, unless tensors_only,
    numbers and strings). A leaf detcheck cannot digest (a dtype it does not
    read, a meta tensor) is left out with a warning (once): a training
    step is never broken by its recording."""
    out = []
    for leaf in _iter_leaves(x, tensors_only):
        try:
            out.append(_leaf_digest(leaf))
        except (TypeError, ValueError, RuntimeError, NotImplementedError) as e:
            _warn_once(("leaf", type(leaf).__name__, str(getattr(leaf, "dtype", ""))),
                       "detcheck.Recorder: a batch leaf (%s) is left out of data.batch: %s"
                       % (getattr(leaf, "dtype", type(leaf).__name__), e))
    return out


def combine(digests):
    """data.batch from the leaves' digests: 16 bytes each (high64, low64,
    little-endian), digested as a 1-d U8 tensor."""
    return digest_u8(b"".join(struct.pack("<QQ", d.high64, d.low64) for d in digests))


# name -> (high64, low64) of the state when first seen, or None once it changed
_BASE = {}


def _touched(name, dg):
    """False while the generator's state is the one first seen (see the
    module); True from its first change on."""
    h = (dg.high64, dg.low64)
    base = _BASE.setdefault(name, h)
    if base is None:
        return True
    if base == h:
        return False
    _BASE[name] = None
    return True


def _numpy_digest(np):
    try:
        st = np.random.get_state(legacy=True)
    except TypeError:  # numpy < 1.17 has no legacy=
        st = np.random.get_state()
    if not (isinstance(st, tuple) and len(st) == 5):
        return None
    keys = np.asarray(st[1]).astype("<u4").tobytes()
    return digest_u8(keys + struct.pack("<iid", int(st[2]), int(st[3]), float(st[4])))


def _python_digest():
    import random
    version, ints, gauss = random.getstate()
    data = struct.pack("<I", version) + struct.pack("<%dI" % len(ints), *ints)
    data += struct.pack("<Bd", 0 if gauss is None else 1, 0.0 if gauss is None else float(gauss))
    return digest_u8(data)


def baseline():
    """The states at detcheck's import: what an untouched generator holds."""
    try:
        _touched("rng.python", _python_digest())
        torch = sys.modules.get("torch")
        if torch is not None:
            _touched("rng.torch", digest_struct(torch.get_rng_state()))
        np = sys.modules.get("numpy")
        if np is not None and hasattr(np, "random"):
            d = _numpy_digest(np)
            if d is not None:
                _touched("rng.numpy", d)
    except Exception:  # a baseline not taken only means the state is recorded from the start
        pass


def rng_states():
    """[(name, Digest)] of the global RNG states, now."""
    out = []
    torch = sys.modules.get("torch")
    if torch is not None:
        d = digest_struct(torch.get_rng_state())
        if _touched("rng.torch", d):
            out.append(("rng.torch", d))
        try:
            cuda_on = torch.cuda.is_available() and torch.cuda.is_initialized()
        except Exception:
            cuda_on = False
        if cuda_on:  # never initialise CUDA for this
            states = [s.cpu().reshape(-1) for s in torch.cuda.get_rng_state_all()]
            if states:  # one 1-d U8 tensor: the same digest as the bytes concatenated
                d = digest_struct(torch.cat(states))
                if _touched("rng.cuda", d):
                    out.append(("rng.cuda", d))
    np = sys.modules.get("numpy")
    if np is not None and hasattr(np, "random"):
        d = _numpy_digest(np)
        if d is not None and _touched("rng.numpy", d):
            out.append(("rng.numpy", d))
    d = _python_digest()
    if _touched("rng.python", d):
        out.append(("rng.python", d))
    return out


def lr_states(optimizer):
    out = []
    if optimizer is None:
        return out
    for i, g in enumerate(getattr(optimizer, "param_groups", ()) or ()):
        lr = g.get("lr")
        if lr is None:
            continue
        if hasattr(lr, "item"):  # a tensor lr (capturable optimizers)
            lr = lr.detach().double().item() if hasattr(lr, "detach") else lr.item()
        out.append(("lr.%d" % i, digest_f64(lr)))
    return out


def scaler_states(scaler):
    """scaler.scale and scaler.growth_tracker from GradScaler.state_dict()
    (a disabled scaler has none): the scale before its lazy first use is
    the init scale, as a resumed scaler reports it."""
    if scaler is None:
        return []
    if hasattr(scaler, "is_enabled") and not scaler.is_enabled():
        return []
    sd = scaler.state_dict()
    if not sd:
        return []
    out = []
    if "scale" in sd:
        out.append(("scaler.scale", digest_f64(sd["scale"])))
    if "_growth_tracker" in sd:
        out.append(("scaler.growth_tracker", digest_i64(sd["_growth_tracker"])))
    return out


def check_ema(ema):
    """ema: a module (an AveragedModel too), a mapping of tensors, or an
    object with state_dict(); TypeError otherwise."""
    if ema is None or isinstance(ema, Mapping) or hasattr(ema, "named_parameters") or hasattr(ema, "state_dict"):
        return ema
    raise TypeError("detcheck.Recorder: ema must be a module, a dict of tensors or an object with state_dict(), "
                    "not %s" % type(ema).__name__)


def ema_states(ema):
    if ema is None:
        return []
    if hasattr(ema, "named_parameters"):
        items = list(ema.named_parameters()) + list(ema.named_buffers())
    elif isinstance(ema, Mapping):
        items = list(ema.items())
    else:
        items = list(ema.state_dict().items())
    out = []
    for n, t in items:
        if is_torch_tensor(t) or is_numpy_array(t):
            out.append(("ema.%s" % n, _leaf_digest(t)))
    return out

"""Tensors as detcheck reads them: the dtypes it knows (torch's and NumPy's
names for them), the dense row-major view of a tensor a digest covers, and
the :class:`TensorDigest` every digest function returns."""
import ctypes
import sys

from . import _lib

# torch dtype name -> detcheck dtype (the ones `detcheck hash` reads from
# torch.save'd files; src/formats/pickle_torch.c)
_TORCH_DTYPES = {
    "bool": "BOOL", "uint8": "U8", "int8": "I8", "int16": "I16", "uint16": "U16",
    "float16": "F16", "bfloat16": "BF16", "int32": "I32", "uint32": "U32", "float32": "F32",
    "float64": "F64", "int64": "I64", "uint64": "U64", "float8_e4m3fn": "F8_E4M3",
    "float8_e5m2": "F8_E5M2", "complex64": "C64", "complex128": "C128",
}
# NumPy dtype kind+itemsize -> detcheck dtype (src/formats/pickle_torch.c's table)
_NUMPY_DTYPES = {
    ("b", 1): "BOOL", ("u", 1): "U8", ("i", 1): "I8", ("i", 2): "I16", ("u", 2): "U16",
    ("f", 2): "F16", ("i", 4): "I32", ("u", 4): "U32", ("f", 4): "F32", ("f", 8): "F64",
    ("i", 8): "I64", ("u", 8): "U64", ("c", 8): "C64", ("c", 16): "C128",
}


class TensorDigest(str):
    """A digest: the 32-hex-digit string ``detcheck hash`` prints, with the
    ``dtype`` (safetensors name) and ``shape`` it covers as attributes."""

    def __new__(cls, hexdigest, dtype, shape):
        s = super().__new__(cls, hexdigest)
        s.dtype = dtype
        s.shape = tuple(shape)
        return s


def _torch():
    return sys.modules.get("torch")


def is_torch_tensor(x):
    t = _torch()
    return t is not None and isinstance(x, t.Tensor)


def is_numpy_array(x):
    np = sys.modules.get("numpy")
    return np is not None and isinstance(x, np.ndarray)


def torch_dtype_name(x):
    name = str(x.dtype).replace("torch.", "")
    dt = _TORCH_DTYPES.get(name)
    if dt not in _lib.DTYPE_CODE:
        raise TypeError("detcheck: tensor of dtype %s, which detcheck does not read (it reads %s)"
                        % (name, ", ".join(sorted(k for k, v in _TORCH_DTYPES.items() if v in _lib.DTYPE_CODE))))
    return dt


def numpy_dtype_name(a):
    dt = _NUMPY_DTYPES.get((a.dtype.kind, a.dtype.itemsize))
    if dt not in _lib.DTYPE_CODE:
        raise TypeError("detcheck: NumPy array of dtype %s, which detcheck does not read" % a.dtype)
    return dt


def _is_dtensor(x):
    if "torch.distributed.tensor" not in sys.modules and "torch.distributed._tensor" not in sys.modules:
        return False
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # older torch
        from torch.distributed._tensor import DTensor
    return isinstance(x, DTensor)


# A view (stride 0 broadcasts: x.expand(...), np.broadcast_to) may hold more
# logical bytes than the memory it spans, but not beyond this many logical
# bytes per stored byte plus 1 GiB: the limit detcheck hash puts on a saved
# view (DCK_MAX_VIEW_EXPANSION, src/common/common.h).
MAX_VIEW_EXPANSION = 1024


def _extent_bytes(shape, strides, esize):
    """Bytes of memory a view spans (strides in elements); 0 when empty."""
    if any(s == 0 for s in shape):
        return 0
    return (1 + sum((n - 1) * abs(st) for n, st in zip(shape, strides))) * esize


def check_expansion(shape, strides, esize, what="detcheck.digest"):
    """Refuses a view whose logical bytes exceed its stored bytes by more than
    detcheck hash accepts (MAX_VIEW_EXPANSION), before anything is copied."""
    logical = esize
    for n in shape:
        logical *= n
    stored = _extent_bytes(shape, strides, esize)
    if logical > stored * MAX_VIEW_EXPANSION + (1 << 30):
        raise ValueError("%s: a view of shape %s (%d logical bytes) over %d stored bytes: over the "
                         "%dx expansion limit (stride 0 broadcasts, as x.expand(); detcheck hash "
                         "refuses the same view once saved)"
                         % (what, tuple(shape), logical, stored, MAX_VIEW_EXPANSION))
    return logical


def _plain(x, copy=True):
    """A plain, dense, row-major tensor with x's logical bytes (x itself when
    it already is one: no copy). copy=False leaves a non-contiguous x as it
    is (the caller streams it in blocks)."""
    if x.is_sparse or x.layout != _torch().strided:
        raise TypeError("detcheck: a %s tensor; only dense (strided) tensors have a digest" % x.layout)
    check_expansion(tuple(x.shape), x.stride(), x.element_size())
    if x.requires_grad:
        x = x.detach()
    if x.is_conj() or x.is_neg():
        # the logical values, as torch.save writes them (resolving copies:
        # make the copy row-major and bounded by the check above)
        x = x.contiguous()
        x = x.resolve_conj() if x.is_conj() else x
        x = x.resolve_neg() if x.is_neg() else x
    if copy and not x.is_contiguous():
        x = x.contiguous()  # the logical row-major bytes, as detcheck hash reads a view
    return x


def host_bytes(u8):
    """The bytes of a 1-d uint8 tensor on any device, through torch alone:
    torch does not require NumPy (``.numpy()`` fails where it is absent)."""
    h = u8.detach().cpu().contiguous()
    return bytearray(ctypes.string_at(h.data_ptr(), h.numel())) if h.numel() else bytearray()


def _cuda_stream(x):
    torch = _torch()
    return ctypes.c_void_p(torch.cuda.current_stream(x.device).cuda_stream)

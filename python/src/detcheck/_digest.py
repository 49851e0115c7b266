"""Tensor digests (digest v1, man detcheck-digest(7)) of NumPy arrays and
torch tensors: CPU memory is read in place, CUDA memory through the library's
device API on the current stream, sharded tensors through lane sums that
ranks add with an integer all-reduce."""
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


def _plain(x):
    """A plain, dense, row-major tensor with x's logical bytes (x itself when
    it already is one: no copy)."""
    if x.is_sparse or x.layout != _torch().strided:
        raise TypeError("detcheck: a %s tensor; only dense (strided) tensors have a digest" % x.layout)
    if x.requires_grad:
        x = x.detach()
    if x.is_conj():
        x = x.resolve_conj()  # the logical values, as torch.save writes them
    if x.is_neg():
        x = x.resolve_neg()
    if not x.is_contiguous():
        x = x.contiguous()  # the logical row-major bytes, as detcheck hash reads a view
    return x


def _cuda_stream(x):
    torch = _torch()
    return ctypes.c_void_p(torch.cuda.current_stream(x.device).cuda_stream)


def digest_torch_parts(x):
    """(dtype name, shape, Digest struct) of a torch tensor (CPU or CUDA)."""
    dt = torch_dtype_name(x)
    x = _plain(x)
    shape = tuple(x.shape)
    arr, nd = _lib.shape_array(shape)
    out = _lib.Digest()
    nbytes = x.numel() * x.element_size()
    ptr = ctypes.c_void_p(x.data_ptr() if nbytes else 0)
    if x.device.type == "cuda":
        _lib.check(_lib.gpu_digest(_lib.DTYPE_CODE[dt], arr, nd, ptr, nbytes, _cuda_stream(x),
                                   ctypes.byref(out)))
    elif x.device.type == "cpu":
        _lib.check(_lib.digest_buffer(_lib.DTYPE_CODE[dt], arr, nd, ptr, nbytes, 0, ctypes.byref(out)))
    else:
        raise TypeError("detcheck: tensor on device %s (cpu and cuda are supported)" % x.device)
    return dt, shape, out


def digest_struct(x):
    """The Digest struct of a torch tensor, DTensors included (a collective)."""
    if _is_dtensor(x):
        from ._shard import digest_dtensor
        return _lib.digest_of_hex(str(digest_dtensor(x)))
    return digest_torch_parts(x)[2]


def digest_numpy_parts(a):
    np = sys.modules["numpy"]
    dt = numpy_dtype_name(a)
    if a.dtype.byteorder == ">" and a.dtype.itemsize > 1:
        a = a.astype(a.dtype.newbyteorder("<"))  # digest bytes are little-endian
    a = np.ascontiguousarray(a)
    arr, nd = _lib.shape_array(a.shape)
    out = _lib.Digest()
    ptr = ctypes.c_void_p(a.ctypes.data if a.nbytes else 0)
    _lib.check(_lib.digest_buffer(_lib.DTYPE_CODE[dt], arr, nd, ptr, a.nbytes, 0, ctypes.byref(out)))
    return dt, a.shape, out


def digest(x):
    """Digest v1 of one tensor: the same 32 hex digits ``detcheck hash`` gives
    the tensor once saved (torch.save, safetensors, np.save).

    ``x`` is a NumPy array, a torch tensor on the CPU (read in place, no copy,
    when it is contiguous), a CUDA tensor (hashed on its device, on the current
    stream), a view or non-contiguous tensor (its logical row-major elements,
    as a saved view is read), or a DTensor (a collective: every rank of its
    mesh must call it, and every rank gets the whole tensor's digest).
    Returns a :class:`TensorDigest` (a str with ``dtype`` and ``shape``).
    Raises TypeError for dtypes detcheck does not read (complex, ...)."""
    if _is_dtensor(x):
        from ._shard import digest_dtensor
        return digest_dtensor(x)
    if is_torch_tensor(x):
        dt, shape, d = digest_torch_parts(x)
    elif is_numpy_array(x):
        dt, shape, d = digest_numpy_parts(x)
    else:
        np = sys.modules.get("numpy")
        if np is not None and isinstance(x, np.generic):
            dt, shape, d = digest_numpy_parts(np.asarray(x))
        else:
            raise TypeError("detcheck.digest: a NumPy array or a torch tensor, not %s" % type(x).__name__)
    return TensorDigest(_lib.hex_of(d), dt, shape)

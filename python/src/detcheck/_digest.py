"""Tensor digests (digest v1, man detcheck-digest(7)) of NumPy arrays and
torch tensors: CPU memory is read in place, CUDA memory through the library's
device API on the current stream, sharded tensors through lane sums that
ranks add with an integer all-reduce."""
import ctypes
import sys

from . import _lib
from ._shard import digest_dtensor
from ._tensors import (TensorDigest, _is_dtensor, _plain, _cuda_stream, _torch, check_expansion, host_bytes,
                       is_numpy_array, is_torch_tensor, numpy_dtype_name, torch_dtype_name)

# Non-contiguous tensors and arrays larger than this are copied to row-major
# order one block at a time, never whole (the digest streams over the blocks).
CHUNK_BYTES = 64 << 20


def _blocks(shape, nbytes_of_rows, take):
    """Row-major blocks of a tensor of ``shape``, each at most CHUNK_BYTES
    when possible: yields take(prefix, lo, hi), the contiguous copy of
    x[prefix][lo:hi] (prefix: indices of the leading dimensions)."""
    nd = len(shape)
    d = 0
    while d < nd - 1 and nbytes_of_rows(d) > CHUNK_BYTES:
        d += 1  # rows of dimension d are too large: go one dimension deeper
    per = max(1, CHUNK_BYTES // max(1, nbytes_of_rows(d)))
    idx = [0] * d
    while True:
        for lo in range(0, shape[d], per):
            yield take(tuple(idx), lo, min(shape[d], lo + per))
        k = d - 1
        while k >= 0:
            idx[k] += 1
            if idx[k] < shape[k]:
                break
            idx[k] = 0
            k -= 1
        if k < 0:
            return


class _LaneStream:
    """Lane sums of a tensor's logical bytes fed in row-major blocks of any
    size: whole 128-byte segments are summed in place (on the device for
    CUDA blocks), the bytes of a segment split between blocks are carried."""

    def __init__(self, stream=None):
        self.lo = self.hi = 0
        self.pos = 0  # logical bytes fed so far
        self.carry = bytearray()
        self.stream = stream

    def _add(self, ln):
        self.lo = (self.lo + ln.lo) & ((1 << 64) - 1)
        self.hi = (self.hi + ln.hi) & ((1 << 64) - 1)

    def _host(self, data, seg):
        buf = (ctypes.c_char * len(data)).from_buffer(data)
        self._add(_lib.segments_sum(ctypes.cast(buf, ctypes.c_void_p), len(data), seg))

    def feed(self, ptr, n, tobytes):
        """n bytes at ptr (tobytes(a, b): bytes [a, b) of them on the host)."""
        off = 0
        if self.carry:
            need = min(_lib.SEGMENT - len(self.carry), n)
            self.carry += tobytes(0, need)
            off = need
            if len(self.carry) == _lib.SEGMENT:
                self._host(self.carry, (self.pos - _lib.SEGMENT + need) // _lib.SEGMENT)
                self.carry = bytearray()
        whole = (n - off) // _lib.SEGMENT * _lib.SEGMENT
        if whole:
            seg = (self.pos + off) // _lib.SEGMENT
            p = ctypes.c_void_p(ptr + off)
            if self.stream is not None:
                ln = _lib.Lanes()
                _lib.check(_lib.gpu_segments_sum(p, whole, seg, self.stream, ctypes.byref(ln)))
            else:
                ln = _lib.segments_sum(p, whole, seg)
            self._add(ln)
        if off + whole < n:
            self.carry += tobytes(off + whole, n)
        self.pos += n

    def finish(self, dt, shape):
        if self.carry:  # the last, short segment
            self._host(self.carry, (self.pos - len(self.carry)) // _lib.SEGMENT)
        arr, nd = _lib.shape_array(shape)
        return _lib.digest_finish(_lib.DTYPE_CODE[dt], arr, nd, _lib.Lanes(self.lo, self.hi))


def _streamed_torch(x, dt):
    """Digest of a large non-contiguous tensor, copied to row-major order one
    block at a time (never its whole logical size)."""
    shape = tuple(x.shape)
    es = x.element_size()
    ls = _LaneStream(_cuda_stream(x) if x.device.type == "cuda" else None)

    def rows(d):
        n = es
        for s in shape[d + 1:]:
            n *= s
        return n

    def take(prefix, lo, hi):
        b = x[prefix][lo:hi]
        out = _torch().empty(b.shape, dtype=b.dtype, device=b.device)  # strides 1 (contiguous()
        return out.copy_(b)  # keeps a size-1 dimension's stride, which view(uint8) refuses)

    if shape:
        for b in _blocks(shape, rows, take):
            flat = b.reshape(-1).view(_torch().uint8)
            ls.feed(b.data_ptr(), flat.numel(),
                    lambda a, c, flat=flat: host_bytes(flat[a:c]))
    return ls.finish(dt, shape)


def digest_torch_parts(x):
    """(dtype name, shape, Digest struct) of a torch tensor (CPU or CUDA)."""
    dt = torch_dtype_name(x)
    x = _plain(x, copy=False)
    shape = tuple(x.shape)
    if not x.is_contiguous():
        if x.device.type not in ("cpu", "cuda"):
            raise TypeError("detcheck: tensor on device %s (cpu and cuda are supported)" % x.device)
        if x.numel() * x.element_size() > CHUNK_BYTES:
            return dt, shape, _streamed_torch(x, dt)
        x = x.contiguous()  # the logical row-major bytes, as detcheck hash reads a view
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
        return _lib.digest_of_hex(str(digest_dtensor(x)))
    return digest_torch_parts(x)[2]


def digest_numpy_parts(a):
    np = sys.modules["numpy"]
    dt = numpy_dtype_name(a)
    es = a.dtype.itemsize
    check_expansion(a.shape, [st // es for st in a.strides], es)
    swap = a.dtype.byteorder == ">" and es > 1  # digest bytes are little-endian
    if (swap or not a.flags.c_contiguous) and a.nbytes > CHUNK_BYTES:
        return dt, tuple(a.shape), _streamed_numpy(a, dt, swap)
    if swap:
        a = a.astype(a.dtype.newbyteorder("<"))
    # not np.ascontiguousarray: it makes a 0-d array 1-d, and np.save keeps
    # shape () (digest v1 hashes the shape)
    if not a.flags.c_contiguous:
        a = a.copy(order="C")
    arr, nd = _lib.shape_array(a.shape)
    out = _lib.Digest()
    ptr = ctypes.c_void_p(a.ctypes.data if a.nbytes else 0)
    _lib.check(_lib.digest_buffer(_lib.DTYPE_CODE[dt], arr, nd, ptr, a.nbytes, 0, ctypes.byref(out)))
    return dt, a.shape, out


def _streamed_numpy(a, dt, swap):
    np = sys.modules["numpy"]
    shape = tuple(a.shape)
    es = a.dtype.itemsize
    ls = _LaneStream()

    def rows(d):
        return int(np.prod(shape[d + 1:], dtype=np.int64)) * es

    def take(prefix, lo, hi):
        b = a[prefix][lo:hi]
        return b.astype(b.dtype.newbyteorder("<"), order="C") if swap else b.copy(order="C")

    for b in _blocks(shape, rows, take):
        raw = b.reshape(-1).view(np.uint8)
        ls.feed(b.ctypes.data, raw.size, lambda x, y, raw=raw: bytearray(raw[x:y].tobytes()))
    return ls.finish(dt, shape)


def digest(x):
    """Digest v1 of one tensor: the same 32 hex digits ``detcheck hash`` gives
    the tensor once saved (torch.save, safetensors, np.save).

    ``x`` is a NumPy array, a torch tensor on the CPU (read in place, no copy,
    when it is contiguous), a CUDA tensor (hashed on its device, on the current
    stream), a view or non-contiguous tensor (its logical row-major elements,
    as a saved view is read), or a DTensor (a collective: every rank of its
    mesh must call it, and every rank gets the whole tensor's digest).
    A 0-d array or a NumPy scalar has shape ``()``, as np.save writes it.
    Non-contiguous inputs over CHUNK_BYTES are copied to row-major order one
    block at a time (never their whole logical size); a view with more than
    MAX_VIEW_EXPANSION logical bytes per stored byte plus 1 GiB (stride 0:
    ``torch.zeros(1).expand(2**40)``) raises ValueError, as detcheck hash
    refuses the saved view.
    Returns a :class:`TensorDigest` (a str with ``dtype`` and ``shape``).
    Raises TypeError for dtypes detcheck does not read."""
    if _is_dtensor(x):
        return digest_dtensor(x)
    if is_torch_tensor(x):
        dt, shape, d = digest_torch_parts(x)
    elif is_numpy_array(x):
        dt, shape, d = digest_numpy_parts(x)
    else:
        np = sys.modules.get("numpy")
        if np is not None and isinstance(x, np.generic):
            dt, shape, d = digest_numpy_parts(np.asarray(x))  # shape (): as np.save writes it
        else:
            raise TypeError("detcheck.digest: a NumPy array or a torch tensor, not %s" % type(x).__name__)
    return TensorDigest(_lib.hex_of(d), dt, shape)

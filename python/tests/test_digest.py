"""detcheck.digest equals what `detcheck hash` gives the saved tensor: every
dtype, views, tied and empty tensors, NumPy arrays (both byte orders and
Fortran order), the spec's test vectors. NumPy is optional (torch does not
require it): without it the NumPy parts skip, the torch and CUDA ones run."""
import math

import pytest
import torch

try:
    import numpy as np
except ImportError:
    np = None

import detcheck
from conftest import cli_hash, cli_tensors

needs_numpy = pytest.mark.skipif(np is None, reason="no NumPy here (torch does not require it)")


def skip_without_numpy():
    if np is None:
        pytest.skip("no NumPy here (torch does not require it): the NumPy part is not run")

TORCH_DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.uint16, torch.float16,
                torch.bfloat16, torch.int32, torch.uint32, torch.float32, torch.float64, torch.int64,
                torch.uint64, torch.float8_e4m3fn, torch.float8_e5m2, torch.complex64, torch.complex128]


def known(dt):
    try:
        detcheck.digest(torch.zeros(1, dtype=dt))
        return True
    except TypeError:
        return False


def rand(dt, shape, g):
    raw = torch.randint(0, 256, (math.prod(shape) * torch.empty(0, dtype=dt).element_size(),),
                        dtype=torch.uint8, generator=g)
    if dt == torch.bool:
        return (raw[: math.prod(shape)] & 1).bool().reshape(shape)
    return raw.view(dt).reshape(shape)  # every bit pattern, NaN payloads included


def test_spec_vectors():
    assert detcheck.digest(torch.zeros(0)) == "a98304e484eb6608b750574f39d22c17"
    assert detcheck.digest(torch.tensor(-7)) == "ec1fcc503dc2b69305ba1f340c2b4bc7"
    skip_without_numpy()
    assert detcheck.digest(np.array([1, 2, 3, 4], np.float32)) == "2ef28aceb3e398dd66f6ba2696aa9c68"
    assert detcheck.digest((np.arange(1000) % 251).astype(np.uint8)) == "642d9596ef596a27ca9cfad7d3f6b1b4"
    b = ((np.arange(600) * 7) % 256).astype(np.uint8)
    assert detcheck.digest(torch.from_numpy(b).view(torch.bfloat16).reshape(3, 100)) == \
        "9893219b2312d60802ba1d42976214f1"
    assert detcheck.digest(torch.from_numpy(b).view(torch.bfloat16).reshape(100, 3)) == \
        "ab642bd5470f1334c8f136f95dcb72ba"


def test_every_dtype_views_tied_empty(tmp_path):
    g = torch.Generator().manual_seed(1)
    objs = {}
    for dt in TORCH_DTYPES:
        if not known(dt):
            continue
        n = str(dt).replace("torch.", "")
        base = rand(dt, (7, 45), g)  # 7 rows of 45 elements: rows cross segments unaligned
        objs[n] = base
        objs[n + "_t"] = base.t()                    # transposed view
        objs[n + "_slice"] = base[1:6:2, 3:40:3]     # strided slice at an offset
        objs[n + "_row"] = base[4]                   # a row: storage offset
        objs[n + "_empty"] = base[:0]
        objs[n + "_scalar"] = base[2, 5]
        objs[n + "_expand"] = base[3:4].expand(3, 45)  # stride 0
    objs["tied_a"] = objs["float32"]
    objs["tied_b"] = objs["float32"]                 # the same storage under two names
    objs["empty_2d"] = torch.zeros(0, 5)
    objs["big"] = torch.randn(300, 301, generator=g)  # many threads' worth of segments
    path = tmp_path / "t.pt"
    torch.save(objs, path)
    want = cli_tensors(cli_hash(path))
    assert set(want) == set(objs)
    for name, t in objs.items():
        d = detcheck.digest(t)
        assert (d.dtype, d.shape, str(d)) == want[name][1:], name


def test_requires_grad_and_conj():
    p = torch.nn.Parameter(torch.randn(3, 4))
    assert detcheck.digest(p) == detcheck.digest(p.detach().clone())
    if known(torch.complex64):
        c = torch.randn(5, dtype=torch.complex64)
        assert detcheck.digest(c.conj()) == detcheck.digest(c.conj().resolve_conj().clone())


@needs_numpy
def test_numpy(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {
        "f32": rng.standard_normal((5, 33)).astype(np.float32),
        "be_i32": np.arange(100, dtype=">i4").reshape(10, 10),
        "fortran": np.asfortranarray(rng.standard_normal((6, 7))),
        "view": rng.standard_normal((8, 9))[::2, 1::3],
        "u16": np.arange(77, dtype=np.uint16),
        "bool": rng.standard_normal(50) > 0,
    }
    for name, a in arrays.items():
        np.save(tmp_path / (name + ".npy"), a)
        want = cli_hash(tmp_path / (name + ".npy"))["tensors"][0]
        d = detcheck.digest(a)
        assert (d.dtype, list(d.shape), str(d)) == (want["dtype"], want["shape"], want["digest"]), name


def test_unsupported():
    with pytest.raises(TypeError):
        detcheck.digest([1, 2, 3])
    with pytest.raises(TypeError):
        detcheck.digest(torch.zeros(2).to_sparse())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_equals_cpu():
    g = torch.Generator().manual_seed(3)
    for dt in (torch.float32, torch.bfloat16, torch.uint8):
        x = rand(dt, (129, 77), g)
        assert detcheck.digest(x.cuda()) == detcheck.digest(x)
        assert detcheck.digest(x.cuda().t()) == detcheck.digest(x.t())
        # lane sums on the device (digest_shard: one process holding the whole)
        assert detcheck.digest_shard(x.cuda(), x.shape, (0, 0)) == detcheck.digest(x)
        assert detcheck.manifest({"w": x.cuda()}).root == detcheck.manifest({"w": x}).root


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_streamed_non_contiguous(monkeypatch):
    """Non-contiguous CUDA tensors over the block size are streamed block by
    block on the device (lane sums there, the bytes of a segment split
    between blocks through torch's own bytes, no NumPy): the CPU digest."""
    import detcheck._digest as dg
    g = torch.Generator().manual_seed(5)
    cases = [torch.randn(37, 45, generator=g).t(), torch.randn(5, 1, 33, generator=g).expand(5, 7, 33),
             rand(torch.bfloat16, (129, 77), g)[:, ::3]]
    want = [detcheck.digest(c) for c in cases]
    for chunk in (100, 4096):
        monkeypatch.setattr(dg, "CHUNK_BYTES", chunk)
        for c, w in zip(cases, want):
            assert detcheck.digest(c.cuda()) == w, (chunk, c.shape, c.stride())


@needs_numpy
def test_numpy_0d_and_scalars(tmp_path):
    # shape [] as np.save writes it, not (1,)
    for name, x in {"a0d": np.array(2.5, np.float32), "i0d": np.array(-7, np.int64),
                    "f64": np.float64(1.25), "u8": np.uint8(200), "b": np.bool_(True)}.items():
        np.save(tmp_path / (name + ".npy"), x)
        want = cli_hash(tmp_path / (name + ".npy"))["tensors"][0]
        d = detcheck.digest(x)
        assert (d.dtype, list(d.shape), str(d)) == (want["dtype"], want["shape"], want["digest"]), name
        assert d.shape == ()


def test_stride0_views_are_not_materialised(monkeypatch):
    # a broadcast view of huge logical size is refused with the
    # limit detcheck hash applies, before anything is copied
    with pytest.raises(ValueError, match=r"expansion limit"):
        detcheck.digest(torch.zeros(1).expand(2 ** 40))
    if np is not None:
        with pytest.raises(ValueError, match=r"expansion limit"):
            detcheck.digest(np.broadcast_to(np.zeros(1, np.float32), (2 ** 40,)))
    # below the limit, large non-contiguous tensors are streamed in blocks:
    # the same digest as the row-major copy, whatever the block size
    import detcheck._digest as dg
    g = torch.Generator().manual_seed(4)
    cases = [torch.randn(37, 45, generator=g).t(),                      # rows cross segments
             torch.randn(5, 1, 33, generator=g).expand(5, 7, 33),       # stride 0 in the middle
             torch.randn(3, generator=g).expand(2, 1000, 3)[:, ::3],    # stride 0 and a step
             torch.randn(1, generator=g).expand(999)]                   # one row, many blocks
    want = [detcheck.digest(c.contiguous()) for c in cases]
    if np is not None:
        wnp = [detcheck.digest(np.ascontiguousarray(c.numpy())) for c in cases]
        be = np.arange(300, dtype=">i4").reshape(20, 15)[:, ::2]
        wbe = detcheck.digest(be.astype("<i4"))
    for chunk in (1, 100, 128, 1000, 4096):
        monkeypatch.setattr(dg, "CHUNK_BYTES", chunk)
        for i, (c, w) in enumerate(zip(cases, want)):
            assert detcheck.digest(c) == w, (chunk, c.shape, c.stride())
            if np is not None:
                assert detcheck.digest(c.numpy()) == wnp[i], (chunk, c.shape)
        if np is not None:
            assert detcheck.digest(be) == wbe, chunk
    # the streamed digest never copies more than a block: 1 GiB of logical
    # bytes over 4 stored bytes (within the limit) hashes in bounded memory
    monkeypatch.setattr(dg, "CHUNK_BYTES", 64 << 20)
    import resource
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    big = torch.ones(1).expand(2 ** 26)  # 256 MiB logical
    d = detcheck.digest(big)
    assert d.shape == (2 ** 26,)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200 * 1024  # KiB

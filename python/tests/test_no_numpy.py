"""Without NumPy (torch does not require it: the GPU image's torch has
none): the digests of torch tensors need none, streamed non-contiguous
tensors and shards' edge bytes included, and the digest tests skip their
NumPy parts instead of failing to import. NumPy is blocked in a child
process (sys.modules["numpy"] = None)."""
import os
import subprocess
import sys
import tempfile

import torch

import detcheck

BLOCK = "import sys; sys.modules['numpy'] = None\n"
HERE = os.path.dirname(os.path.abspath(__file__))


def run_blocked(code, *args):
    r = subprocess.run([sys.executable, "-c", BLOCK + code] + list(args), capture_output=True, text=True,
                       cwd=HERE)
    return r.returncode, r.stdout + r.stderr


def test_streamed_digests_need_no_numpy():
    """Non-contiguous tensors over the block size (blocks that split a
    128-byte segment: its bytes carried through torch's own bytes) and a
    shard's edge bytes: the digests the row-major copies have, NumPy
    blocked."""
    g = torch.Generator().manual_seed(6)
    cases = {"t": torch.randn(37, 45, generator=g).t(),
             "expand": torch.randn(5, 1, 33, generator=g).expand(5, 7, 33),
             "step": torch.randn(3, generator=g).expand(2, 1000, 3)[:, ::3],
             "bf16": torch.randn(129, 77, generator=g).bfloat16()[:, 1::3]}
    want = {n: str(detcheck.digest(c.contiguous())) for n, c in cases.items()}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "cases.pt")
        torch.save(cases, path)
        rc, out = run_blocked("""
import torch, detcheck
import detcheck._digest as dg
cases = torch.load(sys.argv[1])
for chunk in (100, 128, 1000):
    dg.CHUNK_BYTES = chunk
    for n, c in cases.items():
        print(n, chunk, detcheck.digest(c))
for n, c in cases.items():  # one process holding the whole: edge bytes of the last segment
    print(n, "shard", detcheck.digest_shard(c.contiguous(), c.shape, (0,) * c.dim()))
""", path)
    assert rc == 0, out
    got = [line.split() for line in out.splitlines() if line.split()[:1] and line.split()[0] in cases]
    assert len(got) == 4 * len(cases), out
    for n, how, d in got:
        assert d == want[n], (n, how, out)


def test_digest_tests_skip_numpy_parts_without_numpy():
    """test_digest.py collects and passes without NumPy: its NumPy parts
    are skips (what gpu-check's "Python package on CUDA tensors" row runs)."""
    rc, out = run_blocked("""
import pytest
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "-rs", "test_digest.py",
                      "-k", "spec_vectors or numpy or requires_grad or cuda"]))
""")
    assert rc == 0, out
    assert "no NumPy here" in out and "skipped" in out, out

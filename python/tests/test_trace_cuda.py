"""A trace of CUDA tensors whose digests fail compares nothing: the
Recorder refuses it (the first CUDA digest is taken when tracing starts, so
its own message surfaces; a step whose CUDA slots are all absent is not
written), and bisect never calls two such traces identical. Simulated on the
CPU: the tracer is told that CPU tensors are CUDA tensors and their digest
fails as a missing CUDA runtime would."""
import re
import subprocess

import pytest
import torch

import detcheck
from detcheck import _lib, _trace
from conftest import cli_path

GPU_ERROR = "cannot load the CUDA runtime (simulated)"


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = torch.nn.Linear(8, 16)
        self.out = torch.nn.Linear(16, 2)

    def forward(self, x):
        return self.out(torch.tanh(self.inp(x)))


def train(out, trace, steps=2):
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    with detcheck.Recorder(out, model=model, optimizer=opt, trace=trace) as rec:
        for step in range(steps):
            loss = model(torch.randn(4, 8, generator=g)).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            rec.step(step, loss=loss)
    return str(out)


def fake_cuda(monkeypatch, fails=lambda t: True):
    """Every tensor the tracer digests counts as a CUDA tensor; the digest
    of those fails() picks raises as the library's GPU digest would."""
    real = _trace.digest_torch_parts

    def digest(t):
        if fails(t):
            raise _lib.DetcheckError("DCK_ERR_GPU", GPU_ERROR)
        return real(t)
    # raising=False: the same test runs against a tracer without _on_cuda
    monkeypatch.setattr(_trace, "_on_cuda", lambda t: True, raising=False)
    monkeypatch.setattr(_trace, "digest_torch_parts", digest)


@pytest.mark.parametrize("trace", ["modules", "ops"])
def test_bisect_never_says_identical_when_cuda_digests_fail(tmp_path, monkeypatch, trace):
    """Both runs' GPU digests fail: either the Recorder refuses (with the
    digest's own message) or bisect does not find the runs identical."""
    fake_cuda(monkeypatch)
    refused = []
    for n in ("a", "b"):
        try:
            train(tmp_path / n, trace)
        except RuntimeError as e:
            refused.append(str(e))
    if refused:
        assert len(refused) == 2 and all(GPU_ERROR in m and "CUDA tensor" in m for m in refused), refused
        return
    r = subprocess.run([cli_path(), "bisect", str(tmp_path / "a"), str(tmp_path / "b")],
                       capture_output=True, text=True)
    assert r.returncode != 0, "bisect found two traces without digests identical:\n" + r.stdout


@pytest.mark.parametrize("trace", ["modules", "ops"])
def test_first_cuda_digest_is_taken_when_tracing_starts(tmp_path, monkeypatch, trace):
    """The model's first CUDA parameter is digested at its first traced
    forward: the failure raises there, naming the tensor and the library's
    message, before any step is written."""
    fake_cuda(monkeypatch)
    with pytest.raises(RuntimeError, match=r"digest of CUDA tensor inp\.weight \(16, 8\) torch\.float32 failed: "
                                           + re.escape(GPU_ERROR)):
        train(tmp_path / "r", trace)
    assert detcheck.read_trace(tmp_path / "r") == {}


@pytest.mark.parametrize("trace", ["modules", "ops"])
def test_step_with_every_cuda_slot_absent_is_refused(tmp_path, monkeypatch, trace):
    """The parameters digest (the check at the start passes) but every CUDA
    tensor of the step fails: the step is refused at record time, nothing is
    written; a step where some CUDA digests work is recorded."""
    fake_cuda(monkeypatch)
    monkeypatch.setattr(_trace.Tracer, "check_cuda", lambda self: None)
    torch.manual_seed(0)
    model = Net()
    out = tmp_path / "r"
    rec = detcheck.Recorder(out, model=model, trace=trace)
    model(torch.randn(4, 8)).sum().backward()
    with pytest.raises(RuntimeError, match=r"trace step 0: none of the \d+ CUDA tensor digests it took succeeded "
                                           r"\(first: .*" + re.escape(GPU_ERROR)):
        rec.step(0, model=model)
    assert detcheck.read_trace(out) == {}
    with open(out / "trajectory.jsonl") as f:
        assert f.read() == ""
    rec.close()
    # some CUDA digests work (the weights'): the step is recorded, the failed ones absent
    monkeypatch.setattr(_trace, "digest_torch_parts", _digest_unless_activation)
    rec = detcheck.Recorder(tmp_path / "partial", model=model, trace=trace)
    model(torch.randn(4, 8)).sum().backward()
    rec.step(0, model=model)
    rec.close()
    ev = detcheck.read_trace(tmp_path / "partial")[0].events
    slots = [s for e in ev for s in e.inputs + e.outputs]
    assert any(s is not None for s in slots) and any(s is None for s in slots)


def _digest_unless_activation(t):
    from detcheck._digest import digest_torch_parts
    if tuple(t.shape) in ((16, 8), (16,), (2, 16), (2,)):  # parameters and gradients
        return digest_torch_parts(t)
    raise _lib.DetcheckError("DCK_ERR_GPU", GPU_ERROR)


def test_cpu_traces_count_no_cuda_digest(tmp_path):
    """CPU tensors are untouched by the CUDA rule: nothing tried, every
    slot of a plain CPU trace present where it was before."""
    seen = []
    real = _trace.Tracer.check_step

    def check(self, step):
        seen.append((self.cuda.tried, self.cuda.digested))
        return real(self, step)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(_trace.Tracer, "check_step", check)
        train(tmp_path / "r", "ops")
    assert seen == [(0, 0), (0, 0)]
    ev = detcheck.read_trace(tmp_path / "r")[1].events
    assert ev and any(s is not None for e in ev for s in e.outputs)


def test_bisect_refuses_traces_whose_outputs_all_lack_digests(tmp_path, monkeypatch):
    """Whatever wrote them (here every digest fails on the CPU, which the
    Recorder's CUDA rule does not see): two traces whose steps have no
    output digest in either run compared nothing; bisect exits 2 saying
    so, and first_difference raises, rather than calling them identical."""
    def fail(t):
        raise _lib.DetcheckError("DCK_ERR_IO", "digest failed (simulated)")
    monkeypatch.setattr(_trace, "digest_torch_parts", fail)
    a, b = train(tmp_path / "a", "modules"), train(tmp_path / "b", "modules")
    r = subprocess.run([cli_path(), "bisect", a, b], capture_output=True, text=True)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "step 0 (and 1 more) traced in both runs, but none of its events' outputs has a digest" in r.stderr
    with pytest.raises(ValueError, match="nothing was compared"):
        detcheck.first_difference(detcheck.read_trace(a), detcheck.read_trace(b))

"""A CI gate for determinism, as a pytest test (copy it into your project).

A short training run with torch.use_deterministic_algorithms(True); the
manifest of its model and optimizer state is compared with a golden one, and
the test fails naming the first tensor whose bits differ.

    DETCHECK_UPDATE_GOLDEN=1 pytest test_determinism.py   # record the golden once, commit it
    pytest test_determinism.py                            # the gate

Without a golden file the gate compares two runs of this process with each
other (run-to-run determinism on this machine). Bits depend on the hardware
and library versions (kernels differ by CPU and GPU): record the golden on
the machine type CI uses.
"""
import os

import pytest
import torch

import detcheck

GOLDEN = os.environ.get("DETCHECK_GOLDEN",
                        os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden", "determinism.yaml"))


def train(steps=5):
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(1234)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.LayerNorm(64),
                                torch.nn.Linear(64, 8))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(99)
    for _ in range(steps):
        x, y = torch.randn(16, 32, generator=g), torch.randint(0, 8, (16,), generator=g)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return {"model": model.state_dict(), "optimizer": opt.state_dict()}


def golden_manifest(tmp_path):
    if os.environ.get("DETCHECK_UPDATE_GOLDEN"):
        os.makedirs(os.path.dirname(GOLDEN), exist_ok=True)
        detcheck.manifest(train()).save(GOLDEN)
    if os.path.exists(GOLDEN):
        return GOLDEN
    return detcheck.manifest(train()).save(str(tmp_path / "golden.yaml"))  # a first run as reference


def test_training_is_bitwise_reproducible(tmp_path):
    result = detcheck.verify(train(), golden_manifest(tmp_path))
    assert result.ok, "not reproducible: first differing tensor %s\n%s" % (result.first.name, result)


def test_the_gate_names_the_tensor(tmp_path):
    state = train()
    w = state["model"]["2.weight"]  # the LayerNorm's weight
    w.view(torch.int32)[3] ^= 1  # one bit
    result = detcheck.verify(state, golden_manifest(tmp_path))
    assert not result.ok
    assert result.first.name == "model.2.weight" and result.first.kind == "digest"
    with pytest.raises(AssertionError, match="first differing tensor model.2.weight"):
        assert result.ok, "not reproducible: first differing tensor %s\n%s" % (result.first.name, result)

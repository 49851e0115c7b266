"""Recorder + detcheck bisect on a real torch training loop: a one-bit
change injected into one gradient at one step is found, at that step, and
the gradient is named; identical runs are identical; bad side files are
reported (exit 2)."""
import json
import os
import struct

import torch

import detcheck
from conftest import run_cli


def train(out, flip_step=None, steps=6, every=1):
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32),
                                torch.nn.Tanh(), torch.nn.Linear(32, 4))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    with detcheck.Recorder(out, every=every) as rec:
        for step in range(1, steps + 1):
            x = torch.randn(8, 16, generator=g)
            y = torch.randn(8, 4, generator=g)
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9)
            if step == flip_step:  # one bit of one gradient element
                with torch.no_grad():
                    model[2].weight.grad.view(-1).view(torch.int32)[7] ^= 1
            opt.step()
            rec.step(step, loss=loss, grad_norm=gn, model=model, optimizer=opt)
    return out


def test_bisect_names_the_flipped_gradient(tmp_path):
    a = train(str(tmp_path / "a"))
    b = train(str(tmp_path / "b"), flip_step=4)
    same = train(str(tmp_path / "same"))
    r = run_cli("bisect", a, same)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "; 6 recorded steps agree tensor by tensor" in r.stdout
    r = run_cli("bisect", a, b)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "first differing step: 4 (" in r.stdout
    assert "first differing tensor: step 4, gradient 2.weight" in r.stdout
    doc = json.loads(run_cli("bisect", "--json", a, b).stdout)
    assert doc["first_step"] == 4
    assert doc["first_tensor"] == {"step": 4, "kind": "gradient", "name": "2.weight", "how": "digest"}
    # the side file holds what the Recorder computed
    steps = detcheck.read_digests(a)
    assert sorted(steps) == list(range(1, 7))
    kinds = [k for k, _, _ in steps[3]]
    assert kinds == sorted(kinds, key=["gradient", "parameter", "optimizer"].index)
    assert ("optimizer", "0.weight.exp_avg") in [(k, n) for k, n, _ in steps[3]]


def test_every_and_trajectory_lines(tmp_path):
    a = train(str(tmp_path / "a"), steps=5, every=2)
    lines = [json.loads(l) for l in open(os.path.join(a, "trajectory.jsonl"))]
    assert [l["step"] for l in lines] == [1, 2, 3, 4, 5]
    assert ["root" in l for l in lines] == [False, True, False, True, False]
    bits = struct.unpack("<I", struct.pack("<f", lines[0]["loss"]))[0]
    assert lines[0]["loss_bits"] == "%08x" % bits
    assert sorted(detcheck.read_digests(a)) == [2, 4]


def test_bad_side_file(tmp_path):
    a = train(str(tmp_path / "a"), steps=2)
    b = train(str(tmp_path / "b"), steps=2)
    with open(os.path.join(b, "tensor_digests.bin"), "r+b") as f:
        f.write(b"NOTMAGIC")
    r = run_cli("bisect", a, b, check=False)
    assert r.returncode == 2
    assert "tensor_digests.bin" in r.stderr and "DCKTDIG" in r.stderr
    # a torn last record (a killed run) is ignored
    c = train(str(tmp_path / "c"), steps=2)
    with open(os.path.join(c, "tensor_digests.bin"), "ab") as f:
        f.write(b"\x02\x03\x00")
    assert run_cli("bisect", a, c).returncode == 0

"""Recorder + detcheck bisect on a real torch training loop: a one-bit
change injected into one gradient at one step is found, at that step, and
the gradient is named; identical runs are identical; bad side files are
reported (exit 2)."""
import json
import os
import struct

import pytest
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
    assert kinds == sorted(kinds, key=["state", "gradient", "parameter", "optimizer"].index)  # state first
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


def small():
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 3)
    m(torch.ones(2, 4)).sum().backward()
    return m


def files(d):
    return [open(os.path.join(d, f), "rb").read() for f in ("trajectory.jsonl", "tensor_digests.bin")]


def test_two_recorders_on_one_directory(tmp_path):
    # the second writer is refused, naming the holder (detcheck(1), OUTPUT FILES)
    import socket
    d = str(tmp_path / "run")
    with detcheck.Recorder(d) as a:
        a.step(1, loss=1.0, model=small())
        with pytest.raises(ValueError) as e:
            detcheck.Recorder(d)
        msg = str(e.value)
        assert "pid %d on host %s" % (os.getpid(), socket.gethostname()) in msg, msg
        assert os.path.join(d, ".lock") in msg
        a.step(2, loss=2.0, model=small())  # the first one's files are untouched
    assert [json.loads(l)["step"] for l in open(os.path.join(d, "trajectory.jsonl"))] == [1, 2]
    assert sorted(detcheck.read_digests(d)) == [1, 2]
    with detcheck.Recorder(d):  # closed: free again
        pass


def test_bad_steps_change_nothing(tmp_path):
    # a refused step is not counted and writes nothing
    import numpy as np
    d = str(tmp_path / "run")
    m = small()
    with detcheck.Recorder(d) as rec:
        rec.step(1, loss=0.5, model=m)
        before = files(d)
        for bad, err in ((1.5, TypeError), (2.0, TypeError), (True, TypeError), ("2", TypeError),
                         (-5, ValueError), (2 ** 63, ValueError), (3, ValueError)):
            with pytest.raises(err, match="step"):
                rec.step(bad, loss=0.5, model=m)
            assert files(d) == before, bad
        m.register_buffer("chalf", torch.zeros(2, dtype=torch.complex32))  # a dtype detcheck does not read
        with pytest.raises(TypeError):
            rec.step(2, loss=0.5, model=m)
        assert files(d) == before
        with pytest.raises(TypeError, match="loss"):
            rec.step(2, loss="high", model=m)
        assert files(d) == before
        del m._buffers["chalf"]
        rec.step(np.int64(2), loss=0.25, model=m)  # the same step, now whole
        rec.step(torch.tensor(3), model=m)
    lines = [json.loads(l)["step"] for l in open(os.path.join(d, "trajectory.jsonl"))]
    assert lines == [1, 2, 3]
    assert sorted(detcheck.read_digests(d)) == [1, 2, 3]


def test_names_are_utf8_and_whole(tmp_path):
    # a name without a UTF-8 form, or too long for a
    # record, is refused (not replaced or cut)
    for name, why in (("w\udcff", "UTF-8"), ("x" * 70000, "at most 65535")):
        m = torch.nn.Module()
        m.register_parameter(name, torch.nn.Parameter(torch.ones(2)))
        d = str(tmp_path / ("r%d" % len(name)))
        with detcheck.Recorder(d) as rec:
            with pytest.raises(ValueError, match=why):
                rec.step(1, model=m)
            assert os.path.getsize(os.path.join(d, "tensor_digests.bin")) == 16
            assert os.path.getsize(os.path.join(d, "trajectory.jsonl")) == 0


def side(tmp_path, body, name="bad"):
    d = tmp_path / name
    d.mkdir()
    (d / "tensor_digests.bin").write_bytes(body)
    return str(d)


HDR = b"DCKTDIG\0" + struct.pack("<II", 1, 0)


def name_rec(i, kind, nm):
    return struct.pack("<BIBH", 1, i, kind, len(nm)) + nm


def step_rec(step, ids):
    return struct.pack("<BqI", 2, step, len(ids)) + b"".join(struct.pack("<IQQ", i, 1, 2) for i in ids)


def test_read_digests_refuses_damage(tmp_path):
    good = HDR + name_rec(0, 0, b"w") + step_rec(1, [0])
    assert detcheck.read_digests(side(tmp_path, good, "good")) == {1: [("gradient", "w", "%016x%016x" % (1, 2))]}
    # a torn last record is ignored, as the CLI does
    assert sorted(detcheck.read_digests(side(tmp_path, good + step_rec(2, [0])[:-3], "torn"))) == [1]
    cases = {
        "magic": (b"NOTMAGIC" + good[8:], r"byte 0: not a detcheck"),
        "short": (b"DCKT", r"byte 0: not a detcheck"),
        "version": (good[:8] + struct.pack("<I", 2) + good[12:], r"byte 8: version 2"),
        "type": (good + b"\x07", r"byte %d: unknown record type 7" % len(good)),
        "id": (HDR + name_rec(1, 0, b"w"), r"byte 16: name record with id 1"),
        "kind": (HDR + name_rec(0, 9, b"w"), r"byte 16: name record with id 0 kind 9"),
        "utf8": (HDR + name_rec(0, 0, b"\xff\xfe"), r"byte 16: name of tensor id 0 is not UTF-8"),
        "order": (good + step_rec(1, [0]), r"byte %d: step 1 after step 1" % len(good)),
        "never": (HDR + name_rec(0, 0, b"w") + step_rec(1, [5]), r"step 1 uses tensor id 5, never named"),
        "flags": (good[:12] + struct.pack("<I", 1) + good[16:], r"byte 12: flags 0x1"),
        "twice": (HDR + name_rec(0, 0, b"w") + name_rec(1, 1, b"w") + step_rec(1, [0, 0]), r"step 1 lists tensor id 0 \(w\) twice"),
        "named_twice": (HDR + name_rec(0, 0, b"w") + name_rec(1, 0, b"w"), r"tensor w \(gradient\) is named twice, as ids 0 and 1"),
        "torn_bad_id": (HDR + name_rec(3, 0, b"long name")[:10], r"byte 16: name record with id 3"),
        "huge": (HDR + name_rec(0, 0, b"w") + struct.pack("<BqI", 2, 1, 0xFFFFFFFF) + b"\0" * 40,
                 r"step 1 lists 4294967295 tensors, but only 1 are named"),
    }
    for case, (body, want) in cases.items():
        d = side(tmp_path, body, case)
        with pytest.raises(ValueError, match=want) as e:
            detcheck.read_digests(d)
        assert "tensor_digests.bin" in str(e.value), case
    # a FIFO is refused at once (opened without blocking)
    d = tmp_path / "fifo"
    d.mkdir()
    os.mkfifo(d / "tensor_digests.bin")
    with pytest.raises(ValueError, match="not a regular file"):
        detcheck.read_digests(str(d))

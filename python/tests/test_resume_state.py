"""The package's side of `detcheck resume-check` (detcheck-resume-check(1), The contract): detcheck.session()
and its environment, stop.json, the SIGKILL after the checkpoint, and the
state entries (kind 3) a recorded step holds: what they digest, when they
are taken, and that the root digest does not cover them."""
import json
import os
import random
import signal
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import detcheck
from detcheck import _state

ENV = ("DETCHECK_RECORD", "DETCHECK_STOP_AT", "DETCHECK_RESUME", "DETCHECK_CHECKPOINT_DIR", "DETCHECK_STOP_KILL",
       "WORLD_SIZE", "RANK")


@pytest.fixture
def env(monkeypatch):
    for k in ENV:
        monkeypatch.delenv(k, raising=False)
    return monkeypatch


# ------------------------------------------------------------- session()
def test_session_defaults(env):
    s = detcheck.session()
    assert (s.record_dir, s.stop_at, s.resume, s.kill) == (None, None, False, False)
    assert s.checkpoint_dir("out") == "out" and s.checkpoint_dir() is None
    assert not s.should_stop(10 ** 9)
    assert s.stopped(3) is None  # nothing recorded: nothing written, no error


def test_session_reads_the_environment(env, tmp_path):
    env.setenv("DETCHECK_RECORD", str(tmp_path / "rec"))
    env.setenv("DETCHECK_STOP_AT", " 5 ")
    env.setenv("DETCHECK_RESUME", "1")
    env.setenv("DETCHECK_CHECKPOINT_DIR", str(tmp_path / "ck"))
    env.setenv("DETCHECK_STOP_KILL", "0")
    s = detcheck.session()
    assert (s.record_dir, s.stop_at, s.resume, s.kill) == (str(tmp_path / "rec"), 5, True, False)
    assert s.checkpoint_dir("out") == str(tmp_path / "ck")
    assert [s.should_stop(k) for k in (4, 5, 6)] == [False, True, True]
    assert s.should_stop(np.int64(5)) and s.should_stop(torch.tensor(5))
    with pytest.raises(TypeError, match="step"):
        s.should_stop(5.0)
    with pytest.raises(TypeError, match="bool"):
        s.should_stop(True)
    env.setenv("WORLD_SIZE", "2")
    env.setenv("RANK", "1")
    assert detcheck.session().record_dir is None  # only rank 0 records (and writes stop.json)


@pytest.mark.parametrize("var,value", [("DETCHECK_STOP_AT", "x"), ("DETCHECK_STOP_AT", "0"),
                                       ("DETCHECK_STOP_AT", "-3"), ("DETCHECK_STOP_AT", "2.5"),
                                       ("DETCHECK_RESUME", "yes"), ("DETCHECK_RESUME", "2"),
                                       ("DETCHECK_STOP_KILL", "true")])
def test_session_bad_values_name_the_variable(env, var, value):
    env.setenv(var, value)
    with pytest.raises(ValueError) as e:
        detcheck.session()
    assert var in str(e.value) and repr(value) in str(e.value)


def test_stopped_writes_stop_json_and_closes_the_recorder(env, tmp_path):
    d = tmp_path / "rec"
    env.setenv("DETCHECK_RECORD", str(d))
    env.setenv("DETCHECK_TRACE", "none")
    env.setenv("DETCHECK_STOP_AT", "2")
    torch.manual_seed(0)
    m = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    rec = detcheck.autorecord(m, opt)
    s = detcheck.session()
    ck = tmp_path / "ck.pt"
    for step in (1, 2):
        m(torch.ones(2, 3)).sum().backward()
        opt.step()
        if s.should_stop(step):
            torch.save(m.state_dict(), str(ck))
            assert s.stopped(step, ck) == str(d / "stop.json")
    assert rec.closed and m._forward_pre_hooks == {}  # the step-start hook is gone with it
    doc = json.loads((d / "stop.json").read_text())
    assert doc == {"detcheck_stop": 1, "step": 2, "checkpoint": str(ck), "pid": os.getpid()}
    assert sorted(detcheck.read_digests(str(d))) == [1, 2]
    assert not [p for p in os.listdir(d) if "stop.json" in p and p != "stop.json"]  # no temporary left
    opt.step()  # the closed recorder's optimizer hook is gone: nothing more is recorded
    assert sorted(detcheck.read_digests(str(d))) == [1, 2]


def test_stop_kill_dies_by_sigkill_after_stop_json(env, tmp_path):
    d = tmp_path / "rec"
    code = textwrap.dedent("""
        import torch, detcheck
        m = torch.nn.Linear(3, 2)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        rec = detcheck.autorecord(m, opt)
        s = detcheck.session()
        for step in range(1, 10):
            m(torch.ones(2, 3)).sum().backward()
            opt.step()
            if s.should_stop(step):
                s.stopped(step, None)
                print("still alive")
    """)
    e = dict(os.environ, DETCHECK_RECORD=str(d), DETCHECK_STOP_AT="3", DETCHECK_STOP_KILL="1",
             DETCHECK_TRACE="none")
    r = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=120)
    assert r.returncode == -signal.SIGKILL, (r.returncode, r.stderr)
    assert "still alive" not in r.stdout
    doc = json.loads((d / "stop.json").read_text())
    assert doc["step"] == 3 and doc["checkpoint"] is None and doc["pid"] > 0
    assert sorted(detcheck.read_digests(str(d))) == [1, 2, 3]  # the last step is on disk


# ------------------------------------------------------------- state entries
def net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 2))


def entries(d, step, kind=None):
    return {n: h for k, n, h in detcheck.read_digests(d)[step] if kind is None or k == kind}


def test_state_entries_at_the_step_start(tmp_path):
    d = str(tmp_path / "r")
    np.random.seed(1)  # seeded: their states are recorded
    random.seed(1)
    m = net()
    opt = torch.optim.AdamW([{"params": m[0].parameters()}, {"params": m[2].parameters(), "lr": 0.5}], lr=0.1)
    before = {}
    with detcheck.Recorder(d, model=m, optimizer=opt, trace="none") as rec:
        for step in (1, 2, 3):
            x = torch.randn(5, 4)  # drawn before the step's start: not in its rng.torch
            before[step] = {"torch": detcheck.digest(torch.get_rng_state()),
                            "weights": {n: detcheck.digest(p) for n, p in m.named_parameters()},
                            "x": x}
            m(x).sum().backward()  # dropout draws after the start
            random.random()
            opt.step()
            opt.zero_grad()
            rec.step(step)
    steps = detcheck.read_digests(d)
    for step in (1, 2, 3):
        kinds = [k for k, _, _ in steps[step]]
        assert kinds == sorted(kinds, key=["state", "gradient", "parameter", "optimizer"].index)
        st = entries(d, step, "state")
        assert st["rng.torch"] == before[step]["torch"]
        assert st["data.batch"] == batch_hex(before[step]["x"])
        assert st["lr.0"] == detcheck.digest(torch.tensor(0.1, dtype=torch.float64))
        assert st["lr.1"] == detcheck.digest(torch.tensor(0.5, dtype=torch.float64))
        assert {"rng.numpy", "rng.python"} <= set(st)
        starts = {n[6:]: h for n, h in st.items() if n.startswith("start.")}
        if step == 1:  # the weights the process started from, as the kind-1 names
            assert starts == before[1]["weights"]
            assert set(starts) == set(entries(d, 1, "parameter"))
        else:
            assert starts == {}
    # rng.python: random.getstate() packed (the module's encoding)
    assert entries(d, 1, "state")["rng.python"] != entries(d, 2, "state")["rng.python"]


def batch_hex(*leaves):
    """data.batch as documented, from detcheck.digest's hex: each leaf's
    high64 and low64 as little-endian u64s, concatenated, digested as U8."""
    raw = b"".join(struct.pack("<QQ", int(h[:16], 16), int(h[16:], 16)) for h in map(detcheck.digest, leaves))
    return detcheck.digest(np.frombuffer(raw, np.uint8))


def _lib_hex(dg):
    from detcheck import _lib
    return _lib.hex_of(dg)


def test_rng_encodings_are_the_documented_ones():
    np.random.seed(3)
    random.seed(4)
    random.gauss(0, 1)  # gauss_next set
    got = dict((n, _lib_hex(dg)) for n, dg in _state.rng_states())
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    want_np = np.frombuffer(keys.astype("<u4").tobytes() + struct.pack("<iid", pos, has_gauss, gauss), np.uint8)
    assert got["rng.numpy"] == detcheck.digest(want_np)
    version, ints, g = random.getstate()
    raw = struct.pack("<I625I", version, *ints) + struct.pack("<Bd", 1, g)
    assert got["rng.python"] == detcheck.digest(np.frombuffer(raw, np.uint8))
    assert got["rng.torch"] == detcheck.digest(torch.get_rng_state())
    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        assert "rng.cuda" not in got


def test_untouched_rule_per_generator():
    _state._BASE.pop("rng.test", None)
    a, b = _state.digest_u8(b"a"), _state.digest_u8(b"b")
    assert [_state._touched("rng.test", d) for d in (a, a, b, a)] == [False, False, True, True]


def record(d, use_batch=None, hooked=True, ema=None, scaler=None):
    m = net()
    m.eval()  # no dropout: two recordings are equal
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x = torch.arange(12.0).reshape(3, 4)
    with detcheck.Recorder(d, model=m if hooked else None, optimizer=opt, trace="none", ema=ema, scaler=scaler) as rec:
        m.train()
        m[1].p = 0.0
        m(x).sum().backward()
        opt.step()
        if use_batch is not None:
            return rec.step(1, model=m, batch=use_batch)
        return rec.step(1, model=m)


def test_root_is_not_changed_by_state_entries(tmp_path):
    a = record(str(tmp_path / "a"))
    b = record(str(tmp_path / "b"), use_batch={"x": torch.ones(2), "n": 3})
    c = record(str(tmp_path / "c"), hooked=False)
    assert a == b == c
    # the root is that of the kind 0-2 entries alone, as before state entries existed
    from detcheck import _lib
    import ctypes
    recs = [(k, n, h) for k, n, h in detcheck.read_digests(str(tmp_path / "a"))[1] if k != "state"]
    names = (ctypes.c_char_p * len(recs))(*[("%s/%s" % (k, n)).encode() for k, n, _ in recs])
    digs = (_lib.Digest * len(recs))(*[_lib.digest_of_hex(h) for _, _, h in recs])
    assert _lib.hex_of(_lib.root_digest(names, digs, len(recs))) == a
    line = json.loads(open(os.path.join(str(tmp_path / "a"), "trajectory.jsonl")).readline())
    assert line["root"] == a


def test_data_batch_from_forward_inputs_and_from_batch(tmp_path):
    x = torch.arange(12.0).reshape(3, 4)
    record(str(tmp_path / "fwd"))
    fwd = entries(str(tmp_path / "fwd"), 1, "state")["data.batch"]
    assert fwd == batch_hex(x)
    record(str(tmp_path / "given"), use_batch=[x])  # the same leaves: the same digest
    assert entries(str(tmp_path / "given"), 1, "state")["data.batch"] == fwd
    batch = {"ids": torch.tensor([1, 2]), "mask": np.ones(2, np.int32), "n": 7, "note": "a"}
    record(str(tmp_path / "dict"), use_batch=batch)
    want = batch_hex(batch["ids"], batch["mask"], np.array(7, np.int64), np.frombuffer(b"a", np.uint8))
    assert entries(str(tmp_path / "dict"), 1, "state")["data.batch"] == want
    record(str(tmp_path / "none"), hooked=False)  # no model forward seen and no batch: no entry
    assert "data.batch" not in entries(str(tmp_path / "none"), 1, "state")


def test_every_forward_of_a_step_and_no_eval_forward(tmp_path):
    d = str(tmp_path / "r")
    m = net()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    a, b, e = torch.ones(2, 4), torch.zeros(1, 4), torch.full((3, 4), 2.0)
    with detcheck.Recorder(d, model=m, optimizer=opt, trace="none") as rec:
        m(a).sum().backward()  # two micro-batches of one step
        m(b).sum().backward()
        m.eval()
        with torch.no_grad():
            m(e)  # an evaluation forward is no part of the batch
        m.train()
        opt.step()
        rec.step(1)
        m(e).sum().backward()
        opt.step()
        rec.step(2)
    assert entries(d, 1, "state")["data.batch"] == batch_hex(a, b)
    assert entries(d, 2, "state")["data.batch"] == batch_hex(e)


def test_start_step_and_record_time_fallback(tmp_path):
    m = net()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    d = str(tmp_path / "r")
    with detcheck.Recorder(d, trace="none") as rec:  # no model given: no hook
        rec.start_step(m, opt)
        mark = detcheck.digest(torch.get_rng_state())
        w0 = detcheck.digest(m[0].weight)
        m(torch.ones(2, 4)).sum().backward()
        opt.step()
        rec.step(1, model=m, optimizer=opt)
        m(torch.ones(2, 4)).sum().backward()
        opt.step()
        at_record = detcheck.digest(torch.get_rng_state())
        rec.step(2, model=m, optimizer=opt)
    assert entries(d, 1, "state")["rng.torch"] == mark
    assert entries(d, 1, "state")["start.0.weight"] == w0
    assert entries(d, 2, "state")["rng.torch"] == at_record
    assert not [n for n in entries(d, 2, "state") if n.startswith("start.")]


def test_start_entries_on_the_first_recorded_step_only(tmp_path):
    d = str(tmp_path / "r")
    m = net()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    with detcheck.Recorder(d, model=m, optimizer=opt, trace="none", every=2) as rec:
        for step in range(5, 10):  # a resumed process: its first step is 5, recorded ones 6 and 8
            m(torch.ones(2, 4)).sum().backward()
            opt.step()
            opt.zero_grad()
            rec.step(step)
    steps = detcheck.read_digests(d)
    assert sorted(steps) == [6, 8]
    assert [n for k, n, _ in steps[6] if n.startswith("start.")]
    assert not [n for k, n, _ in steps[8] if n.startswith("start.")]


def test_scaler_and_ema_entries(tmp_path):
    m = net()
    ema = torch.optim.swa_utils.AveragedModel(m)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    d = str(tmp_path / "r")
    record(d, ema=ema, scaler=scaler)
    st = entries(d, 1, "state")
    assert st["scaler.scale"] == detcheck.digest(torch.tensor(1024.0, dtype=torch.float64))
    assert st["scaler.growth_tracker"] == detcheck.digest(torch.tensor(0, dtype=torch.int64))
    assert st["ema.module.0.weight"] == detcheck.digest(ema.module[0].weight)
    assert "ema.n_averaged" in st
    d2 = str(tmp_path / "dict")
    record(d2, ema={"w": torch.ones(3)})
    assert entries(d2, 1, "state")["ema.w"] == detcheck.digest(torch.ones(3))
    with pytest.raises(TypeError, match="ema"):
        detcheck.Recorder(None, ema=3)
    off = torch.amp.GradScaler("cpu", enabled=False)
    d3 = str(tmp_path / "off")
    record(d3, scaler=off)  # a disabled scaler has no state
    assert not [n for n in entries(d3, 1, "state") if n.startswith("scaler.")]


def test_close_removes_the_hook_and_refused_steps_keep_the_start(tmp_path):
    m = net()
    rec = detcheck.Recorder(str(tmp_path / "r"), model=m, trace="none")
    assert len(m._forward_pre_hooks) == 1
    m(torch.ones(1, 4))
    start = rec._start
    with pytest.raises(ValueError):
        rec.step(-1)
    assert rec._start is start  # a refused step leaves the step's start for its retry
    rec.close()
    assert len(m._forward_pre_hooks) == 0


def test_autorecord_last_step_numbers_a_resumed_run(env, tmp_path):
    d = tmp_path / "rec"
    env.setenv("DETCHECK_RECORD", str(d))
    env.setenv("DETCHECK_TRACE", "none")
    m = net()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    rec = detcheck.autorecord(m, opt, last_step=4)
    x = torch.ones(2, 4)
    for _ in range(2):
        m(x).sum().backward()
        opt.step()
    rec._auto.close()
    steps = detcheck.read_digests(str(d))
    assert sorted(steps) == [5, 6]
    st = {n: h for k, n, h in steps[5] if k == "state"}
    assert st["data.batch"] == batch_hex(x)
    assert [n for n in st if n.startswith("start.")] and not [n for k, n, _ in steps[6] if n.startswith("start.")]


def test_read_digests_reads_state_entries(tmp_path):
    hdr = b"DCKTDIG\0" + struct.pack("<II", 1, 0)
    body = hdr + struct.pack("<BIBH", 1, 0, 3, 9) + b"rng.torch" + struct.pack("<BqI", 2, 1, 1) + \
        struct.pack("<IQQ", 0, 1, 2)
    (tmp_path / "tensor_digests.bin").write_bytes(body)
    assert detcheck.read_digests(str(tmp_path)) == {1: [("state", "rng.torch", "%016x%016x" % (1, 2))]}


def test_untouched_numpy_and_python_rngs_are_left_out(tmp_path):
    # torch, NumPy and Python seed from the OS at import: a script that
    # never seeds nor draws from one must not differ from its rerun by it
    code = textwrap.dedent("""
        import sys, random, numpy as np, torch, detcheck
        torch.manual_seed(0)  # torch too is seeded from the OS at import: seeded, then used by the init
        m = torch.nn.Linear(2, 1)
        with detcheck.Recorder(sys.argv[1], model=m, trace="none") as rec:
            m(torch.ones(1, 2)); rec.step(1)
            np.random.seed(0); m(torch.ones(1, 2)); rec.step(2)
            random.random(); m(torch.ones(1, 2)); rec.step(3)
            m(torch.ones(1, 2)); rec.step(4)
    """)
    names = {}
    for run in ("a", "b"):
        d = str(tmp_path / run)
        subprocess.run([sys.executable, "-c", code, d], check=True, timeout=120)
        names[run] = {st: {n: h for k, n, h in e if n.startswith("rng.")} for st, e in detcheck.read_digests(d).items()}
    a, b = names["a"], names["b"]
    assert set(a[1]) == {"rng.torch"} and a[1] == b[1]
    assert set(a[2]) == {"rng.torch", "rng.numpy"} and a[2] == b[2]  # seeded before step 2's start
    for st in (3, 4):  # drawn from: recorded from then on; never seeded: the runs differ by it
        assert set(a[st]) == {"rng.torch", "rng.numpy", "rng.python"}
        assert a[st]["rng.python"] != b[st]["rng.python"] and a[st]["rng.numpy"] == b[st]["rng.numpy"]

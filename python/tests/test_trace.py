"""Module and op traces (Recorder(trace=...)), trace.bin, dumps, run.json,
Recorder.from_env and autorecord, on a real torch training loop with a
planted order-dependent reduction: once in forward, once in backward. The
reduction is a custom op (one ATen-level op in the trace) whose summation
order a module flag flips between two runs, so its float32 bits differ."""
import json
import os
import struct
import subprocess
import sys

import pytest
import torch

import detcheck
from detcheck import _trace
from conftest import cli_path, run_cli

REVERSED = {"fwd": False, "bwd": False}
OP = "detcheck_test.order_center.default"


@torch.library.custom_op("detcheck_test::order_center", mutates_args=())
def order_center(x: torch.Tensor, which: str) -> torch.Tensor:
    """x minus its row means, the mean summed chunk by chunk in an order
    that REVERSED[which] flips (float32: other bits)."""
    chunks = list(x.split(3, dim=-1))
    if REVERSED[which]:
        chunks.reverse()
    acc = torch.zeros(x.shape[:-1] + (1,), dtype=x.dtype)
    for c in chunks:
        acc = acc + c.sum(-1, keepdim=True)
    return x - acc / x.shape[-1]


class PlantedForward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return order_center(x, "fwd")

    @staticmethod
    def backward(ctx, g):
        return g - g.mean(-1, keepdim=True)


class PlantedBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x - x.mean(-1, keepdim=True)

    @staticmethod
    def backward(ctx, g):
        return order_center(g, "bwd")


class Center(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn.apply(x)


class Net(torch.nn.Module):
    def __init__(self, plant="fwd"):
        super().__init__()
        self.inp = torch.nn.Linear(16, 48)
        self.act = torch.nn.Tanh()
        self.center = Center(PlantedForward if plant == "fwd" else PlantedBackward)
        self.out = torch.nn.Linear(48, 4)

    def forward(self, x):
        return self.out(self.center(self.act(self.inp(x))))


def train(out, plant="fwd", reverse=False, trace="modules", steps=3, fail_at=None, **kw):
    REVERSED["fwd"] = REVERSED["bwd"] = False
    REVERSED[plant] = reverse
    torch.manual_seed(0)
    model = Net(plant)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    try:
        with detcheck.Recorder(out, model=model, optimizer=opt, trace=trace, **kw) as rec:
            for step in range(1, steps + 1):
                x = torch.randn(8, 16, generator=g)
                y = torch.randn(8, 4, generator=g)
                loss = torch.nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                rec.step(step, loss=loss)
    finally:
        REVERSED["fwd"] = REVERSED["bwd"] = False
    return str(out)


def bisect_has_traces():
    r = subprocess.run([cli_path(), "bisect", "--help"], capture_output=True, text=True)
    return "first differing op" in r.stdout + r.stderr or "trace" in r.stdout + r.stderr


@pytest.mark.parametrize("trace", ["modules", "ops"])
@pytest.mark.parametrize("plant", ["fwd", "bwd"])
def test_planted_op_is_named(tmp_path, plant, trace):
    a = train(tmp_path / "a", plant, False, trace)
    b = train(tmp_path / "b", plant, True, trace)
    ta, tb = detcheck.read_trace(a), detcheck.read_trace(b)
    assert sorted(ta) == sorted(tb) == [1, 2, 3]
    d = detcheck.first_difference(ta, tb)
    assert d is not None, "the reversed summation order changed no bit"
    step, ea, eb, inputs_equal = d
    assert step == 1
    assert ea.key() == eb.key()
    assert ea.phase == ("forward" if plant == "fwd" else "backward")
    assert ea.module == "center"
    if trace == "ops":
        assert (ea.kind, ea.op, ea.call) == ("op", OP, 0)
    else:
        assert (ea.kind, ea.op, ea.call) == ("module", None, 0)
    assert inputs_equal and ea.inputs == eb.inputs and ea.outputs != eb.outputs
    # everything before it in execution order agrees
    if plant == "fwd":
        before = [e for e in ta[1].events if e.phase == "forward"][:ea.index]
    else:
        before = [e for e in ta[1].events if e.phase == "forward"] + \
                 [e for e in ta[1].events if e.phase == "backward" and e.index < ea.index]
    other = {e.key(): e for e in tb[1].events}
    assert before and all(other[e.key()].inputs == e.inputs and other[e.key()].outputs == e.outputs
                          for e in before)
    # and the CLI, once its bisect reads traces
    r = run_cli("bisect", a, b)
    assert r.returncode == 1, r.stdout + r.stderr
    if "first differing" not in r.stdout.replace("first differing step", "").replace(
            "first differing tensor", "") and not bisect_has_traces():
        pytest.skip("bisect has no trace support yet")
    if trace == "ops":
        want = "first differing op: step 1, %s, center (%s, call 0), output 0: " % (ea.phase, OP)
    else:
        want = "first differing module: step 1, %s, center (call 0), output 0: " % ea.phase
    assert want + "inputs equal, output differs (culprit)" in r.stdout, r.stdout
    assert "(tensor %05d.output.0)" % ea.index in r.stdout, r.stdout  # the dump's name of that output


@pytest.mark.parametrize("trace", ["modules", "ops"])
def test_reproducible_runs_give_identical_traces(tmp_path, trace):
    a = train(tmp_path / "a", trace=trace)
    b = train(tmp_path / "b", trace=trace)
    with open(os.path.join(a, "trace.bin"), "rb") as f, open(os.path.join(b, "trace.bin"), "rb") as g:
        da, db = f.read(), g.read()
    assert da == db and len(da) > 16
    assert detcheck.first_difference(detcheck.read_trace(a), detcheck.read_trace(b)) is None
    t = detcheck.read_trace(a)
    names = {e.module for e in t[1].events}
    if trace == "modules":
        # every module, forward and backward, the root as "(root)"
        assert {(e.phase, e.module) for e in t[1].events} >= {
            ("forward", m) for m in ("(root)", "inp", "act", "center", "out")} | {
            ("backward", m) for m in ("(root)", "inp", "act", "center", "out")}
        fw = [e.module for e in t[1].events if e.phase == "forward"]
        assert fw == ["inp", "act", "center", "out", "(root)"]  # execution (completion) order
        assert all(e.op is None and e.kind == "module" for e in t[1].events)
    else:
        assert {"inp", "act", "center", "out", "(outside)"} <= names
        ops = {(e.phase, e.module, e.op) for e in t[1].events}
        assert ("forward", "inp", "aten.addmm.default") in ops
        assert ("backward", "out", "aten.mm.default") in ops
        # optimizer.step()'s ops are the optimizer's phase (detcheck-bisect(1), TRACE FILES), last in the step, outside every module
        ph = [e.phase for e in t[1].events]
        assert "optimizer" in ph and ph.index("optimizer") == len(ph) - ph[::-1].index("backward")
        assert all((e.phase == "optimizer") == (e.module == "(optimizer)") for e in t[1].events)
        assert any("lerp" in e.op for e in t[1].events if e.phase == "optimizer")
    r = run_cli("bisect", a, b)
    assert r.returncode == 0, r.stdout + r.stderr


def test_module_event_digests(tmp_path):
    """A module event's digests are detcheck.digest of its inputs and outputs."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3))
    seen = {}
    model[0].register_forward_hook(lambda m, a, o: seen.update(i=detcheck.digest(a[0]), o=detcheck.digest(o)))
    with detcheck.Recorder(tmp_path / "r", model=model) as rec:
        model(torch.randn(2, 4)).sum().backward()
        rec.step(0)
    ev = detcheck.read_trace(tmp_path / "r")[0].events
    e = [e for e in ev if e.module == "0" and e.phase == "forward"][0]
    # the last input: the module's parameters (detcheck-bisect(1), TRACE FILES)
    params = _state_digest(detcheck.digest(model[0].weight), detcheck.digest(model[0].bias))
    assert e.inputs == [seen["i"], params] and e.outputs == [seen["o"]] and e.state_input == 1
    assert [x.inputs[-1] for x in ev if x.module == "(root)"] == [params, params]  # recursive
    b = [e for e in ev if e.module == "0" and e.phase == "backward"][0]
    assert b.outputs == [None]  # the input needed no gradient
    assert b.inputs[-1] == params and b.state_input == len(b.inputs) - 1


def _state_digest(*hexes):
    """A module event's parameters' slot from its tensors' digests: digest
    v1 of their 17-byte slots (present, high64, low64) as U8."""
    from detcheck._state import digest_u8
    d = digest_u8(b"".join(struct.pack("<BQQ", 1, int(h[:16], 16), int(h[16:], 16)) for h in hexes))
    return "%016x%016x" % (d.high64, d.low64)


def test_trace_steps_limit_tracing(tmp_path):
    a = train(tmp_path / "a", steps=4, trace_steps=[2, 4])
    assert sorted(detcheck.read_trace(a)) == [2, 4]
    b = train(tmp_path / "b", steps=4, trace="ops", trace_steps=range(3, 100))
    t = detcheck.read_trace(b)
    assert sorted(t) == [3, 4] and all(t[s].events for s in t)
    # the untraced steps leave no hooks on the model
    torch.manual_seed(0)
    model = Net()
    with detcheck.Recorder(tmp_path / "c", model=model, trace_steps=[5]) as rec:
        model(torch.randn(2, 16)).sum().backward()
        rec.step(1)
        assert not model.inp._forward_hooks and not model.inp._forward_pre_hooks
    assert not model._forward_hooks


def test_bound_sets_truncated(tmp_path):
    a = train(tmp_path / "a", trace="ops", trace_limit_events=7)
    t = detcheck.read_trace(a)
    assert all(s.truncated and len(s.events) == 7 for s in t.values())
    b = train(tmp_path / "b", trace="modules")
    assert not any(s.truncated for s in detcheck.read_trace(b).values())
    with pytest.raises(ValueError, match="trace_limit_events"):
        detcheck.Recorder(tmp_path / "c", model=Net(), trace_limit_events=0)


def test_a_raising_step_writes_nothing(tmp_path, monkeypatch):
    torch.manual_seed(0)
    model = Net()
    out = tmp_path / "r"
    rec = detcheck.Recorder(out, model=model)
    files = ("trace.bin", "tensor_digests.bin", "trajectory.jsonl")

    def sizes():
        return [os.path.getsize(os.path.join(out, f)) for f in files]

    model(torch.randn(2, 16)).sum().backward()
    rec.step(1, model=model)
    before = sizes()
    model(torch.randn(2, 16)).sum().backward()
    with pytest.raises(ValueError, match="consecutive"):
        rec.step(3, model=model)
    with pytest.raises(TypeError):
        rec.step(2, loss="not a number", model=model)

    def boom(*a, **k):
        raise OSError("disk full")
    monkeypatch.setattr(rec, "finish", boom)
    with pytest.raises(OSError):
        rec.step(2, model=model)  # after the trace record was written: cut back
    assert sizes() == before
    assert sorted(detcheck.read_trace(out)) == [1]
    monkeypatch.undo()
    rec.step(2, model=model)  # the step's events were kept
    rec.close()
    t = detcheck.read_trace(out)
    assert sorted(t) == [1, 2] and [e.key() for e in t[1].events] == [e.key() for e in t[2].events]


def test_two_recorders_on_one_dir_refused(tmp_path):
    model = Net()
    with detcheck.Recorder(tmp_path / "r", model=model, trace="ops") as rec:
        with pytest.raises(ValueError, match="another detcheck.Recorder"):
            detcheck.Recorder(tmp_path / "r", model=model, trace="modules")
        n = len(model.inp._forward_hooks)
        model(torch.randn(2, 16)).sum().backward()
        rec.step(1)
    assert n == 1  # the refused Recorder installed no hook
    assert not model.inp._forward_hooks and not model.inp._forward_pre_hooks
    assert len(detcheck.read_trace(tmp_path / "r")[1].events) > 10


def test_dump(tmp_path):
    st = pytest.importorskip("safetensors.torch")
    a = train(tmp_path / "a", trace="ops", dump_step=2)
    assert os.listdir(os.path.join(a)).count("dump_step_2") == 1
    assert not os.path.exists(os.path.join(a, "dump_step_1"))
    path = os.path.join(a, "dump_step_2", "trace.safetensors")
    tensors = st.load_file(path)
    ev = detcheck.read_trace(a)[2].events
    want = {"%05d.output.%d" % (e.index, j): h for e in ev for j, h in enumerate(e.outputs) if h}
    assert set(tensors) <= set(want) and len(tensors) > 10
    for name, t in tensors.items():
        assert detcheck.digest(t) == want[name], name
    # the CLI reads it too
    assert run_cli("hash", "--json", path).returncode == 0
    # bounded: a warning, and no more than the limit
    with pytest.warns(UserWarning, match="dump_limit_bytes"):
        b = train(tmp_path / "b", trace="modules", dump_step=1, dump_limit_bytes=2000)
    t = st.load_file(os.path.join(b, "dump_step_1", "trace.safetensors"))
    assert 0 < sum(x.numel() * x.element_size() for x in t.values()) <= 2000
    with pytest.raises(ValueError, match="dump_step"):
        detcheck.Recorder(tmp_path / "c", model=Net(), trace="none", dump_step=1)


def test_run_json_and_step_time(tmp_path):
    a = train(tmp_path / "a")
    with open(os.path.join(a, "run.json")) as f:
        doc = json.load(f)
    assert doc["detcheck_run"] == 1 and doc["argv"] == sys.argv
    s = doc["settings"]
    assert set(s) == {"deterministic_algorithms", "CUBLAS_WORKSPACE_CONFIG", "cudnn_deterministic",
                      "cudnn_benchmark", "tf32_matmul", "tf32_cudnn", "NCCL_ALGO", "NCCL_PROTO", "threads",
                      "torch", "cuda", "cudnn", "nccl", "gpus"}
    assert s["torch"] == torch.__version__ and s["threads"] == torch.get_num_threads()
    assert s["deterministic_algorithms"] == torch.are_deterministic_algorithms_enabled()
    assert isinstance(s["gpus"], list)
    with open(os.path.join(a, "trajectory.jsonl")) as f:
        lines = [json.loads(x) for x in f]
    assert lines[0]["step_time_s"] is None
    assert all(isinstance(x["step_time_s"], float) and x["step_time_s"] > 0 for x in lines[1:])
    # no model: no trace, and a stale trace.bin goes
    with detcheck.Recorder(a) as rec:
        rec.step(1)
    assert not os.path.exists(os.path.join(a, "trace.bin"))


@pytest.fixture
def torch_settings():
    saved = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic,
             torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32,
             torch.backends.cudnn.allow_tf32, torch.get_num_threads(), os.environ.get("CUBLAS_WORKSPACE_CONFIG"))
    yield
    torch.use_deterministic_algorithms(saved[0])
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved[1], saved[2]
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[3], saved[4]
    torch.set_num_threads(saved[5])
    if saved[6] is None:
        os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
    else:
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = saved[6]


def loop(steps=3, with_loss=True):
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rec = detcheck.autorecord(model, opt)
    for _ in range(steps):
        loss = model(torch.randn(4, 16)).square().mean()
        opt.zero_grad()
        loss.backward()
        if rec is not None and with_loss:
            rec.loss(loss)
        opt.step()
    return rec, model


def test_from_env_and_autorecord(tmp_path, monkeypatch, torch_settings):
    for v in ("DETCHECK_RECORD", "DETCHECK_TRACE", "DETCHECK_THREADS", "DETCHECK_DETERMINISTIC",
              "DETCHECK_DUMP_STEP", "DETCHECK_TRACE_STEPS"):
        monkeypatch.delenv(v, raising=False)
    threads = torch.get_num_threads()
    monkeypatch.setenv("DETCHECK_THREADS", "1")  # ignored without DETCHECK_RECORD
    assert detcheck.Recorder.from_env(model=Net()) is None
    rec, model = loop()
    assert rec is None and not model.inp._forward_hooks and torch.get_num_threads() == threads
    assert not os.listdir(tmp_path)

    out = tmp_path / "run"
    monkeypatch.setenv("DETCHECK_RECORD", str(out))
    monkeypatch.setenv("DETCHECK_DETERMINISTIC", "1")
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    monkeypatch.setenv("DETCHECK_TRACE", "ops")
    monkeypatch.setenv("DETCHECK_TRACE_STEPS", "2-3")
    rec, model = loop()
    assert isinstance(rec, detcheck.Recorder) and rec.trace == "ops"
    rec.close()
    assert not model.inp._forward_hooks
    with open(out / "run.json") as f:
        s = json.load(f)["settings"]
    assert s["threads"] == 1 and s["deterministic_algorithms"] and s["cudnn_deterministic"]
    assert not s["cudnn_benchmark"] and not s["tf32_matmul"] and not s["tf32_cudnn"]
    assert s["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    with open(out / "trajectory.jsonl") as f:
        lines = [json.loads(x) for x in f]
    assert [x["step"] for x in lines] == [1, 2, 3]
    assert all(x["loss"] is not None and x["grad_norm"] is not None and x["lr"] == 0.1 and x["root"]
               for x in lines)
    assert sorted(detcheck.read_trace(out)) == [2, 3]
    assert sorted(detcheck.read_digests(out)) == [1, 2, 3]
    # the optimizer's ops are traced (detcheck-bisect(1), TRACE FILES), not autorecord's gradient norm in its step post hook
    opt_ops = {e.op for e in detcheck.read_trace(out)[2].events if e.phase == "optimizer"}
    assert opt_ops and not any("norm" in o or "stack" in o for o in opt_ops), opt_ops

    # DETCHECK_DETERMINISTIC=0 turns them off; the default trace is modules
    monkeypatch.setenv("DETCHECK_DETERMINISTIC", "0")
    monkeypatch.delenv("DETCHECK_TRACE")
    monkeypatch.delenv("DETCHECK_TRACE_STEPS")
    monkeypatch.setenv("DETCHECK_DUMP_STEP", "2")
    rec, _ = loop(with_loss=False)
    rec.close()
    with open(out / "run.json") as f:
        s = json.load(f)["settings"]
    assert not s["deterministic_algorithms"] and not s["cudnn_deterministic"] and s["cudnn_benchmark"]
    t = detcheck.read_trace(out)
    assert sorted(t) == [1, 2, 3] and t[1].events[0].kind == "module"
    assert os.path.exists(out / "dump_step_2" / "trace.safetensors")
    with open(out / "trajectory.jsonl") as f:
        assert all(json.loads(x)["loss"] is None for x in f)

    monkeypatch.setenv("DETCHECK_TRACE", "layers")
    with pytest.raises(ValueError, match="DETCHECK_TRACE"):
        detcheck.Recorder.from_env(model=Net())


def test_autorecord_closes_at_exit(tmp_path):
    """A plain script: one line, and the recording is complete at exit."""
    script = tmp_path / "train.py"
    script.write_text(
        "import torch, detcheck\n"
        "torch.manual_seed(0)\n"
        "m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))\n"
        "opt = torch.optim.Adam(m.parameters())\n"
        "detcheck.autorecord(m, opt)\n"
        "for _ in range(4):\n"
        "    opt.zero_grad(); m(torch.randn(8, 4)).mean().backward(); opt.step()\n")
    runs = []
    for name in ("a", "b"):
        env = dict(os.environ, DETCHECK_RECORD=str(tmp_path / name))
        r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        runs.append(str(tmp_path / name))
    assert sorted(detcheck.read_trace(runs[0])) == [1, 2, 3, 4]
    assert run_cli("bisect", *runs).returncode == 0


def test_hf_callback_honours_detcheck_record(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    from test_integrations import hf_run
    monkeypatch.setenv("DETCHECK_RECORD", str(tmp_path / "env"))
    hf_run(str(tmp_path / "explicit"), 0, logging_steps=1)
    assert not os.path.exists(tmp_path / "explicit" / "trajectory.jsonl")  # the environment wins
    t = detcheck.read_trace(tmp_path / "env")
    assert sorted(t) == [1, 2, 3] and t[1].events and t[1].events[0].kind == "module"
    with open(tmp_path / "env" / "trajectory.jsonl") as f:
        assert [json.loads(x)["step"] for x in f] == [1, 2, 3]


def test_read_trace_refuses(tmp_path):
    a = train(tmp_path / "a", steps=2)
    path = os.path.join(a, "trace.bin")
    with open(path, "rb") as f:
        good = f.read()

    def refused(data, match):
        with open(path, "wb") as f:
            f.write(data)
        with pytest.raises(ValueError, match=match) as e:
            detcheck.read_trace(a)
        assert path in str(e.value)

    refused(b"XXXXXXXX" + good[8:], "byte 0: not a detcheck trace")
    assert good[8:12] == struct.pack("<I", 2)  # the recorder writes version 2 (detcheck-bisect(1), TRACE FILES)
    refused(good[:8] + struct.pack("<I", 3) + good[12:], r"byte 8: version 3 \(this detcheck reads 1 to 2\)")
    refused(good[:12] + struct.pack("<I", 1) + good[16:], "byte 12: flags")
    refused(good + b"\x07", "byte %d: unknown record type 7" % len(good))
    refused(good[:16] + b"\x01" + struct.pack("<IH", 5, 1) + b"x", "byte 16: name record with id 5")
    # a step not after the last one
    with open(path, "wb") as f:
        f.write(good)
    steps = detcheck.read_trace(a)
    last = good.rindex(struct.pack("<BqI", 2, 2, len(steps[2].events)))
    refused(good + good[last:], "step 2 after step 2")
    # a torn last record is ignored
    with open(path, "wb") as f:
        f.write(good[:-5])
    assert sorted(detcheck.read_trace(a)) == [1]
    os.unlink(path)
    os.mkfifo(path)
    with pytest.raises(ValueError, match="not a regular file"):
        detcheck.read_trace(a)


# ------------------------------------------------- the Python reader against the CLI's
# trace.bin files built byte by byte: read_trace must refuse exactly what
# `detcheck bisect` refuses, with its message, and first_difference must
# name the event bisect --json names.

def _name(i, nb):
    return struct.pack("<BIH", 1, i, len(nb)) + nb


def _slot(v):
    """v: None (absent), an int (a digest), or (present, high64, low64) raw."""
    if v is None:
        return struct.pack("<BQQ", 0, 0, 0)
    if isinstance(v, tuple):
        return struct.pack("<BQQ", *v)
    return struct.pack("<BQQ", 1, v >> 64, v & ((1 << 64) - 1))


def _event(phase, kind, mid, oid, call, ins, outs, nin=None, nout=None):
    return (struct.pack("<BBIIIBB", phase, kind, mid, oid, call, len(ins) if nin is None else nin,
                        len(outs) if nout is None else nout) + b"".join(_slot(v) for v in ins + outs))


def _stephead(step, count, trunc=0):
    return struct.pack("<BqIB", 2, step, count, trunc)


HEADER = b"DCKTRAC\0" + struct.pack("<II", 1, 0)
HEADER2 = b"DCKTRAC\0" + struct.pack("<II", 2, 0)
NO = _trace.NO_OP


def _mk(steps, names=None, version=1):
    """A valid trace: names in order met (or given: {name: id} order), steps
    [(step, [(phase, module, op, call, ins, outs)], truncated)]."""
    out, ids = bytearray(HEADER if version == 1 else HEADER2), {}
    for nm in names or ():
        ids[nm] = len(ids)
        out += _name(ids[nm], nm.encode())

    def nid(nm):
        if nm is None:
            return NO
        if nm not in ids:
            ids[nm] = len(ids)
            out.extend(_name(ids[nm], nm.encode()))
        return ids[nm]

    for step, evs, trunc in steps:
        body = b""
        for ph, mod, op, call, ins, outs in evs:
            m, o = nid(mod), nid(op)
            body += _event(ph, 0 if op is None else 1, m, o, call, ins, outs)
        out += _stephead(step, len(evs), trunc) + body
    return bytes(out)


def _evs(s, **kw):
    """A step's events: an MLP's forward and backward ops and modules;
    kw: out=(i, v) event i's output 0 is v; inp=(i, k, v) its input k."""
    ev = [[0, "fc1", "aten.mm.default", 0, [s * 100 + 1, s * 100 + 2], [s * 100 + 3]],
          [0, "fc1", "aten.add.Tensor", 0, [s * 100 + 3, s * 100 + 4], [s * 100 + 5]],
          [0, "fc1", None, 0, [s * 100 + 1], [s * 100 + 5]],
          [0, "act", "aten.relu.default", 0, [s * 100 + 5], [s * 100 + 6]],
          [0, "fc2", "aten.mm.default", 0, [s * 100 + 6, s * 100 + 7, None], [s * 100 + 8]],
          [1, "fc2", "aten.mm.default", 0, [s * 100 + 9, s * 100 + 7], [s * 100 + 10, None]],
          [1, "fc2", None, 0, [s * 100 + 9], [s * 100 + 10]],
          [1, "act", "aten.threshold_backward.default", 0, [s * 100 + 10, s * 100 + 6], []],
          [1, "(outside)", "aten.sum.default", 0, [s * 100 + 11], [s * 100 + 12]]]
    ev = [[e[0], e[1], e[2], e[3], list(e[4]), list(e[5])] for e in ev]
    if "out" in kw:
        i, v = kw["out"][:2]
        ev[i][5][kw["out"][2] if len(kw["out"]) > 2 else 0] = v
    if "inp" in kw:
        i, k, v = kw["inp"]
        ev[i][4][k] = v
    for f in kw.get("edit", ()):
        f(ev)
    return [tuple(e) for e in ev]


def _valid():
    return _mk([(s, _evs(s), 0) for s in range(3)])


def _evs2(s, **kw):
    """_evs in version 2: each module event's last input its parameters'
    digest (kw: par=(i, v) event i's is v), and the optimizer's ops."""
    ev = [list(e) for e in _evs(s, **kw)]
    for i, e in enumerate(ev):
        if e[2] is None:
            e[4] = e[4] + [s * 100 + 50 + i]
    if "par" in kw:
        i, v = kw["par"]
        ev[i][4][-1] = v
    upd = kw.get("upd")
    ev += [[2, "(optimizer)", "aten._foreach_add_.List", 0, [s * 100 + 7, s * 100 + 10], [s * 100 + 60 + (upd or 0)]],
           [2, "(optimizer)", "aten.lerp_.Scalar", 0, [s * 100 + 61, s * 100 + 10], [s * 100 + 62]]]
    return [tuple(e) for e in ev]


def _valid2():
    return _mk([(s, _evs2(s), 0) for s in range(3)], version=2)


def _refusal_cases():
    good = _valid()
    g1 = HEADER + _name(0, b"m") + _name(1, b"aten.mm.default")
    ev_ok = _event(0, 1, 0, 1, 0, [1], [2])
    c = [
        ("no header", b"DCKTRAC\0" + b"\1\0\0"),
        ("empty", b""),
        ("magic", b"XXXXXXXX" + good[8:]),
        ("version", good[:8] + struct.pack("<I", 3) + good[12:]),
        ("version 0", good[:8] + struct.pack("<I", 0) + good[12:]),
        # version 2 (detcheck-bisect(1), TRACE FILES): the optimizer's phase, for ops only; a module event's last input its parameters
        ("v2 phase 3", HEADER2 + g1[16:] + _stephead(0, 1) + _event(3, 1, 0, 1, 0, [1], [2])),
        ("v2 phase 3 kind 9", HEADER2 + g1[16:] + _stephead(0, 1) + _event(3, 9, 0, 1, 0, [1], [2])),
        ("v2 module event in phase 2", HEADER2 + g1[16:] + _stephead(0, 1) + _event(2, 0, 0, NO, 0, [1], [2])),
        ("v2 module event in phase 2 without input", HEADER2 + g1[16:] + _stephead(0, 1)
         + _event(2, 0, 0, NO, 0, [], [2])),
        ("v2 module event without input", HEADER2 + g1[16:] + _stephead(0, 1) + _event(0, 0, 0, NO, 0, [], [2])),
        ("v2 module event without input, torn after", HEADER2 + g1[16:] + _stephead(0, 2)
         + _event(1, 0, 0, NO, 0, [], [])),
        ("v2 module event in phase 2 after good steps", _valid2() + _stephead(7, 1) + _event(2, 0, 0, NO, 0, [1], [])),
        ("v1 phase 2 after good steps", good + _stephead(7, 1) + _event(2, 1, 0, 1, 0, [1], [2])),
        ("flags", good[:12] + struct.pack("<I", 0x30) + good[16:]),
        ("record type", good + b"\x07"),
        ("record type 0", HEADER + b"\0"),
        ("name id", HEADER + _name(5, b"x")),
        ("name id later", HEADER + _name(0, b"x") + _name(0, b"y")),
        ("name empty", HEADER + _name(0, b"a") + _name(1, b"")),
        ("name empty, torn after", HEADER + struct.pack("<BIH", 1, 0, 0)),
        ("name id before tear", HEADER + struct.pack("<BIH", 1, 3, 20) + b"abc"),
        ("name 0xff", HEADER + _name(0, b"ab\xff")),
        ("name NUL", HEADER + _name(0, b"a\0b")),
        ("name NUL after bad utf8", HEADER + _name(0, b"\xc3(\0")),
        ("name overlong", HEADER + _name(0, b"x\xc0\x80")),
        ("name overlong 3", HEADER + _name(0, b"\xe0\x80\x80")),
        ("name surrogate", HEADER + _name(0, b"\xed\xa0\x80")),
        ("name past U+10FFFF", HEADER + _name(0, b"\xf4\x90\x80\x80")),
        ("name cut sequence", HEADER + _name(0, b"ok\xe2\x82")),
        ("name bad continuation", HEADER + _name(0, b"\xe2\x28\xa1")),
        ("name duplicate", HEADER + _name(0, b"m") + _name(1, b"aten.mm.default") + _name(2, b"m")
         + _stephead(0, 1) + ev_ok),
        ("names duplicate twice", HEADER + _name(0, b"z") + _name(1, b"b") + _name(2, b"z") + _name(3, b"b")
         + _name(4, b"b")),
        ("name duplicate, torn after", HEADER + _name(0, b"m") + _name(1, b"m") + _stephead(0, 3) + ev_ok),
        ("name duplicate, step error after", HEADER + _name(0, b"m") + _name(1, b"m")
         + _stephead(0, 1, 5)),
        ("name duplicate unicode", HEADER + _name(0, "é".encode()) + _name(1, "é".encode())),
        ("step order", _mk([(2, _evs(2), 0), (1, _evs(1), 0)])),
        ("step equal", _mk([(2, _evs(2), 0), (2, _evs(2), 0)])),
        ("step negative after", _mk([(-1, _evs(1), 0), (-5, _evs(1), 0)])),
        ("count cap", g1 + _stephead(0, (1 << 24) + 1)),
        ("count cap after events", g1 + _stephead(0, 0xFFFFFFFF) + ev_ok * 3),
        ("truncated byte", g1 + _stephead(7, 1, 2) + ev_ok),
        ("truncated byte, torn", g1 + _stephead(7, 4, 255)),
        ("phase", g1 + _stephead(0, 1) + _event(2, 1, 0, 1, 0, [1], [2])),
        ("kind", g1 + _stephead(0, 1) + _event(0, 9, 0, 1, 0, [1], [2])),
        ("phase and kind", g1 + _stephead(0, 1) + _event(3, 9, 0, 1, 0, [1], [2])),
        ("module never named", g1 + _stephead(0, 1) + _event(0, 1, 2, 1, 0, [1], [2])),
        ("module named later", g1 + _stephead(0, 1) + _event(0, 0, 2, NO, 0, [1], [2]) + _name(2, b"late")),
        ("module event with op", g1 + _stephead(0, 1) + _event(0, 0, 0, 1, 0, [1], [2])),
        ("module event with op 0", g1 + _stephead(0, 1) + _event(1, 0, 0, 0, 0, [], [])),
        ("op event without op", g1 + _stephead(0, 1) + _event(0, 1, 0, NO, 0, [1], [2])),
        ("op never named", g1 + _stephead(0, 1) + _event(0, 1, 0, 7, 0, [1], [2])),
        ("op id past module id check", g1 + _stephead(0, 1) + _event(0, 1, 9, 9, 0, [1], [2])),
        ("present 2", g1 + _stephead(0, 1) + _event(0, 1, 0, 1, 0, [1, (2, 0, 5)], [2])),
        ("present 255 no digest", g1 + _stephead(0, 1) + _event(0, 1, 0, 1, 0, [(255, 0, 0)], [2])),
        ("absent with digest", g1 + _stephead(0, 1) + _event(0, 1, 0, 1, 0, [1], [3, (0, 0, 1)])),
        ("absent with high digest", g1 + _stephead(0, 1) + _event(0, 1, 0, 1, 0, [(0, 1, 0)], [])),
        ("bad slot, torn after", g1 + _stephead(0, 1) + _event(0, 1, 0, 1, 0, [(2, 0, 0)], [1, 2])[:-20]),
        ("bad event, torn after", g1 + _stephead(0, 3) + ev_ok + _event(0, 1, 0, 9, 0, [], [])),
        ("bad second step after good", good + _stephead(5, 1) + _event(0, 1, 0, 1, 0, [(0, 0, 9)], [])),
        ("count read over the next record", good[:good.index(_stephead(1, 9))] + _stephead(1, 10)
         + good[good.index(_stephead(1, 9)) + 14:]),
    ]
    return c


def _valid_cases():
    good = _valid()
    g1 = HEADER + _name(0, b"m") + _name(1, b"aten.mm.default")
    ev_ok = _event(0, 1, 0, 1, 0, [1], [2])
    return [
        ("valid", good),
        ("header only", HEADER),
        ("torn type only", good + b"\x02"),
        ("torn name header", HEADER + b"\x01\0\0"),
        ("torn name", HEADER + struct.pack("<BIH", 1, 0, 20) + b"abc\xff"),  # the cut name is never checked
        ("torn step header", good + _stephead(9, 1)[:10]),
        ("torn event", g1 + _stephead(0, 2) + ev_ok + ev_ok[:9]),
        ("torn slot", g1 + _stephead(0, 1) + ev_ok[:-3]),
        ("count over the end", g1 + _stephead(0, 1 << 24) + ev_ok),
        ("cut", good[:-1]),
        ("truncated step", g1 + _stephead(0, 1, 1) + ev_ok),
        ("zero events", g1 + _stephead(-3, 0) + _stephead(4, 0, 1)),
        ("unicode names", _mk([(0, [(0, "blöck.0", "aten.𝔪m", 0, [1], [2])], 0)])),
        ("unnamed ids unused", HEADER + _name(0, b"only")),
        ("duplicate torn away", HEADER + _name(0, b"m") + _name(1, b"m")[:-1]),
        ("v2 valid", _valid2()),
        ("v2 without module events", HEADER2 + g1[16:] + _stephead(0, 2) + ev_ok + _event(2, 1, 0, 1, 0, [], [])),
        ("v2 module event, absent parameters", HEADER2 + g1[16:] + _stephead(0, 1) + _event(1, 0, 0, NO, 0, [None], [])),
        ("v2 torn module event", HEADER2 + g1[16:] + _stephead(0, 1) + _event(0, 0, 0, NO, 0, [1], [])[:-3]),
    ]


def _runs(tmp_path, *traces):
    """Run directories holding equal trajectories and these trace.bin files."""
    dirs = []
    for k, data in enumerate(traces):
        d = tmp_path / ("run%d" % k)
        d.mkdir(exist_ok=True)
        with open(d / "trajectory.jsonl", "w") as f:
            for s in range(3):
                f.write('{"step":%d,"loss":1,"loss_bits":"3f800000","grad_norm":1,'
                        '"grad_norm_bits":"3f800000","lr":0.1}\n' % s)
        with open(d / "trace.bin", "wb") as f:
            f.write(data)
        dirs.append(str(d))
    return dirs


def _cli_error(r):
    pre = "detcheck bisect: error: "
    lines = [x[len(pre):] for x in r.stderr.splitlines() if x.startswith(pre)]
    return lines[0] if lines else None


def _need_trace_bisect():
    if not bisect_has_traces():
        pytest.skip("bisect has no trace support")


@pytest.mark.parametrize("case", [c[0] for c in _refusal_cases()] + [c[0] for c in _valid_cases()])
def test_read_trace_refuses_what_bisect_refuses(tmp_path, case):
    _need_trace_bisect()
    data = dict(_refusal_cases() + _valid_cases())[case]
    a, b = _runs(tmp_path, data, _valid())
    try:
        detcheck.read_trace(a)
        py = None
    except ValueError as e:
        py = str(e)
    r = run_cli("bisect", a, b, check=False)
    c = _cli_error(r)
    assert py == c, "python: %r\ncli (exit %d): %r\n%s" % (py, r.returncode, c, r.stderr)
    if case in dict(_refusal_cases()):
        assert py is not None and py.startswith(os.path.join(a, "trace.bin") + ": byte ")
        assert r.returncode == 2
    else:
        assert r.returncode in (0, 1), r.stderr


def _event_json(e):
    if e is None:
        return None
    return {"phase": e.phase, "kind": e.kind, "module": e.module, "op": e.op, "call": e.call}


def _py_first_event(d):
    if d is None:
        return None
    a = _event_json(d.a) or dict.fromkeys(("phase", "kind", "module", "op", "call"))
    out = d.how == "output"
    return dict(a, step=d.step, event=d.event, output=d.output, input=d.input,
                culprit=d.culprit, how=d.how, run_b=None if out else _event_json(d.b))


def _edit(i, f):
    def g(ev):
        ev[i] = f(list(ev[i]))
    return g


def _set(i, field, v):
    k = ("phase", "module", "op", "call", "ins", "outs").index(field)

    def f(e):
        e[k] = v
        return e
    return _edit(i, f)


def _pair_cases():
    S = lambda s, trunc=0, **kw: (s, _evs(s, **kw), trunc)
    base = [S(0), S(1), S(2)]
    cut = lambda s, n, trunc: (s, _evs(s)[:n], trunc)
    return [
        ("identical", base, base),
        ("names numbered otherwise", base, [(s, e, t) for s, e, t in base],
         ["act", "aten.sum.default", "(outside)", "fc2", "fc1"]),
        ("culprit", base, [S(0), S(1, out=(3, 999)), S(2, out=(1, 5))]),
        ("culprit second output", base, [S(0), S(1, out=(5, 77, 1)), S(2)]),
        ("inherited input 1", base, [S(0), S(1, inp=(4, 1, 4242), out=(4, 1)), S(2)]),
        ("input differs, output equal, later culprit", base,
         [S(0), S(1, inp=(1, 0, 4242), out=(3, 8)), S(2)]),
        ("presence differs", base, [S(0, out=(5, None, 0)), S(1), S(2)]),
        ("present zero digest vs absent", base, [S(0, out=(5, (1, 0, 0), 1)), S(1), S(2)]),
        ("input absent vs zero digest inherited", base,
         [S(0), S(1, inp=(4, 2, (1, 0, 0)), out=(4, 1)), S(2)]),
        ("op differs", base, [S(0), S(1, edit=[_set(3, "op", "aten.gelu.default")]), S(2)]),
        ("module differs", base, [S(0, edit=[_set(2, "module", "fc9")]), S(1), S(2)]),
        ("call differs", base, [S(0), S(1), S(2, edit=[_set(6, "call", 1)])]),
        ("phase differs", base, [S(0), S(1, edit=[_set(4, "phase", 1)]), S(2)]),
        ("kind differs", base, [S(0), S(1, edit=[_set(2, "op", "aten.mm.default")]), S(2)]),
        ("input count differs", base, [S(0), S(1, edit=[_set(1, "ins", [103])]), S(2)]),
        ("output count differs", base, [S(0), S(1, edit=[_set(7, "outs", [None])]), S(2)]),
        ("count and output differ", base, [S(0, edit=[_set(1, "ins", [3, 4, 5]), _set(0, "outs", [1])]),
                                           S(1), S(2)]),
        ("a ends", [S(0), cut(1, 6, 0), S(2)], base),
        ("b ends", base, [S(0), S(1), cut(2, 4, 0)]),
        ("a truncated shorter", [S(0), cut(1, 6, 1), S(2)], [S(0), S(1), S(2, out=(8, 1))]),
        ("b truncated shorter", [S(0), S(1), S(2, out=(8, 1))], [S(0), cut(1, 3, 1), S(2)]),
        ("a ends, b truncated longer", [S(0), cut(1, 5, 0), S(2)], [S(0), cut(1, 7, 1), S(2)]),
        ("b ends, a truncated longer", [S(0), cut(1, 7, 1), S(2)], [S(0), cut(1, 5, 0), S(2)]),
        ("both truncated", [cut(0, 4, 1), S(1), S(2)], [cut(0, 7, 1), S(1), S(2)]),
        ("truncated, differing before the cut", [cut(0, 4, 1), S(1)], [S(0, out=(2, 1)), S(1)]),
        ("truncated, differing after the cut", [cut(0, 4, 1), S(1)], [S(0, out=(6, 1)), S(1)]),
        ("steps in one run only", [S(0), S(1, out=(0, 1)), S(3)], [S(0), S(2, out=(0, 1)), S(3, out=(6, 3))]),
        ("no common step", [S(0)], [S(1, out=(0, 1))]),
        ("empty steps", [(0, [], 0), S(1)], [(0, [], 0), S(1, out=(8, 2))]),
        ("empty vs events", [(0, [], 0), S(1)], base),
        ("empty truncated vs events", [(0, [], 1), S(1)], base),
        ("difference in last step only", base, [S(0), S(1), S(2, out=(8, 1))]),
    ] + [(name, [(s, e, t, 2) for s, e, t in a], [(s, e, t, 2) for s, e, t in b]) for name, a, b in _pair_cases2()]


def _pair_cases2():
    """Version 2 pairs: steps [(step, events, truncated)]."""
    S = lambda s, trunc=0, **kw: (s, _evs2(s, **kw), trunc)
    base = [S(0), S(1), S(2)]
    return [
        ("v2 identical", base, base),
        # the module's parameters differ: inherited from them, never the culprit
        ("v2 parameters differ", base, [S(0), S(1, par=(2, 7), out=(2, 9)), S(2)]),
        ("v2 parameters and input differ", base, [S(0), S(1, par=(2, 7), inp=(2, 0, 4), out=(2, 9)), S(2)]),
        ("v2 parameters differ, output equal", base, [S(0), S(1, par=(6, 7)), S(2, out=(6, 9))]),
        ("v2 module culprit", base, [S(0), S(1, out=(6, 9)), S(2)]),
        ("v2 optimizer culprit", base, [S(0), S(1, upd=1), S(2)]),
        ("v2 backward before the optimizer", base, [S(0), S(1, out=(5, 1)), S(2)]),
    ]


@pytest.mark.parametrize("case", [c[0] for c in _pair_cases()])
def test_first_difference_names_bisects_event(tmp_path, case):
    _need_trace_bisect()
    c = dict((x[0], x[1:]) for x in _pair_cases())[case]
    sa, sb = c[0], c[1]
    names = c[2] if len(c) > 2 else None
    version = sa[0][3] if len(sa[0]) > 3 else 1
    sa, sb = [x[:3] for x in sa], [x[:3] for x in sb]
    a, b = _runs(tmp_path, _mk(sa, version=version), _mk(sb, names, version=version))
    d = detcheck.first_difference(detcheck.read_trace(a), detcheck.read_trace(b))
    if d is not None and d.how == "output":
        # the printed line says what was inherited: an input, or the module's parameters (version 2)
        line = [x for x in run_cli("bisect", a, b, check=False).stdout.splitlines() if x.startswith("first differing ")]
        assert len(line) == 1, line
        want = ("inputs equal, output differs (culprit)" if d.input is None
                else "its parameters and buffers already differed (inherited)" if d.input_is_state
                else "input %d already differed (inherited)" % d.input)
        assert line[0].endswith("output %d: %s" % (d.output, want)), (line, d)
        assert d.input_is_state == (version == 2 and d.a.kind == "module" and d.input == len(d.a.inputs) - 1)
    r = run_cli("bisect", "--json", a, b, check=False)
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads(r.stdout)
    fe = doc["first_event"]
    if fe is not None:
        for k in ("tensor", "magnitudes", "context"):  # context: against the recordings (bisect's)
            fe.pop(k)
    assert _py_first_event(d) == fe, (d, r.stdout)
    # exit 1 with no first event: only for what one run holds and the other
    # lacks (truncated events, steps in one run only: not compared)
    assert (d is None) == (r.returncode == 0 or (fe is None and doc["not_compared"] != [])), (r.returncode, doc)
    if d is not None:  # the tuple reads as before
        step, ea, eb, inputs_equal = d
        assert (step, ea, eb) == (d.step, d.a, d.b)
        assert inputs_equal is (None if d.how == "execution" else d.input is None)


class Aliases(torch.nn.Module):
    """Writes a slot cache could miss: in place through the tensor itself,
    through x.data (a version counter of its own), through a view, and
    reads of the same bytes through other views."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.register_buffer("scale", torch.ones(8, 8))

    def forward(self, x):
        h = self.lin(x)
        first = self.scale * 1.0           # scale read (and digested)
        self.scale.data.mul_(1.5)          # written through .data: scale's own counter does not move
        second = self.scale * 1.0          # must see the new bytes
        h = torch.relu_(h.clone())         # in place through the tensor
        h = h * 1.0
        h.detach()[0].add_(1.0)            # through a view sharing the counter (h is not saved)
        w = self.lin.weight.t().t().detach()  # the weight's bytes again, through views
        return (h @ w) * (first + second).sum()


def _alias_run(out, cached=True, monkeypatch=None):
    if not cached:
        monkeypatch.setattr(_trace._SlotCache, "slot", lambda self, t, fresh=False: _trace._slot(t))
    torch.manual_seed(0)
    model = Aliases()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(2)
    with detcheck.Recorder(out, model=model, optimizer=opt, trace="ops") as rec:
        for step in range(1, 4):
            loss = model(torch.randn(4, 8, generator=g)).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            rec.step(step, loss=loss)
    if not cached:
        monkeypatch.undo()
    with open(os.path.join(out, "trace.bin"), "rb") as f:
        return f.read()


def test_op_trace_slot_cache_sees_every_write(tmp_path, monkeypatch):
    """Each layout is digested once per step (the slot cache); the trace is
    byte for byte the one of digesting every slot afresh, writes through
    aliases included."""
    fresh = _alias_run(str(tmp_path / "fresh"), False, monkeypatch)
    cached = _alias_run(str(tmp_path / "cached"))
    assert fresh == cached
    ev = [e for e in detcheck.read_trace(str(tmp_path / "cached"))[2].events
          if e.phase == "forward" and e.op == "aten.mul.Tensor" and e.module == "(root)"]
    assert ev[0].inputs[0] != ev[1].inputs[0]  # scale before and after the .data write


def test_op_trace_slot_cache_digests_each_layout_once(tmp_path, monkeypatch):
    """A weight and views showing its bytes again are digested once a step."""
    calls = []
    real = _trace._slot
    monkeypatch.setattr(_trace, "_slot", lambda t, tally=None: calls.append(t.shape if t is not None else None)
                        or real(t, tally))
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64)
    with detcheck.Recorder(tmp_path / "r", model=model, trace="ops") as rec:
        model(torch.randn(2, 64)).sum().backward()
        rec.step(0)
    ev = detcheck.read_trace(tmp_path / "r")[0].events
    slots = sum(len(e.inputs) + len(e.outputs) for e in ev)
    # weight (and its transposes), the gradient and its views: far fewer digests than slots
    assert calls.count(torch.Size([64, 64])) <= 4 < sum(
        1 for e in ev for s in e.inputs + e.outputs if s is not None) and len(calls) < slots


def test_op_trace_leaves_uninitialised_memory_absent(tmp_path):
    """torch.empty_like's bytes are whatever the allocator hands out (they
    differ between a run and its resumed twin): its output, and the input
    of the op that first writes it, are absent slots; what that op writes
    is digested."""
    class Fill(torch.nn.Module):
        def forward(self, x):
            e = torch.empty_like(x)
            e.bernoulli_(0.5)      # dropout's pattern: written whole by a random op
            return x * e

    torch.manual_seed(0)
    model = Fill()
    with detcheck.Recorder(tmp_path / "r", model=model, trace="ops") as rec:
        model(torch.randn(4, 4)).sum()
        rec.step(0)
    ev = {e.op: e for e in detcheck.read_trace(tmp_path / "r")[0].events}
    assert ev["aten.empty_like.default"].outputs == [None]
    b = ev["aten.bernoulli_.float"]
    assert b.inputs[0] is None and b.outputs[0] is not None
    assert ev["aten.mul.Tensor"].inputs[1] == b.outputs[0]


# ------------------------------------------------- what is an event (detcheck-bisect(1), TRACE FILES)
class Reshaper(torch.nn.Module):
    """Forward full of ops that only alias or move storage: views, reshape's
    _unsafe_view, in-place views, set_ (which points a tensor at other
    memory: the op reading it afterwards must see the new bytes)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(6, 6)

    def forward(self, x):
        h = self.lin(x)
        v = h.view(-1).t().detach().unsqueeze(0).expand(2, -1)[1].select(0, 3)
        r = h.transpose(0, 1).reshape(-1)             # not viewable: clone + _unsafe_view
        s = torch.zeros(4)
        first = s * 2.0                                # s's zeros digested
        s.set_(torch.arange(4.0).untyped_storage())    # s now shows 0, 1, 2, 3
        second = s * 2.0                               # must not reuse the zeros' slot
        s.unsqueeze_(0)
        return h.sum() + v + r.sum() + first.sum() + second.sum() + s.sum()


def test_views_and_set_are_no_events(tmp_path):
    torch.manual_seed(0)
    model = Reshaper()
    with detcheck.Recorder(tmp_path / "r", model=model, trace="ops") as rec:
        model(torch.randn(3, 6)).backward()
        rec.step(0)
    ev = detcheck.read_trace(tmp_path / "r")[0].events
    ops = {e.op.split(".")[1] for e in ev}
    meta = {"view", "t", "detach", "unsqueeze", "expand", "select", "transpose", "_unsafe_view", "set_",
            "unsqueeze_", "alias", "as_strided", "slice", "_reshape_alias", "lift_fresh"}
    assert not ops & meta, sorted(ops & meta)
    assert {"addmm", "clone", "mul", "sum"} <= ops, sorted(ops)
    muls = [e for e in ev if e.op == "aten.mul.Tensor" and e.phase == "forward"]
    assert len(muls) == 2 and muls[0].inputs[0] != muls[1].inputs[0]  # set_ dropped the zeros' slot
    assert muls[1].inputs[0] == detcheck.digest(torch.arange(4.0))


def _loader_loop(out, workers, trace, steps=3, shard=False):
    """A loop over a real DataLoader (shuffled, workers forked or none; or
    accelerate's DataLoaderShard) whose model computes its own loss: every
    op of the step runs in the model or the optimizer."""
    from torch.utils.data import DataLoader, TensorDataset

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(5, 3)

        def forward(self, x, y):
            return torch.nn.functional.cross_entropy(self.fc(x), y)

    torch.manual_seed(0)
    ds = TensorDataset(torch.randn(40, 5), torch.randint(0, 3, (40,)))
    kw = dict(batch_size=4, shuffle=True, num_workers=workers, generator=torch.Generator().manual_seed(1))
    if shard:
        from accelerate.data_loader import DataLoaderShard
        dl = DataLoaderShard(ds, **kw)
    else:
        dl = DataLoader(ds, **kw)
    model = Model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    with detcheck.Recorder(out, model=model, optimizer=opt, trace=trace) as rec:
        for step, (x, y) in enumerate(dl, 1):
            model(x, y).backward()
            opt.step()
            opt.zero_grad()
            rec.step(step)
            if step == steps:
                break
    return detcheck.read_trace(out)


@pytest.mark.parametrize("workers", [0, 2])
def test_loader_ops_are_no_events(tmp_path, workers):
    t = _loader_loop(str(tmp_path / "a"), workers, "ops")
    assert sorted(t) == [1, 2, 3]
    for s in t.values():
        # outside the model and the optimizer only backward's seed: the
        # loader's sampler, collate, rebuilt batches (set_) are not traced
        assert [e.op for e in s.events if e.module == "(outside)"] == ["aten.ones_like.default"]
        assert {e.module for e in s.events} == {"fc", "(root)", "(optimizer)", "(outside)"}
    b = _loader_loop(str(tmp_path / "b"), workers, "ops")
    assert detcheck.first_difference(t, b) is None


def test_accelerate_loader_ops_are_no_events(tmp_path):
    pytest.importorskip("accelerate")
    t = _loader_loop(str(tmp_path / "a"), 2, "ops", steps=2, shard=True)
    assert sorted(t) == [1, 2]
    for s in t.values():
        assert [e.op for e in s.events if e.module == "(outside)"] == ["aten.ones_like.default"]


def _perturbed_run(out, delta, trace, lr=1e-2, foreach=None, steps=2):
    """train()'s model, its output layer's weight moved by delta before
    step 1 (a weight that already differs), AdamW at lr."""
    torch.manual_seed(0)
    model = Net("fwd")
    with torch.no_grad():
        model.out.weight[0, 0] += delta
    model.seen = []
    model.out.register_forward_pre_hook(
        lambda m, a: model.seen.append(_state_digest(detcheck.digest(m.weight), detcheck.digest(m.bias))))
    opt = torch.optim.AdamW(model.parameters(), lr=lr, foreach=foreach)
    g = torch.Generator().manual_seed(1)
    with detcheck.Recorder(out, model=model, optimizer=opt, trace=trace) as rec:
        for step in range(1, steps + 1):
            loss = torch.nn.functional.mse_loss(model(torch.randn(8, 16, generator=g)), torch.randn(8, 4, generator=g))
            opt.zero_grad()
            loss.backward()
            opt.step()
            rec.step(step, loss=loss)
    return str(out), model, opt


def test_module_parameters_are_an_input(tmp_path):
    """A module event's last input is its parameters' and buffers' digest:
    it follows the weights from step to step, is absent for a module without
    any, and a module whose weight already differs is inherited, never the
    culprit (bisect says so)."""
    a, model, _ = _perturbed_run(tmp_path / "a", 0.0, "modules")
    b, _, _ = _perturbed_run(tmp_path / "b", 1e-3, "modules")
    ta, tb = detcheck.read_trace(a), detcheck.read_trace(b)
    out = {s: [e for e in ta[s].events if e.module == "out" and e.phase == "forward"][0] for s in (1, 2)}
    assert out[1].state_input == 1 and out[1].inputs[1] is not None
    assert out[1].inputs[1] != out[2].inputs[1]  # the optimizer moved the weights
    assert [out[1].inputs[1], out[2].inputs[1]] == model.seen  # its weight and bias as each forward saw them
    act = [e for e in ta[1].events if e.module == "act"]
    assert act and all(e.state_input == len(e.inputs) - 1 and e.inputs[-1] is None for e in act)
    d = detcheck.first_difference(ta, tb)
    assert (d.step, d.a.phase, d.a.module, d.how) == (1, "forward", "out", "output")
    assert d.input == 1 and d.input_is_state and not d.culprit
    r = run_cli("bisect", a, b)
    assert "first differing module: step 1, forward, out (call 0), output 0: its parameters and buffers " \
           "already differed (inherited)" in r.stdout, r.stdout
    assert "(culprit)" not in r.stdout



def test_optimizer_phase_outputs_what_it_writes(tmp_path):
    """Under trace="ops", optimizer.step()'s ops are the optimizer's phase;
    an op that writes its arguments and returns nothing (_foreach_addcdiv_,
    AdamW's last write of the weights) has the written tensors as outputs,
    read after it."""
    a, model, opt = _perturbed_run(tmp_path / "a", 0.0, "ops", foreach=True)
    ev = detcheck.read_trace(a)[2].events
    oe = [e for e in ev if e.phase == "optimizer"]
    assert oe and all(e.module == "(optimizer)" and e.kind == "op" for e in oe)
    assert ev[-len(oe):] == oe  # after backward
    last = [e for e in oe if e.op.startswith("aten._foreach_addcdiv_")][-1]
    params = list(model.parameters())
    assert last.outputs == [detcheck.digest(p) for p in params]
    assert last.inputs[:len(params)] != last.outputs  # the weights before and after


@pytest.mark.parametrize("foreach", [False, True])
def test_differing_update_is_named_in_the_optimizer(tmp_path, foreach):
    """Equal gradients, another update (the learning rate): the first
    differing op is the optimizer's, at step 1, the culprit."""
    a, _, _ = _perturbed_run(tmp_path / "a", 0.0, "ops", foreach=foreach)
    b, _, _ = _perturbed_run(tmp_path / "b", 0.0, "ops", lr=1.1e-2, foreach=foreach)
    d = detcheck.first_difference(detcheck.read_trace(a), detcheck.read_trace(b))
    assert (d.step, d.a.phase, d.a.module, d.culprit) == (1, "optimizer", "(optimizer)", True), d
    r = run_cli("bisect", a, b)
    assert "first differing op: step 1, optimizer, (optimizer) (%s, call %d), output %d: inputs equal, output " \
           "differs (culprit)" % (d.a.op, d.a.call, d.output) in r.stdout, r.stdout

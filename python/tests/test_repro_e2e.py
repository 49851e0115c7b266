"""`detcheck repro -- CMD` end to end, on real PyTorch training scripts run on
the CPU through the package's environment contract (DETCHECK_RECORD and
friends, honoured by detcheck.autorecord, Recorder.from_env and the Hugging
Face and Lightning callbacks):

- a reproducible plain loop (examples/python/repro_train.py) says so, exit 0;
- the same loop with a planted order-dependent reduction (a custom op whose
  summation order an --env variable flips), in forward and in backward,
  traced op by op and module by module: exit 1, and the op or module is
  named with "inputs equal, output differs (culprit)";
- a loop with a big matmul and full reductions under --vary threads: either
  reproducible across the thread counts or localised to the first op whose
  bits move (the test says which outcome it saw);
- the Trainer and Lightning callbacks under repro: reproducible;
- commands that fail or record nothing: exit 2, with their own stderr tail.

The CLI is $DETCHECK, else the package's bundled one (conftest.cli_path); the
scripts run with this interpreter, with the directory of the detcheck
package under test first on PYTHONPATH."""
import os
import re
import subprocess
import sys
import textwrap

import pytest

from conftest import cli_path

# The end-to-end runs of real training scripts take minutes: CI runs them in
# its first stage and skips them, visibly, in the later ones (.ci/run).
if os.environ.get("DCK_SKIP_PY_E2E"):
    pytest.skip(os.environ["DCK_SKIP_PY_E2E"], allow_module_level=True)

EXAMPLE = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                        "examples", "python", "repro_train.py"))
RUN_TIMEOUT = 150  # seconds, per run (repro --timeout)
CULPRIT = "inputs equal, output differs (culprit)"


def repro(tmp_path, *args, cmd, env=None):
    """Runs `detcheck repro --workdir tmp_path/runs --timeout T ARGS -- CMD`
    with the DETCHECK_* variables of this process cleared; returns the
    CompletedProcess (text)."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("DETCHECK_")}
    if "DETCHECK_LIB" in os.environ:
        e["DETCHECK_LIB"] = os.environ["DETCHECK_LIB"]
    e.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
              "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"})
    # the detcheck package under test, found from any directory (the runs
    # start in tmp_path; a relative PYTHONPATH would not)
    import detcheck
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(detcheck.__file__)))
    e["PYTHONPATH"] = os.pathsep.join([pkg] + [os.path.abspath(p) for p in e.get("PYTHONPATH", "").split(os.pathsep) if p])
    e.update(env or {})
    wd = tmp_path / "runs"
    argv = [cli_path(), "repro", "--workdir", str(wd), "--timeout", str(RUN_TIMEOUT)] + [str(a) for a in args] + \
        ["--"] + [str(c) for c in cmd]
    return subprocess.run(argv, capture_output=True, text=True, env=e, cwd=str(tmp_path), stdin=subprocess.DEVNULL,
                          timeout=RUN_TIMEOUT * 4 + 60)


def show(r):
    return "exit %d\n--- stdout\n%s--- stderr\n%s" % (r.returncode, r.stdout, r.stderr)


def say(capsys, text):
    """A line in pytest's own output, captured or not."""
    with capsys.disabled():
        sys.stdout.write("\n[test_repro_e2e] %s\n" % text)
        sys.stdout.flush()


def test_example_exists():
    assert os.path.isfile(EXAMPLE), EXAMPLE


def test_reproducible_plain_loop(tmp_path):
    r = repro(tmp_path, "-n", 2, cmd=[sys.executable, EXAMPLE, "--steps", 4])
    assert r.returncode == 0, show(r)
    assert r.stdout.splitlines()[0] == "reproducible: 2 runs, 4 steps, every tensor identical", show(r)
    # the verdict holds the recorded settings; the workdir given is kept
    assert "determinism settings off: deterministic_algorithms=false" in r.stdout, show(r)
    assert {"run.json", "tensor_digests.bin", "trace.bin", "trajectory.jsonl"} <= set(
        os.listdir(tmp_path / "runs" / "run_2"))


@pytest.mark.parametrize("plant,trace", [("forward", "ops"), ("backward", "modules"),
                                         ("backward", "ops"), ("forward", "modules")])
def test_planted_op_is_named(tmp_path, plant, trace):
    """DEMO_ORDER flips the summation order of repro_demo::center between
    the two runs: the op (ops trace) or the module calling it (modules
    trace) is named, in the right phase, as the culprit."""
    r = repro(tmp_path, "--env", "DEMO_ORDER=forward,reverse", "--trace", trace,
              cmd=[sys.executable, EXAMPLE, "--plant", plant, "--steps", 2])
    assert r.returncode == 1, show(r)
    out = r.stdout.splitlines()
    assert out[0] == "not reproducible: run 2 differs from run 1 at step 1 (1 of 2 runs differ from run 1)", show(r)
    if trace == "ops":
        want = "first differing op: step 1, %s, center (repro_demo.center.default, call 0), output 0: %s" % (
            plant, CULPRIT)
    else:
        want = "first differing module: step 1, %s, center (call 0), output 0: %s" % (plant, CULPRIT)
    assert want in out, show(r)
    assert "varied: DEMO_ORDER=forward in run 1, reverse in run 2" in out, show(r)
    assert any(l.startswith("first differing tensor: step 1, ") for l in out), show(r)


def test_magnitudes_from_the_dump(tmp_path):
    """The verdict names the repro command that dumps the differing step;
    run with it, the verdict names the detcheck diff of the two dumps, and
    that diff gives the first differing op's output's magnitudes."""
    cmd = [sys.executable, EXAMPLE, "--plant", "forward", "--steps", 2]
    r = repro(tmp_path, "--env", "DEMO_ORDER=forward,reverse", "--trace", "ops", cmd=cmd)
    assert r.returncode == 1, show(r)
    hint = [l for l in r.stdout.splitlines() if l.startswith("magnitudes: ")]
    want = "magnitudes: rerun with every run dumping step 1's outputs, for detcheck diff's max ULP and rel L2: " \
        "detcheck repro --dump-step 1 --trace ops --env DEMO_ORDER=forward,reverse --timeout %d -- " % RUN_TIMEOUT
    assert hint and hint[0].startswith(want), show(r)
    assert hint[0].endswith(" --plant forward --steps 2"), show(r)
    again = tmp_path / "again"
    again.mkdir()
    r = repro(again, "--env", "DEMO_ORDER=forward,reverse", "--trace", "ops", "--dump-step", 1, cmd=cmd)
    assert r.returncode == 1, show(r)
    line = [l for l in r.stdout.splitlines() if l.startswith("magnitudes: ")]
    m = re.match(r"^magnitudes: detcheck diff (\S+) (\S+) \(tensor (\d{5}\.output\.\d+)\)$", line[0] if line else "")
    assert m, show(r)
    for k in (1, 2):
        assert os.path.isfile(m.group(k)) and m.group(k).endswith("/dump_step_1/trace.safetensors"), m.group(k)
    d = subprocess.run([cli_path(), "diff", m.group(1), m.group(2)], capture_output=True, text=True)
    assert d.returncode == 1, d.stdout + d.stderr
    assert m.group(3) in d.stdout and "ulp" in d.stdout.lower(), d.stdout
    bad = repro(again, "--trace", "none", "--dump-step", 1, cmd=cmd)
    assert bad.returncode == 2 and "--dump-step with --trace none" in bad.stderr, show(bad)


# A two-layer MLP whose fc2 weight gradient sums its chunks in an order an
# --env variable flips (detcheck-repro(1), DESCRIPTION): the runs part at step 1 in a gradient,
# which no module's inputs or outputs show; the module trace first differs
# at step 2 (fc2's updated weight), after the runs already parted.
GRADPLANT_SCRIPT = """
import os, torch, detcheck
torch.manual_seed(0)
LOSS_REV = os.environ.get("DEMO_ORDER") == "reverse"
REV = LOSS_REV and os.environ.get("DEMO_LOSS") != "outside"
class LinFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b):
        ctx.save_for_backward(x, w)
        return x @ w.t() + b
    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        parts = [g[i:i + 7].t() @ x[i:i + 7] for i in range(0, g.shape[0], 7)]
        if REV:
            parts.reverse()
        gw = parts[0]
        for p in parts[1:]:
            gw = gw + p
        return g @ w, gw, g.sum(0)
class Lin(torch.nn.Linear):
    def forward(s, x):
        return LinFn.apply(x, s.weight, s.bias)
class Net(torch.nn.Module):
    def __init__(s):
        super().__init__()
        s.fc1, s.fc2 = torch.nn.Linear(29, 41), Lin(41, 13)
    def forward(s, x):
        return s.fc2(torch.tanh(s.fc1(x)))
m = Net()
opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
rec = detcheck.autorecord(m, opt)
g = torch.Generator().manual_seed(3)
for step in range(3):
    x, y = torch.randn(101, 29, generator=g), torch.randn(101, 13, generator=g)
    loss = ((m(x) - y) ** 2).mean()
    if os.environ.get("DEMO_LOSS") == "outside":
        # a loss term computed outside the model, its sum order flipped
        v = y.flatten()
        t = [v[i:i + 97].sum() for i in range(0, v.numel(), 97)]
        if LOSS_REV:
            t.reverse()
        extra = t[0]
        for u in t[1:]:
            extra = extra + u
        loss = loss + 1e-3 * extra
    loss.backward()
    opt.step()
    opt.zero_grad()
    rec.loss(loss)
"""


def test_gradient_the_module_trace_cannot_see(tmp_path):
    """The first difference is a parameter gradient: no module is named the
    culprit (its later difference is context), the verdict says what the
    module trace cannot see and ends with the repro command that traces ops."""
    script = tmp_path / "gradplant.py"
    script.write_text(GRADPLANT_SCRIPT)
    r = repro(tmp_path, "--env", "DEMO_ORDER=forward,reverse", cmd=[sys.executable, script])
    assert r.returncode == 1, show(r)
    out = r.stdout.splitlines()
    assert out[0] == "not reproducible: run 2 differs from run 1 at step 1 (1 of 2 runs differ from run 1)", show(r)
    assert "first differing tensor: step 1, gradient fc2.weight" in out, show(r)
    assert "the module trace cannot see parameter gradients or the optimizer update: the first difference is " \
        "gradient fc2.weight at step 1" in out, show(r)
    assert "(culprit)" not in r.stdout, show(r)
    assert any(l.startswith("first trace difference, at step 2, comes after the first differing step 1 (context, "
                            "not a culprit): forward, fc2 (call 0)") for l in out), show(r)
    nxt = [l for l in out if l.startswith("next: ")]
    want = "next: localise with an op trace: detcheck repro --trace ops --env DEMO_ORDER=forward,reverse " \
        "--timeout %d -- " % RUN_TIMEOUT
    assert len(nxt) == 1 and nxt[0].startswith(want) and nxt[0].endswith("gradplant.py"), show(r)


def test_loss_outside_the_model_has_a_next_step(tmp_path):
    """Only a loss term outside the model differs: the module trace finds
    nothing, and the verdict still ends with the command that localises it."""
    script = tmp_path / "gradplant.py"
    script.write_text(GRADPLANT_SCRIPT)
    r = repro(tmp_path, "--env", "DEMO_ORDER=forward,reverse", cmd=[sys.executable, script],
              env={"DEMO_LOSS": "outside"})
    assert r.returncode == 1, show(r)
    out = r.stdout.splitlines()
    m = re.match(r"^not reproducible: run 2 differs from run 1 at step (\d+) ", out[0])
    assert m, show(r)
    assert out[1].startswith("first differing step: %s (loss_bits " % m.group(1)), show(r)
    assert not any(l.startswith("first differing module") for l in out), show(r)
    nxt = [l for l in out if l.startswith("next: ")]
    assert len(nxt) == 1 and nxt[0].startswith("next: localise with an op trace: detcheck repro --trace ops "), show(r)


THREADS_SCRIPT = '''
import torch, detcheck
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
rec = detcheck.autorecord(model, opt)   # applies DETCHECK_THREADS: torch.set_num_threads
print("threads", torch.get_num_threads())
g = torch.Generator().manual_seed(1)
for step in range(2):
    x = torch.randn(512, 1024, generator=g)
    big = torch.randn(1 << 21, generator=g)
    h = model(x)
    # full reductions over 131072 and 2^21 elements: split between threads
    loss = h.square().mean() + 1e-6 * (big * h.sum()).sum()
    opt.zero_grad()
    loss.backward()
    rec.loss(loss)
    opt.step()
'''

THREADS_OP = re.compile(r"^first differing op: step (\d+), (forward|backward), (\S+) \(([\w.]+), call (\d+)\), "
                        r"output (\d+): " + re.escape(CULPRIT) + "$", re.M)


def test_vary_threads(tmp_path, capsys):
    """--vary threads: run 1 with the CPU count, then 1 and 3 threads. On a
    given machine either no bit moves (exit 0) or the first op whose bits
    move is named as the culprit (exit 1); anything else fails."""
    script = tmp_path / "threads.py"
    script.write_text(THREADS_SCRIPT)
    r = repro(tmp_path, "-n", 3, "--vary", "threads", "--trace", "ops", cmd=[sys.executable, script])
    if r.returncode == 0:
        assert r.stdout.splitlines()[0] == "reproducible: 3 runs, 2 steps, every tensor identical", show(r)
        counts = [re.search(r"^threads (\d+)$", (tmp_path / "runs" / ("run_%d.out" % i)).read_text(), re.M).group(1)
                  for i in (1, 2, 3)]
        say(capsys, "--vary threads: REPRODUCIBLE on this machine (runs with %s threads: every tensor identical)"
            % ", ".join(counts))
        return
    assert r.returncode == 1, show(r)
    m = THREADS_OP.search(r.stdout)
    assert m, "repro exit 1 under --vary threads without naming the op whose bits moved first\n" + show(r)
    assert m.group(4).startswith("aten."), show(r)
    assert re.search(r"^varied: DETCHECK_THREADS=\d+ in run 1, \d+ in run \d+$", r.stdout, re.M), show(r)
    assert re.search(r"^settings that differ between runs: threads \(", r.stdout, re.M), show(r)
    say(capsys, "--vary threads: NOT reproducible on this machine; localised: " +
        [l for l in r.stdout.splitlines() if l.startswith("first differing op:")][0] + " / " +
        [l for l in r.stdout.splitlines() if l.startswith("varied:")][0])


HF_SCRIPT = '''
import sys, torch, transformers
from detcheck.integrations.hf import DetcheckCallback
transformers.set_seed(0)
cfg = transformers.GPT2Config(vocab_size=16, n_positions=8, n_embd=4, n_layer=1, n_head=2)
model = transformers.GPT2LMHeadModel(cfg)            # a few hundred parameters, no download
print("parameters", sum(p.numel() for p in model.parameters()))
g = torch.Generator().manual_seed(1)
data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 16, (8, 8), generator=g)]
args = transformers.TrainingArguments(output_dir=sys.argv[1], max_steps=3, per_device_train_batch_size=4,
                                      use_cpu=True, report_to=[], save_strategy="no", logging_strategy="steps",
                                      logging_steps=1, seed=0, data_seed=0, dataloader_num_workers=0,
                                      disable_tqdm=True)
transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=[DetcheckCallback()]).train()
'''

LIGHTNING_SCRIPT = '''
import sys, torch, lightning as L
from detcheck.integrations.lightning import DetcheckCallback

class Mod(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))

    def training_step(self, batch, i):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-2)

L.seed_everything(0, verbose=False)
ds = torch.utils.data.TensorDataset(torch.randn(16, 8), torch.randn(16, 1))
trainer = L.Trainer(max_steps=3, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False, default_root_dir=sys.argv[1],
                    callbacks=[DetcheckCallback()])
trainer.fit(Mod(), torch.utils.data.DataLoader(ds, batch_size=4, shuffle=True))
'''


def test_hf_trainer_under_repro(tmp_path):
    pytest.importorskip("transformers")
    script = tmp_path / "hf_train.py"
    script.write_text(HF_SCRIPT)
    r = repro(tmp_path, cmd=[sys.executable, script, tmp_path / "trainer_out"])
    assert r.returncode == 0, show(r)
    assert r.stdout.splitlines()[0] == "reproducible: 2 runs, 3 steps, every tensor identical", show(r)
    n = int(re.search(r"^parameters (\d+)$", (tmp_path / "runs" / "run_1.out").read_text(), re.M).group(1))
    assert n < 1000


def test_lightning_under_repro(tmp_path):
    pytest.importorskip("lightning")
    script = tmp_path / "lightning_train.py"
    script.write_text(LIGHTNING_SCRIPT)
    r = repro(tmp_path, cmd=[sys.executable, script, tmp_path / "lightning_out"])
    assert r.returncode == 0, show(r)
    assert r.stdout.splitlines()[0] == "reproducible: 2 runs, 3 steps, every tensor identical", show(r)


def test_failing_command_is_trouble(tmp_path):
    r = repro(tmp_path, cmd=[sys.executable, "-c", 'import sys; sys.stderr.write("boom\\n"); sys.exit(3)'])
    assert r.returncode == 2, show(r)
    assert "boom" in r.stderr, show(r)
    assert "status 3" in r.stderr, show(r)
    assert not os.path.exists(tmp_path / "runs" / "run_2.out"), "repro went on after a failed run"


def test_command_that_records_nothing_is_trouble(tmp_path):
    r = repro(tmp_path, cmd=[sys.executable, "-c", 'print("trained, recorded nothing")'])
    assert r.returncode == 2, show(r)
    assert "autorecord" in r.stderr, show(r)

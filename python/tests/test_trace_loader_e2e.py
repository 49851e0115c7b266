"""Traces of real training scripts under `detcheck repro` (detcheck-bisect(1), TRACE FILES), on the
CPU, each a few steps:

- a plain loop with DataLoader workers (0 and 2; one worker's reads slow,
  another in each run), dropout, AdamW, cosine LR, gradient accumulation and
  bf16 autocast is reproducible under --trace ops and --trace modules (the
  main process rebuilds the workers' batches with set_ in the order they
  arrive: no event, no false alarm); so is a transformers Trainer with
  dataloader_num_workers=2 under --trace ops;
- the same loop with a planted thread-dependent aten.sum in the model
  (workers 2, --trace ops) names that sum as the culprit;
- a Linear whose weight gradient sums in an order an --env variable flips:
  the module trace names no culprit at step 2 (the module's weights are its
  input: inherited from its parameters), the op trace names a step-1
  backward op."""
import os
import sys
import textwrap

import pytest

if os.environ.get("DCK_SKIP_PY_E2E"):
    pytest.skip(os.environ["DCK_SKIP_PY_E2E"], allow_module_level=True)

from test_repro_e2e import repro, show  # noqa: E402  (after the skip: the same runner)

CULPRIT = "inputs equal, output differs (culprit)"

LOOP = textwrap.dedent("""\
    import os, sys, time, torch, detcheck
    from torch.utils.data import DataLoader, Dataset, get_worker_info
    torch.set_num_threads(1)
    workers = int(os.environ["WORKERS"])
    run = os.environ["RUN"]  # a or b
    # the worker whose reads are slow (as from a disk): the batches reach the main process in another order
    slow = 0 if run == "a" else 1
    # the planted sum's threads: another summation order
    plant = os.environ.get("PLANT") and (1 if run == "a" else 4)
    torch.manual_seed(0)
    X = torch.randn(97, 24); Y = torch.randint(0, 5, (97,))
    class Data(Dataset):
        def __len__(s): return len(X)
        def __getitem__(s, i):
            w = get_worker_info()
            if w is not None and w.id == slow:
                time.sleep(0.002)
            return X[i], Y[i]
    dl = DataLoader(Data(), batch_size=8, shuffle=True, num_workers=workers,
                    generator=torch.Generator().manual_seed(1))
    class Net(torch.nn.Module):
        def __init__(s):
            super().__init__()
            s.fc1 = torch.nn.Linear(24, 32); s.drop = torch.nn.Dropout(0.1); s.fc2 = torch.nn.Linear(32, 5)
            if plant:
                s.register_buffer("big", torch.randn(1 << 20, generator=torch.Generator().manual_seed(0)))
        def forward(s, x):
            h = torch.relu(s.fc1(x))
            if plant:
                torch.set_num_threads(plant); t = s.big.sum(); torch.set_num_threads(1)
                h = h + t * 1e-3
            return s.fc2(s.drop(h))
    m = Net(); opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, 10)
    rec = detcheck.autorecord(m, opt)
    accum, step = 2, 0
    for i, (x, y) in enumerate(dl):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(m(x), y) / accum
        loss.backward()
        if (i + 1) % accum == 0:
            opt.step(); sched.step(); opt.zero_grad(); step += 1
            if rec: rec.loss(loss)
            if step == 3: sys.exit(0)
    """)

HF = textwrap.dedent("""\
    import os, sys, time, torch, transformers
    from detcheck.integrations.hf import DetcheckCallback
    transformers.set_seed(0)
    slow = 0 if os.environ["RUN"] == "a" else 1  # as in LOOP: the batches arrive in another order
    cfg = transformers.GPT2Config(vocab_size=16, n_positions=8, n_embd=4, n_layer=1, n_head=2)
    model = transformers.GPT2LMHeadModel(cfg)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 16, (24, 8), generator=g)
    class Data(torch.utils.data.Dataset):
        def __len__(s): return len(ids)
        def __getitem__(s, i):
            w = torch.utils.data.get_worker_info()
            if w is not None and w.id == slow:
                time.sleep(0.003)
            return {"input_ids": ids[i], "labels": ids[i]}
    args = transformers.TrainingArguments(output_dir=sys.argv[1], max_steps=2, per_device_train_batch_size=4,
                                          gradient_accumulation_steps=2, use_cpu=True, report_to=[],
                                          save_strategy="no", logging_strategy="steps", logging_steps=1, seed=0,
                                          data_seed=0, dataloader_num_workers=2, disable_tqdm=True)
    transformers.Trainer(model=model, args=args, train_dataset=Data(), callbacks=[DetcheckCallback()]).train()
    """)

GRADPLANT = textwrap.dedent("""\
    import os, torch, detcheck
    torch.set_num_threads(1)
    torch.manual_seed(0)
    REV = os.environ.get("DEMO_ORDER") == "reverse"
    class LinFn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, b):
            ctx.save_for_backward(x, w); return x @ w.t() + b
        @staticmethod
        def backward(ctx, g):
            x, w = ctx.saved_tensors
            parts = [g[i:i + 7].t() @ x[i:i + 7] for i in range(0, g.shape[0], 7)]
            if REV: parts.reverse()
            gw = parts[0]
            for p in parts[1:]: gw = gw + p
            return g @ w, gw, g.sum(0)
    class Lin(torch.nn.Linear):
        def forward(s, x): return LinFn.apply(x, s.weight, s.bias)
    class Net(torch.nn.Module):
        def __init__(s):
            super().__init__(); s.fc1 = torch.nn.Linear(29, 41); s.fc2 = Lin(41, 13)
        def forward(s, x): return s.fc2(torch.tanh(s.fc1(x)))
    m = Net(); opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    rec = detcheck.autorecord(m, opt)
    g = torch.Generator().manual_seed(3)
    for step in range(3):
        x = torch.randn(101, 29, generator=g); y = torch.randn(101, 13, generator=g)
        loss = ((m(x) - y) ** 2).mean()
        loss.backward(); opt.step(); opt.zero_grad()
        if rec: rec.loss(loss)
    """)


def script(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return [sys.executable, str(p)]


def trace_line(r):
    lines = [x for x in r.stdout.splitlines() if x.startswith(("first differing op:", "first differing module:"))]
    assert len(lines) == 1, show(r)
    return lines[0]


@pytest.mark.parametrize("trace", ["ops", "modules"])
@pytest.mark.parametrize("workers", [0, 2])
def test_loader_loop_is_reproducible(tmp_path, workers, trace):
    r = repro(tmp_path, "--trace", trace, "--env", "RUN=a,b", cmd=script(tmp_path, "loop.py", LOOP),
              env={"WORKERS": str(workers)})
    assert r.returncode == 0, show(r)
    assert "reproducible" in r.stdout and "set_" not in r.stdout, show(r)


def test_planted_sum_is_the_culprit_beside_workers(tmp_path):
    r = repro(tmp_path, "--trace", "ops", "--env", "RUN=a,b", cmd=script(tmp_path, "loop.py", LOOP),
              env={"WORKERS": "2", "PLANT": "1"})
    assert r.returncode == 1, show(r)
    assert trace_line(r) == "first differing op: step 1, forward, (root) (aten.sum.default, call 0), output 0: " \
        + CULPRIT, show(r)


def test_hf_trainer_loader_workers(tmp_path):
    pytest.importorskip("transformers")
    r = repro(tmp_path, "--trace", "ops", "--env", "RUN=a,b",
              cmd=script(tmp_path, "hf.py", HF) + [str(tmp_path / "trainer_out")])
    assert r.returncode == 0, show(r)


def test_differing_weight_gradient(tmp_path):
    cmd = script(tmp_path, "gradplant.py", GRADPLANT)
    # the module trace: fc2's forward at step 2 computes from weights that already differ
    r = repro(tmp_path, "--trace", "modules", "--env", "DEMO_ORDER=forward,reverse", cmd=cmd)
    assert r.returncode == 1, show(r)
    # fc2's step-2 difference comes after the first differing step: context,
    # saying that fc2's weights already differed (never "culprit")
    ctx = [x for x in r.stdout.splitlines() if x.startswith("first trace difference, at step 2, ")]
    assert len(ctx) == 1 and ctx[0].endswith("forward, fc2 (call 0), output 0 differs (its parameters and buffers "
                                             "already differed)"), show(r)
    assert "(culprit)" not in r.stdout, show(r)
    # the op trace: the gradient's sum in backward at step 1
    (tmp_path / "ops").mkdir()
    r = repro(tmp_path / "ops", "--trace", "ops", "--env", "DEMO_ORDER=forward,reverse", cmd=cmd)
    assert r.returncode == 1, show(r)
    assert trace_line(r).startswith("first differing op: step 1, backward, fc2 (aten."), show(r)

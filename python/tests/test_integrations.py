"""The transformers Trainer callback on a tiny model built from a config (no
hub): two runs with the same seed are identical for detcheck bisect, a run
with another seed parts at step 1 and the first tensor is named. The
Lightning callback: a short fit records consecutive steps with their loss."""
import json
import os
import struct

import pytest
import torch

from conftest import run_cli, lightning_linear


def hf_run(out, seed, logging_steps=None):
    """Trains the tiny model 3 steps with DetcheckCallback(out); returns the
    Trainer. logging_steps=None: no logging (no loss reaches callbacks)."""
    transformers = pytest.importorskip("transformers")
    from detcheck.integrations.hf import DetcheckCallback
    transformers.set_seed(0)
    cfg = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=2, n_head=2)
    model = transformers.GPT2LMHeadModel(cfg)
    g = torch.Generator().manual_seed(seed)
    data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 64, (12, 16), generator=g)]
    logging = {"logging_strategy": "no"} if logging_steps is None else \
        {"logging_strategy": "steps", "logging_steps": logging_steps}
    args = transformers.TrainingArguments(output_dir=out + ".trainer", max_steps=3, per_device_train_batch_size=4,
                                          use_cpu=True, report_to=[], save_strategy="no", **logging,
                                          seed=0, data_seed=0, dataloader_num_workers=0, disable_tqdm=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=[DetcheckCallback(out)])
    trainer.train()
    return trainer


def f32_bits(v):
    return "%08x" % struct.unpack("<I", struct.pack("<f", v))[0]


def test_hf_trainer_callback(tmp_path):
    a, b, c = str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "c")
    hf_run(a, 1)
    hf_run(b, 1)
    hf_run(c, 2)
    lines = [json.loads(l) for l in open(os.path.join(a, "trajectory.jsonl"))]
    assert [l["step"] for l in lines] == [1, 2, 3] and all("root" in l for l in lines)
    r = run_cli("bisect", a, b)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(run_cli("bisect", "--json", a, c).stdout)
    assert doc["first_step"] == 1
    # another seed: the batch and RNG states (state entries, kind 3) differ with the gradients
    assert doc["first_tensor"]["kind"] in ("state", "gradient") and doc["first_tensor"]["step"] == 1


def test_hf_trainer_callback_records_logged_loss(tmp_path):
    """logging_steps=1: each line holds the loss and grad norm the Trainer
    logged for that step (not 0); two identical runs bisect equal."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    ta = hf_run(a, 1, logging_steps=1)
    hf_run(b, 1, logging_steps=1)
    logged = {h["step"]: h for h in ta.state.log_history if "loss" in h}
    assert sorted(logged) == [1, 2, 3]
    lines = [json.loads(l) for l in open(os.path.join(a, "trajectory.jsonl"))]
    assert [l["step"] for l in lines] == [1, 2, 3] and all("root" in l for l in lines)
    for l in lines:
        assert l["loss_bits"] == f32_bits(logged[l["step"]]["loss"]) != "00000000", l
        assert l["grad_norm_bits"] == f32_bits(logged[l["step"]]["grad_norm"]) != "00000000", l
    r = run_cli("bisect", a, b)
    assert r.returncode == 0, r.stdout + r.stderr


def test_hf_trainer_callback_sparse_logging(tmp_path):
    """logging_steps=2: step 2 holds the logged loss, steps 1 and 3 none."""
    a = str(tmp_path / "a")
    ta = hf_run(a, 1, logging_steps=2)
    logged = {h["step"]: h for h in ta.state.log_history if "loss" in h}
    lines = [json.loads(l) for l in open(os.path.join(a, "trajectory.jsonl"))]
    assert [l["step"] for l in lines] == [1, 2, 3] and all("root" in l for l in lines)
    assert [l["loss"] is None for l in lines] == [True, False, True]
    assert lines[1]["loss_bits"] == f32_bits(logged[2]["loss"])
    assert lines[0]["loss_bits"] == lines[2]["loss_bits"] == "00000000"


def test_lightning_callback(tmp_path):
    L = pytest.importorskip("lightning")
    from detcheck.integrations.lightning import DetcheckCallback

    Mod = lightning_linear(lambda params: torch.optim.SGD(params, lr=0.1))

    torch.manual_seed(0)
    ds = torch.utils.data.TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
    out = str(tmp_path / "l")
    cb = DetcheckCallback(out)
    trainer = L.Trainer(max_steps=3, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[cb])
    trainer.fit(Mod(), torch.utils.data.DataLoader(ds, batch_size=4))
    lines = [json.loads(l) for l in open(os.path.join(out, "trajectory.jsonl"))]
    assert [l["step"] for l in lines] == [1, 2, 3]
    assert all(l["loss_bits"] != "00000000" and "root" in l for l in lines)
    import detcheck
    kinds = {k for k, _, _ in detcheck.read_digests(out)[2]}
    assert kinds == {"state", "gradient", "parameter"}  # plain SGD keeps no optimizer state

"""The transformers Trainer callback on a tiny model built from a config (no
hub): two runs with the same seed are identical for detcheck bisect, a run
with another seed parts at step 1 and the first tensor is named. The
Lightning callback: a short fit records consecutive steps with their loss."""
import json
import os

import pytest
import torch

from conftest import run_cli


def hf_run(out, seed):
    transformers = pytest.importorskip("transformers")
    from detcheck.integrations.hf import DetcheckCallback
    transformers.set_seed(0)
    cfg = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=2, n_head=2)
    model = transformers.GPT2LMHeadModel(cfg)
    g = torch.Generator().manual_seed(seed)
    data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 64, (12, 16), generator=g)]
    args = transformers.TrainingArguments(output_dir=out + ".trainer", max_steps=3, per_device_train_batch_size=4,
                                          use_cpu=True, report_to=[], save_strategy="no", logging_strategy="no",
                                          seed=0, data_seed=0, dataloader_num_workers=0, disable_tqdm=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=[DetcheckCallback(out)])
    trainer.train()
    return out


def test_hf_trainer_callback(tmp_path):
    a = hf_run(str(tmp_path / "a"), 1)
    b = hf_run(str(tmp_path / "b"), 1)
    c = hf_run(str(tmp_path / "c"), 2)
    lines = [json.loads(l) for l in open(os.path.join(a, "trajectory.jsonl"))]
    assert [l["step"] for l in lines] == [1, 2, 3] and all("root" in l for l in lines)
    r = run_cli("bisect", a, b)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(run_cli("bisect", "--json", a, c).stdout)
    assert doc["first_step"] == 1
    assert doc["first_tensor"]["kind"] == "gradient" and doc["first_tensor"]["step"] == 1


def test_lightning_callback(tmp_path):
    L = pytest.importorskip("lightning")
    from detcheck.integrations.lightning import DetcheckCallback

    class Mod(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 1)

        def training_step(self, batch, i):
            x, y = batch
            return torch.nn.functional.mse_loss(self.lin(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

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
    assert kinds == {"gradient", "parameter"}  # plain SGD keeps no state

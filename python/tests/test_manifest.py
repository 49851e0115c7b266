"""detcheck.manifest gives the names, groups, digests and values `detcheck
hash` gives the torch.save'd object; save() writes what detcheck verify
reads; verify() lists what `detcheck verify` lists."""
import json

import numpy as np
import torch

import detcheck
from conftest import cli_hash, cli_tensors, cli_values, run_cli


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(11, 8)
        self.layers = torch.nn.ModuleList([torch.nn.Linear(8, 8) for _ in range(12)])
        self.norm = torch.nn.LayerNorm(8)
        self.bn = torch.nn.BatchNorm1d(8)
        self.head = torch.nn.Linear(8, 11, bias=False)
        self.head.weight = self.emb.weight  # tied
        self.register_buffer("pos", torch.arange(8))
        self.register_buffer("scratch", torch.ones(3), persistent=False)

    def forward(self, x):
        h = self.emb(x)
        for l in self.layers:
            h = torch.relu(l(h))
        return self.head(self.bn(self.norm(h)))


def trained():
    torch.manual_seed(0)
    m = Net()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, 2)
    for _ in range(2):
        m(torch.arange(6) % 11).square().mean().backward()
        opt.step()
        sched.step()
        opt.zero_grad()
    return m, opt, sched


def same_as_cli(obj, path):
    torch.save(obj, path)
    doc = cli_hash(path)
    m = detcheck.manifest(obj)
    assert m.tensors == cli_tensors(doc)
    assert m.values == cli_values(doc)
    assert m.root == doc["root"]
    return m


def test_module_state_dict_optimizer_nested(tmp_path):
    m, opt, sched = trained()
    same_as_cli(m, tmp_path / "model.pt")
    same_as_cli(m.state_dict(), tmp_path / "sd.pt")
    same_as_cli(opt.state_dict(), tmp_path / "opt.pt")
    assert detcheck.manifest(opt).root == detcheck.manifest(opt.state_dict()).root
    mf = same_as_cli({"model": m.state_dict(), "optimizer": opt.state_dict(), "sched": sched.state_dict(),
                      "step": 2, "rng": torch.get_rng_state(), "np": np.arange(10, dtype=np.int16),
                      "scalars": [1.5, None, True, 10 ** 30, float("inf"), -0.0, 1e-7, 12345678901234567890.0],
                      "long": list(range(20)), "blob": b"\x00\x01", "name": "ignored", 3: {"x": torch.zeros(0)}},
                     tmp_path / "ckpt.pt")
    groups = {n: g for n, (g, _, _, _) in mf.tensors.items()}
    assert groups["model.layers.0.weight"] == "weights"
    assert groups["optimizer.state.0.exp_avg"] == "optimizer"


def test_save_and_verify(tmp_path):
    m, opt, _ = trained()
    obj = {"model": m.state_dict(), "optimizer": opt.state_dict()}
    torch.save(obj, tmp_path / "ckpt.pt")
    gold = detcheck.manifest(obj)
    for ext in ("yaml", "json"):
        p = gold.save(tmp_path / ("golden." + ext))
        r = run_cli("verify", "--golden", p, tmp_path / "ckpt.pt")  # the CLI accepts the Python manifest
        assert r.returncode == 0, r.stdout + r.stderr
        assert detcheck.verify(obj, p).ok
    # one bit of one tensor, and one value: the same list as the CLI's
    with torch.no_grad():
        w = m.layers[3].weight
        w.view(-1).view(torch.int32)[5] ^= 1
    opt.param_groups[0]["lr"] = 0.5
    obj = {"model": m.state_dict(), "optimizer": opt.state_dict()}
    res = detcheck.verify(obj, tmp_path / "golden.yaml")
    assert not res.ok and res.first.name == "model.layers.3.weight" and res.first.kind == "digest"
    torch.save(obj, tmp_path / "changed.pt")
    r = run_cli("verify", "--json", "--golden", tmp_path / "golden.yaml", tmp_path / "changed.pt")
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    cli_list = [(d["name"], d["kind"]) for d in doc["differences"]]
    assert [(d.name, d.kind) for d in res.differences] == cli_list
    assert ("optimizer.param_groups.0.lr", "value") in cli_list
    assert "model.layers.3.weight" in str(res)

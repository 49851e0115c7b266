"""detcheck.manifest gives the names, groups, digests and values `detcheck
hash` gives the torch.save'd object; save() writes what detcheck verify
reads; verify() lists what `detcheck verify` lists."""
import collections
import dataclasses
import enum
import json
import os

import numpy as np
import pytest
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


def test_save_refuses_what_is_not_a_manifest(tmp_path):
    # save() replaces only a manifest (or an empty file; detcheck(1), OUTPUT FILES)
    import os
    import pytest
    m, opt, _ = trained()
    obj = {"model": m.state_dict()}
    ckpt = tmp_path / "ckpt.pt"
    torch.save(obj, ckpt)
    before = ckpt.read_bytes()
    gold = detcheck.manifest(obj)
    traj = tmp_path / "trajectory.jsonl"
    traj.write_text('{"step":1}\n')
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "link.yaml"
    os.symlink(tmp_path / "target.yaml", link)
    ro = tmp_path / "ro.yaml"
    gold.save(ro)
    os.chmod(ro, 0o444)
    for path, why in ((ckpt, "exists and is not a manifest"),
                      (traj, "exists and is not a manifest"),
                      (fifo, "is a FIFO, not a regular file"),
                      (link, "is a symbolic link, not a regular file"),
                      (ro, "is read-only"),
                      (tmp_path, "is a directory")):
        with pytest.raises(ValueError, match=why) as e:
            gold.save(path)
        assert str(path) in str(e.value)
    assert ckpt.read_bytes() == before and traj.read_text() == '{"step":1}\n'
    assert not (tmp_path / "target.yaml").exists()
    # the file a manifest was loaded from is an input
    p = gold.save(tmp_path / "g.json")
    loaded = detcheck.Manifest.load(p)
    with pytest.raises(ValueError, match="also an input"):
        loaded.save(p)
    # a manifest (YAML or JSON) and an empty file are replaced, atomically
    (tmp_path / "empty.yaml").write_text("")
    for target in (tmp_path / "g2.yaml", tmp_path / "empty.yaml"):
        detcheck.Manifest.load(p).save(target)
        gold.save(target)
        assert detcheck.Manifest.load(target).root == gold.root
    assert sorted(f.name for f in tmp_path.iterdir() if ".tmp" in f.name) == []


# containers torch.save pickles through __reduce_ex__;
# module-level so that torch.save can pickle them
Point = collections.namedtuple("Point", "x y label")


class Slotted:
    __slots__ = ("w", "n", "unset")

    def __init__(self, w, n):
        self.w, self.n = w, n


class SlotsAndDict(Slotted):
    def __init__(self, w, n):
        super().__init__(w, n)
        self.extra = torch.full((2,), 7.0)


@dataclasses.dataclass
class Plain:
    w: object
    lr: float = 0.1


@dataclasses.dataclass(slots=True) if hasattr(dataclasses, "KW_ONLY") else dataclasses.dataclass
class WithSlots:
    w: object
    k: int = 3


class Tagged(list):
    pass


class Keyed(dict):
    pass


class Color(enum.IntEnum):
    RED = 1


class Rebuilt:
    """__reduce__ with constructor arguments and a state of its own."""

    def __init__(self, t, extra):
        self.t, self.extra = t, extra

    def __reduce__(self):
        return (Rebuilt, (self.t, 5), {"extra": self.extra, "scale": 2.5})


def test_objects_torch_save_pickles_by_reduce(tmp_path):
    g = torch.Generator().manual_seed(2)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    keyed = Keyed(a=r(2), b=3)
    keyed.note = r(4)  # an attribute of a dict subclass: its state
    obj = {
        "deque": collections.deque([r(3), 4, r(2, 2)]),
        "bounded": collections.deque([r(1)] * 3, maxlen=5),
        "slots": Slotted(r(5), 9),
        "both": SlotsAndDict(r(3), 1.5),
        "point": Point(r(2), 3, "p"),
        "plain": Plain(r(2)),
        "dslots": WithSlots({"inner": r(3)}),
        "set": {1, 2, 3, 4, 5, 6, 7, 8, 9, 10},
        "fset": frozenset({1.5}),
        "tagged": Tagged([r(2), 1, 2]),
        "keyed": keyed,
        "color": Color.RED,
        "rebuilt": Rebuilt(r(3), r(2)),
        "od": collections.OrderedDict(z=r(1), a=collections.defaultdict(int, k=r(2))),
        "fn": torch.relu,
        "dtype": torch.float16,
    }
    m = same_as_cli(obj, tmp_path / "objs.pt")
    names = set(m.tensors)
    for want in ("deque.0", "deque.2", "bounded.2", "slots.w", "both.extra", "both.w", "point.0",
                 "plain.w", "dslots.w.inner", "tagged.0", "keyed.note", "keyed.a", "rebuilt.0", "rebuilt.extra",
                 "od.a.k"):
        assert want in names, (want, sorted(names))
    assert m.values["deque.1"] == "4" and m.values["slots.n"] == "9"
    # a changed tensor inside any of them is a difference
    for path in (("deque", 0), ("slots", "w"), ("point", 0), ("dslots", "w", "inner"), ("rebuilt", "extra")):
        o = obj
        for k in path[:-1]:
            o = o[k] if isinstance(o, dict) else getattr(o, k)
        last = path[-1]
        t = o[last] if isinstance(last, int) or isinstance(o, dict) else getattr(o, last)
        with torch.no_grad():
            t.view(-1).view(torch.int32)[0] ^= 1
        res = detcheck.verify(obj, m)
        assert not res.ok, path
        with torch.no_grad():
            t.view(-1).view(torch.int32)[0] ^= 1
    assert detcheck.verify(obj, m).ok


def test_objects_pickle_refuses_are_named():
    gen = (torch.ones(2) for _ in range(2))
    with pytest.raises(TypeError, match=r"model\.cache .*generator.*cannot be pickled"):
        detcheck.manifest({"model": {"cache": gen}})
    with pytest.raises(TypeError, match=r"views .*dict_values"):
        detcheck.manifest({"views": {"a": torch.ones(1)}.values()})


def test_verify_sets_aside_layout_state(tmp_path):
    """A TP2 Megatron-Core checkpoint against a TP1 golden: the per-rank RNG
    state and the layout sizes are set aside (listed), as by the CLI, and
    are no OK unless accept_layout_state; with require_rank_state they are
    differences."""
    mc = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "mcore")
    for name in ("fsms_tp1dp1", "fsms_tp2dp2"):
        run_cli("hash", "-q", "-o", tmp_path / (name + ".yaml"), os.path.join(mc, name))
    actual = detcheck.Manifest.load(tmp_path / "fsms_tp2dp2.yaml")
    res = detcheck.verify(actual, tmp_path / "fsms_tp1dp1.yaml")
    assert not res.ok and not res.differences, str(res)
    assert res.layouts_differ == "rng_state: grid 1.1 only in the golden", res.layouts_differ
    assert str(res).startswith("NOT COMPARED: 44 entries of layout state"), str(res)
    names = [d.name for d in res.layout_state]
    assert len(names) == 44 and "rng_state/shard_0.1_1.2.0.cuda_rng_state" in names
    r = run_cli("verify", "--json", "--golden", tmp_path / "fsms_tp1dp1.yaml", tmp_path / "fsms_tp2dp2.yaml")
    assert r.returncode == 1 and json.loads(r.stdout)["layout_state"]["not_compared"] == names
    accepted = detcheck.verify(actual, tmp_path / "fsms_tp1dp1.yaml", accept_layout_state=True)
    assert accepted.ok and [d.name for d in accepted.layout_state] == names
    strict = detcheck.verify(actual, tmp_path / "fsms_tp1dp1.yaml", require_rank_state=True)
    assert not strict.ok and len(strict.differences) == 44 and strict.layout_state == []

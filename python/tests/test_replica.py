"""detcheck.ReplicaGuard with the real library: DDP on 3 and 4 gloo ranks,
one bit flipped in one rank's state: named at the step (every=1) or at the
next checked step (every=5); rank 0 named when it is the deviant (majority,
not "everyone but rank 0"); an Adam moment alone named as optimizer state;
two replicas: a mismatch without a culprit; a correct run of 50 steps never
a mismatch; a replica that loaded another state caught by check() before
its first step; on_mismatch "warn" and a callable."""
import json
import os
import socket
import sys

import pytest
import torch

import detcheck
from conftest import fork_ranks

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import replica_worker  # noqa: E402

def ranks(tmp_path, world, **kw):
    """replica_worker.run on world forked gloo ranks; their JSON outputs."""
    return [json.load(open(o)) for o in fork_ranks(tmp_path, world, replica_worker.run, **kw)]


def test_flip_named_at_its_step(tmp_path):
    out = ranks(tmp_path, 3, steps=9, flip_rank=2, flip_step=7)
    for doc in out:  # every rank raises the same verdict
        m = doc["mismatch"]
        assert m["step"] == 7 and m["ranks"] == [2] and m["tensor"] == "module.0.weight", m
        assert m["kind"] == "parameter" and m["groups"] == [[0, 1], [2]], m
        assert "rank 2 (%s cpu)" % socket.gethostname() in m["msg"], m["msg"]
        assert set(m["hosts"]) == {"0", "1", "2"}


def test_every_5_names_the_next_checked_step(tmp_path):
    for doc in ranks(tmp_path, 4, steps=12, every=5, flip_rank=2, flip_step=7):
        m = doc["mismatch"]
        assert m["step"] == 10 and m["ranks"] == [2] and m["tensor"] == "module.0.weight", m


def test_rank_0_deviant_is_named(tmp_path):
    for doc in ranks(tmp_path, 3, steps=5, flip_rank=0, flip_step=3):
        m = doc["mismatch"]
        assert m["step"] == 3 and m["ranks"] == [0], m


def test_adam_moment_alone(tmp_path):
    for doc in ranks(tmp_path, 3, steps=5, flip_rank=1, flip_step=4, what="moment"):
        m = doc["mismatch"]
        assert m["step"] == 4 and m["ranks"] == [1], m
        assert m["tensor"] == "optimizer.state.module.0.weight.exp_avg" and m["kind"] == "optimizer state", m


def test_two_replicas_no_culprit(tmp_path):
    for doc in ranks(tmp_path, 2, steps=4, flip_rank=1, flip_step=2):
        m = doc["mismatch"]
        assert m["step"] == 2 and m["ranks"] == [] and "third replica" in m["msg"], m
        assert m["tensor"] == "module.0.weight"


def test_correct_run_never_mismatches(tmp_path):
    for doc in ranks(tmp_path, 3, steps=50):
        assert doc["mismatch"] is None and doc["returned"] == []


def test_check_after_resume(tmp_path):
    for doc in ranks(tmp_path, 3, flip_rank=1, what="resume"):
        m = doc["mismatch"]
        assert m["step"] is None and m["ranks"] == [1] and m["tensor"] == "module.2.bias", m


def test_warn_and_callable(tmp_path):
    for doc in ranks(tmp_path, 3, steps=6, flip_rank=2, flip_step=4, on_mismatch="warn"):
        assert doc["mismatch"] is None
        assert [r["step"] for r in doc["returned"]] == [4, 5, 6] and doc["returned"][0]["ranks"] == [2]
    for doc in ranks(tmp_path, 3, steps=6, flip_rank=2, flip_step=4, on_mismatch="callable"):
        assert doc["calls"] == [4, 5, 6] and [r["value"] for r in doc["returned"]] == ["handled"] * 3


def test_arguments_and_single_process():
    m = torch.nn.Linear(3, 2)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError):
            detcheck.ReplicaGuard(m, every=bad)
    with pytest.raises(ValueError):
        detcheck.ReplicaGuard(m, on_mismatch="ignore")
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    m(torch.ones(3)).sum().backward()
    opt.step()
    g = detcheck.ReplicaGuard(m, opt)
    assert g.check() is None and g.step(1) is None  # one process: nothing to compare, and said so
    assert g.not_compared[:2] == ["weight", "bias"]
    import logging
    seen = []
    h = logging.Handler()
    h.emit = lambda r: seen.append(r.getMessage())
    logging.getLogger("detcheck").addHandler(h)
    try:
        assert detcheck.ReplicaGuard(torch.nn.ReLU()).check() is None
    finally:
        logging.getLogger("detcheck").removeHandler(h)
    assert any("no replicated tensor" in m for m in seen), seen


def test_majority_verdicts():
    """The vote on synthetic roots (the library's dck_replica_decide): 4 ranks
    2/2 and 5 ranks 2/2/1: no majority, nobody blamed; 3 of 5 outvote 2."""
    from detcheck._replica import _verdict
    entries = [("w", "parameter", None), ("b", "buffer", None)]

    def info(d):
        return (["w", "b"], ["%032x" % x for x in d], "h", "cpu")
    a, b, c = (1, 2), (1, 3), (4, 2)
    A, B, C = b"A" * 16, b"B" * 16, b"C" * 16
    m = _verdict(entries, [A, A, B, B], [info(a), info(a), info(b), info(b)], [0, 1, 2, 3], 9)
    assert m.ranks == [] and m.tensor == "b" and "no majority" in str(m) and m.groups == [[0, 1], [2, 3]]
    m = _verdict(entries, [A, A, B, B, C], [info(a), info(a), info(b), info(b), info(c)], [0, 1, 2, 3, 4], 9)
    assert m.ranks == [] and m.tensor == "w" and m.kind == "parameter"
    m = _verdict(entries, [B, A, A, A, B], [info(b), info(a), info(a), info(a), info(b)], [10, 11, 12, 13, 14], 9)
    assert m.ranks == [10, 14] and m.tensor == "b" and m.kind == "buffer" and m.groups == [[11, 12, 13], [10, 14]]

"""Sharded digests (detcheck.digest_shard, DTensors) equal the whole
tensor's digest on 1, 2 and 4 gloo ranks, for row, column, block, tiny
unaligned, scalar, empty and replicated splits."""
import json
import os
import sys

import pytest
import torch

import detcheck
from conftest import fork_ranks

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import shard_worker  # noqa: E402


def ranks(tmp_path, world, target):
    """Runs target(rank, world, init, out) on world forked gloo ranks, out
    being tmp_path/rN.json."""
    for r, o in enumerate(fork_ranks(tmp_path, world, target)):
        os.replace(o, str(tmp_path / ("r%d.json" % r)))


def test_sharded_equals_whole(tmp_path):
    world = 4
    ranks(tmp_path, world, shard_worker.run)
    whole = {n: str(detcheck.digest(t)) for n, t in shard_worker.tensors().items()}
    seen = set()
    for r in range(world):
        res = json.load(open(tmp_path / ("r%d.json" % r)))
        want = detcheck.manifest({"w": shard_worker.tensors()["f32_rows"], "step": 3}).root
        assert res.pop("manifest_root") == want, r
        for case, d in res.items():
            name = case.split("/")[1] if case.startswith("dtensor/") else case.split("/")[0]
            assert d == whole[name], (r, case)
            seen.add(case)
    for name in whole:
        assert {"%s/1" % name, "%s/2" % name, "%s/4" % name} <= seen
    assert len([c for c in seen if c.startswith("dtensor/")]) == 15


def test_single_process_shards_and_errors():
    t = shard_worker.tensors()["f32_rows"]
    # without torch.distributed: one process holding the whole tensor
    assert detcheck.digest_shard(t, t.shape, (0, 0)) == detcheck.digest(t)
    with pytest.raises(ValueError):
        detcheck.digest_shard(t[:10], t.shape, (0, 0))  # a gap: the rest is missing
    with pytest.raises(ValueError):
        detcheck.digest_shard(t, t.shape, (1, 0))  # outside the tensor


def test_overlap_with_equal_gap_is_refused(tmp_path):
    # two ranks pass the same rows: the byte count matches the whole tensor,
    # but rows 10:20 are held by no rank and rows 0:10 twice
    ranks(tmp_path, 2, shard_worker.run_overlap)
    for r in range(2):
        res = json.load(open(tmp_path / ("r%d.json" % r)))
        assert "error" in res, "rank %d got a digest: %s" % (r, res)
        assert "rank 0 [0:10, 0:32] and rank 1 [0:10, 0:32] overlap" in res["error"], res["error"]


def test_gap_names_the_missing_rows():
    t = shard_worker.tensors()["f32_rows"]
    with pytest.raises(ValueError, match=r"rows 10:37 of dimension 0 are held by no rank"):
        detcheck.digest_shard(t[:10], t.shape, (0, 0))

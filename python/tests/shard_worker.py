"""One rank of test_shard.py (forked by it, or: python shard_worker.py RANK
WORLD INIT_FILE OUT).
Hashes shards of known tensors over groups of 1, 2 and 4 gloo ranks and as
DTensors, and writes {case: digest} to OUT."""
import json
import sys

import numpy as np
import torch
import torch.distributed as dist

import detcheck


def tensors():
    g = torch.Generator().manual_seed(5)
    return {
        "f32_rows": torch.randn(37, 29, generator=g),
        "bf16_cols": torch.randn(8, 64, 5, generator=g).bfloat16(),
        "u8_tiny": torch.randint(0, 256, (1000,), dtype=torch.uint8, generator=g),
        "f32_blocks": torch.randn(6, 256, generator=g),
        "i64_scalar": torch.tensor(-7),
        "empty": torch.zeros(0, 5),
    }


def splits(n, k):
    b = [int(x) for x in np.linspace(0, n, k + 1)]
    return list(zip(b[:-1], b[1:]))


def box(name, t, r, k):
    """(local tensor, offset, contribute) of rank r of k for each case."""
    if name == "i64_scalar":
        return t, (), r == 0
    if name == "bf16_cols":  # split the middle dimension
        lo, hi = splits(t.shape[1], k)[r]
        return t[:, lo:hi], (0, lo, 0), True
    if name == "f32_blocks" and k == 4:  # a 2 x 2 grid of blocks
        (r0, r1), (c0, c1) = splits(t.shape[0], 2)[r // 2], splits(t.shape[1], 2)[r % 2]
        return t[r0:r1, c0:c1], (r0, c0), True
    lo, hi = splits(t.shape[0], k)[r]
    return t[lo:hi], (lo,) + (0,) * (t.dim() - 1), True


def run(rank, world, init, out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init, rank=rank, world_size=world)
    res = {}
    groups = {1: dist.new_group([0]), 2: dist.new_group([0, 1]), 4: None}
    for k, grp in groups.items():
        if rank >= k:
            continue
        for name, t in tensors().items():
            local, off, contrib = box(name, t, rank, k)
            res["%s/%d" % (name, k)] = str(detcheck.digest_shard(local, t.shape, off, group=grp,
                                                                 contribute=contrib))
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    mesh1 = init_device_mesh("cpu", (world,))
    mesh2 = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("dp", "tp"))
    for name in ("f32_rows", "f32_blocks", "bf16_cols"):
        t = tensors()[name]
        for label, mesh, pl in (("s0", mesh1, [Shard(0)]), ("s1", mesh1, [Shard(1)]),
                                ("s0r", mesh2, [Shard(0), Replicate()]),
                                ("s0s1", mesh2, [Shard(0), Shard(1)]), ("rr", mesh2, [Replicate(), Replicate()])):
            res["dtensor/%s/%s" % (name, label)] = str(detcheck.digest(distribute_tensor(t, mesh, pl)))
    # a manifest of DTensors: the whole tensors' digests on every rank
    rows = distribute_tensor(tensors()["f32_rows"], mesh2, [Shard(0), Replicate()])
    res["manifest_root"] = detcheck.manifest({"w": rows, "step": 3}).root
    json.dump(res, open(out, "w"))
    dist.destroy_process_group()


def run_overlap(rank, world, init, out):
    """An overlap a byte count misses: rank 0 and rank 1 both pass rows 0:10 of a 20-row
    tensor of 128-byte rows (one overlap and one gap of the same size, so the
    byte count matches); writes the digest or the error to OUT."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init, rank=rank, world_size=world)
    t = torch.arange(20 * 32, dtype=torch.float32).reshape(20, 32)
    try:
        res = {"digest": str(detcheck.digest_shard(t[0:10], t.shape, (0, 0)))}
    except ValueError as e:
        res = {"error": str(e)}
    json.dump(res, open(out, "w"))
    dist.destroy_process_group()


def main():
    run(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])


if __name__ == "__main__":
    main()

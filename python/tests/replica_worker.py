"""One rank of test_replica.py (forked by it): DDP of a small model (prime
sizes) on gloo, trained a few steps with a detcheck.ReplicaGuard; one bit
of one tensor flipped on one rank at one step (silent data corruption, as
a bad GPU makes it), and what the guard said, written as JSON."""
import json

import torch
import torch.distributed as dist

import detcheck


def flip(t, index=5):
    """One bit of element index of t, in place."""
    t.detach().view(-1).view(torch.int32)[index] ^= 1 << 3


def run(rank, world, init, out, steps=10, every=1, flip_rank=None, flip_step=None, what="param",
        on_mismatch="raise"):
    dist.init_process_group("gloo", init_method="file://" + init, rank=rank, world_size=world)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(37, 53), torch.nn.Tanh(), torch.nn.Linear(53, 11))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-2)
    seen = []
    calls = []
    if on_mismatch == "callable":
        on_mismatch = lambda m: calls.append(m.step) or "handled"  # noqa: E731
    guard = detcheck.ReplicaGuard(ddp, opt, every=every, on_mismatch=on_mismatch)
    g = torch.Generator().manual_seed(100 + rank)
    doc = {"checked": [], "mismatch": None}
    if what == "resume":  # a replica that loaded another checkpoint: caught before the first step
        if rank == flip_rank:
            flip(model[2].bias, 3)
        try:
            guard.check()
        except detcheck.ReplicaMismatch as e:
            doc["mismatch"] = {"step": e.step, "ranks": e.ranks, "tensor": e.tensor, "kind": e.kind, "msg": str(e)}
        json.dump(doc, open(out, "w"))
        dist.destroy_process_group()
        return
    for step in range(1, steps + 1):
        x = torch.randn(5, 37, generator=g)
        ddp(x).square().mean().backward()
        opt.step()
        opt.zero_grad()
        if step == flip_step and rank == flip_rank:
            if what == "param":
                flip(model[0].weight, 7 * 37 + 3)
            else:  # an Adam moment only: the weights stay equal this step
                flip(opt.state[model[0].weight]["exp_avg"], 11)
        try:
            r = guard.step(step)
        except detcheck.ReplicaMismatch as e:
            doc["mismatch"] = {"step": e.step, "ranks": e.ranks, "tensor": e.tensor, "kind": e.kind, "msg": str(e),
                               "hosts": {str(k): v for k, v in e.hosts.items()}, "groups": e.groups}
            break
        if r is not None:
            seen.append({"step": r.step if hasattr(r, "step") else None, "ranks": getattr(r, "ranks", None),
                         "value": r if isinstance(r, str) else None})
    doc["returned"] = seen
    doc["calls"] = calls
    json.dump(doc, open(out, "w"))
    dist.destroy_process_group()

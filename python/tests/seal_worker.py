"""One rank of test_seal.py (forked by it): a tiny FSDP2 model (prime sizes)
trained a few steps on gloo, its model and optimizer state (get_state_dict:
DTensors) saved with torch.distributed.checkpoint and sealed, or loaded on
another number of ranks and checked with detcheck.verify_seal."""
import json
import os

import torch
import torch.distributed as dist

import detcheck

SIZES = (37, 53, 11)  # primes: rows that no rank count divides


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(SIZES[0], SIZES[1]), torch.nn.Tanh(),
                               torch.nn.Linear(SIZES[1], SIZES[2]))


def setup(rank, world, init):
    from torch.distributed.fsdp import fully_shard
    dist.init_process_group("gloo", init_method="file://" + init, rank=rank, world_size=world)
    m = model()
    for layer in (m[0], m[2]):
        fully_shard(layer)
    fully_shard(m)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    return m, opt


def train(m, opt, steps, rank):
    g = torch.Generator().manual_seed(100 + rank)
    for _ in range(steps):
        x = torch.randn(7, SIZES[0], generator=g)
        loss = m(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()


def state_of(m, opt):
    from torch.distributed.checkpoint.state_dict import get_state_dict
    msd, osd = get_state_dict(m, opt)
    # the RNG state: the same seed on every rank, so one copy serves them all
    return {"model": msd, "optim": osd, "rng": torch.get_rng_state(), "extra": {"step": 3, "lr": 1e-2}}


def save(rank, world, init, out, path, steps=3):
    import torch.distributed.checkpoint as dcp
    m, opt = setup(rank, world, init)
    train(m, opt, steps, rank)
    torch.manual_seed(1234)  # the RNG state the run saves (the same on every rank)
    torch.rand(steps)
    state = state_of(m, opt)
    dcp.save(state, checkpoint_id=path)
    res = detcheck.seal(path, state, step=steps)
    json.dump({"root": res.root, "tensors": res.tensors_compared, "rng": res.rng_checked}, open(out, "w"))
    dist.destroy_process_group()


def resume(rank, world, init, out, path, mode="ok"):
    """Loads path on world ranks and writes what verify_seal said. mode:
    ok, no_optim (the optimizer state is not loaded), no_rng (the RNG
    state is loaded but not restored)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict
    m, opt = setup(rank, world, init)
    train(m, opt, 1, rank + 50)  # a different state than the checkpoint's, so that a load shows
    state = state_of(m, opt)
    if mode == "no_optim":
        dcp.load({k: v for k, v in state.items() if k != "optim"}, checkpoint_id=path)
    else:
        dcp.load(state, checkpoint_id=path)
    set_state_dict(m, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    if mode != "no_rng":
        torch.set_rng_state(state["rng"])
    try:
        res = detcheck.verify_seal(path, state)
        doc = {"ok": True, "tensors": res.tensors_compared, "root": res.root, "rng": res.rng_checked}
    except detcheck.SealError as e:
        doc = {"ok": False, "kind": e.kind, "tensor": e.tensor, "files": e.files, "msg": str(e)}
    json.dump(doc, open(out, "w"))
    dist.destroy_process_group()

"""detcheck.ReplicaGuard on real DeepSpeed ZeRO-1 and ZeRO-2 engines: 3 CPU ranks
(accelerator cpu, gloo), run by tests/cli/test_replica_deepspeed.sh with the
fixture venv's python (deepspeed 0.19) and detcheck from python/src.

ZeRO-1 partitions the optimizer state (each rank holds the AdamW moments of
its third of the flat fp32 copy; ZeRO-2 the gradients too) and all-gathers
the updated parameters
after each step: the guard, given the engine's optimizer, compares the
parameters and sets the partitioned state aside. A correct run of 4 steps:
no mismatch. Then rank 2 flips one bit of 2.weight right after step 5:
named at step 5 with rank 2 and 2.weight on every rank. ZeRO-3 partitions
the parameters themselves: the guard is refused (ValueError).

    replica_deepspeed.py OUT.json

writes {STAGE: {RANK: {"clean": [...], "flip": {...}, "partitioned": [...]}}}
(ZeRO-3: {RANK: {"refused": MESSAGE}}) to OUT.json (deepspeed prints to stdout); exit 0 when every rank finished."""
import json
import multiprocessing
import os
import socket
import sys
import warnings

os.environ["DS_ACCELERATOR"] = "cpu"
warnings.filterwarnings("ignore")
import torch  # noqa: E402
import deepspeed  # noqa: E402
# imported once here, not once per forked rank: deepspeed.initialize imports
# them (the optimizer sanity check, torch.optim's compile hooks), seconds each
import deepspeed.runtime.zero.muon.muon_optimizer  # noqa: E402,F401
import torch._dynamo  # noqa: E402,F401

import detcheck  # noqa: E402

WORLD, CLEAN_STEPS, FLIP_RANK, TARGET = 3, 4, 2, "2.weight"


def mismatch(m):
    return None if m is None else {"step": m.step, "ranks": list(m.ranks), "tensor": m.tensor, "kind": m.kind,
                                   "message": str(m)}


def rank_main(rank, port, stage, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(WORLD),
                      LOCAL_RANK=str(rank), LOCAL_SIZE=str(WORLD))
    torch.set_num_threads(1)
    deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    cfg = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "torch_adam": True}},
           "zero_optimization": {"stage": stage}, "steps_per_print": 10 ** 9, "wall_clock_breakdown": False}
    engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    try:
        guard = detcheck.ReplicaGuard(engine.module, optimizer, on_mismatch="warn")
    except ValueError as e:
        with open(out, "w") as f:
            json.dump({"refused": str(e)}, f)
        torch.distributed.destroy_process_group()
        return
    g = torch.Generator().manual_seed(100 + rank)  # each rank its own batches

    def step(n, flip=False):
        engine.backward(engine(torch.randn(2, 8, generator=g)).pow(2).mean())
        engine.step()
        if flip:
            with torch.no_grad():
                dict(engine.module.named_parameters())[TARGET].view(-1).view(torch.int32)[5] ^= 1 << 9
        return mismatch(guard.step(n))

    res = {"clean": [step(n) for n in range(1, CLEAN_STEPS + 1)],
           "flip": step(CLEAN_STEPS + 1, flip=rank == FLIP_RANK),
           "partitioned": [list(v.shape) for st in optimizer.optimizer.state.values() for v in st.values()
                           if v.dim() > 0]}
    with open(out, "w") as f:
        json.dump(res, f)
    torch.distributed.destroy_process_group()


def run(stage, out):
    """Runs the ranks of one stage; returns ({rank: result}, failed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=rank_main, args=(r, port, stage, "%s.%d" % (out, r))) for r in range(WORLD)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    bad, res = 0, {}
    for r, p in enumerate(procs):
        if p.is_alive():
            p.kill()
        if p.exitcode != 0:
            print("ZeRO-%d: rank %d exited %s" % (stage, r, p.exitcode), file=sys.stderr)
            bad = 1
            continue
        with open("%s.%d" % (out, r)) as f:
            res[r] = json.load(f)
    return res, bad


def main():
    out = sys.argv[1]
    res = {stage: run(stage, out) for stage in (1, 2, 3)}
    with open(out, "w") as f:
        json.dump({stage: r for stage, (r, _) in res.items()}, f)
    return int(any(bad for _, bad in res.values()))


if __name__ == "__main__":
    sys.exit(main())

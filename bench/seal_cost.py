"""The cost of sealed checkpoints (detcheck-seal(1), COST): detcheck.seal
after torch.distributed.checkpoint.save of a --mib MiB state, and
detcheck.verify_seal after dcp.load of it, each against the save or load
itself, in the same process (one rank, no process group).

The state is transformer-like and not round: F32 matrices of 4093 x 4099
(primes), a BF16 embedding of 50,257 rows, F32 vectors, an int64 step.
One untimed warm-up round, then --rounds rounds, each: a save into a fresh
directory, its seal (a seal follows its save), a load of it into a second
state and verify_seal, in odd rounds verify_seal first and then the load
again (timed), so that load from elsewhere falls on both. Prints per-phase medians of wall
time and of the process's CPU time (user + sys, every thread), and the two
ratios by wall time (the goal's: seal <= 0.05 x save, verify_seal <= 0.10
x load; on CUDA the goal of the seal is 0.01, stated until measured).
With --check DETCHECK, the warm-up round's checkpoint is also checked
offline by `DETCHECK verify --seal` (the seal made from memory, on the
device, must match what the files hold). Exit 0 goals met, 3 a goal
missed, 1 error (a failed check too).

  python3 bench/seal_cost.py [--mib 1024] [--rounds 3] [--device cpu|cuda] [--dir D] [--check DETCHECK]
(needs torch, and the detcheck package importable: PYTHONPATH=python/src,
DETCHECK_LIB=BUILD/libdetcheck.so.0)"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time


def state_of(mib, device, seed):
    import torch
    g = torch.Generator().manual_seed(seed)
    st, total, i = {}, 0, 0
    emb = torch.randn(50257, 1024 if mib >= 512 else 64, generator=g).bfloat16()
    st["embed.weight"] = emb
    total += emb.numel() * 2
    while total < mib << 20:
        w = torch.randn(4093, 4099 if mib >= 512 else 257, generator=g)
        st["layers.%d.weight" % i] = w
        st["layers.%d.bias" % i] = torch.randn(4093, generator=g)
        total += (w.numel() + 4093) * 4
        i += 1
    st = {k: v.to(device) for k, v in st.items()}
    st["step"] = torch.tensor(1000)
    return st, total


def clock(device):
    import torch
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter(), time.process_time()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--dir", help="where the checkpoints go (default: a temporary directory)")
    ap.add_argument("--check", metavar="DETCHECK", help="verify the first checkpoint's files against its seal")
    a = ap.parse_args(argv)
    import torch
    import torch.distributed.checkpoint as dcp
    import detcheck

    state, nbytes = state_of(a.mib, a.device, 1)
    into, _ = state_of(a.mib, a.device, 2)
    top = tempfile.mkdtemp(prefix="dck-seal-bench.", dir=a.dir)
    times = {k: [] for k in ("save", "seal", "load", "verify")}

    def timed(name, fn, keep):
        w0, c0 = clock(a.device)
        fn()
        w1, c1 = clock(a.device)
        if keep:
            times[name].append((w1 - w0, c1 - c0))

    try:
        for r in range(a.rounds + 1):
            keep = r > 0
            path = os.path.join(top, "step_%d" % r)
            save = lambda: dcp.save(state, checkpoint_id=path)  # noqa: E731
            seal = lambda: detcheck.seal(path, state, step=r)  # noqa: E731
            load = lambda: dcp.load(into, checkpoint_id=path)  # noqa: E731
            verify = lambda: detcheck.verify_seal(path, into)  # noqa: E731
            timed("save", save, keep)
            timed("seal", seal, keep)
            if r % 2:  # odd rounds: the check first, then the load it checks again
                timed("load", load, False)
                timed("verify", verify, keep)
                timed("load", load, keep)
            else:
                timed("load", load, keep)
                timed("verify", verify, keep)
            if r == 0 and a.check:
                import subprocess
                v = subprocess.run([a.check, "verify", "-q", "--seal", path])
                print("check      %s verify --seal of a checkpoint sealed from %s memory: exit %d"
                      % (os.path.basename(a.check), a.device, v.returncode))
                if v.returncode != 0:
                    return 1
            shutil.rmtree(path)
    finally:
        shutil.rmtree(top, ignore_errors=True)
    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in times.items()}
    print("state      %.0f MiB on %s, %d tensors; %d rounds, medians" % (nbytes / 2**20, a.device, len(state), a.rounds))
    for k in ("save", "seal", "load", "verify"):
        label = {"save": "dcp.save", "seal": "detcheck.seal", "load": "dcp.load", "verify": "detcheck.verify_seal"}[k]
        print("%-22s %8.4f s wall %8.4f s CPU" % (label, med[k][0], med[k][1]))
    goal_seal = 0.01 if a.device == "cuda" else 0.05
    rs = med["seal"][0] / med["save"][0]
    rv = med["verify"][0] / med["load"][0]
    print("ratio seal   %.4f (wall; CPU %.4f) goal <= %.2f: %s" % (
        rs, med["seal"][1] / med["save"][1], goal_seal, "met" if rs <= goal_seal else "NOT met"))
    print("ratio verify %.4f (wall; CPU %.4f) goal <= 0.10: %s" % (
        rv, med["verify"][1] / med["load"][1], "met" if rv <= 0.10 else "NOT met"))
    return 0 if rs <= goal_seal and rv <= 0.10 else 3


if __name__ == "__main__":
    sys.exit(main())

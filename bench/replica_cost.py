"""The cost of detcheck.ReplicaGuard (python/README.md, "Replica guard"): the replicas of a
data-parallel run compared after each optimizer step, against the step itself.

--ranks ranks (forked, one process each; gloo on the CPU, NCCL on CUDA with
a GPU per rank) train a DistributedDataParallel MLP of --layers
Linear(width, width) + GELU layers (F32, AdamW: the model of
bench/recorder_cost.py), each rank its own batch of --batch rows. On CUDA
with fewer GPUs than ranks (NCCL takes one rank a GPU) the ranks share the
GPUs over gloo and without DDP: each takes the same step on the same batch
(deterministic cuBLAS), which keeps the replicas equal as DDP would; both
their steps and their digests then share a GPU alike. Variants, each in its
own steps:

  plain      the training step alone
  every=1    then guard.step(s) of ReplicaGuard(model, opt, every=1): every
             step checked (parameters, buffers and AdamW's state digested,
             one root gathered)
  every=10   then guard.step(s) of ReplicaGuard(model, opt, every=10); its
             visits are shown the steps 10k, 10k+1, ... so that each holds
             one checked step and the rest unchecked

alternated as bench/lib.sh's bench_pair alternates peers: one untimed
warm-up step of each variant, then --rounds rounds that visit every variant
for --visit-steps steps each, in order in even rounds and in reverse in odd
ones, so that load from elsewhere falls on all alike. Each rank times the
training step (forward, backward with DDP's all-reduce, AdamW) and, after an
untimed barrier (so that waiting for the slower rank is not counted as the
guard's), the guard.step call on its own. Figures are medians on each rank;
the goals take the larger rank's ratio:

  every=1    guard per checked step / training step          <= 0.05 (CPU)
  every=10   (checked + 9 unchecked calls) / 10 / step        <= 0.01 (CPU)
  gathered   bytes each rank hands to collectives in a check
             whose replicas are equal (counted by wrapping
             torch's ProcessGroup methods in this process)    <= 16

  --device cpu    the process's CPU time (user + sys, every thread) is the
                  one quoted, wall time beside it (the machine may be shared)
  --device cuda   wall time between torch.cuda.synchronize() calls is the
                  one quoted; goal every=1 < 0.01 (digests at HBM rate), the
                  others printed as figures.

Where the guard's time goes is printed beside it: the time inside its
collectives (wall and CPU), and the floor of digesting the same tensors with
detcheck.digest one by one. Used by bench/bench_replica.sh (CPU, ~100M
parameters, 2 ranks) and ci/gpu-check.sh (CUDA, ~1B: --width 8192 --layers
15). Needs torch, and the detcheck package importable (PYTHONPATH=python/src,
DETCHECK_LIB=BUILD/libdetcheck.so.0). Exit 0 goals met, 3 a goal missed, 1
error."""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

# ProcessGroup methods and the positional argument that holds this rank's
# own tensors (what it hands to the collective); the keyword name beside it.
# The object collectives (all_gather_object, ...) reach these too.
COLLECTIVES = {
    "allgather": (1, "input_tensors"), "all_gather_single": (1, "input_tensor"),
    "_allgather_base": (1, "input"), "allgather_coalesced": (1, "input_list"),
    "allgather_into_tensor_coalesced": (1, "inputs"), "all_gather_single_coalesced": (1, "inputs"),
    "allreduce": (0, "tensors"), "allreduce_coalesced": (0, "tensors"), "broadcast": (0, "tensors"),
    "reduce": (0, "tensors"), "gather": (1, "input_tensors"), "gather_single": (1, "input_tensor"),
    "gather_into_tensor": (1, "input"), "scatter": (0, "output_tensors"), "reduce_scatter": (1, "input_tensors"),
    "reduce_scatter_single": (1, "input_tensor"), "_reduce_scatter_base": (1, "input_tensor"),
    "reduce_scatter_single_coalesced": (1, "inputs"), "reduce_scatter_tensor_coalesced": (1, "inputs"),
    "all_to_all_single": (1, "input_tensor"), "alltoall_base": (1, "input"), "alltoall": (1, "input_tensors"),
    "send": (0, "tensors"), "recv": (0, "tensors"), "recv_anysource": (0, "tensors"),
    "barrier": (None, None), "monitored_barrier": (None, None),
}

# every -> (the ratio's goal, whether it must stay below it rather than at most reach it)
GOALS = {"cpu": {1: (0.05, False), 10: (0.01, False)}, "cuda": {1: (0.01, True)}}
GOAL_BYTES = 16
EVERY = (1, 10)


def nbytes(x):
    if isinstance(x, (list, tuple)):
        return sum(nbytes(v) for v in x)
    return x.numel() * x.element_size() if hasattr(x, "element_size") else 0


class Tally:
    """The collectives made while .on: calls, bytes and time inside them."""

    def __init__(self):
        self.on = False
        self.depth = 0
        self.reset()

    def reset(self):
        self.calls, self.bytes, self.wall, self.cpu, self.names = 0, 0, 0.0, 0.0, {}

    def install(self, pg_class):
        for name, (pos, kw) in COLLECTIVES.items():
            orig = getattr(pg_class, name, None)
            if orig is not None:
                setattr(pg_class, name, self._wrap(name, orig, pos, kw))

    def _wrap(self, name, orig, pos, kw):
        tally = self

        def counted(pg, *args, **kwargs):
            if not tally.on or tally.depth:
                return orig(pg, *args, **kwargs)
            n = 0
            if pos is not None:
                n = nbytes(args[pos] if len(args) > pos else kwargs.get(kw, ()))
            tally.depth += 1
            w0, c0 = time.perf_counter(), time.process_time()
            try:
                work = orig(pg, *args, **kwargs)
                # the guard waits for its collectives: so does this count
                if work is not None and hasattr(work, "wait"):
                    work.wait()
                return work
            finally:
                tally.depth -= 1
                tally.wall += time.perf_counter() - w0
                tally.cpu += time.process_time() - c0
                tally.calls += 1
                tally.bytes += n
                tally.names[name] = tally.names.get(name, 0) + n
        return counted


def gpu_count(python):
    """CUDA devices, asked of a child process (the parent forks the ranks
    and must not start CUDA itself)."""
    r = subprocess.run([python, "-c", "import torch; print(torch.cuda.device_count())"],
                       capture_output=True, text=True)
    try:
        return int(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return 0


def rank_main(rank, world, a, init, results):
    try:
        results.put((rank, measure(rank, world, a, init)))
    except BaseException:
        results.put((rank, {"error": traceback.format_exc()}))
        raise


def measure(rank, world, a, init):
    shared = a.device == "cuda" and a.gpus < world  # ranks share GPUs: no NCCL, no DDP
    if shared:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic GEMMs, before CUDA starts
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    import detcheck

    cuda = a.device == "cuda"
    if cuda:
        dev = torch.device("cuda", rank % a.gpus)
        torch.cuda.set_device(dev)
    else:
        dev = torch.device("cpu")
        torch.set_num_threads(a.threads)
    nccl = cuda and not shared
    dist.init_process_group("nccl" if nccl else "gloo", init_method=init, rank=rank, world_size=world,
                            device_id=dev if nccl else None)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    torch.manual_seed(0)
    layers = []
    for _ in range(a.layers):
        layers += [torch.nn.Linear(a.width, a.width, device=dev), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers)
    if not shared:
        model = DDP(model, device_ids=[dev.index] if cuda else None)
    nparam = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator(device=dev).manual_seed(1 if shared else 1 + rank)  # DDP: each rank its own batch
    x = torch.randn(a.batch, a.width, device=dev, generator=g)
    y = torch.randn(a.batch, a.width, device=dev, generator=g)
    guards = {e: detcheck.ReplicaGuard(model, opt, every=e) for e in EVERY}
    tally = Tally()
    tally.install(torch._C._distributed_c10d.ProcessGroup)

    order = ["plain"] + list(EVERY)
    steps = {v: [] for v in order}  # (cpu, wall) of the training step
    calls = {v: [] for v in EVERY}  # (cpu, wall, collectives, bytes, coll wall, coll cpu, step shown)
    shown = {e: 0 for e in EVERY}  # the steps each guard has been shown
    visits = {e: 0 for e in EVERY}

    def visit(v, nsteps, timed):
        if v != "plain":
            shown[v] = visits[v] * v  # a visit starts at a multiple of every
            visits[v] += 1
        for _ in range(nsteps):
            sync()
            c0, w0 = time.process_time(), time.perf_counter()
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sync()
            c1, w1 = time.process_time(), time.perf_counter()
            dist.barrier()  # untimed: the slower rank's lag is not the guard's
            if timed:
                steps[v].append((c1 - c0, w1 - w0))
            if v == "plain":
                continue
            s = shown[v]
            shown[v] += 1
            tally.reset()
            tally.on = True
            sync()
            c2, w2 = time.process_time(), time.perf_counter()
            guards[v].step(s)
            sync()
            c3, w3 = time.process_time(), time.perf_counter()
            tally.on = False
            if timed:
                calls[v].append((c3 - c2, w3 - w2, tally.calls, tally.bytes, tally.wall, tally.cpu, s,
                                 dict(tally.names)))

    for v in order:  # warm-up: one untimed step of each
        visit(v, 1, False)
    for r in range(a.rounds):
        for v in (order if r % 2 == 0 else order[::-1]):
            visit(v, a.visit_steps, True)

    # the floor: the same tensors digested one by one with detcheck.digest
    state = [p for p in model.parameters()] + [b for b in model.buffers()]
    state += [t for st in opt.state.values() for t in st.values() if torch.is_tensor(t) and t.dim()]
    floor = []
    for _ in range(2):
        sync()
        c0, w0 = time.process_time(), time.perf_counter()
        for t in state:
            detcheck.digest(t.detach())
        sync()
        floor.append((time.process_time() - c0, time.perf_counter() - w0))
    dist.barrier()
    dist.destroy_process_group()
    where = torch.cuda.get_device_name(dev) if cuda else "%d torch thread%s a rank" % (
        a.threads, "" if a.threads == 1 else "s")
    if shared:
        where += ", %d ranks a GPU: gloo, no DDP, the same step on every rank" % -(-world // a.gpus)
    return {"steps": steps, "calls": calls, "nparam": nparam, "where": where,
            "state_bytes": sum(nbytes(t) for t in state), "ntensors": len(state), "floor": min(floor)}


def med(xs, i):
    return statistics.median(x[i] for x in xs) if xs else float("nan")


def report(a, world, res):
    """Prints the figures; returns True when every goal is met."""
    cuda = a.device == "cuda"
    P, S = (1, 0) if cuda else (0, 1)  # index of the quoted clock, and of the other
    pn, sn = ("wall", "CPU") if cuda else ("CPU", "wall")
    goals = GOALS[a.device]
    r0 = res[0]
    ddp = "gloo" if not cuda else ("NCCL" if a.gpus >= world else None)
    print("model      %.1fM parameters (F32, %d x Linear(%d, %d) + GELU), AdamW, %s, %d rank%s (forked), "
          "batch %d a rank, %s, %s" % (r0["nparam"] / 1e6, a.layers, a.width, a.width,
                                     "DDP over %s" % ddp if ddp else "no DDP", world, "" if world == 1 else "s",
                                     a.batch, a.device, r0["where"]))
    print("state      %d tensors, %.0f MB a rank to digest (parameters, buffers, AdamW's moments)"
          % (r0["ntensors"], r0["state_bytes"] / 1e6))
    if cuda:
        print("clock      wall time between torch.cuda.synchronize() calls is the one quoted; CPU time beside it")
    else:
        print("clock      CPU time (user+sys of each rank's process, every thread) is the one quoted: the machine "
              "may be shared; wall time beside it")
    print("rounds     %d alternating rounds (plain every=1 every=10, then reversed), %d step%s a visit, after one "
          "warm-up step of each; an untimed barrier before each guard.step; medians on each rank"
          % (a.rounds, a.visit_steps, "" if a.visit_steps == 1 else "s"))
    worst = {e: (-1.0, 0, 0.0, 0.0, 0.0) for e in EVERY}  # (ratio, rank, other clock's ratio, guard, step)
    gathered, gathered_names = [], {}
    for rank in sorted(res):
        r = res[rank]
        allsteps = [t for v in r["steps"].values() for t in v]
        step = (med(allsteps, 0), med(allsteps, 1))
        print("rank %d     step %.4f s CPU, %.4f s wall (median of %d; plain %.4f, every=1 %.4f, every=10 %.4f s %s)"
              % (rank, step[0], step[1], len(allsteps), med(r["steps"]["plain"], P), med(r["steps"][1], P),
                 med(r["steps"][10], P), pn))
        checked1 = r["calls"][1]
        silent = [c[6] for c in checked1 if not c[2]]
        if silent:  # a check exchanges a root at least
            raise RuntimeError("rank %d: guard.step at every=1 made no collective at the steps %s: nothing was "
                               "compared, or its collectives bypass torch's ProcessGroup (not counted)" % (rank, silent))
        c1 = (med(checked1, 0), med(checked1, 1))
        coll = (med(checked1, 5), med(checked1, 4))
        print("rank %d     every=1  guard.step %.4f s CPU, %.4f s wall a checked step (median of %d), of which "
              "%.4f s CPU, %.4f s wall in its collectives; the floor, detcheck.digest of the same tensors one by "
              "one: %.4f s CPU, %.4f s wall"
              % (rank, c1[0], c1[1], len(checked1), coll[0], coll[1], r["floor"][0], r["floor"][1]))
        for c in checked1:
            gathered.append(c[3])
            for k, n in c[7].items():
                gathered_names[k] = max(gathered_names.get(k, 0), n)
        calls10 = r["calls"][10]
        chk = [c for c in calls10 if c[2]]
        unchk = [c for c in calls10 if not c[2]]
        if not chk or not unchk:
            raise RuntimeError("rank %d: every=10 made %d checked and %d unchecked calls in the steps %s (want both)"
                               % (rank, len(chk), len(unchk), [c[6] for c in calls10]))
        ck, uk = (med(chk, 0), med(chk, 1)), (med(unchk, 0), med(unchk, 1))
        am = tuple((ck[i] + 9 * uk[i]) / 10 for i in (0, 1))
        print("rank %d     every=10 guard.step %.4f s CPU, %.4f s wall a checked step (median of %d), %.6f s CPU, "
              "%.6f s wall unchecked (median of %d): %.4f s CPU, %.4f s wall a step"
              % (rank, ck[0], ck[1], len(chk), uk[0], uk[1], len(unchk), am[0], am[1]))
        for e, cost in ((1, c1), (10, am)):
            ratio = cost[P] / step[P]
            if ratio > worst[e][0]:
                worst[e] = (ratio, rank, cost[S] / step[S], cost[P], step[P])
    met = True
    for e in EVERY:
        ratio, rank, other, guard, step = worst[e]
        what = "a checked step" if e == 1 else "a step (amortized over 10)"
        print("ratio %-4d %.4f (%s), %.4f (%s): guard %.4f s %s %s / step %.4f s %s, rank %d (the larger)"
              % (e, ratio, pn, other, sn, guard, pn, what, step, pn, rank))
    names = ", ".join("%s %d B" % kv for kv in sorted(gathered_names.items()))
    print("gathered   %d bytes a rank per check when equal, at most (%s)" % (max(gathered), names))
    for e in EVERY:
        ratio = worst[e][0]
        if e not in goals:
            print("goal %-5s guard / step (%s time) %.4f: no goal on %s (a figure)" % (e, pn, ratio, a.device))
            continue
        goal, below = goals[e]
        ok = ratio < goal if below else ratio <= goal
        met &= ok
        print("goal %-5s guard / step (%s time) %.4f %s %g: %s"
              % (e, pn, ratio, "<" if below else "<=", goal, "met" if ok else "NOT met"))
    ok = max(gathered) <= GOAL_BYTES
    met &= ok
    print("goal bytes gathered per rank per check %d <= %d: %s" % (max(gathered), GOAL_BYTES, "met" if ok else "NOT met"))
    return met


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--ranks", type=int, default=2, help="replicas (one process each)")
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--batch", type=int, default=256, help="rows per step and rank (tokens)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    ap.add_argument("--visit-steps", type=int, default=2, help="timed steps per visit (>= 2: every=10 needs both kinds)")
    ap.add_argument("--threads", type=int, help="torch threads a rank on the CPU (default: the CPUs / ranks)")
    a = ap.parse_args(argv)
    if a.visit_steps < 2 or a.rounds < 1 or a.ranks < 2:
        ap.error("--visit-steps and --ranks must be >= 2 (one replica is not compared), --rounds >= 1")
    world = a.ranks
    a.gpus = 0
    if a.device == "cuda":
        a.gpus = gpu_count(sys.executable)
        if a.gpus < 1:
            print("replica_cost: no CUDA device", file=sys.stderr)
            return 1
    if a.threads is None:
        a.threads = max(1, len(os.sched_getaffinity(0)) // world)

    import multiprocessing as mp
    ctx = mp.get_context("fork")
    results = ctx.Queue()
    tmp = tempfile.TemporaryDirectory(prefix="dck-replica-cost.")
    init = "file://" + os.path.join(tmp.name, "rendezvous")
    procs = [ctx.Process(target=rank_main, args=(r, world, a, init, results)) for r in range(world)]
    for p in procs:
        p.start()
    res, failed = {}, None
    try:
        while len(res) < world:
            try:
                rank, out = results.get(timeout=1.0)
            except Exception:  # queue.Empty: a rank that died without a word stops the others
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead and failed is None:
                    failed = "rank %d exited %s" % (procs.index(dead[0]), dead[0].exitcode)
                    break
                continue
            if "error" in out:
                failed = "rank %d: %s" % (rank, out["error"].rstrip())
                break
            res[rank] = out
    finally:
        for p in procs:
            if failed is not None and p.is_alive():
                p.terminate()
            p.join()
        tmp.cleanup()
    if failed is not None:
        print("replica_cost: %s" % failed, file=sys.stderr)
        return 1
    try:
        return 0 if report(a, world, res) else 3
    except RuntimeError as e:
        print("replica_cost: %s" % e, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

"""The cost of detcheck.Recorder (detcheck-gpu(7), LIBRARY): per-tensor digests of every
parameter and gradient, taken by Recorder.step after each training step
(forward, backward, AdamW) of an MLP of --layers Linear(width, width) + GELU
layers (F32), against the step itself, in the same process. Step 0 is a
warm-up and not counted; the figures are medians over --steps steps.

  --device cpu    times are the process's CPU time (user + sys, every
                  thread): the machine may be shared; the ratio's goal 0.10
  --device cuda   wall times between torch.cuda.synchronize() calls; the
                  ratio's goal 0.02 (the digests run on the GPU, in place)

With --tracing, the cost of the layer and op traces (detcheck-bisect(1), TRACE FILES) instead: the
training step measured as variants, each in its own steps,

  plain      no Recorder
  none       Recorder(trace="none"), .step() after every step (the digests
             of every parameter and gradient, as above)
  modules    Recorder(model=..., trace="modules"): every step traced
  ops        Recorder(model=..., trace="ops"): every step traced

alternated as bench/lib.sh's bench_pair alternates peers: one untimed
warm-up step of each variant, then --rounds rounds that visit every variant
(its Recorder made before and closed after the visit, untimed) for
--visit-steps timed steps each, in order in even rounds and in reverse in
odd ones, so that load from elsewhere falls on all alike. A step's time is
the training step plus the Recorder's .step() (where the trace is written).
The cost of a trace is (T_trace - T_none) / T_plain: what the trace adds to
a recorded step, over a step without detcheck (the Recorder's own digests
are the ratio above, with their own goal); (T_trace - T_plain) / T_plain,
trace and digests together, is printed beside it. Goals: modules < 0.15
(CPU), < 0.05 (CUDA); ops < 0.50 (CPU), none on CUDA unless --goal-ops.
--variants chooses a subset (plain is always measured).

Used by bench/bench_recorder.sh (CPU, ~100M parameters), bench/bench_trace.sh
(--tracing, CPU, ~100M) and ci/gpu-check.sh (CUDA, ~1B: --width 8192
--layers 15; --tracing --variants none,modules). Needs torch, and the
detcheck package importable (PYTHONPATH=python/src,
DETCHECK_LIB=BUILD/libdetcheck.so.0). Prints model/step/recorder/ratio/goal
lines (--tracing: model/clock/rounds, one line per variant, trace and goal
lines); exit 0 goals met, 3 a goal missed, 1 error."""
import argparse
import statistics
import sys
import tempfile
import time


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=256, help="rows per step (tokens)")
    ap.add_argument("--goal", type=float, help="ratio goal (default 0.10 cpu, 0.02 cuda)")
    ap.add_argument("--out", help="recording folder (default: a temporary one)")
    ap.add_argument("--tracing", action="store_true", help="measure the cost of trace='modules' and 'ops'")
    ap.add_argument("--variants", default="none,modules,ops",
                    help="--tracing: the Recorder variants besides plain (none,modules,ops)")
    ap.add_argument("--rounds", type=int, default=3, help="--tracing: alternating rounds")
    ap.add_argument("--visit-steps", type=int, default=1, help="--tracing: timed steps per visit")
    ap.add_argument("--goal-modules", type=float, help="--tracing: goal of module tracing (0.15 cpu, 0.05 cuda)")
    ap.add_argument("--goal-ops", type=float, help="--tracing: goal of op tracing (0.50 cpu, none on cuda)")
    a = ap.parse_args(argv)
    if a.tracing:
        return tracing(a)
    goal = a.goal if a.goal is not None else (0.02 if a.device == "cuda" else 0.10)

    import torch
    import detcheck
    dev = torch.device(a.device)
    if a.device == "cuda" and not torch.cuda.is_available():
        print("recorder_cost: no CUDA device", file=sys.stderr)
        return 1
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    torch.manual_seed(0)
    layers = []
    for _ in range(a.layers):
        layers += [torch.nn.Linear(a.width, a.width, device=dev), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers)
    nparam = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(a.batch, a.width, device=dev)
    y = torch.randn(a.batch, a.width, device=dev)
    tmp = None
    if a.out is None:
        tmp = tempfile.TemporaryDirectory(prefix="detcheck-recorder-cost.")
    rec = detcheck.Recorder(a.out or tmp.name)
    step_cpu, rec_cpu, step_wall, rec_wall = [], [], [], []
    for s in range(a.steps + 1):  # step 0: warm-up, not counted
        sync()
        c0, w0 = time.process_time(), time.perf_counter()
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sync()
        c1, w1 = time.process_time(), time.perf_counter()
        rec.step(s, loss=loss, model=model)  # every parameter and gradient
        sync()
        c2, w2 = time.process_time(), time.perf_counter()
        if s:
            step_cpu.append(c1 - c0)
            rec_cpu.append(c2 - c1)
            step_wall.append(w1 - w0)
            rec_wall.append(w2 - w1)
    rec.close()
    if tmp:
        tmp.cleanup()
    m = statistics.median
    where = torch.cuda.get_device_name() if a.device == "cuda" else "%d torch threads" % torch.get_num_threads()
    print("model      %.1fM parameters (F32, %d x Linear(%d, %d)), batch %d, %d steps, %s, %s"
          % (nparam / 1e6, a.layers, a.width, a.width, a.batch, a.steps, a.device, where))
    print("step       %.4f s CPU, %.4f s wall (median)" % (m(step_cpu), m(step_wall)))
    print("recorder   %.4f s CPU, %.4f s wall (median), %.0f MB digested per step"
          % (m(rec_cpu), m(rec_wall), 2 * nparam * 4 / 1e6))
    r_cpu, r_wall = m(rec_cpu) / m(step_cpu), m(rec_wall) / m(step_wall)
    if a.device == "cuda":
        print("ratio      %.4f (wall, synchronized), %.4f (CPU)" % (r_wall, r_cpu))
        ratio, metric = r_wall, "wall"
    else:
        print("ratio      %.4f (CPU), %.4f (wall)" % (r_cpu, r_wall))
        ratio, metric = r_cpu, "CPU"
    met = ratio <= goal
    print("goal       recorder / step (%s time) %.4f <= %g: %s" % (metric, ratio, goal, "met" if met else "NOT met"))
    return 0 if met else 3


def _setup(a):
    """The model, optimizer and batch of the benchmark (seeded)."""
    import torch
    dev = torch.device(a.device)
    torch.manual_seed(0)
    layers = []
    for _ in range(a.layers):
        layers += [torch.nn.Linear(a.width, a.width, device=dev), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(a.batch, a.width, device=dev)
    y = torch.randn(a.batch, a.width, device=dev)
    return model, opt, x, y


def tracing(a):
    import os
    import torch
    import detcheck
    if a.device == "cuda" and not torch.cuda.is_available():
        print("recorder_cost: no CUDA device", file=sys.stderr)
        return 1
    variants = [v for v in a.variants.replace(",", " ").split() if v != "plain"]
    for v in variants:
        if v not in ("none", "modules", "ops"):
            print("recorder_cost: --variants: %r is not one of none, modules, ops" % v, file=sys.stderr)
            return 1
    if any(v in ("modules", "ops") for v in variants) and "none" not in variants:
        variants.insert(0, "none")  # a trace's cost is taken over it
    order = ["plain"] + variants
    cuda = a.device == "cuda"
    goals = {"modules": a.goal_modules if a.goal_modules is not None else (0.05 if cuda else 0.15),
             "ops": a.goal_ops if a.goal_ops is not None else (None if cuda else 0.50)}
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    model, opt, x, y = _setup(a)
    nparam = sum(p.numel() for p in model.parameters())
    tmp = None
    if a.out is None:
        tmp = tempfile.TemporaryDirectory(prefix="detcheck-trace-cost.")
    root = a.out or tmp.name
    cpu_t = {v: [] for v in order}
    wall_t = {v: [] for v in order}
    events = {}

    def visit(v, nsteps, timed):
        rec = None
        if v != "plain":
            rec = detcheck.Recorder(os.path.join(root, v), model=model, optimizer=opt, trace=v)
        try:
            for s in range(nsteps):
                sync()
                c0, w0 = time.process_time(), time.perf_counter()
                loss = torch.nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                if rec is not None:
                    rec.step(s, loss=loss)
                sync()
                c1, w1 = time.process_time(), time.perf_counter()
                if timed:
                    cpu_t[v].append(c1 - c0)
                    wall_t[v].append(w1 - w0)
        finally:
            if rec is not None:
                rec.close()
        if v in ("modules", "ops") and v not in events:
            t = detcheck.read_trace(os.path.join(root, v))
            events[v] = len(t[min(t)].events) if t else 0

    for v in order:  # warm-up: one untimed step of each
        visit(v, 1, False)
    for r in range(a.rounds):
        for v in (order if r % 2 == 0 else order[::-1]):
            visit(v, a.visit_steps, True)
    if tmp:
        tmp.cleanup()

    m = statistics.median
    c = {v: m(cpu_t[v]) for v in order}
    w = {v: m(wall_t[v]) for v in order}
    where = torch.cuda.get_device_name() if cuda else "%d torch threads" % torch.get_num_threads()
    prim = "wall" if cuda else "CPU"
    P, S = (w, c) if cuda else (c, w)
    print("model      %.1fM parameters (F32, %d x Linear(%d, %d) + GELU), batch %d, AdamW, %s, %s"
          % (nparam / 1e6, a.layers, a.width, a.width, a.batch, a.device, where))
    if cuda:
        print("clock      wall time between torch.cuda.synchronize() calls is the one quoted (the GPU's work); "
              "CPU time (user+sys of the process) beside it")
    else:
        print("clock      CPU time (user+sys of the process, every thread) is the one quoted: the machine may be "
              "shared; wall time beside it")
    print("rounds     %d alternating rounds (%s, then reversed), %d timed step%s a visit, after one warm-up step of "
          "each; medians of %d steps" % (a.rounds, " ".join(order), a.visit_steps, "" if a.visit_steps == 1 else "s",
                                        a.rounds * a.visit_steps))
    desc = {"plain": "no Recorder", "none": 'Recorder(trace="none"): .step() digests params + grads',
            "modules": 'Recorder(trace="modules"): every step traced, %s events a step',
            "ops": 'Recorder(trace="ops"): every step traced, %s events a step'}
    for v in order:
        d = desc[v] % events.get(v, "?") if "%s" in desc[v] else desc[v]
        print("%-10s %.4f s %s, %.4f s %s per step (median)  %s"
              % (v, P[v], prim, S[v], "CPU" if cuda else "wall", d))
    missed = False
    for v in variants:
        if v == "none":
            print("recorder   (none - plain) / plain = %.4f (%s), %.4f (%s): the Recorder's digests alone"
                  % ((P["none"] - P["plain"]) / P["plain"], prim, (S["none"] - S["plain"]) / S["plain"],
                     "CPU" if cuda else "wall"))
            continue
        r = (P[v] - P["none"]) / P["plain"]
        r2 = (S[v] - S["none"]) / S["plain"]
        tot = (P[v] - P["plain"]) / P["plain"]
        print("trace %-7s (%s - none) / plain = %.4f (%s), %.4f (%s); with the digests, (%s - plain) / plain = %.4f (%s)"
              % (v, v, r, prim, r2, "CPU" if cuda else "wall", v, tot, prim))
    for v in variants:
        if v == "none":
            continue
        r = (P[v] - P["none"]) / P["plain"]
        what = "module" if v == "modules" else "op"
        if goals[v] is None:
            print("goal %-8s %s tracing / plain step (%s time) %.4f: no goal on %s (a figure)" % (v, what, prim, r, a.device))
            continue
        met = r < goals[v]
        missed |= not met
        print("goal %-8s %s tracing / plain step (%s time) %.4f < %g: %s"
              % (v, what, prim, r, goals[v], "met" if met else "NOT met"))
    return 3 if missed else 0


if __name__ == "__main__":
    sys.exit(main())

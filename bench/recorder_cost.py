"""The cost of detcheck.Recorder (issue 14): per-tensor digests of every
parameter and gradient, taken by Recorder.step after each training step
(forward, backward, AdamW) of an MLP of --layers Linear(width, width) + GELU
layers (F32), against the step itself, in the same process. Step 0 is a
warm-up and not counted; the figures are medians over --steps steps.

  --device cpu    times are the process's CPU time (user + sys, every
                  thread): the machine may be shared; the ratio's goal 0.10
  --device cuda   wall times between torch.cuda.synchronize() calls; the
                  ratio's goal 0.02 (the digests run on the GPU, in place)

Used by bench/bench_recorder.sh (CPU, ~100M parameters) and ci/gpu-check.sh
(CUDA, ~1B: --width 8192 --layers 15). Needs torch, and the detcheck package
importable (PYTHONPATH=python/src, DETCHECK_LIB=BUILD/libdetcheck.so.0).
Prints model/step/recorder/ratio/goal lines; exit 0 goal met, 3 goal
missed, 1 error."""
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
    a = ap.parse_args(argv)
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


if __name__ == "__main__":
    sys.exit(main())

#!/bin/sh
# The Python Recorder's cost (issue 14): per-tensor digests of every
# parameter and gradient of a ~100M-parameter model (six 4096x4096 linear
# layers with biases: 100.7M parameters, F32) taken by detcheck.Recorder.step
# after each CPU training step (forward, backward, AdamW), against the step
# itself, in the same process: the ratio of the median CPU times (user+sys
# of the process, every thread) per step. Goal: <= 0.10. The package is run
# from python/src with this build's library (no install).
#   BENCH_RECORDER_STEPS=5  BENCH_RECORDER_BATCH=256  (QUICK: 3 steps, a 4M model)
. "$(dirname "$0")/lib.sh"
bench_init recorder
STEPS=${BENCH_RECORDER_STEPS:-$(bench_size 5 3)}
BATCH=${BENCH_RECORDER_BATCH:-256}
WIDTH=$(bench_size 4096 1024)
t="Recorder.step (params + grads) vs a CPU training step, ~100M params"
[ "$QUICK" = 1 ] && t="Recorder.step (params + grads) vs a CPU training step, QUICK 4M params"
PY=${DCK_TORCH_PYTHON:-}
[ -n "$PY" ] || PY=$(sh "$top/ci/venv.sh" torch 2> "$work/venv.err") || PY=
if [ -z "$PY" ] || ! "$PY" -c "import torch" 2> /dev/null; then
    bench_skip recorder "$t" "no python3 with torch (DCK_TORCH_PYTHON; ci/venv.sh torch)"
    bench_finish
fi
bench_header recorder "$t"
out=$(DETCHECK_LIB="$top/$BUILD/libdetcheck.so.0" PYTHONPATH="$top/python/src" \
    timeout "$BENCH_TIMEOUT" "$PY" - "$STEPS" "$BATCH" "$WIDTH" "$work/rec" 2> "$work/err" <<'PYEOF'
import statistics, sys, time
import torch
import detcheck
steps, batch, width, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
torch.manual_seed(0)
layers = []
for _ in range(6):
    layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
model = torch.nn.Sequential(*layers)
nparam = sum(p.numel() for p in model.parameters())
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x, y = torch.randn(batch, width), torch.randn(batch, width)
rec = detcheck.Recorder(out)
step_cpu, rec_cpu, step_wall, rec_wall = [], [], [], []
for s in range(steps + 1):  # step 0: warm-up, not counted
    c0, w0 = time.process_time(), time.perf_counter()
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    c1, w1 = time.process_time(), time.perf_counter()
    rec.step(s, loss=loss, model=model)  # every parameter and gradient
    c2, w2 = time.process_time(), time.perf_counter()
    if s:
        step_cpu.append(c1 - c0); rec_cpu.append(c2 - c1); step_wall.append(w1 - w0); rec_wall.append(w2 - w1)
rec.close()
m = statistics.median
print("model      %.1fM parameters (F32), batch %d, %d steps, %d torch threads" % (nparam / 1e6, batch, steps, torch.get_num_threads()))
print("step       %.3f s CPU, %.3f s wall (median)" % (m(step_cpu), m(step_wall)))
print("recorder   %.3f s CPU, %.3f s wall (median), %.0f MB digested per step" % (m(rec_cpu), m(rec_wall), 2 * nparam * 4 / 1e6))
print("ratio      %.4f (CPU), %.4f (wall)" % (m(rec_cpu) / m(step_cpu), m(rec_wall) / m(step_wall)))
PYEOF
)
rc=$?
echo "$out" | sed 's/^/   /'
ratio=$(echo "$out" | sed -n 's/^ratio *\([0-9.]*\) (CPU).*/\1/p')
if [ "$rc" -ne 0 ] || [ -z "$ratio" ]; then
    tail -n 5 "$work/err" | sed 's/^/   | /' >&2
    bench_row_failed="the recorder benchmark exited $rc"
    [ "$rc" -eq 124 ] && bench_row_failed="timed out after $BENCH_TIMEOUT s"
    bench_row_fail recorder "$t"
    bench_finish
fi
v=$(bench_verdict "$ratio" 0.10)
echo "   recorder / step = $ratio (CPU time), goal <= 0.10: $v"
bench_note_status "$v"
bench_summary recorder "$t" "$(echo "$out" | sed -n 's/^recorder *\([0-9.]* s CPU\).*/\1/p')" \
    "$(echo "$out" | sed -n 's/^step *\([0-9.]* s CPU\).*/\1/p')" "$ratio (CPU)" "<= 0.10" "$v"
bench_finish

#!/bin/sh
# The Python Recorder's cost (detcheck-gpu(7), LIBRARY): per-tensor digests of every
# parameter and gradient of a ~100M-parameter model (six 4096x4096 linear
# layers with biases: 100.7M parameters, F32) taken by detcheck.Recorder.step
# after each CPU training step (forward, backward, AdamW), against the step
# itself, in the same process: the ratio of the median CPU times (user+sys
# of the process, every thread) per step. Goal: <= 0.10. The package is run
# from python/src with this build's library (no install). The measurement is
# bench/recorder_cost.py, which ci/gpu-check.sh runs on CUDA at ~1B parameters.
#   BENCH_RECORDER_STEPS=5  BENCH_RECORDER_BATCH=256  (QUICK: 3 steps, a 4M model)
. "$(dirname "$0")/lib.sh"
bench_init recorder
STEPS=${BENCH_RECORDER_STEPS:-$(bench_size 5 3)}
BATCH=${BENCH_RECORDER_BATCH:-256}
WIDTH=$(bench_size 4096 1024)
t="Recorder.step (params + grads) vs a CPU training step, ~100M params"
[ "$QUICK" = 1 ] && t="Recorder.step (params + grads) vs a CPU training step, QUICK 4M params"
if ! bench_torch_python; then
    bench_skip recorder "$t" "no python3 with torch (DCK_TORCH_PYTHON; ci/venv.sh torch)"
    bench_finish
fi
bench_header recorder "$t"
bench_py_cost recorder "$t" recorder_cost.py --device cpu --steps "$STEPS" --batch "$BATCH" --width "$WIDTH" \
    --layers 6 --out "$work/rec" || bench_finish
ratio=$(echo "$out" | sed -n 's/^ratio *\([0-9.]*\) (CPU).*/\1/p')
if [ -z "$ratio" ]; then
    bench_row_failed="no ratio in bench/recorder_cost.py's output"
    bench_row_fail recorder "$t"
    bench_finish
fi
v=$(bench_verdict "$ratio" 0.10)
echo "   recorder / step = $ratio (CPU time), goal <= 0.10: $v"
bench_note_status "$v"
bench_summary recorder "$t" "$(echo "$out" | sed -n 's/^recorder *\([0-9.]* s CPU\).*/\1/p')" \
    "$(echo "$out" | sed -n 's/^step *\([0-9.]* s CPU\).*/\1/p')" "$ratio (CPU)" "<= 0.10" "$v"
bench_finish

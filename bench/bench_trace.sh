#!/bin/sh
# The cost of layer and op tracing (detcheck-bisect(1), TRACE FILES): a CPU training step (forward,
# backward, AdamW) of the ~100M-parameter model of bench_recorder.sh (six
# 4096x4096 linear layers + GELU, F32, batch 256) measured in one process as
# four variants, alternated as bench_pair alternates peers (one warm-up step
# of each, then rounds in order and in reverse): no Recorder (plain),
# Recorder(trace="none"), trace="modules" and trace="ops", every step traced.
# A trace's cost is (T_trace - T_none) / T_plain in median CPU time per step
# (user+sys of the process, every thread: the machine may be shared; wall
# time is printed beside it): what the trace adds to a recorded step, over a
# step without detcheck (the Recorder's own digests are bench_recorder.sh's
# row). Goals: module tracing < 0.15, op tracing < 0.50. The measurement is
# bench/recorder_cost.py --tracing, which ci/gpu-check.sh runs on CUDA at ~1B
# parameters (module tracing < 0.05).
#   BENCH_TRACE_ROUNDS=5  BENCH_TRACE_BATCH=256  (QUICK: 3 rounds, a 1.6M model:
#   its figures are Python's per-call overhead, not the trace's cost)
. "$(dirname "$0")/lib.sh"
bench_init trace
ROUNDS=${BENCH_TRACE_ROUNDS:-$(bench_size 5 3)}
BATCH=${BENCH_TRACE_BATCH:-$(bench_size 256 64)}
WIDTH=$(bench_size 4096 512)
size="~100M params"
[ "$QUICK" = 1 ] && size="QUICK 1.6M params"
tm="trace=\"modules\" every step vs a CPU training step, $size"
to="trace=\"ops\" every step vs a CPU training step, $size"
PY=${DCK_TORCH_PYTHON:-}
[ -n "$PY" ] || PY=$(sh "$top/ci/venv.sh" torch 2> "$work/venv.err") || PY=
if [ -z "$PY" ] || ! "$PY" -c "import torch" 2> /dev/null; then
    why="no python3 with torch (DCK_TORCH_PYTHON; ci/venv.sh torch)"
    bench_skip trace-modules "$tm" "$why"
    bench_skip trace-ops "$to" "$why"
    bench_finish
fi
bench_header trace "Recorder(trace=none|modules|ops) vs a plain CPU training step, $size"
out=$(DETCHECK_LIB="$top/$BUILD/libdetcheck.so.0" PYTHONPATH="$top/python/src" \
    timeout "$BENCH_TIMEOUT" "$PY" "$top/bench/recorder_cost.py" --tracing --device cpu \
    --rounds "$ROUNDS" --batch "$BATCH" --width "$WIDTH" --layers 6 --out "$work/rec" 2> "$work/err")
rc=$?
echo "$out" | sed 's/^/   /'
# one row per trace: its ratio from the script's "goal" line, judged here
row() { # ID TITLE VARIANT GOAL
    ratio=$(echo "$out" | sed -n "s/^goal $3 .* time) \([-0-9.]*\) < .*/\1/p")
    if { [ "$rc" -ne 0 ] && [ "$rc" -ne 3 ]; } || [ -z "$ratio" ]; then
        bench_row_failed="the tracing benchmark exited $rc"
        [ "$rc" -eq 124 ] && bench_row_failed="timed out after $BENCH_TIMEOUT s"
        bench_row_fail "$1" "$2"
        return
    fi
    v=$(awk -v r="$ratio" -v g="$4" 'BEGIN { print (r + 0 < g + 0) ? "met" : "NOT met" }')
    echo "   $3 tracing: (T_$3 - T_none) / T_plain = $ratio (CPU time), goal < $4: $v"
    bench_note_status "$v"
    bench_summary "$1" "$2" "$(echo "$out" | sed -n "s/^$3 *\([0-9.]* s CPU\).*/\1/p")" \
        "$(echo "$out" | sed -n 's/^plain *\([0-9.]* s\) CPU.*/\1/p')" "$ratio (CPU, over none)" "< $4" "$v"
}
if { [ "$rc" -ne 0 ] && [ "$rc" -ne 3 ]; } || [ -z "$out" ]; then
    tail -n 5 "$work/err" | sed 's/^/   | /' >&2
fi
row trace-modules "$tm" modules 0.15
row trace-ops "$to" ops 0.50
bench_finish

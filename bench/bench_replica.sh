#!/bin/sh
# The replica guard's cost (python/README.md, "Replica guard"): detcheck.ReplicaGuard.step
# after each CPU training step of 2 data-parallel replicas (2 forked gloo
# ranks, DDP of the ~100M-parameter MLP of bench_recorder.sh: six 4096x4096
# linear layers, F32, AdamW), against the step itself, in the same
# processes, alternated with plain steps (bench/replica_cost.py). Goals, by
# the ranks' CPU time (user+sys of each process; wall printed beside):
# guard per checked step <= 0.05 x the step at every=1, amortized over 10
# steps <= 0.01 x at every=10; 16 bytes gathered a rank per check when the
# replicas are equal. The package is run from python/src with this build's
# library (no install); ci/gpu-check.sh runs replica_cost.py on CUDA at ~1B.
#   BENCH_REPLICA_ROUNDS=2  BENCH_REPLICA_BATCH=256  (QUICK: a 6M model)
# Two rounds of 6 steps (3 of them warm-up): ~60 s on 2 idle cores, 190 s
# on 2 cores loaded 3x (BENCH_TIMEOUT: 300 s).
. "$(dirname "$0")/lib.sh"
bench_init replica
ROUNDS=${BENCH_REPLICA_ROUNDS:-2}
BATCH=${BENCH_REPLICA_BATCH:-256}
WIDTH=$(bench_size 4096 1024)
size="~100M params"
[ "$QUICK" = 1 ] && size="QUICK 6M params"
t="ReplicaGuard.step vs a DDP step, 2 gloo ranks, $size"
if ! bench_torch_python; then
    bench_skip replica-1 "$t, every=1" "no python3 with torch (DCK_TORCH_PYTHON; ci/venv.sh torch)"
    bench_skip replica-10 "$t, every=10" "no python3 with torch (DCK_TORCH_PYTHON; ci/venv.sh torch)"
    bench_finish
fi
bench_header replica "$t"
bench_py_cost replica "$t" replica_cost.py --device cpu --ranks 2 --rounds "$ROUNDS" --batch "$BATCH" \
    --width "$WIDTH" --layers 6 || bench_finish
r1=$(echo "$out" | sed -n 's/^ratio 1 *\([0-9.]*\) (CPU).*/\1/p')
r10=$(echo "$out" | sed -n 's/^ratio 10 *\([0-9.]*\) (CPU).*/\1/p')
gb=$(echo "$out" | sed -n 's/^gathered *\([0-9]*\) bytes.*/\1/p')
if [ -z "$r1" ] || [ -z "$r10" ] || [ -z "$gb" ]; then
    bench_row_failed="no ratios in bench/replica_cost.py's output"
    bench_row_fail replica "$t"
    bench_finish
fi
# the figures of the rank whose ratio is the larger:
# "ratio E    R (CPU), R (wall): guard G s CPU ... / step S s CPU, rank N"
guard() { echo "$out" | sed -n "s/^ratio $1 .*: guard \([0-9.]* s CPU\).*/\1/p"; }
step() { echo "$out" | sed -n "s/^ratio $1 .* \/ step \([0-9.]* s CPU\).*/\1/p"; }
v=$(bench_verdict "$r1" 0.05)
[ "$(bench_verdict "$gb" 16)" = met ] || v="NOT met"
bench_note_status "$v"
bench_summary replica-1 "$t, every=1" "$(guard 1)" "$(step 1)" \
    "$r1 (CPU), $gb B/rank gathered" "<= 0.05, 16 B" "$v"
v=$(bench_verdict "$r10" 0.01)
bench_note_status "$v"
bench_summary replica-10 "$t, every=10" "$(guard 10)" "$(step 10)" "$r10 (CPU, amortized)" \
    "<= 0.01" "$v"
bench_finish

#!/bin/sh
# The determinism tax: `detcheck train --bench` runs the deterministic mode
# (fixed microbatch tree, byte Allgather) and the fast mode (completion-order
# sums, MPI_Allreduce on floats) on the same config in the same run and
# prints steps/s of each and their ratio (goal: <= 1.10x).
#   BENCH_TRAIN_STEPS=30  BENCH_TRAIN_RANKS="1 2"  BENCH_TRAIN_ARGS="..."
set -e
top=${DCK_TOP:-$(cd "$(dirname "$0")/.." && pwd)}
D=${DETCHECK:-$top/build/detcheck}
STEPS=${BENCH_TRAIN_STEPS:-30}
RANKS=${BENCH_TRAIN_RANKS:-1 2}
ARGS=${BENCH_TRAIN_ARGS:-}
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1}
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
rc=0
for k in $RANKS; do
    if [ "$k" -eq 1 ]; then
        out=$("$D" train --bench --steps "$STEPS" $ARGS)
    elif command -v mpirun > /dev/null; then
        out=$(mpirun --oversubscribe -np "$k" "$D" train --bench --steps "$STEPS" $ARGS)
    else
        echo "ranks $k: skipped (no mpirun)"
        continue
    fi
    echo "$out"
    echo "$out" | grep -q 'goal <= 1.10x: met' || rc=1
done
exit $rc

#!/bin/sh
# The determinism tax: `detcheck train --bench` runs the deterministic mode
# (fixed microbatch tree, byte Allgather) and the fast mode (completion-order
# sums, MPI_Allreduce on floats) on the same config in the same run and
# prints steps/s of each and their ratio (goal: <= 1.10x). The trainer
# against llm.c is bench_llmc.sh.
#   BENCH_TRAIN_STEPS=30  BENCH_TRAIN_RANKS="1 2"  BENCH_TRAIN_ARGS="..."
. "$(dirname "$0")/lib.sh"
bench_init train
STEPS=${BENCH_TRAIN_STEPS:-$(bench_size 30 10)}
RANKS=${BENCH_TRAIN_RANKS:-1 2}
ARGS=${BENCH_TRAIN_ARGS:-}
for k in $RANKS; do
    t="train --bench, $k rank(s), $STEPS steps: determinism tax"
    if [ "$k" -eq 1 ]; then
        bench_header tax-1 "$t"
        out=$("$D" train --bench --steps "$STEPS" $ARGS 2> "$work/err")
        rc=$?
    elif command -v mpirun > /dev/null; then
        bench_header "tax-$k" "$t"
        out=$(mpirun --oversubscribe -np "$k" "$D" train --bench --steps "$STEPS" $ARGS 2> "$work/err")
        rc=$?
    else
        bench_skip "tax-$k" "$t" "no mpirun"
        continue
    fi
    echo "$out" | sed 's/^/   /'
    tax=$(echo "$out" | sed -n 's/.*determinism tax \([0-9.]*\)x.*/\1/p')
    if [ "$rc" -ne 0 ] || [ -z "$tax" ]; then
        tail -n 3 "$work/err" | sed 's/^/   | /' >&2
        bench_row_failed="train --bench exited $rc"
        bench_row_fail "tax-$k" "$t"
        continue
    fi
    v=$(bench_verdict "$tax" 1.10)
    bench_note_status "$v"
    bench_summary "tax-$k" "$t" "$(echo "$out" | sed -n 's/^deterministic *//p')" \
        "$(echo "$out" | sed -n 's/^fast *//p')" "${tax}x (steps/s)" "<= 1.10x" "$v"
done
bench_finish

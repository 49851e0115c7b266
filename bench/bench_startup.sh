#!/bin/sh
# Start-up (README Performance, row 6): verify of a 1 KiB checkpoint against its golden
# manifest vs xxhsum -H2 on the same file, many alternating runs (wall time:
# the latency a CI step sees; goal <= 2x); and detcheck --version alone, the
# cost of loading the binary and its shared libraries.
#   BENCH_STARTUP_RUNS=200
. "$(dirname "$0")/lib.sh"
bench_init startup
RUNS=${BENCH_STARTUP_RUNS:-$(bench_size 200 20)}
G=$work/bench_gen
bench_cc "$G" "$top/bench/bench_gen.c"
t6="verify of a 1 KiB checkpoint (start-up)"
command -v xxhsum > /dev/null || { bench_skip 6 "$t6" "no xxhsum (apt-get install xxhash)"; bench_finish; }
bench_header 6 "$t6"
"$G" tensors "$work/small.safetensors" 4 40 || exit 2
"$D" hash -q -o "$work/golden.yaml" "$work/small.safetensors" || exit 2
echo "   file: $(wc -c < "$work/small.safetensors") bytes, 4 F32 tensors"
A_LABEL="detcheck verify --golden M FILE" A_CMD="\"$D\" verify -q --golden \"$work/golden.yaml\" \"$work/small.safetensors\""
B_LABEL="xxhsum -H2 FILE" B_CMD="xxhsum -H2 \"$work/small.safetensors\""
# many runs: the rounds are not cut to fit the row budget
if BENCH_REPS=${BENCH_REPS:-$RUNS} BENCH_ROW_BUDGET=1000000 bench_pair 6 "$RUNS"; then
    bench_ratio 6 "$t6" wall 2
    # loading the binary and its libraries, nothing else: the floor under row 6
    A_LABEL="floor: detcheck --version" A_CMD="\"$D\" --version"
    if BENCH_REPS=${BENCH_REPS:-$RUNS} BENCH_ROW_BUDGET=1000000 bench_single 6-floor "$RUNS"; then
        bench_figure 6-floor "detcheck --version (floor under row 6)"
    fi
else
    bench_row_fail 6 "$t6"
fi
bench_finish

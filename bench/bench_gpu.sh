#!/bin/sh
# GPU digest throughput vs a read-only 64-bit-word sum of the same 8 GiB
# device buffer (the memory-bandwidth limit; goal >= 0.8). Needs a GPU and
# the GPU programs (make gpu-tests); skips cleanly, saying why, otherwise.
# ci/gpu-check.sh runs this benchmark and the file-path one on a GPU machine.
#   DCK_GPU_BENCH_GIB=8 (quick: 1)
. "$(dirname "$0")/lib.sh"
bench_init gpu
# The trainer on the GPU (detcheck-gpu(7), TRAINING): `train --bench --device cuda` on the
# small preset with 256-token sequences: the determinism tax (goal <= 1.10x)
# and the linear layers' FLOP/s against a plain FP32 FMA kernel measured in
# the same run (goal >= 25%). Without a GPU the row says why it skipped.
tt="train --bench --device cuda, small preset, 4 x 256 tokens"
if out=$("$D" train --bench --device cuda --preset small --seq 256 --batch 4 --microbatches 2 \
    --steps "$(bench_size 3 1)" 2> "$work/train.err"); then
    bench_header gpu-train "$tt"
    echo "$out" | sed 's/^/   /'
    tax=$(echo "$out" | sed -n 's/.*determinism tax \([0-9.]*\)x.*/\1/p')
    pct=$(echo "$out" | sed -n 's/.*linear layers at \([0-9.]*\)%.*/\1/p')
    bench_summary gpu-tax "$tt: determinism tax" "" "" "${tax}x" "<= 1.10x" "$(bench_verdict "$tax" 1.10)"
    v=$(awk -v p="${pct:-0}" 'BEGIN {print (p >= 25) ? "met" : "NOT met"}')
    bench_summary gpu-flops "$tt: linear FLOP/s / FMA peak" "" "" "${pct}%" ">= 25%" "$v"
else
    bench_skip gpu-train "$tt" "$(tail -n 1 "$work/train.err")"
fi
t="GPU digest throughput vs a read-only kernel"
bin="$top/$BUILD/tests/gpu/bench_gpu"
if [ ! -x "$bin" ]; then
    bench_skip gpu "$t" "$BUILD/tests/gpu/bench_gpu not built (make gpu-tests, needs CUDA)"
    bench_finish
fi
bench_header gpu "$t"
"$bin" "${DCK_GPU_BENCH_GIB:-$(bench_size 8 1)}" > "$work/out" 2>&1
rc=$?
sed 's/^/   /' "$work/out"
ratio=$(sed -n 's/.*ratio digest\/peer *\([0-9.]*\).*/\1/p' "$work/out")
case $rc in
0) bench_summary gpu "$t" "" "" "$ratio" ">= 0.80" "met" ;;
3) bench_summary gpu "$t" "" "" "$ratio" ">= 0.80" "NOT met"; bench_status=1 ;;
77) bench_summary gpu "$t" "" "" "no GPU" "" "SKIPPED" ;;
*) bench_row_failed="bench_gpu exited $rc"; bench_row_fail gpu "$t" ;;
esac
bench_finish

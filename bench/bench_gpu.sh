#!/bin/sh
# GPU digest throughput vs a read-only 64-bit-word sum of the same 8 GiB
# device buffer (the memory-bandwidth limit; goal >= 0.8). Needs a GPU and
# the GPU programs (make gpu-tests); skips cleanly, saying why, otherwise.
# ci/gpu-check.sh runs this benchmark and the file-path one on a GPU machine.
#   DCK_GPU_BENCH_GIB=8 (quick: 1)
. "$(dirname "$0")/lib.sh"
bench_init gpu
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

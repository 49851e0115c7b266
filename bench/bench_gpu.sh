#!/bin/sh
# GPU digest throughput vs a read-only 64-bit-word sum of the same 8 GiB
# device buffer (the memory-bandwidth limit; goal >= 0.8). Needs a GPU and
# the GPU programs (make gpu-tests); skips cleanly, saying why, otherwise.
# ci/gpu-check.sh runs this benchmark and the file-path one on a GPU machine.
top=${DCK_TOP:-$(cd "$(dirname "$0")/.." && pwd)}
BUILD=${BUILD:-build}
bin="$top/$BUILD/tests/gpu/bench_gpu"
if [ ! -x "$bin" ]; then
    echo "skipped: $BUILD/tests/gpu/bench_gpu not built (make gpu-tests, needs CUDA)"
    exit 0
fi
"$bin" "${DCK_GPU_BENCH_GIB:-8}"
rc=$?
case $rc in
77) exit 0 ;;   # no GPU: bench_gpu said why
3) exit 0 ;;    # measured, goal missed: the figures say so
*) exit $rc ;;
esac

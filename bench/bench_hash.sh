#!/bin/sh
# Hashing big files (README Performance, rows 4, 7 and 8), from the page cache:
#   hash:  hash (default threads) of a 1 GiB file vs xxhsum -H2 (wall time;
#          goal <= 1.0x: detcheck at least as fast)
#   row 4: hash -t 1 of the 1 GiB file vs xxhsum -H2 (CPU time; goal <= 1.0x)
#   row 7: hash --distributed under mpirun --oversubscribe -np 2 (-t 1 per
#          rank) of a 2 GiB file vs one process with 2 threads (wall time;
#          goal <= 1.1x); and an MPI program that only starts and stops, the floor
#   row 8: hash --device auto of the 2 GiB file with no GPU visible
#          (CUDA_VISIBLE_DEVICES=) vs plain hash (CPU time; goal <= 1.05x)
#   digest: the in-memory digest rate on one core (bench_digest.c)
# Environment (besides bench/lib.sh's):
#   BENCH_MB=1024  BENCH_BIG_MB=2048  BENCH_DIST_ARGS="-t 1"  BENCH_DIGEST_MB=256
. "$(dirname "$0")/lib.sh"
bench_init hash
MB=${BENCH_MB:-$(bench_size 1024 64)}
BIG=${BENCH_BIG_MB:-$(bench_size 2048 128)}
DIST_ARGS=${BENCH_DIST_ARGS:--t 1}
G=$work/bench_gen
bench_cc "$G" "$top/bench/bench_gen.c"
f1=$work/one.safetensors
f2=$work/two.safetensors
"$G" big "$f1" "$MB" || exit 2
cat "$f1" > /dev/null
MB=$(bench_mib "$f1")
echo "files: safetensors of F32 and BF16 [2048, 2048] tensors, page cache, $(nproc) CPUs"

# ---- default threads and row 4 (xxhsum peer)
th="hash of a $MB MiB file (default threads)"
t4="hash -t 1 of a $MB MiB file"
if ! command -v xxhsum > /dev/null; then
    bench_skip hash "$th" "no xxhsum (apt-get install xxhash)"
    bench_skip 4 "$t4" "no xxhsum (apt-get install xxhash)"
else
    bench_header hash "$th"
    A_LABEL="detcheck hash" A_CMD="\"$D\" hash -q \"$f1\""
    B_LABEL="xxhsum -H2" B_CMD="xxhsum -H2 \"$f1\""
    if bench_pair hash 5; then bench_ratio hash "$th" wall 1.0; else bench_row_fail hash "$th"; fi
    bench_header 4 "$t4"
    A_LABEL="detcheck hash -t 1" A_CMD="\"$D\" hash -q -t 1 \"$f1\""
    if bench_pair 4 5; then bench_ratio 4 "$t4" cpu 1.0; else bench_row_fail 4 "$t4"; fi
fi
rm -f "$f1"

"$G" big "$f2" "$BIG" || exit 2
cat "$f2" > /dev/null
BIG=$(bench_mib "$f2")

# ---- row 7
t7="hash --distributed, mpirun -np 2, $BIG MiB vs 1 process, 2 threads"
if ! command -v mpirun > /dev/null; then
    bench_skip 7 "$t7" "no mpirun"
else
    bench_header 7 "$t7"
    A_LABEL="mpirun -np 2 detcheck hash --distributed $DIST_ARGS"
    A_CMD="mpirun --oversubscribe -np 2 \"$D\" hash -q --distributed $DIST_ARGS \"$f2\""
    B_LABEL="detcheck hash -t 2" B_CMD="\"$D\" hash -q -t 2 \"$f2\""
    if bench_pair 7 5 && bench_same_tensors 7; then bench_ratio 7 "$t7" wall 1.1; else bench_row_fail 7 "$t7"; fi
    # the launcher's own cost, a floor under row 7 on one machine: two ranks
    # that only MPI_Init and MPI_Finalize (what any MPI program pays before
    # its first byte; mpirun of a non-MPI program understates it)
    printf '#include <mpi.h>\nint main(int c, char **v) { MPI_Init(&c, &v); MPI_Finalize(); return 0; }\n' > "$work/mpi_hello.c"
    if command -v mpicc > /dev/null && mpicc -O2 -o "$work/mpi_hello" "$work/mpi_hello.c" 2> "$work/mpi_hello.log"; then
        A_LABEL="floor: mpirun -np 2 MPI_Init+MPI_Finalize" A_CMD="mpirun --oversubscribe -np 2 \"$work/mpi_hello\""
        if bench_single 7-launch 5; then bench_figure 7-launch "mpirun -np 2 of MPI_Init+Finalize (floor under row 7)"; fi
    else
        A_LABEL="floor: mpirun --oversubscribe -np 2 true" A_CMD="mpirun --oversubscribe -np 2 true"
        if bench_single 7-launch 5; then bench_figure 7-launch "mpirun -np 2 true (floor under row 7; no mpicc)"; fi
    fi
fi

# ---- row 8
t8="hash --device auto without a GPU, $BIG MiB vs plain hash"
bench_header 8 "$t8"
cvd_was_set=${CUDA_VISIBLE_DEVICES+1} cvd_was=${CUDA_VISIBLE_DEVICES:-}
export CUDA_VISIBLE_DEVICES=   # no GPU visible, even on a GPU machine
A_LABEL="detcheck hash --device auto" A_CMD="\"$D\" hash -q --device auto \"$f2\""
B_LABEL="detcheck hash" B_CMD="\"$D\" hash -q \"$f2\""
if bench_pair 8 5 && bench_same_tensors 8; then bench_ratio 8 "$t8" cpu 1.05; else bench_row_fail 8 "$t8"; fi
if [ -n "$cvd_was_set" ]; then CUDA_VISIBLE_DEVICES=$cvd_was; else unset CUDA_VISIBLE_DEVICES; fi
rm -f "$f2"

# ---- digest rate in memory (no peer run: its own XXH3 figure is the reference)
echo "-- digest: in-memory digest v1 rate on one core"
if bench_cc "$work/bench_digest" -I"$top/include" "$top/bench/bench_digest.c" "$top/$BUILD/libdetcheck.a" \
    $(cat "$top/$BUILD/ldlibs.txt" 2> /dev/null); then
    printf "   "
    "$work/bench_digest" rate "${BENCH_DIGEST_MB:-$(bench_size 256 64)}" || bench_status=2
fi
bench_finish

#!/bin/sh
# Cost per file (README Performance, row 3, and the file scaling runs).
#   row 3: hash of a directory of 2,000 safetensors files of 64 KiB vs
#          xxhsum -H2 on the same files (CPU time; goal <= 2x)
#   scale-files: the same at 500/2000/8000 files, time per file at each size
#          next to xxhsum's (goal: linear)
# Environment (besides bench/lib.sh's):
#   BENCH_FILES=2000  BENCH_FILE_BYTES=65536  BENCH_SCALE_FILES="500 2000 8000"
. "$(dirname "$0")/lib.sh"
bench_init files
NF=${BENCH_FILES:-$(bench_size 2000 200)}
FB=${BENCH_FILE_BYTES:-65536}
SIZES=${BENCH_SCALE_FILES:-$(bench_size "500 2000 8000" "100 200 400")}
G=$work/bench_gen
bench_cc "$G" "$top/bench/bench_gen.c"
command -v xxhsum > /dev/null || { bench_skip 3 "directory of files" "no xxhsum (apt-get install xxhash)"; bench_finish; }

# ---- row 3
t3="directory of $NF safetensors files of $((FB / 1024)) KiB"
bench_header 3 "$t3"
"$G" dir "$work/r3" "$NF" "$FB" || exit 2
cat "$work/r3"/* > /dev/null
A_LABEL="detcheck hash DIR" A_CMD="\"$D\" hash -q \"$work/r3\""
B_LABEL="xxhsum -H2 DIR/*.safetensors" B_CMD="xxhsum -H2 \"$work/r3\"/*.safetensors"
if bench_pair 3 5; then
    n=$(grep -c '^- {path:' "$work/3.A.out")
    if [ "$n" -ne "$NF" ]; then
        bench_row_failed="detcheck's manifest lists $n files, not $NF"
        bench_row_fail 3 "$t3"
    else
        bench_ratio 3 "$t3" cpu 2
    fi
else
    bench_row_fail 3 "$t3"
fi
rm -rf "$work/r3"

# ---- scaling
scale_gen() { "$G" dir "$work/scale" "$1" "$FB" && cat "$work/scale"/* > /dev/null; }
scale_cmd() { echo "\"$D\" hash -q \"$work/scale\""; }
scale_peer() { echo "xxhsum -H2 \"$work/scale\"/*.safetensors"; }
SCALE_PEER=1 bench_scale scale-files "hash of a directory of $((FB / 1024)) KiB safetensors files (peer: xxhsum -H2)" file "$SIZES" 1.5

bench_finish

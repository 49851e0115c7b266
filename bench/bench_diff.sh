#!/bin/sh
# diff (README Performance, row 5, and the earlier diff rows), files in the page cache:
#   row 5: diff of two 1 GiB F32 files, every element differs, vs a NumPy
#          script (bench/numpy_diff.py: count of differing elements and max
#          abs difference, np.memmap) on the same files (CPU time; goal <=
#          1.0x), and detcheck's peak RSS (goal < 256 MiB)
#   diff-same: diff of two identical 1 GiB files vs cmp (wall time; goal <= 1.0x)
#   diff-last: diff of two 1 GiB files whose every tensor differs in its last
#          element (no peer: a figure)
#   diff-rss: peak RSS of a diff of two 4 GiB files, every tensor differs
#          (goal < 256 MiB)
# Environment (besides bench/lib.sh's):
#   BENCH_DIFF_MB=1024  BENCH_DIFF_RSS_MB=4096 (0: skip)  BENCH_DIFF_ARGS=""
. "$(dirname "$0")/lib.sh"
bench_init diff
MB=${BENCH_DIFF_MB:-$(bench_size 1024 64)}
RSS_MB=${BENCH_DIFF_RSS_MB:-$(bench_size 4096 256)}
ARGS=${BENCH_DIFF_ARGS:-}
G=$work/bench_gen
bench_cc "$G" "$top/bench/bench_gen.c"
a=$work/a.safetensors b=$work/b.safetensors
"$G" big "$a" "$MB" f32 || exit 2
"$G" big "$b" "$MB" f32-other || exit 2
MB=$(bench_mib "$a")
echo "files: 2 x $MB MiB safetensors of F32 [2048, 2048] tensors, page cache, $(nproc) CPUs"

# bench_rss_goal RES SUMMARY_ID TITLE LIMIT_MIB: the largest peak RSS of
# detcheck's runs (side A, warm-up included) in row RES.
bench_rss_goal() {
    _k=$(cat "$work/res/$1.A" "$work/res/$1.A.warm" 2> /dev/null | awk '$3 > m { m = $3 } END { print m + 0 }')
    _mib=$(awk -v k="$_k" 'BEGIN { printf "%.1f", k / 1024 }')
    _v=$(awk -v m="$_mib" -v g="$4" 'BEGIN { print (m > 0 && m < g) ? "met" : "NOT met" }')
    printf "   detcheck peak RSS %s MiB   goal < %s MiB   %s\n" "$_mib" "$4" "$_v"
    bench_note_status "$_v"
    bench_summary "$2" "$3" "$_mib MiB" "" "peak RSS $_mib MiB" "< $4 MiB" "$_v"
}

# ---- row 5
t5="diff of two $MB MiB F32 files, every element differs"
if ! bench_has_numpy; then
    bench_skip 5 "$t5" "the peer needs python3 with numpy (pip install numpy)"
else
    bench_header 5 "$t5"
    cat "$a" "$b" > /dev/null
    A_LABEL="detcheck diff $ARGS" A_CMD="\"$D\" diff -q $ARGS \"$a\" \"$b\"" A_RC=1
    B_LABEL="numpy_diff.py (count, max abs)" B_CMD="\"${BENCH_PYTHON:-python3}\" \"$top/bench/numpy_diff.py\" \"$a\" \"$b\"" B_RC=0
    if bench_pair 5 5; then
        read -r nd nt mx < "$work/5.B.out"
        if [ "$nd" != "$nt" ]; then
            bench_row_failed="numpy counts $nd of $nt elements differing, not all"
            bench_row_fail 5 "$t5"
        else
            echo "   numpy: $nd of $nt elements differ, max abs $mx"
            bench_ratio 5 "$t5" cpu 1.0
            bench_rss_goal 5 5-rss "$t5: detcheck peak RSS" 256
        fi
    else
        bench_row_fail 5 "$t5"
    fi
fi
A_RC=0 B_RC=0

# ---- identical files vs cmp
rm -f "$b"
cp "$a" "$work/same.safetensors"
cat "$a" "$work/same.safetensors" > /dev/null
ts="diff of two identical $MB MiB files"
bench_header diff-same "$ts"
A_LABEL="detcheck diff $ARGS" A_CMD="\"$D\" diff -q $ARGS \"$a\" \"$work/same.safetensors\""
B_LABEL="cmp" B_CMD="cmp \"$a\" \"$work/same.safetensors\""
if bench_pair diff-same 5; then bench_ratio diff-same "$ts" wall 1.0; else bench_row_fail diff-same "$ts"; fi
rm -f "$a" "$work/same.safetensors"

# ---- every tensor differs in its last element (a figure, no peer)
"$G" big "$a" "$MB" || exit 2
"$G" big "$b" "$MB" edit || exit 2
cat "$a" "$b" > /dev/null
tl="diff of two $(bench_mib "$a") MiB files, every tensor differs in its last element"
bench_header diff-last "$tl"
A_LABEL="detcheck diff $ARGS" A_CMD="\"$D\" diff -q $ARGS \"$a\" \"$b\"" A_RC=1
if bench_single diff-last 5; then
    bench_figure diff-last "$tl"
else
    bench_row_fail diff-last "$tl"
fi
rm -f "$a" "$b"

# ---- peak RSS on bigger files
if [ "$RSS_MB" -gt 0 ]; then
    "$G" big "$a" "$RSS_MB" || exit 2
    "$G" big "$b" "$RSS_MB" edit || exit 2
    tr="diff of two $(bench_mib "$a") MiB files, every tensor differs: peak RSS"
    bench_header diff-rss "$tr"
    if bench_single diff-rss 1; then
        bench_table diff-rss
        bench_rss_goal diff-rss diff-rss "$tr" 256
    else
        bench_row_fail diff-rss "$tr"
    fi
    rm -f "$a" "$b"
fi
bench_finish

#!/bin/sh
# detcheck diff vs cmp(1) on the same identical 1 GiB safetensors files, from
# the page cache, in the same run; detcheck diff on two files that differ in
# every tensor (the last element of each, so no tensor can be settled early);
# peak resident memory of each run, and of a diff of two 4 GiB checkpoints
# (goal: under 256 MiB).
#   BENCH_DIFF_MB=1024      size of the timed pair
#   BENCH_DIFF_RSS_MB=4096  size of the memory pair (0: skip)
#   BENCH_REPS=3            best of N wall times
set -e
top=${DCK_TOP:-$(cd "$(dirname "$0")/.." && pwd)}
D=${DETCHECK:-$top/build/detcheck}
MB=${BENCH_DIFF_MB:-1024}
RSS_MB=${BENCH_DIFF_RSS_MB:-4096}
REPS=${BENCH_REPS:-3}
work=$(mktemp -d "${TMPDIR:-/tmp}/dck-bench-diff.XXXXXX")
trap 'rm -rf "$work"' EXIT
cc -std=c11 -O2 -o "$work/gen" "$top/bench/bench_diff_gen.c"
G="$work/gen"

# run_best WANT_EXIT CMD...: sets BT (best wall time of REPS runs, seconds)
# and BR (their largest peak RSS, KiB); stops the bench when the exit status
# is not WANT_EXIT.
run_best() {
    want=$1; shift
    bt=""; br=0; i=0
    while [ $i -lt "$REPS" ]; do
        set +e; "$G" rss "$@" > /dev/null 2> "$work/rss"; rc=$?; set -e
        [ "$rc" -eq "$want" ] || { echo "bench_diff: exit $rc, wanted $want: $*" >&2; tail -n 3 "$work/rss" >&2; exit 1; }
        read -r t r < "$work/rss"
        if [ -z "$bt" ] || [ "$(awk "BEGIN{print ($t < $bt)}")" = 1 ]; then bt=$t; fi
        [ "$r" -gt "$br" ] && br=$r
        i=$((i+1))
    done
    BT=$bt; BR=$br
}

"$G" write "$work/a.safetensors" "$MB"
cp "$work/a.safetensors" "$work/same.safetensors"
"$G" write "$work/edit.safetensors" "$MB" edit
cat "$work/a.safetensors" "$work/same.safetensors" "$work/edit.safetensors" > /dev/null

run_best 0 cmp "$work/a.safetensors" "$work/same.safetensors"; tc=$BT
run_best 0 "$D" diff -q "$work/a.safetensors" "$work/same.safetensors"; ts=$BT; rs=$BR
run_best 0 "$D" diff -q -t 1 "$work/a.safetensors" "$work/same.safetensors"; ts1=$BT
run_best 1 "$D" diff -q "$work/a.safetensors" "$work/edit.safetensors"; td=$BT; rd=$BR
"$D" diff --json "$work/a.safetensors" "$work/edit.safetensors" > "$work/d.json" || true
nt=$(grep -c '"status": "differ"' "$work/d.json" || true)
ntot=$(grep -c '"status": ' "$work/d.json" || true)

gib=$(awk "BEGIN{print $MB / 1024}")
printf "files: 2 x %d MiB safetensors (page cache), %s CPUs\n" "$MB" "$(nproc)"
printf "cmp (identical)                        %7.3f s  %6.2f GiB/s per side\n" "$tc" "$(awk "BEGIN{print $gib / $tc}")"
printf "detcheck diff (identical)              %7.3f s  %6.2f GiB/s per side  peak RSS %6.1f MiB\n" \
    "$ts" "$(awk "BEGIN{print $gib / $ts}")" "$(awk "BEGIN{print $rs / 1024}")"
printf "detcheck diff -t 1 (identical)         %7.3f s  %6.2f GiB/s per side\n" "$ts1" "$(awk "BEGIN{print $gib / $ts1}")"
printf "detcheck diff (every tensor differs)   %7.3f s  %6.2f GiB/s per side  peak RSS %6.1f MiB  (%s of %s tensors differ)\n" \
    "$td" "$(awk "BEGIN{print $gib / $td}")" "$(awk "BEGIN{print $rd / 1024}")" "$nt" "$ntot"
printf "ratio cmp/detcheck diff, identical (goal >= 1.0): %.2f\n" "$(awk "BEGIN{print $tc / $ts}")"
printf "ratio cmp/detcheck diff, every tensor differs:    %.2f\n" "$(awk "BEGIN{print $tc / $td}")"

if [ "$RSS_MB" -gt 0 ]; then
    rm -f "$work/a.safetensors" "$work/same.safetensors" "$work/edit.safetensors"
    "$G" write "$work/big_a.safetensors" "$RSS_MB"
    "$G" write "$work/big_b.safetensors" "$RSS_MB" edit
    REPS=1
    run_best 1 "$D" diff -q "$work/big_a.safetensors" "$work/big_b.safetensors"; tb=$BT; rb=$BR
    printf "detcheck diff, 2 x %d MiB, every tensor differs: %.3f s, peak RSS %.1f MiB (goal < 256 MiB: %s)\n" \
        "$RSS_MB" "$tb" "$(awk "BEGIN{print $rb / 1024}")" \
        "$(awk "BEGIN{print ($rb < 262144) ? \"met\" : \"MISSED\"}")"
fi

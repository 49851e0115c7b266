#!/bin/sh
# detcheck hash vs xxhsum -H2 on the same 1 GiB safetensors file, from the
# page cache, in the same run; and the in-memory digest rate on one core.
#   BENCH_MB=1024 (file size)  BENCH_REPS=3
set -e
top=${DCK_TOP:-$(cd "$(dirname "$0")/.." && pwd)}
D=${DETCHECK:-$top/build/detcheck}
MB=${BENCH_MB:-1024}
REPS=${BENCH_REPS:-5}
work=$(mktemp -d "${TMPDIR:-/tmp}/dck-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
cc -std=c11 -O2 -I"$top/include" -o "$work/bench_digest" "$top/bench/bench_digest.c" \
    "$top/${BUILD:-build}/libdetcheck.a" $(cat "$top/${BUILD:-build}/ldlibs.txt")
"$work/bench_digest" write "$work/big.safetensors" "$MB"
cat "$work/big.safetensors" > /dev/null   # into the page cache
# The three commands run in turn, REPS rounds, best time of each: load from
# other work on the machine falls on all of them alike.
tx=9999; td=9999; td1=9999
timeit() { t0=$(date +%s.%N); "$@" > /dev/null 2>&1; t1=$(date +%s.%N); awk "BEGIN{print $t1 - $t0}"; }
min() { awk "BEGIN{print ($1 < $2) ? $1 : $2}"; }
i=0
while [ $i -lt "$REPS" ]; do
    tx=$(min "$(timeit xxhsum -H2 "$work/big.safetensors")" "$tx")
    td=$(min "$(timeit "$D" hash -q "$work/big.safetensors")" "$td")
    td1=$(min "$(timeit "$D" hash -q --threads 1 "$work/big.safetensors")" "$td1")
    i=$((i+1))
done
gb=$(awk "BEGIN{print $MB / 1024}")
printf "file: %d MiB safetensors (page cache), %s CPUs\n" "$MB" "$(nproc)"
printf "xxhsum -H2                    %6.3f s  %5.2f GiB/s\n" "$tx" "$(awk "BEGIN{print $gb / $tx}")"
printf "detcheck hash (default)       %6.3f s  %5.2f GiB/s\n" "$td" "$(awk "BEGIN{print $gb / $td}")"
printf "detcheck hash --threads 1     %6.3f s  %5.2f GiB/s\n" "$td1" "$(awk "BEGIN{print $gb / $td1}")"
printf "ratio xxhsum/detcheck (goal >= 1.0): %.2f\n" "$(awk "BEGIN{print $tx / $td}")"
"$work/bench_digest" rate

#!/bin/sh
# detcheck hash of a 1 GiB torch.save .pt vs the same tensors as safetensors,
# in the same run, from the page cache (goal: .pt within 1.1x). The files are
# written by bench/bench_pt_gen.py (Python standard library, no torch).
#   BENCH_MB=1024  BENCH_REPS=5
set -e
top=${DCK_TOP:-$(cd "$(dirname "$0")/.." && pwd)}
D=${DETCHECK:-$top/build/detcheck}
MB=${BENCH_MB:-1024}
REPS=${BENCH_REPS:-5}
work=$(mktemp -d "${TMPDIR:-/tmp}/dck-bench-pt.XXXXXX")
trap 'rm -rf "$work"' EXIT
python3 "$top/bench/bench_pt_gen.py" "$work" "$MB" > "$work/gen.txt"
cat "$work/big.pt" "$work/big.safetensors" > /dev/null   # into the page cache
now() { date +%s.%N; }
# best of REPS wall times, the two commands alternating so that load from
# elsewhere on the machine falls on both alike
tp="" ts=""
race() {
    i=0
    while [ $i -lt "$REPS" ]; do
        t0=$(now); "$D" hash -q "$work/big.safetensors" > /dev/null; t1=$(now)
        "$D" hash -q "$work/big.pt" > /dev/null; t2=$(now)
        a=$(awk "BEGIN{print $t1 - $t0}"); b=$(awk "BEGIN{print $t2 - $t1}")
        if [ -z "$ts" ] || [ "$(awk "BEGIN{print ($a < $ts)}")" = 1 ]; then ts=$a; fi
        if [ -z "$tp" ] || [ "$(awk "BEGIN{print ($b < $tp)}")" = 1 ]; then tp=$b; fi
        i=$((i+1))
    done
}
# the same digests, or the comparison means nothing
"$D" hash -q --no-files "$work/big.pt" | sed -n 's/^- {name: \(.*\)}$/\1/p' | sort > "$work/a.t"
"$D" hash -q --no-files "$work/big.safetensors" | sed -n 's/^- {name: \(.*\)}$/\1/p' | sort > "$work/b.t"
cmp -s "$work/a.t" "$work/b.t" || { echo "bench_pt: .pt and safetensors digests differ" >&2; exit 1; }
race
gb=$(awk "BEGIN{print $(stat -c %s "$work/big.safetensors") / 1073741824}")
printf "files: %s (.pt zip and safetensors), page cache, %s CPUs\n" "$(cat "$work/gen.txt")" "$(nproc)"
printf "detcheck hash big.safetensors  %6.3f s  %5.2f GiB/s\n" "$ts" "$(awk "BEGIN{print $gb / $ts}")"
printf "detcheck hash big.pt           %6.3f s  %5.2f GiB/s\n" "$tp" "$(awk "BEGIN{print $gb / $tp}")"
printf "ratio .pt/safetensors (goal <= 1.10): %.2f\n" "$(awk "BEGIN{print $tp / $ts}")"

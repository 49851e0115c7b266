#!/bin/sh
# make fuzz: builds every tests/fuzz/fuzz_*.c as a libFuzzer target (clang,
# ASan + UBSan) against the library sources and runs each for FUZZ_SECONDS
# (default 60) on inputs up to FUZZ_MAX_LEN bytes (default 262144: large
# enough for nested documents and amplified values). make fuzz-long: 600 s
# each, inputs up to 1 MiB. FUZZ_TARGETS="manifest pickle" runs some only.
# Seeds come from tests/fuzz/seeds/NAME/ when present. Crashes are left in
# build-fuzz/crashes/NAME/; turn each into a regression test. Each target's
# closing line gives its executions ("NAME: N execs in S s").
set -e
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
SECS=${FUZZ_SECONDS:-60}
MAXLEN=${FUZZ_MAX_LEN:-262144}
B=${FUZZ_BUILD:-build-fuzz}  # one folder per concurrent run
command -v clang >/dev/null || { echo "make fuzz needs clang (libFuzzer): apt-get install clang" >&2; exit 2; }
mkdir -p $B/obj $B/crashes
PKGS=$(sed -n "s/^PKGS *:= *//p" Makefile)
CF="-g -O1 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc -fsanitize=fuzzer-no-link,address,undefined $(pkg-config --cflags $PKGS) $(mpicc --showme:compile 2>/dev/null)"
LIBS="$(pkg-config --libs $PKGS) $(mpicc --showme:link 2>/dev/null) -lpthread -lm"
objs=""
for s in $(ls src/*/*.c | grep -v "^src/cli/\|^src/report/"); do
    o=$B/obj/$(echo "$s" | tr / _ | sed "s/\.c$//").o
    clang $CF -c "$s" -o "$o"
    objs="$objs $o"
done
rc=0
for t in tests/fuzz/fuzz_*.c; do
    name=$(basename "$t" .c)
    if [ -n "${FUZZ_TARGETS:-}" ]; then
        case " $FUZZ_TARGETS " in *" ${name#fuzz_} "*) ;; *) continue ;; esac
    fi
    clang $CF -Itests/fuzz -fsanitize=fuzzer "$t" $objs -o "$B/$name" $LIBS
    corpus=$B/corpus-$name
    mkdir -p "$corpus" "$B/crashes/$name"
    [ -d "tests/fuzz/seeds/${name#fuzz_}" ] && cp -n tests/fuzz/seeds/"${name#fuzz_}"/* "$corpus"/ 2>/dev/null || true
    echo "== $name for ${SECS}s"
    "$B/$name" -max_total_time="$SECS" -max_len="$MAXLEN" -rss_limit_mb=2048 \
        -artifact_prefix="$B/crashes/$name/" "$corpus" > "$B/$name.log" 2>&1 || rc=1
    tail -n 3 "$B/$name.log"
    # libFuzzer's closing line: "Done N runs in S second(s)"
    sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/'"$name"': \1 execs in \2 s/p' "$B/$name.log"
    if [ -n "$(ls -A "$B/crashes/$name")" ]; then
        echo "$name: crashes in $B/crashes/$name"
        rc=1
    fi
done
exit $rc

#!/bin/sh
# Runs every Check suite (BUILD/tests/check_*) and every CLI test
# (tests/cli/test_*.sh). Prints the skipped tests with the reasons, the
# failed ones, and last, alone on a line (CI parsers read it):
#   N passed, N failed, N skipped
# Exits non-zero when anything failed, or when no test matched FILTER.
#   tests/run.sh BUILD [FILTER]   FILTER: substring of the test names to run
#
# A test exits 0 (passed), 77 (skipped: automake's convention) or anything
# else (failed). Skipped means it could not run, or ran only in part: it never
# counts as passed. Each test gets an empty file $DCK_SKIP_LOG where it writes
# why (TU_SKIP in tests/testutil.h, skip / skip_part in tests/cli/lib.sh);
# counting is per test binary or script, the reasons name each skipped part.
#
# Environment:
#   DCK_REQUIRE_FIXTURES=1   absent public fixtures are a failure, not a skip
#                            (.ci/run sets it: in CI they must be there)
#   DCK_SKIP_TESTS="a b"     CLI tests not run, each counted as skipped with the
#                            reason DCK_SKIP_TESTS_WHY (.ci/run: what one stage
#                            covers once is not repeated in the later ones)
#   DCK_TEST_SERIAL=1        no test runs beside the others (see BESIDE below)
#   DCK_PUBLIC_FIXTURES=DIR  the public fixtures (default: ../shared/fixtures/public
#                            beside the project root); a missing path runs the
#                            tests as on a machine without them
BUILD=${1:-build}
FILTER=${2:-}
top=$(cd "$(dirname "$0")/.." && pwd)
# DCK_DETCHECK: another detcheck to test (ci/gpu-check.sh: a wrapper that
# gives the build its libraries)
DETCHECK=${DCK_DETCHECK:-"$top/$BUILD/detcheck"}
export DETCHECK BUILD
export DCK_TOP="$top"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# Open MPI allocates at init in ways LeakSanitizer reports as leaks; the
# library's own leaks are checked by the Check suites, which never init MPI.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
passed=0; failed=0; skipped=0; failures=""; skips=""

# note_skips NAME LOGFILE: adds the reasons in LOGFILE to the list
note_skips() {
    [ -s "$2" ] || return 0
    while IFS= read -r why; do
        skips="$skips
  $1: $why"
    done < "$2"
}
# count NAME RC SKIPLOG
count() {
    case $2 in
    0) passed=$((passed+1)) ;;
    77) skipped=$((skipped+1))
        [ -s "$3" ] || echo "(no reason given)" > "$3" ;;
    *) failed=$((failed+1)); failures="$failures $1" ;;
    esac
    note_skips "$1" "$3"
}

for t in "$top/$BUILD"/tests/check_*; do
    [ -x "$t" ] || continue
    name=$(basename "$t")
    case "$name" in *"$FILTER"*) ;; *) continue ;; esac
    echo "== $name"
    skiplog=$(mktemp "${TMPDIR:-/tmp}/dck-$name.skip.XXXXXX")
    t0=$(date +%s)
    (cd "$top" && DCK_SKIP_LOG="$skiplog" "$t"); rc=$?
    echo "($(($(date +%s) - t0)) s)"
    count "$name" $rc "$skiplog"
    rm -f "$skiplog"
done
# start_cli NAME SCRIPT: runs a CLI test in its own temporary folder; its
# output, exit status and seconds go to $tmp.log and $tmp.rc.
start_cli() {
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/dck-$1.XXXXXX")
    : > "$tmp.skip"
    t0=$(date +%s)
    (cd "$tmp" && TESTTMP="$tmp" DCK_SKIP_LOG="$tmp.skip" sh "$2") > "$tmp.log" 2>&1
    echo $? > "$tmp.rc"
    # seconds per test: what keeps CI under its time limit is read off here
    echo "($(($(date +%s) - t0)) s)" >> "$tmp.log"
}
# finish_cli NAME TMP: prints and counts what start_cli left in TMP.
finish_cli() {
    rc=$(cat "$2.rc")
    case $rc in
    0) tail -n 2 "$2.log" | paste -sd' ' ;;
    77) grep -E '^(SKIP|ok): ' "$2.log" || tail -n 1 "$2.log" ;;
    *) cat "$2.log" ;;
    esac
    count "$1" "$rc" "$2.skip"
    rm -rf "$2" "$2.log" "$2.skip" "$2.rc"
}
# The longest test (the Python package's, minutes of real training scripts
# under repro and resume-check, one CPU mostly) runs beside the others when
# there are two CPUs or more: CI's first stage is minutes shorter. Its
# result is printed last. DCK_TEST_SERIAL=1 runs everything in turn.
BESIDE="test_python"
[ "${DCK_TEST_SERIAL:-0}" = 0 ] && [ "$(nproc 2> /dev/null || echo 1)" -ge 2 ] || BESIDE=""
beside_pid="" beside_tmp=""
for b in $BESIDE; do
    [ -f "$top/tests/cli/$b.sh" ] || continue
    case "$b" in *"$FILTER"*) ;; *) continue ;; esac
    beside_tmp=$(mktemp -u "${TMPDIR:-/tmp}/dck-beside.XXXXXX")
    (start_cli "$b" "$top/tests/cli/$b.sh"; echo "$tmp" > "$beside_tmp") &
    beside_pid=$!
done
for t in "$top"/tests/cli/test_*.sh; do
    [ -f "$t" ] || continue
    name=$(basename "$t" .sh)
    case "$name" in *"$FILTER"*) ;; *) continue ;; esac
    case " $BESIDE " in *" $name "*) continue ;; esac
    echo "== $name"
    case " ${DCK_SKIP_TESTS:-} " in
    *" $name "*)
        why=${DCK_SKIP_TESTS_WHY:-listed in DCK_SKIP_TESTS}
        echo "SKIP: $why"
        echo "$why" > "${TMPDIR:-/tmp}/dck-$name.skipped"
        count "$name" 77 "${TMPDIR:-/tmp}/dck-$name.skipped"
        rm -f "${TMPDIR:-/tmp}/dck-$name.skipped"
        continue
        ;;
    esac
    start_cli "$name" "$t"
    finish_cli "$name" "$tmp"
done
if [ -n "$beside_pid" ]; then
    wait "$beside_pid"
    echo "== $BESIDE (run beside the others)"
    finish_cli "$BESIDE" "$(cat "$beside_tmp")"
    rm -f "$beside_tmp"
fi
echo
[ -n "$skips" ] && echo "skipped (not run, or run only in part):$skips"
[ -n "$failures" ] && echo "failed:$failures"
[ $((passed + failed + skipped)) -gt 0 ] || echo "no test matched '$FILTER' in $top/$BUILD"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ $((passed + skipped)) -gt 0 ]

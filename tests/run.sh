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
    (cd "$top" && DCK_SKIP_LOG="$skiplog" "$t"); rc=$?
    count "$name" $rc "$skiplog"
    rm -f "$skiplog"
done
for t in "$top"/tests/cli/test_*.sh; do
    [ -f "$t" ] || continue
    name=$(basename "$t" .sh)
    case "$name" in *"$FILTER"*) ;; *) continue ;; esac
    echo "== $name"
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/dck-$name.XXXXXX")
    : > "$tmp.skip"
    (cd "$tmp" && TESTTMP="$tmp" DCK_SKIP_LOG="$tmp.skip" sh "$t") > "$tmp.log" 2>&1; rc=$?
    case $rc in
    0) tail -n 1 "$tmp.log" ;;
    77) grep -E '^(SKIP|ok): ' "$tmp.log" || tail -n 1 "$tmp.log" ;;
    *) cat "$tmp.log" ;;
    esac
    count "$name" $rc "$tmp.skip"
    rm -rf "$tmp" "$tmp.log" "$tmp.skip"
done
echo
[ -n "$skips" ] && echo "skipped (not run, or run only in part):$skips"
[ -n "$failures" ] && echo "failed:$failures"
[ $((passed + failed + skipped)) -gt 0 ] || echo "no test matched '$FILTER' in $top/$BUILD"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ $((passed + skipped)) -gt 0 ]

#!/bin/sh
# Runs every Check suite (BUILD/tests/check_*) and every CLI test
# (tests/cli/test_*.sh); prints a closing "N passed, N failed" line and exits
# non-zero when anything failed.
#   tests/run.sh BUILD [FILTER]   FILTER: substring of the test names to run
BUILD=${1:-build}
FILTER=${2:-}
top=$(cd "$(dirname "$0")/.." && pwd)
DETCHECK="$top/$BUILD/detcheck"
export DETCHECK BUILD
export DCK_TOP="$top"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# Open MPI allocates at init in ways LeakSanitizer reports as leaks; the
# library's own leaks are checked by the Check suites, which never init MPI.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
passed=0; failed=0; failures=""
for t in "$top/$BUILD"/tests/check_*; do
    [ -x "$t" ] || continue
    name=$(basename "$t")
    case "$name" in *"$FILTER"*) ;; *) continue ;; esac
    echo "== $name"
    if (cd "$top" && "$t"); then passed=$((passed+1)); else failed=$((failed+1)); failures="$failures $name"; fi
done
for t in "$top"/tests/cli/test_*.sh; do
    [ -f "$t" ] || continue
    name=$(basename "$t" .sh)
    case "$name" in *"$FILTER"*) ;; *) continue ;; esac
    echo "== $name"
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/dck-$name.XXXXXX")
    if (cd "$tmp" && TESTTMP="$tmp" sh "$t") > "$tmp.log" 2>&1; then
        passed=$((passed+1)); tail -n 1 "$tmp.log"
    else
        failed=$((failed+1)); failures="$failures $name"; cat "$tmp.log"
    fi
    rm -rf "$tmp" "$tmp.log"
done
echo
[ -n "$failures" ] && echo "failed:$failures"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

# Helpers for CLI tests. Sourced by tests/cli/test_*.sh, which run in a fresh
# temporary directory ($TESTTMP) with $DETCHECK pointing at the binary.
set -u
DCK_CHECKS=0
fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { DCK_CHECKS=$((DCK_CHECKS+1)); }
# expect_exit CODE CMD...: runs CMD, stdout to out.txt, stderr to err.txt
expect_exit() {
    want=$1; shift
    set +e; "$@" > out.txt 2> err.txt; got=$?; set -e
    [ "$got" -eq "$want" ] || { echo "--- stdout"; cat out.txt; echo "--- stderr"; cat err.txt; fail "exit $got, wanted $want: $*"; }
    ok
}
# expect_grep PATTERN FILE
expect_grep() { grep -q -- "$1" "$2" || { cat "$2"; fail "'$1' not in $2"; }; ok; }
expect_no_grep() { ! grep -q -- "$1" "$2" || { cat "$2"; fail "'$1' unexpectedly in $2"; }; ok; }
done_ok() { echo "ok: $DCK_CHECKS checks"; }
set -e

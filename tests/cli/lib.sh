# Helpers for CLI tests. Sourced by tests/cli/test_*.sh, which run in a fresh
# temporary directory ($TESTTMP) with $DETCHECK pointing at the binary.
#
# Skips: a test never passes without checking. A test that cannot run at all
# calls `skip "why"`: it prints "SKIP: why", appends the reason to the file
# named by $DCK_SKIP_LOG (tests/run.sh sets it) and exits 77, automake's
# "skipped". A test that can run only in part calls `skip_part "why"` for the
# part it leaves out and goes on; done_ok then exits 77 instead of 0, so the
# test counts as skipped (a failure still fails it) and run.sh lists each
# reason. `need_public_fixtures` sets FIX to ../shared/fixtures/public beside
# the project root ($DCK_PUBLIC_FIXTURES when set: point it at a missing path
# to test as on a machine without them) and skips when it is absent, or fails
# when $DCK_REQUIRE_FIXTURES is set (.ci/run sets it: in CI they must be
# there). done_ok fails a test that ran no check.
set -u
DCK_CHECKS=0
DCK_PARTS_SKIPPED=0
fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { DCK_CHECKS=$((DCK_CHECKS+1)); }
skip_note() { echo "SKIP: $*"; [ -z "${DCK_SKIP_LOG:-}" ] || echo "$*" >> "$DCK_SKIP_LOG"; }
skip() { skip_note "$*"; exit 77; }
skip_part() { skip_note "$*"; DCK_PARTS_SKIPPED=$((DCK_PARTS_SKIPPED+1)); }
need_public_fixtures() {
    FIX="${DCK_PUBLIC_FIXTURES:-$DCK_TOP/../shared/fixtures/public}"
    [ -d "$FIX" ] && return 0
    case "${DCK_REQUIRE_FIXTURES:-0}" in
    "" | 0) skip "public fixtures $FIX absent (DCK_REQUIRE_FIXTURES=1 makes this a failure)" ;;
    *) fail "public fixtures $FIX absent and DCK_REQUIRE_FIXTURES is set" ;;
    esac
}
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
done_ok() {
    [ "$DCK_CHECKS" -gt 0 ] || fail "no check ran"
    if [ "$DCK_PARTS_SKIPPED" -gt 0 ]; then
        echo "ok: $DCK_CHECKS checks, $DCK_PARTS_SKIPPED part(s) skipped"
        exit 77
    fi
    echo "ok: $DCK_CHECKS checks"
}
set -e
# verdict WANT_EXIT REPORT_BASE: bisect's JUnit and Markdown reports
# (REPORT_BASE.xml, .md) state the verdict of the exit status, never exit 1
# with failures="0" and ":white_check_mark: OK" (detcheck(1), CI REPORTS)
verdict() {
    python3 - "$1" "$2.xml" "$2.md" <<'PY2' || { cat "$2.xml" "$2.md"; fail "$2: the reports' verdict is not exit $1"; }
import sys, xml.etree.ElementTree as ET
want, xml, md = int(sys.argv[1]), sys.argv[2], open(sys.argv[3]).read()
s = ET.parse(xml).getroot().find("testsuite")
fails = int(s.get("failures")) + int(s.get("errors"))
assert (fails > 0) == (want == 1), (want, fails)
first = md.split("\n")[0]
assert first == ("### :x: detcheck bisect: DIFFERENT" if want else "### :white_check_mark: detcheck bisect: OK"), first
PY2
    ok
}

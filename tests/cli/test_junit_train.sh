# --junit and --markdown on resume-check (a test case per check: killed
# after / killed while writing, each resumed) and bisect (the trajectory,
# then a test case per tensor of the first differing checkpoint); the XML
# validates against tests/junit.xsd with xmllint.
. "$DCK_TOP/tests/cli/lib.sh"
command -v xmllint > /dev/null 2>&1 || skip "xmllint absent (Debian: libxml2-utils; make deps installs it)"
XSD="$DCK_TOP/tests/junit.xsd"
valid() {
    xmllint --noout --schema "$XSD" "$1" 2> xmllint.err || { cat xmllint.err "$1"; fail "$1 does not validate against tests/junit.xsd"; }
    ok
}
# counts FILE: "tests failures errors" of the suite, checked against its cases
counts() {
    python3 - "$1" <<'PY'
import sys, xml.etree.ElementTree as ET
s = ET.parse(sys.argv[1]).getroot().find("testsuite")
cases = s.findall("testcase")
n = (len(cases), sum(c.find("failure") is not None for c in cases), sum(c.find("error") is not None for c in cases))
assert (int(s.get("tests")), int(s.get("failures")), int(s.get("errors"))) == n, n
print(*n)
PY
}
CFG="--vocab 64 --width 32 --layers 2 --heads 2 --seq 16 --batch 1 --microbatches 2"
T=model.blocks.0.mlp.fc.weight

# resume-check, identical: 2 checks per kill point, all passing
expect_exit 0 $DETCHECK resume-check $CFG --steps 4 --at 2 --junit rc.xml --markdown rc.md -q
valid rc.xml
[ "$(counts rc.xml)" = "2 0 0" ] || fail "rc.xml: $(counts rc.xml)"
ok
expect_grep 'classname="detcheck.resume-check" name="killed_after_2"' rc.xml
expect_grep 'classname="detcheck.resume-check" name="killed_during_4"' rc.xml
expect_grep '^### :white_check_mark: detcheck resume-check: OK' rc.md
# different: the failure names the step and the tensor
expect_exit 1 $DETCHECK resume-check $CFG --steps 4 --at 2 --resume-flip-bit 4:$T:7 --workdir rcw --junit=rcd.xml -q
valid rcd.xml
[ "$(counts rcd.xml)" = "2 2 0" ] || fail "rcd.xml: $(counts rcd.xml)"
ok
expect_grep "<failure message=\"first differing step 4: .*final checkpoint: 1 of [0-9]* tensors differ, first $T (digest)\" type=\"different\">" rcd.xml
expect_grep '<property name="workdir" value="rcw"/>' rcd.xml
expect_exit 2 $DETCHECK resume-check $CFG --steps 4 --at 2 --junit
expect_grep 'needs a file name' err.txt

# bisect
B="$CFG --steps 5 --ckpt-every 1 -q"
expect_exit 0 $DETCHECK train $B --out a
expect_exit 0 $DETCHECK train $B --out b --flip-bit 3:$T:5
expect_exit 1 $DETCHECK bisect a b --junit bi.xml --markdown bi.md
valid bi.xml
python3 - bi.xml "$T" <<'PY' || fail "bisect's report"
import sys, xml.etree.ElementTree as ET
s = ET.parse(sys.argv[1]).getroot().find("testsuite")
cases = s.findall("testcase")
assert cases[0].get("name") == "trajectory", cases[0].get("name")
f = cases[0].find("failure")
assert f is not None and f.get("message").startswith("first differing step 3: "), f
failing = [c for c in cases[1:] if c.find("failure") is not None]
assert [c.get("name") for c in failing] == [sys.argv[2]], [c.get("name") for c in failing]
assert failing[0].get("classname") == "detcheck.bisect.step_3.weights", failing[0].get("classname")
msg = failing[0].find("failure").get("message")
assert "in the run B" in msg and "in the run A" in msg, msg
assert len(cases) > 10  # every tensor of that checkpoint
PY
ok
expect_grep "replay" bi.xml
expect_grep '^### :x: detcheck bisect: DIFFERENT' bi.md
expect_exit 0 $DETCHECK bisect a a --junit same.xml
valid same.xml
[ "$(counts same.xml)" = "1 0 0" ] || fail "same.xml: $(counts same.xml)"
ok
done_ok

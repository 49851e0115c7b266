# --junit FILE on verify and diff: JUnit XML that validates against
# tests/junit.xsd (the Ant/Jenkins junit-10 shape GitHub Actions reporters,
# GitLab and Jenkins read) with xmllint, one test case per tensor, failures
# that name the tensor and what differs; names with UTF-8, XML's special
# characters, control characters and U+FFFE (no XML character) survive as
# text; the file is written atomically; a bad path is exit 2 naming it.
# resume-check and bisect: tests/cli/test_junit_train.sh.
. "$DCK_TOP/tests/cli/lib.sh"
command -v xmllint > /dev/null 2>&1 || skip "xmllint absent (Debian: libxml2-utils; make deps installs it)"
XSD="$DCK_TOP/tests/junit.xsd"
valid() {
    xmllint --noout --schema "$XSD" "$1" 2> xmllint.err || { cat xmllint.err "$1"; fail "$1 does not validate against tests/junit.xsd"; }
    ok
}
# report FILE: "tests failures errors" from the suite's attributes, checked
# against the test cases the file holds
report() {
    python3 - "$1" <<'PY'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
assert root.tag == "testsuites", root.tag
suites = root.findall("testsuite")
assert len(suites) == 1
s = suites[0]
cases = s.findall("testcase")
fails = sum(1 for c in cases if c.find("failure") is not None)
errs = sum(1 for c in cases if c.find("error") is not None)
for e in (root, s):
    got = (int(e.get("tests")), int(e.get("failures")), int(e.get("errors")))
    assert got == (len(cases), fails, errs), (e.tag, got, (len(cases), fails, errs))
print(len(cases), fails, errs)
PY
}

# mk FILE a|b: safetensors written with Python's struct. b: the UTF-8 tensor
# and the tensor with XML characters differ, the control-character one has
# another shape, "plain" is missing and "extra" is new. c: as a, but the
# UTF-8 tensor differs by 0.5 in one element.
mk() {
python3 - "$1" "$2" <<'PY'
import json, struct, sys
path, variant = sys.argv[1], sys.argv[2]
names = ["model.layers.0.\u00fcn\u00ef.\u5c42.\U0001F642.weight",
         "model.layers.1.esc<a>&\"'].weight",
         "model.layers.2.ctl\x01\x1b[31m\x7f.weight",
         "model.layers.3.nonchar\ufffe.weight",
         "model.layers.4.plain.weight"]
if variant == "b":
    names.remove("model.layers.4.plain.weight")
    names.append("model.layers.5.extra.weight")
hdr, data, pos = {}, bytearray(), 0
for k, name in enumerate(names):
    n = 8 if variant == "b" and k == 2 else 4
    hdr[name] = {"dtype": "F32", "shape": [n], "data_offsets": [pos, pos + 4 * n]}
    vals = [float(k + i) for i in range(n)]
    if (variant == "b" and k in (0, 1)) or (variant == "c" and k == 0):
        vals[2] += 0.5
    data += struct.pack("<%df" % n, *vals)
    pos += 4 * n
h = json.dumps(hdr).encode()
open(path, "wb").write(struct.pack("<Q", len(h)) + h + data)
PY
}
mk a.safetensors a
mk b.safetensors b
mk c.safetensors c
expect_exit 0 "$DETCHECK" hash -q -o a.yaml a.safetensors

# the schema refuses what consumers would choke on: a test, can fail
printf '<?xml version="1.0"?>\n<testsuites tests="1" failures="0" errors="0"><testsuite name="x" failures="0" errors="0" time="0"/></testsuites>\n' > no-tests.xml
! xmllint --noout --schema "$XSD" no-tests.xml 2> /dev/null || fail "the schema takes a testsuite without tests="
ok
printf '<?xml version="1.0"?>\n<testsuites tests="1" failures="0" errors="0"><testsuite name="x" tests="1" failures="0" errors="0" time="0"><testcase classname="c" name="a\001b" time="0"/></testsuite></testsuites>\n' > raw-ctl.xml
! xmllint --noout raw-ctl.xml 2> /dev/null || fail "xmllint takes a raw control character"
ok

# verify, identical: one passing case per tensor
expect_exit 0 "$DETCHECK" verify --golden a.yaml a.safetensors --junit same.xml
valid same.xml
[ "$(report same.xml)" = "5 0 0" ] || fail "same.xml: $(report same.xml), wanted 5 cases, 0 failures"
ok
expect_grep 'classname="detcheck.verify.weights" name="model.layers.4.plain.weight"' same.xml
expect_grep '<property name="golden" value="a.yaml"/>' same.xml

# verify, different: the failures name the tensor and what differs
expect_exit 1 "$DETCHECK" verify --golden a.yaml b.safetensors --junit=diff.xml -q
[ ! -s out.txt ] || fail "-q printed: $(cat out.txt)"
ok
valid diff.xml
[ "$(report diff.xml)" = "6 5 0" ] || fail "diff.xml: $(report diff.xml), wanted 6 cases, 5 failures"
ok
python3 - diff.xml <<'PY' || fail "diff.xml: names or messages"
import sys, xml.etree.ElementTree as ET
s = ET.parse(sys.argv[1]).getroot().find("testsuite")
got = {c.get("name"): c.find("failure") for c in s.findall("testcase")}
# control characters as \xNN text and U+FFFE as \u{fffe}, as on a terminal
want = {"model.layers.0.\u00fcn\u00ef.\u5c42.\U0001F642.weight": ("digest", "digest "),
        "model.layers.1.esc<a>&\"'].weight": ("digest", "digest "),
        "model.layers.2.ctl\\x01\\x1b[31m\\x7f.weight": ("shape", "shape [8] in the checkpoint, [4] in the golden"),
        "model.layers.3.nonchar\\u{fffe}.weight": None,
        "model.layers.4.plain.weight": ("missing", "missing (in the golden, not in the checkpoint)"),
        "model.layers.5.extra.weight": ("extra", "extra (in the checkpoint, not in the golden)")}
assert set(got) == set(want), sorted(got)
for name, w in want.items():
    f = got[name]
    if w is None:
        assert f is None, name
        continue
    assert f is not None, name
    assert f.get("type") == w[0], (name, f.get("type"))
    msg = f.get("message")
    assert msg.startswith(name + ": ") and w[1] in msg, msg
    assert f.text.startswith(msg), f.text
PY
ok

# verify --exclude: the golden tensors left out are skipped cases
if "$DETCHECK" verify --help | grep -q -- '--exclude GLOB'; then
    expect_exit 1 "$DETCHECK" verify --golden a.yaml b.safetensors --exclude 'model.layers.4.*' --junit ex.xml -q
    valid ex.xml
    [ "$(report ex.xml)" = "6 4 0" ] || fail "ex.xml: $(report ex.xml), wanted 6 cases, 4 failures"
    ok
    expect_grep 'skipped="1"' ex.xml
    expect_grep 'name="model.layers.4.plain.weight" time="0">' ex.xml
    expect_grep '<skipped message="excluded by --exclude model.layers.4.\*"/>' ex.xml
else
    skip_part "verify has no --exclude yet"
fi

# a tied weight (transformers writes lm_head.weight into .bin files only):
# the extra tensor's failure says what it shares storage with
L="$DCK_TOP/tests/fixtures/layouts"
if [ -d "$L/hf_bin" ] && "$DETCHECK" verify --help | grep -q -- '--ignore-aliases'; then
    expect_exit 0 "$DETCHECK" hash -q -o st.yaml "$L/hf_bin.safetensors"
    expect_exit 1 "$DETCHECK" verify --golden st.yaml "$L/hf_bin" --junit tied.xml -q
    valid tied.xml
    expect_grep 'message="lm_head.weight: extra (in the checkpoint, not in the golden); shares storage with transformer.wte.weight (a tied weight? --ignore-aliases)" type="extra"' tied.xml
else
    skip_part "no tests/fixtures/layouts/hf_bin or verify --ignore-aliases"
fi

# diff: a case per tensor, element figures in the failure
expect_exit 1 "$DETCHECK" diff a.safetensors b.safetensors --junit d.xml
valid d.xml
[ "$(report d.xml)" = "6 5 0" ] || fail "d.xml: $(report d.xml), wanted 6 cases, 5 failures"
ok
expect_grep 'classname="detcheck.diff.weights" name="model.layers.1.esc&lt;a&gt;&amp;&quot;&apos;\].weight"' d.xml
expect_grep 'message="model.layers.0.ünï.层.🙂.weight: 1 of 4 elements differ; max abs 0.5, max rel 0.2, max ULP 2097152, rel L2 0.124; first at \[2\]"' d.xml
expect_grep 'type="missing_in_b"' d.xml
# within the tolerances: the tensors pass, the figures kept as output
expect_exit 0 "$DETCHECK" diff --atol 1 a.safetensors c.safetensors --junit e.xml
valid e.xml
[ "$(report e.xml)" = "5 0 0" ] || fail "e.xml: $(report e.xml), wanted 5 cases, 0 failures"
ok
expect_grep '<system-out>model.layers.0.ünï.层.🙂.weight: 1 of 4 elements differ (0 beyond the tolerances)' e.xml
# manifests: digests only
expect_exit 0 "$DETCHECK" hash -q -o b.yaml b.safetensors
expect_exit 1 "$DETCHECK" diff a.yaml b.yaml --junit m.xml
valid m.xml
expect_grep 'digest [0-9a-f]\{32\} in A, [0-9a-f]\{32\} in B' m.xml

# a backslash is escaped as the Markdown summary escapes it: the name
# "w\x01" (five characters) and "w" + byte 0x01 read differently (detcheck(1), CI REPORTS)
python3 - <<'PY'
import json, struct
for path, v in (("bs_a.safetensors", 0.0), ("bs_b.safetensors", 1.0)):
    names = ["w\\x01", "w\x01", "v\\\\"]
    hdr = {n: {"dtype": "F32", "shape": [1], "data_offsets": [4 * k, 4 * k + 4]} for k, n in enumerate(names)}
    h = json.dumps(hdr).encode()
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + struct.pack("<3f", v, v, v))
PY
expect_exit 1 "$DETCHECK" diff bs_a.safetensors bs_b.safetensors --junit bs.xml
valid bs.xml
python3 - bs.xml <<'PY' || fail "bs.xml: backslashes and control bytes read alike"
import sys, xml.etree.ElementTree as ET
names = sorted(c.get("name") for c in ET.parse(sys.argv[1]).getroot().iter("testcase"))
assert names == ["v\\\\\\\\", "w\\\\x01", "w\\x01"], names
PY
ok

# written atomically: the old report stays whole until the new one is
# complete, no temporary is left behind
cp diff.xml keep.xml
expect_exit 1 "$DETCHECK" verify --golden a.yaml b.safetensors --junit keep.xml -q
valid keep.xml
[ "$(ls -a | grep -c 'keep.xml.')" -eq 0 ] || { ls -a; fail "a temporary file is left"; }
ok
# a report path in a folder that does not exist: exit 2, the message names it
expect_exit 2 "$DETCHECK" verify --golden a.yaml a.safetensors --junit nodir/r.xml -q
expect_grep "nodir/r.xml" err.txt
expect_exit 2 "$DETCHECK" verify --golden a.yaml a.safetensors --junit
expect_grep "junit" err.txt
done_ok

# examples/ci: the GitHub Actions workflow and the GitLab CI job parse as
# YAML and call examples/ci/gate.sh after building detcheck; their JUnit
# paths are the one the gate writes. The gate itself runs here: trains the
# built-in model, verifies against the committed golden.yaml (exit 0, a
# valid JUnit report, a Markdown summary, $GITHUB_STEP_SUMMARY honoured),
# and fails (exit 1, the tensor named) against a golden with one digest
# changed.
. "$DCK_TOP/tests/cli/lib.sh"
EX="$DCK_TOP/examples/ci"
python3 -c 'import yaml' 2> /dev/null || skip "python3 yaml absent (Debian: python3-yaml; make deps installs it)"
command -v xmllint > /dev/null 2>&1 || skip "xmllint absent (Debian: libxml2-utils; make deps installs it)"

python3 - "$EX" <<'PY' || fail "examples/ci YAML"
import os, sys, yaml
ex = sys.argv[1]
junit = "detcheck-gate/detcheck-junit.xml"
# GitHub Actions: a push/pull_request trigger ("on" reads as True in YAML
# 1.1), a job whose steps build, run the gate, and publish the report
gh = yaml.safe_load(open(os.path.join(ex, "github-actions.yml")))
on = gh.get("on", gh.get(True))
assert "push" in on and "pull_request" in on, on
(job,) = gh["jobs"].values()
assert job["runs-on"].startswith("ubuntu"), job["runs-on"]
steps = job["steps"]
runs = [s.get("run", "") for s in steps]
build = next(i for i, r in enumerate(runs) if r.startswith("make "))
gate = next(i for i, r in enumerate(runs) if "examples/ci/gate.sh" in r)
assert build < gate, runs
assert steps[gate]["env"]["DETCHECK"] == "build/detcheck", steps[gate]
assert steps[gate]["env"]["GATE_OUT"] + "/detcheck-junit.xml" == junit
uses = [s for s in steps if "uses" in s]
assert uses[0]["uses"].startswith("actions/checkout@"), uses[0]
published = [s for s in steps if s.get("if") == "always()"]
assert published and all(junit in str(s["with"]) for s in published), published
# GitLab: a job that builds, runs the gate, and reports its JUnit file
gl = yaml.safe_load(open(os.path.join(ex, "gitlab-ci.yml")))
(name, job), = gl.items()
script = job["script"]
b = next(i for i, l in enumerate(script) if l.startswith("make "))
g = next(i for i, l in enumerate(script) if "examples/ci/gate.sh" in l)
assert b < g, script
assert job["variables"]["DETCHECK"] == "build/detcheck"
assert job["variables"]["GATE_OUT"] + "/detcheck-junit.xml" == junit
assert job["artifacts"]["reports"]["junit"] == junit, job["artifacts"]
assert job["artifacts"]["when"] == "always"
# the golden manifest beside them
assert os.path.isfile(os.path.join(ex, "golden.yaml"))
PY
ok

# the gate, as the jobs run it (from the project root, DETCHECK, GATE_OUT)
unset GITHUB_STEP_SUMMARY
out="$TESTTMP/gate"
( cd "$DCK_TOP" && DETCHECK="$DETCHECK" GATE_OUT="$out" sh examples/ci/gate.sh ) > out.txt 2> err.txt ||
    { cat out.txt err.txt; fail "gate.sh against the committed golden.yaml: exit $?"; }
ok
expect_grep '^OK: [0-9]* tensors identical to .*golden.yaml' out.txt
xmllint --noout --schema "$DCK_TOP/tests/junit.xsd" "$out/detcheck-junit.xml" 2> x.err || { cat x.err; fail "gate's JUnit report"; }
ok
expect_grep 'failures="0"' "$out/detcheck-junit.xml"
expect_grep 'name="model.blocks.0.attn.qkv.weight"' "$out/detcheck-junit.xml"
expect_grep '^### :white_check_mark: detcheck verify: OK' "$out/summary.md"
# on GitHub the summary goes to $GITHUB_STEP_SUMMARY
( cd "$DCK_TOP" && DETCHECK="$DETCHECK" GATE_OUT="$out" GITHUB_STEP_SUMMARY="$TESTTMP/step.md" sh examples/ci/gate.sh ) > /dev/null 2>&1 ||
    fail "gate.sh with GITHUB_STEP_SUMMARY"
expect_grep 'detcheck verify: OK' "$TESTTMP/step.md"

# a golden that does not match (written from a run with one bit flipped in
# one weight after the last step): the gate fails and names the tensor
mkdir ex
cp "$EX/gate.sh" ex/
T=model.blocks.1.mlp.fc.weight
expect_exit 0 "$DETCHECK" train --steps 10 --ckpt-every 10 --seed 1 --threads 2 --out flip -q --flip-bit 10:$T:3
expect_exit 0 "$DETCHECK" hash -q --no-files -o ex/golden.yaml flip/step_00000010
set +e
DETCHECK="$DETCHECK" GATE_OUT="$TESTTMP/bad" sh ex/gate.sh > out.txt 2> err.txt
rc=$?
set -e
[ "$rc" -eq 1 ] || { cat out.txt err.txt; fail "gate.sh against a changed golden: exit $rc, wanted 1"; }
ok
expect_grep '^DIFFERENT: 1 difference against .*; first: model.blocks.1.mlp.fc.weight' out.txt
expect_grep "<failure message=\"$T: digest [0-9a-f]\{32\} in the checkpoint, [0-9a-f]\{32\} in the golden (F32 \[64, 256\])\" type=\"digest\">" "$TESTTMP/bad/detcheck-junit.xml"
expect_grep 'tests="92" failures="1" errors="0"' "$TESTTMP/bad/detcheck-junit.xml"
expect_grep '^### :x: detcheck verify: DIFFERENT' "$TESTTMP/bad/summary.md"
done_ok

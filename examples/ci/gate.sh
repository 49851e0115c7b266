#!/bin/sh
# The CI gate of examples/ci (github-actions.yml, gitlab-ci.yml call it):
# trains detcheck's built-in deterministic model for a few steps, then
# verifies its last checkpoint, bit for bit, against golden.yaml, the
# manifest committed beside this script. Exit 0 identical, 1 different
# (the job fails), 2 trouble. tests/cli/test_junit_ci_example.sh runs it.
#
#   sh examples/ci/gate.sh            run the gate
#   sh examples/ci/gate.sh --update   rewrite golden.yaml from this build
#                                     (when a change of the bits is meant)
#
# Environment:
#   DETCHECK   the detcheck binary (default: build/detcheck of this tree)
#   GATE_OUT   folder for the run and the reports (default: detcheck-gate):
#              GATE_OUT/detcheck-junit.xml (JUnit: one test case per tensor)
#              and GATE_OUT/summary.md (Markdown)
#   GITHUB_STEP_SUMMARY  when set (GitHub Actions), the Markdown summary
#              goes there instead, onto the run's summary page
set -eu
here=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)
detcheck=${DETCHECK:-$here/../../build/detcheck}
out=${GATE_OUT:-detcheck-gate}
# The job: 10 steps of the default model, 2 threads (the bits do not depend
# on the thread count; see detcheck-train(1)), a checkpoint at the end.
steps=10
rm -rf "$out/run"
mkdir -p "$out"
"$detcheck" train --steps "$steps" --ckpt-every "$steps" --seed 1 --threads 2 --out "$out/run" -q
ckpt=$out/run/step_$(printf '%08d' "$steps")
if [ "${1:-}" = "--update" ]; then
    # hashed from GATE_OUT, so the manifest records run/step_N, not a path
    # of this machine
    case $detcheck in /*) ;; */*) detcheck=$(pwd)/$detcheck ;; esac
    (cd "$out" && "$detcheck" hash -q --no-files -o "$here/golden.yaml" "run/step_$(printf '%08d' "$steps")")
    echo "gate: wrote $here/golden.yaml"
    exit 0
fi
summary=${GITHUB_STEP_SUMMARY:-$out/summary.md}
exec "$detcheck" verify --golden "$here/golden.yaml" --junit "$out/detcheck-junit.xml" \
    --markdown "$summary" "$ckpt"

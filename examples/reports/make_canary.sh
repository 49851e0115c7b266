#!/bin/sh
# The example canary page: canary.html, a job of 64 GPUs (8 hosts of 8)
# where one GPU differs, rank 21 (gpu-node-002, GPU 5), at step 3. A real
# job of that size needs a cluster, so the report is synthetic, written by
# tests/html_canary_synth.c through the code `detcheck canary --html` runs.
#
#   DETCHECK=build/detcheck sh examples/reports/make_canary.sh OUTDIR [SYNTH]
#
# SYNTH: the synthetic report's program (make tests-built builds it),
# by default tests/html_canary_synth beside $DETCHECK.
set -eu
out=${1:?usage: make_canary.sh OUTDIR [SYNTH]}
synth=${2:-$(dirname "${DETCHECK:-build/detcheck}")/tests/html_canary_synth}
[ -x "$synth" ] || { echo "make_canary.sh: $synth is not built (make tests-built)" >&2; exit 2; }
mkdir -p "$out"
"$synth" --html "$out/canary.html" 64 8 21
echo "$out/canary.html"

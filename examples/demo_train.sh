#!/bin/sh
# Part of make demo (called by examples/demo.sh with the binary and a work
# directory): the built-in deterministic training loop.
#   5. train 20 steps with a checkpoint every 5
#   6. resume-check it: killed after a checkpoint, killed while writing one,
#      resumed (on another number of ranks when mpirun is there), bitwise
#   7. hash the last checkpoint into a golden manifest and verify it; with
#      mpirun, the same run on 2 ranks verifies against it too
set -e
D=$1
work=$2
cd "$work"
run() { echo "\$ detcheck $*"; "$D" "$@"; }
if [ "$(id -u)" -eq 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
MPI=""
if command -v mpirun > /dev/null 2>&1; then MPI="mpirun --oversubscribe -np"; fi

echo "== 6. train a small transformer 20 steps, a checkpoint every 5"
echo "\$ detcheck train --steps 20 --ckpt-every 5 --out run"
"$D" train --steps 20 --ckpt-every 5 --out run > train.txt
sed -n '1,2p' train.txt; echo "..."; sed -n '19,20p' train.txt
ls run run/step_00000020 | sed 's/^/   /'
head -n 1 run/trajectory.jsonl | sed 's/^/   /'
echo
echo "== 7. kill it (SIGKILL) after checkpoint 10 and while writing 15; resume; compare bitwise"
if [ -n "$MPI" ]; then
    run resume-check --steps 20 --at 10 --ckpt-every 5 --launcher "$MPI 2" --resume-launcher "$MPI 4"
else
    run resume-check --steps 20 --at 10 --ckpt-every 5
fi
echo
echo "== 8. hash the last checkpoint into a golden manifest and verify it"
run hash -q -o golden-train.yaml run/step_00000020
grep '^root:' golden-train.yaml | sed 's/^/   /'
run verify --golden golden-train.yaml run/step_00000020
if [ -n "$MPI" ]; then
    echo "\$ $MPI 2 detcheck train --steps 20 --out run2 -q"
    $MPI 2 "$D" train --steps 20 --out run2 -q
    run verify --golden golden-train.yaml run2/step_00000020
fi

#!/bin/sh
# make bench: runs every bench/bench_*.sh; each prints its figures and ratios
# against a named peer measured in the same run.
BUILD=${1:-build}
top=$(cd "$(dirname "$0")/.." && pwd)
export DETCHECK="$top/$BUILD/detcheck" BUILD DCK_TOP="$top"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rc=0
for b in "$top"/bench/bench_*.sh; do
    echo "== $(basename "$b" .sh)"
    sh "$b" || rc=1
    echo
done
exit $rc

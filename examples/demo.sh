#!/bin/sh
# make demo: the main job of detcheck on its built-in example.
#   1. write a small sample checkpoint (unsharded, and the same sharded 2 ways)
#   2. hash it into a golden manifest
#   3. verify the sharded copy against it (same digests, whatever the layout)
#   4. change one element in a copy and watch verify catch it
set -e
BUILD=${1:-build}
top=$(cd "$(dirname "$0")/.." && pwd)
D="$top/$BUILD/detcheck"
work=$(mktemp -d "${TMPDIR:-/tmp}/detcheck-demo.XXXXXX")
trap 'rm -rf "$work"' EXIT
cc -std=c11 -O2 -I"$top/include" -o "$work/sample_checkpoint" "$top/examples/sample_checkpoint.c" \
    "$top/$BUILD/libdetcheck.a" $(cat "$top/$BUILD/ldlibs.txt")
cd "$work"
run() { echo "\$ detcheck $*"; "$D" "$@"; }

echo "== 1. a sample checkpoint: 2 layers of BF16 weights, AdamW moments, an RNG state"
./sample_checkpoint ckpt
ls -l ckpt ckpt/sharded | sed 's/^/   /'
echo
echo "== 2. hash it into a golden manifest"
run hash -o golden.yaml ckpt/model.safetensors
sed -n '1,12p' golden.yaml
echo "   ..."
echo
echo "== 3. the same tensors sharded 2 ways give the same digests"
run verify --golden golden.yaml ckpt/sharded
echo
echo "== 4. flip one bit of one element in a copy"
cp ckpt/model.safetensors changed.safetensors
# byte 5000 of the data region lies in model.layers.0.mlp.weight
hl=$(od -An -tu4 -N4 changed.safetensors | tr -d ' ')
off=$((8 + hl + 5000))
b=$(od -An -tu1 -j $off -N1 changed.safetensors | tr -d ' ')
printf "$(printf '\\%03o' $((b ^ 1)))" | dd of=changed.safetensors bs=1 seek=$off conv=notrunc 2>/dev/null
set +e
run verify --golden golden.yaml changed.safetensors
rc=$?
set -e
echo "   (exit status $rc: 0 same, 1 different, 2 trouble)"
[ "$rc" -eq 1 ] || { echo "demo: verify did not catch the change" >&2; exit 1; }
echo
echo "== 5. where, and by how much: diff the two layer by layer"
set +e
run diff ckpt/sharded changed.safetensors
rc=$?
set -e
[ "$rc" -eq 1 ] || { echo "demo: diff did not report the change" >&2; exit 1; }
if [ -x "$top/examples/demo_train.sh" ] || [ -f "$top/examples/demo_train.sh" ]; then
    echo
    sh "$top/examples/demo_train.sh" "$D" "$work"
fi
echo
echo "demo: done"

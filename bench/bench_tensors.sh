#!/bin/sh
# Cost per tensor (README Performance, rows 1 and 2, and the tensor scaling runs).
#   row 1: hash of a Hugging Face model.safetensors.index.json naming N
#          tensors over 8 shards vs hash of the same 8 shards passed without
#          the index (CPU time; goal <= 1.3x)
#   row 2: hash of one file of N tiny tensors (16 F32 each) vs one file of one
#          tensor of the same data size: CPU time per tensor beyond it (goal
#          <= 2 us per tensor)
#   scale-tensors: hash of an index of 25k/50k/100k/200k tensors over 8
#          shards, time per tensor at each size (goal: linear)
# Environment (besides bench/lib.sh's):
#   BENCH_INDEX_TENSORS=50000  BENCH_TINY_TENSORS=100000  BENCH_TENSOR_ELEMS=16
#   BENCH_SCALE_TENSORS="25000 50000 100000 200000"
. "$(dirname "$0")/lib.sh"
bench_init tensors
NIDX=${BENCH_INDEX_TENSORS:-$(bench_size 50000 5000)}
NTINY=${BENCH_TINY_TENSORS:-$(bench_size 100000 10000)}
ELEMS=${BENCH_TENSOR_ELEMS:-16}
SIZES=${BENCH_SCALE_TENSORS:-$(bench_size "25000 50000 100000 200000" "2000 4000 8000 16000")}
G=$work/bench_gen
bench_cc "$G" "$top/bench/bench_gen.c"

# ---- row 1
t1="HF index, $NIDX tensors over 8 shards vs the shards without it"
bench_header 1 "$t1"
"$G" shards "$work/r1" "$NIDX" 8 "$ELEMS" || exit 2
A_LABEL="detcheck hash model.safetensors.index.json" A_CMD="\"\$D\" hash -q \"$work/r1/model.safetensors.index.json\""
B_LABEL="detcheck hash of the 8 shards" B_CMD="\"\$D\" hash -q \"$work/r1\"/model-*.safetensors"
if bench_pair 1 5 && bench_same_tensors 1; then
    bench_ratio 1 "$t1" cpu 1.3
else
    bench_row_fail 1 "$t1"
fi
rm -rf "$work/r1"

# ---- row 2
t2="one file of $NTINY tensors of $ELEMS F32, per tensor beyond 1 tensor of the same size"
bench_header 2 "$t2"
"$G" tensors "$work/tiny.safetensors" "$NTINY" "$ELEMS" || exit 2
"$G" one "$work/one.safetensors" $((NTINY * ELEMS)) || exit 2
A_LABEL="detcheck hash, $NTINY tensors" A_CMD="\"\$D\" hash -q \"$work/tiny.safetensors\""
B_LABEL="detcheck hash, 1 tensor" B_CMD="\"\$D\" hash -q \"$work/one.safetensors\""
if bench_pair 2 5; then
    bench_per_unit 2 "$t2" cpu "$NTINY" 2 tensor
else
    bench_row_fail 2 "$t2"
fi
rm -f "$work/tiny.safetensors" "$work/one.safetensors"

# ---- scaling
scale_gen() { "$G" shards "$work/scale" "$1" 8 "$ELEMS"; }
scale_cmd() { echo "\"\$D\" hash -q \"$work/scale/model.safetensors.index.json\""; }
bench_scale scale-tensors "hash of an HF index over 8 shards, $ELEMS F32 per tensor" tensor "$SIZES" 1.5

bench_finish

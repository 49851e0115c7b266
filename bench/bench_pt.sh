#!/bin/sh
# detcheck hash of a 1 GiB torch.save .pt vs the same tensors as safetensors,
# in the same run, from the page cache (CPU time; goal: .pt within 1.1x). The
# files are written by bench/bench_pt_gen.py (Python standard library, no
# torch); the two manifests must list the same tensor digests.
#   BENCH_PT_MB=1024 (BENCH_MB is read too, as before)
. "$(dirname "$0")/lib.sh"
bench_init pt
MB=${BENCH_PT_MB:-${BENCH_MB:-$(bench_size 1024 64)}}
t="hash of a .pt vs the same tensors as safetensors"
command -v python3 > /dev/null || { bench_skip pt "$t" "no python3"; bench_finish; }
python3 "$top/bench/bench_pt_gen.py" "$work" "$MB" > "$work/gen.txt" || exit 2
cat "$work/big.pt" "$work/big.safetensors" > /dev/null
t="hash of a .pt vs the same tensors as safetensors ($(cat "$work/gen.txt"))"
bench_header pt "$t"
A_LABEL="detcheck hash big.pt" A_CMD="\"$D\" hash -q \"$work/big.pt\""
B_LABEL="detcheck hash big.safetensors" B_CMD="\"$D\" hash -q \"$work/big.safetensors\""
if bench_pair pt 5 && bench_same_tensors pt; then bench_ratio pt "$t" cpu 1.1; else bench_row_fail pt "$t"; fi
bench_finish

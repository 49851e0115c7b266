#!/bin/sh
# Sealed checkpoints' cost (detcheck-seal(1), COST): detcheck.seal after
# torch.distributed.checkpoint.save of a ~1 GiB state (transformer-like, not
# round: 4093 x 4099 F32 matrices, a 50,257-row BF16 embedding), and
# detcheck.verify_seal after dcp.load of it, each against the save or load
# itself, in the same process, alternated (bench/seal_cost.py). Goals, by
# wall time: seal <= 0.05 x save, verify_seal <= 0.10 x load (CPU times
# printed beside them). The package is run from python/src with this
# build's library (no install); ci/gpu-check.sh may run seal_cost.py on CUDA.
#   BENCH_SEAL_MIB=1024  BENCH_SEAL_ROUNDS=3  (QUICK: 64 MiB, 2 rounds)
. "$(dirname "$0")/lib.sh"
bench_init seal
MIB=${BENCH_SEAL_MIB:-$(bench_size 1024 64)}
ROUNDS=${BENCH_SEAL_ROUNDS:-$(bench_size 3 2)}
t="detcheck.seal vs dcp.save, verify_seal vs dcp.load, ${MIB} MiB state, CPU"
if ! bench_torch_python; then
    bench_skip seal "$t" "no python3 with torch (DCK_TORCH_PYTHON; ci/venv.sh torch)"
    bench_finish
fi
bench_header seal "$t"
bench_py_cost seal "$t" seal_cost.py --mib "$MIB" --rounds "$ROUNDS" --dir "$work" || bench_finish
rs=$(echo "$out" | sed -n 's/^ratio seal *\([0-9.]*\) (wall.*/\1/p')
rv=$(echo "$out" | sed -n 's/^ratio verify *\([0-9.]*\) (wall.*/\1/p')
if [ -z "$rs" ] || [ -z "$rv" ]; then
    bench_row_failed="no ratios in bench/seal_cost.py's output"
    bench_row_fail seal "$t"
    bench_finish
fi
fig() { echo "$out" | sed -n "s/^$1 *\([0-9.]* s wall\).*/\1/p"; }
v=$(bench_verdict "$rs" 0.05)
bench_note_status "$v"
bench_summary seal "detcheck.seal vs dcp.save (${MIB} MiB, CPU)" "$(fig detcheck.seal)" "$(fig dcp.save)" \
    "$rs (wall)" "<= 0.05" "$v"
v=$(bench_verdict "$rv" 0.10)
bench_note_status "$v"
bench_summary seal-verify "detcheck.verify_seal vs dcp.load (${MIB} MiB, CPU)" "$(fig detcheck.verify_seal)" \
    "$(fig dcp.load)" "$rv (wall)" "<= 0.10" "$v"
bench_finish

# CLI: `train --bench` and its fast baseline (detcheck-train(1), OPTIONS): on a device the
# bench compares with cuBLAS on the same products, in two rows: "cuBLAS FP32
# (no TF32)" (the exact peer, with the goal) and "cuBLAS TF32" (tensor cores,
# a figure only); where there is no cuBLAS (the twin, no runtime) each says
# "unavailable" and why, and gives no figure. The CPU's output and JSON document stay as they were. The
# mapping of the products to cuBLAS, and the trainer's fast mode on it (with
# the reference GEMM on the twin), are tested in tests/check_gpu_blas.c.
. "$DCK_TOP/tests/cli/lib.sh"
CFG="--vocab 32 --layers 1 --width 16 --heads 2 --seq 8 --microbatches 2 --steps 1"

expect_exit 0 "$DETCHECK" train $CFG --bench --device twin
expect_grep '^determinism tax' out.txt
expect_grep '^cuBLAS FP32 (no TF32) unavailable (device twin has no cuBLAS)' out.txt
expect_grep '^cuBLAS TF32 unavailable (device twin has no cuBLAS)' out.txt
expect_no_grep 'cuBLAS .*FLOP/s' out.txt
expect_grep '^fast (cuBLAS)  unavailable (device twin has no cuBLAS)' out.txt
expect_no_grep 'tax against cuBLAS' out.txt
expect_exit 0 "$DETCHECK" train $CFG --bench --device twin --json
python3 - <<'PY' || fail "train --bench --device twin --json: cuBLAS keys"
import json
d = json.load(open("out.txt"))
assert d["device"] == "twin", d
assert d["cublas_unavailable"] == "device twin has no cuBLAS", d
assert d["cublas_tf32_unavailable"] == "device twin has no cuBLAS", d
assert d["fast_cublas_unavailable"] == "device twin has no cuBLAS", d
assert not any(k.startswith(("cublas_linear", "cublas_tf32_linear")) or k in ("linear_fraction_of_cublas",
               "linear_fraction_of_cublas_tf32", "fast_cublas_steps_per_s",
               "determinism_tax_cublas") for k in d), d
PY
ok

# the CPU: no cuBLAS line, no cuBLAS key (its JSON keys: test_train_cli.sh)
expect_exit 0 "$DETCHECK" train $CFG --bench
expect_no_grep 'cuBLAS' out.txt
expect_exit 0 "$DETCHECK" train $CFG --bench --json
expect_no_grep 'cublas' out.txt

# --device auto without a runtime: the bench runs on the CPU and the
# baseline is unavailable, naming why
export DETCHECK_CUDART_LIB=libcudart-dck-missing.so.0
expect_exit 0 "$DETCHECK" train $CFG --bench --device auto
expect_grep '^cuBLAS FP32 (no TF32) unavailable (.*CUDA' out.txt
expect_grep '^cuBLAS TF32 unavailable (.*CUDA' out.txt
expect_no_grep 'cuBLAS .*FLOP/s' out.txt
# the CPU's fast mode, which auto fell back to, is never reported as cuBLAS's
expect_grep '^fast (cuBLAS)  unavailable (no CUDA device' out.txt
expect_no_grep 'tax against cuBLAS' out.txt
unset DETCHECK_CUDART_LIB
done_ok

# ci/gpu-check.sh in twin mode (detcheck-gpu(7), TRAINING): every section of the GPU check runs
# here, with --device twin where the GPU path has a CPU twin, so a section
# broken in its logic fails on the CPU before a GPU is lent. Checks the
# honesty of the summary table (a check with no twin, or without mpirun, is a
# SKIP, never a PASS), that the CPU -> device resume section passes only
# because the schedule is explicit (the script as it was, with decay_steps
# taken from the 6-step checkpoint, fails), and that a section over its time
# limit is a FAIL and a section past the budget a SKIP; that the estimate of a
# GPU run from this twin run's times fits every limit and the budget.
. "$DCK_TOP/tests/cli/lib.sh"
export ASAN_OPTIONS=detect_leaks=0
export OUT="$TESTTMP"
unset DCK_GPU_CHECK_SECTIONS DCK_GPU_CHECK_BUDGET DCK_GPU_CHECK_TOP
S="$DCK_TOP/ci/gpu-check.sh"
command -v timeout > /dev/null || skip "no timeout(1)"

# twin LOG SCRIPT [ENV=VALUE...]: the script in twin mode on this build
twin() {
    log=$1 script=$2
    shift 2
    set +e
    env "$@" B="$BUILD" DCK_GPU_CHECK_TWIN=1 sh "$script" run > "$log" 2>&1
    rc=$?
    set -e
}
# has_row LOG RESULT SECTION: the summary table has that row
has_row() {
    awk -F ' [|] ' -v r="$2" -v s="$3" '
        /^== summary/ { t = 1; next }
        t && $2 == r && index($1, s) == 1 { f = 1 }
        END { exit !f }' "$1" || { cat "$1"; fail "no '$2' row '$3' in the summary of $1"; }
    ok
}

# 1. every section, twin mode: no FAIL; the twin's checks PASS. In a
# sanitizer build (CI's second stage; the twin itself is tested under it by
# test_train_device) section 4, the slow one, runs only in part 2 below.
full_sections="1 2 3 4 5 6"
if nm "$DETCHECK" 2> /dev/null | grep -q '__asan_init'; then
    full_sections="1 2 3 5 6"
    skip_part "sanitizer build: section 4 of the twin mode runs only as the old resume section's check"
fi
twin full.log "$S" DCK_GPU_CHECK_SECTIONS="$full_sections"
[ "$rc" -eq 0 ] || { cat full.log; fail "twin mode exited $rc"; }
ok
expect_grep '^== summary: twin mode' full.log
expect_grep '^[0-9]* PASS, 0 FAIL, [0-9]* SKIP$' full.log
for s in "5 canary: twin record == CPU golden" "5 canary: injected bit flip named" \
    "0 detcheck links neither cudart nor NCCL"; do
    has_row full.log PASS "$s"
done
case $full_sections in *4*)
    for s in "4 train tiny-fp32 == CPU" "4 train tiny-bf16 == CPU" "4 train tiny-b4 == CPU" \
        "4 train small-fp32 == CPU" "4 train small-bf16 == CPU" "4 resume CPU -> twin -> CPU" \
        "4 resume-check on twin" "4 fast mode differs"; do
        has_row full.log PASS "$s"
    done
    has_row full.log SKIP "4b train --bench --device twin"
    has_row full.log SKIP "4b cuBLAS FP32 (no TF32)"
    has_row full.log SKIP "4b cuBLAS TF32"
    expect_grep '^4b cuBLAS TF32 *| SKIP | unavailable (device twin has no cuBLAS)' full.log
    has_row full.log SKIP "4 trainer kernels stage by stage"
esac
# checks with no twin are SKIPs saying so, never PASSes; the hash sections'
# plumbing ran (a FAIL otherwise) and still says SKIP
for s in "0 GPU probe" "1 CUDA suite" "1 cuBLAS baseline products" "1 C example" "1 PyTorch ctypes example" \
    "1 Python package on CUDA tensors" "3 digest throughput" "3b Recorder cost" \
    "6 op tracing" "2 mixed checkpoint" "3 hash of a 64 MiB file"; do
    has_row full.log SKIP "$s"
done
expect_grep '^2 mixed checkpoint.* | SKIP | no twin of hash --device cuda: plumbing run with the CPU path, manifests equal' full.log
expect_no_grep ' | PASS | .*no CPU twin' full.log
# the time estimate (ci/gpu-check.sh, TIME): each section's CPU seconds in
# this twin run plus its GPU-only seconds within its limit, the sum within
# the whole budget; a section whose twin part grew past its limit fails it
[ -s "$OUT/gpu-check-times.tsv" ] || fail "the twin run wrote no $OUT/gpu-check-times.tsv"
cp "$OUT/gpu-check-times.tsv" times.tsv
set +e
sh "$S" estimate times.tsv > est.log 2>&1
rc=$?
set -e
cat est.log
[ "$rc" -eq 0 ] || fail "the estimate from this twin run: exit $rc"
ok
for n in $full_sections; do
    expect_grep "^$n  *| *[0-9.]* | .* | ok$" est.log
done
expect_grep '^whole run: estimate .* budget 290 s: ok$' est.log
{ awk -F '\t' '$1 != 4' times.tsv; printf '4\t90\t40\t40\n'; } > grown.tsv
set +e
sh "$S" estimate grown.tsv > grown.log 2>&1
rc=$?
set -e
[ "$rc" -eq 1 ] || { cat grown.log; fail "section 4 at 40 CPU s: exit $rc, wanted 1"; }
ok
expect_grep '^4  *| *40.00 | .* | OVER$' grown.log
set +e
DCK_GPU_CHECK_BUDGET=200 sh "$S" estimate times.tsv > small.log 2>&1
rc=$?
set -e
[ "$rc" -eq 1 ] || { cat small.log; fail "a 200 s budget: exit $rc, wanted 1"; }
ok
expect_grep '^whole run: estimate .* budget 200 s: OVER$' small.log

# cuBLAS has its own program and row: the digest suite calls none of it, so
# a machine without cuBLAS cannot turn the suite into a SKIP
expect_no_grep 'dck_blas\|gpu_blas\.h' "$DCK_TOP/tests/gpu/check_cuda.c"
expect_grep 'dck_blas_cuda_selftest' "$DCK_TOP/tests/gpu/check_cublas.c"
# multi-rank rows: PASS with mpirun, SKIP naming why without
if [ -z "${DCK_NO_MPI_TESTS:-}" ] && command -v mpirun > /dev/null; then
    case $full_sections in *4*) has_row full.log PASS "4 train: 4 ranks on one device == 1 rank" ;; esac
    has_row full.log PASS "5 canary: 2 ranks on one device"
else
    has_row full.log SKIP "5 canary: 2 ranks on one device"
    skip_part "no mpirun: the twin mode's 2- and 4-rank checks not run"
fi

# 2. the resume section as it was (no explicit schedule: the resumed run keeps
# decay_steps=6 from its checkpoint) fails on the twin; the fixed one passed
# above. Without mpirun (DCK_NO_MPI_TESTS) the 2-rank canary is a SKIP.
mkdir -p old/ci
sed 's/^\( *\)sched="--decay-steps 12"$/\1sched=""/' "$S" > old/ci/gpu-check.sh
! cmp -s "$S" old/ci/gpu-check.sh || fail "the explicit schedule of the resume section is not in $S"
ok
twin old.log old/ci/gpu-check.sh DCK_GPU_CHECK_TOP="$DCK_TOP" DCK_GPU_CHECK_SECTIONS="4 5" \
    DCK_NO_MPI_TESTS="test_gpu_check_twin"
[ "$rc" -eq 1 ] || { cat old.log; fail "the old resume section: exit $rc, wanted 1"; }
ok
has_row old.log FAIL "4 resume CPU -> twin -> CPU"
has_row old.log PASS "4 train tiny-fp32 == CPU"
has_row old.log SKIP "4 train: 2 ranks on one device == 1 rank"
has_row old.log SKIP "5 canary: 2 ranks on one device"
expect_grep '^5 canary: 2 ranks on one device *| SKIP | DCK_NO_MPI_TESTS is set' old.log
expect_grep '^[0-9]* PASS, 1 FAIL, [0-9]* SKIP$' old.log

# 3. limits: section 4, made to hang (DCK_GPU_CHECK_STALL), is cut by the
# whole run's budget (8 s): a FAIL "timed out"; section 5, with no budget
# left, a SKIP; exit 1. The hang, not the machine's speed, decides.
t0=$(date +%s)
twin budget.log "$S" DCK_GPU_CHECK_SECTIONS="4 5" DCK_GPU_CHECK_BUDGET=8 DCK_GPU_CHECK_STALL=4 \
    DCK_NO_MPI_TESTS="test_gpu_check_twin"
[ "$rc" -eq 1 ] || { cat budget.log; fail "over budget: exit $rc, wanted 1"; }
ok
[ $(($(date +%s) - t0)) -lt 30 ] || fail "over budget: the run took $(($(date +%s) - t0)) s for an 8 s budget"
ok
has_row budget.log FAIL "4 train --device twin against the CPU"
expect_grep '| FAIL | timed out after' budget.log
has_row budget.log SKIP "5 canary --device twin against a CPU golden"
expect_grep "budget (8 s) is spent" budget.log

# 4. GPU mode, the CUDA runtime not loadable: a loader failure is not "no
# device" (no exit 77): the probe is a FAIL naming it, every section a SKIP
set +e
DETCHECK_CUDART_LIB=/nonexistent/libcudart.so.13 B="$BUILD" sh "$S" run > loader.log 2>&1
rc=$?
set -e
[ "$rc" -eq 1 ] || { cat loader.log; fail "an unloadable CUDA runtime: exit $rc, wanted 1"; }
ok
has_row loader.log FAIL "0 GPU probe"
for n in 1 2 3 4 5 6; do has_row loader.log SKIP "$n "; done
expect_grep '^[0-9]* PASS, 1 FAIL, 6 SKIP$' loader.log
done_ok

# NCCL's start-up across ranks (src/gpu/gpu_nccl.c, dck_nccl_load_all): before
# any rank enters NCCL, every rank loads it and learns whether all could, so
# one rank without NCCL is an error on every rank at once, naming it and its
# reason, instead of the others waiting in ncclCommInitRank for good. Run on
# the CPU: tests/check_nccl_start.c's ranks' case under mpirun, with stub
# libraries; DCK_TEST_NCCL_MISSING_ON=R,... points those ranks' NCCL at a
# missing library. The start-up's own timeout and abort (one rank, a stub
# NCCL that never completes) are that suite's other cases.
. "$DCK_TOP/tests/cli/lib.sh"
export ASAN_OPTIONS=detect_leaks=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
T="$DCK_TOP/$BUILD/tests/check_nccl_start"
[ -x "$T" ] || skip "no $BUILD/tests/check_nccl_start (make tests-built)"
command -v mpirun > /dev/null || skip "no mpirun"
MPI="timeout 120 mpirun --oversubscribe -np"

# every rank has NCCL: nothing said
expect_exit 0 $MPI 3 "$T"
expect_no_grep 'could not be loaded' out.txt
# rank 1 lacks it: every rank fails at once, naming rank 1 and its reason
DCK_TEST_NCCL_MISSING_ON=1 expect_exit 0 $MPI 3 "$T"
for r in 0 1 2; do
    expect_grep "^rank $r: NCCL could not be loaded on 1 of 3 ranks (rank 1), so no rank starts it; rank 1: cannot load NCCL (libnccl-dck-missing-on-rank-1.so.2)" out.txt
done
# ranks 0 and 2, each with its own reason
DCK_TEST_NCCL_MISSING_ON=0,2 expect_exit 0 $MPI 3 "$T"
expect_grep "^rank 1: NCCL could not be loaded on 2 of 3 ranks (ranks 0, 2), .*; rank 0: cannot load NCCL (libnccl-dck-missing-on-rank-0.so.2).*; rank 2: cannot load NCCL (libnccl-dck-missing-on-rank-2.so.2)" out.txt
[ "$(grep -c 'could not be loaded on 2 of 3' out.txt)" -eq 3 ] || { cat out.txt; fail "not every rank failed"; }
ok
done_ok

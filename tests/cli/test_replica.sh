# The replica check over MPI (dck_replica_check, man detcheck-replica(7)):
# examples/replica_check.c, a C program that calls MPI_Init itself as a
# trainer does, run by mpirun on 3 and 4 ranks. One bit flipped in one tensor
# of rank 2 is named with the tensor; a flip on rank 0 names rank 0 (the
# majority, not everyone but 0); two replicas that differ name nobody;
# another tensor list is trouble; a hung rank ends in the collective timeout
# (exit 2, named), never a hang. The verdict's arithmetic and ranks played
# by threads: tests/check_replica.c.
. "$DCK_TOP/tests/cli/lib.sh"
export ASAN_OPTIONS=detect_leaks=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
command -v mpirun > /dev/null || skip "no mpirun"
command -v mpicc > /dev/null || skip "no mpicc: the example is an MPI program"

# built as the example's comment says (a program linked with libmpi: the
# library takes the program's MPI, handles included)
mpicc -std=c11 -Wall -Wextra -Werror -I"$DCK_TOP/include" -o replica_check "$DCK_TOP/examples/replica_check.c" \
    "$DCK_TOP/$BUILD/libdetcheck.a" $(cat "$DCK_TOP/$BUILD/ldlibs.txt") > build.log 2>&1 ||
    { cat build.log; fail "the example does not build"; }
ok
MPI="timeout 120 mpirun --oversubscribe -np"

# one replica (no launcher, or mpirun -np 1): nothing compared, no OK
expect_exit 2 ./replica_check
expect_grep 'one replica .*: nothing compared' err.txt
expect_exit 2 $MPI 1 ./replica_check
expect_grep 'nothing compared' err.txt
expect_exit 0 $MPI 3 ./replica_check
expect_grep '^3 replicas identical (root [0-9a-f]\{32\})$' out.txt
for k in 3 4; do
    expect_exit 1 $MPI $k ./replica_check --flip 2:layers.0.weight:100:7
    expect_grep '^replicas differ: first differing tensor layers.0.weight$' out.txt
    expect_grep '^rank 2 differs from the majority ([^ ]* cpu)$' out.txt
    [ "$(grep -c 'differs from the majority' out.txt)" -eq 1 ] || { cat out.txt; fail "$k ranks: not only rank 2 named"; }
    ok
done
# rank 0 is the faulty one: rank 0 is named, the other three agree
expect_exit 1 $MPI 4 ./replica_check --flip 0:optimizer.state.layers.0.weight.exp_avg:1146:0
expect_grep '^replicas differ: first differing tensor optimizer.state.layers.0.weight.exp_avg$' out.txt
expect_grep '^rank 0 differs from the majority' out.txt
expect_grep '^group 1: 1 2 3$' out.txt
expect_grep '^group 2: 0$' out.txt
[ "$(grep -c 'differs from the majority' out.txt)" -eq 1 ] || { cat out.txt; fail "more than rank 0 named"; }
ok
# two replicas: a mismatch without a culprit
expect_exit 1 $MPI 2 ./replica_check --flip 1:layers.0.bias:36:31
expect_grep 'two replicas differ: a third is needed to tell which' out.txt
expect_no_grep 'differs from the majority' out.txt
# 2 against 2: no majority, nobody named
expect_exit 1 $MPI 4 ./replica_check --flip 1:embed.weight:0:1 --flip 2:embed.weight:0:1
expect_grep 'no majority: no group of identical ranks holds more than half' out.txt
expect_grep '^group 1: 0 3$' out.txt
expect_grep '^group 2: 1 2$' out.txt
expect_no_grep 'differs from the majority' out.txt
# bad arguments of the example itself
expect_exit 2 $MPI 3 ./replica_check --flip 1:no.such.tensor:0:1
expect_grep 'a tensor or element that is not there' err.txt
# another tensor list: trouble, the rank named
expect_exit 2 $MPI 3 ./replica_check --drop 1
expect_grep 'rank 1 holds another tensor list' err.txt

# a hung rank (DETCHECK_TEST_STALL: rank 2 stops before its first
# collective): the others wait the collective timeout, name it, exit 2
start=$(date +%s)
DETCHECK_COLLECTIVE_TIMEOUT=3 DETCHECK_TEST_STALL=2:1 expect_exit 2 $MPI 3 ./replica_check
expect_grep 'replica check: rank 0: MPI_Iallgather: not complete within 3.0 s (DETCHECK_COLLECTIVE_TIMEOUT)' err.txt
grep -Eq 'rank ([0-9]+, )*2(, [0-9]+)* did not answer a roll call' err.txt || { cat err.txt; fail "rank 2 not named"; }
ok
[ $(( $(date +%s) - start )) -lt 60 ] || fail "the hung job took too long"; ok
# rank 0 hangs: a survivor names it
DETCHECK_COLLECTIVE_TIMEOUT=3 DETCHECK_TEST_STALL=0:1 expect_exit 2 $MPI 4 ./replica_check
grep -Eq 'rank [123]: MPI_Iallgather.*rank ([0-9]+, )*0(, [0-9]+)* did not answer a roll call' err.txt ||
    { cat err.txt; fail "rank 0 not named by a survivor"; }
ok
done_ok

# The collective timeout (detcheck-train(1), ENVIRONMENT): every collective between ranks (MPI
# here; the trainer's NCCL all-gather and all-reduce and the hash's NCCL
# reduce go through the same wait, src/common/comm.c dck_comm_wait,
# unit-tested with a fake asynchronous error in tests/check_comm.c) ends
# after DETCHECK_COLLECTIVE_TIMEOUT when a peer never answers: the survivors
# exit 2 naming it instead of hanging. DETCHECK_TEST_STALL=RANK:N stops rank
# RANK before its Nth collective for good.
. "$DCK_TOP/tests/cli/lib.sh"
export ASAN_OPTIONS=detect_leaks=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
SMALL="--vocab 64 --width 32 --layers 2 --heads 2 --seq 16 --batch 2 --microbatches 4 --steps 6 -q"

# a bad value is refused up front, with or without a launcher
DETCHECK_COLLECTIVE_TIMEOUT=soon expect_exit 2 $DETCHECK train $SMALL
expect_grep 'DETCHECK_COLLECTIVE_TIMEOUT=soon: seconds from 0.1 to 604800 wanted' err.txt
DETCHECK_COLLECTIVE_TIMEOUT=0 expect_exit 2 $DETCHECK train $SMALL
expect_grep 'DETCHECK_COLLECTIVE_TIMEOUT=0' err.txt

command -v mpirun > /dev/null || skip "no mpirun: the multi-rank cases"
MPI="timeout 120 mpirun --oversubscribe -np"

# a short timeout changes nothing when every rank answers
expect_exit 0 $DETCHECK train $SMALL --device twin --out k1
DETCHECK_COLLECTIVE_TIMEOUT=20 expect_exit 0 $MPI 2 $DETCHECK train $SMALL --device twin --out k2
cmp k1/trajectory.jsonl k2/trajectory.jsonl || fail "2 ranks with a timeout differ from 1"; ok

# rank 1 hangs in the middle of the run (the 8th collective: a step's
# gradient exchange) on the twin: rank 0 names it and exits 2, soon
start=$(date +%s)
DETCHECK_COLLECTIVE_TIMEOUT=3 DETCHECK_TEST_STALL=1:8 expect_exit 2 $MPI 2 $DETCHECK train $SMALL \
    --device twin --out s1
# (on a loaded machine a slow survivor may be named beside the stalled rank)
grep -Eq 'rank 0: MPI_I[a-z]*.*not complete within 3.0 s \(DETCHECK_COLLECTIVE_TIMEOUT\); rank ([0-9]+, )*1(, [0-9]+)* did not answer' err.txt ||
    { cat err.txt; fail "rank 1 not named by rank 0"; }
ok
expect_no_grep 'rank 1: ' err.txt
[ $(( $(date +%s) - start )) -lt 60 ] || fail "the stalled job took too long"; ok

# rank 0 hangs: the survivors name it (rank 0, the one that prints, is gone).
# mpirun aborts the job when the first survivor exits, so which of them get
# to print is a race: at least one does, and each that does names rank 0.
start=$(date +%s)
DETCHECK_COLLECTIVE_TIMEOUT=3 DETCHECK_TEST_STALL=0:8 expect_exit 2 $MPI 4 $DETCHECK train $SMALL \
    --device twin --out s2
grep -Eq "rank [123]: MPI_I[a-z]*.*rank ([0-9]+, )*0(, [0-9]+)* did not answer a roll call" err.txt ||
    { cat err.txt; fail "rank 0 not named by a survivor"; }
ok
grep 'did not answer a roll call' err.txt | grep -Ev "rank ([0-9]+, )*0(, [0-9]+)* did not answer" &&
    fail "a survivor did not name rank 0"
expect_no_grep 'rank 0: ' err.txt
[ $(( $(date +%s) - start )) -lt 60 ] || fail "the stalled job took too long"; ok

# the CPU trainer (no device) and a stall in the first agreement of the run
# (a survivor slowed down by a loaded machine may be named too: rank 2 must be)
DETCHECK_COLLECTIVE_TIMEOUT=3 DETCHECK_TEST_STALL=2:1 expect_exit 2 $MPI 4 $DETCHECK train $SMALL --out s3
expect_grep 'rank 0: MPI_Iallreduce of a status: not complete within 3.0 s' err.txt
grep -Eq '; rank ([0-9]+, )*2(, [0-9]+)* did not answer a roll call' err.txt || { cat err.txt; fail "rank 2 not named"; }
ok
done_ok

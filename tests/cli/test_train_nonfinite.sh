# train: the non-finite rule (detcheck-train(1), NON-FINITE VALUES). A NaN's bits are not portable (a
# GPU makes 0x7fffffff, x86 0xffc00000), so a run stops, exit 2, at the first
# step whose loss, gradient or updated weights are not finite, naming the
# step and the tensor, before that step's record or checkpoint: the CPU and
# the GPU path (its CPU twin here) stop at the same step with the same
# message and leave the same files.
. "$DCK_TOP/tests/cli/lib.sh"
export ASAN_OPTIONS=detect_leaks=0
CFG="--vocab 50 --width 24 --layers 2 --heads 3 --seq 12 --batch 2 --microbatches 4 --decay-steps 40"

# weight decay 10 at lr 10 multiplies the matrices by -99 a step: the
# forward pass overflows and the loss of step 12 is NaN (allowed options)
for p in fp32 bf16; do
    for dev in cpu twin; do
        expect_exit 2 $DETCHECK train $CFG --lr 10 --weight-decay 10 --precision $p --steps 14 \
            --ckpt-every 5 --out ${dev}_$p -q --device $dev
        expect_grep "step 12: the loss is NaN; the run stops at its first non-finite" err.txt
        cp err.txt err_${dev}_$p.txt
    done
    cmp err_cpu_$p.txt err_twin_$p.txt || fail "$p: the CPU and the twin stop differently"; ok
    cmp cpu_$p/trajectory.jsonl twin_$p/trajectory.jsonl || fail "$p: trajectories differ"; ok
    # steps 1..11 recorded, all finite; no checkpoint of the stopped step
    [ "$(wc -l < cpu_$p/trajectory.jsonl)" -eq 11 ] || fail "$p: not 11 records"; ok
    expect_no_grep null cpu_$p/trajectory.jsonl
    [ -e cpu_$p/step_00000010/COMPLETE ] && [ ! -e cpu_$p/step_00000012 ] || fail "$p: checkpoints"; ok
    expect_exit 0 $DETCHECK verify --golden cpu_$p/step_00000010/manifest.json twin_$p/step_00000010
done

# --eps 0: the update of an embedding row no token used is 0 / 0 = NaN at
# step 1 while the loss and the gradient are finite: the weights are checked
for dev in cpu twin; do
    expect_exit 2 $DETCHECK train $CFG --eps 0 --steps 3 -q --device $dev
    expect_grep "step 1: the AdamW update made model.wte.weight not finite at element 24" err.txt
done

# two ranks stop together, with the same message (the slices' first)
if [ -n "${DCK_NO_MPI_TESTS:-}" ] || ! command -v mpirun > /dev/null; then
    skip_part "no mpirun: the non-finite stop on 2 ranks not tested"
else
    expect_exit 2 mpirun --oversubscribe -np 2 $DETCHECK train $CFG --eps 0 --steps 3 -q
    expect_grep "step 1: the AdamW update made model.wte.weight not finite at element 24" err.txt
    expect_exit 2 mpirun --oversubscribe -np 2 $DETCHECK train $CFG --lr 10 --weight-decay 10 \
        --steps 14 --out k2 -q --device twin
    expect_grep "step 12: the loss is NaN" err.txt
    cmp cpu_fp32/trajectory.jsonl k2/trajectory.jsonl || fail "2 ranks: trajectories differ"; ok
fi

# canary: the device under test goes on through non-finite values (a faulty
# device's NaN is a difference that names it), the CPU reference stops at
# its first one, so settings whose run reaches one are refused (exit 2)
# before a healthy device could be blamed for its NaNs' bits
expect_exit 2 $DETCHECK canary --device twin $CFG --lr 10 --weight-decay 10 --steps 14
expect_grep "the CPU reference run (the oracle): step [0-9]*: the loss is NaN; .*the canary needs settings whose run stays finite" err.txt
expect_no_grep "rank [0-9]* differs" out.txt
done_ok

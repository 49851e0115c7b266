# train --device (detcheck-gpu(7), TRAINING): without a GPU, cuda exits 2 saying why and auto
# falls back to the CPU saying so; the GPU path run by its CPU twin (--device
# twin) gives the CPU's trajectory and checkpoints, and checkpoints move
# between the two paths both ways (train --resume, resume-check); --preset.
. "$DCK_TOP/tests/cli/lib.sh"
export ASAN_OPTIONS=detect_leaks=0
CFG="--vocab 50 --width 24 --layers 2 --heads 3 --seq 12 --batch 2 --microbatches 4 --decay-steps 6"

# bad device: exit 2 naming the flag
expect_exit 2 $DETCHECK train --device gpu --steps 1
expect_grep "device 'gpu': use cpu, cuda, auto or twin" err.txt

if $DETCHECK train $CFG --steps 1 --device cuda -q > /dev/null 2>&1; then
    skip_part "a CUDA device is visible: the no-GPU messages are not tested here"
else
    expect_exit 2 $DETCHECK train $CFG --steps 1 --device cuda
    expect_grep "no CUDA device" err.txt
    expect_exit 0 $DETCHECK train $CFG --steps 2 --device auto --out auto -q
    expect_grep "device auto: training on the CPU (no CUDA device" err.txt
fi

# the GPU path (its CPU twin) == the CPU, fp32 and bf16, every step
for p in fp32 bf16; do
    expect_exit 0 $DETCHECK train $CFG --precision $p --steps 6 --ckpt-every 3 --out cpu_$p -q
    expect_exit 0 $DETCHECK train $CFG --precision $p --steps 6 --ckpt-every 3 --out twin_$p -q --device twin
    cmp cpu_$p/trajectory.jsonl twin_$p/trajectory.jsonl || fail "$p: twin trajectory differs"; ok
    expect_exit 0 $DETCHECK verify --golden cpu_$p/step_00000006/manifest.json twin_$p/step_00000006
done

# checkpoints move both ways: CPU -> twin and twin -> CPU from step 3
expect_exit 0 $DETCHECK train $CFG --steps 3 --out c2t -q
expect_exit 0 $DETCHECK train $CFG --steps 6 --out c2t -q --resume --device twin
cmp cpu_fp32/trajectory.jsonl c2t/trajectory.jsonl || fail "CPU -> twin resume differs"; ok
expect_exit 0 $DETCHECK train $CFG --steps 3 --out t2c -q --device twin
expect_exit 0 $DETCHECK train $CFG --steps 6 --out t2c -q --resume
cmp cpu_fp32/trajectory.jsonl t2c/trajectory.jsonl || fail "twin -> CPU resume differs"; ok
expect_exit 0 $DETCHECK verify --golden cpu_fp32/step_00000006/manifest.json t2c/step_00000006

# resume-check runs its children on the device it is given, and the resumed
# runs on another one with --resume-device (both ways)
expect_exit 0 $DETCHECK resume-check $CFG --steps 4 --at 2 --device twin -q
expect_exit 0 $DETCHECK resume-check $CFG --steps 4 --at 2 --resume-device twin -q
expect_exit 0 $DETCHECK resume-check $CFG --steps 4 --at 2 --device twin --resume-device cpu -q
if ! $DETCHECK train $CFG --steps 1 --device cuda -q > /dev/null 2>&1; then
    # the flag reaches the resumed runs: without a GPU they stop
    expect_exit 2 $DETCHECK resume-check $CFG --steps 4 --at 2 --resume-device cuda -q
fi

# 2 and 4 ranks on the device path (sharing the "device": subtree sums
# through MPI) == 1 rank, deterministic; fast mode runs
if [ -n "${DCK_NO_MPI_TESTS:-}" ] || ! command -v mpirun > /dev/null; then
    skip_part "no mpirun: 2 ranks on the device path not tested"
else
    expect_exit 0 mpirun --oversubscribe -np 2 $DETCHECK train $CFG --steps 6 --out k2 -q --device twin
    cmp cpu_fp32/trajectory.jsonl k2/trajectory.jsonl || fail "2 ranks on the device path differ"; ok
    expect_exit 0 mpirun --oversubscribe -np 4 $DETCHECK train $CFG --steps 6 --out k4 -q --device twin
    cmp cpu_fp32/trajectory.jsonl k4/trajectory.jsonl || fail "4 ranks on the device path differ"; ok
    expect_exit 0 mpirun --oversubscribe -np 2 $DETCHECK train $CFG --steps 2 --out k2f -q --device twin --mode fast
fi

# fast mode on the device path differs from deterministic
expect_exit 0 $DETCHECK train $CFG --steps 3 --mode fast --out fast -q --device twin
! cmp -s fast/trajectory.jsonl twin_fp32/trajectory.jsonl || fail "fast mode gave the deterministic bits"; ok

# presets set the shape; flags after them change it
expect_exit 0 $DETCHECK train --preset tiny --steps 2 --out tiny -q
expect_exit 0 $DETCHECK train --steps 2 --out dflt -q
cmp tiny/trajectory.jsonl dflt/trajectory.jsonl || fail "--preset tiny is not the default shape"; ok
expect_exit 2 $DETCHECK train --preset huge
expect_grep "use tiny, small or medium" err.txt
expect_exit 0 $DETCHECK train --preset small --layers 1 --width 24 --heads 2 --seq 8 --vocab 300 --microbatches 1 --steps 1 -q --json
expect_grep '"last_step":1' out.txt
done_ok

# detcheck canary: every rank runs the same training run; one flipped bit in
# any of weights, activations, gradients or optimizer state on one of 4 ranks
# is caught, and exactly that rank and step are named. Oracles: the CPU
# reference, a golden file, the majority. A hung rank is named (exit 2),
# never waited for. Exit codes and messages for bad flags and golden files.
. "$DCK_TOP/tests/cli/lib.sh"
export ASAN_OPTIONS=detect_leaks=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# ---- one process: the CPU reference against itself
expect_exit 0 $DETCHECK canary
expect_grep '^[^ ]* rank 0 cpu:0 identical$' out.txt
expect_grep '^1 of 1 devices identical$' out.txt
expect_exit 0 $DETCHECK canary --json
expect_grep '"result": "identical"' out.txt
expect_grep '"exit": 0' out.txt
# a fault in rank 0's own run: caught, with the element and bit
expect_exit 1 $DETCHECK canary --inject 0:6:model.blocks.1.mlp.fc.weight:17:3
expect_grep 'rank 0 cpu:0 DIFFERS at step 6: model.blocks.1.mlp.fc.weight, 1 of 4096 elements differ, bits 0x00000008 (bit 3)' out.txt
expect_grep '^0 of 1 devices identical$' out.txt
# --seconds repeats and still agrees; no progress line when stderr is no terminal
expect_exit 0 $DETCHECK canary --seconds 1
expect_grep 'identical ([0-9]* passes)' out.txt
expect_no_grep 'of 1 s' err.txt
# ... and one on a terminal (script(1) gives the command a pty)
if command -v script > /dev/null; then
    script -qec "$DETCHECK canary --seconds 1 --quiet" /dev/null > quiet.txt 2>&1 || fail "canary --quiet on a pty"
    expect_no_grep 'of 1 s' quiet.txt
    script -qec "$DETCHECK canary --seconds 1" /dev/null > tty.txt 2>&1 || fail "canary on a pty"
    expect_grep 'detcheck canary: 1 of 1 s' tty.txt
else
    skip_part "no script(1): the progress line on a terminal"
fi

# ---- golden files
expect_exit 0 $DETCHECK canary --write-golden golden.json
[ -s golden.json ] || fail "no golden file"; ok
expect_exit 0 $DETCHECK canary --golden golden.json
expect_grep 'oracle: golden file golden.json' out.txt
# a run the CPU reference does not confirm writes no golden record
expect_exit 2 $DETCHECK canary --write-golden bad-golden.json --inject 0:2:model.wte.weight:1:1
expect_grep "rank 0's run differs from the CPU reference at step 2: bad-golden.json not written" err.txt
[ ! -e bad-golden.json ] || fail "a golden record from a faulty run"; ok
# the GPU path (on its CPU twin) writes the same record, byte for byte
expect_exit 0 $DETCHECK canary --device twin --write-golden twin-golden.json
cmp golden.json twin-golden.json || fail "twin golden differs from the CPU golden"; ok
expect_exit 1 $DETCHECK canary --golden golden.json --inject 0:2:grad.wte.weight:0:30
expect_grep 'DIFFERS at step 2: grad.wte.weight' out.txt
# written for another run: named, exit 2
expect_exit 2 $DETCHECK canary --golden golden.json --width 64
expect_grep 'golden.json' err.txt
expect_grep 'width' err.txt
expect_exit 2 $DETCHECK canary --golden golden.json --steps 6
expect_grep 'golden.json: written for 8 steps, this run has 6' err.txt
printf '{"detcheck_canary": 1}' > bad.json
expect_exit 2 $DETCHECK canary --golden bad.json
expect_grep 'bad.json: not a canary golden file' err.txt
printf 'not json' > bad2.json
expect_exit 2 $DETCHECK canary --golden bad2.json
expect_grep 'bad2.json:1: not JSON' err.txt
expect_exit 2 $DETCHECK canary --golden missing.json
expect_grep 'missing.json: cannot open' err.txt

# ---- bad flags
expect_exit 2 $DETCHECK canary --inject 0:3:model.nope:0:1
expect_grep 'no tensor model.nope' err.txt
expect_exit 2 $DETCHECK canary --inject 0:3:model.wte.weight:0:32
expect_grep 'bad BIT' err.txt
expect_exit 2 $DETCHECK canary --inject 0:9:model.wte.weight:0:1
expect_grep 'step 9 beyond' err.txt
expect_exit 2 $DETCHECK canary --inject 0:3:model.wte.weight:2048:1
expect_grep 'index 2048 beyond model.wte.weight' err.txt
expect_exit 2 $DETCHECK canary --inject 0:3:activations:99999999:1
expect_grep 'activations of a sequence' err.txt
expect_exit 2 $DETCHECK canary --inject 1:3:model.wte.weight:0:1
expect_grep 'rank 1, but the job has 1 rank' err.txt
expect_exit 2 $DETCHECK canary --preset huge
expect_grep "unknown canary preset 'huge'" err.txt
expect_exit 2 $DETCHECK canary --device tpu
expect_exit 2 $DETCHECK canary --out x
expect_exit 2 $DETCHECK canary --mode fast
# the GPU path: its CPU twin runs here (--device twin); without a GPU,
# --device cuda is trouble with the reason, auto falls back to the CPU
expect_exit 0 $DETCHECK canary --device twin
expect_grep 'rank 0 twin:0 identical' out.txt
expect_exit 1 $DETCHECK canary --device twin --inject 0:4:optimizer.exp_avg.wte.weight:7:2
expect_grep 'rank 0 twin:0 DIFFERS at step 4: optimizer.exp_avg.wte.weight, 1 of 2048 elements differ, bits 0x00000004 (bit 2)' out.txt
expect_exit 1 $DETCHECK canary --device twin --inject 0:4:activations:3000:28
expect_grep 'rank 0 twin:0 DIFFERS at step 4: grad\.' out.txt
if $DETCHECK canary --device cuda > /dev/null 2>&1; then
    skip_part "a GPU is visible: the no-GPU message of --device cuda"
else
    expect_exit 2 $DETCHECK canary --device cuda
    expect_grep 'device cuda: no CUDA device' err.txt
    expect_exit 0 $DETCHECK canary --device auto
    expect_grep 'rank 0 cpu:0 identical' out.txt
fi
expect_exit 0 $DETCHECK canary --help
expect_grep 'RANK:STEP:TENSOR:INDEX:BIT' out.txt
expect_exit 0 $DETCHECK canary --preset cpu --steps 3

# ---- 4 ranks
command -v mpirun > /dev/null || { skip_part "no mpirun: the 4-rank cases"; done_ok; }
MPI="mpirun --oversubscribe -np 4"
expect_exit 0 $MPI $DETCHECK canary
expect_grep '^4 of 4 devices identical$' out.txt
for r in 0 1 2 3; do expect_grep "rank $r cpu:$r identical" out.txt; done
# one bit in each kind of state, on one rank: that rank and that step
n=0
for spec in 2:5:model.blocks.0.attn.qkv.weight:100:0 \
            1:3:activations:700:20 \
            3:7:grad.lm_head.weight:5:1 \
            2:4:optimizer.exp_avg.blocks.1.mlp.proj.weight:9:0 \
            1:8:optimizer.exp_avg_sq.ln_f.weight:3:0; do
    rank=${spec%%:*}; rest=${spec#*:}; step=${rest%%:*}
    expect_exit 1 $MPI $DETCHECK canary --inject "$spec"
    expect_grep "rank $rank cpu:$rank DIFFERS at step $step: " out.txt
    [ "$(grep -c DIFFERS out.txt)" -eq 1 ] || { cat out.txt; fail "$spec: more than one rank named"; }; ok
    expect_grep '^3 of 4 devices identical$' out.txt
    n=$((n+1))
done
[ "$n" -eq 5 ] || fail "not every kind ran"; ok
# the flipped bit itself, named where the fault lands in its own tensor
expect_exit 1 $MPI $DETCHECK canary --inject 3:7:grad.lm_head.weight:5:1
expect_grep 'grad.lm_head.weight, 1 of 2048 elements differ, bits 0x00000002 (bit 1)' out.txt
# JSON names the rank too
expect_exit 1 $MPI $DETCHECK canary --json --inject 2:1:model.wpe.weight:0:30
expect_grep '"rank": 2, .*"result": "differs", "passes": 1, "step": 1, "tensor": "model.wpe.weight"' out.txt
# the other oracles
expect_exit 0 $MPI $DETCHECK canary --golden golden.json
expect_exit 1 $MPI $DETCHECK canary --golden golden.json --inject 3:2:model.ln_f.bias:1:31
expect_grep 'rank 3 cpu:3 DIFFERS at step 2: model.ln_f.bias, 1 of 32 elements differ, bits 0x80000000 (bit 31)' out.txt
expect_exit 1 $MPI $DETCHECK canary --vote --inject 1:6:grad.wpe.weight:0:31
expect_grep 'oracle: majority (3 of 4 ranks)' out.txt
expect_grep 'rank 1 cpu:1 DIFFERS at step 6: grad.wpe.weight, 1 of 512 elements differ' out.txt
# two against two: no majority is trouble
expect_exit 2 mpirun --oversubscribe -np 2 $DETCHECK canary --vote --inject 1:1:grad.wpe.weight:0:31
expect_grep 'no majority' out.txt
# a hung rank is named and the job ends (exit 2), well before any hang
start=$(date +%s)
expect_exit 2 $MPI $DETCHECK canary --test-stall 3 --timeout 3
expect_grep 'rank 3 ? TIMEOUT: no report within 3 s' out.txt
[ $(( $(date +%s) - start )) -lt 60 ] || fail "the stalled job took too long"; ok
done_ok

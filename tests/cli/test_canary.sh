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
expect_grep 'bad.json:1: not a canary golden file: no field "config"' err.txt
printf 'not json' > bad2.json
expect_exit 2 $DETCHECK canary --golden bad2.json
expect_grep 'bad2.json:1: not JSON' err.txt
expect_exit 2 $DETCHECK canary --golden missing.json
expect_grep 'missing.json: cannot open' err.txt
# an empty golden names line 1 and the reason, never line -1 without one
# (detcheck-canary(1), LIMITS)
: > empty.json
expect_exit 2 $DETCHECK canary --golden empty.json
expect_grep 'empty.json:1: not JSON: empty file' err.txt
# ... a damaged one names its line
sed 's/,"roots"/,\n"roots"/; s/\("roots":\["[0-9a-f]*\)"/\1/' golden.json > cut.json
expect_exit 2 $DETCHECK canary --golden cut.json
expect_grep 'cut.json:2: not a canary golden file: a root "[0-9a-f]*," is not 32 lowercase hex digits' err.txt
# the version is the integer 1, not 1.0
sed 's/"detcheck_canary":1,/"detcheck_canary":1.0,/' golden.json > v10.json
grep -q '"detcheck_canary":1.0,' v10.json || fail "no 1.0 version written"; ok
expect_exit 2 $DETCHECK canary --golden v10.json
expect_grep 'v10.json:1: not a canary golden file: the version (detcheck_canary) must be the integer 1, not 1.0' err.txt
# a golden larger than its run's bound is refused before it is read (the
# old parser read 250 MiB into 4 GB): this run's bound is a few MiB
head -c 3000000 /dev/zero | tr '\0' ' ' > big.json && cat golden.json >> big.json
expect_exit 2 $DETCHECK canary --golden big.json
expect_grep 'big.json: 30.* bytes, more than the .* a golden file of this run (8 steps, 29 tensors) can take' err.txt
rm -f big.json
# ... and white space within the bound is still a golden
{ echo ' {'; sed 's/^{//; s/","/",\n  "/g; s/\],\[/],\n [/g' golden.json; } > spaced.json
[ "$(wc -l < spaced.json)" -gt 100 ] || fail "spaced.json has no white space"; ok
expect_exit 0 $DETCHECK canary --golden spaced.json
# a golden written with --data tok.bin serves ./tok.bin (the same content);
# another content is named as the data, by its digest
head -c 4096 /dev/urandom | od -An -tu1 -v | tr -s ' ' '\n' | awk 'NF{printf "%c%c", $1%64, 0}' > tok.bin
expect_exit 0 $DETCHECK canary --data tok.bin --write-golden data-golden.json
expect_exit 0 $DETCHECK canary --data ./tok.bin --golden data-golden.json
cp tok.bin tok2.bin
expect_exit 0 $DETCHECK canary --data "$PWD/tok2.bin" --golden data-golden.json
# another token at 100 than the random one there (writing a fixed token
# left the file unchanged once in 64 runs)
b=$(od -An -tu1 -j100 -N1 tok2.bin | tr -d ' ')
printf "\\$(printf %03o $(((b + 1) % 64)))\\000" | dd of=tok2.bin bs=1 seek=100 conv=notrunc 2>/dev/null
cmp -s tok.bin tok2.bin && fail "tok2.bin unchanged"; ok
expect_exit 2 $DETCHECK canary --data tok2.bin --golden data-golden.json
expect_grep 'data-golden.json: written for another run configuration (data (content digest): golden [0-9a-f]*, this run [0-9a-f]*)' err.txt

# ---- --write-golden replaces only a golden file, never an input (detcheck(1), OUTPUT FILES)
echo 'precious notes' > notes.txt
expect_exit 2 $DETCHECK canary --write-golden notes.txt
expect_grep 'write-golden notes.txt exists and is not a canary golden file; refusing to overwrite it' err.txt
[ "$(cat notes.txt)" = 'precious notes' ] || fail "notes.txt replaced"; ok
cp tok.bin tok-copy.bin
expect_exit 2 $DETCHECK canary --data tok.bin --write-golden tok.bin
expect_grep 'write-golden tok.bin is also an input (tok.bin)' err.txt
cmp -s tok.bin tok-copy.bin || fail "tok.bin changed"; ok
ln -s golden.json link.json
expect_exit 2 $DETCHECK canary --write-golden link.json
expect_grep 'link.json is a symbolic link' err.txt
cp golden.json ro.json && chmod a-w ro.json
expect_exit 2 $DETCHECK canary --write-golden ro.json
expect_grep 'ro.json is read-only' err.txt
expect_exit 2 $DETCHECK canary --golden golden.json --write-golden golden.json
expect_exit 2 $DETCHECK canary --write-golden ''
expect_grep "write-golden needs a file name" err.txt
# ... a golden file may be replaced by a new one
cp golden.json again.json
expect_exit 0 $DETCHECK canary --write-golden again.json
cmp golden.json again.json || fail "again.json not the golden"; ok

# ---- bad flags
# nothing compared is trouble: --steps 0 said "identical" and read before
# its buffer (detcheck-canary(1), LIMITS)
expect_exit 2 $DETCHECK canary --steps 0
expect_grep 'steps 0: canary runs 1 to 10000 steps' err.txt
expect_no_grep 'identical' out.txt
expect_exit 2 $DETCHECK canary --steps 10001
# one oracle: --golden with --vote ignored the golden, even a missing one
expect_exit 2 $DETCHECK canary --golden missing.json --vote
expect_grep '--golden and --vote: two oracles' err.txt
# a vote of one rank compared it with itself
expect_exit 2 $DETCHECK canary --vote
expect_grep 'vote needs at least 3 ranks, the job has 1' err.txt
expect_exit 2 $DETCHECK canary --test-stall 3
expect_grep 'test-stall: rank 3, but the job has 1 rank' err.txt
expect_exit 2 $DETCHECK canary --inject 0:3:model.wte.weight:0:1 --inject 0:4:model.wte.weight:0:1
expect_grep 'inject given twice: one fault per run' err.txt
expect_exit 2 $DETCHECK canary --inject 0:3:model.wte.weight:0:1:5
expect_grep "has 6 fields, not the five of RANK:STEP:TENSOR:INDEX:BIT" err.txt
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
# two ranks cannot outvote one faulty rank: refused, saying so
expect_exit 2 mpirun --oversubscribe -np 2 $DETCHECK canary --vote --inject 1:1:grad.wpe.weight:0:31
expect_grep 'vote needs at least 3 ranks, the job has 2: two ranks cannot form a majority' err.txt
# two against one against one: no majority is trouble (each --inject is a
# testing hook of its own rank, so an MPMD launch faults two ranks)
expect_exit 2 mpirun --oversubscribe -np 2 $DETCHECK canary --vote --inject 1:1:grad.wpe.weight:0:31 : \
    -np 2 $DETCHECK canary --vote --inject 3:2:grad.wpe.weight:0:30
expect_grep 'no majority' out.txt
expect_exit 2 $MPI $DETCHECK canary --test-stall 4
expect_grep 'test-stall: rank 4, but the job has 4 ranks' err.txt
# ranks with other settings (MPMD, mixed versions, per-node --data) agree
# first: more steps on rank 1 overflowed rank 0's buffer, fewer steps said
# "0 of 2048 elements differ", another seed blamed the device
# (detcheck-canary(1), TESTING HOOKS)
expect_exit 2 timeout 60 mpirun --oversubscribe -np 1 $DETCHECK canary --steps 4 : -np 1 $DETCHECK canary --steps 5
expect_grep 'rank 1 has --steps 5, rank 0 has 4' err.txt
expect_exit 2 timeout 60 mpirun --oversubscribe -np 1 $DETCHECK canary --steps 5 : -np 1 $DETCHECK canary --steps 4
expect_grep 'rank 1 has --steps 4, rank 0 has 5' err.txt
expect_no_grep 'DIFFERS' out.txt
expect_exit 2 timeout 60 mpirun --oversubscribe -np 2 $DETCHECK canary : -np 1 $DETCHECK canary --seed 7
expect_grep 'rank 2 has --seed 7, rank 0 has 1' err.txt
expect_no_grep 'DIFFERS' out.txt
expect_exit 2 timeout 60 mpirun --oversubscribe -np 1 $DETCHECK canary --data tok.bin : -np 1 $DETCHECK canary --data tok2.bin
expect_grep 'rank 1 has --data with content [0-9a-f]*, rank 0 has [0-9a-f]* (the token files differ)' err.txt
expect_exit 0 mpirun --oversubscribe -np 1 $DETCHECK canary --data tok.bin : -np 1 $DETCHECK canary --data "$PWD/tok.bin"
# a hung rank is named and the job ends (exit 2), well before any hang
start=$(date +%s)
expect_exit 2 $MPI $DETCHECK canary --test-stall 3 --timeout 3
expect_grep 'rank 3 ? TIMEOUT: no report within 3 s' out.txt
[ $(( $(date +%s) - start )) -lt 60 ] || fail "the stalled job took too long"; ok
# ... also under mpirun --enable-recovery, where rank 0's MPI_Abort ends rank
# 0 alone: the ranks that reported hung in MPI_Bcast (detcheck-canary(1), LIMITS); now each
# exits with the report's status (a wrapper records them; mpirun itself
# says 0 under recovery whatever its ranks say: Open MPI's choice)
if ompi_info --param orte all --level 9 2>/dev/null | grep -q 'orte_enable_recovery'; then
    printf '#!/bin/sh\n"$@"\necho "rank $OMPI_COMM_WORLD_RANK exit $?" >> "%s/codes.txt"\n' "$PWD" > wrap.sh
    chmod +x wrap.sh
    rm -f codes.txt
    start=$(date +%s)
    rc=0
    timeout 50 mpirun --oversubscribe --enable-recovery -np 3 ./wrap.sh $DETCHECK canary --test-stall 3 --timeout 3 : \
        -np 1 $DETCHECK canary --test-stall 3 --timeout 3 > out.txt 2> err.txt || rc=$?
    [ "$rc" -ne 124 ] || { cat out.txt err.txt; fail "canary under --enable-recovery hung"; }; ok
    expect_grep 'rank 3 ? TIMEOUT: no report within 3 s' out.txt
    for r in 0 1 2; do expect_grep "^rank $r exit 2$" codes.txt; done
    # and since mpirun's own status says nothing there, canary says so
    expect_grep 'under mpirun --enable-recovery, mpirun itself exits 0' err.txt
    [ $(( $(date +%s) - start )) -lt 40 ] || fail "the stalled job under recovery took too long"; ok
else
    skip_part "this Open MPI has no --enable-recovery (orte_enable_recovery)"
fi
done_ok

# detcheck train under MPI: K = 1, 2, 4 ranks and 1 or 2 threads give the same
# trajectory and checkpoint digests, in fp32 and bf16; fast mode differs
# across K and bisect catches it.
. "$DCK_TOP/tests/cli/lib.sh"
export ASAN_OPTIONS=detect_leaks=0
MPI="mpirun --oversubscribe -np"
SMALL="--vocab 64 --width 32 --layers 2 --heads 2 --seq 16 --batch 2 --microbatches 4 --steps 6 --ckpt-every 3 -q"

expect_exit 0 $DETCHECK train $SMALL --out k1
expect_exit 0 $MPI 2 $DETCHECK train $SMALL --out k2
expect_exit 0 $MPI 4 $DETCHECK train $SMALL --out k4 --threads 2
expect_exit 0 $DETCHECK train $SMALL --out t2 --threads 2
[ "$(wc -l < k1/trajectory.jsonl)" -eq 6 ] || fail "6 trajectory records wanted"; ok
for r in k2 k4 t2; do
    cmp k1/trajectory.jsonl $r/trajectory.jsonl || fail "$r trajectory differs from K=1"; ok
done
# one shard per rank, complete checkpoints at 3 and 6
[ -f k4/step_00000003/rank_00003_of_00004.safetensors ] || fail "no rank 3 shard"; ok
[ -f k4/step_00000006/COMPLETE ] && [ -f k4/step_00000006/manifest.json ] || fail "incomplete"; ok
# hash gives the same digests whatever K wrote the checkpoint
expect_exit 0 $DETCHECK hash -o k1.yaml k1/step_00000006
expect_exit 0 $DETCHECK verify --golden k1.yaml k4/step_00000006
expect_exit 0 $DETCHECK verify --golden k1.yaml k2/step_00000006
root1=$($DETCHECK hash k1/step_00000003 | grep '^root:')
root4=$($DETCHECK hash k4/step_00000003 | grep '^root:')
[ "$root1" = "$root4" ] || fail "K=4 checkpoint root $root4 != $root1"; ok
# the groups of the names
$DETCHECK hash k1/step_00000006 > h.txt
expect_grep 'name: optimizer.exp_avg.wte.weight, group: optimizer' h.txt
expect_grep 'name: rng.data.next_sample, group: rng' h.txt
expect_grep 'name: model.lm_head.weight, group: weights' h.txt
expect_grep 'name: step, group: other' h.txt

# bf16: deterministic across K too, and not the fp32 trajectory
expect_exit 0 $DETCHECK train $SMALL --precision bf16 --out b1
expect_exit 0 $MPI 2 $DETCHECK train $SMALL --precision bf16 --out b2 --threads 2
cmp b1/trajectory.jsonl b2/trajectory.jsonl || fail "bf16 differs across K"; ok
! cmp -s b1/trajectory.jsonl k1/trajectory.jsonl || fail "bf16 equals fp32"; ok
$DETCHECK hash b1/step_00000006 > hb.txt
expect_grep 'name: model.wte.weight, group: weights, dtype: BF16' hb.txt
expect_grep 'name: optimizer.master.wte.weight, group: optimizer, dtype: F32' hb.txt
expect_exit 0 $DETCHECK bisect b1 b2

# K must divide M
expect_exit 2 $MPI 3 $DETCHECK train --microbatches 4 --steps 1
expect_grep 'do not divide --microbatches 4' err.txt

# fast mode: allreduce and completion order, allowed to differ across K
expect_exit 0 $DETCHECK train $SMALL --mode fast --out f1
expect_exit 0 $MPI 4 $DETCHECK train $SMALL --mode fast --out f4
expect_exit 1 $DETCHECK bisect f1 f4
expect_grep 'first differing step: 1' out.txt
expect_grep 'replay: detcheck train .*--resume-from\|first differing checkpoint' out.txt
expect_exit 0 $DETCHECK bisect k1 k4
done_ok

# bisect finds an injected one-bit divergence at exactly its step and tensor.
. "$DCK_TOP/tests/cli/lib.sh"
CFG="--vocab 64 --width 32 --layers 2 --heads 2 --seq 16 --batch 1 --microbatches 2 --steps 7 --ckpt-every 1 -q"
T=model.blocks.1.attn.qkv.weight
expect_exit 0 $DETCHECK train $CFG --out a
expect_exit 0 $DETCHECK train $CFG --out b --flip-bit 4:$T:123
expect_exit 1 $DETCHECK bisect a b
expect_grep 'first differing step: 4 (root ' out.txt
expect_grep 'last agreeing checkpoint: step 3' out.txt
expect_grep 'first differing checkpoint: step 4, 1 of ' out.txt
expect_grep "^  $T (digest)" out.txt
expect_grep 'replay: detcheck train .*--resume-from a/step_00000003 --steps 4' out.txt
expect_exit 1 $DETCHECK bisect --json a b
expect_grep '"first_step":4' out.txt
expect_grep "\"tensors\":\[{\"name\":\"$T\"" out.txt
# the printed replay command reproduces run A's step 4
cmd=$($DETCHECK bisect a b | sed -n 's/^replay: //p' | sed 's/REPLAY_DIR/replay/; s/^detcheck /$DETCHECK /')
eval "$cmd -q" || fail "replay failed: $cmd"; ok
expect_exit 0 $DETCHECK hash -o a4.yaml a/step_00000004
expect_exit 0 $DETCHECK verify --golden a4.yaml replay/step_00000004
# without root digests a one-ulp flip is below the loss's resolution: the
# trajectories agree, the checkpoints still show it
expect_exit 0 $DETCHECK train $CFG --out c --digest-every 0
expect_exit 0 $DETCHECK train $CFG --out d --digest-every 0 --flip-bit 4:$T:123
expect_exit 1 $DETCHECK bisect c d
expect_grep 'trajectories agree; the checkpoints do not' out.txt
expect_grep 'first differing checkpoint: step 4' out.txt
expect_exit 2 $DETCHECK train $CFG --out f --flip-bit 4:model.wte.weight:2048
expect_grep 'index 2048 beyond model.wte.weight (2048 elements)' err.txt
# identical and trouble
expect_exit 0 $DETCHECK bisect a a
expect_grep '^identical: 7 and 7 steps agree' out.txt
expect_exit 2 $DETCHECK bisect a nowhere
expect_exit 2 $DETCHECK bisect a
mkdir e && echo '{"step": 1, "loss' > e/trajectory.jsonl && echo 'garbage' >> e/trajectory.jsonl
expect_exit 2 $DETCHECK bisect a e
expect_grep 'e/trajectory.jsonl:1: not a JSON object' err.txt
# a run with a missing step or no records is trouble, not agreement
mkdir g h
head -3 a/trajectory.jsonl > g/trajectory.jsonl
sed -n 5,7p a/trajectory.jsonl >> g/trajectory.jsonl
expect_exit 2 $DETCHECK bisect a g
expect_grep 'g/trajectory.jsonl has a gap: step 4 is missing' err.txt
: > h/trajectory.jsonl
expect_exit 2 $DETCHECK bisect a h
expect_grep 'h/trajectory.jsonl has no records' err.txt
# --json: the keys in their order, integers as integers, nulls where nothing
expect_exit 1 $DETCHECK bisect --json c d
python3 - <<'PY' || fail "bisect --json keys and types"
import json
d = json.load(open("out.txt"), object_pairs_hook=lambda kv: kv)
assert [k for k, _ in d] == ["identical", "steps", "first_step", "detail", "checkpoints_in_both",
                             "last_agreeing_checkpoint", "first_differing_checkpoint", "tensors",
                             "replay"], d
v = dict(d)
assert v["identical"] is False and v["steps"] == [7, 7] and v["first_step"] is None, d
assert v["detail"] is None and v["checkpoints_in_both"] == 7, d
assert v["last_agreeing_checkpoint"] == 3 and v["first_differing_checkpoint"] == 4, d
assert [list(dict(t)) for t in v["tensors"]] == [["name", "kind"]], d
assert v["replay"].startswith("detcheck train --vocab 64 --layers 2 --width 32 "), d
PY
ok
# the replay command comes from the option table: a token file whose name
# needs quoting and floats that need nine digits replay bit for bit
python3 -c "
import struct, random
random.seed(5)
open(\"tok it's.bin\", 'wb').write(struct.pack('<3000H', *[random.randrange(64) for _ in range(3000)]))"
QCFG="--vocab 64 --width 32 --layers 1 --heads 2 --seq 8 --microbatches 2 --steps 5 --ckpt-every 1 -q --lr 0.00123456789 --beta2 0.987654321"
expect_exit 0 $DETCHECK train $QCFG --data "tok it's.bin" --out qa
expect_exit 0 $DETCHECK train $QCFG --data "tok it's.bin" --out qb --flip-bit 3:model.wte.weight:7
expect_exit 1 $DETCHECK bisect qa qb
expect_grep "replay: detcheck train .* --lr 0.0012345678 .* --beta2 0.9876543 .* --data 'tok it'\\\\''s.bin' --resume-from qa/step_00000002" out.txt
cmd=$($DETCHECK bisect qa qb | sed -n 's/^replay: //p' | sed 's/REPLAY_DIR/qreplay/; s/^detcheck /$DETCHECK /')
eval "$cmd -q" || fail "replay failed: $cmd"; ok
expect_exit 0 $DETCHECK hash -o qa3.yaml qa/step_00000003
expect_exit 0 $DETCHECK verify --golden qa3.yaml qreplay/step_00000003
done_ok

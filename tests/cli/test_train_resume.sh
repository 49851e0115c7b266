# Resume: at several steps, with another K, skipping a torn checkpoint;
# refusing another config; resume-check's verdicts.
. "$DCK_TOP/tests/cli/lib.sh"
export ASAN_OPTIONS=detect_leaks=0
MPI="mpirun --oversubscribe -np"
CFG="--vocab 64 --width 32 --layers 1 --heads 2 --seq 16 --batch 2 --microbatches 4"

expect_exit 0 $DETCHECK train $CFG --steps 8 --ckpt-every 2 --out ref -q

# killed right after checkpoint 4 (SIGKILL), resumed on 2 ranks
set +e; $DETCHECK train $CFG --steps 8 --ckpt-every 2 --out a -q --kill-after-ckpt 4 2>/dev/null; rc=$?; set -e
[ "$rc" -eq 137 ] || fail "kill-after-ckpt: exit $rc, wanted 137"; ok
[ ! -d a/step_00000006 ] || fail "ran past the kill"; ok
expect_exit 0 $MPI 2 $DETCHECK train $CFG --steps 8 --ckpt-every 2 --out a --resume
expect_grep 'resuming from a/step_00000004' err.txt
cmp ref/trajectory.jsonl a/trajectory.jsonl || fail "resumed trajectory differs"; ok
expect_exit 0 $DETCHECK bisect ref a

# killed while writing checkpoint 6: torn, skipped with a warning, resume from 4
set +e; $MPI 2 $DETCHECK train $CFG --steps 8 --ckpt-every 2 --out b -q --kill-during-ckpt 6 >/dev/null 2>&1; rc=$?; set -e
[ "$rc" -ne 0 ] || fail "kill-during-ckpt: exit 0"; ok
[ -d b/step_00000006 ] && [ ! -f b/step_00000006/COMPLETE ] || fail "no torn checkpoint left"; ok
expect_exit 0 $DETCHECK train $CFG --steps 8 --ckpt-every 2 --out b --resume
expect_grep 'b/step_00000006: torn checkpoint' err.txt
expect_grep 'resuming from b/step_00000004' err.txt
cmp ref/trajectory.jsonl b/trajectory.jsonl || fail "resume after torn checkpoint differs"; ok
[ -f b/step_00000006/COMPLETE ] || fail "checkpoint 6 not rewritten"; ok
[ ! -f b/step_00000006/manifest.json.partial ] || fail "leftover of the torn write"; ok
expect_exit 0 $DETCHECK hash -o b6.yaml b/step_00000006
expect_exit 0 $DETCHECK verify --golden b6.yaml ref/step_00000006

# a damaged complete checkpoint is skipped too (its digests do not match)
cp -r ref c
printf 'X' | dd of=c/step_00000008/rank_00000_of_00001.safetensors bs=1 seek=2000 conv=notrunc 2>/dev/null
expect_exit 0 $DETCHECK train $CFG --steps 8 --ckpt-every 2 --out c --resume
expect_grep 'damaged checkpoint skipped' err.txt
cmp ref/trajectory.jsonl c/trajectory.jsonl || fail "resume after damage differs"; ok

# another config is refused with the differing fields named
expect_exit 2 $DETCHECK train --vocab 64 --width 48 --layers 1 --heads 2 --seq 16 --batch 2 --microbatches 4 --steps 8 --out ref --resume
expect_grep 'another configuration (width: checkpoint 32, this run 48)' err.txt
expect_exit 2 $DETCHECK train $CFG --precision bf16 --steps 8 --out ref --resume
expect_grep 'precision: checkpoint fp32, this run bf16' err.txt
# a fresh run into a directory with checkpoints is refused
expect_exit 2 $DETCHECK train $CFG --steps 8 --out ref
expect_grep 'already holds checkpoints' err.txt
# --resume-from a given checkpoint into a new directory, compressed shards
expect_exit 0 $DETCHECK train $CFG --steps 8 --resume-from ref/step_00000002 --out d --compress -q
[ -f d/step_00000008/rank_00000_of_00001.safetensors.zst ] || fail "no zstd shard"; ok
expect_exit 0 $DETCHECK hash -o ref8.yaml ref/step_00000008
expect_exit 0 $DETCHECK verify --golden ref8.yaml d/step_00000008
expect_exit 0 $DETCHECK bisect ref d
expect_exit 2 $DETCHECK train $CFG --steps 8 --resume-from b/nonexistent --out e

# resume-check: several kill points, then another K on resume
expect_exit 0 $DETCHECK resume-check $CFG --steps 6 --at 2,4 --ckpt-every 2
expect_grep 'identical (4 interrupted runs' out.txt
expect_exit 0 $DETCHECK resume-check $CFG --steps 5 --at 2 --launcher "$MPI 2" --resume-launcher "$MPI 4" --json
expect_grep '"identical":true' out.txt
python3 - <<'PY' || fail "resume-check --json keys and types"
import json
d = json.load(open("out.txt"), object_pairs_hook=lambda kv: kv)
assert [k for k, _ in d] == ["identical", "steps", "workdir", "checks"], d
v = dict(d)
assert v["identical"] is True and v["steps"] == 5 and len(v["checks"]) == 2, d
for c in v["checks"]:
    assert [k for k, _ in c] == ["name", "result", "first_step", "tensor", "detail"], c
    assert dict(c)["result"] == "identical" and dict(c)["first_step"] is None, c
PY
ok
# ...and it can fail: a corrupted resume is caught at the right step and tensor
expect_exit 1 $DETCHECK resume-check $CFG --steps 6 --at 3 --resume-flip-bit 5:model.blocks.0.mlp.fc.weight:7 --workdir rc
expect_grep 'first differing step 5' out.txt
expect_grep 'NOT reproducible' out.txt
expect_exit 2 $DETCHECK resume-check $CFG --steps 6 --at 6
expect_exit 2 $DETCHECK resume-check $CFG --at 2
# --json of a difference: its step and tensor as numbers and strings
expect_exit 1 $DETCHECK resume-check $CFG --steps 4 --at 2 --resume-flip-bit 4:model.blocks.0.mlp.fc.weight:7 --workdir rcj --json
python3 - <<'PY' || fail "resume-check --json of a difference"
import json
d = json.load(open("out.txt"))
assert d["identical"] is False and d["workdir"] == "rcj", d
for c in d["checks"]:
    assert c["result"] == "different" and c["first_step"] == 4, c
    assert c["tensor"] == "model.blocks.0.mlp.fc.weight" and c["detail"].startswith("first differing step 4"), c
PY
ok
done_ok

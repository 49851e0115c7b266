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
# d holds steps 3..8 only: what ref alone holds is not compared (detcheck-bisect(1), NOT COMPARED)
expect_exit 1 $DETCHECK bisect ref d
expect_grep '^not compared: trajectory steps 1..2 in run A only$' out.txt
expect_exit 0 $DETCHECK bisect --allow-partial ref d
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
# every step of both trajectories compared (detcheck-resume-check(1), DESCRIPTION): a resumed run whose
# trajectory lacks step 4 is a difference at step 4, naming the run that lacks it
cat > drop4.sh <<'SH'
"$@"; rc=$?
for a in "$@"; do case $a in --out=*) sed -i '/"step":4,/d' "${a#--out=}/trajectory.jsonl" ;; esac; done
exit $rc
SH
expect_exit 1 $DETCHECK resume-check $CFG --steps 6 --at 2 --resume-launcher "sh drop4.sh" --json
python3 - <<'PY' || fail "resume-check: a step missing from the resumed trajectory"
import json
d = json.load(open("out.txt"))
c = d["checks"][0]
assert d["identical"] is False and c["result"] == "different" and c["first_step"] == 4, d
assert "step 4 is missing from the resumed run's trajectory (6 and 5 records)" in c["detail"], c
PY
ok
# the run folders and recorded files, re-checked after the runs (detcheck-resume-check(1), DESCRIPTION;
# a launcher is the user's command): a resumed run's folder swapped for a
# link to the reference's, or its trajectory a link to the reference's, is
# trouble, never the reference compared with itself; a root digest one
# trajectory lacks at a step both hold is a difference
cat > swap.sh <<'SH'
"$@"; rc=$?
for a in "$@"; do case $a in --out=*) out=${a#--out=} ;; esac; done
case $SWAP in
dir) rm -rf "$out" && ln -s reference "$out" ;;
file) ln -sf ../reference/trajectory.jsonl "$out/trajectory.jsonl" ;;
noroot) sed -i '/"step":4,/s/,"root":"[0-9a-f]*"//' "$out/trajectory.jsonl" ;;
esac
exit $rc
SH
expect_exit 2 env SWAP=dir $DETCHECK resume-check $CFG --steps 5 --at 2 --resume-launcher "sh swap.sh"
expect_grep 'killed_after_2 is now a symbolic link (replaced during the runs)' err.txt
expect_exit 2 env SWAP=file $DETCHECK resume-check $CFG --steps 5 --at 2 --resume-launcher "sh swap.sh"
expect_grep 'killed_after_2/trajectory.jsonl is a symbolic link: a run.s recording must be its own' err.txt
expect_exit 1 env SWAP=noroot $DETCHECK resume-check $CFG --steps 5 --at 2 --resume-launcher "sh swap.sh"
expect_grep 'first differing step 4: the root digest of step 4 is missing from the resumed run.s trajectory (the reference run recorded it)' out.txt
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
# --- records found after the resume step are re-checked (detcheck-train(1), FILES)
# An edited record (step 6's loss bits) after the resume step: the resumed run
# recomputes step 6, names it, keeps the lines it found, and exits 1 (the
# verdict "different"); the file then holds what this run computed.
cp -r ref r1
rm -r r1/step_00000006 r1/step_00000008
sed -i '/"step":6,/s/"loss_bits":"[0-9a-f]*"/"loss_bits":"00000000"/' r1/trajectory.jsonl
cmp -s ref/trajectory.jsonl r1/trajectory.jsonl && fail "the edit did not take"; ok
sed -n '/"step":5,/,$p' r1/trajectory.jsonl > r1.tail
expect_exit 1 $DETCHECK train $CFG --steps 8 --ckpt-every 2 --out r1 --resume -q
expect_grep 'r1/trajectory.jsonl: step 6: recorded vs recomputed: loss_bits' err.txt
expect_grep 'not reproduced by this run' err.txt
cmp r1.tail r1/trajectory.jsonl.before-resume || fail "the lines found were not kept"; ok
cmp ref/trajectory.jsonl r1/trajectory.jsonl || fail "the recomputed trajectory differs"; ok
[ -f r1/step_00000008/COMPLETE ] || fail "the run stopped at the difference"; ok
# A record missing after the resume step is a difference too.
cp -r ref r2
rm -r r2/step_00000006 r2/step_00000008
sed -i '/"step":7,/d' r2/trajectory.jsonl
expect_exit 1 $DETCHECK train $CFG --steps 8 --ckpt-every 2 --out r2 --resume -q
expect_grep 'step 7: no record of step 7' err.txt
# A line that is no record after the resume step is damage: exit 2, nothing rewritten.
cp -r ref r3
rm -r r3/step_00000006 r3/step_00000008
sed -i '/"step":7,/s/.*/garbage/' r3/trajectory.jsonl
cp r3/trajectory.jsonl r3.before
expect_exit 2 $DETCHECK train $CFG --steps 8 --ckpt-every 2 --out r3 --resume -q
expect_grep 'r3/trajectory.jsonl:7: not a JSON object' err.txt
cmp r3.before r3/trajectory.jsonl || fail "a damaged trajectory was rewritten"; ok
# Untouched records after the resume step pass the re-check (exit 0).
cp -r ref r4
rm -r r4/step_00000006 r4/step_00000008
expect_exit 0 $DETCHECK train $CFG --steps 8 --ckpt-every 2 --out r4 --resume -q
cmp ref/trajectory.jsonl r4/trajectory.jsonl || fail "re-checked trajectory differs"; ok
[ ! -e r4/trajectory.jsonl.before-resume ] || fail "kept lines without a difference"; ok
done_ok

# detcheck train: help, misuse, trajectory format, token files, --bench.
. "$DCK_TOP/tests/cli/lib.sh"
CFG="--vocab 64 --width 32 --layers 1 --heads 2 --seq 16 --batch 1 --microbatches 2"
expect_exit 0 $DETCHECK train --help
expect_grep 'usage: detcheck train' out.txt
expect_exit 0 $DETCHECK resume-check --help
expect_exit 0 $DETCHECK bisect --help
expect_exit 2 $DETCHECK train --microbatches 6
expect_grep 'power of two' err.txt
expect_exit 2 $DETCHECK train --width 30 --heads 4
expect_exit 2 $DETCHECK train --precision fp16
expect_grep "use fp32 or bf16" err.txt
expect_exit 2 $DETCHECK train --steps
expect_exit 2 $DETCHECK train --bogus 1
expect_exit 2 $DETCHECK train --ckpt-every 2
expect_grep 'need --out' err.txt
expect_exit 2 $DETCHECK train $CFG --flip-bit 2:model.nope:1
expect_exit 2 $DETCHECK train --width 4096 --layers 64
expect_grep 'limit' err.txt

# trajectory records
expect_exit 0 $DETCHECK train $CFG --steps 3 --out r --digest-every 2
expect_grep '^step      3  loss ' out.txt
[ "$(wc -l < r/trajectory.jsonl)" -eq 3 ] || fail "3 records"; ok
expect_grep '^{"step":1,"loss":[0-9.]*,"loss_bits":"[0-9a-f]\{8\}","grad_norm":[0-9.e-]*,"grad_norm_bits":"[0-9a-f]\{8\}","lr":[0-9.e-]*}$' r/trajectory.jsonl
expect_grep '^{"step":2,.*,"root":"[0-9a-f]\{32\}"}$' r/trajectory.jsonl
expect_grep '^{"step":3,.*,"root":"[0-9a-f]\{32\}"}$' r/trajectory.jsonl
# the loss decimal and its bits are the same float
python3 - r/trajectory.jsonl <<'PY' || fail "loss and loss_bits disagree"
import json, struct, sys
for line in open(sys.argv[1]):
    o = json.loads(line)
    assert struct.pack('>f', o["loss"]).hex() == o["loss_bits"], line
PY
ok
# golden trajectory: step 20 of the default run (llm.c's dims), loss, grad norm
# and root bits as the trainer computed them before its kernels were vectorised
expect_exit 0 $DETCHECK train --steps 20 --out g -q
expect_grep '^{"step":20,"loss":4.7154894,"loss_bits":"4096e54a","grad_norm":1.3688548,"grad_norm_bits":"3faf36a2","lr":0.0003,"root":"45af94125d8a41f86ad967d632a44d99"}$' g/trajectory.jsonl
expect_exit 0 $DETCHECK train --steps 20 --precision bf16 --threads 2 --out gb -q
expect_grep '^{"step":20,"loss":4.715734,"loss_bits":"4096e74b","grad_norm":1.3712232,"grad_norm_bits":"3faf843e","lr":0.0003,"root":"de7475f8ce8fae50e45fbace55990eb0"}$' gb/trajectory.jsonl
expect_exit 0 $DETCHECK train $CFG --steps 3 --json
expect_grep '"last_step":3' out.txt

# a uint16 token file
python3 -c "
import struct
open('tok.bin','wb').write(b''.join(struct.pack('<H', (i*7) % 50) for i in range(5000)))
open('odd.bin','wb').write(b'\x01\x00\x02')
open('big.bin','wb').write(struct.pack('<' + 'H'*100, *([1]*99 + [300])))"
expect_exit 0 $DETCHECK train $CFG --steps 2 --data tok.bin --out dt
expect_exit 2 $DETCHECK train $CFG --steps 2 --data odd.bin
expect_grep 'odd.bin: 3 bytes is not a whole number' err.txt
expect_exit 2 $DETCHECK train $CFG --steps 2 --data big.bin
expect_grep 'big.bin: token 300 at index 99 is outside the vocabulary' err.txt
expect_exit 2 $DETCHECK train $CFG --steps 2 --data missing.bin
# a different token file is a different run: resume refuses it
python3 -c "
d = bytearray(open('tok.bin','rb').read()); d[10] = 5; d[11] = 0
open('tok2.bin','wb').write(d)"
expect_exit 2 $DETCHECK train $CFG --steps 4 --data tok2.bin --out dt --resume
expect_grep 'data: checkpoint' err.txt

# --bench prints both rates and the ratio
expect_exit 0 $DETCHECK train $CFG --steps 4 --bench
expect_grep '^deterministic .* steps/s' out.txt
expect_grep '^determinism tax [0-9.]*x' out.txt

# no libm transcendental in the training math (the CUDA twin must match it)
objs=$(ls "$DCK_TOP/${BUILD:-build}"/src/train/*.o 2>/dev/null || true)
if [ -z "$objs" ]; then
    fail "no trainer objects under ${BUILD:-build}/src/train"
elif ! command -v nm > /dev/null; then
    skip_part "nm missing: the no-libm check of the training math did not run"
else
    nm $objs | grep -E ' U (exp|expf|log|logf|tanh|tanhf|erf|erff|pow|powf|cos|cosf|sin|sinf)$' > libm.txt || true
    [ ! -s libm.txt ] || { cat libm.txt; fail "training math calls libm"; }; ok
fi
# the run's limits come from the option table and are named in the message
expect_exit 2 $DETCHECK train $CFG --steps 1 --microbatches 2048
expect_grep "microbatches '2048': not an integer in \[1, 1024\]" err.txt
expect_exit 2 $DETCHECK train $CFG --steps 1 --threads 257
expect_grep "threads '257': not an integer in \[1, 256\]" err.txt
# --json: the keys in their order, integers as integers, the rest as before
expect_exit 0 $DETCHECK train $CFG --steps 2 --json
python3 - <<'PY' || fail "train --json keys and types"
import json
d = json.load(open("out.txt"), object_pairs_hook=lambda kv: kv)
assert [k for k, _ in d] == ["ranks", "first_step", "last_step", "first_loss", "last_loss",
                             "seconds", "steps_per_s", "root"], d
v = dict(d)
assert [type(v[k]) for k in ("ranks", "first_step", "last_step")] == [int] * 3, d
assert type(v["first_loss"]) is float and type(v["seconds"]) is float, d
assert len(v["root"]) == 32 and v["last_step"] == 2, d
# the losses as %.9g wrote them: 9 significant digits, no more
assert len(repr(v["first_loss"]).replace(".", "").lstrip("0")) <= 9, d
PY
ok
expect_exit 0 $DETCHECK train $CFG --steps 1 --bench --json
python3 - <<'PY' || fail "train --bench --json keys and types"
import json
d = json.load(open("out.txt"), object_pairs_hook=lambda kv: kv)
assert [k for k, _ in d] == ["ranks", "threads", "steps", "deterministic_steps_per_s",
                             "fast_steps_per_s", "determinism_tax", "goal"], d
v = dict(d)
assert v["ranks"] == 1 and v["steps"] == 1 and v["goal"] == 1.1, d
assert type(v["determinism_tax"]) is float, d
PY
ok
# --- a step folder that detcheck did not make is never cleared (detcheck-train(1), FILES)
# A symbolic link planted as a step folder: refused (exit 2, named), and
# nothing it points at is deleted, not even files named like ours.
mkdir victim
echo precious > victim/data.bin
echo shard > victim/rank_00000_of_00001.safetensors
mkdir sl
ln -s ../victim sl/step_00000002
expect_exit 2 $DETCHECK train $CFG --steps 2 --out sl -q
expect_grep 'sl/step_00000002: is a symbolic link' err.txt
[ -f victim/data.bin ] && [ -f victim/rank_00000_of_00001.safetensors ] || fail "files behind a linked step folder were deleted"; ok
# A real step folder holding a file detcheck does not write: refused, nothing deleted.
mkdir -p fo/step_00000002
echo notes > fo/step_00000002/notes.txt
echo torn > fo/step_00000002/rank_00000_of_00001.safetensors
expect_exit 2 $DETCHECK train $CFG --steps 2 --out fo -q
expect_grep 'fo/step_00000002: holds notes.txt, which detcheck did not write' err.txt
[ -f fo/step_00000002/notes.txt ] && [ -f fo/step_00000002/rank_00000_of_00001.safetensors ] || fail "a foreign step folder was cleared"; ok
# A torn step folder of our own (leftover temporaries, a partial manifest)
# is cleared; a link named as one of our files goes itself, never its target.
mkdir -p ow/step_00000002
echo x > ow/step_00000002/rank_00000_of_00001.safetensors.tmp.Ab12Cd
echo x > ow/step_00000002/manifest.json.partial
echo keep > victim/target
ln -s ../../victim/target ow/step_00000002/COMPLETE.tmp.zz99ZZ
expect_exit 0 $DETCHECK train $CFG --steps 2 --out ow -q
[ -f ow/step_00000002/COMPLETE ] || fail "checkpoint not written"; ok
[ ! -e ow/step_00000002/manifest.json.partial ] && [ ! -e ow/step_00000002/rank_00000_of_00001.safetensors.tmp.Ab12Cd ] && [ ! -L ow/step_00000002/COMPLETE.tmp.zz99ZZ ] || fail "leftovers kept"; ok
[ "$(cat victim/target)" = keep ] || fail "the target of a link was touched"; ok
# A step folder that is a plain file: refused, kept.
mkdir pf; echo f > pf/step_00000002
expect_exit 2 $DETCHECK train $CFG --steps 2 --out pf -q
expect_grep 'pf/step_00000002: is not a directory' err.txt

# --- one writer per run directory (flock on RUN/.lock, holder's pid named; detcheck-train(1), FILES)
$DETCHECK train $CFG --steps 1000000 --out lk -q 2>/dev/null &
holder=$!
trap 'kill -9 $holder 2>/dev/null || true' EXIT
i=0; while [ ! -s lk/trajectory.jsonl ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
[ -s lk/trajectory.jsonl ] || { kill -9 $holder; fail "the first run did not start"; }
expect_exit 2 timeout 60 $DETCHECK train $CFG --steps 3 --out lk -q
expect_grep "another detcheck train (pid $holder) is writing into" err.txt
expect_exit 2 timeout 60 $DETCHECK train $CFG --steps 3 --out lk --resume -q
expect_grep "pid $holder" err.txt
kill -9 $holder; wait $holder 2>/dev/null || true
# the kernel dropped the lock with the process: no stale lock
expect_exit 0 timeout 60 $DETCHECK train $CFG --steps 2 --out lk -q
# a link planted as .lock is not followed (its target is not truncated)
mkdir ll; echo keep > victim/lockt; ln -s ../victim/lockt ll/.lock
expect_exit 2 $DETCHECK train $CFG --steps 1 --out ll -q
expect_grep "ll/.lock: cannot open the run's lock file" err.txt
[ "$(cat victim/lockt)" = keep ] || fail "the target of a linked .lock was truncated"; ok
done_ok

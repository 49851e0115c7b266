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
# more than 4,096 checkpoints in both: every one compared (the list of
# common ones was cut at 4,096, and a difference after it read as identical)
# (manifests of one tensor each: small, so 8,200 load fast)
python3 -c '
import json, struct
for n, v in ((1, 1.0), (2, 2.0)):
    h = json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    open("w%d.safetensors" % n, "wb").write(struct.pack("<Q", len(h)) + h + struct.pack("<f", v))' || fail "w1, w2"
expect_exit 0 $DETCHECK hash --json -o w1.json w1.safetensors
expect_exit 0 $DETCHECK hash --json -o w2.json w2.safetensors
python3 - <<'PY' || fail "making runs of 4,100 checkpoints"
import json, os
line = json.loads(open("a/trajectory.jsonl").readline())
for run in ("x", "y"):
    os.makedirs(run)
    with open(run + "/trajectory.jsonl", "w") as t:
        for s in range(1, 4101):
            t.write(json.dumps(dict(line, step=s)) + "\n")
            d = "%s/step_%08d" % (run, s)
            os.makedirs(d)
            open(d + "/COMPLETE", "w").close()
            os.link("w%d.json" % (2 if run == "y" and s == 4100 else 1), d + "/manifest.json")
PY
expect_exit 1 $DETCHECK bisect x y
expect_grep '^last agreeing checkpoint: step 4099$' out.txt
expect_grep '^first differing checkpoint: step 4100, ' out.txt
rm -rf x y
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
assert [k for k, _ in d] == ["identical", "steps", "first_step", "detail", "first_differing_step",
                             "first_differing", "checkpoints_in_both",
                             "last_agreeing_checkpoint", "first_differing_checkpoint", "tensors",
                             "replay", "not_compared", "partial_accepted", "next", "next_option"], d
v = dict(d)
assert v["identical"] is False and v["steps"] == [7, 7] and v["first_step"] is None, d
assert v["first_differing_step"] is None and v["first_differing"] is None, d
assert v["next"] is None and v["next_option"] is None, d
assert v["detail"] is None and v["checkpoints_in_both"] == 7, d
assert v["last_agreeing_checkpoint"] == 3 and v["first_differing_checkpoint"] == 4, d
assert [list(dict(t)) for t in v["tensors"]] == [["name", "kind"]], d
assert v["replay"].startswith("detcheck train --vocab 64 --layers 2 --width 32 "), d
assert v["not_compared"] == [] and v["partial_accepted"] is False, d
PY
ok
# detcheck-bisect(1), NOT COMPARED: a root digest in one run only is not compared, never
# agreement: run a has one every step, run c none
expect_exit 1 $DETCHECK bisect a c
expect_grep '^incomplete: 7 and 7 steps agree bit for bit; 7 checkpoints in both agree$' out.txt
expect_grep '^not compared: root digests at steps 1..7 in run A only (run B recorded none there)$' out.txt
expect_exit 0 $DETCHECK bisect --allow-partial a c
expect_grep '^identical where both runs hold data (--allow-partial): 7 and 7 steps' out.txt
expect_grep '^not compared: root digests at steps 1..7 in run A only' out.txt
# a checkpoint in one run only, a trajectory step in one run only
cp -r a a5 && rm -r a5/step_00000005
expect_exit 1 $DETCHECK bisect a a5 --junit k1.xml --markdown k1.md
expect_grep '^not compared: checkpoint 5 in run A only$' out.txt
verdict 1 k1
expect_grep 'name="not compared: checkpoints"' k1.xml
expect_grep 'type="not_compared"' k1.xml
expect_exit 1 $DETCHECK bisect --json a5 a
python3 - <<'PY' || fail "bisect --json, a checkpoint in one run only"
import json
d = json.load(open("out.txt"))
assert d["identical"] is False and d["partial_accepted"] is False, d
assert d["not_compared"] == [{"item": "checkpoints", "run": "B", "count": 1, "first": 5, "last": 5,
                              "empty_side": False, "detail": "checkpoint 5 in run B only"}], d
PY
ok
expect_exit 0 $DETCHECK bisect --allow-partial a5 a --junit k2.xml --markdown k2.md
verdict 0 k2
expect_grep '<skipped message="checkpoint 5 in run B only"/>' k2.xml
head -5 a/trajectory.jsonl > a5/trajectory.jsonl
expect_exit 1 $DETCHECK bisect a a5
expect_grep '^not compared: trajectory steps 6..7 in run A only$' out.txt
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

# ---------------------------------------------------------------- recorded runs (detcheck-bisect(1), RECORDED RUNS, LIMITS)
# mkrec DIR [key=value...]: a recorded run as detcheck.Recorder writes it:
# trajectory.jsonl and tensor_digests.bin with three named tensors.
# flip=S: the parameter differs at step S; traj=S: the loss differs at
# step S; name=HEX: the gradient's name bytes; count=S:N: step S declares N
# entries; cut=N: the side file loses its last N bytes; side=0: no side file
cat > mkrec.py <<'PY2'
import os, struct, sys
d = sys.argv[1]
o = dict(a.split("=", 1) for a in sys.argv[2:])
os.makedirs(d, exist_ok=True)
steps, flip, traj = int(o.get("steps", 4)), int(o.get("flip", -1)), int(o.get("traj", -1))
names = [(0, b"layers.0.weight"), (1, b"layers.0.weight"), (2, b"layers.0.weight.exp_avg")]
if "name" in o:
    names[0] = (0, bytes.fromhex(o["name"]))
if "dup" in o:  # id 1 names id 0's tensor again, with its kind
    names[1] = names[0]
count = dict([tuple(map(int, o["count"].split(":")))]) if "count" in o else {}
with open(os.path.join(d, "trajectory.jsonl"), "w") as t:
    for s in range(steps):
        t.write('{"step":%d,"loss":1,"loss_bits":"%s","grad_norm":1,"grad_norm_bits":"3f800000","lr":0.1}\n'
                % (s, "3f800001" if s == traj else "3f800000"))
if o.get("side", "1") == "0":
    sys.exit(0)
b = bytearray(b"DCKTDIG\0" + struct.pack("<II", 1, 0))
for i, (k, n) in enumerate(names):
    b += struct.pack("<BIBH", 1, i, k, len(n)) + n
for s in range(steps):
    b += struct.pack("<BqI", 2, s, count.get(s, len(names)))
    for i in range(len(names)):
        b += struct.pack("<IQQ", i, 1000 * s + i, 8 if (s >= flip >= 0 and i == 1) else 7)
cut = int(o.get("cut", 0))
open(os.path.join(d, "tensor_digests.bin"), "wb").write(b[:len(b) - cut] if cut else b)
PY2
mkrec() { python3 mkrec.py "$@" || fail "mkrec $*"; }
# only the recorded tensors differ: exit 1, and both reports say so and
# name the tensor (step, kind, name)
mkrec ra
mkrec rb flip=2
expect_exit 1 $DETCHECK bisect ra rb --junit v1.xml --markdown v1.md
expect_grep '^first differing tensor: step 2, parameter layers.0.weight$' out.txt
verdict 1 v1
expect_grep 'classname="detcheck.bisect.step_2.parameters" name="layers.0.weight"' v1.xml
expect_grep 'message="layers.0.weight: first differing tensor, step 2, parameter: digest differs between run A and run B" type="digest"' v1.xml
expect_grep '^trajectories agree; the recorded tensors do not; first differing tensor: step 2, parameter layers.0.weight$' v1.md
expect_grep '^| :x: | layers.0.weight | first differing tensor, step 2, parameter: digest differs' v1.md
expect_no_grep 'checkpoints do not' v1.md
# the trajectory and the tensors differ: both fail, the title names both
mkrec rc traj=1 flip=1
expect_exit 1 $DETCHECK bisect ra rc --junit v2.xml --markdown v2.md
! (verdict 0 v2) > /dev/null 2>&1 || fail "verdict takes exit 0 for a report with failures"
ok
verdict 1 v2
expect_grep '^the runs part: first differing step 1 \\(loss\\_bits 3f800000 vs 3f800001\\); first differing tensor: step 1, parameter layers.0.weight$' v2.md
expect_grep 'name="trajectory" time="0">' v2.xml
# the trajectory differs, the recorded tensors agree
mkrec rd traj=3
expect_exit 1 $DETCHECK bisect ra rd --junit v3.xml --markdown v3.md
verdict 1 v3
expect_grep '<system-out>4 recorded steps in both agree tensor by tensor</system-out>' v3.xml
# identical recordings
expect_exit 0 $DETCHECK bisect ra ra --junit v4.xml --markdown v4.md
verdict 0 v4
# recorded in one run only (detcheck-bisect(1), NOT COMPARED): a difference, never
# agreement, naming which run recorded which steps; --allow-partial does
# not accept an empty side
mkrec re side=0
expect_exit 1 $DETCHECK bisect ra re --junit v5.xml --markdown v5.md
verdict 1 v5
expect_grep '^incomplete: 3 and 3 steps agree bit for bit' out.txt
expect_grep '^not compared: recorded steps 0..3 in run A only (run B has no tensor_digests.bin)$' out.txt
expect_grep 'name="not compared: recorded_steps"' v5.xml
expect_grep 'message="recorded steps 0..3 in run A only (run B has no tensor_digests.bin)" type="not_compared"' v5.xml
expect_exit 1 $DETCHECK bisect --allow-partial ra re
expect_exit 1 $DETCHECK bisect --json ra re
python3 - <<'PY2' || fail "bisect --json, recorded in one run only"
import json
d = json.load(open("out.txt"))
assert d["identical"] is False and d["recorded_steps"] == [4, 0] and d["recorded_steps_in_both"] == 0, d
assert d["first_tensor"] is None, d
assert d["not_compared"] == [{"item": "recorded_steps", "run": "A", "count": 4, "first": 0, "last": 3, "empty_side": True,
                              "detail": "recorded steps 0..3 in run A only (run B has no tensor_digests.bin)"}], d
PY2
ok
mkrec rf side=0 traj=2
expect_exit 1 $DETCHECK bisect rf ra --junit v6.xml --markdown v6.md
verdict 1 v6
expect_grep '^not compared: recorded steps 0..3 in run B only (run A has no tensor_digests.bin)$' out.txt
# a tensor_digests.bin that is only a header: "0 recorded steps agree" was exit 0
mkrec rg side=0
printf 'DCKTDIG\000\001\000\000\000\000\000\000\000' > rg/tensor_digests.bin
expect_exit 1 $DETCHECK bisect ra rg --junit v8.xml
expect_grep '^not compared: recorded steps 0..3 in run A only (run B recorded none)$' out.txt
expect_grep '<skipped message="no step recorded in both: the tensors are not compared"/>' v8.xml
expect_exit 1 $DETCHECK bisect --json rg ra
expect_grep '"recorded_steps":\[0,4\],"recorded_steps_in_both":0,"first_tensor":null' out.txt
expect_grep '"item":"recorded_steps","run":"B","count":4,"first":0,"last":3,"empty_side":true' out.txt
# steps recorded in one run only: not compared; --allow-partial accepts them
mkrec r6 steps=6
expect_exit 1 $DETCHECK bisect ra r6
expect_grep '^not compared: trajectory steps 4..5 in run B only$' out.txt
expect_grep '^not compared: recorded steps 4..5 in run B only$' out.txt
expect_exit 0 $DETCHECK bisect --allow-partial ra r6 --junit v7.xml --markdown v7.md
verdict 0 v7
expect_grep '^identical where both runs hold data (--allow-partial): 3 and 5 steps agree bit for bit; 0 checkpoints in both agree; 4 recorded steps agree tensor by tensor$' out.txt
expect_exit 0 $DETCHECK bisect --json --allow-partial ra r6
expect_grep '"identical":true,' out.txt
expect_grep '"partial_accepted":true,"next":null,"next_option":null}$' out.txt

# FIFOs are refused at once, naming the file (they blocked bisect forever)
mkrec rh
rm rh/tensor_digests.bin && mkfifo rh/tensor_digests.bin
expect_exit 2 timeout 20 $DETCHECK bisect ra rh
expect_grep 'rh/tensor_digests.bin: not a regular file' err.txt
mkrec ri
rm ri/trajectory.jsonl && mkfifo ri/trajectory.jsonl
expect_exit 2 timeout 20 $DETCHECK bisect ri ra
expect_grep 'ri/trajectory.jsonl: not a regular file' err.txt
mkrec rj
rm rj/tensor_digests.bin && ln -s /dev/zero rj/tensor_digests.bin
expect_exit 2 timeout 20 $DETCHECK bisect ra rj
expect_grep 'rj/tensor_digests.bin: not a regular file' err.txt
# peak memory: a 1.5 GiB file (sparse) is refused by its first bytes, not
# read whole first (1.5 GB of memory); the same for a trajectory of one
# 1.5 GiB line. rss CMD...: runs it, prints "EXIT MAXRSS_KIB"
rss() {
    python3 -c '
import resource, subprocess, sys
with open("out.txt", "w") as o, open("err.txt", "w") as e:
    rc = subprocess.call(sys.argv[1:], stdout=o, stderr=e)
print(rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' "$@"
}
mkrec rk
truncate -s 1536M rk/tensor_digests.bin  # magic and version, then zeros
set -- $(rss $DETCHECK bisect ra rk)
[ "$1" = 2 ] && [ "$2" -lt 307200 ] || { cat err.txt; fail "1.5 GiB side file: exit $1, peak RSS $2 KiB"; }
ok
expect_grep 'rk/tensor_digests.bin: byte [0-9]*: unknown record type 0' err.txt
mkrec rl
rm rl/tensor_digests.bin && truncate -s 1536M rl/tensor_digests.bin
set -- $(rss $DETCHECK bisect ra rl)
[ "$1" = 2 ] && [ "$2" -lt 307200 ] || { cat err.txt; fail "1.5 GiB file without magic: exit $1, peak RSS $2 KiB"; }
ok
expect_grep 'rl/tensor_digests.bin: byte 0: not a detcheck tensor digest file' err.txt
mkrec rm side=0
truncate -s 1536M rm/trajectory.jsonl  # four lines, then one line of zeros
set -- $(rss $DETCHECK bisect rm rm)
[ "$1" = 2 ] && [ "$2" -lt 307200 ] || { cat err.txt; fail "1.5 GiB trajectory line: exit $1, peak RSS $2 KiB"; }
ok
expect_grep 'rm/trajectory.jsonl:5: line longer than 65536 bytes' err.txt
rm -f rk/tensor_digests.bin rl/tensor_digests.bin rm/trajectory.jsonl
# a huge count in the middle is damage (byte offset), not a torn last
# record (which dropped the later steps, and their difference, silently)
mkrec rn flip=3 count=1:1000000
expect_exit 2 $DETCHECK bisect ra rn
expect_grep 'rn/tensor_digests.bin: byte 166: step 1 lists 1000000 tensors, but only 3 are named before it' err.txt
mkrec ro flip=3 count=1:4294967295
expect_exit 2 $DETCHECK bisect ra ro
expect_grep 'ro/tensor_digests.bin: byte 166: step 1 lists 4294967295 tensors' err.txt
# a step that lists a tensor twice: count 3 read over the next step's entries
mkrec rp count=1:2
expect_exit 2 $DETCHECK bisect ra rp
expect_grep 'rp/tensor_digests.bin: byte 219: step ' err.txt
# a torn last record (a killed run) is still ignored: its step is dropped
mkrec rq flip=3 cut=7
expect_exit 1 $DETCHECK bisect ra rq
expect_grep '3 recorded steps agree tensor by tensor' out.txt
expect_grep '^not compared: recorded step 3 in run A only$' out.txt
mkrec rr flip=2 cut=25
expect_exit 1 $DETCHECK bisect ra rr
expect_grep '^first differing tensor: step 2, parameter layers.0.weight$' out.txt
# a name that is not UTF-8, or holds a NUL byte, is refused naming its offset
mkrec rs name=6c61796572732eff
expect_exit 2 $DETCHECK bisect rs rs
expect_grep 'rs/tensor_digests.bin: byte 16: name of tensor id 0 is not UTF-8 (byte 0xff at byte 31)' err.txt
mkrec rt name=6c6100797273
expect_exit 2 $DETCHECK bisect rt rt
expect_grep 'rt/tensor_digests.bin: byte 16: name of tensor id 0 is not UTF-8 (byte 0x00 at byte 26)' err.txt
mkrec ru name=c3bc6e69e5b1822e77
expect_exit 0 $DETCHECK bisect ru ru
# one tensor named twice (two ids, one kind and name) would pair the wrong
# digests when the steps are matched by name: refused, naming both ids
mkrec rv dup=1
expect_exit 2 $DETCHECK bisect ra rv
expect_grep 'rv/tensor_digests.bin: tensor layers.0.weight (gradient) is named twice, as ids 0 and 1' err.txt
# ---------------------------------------------------------------- state entries (kind 3; detcheck-bisect(1), RECORDED RUNS)
# mkstate DIR [key=value...]: a recording with state entries (kind 3) beside
# the tensors. rng=S: rng.torch differs from step S; grad=S: the gradient
# differs from step S; start=0|1: start.layers.0.weight on step 0 (only the
# first step a process records has it); extra=NAME: a state name on every
# step of this run only
cat > mkstate.py <<'PY2'
import os, struct, sys
d = sys.argv[1]
o = dict(a.split("=", 1) for a in sys.argv[2:])
os.makedirs(d, exist_ok=True)
rng, grad = int(o.get("rng", -1)), int(o.get("grad", -1))
names = [(3, b"rng.torch"), (3, b"data.batch"), (0, b"layers.0.weight"), (1, b"layers.0.weight"),
         (2, b"layers.0.weight.exp_avg")]
if o.get("start", "1") == "1":
    names.append((3, b"start.layers.0.weight"))
if "extra" in o:
    names.append((3, o["extra"].encode()))
with open(os.path.join(d, "trajectory.jsonl"), "w") as t:
    for s in range(4):
        t.write('{"step":%d,"loss":1,"loss_bits":"3f800000","grad_norm":1,"grad_norm_bits":"3f800000","lr":0.1}\n' % s)
b = bytearray(b"DCKTDIG\0" + struct.pack("<II", 1, 0))
for i, (k, n) in enumerate(names):
    b += struct.pack("<BIBH", 1, i, k, len(n)) + n
for s in range(4):
    ids = [i for i, (k, n) in enumerate(names) if s == 0 or not n.startswith(b"start.")]
    b += struct.pack("<BqI", 2, s, len(ids))
    for i in ids:
        k, n = names[i]
        v = 7 + (n == b"rng.torch" and s >= rng >= 0) + (k == 0 and s >= grad >= 0)
        b += struct.pack("<IQQ", i, 1000 * s + i, v)
open(os.path.join(d, "tensor_digests.bin"), "wb").write(b)
PY2
python3 mkstate.py sa || fail "mkstate sa"
# a state name recorded in one run only is no tensor difference, but it
# was not compared (detcheck-bisect(1), NOT COMPARED): start.* (the first step of a process only)
# and any other are named; --allow-partial accepts them
python3 mkstate.py sb start=0 extra=ema.layers.0.weight || fail "mkstate sb"
expect_exit 1 $DETCHECK bisect sa sb
expect_grep '4 recorded steps agree tensor by tensor' out.txt
expect_grep '^not compared: 1 state entry in run A only, at steps both recorded (first: step 0, start.layers.0.weight)$' out.txt
expect_grep '^not compared: 4 state entries in run B only, at steps both recorded (first: step 0, ema.layers.0.weight)$' out.txt
expect_exit 0 $DETCHECK bisect --allow-partial sa sb
expect_exit 1 $DETCHECK bisect --json sa sb
expect_grep '"item":"recorded_state","run":"B","count":4,"first":0,"last":3,"empty_side":false,' out.txt
# state comes first in a step: the RNG state before the gradient it made differ
python3 mkstate.py sc rng=2 grad=2 || fail "mkstate sc"
expect_exit 1 $DETCHECK bisect sa sc --junit s1.xml
expect_grep '^first differing tensor: step 2, state rng.torch$' out.txt
expect_grep 'classname="detcheck.bisect.step_2.state" name="rng.torch"' s1.xml
expect_exit 1 $DETCHECK bisect --json sa sc
python3 - <<'PY2' || fail "bisect --json, state entry"
import json
d = json.load(open("out.txt"))
assert d["first_tensor"] == {"step": 2, "kind": "state", "name": "rng.torch", "how": "digest"}, d
PY2
ok
# the gradient alone differs: named as before
python3 mkstate.py sd grad=3 || fail "mkstate sd"
expect_exit 1 $DETCHECK bisect sa sd
expect_grep '^first differing tensor: step 3, gradient layers.0.weight$' out.txt
# a kind past 3 is still refused, naming the kinds known
python3 - <<'PY2' || fail "kind 4"
import struct
b = b"DCKTDIG\0" + struct.pack("<II", 1, 0) + struct.pack("<BIBH", 1, 0, 4, 1) + b"x"
open("sd/tensor_digests.bin", "wb").write(b)
PY2
expect_exit 2 $DETCHECK bisect sa sd
expect_grep 'sd/tensor_digests.bin: byte 16: name record with id 0 kind 4 (expected id 0, kind 0..3)' err.txt
done_ok

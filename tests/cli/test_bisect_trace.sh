# bisect reads per-step traces (trace.bin; detcheck-bisect(1), TRACE FILES): names the first
# differing module or op of the first differing traced step, says whether it
# is the culprit (inputs equal) or inherited, and refuses damaged files
# naming the file and the byte offset.
. "$DCK_TOP/tests/cli/lib.sh"

# mktrace DIR [key=value...]: a traced run as detcheck.Recorder(trace=...)
# writes it: trajectory.jsonl (equal in every run made here, so the trace
# is what differs) and trace.bin, steps 0..steps-1 each traced with a small
# MLP's forward and backward events (below). Keys:
#   fwd=S      step S: aten.add.Tensor of model.fc1 computes other bits
#              (inputs equal: the culprit)
#   win=S      step S: fc1's weight (an input of aten.mm.default) differs
#              already (inherited)
#   bwd=S      step S: backward aten.mm.default of model.fc2 computes other bits
#   order=S    step S: aten.gelu.default runs where aten.relu.default ran
#   extra=S    step S: one more op at the end of the step
#   modules=1  trace="modules": module events only
#   trunc=S:N  step S keeps its first N events, flagged truncated
#   only=S,S   trace these steps only (default all; empty: none)
#   side=0     no trace.bin
#   set=S:I:FIELD:V  event I of step S gets FIELD (phase kind module op
#              call nin present) = V; prints the event's byte offset
#   count=S:N  step S declares N events; cut=N the file loses its last N
#   bytes; name=HEX the first name's bytes; steporder=1 steps 0 and 1 swap
#   raw=OFF:HEX  bytes at OFF overwritten; dup=1 ids 0 and 1 name one module
#   dump=S     RUN/dump_step_S/trace.safetensors present
#   version=2  trace.bin version 2: each module event's last input is its
#              parameters' digest (fc1's follows its weight, see win=S),
#              and opt=1 adds an optimizer phase (AdamW's update, an op);
#              upd=S: step S's update computes other bits
cat > mktrace.py <<'PY'
import os, struct, sys
d = sys.argv[1]
o = dict(a.split("=", 1) for a in sys.argv[2:])
os.makedirs(d, exist_ok=True)
steps = int(o.get("steps", 4))
g = lambda k: int(o.get(k, -1))
with open(os.path.join(d, "trajectory.jsonl"), "w") as t:
    for s in range(steps):
        t.write('{"step":%d,"loss":1,"loss_bits":"3f800000","grad_norm":1,"grad_norm_bits":"3f800000","lr":0.1}\n' % s)
if "dump" in o:
    os.makedirs(os.path.join(d, "dump_step_%s" % o["dump"]), exist_ok=True)
    open(os.path.join(d, "dump_step_%s" % o["dump"], "trace.safetensors"), "wb").write(b"x")
if o.get("side", "1") == "0":
    sys.exit(0)
version = int(o.get("version", 1))
names, out = {}, bytearray(b"DCKTRAC\0" + struct.pack("<II", version, 0))
if "dup" in o:  # ids 0 and 1 name one module
    names[b"\0dup0"], names[b"\0dup1"] = 0, 1
    out += struct.pack("<BIH", 1, 0, 7) + b"model.x" + struct.pack("<BIH", 1, 1, 7) + b"model.x"
if "name" in o:
    names[bytes.fromhex(o["name"])] = 0
    out += struct.pack("<BIH", 1, 0, len(bytes.fromhex(o["name"]))) + bytes.fromhex(o["name"])
def nid(n):
    global out
    if n is None:
        return 0xFFFFFFFF
    n = n.encode()
    if n not in names:
        names[n] = len(names)
        out += struct.pack("<BIH", 1, names[n], len(n)) + n
    return names[n]
def events(s):
    T = lambda v: (1, 1000 * s + v)        # a tensor's digest at step s
    w1 = (1, 1000 * s + 2 + (7 if s == g("win") else 0))
    h2 = (1, 1000 * s + 4 + (9 if s == g("fwd") else 0) + (11 if s == g("win") else 0))
    a = (1, h2[1] + 100)
    ga = (1, 1000 * s + 8 + (5 if s == g("bwd") else 0))
    act = "aten.gelu.default" if s == g("order") else "aten.relu.default"
    ev = [  # phase, module, op (None: a module event), call, inputs, outputs
        (0, "model.fc1", "aten.mm.default", 0, [T(1), w1], [(1, w1[1] + 10)]),
        (0, "model.fc1", "aten.add.Tensor", 0, [(1, w1[1] + 10), T(3)], [h2]),
        (0, "model.fc1", None, 0, [T(1)], [h2]),
        (0, "model.act", act, 0, [h2], [a]),
        (0, "model.fc2", "aten.mm.default", 0, [a, T(5), (0, 0)], [(1, a[1] + 1)]),
        (0, "model.fc2", None, 0, [a], [(1, a[1] + 1)]),
        (1, "model.fc2", "aten.mm.default", 0, [T(7), T(5)], [ga]),
        (1, "model.fc2", None, 0, [T(7)], [ga, (0, 0)]),
        (1, "model.fc1", "aten.mm.default", 0, [ga, w1], [(1, ga[1] + 3)]),
        (1, "model.fc1", None, 0, [ga], [(1, ga[1] + 3)]),
    ]
    if version >= 2:  # the module's parameters: its last input
        ev = [e if e[2] else e[:4] + (e[4] + [(1, w1[1] + 500) if e[1] == "model.fc1" else T(600)],) + e[5:]
              for e in ev]
    if o.get("opt") == "1":
        ev.append((2, "(optimizer)", "aten._foreach_addcdiv_.Scalar", 0, [w1, T(20), T(21)],
                   [(1, w1[1] + 30 + (1 if s == g("upd") else 0))]))
    if s == g("extra"):
        ev.append((1, "model.fc1", "aten.sum.default", 0, [ga], [(1, 1)]))
    if o.get("modules") == "1":
        ev = [e for e in ev if e[2] is None]
    return ev
only = set(map(int, filter(None, o["only"].split(",")))) if "only" in o else set(range(steps))
trunc = tuple(map(int, o["trunc"].split(":"))) if "trunc" in o else (-1, 0)
count = tuple(map(int, o["count"].split(":"))) if "count" in o else (-1, 0)
setf = o["set"].split(":") if "set" in o else None
order = sorted(only)
if o.get("steporder") == "1":
    order[0], order[1] = order[1], order[0]
for s in order:
    ev = events(s)
    for e in ev:
        nid(e[1]), nid(e[2])
    flag = 0
    if s == trunc[0]:
        ev, flag = ev[:trunc[1]], 1
    out += struct.pack("<BqIB", 2, s, count[1] if s == count[0] else len(ev), flag)
    for i, (ph, mod, op, call, ins, outs) in enumerate(ev):
        f = dict(phase=ph, kind=0 if op is None else 1, module=nid(mod), op=nid(op), call=call,
                 nin=len(ins), present=None)
        if setf and int(setf[0]) == s and int(setf[1]) == i:
            f[setf[2]] = int(setf[3], 0)
            print(len(out))
        out += struct.pack("<BBIIIBB", f["phase"], f["kind"], f["module"], f["op"], f["call"], f["nin"], len(outs))
        for k, (p, v) in enumerate(ins[:f["nin"]] + outs):
            out += struct.pack("<BQQ", f["present"] if (f["present"] is not None and k == 0) else p, 0, v)
if "raw" in o:
    off, hx = o["raw"].split(":")
    out[int(off):int(off) + len(bytes.fromhex(hx))] = bytes.fromhex(hx)
cut = int(o.get("cut", 0))
open(os.path.join(d, "trace.bin"), "wb").write(out[:len(out) - cut] if cut else out)
PY
mktrace() { python3 mktrace.py "$@" > mktrace.out || fail "mktrace $*"; }

# ---------------------------------------------------------------- identical
mktrace a
mktrace a2
expect_exit 0 $DETCHECK bisect a a2 --junit v0.xml --markdown v0.md
expect_grep '^identical: 3 and 3 steps agree bit for bit; 0 checkpoints in both agree; 4 traced steps agree event by event$' out.txt
verdict 0 v0
expect_grep 'name="traced steps"' v0.xml
expect_grep '4 traced steps in both agree event by event' v0.xml
expect_exit 0 $DETCHECK bisect --json a a2
expect_grep '"traced_steps_in_both":4,"traced_steps_truncated":\[0,0\],"first_event":null,"trace_unseen":null,"not_compared":\[\],"partial_accepted":false,"next":null,"next_option":null}$' out.txt

# ---------------------------------------------------------------- a culprit in forward
mktrace f fwd=2
expect_exit 1 $DETCHECK bisect a f --junit v1.xml --markdown v1.md
expect_grep '^trajectories agree; the traced steps do not$' out.txt
expect_grep '^first differing op: step 2, forward, model.fc1 (aten.add.Tensor, call 0), output 0: inputs equal, output differs (culprit)$' out.txt
expect_grep '^magnitudes: rerun both runs with DETCHECK_DUMP_STEP=2 (e.g. DETCHECK_DUMP_STEP=2 <your training command>), then: detcheck diff a/dump_step_2/trace.safetensors f/dump_step_2/trace.safetensors (tensor 00001.output.0)$' out.txt
expect_grep '^traced steps in both: 4, 2 agree before the first differing one$' out.txt
verdict 1 v1
expect_grep 'classname="detcheck.bisect.step_2.forward" name="model.fc1 (aten.add.Tensor, call 0)"' v1.xml
expect_grep 'type="culprit"' v1.xml
expect_grep '^trajectories agree; the traced steps do not; first differing op: step 2, forward, model.fc1 \\(aten.add.Tensor, call 0\\), output 0: inputs equal, output differs \\(culprit\\)$' v1.md
# -q: the verdict lines only
expect_exit 1 $DETCHECK bisect -q a f
expect_grep '^first differing op: step 2, forward' out.txt
expect_no_grep 'magnitudes' out.txt
# --json: first_event with its keys in order
expect_exit 1 $DETCHECK bisect --json a f
python3 - <<'PY' || fail "bisect --json first_event"
import json
d = json.load(open("out.txt"), object_pairs_hook=lambda kv: kv)
v = dict(d)
assert v["identical"] is False and v["traced_steps_in_both"] == 4, d
e = v["first_event"]
assert [k for k, _ in e] == ["step", "event", "phase", "kind", "module", "op", "call", "output", "input",
                             "culprit", "how", "tensor", "magnitudes", "run_b", "context"], e
e = dict(e)
assert e["context"] is False, e
assert e["step"] == 2 and e["event"] == 1 and e["phase"] == "forward" and e["kind"] == "op", e
assert e["module"] == "model.fc1" and e["op"] == "aten.add.Tensor" and e["call"] == 0, e
assert e["output"] == 0 and e["input"] is None and e["culprit"] is True and e["how"] == "output", e
assert e["tensor"] == "00001.output.0" and e["run_b"] is None, e
assert "DETCHECK_DUMP_STEP=2" in e["magnitudes"], e
PY
ok
# dumps present in both runs: nothing run, the diff command named
mktrace fd fwd=2 dump=2
mktrace ad dump=2
expect_exit 1 $DETCHECK bisect ad fd
expect_grep '^dumps present: detcheck diff ad/dump_step_2/trace.safetensors fd/dump_step_2/trace.safetensors (tensor 00001.output.0)$' out.txt
expect_no_grep 'rerun both' out.txt
# in one run only: the rerun is still needed
expect_exit 1 $DETCHECK bisect a fd
expect_grep '^magnitudes: rerun both runs' out.txt
# a run directory that needs quoting gets it in the printed command
mktrace "r un's" fwd=2
expect_exit 1 $DETCHECK bisect a "r un's"
expect_grep "detcheck diff a/dump_step_2/trace.safetensors 'r un'\\\\''s/dump_step_2/trace.safetensors" out.txt

# ---------------------------------------------------------------- inherited
mktrace w win=1
expect_exit 1 $DETCHECK bisect a w --junit v2.xml --markdown v2.md
expect_grep '^first differing op: step 1, forward, model.fc1 (aten.mm.default, call 0), output 0: input 1 already differed (inherited)$' out.txt
verdict 1 v2
expect_grep 'type="inherited"' v2.xml
expect_exit 1 $DETCHECK bisect --json a w
expect_grep '"input":1,"culprit":false,"how":"output"' out.txt

# ---------------------------------------------------------------- a culprit in backward
mktrace b bwd=3
expect_exit 1 $DETCHECK bisect a b --junit v3.xml --markdown v3.md
expect_grep '^first differing op: step 3, backward, model.fc2 (aten.mm.default, call 0), output 0: inputs equal, output differs (culprit)$' out.txt
expect_grep '(tensor 00006.output.0)$' out.txt
verdict 1 v3
expect_grep 'classname="detcheck.bisect.step_3.backward"' v3.xml
# modules only: the first differing module
mktrace am modules=1
mktrace bm modules=1 bwd=3
expect_exit 1 $DETCHECK bisect am bm
expect_grep '^first differing module: step 3, backward, model.fc2 (call 0), output 0: inputs equal, output differs (culprit)$' out.txt
expect_grep '(tensor 00002.output.0)$' out.txt
mktrace fm modules=1 fwd=0
expect_exit 1 $DETCHECK bisect am fm
expect_grep '^first differing module: step 0, forward, model.fc1 (call 0), output 0: inputs equal, output differs (culprit)$' out.txt

# ---------------------------------------------------------------- differing execution
mktrace o order=2
expect_exit 1 $DETCHECK bisect a o --junit v4.xml --markdown v4.md
expect_grep '^execution differs at event 3 of step 2: run A ran forward model.act (aten.relu.default, call 0), run B ran forward model.act (aten.gelu.default, call 0)$' out.txt
expect_no_grep 'magnitudes' out.txt
verdict 1 v4
expect_grep 'type="execution"' v4.xml
expect_exit 1 $DETCHECK bisect --json a o
expect_grep '"how":"execution","tensor":null,"magnitudes":null,"run_b":{"phase":"forward","kind":"op","module":"model.act","op":"aten.gelu.default","call":0}' out.txt
# one run's step goes on: a difference of execution too
mktrace x extra=1
expect_exit 1 $DETCHECK bisect a x
expect_grep '^execution differs at event 10 of step 1: run A ran nothing more (its step ended after 10 events), run B ran backward model.fc1 (aten.sum.default, call 0)$' out.txt
# the same counts of inputs and outputs are part of the event
mktrace n set=1:4:nin:2
expect_exit 1 $DETCHECK bisect a n
expect_grep '^execution differs at event 4 of step 1: run A ran forward model.fc2 (aten.mm.default, call 0) with 3 inputs and 1 output, run B ran forward model.fc2 (aten.mm.default, call 0) with 2 inputs and 1 output$' out.txt

# ---------------------------------------------------------------- truncated steps, partial traces
# the recorder cut step 1 short: only the events both hold are compared;
# the events past the bound are named as not compared, exit 1, never exit 0
# with a note on stderr (detcheck-bisect(1), NOT COMPARED); --allow-partial accepts them
mktrace t trunc=1:5
expect_exit 1 $DETCHECK bisect a t --junit v7.xml --markdown v7.md
expect_grep 'note: t/trace.bin: 1 compared traced step truncated by the recorder (first: step 1)' err.txt
expect_grep '^incomplete: 3 and 3 steps agree bit for bit; 0 checkpoints in both agree; 4 traced steps agree event by event$' out.txt
expect_grep "^not compared: events past the recorder's bound in traced step 1, which run B truncated$" out.txt
verdict 1 v7
expect_grep 'name="not compared: truncated_steps"' v7.xml
expect_exit 1 $DETCHECK bisect --json a t
expect_grep '"not_compared":\[{"item":"truncated_steps","run":"B","count":1,"first":1,"last":1,"empty_side":false,' out.txt
expect_exit 0 $DETCHECK bisect --allow-partial a t --junit v8.xml --markdown v8.md
verdict 0 v8
expect_grep "^not compared: events past the recorder's bound in traced step 1, which run B truncated$" out.txt
mktrace t2 trunc=1:5 fwd=1
expect_exit 1 $DETCHECK bisect t t2
expect_grep '^first differing op: step 1, forward, model.fc1 (aten.add.Tensor, call 0)' out.txt
expect_grep "^not compared: events past the recorder's bound in traced step 1, which run A truncated$" out.txt
mktrace t3 trunc=1:5 extra=1
expect_exit 1 $DETCHECK bisect t t3
expect_grep "^not compared: events past the recorder's bound in traced step 1, which run A truncated$" out.txt
expect_grep "^not compared: events past the recorder's bound in traced step 1, which run B truncated$" out.txt
# steps traced in one run only are not compared, the common ones are:
# named, exit 1 unless --allow-partial
mktrace p only=0,2 fwd=1
expect_exit 1 $DETCHECK bisect a p
expect_grep '2 traced steps agree event by event' out.txt
expect_grep '^not compared: 2 traced steps from 1 to 3 in run A only$' out.txt
expect_exit 0 $DETCHECK bisect --allow-partial a p
mktrace p2 only=1,3 fwd=3
expect_exit 1 $DETCHECK bisect a p2
expect_grep '^first differing op: step 3, ' out.txt

# ---------------------------------------------------------------- traced in one run only
# an empty side: a difference (exit 1), which --allow-partial does not accept
mktrace s side=0
expect_exit 1 $DETCHECK bisect a s --junit v5.xml --markdown v5.md
expect_grep 'warning: a/trace.bin: traced in run A only; the traces are not compared' err.txt
expect_grep '^not compared: traced steps 0..3 in run A only (run B has no trace.bin)$' out.txt
verdict 1 v5
expect_grep 'message="traced steps 0..3 in run A only (run B has no trace.bin)" type="not_compared"' v5.xml
expect_exit 1 $DETCHECK bisect --allow-partial s a
expect_grep 'warning: a/trace.bin: traced in run B only' err.txt
expect_grep '^not compared: traced steps 0..3 in run B only (run A has no trace.bin)$' out.txt
# a trace.bin of a header only: it traced none
mktrace s0 only=
expect_exit 1 $DETCHECK bisect a s0 --junit v9.xml
expect_grep '^not compared: traced steps 0..3 in run A only (run B traced none)$' out.txt
expect_grep '<skipped message="no step traced in both: the traces are not compared"/>' v9.xml

# ---------------------------------------------------------------- a trace difference after the runs part
# detcheck-bisect(1), THE FIRST DIFFERENCE AND THE NEXT STEP:
# the trajectory parts at step 0, the trace at step 2:
# the event is context, never the culprit (the runs already differed: a
# module's weights, which a trace does not see as inputs); the verdict ends
# with what would localise further (traced by ops: the dump of step 0)
mktrace c fwd=2
sed -i 's/"loss_bits":"3f800000"/"loss_bits":"3f800001"/' c/trajectory.jsonl
expect_exit 1 $DETCHECK bisect a c --junit v6.xml --markdown v6.md
expect_grep '^first differing step: 0 ' out.txt
expect_grep '^first trace difference, at step 2, comes after the first differing step 0 (context, not a culprit): forward, model.fc1 (aten.add.Tensor, call 0), output 0 differs$' out.txt
expect_no_grep 'output differs (culprit)' out.txt
expect_no_grep '^magnitudes' out.txt
expect_grep '^next: magnitudes of step 0.s traced outputs: rerun both runs with DETCHECK_DUMP_STEP=0 (detcheck repro --dump-step 0 --trace ops -- CMD), then: detcheck diff a/dump_step_0/trace.safetensors c/dump_step_0/trace.safetensors$' out.txt
[ "$(tail -1 out.txt | cut -c1-6)" = "next: " ] || fail "the verdict does not end with its next line"; ok
verdict 1 v6
expect_grep '; first trace difference, at step 2, comes after the first differing step 0 \\(context, not a culprit\\): forward, model.fc1 \\(aten.add.Tensor, call 0\\), output 0 differs$' v6.md
expect_grep 'type="context"' v6.xml
expect_no_grep 'type="culprit"' v6.xml
expect_exit 1 $DETCHECK bisect --json a c
python3 - <<'PY' || fail "bisect --json: a trace difference after the first differing step"
import json
d = json.load(open("out.txt"))
e = d["first_event"]
assert e["step"] == 2 and e["culprit"] is False and e["context"] is True and e["magnitudes"] is None, e
assert d["first_differing_step"] == 0 and d["first_differing"] == "trajectory", d
assert d["next_option"] == "--dump-step 0" and d["next"].startswith("next: magnitudes of step 0's"), d
PY
ok
# -q: the verdict lines, not the next one (repro builds its own)
expect_exit 1 $DETCHECK bisect -q a c
expect_grep '^first trace difference, at step 2' out.txt
expect_no_grep '^next' out.txt
# traced by modules: the next step is an op trace
mktrace cm modules=1 fwd=2
sed -i 's/"loss_bits":"3f800000"/"loss_bits":"3f800001"/' cm/trajectory.jsonl
expect_exit 1 $DETCHECK bisect am cm
expect_grep '^first trace difference, at step 2, comes after the first differing step 0 (context, not a culprit): forward, model.fc1 (call 0), output 0 differs$' out.txt
expect_grep '^next: localise with an op trace: rerun both runs with DETCHECK_TRACE=ops (detcheck repro --trace ops -- CMD runs and compares them), then bisect them again$' out.txt
# a culprit at the first differing step itself stays the culprit
mktrace c0 fwd=0
sed -i 's/"loss_bits":"3f800000"/"loss_bits":"3f800001"/' c0/trajectory.jsonl
expect_exit 1 $DETCHECK bisect a c0
expect_grep '^first differing op: step 0, forward, model.fc1 (aten.add.Tensor, call 0), output 0: inputs equal, output differs (culprit)$' out.txt
expect_grep '^magnitudes: rerun both runs' out.txt
expect_no_grep '^next' out.txt

# ---------------------------------------------------------------- what the module trace cannot see
# mkdig DIR S: DIR's tensor_digests.bin (steps 0..3: gradient, parameter
# and optimizer state of model.fc2.weight), its gradient's digest other
# from step S on (-1: never); and its trajectory's loss other from step L
# (LOSS_FROM, default never)
mkdig() {
    python3 - "$@" <<'PY' || fail "mkdig $*"
import os, struct, sys
d, s = sys.argv[1], int(sys.argv[2])
names = [(0, b"model.fc2.weight"), (1, b"model.fc2.weight"), (2, b"model.fc2.weight.exp_avg")]
b = bytearray(b"DCKTDIG\0" + struct.pack("<II", 1, 0))
for i, (k, n) in enumerate(names):
    b += struct.pack("<BIBH", 1, i, k, len(n)) + n
for st in range(4):
    b += struct.pack("<BqI", 2, st, 3)
    for i in range(3):
        b += struct.pack("<IQQ", i, 1000 * st + i, 7 + (1 if 0 <= s <= st else 0))
open(os.path.join(d, "tensor_digests.bin"), "wb").write(b)
lf = int(os.environ.get("LOSS_FROM", "-1"))
if lf >= 0:
    t = open(os.path.join(d, "trajectory.jsonl")).read().split("\n")
    t = [l.replace('"3f800000"', '"3f800001"', 1) if l and int(l.split(",")[0].split(":")[1]) >= lf else l for l in t]
    open(os.path.join(d, "trajectory.jsonl"), "w").write("\n".join(t))
PY
}
# detcheck-bisect(1), THE FIRST DIFFERENCE AND THE NEXT STEP:
# a gradient differs at step 1, the module trace only
# at step 2 (the updated weight): said plainly, the trace's event is
# context, and the next step an op trace
mktrace gm modules=1
mktrace gm2 modules=1 fwd=2
mkdig gm -1
mkdig gm2 1
expect_exit 1 $DETCHECK bisect gm gm2 --junit v10.xml --markdown v10.md
expect_grep '^trajectories agree; the recorded tensors do not$' out.txt
expect_grep '^first differing tensor: step 1, gradient model.fc2.weight$' out.txt
expect_grep '^the module trace cannot see parameter gradients or the optimizer update: the first difference is gradient model.fc2.weight at step 1$' out.txt
expect_grep '^first trace difference, at step 2, comes after the first differing step 1 (context, not a culprit): forward, model.fc1 (call 0), output 0 differs$' out.txt
expect_grep '^next: localise with an op trace: ' out.txt
verdict 1 v10
expect_grep 'type="context"' v10.xml
expect_grep 'the module trace cannot see parameter gradients or the optimizer update' v10.md
expect_exit 1 $DETCHECK bisect --json gm gm2
python3 - <<'PY' || fail "bisect --json: what the module trace cannot see"
import json
d = json.load(open("out.txt"))
assert d["first_event"]["culprit"] is False and d["first_event"]["context"] is True, d
assert d["trace_unseen"].startswith("the module trace cannot see parameter gradients"), d
assert d["first_differing_step"] == 1 and d["first_differing"] == "tensor", d
assert d["next_option"] == "--trace ops", d
PY
ok
# the trace finds nothing at all (a loss term outside the model): no
# culprit line, still a next step; traced by ops: the dump of the step
mktrace gn modules=1
mkdig gn 1
expect_exit 1 $DETCHECK bisect gm gn
expect_grep '^the module trace cannot see parameter gradients or the optimizer update: the first difference is gradient model.fc2.weight at step 1$' out.txt
expect_grep '^next: localise with an op trace: ' out.txt
mktrace go
mktrace go2
mkdig go -1
mkdig go2 1
expect_exit 1 $DETCHECK bisect go go2
expect_grep '^the op trace shows no difference at step 1, where the first difference is gradient model.fc2.weight$' out.txt
expect_grep '^next: magnitudes of step 1.s traced outputs: rerun both runs with DETCHECK_DUMP_STEP=1 ' out.txt
# not traced at all: an op trace is the next step
mktrace n1 side=0
mktrace n2 side=0
mkdig n1 -1
mkdig n2 2
expect_exit 1 $DETCHECK bisect n1 n2
expect_no_grep 'trace cannot see' out.txt
expect_grep '^next: localise with an op trace: ' out.txt

# ---------------------------------------------------------------- one step in every line
# detcheck-bisect(1), THE FIRST DIFFERENCE AND THE NEXT STEP:
# a tensor differs from step 1, the trajectory from
# step 3: the first line names step 1 and what differs there
mktrace s1 side=0
mktrace s2 side=0
mkdig s1 -1
LOSS_FROM=3 mkdig s2 1
expect_exit 1 $DETCHECK bisect s1 s2 --junit v11.xml --markdown v11.md
expect_grep '^first differing step: 1 (a recorded tensor; the trajectories part at step 3: loss_bits 3f800000 vs 3f800001)$' out.txt
expect_grep '^first differing tensor: step 1, gradient model.fc2.weight$' out.txt
expect_no_grep 'first differing step: 3' out.txt
verdict 1 v11
expect_grep 'the runs part: first differing step 1 ..a recorded tensor; the trajectories part at step 3' v11.md
expect_exit 1 $DETCHECK bisect --json s1 s2
python3 - <<'PY' || fail "bisect --json: the first differing step"
import json
d = json.load(open("out.txt"))
assert d["first_step"] == 3 and d["first_differing_step"] == 1 and d["first_differing"] == "tensor", d
PY
ok

# ---------------------------------------------------------------- trouble: FIFOs, devices, huge and damaged files
mktrace q
rm q/trace.bin && mkfifo q/trace.bin
expect_exit 2 timeout 20 $DETCHECK bisect a q
expect_grep 'q/trace.bin: not a regular file' err.txt
mktrace z
rm z/trace.bin && ln -s /dev/zero z/trace.bin
expect_exit 2 timeout 20 $DETCHECK bisect z a
expect_grep 'z/trace.bin: not a regular file' err.txt
# a 1.5 GiB file (sparse) is refused by its first bytes, not read whole
rss() {
    python3 -c '
import resource, subprocess, sys
with open("out.txt", "w") as o, open("err.txt", "w") as e:
    rc = subprocess.call(sys.argv[1:], stdout=o, stderr=e)
print(rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' "$@"
}
mktrace h
truncate -s 1536M h/trace.bin  # a valid trace, then zeros
set -- $(rss $DETCHECK bisect a h)
[ "$1" = 2 ] && [ "$2" -lt 307200 ] || { cat err.txt; fail "1.5 GiB trace: exit $1, peak RSS $2 KiB"; }
ok
expect_grep 'h/trace.bin: byte [0-9]*: unknown record type 0' err.txt
rm h/trace.bin && truncate -s 1536M h/trace.bin
set -- $(rss $DETCHECK bisect a h)
[ "$1" = 2 ] && [ "$2" -lt 307200 ] || { cat err.txt; fail "1.5 GiB file without magic: exit $1, peak RSS $2 KiB"; }
ok
expect_grep 'h/trace.bin: byte 0: not a detcheck trace file (no DCKTRAC header)' err.txt
rm h/trace.bin
# a count of events past the cap, in the middle of the file: damage, at the step's offset
mktrace k count=1:16777217
expect_exit 2 $DETCHECK bisect a k
expect_grep 'k/trace.bin: byte [0-9]*: step 1 holds 16777217 events (at most 16777216)' err.txt
# a count under the cap but past the events there: read over the next
# record, which is no event (refused at its offset), never a torn record
mktrace k2 count=1:11
expect_exit 2 $DETCHECK bisect a k2
expect_grep 'k2/trace.bin: byte [0-9]*: step 1: event with phase 2 (expected 0 or 1)' err.txt
# header
for v in 0 3; do
    mktrace hd raw=8:0${v}000000
    expect_exit 2 $DETCHECK bisect a hd
    expect_grep "hd/trace.bin: byte 8: version $v (this detcheck reads 1 to 2)" err.txt
done
mktrace hf raw=12:01000000
expect_exit 2 $DETCHECK bisect a hf
expect_grep 'hf/trace.bin: byte 12: flags 0x1' err.txt
mktrace hm raw=0:44434b54444947
expect_exit 2 $DETCHECK bisect a hm
expect_grep 'hm/trace.bin: byte 0: not a detcheck trace file' err.txt
# fields of an event, each at the event's byte offset (mktrace prints it)
for f in "phase:2:event with phase 2" "kind:7:event with kind 7" "module:99:event uses module name id 99, never named" \
         "op:99:op event uses op name id 99, never named" "op:0xffffffff:op event uses op name id 4294967295" \
         "present:2:input 0 of the event at byte @ has present byte 2 (expected 0 or 1)" \
         "present:0:input 0 of the event at byte @ has present byte 0 and a digest that is not zero"; do
    field=${f%%:*}; rest=${f#*:}; val=${rest%%:*}; msg=${rest#*:}
    mktrace e set=1:1:$field:$val
    off=$(cat mktrace.out)
    [ "$field" = present ] && { msg=$(echo "$msg" | sed "s/@/$off/"); off=$((off + 16)); }
    expect_exit 2 $DETCHECK bisect a e
    expect_grep "e/trace.bin: byte $off: step 1: $msg" err.txt
done
# a module event with an op name id
mktrace e set=1:2:op:0
off=$(cat mktrace.out)
expect_exit 2 $DETCHECK bisect a e
expect_grep "e/trace.bin: byte $off: step 1: module event with op name id 0 (expected 0xffffffff)" err.txt
# steps out of order, names: ids in order, UTF-8, no NUL
mktrace so steporder=1
expect_exit 2 $DETCHECK bisect a so
expect_grep 'so/trace.bin: byte [0-9]*: step 0 after step 1' err.txt
mktrace ni raw=17:05000000
expect_exit 2 $DETCHECK bisect a ni
expect_grep 'ni/trace.bin: byte 16: name record with id 5 (expected id 0)' err.txt
mktrace nu name=6d6f64656c2eff
expect_exit 2 $DETCHECK bisect a nu
expect_grep 'nu/trace.bin: byte 16: name id 0 is not UTF-8 (byte 0xff at byte 29)' err.txt
mktrace nz name=6d6f00
expect_exit 2 $DETCHECK bisect a nz
expect_grep 'nz/trace.bin: byte 16: name id 0 is not UTF-8 (byte 0x00 at byte 25)' err.txt
mktrace ne name=
expect_exit 2 $DETCHECK bisect a ne
expect_grep 'ne/trace.bin: byte 16: name id 0 is empty' err.txt
mktrace dn dup=1
expect_exit 2 $DETCHECK bisect a dn
expect_grep 'dn/trace.bin: byte 30: name model.x recorded twice, as ids 0 and 1' err.txt
mktrace nv name=c3bc6e69e5b1822e77
expect_exit 0 $DETCHECK bisect nv nv
# unknown record type
mktrace ut raw=16:07
expect_exit 2 $DETCHECK bisect a ut
expect_grep 'ut/trace.bin: byte 16: unknown record type 7' err.txt
# a torn last record (a killed run) is ignored: its step is dropped,
# whatever it held; a damaged field inside it is still damage
mktrace tl fwd=3 cut=30
expect_exit 1 $DETCHECK bisect a tl
expect_grep '3 traced steps agree event by event' out.txt
expect_grep '^not compared: traced step 3 in run A only$' out.txt
mktrace tl2 fwd=2 cut=30
expect_exit 1 $DETCHECK bisect a tl2
expect_grep '^first differing op: step 2, ' out.txt
mktrace tl3 set=3:9:phase:3 cut=30
expect_exit 2 $DETCHECK bisect a tl3
expect_grep 'tl3/trace.bin: byte [0-9]*: step 3: event with phase 3' err.txt
mktrace tl4 count=3:4000
expect_exit 1 $DETCHECK bisect a tl4
expect_grep '3 traced steps agree event by event' out.txt

# ---------------------------------------------------------------- version 2 (detcheck-bisect(1), TRACE FILES)
# a module event's last input is its parameters and buffers: a module whose
# weight already differs is inherited, never the culprit (version 1 could
# only call it the culprit)
mktrace v2 version=2 modules=1
mktrace v2w version=2 modules=1 win=1
expect_exit 1 $DETCHECK bisect v2 v2w --junit v10.xml
expect_grep '^first differing module: step 1, forward, model.fc1 (call 0), output 0: its parameters and buffers already differed (inherited)$' out.txt
expect_grep 'type="inherited"' v10.xml
expect_exit 1 $DETCHECK bisect --json v2 v2w
expect_grep '"output":0,"input":1,"culprit":false,"how":"output"' out.txt
mktrace v1w modules=1 win=1
expect_exit 1 $DETCHECK bisect am v1w
expect_grep '^first differing module: step 1, forward, model.fc1 (call 0), output 0: inputs equal, output differs (culprit)$' out.txt
# an op's input that differs is still named by its index
mktrace v2o version=2
mktrace v2ow version=2 win=2
expect_exit 1 $DETCHECK bisect v2o v2ow
expect_grep '^first differing op: step 2, forward, model.fc1 (aten.mm.default, call 0), output 0: input 1 already differed (inherited)$' out.txt
# a version 1 run against a version 2 one: module events differ in their counts, said so
expect_exit 1 $DETCHECK bisect am v2
expect_grep '^execution differs at event 0 of step 0: run A ran forward model.fc1 (module, call 0) with 1 input and 1 output, run B ran forward model.fc1 (module, call 0) with 2 inputs and 1 output (trace.bin versions 1 and 2: record both runs with one detcheck)$' out.txt
# the optimizer's phase: ops run inside optimizer.step(), outputs the written arguments
mktrace vo version=2 opt=1
mktrace vo2 version=2 opt=1
expect_exit 0 $DETCHECK bisect vo vo2
mktrace vu version=2 opt=1 upd=2
expect_exit 1 $DETCHECK bisect vo vu --junit v11.xml
expect_grep '^first differing op: step 2, optimizer, (optimizer) (aten._foreach_addcdiv_.Scalar, call 0), output 0: inputs equal, output differs (culprit)$' out.txt
expect_grep 'classname="detcheck.bisect.step_2.optimizer"' v11.xml
expect_exit 1 $DETCHECK bisect --json vo vu
expect_grep '"phase":"optimizer","kind":"op","module":"(optimizer)"' out.txt
# damage of version 2: a phase past 2, a module event in the optimizer's
# phase, a module event without its parameters' input; phase 2 in version 1
mktrace e version=2 opt=1 set=1:10:phase:3
off=$(cat mktrace.out)
expect_exit 2 $DETCHECK bisect vo e
expect_grep "e/trace.bin: byte $off: step 1: event with phase 3 (expected 0, 1 or 2)$" err.txt
mktrace e version=2 set=1:2:phase:2
off=$(cat mktrace.out)
expect_exit 2 $DETCHECK bisect v2o e
expect_grep "e/trace.bin: byte $off: step 1: module event in phase 2 (optimizer: ops only)$" err.txt
mktrace e version=2 set=1:2:nin:0
off=$(cat mktrace.out)
expect_exit 2 $DETCHECK bisect v2o e
expect_grep "e/trace.bin: byte $off: step 1: module event with no input (version 2: its last input is its parameters and buffers)$" err.txt
mktrace e opt=1
expect_exit 2 $DETCHECK bisect a e
expect_grep "e/trace.bin: byte [0-9]*: step 0: event with phase 2 (expected 0 or 1)$" err.txt
done_ok

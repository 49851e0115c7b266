# detcheck resume-check -- CMD (detcheck-resume-check(1), USER COMMANDS): a user's own training, stopped at
# K and resumed, against its uninterrupted run. The command here is
# fake.py, which honours the contract of the detcheck Python package
# (DETCHECK_RECORD, DETCHECK_STOP_AT, DETCHECK_RESUME, DETCHECK_CHECKPOINT_DIR,
# DETCHECK_STOP_KILL, stop.json) and writes what its recorder writes
# (trajectory.jsonl, tensor_digests.bin with kind-3 state entries), with a
# mode per resume bug, so no PyTorch is needed; the real-PyTorch, HF and
# Lightning tests are the Python package's.
. "$DCK_TOP/tests/cli/lib.sh"
command -v python3 > /dev/null 2>&1 || skip "python3 absent"
mkdir tmp
export TMPDIR="$PWD/tmp"

# fake.py [MODE]: ok (default); resume bugs: forget_rng, loader_restart,
# sched_twice, no_optim, weights (the checkpoint holds the weights before
# step K's update), no_ema, no_scaler, drift (a gradient differs at K+2),
# loss (loss bits at K+1), short (the resume ends 2 steps early), restart
# (the resume records from step 1); steps one run lacks: gap_traj /
# gap_digests (the resume records no trajectory line / no digests of its
# 2nd step), full_gap (the uninterrupted run digests no step 8), stop_gap
# (the stop run has no trajectory line of step 2), no_digests (the resume
# writes no tensor_digests.bin), dup_traj / dup_digests (the resume records
# its first step twice); no_stop_json (a clean stop without
# session().stopped(): no stop.json); contract failures: never_stops,
# early (stops a step early, no stop.json), wrong_step, ignore_kill;
# unrepro (every run differs); flaky_update (the stop run's update of step 2
# differs, gradient and moment equal; only the stop run recording into a
# folder ending _$FLAKY_STOP, default the stop point); fail (30 lines on stderr, exit 3); huge_stop
# (a 300 MB stop.json, sparse); one side only within a step
# (detcheck-resume-check(1), What is compared):
# root_gap (trajectory roots, the resume has none at its 2nd step),
# state_res / state_full (a state entry, rng.cuda, recorded by the resume
# at its 2nd step / by the uninterrupted run at step 8 only); with
# DETCHECK_TRACE, a trace.bin of 3 module events a step: cut_res (the
# resume's 2nd step truncated after 1 event), cut_both (every step of every
# run truncated after 2); bad_start (the resume's start.* says other
# weights, every step agrees); longname (no_ema, the EMA entry named by 9,000
# bytes); drift_traced (drift, traced: the resume's first module event
# differs from K+3 on). STEPS: the steps (default 10).
cat > fake.py <<'PY'
import hashlib, json, os, signal, struct, sys
mode = sys.argv[1] if len(sys.argv) > 1 else "ok"
if mode == "fail":
    print("training...", flush=True)
    for i in range(30):
        print("line %d of the failure" % i, file=sys.stderr)
    sys.exit(3)
rec = os.environ["DETCHECK_RECORD"]
stop_at = os.environ.get("DETCHECK_STOP_AT")
stop_at = int(stop_at) if stop_at else None
resume = os.environ.get("DETCHECK_RESUME") == "1"
kill = os.environ.get("DETCHECK_STOP_KILL") == "1"
ckdir = os.environ["DETCHECK_CHECKPOINT_DIR"]
steps = int(os.environ.get("STEPS", "10"))
with open(os.path.join(rec, "env.txt"), "w") as f:
    for k in ("DETCHECK_RECORD", "DETCHECK_STOP_AT", "DETCHECK_RESUME", "DETCHECK_CHECKPOINT_DIR",
              "DETCHECK_STOP_KILL", "DETCHECK_TRACE"):
        f.write("%s=%s\n" % (k, os.environ.get(k, "")))
    f.write("argv=%s\n" % " ".join(sys.argv))

def H(*a):
    return int.from_bytes(hashlib.sha256(repr(a).encode()).digest()[:16], "big")

salt = rec if mode == "unrepro" else ""
st = {"w": H("w0"), "m": 0, "rng": H("seed"), "sched": 0, "pos": 0, "ema": H("ema0"), "scale": 65536, "step": 0}
ck = os.path.join(ckdir, "ckpt.json")
if resume and mode != "restart":
    st = json.load(open(ck))
    if mode == "forget_rng": st["rng"] = H("seed")
    if mode == "loader_restart": st["pos"] = 0
    if mode == "sched_twice": st["sched"] += 1
    if mode == "no_optim": st["m"] = 0
    if mode == "weights": st["w"] = st["w_before"]
    if mode in ("no_ema", "longname"): st["ema"] = H("ema0")
    if mode == "no_scaler": st["scale"] = 65536

names, out = {}, bytearray(b"DCKTDIG\0" + struct.pack("<II", 1, 0))
traced = os.environ.get("DETCHECK_TRACE", "none") != "none" and (mode.startswith("cut") or mode == "drift_traced")
tr = bytearray(b"DCKTRAC\0" + struct.pack("<II", 1, 0) + struct.pack("<BIH", 1, 0, 5) + b"model")
ema_name = "ema." + "x" * 9000 + ".weight" if mode == "longname" else "ema.layers.0.weight"
traj = open(os.path.join(rec, "trajectory.jsonl"), "w")
first = True
for s in range(st["step"] + 1, steps + 1):
    if mode == "short" and resume and s > steps - 2:
        break
    if stop_at is not None and mode != "never_stops" and st["step"] >= stop_at - (mode == "early"):
        break
    batch = H("batch", st["pos"])
    lr = 0.5 ** st["sched"]
    ents = [(3, "data.batch", batch), (3, "rng.torch", st["rng"]), (3, "lr.0", H(lr)),
            (3, "scaler.scale", H(st["scale"])), (3, ema_name, st["ema"])]
    if first:
        ents.append((3, "start.layers.0.weight", H("other") if mode == "bad_start" and resume else st["w"]))
        first = False
    g = H("grad", st["w"], batch, st["rng"], salt)
    if mode in ("drift", "drift_traced") and resume and s == st.get("resumed_from", 0) + 2:
        g += 1
    st["w_before"] = st["w"]
    st["m"] = H("m", st["m"], g)
    st["w"] = H("w", st["w"], st["m"], lr)
    if mode == "flaky_update" and stop_at is not None and not resume and s == 2 and \
            rec.endswith("_" + os.environ.get("FLAKY_STOP", str(stop_at))):
        st["w"] += 1  # the update alone differs: equal gradient and moment
    st["ema"] = H("ema", st["ema"], st["w"])
    st["rng"] = H("rng", st["rng"])
    st["pos"] += 1
    st["sched"] += 1
    st["scale"] += 1
    st["step"] = s
    ents += [(0, "layers.0.weight", g), (1, "layers.0.weight", st["w"]), (2, "layers.0.weight.exp_avg", st["m"])]
    nth = s - st.get("resumed_from", 0) if resume else 0  # the nth resumed step
    full = stop_at is None and not resume
    if (mode == "state_res" and nth == 2) or (mode == "state_full" and full and s == 8):
        ents.append((3, "rng.cuda", H("cuda", s)))
    for k, n, _ in ents:
        if (k, n) not in names:
            names[(k, n)] = len(names)
            nb = n.encode()
            out += struct.pack("<BIBH", 1, names[(k, n)], k, len(nb)) + nb
    if traced:
        n_ev, cut = 3, 0
        if mode == "cut_both": n_ev, cut = 2, 1
        if mode == "cut_res" and nth == 2: n_ev, cut = 1, 1
        tr += struct.pack("<BqIB", 2, s, n_ev, cut)
        for e in range(n_ev):
            d = H("event", s, e) + (mode == "drift_traced" and resume and e == 0 and s >= st["resumed_from"] + 3)
            tr += struct.pack("<BBIIIBB", 0, 0, 0, 0xffffffff, e, 0, 1) + struct.pack("<BQQ", 1, d >> 64, d & ((1 << 64) - 1))
    digests = struct.pack("<BqI", 2, s, len(ents))
    for k, n, d in ents:
        digests += struct.pack("<IQQ", names[(k, n)], d >> 64, d & ((1 << 64) - 1))
    if not ((mode == "gap_digests" and nth == 2) or (mode == "full_gap" and full and s == 8)):
        out += digests * (2 if mode == "dup_digests" and nth == 1 else 1)
    lb = st["w"] & 0xffffffff
    if mode == "loss" and resume and s == st.get("resumed_from", 0) + 1:
        lb ^= 1
    rec_line = {"step": s, "loss": 1.0, "loss_bits": "%08x" % lb, "grad_norm": 1.0,
                "grad_norm_bits": "%08x" % (g & 0xffffffff), "lr": lr}
    if mode == "root_gap" and nth != 2:
        rec_line["root"] = "%032x" % st["w"]
    line = json.dumps(rec_line) + "\n"
    if not ((mode == "gap_traj" and nth == 2) or (mode == "stop_gap" and stop_at is not None and s == 2)):
        traj.write(line * (2 if mode == "dup_traj" and nth == 1 else 1))
traj.flush()
if not (mode == "no_digests" and resume):
    open(os.path.join(rec, "tensor_digests.bin"), "wb").write(out)
if traced:
    open(os.path.join(rec, "trace.bin"), "wb").write(tr)
if stop_at is not None and mode != "never_stops" and st["step"] >= stop_at - (mode == "early"):
    st["resumed_from"] = st["step"]
    json.dump(st, open(ck, "w"))
    if mode == "huge_stop":
        with open(os.path.join(rec, "stop.json"), "wb") as f:
            f.truncate(300 << 20)
    elif mode not in ("no_stop_json", "early"):
        json.dump({"detcheck_stop": 1, "step": st["step"] + (1 if mode == "wrong_step" else 0), "checkpoint": ck,
                   "pid": os.getpid()}, open(os.path.join(rec, "stop.json"), "w"))
    if kill and mode != "ignore_kill":
        os.kill(os.getpid(), signal.SIGKILL)
print("trained to step %d" % st["step"])
PY
nothing_left() { [ -z "$(ls tmp)" ] || { ls -l tmp; fail "$1: tmp holds $(ls tmp)"; }; ok; }
RC="$DETCHECK resume-check"

# ---------------------------------------------------------------- bad flags: exit 2 before any run
bad() {
    expect_exit 2 $RC "$@"
    [ ! -e ran ] || fail "resume-check $*: the command ran"
    nothing_left "resume-check $*"
}
bad -- 
expect_grep "no command after '--'" err.txt
bad --steps 10 -- touch ran
expect_grep "--steps is a \`detcheck train\` option, for the built-in trainer form" err.txt
bad --seed=3 -- touch ran
expect_grep "--seed is a \`detcheck train\` option" err.txt
bad --resume-device cpu -- touch ran
expect_grep "--resume-device: not with '-- CMD'" err.txt
bad --at 0 -- touch ran
expect_grep "--at '0': wants steps" err.txt
bad --at 3,x -- touch ran
bad --at 3,3 -- touch ran
expect_grep "--at: step 3 given twice" err.txt
bad --at -- touch ran
expect_grep "--at needs a value" err.txt
bad --trace all -- touch ran
expect_grep "--trace 'all': none, modules or ops" err.txt
bad --timeout soon -- touch ran
bad --launcher " " -- touch ran
bad --frobnicate -- touch ran
expect_grep "unknown option '--frobnicate'" err.txt
bad --json --junit - -- touch ran
bad --markdown fake.py -- touch ran
bad stray -- touch ran
expect_grep "'stray': the command comes after '--'" err.txt
mkdir -p wd/stop_5 && touch wd/stop_5/trajectory.jsonl
bad --workdir wd -- touch ran
expect_grep 'wd/stop_5 exists and detcheck did not create it (wd holds no .detcheck-resume-check of an earlier check)' err.txt
rm -rf wd
# a user's files of a run's name in a folder detcheck did not create are
# never deleted (detcheck-resume-check(1), The runs): refused, naming the file, the file intact
for f in full.out full.err stop_3 resume_3.err ckpt_3; do
    mkdir -p wd && echo "precious $f" > "wd/$f"
    bad --workdir wd -- touch ran
    expect_grep "wd/$f exists and detcheck did not create it" err.txt
    expect_grep "^precious $f\$" "wd/$f"
    rm -rf wd
done
# ... nor through a mark that is a link to a file with the magic
mkdir -p wd && echo precious > wd/full.out && printf 'detcheck resume-check work folder, version 1\n' > magic
ln -s ../magic wd/.detcheck-resume-check
bad --workdir wd -- touch ran
expect_grep "wd/full.out exists and detcheck did not create it" err.txt
expect_grep '^precious$' wd/full.out
rm -rf wd magic
expect_exit 0 $RC --help --
expect_grep '^usage: detcheck resume-check \[OPTIONS\] -- CMD ARGS' out.txt
expect_grep 'DETCHECK_STOP_KILL=1' out.txt
# the trainer form's help names the user form
expect_exit 0 $RC --help
expect_grep '^   or: detcheck resume-check \[OPTIONS\] -- CMD ARGS' out.txt

# ---------------------------------------------------------------- reproduced
expect_exit 0 $RC -- python3 fake.py
expect_grep '^at 5 (clean stop): resumed steps 6..10 identical to the uninterrupted run$' out.txt
expect_grep '^reproduced: 1 stop point, every resumed step bitwise identical to the uninterrupted run (10 steps)$' out.txt
nothing_left "a reproduced check"
expect_exit 0 $RC --kill --at 3,7 -q -- python3 fake.py
expect_grep '^at 3 (SIGKILL after the checkpoint): resumed steps 4..10 identical to the uninterrupted run$' out.txt
expect_grep '^at 7 (SIGKILL after the checkpoint): resumed steps 8..10 identical to the uninterrupted run$' out.txt
expect_grep '^reproduced: 2 stop points, every resumed step bitwise identical to the uninterrupted run (10 steps)$' out.txt
[ ! -s err.txt ] || { cat err.txt; fail "-q: stderr not empty"; }
ok
nothing_left "--kill"
# the environment of each run, and the layout of the work dir
# (fake.py writes no trace.bin: --trace asked for traces that no run wrote,
# so none was compared: trouble, after every run of the stop point)
expect_exit 2 $RC --workdir w --at 4 --trace ops -- python3 fake.py
expect_grep "error: --trace: neither .*/w/full nor .*/w/resume_4 wrote trace.bin, so no trace was compared" err.txt
W="$PWD/w"
# the work folder is marked as detcheck's; a second check in it removes
# the earlier one's files and empty folders only there; a folder that
# still holds something is refused, naming it
expect_grep '^detcheck resume-check work folder, version 1$' w/.detcheck-resume-check
mkdir w2 && cp w/.detcheck-resume-check w2/ && touch w2/full.out w2/stop_3.err && mkdir w2/ckpt_3
expect_exit 0 $RC --workdir w2 -- python3 fake.py
[ ! -e w2/stop_3.err ] && [ ! -e w2/ckpt_3 ] || fail "an earlier check's entries were not removed"
ok
rm -rf w2
expect_exit 2 $RC --workdir w -- python3 fake.py
expect_grep "error: w/[a-z_0-9]* exists and is not empty (an earlier check?)" err.txt
expect_grep "^DETCHECK_RECORD=$W/full$" w/full/env.txt
expect_grep "^DETCHECK_CHECKPOINT_DIR=$W/full.ckpt$" w/full/env.txt
expect_grep '^DETCHECK_STOP_AT=$' w/full/env.txt
expect_grep '^DETCHECK_RESUME=$' w/full/env.txt
expect_grep '^DETCHECK_TRACE=ops$' w/full/env.txt
expect_grep "^DETCHECK_RECORD=$W/stop_4$" w/stop_4/env.txt
expect_grep "^DETCHECK_CHECKPOINT_DIR=$W/ckpt_4$" w/stop_4/env.txt
expect_grep '^DETCHECK_STOP_AT=4$' w/stop_4/env.txt
expect_grep '^DETCHECK_STOP_KILL=$' w/stop_4/env.txt
expect_grep "^DETCHECK_RECORD=$W/resume_4$" w/resume_4/env.txt
expect_grep "^DETCHECK_CHECKPOINT_DIR=$W/ckpt_4$" w/resume_4/env.txt
expect_grep '^DETCHECK_RESUME=1$' w/resume_4/env.txt
expect_grep '^DETCHECK_STOP_AT=$' w/resume_4/env.txt
expect_grep '"detcheck_stop": 1, "step": 4' w/stop_4/stop.json
expect_grep '^trained to step 10$' w/resume_4.out
# the contract's variables from the caller's environment reach no run they are not for
expect_exit 0 env DETCHECK_STOP_AT=2 DETCHECK_RESUME=1 DETCHECK_STOP_KILL=1 $RC --workdir w2 -- python3 fake.py
expect_grep '^DETCHECK_STOP_AT=$' w2/full/env.txt
expect_grep '^DETCHECK_RESUME=$' w2/stop_5/env.txt
expect_grep '^DETCHECK_STOP_KILL=$' w2/stop_5/env.txt
expect_grep '^DETCHECK_TRACE=none$' w2/full/env.txt
# launchers: words split on blanks; the resumed run's own
expect_exit 0 $RC --workdir w3 --launcher "env LAUNCHED=a" --resume-launcher "env  LAUNCHED=b" -- sh -c 'echo $LAUNCHED > "$DETCHECK_RECORD/launched"; exec python3 fake.py'
expect_grep '^a$' w3/full/launched
expect_grep '^a$' w3/stop_5/launched
expect_grep '^b$' w3/resume_5/launched
rm -rf w w2 w3

# ---------------------------------------------------------------- the state that was not restored
# diff MODE CAUSE LINE [OPTIONS]: exit 1, the stop line, the verdict, runs kept
diff_is() {
    mode=$1 cause=$2 line=$3; shift 3
    expect_exit 1 $RC "$@" -- python3 fake.py $mode
    expect_grep "^$line\$" out.txt
    expect_grep '^not reproduced: 1 of 1 stop point differs$' out.txt
    expect_grep '^runs kept in ' out.txt
    rm -rf tmp/*
}
diff_is forget_rng rng 'at 5 (clean stop): first difference at step 6 (the first resumed step): rng.torch differs before any tensor (torch.s CPU RNG state was not restored)'
diff_is forget_rng rng 'at 5 (SIGKILL after the checkpoint): first difference at step 6 (the first resumed step): rng.torch differs before any tensor (torch.s CPU RNG state was not restored)' --kill
diff_is loader_restart data 'at 5 (clean stop): first difference at step 6 (the first resumed step): data: the batch differs (the loader restarted: the batch equals that of step 1)'
diff_is sched_twice lr "at 5 (clean stop): first difference at step 6 (the first resumed step): lr differs: 0.03125 vs 0.015625 (the LR scheduler.s state: not restored, or stepped once more)"
diff_is no_optim optimizer 'at 5 (clean stop): first difference at step 6 (the first resumed step): optimizer: layers.0.weight.exp_avg differs with equal gradients (the optimizer state was not restored)'
diff_is weights weights "at 5 (clean stop): first difference at step 6 (the first resumed step): weights: the resumed run started from other weights than those after step 5: parameter layers.0.weight (the checkpoint does not hold the weights after step 5.s update)"
diff_is no_ema ema 'at 5 (clean stop): first difference at step 6 (the first resumed step): ema.layers.0.weight differs (the EMA weights were not restored)'
diff_is no_scaler scaler 'at 5 (clean stop): first difference at step 6 (the first resumed step): scaler.scale differs (the GradScaler state was not restored)'
diff_is drift tensor 'at 3 (clean stop): first difference at step 5 (the 2nd resumed step): first differing tensor: gradient layers.0.weight' --at 3
# detcheck-resume-check(1), What is compared: the trace differs only after that
# step: context, never the culprit
diff_is drift_traced tensor 'at 3 (clean stop): first difference at step 5 (the 2nd resumed step): first differing tensor: gradient layers.0.weight' --at 3 --trace modules
expect_grep '^first trace difference, at step 6, comes after the first differing step 5 (context, not a culprit): forward, model (call 0), output 0 differs$' out.txt
# a difference no resume mistake names ends with the check that localises it
# further, traced op by op (detcheck-resume-check(1), What is compared); with an op trace already, none
expect_exit 1 $RC --at 3 --kill -- python3 fake.py drift
expect_grep "^next: localise with an op trace (forward, backward and the optimizer step): detcheck resume-check --trace ops --at 3 --kill -- python3 fake.py drift$" out.txt
rm -rf tmp/*
expect_exit 1 $RC --at 3 --json -- python3 fake.py drift
python3 - <<'PY' || fail "--json: next"
import json
s = json.load(open("out.txt"))["stops"][0]
assert s["next"].startswith("next: localise with an op trace") and s["next"].endswith(" -- python3 fake.py drift"), s
PY
ok
rm -rf tmp/*
expect_exit 1 $RC --at 3 --trace ops -- python3 fake.py drift_traced
expect_no_grep "^next: " out.txt
rm -rf tmp/*
expect_exit 1 $RC -- python3 fake.py no_ema
expect_no_grep "^next: " out.txt
rm -rf tmp/*
diff_is loss trajectory 'at 5 (clean stop): first difference at step 6 (the first resumed step): trajectory: loss_bits [0-9a-f]* vs [0-9a-f]*'
diff_is short steps 'at 5 (clean stop): the resumed run recorded steps 6..8, the uninterrupted run steps 1..10'
diff_is restart steps 'at 5 (clean stop): the resumed run recorded steps 1..10: it started over at step 1 (no checkpoint loaded?)'
# every step K+1..S recorded by both runs and compared (detcheck-resume-check(1), What is compared): a step
# one run lacks is a difference naming the step and the run, never skipped
diff_is gap_traj steps "at 5 (clean stop): step 7 is missing from the resumed run's trajectory.jsonl (the uninterrupted run recorded it): every resumed step 6..10 is compared, so both runs must record each"
diff_is gap_digests steps "at 5 (SIGKILL after the checkpoint): step 7 is missing from the resumed run's tensor_digests.bin (the uninterrupted run recorded it): every resumed step 6..10 is compared, so both runs must record each" --kill
diff_is full_gap steps "at 5 (clean stop): step 8 is missing from the uninterrupted run's tensor_digests.bin (the resumed run recorded it): every resumed step 6..10 is compared, so both runs must record each"
diff_is no_digests steps "at 5 (clean stop): step 6 is missing from the resumed run's tensor_digests.bin (the uninterrupted run recorded it): every resumed step 6..10 is compared, so both runs must record each"
# ... and before the stop
diff_is stop_gap before_stop "at 5 (clean stop): step 2 is missing from the stopped run's trajectory.jsonl (the uninterrupted run recorded it): every step 1..5 before the stop is compared, so both runs must record each"
expect_exit 1 $RC --json -- python3 fake.py gap_traj
python3 - <<'PY' || fail "--json, a step missing"
import json
s = json.load(open("out.txt"))["stops"][0]
assert (s["identical"], s["first_step"], s["resumed_index"], s["cause"]) == (False, 7, 2, "steps"), s
PY
ok
rm -rf tmp/*
# a step recorded twice is not taken as one: trouble naming the file
expect_exit 2 $RC -- python3 fake.py dup_traj
expect_grep 'resume_5/trajectory.jsonl:2: step 6 does not follow step 6' err.txt
rm -rf tmp/*
expect_exit 2 $RC -- python3 fake.py dup_digests
expect_grep 'resume_5/tensor_digests.bin: byte [0-9]*: step 6 after step 6' err.txt
rm -rf tmp/*
diff_is unrepro before_stop "at 5 (clean stop): the stopped run already differs at step 1, before the stop and before anything was resumed: two runs of the same command differ, so the command is not reproducible run to run; first differing tensor: gradient layers.0.weight; equal at that step: data.batch, RNG states (the difference arises in forward or backward: the batch is equal). Such a difference can be intermittent (in some runs only: detcheck repro -n 2 may pass); to see and localise it: detcheck repro -n 30 --trace ops -- python3 fake.py unrepro (the op trace covers the optimizer step)"
# two runs of the command part before anything is resumed, in the update
# alone (detcheck-resume-check(1), What is compared): the line names the first differing tensor, what
# was equal, where it arises, that it can be intermittent and the repro
# command that sees it with the op trace
diff_is flaky_update before_stop "at 5 (clean stop): the stopped run already differs at step 2, before the stop and before anything was resumed: two runs of the same command differ, so the command is not reproducible run to run; first differing tensor: parameter layers.0.weight; equal at that step: data.batch, RNG states, gradients (1), optimizer state (1) (the difference arises in the optimizer's update of the weights). Such a difference can be intermittent (in some runs only: detcheck repro -n 2 may pass); to see and localise it: detcheck repro -n 30 --trace ops -- python3 fake.py flaky_update (the op trace covers the optimizer step)"
expect_exit 1 $RC --json -- python3 fake.py flaky_update
python3 - <<'PY' || fail "--json, a difference before the stop"
import json
d = json.load(open("out.txt"))
s = d["stops"][0]
assert (s["cause"], s["first_step"], d["intermittent"]) == ("before_stop", 2, False), d
PY
ok
rm -rf tmp/*
# ... seen in one stop run of two: intermittent, with the evidence
expect_exit 1 $RC --at 3,5 -- env FLAKY_STOP=5 python3 fake.py flaky_update
expect_grep '^at 3 (clean stop): resumed steps 4..10 identical' out.txt
expect_grep '^at 5 (clean stop): the stopped run already differs at step 2, before the stop' out.txt
expect_grep '^intermittent: 1 of 2 runs of the command parted from the uninterrupted run before their stop, the other 1 did not$' out.txt
rm -rf tmp/*
# two stop points, one differs
cat > half.sh <<'SH'
case $DETCHECK_RECORD in *_7) exec python3 fake.py forget_rng ;; esac
exec python3 fake.py
SH
expect_exit 1 $RC --at 3,7 -- sh half.sh
expect_grep '^at 3 (clean stop): resumed steps 4..10 identical' out.txt
expect_grep '^at 7 (clean stop): first difference at step 8 (the first resumed step): rng.torch differs' out.txt
expect_grep '^not reproduced: 1 of 2 stop points differ$' out.txt
rm -rf tmp/*

# what one run recorded and the other did not within a step both hold
# (detcheck-resume-check(1), What is compared): a root digest, a state entry (kind 3; start.* of a process's
# first step aside), traced events past a truncation one run made alone
diff_is root_gap steps "at 5 (clean stop): the root digest of step 7 is missing from the resumed run's trajectory.jsonl (the uninterrupted run recorded it): every resumed step 6..10 is compared, so both runs must record each"
diff_is state_res steps "at 5 (clean stop): state entry rng.cuda of step 7 is missing from the uninterrupted run's tensor_digests.bin (the resumed run recorded it): every resumed step 6..10 is compared, so both runs must record each"
diff_is state_full steps "at 5 (clean stop): state entry rng.cuda of step 8 is missing from the resumed run's tensor_digests.bin (the uninterrupted run recorded it): every resumed step 6..10 is compared, so both runs must record each"
diff_is cut_res steps "at 5 (clean stop): what traced step 7 holds past its first 1 events (truncated by the recorder) is missing from the resumed run's trace.bin (the uninterrupted run recorded it): every resumed step 6..10 is compared, so both runs must record each" --trace modules
diff_is bad_start weights "at 5 (clean stop): first difference at step 6 (the first resumed step): weights: the resumed run started from other weights than those after step 5: parameter layers.0.weight (the checkpoint does not hold the weights after step 5.s update)"
# both truncated alike: compared nowhere, so incomplete (1) unless
# --allow-partial; the verdict says what was not compared either way
nc="not compared: events past the recorder's bound in 5 traced steps (6..10), which both runs truncated alike"
expect_exit 1 $RC --trace modules -- python3 fake.py cut_both
expect_grep "^at 5 (clean stop): incomplete: resumed steps 6..10 identical to the uninterrupted run; $nc (--allow-partial accepts them)\$" out.txt
expect_grep "^incomplete: 1 stop point, every resumed step bitwise identical to the uninterrupted run (10 steps); $nc (--allow-partial accepts them)\$" out.txt
rm -rf tmp/*
expect_exit 1 $RC --json --trace modules -- python3 fake.py cut_both
expect_grep '"verdict": *"incomplete"' out.txt
rm -rf tmp/*
expect_exit 0 $RC --allow-partial --trace modules -- python3 fake.py cut_both
expect_grep "^at 5 (clean stop): resumed steps 6..10 identical to the uninterrupted run; $nc\$" out.txt
expect_grep "^reproduced: 1 stop point, every resumed step bitwise identical to the uninterrupted run (10 steps); $nc\$" out.txt
rm -rf tmp/*

# ---------------------------------------------------------------- the runs' folders and files, re-checked (detcheck-resume-check(1), The runs)
# after each run: a run folder swapped for a link or another folder, a
# recorded file that is a link or another run's file, is trouble naming it
cat > swap.sh <<'SH'
python3 fake.py || exit $?
W=$(dirname "$DETCHECK_RECORD")
case "$SWAP:$DETCHECK_RECORD" in
link:*/resume_5) rm -rf "$DETCHECK_RECORD" && ln -s full "$DETCHECK_RECORD" ;;
other:*/stop_5) mv "$W/full" "$W/full.old" && cp -r "$W/full.old" "$W/full" ;;
hard:*/resume_5) ln -f "$W/full/trajectory.jsonl" "$DETCHECK_RECORD/trajectory.jsonl" ;;
sym:*/resume_5) ln -sf ../full/tensor_digests.bin "$DETCHECK_RECORD/tensor_digests.bin" ;;
stopjson:*/resume_5) ln -sf ../stop_5/stop.json "$DETCHECK_RECORD/stop.json" ;;
esac
SH
swapped() {
    expect_exit 2 env SWAP=$1 $RC -- sh swap.sh
    expect_grep "$2" err.txt
    expect_grep "nothing is compared" err.txt
    rm -rf tmp/*
}
swapped link "the resume run from 5's folder .*/resume_5 is now a symbolic link (replaced during the resume run from 5)"
swapped other "the uninterrupted run's folder .*/full is another folder than the one detcheck created (replaced during the stop run at 5)"
swapped hard "/resume_5/trajectory.jsonl is the same file as .*/full/trajectory.jsonl (after the resume run from 5)"
swapped sym "/resume_5/tensor_digests.bin is a symbolic link (after the resume run from 5)"
swapped stopjson "/resume_5/stop.json is a symbolic link"
# a log that cannot be created (a file planted at its name during an
# earlier run) is refused, naming it, and never read back
cat > plant.sh <<'SH'
[ -n "$DETCHECK_STOP_AT$DETCHECK_RESUME" ] || echo "SECRET-CONTENT" > "$(dirname "$DETCHECK_RECORD")/stop_5.err"
exec python3 fake.py
SH
expect_exit 2 $RC --json -- sh plant.sh
expect_grep 'stop_5.err exists (a file) and this command creates it' err.txt
expect_no_grep SECRET err.txt
expect_no_grep SECRET out.txt
python3 - <<'PY' || fail "--json, a planted log"
import json
d = json.load(open("out.txt"))
assert d["verdict"] == "trouble" and d["stderr_tail"] is None and "stop_5.err exists" in d["error"], d
PY
ok
rm -rf tmp/*

# names whole (detcheck(1), NAMES IN OUTPUT): a 9,000-byte state name in the line, the state and the JSON
expect_exit 1 $RC --json -- python3 fake.py longname
python3 - <<'PY' || fail "--json, a long name"
import json
s = json.load(open("out.txt"))["stops"][0]
name = "ema." + "x" * 9000 + ".weight"
assert s["state"] == name and s["cause"] == "ema", (len(s["state"] or ""), s["cause"])
assert s["line"].endswith(": " + name + " differs (the EMA weights were not restored)"), len(s["line"])
PY
ok
rm -rf tmp/*

# ---------------------------------------------------------------- contract failures: exit 2
expect_exit 2 $RC -- python3 fake.py never_stops
expect_grep 'the stop run at 5 did not stop at step 5: it recorded steps 1..10 (DETCHECK_STOP_AT not honoured)' err.txt
rm -rf tmp/*
# a clean stop needs no stop.json (detcheck-resume-check(1), The contract): the process exits 0 with its
# recording ending at K; --kill needs it (the tool cannot tell a complete
# checkpoint from a crash without it), and says so
expect_exit 0 $RC -- python3 fake.py no_stop_json
expect_grep '^at 5 (clean stop): resumed steps 6..10 identical to the uninterrupted run$' out.txt
nothing_left "a clean stop without stop.json"
expect_exit 2 $RC --kill -- python3 fake.py no_stop_json
expect_grep 'the stop run at 5 wrote no stop.json (.*/stop_5/stop.json): with --kill the script must call detcheck.session().stopped(5) once the checkpoint of step 5 is complete: it writes stop.json, then SIGKILLs the process (DETCHECK_STOP_KILL=1)' err.txt
rm -rf tmp/*
expect_exit 2 $RC -- python3 fake.py early
expect_grep 'the stop run at 5 exited with status 0 after recording steps 1..4: a clean stop ends its recording at step 5 (DETCHECK_STOP_AT=5 not honoured)' err.txt
rm -rf tmp/*
# a stop.json too large to be one is named so, with the limit
expect_exit 2 $RC -- python3 fake.py huge_stop
expect_grep 'stop_5/stop.json: 314572800 bytes, too large for a stop record (at most 65536 bytes' err.txt
expect_no_grep 'not a stop record' err.txt
rm -rf tmp/*
expect_exit 2 $RC -- python3 fake.py wrong_step
expect_grep 'stop_5/stop.json says step 6, not 5 (DETCHECK_STOP_AT=5 not honoured)' err.txt
rm -rf tmp/*
expect_exit 2 $RC --kill -- python3 fake.py ignore_kill
expect_grep 'the stop run at 5 exited with status 0: with --kill it must SIGKILL itself right after writing stop.json (DETCHECK_STOP_KILL=1 not honoured)' err.txt
rm -rf tmp/*
expect_exit 2 $RC -- python3 fake.py fail
expect_grep 'the uninterrupted run exited with status 3: python3 fake.py fail' err.txt
expect_grep 'its stderr, last 20 lines' err.txt
expect_grep '^  line 29 of the failure$' err.txt
expect_no_grep 'line 9 of the failure' err.txt
rm -rf tmp/*
# the command line printed to rerun a failed run: whole (no cut at 1 KiB),
# shell words that sh -c reads back byte for byte (spaces, quotes, a
# newline, a tab, ESC, CR, DEL, C1 CSI, U+202E, U+2028, a byte that is not
# UTF-8, a long argument), and nothing a terminal would act on (detcheck-resume-check(1), Exit status)
cat > argv.py <<'PY'
import json, os, sys
open("argv.json", "w").write(json.dumps([os.fsencode(a).hex() for a in sys.argv[1:]]))
sys.exit(3)
PY
long=$(python3 -c 'print("x" * 3000)') lf=$(printf 'lf\n\n.') lf=${lf%.}
expect_exit 2 $RC -- python3 argv.py "a b" "it's" '"q"' "$(printf 'l1\nl2')" "$lf" "$(printf 't\tab')" \
    "$(printf 'esc\033[31mred')" "$(printf 'cr\rx')" "$(printf 'del\177')" "$(printf 'csi\302\233x')" \
    "$(printf 'rlo\342\200\256x')" "$(printf 'ls\342\200\250x')" "$(printf 'bad\377')" "$long" '$HOME' '' "$(printf '\303\251')"
mv argv.json first.json
python3 - <<'PY' || fail "the printed command line"
import json, re, subprocess
err = open("err.txt", "rb").read()
head = b"detcheck resume-check: error: the uninterrupted run exited with status 3: "
assert err.count(head) == 1, err
line = err.split(head, 1)[1].split(b"\ndetcheck resume-check: ", 1)[0]
assert len(line) > 3000 and line.startswith(b"python3 argv.py 'a b' "), line[:200]
# printable ASCII, newlines inside the quotes, and the e-acute: nothing a terminal acts on
assert not re.search(rb"[\x00-\x09\x0b-\x1f\x7f]", line), line
assert not re.search(rb"[\x80-\xff]", line.replace(b"\xc3\xa9", b"")), line
subprocess.run(["sh", "-c", line], check=False)
assert json.load(open("argv.json")) == json.load(open("first.json")), (open("argv.json").read(), line)
PY
ok
rm -rf tmp/*
# ... and whole in the reports' title (no cut at 8 KiB)
expect_exit 2 $RC --markdown long.md -- python3 argv.py "$(python3 -c 'print("y" * 10000)')"
python3 - <<'PY' || fail "a long command line in the report's title"
import re
runs = [len(r) for r in re.findall("y{2,}", open("long.md").read())]
assert runs and all(n == 10000 for n in runs), runs
PY
ok
rm -rf tmp/*
expect_exit 2 $RC -- true
expect_grep 'the uninterrupted run recorded nothing: .*/full/trajectory.jsonl is absent, so the command did not honour DETCHECK_RECORD' err.txt
rm -rf tmp/*
expect_exit 2 $RC --at 10 -- python3 fake.py
expect_grep 'stop point 10: the uninterrupted run recorded steps 1..10, so a stop point is a step from 1 to 9' err.txt
rm -rf tmp/*
start=$(date +%s)
expect_exit 2 $RC --timeout 1 -- sh -c 'sleep 30 & sleep 30'
[ $(( $(date +%s) - start )) -lt 15 ] || fail "--timeout 1 took $(( $(date +%s) - start )) s"
ok
expect_grep 'did not finish within 1 s (--timeout): its process group was killed' err.txt
rm -rf tmp/*

# ---------------------------------------------------------------- --json, --junit, --markdown
expect_exit 0 $RC --json --at 3,6 -- python3 fake.py
python3 - <<'PY' || fail "--json, reproduced"
import json
d = json.load(open("out.txt"))
assert d["verdict"] == "reproduced" and d["steps"] == 10 and d["kept"] is False, d
assert d["command"] == ["python3", "fake.py"], d
assert [s["at"] for s in d["stops"]] == [3, 6], d
s = d["stops"][0]
assert s == {"at": 3, "mode": "clean", "identical": True, "first_step": None, "resumed_index": None, "cause": None,
             "state": None, "line": "at 3 (clean stop): resumed steps 4..10 identical to the uninterrupted run",
             "not_compared": None, "trace": None, "next": None, "event": None}, s
PY
ok
nothing_left "--json"
expect_exit 1 $RC --json --kill --junit r.xml --markdown r.md -- python3 fake.py loader_restart
python3 - <<'PY' || fail "--json, different"
import json, os
d = json.load(open("out.txt"))
assert d["verdict"] == "different" and d["kept"] is True and os.path.isdir(d["workdir"]), d
s = d["stops"][0]
assert s["at"] == 5 and s["mode"] == "kill" and s["identical"] is False and s["first_step"] == 6, s
assert s["resumed_index"] == 1 and s["cause"] == "data" and s["state"] == "data.batch", s
assert s["line"].endswith("data: the batch differs (the loader restarted: the batch equals that of step 1)"), s
PY
ok
expect_grep 'classname="detcheck.resume_check" name="at_5"' r.xml
expect_grep 'type="data"' r.xml
expect_grep 'failures="1"' r.xml
expect_grep '^### :x: detcheck resume-check: DIFFERENT' r.md
expect_grep 'not reproduced: 1 of 1 stop point differs' r.md
rm -rf tmp/*
expect_exit 2 $RC --json --junit bad.xml -- python3 fake.py never_stops
python3 - <<'PY' || fail "--json, trouble"
import json
d = json.load(open("out.txt"))
assert d["verdict"] == "trouble" and d["kept"] is True, d
assert "did not stop at step 5: it recorded steps 1..10 (DETCHECK_STOP_AT not honoured)" in d["error"], d
assert d["stops"][0]["identical"] is None and d["stops"][0]["cause"] is None, d
PY
ok
expect_grep 'errors="1"' bad.xml
expect_grep 'DETCHECK_STOP_AT not honoured' bad.xml
rm -rf tmp/*
expect_exit 2 $RC --json -- python3 fake.py fail
python3 - <<'PY' || fail "--json, failed run"
import json
d = json.load(open("out.txt"))
assert d["verdict"] == "trouble" and d["stops"] == [] and "line 29 of the failure" in d["stderr_tail"], d
PY
ok
rm -rf tmp/*
expect_exit 0 $RC --junit ok.xml --markdown ok.md -- python3 fake.py
expect_grep 'failures="0"' ok.xml
expect_grep 'errors="0"' ok.xml
expect_grep '^### :white_check_mark: detcheck resume-check: OK' ok.md
nothing_left "reports"
done_ok

# detcheck repro: runs a command N times with DETCHECK_RECORD set and says
# whether the runs are bitwise reproducible (detcheck-repro(1), DESCRIPTION). The
# command here is rec.py, which writes what the Python recorder writes
# (trajectory.jsonl, run.json, tensor_digests.bin: the formats of
# detcheck-bisect(1)), so no PyTorch is needed; the real-PyTorch end-to-end
# test is the Python package's.
. "$DCK_TOP/tests/cli/lib.sh"
command -v python3 > /dev/null 2>&1 || skip "python3 absent"
mkdir tmp
export TMPDIR="$PWD/tmp"

# rec.py [MODE]: MODE same (default), fail (30 lines on stderr, exit 3),
# nothing (records nothing), notimes (no step_time_s). VARY_ON=NAME: the
# parameter's digest from step 2 on depends on variable NAME (threads,
# --env), so runs with other values part there. STEPS: records (default 5).
# DIGESTS_RUN=I with DIGESTS=header|absent|N: run I's tensor_digests.bin
# holds only its header, is absent, or holds N steps. STATE_RUN=I: run I
# alone records a state entry (start.layers.0.weight, kind 3) at step 0.
# LOSS_RUN=I LOSS_FROM=S: run I's loss has other bits from step S on.
cat > rec.py <<'PY'
import json, os, struct, sys
mode = sys.argv[1] if len(sys.argv) > 1 else "same"
if mode == "fail":
    print("training...", flush=True)
    for i in range(30):
        print("line %d of the failure" % i, file=sys.stderr)
    sys.exit(3)
d = os.environ.get("DETCHECK_RECORD")
if mode == "nothing" or not d:
    print("trained without recording")
    sys.exit(0)
steps = int(os.environ.get("STEPS", "5"))
vary = os.environ.get(os.environ.get("VARY_ON", "-"), "")
with open(os.path.join(d, "env.txt"), "w") as f:
    for k in ("DETCHECK_RECORD", "DETCHECK_TRACE", "DETCHECK_THREADS", "DETCHECK_DETERMINISTIC", "DETCHECK_DUMP_STEP",
              "SEED"):
        f.write("%s=%s\n" % (k, os.environ.get(k, "")))
det = os.environ.get("DETCHECK_DETERMINISTIC", "0") == "1"
run = int(d.rsplit("_", 1)[1])
settings = {"deterministic_algorithms": det, "CUBLAS_WORKSPACE_CONFIG": None, "cudnn_deterministic": det,
            "cudnn_benchmark": False, "tf32_matmul": False, "tf32_cudnn": False, "NCCL_ALGO": None,
            "NCCL_PROTO": None, "threads": int(os.environ.get("DETCHECK_THREADS", "4")), "torch": "2.5.1",
            "cuda": None, "cudnn": None, "nccl": None, "gpus": []}
json.dump({"detcheck_run": 1, "argv": sys.argv, "settings": settings}, open(os.path.join(d, "run.json"), "w"))
# step times: warm-up 5 s; deterministic runs 20 ms (run 1), 22 ms (run 3);
# the others 10 ms (run 2), 11 ms (run 4)
base = 0.020 if det else 0.010
per = base * (1.1 if run > 2 else 1.0)
with open(os.path.join(d, "trajectory.jsonl"), "w") as t:
    for s in range(steps):
        other = os.environ.get("LOSS_RUN") == str(run) and s >= int(os.environ.get("LOSS_FROM", "0"))
        rec = {"step": s, "loss": 1, "loss_bits": "3f800001" if other else "3f800000", "grad_norm": 1,
               "grad_norm_bits": "3f800000", "lr": 0.1}
        if mode != "notimes":
            rec["step_time_s"] = 5.0 if s == 0 else per
        if os.environ.get("ROOT_RUN") == str(run):
            rec["root"] = "%032x" % s
        t.write(json.dumps(rec) + "\n")
names = [(0, b"layers.0.weight"), (1, b"layers.0.weight"), (2, b"layers.0.weight.exp_avg")]
state = os.environ.get("STATE_RUN") == str(run)
if state:
    names.append((3, b"start.layers.0.weight"))
b = bytearray(b"DCKTDIG\0" + struct.pack("<II", 1, 0))
for i, (k, n) in enumerate(names):
    b += struct.pack("<BIBH", 1, i, k, len(n)) + n
salt = sum(vary.encode())
digests = os.environ.get("DIGESTS", "") if os.environ.get("DIGESTS_RUN") == str(run) else ""
dsteps = int(digests) if digests.isdigit() else 0 if digests == "header" else steps
for s in range(dsteps):
    n = len(names) if state and s == 0 else 3
    b += struct.pack("<BqI", 2, s, n)
    for i in range(n):
        b += struct.pack("<IQQ", i, 1000 * s + i, 7 + (salt if s >= 2 and i == 1 else 0))
if digests != "absent":
    open(os.path.join(d, "tensor_digests.bin"), "wb").write(b)
print("trained %d steps" % steps)
PY
nothing_left() { [ -z "$(ls tmp)" ] || { ls -l tmp; fail "$1: tmp holds $(ls tmp)"; }; ok; }

# ---------------------------------------------------------------- bad flags: exit 2 before any run
bad() {
    expect_exit 2 $DETCHECK repro "$@"
    [ ! -e ran ] || fail "repro $*: the command ran"
    nothing_left "repro $*"
}
bad touch ran
expect_grep "the command comes after '--'" err.txt
bad -- 
expect_grep "no command after '--'" err.txt
bad -n 1 -- touch ran
expect_grep '-n 1: one run proves nothing' err.txt
bad -n x -- touch ran
bad --env SEED -- touch ran
expect_grep "wants NAME=A,B" err.txt
bad --env SEED= -- touch ran
expect_grep "needs two values or more" err.txt
bad --env SEED=1 -- touch ran
bad --env SEED=1,2 -n 3 -- touch ran
expect_grep '--env SEED has 2 values, but -n 3 runs' err.txt
bad --env DETCHECK_RECORD=a,b -- touch ran
bad --vary colour -- touch ran
expect_grep "unknown factor" err.txt
bad --vary threads --env SEED=1,2 -- touch ran
expect_grep 'one factor per run' err.txt
bad --tax --vary threads -- touch ran
bad --trace all -- touch ran
bad --timeout soon -- touch ran
bad --dump-step x -- touch ran
expect_grep "wants a step number" err.txt
bad --dump-step -1 -- touch ran
bad --dump-step 1 --trace none -- touch ran
expect_grep "with --trace none: a dump holds the outputs of a traced step" err.txt
bad --dump-step 1 --tax -- touch ran
bad --env DETCHECK_DUMP_STEP=1,2 -- touch ran
expect_grep "use --dump-step" err.txt
bad --frobnicate -- touch ran
expect_grep "unknown option '--frobnicate'" err.txt
bad --json --junit - -- touch ran
bad --markdown rec.py -- touch ran
mkdir -p wd/run_2 && touch wd/run_2/trajectory.jsonl
bad --workdir wd -- touch ran
expect_grep 'wd/run_2 exists and is not empty' err.txt
expect_exit 0 $DETCHECK repro --help
expect_grep '^usage: detcheck repro' out.txt

# ---------------------------------------------------------------- reproducible
expect_exit 0 $DETCHECK repro -n 3 -- python3 rec.py
expect_grep '^reproducible: 3 runs, 5 steps, every tensor identical$' out.txt
expect_grep '^determinism settings off: deterministic_algorithms=false, cudnn_deterministic=false (every run)$' out.txt
nothing_left "a reproducible run"
# the environment of the runs: record dir, trace mode (modules by default)
expect_exit 0 $DETCHECK repro --workdir keep -- python3 rec.py
expect_grep "^DETCHECK_RECORD=$PWD/keep/run_2$" keep/run_2/env.txt
expect_grep '^DETCHECK_TRACE=modules$' keep/run_1/env.txt
expect_grep '^DETCHECK_DUMP_STEP=$' keep/run_1/env.txt
expect_exit 0 $DETCHECK repro --workdir keep2 --dump-step 3 -- python3 rec.py
expect_grep '^DETCHECK_DUMP_STEP=3$' keep2/run_1/env.txt
expect_grep '^DETCHECK_DUMP_STEP=3$' keep2/run_2/env.txt
expect_grep '^trained 5 steps$' keep/run_1.out
expect_exit 0 $DETCHECK repro --keep --trace ops -q -- python3 rec.py
expect_grep '^reproducible: 2 runs, 5 steps' out.txt
expect_no_grep 'determinism settings' out.txt
kept=$(ls tmp)
[ -n "$kept" ] && grep -q '^DETCHECK_TRACE=ops$' "tmp/$kept/run_1/env.txt" || fail "--keep: nothing kept, or not traced by ops"
ok
rm -rf tmp/*

# ---------------------------------------------------------------- not reproducible
# the parameter depends on the thread count: threads differ from run 1 to run 2
expect_exit 1 env VARY_ON=DETCHECK_THREADS $DETCHECK repro --vary threads -- python3 rec.py
expect_grep '^not reproducible: run 2 differs from run 1 at step 2 (1 of 2 runs differ from run 1)$' out.txt
expect_grep '^trajectories agree; the recorded tensors do not$' out.txt
expect_grep '^first differing tensor: step 2, parameter layers.0.weight$' out.txt
expect_grep '^varied: DETCHECK_THREADS=[0-9]* in run 1, [0-9]* in run 2$' out.txt
# (detcheck-repro(1), DESCRIPTION) no trace found the difference (these runs trace
# nothing): the verdict names the command that would localise it
expect_grep '^next: localise with an op trace: detcheck repro --trace ops --vary threads -- python3 rec.py$' out.txt
expect_grep '^determinism settings off: deterministic_algorithms=false' out.txt
expect_grep '^settings that differ between runs: threads (run 1: [0-9]*, run 2: [0-9]*)$' out.txt
expect_grep '^runs kept in ' out.txt
kept=$(sed -n 's/^runs kept in //p' out.txt)
[ -f "$kept/run_2/tensor_digests.bin" ] || fail "the runs were not kept in '$kept'"
ok
t1=$(sed -n 's/^DETCHECK_THREADS=//p' "$kept/run_1/env.txt"); t2=$(sed -n 's/^DETCHECK_THREADS=//p' "$kept/run_2/env.txt")
[ "$t1" = "$(nproc)" ] && [ "$t2" != "$t1" ] && [ -n "$t2" ] || fail "--vary threads: run 1 $t1, run 2 $t2 (CPUs: $(nproc))"
ok
rm -rf tmp/*
# --env: N from the number of values; run 3 alone differs, and is named
expect_exit 1 env VARY_ON=SEED $DETCHECK repro --workdir e --env SEED=1,1,2 -- python3 rec.py
expect_grep '^not reproducible: run 3 differs from run 1 at step 2 (1 of 3 runs differ from run 1)$' out.txt
expect_grep '^first differing tensor: step 2, parameter layers.0.weight$' out.txt
expect_grep '^varied: SEED=1 in run 1, 2 in run 3$' out.txt
expect_grep '^SEED=2$' e/run_3/env.txt
# (detcheck-repro(1), DESCRIPTION) one step in every line: the tensors part at step 2,
# the trajectories at step 3; the header and the first line say step 2
expect_exit 1 env VARY_ON=SEED LOSS_RUN=2 LOSS_FROM=3 $DETCHECK repro --workdir p5 --env SEED=1,2 \
    --junit p5.xml --markdown p5.md -- python3 rec.py
expect_grep '^not reproducible: run 2 differs from run 1 at step 2 (1 of 2 runs differ from run 1)$' out.txt
expect_grep '^first differing step: 2 (a recorded tensor; the trajectories part at step 3: loss_bits 3f800000 vs 3f800001)$' out.txt
expect_no_grep 'first differing step: 3' out.txt
# the runs are compared in this process (dck_runs_compare), as bisect
# compares them: no bisect child, so no log of one in the work folder
for f in p5/bisect_2.out p5/bisect_2.err p5/bisect_2_text.out; do [ -e "$f" ] && fail "$f: a bisect child ran"; done
expect_grep 'first differing step: 2 (a recorded tensor' p5.xml
expect_no_grep 'first differing step: 3' p5.xml
expect_no_grep 'first differing step: 3' p5.md
expect_grep '<property name="next" value="next: localise with an op trace: detcheck repro --trace ops --env SEED=1,2 -- python3 rec.py"/>' p5.xml
expect_exit 1 env VARY_ON=SEED LOSS_RUN=2 LOSS_FROM=3 $DETCHECK repro --json --workdir p5j --env SEED=1,2 -- python3 rec.py
python3 - <<'PY' || fail "repro --json: one step in every line"
import json
d = json.load(open("out.txt"))
f = d["first_divergence"]
assert f["step"] == 2 and f["what"] == "tensor" and f["lines"][0].startswith("first differing step: 2 ("), f
assert f["next"] == "next: localise with an op trace: detcheck repro --trace ops --env SEED=1,2 -- python3 rec.py", f
assert f["magnitudes"] is None, f
PY
ok
# repro's own finding (a state entry in run 2 only, step 0) comes before
# bisect's (step 2): it leads, and bisect's line no longer says "first"
expect_exit 1 env VARY_ON=SEED STATE_RUN=2 LOSS_RUN=2 LOSS_FROM=3 $DETCHECK repro --workdir p5s --env SEED=1,2 \
    --html p5s.html -- python3 rec.py
expect_grep 'class="first">first difference: step 0, a state entry recorded in run B only, tensor layers.0.weight (parameter) at step 2</text>' p5s.html
expect_grep '^not reproducible: run 2 differs from run 1 at step 0 ' out.txt
[ "$(sed -n 2p out.txt)" = "state entries recorded in run 2 only: 1, the first start.layers.0.weight at step 0" ] ||
    fail "the line of the header's step is not first: $(cat out.txt)"
ok
expect_grep '^what both runs recorded first differs at step 2 (a recorded tensor; ' out.txt
expect_no_grep '^first differing step' out.txt
expect_exit 1 env VARY_ON=SEED STATE_RUN=2 LOSS_RUN=2 LOSS_FROM=3 $DETCHECK repro --json --workdir p5t --env SEED=1,2 -- python3 rec.py
python3 - <<'PY' || fail "repro --json: repro's own first difference"
import json
f = json.load(open("out.txt"))["first_divergence"]
assert f["step"] == 0 and f["what"] == "recorded_state", f
assert f["lines"][0].startswith("state entries recorded in run 2 only: 1, "), f
PY
ok
# a run that records fewer steps is not the same run
cat > short.sh <<'SH'
case $DETCHECK_RECORD in *run_2) export STEPS=4 ;; esac
exec python3 rec.py
SH
expect_exit 1 $DETCHECK repro --workdir s -- sh short.sh
expect_grep '^not reproducible: run 2 differs from run 1 at step 4 ' out.txt
expect_grep '^steps recorded: run 1 5 (0..4), run 2 4 (0..3); step 4 in run 1 only$' out.txt

# ---------------------------------------------------------------- what one run recorded and another did not
# (detcheck-repro(1), DESCRIPTION) run 2 records no tensor digests: a difference, never
# "every tensor identical"; the verdict says which run recorded what
expect_exit 1 env DIGESTS_RUN=2 DIGESTS=header $DETCHECK repro --workdir d1 -- python3 rec.py
expect_grep '^not reproducible: run 2 differs from run 1 at step 0 ' out.txt
expect_grep '^tensor digests: run 1 recorded 5 steps (0..4), run 2 none (its tensor_digests.bin holds no step); step 0 recorded in run 1 only$' out.txt
expect_no_grep 'identical' out.txt
expect_exit 1 env DIGESTS_RUN=2 DIGESTS=absent $DETCHECK repro --json --workdir d2 -- python3 rec.py
python3 - <<'PY' || fail "repro --json, run 2 without tensor digests"
import json
d = json.load(open("out.txt"))
assert d["verdict"] == "different" and d["reproducible"] is False, d
assert "tensor digests: run 1 recorded 5 steps (0..4), run 2 none (no tensor_digests.bin); step 0 recorded in run 1 only" in d["first_divergence"]["lines"], d
PY
ok
# the other way round, and a run whose digests stop before its trajectory
expect_exit 1 env DIGESTS_RUN=1 DIGESTS=header $DETCHECK repro --workdir d3 -- python3 rec.py
expect_grep '^tensor digests: run 1 recorded none (its tensor_digests.bin holds no step), run 2 5 steps (0..4); step 0 recorded in run 2 only$' out.txt
expect_exit 1 env DIGESTS_RUN=3 DIGESTS=4 $DETCHECK repro -n 3 --workdir d4 -- python3 rec.py
expect_grep '^not reproducible: run 3 differs from run 1 at step 4 (1 of 3 runs differ from run 1)$' out.txt
expect_grep '^tensor digests: run 1 recorded 5 steps (0..4), run 3 4 steps (0..3); step 4 recorded in run 1 only$' out.txt
# neither run records digests: the trajectories alone, and said so
cat > nodig.sh <<'SH'
case $DETCHECK_RECORD in *run_1) export DIGESTS_RUN=1 ;; *) export DIGESTS_RUN=2 ;; esac
DIGESTS=absent exec python3 rec.py
SH
expect_exit 0 $DETCHECK repro --workdir d5 -- sh nodig.sh
expect_grep '^reproducible: 2 runs, 5 steps, every trajectory record identical (no tensor digests recorded)$' out.txt
# a state entry (start.*) one run only recorded: a difference, as every
# entry one side lacks (never agreement; detcheck-repro(1), DESCRIPTION)
expect_exit 1 env STATE_RUN=2 $DETCHECK repro --workdir d6 -- python3 rec.py
expect_grep '^not reproducible: run 2 differs from run 1 at step 0 ' out.txt
expect_grep '^state entries recorded in run 2 only: 1, the first start.layers.0.weight at step 0$' out.txt
# a root digest one run's trajectory holds and the other's lacks: bisect
# names it not compared; repro takes that for no agreement (detcheck-repro(1), DESCRIPTION)
expect_exit 1 env ROOT_RUN=2 $DETCHECK repro --workdir d6r -- python3 rec.py
expect_grep '^not reproducible: run 2 differs from run 1' out.txt
expect_grep '^not compared: root digests at steps 0..4 in run B only (run A recorded none there)$' out.txt
# traced steps the recorder cut alike in both runs: the events past the
# bound were compared nowhere: incomplete (1), unless --allow-partial
cat > cut.sh <<'SH'
python3 rec.py || exit
python3 -c 'import struct,sys; open(sys.argv[1],"wb").write(b"DCKTRAC\0"+struct.pack("<II",1,0)+struct.pack("<BqIB",2,0,0,1))' "$DETCHECK_RECORD/trace.bin"
SH
expect_exit 1 $DETCHECK repro --workdir d6b -- sh cut.sh
expect_grep "^incomplete: 2 runs, 5 steps, every tensor identical; not compared: the events past the recorder's bound in 1 traced step (truncated alike in every run) (--allow-partial accepts them)$" out.txt
expect_exit 1 $DETCHECK repro --json --workdir d6c -- sh cut.sh
expect_grep '^{"verdict":"incomplete",' out.txt
expect_exit 0 $DETCHECK repro --allow-partial --workdir d6d -- sh cut.sh
expect_grep "^reproducible: 2 runs, 5 steps, every tensor identical; not compared: the events past the recorder's bound in 1 traced step (truncated alike in every run)$" out.txt
# traced in one run only: a difference (a trace.bin of one step, no event)
cat > traced.sh <<'SH'
python3 rec.py || exit
case $DETCHECK_RECORD in *run_2) python3 -c 'import struct,sys; open(sys.argv[1],"wb").write(b"DCKTRAC\0"+struct.pack("<II",1,0)+struct.pack("<BqIB",2,0,0,0))' "$DETCHECK_RECORD/trace.bin" ;; esac
SH
expect_exit 1 $DETCHECK repro --workdir d7 -- sh traced.sh
expect_grep '^traced steps: run 1 recorded none (no trace.bin), run 2 ' out.txt

# ---------------------------------------------------------------- run folders swapped during the runs
# (detcheck-repro(1), DESCRIPTION) run 2 replaces its folder by a link to run 1's: run 1
# would be compared with itself
cat > swap.sh <<'SH'
case $DETCHECK_RECORD in
*run_2) rmdir "$DETCHECK_RECORD" && ln -s run_1 "$DETCHECK_RECORD" ;;
*) exec python3 rec.py ;;
esac
SH
expect_exit 2 $DETCHECK repro --workdir sw -- sh swap.sh
expect_grep "run 2's folder $PWD/sw/run_2 is now a symbolic link" err.txt
expect_no_grep 'reproducible' out.txt
# run 3 swaps run 1's folder for a copy of it (another inode)
cat > swap1.sh <<'SH'
python3 rec.py || exit
case $DETCHECK_RECORD in *run_3) w=${DETCHECK_RECORD%/run_3}; cp -r "$w/run_1" "$w/copy" && rm -rf "$w/run_1" && mv "$w/copy" "$w/run_1" ;; esac
SH
expect_exit 2 $DETCHECK repro -n 3 --workdir sw1 -- sh swap1.sh
expect_grep "run 1's folder $PWD/sw1/run_1 is another folder than the one detcheck created" err.txt
# a run's recorded file that is a link to run 1's, or the same file (hard link)
for how in "ln -s:is a symbolic link" "ln:is the same file as run 1's tensor_digests.bin"; do
    cat > share.sh <<SH
python3 rec.py || exit
case \$DETCHECK_RECORD in *run_2) rm "\$DETCHECK_RECORD/tensor_digests.bin" && ${how%%:*} "\$DETCHECK_RECORD/../run_1/tensor_digests.bin" "\$DETCHECK_RECORD/tensor_digests.bin" ;; esac
SH
    rm -rf sh
    expect_exit 2 $DETCHECK repro --workdir sh -- sh share.sh
    expect_grep "sh/run_2/tensor_digests.bin ${how#*:}: a run's recording must be its own" err.txt
done

# ---------------------------------------------------------------- files repro creates in its work folder
# (detcheck-repro(1), DESCRIPTION) a link planted at a log's name is refused, never followed
echo "the user's notes" > victim.txt
mkdir pl && ln -s ../victim.txt pl/run_1.out
expect_exit 2 $DETCHECK repro --workdir pl -- python3 rec.py
expect_grep "pl/run_1.out exists (a symbolic link) and repro creates it" err.txt
[ -e pl/run_1 ] && fail "a run started though its log was planted"
expect_grep "^the user's notes$" victim.txt
# planted during the runs (after the check before them): refused when created
cat > plant.sh <<'SH'
case $DETCHECK_RECORD in *run_1) ln -s ../victim.txt "${DETCHECK_RECORD%/run_1}/run_2.out" ;; esac
exec python3 rec.py
SH
expect_exit 2 $DETCHECK repro --workdir pl2 -- sh plant.sh
expect_grep "pl2/run_2.out exists (a symbolic link) and this command creates it: refusing to write through or over it" err.txt
expect_grep "^the user's notes$" victim.txt
cat > plant2.sh <<'SH'
case $DETCHECK_RECORD in *run_1) echo mine > "${DETCHECK_RECORD%/run_1}/run_2.err" ;; esac
exec python3 rec.py
SH
expect_exit 2 $DETCHECK repro --workdir pl3 -- sh plant2.sh
expect_grep "run 2 of 2 was not started: .*pl3/run_2.err exists (a file)" err.txt
expect_grep '^mine$' pl3/run_2.err

# ---------------------------------------------------------------- reports: the output rule at the moment of writing
# (detcheck(1), OUTPUT FILES) the training command writes the report's path during
# the runs: the user's file stays, the report is written nowhere, exit 2
for kind in html markdown junit; do
    cat > takes.sh <<SH
case \$DETCHECK_RECORD in *run_2) echo "my $kind notes" > "$PWD/r.$kind" ;; esac
exec python3 rec.py
SH
    rm -f r.$kind
    expect_exit 2 $DETCHECK repro --$kind r.$kind -- sh takes.sh
    expect_grep "report r.$kind: --$kind r.$kind appeared while the command ran" err.txt
    expect_grep "^my $kind notes\$" r.$kind
    [ -z "$(ls | grep "^r.$kind.tmp")" ] || fail "--$kind: a temporary file left: $(ls)"
    ok
done
# a report of ours there before the runs, the user's notes there after them
expect_exit 0 $DETCHECK repro --markdown r2.md -- python3 rec.py
cat > takes2.sh <<SH
case \$DETCHECK_RECORD in *run_2) echo "# my notes" > "$PWD/r2.md" ;; esac
exec python3 rec.py
SH
expect_exit 2 $DETCHECK repro --markdown r2.md -- sh takes2.sh
expect_grep "report r2.md: --markdown r2.md exists and is not a detcheck Markdown report; refusing to overwrite it" err.txt
expect_grep '^# my notes$' r2.md
rm -rf tmp/*

# ---------------------------------------------------------------- trouble in the runs
expect_exit 2 $DETCHECK repro -- python3 rec.py fail
expect_grep 'run 1 of 2 exited with status 3: python3 rec.py fail' err.txt
expect_grep 'its stderr, last 20 lines' err.txt
expect_grep '^  line 29 of the failure$' err.txt
expect_grep '^  line 10 of the failure$' err.txt
expect_no_grep 'line 9 of the failure' err.txt
rm -rf tmp/*
expect_exit 2 $DETCHECK repro -- python3 rec.py nothing
expect_grep 'run 1 of 2 recorded nothing' err.txt
expect_grep 'did not honour DETCHECK_RECORD' err.txt
expect_grep 'detcheck.autorecord(model, optimizer)' err.txt
expect_grep 'Recorder.from_env()' err.txt
rm -rf tmp/*
expect_exit 2 $DETCHECK repro -- no-such-command-here
expect_grep 'exited with status 127' err.txt
rm -rf tmp/*
# --timeout kills the run's process group (the sleep too), at once
start=$(date +%s)
expect_exit 2 $DETCHECK repro --timeout 1 -- sh -c 'sleep 30 & sleep 30'
[ $(( $(date +%s) - start )) -lt 15 ] || fail "--timeout 1 took $(( $(date +%s) - start )) s"
ok
expect_grep 'did not finish within 1 s (--timeout): its process group was killed' err.txt
rm -rf tmp/*

# ---------------------------------------------------------------- --json, --junit, --markdown
expect_exit 0 $DETCHECK repro --json -- python3 rec.py
python3 - <<'PY' || fail "repro --json, reproducible"
import json
d = json.load(open("out.txt"))
assert d["verdict"] == "reproducible" and d["reproducible"] is True and d["steps"] == 5, d
assert d["first_divergence"] is None and d["tensors_compared"] is True and d["kept"] is False, d
assert [r["run"] for r in d["runs"]] == [1, 2] and d["runs"][1]["identical"] is True, d
assert d["runs"][0]["settings"]["threads"] == 4 and d["settings_differ"] == [], d
assert d["command"] == ["python3", "rec.py"], d
PY
ok
expect_exit 1 env VARY_ON=SEED $DETCHECK repro --json --env SEED=a,b --junit r.xml --markdown r.md -- python3 rec.py
python3 - <<'PY' || fail "repro --json, different"
import json
d = json.load(open("out.txt"))
assert d["verdict"] == "different" and d["reproducible"] is False and d["kept"] is True, d
f = d["first_divergence"]
assert f["run"] == 2 and f["step"] == 2, f
assert f["tensor"] == {"step": 2, "kind": "parameter", "name": "layers.0.weight", "how": "digest"}, f
assert "first differing tensor: step 2, parameter layers.0.weight" in f["lines"], f
assert d["runs"][1]["env"] == {"SEED": "b"} and d["runs"][1]["identical"] is False, d
PY
ok
expect_grep '^### :x: detcheck repro: DIFFERENT' r.md
expect_grep 'not reproducible: run 2 differs from run 1 at step 2' r.md
expect_grep 'failures="1"' r.xml
expect_grep 'name="run_2"' r.xml
expect_grep 'first differing tensor: step 2, parameter layers.0.weight' r.xml
rm -rf tmp/*
expect_exit 0 $DETCHECK repro --junit ok.xml --markdown ok.md -- python3 rec.py
expect_grep '^### :white_check_mark: detcheck repro: OK' ok.md
expect_grep 'failures="0"' ok.xml
expect_grep 'errors="0"' ok.xml
expect_exit 2 $DETCHECK repro --junit bad.xml --markdown bad.md -- python3 rec.py fail
expect_grep 'errors="1"' bad.xml
expect_grep 'line 29 of the failure' bad.xml
expect_grep 'run 1 of 2 exited with status 3' bad.md
rm -rf tmp/*

# ---------------------------------------------------------------- --tax
# deterministic runs take 20 and 22 ms a step, the others 10 and 11 ms; the
# first step (5 s) is warm-up and skipped
expect_exit 0 env STEPS=3 $DETCHECK repro --tax -- python3 rec.py
expect_grep '^determinism tax: 2.00x step time (deterministic 0.021 s / non-deterministic 0.0105 s, medians; spread 1.82x..2.20x; wall clock)$' out.txt
expect_grep 'deterministic (DETCHECK_DETERMINISTIC=1): *median 0.021 s/step, spread 0.02..0.022 s' out.txt
expect_grep 'non-deterministic (DETCHECK_DETERMINISTIC=0): median 0.0105 s/step, spread 0.01..0.011 s' out.txt
expect_grep 'clock: wall .* 2 steps timed per run, the first step of each run skipped (warm-up)' out.txt
# (detcheck-repro(1), OPTIONS: --tax) a short verdict: the settings once, in the document
# and the reports, not a wall of them on the terminal
expect_no_grep 'settings that differ' out.txt
expect_no_grep 'determinism settings off' out.txt
expect_no_grep '^  run [0-9]' out.txt
[ "$(wc -l < out.txt)" -le 5 ] || fail "--tax: $(wc -l < out.txt) lines"; ok
nothing_left "--tax"
expect_exit 0 env STEPS=3 $DETCHECK repro --tax --junit tax.xml -- python3 rec.py
expect_grep '<property name="settings" value="determinism settings off: run 1: none; run 2: deterministic_algorithms=false, cudnn_deterministic=false; ' tax.xml
rm -rf tmp/*
expect_exit 0 $DETCHECK repro --tax --workdir tx --json -- python3 rec.py
python3 - <<'PY' || fail "repro --tax --json"
import json
d = json.load(open("out.txt"))
t = d["tax"]
assert d["verdict"] == "tax" and t["clock"] == "wall" and abs(t["ratio"] - 2) < 1e-9, t
assert t["deterministic"]["run_medians_s"] == [0.02, 0.022] and t["warmup_steps_skipped"] == 1, t
assert t["settings"].startswith("determinism settings off: run 1: none; run 2: deterministic_algorithms=false"), t
assert [e["off"] for e in d["settings_off"]][:2] == [[], ["deterministic_algorithms", "cudnn_deterministic"]], d
assert [r["env"]["DETCHECK_DETERMINISTIC"] for r in d["runs"]] == ["1", "0", "1", "0"], d
PY
ok
expect_grep '^DETCHECK_DETERMINISTIC=1$' tx/run_3/env.txt
expect_grep '^DETCHECK_DETERMINISTIC=0$' tx/run_4/env.txt
expect_grep '^DETCHECK_TRACE=none$' tx/run_1/env.txt
expect_exit 2 $DETCHECK repro --tax -- python3 rec.py notimes
expect_grep 'records without step_time_s' err.txt
rm -rf tmp/*

# ---------------------------------------------------------------- python -m detcheck repro
# it execs the detcheck binary ($DETCHECK) with the same arguments
# (an ASan build of the library loads into python3 only with libasan
# preloaded, as tests/cli/test_python.sh does)
lib="$(dirname "$DETCHECK")/libdetcheck.so.0"
preload=
if nm -D "$lib" 2> /dev/null | grep -q '__asan_init'; then
    preload=$(${CC:-cc} -print-file-name=libasan.so)
    ubsan=$(${CC:-cc} -print-file-name=libubsan.so)
    [ -f "$preload" ] && preload="$preload${ubsan:+ $ubsan}" || preload=
fi
if [ -n "$preload" ] || ! nm -D "$lib" 2> /dev/null | grep -q '__asan_init'; then
    expect_exit 0 env ${preload:+LD_PRELOAD="$preload"} \
        ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0:verify_asan_link_order=0" \
        PYTHONPATH="$DCK_TOP/python/src" DETCHECK_LIB="$lib" \
        DETCHECK="$DETCHECK" python3 -m detcheck repro -- python3 rec.py
    expect_grep '^reproducible: 2 runs, 5 steps, every tensor identical$' out.txt
else
    skip_part "python -m detcheck repro: the library is built with ASan and this compiler has no libasan.so to preload"
fi
done_ok

# detcheck repro: runs a command N times with DETCHECK_RECORD set and says
# whether the runs are bitwise reproducible (issue 20, parts 4 and 5). The
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
        rec = {"step": s, "loss": 1, "loss_bits": "3f800000", "grad_norm": 1, "grad_norm_bits": "3f800000",
               "lr": 0.1}
        if mode != "notimes":
            rec["step_time_s"] = 5.0 if s == 0 else per
        t.write(json.dumps(rec) + "\n")
names = [(0, b"layers.0.weight"), (1, b"layers.0.weight"), (2, b"layers.0.weight.exp_avg")]
b = bytearray(b"DCKTDIG\0" + struct.pack("<II", 1, 0))
for i, (k, n) in enumerate(names):
    b += struct.pack("<BIBH", 1, i, k, len(n)) + n
salt = sum(vary.encode())
for s in range(steps):
    b += struct.pack("<BqI", 2, s, len(names))
    for i in range(len(names)):
        b += struct.pack("<IQQ", i, 1000 * s + i, 7 + (salt if s >= 2 and i == 1 else 0))
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
# a run that records fewer steps is not the same run
cat > short.sh <<'SH'
case $DETCHECK_RECORD in *run_2) export STEPS=4 ;; esac
exec python3 rec.py
SH
expect_exit 1 $DETCHECK repro --workdir s -- sh short.sh
expect_grep '^not reproducible: run 2 differs from run 1' out.txt
expect_grep '^steps recorded: run 1 5 (0..4), run 2 4 (0..3)$' out.txt

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
nothing_left "--tax"
expect_exit 0 $DETCHECK repro --tax --workdir tx --json -- python3 rec.py
python3 - <<'PY' || fail "repro --tax --json"
import json
d = json.load(open("out.txt"))
t = d["tax"]
assert d["verdict"] == "tax" and t["clock"] == "wall" and abs(t["ratio"] - 2) < 1e-9, t
assert t["deterministic"]["run_medians_s"] == [0.02, 0.022] and t["warmup_steps_skipped"] == 1, t
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

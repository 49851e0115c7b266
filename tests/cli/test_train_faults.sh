# Fault injection for the trainer's checkpoint writer (detcheck-train(1), FILES): kill -9 at
# random points of a run, and a full disk (ENOSPC, on a small tmpfs when this
# test may mount one). After each fault the last complete checkpoint is intact
# (its shards match the reference run's manifest), and a resume from it
# reproduces the reference trajectory and final checkpoint bit for bit.
# DCK_FAULT_SEED=N replays the kill delays of a run; DCK_FAULT_TRIALS=N (6).
. "$DCK_TOP/tests/cli/lib.sh"
export ASAN_OPTIONS=detect_leaks=0
CFG="--vocab 64 --width 32 --layers 1 --heads 2 --seq 16 --batch 2 --microbatches 4"
STEPS=24
RUN="--steps $STEPS --ckpt-every 2"
LAST=$(printf 'step_%08d' $STEPS)
MOUNTED=""
PID=""
cleanup() {
    [ -z "$PID" ] || kill -9 "$PID" 2>/dev/null || true
    [ -z "$MOUNTED" ] || umount "$MOUNTED" 2>/dev/null || true
}
trap cleanup EXIT

expect_exit 0 $DETCHECK train $CFG $RUN --out ref -q
# the run's length, measured here: the kill delays spread over all of it
t0=$(date +%s%N)
expect_exit 0 $DETCHECK train $CFG $RUN --out timing -q
t1=$(date +%s%N)
NS=$((t1 - t0))

# complete checkpoints of a run directory, ascending
complete() { for d in "$1"/step_*; do [ -f "$d/COMPLETE" ] && echo "$d"; done; true; }
# every complete checkpoint holds the reference run's bits
check_complete() {
    for d in $(complete "$1"); do
        expect_exit 0 $DETCHECK verify --golden "ref/${d##*/}/manifest.json" "$d"
    done
}
# the complete lines of a (possibly torn) trajectory are the reference's first lines
check_prefix() {
    python3 - "$1" <<'PY' || fail "$1: its records are not the reference's"
import sys
got = open(sys.argv[1]).read().split("\n")[:-1]  # a torn last line is left out
ref = open("ref/trajectory.jsonl").read().split("\n")[:-1]
assert got == ref[:len(got)], (len(got), len(ref))
PY
    ok
}
# resume_and_compare RUN [CHECKPOINT it must resume from]
resume_and_compare() {
    expect_exit 0 $DETCHECK train $CFG $RUN --out "$1" --resume
    [ -z "${2:-}" ] || expect_grep "resuming from $2" err.txt
    cmp ref/trajectory.jsonl "$1/trajectory.jsonl" || fail "$1: resumed trajectory differs"; ok
    expect_exit 0 $DETCHECK verify --golden "ref/$LAST/manifest.json" "$1/$LAST"
}

# --- kill -9 at random points
SEED=${DCK_FAULT_SEED:-$(od -An -N2 -tu2 /dev/urandom | tr -d ' ')}
TRIALS=${DCK_FAULT_TRIALS:-6}
echo "run of $((NS / 1000000)) ms; kill delays from DCK_FAULT_SEED=$SEED, $TRIALS trials"
i=0
while [ $i -lt "$TRIALS" ]; do
    i=$((i + 1))
    delay=$(awk -v s="$SEED" -v i=$i -v n=$NS 'BEGIN { srand(s * 1000 + i); printf "%.4f", rand() * n / 1e9 }')
    $DETCHECK train $CFG $RUN --out k$i -q 2>/dev/null &
    PID=$!
    sleep "$delay"
    kill -9 $PID 2>/dev/null || true
    wait $PID 2>/dev/null || true
    PID=""
    good=$(complete k$i | tail -1)
    torn=$(ls -d k$i/step_* 2>/dev/null | wc -l)
    echo "trial $i: killed after ${delay}s: last complete ${good:-none}, $torn step folder(s)"
    check_complete k$i
    [ ! -f k$i/trajectory.jsonl ] || check_prefix k$i/trajectory.jsonl
    resume_and_compare k$i "$good"
done

# --- a full disk: exit 2 naming the problem, the previous good state intact
mkdir full
if mount -t tmpfs -o size=600k tmpfs full 2>/dev/null; then
    MOUNTED=full
    expect_exit 2 $DETCHECK train $CFG $RUN --out full/run -q
    expect_grep 'No space left on device' err.txt
    good=$(complete full/run | tail -1)
    [ -n "$good" ] || fail "no checkpoint fitted in the tmpfs (make it larger)"; ok
    echo "ENOSPC: $(head -1 err.txt); last complete $good"
    check_complete full/run
    check_prefix full/run/trajectory.jsonl
    ! ls full/run/step_*/ | grep -q '\.tmp\.' || fail "temporaries left behind"; ok
    # with room again, the run resumes from that state and ends as the reference
    mount -o remount,size=64m full || fail "cannot grow the tmpfs"
    resume_and_compare full/run "$good"
    umount full
    MOUNTED=""
    # the disk fills up between checkpoints: the trajectory's write fails,
    # which stops the run (exit 2 naming it), never thins the record out
    expect_exit 0 $DETCHECK train $CFG --steps 40 --ckpt-every 40 --out ref40 -q
    mkdir full2
    mount -t tmpfs -o size=64k tmpfs full2 || fail "cannot mount a second tmpfs"
    MOUNTED=full2
    # 14 of 16 pages: one is left for RUN/.lock and one for the trajectory
    dd if=/dev/zero of=full2/filler bs=4096 count=14 2>/dev/null
    expect_exit 2 $DETCHECK train $CFG --steps 40 --ckpt-every 40 --out full2/run -q
    expect_grep 'full2/run/trajectory.jsonl: cannot write: No space left on device' err.txt
    python3 - <<'PY' || fail "full2: its records are not the reference's"
got = open("full2/run/trajectory.jsonl").read().split("\n")[:-1]
ref = open("ref40/trajectory.jsonl").read().split("\n")[:-1]
assert 0 < len(got) < len(ref) and got == ref[:len(got)], (len(got), len(ref))
PY
    ok
    rm full2/filler
    mount -o remount,size=64m full2 || fail "cannot grow the tmpfs"
    expect_exit 0 $DETCHECK train $CFG --steps 40 --ckpt-every 40 --out full2/run --resume -q
    cmp ref40/trajectory.jsonl full2/run/trajectory.jsonl || fail "full2: trajectory differs"; ok
    umount full2
    MOUNTED=""
else
    skip_part "ENOSPC: cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN)"
fi
done_ok

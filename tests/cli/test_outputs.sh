# One rule for every output path of the CLI (dck_output_check): a report,
# manifest or golden is written where nothing is, over an empty file, or over
# an output of the same kind; never over an input, a file of another kind, a
# symbolic link, a FIFO or a read-only file. A refused output is exit 2
# naming the option, the file and why, before any work, and the file keeps
# its bytes. --json with a report on standard output is refused (two
# documents on one stream). Canary goldens: tests/cli/test_canary.sh.
. "$DCK_TOP/tests/cli/lib.sh"
python3 - <<'PY'
import json, struct
def st(path, v):
    h = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + struct.pack("<2f", 1.0, v))
st("a.safetensors", 2.0)
st("b.safetensors", 3.0)
PY
expect_exit 0 "$DETCHECK" hash -q -o a.yaml a.safetensors
cp a.safetensors a.keep
cp a.yaml a.yaml.keep
echo "# notes" > README.md
printf '{"step": 1, "loss": 2.5}\n' > trajectory.jsonl
mkfifo fifo
ln -s README.md link.md
ln -s other-report.xml dangling.xml
echo "kept" > ro.xml
chmod a-w ro.xml

# refused FILE REASON ARGS...: exit 2, the message names FILE and REASON
refused() {
    f=$1 why=$2; shift 2
    sum() { if [ -p "$1" ]; then echo fifo; else cat "$1" 2> /dev/null | cksum || true; fi; }
    before=$(sum "$f")
    expect_exit 2 timeout 20 "$@"
    expect_grep "$f" err.txt
    expect_grep "$why" err.txt
    [ "$(sum "$f")" = "$before" ] || fail "$f changed: $*"
    ok
}
V="$DETCHECK verify --golden a.yaml b.safetensors -q"
D="$DETCHECK diff a.safetensors b.safetensors -q"
for opt in --junit --markdown; do
    refused b.safetensors "is also an input" $V $opt b.safetensors
    refused a.safetensors "is also an input" $D $opt a.safetensors
    refused b.safetensors "is also an input" $D $opt b.safetensors
    refused a.yaml "is also an input" $V $opt a.yaml
    refused README.md "exists and is not a" $V $opt README.md
    refused trajectory.jsonl "exists and is not a" $D $opt trajectory.jsonl
    refused fifo "a FIFO, not a regular file" $V $opt fifo
    refused link.md "a symbolic link" $D $opt link.md
    refused dangling.xml "a symbolic link" $V $opt dangling.xml
    refused ro.xml "read-only" $V $opt ro.xml
    refused a.yaml "is also an input" $V "$opt=a.yaml"
done
[ ! -e other-report.xml ] || fail "a dangling link's target was created"
cmp a.safetensors a.keep && cmp a.yaml a.yaml.keep || fail "an input changed"; ok

# the same kind is replaced (a JUnit XML by a JUnit XML, a summary by a
# summary), and an empty file (mktemp's) is taken
expect_exit 1 $V --junit r.xml --markdown r.md
expect_exit 1 $D --junit r.xml --markdown r.md
expect_grep 'detcheck diff' r.xml
expect_grep 'detcheck diff' r.md
: > empty.xml
expect_exit 1 $V --junit empty.xml
expect_grep '<testsuites' empty.xml
# but one kind is not the other: a summary over a JUnit XML and back
refused r.xml "exists and is not a detcheck Markdown report" $V --markdown r.xml
refused r.md "exists and is not a JUnit report" $V --junit r.md
# the two reports as one file
expect_exit 2 $V --junit same.out --markdown same.out
expect_grep 'name the same file' err.txt
[ ! -e same.out ] || fail "same.out written"; ok

# --json with a report on standard output: two documents on one stream
for opt in --junit --markdown; do
    expect_exit 2 $V --json $opt -
    expect_grep "both write to standard output" err.txt
    [ ! -s out.txt ] || fail "stdout written: $opt"; ok
    expect_exit 2 $D --json $opt -
    expect_exit 1 $V --json $opt "file$opt.out"
done
expect_exit 2 $V --junit - --markdown -

# a report states the verdict of the exit status: output that could not be
# written is trouble (2) in the report too, not "DIFFERENT" or "OK"
if [ -w /dev/full ]; then
    for cmd in "$DETCHECK verify --golden a.yaml b.safetensors" "$DETCHECK diff a.safetensors b.safetensors"; do
        rm -f full.xml full.md
        set +e; $cmd --json --junit full.xml --markdown full.md > /dev/full 2> err.txt; got=$?; set -e
        [ "$got" -eq 2 ] || fail "exit $got with stdout on /dev/full: $cmd"
        expect_grep 'errors="1"' full.xml
        expect_grep '^### :warning: detcheck .*: trouble$' full.md
    done
else
    skip_part "/dev/full absent: the report of a failed stdout"
fi

# bisect and resume-check follow the rule too, before any work
CFG="--vocab 64 --width 32 --layers 2 --heads 2 --seq 16 --batch 1 --microbatches 2 --steps 3 -q"
expect_exit 0 $DETCHECK train $CFG --out ra
expect_exit 0 $DETCHECK train $CFG --out rb
cp ra/trajectory.jsonl traj.keep
refused ra/trajectory.jsonl "exists and is not a" $DETCHECK bisect ra rb --junit ra/trajectory.jsonl
refused ra/trajectory.jsonl "exists and is not a" $DETCHECK bisect ra rb --markdown ra/trajectory.jsonl
refused README.md "exists and is not a" $DETCHECK bisect ra rb --markdown README.md
expect_exit 2 $DETCHECK bisect ra rb --json --junit -
expect_grep "both write to standard output" err.txt
cmp ra/trajectory.jsonl traj.keep || fail "trajectory replaced"; ok
expect_exit 0 $DETCHECK bisect ra rb --junit b.xml --markdown b.md
expect_grep '<testsuites' b.xml
refused README.md "exists and is not a" $DETCHECK resume-check $CFG --steps 4 --at 2 --junit README.md
expect_exit 2 $DETCHECK resume-check $CFG --steps 4 --at 2 --json --markdown -
expect_grep "both write to standard output" err.txt
# --resume-device is checked with the other flags, before the reference run
expect_exit 2 timeout 10 $DETCHECK resume-check $CFG --steps 4 --at 2 --resume-device tpu
expect_grep "resume-device: --device 'tpu': use cpu, cuda, auto or twin" err.txt

# hash -o: the rule it had first, now the shared one
refused a.safetensors "also an input" $DETCHECK hash -q -o a.safetensors a.safetensors
refused README.md "not a manifest" $DETCHECK hash -q -o README.md a.safetensors
refused fifo "FIFO" $DETCHECK hash -q -o fifo a.safetensors
refused link.md "symbolic link" $DETCHECK hash -q -o link.md a.safetensors
cp a.yaml ro.yaml
chmod a-w ro.yaml
refused ro.yaml "read-only" $DETCHECK hash -q -o ro.yaml b.safetensors
expect_exit 0 "$DETCHECK" hash -q -o a.yaml b.safetensors

# logs a long-running command creates in its work folder (detcheck(1), OUTPUT FILES):
# created new, so a link planted at a log's name is refused, never followed
# (resume-check truncated the file it pointed at)
echo "the user's notes" > victim.txt
mkdir rw && ln -s ../victim.txt rw/reference.log
expect_exit 2 timeout 60 $DETCHECK resume-check $CFG --steps 2 --at 1 --workdir rw
expect_grep "rw/reference.log exists (a symbolic link) and this command creates it" err.txt
expect_grep "^the user's notes$" victim.txt
[ ! -e rw/reference ] || fail "resume-check ran the reference though its log was planted"
ok

# the rule again at the moment of writing (detcheck(1), OUTPUT FILES): a file that
# appears at --write-golden's path while the canary runs (its check a second
# in the past, its write three seconds ahead) is not replaced
rm -f late.json
"$DETCHECK" canary --seconds 4 --write-golden late.json > late.out 2> late.err &
pid=$!
sleep 1
echo 'notes written during the run' > late.json
set +e; wait $pid; got=$?; set -e
[ $got -eq 2 ] || { cat late.out late.err; fail "canary --write-golden: exit $got, a file taken during the run"; }
expect_grep "late.json exists and is not a canary golden file; refusing to overwrite it (it changed while the canary ran): not written" late.err
[ "$(cat late.json)" = 'notes written during the run' ] || fail "late.json replaced"
ok

# ... and at the rename itself: where the path held nothing at the last
# check, the rename never replaces (renameat2 RENAME_NOREPLACE, or link), so
# a file created between the check and the rename stays. The hook creates
# it there (DCK_TEST_OUTPUT_APPEARS); every output kind goes the same way.
appears() { # FILE ARGS...: the file appears just before the rename
    f=$1; shift
    rm -f "$f"
    export DCK_TEST_OUTPUT_APPEARS="$f"
    expect_exit 2 "$@"
    unset DCK_TEST_OUTPUT_APPEARS
    expect_grep "$f: a file appeared there after the last check (detcheck did not write it); refusing to replace it" err.txt
    [ "$(cat "$f")" = "a user's file" ] || fail "$f replaced: $*"
    ok
}
appears late.xml $D --junit late.xml
appears late.md $D --markdown late.md
appears late.html $DETCHECK bisect ra rb --html late.html
appears late.yaml "$DETCHECK" hash -q -o late.yaml a.safetensors
appears late-golden.json "$DETCHECK" canary --steps 2 --write-golden late-golden.json
# a path that held a report at the check is still replaced, as before
expect_exit 1 $D --junit late2.xml
export DCK_TEST_OUTPUT_APPEARS=nothing-here
expect_exit 1 $D --junit late2.xml
unset DCK_TEST_OUTPUT_APPEARS
expect_grep "<testsuites" late2.xml
done_ok

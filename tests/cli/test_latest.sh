# CLI: detcheck latest [--verify] DIR (detcheck-latest(1)): the newest
# checkpoint by the step its name says, of every layout, that is sealed
# (and with --verify whose files match its seal); each newer one skipped
# and named on stderr with why (unsealed, torn seal, not a seal, seal of
# another step, a link, corrupt, unreadable); stdout only the path; exit 1
# when none qualifies, 2 on trouble; names quoted. Checkpoints are copies of
# tests/fixtures sealed with `detcheck seal`.
. "$DCK_TOP/tests/cli/lib.sh"
fx="$DCK_TOP/tests/fixtures"

seal() { "$DETCHECK" seal "$1" > seal.log 2>&1 || { cat seal.log; fail "detcheck seal $1"; }; }
# flip PATH OFFSET: one bit of the byte at OFFSET
flip() {
    python3 - "$1" "$2" <<'PY' || fail "flipping a byte of $1"
import sys
p, off = sys.argv[1], int(sys.argv[2])
b = bytearray(open(p, "rb").read())
b[off] ^= 1
open(p, "wb").write(b)
PY
}
cut_half() { # cut_half FILE: a save killed while it wrote FILE
    python3 -c 'import os, sys; p = sys.argv[1]; os.truncate(p, os.path.getsize(p) // 2)' "$1" || fail "cutting $1"
}

# ---- step_100 good, step_150 a tensor file cut after the seal, step_200
# one byte of a tensor's data flipped after the seal, step_250 its seal cut
# short, step_300 a save killed before its seal
mkdir ck
for s in 100 150 200 250 300; do cp -r "$fx/dcp1" "ck/step_$s"; done
for s in 100 150 200 250; do seal "ck/step_$s"; done
flip ck/step_200/__0_0.distcp 6000 # inside model.emb's data
cut_half ck/step_150/__0_0.distcp
cut_half ck/step_250/detcheck-seal.yaml

expect_exit 0 "$DETCHECK" latest ck
[ "$(cat out.txt)" = "ck/step_200" ] || fail "latest ck printed '$(cat out.txt)', not ck/step_200"
ok
expect_grep "^detcheck latest: ck/step_300: skipped: unsealed (no ck/step_300/detcheck-seal.yaml)$" err.txt
expect_grep "^detcheck latest: ck/step_250: skipped: torn seal: .*step_250/detcheck-seal.yaml" err.txt
[ "$(wc -l < err.txt)" -eq 2 ] || { cat err.txt; fail "latest ck: other lines on stderr"; }
ok

expect_exit 0 "$DETCHECK" latest --verify --threads 2 ck
[ "$(cat out.txt)" = "ck/step_100" ] || fail "latest --verify ck printed '$(cat out.txt)', not ck/step_100"
ok
expect_grep "ck/step_300: skipped: unsealed" err.txt
expect_grep "ck/step_250: skipped: torn seal" err.txt
expect_grep "^detcheck latest: ck/step_200: skipped: corrupt: 2 differences, first model.emb (in __0_0.distcp)$" err.txt
expect_grep "^detcheck latest: ck/step_150: skipped: unreadable: .*__0_0.distcp" err.txt
expect_no_grep "step_100" err.txt

# what requeue scripts do: the path alone on stdout, as DIR was given
CKPT=$("$DETCHECK" latest --verify -q "$PWD/ck" 2> q.err) || fail "latest --verify -q: exit $?"
[ "$CKPT" = "$PWD/ck/step_100" ] && [ ! -s q.err ] || { cat q.err; fail "latest -q: '$CKPT'"; }
ok
expect_exit 0 "$DETCHECK" latest ck/
[ "$(cat out.txt)" = "ck/step_200" ] || fail "latest ck/ printed '$(cat out.txt)'"
ok

# --json: the chosen one and each skipped one with why
expect_exit 0 "$DETCHECK" latest --verify --json ck
python3 - out.txt <<'PY' || { cat out.txt; fail "latest --json"; }
import json, sys
d = json.load(open(sys.argv[1]))
assert d["chosen"] == {"path": "ck/step_100", "name": "step_100", "step": 100}, d["chosen"]
assert [(s["name"], s["reason"]) for s in d["skipped"]] == [
    ("step_300", "unsealed"), ("step_250", "torn seal"), ("step_200", "corrupt"), ("step_150", "unreadable")], d["skipped"]
c = d["skipped"][2]
assert (c["differences"], c["first"], c["files"]) == (2, "model.emb", "__0_0.distcp"), c
assert d["verify"] is True and d["older_not_judged"] == 0 and d["not_candidates"] == [], d
PY
ok

# ---- none qualifies: exit 1, the counts said; another step's seal (a
# checkpoint copied with its seal) is no seal of this one
mkdir none
cp -r ck/step_300 ck/step_250 none/
cp -r ck/step_100 none/step_400
expect_exit 1 "$DETCHECK" latest none
[ ! -s out.txt ] || fail "latest none printed '$(cat out.txt)'"
ok
expect_grep "none/step_400: skipped: seal of another step: .*seal of step 100, checkpoint's name says step 400" err.txt
expect_grep "no checkpoint in none qualifies (3 candidates: 1 unsealed, 1 torn seal, 1 seal of another step; --verify not given" err.txt
expect_exit 1 "$DETCHECK" latest --verify -q none
[ ! -s out.txt ] && [ ! -s err.txt ] || fail "latest -q none said something"
ok
# an empty directory: exit 1 (requeue scripts start fresh on that alone)
mkdir empty
expect_exit 1 "$DETCHECK" latest empty
expect_grep "no checkpoint in empty: no entry names a step (layouts: detcheck-latest(1))" err.txt
expect_no_grep "note:" err.txt
expect_exit 1 "$DETCHECK" latest --json empty
python3 -c 'import json, sys; d = json.load(open("out.txt")); assert d["chosen"] is None and d["skipped"] == []' ||
    fail "latest --json empty"
ok

# ---- trouble: exit 2
expect_exit 2 "$DETCHECK" latest missing
expect_grep "missing" err.txt
expect_exit 2 "$DETCHECK" latest ck/step_200/__0_0.distcp
expect_grep "not a directory" err.txt
expect_exit 2 "$DETCHECK" latest
expect_grep "no DIR given" err.txt
expect_exit 2 "$DETCHECK" latest ck none
expect_exit 2 "$DETCHECK" latest --frobnicate ck
expect_exit 2 "$DETCHECK" latest --threads 0 ck
expect_exit 2 "$DETCHECK" latest --iteration 3 ck
expect_exit 0 "$DETCHECK" latest --help
expect_grep "usage: detcheck latest" out.txt

# ---- every layout, each chosen once: the newest sealed one; what is no
# candidate (a save under way, a '.' name, a link) never chosen
mkdir lay
cp -r "$fx/dcp1" lay/iter_0000100           # Megatron-LM
cp -r "$fx/dcp1" lay/global_step10          # DeepSpeed
cp -r "$fx/dcp1" lay/checkpoint-500         # Hugging Face
cp "$fx/training.pt" "lay/epoch=0-step=300.ckpt" # Lightning
cp "$fx/training.pt" lay/step-7.pt
cp -r "$fx/dcp1" lay/tmp-checkpoint-900     # the Trainer's save under way
cp -r "$fx/dcp1" lay/.step_1000
for c in iter_0000100 global_step10 checkpoint-500 "epoch=0-step=300.ckpt" step-7.pt tmp-checkpoint-900 .step_1000; do
    seal "lay/$c"
done
ln -s checkpoint-500 lay/step_2000
for c in checkpoint-500 "epoch=0-step=300.ckpt" iter_0000100 global_step10 step-7.pt; do
    expect_exit 0 "$DETCHECK" latest --verify lay
    [ "$(cat out.txt)" = "lay/$c" ] || { cat err.txt; fail "latest lay printed '$(cat out.txt)', not lay/$c"; }
    ok
    expect_grep "lay/step_2000: skipped: a symbolic link (not followed)" err.txt
    expect_grep "note: 1 entry of lay names no step (no candidate): tmp-checkpoint-900$" err.txt
    expect_no_grep "tmp-checkpoint-900:\|step_1000" err.txt
    # next: this one unsealed
    if [ -d "lay/$c" ]; then rm "lay/$c/detcheck-seal.yaml"; else rm "lay/$c.detcheck-seal.yaml"; fi
done
expect_exit 1 "$DETCHECK" latest --json lay
python3 - out.txt <<'PY' || { cat out.txt; fail "latest --json lay"; }
import json, sys
d = json.load(open(sys.argv[1]))
assert [s["name"] for s in d["skipped"]] == ["step_2000", "checkpoint-500", "epoch=0-step=300.ckpt", "iter_0000100",
                                              "global_step10", "step-7.pt"], d["skipped"]
assert d["not_candidates"] == ["tmp-checkpoint-900"], d["not_candidates"]
PY
ok

# ---- names are data: a Lightning name with an ESC and a newline is quoted,
# and so is an entry that is no candidate
mkdir odd
cp "$fx/training.pt" "odd/epoch=0-step=9-$(printf '\033[31m\nx').ckpt"
touch "odd/notes-$(printf '\033]0;x\a').txt"
expect_exit 1 "$DETCHECK" latest odd
expect_grep 'odd/epoch=0-step=9-\\x1b\[31m\\x0ax.ckpt: skipped: unsealed' err.txt
expect_grep 'note: 1 entry of odd names no step (no candidate): notes-\\x1b\]0;x\\x07.txt$' err.txt
! grep -q "$(printf '\033')" err.txt || fail "a raw ESC on stderr"
[ "$(wc -l < err.txt)" -eq 3 ] || { cat err.txt; fail "a name's newline broke a line"; }
ok

# ---- a FIFO is never opened: as an entry, or at a seal's path; a link at a
# seal's path is no seal either
mkdir fifo
cp -r ck/step_100 fifo/step_100
mkfifo fifo/step_600
cp -r "$fx/dcp1" fifo/step_500
mkfifo fifo/step_500/detcheck-seal.yaml
cp -r "$fx/dcp1" fifo/step_400
ln -s ../step_100/detcheck-seal.yaml fifo/step_400/detcheck-seal.yaml
expect_exit 0 timeout 60 "$DETCHECK" latest --verify fifo
[ "$(cat out.txt)" = "fifo/step_100" ] || fail "latest fifo printed '$(cat out.txt)'"
ok
expect_grep "fifo/step_600: skipped: not a file or directory$" err.txt
expect_grep "fifo/step_500: skipped: not a seal: fifo/step_500/detcheck-seal.yaml is a FIFO" err.txt
expect_grep "fifo/step_400: skipped: not a seal: fifo/step_400/detcheck-seal.yaml is a symbolic link" err.txt
# ---- examples/slurm/requeue.sbatch, run as sbatch would run it, with a
# stand-in srun that logs its command: resume from the newest sound
# checkpoint; fresh only in an empty directory; stop on 1 otherwise and on 2
job="$DCK_TOP/examples/slurm/requeue.sbatch"
sh -n "$job" || fail "requeue.sbatch: sh -n"
mkdir bin
printf '#!/bin/sh\necho "srun $*" >> "%s/srun.log"\n' "$PWD" > bin/srun
chmod +x bin/srun
requeue() { # requeue CKPT_DIR [DETCHECK]
    rm -f srun.log
    PATH="$PWD/bin:$PATH" CKPT_DIR="$1" DETCHECK="${2:-$DETCHECK}" TRAIN="python3 train.py" sh "$job"
}
expect_exit 0 requeue ck
[ "$(cat srun.log)" = "srun python3 train.py --save-dir ck --load ck/step_100" ] || fail "requeue ck ran '$(cat srun.log)'"
ok
expect_grep "resuming from ck/step_100" out.txt
expect_grep "ck/step_200: skipped: corrupt" err.txt
expect_exit 0 requeue first/run
[ "$(cat srun.log)" = "srun python3 train.py --save-dir first/run" ] || fail "requeue first/run ran '$(cat srun.log)'"
ok
expect_exit 1 requeue none
[ ! -e srun.log ] || fail "requeue none ran '$(cat srun.log)'"
ok
expect_grep "not starting over" err.txt
printf '#!/bin/sh\nexec "%s" "$@" --threads 0\n' "$DETCHECK" > bad-detcheck
chmod +x bad-detcheck
expect_exit 2 requeue ck "$PWD/bad-detcheck"
[ ! -e srun.log ] || fail "requeue on trouble ran '$(cat srun.log)'"
ok
expect_grep "could not judge ck (exit 2); stopping" err.txt
done_ok

#!/bin/sh
# The trainer against llm.c (README Performance, row 9): detcheck train vs llm.c's
# train_gpt2.c on the same dims (vocab 256, 2 layers, width 64, 4 heads,
# sequence 32, 8 sequences per step), same number of steps, one thread (CPU
# time; goal <= 1.0x).
#
# llm.c is built here, in the work directory, from the upstream copy in
# ../shared/peers/llmc/ (never copied into the repository): an edited copy of
# train_gpt2.c (B = 8, T = 32, the step count set, validation and sampling
# off), gcc -O3 without OpenMP, and a random checkpoint and token files from
# that folder's make_random_gpt2.py (numpy; nothing from a model hub).
# detcheck's matching flags: --batch 8 --microbatches 1 (llm.c's B: 8
# sequences in one forward/backward), --seq 32, --threads 1; both print a
# line per step (detcheck without -q, as llm.c does).
# Environment (besides bench/lib.sh's):
#   BENCH_LLMC_STEPS=101  DCK_LLMC_DIR=../shared/peers/llmc
#   BENCH_LLMC_CFLAGS="-O3"  BENCH_LLMC_ARGS="--batch 8 --microbatches 1"
. "$(dirname "$0")/lib.sh"
bench_init llmc
STEPS=${BENCH_LLMC_STEPS:-$(bench_size 101 11)}
PEER=${DCK_LLMC_DIR:-$top/../shared/peers/llmc}
CFL=${BENCH_LLMC_CFLAGS:--O3}
TARGS=${BENCH_LLMC_ARGS:---batch 8 --microbatches 1}
t9="train, llm.c's dims, $STEPS steps, 1 thread"
if [ ! -f "$PEER/train_gpt2.c" ] || [ ! -f "$PEER/make_random_gpt2.py" ]; then
    bench_skip 9 "$t9" "no llm.c copy at $PEER (DCK_LLMC_DIR)"
    bench_finish
fi
if ! bench_has_numpy; then
    bench_skip 9 "$t9" "make_random_gpt2.py needs python3 with numpy (pip install numpy)"
    bench_finish
fi
bench_header 9 "$t9"
L=$work/llmc
mkdir -p "$L"
cp "$PEER/train_gpt2.c" "$L/"
[ -d "$PEER/llmc" ] && cp -r "$PEER/llmc" "$L/"
# The edits; each pattern must match exactly once, or upstream has changed
# and the comparison would mean something else.
python3 - "$L/train_gpt2.c" "$STEPS" <<'PY' || { bench_row_failed="cannot edit train_gpt2.c"; bench_row_fail 9 "$t9"; bench_finish; }
import sys
path, steps = sys.argv[1], int(sys.argv[2])
src = open(path).read()
edits = [
    ("int B = 4;", "int B = 8; /* bench: 8 sequences per step */"),
    ("int T = 64;", "int T = 32; /* bench: detcheck's --seq */"),
    ("for (int step = 0; step <= 40; step++) {", "for (int step = 0; step < %d; step++) { /* bench: steps */" % steps),
    ("if (step % 10 == 0) {", "if (0) { /* bench: validation off */"),
    ("if (step > 0 && step % 20 == 0) {", "if (0) { /* bench: sampling off */"),
]
for old, new in edits:
    n = src.count(old)
    if n != 1:
        sys.exit("train_gpt2.c: %r found %d times, expected once (upstream changed?)" % (old, n))
    src = src.replace(old, new)
open(path, "w").write(src)
PY
if ! (cd "$L" && ${CC:-gcc} $CFL -Wno-unused-result -o train_gpt2 train_gpt2.c -lm > build.log 2>&1); then
    tail -n 5 "$L/build.log" >&2
    bench_row_failed="cannot build train_gpt2.c ($CFL)"
    bench_row_fail 9 "$t9"
    bench_finish
fi
if ! (cd "$L" && "${BENCH_PYTHON:-python3}" "$PEER/make_random_gpt2.py" > gen.log 2>&1); then
    tail -n 5 "$L/gen.log" >&2
    bench_row_failed="make_random_gpt2.py failed"
    bench_row_fail 9 "$t9"
    bench_finish
fi
echo "   llm.c $(cut -c1-12 "$PEER/COMMIT" 2> /dev/null) built with ${CC:-gcc} $CFL (no OpenMP); random checkpoint: $(cat "$L/gen.log")"
cd "$L" || exit 2 # llm.c opens its files relative to the current folder
A_LABEL="detcheck train $TARGS"
A_CMD="\"$D\" train --steps $STEPS --threads 1 --vocab 256 --layers 2 --width 64 --heads 4 --seq 32 $TARGS"
B_LABEL="llm.c train_gpt2 (gcc $CFL)" B_CMD="./train_gpt2"
if bench_pair 9 3; then
    last=$(grep -c '^step [0-9]*: train loss' "$work/9.B.out")
    if [ "$last" -ne "$STEPS" ]; then
        bench_row_failed="llm.c ran $last steps, not $STEPS"
        bench_row_fail 9 "$t9"
    elif ! grep -q "steps 1\.\.$STEPS " "$work/9.A.err"; then
        bench_row_failed="detcheck train did not report step $STEPS"
        bench_row_fail 9 "$t9"
    else
        bench_ratio 9 "$t9" cpu 1.0
        bench_stats 9 A
        a=$S_CPU
        bench_stats 9 B
        printf "   CPU per step: detcheck %.3f ms, llm.c %.3f ms\n" \
            "$(awk -v c="$a" -v n="$STEPS" 'BEGIN { print c / n * 1e3 }')" "$(awk -v c="$S_CPU" -v n="$STEPS" 'BEGIN { print c / n * 1e3 }')"
    fi
else
    bench_row_fail 9 "$t9"
fi
bench_finish

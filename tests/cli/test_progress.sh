# Progress on stderr for hash, verify, diff (bytes) and resume-check
# (trainer steps): drawn only when stderr is a terminal (here a
# pseudo-terminal from Python's pty), never with -q nor into a pipe or a
# file; rate and ETA; colour only on a terminal, never with NO_COLOR (set
# and not empty, as no-color.org says) or TERM=dumb; messages rub the line
# out first. The library only calls the callback (dck_options.progress).
. "$DCK_TOP/tests/cli/lib.sh"
# pty_run CAPTURE CMD...: CMD with stderr on a pseudo-terminal (captured,
# raw bytes, into CAPTURE), stdout into out.txt; returns CMD's status.
pty_run() {
    cap=$1; shift
    python3 - "$cap" "$@" <<'PY'
import os, pty, subprocess, sys
master, slave = pty.openpty()
os.environ["DCK_PTY"] = os.ttyname(slave)
with open("out.txt", "wb") as out:
    p = subprocess.Popen(sys.argv[2:], stdin=subprocess.DEVNULL, stdout=out, stderr=slave)
os.close(slave)  # DCK_PTY (below): the terminal's name, for mpirun's ranks
buf = bytearray()
while True:
    try:
        b = os.read(master, 65536)
    except OSError:  # EIO: the last writer closed the terminal
        break
    if not b:
        break
    buf += b
open(sys.argv[1], "wb").write(bytes(buf))
sys.exit(p.wait())
PY
}
has() { python3 -c "import sys; sys.exit(0 if sys.argv[1].encode().decode('unicode_escape').encode('latin-1') in open(sys.argv[2],'rb').read() else 1)" "$1" "$2"; }
expect_has() { has "$1" "$2" || { od -c "$2" | head -20; fail "'$1' not in $2"; }; ok; }
expect_hasnt() { ! has "$1" "$2" || { od -c "$2" | head -20; fail "'$1' unexpectedly in $2"; }; ok; }

python3 - <<'PY'
import json, struct
n = 8 << 20
h = json.dumps({"w": {"dtype": "F32", "shape": [n // 4], "data_offsets": [0, n]}}).encode()
with open("big.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + bytes(range(256)) * (n // 256))
PY
cp big.safetensors big2.safetensors
export TERM=xterm
unset NO_COLOR

# hash: the bar, bytes done and total, ETA; green bar; cleared before the note
pty_run hash.tty "$DETCHECK" hash -o big.yaml big.safetensors || fail "hash under a pty: exit $?"
ok
expect_has '\r[' hash.tty
expect_has '100%  8.0 MiB / 8.0 MiB' hash.tty
expect_has 'ETA' hash.tty
expect_has '\033[32m####################\033[0m]' hash.tty
python3 - hash.tty <<'PY' || fail "the note landed on the progress line"
import re, sys
t = open(sys.argv[1], "rb").read()
i = t.index(b"detcheck hash: 1 tensors")
assert re.search(rb"\r +\r$", t[:i]), t[:i][-80:]
PY
ok
# NO_COLOR set: no escape sequence at all; set but empty: colour
NO_COLOR=1 pty_run nc.tty "$DETCHECK" hash -o big.yaml big.safetensors || fail "exit $?"
expect_has '100%' nc.tty
expect_hasnt '\033' nc.tty
NO_COLOR= pty_run nce.tty "$DETCHECK" hash -o big.yaml big.safetensors || fail "exit $?"
expect_has '\033[32m' nce.tty
TERM=dumb pty_run dumb.tty "$DETCHECK" hash -o big.yaml big.safetensors || fail "exit $?"
expect_has '100%' dumb.tty
expect_hasnt '\033' dumb.tty
# -q: nothing; not a terminal: nothing
pty_run q.tty "$DETCHECK" hash -q -o big.yaml big.safetensors || fail "exit $?"
expect_hasnt '%' q.tty
expect_hasnt 'ETA' q.tty
expect_exit 0 "$DETCHECK" hash -o big.yaml big.safetensors
expect_no_grep 'ETA' err.txt
expect_hasnt '\r' err.txt
# stdout stays clean under a terminal too
expect_hasnt '\r' out.txt

# the planned paths (hash_distributed.c) report too: --device auto (here
# the CPU: no GPU, or a GPU's streaming), --distributed without a launcher
# (this process's bytes: its tensors, then its whole-file hashes), and the
# manifest stays the plain one
export SOURCE_DATE_EPOCH=1700000000 # the manifest's "created"
"$DETCHECK" hash -q -o big.yaml big.safetensors || fail "exit $?"
pty_run auto.tty "$DETCHECK" hash --device auto -o auto.yaml big.safetensors || fail "exit $?"
expect_has '100%' auto.tty
expect_has 'ETA' auto.tty
cmp big.yaml auto.yaml || fail "--device auto manifest differs"
pty_run solo.tty "$DETCHECK" hash --distributed -o solo.yaml big.safetensors || fail "exit $?"
expect_has '100%  16.0 MiB / 16.0 MiB' solo.tty
cmp big.yaml solo.yaml || fail "--distributed manifest differs"
pty_run soloa.tty "$DETCHECK" hash --distributed --device auto -o soloa.yaml big.safetensors || fail "exit $?"
expect_has '100%' soloa.tty
cmp big.yaml soloa.yaml || fail "--distributed --device auto manifest differs"
pty_run soloq.tty "$DETCHECK" hash -q --distributed -o solo.yaml big.safetensors || fail "exit $?"
expect_hasnt '%' soloq.tty
# under mpirun: Open MPI gives the ranks a pipe for stderr, so each rank's
# stderr is pointed at the terminal (DCK_PTY); rank 0 alone draws, its own
# share (here the file it hashes whole: 8 MiB)
if command -v mpirun > /dev/null && [ -z "${DCK_NO_MPI_TESTS:-}" ]; then
    export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
    # Open MPI's init allocations read as leaks to LeakSanitizer (SANITIZE=1;
    # as in test_distributed.sh): the library's leaks are the Check suites'
    export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
    pty_run mpi.tty mpirun --oversubscribe -np 2 -x DCK_PTY sh -c 'exec "$@" 2>"$DCK_PTY"' sh \
        "$DETCHECK" hash --distributed -o mpi.yaml big.safetensors || fail "mpirun under a pty: exit $?"
    expect_has '100%  8.0 MiB / 8.0 MiB' mpi.tty
    expect_has 'ETA' mpi.tty
    cmp big.yaml mpi.yaml || fail "mpirun --distributed manifest differs"
    ok
    pty_run mpiq.tty mpirun --oversubscribe -np 2 -x DCK_PTY sh -c 'exec "$@" 2>"$DCK_PTY"' sh \
        "$DETCHECK" hash -q --distributed -o mpi.yaml big.safetensors || fail "exit $?"
    expect_hasnt 'ETA' mpiq.tty
else
    skip_part "no mpirun: progress under mpirun untested"
fi

# verify and diff
pty_run v.tty "$DETCHECK" verify --golden big.yaml big2.safetensors || fail "verify under a pty: exit $?"
expect_has '100%  8.0 MiB / 8.0 MiB' v.tty
expect_grep '^OK: 1 tensors identical' out.txt
pty_run d.tty "$DETCHECK" diff big.safetensors big2.safetensors || fail "diff under a pty: exit $?"
expect_has '100%  16.0 MiB / 16.0 MiB' d.tty
pty_run dq.tty "$DETCHECK" diff -q big.safetensors big2.safetensors || fail "exit $?"
expect_hasnt 'ETA' dq.tty

# resume-check: trainer steps (reference 4; killed after 2 + its resume 2;
# killed while writing 4 + its resume from 2: 4 + 2), a rate, an ETA
CFG="--vocab 64 --width 32 --layers 2 --heads 2 --seq 16 --batch 1 --microbatches 2"
pty_run rc.tty "$DETCHECK" resume-check $CFG --steps 4 --at 2 || fail "resume-check under a pty: exit $?"
expect_has '100%  14 / 14 steps' rc.tty
expect_has 'steps/s  ETA ' rc.tty
expect_grep '^resume-check: identical' out.txt
pty_run rcq.tty "$DETCHECK" resume-check $CFG --steps 4 --at 2 -q || fail "exit $?"
expect_hasnt 'steps' rcq.tty
done_ok

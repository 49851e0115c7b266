#!/bin/sh
# The example pages of `detcheck bisect --html`, `detcheck repro --html` and
# `detcheck resume-check --html`:
#   bisect.html        two runs of the built-in trainer, one with a single
#                      flipped bit in a weight after step 6: one tensor
#                      differs, then its optimizer moments, then the model
#                      (checkpoint every step), the loss last
#   repro.html         a training command run twice with other thread
#                      counts (--vary threads): from step 12 one gradient's
#                      reduction depends on them; recorded and traced as the
#                      Python package does, so the page names the tensor and
#                      the module whose output differed first
#   resume-check.html  the built-in trainer killed after checkpoint 8 and
#                      resumed, with the testing hook that corrupts the
#                      resumed run at step 10
#
#   DETCHECK=build/detcheck sh examples/reports/make_runs.sh OUTDIR
#
# writes the pages into OUTDIR (and the runs under OUTDIR/runs). Needs
# python3 for the training command of repro (no PyTorch: it writes what the
# recorder writes with struct, as the tests do).
set -eu
DETCHECK=${DETCHECK:-detcheck}
out=${1:?usage: DETCHECK=path/to/detcheck make_runs.sh OUTDIR}
mkdir -p "$out/runs"
out=$(cd "$out" && pwd)
cd "$out/runs"
rm -rf a b repro resume

# exit 1 is the verdict these pages show (the runs differ); 2 is trouble
expect_different() {
    set +e
    "$@" > /dev/null
    rc=$?
    set -e
    [ "$rc" -eq 1 ] || { echo "make_runs.sh: $* exited $rc, not 1 (different)" >&2; exit 2; }
}

# ---------------------------------------------------------------- bisect
CFG="--vocab 96 --width 48 --layers 3 --heads 4 --seq 24 --batch 2 --microbatches 2 --steps 24 --ckpt-every 1 -q"
"$DETCHECK" train $CFG --out a
"$DETCHECK" train $CFG --out b --flip-bit 6:model.blocks.1.attn.qkv.weight:300
expect_different "$DETCHECK" bisect a b --html "$out/bisect.html"

# ---------------------------------------------------------------- repro
cat > train.py <<'PY'
# A stand-in for a PyTorch training script under detcheck.autorecord: it
# honours DETCHECK_RECORD and DETCHECK_TRACE and writes trajectory.jsonl,
# run.json, tensor_digests.bin and trace.bin as the recorder does. Its
# nondeterminism: from step 12, layers.2.mlp.fc2's weight gradient is
# reduced in as many chunks as there are threads (DETCHECK_THREADS).
import hashlib, json, math, os, struct
d = os.environ["DETCHECK_RECORD"]
threads = int(os.environ.get("DETCHECK_THREADS", "8"))
trace = os.environ.get("DETCHECK_TRACE", "none")
STEPS, PART = 30, 12
layers = ["model.layers.%d" % i for i in range(6)]
mods = ["model.embed"] + [l + s for l in layers for s in (".attn.qkv", ".attn.proj", ".mlp.fc1", ".mlp.fc2")] + \
       ["model.norm", "model.head"]
H = lambda *a: int.from_bytes(hashlib.sha256(repr(a).encode()).digest()[:16], "big")
f32 = lambda x: struct.unpack("<I", struct.pack("<f", x))[0]
def salt(step, mod):
    """What the thread count changes: the culprit at PART, everything after."""
    if step < PART:
        return 0
    if step == PART:
        return threads if mod == "model.layers.2.mlp.fc2" else 0
    return threads
json.dump({"detcheck_run": 1, "argv": ["train.py"],
           "settings": {"deterministic_algorithms": True, "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
                        "cudnn_deterministic": True, "cudnn_benchmark": False, "tf32_matmul": False,
                        "tf32_cudnn": False, "threads": threads, "torch": "2.5.1", "gpus": []}},
          open(os.path.join(d, "run.json"), "w"))
names = []
for k, suffix in ((0, ""), (1, ""), (2, ".exp_avg"), (2, ".exp_avg_sq")):
    for m in mods:
        for leaf in ("weight", "bias"):
            if not (m == "model.embed" and leaf == "bias"):
                names.append((k, m + "." + leaf + suffix))
rec = bytearray(b"DCKTDIG\0" + struct.pack("<II", 1, 0))
for i, (k, n) in enumerate(names):
    rec += struct.pack("<BIBH", 1, i, k, len(n)) + n.encode()
tr, tids = bytearray(b"DCKTRAC\0" + struct.pack("<II", 1, 0)), {}
def tid(n):
    global tr
    if n not in tids:
        tids[n] = len(tids)
        tr += struct.pack("<BIH", 1, tids[n], len(n)) + n.encode()
    return tids[n]
with open(os.path.join(d, "trajectory.jsonl"), "w") as t:
    for s in range(1, STEPS + 1):
        gap = 0 if s <= PART or threads == 8 else 3e-7 * 2.2 ** (s - PART - 1)
        loss = 2.2 + 3.1 * math.exp(-s / 9.0) + 0.04 * math.sin(1.7 * s) + gap
        gn = 1.2 + 0.9 * math.exp(-s / 6.0) + 0.05 * math.cos(2.3 * s) + 3 * gap
        t.write(json.dumps({"step": s, "loss": loss, "loss_bits": "%08x" % f32(loss), "grad_norm": gn,
                            "grad_norm_bits": "%08x" % f32(gn), "lr": 3e-4}) + "\n")
        rec += struct.pack("<BqI", 2, s, len(names))
        for i, (k, n) in enumerate(names):
            mod = n.rsplit(".", 2 if k == 2 else 1)[0]
            # at PART the gradient, then the weight and moments it updates
            v = H(n, s, salt(s, mod) if (k != 0 or s > PART or mod == "model.layers.2.mlp.fc2") else 0)
            rec += struct.pack("<IQQ", i, v >> 64, v & (2 ** 64 - 1))
        if trace == "none":
            continue
        # module events: forward in order, backward in reverse; at PART the
        # backward of fc2 is the culprit and what its gradient flows into
        # inherits it
        ev = [(0, m) for m in mods] + [(1, m) for m in reversed(mods)]
        for ph, m in ev:
            tid(m)
        tr += struct.pack("<BqIB", 2, s, len(ev), 0)
        hit = False
        for ph, m in ev:
            bad_in = s > PART or (s == PART and ph == 1 and hit)
            if s == PART and ph == 1 and m == "model.layers.2.mlp.fc2":
                hit = True
            bad_out = s > PART or (s == PART and ph == 1 and hit)
            x, y = H(m, ph, s, "in", threads if bad_in else 0), H(m, ph, s, "out", threads if bad_out else 0)
            tr += struct.pack("<BBIIIBB", ph, 0, tid(m), 0xFFFFFFFF, 0, 1, 1)
            tr += struct.pack("<BQQ", 1, x >> 64, x & (2 ** 64 - 1)) + struct.pack("<BQQ", 1, y >> 64, y & (2 ** 64 - 1))
open(os.path.join(d, "tensor_digests.bin"), "wb").write(rec)
if trace != "none":
    open(os.path.join(d, "trace.bin"), "wb").write(tr)
print("trained %d steps" % STEPS)
PY
expect_different "$DETCHECK" repro -q --workdir repro --env DETCHECK_THREADS=8,3 \
    --html "$out/repro.html" -- python3 train.py

# ---------------------------------------------------------------- resume-check
RCFG="--vocab 96 --width 48 --layers 3 --heads 4 --seq 24 --batch 2 --microbatches 2"
expect_different "$DETCHECK" resume-check $RCFG --steps 16 --at 8 --ckpt-every 1 -q --workdir resume \
    --resume-flip-bit 10:model.blocks.2.mlp.fc.weight:5 --html "$out/resume-check.html"
echo "$out/bisect.html $out/repro.html $out/resume-check.html"

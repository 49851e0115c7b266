#!/bin/sh
# The example pages of `detcheck diff --html` and `detcheck verify --html`:
# two checkpoints of a small 12-layer model (weights, AdamW moments, RNG
# state) as two runs that part at layer 3 by one ULP, the difference growing
# through the later layers and the optimizer state, and a NaN in layer 8.
#
#   DETCHECK=build/detcheck sh examples/reports/make_diff.sh OUTDIR
#
# writes OUTDIR/diff.html and OUTDIR/verify.html (and the inputs under
# OUTDIR/inputs). Needs python3 (no numpy: the files are written with
# struct, as the tests write theirs).
set -eu
DETCHECK=${DETCHECK:-detcheck}
out=${1:?usage: DETCHECK=path/to/detcheck make_diff.sh OUTDIR}
mkdir -p "$out/inputs"
cd "$out/inputs"

python3 - <<'PY'
import json, random, struct

def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]

def tensors(side):
    """name -> (dtype, shape, raw bytes). A and B share every value except
    where run B parts: a 1-ULP difference in layer 3's attention, growing
    by about 8x per layer after it, in the MLP from layer 5 and in the
    optimizer's moments from layer 4; a NaN in layer 8's MLP; and the RNG
    state."""
    rnd = random.Random(1234)
    T = {}
    def f32(name, shape, scale, edits=None):
        n = 1
        for d in shape: n *= d
        bits = [f32_bits(rnd.gauss(0.0, scale)) for _ in range(n)]
        if side == "b" and edits:
            edits(bits)
        T[name] = ("F32", shape, struct.pack("<%dI" % n, *bits))
    def bump(count, ulps, seed):
        # count elements, each moved by up to ulps on the F32 grid
        def edit(bits):
            r = random.Random(seed)
            for _ in range(count):
                i = r.randrange(len(bits))
                bits[i] += r.randint(max(1, ulps // 2), ulps) * r.choice((1, -1)) if ulps > 1 else 1
        return edit
    def nan_at(i, then=None):
        def edit(bits):
            if then: then(bits)
            bits[i] = 0x7fc00000
        return edit
    f32("model.embed_tokens.weight", [256, 32], 0.02)
    for k in range(12):
        p = "model.layers.%d." % k
        grow = 8 ** (k - 3) if k >= 3 else 0
        attn = bump(1 if k == 3 else 4 * (k - 2), grow, k) if grow else None
        mlp = bump(2 * (k - 4), grow // 4, 100 + k) if k >= 5 else None
        f32(p + "self_attn.qkv_proj.weight", [96, 32], 0.02, attn)
        f32(p + "self_attn.o_proj.weight", [32, 32], 0.02, attn)
        f32(p + "mlp.up_proj.weight", [64, 32], 0.02, mlp)
        f32(p + "mlp.down_proj.weight", [32, 64], 0.02, nan_at(17, mlp) if k == 8 else mlp)
        f32(p + "input_layernorm.weight", [32], 1.0)
        for m, scale in (("exp_avg", 1e-3), ("exp_avg_sq", 1e-6)):
            opt = bump(8 * (k - 3), grow * 4, 200 + k) if k >= 4 else None
            f32("optimizer.state.%s.%sself_attn.qkv_proj.weight" % (m, p), [96, 32], scale, opt)
    f32("model.norm.weight", [32], 1.0)
    f32("lm_head.weight", [256, 32], 0.02)
    rng = bytearray(random.Random(7).randbytes(64))
    if side == "b":
        rng[5] ^= 0x10
    T["rng_state.cuda"] = ("U8", [64], bytes(rng))
    T["rng_state.cpu"] = ("U8", [64], bytes(random.Random(8).randbytes(64)))
    return T

for side in ("a", "b"):
    hdr, data = {}, b""
    for name, (dt, shape, raw) in tensors(side).items():
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    with open("run_%s.safetensors" % side, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)
PY

# exit 1 (different) is what these runs are for; 0 or 2 is a failure here
expect1() {
    set +e
    "$@" > /dev/null
    rc=$?
    set -e
    [ "$rc" -eq 1 ] || { echo "make_diff.sh: exit $rc, wanted 1: $*" >&2; exit 1; }
}
"$DETCHECK" hash -q -o golden.yaml run_a.safetensors
expect1 "$DETCHECK" diff -q --html ../diff.html run_a.safetensors run_b.safetensors
expect1 "$DETCHECK" verify -q --golden golden.yaml --html ../verify.html run_b.safetensors
echo "wrote $out/diff.html and $out/verify.html"

# CLI: detcheck diff on checkpoints written by Python's struct (independent of
# detcheck): known edits at known indices for every float dtype, counts, first
# index, ULP, NaN payloads, -0 vs +0, infinities; exit codes, the table, JSON,
# thread-count invariance, tolerances, groups, colour.
. "$DCK_TOP/tests/cli/lib.sh"

# mk FILE SIDE: SIDE a or b. Elements are given as raw bits; B applies edits.
mk() {
python3 - "$1" "$2" <<'PY'
import json, struct, sys
path, side = sys.argv[1], sys.argv[2]
fmt = {"F64": "<Q", "F32": "<I", "F16": "<H", "BF16": "<H", "F8_E4M3": "<B",
       "F8_E5M2": "<B", "I32": "<i", "U8": "<B"}
# name, dtype, shape, A elements (bits), B edits {flat index: bits}
T = [
    ("model.layers.0.attn.f64", "F64", [2, 3], [0x3ff0000000000000] * 6, {4: 0x3ff0000000000003}),
    ("model.layers.1.attn.f32", "F32", [4], [0x3f800000, 0, 0, 0x3f800000], {2: 0x80000000}),
    ("model.layers.2.attn.f16", "F16", [3, 2], [0x3c00] * 5 + [0x0001], {5: 0x8001}),
    ("model.layers.3.attn.bf16", "BF16", [5], [0x7f7f, 0x3f80, 0x3f80, 0x3f80, 0x3f80], {0: 0x7f80}),
    ("model.layers.4.attn.e4m3", "F8_E4M3", [2, 2], [0x38, 0x38, 0x38, 0x7f], {3: 0xff}),
    ("model.layers.5.attn.e5m2", "F8_E5M2", [6], [0x3c] * 6, {1: 0x3d}),
    ("model.layers.6.attn.i32", "I32", [3], [5, 6, 7], {0: -5}),
    ("model.layers.7.attn.u8", "U8", [4], [1, 2, 3, 4], {}),
    ("model.layers.10.attn.f32", "F32", [2], [0x40000000, 0x40000000], {}),
]
hdr, data, pos = {}, bytearray(), 0
for name, dt, shape, elems, edits in T:
    e = list(elems)
    if side == "b":
        for k, v in edits.items(): e[k] = v
    b = b"".join(struct.pack(fmt[dt], x) for x in e)
    hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [pos, pos + len(b)]}
    data += b
    pos += len(b)
h = json.dumps(hdr).encode()
open(path, "wb").write(struct.pack("<Q", len(h)) + h + bytes(data))
PY
}

# jq-free JSON checks: jget FILE PYTHON-EXPR (d is the document)
jget() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); t={x['name']:x for x in d['tensors']}; print($2)" "$1"; }
expect_eq() { [ "$1" = "$2" ] || fail "got '$1', wanted '$2' ($3)"; ok; }

mk a.safetensors a
mk b.safetensors b

# help, misuse
expect_exit 0 "$DETCHECK" diff --help
expect_grep "usage: detcheck diff" out.txt
expect_exit 2 "$DETCHECK" diff a.safetensors
expect_grep "wants two" err.txt
expect_exit 2 "$DETCHECK" diff --frob a.safetensors b.safetensors
expect_grep "unknown option" err.txt
expect_exit 2 "$DETCHECK" diff --ulp -1 a.safetensors b.safetensors
expect_exit 2 "$DETCHECK" diff --atol x a.safetensors b.safetensors
expect_exit 2 "$DETCHECK" diff --group nope a.safetensors b.safetensors
expect_exit 2 "$DETCHECK" diff --group "" a.safetensors b.safetensors
expect_exit 2 "$DETCHECK" diff --color sometimes a.safetensors b.safetensors
expect_exit 2 "$DETCHECK" diff --threads 0 a.safetensors b.safetensors
expect_exit 2 "$DETCHECK" diff --rtol inf a.safetensors b.safetensors
expect_exit 2 "$DETCHECK" diff a.safetensors b.safetensors c.safetensors
expect_exit 2 "$DETCHECK" diff --top 0 a.safetensors b.safetensors

# identical: exit 0
expect_exit 0 "$DETCHECK" diff a.safetensors a.safetensors
expect_grep "Result: equal" out.txt
expect_grep "(9 equal tensors not shown" out.txt

# different: exit 1; the table lists the differing tensors only
expect_exit 1 "$DETCHECK" diff a.safetensors b.safetensors
expect_grep "^differ  *model.layers.0.attn.f64  *F64  *\[2,3\]  *1/6 .* 3  *\[1,1\]$" out.txt
expect_grep "^differ  *model.layers.2.attn.f16 .* 2  *\[2,1\]$" out.txt
expect_grep "NaN payloads differ: 1" out.txt
expect_no_grep "model.layers.7.attn.u8" out.txt
expect_grep "(2 equal tensors not shown; -v lists them)" out.txt
expect_grep "first differing layer: layers.0" out.txt
expect_grep "Result: different (9 tensors, 2 equal, 7 differ)" out.txt
expect_no_grep "$(printf '\033')" out.txt   # not a terminal: no colour
expect_exit 1 "$DETCHECK" diff -v a.safetensors b.safetensors
expect_grep "^equal  *model.layers.7.attn.u8" out.txt
expect_exit 1 "$DETCHECK" diff --color=always a.safetensors b.safetensors
expect_grep "$(printf '\033')\[31mdiffer" out.txt
expect_exit 1 "$DETCHECK" diff --top 2 a.safetensors b.safetensors
expect_grep "Top 2 by max ULP" out.txt
# NaN differences rank first, then the largest ULP distance (I32: 10)
expect_grep "   1\. model.layers.4.attn.e4m3 .*(NaN differences)" out.txt
expect_grep "   2\. model.layers.6.attn.i32  *max_ulp 10 " out.txt
expect_exit 1 "$DETCHECK" diff --json --top 3 a.safetensors b.safetensors
expect_eq "$(jget out.txt "d['top']")" "['model.layers.4.attn.e4m3', 'model.layers.6.attn.i32', 'model.layers.0.attn.f64']" top-json

# JSON: every number
expect_exit 1 "$DETCHECK" diff --json a.safetensors b.safetensors
cp out.txt d.json
expect_eq "$(jget d.json "d['equal'], d['summary']['differ'], d['summary']['first_differing_layer']")" "False 7 layers.0" summary
expect_eq "$(jget d.json "t['model.layers.0.attn.f64']['diff_count'], t['model.layers.0.attn.f64']['max_ulp'], t['model.layers.0.attn.f64']['first_index'], t['model.layers.0.attn.f64']['max_abs'] == 3 * 2**-52")" "1 3 [1, 1] True" f64
# -0 vs +0: a differing bit pattern at zero distance
expect_eq "$(jget d.json "t['model.layers.1.attn.f32']['diff_count'], t['model.layers.1.attn.f32']['max_ulp'], t['model.layers.1.attn.f32']['max_abs'], t['model.layers.1.attn.f32']['first_index']")" "1 0 0 [2]" negzero
# subnormals across zero: 2 ULP, 2 * 2^-24
expect_eq "$(jget d.json "t['model.layers.2.attn.f16']['max_ulp'], t['model.layers.2.attn.f16']['max_abs'] == 2**-23, t['model.layers.2.attn.f16']['first_index']")" "2 True [2, 1]" f16
# largest finite to infinity: 1 ULP, infinite abs, counted
expect_eq "$(jget d.json "t['model.layers.3.attn.bf16']['max_ulp'], t['model.layers.3.attn.bf16']['max_abs'], t['model.layers.3.attn.bf16']['inf_a'], t['model.layers.3.attn.bf16']['inf_b']")" "1 inf 0 1" bf16
# NaN payloads (sign) differ
expect_eq "$(jget d.json "t['model.layers.4.attn.e4m3']['nan_payload'], t['model.layers.4.attn.e4m3']['nan_a'], t['model.layers.4.attn.e4m3']['nan_b'], t['model.layers.4.attn.e4m3']['first_index']")" "1 1 1 [1, 1]" e4m3
expect_eq "$(jget d.json "t['model.layers.5.attn.e5m2']['max_ulp'], t['model.layers.5.attn.e5m2']['max_abs'], t['model.layers.5.attn.e5m2']['first_index']")" "1 0.25 [1]" e5m2
expect_eq "$(jget d.json "t['model.layers.6.attn.i32']['max_ulp'], t['model.layers.6.attn.i32']['max_abs'], t['model.layers.6.attn.i32']['max_rel']")" "10 10 2" i32
expect_eq "$(jget d.json "t['model.layers.7.attn.u8']['status'], 'diff_count' in t['model.layers.7.attn.u8']")" "equal False" u8
expect_eq "$(jget d.json "[l['layer'] for l in d['layers']]")" "['layers.0', 'layers.1', 'layers.2', 'layers.3', 'layers.4', 'layers.5', 'layers.6', 'layers.7', 'layers.10']" "layers in model order"
expect_eq "$(jget d.json "d['summary']['groups']['weights']")" "{'tensors': 9, 'differing': 7}" groups

# results identical for every thread count
for j in 1 2 3 8; do
    expect_exit 1 "$DETCHECK" diff --json -t $j a.safetensors b.safetensors
    cmp -s out.txt d.json || fail "JSON differs with -j $j"; ok
done

# tolerances: NaN and infinity differences never pass
expect_exit 1 "$DETCHECK" diff --ulp 1000 --atol 1 a.safetensors b.safetensors
expect_grep "within_tolerance  *model.layers.0.attn.f64" out.txt
expect_grep "^differ  *model.layers.3.attn.bf16" out.txt
expect_exit 1 "$DETCHECK" diff --group weights --ulp 2 a.safetensors b.safetensors

# a pair whose only differences are small
python3 - <<'PY'
import json, struct
def w(path, vals):
    b = b"".join(struct.pack("<f", v) for v in vals)
    h = json.dumps({"layers.3.w": {"dtype": "F32", "shape": [len(vals)], "data_offsets": [0, len(b)]},
                    "optimizer.state.3.exp_avg": {"dtype": "F32", "shape": [1],
                                                  "data_offsets": [len(b), len(b) + 4]}}).encode()
    b += struct.pack("<f", 0.5)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + b)
w("s1.safetensors", [1.0, 2.0, 4.0])
w("s2.safetensors", [1.0, 2.0000002384185791, 4.0000004768371582])  # +1 ULP each
PY
expect_exit 1 "$DETCHECK" diff s1.safetensors s2.safetensors
expect_exit 0 "$DETCHECK" diff --ulp 1 s1.safetensors s2.safetensors
expect_grep "Result: within tolerance" out.txt
expect_exit 1 "$DETCHECK" diff --ulp 0 s1.safetensors s2.safetensors
expect_exit 0 "$DETCHECK" diff --atol 5e-7 s1.safetensors s2.safetensors
expect_exit 1 "$DETCHECK" diff --atol 4e-7 s1.safetensors s2.safetensors
expect_exit 0 "$DETCHECK" diff --rtol 1.2e-7 s1.safetensors s2.safetensors
expect_exit 1 "$DETCHECK" diff --rtol 1e-7 s1.safetensors s2.safetensors
expect_exit 0 "$DETCHECK" diff --json --ulp 1 s1.safetensors s2.safetensors
expect_eq "$(jget out.txt "d['equal'], d['ok'], d['tensors'][0]['status'], d['tolerance']['ulp']")" "False True within_tolerance 1" tol-json
# --group: only the optimizer tensor (equal)
expect_exit 0 "$DETCHECK" diff --group optimizer s1.safetensors s2.safetensors
expect_grep "Groups: optimizer 0/1 differ" out.txt
expect_exit 1 "$DETCHECK" diff --group rng,optimizer --group weights s1.safetensors s2.safetensors
expect_grep "Groups: weights 1/1 differ, optimizer 0/1 differ" out.txt
expect_exit 0 "$DETCHECK" diff --group rng s1.safetensors s2.safetensors
expect_grep "Groups: none" out.txt

# bad input: one side unreadable, exit 2 naming it
expect_exit 2 "$DETCHECK" diff a.safetensors missing.safetensors
expect_grep "missing.safetensors" err.txt
head -c 100 b.safetensors > trunc.safetensors
expect_exit 2 "$DETCHECK" diff a.safetensors trunc.safetensors
expect_grep "trunc.safetensors" err.txt
printf 'not: a manifest\n' > junk.yaml
expect_exit 2 "$DETCHECK" diff junk.yaml b.safetensors
expect_grep "junk.yaml" err.txt
: > empty.safetensors
expect_exit 2 "$DETCHECK" diff empty.safetensors b.safetensors
expect_grep "empty.safetensors" err.txt

# JSON numbers beyond jansson's signed integers stay exact: ULP distances up
# to 2^64 - 1 (U64 0 vs max, I64 min vs max, F64 -max vs +max)
python3 - <<'PY'
import json, struct
def st(path, vals):
    hdr, data = {}, b""
    for name, dt, f, v in vals:
        b = struct.pack(f, v)
        hdr[name] = {"dtype": dt, "shape": [1], "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    h = json.dumps(hdr).encode()
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + data)
st("big_a.safetensors", [("u", "U64", "<Q", 0), ("i", "I64", "<q", -2**63), ("f", "F64", "<d", -1.7976931348623157e308)])
st("big_b.safetensors", [("u", "U64", "<Q", 2**64 - 1), ("i", "I64", "<q", 2**63 - 1), ("f", "F64", "<d", 1.7976931348623157e308)])
PY
expect_exit 1 "$DETCHECK" diff --json big_a.safetensors big_b.safetensors
expect_eq "$(jget out.txt "t['u']['max_ulp'], t['i']['max_ulp'], t['f']['max_ulp'] == 2 * 0x7fefffffffffffff, [l['max_ulp'] for l in d['layers']]")" \
    "18446744073709551615 18446744073709551615 True []" big-ulp
# -2^63 against 2^63-1 and -max against +max: sign changes, no same-sign pair
expect_eq "$(jget out.txt "[(t[k]['sign_changes'], t[k]['max_ulp_same_sign']) for k in 'uif']")" "[(0, 18446744073709551615), (1, 0), (1, 0)]" big-signs
expect_eq "$(jget out.txt "type(t['u']['max_abs']).__name__, t['f']['max_abs'], t['u']['count']")" "float inf 1" big-abs
# the document's keys, in their order; one tensor record per line (for grep)
python3 - <<'PY' || fail "diff --json keys and layout"
import json
d = json.load(open("d.json"), object_pairs_hook=lambda kv: kv)
assert [k for k, _ in d] == ["a", "b", "mode", "equal", "ok", "tolerance", "summary", "layers",
                             "values", "tensors"], [k for k, _ in d]
t = [dict(x) for x in dict(d)["tensors"]]
assert [k for k in t[0]] == ["name", "status", "group", "layer", "dtype", "shape", "digest_a", "digest_b",
                             "count", "diff_count", "beyond_tolerance", "max_abs", "max_rel", "max_ulp",
                             "max_ulp_same_sign", "sign_changes", "first_index", "rel_l2", "nan_a", "nan_b", "inf_a", "inf_b", "nan_vs_number",
                             "nan_payload"], list(t[0])
s = dict(dict(d)["summary"])
assert list(s)[:2] == ["tensors", "equal"] and list(s)[-3:] == ["first_differing_layer", "groups", "bytes_compared"], s
lines = [l for l in open("d.json") if '"status": ' in l]
assert len(lines) == len(t), lines
PY
ok
expect_grep '"tensors": 9, "equal": 2,' d.json
# a path that is not UTF-8 still gives a document JSON can read (the stray byte as the text \xff)
cp a.safetensors "$(printf 'x\377y.safetensors')"
expect_exit 1 "$DETCHECK" diff --json "$(printf 'x\377y.safetensors')" b.safetensors
expect_eq "$(jget out.txt "d['a'] == 'x\\\\xffy.safetensors', d['summary']['differ']")" "True 7" not-utf8

# Sign changes (detcheck-diff(1), Two checkpoints): 8.4e-06 against -8.4e-06 is ~1.8e9 float32 ULPs
# apart; it is counted apart, and the ULP distance of the same-sign pairs
# (3 here) is shown beside it in the table, the layer summary, JSON,
# Markdown and JUnit. +0 against -0 and a NaN are no sign change.
python3 - <<'PY'
import json, struct
def st(path, side):
    a = [8.4e-06, 1.0, 2.0, 0.0, float("nan"), 0.5]
    b = [-8.4e-06, struct.unpack("<f", struct.pack("<I", 0x3f800003))[0], 2.0, -0.0, -0.5, 0.5]
    v = a if side == "a" else b
    d = struct.pack("<6f", *v) + struct.pack("<2f", 1.0, 3.0)
    hdr = {"model.layers.0.mlp.w": {"dtype": "F32", "shape": [6], "data_offsets": [0, 24]},
           "model.layers.1.mlp.w": {"dtype": "F32", "shape": [2], "data_offsets": [24, 32]}}
    h = json.dumps(hdr).encode()
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + d)
st("sa.safetensors", "a"); st("sb.safetensors", "b")
PY
far=$(python3 -c "import struct; print(2 * struct.unpack('<I', struct.pack('<f', 8.4e-06))[0])")
expect_exit 1 "$DETCHECK" diff sa.safetensors sb.safetensors --markdown=s.md --junit=s.xml
expect_grep "^        sign changes: 1 (nonzero on both sides, signs differ); max ULP of the other pairs: 3$" out.txt
expect_grep "^  layers.0             1/1 tensors differ, max ULP $far (1 sign change; same-sign pairs: max ULP 3)$" out.txt
expect_grep "max ULP $far, rel L2 [^;]*; sign changes 1, same-sign max ULP 3;" s.md
expect_grep "sign changes 1, same-sign max ULP 3;" s.xml
expect_exit 1 "$DETCHECK" diff --json sa.safetensors sb.safetensors
expect_eq "$(jget out.txt "t['model.layers.0.mlp.w']['max_ulp'], t['model.layers.0.mlp.w']['sign_changes'], t['model.layers.0.mlp.w']['max_ulp_same_sign'], [(l['sign_changes'], l['max_ulp_same_sign'], l['max_ulp']) for l in d['layers']]")" \
    "$far 1 3 [(1, 3, $far), (0, 0, 0)]" sign-changes

# Every figure of tensors larger than one 1 MiB chunk, against an oracle in
# Python that follows the documented arithmetic (not detcheck's code): per
# chunk, a chunk whose bytes are equal sums its squares on four lanes
# (element i into lane i % 4, then (0+1)+(2+3)), a differing chunk adds the
# squares of its finite pairs one element at a time in element order; the
# chunks' sums are added in chunk order. Every element differs in most
# tensors; NaN, infinities and -0 in some; with and without tolerances and
# for 1 and 3 threads, the figures must be these exact doubles.
python3 - <<'PY' || fail "oracle: writing the pair"
import json, math, random, struct
random.seed(10)
F = {"F32": ("<I", 4), "F64": ("<Q", 8), "BF16": ("<H", 2), "F16": ("<H", 2)}
def weight(dt):
    x = random.uniform(-0.08, 0.08)
    if dt == "F64": return struct.unpack("<Q", struct.pack("<d", x))[0]
    if dt == "F16": return struct.unpack("<H", struct.pack("<e", x))[0]
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    return u >> 16 if dt == "BF16" else u
def special(dt):
    bits = F[dt][1] * 8
    sign = 1 << (bits - 1)
    e = {"F32": 0x7f800000, "F64": 0x7ff0000000000000, "BF16": 0x7f80, "F16": 0x7c00}[dt]
    s = sign if random.random() < 0.5 else 0
    return random.choice([s, s | e, s | e | 1, s | e | (e >> 3), s | 1])
# name, dtype, elements, kind: all (every element differs), special (and NaN/Inf/-0),
# half (first chunk equal, second differs)
T = [("o.f32", "F32", 300007, "all"), ("o.f32s", "F32", 270001, "special"),
     ("o.f32h", "F32", 300000, "half"), ("o.f64", "F64", 140001, "special"),
     ("o.bf16", "BF16", 600003, "all"), ("o.f16", "F16", 530000, "special")]
hdr, da, db, pos = {}, bytearray(), bytearray(), 0
for name, dt, n, kind in T:
    fmt, sz = F[dt]
    per = (1 << 20) // sz
    a, b = [], []
    for i in range(n):
        x = weight(dt)
        if kind == "special" and random.random() < 0.05: x = special(dt)
        if kind == "half" and i < per: y = x
        elif kind == "special" and random.random() < 0.05: y = special(dt)
        elif random.random() < 0.5: y = (x + random.randint(1, 3)) % (1 << (8 * sz))
        else: y = weight(dt)
        a.append(x); b.append(y)
    ba = b"".join(struct.pack(fmt, v) for v in a)
    bb = b"".join(struct.pack(fmt, v) for v in b)
    hdr[name] = {"dtype": dt, "shape": [n], "data_offsets": [pos, pos + len(ba)]}
    da += ba; db += bb; pos += len(ba)
for path, data in (("oa.safetensors", da), ("ob.safetensors", db)):
    h = json.dumps(hdr).encode()
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + bytes(data))
json.dump(T, open("oracle_tensors.json", "w"))
PY
ok
k=0
for opts in "-t 1" "-t 3" "-t 2 --atol 1e-3 --rtol 0.01" "-t 2 --ulp 2"; do
    set +e; "$DETCHECK" diff --json $opts oa.safetensors ob.safetensors > oracle$k.json 2> err.txt; rc=$?; set -e
    [ "$rc" -le 1 ] || fail "oracle: diff $opts exit $rc: $(cat err.txt)"
    k=$((k+1))
done
python3 - <<'PY' || fail "oracle: figures differ"
import json, math, struct, sys
# the runs above: tolerances (atol, rtol, ulp) of each
RUNS = [(None, None, None), (None, None, None), (1e-3, 0.01, None), (None, None, 2)]
F = {"F32": ("<I", 4), "F64": ("<Q", 8), "BF16": ("<H", 2), "F16": ("<H", 2)}
E = {"F32": 0x7f800000, "F64": 0x7ff0000000000000, "BF16": 0x7f80, "F16": 0x7c00}
def value(dt, u):
    if dt == "F64": return struct.unpack("<d", struct.pack("<Q", u))[0]
    if dt == "F16": return struct.unpack("<e", struct.pack("<H", u))[0]
    return struct.unpack("<f", struct.pack("<I", u << 16 if dt == "BF16" else u))[0]
def cls(dt, u):  # 0 finite, 1 inf, 2 NaN
    sign = 1 << (F[dt][1] * 8 - 1)
    m = u & (sign - 1)
    return 0 if m < E[dt] else (1 if m == E[dt] else 2)
def ulp(dt, a, b):
    sign = 1 << (F[dt][1] * 8 - 1)
    ma, mb = a & (sign - 1), b & (sign - 1)
    return abs(ma - mb) if (a & sign) == (b & sign) else ma + mb
ha = open("oa.safetensors", "rb").read(); hb = open("ob.safetensors", "rb").read()
n0 = struct.unpack("<Q", ha[:8])[0]; hdr = json.loads(ha[8:8 + n0]); base = 8 + n0
docs = [json.load(open("oracle%d.json" % k)) for k in range(len(RUNS))]
num = lambda v: math.inf if v == "inf" else float(v)
bad = []
for name, t in hdr.items():
    dt = t["dtype"]; fmt, sz = F[dt]; o0, o1 = t["data_offsets"]
    ra, rb = ha[base + o0:base + o1], hb[base + o0:base + o1]
    n = (o1 - o0) // sz
    A = struct.unpack("<%d%s" % (n, fmt[1]), ra); B = struct.unpack("<%d%s" % (n, fmt[1]), rb)
    per = (1 << 20) // sz
    w = dict(diff_count=0, max_abs=0.0, max_rel=0.0, max_ulp=0, max_ulp_same_sign=0, sign_changes=0, nan_a=0, nan_b=0,
             inf_a=0, inf_b=0, nan_vs_number=0, nan_payload=0, first=None)
    beyond = [0] * len(RUNS)
    sd = sa = sb = 0.0
    for c0 in range(0, n, per):
        c1 = min(n, c0 + per)
        if ra[c0 * sz:c1 * sz] == rb[c0 * sz:c1 * sz]:
            lanes = [0.0, 0.0, 0.0, 0.0]
            for i in range(c0, c1):
                k = cls(dt, A[i]); w["nan_a"] += k == 2; w["nan_b"] += k == 2
                w["inf_a"] += k == 1; w["inf_b"] += k == 1
                v = 0.0 if k else value(dt, A[i])
                lanes[(i - c0) % 4] += v * v
            sq = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3])
            sa += sq; sb += sq
            continue
        cd = ca_ = cb_ = 0.0
        for i in range(c0, c1):
            x, y = A[i], B[i]
            kx, ky = cls(dt, x), cls(dt, y)
            w["nan_a"] += kx == 2; w["nan_b"] += ky == 2; w["inf_a"] += kx == 1; w["inf_b"] += ky == 1
            vx, vy = value(dt, x), value(dt, y)
            if kx == 0 and ky == 0:
                d = vx - vy; cd += d * d; ca_ += vx * vx; cb_ += vy * vy
            if x == y: continue
            w["diff_count"] += 1
            if w["first"] is None: w["first"] = i
            if kx == 2 or ky == 2:
                if kx == 2 and ky == 2: w["nan_payload"] += 1
                else: w["nan_vs_number"] += 1
                beyond = [z + 1 for z in beyond]
                continue
            u = ulp(dt, x, y); ad = abs(vx - vy); mag = max(abs(vx), abs(vy))
            rel = math.inf if math.isinf(ad) else (ad / mag if mag > 0 else 0.0)
            w["max_ulp"] = max(w["max_ulp"], u); w["max_abs"] = max(w["max_abs"], ad)
            # a sign change: signs differ, neither side zero (+0 or -0)
            sign = 1 << (sz * 8 - 1)
            if dt[0] in "FBI" and (x ^ y) & sign and x & (sign - 1) and y & (sign - 1): w["sign_changes"] += 1
            else: w["max_ulp_same_sign"] = max(w["max_ulp_same_sign"], u)
            w["max_rel"] = max(w["max_rel"], rel)
            for r, (atol, rtol, ulp_tol) in enumerate(RUNS):
                within = False
                if kx == 0 and ky == 0:
                    if (atol is not None or rtol is not None) and ad <= (atol or 0.0) + (rtol or 0.0) * mag:
                        within = True
                    if ulp_tol is not None and u <= ulp_tol: within = True
                if not within: beyond[r] += 1
        sd += cd; sa += ca_; sb += cb_
    den, nm = math.sqrt(max(sa, sb)), math.sqrt(sd)
    rel_l2 = 0.0 if nm == 0 else (math.inf if den == 0 else nm / den)
    for r, doc in enumerate(docs):
        g = {x["name"]: x for x in doc["tensors"]}[name]
        checks = [("diff_count", g["diff_count"], w["diff_count"]), ("beyond", g["beyond_tolerance"], beyond[r]),
                  ("max_ulp", g["max_ulp"], w["max_ulp"]), ("max_abs", num(g["max_abs"]), w["max_abs"]),
                  ("max_rel", num(g["max_rel"]), w["max_rel"]), ("rel_l2", num(g["rel_l2"]), rel_l2),
                  ("first", g["first_index"][0], w["first"]), ("count", g["count"], n)]
        checks += [(k, g[k], w[k]) for k in ("nan_a", "nan_b", "inf_a", "inf_b", "nan_vs_number", "nan_payload",
                                             "sign_changes", "max_ulp_same_sign")]
        for what, x, y in checks:
            if x != y: bad.append("run %d: %s %s: detcheck %r, oracle %r" % (r, name, what, x, y))
if bad:
    sys.exit("\n".join(bad))
PY
ok
done_ok

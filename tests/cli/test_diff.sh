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
                             "first_index", "rel_l2", "nan_a", "nan_b", "inf_a", "inf_b", "nan_vs_number",
                             "nan_payload"], list(t[0])
s = dict(dict(d)["summary"])
assert list(s)[:2] == ["tensors", "equal"] and list(s)[-3:] == ["first_differing_layer", "groups", "bytes_compared"], s
lines = [l for l in open("d.json") if '"status": ' in l]
assert len(lines) == len(t), lines
PY
ok
expect_grep '"tensors": 9, "equal": 2,' d.json
# a path that is not UTF-8 still gives a document JSON can read (U+FFFD for the stray byte)
cp a.safetensors "$(printf 'x\377y.safetensors')"
expect_exit 1 "$DETCHECK" diff --json "$(printf 'x\377y.safetensors')" b.safetensors
expect_eq "$(jget out.txt "d['a'] == 'x\\ufffdy.safetensors', d['summary']['differ']")" "True 7" not-utf8

done_ok

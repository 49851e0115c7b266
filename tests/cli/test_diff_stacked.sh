# CLI: detcheck diff on stacked layers (Megatron-Core torch_dist: every layer
# of a stack in one tensor, the layer its leading dimension, a name with
# "layers" followed by no number). Checkpoints written by Python's struct
# (independent of detcheck), with edits at known layers: which layer differs
# in the text (row, layer summary, first differing layer) and in the JSON
# (per-tensor "layers", summary.first_differing_layer), for F32 and BF16,
# across chunk boundaries, for every thread count, with a manifest.
. "$DCK_TOP/tests/cli/lib.sh"

# mk FILE SPEC: SPEC is JSON, a list of [name, dtype, shape, {flat: bits}];
# elements are 1.0 plus a small ramp (bits computed here), then the edits.
mk() {
python3 - "$1" "$2" <<'PY'
import json, struct, sys
path, spec = sys.argv[1], json.loads(sys.argv[2])
hdr, data, pos = {}, bytearray(), 0
for name, dt, shape, edits in spec:
    n = 1
    for d in shape: n *= d
    if dt == "F32":
        e = [0x3f800000 + (i % 1000) * 16 for i in range(n)]
        fmt = "<I"
    else:  # BF16
        e = [0x3f80 + (i % 100) for i in range(n)]
        fmt = "<H"
    for k, v in edits.items():
        e[int(k)] = v if v >= 0 else e[int(k)] - v  # negative: that many ULPs up
    b = struct.pack("<%d%s" % (n, fmt[1]), *e)
    hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [pos, pos + len(b)]}
    data += b
    pos += len(b)
h = json.dumps(hdr).encode()
open(path, "wb").write(struct.pack("<Q", len(h)) + h + bytes(data))
PY
}
# jq-free JSON checks: jget FILE PYTHON-EXPR (d: the document, t: tensors by name)
jget() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); t={x['name']:x for x in d['tensors']}; v=($2); print(v)" "$1"; }
expect_eq() { [ "$1" = "$2" ] || fail "got '$1', wanted '$2' ($3)"; ok; }

FC1=decoder.layers.mlp.linear_fc1.weight
FC2=decoder.layers.mlp.linear_fc2.weight
QKV=decoder.layers.self_attention.linear_qkv.weight
OPT=optimizer.state.exp_avg.decoder.layers.mlp.linear_fc1.weight
# base NAME-EDITS...: the common model, with edits per tensor (JSON objects)
base() {
    printf '[["%s","F32",[3,4,5],%s],["%s","F32",[3,5,4],%s],["%s","F32",[3,2,4],{}],' \
        "$FC1" "$1" "$FC2" "$2" "$QKV"
    printf '["%s","F32",[3,1,20],%s],["embedding.word_embeddings.weight","F32",[4,4],{}]]' "$OPT" "$3"
}

# 1. Only layer 1 of a [3,4,5] F32 tensor differs (2 and 1 ULP).
mk a.safetensors "$(base '{}' '{}' '{}')"
mk b.safetensors "$(base '{"27": -2, "33": -1}' '{}' '{}')"
expect_exit 1 "$DETCHECK" diff --color never a.safetensors b.safetensors
cp out.txt one.txt
expect_grep "^differ  $FC1  F32  *\[3,4,5\]  *2/60 " one.txt
expect_grep "^        differing layers (1 of 3): decoder.layers.1$" one.txt
expect_grep "^Layers: 1 of 3 differ; first differing layer: decoder.layers.1 ($FC1)$" one.txt
expect_grep "^  decoder.layers.1     1/4 tensors differ, max ULP 2$" one.txt
expect_no_grep "decoder.layers.0 " one.txt
expect_grep "^Result: different (5 tensors, 4 equal, 1 differ)$" one.txt
expect_exit 1 "$DETCHECK" diff --json a.safetensors b.safetensors
cp out.txt one.json
expect_eq "$(jget one.json "d['summary']['first_differing_layer']")" "decoder.layers.1" "first layer"
expect_eq "$(jget one.json "[(x['layer'], x['tensors'], x['differing'], x['max_ulp']) for x in d['layers']]")" \
    "[('decoder.layers.0', 4, 0, 0), ('decoder.layers.1', 4, 1, 2), ('decoder.layers.2', 4, 0, 0)]" "layers"
expect_eq "$(jget one.json "[(x['layer'], x['index'], x['status'], x['count'], x['diff_count'], x['max_ulp']) for x in t['$FC1']['layers']]")" \
    "[('decoder.layers.0', 0, 'equal', 20, 0, 0), ('decoder.layers.1', 1, 'differ', 20, 2, 2), ('decoder.layers.2', 2, 'equal', 20, 0, 0)]" "per-layer"
expect_eq "$(jget one.json "t['$FC1']['layer'], t['$FC1']['diff_count'], t['$FC1']['first_index']")" \
    "(None, 2, [1, 1, 2])" "stacked tensor"
# the tensor's rel_l2 is its layers' (only layer 1 differs: its numerator,
# the whole tensor's denominator)
expect_eq "$(jget one.json "t['$FC1']['layers'][1]['rel_l2'] > t['$FC1']['rel_l2'] > 0")" "True" "rel_l2"
# equal stacked tensors list their layers too, with statuses only
expect_eq "$(jget one.json "[x['status'] for x in t['$QKV']['layers']], 'diff_count' in t['$QKV']['layers'][0]")" \
    "(['equal', 'equal', 'equal'], False)" "equal stack"
expect_eq "$(jget one.json "'layers' in t['embedding.word_embeddings.weight']")" "False" "unstacked"
# the same bits for every thread count
for th in 1 3 8; do
    expect_exit 1 "$DETCHECK" diff --json -t $th a.safetensors b.safetensors
    cmp -s out.txt one.json || fail "JSON differs with $th threads"
    ok
done

# 2. Layer 0 of one tensor and layer 2 of another: model order picks layer 0;
#    the optimizer state of layer 2 groups with its weight.
mk c.safetensors "$(base '{"41": -3}' '{"2": -1}' '{"59": -5}')"
expect_exit 1 "$DETCHECK" diff --color never a.safetensors c.safetensors
cp out.txt two.txt
expect_grep "^Layers: 2 of 3 differ; first differing layer: decoder.layers.0 ($FC2)$" two.txt
expect_grep "^  decoder.layers.0     1/4 tensors differ, max ULP 1$" two.txt
expect_grep "^  decoder.layers.2     2/4 tensors differ, max ULP 5$" two.txt
expect_grep "^        differing layers (1 of 3): decoder.layers.2$" two.txt
expect_exit 1 "$DETCHECK" diff --json a.safetensors c.safetensors
cp out.txt two.json
expect_eq "$(jget two.json "d['summary']['first_differing_layer']")" "decoder.layers.0" "first layer 2"
expect_eq "$(jget two.json "[x['layer'] for x in d['layers'] if x['differing']]")" \
    "['decoder.layers.0', 'decoder.layers.2']" "differing layers"
expect_eq "$(jget two.json "[x['diff_count'] for x in t['$FC1']['layers']], [x['diff_count'] for x in t['$FC2']['layers']], [x['max_ulp'] for x in t['$OPT']['layers']]")" \
    "([0, 0, 1], [1, 0, 0], [0, 0, 5])" "per-layer counts"
# a tolerance settles each layer as it settles the tensor
expect_exit 1 "$DETCHECK" diff --json --ulp 3 a.safetensors c.safetensors
expect_eq "$(jget out.txt "[x['status'] for x in t['$FC1']['layers']], [x['status'] for x in t['$OPT']['layers']]")" \
    "(['equal', 'equal', 'within_tolerance'], ['equal', 'equal', 'differ'])" "tolerance"

# 3. BF16, and a tensor whose layers cross the 1 MiB chunks: F32 [3,100003]
#    (layer 2 starts at element 200006; the second chunk at 262144), edits in
#    layer 2 on both sides of the chunk boundary and one in layer 0.
big='["decoder.layers.big","F32",[3,100003],%s],["decoder.layers.mlp.bf16","BF16",[3,4,5],%s]'
mk d.safetensors "[$(printf "$big" '{}' '{}')]"
mk e.safetensors "[$(printf "$big" '{"5": -1, "200016": -4, "262149": -2}' '{"47": -3}')]"
expect_exit 1 "$DETCHECK" diff --color never d.safetensors e.safetensors
expect_grep "^Layers: 2 of 3 differ; first differing layer: decoder.layers.0 (decoder.layers.big)$" out.txt
expect_grep "^  decoder.layers.2     2/2 tensors differ, max ULP 4$" out.txt
expect_grep "^differ  decoder.layers.mlp.bf16  *BF16  *\[3,4,5\]  *1/60 " out.txt
expect_exit 1 "$DETCHECK" diff --json -t 1 d.safetensors e.safetensors
cp out.txt big1.json
expect_eq "$(jget big1.json "[(x['diff_count'], x['max_ulp']) for x in t['decoder.layers.big']['layers']], [(x['diff_count'], x['max_ulp']) for x in t['decoder.layers.mlp.bf16']['layers']]")" \
    "([(1, 1), (0, 0), (2, 4)], [(0, 0), (0, 0), (1, 3)])" "big and bf16"
expect_eq "$(jget big1.json "t['decoder.layers.big']['diff_count'], sum(x['count'] for x in t['decoder.layers.big']['layers'])")" \
    "(3, 300009)" "layers cover the tensor"
expect_exit 1 "$DETCHECK" diff --json -t 7 d.safetensors e.safetensors
cmp -s out.txt big1.json || fail "JSON across chunks differs with 7 threads"
ok

# 4. A stack with another layer count: every layer of it differs.
mk f.safetensors '[["decoder.layers.x","F32",[2,4],{}]]'
mk g.safetensors '[["decoder.layers.x","F32",[3,4],{}]]'
expect_exit 1 "$DETCHECK" diff --json f.safetensors g.safetensors
expect_eq "$(jget out.txt "[(x['layer'], x['status']) for x in t['decoder.layers.x']['layers']], d['summary']['first_differing_layer']")" \
    "([('decoder.layers.0', 'shape_mismatch'), ('decoder.layers.1', 'shape_mismatch'), ('decoder.layers.2', 'shape_mismatch')], 'decoder.layers.0')" "shape mismatch"

# 5. With a manifest only digests are compared: a digest covers the whole
#    stack, so no layer is named.
expect_exit 0 "$DETCHECK" hash -o a.yaml a.safetensors
expect_exit 1 "$DETCHECK" diff --json a.yaml b.safetensors
expect_eq "$(jget out.txt "d['summary']['first_differing_layer'], 'layers' in t['$FC1'], t['$FC1']['status']")" \
    "(None, False, 'differ')" "manifest"

# 6. Names that are no stack: a number after "layers" (the unstacked form)
#    keeps its layer; "layers" last is no stack either.
mk h.safetensors '[["decoder.layers.1.mlp.w","F32",[3,4],{}],["decoder.layers","F32",[3],{}]]'
mk i.safetensors '[["decoder.layers.1.mlp.w","F32",[3,4],{"5": -1}],["decoder.layers","F32",[3],{"0": -1}]]'
expect_exit 1 "$DETCHECK" diff --json h.safetensors i.safetensors
expect_eq "$(jget out.txt "t['decoder.layers.1.mlp.w']['layer'], 'layers' in t['decoder.layers.1.mlp.w'], 'layers' in t['decoder.layers'], d['summary']['first_differing_layer']")" \
    "('layers.1', False, False, 'layers.1')" "not stacks"

done_ok

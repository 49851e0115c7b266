# CLI: detcheck diff across layouts and kinds of input: unsharded vs detcheck
# sharded 2 ways (rows) vs 4 ways (columns), zstd-compressed, manifests
# (YAML and JSON) against checkpoints and each other (digests only), values.
. "$DCK_TOP/tests/cli/lib.sh"

# mk DIR WAYS AXIS EDIT: a [8, 12] F32 tensor "model.layers.4.w" (element
# i*12+j = i - j/4) and an unsharded BF16 "model.layers.9.b"; WAYS shards
# along AXIS (0 rows, 1 columns) in DIR/shardK.safetensors, or one file
# DIR.safetensors when WAYS is 1. EDIT 1 changes element [6, 7] of the F32
# tensor by one ULP.
mk() {
python3 - "$@" <<'PY'
import json, os, struct, sys
out, ways, axis, edit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
R, C = 8, 12
full = [[float(i) - j / 4 for j in range(C)] for i in range(R)]
def f32(rows):
    b = bytearray()
    for r in rows:
        for v in r:
            u = struct.unpack("<I", struct.pack("<f", v))[0]
            b += struct.pack("<I", u)
    return b
if edit:
    u = struct.unpack("<I", struct.pack("<f", full[6][7]))[0] + 1
    full[6][7] = struct.unpack("<f", struct.pack("<I", u))[0]
bf = struct.pack("<4H", 0x3f80, 0x4000, 0x4040, 0x4080)
def write(path, tensors, meta):
    hdr, data, pos = {}, bytearray(), 0
    for name, dt, shape, b in tensors:
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [pos, pos + len(b)]}
        data += b
        pos += len(b)
    if meta: hdr["__metadata__"] = meta
    h = json.dumps(hdr).encode()
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + bytes(data))
if ways == 1:
    write(out + ".safetensors", [("model.layers.4.w", "F32", [R, C], f32(full)),
                                 ("model.layers.9.b", "BF16", [4], bf)], None)
    sys.exit(0)
os.makedirs(out, exist_ok=True)
for k in range(ways):
    if axis == 0:
        n = R // ways
        rows = full[k * n:(k + 1) * n]; shape = [n, C]; off = [k * n, 0]
    else:
        n = C // ways
        rows = [r[k * n:(k + 1) * n] for r in full]; shape = [R, n]; off = [0, k * n]
    meta = {"detcheck.layout": "sharded-v1",
            "detcheck.slice.model.layers.4.w": json.dumps({"global_shape": [R, C], "offset": off})}
    t = [("model.layers.4.w", "F32", shape, f32(rows))]
    if k == 0: t.append(("model.layers.9.b", "BF16", [4], bf))
    write(f"{out}/shard{k}.safetensors", t, meta)
PY
}

mk flat 1 0 0
mk rows2 2 0 0
mk cols4 4 1 0
mk cols4e 4 1 1
mk flate 1 0 1

# the same logical tensors in three layouts: equal
expect_exit 0 "$DETCHECK" diff flat.safetensors rows2
expect_grep "Result: equal (2 tensors, 2 equal)" out.txt
expect_exit 0 "$DETCHECK" diff rows2 cols4
# one edit, seen through any layout at the same global index
expect_exit 1 "$DETCHECK" diff --json rows2 cols4e
python3 -c "
import json,sys; d=json.load(open('out.txt')); t=d['tensors'][0]
assert t['name']=='model.layers.4.w' and t['status']=='differ', t
assert t['diff_count']==1 and t['first_index']==[6,7] and t['max_ulp']==1, t
assert d['summary']['first_differing_layer']=='layers.4'
" || fail "sharded edit"; ok
expect_exit 1 "$DETCHECK" diff --json flate.safetensors cols4
python3 -c "
import json; t=json.load(open('out.txt'))['tensors'][0]
assert t['first_index']==[6,7] and t['max_ulp']==1, t
" || fail "flat edit"; ok

# zstd-compressed checkpoints read the same
if command -v zstd > /dev/null; then
    zstd -q -o flate.safetensors.zst flate.safetensors
    expect_exit 1 "$DETCHECK" diff flat.safetensors flate.safetensors.zst
    expect_grep "^differ  *model.layers.4.w  *F32  *\[8,12\]  *1/96 .* 1  *\[6,7\]$" out.txt
    expect_exit 0 "$DETCHECK" diff flate.safetensors flate.safetensors.zst
else
    skip_part "no zstd: compressed checkpoints are not diffed"
fi

# manifests: digests only, same verdicts; YAML and JSON
expect_exit 0 "$DETCHECK" hash -q -o flat.yaml flat.safetensors
expect_exit 0 "$DETCHECK" hash -q --json -o cols4e.json cols4e
expect_exit 0 "$DETCHECK" diff flat.yaml cols4
expect_grep "digests compared, no element statistics" out.txt
expect_grep "Result: equal" out.txt
expect_exit 1 "$DETCHECK" diff flat.yaml cols4e
expect_grep "^differ  *model.layers.4.w  *F32  *\[8,12\]  *[0-9a-f]\{32\}  *[0-9a-f]\{32\}$" out.txt
expect_exit 1 "$DETCHECK" diff flat.yaml cols4e.json
expect_exit 1 "$DETCHECK" diff cols4e flat.yaml
expect_exit 1 "$DETCHECK" diff --json flat.yaml cols4e.json
python3 -c "
import json; d=json.load(open('out.txt'))
assert d['mode']=='digests' and d['equal'] is False
t={x['name']:x for x in d['tensors']}
assert t['model.layers.4.w']['status']=='differ' and 'diff_count' not in t['model.layers.4.w']
assert t['model.layers.9.b']['status']=='equal'
assert t['model.layers.4.w']['digest_a'] != t['model.layers.4.w']['digest_b']
" || fail "manifest json"; ok
# tolerances cannot excuse a digest difference
expect_exit 1 "$DETCHECK" diff --ulp 5 flat.yaml cols4e
expect_grep "tolerances need element statistics" out.txt
# the digests diff computes for a differing tensor are those hash records
expect_exit 1 "$DETCHECK" diff --json flat.safetensors cols4e
da=$(python3 -c "import json; print(json.load(open('out.txt'))['tensors'][0]['digest_b'])")
expect_grep "$da" cols4e.json

# missing / extra / mismatched across layouts
python3 - <<'PY'
import json, struct
def write(path, tensors):
    hdr, data, pos = {}, bytearray(), 0
    for name, dt, shape, b in tensors:
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [pos, pos + len(b)]}
        data += b; pos += len(b)
    h = json.dumps(hdr).encode()
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + bytes(data))
write("other.safetensors", [("model.layers.4.w", "F32", [12, 8], bytes(384)),
                            ("model.layers.9.b", "F16", [4], bytes(8)),
                            ("model.layers.11.extra", "U8", [3], bytes(3))])
PY
expect_exit 1 "$DETCHECK" diff rows2 other.safetensors
expect_grep "^shape_mismatch  *model.layers.4.w  *F32  *\[8,12\]/\[12,8\]$" out.txt
expect_grep "^dtype_mismatch  *model.layers.9.b  *BF16/F16  *\[4\]$" out.txt
expect_grep "^missing_in_a  *model.layers.11.extra  *U8  *\[3\]$" out.txt
expect_exit 1 "$DETCHECK" diff --json other.safetensors rows2
python3 -c "
import json; d=json.load(open('out.txt')); t={x['name']:x for x in d['tensors']}
assert t['model.layers.11.extra']['status']=='missing_in_b'
assert t['model.layers.9.b']['dtype']=='F16' and t['model.layers.9.b']['dtype_b']=='BF16'
assert t['model.layers.4.w']['shape']==[12,8] and t['model.layers.4.w']['shape_b']==[8,12]
assert d['summary']['shape_mismatch']==1 and d['summary']['dtype_mismatch']==1
" || fail "mismatch json"; ok
# a sharded side with a missing shard is trouble, naming the directory
rm cols4/shard2.safetensors
expect_exit 2 "$DETCHECK" diff flat.safetensors cols4
expect_grep "cols4" err.txt

done_ok

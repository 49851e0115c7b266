# Sourced by tests/cli/test_distributed*.sh: writes ./ck, a checkpoint whose
# tensor sizes are prime to 128 (rank cuts and tensor ends fall inside
# segments), with a tensor sharded by columns over two files (detcheck's
# sharded layout) and, when zstd is installed, a zstd-compressed file.
python3 - <<'PY'
import json, struct, random
rnd = random.Random(6)
sizes = {"F32": 4, "BF16": 2, "U8": 1, "I64": 8, "F16": 2, "F64": 8}
def write(path, tensors, meta=None):
    hdr, data = {}, bytearray()
    if meta: hdr["__metadata__"] = meta
    for name, dt, shape, payload in tensors:
        n = sizes[dt]
        for d in shape: n *= d
        b = payload if payload is not None else bytes(rnd.getrandbits(8) for _ in range(n))
        assert len(b) == n
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + n]}
        data += b
    h = json.dumps(hdr).encode()
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + bytes(data))
import os
os.makedirs("ck", exist_ok=True)
# sizes prime to 128 so rank cuts and tensor ends fall inside segments
write("ck/a.safetensors", [("model.layers.0.w", "F32", [33, 17], None),
                           ("model.layers.0.b", "BF16", [77], None),
                           ("model.layers.1.w", "F32", [130, 3], None),
                           ("model.empty", "F32", [0], None),
                           ("optimizer.step", "I64", [], None),
                           ("model.layers.10.w", "U8", [1001], None)])
write("ck/b.safetensors", [("model.layers.2.w", "BF16", [64, 65], None),
                           ("model.layers.3.w", "F16", [5, 7, 11], None),
                           ("optimizer.state.big", "F64", [3001], None)])
# a [6, 10] F32 tensor split by columns over two files (detcheck sharded layout)
full = [bytes(rnd.getrandbits(8) for _ in range(40)) for _ in range(6)]
left = b"".join(r[:12] for r in full); right = b"".join(r[12:] for r in full)
def meta(off):
    return {"detcheck.layout": "sharded-v1",
            "detcheck.slice.model.sharded": json.dumps({"global_shape": [6, 10], "offset": [0, off]})}
write("ck/s0.safetensors", [("model.sharded", "F32", [6, 3], left)], meta(0))
write("ck/s1.safetensors", [("model.sharded", "F32", [6, 7], right)], meta(3))
PY
if command -v zstd > /dev/null; then
    python3 - <<'PY'
import json, struct, random
rnd = random.Random(7)
n = 4 * 999
h = json.dumps({"model.zstd.w": {"dtype": "F32", "shape": [999], "data_offsets": [0, n]}}).encode()
open("z.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + bytes(rnd.getrandbits(8) for _ in range(n)))
PY
    zstd -q z.safetensors -o ck/z.safetensors.zst && rm z.safetensors
else
    skip_part "no zstd: the checkpoint has no zstd-compressed file"
fi


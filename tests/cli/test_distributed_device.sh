# CLI: hash --device. Without a GPU (CI): cuda is exit 2 with a clear
# message, auto says it used the CPU and writes the CPU's manifest. With one
# (ci/gpu-check.sh): cuda writes the CPU's manifest, also with staging
# buffers smaller than the checkpoint (double buffering, tensors split
# across buffers). cpu is the default path. Needs no mpirun.
. "$DCK_TOP/tests/cli/lib.sh"
export SOURCE_DATE_EPOCH=1700000000

. "$DCK_TOP/tests/cli/distributed_ckpt.sh"
expect_exit 0 "$DETCHECK" hash -o single.yaml ck

if "$DETCHECK" hash --device cuda ck > cuda.yaml 2> cuda.err; then
    cmp single.yaml cuda.yaml || fail "--device cuda manifest differs"
    ok
    # 4 MiB staging buffers: a 12 MiB tensor streams through both, twice
    python3 - <<'PY'
import json, struct, random
rnd = random.Random(3)
n = 12 * 1024 * 1024 + 333
h = json.dumps({"model.big": {"dtype": "U8", "shape": [n], "data_offsets": [0, n]},
                "model.tail": {"dtype": "F32", "shape": [77], "data_offsets": [n, n + 308]}}).encode()
open("ck/big.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + rnd.randbytes(n + 308))
PY
    "$DETCHECK" hash -o single2.yaml ck
    DETCHECK_GPU_BUFFER_MIB=4 "$DETCHECK" hash --device cuda -o cuda2.yaml ck
    cmp single2.yaml cuda2.yaml || fail "--device cuda with 4 MiB buffers differs"
    ok
    expect_exit 0 "$DETCHECK" hash --device auto -o auto.yaml ck
    expect_grep "device auto: hashing on the GPU" err.txt
    cmp single2.yaml auto.yaml || fail "--device auto manifest differs"
    ok
else
    expect_exit 2 "$DETCHECK" hash --device cuda ck
    expect_grep "device cuda: no CUDA device" err.txt
    expect_exit 0 "$DETCHECK" hash --device auto -o auto.yaml ck
    expect_grep "device auto: hashing on the CPU" err.txt
    cmp single.yaml auto.yaml || fail "--device auto manifest differs"
    ok
    expect_exit 0 "$DETCHECK" hash -q --device auto -o auto-q.yaml ck
    expect_no_grep "device auto" err.txt
fi
expect_exit 0 "$DETCHECK" hash --device cpu -o cpu.yaml ck
cmp single.yaml cpu.yaml || fail "--device cpu differs"
ok
expect_exit 2 "$DETCHECK" hash --device gpu ck
expect_grep "device wants cpu, cuda or auto" err.txt
expect_exit 2 "$DETCHECK" hash --device ck
expect_exit 0 "$DETCHECK" hash --help
expect_grep "\-\-device" out.txt
done_ok

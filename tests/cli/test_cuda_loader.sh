# CLI: the CUDA runtime and NCCL are loaded only for a GPU path. The binary
# does not link them (ldd lists neither), so a CPU call never maps them;
# `hash --device cuda` with the runtime missing exits 2 with a message that
# names the library, and `--device auto` then hashes on the CPU, saying why.
# DETCHECK_CUDART_LIB points the loader at a name that does not exist. In a
# CUDA=0 build the messages say the build has no CUDA.
. "$DCK_TOP/tests/cli/lib.sh"
export SOURCE_DATE_EPOCH=1700000000

if command -v ldd > /dev/null; then
    ldd "$DETCHECK" > ldd.txt 2>&1 || true
    expect_grep "libc\.so" ldd.txt
    expect_no_grep "libcudart" ldd.txt
    expect_no_grep "libnccl" ldd.txt
    expect_no_grep "libcuda\.so" ldd.txt
else
    skip_part "no ldd here: the linked libraries are not checked"
fi

python3 - <<'PY'
import json, struct
h = json.dumps({"w": {"dtype": "F32", "shape": [300], "data_offsets": [0, 1200]}}).encode()
open("one.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + bytes(range(256)) * 4 + bytes(176))
PY
expect_exit 0 "$DETCHECK" hash -o cpu.yaml one.safetensors

missing=libcudart-dck-missing.so.0
export DETCHECK_CUDART_LIB=$missing
expect_exit 2 "$DETCHECK" hash --device cuda -o cuda.yaml one.safetensors
expect_grep "device cuda: no CUDA device" err.txt
[ ! -e cuda.yaml ] || fail "--device cuda wrote a manifest without a GPU"
ok
if grep -q "built without CUDA" err.txt; then
    skip_part "CUDA=0 build: no loader to point at a missing runtime"
else
    expect_grep "cannot load the CUDA runtime ($missing)" err.txt
    expect_grep "$missing: cannot open shared object file" err.txt
fi
expect_exit 0 "$DETCHECK" hash --device auto -o auto.yaml one.safetensors
expect_grep "device auto: hashing on the CPU (no CUDA device" err.txt
cmp cpu.yaml auto.yaml || fail "--device auto without a runtime: manifest differs from the CPU's"
ok
# a CPU call never asks for the runtime: the missing name changes nothing
expect_exit 0 "$DETCHECK" hash -o cpu2.yaml one.safetensors
expect_no_grep "CUDA" err.txt
cmp cpu.yaml cpu2.yaml || fail "plain hash differs"
ok
expect_exit 0 "$DETCHECK" verify -g cpu.yaml one.safetensors
unset DETCHECK_CUDART_LIB
done_ok

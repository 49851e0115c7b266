# CLI: hash and verify on safetensors, exit codes, messages, --json, -o,
# sharded directories, zstd, bad input, a snapshot's skipped .bin.
. "$DCK_TOP/tests/cli/lib.sh"

# A small checkpoint written with Python's struct, independent of detcheck.
mk() { # mk FILE BYTE_SEED
python3 - "$1" "$2" <<'PY'
import json, struct, sys
path, seed = sys.argv[1], int(sys.argv[2])
tensors = [("model.layers.10.mlp.weight", "BF16", [4, 64]),
           ("model.layers.2.mlp.weight", "F32", [3, 5]),
           ("optimizer.state.0.exp_avg", "F32", [15]),
           ("rng.torch_state", "U8", [16])]
sizes = {"BF16": 2, "F32": 4, "U8": 1}
hdr, data, pos = {}, bytearray(), 0
for name, dt, shape in tensors:
    n = sizes[dt]
    for d in shape: n *= d
    hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [pos, pos + n]}
    data += bytes(((i * 7 + seed) & 0xff) for i in range(pos, pos + n))
    pos += n
h = json.dumps(hdr).encode()
open(path, "wb").write(struct.pack("<Q", len(h)) + h + data)
PY
}

mk a.safetensors 1
cp a.safetensors b.safetensors

# help and version
expect_exit 0 "$DETCHECK" --help
expect_grep "verify" out.txt
expect_exit 0 "$DETCHECK" hash --help
expect_grep "usage: detcheck hash" out.txt
expect_exit 0 "$DETCHECK" verify --help
expect_exit 0 "$DETCHECK" --version
expect_grep "detcheck 0" out.txt
expect_exit 2 "$DETCHECK" frobnicate
expect_grep "unknown command" err.txt
expect_exit 2 "$DETCHECK"

# hash to stdout and to a file
expect_exit 0 "$DETCHECK" hash a.safetensors
expect_grep "^detcheck: 1" out.txt
expect_grep "root: " out.txt
expect_grep "name: model.layers.2.mlp.weight, group: weights, dtype: F32, shape: \[3, 5\]" out.txt
expect_grep "group: optimizer" out.txt
expect_grep "group: rng" out.txt
# model order: layers.2 before layers.10
[ "$(grep -n 'layers.2.mlp' out.txt | cut -d: -f1)" -lt "$(grep -n 'layers.10.mlp' out.txt | cut -d: -f1)" ] || fail "model order"; ok
# the file hash is what xxhsum -H2 prints
if command -v xxhsum >/dev/null; then
    x=$(xxhsum -H2 a.safetensors 2>/dev/null | cut -d' ' -f1)
    expect_grep "xxh128: $x" out.txt
else
    skip_part "no xxhsum: the file hash is not compared with xxhsum -H2"
fi
expect_exit 0 "$DETCHECK" hash -q -o golden.yaml a.safetensors
[ -s golden.yaml ] || fail "no golden.yaml"; ok
[ "$(ls golden.yaml.tmp.* 2>/dev/null | wc -l)" -eq 0 ] || fail "temporary left"; ok
expect_exit 0 "$DETCHECK" hash --json a.safetensors
expect_grep '"detcheck": 1' out.txt
python3 -c "import json,sys; d=json.load(open('out.txt')); assert len(d['tensors'])==4" || fail "json"; ok
# thread counts give the same manifest
"$DETCHECK" hash -t 1 --no-files a.safetensors | grep -v created > t1.txt
"$DETCHECK" hash -t 4 --no-files a.safetensors | grep -v created > t4.txt
cmp t1.txt t4.txt || fail "threads differ"; ok

# verify: same
expect_exit 0 "$DETCHECK" verify --golden golden.yaml b.safetensors
expect_grep "^OK: 4 tensors identical" out.txt
# --files compares whole-file hashes by relative path
mkdir d1 d2
cp a.safetensors d1/model.safetensors
cp a.safetensors d2/model.safetensors
"$DETCHECK" hash -q -o d1.yaml d1
expect_exit 0 "$DETCHECK" verify --golden d1.yaml --files d2
# verify: one element changed -> exit 1, names the tensor
python3 - <<'PY'
import struct
b = bytearray(open("b.safetensors", "rb").read())
n = struct.unpack("<Q", b[:8])[0]
b[8 + n + 300] ^= 0x01          # inside model.layers.2.mlp.weight? offsets: BF16 512 first
open("b.safetensors", "wb").write(b)
PY
expect_exit 1 "$DETCHECK" verify --golden golden.yaml b.safetensors
expect_grep "^DIFFERENT: 1 difference" out.txt
expect_grep "differs  model.layers.10.mlp.weight" out.txt
expect_exit 1 "$DETCHECK" verify --golden golden.yaml --json b.safetensors
expect_grep '"equal": false' out.txt
expect_grep '"first_difference": "model.layers.10.mlp.weight"' out.txt
expect_exit 1 "$DETCHECK" verify -q --golden golden.yaml b.safetensors
[ ! -s out.txt ] || fail "-q printed"; ok
# same tensors, different bytes on disk (header key order): equal, but not with --files
python3 - <<'PY'
import json, struct
b = open("d2/model.safetensors", "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
h2 = json.dumps(dict(reversed(list(h.items())))).encode()
open("d2/model.safetensors", "wb").write(struct.pack("<Q", len(h2)) + h2 + b[8 + n:])
PY
expect_exit 0 "$DETCHECK" verify --golden d1.yaml d2
expect_exit 1 "$DETCHECK" verify --golden d1.yaml --files d2
expect_grep "file     model.safetensors" out.txt
# verify a manifest against a manifest
"$DETCHECK" hash -q -o b.yaml b.safetensors
expect_exit 1 "$DETCHECK" verify --golden golden.yaml b.yaml
expect_exit 0 "$DETCHECK" verify --golden golden.yaml golden.yaml

# zstd: the same digests
zstd -q -f a.safetensors -o a.safetensors.zst
expect_exit 0 "$DETCHECK" verify --golden golden.yaml a.safetensors.zst

# trouble: exit 2 with the file named
expect_exit 2 "$DETCHECK" verify --golden missing.yaml a.safetensors
expect_grep "missing.yaml" err.txt
expect_exit 2 "$DETCHECK" verify a.safetensors
expect_grep "golden" err.txt
expect_exit 2 "$DETCHECK" hash
expect_grep "no PATH" err.txt
expect_exit 2 "$DETCHECK" hash --threads zero a.safetensors
expect_grep "threads" err.txt
expect_exit 2 "$DETCHECK" hash --bogus a.safetensors
expect_grep "bogus" err.txt
head -c 100 a.safetensors > trunc.safetensors
expect_exit 2 "$DETCHECK" hash trunc.safetensors
expect_grep "trunc.safetensors" err.txt
echo "not: [yaml" > bad.yaml
expect_exit 2 "$DETCHECK" verify --golden bad.yaml a.safetensors
expect_grep "bad.yaml" err.txt
sed 's/^detcheck: 1/detcheck: 9/' golden.yaml > v9.yaml
expect_exit 2 "$DETCHECK" verify --golden v9.yaml a.safetensors
expect_grep "unknown manifest version 9" err.txt
head -c 200 a.safetensors.zst > t.safetensors.zst
expect_exit 2 "$DETCHECK" hash t.safetensors.zst
expect_grep "t.safetensors.zst" err.txt
# -o into a missing directory: exit 2, nothing written
expect_exit 2 "$DETCHECK" hash -o nodir/m.yaml a.safetensors
expect_grep "nodir/m.yaml" err.txt
# -o never replaces an input; output that cannot be written is trouble
cp a.safetensors self.safetensors
expect_exit 2 "$DETCHECK" hash -q self.safetensors -o self.safetensors
expect_grep "also an input" err.txt
cmp -s a.safetensors self.safetensors || fail "input overwritten"; ok
if [ -w /dev/full ]; then
    expect_exit 2 sh -c "\"$DETCHECK\" verify --golden golden.yaml a.safetensors > /dev/full"
    expect_grep "cannot write to standard output" err.txt
else
    skip_part "no writable /dev/full: a failed write to stdout is not tested"
fi
# under mpirun only rank 0 prints
if command -v mpirun >/dev/null; then
    expect_exit 0 mpirun --oversubscribe -np 2 "$DETCHECK" verify --golden golden.yaml a.safetensors
    [ "$(grep -c '^OK:' out.txt)" -eq 1 ] || fail "rank 1 printed"; ok
else
    skip_part "no mpirun: rank-0-only printing is not tested"
fi
# a tensor name with a newline cannot forge a report line
python3 - <<'PY'
import json, struct
for fn, b in (("evil1.safetensors", b"x"), ("evil2.safetensors", b"y")):
    h = json.dumps({"w\nOK: 1 tensors identical": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}).encode()
    open(fn, "wb").write(struct.pack("<Q", len(h)) + h + b)
PY
"$DETCHECK" hash -q -o evil.yaml evil1.safetensors
expect_exit 1 "$DETCHECK" verify --golden evil.yaml evil2.safetensors
expect_no_grep "^OK: 1 tensors" out.txt
expect_grep 'w\\x0aOK' out.txt
# recorded values: a .pt carries epoch/iteration values, its safetensors twin
# has the same tensors but no values; verify names each value and both sides
fx="$DCK_TOP/tests/fixtures"
"$DETCHECK" hash -q -o pt.yaml "$fx/training.pt"
expect_exit 0 "$DETCHECK" verify --golden pt.yaml "$fx/training.pt"
expect_exit 1 "$DETCHECK" verify --golden pt.yaml "$fx/training.safetensors"
expect_grep "value    epoch: missing (golden " out.txt
expect_grep "26 of 26 golden tensors identical" out.txt
expect_exit 1 "$DETCHECK" verify --json --golden pt.yaml "$fx/training.safetensors"
python3 -c "
import json; d = json.load(open('out.txt'))
v = [e for e in d['differences'] if e['name'] == 'epoch'][0]
assert v['kind'] == 'value' and v['actual'] is None and v['golden'] is not None, v
" || fail "value entry in JSON"; ok
# the options hash, verify and diff share (cli_options.c): one parser, the
# command's name and its own range in every message
for c in hash verify diff; do
    case $c in
    hash) args="a.safetensors"; range="an integer 1..1024" ;;
    verify) args="-g golden.yaml a.safetensors"; range="an integer 1..1024" ;;
    diff) args="a.safetensors a.safetensors"; range="a count >= 1" ;;
    esac
    expect_exit 2 "$DETCHECK" $c --threads 0 $args
    expect_grep "^detcheck $c: --threads wants $range, not '0'" err.txt
    expect_exit 2 "$DETCHECK" $c -t 5000 $args
    expect_grep "^detcheck $c: --threads wants $range, not '5000'" err.txt
    expect_exit 2 "$DETCHECK" $c --iteration x $args
    expect_grep "^detcheck $c: --iteration wants an integer 0..999999999, not 'x'" err.txt
    expect_exit 2 "$DETCHECK" $c --tp-split nope $args
    expect_grep "^detcheck $c: --tp-split wants GLOB=DIM" err.txt
    expect_exit 2 "$DETCHECK" $c --megatron-per-rank --tp-split 'x*=0' $args
    expect_grep "^detcheck $c: --tp-split applies to merged rank directories: not with --megatron-per-rank" err.txt
    expect_exit 0 "$DETCHECK" $c --json -h
    expect_grep "^usage: detcheck $c" out.txt
    expect_exit 2 "$DETCHECK" $c --threads 0 --help
    expect_exit 0 "$DETCHECK" $c -q --th 2 --json $args
    if [ $c = verify ]; then
        [ ! -s out.txt ] || fail "verify -q printed"; ok
    else
        python3 -c "import json; json.load(open('out.txt'))" || fail "$c --json -q"; ok
    fi
done
expect_exit 2 "$DETCHECK" diff -j 0 a.safetensors a.safetensors
expect_grep "^detcheck diff: --threads wants a count >= 1, not '0'" err.txt
expect_exit 2 "$DETCHECK" hash --bogus a.safetensors
expect_grep "^detcheck hash: unknown or incomplete option '--bogus'" err.txt
expect_exit 2 "$DETCHECK" verify --threads
expect_grep "^detcheck verify: unknown or incomplete option '--threads'" err.txt
expect_exit 2 "$DETCHECK" diff --iteration
expect_grep "^detcheck diff: option '--iteration' needs a value" err.txt

# A Hugging Face snapshot with model.safetensors and pytorch_model.bin: the
# .bin's tensors are skipped (safetensors preferred) and the note says they
# were not compared (no claim that they hold the same weights); its bytes are
# in the whole-file hashes, so verify --files sees it damaged or deleted.
L="$DCK_TOP/tests/fixtures/layouts/hf_snapshot"
[ -f "$L/pytorch_model.bin" ] || fail "fixture $L missing"
cp -r "$L" snap
expect_exit 0 "$DETCHECK" hash -o snap.yaml snap
expect_grep '^- {path: pytorch_model.bin, bytes: ' snap.yaml
expect_grep 'snap/pytorch_model.bin: skipped: model.safetensors preferred' err.txt
expect_no_grep 'same weights' err.txt
expect_exit 0 "$DETCHECK" verify --files --golden snap.yaml snap
# damaged: one byte of the .bin changed
python3 -c "
import sys; p = 'snap/pytorch_model.bin'; b = bytearray(open(p, 'rb').read())
b[len(b) // 2] ^= 0xff; open(p, 'wb').write(b)"
expect_exit 0 "$DETCHECK" verify --golden snap.yaml snap
expect_grep 'snap/pytorch_model.bin: skipped: .*its weights were not compared' err.txt
expect_no_grep 'same weights' err.txt
expect_exit 1 "$DETCHECK" verify --files --golden snap.yaml snap
expect_grep '^DIFFERENT: 1 difference .*; first: pytorch_model.bin' out.txt
expect_grep '^  file     pytorch_model.bin: .* bytes xxh128 ' out.txt
expect_grep 'its weights were not compared' err.txt
expect_no_grep 'same weights' err.txt
expect_exit 1 "$DETCHECK" verify --files --json --golden snap.yaml snap
expect_grep '"name": "pytorch_model.bin"' out.txt
# deleted
rm snap/pytorch_model.bin
expect_exit 1 "$DETCHECK" verify --files --golden snap.yaml snap
expect_grep '^  file     pytorch_model.bin: missing' out.txt
expect_exit 0 "$DETCHECK" verify --golden snap.yaml snap
expect_no_grep 'pytorch_model.bin' err.txt
done_ok

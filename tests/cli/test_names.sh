# CLI: names that are not UTF-8 (issue 11). A tensor name, a value name or
# a value text that is not valid UTF-8 used to make `hash` spin forever in
# libyaml's emitter, or with --json write an entry without its name (exit
# 0). The rule (detcheck-formats(7), "Names"): refused where the name enters
# the checkpoint, exit 2, the message naming the file and showing the name
# escaped. Deeply nested manifests stop at a fixed depth, at once. Every
# command runs under a timeout, so a hang fails the test instead of
# stalling it. Inputs are written by hand here (python3, no numpy/torch).
. "$DCK_TOP/tests/cli/lib.sh"
command -v python3 > /dev/null || skip "python3 absent"
command -v timeout > /dev/null || skip "timeout absent"

python3 - <<'EOF'
import json, struct, zipfile

def npy(shape=(2,)):
    h = "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }" % (str(shape),)
    h = h + ' ' * (63 - (10 + len(h)) % 64) + '\n'
    return b'\x93NUMPY\x01\x00' + struct.pack('<H', len(h)) + h.encode() + b'\0' * 8

# .npz whose member name holds the byte 0xff: written as 'abX.npy', the X
# patched (a zip's CRC covers the data, not the name)
with zipfile.ZipFile('bad.npz', 'w') as z:
    z.writestr('good.npy', npy())
    z.writestr('abX.npy', npy())
b = open('bad.npz', 'rb').read().replace(b'abX.npy', b'ab\xff.npy')
open('bad.npz', 'wb').write(b)

# safetensors: a key with a \u escape of a lone surrogate
def st(path, header_text):
    h = header_text.encode('latin-1') if isinstance(header_text, str) else header_text
    h += b' ' * (-len(h) % 8)
    open(path, 'wb').write(struct.pack('<Q', len(h)) + h + b'\0' * 8)
st('surrogate.safetensors', '{"a\\ud800":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}')
st('rawbyte.safetensors', b'{"a\xff":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}')

# .pt: a dict key (a tensor's name, a value's name) as BINUNICODE of raw
# bytes (the values of a pickle are numbers: their texts are ASCII)
def glob(mod, name): return b'c' + mod.encode() + b'\n' + name.encode() + b'\n'
def X(b): return b'X' + struct.pack('<I', len(b)) + b
def i(n): return b'J' + struct.pack('<i', n)
def tup(*items): return b'(' + b''.join(items) + b't'
def storage(key, numel):
    return tup(X(b'storage'), glob('torch', 'FloatStorage'), X(key.encode()), X(b'cpu'), i(numel)) + b'Q'
def tensor(key):
    return glob('torch._utils', '_rebuild_tensor_v2') + tup(storage(key, 2), i(0), tup(i(2)), tup(i(1)),
                                                            b'\x89', glob('collections', 'OrderedDict') + b')R') + b'R'
def save(path, items):
    with zipfile.ZipFile(path, 'w') as z:
        z.writestr('archive/data.pkl', b'\x80\x02}(' + b''.join(k + v for k, v in items) + b'u.')
        z.writestr('archive/byteorder', 'little')
        z.writestr('archive/data/0', b'\0' * 8)
        z.writestr('archive/version', '3\n')
save('key.pt', [(X(b'w\xff'), tensor('0'))])
save('valname.pt', [(X(b'w'), tensor('0')), (X(b'step\xc3'), i(1))])
save('good.pt', [(X(b'w\xc3\xa9'), tensor('0')), (X(b'\xe2\x82\xac'), i(1))])

# manifests nested deeper than any manifest: 100,000 levels (libyaml took
# minutes on this; it must stop at once), as sequences, maps and JSON
n = 100000
open('deep_seq.yaml', 'w').write('detcheck: 1\nx: ' + '[' * n + ']' * n + '\n')
open('deep_map.yaml', 'w').write('detcheck: 1\nx: ' + '{a: ' * n + '1' + '}' * n + '\n')
open('deep_block.yaml', 'w').write('detcheck: 1\nx:\n' + ''.join(' ' * (k + 1) + 'a:\n' for k in range(3000)))
open('deep.json', 'w').write('{"detcheck": 1, "x": ' + '[' * n + ']' * n + '}\n')
EOF

T="timeout 20"
# the rule, for every place a name comes from (the safetensors header
# parser refuses such a key itself, as a JSON error)
for f in bad.npz surrogate.safetensors rawbyte.safetensors key.pt valname.pt; do
    for json in "" --json; do
        expect_exit 2 $T "$DETCHECK" hash -q $json "$f" -o "out$json.m"
        expect_grep "$f" err.txt
        expect_grep "not valid UTF-8\|invalid UTF-8\|surrogate" err.txt
        [ ! -e "out$json.m" ] || fail "$f: a manifest was written"
    done
done
expect_exit 2 $T "$DETCHECK" hash -q bad.npz -o out.yaml
expect_grep "bad.npz: tensor name 'ab\\\\xff.*' is not valid UTF-8" err.txt
expect_exit 2 $T "$DETCHECK" hash -q key.pt -o out.yaml
expect_grep "tensor name 'w\\\\xff' is not valid UTF-8" err.txt
expect_exit 2 $T "$DETCHECK" hash -q valname.pt -o out.yaml
expect_grep "value name 'step\\\\xc3' is not valid UTF-8" err.txt
# to stdout too, and through verify and diff: the same refusal
expect_exit 2 $T "$DETCHECK" hash -q --json key.pt
expect_grep "not valid UTF-8" err.txt
expect_exit 2 $T "$DETCHECK" diff key.pt key.pt
expect_grep "not valid UTF-8" err.txt

# names that are UTF-8 (not ASCII) are written as before, in both formats
expect_exit 0 $T "$DETCHECK" hash -q good.pt -o good.yaml
expect_grep "name: wé" good.yaml
expect_grep '{name: €, value: "1"}' good.yaml
expect_exit 0 $T "$DETCHECK" verify good.pt --golden good.yaml
expect_exit 0 $T "$DETCHECK" hash -q --json good.pt -o good.json
expect_grep '"name": "wé"' good.json
expect_exit 0 $T "$DETCHECK" verify good.pt --golden good.json

# nesting: stopped at the limit, named, at once
for f in deep_seq.yaml deep_map.yaml deep_block.yaml deep.json; do
    expect_exit 2 timeout 10 "$DETCHECK" verify good.pt --golden "$f"
    expect_grep "$f: manifest nested deeper than 8 levels" err.txt
done
done_ok

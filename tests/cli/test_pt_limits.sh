# CLI: PyTorch files that used to pass silently or cost without bound
# (detcheck-formats(7), FORMATS and LIMITS): quantized tensors are read
# (data, scale, zero point, per channel), a
# storage no known rebuild function reads is an error naming it, a list
# shared by thousands of references stops at the value limit, and a .pt.zst
# or deflated member that decodes far beyond its size stops at the decoded
# limit (DETCHECK_MAX_DECODED). The files are pickles written by hand here
# (no PyTorch needed); test_pt_quantized_torch.sh adds files torch wrote.
. "$DCK_TOP/tests/cli/lib.sh"
FX="$DCK_TOP/tests/fixtures"

python3 - <<'EOF'
import struct, zipfile

def glob(mod, name): return b'c' + mod.encode() + b'\n' + name.encode() + b'\n'
def s(x): b = x.encode(); return b'X' + struct.pack('<I', len(b)) + b
def i(n): return b'J' + struct.pack('<i', n)
def f(x): return b'G' + struct.pack('>d', x)
def tup(*items): return b'(' + b''.join(items) + b't'
def storage(stype, key, numel):
    return tup(s('storage'), glob('torch', stype), s(key), s('cpu'), i(numel)) + b'Q'
def hooks(): return glob('collections', 'OrderedDict') + b')R'
def tensor(st, size, stride):
    return glob('torch._utils', '_rebuild_tensor_v2') + tup(st, i(0), tup(*map(i, size)), tup(*map(i, stride)),
                                                            b'\x89', hooks()) + b'R'
def qtensor(st, size, stride, qparams):
    return glob('torch._utils', '_rebuild_qtensor') + tup(st, i(0), tup(*map(i, size)), tup(*map(i, stride)),
                                                          qparams, b'\x89', hooks()) + b'R'
def qs(name): return glob('torch', name)
def save(path, root, storages, method=zipfile.ZIP_STORED):
    with zipfile.ZipFile(path, 'w', method) as z:
        z.writestr('archive/data.pkl', b'\x80\x02' + root + b'.')
        z.writestr('archive/byteorder', 'little')
        for key, data in storages.items():
            z.writestr('archive/data/' + key, data)
        z.writestr('archive/version', '3\n')
def sd(*items): return b'}(' + b''.join(s(k) + v for k, v in items) + b'u'

q8 = bytes([1, 2, 3, 250, 5, 6])
# per tensor: qint8 data 2x3, scale 0.5, zero point 3
def per_tensor(path, data, scale=0.5, zp=3):
    save(path, sd(('w', qtensor(storage('QInt8Storage', '0', 6), [2, 3], [3, 1],
                                tup(qs('per_tensor_affine'), f(scale), i(zp)))),
                  ('b', tensor(storage('FloatStorage', '1', 1), [1], [1]))),
         {'0': data, '1': struct.pack('<f', 1.0)})
per_tensor('q1.pt', q8)
per_tensor('q2.pt', q8[:3] + bytes([251]) + q8[4:])   # one stored integer differs
per_tensor('q3.pt', q8, scale=0.25)                    # only the scale differs
per_tensor('q4.pt', q8, zp=4)                          # only the zero point differs
# per channel: quint8 2x3, axis 0, scales float64 [2], zero points int64 [2]
def per_channel(path, scales, scheme='per_channel_affine'):
    save(path, sd(('w', qtensor(storage('QUInt8Storage', '0', 6), [2, 3], [3, 1],
                                tup(qs(scheme), tensor(storage('DoubleStorage', '1', 2), [2], [1]),
                                    tensor(storage('LongStorage', '2', 2), [2], [1]), i(0))))),
         {'0': q8, '1': struct.pack('<2d', *scales), '2': struct.pack('<2q', 7, 9)})
per_channel('c1.pt', (0.5, 0.125))
per_channel('c2.pt', (0.5, 0.25))
per_channel('c3.pt', (0.5, 0.125), 'per_channel_affine_float_qparams')
# qint32 per tensor, and a scheme detcheck does not read
save('q32.pt', sd(('w', qtensor(storage('QInt32Storage', '0', 2), [2], [1],
                                tup(qs('per_tensor_affine'), f(1.0), i(0))))),
     {'0': struct.pack('<2i', -5, 70000)})
save('qsym.pt', sd(('w', qtensor(storage('QInt8Storage', '0', 2), [2], [1],
                                 tup(qs('per_tensor_symmetric'), f(1.0), i(0))))), {'0': b'\x01\x02'})
# a storage handed to a rebuild function detcheck does not know
save('sparse.pt', sd(('w', glob('torch._utils', '_rebuild_sparse_tensor') +
                      tup(storage('FloatStorage', '0', 2), i(0)) + b'R')), {'0': b'\0' * 8})
# a storage pickled by itself
save('stray.pt', sd(('s', storage('FloatStorage', '0', 2))), {'0': b'\0' * 8})
# a list of 3000 ints referenced 5000 times through the memo: 5 MB of pickle
# pieces, 90 MB of value text
lst = b']q\x00(' + b''.join(b'M' + struct.pack('<H', k) for k in range(3000)) + b'e'
save('amplify.pt', b'}(' + s('pre') + lst + s('l') + b'](' + b'h\x00' * 5000 + b'eu', {})
# the same list referenced 3 times: well within the limit
save('shared3.pt', b'}(' + s('pre') + lst + s('l') + b'](' + b'h\x00' * 3 + b'eu', {})
# a deflated data member of 4 MB of zeros
save('deflated.pt', sd(('w', tensor(storage('FloatStorage', '0', 1 << 20), [1 << 20], [1]))),
     {'0': b'\0' * (4 << 20)}, zipfile.ZIP_DEFLATED)

# zstd frames written by hand: the head of a zip file in a raw block, then
# RLE blocks of 128 KiB of zeros (4 bytes each)
def zst(path, rle_blocks, declare):
    head = open('q1.pt', 'rb').read()[:64]
    total = len(head) + rle_blocks * (128 << 10)
    fhd = 0xc0 if declare else 0x00     # 8-byte content size, or none
    out = b'\x28\xb5\x2f\xfd' + bytes([fhd, 0x70])   # window 2^(10+14)
    if declare: out += struct.pack('<Q', total)
    out += struct.pack('<I', 0 | (0 << 1) | (len(head) << 3))[:3] + head   # raw block
    for k in range(rle_blocks):
        last = 1 if k == rle_blocks - 1 else 0
        out += struct.pack('<I', last | (1 << 1) | ((128 << 10) << 3))[:3] + b'\0'
    open(path, 'wb').write(out)
zst('bomb.pt.zst', 16384, True)        # 64 KB that decodes to 2 GiB
zst('bomb_nosize.pt.zst', 80, False)   # 10 MB, no declared size
EOF

# quantized tensors: the stored integers are a tensor of the storage's dtype
"$DETCHECK" hash -q q1.pt -o q1.yaml || fail "hash q1.pt"
expect_grep 'name: w, group: weights, dtype: I8, shape: \[2, 3\]' q1.yaml
expect_grep '{name: w.qscheme, value: "per_tensor_affine' q1.yaml
expect_grep '{name: w.scale, value: "0.5' q1.yaml
expect_grep '{name: w.zero_point, value: "3' q1.yaml
# data, scale or zero point differing: verify and diff see it (they said OK)
for other in q2 q3 q4; do
    expect_exit 1 "$DETCHECK" verify "$other.pt" --golden q1.yaml
    expect_exit 1 "$DETCHECK" diff q1.pt "$other.pt"
done
expect_exit 0 "$DETCHECK" verify q1.pt --golden q1.yaml
# per channel: scales and zero points are tensors, the axis a value
"$DETCHECK" hash -q c1.pt -o c1.yaml || fail "hash c1.pt"
expect_grep 'name: w, group: weights, dtype: U8, shape: \[2, 3\]' c1.yaml
expect_grep 'name: w.scale, group: weights, dtype: F64, shape: \[2\]' c1.yaml
expect_grep 'name: w.zero_point, group: weights, dtype: I64, shape: \[2\]' c1.yaml
expect_grep '{name: w.axis, value: "0' c1.yaml
expect_exit 1 "$DETCHECK" diff c1.pt c2.pt
expect_grep 'w.scale' out.txt
expect_exit 1 "$DETCHECK" diff c1.pt c3.pt
"$DETCHECK" hash -q q32.pt -o q32.yaml || fail "hash q32.pt"
expect_grep 'name: w, group: weights, dtype: I32, shape: \[2\]' q32.yaml
expect_exit 2 "$DETCHECK" hash qsym.pt
expect_grep 'qsym.pt.*qscheme per_tensor_symmetric' err.txt

# storages that no known rebuild function reads: exit 2 naming them
expect_exit 2 "$DETCHECK" hash sparse.pt
expect_grep 'sparse.pt: storage 0 (FloatStorage) is read by torch._utils._rebuild_sparse_tensor' err.txt
expect_exit 2 "$DETCHECK" diff sparse.pt sparse.pt
expect_exit 2 "$DETCHECK" hash stray.pt
expect_grep 'stray.pt: storage 0 (FloatStorage) is not read by any tensor' err.txt

# a list shared by 5000 references: stops at the value limit, in little time
expect_exit 2 "$DETCHECK" hash -q amplify.pt
expect_grep 'amplify.pt.*values take more than 64 MiB' err.txt
"$DETCHECK" hash -q shared3.pt -o shared3.yaml || fail "hash shared3.pt"
expect_grep '{name: l.2, value: "\[0, 1, 2' shared3.yaml

# decoded bytes: a 64 KB .pt.zst that decodes to 2 GiB is refused before any
# temporary file is written; DETCHECK_MAX_DECODED lowers or raises the limit
mkdir tmp
expect_exit 2 env TMPDIR="$PWD/tmp" "$DETCHECK" hash bomb.pt.zst
expect_grep 'bomb.pt.zst: decompresses to more than 1073741824 bytes' err.txt
expect_grep 'DETCHECK_MAX_DECODED' err.txt
expect_exit 2 env DETCHECK_MAX_DECODED=1M "$DETCHECK" hash bomb_nosize.pt.zst
expect_grep 'bomb_nosize.pt.zst: decompresses to more than 1048576 bytes' err.txt
zstd -q "$FX/views.pt" -o views.pt.zst
expect_exit 2 env DETCHECK_MAX_DECODED=100 "$DETCHECK" hash views.pt.zst
expect_grep 'views.pt.zst: decompresses to more than 100 bytes' err.txt
expect_exit 0 env DETCHECK_MAX_DECODED=1G "$DETCHECK" hash -q views.pt.zst
expect_exit 2 env DETCHECK_MAX_DECODED=lots "$DETCHECK" hash views.pt.zst
expect_grep 'DETCHECK_MAX_DECODED=lots is not a size' err.txt
# inflated members count too
expect_exit 0 "$DETCHECK" hash -q deflated.pt
expect_exit 2 env DETCHECK_MAX_DECODED=1M "$DETCHECK" hash deflated.pt
expect_grep 'deflated.pt: has inflated members and views of more than 1048576 bytes' err.txt
done_ok

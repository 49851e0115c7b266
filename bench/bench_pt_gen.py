#!/usr/bin/env python3
"""Writes the same tensors as a torch.save .pt (zip, pickle protocol 2, 64-byte
aligned stored records, as PyTorch writes them) and as a .safetensors file,
with the Python standard library only: no torch needed at bench time.

    bench_pt_gen.py OUTDIR MIB
"""
import json
import os
import struct
import sys
import zipfile

out, mib = sys.argv[1], int(sys.argv[2])
total = mib << 20
# a transformer-like mix: big matrices and small vectors, F32 and BF16
layers = []
i = 0
while sum(n for _, _, n in layers) < total:
    for kind, dt, shape in (("attn.qkv.weight", "BF16", (3072, 1024)), ("mlp.fc1.weight", "F32", (4096, 1024)),
                            ("mlp.fc2.weight", "BF16", (1024, 4096)), ("norm.weight", "F32", (1024,))):
        n = (2 if dt == "BF16" else 4)
        for d in shape:
            n *= d
        layers.append(("layers.%d.%s" % (i, kind), (dt, shape), n))
    i += 1
block = os.urandom(1 << 20)


def data_of(n, salt):
    reps = n // len(block) + 1
    b = (block[salt % 997:] + block[:salt % 997]) * reps
    return b[:n]


def pickle_v2(entries):
    """The data.pkl torch.save writes for a dict of tensors (protocol 2)."""
    p = bytearray(b"\x80\x02}q\x00(")
    for key, (name, (dt, shape), n) in enumerate(entries):
        nb = name.encode()
        es = 2 if dt == "BF16" else 4
        st = b"BFloat16Storage" if dt == "BF16" else b"FloatStorage"
        p += b"X" + struct.pack("<I", len(nb)) + nb
        p += b"ctorch._utils\n_rebuild_tensor_v2\n(("
        p += b"X\x07\x00\x00\x00storage" + b"ctorch\n" + st + b"\n"
        k = str(key).encode()
        p += b"X" + struct.pack("<I", len(k)) + k + b"X\x03\x00\x00\x00cpu" + b"J" + struct.pack("<i", n // es)
        p += b"tQK\x00("
        for d in shape:
            p += b"J" + struct.pack("<i", d)
        p += b"t("
        stride = 1
        strides = []
        for d in reversed(shape):
            strides.append(stride)
            stride *= d
        for s in reversed(strides):
            p += b"J" + struct.pack("<i", s)
        p += b"t\x89ccollections\nOrderedDict\n)RtR"
    p += b"u."
    return bytes(p)


def aligned_info(z, name):
    """A stored entry whose data starts on a 64-byte boundary (extra field pad)."""
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED
    off = z.fp.tell() + 30 + len(name.encode())
    pad = (-(off + 4)) % 64
    info.extra = struct.pack("<HH", 0x1234, pad) + b"\0" * pad
    return info


with zipfile.ZipFile(os.path.join(out, "big.pt"), "w", zipfile.ZIP_STORED, allowZip64=True) as z:
    z.writestr(aligned_info(z, "archive/data.pkl"), pickle_v2(layers))
    z.writestr(aligned_info(z, "archive/byteorder"), b"little")
    for key, (_, _, n) in enumerate(layers):
        with z.open(aligned_info(z, "archive/data/%d" % key), "w", force_zip64=True) as f:
            f.write(data_of(n, key))
    z.writestr(aligned_info(z, "archive/version"), b"3\n")

hdr, pos = {}, 0
for name, (dt, shape), n in layers:
    hdr[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [pos, pos + n]}
    pos += n
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
with open(os.path.join(out, "big.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    for key, (_, _, n) in enumerate(layers):
        f.write(data_of(n, key))
print(len(layers), "tensors,", pos >> 20, "MiB")

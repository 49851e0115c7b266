#!/usr/bin/env python3
"""Peer of `detcheck diff` in bench_diff.sh: what a user would write with
NumPy. Reads two safetensors files of F32 tensors (np.memmap of each
tensor's bytes, in chunks so memory stays bounded) and prints the count of
differing elements and the largest absolute difference:

    numpy_diff.py A B   ->   "DIFFERING TOTAL MAX_ABS"
"""
import json
import struct
import sys

import numpy as np

CHUNK = 1 << 20  # elements: 4 MiB per side, cache-sized


def tensors(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        hdr = json.loads(f.read(n))
    hdr.pop("__metadata__", None)
    return 8 + n, hdr


def main():
    a_path, b_path = sys.argv[1], sys.argv[2]
    a_base, a_hdr = tensors(a_path)
    b_base, b_hdr = tensors(b_path)
    count = total = 0
    max_abs = 0.0
    diff = np.empty(CHUNK, np.float32)  # reused: no allocation per chunk
    neq = np.empty(CHUNK, np.bool_)
    for name, ta in a_hdr.items():
        tb = b_hdr[name]
        if ta["dtype"] != "F32" or tb["dtype"] != "F32" or ta["shape"] != tb["shape"]:
            sys.exit("numpy_diff: %s: only F32 tensors of the same shape" % name)
        n = (ta["data_offsets"][1] - ta["data_offsets"][0]) // 4
        if n == 0:
            continue
        a = np.memmap(a_path, np.float32, "r", a_base + ta["data_offsets"][0], (n,))
        b = np.memmap(b_path, np.float32, "r", b_base + tb["data_offsets"][0], (n,))
        for i in range(0, n, CHUNK):
            x, y = a[i:i + CHUNK], b[i:i + CHUNK]
            k = x.shape[0]
            np.not_equal(x, y, out=neq[:k])
            count += int(np.count_nonzero(neq[:k]))
            d = diff[:k]
            np.subtract(x, y, out=d)
            np.abs(d, out=d)
            max_abs = max(max_abs, float(d.max()))
        total += n
        del a, b
    print(count, total, repr(max_abs))


main()

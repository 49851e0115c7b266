"""Edits a torch.save zip file (as DeepSpeed writes them) in place, its
CRCs set again, for the damage cases of test_deepspeed_fixtures.sh.
Standard library only.

    ds_zip_edit.py FILE byte REGEX HEX
        the first match of REGEX (bytes, re.S) in data.pkl: its group 1, one
        byte, becomes HEX (a BININT1 size: 40 -> 3f makes (64,) say (63,))
    ds_zip_edit.py FILE elem PATH INDEX
        float32 element INDEX of the tensor at PATH (keys joined by '.',
        integer keys as digits) gets its lowest bit flipped
"""
import pickle
import re
import struct
import sys
import zipfile
import zlib


def member(path, pred):
    z = zipfile.ZipFile(path)
    info = [i for i in z.infolist() if pred(i.filename)]
    z.close()
    assert len(info) == 1 and info[0].compress_type == zipfile.ZIP_STORED, [i.filename for i in info]
    return info[0]


def rewrite(path, b, info, data):
    """data replaces member info's bytes in b; its CRC in both headers."""
    name_len, extra_len = struct.unpack('<HH', b[info.header_offset + 26:info.header_offset + 30])
    start = info.header_offset + 30 + name_len + extra_len
    assert len(data) == info.file_size
    b[start:start + info.file_size] = data
    crc = struct.pack('<I', zlib.crc32(bytes(data)))
    b[info.header_offset + 14:info.header_offset + 18] = crc
    cd = b.find(b'PK\x01\x02', start)
    while cd >= 0:
        n = struct.unpack('<H', b[cd + 28:cd + 30])[0]
        if b[cd + 46:cd + 46 + n] == info.filename.encode():
            b[cd + 16:cd + 20] = crc
        cd = b.find(b'PK\x01\x02', cd + 4)
    open(path, 'wb').write(b)


def read(b, info):
    name_len, extra_len = struct.unpack('<HH', b[info.header_offset + 26:info.header_offset + 30])
    start = info.header_offset + 30 + name_len + extra_len
    return bytearray(b[start:start + info.file_size])


class T:
    def __init__(self, key, off):
        self.key, self.off = key, off


class Obj:
    def __init__(self, *a):
        self.args = a

    def __setstate__(self, st):
        self.state = st


class OD(dict):
    def __setstate__(self, st):
        pass


class U(pickle.Unpickler):
    def find_class(self, mod, name):
        if name == '_rebuild_tensor_v2':
            return lambda storage, off, *rest: T(storage, off)
        if mod == 'collections' and name == 'OrderedDict':
            return OD
        if mod == 'torch' and name == 'Size':
            return tuple
        return type(name, (Obj,), {})

    def persistent_load(self, pid):
        return pid[2]


def main():
    path, op = sys.argv[1], sys.argv[2]
    b = bytearray(open(path, 'rb').read())
    pkl = member(path, lambda n: n.endswith('/data.pkl'))
    if op == 'byte':
        data = read(b, pkl)
        m = re.search(sys.argv[3].encode('latin-1'), bytes(data), re.S)
        assert m, 'pattern not found'
        data[m.start(1)] = int(sys.argv[4], 16)
        rewrite(path, b, pkl, data)
        return 0
    assert op == 'elem', op
    t = U(__import__('io').BytesIO(bytes(read(b, pkl)))).load()
    for k in sys.argv[3].split('.'):
        t = t[int(k)] if isinstance(t, dict) and k.isdigit() and int(k) in t else t[k]
    prefix = pkl.filename[:-len('data.pkl')]
    info = member(path, lambda n: n == prefix + 'data/' + t.key)
    data = read(b, info)
    at = (t.off + int(sys.argv[4])) * 4
    data[at] ^= 1
    rewrite(path, b, info, data)
    return 0


if __name__ == '__main__':
    sys.exit(main())

"""python3 ref_matches_manifest.py REF.safetensors FIXTURE/manifest.json COUNT

The reference file of real-library fixtures (tests/fixtures/mcore) holds
exactly the manifest's `logical` tensors: same names, dtypes, shapes and
sha256 of the bytes, and COUNT of them. Standard library only: the
manifests were written by the libraries' own load (an independent
reference), and this checks the safetensors file without detcheck."""
import hashlib
import json
import struct
import sys

ref, manifest, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
data = open(ref, 'rb').read()
n = struct.unpack('<Q', data[:8])[0]
hdr = json.loads(data[8:8 + n])
body = data[8 + n:]
logical = json.load(open(manifest))['logical']
got = {k: (v['dtype'], v['shape'], hashlib.sha256(body[v['data_offsets'][0]:v['data_offsets'][1]]).hexdigest())
       for k, v in hdr.items() if k != '__metadata__'}
want = {k: (v['dtype'], v['shape'], v['sha256']) for k, v in logical.items()}
bad = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
if bad or len(want) != count:
    print(len(want), 'logical tensors (want %d); differ:' % count, bad[:5])
    sys.exit(1)

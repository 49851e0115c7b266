# CLI: megatron-core's dp_reshardable optimizer state (tests/fixtures/mcore,
# see its README.md): the per-bucket 1-D buffers
# (optimizer.distributed.dp_group_idx_G.gbuf_idx_B.dtype_(...).bucket_idx_K.STATE)
# are reported per parameter, optimizer.state.{fp32_param,exp_avg,exp_avg_sq}.KEY
# in the parameter's shape, with the digests of the reference
# (gpt_logical.safetensors: what megatron's own load gives back) and of the
# model-space layouts; the torch.empty padding between parameters is left
# out (other bytes there: the same digests); a master weight that does not
# match its model weight fails the map's check: the buckets are then
# compared as stored, whole, padding included, each state named by a value
# NAME.padding ("compared whole, padding included: ...") and a note, so a
# real change in them is still found (detcheck-formats(7), Megatron-Core optimizer state); truncated files
# are still exit 2 naming the file. Python: standard library only.
. "$DCK_TOP/tests/cli/lib.sh"
MC="$DCK_TOP/tests/fixtures/mcore"
[ -d "$MC/dpr_tp1dp2" ] || fail "fixtures $MC absent"
command -v python3 > /dev/null || skip "python3 absent"

"$DETCHECK" hash -q --json "$MC/gpt_logical.safetensors" > ref.json || fail "hash gpt_logical.safetensors"
ok

# Every reference tensor (17 weights, 51 optimizer tensors) with the same
# name, group, dtype, shape and digest; no bucket tensor and no other
# optimizer.state tensor left.
same_as_reference() { # same_as_reference DIR NAME
    "$DETCHECK" hash -q --json "$1" > "$2.json" || fail "hash $2"
    python3 - ref.json "$2.json" "$2" <<'EOF' || fail "$2 differs from gpt_logical.safetensors"
import json, sys
def load(p):
    return {t['name']: (t['group'], t['dtype'], t['shape'], t['digest']) for t in json.load(open(p))['tensors']}
ref, got, name = load(sys.argv[1]), load(sys.argv[2]), sys.argv[3]
values = json.load(open(sys.argv[2])).get('values', [])
bad = [(k, ref[k], got.get(k)) for k in sorted(ref) if got.get(k) != ref[k]]
extra = [k for k in got if (k.startswith('optimizer.') and k not in ref) or 'bucket_idx_' in k]
nc = [v['name'] for v in values if 'not compared' in v['value']]
assert len(ref) == 68, len(ref)
for b in bad[:5]: print(name, 'differs:', b)
for k in extra[:5]: print(name, 'extra optimizer tensor:', k, got[k])
for k in nc[:5]: print(name, 'not compared:', k)
sys.exit(1 if bad or extra or nc else 0)
EOF
    ok
}
same_as_reference "$MC/dpr_tp1dp2" dpr_tp1dp2
# the same state written by megatron-core 0.16 and 0.19 (when present)
for f in m016_dpr_tp1dp2 m019_dpr_tp1dp2; do
    if [ -d "$MC/$f" ]; then same_as_reference "$MC/$f" "$f"; else skip_part "$MC/$f absent"; fi
done

# shapes at a glance; the buckets are gone, no note
expect_exit 0 "$DETCHECK" hash "$MC/dpr_tp1dp2"
expect_grep '{name: optimizer.state.fp32_param.decoder.layers.mlp.linear_fc1.weight, group: optimizer, dtype: F32, shape: \[2, 48, 32\]' out.txt
expect_grep '{name: optimizer.state.exp_avg_sq.embedding.word_embeddings.weight, group: optimizer, dtype: F32, shape: \[64, 32\]' out.txt
expect_no_grep 'bucket_idx_' out.txt
expect_no_grep 'not compared' err.txt

# verify and diff against the other layouts: optimizer state and weights
# identical. Left out: what differs by design between the sharding types and
# is not this part (RNG per rank, the args, the no-Apex per-parameter step,
# the param_groups and bucket sizes each type stores under its own names).
X="--exclude rng_state* --exclude args.* --exclude content_metadata.* --exclude optimizer.param_state*"
X="$X --exclude optimizer.distributed.* --exclude optimizer.optimizer.*"
for g in fsms_tp1dp1 fr_tp1dp1 fsms_tp2dp2; do
    "$DETCHECK" hash -q -o "$g.yaml" "$MC/$g" || fail "hash $g"
    # shellcheck disable=SC2086
    expect_exit 0 "$DETCHECK" verify --golden "$g.yaml" "$MC/dpr_tp1dp2" $X
    expect_grep '^OK: [0-9]* tensors identical' out.txt
done
# shellcheck disable=SC2086
expect_exit 0 "$DETCHECK" diff -q --group optimizer,weights $X "$MC/dpr_tp1dp2" "$MC/fr_tp1dp1"
expect_grep 'optimizer 0/51 differ' out.txt

# Where each bucket state chunk lies: .metadata read with stub classes
# (standard library only), the torch.save zip of the chunk parsed for its
# data entry. A chunk starting off a multiple of 64 elements is padding
# (parameters start at multiples of 64; at DP 2 so do the data-parallel
# shards: found without detcheck's own map).
cat > chunks.py <<'EOF'
import io, pickle, struct, sys, zipfile
class Stub:
    def __init__(self, *a, **k): self.args = a
    def __setstate__(self, st): self.state = st
    def get(self, k):
        st = getattr(self, 'state', None)
        if isinstance(st, tuple): st = {**(st[0] or {}), **(st[1] or {})}
        return st.get(k) if isinstance(st, dict) else None
class U(pickle.Unpickler):
    def find_class(self, mod, name):
        if (mod, name) == ('torch', 'Size'): return lambda *a: tuple(a[0]) if a else ()
        if mod in ('builtins', 'collections', 'copyreg', '_codecs'): return super().find_class(mod, name)
        return type(name, (Stub,), {})
def data_entry(blob):
    """(offset, size) of the tensor data in a torch.save zip (stored, not deflated)."""
    z = zipfile.ZipFile(io.BytesIO(blob))
    for i in z.infolist():
        if '/data/' in i.filename and not i.filename.endswith('serialization_id'):
            a = i.header_offset
            n, e = struct.unpack('<HH', blob[a + 26:a + 30])
            return a + 30 + n + e, i.file_size
    raise SystemExit('no data entry')
def chunks(it):
    """(state, element offset, file, byte offset of the data, bytes) per bucket chunk."""
    m = U(open(it + '/.metadata', 'rb')).load()
    out = []
    for k, v in m.get('storage_data').items():
        fqn = k.get('fqn')
        if '.bucket_idx_' not in fqn: continue
        path, off, ln = v.get('relative_path'), v.get('offset'), v.get('length')
        blob = open(it + '/' + path, 'rb').read()[off:off + ln]
        d, n = data_entry(blob)
        out.append((fqn.rsplit('.', 1)[1], k.get('offset')[0], path, off + d, n))
    return sorted(out)
def patch(it, state, pred, change):
    done = 0
    for st, e0, path, off, n in chunks(it):
        if st != state or not pred(e0): continue
        with open(it + '/' + path, 'r+b') as f:
            f.seek(off)
            b = f.read(n)
            f.seek(off)
            f.write(change(b))
        done += 1
    return done
if __name__ == '__main__':
    it, mode = sys.argv[1], sys.argv[2]
    if mode == 'padding':   # every padding chunk of every state: other bytes
        n = sum(patch(it, s, lambda e: e % 64 != 0, lambda b: bytes(x ^ 0xa5 for x in b))
                for s in ('param', 'exp_avg', 'exp_avg_sq'))
    elif mode in ('param', 'exp_avg'):  # the lowest bit of the state's first element
        n = patch(it, mode, lambda e: e == 0, lambda b: bytes([b[0] ^ 1]) + b[1:])
    print(n)
    sys.exit(0 if n else 1)
EOF
IT=iter_0000005
copy_fixture() { rm -rf "$2"; cp -r "$MC/$1" "$2"; }

# other bytes in the padding: the same tensors and digests
copy_fixture dpr_tp1dp2 pad
python3 chunks.py "pad/$IT" padding > npad.txt || fail "no padding chunk found"
[ "$(cat npad.txt)" -ge 3 ] || fail "only $(cat npad.txt) padding chunks"
ok
cmp -s "$MC/dpr_tp1dp2/$IT/__0_0.distcp" "pad/$IT/__0_0.distcp" && cmp -s "$MC/dpr_tp1dp2/$IT/__0_1.distcp" "pad/$IT/__0_1.distcp" &&
    cmp -s "$MC/dpr_tp1dp2/$IT/__1_0.distcp" "pad/$IT/__1_0.distcp" && cmp -s "$MC/dpr_tp1dp2/$IT/__1_1.distcp" "pad/$IT/__1_1.distcp" &&
    fail "patching the padding changed no file"
ok
same_as_reference pad pad
"$DETCHECK" hash -q -o pad.yaml pad || fail "hash pad"
"$DETCHECK" hash -q -o orig.yaml "$MC/dpr_tp1dp2" || fail "hash dpr_tp1dp2"
grep '^- {name:' pad.yaml > a.txt
grep '^- {name:' orig.yaml > b.txt
cmp -s a.txt b.txt || { diff a.txt b.txt | head; fail "padding bytes changed a tensor entry"; }
ok
expect_exit 0 "$DETCHECK" verify --golden orig.yaml pad

# a master weight that is not its model weight: the map's check fails; the
# bucket tensors are compared as stored (1-D, whole, padding included), no
# recovered tensor; each bucket state named by a value NAME.padding saying
# so and why, a note on stderr
copy_fixture dpr_tp1dp2 bad
python3 chunks.py "bad/$IT" param > /dev/null || fail "patching a master weight"
ok
B="optimizer.distributed.dp_group_idx_0.gbuf_idx_0.dtype_(torch.float32, torch.float32).bucket_idx_0"
expect_exit 0 "$DETCHECK" hash bad
expect_grep 'note: .*bad/iter_0000005/.metadata: dp_reshardable optimizer state (3 bucket tensors) compared as stored, padding included (its torch.empty bytes may differ between identical runs): per-parameter map not recovered' err.txt
expect_grep 'differ from output_layer.weight' err.txt
expect_no_grep 'optimizer.state\.' out.txt
for s in param exp_avg exp_avg_sq; do
    expect_grep "{name: '$B.$s', group: optimizer, dtype: F32, shape: \\[19968\\], digest: [0-9a-f]*}" out.txt
    expect_grep "{name: '$B.$s.padding', value: \"compared whole, padding included (where the inferred map, not verified, puts it: \\[2080, 2112), \\[2144, 2176), .*, \\[17632, 17664)): per-parameter map not recovered (the master weights (param) at \\[0, 2048) of dp_group_idx_0 gbuf_idx_0 bucket_idx_0 differ from output_layer.weight, which the inferred map puts there)\"}" out.txt
done
# the weights are still compared; the per-parameter state is reported
# missing, the buckets extra, not equal
"$DETCHECK" hash -q -o fr.yaml "$MC/fr_tp1dp1" || fail "hash fr_tp1dp1"
# shellcheck disable=SC2086
expect_exit 1 "$DETCHECK" verify --golden fr.yaml bad $X
expect_grep 'optimizer.state.exp_avg.output_layer.weight' out.txt
# shellcheck disable=SC2086
expect_exit 0 "$DETCHECK" verify --golden fr.yaml bad $X --exclude 'optimizer.state.*'
# Both copies with the same master-weight change (the map fails in both):
# identical bytes verify and diff equal; a real exp_avg change in B is
# found by verify, diff (text and JSON) and hash's digests
"$DETCHECK" hash -q -o bad1.yaml bad || fail "hash bad"
copy_fixture dpr_tp1dp2 bad2
python3 chunks.py "bad2/$IT" param > /dev/null || fail "patching bad2"
expect_exit 0 "$DETCHECK" verify --golden bad1.yaml bad2
expect_exit 0 "$DETCHECK" diff -q bad bad2
python3 chunks.py "bad2/$IT" exp_avg > /dev/null || fail "patching bad2's exp_avg"
expect_exit 1 "$DETCHECK" verify --golden bad1.yaml bad2
expect_grep "^DIFFERENT: 1 difference against bad1.yaml; first: $B.exp_avg\$" out.txt
expect_exit 1 "$DETCHECK" diff -q bad bad2
expect_grep "^First differing tensor: $B.exp_avg\$" out.txt
expect_grep '^Result: different' out.txt
expect_exit 1 "$DETCHECK" diff -q --json bad bad2
python3 - out.txt "$B.exp_avg" <<'EOF' || fail "diff --json: the exp_avg bucket differs"
import json, sys
d = json.load(open(sys.argv[1]))
t = [t for t in d['tensors'] if t['name'] == sys.argv[2]]
assert not d['equal'] and t and t[0]['status'] == 'differ' and t[0]['diff_count'] == 1, t
EOF
ok
# other padding bytes: the buckets differ there (the values say the padding
# is compared too), never an OK over state compared nowhere
python3 chunks.py "bad/$IT" padding > /dev/null || fail "patching bad's padding"
expect_exit 1 "$DETCHECK" verify --golden bad1.yaml bad
expect_grep "differs  $B.exp_avg:" out.txt
# and every element that differs lies in the padding the value names
copy_fixture dpr_tp1dp2 bad3
python3 chunks.py "bad3/$IT" param > /dev/null || fail "patching bad3"
"$DETCHECK" hash -q --json bad > bad.json || fail "hash bad"
expect_exit 1 "$DETCHECK" diff -q --json bad3 bad
python3 - out.txt bad.json "$B" <<'EOF' || fail "the differing elements are not in the named padding"
import json, re, sys
d, h, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
pad = {v['name']: v['value'] for v in h['values']}[b + '.exp_avg.padding']
ranges = [(int(x), int(y)) for x, y in re.findall(r'\[(\d+), (\d+)\)', pad.split('): per-parameter')[0])]
assert len(ranges) == 18, ranges
t = {t['name']: t for t in d['tensors']}[b + '.exp_avg']
first = t['first_index'][0]
assert t['status'] == 'differ' and any(x <= first < y for x, y in ranges), (first, ranges)
assert t['diff_count'] <= sum(y - x for x, y in ranges), t['diff_count']
EOF
ok

# truncated files: exit 2 naming the file, whichever file it is
for f in __0_0.distcp __0_1.distcp __1_0.distcp __1_1.distcp; do
    copy_fixture dpr_tp1dp2 trunc
    python3 - "trunc/$IT/$f" <<'EOF' || fail "truncating $f"
import os, sys
os.truncate(sys.argv[1], os.path.getsize(sys.argv[1]) * 2 // 3)
EOF
    expect_exit 2 "$DETCHECK" hash -q trunc
    expect_grep "trunc/$IT/$f" err.txt
done
# a bucket chunk's bytes cut off in the middle of the data of the master
# weights: still exit 2 naming the file, not "not compared"
copy_fixture dpr_tp1dp2 cut
python3 - "cut/$IT" <<'EOF' || fail "cutting a bucket chunk"
import os, sys
sys.path.insert(0, '.')
from chunks import chunks
st, e0, path, off, n = [c for c in chunks(sys.argv[1]) if c[0] == 'param'][-1]
os.truncate(sys.argv[1] + '/' + path, off + n // 2)
EOF
expect_exit 2 "$DETCHECK" hash -q cut
expect_grep "cut/$IT/__" err.txt
expect_no_grep 'not compared' err.txt

done_ok

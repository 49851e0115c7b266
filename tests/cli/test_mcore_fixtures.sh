# CLI: checkpoints written by the real megatron-core 0.15.3 (tests/fixtures/mcore,
# see its README.md): flattened-range optimizer state (fully_sharded_model_space,
# TP1 DP1 and TP2 DP2) is reported in the parameter's shape, with the digests
# of the model-space layout (fully_reshardable) and of the logical tensors
# megatron's own load gives back (gpt_logical.safetensors, whose bytes are
# checked here against the sha256 in every fixture's manifest.json); master
# weights are named optimizer.state.fp32_param.KEY in both formats; verify and
# diff between the layouts say identical; mcore_data that does not fit the
# stored shapes is exit 2 naming the .metadata. Python: standard library only.
. "$DCK_TOP/tests/cli/lib.sh"
MC="$DCK_TOP/tests/fixtures/mcore"
[ -d "$MC/fsms_tp1dp1" ] || fail "fixtures $MC absent"
command -v python3 > /dev/null || skip "python3 absent"

# The reference file holds exactly the manifests' logical tensors (same bytes).
for f in fsms_tp1dp1 fsms_tp2dp2 fr_tp1dp1 dpr_tp1dp2 m016_fr_tp1dp1 m016_dpr_tp1dp2 m019_fr_tp1dp1 \
         m019_fr_tp2dp2 m019_dpr_tp1dp2; do
    python3 "$DCK_TOP/tests/cli/ref_matches_manifest.py" "$MC/gpt_logical.safetensors" "$MC/$f/manifest.json" 68 || fail "gpt_logical.safetensors vs $f/manifest.json"
    ok
done

"$DETCHECK" hash -q --json "$MC/gpt_logical.safetensors" > ref.json || fail "hash gpt_logical.safetensors"
ok

# Every reference tensor (17 weights, 51 optimizer tensors) with the same
# name, group, dtype, shape and digest; no optimizer.state tensor besides them
# (so none in storage form, none named optimizer.state.param.*).
same_as_reference() { # same_as_reference FIXTURE
    "$DETCHECK" hash -q --json "$MC/$1" > "$1.json" || fail "hash $1"
    python3 - ref.json "$1.json" "$1" <<'EOF' || fail "$1 differs from gpt_logical.safetensors"
import json, sys
def load(p):
    return {t['name']: (t['group'], t['dtype'], t['shape'], t['digest']) for t in json.load(open(p))['tensors']}
ref, got, name = load(sys.argv[1]), load(sys.argv[2]), sys.argv[3]
bad = [(k, ref[k], got.get(k)) for k in sorted(ref) if got.get(k) != ref[k]]
extra = [k for k in got if k.startswith('optimizer.state.') and k not in ref]
opt = [k for k in ref if k.startswith('optimizer.state.')]
assert len(ref) == 68 and len(opt) == 51, (len(ref), len(opt))
assert sum(k.startswith('optimizer.state.fp32_param.') for k in ref) == 17
for b in bad[:5]: print(name, 'differs:', b)
for k in extra[:5]: print(name, 'extra optimizer state:', k, got[k])
sys.exit(1 if bad or extra else 0)
EOF
    ok
}
same_as_reference fsms_tp1dp1
same_as_reference fsms_tp2dp2
same_as_reference fr_tp1dp1
# every version and layout (0.16/0.19 keep no mcore_data: master weights are
# still fp32_param; dp_reshardable: recovered from the buckets)
for f in dpr_tp1dp2 m016_fr_tp1dp1 m016_dpr_tp1dp2 m019_dpr_tp1dp2; do same_as_reference $f; done

# the shapes at a glance: parameter shapes, not [*chunks, chunk_numel]
"$DETCHECK" hash -q "$MC/fsms_tp2dp2" > tp2.yaml
expect_grep '{name: optimizer.state.exp_avg.decoder.layers.mlp.linear_fc1.weight, group: optimizer, dtype: F32, shape: \[2, 48, 32\]' tp2.yaml
expect_grep '{name: optimizer.state.fp32_param.decoder.layers.mlp.linear_fc2.weight, group: optimizer, dtype: F32, shape: \[2, 32, 48\]' tp2.yaml
expect_grep '{name: optimizer.state.exp_avg_sq.embedding.word_embeddings.weight, group: optimizer, dtype: F32, shape: \[64, 32\]' tp2.yaml
expect_grep '{name: optimizer.state.exp_avg.decoder.final_layernorm.bias, group: optimizer, dtype: F32, shape: \[32\]' tp2.yaml
"$DETCHECK" hash -q "$MC/fr_tp1dp1" > fr.yaml
expect_grep '{name: optimizer.state.fp32_param.decoder.layers.self_attention.linear_qkv.weight, group: optimizer, dtype: F32, shape: \[2, 96, 32\]' fr.yaml
expect_no_grep 'optimizer.state.param\.' fr.yaml

# verify and diff across the layouts (detcheck-formats(7), Layout state): the per-rank RNG
# state, rank 0's own optimizer.param_state.N.step (the no-Apex path) and the
# values that describe the layout are layout state, set aside when the
# layouts differ (what is stored says so: the RNG grid); nothing else is
# left out. What is set aside was not compared: exit 1 unless
# --accept-layout-state accepts it.
for g in fr_tp1dp1 fsms_tp1dp1 fsms_tp2dp2; do
    "$DETCHECK" hash -q -o "$g.yaml" "$MC/$g" || fail "hash $g"
    for f in fr_tp1dp1 fsms_tp1dp1 fsms_tp2dp2; do
        if [ "$g" = "$f" ]; then
            expect_exit 0 "$DETCHECK" verify --golden "$g.yaml" "$MC/$f"
            expect_grep '^OK: [0-9]* tensors identical' out.txt
            expect_no_grep 'layouts differ' out.txt
        else
            expect_exit 1 "$DETCHECK" verify --golden "$g.yaml" "$MC/$f"
            expect_grep '^NOT COMPARED: [0-9]* entries of layout state against' out.txt
            expect_grep 'layouts differ (' out.txt
            expect_exit 0 "$DETCHECK" verify --accept-layout-state --golden "$g.yaml" "$MC/$f"
            expect_grep '^OK: [0-9]* tensors identical' out.txt
            expect_grep 'layouts differ (.*; accepted):' out.txt
        fi
    done
done
expect_exit 1 "$DETCHECK" verify --golden fsms_tp1dp1.yaml "$MC/fsms_tp2dp2"
expect_grep '^NOT COMPARED: 44 entries of layout state against fsms_tp1dp1.yaml (--accept-layout-state accepts them); 84 tensors identical$' out.txt
expect_grep '^layouts differ (rng_state: grid 1.1 only in the golden): 44 entries of per-rank layout state not compared' out.txt
expect_grep '^  layout   optimizer.param_state.16.step (in golden only)$' out.txt
expect_grep '^  ... and 34 more (--json lists them all)$' out.txt
expect_exit 1 "$DETCHECK" verify --json --golden fsms_tp1dp1.yaml "$MC/fsms_tp2dp2"
python3 - out.txt <<'EOF' || fail "verify --json layout_state"
import json, sys
d = json.load(open(sys.argv[1]))
ls = d['layout_state']
assert not d['equal'] and not ls['accepted'], d
assert ls['layouts_differ'] == 'rng_state: grid 1.1 only in the golden', ls['layouts_differ']
names = ls['not_compared']
assert len(names) == 44 and 'rng_state/shard_0.1_1.2.0.torch_rng_state' in names, names[:5]
assert all(n.startswith(('rng_state/', 'optimizer.param_state.', 'args.')) for n in names), names
EOF
ok
expect_exit 0 "$DETCHECK" verify --json --accept-layout-state --golden fsms_tp1dp1.yaml "$MC/fsms_tp2dp2"
python3 - out.txt <<'EOF' || fail "verify --json --accept-layout-state"
import json, sys
d = json.load(open(sys.argv[1]))
assert d['equal'] and d['layout_state']['accepted'] and len(d['layout_state']['not_compared']) == 44, d
EOF
ok
# required: the same comparison fails on the RNG and the sizes
expect_exit 1 "$DETCHECK" verify --require-rank-state --golden fsms_tp1dp1.yaml "$MC/fsms_tp2dp2"
expect_grep 'DIFFERENT: 44 differences' out.txt
expect_grep 'extra    rng_state/shard_0.1_1.2.0.cuda_rng_state' out.txt
expect_no_grep 'layouts differ' out.txt
# diff: not equal (the layout state not compared), with the layout line;
# equal with --accept-layout-state; with --require-rank-state different
expect_exit 1 "$DETCHECK" diff -q "$MC/fsms_tp1dp1" "$MC/fsms_tp2dp2"
expect_grep '^Layouts differ (rng_state: grid 1.1 only in the first): 41 tensors and 19 values of per-rank layout state not compared' out.txt
expect_grep 'optimizer 0/51 differ' out.txt
expect_grep '^Result: not equal (layout state not compared) (.*, 60 not compared)$' out.txt
expect_exit 0 "$DETCHECK" diff -q --accept-layout-state "$MC/fsms_tp1dp1" "$MC/fsms_tp2dp2"
expect_grep '^Result: equal (.*, 60 not compared (accepted))$' out.txt
expect_exit 1 "$DETCHECK" diff -q --require-rank-state "$MC/fsms_tp1dp1" "$MC/fsms_tp2dp2"
expect_exit 1 "$DETCHECK" diff -q --json "$MC/fsms_tp2dp2" "$MC/fr_tp1dp1"
python3 - out.txt <<'EOF' || fail "diff --json layout_state"
import json, sys
d = json.load(open(sys.argv[1]))
ls = d['layout_state']
assert not d['equal'] and not d['ok'] and not ls['accepted'], d
assert 'rng_state' in ls['layouts_differ'], ls
assert any(n.startswith('rng_state/shard_0.1_1.2.') for n in ls['tensors_not_compared'])
assert not any(t['name'].startswith('rng_state') for t in d['tensors'])
EOF
ok
# The same layout: per-rank state is compared. A copy whose RNG state of
# TP rank 1 has one byte flipped (its zip member's CRC-32 fixed) fails,
# naming it, and the grid position is no layer.
rm -rf rng_changed
cp -r "$MC/fsms_tp2dp2" rng_changed
cat > flip_rng.py <<'EOF'
# Flips one byte of the first 5056-byte tensor (an RNG state) stored in a
# torch.save zip inside a .distcp, fixing the member's CRC-32 in both headers.
import struct, sys, zlib
p = sys.argv[1]
d = bytearray(open(p, 'rb').read())
j = 0
while True:
    j = d.find(b'PK\x01\x02', j)
    assert j >= 0, 'no 5056-byte member'
    crc, csize, usize, nlen = struct.unpack_from('<IIIH', d, j + 16)
    name = bytes(d[j + 46:j + 46 + nlen])
    if usize == 5056 and b'/data/' in name:
        break
    j += 4
i = d.rfind(b'PK\x03\x04' + bytes(d[j + 6:j + 8]), 0, j)
while bytes(d[i + 30:i + 30 + nlen]) != name:
    i = d.rfind(b'PK\x03\x04', 0, i)
nl, xl = struct.unpack_from('<HH', d, i + 26)
start = i + 30 + nl + xl
d[start + 100] ^= 0x01
crc2 = zlib.crc32(bytes(d[start:start + usize])) & 0xffffffff
struct.pack_into('<I', d, j + 16, crc2)
if struct.unpack_from('<I', d, i + 14)[0] == crc:
    struct.pack_into('<I', d, i + 14, crc2)
open(p, 'wb').write(bytes(d))
print(name.decode())
EOF
python3 flip_rng.py rng_changed/iter_0000005/__1_0.distcp > /dev/null || fail "flipping an RNG byte"
expect_exit 1 "$DETCHECK" verify --golden fsms_tp2dp2.yaml rng_changed
expect_grep 'DIFFERENT: 1 difference against fsms_tp2dp2.yaml; first: rng_state/shard_0.1_1.2.0.torch_rng_state' out.txt
expect_no_grep 'layouts differ' out.txt
expect_exit 1 "$DETCHECK" diff -q --json "$MC/fsms_tp2dp2" rng_changed
python3 - out.txt <<'EOF' || fail "diff: the RNG tensor has no layer"
import json, sys
d = json.load(open(sys.argv[1]))
t = [t for t in d['tensors'] if t['name'] == 'rng_state/shard_0.1_1.2.0.torch_rng_state']
assert t and t[0]['status'] == 'differ' and t[0]['layer'] is None, t
assert 'layout_state' not in d
EOF
ok
# A lying args.tensor_model_parallel_size (detcheck-formats(7), Layout state): the common.pt
# of a TP1 checkpoint says 2 while its storage (the RNG grid 1.1, the
# shapes) is still TP1, and one RNG bit is flipped. The layout is what is
# stored: the RNG state is compared and its difference found, with or
# without --accept-layout-state; the claim alone, set aside, is no OK.
cat > zpatch.py <<'EOF'
# zpatch.py FILE MEMBER_SUFFIX OLD NEW: the bytes OLD (hex) replaced once by
# NEW (same length) in the stored zip member whose name ends with
# MEMBER_SUFFIX, its CRC-32 fixed in both headers.
import struct, sys, zlib
p, suffix, old, new = sys.argv[1], sys.argv[2].encode(), bytes.fromhex(sys.argv[3]), bytes.fromhex(sys.argv[4])
assert len(old) == len(new)
d = bytearray(open(p, 'rb').read())
j = 0
while True:
    j = d.find(b'PK\x01\x02', j)
    assert j >= 0, 'no member ' + sys.argv[2]
    usize, nlen = struct.unpack_from('<IH', d, j + 24)
    if bytes(d[j + 46:j + 46 + nlen]).endswith(suffix): break
    j += 4
lo = struct.unpack_from('<I', d, j + 42)[0]
nl, xl = struct.unpack_from('<HH', d, lo + 26)
start = lo + 30 + nl + xl
body = bytes(d[start:start + usize])
assert body.count(old) == 1, body.count(old)
body = body.replace(old, new)
d[start:start + usize] = body
crc = zlib.crc32(body) & 0xffffffff
struct.pack_into('<I', d, j + 16, crc)
struct.pack_into('<I', d, lo + 14, crc)
open(p, 'wb').write(bytes(d))
EOF
rm -rf tp_lie
cp -r "$MC/fsms_tp1dp1" tp_lie
# pickle: 'tensor_model_parallel_size' BINPUT 11 BININT1 1 -> BININT1 2
python3 zpatch.py tp_lie/iter_0000005/common.pt data.pkl \
    74656e736f725f6d6f64656c5f706172616c6c656c5f73697a65710b4b01 \
    74656e736f725f6d6f64656c5f706172616c6c656c5f73697a65710b4b02 || fail "patching common.pt"
"$DETCHECK" hash -q tp_lie > lie.yaml || fail "hash tp_lie"
expect_grep '{name: args.tensor_model_parallel_size, value: "2"}' lie.yaml
ok
# the claim alone: not compared, so not OK; accepted, OK
expect_exit 1 "$DETCHECK" verify --golden fsms_tp1dp1.yaml tp_lie
expect_grep '^NOT COMPARED: 1 entry of layout state' out.txt
expect_grep '^layouts differ (args.tensor_model_parallel_size: 1 vs 2 as claimed; the stored layout is the same, per-rank state compared)' out.txt
expect_grep '^  layout   args.tensor_model_parallel_size (differs)$' out.txt
expect_exit 0 "$DETCHECK" verify --accept-layout-state --golden fsms_tp1dp1.yaml tp_lie
# and a flipped RNG bit: found, flag or not, by verify and diff
python3 flip_rng.py tp_lie/iter_0000005/__0_0.distcp > /dev/null || fail "flipping an RNG byte of tp_lie"
for flag in "" --accept-layout-state; do
    # shellcheck disable=SC2086
    expect_exit 1 "$DETCHECK" verify $flag --golden fsms_tp1dp1.yaml tp_lie
    expect_grep '^DIFFERENT: 1 difference against fsms_tp1dp1.yaml; first: rng_state/shard_0.0_1.1.0.torch_rng_state' out.txt
    # shellcheck disable=SC2086
    expect_exit 1 "$DETCHECK" diff -q $flag "$MC/fsms_tp1dp1" tp_lie
    expect_grep '^First differing tensor: rng_state/shard_0.0_1.1.0.torch_rng_state' out.txt
done
# ShardedObjects: the one-element list is unwrapped; a grid of one is named
# by its key; per-rank objects keep their grid.
"$DETCHECK" hash -q "$MC/dpr_tp1dp2" > dpr.yaml || fail "hash dpr_tp1dp2"
expect_grep '{name: optimizer.distributed.dp_group_idx_0.optimizer.param_groups.0.lr, value: "0.001"}' dpr.yaml
expect_grep 'name: rng_state/shard_0.0_1.1.0.cuda_rng_state, group: rng' dpr.yaml
expect_no_grep 'shard_0_1' dpr.yaml

# Versions (detcheck-formats(7), Megatron-LM): megatron-core 0.19 stores the common state as
# the ShardedObject common_state (no common.pt) and pickles torch's plain
# Metadata (no mcore_data; metadata.json marks the directory as Megatron's).
# One naming: a 0.15 golden verifies the 0.19 checkpoint of the same layout;
# the param groups' default_config that 0.19 adds is writer bookkeeping.
[ -d "$MC/m019_fr_tp1dp1" ] || fail "fixture m019_fr_tp1dp1 absent"
[ -e "$MC/m019_fr_tp1dp1/iter_0000005/common.pt" ] && fail "m019_fr_tp1dp1 has a common.pt"
"$DETCHECK" hash -q "$MC/m019_fr_tp1dp1" > m019.yaml || fail "hash m019_fr_tp1dp1"
expect_grep '{name: iteration, value: "5"}' m019.yaml
expect_grep '{name: args.hidden_size, value: "32"}' m019.yaml
expect_grep '{name: opt_param_scheduler.num_steps, value: "5"}' m019.yaml
expect_no_grep 'common_state' m019.yaml
expect_no_grep 'optimizer.state.param\.' m019.yaml
expect_grep 'name: optimizer.state.fp32_param.decoder.layers.mlp.linear_fc1.weight, group: optimizer, dtype: F32, shape: \[2, 48, 32\]' m019.yaml
expect_exit 1 "$DETCHECK" verify --golden fr_tp1dp1.yaml "$MC/m019_fr_tp1dp1"
expect_grep '^writer bookkeeping on one side only: 2 entries not compared' out.txt
expect_exit 0 "$DETCHECK" verify --accept-layout-state --golden fr_tp1dp1.yaml "$MC/m019_fr_tp1dp1"
expect_grep '^OK: 72 tensors identical' out.txt
expect_grep '^writer bookkeeping on one side only: 2 entries not compared (--require-rank-state compares them; accepted)' out.txt
expect_grep 'layout   optimizer.optimizer.param_groups.0.default_config (in checkpoint only)' out.txt
expect_exit 0 "$DETCHECK" verify --accept-layout-state --golden fsms_tp2dp2.yaml "$MC/m019_fr_tp2dp2"
expect_grep '^OK: ' out.txt
expect_exit 1 "$DETCHECK" verify --require-rank-state --golden fr_tp1dp1.yaml "$MC/m019_fr_tp1dp1"
expect_grep 'value    optimizer.optimizer.param_groups.0.default_config: extra (True)' out.txt
# the other way round, and diff
"$DETCHECK" hash -q -o m019.gold.yaml "$MC/m019_fr_tp1dp1" || fail "hash m019"
expect_exit 1 "$DETCHECK" verify --golden m019.gold.yaml "$MC/fr_tp1dp1"
expect_exit 0 "$DETCHECK" verify --accept-layout-state --golden m019.gold.yaml "$MC/fr_tp1dp1"
expect_exit 1 "$DETCHECK" diff -q "$MC/fr_tp1dp1" "$MC/m019_fr_tp1dp1"
expect_grep '^Writer bookkeeping on one side only (2 values, first optimizer.optimizer.param_groups.0.default_config)' out.txt
expect_grep '^Result: not equal (layout state not compared) (72 tensors, 72 equal, 2 not compared)' out.txt
expect_exit 0 "$DETCHECK" diff -q --accept-layout-state "$MC/fr_tp1dp1" "$MC/m019_fr_tp1dp1"
expect_grep '^Result: equal (72 tensors, 72 equal, 2 not compared (accepted))' out.txt
same_as_reference m019_fr_tp1dp1
same_as_reference m019_fr_tp2dp2

# dp_reshardable against the model-space layouts: the per-parameter state
# recovered from its buckets is identical; its param groups and
# per_bucket_numel (stored per model-parallel rank) are layout state.
expect_exit 0 "$DETCHECK" verify --accept-layout-state --golden fsms_tp1dp1.yaml "$MC/dpr_tp1dp2"
expect_grep '^OK: 72 tensors identical' out.txt
expect_grep '^layouts differ (optimizer.distributed.dp_group_idx_0 only in the checkpoint)' out.txt
"$DETCHECK" hash -q -o dpr.gold.yaml "$MC/dpr_tp1dp2" || fail "hash dpr_tp1dp2"
expect_exit 1 "$DETCHECK" verify --golden dpr.gold.yaml "$MC/m019_dpr_tp1dp2"
expect_exit 0 "$DETCHECK" verify --accept-layout-state --golden dpr.gold.yaml "$MC/m019_dpr_tp1dp2"
expect_grep '^writer bookkeeping on one side only: 2 entries not compared' out.txt

# Hostile mcore_data: the original shape of a flattened-range tensor patched
# (in the pickle, same length) so that it no longer fits the stored shape.
patch_meta() { # patch_meta SRC DST MODE: the first nd_reformulated_orig_global_shape
    rm -rf "$2"
    cp -r "$1" "$2"
    python3 - "$2/iter_0000005/.metadata" "$3" <<'EOF' || fail "patching $2"
import pickletools, sys
p, mode = sys.argv[1], sys.argv[2]
d = bytearray(open(p, 'rb').read())
ops = list(pickletools.genops(bytes(d)))
i = next(i for i, (o, a, _) in enumerate(ops) if a == 'nd_reformulated_orig_global_shape')
ints = []
for o, a, pos in ops[i + 1:]:
    if o.name == 'BININT1': ints.append((a, pos))
    elif o.name.startswith('TUPLE'): break
assert ints, ops[i:i + 8]
if mode == 'last+1':   # numel or divisibility no longer fits
    a, pos = ints[-1]; d[pos + 1] = a + 1
elif mode == 'first0':  # a zero dimension
    a, pos = ints[0]; d[pos + 1] = 0
open(p, 'wb').write(bytes(d))
EOF
}
for src in fsms_tp1dp1 fsms_tp2dp2; do
    for mode in last+1 first0; do
        patch_meta "$MC/$src" bad "$mode"
        expect_exit 2 "$DETCHECK" hash -q bad
        expect_grep 'bad/iter_0000005/.metadata: tensor optimizer.state.*mcore_data gives the original shape' err.txt
        expect_grep 'does not match its stored flattened-range shape' err.txt
        expect_exit 2 "$DETCHECK" verify -q --golden fr_tp1dp1.yaml bad
    done
done

done_ok

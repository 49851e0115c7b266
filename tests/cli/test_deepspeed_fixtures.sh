# CLI: checkpoints written by the real deepspeed 0.19.8 (tests/fixtures/mcore,
# see its README.md): ZeRO-1 DP1, ZeRO-2 DP2 and ZeRO-3 DP2 reassembled into
# the model's weights (module.NAME), fp32 master weights and Adam state
# (optimizer.state.{fp32_param,exp_avg,exp_avg_sq,step}.NAME) in the
# parameters' shapes, the same digests at every DP size and stage 1/2 and in
# deepspeed's own universal checkpoint (ds_zero2_dp2_universal, written by
# tests/fixtures/make_ds_universal.py). References, independent of detcheck:
# the sha256 of zero_to_fp32's output in every manifest.json (the bytes of
# ds_logical.safetensors / ds_zero3_logical.safetensors are checked against
# them), and the universal folder's tensors read here from its zip members by
# a stdlib unpickler. Damaged inputs exit 2 naming the file. Python:
# standard library only.
. "$DCK_TOP/tests/cli/lib.sh"
MC="$DCK_TOP/tests/fixtures/mcore"
[ -d "$MC/ds_zero2_dp2" ] || fail "fixtures $MC absent"
[ -d "$MC/ds_zero2_dp2_universal" ] || fail "fixture $MC/ds_zero2_dp2_universal absent"
command -v python3 > /dev/null || skip "python3 absent"

# ---- the references: the safetensors files hold zero_to_fp32's output
for f in ds_zero1_dp1:ds_logical ds_zero2_dp2:ds_logical ds_zero3_dp2:ds_zero3_logical; do
    python3 "$DCK_TOP/tests/cli/ref_matches_manifest.py" "$MC/${f#*:}.safetensors" "$MC/${f%%:*}/manifest.json" 8 || fail "$f: safetensors vs manifest.json"
    ok
done

# The universal folder's tensors, read from the zip members of each
# zero/PARAM/KIND.pt (a stdlib unpickler that knows torch's rebuild calls by
# name only), checked against its manifest.json and written as uni_ref.safetensors
# under optimizer.state.{fp32_param,exp_avg,exp_avg_sq,step}.PARAM.
python3 - "$MC/ds_zero2_dp2_universal" uni_ref.safetensors <<'EOF' || fail "universal reference"
import glob, hashlib, json, os, pickle, struct, sys, zipfile
root, out = sys.argv[1], sys.argv[2]
folder = os.path.join(root, open(os.path.join(root, 'latest_universal')).read().strip())
man = json.load(open(os.path.join(root, 'manifest.json')))['logical']
DT = {'FloatStorage': ('F32', 4)}
class T:
    def __init__(self, st, off, size): self.st, self.off, self.size = st, off, size
def rebuild(storage, offset, size, stride, *rest):
    return T(storage, offset, tuple(size))
class U(pickle.Unpickler):
    def find_class(self, mod, name):
        if name == '_rebuild_tensor_v2': return rebuild
        if mod == 'collections' and name == 'OrderedDict': return dict
        return type(name, (), {})
    def persistent_load(self, pid):
        return (pid[1].__name__, pid[2])   # ('storage', cls, key, location, numel)
kinds = {'fp32': 'fp32_param', 'exp_avg': 'exp_avg', 'exp_avg_sq': 'exp_avg_sq', 'step': 'step'}
tensors = {}
for p in sorted(glob.glob(os.path.join(folder, 'zero', '*', '*.pt'))):
    z = zipfile.ZipFile(p)
    pkl = [n for n in z.namelist() if n.endswith('/data.pkl')][0]
    obj = U(z.open(pkl)).load()
    t = obj['param'] if isinstance(obj, dict) else obj
    dt, es = DT[t.st[0]]
    numel = 1
    for d in t.size: numel *= d
    raw = z.read(pkl[:-len('data.pkl')] + 'data/' + t.st[1])[t.off * es:(t.off + numel) * es]
    name = 'optimizer.state.%s.%s' % (kinds[os.path.basename(p)[:-3]], os.path.basename(os.path.dirname(p)))
    want = man[name]
    assert (dt, list(t.size), hashlib.sha256(raw).hexdigest()) == (want['dtype'], want['shape'], want['sha256']), name
    tensors[name] = (dt, list(t.size), raw)
assert len(tensors) == 32 == len(man), len(tensors)
hdr, body = {}, b''
for k in sorted(tensors):
    dt, shape, raw = tensors[k]
    hdr[k] = {'dtype': dt, 'shape': shape, 'data_offsets': [len(body), len(body) + len(raw)]}
    body += raw
h = json.dumps(hdr).encode()
h += b' ' * (-len(h) % 8)
open(out, 'wb').write(struct.pack('<Q', len(h)) + h + body)
EOF
ok

# reference digests: uni_ref (32 optimizer tensors), and zero_to_fp32's weights
# both as module.NAME and optimizer.state.fp32_param.NAME
"$DETCHECK" hash -q --json uni_ref.safetensors > uni_ref.json || fail "hash uni_ref"
"$DETCHECK" hash -q --json "$MC/ds_logical.safetensors" > l12.json || fail "hash ds_logical"
"$DETCHECK" hash -q --json "$MC/ds_zero3_logical.safetensors" > l3.json || fail "hash ds_zero3_logical"
ok

# same_as REF_JSON PREFIX FIXTURE_JSON: every tensor of REF, as PREFIX+name,
# with the same dtype, shape and digest
same_as() {
    python3 - "$1" "$2" "$3" <<'EOF' || fail "$3 differs from $1 (prefix '$2')"
import json, sys
def load(p):
    return {t['name']: (t['dtype'], t['shape'], t['digest']) for t in json.load(open(p))['tensors']}
ref, pre, got = load(sys.argv[1]), sys.argv[2], load(sys.argv[3])
bad = [(k, ref[k], got.get(pre + k)) for k in sorted(ref) if got.get(pre + k) != ref[k]]
for b in bad[:5]: print(sys.argv[3], 'differs:', b)
sys.exit(1 if bad or not ref else 0)
EOF
    ok
}
for f in ds_zero1_dp1 ds_zero2_dp2 ds_zero2_dp2_universal ds_zero3_dp2; do
    "$DETCHECK" hash -q --json "$MC/$f" > "$f.json" || fail "hash $f"
    "$DETCHECK" hash -q -o "$f.yaml" "$MC/$f" || fail "hash $f (yaml)"
    ok
done
for f in ds_zero1_dp1 ds_zero2_dp2 ds_zero2_dp2_universal; do
    same_as l12.json optimizer.state.fp32_param. "$f.json"
    same_as l12.json module. "$f.json"
    same_as uni_ref.json "" "$f.json"     # exp_avg, exp_avg_sq, step: deepspeed's own reassembly
done
same_as l3.json optimizer.state.fp32_param. ds_zero3_dp2.json
same_as l3.json module. ds_zero3_dp2.json    # ZeRO-3: the weights from the partitions

# ZeRO-3's Adam state: no deepspeed tool writes it whole, so rebuilt here from
# the zip members by ZeRO-3's rule (each parameter cut into 2 parts of
# ceil(numel/2), part r at the same offset of rank r's flat group).
PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$DCK_TOP/tests/cli" python3 - "$MC/ds_zero3_dp2" z3_ref.safetensors <<'EOF' || fail "ZeRO-3 reference"
import json, os, struct, sys, zipfile
from ds_zip_edit import U   # torch.save's pickle, tensors as (storage key, offset)
root, out = sys.argv[1], sys.argv[2]
tag = os.path.join(root, open(os.path.join(root, 'latest')).read().strip())
def load(name):
    z = zipfile.ZipFile(os.path.join(tag, name))
    pkl = [n for n in z.namelist() if n.endswith('/data.pkl')][0]
    return z, pkl[:-8], U(z.open(pkl)).load()
def raw(z, pre, t, lo, hi):
    return z.read(pre + 'data/' + t.key)[(t.off + lo) * 4:(t.off + hi) * 4]
_, _, model = load('zero_pp_rank_0_mp_rank_00_model_states.pt')
params = [(k, v) for g in model['param_shapes'] for k, v in g.items()]
ranks = [load('zero_pp_rank_%d_mp_rank_00_optim_states.pt' % r) for r in range(2)]
out_t = {}
for key in ('exp_avg', 'exp_avg_sq'):
    off = 0
    for name, shape in params:
        numel = 1
        for d in shape: numel *= d
        part = (numel + 1) // 2
        data = b''
        for z, pre, sd in ranks:
            t = sd['optimizer_state_dict']['optimizer_state_dict']['state'][0][key]
            data += raw(z, pre, t, off, off + part)
        out_t['optimizer.state.%s.%s' % (key, name)] = (list(shape), data[:numel * 4])
        off += part
hdr, body = {}, b''
for k in sorted(out_t):
    shape, d = out_t[k]
    hdr[k] = {'dtype': 'F32', 'shape': shape, 'data_offsets': [len(body), len(body) + len(d)]}
    body += d
h = json.dumps(hdr).encode()
h += b' ' * (-len(h) % 8)
open(out, 'wb').write(struct.pack('<Q', len(h)) + h + body)
EOF
"$DETCHECK" hash -q --json z3_ref.safetensors > z3_ref.json || fail "hash z3_ref"
same_as z3_ref.json "" ds_zero3_dp2.json

# ---- detcheck-formats(7), DeepSpeed: ZeRO-1/2 of parameter counts that are not multiples
# of 2 x ranks (tests/fixtures/ds_padding, its README): DP 2, 3, 4, fp32 and
# bf16, two param groups and a frozen parameter, written by the real
# deepspeed (one with parameter_alignment's paddings between parameters);
# DeepSpeed pads each group to 2 x ranks and saves the last rank's
# fp32 partition without its padding (BF16_Optimizer: with it), the moments
# with it. The reference (ref.safetensors: zero_to_fp32's weights, deepspeed's
# own gather of the moments) is checked against manifest.json without detcheck,
# then every reference tensor is the fixture's, same dtype, shape and digest.
DP="$DCK_TOP/tests/fixtures/ds_padding"
n=0
for d in "$DP"/*/; do
    f=$(basename "$d")
    python3 - "$d/ref.safetensors" "$d/manifest.json" <<'EOF' || fail "$f: ref.safetensors vs manifest.json"
import hashlib, json, struct, sys
data = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', data[:8])[0]
hdr, body = json.loads(data[8:8 + n]), data[8 + n:]
got = {k: (v['dtype'], v['shape'], hashlib.sha256(body[v['data_offsets'][0]:v['data_offsets'][1]]).hexdigest())
       for k, v in hdr.items() if k != '__metadata__'}
want = {k: (v['dtype'], v['shape'], v['sha256']) for k, v in json.load(open(sys.argv[2]))['reference'].items()}
sys.exit(0 if got == want and len(got) == 19 else 1)
EOF
    "$DETCHECK" hash -q --json "$d/ref.safetensors" > "pad_ref_$f.json" || fail "hash $f/ref.safetensors"
    "$DETCHECK" hash -q --json "$d" > "pad_$f.json" || { cat err.txt 2>/dev/null; fail "hash $f"; }
    ok
    same_as "pad_ref_$f.json" "" "pad_$f.json"
    n=$((n + 1))
done
[ "$n" -eq 8 ] || fail "$n ds_padding fixtures, not 8"
# names and groups at a glance; nothing in storage form, no per-file names
for f in ds_zero1_dp1 ds_zero2_dp2 ds_zero3_dp2 ds_zero2_dp2_universal; do
    expect_grep '{name: module.0.weight, group: weights, dtype: F32, shape: \[48, 32\]' "$f.yaml"
    expect_grep '{name: optimizer.state.exp_avg.4.weight, group: optimizer, dtype: F32, shape: \[64, 32\]' "$f.yaml"
    expect_grep '{name: optimizer.state.step.0.bias, group: optimizer, dtype: F32, shape: \[\]' "$f.yaml"
    expect_grep '{name: deepspeed.layout.partition_count' "$f.yaml"
    expect_no_grep '{name: [^,]*\(zero_pp_rank\|single_partition\|fp32_flat_groups\|param_shapes\)' "$f.yaml"
    [ "$(grep -c '^- {name: .*group: ' "$f.yaml")" -eq 40 ] || fail "$f: not 40 tensors"
    ok
done
# the tag directory itself reads the same
"$DETCHECK" hash -q --json "$MC/ds_zero2_dp2/global_step3" > tag.json || fail "hash tag dir"
same_as ds_zero2_dp2.json "" tag.json

# ---- verify and diff across DP sizes, stages 1/2 and the universal form:
# identical; the values that describe the layout (deepspeed.layout.*: layout
# state, detcheck-formats(7)) are set aside when the stored partition count
# differs (no OK unless --accept-layout-state), and they alone differ under
# --require-rank-state
for g in ds_zero1_dp1 ds_zero2_dp2 ds_zero2_dp2_universal; do
    for f in ds_zero1_dp1 ds_zero2_dp2 ds_zero2_dp2_universal; do
        expect_exit 0 "$DETCHECK" verify --accept-layout-state --golden "$g.yaml" "$MC/$f"
    done
done
expect_exit 1 "$DETCHECK" verify --golden ds_zero1_dp1.yaml "$MC/ds_zero2_dp2"
expect_grep "^NOT COMPARED: 5 entries of layout state" out.txt
expect_exit 0 "$DETCHECK" verify --accept-layout-state --golden ds_zero1_dp1.yaml "$MC/ds_zero2_dp2"
expect_grep "OK: 40 tensors identical" out.txt
expect_grep "layouts differ (deepspeed.layout.partition_count.0: 1 vs 2): 5 entries" out.txt
expect_exit 1 "$DETCHECK" verify --golden ds_zero1_dp1.yaml "$MC/ds_zero2_dp2" --require-rank-state
expect_grep "40 of 40 golden tensors identical" out.txt
expect_grep "value    deepspeed.layout.dp_world_size: 2, golden 1" out.txt
expect_no_grep "value    [^d]" out.txt
expect_exit 0 "$DETCHECK" verify --golden ds_zero2_dp2.yaml "$MC/ds_zero2_dp2" --require-rank-state
expect_exit 1 "$DETCHECK" diff "$MC/ds_zero1_dp1" "$MC/ds_zero2_dp2_universal"
expect_exit 0 "$DETCHECK" diff --accept-layout-state "$MC/ds_zero1_dp1" "$MC/ds_zero2_dp2_universal"
expect_grep "Result: equal (40 tensors, 40 equal, 5 not compared (accepted))" out.txt
# ZeRO-3 trained differently in the last bits (fixtures README): no false "identical"
expect_exit 1 "$DETCHECK" verify --golden ds_zero2_dp2.yaml "$MC/ds_zero3_dp2"
expect_grep "differs  module.0.bias" out.txt

# ---- damaged inputs: exit 2, the message naming the file
mk() { rm -rf "$1" && cp -r "$MC/$2" "$1" && chmod -R u+w "$1"; }
mk trunc ds_zero2_dp2
f=trunc/global_step3/zero_pp_rank_1_mp_rank_00_optim_states.pt
head -c 20000 "$f" > t && mv t "$f"
expect_exit 2 "$DETCHECK" hash trunc
expect_grep "zero_pp_rank_1_mp_rank_00_optim_states.pt" err.txt

mk missing ds_zero2_dp2
rm missing/global_step3/zero_pp_rank_1_mp_rank_00_optim_states.pt
expect_exit 2 "$DETCHECK" hash missing
expect_grep "zero_pp_rank_1_mp_rank_00_optim_states.pt is missing (partition_count 2 in .*zero_pp_rank_0_mp_rank_00_optim_states.pt)" err.txt

mk missing3 ds_zero3_dp2
rm missing3/global_step3/zero_pp_rank_1_mp_rank_00_model_states.pt
expect_exit 2 "$DETCHECK" hash missing3
expect_grep "zero_pp_rank_1_mp_rank_00_model_states.pt is missing" err.txt

# rank 1's file from the DP1 checkpoint: a partition of 5328 elements where
# the others hold 2664
mk sizes ds_zero2_dp2
cp "$MC/ds_zero1_dp1/global_step3/zero_pp_rank_0_mp_rank_00_optim_states.pt" \
    sizes/global_step3/zero_pp_rank_1_mp_rank_00_optim_states.pt
expect_exit 2 "$DETCHECK" hash sizes
expect_grep "zero_pp_rank_1_mp_rank_00_optim_states.pt: optimizer_state_dict.single_partition_of_fp32_groups.0 has 5328 elements, DeepSpeed's partition of param_shapes 2664 (inconsistent partition sizes)" err.txt

# an extra rank beyond partition_count
mk extra ds_zero2_dp2
cp extra/global_step3/zero_pp_rank_1_mp_rank_00_optim_states.pt extra/global_step3/zero_pp_rank_2_mp_rank_00_optim_states.pt
expect_exit 2 "$DETCHECK" hash extra
expect_grep "partition_count 2, but there are files of rank 2" err.txt

mk badtag ds_zero2_dp2
echo global_step9 > badtag/latest
expect_exit 2 "$DETCHECK" hash badtag
expect_grep "badtag/latest names global_step9" err.txt

# param_shapes against what is stored (detcheck-formats(7), DeepSpeed): ds_zero2_dp2's last
# parameter 4.bias (64,) said to be (61,): 3 real elements would be taken for
# the 2 x ranks padding and never compared. patch_pkl FILE REGEX [HEX]: in the
# pickle, the first match of REGEX (its group 1 a BININT1 size byte) becomes
# HEX (3d: 61), in place, the zip's CRCs set again (ds_zip_edit.py).
ZE="$DCK_TOP/tests/cli/ds_zip_edit.py"
patch_pkl() { python3 "$ZE" "$1" byte "$2" "${3:-3d}" || fail "patch_pkl $*"; }
ms=global_step3/mp_rank_00_model_states.pt
mk shape61 ds_zero2_dp2
patch_pkl "shape61/$ms" '4\.bias.{4}K(@)\x85.{2}\x85.{2}R'   # param_shapes' torch.Size((64,))
expect_exit 2 "$DETCHECK" hash shape61
expect_grep "mp_rank_00_model_states.pt: param_shapes says 4.bias is \[61\], the module's tensor is \[64\]" err.txt
# the module's tensor cut to (61,) as well: the partitions' 64 elements still
# say otherwise (rank 1's group_paddings is 0, not 3)
mk both61 ds_zero2_dp2
patch_pkl "both61/$ms" '4\.bias.{4}K(@)\x85.{2}\x85.{2}R'
patch_pkl "both61/$ms" '4\.bias.*?K(@)\x85.{2}K\x01\x85'   # the module tensor's size (64,), stride (1,)
expect_exit 2 "$DETCHECK" hash both61
expect_grep "zero_pp_rank_1_mp_rank_00_optim_states.pt: group_paddings of group 0 is not 3, the padding of rank 1's partition of 2664 elements when the parameters of param_shapes (.*mp_rank_00_model_states.pt) take 5325" err.txt
expect_exit 2 "$DETCHECK" diff "$MC/ds_zero2_dp2" both61
# the universal form: each parameter's state has the module tensor's shape
mk uni61 ds_zero2_dp2_universal
patch_pkl "uni61/global_step3_universal/mp_rank_00_model_states.pt" '4\.bias.*?K(@)\x85.{2}K\x01\x85'
expect_exit 2 "$DETCHECK" hash uni61
expect_grep "zero/4.bias/[a-z_0-9]*.pt: \[64\], the module's tensor 4.bias is \[61\] (.*mp_rank_00_model_states.pt)" err.txt

# ZeRO-3 (detcheck-formats(7), DeepSpeed): each parameter cut into ceil(numel / ranks) per rank,
# and nothing but param_shapes says where it ends (the module holds empty
# placeholders), so what param_shapes calls padding in the Adam moments
# (zero as DeepSpeed writes them) is reported and compared, as
# deepspeed.zero3_padding.NAME: a param_shapes shortened by up to ranks - 1
# (the same in both copies) cannot hide a real change there. The fp32
# partitions' padding is torch.empty's: never digested.
# ds_zero3_dp2's padding-free sizes report none (40 tensors above);
# z3_dp3_f32 (prime sizes, DP 3) reports each parameter's, of DeepSpeed's
# sizes (w1: 77 elements in 3 x 26, b1 and ln: 7 in 3 x 3).
"$DETCHECK" hash -q -o z3.yaml "$DP/z3_dp3_f32" || fail "hash z3_dp3_f32"
expect_grep '{name: deepspeed.zero3_padding.optimizer.state.exp_avg.w1, group: optimizer, dtype: F32, shape: \[1\]' z3.yaml
expect_no_grep 'deepspeed.zero3_padding.optimizer.state.fp32_param' z3.yaml
expect_no_grep 'deepspeed.zero3_padding.module' z3.yaml
expect_grep '{name: deepspeed.zero3_padding.optimizer.state.exp_avg_sq.ln, group: optimizer, dtype: F32, shape: \[2\]' z3.yaml
[ "$(grep -c '^- {name: deepspeed.zero3_padding\.' z3.yaml)" -eq 10 ] || fail "z3_dp3_f32: not 10 padding tensors"
ok
# 4.bias (64,) said to be (63,) in both ranks' model files; in lie2 also
# exp_avg's element 63 of 4.bias (the last of rank 1's flat group) changed
mk lie ds_zero3_dp2
for r in 0 1; do
    patch_pkl "lie/global_step3/zero_pp_rank_${r}_mp_rank_00_model_states.pt" '4\.bias.{4}K(@)\x85.{2}\x85.{2}R' 3f
done
cp -r lie lie2
python3 "$ZE" lie2/global_step3/zero_pp_rank_1_mp_rank_00_optim_states.pt elem \
    optimizer_state_dict.optimizer_state_dict.state.0.exp_avg 2663 || fail "edit lie2"
"$DETCHECK" hash -q -o lie.yaml lie || fail "hash lie"
expect_grep '{name: module.4.bias, group: weights, dtype: F32, shape: \[63\]' lie.yaml
expect_grep '{name: deepspeed.zero3_padding.optimizer.state.exp_avg.4.bias, group: optimizer, dtype: F32, shape: \[1\]' lie.yaml
expect_exit 1 "$DETCHECK" diff lie lie2
expect_grep "^differ  deepspeed.zero3_padding.optimizer.state.exp_avg.4.bias " out.txt
expect_exit 1 "$DETCHECK" verify --golden lie.yaml lie2
expect_grep "differs  deepspeed.zero3_padding.optimizer.state.exp_avg.4.bias" out.txt
expect_exit 0 "$DETCHECK" diff lie lie
# z3_dp3_f32, DP 3: b2 (5,) said to be (4,); in z3lie2 element 4 of b2's
# exp_avg (rank 2's, at 12 of group 1) changed
mkd() { rm -rf "$1" && cp -r "$DP/$2" "$1" && chmod -R u+w "$1"; }
mkd z3lie z3_dp3_f32
for r in 0 1 2; do
    m="z3lie/global_step3/zero_pp_rank_${r}_mp_rank_00_model_states.pt"
    patch_pkl "$m" 'param_shapes.*?h\(hLK(\x05)\x85' 04
done
cp -r z3lie z3lie2
python3 "$ZE" z3lie2/global_step3/zero_pp_rank_2_mp_rank_00_optim_states.pt elem \
    optimizer_state_dict.optimizer_state_dict.state.1.exp_avg 12 || fail "edit z3lie2"
"$DETCHECK" hash -q -o z3lie.yaml z3lie || fail "hash z3lie"
expect_grep '{name: module.b2, group: weights, dtype: F32, shape: \[4\]' z3lie.yaml
expect_exit 1 "$DETCHECK" verify --golden z3lie.yaml z3lie2
expect_grep "differs  deepspeed.zero3_padding.optimizer.state.exp_avg.b2" out.txt
expect_grep "40 of 41 golden tensors identical" out.txt
expect_exit 1 "$DETCHECK" diff z3lie z3lie2
# another layout (ZeRO-2 at DP 3): the padding is layout state, set aside
# and named, never part of an OK without --accept-layout-state
"$DETCHECK" hash -q -o z2dp3.yaml "$DP/z2_dp3_f32" || fail "hash z2_dp3_f32"
expect_exit 1 "$DETCHECK" verify --golden z2dp3.yaml "$DP/z3_dp3_f32" --exclude 'optimizer.*' --exclude 'module.*'
expect_grep "layout   deepspeed.zero3_padding.optimizer.state.exp_avg.b1 (in checkpoint only)" out.txt
expect_grep "^NOT COMPARED: " out.txt

# tensor parallelism and pipeline stages are refused, not misread
mk tp ds_zero2_dp2
cp tp/global_step3/mp_rank_00_model_states.pt tp/global_step3/mp_rank_01_model_states.pt
expect_exit 2 "$DETCHECK" hash tp
expect_grep "mp_rank_01_model_states.pt: model-parallel rank 1" err.txt

done_ok

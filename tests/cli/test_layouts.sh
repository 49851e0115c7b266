# CLI: the checkpoint layouts people have (detcheck-formats(7), FORMATS, NAMES), read from real files in
# tests/fixtures/layouts/ (written by tests/fixtures/make_fixtures.py with
# transformers, Accelerate and PyTorch): .bin shards behind
# pytorch_model.bin.index.json, groups by file role (Trainer checkpoint-N/,
# Accelerate save_state), folders whose files share names (per-rank optimizer
# files, model.pt + optim.pt; a hand-written DeepSpeed global_stepN/ without
# param_shapes is refused by the DeepSpeed reader), a snapshot with both safetensors and
# .bin weights, complex tensors in every reader, NaN-only differences, tied
# weights and --ignore-aliases / --exclude.
. "$DCK_TOP/tests/cli/lib.sh"
L="$DCK_TOP/tests/fixtures/layouts"
[ -d "$L" ] || fail "fixtures $L missing"

jget() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); t={x['name']:x for x in d['tensors']}; print($2)" "$1"; }
expect_eq() { [ "$1" = "$2" ] || fail "got '$1', wanted '$2' ($3)"; ok; }
# digest NAME MANIFEST: the digest of tensor NAME in a YAML manifest
digest() { grep -F "{name: $1, " "$2" | sed 's/.*digest: \([0-9a-f]*\)}.*/\1/'; }
# group NAME MANIFEST
group() { grep -F "{name: $1, " "$2" | sed 's/.*group: \([a-z]*\),.*/\1/'; }

# ---- 1. pytorch_model.bin.index.json: .bin shards read by content
expect_exit 0 "$DETCHECK" hash -o bin.yaml "$L/hf_bin/pytorch_model.bin.index.json"
expect_grep "17 tensors" err.txt
expect_exit 0 "$DETCHECK" hash -o st.yaml "$L/hf_bin.safetensors"
[ "$(digest transformer.h.0.attn.c_attn.weight bin.yaml)" = "$(digest transformer.h.0.attn.c_attn.weight st.yaml)" ] ||
    fail "a .bin shard's tensor has another digest than the safetensors one"
ok
# the folder reads its index (and the same shards)
expect_exit 0 "$DETCHECK" hash -o dir.yaml "$L/hf_bin"
[ "$(grep '^root' dir.yaml)" = "$(grep '^root' bin.yaml)" ] || fail "folder and index give other roots"
ok
# a damaged shard, a shard the index names that is not there: exit 2 naming it
mkdir bad && cp "$L"/hf_bin/* bad/
head -c 3000 "$L/hf_bin/pytorch_model-00001-of-00003.bin" > bad/pytorch_model-00001-of-00003.bin
expect_exit 2 "$DETCHECK" hash bad/pytorch_model.bin.index.json
expect_grep "pytorch_model-00001-of-00003.bin" err.txt
rm bad/pytorch_model-00002-of-00003.bin
cp "$L/hf_bin/pytorch_model-00001-of-00003.bin" bad/
expect_exit 2 "$DETCHECK" hash bad/pytorch_model.bin.index.json
expect_grep "pytorch_model-00002-of-00003.bin" err.txt

# ---- 2. groups by file role: Trainer checkpoint-N/, Accelerate save_state
expect_exit 0 "$DETCHECK" hash -o tr.yaml "$L/trainer/checkpoint-1"
expect_eq "$(group cpu tr.yaml) $(group numpy.1 tr.yaml) $(group state.0.step tr.yaml) $(group state.0.exp_avg tr.yaml) $(group transformer.wte.weight tr.yaml)" \
    "rng rng optimizer optimizer weights" "Trainer groups"
expect_no_grep "skipped: model.safetensors" err.txt
mkdir b && cp "$L"/trainer/checkpoint-1/* b/ && cp "$L/trainer_rng_b/rng_state.pth" b/
expect_exit 0 "$DETCHECK" diff --group weights "$L/trainer/checkpoint-1" b
expect_grep "Result: equal" out.txt
expect_exit 0 "$DETCHECK" diff --group optimizer "$L/trainer/checkpoint-1" b
expect_exit 1 "$DETCHECK" diff "$L/trainer/checkpoint-1" b
expect_grep "First differing tensor: cpu" out.txt
expect_grep "rng 1/" out.txt
expect_grep "weights 0/16 differ" out.txt
expect_exit 0 "$DETCHECK" hash -o acc.yaml "$L/accelerate"
expect_eq "$(group torch_manual_seed acc.yaml) $(group state.3.exp_avg_sq acc.yaml) $(group state.3.step acc.yaml) $(group transformer.h.0.ln_1.bias acc.yaml)" \
    "rng optimizer optimizer weights" "Accelerate groups"

# ---- 3. folders whose files share names: a namespace per file, only then
# A DeepSpeed global_stepN/ is read by its own reader (test_deepspeed_fixtures.sh),
# which needs the param_shapes this hand-written one lacks: exit 2, naming it.
expect_exit 2 "$DETCHECK" hash "$L/deepspeed/global_step2"
expect_grep "global_step2/mp_rank_00_model_states.pt: no param_shapes" err.txt
# The same files under other names: a folder of torch.save files that share names.
mkdir ds && cp "$L/deepspeed/global_step2/mp_rank_00_model_states.pt" ds/model_states.pt
for r in 0 1; do cp "$L/deepspeed/global_step2/zero_pp_rank_${r}_mp_rank_00_optim_states.pt" ds/optim_rank$r.pt; done
expect_exit 0 "$DETCHECK" hash -o ds.yaml ds
expect_grep "optim_rank0.pt: its names are read as optim_rank0\.\*" err.txt
expect_grep "name: optim_rank1.optimizer_state_dict.base_optimizer_state.state.0.step," ds.yaml
expect_grep "name: module.transformer.wte.weight," ds.yaml   # no collision: no prefix
expect_no_grep "name: model_states\." ds.yaml
expect_exit 0 "$DETCHECK" hash -o mo.yaml "$L/model_optim"
expect_grep "model.step" mo.yaml
expect_grep "optim.step" mo.yaml
expect_grep "optim.pt: its names are read as optim" err.txt
# the trainer folder has no collision: names as they are (checked above: cpu)
# a collision that the stems cannot resolve: both files named in the message
mkdir same && cp "$L/model_optim/model.pt" same/model.pt && cp "$L/model_optim/model.pt" same/model.bin
expect_exit 2 "$DETCHECK" hash same
expect_grep "model.bin" err.txt
expect_grep "model.pt" err.txt

# ---- 4. a snapshot with model.safetensors and pytorch_model.bin
expect_exit 0 "$DETCHECK" hash -o snap.yaml "$L/hf_snapshot"
expect_grep "pytorch_model.bin: skipped: model.safetensors preferred, as transformers loads it; its weights were not compared" err.txt
expect_exit 0 "$DETCHECK" hash -o snapst.yaml "$L/hf_snapshot/model.safetensors"
[ "$(grep '^root' snap.yaml)" = "$(grep '^root' snapst.yaml)" ] || fail "snapshot root is not model.safetensors's"
ok
expect_exit 0 "$DETCHECK" hash -q -o snap.yaml "$L/hf_snapshot"
expect_no_grep "skipped" err.txt
expect_exit 0 "$DETCHECK" verify --golden snapst.yaml "$L/hf_snapshot"
expect_grep "skipped: model.safetensors" err.txt
# the .bin file alone is still read
expect_exit 0 "$DETCHECK" hash -o snapbin.yaml "$L/hf_snapshot/pytorch_model.bin"
expect_grep "lm_head.weight" snapbin.yaml

# ---- 5. complex64 / complex128 in every reader
for f in complex.pt complex.npy complex.npz complex.safetensors complex_dcp; do
    expect_exit 0 "$DETCHECK" hash -o "c-$f.yaml" "$L/$f"
done
c64=$(digest c64 c-complex.pt.yaml)
[ -n "$c64" ] && grep -q "{name: c64, group: weights, dtype: C64, shape: \[3, 4\]" c-complex.pt.yaml || fail "C64 in .pt"
ok
expect_eq "$(digest c64 c-complex.safetensors.yaml) $(digest complex c-complex.npy.yaml) $(digest c64_be c-complex.npz.yaml) $(digest c64 c-complex_dcp.yaml)" \
    "$c64 $c64 $c64 $c64" "C64 digests of every reader"
expect_eq "$(digest c128 c-complex.npz.yaml) $(digest c128 c-complex_dcp.yaml)" \
    "$(digest c128 c-complex.pt.yaml) $(digest c128 c-complex.pt.yaml)" "C128 digests"
expect_eq "$(digest c64_t c-complex.safetensors.yaml) $(digest c64_row c-complex.safetensors.yaml)" \
    "$(digest c64_t c-complex.pt.yaml) $(digest c64_row c-complex.pt.yaml)" "complex views"
expect_exit 0 "$DETCHECK" verify --golden c-complex.pt.yaml "$L/complex.pt"
# diff: complex elements as their real and imaginary parts
expect_exit 0 "$DETCHECK" diff --exclude c128 "$L/complex.pt" "$L/complex.safetensors"
python3 - "$L/complex.safetensors" <<'PY'
import json, struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
s = 8 + n + h["c64"]["data_offsets"][0]
v = struct.unpack_from("<f", b, s + 8 * 5 + 4)[0]           # element [1, 1], imaginary part
struct.pack_into("<I", b, s + 8 * 5 + 4, struct.unpack("<I", struct.pack("<f", v))[0] + 2)
open("edited.safetensors", "wb").write(b)
PY
expect_exit 1 "$DETCHECK" diff --json "$L/complex.safetensors" edited.safetensors
expect_eq "$(jget out.txt "t['c64']['diff_count'], t['c64']['count'], t['c64']['max_ulp'], t['c64']['first_index'], t['c64']['dtype']")" \
    "1 24 2 [1, 1] C64" "complex diff"

# ---- 6. NaN-only differences: no 0 that reads as "same"
expect_exit 1 "$DETCHECK" diff "$L/nan_a.safetensors" "$L/nan_b.safetensors"
expect_grep "^differ  *w  *F32  *\[4\]  *1/4  *-  *-  *-  *-  *\[1\]$" out.txt
expect_grep "NaN vs number: 1" out.txt
expect_exit 1 "$DETCHECK" diff --json "$L/nan_a.safetensors" "$L/nan_b.safetensors"
expect_eq "$(jget out.txt "t['w']['max_abs'], t['w']['max_rel'], t['w']['rel_l2'], t['w']['max_ulp'], t['w']['nan_vs_number'], t['w']['diff_count']")" \
    "None None None None 1 1" "NaN-only JSON"
expect_exit 1 "$DETCHECK" diff --top 1 "$L/nan_a.safetensors" "$L/nan_b.safetensors"
expect_grep "1\. w  *max_ulp -  max_abs -  differ 1  (NaN differences)" out.txt
# the per-layer line too: a layer whose only difference is a NaN has no max ULP
python3 - <<'PY'
import json, struct
def st(path, vals):
    data = struct.pack("<4f", *vals)
    h = json.dumps({"layers.0.w": {"dtype": "F32", "shape": [4], "data_offsets": [0, len(data)]}}).encode()
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + data)
st("layer_a.safetensors", [1, 2, 3, 4])
st("layer_b.safetensors", [1, float("nan"), 3, 4])
PY
expect_exit 1 "$DETCHECK" diff layer_a.safetensors layer_b.safetensors
expect_grep "^  layers.0  *1/1 tensors differ, max ULP - (NaN only)$" out.txt
expect_exit 1 "$DETCHECK" diff --json layer_a.safetensors layer_b.safetensors
expect_eq "$(python3 -c "import json; print(json.load(open('out.txt'))['layers'][0]['max_ulp'])")" "None" "NaN-only layer JSON"

# ---- 7. tied weights: the extra tensor shares storage; --ignore-aliases, --exclude
expect_exit 1 "$DETCHECK" verify --golden st.yaml "$L/hf_bin/pytorch_model.bin.index.json"
expect_grep "extra    lm_head.weight (in checkpoint, not in golden; shares storage with transformer.wte.weight" out.txt
expect_exit 1 "$DETCHECK" verify --json --golden st.yaml "$L/hf_bin"
expect_eq "$(python3 -c "import json; d = json.load(open('out.txt')); print(d['differences'][0]['alias_of'])")" \
    "transformer.wte.weight" "verify JSON alias_of"
expect_exit 0 "$DETCHECK" verify --ignore-aliases --golden st.yaml "$L/hf_bin"
expect_exit 0 "$DETCHECK" verify --exclude 'lm_head.*' --golden st.yaml "$L/hf_bin"
# an OK says what --exclude left out of it
expect_grep "^OK: .*; left out by --exclude: 'lm_head\.\*'$" out.txt
expect_exit 1 "$DETCHECK" verify --exclude 'nothing*' --golden st.yaml "$L/hf_bin"
# a manifest on the checkpoint side cannot tell: plain "extra"
expect_exit 1 "$DETCHECK" verify --golden st.yaml bin.yaml
expect_grep "extra    lm_head.weight (in checkpoint, not in golden)$" out.txt
expect_exit 1 "$DETCHECK" diff "$L/hf_bin.safetensors" "$L/hf_bin"
expect_grep "^missing_in_a  lm_head.weight" out.txt
expect_grep "shares storage with transformer.wte.weight" out.txt
expect_exit 1 "$DETCHECK" diff --json "$L/hf_bin.safetensors" "$L/hf_bin"
expect_eq "$(jget out.txt "t['lm_head.weight']['alias_of']")" "transformer.wte.weight" "diff JSON alias_of"
expect_exit 0 "$DETCHECK" diff --ignore-aliases "$L/hf_bin.safetensors" "$L/hf_bin"
expect_exit 0 "$DETCHECK" diff --exclude 'lm_head.*' st.yaml "$L/hf_bin"
# usage: hash takes neither; an empty glob
expect_exit 2 "$DETCHECK" hash --exclude x "$L/nan_a.safetensors"
expect_grep "exclude is for verify and diff" err.txt
expect_exit 2 "$DETCHECK" verify --exclude '' --golden st.yaml "$L/hf_bin"
done_ok

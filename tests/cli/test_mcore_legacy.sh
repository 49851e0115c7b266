# CLI: legacy Megatron-LM trees (--ckpt-format torch: iter_N/mp_rank_TT[_PPP]/
# model_optim_rng.pt) written with the real megatron-core 0.15.3 GPTModel
# (tests/fixtures/mcore/legacy_*, tests/fixtures/make_mcore_legacy.py): TP1,
# TP2, TP2 x PP2 and a SwiGLU TP2. Hashed as a user would (merging is the
# default), every layout gives the logical weights whose sha256 the
# generator took from torch (manifest.json; the bytes are in
# legacy_logical.safetensors, checked here); a TP2 and a TP2 x PP2 tree
# verify against a TP1 golden, the per-rank optimizer and RNG state listed
# as not compared (exit 0 only with --accept-layout-state); --tp-split overrides the built-in rules, a wrong rule
# fails; damaged trees are exit 2 naming the file. Python: standard library.
. "$DCK_TOP/tests/cli/lib.sh"
MC="$DCK_TOP/tests/fixtures/mcore"
[ -d "$MC/legacy_tp1" ] || fail "fixtures $MC/legacy_* absent"
command -v python3 > /dev/null || skip "python3 absent"

# The reference files hold exactly the manifests' logical tensors (same bytes).
check_reference() { # check_reference FILE.safetensors FIXTURE
    python3 "$DCK_TOP/tests/cli/ref_matches_manifest.py" "$MC/$1" "$MC/$2/manifest.json" 29 || fail "$1 vs $2/manifest.json"
    ok
}
for f in legacy_tp1 legacy_tp2 legacy_tp2pp2; do check_reference legacy_logical.safetensors $f; done
check_reference legacy_swiglu_logical.safetensors legacy_tp2_swiglu

"$DETCHECK" hash -q --json "$MC/legacy_logical.safetensors" > ref.json || fail "hash legacy_logical.safetensors"
"$DETCHECK" hash -q --json "$MC/legacy_swiglu_logical.safetensors" > ref_glu.json || fail "hash legacy_swiglu_logical.safetensors"
ok

# The 29 weights of a hashed tree (JSON GOT) against a reference (JSON REF):
# same names, dtypes, shapes, digests; no weight under a rank directory.
# MODE "differ GLOB": the tensors matching GLOB must differ instead.
weights_are() { # weights_are REF GOT LABEL [differ GLOB]
    python3 - "$@" <<'EOF' || fail "$3: weights differ from the reference"
import fnmatch, json, sys
def load(p):
    return {t['name']: (t['dtype'], t['shape'], t['digest']) for t in json.load(open(p))['tensors']}
ref, got, label = load(sys.argv[1]), load(sys.argv[2]), sys.argv[3]
differ = sys.argv[5] if len(sys.argv) > 5 else None
model = {k: v for k, v in got.items() if k.startswith('model.')}
assert len(ref) == 29 and sorted(model) == sorted(ref), (label, sorted(set(model) ^ set(ref))[:5])
ranked = [k for k in got if k.startswith('mp_rank_') and '.model.' in k]
assert not ranked, (label, 'weights under rank directories', ranked[:3])
bad = []
for k in sorted(ref):
    must_differ = differ is not None and fnmatch.fnmatch(k, differ)
    same = got[k] == ref[k]
    if same == must_differ:
        bad.append((k, ref[k], got[k]))
assert not differ or any(fnmatch.fnmatch(k, differ) for k in ref), (label, 'nothing matches', differ)
for b in bad[:5]: print(label, 'wrong:', b)
sys.exit(1 if bad else 0)
EOF
    ok
}

# Hashed as the README tells a user: merged, every layout the logical weights
for f in legacy_tp1 legacy_tp2 legacy_tp2pp2; do
    "$DETCHECK" hash -q --json "$MC/$f" > $f.json || fail "hash $f"
    weights_are ref.json $f.json $f
done
"$DETCHECK" hash -q --json "$MC/legacy_tp2_swiglu" > glu.json || fail "hash legacy_tp2_swiglu"
weights_are ref_glu.json glu.json legacy_tp2_swiglu
# the common state once, as torch_dist's common.pt names it; RNG per rank
"$DETCHECK" hash -q -o tp2.yaml "$MC/legacy_tp2"
expect_grep '{name: iteration, value: "5"}' tp2.yaml
expect_grep '{name: args.tensor_model_parallel_size, value: "2"}' tp2.yaml
expect_grep '{name: model.decoder.layers.1.mlp.linear_fc1._extra_state, value: "None"}' tp2.yaml
expect_grep 'name: mp_rank_01.rng_state.0.torch_rng_state, group: rng' tp2.yaml
expect_grep 'name: mp_rank_01.optimizer.state.3.exp_avg, group: optimizer, dtype: F32, shape: \[48, 32\]' tp2.yaml
expect_no_grep 'name: mp_rank_01.iteration' tp2.yaml

# A TP1 golden verifies the TP2 and TP2 x PP2 trees: the weights compared,
# the per-rank state (the rank directories stored tell the layouts apart)
# listed as not compared: exit 1, exit 0 with --accept-layout-state
"$DETCHECK" hash -q -o tp1.yaml "$MC/legacy_tp1"
expect_exit 1 "$DETCHECK" verify --golden tp1.yaml "$MC/legacy_tp2"
expect_grep '^NOT COMPARED: [0-9]* entries of layout state against tp1.yaml' out.txt
expect_exit 0 "$DETCHECK" verify --accept-layout-state --golden tp1.yaml "$MC/legacy_tp2"
expect_grep '^OK: ' out.txt
expect_grep 'layouts differ (mp_rank_01 only in the checkpoint)' out.txt
expect_grep 'per rank directory: mp_rank_00.optimizer ([0-9]*), mp_rank_01.optimizer ([0-9]*), mp_rank_01.rng_state ([0-9]*)' out.txt
expect_exit 0 "$DETCHECK" verify --accept-layout-state --golden tp1.yaml "$MC/legacy_tp2pp2"
expect_grep 'layouts differ (mp_rank_00 only in the golden)' out.txt
expect_grep 'mp_rank_01_001.optimizer' out.txt
# JSON: what was not compared is every per-rank entry and no weight
expect_exit 1 "$DETCHECK" verify --json --golden tp1.yaml "$MC/legacy_tp2"
python3 - out.txt <<'EOF' || fail "verify --json: not_compared"
import json, sys
d = json.load(open(sys.argv[1]))
ls = d['layout_state']
names = ls['not_compared']
assert not d['equal'] and ls['layouts_differ'] == 'mp_rank_01 only in the checkpoint', ls['layouts_differ']
assert not [n for n in names if n.startswith('model.')], names
assert 'mp_rank_01.rng_state.0.torch_rng_state' in names and 'mp_rank_00.optimizer.state.3.exp_avg' in names
assert all(n.startswith('mp_rank_') or n.startswith('args.') for n in names), names
EOF
ok
# --require-rank-state compares the per-rank state too: it cannot match
expect_exit 1 "$DETCHECK" verify --require-rank-state --golden tp1.yaml "$MC/legacy_tp2"
expect_grep 'shape    mp_rank_00.optimizer.state.3.exp_avg: \[48, 32\], golden \[96, 32\]' out.txt
# same layout: everything compared, nothing set aside
"$DETCHECK" hash -q -o tp2gold.yaml "$MC/legacy_tp2"
expect_exit 0 "$DETCHECK" verify --golden tp2gold.yaml "$MC/legacy_tp2"
expect_no_grep 'layouts differ' out.txt
# the TP ranks swapped: the split weights change (rank order), which is a
# difference, not per-rank state set aside
cp -r "$MC/legacy_tp2" swapped
mv swapped/iter_0000005/mp_rank_00 swapped/iter_0000005/tmp
mv swapped/iter_0000005/mp_rank_01 swapped/iter_0000005/mp_rank_00
mv swapped/iter_0000005/tmp swapped/iter_0000005/mp_rank_01
expect_exit 1 "$DETCHECK" verify --golden tp1.yaml swapped
expect_grep '  differs  model.decoder.layers.0.self_attention.linear_qkv.weight' out.txt
expect_no_grep '  differs  model.decoder.final_layernorm.weight' out.txt

# --megatron-per-rank: rank directories as saved; against the TP1 golden
# the weights differ loudly (they are not per-rank state)
"$DETCHECK" hash -q --megatron-per-rank -o ranks.yaml "$MC/legacy_tp2"
expect_grep 'name: mp_rank_01.model.decoder.layers.0.mlp.linear_fc1.weight, group: weights, dtype: F32, shape: \[24, 32\]' ranks.yaml
expect_exit 1 "$DETCHECK" verify --megatron-per-rank --golden tp1.yaml "$MC/legacy_tp2"
expect_grep 'extra    mp_rank_01.model.decoder.layers.0.mlp.linear_fc1.weight' out.txt

# SwiGLU (args.swiglu True): linear_fc1 is [gate; up] per rank, merged by
# halves; a --tp-split rule overrides the built-in one (plain
# concatenation: the shape of the logical tensor, not its digest)
"$DETCHECK" hash -q --json --tp-split '*.mlp.linear_fc1.weight=0' "$MC/legacy_tp2_swiglu" > glu_cat.json
weights_are ref_glu.json glu_cat.json "swiglu --tp-split" differ '*.mlp.linear_fc1.weight'
# --tp-split on the plain model: a rule equal to the built-in one changes
# nothing, user rules come first
"$DETCHECK" hash -q --json --tp-split '*.linear_proj.weight=1' --tp-split '*=none' "$MC/legacy_tp2" > user.json 2> err.txt &&
    fail "'*=none' for every tensor merged the split ones"
expect_grep 'replicated tensor model.decoder.layers.0.mlp.linear_fc1.weight differs between tensor-parallel ranks mp_rank_00 and mp_rank_01 (if tensor parallelism splits it, give it a split rule with --tp-split; --megatron-per-rank' err.txt
"$DETCHECK" hash -q --json --tp-split '*.linear_proj.weight=1' "$MC/legacy_tp2" > user.json || fail "hash --tp-split"
weights_are ref.json user.json "legacy_tp2 --tp-split"
# a wrong split rule: verify against the TP1 golden fails (exit 1)
expect_exit 1 "$DETCHECK" verify --golden tp1.yaml --tp-split '*.mlp.linear_fc1.weight=1' "$MC/legacy_tp2"
expect_grep 'shape    model.decoder.layers.0.mlp.linear_fc1.weight: \[24, 64\], golden \[48, 32\]' out.txt
expect_exit 1 "$DETCHECK" verify --golden tp1.yaml --tp-split '*.linear_proj.weight=0' "$MC/legacy_tp2"
expect_grep 'shape    model.decoder.layers.0.self_attention.linear_proj.weight: \[64, 16\], golden \[32, 32\]' out.txt

# Damaged trees: exit 2, the message naming the file or rank directory
cp -r "$MC/legacy_tp2" cut
f=cut/iter_0000005/mp_rank_01/model_optim_rng.pt
head -c 5000 "$MC/legacy_tp2/iter_0000005/mp_rank_01/model_optim_rng.pt" > $f
expect_exit 2 "$DETCHECK" verify --golden tp1.yaml cut
expect_grep 'mp_rank_01/model_optim_rng.pt' err.txt
cp -r "$MC/legacy_tp2pp2" miss
rm -r miss/iter_0000005/mp_rank_01_001
expect_exit 2 "$DETCHECK" hash miss
expect_grep 'rank directory mp_rank_01_001 is missing' err.txt
# a TP1 rank file in a TP2 tree: shards of different shapes
cp -r "$MC/legacy_tp2" mixed
cp "$MC/legacy_tp1/iter_0000005/mp_rank_00/model_optim_rng.pt" mixed/iter_0000005/mp_rank_01/model_optim_rng.pt
expect_exit 2 "$DETCHECK" verify --golden tp1.yaml mixed
expect_grep 'tensor model.decoder.layers.0.mlp.linear_fc1.bias, split along dimension 0 by rule .*.mlp.linear_fc1.bias=0., is F32 \[24\] in mp_rank_00 but F32 \[48\] in mp_rank_01' err.txt
rm mixed/iter_0000005/mp_rank_01/model_optim_rng.pt
expect_exit 2 "$DETCHECK" hash mixed
expect_grep 'mp_rank_01: rank directory without .pt files' err.txt
done_ok

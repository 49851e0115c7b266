# CLI: hash, verify and diff on PyTorch (.pt zip, legacy), DCP, Megatron and
# NumPy checkpoints from tests/fixtures (written by real PyTorch), against the
# same tensors as safetensors; zstd copies; --iteration; values; Megatron
# merging (the default; --tp-split, --megatron-per-rank); damaged files.
. "$DCK_TOP/tests/cli/lib.sh"
FX="$DCK_TOP/tests/fixtures"

# tensor lines "name dtype shape digest", sorted (no file lines, no groups)
tensors() { sed -n 's/^- {name: \([^,]*\), group: [a-z]*, \(dtype: .*\)}$/\1 \2/p' "$1" | sort; }

same_as_safetensors() { # same_as_safetensors PATH BASE [HASH OPTION]
    "$DETCHECK" hash -q ${3:+"$3"} "$1" > a.yaml || fail "hash $1"
    "$DETCHECK" hash -q "$FX/$2.safetensors" > b.yaml || fail "hash $2.safetensors"
    tensors a.yaml > a.t
    tensors b.yaml > b.t
    [ -s a.t ] || fail "no tensors from $1"
    cmp -s a.t b.t || { diff a.t b.t; fail "$1 and $2.safetensors differ"; }
    ok
}

same_as_safetensors "$FX/training.pt" training
same_as_safetensors "$FX/dtypes.pt" dtypes
same_as_safetensors "$FX/dtypes_proto4.pt" dtypes
same_as_safetensors "$FX/views.pt" views
same_as_safetensors "$FX/views_legacy.pt" views
same_as_safetensors "$FX/bigendian.pt" bigendian
same_as_safetensors "$FX/whole_model.pt" whole_model
same_as_safetensors "$FX/arrays.npz" arrays
same_as_safetensors "$FX/arrays_deflated.npz" arrays
same_as_safetensors "$FX/array.npy" array
same_as_safetensors "$FX/dcp1" dcp
same_as_safetensors "$FX/dcp2" dcp
# megatron.safetensors holds the rank directories' tensors as saved
same_as_safetensors "$FX/megatron" megatron --megatron-per-rank
same_as_safetensors "$FX/megatron_dist" megatron_dist

# groups and values in the manifest
"$DETCHECK" hash -q "$FX/training.pt" > t.yaml
expect_grep '{name: optimizer.state.0.exp_avg, group: optimizer' t.yaml
expect_grep '{name: rng_state.0.torch_rng_state, group: rng, dtype: U8' t.yaml
expect_grep '{name: rng_state.0.np_rng_state.1, group: rng, dtype: U32, shape: \[624\]' t.yaml
expect_grep '{name: epoch, value: "3"}' t.yaml
expect_grep '{name: optimizer.param_groups.0.betas.1, value: "0.999"}' t.yaml
expect_grep '{name: rng_state.0.random_rng_state.1, value: "(' t.yaml
expect_grep '{path: training.pt, bytes:' t.yaml

# 1 rank and 2 ranks: the same root digest
"$DETCHECK" hash -q "$FX/dcp1" > d1.yaml
"$DETCHECK" hash -q "$FX/dcp2" > d2.yaml
[ "$(grep '^root:' d1.yaml)" = "$(grep '^root:' d2.yaml)" ] || fail "dcp1 and dcp2 roots differ"
ok

# zstd-compressed files hash like the originals
zstd -q "$FX/training.pt" -o training.pt.zst
zstd -q "$FX/arrays.npz" -o arrays.npz.zst
same_as_safetensors training.pt.zst training
same_as_safetensors arrays.npz.zst arrays

# a Megatron tree whose .pt files are all zstd-compressed: the same manifest
cp -r "$FX/megatron" mgz
find mgz -name '*.pt' -exec zstd -q --rm {} \;
[ -e mgz/iter_0000020/mp_rank_00/model_optim_rng.pt.zst ] || fail "zstd copy"
"$DETCHECK" hash -q --no-files mgz | grep -v -e '^created:' -e '^source:' > z1.yaml
"$DETCHECK" hash -q --no-files "$FX/megatron" | grep -v -e '^created:' -e '^source:' > z2.yaml
cmp -s z1.yaml z2.yaml || { diff z1.yaml z2.yaml | head; fail "zstd Megatron tree differs"; }
ok

# verify: the same checkpoint passes, a copy in another place too
"$DETCHECK" hash -q -o golden.yaml "$FX/training.pt"
expect_exit 0 "$DETCHECK" verify --golden golden.yaml "$FX/training.pt"
expect_exit 0 "$DETCHECK" verify --golden golden.yaml training.pt.zst

# Megatron: latest iteration, --iteration, and changed RNG state / values fail
"$DETCHECK" hash -q -o mg.yaml "$FX/megatron"
expect_grep '{name: megatron.iteration, value: "20"}' mg.yaml
expect_exit 0 "$DETCHECK" hash -q --iteration 10 -o mg10.yaml "$FX/megatron"
expect_grep '{name: iteration, value: "10"}' mg10.yaml
expect_exit 2 "$DETCHECK" hash -q --iteration 30 "$FX/megatron"
expect_grep 'iter_0000030' err.txt
expect_exit 2 "$DETCHECK" hash --iteration x "$FX/megatron"
expect_exit 1 "$DETCHECK" verify --golden mg.yaml --iteration 10 "$FX/megatron"
expect_grep 'iteration' out.txt
cp -r "$FX/megatron" mg
# rank 1's file in rank 0's place: weights and RNG state of rank 0 change
cp mg/iter_0000020/mp_rank_01/model_optim_rng.pt mg/iter_0000020/mp_rank_00/model_optim_rng.pt
expect_exit 1 "$DETCHECK" verify --golden mg.yaml mg
expect_grep 'mp_rank_00.rng_state.0.torch_rng_state' out.txt

# --distributed under mpirun: the same manifest (decoded bytes, the NumPy
# key, are hashed by the ranks like file bytes)
if command -v mpirun > /dev/null; then
    mpirun --oversubscribe -np 2 "$DETCHECK" hash -q --distributed "$FX/training.pt" | grep -v '^created:' > m2.yaml
    "$DETCHECK" hash -q "$FX/training.pt" | grep -v '^created:' > m1.yaml
    cmp -s m1.yaml m2.yaml || { diff m1.yaml m2.yaml | head; fail "distributed hash of training.pt differs"; }
    ok
else
    skip_part "no mpirun: hash --distributed of training.pt is not tested"
fi

# Megatron TP=2 x PP=2 merged (--megatron-merge, the default): the model built whole
MG="$FX/megatron_tp2pp2"
"$DETCHECK" hash -q --megatron-merge "$MG" > tp.yaml || fail "hash --megatron-merge"
tensors tp.yaml > tp.t
"$DETCHECK" hash -q "$FX/megatron_tp2pp2.safetensors" > whole.yaml
tensors whole.yaml > whole.t
[ -s tp.t ] || fail "no tensors from the merged tree"
cmp -s tp.t whole.t || { diff tp.t whole.t; fail "merged tree and megatron_tp2pp2.safetensors differ"; }
ok
expect_grep 'name: model.language_model.encoder.layers.2.mlp.dense_4h_to_h.weight, group: weights, dtype: F32, shape: \[4, 8\]' tp.yaml
# the common state once (every rank holds the same), optimizer state per rank
expect_grep '{name: iteration, value: "7"}' tp.yaml
expect_no_grep 'name: mp_rank_01_001.iteration' tp.yaml
"$DETCHECK" hash -q "$MG" > tpdefault.yaml
tensors tpdefault.yaml > tpdefault.t
cmp -s tp.t tpdefault.t || fail "merging is not the default"
ok
# --megatron-per-rank: per rank directory, local layer numbers and shapes
"$DETCHECK" hash -q --megatron-per-rank "$MG" > ranks.yaml
expect_grep '{name: mp_rank_01_001.iteration, value: "7"}' ranks.yaml
expect_grep 'name: mp_rank_01_001.model.language_model.encoder.layers.0.mlp.dense_4h_to_h.weight, group: weights, dtype: F32, shape: \[4, 4\]' ranks.yaml
expect_no_grep 'name: model\.' ranks.yaml
# zstd-compressed rank files merge the same
cp -r "$MG" tpz
find tpz -name '*.pt' -exec zstd -q --rm {} \;
"$DETCHECK" hash -q --megatron-merge tpz > tpz.yaml
tensors tpz.yaml > tpz.t
cmp -s tpz.t whole.t || { diff tpz.t whole.t | head; fail "zstd merged tree differs"; }
ok
# verify: a golden of the merged tree, merged and per rank
"$DETCHECK" hash -q --megatron-merge -o tpgold.yaml "$MG"
expect_exit 0 "$DETCHECK" verify --golden tpgold.yaml --megatron-merge "$MG"
expect_exit 0 "$DETCHECK" verify --golden tpgold.yaml "$MG"
expect_exit 1 "$DETCHECK" verify --golden tpgold.yaml --megatron-per-rank "$MG"
expect_grep 'missing  model.language_model.embedding.word_embeddings.weight' out.txt
# diff: merged tree vs the whole model: every tensor equal (values exist
# only in the tree, so the exit status is 1); the safetensors file stores
# the tree's per-rank optimizer and RNG state under the same rank names, so
# the stored layouts agree and they are compared (all 62 equal); the args
# that exist only in the tree are claims, set aside (detcheck-formats(7), Layout state)
expect_exit 1 "$DETCHECK" diff --json --megatron-merge "$MG" "$FX/megatron_tp2pp2.safetensors"
expect_grep '"tensors": 62, "equal": 62,' out.txt
expect_grep '"layouts_differ": "args.pipeline_model_parallel_size: 2 vs (none) as claimed; the stored layout is the same, per-rank state compared"' out.txt
python3 - out.txt <<'PYEOF' || fail "diff: per-rank tensors compared, the args set aside"
import json, sys
d = json.load(open(sys.argv[1]))
ls = d['layout_state']
assert ls['tensors_not_compared'] == [] and not ls['accepted'], ls
assert ls['values_not_compared'] and all(x.startswith('args.') for x in ls['values_not_compared']), ls
PYEOF
ok
expect_exit 0 "$DETCHECK" diff --megatron-merge "$MG" tpz
# a replicated tensor that differs between TP ranks: exit 2, named
cp -r "$MG" tprep
cp "$FX/megatron_tp2pp2_bad/replica_differs.pt" tprep/iter_0000007/mp_rank_01_000/model_optim_rng.pt
expect_exit 2 "$DETCHECK" hash --megatron-merge tprep
expect_grep 'replicated tensor model.language_model.encoder.layers.1.input_norm.weight differs between tensor-parallel ranks mp_rank_00_000 and mp_rank_01_000' err.txt
expect_exit 2 "$DETCHECK" diff --megatron-merge "$MG" tprep
expect_grep 'layers.1.input_norm.weight differs' err.txt
expect_exit 2 "$DETCHECK" diff "$MG" tprep
expect_exit 1 "$DETCHECK" diff --megatron-per-rank "$MG" tprep
expect_grep 'mp_rank_01_000.model.language_model.encoder.layers.1.input_norm.weight' out.txt
# shards of different shapes
cp -r "$MG" tpshape
cp "$FX/megatron_tp2pp2_bad/shape_differs.pt" tpshape/iter_0000007/mp_rank_01_000/model_optim_rng.pt
expect_exit 2 "$DETCHECK" verify --golden tpgold.yaml --megatron-merge tpshape
expect_grep 'F32 \[4, 4\] in mp_rank_00_000 but F32 \[3, 4\] in mp_rank_01_000' err.txt
# split rules: user rules first; bad ones are trouble
expect_exit 0 "$DETCHECK" hash -q --megatron-merge --tp-split '*.layers.1.input_norm.weight=0' -o split.yaml "$MG"
expect_grep 'name: model.language_model.encoder.layers.1.input_norm.weight, group: weights, dtype: F32, shape: \[8\]' split.yaml
expect_exit 2 "$DETCHECK" hash --megatron-merge --tp-split '*.mlp.dense_4h_to_h.weight=none' "$MG"
expect_grep 'replicated tensor model.language_model.encoder.layers.0.mlp.dense_4h_to_h.weight differs' err.txt
expect_exit 2 "$DETCHECK" hash --megatron-merge --tp-split 'nodim' "$MG"
expect_grep 'GLOB=DIM' err.txt
expect_exit 2 "$DETCHECK" hash --megatron-merge --tp-split '*.weight=x' "$MG"
expect_grep "split rule '\*.weight=x'" err.txt
expect_exit 2 "$DETCHECK" hash --megatron-merge --tp-split '*.weight=16' "$MG"
expect_grep 'out of range' err.txt
expect_exit 2 "$DETCHECK" hash --megatron-merge --tp-split '*norm.weight=1' "$MG"
expect_grep "split rule '\*norm.weight=1' splits dimension 1 but tensor" err.txt
expect_exit 2 "$DETCHECK" hash --megatron-per-rank --tp-split '*.weight=0' "$MG"
expect_grep 'not with --megatron-per-rank' err.txt
expect_exit 2 "$DETCHECK" diff --tp-split '*.weight=0' --megatron-per-rank "$MG" "$MG"
expect_grep 'not with --megatron-per-rank' err.txt
# the last of --megatron-merge / --megatron-per-rank wins
expect_exit 0 "$DETCHECK" hash -q --megatron-per-rank --megatron-merge -o last.yaml "$MG"
tensors last.yaml > last.t
cmp -s tp.t last.t || fail "--megatron-merge after --megatron-per-rank does not merge"
ok
expect_exit 2 "$DETCHECK" verify --golden tpgold.yaml --megatron-merge --tp-split '=0' "$MG"
expect_grep "split rule '=0'" err.txt
# an incomplete rank grid
cp -r "$MG" tpmiss
rm -r tpmiss/iter_0000007/mp_rank_00_001
expect_exit 2 "$DETCHECK" hash --megatron-merge tpmiss
expect_grep 'rank directory mp_rank_00_001 is missing' err.txt

# diff --iteration: both roots read at the iteration asked for
cp -r "$FX/megatron" mg10
printf '10\n' > mg10/latest_checkpointed_iteration.txt
expect_exit 1 "$DETCHECK" diff "$FX/megatron" mg10
expect_exit 0 "$DETCHECK" diff --iteration 10 "$FX/megatron" mg10
expect_exit 2 "$DETCHECK" diff --iteration 30 "$FX/megatron" mg10
expect_grep 'iter_0000030' err.txt
expect_exit 2 "$DETCHECK" diff --iteration x "$FX/megatron" mg10

# damaged and hostile files: exit 2 and a message naming the file
head -c 1500 "$FX/views.pt" > cut.pt
expect_exit 2 "$DETCHECK" hash cut.pt
expect_grep 'cut.pt' err.txt
head -c 900 "$FX/views_legacy.pt" > cut_legacy.pt
expect_exit 2 "$DETCHECK" hash cut_legacy.pt
expect_grep 'cut_legacy.pt' err.txt
printf '\223NUMPY\001\000\020\000{"descr": "<f4"}' > bad.npy
expect_exit 2 "$DETCHECK" hash bad.npy
expect_grep 'bad.npy' err.txt
mkdir baddcp
printf '\200\002cos\nsystem\n(S%secho pwned > pwned.txt%s\ntR.' "'" "'" > baddcp/.metadata
expect_exit 2 "$DETCHECK" hash baddcp
expect_grep 'not a torch.distributed.checkpoint Metadata' err.txt
[ ! -e pwned.txt ] || fail "the unpickler ran a command"
ok
# a .npy with bytes after its array, and a Megatron root whose latest file
# holds no iteration number, are errors that say so
python3 -c "import sys; d = open(sys.argv[1], 'rb').read(); open('trail.npy', 'wb').write(d + b'xx')" "$FX/array.npy"
expect_exit 2 "$DETCHECK" hash trail.npy
expect_grep "trail.npy: 2 trailing bytes after the array" err.txt
cp -r "$FX/megatron" mgbad
echo 99999999999999999999 > mgbad/latest_checkpointed_iteration.txt
expect_exit 2 "$DETCHECK" hash mgbad
expect_grep "is not an iteration number" err.txt
done_ok

# CLI: hash, verify and diff on PyTorch (.pt zip, legacy), DCP, Megatron and
# NumPy checkpoints from tests/fixtures (written by real PyTorch), against the
# same tensors as safetensors; zstd copies; --iteration; values; damaged files.
. "$DCK_TOP/tests/cli/lib.sh"
FX="$DCK_TOP/tests/fixtures"

# tensor lines "name dtype shape digest", sorted (no file lines, no groups)
tensors() { sed -n 's/^- {name: \([^,]*\), group: [a-z]*, \(dtype: .*\)}$/\1 \2/p' "$1" | sort; }

same_as_safetensors() { # same_as_safetensors PATH BASE
    "$DETCHECK" hash -q "$1" > a.yaml || fail "hash $1"
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
same_as_safetensors "$FX/megatron" megatron
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
"$DETCHECK" hash -q --no-files mgz | grep -v '^created:' > z1.yaml
"$DETCHECK" hash -q --no-files "$FX/megatron" | grep -v '^created:' > z2.yaml
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
expect_grep '{name: mp_rank_00.iteration, value: "10"}' mg10.yaml
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
fi

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
done_ok

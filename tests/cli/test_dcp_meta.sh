# CLI: a DCP .metadata that disagrees with the chunks it describes is
# trouble (exit 2) naming the tensor and the file, never an OK taken from one
# side (detcheck-formats(7), "torch.distributed.checkpoint (DCP) directories").
# DCP's loaders create each tensor from .metadata
# (its dtype, size and chunks) and copy the stored chunk into it, converting
# the dtype: a checkpoint whose .metadata says bfloat16 over float32 chunks
# loads as bf16-rounded values. Each row rewrites a real fixture's
# .metadata with one lie (tests/cli/dcp_meta_edit.py, with torch's own
# Metadata classes) about what the storage also says: dtype, chunk sizes,
# chunk offsets against the global shape (out of bounds, overlap, gaps),
# storage lengths against the chunks and the .distcp files, and the
# storage index against the chunks. Needs torch; skips without it.
. "$DCK_TOP/tests/cli/lib.sh"

# .ci/run points DCK_TORCH_PYTHON at a cached venv with PyTorch (ci/venv.sh torch)
PY=${DCK_TORCH_PYTHON:-python3}
FXD="$DCK_TOP/tests/fixtures"

# fixture  case  the file the message names (-: several)  what it says
cat > rows <<'EOF'
dcp1    dtype_bf16                 __0_0.distcp  chunk of model.bias at byte 7852 is stored as F32, .metadata says BF16
dcp2    dtype_bf16_sharded         __0_0.distcp  chunk of model.w at byte 1641 is stored as F32, .metadata says BF16
dcp2    dtype_f32_of_bf16          __0_0.distcp  chunk of model.emb at byte 3282 is stored as BF16, .metadata says F32
dcp_raw dtype_bf16                 __0_0.distcp  chunk of model.bias at byte 2522 is stored as F32, .metadata says BF16
dcp1    chunk_size                 __0_0.distcp  chunk of model.bias at byte 7852: tensor size differs from metadata
dcp_raw chunk_size_2d              __0_0.distcp  safetensors entry model.w: shape differs from the chunk's
dcp1    global_smaller             __0_0.distcp  tensor model.w: slice along dim 0 \[0, +5) outside global size 4
dcp2    chunk_out_of_bounds        __1_0.distcp  tensor model.w: slice along dim 0 \[4, +2) outside global size 5
dcp2    chunks_overlap             -             tensor model.w: slices in .*/__0_0.distcp and .*/__1_0.distcp overlap
dcp2    chunk_missing              -             tensor model.w: shards cover 21 of its 35 elements (gap; first shard .*/__0_0.distcp)
dcp1    global_larger              -             tensor model.bias: shards cover 7 of its 8 elements (gap; first shard .*/__0_0.distcp)
dcp1    no_chunks                  .metadata     tensor model.bias has no chunks: none of its elements is stored
dcp_raw no_chunks                  .metadata     tensor model.bias has no chunks: none of its elements is stored
dcp2    chunk_missing_storage_kept .metadata     storage_data holds model.w at offset (3, 0) (in __1_0.distcp at byte 4099), which state_dict_metadata does not list
dcp1    stray_storage              .metadata     storage_data holds model.bias at offset (3) (in __0_0.distcp at byte 7852), which state_dict_metadata does not list
dcp1    duplicate_storage          .metadata     storage_data lists model.bias at offset (0) twice
dcp_raw duplicate_storage          .metadata     storage_data lists model.bias at offset (0) twice
dcp1    length_long                __0_0.distcp  chunk of model.bias at byte 7852: its zip does not end at the 1581 bytes that .metadata gives it
dcp1    length_short               __0_0.distcp  chunk of model.bias at byte 7852: its zip does not end at the 1573 bytes that .metadata gives it
dcp_raw length_long                __0_0.distcp  chunk of model.bias at byte 2522: .metadata gives it 32 bytes, its F32 elements need 28
dcp_raw length_short               __0_0.distcp  chunk of model.bias at byte 2522: .metadata gives it 24 bytes, its F32 elements need 28
dcp2    length_beyond_file         __1_0.distcp  truncated: chunk of model.bias needs bytes up to
EOF
# and copies rewritten without a change: they read as the originals, so the
# rewrite itself is not what the rows see. One Python for all (torch loads once).
{ printf '%s none\n' dcp1 dcp2 dcp_raw; echo dcp1 empty_tensor; awk '{print $1, $2}' rows; } > cases
set +e; "$PY" "$DCK_TOP/tests/cli/dcp_meta_edit.py" "$FXD" < cases; rc=$?; set -e
[ "$rc" -ne 77 ] || skip "$PY cannot import torch.distributed.checkpoint: no .metadata to rewrite"
[ "$rc" -eq 0 ] || fail "dcp_meta_edit.py: exit $rc"

for f in dcp1 dcp2 dcp_raw; do expect_exit 0 "$DETCHECK" diff "$FXD/$f" "${f}_none"; done
while read -r f case file msg; do
    expect_exit 2 "$DETCHECK" hash -q "${f}_$case" -o out.yaml
    if [ "$file" = - ]; then
        expect_grep "$msg" err.txt
        expect_grep "${f}_$case/" err.txt
    else
        expect_grep "${f}_$case/$file: $msg" err.txt
    fi
done < rows

# The headline case through diff and verify: trouble, not "equal".
"$DETCHECK" hash -q "$FXD/dcp1" -o dcp1.yaml || fail "hash dcp1"
expect_exit 2 "$DETCHECK" diff "$FXD/dcp1" dcp1_dtype_bf16
expect_grep "model.bias at byte 7852 is stored as F32, .metadata says BF16" err.txt
expect_exit 2 "$DETCHECK" verify dcp1_dtype_bf16 --golden dcp1.yaml
expect_grep "model.bias at byte 7852 is stored as F32, .metadata says BF16" err.txt

# A tensor that .metadata declares is part of the checkpoint, elements or
# none: model.gone, BF16 [0, 4] without chunks (DCP's loaders create it),
# is reported with the digest of an empty BF16 [0, 4] tensor (the same as a
# safetensors file's, detcheck-digest(7)), and one side that lacks it differs.
"$DETCHECK" hash -q dcp1_empty_tensor -o empty.yaml || fail "hash dcp1_empty_tensor"
expect_grep '{name: model.gone, group: weights, dtype: BF16, shape: \[0, 4\], digest: ' empty.yaml
python3 - <<'EOF2' || fail "empty.safetensors"
import json, struct
h = json.dumps({"model.gone": {"dtype": "BF16", "shape": [0, 4], "data_offsets": [0, 0]}}).encode()
open("empty.safetensors", "wb").write(struct.pack("<Q", len(h)) + h)
EOF2
"$DETCHECK" hash -q empty.safetensors -o st.yaml || fail "hash empty.safetensors"
[ "$(grep -o 'name: model.gone.*digest: [0-9a-f]*' st.yaml)" = "$(grep -o 'name: model.gone.*digest: [0-9a-f]*' empty.yaml)" ] ||
    fail "model.gone: the DCP and safetensors digests differ"
ok
expect_exit 1 "$DETCHECK" diff "$FXD/dcp1" dcp1_empty_tensor
expect_grep "model.gone" out.txt
expect_exit 1 "$DETCHECK" diff dcp1_empty_tensor "$FXD/dcp1"
expect_exit 1 "$DETCHECK" verify dcp1_empty_tensor --golden dcp1.yaml
expect_grep "model.gone" out.txt
expect_exit 1 "$DETCHECK" verify "$FXD/dcp1" --golden empty.yaml
expect_grep "model.gone" out.txt
expect_exit 0 "$DETCHECK" verify dcp1_empty_tensor --golden empty.yaml
done_ok

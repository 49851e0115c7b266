# CLI: quantized tensors as PyTorch itself writes them (torch.save of
# quantize_per_tensor / quantize_per_channel results): they hash, their
# quantizer is recorded, and a change of data or scale is seen by diff and
# verify. test_pt_limits.sh covers the same with hand-written pickles; this
# one needs torch and skips without it.
. "$DCK_TOP/tests/cli/lib.sh"

# .ci/run points DCK_TORCH_PYTHON at a cached venv with PyTorch (ci/venv.sh torch)
PY=${DCK_TORCH_PYTHON:-python3}
"$PY" -c "import torch" 2>/dev/null || skip "$PY cannot import torch: no quantized file written by PyTorch"

"$PY" - <<'EOF'
import torch
x = torch.tensor([[0.5, -1.0, 2.0], [3.0, 0.0, -0.25]])
def save(path, t): torch.save({'w': t, 'step': 3}, path)
save('t1.pt', torch.quantize_per_tensor(x, 0.25, 2, torch.qint8))
save('t2.pt', torch.quantize_per_tensor(x + torch.tensor([[0, 0, 0], [0, 0.5, 0]]), 0.25, 2, torch.qint8))
save('t3.pt', torch.quantize_per_tensor(x, 0.5, 2, torch.qint8))
save('u8.pt', torch.quantize_per_tensor(x, 0.25, 10, torch.quint8))
save('i32.pt', torch.quantize_per_tensor(x, 0.25, 0, torch.qint32))
sc = torch.tensor([0.25, 0.5], dtype=torch.float64)
zp = torch.tensor([1, 2], dtype=torch.int64)
save('c1.pt', torch.quantize_per_channel(x, sc, zp, 0, torch.quint8))
save('c2.pt', torch.quantize_per_channel(x, sc * 2, zp, 0, torch.quint8))
EOF

"$DETCHECK" hash -q t1.pt -o t1.yaml || fail "hash t1.pt"
expect_grep 'name: w, group: weights, dtype: I8, shape: \[2, 3\]' t1.yaml
expect_grep '{name: w.qscheme, value: "per_tensor_affine"}' t1.yaml
expect_grep '{name: w.scale, value: "0.25"}' t1.yaml
expect_grep '{name: w.zero_point, value: "2"}' t1.yaml
expect_exit 0 "$DETCHECK" verify t1.pt --golden t1.yaml
expect_exit 1 "$DETCHECK" verify t2.pt --golden t1.yaml
expect_exit 1 "$DETCHECK" diff t1.pt t2.pt
expect_exit 1 "$DETCHECK" diff t1.pt t3.pt
"$DETCHECK" hash -q u8.pt -o u8.yaml || fail "hash u8.pt"
expect_grep 'name: w, group: weights, dtype: U8' u8.yaml
"$DETCHECK" hash -q i32.pt -o i32.yaml || fail "hash i32.pt"
expect_grep 'name: w, group: weights, dtype: I32' i32.yaml
"$DETCHECK" hash -q c1.pt -o c1.yaml || fail "hash c1.pt"
expect_grep 'name: w, group: weights, dtype: U8, shape: \[2, 3\]' c1.yaml
expect_grep 'name: w.scale, group: weights, dtype: F64, shape: \[2\]' c1.yaml
expect_grep 'name: w.zero_point, group: weights, dtype: I64, shape: \[2\]' c1.yaml
expect_grep '{name: w.axis, value: "0"}' c1.yaml
expect_exit 1 "$DETCHECK" diff c1.pt c2.pt
done_ok

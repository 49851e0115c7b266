# CLI: detcheck diff across formats on real files written by PyTorch and
# NumPy (../shared/fixtures/public, see its PROVENANCE.md): a non-contiguous
# (Fortran-order) .pth against a row-major safetensors of the same values,
# .pt against itself, recorded values (epoch) through manifests. Without
# those files: skipped (failed under DCK_REQUIRE_FIXTURES=1).
. "$DCK_TOP/tests/cli/lib.sh"
need_public_fixtures

# tensor_fortran: I64 [2, 3, 4] holding 1..24 in row-major order, stored with
# strides (1, 2, 6). EDIT: flat index -> new value.
mk_i64() { # mk_i64 FILE [FLAT VALUE]
python3 - "$@" <<'PY'
import json, struct, sys
vals = list(range(1, 25))
if len(sys.argv) > 2: vals[int(sys.argv[2])] = int(sys.argv[3])
b = struct.pack("<24q", *vals)
h = json.dumps({"tensor_fortran": {"dtype": "I64", "shape": [2, 3, 4], "data_offsets": [0, 192]}}).encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + b)
PY
}
mk_i64 rowmajor.safetensors
mk_i64 edited.safetensors 13 -100

expect_exit 0 "$DETCHECK" diff "$FIX/candle_fortran_tensor_3d.pth" rowmajor.safetensors
expect_grep "Result: equal (1 tensors, 1 equal)" out.txt
expect_exit 1 "$DETCHECK" diff --json "$FIX/candle_fortran_tensor_3d.pth" edited.safetensors
python3 -c "
import json; t=json.load(open('out.txt'))['tensors'][0]
assert t['status']=='differ' and t['diff_count']==1, t
assert t['first_index']==[1,0,1] and t['max_ulp']==114 and t['max_abs']==114, t
" || fail "strided .pth vs safetensors"; ok
# threads do not change the strided path either
expect_exit 1 "$DETCHECK" diff --json -t 1 "$FIX/candle_fortran_tensor_3d.pth" edited.safetensors
cp out.txt j1.json
expect_exit 1 "$DETCHECK" diff --json -t 5 "$FIX/candle_fortran_tensor_3d.pth" edited.safetensors
cmp -s out.txt j1.json || fail "threads change the JSON"; ok

# a PyTorch training checkpoint against itself, and against a module state dict
expect_exit 0 "$DETCHECK" diff "$FIX/checkpoint.pt" "$FIX/checkpoint.pt"
expect_exit 0 "$DETCHECK" diff "$FIX/torchtune_tiny_fair_checkpoint.pt" "$FIX/torchtune_tiny_fair_checkpoint.pt"
expect_grep "Result: equal (21 tensors, 21 equal)" out.txt
expect_exit 1 "$DETCHECK" diff "$FIX/checkpoint.pt" "$FIX/state_dict.pt"
expect_grep "missing_in_b  *model_state_dict.fc1.weight" out.txt
# NumPy: .npz member x against the .npy of the same values, under another name
expect_exit 1 "$DETCHECK" diff "$FIX/candle_test.npy" "$FIX/candle_test.npz"
expect_grep "missing_in_a  *x " out.txt
expect_grep "missing_in_b  *candle_test " out.txt

# recorded values: a manifest with another epoch differs, and says so
expect_exit 0 "$DETCHECK" hash -q -o c.yaml "$FIX/checkpoint.pt"
expect_exit 0 "$DETCHECK" diff c.yaml "$FIX/checkpoint.pt"
sed 's/value: "42"/value: "43"/' c.yaml > c43.yaml
expect_exit 1 "$DETCHECK" diff "$FIX/checkpoint.pt" c43.yaml
expect_grep "Value epoch: A 42, B 43" out.txt
expect_grep "1 value differs" out.txt
expect_exit 1 "$DETCHECK" diff --json c.yaml c43.yaml
python3 -c "
import json; d=json.load(open('out.txt'))
assert d['equal'] is False and d['values']==[{'name':'epoch','a':'42','b':'43'}], d['values']
assert d['summary']['equal']==5
" || fail "values json"; ok

done_ok

# CLI: `mpirun -np K detcheck hash --distributed` for K = 1..4 writes the
# manifest a single process writes (YAML and JSON), on a checkpoint whose
# rank cuts fall inside tensors (fragment stitching at unaligned offsets),
# with a tensor sharded over two files (column slices) and a zstd file. With
# a GPU, also --device cuda under mpirun. Needs no GPU.
. "$DCK_TOP/tests/cli/lib.sh"

command -v mpirun > /dev/null || skip "no mpirun"
# ci/gpu-check.sh on a machine without this build's Open MPI runtime
[ -z "${DCK_NO_MPI_TESTS:-}" ] || skip "$DCK_NO_MPI_TESTS"
export SOURCE_DATE_EPOCH=1700000000 # the manifest's "created"
# Open MPI allocates at init in ways LeakSanitizer reports (SANITIZE=1 builds)
export ASAN_OPTIONS=detect_leaks=0
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none

. "$DCK_TOP/tests/cli/distributed_ckpt.sh"

expect_exit 0 "$DETCHECK" hash -o single.yaml ck
expect_exit 0 "$DETCHECK" hash --json -o single.json ck
expect_grep "model.sharded" single.yaml

for k in 1 2 3 4; do
    expect_exit 0 mpirun --oversubscribe -np "$k" "$DETCHECK" hash --distributed -o "d$k.yaml" ck
    cmp single.yaml "d$k.yaml" || { diff single.yaml "d$k.yaml"; fail "K=$k manifest differs"; }
    ok
    expect_exit 0 mpirun --oversubscribe -np "$k" "$DETCHECK" hash --distributed --json --no-files ck
    "$DETCHECK" hash --json --no-files ck > single-nofiles.json
    cmp single-nofiles.json out.txt || fail "K=$k JSON manifest (no files) differs"
    ok
done
# More ranks than segments in some tensors, and ranks with nothing to do.
expect_exit 0 mpirun --oversubscribe -np 4 "$DETCHECK" hash --distributed ck/a.safetensors
"$DETCHECK" hash ck/a.safetensors > a.yaml
cmp a.yaml out.txt || fail "K=4 on one small file differs"
ok
# Only rank 0 writes: stdout holds exactly one manifest.
expect_exit 0 mpirun --oversubscribe -np 3 "$DETCHECK" hash --distributed ck
[ "$(grep -c '^root:' out.txt)" -eq 1 ] || fail "more than one rank wrote a manifest"
ok
# Bad input under mpirun: every rank fails, exit 2, one clear message.
printf 'garbage' > bad.safetensors
expect_exit 2 mpirun --oversubscribe -np 2 "$DETCHECK" hash --distributed bad.safetensors
expect_grep "bad.safetensors" err.txt
# Without a launcher --distributed is one rank.
expect_exit 0 "$DETCHECK" hash --distributed -o solo.yaml ck
cmp single.yaml solo.yaml || fail "--distributed without mpirun differs"
ok

if "$DETCHECK" hash --device cuda ck > /dev/null 2>&1; then
    # a GPU: ranks that share one combine with MPI, one rank per GPU with NCCL
    for k in 1 2; do
        expect_exit 0 mpirun --oversubscribe -np "$k" "$DETCHECK" hash --distributed --device cuda -o "g$k.yaml" ck
        cmp single.yaml "g$k.yaml" || fail "K=$k --device cuda manifest differs"
        ok
    done
else
    expect_exit 2 mpirun --oversubscribe -np 2 "$DETCHECK" hash --distributed --device cuda ck
    expect_grep "no CUDA device" err.txt
    expect_exit 0 mpirun --oversubscribe -np 2 "$DETCHECK" hash --distributed --device auto -o a2.yaml ck
    cmp single.yaml a2.yaml || fail "K=2 --device auto manifest differs"
    ok
fi
expect_exit 0 "$DETCHECK" hash --help
expect_grep "\-\-distributed" out.txt
done_ok

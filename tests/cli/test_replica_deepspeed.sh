# CLI: detcheck.ReplicaGuard on real DeepSpeed ZeRO-1 and ZeRO-2 engines, 3 CPU ranks
# (accelerator cpu, gloo; tests/cli/replica_deepspeed.py): the parameters
# (all-gathered after each step) are compared and the partitioned optimizer
# state is not (a correct run: no mismatch, though each rank holds other
# moments); one bit flipped in 2.weight on rank 2 is named at that step, with
# rank 2 and the tensor, on every rank; ZeRO-3 (the parameters partitioned)
# is refused. Needs the fixture venv's deepspeed:
# $DCK_MEGATRON_PYTHON, else `sh ci/venv.sh megatron`; skips when neither
# can be had. The package is python/src with this build's library.
. "$DCK_TOP/tests/cli/lib.sh"
if [ -n "${DCK_MEGATRON_PYTHON:-}" ]; then
    PY=$DCK_MEGATRON_PYTHON
else
    PY=$(sh "$DCK_TOP/ci/venv.sh" megatron 2> venv.log) ||
        skip "no python with deepspeed (sh ci/venv.sh megatron: $(tail -n 1 venv.log))"
fi
"$PY" -c "import deepspeed, torch" 2> /dev/null || skip "$PY cannot import deepspeed and torch"
lib="$DCK_TOP/$BUILD/libdetcheck.so.0"
[ -e "$lib" ] || fail "no $lib (make BUILD=$BUILD all)"
# an ASan build: its runtimes preloaded into the uninstrumented python, as test_python.sh does
if nm -D "$lib" 2> /dev/null | grep -q '__asan_init'; then
    asan=$(${CC:-cc} -print-file-name=libasan.so)
    ubsan=$(${CC:-cc} -print-file-name=libubsan.so)
    [ -f "$asan" ] || skip "libdetcheck is built with ASan and there is no libasan.so to preload into $PY"
    export LD_PRELOAD="$asan${ubsan:+ $ubsan}" ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0:verify_asan_link_order=0"
fi

DETCHECK_LIB=$lib PYTHONPATH="$DCK_TOP/python/src" OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=lo \
    "$PY" "$DCK_TOP/tests/cli/replica_deepspeed.py" "$PWD/ranks.json" > out.txt 2>&1 ||
    { tail -n 40 out.txt; fail "replica_deepspeed.py"; }
ok
"$PY" - ranks.json <<'EOF' || { cat ranks.json; fail "the guard on ZeRO-1/2"; }
import json, sys
doc = json.load(open(sys.argv[1]))
assert sorted(doc) == ["1", "2", "3"], sorted(doc)
for r, res in doc.pop("3").items():  # ZeRO-3: no rank holds a whole parameter
    assert "ZeRO-3" in res.get("refused", ""), (r, res)
for stage, got in doc.items():
    assert sorted(got) == ["0", "1", "2"], (stage, sorted(got))
    for r, res in got.items():
        # the optimizer state is partitioned (each rank a third of the flat fp32 copy) and set aside
        assert res["partitioned"] and all(s == [72] for s in res["partitioned"]), (stage, r, res["partitioned"])
        assert res["clean"] == [None] * 4, (stage, r, res["clean"])
        m = res["flip"]
        assert m is not None, (stage, r, res)
        assert m["step"] == 5 and m["ranks"] == [2] and m["tensor"] == "2.weight", (stage, r, m)
        assert m["kind"] == "parameter", (stage, r, m)
EOF
ok
done_ok

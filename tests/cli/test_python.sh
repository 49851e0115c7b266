# CLI: the Python package (python/). Installs it with pip from a copy of
# python/ into a temporary folder, bundling this build's library and CLI
# (DETCHECK_PREBUILT: the same setup.py path as `pip install ./python`, less
# the make), checks `python -m detcheck`, then runs its pytest suite
# (digests = the CLI's on every dtype, views, tied and empty tensors;
# manifests and verify; sharded digests on 1, 2, 4 gloo ranks; Recorder +
# bisect on a real loop; the HF Trainer and Lightning callbacks) and the
# example CI gate examples/python/test_determinism.py.
# Needs a python3 with torch, numpy and pytest: $DCK_TORCH_PYTHON, which
# .ci/run sets from `sh ci/venv.sh torch`; skips without one. An ASan build
# (SANITIZE=1) is loaded with libasan preloaded, or skipped saying why.
. "$DCK_TOP/tests/cli/lib.sh"
PY=${DCK_TORCH_PYTHON:-python3}
"$PY" -c "import torch, numpy, pytest, setuptools" 2> /dev/null ||
    skip "$PY cannot import torch, numpy, pytest and setuptools (set DCK_TORCH_PYTHON=\$(sh ci/venv.sh torch))"
lib="$DCK_TOP/$BUILD/libdetcheck.so.0"
[ -e "$lib" ] || fail "no $lib (make BUILD=$BUILD all)"

cp -r "$DCK_TOP/python" src
rm -rf src/build src/*.egg-info src/src/*.egg-info
DETCHECK_PREBUILT="$DCK_TOP/$BUILD" "$PY" -m pip install -q --no-build-isolation --no-deps --no-index \
    --disable-pip-version-check --target site ./src > pip.log 2>&1 || { cat pip.log; fail "pip install ./python"; }
[ -f site/detcheck/_native/libdetcheck.so.0 ] && [ -x site/bin/detcheck ] ||
    fail "the installed package does not bundle libdetcheck.so.0 and install the detcheck script"
ok

# preload the sanitizer runtimes an ASan build needs (Python itself is not
# instrumented: leak checks off)
if nm -D "$lib" 2> /dev/null | grep -q '__asan_init'; then
    asan=$(${CC:-cc} -print-file-name=libasan.so)
    ubsan=$(${CC:-cc} -print-file-name=libubsan.so)
    [ -f "$asan" ] || skip "libdetcheck is built with ASan and $(${CC:-cc} --version | head -n 1) has no libasan.so to preload into $PY"
    # (ours last: they override run.sh's detect_leaks=1)
    # a small quarantine: freed blocks held back by ASan (256 MiB by default)
    # would be counted by the tests that bound peak memory (stride-0 views)
    export LD_PRELOAD="$asan${ubsan:+ $ubsan}" ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0:verify_asan_link_order=0:quarantine_size_mb=16"
    PYTHONPATH=site "$PY" -c "import torch, detcheck; detcheck.digest(torch.ones(3))" > asan.log 2>&1 ||
        { cat asan.log; skip "libdetcheck is built with ASan and $PY does not run with libasan preloaded (see above)"; }
fi

# python -m detcheck runs the bundled CLI
PYTHONPATH=site "$PY" -m detcheck --version > out.txt 2>&1 || { cat out.txt; fail "python -m detcheck --version"; }
expect_grep '^detcheck ' out.txt
PYTHONPATH=site "$PY" -m detcheck hash > out.txt 2>&1 && fail "python -m detcheck hash (no path) succeeded"
ok

# the suite: DETCHECK is the CLI under test; the library is the bundled copy
export PYTHONPATH="$PWD/site:$DCK_TOP/python/tests" OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
unset DETCHECK_LIB
"$PY" -m pytest -q -p no:cacheprovider -rs "$DCK_TOP/python/tests" "$DCK_TOP/examples/python/test_determinism.py" \
    > pytest.log 2>&1 || { tail -n 80 pytest.log; fail "pytest"; }
tail -n 3 pytest.log
grep -q ' passed' pytest.log || fail "pytest ran nothing"
ok
# a skipped pytest test is a visible skip here too; the CUDA checks run
# only where a GPU is lent (ci/gpu-check.sh), noted without failing CI
grep '^SKIPPED' pytest.log | sed 's/^SKIPPED \[[0-9]*\] //' > skipped.txt || true
while read -r l; do
    case $l in
    *"no CUDA device"*) skip_note "pytest: $l" ;;
    *) skip_part "pytest: $l" ;;
    esac
done < skipped.txt
done_ok
